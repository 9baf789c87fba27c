/* The mlx5 face's UAR pages: where the application mapped them, and what a
 * store into them means.
 *
 * libmlx5 maps the UAR pages from the uverbs descriptor right after its
 * context is made.  That descriptor is a memfd, so the kernel maps it
 * whatever path the mmap() takes (UCX's memory hooks patch mmap, and a
 * preloaded wrapper would not see it); the face finds the mappings in
 * /proc/self/maps by the memfd's inode before every command that creates a
 * CQ or a QP, so they are trapped before anything exists to ring them.  With
 * bf_reg_size 0 every send doorbell is one 8-byte store of the first half of
 * the last WQE's control segment (the QP number is in it) at offset 0x800, and
 * a CQ arm is one store at 0x20 of the arm word and the CQ number.
 *
 * With BlueFlame (DCXEMU_MLX5_BF) a page holds libmlx5's bfregs at 0x800 +
 * k * bf_reg_size, each of two halves that doorbells alternate between.  A
 * store at the start of a half is a doorbell, or the first of the stores of
 * a BlueFlame copy of the WQE (both begin with the WQE's control segment):
 * the device takes the WQEs the doorbell record shows at once, as for any
 * doorbell, and keeps the bytes; the stores after it fill the half in
 * ascending order, and once the WQE's basic blocks are all there the copy
 * is checked against the WQE in the send queue.  Producer bugs are logged
 * and counted, never executed differently: a copy unlike the queue's WQE
 * (bf_mismatches), a doorbell to the half the last one used (bf_same_half;
 * not the first register, libmlx5's bfreg 0, which has no BlueFlame and no
 * halves), stores that continue no copy, pass the WQE's end or leave a copy
 * unfinished (bf_errors).
 */
#define _GNU_SOURCE
#include "face.h"
#include "trap.h"

#include <endian.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UAR_CQ_DOORBELL 0x20 /* MLX5_CQ_DOORBELL */
#define UAR_SQ_DOORBELL 0x800 /* MLX5_BF_OFFSET */
#define UAR_LOG_MAX     16 /* lines per kind of producer bug */

unsigned face_bf_reg_size(void)
{
    const char *env = getenv("DCXEMU_MLX5_BF");
    char *end;
    unsigned long v;

    if ((env == NULL) || (*env == '\0') || !strcmp(env, "0")) {
        return 0;
    }
    if (!strcmp(env, "1")) {
        return FACE_BF_REG_MAX; /* ConnectX: 256 bytes a half */
    }
    v = strtoul(env, &end, 0);
    if ((*end != '\0') || (v < 128) || (v > FACE_BF_REG_MAX) || (v & (v - 1))) {
        face_log("DCXEMU_MLX5_BF=%s: not 0, 1 or a register size of 128, 256 "
                 "or 512 bytes; no BlueFlame",
                 env);
        return 0;
    }
    return (unsigned)v;
}

void face_bf_init(struct face_file *f, unsigned reg_size, unsigned low_lat)
{
    f->bf_half       = reg_size / 2;
    f->bfreg_low_lat = low_lat < FACE_TOT_BFREGS ? low_lat :
                                                   FACE_TOT_BFREGS - 1;
    for (unsigned i = 0; i < FACE_UAR_PAGES * FACE_BFREGS_PER_UAR; i++) {
        f->bf[i].last_half = -1;
    }
}

/* As the kernel (mlx5_ib alloc_bfreg): a free low-latency register, else
 * the least used of the shared ones, else the first, which has none; in
 * libmlx5's numbering, two of four per UAR. */
uint32_t face_bfreg_get(struct face_file *f, int *bfreg)
{
    unsigned first_hi = FACE_TOT_BFREGS - f->bfreg_low_lat, n = 0;

    pthread_mutex_lock(&f->bf_lock);
    for (unsigned i = first_hi; (n == 0) && (i < FACE_TOT_BFREGS); i++) {
        n = f->bfreg_qps[i] == 0 ? i : 0;
    }
    for (unsigned i = 1; (n == 0) && (i < first_hi); i++) {
        if ((n == 0) || (f->bfreg_qps[i] < f->bfreg_qps[n])) {
            n = i;
        }
    }
    for (unsigned i = n + 1; (n != 0) && (n < first_hi) && (i < first_hi);
         i++) {
        if (f->bfreg_qps[i] < f->bfreg_qps[n]) {
            n = i;
        }
    }
    f->bfreg_qps[n]++;
    pthread_mutex_unlock(&f->bf_lock);
    *bfreg = (int)n;
    return n / 2 * FACE_BFREGS_PER_UAR + n % 2;
}

void face_bfreg_put(struct face_file *f, int bfreg)
{
    if (bfreg < 0) {
        return;
    }
    pthread_mutex_lock(&f->bf_lock);
    f->bfreg_qps[bfreg]--;
    pthread_mutex_unlock(&f->bf_lock);
}

/* A producer bug: a line for the first few of each kind, a count of all. */
static void __attribute__((format(printf, 2, 3)))
uar_bf_bug(_Atomic uint64_t *count, const char *fmt, ...)
{
    char line[256];
    va_list ap;

    if (atomic_fetch_add_explicit(count, 1, memory_order_relaxed) <
        UAR_LOG_MAX) {
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        face_log("%s", line);
    }
}

/* The UAR page (libmlx5's UAR index) that addr is in, -1: none. */
static int uar_page(struct face_file *f, uintptr_t addr, long page_size)
{
    uintptr_t base = addr & ~(uintptr_t)(page_size - 1);

    for (int i = 0; i < FACE_UAR_PAGES; i++) {
        if (__atomic_load_n(&f->uar_page[i], __ATOMIC_RELAXED) == base) {
            return i;
        }
    }
    return -1;
}

/* The 8-byte words of a half that bytes [off, off + size) cover. */
static uint32_t uar_words(unsigned off, unsigned size)
{
    uint64_t m = ((1ull << (size / 8)) - 1) << (off / 8);
    return (uint32_t)m;
}

/* Whether a store goes on with the record's copy: it stays within its WQE
 * and writes the words already written as they are (a write-combining
 * buffer takes a rewrite: glibc's memcpy copies 64 bytes with two
 * overlapping stores).  At the start of the half only a rewrite of more
 * than the first word, with nothing new in the doorbell record, is one: a
 * WQE of the same first bytes (its queue reset) is a doorbell. */
static int uar_bf_merges(const struct face_bf *bf, unsigned h, unsigned off,
                         const uint8_t *bytes, unsigned size, int pending)
{
    uint32_t words = uar_words(off, size);
    uint32_t both  = bf->half[h].filled & words;

    if (!bf->half[h].live || (off + size > bf->half[h].need)) {
        return 0;
    }
    if ((off == 0) && ((size <= 8) || (both != words) || pending)) {
        return 0;
    }
    for (unsigned w = off / 8; w < (off + size) / 8; w++) {
        if ((both & (1u << w)) &&
            memcmp(bf->half[h].buf + 8 * w, bytes + 8 * w - off, 8)) {
            return 0;
        }
    }
    return 1;
}

/* A store into a BlueFlame register's half (8-byte aligned, whole words):
 * 1 when it is a doorbell (of QP *qpn_p). */
static int uar_bf_store(struct face_file *f, unsigned bfregn, unsigned h,
                        unsigned off, const uint8_t *bytes, unsigned size,
                        uint32_t *qpn_p)
{
    struct face_bf *bf = &f->bf[bfregn];
    uint32_t check_qpn = 0, check_len = 0, ds, all;
    uint8_t check[FACE_BF_REG_MAX / 2];
    int doorbell = 0, pending = 0, mism;
    __be32 w[2];

    FACE_STAT(bf_stores, 1);
    if ((off == 0) && (size > 8)) {
        memcpy(w, bytes, sizeof(w));
        pending = face_sq_pending(f, be32toh(w[1]) >> 8);
    }
    pthread_mutex_lock(&f->bf_lock);
    if (uar_bf_merges(bf, h, off, bytes, size, pending)) {
        /* the copy goes on (or a word of it is written again) */
    } else if (off == 0) {
        /* a doorbell; the copy before it is done (only its first word: it
         * was a doorbell too) */
        if (bf->half[h].live && !bf->half[h].checked &&
            (bf->half[h].filled & ~1u)) {
            uar_bf_bug(&face_stats.bf_errors,
                       "QP 0x%x: BlueFlame copy left unfinished (words 0x%x "
                       "of %u bytes)",
                       bf->half[h].qpn, bf->half[h].filled, bf->half[h].need);
        }
        memcpy(w, bytes, sizeof(w));
        if ((bfregn != 0) && (bf->last_half == (int)h)) {
            uar_bf_bug(&face_stats.bf_same_half,
                       "bfreg %u: a doorbell to half %u, the half the last "
                       "one used (the producer did not toggle), QP 0x%x",
                       bfregn, h, be32toh(w[1]) >> 8);
        }
        bf->last_half      = (int)h;
        ds                 = be32toh(w[1]) & 0x3f;
        bf->half[h].qpn    = be32toh(w[1]) >> 8;
        bf->half[h].need   = (ds * 16 + 63) / 64 * 64;
        bf->half[h].filled = 0;
        bf->half[h].live   = (bf->half[h].need <= f->bf_half) &&
                           (size <= bf->half[h].need);
        bf->half[h].checked = 0;
        doorbell            = 1;
        *qpn_p              = bf->half[h].qpn;
        if (!bf->half[h].live) {
            goto out; /* a copy of this WQE would not fit: a doorbell */
        }
    } else {
        uar_bf_bug(&face_stats.bf_errors,
                   !bf->half[h].live ?
                           "bfreg %u: a store at byte %u of half %u continues "
                           "no BlueFlame copy" :
                   (off + size > bf->half[h].need) ?
                           "bfreg %u: a store at byte %u of half %u passes the "
                           "WQE its copy holds" :
                           "bfreg %u: a store at byte %u of half %u writes a "
                           "BlueFlame copy over with other bytes",
                   bfregn, off, h);
        goto out;
    }
    memcpy(bf->half[h].buf + off, bytes, size);
    bf->half[h].filled |= uar_words(off, size);
    all = uar_words(0, bf->half[h].need);
    if (!bf->half[h].checked && ((bf->half[h].filled & all) == all)) {
        bf->half[h].checked = 1;
        check_qpn           = bf->half[h].qpn;
        check_len           = bf->half[h].need;
        memcpy(check, bf->half[h].buf, check_len);
    }
out:
    pthread_mutex_unlock(&f->bf_lock);
    if (check_len != 0) {
        /* the WQEs were taken at the first store: the copy's WQE is one */
        mism = face_sq_bf_check(f, check_qpn, check, check_len);
        if (mism == 0) {
            FACE_STAT(bf_copies, 1);
        } else {
            uar_bf_bug(&face_stats.bf_mismatches,
                       "QP 0x%x: BlueFlame copy of %u bytes unlike the WQE in "
                       "the send queue (byte %d differs; -1: no such QP)",
                       check_qpn, check_len, mism - 1);
        }
    }
    return doorbell;
}

static void uar_store(void *arg, void *addr, uint64_t value,
                      const uint8_t *bytes, unsigned size)
{
    struct face_file *f = arg;
    long page_size      = sysconf(_SC_PAGESIZE);
    uintptr_t off       = (uintptr_t)addr & (uintptr_t)(page_size - 1);
    uint32_t hi         = be32toh((uint32_t)(value >> 32));
    unsigned reg, k;
    uint32_t qpn;
    int page;

    if (off == UAR_CQ_DOORBELL) {
        FACE_STAT(arm_doorbells, 1);
        face_cq_arm(f, hi & 0xffffff);
    } else if (off >= UAR_SQ_DOORBELL && f->bf_half == 0) {
        FACE_STAT(sq_doorbells, 1);
        face_sq_ring(f, hi >> 8);
    } else if (off >= UAR_SQ_DOORBELL) {
        reg  = (unsigned)(off - UAR_SQ_DOORBELL);
        k    = reg / (2 * f->bf_half);
        page = uar_page(f, (uintptr_t)addr, page_size);
        if ((page < 0) || (k >= FACE_BFREGS_PER_UAR) ||
            ((reg % f->bf_half) + size > f->bf_half) || (size % 8 != 0) ||
            (reg % 8 != 0)) {
            uar_bf_bug(&face_stats.bf_errors,
                       "a store of %u bytes at UAR offset 0x%x (page %d) is "
                       "no doorbell and no BlueFlame copy",
                       size, (unsigned)off, page);
            return;
        }
        if ((unsigned)page * FACE_BFREGS_PER_UAR + k >=
            FACE_UAR_PAGES * FACE_BFREGS_PER_UAR) {
            return;
        }
        if (uar_bf_store(f, (unsigned)page * FACE_BFREGS_PER_UAR + k,
                         (reg / f->bf_half) & 1, reg % f->bf_half, bytes, size,
                         &qpn)) {
            FACE_STAT(sq_doorbells, 1);
            face_sq_ring(f, qpn);
        }
    }
}

/* Register one mapping of file f's pages (the table of files is locked). */
/* Which UAR page (its offset in the file) each page of a mapping is: the
 * pages are trapped as one region where adjacent, but libmlx5 maps them one
 * by one, at descending addresses. */
static void uar_pages(struct face_file *f, unsigned long start,
                      unsigned long end, unsigned long file_off)
{
    unsigned long ps = (unsigned long)sysconf(_SC_PAGESIZE), idx;

    for (unsigned long a = start; a < end; a += ps) {
        idx = (file_off + (a - start)) / ps;
        if (idx < FACE_UAR_PAGES) {
            __atomic_store_n(&f->uar_page[idx], a, __ATOMIC_RELAXED);
        }
    }
}

static void uar_add(struct face_file *f, void *addr, size_t len)
{
    int slot = -1, err;
    for (int i = 0; i < FACE_UAR_PAGES; i++) {
        if (f->uar[i].addr == addr && f->uar[i].len == len) {
            f->uar[i].seen = 1;
            return;
        }
        if (f->uar[i].addr == NULL && slot < 0) {
            slot = i;
        }
    }
    if (slot < 0) {
        face_log("uverbs%d: more than %d UAR mappings; %p is not trapped",
                 f->dev_index, FACE_UAR_PAGES, addr);
        return;
    }
    if ((err = dcxemu_trap_add(addr, len, uar_store, f)) != 0) {
        face_log("uverbs%d: cannot trap the UAR at %p: %s", f->dev_index, addr,
                 strerror(err));
        return;
    }
    f->uar[slot].addr = addr;
    f->uar[slot].len  = len;
    f->uar[slot].seen = 1;
}

/* The mappings of the files' pages now, against what is trapped: new ones
 * are trapped, those the application unmapped are forgotten (their addresses
 * may hold another mapping by now, which is left alone). */
void face_uar_scan(void)
{
    char line[512], path[256];
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL) {
        return;
    }
    FACE_STAT(uar_scans, 1);
    pthread_mutex_lock(&face_files_lock);
    for (int i = 0; i < face_files_hwm; i++) {
        for (int k = 0; face_files[i] != NULL && k < FACE_UAR_PAGES; k++) {
            face_files[i]->uar[k].seen = 0;
        }
    }
    /* libmlx5 maps the pages one by one: adjacent lines of one file are one
     * region */
    unsigned long rstart = 0, rend = 0, rino = 0;
    int more;
    do {
        unsigned long start = 0, end = 0, ino = 0, foff = 0;
        more    = fgets(line, sizeof(line), maps) != NULL;
        path[0] = '\0';
        if (more && strstr(line, "dcxemu-uverbs") == NULL) {
            continue; /* not the face's: no need to parse it */
        }
        if (more && (sscanf(line, "%lx-%lx %*s %lx %*s %lu %255s", &start, &end,
                            &foff, &ino, path) < 4 ||
                     strstr(path, "dcxemu-uverbs") == NULL)) {
            continue;
        }
        for (int i = 0; more && i < face_files_hwm; i++) {
            if (face_files[i] != NULL && face_files[i]->ino == (ino_t)ino) {
                uar_pages(face_files[i], start, end, foff);
            }
        }
        if (more && ino == rino && start == rend) {
            rend = end;
            continue;
        }
        for (int i = 0; rend != 0 && i < face_files_hwm; i++) {
            struct face_file *f = face_files[i];
            if (f != NULL && f->ino == (ino_t)rino) {
                uar_add(f, (void *)rstart, rend - rstart);
            }
        }
        rstart = start;
        rend   = end;
        rino   = ino;
    } while (more);
    for (int i = 0; i < face_files_hwm; i++) {
        for (int k = 0; face_files[i] != NULL && k < FACE_UAR_PAGES; k++) {
            struct face_file *f = face_files[i];
            if (f->uar[k].addr != NULL && !f->uar[k].seen) {
                dcxemu_trap_forget(f->uar[k].addr);
                f->uar[k].addr = NULL;
            }
        }
    }
    pthread_mutex_unlock(&face_files_lock);
    fclose(maps);
}

/* The file is released: libmlx5 unmapped its pages before it closed the
 * descriptor, so they are only forgotten. */
void face_uar_forget(struct face_file *f)
{
    for (int i = 0; i < FACE_UAR_PAGES; i++) {
        if (f->uar[i].addr != NULL) {
            dcxemu_trap_forget(f->uar[i].addr);
            f->uar[i].addr = NULL;
        }
        __atomic_store_n(&f->uar_page[i], 0, __ATOMIC_RELAXED);
    }
}
