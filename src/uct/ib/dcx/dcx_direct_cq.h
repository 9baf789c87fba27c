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

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <endian.h>


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


/* A CQ dcx polls in place: the layout mlx5dv_init_obj reports, the consumer
 * index, the count of completion events, and the struct ibv_cq_ex it is
 * polled through (its functions are the parser's). */
typedef struct uct_dcx_direct_cq {
    struct ibv_cq_ex cqx;
    void *buf;
    uint32_t cqe_cnt; /* a power of two */
    uint32_t ci; /* consumer index */
    volatile __be32 *dbrec;
    void *uar;
    uint32_t cqn;
    uint32_t arm_sn; /* completion events read, as libmlx5 counts them */
} uct_dcx_direct_cq_t;


/**
 * Take over polling @a cq (mlx5dv_init_obj, which also tells libmlx5 that
 * the application polls it: libmlx5 no longer cleans it).
 *
 * @param [out] reason_p  why dcx cannot parse it, on failure.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED (no direct objects, CQEs other than
 *         64 bytes, a size other than a power of two).
 */
ucs_status_t uct_dcx_direct_cq_init(uct_dcx_direct_cq_t *dcq,
                                    const uct_dcx_verbs_ops_t *ops,
                                    struct ibv_cq *cq, const char **reason_p);

/* Arm the CQ for its next completion (@a solicited: a solicited one or an
 * error), with dcx's consumer index and count of completion events:
 * libmlx5's mlx5_arm_cq. */
void uct_dcx_direct_cq_arm_db(uct_dcx_direct_cq_t *dcq, int solicited);

/* The next CQE the device wrote, consumed, or NULL: the owner bit says
 * whose it is, as the consumer index's pass does. */
static UCS_F_ALWAYS_INLINE struct mlx5_cqe64 *
uct_dcx_direct_cq_next(uct_dcx_direct_cq_t *dcq)
{
    struct mlx5_cqe64 *cqe = UCS_PTR_BYTE_OFFSET(
            dcq->buf, (size_t)(dcq->ci & (dcq->cqe_cnt - 1)) << 6);
    uint8_t op_own = cqe->op_own;

    if (((op_own >> 4) == MLX5_CQE_INVALID) ||
        ((op_own & MLX5_CQE_OWNER_MASK) ^ !!(dcq->ci & dcq->cqe_cnt))) {
        return NULL;
    }
    ++dcq->ci;
    UCT_DCX_DIRECT_FROM_DEVICE_FENCE(); /* its contents after its owner */
    return cqe;
}

/* What was polled is published: the device may write over it. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_cq_publish(uct_dcx_direct_cq_t *dcq)
{
    UCT_DCX_DIRECT_TO_DEVICE_FENCE();
    dcq->dbrec[UCT_DCX_DIRECT_CQ_SET_CI] = htobe32(dcq->ci & 0xffffff);
}

/* An error CQE's syndrome as libmlx5 reports it. */
enum ibv_wc_status uct_dcx_direct_syndrome_status(uint8_t syndrome);

#endif
