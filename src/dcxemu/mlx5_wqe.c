/* mlx5 WQE formats: decode a send WQE from its queue, read receive WQEs from
 * an RQ ring and an SRQ list.  The layouts are mlx5dv.h's segment structs;
 * a WQE is read through a view that wraps at the queue end, so a segment
 * (or inline data) that runs past the end continues at the queue start. */
#define _GNU_SOURCE
#include "mlx5_wqe.h"

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <string.h>

#define BAD MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR

/* Segments that follow the control segment, in this order */
enum {
    SEG_AV      = 1 << 0, /* datagram segment, on a DCI and UD */
    SEG_RADDR   = 1 << 1,
    SEG_ATOMIC  = 1 << 2,
    SEG_GATHER  = 1 << 3, /* data and inline segments to the end */
    SEG_SCATTER = 1 << 4, /* data segments only (the local buffer is written) */
    SEG_UMR     = 1 << 5 /* UMR control, mkey context, inline translation */
};

#define KIND(_k)  (1 << DCXEMU_MLX5_QP_##_k)
#define RC_DCI    (KIND(RC) | KIND(DCI))
#define ALL_KINDS (RC_DCI | KIND(UD))
#define SEND      (SEG_AV | SEG_GATHER)
#define RDMA      (SEG_AV | SEG_RADDR)
#define ATOMIC    (SEG_AV | SEG_RADDR | SEG_ATOMIC | SEG_SCATTER)

/* Per opcode: the QP kinds that take it (0: unknown opcode) and its segments.
 * UMR and LOCAL_INVAL are local: no datagram segment even on a DCI. */
static const struct {
    uint8_t kinds;
    uint8_t segs;
} wqe_fmts[MLX5_OPCODE_UMR + 1] = {
    [MLX5_OPCODE_NOP]              = { ALL_KINDS, 0 },
    [MLX5_OPCODE_SEND_INVAL]       = { RC_DCI, SEND },
    [MLX5_OPCODE_RDMA_WRITE]       = { RC_DCI, RDMA | SEG_GATHER },
    [MLX5_OPCODE_RDMA_WRITE_IMM]   = { RC_DCI, RDMA | SEG_GATHER },
    [MLX5_OPCODE_SEND]             = { ALL_KINDS, SEND },
    [MLX5_OPCODE_SEND_IMM]         = { ALL_KINDS, SEND },
    [MLX5_OPCODE_RDMA_READ]        = { RC_DCI, RDMA | SEG_SCATTER },
    [MLX5_OPCODE_ATOMIC_CS]        = { RC_DCI, ATOMIC },
    [MLX5_OPCODE_ATOMIC_FA]        = { RC_DCI, ATOMIC },
    [MLX5_OPCODE_ATOMIC_MASKED_CS] = { RC_DCI, ATOMIC },
    [MLX5_OPCODE_ATOMIC_MASKED_FA] = { RC_DCI, ATOMIC },
    [MLX5_OPCODE_LOCAL_INVAL]      = { RC_DCI, 0 },
    [MLX5_OPCODE_UMR]              = { RC_DCI, SEG_UMR },
};

/* Masked atomic opmod: 8 | (log2(operand size) - 2), as UCX writes it */
#define OPMOD_EXT_ATOMIC 0x08

/* mkey context access bits and the verbs rights they grant */
static const struct {
    uint8_t mkc;
    uint32_t ibv;
} umr_access[] = {
    { MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE },
    { MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ, IBV_ACCESS_REMOTE_READ },
    { MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE,
      IBV_ACCESS_REMOTE_WRITE },
    { MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC, IBV_ACCESS_REMOTE_ATOMIC },
};

/* A UMR translation whose first entry has this op is a repeat block */
#define UMR_REPEAT_BLOCK_OP 0x400

/* One WQE in its queue: offsets count from the control segment and wrap at
 * the queue end; end = ds * 16, the bytes that belong to the WQE. */
struct wqe_view {
    const uint8_t *q;
    uint32_t qmask; /* queue bytes - 1 */
    uint32_t start;
    uint32_t end;
    uint32_t off; /* the next segment */
};

/* Copy len bytes at WQE offset off (len <= queue size: one wrap at most). */
static void
view_copy(const struct wqe_view *v, uint32_t off, void *dst, uint32_t len)
{
    uint32_t pos   = (v->start + off) & v->qmask;
    uint32_t first = v->qmask + 1 - pos;
    if (first > len) {
        first = len;
    }
    memcpy(dst, v->q + pos, first);
    memcpy((uint8_t *)dst + first, v->q, len - first);
}

/* The next segment of len bytes, or -1 when it does not fit ds. */
static int view_take(struct wqe_view *v, void *dst, uint32_t len)
{
    if (len > v->end - v->off) {
        return -1;
    }
    view_copy(v, v->off, dst, len);
    v->off += len;
    return 0;
}

static uint32_t get_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return be64toh(v);
}

/* Datagram segment: the base 16 bytes, and the GRH part when extended */
static int decode_av(struct wqe_view *v, struct dcxemu_mlx5_av *av)
{
    struct mlx5_wqe_av a;
    uint32_t dqp, gfl;

    memset(&a, 0, sizeof(a));
    if (view_take(v, &a, 16) != 0) {
        return -1;
    }
    dqp = be32toh(a.dqp_dct);
    if ((dqp & MLX5_EXTENDED_UD_AV) &&
        view_take(v, (uint8_t *)&a + 16, sizeof(a) - 16) != 0) {
        return -1;
    }
    av->dc_key       = be64toh(a.key.dc_key);
    av->qkey         = be32toh(a.key.qkey.qkey);
    av->dctn         = dqp & 0xffffff;
    av->ext          = !!(dqp & MLX5_EXTENDED_UD_AV);
    av->stat_rate_sl = a.stat_rate_sl;
    av->sl           = a.stat_rate_sl & 0xf;
    av->stat_rate    = a.stat_rate_sl >> 4;
    av->fl_mlid      = a.fl_mlid;
    av->rlid         = be16toh(a.rlid);
    gfl              = be32toh(a.grh_gid_fl);
    av->grh          = (gfl >> 30) & 1;
    av->sgid_index   = (gfl >> 20) & 0xff;
    av->flow_label   = gfl & 0xfffff;
    av->tclass       = a.tclass;
    av->hop_limit    = a.hop_limit;
    memcpy(av->rgid, a.rgid, sizeof(av->rgid));
    memcpy(av->rmac, a.rmac, sizeof(av->rmac));
    return 0;
}

/* Atomic segment: standard (8-byte operands, 16 B) or masked (opmod: 4 or 8
 * bytes; 16 B, but 32 B for an 8-byte masked CS) */
static int decode_atomic(struct wqe_view *v, struct dcxemu_mlx5_wqe *w)
{
    int cs = w->opcode == MLX5_OPCODE_ATOMIC_CS ||
             w->opcode == MLX5_OPCODE_ATOMIC_MASKED_CS;
    uint8_t a[32];
    uint32_t len;

    w->masked = w->opcode == MLX5_OPCODE_ATOMIC_MASKED_CS ||
                w->opcode == MLX5_OPCODE_ATOMIC_MASKED_FA;
    if (!w->masked) {
        if (w->opmod != 0) {
            return -1;
        }
        w->atomic_size = 8;
    } else if (w->opmod == (OPMOD_EXT_ATOMIC | 0) ||
               w->opmod == (OPMOD_EXT_ATOMIC | 1)) {
        w->atomic_size = 4u << (w->opmod & 1);
    } else {
        return -1; /* no other operand size is modelled */
    }
    len = (w->masked && cs && w->atomic_size == 8) ? 32 : 16;
    if (view_take(v, a, len) != 0) {
        return -1;
    }
    w->has_atomic = 1;
    if (w->atomic_size == 4) {
        w->swap_add = get_be32(a);
        w->compare  = get_be32(a + 4);
        if (cs) {
            w->swap_mask    = get_be32(a + 8);
            w->compare_mask = get_be32(a + 12);
        }
    } else {
        w->swap_add = get_be64(a);
        w->compare  = (cs || w->masked) ? get_be64(a + 8) : 0;
        if (cs && w->masked) {
            w->swap_mask    = get_be64(a + 16);
            w->compare_mask = get_be64(a + 24);
        } else if (cs) {
            w->swap_mask = w->compare_mask = UINT64_MAX;
        }
    }
    return 0;
}

/* Data segments to the end of the WQE; with inline allowed, inline segments
 * too (one run of adjacent ones). */
static int
decode_data(struct wqe_view *v, struct dcxemu_mlx5_wqe *w, int inline_ok)
{
    struct mlx5_wqe_data_seg d;
    uint32_t bc, len;
    uint64_t seg;
    uint8_t hdr[4];
    int run = 0; /* inline run: 0 none yet, 1 in it, 2 over */

    while (v->off < v->end) {
        view_copy(v, v->off, hdr, sizeof(hdr));
        bc = get_be32(hdr);
        if (bc & MLX5_INLINE_SEG) {
            len = bc & ~(uint32_t)MLX5_INLINE_SEG;
            seg = ((uint64_t)len + 4 + 15) / 16 * 16; /* padded to 16 B */
            if (!inline_ok || run == 2 || seg > v->end - v->off ||
                len > DCXEMU_MLX5_MAX_INLINE - w->inline_len) {
                return -1;
            }
            if (run == 0) {
                w->inline_at = w->num_sge;
                w->is_inline = run = 1;
            }
            view_copy(v, v->off + 4, w->inline_data + w->inline_len, len);
            w->inline_len += len;
            v->off += (uint32_t)seg;
            continue;
        }
        if (run == 1) {
            run = 2;
        }
        if (w->num_sge == DCXEMU_MLX5_MAX_SGE || view_take(v, &d, 16) != 0) {
            return -1;
        }
        w->sge[w->num_sge].length = be32toh(d.byte_count);
        w->sge[w->num_sge].lkey   = be32toh(d.lkey);
        w->sge[w->num_sge].addr   = be64toh(d.addr);
        w->num_sge++;
    }
    return 0;
}

static uint32_t umr_ibv_access(uint8_t mkc)
{
    uint32_t acc = 0; /* local read is implied */
    for (size_t i = 0; i < sizeof(umr_access) / sizeof(umr_access[0]); i++) {
        if (mkc & umr_access[i].mkc) {
            acc |= umr_access[i].ibv;
        }
    }
    return acc;
}

/* Translation: a repeat block (op 0x400) and its entries, or a KLM list
 * padded with zero entries to a multiple of four. */
static int decode_umr_xlat(struct wqe_view *v, struct dcxemu_mlx5_umr *u)
{
    uint32_t n = u->klm_octowords, i;
    uint8_t e[16];

    if (n > DCXEMU_MLX5_MAX_UMR_ENT) {
        return -1;
    }
    view_take(v, e, 16); /* the caller checked that n entries fit ds */
    if (get_be32(e + 4) == UMR_REPEAT_BLOCK_OP) {
        u->interleaved  = 1;
        u->byte_count   = get_be32(e);
        u->repeat_count = get_be32(e + 8);
        u->num_entries  = (uint32_t)e[14] << 8 | e[15];
        if (u->num_entries + 1 > n) {
            return -1;
        }
        for (i = 0; i < u->num_entries; i++) {
            view_take(v, e, 16);
            u->ent[i].stride     = (uint32_t)e[0] << 8 | e[1];
            u->ent[i].byte_count = (uint32_t)e[2] << 8 | e[3];
            u->ent[i].key        = get_be32(e + 4);
            u->ent[i].va         = get_be64(e + 8);
        }
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (i > 0) {
            view_take(v, e, 16);
        }
        u->ent[i].byte_count = get_be32(e);
        u->ent[i].key        = get_be32(e + 4);
        u->ent[i].va         = get_be64(e + 8);
        u->ent[i].stride     = 0;
        if (u->ent[i].byte_count != 0 || u->ent[i].key != 0 ||
            u->ent[i].va != 0) {
            u->num_entries = i + 1; /* the padding is all zero */
        }
    }
    return 0;
}

/* UMR control segment, mkey context, then the inline translation, if any */
static int decode_umr(struct wqe_view *v, struct dcxemu_mlx5_wqe *w)
{
    struct dcxemu_mlx5_umr *u = &w->umr;
    struct mlx5_wqe_umr_ctrl_seg uc;
    struct mlx5_wqe_mkey_context_seg mk;
    uint32_t qpn_mkey;

    if (view_take(v, &uc, sizeof(uc)) != 0 ||
        view_take(v, &mk, sizeof(mk)) != 0) {
        return -1;
    }
    u->flags         = uc.flags;
    u->klm_octowords = be16toh(uc.klm_octowords);
    u->mkey_mask     = be64toh(uc.mkey_mask);
    qpn_mkey         = be32toh(mk.qpn_mkey);
    u->free          = !!(mk.free & MLX5_WQE_MKEY_CONTEXT_FREE);
    u->access_flags  = umr_ibv_access(mk.access_flags);
    u->tag           = qpn_mkey & 0xff;
    u->qpn           = qpn_mkey >> 8;
    u->start_addr    = be64toh(mk.start_addr);
    u->len           = be64toh(mk.len);
    if (uc.bsf_octowords != 0) {
        return -1; /* signature and crypto BSFs are not modelled */
    }
    if (u->klm_octowords == 0) {
        return 0;
    }
    if (!(u->flags & MLX5_WQE_UMR_CTRL_FLAG_INLINE) ||
        (uint32_t)u->klm_octowords * 16 > v->end - v->off) {
        return -1; /* an indirect translation list is not modelled */
    }
    return decode_umr_xlat(v, u);
}

int dcxemu_mlx5_wqe_decode(const void *sq_buf, uint32_t wqebb_cnt,
                           uint32_t wqebb, enum dcxemu_mlx5_qp_kind kind,
                           uint32_t max_wqe_bytes, struct dcxemu_mlx5_wqe *w)
{
    struct wqe_view v;
    struct mlx5_wqe_ctrl_seg ctrl;
    uint32_t opmod_idx_opcode, qpn_ds;
    uint8_t segs;

    memset(w, 0, offsetof(struct dcxemu_mlx5_wqe, sge));
    w->inline_len = w->inline_at = 0;
    memset(&w->umr, 0, offsetof(struct dcxemu_mlx5_umr, ent));
    if (wqebb_cnt == 0 || (wqebb_cnt & (wqebb_cnt - 1)) != 0 ||
        wqebb >= wqebb_cnt) {
        return BAD;
    }
    v.q     = sq_buf;
    v.qmask = wqebb_cnt * MLX5_SEND_WQE_BB - 1;
    v.start = wqebb * MLX5_SEND_WQE_BB;
    v.off   = 0;
    /* the control segment never wraps: it starts a basic block */
    memcpy(&ctrl, v.q + v.start, sizeof(ctrl));
    opmod_idx_opcode = be32toh(ctrl.opmod_idx_opcode);
    qpn_ds           = be32toh(ctrl.qpn_ds);
    w->opcode        = opmod_idx_opcode & 0xff;
    w->wqe_index     = (opmod_idx_opcode >> 8) & 0xffff;
    w->opmod         = opmod_idx_opcode >> 24;
    w->qpn           = qpn_ds >> 8;
    w->ds            = qpn_ds & 0x3f;
    w->fm_ce_se      = ctrl.fm_ce_se;
    w->imm           = ctrl.imm;
    w->stream_id     = be16toh(ctrl.dci_stream_channel_id);
    w->num_wqebb     = (w->ds * 16u + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    if (w->ds == 0 || w->ds * 16u > max_wqe_bytes || w->num_wqebb > wqebb_cnt) {
        return BAD;
    }
    v.end = w->ds * 16u;
    v.off = sizeof(ctrl);

    if (w->opcode >= sizeof(wqe_fmts) / sizeof(wqe_fmts[0]) ||
        !(wqe_fmts[w->opcode].kinds & (1 << kind))) {
        return BAD; /* unknown, or not one this QP kind takes */
    }
    segs = wqe_fmts[w->opcode].segs;
    if (w->opcode == MLX5_OPCODE_LOCAL_INVAL || (segs & SEG_UMR)) {
        w->umr.mkey = be32toh(w->imm); /* the key a local operation acts on */
    }
    if ((segs & SEG_AV) && kind != DCXEMU_MLX5_QP_RC) {
        if (decode_av(&v, &w->av) != 0) {
            return BAD;
        }
        w->has_av = 1;
    }
    if (segs & SEG_RADDR) {
        struct mlx5_wqe_raddr_seg r;
        if (view_take(&v, &r, sizeof(r)) != 0) {
            return BAD;
        }
        w->raddr     = be64toh(r.raddr);
        w->rkey      = be32toh(r.rkey);
        w->has_raddr = 1;
    }
    if ((segs & SEG_ATOMIC) && decode_atomic(&v, w) != 0) {
        return BAD;
    }
    if ((segs & SEG_UMR) && decode_umr(&v, w) != 0) {
        return BAD;
    }
    if ((segs & (SEG_GATHER | SEG_SCATTER)) &&
        decode_data(&v, w, segs & SEG_GATHER) != 0) {
        return BAD;
    }
    return 0;
}

int dcxemu_mlx5_wqe_check_av(const struct dcxemu_mlx5_wqe *w,
                             enum dcxemu_mlx5_qp_kind kind, int compact_av)
{
    if (kind == DCXEMU_MLX5_QP_DCI && w->has_av && !w->av.ext && !compact_av) {
        return BAD;
    }
    return 0;
}

/* A list of data segments: up to n, ended early by MLX5_INVALID_LKEY */
static int read_data_list(const uint8_t *p, uint32_t n, uint32_t max_sge,
                          struct dcxemu_mlx5_sge *sge, uint32_t *num_sge)
{
    struct mlx5_wqe_data_seg d;
    uint32_t i;

    *num_sge = 0;
    if (n == 0) {
        return BAD;
    }
    for (i = 0; i < n; i++) {
        memcpy(&d, p + (size_t)i * sizeof(d), sizeof(d));
        if (be32toh(d.lkey) == MLX5_INVALID_LKEY) {
            break;
        }
        if (i == max_sge) {
            return BAD;
        }
        sge[i].length = be32toh(d.byte_count);
        sge[i].lkey   = be32toh(d.lkey);
        sge[i].addr   = be64toh(d.addr);
    }
    *num_sge = i;
    return 0;
}

int dcxemu_mlx5_rq_wqe_read(const void *buf, uint32_t stride, uint32_t index,
                            uint32_t max_sge, struct dcxemu_mlx5_sge *sge,
                            uint32_t *num_sge)
{
    const uint8_t *p = (const uint8_t *)buf + (size_t)index * stride;
    return read_data_list(p, stride / sizeof(struct mlx5_wqe_data_seg), max_sge,
                          sge, num_sge);
}

int dcxemu_mlx5_srq_wqe_read(const void *buf, uint32_t stride, uint32_t index,
                             uint32_t max_sge, struct dcxemu_mlx5_sge *sge,
                             uint32_t *num_sge, uint16_t *next_index)
{
    const uint8_t *p = (const uint8_t *)buf + (size_t)index * stride;
    struct mlx5_wqe_srq_next_seg next;

    *num_sge = 0;
    if (stride < sizeof(next)) {
        return BAD;
    }
    memcpy(&next, p, sizeof(next));
    *next_index = be16toh(next.next_wqe_index);
    return read_data_list(p + sizeof(next),
                          (stride - sizeof(next)) /
                                  sizeof(struct mlx5_wqe_data_seg),
                          max_sge, sge, num_sge);
}
