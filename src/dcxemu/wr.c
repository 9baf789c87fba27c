/* dcxemu work-request building: the ibv_wr_* / mlx5dv_wr_* builders and
 * setters, raw WQE decode, wr_start / wr_complete / wr_abort, and the batch
 * calls the legacy post path (post.c) shares. */
#define _GNU_SOURCE
#include "dcxemu_int.h"
#include "wr.h"
#include "opcode.h"
#include "mlx5_wqe.h"
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- builders
 * ---- */

static void latch(struct dcxemu_qp *qp, int err)
{
    if (qp->batch_err == 0) {
        qp->batch_err = err;
    }
}

static int wqe_finished(const struct dcxemu_wqe *w)
{
    return w->data_setters == 1 && w->addr_setters == 1;
}

/* A new slot of the batch: an RC QP's WQE goes to the peer it is connected to,
 * so its address is complete at once. */
void dcxemu_wqe_new(struct dcxemu_qp *qp, uint32_t op, uint64_t wr_id,
                    uint32_t flags)
{
    struct dcxemu_wqe *w;
    if (qp->batch_err) {
        return;
    }
    if (qp->cur != NULL && !wqe_finished(qp->cur)) {
        latch(qp, EINVAL); /* previous WR lacks its data or address setter */
        return;
    }
    if (qp->sq_posted - atomic_load(&qp->sq_freed) + qp->batch_n >=
        qp->cap.max_send_wr) {
        latch(qp, ENOMEM);
        return;
    }
    w = slot(qp, qp->sq_posted + qp->batch_n);
    memset(w, 0, sizeof(*w));
    w->wr_id  = wr_id;
    w->flags  = flags;
    w->opcode = op;
    if (qp->is_rc) {
        w->addr_setters  = 1;
        w->dctn          = qp->dest_qpn;
        w->dlid          = qp->av.dlid;
        w->is_global     = qp->av.is_global;
        w->sgid_index    = qp->av.grh.sgid_index;
        w->hop_limit     = qp->av.grh.hop_limit;
        w->traffic_class = qp->av.grh.traffic_class;
        w->dgid          = qp->av.grh.dgid;
    }
    qp->batch_n++;
    qp->cur = w;
}

static void wr_new(struct ibv_qp_ex *q, uint32_t op)
{
    dcxemu_wqe_new(QP(q), op, q->wr_id, q->wr_flags);
}

static struct dcxemu_wqe *setter_target(struct dcxemu_qp *qp, int data)
{
    struct dcxemu_wqe *w = qp->cur;
    if (qp->batch_err) {
        return NULL;
    }
    if (w == NULL || (data ? w->data_setters : w->addr_setters) != 0) {
        latch(qp, EINVAL); /* setter without a builder, or a duplicate setter */
        return NULL;
    }
    return w;
}

static void b_send(struct ibv_qp_ex *q)
{
    wr_new(q, DCXEMU_OP_SEND);
}
static void b_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
    wr_new(q, DCXEMU_OP_SEND_IMM);
    if (!QP(q)->batch_err)
        QP(q)->cur->imm = imm;
}
static void b_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
    wr_new(q, DCXEMU_OP_WRITE);
    if (!QP(q)->batch_err) {
        QP(q)->cur->rkey  = rkey;
        QP(q)->cur->raddr = raddr;
    }
}
static void
b_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, __be32 imm)
{
    wr_new(q, DCXEMU_OP_WRITE_IMM);
    if (!QP(q)->batch_err) {
        QP(q)->cur->rkey  = rkey;
        QP(q)->cur->raddr = raddr;
        QP(q)->cur->imm   = imm;
    }
}
static void b_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
    wr_new(q, DCXEMU_OP_READ);
    if (!QP(q)->batch_err) {
        QP(q)->cur->rkey  = rkey;
        QP(q)->cur->raddr = raddr;
    }
}
static void b_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr,
                      uint64_t cmp, uint64_t swp)
{
    wr_new(q, DCXEMU_OP_CMP_SWP);
    if (!QP(q)->batch_err) {
        QP(q)->cur->rkey     = rkey;
        QP(q)->cur->raddr    = raddr;
        QP(q)->cur->cmp      = cmp;
        QP(q)->cur->swap_add = swp;
    }
}
static void
b_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t add)
{
    wr_new(q, DCXEMU_OP_FETCH_ADD);
    if (!QP(q)->batch_err) {
        QP(q)->cur->rkey     = rkey;
        QP(q)->cur->raddr    = raddr;
        QP(q)->cur->swap_add = add;
    }
}
/* Valid on a DCI in mlx5 but not executed by the model yet: refused, never
 * silently dropped. */
static void b_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    (void)rkey;
    latch(QP(q), EOPNOTSUPP);
}
/* LOCAL_INV runs on the loopback RC QP (it invalidates an indirect mkey); the
 * model does not execute it on a DCI. */
static void b_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    struct dcxemu_qp *qp = QP(q);
    if (!qp->is_rc) {
        latch(qp, EOPNOTSUPP);
        return;
    }
    wr_new(q, DCXEMU_OP_LOCAL_INV);
    if (!qp->batch_err) {
        qp->cur->rkey         = rkey;
        qp->cur->data_setters = qp->cur->addr_setters =
                1; /* no setters: complete as is */
    }
}

static struct dcxemu_wqe *umr_new(struct mlx5dv_qp_ex *d, uint32_t op,
                                  struct mlx5dv_mkey *mkey, uint32_t access,
                                  uint32_t n, uint32_t limit)
{
    const uint32_t ok = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    struct dcxemu_qp *qp = QPDV(d);
    struct dcxemu_wqe *w;
    uint32_t max_entries;
    wr_new(&qp->qpx, op);
    if (qp->batch_err) {
        return NULL;
    }
    w               = qp->cur;
    w->data_setters = w->addr_setters = 1; /* the builder is the whole WR */
    if (!(w->flags & IBV_SEND_INLINE)) {
        latch(qp, EOPNOTSUPP);
        return NULL;
    }
    if (mkey == NULL || (access & ~ok)) {
        latch(qp, EINVAL);
        return NULL;
    }
    if ((mkey->lkey & 0xff) != 0 && !dcxemu_cfg.mkey_update_tag) {
        latch(qp, EOPNOTSUPP); /* a tag needs the kernel's MKEY_UPDATE_TAG
                                  capability */
        return NULL;
    }
    max_entries =
            dcxemu_fab->mkeys[((struct dcxemu_mkey *)mkey)->idx].max_entries;
    /* one descriptor of an interleaved mkey holds the repeat header */
    if (n > limit || n > max_entries ||
        (op == DCXEMU_OP_UMR_INTERLEAVED && n + 1 > max_entries)) {
        latch(qp, ENOMEM);
        return NULL;
    }
    w->rkey       = mkey->lkey;
    w->umr_access = access;
    w->umr_n      = n;
    return w;
}

static void b_mr_interleaved(struct mlx5dv_qp_ex *d, struct mlx5dv_mkey *mkey,
                             uint32_t access, uint32_t repeat, uint16_t n,
                             struct mlx5dv_mr_interleaved *data)
{
    struct dcxemu_qp *qp = QPDV(d);
    struct dcxemu_wqe *w;
    if (n > 0 && data == NULL) {
        latch(qp, EINVAL);
        return;
    }
    w = umr_new(d, DCXEMU_OP_UMR_INTERLEAVED, mkey, access, n,
                qp->umr_max > 0 ? qp->umr_max - 1 : 0);
    if (w == NULL) {
        return;
    }
    w->umr_repeat = repeat;
    for (uint32_t i = 0; i < n; i++) {
        struct dcxemu_mkey_entry *e = &umr_entries(qp, w)[i];
        e->addr                     = data[i].addr;
        e->lkey                     = data[i].lkey;
        /* hardware fields are 16 bits wide and silently truncated */
        e->bytes  = data[i].bytes_count & 0xffff;
        e->stride = (data[i].bytes_count + data[i].bytes_skip) & 0xffff;
    }
}

static void b_mr_list(struct mlx5dv_qp_ex *d, struct mlx5dv_mkey *mkey,
                      uint32_t access, uint16_t n, struct ibv_sge *sge)
{
    struct dcxemu_qp *qp = QPDV(d);
    struct dcxemu_wqe *w;
    if (n > 0 && sge == NULL) {
        latch(qp, EINVAL);
        return;
    }
    w = umr_new(d, DCXEMU_OP_UMR_LIST, mkey, access, n, qp->umr_max);
    if (w == NULL) {
        return;
    }
    w->umr_repeat = 1;
    for (uint32_t i = 0; i < n; i++) {
        struct dcxemu_mkey_entry *e = &umr_entries(qp, w)[i];
        e->addr                     = sge[i].addr;
        e->lkey                     = sge[i].lkey;
        e->bytes                    = sge[i].length;
        e->stride                   = 0;
    }
}
static void b_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
                      const struct ibv_mw_bind_info *info)
{
    (void)mw;
    (void)rkey;
    (void)info;
    latch(QP(q), EOPNOTSUPP);
}

static void
s_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
    struct dcxemu_wqe *w = setter_target(QP(q), 1);
    if (w == NULL) {
        return;
    }
    w->data_setters++;
    if (len > 0) {
        struct ibv_sge *s = wqe_sges(w);
        s[0].lkey         = lkey;
        s[0].addr         = addr;
        s[0].length       = len;
        w->num_sge        = 1;
    }
}

static void
s_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *list)
{
    struct dcxemu_qp *qp = QP(q);
    struct dcxemu_wqe *w = setter_target(qp, 1);
    if (w == NULL) {
        return;
    }
    if (n > qp->cap.max_send_sge) {
        latch(qp, ENOMEM);
        return;
    }
    if (n > 0 && list == NULL) {
        latch(qp, EINVAL);
        return;
    }
    w->data_setters++;
    for (size_t i = 0; i < n; i++) {
        if (list[i].length > 0) {
            wqe_sges(w)[w->num_sge++] = list[i];
        }
    }
}

static void s_inline(struct ibv_qp_ex *q, void *addr, size_t len)
{
    struct dcxemu_qp *qp = QP(q);
    struct dcxemu_wqe *w = setter_target(qp, 1);
    if (w == NULL) {
        return;
    }
    if (len > qp->cap.max_inline_data) {
        latch(qp, ENOMEM);
        return;
    }
    if (len > 0 && addr == NULL) {
        latch(qp, EINVAL);
        return;
    }
    w->data_setters++;
    w->is_inline = 1;
    if (len > 0) {
        memcpy(wqe_inline(qp, w), addr,
               len); /* the buffer is reusable on return */
    }
    w->inline_len = (uint32_t)len;
}

static void
s_inline_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *bufs)
{
    struct dcxemu_qp *qp = QP(q);
    struct dcxemu_wqe *w = setter_target(qp, 1);
    size_t total         = 0;
    if (w == NULL) {
        return;
    }
    if (n > 0 && bufs == NULL) {
        latch(qp, EINVAL);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        total += bufs[i].length;
        if (total > qp->cap.max_inline_data ||
            (bufs[i].length > 0 && bufs[i].addr == NULL)) {
            latch(qp, total > qp->cap.max_inline_data ? ENOMEM : EINVAL);
            return;
        }
    }
    w->data_setters++;
    w->is_inline = 1;
    total        = 0;
    for (size_t i = 0; i < n; i++) {
        if (bufs[i].length > 0) {
            memcpy(wqe_inline(qp, w) + total, bufs[i].addr, bufs[i].length);
        }
        total += bufs[i].length;
    }
    w->inline_len = (uint32_t)total;
}

static void s_dc_addr(struct mlx5dv_qp_ex *d, struct ibv_ah *ah, uint32_t dctn,
                      uint64_t key)
{
    struct dcxemu_qp *qp = QPDV(d);
    struct dcxemu_wqe *w = setter_target(qp, 0);
    if (w == NULL) {
        return;
    }
    if (ah == NULL) {
        latch(qp, EINVAL);
        return;
    }
    /* the AV is copied now: the AH may be destroyed right after this call */
    w->addr_setters++;
    w->dlid          = ((struct dcxemu_ah *)ah)->attr.dlid;
    w->is_global     = ((struct dcxemu_ah *)ah)->attr.is_global;
    w->sgid_index    = ((struct dcxemu_ah *)ah)->attr.grh.sgid_index;
    w->hop_limit     = ((struct dcxemu_ah *)ah)->attr.grh.hop_limit;
    w->traffic_class = ((struct dcxemu_ah *)ah)->attr.grh.traffic_class;
    w->dgid          = ((struct dcxemu_ah *)ah)->attr.grh.dgid;
    w->dctn          = dctn & 0xffffff;
    w->dc_key        = key;
}

/* A stream id must name one of the DCI's streams (a DCI without streams has
 * stream 0 only). */
static int stream_valid(struct dcxemu_qp *qp, uint16_t stream_id)
{
    return stream_id < dcxemu_streams_num(qp);
}

static void s_dc_addr_stream(struct mlx5dv_qp_ex *d, struct ibv_ah *ah,
                             uint32_t dctn, uint64_t key, uint16_t stream_id)
{
    struct dcxemu_qp *qp = QPDV(d);
    if (qp->cur != NULL && !qp->batch_err && !stream_valid(qp, stream_id)) {
        latch(qp, EINVAL);
        return;
    }
    s_dc_addr(d, ah, dctn, key);
    if (!qp->batch_err) {
        qp->cur->stream_id = stream_id;
    }
}

/* mlx5dv_wr_raw_wqe (rdma-core v44 providers/mlx5/qp.c:mlx5_wr_raw_wqe): the
 * caller's WQE is copied as it is, ds = qpn_ds[5:0] 16-byte units; only the WQE
 * index is replaced. Signaling is the control segment's CQ_UPDATE bit
 * (sq_sig_all is applied by rdma-core's own builders only). The device's WQE
 * decoder (mlx5_wqe.c) reads it as the QP's kind; the model executes NOPs and
 * atomics: standard, or masked with 4- or 8-byte operands (unless ext atomics
 * are off), with one data segment for the response.  Anything else is a
 * malformed WQE for the model: it completes with LOC_QP_OP_ERR when it
 * executes, as the HCA reports a WQE it cannot parse; it is never executed
 * partly. */
#define RAW_MAX_BYTES 128 /* the largest WQE the model accepts: 8 units */

/* The stream of a raw WQE: its control segment's, checked when it runs; a DCI
 * without streams ignores the field, as the HCA does. */
static uint16_t
raw_stream(struct dcxemu_qp *qp, const struct dcxemu_mlx5_wqe *m)
{
    return qp->streams != NULL ? m->stream_id : 0;
}

static int
raw_decode(struct dcxemu_qp *qp, struct dcxemu_wqe *w, const uint8_t *b)
{
    struct dcxemu_mlx5_wqe m;
    int ret;

    /* the caller's buffer is ds * 16 bytes: a queue that never wraps it */
    ret = dcxemu_mlx5_wqe_decode(b, RAW_MAX_BYTES / MLX5_SEND_WQE_BB, 0,
                                 qp->is_rc ? DCXEMU_MLX5_QP_RC :
                                             DCXEMU_MLX5_QP_DCI,
                                 RAW_MAX_BYTES, &m);
    if (ret == 0) {
        ret = dcxemu_mlx5_wqe_check_av(&m,
                                       qp->is_rc ? DCXEMU_MLX5_QP_RC :
                                                   DCXEMU_MLX5_QP_DCI,
                                       dcxemu_cfg.compact_av);
    }
    if (m.ds == 0 || m.ds * 16u > RAW_MAX_BYTES ||
        m.qpn != qp->qpx.qp_base.qp_num) {
        return -1; /* no WQE, or one of another QP */
    }
    if (m.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) {
        w->flags |= IBV_SEND_SIGNALED;
    }
    if (ret == 0 && m.opcode == MLX5_OPCODE_NOP) {
        w->stream_id = raw_stream(qp, &m);
        w->opcode    = DCXEMU_OP_NOP;
        w->num_sge   = 0;
        return 0;
    }
    if (ret != 0 || !m.has_atomic || m.num_sge != 1 ||
        (m.masked && dcxemu_cfg.no_ext_atomics) || qp->cap.max_send_sge < 1) {
        return -1; /* the model executes atomics only */
    }
    w->stream_id    = raw_stream(qp, &m);
    w->dc_key       = m.av.dc_key;
    w->dctn         = m.av.dctn;
    w->dlid         = m.av.rlid;
    w->addr_setters = 1;
    w->raddr        = m.raddr;
    w->rkey         = m.rkey;
    w->raw_masked   = m.masked;
    w->raw_size     = (uint8_t)m.atomic_size;
    w->swap_add     = m.swap_add;
    w->cmp          = m.compare;
    w->swap_mask    = m.swap_mask;
    w->cmp_mask     = m.compare_mask;
    w->opcode       = (m.opcode == MLX5_OPCODE_ATOMIC_CS ||
                 m.opcode == MLX5_OPCODE_ATOMIC_MASKED_CS) ?
                              DCXEMU_OP_CMP_SWP :
                              DCXEMU_OP_FETCH_ADD;
    /* data segment: where the response goes */
    wqe_sges(w)[0].length = m.sge[0].length;
    wqe_sges(w)[0].lkey   = m.sge[0].lkey;
    wqe_sges(w)[0].addr   = m.sge[0].addr;
    w->num_sge            = 1;
    w->data_setters       = 1;
    return 0;
}

static void b_raw_wqe(struct mlx5dv_qp_ex *d, const void *wqe)
{
    struct dcxemu_qp *qp = QPDV(d);
    struct dcxemu_wqe *w;
    if (wqe == NULL) {
        latch(qp, EINVAL);
        return;
    }
    wr_new(&qp->qpx, DCXEMU_OP_CMP_SWP);
    if (qp->batch_err) {
        return;
    }
    w        = qp->cur;
    w->raw   = 1;
    w->flags = 0; /* wr_flags do not apply: the control segment says it all */
    if (raw_decode(qp, w, wqe) != 0) {
        w->raw_bad = 1;
        w->num_sge = 0;
        w->dctn    = 0;
    }
    w->data_setters = w->addr_setters = 1; /* a raw WQE is complete by itself */
}

/* A WQE the mlx5 face could not decode, or one the model refused: a WR of the
 * batch that executes nothing and completes with LOC_QP_OP_ERR when its turn
 * comes, behind every older WR, and moves the QP to ERR (on a DCI with streams
 * too: it names no stream).  Its CQE then comes in send-queue order, as the
 * HCA completes a WQE it cannot parse. */
DCXEMU_API void dcxemu_wr_malformed(struct ibv_qp_ex *q)
{
    struct dcxemu_qp *qp = QP(q);
    struct dcxemu_wqe *w;
    wr_new(q, DCXEMU_OP_CMP_SWP);
    if (qp->batch_err) {
        return;
    }
    w               = qp->cur;
    w->raw          = 1;
    w->raw_bad      = 1;
    w->flags        = 0; /* an error completion is written unsignaled too */
    w->num_sge      = 0;
    w->dctn         = 0; /* no target: no target's delay holds it */
    w->stream_id    = UINT16_MAX;
    w->data_setters = w->addr_setters = 1;
}

/* A DCI created without MLX5DV_QP_EX_WITH_RAW_WQE: rdma-core leaves the pointer
 * NULL; the model refuses the call instead of crashing. */
static void b_raw_wqe_unrequested(struct mlx5dv_qp_ex *d, const void *wqe)
{
    (void)wqe;
    latch(QPDV(d), EOPNOTSUPP);
}

static void wr_start(struct ibv_qp_ex *q)
{
    struct dcxemu_qp *qp = QP(q);
    pthread_mutex_lock(&qp->post_lock);
    qp->batch_err = 0;
    qp->batch_n   = 0;
    qp->cur       = NULL;
}

void dcxemu_batch_reset(struct dcxemu_qp *qp)
{
    qp->batch_err = 0;
    qp->batch_n   = 0;
    qp->cur       = NULL;
}

/* Publish the batch's WQEs (post_lock held): the time they may run from, 0 in
 * immediate mode. */
uint64_t dcxemu_batch_publish(struct dcxemu_qp *qp)
{
    /* deferred: the whole batch becomes executable after one delay in (0,
     * DEFER_US] */
    uint64_t nb = dcxemu_cfg.deferred ?
                          dcxemu_now_ns() +
                                  1000 * (1 + dcxemu_random() %
                                                      dcxemu_cfg.defer_us) :
                          0;
    for (uint32_t i = 0; i < qp->batch_n; i++) {
        struct dcxemu_wqe *w = slot(qp, qp->sq_posted + i);
        w->not_before_ns     = nb;
        DCXEMU_TRACE("post qp=0x%x op=%s len=%llu wr_id=0x%llx flags=0x%x",
                     qp->qpx.qp_base.qp_num, dcxemu_opcode(w->opcode)->name,
                     (unsigned long long)wqe_len(w),
                     (unsigned long long)w->wr_id, w->flags);
    }
    __atomic_store_n(&qp->sq_posted, qp->sq_posted + qp->batch_n,
                     __ATOMIC_RELEASE);
    return nb;
}

/* After a publication (post_lock released): run the queue now, or let the
 * engine run it from nb on. */
void dcxemu_batch_run(struct dcxemu_qp *qp, uint64_t nb)
{
    if (!dcxemu_cfg.deferred) {
        dcxemu_qp_progress(qp);
    } else if (nb != 0) {
        /* only publish: the engine executes from nb on (an existing deadline
         * already covers earlier WQEs, and the queue is FIFO; with streams,
         * the batch may run before a waiting stream) */
        uint64_t d;
        pthread_mutex_lock(&qp->exec_lock);
        d = atomic_load(&qp->deadline_ns);
        if (d == 0 || (qp->streams != NULL && nb < d)) {
            atomic_store(&qp->deadline_ns, nb);
        }
        pthread_mutex_unlock(&qp->exec_lock);
        dcxemu_engine_kick();
    }
}

static int wr_complete(struct ibv_qp_ex *q)
{
    struct dcxemu_qp *qp = QP(q);
    int err              = qp->batch_err;
    uint64_t nb          = 0;
    if (err == 0 && qp->cur != NULL && !wqe_finished(qp->cur)) {
        err = EINVAL;
    }
    if (err == 0 && !qp->been_rts) {
        err = EINVAL;
    }
    if (err == 0) {
        err = dcxemu_usable();
    }
    if (err == 0 && qp->batch_n > 0) {
        nb = dcxemu_batch_publish(qp);
    }
    dcxemu_batch_reset(qp);
    pthread_mutex_unlock(&qp->post_lock);
    if (err == 0) {
        dcxemu_batch_run(qp, nb);
    }
    return err;
}

static void wr_abort(struct ibv_qp_ex *q)
{
    struct dcxemu_qp *qp = QP(q);
    dcxemu_batch_reset(qp);
    pthread_mutex_unlock(&qp->post_lock);
}

/* ---------------------------------------------------------------- installation
 * ---- */

/* What every QP with a send queue has: the data setters and the batch calls. */
static void install_common(struct dcxemu_qp *qp)
{
    qp->qpx.wr_set_sge              = s_sge;
    qp->qpx.wr_set_sge_list         = s_sge_list;
    qp->qpx.wr_set_inline_data      = s_inline;
    qp->qpx.wr_set_inline_data_list = s_inline_list;
    qp->qpx.wr_start                = wr_start;
    qp->qpx.wr_complete             = wr_complete;
    qp->qpx.wr_abort                = wr_abort;
    qp->qpx.wr_local_inv            = b_local_inv;
    qp->qpx.wr_bind_mw              = b_bind_mw;
}

/* The data builders an RC QP and a DCI share. */
static void install_data(struct dcxemu_qp *qp)
{
    qp->qpx.wr_send             = b_send;
    qp->qpx.wr_send_imm         = b_send_imm;
    qp->qpx.wr_send_inv         = b_send_inv;
    qp->qpx.wr_rdma_write       = b_write;
    qp->qpx.wr_rdma_write_imm   = b_write_imm;
    qp->qpx.wr_rdma_read        = b_read;
    qp->qpx.wr_atomic_cmp_swp   = b_cmp_swp;
    qp->qpx.wr_atomic_fetch_add = b_fetch_add;
}

void dcxemu_wr_install_rc(struct dcxemu_qp *qp, uint64_t dv_ops)
{
    install_common(qp);
    install_data(qp);
    if (dv_ops & MLX5DV_QP_EX_WITH_MR_INTERLEAVED) {
        qp->dv.wr_mr_interleaved = b_mr_interleaved;
    }
    if (dv_ops & MLX5DV_QP_EX_WITH_MR_LIST) {
        qp->dv.wr_mr_list = b_mr_list;
    }
    qp->dv.wr_raw_wqe = (dv_ops & MLX5DV_QP_EX_WITH_RAW_WQE) ?
                                b_raw_wqe :
                                b_raw_wqe_unrequested;
}

void dcxemu_wr_install_dci(struct dcxemu_qp *qp, int raw_wqe)
{
    qp->qpx.comp_mask = 0;
    install_common(qp);
    install_data(qp);
    qp->dv.wr_set_dc_addr        = s_dc_addr;
    qp->dv.wr_set_dc_addr_stream = s_dc_addr_stream;
    qp->dv.wr_raw_wqe            = raw_wqe ? b_raw_wqe : b_raw_wqe_unrequested;
    /* UMR builders stay NULL: rdma-core installs them only on RC QPs */
}
