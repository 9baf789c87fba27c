/* dcxemu control API: fault injection, device-fatal mode and the other
 * test-only controls. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The shared QP-table slot that currently carries number qpn, or NULL (fabric
 * lock held). */
static struct dcxemu_shm_qp *slot_of(uint32_t qpn)
{
    struct dcxemu_shm_qp *s;
    if (qpn == 0 || qpn >= (1u << 24)) {
        return NULL;
    }
    s = &dcxemu_fab->qps[qpn & (DCXEMU_MAX_QPS - 1)];
    return s->in_use && s->qpn == qpn ? s : NULL;
}

DCXEMU_API int
dcxemu_fault_inject(enum dcxemu_fault_kind kind, uint32_t target, uint64_t arg)
{
    struct dcxemu_shm_qp *s;
    int err;
    if ((err = dcxemu_attach()) != 0) {
        return err;
    }
    switch (kind) {
    case DCXEMU_FAULT_DCT_UNREACHABLE:
        if (arg > 1)
            return EINVAL;
        break;
    case DCXEMU_FAULT_DROP_NEXT:
        if (arg > UINT32_MAX)
            return EINVAL;
        break;
    case DCXEMU_FAULT_FORCE_STATUS:
        if (arg == IBV_WC_SUCCESS || arg > IBV_WC_TM_RNDV_INCOMPLETE)
            return EINVAL;
        break;
    case DCXEMU_FAULT_DELAY:
        if (arg > 10000000)
            return EINVAL;
        break; /* at most 10 s */
    default:
        return EINVAL;
    }
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    s = slot_of(target);
    if (s == NULL) {
        err = ENOENT;
    } else if ((kind == DCXEMU_FAULT_DCT_UNREACHABLE ||
                kind == DCXEMU_FAULT_DROP_NEXT) &&
               !s->is_dct) {
        err = EINVAL;
    } else {
        switch (kind) {
        case DCXEMU_FAULT_DCT_UNREACHABLE:
            s->fault_unreachable = (uint32_t)arg;
            break;
        case DCXEMU_FAULT_DROP_NEXT:
            s->fault_drop_next = (uint32_t)arg;
            break;
        case DCXEMU_FAULT_FORCE_STATUS:
            s->fault_force_status = (uint32_t)arg + 1;
            break;
        default:
            __atomic_store_n(&s->fault_delay_us, (uint32_t)arg,
                             __ATOMIC_RELAXED);
            break;
        }
    }
    dcxemu_unlock();
    return err;
}

DCXEMU_API int dcxemu_fault_clear_all(void)
{
    int err;
    if ((err = dcxemu_attach()) != 0 || (err = dcxemu_lock()) != 0) {
        return err;
    }
    for (unsigned i = 0; i < dcxemu_fab->qp_hwm && i < DCXEMU_MAX_QPS; i++) {
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        s->fault_unreachable = s->fault_drop_next = s->fault_force_status = 0;
        __atomic_store_n(&s->fault_delay_us, 0, __ATOMIC_RELAXED);
    }
    dcxemu_unlock();
    return 0;
}

DCXEMU_API int dcxemu_objects_read(struct dcxemu_objects *out)
{
    int err;
    if (out == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_attach()) != 0 || (err = dcxemu_lock()) != 0) {
        return err;
    }
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < dcxemu_fab->qp_hwm && i < DCXEMU_MAX_QPS; i++) {
        const struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        if (s->in_use && s->owner == (uint16_t)dcxemu_me &&
            s->owner_token == dcxemu_my_token) {
            if (s->is_dct) {
                out->dcts++;
            } else {
                out->qps++;
            }
        }
    }
    dcxemu_unlock();
    return 0;
}

DCXEMU_API int
dcxemu_rc_qp_numbers(uint32_t *nums, unsigned max, unsigned *count)
{
    unsigned n = 0;
    int err;
    if (count == NULL || (nums == NULL && max > 0)) {
        return EINVAL;
    }
    if ((err = dcxemu_attach()) != 0) {
        return err;
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    for (unsigned i = 0; i < DCXEMU_MAX_QPS; i++) {
        const struct dcxemu_qp *qp = dcxemu_local_qps[i];
        if (qp != NULL && qp->is_rc) {
            if (n < max) {
                nums[n] = qp->qpx.qp_base.qp_num;
            }
            n++;
        }
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
    *count = n;
    return 0;
}

DCXEMU_API int dcxemu_device_fatal(int dev)
{
    struct dcxemu_context *c;
    int err;
    if ((err = dcxemu_attach()) != 0) {
        return err;
    }
    if (dev < 0 || dev >= dcxemu_cfg.num_devices) {
        return EINVAL;
    }
    if (__atomic_exchange_n(&dcxemu_dev_fatal[dev], 1, __ATOMIC_ACQ_REL)) {
        return 0; /* raised once, as the HCA's health poller does */
    }
    /* Lock order: process registry, then fabric. */
    pthread_mutex_lock(&dcxemu_reg_lock);
    if (dcxemu_lock() == 0) {
        /* a dead HCA answers nobody: its DCTs fail senders after their retries */
        for (unsigned i = 0; i < DCXEMU_MAX_QPS; i++) {
            const struct dcxemu_qp *qp = dcxemu_local_qps[i];
            if (qp != NULL && qp->is_dct && qp->ctx->dev_index == dev) {
                dcxemu_fab->qps[qp->idx].fault_unreachable = 1;
            }
        }
        dcxemu_unlock();
    }
    for (c = dcxemu_contexts; c != NULL; c = c->next) {
        if (c->dev_index == dev) {
            dcxemu_async_post(c, IBV_EVENT_DEVICE_FATAL, (void *)(uintptr_t)1);
        }
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return 0;
}

DCXEMU_API int dcxemu_counters_read(int dev, enum dcxemu_counter_scope scope,
                                    struct dcxemu_counters *out)
{
    const uint64_t *src;
    uint64_t *dst = (uint64_t *)out;
    int err;
    if (out == NULL || dev < 0 || dev >= DCXEMU_MAX_DEVICES ||
        (scope != DCXEMU_SCOPE_PROCESS && scope != DCXEMU_SCOPE_FABRIC)) {
        return EINVAL;
    }
    if ((err = dcxemu_attach()) != 0) {
        return err;
    }
    src = (const uint64_t *)(scope == DCXEMU_SCOPE_FABRIC ?
                                     &dcxemu_fab->dev_cnt[dev] :
                                     &dcxemu_fab->member_cnt[dcxemu_me][dev]);
    for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++) {
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
    return 0;
}
