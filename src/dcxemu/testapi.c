/* dcxemu test-only queries: what a test waits on instead of sleeping (the
 * engine thread's wait, threads blocked in destroy_cq).  The model reports here
 * through one-line hooks. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <string.h>

/* The engine's last wait: its doorbell value then, and the interval it chose. */
static _Atomic uint32_t engine_waiting;
static _Atomic uint32_t engine_seen;
static _Atomic uint64_t engine_interval_ns;
static _Atomic uint64_t engine_waits;
static _Atomic int cq_destroy_waiters;

void dcxemu_test_engine_waits(uint32_t seen, uint64_t interval_ns)
{
    atomic_store(&engine_seen, seen);
    atomic_store(&engine_interval_ns, interval_ns);
    atomic_fetch_add(&engine_waits, 1);
    atomic_store(&engine_waiting, 1);
}

void dcxemu_test_engine_runs(void)
{
    atomic_store(&engine_waiting, 0);
}

void dcxemu_test_cq_destroy_wait(int delta)
{
    atomic_fetch_add(&cq_destroy_waiters, delta);
}

DCXEMU_API int dcxemu_tclass_read(int *request, int *response)
{
    if (request == NULL || response == NULL) {
        return EINVAL;
    }
    *request  = atomic_load(&dcxemu_last_req_tclass);
    *response = atomic_load(&dcxemu_last_resp_tclass);
    return 0;
}

DCXEMU_API int dcxemu_engine_state_read(struct dcxemu_engine_state *out)
{
    int err;
    if (out == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    memset(out, 0, sizeof(*out));
    out->waits       = atomic_load(&engine_waits);
    out->interval_ns = atomic_load(&engine_interval_ns);
    pthread_mutex_lock(&dcxemu_reg_lock);
    for (uint32_t k = 0; k < dcxemu_qp_set.n; k++) {
        struct dcxemu_qp *qp = dcxemu_local_qps[dcxemu_qp_set.item[k]];
        out->timers += qp != NULL && atomic_load(&qp->deadline_ns) != 0;
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
    /* waiting, and no ring since it read its doorbell: it knows of everything
     * rung so far */
    out->quiescent =
            atomic_load(&engine_waiting) &&
            atomic_load(&engine_seen) ==
                    __atomic_load_n(&dcxemu_fab->members[dcxemu_me].doorbell,
                                    __ATOMIC_SEQ_CST);
    return 0;
}

DCXEMU_API int dcxemu_cq_destroy_waiters(void)
{
    return atomic_load(&cq_destroy_waiters);
}
