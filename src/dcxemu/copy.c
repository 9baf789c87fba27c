/* dcxemu data copies: moving a WQE's bytes between processes
 * (process_vm_readv/writev) or within one, in ascending order, with no fabric
 * lock held; the copy epochs that let a deregistration wait for copies in
 * flight; the test-only hook around them. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

/* Place bytes in ascending order, as a NIC does: large memcpy implementations
 * interleave pages, and a reader polling the last byte must see everything
 * before it.  process_vm_* already copy page by page in order. */
static void ascending_copy(void *dst, const void *src, size_t len)
{
    const size_t chunk = 4096;
    size_t off         = 0;
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

/* Gathering small pieces through a staging buffer pays off above this many
 * pieces of at most this average size. */
#define VM_GATHER_MIN_PIECES 4
#define VM_GATHER_MAX_AVG    512
#define VM_STAGING_SIZE      65536

/* Move the pieces to/from the contiguous remote span rv through a per-thread
 * staging buffer: one system call per VM_STAGING_SIZE bytes. */
static int vm_copy_staged(pid_t pid, int to_remote, const struct iovec *piece,
                          int k, const struct iovec *rv)
{
    static __thread char staging[VM_STAGING_SIZE];
    char *remote = rv->iov_base;
    size_t poff  = 0;
    int pi       = 0;

    while (pi < k) {
        /* the next chunk: as many piece bytes as fit */
        size_t fill  = 0;
        int pj       = pi;
        size_t pjoff = poff;
        while (pj < k && fill < sizeof(staging)) {
            size_t take = piece[pj].iov_len - pjoff;
            if (take > sizeof(staging) - fill) {
                take = sizeof(staging) - fill;
            }
            if (to_remote) {
                memcpy(staging + fill, (char *)piece[pj].iov_base + pjoff,
                       take);
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
            ssize_t n = to_remote ? process_vm_writev(pid, &lv, 1, &r, 1, 0) :
                                    process_vm_readv(pid, &lv, 1, &r, 1, 0);
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
            pi   = pj;
            poff = pjoff;
        }
        remote += fill;
    }
    return 0;
}

/* Move k local pieces to/from the contiguous span rv within this process:
 * ascending, the last byte of each piece stored last. */
static void vm_copy_local(int to_remote, const struct iovec *piece, int k,
                          const struct iovec *rv)
{
    size_t off = 0;
    for (int j = 0; j < k; j++) {
        if (to_remote) {
            ascending_copy((char *)rv->iov_base + off, piece[j].iov_base,
                           piece[j].iov_len);
        } else {
            ascending_copy(piece[j].iov_base, (char *)rv->iov_base + off,
                           piece[j].iov_len);
        }
        off += piece[j].iov_len;
    }
}

/* Move k local pieces (modified: consumed) to/from the contiguous span rv of
 * process pid with process_vm_readv/writev, as many calls as the kernel needs.
 * 0 or errno. */
static int vm_copy_remote(pid_t pid, int to_remote, struct iovec *piece, int k,
                          struct iovec rv)
{
    size_t want = rv.iov_len, moved = 0;
    int j = 0;
    while (moved < want) {
        ssize_t n = to_remote ?
                            process_vm_writev(pid, piece + j,
                                              (unsigned long)(k - j), &rv, 1,
                                              0) :
                            process_vm_readv(pid, piece + j,
                                             (unsigned long)(k - j), &rv, 1, 0);
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
    return 0;
}

/* Copy between local iovecs and remote iovecs of process pid (0: this process),
 * which the caller found alive under the fabric lock; no lock is needed here.
 * Bytes move in ascending order, at most IOV_MAX pieces per system call. Returns
 * 0 or errno (EFAULT for unmapped memory, ESRCH for a vanished process). */
int dcxemu_vm_copy(pid_t pid, int to_remote, const struct iovec *local, int nl,
                   const struct iovec *remote, int nr)
{
    struct iovec piece[IOV_MAX];
    int li      = 0;
    size_t loff = 0;
    for (int ri = 0; ri < nr; ri++) {
        size_t rdone = 0;
        while (rdone < remote[ri].iov_len) {
            struct iovec rv;
            size_t want = 0;
            int k = 0, err = 0;
            while (k < IOV_MAX && li < nl &&
                   rdone + want < remote[ri].iov_len) {
                size_t avail = local[li].iov_len - loff;
                size_t take  = remote[ri].iov_len - rdone - want;
                if (take > avail) {
                    take = avail;
                }
                if (take > 0) {
                    piece[k].iov_base = (char *)local[li].iov_base + loff;
                    piece[k].iov_len  = take;
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
                return EINVAL; /* remote longer than local: caller bug */
            }
            rv.iov_base = (char *)remote[ri].iov_base + rdone;
            rv.iov_len  = want;
            if (pid == 0) {
                vm_copy_local(to_remote, piece, k, &rv);
            } else if (k > VM_GATHER_MIN_PIECES &&
                       want / k < VM_GATHER_MAX_AVG) {
                /* Many small pieces (a UMR layout of small blocks): the
                 * kernel's cost is per iovec, so gather them here and move one
                 * contiguous span per call, as a NIC gathers before it sends.
                 * Order and "last byte last" are unchanged. */
                err = vm_copy_staged(pid, to_remote, piece, k, &rv);
            } else {
                err = vm_copy_remote(pid, to_remote, piece, k, rv);
            }
            if (err != 0) {
                return err;
            }
            rdone += want;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- copies
 * without the lock ---- */

void dcxemu_copy_begin(int qp_idx)
{
    struct dcxemu_shm_qp *s = &dcxemu_fab->qps[qp_idx];
    s->copy_token           = dcxemu_my_token;
    atomic_store(&s->copy_epoch, dcxemu_fab->copy_epoch + 1);
    atomic_fetch_add(&dcxemu_fab->copies_active, 1);
}

void dcxemu_copy_end(int qp_idx)
{
    atomic_store(&dcxemu_fab->qps[qp_idx].copy_epoch,
                 0); /* after the data: release */
    atomic_fetch_sub(&dcxemu_fab->copies_active, 1);
}

/* One scan (fabric lock held): the number of a QP whose copy began at or before
 * epoch and whose copier lives, or 0.  A dead copier's record is dropped, so it
 * blocks nobody. */
static uint32_t copy_busy_qpn(uint64_t epoch)
{
    uint32_t hwm = dcxemu_fab->qp_hwm < DCXEMU_MAX_QPS ? dcxemu_fab->qp_hwm :
                                                         DCXEMU_MAX_QPS;
    if (atomic_load(&dcxemu_fab->copies_active) == 0) {
        return 0;
    }
    for (uint32_t i = 0; i < hwm; i++) {
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        uint64_t e              = atomic_load(&s->copy_epoch);
        if (e == 0 || e > epoch) {
            continue; /* not copying, or began after the caller's invalidation */
        }
        if (dcxemu_member_alive(s->owner, s->copy_token)) {
            return s->gen << DCXEMU_QP_IDX_BITS | i;
        }
        if (atomic_compare_exchange_strong(&s->copy_epoch, &e, 0)) {
            atomic_fetch_sub(&dcxemu_fab->copies_active, 1);
        }
    }
    return 0;
}

void dcxemu_copy_wait(void)
{
    uint64_t epoch;
    uint32_t qpn;
    int told = 0;
    if (dcxemu_lock() != 0) {
        return;
    }
    epoch = ++dcxemu_fab->copy_epoch;
    for (unsigned round = 0; (qpn = copy_busy_qpn(epoch)) != 0; round++) {
        dcxemu_unlock();
        if (!told) {
            dcxemu_test_hook_call(DCXEMU_TEST_COPY_WAIT, qpn, 0);
            told = 1;
        }
        if (round < 1000) {
            sched_yield();
        } else {
            struct timespec ts = {
                0, 50000
            }; /* a long copy: back off, it ends by itself */
            nanosleep(&ts, NULL);
        }
        if (dcxemu_lock() != 0) {
            return;
        }
    }
    dcxemu_unlock();
}

static _Atomic(dcxemu_test_hook_fn) test_hook_fn;
static void *_Atomic test_hook_arg;

DCXEMU_API void dcxemu_test_hook(dcxemu_test_hook_fn fn, void *arg)
{
    atomic_store(&test_hook_arg, arg);
    atomic_store(&test_hook_fn, fn);
}

void dcxemu_test_hook_call(enum dcxemu_test_event ev, uint32_t qpn,
                           uint64_t len)
{
    dcxemu_test_hook_fn fn = atomic_load_explicit(&test_hook_fn,
                                                  memory_order_acquire);
    if (__builtin_expect(fn != NULL, 0)) {
        fn(ev, qpn, len, atomic_load(&test_hook_arg));
    }
}
