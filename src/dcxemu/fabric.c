/* dcxemu fabric: shared memory, attach and leave, members and liveness, locks,
 * doorbells, and the release of a member's objects.  It is the bottom layer: it
 * calls nothing above it (the engine thread, engine.c, is started and stopped
 * through the two calls it hands to dcxemu_fabric_attach). */
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

/* Where the fabric is mapped: far below the area from which the kernel hands
 * out mmap(NULL, ...) ranges (just under the stack).  The fabric is a mapping
 * of over 1 GiB (mostly never touched); in that area it would enlarge every
 * process's footprint where other programs expect the same free range in
 * every process: Open MPI 5's OpenSHMEM maps its symmetric heap in each PE at
 * the address PE 0's kernel chose and fails when any PE has that range
 * taken.  A hint only: a range that is taken leaves the choice to the kernel,
 * as before. */
#if UINTPTR_MAX > 0xffffffffu
#define FABRIC_MAP_HINT ((void *)0x200000000000ull)
#else
#define FABRIC_MAP_HINT NULL
#endif


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
struct dcxemu_idx_set dcxemu_qp_set  = { 0, qp_items, qp_pos };
struct dcxemu_idx_set dcxemu_cq_set  = { 0, cq_items, cq_pos };
struct dcxemu_idx_set dcxemu_srq_set = { 0, srq_items, srq_pos };

void dcxemu_idx_set_add(struct dcxemu_idx_set *s, uint32_t index)
{
    s->pos[index]   = s->n;
    s->item[s->n++] = index;
}

void dcxemu_idx_set_del(struct dcxemu_idx_set *s, uint32_t index)
{
    uint32_t p = s->pos[index], last = s->item[--s->n];
    s->item[p]   = last;
    s->pos[last] = p;
}

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int attached;
static int attach_err;
static volatile int
        forked; /* set in a child after fork(): the fabric is not ours */
static size_t map_size;
/* engine.c's thread: started once attached, stopped before leaving */
static int (*engine_start)(void);
static void (*engine_stop)(void);


static void on_fork_child(void)
{
    forked = 1;
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
        /* The holder died; its half-done update concerns its own objects, which
         * the dead-member reaper releases.  Everything else stays consistent
         * because updates are small. */
        pthread_mutex_consistent(m);
        r = 0;
    }
    return r;
}

int dcxemu_lock(void)
{
    int r = pthread_mutex_lock(&dcxemu_fab->lock);
    if (r == EOWNERDEAD) {
        /* a member died inside: make the shared heap consistent again; its
         * objects are released by the reaper, which finds it dead */
        pthread_mutex_consistent(&dcxemu_fab->lock);
        dcxemu_heap_rebuild();
        r = 0;
    }
    return r;
}
void dcxemu_unlock(void)
{
    pthread_mutex_unlock(&dcxemu_fab->lock);
}

/* ---------------------------------------------------------------- liveness
 * ---- */

/* Start time of a process (field 22 of /proc/<pid>/stat), recorded in the
 * member slot for diagnostics; liveness itself is decided by the slot's record
 * lock. */
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
    p      = strrchr(buf, ')'); /* the command name may contain spaces */
    for (int field = 2; field < 22 && p != NULL; field++) {
        p = strchr(p + 1, ' ');
    }
    return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

/* Liveness: every member holds a POSIX record lock on byte <slot> of the fabric
 * file for as long as it lives; the kernel drops it when the process dies, and
 * a process that later gets the same PID does not hold it.  So "lock held by
 * the recorded pid" identifies the very process (start times alone are only 10
 * ms ticks).  Checked under the fabric lock, the same lock the reaper takes,
 * together with the slot token. */
static int fab_fd = -1;

static int slot_locked_by(int fd, int m, pid_t pid)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type   = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start  = m;
    fl.l_len    = 1;
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

/* Fabric lock held: release everything a member (dead, or exiting) owned.  Keys
 * and QP numbers become invalid at once; rings return to the heap.  Only slots
 * below each table's high-water mark can be in use, and pages above it stay
 * untouched. */
static void free_member_objects(int m)
{
    for (unsigned i = 0; i < dcxemu_fab->mr_hwm && i < DCXEMU_MAX_MRS; i++) {
        struct dcxemu_shm_mr *s = &dcxemu_fab->mrs[i];
        if (s->in_use && s->owner == m) {
            s->in_use = 0;
            s->tag    = (s->tag + 1) & 0xff;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->mkey_hwm && i < DCXEMU_MAX_MKEYS;
         i++) {
        struct dcxemu_shm_mkey *s = &dcxemu_fab->mkeys[i];
        if (s->in_use && s->owner == m) {
            s->in_use     = 0;
            s->programmed = 0;
            dcxemu_heap_free(s->entries_off);
            s->entries_off = 0;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->qp_hwm && i < DCXEMU_MAX_QPS; i++) {
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        if (s->in_use && s->owner == m) {
            s->in_use    = 0;
            s->dct_ready = 0;
            s->qpn       = 0;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->cq_hwm && i < DCXEMU_MAX_CQS; i++) {
        struct dcxemu_shm_cq *s = &dcxemu_fab->cqs[i];
        if (s->in_use && s->owner == m) {
            dcxemu_heap_free(s->ring_off);
            s->ring_off = 0;
            s->in_use   = 0;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->srq_hwm && i < DCXEMU_MAX_SRQS; i++) {
        struct dcxemu_shm_srq *s = &dcxemu_fab->srqs[i];
        if (s->in_use && s->owner == m) {
            dcxemu_heap_free(s->ring_off);
            s->ring_off = 0;
            s->in_use   = 0;
        }
    }
}

/* Under the fabric lock. */
void dcxemu_reap_dead_members(void)
{
    uint32_t hwm = dcxemu_fab->member_hwm < DCXEMU_MAX_MEMBERS ?
                           dcxemu_fab->member_hwm :
                           DCXEMU_MAX_MEMBERS;
    for (int m = 0; m < (int)hwm; m++) {
        struct dcxemu_shm_member *mb = &dcxemu_fab->members[m];
        if (!mb->in_use || m == dcxemu_me ||
            dcxemu_member_alive(m, mb->token)) {
            continue;
        }
        free_member_objects(m);
        dcxemu_heap_free_owned(mb->token);
        mb->in_use = 0;
        mb->token  = 0;
        mb->pid    = 0;
    }
}

/* ---------------------------------------------------------------- doorbells
 * ---- */

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

void dcxemu_engine_kick(void)
{
    dcxemu_ring(dcxemu_me);
}

/* ---------------------------------------------------------------- attach ---- */

/* Whether another process is attached: every member holds a record lock on its
 * slot's byte for its lifetime, and a process is never told about its own
 * locks.  Asked under flock, so nobody is half-way through attaching (a member
 * takes its slot lock before it releases the flock). */
static int others_attached(int fd)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type   = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start  = 0;
    fl.l_len    = DCXEMU_MAX_MEMBERS;
    if (fcntl(fd, F_GETLK, &fl) != 0) {
        return 1; /* unknown: assume in use, never remove a live fabric */
    }
    return fl.l_type != F_UNLCK;
}

/* Whether fd is still the file linked at /dev/shm<name> (glibc keeps POSIX
 * shared memory there).  A fabric is unlinked only under its flock, so a
 * process that waited for the flock of a file removed meanwhile sees that here
 * and opens the name again. */
static int fd_is_linked(int fd, const char *name)
{
    char path[sizeof(dcxemu_cfg.fabric) + 16];
    struct stat a, b;
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* 0 if fd is a fabric file we may use (or an empty / unfinished one); EACCES if
 * it is owned by another user, has another mode than 0600 or is not a regular
 * file; EPROTO if it holds something other than a fabric of this layout.  why:
 * the reason, for a message ("fabric X <why>"). */
static int
fabric_file_check(int fd, const struct stat *st, char *why, size_t wlen)
{
    const struct dcxemu_shm *h;
    int err = 0;
    if (!S_ISREG(st->st_mode) || st->st_uid != getuid() ||
        (st->st_mode & 077) != 0) {
        snprintf(why, wlen,
                 "is owned by uid %u with mode 0%03o "
                 "(needs uid %u and mode 0600)",
                 (unsigned)st->st_uid, (unsigned)(st->st_mode & 0777),
                 (unsigned)getuid());
        return EACCES;
    }
    if ((size_t)st->st_size < 2 * sizeof(uint64_t)) {
        return 0; /* created, never initialised */
    }
    /* the fields read below are in the first page; past EOF within it reads as
     * zero */
    h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        err = errno;
        snprintf(why, wlen, "cannot be mapped (%s)", strerror(err));
        return err;
    }
    if (h->magic != 0 &&
        (h->magic != DCXEMU_MAGIC || (size_t)st->st_size < sizeof(*h) ||
         h->layout_version != DCXEMU_LAYOUT_VERSION ||
         h->struct_size != sizeof(*h))) {
        snprintf(why, wlen,
                 "has magic 0x%llx layout %u, "
                 "this library needs magic 0x%llx layout %u",
                 (unsigned long long)h->magic,
                 (size_t)st->st_size >= sizeof(*h) ? h->layout_version : 0,
                 (unsigned long long)DCXEMU_MAGIC, DCXEMU_LAYOUT_VERSION);
        err = EPROTO;
    }
    munmap((void *)h, 4096);
    return err;
}

/* The test suite takes this lock from outside the library to prove recovery. */
_Static_assert(offsetof(struct dcxemu_shm, lock) == 32,
               "fabric lock offset is part of the layout");

/* The file was just truncated to zero, so every table is zero-filled and costs
 * no memory until used: CQ/SRQ locks and QP generations are set up when a slot
 * is first taken. */
static void fabric_init(struct dcxemu_shm *f, size_t total)
{
    f->layout_version = DCXEMU_LAYOUT_VERSION;
    f->uid            = (uint32_t)getuid();
    f->struct_size    = sizeof(*f);
    f->total_size     = total;
    dcxemu_shm_mutex_init(&f->lock);
    f->max_members = dcxemu_cfg.max_members;
    f->next_pd_id  = 1;
    f->next_token  = 1;
    f->heap_off    = (sizeof(*f) + 4095) & ~4095ull;
    f->heap_size   = total - f->heap_off;
    __atomic_store_n(&f->magic, DCXEMU_MAGIC, __ATOMIC_RELEASE);
}

#define FABRIC_SQUATTED \
    (-1) /* attach_name: the default name is unusable, try the next one */

/* Open (creating it) the fabric file and take its flock, again while the last
 * member removes the file under us: 0 with *fdp and *st set, FABRIC_SQUATTED
 * (default name only) or an errno. */
static int open_locked(const char *name, int is_explicit, char *why,
                       size_t wlen, int *fdp, struct stat *st)
{
    int fd, err;
    for (int tries = 1;; tries++) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) {
            err = errno;
            if (!is_explicit &&
                (err == EACCES || err == ELOOP || err == EISDIR)) {
                /* another user's 0600 file, a symbolic link, a directory */
                snprintf(why, wlen, "cannot be opened (%s)", strerror(err));
                return FABRIC_SQUATTED;
            }
            fprintf(stderr, "dcxemu: cannot open fabric %s: %s\n", name,
                    strerror(err));
            return err;
        }
        if (flock(fd, LOCK_EX) != 0 || fstat(fd, st) != 0) {
            err = errno;
            close(fd);
            return err;
        }
        if (fd_is_linked(fd, name)) {
            *fdp = fd;
            return 0;
        }
        /* the last member removed this file while we waited for its flock */
        close(fd);
        if (tries == 1000) {
            fprintf(stderr,
                    "dcxemu: fabric %s keeps being removed while attaching\n",
                    name);
            return EAGAIN;
        }
    }
}

/* Whether the file may be used; says why not (FABRIC_SQUATTED: try the next
 * default name). */
static int check_file(int fd, const struct stat *st, const char *name,
                      int is_explicit, char *why, size_t wlen)
{
    int err = fabric_file_check(fd, st, why, wlen);
    if (err == 0) {
        return 0;
    }
    if (!is_explicit && (err == EACCES || err == EPROTO)) {
        return FABRIC_SQUATTED;
    }
    if (err == EACCES) {
        fprintf(stderr, "dcxemu: fabric %s %s; refusing it\n", name, why);
    } else {
        fprintf(stderr,
                "dcxemu: fabric %s %s; "
                "use another DCXEMU_FABRIC or remove /dev/shm%s\n",
                name, why, name);
    }
    return err;
}

/* The size to map: the live fabric's, or *total for a new or stale one, which
 * is (re)sized and must be initialised (*init). */
static int size_file(int fd, const struct stat *st, size_t *total, int *init)
{
    *init = 0;
    if ((size_t)st->st_size >= sizeof(struct dcxemu_shm)) {
        struct dcxemu_shm *h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            return errno;
        }
        if (h->magic == 0) {
            *init = 1; /* a creator died before finishing: nobody can be using
                          it */
        } else if (!others_attached(fd)) {
            *init = 1; /* stale fabric: re-initialise with this process's
                          settings */
        } else {
            *total = h->total_size;
        }
        munmap(h, 4096);
    } else {
        *init = 1;
    }
    if (*init && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)*total) != 0)) {
        return errno;
    }
    return 0;
}

/* Take a free member slot: its liveness lock (a record lock on byte m of the
 * file) is held for the process's lifetime.  dcxemu_me stays -1 when every slot
 * is taken. */
static int take_member_slot(struct dcxemu_shm *f, int fd, uint32_t *max_members)
{
    int err = dcxemu_lock();
    if (err != 0) {
        return err;
    }
    dcxemu_reap_dead_members();
    if (f->num_devices < (uint32_t)dcxemu_cfg.num_devices) {
        f->num_devices = (uint32_t)dcxemu_cfg.num_devices;
    }
    *max_members = f->max_members < DCXEMU_MAX_MEMBERS ? f->max_members :
                                                         DCXEMU_MAX_MEMBERS;
    for (uint32_t m = 0; m < *max_members; m++) {
        struct dcxemu_shm_member *mb = &f->members[m];
        struct flock fl;
        memset(&fl, 0, sizeof(fl));
        fl.l_type   = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start  = m;
        fl.l_len    = 1;
        if (!mb->in_use && fcntl(fd, F_SETLK, &fl) == 0) {
            dcxemu_hwm_bump(&f->member_hwm, m);
            mb->in_use    = 1;
            mb->pid       = getpid();
            mb->starttime = proc_starttime(getpid());
            mb->token     = f->next_token++;
            mb->doorbell  = 0;
            memset(f->member_cnt[m], 0, sizeof(f->member_cnt[m]));
            dcxemu_me       = (int)m;
            dcxemu_my_token = mb->token;
            break;
        }
    }
    dcxemu_unlock();
    return 0;
}

/* Process-local state once a member: the object registry, fork detection, the
 * engine. */
static int start_member(void)
{
    pthread_mutexattr_t ra;
    pthread_mutexattr_init(&ra);
    pthread_mutexattr_settype(&ra, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&dcxemu_reg_lock, &ra);
    pthread_mutexattr_destroy(&ra);
    pthread_atfork(NULL, NULL, on_fork_child);
    return engine_start();
}

/* Attach to the fabric named dcxemu_cfg.fabric.  For a default name, a file we
 * may not use gives FABRIC_SQUATTED and the reason in why; for an explicit name
 * it is refused with an errno. */
static int attach_name(int is_explicit, char *why, size_t wlen)
{
    const char *name = dcxemu_cfg.fabric;
    size_t hdr_size  = (sizeof(struct dcxemu_shm) + 4095) & ~(size_t)4095;
    size_t total     = hdr_size + (size_t)dcxemu_cfg.heap_mb * 1024 * 1024;
    struct stat st;
    struct dcxemu_shm *f;
    int fd = -1, err, init = 0;
    uint32_t max_members;

    err = open_locked(name, is_explicit, why, wlen, &fd, &st);
    if (err != 0) {
        return err;
    }
    err = check_file(fd, &st, name, is_explicit, why, wlen);
    if (err == 0) {
        err = size_file(fd, &st, &total, &init);
    }
    if (err != 0) {
        goto out_close;
    }
    f = mmap(FABRIC_MAP_HINT, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED) {
        err = errno;
        goto out_close;
    }
    if (init) {
        fabric_init(f, total);
    }
    dcxemu_fab = f;
    map_size   = total;
    if (init) {
        dcxemu_heap_init();
    }
    fab_fd = fd;
    err    = take_member_slot(f, fd, &max_members);
    if (err != 0) {
        goto out_unmap;
    }
    if (dcxemu_me < 0) {
        fprintf(stderr,
                "dcxemu: fabric %s has no free member slot "
                "(%u; DCXEMU_MAX_MEMBERS when it was created)\n",
                name, max_members);
        err = EAGAIN;
        goto out_unmap;
    }
    /* keep fd open: closing any descriptor of the file would drop our liveness
     * lock */
    flock(fd, LOCK_UN);
    return start_member();

out_unmap:
    munmap(f, total);
    dcxemu_fab = NULL;
    fab_fd     = -1;
out_close:
    close(fd);
    return err;
}

/* An explicit DCXEMU_FABRIC is used or refused as it is.  The default name is
 * predictable, so another local user can create it first: then (or when it
 * holds something else) fall back to the next default name, the same sequence
 * in every process of the user, with one line saying why. */
static int do_attach(void)
{
    char why[192], prev[sizeof(dcxemu_cfg.fabric)];
    for (int cand = 0; cand < FABRIC_NAME_TRIES; cand++) {
        int err;
        if (cand > 0) {
            memcpy(prev, dcxemu_cfg.fabric, sizeof(prev));
            dcxemu_fabric_candidate(cand, dcxemu_cfg.fabric,
                                    sizeof(dcxemu_cfg.fabric));
            fprintf(stderr,
                    "dcxemu: default fabric %s %s "
                    "(another user may have taken the name); "
                    "using %s instead (DCXEMU_FABRIC sets a name)\n",
                    prev + 1, why, dcxemu_cfg.fabric + 1);
        }
        err = attach_name(dcxemu_cfg.fabric_explicit, why, sizeof(why));
        if (err != FABRIC_SQUATTED) {
            return err;
        }
    }
    fprintf(stderr,
            "dcxemu: default fabric %s %s, "
            "and so does every other default name; "
            "set DCXEMU_FABRIC to a name of your own\n",
            dcxemu_cfg.fabric + 1, why);
    return EACCES;
}

int dcxemu_fabric_attach(int (*start)(void), void (*stop)(void))
{
    int err;
    if (forked) {
        return EPERM;
    }
    pthread_mutex_lock(&attach_lock);
    if (!attached) {
        engine_start = start;
        engine_stop  = stop;
        dcxemu_read_settings();
        attach_err = do_attach();
        attached   = 1;
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
    /* the name attaching would choose: the first candidate that is absent or
     * usable */
    for (int cand = 0; cand < FABRIC_NAME_TRIES; cand++) {
        struct stat st;
        int fd, ok;
        if (dcxemu_fabric_candidate(cand, name, sizeof(name)) ||
            cand == FABRIC_NAME_TRIES - 1) {
            break;
        }
        fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT) {
                break;
            }
            continue;
        }
        ok = fstat(fd, &st) == 0 &&
             fabric_file_check(fd, &st, why, sizeof(why)) == 0;
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
    if (*fabric == '\0' || strchr(fabric, '/') != NULL ||
        strlen(fabric) > sizeof(path) - 2) {
        return EINVAL;
    }
    snprintf(path, sizeof(path), "/%s", fabric);
    pthread_mutex_lock(&attach_lock);
    if (attached && attach_err == 0 && strcmp(path, dcxemu_cfg.fabric) == 0) {
        /* we are a member (and closing a second descriptor would drop our
         * liveness lock) */
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
        err = ENOENT; /* removed while we waited */
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

/* Leave the fabric cleanly at exit so peers need not wait for the reaper, and
 * remove the file when we were the last live member (under the flock, so nobody
 * is attaching meanwhile). */
__attribute__((destructor)) static void dcxemu_fini(void)
{
    int flocked;
    if (!attached || attach_err || forked || dcxemu_fab == NULL) {
        return;
    }
    engine_stop();
    flocked = flock(fab_fd, LOCK_EX) == 0;
    if (dcxemu_lock() == 0) {
        struct dcxemu_shm_member *mb = &dcxemu_fab->members[dcxemu_me];
        free_member_objects(dcxemu_me);
        dcxemu_heap_free_owned(dcxemu_my_token);
        mb->in_use = 0;
        mb->token  = 0;
        dcxemu_unlock();
    }
    if (flocked) {
        /* Drop our liveness lock now, not at exit: a member leaving at the same
         * time that takes the flock after us must not see us and leave the file
         * behind. */
        struct flock fl;
        memset(&fl, 0, sizeof(fl));
        fl.l_type   = F_UNLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start  = dcxemu_me;
        fl.l_len    = 1;
        fcntl(fab_fd, F_SETLK, &fl);
        if (!dcxemu_cfg.keep_fabric && !others_attached(fab_fd) &&
            fd_is_linked(fab_fd, dcxemu_cfg.fabric)) {
            shm_unlink(dcxemu_cfg.fabric);
        }
        flock(fab_fd, LOCK_UN);
    }
}
