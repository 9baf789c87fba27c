/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * What dcx's two CQE parsers (the send CQ's in dcx_direct.c, the receive
 * CQ's in dcx_direct_rx.c) share: rdma-core's barriers around doorbells and
 * CQEs, the CQ layout mlx5dv_init_obj reports and dcx parses, arming as
 * libmlx5 arms, and an error CQE's syndrome as libmlx5 reports it.
 */
#ifndef UCT_DCX_DIRECT_CQ_H_
#define UCT_DCX_DIRECT_CQ_H_

#include "../seam/dcx_seam.h"

#include <ucs/type/status.h>


/* The ordering rdma-core's providers use around doorbells and CQEs:
 * udma_to_device_barrier (WQEs before the doorbell record, CQEs consumed
 * before the consumer index), udma_from_device_barrier (a CQE's contents
 * after its owner bit) and mmio_flush_writes / mmio_wc_start (around the
 * doorbell's store to the UAR). */
#if defined(__x86_64__)
#define UCT_DCX_DIRECT_TO_DEVICE_FENCE()   asm volatile("" ::: "memory")
#define UCT_DCX_DIRECT_FROM_DEVICE_FENCE() asm volatile("lfence" ::: "memory")
#define UCT_DCX_DIRECT_MMIO_FLUSH()        asm volatile("sfence" ::: "memory")
#elif defined(__aarch64__)
#define UCT_DCX_DIRECT_TO_DEVICE_FENCE() asm volatile("dmb oshst" ::: "memory")
#define UCT_DCX_DIRECT_FROM_DEVICE_FENCE() \
    asm volatile("dmb oshld" ::: "memory")
#define UCT_DCX_DIRECT_MMIO_FLUSH() asm volatile("dsb st" ::: "memory")
#else
#define UCT_DCX_DIRECT_TO_DEVICE_FENCE()   __sync_synchronize()
#define UCT_DCX_DIRECT_FROM_DEVICE_FENCE() __sync_synchronize()
#define UCT_DCX_DIRECT_MMIO_FLUSH()        __sync_synchronize()
#endif
#define UCT_DCX_DIRECT_MMIO_WC_START() UCT_DCX_DIRECT_MMIO_FLUSH()

/* A CQ's doorbell record: the consumer index, then the arm word. */
#define UCT_DCX_DIRECT_CQ_SET_CI 0
#define UCT_DCX_DIRECT_CQ_ARM_DB 1


/**
 * The layout of @a cq, from mlx5dv_init_obj (which also tells libmlx5 that
 * the application polls it: libmlx5 no longer cleans it).
 *
 * @param [out] reason_p  why dcx cannot parse it, on failure.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED (no direct objects, CQEs other than
 *         64 bytes, a size other than a power of two).
 */
ucs_status_t
uct_dcx_direct_cq_layout(const uct_dcx_verbs_ops_t *ops, struct ibv_cq *cq,
                         struct mlx5dv_cq *dv_cq, const char **reason_p);

/* Arm a CQ for its next completion (@a solicited: a solicited one or an
 * error), with the consumer index and count of completion events the
 * application keeps: libmlx5's mlx5_arm_cq. */
void uct_dcx_direct_cq_arm_db(volatile __be32 *dbrec, void *cq_uar,
                              uint32_t cqn, uint32_t ci, uint32_t arm_sn,
                              int solicited);

/* An error CQE's syndrome as libmlx5 reports it. */
enum ibv_wc_status uct_dcx_direct_syndrome_status(uint8_t syndrome);

#endif
