/* The mlx5 face's completion side: model completions out as CQE64s into the
 * application's CQ buffers, receive WQEs in from its SRQ and RQ buffers, and
 * completion events on its channels.
 *
 * A device writes CQEs into host memory while the host polls it; here the
 * process's own engine thread does that work (the model rings it for every
 * CQE pushed into a face CQ and for every SRQ a sender found empty), as does
 * every doorbell in the posting thread, so that a requester sees its own
 * completion when its doorbell store returns.  The engine also runs this
 * every millisecond: the backstop for doorbell stores nobody trapped (the
 * read-write UAR mode) and for receive WQEs posted with no doorbell at all.
 */
#define _GNU_SOURCE
#include "face.h"
#include "mlx5_cqe.h"
#include "mlx5_wqe.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PUMP_BACKSTOP_NS    1000000ull
#define PUMP_BATCH          16
#define CQ_DB_REQ_NOT_SOL   (1u << 24) /* MLX5_CQ_DB_REQ_NOT_SOL */
#define FACE_SCATTER_POISON 0xd5 /* receive bytes that went into the CQE */

/* Every queue the face serves in this process.  Doorbells and the engine read
 * the table (a queue stays alive while they work on it); creating and
 * destroying a queue writes it.  The engine never waits for a lock: on these
 * two cores a thread preempted while holding one would stall the poster for a
 * scheduler tick, so the engine skips what is busy (its holder does the work,
 * and a CQE that arrives meanwhile rings the engine again). */
static pthread_rwlock_t pump_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct face_obj **pump_objs;
static uint32_t pump_n, pump_cap;
static int pump_hooked;

void face_pump_register(struct face_obj *o)
{
    pthread_rwlock_wrlock(&pump_lock);
    if (pump_n == pump_cap) {
        uint32_t cap           = pump_cap ? 2 * pump_cap : 64;
        struct face_obj **objs = realloc(pump_objs, cap * sizeof(*objs));
        if (objs == NULL) {
            pthread_rwlock_unlock(&pump_lock);
            face_log("out of memory: a queue is not served");
            return;
        }
        pump_objs = objs;
        pump_cap  = cap;
    }
    pump_objs[pump_n++] = o;
    if (!pump_hooked) {
        pump_hooked = dcxemu_engine_hook(face_pump_all, PUMP_BACKSTOP_NS) == 0;
    }
    pthread_rwlock_unlock(&pump_lock);
}

void face_pump_unregister(struct face_obj *o)
{
    pthread_rwlock_wrlock(&pump_lock);
    for (uint32_t i = 0; i < pump_n; i++) {
        if (pump_objs[i] == o) {
            pump_objs[i] = pump_objs[--pump_n];
            break;
        }
    }
    pthread_rwlock_unlock(&pump_lock);
}

/* The face QP of a model QP number (pump_lock held). */
static struct face_qp *qp_by_num(struct face_file *f, uint32_t qpn)
{
    for (uint32_t i = 0; i < pump_n; i++) {
        struct face_qp *qp = (struct face_qp *)pump_objs[i];
        if (qp->obj.type == FACE_OBJ_QP && qp->obj.file == f &&
            qp->qpn == qpn) {
            return qp;
        }
    }
    return NULL;
}

struct face_obj *face_pump_find(struct face_file *f, const void *model)
{
    for (uint32_t i = 0; i < pump_n; i++) {
        struct face_obj *o = pump_objs[i];
        const void *m      = NULL;
        if (o->file != f) {
            continue;
        }
        if (o->type == FACE_OBJ_QP) {
            m = ((struct face_qp *)o)->qp;
        } else if (o->type == FACE_OBJ_CQ) {
            m = ((struct face_cq *)o)->cq;
        } else if (o->type == FACE_OBJ_SRQ) {
            m = ((struct face_srq *)o)->srq;
        }
        if (m == model) {
            return o;
        }
    }
    return NULL;
}

/* ---- completion channels: a pipe per channel; the application reads
 * struct ib_uverbs_comp_event_desc from its read end */

/* as many as the device's opens per process: a process with one context
 * per interface has a channel per interface (UCX's gtest opens 257) */
#define FACE_MAX_CHANNELS FACE_MAX_FILES
static struct {
    int rfd, wfd;
} channels[FACE_MAX_CHANNELS];
static int num_channels;
static pthread_mutex_t channel_lock = PTHREAD_MUTEX_INITIALIZER;

int face_channel_new(void)
{
    int pfd[2], slot = -1;
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        return -1;
    }
    (void)fcntl(pfd[1], F_SETFL, O_NONBLOCK);
    pthread_mutex_lock(&channel_lock);
    for (int i = 0; i < FACE_MAX_CHANNELS && slot < 0; i++) {
        if (channels[i].wfd == 0) {
            channels[i].rfd = pfd[0];
            channels[i].wfd = pfd[1];
            slot            = i;
            num_channels++;
        }
    }
    pthread_mutex_unlock(&channel_lock);
    if (slot < 0) {
        face_real_close(pfd[0]);
        face_real_close(pfd[1]);
        errno = EMFILE;
        return -1;
    }
    return pfd[0];
}

int face_channel_wfd(int rfd)
{
    int wfd = -1;
    pthread_mutex_lock(&channel_lock);
    for (int i = 0; i < FACE_MAX_CHANNELS; i++) {
        if (channels[i].wfd != 0 && channels[i].rfd == rfd) {
            wfd = channels[i].wfd;
        }
    }
    pthread_mutex_unlock(&channel_lock);
    return wfd;
}

/* The application closed a descriptor: if it was a channel, its write end
 * goes too. */
void face_channel_closed(int fd)
{
    if (__atomic_load_n(&num_channels, __ATOMIC_RELAXED) == 0) {
        return;
    }
    pthread_mutex_lock(&channel_lock);
    for (int i = 0; i < FACE_MAX_CHANNELS; i++) {
        if (channels[i].wfd != 0 && channels[i].rfd == fd) {
            face_real_close(channels[i].wfd);
            channels[i].wfd = 0;
            num_channels--;
        }
    }
    pthread_mutex_unlock(&channel_lock);
}

/* The events of one CQ not read yet leave its channel, as the kernel drops
 * them at destroy; returns how many (the others go back, in order). */
static uint32_t channel_drop(int wfd, uint64_t user_handle)
{
    struct ib_uverbs_comp_event_desc ev[64];
    uint32_t dropped = 0;
    int rfd = -1, pending = 0;
    ssize_t n;
    pthread_mutex_lock(&channel_lock);
    for (int i = 0; i < FACE_MAX_CHANNELS; i++) {
        if (channels[i].wfd == wfd) {
            rfd = channels[i].rfd;
        }
    }
    if (rfd < 0 || ioctl(rfd, FIONREAD, &pending) != 0 || pending <= 0) {
        pthread_mutex_unlock(&channel_lock);
        return 0;
    }
    if ((size_t)pending > sizeof(ev)) {
        pending = (int)sizeof(ev);
    }
    n = read(rfd, ev, (size_t)pending - (size_t)pending % sizeof(ev[0]));
    for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(ev[0]); i++) {
        if (ev[i].cq_handle == user_handle) {
            dropped++;
        } else {
            (void)!face_real_write(wfd, &ev[i], sizeof(ev[i]));
        }
    }
    pthread_mutex_unlock(&channel_lock);
    return dropped;
}

/* ---- CQs */

/* Completion events of the CQ the application has read (what destroy
 * reports, so that libibverbs waits for exactly those acks). */
uint32_t face_cq_events_read(struct face_cq *cq)
{
    uint32_t n;
    pthread_mutex_lock(&cq->lock);
    if (cq->channel_wfd >= 0) {
        cq->comp_events -= channel_drop(cq->channel_wfd, cq->obj.user_handle);
    }
    n = cq->comp_events;
    pthread_mutex_unlock(&cq->lock);
    return n;
}

static void cq_event(struct face_cq *cq)
{
    struct ib_uverbs_comp_event_desc ev = { .cq_handle = cq->obj.user_handle };
    if (cq->channel_wfd >= 0 &&
        face_real_write(cq->channel_wfd, &ev, sizeof(ev)) == sizeof(ev)) {
        cq->comp_events++;
        FACE_STAT(events, 1);
    }
}

/* A short receive of a scatter-to-CQE DCT goes into the CQE. The model placed
 * it in the buffers of the SRQ WQE already; on the device those bytes are
 * never written, so the face overwrites them with a pattern: a consumer that
 * ignores MLX5_INLINE_SCATTER_32 reads garbage, as on hardware. */
static void cqe_scatter(struct face_srq *srq, struct dcxemu_mlx5_cqe_info *ci)
{
    struct dcxemu_mlx5_sge sge[32];
    uint32_t n, left = ci->byte_cnt;
    uint16_t next;
    if (srq == NULL ||
        dcxemu_mlx5_srq_wqe_read(srq->buf, srq->stride, ci->wqe_counter,
                                 srq->max_sge, sge, &n, &next) != 0) {
        return; /* the data stays in the buffer, the CQE says nothing */
    }
    for (uint32_t i = 0; i < n && left > 0; i++) {
        uint32_t len = sge[i].length < left ? sge[i].length : left;
        void *buf    = (void *)(uintptr_t)sge[i].addr;
        memcpy(ci->scatter + (ci->byte_cnt - left), buf, len);
        memset(buf, FACE_SCATTER_POISON, len);
        left -= len;
    }
    ci->scatter_len = (uint8_t)(ci->byte_cnt - left);
}

/* The CQE a model completion becomes (pump_lock held). */
static int cqe_of(struct face_cq *cq, const struct ibv_wc *wc,
                  struct dcxemu_mlx5_cqe_info *ci)
{
    /* not (opcode & IBV_WC_RECV): the driver opcodes of raw WQEs and UMRs
     * (IBV_WC_DRIVER1..3) have that bit too, and are send completions */
    int recv = wc->opcode == IBV_WC_RECV ||
               wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM;
    struct face_qp *qp = qp_by_num(cq->obj.file, wc->qp_num);
    if (qp == NULL) {
        return 0; /* its QP is gone: so is the CQE, as on hardware */
    }
    memset(ci, 0, sizeof(*ci));
    ci->qpn             = qp->qpn;
    ci->srqn_uidx       = qp->uidx;
    ci->wqe_counter     = (uint16_t)wc->wr_id;
    ci->byte_cnt        = wc->byte_len;
    ci->vendor_err_synd = (uint8_t)wc->vendor_err;
    if (wc->status != IBV_WC_SUCCESS) {
        ci->opcode = recv || qp->is_dct ? MLX5_CQE_RESP_ERR : MLX5_CQE_REQ_ERR;
        ci->syndrome = dcxemu_mlx5_syndrome(wc->status);
        if (!recv && !qp->is_dct) {
            ci->wqe_opcode = qp->wqe[wc->wr_id & (qp->sq_wqebb_cnt - 1)].opcode;
        }
        return 1;
    }
    if (!recv) {
        ci->opcode     = MLX5_CQE_REQ;
        ci->wqe_opcode = qp->wqe[wc->wr_id & (qp->sq_wqebb_cnt - 1)].opcode;
        return 1;
    }
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        ci->opcode = MLX5_CQE_RESP_WR_IMM;
    } else {
        ci->opcode = (wc->wc_flags & IBV_WC_WITH_IMM) ? MLX5_CQE_RESP_SEND_IMM :
                                                        MLX5_CQE_RESP_SEND;
    }
    ci->imm     = wc->imm_data;
    ci->src_qpn = wc->src_qp;
    ci->slid    = wc->slid;
    ci->sl      = wc->sl;
    ci->grh     = (wc->wc_flags & IBV_WC_GRH) != 0;
    if (qp->scatter_cqe && cq->cqe_size == 64 && wc->byte_len > 0 &&
        wc->byte_len <= sizeof(ci->scatter)) {
        cqe_scatter(qp->srq, ci);
    }
    return 1;
}

/* An arm whose sequence number has not fired yet, and whether a CQE fires
 * it. */
static void
cq_arm_check(struct face_cq *cq, const struct ibv_wc *wc, int solicited)
{
    uint32_t arm = be32toh(__atomic_load_n(&cq->dbrec[1], __ATOMIC_ACQUIRE));
    uint32_t sn  = arm >> 28;
    if (!cq->armed || cq->last_arm_sn == sn + 1) {
        return;
    }
    if ((arm & CQ_DB_REQ_NOT_SOL) && wc != NULL &&
        wc->status == IBV_WC_SUCCESS && !solicited) {
        return; /* solicited only: a solicited CQE or an error fires it */
    }
    cq->armed       = 0;
    cq->last_arm_sn = sn + 1;
    cq_event(cq);
}

/* CQEs written that the application has not consumed yet (its consumer
 * index is in the CQ's doorbell record). */
static uint32_t cq_used(const struct face_cq *cq)
{
    uint32_t ci = be32toh(__atomic_load_n(&cq->dbrec[0], __ATOMIC_ACQUIRE));
    return (cq->pi - ci) & 0xffffff;
}

/* Take an object's lock: try only, from the engine (see pump_lock). */
static int obj_lock(pthread_mutex_t *lock, int try)
{
    if (try) {
        return pthread_mutex_trylock(lock) == 0;
    }
    pthread_mutex_lock(lock);
    return 1;
}

/* Move the model's completions into the application's CQ while it has room
 * (pump_lock held). */
static void cq_pump(struct face_cq *cq, int try)
{
    struct ibv_wc wc[PUMP_BATCH];
    uint8_t solicited[PUMP_BATCH];
    struct dcxemu_mlx5_cqe_info ci;
    if (!obj_lock(&cq->lock, try)) {
        return;
    }
    for (;;) {
        uint32_t used = cq_used(cq);
        int room      = used >= cq->ncqe ? 0 : (int)(cq->ncqe - used);
        int n;
        if (room == 0) {
            break; /* the rest waits in the model's CQ */
        }
        n = dcxemu_poll_cq_solicited(cq->cq,
                                     room < PUMP_BATCH ? room : PUMP_BATCH, wc,
                                     solicited);
        if (n <= 0) {
            break;
        }
        for (int i = 0; i < n; i++) {
            if (cqe_of(cq, &wc[i], &ci)) {
                ci.solicited = solicited[i];
                dcxemu_mlx5_cqe_write(cq->buf, cq->cqe_size, cq->ncqe, cq->pi++,
                                      &ci);
                FACE_STAT(cqes, 1);
                cq_arm_check(cq, &wc[i], solicited[i]);
            }
        }
    }
    pthread_mutex_unlock(&cq->lock);
}

/* A CQE the face makes itself (a WQE the model never saw), after what the
 * model completed before it (pump_lock held). */
void face_cq_write_now(struct face_cq *cq,
                       const struct dcxemu_mlx5_cqe_info *ci)
{
    cq_pump(cq, 0);
    pthread_mutex_lock(&cq->lock);
    if (cq_used(cq) >= cq->ncqe) {
        /* no room: an overrun, as the HCA reports it (once) */
        if (!cq->overrun) {
            cq->overrun = 1;
            face_log("CQ %u overrun: a CQE is lost", cq->obj.handle);
            face_async_event(cq->obj.file, &cq->obj, IBV_EVENT_CQ_ERR);
        }
    } else {
        dcxemu_mlx5_cqe_write(cq->buf, cq->cqe_size, cq->ncqe, cq->pi++, ci);
        cq_arm_check(cq, NULL, 0);
    }
    pthread_mutex_unlock(&cq->lock);
}

/* A CQ arm doorbell: the next CQE (or one already there) raises an event. */
void face_cq_arm(struct face_file *f, uint32_t cqn)
{
    struct face_cq *cq;
    uint32_t ci_idx;
    pthread_rwlock_rdlock(&pump_lock);
    cq = NULL;
    for (uint32_t i = 0; i < pump_n; i++) {
        if (pump_objs[i]->type == FACE_OBJ_CQ && pump_objs[i]->file == f &&
            pump_objs[i]->handle == cqn) {
            cq = (struct face_cq *)pump_objs[i];
        }
    }
    if (cq != NULL) {
        pthread_mutex_lock(&cq->lock);
        cq->armed = 1;
        ci_idx    = be32toh(cq->dbrec[1]) & 0xffffff;
        if (((cq->pi - ci_idx) & 0xffffff) != 0) {
            cq_arm_check(cq, NULL, 0);
        }
        pthread_mutex_unlock(&cq->lock);
    }
    pthread_rwlock_unlock(&pump_lock);
}

/* ---- receive WQEs */

/* The WQEs the application linked into its SRQ since the last pull go to
 * the model's SRQ, in the order the device takes them (pump_lock held). */
static void srq_pull(struct face_srq *srq, int try)
{
    struct dcxemu_mlx5_sge sge[32];
    struct ibv_sge isge[32];
    if (!obj_lock(&srq->lock, try)) {
        return;
    }
    for (;;) {
        uint16_t posted = (uint16_t)be32toh(
                __atomic_load_n(srq->dbrec, __ATOMIC_ACQUIRE));
        struct ibv_recv_wr wr, *bad;
        uint32_t n;
        uint16_t next;
        if (posted == srq->taken ||
            dcxemu_mlx5_srq_wqe_read(srq->buf, srq->stride,
                                     srq->head % srq->nwqe, srq->max_sge, sge,
                                     &n, &next) != 0) {
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            isge[i].addr   = sge[i].addr;
            isge[i].length = sge[i].length;
            isge[i].lkey   = sge[i].lkey;
        }
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = srq->head;
        wr.sg_list = isge;
        wr.num_sge = (int)n;
        if (ibv_post_srq_recv(srq->srq, &wr, &bad) != 0) {
            break; /* the model's SRQ is full: the rest comes later */
        }
        srq->head = next;
        srq->taken++;
        FACE_STAT(recv_wqes, 1);
    }
    pthread_mutex_unlock(&srq->lock);
}

/* An RC QP's own receive queue: a ring, consumed in order. */
static void rq_pull(struct face_qp *qp, int try)
{
    struct dcxemu_mlx5_sge sge[32];
    struct ibv_sge isge[32];
    if (qp->rq_wqe_cnt == 0 || qp->srq != NULL || qp->is_dct ||
        !obj_lock(&qp->rq_lock, try)) {
        return;
    }
    for (;;) {
        uint16_t posted = (uint16_t)be32toh(
                __atomic_load_n(&qp->dbrec[0], __ATOMIC_ACQUIRE));
        struct ibv_recv_wr wr, *bad;
        uint32_t n, idx = qp->rq_taken & (qp->rq_wqe_cnt - 1);
        if (posted == qp->rq_taken ||
            dcxemu_mlx5_rq_wqe_read(qp->rq_buf, qp->rq_stride, idx,
                                    qp->rq_stride / 16, sge, &n) != 0) {
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            isge[i].addr   = sge[i].addr;
            isge[i].length = sge[i].length;
            isge[i].lkey   = sge[i].lkey;
        }
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = idx;
        wr.sg_list = isge;
        wr.num_sge = (int)n;
        if (ibv_post_recv(qp->qp, &wr, &bad) != 0) {
            break;
        }
        qp->rq_taken++;
        FACE_STAT(recv_wqes, 1);
    }
    pthread_mutex_unlock(&qp->rq_lock);
}

/* ---- everything at once */

/* Every queue: receive WQEs in, doorbells nobody trapped (from the engine
 * only), completions out; what another thread holds is skipped (pump_lock
 * held). */
static void pump_locked(int engine)
{
    const int try = 1;
    for (uint32_t i = 0; i < pump_n; i++) {
        struct face_obj *o = pump_objs[i];
        if (o->type == FACE_OBJ_SRQ) {
            srq_pull((struct face_srq *)o, try);
        } else if (o->type == FACE_OBJ_QP) {
            struct face_qp *qp = (struct face_qp *)o;
            rq_pull(qp, try);
            if (engine && !qp->is_dct) {
                FACE_STAT(backstop_wqes, face_sq_backstop(qp));
            }
        }
    }
    for (uint32_t i = 0; i < pump_n; i++) {
        if (pump_objs[i]->type == FACE_OBJ_CQ) {
            cq_pump((struct face_cq *)pump_objs[i], try);
        }
    }
}

/* The engine's turn (its hook): what it can do without waiting. */
void face_pump_all(void)
{
    if (pthread_rwlock_tryrdlock(&pump_lock) != 0) {
        return;
    }
    pump_locked(1);
    if (pthread_mutex_trylock(&face_files_lock) == 0) {
        for (int i = 0; i < face_files_hwm; i++) {
            if (face_files[i] != NULL) {
                face_async_pump(face_files[i]);
            }
        }
        pthread_mutex_unlock(&face_files_lock);
    }
    pthread_rwlock_unlock(&pump_lock);
}

/* A send doorbell: the QP whose number the stored control segment names,
 * then every queue, so the poster sees its own completions.  The receive
 * WQEs posted so far are taken first: a device reads them from host memory
 * when a message arrives, so a send to a DCT of this process must find
 * them (no RNR where hardware has none). */
int face_sq_bf_check(struct face_file *f, uint32_t qpn, const uint8_t *bytes,
                     uint32_t len)
{
    struct face_qp *qp;
    int r = -1;
    pthread_rwlock_rdlock(&pump_lock);
    qp = qp_by_num(f, qpn);
    if (qp != NULL && !qp->is_dct) {
        r = face_sq_compare(qp, bytes, len);
    }
    pthread_rwlock_unlock(&pump_lock);
    return r;
}

int face_sq_pending(struct face_file *f, uint32_t qpn)
{
    struct face_qp *qp;
    int r = 0;
    pthread_rwlock_rdlock(&pump_lock);
    qp = qp_by_num(f, qpn);
    if (qp != NULL && !qp->is_dct) {
        r = face_sq_untaken(qp);
    }
    pthread_rwlock_unlock(&pump_lock);
    return r;
}

void face_sq_ring(struct face_file *f, uint32_t qpn)
{
    struct face_qp *qp;
    pthread_rwlock_rdlock(&pump_lock);
    /* receives posted before this doorbell are there before its sends, as
     * on hardware (a send to a DCT of this process must find them) */
    for (uint32_t i = 0; i < pump_n; i++) {
        if (pump_objs[i]->type == FACE_OBJ_SRQ) {
            srq_pull((struct face_srq *)pump_objs[i], 0);
        } else if (pump_objs[i]->type == FACE_OBJ_QP) {
            rq_pull((struct face_qp *)pump_objs[i], 0);
        }
    }
    qp = qp_by_num(f, qpn);
    if (qp != NULL && !qp->is_dct) {
        face_sq_doorbell(qp);
    }
    pump_locked(0);
    pthread_rwlock_unlock(&pump_lock);
}
