/* dcxemu QP execution (being split into its own stages by another change): the WR builders are in
 * wr.c, QP creation in qp_create.c, the state machine in qp_state.c. */
#define _GNU_SOURCE
#include "dcxemu_int.h"
#include "wr.h"

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

/* the operation table lives with the builders (wr.c) */
#define op_info dcxemu_op_info

static const double rnr_timer_ms[32] = {
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28,
    1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88,
    163.84, 245.76, 327.68, 491.52,
};

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
static int resolve(uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id, uint64_t addr,
                   uint64_t len, uint32_t need, struct iovbuf *out)
{
    const struct dcxemu_shm_mkey *k;
    const struct dcxemu_mkey_entry *e;
    uint64_t o, end, unit;
    if (!is_mkey(key)) {
        struct dcxemu_shm_mr *m = mr_lookup(key, owner, token, pd_id, addr, len, need);
        return m == NULL || (out != NULL && iovbuf_push(out, mr_ptr(m, addr), len) != 0) ? -1 : 0;
    }
    k = &dcxemu_fab->mkeys[(key >> 8) - DCXEMU_MKEY_BASE];
    if ((key & 0xff) != k->tag || !k->in_use || !k->programmed || k->owner != owner ||
        k->owner_token != token || k->pd_id != pd_id || (k->access & need) != need ||
        len > k->length || addr > k->length - len) {
        return -1;
    }
    e = (const struct dcxemu_mkey_entry *)dcxemu_ptr(k->entries_off);
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

/* Receive side of SEND / WRITE_IMM (fabric lock and SRQ lock held, SRQ not empty). */
static int consume_srq(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct dcxemu_shm_qp *t,
                       struct dcxemu_shm_srq *srq, const struct iovbuf *liov,
                       uint64_t total, struct exec_out *o, int *wake_member)
{
    struct dcxemu_shm_srq_wqe *rw = (struct dcxemu_shm_srq_wqe *)dcxemu_ptr(
        srq->ring_off + (srq->head % srq->max_wr) * srq->wqe_size);
    struct dcxemu_shm_cqe cqe;
    struct iovbuf riov;
    iovbuf_init(&riov);
    memset(&cqe, 0, sizeof(cqe));
    cqe.wr_id = rw->wr_id;
    cqe.qp_num = t->qpn;
    cqe.src_qp = qp->qpx.qp_base.qp_num;
    /* RoCE packets carry a GRH and no LID */
    cqe.slid = dcxemu_cfg.roce ? 0 : (uint16_t)(qp->ctx->dev_index + 1);
    cqe.wc_flags = dcxemu_cfg.roce ? IBV_WC_GRH : 0;
    cqe.ts_ns = dcxemu_now_ns();
    cqe.solicited = (w->flags & IBV_SEND_SOLICITED) != 0;
    cqe.byte_len = (uint32_t)total;
    cqe.opcode = w->opcode == DCXEMU_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    if (w->opcode == DCXEMU_OP_WRITE_IMM || w->opcode == DCXEMU_OP_SEND_IMM) {
        cqe.wc_flags |= IBV_WC_WITH_IMM;
        cqe.imm = w->imm;
    }
    if (w->opcode != DCXEMU_OP_WRITE_IMM) {
        /* scatter the payload over the receive WQE, in order */
        uint64_t room = 0;
        int cerr;
        for (uint32_t i = 0; i < rw->num_sge && i < srq->max_sge; i++) {
            struct ibv_sge *sg = &rw->sge[i];
            uint64_t take;
            if (sg->length == 0 || room >= total) {
                room += sg->length;
                continue;
            }
            take = total - room < sg->length ? total - room : sg->length;
            if (resolve(sg->lkey, t->owner, t->owner_token, srq->pd_id, sg->addr, sg->length,
                        IBV_ACCESS_LOCAL_WRITE, &riov) != 0) {
                cqe.status = IBV_WC_LOC_PROT_ERR;
                cqe.vendor_err = SYND_LOC_PROT;
                fail(o, IBV_WC_REM_OP_ERR, SYND_REM_OP);
                goto out;
            }
            /* only `take` bytes of this SGE receive data: trim what resolve added */
            for (uint64_t extra = sg->length - take; extra > 0 && riov.n > 0;) {
                struct iovec *last = &riov.v[riov.n - 1];
                uint64_t cut = extra < last->iov_len ? extra : last->iov_len;
                last->iov_len -= cut;
                extra -= cut;
                if (last->iov_len == 0) {
                    riov.n--;
                }
            }
            room += sg->length;
        }
        if (room < total) {
            cqe.status = IBV_WC_LOC_LEN_ERR;
            cqe.vendor_err = SYND_LOC_LEN;
            fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
            goto out;
        }
        cerr = total > 0 ? dcxemu_vm_copy(t->owner, 1, liov->v, liov->n, riov.v, riov.n) : 0;
        if (cerr == ESRCH) {
            iovbuf_fini(&riov);
            return ESRCH;   /* the target is exiting: as unreachable, nothing consumed */
        }
        if (cerr != 0) {
            cqe.status = IBV_WC_LOC_PROT_ERR;
            cqe.vendor_err = SYND_LOC_PROT;
            fail(o, IBV_WC_REM_OP_ERR, SYND_REM_OP);
            goto out;
        }
    }
out:
    iovbuf_fini(&riov);
    srq->head++;
    if (srq->limit != 0 && srq->tail - srq->head < srq->limit) {
        srq->limit = 0;   /* one-shot */
        atomic_store(&srq->limit_event, 1);
        *wake_member = t->owner;
    }
    if (t->cq_idx >= 0) {
        struct dcxemu_shm_cq *cq = &dcxemu_fab->cqs[t->cq_idx];
        if (cq->in_use && cq->owner == t->owner) {
            /* charged to the target's member and device */
            DCXEMU_COUNT(t->owner, (int)t->lid - 1, recv_cqes, 1);
            if (cqe.status != IBV_WC_SUCCESS) {
                DCXEMU_COUNT(t->owner, (int)t->lid - 1, error_cqes, 1);
            }
            if (dcxemu_cq_push(cq, &cqe)) {
                *wake_member = t->owner;
            }
        }
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

/* Copy bytes [off, off+len) of a local SGE, already checked by resolve() under the fabric lock
 * still held, to dst.  0, or -1 on a (checked, so impossible) bad key. */
static int gather_sge(const struct ibv_sge *sg, uint64_t off, uint64_t len, char *dst)
{
    const struct dcxemu_shm_mkey *k;
    const struct dcxemu_mkey_entry *e;
    uintptr_t sbase[LEAF_BASES_STACK], *base = sbase;
    uint64_t unit, addr = sg->addr + off, end = addr + len, r, p;
    uint32_t i = 0, n;
    if (!is_mkey(sg->lkey)) {
        const struct dcxemu_shm_mr *m = &dcxemu_fab->mrs[sg->lkey >> 8];
        memcpy(dst, mr_ptr(m, addr), len);
        return 0;
    }
    k = &dcxemu_fab->mkeys[(sg->lkey >> 8) - DCXEMU_MKEY_BASE];
    e = (const struct dcxemu_mkey_entry *)dcxemu_ptr(k->entries_off);
    n = k->n;
    unit = mkey_unit(k, e);
    if (!k->interleaved) {
        /* a list mkey beside the layout: its few pieces, resolved as usual */
        struct iovbuf v;
        int ret;
        iovbuf_init(&v);
        ret = resolve(sg->lkey, (uint16_t)dcxemu_me, dcxemu_my_token, k->pd_id, addr, len, 0, &v);
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

/* Move the checked local SGEs of a WRITE to the remote pieces, chunk by chunk through the
 * staging buffer, in ascending order (fabric lock held).  0 or errno as dcxemu_vm_copy. */
static int gather_write(int member, const struct ibv_sge *sges, uint32_t nsge,
                        const struct iovec *remote, int nr)
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
            if (take > 0 && gather_sge(&sges[si], soff, take, stage + fill) != 0) {
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
            if ((err = dcxemu_vm_copy(member, 1, &lv, 1, &rv, 1)) != 0) {
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

/* Execute one WQE; the caller holds the fabric lock (a run of WQEs shares it, see
 * dcxemu_qp_progress).  *wake_out: a member to wake once the lock is released, or -1. */
static enum exec_result execute(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_out *o,
                                int *wake_out)
{
    struct iovbuf liov, riov;
    int wake = -1, cerr, gather = 0;
    uint64_t total = 0;
    struct dcxemu_shm_qp *t;
    enum exec_result res = EXEC_DONE;
    int is_atomic = w->opcode == DCXEMU_OP_CMP_SWP || w->opcode == DCXEMU_OP_FETCH_ADD;
    int writes_local = is_atomic || w->opcode == DCXEMU_OP_READ;
    uint32_t asize = w->raw ? w->raw_size : 8;

    iovbuf_init(&liov);
    iovbuf_init(&riov);
    if (dcxemu_fab->qps[qp->idx].fault_force_status != 0) {
        /* injected: this WR completes with the status instead of executing */
        uint32_t st = dcxemu_fab->qps[qp->idx].fault_force_status - 1;
        dcxemu_fab->qps[qp->idx].fault_force_status = 0;
        fail(o, st, forced_syndrome(st));
        goto out;
    }
    if (w->opcode >= DCXEMU_OP_UMR_LIST) {
        execute_local(qp, w, o);
        goto out;
    }
    if (__builtin_expect(dcxemu_cfg.faults, 0) && dcxemu_chance(dcxemu_cfg.status_p)) {
        fail(o, dcxemu_cfg.status, forced_syndrome(dcxemu_cfg.status));
        goto out;
    }
    if (w->raw_bad) {
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);   /* a WQE the HCA cannot parse */
        goto out;
    }
    /* local checks first: they never reach the wire */
    if (w->is_inline) {
        if (writes_local) {
            fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
            goto out;
        }
        total = w->inline_len;
        iovbuf_push(&liov, wqe_inline(qp, w), total);
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
                        gather ? NULL : &liov) != 0) {
                fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);
                goto out;
            }
            total += sg->length;
        }
    }
    if (total > DCXEMU_MAX_MSG_SZ) {
        fail(o, IBV_WC_LOC_LEN_ERR, SYND_LOC_LEN);
        goto out;
    }
    if (is_atomic && (liov.n != 1 || total != asize)) {
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);   /* malformed atomic WQE */
        goto out;
    }
    /* reach the target: wrong LID/GID, unknown/destroyed/dead DCT and wrong key all look alike */
    t = &dcxemu_fab->qps[w->dctn & (DCXEMU_MAX_QPS - 1)];
    if (!t->in_use || !t->is_dct || !t->dct_ready || t->qpn != w->dctn ||
        !roce_route_ok(qp, w, t) || t->dc_key != w->dc_key ||
        !dcxemu_member_alive(t->owner, t->owner_token) || t->fault_unreachable) {
        res = EXEC_UNREACHABLE;
        goto out;
    }
    if (t->fault_force_status != 0) {
        /* injected on the target: this WR completes with the status, nothing executes */
        uint32_t st = t->fault_force_status - 1;
        t->fault_force_status = 0;
        fail(o, st, forced_syndrome(st));
        goto out;
    }
    if (t->fault_drop_next > 0) {
        t->fault_drop_next--;   /* injected: this delivery attempt is lost on the wire */
        res = EXEC_UNREACHABLE;
        goto out;
    }
    if (__builtin_expect(dcxemu_cfg.faults, 0) && dcxemu_chance(dcxemu_cfg.drop_p)) {
        res = EXEC_UNREACHABLE;
        goto out;
    }
    o->rnr_ms = rnr_timer_ms[t->min_rnr_timer & 31];
    switch (w->opcode) {
    case DCXEMU_OP_SEND:
    case DCXEMU_OP_SEND_IMM:
    case DCXEMU_OP_WRITE_IMM: {
        struct dcxemu_shm_srq *srq;
        if (w->opcode == DCXEMU_OP_WRITE_IMM && total > 0 &&
            (!(t->access & IBV_ACCESS_REMOTE_WRITE) ||
             resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr, total,
                     IBV_ACCESS_REMOTE_WRITE, &riov) != 0)) {
            fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
            goto out;
        }
        if (t->srq_idx < 0 || !dcxemu_fab->srqs[t->srq_idx].in_use) {
            fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
            goto out;
        }
        srq = &dcxemu_fab->srqs[t->srq_idx];
        if (dcxemu_shm_lock(&srq->lock) != 0) {
            fail(o, IBV_WC_GENERAL_ERR, 0);
            goto out;
        }
        if (srq->head == srq->tail) {
            pthread_mutex_unlock(&srq->lock);
            res = EXEC_RNR;   /* nothing happens at the target until a WQE is posted */
            goto out;
        }
        if (riov.n > 0 && (cerr = dcxemu_vm_copy(t->owner, 1, liov.v, liov.n, riov.v, riov.n)) != 0) {
            pthread_mutex_unlock(&srq->lock);
            res = copy_failed(cerr, o);
            goto out;
        }
        if (consume_srq(qp, w, t, srq, &liov, total, o, &wake) != 0) {
            res = EXEC_UNREACHABLE;
        }
        pthread_mutex_unlock(&srq->lock);
        break;
    }
    case DCXEMU_OP_WRITE:
    case DCXEMU_OP_READ: {
        int rd = w->opcode == DCXEMU_OP_READ;
        uint32_t right = rd ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        if (total == 0) {
            break;   /* zero-length RDMA does not check the rkey */
        }
        if (!(t->access & right) ||
            resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr, total, right, &riov) != 0) {
            fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
            goto out;
        }
        cerr = gather ? gather_write(t->owner, wqe_sges(w), w->num_sge, riov.v, riov.n)
                      : dcxemu_vm_copy(t->owner, !rd, liov.v, liov.n, riov.v, riov.n);
        if (cerr != 0) {
            res = copy_failed(cerr, o);
            goto out;
        }
        if (rd) {
            o->byte_len = (uint32_t)total;
        }
        break;
    }
    case DCXEMU_OP_CMP_SWP:
    case DCXEMU_OP_FETCH_ADD: {
        uint64_t old = 0, val;
        struct iovec viov = { .iov_base = &old, .iov_len = asize };
        if (w->raddr % asize != 0) {
            fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
            goto out;
        }
        if (!(t->access & IBV_ACCESS_REMOTE_ATOMIC) ||
            resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr, asize,
                    IBV_ACCESS_REMOTE_ATOMIC, &riov) != 0) {
            fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
            goto out;
        }
        if (riov.n != 1 || (uintptr_t)riov.v[0].iov_base % asize != 0) {
            fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);   /* word split or misaligned */
            goto out;
        }
        /* Every device atomic runs under the fabric lock, so read-modify-write through
         * process_vm is atomic with respect to all other device atomics. */
        if ((cerr = dcxemu_vm_copy(t->owner, 0, &viov, 1, riov.v, 1)) != 0) {
            res = copy_failed(cerr, o);
            goto out;
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
            if ((cerr = dcxemu_vm_copy(t->owner, 1, &niov, 1, riov.v, 1)) != 0) {
                res = copy_failed(cerr, o);
                goto out;
            }
        }
        if (asize == 4) {
            /* 4-byte extended atomic responses are big-endian (mlx5: ext_atomic_arg_sizes_be) */
            uint32_t r32 = htobe32((uint32_t)old);
            memcpy(liov.v[0].iov_base, &r32, 4);
        } else {
            /* 8-byte responses in host order: the model's atomic_req_8B_endianness_mode is 1 */
            memcpy(liov.v[0].iov_base, &old, 8);
        }
        atomic_fetch_add(&dcxemu_fab->atomic_ops, 1);
        o->byte_len = asize;
        break;
    }
    default:
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
        break;
    }
    if (res == EXEC_DONE && o->status == IBV_WC_SUCCESS) {
        o->bytes = is_atomic ? asize : total;
    }
out:
    iovbuf_fini(&liov);
    iovbuf_fini(&riov);
    *wake_out = wake;
    return res;
}

/* Ring what a SEND woke (after the fabric lock is released). */
static void wake_target(int wake)
{
    if (wake >= 0 && wake != dcxemu_me) {
        dcxemu_ring(wake);
    } else if (wake == dcxemu_me) {
        dcxemu_engine_kick();
    }
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

/* WQEs executed under one hold of the fabric lock: consecutive ready WQEs run as a NIC pipelines
 * a doorbell's batch, without giving the lock back between them.  Bounded, so a long queue does
 * not keep the other members out. */
#define EXEC_RUN_MAX   64
#define EXEC_RUN_BYTES 4096   /* a larger copy ends the run: big copies do not queue others */

/* Give the lock back after this WQE: something outside the model is told about it (a CQE, a
 * woken target), a timer starts, it moved many bytes, or the run is long enough. */
static int run_ends(const struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                    const struct exec_out *o, enum exec_result r, int wake, int run)
{
    return r != EXEC_DONE || wake >= 0 || run >= EXEC_RUN_MAX || o->bytes > EXEC_RUN_BYTES ||
           o->status != IBV_WC_SUCCESS || (w->flags & IBV_SEND_SIGNALED) || qp->sq_sig_all;
}

/* Execute published WQEs in order until done or the head WQE must wait for a timer.  The clock
 * is read only where a timer is involved. */
void dcxemu_qp_progress(struct dcxemu_qp *qp)
{
    int raised = 0, held = 0, run = 0;
    pthread_mutex_lock(&qp->exec_lock);
    for (;;) {
        uint64_t posted = __atomic_load_n(&qp->sq_posted, __ATOMIC_ACQUIRE);
        uint64_t now = 0, deadline;
        struct dcxemu_wqe *w;
        struct exec_out o;
        enum exec_result r;
        int wake = -1;
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
            if (held) {
                dcxemu_unlock();
                held = 0;
            }
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
        if (!held && dcxemu_lock() != 0) {
            fail(&o, IBV_WC_GENERAL_ERR, 0);
            r = EXEC_DONE;
        } else {
            if (!held) {
                held = 1;
                run = 0;
            }
            r = execute(qp, w, &o, &wake);
            if (run_ends(qp, w, &o, r, wake, ++run)) {
                dcxemu_unlock();
                held = 0;
                wake_target(wake);
            }
        }
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
    if (held) {
        dcxemu_unlock();
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

