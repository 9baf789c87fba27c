/* dcxemu receive queues: shared receive queues (create, modify, query,
 * destroy, posting) and an RC QP's own receive queue, which is a ring of the
 * same table used by that QP alone. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- SRQ ---- */

static inline struct dcxemu_shm_srq_wqe *
srq_wqe(struct dcxemu_shm_srq *s, uint64_t i)
{
    return (struct dcxemu_shm_srq_wqe *)dcxemu_ptr(
            s->ring_off + (i % s->max_wr) * s->wqe_size);
}

static int
check_srq_attr(struct ibv_pd *pd, const struct ibv_srq_init_attr *init)
{
    int err = dcxemu_usable();
    if (err != 0) {
        return err;
    }
    if (pd == NULL || init == NULL || init->attr.max_wr == 0 ||
        init->attr.max_wr > DCXEMU_MAX_SRQ_WR ||
        init->attr.max_sge > DCXEMU_MAX_SRQ_SGE ||
        init->attr.srq_limit > init->attr.max_wr) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(dcxemu_ctx(pd->context)->dev_index)) {
        return EIO; /* a firmware command on a device in fatal mode */
    }
    return 0;
}

/* Fabric lock held: a free SRQ slot with a ring of max_wr descriptors for
 * max_sge SGEs each, made live; or -1. */
static int take_srq_slot(uint32_t max_wr, uint32_t max_sge, uint64_t pd_id)
{
    struct dcxemu_shm_srq *s;
    int idx = -1;
    for (int i = 0; i < DCXEMU_MAX_SRQS; i++) {
        if (!dcxemu_fab->srqs[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx < 0) {
        return -1;
    }
    s = &dcxemu_fab->srqs[idx];
    if (!s->lock_ready) {
        dcxemu_shm_mutex_init(
                &s->lock); /* first use of the slot: nobody can hold it */
        s->lock_ready = 1;
    }
    s->wqe_size = (uint32_t)(sizeof(struct dcxemu_shm_srq_wqe) +
                             max_sge * sizeof(struct ibv_sge));
    s->max_wr   = max_wr;
    s->ring_off = dcxemu_heap_alloc((uint64_t)s->max_wr * s->wqe_size);
    if (s->ring_off == 0) {
        return -1;
    }
    s->owner       = (uint16_t)dcxemu_me;
    s->owner_token = dcxemu_my_token;
    s->rq          = 0;
    s->in_use      = 1; /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->srq_hwm, (uint32_t)idx);
    s->pd_id      = pd_id;
    s->max_sge    = max_sge;
    s->limit      = 0;
    s->wake_owner = 0;
    s->head = s->tail = 0;
    atomic_store(&s->limit_event, 0);
    return idx;
}

DCXEMU_API struct ibv_srq *
dcxemu_ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
    struct dcxemu_srq *srq;
    uint32_t max = 1, desc = 32, max_sge;
    int idx, err;

    err = check_srq_attr(pd, init);
    if (err != 0) {
        goto err;
    }
    /* mlx5 sizing: queue of roundup_pow2(max_wr+1) entries holds one less;
     * descriptor of roundup_pow2(16 + 16*max_sge) bytes gives the written-back
     * max_sge */
    while (max < init->attr.max_wr + 1) {
        max <<= 1;
    }
    while (desc < 16 + 16 * (init->attr.max_sge ? init->attr.max_sge : 1)) {
        desc <<= 1;
    }
    max_sge = desc / 16 - 1;
    if (max_sge > DCXEMU_MAX_SRQ_SGE) {
        max_sge = DCXEMU_MAX_SRQ_SGE;
    }
    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        err = ENOMEM;
        goto err;
    }
    err = dcxemu_lock();
    if (err != 0) {
        goto err_free;
    }
    idx = take_srq_slot(max - 1, max_sge, ((struct dcxemu_pd *)pd)->pd_id);
    dcxemu_unlock();
    if (idx < 0) {
        err = ENOMEM;
        goto err_free;
    }
    srq->idx             = idx;
    srq->s               = &dcxemu_fab->srqs[idx];
    init->attr.max_wr    = srq->s->max_wr;
    init->attr.max_sge   = max_sge;
    srq->pd              = (struct dcxemu_pd *)pd;
    srq->srq.context     = pd->context;
    srq->srq.srq_context = init->srq_context;
    srq->srq.pd          = pd;
    srq->srq.handle      = (uint32_t)idx;
    pthread_mutex_init(&srq->srq.mutex, NULL);
    pthread_cond_init(&srq->srq.cond, NULL);
    atomic_fetch_add(&srq->pd->refcnt, 1);
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_srqs[idx] = srq;
    dcxemu_idx_set_add(&dcxemu_srq_set, (uint32_t)idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &srq->srq;

err_free:
    free(srq);
err:
    errno = err;
    return NULL;
}

/* ibv_create_srq_ex reaches this for anything but a plain PD-only request: only
 * basic SRQs exist on the model (no XRC, no tag matching). */
struct ibv_srq *dcxemu_create_srq_ex_op(struct ibv_context *context,
                                        struct ibv_srq_init_attr_ex *a)
{
    struct ibv_srq_init_attr basic;
    struct ibv_srq *srq;
    if (context == NULL || a == NULL ||
        (a->comp_mask &
         ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD)) ||
        !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || a->pd == NULL ||
        a->pd->context != context) {
        errno = EINVAL;
        return NULL;
    }
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        a->srq_type != IBV_SRQT_BASIC) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    basic.srq_context = a->srq_context;
    basic.attr        = a->attr;
    srq               = dcxemu_ibv_create_srq(a->pd, &basic);
    if (srq != NULL) {
        a->attr = basic.attr;
    }
    return srq;
}

DCXEMU_API int dcxemu_ibv_modify_srq(struct ibv_srq *ibsrq,
                                     struct ibv_srq_attr *attr, int mask)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err;
    if (ibsrq == NULL || attr == NULL ||
        (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (mask & IBV_SRQ_MAX_WR) {
        return EINVAL; /* mlx5 cannot resize an SRQ */
    }
    if (mask & IBV_SRQ_LIMIT) {
        if (attr->srq_limit > srq->s->max_wr) {
            return EINVAL;
        }
        if (dcxemu_is_fatal(dcxemu_ctx(ibsrq->context)->dev_index)) {
            return EIO; /* ARM_RQ */
        }
        if ((err = dcxemu_shm_lock(&srq->s->lock)) != 0) {
            return err;
        }
        srq->s->limit = attr->srq_limit;
        pthread_mutex_unlock(&srq->s->lock);
    }
    return 0;
}

DCXEMU_API int
dcxemu_ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err;
    if (ibsrq == NULL || attr == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    attr->max_wr    = srq->s->max_wr;
    attr->max_sge   = srq->s->max_sge;
    attr->srq_limit = srq->s->limit;
    return 0;
}

DCXEMU_API int dcxemu_ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err;
    if (ibsrq == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (atomic_load(&srq->refcnt) != 0) {
        return EBUSY;
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_srqs[srq->idx] = NULL;
    dcxemu_idx_set_del(&dcxemu_srq_set, (uint32_t)srq->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    if ((err = dcxemu_lock()) == 0) {
        if (srq->s->in_use &&
            dcxemu_owner_is_me(srq->s->owner, srq->s->owner_token)) {
            dcxemu_heap_free(srq->s->ring_off);
            srq->s->in_use = 0;
        }
        dcxemu_unlock();
    }
    atomic_fetch_sub(&srq->pd->refcnt, 1);
    free(srq);
    return 0;
}

/* Post a list of receive WRs into ring s (its lock taken here): 0, or errno
 * with *bad_wr = the first WR not posted. */
static int ring_post(struct dcxemu_shm_srq *s, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad_wr)
{
    int err = dcxemu_shm_lock(&s->lock);
    if (err != 0) {
        if (bad_wr)
            *bad_wr = wr;
        return err;
    }
    for (; wr != NULL; wr = wr->next) {
        struct dcxemu_shm_srq_wqe *w;
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_sge ||
            (wr->num_sge > 0 && wr->sg_list == NULL)) {
            err = EINVAL;
            break;
        }
        if (s->tail - s->head >= s->max_wr) {
            err = ENOMEM;
            break;
        }
        w          = srq_wqe(s, s->tail);
        w->wr_id   = wr->wr_id;
        w->num_sge = (uint32_t)wr->num_sge;
        if (wr->num_sge > 0) {
            memcpy(w->sge, wr->sg_list,
                   sizeof(struct ibv_sge) * (size_t)wr->num_sge);
        }
        __atomic_store_n(&s->tail, s->tail + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->lock);
    if (err && bad_wr) {
        *bad_wr = wr;
    }
    return err;
}

DCXEMU_API int dcxemu_srq_wake_owner(struct ibv_srq *ibsrq)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err;
    if (ibsrq == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0 ||
        (err = dcxemu_shm_lock(&srq->s->lock))) {
        return err;
    }
    srq->s->wake_owner = 1;
    pthread_mutex_unlock(&srq->s->lock);
    return 0;
}

int dcxemu_post_srq_recv_op(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad_wr)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err                = dcxemu_usable();
    if (err) {
        if (bad_wr)
            *bad_wr = wr;
        return err;
    }
    return ring_post(srq->s, wr, bad_wr);
}

/* ---------------------------------------------------------------- RC receive
 * queue ---- */

/* mlx5 sizing (providers/mlx5 mlx5_calc_rq_size): a descriptor of
 * roundup_pow2(16 * max(max_recv_sge, 1)) bytes, at most 512; the queue holds
 * roundup_pow2(max_recv_wr) of them and at least one 64-byte block.  The caps
 * are written back; no queue for max_recv_wr 0.  0 or errno. */
int dcxemu_rq_create(struct dcxemu_qp *qp, struct ibv_qp_cap *cap)
{
    uint32_t desc = 16, cnt = 1;
    int idx, err;
    qp->rq_idx = -1;
    if (cap->max_recv_wr == 0) {
        cap->max_recv_sge = 0;
        return 0;
    }
    if (cap->max_recv_wr > DCXEMU_MAX_QP_WR ||
        cap->max_recv_sge > DCXEMU_MAX_RQ_DESC / 16) {
        return EINVAL;
    }
    while (desc < 16 * (cap->max_recv_sge ? cap->max_recv_sge : 1)) {
        desc <<= 1;
    }
    while (cnt < cap->max_recv_wr) {
        cnt <<= 1;
    }
    if (cnt * desc < DCXEMU_SEND_WQE_BB) {
        cnt = DCXEMU_SEND_WQE_BB / desc;
    }
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    idx = take_srq_slot(cnt, desc / 16, qp->pd->pd_id);
    if (idx >= 0) {
        dcxemu_fab->srqs[idx].rq = 1;
    }
    dcxemu_unlock();
    if (idx < 0) {
        return ENOMEM;
    }
    qp->rq_idx        = idx;
    qp->rq            = &dcxemu_fab->srqs[idx];
    cap->max_recv_wr  = cnt;
    cap->max_recv_sge = desc / 16;
    return 0;
}

void dcxemu_rq_destroy(struct dcxemu_qp *qp)
{
    if (qp->rq == NULL || dcxemu_lock() != 0) {
        return;
    }
    if (qp->rq->in_use &&
        dcxemu_owner_is_me(qp->rq->owner, qp->rq->owner_token)) {
        dcxemu_heap_free(qp->rq->ring_off);
        qp->rq->in_use = 0;
    }
    dcxemu_unlock();
    qp->rq = NULL;
}

/* A QP in ERR completes every receive WQE of its own queue with WR_FLUSH_ERR,
 * in order, as hardware flushes its RQ (an SRQ's WQEs stay: they belong to the
 * SRQ); a QP going to RESET drops them (discard).  Called by the owner; 1 if a
 * channel event was raised. */
int dcxemu_rq_flush(struct dcxemu_qp *qp, int discard)
{
    struct dcxemu_shm_srq *s = qp->rq;
    struct dcxemu_shm_cqe cqe;
    int raised = 0;
    if (s == NULL || dcxemu_lock() != 0) {
        return 0;
    }
    if (dcxemu_shm_lock(&s->lock) == 0) {
        memset(&cqe, 0, sizeof(cqe));
        cqe.status     = IBV_WC_WR_FLUSH_ERR;
        cqe.vendor_err = 0x05; /* the model's WR_FLUSH syndrome */
        cqe.opcode     = IBV_WC_RECV;
        cqe.qp_num     = qp->qpx.qp_base.qp_num;
        if (discard) {
            s->head = s->tail;
        }
        for (; s->head != s->tail; s->head++) {
            cqe.wr_id = srq_wqe(s, s->head)->wr_id;
            cqe.ts_ns = dcxemu_now_ns();
            raised |= dcxemu_cq_push(qp->recv_cq->s, &cqe);
        }
        pthread_mutex_unlock(&s->lock);
    }
    dcxemu_unlock();
    return raised;
}

/* ibv_post_recv on an RC QP's own queue.  As mlx5: a QP in RESET takes no
 * receive (EINVAL, its scatter limit is -1 there), a QP with an SRQ or without
 * a queue has no room (ENOMEM); a QP in ERR flushes what it gets. */
int dcxemu_rq_post(struct dcxemu_qp *qp, struct ibv_recv_wr *wr,
                   struct ibv_recv_wr **bad_wr)
{
    int err = dcxemu_usable();
    if (err == 0 && qp->rq == NULL) {
        err = ENOMEM;
    }
    if (err == 0 && atomic_load(&qp->hw_state) == IBV_QPS_RESET) {
        err = EINVAL;
    }
    if (err != 0) {
        if (bad_wr)
            *bad_wr = wr;
        return err;
    }
    err = ring_post(qp->rq, wr, bad_wr);
    if (atomic_load(&qp->hw_state) == IBV_QPS_ERR && dcxemu_rq_flush(qp, 0)) {
        dcxemu_deliver_events();
    }
    return err;
}

DCXEMU_API int dcxemu_qp_wake_owner(struct ibv_qp *ibqp)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    if (ibqp == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (qp->rq == NULL) {
        return 0; /* no receive queue of its own */
    }
    if ((err = dcxemu_shm_lock(&qp->rq->lock)) != 0) {
        return err;
    }
    qp->rq->wake_owner = 1;
    pthread_mutex_unlock(&qp->rq->lock);
    return 0;
}
