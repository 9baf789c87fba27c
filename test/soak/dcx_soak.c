/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_soak: N processes doing random mixed operations to each other over
 * dcx, every byte verified, while the device model injects faults and one
 * process at a time is killed and restarted. Run under dcx-run --emu:
 *
 *   dcx-run --emu dcx_soak --procs 8 --seconds 600 --dir DIR
 *
 * The parent opens no device. It starts the workers (new images of this
 * program, "--worker ID INCARNATION"), each with its own DCXEMU_FAULTS seed,
 * kills one with SIGKILL at random times and starts it again, watches
 * every worker's heartbeat, and at the end prints the sums of what every
 * incarnation recorded.
 *
 * Each worker (the target) registers one region per sender:
 *
 *   region of sender s:  [ slot 0 | slot 1 | ... | slot 7 ][ counters ]
 *                          SOAK_SLOT_SIZE each              8 x 8 bytes
 *
 * with a strided view (uct_dcx_mem_view_create) over slots 0 and 1, and
 * publishes its address, the key of the regions and the views' keys in
 * DIR/addr-ID (written to a temporary file, then renamed). A sender runs
 * SOAK_SLOTS transactions at once; transaction t uses only slot t and
 * counter t of its region at each target, so it knows what they hold: a
 * local shadow of every slot and the expected value of every counter.
 * Transactions:
 *
 *   data:    write (put short/bcopy/zcopy, strided local source, remote
 *            strided view, or nothing), flush where the put has no
 *            completion, read back (get bcopy/zcopy, strided local
 *            destination, remote view) and compare with the shadow;
 *   atomic:  post (then flush and read), fetch or compare-swap on the
 *            counter, the old value compared with the expected one;
 *   message: active message (short/bcopy/zcopy) whose bytes and sequence
 *            the target checks: per sender connection the messages
 *            delivered are a gap-free prefix, in order.
 *
 * A wrong byte or value, or a message out of order, is a corruption. An
 * operation that fails (an injected fault, a dead peer) fails its
 * transaction and, through the interface's error handler, its endpoint:
 * the worker counts the error by status, destroys the endpoint once no
 * transaction uses it, forgets what it knew of the slots and counters
 * there, and connects again (to the new incarnation if the peer was
 * restarted). A transaction outstanding for longer than the hang limit,
 * or a worker whose heartbeat stops, is a hang.
 */
#include <uct/api/uct.h>
#include <uct/ib/dcx/dcx.h>
#include <ucs/async/async_fwd.h>

#include "dcxemu.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOAK_MAX_PROCS     16
#define SOAK_SLOTS         8
#define SOAK_VIEW_SLOTS    2 /* slots with a view */
#define SOAK_SLOT_SIZE     ((size_t)32 * 1024)
#define SOAK_COUNTERS_SIZE 4096
#define SOAK_REGION_SIZE   (SOAK_SLOTS * SOAK_SLOT_SIZE + SOAK_COUNTERS_SIZE)
#define SOAK_LOCAL_SIZE    (2 * SOAK_SLOT_SIZE) /* src and dst, each */
#define SOAK_AM_ID         11
#define SOAK_AM_META       ((size_t)24) /* seq, sender, inc, gen, len */
#define SOAK_ADDR_MAGIC    0x6b616f73786364ull /* "dcxsoak" */
#define SOAK_STATS_MAGIC   0x7374617473786364ull
#define SOAK_MAX_STATUS    128 /* -UCS_ERR_LAST */
#define SOAK_MAX_REPORTS   20 /* corruption lines per worker */
#define SOAK_EXIT_HANG     4
#define SOAK_EXIT_SETUP    5


/* Operations, as counted (posted and accepted by the transport). */
typedef enum {
    SOAK_OP_AM_SHORT,
    SOAK_OP_AM_BCOPY,
    SOAK_OP_AM_ZCOPY,
    SOAK_OP_PUT_SHORT,
    SOAK_OP_PUT_BCOPY,
    SOAK_OP_PUT_ZCOPY,
    SOAK_OP_PUT_STRIDED,
    SOAK_OP_PUT_VIEW,
    SOAK_OP_GET_BCOPY,
    SOAK_OP_GET_ZCOPY,
    SOAK_OP_GET_STRIDED,
    SOAK_OP_GET_VIEW,
    SOAK_OP_ATOMIC_POST,
    SOAK_OP_ATOMIC_FETCH,
    SOAK_OP_ATOMIC_CSWAP,
    SOAK_OP_FLUSH,
    SOAK_OP_LAST
} soak_op_t;

static const char *soak_op_names[SOAK_OP_LAST + 1] = {
    [SOAK_OP_AM_SHORT]     = "am_short",
    [SOAK_OP_AM_BCOPY]     = "am_bcopy",
    [SOAK_OP_AM_ZCOPY]     = "am_zcopy",
    [SOAK_OP_PUT_SHORT]    = "put_short",
    [SOAK_OP_PUT_BCOPY]    = "put_bcopy",
    [SOAK_OP_PUT_ZCOPY]    = "put_zcopy",
    [SOAK_OP_PUT_STRIDED]  = "put_zcopy strided",
    [SOAK_OP_PUT_VIEW]     = "put_zcopy to view",
    [SOAK_OP_GET_BCOPY]    = "get_bcopy",
    [SOAK_OP_GET_ZCOPY]    = "get_zcopy",
    [SOAK_OP_GET_STRIDED]  = "get_zcopy strided",
    [SOAK_OP_GET_VIEW]     = "get_zcopy from view",
    [SOAK_OP_ATOMIC_POST]  = "atomic64_post",
    [SOAK_OP_ATOMIC_FETCH] = "atomic64_fetch",
    [SOAK_OP_ATOMIC_CSWAP] = "atomic_cswap64",
    [SOAK_OP_FLUSH]        = "ep_flush",
    [SOAK_OP_LAST]         = "nothing",
};

/* Faults a worker injects through the device model's control API. */
typedef enum {
    SOAK_FAULT_DROP,
    SOAK_FAULT_DROP_ALL,
    SOAK_FAULT_FORCE_STATUS,
    SOAK_FAULT_DELAY,
    SOAK_FAULT_UNREACHABLE,
    SOAK_FAULT_LAST
} soak_fault_t;

static const char *soak_fault_names[] = {
    [SOAK_FAULT_DROP]         = "drop 1-3 deliveries (retried)",
    [SOAK_FAULT_DROP_ALL]     = "drop every retry of a delivery",
    [SOAK_FAULT_FORCE_STATUS] = "force an error status",
    [SOAK_FAULT_DELAY]        = "delay a DCT 0.1-2 ms for 0.5 s",
    [SOAK_FAULT_UNREACHABLE]  = "DCT unreachable for 20-100 ms",
};

/* What one incarnation of a worker records, in a file the parent maps: it
 * survives the worker's SIGKILL. */
typedef struct {
    uint64_t magic;
    int32_t id, inc;
    int32_t pid;
    uint32_t ready, drained;
    uint64_t heartbeat_ns;
    uint64_t ops[SOAK_OP_LAST];
    uint64_t bytes_verified;
    uint64_t tx_ok, tx_failed;
    uint64_t ep_errors[SOAK_MAX_STATUS]; /* by -status */
    uint64_t tx_errors[SOAK_MAX_STATUS]; /* by -status */
    uint64_t faults[SOAK_FAULT_LAST];
    uint64_t corruptions, hangs;
    uint64_t connects, restarts_seen, am_received;
    uint64_t emu_transport_retries, emu_error_cqes, emu_bytes;
} soak_stats_t;

typedef struct {
    uint32_t phase;
} soak_control_t;

enum {
    SOAK_PHASE_RUN,
    SOAK_PHASE_DRAIN,
    SOAK_PHASE_EXIT
};

/* --- shared helpers ------------------------------------------------------ */

static uint64_t soak_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t soak_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Bytes [0, len) of the pattern named by key. */
static void soak_pattern(void *buf, size_t len, uint64_t key)
{
    uint8_t *p = buf;
    size_t i, n;
    uint64_t v;

    for (i = 0; i < len; i += 8) {
        v = soak_mix64(key ^ (i * 0x100000001b3ull));
        n = ((len - i) < 8) ? (len - i) : 8;
        memcpy(p + i, &v, n);
    }
}

static size_t soak_min(size_t a, size_t b)
{
    return (a < b) ? a : b;
}

static void *soak_map_file(const char *path, size_t size, int create)
{
    int fd = open(path, O_RDWR | (create ? (O_CREAT | O_TRUNC) : 0), 0600);
    void *p;

    if (fd < 0) {
        return NULL;
    }
    if (create && (ftruncate(fd, size) != 0)) {
        close(fd);
        return NULL;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return (p == MAP_FAILED) ? NULL : p;
}

/* The strided view a target exposes over slot @a slot of sender @a sender:
 * blocks of *len bytes every *stride bytes, *count of them, from the start
 * of the slot. Both sides compute it. */
static void soak_view_geometry(int sender, int slot, size_t *len,
                               size_t *stride, size_t *count)
{
    uint64_t h = soak_mix64(((uint64_t)sender << 8) | slot);

    *len    = 1 + (h % 300);
    *stride = *len + 1 + ((h >> 16) % 500);
    *count  = 2 + ((h >> 32) % 64);
    while ((*stride * *count) > SOAK_SLOT_SIZE) {
        --*count;
    }
}

/* --- the worker ------------------------------------------------------------ */

typedef enum {
    SOAK_STEP_RESYNC, /* put the whole slot, the shadow becomes known */
    SOAK_STEP_WRITE,
    SOAK_STEP_FLUSH,
    SOAK_STEP_READ,
    SOAK_STEP_VERIFY,
    SOAK_STEP_CTR_READ, /* fetch-add 0: learn the counter */
    SOAK_STEP_ATOMIC,
    SOAK_STEP_CTR_CHECK, /* fetch-add 0 after a post, compared */
    SOAK_STEP_AM,
    SOAK_STEP_DONE
} soak_step_t;

typedef struct soak_worker soak_worker_t;

typedef struct {
    int slot;
    int busy;
    int peer;
    uint64_t gen; /* the peer connection it started on */
    uint64_t start_ns;
    soak_step_t steps[8];
    int nsteps, step;
    int waiting; /* for comp */
    uct_completion_t comp;
    ucs_status_t comp_status;
    int comp_done;
    soak_op_t last_op;
    /* data */
    soak_op_t wop, rop;
    size_t woff, wlen; /* slot bytes, or view bytes (view ops) */
    size_t roff, rlen;
    size_t wblk, wstride, wcount; /* local strided source */
    size_t rblk, rstride, rcount; /* local strided destination */
    uint8_t *src, *dst;
    uint64_t key;
    /* atomics */
    soak_op_t aop;
    uct_atomic_op_t aopcode;
    uint64_t value, compare, result;
    /* messages */
    size_t am_len;
    uint8_t *am_buf;
} soak_tx_t;

typedef struct {
    int id;
    int connected, failed;
    int inc; /* the incarnation we connected to */
    uint64_t gen; /* connections made to this peer */
    uint64_t am_seq;
    unsigned refs; /* transactions using the endpoint */
    uint64_t retry_ns;
    uct_ep_h ep;
    uint32_t dctn;
    uint64_t region; /* my region at the peer */
    uct_rkey_bundle_t rkey;
    uct_rkey_bundle_t view_rkeys[SOAK_VIEW_SLOTS];
    int shadow_valid[SOAK_SLOTS];
    uint8_t *shadow[SOAK_SLOTS];
    int ctr_known[SOAK_SLOTS];
    uint64_t ctr[SOAK_SLOTS];
    /* what I received from it */
    int rx_valid;
    int rx_inc;
    uint64_t rx_gen, rx_next;
} soak_peer_t;

struct soak_worker {
    int id, inc, nprocs;
    const char *dir;
    uint64_t rng;
    soak_stats_t *stats;
    volatile soak_control_t *control;
    unsigned reports;
    /* UCT */
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_component_h component;
    uct_md_h md;
    uct_md_attr_t md_attr;
    uct_iface_h iface;
    uct_iface_attr_t attr;
    uint8_t *regions;
    uct_mem_h regions_memh;
    uct_mem_h views[SOAK_MAX_PROCS][SOAK_VIEW_SLOTS];
    uint8_t *local;
    uct_mem_h local_memh;
    soak_peer_t peers[SOAK_MAX_PROCS];
    soak_tx_t txs[SOAK_SLOTS];
    /* the dcx extensions and the model's fault control */
    ucs_status_t (*view_create)(uct_iface_h, uct_mem_h, void *, size_t, size_t,
                                size_t, uct_mem_h *);
    ucs_status_t (*view_destroy)(uct_iface_h, uct_mem_h);
    int (*fault_inject)(enum dcxemu_fault_kind, uint32_t, uint64_t);
    int (*emu_counters)(int, enum dcxemu_counter_scope,
                        struct dcxemu_counters *);
    uint64_t next_fault_ns;
    uint64_t delay_clear_ns, unreachable_clear_ns;
    uint32_t delay_dctn, unreachable_dctn;
};

static uint64_t soak_rand(soak_worker_t *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

static size_t soak_rand_range(soak_worker_t *w, size_t lo, size_t hi)
{
    return lo + (soak_rand(w) % (hi - lo + 1));
}

static void soak_log(soak_worker_t *w, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dcx_soak: worker %d.%d: ", w->id, w->inc);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static void soak_corruption(soak_worker_t *w, const char *fmt, ...)
{
    va_list ap;

    ++w->stats->corruptions;
    if (w->reports++ >= SOAK_MAX_REPORTS) {
        return;
    }
    fprintf(stderr, "dcx_soak: worker %d.%d: CORRUPTION: ", w->id, w->inc);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static void soak_check(soak_worker_t *w, ucs_status_t status, const char *what)
{
    if (status != UCS_OK) {
        soak_log(w, "%s: %s", what, ucs_status_string(status));
        exit(SOAK_EXIT_SETUP);
    }
}

static void soak_count_status(uint64_t *table, ucs_status_t status)
{
    int i = -(int)status;

    table[(i > 0 && i < SOAK_MAX_STATUS) ? i : 0]++;
}

/* Compare @a got with @a expect; a mismatch is a corruption. */
static int soak_compare(soak_worker_t *w, soak_tx_t *tx, const uint8_t *got,
                        const uint8_t *expect, size_t len, const char *what)
{
    size_t i, j, wrong;

    if (memcmp(got, expect, len) == 0) {
        w->stats->bytes_verified += len;
        return 0;
    }
    for (i = 0; (i < len) && (got[i] == expect[i]); ++i) {
    }
    for (j = i, wrong = 0; j < len; ++j) {
        wrong += (got[j] != expect[j]);
    }
    soak_corruption(w,
                    "%s from peer %d slot %d (write %s at %zu+%zu, read "
                    "%s at %zu+%zu): byte %zu of %zu is 0x%02x, expected "
                    "0x%02x (%zu bytes differ)",
                    what, tx->peer, tx->slot, soak_op_names[tx->wop], tx->woff,
                    tx->wlen, soak_op_names[tx->rop], tx->roff, tx->rlen, i,
                    len, got[i], expect[i], wrong);
    /* report a slot once: forget what it holds */
    w->peers[tx->peer].shadow_valid[tx->slot] = 0;
    return -1;
}

static ucs_status_t
soak_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    soak_worker_t *w = arg;
    uint64_t seq;
    uint32_t sender, inc, gen, len;
    uint8_t expect[8192 + SOAK_AM_META];
    soak_peer_t *p;

    ++w->stats->am_received;
    if (length < SOAK_AM_META) {
        soak_corruption(w, "active message of %zu bytes", length);
        return UCS_OK;
    }
    memcpy(&seq, data, 8);
    memcpy(&sender, (char *)data + 8, 4);
    memcpy(&inc, (char *)data + 12, 4);
    memcpy(&gen, (char *)data + 16, 4);
    memcpy(&len, (char *)data + 20, 4);
    if ((sender >= (uint32_t)w->nprocs) || (sender == (uint32_t)w->id) ||
        (len + SOAK_AM_META != length) || (len > sizeof(expect))) {
        soak_corruption(w,
                        "active message header: sender %u, length %u, "
                        "message of %zu bytes",
                        sender, len, length);
        return UCS_OK;
    }
    p = &w->peers[sender];
    if (!p->rx_valid || (p->rx_inc != (int)inc) || (p->rx_gen != gen)) {
        if (p->rx_valid && (((int)inc < p->rx_inc) ||
                            (((int)inc == p->rx_inc) && (gen < p->rx_gen)))) {
            soak_corruption(w,
                            "active message from worker %u.%u connection "
                            "%u seq %" PRIu64 " after connection %d.%" PRIu64,
                            sender, inc, gen, seq, p->rx_inc, p->rx_gen);
            return UCS_OK;
        }
        if (seq != 0) {
            soak_corruption(w,
                            "the first active message of worker %u.%u "
                            "connection %u has seq %" PRIu64 " (lost before "
                            "it without an error)",
                            sender, inc, gen, seq);
        }
        p->rx_valid = 1;
        p->rx_inc   = inc;
        p->rx_gen   = gen;
    } else if (seq != p->rx_next) {
        soak_corruption(w,
                        "active message from worker %u.%u connection %u: "
                        "seq %" PRIu64 ", expected %" PRIu64,
                        sender, inc, gen, seq, p->rx_next);
    }
    p->rx_next = seq + 1;
    soak_pattern(expect, len,
                 soak_mix64(((uint64_t)sender << 56) ^ ((uint64_t)inc << 40) ^
                            ((uint64_t)gen << 24)) ^
                         seq);
    if (memcmp(expect, (char *)data + SOAK_AM_META, len) != 0) {
        soak_corruption(w,
                        "active message from worker %u.%u connection %u "
                        "seq %" PRIu64 ": payload differs",
                        sender, inc, gen, seq);
    } else {
        w->stats->bytes_verified += length;
    }
    return UCS_OK;
}

static ucs_status_t
soak_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    soak_worker_t *w = arg;
    int i;

    for (i = 0; i < w->nprocs; ++i) {
        if (w->peers[i].connected && (w->peers[i].ep == ep)) {
            if (!w->peers[i].failed) {
                w->peers[i].failed = 1;
                soak_count_status(w->stats->ep_errors, status);
            }
            return UCS_OK;
        }
    }
    soak_log(w, "error on an unknown endpoint: %s", ucs_status_string(status));
    return UCS_OK;
}

static void soak_worker_open(soak_worker_t *w)
{
    char umr_mkeys[16];
    const char *settings[][2] = {
        /* a dead or unreachable peer is found in ~8 ms, not 8 s */
        { "TIMEOUT", "1ms" },
        { "RETRY_COUNT", "7" },
        { "FC_GRANT_TIMEOUT", "200ms" },
        /* the model has 4096 indirect mkeys per fabric: leave room for
         * every process's views, and for a restarted process while its
         * killed incarnation is not yet reaped */
        { "UMR_MKEYS", umr_mkeys }
    };
    uct_component_h *components;
    uct_component_attr_t cattr;
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_iface_params_t params;
    unsigned i, num;
    ucs_status_t status;
    char name[64];
    void *plugin, *emu;
    const char *emu_lib;

    snprintf(umr_mkeys, sizeof(umr_mkeys), "%d",
             (int)soak_min(256, 3072 / w->nprocs -
                                        SOAK_MAX_PROCS * SOAK_VIEW_SLOTS));
    soak_check(w,
               ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                        &w->async),
               "async context");
    soak_check(w,
               uct_worker_create(w->async, UCS_THREAD_MODE_SINGLE, &w->worker),
               "worker");
    soak_check(w, uct_query_components(&components, &num), "components");
    for (i = 0; i < num; ++i) {
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        uct_component_query(components[i], &cattr);
        if (!strcmp(cattr.name, "dcx")) {
            w->component = components[i];
        }
    }
    uct_release_component_list(components);
    if (w->component == NULL) {
        soak_log(w, "no dcx component: run under dcx-run --emu");
        exit(SOAK_EXIT_SETUP);
    }
    soak_check(w, uct_md_config_read(w->component, NULL, NULL, &md_config),
               "md config");
    soak_check(w, uct_md_open(w->component, "dcxemu0", md_config, &w->md),
               "md open");
    uct_config_release(md_config);
    soak_check(w, uct_md_query(w->md, &w->md_attr), "md query");

    soak_check(w,
               uct_md_iface_config_read(w->md, "dcx", NULL, NULL,
                                        &iface_config),
               "iface config");
    for (i = 0; i < sizeof(settings) / sizeof(settings[0]); ++i) {
        /* UCX 1.13 takes the name without the table's prefix, 1.16 and
         * later only with it */
        status = uct_config_modify(iface_config, settings[i][0],
                                   settings[i][1]);
        if (status == UCS_ERR_NO_ELEM) {
            snprintf(name, sizeof(name), "DCX_%s", settings[i][0]);
            status = uct_config_modify(iface_config, name, settings[i][1]);
        }
        soak_check(w, status, settings[i][0]);
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "dcx";
    params.mode.device.dev_name = "dcxemu0:1";
    params.err_handler          = soak_err_handler;
    params.err_handler_arg      = w;
    params.err_handler_flags    = 0;
    soak_check(w,
               uct_iface_open(w->md, w->worker, &params, iface_config,
                              &w->iface),
               "iface open");
    uct_config_release(iface_config);
    soak_check(w, uct_iface_query(w->iface, &w->attr), "iface query");
    if (!(w->attr.cap.flags & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE)) {
        soak_log(w, "the interface does not handle peer failure");
        exit(SOAK_EXIT_SETUP);
    }
    soak_check(w,
               uct_iface_set_am_handler(w->iface, SOAK_AM_ID, soak_am_handler,
                                        w, 0),
               "am handler");
    uct_iface_progress_enable(w->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    /* the plugin's extensions: in the plugin UCX >= 1.22 loads itself, or
     * in the global scope where dcx-run preloaded it */
    plugin = dlopen("libuct_dcx.so.0", RTLD_NOLOAD | RTLD_LAZY);
    if (plugin == NULL) {
        plugin = RTLD_DEFAULT;
    }
    w->view_create = (__typeof__(w->view_create))
            dlsym(plugin, "uct_dcx_mem_view_create");
    w->view_destroy = (__typeof__(w->view_destroy))
            dlsym(plugin, "uct_dcx_mem_view_destroy");
    if ((w->view_create == NULL) || (w->view_destroy == NULL)) {
        soak_log(w, "the dcx extensions are not visible: run under dcx-run");
        exit(SOAK_EXIT_SETUP);
    }

    /* the device model the plugin opened (dcx-run --emu names it) */
    emu_lib = getenv("UCX_DCX_EMU_LIB");
    emu     = (emu_lib != NULL) ? dlopen(emu_lib, RTLD_NOW) : NULL;
    if (emu == NULL) {
        soak_log(w, "the device model's fault control is not available "
                    "(UCX_DCX_EMU_LIB): run under dcx-run --emu");
        exit(SOAK_EXIT_SETUP);
    }
    w->fault_inject = (__typeof__(w->fault_inject))dlsym(emu,
                                                         "dcxemu_fault_inject");
    w->emu_counters = (__typeof__(w->emu_counters))
            dlsym(emu, "dcxemu_counters_read");
    if ((w->fault_inject == NULL) || (w->emu_counters == NULL)) {
        soak_log(w, "%s has no fault control", emu_lib);
        exit(SOAK_EXIT_SETUP);
    }
}

static void soak_worker_memory(soak_worker_t *w)
{
    size_t size = (size_t)w->nprocs * SOAK_REGION_SIZE, vlen, vstride, vcount;
    int s, t;

    w->regions = aligned_alloc(4096, size);
    w->local   = aligned_alloc(4096, SOAK_SLOTS * 2 * SOAK_LOCAL_SIZE);
    if ((w->regions == NULL) || (w->local == NULL)) {
        soak_log(w, "out of memory");
        exit(SOAK_EXIT_SETUP);
    }
    memset(w->regions, 0, size);
    memset(w->local, 0, SOAK_SLOTS * 2 * SOAK_LOCAL_SIZE);
    soak_check(w,
               uct_md_mem_reg(w->md, w->regions, size, UCT_MD_MEM_ACCESS_ALL,
                              &w->regions_memh),
               "register the regions");
    soak_check(w,
               uct_md_mem_reg(w->md, w->local, SOAK_SLOTS * 2 * SOAK_LOCAL_SIZE,
                              UCT_MD_MEM_ACCESS_ALL, &w->local_memh),
               "register the local buffers");
    for (s = 0; s < w->nprocs; ++s) {
        if (s == w->id) {
            continue;
        }
        for (t = 0; t < SOAK_VIEW_SLOTS; ++t) {
            soak_view_geometry(s, t, &vlen, &vstride, &vcount);
            soak_check(w,
                       w->view_create(w->iface, w->regions_memh,
                                      w->regions + s * SOAK_REGION_SIZE +
                                              t * SOAK_SLOT_SIZE,
                                      vlen, vstride, vcount, &w->views[s][t]),
                       "view create");
        }
    }
}

/* DIR/addr-ID: magic, id, inc, lengths, device and interface address, the
 * regions' base and key, then the view keys by sender and slot. */
static void soak_worker_publish(soak_worker_t *w)
{
    size_t dlen = w->attr.device_addr_len, ilen = w->attr.iface_addr_len;
    size_t klen = w->md_attr.rkey_packed_size, size, off;
    uint64_t hdr[5], base = (uintptr_t)w->regions;
    char path[PATH_MAX], tmp[PATH_MAX];
    uint8_t *buf;
    int s, t;
    FILE *f;

    size = sizeof(hdr) + dlen + ilen + 8 + klen +
           (size_t)w->nprocs * SOAK_VIEW_SLOTS * klen;
    buf    = calloc(1, size);
    hdr[0] = SOAK_ADDR_MAGIC;
    hdr[1] = ((uint64_t)w->id << 32) | (uint32_t)w->inc;
    hdr[2] = dlen;
    hdr[3] = ilen;
    hdr[4] = klen;
    memcpy(buf, hdr, sizeof(hdr));
    off = sizeof(hdr);
    soak_check(w,
               uct_iface_get_device_address(w->iface,
                                            (uct_device_addr_t *)(buf + off)),
               "device address");
    off += dlen;
    soak_check(w,
               uct_iface_get_address(w->iface, (uct_iface_addr_t *)(buf + off)),
               "iface address");
    off += ilen;
    memcpy(buf + off, &base, 8);
    off += 8;
    soak_check(w, uct_md_mkey_pack(w->md, w->regions_memh, buf + off),
               "pack the regions' key");
    off += klen;
    for (s = 0; s < w->nprocs; ++s) {
        for (t = 0; t < SOAK_VIEW_SLOTS; ++t, off += klen) {
            if (s != w->id) {
                soak_check(w,
                           uct_md_mkey_pack(w->md, w->views[s][t], buf + off),
                           "pack a view key");
            }
        }
    }
    snprintf(path, sizeof(path), "%s/addr-%d", w->dir, w->id);
    snprintf(tmp, sizeof(tmp), "%s/.addr-%d.tmp", w->dir, w->id);
    f = fopen(tmp, "w");
    if ((f == NULL) || (fwrite(buf, 1, size, f) != size) || (fclose(f) != 0) ||
        (rename(tmp, path) != 0)) {
        soak_log(w, "cannot write %s: %m", path);
        exit(SOAK_EXIT_SETUP);
    }
    free(buf);
}

static void soak_peer_forget(soak_peer_t *p)
{
    int t;

    for (t = 0; t < SOAK_SLOTS; ++t) {
        p->shadow_valid[t] = 0;
        p->ctr_known[t]    = 0;
    }
}

/* Connect to peer @a p from its address file; 0 on success. */
static int soak_peer_connect(soak_worker_t *w, soak_peer_t *p)
{
    size_t dlen = w->attr.device_addr_len, ilen = w->attr.iface_addr_len;
    size_t klen = w->md_attr.rkey_packed_size, size, off;
    uct_ep_params_t ep_params;
    char path[PATH_MAX];
    uint64_t hdr[5];
    uint8_t *buf;
    ucs_status_t status;
    struct stat st;
    int t, inc;
    FILE *f;

    snprintf(path, sizeof(path), "%s/addr-%d", w->dir, p->id);
    size = sizeof(hdr) + dlen + ilen + 8 + klen +
           (size_t)w->nprocs * SOAK_VIEW_SLOTS * klen;
    f = fopen(path, "r");
    if (f == NULL) {
        return -1; /* not (again) up yet */
    }
    buf = malloc(size);
    if ((fstat(fileno(f), &st) != 0) || ((size_t)st.st_size != size) ||
        (fread(buf, 1, size, f) != size)) {
        fclose(f);
        free(buf);
        soak_log(w, "%s: not an address file of %zu bytes", path, size);
        exit(SOAK_EXIT_SETUP);
    }
    fclose(f);
    memcpy(hdr, buf, sizeof(hdr));
    if ((hdr[0] != SOAK_ADDR_MAGIC) || ((int)(hdr[1] >> 32) != p->id) ||
        (hdr[2] != dlen) || (hdr[3] != ilen) || (hdr[4] != klen)) {
        soak_log(w, "%s: a foreign address file", path);
        exit(SOAK_EXIT_SETUP);
    }
    inc = (int)(uint32_t)hdr[1];
    off = sizeof(hdr);

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                           UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.iface      = w->iface;
    ep_params.dev_addr   = (const uct_device_addr_t *)(buf + off);
    ep_params.iface_addr = (const uct_iface_addr_t *)(buf + off + dlen);
    /* the DCT number: the first 24 bits of a dcx interface address */
    p->dctn = buf[off + dlen] | ((uint32_t)buf[off + dlen + 1] << 8) |
              ((uint32_t)buf[off + dlen + 2] << 16);
    status = uct_ep_create(&ep_params, &p->ep);
    soak_check(w, status, "ep create");
    off += dlen + ilen;
    memcpy(&p->region, buf + off, 8);
    p->region += (uint64_t)w->id * SOAK_REGION_SIZE;
    off += 8;
    soak_check(w, uct_rkey_unpack(w->component, buf + off, &p->rkey),
               "rkey unpack");
    off += klen + (size_t)w->id * SOAK_VIEW_SLOTS * klen;
    for (t = 0; t < SOAK_VIEW_SLOTS; ++t, off += klen) {
        soak_check(w,
                   uct_rkey_unpack(w->component, buf + off, &p->view_rkeys[t]),
                   "view rkey unpack");
    }
    free(buf);

    if (p->gen > 0 && inc != p->inc) {
        ++w->stats->restarts_seen;
    }
    p->inc = inc;
    p->gen += 1;
    p->am_seq    = 0;
    p->connected = 1;
    p->failed    = 0;
    ++w->stats->connects;
    soak_peer_forget(p);
    return 0;
}

static void soak_peer_disconnect(soak_worker_t *w, soak_peer_t *p)
{
    int t;

    uct_ep_destroy(p->ep);
    uct_rkey_release(w->component, &p->rkey);
    for (t = 0; t < SOAK_VIEW_SLOTS; ++t) {
        uct_rkey_release(w->component, &p->view_rkeys[t]);
    }
    p->ep        = NULL;
    p->connected = 0;
    p->failed    = 0;
}

/* Failed endpoints that no transaction uses any more are replaced. */
static void soak_peers_maintain(soak_worker_t *w, uint64_t now)
{
    soak_peer_t *p;
    int i;

    for (i = 0; i < w->nprocs; ++i) {
        p = &w->peers[i];
        if (i == w->id) {
            continue;
        }
        if (p->connected && p->failed && (p->refs == 0)) {
            soak_peer_disconnect(w, p);
            p->retry_ns = now + 20000000ull; /* 20 ms */
        }
        if (!p->connected && (now >= p->retry_ns) &&
            (soak_peer_connect(w, p) != 0)) {
            p->retry_ns = now + 50000000ull;
        }
    }
}

/* --- transactions -------------------------------------------------------- */

static void soak_tx_comp_cb(uct_completion_t *self)
{
    soak_tx_t *tx = ucs_container_of(self, soak_tx_t, comp);

    tx->comp_done   = 1;
    tx->comp_status = self->status;
}

static uct_completion_t *soak_tx_comp(soak_tx_t *tx)
{
    tx->comp.func   = soak_tx_comp_cb;
    tx->comp.count  = 1;
    tx->comp.status = UCS_OK;
    tx->comp_done   = 0;
    return &tx->comp;
}

static size_t soak_pack_cb(void *dest, void *arg)
{
    soak_tx_t *tx = arg;

    memcpy(dest, tx->am_buf, tx->am_len);
    return tx->am_len;
}

static void soak_unpack_cb(void *arg, const void *data, size_t length)
{
    soak_tx_t *tx = arg;

    memcpy(tx->dst, data, length);
}

/* The physical slot offset of byte @a k of the view over (sender, slot). */
static size_t soak_view_offset(int sender, int slot, size_t k)
{
    size_t len, stride, count;

    soak_view_geometry(sender, slot, &len, &stride, &count);
    return (k / len) * stride + (k % len);
}

static size_t soak_view_size(int sender, int slot)
{
    size_t len, stride, count;

    soak_view_geometry(sender, slot, &len, &stride, &count);
    return len * count;
}

/* Plan a data transaction: what to write where, and how to read it back. */
static void soak_tx_plan_data(soak_worker_t *w, soak_tx_t *tx, soak_peer_t *p)
{
    size_t max_short = w->attr.cap.put.max_short;
    size_t max_bcopy = w->attr.cap.put.max_bcopy;
    size_t vsize     = soak_view_size(w->id, tx->slot); /* if it has one */
    unsigned r;

    tx->nsteps = 0;
    if (!p->shadow_valid[tx->slot]) {
        tx->steps[tx->nsteps++] = SOAK_STEP_RESYNC;
    }
    r = soak_rand(w) % 12;
    if ((r == 0) && p->shadow_valid[tx->slot]) {
        tx->wop  = SOAK_OP_LAST; /* read only */
        tx->woff = soak_rand_range(w, 0, SOAK_SLOT_SIZE - 1);
        tx->wlen = soak_rand_range(w, 1, SOAK_SLOT_SIZE - tx->woff);
    } else if ((r <= 2) && (max_short > 0)) {
        tx->wop  = SOAK_OP_PUT_SHORT;
        tx->wlen = soak_rand_range(w, 1, max_short);
    } else if (r <= 4) {
        tx->wop  = SOAK_OP_PUT_BCOPY;
        tx->wlen = soak_rand_range(w, 1, soak_min(max_bcopy, SOAK_SLOT_SIZE));
    } else if (r <= 7) {
        tx->wop  = SOAK_OP_PUT_ZCOPY;
        tx->wlen = soak_rand_range(w, 1, SOAK_SLOT_SIZE);
    } else if (r <= 9) {
        tx->wop     = SOAK_OP_PUT_STRIDED;
        tx->wblk    = soak_rand_range(w, 1, 1024);
        tx->wstride = tx->wblk + soak_rand_range(w, 1, 512);
        tx->wcount  = soak_rand_range(w, 2, 64);
        while ((tx->wblk * tx->wcount > SOAK_SLOT_SIZE) ||
               (tx->wstride * tx->wcount > SOAK_LOCAL_SIZE)) {
            --tx->wcount;
        }
        tx->wlen = tx->wblk * tx->wcount;
    } else if (tx->slot >= SOAK_VIEW_SLOTS) {
        tx->wop  = SOAK_OP_PUT_ZCOPY;
        tx->wlen = soak_rand_range(w, 1, SOAK_SLOT_SIZE);
    } else {
        tx->wop  = SOAK_OP_PUT_VIEW;
        tx->woff = soak_rand_range(w, 0, vsize - 1);
        tx->wlen = soak_rand_range(w, 1, vsize - tx->woff);
    }
    if ((tx->wop != SOAK_OP_PUT_VIEW) && (tx->wop != SOAK_OP_LAST)) {
        tx->woff = soak_rand_range(w, 0, SOAK_SLOT_SIZE - tx->wlen);
    }
    if (tx->wop != SOAK_OP_LAST) {
        tx->steps[tx->nsteps++] = SOAK_STEP_WRITE;
        if ((tx->wop == SOAK_OP_PUT_SHORT) || (tx->wop == SOAK_OP_PUT_BCOPY)) {
            tx->steps[tx->nsteps++] = SOAK_STEP_FLUSH;
        }
    }

    /* Read back what was written (and some around it). */
    r = soak_rand(w) % 4;
    if (tx->wop == SOAK_OP_PUT_VIEW) {
        if (r == 0) {
            tx->rop  = SOAK_OP_GET_VIEW;
            tx->roff = tx->woff;
            tx->rlen = tx->wlen;
        } else {
            /* the whole extent of the view, through the plain key */
            tx->rop  = SOAK_OP_GET_ZCOPY;
            tx->roff = 0;
            tx->rlen = soak_view_offset(w->id, tx->slot, vsize - 1) + 1;
        }
    } else {
        tx->roff = tx->woff - soak_min(tx->woff, soak_rand_range(w, 0, 256));
        tx->rlen = soak_min(tx->woff + tx->wlen + soak_rand_range(w, 0, 256),
                            (size_t)SOAK_SLOT_SIZE) -
                   tx->roff;
        if ((r == 0) && (tx->rlen <= w->attr.cap.get.max_bcopy)) {
            tx->rop = SOAK_OP_GET_BCOPY;
        } else if (r == 1) {
            tx->rop     = SOAK_OP_GET_STRIDED;
            tx->rblk    = soak_rand_range(w, 1, 1024);
            tx->rstride = tx->rblk + soak_rand_range(w, 1, 512);
            tx->rcount  = (tx->rlen + tx->rblk - 1) / tx->rblk;
            if (tx->rcount < 2) {
                tx->rcount = 2;
            }
            while ((tx->roff + tx->rblk * tx->rcount > SOAK_SLOT_SIZE) ||
                   (tx->rstride * tx->rcount > SOAK_LOCAL_SIZE)) {
                --tx->rcount;
            }
            if (tx->rcount < 2) {
                tx->rop = SOAK_OP_GET_ZCOPY;
            } else {
                tx->rlen = tx->rblk * tx->rcount;
            }
        } else {
            tx->rop = SOAK_OP_GET_ZCOPY;
        }
    }
    tx->steps[tx->nsteps++] = SOAK_STEP_READ;
    tx->steps[tx->nsteps++] = SOAK_STEP_VERIFY;
}

static void soak_tx_plan_atomic(soak_worker_t *w, soak_tx_t *tx, soak_peer_t *p)
{
    static const uct_atomic_op_t post_ops[]  = { UCT_ATOMIC_OP_ADD,
                                                 UCT_ATOMIC_OP_AND,
                                                 UCT_ATOMIC_OP_OR,
                                                 UCT_ATOMIC_OP_XOR };
    static const uct_atomic_op_t fetch_ops[] = {
        UCT_ATOMIC_OP_ADD, UCT_ATOMIC_OP_AND, UCT_ATOMIC_OP_OR,
        UCT_ATOMIC_OP_XOR, UCT_ATOMIC_OP_SWAP
    };
    unsigned r = soak_rand(w) % 3;

    tx->nsteps = 0;
    if (!p->ctr_known[tx->slot]) {
        tx->steps[tx->nsteps++] = SOAK_STEP_CTR_READ;
    }
    tx->steps[tx->nsteps++] = SOAK_STEP_ATOMIC;
    tx->value               = soak_rand(w);
    if (r == 0) {
        tx->aop     = SOAK_OP_ATOMIC_POST;
        tx->aopcode = post_ops[soak_rand(w) % 4];
        if (tx->aopcode == UCT_ATOMIC_OP_AND) {
            tx->value |= soak_rand(w); /* keep some bits */
        } else if (tx->aopcode == UCT_ATOMIC_OP_OR) {
            tx->value &= soak_rand(w);
        }
        tx->steps[tx->nsteps++] = SOAK_STEP_FLUSH;
        tx->steps[tx->nsteps++] = SOAK_STEP_CTR_CHECK;
    } else if (r == 1) {
        tx->aop     = SOAK_OP_ATOMIC_FETCH;
        tx->aopcode = fetch_ops[soak_rand(w) % 5];
    } else {
        tx->aop     = SOAK_OP_ATOMIC_CSWAP;
        tx->compare = soak_rand(w) & 3; /* fixed up when it is issued */
    }
}

static uint64_t
soak_atomic_apply(uct_atomic_op_t op, uint64_t old, uint64_t value)
{
    switch (op) {
    case UCT_ATOMIC_OP_ADD:
        return old + value;
    case UCT_ATOMIC_OP_AND:
        return old & value;
    case UCT_ATOMIC_OP_OR:
        return old | value;
    case UCT_ATOMIC_OP_XOR:
        return old ^ value;
    case UCT_ATOMIC_OP_SWAP:
        return value;
    default:
        return old;
    }
}

static int soak_tx_start(soak_worker_t *w, soak_tx_t *tx)
{
    int candidates[SOAK_MAX_PROCS], n = 0, i;
    soak_peer_t *p;
    unsigned kind;

    for (i = 0; i < w->nprocs; ++i) {
        if ((i != w->id) && w->peers[i].connected && !w->peers[i].failed) {
            candidates[n++] = i;
        }
    }
    if (n == 0) {
        return 0;
    }
    tx->peer     = candidates[soak_rand(w) % n];
    p            = &w->peers[tx->peer];
    tx->gen      = p->gen;
    tx->busy     = 1;
    tx->step     = 0;
    tx->waiting  = 0;
    tx->start_ns = soak_now_ns();
    tx->key = soak_mix64(((uint64_t)w->id << 56) ^ ((uint64_t)w->inc << 40) ^
                         soak_rand(w));
    tx->wop = tx->rop = tx->aop = SOAK_OP_LAST;
    tx->woff = tx->wlen = tx->roff = tx->rlen = 0;
    ++p->refs;
    kind = soak_rand(w) % 10;
    if (kind < 5) {
        soak_tx_plan_data(w, tx, p);
    } else if (kind < 8) {
        soak_tx_plan_atomic(w, tx, p);
    } else {
        tx->nsteps   = 1;
        tx->steps[0] = SOAK_STEP_AM;
        tx->am_len   = 0;
    }
    return 1;
}

static void soak_tx_end(soak_worker_t *w, soak_tx_t *tx, ucs_status_t status)
{
    soak_peer_t *p = &w->peers[tx->peer];

    if (status == UCS_OK) {
        ++w->stats->tx_ok;
    } else {
        ++w->stats->tx_failed;
        soak_count_status(w->stats->tx_errors, status);
        /* what the slot and counter hold is no longer known */
        if (p->gen == tx->gen) {
            p->shadow_valid[tx->slot] = 0;
            p->ctr_known[tx->slot]    = 0;
        }
    }
    --p->refs;
    tx->busy = 0;
}

/* Issue the current step: UCS_OK (done, go on), UCS_INPROGRESS (wait for
 * the completion), UCS_ERR_NO_RESOURCE (try again later) or a failure. */
static ucs_status_t soak_tx_issue(soak_worker_t *w, soak_tx_t *tx)
{
    soak_peer_t *p   = &w->peers[tx->peer];
    uint8_t *shadow  = p->shadow[tx->slot];
    uint64_t slot_ra = p->region + (uint64_t)tx->slot * SOAK_SLOT_SIZE;
    uint64_t ctr_ra  = p->region + SOAK_SLOTS * SOAK_SLOT_SIZE +
                      (uint64_t)tx->slot * 8;
    uct_rkey_t rkey  = p->rkey.rkey;
    uct_rkey_t vrkey = (tx->slot < SOAK_VIEW_SLOTS) ?
                               p->view_rkeys[tx->slot].rkey :
                               UCT_INVALID_RKEY;
    uint64_t meta[3];
    ucs_status_t status;
    uct_iov_t iov;
    ssize_t len;
    size_t i, max;
    soak_op_t op;

    iov.memh   = w->local_memh;
    iov.count  = 1;
    iov.stride = 0;

    switch (tx->steps[tx->step]) {
    case SOAK_STEP_RESYNC:
        op = SOAK_OP_PUT_ZCOPY;
        soak_pattern(tx->src, SOAK_SLOT_SIZE, tx->key ^ 0x5555);
        iov.buffer = tx->src;
        iov.length = SOAK_SLOT_SIZE;
        status     = uct_ep_put_zcopy(p->ep, &iov, 1, slot_ra, rkey,
                                      soak_tx_comp(tx));
        if ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
            memcpy(shadow, tx->src, SOAK_SLOT_SIZE);
            p->shadow_valid[tx->slot] = 1;
        }
        break;
    case SOAK_STEP_WRITE:
        op = tx->wop;
        soak_pattern(tx->src, SOAK_LOCAL_SIZE, tx->key);
        switch (tx->wop) {
        case SOAK_OP_PUT_SHORT:
            status = uct_ep_put_short(p->ep, tx->src, tx->wlen,
                                      slot_ra + tx->woff, rkey);
            break;
        case SOAK_OP_PUT_BCOPY:
            tx->am_buf = tx->src;
            tx->am_len = tx->wlen;
            len = uct_ep_put_bcopy(p->ep, soak_pack_cb, tx, slot_ra + tx->woff,
                                   rkey);
            status = (len < 0) ? (ucs_status_t)len : UCS_OK;
            break;
        case SOAK_OP_PUT_ZCOPY:
            iov.buffer = tx->src;
            iov.length = tx->wlen;
            status = uct_ep_put_zcopy(p->ep, &iov, 1, slot_ra + tx->woff, rkey,
                                      soak_tx_comp(tx));
            break;
        case SOAK_OP_PUT_STRIDED:
            iov.buffer = tx->src;
            iov.length = tx->wblk;
            iov.stride = tx->wstride;
            iov.count  = tx->wcount;
            status = uct_ep_put_zcopy(p->ep, &iov, 1, slot_ra + tx->woff, rkey,
                                      soak_tx_comp(tx));
            break;
        default: /* SOAK_OP_PUT_VIEW: the view is zero-based */
            iov.buffer = tx->src;
            iov.length = tx->wlen;
            status     = uct_ep_put_zcopy(p->ep, &iov, 1, tx->woff, vrkey,
                                          soak_tx_comp(tx));
            break;
        }
        if ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
            if (tx->wop == SOAK_OP_PUT_STRIDED) {
                for (i = 0; i < tx->wcount; ++i) {
                    memcpy(shadow + tx->woff + i * tx->wblk,
                           tx->src + i * tx->wstride, tx->wblk);
                }
            } else if (tx->wop == SOAK_OP_PUT_VIEW) {
                for (i = 0; i < tx->wlen; ++i) {
                    shadow[soak_view_offset(w->id, tx->slot, tx->woff + i)] =
                            tx->src[i];
                }
            } else {
                memcpy(shadow + tx->woff, tx->src, tx->wlen);
            }
        }
        break;
    case SOAK_STEP_FLUSH:
        op     = SOAK_OP_FLUSH;
        status = uct_ep_flush(p->ep, 0, soak_tx_comp(tx));
        break;
    case SOAK_STEP_READ:
        op = tx->rop;
        /* poison, so that bytes a get did not write are caught */
        memset(tx->dst, 0xa5 ^ (tx->key & 0xff), SOAK_LOCAL_SIZE);
        switch (tx->rop) {
        case SOAK_OP_GET_BCOPY:
            status = uct_ep_get_bcopy(p->ep, soak_unpack_cb, tx, tx->rlen,
                                      slot_ra + tx->roff, rkey,
                                      soak_tx_comp(tx));
            break;
        case SOAK_OP_GET_STRIDED:
            iov.buffer = tx->dst;
            iov.length = tx->rblk;
            iov.stride = tx->rstride;
            iov.count  = tx->rcount;
            status = uct_ep_get_zcopy(p->ep, &iov, 1, slot_ra + tx->roff, rkey,
                                      soak_tx_comp(tx));
            break;
        case SOAK_OP_GET_VIEW:
            iov.buffer = tx->dst;
            iov.length = tx->rlen;
            status     = uct_ep_get_zcopy(p->ep, &iov, 1, tx->roff, vrkey,
                                          soak_tx_comp(tx));
            break;
        default: /* SOAK_OP_GET_ZCOPY */
            iov.buffer = tx->dst;
            iov.length = tx->rlen;
            status = uct_ep_get_zcopy(p->ep, &iov, 1, slot_ra + tx->roff, rkey,
                                      soak_tx_comp(tx));
            break;
        }
        break;
    case SOAK_STEP_CTR_READ:
    case SOAK_STEP_CTR_CHECK:
        op     = SOAK_OP_ATOMIC_FETCH;
        status = uct_ep_atomic64_fetch(p->ep, UCT_ATOMIC_OP_ADD, 0, &tx->result,
                                       ctr_ra, rkey, soak_tx_comp(tx));
        break;
    case SOAK_STEP_ATOMIC:
        op = tx->aop;
        if (tx->aop == SOAK_OP_ATOMIC_POST) {
            status = uct_ep_atomic64_post(p->ep, tx->aopcode, tx->value, ctr_ra,
                                          rkey);
        } else if (tx->aop == SOAK_OP_ATOMIC_FETCH) {
            status = uct_ep_atomic64_fetch(p->ep, tx->aopcode, tx->value,
                                           &tx->result, ctr_ra, rkey,
                                           soak_tx_comp(tx));
        } else {
            /* one time in four a compare that must fail */
            uint64_t compare = p->ctr[tx->slot] ^ (tx->compare == 0);
            status = uct_ep_atomic_cswap64(p->ep, compare, tx->value, ctr_ra,
                                           rkey, &tx->result, soak_tx_comp(tx));
        }
        break;
    case SOAK_STEP_AM:
        /* built at every try: the sequence is taken when it is accepted */
        if (tx->am_len == 0) {
            i       = soak_rand(w) % 3;
            max     = (i == 0) ?
                              w->attr.cap.am.max_short :
                      (i == 1) ?
                              w->attr.cap.am.max_bcopy :
                              soak_min(w->attr.cap.am.max_zcopy, SOAK_LOCAL_SIZE);
            tx->aop = (i == 0) ? SOAK_OP_AM_SHORT :
                      (i == 1) ? SOAK_OP_AM_BCOPY :
                                 SOAK_OP_AM_ZCOPY;
            if ((tx->aop == SOAK_OP_AM_ZCOPY) &&
                (w->attr.cap.am.max_hdr < SOAK_AM_META)) {
                tx->aop = SOAK_OP_AM_BCOPY;
                max     = w->attr.cap.am.max_bcopy;
            }
            if (max < SOAK_AM_META) {
                tx->aop = SOAK_OP_AM_BCOPY;
                max     = w->attr.cap.am.max_bcopy;
            }
            max        = soak_min(max, 8192 + SOAK_AM_META);
            tx->am_len = soak_rand_range(w, SOAK_AM_META, max);
        }
        op         = tx->aop;
        tx->am_buf = tx->src;
        meta[0]    = p->am_seq;
        meta[1]    = ((uint64_t)w->inc << 32) | (uint32_t)w->id;
        meta[2]    = ((uint64_t)(tx->am_len - SOAK_AM_META) << 32) |
                  (uint32_t)p->gen;
        memcpy(tx->src, meta, SOAK_AM_META);
        soak_pattern(tx->src + SOAK_AM_META, tx->am_len - SOAK_AM_META,
                     soak_mix64(((uint64_t)w->id << 56) ^
                                ((uint64_t)w->inc << 40) ^
                                ((uint64_t)(uint32_t)p->gen << 24)) ^
                             p->am_seq);
        if (tx->aop == SOAK_OP_AM_SHORT) {
            status = uct_ep_am_short(p->ep, SOAK_AM_ID, meta[0], tx->src + 8,
                                     tx->am_len - 8);
        } else if (tx->aop == SOAK_OP_AM_BCOPY) {
            len    = uct_ep_am_bcopy(p->ep, SOAK_AM_ID, soak_pack_cb, tx, 0);
            status = (len < 0) ? (ucs_status_t)len : UCS_OK;
        } else {
            iov.buffer = tx->src + SOAK_AM_META;
            iov.length = tx->am_len - SOAK_AM_META;
            status = uct_ep_am_zcopy(p->ep, SOAK_AM_ID, tx->src, SOAK_AM_META,
                                     &iov, 1, 0, soak_tx_comp(tx));
        }
        if ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
            ++p->am_seq;
        }
        break;
    default:
        return UCS_OK;
    }

    if ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
        ++w->stats->ops[op];
        tx->last_op = op;
    }
    return status;
}

/* After a step's operation has completed: check what it returned. */
static void soak_tx_step_done(soak_worker_t *w, soak_tx_t *tx)
{
    soak_peer_t *p  = &w->peers[tx->peer];
    uint8_t *shadow = p->shadow[tx->slot];
    uint8_t expect[SOAK_LOCAL_SIZE];
    uint64_t *ctr = &p->ctr[tx->slot];
    size_t i;

    switch (tx->steps[tx->step]) {
    case SOAK_STEP_VERIFY:
        if (tx->rop == SOAK_OP_GET_STRIDED) {
            for (i = 0; i < tx->rcount; ++i) {
                if (soak_compare(w, tx, tx->dst + i * tx->rstride,
                                 shadow + tx->roff + i * tx->rblk, tx->rblk,
                                 "strided get") != 0) {
                    break;
                }
            }
            /* and nothing between the blocks */
            for (i = 0; i + 1 < tx->rcount; ++i) {
                memset(expect, 0xa5 ^ (tx->key & 0xff), tx->rstride - tx->rblk);
                if (soak_compare(w, tx, tx->dst + i * tx->rstride + tx->rblk,
                                 expect, tx->rstride - tx->rblk,
                                 "the gaps of a strided get") != 0) {
                    break;
                }
            }
        } else if (tx->rop == SOAK_OP_GET_VIEW) {
            for (i = 0; i < tx->rlen; ++i) {
                expect[i] =
                        shadow[soak_view_offset(w->id, tx->slot, tx->roff + i)];
            }
            soak_compare(w, tx, tx->dst, expect, tx->rlen, "view get");
        } else {
            soak_compare(w, tx, tx->dst, shadow + tx->roff, tx->rlen, "get");
        }
        break;
    case SOAK_STEP_CTR_READ:
        *ctr                   = tx->result;
        p->ctr_known[tx->slot] = 1;
        break;
    case SOAK_STEP_CTR_CHECK:
        if (tx->result != *ctr) {
            soak_corruption(w,
                            "counter %d at peer %d after %s op %d: %#" PRIx64
                            ", expected %#" PRIx64,
                            tx->slot, tx->peer, soak_op_names[tx->aop],
                            tx->aopcode, tx->result, *ctr);
            p->ctr_known[tx->slot] = 0;
        } else {
            w->stats->bytes_verified += 8;
        }
        break;
    case SOAK_STEP_ATOMIC:
        if (tx->aop == SOAK_OP_ATOMIC_POST) {
            *ctr = soak_atomic_apply(tx->aopcode, *ctr, tx->value);
            break;
        }
        if (tx->result != *ctr) {
            soak_corruption(w,
                            "counter %d at peer %d: %s op %d returned %#" PRIx64
                            ", expected %#" PRIx64,
                            tx->slot, tx->peer, soak_op_names[tx->aop],
                            tx->aopcode, tx->result, *ctr);
            p->ctr_known[tx->slot] = 0;
            break;
        }
        w->stats->bytes_verified += 8;
        if (tx->aop == SOAK_OP_ATOMIC_FETCH) {
            *ctr = soak_atomic_apply(tx->aopcode, *ctr, tx->value);
        } else if (tx->compare != 0) {
            *ctr = tx->value; /* the compare matched: swapped */
        }
        break;
    default:
        break;
    }
}

/* Move a transaction on as far as it goes without waiting; 1 if it moved. */
static int soak_tx_advance(soak_worker_t *w, soak_tx_t *tx)
{
    soak_peer_t *p;
    ucs_status_t status;
    int moved = 0;

    if (!tx->busy) {
        if ((w->control->phase != SOAK_PHASE_RUN) || !soak_tx_start(w, tx)) {
            return 0;
        }
        moved = 1;
    }
    p = &w->peers[tx->peer];

    for (;;) {
        if (tx->waiting) {
            if (!tx->comp_done) {
                return moved;
            }
            tx->waiting = 0;
            moved       = 1;
            if (tx->comp_status != UCS_OK) {
                soak_tx_end(w, tx, tx->comp_status);
                return 1;
            }
            soak_tx_step_done(w, tx);
            ++tx->step;
        }
        if (tx->step == tx->nsteps) {
            soak_tx_end(w, tx, UCS_OK);
            return 1;
        }
        if (tx->steps[tx->step] == SOAK_STEP_VERIFY) {
            soak_tx_step_done(w, tx);
            ++tx->step;
            continue;
        }
        if (p->failed) {
            soak_tx_end(w, tx, UCS_ERR_CANCELED);
            return 1;
        }
        status = soak_tx_issue(w, tx);
        if (status == UCS_ERR_NO_RESOURCE) {
            return moved;
        }
        moved = 1;
        if (status == UCS_INPROGRESS) {
            tx->waiting = 1;
        } else if (status == UCS_OK) {
            soak_tx_step_done(w, tx);
            ++tx->step;
        } else {
            soak_tx_end(w, tx, status);
            return 1;
        }
    }
}

/* --- faults ------------------------------------------------------------- */

static void soak_inject(soak_worker_t *w, uint64_t now)
{
    static const enum ibv_wc_status statuses[] = {
        IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR,
        IBV_WC_REM_INV_REQ_ERR, IBV_WC_GENERAL_ERR
    };
    int candidates[SOAK_MAX_PROCS], n = 0, i, rc = 0;
    soak_fault_t kind;
    unsigned r;
    uint32_t dctn;

    if (w->delay_dctn && (now >= w->delay_clear_ns)) {
        w->fault_inject(DCXEMU_FAULT_DELAY, w->delay_dctn, 0);
        w->delay_dctn = 0;
    }
    if (w->unreachable_dctn && (now >= w->unreachable_clear_ns)) {
        w->fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE, w->unreachable_dctn, 0);
        w->unreachable_dctn = 0;
    }
    if ((now < w->next_fault_ns) || (w->control->phase != SOAK_PHASE_RUN)) {
        return;
    }
    w->next_fault_ns = now + soak_rand_range(w, 500, 3500) * 1000000ull;
    for (i = 0; i < w->nprocs; ++i) {
        if ((i != w->id) && w->peers[i].connected) {
            candidates[n++] = i;
        }
    }
    if (n == 0) {
        return;
    }
    dctn = w->peers[candidates[soak_rand(w) % n]].dctn;
    r    = soak_rand(w) % 20;
    if (r < 9) {
        kind = SOAK_FAULT_DROP;
        rc   = w->fault_inject(DCXEMU_FAULT_DROP_NEXT, dctn,
                               soak_rand_range(w, 1, 3));
    } else if (r < 11) {
        kind = SOAK_FAULT_DROP_ALL; /* RETRY_COUNT 7: the 8th try fails */
        rc   = w->fault_inject(DCXEMU_FAULT_DROP_NEXT, dctn, 8);
    } else if (r < 14) {
        kind = SOAK_FAULT_FORCE_STATUS;
        rc   = w->fault_inject(DCXEMU_FAULT_FORCE_STATUS, dctn,
                               statuses[soak_rand(w) % 5]);
    } else if (r < 17) {
        if (w->delay_dctn) {
            return;
        }
        kind = SOAK_FAULT_DELAY;
        rc   = w->fault_inject(DCXEMU_FAULT_DELAY, dctn,
                               soak_rand_range(w, 100, 2000));
        if (rc == 0) {
            w->delay_dctn     = dctn;
            w->delay_clear_ns = now + 500000000ull;
        }
    } else {
        if (w->unreachable_dctn) {
            return;
        }
        kind = SOAK_FAULT_UNREACHABLE;
        rc   = w->fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE, dctn, 1);
        if (rc == 0) {
            w->unreachable_dctn     = dctn;
            w->unreachable_clear_ns = now +
                                      soak_rand_range(w, 20, 100) * 1000000ull;
        }
    }
    /* ENOENT: the peer died meanwhile; its DCT is gone */
    if (rc == 0) {
        ++w->stats->faults[kind];
    } else if (rc != ENOENT) {
        soak_log(w, "fault injection %s: %s", soak_fault_names[kind],
                 strerror(rc));
    }
}

/* --- the worker's main loop ------------------------------------------------ */

/* --check: prove the checks work. corruption: flip bytes in every sender's
 * slots and counters here (the CPU, behind the transport's back), which
 * their reads must report; hang: stop making progress, which the parent's
 * watchdog (and the peers' waiting for this process) must report. */
static void soak_check_checker(soak_worker_t *w, const char *check)
{
    uint8_t *region;
    int s, t;

    if (!strcmp(check, "hang")) {
        soak_log(w, "--check hang: stopping here");
        for (;;) {
            pause();
        }
    }
    soak_log(w, "--check corruption: flipping bytes in every sender's "
                "slots and counters");
    for (s = 0; s < w->nprocs; ++s) {
        region = w->regions + (size_t)s * SOAK_REGION_SIZE;
        for (t = 0; (s != w->id) && (t < SOAK_SLOTS); ++t) {
            region[t * SOAK_SLOT_SIZE + 100] ^= 0x5a;
            region[t * SOAK_SLOT_SIZE + 20000] ^= 0x5a;
            region[SOAK_SLOTS * SOAK_SLOT_SIZE + t * 8] ^= 0x5a;
        }
    }
}

static int soak_worker_main(int id, int inc, int nprocs, const char *dir,
                            double hang_s, uint64_t seed)
{
    soak_worker_t *w = calloc(1, sizeof(*w));
    struct dcxemu_counters emu;
    uint64_t now, last_tick = 0, hang_ns, check_ns;
    const char *check;
    char path[PATH_MAX];
    int i, t, moved, busy, s;

    w->id     = id;
    w->inc    = inc;
    w->nprocs = nprocs;
    w->dir    = dir;
    w->rng    = soak_mix64(seed ^ ((uint64_t)id << 32) ^ inc) | 1;
    hang_ns   = (uint64_t)(hang_s * 1e9);
    snprintf(path, sizeof(path), "%s/stats-%d.%d", dir, id, inc);
    w->stats = soak_map_file(path, sizeof(soak_stats_t), 0);
    snprintf(path, sizeof(path), "%s/control", dir);
    w->control = soak_map_file(path, sizeof(soak_control_t), 0);
    if ((w->stats == NULL) || (w->control == NULL)) {
        soak_log(w, "cannot map %s: %m", path);
        return SOAK_EXIT_SETUP;
    }
    w->stats->heartbeat_ns = soak_now_ns();

    soak_worker_open(w);
    soak_worker_memory(w);
    for (i = 0; i < nprocs; ++i) {
        w->peers[i].id = i;
        for (t = 0; t < SOAK_SLOTS; ++t) {
            w->peers[i].shadow[t] = malloc(SOAK_SLOT_SIZE);
        }
    }
    for (t = 0; t < SOAK_SLOTS; ++t) {
        w->txs[t].slot = t;
        w->txs[t].src  = w->local + (size_t)t * 2 * SOAK_LOCAL_SIZE;
        w->txs[t].dst  = w->txs[t].src + SOAK_LOCAL_SIZE;
    }
    soak_worker_publish(w);
    w->next_fault_ns = soak_now_ns() + 1000000000ull;
    w->stats->ready  = 1;
    soak_log(w, "up (pid %d)", (int)getpid());

    check    = ((id == 0) && (inc == 0)) ? getenv("DCX_SOAK_CHECK") : NULL;
    check_ns = soak_now_ns() + 5000000000ull;
    while (w->control->phase != SOAK_PHASE_EXIT) {
        if ((check != NULL) && (soak_now_ns() > check_ns)) {
            soak_check_checker(w, check);
            check = NULL;
        }
        moved = uct_worker_progress(w->worker) > 0;
        busy  = 0;
        for (t = 0; t < SOAK_SLOTS; ++t) {
            moved |= soak_tx_advance(w, &w->txs[t]);
            busy |= w->txs[t].busy;
        }
        now                    = soak_now_ns();
        w->stats->heartbeat_ns = now;
        if (now - last_tick > 20000000ull) {
            last_tick = now;
            soak_peers_maintain(w, now);
            soak_inject(w, now);
            for (t = 0; t < SOAK_SLOTS; ++t) {
                if (w->txs[t].busy && (now - w->txs[t].start_ns > hang_ns)) {
                    ++w->stats->hangs;
                    soak_log(w,
                             "HANG: transaction %d (peer %d, step %d of "
                             "%d, last %s, %s) outstanding for %.1f s",
                             t, w->txs[t].peer, w->txs[t].step,
                             w->txs[t].nsteps, soak_op_names[w->txs[t].last_op],
                             w->txs[t].waiting ? "waiting for its completion" :
                                                 "not accepted",
                             (now - w->txs[t].start_ns) / 1e9);
                    _exit(SOAK_EXIT_HANG);
                }
            }
            if (w->emu_counters(0, DCXEMU_SCOPE_PROCESS, &emu) == 0) {
                w->stats->emu_transport_retries = emu.transport_retries;
                w->stats->emu_error_cqes        = emu.error_cqes;
                w->stats->emu_bytes             = emu.bytes;
            }
            if ((w->control->phase == SOAK_PHASE_DRAIN) && !busy) {
                w->stats->drained = 1;
            }
        }
        if (!moved) {
            sched_yield();
        }
    }

    /* Everyone drained: nothing moves to or from anyone. */
    for (i = 0; i < nprocs; ++i) {
        if (w->peers[i].connected) {
            soak_peer_disconnect(w, &w->peers[i]);
        }
    }
    for (s = 0; s < nprocs; ++s) {
        for (t = 0; (s != id) && (t < SOAK_VIEW_SLOTS); ++t) {
            soak_check(w, w->view_destroy(w->iface, w->views[s][t]),
                       "view destroy");
        }
    }
    soak_check(w, uct_md_mem_dereg(w->md, w->regions_memh), "dereg");
    soak_check(w, uct_md_mem_dereg(w->md, w->local_memh), "dereg");
    uct_iface_close(w->iface);
    uct_md_close(w->md);
    uct_worker_destroy(w->worker);
    ucs_async_context_destroy(w->async);
    soak_log(w, "done");
    return 0;
}

/* --- the parent ---------------------------------------------------------- */

typedef enum {
    SOAK_W_RUNNING,
    SOAK_W_DOWN,
    SOAK_W_EXITED
} soak_wstate_t;

typedef struct {
    pid_t pid;
    int inc;
    soak_wstate_t state;
    uint64_t started_ns, respawn_ns;
    soak_stats_t *stats;
} soak_child_t;

typedef struct {
    int nprocs;
    double seconds, kill_interval, hang_s;
    uint64_t seed, rng;
    const char *dir, *faults;
    soak_child_t children[SOAK_MAX_PROCS];
    soak_stats_t *all[4096]; /* every incarnation's stats */
    int nall;
    unsigned kills, hangs, crashes;
    int last_killed;
    volatile soak_control_t *control;
} soak_parent_t;

/* Statuses for each worker's DCXEMU_FAULTS, one per worker in turn. */
static const char *soak_env_statuses[] = { "RETRY_EXC_ERR", "REM_ACCESS_ERR",
                                           "REM_OP_ERR", "GENERAL_ERR" };

static volatile sig_atomic_t soak_interrupted;

static void soak_on_signal(int sig)
{
    soak_interrupted = sig;
}

static uint64_t soak_parent_rand(soak_parent_t *sp)
{
    sp->rng ^= sp->rng << 13;
    sp->rng ^= sp->rng >> 7;
    sp->rng ^= sp->rng << 17;
    return sp->rng;
}

static int soak_spawn(soak_parent_t *sp, int id, int inc)
{
    soak_child_t *c = &sp->children[id];
    char path[PATH_MAX], env[512], args[5][32];
    int fd;

    snprintf(path, sizeof(path), "%s/stats-%d.%d", sp->dir, id, inc);
    c->stats = soak_map_file(path, sizeof(soak_stats_t), 1);
    if ((c->stats == NULL) ||
        (sp->nall == (int)(sizeof(sp->all) / sizeof(sp->all[0])))) {
        fprintf(stderr, "dcx_soak: cannot create %s: %m\n", path);
        return -1;
    }
    c->stats->magic     = SOAK_STATS_MAGIC;
    c->stats->id        = id;
    c->stats->inc       = inc;
    sp->all[sp->nall++] = c->stats;
    snprintf(env, sizeof(env), "%s%sstatus=%s:0.0002,seed=%" PRIu64, sp->faults,
             (sp->faults[0] != '\0') ? "," : "", soak_env_statuses[id % 4],
             sp->seed * 1000003 + (uint64_t)id * 1009 + inc);
    snprintf(args[0], sizeof(args[0]), "%d", id);
    snprintf(args[1], sizeof(args[1]), "%d", inc);
    snprintf(args[2], sizeof(args[2]), "%d", sp->nprocs);
    snprintf(args[3], sizeof(args[3]), "%g", sp->hang_s);
    snprintf(args[4], sizeof(args[4]), "%" PRIu64, sp->seed);
    snprintf(path, sizeof(path), "%s/worker-%d.%d.log", sp->dir, id, inc);

    c->pid = fork();
    if (c->pid < 0) {
        fprintf(stderr, "dcx_soak: fork: %m\n");
        return -1;
    }
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if ((fd < 0) || (dup2(fd, 1) < 0) || (dup2(fd, 2) < 0)) {
            _exit(127);
        }
        close(fd);
        setenv("DCXEMU_FAULTS", env, 1);
        execl("/proc/self/exe", "dcx_soak", "--worker", args[0], args[1],
              args[2], sp->dir, args[3], args[4], (char *)NULL);
        _exit(127);
    }
    c->inc        = inc;
    c->state      = SOAK_W_RUNNING;
    c->started_ns = soak_now_ns();
    return 0;
}

static void soak_show_log(soak_parent_t *sp, int id, int inc)
{
    char cmd[PATH_MAX + 64];

    snprintf(cmd, sizeof(cmd),
             "tail -n 5 '%s/worker-%d.%d.log' | "
             "sed 's/^/      | /'",
             sp->dir, id, inc);
    fflush(stdout);
    if (system(cmd) != 0) {
        printf("      | (no log)\n");
    }
}

/* A worker that exited on its own: a hang (its watchdog) or a crash. */
static void soak_child_exited(soak_parent_t *sp, int id, int status)
{
    soak_child_t *c = &sp->children[id];

    c->state = SOAK_W_EXITED;
    if (WIFEXITED(status) && (WEXITSTATUS(status) == SOAK_EXIT_HANG)) {
        ++sp->hangs;
        printf("dcx_soak: HANG: worker %d.%d found a transaction "
               "outstanding for more than %g s\n",
               id, c->inc, sp->hang_s);
    } else {
        ++sp->crashes;
        if (WIFSIGNALED(status)) {
            printf("dcx_soak: FAILED: worker %d.%d (pid %d) died of signal "
                   "%d\n",
                   id, c->inc, (int)c->pid, WTERMSIG(status));
        } else {
            printf("dcx_soak: FAILED: worker %d.%d (pid %d) exited with "
                   "status %d\n",
                   id, c->inc, (int)c->pid, WEXITSTATUS(status));
        }
    }
    soak_show_log(sp, id, c->inc);
}

/* Reap workers that exited; returns how many did so on their own. */
static int soak_reap(soak_parent_t *sp, int expected)
{
    int status, id, bad = 0;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (id = 0; id < sp->nprocs; ++id) {
            if ((sp->children[id].pid == pid) &&
                (sp->children[id].state == SOAK_W_RUNNING)) {
                break;
            }
        }
        if (id == sp->nprocs) {
            continue;
        }
        if (expected && WIFEXITED(status) && (WEXITSTATUS(status) == 0)) {
            sp->children[id].state = SOAK_W_EXITED;
            continue;
        }
        soak_child_exited(sp, id, status);
        ++bad;
    }
    return bad;
}

/* A worker whose loop stopped (no heartbeat), or that never came up. */
static int soak_watch(soak_parent_t *sp, uint64_t now)
{
    uint64_t hang_ns = (uint64_t)(sp->hang_s * 1e9), last;
    soak_child_t *c;
    int id;

    for (id = 0; id < sp->nprocs; ++id) {
        c = &sp->children[id];
        if (c->state != SOAK_W_RUNNING) {
            continue;
        }
        last = c->stats->ready ? c->stats->heartbeat_ns : c->started_ns;
        if ((last < now) && (now - last > hang_ns)) {
            ++sp->hangs;
            printf("dcx_soak: HANG: worker %d.%d (pid %d) %s for %.1f s\n", id,
                   c->inc, (int)c->pid,
                   c->stats->ready ? "made no progress" : "did not come up",
                   (now - last) / 1e9);
            soak_show_log(sp, id, c->inc);
            return 1;
        }
    }
    return 0;
}

static void soak_kill_all(soak_parent_t *sp)
{
    int id, status;

    for (id = 0; id < sp->nprocs; ++id) {
        if (sp->children[id].state == SOAK_W_RUNNING) {
            kill(sp->children[id].pid, SIGKILL);
            waitpid(sp->children[id].pid, &status, 0);
            sp->children[id].state = SOAK_W_EXITED;
        }
    }
}

/* Kill a random worker that has been up for a while; it comes back later. */
static void soak_kill_one(soak_parent_t *sp, uint64_t now)
{
    int candidates[SOAK_MAX_PROCS], n = 0, id, status;
    char path[PATH_MAX];
    soak_child_t *c;

    for (id = 0; id < sp->nprocs; ++id) {
        c = &sp->children[id];
        if ((c->state == SOAK_W_RUNNING) && c->stats->ready &&
            (now - c->started_ns > 2000000000ull)) {
            candidates[n++] = id;
        }
    }
    if (n == 0) {
        return;
    }
    id = candidates[soak_parent_rand(sp) % n];
    c  = &sp->children[id];
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &status, 0);
    snprintf(path, sizeof(path), "%s/addr-%d", sp->dir, id);
    unlink(path);
    c->state      = SOAK_W_DOWN;
    c->respawn_ns = now + (200 + soak_parent_rand(sp) % 800) * 1000000ull;
    ++sp->kills;
    sp->last_killed = id;
}

static void soak_sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000l };

    nanosleep(&ts, NULL);
}

/* Wait until every running worker has set *flag (ready or drained). */
static int
soak_wait_all(soak_parent_t *sp, size_t flag_offset, const char *what)
{
    uint64_t deadline = soak_now_ns() + (uint64_t)(sp->hang_s * 1e9);
    int id, all;

    for (;;) {
        if (soak_reap(sp, 0) > 0) {
            return -1;
        }
        all = 1;
        for (id = 0; id < sp->nprocs; ++id) {
            if ((sp->children[id].state == SOAK_W_RUNNING) &&
                !*(uint32_t *)((char *)sp->children[id].stats + flag_offset)) {
                all = 0;
            }
        }
        if (all) {
            return 0;
        }
        if (soak_now_ns() > deadline) {
            for (id = 0; id < sp->nprocs; ++id) {
                if ((sp->children[id].state == SOAK_W_RUNNING) &&
                    !*(uint32_t *)((char *)sp->children[id].stats +
                                   flag_offset)) {
                    ++sp->hangs;
                    printf("dcx_soak: HANG: worker %d.%d not %s after %g s\n",
                           id, sp->children[id].inc, what, sp->hang_s);
                    soak_show_log(sp, id, sp->children[id].inc);
                }
            }
            return -1;
        }
        soak_sleep_ms(20);
    }
}

/* Prints the table; 1 if the run passed. */
static int soak_report(soak_parent_t *sp, double elapsed)
{
    soak_stats_t sum;
    uint64_t total = 0, restarts_seen = 0;
    char cmd[PATH_MAX + 128];
    int i, k, any;

    memset(&sum, 0, sizeof(sum));
    for (i = 0; i < sp->nall; ++i) {
        for (k = 0; k < SOAK_OP_LAST; ++k) {
            sum.ops[k] += sp->all[i]->ops[k];
        }
        for (k = 0; k < SOAK_MAX_STATUS; ++k) {
            sum.ep_errors[k] += sp->all[i]->ep_errors[k];
            sum.tx_errors[k] += sp->all[i]->tx_errors[k];
        }
        for (k = 0; k < SOAK_FAULT_LAST; ++k) {
            sum.faults[k] += sp->all[i]->faults[k];
        }
        sum.bytes_verified += sp->all[i]->bytes_verified;
        sum.tx_ok += sp->all[i]->tx_ok;
        sum.tx_failed += sp->all[i]->tx_failed;
        sum.corruptions += sp->all[i]->corruptions;
        sum.connects += sp->all[i]->connects;
        sum.am_received += sp->all[i]->am_received;
        sum.emu_transport_retries += sp->all[i]->emu_transport_retries;
        sum.emu_error_cqes += sp->all[i]->emu_error_cqes;
        restarts_seen += sp->all[i]->restarts_seen;
    }

    printf("\ndcx_soak: %d processes, %.0f s, seed %" PRIu64 ", %d "
           "incarnations; logs in %s\n",
           sp->nprocs, elapsed, sp->seed, sp->nall, sp->dir);
    printf("  %-34s %14s\n", "operation", "count");
    for (k = 0; k < SOAK_OP_LAST; ++k) {
        printf("  %-34s %14" PRIu64 "\n", soak_op_names[k], sum.ops[k]);
        total += sum.ops[k];
    }
    printf("  %-34s %14" PRIu64 "\n", "total operations", total);
    printf("  %-34s %14" PRIu64 "\n", "transactions completed", sum.tx_ok);
    printf("  %-34s %14" PRIu64 "\n", "transactions failed", sum.tx_failed);
    printf("  %-34s %14" PRIu64 "  (%.1f MiB)\n", "bytes verified",
           sum.bytes_verified, sum.bytes_verified / 1048576.0);
    printf("  %-34s %14" PRIu64 "\n", "active messages received",
           sum.am_received);
    printf("  endpoint errors, by status:\n");
    for (k = 0, any = 0; k < SOAK_MAX_STATUS; ++k) {
        if (sum.ep_errors[k] != 0) {
            printf("    %-32s %14" PRIu64 "\n",
                   ucs_status_string((ucs_status_t)-k), sum.ep_errors[k]);
            any = 1;
        }
    }
    if (!any) {
        printf("    %-32s %14d\n", "(none)", 0);
    }
    printf("  failed transactions, by status:\n");
    for (k = 0, any = 0; k < SOAK_MAX_STATUS; ++k) {
        if (sum.tx_errors[k] != 0) {
            printf("    %-32s %14" PRIu64 "\n",
                   ucs_status_string((ucs_status_t)-k), sum.tx_errors[k]);
            any = 1;
        }
    }
    if (!any) {
        printf("    %-32s %14d\n", "(none)", 0);
    }
    printf("  faults injected (dcxemu_fault_inject):\n");
    for (k = 0; k < SOAK_FAULT_LAST; ++k) {
        printf("    %-32s %14" PRIu64 "\n", soak_fault_names[k], sum.faults[k]);
    }
    printf("  %-34s %s,status=...:0.0002\n", "random faults (DCXEMU_FAULTS)",
           sp->faults);
    printf("  %-34s %14" PRIu64 "\n", "device transport retries",
           sum.emu_transport_retries);
    printf("  %-34s %14" PRIu64 "\n", "device error completions",
           sum.emu_error_cqes);
    printf("  %-34s %14u\n", "processes killed and restarted", sp->kills);
    printf("  %-34s %14" PRIu64 "\n", "restarts found through ep errors",
           restarts_seen);
    printf("  %-34s %14" PRIu64 "\n", "connections made", sum.connects);
    printf("  %-34s %14u\n", "workers crashed", sp->crashes);
    printf("  %-34s %14" PRIu64 "\n", "corruptions", sum.corruptions);
    printf("  %-34s %14u\n", "hangs", sp->hangs);
    if (sum.corruptions != 0) {
        snprintf(cmd, sizeof(cmd),
                 "grep -h CORRUPTION %s/worker-*.log | "
                 "head -n 20",
                 sp->dir);
        fflush(stdout);
        if (system(cmd) != 0) {
            printf("  (no corruption lines in the logs)\n");
        }
    }
    if ((sum.corruptions == 0) && (sp->hangs == 0) && (sp->crashes == 0) &&
        !soak_interrupted) {
        printf("dcx_soak: PASS: 0 corruptions, 0 hangs\n");
    } else {
        printf("dcx_soak: FAILED: %" PRIu64 " corruptions, %u hangs, %u "
               "crashed workers%s\n",
               sum.corruptions, sp->hangs, sp->crashes,
               soak_interrupted ? ", interrupted" : "");
    }
    return (sum.corruptions == 0) && (sp->hangs == 0) && (sp->crashes == 0) &&
           !soak_interrupted;
}

static void soak_usage(void)
{
    fprintf(stderr,
            "usage: dcx_soak [--procs N] [--seconds S] [--dir DIR] "
            "[--seed N]\n"
            "                [--kill-interval S] [--hang-seconds S] "
            "[--faults SPEC]\n"
            "  run under dcx-run --emu; N 2..%d (default 8), S default 120;\n"
            "  a worker is killed every kill-interval seconds on average "
            "(default 15, 0: never);\n"
            "  SPEC: DCXEMU_FAULTS items for every worker (default "
            "drop=0.001,delay_us=300:0.001),\n"
            "  to which each worker adds status=NAME:0.0002 and its seed;\n"
            "  --check hang|corruption: worker 0 stops, or flips bytes of "
            "its peers' regions,\n"
            "  after 5 s: the run must fail (a check of the checks)\n",
            SOAK_MAX_PROCS);
}

static int soak_parent_main(int argc, char **argv)
{
    static const struct option options[] = {
        { "procs", required_argument, NULL, 'n' },
        { "seconds", required_argument, NULL, 's' },
        { "dir", required_argument, NULL, 'd' },
        { "seed", required_argument, NULL, 'r' },
        { "kill-interval", required_argument, NULL, 'k' },
        { "hang-seconds", required_argument, NULL, 'h' },
        { "faults", required_argument, NULL, 'f' },
        { "check", required_argument, NULL, 'c' },
        { NULL, 0, NULL, 0 }
    };
    soak_parent_t *sp = calloc(1, sizeof(*sp));
    char path[PATH_MAX], tmpl[PATH_MAX];
    const char *tmpdir = getenv("TMPDIR");
    uint64_t start, end, now, next_kill;
    struct sigaction sa;
    int opt, id, failed = 0;

    sp->nprocs        = 8;
    sp->seconds       = 120;
    sp->kill_interval = 15;
    sp->hang_s        = 60;
    sp->seed          = (uint64_t)time(NULL);
    sp->faults        = "drop=0.001,delay_us=300:0.001";
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'n':
            sp->nprocs = atoi(optarg);
            break;
        case 's':
            sp->seconds = atof(optarg);
            break;
        case 'd':
            sp->dir = optarg;
            break;
        case 'r':
            sp->seed = strtoull(optarg, NULL, 0);
            break;
        case 'k':
            sp->kill_interval = atof(optarg);
            break;
        case 'h':
            sp->hang_s = atof(optarg);
            break;
        case 'f':
            sp->faults = optarg;
            break;
        case 'c':
            if (strcmp(optarg, "hang") && strcmp(optarg, "corruption")) {
                soak_usage();
                return 2;
            }
            setenv("DCX_SOAK_CHECK", optarg, 1);
            break;
        default:
            soak_usage();
            return 2;
        }
    }
    if ((optind != argc) || (sp->nprocs < 2) || (sp->nprocs > SOAK_MAX_PROCS) ||
        !(sp->seconds > 0) || (sp->kill_interval < 0) || !(sp->hang_s >= 1)) {
        soak_usage();
        return 2;
    }
    if (sp->dir == NULL) {
        snprintf(tmpl, sizeof(tmpl), "%s/dcx-soak.XXXXXX",
                 ((tmpdir != NULL) && (*tmpdir != '\0')) ? tmpdir : P_tmpdir);
        sp->dir = mkdtemp(tmpl);
    } else if ((mkdir(sp->dir, 0700) != 0) && (errno != EEXIST)) {
        sp->dir = NULL;
    }
    if (sp->dir == NULL) {
        fprintf(stderr, "dcx_soak: cannot make the run directory: %m\n");
        return 1;
    }
    sp->rng = soak_mix64(sp->seed) | 1;
    snprintf(path, sizeof(path), "%s/control", sp->dir);
    sp->control = soak_map_file(path, sizeof(soak_control_t), 1);
    if (sp->control == NULL) {
        fprintf(stderr, "dcx_soak: cannot create %s: %m\n", path);
        return 1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = soak_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    printf("dcx_soak: %d processes for %g s, seed %" PRIu64 ", ", sp->nprocs,
           sp->seconds, sp->seed);
    if (sp->kill_interval > 0) {
        printf("a kill every ~%g s, ", sp->kill_interval);
    } else {
        printf("no kills, ");
    }
    printf("hang limit %g s, faults %s; logs in %s\n", sp->hang_s, sp->faults,
           sp->dir);
    fflush(stdout);
    for (id = 0; id < sp->nprocs; ++id) {
        if (soak_spawn(sp, id, 0) != 0) {
            soak_kill_all(sp);
            return 1;
        }
    }
    start     = soak_now_ns();
    end       = start + (uint64_t)(sp->seconds * 1e9);
    next_kill = start +
                (uint64_t)(sp->kill_interval *
                           (0.5 + (soak_parent_rand(sp) % 1000) / 1e3) * 1e9);
    while (!failed && !soak_interrupted && ((now = soak_now_ns()) < end)) {
        failed = (soak_reap(sp, 0) > 0) || soak_watch(sp, now);
        if ((sp->kill_interval > 0) && (now >= next_kill)) {
            sp->last_killed = -1;
            soak_kill_one(sp, now);
            if (sp->last_killed >= 0) {
                printf("dcx_soak: %6.1f s: killed worker %d.%d\n",
                       (now - start) / 1e9, sp->last_killed,
                       sp->children[sp->last_killed].inc);
            }
            fflush(stdout);
            next_kill = now +
                        (uint64_t)(sp->kill_interval *
                                   (0.5 + (soak_parent_rand(sp) % 1000) / 1e3) *
                                   1e9);
        }
        for (id = 0; !failed && (id < sp->nprocs); ++id) {
            if ((sp->children[id].state == SOAK_W_DOWN) &&
                (now >= sp->children[id].respawn_ns)) {
                failed = soak_spawn(sp, id, sp->children[id].inc + 1) != 0;
            }
        }
        soak_sleep_ms(50);
    }

    /* The end: everyone back up, then stop new work and drain, then exit. */
    for (id = 0; !failed && !soak_interrupted && (id < sp->nprocs); ++id) {
        if (sp->children[id].state == SOAK_W_DOWN) {
            failed = soak_spawn(sp, id, sp->children[id].inc + 1) != 0;
        }
    }
    if (!failed && !soak_interrupted) {
        failed = soak_wait_all(sp, offsetof(soak_stats_t, ready), "up") != 0;
    }
    if (!failed && !soak_interrupted) {
        sp->control->phase = SOAK_PHASE_DRAIN;
        failed             = soak_wait_all(sp, offsetof(soak_stats_t, drained),
                                           "drained") != 0;
    }
    sp->control->phase = SOAK_PHASE_EXIT;
    if (!failed && !soak_interrupted) {
        end = soak_now_ns() + (uint64_t)(sp->hang_s * 1e9);
        for (;;) {
            failed = soak_reap(sp, 1) > 0;
            for (id = 0; id < sp->nprocs; ++id) {
                if (sp->children[id].state == SOAK_W_RUNNING) {
                    break;
                }
            }
            if (failed || (id == sp->nprocs)) {
                break;
            }
            if (soak_now_ns() > end) {
                ++sp->hangs;
                printf("dcx_soak: HANG: worker %d did not exit after %g s\n",
                       id, sp->hang_s);
                soak_show_log(sp, id, sp->children[id].inc);
                break;
            }
            soak_sleep_ms(20);
        }
    }
    soak_kill_all(sp);
    if (soak_interrupted) {
        printf("dcx_soak: interrupted by signal %d\n", (int)soak_interrupted);
    }
    return soak_report(sp, (soak_now_ns() - start) / 1e9) ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 8) && !strcmp(argv[1], "--worker")) {
        return soak_worker_main(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                                argv[5], atof(argv[6]),
                                strtoull(argv[7], NULL, 0));
    }
    return soak_parent_main(argc, argv);
}
