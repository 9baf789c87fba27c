/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Direct posting, the receive side (UCX_DCX_POST=direct): dcx links receive
 * WQEs into the DCT's SRQ and parses the receive CQ's CQE64s in place, with
 * the layouts mlx5dv_init_obj reports, as libmlx5 does for the same calls.
 *
 * It has the shape of rdma-core's API: the receive CQ is polled through
 * dcx's own struct ibv_cq_ex (start_poll, next_poll, end_poll, read_opcode,
 * read_byte_len, read_wc_flags, read_imm_data, read_vendor_err), and
 * receives are posted through dcx's own post_srq_recv on dcx's own struct
 * ibv_srq. So the receive code is the same on both paths, the choice is
 * made once per interface, and the SRQ has one writer: libmlx5 never posts
 * to it nor frees its WQEs once dcx owns it. libmlx5 does not clean the
 * receive CQ once its layout was handed out (mlx5dv_init_obj).
 */
#ifndef UCT_DCX_DIRECT_RX_H_
#define UCT_DCX_DIRECT_RX_H_

#include "../seam/dcx_seam.h"

#include <ucs/type/status.h>


typedef struct uct_dcx_direct_rx uct_dcx_direct_rx_t;

/* How receives are posted: libmlx5's (the SRQ's context ops) or dcx's. */
typedef int (*uct_dcx_post_srq_recv_func_t)(struct ibv_srq *srq,
                                            struct ibv_recv_wr *wr,
                                            struct ibv_recv_wr **bad_wr);


/**
 * Take over the receive CQ @a cq and the SRQ @a srq, on which nothing was
 * posted nor polled yet.
 *
 * @param [out] poll_cq_p       the CQ to poll from now on
 * @param [out] post_srq_p      the SRQ to post to from now on ...
 * @param [out] post_srq_recv_p ... and how
 * @param [out] reason_p        why direct receive is unavailable, on failure.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED (no direct objects, or a layout dcx
 *         does not parse), UCS_ERR_NO_MEMORY.
 */
ucs_status_t
uct_dcx_direct_rx_create(const uct_dcx_verbs_ops_t *ops, struct ibv_cq *cq,
                         struct ibv_srq *srq, uct_dcx_direct_rx_t **rx_p,
                         struct ibv_cq_ex **poll_cq_p,
                         struct ibv_srq **post_srq_p,
                         uct_dcx_post_srq_recv_func_t *post_srq_recv_p,
                         const char **reason_p);

void uct_dcx_direct_rx_destroy(uct_dcx_direct_rx_t *rx);

/* Arm the receive CQ for its next completion, as libmlx5 arms a CQ. */
void uct_dcx_direct_rx_cq_arm(uct_dcx_direct_rx_t *rx, int solicited);

/* A completion event of the receive CQ was read. */
void uct_dcx_direct_rx_cq_event(uct_dcx_direct_rx_t *rx);

#endif
