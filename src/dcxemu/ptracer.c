/* dcxemu: letting peers reach this process's memory. Peers copy with
 * process_vm_readv/writev, which Yama restricts like a ptrace attach; a DCT
 * owner declares who may (PR_SET_PTRACER) where Yama asks for it. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* Yama ptrace_scope: -1 without Yama (or unreadable), else 0..3;
 * DCXEMU_YAMA_SCOPE pretends one (test-only). */
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

/* Peers reach a process's memory with process_vm_readv/writev, which the kernel
 * allows like a ptrace attach.  Only the memory of a DCT owner is reached by
 * other processes (their DCIs write, read and atomically update its
 * registrations and scatter SENDs into its receive buffers; a process's own
 * buffers are only touched by itself), so a process asks for nothing until it
 * creates its first DCT, and then only under Yama ptrace_scope 1, where a
 * process must name who may attach to it (PR_SET_PTRACER): DCXEMU_PTRACER
 * (default any process of the user; or one PID and its descendants; or none).
 * Scope 0 (or no Yama) needs no declaration; under 2 and 3 none helps: peers
 * without CAP_SYS_PTRACE then fail with remote access errors (said once). */
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
        if (prctl(PR_SET_PTRACER,
                  tracer < 0 ? PR_SET_PTRACER_ANY : (unsigned long)tracer, 0, 0,
                  0) != 0 &&
            dcxemu_cfg.yama_scope < 0) {
            fprintf(stderr,
                    "dcxemu: prctl(PR_SET_PTRACER) failed: %s; "
                    "other processes may not reach this process's memory\n",
                    strerror(errno));
        }
    } else if (scope >= 2) {
        fprintf(stderr,
                "dcxemu: Yama ptrace_scope is %d: "
                "other processes cannot reach this process's memory "
                "without CAP_SYS_PTRACE; "
                "their operations on its DCTs will fail "
                "with remote access errors\n",
                scope);
    }
    ptracer_scope    = scope;
    ptracer_declared = tracer;
    ptracer_done     = 1;
    pthread_mutex_unlock(&ptracer_lock);
}

DCXEMU_API int dcxemu_ptracer_read(int *scope, long *ptracer)
{
    int done;
    if (scope == NULL || ptracer == NULL) {
        return EINVAL;
    }
    pthread_mutex_lock(&ptracer_lock);
    done     = ptracer_done;
    *scope   = ptracer_scope;
    *ptracer = ptracer_declared;
    pthread_mutex_unlock(&ptracer_lock);
    return done ? 0 : ENOENT;
}
