/* The doorbell trap: detects the 8-byte stores that rdma-core and UCX make to
 * a UAR page they mmap()ed from the uverbs fd.  The page is PROT_NONE; the
 * store faults, the SIGSEGV handler decodes it (x86_store.h), skips it and
 * hands its address and value to the region's callback, in the storing thread.
 *
 * The library interposes sigaction, signal and their variants (__sigaction,
 * bsd_signal, ssignal, sysv_signal, __sysv_signal): the application's SIGSEGV
 * action is recorded and chained to, never installed.  It interposes
 * sigprocmask and pthread_sigmask too: SIGSEGV is never blocked.  Link it into
 * the executable or the LD_PRELOAD library.  Not covered: raw rt_sigaction and
 * rt_sigprocmask system calls, and sigset, sighold, sigblock, sigsetmask.
 *
 * DCXEMU_UAR=rw (the default under valgrind) leaves the pages read-write and
 * traps nothing; DCXEMU_UAR=trap forces trapping. */
#ifndef DCXEMU_MLX5_TRAP_H
#define DCXEMU_MLX5_TRAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Regions that can be trapped at once (a device open maps one). */
#define DCXEMU_TRAP_MAX_REGIONS 1024

/* Called for each trapped store, synchronously in the thread that stored:
 * addr is the store's address, value its value (zero-extended when narrower
 * than 8 bytes, the low 8 bytes when wider), bytes the size bytes it wrote
 * in memory order (16 or 32 for SSE/AVX stores).  It runs inside the SIGSEGV
 * handler, interrupting the code that stored (so it must not take a lock that
 * code may hold), on that code's stack even when the handler runs on an
 * alternate signal stack. */
typedef void (*dcxemu_trap_fn)(void *arg, void *addr, uint64_t value,
                               const uint8_t *bytes, unsigned size);

/* Install the SIGSEGV handler (once; the handler installed before becomes the
 * application's, chained to).  Returns 0 or an errno value. */
int dcxemu_trap_init(void);

/* Trap the stores to [addr, addr + len): a page-aligned region already mapped,
 * made PROT_NONE (in rw mode left as it is).  Calls dcxemu_trap_init.  Returns
 * 0 or an errno value: EINVAL (not page-aligned, empty), EEXIST (overlaps a
 * region), ENOSPC (too many regions). */
int dcxemu_trap_add(void *addr, size_t len, dcxemu_trap_fn fn, void *arg);

/* Stop trapping the region added at addr and make it read-write again.  No
 * thread may store to it meanwhile. */
void dcxemu_trap_remove(void *addr, size_t len);

/* Stop trapping the region added at addr, which is no longer mapped (its
 * pages are not touched: the addresses may hold another mapping now). */
void dcxemu_trap_forget(void *addr);

/* 1 if addr is in a region added (in rw mode too), else 0. */
int dcxemu_trap_covers(const void *addr);

/* Stores trapped so far. */
uint64_t dcxemu_trap_count(void);

/* 1 if regions stay read-write and nothing is trapped (DCXEMU_UAR=rw, or under
 * valgrind unless DCXEMU_UAR=trap): the caller must scan for doorbells. */
int dcxemu_trap_rw_mode(void);

#ifdef __cplusplus
}
#endif

#endif
