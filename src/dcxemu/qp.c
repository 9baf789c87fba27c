/* dcxemu DC QPs: create/modify/query/destroy and the ibv_wr_* builders (execution: req.c). */
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
