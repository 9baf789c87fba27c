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

static void read_settings(void)
{
    const char *ex = getenv("DCXEMU_EXEC");
    const char *fs = getenv("DCXEMU_FAULTS");
    const char *f = getenv("DCXEMU_FABRIC");
    const char *ts = getenv("DCXEMU_TIME_SCALE");
    const char *ac = getenv("DCXEMU_ATOMIC_CAP");
    if (f != NULL && *f != '\0' && strlen(f) < sizeof(dcxemu_cfg.fabric) - 2 &&
        strchr(f, '/') == NULL) {
        snprintf(dcxemu_cfg.fabric, sizeof(dcxemu_cfg.fabric), "/%s", f);
    } else {
        snprintf(dcxemu_cfg.fabric, sizeof(dcxemu_cfg.fabric), "/dcxemu-%u", (unsigned)getuid());
    }
    dcxemu_cfg.num_devices = (int)env_long("DCXEMU_NUM_DEVICES", 1, 1, DCXEMU_MAX_DEVICES);
    dcxemu_cfg.max_wqe = (uint32_t)env_long("DCXEMU_MAX_WQE_SIZE", 512, 256, 4096) & ~63u;
    dcxemu_cfg.heap_mb = (uint64_t)env_long("DCXEMU_HEAP_MB", 1024, 16, 65536);
    dcxemu_cfg.strict_umr = (int)env_long("DCXEMU_STRICT_UMR", 1, 0, 1);
    dcxemu_cfg.no_atomics = 0;
    if (ac != NULL && strcmp(ac, "none") == 0) {
        dcxemu_cfg.no_atomics = 1;
    } else if (ac != NULL && *ac != '\0' && strcmp(ac, "hca") != 0) {
        fprintf(stderr, "dcxemu: ignoring DCXEMU_ATOMIC_CAP=%s (hca or none)\n", ac);
    }
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
    for (int m = 0; m < DCXEMU_MAX_MEMBERS; m++) {
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
        for (unsigned i = 0; i < DCXEMU_MAX_QPS; i++) {
            struct dcxemu_qp *qp = dcxemu_local_qps[i];
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
            if (dcxemu_lock() == 0) {
                dcxemu_reap_dead_members();
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

static int all_members_dead(int fd, struct dcxemu_shm *f)
{
    for (int m = 0; m < DCXEMU_MAX_MEMBERS; m++) {
        struct dcxemu_shm_member *mb = &f->members[m];
        if (mb->in_use && mb->pid > 0 && slot_locked_by(fd, m, mb->pid)) {
            return 0;
        }
    }
    return 1;
}

/* The test suite takes this lock from outside the library to prove recovery. */
_Static_assert(offsetof(struct dcxemu_shm, lock) == 32, "fabric lock offset is part of the layout");

static void fabric_init(struct dcxemu_shm *f, size_t total)
{
    memset(f, 0, sizeof(*f));
    f->layout_version = DCXEMU_LAYOUT_VERSION;
    f->uid = (uint32_t)getuid();
    f->struct_size = sizeof(*f);
    f->total_size = total;
    dcxemu_shm_mutex_init(&f->lock);
    for (unsigned i = 0; i < DCXEMU_MAX_CQS; i++) {
        dcxemu_shm_mutex_init(&f->cqs[i].lock);
    }
    for (unsigned i = 0; i < DCXEMU_MAX_SRQS; i++) {
        dcxemu_shm_mutex_init(&f->srqs[i].lock);
    }
    for (unsigned i = 0; i < DCXEMU_MAX_QPS; i++) {
        f->qps[i].gen = (uint32_t)(i * 7) % 4095;   /* spread numbers; gen 0 is skipped */
    }
    f->next_pd_id = 1;
    f->next_token = 1;
    f->heap_off = (sizeof(*f) + 4095) & ~4095ull;
    f->heap_size = total - f->heap_off;
    __atomic_store_n(&f->magic, DCXEMU_MAGIC, __ATOMIC_RELEASE);
}

static int do_attach(void)
{
    size_t hdr_size = (sizeof(struct dcxemu_shm) + 4095) & ~(size_t)4095;
    size_t total = hdr_size + (size_t)dcxemu_cfg.heap_mb * 1024 * 1024;
    struct stat st;
    struct dcxemu_shm *f;
    pthread_mutexattr_t ra;
    int fd, err = 0, init = 0;

    fd = shm_open(dcxemu_cfg.fabric, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        err = errno;
        fprintf(stderr, "dcxemu: cannot open fabric %s: %s\n", dcxemu_cfg.fabric, strerror(err));
        return err;
    }
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
        err = errno;
        goto out_close;
    }
    if (st.st_uid != getuid() || (st.st_mode & 077) != 0) {
        fprintf(stderr, "dcxemu: fabric %s is owned by uid %u or is not mode 0600; refusing it\n",
                dcxemu_cfg.fabric, (unsigned)st.st_uid);
        err = EACCES;
        goto out_close;
    }
    if ((size_t)st.st_size >= sizeof(uint64_t) * 2) {
        /* Check the header before trusting any size from it. */
        struct dcxemu_shm *h = mmap(NULL, sizeof(*h) <= (size_t)st.st_size ? sizeof(*h) : 4096,
                                    PROT_READ, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            err = errno;
            goto out_close;
        }
        if (h->magic == 0) {
            init = 1;   /* a creator died before finishing: nobody can be using it */
        } else if (h->magic != DCXEMU_MAGIC || (size_t)st.st_size < sizeof(*h) ||
                   h->layout_version != DCXEMU_LAYOUT_VERSION ||
                   h->struct_size != sizeof(*h)) {
            fprintf(stderr, "dcxemu: fabric %s has magic 0x%llx layout %u, this library needs "
                    "magic 0x%llx layout %u; use another DCXEMU_FABRIC or remove /dev/shm%s\n",
                    dcxemu_cfg.fabric, (unsigned long long)h->magic,
                    (size_t)st.st_size >= sizeof(*h) ? h->layout_version : 0,
                    (unsigned long long)DCXEMU_MAGIC, DCXEMU_LAYOUT_VERSION, dcxemu_cfg.fabric);
            err = EPROTO;
        } else if (all_members_dead(fd, h)) {
            init = 1;   /* stale fabric: re-initialise with this process's settings */
        } else {
            total = h->total_size;
        }
        munmap(h, sizeof(*h) <= (size_t)st.st_size ? sizeof(*h) : 4096);
        if (err) {
            goto out_close;
        }
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
    for (int m = 0; m < DCXEMU_MAX_MEMBERS; m++) {
        struct dcxemu_shm_member *mb = &f->members[m];
        struct flock fl;
        memset(&fl, 0, sizeof(fl));
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = m;
        fl.l_len = 1;
        if (!mb->in_use && fcntl(fd, F_SETLK, &fl) == 0) {
            mb->in_use = 1;
            mb->pid = getpid();
            mb->starttime = proc_starttime(getpid());
            mb->token = f->next_token++;
            mb->doorbell = 0;
            memset(f->member_cnt[m], 0, sizeof(f->member_cnt[m]));
            dcxemu_me = m;
            dcxemu_my_token = mb->token;
            break;
        }
    }
    dcxemu_unlock();
    if (dcxemu_me < 0) {
        fprintf(stderr, "dcxemu: fabric %s has no free member slot (%d)\n", dcxemu_cfg.fabric,
                DCXEMU_MAX_MEMBERS);
        err = EAGAIN;
        goto out_unmap;
    }
    /* keep fd open: closing any descriptor of the file would drop our liveness lock */
    flock(fd, LOCK_UN);

    pthread_mutexattr_init(&ra);
    pthread_mutexattr_settype(&ra, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&dcxemu_reg_lock, &ra);
    pthread_mutexattr_destroy(&ra);
    /* Let peers write into us with process_vm_writev where Yama restricts ptrace. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
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

/* Leave the fabric cleanly at exit so peers need not wait for the reaper. */
__attribute__((destructor)) static void dcxemu_fini(void)
{
    if (!attached || attach_err || forked || dcxemu_fab == NULL) {
        return;
    }
    engine_stop = 1;
    dcxemu_engine_kick();
    pthread_join(engine_thread, NULL);
    if (dcxemu_lock() == 0) {
        struct dcxemu_shm_member *mb = &dcxemu_fab->members[dcxemu_me];
        dcxemu_free_member_objects(dcxemu_me);
        heap_free_owned(dcxemu_my_token);
        mb->in_use = 0;
        mb->token = 0;
        dcxemu_unlock();
    }
}

/* ---------------------------------------------------------------- memory access ---- */

/* Place bytes in ascending order, as a NIC does: large memcpy implementations interleave pages,
 * and a reader polling the last byte must see everything before it.  process_vm_* already copy
 * page by page in order. */
static void ascending_copy(void *dst, const void *src, size_t len)
{
    const size_t chunk = 4096;
    size_t off = 0;
    if (len == 0) {
        return;
    }
    while (len - off > chunk) {
        memmove((char *)dst + off, (const char *)src + off, chunk);
        off += chunk;
    }
    memmove((char *)dst + off, (const char *)src + off, len - off - 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ((volatile char *)dst)[len - 1] = ((const char *)src)[len - 1];
}

/* Gathering small pieces through a staging buffer pays off above this many pieces of at most
 * this average size. */
#define VM_GATHER_MIN_PIECES 4
#define VM_GATHER_MAX_AVG    512
#define VM_STAGING_SIZE      65536

/* Move the pieces to/from the contiguous remote span rv through a per-thread staging buffer:
 * one system call per VM_STAGING_SIZE bytes. */
static int vm_copy_staged(pid_t pid, int to_remote, const struct iovec *piece, int k,
                          const struct iovec *rv)
{
    static __thread char staging[VM_STAGING_SIZE];
    char *remote = rv->iov_base;
    size_t poff = 0;
    int pi = 0;

    while (pi < k) {
        /* the next chunk: as many piece bytes as fit */
        size_t fill = 0;
        int pj = pi;
        size_t pjoff = poff;
        while (pj < k && fill < sizeof(staging)) {
            size_t take = piece[pj].iov_len - pjoff;
            if (take > sizeof(staging) - fill) {
                take = sizeof(staging) - fill;
            }
            if (to_remote) {
                memcpy(staging + fill, (char *)piece[pj].iov_base + pjoff, take);
            }
            fill += take;
            pjoff += take;
            if (pjoff == piece[pj].iov_len) {
                pj++;
                pjoff = 0;
            }
        }
        struct iovec lv = { staging, fill }, r = { remote, fill };
        size_t moved = 0;
        while (moved < fill) {
            ssize_t n = to_remote ? process_vm_writev(pid, &lv, 1, &r, 1, 0)
                                  : process_vm_readv(pid, &lv, 1, &r, 1, 0);
            if (n <= 0) {
                return n < 0 ? errno : EFAULT;
            }
            moved += (size_t)n;
            lv.iov_base = (char *)lv.iov_base + n;
            lv.iov_len -= (size_t)n;
            r.iov_base = (char *)r.iov_base + n;
            r.iov_len -= (size_t)n;
        }
        if (!to_remote) {
            /* scatter the chunk back into the pieces, in ascending order */
            size_t off = 0;
            while (off < fill) {
                size_t take = piece[pi].iov_len - poff;
                if (take > fill - off) {
                    take = fill - off;
                }
                memcpy((char *)piece[pi].iov_base + poff, staging + off, take);
                off += take;
                poff += take;
                if (poff == piece[pi].iov_len) {
                    pi++;
                    poff = 0;
                }
            }
        } else {
            pi = pj;
            poff = pjoff;
        }
        remote += fill;
    }
    return 0;
}

/* Copy between local iovecs and remote iovecs of member m (fabric lock held, liveness checked
 * by the caller under that same lock).  Bytes move in ascending order, at most IOV_MAX pieces per
 * system call.  Returns 0 or errno (EFAULT for unmapped memory, ESRCH for a vanished process). */
int dcxemu_vm_copy(int member, int to_remote, const struct iovec *local, int nl,
                   const struct iovec *remote, int nr)
{
    struct iovec piece[IOV_MAX];
    int li = 0;
    size_t loff = 0;
    pid_t pid = dcxemu_fab->members[member].pid;
    for (int ri = 0; ri < nr; ri++) {
        size_t rdone = 0;
        while (rdone < remote[ri].iov_len) {
            struct iovec rv;
            size_t want = 0;
            int k = 0;
            while (k < IOV_MAX && li < nl && rdone + want < remote[ri].iov_len) {
                size_t avail = local[li].iov_len - loff;
                size_t take = remote[ri].iov_len - rdone - want;
                if (take > avail) {
                    take = avail;
                }
                if (take > 0) {
                    piece[k].iov_base = (char *)local[li].iov_base + loff;
                    piece[k].iov_len = take;
                    k++;
                    want += take;
                }
                loff += take;
                if (loff == local[li].iov_len) {
                    li++;
                    loff = 0;
                }
            }
            if (want == 0) {
                return EINVAL;   /* remote longer than local: caller bug */
            }
            rv.iov_base = (char *)remote[ri].iov_base + rdone;
            rv.iov_len = want;
            if (member == dcxemu_me) {
                size_t off = 0;
                for (int j = 0; j < k; j++) {
                    if (to_remote) {
                        ascending_copy((char *)rv.iov_base + off, piece[j].iov_base, piece[j].iov_len);
                    } else {
                        ascending_copy(piece[j].iov_base, (char *)rv.iov_base + off, piece[j].iov_len);
                    }
                    off += piece[j].iov_len;
                }
            } else if (k > VM_GATHER_MIN_PIECES && want / k < VM_GATHER_MAX_AVG) {
                /* Many small pieces (a UMR layout of small blocks): the kernel's cost is per
                 * iovec, so gather them here and move one contiguous span per call, as a NIC
                 * gathers before it sends.  Order and "last byte last" are unchanged. */
                int err = vm_copy_staged(pid, to_remote, piece, k, &rv);
                if (err != 0) {
                    return err;
                }
            } else {
                size_t moved = 0;
                int j = 0;
                while (moved < want) {
                    ssize_t n = to_remote ? process_vm_writev(pid, piece + j, (unsigned long)(k - j), &rv, 1, 0)
                                          : process_vm_readv(pid, piece + j, (unsigned long)(k - j), &rv, 1, 0);
                    if (n <= 0) {
                        return n < 0 ? errno : EFAULT;
                    }
                    moved += (size_t)n;
                    rv.iov_base = (char *)rv.iov_base + n;
                    rv.iov_len -= (size_t)n;
                    /* skip the local pieces already moved */
                    while (n > 0 && j < k) {
                        if ((size_t)n >= piece[j].iov_len) {
                            n -= (ssize_t)piece[j].iov_len;
                            j++;
                        } else {
                            piece[j].iov_base = (char *)piece[j].iov_base + n;
                            piece[j].iov_len -= (size_t)n;
                            n = 0;
                        }
                    }
                }
            }
            rdone += want;
        }
    }
    return 0;
}
