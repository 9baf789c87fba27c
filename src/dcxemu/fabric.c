/* dcxemu fabric: shared memory, members and liveness, heap, locks, engine thread. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>


struct dcxemu_settings dcxemu_cfg;
struct dcxemu_shm *dcxemu_fab;
int dcxemu_me = -1;
uint64_t dcxemu_my_token;
pthread_mutex_t dcxemu_reg_lock;
struct dcxemu_cq *dcxemu_local_cqs[DCXEMU_MAX_CQS];
struct dcxemu_srq *dcxemu_local_srqs[DCXEMU_MAX_SRQS];
struct dcxemu_qp *dcxemu_local_qps[DCXEMU_MAX_QPS];
struct dcxemu_context *dcxemu_contexts;
int dcxemu_dev_fatal[DCXEMU_MAX_DEVICES];

static uint32_t qp_items[DCXEMU_MAX_QPS], qp_pos[DCXEMU_MAX_QPS];
static uint32_t cq_items[DCXEMU_MAX_CQS], cq_pos[DCXEMU_MAX_CQS];
static uint32_t srq_items[DCXEMU_MAX_SRQS], srq_pos[DCXEMU_MAX_SRQS];
struct dcxemu_idx_set dcxemu_qp_set = { 0, qp_items, qp_pos };
struct dcxemu_idx_set dcxemu_cq_set = { 0, cq_items, cq_pos };
struct dcxemu_idx_set dcxemu_srq_set = { 0, srq_items, srq_pos };

void dcxemu_idx_set_add(struct dcxemu_idx_set *s, uint32_t index)
{
    s->pos[index] = s->n;
    s->item[s->n++] = index;
}

void dcxemu_idx_set_del(struct dcxemu_idx_set *s, uint32_t index)
{
    uint32_t p = s->pos[index], last = s->item[--s->n];
    s->item[p] = last;
    s->pos[last] = p;
}

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int attached;
static int attach_err;
static volatile int forked;        /* set in a child after fork(): the fabric is not ours */
static size_t map_size;
static pthread_t engine_thread;
static volatile int engine_stop;


static void on_fork_child(void) { forked = 1; }

uint64_t dcxemu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t dcxemu_scaled_ns(double ns)
{
    double v = ns * dcxemu_cfg.time_scale;
    if (v < 1000.0) {
        v = 1000.0;         /* keep retries from spinning */
    }
    if (v > 1e15) {
        v = 1e15;
    }
    return (uint64_t)v;
}

static long env_long(const char *name, long def, long min, long max)
{
    const char *s = getenv(name);
    char *end;
    long v;
    if (s == NULL || *s == '\0') {
        return def;
    }
    v = strtol(s, &end, 0);
    if (*end != '\0' || v < min || v > max) {
        fprintf(stderr, "dcxemu: ignoring %s=%s (expected %ld..%ld)\n", name, s, min, max);
        return def;
    }
    return v;
}

/* "0.01" -> 0.01 * 2^32 (saturated); -1 if not a probability */
static int64_t parse_prob(const char *v)
{
    char *end;
    double p = strtod(v, &end);
    if (end == v || (*end != '\0' && *end != ',') || !(p >= 0.0 && p <= 1.0)) {
        return -1;
    }
    return p >= 1.0 ? 0xffffffffLL : (int64_t)(p * 4294967296.0);
}

static int parse_status(const char *v, char **end)
{
    static const struct { const char *name; int st; } names[] = {
        { "RETRY_EXC_ERR", IBV_WC_RETRY_EXC_ERR }, { "RNR_RETRY_EXC_ERR", IBV_WC_RNR_RETRY_EXC_ERR },
        { "REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR }, { "LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR },
        { "REM_OP_ERR", IBV_WC_REM_OP_ERR }, { "REM_INV_REQ_ERR", IBV_WC_REM_INV_REQ_ERR },
        { "LOC_LEN_ERR", IBV_WC_LOC_LEN_ERR }, { "LOC_QP_OP_ERR", IBV_WC_LOC_QP_OP_ERR },
        { "GENERAL_ERR", IBV_WC_GENERAL_ERR }, { "WR_FLUSH_ERR", IBV_WC_WR_FLUSH_ERR },
    };
    if (strncmp(v, "IBV_WC_", 7) == 0) {
        v += 7;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = strlen(names[i].name);
        if (strncmp(v, names[i].name, n) == 0 && (v[n] == ':' || v[n] == '\0' || v[n] == ',')) {
            *end = (char *)v + n;
            return names[i].st;
        }
    }
    long st = strtol(v, end, 0);
    return *end == v || st <= IBV_WC_SUCCESS || st > IBV_WC_TM_RNDV_INCOMPLETE ? -1 : (int)st;
}

/* DCXEMU_FAULTS="drop=P,delay_us=U:P,status=NAME:P,seed=N"; a bad item is ignored with a line */
static void read_faults(const char *spec)
{
    char *copy = strdup(spec), *save = NULL, *item;
    if (copy == NULL) {
        return;
    }
    for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '='), *end, *colon;
        int64_t p = -1;
        if (eq == NULL) {
            goto bad;
        }
        *eq++ = '\0';
        colon = strchr(eq, ':');
        if (strcmp(item, "drop") == 0) {
            p = parse_prob(eq);
            if (p < 0) goto bad;
            dcxemu_cfg.drop_p = (uint32_t)p;
        } else if (strcmp(item, "delay_us") == 0) {
            unsigned long us = strtoul(eq, &end, 0);
            if (colon == NULL || end != colon || us > 10000000 || (p = parse_prob(colon + 1)) < 0) goto bad;
            dcxemu_cfg.delay_us = (uint32_t)us;
            dcxemu_cfg.delay_p = (uint32_t)p;
        } else if (strcmp(item, "status") == 0) {
            int st = parse_status(eq, &end);
            if (st < 0 || colon == NULL || end != colon || (p = parse_prob(colon + 1)) < 0) goto bad;
            dcxemu_cfg.status = (uint32_t)st;
            dcxemu_cfg.status_p = (uint32_t)p;
        } else if (strcmp(item, "seed") == 0) {
            dcxemu_cfg.fault_seed = strtoull(eq, &end, 0);
            if (*end != '\0') goto bad;
        } else {
            goto bad;
        }
        continue;
bad:
        fprintf(stderr, "dcxemu: ignoring DCXEMU_FAULTS item '%s'\n", item);
    }
    free(copy);
    dcxemu_cfg.faults = dcxemu_cfg.drop_p || dcxemu_cfg.delay_p || dcxemu_cfg.status_p;
}

static void read_trace(const char *t)
{
    if (t == NULL || *t == '\0' || strcmp(t, "0") == 0) {
        return;
    }
    if (strcmp(t, "1") == 0) {
        dcxemu_trace_fd = STDERR_FILENO;
        return;
    }
    dcxemu_trace_fd = open(t, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (dcxemu_trace_fd < 0) {
        fprintf(stderr, "dcxemu: cannot open DCXEMU_TRACE=%s: %s\n", t, strerror(errno));
    }
}

/* Fallback names tried after the default one: "<default>.1" .. "<default>.15". */
#define FABRIC_NAME_TRIES 16

/* "/name" of fabric candidate cand: DCXEMU_FABRIC (explicit, one candidate only), else the
 * default "dcxemu-<uid>" (DCXEMU_DEFAULT_FABRIC replaces it, for tests that must not touch the
 * user's real default) and its fallbacks.  Returns 1 if the name is explicit. */
static int fabric_candidate(int cand, char *buf, size_t len)
{
    const char *f = getenv("DCXEMU_FABRIC");
    const char *base = getenv("DCXEMU_DEFAULT_FABRIC");
    char def[64];
    if (f != NULL && *f != '\0' && strlen(f) < len - 2 && strchr(f, '/') == NULL) {
        snprintf(buf, len, "/%s", f);
        return 1;
    }
    if (base == NULL || *base == '\0' || strlen(base) > 100 || strchr(base, '/') != NULL) {
        snprintf(def, sizeof(def), "dcxemu-%u", (unsigned)getuid());
        base = def;
    }
    if (cand == 0) {
        snprintf(buf, len, "/%s", base);
    } else {
        snprintf(buf, len, "/%s.%d", base, cand);
    }
    return 0;
}

/* DCXEMU_PTRACER: "any" (default), "none" or a process ID. */
static void read_ptracer(const char *s)
{
    char *end;
    long pid;
    dcxemu_cfg.ptracer = -1;
    if (s == NULL || *s == '\0' || strcmp(s, "any") == 0) {
        return;
    }
    if (strcmp(s, "none") == 0) {
        dcxemu_cfg.ptracer = 0;
        return;
    }
    pid = strtol(s, &end, 10);
    if (*end == '\0' && pid > 0 && pid <= INT_MAX) {
        dcxemu_cfg.ptracer = pid;
    } else {
        fprintf(stderr, "dcxemu: ignoring DCXEMU_PTRACER=%s (any, none or a process ID)\n", s);
    }
}

static void read_settings(void)
{
    const char *ex = getenv("DCXEMU_EXEC");
    const char *fs = getenv("DCXEMU_FAULTS");
    const char *ts = getenv("DCXEMU_TIME_SCALE");
    const char *ac = getenv("DCXEMU_ATOMIC_CAP");
    const char *ll = getenv("DCXEMU_LINK_LAYER");
    dcxemu_cfg.fabric_explicit = fabric_candidate(0, dcxemu_cfg.fabric, sizeof(dcxemu_cfg.fabric));
    dcxemu_cfg.keep_fabric = (int)env_long("DCXEMU_KEEP_FABRIC", 0, 0, 1);
    dcxemu_cfg.max_members = (uint32_t)env_long("DCXEMU_MAX_MEMBERS", DCXEMU_MAX_MEMBERS, 2,
                                                DCXEMU_MAX_MEMBERS);
    dcxemu_cfg.num_devices = (int)env_long("DCXEMU_NUM_DEVICES", 1, 1, DCXEMU_MAX_DEVICES);
    dcxemu_cfg.max_wqe = (uint32_t)env_long("DCXEMU_MAX_WQE_SIZE", 512, 256, 4096) & ~63u;
    dcxemu_cfg.heap_mb = (uint64_t)env_long("DCXEMU_HEAP_MB", 1024, 16, 65536);
    dcxemu_cfg.strict_umr = (int)env_long("DCXEMU_STRICT_UMR", 1, 0, 1);
    /* DC read/atomic depth (log2), at most max_qp_init_rd_atom (16) */
    dcxemu_cfg.log_max_ra_dc = (int)env_long("DCXEMU_LOG_MAX_RA_DC", 4, 0, 4);
    dcxemu_cfg.mkey_update_tag = (int)env_long("DCXEMU_MKEY_UPDATE_TAG", 1, 0, 1);
    dcxemu_cfg.yama_scope = (int)env_long("DCXEMU_YAMA_SCOPE", -1, -1, 3);
    read_ptracer(getenv("DCXEMU_PTRACER"));
    dcxemu_cfg.no_ext_atomics = !env_long("DCXEMU_EXT_ATOMICS", 1, 0, 1);
    dcxemu_cfg.no_atomics = 0;
    if (ac != NULL && strcmp(ac, "none") == 0) {
        dcxemu_cfg.no_atomics = 1;
    } else if (ac != NULL && *ac != '\0' && strcmp(ac, "hca") != 0) {
        fprintf(stderr, "dcxemu: ignoring DCXEMU_ATOMIC_CAP=%s (hca or none)\n", ac);
    }
    dcxemu_cfg.roce = 0;
    if (ll != NULL && strcmp(ll, "ethernet") == 0) {
        dcxemu_cfg.roce = 1;
    } else if (ll != NULL && *ll != '\0' && strcmp(ll, "infiniband") != 0) {
        fprintf(stderr, "dcxemu: ignoring DCXEMU_LINK_LAYER=%s (infiniband or ethernet)\n", ll);
    }
    dcxemu_cfg.roce_routers = (uint32_t)env_long("DCXEMU_ROCE_ROUTERS", 0, 0, 254);
    dcxemu_cfg.time_scale = 1.0;
    if (ts != NULL && *ts != '\0') {
        char *end;
        double v = strtod(ts, &end);
        if (*end == '\0' && v > 0 && v < 1e6) {
            dcxemu_cfg.time_scale = v;
        } else {
            fprintf(stderr, "dcxemu: ignoring DCXEMU_TIME_SCALE=%s\n", ts);
        }
    }
    dcxemu_cfg.deferred = 0;
    if (ex != NULL && strcmp(ex, "deferred") == 0) {
        dcxemu_cfg.deferred = 1;
    } else if (ex != NULL && *ex != '\0' && strcmp(ex, "immediate") != 0) {
        fprintf(stderr, "dcxemu: ignoring DCXEMU_EXEC=%s (immediate or deferred)\n", ex);
    }
    dcxemu_cfg.defer_us = (uint32_t)env_long("DCXEMU_DEFER_US", 20, 1, 1000000);
    dcxemu_cfg.fault_seed = 1;   /* also drives the deferral delays: reproducible by default */
    if (fs != NULL && *fs != '\0') {
        read_faults(fs);
    }
    read_trace(getenv("DCXEMU_TRACE"));
}

/* splitmix64 over a shared counter: deterministic sequence for a given seed, thread-safe */
uint64_t dcxemu_random(void)
{
    static _Atomic uint64_t ctr;
    uint64_t z = dcxemu_cfg.fault_seed * 0x9e3779b97f4a7c15ull +
                 (atomic_fetch_add(&ctr, 1) + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int dcxemu_chance(uint32_t p)
{
    return p != 0 && (uint32_t)(dcxemu_random() >> 32) < p;
}

/* Next generation of QP slot idx, 1..DCXEMU_QP_GEN_MAX.  A slot never used starts at a spread
 * value derived from its index, so the table needs no initialisation (untouched pages stay free). */
uint32_t dcxemu_qp_next_gen(uint32_t idx)
{
    uint32_t g = dcxemu_fab->qps[idx].gen;
    if (g == 0) {
        g = (idx * 7) % DCXEMU_QP_GEN_MAX;
    }
    return g % DCXEMU_QP_GEN_MAX + 1;
}

/* ---------------------------------------------------------------- locks ---- */

void dcxemu_shm_mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

int dcxemu_shm_lock(pthread_mutex_t *m)
{
    int r = pthread_mutex_lock(m);
    if (r == EOWNERDEAD) {
        /* The holder died; its half-done update concerns its own objects, which the dead-member
         * reaper releases.  Everything else stays consistent because updates are small. */
        pthread_mutex_consistent(m);
        r = 0;
    }
    return r;
}

static void heap_rebuild(void);

int dcxemu_lock(void)
{
    int r = pthread_mutex_lock(&dcxemu_fab->lock);
    if (r == EOWNERDEAD) {
        /* a member died inside: make the shared heap consistent again; its objects are
         * released by the reaper, which finds it dead */
        pthread_mutex_consistent(&dcxemu_fab->lock);
        heap_rebuild();
        r = 0;
    }
    return r;
}
void dcxemu_unlock(void) { pthread_mutex_unlock(&dcxemu_fab->lock); }

/* ---------------------------------------------------------------- heap ----- */
/* First-fit allocator over the sparse heap, free list sorted by offset, coalescing on free.
 * Called with the fabric lock held. */

static void heap_free_owned(uint64_t token);

struct heap_blk {
    uint64_t size;       /* including this header */
    uint64_t next_free;
    uint32_t free;
    uint32_t magic;
    uint64_t owner_token; /* member that allocated it: the reaper frees what a dead one held */
};
#define HEAP_MAGIC 0x68656170u
#define HEAP_HDR   ((uint64_t)sizeof(struct heap_blk))

static struct heap_blk *blk(uint64_t off) { return (struct heap_blk *)dcxemu_ptr(off); }

static void heap_init(void)
{
    struct heap_blk *b = blk(dcxemu_fab->heap_off);
    b->size = dcxemu_fab->heap_size;
    b->next_free = 0;
    b->free = 1;
    b->magic = HEAP_MAGIC;
    dcxemu_fab->heap_free = dcxemu_fab->heap_off;
}

uint64_t dcxemu_heap_alloc(uint64_t size)
{
    uint64_t need = (size + HEAP_HDR + 63) & ~63ull;
    uint64_t *link = &dcxemu_fab->heap_free;
    if (size == 0 || size > dcxemu_fab->heap_size) {
        return 0;
    }
    while (*link != 0) {
        uint64_t off = *link;
        struct heap_blk *b = blk(off);
        if (b->size >= need) {
            if (b->size - need >= 256) {
                uint64_t rest = off + need;
                struct heap_blk *r = blk(rest);
                r->size = b->size - need;
                r->next_free = b->next_free;
                r->free = 1;
                r->magic = HEAP_MAGIC;
                b->size = need;
                *link = rest;
            } else {
                *link = b->next_free;
            }
            b->owner_token = dcxemu_my_token;
            b->next_free = 0;
            b->free = 0;   /* last: a dying allocator leaves a block heap_rebuild frees */
            return off + HEAP_HDR;
        }
        link = &b->next_free;
    }
    return 0;
}

void dcxemu_heap_free(uint64_t data_off)
{
    uint64_t off = data_off - HEAP_HDR;
    struct heap_blk *b = blk(off), *prev = NULL;
    uint64_t *link = &dcxemu_fab->heap_free;
    if (data_off == 0 || b->magic != HEAP_MAGIC || b->free) {
        return;
    }
    while (*link != 0 && *link < off) {
        prev = blk(*link);
        link = &prev->next_free;
    }
    b->free = 1;
    b->next_free = *link;
    *link = off;
    if (b->next_free != 0 && off + b->size == b->next_free) {
        struct heap_blk *n = blk(b->next_free);
        b->size += n->size;
        b->next_free = n->next_free;
    }
    if (prev != NULL && (uint64_t)((char *)prev - (char *)dcxemu_fab) + prev->size == off) {
        prev->size += b->size;
        prev->next_free = b->next_free;
    }
}

/* After a member died holding the fabric lock: rebuild the free list from the block headers.
 * Every update above keeps the headers walkable (a split writes the new header before it
 * shrinks the block; freeing is one store), so the walk is always valid. */
static void heap_rebuild(void)
{
    uint64_t off = dcxemu_fab->heap_off, end = off + dcxemu_fab->heap_size;
    uint64_t *link = &dcxemu_fab->heap_free;
    struct heap_blk *prev_free = NULL;
    while (off < end) {
        struct heap_blk *b = blk(off);
        if (b->magic != HEAP_MAGIC || b->size < HEAP_HDR || b->size > end - off) {
            break;   /* cannot happen with the ordering above; stop rather than guess */
        }
        if (b->free) {
            if (prev_free != NULL && (uint64_t)((char *)prev_free - (char *)dcxemu_fab) +
                                     prev_free->size == off) {
                prev_free->size += b->size;
            } else {
                b->next_free = 0;
                *link = off;
                link = &b->next_free;
                prev_free = b;
            }
        }
        off += b->size;
    }
    *link = 0;
}

/* Fabric lock held: free every heap block a (dead) member still owns. */
static void heap_free_owned(uint64_t token)
{
    uint64_t off = dcxemu_fab->heap_off, end = off + dcxemu_fab->heap_size;
    while (off < end) {
        struct heap_blk *b = blk(off);
        uint64_t next;
        if (b->magic != HEAP_MAGIC || b->size < HEAP_HDR || b->size > end - off) {
            break;
        }
        next = off + b->size;
        if (!b->free && b->owner_token == token) {
            dcxemu_heap_free(off + HEAP_HDR);
        }
        off = next;
    }
}

/* ---------------------------------------------------------------- liveness ---- */

/* Start time of a process (field 22 of /proc/<pid>/stat), recorded in the member slot for
 * diagnostics; liveness itself is decided by the slot's record lock. */
static uint64_t proc_starttime(pid_t pid)
{
    char path[64], buf[1024];
    ssize_t n;
    int fd;
    char *p;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    p = strrchr(buf, ')');   /* the command name may contain spaces */
    for (int field = 2; field < 22 && p != NULL; field++) {
        p = strchr(p + 1, ' ');
    }
    return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

/* Liveness: every member holds a POSIX record lock on byte <slot> of the fabric file for as
 * long as it lives; the kernel drops it when the process dies, and a process that later gets the
 * same PID does not hold it.  So "lock held by the recorded pid" identifies the very process
 * (start times alone are only 10 ms ticks).  Checked under the fabric lock, the same lock the
 * reaper takes, together with the slot token. */
static int fab_fd = -1;

static int slot_locked_by(int fd, int m, pid_t pid)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = m;
    fl.l_len = 1;
    if (fcntl(fd, F_GETLK, &fl) != 0) {
        return 0;
    }
    return fl.l_type != F_UNLCK && fl.l_pid == pid;
}

int dcxemu_member_alive(int m, uint64_t token)
{
    struct dcxemu_shm_member *mb;
    if (m < 0 || m >= DCXEMU_MAX_MEMBERS) {
        return 0;
    }
    mb = &dcxemu_fab->members[m];
    if (!mb->in_use || mb->token != token) {
        return 0;
    }
    if (m == dcxemu_me) {
        return 1;
    }
    return slot_locked_by(fab_fd, m, mb->pid);
}

int dcxemu_owner_is_me(uint16_t owner, uint64_t token)
{
    return owner == dcxemu_me && token == dcxemu_my_token;
}

/* Under the fabric lock. */
void dcxemu_reap_dead_members(void)
{
    uint32_t hwm = dcxemu_fab->member_hwm < DCXEMU_MAX_MEMBERS ? dcxemu_fab->member_hwm :
                                                                DCXEMU_MAX_MEMBERS;
    for (int m = 0; m < (int)hwm; m++) {
        struct dcxemu_shm_member *mb = &dcxemu_fab->members[m];
        if (!mb->in_use || m == dcxemu_me || dcxemu_member_alive(m, mb->token)) {
            continue;
        }
        dcxemu_free_member_objects(m);
        heap_free_owned(mb->token);
        mb->in_use = 0;
        mb->token = 0;
        mb->pid = 0;
    }
}

/* ---------------------------------------------------------------- doorbells ---- */

void dcxemu_ring(int member)
{
    uint32_t *db;
    if (member < 0 || member >= DCXEMU_MAX_MEMBERS) {
        return;
    }
    db = &dcxemu_fab->members[member].doorbell;
    __atomic_fetch_add(db, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, db, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void dcxemu_engine_kick(void) { dcxemu_ring(dcxemu_me); }

static void *engine_main(void *arg)
{
    uint32_t *db = &dcxemu_fab->members[dcxemu_me].doorbell;
    uint64_t next_reap = 0;
    (void)arg;
    while (!engine_stop) {
        uint32_t seen = __atomic_load_n(db, __ATOMIC_SEQ_CST);
        uint64_t now = dcxemu_now_ns(), next = now + 100000000ull;
        struct timespec to;

        dcxemu_deliver_events();
        pthread_mutex_lock(&dcxemu_reg_lock);
        for (uint32_t k = 0; k < dcxemu_qp_set.n; k++) {
            struct dcxemu_qp *qp = dcxemu_local_qps[dcxemu_qp_set.item[k]];
            uint64_t d;
            if (qp == NULL) {
                continue;
            }
            d = atomic_load(&qp->deadline_ns);
            if (d == 0) {
                continue;
            }
            if (d <= now) {
                dcxemu_qp_progress(qp);
                d = atomic_load(&qp->deadline_ns);
                now = dcxemu_now_ns();
            }
            if (d != 0 && d < next) {
                next = d;
            }
        }
        pthread_mutex_unlock(&dcxemu_reg_lock);
        if (now >= next_reap) {
            /* one member reaps per interval: with hundreds of members, each checking every
             * slot would cost members^2 liveness checks per interval */
            if (now >= atomic_load(&dcxemu_fab->next_reap_ns) && dcxemu_lock() == 0) {
                if (now >= atomic_load(&dcxemu_fab->next_reap_ns)) {
                    dcxemu_reap_dead_members();
                    atomic_store(&dcxemu_fab->next_reap_ns, now + 200000000ull);
                }
                dcxemu_unlock();
            }
            next_reap = now + 200000000ull;
        }
        now = dcxemu_now_ns();
        if (next <= now) {
            continue;
        }
        to.tv_sec = (time_t)((next - now) / 1000000000ull);
        to.tv_nsec = (long)((next - now) % 1000000000ull);
        syscall(SYS_futex, db, FUTEX_WAIT, seen, &to, NULL, 0);
    }
    return NULL;
}

/* ---------------------------------------------------------------- attach ---- */

/* Whether another process is attached: every member holds a record lock on its slot's byte for
 * its lifetime, and a process is never told about its own locks.  Asked under flock, so nobody is
 * half-way through attaching (a member takes its slot lock before it releases the flock). */
static int others_attached(int fd)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = DCXEMU_MAX_MEMBERS;
    if (fcntl(fd, F_GETLK, &fl) != 0) {
        return 1;   /* unknown: assume in use, never remove a live fabric */
    }
    return fl.l_type != F_UNLCK;
}

/* Whether fd is still the file linked at /dev/shm<name> (glibc keeps POSIX shared memory
 * there).  A fabric is unlinked only under its flock, so a process that waited for the flock of
 * a file removed meanwhile sees that here and opens the name again. */
static int fd_is_linked(int fd, const char *name)
{
    char path[sizeof(dcxemu_cfg.fabric) + 16];
    struct stat a, b;
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* 0 if fd is a fabric file we may use (or an empty / unfinished one); EACCES if it is owned by
 * another user, has another mode than 0600 or is not a regular file; EPROTO if it holds something
 * other than a fabric of this layout.  why: the reason, for a message ("fabric X <why>"). */
static int fabric_file_check(int fd, const struct stat *st, char *why, size_t wlen)
{
    const struct dcxemu_shm *h;
    int err = 0;
    if (!S_ISREG(st->st_mode) || st->st_uid != getuid() || (st->st_mode & 077) != 0) {
        snprintf(why, wlen, "is owned by uid %u with mode 0%03o (needs uid %u and mode 0600)",
                 (unsigned)st->st_uid, (unsigned)(st->st_mode & 0777), (unsigned)getuid());
        return EACCES;
    }
    if ((size_t)st->st_size < 2 * sizeof(uint64_t)) {
        return 0;   /* created, never initialised */
    }
    /* the fields read below are in the first page; past EOF within it reads as zero */
    h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        err = errno;
        snprintf(why, wlen, "cannot be mapped (%s)", strerror(err));
        return err;
    }
    if (h->magic != 0 &&
        (h->magic != DCXEMU_MAGIC || (size_t)st->st_size < sizeof(*h) ||
         h->layout_version != DCXEMU_LAYOUT_VERSION || h->struct_size != sizeof(*h))) {
        snprintf(why, wlen, "has magic 0x%llx layout %u, this library needs magic 0x%llx layout %u",
                 (unsigned long long)h->magic,
                 (size_t)st->st_size >= sizeof(*h) ? h->layout_version : 0,
                 (unsigned long long)DCXEMU_MAGIC, DCXEMU_LAYOUT_VERSION);
        err = EPROTO;
    }
    munmap((void *)h, 4096);
    return err;
}

/* The test suite takes this lock from outside the library to prove recovery. */
_Static_assert(offsetof(struct dcxemu_shm, lock) == 32, "fabric lock offset is part of the layout");

/* The file was just truncated to zero, so every table is zero-filled and costs no memory until
 * used: CQ/SRQ locks and QP generations are set up when a slot is first taken. */
static void fabric_init(struct dcxemu_shm *f, size_t total)
{
    f->layout_version = DCXEMU_LAYOUT_VERSION;
    f->uid = (uint32_t)getuid();
    f->struct_size = sizeof(*f);
    f->total_size = total;
    dcxemu_shm_mutex_init(&f->lock);
    f->max_members = dcxemu_cfg.max_members;
    f->next_pd_id = 1;
    f->next_token = 1;
    f->heap_off = (sizeof(*f) + 4095) & ~4095ull;
    f->heap_size = total - f->heap_off;
    __atomic_store_n(&f->magic, DCXEMU_MAGIC, __ATOMIC_RELEASE);
}

#define FABRIC_SQUATTED (-1)   /* attach_name: the default name is unusable, try the next one */

/* Attach to the fabric named dcxemu_cfg.fabric.  For a default name, a file we may not use gives
 * FABRIC_SQUATTED and the reason in why; for an explicit name it is refused with an errno. */
static int attach_name(int is_explicit, char *why, size_t wlen)
{
    const char *name = dcxemu_cfg.fabric;
    size_t hdr_size = (sizeof(struct dcxemu_shm) + 4095) & ~(size_t)4095;
    size_t total = hdr_size + (size_t)dcxemu_cfg.heap_mb * 1024 * 1024;
    struct stat st;
    struct dcxemu_shm *f;
    pthread_mutexattr_t ra;
    int fd, err = 0, init = 0, tries = 0;
    uint32_t max_members;

    for (;;) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) {
            err = errno;
            if (!is_explicit && (err == EACCES || err == ELOOP || err == EISDIR)) {
                /* another user's 0600 file, a symbolic link, a directory */
                snprintf(why, wlen, "cannot be opened (%s)", strerror(err));
                return FABRIC_SQUATTED;
            }
            fprintf(stderr, "dcxemu: cannot open fabric %s: %s\n", name, strerror(err));
            return err;
        }
        if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
            err = errno;
            goto out_close;
        }
        if (fd_is_linked(fd, name)) {
            break;
        }
        /* the last member removed this file while we waited for its flock */
        close(fd);
        if (++tries == 1000) {
            fprintf(stderr, "dcxemu: fabric %s keeps being removed while attaching\n", name);
            return EAGAIN;
        }
    }
    err = fabric_file_check(fd, &st, why, wlen);
    if (err != 0) {
        if (!is_explicit && (err == EACCES || err == EPROTO)) {
            err = FABRIC_SQUATTED;
        } else if (err == EACCES) {
            fprintf(stderr, "dcxemu: fabric %s %s; refusing it\n", name, why);
        } else {
            fprintf(stderr, "dcxemu: fabric %s %s; use another DCXEMU_FABRIC or remove "
                    "/dev/shm%s\n", name, why, name);
        }
        goto out_close;
    }
    if ((size_t)st.st_size >= sizeof(struct dcxemu_shm)) {
        struct dcxemu_shm *h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            err = errno;
            goto out_close;
        }
        if (h->magic == 0) {
            init = 1;   /* a creator died before finishing: nobody can be using it */
        } else if (!others_attached(fd)) {
            init = 1;   /* stale fabric: re-initialise with this process's settings */
        } else {
            total = h->total_size;
        }
        munmap(h, 4096);
    } else {
        init = 1;
    }
    if (init) {
        if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)total) != 0) {
            err = errno;
            goto out_close;
        }
    }
    f = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED) {
        err = errno;
        goto out_close;
    }
    if (init) {
        fabric_init(f, total);
    }
    dcxemu_fab = f;
    map_size = total;
    if (init) {
        heap_init();
    }
    fab_fd = fd;
    if ((err = dcxemu_lock()) != 0) {
        goto out_unmap;
    }
    dcxemu_reap_dead_members();
    if (f->num_devices < (uint32_t)dcxemu_cfg.num_devices) {
        f->num_devices = (uint32_t)dcxemu_cfg.num_devices;
    }
    max_members = f->max_members < DCXEMU_MAX_MEMBERS ? f->max_members : DCXEMU_MAX_MEMBERS;
    for (uint32_t m = 0; m < max_members; m++) {
        struct dcxemu_shm_member *mb = &f->members[m];
        struct flock fl;
        memset(&fl, 0, sizeof(fl));
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = m;
        fl.l_len = 1;
        if (!mb->in_use && fcntl(fd, F_SETLK, &fl) == 0) {
            dcxemu_hwm_bump(&f->member_hwm, m);
            mb->in_use = 1;
            mb->pid = getpid();
            mb->starttime = proc_starttime(getpid());
            mb->token = f->next_token++;
            mb->doorbell = 0;
            memset(f->member_cnt[m], 0, sizeof(f->member_cnt[m]));
            dcxemu_me = (int)m;
            dcxemu_my_token = mb->token;
            break;
        }
    }
    dcxemu_unlock();
    if (dcxemu_me < 0) {
        fprintf(stderr, "dcxemu: fabric %s has no free member slot (%u; DCXEMU_MAX_MEMBERS when "
                "it was created)\n", name, max_members);
        err = EAGAIN;
        goto out_unmap;
    }
    /* keep fd open: closing any descriptor of the file would drop our liveness lock */
    flock(fd, LOCK_UN);

    pthread_mutexattr_init(&ra);
    pthread_mutexattr_settype(&ra, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&dcxemu_reg_lock, &ra);
    pthread_mutexattr_destroy(&ra);
    pthread_atfork(NULL, NULL, on_fork_child);
    if ((err = pthread_create(&engine_thread, NULL, engine_main, NULL)) != 0) {
        return err;
    }
    return 0;

out_unmap:
    munmap(f, total);
    dcxemu_fab = NULL;
    fab_fd = -1;
out_close:
    close(fd);
    return err;
}

/* Yama ptrace_scope: -1 without Yama (or unreadable), else 0..3; DCXEMU_YAMA_SCOPE pretends one
 * (test-only). */
static int yama_scope(void)
{
    char buf[16];
    ssize_t n;
    int fd;
    if (dcxemu_cfg.yama_scope >= 0) {
        return dcxemu_cfg.yama_scope;
    }
    fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    buf[n] = '\0';
    return (int)strtol(buf, NULL, 10);
}

static pthread_mutex_t ptracer_lock = PTHREAD_MUTEX_INITIALIZER;
static int ptracer_done, ptracer_scope;
static long ptracer_declared;

/* Peers reach a process's memory with process_vm_readv/writev, which the kernel allows like a
 * ptrace attach.  Only the memory of a DCT owner is reached by other processes (their DCIs write,
 * read and atomically update its registrations and scatter SENDs into its receive buffers; a
 * process's own buffers are only touched by itself), so a process asks for nothing until it
 * creates its first DCT, and then only under Yama ptrace_scope 1, where a process must name who
 * may attach to it (PR_SET_PTRACER): DCXEMU_PTRACER (default any process of the user; or one PID
 * and its descendants; or none).  Scope 0 (or no Yama) needs no declaration; under 2 and 3 none
 * helps: peers without CAP_SYS_PTRACE then fail with remote access errors (said once). */
void dcxemu_ptracer_allow(void)
{
    int scope;
    long tracer = 0;
    pthread_mutex_lock(&ptracer_lock);
    if (ptracer_done) {
        pthread_mutex_unlock(&ptracer_lock);
        return;
    }
    scope = yama_scope();
    if (scope == 1 && dcxemu_cfg.ptracer != 0) {
        tracer = dcxemu_cfg.ptracer;
        if (prctl(PR_SET_PTRACER, tracer < 0 ? PR_SET_PTRACER_ANY : (unsigned long)tracer, 0, 0,
                  0) != 0 && dcxemu_cfg.yama_scope < 0) {
            fprintf(stderr, "dcxemu: prctl(PR_SET_PTRACER) failed: %s; other processes may not "
                    "reach this process's memory\n", strerror(errno));
        }
    } else if (scope >= 2) {
        fprintf(stderr, "dcxemu: Yama ptrace_scope is %d: other processes cannot reach this "
                "process's memory without CAP_SYS_PTRACE; their operations on its DCTs will fail "
                "with remote access errors\n", scope);
    }
    ptracer_scope = scope;
    ptracer_declared = tracer;
    ptracer_done = 1;
    pthread_mutex_unlock(&ptracer_lock);
}

DCXEMU_API int dcxemu_ptracer_read(int *scope, long *ptracer)
{
    int done;
    if (scope == NULL || ptracer == NULL) {
        return EINVAL;
    }
    pthread_mutex_lock(&ptracer_lock);
    done = ptracer_done;
    *scope = ptracer_scope;
    *ptracer = ptracer_declared;
    pthread_mutex_unlock(&ptracer_lock);
    return done ? 0 : ENOENT;
}

/* An explicit DCXEMU_FABRIC is used or refused as it is.  The default name is predictable, so
 * another local user can create it first: then (or when it holds something else) fall back to
 * the next default name, the same sequence in every process of the user, with one line saying
 * why. */
static int do_attach(void)
{
    char why[192], prev[sizeof(dcxemu_cfg.fabric)];
    for (int cand = 0; cand < FABRIC_NAME_TRIES; cand++) {
        int err;
        if (cand > 0) {
            memcpy(prev, dcxemu_cfg.fabric, sizeof(prev));
            fabric_candidate(cand, dcxemu_cfg.fabric, sizeof(dcxemu_cfg.fabric));
            fprintf(stderr, "dcxemu: default fabric %s %s (another user may have taken the "
                    "name); using %s instead (DCXEMU_FABRIC sets a name)\n", prev + 1, why,
                    dcxemu_cfg.fabric + 1);
        }
        err = attach_name(dcxemu_cfg.fabric_explicit, why, sizeof(why));
        if (err != FABRIC_SQUATTED) {
            return err;
        }
    }
    fprintf(stderr, "dcxemu: default fabric %s %s, and so does every other default name; set "
            "DCXEMU_FABRIC to a name of your own\n", dcxemu_cfg.fabric + 1, why);
    return EACCES;
}

int dcxemu_attach(void)
{
    int err;
    if (forked) {
        return EPERM;
    }
    pthread_mutex_lock(&attach_lock);
    if (!attached) {
        read_settings();
        attach_err = do_attach();
        attached = 1;
    }
    err = attach_err;
    pthread_mutex_unlock(&attach_lock);
    return err;
}

int dcxemu_usable(void)
{
    if (forked) {
        return EPERM;
    }
    if (!attached || attach_err) {
        return attached ? attach_err : ENODEV;
    }
    return 0;
}

DCXEMU_API const char *dcxemu_fabric_name(void)
{
    static char name[sizeof(dcxemu_cfg.fabric)];
    char why[192];
    pthread_mutex_lock(&attach_lock);
    if (attached && attach_err == 0) {
        memcpy(name, dcxemu_cfg.fabric, sizeof(name));
        goto out;
    }
    /* the name attaching would choose: the first candidate that is absent or usable */
    for (int cand = 0; cand < FABRIC_NAME_TRIES; cand++) {
        struct stat st;
        int fd, ok;
        if (fabric_candidate(cand, name, sizeof(name)) || cand == FABRIC_NAME_TRIES - 1) {
            break;
        }
        fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT) {
                break;
            }
            continue;
        }
        ok = fstat(fd, &st) == 0 && fabric_file_check(fd, &st, why, sizeof(why)) == 0;
        close(fd);
        if (ok) {
            break;
        }
    }
out:
    pthread_mutex_unlock(&attach_lock);
    return name + 1;
}

DCXEMU_API int dcxemu_fabric_remove(const char *fabric)
{
    char path[sizeof(dcxemu_cfg.fabric)], why[192];
    struct stat st;
    int fd, err;
    if (fabric == NULL) {
        fabric = dcxemu_fabric_name();
    }
    if (*fabric == '\0' || strchr(fabric, '/') != NULL || strlen(fabric) > sizeof(path) - 2) {
        return EINVAL;
    }
    snprintf(path, sizeof(path), "/%s", fabric);
    pthread_mutex_lock(&attach_lock);
    if (attached && attach_err == 0 && strcmp(path, dcxemu_cfg.fabric) == 0) {
        /* we are a member (and closing a second descriptor would drop our liveness lock) */
        err = EBUSY;
        goto out;
    }
    fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        err = errno;
        goto out;
    }
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
        err = errno;
    } else if (!fd_is_linked(fd, path)) {
        err = ENOENT;   /* removed while we waited */
    } else if ((err = fabric_file_check(fd, &st, why, sizeof(why))) != 0) {
        /* another user's or not a fabric: not ours to remove */
    } else if (others_attached(fd)) {
        err = EBUSY;
    } else {
        err = shm_unlink(path) == 0 ? 0 : errno;
    }
    close(fd);
out:
    pthread_mutex_unlock(&attach_lock);
    return err;
}

/* Leave the fabric cleanly at exit so peers need not wait for the reaper, and remove the file
 * when we were the last live member (under the flock, so nobody is attaching meanwhile). */
__attribute__((destructor)) static void dcxemu_fini(void)
{
    int flocked;
    if (!attached || attach_err || forked || dcxemu_fab == NULL) {
        return;
    }
    engine_stop = 1;
    dcxemu_engine_kick();
    pthread_join(engine_thread, NULL);
    flocked = flock(fab_fd, LOCK_EX) == 0;
    if (dcxemu_lock() == 0) {
        struct dcxemu_shm_member *mb = &dcxemu_fab->members[dcxemu_me];
        dcxemu_free_member_objects(dcxemu_me);
        heap_free_owned(dcxemu_my_token);
        mb->in_use = 0;
        mb->token = 0;
        dcxemu_unlock();
    }
    if (flocked) {
        /* Drop our liveness lock now, not at exit: a member leaving at the same time that takes
         * the flock after us must not see us and leave the file behind. */
        struct flock fl;
        memset(&fl, 0, sizeof(fl));
        fl.l_type = F_UNLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = dcxemu_me;
        fl.l_len = 1;
        fcntl(fab_fd, F_SETLK, &fl);
        if (!dcxemu_cfg.keep_fabric && !others_attached(fab_fd) &&
            fd_is_linked(fab_fd, dcxemu_cfg.fabric)) {
            shm_unlink(dcxemu_cfg.fabric);
        }
        flock(fab_fd, LOCK_UN);
    }
}
