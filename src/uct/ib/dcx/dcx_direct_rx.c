/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Direct posting, the receive side (see dcx_direct_rx.h): the SRQ's WQEs
 * and the receive CQ's CQE64s as libmlx5 writes and parses them. An SRQ WQE
 * is a next segment (the index of the WQE after it in the free list) and
 * the data segments; software posts at the head of the list and relinks a
 * consumed WQE at its tail, the device takes WQEs from the head as the
 * doorbell record's counter allows. A receive CQE names the SRQ WQE it
 * consumed by its WQE counter.
 */
#include "dcx_direct_rx.h"
#include "dcx_direct_cq.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>

#include <endian.h>
#include <errno.h>
#include <string.h>


struct uct_dcx_direct_rx {
    uct_dcx_direct_cq_t cq; /* the receive CQ, polled through: rx.poll_cq */
    struct ibv_srq srq; /* posted to: rx.post_srq */
    const struct mlx5_cqe64 *cqe; /* the current one */

    /* the SRQ */
    void *srq_buf;
    unsigned wqe_shift; /* log2 of the WQE stride */
    int max_gs; /* data segments of a WQE */
    uint16_t head; /* the next WQE to post */
    uint16_t tail; /* the last free WQE: the list never runs empty */
    uint16_t last; /* the highest WQE index of the list */
    uint32_t counter; /* WQEs posted, as the doorbell record says */
    volatile __be32 *srq_dbrec;
    uint64_t *wrid; /* by WQE index: work request id */
};


/* --- the SRQ ------------------------------------------------------------ */

static UCS_F_ALWAYS_INLINE struct mlx5_wqe_srq_next_seg *
uct_dcx_direct_rx_wqe(uct_dcx_direct_rx_t *rx, unsigned index)
{
    return UCS_PTR_BYTE_OFFSET(rx->srq_buf, (size_t)index << rx->wqe_shift);
}

/* The WQE the device consumed goes back to the tail of the free list. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_rx_wqe_free(uct_dcx_direct_rx_t *rx, uint16_t index)
{
    uct_dcx_direct_rx_wqe(rx, rx->tail)->next_wqe_index = htobe16(index);
    rx->tail                                            = index;
}

/* libmlx5's mlx5_post_srq_recv: each request fills the WQE at the head and
 * the head follows its link; a gather list shorter than a WQE's ends with
 * an invalid lkey; the doorbell record counts the WQEs posted, after them. */
static int uct_dcx_direct_rx_post_srq_recv(struct ibv_srq *srq,
                                           struct ibv_recv_wr *wr,
                                           struct ibv_recv_wr **bad_wr)
{
    uct_dcx_direct_rx_t *rx = ucs_container_of(srq, uct_dcx_direct_rx_t, srq);
    struct mlx5_wqe_srq_next_seg *next;
    struct mlx5_wqe_data_seg *scat;
    unsigned nreq;
    int i, err = 0;

    for (nreq = 0; wr != NULL; ++nreq, wr = wr->next) {
        if (ucs_unlikely(wr->num_sge > rx->max_gs)) {
            err     = EINVAL;
            *bad_wr = wr;
            break;
        }
        if (ucs_unlikely(rx->head == rx->tail)) {
            err     = ENOMEM; /* the SRQ is full */
            *bad_wr = wr;
            break;
        }

        rx->wrid[rx->head] = wr->wr_id;
        next               = uct_dcx_direct_rx_wqe(rx, rx->head);
        rx->head           = be16toh(next->next_wqe_index);
        scat               = (struct mlx5_wqe_data_seg *)(next + 1);
        for (i = 0; i < wr->num_sge; ++i) {
            scat[i].byte_count = htobe32(wr->sg_list[i].length);
            scat[i].lkey       = htobe32(wr->sg_list[i].lkey);
            scat[i].addr       = htobe64(wr->sg_list[i].addr);
        }
        if (i < rx->max_gs) {
            scat[i].byte_count = 0;
            scat[i].lkey       = htobe32(MLX5_INVALID_LKEY);
            scat[i].addr       = 0;
        }
    }

    if (ucs_likely(nreq > 0)) {
        rx->counter += nreq;
        /* the WQEs before the doorbell record that gives them away */
        UCT_DCX_DIRECT_TO_DEVICE_FENCE();
        *rx->srq_dbrec = htobe32(rx->counter);
    }
    return err;
}


/* --- the CQE parser ----------------------------------------------------- */

static UCS_F_ALWAYS_INLINE uct_dcx_direct_rx_t *
uct_dcx_direct_rx(struct ibv_cq_ex *cqx)
{
    return ucs_container_of(cqx, uct_dcx_direct_rx_t, cq.cqx);
}

/* The device scattered a short message into the CQE, not into the buffer
 * (scatter-to-CQE, which libmlx5 asks for on DCTs where the device has it):
 * it goes to the WQE's data segments, as libmlx5's mlx5_copy_to_recv_srq. */
static UCS_F_NOINLINE enum ibv_wc_status
uct_dcx_direct_rx_scatter(uct_dcx_direct_rx_t *rx, uint16_t index,
                          const void *data, uint32_t size)
{
    struct mlx5_wqe_data_seg *scat =
            (struct mlx5_wqe_data_seg *)(uct_dcx_direct_rx_wqe(rx, index) + 1);
    uint32_t copy;
    int i;

    for (i = 0; i < rx->max_gs; ++i, ++scat) {
        copy = ucs_min(size, be32toh(scat->byte_count));
        memcpy((void *)(uintptr_t)be64toh(scat->addr), data, copy);
        size -= copy;
        if (size == 0) {
            return IBV_WC_SUCCESS;
        }
        data = UCS_PTR_BYTE_OFFSET(data, copy);
    }
    return IBV_WC_LOC_LEN_ERR;
}

/* The work request of the SRQ WQE a CQE consumed, whose WQE is free again;
 * 0 if the CQE names no WQE of the SRQ. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_direct_rx_cqe_wqe(uct_dcx_direct_rx_t *rx, const struct mlx5_cqe64 *cqe,
                          uint16_t *index_p)
{
    uint16_t index = be16toh(cqe->wqe_counter);

    if (ucs_unlikely(index > rx->last)) {
        ucs_error("dcx: receive cq 0x%x: cqe of srq wqe %u, the srq has %u",
                  rx->cq.cqn, index, rx->last + 1);
        return 0;
    }
    rx->cq.cqx.wr_id = rx->wrid[index];
    uct_dcx_direct_rx_wqe_free(rx, index);
    *index_p = index;
    return 1;
}

/* The next CQE the device wrote, in place: 0, or ENOENT when there is
 * none. */
static int uct_dcx_direct_rx_next_poll(struct ibv_cq_ex *cqx)
{
    uct_dcx_direct_rx_t *rx = uct_dcx_direct_rx(cqx);
    const struct mlx5_cqe64 *cqe;
    const struct mlx5_err_cqe *ecqe;
    uint16_t index;
    uint8_t op_own;

    for (;;) {
        cqe = uct_dcx_direct_cq_next(&rx->cq);
        if (cqe == NULL) {
            return ENOENT;
        }
        op_own  = cqe->op_own;
        rx->cqe = cqe;

        switch (op_own >> 4) {
        case MLX5_CQE_RESP_SEND_IMM:
        case MLX5_CQE_RESP_SEND:
        case MLX5_CQE_RESP_WR_IMM:
        case MLX5_CQE_RESP_SEND_INV:
            if (ucs_unlikely(!uct_dcx_direct_rx_cqe_wqe(rx, cqe, &index))) {
                continue;
            }
            if (ucs_likely(!(op_own & (MLX5_INLINE_SCATTER_32 |
                                       MLX5_INLINE_SCATTER_64)))) {
                cqx->status = IBV_WC_SUCCESS;
            } else if (op_own & MLX5_INLINE_SCATTER_32) {
                cqx->status = uct_dcx_direct_rx_scatter(rx, index, cqe,
                                                        be32toh(cqe->byte_cnt));
            } else {
                /* 64 bytes go to the first half of a 128-byte CQE, and dcx
                 * takes only CQs of 64-byte ones */
                ucs_error("dcx: receive cq 0x%x: a 64-byte scatter in a "
                          "64-byte cqe",
                          rx->cq.cqn);
                cqx->status = IBV_WC_GENERAL_ERR;
            }
            return 0;
        case MLX5_CQE_RESP_ERR:
            /* dcx registers no on-demand-paging memory: a page fault, which
             * libmlx5 would repost, is an error like any other here */
            if (ucs_unlikely(!uct_dcx_direct_rx_cqe_wqe(rx, cqe, &index))) {
                continue;
            }
            ecqe        = (const struct mlx5_err_cqe *)cqe;
            cqx->status = uct_dcx_direct_syndrome_status(ecqe->syndrome);
            return 0;
        default:
            ucs_error("dcx: receive cq 0x%x: unexpected cqe opcode %u",
                      rx->cq.cqn, op_own >> 4);
            continue;
        }
    }
}

static int uct_dcx_direct_rx_start_poll(struct ibv_cq_ex *cqx,
                                        struct ibv_poll_cq_attr *attr)
{
    return uct_dcx_direct_rx_next_poll(cqx);
}

static void uct_dcx_direct_rx_end_poll(struct ibv_cq_ex *cqx)
{
    uct_dcx_direct_cq_publish(&uct_dcx_direct_rx(cqx)->cq);
}

/* The current CQE's fields, as libmlx5's ibv_wc_read_* give them. */
static enum ibv_wc_opcode uct_dcx_direct_rx_read_opcode(struct ibv_cq_ex *cqx)
{
    switch (uct_dcx_direct_rx(cqx)->cqe->op_own >> 4) {
    case MLX5_CQE_RESP_WR_IMM:
        return IBV_WC_RECV_RDMA_WITH_IMM;
    case MLX5_CQE_RESP_SEND:
    case MLX5_CQE_RESP_SEND_IMM:
    case MLX5_CQE_RESP_SEND_INV:
        return IBV_WC_RECV;
    default:
        return 0;
    }
}

static uint32_t uct_dcx_direct_rx_read_vendor_err(struct ibv_cq_ex *cqx)
{
    return ((const struct mlx5_err_cqe *)uct_dcx_direct_rx(cqx)->cqe)
            ->vendor_err_synd;
}

static uint32_t uct_dcx_direct_rx_read_byte_len(struct ibv_cq_ex *cqx)
{
    return be32toh(uct_dcx_direct_rx(cqx)->cqe->byte_cnt);
}

static __be32 uct_dcx_direct_rx_read_imm_data(struct ibv_cq_ex *cqx)
{
    const struct mlx5_cqe64 *cqe = uct_dcx_direct_rx(cqx)->cqe;

    if ((cqe->op_own >> 4) == MLX5_CQE_RESP_SEND_INV) {
        /* the invalidated rkey, in host order */
        return (__be32)be32toh(cqe->imm_inval_pkey);
    }
    return cqe->imm_inval_pkey;
}

static unsigned int uct_dcx_direct_rx_read_wc_flags(struct ibv_cq_ex *cqx)
{
    const struct mlx5_cqe64 *cqe = uct_dcx_direct_rx(cqx)->cqe;
    unsigned int flags           = 0;

    switch (cqe->op_own >> 4) {
    case MLX5_CQE_RESP_WR_IMM:
    case MLX5_CQE_RESP_SEND_IMM:
        flags |= IBV_WC_WITH_IMM;
        break;
    case MLX5_CQE_RESP_SEND_INV:
        flags |= IBV_WC_WITH_INV;
        break;
    }
    if ((be32toh(cqe->flags_rqpn) >> 28) & 3) {
        flags |= IBV_WC_GRH;
    }
    return flags;
}

void uct_dcx_direct_rx_cq_arm(uct_dcx_direct_rx_t *rx, int solicited)
{
    uct_dcx_direct_cq_arm_db(&rx->cq, solicited);
}

void uct_dcx_direct_rx_cq_event(uct_dcx_direct_rx_t *rx)
{
    ++rx->cq.arm_sn;
}


/* --- taking over the receive CQ and the SRQ ------------------------------ */

/* The SRQ's layout: a fresh SRQ of libmlx5 is a free list 0 -> 1 -> ...
 * -> tail from head 0, with a doorbell record that counted nothing yet. */
static ucs_status_t uct_dcx_direct_rx_srq_layout(const uct_dcx_verbs_ops_t *ops,
                                                 struct ibv_srq *srq,
                                                 struct mlx5dv_srq *dv_srq,
                                                 const char **reason_p)
{
    struct mlx5dv_obj obj = {};

    obj.srq.in  = srq;
    obj.srq.out = dv_srq;
    if (ops->mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ) != 0) {
        *reason_p = "the provider describes no SRQ (mlx5dv_init_obj)";
        return UCS_ERR_UNSUPPORTED;
    }
    if (!ucs_is_pow2(dv_srq->stride) ||
        (dv_srq->stride < sizeof(struct mlx5_wqe_srq_next_seg) +
                                  sizeof(struct mlx5_wqe_data_seg))) {
        *reason_p = "an SRQ WQE stride dcx does not write";
        return UCS_ERR_UNSUPPORTED;
    }
    if ((dv_srq->head != 0) || (dv_srq->tail == 0) ||
        (dv_srq->tail > UINT16_MAX) || (*dv_srq->dbrec != 0)) {
        *reason_p = "an SRQ that was posted to, or of a size dcx does not "
                    "index";
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

ucs_status_t
uct_dcx_direct_rx_create(const uct_dcx_verbs_ops_t *ops, struct ibv_cq *cq,
                         struct ibv_srq *srq, uct_dcx_direct_rx_t **rx_p,
                         struct ibv_cq_ex **poll_cq_p,
                         struct ibv_srq **post_srq_p,
                         uct_dcx_post_srq_recv_func_t *post_srq_recv_p,
                         const char **reason_p)
{
    struct mlx5dv_srq dv_srq = {};
    uct_dcx_direct_rx_t *rx;
    ucs_status_t status;

    rx = ucs_calloc(1, sizeof(*rx), "dcx direct rx");
    if (rx == NULL) {
        *reason_p = "out of memory";
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_dcx_direct_cq_init(&rx->cq, ops, cq, reason_p);
    if (status != UCS_OK) {
        goto err_free_rx;
    }
    status = uct_dcx_direct_rx_srq_layout(ops, srq, &dv_srq, reason_p);
    if (status != UCS_OK) {
        goto err_free_rx;
    }

    rx->wrid = ucs_calloc(dv_srq.tail + 1, sizeof(*rx->wrid),
                          "dcx direct rx wrid");
    if (rx->wrid == NULL) {
        *reason_p = "out of memory";
        status    = UCS_ERR_NO_MEMORY;
        goto err_free_rx;
    }

    rx->srq_buf   = dv_srq.buf;
    rx->wqe_shift = ucs_ilog2(dv_srq.stride);
    rx->max_gs    = (dv_srq.stride - sizeof(struct mlx5_wqe_srq_next_seg)) /
                 sizeof(struct mlx5_wqe_data_seg);
    rx->head      = dv_srq.head;
    rx->tail      = dv_srq.tail;
    rx->last      = dv_srq.tail;
    rx->counter   = 0;
    rx->srq_dbrec = dv_srq.dbrec;

    rx->cq.cqx.start_poll      = uct_dcx_direct_rx_start_poll;
    rx->cq.cqx.next_poll       = uct_dcx_direct_rx_next_poll;
    rx->cq.cqx.end_poll        = uct_dcx_direct_rx_end_poll;
    rx->cq.cqx.read_opcode     = uct_dcx_direct_rx_read_opcode;
    rx->cq.cqx.read_vendor_err = uct_dcx_direct_rx_read_vendor_err;
    rx->cq.cqx.read_byte_len   = uct_dcx_direct_rx_read_byte_len;
    rx->cq.cqx.read_imm_data   = uct_dcx_direct_rx_read_imm_data;
    rx->cq.cqx.read_wc_flags   = uct_dcx_direct_rx_read_wc_flags;

    rx->srq.context     = srq->context;
    rx->srq.srq_context = srq->srq_context;
    rx->srq.pd          = srq->pd;
    rx->srq.handle      = srq->handle;

    *rx_p            = rx;
    *poll_cq_p       = &rx->cq.cqx;
    *post_srq_p      = &rx->srq;
    *post_srq_recv_p = uct_dcx_direct_rx_post_srq_recv;
    return UCS_OK;

err_free_rx:
    ucs_free(rx);
    return status;
}

void uct_dcx_direct_rx_destroy(uct_dcx_direct_rx_t *rx)
{
    ucs_free(rx->wrid);
    ucs_free(rx);
}
