/* dcxemu DC QPs: create/modify/query/destroy, the ibv_wr_* builders and the execution engine. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* mlx5-style syndromes reported as vendor_err */
enum {
    SYND_LOC_LEN = 0x01, SYND_LOC_QP_OP = 0x02, SYND_LOC_PROT = 0x04, SYND_WR_FLUSH = 0x05,
    SYND_REM_INV_REQ = 0x12, SYND_REM_ACCESS = 0x13, SYND_REM_OP = 0x14,
    SYND_RETRY_EXC = 0x15, SYND_RNR_RETRY_EXC = 0x16,
};

#define DEFAULT_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |       \
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |              \
    IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV)
#define ATOMIC_SEND_OPS (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
/* Operations the model executes; the others are refused at create time (part 2). */
#define MODEL_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |     \
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static const double rnr_timer_ms[32] = {
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28,
    1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88,
    163.84, 245.76, 327.68, 491.52,
};

static const struct { const char *name; int cnt; } op_info[] = {
    [DCXEMU_OP_NONE] = { "none", -1 },
    [DCXEMU_OP_SEND] = { "send", DCXEMU_CNT_OP_SEND },
    [DCXEMU_OP_SEND_IMM] = { "send_imm", DCXEMU_CNT_OP_SEND_IMM },
    [DCXEMU_OP_WRITE] = { "write", DCXEMU_CNT_OP_WRITE },
    [DCXEMU_OP_WRITE_IMM] = { "write_imm", DCXEMU_CNT_OP_WRITE_IMM },
    [DCXEMU_OP_READ] = { "read", DCXEMU_CNT_OP_READ },
    [DCXEMU_OP_CMP_SWP] = { "atomic_cs", DCXEMU_CNT_OP_ATOMIC_CS },
    [DCXEMU_OP_FETCH_ADD] = { "atomic_fa", DCXEMU_CNT_OP_ATOMIC_FA },
    [DCXEMU_OP_UMR_LIST] = { "umr_list", DCXEMU_CNT_OP_UMR },
    [DCXEMU_OP_UMR_INTERLEAVED] = { "umr_interleaved", DCXEMU_CNT_OP_UMR },
    [DCXEMU_OP_LOCAL_INV] = { "local_inv", DCXEMU_CNT_OP_LOCAL_INV },
};

static inline struct dcxemu_qp *QP(struct ibv_qp_ex *q) { return (struct dcxemu_qp *)q; }
static inline struct dcxemu_qp *QPDV(struct mlx5dv_qp_ex *d)
{
    return (struct dcxemu_qp *)((char *)d - offsetof(struct dcxemu_qp, dv));
}
static inline struct dcxemu_wqe *slot(struct dcxemu_qp *qp, uint64_t i)
{
    return (struct dcxemu_wqe *)(qp->ring + (i % qp->ring_slots) * qp->wqe_size);
}
static inline struct ibv_sge *wqe_sges(struct dcxemu_wqe *w) { return (struct ibv_sge *)(w + 1); }
static inline char *wqe_inline(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    return (char *)(wqe_sges(w) + qp->cap.max_send_sge);
}
static uint64_t wqe_len(struct dcxemu_wqe *w)
{
    uint64_t len = w->inline_len;
    for (uint32_t i = 0; !w->is_inline && i < w->num_sge; i++) {
        len += wqe_sges(w)[i].length;
    }
    return len;
}

/* ---------------------------------------------------------------- builders ---- */

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

static void wr_new(struct ibv_qp_ex *q, uint32_t op)
{
    struct dcxemu_qp *qp = QP(q);
    struct dcxemu_wqe *w;
    if (qp->batch_err) {
        return;
    }
    if (qp->cur != NULL && !wqe_finished(qp->cur)) {
        latch(qp, EINVAL);   /* previous WR lacks its data or address setter */
        return;
    }
    if (qp->sq_posted - atomic_load(&qp->sq_freed) + qp->batch_n >= qp->cap.max_send_wr) {
        latch(qp, ENOMEM);
        return;
    }
    w = slot(qp, qp->sq_posted + qp->batch_n);
    memset(w, 0, sizeof(*w));
    w->wr_id = q->wr_id;
    w->flags = q->wr_flags;
    w->opcode = op;
    qp->batch_n++;
    qp->cur = w;
}

static struct dcxemu_wqe *setter_target(struct dcxemu_qp *qp, int data)
{
    struct dcxemu_wqe *w = qp->cur;
    if (qp->batch_err) {
        return NULL;
    }
    if (w == NULL || (data ? w->data_setters : w->addr_setters) != 0) {
        latch(qp, EINVAL);   /* setter without a builder, or a duplicate setter */
        return NULL;
    }
    return w;
}

static void b_send(struct ibv_qp_ex *q) { wr_new(q, DCXEMU_OP_SEND); }
static void b_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
    wr_new(q, DCXEMU_OP_SEND_IMM);
    if (!QP(q)->batch_err) QP(q)->cur->imm = imm;
}
static void b_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
    wr_new(q, DCXEMU_OP_WRITE);
    if (!QP(q)->batch_err) { QP(q)->cur->rkey = rkey; QP(q)->cur->raddr = raddr; }
}
static void b_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, __be32 imm)
{
    wr_new(q, DCXEMU_OP_WRITE_IMM);
    if (!QP(q)->batch_err) { QP(q)->cur->rkey = rkey; QP(q)->cur->raddr = raddr; QP(q)->cur->imm = imm; }
}
static void b_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
    wr_new(q, DCXEMU_OP_READ);
    if (!QP(q)->batch_err) { QP(q)->cur->rkey = rkey; QP(q)->cur->raddr = raddr; }
}
static void b_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t cmp, uint64_t swp)
{
    wr_new(q, DCXEMU_OP_CMP_SWP);
    if (!QP(q)->batch_err) {
        QP(q)->cur->rkey = rkey; QP(q)->cur->raddr = raddr;
        QP(q)->cur->cmp = cmp; QP(q)->cur->swap_add = swp;
    }
}
static void b_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t add)
{
    wr_new(q, DCXEMU_OP_FETCH_ADD);
    if (!QP(q)->batch_err) { QP(q)->cur->rkey = rkey; QP(q)->cur->raddr = raddr; QP(q)->cur->swap_add = add; }
}
/* Valid on a DCI in mlx5 but not executed by the model yet: refused, never silently dropped. */
static void b_send_inv(struct ibv_qp_ex *q, uint32_t rkey) { (void)rkey; latch(QP(q), EOPNOTSUPP); }
/* LOCAL_INV runs on the loopback RC QP (it invalidates an indirect mkey); the model does not
 * execute it on a DCI. */
static void b_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    struct dcxemu_qp *qp = QP(q);
    if (!qp->is_rc) {
        latch(qp, EOPNOTSUPP);
        return;
    }
    wr_new(q, DCXEMU_OP_LOCAL_INV);
    if (!qp->batch_err) {
        qp->cur->rkey = rkey;
        qp->cur->data_setters = qp->cur->addr_setters = 1;   /* no setters: complete as is */
    }
}

/* Data operations are not modelled on an RC QP (it only hosts UMR / LOCAL_INV). */
static void b_rc_unmodelled(struct ibv_qp_ex *q) { latch(QP(q), EOPNOTSUPP); }
static void b_rc_unmodelled_imm(struct ibv_qp_ex *q, __be32 imm) { (void)imm; latch(QP(q), EOPNOTSUPP); }
static void b_rc_unmodelled_rdma(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
    (void)rkey; (void)raddr;
    latch(QP(q), EOPNOTSUPP);
}

static struct dcxemu_wqe *umr_new(struct mlx5dv_qp_ex *d, uint32_t op, struct mlx5dv_mkey *mkey,
                                  uint32_t access, uint32_t n, uint32_t limit)
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
    w = qp->cur;
    w->data_setters = w->addr_setters = 1;   /* the builder is the whole WR */
    if (!(w->flags & IBV_SEND_INLINE)) {
        latch(qp, EOPNOTSUPP);
        return NULL;
    }
    if (mkey == NULL || (access & ~ok)) {
        latch(qp, EINVAL);
        return NULL;
    }
    if ((mkey->lkey & 0xff) != 0 && !dcxemu_cfg.mkey_update_tag) {
        latch(qp, EOPNOTSUPP);   /* a tag needs the kernel's MKEY_UPDATE_TAG capability */
        return NULL;
    }
    max_entries = dcxemu_fab->mkeys[((struct dcxemu_mkey *)mkey)->idx].max_entries;
    /* one descriptor of an interleaved mkey holds the repeat header */
    if (n > limit || n > max_entries || (op == DCXEMU_OP_UMR_INTERLEAVED && n + 1 > max_entries)) {
        latch(qp, ENOMEM);
        return NULL;
    }
    w->rkey = mkey->lkey;
    w->umr_access = access;
    w->umr_n = n;
    return w;
}

static struct dcxemu_mkey_entry *umr_entries(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    return qp->umr_ring + (size_t)(((char *)w - qp->ring) / (ptrdiff_t)qp->wqe_size) * qp->umr_max;
}

static void b_mr_interleaved(struct mlx5dv_qp_ex *d, struct mlx5dv_mkey *mkey, uint32_t access,
                             uint32_t repeat, uint16_t n, struct mlx5dv_mr_interleaved *data)
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
        e->addr = data[i].addr;
        e->lkey = data[i].lkey;
        /* hardware fields are 16 bits wide and silently truncated */
        e->bytes = data[i].bytes_count & 0xffff;
        e->stride = (data[i].bytes_count + data[i].bytes_skip) & 0xffff;
    }
}

static void b_mr_list(struct mlx5dv_qp_ex *d, struct mlx5dv_mkey *mkey, uint32_t access,
                      uint16_t n, struct ibv_sge *sge)
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
        e->addr = sge[i].addr;
        e->lkey = sge[i].lkey;
        e->bytes = sge[i].length;
        e->stride = 0;
    }
}
static void b_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
                      const struct ibv_mw_bind_info *info)
{
    (void)mw; (void)rkey; (void)info;
    latch(QP(q), EOPNOTSUPP);
}

static void s_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
    struct dcxemu_wqe *w = setter_target(QP(q), 1);
    if (w == NULL) {
        return;
    }
    w->data_setters++;
    if (len > 0) {
        struct ibv_sge *s = wqe_sges(w);
        s[0].lkey = lkey;
        s[0].addr = addr;
        s[0].length = len;
        w->num_sge = 1;
    }
}

static void s_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *list)
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
        memcpy(wqe_inline(qp, w), addr, len);   /* the buffer is reusable on return */
    }
    w->inline_len = (uint32_t)len;
}

static void s_inline_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *bufs)
{
    struct dcxemu_qp *qp = QP(q);
    struct dcxemu_wqe *w = setter_target(qp, 1);
    size_t total = 0;
    if (w == NULL) {
        return;
    }
    if (n > 0 && bufs == NULL) {
        latch(qp, EINVAL);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        total += bufs[i].length;
        if (total > qp->cap.max_inline_data || (bufs[i].length > 0 && bufs[i].addr == NULL)) {
            latch(qp, total > qp->cap.max_inline_data ? ENOMEM : EINVAL);
            return;
        }
    }
    w->data_setters++;
    w->is_inline = 1;
    total = 0;
    for (size_t i = 0; i < n; i++) {
        if (bufs[i].length > 0) {
            memcpy(wqe_inline(qp, w) + total, bufs[i].addr, bufs[i].length);
        }
        total += bufs[i].length;
    }
    w->inline_len = (uint32_t)total;
}

static void s_dc_addr(struct mlx5dv_qp_ex *d, struct ibv_ah *ah, uint32_t dctn, uint64_t key)
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
    w->dlid = ((struct dcxemu_ah *)ah)->attr.dlid;
    w->is_global = ((struct dcxemu_ah *)ah)->attr.is_global;
    w->sgid_index = ((struct dcxemu_ah *)ah)->attr.grh.sgid_index;
    w->hop_limit = ((struct dcxemu_ah *)ah)->attr.grh.hop_limit;
    w->dgid = ((struct dcxemu_ah *)ah)->attr.grh.dgid;
    w->dctn = dctn & 0xffffff;
    w->dc_key = key;
}

static void s_dc_addr_stream(struct mlx5dv_qp_ex *d, struct ibv_ah *ah, uint32_t dctn,
                             uint64_t key, uint16_t stream_id)
{
    if (stream_id != 0) {
        latch(QPDV(d), EINVAL);   /* the model reports no DCI stream support */
        return;
    }
    s_dc_addr(d, ah, dctn, key);
}

/* mlx5dv_wr_raw_wqe (rdma-core v44 providers/mlx5/qp.c:mlx5_wr_raw_wqe): the caller's WQE is
 * copied as it is, ds = qpn_ds[5:0] 16-byte units; only the WQE index is replaced. Signaling is
 * the control segment's CQ_UPDATE bit (sq_sig_all is applied by rdma-core's own builders only).
 * The model decodes the atomic layouts of mlx5dv.h / the mlx5 PRM: control, datagram (DC AV,
 * base 16 B or extended 48 B), remote address, atomic (standard 16 B; masked: 32-bit CS/FA and
 * 64-bit FA 16 B, 64-bit CS 32 B), one data segment for the response. Anything else is a
 * malformed WQE for the model: it completes with LOC_QP_OP_ERR when it executes, as the HCA
 * reports a WQE it cannot parse; it is never executed partly. */
#define RAW_MAX_BYTES 128   /* the largest WQE the decoder accepts: 8 units */

static uint32_t raw_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}

static uint64_t raw_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return be64toh(v);
}

static int raw_decode(struct dcxemu_qp *qp, struct dcxemu_wqe *w, const uint8_t *b)
{
    uint32_t opmod_idx_opcode = raw_be32(b), qpn_ds = raw_be32(b + 4);
    uint32_t ds = qpn_ds & 0x3f, opcode = opmod_idx_opcode & 0xff;
    uint32_t opmod = opmod_idx_opcode >> 24, dqp_dct, off, aseg, need;
    const uint8_t *a;

    if (ds == 0 || ds * 16 > RAW_MAX_BYTES || (qpn_ds >> 8) != qp->qpx.qp_base.qp_num) {
        return -1;   /* not an atomic WQE, or one of another QP */
    }
    if (b[11] & MLX5_WQE_CTRL_CQ_UPDATE) {
        w->flags |= IBV_SEND_SIGNALED;
    }
    switch (opcode) {
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
        if (opmod != 0) {
            return -1;
        }
        w->raw_size = 8;
        aseg = 16;
        break;
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
    case MLX5_OPCODE_ATOMIC_MASKED_FA:
        /* opmod 0x08 | (log2(size) - 2): the model's HCA atomic caps are 4 and 8 bytes */
        if (dcxemu_cfg.no_ext_atomics || (opmod != 0x08 && opmod != 0x09)) {
            return -1;
        }
        w->raw_masked = 1;
        w->raw_size = opmod == 0x08 ? 4 : 8;
        aseg = (opcode == MLX5_OPCODE_ATOMIC_MASKED_CS && w->raw_size == 8) ? 32 : 16;
        break;
    default:
        return -1;   /* the model decodes atomics only */
    }
    /* datagram segment: the DC AV, as mlx5dv_wr_set_dc_addr lays it out */
    dqp_dct = raw_be32(b + 16 + 8);
    off = 16 + ((dqp_dct & MLX5_EXTENDED_UD_AV) ? sizeof(struct mlx5_wqe_av) : 16);
    need = off + sizeof(struct mlx5_wqe_raddr_seg) + aseg + sizeof(struct mlx5_wqe_data_seg);
    if (ds * 16 != need) {
        return -1;
    }
    w->dc_key = raw_be64(b + 16);
    w->dctn = dqp_dct & 0xffffff;
    w->dlid = (uint32_t)b[16 + 14] << 8 | b[16 + 15];   /* rlid, big-endian */
    w->addr_setters = 1;
    /* remote address segment */
    w->raddr = raw_be64(b + off);
    w->rkey = raw_be32(b + off + 8);
    a = b + off + 16;
    if (w->raw_size == 4) {
        w->swap_add = raw_be32(a);
        w->cmp = raw_be32(a + 4);
        w->swap_mask = raw_be32(a + 8);
        w->cmp_mask = raw_be32(a + 12);
    } else if (aseg == 32) {
        w->swap_add = raw_be64(a);
        w->cmp = raw_be64(a + 8);
        w->swap_mask = raw_be64(a + 16);
        w->cmp_mask = raw_be64(a + 24);
    } else {
        w->swap_add = raw_be64(a);
        w->cmp = raw_be64(a + 8);
    }
    w->opcode = (opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_MASKED_CS) ?
                DCXEMU_OP_CMP_SWP : DCXEMU_OP_FETCH_ADD;
    if (!w->raw_masked && w->opcode == DCXEMU_OP_CMP_SWP) {
        w->cmp_mask = w->swap_mask = UINT64_MAX;   /* standard CS = masked CS, all bits */
    }
    /* data segment: where the response goes */
    a += aseg;
    if (qp->cap.max_send_sge < 1) {
        return -1;
    }
    wqe_sges(w)[0].length = raw_be32(a);
    wqe_sges(w)[0].lkey = raw_be32(a + 4);
    wqe_sges(w)[0].addr = raw_be64(a + 8);
    w->num_sge = 1;
    w->data_setters = 1;
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
    w = qp->cur;
    w->raw = 1;
    w->flags = 0;   /* wr_flags do not apply: the control segment says it all */
    if (raw_decode(qp, w, wqe) != 0) {
        w->raw_bad = 1;
        w->num_sge = 0;
        w->dctn = 0;
    }
    w->data_setters = w->addr_setters = 1;   /* a raw WQE is complete by itself */
}

/* A DCI created without MLX5DV_QP_EX_WITH_RAW_WQE: rdma-core leaves the pointer NULL; the model
 * refuses the call instead of crashing. */
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
    qp->batch_n = 0;
    qp->cur = NULL;
}

static void batch_reset(struct dcxemu_qp *qp)
{
    qp->batch_err = 0;
    qp->batch_n = 0;
    qp->cur = NULL;
}

static int wr_complete(struct ibv_qp_ex *q)
{
    struct dcxemu_qp *qp = QP(q);
    int err = qp->batch_err;
    uint64_t nb = 0;
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
        /* deferred: the whole batch becomes executable after one delay in (0, DEFER_US] */
        nb = dcxemu_cfg.deferred ?
             dcxemu_now_ns() + 1000 * (1 + dcxemu_random() % dcxemu_cfg.defer_us) : 0;
        for (uint32_t i = 0; i < qp->batch_n; i++) {
            struct dcxemu_wqe *w = slot(qp, qp->sq_posted + i);
            w->not_before_ns = nb;
            DCXEMU_TRACE("post qp=0x%x op=%s len=%llu wr_id=0x%llx flags=0x%x", q->qp_base.qp_num,
                         op_info[w->opcode].name, (unsigned long long)wqe_len(w),
                         (unsigned long long)w->wr_id, w->flags);
        }
        __atomic_store_n(&qp->sq_posted, qp->sq_posted + qp->batch_n, __ATOMIC_RELEASE);
    }
    batch_reset(qp);
    pthread_mutex_unlock(&qp->post_lock);
    if (err == 0 && !dcxemu_cfg.deferred) {
        dcxemu_qp_progress(qp);
    } else if (err == 0 && nb != 0) {
        /* only publish: the engine executes from nb on (an existing deadline already covers
         * earlier WQEs, and the queue is FIFO) */
        uint64_t zero = 0;
        pthread_mutex_lock(&qp->exec_lock);
        atomic_compare_exchange_strong(&qp->deadline_ns, &zero, nb);
        pthread_mutex_unlock(&qp->exec_lock);
        dcxemu_engine_kick();
    }
    return err;
}

static void wr_abort(struct ibv_qp_ex *q)
{
    struct dcxemu_qp *qp = QP(q);
    batch_reset(qp);
    pthread_mutex_unlock(&qp->post_lock);
}

int dcxemu_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    /* mlx5 has no legacy post path for DC QPs: refuse instead of building a bad WQE */
    (void)qp;
    if (bad != NULL) {
        *bad = wr;
    }
    return EINVAL;
}

int dcxemu_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    (void)qp;   /* DCIs have no receive queue; DCTs receive through their SRQ */
    if (bad != NULL) {
        *bad = wr;
    }
    return EINVAL;
}

/* ---------------------------------------------------------------- execution ---- */

enum exec_result { EXEC_DONE, EXEC_RNR, EXEC_UNREACHABLE };

struct exec_out {
    uint32_t status, vendor_err, byte_len;
    double rnr_ms;
    uint64_t bytes;        /* payload moved (counters) */
};

/* Validate a key for an access of len bytes at addr (fabric lock held).  Returns the MR. */
static struct dcxemu_shm_mr *mr_lookup(uint32_t key, uint16_t owner, uint64_t token,
                                       uint64_t pd_id, uint64_t addr, uint64_t len,
                                       uint32_t need)
{
    uint32_t idx = key >> 8;
    struct dcxemu_shm_mr *m;
    if (idx == 0 || idx >= DCXEMU_MAX_MRS) {
        return NULL;
    }
    m = &dcxemu_fab->mrs[idx];
    if (!m->in_use || (m->tag & 0xff) != (key & 0xff) || m->owner != owner ||
        m->owner_token != token || m->pd_id != pd_id || (m->access & need) != need) {
        return NULL;
    }
    if (addr < m->iova || len > m->length || addr - m->iova > m->length - len) {
        return NULL;
    }
    return m;
}

static void *mr_ptr(const struct dcxemu_shm_mr *m, uint64_t iova)
{
    return (void *)(uintptr_t)(m->addr + (iova - m->iova));
}

static void fail(struct exec_out *o, uint32_t st, uint32_t synd)
{
    o->status = st;
    o->vendor_err = synd;
}

/* Growable iovec list: an indirect mkey can turn one SGE into many pieces. */
struct iovbuf {
    struct iovec *v;
    int n, cap;
    struct iovec small[DCXEMU_MAX_SGE + 2];
};

static void iovbuf_init(struct iovbuf *b)
{
    b->v = b->small;
    b->n = 0;
    b->cap = (int)(sizeof(b->small) / sizeof(b->small[0]));
}

static void iovbuf_fini(struct iovbuf *b)
{
    if (b->v != b->small) {
        free(b->v);
    }
}

/* Room for n pieces in all, in one step (an interleaved mkey knows its piece count). */
static int iovbuf_reserve(struct iovbuf *b, uint64_t n)
{
    struct iovec *v;
    if (n <= (uint64_t)b->cap) {
        return 0;
    }
    if (n > INT_MAX / 2 || (v = malloc(sizeof(*v) * (size_t)n)) == NULL) {
        return -1;
    }
    memcpy(v, b->v, sizeof(*v) * (size_t)b->n);
    if (b->v != b->small) {
        free(b->v);
    }
    b->v = v;
    b->cap = (int)n;
    return 0;
}

static int iovbuf_push(struct iovbuf *b, void *p, size_t len)
{
    if (len == 0) {
        return 0;
    }
    if (b->n > 0 && (char *)b->v[b->n - 1].iov_base + b->v[b->n - 1].iov_len == (char *)p) {
        b->v[b->n - 1].iov_len += len;   /* merge adjacent pieces */
        return 0;
    }
    if (b->n == b->cap) {
        int cap = b->cap * 2;
        struct iovec *v = malloc(sizeof(*v) * (size_t)cap);
        if (v == NULL) {
            return -1;
        }
        memcpy(v, b->v, sizeof(*v) * (size_t)b->n);
        if (b->v != b->small) {
            free(b->v);
        }
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n].iov_base = p;
    b->v[b->n].iov_len = len;
    b->n++;
    return 0;
}

static int is_mkey(uint32_t key)
{
    uint32_t idx = key >> 8;
    return idx >= DCXEMU_MKEY_BASE && idx < DCXEMU_MKEY_BASE + DCXEMU_MAX_MKEYS;
}

/* Leaf bases of an interleaved mkey's entries, on the stack for the usual few entries. */
#define LEAF_BASES_STACK 64

static uint64_t mkey_unit(const struct dcxemu_shm_mkey *k, const struct dcxemu_mkey_entry *e)
{
    uint64_t unit = 0;
    for (uint32_t i = 0; i < k->n; i++) {
        unit += e[i].bytes;
    }
    return unit;
}

/* Where zero-based offset addr falls in an interleaved layout of `unit` bytes per repeat:
 * repeat *r, entry *i, *p bytes into that entry's block. */
static void interleaved_locate(const struct dcxemu_mkey_entry *e, uint64_t unit, uint64_t addr,
                               uint64_t *r, uint32_t *i, uint64_t *p)
{
    uint64_t w = addr % unit, cum = 0;
    uint32_t j = 0;
    while (w >= cum + e[j].bytes) {
        cum += e[j].bytes;
        j++;
    }
    *r = addr / unit;
    *i = j;
    *p = w - cum;
}

/* Check every leaf piece that [addr, end) of an interleaved mkey touches, entry by entry, and
 * note each entry's leaf base (the owner's address of e[i].addr).  The pieces of one entry in
 * successive repeats start and end at ascending leaf addresses (the stride is unsigned), so its
 * leaf MR, one address range, holds them all exactly when it holds the span from the first
 * touched piece's first byte to the last touched piece's last byte: the same verdict, at the
 * same rights, as checking each piece, in O(entries) instead of O(pieces).  Entries of zero bytes own no piece and are not checked. */
static int interleaved_check(const struct dcxemu_mkey_entry *e, uint32_t n, uint64_t unit,
                             uint16_t owner, uint64_t token, uint64_t pd_id, uint64_t addr,
                             uint64_t end, uint32_t need, uintptr_t *base)
{
    uint64_t cum = 0;
    for (uint32_t i = 0; i < n; cum += e[i].bytes, i++) {
        uint64_t b = e[i].bytes, rf, rl, fs, ls, lo, hi;
        struct dcxemu_shm_mr *m;
        if (b == 0 || end <= cum) {
            continue;
        }
        rf = addr >= cum + b ? (addr - cum - b) / unit + 1 : 0;   /* first piece ending after addr */
        rl = (end - 1 - cum) / unit;                              /* last piece starting before end */
        if (rf > rl) {
            continue;   /* the range falls between this entry's pieces */
        }
        fs = rf * unit + cum;
        ls = rl * unit + cum;
        lo = e[i].addr + rf * e[i].stride + (addr > fs ? addr - fs : 0);
        hi = e[i].addr + rl * e[i].stride + (end - ls < b ? end - ls : b);
        m = mr_lookup(e[i].lkey, owner, token, pd_id, lo, hi - lo, need);
        if (m == NULL) {
            return -1;
        }
        if (base != NULL) {
            base[i] = (uintptr_t)(m->addr - m->iova + e[i].addr);
        }
    }
    return 0;
}

/* Resolve [addr, addr+len) of a memory key owned by (owner, token) in pd_id, needing rights
 * `need`, into pieces of the owner's address space (fabric lock held).  Plain MRs give one piece;
 * an indirect mkey (zero-based, spec §3.5) gives one per pointed-to range, each leaf checked to
 * be a plain MR of the same owner and PD (nested mkeys are refused) that itself has the rights
 * `need`: an mkey never lends rights its leaves lack.  The mkey's key must carry its current tag
 * (set by the last UMR).  With out == NULL only the checks are made.  0, or -1 if invalid. */
static int resolve_mkey(const struct dcxemu_shm_mkey *k, const struct dcxemu_mkey_entry *e,
                        uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
                        uint64_t addr, uint64_t len, uint32_t need, struct iovbuf *out);

static int resolve(uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id, uint64_t addr,
                   uint64_t len, uint32_t need, struct iovbuf *out)
{
    const struct dcxemu_shm_mkey *k;
    if (!is_mkey(key)) {
        struct dcxemu_shm_mr *m = mr_lookup(key, owner, token, pd_id, addr, len, need);
        return m == NULL || (out != NULL && iovbuf_push(out, mr_ptr(m, addr), len) != 0) ? -1 : 0;
    }
    k = &dcxemu_fab->mkeys[(key >> 8) - DCXEMU_MKEY_BASE];
    return resolve_mkey(k, (const struct dcxemu_mkey_entry *)dcxemu_ptr(k->entries_off), key,
                        owner, token, pd_id, addr, len, need, out);
}

/* resolve() for indirect mkey k with entries e: the fabric's, or a copy taken under the lock. */
static int resolve_mkey(const struct dcxemu_shm_mkey *k, const struct dcxemu_mkey_entry *e,
                        uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
                        uint64_t addr, uint64_t len, uint32_t need, struct iovbuf *out)
{
    uint64_t o, end, unit;
    if ((key & 0xff) != k->tag || !k->in_use || !k->programmed || k->owner != owner ||
        k->owner_token != token || k->pd_id != pd_id || (k->access & need) != need ||
        len > k->length || addr > k->length - len) {
        return -1;
    }
    unit = mkey_unit(k, e);
    end = addr + len;
    if (k->interleaved) {
        uintptr_t sbase[LEAF_BASES_STACK], *base = sbase;
        uint64_t r, p;
        uint32_t i = 0, n = k->n;
        int ret = 0;
        if (len == 0) {
            return 0;
        }
        if (n > LEAF_BASES_STACK && (base = malloc(sizeof(*base) * n)) == NULL) {
            return -1;
        }
        if (interleaved_check(e, n, unit, owner, token, pd_id, addr, end, need, base) != 0) {
            ret = -1;
            goto out_base;
        }
        if (out == NULL) {
            goto out_base;
        }
        /* every piece is checked: emit them in a tight loop */
        if (iovbuf_reserve(out, (uint64_t)out->n + (len / unit + 2) * n) != 0) {
            ret = -1;
            goto out_base;
        }
        interleaved_locate(e, unit, addr, &r, &i, &p);
        for (o = addr; o < end;) {
            uint64_t piece = e[i].bytes - p;
            if (piece > end - o) {
                piece = end - o;
            }
            /* an entry of zero bytes has no piece, and interleaved_check() noted no base */
            if ((piece > 0) &&
                iovbuf_push(out, (void *)(base[i] + r * e[i].stride + p), piece) != 0) {
                ret = -1;
                break;
            }
            o += piece;
            p = 0;
            if (++i == n) {
                i = 0;
                r++;
            }
        }
    out_base:
        if (base != sbase) {
            free(base);
        }
        return ret;
    }
    for (o = addr; o < end;) {
        uint64_t w = o, cum = 0;
        uint32_t i = 0;
        uint64_t leaf, piece;
        struct dcxemu_shm_mr *m;
        while (i < k->n && w >= cum + e[i].bytes) {
            cum += e[i].bytes;
            i++;
        }
        if (i == k->n) {
            return -1;
        }
        leaf = e[i].addr + (w - cum);
        piece = e[i].bytes - (w - cum);
        if (piece > end - o) {
            piece = end - o;
        }
        m = mr_lookup(e[i].lkey, owner, token, pd_id, leaf, piece, need);
        if (m == NULL || (out != NULL && iovbuf_push(out, mr_ptr(m, leaf), piece) != 0)) {
            return -1;
        }
        o += piece;
    }
    return 0;
}

/* ---------------------------------------------------------------- WRITE gather ---- */

/* A WRITE whose local side is an interleaved mkey of small blocks is gathered here straight from
 * the layout into a staging buffer, one system call per staged chunk, instead of through one
 * iovec per block: the local side is always the executing process's own memory.  Blocks of at
 * least GATHER_MAX_AVG bytes on average go the iovec way, where the kernel copies them directly. */
#define GATHER_MAX_AVG 512
#define GATHER_STAGING 65536

static int sge_is_small_interleaved(const struct ibv_sge *sg)
{
    const struct dcxemu_shm_mkey *k;
    uint32_t nz = 0;
    uint64_t unit = 0;
    if (!is_mkey(sg->lkey) || (sg->lkey & 0xff) != 0) {
        return 0;
    }
    k = &dcxemu_fab->mkeys[(sg->lkey >> 8) - DCXEMU_MKEY_BASE];
    if (!k->in_use || !k->programmed || !k->interleaved) {
        return 0;
    }
    const struct dcxemu_mkey_entry *e = (const struct dcxemu_mkey_entry *)dcxemu_ptr(k->entries_off);
    for (uint32_t i = 0; i < k->n; i++) {
        unit += e[i].bytes;
        nz += e[i].bytes != 0;
    }
    return nz > 0 && unit / nz < GATHER_MAX_AVG;
}

/* 16 bytes, any alignment, any type: gcc would fuse memcpy()s into a slow "rep movs". */
typedef uint64_t u128_unaligned __attribute__((vector_size(16), aligned(1), may_alias));

static inline void copy_block(char *d, const char *s, uint64_t b)
{
    switch (b) {   /* fixed sizes inline to a move or two */
    case 8:  memcpy(d, s, 8); break;
    case 4:  memcpy(d, s, 4); break;
    case 16:
    case 32:
    case 64:
        for (uint64_t o = 0; o < b; o += 16) {
            *(u128_unaligned *)(d + o) = *(const u128_unaligned *)(s + o);
        }
        break;
    default: memcpy(d, s, b); break;
    }
}

/* The local mkey of one SGE of a gathered WRITE, copied under the fabric lock: the gather runs
 * after the lock is given back and must not read an mkey a UMR may be rewriting. */
struct gather_key {
    struct dcxemu_shm_mkey k;
    struct dcxemu_mkey_entry *e;   /* copy of k's entries; NULL: the SGE is a plain MR */
};

/* Copy the mkeys of the n SGEs (fabric lock held, keys already checked).  0, or -1: no memory. */
static int gather_keys_take(const struct ibv_sge *sges, uint32_t n, struct gather_key *g)
{
    for (uint32_t i = 0; i < n; i++) {
        const struct dcxemu_shm_mkey *k;
        g[i].e = NULL;
        if (!is_mkey(sges[i].lkey)) {
            continue;
        }
        k = &dcxemu_fab->mkeys[(sges[i].lkey >> 8) - DCXEMU_MKEY_BASE];
        g[i].k = *k;
        g[i].e = malloc(sizeof(*g[i].e) * (k->n > 0 ? k->n : 1));
        if (g[i].e == NULL) {
            return -1;
        }
        memcpy(g[i].e, dcxemu_ptr(k->entries_off), sizeof(*g[i].e) * k->n);
    }
    return 0;
}

static void gather_keys_free(struct gather_key *g, uint32_t n)
{
    for (uint32_t i = 0; g != NULL && i < n; i++) {
        free(g[i].e);
    }
    free(g);
}

/* Copy bytes [off, off+len) of a local SGE, checked by resolve() under the fabric lock, to dst
 * (no lock held: g is the SGE's mkey as it was then; its leaf MRs and a plain MR stay registered
 * until the copy ends, see dcxemu_copy_wait).  0, or -1 on a (checked, so impossible) bad key. */
static int gather_sge(const struct ibv_sge *sg, const struct gather_key *g, uint64_t off,
                      uint64_t len, char *dst)
{
    const struct dcxemu_shm_mkey *k;
    const struct dcxemu_mkey_entry *e;
    uintptr_t sbase[LEAF_BASES_STACK], *base = sbase;
    uint64_t unit, addr = sg->addr + off, end = addr + len, r, p;
    uint32_t i = 0, n;
    if (g->e == NULL) {
        const struct dcxemu_shm_mr *m = &dcxemu_fab->mrs[sg->lkey >> 8];
        memcpy(dst, mr_ptr(m, addr), len);
        return 0;
    }
    k = &g->k;
    e = g->e;
    n = k->n;
    unit = mkey_unit(k, e);
    if (!k->interleaved) {
        /* a list mkey beside the layout: its few pieces, resolved as usual */
        struct iovbuf v;
        int ret;
        iovbuf_init(&v);
        ret = resolve_mkey(k, e, sg->lkey, (uint16_t)dcxemu_me, dcxemu_my_token, k->pd_id, addr,
                           len, 0, &v);
        for (int j = 0; ret == 0 && j < v.n; j++) {
            memcpy(dst, v.v[j].iov_base, v.v[j].iov_len);
            dst += v.v[j].iov_len;
        }
        iovbuf_fini(&v);
        return ret;
    }
    if (unit == 0) {
        return -1;
    }
    if (n > LEAF_BASES_STACK && (base = malloc(sizeof(*base) * n)) == NULL) {
        return -1;
    }
    /* the leaf bases (and, again, the checks: O(entries)) */
    if (interleaved_check(e, n, unit, (uint16_t)dcxemu_me, dcxemu_my_token, k->pd_id, addr, end,
                          0, base) != 0) {
        if (base != sbase) {
            free(base);
        }
        return -1;
    }
    interleaved_locate(e, unit, addr, &r, &i, &p);
    if (n == 1 && p == 0) {
        /* one entry: a plain strided walk */
        uint64_t b = e[0].bytes, stride = e[0].stride, full = len / b;
        const char *src = (const char *)(base[0] + r * stride);
        /* fixed block sizes: the copy is a few 16-byte moves (not a string instruction), the
         * walk a tight loop */
#define STRIDED_WALK(_b, _copy) \
        for (uint64_t j = 0; j < full; j++, src += stride, dst += (_b)) { \
            _copy; \
        }
#define COPY16(_o) (*(u128_unaligned *)(dst + (_o)) = *(const u128_unaligned *)(src + (_o)))
        switch (b) {
        case 8:  STRIDED_WALK(8, memcpy(dst, src, 8)); break;
        case 4:  STRIDED_WALK(4, memcpy(dst, src, 4)); break;
        case 16: STRIDED_WALK(16, COPY16(0)); break;
        case 32: STRIDED_WALK(32, (COPY16(0), COPY16(16))); break;
        case 64: STRIDED_WALK(64, (COPY16(0), COPY16(16), COPY16(32), COPY16(48))); break;
        default: STRIDED_WALK(b, memcpy(dst, src, b)); break;
        }
#undef COPY16
#undef STRIDED_WALK
        memcpy(dst, src, len - full * b);
    } else {
        for (uint64_t o = addr; o < end;) {
            uint64_t piece = e[i].bytes - p;
            if (piece > end - o) {
                piece = end - o;
            }
            /* an entry of zero bytes has no piece, and interleaved_check() noted no base: its
             * base is not an address, not even for a copy of nothing */
            if (piece > 0) {
                copy_block(dst, (const char *)(base[i] + r * e[i].stride + p), piece);
            }
            dst += piece;
            o += piece;
            p = 0;
            if (++i == n) {
                i = 0;
                r++;
            }
        }
    }
    if (base != sbase) {
        free(base);
    }
    return 0;
}

/* Move the checked local SGEs of a WRITE (their mkeys in g) to the remote pieces of process pid,
 * chunk by chunk through the staging buffer, in ascending order (no lock held).  0 or errno as
 * dcxemu_vm_copy. */
static int gather_write(pid_t pid, const struct ibv_sge *sges, const struct gather_key *g,
                        uint32_t nsge, const struct iovec *remote, int nr)
{
    static __thread char staging[GATHER_STAGING];
    char *stage = staging;
    uint32_t si = 0;
    uint64_t soff = 0, roff = 0;
    int ri = 0;
    for (;;) {
        size_t fill = 0, done = 0;
        while (fill < GATHER_STAGING && si < nsge) {
            uint64_t take = sges[si].length - soff;
            if (take > GATHER_STAGING - fill) {
                take = GATHER_STAGING - fill;
            }
            if (take > 0 && gather_sge(&sges[si], &g[si], soff, take, stage + fill) != 0) {
                return EFAULT;
            }
            fill += take;
            soff += take;
            if (soff == sges[si].length) {
                si++;
                soff = 0;
            }
        }
        if (fill == 0) {
            return 0;
        }
        while (done < fill) {
            struct iovec lv, rv;
            int err;
            if (ri >= nr) {
                return EINVAL;   /* remote shorter than local: caller bug */
            }
            lv.iov_base = stage + done;
            lv.iov_len = remote[ri].iov_len - roff;
            if (lv.iov_len > fill - done) {
                lv.iov_len = fill - done;
            }
            rv.iov_base = (char *)remote[ri].iov_base + roff;
            rv.iov_len = lv.iov_len;
            if ((err = dcxemu_vm_copy(pid, 1, &lv, 1, &rv, 1)) != 0) {
                return err;
            }
            done += lv.iov_len;
            roff += lv.iov_len;
            if (roff == remote[ri].iov_len) {
                ri++;
                roff = 0;
            }
        }
    }
}

/* Does the WR's address reach DCT slot t?  InfiniBand: the AH's DLID is the DCT's device LID.
 * RoCE (no LIDs): the AH's destination GID must be the DCT's own address (the table entry its
 * RTR AV names, sgid_index) and the request must use the same GID type (RoCE v1 frames and
 * RoCE v2 UDP datagrams are different packets); every packet, request and response, crosses
 * DCXEMU_ROCE_ROUTERS routers, so a hop limit (IP TTL) not above that count dies on the way
 * (the request by the AH's hop limit, the response by the DCT's).  Ports of different link
 * layers never reach each other. */
static int roce_route_ok(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                         const struct dcxemu_shm_qp *t)
{
    union ibv_gid sgid, tgid;
    uint32_t stype, ttype;
    if (!dcxemu_cfg.roce) {
        return !t->roce && w->dlid >= 1 && w->dlid <= (uint32_t)dcxemu_cfg.num_devices &&
               t->lid == w->dlid;
    }
    if (!t->roce || !w->is_global || t->lid < 1 || t->lid > DCXEMU_MAX_DEVICES ||
        dcxemu_gid_entry(qp->ctx->dev_index, w->sgid_index, &sgid, &stype) != 0 ||
        dcxemu_gid_entry((int)t->lid - 1, t->sgid_index, &tgid, &ttype) != 0) {
        return 0;
    }
    return stype == ttype && memcmp(&tgid, &w->dgid, sizeof(tgid)) == 0 &&
           w->hop_limit > dcxemu_cfg.roce_routers && t->hop_limit > dcxemu_cfg.roce_routers;
}

/* A target that vanished mid-operation is unreachable (retried, then RETRY_EXC_ERR); any other
 * failure to touch registered target memory is a remote access error. */
static enum exec_result copy_failed(int err, struct exec_out *o)
{
    if (err == ESRCH) {
        return EXEC_UNREACHABLE;
    }
    fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
    return EXEC_DONE;
}

/* ---------------------------------------------------------------- plan of one WQE ---- */

/* What a WQE still has to do once its checks are made under the fabric lock and the lock is given
 * back: move its data, then (SEND, WRITE_IMM) complete the receive at the target. */
enum copy_kind { COPY_NONE, COPY_RDMA, COPY_SEND, COPY_WRITE_IMM };

struct exec_plan {
    enum copy_kind kind;
    int to_remote;
    pid_t pid;                 /* the target process, as dcxemu_copy_pid() */
    uint64_t total;
    struct iovbuf liov, riov;  /* local pieces; target pieces (rkey, or the receive WQE) */
    struct gather_key *gk;     /* a WRITE gathered from small-block local mkeys, else NULL */
    uint32_t ngk;
    /* the target, for the receive completion */
    struct dcxemu_shm_cqe rcqe;
    uint16_t towner;
    uint64_t ttoken;
    int32_t cq_idx, srq_idx;
    uint32_t tlid;
};

static void plan_init(struct exec_plan *p)
{
    p->kind = COPY_NONE;
    p->to_remote = 1;
    p->total = 0;
    p->gk = NULL;
    p->ngk = 0;
    iovbuf_init(&p->liov);
    iovbuf_init(&p->riov);
}

static void plan_fini(struct exec_plan *p)
{
    iovbuf_fini(&p->liov);
    iovbuf_fini(&p->riov);
    gather_keys_free(p->gk, p->ngk);
}

/* The target as the completion needs it after the lock was given back (fabric lock held). */
static void plan_target(struct exec_plan *p, const struct dcxemu_shm_qp *t)
{
    p->pid = dcxemu_copy_pid(t->owner);
    p->towner = t->owner;
    p->ttoken = t->owner_token;
    p->cq_idx = t->cq_idx;
    p->srq_idx = t->srq_idx;
    p->tlid = t->lid;
}

/* ---------------------------------------------------------------- receive side ---- */

/* The receive CQE of a SEND or WRITE_IMM at target t, but for its wr_id, status and time. */
static void recv_cqe_init(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                          const struct dcxemu_shm_qp *t, uint64_t total,
                          struct dcxemu_shm_cqe *cqe)
{
    memset(cqe, 0, sizeof(*cqe));
    cqe->qp_num = t->qpn;
    cqe->src_qp = qp->qpx.qp_base.qp_num;
    /* RoCE packets carry a GRH and no LID */
    cqe->slid = dcxemu_cfg.roce ? 0 : (uint16_t)(qp->ctx->dev_index + 1);
    cqe->wc_flags = dcxemu_cfg.roce ? IBV_WC_GRH : 0;
    cqe->solicited = (w->flags & IBV_SEND_SOLICITED) != 0;
    cqe->byte_len = (uint32_t)total;
    cqe->opcode = w->opcode == DCXEMU_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    if (w->opcode == DCXEMU_OP_WRITE_IMM || w->opcode == DCXEMU_OP_SEND_IMM) {
        cqe->wc_flags |= IBV_WC_WITH_IMM;
        cqe->imm = w->imm;
    }
}

static struct dcxemu_shm_srq_wqe *srq_head(struct dcxemu_shm_srq *srq)
{
    return (struct dcxemu_shm_srq_wqe *)dcxemu_ptr(srq->ring_off +
                                                  (srq->head % srq->max_wr) * srq->wqe_size);
}

/* Take the SRQ's head WQE (SRQ lock held, not empty): its wr_id.  The limit event fires (one-shot)
 * when fewer than `limit` WQEs remain. */
static uint64_t srq_take(struct dcxemu_shm_srq *srq, uint16_t owner, int *wake)
{
    uint64_t wr_id = srq_head(srq)->wr_id;
    srq->head++;
    if (srq->limit != 0 && srq->tail - srq->head < srq->limit) {
        srq->limit = 0;
        atomic_store(&srq->limit_event, 1);
        *wake = owner;
    }
    return wr_id;
}

/* Push the receive CQE into the target's CQ, charged to the target's member and device (fabric
 * lock held, so the owner is not reaped meanwhile). */
static void recv_cqe_push(struct exec_plan *p, int *wake)
{
    struct dcxemu_shm_cq *cq;
    if (p->cq_idx < 0) {
        return;
    }
    cq = &dcxemu_fab->cqs[p->cq_idx];
    if (!cq->in_use || cq->owner != p->towner || cq->owner_token != p->ttoken) {
        return;
    }
    DCXEMU_COUNT(p->towner, (int)p->tlid - 1, recv_cqes, 1);
    if (p->rcqe.status != IBV_WC_SUCCESS) {
        DCXEMU_COUNT(p->towner, (int)p->tlid - 1, error_cqes, 1);
    }
    p->rcqe.ts_ns = dcxemu_now_ns();
    if (dcxemu_cq_push(cq, &p->rcqe)) {
        *wake = p->towner;
    }
}

/* The pieces of receive WQE rw that take `total` bytes of a SEND, in order, into riov (fabric and
 * SRQ lock held).  IBV_WC_SUCCESS, or the receive CQE's status with *synd. */
static uint32_t recv_scatter(const struct dcxemu_shm_srq *srq, const struct dcxemu_shm_srq_wqe *rw,
                             const struct exec_plan *p, struct iovbuf *riov, uint32_t *synd)
{
    uint64_t room = 0, total = p->total;
    for (uint32_t i = 0; i < rw->num_sge && i < srq->max_sge; i++) {
        const struct ibv_sge *sg = &rw->sge[i];
        uint64_t take;
        if (sg->length == 0 || room >= total) {
            room += sg->length;
            continue;
        }
        take = total - room < sg->length ? total - room : sg->length;
        if (resolve(sg->lkey, p->towner, p->ttoken, srq->pd_id, sg->addr, sg->length,
                    IBV_ACCESS_LOCAL_WRITE, riov) != 0) {
            *synd = SYND_LOC_PROT;
            return IBV_WC_LOC_PROT_ERR;
        }
        /* only `take` bytes of this SGE receive data: trim what resolve added */
        for (uint64_t extra = sg->length - take; extra > 0 && riov->n > 0;) {
            struct iovec *last = &riov->v[riov->n - 1];
            uint64_t cut = extra < last->iov_len ? extra : last->iov_len;
            last->iov_len -= cut;
            extra -= cut;
            if (last->iov_len == 0) {
                riov->n--;
            }
        }
        room += sg->length;
    }
    if (room < total) {
        *synd = SYND_LOC_LEN;
        return IBV_WC_LOC_LEN_ERR;
    }
    return IBV_WC_SUCCESS;
}

/* A SEND (or a WRITE_IMM without data) takes the SRQ's head WQE now (fabric and SRQ lock held, SRQ
 * not empty): its data needs the WQE's buffers.  A receive that fails, or has nothing to copy,
 * completes here; else the copy and the receive CQE follow without the lock. */
static void recv_take_now(const struct dcxemu_wqe *w, struct dcxemu_shm_srq *srq,
                          struct exec_plan *p, struct exec_out *o, int *wake)
{
    uint32_t st = IBV_WC_SUCCESS, synd = 0;
    if (w->opcode != DCXEMU_OP_WRITE_IMM) {
        st = recv_scatter(srq, srq_head(srq), p, &p->riov, &synd);
    }
    p->rcqe.wr_id = srq_take(srq, p->towner, wake);
    if (st != IBV_WC_SUCCESS) {
        p->rcqe.status = st;
        p->rcqe.vendor_err = synd;
        if (st == IBV_WC_LOC_LEN_ERR) {
            fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        } else {
            fail(o, IBV_WC_REM_OP_ERR, SYND_REM_OP);
        }
    }
    if (st != IBV_WC_SUCCESS || p->total == 0 || w->opcode == DCXEMU_OP_WRITE_IMM) {
        recv_cqe_push(p, wake);
        return;
    }
    p->kind = COPY_SEND;
}

/* SEND, SEND_IMM and WRITE_IMM at the target (fabric lock held).  A WRITE_IMM with data checks the
 * rkey and that a receive WQE waits, and takes it only once the data is placed (recv_finish). */
static enum exec_result resp_recv(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                                  const struct dcxemu_shm_qp *t, struct exec_plan *p,
                                  struct exec_out *o, int *wake)
{
    int imm_data = w->opcode == DCXEMU_OP_WRITE_IMM && p->total > 0;
    struct dcxemu_shm_srq *srq;
    enum exec_result r = EXEC_DONE;
    if (imm_data &&
        (!(t->access & IBV_ACCESS_REMOTE_WRITE) ||
         resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr, p->total,
                 IBV_ACCESS_REMOTE_WRITE, &p->riov) != 0)) {
        fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
        return EXEC_DONE;
    }
    if (t->srq_idx < 0 || !dcxemu_fab->srqs[t->srq_idx].in_use) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    srq = &dcxemu_fab->srqs[t->srq_idx];
    if (dcxemu_shm_lock(&srq->lock) != 0) {
        fail(o, IBV_WC_GENERAL_ERR, 0);
        return EXEC_DONE;
    }
    recv_cqe_init(qp, w, t, p->total, &p->rcqe);
    if (srq->head == srq->tail) {
        r = EXEC_RNR;   /* nothing happens at the target until a WQE is posted */
    } else if (imm_data) {
        p->kind = COPY_WRITE_IMM;
    } else {
        recv_take_now(w, srq, p, o, wake);
    }
    pthread_mutex_unlock(&srq->lock);
    return r;
}

/* The receive after its data copy (fabric lock held).  A SEND's WQE was taken before the copy; a
 * WRITE_IMM takes one now, and if another sender took the last one meanwhile it is an RNR (the
 * retry places the data again, as a retransmission does). */
static enum exec_result recv_finish(struct exec_plan *p, int cerr, struct exec_out *o, int *wake)
{
    struct dcxemu_shm_srq *srq;
    if (p->kind == COPY_SEND) {
        if (cerr == ESRCH) {
            return EXEC_UNREACHABLE;   /* the target is exiting: no receive CQE */
        }
        if (cerr != 0) {
            p->rcqe.status = IBV_WC_LOC_PROT_ERR;
            p->rcqe.vendor_err = SYND_LOC_PROT;
            fail(o, IBV_WC_REM_OP_ERR, SYND_REM_OP);
        }
        recv_cqe_push(p, wake);
        return EXEC_DONE;
    }
    if (cerr != 0) {
        return copy_failed(cerr, o);   /* no receive WQE taken */
    }
    srq = &dcxemu_fab->srqs[p->srq_idx];
    if (!srq->in_use || srq->owner != p->towner || srq->owner_token != p->ttoken) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    if (dcxemu_shm_lock(&srq->lock) != 0) {
        fail(o, IBV_WC_GENERAL_ERR, 0);
        return EXEC_DONE;
    }
    if (srq->head == srq->tail) {
        pthread_mutex_unlock(&srq->lock);
        return EXEC_RNR;
    }
    p->rcqe.wr_id = srq_take(srq, p->towner, wake);
    pthread_mutex_unlock(&srq->lock);
    recv_cqe_push(p, wake);
    return EXEC_DONE;
}

/* UMR and LOCAL_INV on the loopback RC QP: local key updates (fabric lock held). */
static void execute_local(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_out *o)
{
    uint32_t idx = (w->rkey >> 8) - DCXEMU_MKEY_BASE;
    struct dcxemu_shm_mkey *k;
    struct dcxemu_mkey_entry *src, *dst;
    uint64_t unit = 0, length = 0;
    if (!is_mkey(w->rkey)) {
        fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);
        return;
    }
    k = &dcxemu_fab->mkeys[idx];
    if (!k->in_use || !dcxemu_owner_is_me(k->owner, k->owner_token) || k->pd_id != qp->pd->pd_id) {
        fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);
        return;
    }
    if (w->opcode == DCXEMU_OP_LOCAL_INV) {
        if ((w->rkey & 0xff) != k->tag) {
            fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);   /* a stale key invalidates nothing */
            return;
        }
        k->programmed = 0;   /* free: accesses fail until the next UMR */
        return;
    }
    if (k->programmed && dcxemu_cfg.strict_umr) {
        /* The documented contract: invalidate before re-registering. Hardware
         * (v44 sets no check-free flag) would overwrite silently, so an mkey
         * still in use by in-flight work could change under it. */
        fail(o, IBV_WC_MW_BIND_ERR, SYND_LOC_PROT);
        return;
    }
    src = umr_entries(qp, w);
    if (w->umr_n > k->max_entries ||
        (w->opcode == DCXEMU_OP_UMR_INTERLEAVED && w->umr_n + 1 > k->max_entries)) {
        fail(o, IBV_WC_MW_BIND_ERR, SYND_LOC_PROT);   /* the repeat header needs one entry */
        return;
    }
    for (uint32_t i = 0; i < w->umr_n; i++) {
        const struct dcxemu_mkey_entry *e = &src[i];
        uint64_t span = e->bytes;
        if (w->opcode == DCXEMU_OP_UMR_INTERLEAVED && w->umr_repeat > 0) {
            span = (uint64_t)(w->umr_repeat - 1) * e->stride + e->bytes;
        }
        if (span > 0 && (is_mkey(e->lkey) ||
                         mr_lookup(e->lkey, (uint16_t)dcxemu_me, dcxemu_my_token, qp->pd->pd_id,
                                   e->addr, span, 0) == NULL)) {
            fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);   /* bad, foreign or nested leaf */
            return;
        }
        unit += e->bytes;
    }
    length = w->opcode == DCXEMU_OP_UMR_INTERLEAVED ? unit * w->umr_repeat : unit;
    dst = (struct dcxemu_mkey_entry *)dcxemu_ptr(k->entries_off);
    memcpy(dst, src, sizeof(*dst) * w->umr_n);
    k->n = w->umr_n;
    k->interleaved = w->opcode == DCXEMU_OP_UMR_INTERLEAVED;
    k->repeat = w->umr_repeat;
    k->access = w->umr_access;
    k->length = length;
    k->tag = w->rkey & 0xff;   /* the key variant the UMR sets (mkey->lkey's low byte) */
    k->programmed = 1;
}

static uint32_t forced_syndrome(uint32_t st)
{
    switch (st) {
    case IBV_WC_RETRY_EXC_ERR: return SYND_RETRY_EXC;
    case IBV_WC_RNR_RETRY_EXC_ERR: return SYND_RNR_RETRY_EXC;
    case IBV_WC_REM_ACCESS_ERR: return SYND_REM_ACCESS;
    case IBV_WC_LOC_PROT_ERR: return SYND_LOC_PROT;
    case IBV_WC_REM_INV_REQ_ERR: return SYND_REM_INV_REQ;
    case IBV_WC_REM_OP_ERR: return SYND_REM_OP;
    case IBV_WC_LOC_LEN_ERR: return SYND_LOC_LEN;
    case IBV_WC_LOC_QP_OP_ERR: return SYND_LOC_QP_OP;
    case IBV_WC_WR_FLUSH_ERR: return SYND_WR_FLUSH;
    default: return 0;
    }
}

/* The new value of an atomic; 0 if memory is left alone (compare failed). Masked compare-swap:
 * if ((old ^ compare) & compare_mask) == 0, new = (old & ~swap_mask) | (swap & swap_mask).
 * Masked fetch-add: a set bit of the field boundary (in cmp) ends a field, so no carry leaves
 * it (all ones: a per-bit add, i.e. xor). */
static int atomic_compute(const struct dcxemu_wqe *w, uint64_t old, uint32_t asize, uint64_t *val)
{
    uint64_t mask = asize == 4 ? UINT32_MAX : UINT64_MAX;
    if (w->opcode == DCXEMU_OP_FETCH_ADD) {
        if (!w->raw_masked || (w->cmp & mask) == 0) {
            *val = (old + w->swap_add) & mask;
        } else {
            uint64_t sum = 0, carry = 0;
            for (uint32_t bit = 0; bit < asize * 8; bit++) {
                uint64_t a = (old >> bit) & 1, b = (w->swap_add >> bit) & 1;
                uint64_t s = a ^ b ^ carry;
                carry = (a & b) | (a & carry) | (b & carry);
                sum |= s << bit;
                if ((w->cmp >> bit) & 1) {
                    carry = 0;   /* field boundary: the carry does not cross it */
                }
            }
            *val = sum;
        }
        return 1;
    }
    if (!w->raw) {
        if (old != w->cmp) {
            return 0;
        }
        *val = w->swap_add;
        return 1;
    }
    if (((old ^ w->cmp) & w->cmp_mask & mask) != 0) {
        return 0;
    }
    *val = ((old & ~w->swap_mask) | (w->swap_add & w->swap_mask)) & mask;
    return 1;
}

/* What ends a WQE before it looks at any key (fabric lock held): an injected status, a local key
 * operation (UMR, LOCAL_INV), a malformed raw WQE.  1 if the WQE is finished. */
static int exec_local_only(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_out *o)
{
    struct dcxemu_shm_qp *s = &dcxemu_fab->qps[qp->idx];
    if (s->fault_force_status != 0) {
        /* injected: this WR completes with the status instead of executing */
        uint32_t st = s->fault_force_status - 1;
        s->fault_force_status = 0;
        fail(o, st, forced_syndrome(st));
        return 1;
    }
    if (w->opcode >= DCXEMU_OP_UMR_LIST) {
        execute_local(qp, w, o);
        return 1;
    }
    if (__builtin_expect(dcxemu_cfg.faults, 0) && dcxemu_chance(dcxemu_cfg.status_p)) {
        fail(o, dcxemu_cfg.status, forced_syndrome(dcxemu_cfg.status));
        return 1;
    }
    if (w->raw_bad) {
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);   /* a WQE the HCA cannot parse */
        return 1;
    }
    return 0;
}

static int op_is_atomic(const struct dcxemu_wqe *w)
{
    return w->opcode == DCXEMU_OP_CMP_SWP || w->opcode == DCXEMU_OP_FETCH_ADD;
}

static uint32_t atomic_size(const struct dcxemu_wqe *w)
{
    return w->raw ? w->raw_size : 8;
}

/* The local side (fabric lock held): checks that never reach the wire, and the local pieces.  A
 * WRITE from small-block local mkeys is gathered later: checked here, its mkeys copied.  0, or -1
 * with the WQE failed. */
static int local_resolve(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_plan *p,
                         struct exec_out *o)
{
    int writes_local = op_is_atomic(w) || w->opcode == DCXEMU_OP_READ, gather = 0;
    if (w->is_inline) {
        if (writes_local) {
            fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
            return -1;
        }
        p->total = w->inline_len;
        iovbuf_push(&p->liov, wqe_inline(qp, w), p->total);
    } else {
        if (w->opcode == DCXEMU_OP_WRITE) {
            for (uint32_t i = 0; i < w->num_sge && !gather; i++) {
                gather = sge_is_small_interleaved(&wqe_sges(w)[i]);
            }
        }
        for (uint32_t i = 0; i < w->num_sge; i++) {
            struct ibv_sge *sg = &wqe_sges(w)[i];
            /* gathered: the same checks, no piece list */
            if (resolve(sg->lkey, (uint16_t)dcxemu_me, dcxemu_my_token, qp->pd->pd_id, sg->addr,
                        sg->length, writes_local ? IBV_ACCESS_LOCAL_WRITE : 0,
                        gather ? NULL : &p->liov) != 0) {
                fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);
                return -1;
            }
            p->total += sg->length;
        }
    }
    if (p->total > DCXEMU_MAX_MSG_SZ) {
        fail(o, IBV_WC_LOC_LEN_ERR, SYND_LOC_LEN);
        return -1;
    }
    if (op_is_atomic(w) && (p->liov.n != 1 || p->total != atomic_size(w))) {
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);   /* malformed atomic WQE */
        return -1;
    }
    if (gather) {
        p->gk = calloc(w->num_sge, sizeof(*p->gk));
        p->ngk = p->gk != NULL ? w->num_sge : 0;
        if (p->gk == NULL || gather_keys_take(wqe_sges(w), w->num_sge, p->gk) != 0) {
            fail(o, IBV_WC_GENERAL_ERR, 0);
            return -1;
        }
    }
    return 0;
}

/* Reach the target (fabric lock held): wrong LID/GID, unknown/destroyed/dead DCT and wrong key
 * all look alike.  *tp = the DCT's slot, or NULL when the WQE ends here with the result. */
static enum exec_result reach_target(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                                     struct exec_out *o, struct dcxemu_shm_qp **tp)
{
    struct dcxemu_shm_qp *t = &dcxemu_fab->qps[w->dctn & (DCXEMU_MAX_QPS - 1)];
    *tp = NULL;
    if (!t->in_use || !t->is_dct || !t->dct_ready || t->qpn != w->dctn ||
        !roce_route_ok(qp, w, t) || t->dc_key != w->dc_key ||
        !dcxemu_member_alive(t->owner, t->owner_token) || t->fault_unreachable) {
        return EXEC_UNREACHABLE;
    }
    if (t->fault_force_status != 0) {
        /* injected on the target: this WR completes with the status, nothing executes */
        uint32_t st = t->fault_force_status - 1;
        t->fault_force_status = 0;
        fail(o, st, forced_syndrome(st));
        return EXEC_DONE;
    }
    if (t->fault_drop_next > 0) {
        t->fault_drop_next--;   /* injected: this delivery attempt is lost on the wire */
        return EXEC_UNREACHABLE;
    }
    if (__builtin_expect(dcxemu_cfg.faults, 0) && dcxemu_chance(dcxemu_cfg.drop_p)) {
        return EXEC_UNREACHABLE;
    }
    *tp = t;
    return EXEC_DONE;
}

/* WRITE and READ at the target (fabric lock held): the rkey; the copy follows without the lock. */
static void resp_rdma(const struct dcxemu_wqe *w, const struct dcxemu_shm_qp *t,
                      struct exec_plan *p, struct exec_out *o)
{
    int rd = w->opcode == DCXEMU_OP_READ;
    uint32_t right = rd ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
    if (p->total == 0) {
        return;   /* zero-length RDMA does not check the rkey */
    }
    if (!(t->access & right) ||
        resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr, p->total, right,
                &p->riov) != 0) {
        fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
        return;
    }
    p->kind = COPY_RDMA;
    p->to_remote = !rd;
}

/* The atomic's response into the local buffer: 4-byte extended atomic responses are big-endian
 * (mlx5: ext_atomic_arg_sizes_be), 8-byte ones in host order (atomic_req_8B_endianness_mode 1). */
static void atomic_respond(void *dst, uint64_t old, uint32_t asize)
{
    if (asize == 4) {
        uint32_t r32 = htobe32((uint32_t)old);
        memcpy(dst, &r32, 4);
    } else {
        memcpy(dst, &old, 8);
    }
}

/* CMP_SWP and FETCH_ADD at the target: a read-modify-write of 4 or 8 bytes under the fabric lock
 * (not a bulk copy), so it is atomic with respect to all device atomics on the fabric. */
static enum exec_result resp_atomic(const struct dcxemu_wqe *w, const struct dcxemu_shm_qp *t,
                                    struct exec_plan *p, struct exec_out *o)
{
    uint32_t asize = atomic_size(w);
    uint64_t old = 0, val;
    struct iovec viov = { .iov_base = &old, .iov_len = asize };
    int cerr;
    if (w->raddr % asize != 0) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    if (!(t->access & IBV_ACCESS_REMOTE_ATOMIC) ||
        resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr, asize,
                IBV_ACCESS_REMOTE_ATOMIC, &p->riov) != 0) {
        fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
        return EXEC_DONE;
    }
    if (p->riov.n != 1 || (uintptr_t)p->riov.v[0].iov_base % asize != 0) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);   /* word split or misaligned */
        return EXEC_DONE;
    }
    if ((cerr = dcxemu_vm_copy(p->pid, 0, &viov, 1, p->riov.v, 1)) != 0) {
        return copy_failed(cerr, o);
    }
    if (asize == 4) {
        uint32_t v32;
        memcpy(&v32, &old, 4);
        old = v32;
    }
    if (atomic_compute(w, old, asize, &val)) {
        struct iovec niov = { .iov_base = &val, .iov_len = asize };
        if (asize == 4) {
            uint32_t v32 = (uint32_t)val;
            memcpy(&val, &v32, 4);
        }
        if ((cerr = dcxemu_vm_copy(p->pid, 1, &niov, 1, p->riov.v, 1)) != 0) {
            return copy_failed(cerr, o);
        }
    }
    atomic_respond(p->liov.v[0].iov_base, old, asize);
    atomic_fetch_add(&dcxemu_fab->atomic_ops, 1);
    o->byte_len = asize;
    o->bytes = asize;
    return EXEC_DONE;
}

/* Checks and resolution of one WQE, fabric lock held: everything but a data copy.  What is left
 * to do is in p (p->kind); *wake: a member to wake once the lock is given back, or -1. */
static enum exec_result exec_resolve(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                                     struct exec_out *o, struct exec_plan *p, int *wake)
{
    struct dcxemu_shm_qp *t;
    enum exec_result r;
    if (exec_local_only(qp, w, o) || local_resolve(qp, w, p, o) != 0) {
        return EXEC_DONE;
    }
    r = reach_target(qp, w, o, &t);
    if (t == NULL) {
        return r;
    }
    plan_target(p, t);
    o->rnr_ms = rnr_timer_ms[t->min_rnr_timer & 31];
    switch (w->opcode) {
    case DCXEMU_OP_SEND:
    case DCXEMU_OP_SEND_IMM:
    case DCXEMU_OP_WRITE_IMM:
        return resp_recv(qp, w, t, p, o, wake);
    case DCXEMU_OP_WRITE:
    case DCXEMU_OP_READ:
        resp_rdma(w, t, p, o);
        return EXEC_DONE;
    case DCXEMU_OP_CMP_SWP:
    case DCXEMU_OP_FETCH_ADD:
        return resp_atomic(w, t, p, o);
    default:
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
        return EXEC_DONE;
    }
}

/* The data copy of a plan (no lock held).  0 or errno as dcxemu_vm_copy. */
static int plan_copy(const struct exec_plan *p, struct dcxemu_wqe *w)
{
    if (p->gk != NULL) {
        return gather_write(p->pid, wqe_sges(w), p->gk, w->num_sge, p->riov.v, p->riov.n);
    }
    return dcxemu_vm_copy(p->pid, p->to_remote, p->liov.v, p->liov.n, p->riov.v, p->riov.n);
}

/* After the copy: end it and complete what it did.  RDMA needs no lock; a receive retakes the
 * fabric lock, and the copy ends in that hold, after the receive CQE (a destroy or deregistration
 * waiting for the copy then also finds the CQE written). */
static enum exec_result exec_finish(struct dcxemu_qp *qp, struct exec_plan *p, int cerr,
                                    struct exec_out *o, int *wake)
{
    enum exec_result r;
    if (p->kind == COPY_RDMA) {
        dcxemu_copy_end(qp->idx);
        r = cerr != 0 ? copy_failed(cerr, o) : EXEC_DONE;
    } else if (dcxemu_lock() != 0) {
        dcxemu_copy_end(qp->idx);
        fail(o, IBV_WC_GENERAL_ERR, 0);
        return EXEC_DONE;
    } else {
        r = recv_finish(p, cerr, o, wake);
        dcxemu_copy_end(qp->idx);
        dcxemu_unlock();
    }
    if (r == EXEC_DONE && o->status == IBV_WC_SUCCESS) {
        o->bytes = p->total;
        if (p->kind == COPY_RDMA && !p->to_remote) {
            o->byte_len = (uint32_t)p->total;   /* READ */
        }
    }
    return r;
}

/* Ring what a WQE woke (after the fabric lock is released). */
static void wake_target(int wake)
{
    if (wake >= 0 && wake != dcxemu_me) {
        dcxemu_ring(wake);
    } else if (wake == dcxemu_me) {
        dcxemu_engine_kick();
    }
}

/* Execute one WQE: checks and resolution under the fabric lock, the data copy with no fabric lock
 * held (recorded as in flight, see dcxemu_copy_wait), then its completion at the target. */
static enum exec_result execute(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_out *o)
{
    struct exec_plan p;
    enum exec_result r;
    int wake = -1;
    plan_init(&p);
    if (dcxemu_lock() != 0) {
        fail(o, IBV_WC_GENERAL_ERR, 0);
        plan_fini(&p);
        return EXEC_DONE;
    }
    r = exec_resolve(qp, w, o, &p, &wake);
    if (p.kind != COPY_NONE) {
        dcxemu_copy_begin(qp->idx);   /* in the hold that resolved the keys */
    }
    dcxemu_unlock();
    wake_target(wake);
    if (p.kind != COPY_NONE) {
        int cerr;
        dcxemu_test_hook_call(DCXEMU_TEST_COPY_START, qp->qpx.qp_base.qp_num, p.total);
        cerr = plan_copy(&p, w);
        wake = -1;
        r = exec_finish(qp, &p, cerr, o, &wake);
        wake_target(wake);
    }
    plan_fini(&p);
    return r;
}

static uint32_t wc_opcode(const struct dcxemu_wqe *w)
{
    if (w->raw) {
        return IBV_WC_DRIVER2;   /* MLX5DV_WC_RAW_WQE (rdma-core: wr_data = IBV_WC_DRIVER2) */
    }
    switch (w->opcode) {
    case DCXEMU_OP_WRITE:
    case DCXEMU_OP_WRITE_IMM: return IBV_WC_RDMA_WRITE;
    case DCXEMU_OP_READ: return IBV_WC_RDMA_READ;
    case DCXEMU_OP_CMP_SWP: return IBV_WC_COMP_SWAP;
    case DCXEMU_OP_FETCH_ADD: return IBV_WC_FETCH_ADD;
    case DCXEMU_OP_UMR_LIST:
    case DCXEMU_OP_UMR_INTERLEAVED: return IBV_WC_DRIVER1;   /* MLX5DV_WC_UMR */
    case DCXEMU_OP_LOCAL_INV: return IBV_WC_LOCAL_INV;
    default: return IBV_WC_SEND;
    }
}

/* Send CQE for the WQE at index i; returns 1 if a channel event was raised. */
static int complete_wqe(struct dcxemu_qp *qp, struct dcxemu_wqe *w, uint64_t i,
                        const struct exec_out *o)
{
    struct dcxemu_shm_cqe cqe;
    if (o->status == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED) &&
        (w->raw || !qp->sq_sig_all)) {
        return 0;
    }
    DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, send_cqes, 1);
    if (o->status != IBV_WC_SUCCESS) {
        DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, error_cqes, 1);
    }
    memset(&cqe, 0, sizeof(cqe));
    cqe.wr_id = w->wr_id;
    cqe.sq_index = i;
    cqe.ts_ns = dcxemu_now_ns();
    cqe.status = o->status;
    cqe.vendor_err = o->vendor_err;
    cqe.opcode = wc_opcode(w);
    cqe.byte_len = o->byte_len;
    cqe.qp_num = qp->qpx.qp_base.qp_num;
    cqe.is_send = 1;
    return dcxemu_cq_push(qp->send_cq->s, &cqe);
}

/* Microseconds to wait before the head WQE runs: injected delays of the QP and of its target
 * DCT (read without the fabric lock: a stale value only shifts one delay), and DCXEMU_FAULTS. */
static uint64_t head_delay_us(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    uint64_t us = __atomic_load_n(&dcxemu_fab->qps[qp->idx].fault_delay_us, __ATOMIC_RELAXED);
    if (w->opcode < DCXEMU_OP_UMR_LIST) {
        struct dcxemu_shm_qp *t = &dcxemu_fab->qps[w->dctn & (DCXEMU_MAX_QPS - 1)];
        if (w->dctn != 0 && __atomic_load_n(&t->qpn, __ATOMIC_RELAXED) == w->dctn) {
            us += __atomic_load_n(&t->fault_delay_us, __ATOMIC_RELAXED);
        }
        if (__builtin_expect(dcxemu_cfg.faults, 0) && dcxemu_chance(dcxemu_cfg.delay_p)) {
            us += dcxemu_cfg.delay_us;
        }
    }
    return us;
}

static void count_executed(struct dcxemu_qp *qp, struct dcxemu_wqe *w, const struct exec_out *o)
{
    int dev = qp->ctx->dev_index, c = op_info[w->opcode].cnt;
    if (c >= 0) {
        DCXEMU_COUNT(dcxemu_me, dev, wr[c], 1);
    }
    if (o->bytes != 0) {
        DCXEMU_COUNT(dcxemu_me, dev, bytes, o->bytes);
    }
    if (o->status == IBV_WC_LOC_PROT_ERR || o->status == IBV_WC_REM_ACCESS_ERR) {
        DCXEMU_COUNT(dcxemu_me, dev, key_violations, 1);
    }
    DCXEMU_TRACE("exec qp=0x%x op=%s len=%llu wr_id=0x%llx status=%u", qp->qpx.qp_base.qp_num,
                 op_info[w->opcode].name, (unsigned long long)wqe_len(w),
                 (unsigned long long)w->wr_id, o->status);
}

/* Execute published WQEs in order until done or the head WQE must wait for a timer.  The clock
 * is read only where a timer is involved. */
void dcxemu_qp_progress(struct dcxemu_qp *qp)
{
    int raised = 0;
    pthread_mutex_lock(&qp->exec_lock);
    for (;;) {
        uint64_t posted = __atomic_load_n(&qp->sq_posted, __ATOMIC_ACQUIRE);
        uint64_t now = 0, deadline;
        struct dcxemu_wqe *w;
        struct exec_out o;
        enum exec_result r;
        if (__builtin_expect(dcxemu_is_fatal(qp->ctx->dev_index), 0)) {
            /* a dead HCA executes nothing more: queued WRs never complete (checked before every
             * WR, so a device failing while this loop runs stops it at the next one) */
            atomic_store(&qp->deadline_ns, 0);
            break;
        }
        if (qp->sq_done >= posted) {
            atomic_store(&qp->deadline_ns, 0);
            break;
        }
        w = slot(qp, qp->sq_done);
        memset(&o, 0, sizeof(o));
        if (atomic_load(&qp->hw_state) == IBV_QPS_ERR) {
            fail(&o, IBV_WC_WR_FLUSH_ERR, SYND_WR_FLUSH);
            DCXEMU_TRACE("flush qp=0x%x op=%s len=%llu wr_id=0x%llx status=%u",
                         qp->qpx.qp_base.qp_num, op_info[w->opcode].name,
                         (unsigned long long)wqe_len(w), (unsigned long long)w->wr_id, o.status);
            raised |= complete_wqe(qp, w, qp->sq_done, &o);
            qp->sq_done++;
            qp->head_gate_ns = 0;
            continue;
        }
        deadline = atomic_load(&qp->deadline_ns);
        if (deadline != 0 && (now = dcxemu_now_ns()) < deadline) {
            break;
        }
        if (qp->head_gate_ns == 0) {
            /* first look at this head: deferral and injected delays, then it may run */
            uint64_t gate = w->not_before_ns, extra = head_delay_us(qp, w);
            if (extra != 0) {
                now = now != 0 ? now : dcxemu_now_ns();
                gate = (gate > now ? gate : now) + extra * 1000;
            }
            qp->head_gate_ns = gate != 0 ? gate : 1;
        }
        if (qp->head_gate_ns > 1) {
            now = now != 0 ? now : dcxemu_now_ns();
            if (now < qp->head_gate_ns) {
                atomic_store(&qp->deadline_ns, qp->head_gate_ns);
                break;
            }
        }
        r = execute(qp, w, &o);
        if (r == EXEC_RNR) {
            now = now != 0 ? now : dcxemu_now_ns();
            qp->rnr_count++;
            if (qp->rnr_retry == 7 || qp->rnr_count <= qp->rnr_retry) {
                atomic_store(&qp->deadline_ns, now + dcxemu_scaled_ns(o.rnr_ms * 1e6));
                DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, rnr_retries, 1);
                break;
            }
            fail(&o, IBV_WC_RNR_RETRY_EXC_ERR, SYND_RNR_RETRY_EXC);
        } else if (r == EXEC_UNREACHABLE) {
            double t = qp->timeout == 0 ? 4096.0 * (1 << 14) : 4096.0 * (double)(1ull << qp->timeout);
            now = now != 0 ? now : dcxemu_now_ns();
            qp->retry_count++;
            if (qp->timeout == 0 || qp->retry_count <= qp->retry_cnt) {
                atomic_store(&qp->deadline_ns, now + dcxemu_scaled_ns(t));   /* 0 = forever */
                DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, transport_retries, 1);
                break;
            }
            fail(&o, IBV_WC_RETRY_EXC_ERR, SYND_RETRY_EXC);
        }
        qp->rnr_count = 0;
        qp->retry_count = 0;
        if (deadline != 0) {
            atomic_store(&qp->deadline_ns, 0);
        }
        if (o.status != IBV_WC_SUCCESS) {
            atomic_store(&qp->hw_state, IBV_QPS_ERR);   /* qp->state is left alone */
        }
        count_executed(qp, w, &o);
        raised |= complete_wqe(qp, w, qp->sq_done, &o);
        qp->sq_done++;
        qp->head_gate_ns = 0;
    }
    pthread_mutex_unlock(&qp->exec_lock);
    if (atomic_load(&qp->deadline_ns) != 0) {
        dcxemu_engine_kick();   /* let the engine recompute its sleep */
    }
    if (raised) {
        dcxemu_deliver_events();
    }
}

void dcxemu_qp_sq_polled(uint32_t qpn, uint64_t idx)
{
    struct dcxemu_qp *qp;
    pthread_mutex_lock(&dcxemu_reg_lock);
    qp = dcxemu_local_qps[qpn & (DCXEMU_MAX_QPS - 1)];
    if (qp != NULL && qp->qpx.qp_base.qp_num == qpn && atomic_load(&qp->sq_freed) < idx + 1) {
        atomic_store(&qp->sq_freed, idx + 1);
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
}

/* ---------------------------------------------------------------- create ---- */

static uint32_t roundup_pow2(uint64_t v)
{
    uint64_t r = 1;
    while (r < v) {
        r <<= 1;
    }
    return (uint32_t)r;
}

/* spec §2.1 sizing; 0 or errno, caps written back */
static int size_sq(struct ibv_qp_cap *cap, uint64_t ops, uint64_t dv_ops, int dc, size_t *wqe_out)
{
    uint32_t ovh = 16, wqe, inl;
    if (ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ)) {
        ovh = 32;
    }
    if (ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)) {
        ovh = 48;
    }
    if ((ops & (IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW)) ||
        (dv_ops & (MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST))) {
        ovh = 192;
    }
    if (dc) {
        ovh += 48;   /* datagram segment of a DC WQE */
    }
    if (cap->max_send_wr > DCXEMU_MAX_QP_WR || cap->max_send_sge > DCXEMU_MAX_SGE ||
        cap->max_inline_data > dcxemu_cfg.max_wqe) {
        return EINVAL;
    }
    wqe = ovh + 16 * cap->max_send_sge;
    inl = cap->max_inline_data ? ovh + ((4 + cap->max_inline_data + 15) & ~15u) : 0;
    if (inl > wqe) {
        wqe = inl;
    }
    wqe = (wqe + 63) & ~63u;
    if (wqe > dcxemu_cfg.max_wqe) {
        return EINVAL;
    }
    cap->max_inline_data = wqe - ovh - 4;
    cap->max_send_sge = (wqe - ovh) / 16;
    if (cap->max_send_sge > DCXEMU_MAX_SGE) {
        cap->max_send_sge = DCXEMU_MAX_SGE;
    }
    if (cap->max_send_wr > 0) {
        /* providers/mlx5/verbs.c:mlx5_calc_sq_size: the queue is roundup_pow2(max_send_wr * wqe)
         * bytes, at most max_send_wqebb 64-byte basic blocks (1 << log_max_qp_sz, reported as
         * max_qp_wr), whatever max_send_wr alone would allow */
        uint64_t wq_size;
        if (cap->max_send_wr > 0x7fffffffu / dcxemu_cfg.max_wqe) {
            return EINVAL;
        }
        wq_size = roundup_pow2((uint64_t)cap->max_send_wr * wqe);
        if (wq_size / DCXEMU_SEND_WQE_BB > DCXEMU_MAX_SEND_WQEBB) {
            return EINVAL;
        }
        cap->max_send_wr = (uint32_t)(wq_size / wqe);
    }
    if (dc) {
        cap->max_recv_wr = 0;
        cap->max_recv_sge = 0;
    }
    *wqe_out = wqe;
    return 0;
}

static int alloc_qp_slot(struct dcxemu_qp *qp, int is_dct)
{
    int err = dcxemu_lock();
    if (err) {
        return err;
    }
    for (uint32_t n = 0; n < DCXEMU_MAX_QPS; n++) {
        uint32_t i = (dcxemu_fab->next_qp_idx + n) % DCXEMU_MAX_QPS;
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        if (s->in_use) {
            continue;
        }
        memset(&s->pd_id, 0, sizeof(*s) - offsetof(struct dcxemu_shm_qp, pd_id));
        s->is_dct = (uint8_t)is_dct;
        s->dct_ready = 0;
        s->owner = (uint16_t)dcxemu_me;
        s->owner_token = dcxemu_my_token;
        s->in_use = 1;   /* last: a half-made slot is never live */
        dcxemu_hwm_bump(&dcxemu_fab->qp_hwm, i);
        s->qpn = 0;
        s->srq_idx = -1;
        s->cq_idx = -1;
        if (!is_dct) {
            s->gen = dcxemu_qp_next_gen(i);   /* a freed number returns with a new gen */
            s->qpn = s->gen << DCXEMU_QP_IDX_BITS | i;
        }
        dcxemu_fab->next_qp_idx = i + 1;
        qp->idx = (int)i;
        qp->qpx.qp_base.qp_num = s->qpn;
        dcxemu_unlock();
        return 0;
    }
    dcxemu_unlock();
    return ENOMEM;
}

static void init_qp_common(struct dcxemu_qp *qp, struct ibv_context *context,
                           struct ibv_qp_init_attr_ex *attr, enum ibv_qp_type type)
{
    struct ibv_qp *b = &qp->qpx.qp_base;
    pthread_mutex_init(&qp->post_lock, NULL);
    pthread_mutex_init(&qp->exec_lock, NULL);
    atomic_store(&qp->hw_state, IBV_QPS_RESET);
    b->context = context;
    b->qp_context = attr->qp_context;
    b->pd = attr->pd;
    b->send_cq = attr->send_cq;
    b->recv_cq = attr->recv_cq;
    b->srq = attr->srq;
    b->handle = (uint32_t)qp->idx;
    b->state = IBV_QPS_RESET;
    b->qp_type = type;
    pthread_mutex_init(&b->mutex, NULL);
    pthread_cond_init(&b->cond, NULL);
    qp->qpx.wr_set_sge = s_sge;
    qp->qpx.wr_set_sge_list = s_sge_list;
    qp->qpx.wr_set_inline_data = s_inline;
    qp->qpx.wr_set_inline_data_list = s_inline_list;
    qp->qpx.wr_start = wr_start;
    qp->qpx.wr_complete = wr_complete;
    qp->qpx.wr_abort = wr_abort;
    qp->qpx.wr_local_inv = b_local_inv;
    qp->qpx.wr_bind_mw = b_bind_mw;
    atomic_fetch_add(&qp->pd->refcnt, 1);
    atomic_fetch_add(&qp->send_cq->refcnt, 1);
    atomic_fetch_add(&qp->recv_cq->refcnt, 1);
}

/* The loopback RC QP that hosts UMR and LOCAL_INV (spec §2.5). Its qp_num is valid at once. Data
 * operations and a receive queue are not modelled: asking for them fails with EOPNOTSUPP. */
static struct ibv_qp *create_rc(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
                                struct mlx5dv_qp_init_attr *dv)
{
    const uint64_t rc_ops = IBV_QP_EX_WITH_LOCAL_INV;
    const uint64_t rc_dv_ops = MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST;
    uint64_t ops = DEFAULT_SEND_OPS, dv_ops = 0;
    struct ibv_qp_cap cap;
    struct dcxemu_qp *qp;
    size_t wqe = 0;
    int err;
    if ((attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) ||
        !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == NULL ||
        attr->pd->context != context || attr->send_cq == NULL || attr->recv_cq == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    if (dv != NULL) {
        if (dv->comp_mask & ~(uint64_t)(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS |
                                        MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS)) {
            DCXEMU_ERR(EINVAL);
        }
        if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
            (dv->create_flags & ~(uint32_t)(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE |
                                            MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE))) {
            DCXEMU_ERR(EINVAL);
        }
        if (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) {
            dv_ops = dv->send_ops_flags;
            if (dv_ops & ~rc_dv_ops) {
                DCXEMU_ERR(EOPNOTSUPP);
            }
        }
    }
    if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        ops = attr->send_ops_flags;
        if (dcxemu_cfg.no_atomics && (ops & ATOMIC_SEND_OPS)) {
            DCXEMU_ERR(EOPNOTSUPP);   /* checked before the QP type, as mlx5 does */
        }
        if (ops & ~rc_ops) {
            DCXEMU_ERR(EOPNOTSUPP);   /* RC data operations: not modelled */
        }
    }
    if (attr->srq == NULL && (attr->cap.max_recv_wr > 0 || attr->cap.max_recv_sge > 0)) {
        DCXEMU_ERR(EOPNOTSUPP);       /* an RC receive queue: not modelled */
    }
    cap = attr->cap;
    if ((err = size_sq(&cap, ops, dv_ops, 0, &wqe)) != 0) {
        DCXEMU_ERR(err);
    }
    cap.max_recv_wr = cap.max_recv_sge = 0;
    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    qp->ctx = dcxemu_ctx(context);
    qp->is_rc = 1;
    qp->pd = (struct dcxemu_pd *)attr->pd;
    qp->send_cq = (struct dcxemu_cq *)attr->send_cq;
    qp->recv_cq = (struct dcxemu_cq *)attr->recv_cq;
    qp->sq_sig_all = attr->sq_sig_all;
    qp->send_ops = ops;
    qp->port = 1;
    qp->cap = cap;
    qp->wqe_size = (sizeof(struct dcxemu_wqe) + cap.max_send_sge * sizeof(struct ibv_sge) +
                    cap.max_inline_data + 15) & ~(size_t)15;
    qp->ring_slots = cap.max_send_wr ? cap.max_send_wr : 1;
    qp->umr_max = (cap.max_inline_data + 4) / 16;   /* descriptors one WQE can carry */
    qp->ring = calloc(qp->ring_slots, qp->wqe_size);
    qp->umr_ring = calloc((size_t)qp->ring_slots * (qp->umr_max ? qp->umr_max : 1),
                          sizeof(struct dcxemu_mkey_entry));
    err = qp->ring == NULL || qp->umr_ring == NULL ? ENOMEM : alloc_qp_slot(qp, 0);
    if (err != 0) {
        free(qp->ring);
        free(qp->umr_ring);
        free(qp);
        DCXEMU_ERR(err);
    }
    qp->has_qpx = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    init_qp_common(qp, context, attr, IBV_QPT_RC);
    qp->qpx.wr_send = b_rc_unmodelled;
    qp->qpx.wr_send_imm = b_rc_unmodelled_imm;
    qp->qpx.wr_send_inv = b_send_inv;
    qp->qpx.wr_rdma_write = b_rc_unmodelled_rdma;
    qp->qpx.wr_rdma_read = b_rc_unmodelled_rdma;
    if (dv_ops & MLX5DV_QP_EX_WITH_MR_INTERLEAVED) {
        qp->dv.wr_mr_interleaved = b_mr_interleaved;
    }
    if (dv_ops & MLX5DV_QP_EX_WITH_MR_LIST) {
        qp->dv.wr_mr_list = b_mr_list;
    }
    attr->cap = cap;
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_qps[qp->idx] = qp;
    dcxemu_idx_set_add(&dcxemu_qp_set, (uint32_t)qp->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &qp->qpx.qp_base;
}

/* verbs_context.create_qp_ex: RC (the UMR host) only; DC QPs need mlx5dv_create_qp. */
struct ibv_qp *dcxemu_create_qp_ex_op(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
    int err = dcxemu_usable();
    if (err) {
        DCXEMU_ERR(err);
    }
    if (context == NULL || attr == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    if (dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        DCXEMU_ERR(EIO);
    }
    if (attr->qp_type != IBV_QPT_RC) {
        DCXEMU_ERR(EOPNOTSUPP);
    }
    return create_rc(context, attr, NULL);
}

DCXEMU_API struct ibv_qp *dcxemu_mlx5dv_create_qp(struct ibv_context *context,
                                                  struct ibv_qp_init_attr_ex *attr,
                                                  struct mlx5dv_qp_init_attr *dv)
{
    const uint64_t dv_known = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC |
                              MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
    struct dcxemu_qp *qp;
    int is_dct, err, raw_wqe = 0;
    uint64_t ops = DEFAULT_SEND_OPS;
    size_t wqe = 0;
    struct ibv_qp_cap cap;

    err = dcxemu_usable();
    if (err) {
        DCXEMU_ERR(err);
    }
    if (context != NULL && dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        DCXEMU_ERR(EIO);   /* CREATE_QP / CREATE_DCT */
    }
    if (context != NULL && attr != NULL && attr->qp_type == IBV_QPT_RC &&
        (dv == NULL || !(dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC))) {
        return create_rc(context, attr, dv);
    }
    if (context == NULL || attr == NULL || dv == NULL || (dv->comp_mask & ~dv_known)) {
        DCXEMU_ERR(EINVAL);
    }
    if (!(dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC)) {
        /* RC/UD QPs are not modelled yet (part 2); a DRIVER QP without DC is invalid */
        DCXEMU_ERR(attr->qp_type == IBV_QPT_DRIVER ? EINVAL : EOPNOTSUPP);
    }
    if (attr->qp_type != IBV_QPT_DRIVER || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
        attr->pd == NULL || attr->pd->context != context) {
        DCXEMU_ERR(EINVAL);
    }
    if (dv->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCT) {
        is_dct = 1;
        if (attr->comp_mask != IBV_QP_INIT_ATTR_PD ||
            (dv->comp_mask & ~(uint64_t)(MLX5DV_QP_INIT_ATTR_MASK_DC | MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS)) ||
            ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
             (dv->create_flags & ~(uint32_t)MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE)) ||
            attr->srq == NULL || attr->recv_cq == NULL || attr->send_cq == NULL) {
            DCXEMU_ERR(EINVAL);
        }
    } else if (dv->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCI) {
        is_dct = 0;
        if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
            DCXEMU_ERR(EINVAL);
        }
        if (attr->send_cq == NULL || attr->recv_cq == NULL || attr->cap.max_recv_wr != 0 ||
            attr->cap.max_recv_sge != 0) {
            DCXEMU_ERR(EINVAL);
        }
        if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
            (dv->create_flags & ~(uint32_t)(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE |
                                            MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE))) {
            DCXEMU_ERR(EINVAL);
        }
        if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) &&
            (dv->dc_init_attr.dci_streams.log_num_concurent > 0 ||
             dv->dc_init_attr.dci_streams.log_num_errored > 0)) {
            DCXEMU_ERR(EINVAL);   /* streams capability is 0 */
        }
        if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
            ops = attr->send_ops_flags;
            if (dcxemu_cfg.no_atomics && (ops & ATOMIC_SEND_OPS)) {
                DCXEMU_ERR(EOPNOTSUPP);   /* mlx5 qp.c:mlx5_qp_fill_wr_pfns: !atomics_enabled */
            }
            if (ops & ~(uint64_t)DEFAULT_SEND_OPS) {
                DCXEMU_ERR(EOPNOTSUPP);
            }
            if (ops & ~(uint64_t)MODEL_SEND_OPS) {
                DCXEMU_ERR(EOPNOTSUPP);   /* SEND_INV/LOCAL_INV/BIND_MW: not modelled yet */
            }
        }
        if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) &&
            (dv->send_ops_flags & ~(uint64_t)MLX5DV_QP_EX_WITH_RAW_WQE)) {
            DCXEMU_ERR(EOPNOTSUPP);   /* MR_* are RC-only; MEMCPY not modelled */
        }
        if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) &&
            (dv->send_ops_flags & MLX5DV_QP_EX_WITH_RAW_WQE)) {
            raw_wqe = 1;   /* rdma-core v44 mlx5_qp_fill_wr_pfns: DCI takes RAW_WQE|MEMCPY */
        }
        cap = attr->cap;
        if ((err = size_sq(&cap, ops, 0, 1, &wqe)) != 0) {
            DCXEMU_ERR(err);
        }
    } else {
        DCXEMU_ERR(EINVAL);
    }

    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    qp->ctx = dcxemu_ctx(context);
    qp->is_dct = is_dct;
    if (is_dct) {
        dcxemu_ptracer_allow();   /* peers will reach this process's memory */
    }
    qp->pd = (struct dcxemu_pd *)attr->pd;
    qp->send_cq = (struct dcxemu_cq *)attr->send_cq;
    qp->recv_cq = (struct dcxemu_cq *)attr->recv_cq;
    qp->sq_sig_all = attr->sq_sig_all;
    qp->send_ops = ops;
    qp->port = 1;
    if (is_dct) {
        qp->srq = (struct dcxemu_srq *)attr->srq;
        qp->dc_key = dv->dc_init_attr.dct_access_key;
    } else {
        qp->cap = cap;
        qp->wqe_size = (sizeof(struct dcxemu_wqe) + cap.max_send_sge * sizeof(struct ibv_sge) +
                        cap.max_inline_data + 15) & ~(size_t)15;
        qp->ring_slots = cap.max_send_wr ? cap.max_send_wr : 1;
        qp->ring = calloc(qp->ring_slots, qp->wqe_size);
        if (qp->ring == NULL) {
            free(qp);
            DCXEMU_ERR(ENOMEM);
        }
        qp->has_qpx = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    }
    if ((err = alloc_qp_slot(qp, is_dct)) != 0) {
        free(qp->ring);
        free(qp);
        DCXEMU_ERR(err);
    }
    pthread_mutex_init(&qp->post_lock, NULL);
    pthread_mutex_init(&qp->exec_lock, NULL);
    atomic_store(&qp->hw_state, IBV_QPS_RESET);

    struct ibv_qp *b = &qp->qpx.qp_base;
    b->context = context;
    b->qp_context = attr->qp_context;
    b->pd = attr->pd;
    b->send_cq = attr->send_cq;
    b->recv_cq = attr->recv_cq;
    b->srq = attr->srq;
    b->handle = (uint32_t)qp->idx;
    b->state = IBV_QPS_RESET;
    b->qp_type = IBV_QPT_DRIVER;
    pthread_mutex_init(&b->mutex, NULL);
    pthread_cond_init(&b->cond, NULL);
    if (!is_dct) {
        qp->qpx.comp_mask = 0;
        qp->qpx.wr_send = b_send;
        qp->qpx.wr_send_imm = b_send_imm;
        qp->qpx.wr_send_inv = b_send_inv;
        qp->qpx.wr_rdma_write = b_write;
        qp->qpx.wr_rdma_write_imm = b_write_imm;
        qp->qpx.wr_rdma_read = b_read;
        qp->qpx.wr_atomic_cmp_swp = b_cmp_swp;
        qp->qpx.wr_atomic_fetch_add = b_fetch_add;
        qp->qpx.wr_local_inv = b_local_inv;
        qp->qpx.wr_bind_mw = b_bind_mw;
        qp->qpx.wr_set_sge = s_sge;
        qp->qpx.wr_set_sge_list = s_sge_list;
        qp->qpx.wr_set_inline_data = s_inline;
        qp->qpx.wr_set_inline_data_list = s_inline_list;
        qp->qpx.wr_start = wr_start;
        qp->qpx.wr_complete = wr_complete;
        qp->qpx.wr_abort = wr_abort;
        qp->dv.wr_set_dc_addr = s_dc_addr;
        qp->dv.wr_set_dc_addr_stream = s_dc_addr_stream;
        qp->dv.wr_raw_wqe = raw_wqe ? b_raw_wqe : b_raw_wqe_unrequested;
        /* UMR builders stay NULL: rdma-core installs them only on RC QPs */
        attr->cap = cap;
    }
    atomic_fetch_add(&qp->pd->refcnt, 1);
    atomic_fetch_add(&qp->send_cq->refcnt, 1);
    atomic_fetch_add(&qp->recv_cq->refcnt, 1);
    if (qp->srq != NULL && is_dct) {
        atomic_fetch_add(&qp->srq->refcnt, 1);
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_qps[qp->idx] = qp;
    dcxemu_idx_set_add(&dcxemu_qp_set, (uint32_t)qp->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return b;
}

DCXEMU_API struct ibv_qp_ex *dcxemu_ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    if (ibqp == NULL || !qp->has_qpx) {
        return NULL;
    }
    return &qp->qpx;
}

DCXEMU_API struct mlx5dv_qp_ex *dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *q)
{
    return q == NULL ? NULL : &QP(q)->dv;
}

/* ---------------------------------------------------------------- modify ---- */

/* Drop queued WQEs and the QP's unpolled CQEs (RESET / destroy). exec_lock held. */
static void purge_qp(struct dcxemu_qp *qp)
{
    uint32_t qpn = qp->qpx.qp_base.qp_num;
    qp->sq_posted = qp->sq_done = 0;
    atomic_store(&qp->sq_freed, 0);
    qp->rnr_count = qp->retry_count = 0;
    qp->head_gate_ns = 0;
    atomic_store(&qp->deadline_ns, 0);
    if (qpn != 0) {
        dcxemu_cq_purge_qpn(qp->send_cq->s, qpn);
        if (qp->recv_cq != qp->send_cq) {
            dcxemu_cq_purge_qpn(qp->recv_cq->s, qpn);
        }
    }
}

static int check_values(const struct ibv_qp_attr *a, int mask)
{
    if ((mask & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= DCXEMU_MAX_PKEYS) return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) return EINVAL;
    if ((mask & IBV_QP_AV) && (a->ah_attr.port_num > 1 || a->ah_attr.sl > 15)) return EINVAL;
    if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
    if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
    if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > DCXEMU_MAX_RD_ATOM) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > DCXEMU_MAX_RD_ATOM) return EINVAL;
    if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num >= (1u << 24)) return EINVAL;
    return 0;
}

/* An address vector on a RoCE port needs a GRH (the kernel's rdma_check_ah_attr: a RoCE AV
 * without IB_AH_GRH is EINVAL) whose source GID is an entry of the port's table. */
static int check_roce_av(struct dcxemu_qp *qp, const struct ibv_ah_attr *ah)
{
    union ibv_gid gid;
    uint32_t type;
    if (!dcxemu_cfg.roce) {
        return 0;
    }
    if (!ah->is_global ||
        dcxemu_gid_entry(qp->ctx->dev_index, ah->grh.sgid_index, &gid, &type) != 0) {
        return EINVAL;
    }
    return 0;
}

static int dci_masks(int cur, int next, int *req, int *opt)
{
    *req = *opt = 0;
    if (next == IBV_QPS_RESET) return 0;
    if (next == IBV_QPS_ERR) return cur == IBV_QPS_RESET ? EINVAL : 0;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) { *req = IBV_QP_PKEY_INDEX | IBV_QP_PORT; return 0; }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) { *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT; return 0; }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        *req = IBV_QP_PATH_MTU;
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_AV;
        return 0;
    }
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
        *req = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN;
        *opt = IBV_QP_MIN_RNR_TIMER;
        return 0;
    }
    if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) { *opt = IBV_QP_MIN_RNR_TIMER; return 0; }
    return EINVAL;
}

static int rc_masks(int cur, int next, int *req, int *opt)
{
    *req = *opt = 0;
    if (next == IBV_QPS_RESET) return 0;
    if (next == IBV_QPS_ERR) return cur == IBV_QPS_RESET ? EINVAL : 0;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        *req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) {
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        *req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        return 0;
    }
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
        *req = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
               IBV_QP_TIMEOUT;
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        return 0;
    }
    if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) {
        *opt = IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        return 0;
    }
    return EINVAL;
}

static int modify_dct(struct dcxemu_qp *qp, struct ibv_qp_attr *a, int mask, int cur, int next)
{
    const uint32_t access_ok = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    int err;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        if (mask != (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) ||
            (a->qp_access_flags & ~access_ok)) {
            return EINVAL;
        }
        if (dcxemu_cfg.no_atomics && (a->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC)) {
            return EOPNOTSUPP;   /* kernel mlx5_ib_modify_dct: no atomic mode */
        }
        qp->access = a->qp_access_flags;
        qp->pkey_index = a->pkey_index;
        qp->port = a->port_num;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        struct dcxemu_shm_qp *s;
        if (mask != (IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU)) {
            return EINVAL;
        }
        if ((err = dcxemu_lock()) != 0) {
            return err;
        }
        s = &dcxemu_fab->qps[qp->idx];
        s->gen = dcxemu_qp_next_gen((uint32_t)qp->idx);
        s->qpn = s->gen << DCXEMU_QP_IDX_BITS | (uint32_t)qp->idx;
        s->pd_id = qp->pd->pd_id;
        s->dc_key = qp->dc_key;
        s->access = qp->access;
        s->lid = (uint32_t)qp->ctx->dev_index + 1;
        s->roce = (uint8_t)dcxemu_cfg.roce;
        s->sgid_index = a->ah_attr.grh.sgid_index;
        s->hop_limit = a->ah_attr.grh.hop_limit;
        s->traffic_class = a->ah_attr.grh.traffic_class;
        s->srq_idx = qp->srq->idx;
        s->cq_idx = qp->recv_cq->idx;
        s->min_rnr_timer = a->min_rnr_timer;
        s->dct_ready = 1;   /* the DCT number exists from here on */
        qp->qpx.qp_base.qp_num = s->qpn;
        qp->min_rnr_timer = a->min_rnr_timer;
        qp->path_mtu = a->path_mtu;
        dcxemu_unlock();
        return 0;
    }
    return EINVAL;   /* a DCT is never modified back; destroy it instead */
}

DCXEMU_API int dcxemu_ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int cur, next, req, opt, err;
    if (ibqp == NULL || a == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    cur = atomic_load(&qp->hw_state);
    if (mask & IBV_QP_CUR_STATE) {
        return EINVAL;
    }
    next = (mask & IBV_QP_STATE) ? (int)a->qp_state : cur;
    if (next < IBV_QPS_RESET || next > IBV_QPS_ERR || next == IBV_QPS_SQD || next == IBV_QPS_SQE) {
        return EINVAL;
    }
    if ((err = check_values(a, mask)) != 0) {
        return err;
    }
    /* kernel mlx5_ib_modify_qp -> validate_rd_atomic: a DCI's max_rd_atomic is bounded by the
     * DC capability 1 << log_max_ra_res_dc, not by max_qp_init_rd_atom */
    if (!qp->is_dct && !qp->is_rc && (mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
        a->max_rd_atomic > (1u << dcxemu_cfg.log_max_ra_dc)) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index) && next != IBV_QPS_RESET && next != IBV_QPS_ERR) {
        return EIO;   /* only 2RST_QP / 2ERR_QP succeed after an internal error */
    }
    if ((mask & IBV_QP_AV) && (err = check_roce_av(qp, &a->ah_attr)) != 0) {
        return err;
    }
    if (qp->is_dct) {
        if ((err = modify_dct(qp, a, mask, cur, next)) != 0) {
            return err;
        }
        atomic_store(&qp->hw_state, next);
    } else {
        if ((err = (qp->is_rc ? rc_masks : dci_masks)(cur, next, &req, &opt)) != 0) {
            return err;
        }
        if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE))) {
            return EINVAL;   /* every required bit, and nothing outside req ∪ opt */
        }
        if (dcxemu_cfg.no_atomics && (mask & IBV_QP_ACCESS_FLAGS) &&
            (a->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC)) {
            return EOPNOTSUPP;   /* kernel mlx5 set_qpc_atomic_flags: no atomic mode */
        }
        if (mask & IBV_QP_PKEY_INDEX) qp->pkey_index = a->pkey_index;
        if (mask & IBV_QP_PORT) qp->port = a->port_num;
        if (mask & IBV_QP_PATH_MTU) qp->path_mtu = a->path_mtu;
        if (mask & IBV_QP_TIMEOUT) qp->timeout = a->timeout;
        if (mask & IBV_QP_RETRY_CNT) qp->retry_cnt = a->retry_cnt;
        if (mask & IBV_QP_RNR_RETRY) qp->rnr_retry = a->rnr_retry;
        if (mask & IBV_QP_MIN_RNR_TIMER) qp->min_rnr_timer = a->min_rnr_timer;
        if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->max_rd_atomic = a->max_rd_atomic;
        if (mask & IBV_QP_SQ_PSN) qp->sq_psn = a->sq_psn;
        if (mask & IBV_QP_ACCESS_FLAGS) qp->access = a->qp_access_flags;
        if (next == IBV_QPS_RESET) {
            pthread_mutex_lock(&qp->post_lock);
            pthread_mutex_lock(&qp->exec_lock);
            atomic_store(&qp->hw_state, IBV_QPS_RESET);
            qp->been_rts = 0;
            purge_qp(qp);
            pthread_mutex_unlock(&qp->exec_lock);
            pthread_mutex_unlock(&qp->post_lock);
        } else {
            /* the device may have moved the QP to ERR since cur was read: then this
             * transition is no longer valid (as the kernel would see it) */
            int expect = cur;
            if (next != IBV_QPS_ERR &&
                !atomic_compare_exchange_strong(&qp->hw_state, &expect, next)) {
                return EINVAL;
            }
            atomic_store(&qp->hw_state, next);
            if (next == IBV_QPS_RTS) {
                qp->been_rts = 1;
            }
        }
        if (next == IBV_QPS_ERR) {
            dcxemu_qp_progress(qp);   /* outstanding WRs complete with WR_FLUSH_ERR */
        }
    }
    if (mask & IBV_QP_STATE) {
        ibqp->state = (enum ibv_qp_state)next;
    }
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask,
                                   struct ibv_qp_init_attr *init)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    (void)mask;   /* like the provider, report everything */
    if (ibqp == NULL || a == NULL || init == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index)) {
        return EIO;   /* QUERY_QP / QUERY_DCT */
    }
    memset(a, 0, sizeof(*a));
    memset(init, 0, sizeof(*init));
    a->qp_state = (enum ibv_qp_state)atomic_load(&qp->hw_state);
    a->cur_qp_state = a->qp_state;
    a->path_mtu = (enum ibv_mtu)qp->path_mtu;
    a->qp_access_flags = qp->access;
    a->pkey_index = (uint16_t)qp->pkey_index;
    a->port_num = (uint8_t)qp->port;
    a->timeout = (uint8_t)qp->timeout;
    a->retry_cnt = (uint8_t)qp->retry_cnt;
    a->rnr_retry = (uint8_t)qp->rnr_retry;
    a->min_rnr_timer = (uint8_t)qp->min_rnr_timer;
    a->max_rd_atomic = (uint8_t)qp->max_rd_atomic;
    a->sq_psn = qp->sq_psn;
    a->cap = qp->cap;
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = qp->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = qp->sq_sig_all;
    ibqp->state = a->qp_state;   /* the only other writer of qp->state besides modify */
    return 0;
}

DCXEMU_API int dcxemu_ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    if (ibqp == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_qps[qp->idx] = NULL;
    dcxemu_idx_set_del(&dcxemu_qp_set, (uint32_t)qp->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    pthread_mutex_lock(&qp->post_lock);
    pthread_mutex_lock(&qp->exec_lock);
    if (dcxemu_lock() == 0) {
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[qp->idx];
        if (s->in_use && dcxemu_owner_is_me(s->owner, s->owner_token)) {
            s->in_use = 0;
            s->dct_ready = 0;   /* later packets to this dctn find no target */
            s->qpn = 0;
            s->fault_unreachable = s->fault_drop_next = s->fault_force_status = 0;
            __atomic_store_n(&s->fault_delay_us, 0, __ATOMIC_RELAXED);
        }
        dcxemu_unlock();
        dcxemu_copy_wait();   /* a copy through the DCT that began before is over */
    }
    purge_qp(qp);
    pthread_mutex_unlock(&qp->exec_lock);
    pthread_mutex_unlock(&qp->post_lock);
    atomic_fetch_sub(&qp->pd->refcnt, 1);
    atomic_fetch_sub(&qp->send_cq->refcnt, 1);
    atomic_fetch_sub(&qp->recv_cq->refcnt, 1);
    if (qp->srq != NULL && qp->is_dct) {
        atomic_fetch_sub(&qp->srq->refcnt, 1);
    }
    pthread_mutex_destroy(&qp->post_lock);
    pthread_mutex_destroy(&qp->exec_lock);
    free(qp->ring);
    free(qp->umr_ring);
    free(qp);
    return 0;
}
