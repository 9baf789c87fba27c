/* The doorbell trap (trap.h): a SIGSEGV handler that emulates the stores to
 * protected UAR pages, the lock-free table of those pages it reads, and the
 * interposed signal calls that keep the handler ours while the application's
 * handler is recorded and chained to.
 *
 * Everything the handler runs is async-signal-safe: atomics, no malloc, no
 * locks (the region table is a seqlock per slot; the application's handler
 * is a pointer published atomically), except dladdr on the way to a crash. */
#define _GNU_SOURCE
#include "trap.h"
#include "x86_store.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/valgrind.h>
#include <valgrind/memcheck.h>
#define TRAP_HAVE_VALGRIND 1
#endif
#endif
#ifndef TRAP_HAVE_VALGRIND
#define RUNNING_ON_VALGRIND             0
#define VALGRIND_MAKE_MEM_DEFINED(a, l) 0
#endif

/* The interposers must win over libc even when the library that holds them
 * is built with -fvisibility=hidden. */
#define TRAP_EXPORT __attribute__((visibility("default")))

#define TRAP_MAX_REGIONS DCXEMU_TRAP_MAX_REGIONS
#define TRAP_APP_SLOTS   16
/* Code is read directly up to the next 4 KiB boundary: the smallest page. */
#define TRAP_CODE_CHUNK 4096

typedef int (*trap_sigaction_fn_t)(int, const struct sigaction *,
                                   struct sigaction *);
typedef sighandler_t (*trap_signal_fn_t)(int, sighandler_t);
typedef int (*trap_sigmask_fn_t)(int, const sigset_t *, sigset_t *);

/* A region: [start, end), or start == 0 when the slot is free.  Written under
 * trap_lock with seq odd; the handler rereads while seq is odd or changed. */
typedef struct {
    atomic_uint seq;
    atomic_uintptr_t start;
    atomic_uintptr_t end;
    _Atomic(dcxemu_trap_fn) fn;
    _Atomic(void *) arg;
} trap_region_t;

/* A trapped store's callback, as run off the alternate signal stack. */
typedef struct {
    dcxemu_trap_fn fn;
    void *arg;
    void *addr;
    uint64_t value;
    const uint8_t *bytes;
    unsigned size;
} trap_call_t;

/* A line of diagnostics, formatted without stdio (the handler writes it). */
typedef struct {
    char buf[512];
    size_t len;
} trap_line_t;

static atomic_int trap_mode = -1; /* -1: not read yet, 0: trap, 1: rw */
static atomic_int trap_installed;
static _Atomic uint64_t trap_stores;

static trap_region_t trap_regions[TRAP_MAX_REGIONS];
static atomic_uint trap_nregions; /* the handler scans up to the last in use */
static pthread_mutex_t trap_lock = PTHREAD_MUTEX_INITIALIZER;

/* The application's SIGSEGV action once ours is installed: trap_app points to
 * one of the slots (or to trap_app_default), replaced by writers under
 * trap_app_lock.  A spinlock, not a mutex: sigaction is async-signal-safe. */
static struct sigaction trap_app_slots[TRAP_APP_SLOTS];
static struct sigaction trap_app_default; /* SIG_DFL */
static unsigned trap_app_next;
static _Atomic(struct sigaction *) trap_app = &trap_app_default;
static atomic_flag trap_app_lock            = ATOMIC_FLAG_INIT;

static _Atomic(void *) trap_real_sigaction;
static _Atomic(void *) trap_real_signal;
static _Atomic(void *) trap_real_sysv_signal;
static _Atomic(void *) trap_real_sigprocmask;
static _Atomic(void *) trap_real_pthread_sigmask;

/* Runs f(p) with the stack pointer at sp (16-byte aligned); defined below. */
__attribute__((visibility("hidden"))) void
dcxemu_trap_call_on_stack(void *sp, void (*f)(void *), void *p);


/* ---- mode */

static void trap_warn(const char *msg)
{
    ssize_t rc = write(STDERR_FILENO, msg, strlen(msg));
    (void)rc;
}

int dcxemu_trap_rw_mode(void)
{
    int mode    = atomic_load(&trap_mode);
    int unknown = -1;
    const char *env;

    if (mode >= 0) {
        return mode;
    }
    env = getenv("DCXEMU_UAR");
    if ((env != NULL) && !strcmp(env, "rw")) {
        mode = 1;
    } else if ((env != NULL) && !strcmp(env, "trap")) {
        mode = 0;
    } else {
        if ((env != NULL) && (*env != '\0')) {
            trap_warn("dcxemu: DCXEMU_UAR is neither 'trap' nor 'rw': "
                      "ignored\n");
        }
        /* Memcheck reports the faulting stores and callgrind reports a wrong
         * RIP unless run with the options the refusal message names. */
        mode = RUNNING_ON_VALGRIND ? 1 : 0;
    }
    atomic_compare_exchange_strong(&trap_mode, &unknown, mode);
    return atomic_load(&trap_mode);
}


/* ---- libc's own functions, found lazily: the interposers can be called
 * before any constructor of ours ran (libucs's constructor installs its
 * SIGSEGV handler before an LD_PRELOAD library's constructor runs) */

static void *trap_real(_Atomic(void *) *cache, const char *name)
{
    void *f = atomic_load_explicit(cache, memory_order_acquire);
    if (f == NULL) {
        f = dlsym(RTLD_NEXT, name);
        atomic_store_explicit(cache, f, memory_order_release);
    }
    return f;
}

static int
trap_libc_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    trap_sigaction_fn_t f = (trap_sigaction_fn_t)trap_real(&trap_real_sigaction,
                                                           "sigaction");
    if (f == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return f(sig, act, old);
}


/* ---- region table */

static void trap_region_write(trap_region_t *r, uintptr_t start, uintptr_t end,
                              dcxemu_trap_fn fn, void *arg)
{
    unsigned seq = atomic_load_explicit(&r->seq, memory_order_relaxed);

    atomic_store_explicit(&r->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&r->start, start, memory_order_relaxed);
    atomic_store_explicit(&r->end, end, memory_order_relaxed);
    atomic_store_explicit(&r->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&r->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&r->seq, seq + 2, memory_order_release);
}

/* The region that holds addr: 1 and its callback, or 0.  Lock-free. */
static int trap_lookup(uintptr_t addr, dcxemu_trap_fn *fn, void **arg)
{
    unsigned n = atomic_load_explicit(&trap_nregions, memory_order_acquire);
    uintptr_t start, end;
    trap_region_t *r;
    unsigned i, seq;

    for (i = 0; i < n; ++i) {
        r = &trap_regions[i];
        do {
            seq   = atomic_load_explicit(&r->seq, memory_order_acquire);
            start = atomic_load_explicit(&r->start, memory_order_relaxed);
            end   = atomic_load_explicit(&r->end, memory_order_relaxed);
            *fn   = atomic_load_explicit(&r->fn, memory_order_relaxed);
            *arg  = atomic_load_explicit(&r->arg, memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
        } while ((seq & 1) ||
                 (seq != atomic_load_explicit(&r->seq, memory_order_relaxed)));
        if ((start != 0) && (addr >= start) && (addr < end)) {
            return 1;
        }
    }
    return 0;
}


/* ---- the application's handler */

static void trap_app_lock_acquire(void)
{
    while (atomic_flag_test_and_set_explicit(&trap_app_lock,
                                             memory_order_acquire)) {
        sched_yield();
    }
}

static void trap_app_lock_release(void)
{
    atomic_flag_clear_explicit(&trap_app_lock, memory_order_release);
}

/* Record act (if not NULL) as the application's action, old gets the one
 * before.  trap_app_lock held. */
static void trap_app_swap(const struct sigaction *act, struct sigaction *old)
{
    struct sigaction *prev = atomic_load(&trap_app);
    struct sigaction *slot;

    if (act != NULL) {
        slot  = &trap_app_slots[trap_app_next++ % TRAP_APP_SLOTS];
        *slot = *act;
        prev  = atomic_exchange(&trap_app, slot);
    }
    *old = *prev;
}

/* sigaction for SIGSEGV: the kernel's until ours is installed, then ours. */
static int
trap_segv_sigaction(const struct sigaction *act, struct sigaction *old)
{
    struct sigaction copy, prev;
    int rc = 0;

    if (act != NULL) {
        copy = *act; /* outside the lock: a bad pointer faults here */
        if (act->sa_handler == SIG_ERR) {
            errno = EINVAL;
            return -1;
        }
    }
    trap_app_lock_acquire();
    if (atomic_load(&trap_installed)) {
        trap_app_swap((act != NULL) ? &copy : NULL, &prev);
    } else {
        rc = trap_libc_sigaction(SIGSEGV, (act != NULL) ? &copy : NULL, &prev);
    }
    trap_app_lock_release();
    if ((rc == 0) && (old != NULL)) {
        *old = prev;
    }
    return rc;
}

/* What the kernel does when nobody handles the fault: die of SIGSEGV. */
static void trap_die(const siginfo_t *si)
{
    struct sigaction dfl;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    trap_libc_sigaction(SIGSEGV, &dfl, NULL);
    if (si->si_code <= 0) {
        raise(SIGSEGV); /* sent by kill or tgkill: nothing to re-execute */
    }
    /* A fault: returning re-executes the instruction, which faults again and
     * dumps core where it happened. */
}

/* Hand the signal to the application's action as the kernel would have. */
static void trap_chain(int sig, siginfo_t *si, void *ctx, int refused)
{
    struct sigaction *p = atomic_load_explicit(&trap_app, memory_order_acquire);
    struct sigaction act = *p;
    sigset_t mask, saved;

    if (act.sa_handler == SIG_IGN) {
        if (si->si_code <= 0) {
            return; /* a sent SIGSEGV can be ignored, a fault cannot */
        }
        trap_die(si);
        return;
    }
    if (act.sa_handler == SIG_DFL) {
        trap_die(si);
        return;
    }
    if (act.sa_flags & SA_RESETHAND) {
        atomic_compare_exchange_strong(&trap_app, &p, &trap_app_default);
    }
    /* The application's mask, without SIGSEGV: ours is never blocked. */
    mask = act.sa_mask;
    sigdelset(&mask, SIGSEGV);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &mask, &saved, _NSIG / 8);
    if (act.sa_flags & SA_SIGINFO) {
        act.sa_sigaction(sig, si, ctx);
    } else {
        act.sa_handler(sig);
    }
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved, NULL, _NSIG / 8);
    if (refused) {
        trap_die(si); /* the store would only fault again */
    }
}


/* ---- the faulting instruction */

/* The rest of the 15 bytes at rip from the next page, which need not be
 * mapped: read with a syscall, which fails instead of faulting. */
static void trap_fetch_rest(uintptr_t rip, uint8_t *code, size_t *avail)
{
    struct iovec local, remote;
    ssize_t n;

    if (*avail == DCXEMU_X86_INSN_MAX) {
        return;
    }
    local.iov_base  = code + *avail;
    local.iov_len   = DCXEMU_X86_INSN_MAX - *avail;
    remote.iov_base = (void *)(rip + *avail);
    remote.iov_len  = local.iov_len;
    n               = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n > 0) {
        *avail += (size_t)n;
    }
}

/* Decode the instruction at rip from the bytes of its own page, and from the
 * next page only when the decoder asks for more. */
static dcxemu_x86_status_t trap_decode(uintptr_t rip, const ucontext_t *uc,
                                       uint8_t *code, size_t *avail,
                                       dcxemu_x86_store_t *st)
{
    size_t in_page = TRAP_CODE_CHUNK - (rip & (TRAP_CODE_CHUNK - 1));
    dcxemu_x86_status_t status;

    *avail = (in_page < DCXEMU_X86_INSN_MAX) ? in_page : DCXEMU_X86_INSN_MAX;
    memcpy(code, (const void *)rip, *avail);
    status = dcxemu_x86_store_decode(code, *avail, uc, st);
    if ((status != DCXEMU_X86_TRUNCATED) || (*avail == DCXEMU_X86_INSN_MAX)) {
        return status;
    }
    trap_fetch_rest(rip, code, avail);
    return dcxemu_x86_store_decode(code, *avail, uc, st);
}


/* ---- diagnostics */

static void trap_puts(trap_line_t *l, const char *s)
{
    while ((*s != '\0') && (l->len < sizeof(l->buf) - 1)) {
        l->buf[l->len++] = *s++;
    }
}

static void trap_puthex(trap_line_t *l, uint64_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[17];
    int n = 0;

    do {
        tmp[n++] = hex[v & 0xf];
        v >>= 4;
    } while ((v != 0) || (n < digits));
    while ((n > 0) && (l->len < sizeof(l->buf) - 1)) {
        l->buf[l->len++] = tmp[--n];
    }
}

/* One line on stderr: where, what and why the trap did not emulate. */
static void trap_refuse(const siginfo_t *si, const ucontext_t *uc,
                        uint8_t *code, size_t avail, const char *why,
                        uint64_t ea)
{
    uint64_t rip  = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    trap_line_t l = { .len = 0 };
    Dl_info info;
    size_t i;

    trap_puts(&l, "dcxemu: doorbell trap: cannot emulate the access to 0x");
    trap_puthex(&l, (uintptr_t)si->si_addr, 1);
    trap_puts(&l, " at rip 0x");
    trap_puthex(&l, rip, 1);
    if (dladdr((void *)rip, &info) && (info.dli_fname != NULL)) {
        trap_puts(&l, " (");
        trap_puts(&l, info.dli_fname);
        trap_puts(&l, "(");
        if (info.dli_sname != NULL) {
            trap_puts(&l, info.dli_sname);
            trap_puts(&l, "+0x");
            trap_puthex(&l, rip - (uintptr_t)info.dli_saddr, 1);
        } else {
            trap_puts(&l, "+0x");
            trap_puthex(&l, rip - (uintptr_t)info.dli_fbase, 1);
        }
        trap_puts(&l, "))");
    }
    trap_puts(&l, ": ");
    trap_puts(&l, why);
    if (ea != 0) {
        trap_puts(&l, " 0x");
        trap_puthex(&l, ea, 1);
    }
    trap_puts(&l, "; code:");
    for (i = 0; i < avail; ++i) {
        trap_puts(&l, " ");
        trap_puthex(&l, code[i], 2);
    }
    if (RUNNING_ON_VALGRIND) {
        trap_puts(&l, " (valgrind needs --vex-guest-max-insns=1 "
                      "--px-default=allregs-at-mem-access)");
    }
    trap_puts(&l, "\n");
    if (write(STDERR_FILENO, l.buf, l.len) < 0) {
        /* nothing else to tell */
    }
}


/* ---- the handler */

/* Runs the callback on the interrupted stack with the alternate stack
 * disabled: a signal that arrives meanwhile must not be delivered on top of
 * the frame of ours that is still on the alternate stack. */
static void trap_call_off_altstack(void *p)
{
    const trap_call_t *c = p;
    stack_t off, saved;

    memset(&off, 0, sizeof(off));
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, &saved);
    c->fn(c->arg, c->addr, c->value, c->bytes, c->size);
    sigaltstack(&saved, NULL);
}

/* Call the callback: in place, or, when the handler runs on an alternate
 * signal stack (SA_ONSTACK), on the stack of the code that stored, as the
 * callback runs the device model and an alternate stack may be small. */
static void trap_call(const ucontext_t *uc, trap_call_t *c)
{
    uintptr_t ss   = (uintptr_t)uc->uc_stack.ss_sp;
    uintptr_t rsp  = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);

    /* in place: no alternate stack, the handler is not on it, the store ran
     * on it, or valgrind (memcheck reports the switched-to stack as below the
     * stack pointer) */
    if ((uc->uc_stack.ss_flags & SS_DISABLE) || RUNNING_ON_VALGRIND ||
        (here - ss >= uc->uc_stack.ss_size) ||
        (rsp - ss < uc->uc_stack.ss_size)) {
        c->fn(c->arg, c->addr, c->value, c->bytes, c->size);
        return;
    }
    /* below the stored-from code's red zone, with room to spare */
    dcxemu_trap_call_on_stack((void *)((rsp - 512) & ~(uintptr_t)15),
                              trap_call_off_altstack, c);
}

static void trap_handler(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc  = ctx;
    int saved_errno = errno;
    uint8_t code[DCXEMU_X86_INSN_MAX];
    dcxemu_x86_status_t status;
    dcxemu_x86_store_t st;
    const char *why = NULL;
    uint64_t ea     = 0;
    trap_call_t call;
    size_t avail;

    if ((si->si_code != SEGV_ACCERR) ||
        !trap_lookup((uintptr_t)si->si_addr, &call.fn, &call.arg)) {
        trap_chain(sig, si, ctx, 0);
        goto out;
    }
    status = trap_decode((uintptr_t)uc->uc_mcontext.gregs[REG_RIP], uc, code,
                         &avail, &st);
    if (status != DCXEMU_X86_OK) {
        why = dcxemu_x86_status_str(status);
    } else if (st.addr != (uintptr_t)si->si_addr) {
        /* e.g. RIP not at the faulting instruction (valgrind), or a store
         * that straddles into the region: never guess */
        why = "a store, but to";
        ea  = st.addr;
    } else if (st.fpregs && RUNNING_ON_VALGRIND) {
        why = "an SSE/MMX store, and valgrind passes no xmm/mm values";
    }
    if (why != NULL) {
        trap_refuse(si, uc, code, avail, why, ea);
        trap_chain(sig, si, ctx, 1);
        goto out;
    }
    uc->uc_mcontext.gregs[REG_RIP] += st.length;
    call.addr  = si->si_addr;
    call.value = st.value;
    call.bytes = st.bytes;
    call.size  = st.size;
    trap_call(uc, &call);
    atomic_fetch_add_explicit(&trap_stores, 1, memory_order_relaxed);
out:
    errno = saved_errno;
}

__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".globl dcxemu_trap_call_on_stack\n"
        ".hidden dcxemu_trap_call_on_stack\n"
        ".type dcxemu_trap_call_on_stack, @function\n"
        "dcxemu_trap_call_on_stack:\n"
        ".cfi_startproc\n"
        "    push %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "    mov %rsp, %rbp\n"
        ".cfi_def_cfa_register %rbp\n"
        "    mov %rdi, %rsp\n"
        "    mov %rdx, %rdi\n"
        "    call *%rsi\n"
        "    mov %rbp, %rsp\n"
        "    pop %rbp\n"
        ".cfi_def_cfa %rsp, 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size dcxemu_trap_call_on_stack, .-dcxemu_trap_call_on_stack\n"
        ".popsection\n");


/* ---- API */

int dcxemu_trap_init(void)
{
    struct sigaction ours, prev;
    sigset_t segv;
    Dl_info info;
    int rc = 0;

    if (atomic_load(&trap_installed) || dcxemu_trap_rw_mode()) {
        return 0;
    }
    if (trap_real(&trap_real_sigaction, "sigaction") == NULL) {
        return ENOSYS;
    }
    /* bind what the handler calls before it can run */
    dladdr((void *)dcxemu_trap_init, &info);

    memset(&ours, 0, sizeof(ours));
    ours.sa_sigaction = trap_handler;
    ours.sa_flags     = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sigemptyset(&ours.sa_mask);

    trap_app_lock_acquire();
    if (!atomic_load(&trap_installed)) {
        if (trap_libc_sigaction(SIGSEGV, &ours, &prev) == 0) {
            /* whatever was installed before is the application's */
            trap_app_slots[trap_app_next] = prev;
            atomic_store(&trap_app, &trap_app_slots[trap_app_next++]);
            atomic_store(&trap_installed, 1);
        } else {
            rc = errno;
        }
    }
    trap_app_lock_release();

    sigemptyset(&segv);
    sigaddset(&segv, SIGSEGV);
    pthread_sigmask(SIG_UNBLOCK, &segv, NULL);
    return rc;
}

int dcxemu_trap_add(void *addr, size_t len, dcxemu_trap_fn fn, void *arg)
{
    uintptr_t start = (uintptr_t)addr, end = start + len;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned i, n, slot = TRAP_MAX_REGIONS;
    uintptr_t s, e;
    int rc;

    rc = dcxemu_trap_init();
    if (rc != 0) {
        return rc;
    }
    if ((start == 0) || (len == 0) || (end < start) || (fn == NULL) ||
        ((start | len) & (page - 1))) {
        return EINVAL;
    }

    pthread_mutex_lock(&trap_lock);
    n = atomic_load(&trap_nregions);
    for (i = 0; i < n; ++i) {
        s = atomic_load(&trap_regions[i].start);
        e = atomic_load(&trap_regions[i].end);
        if (s == 0) {
            slot = (slot == TRAP_MAX_REGIONS) ? i : slot;
        } else if ((start < e) && (s < end)) {
            rc = EEXIST;
            goto out;
        }
    }
    if (slot == TRAP_MAX_REGIONS) {
        if (n == TRAP_MAX_REGIONS) {
            rc = ENOSPC;
            goto out;
        }
        slot = n;
    }
    /* published before the page faults, so the handler finds it */
    trap_region_write(&trap_regions[slot], start, end, fn, arg);
    if (slot == n) {
        atomic_store(&trap_nregions, n + 1);
    }
    if (!dcxemu_trap_rw_mode()) {
        if (mprotect(addr, len, PROT_NONE) != 0) {
            rc = errno;
            trap_region_write(&trap_regions[slot], 0, 0, NULL, NULL);
            goto out;
        }
        /* memcheck would report the accesses before they fault */
        (void)VALGRIND_MAKE_MEM_DEFINED(addr, len);
    }
out:
    pthread_mutex_unlock(&trap_lock);
    return rc;
}

static void trap_unregister(void *addr, size_t len, int restore)
{
    unsigned n, i;

    pthread_mutex_lock(&trap_lock);
    n = atomic_load(&trap_nregions);
    for (i = 0; i < n; ++i) {
        if (atomic_load(&trap_regions[i].start) != (uintptr_t)addr) {
            continue;
        }
        /* read-write before the region goes: a store that faulted before
         * still finds it */
        if (restore && !dcxemu_trap_rw_mode()) {
            mprotect(addr, len, PROT_READ | PROT_WRITE);
            (void)VALGRIND_MAKE_MEM_DEFINED(addr, len);
        }
        trap_region_write(&trap_regions[i], 0, 0, NULL, NULL);
        break;
    }
    /* the handler scans up to the last slot in use */
    while ((n > 0) && (atomic_load(&trap_regions[n - 1].start) == 0)) {
        --n;
    }
    atomic_store(&trap_nregions, n);
    pthread_mutex_unlock(&trap_lock);
}

void dcxemu_trap_remove(void *addr, size_t len)
{
    trap_unregister(addr, len, 1);
}

void dcxemu_trap_forget(void *addr)
{
    trap_unregister(addr, 0, 0);
}


int dcxemu_trap_covers(const void *addr)
{
    dcxemu_trap_fn fn;
    void *arg;
    return trap_lookup((uintptr_t)addr, &fn, &arg);
}

uint64_t dcxemu_trap_count(void)
{
    return atomic_load_explicit(&trap_stores, memory_order_relaxed);
}


/* ---- interposed signal calls */

TRAP_EXPORT int
sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig == SIGSEGV) {
        return trap_segv_sigaction(act, old);
    }
    return trap_libc_sigaction(sig, act, old);
}

TRAP_EXPORT int
__sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return sigaction(sig, act, old);
}

/* signal() and its variants for SIGSEGV, with glibc's flags for each. */
static sighandler_t trap_segv_signal(sighandler_t handler, int flags)
{
    struct sigaction act, old;

    memset(&act, 0, sizeof(act));
    act.sa_handler = handler;
    act.sa_flags   = flags;
    sigemptyset(&act.sa_mask);
    if (!(flags & SA_NODEFER)) {
        sigaddset(&act.sa_mask, SIGSEGV);
    }
    if (trap_segv_sigaction(&act, &old) != 0) {
        return SIG_ERR;
    }
    return old.sa_handler;
}

static sighandler_t trap_libc_signal(_Atomic(void *) *cache, const char *name,
                                     int sig, sighandler_t handler)
{
    trap_signal_fn_t f = (trap_signal_fn_t)trap_real(cache, name);
    if (f == NULL) {
        errno = ENOSYS;
        return SIG_ERR;
    }
    return f(sig, handler);
}

/* BSD semantics: the handler stays, the signal is blocked while it runs. */
TRAP_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    if (sig == SIGSEGV) {
        return trap_segv_signal(handler, SA_RESTART);
    }
    return trap_libc_signal(&trap_real_signal, "signal", sig, handler);
}

TRAP_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler)
{
    return signal(sig, handler);
}

TRAP_EXPORT sighandler_t ssignal(int sig, sighandler_t handler)
{
    return signal(sig, handler);
}

/* System V semantics: the handler is reset on delivery and not deferred. */
TRAP_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler)
{
    if (sig == SIGSEGV) {
        return trap_segv_signal(handler, SA_RESETHAND | SA_NODEFER);
    }
    return trap_libc_signal(&trap_real_sysv_signal, "sysv_signal", sig,
                            handler);
}

TRAP_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler)
{
    return sysv_signal(sig, handler);
}

/* SIGSEGV is never blocked: the kernel kills a thread whose doorbell store
 * faults while SIGSEGV is blocked, instead of running the handler. */
static const sigset_t *
trap_unblock_segv(int how, const sigset_t *set, sigset_t *copy)
{
    if ((set == NULL) || (how == SIG_UNBLOCK) || !sigismember(set, SIGSEGV)) {
        return set;
    }
    *copy = *set;
    sigdelset(copy, SIGSEGV);
    return copy;
}

TRAP_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    trap_sigmask_fn_t f = (trap_sigmask_fn_t)trap_real(&trap_real_sigprocmask,
                                                       "sigprocmask");
    sigset_t copy;

    set = trap_unblock_segv(how, set, &copy);
    if (f == NULL) {
        return (int)syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8);
    }
    return f(how, set, old);
}

TRAP_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    trap_sigmask_fn_t f = (trap_sigmask_fn_t)
            trap_real(&trap_real_pthread_sigmask, "pthread_sigmask");
    sigset_t copy;

    set = trap_unblock_segv(how, set, &copy);
    if (f == NULL) {
        return (syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8) == 0) ?
                       0 :
                       errno;
    }
    return f(how, set, old);
}
