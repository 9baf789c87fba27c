/* dcxemu legacy post calls: ibv_post_send turns an RC QP's ibv_send_wr list
 * into the same send-queue slots the ibv_wr_* builders fill (wr.c), checked as
 * mlx5 checks them; ibv_post_recv posts into an RC QP's own receive queue. DC
 * QPs have no legacy path on mlx5. */
#define _GNU_SOURCE
#include "dcxemu_int.h"
#include "wr.h"
#include "opcode.h"

#include <errno.h>
#include <string.h>

/* ibv_wr_opcode -> model opcode; DCXEMU_OP_NONE: EINVAL (not an RC opcode). */
static const uint8_t legacy_op[] = {
    [IBV_WR_RDMA_WRITE]           = DCXEMU_OP_WRITE,
    [IBV_WR_RDMA_WRITE_WITH_IMM]  = DCXEMU_OP_WRITE_IMM,
    [IBV_WR_SEND]                 = DCXEMU_OP_SEND,
    [IBV_WR_SEND_WITH_IMM]        = DCXEMU_OP_SEND_IMM,
    [IBV_WR_RDMA_READ]            = DCXEMU_OP_READ,
    [IBV_WR_ATOMIC_CMP_AND_SWP]   = DCXEMU_OP_CMP_SWP,
    [IBV_WR_ATOMIC_FETCH_AND_ADD] = DCXEMU_OP_FETCH_ADD,
    [IBV_WR_LOCAL_INV]            = DCXEMU_OP_LOCAL_INV,
};

/* The data of a legacy WR: its SGEs, or with IBV_SEND_INLINE their bytes
 * copied now (ENOMEM beyond max_inline_data, as mlx5). */
static int legacy_data(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                       const struct ibv_send_wr *wr)
{
    uint32_t total  = 0;
    w->data_setters = 1;
    if ((wr->send_flags & IBV_SEND_INLINE) &&
        !dcxemu_opcode(w->opcode)->writes_local) {
        for (int i = 0; i < wr->num_sge; i++) {
            const struct ibv_sge *sg = &wr->sg_list[i];
            if (sg->length > qp->cap.max_inline_data - total) {
                return ENOMEM;
            }
            memcpy(wqe_inline(qp, w) + total, (void *)(uintptr_t)sg->addr,
                   sg->length);
            total += sg->length;
        }
        w->is_inline  = 1;
        w->inline_len = total;
        return 0;
    }
    for (int i = 0; i < wr->num_sge; i++) {
        if (wr->sg_list[i].length > 0) {
            wqe_sges(w)[w->num_sge++] = wr->sg_list[i];
        }
    }
    return 0;
}

/* The new slot w of a legacy WR: its scatter count (ENOMEM; every count before
 * RTS, whose limit is -1 there on mlx5), fields and data. */
static int legacy_fill(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                       const struct ibv_send_wr *wr)
{
    uint32_t op = w->opcode;
    if (!qp->been_rts || wr->num_sge < 0 ||
        (uint32_t)wr->num_sge > qp->cap.max_send_sge ||
        (wr->num_sge > 0 && wr->sg_list == NULL)) {
        return ENOMEM;
    }
    w->imm   = wr->imm_data;
    w->rkey  = wr->wr.rdma.rkey;
    w->raddr = wr->wr.rdma.remote_addr;
    if (dcxemu_opcode(op)->atomic) {
        w->rkey     = wr->wr.atomic.rkey;
        w->raddr    = wr->wr.atomic.remote_addr;
        w->cmp      = wr->wr.atomic.compare_add;
        w->swap_add = op == DCXEMU_OP_CMP_SWP ? wr->wr.atomic.swap :
                                                wr->wr.atomic.compare_add;
    } else if (op == DCXEMU_OP_LOCAL_INV) {
        w->rkey = wr->invalidate_rkey;
    }
    return legacy_data(qp, w, wr);
}

/* One ibv_send_wr into the batch (post_lock held), checked in mlx5's order:
 * opcode (EINVAL), room (ENOMEM), scatter count, inline size (ENOMEM).  A WR
 * that fails leaves no slot. */
static int legacy_wqe(struct dcxemu_qp *qp, const struct ibv_send_wr *wr)
{
    uint32_t op = DCXEMU_OP_NONE;
    int err;
    if (wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_SEND_WITH_INV) {
        return EOPNOTSUPP; /* valid on mlx5, not modelled */
    }
    if ((unsigned)wr->opcode < sizeof(legacy_op)) {
        op = legacy_op[wr->opcode];
    }
    if (op == DCXEMU_OP_NONE) {
        return EINVAL;
    }
    dcxemu_wqe_new(qp, op, wr->wr_id, wr->send_flags);
    if ((err = qp->batch_err) != 0) {
        qp->batch_err = 0;
        return err;
    }
    err = legacy_fill(qp, qp->cur, wr);
    if (err != 0) {
        qp->batch_n--;
    }
    return err;
}

/* ibv_post_send: an RC QP's WRs up to the first bad one are posted and run, as
 * on mlx5; *bad = that one.  DC QPs have no legacy path on mlx5 (EINVAL). */
int dcxemu_post_send_op(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    uint64_t nb          = 0;
    int err              = dcxemu_usable(), posted;
    if (err == 0 && (qp == NULL || !qp->is_rc)) {
        err = EINVAL;
    }
    if (err != 0) {
        if (bad != NULL) {
            *bad = wr;
        }
        return err;
    }
    pthread_mutex_lock(&qp->post_lock);
    dcxemu_batch_reset(qp);
    for (; wr != NULL; wr = wr->next) {
        if ((err = legacy_wqe(qp, wr)) != 0) {
            if (bad != NULL) {
                *bad = wr;
            }
            break;
        }
    }
    posted = qp->batch_n > 0;
    if (posted) {
        nb = dcxemu_batch_publish(qp);
    }
    dcxemu_batch_reset(qp);
    pthread_mutex_unlock(&qp->post_lock);
    if (posted) {
        dcxemu_batch_run(qp, nb);
    }
    return err;
}

int dcxemu_post_recv_op(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    if (qp != NULL && qp->is_rc) {
        return dcxemu_rq_post(qp, wr, bad);
    }
    /* DCIs have no receive queue; DCTs receive through their SRQ */
    if (bad != NULL) {
        *bad = wr;
    }
    return EINVAL;
}
