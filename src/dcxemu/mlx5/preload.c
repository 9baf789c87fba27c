/* The mlx5 face's hold on the C library: the calls through which rdma-core
 * reaches the kernel, interposed when this library is preloaded.
 *
 * - open() of /dev/infiniband/uverbsN gives a memfd (a real descriptor that
 *   poll, close and mmap understand; its pages are the device's UARs), and
 *   stat()/fstat() describe it as the character device sysfs names, which
 *   libibverbs checks before it uses the descriptor (access() grants it, as
 *   UCX asks);
 * - write() on it is a uverbs command (uverbs.c); ioctl() serves mlx5's DEVX
 *   methods and answers ENOTTY to the rest (ioctl.c), so libibverbs uses the
 *   write() command ABI for every verb that has one;
 * - socket(AF_NETLINK, NETLINK_RDMA) fails, so libibverbs reads sysfs;
 * - close() releases the file's objects as the kernel does.
 *
 * Every other call goes to the C library untouched.  The real functions are
 * looked up on first use, because other libraries' constructors may call
 * them before ours has run.
 */
#define _GNU_SOURCE
#include "face.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif

#define FACE_API __attribute__((visibility("default")))
#define CDEV_DIR "/dev/infiniband/uverbs"

struct face_file *face_files[FACE_MAX_FILES];
int face_files_hwm;
pthread_mutex_t face_files_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int face_open_files; /* write() looks no further when 0 */

#define REAL(_ret, _name, ...)                                             \
    static _ret (*real_##_name)(__VA_ARGS__);                              \
    static _ret (*get_##_name(void))(__VA_ARGS__)                          \
    {                                                                      \
        if (real_##_name == NULL) {                                        \
            real_##_name = (_ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #_name); \
        }                                                                  \
        return real_##_name;                                               \
    }

REAL(int, open, const char *, int, ...)
REAL(int, open64, const char *, int, ...)
REAL(int, openat, int, const char *, int, ...)
REAL(int, openat64, int, const char *, int, ...)
REAL(int, close, int)
REAL(ssize_t, write, int, const void *, size_t)
REAL(int, ioctl, int, unsigned long, ...)
REAL(int, socket, int, int, int)
REAL(int, dup, int)
REAL(int, dup2, int, int)
REAL(int, dup3, int, int, int)
REAL(int, fcntl, int, int, ...)
REAL(int, fcntl64, int, int, ...)
REAL(int, stat, const char *, struct stat *)
REAL(int, lstat, const char *, struct stat *)
REAL(int, fstat, int, struct stat *)
REAL(int, fstatat, int, const char *, struct stat *, int)
REAL(int, access, const char *, int)
REAL(int, faccessat, int, const char *, int, int)
REAL(int, __xstat, int, const char *, struct stat *)
REAL(int, __lxstat, int, const char *, struct stat *)
REAL(int, __fxstat, int, int, struct stat *)
REAL(int, __fxstatat, int, int, const char *, struct stat *, int)

void face_log(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "dcxemu-mlx5[%d]: ", getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2) {
        n = (int)sizeof(line) - 2;
    }
    line[n++] = '\n';
    (void)!get_write()(2, line, (size_t)n);
}

int face_real_close(int fd)
{
    return get_close()(fd);
}

ssize_t face_real_write(int fd, const void *buf, size_t len)
{
    return get_write()(fd, buf, len);
}

/* The device index of a uverbs character device path, or -1. */
static int cdev_index(const char *path)
{
    char *end;
    long n;
    if (path == NULL || strncmp(path, CDEV_DIR, strlen(CDEV_DIR)) != 0) {
        return -1;
    }
    n = strtol(path + strlen(CDEV_DIR), &end, 10);
    if (end == path + strlen(CDEV_DIR) || *end != '\0' || n < 0 ||
        n >= face_num_devices()) {
        return -1;
    }
    return (int)n;
}

static struct face_file *face_file_get(int fd)
{
    struct face_file *f = NULL;
    if (atomic_load(&face_open_files) == 0 || fd < 0) {
        return NULL;
    }
    pthread_mutex_lock(&face_files_lock);
    for (int i = 0; i < face_files_hwm; i++) {
        for (int k = 0; face_files[i] != NULL && k < FACE_FILE_FDS; k++) {
            if (face_files[i]->fd[k] == fd) {
                f = face_files[i];
            }
        }
    }
    pthread_mutex_unlock(&face_files_lock);
    return f;
}

/* The application closed a descriptor: if it was a file's async event fd,
 * the face stops reading from it. */
static void face_async_closed(int fd)
{
    if (atomic_load(&face_open_files) == 0) {
        return;
    }
    pthread_mutex_lock(&face_files_lock);
    for (int i = 0; i < face_files_hwm; i++) {
        if (face_files[i] != NULL && face_files[i]->async_rfd == fd) {
            face_files[i]->async_rfd = -1;
        }
    }
    pthread_mutex_unlock(&face_files_lock);
}

static void cdev_stat(int dev, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_mode    = S_IFCHR | 0666;
    st->st_rdev    = makedev(FACE_UVERBS_MAJOR, FACE_UVERBS_MINOR + dev);
    st->st_nlink   = 1;
    st->st_blksize = 4096;
}

/* A new open of uverbs<dev>: a memfd holding the device's UAR pages. */
static int cdev_open(int dev, int flags)
{
    struct face_file *f = calloc(1, sizeof(*f));
    struct stat st;
    int fd, slot = -1;
    if (f == NULL) {
        errno = ENOMEM;
        return -1;
    }
    fd = memfd_create("dcxemu-uverbs", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
    if (fd < 0 ||
        ftruncate(fd, (off_t)FACE_UAR_PAGES * sysconf(_SC_PAGESIZE)) != 0 ||
        get_fstat()(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0) {
            get_close()(fd);
        }
        free(f);
        errno = err;
        return -1;
    }
    for (int k = 0; k < FACE_FILE_FDS; k++) {
        f->fd[k] = -1;
    }
    f->fd[0]     = fd;
    f->dev_index = dev;
    f->ino       = st.st_ino;
    f->async_wfd = -1;
    f->async_rfd = -1;
    pthread_mutex_init(&f->lock, NULL);
    pthread_mutex_init(&f->mkey_lock, NULL);
    pthread_mutex_init(&f->bf_lock, NULL);
    pthread_mutex_lock(&face_files_lock);
    for (int i = 0; i < FACE_MAX_FILES && slot < 0; i++) {
        if (face_files[i] == NULL) {
            face_files[i] = f;
            slot          = i;
            if (i + 1 > face_files_hwm) {
                face_files_hwm = i + 1;
            }
        }
    }
    pthread_mutex_unlock(&face_files_lock);
    if (slot < 0) {
        get_close()(fd);
        free(f);
        errno = EMFILE;
        return -1;
    }
    atomic_fetch_add(&face_open_files, 1);
    return fd;
}

/* One of the file's descriptors closes; the last one releases the file, as
 * the kernel releases it when its last reference goes. */
static void cdev_close(struct face_file *f, int fd)
{
    int left = 0;
    pthread_mutex_lock(&face_files_lock);
    for (int k = 0; k < FACE_FILE_FDS; k++) {
        if (f->fd[k] == fd) {
            f->fd[k] = -1;
        }
        left += f->fd[k] >= 0;
    }
    if (left == 0) {
        for (int i = 0; i < face_files_hwm; i++) {
            if (face_files[i] == f) {
                face_files[i] = NULL;
            }
        }
    }
    pthread_mutex_unlock(&face_files_lock);
    if (left == 0) {
        atomic_fetch_sub(&face_open_files, 1);
        face_file_release(f);
    }
}

/* dup() of a file's descriptor: the new one is the same file. */
static int cdev_dup(struct face_file *f, int nfd)
{
    int done = 0;
    if (nfd < 0) {
        return nfd;
    }
    pthread_mutex_lock(&face_files_lock);
    for (int k = 0; k < FACE_FILE_FDS && !done; k++) {
        if (f->fd[k] < 0) {
            f->fd[k] = nfd;
            done     = 1;
        }
    }
    pthread_mutex_unlock(&face_files_lock);
    if (!done) {
        face_log("uverbs%d: more than %d descriptors of one open; %d is "
                 "not the device",
                 f->dev_index, FACE_FILE_FDS, nfd);
    }
    return nfd;
}

/* ---- open */

static int open_mode(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0;
}

#define OPEN_BODY(_call)              \
    int dev = cdev_index(path);       \
    int mode;                         \
    va_list ap;                       \
    if (dev >= 0) {                   \
        return cdev_open(dev, flags); \
    }                                 \
    va_start(ap, flags);              \
    mode = open_mode(flags, ap);      \
    va_end(ap);                       \
    return _call

FACE_API int open(const char *path, int flags, ...)
{
    OPEN_BODY(get_open()(path, flags, mode));
}

FACE_API int open64(const char *path, int flags, ...)
{
    OPEN_BODY(get_open64()(path, flags, mode));
}

FACE_API int openat(int dirfd, const char *path, int flags, ...)
{
    OPEN_BODY(get_openat()(dirfd, path, flags, mode));
}

FACE_API int openat64(int dirfd, const char *path, int flags, ...)
{
    OPEN_BODY(get_openat64()(dirfd, path, flags, mode));
}

/* The fortified forms (_FORTIFY_SOURCE) of a caller built with them. */
FACE_API int __open_2(const char *path, int flags)
{
    return open(path, flags);
}

FACE_API int __open64_2(const char *path, int flags)
{
    return open64(path, flags);
}

FACE_API int __openat_2(int dirfd, const char *path, int flags)
{
    return openat(dirfd, path, flags);
}

FACE_API int __openat64_2(int dirfd, const char *path, int flags)
{
    return openat64(dirfd, path, flags);
}

/* ---- stat: the character device, by path and by descriptor.  glibc 2.33
 * and later export stat/fstat; binaries built against older ones (rdma-core
 * of Debian 11) call __xstat/__fxstat. */

static int stat_path(const char *path, struct stat *st)
{
    int dev = cdev_index(path);
    if (dev < 0) {
        return 1;
    }
    cdev_stat(dev, st);
    return 0;
}

static int stat_fd(int fd, struct stat *st)
{
    struct face_file *f = face_file_get(fd);
    if (f == NULL) {
        return 1;
    }
    cdev_stat(f->dev_index, st);
    return 0;
}

FACE_API int stat(const char *path, struct stat *st)
{
    return stat_path(path, st) == 0 ? 0 : get_stat()(path, st);
}

FACE_API int lstat(const char *path, struct stat *st)
{
    return stat_path(path, st) == 0 ? 0 : get_lstat()(path, st);
}

FACE_API int fstat(int fd, struct stat *st)
{
    return stat_fd(fd, st) == 0 ? 0 : get_fstat()(fd, st);
}

FACE_API int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
    if ((flags & AT_EMPTY_PATH) && path[0] == '\0' && stat_fd(dirfd, st) == 0) {
        return 0;
    }
    return stat_path(path, st) == 0 ? 0 : get_fstatat()(dirfd, path, st, flags);
}

FACE_API int __xstat(int ver, const char *path, struct stat *st)
{
    return stat_path(path, st) == 0 ? 0 : get___xstat()(ver, path, st);
}

FACE_API int __lxstat(int ver, const char *path, struct stat *st)
{
    return stat_path(path, st) == 0 ? 0 : get___lxstat()(ver, path, st);
}

FACE_API int __fxstat(int ver, int fd, struct stat *st)
{
    return stat_fd(fd, st) == 0 ? 0 : get___fxstat()(ver, fd, st);
}

FACE_API int
__fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
    return stat_path(path, st) == 0 ?
                   0 :
                   get___fxstatat()(ver, dirfd, path, st, flags);
}

/* The device node grants read and write, as udev's rdma rules make it. */
FACE_API int access(const char *path, int mode)
{
    return cdev_index(path) >= 0 ? 0 : get_access()(path, mode);
}

FACE_API int faccessat(int dirfd, const char *path, int mode, int flags)
{
    return cdev_index(path) >= 0 ? 0 :
                                   get_faccessat()(dirfd, path, mode, flags);
}

/* ---- the descriptor's own calls */

FACE_API ssize_t write(int fd, const void *buf, size_t len)
{
    struct face_file *f = face_file_get(fd);
    if (f == NULL) {
        return get_write()(fd, buf, len);
    }
    return face_uverbs_write(f, buf, len);
}

int face_trace;

FACE_API int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    void *arg;
    struct face_file *f = face_file_get(fd);
    va_start(ap, request);
    arg = va_arg(ap, void *);
    va_end(ap);
    if (f != NULL) {
        return face_uverbs_ioctl(f, request, arg);
    }
    return get_ioctl()(fd, request, arg);
}

FACE_API int close(int fd)
{
    struct face_file *f = face_file_get(fd);
    if (f != NULL) {
        cdev_close(f, fd);
    }
    face_channel_closed(fd);
    face_async_closed(fd);
    return get_close()(fd);
}

FACE_API int dup(int fd)
{
    struct face_file *f = face_file_get(fd);
    int nfd             = get_dup()(fd);
    return f != NULL ? cdev_dup(f, nfd) : nfd;
}

/* dup2/dup3 onto one of the file's descriptors closes that one first. */
static void dup_target_closes(int fd, int nfd)
{
    struct face_file *g = face_file_get(nfd);
    if (g != NULL && nfd != fd) {
        cdev_close(g, nfd);
    }
}

FACE_API int dup2(int fd, int nfd)
{
    struct face_file *f = face_file_get(fd);
    int r;
    dup_target_closes(fd, nfd);
    r = get_dup2()(fd, nfd);
    return f != NULL && r >= 0 && nfd != fd ? cdev_dup(f, r) : r;
}

FACE_API int dup3(int fd, int nfd, int flags)
{
    struct face_file *f = face_file_get(fd);
    int r;
    dup_target_closes(fd, nfd);
    r = get_dup3()(fd, nfd, flags);
    return f != NULL && r >= 0 ? cdev_dup(f, r) : r;
}

static int fcntl_body(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
    struct face_file *f;
    int r = real(fd, cmd, arg);
    if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && r >= 0 &&
        (f = face_file_get(fd)) != NULL) {
        cdev_dup(f, r);
    }
    return r;
}

FACE_API int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    void *arg;
    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_body(get_fcntl(), fd, cmd, arg);
}

FACE_API int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    void *arg;
    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_body(get_fcntl64() != NULL ? get_fcntl64() : get_fcntl(), fd,
                      cmd, arg);
}

FACE_API int socket(int domain, int type, int protocol)
{
    if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
        /* no RDMA netlink: libibverbs reads the device list from sysfs */
        errno = EPROTONOSUPPORT;
        return -1;
    }
    return get_socket()(domain, type, protocol);
}

static pid_t sysfs_owner;

__attribute__((constructor)) static void face_init(void)
{
    const char *trace = getenv("DCXEMU_MLX5_TRACE");
    face_trace        = (trace != NULL) && (strcmp(trace, "1") == 0);
    sysfs_owner       = getpid();
    if (face_sysfs_create() != 0) {
        face_log("no devices: the sysfs tree could not be made");
    }
}

struct face_stats face_stats;

/* A counter of the face by its name in struct face_stats (for tests, which
 * find it with dlsym); 0 for a name it does not have. */
FACE_API uint64_t dcxemu_mlx5_face_counter(const char *name)
{
#define FACE_COUNTER(_f)                    \
    if (strcmp(name, #_f) == 0) {           \
        return atomic_load(&face_stats._f); \
    }
    FACE_COUNTER(sq_doorbells)
    FACE_COUNTER(wqes)
    FACE_COUNTER(bf_stores)
    FACE_COUNTER(bf_copies)
    FACE_COUNTER(bf_mismatches)
    FACE_COUNTER(bf_errors)
    FACE_COUNTER(bf_same_half)
#undef FACE_COUNTER
    return 0;
}

__attribute__((destructor)) static void face_fini(void)
{
    const char *st = getenv("DCXEMU_MLX5_STATS");
    if (st != NULL && strcmp(st, "1") == 0) {
        face_log("send doorbells %llu, arm doorbells %llu, WQEs %llu (found "
                 "by the backstop %llu, failed %llu), receive WQEs %llu, "
                 "CQEs %llu, events %llu, commands %llu (mappings scanned "
                 "%llu times); BlueFlame: stores %llu, copies checked %llu, "
                 "unlike the WQE %llu, doorbells to the last half %llu, "
                 "other errors %llu",
                 (unsigned long long)face_stats.sq_doorbells,
                 (unsigned long long)face_stats.arm_doorbells,
                 (unsigned long long)face_stats.wqes,
                 (unsigned long long)face_stats.backstop_wqes,
                 (unsigned long long)face_stats.bad_wqes,
                 (unsigned long long)face_stats.recv_wqes,
                 (unsigned long long)face_stats.cqes,
                 (unsigned long long)face_stats.events,
                 (unsigned long long)face_stats.commands,
                 (unsigned long long)face_stats.uar_scans,
                 (unsigned long long)face_stats.bf_stores,
                 (unsigned long long)face_stats.bf_copies,
                 (unsigned long long)face_stats.bf_mismatches,
                 (unsigned long long)face_stats.bf_same_half,
                 (unsigned long long)face_stats.bf_errors);
    }
    if (getpid() == sysfs_owner) {
        face_sysfs_remove(); /* a forked child leaves its parent's tree */
    }
}
