/* The mlx5 face's asynchronous events: the model's events on a file's
 * objects (a QP in error, an SRQ's limit, a CQ overrun, port and device
 * events), written to the context's async fd as the kernel writes them:
 * struct ib_uverbs_async_event_desc, the element being the user handle of the
 * object (the port number for port and device events).
 *
 * libibverbs waits, when it destroys a QP, SRQ or CQ, until the application
 * acked every event the kernel reported for it; events still unread leave the
 * fd at destroy, as the kernel drops them, and are not reported.
 */
#define _GNU_SOURCE
#include "face.h"

#include <errno.h>
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void async_write(struct face_file *f, uint64_t element, uint32_t type,
                        struct face_obj *o)
{
    struct ib_uverbs_async_event_desc ev;
    memset(&ev, 0, sizeof(ev));
    ev.element    = element;
    ev.event_type = type;
    if (f->async_wfd >= 0 &&
        face_real_write(f->async_wfd, &ev, sizeof(ev)) == sizeof(ev) &&
        o != NULL) {
        o->async_events++;
    }
}

/* An event the face raises itself (a CQ overrun). */
void face_async_event(struct face_file *f, struct face_obj *o, uint32_t type)
{
    async_write(f, o->user_handle, type, o);
}

/* Every event the model has for the file now (pump_lock held). */
void face_async_pump(struct face_file *f)
{
    struct ibv_context *ctx = __atomic_load_n(&f->ctx, __ATOMIC_ACQUIRE);
    struct ibv_async_event e;
    if (ctx == NULL) {
        return;
    }
    while (dcxemu_ibv_get_async_event(ctx, &e) == 0) {
        struct face_obj *o = NULL;
        uint64_t element;
        switch (e.event_type) {
        case IBV_EVENT_CQ_ERR:
            o = face_pump_find(f, e.element.cq);
            break;
        case IBV_EVENT_SRQ_LIMIT_REACHED:
        case IBV_EVENT_SRQ_ERR:
            o = face_pump_find(f, e.element.srq);
            break;
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_DEVICE_FATAL:
            element = (uint64_t)e.element.port_num;
            dcxemu_ibv_ack_async_event(&e);
            async_write(f, element, e.event_type, NULL);
            continue;
        default:
            o = face_pump_find(f, e.element.qp);
            break;
        }
        dcxemu_ibv_ack_async_event(&e);
        if (o != NULL) {
            async_write(f, o->user_handle, e.event_type, o);
        }
    }
}

/* Events of one object not read yet leave the async fd (the others go back,
 * in order); returns how many. */
static uint32_t async_drop(struct face_file *f, uint64_t element, int rfd)
{
    struct ib_uverbs_async_event_desc ev[64];
    uint32_t dropped = 0;
    int pending      = 0;
    ssize_t n;
    if (rfd < 0 || ioctl(rfd, FIONREAD, &pending) != 0 || pending <= 0) {
        return 0;
    }
    if ((size_t)pending > sizeof(ev)) {
        pending = (int)sizeof(ev);
    }
    n = read(rfd, ev, (size_t)pending - (size_t)pending % sizeof(ev[0]));
    for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(ev[0]); i++) {
        if (ev[i].element == element &&
            ev[i].event_type != IBV_EVENT_PORT_ACTIVE &&
            ev[i].event_type != IBV_EVENT_PORT_ERR &&
            ev[i].event_type != IBV_EVENT_DEVICE_FATAL) {
            dropped++;
        } else {
            (void)!face_real_write(f->async_wfd, &ev[i], sizeof(ev[i]));
        }
    }
    return dropped;
}

/* What destroy reports for the object: the events the application read. */
uint32_t face_async_events_read(struct face_obj *o)
{
    struct face_file *f = o->file;
    uint32_t dropped    = async_drop(f, o->user_handle, f->async_rfd);
    return o->async_events - dropped;
}
