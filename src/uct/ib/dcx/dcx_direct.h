/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Direct posting (UCX_DCX_POST=direct): dcx writes the WQEs of its DCIs into
 * the send queues libmlx5 allocated, rings their doorbells, and parses the
 * send CQ's CQE64s in place, with the layouts mlx5dv_init_obj reports.
 *
 * It has the shape of rdma-core's extended work-request API: a direct DCI's
 * qpx and mqpx are dcx's own struct ibv_qp_ex / struct mlx5dv_qp_ex, whose
 * function pointers (wr_start, wr_rdma_write, wr_set_inline_data,
 * wr_set_dc_addr, wr_raw_wqe, wr_complete, ...) write the WQE bytes as
 * libmlx5's builders do; the send CQ is polled through dcx's own struct
 * ibv_cq_ex (start_poll, next_poll, end_poll, read_vendor_err). So every
 * operation's code is the same on both paths, the choice is made once per
 * interface (which structure the pointers lead to), and a DCI has exactly
 * one writer: libmlx5's builders never touch the send queue of a direct
 * DCI, whose indices only dcx keeps. The send CQ, once dcx owns it
 * (mlx5dv_init_obj marks it so), is not cleaned by libmlx5 when a DCI is
 * reset or destroyed; dcx resets a DCI only after all its completions were
 * polled.
 */
#ifndef UCT_DCX_DIRECT_H_
#define UCT_DCX_DIRECT_H_

#include "../seam/dcx_seam.h"

#include <ucs/type/status.h>


typedef struct uct_dcx_direct uct_dcx_direct_t;
typedef struct uct_dcx_direct_sq uct_dcx_direct_sq_t;


/**
 * Take over polling and arming of @a cq, the interface's send CQ.
 *
 * @param [in]  compact_av  the device takes compact DC address vectors
 *                          (HCA cap compact_address_vector): 0, every DC
 *                          WQE carries the extended one.
 * @param [out] reason_p  why direct posting is unavailable, on failure.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED (no direct objects, or a CQ layout
 *         dcx does not parse), UCS_ERR_NO_MEMORY.
 */
ucs_status_t uct_dcx_direct_create(const uct_dcx_verbs_ops_t *ops,
                                   struct ibv_cq *cq, int compact_av,
                                   uct_dcx_direct_t **direct_p,
                                   const char **reason_p);

void uct_dcx_direct_destroy(uct_dcx_direct_t *direct);

/* The CQ the interface polls: dcx's CQE parser over the send CQ. */
struct ibv_cq_ex *uct_dcx_direct_poll_cq(uct_dcx_direct_t *direct);

/* Arm the send CQ for its next completion, as libmlx5 arms a CQ. */
void uct_dcx_direct_cq_arm(uct_dcx_direct_t *direct, int solicited);

/* A completion event of the send CQ was read. */
void uct_dcx_direct_cq_event(uct_dcx_direct_t *direct);

/* An address handle goes away: its address vector is not used again. */
void uct_dcx_direct_ah_forget(uct_dcx_direct_t *direct, struct ibv_ah *ah);


/**
 * The direct writer of a DCI's send queue.
 *
 * @param [in]  max_inline  inline bytes one WQE may carry (as the device
 *                          granted the DCI)
 * @param [in]  max_sge     gather entries one WQE may carry
 * @param [out] qpx_p, mqpx_p  the DCI's builders from now on.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED (a send queue layout dcx does not
 *         write; @a reason_p says which), UCS_ERR_NO_MEMORY.
 */
ucs_status_t
uct_dcx_direct_sq_create(uct_dcx_direct_t *direct, struct ibv_qp *qp,
                         size_t max_inline, unsigned max_sge,
                         uct_dcx_direct_sq_t **sq_p, struct ibv_qp_ex **qpx_p,
                         struct mlx5dv_qp_ex **mqpx_p, const char **reason_p);

void uct_dcx_direct_sq_destroy(uct_dcx_direct_sq_t *sq);

/* The DCI went through RESET: its send queue starts again at index 0, as
 * libmlx5 starts a QP's. */
void uct_dcx_direct_sq_reset(uct_dcx_direct_sq_t *sq);

#endif
