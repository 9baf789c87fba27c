/* dcxemu events: the async event queue of a context, completion channels, and
 * the owner-side delivery of events raised in shared memory. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- async events
 * ---- */

struct async_rec {
    uint32_t type;
    uint32_t pad;
    uint64_t obj;
};

void dcxemu_async_post(struct dcxemu_context *ctx, enum ibv_event_type type,
                       void *obj)
{
    struct async_rec r = { .type = (uint32_t)type,
                           .pad  = 0,
                           .obj  = (uintptr_t)obj };
    if (write(ctx->async_wfd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
        /* pipe full: the application is not reading events; hardware drops them
         * too */
    }
}

DCXEMU_API int dcxemu_ibv_get_async_event(struct ibv_context *context,
                                          struct ibv_async_event *event)
{
    struct async_rec r;
    ssize_t n;
    int e = dcxemu_usable();
    if (e || context == NULL || event == NULL) {
        errno = e ? e : EINVAL;
        return -1;
    }
    n = read(context->async_fd, &r, sizeof(r));
    if (n != (ssize_t)sizeof(r)) {
        if (n >= 0) {
            errno = EIO;
        }
        return -1;
    }
    event->event_type = (enum ibv_event_type)r.type;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        event->element.cq = (struct ibv_cq *)(uintptr_t)r.obj;
        break;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR:
        event->element.srq = (struct ibv_srq *)(uintptr_t)r.obj;
        break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL: /* mlx5_ib_event: port 1 */
        event->element.port_num = (int)r.obj;
        break;
    default:
        event->element.qp = (struct ibv_qp *)(uintptr_t)r.obj;
        break;
    }
    return 0;
}

DCXEMU_API void dcxemu_ibv_ack_async_event(struct ibv_async_event *event)
{
    pthread_mutex_t *m = NULL;
    pthread_cond_t *cv = NULL;
    uint32_t *cnt      = NULL;
    if (event == NULL) {
        return;
    }
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
        struct ibv_cq *cq = event->element.cq;
        m                 = &cq->mutex;
        cv                = &cq->cond;
        cnt               = &cq->async_events_completed;
        break;
    }
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR: {
        struct ibv_srq *srq = event->element.srq;
        m                   = &srq->mutex;
        cv                  = &srq->cond;
        cnt                 = &srq->events_completed;
        break;
    }
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
        return;
    default: {
        struct ibv_qp *qp = event->element.qp;
        m                 = &qp->mutex;
        cv                = &qp->cond;
        cnt               = &qp->events_completed;
        break;
    }
    }
    pthread_mutex_lock(m);
    (*cnt)++;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(m);
}

/* ---------------------------------------------------------------- channels
 * ---- */

DCXEMU_API struct ibv_comp_channel *
dcxemu_ibv_create_comp_channel(struct ibv_context *context)
{
    struct dcxemu_channel *ch;
    int fds[2];
    int err;
    if ((err = dcxemu_usable()) != 0) {
        errno = err;
        return NULL;
    }
    if (context == NULL) {
        errno = EINVAL;
        return NULL;
    }
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        free(ch);
        errno = e;
        return NULL;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->ch.context = context;
    ch->ch.fd      = fds[0];
    ch->ch.refcnt  = 0;
    ch->wfd        = fds[1];
    return &ch->ch;
}

DCXEMU_API int dcxemu_ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct dcxemu_channel *ch = (struct dcxemu_channel *)channel;
    int busy;
    int err;
    if (channel == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    pthread_mutex_lock(&channel->context->mutex);
    busy = channel->refcnt != 0;
    pthread_mutex_unlock(&channel->context->mutex);
    if (busy) {
        return EBUSY;
    }
    close(ch->wfd);
    close(channel->fd);
    free(ch);
    return 0;
}

/* Owner side: turn events raised in shared memory into channel records and
 * async events. */
void dcxemu_deliver_events(void)
{
    pthread_mutex_lock(&dcxemu_reg_lock);
    for (uint32_t k = 0; k < dcxemu_cq_set.n; k++) {
        uint32_t i           = dcxemu_cq_set.item[k];
        struct dcxemu_cq *cq = dcxemu_local_cqs[i];
        uint64_t raised;
        if (cq == NULL) {
            continue;
        }
        raised = atomic_load(&cq->s->events_raised);
        while (cq->events_delivered < raised) {
            uint64_t rec              = (uint64_t)i << 32 | cq->cqx.handle;
            struct dcxemu_channel *ch = (struct dcxemu_channel *)cq->cqx.channel;
            if (ch == NULL) {
                cq->events_delivered = raised;
                break;
            }
            if (write(ch->wfd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec)) {
                break; /* pipe full: retried on the next wakeup */
            }
            cq->events_delivered++;
        }
        if (__atomic_exchange_n(&cq->s->overrun_event, 0, __ATOMIC_SEQ_CST)) {
            dcxemu_async_post(dcxemu_ctx(cq->cqx.context), IBV_EVENT_CQ_ERR,
                              cq);
        }
    }
    for (uint32_t k = 0; k < dcxemu_srq_set.n; k++) {
        struct dcxemu_srq *srq = dcxemu_local_srqs[dcxemu_srq_set.item[k]];
        if (srq != NULL && atomic_exchange(&srq->s->limit_event, 0)) {
            dcxemu_async_post(dcxemu_ctx(srq->srq.context),
                              IBV_EVENT_SRQ_LIMIT_REACHED, srq);
        }
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
}

DCXEMU_API int dcxemu_ibv_get_cq_event(struct ibv_comp_channel *channel,
                                       struct ibv_cq **cq, void **cq_context)
{
    int e = dcxemu_usable();
    if (e || channel == NULL || cq == NULL || cq_context == NULL) {
        errno = e ? e : EINVAL;
        return -1;
    }
    for (;;) {
        uint64_t rec;
        ssize_t n = read(channel->fd, &rec, sizeof(rec));
        struct dcxemu_cq *c;
        if (n != (ssize_t)sizeof(rec)) {
            if (n >= 0) {
                errno = EIO;
            }
            return -1;
        }
        pthread_mutex_lock(&dcxemu_reg_lock);
        c = dcxemu_local_cqs[(rec >> 32) % DCXEMU_MAX_CQS];
        if (c != NULL && c->cqx.handle == (uint32_t)rec &&
            c->cqx.channel == channel) {
            c->events_gotten++;
            *cq         = ibv_cq_ex_to_cq(&c->cqx);
            *cq_context = c->cqx.cq_context;
            pthread_mutex_unlock(&dcxemu_reg_lock);
            return 0;
        }
        pthread_mutex_unlock(&dcxemu_reg_lock);
        /* event of a CQ destroyed meanwhile: dropped, as the kernel drops it */
    }
}

DCXEMU_API void
dcxemu_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    if (cq == NULL) {
        return;
    }
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}
