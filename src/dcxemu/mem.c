/* dcxemu memory stage: MR lookup, indirect mkeys and their layouts, key
 * resolution into iovecs, the WRITE gather from small-block layouts, UMR and
 * LOCAL_INV.  Data copies: copy.c. */
#define _GNU_SOURCE
#include "exec.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Validate a key for an access of len bytes at addr (fabric lock held). Returns
 * the MR. */
static struct dcxemu_shm_mr *
mr_lookup(uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
          uint64_t addr, uint64_t len, uint32_t need)
{
    uint32_t idx = key >> 8;
    struct dcxemu_shm_mr *m;
    if (idx == 0 || idx >= DCXEMU_MAX_MRS) {
        return NULL;
    }
    m = &dcxemu_fab->mrs[idx];
    if (!m->in_use || (m->tag & 0xff) != (key & 0xff) || m->owner != owner ||
        m->owner_token != token || m->pd_id != pd_id ||
        (m->access & need) != need) {
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

void dcxemu_iovbuf_init(struct iovbuf *b)
{
    b->v   = b->small;
    b->n   = 0;
    b->cap = (int)(sizeof(b->small) / sizeof(b->small[0]));
}

void dcxemu_iovbuf_fini(struct iovbuf *b)
{
    if (b->v != b->small) {
        free(b->v);
    }
}

/* Room for n pieces in all, in one step (an interleaved mkey knows its piece
 * count). */
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
    b->v   = v;
    b->cap = (int)n;
    return 0;
}

int dcxemu_iovbuf_push(struct iovbuf *b, void *p, size_t len)
{
    if (len == 0) {
        return 0;
    }
    if (b->n > 0 &&
        (char *)b->v[b->n - 1].iov_base + b->v[b->n - 1].iov_len == (char *)p) {
        b->v[b->n - 1].iov_len += len; /* merge adjacent pieces */
        return 0;
    }
    if (b->n == b->cap) {
        int cap         = b->cap * 2;
        struct iovec *v = malloc(sizeof(*v) * (size_t)cap);
        if (v == NULL) {
            return -1;
        }
        memcpy(v, b->v, sizeof(*v) * (size_t)b->n);
        if (b->v != b->small) {
            free(b->v);
        }
        b->v   = v;
        b->cap = cap;
    }
    b->v[b->n].iov_base = p;
    b->v[b->n].iov_len  = len;
    b->n++;
    return 0;
}

static int is_mkey(uint32_t key)
{
    uint32_t idx = key >> 8;
    return idx >= DCXEMU_MKEY_BASE && idx < DCXEMU_MKEY_BASE + DCXEMU_MAX_MKEYS;
}

/* Leaf bases of an interleaved mkey's entries, on the stack for the usual few
 * entries. */
#define LEAF_BASES_STACK 64

static uint64_t
mkey_unit(const struct dcxemu_shm_mkey *k, const struct dcxemu_mkey_entry *e)
{
    uint64_t unit = 0;
    for (uint32_t i = 0; i < k->n; i++) {
        unit += e[i].bytes;
    }
    return unit;
}

/* Where zero-based offset addr falls in an interleaved layout of `unit` bytes
 * per repeat: repeat *r, entry *i, *p bytes into that entry's block. */
static void interleaved_locate(const struct dcxemu_mkey_entry *e, uint64_t unit,
                               uint64_t addr, uint64_t *r, uint32_t *i,
                               uint64_t *p)
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

/* Check every leaf piece that [addr, end) of an interleaved mkey touches, entry
 * by entry, and note each entry's leaf base (the owner's address of e[i].addr).
 * The pieces of one entry in successive repeats start and end at ascending leaf
 * addresses (the stride is unsigned), so its leaf MR, one address range, holds
 * them all exactly when it holds the span from the first touched piece's first
 * byte to the last touched piece's last byte: the same verdict, at the same
 * rights, as checking each piece, in O(entries) instead of O(pieces).  Entries
 * of zero bytes own no piece and are not checked. */
static int interleaved_check(const struct dcxemu_mkey_entry *e, uint32_t n,
                             uint64_t unit, uint16_t owner, uint64_t token,
                             uint64_t pd_id, uint64_t addr, uint64_t end,
                             uint32_t need, uintptr_t *base)
{
    uint64_t cum = 0;
    for (uint32_t i = 0; i < n; cum += e[i].bytes, i++) {
        uint64_t b = e[i].bytes, rf, rl, fs, ls, lo, hi;
        struct dcxemu_shm_mr *m;
        if (b == 0 || end <= cum) {
            continue;
        }
        rf = addr >= cum + b ? (addr - cum - b) / unit + 1 :
                               0; /* first piece ending after addr */
        rl = (end - 1 - cum) / unit; /* last piece starting before end */
        if (rf > rl) {
            continue; /* the range falls between this entry's pieces */
        }
        fs = rf * unit + cum;
        ls = rl * unit + cum;
        lo = e[i].addr + rf * e[i].stride + (addr > fs ? addr - fs : 0);
        hi = e[i].addr + rl * e[i].stride + (end - ls < b ? end - ls : b);
        m  = mr_lookup(e[i].lkey, owner, token, pd_id, lo, hi - lo, need);
        if (m == NULL) {
            return -1;
        }
        if (base != NULL) {
            base[i] = (uintptr_t)(m->addr - m->iova + e[i].addr);
        }
    }
    return 0;
}

/* The pieces of [addr, addr+len) of interleaved mkey k (checks passed on k
 * itself): every leaf piece checked, in O(entries), then emitted in a tight
 * loop. */
static int resolve_interleaved(const struct dcxemu_shm_mkey *k,
                               const struct dcxemu_mkey_entry *e,
                               uint16_t owner, uint64_t token, uint64_t pd_id,
                               uint64_t addr, uint64_t len, uint32_t need,
                               struct iovbuf *out)
{
    uintptr_t sbase[LEAF_BASES_STACK], *base = sbase;
    uint64_t r, p, o, unit = mkey_unit(k, e), end = addr + len;
    uint32_t i = 0, n = k->n;
    int ret = 0;
    if (len == 0) {
        return 0;
    }
    if (n > LEAF_BASES_STACK && (base = malloc(sizeof(*base) * n)) == NULL) {
        return -1;
    }
    if (interleaved_check(e, n, unit, owner, token, pd_id, addr, end, need,
                          base) != 0) {
        ret = -1;
        goto out_base;
    }
    if (out == NULL) {
        goto out_base;
    }
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
        /* an entry of zero bytes has no piece, and interleaved_check() noted no
         * base */
        if ((piece > 0) &&
            dcxemu_iovbuf_push(out, (void *)(base[i] + r * e[i].stride + p),
                               piece) != 0) {
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

/* Resolve [addr, addr+len) of a memory key owned by (owner, token) in pd_id,
 * needing rights `need`, into pieces of the owner's address space (fabric lock
 * held).  Plain MRs give one piece; an indirect mkey (zero-based,
 * docs/device-spec.md §3.5) gives one per pointed-to range, each leaf checked
 * to be a plain MR of the same owner and PD (nested mkeys are refused) that
 * itself has the rights `need`: an mkey never lends rights its leaves lack.
 * The mkey's key must carry its current tag (set by the last UMR).  With
 * out == NULL only the checks are made.  0, or -1 if invalid. */
static int
resolve_mkey(const struct dcxemu_shm_mkey *k, const struct dcxemu_mkey_entry *e,
             uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
             uint64_t addr, uint64_t len, uint32_t need, struct iovbuf *out);

int dcxemu_resolve(uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
                   uint64_t addr, uint64_t len, uint32_t need,
                   struct iovbuf *out)
{
    const struct dcxemu_shm_mkey *k;
    if (!is_mkey(key)) {
        struct dcxemu_shm_mr *m = mr_lookup(key, owner, token, pd_id, addr, len,
                                            need);
        return m == NULL || (out != NULL &&
                             dcxemu_iovbuf_push(out, mr_ptr(m, addr), len) !=
                                     0) ?
                       -1 :
                       0;
    }
    k = &dcxemu_fab->mkeys[(key >> 8) - DCXEMU_MKEY_BASE];
    return resolve_mkey(k,
                        (const struct dcxemu_mkey_entry *)dcxemu_ptr(
                                k->entries_off),
                        key, owner, token, pd_id, addr, len, need, out);
}

/* dcxemu_resolve() for indirect mkey k with entries e: the fabric's, or a copy
 * taken under the lock. */
static int
resolve_mkey(const struct dcxemu_shm_mkey *k, const struct dcxemu_mkey_entry *e,
             uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
             uint64_t addr, uint64_t len, uint32_t need, struct iovbuf *out)
{
    uint64_t o, end;
    if ((key & 0xff) != k->tag || !k->in_use || !k->programmed ||
        k->owner != owner || k->owner_token != token || k->pd_id != pd_id ||
        (k->access & need) != need || len > k->length ||
        addr > k->length - len) {
        return -1;
    }
    if (k->interleaved) {
        return resolve_interleaved(k, e, owner, token, pd_id, addr, len, need,
                                   out);
    }
    end = addr + len;
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
        leaf  = e[i].addr + (w - cum);
        piece = e[i].bytes - (w - cum);
        if (piece > end - o) {
            piece = end - o;
        }
        m = mr_lookup(e[i].lkey, owner, token, pd_id, leaf, piece, need);
        if (m == NULL ||
            (out != NULL &&
             dcxemu_iovbuf_push(out, mr_ptr(m, leaf), piece) != 0)) {
            return -1;
        }
        o += piece;
    }
    return 0;
}

/* ---------------------------------------------------------------- WRITE gather
 * ---- */

/* A WRITE whose local side is an interleaved mkey of small blocks is gathered
 * here straight from the layout into a staging buffer, one system call per
 * staged chunk, instead of through one iovec per block: the local side is
 * always the executing process's own memory.  Blocks of at least GATHER_MAX_AVG
 * bytes on average go the iovec way, where the kernel copies them directly. */
#define GATHER_MAX_AVG 512
#define GATHER_STAGING 65536

int dcxemu_sge_is_small_interleaved(const struct ibv_sge *sg)
{
    const struct dcxemu_shm_mkey *k;
    uint32_t nz   = 0;
    uint64_t unit = 0;
    if (!is_mkey(sg->lkey) || (sg->lkey & 0xff) != 0) {
        return 0;
    }
    k = &dcxemu_fab->mkeys[(sg->lkey >> 8) - DCXEMU_MKEY_BASE];
    if (!k->in_use || !k->programmed || !k->interleaved) {
        return 0;
    }
    const struct dcxemu_mkey_entry *e = dcxemu_ptr(k->entries_off);
    for (uint32_t i = 0; i < k->n; i++) {
        unit += e[i].bytes;
        nz += e[i].bytes != 0;
    }
    return nz > 0 && unit / nz < GATHER_MAX_AVG;
}

/* 16 bytes, any alignment, any type: gcc would fuse memcpy()s into a slow "rep
 * movs". */
typedef uint64_t u128_unaligned
        __attribute__((vector_size(16), aligned(1), may_alias));

static inline void copy_block(char *d, const char *s, uint64_t b)
{
    switch (b) { /* fixed sizes inline to a move or two */
    case 8:
        memcpy(d, s, 8);
        break;
    case 4:
        memcpy(d, s, 4);
        break;
    case 16:
    case 32:
    case 64:
        for (uint64_t o = 0; o < b; o += 16) {
            *(u128_unaligned *)(d + o) = *(const u128_unaligned *)(s + o);
        }
        break;
    default:
        memcpy(d, s, b);
        break;
    }
}

/* Copy the mkeys of the n SGEs (fabric lock held, keys already checked).  0, or
 * -1: no memory. */
int dcxemu_gather_keys_take(const struct ibv_sge *sges, uint32_t n,
                            struct gather_key *g)
{
    for (uint32_t i = 0; i < n; i++) {
        const struct dcxemu_shm_mkey *k;
        g[i].e = NULL;
        if (!is_mkey(sges[i].lkey)) {
            continue;
        }
        k      = &dcxemu_fab->mkeys[(sges[i].lkey >> 8) - DCXEMU_MKEY_BASE];
        g[i].k = *k;
        g[i].e = malloc(sizeof(*g[i].e) * (k->n > 0 ? k->n : 1));
        if (g[i].e == NULL) {
            return -1;
        }
        memcpy(g[i].e, dcxemu_ptr(k->entries_off), sizeof(*g[i].e) * k->n);
    }
    return 0;
}

void dcxemu_gather_keys_free(struct gather_key *g, uint32_t n)
{
    for (uint32_t i = 0; g != NULL && i < n; i++) {
        free(g[i].e);
    }
    free(g);
}

/* One entry, from the start of a block: a plain strided walk of len bytes from
 * src. */
static void gather_strided(const struct dcxemu_mkey_entry *e, uintptr_t from,
                           uint64_t len, char *dst)
{
    uint64_t b = e->bytes, stride = e->stride, full = len / b;
    const char *src = (const char *)from;
    /* fixed block sizes: the copy is a few 16-byte moves (not a string
     * instruction), the walk a tight loop */
#define STRIDED_WALK(_b, _copy)                                       \
    for (uint64_t j = 0; j < full; j++, src += stride, dst += (_b)) { \
        _copy;                                                        \
    }
#define COPY16(_o) \
    (*(u128_unaligned *)(dst + (_o)) = *(const u128_unaligned *)(src + (_o)))
    switch (b) {
    case 8:
        STRIDED_WALK(8, memcpy(dst, src, 8));
        break;
    case 4:
        STRIDED_WALK(4, memcpy(dst, src, 4));
        break;
    case 16:
        STRIDED_WALK(16, COPY16(0));
        break;
    case 32:
        STRIDED_WALK(32, (COPY16(0), COPY16(16)));
        break;
    case 64:
        STRIDED_WALK(64, (COPY16(0), COPY16(16), COPY16(32), COPY16(48)));
        break;
    default:
        STRIDED_WALK(b, memcpy(dst, src, b));
        break;
    }
#undef COPY16
#undef STRIDED_WALK
    memcpy(dst, src, len - full * b);
}

/* Any layout: len bytes block by block, from repeat r, entry i, p bytes into
 * it. */
static void gather_blocks(const struct dcxemu_mkey_entry *e, uint32_t n,
                          const uintptr_t *base, uint64_t r, uint32_t i,
                          uint64_t p, uint64_t len, char *dst)
{
    for (uint64_t o = 0; o < len;) {
        uint64_t piece = e[i].bytes - p;
        if (piece > len - o) {
            piece = len - o;
        }
        /* an entry of zero bytes has no piece, and interleaved_check() noted no
         * base: its base is not an address, not even for a copy of nothing */
        if (piece > 0) {
            copy_block(dst, (const char *)(base[i] + r * e[i].stride + p),
                       piece);
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

/* Copy bytes [off, off+len) of a local SGE, checked by dcxemu_resolve() under
 * the fabric lock, to dst (no lock held: g is the SGE's mkey as it was then;
 * its leaf MRs and a plain MR stay registered until the copy ends, see
 * dcxemu_copy_wait).  0, or -1 on a (checked, so impossible) bad key. */
static int gather_sge(const struct ibv_sge *sg, const struct gather_key *g,
                      uint64_t off, uint64_t len, char *dst)
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
    k    = &g->k;
    e    = g->e;
    n    = k->n;
    unit = mkey_unit(k, e);
    if (!k->interleaved) {
        /* a list mkey beside the layout: its few pieces, resolved as usual */
        struct iovbuf v;
        int ret;
        dcxemu_iovbuf_init(&v);
        ret = resolve_mkey(k, e, sg->lkey, (uint16_t)dcxemu_me, dcxemu_my_token,
                           k->pd_id, addr, len, 0, &v);
        for (int j = 0; ret == 0 && j < v.n; j++) {
            memcpy(dst, v.v[j].iov_base, v.v[j].iov_len);
            dst += v.v[j].iov_len;
        }
        dcxemu_iovbuf_fini(&v);
        return ret;
    }
    if (unit == 0) {
        return -1;
    }
    if (n > LEAF_BASES_STACK && (base = malloc(sizeof(*base) * n)) == NULL) {
        return -1;
    }
    /* the leaf bases (and, again, the checks: O(entries)) */
    if (interleaved_check(e, n, unit, (uint16_t)dcxemu_me, dcxemu_my_token,
                          k->pd_id, addr, end, 0, base) != 0) {
        if (base != sbase) {
            free(base);
        }
        return -1;
    }
    interleaved_locate(e, unit, addr, &r, &i, &p);
    if (n == 1 && p == 0) {
        gather_strided(&e[0], base[0] + r * e[0].stride, len, dst);
    } else {
        gather_blocks(e, n, base, r, i, p, end - addr, dst);
    }
    if (base != sbase) {
        free(base);
    }
    return 0;
}

/* Move the checked local SGEs of a WRITE (their mkeys in g) to the remote
 * pieces of process pid, chunk by chunk through the staging buffer, in
 * ascending order (no lock held).  0 or errno as dcxemu_vm_copy. */
int dcxemu_gather_write(pid_t pid, const struct ibv_sge *sges,
                        const struct gather_key *g, uint32_t nsge,
                        const struct iovec *remote, int nr)
{
    static __thread char staging[GATHER_STAGING];
    char *stage   = staging;
    uint32_t si   = 0;
    uint64_t soff = 0, roff = 0;
    int ri = 0;
    for (;;) {
        size_t fill = 0, done = 0;
        while (fill < GATHER_STAGING && si < nsge) {
            uint64_t take = sges[si].length - soff;
            if (take > GATHER_STAGING - fill) {
                take = GATHER_STAGING - fill;
            }
            if (take > 0 &&
                gather_sge(&sges[si], &g[si], soff, take, stage + fill) != 0) {
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
                return EINVAL; /* remote shorter than local: caller bug */
            }
            lv.iov_base = stage + done;
            lv.iov_len  = remote[ri].iov_len - roff;
            if (lv.iov_len > fill - done) {
                lv.iov_len = fill - done;
            }
            rv.iov_base = (char *)remote[ri].iov_base + roff;
            rv.iov_len  = lv.iov_len;
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

/* UMR and LOCAL_INV on the loopback RC QP: local key updates (fabric lock
 * held). */
void dcxemu_mem_local_op(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                         struct exec_out *o)
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
    if (!k->in_use || !dcxemu_owner_is_me(k->owner, k->owner_token) ||
        k->pd_id != qp->pd->pd_id) {
        fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);
        return;
    }
    if (w->opcode == DCXEMU_OP_LOCAL_INV) {
        if ((w->rkey & 0xff) != k->tag) {
            fail(o, IBV_WC_LOC_PROT_ERR,
                 SYND_LOC_PROT); /* a stale key invalidates nothing */
            return;
        }
        k->programmed = 0; /* free: accesses fail until the next UMR */
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
    if (w->umr_n > k->max_entries || (w->opcode == DCXEMU_OP_UMR_INTERLEAVED &&
                                      w->umr_n + 1 > k->max_entries)) {
        fail(o, IBV_WC_MW_BIND_ERR,
             SYND_LOC_PROT); /* the repeat header needs one entry */
        return;
    }
    /* The UMR only writes the translation: as on hardware, a leaf that is
     * no MR of ours, lies outside its MR or is another mkey fails the data
     * access that reaches it (resolve_mkey), not the UMR. */
    for (uint32_t i = 0; i < w->umr_n; i++) {
        unit += src[i].bytes;
    }
    length = w->opcode == DCXEMU_OP_UMR_INTERLEAVED ? unit * w->umr_repeat :
                                                      unit;
    dst    = (struct dcxemu_mkey_entry *)dcxemu_ptr(k->entries_off);
    memcpy(dst, src, sizeof(*dst) * w->umr_n);
    k->n           = w->umr_n;
    k->interleaved = w->opcode == DCXEMU_OP_UMR_INTERLEAVED;
    k->repeat      = w->umr_repeat;
    k->access      = w->umr_access;
    k->length      = length;
    k->tag         = w->rkey &
             0xff; /* the key variant the UMR sets (mkey->lkey's low byte) */
    k->programmed = 1;
}
