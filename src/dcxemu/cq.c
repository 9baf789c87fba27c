/* dcxemu completion queues: the shared CQE ring (producer and purge), polling
 * (classic and extended), arming, create and destroy. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic uint32_t cq_serial = 1;

/* ---------------------------------------------------------------- CQ ---- */

static inline struct dcxemu_shm_cqe *cq_ring(struct dcxemu_shm_cq *s)
{
    return (struct dcxemu_shm_cqe *)dcxemu_ptr(s->ring_off);
}

/* Producer side, fabric lock held.  Returns 1 if the owner must be woken
 * (event, overrun, or an owner that hears of every CQE). */
int dcxemu_cq_push(struct dcxemu_shm_cq *s, const struct dcxemu_shm_cqe *cqe)
{
    int wake = 0;
    DCXEMU_TRACE("cqe qp=0x%x %s opcode=%u len=%u wr_id=0x%llx status=%u",
                 cqe->qp_num, cqe->is_send ? "send" : "recv", cqe->opcode,
                 cqe->byte_len, (unsigned long long)cqe->wr_id, cqe->status);
    if (dcxemu_shm_lock(&s->lock) != 0) {
        return 0;
    }
    if (s->overrun) {
        pthread_mutex_unlock(&s->lock);
        return 0; /* a CQ in error takes no more CQEs */
    }
    if (s->tail - s->head >= s->capacity) {
        if (s->ignore_overrun) {
            s->head++; /* hardware overwrites the oldest entry */
        } else {
            s->overrun       = 1;
            s->overrun_event = 1;
            pthread_mutex_unlock(&s->lock);
            return 1;
        }
    }
    cq_ring(s)[s->tail % s->capacity] = *cqe;
    __atomic_store_n(&s->tail, s->tail + 1, __ATOMIC_RELEASE);
    if (s->armed == 1 ||
        (s->armed == 2 && (cqe->solicited || cqe->status != IBV_WC_SUCCESS))) {
        s->armed = 0;
        atomic_fetch_add(&s->events_raised, 1);
        wake = 1;
    }
    wake |= s->wake_owner != 0;
    pthread_mutex_unlock(&s->lock);
    return wake;
}

/* Remove the unpolled CQEs of one QP (RESET / destroy); CQ lock taken here. */
void dcxemu_cq_purge_qpn(struct dcxemu_shm_cq *s, uint32_t qpn)
{
    struct dcxemu_shm_cqe *r = cq_ring(s);
    uint64_t w;
    if (qpn == 0 || dcxemu_shm_lock(&s->lock) != 0) {
        return;
    }
    w = s->head;
    for (uint64_t i = s->head; i < s->tail; i++) {
        struct dcxemu_shm_cqe *e = &r[i % s->capacity];
        if (e->qp_num != qpn) {
            if (w != i) {
                r[w % s->capacity] = *e;
            }
            w++;
        }
    }
    s->tail = w;
    pthread_mutex_unlock(&s->lock);
}

struct sq_free {
    uint32_t qpn;
    uint64_t idx;
};
#define MAX_FREES 32

static void note_free(struct sq_free *f, int *n, const struct dcxemu_shm_cqe *e)
{
    if (!e->is_send) {
        return;
    }
    for (int i = 0; i < *n; i++) {
        if (f[i].qpn == e->qp_num) {
            f[i].idx = e->sq_index;
            return;
        }
    }
    if (*n < MAX_FREES) {
        f[*n].qpn = e->qp_num;
        f[*n].idx = e->sq_index;
        (*n)++;
    }
}

/* A polled send CQE releases its WQE's slot and every earlier one (the SQ is
 * FIFO): the QP's builders see the room at once.  Done here, on the QP's
 * counter, so that polling does not call back into the execution stages that
 * produce the CQEs. */
static void release_sq_slots(uint32_t qpn, uint64_t idx)
{
    struct dcxemu_qp *qp;
    pthread_mutex_lock(&dcxemu_reg_lock);
    qp = dcxemu_local_qps[qpn & (DCXEMU_MAX_QPS - 1)];
    if (qp != NULL && qp->qpx.qp_base.qp_num == qpn &&
        atomic_load(&qp->sq_freed) < idx + 1) {
        atomic_store(&qp->sq_freed, idx + 1);
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
}

static void apply_frees(struct sq_free *f, int n)
{
    for (int i = 0; i < n; i++) {
        release_sq_slots(f[i].qpn, f[i].idx);
    }
}

/* solicited: NULL, or where each CQE's solicited event bit goes */
static int poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc,
                   uint8_t *solicited)
{
    struct dcxemu_cq *cq    = (struct dcxemu_cq *)ibcq;
    struct dcxemu_shm_cq *s = cq->s;
    struct sq_free frees[MAX_FREES];
    int nf = 0, n = 0;
    if (dcxemu_usable() != 0 || num_entries < 0 ||
        (num_entries > 0 && wc == NULL)) {
        return -1;
    }
    if (dcxemu_shm_lock(&s->lock) != 0) {
        return -1;
    }
    while (n < num_entries && s->head != s->tail) {
        const struct dcxemu_shm_cqe *e = &cq_ring(s)[s->head % s->capacity];
        struct ibv_wc *w               = &wc[n++];
        memset(w, 0, sizeof(*w));
        w->wr_id          = e->wr_id;
        w->status         = (enum ibv_wc_status)e->status;
        w->opcode         = (enum ibv_wc_opcode)e->opcode;
        w->vendor_err     = e->vendor_err;
        w->byte_len       = e->byte_len;
        w->imm_data       = e->imm;
        w->qp_num         = e->qp_num;
        w->src_qp         = e->src_qp;
        w->wc_flags       = e->wc_flags;
        w->pkey_index     = e->pkey_index;
        w->slid           = e->slid;
        w->sl             = e->sl;
        w->dlid_path_bits = e->dlid_path_bits;
        if (solicited != NULL) {
            solicited[n - 1] = e->solicited;
        }
        note_free(frees, &nf, e);
        s->head++;
    }
    pthread_mutex_unlock(&s->lock);
    apply_frees(frees, nf);
    return n;
}

int dcxemu_poll_cq_op(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
    return poll_cq(ibcq, num_entries, wc, NULL);
}

DCXEMU_API int dcxemu_poll_cq_solicited(struct ibv_cq *cq, int num_entries,
                                        struct ibv_wc *wc, uint8_t *solicited)
{
    return poll_cq(cq, num_entries, wc, solicited);
}

int dcxemu_req_notify_cq_op(struct ibv_cq *ibcq, int solicited_only)
{
    struct dcxemu_cq *cq    = (struct dcxemu_cq *)ibcq;
    struct dcxemu_shm_cq *s = cq->s;
    int fire                = 0, err;
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if ((err = dcxemu_shm_lock(&s->lock)) != 0) {
        return err;
    }
    /* The arm carries the consumer index: CQEs already waiting fire at once. */
    for (uint64_t i = s->head; i < s->tail && !fire; i++) {
        const struct dcxemu_shm_cqe *e = &cq_ring(s)[i % s->capacity];
        fire = !solicited_only || e->solicited || e->status != IBV_WC_SUCCESS;
    }
    if (fire) {
        s->armed = 0;
        atomic_fetch_add(&s->events_raised, 1);
    } else {
        s->armed = solicited_only ? 2 : 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (fire) {
        dcxemu_deliver_events();
    }
    return 0;
}

static inline struct dcxemu_cq *xcq(struct ibv_cq_ex *c)
{
    return (struct dcxemu_cq *)c;
}

/* Extended polling.  The shared ring lock is held only while one CQE is taken
 * (and consumed at once, which is also when mlx5 advances the SQ tail); the
 * start..end critical section is a process-local lock.  So a poller that posts
 * from inside its poll loop, with its send CQEs going to this very CQ, never
 * blocks a producer that holds the fabric lock. */
static int take_current(struct dcxemu_cq *cq)
{
    struct dcxemu_shm_cq *s = cq->s;
    struct sq_free f[1];
    int nf = 0, err;
    if ((err = dcxemu_shm_lock(&s->lock)) != 0) {
        return err;
    }
    if (s->head == s->tail) {
        pthread_mutex_unlock(&s->lock);
        return ENOENT;
    }
    cq->cur = cq_ring(s)[s->head % s->capacity];
    s->head++;
    pthread_mutex_unlock(&s->lock);
    cq->cqx.status = (enum ibv_wc_status)cq->cur.status;
    cq->cqx.wr_id  = cq->cur.wr_id;
    note_free(f, &nf, &cq->cur);
    apply_frees(f, nf);
    return 0;
}

static int start_poll_op(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
    struct dcxemu_cq *cq = xcq(c);
    int err;
    if (attr == NULL || attr->comp_mask != 0) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (!cq->single_threaded) {
        pthread_mutex_lock(&cq->poll_lock);
    }
    err = take_current(cq);
    if (err != 0 && !cq->single_threaded) {
        pthread_mutex_unlock(
                &cq->poll_lock); /* no end_poll after a failed start_poll */
    }
    return err;
}

static int next_poll_op(struct ibv_cq_ex *c)
{
    return take_current(xcq(c));
}

static void end_poll_op(struct ibv_cq_ex *c)
{
    struct dcxemu_cq *cq = xcq(c);
    if (!cq->single_threaded) {
        pthread_mutex_unlock(&cq->poll_lock);
    }
}

static enum ibv_wc_opcode rd_opcode(struct ibv_cq_ex *c)
{
    return (enum ibv_wc_opcode)xcq(c)->cur.opcode;
}
static uint32_t rd_vendor_err(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.vendor_err;
}
static uint32_t rd_byte_len(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.byte_len;
}
static __be32 rd_imm(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.imm;
}
static uint32_t rd_qp_num(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.qp_num;
}
static uint32_t rd_src_qp(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.src_qp;
}
static unsigned int rd_wc_flags(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.wc_flags;
}
static uint32_t rd_slid(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.slid;
}
static uint8_t rd_sl(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.sl;
}
static uint8_t rd_path_bits(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.dlid_path_bits;
}
static uint64_t rd_ts(struct ibv_cq_ex *c)
{
    return xcq(c)->cur.ts_ns;
}
static uint16_t rd_cvlan(struct ibv_cq_ex *c)
{
    (void)c;
    return 0;
}
static uint32_t rd_flow_tag(struct ibv_cq_ex *c)
{
    (void)c;
    return 0;
}
static void rd_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *t)
{
    (void)c;
    memset(t, 0, sizeof(*t));
}

static int
check_cq_attr(struct ibv_context *context, const struct ibv_cq_init_attr_ex *a)
{
    int err = dcxemu_usable();
    if (err != 0) {
        return err;
    }
    if (context == NULL || a == NULL) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        return EIO; /* a firmware command on a device in fatal mode */
    }
    if (a->comp_mask &
        ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
        return EINVAL;
    }
    if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (a->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
                                IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))) {
        return EINVAL;
    }
    if (a->wc_flags & ~(uint64_t)IBV_CREATE_CQ_SUP_WC_FLAGS) {
        return EOPNOTSUPP;
    }
    if (a->cqe < 1 || a->cqe > DCXEMU_MAX_CQE || (int)a->comp_vector < 0 ||
        (int)a->comp_vector >= context->num_comp_vectors ||
        (a->channel != NULL && a->channel->context != context)) {
        return EINVAL;
    }
    return 0;
}

/* Fabric lock held: a free CQ slot with a ring of cap CQEs on the heap, made
 * live; or -1. */
static int take_cq_slot(uint32_t cap, int ignore_overrun)
{
    struct dcxemu_shm_cq *s = NULL;
    int idx                 = -1;
    for (int i = 0; i < DCXEMU_MAX_CQS; i++) {
        if (!dcxemu_fab->cqs[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx < 0) {
        return -1;
    }
    s = &dcxemu_fab->cqs[idx];
    if (!s->lock_ready) {
        dcxemu_shm_mutex_init(
                &s->lock); /* first use of the slot: nobody can hold it */
        s->lock_ready = 1;
    }
    s->ring_off = dcxemu_heap_alloc((uint64_t)cap *
                                    sizeof(struct dcxemu_shm_cqe));
    if (s->ring_off == 0) {
        return -1;
    }
    s->owner       = (uint16_t)dcxemu_me;
    s->owner_token = dcxemu_my_token;
    s->in_use      = 1; /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->cq_hwm, (uint32_t)idx);
    s->capacity = cap;
    s->armed    = 0;
    s->head = s->tail = 0;
    s->overrun        = 0;
    s->overrun_event  = 0;
    s->ignore_overrun = (uint16_t)ignore_overrun;
    s->wake_owner     = 0;
    atomic_store(&s->events_raised, 0);
    return idx;
}

/* The process-local CQ over slot idx: the extended-poll calls, and only the
 * readers asked for. */
static void init_local_cq(struct dcxemu_cq *cq, struct ibv_context *context,
                          const struct ibv_cq_init_attr_ex *a, int idx,
                          uint32_t cap)
{
    struct dcxemu_shm_cq *s = &dcxemu_fab->cqs[idx];
    cq->idx                 = idx;
    cq->s                   = s;
    cq->wc_flags            = a->wc_flags;
    cq->single_threaded     = (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                          (a->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
    cq->cqx.context    = context;
    cq->cqx.channel    = a->channel;
    cq->cqx.cq_context = a->cq_context;
    cq->cqx.handle     = atomic_fetch_add(&cq_serial, 1);
    cq->cqx.cqe        = (int)(cap - 1);
    pthread_mutex_init(&cq->cqx.mutex, NULL);
    pthread_cond_init(&cq->cqx.cond, NULL);
    pthread_mutex_init(&cq->poll_lock, NULL);
    cq->cqx.start_poll      = start_poll_op;
    cq->cqx.next_poll       = next_poll_op;
    cq->cqx.end_poll        = end_poll_op;
    cq->cqx.read_opcode     = rd_opcode;
    cq->cqx.read_vendor_err = rd_vendor_err;
    cq->cqx.read_wc_flags   = rd_wc_flags;
    /* unrequested readers stay NULL, as on mlx5 */
    if (a->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
        cq->cqx.read_byte_len = rd_byte_len;
    if (a->wc_flags & IBV_WC_EX_WITH_IMM)
        cq->cqx.read_imm_data = rd_imm;
    if (a->wc_flags & IBV_WC_EX_WITH_QP_NUM)
        cq->cqx.read_qp_num = rd_qp_num;
    if (a->wc_flags & IBV_WC_EX_WITH_SRC_QP)
        cq->cqx.read_src_qp = rd_src_qp;
    if (a->wc_flags & IBV_WC_EX_WITH_SLID)
        cq->cqx.read_slid = rd_slid;
    if (a->wc_flags & IBV_WC_EX_WITH_SL)
        cq->cqx.read_sl = rd_sl;
    if (a->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
        cq->cqx.read_dlid_path_bits = rd_path_bits;
    if (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
        cq->cqx.read_completion_ts = rd_ts;
    if (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
        cq->cqx.read_completion_wallclock_ns = rd_ts;
    if (a->wc_flags & IBV_WC_EX_WITH_CVLAN)
        cq->cqx.read_cvlan = rd_cvlan;
    if (a->wc_flags & IBV_WC_EX_WITH_FLOW_TAG)
        cq->cqx.read_flow_tag = rd_flow_tag;
    if (a->wc_flags & IBV_WC_EX_WITH_TM_INFO)
        cq->cqx.read_tm_info = rd_tm_info;
}

struct ibv_cq_ex *dcxemu_create_cq_ex_op(struct ibv_context *context,
                                         struct ibv_cq_init_attr_ex *a)
{
    struct dcxemu_cq *cq;
    uint32_t cap = 1;
    int idx, err;

    err = check_cq_attr(context, a);
    if (err != 0) {
        goto err;
    }
    while (cap < a->cqe + 1) {
        cap <<= 1;
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        err = ENOMEM;
        goto err;
    }
    err = dcxemu_lock();
    if (err != 0) {
        goto err_free;
    }
    idx = take_cq_slot(cap,
                       (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                               (a->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN));
    dcxemu_unlock();
    if (idx < 0) {
        err = ENOMEM;
        goto err_free;
    }
    init_local_cq(cq, context, a, idx, cap);
    if (a->channel != NULL) {
        pthread_mutex_lock(&context->mutex);
        a->channel->refcnt++;
        pthread_mutex_unlock(&context->mutex);
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_cqs[idx] = cq;
    dcxemu_idx_set_add(&dcxemu_cq_set, (uint32_t)idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &cq->cqx;

err_free:
    free(cq);
err:
    errno = err;
    return NULL;
}

DCXEMU_API struct ibv_cq_ex *
dcxemu_ibv_create_cq_ex(struct ibv_context *context,
                        struct ibv_cq_init_attr_ex *cq_attr)
{
    return dcxemu_create_cq_ex_op(context, cq_attr);
}

DCXEMU_API struct ibv_cq *
dcxemu_ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                     struct ibv_comp_channel *channel, int comp_vector)
{
    struct ibv_cq_init_attr_ex a;
    struct ibv_cq_ex *cq;
    if (cqe < 1 || comp_vector < 0) {
        errno = EINVAL;
        return NULL;
    }
    memset(&a, 0, sizeof(a));
    a.cqe         = (uint32_t)cqe;
    a.cq_context  = cq_context;
    a.channel     = channel;
    a.comp_vector = (uint32_t)comp_vector;
    a.wc_flags    = IBV_WC_STANDARD_FLAGS;
    cq            = dcxemu_create_cq_ex_op(context, &a);
    return cq != NULL ? ibv_cq_ex_to_cq(cq) : NULL;
}

DCXEMU_API int dcxemu_ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct dcxemu_cq *cq = (struct dcxemu_cq *)ibcq;
    int err;
    if (ibcq == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (atomic_load(&cq->refcnt) != 0) {
        return EBUSY;
    }
    /* like the kernel ABI: wait until every event gotten has been acked */
    pthread_mutex_lock(&ibcq->mutex);
    while (ibcq->comp_events_completed != cq->events_gotten) {
        dcxemu_test_cq_destroy_wait(1);
        pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
        dcxemu_test_cq_destroy_wait(-1);
    }
    pthread_mutex_unlock(&ibcq->mutex);
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_cqs[cq->idx] = NULL;
    dcxemu_idx_set_del(&dcxemu_cq_set, (uint32_t)cq->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    if ((err = dcxemu_lock()) == 0) {
        if (cq->s->in_use &&
            dcxemu_owner_is_me(cq->s->owner, cq->s->owner_token)) {
            dcxemu_heap_free(cq->s->ring_off);
            cq->s->ring_off = 0;
            cq->s->in_use   = 0;
        }
        dcxemu_unlock();
    }
    if (ibcq->channel != NULL) {
        pthread_mutex_lock(&ibcq->context->mutex);
        ibcq->channel->refcnt--;
        pthread_mutex_unlock(&ibcq->context->mutex);
    }
    free(cq);
    return 0;
}

DCXEMU_API int dcxemu_cq_wake_owner(struct ibv_cq *ibcq)
{
    struct dcxemu_cq *cq = (struct dcxemu_cq *)ibcq;
    int err;
    if (ibcq == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0 || (err = dcxemu_shm_lock(&cq->s->lock))) {
        return err;
    }
    cq->s->wake_owner = 1;
    pthread_mutex_unlock(&cq->s->lock);
    return 0;
}
