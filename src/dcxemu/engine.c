/* dcxemu engine: the per-process thread that runs this process's device.  It
 * waits on the member's doorbell, delivers the events owed to this process's
 * channels, runs the QPs whose deadline is due (deferred execution, RNR and
 * retry timers) and reaps dead members.  It sits above the fabric and the
 * stages: it calls them, they never call it (they ring the doorbell instead).
 */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_IDLE_NS 100000000ull /* wake at least this often */
#define ENGINE_REAP_NS 200000000ull /* liveness check interval */

static pthread_t engine_thread;
static volatile int engine_stopping;
/* dcxemu_engine_hook: run on every wake-up, and at least every interval */
static _Atomic(dcxemu_engine_hook_fn) engine_hook;
static _Atomic uint64_t engine_hook_ns;

/* Run the QPs whose deadline has passed; lower *next to the earliest deadline
 * still pending. */
static uint64_t run_due_qps(uint64_t now, uint64_t *next)
{
    pthread_mutex_lock(&dcxemu_reg_lock);
    for (uint32_t k = 0; k < dcxemu_qp_set.n; k++) {
        struct dcxemu_qp *qp = dcxemu_local_qps[dcxemu_qp_set.item[k]];
        uint64_t d;
        if (qp == NULL) {
            continue;
        }
        d = atomic_load(&qp->deadline_ns);
        if (d == 0 && !(qp->is_rc &&
                        atomic_load(&dcxemu_fab->qps[qp->idx].rc_remote_err))) {
            continue; /* no timer, and no responder error to take in */
        }
        if (d <= now) {
            dcxemu_qp_progress(qp);
            d   = atomic_load(&qp->deadline_ns);
            now = dcxemu_now_ns();
        }
        if (d != 0 && d < *next) {
            *next = d;
        }
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return now;
}

/* One member reaps per interval: with hundreds of members, each checking every
 * slot would cost members^2 liveness checks per interval. */
static void reap_if_due(uint64_t now, uint64_t *next_reap)
{
    if (now < *next_reap) {
        return;
    }
    if (now >= atomic_load(&dcxemu_fab->next_reap_ns) && dcxemu_lock() == 0) {
        if (now >= atomic_load(&dcxemu_fab->next_reap_ns)) {
            dcxemu_reap_dead_members();
            atomic_store(&dcxemu_fab->next_reap_ns, now + ENGINE_REAP_NS);
        }
        dcxemu_unlock();
    }
    *next_reap = now + ENGINE_REAP_NS;
}

static void run_hook(uint64_t now, uint64_t *next)
{
    dcxemu_engine_hook_fn fn = atomic_load(&engine_hook);
    uint64_t interval        = atomic_load(&engine_hook_ns);
    if (fn == NULL) {
        return;
    }
    fn();
    if (interval != 0 && now + interval < *next) {
        *next = now + interval;
    }
}

static void *engine_main(void *arg)
{
    uint32_t *db       = &dcxemu_fab->members[dcxemu_me].doorbell;
    uint64_t next_reap = 0;
    (void)arg;
    while (!engine_stopping) {
        uint32_t seen = __atomic_load_n(db, __ATOMIC_SEQ_CST);
        uint64_t now = dcxemu_now_ns(), next = now + ENGINE_IDLE_NS;
        struct timespec to;

        dcxemu_deliver_events();
        run_hook(now, &next);
        now = run_due_qps(now, &next);
        reap_if_due(now, &next_reap);
        now = dcxemu_now_ns();
        if (next <= now) {
            continue;
        }
        to.tv_sec  = (time_t)((next - now) / 1000000000ull);
        to.tv_nsec = (long)((next - now) % 1000000000ull);
        dcxemu_test_engine_waits(seen, next - now);
        syscall(SYS_futex, db, FUTEX_WAIT, seen, &to, NULL, 0);
        dcxemu_test_engine_runs();
    }
    return NULL;
}

static int engine_start(void)
{
    return pthread_create(&engine_thread, NULL, engine_main, NULL);
}

static void engine_stop(void)
{
    engine_stopping = 1;
    dcxemu_engine_kick();
    pthread_join(engine_thread, NULL);
}

int dcxemu_attach(void)
{
    return dcxemu_fabric_attach(engine_start, engine_stop);
}

DCXEMU_API int
dcxemu_engine_hook(dcxemu_engine_hook_fn fn, uint64_t interval_ns)
{
    int err = dcxemu_attach();
    if (err != 0) {
        return err;
    }
    atomic_store(&engine_hook_ns, interval_ns);
    atomic_store(&engine_hook, fn);
    dcxemu_engine_kick();
    return 0;
}
