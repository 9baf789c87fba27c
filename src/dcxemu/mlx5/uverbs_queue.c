/* The mlx5 face's queue commands: CQs, SRQs and QPs (RC, DCI, DCT).
 *
 * libmlx5 allocates every queue's buffer and doorbell record itself and
 * passes their addresses in the mlx5 part of the command; the face keeps
 * them beside the model object it creates for the queue: the model executes,
 * the face reads WQEs from the application's buffers and writes CQEs into
 * them.  Sizes are the ones libmlx5 computed, so both sides agree on where
 * each WQE and CQE lives.
 */
#define _GNU_SOURCE
#include "face.h"
#include "mlx5_wqe.h"

#include <errno.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
#include <stdlib.h>
#include <string.h>

/* MLX5_QP_FLAG_* of the create-QP command (mlx5-abi.h) */
#define QP_FLAG_SCATTER_CQE (1u << 1)
#define QP_FLAG_TYPE_DCT    (1u << 4)
#define QP_FLAG_TYPE_DCI    (1u << 5)
#define QP_FLAG_DCI_STREAM  (1u << 11)

/* ---- CQs */

int face_cmd_create_cq(struct face_file *f, const struct face_cmd *c)
{
    const int ex = c->ex;
    struct ib_uverbs_ex_create_cq_resp resp;
    struct mlx5_ib_create_cq_resp uresp;
    struct mlx5_ib_create_cq ureq;
    uint64_t user_handle;
    uint32_t cqe;
    int32_t channel;
    struct face_cq *cq;
    int err;
    if (ex) {
        struct ib_uverbs_ex_create_cq req;
        face_udata_in(&req, sizeof(req), c->in, c->in_len);
        user_handle = req.user_handle;
        cqe         = req.cqe;
        channel     = req.comp_channel;
    } else {
        struct ib_uverbs_create_cq req;
        face_udata_in(&req, sizeof(req), c->in, c->in_len);
        user_handle = req.user_handle;
        cqe         = req.cqe;
        channel     = req.comp_channel;
    }
    face_udata_in(&ureq, sizeof(ureq), c->udata, c->udata_len);
    if (f->ctx == NULL || ureq.buf_addr == 0 || ureq.db_addr == 0 ||
        (ureq.cqe_size != 64 && ureq.cqe_size != 128) ||
        ((cqe + 1) & cqe) != 0) {
        return EINVAL; /* libmlx5 sends cqe = entries - 1, a power of two */
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        return ENOMEM;
    }
    cq->channel_wfd = -1;
    if (channel >= 0 && (cq->channel_wfd = face_channel_wfd(channel)) < 0) {
        err = EINVAL;
        goto err_free;
    }
    cq->cq = dcxemu_ibv_create_cq(f->ctx, (int)cqe, NULL, NULL, 0);
    if (cq->cq == NULL) {
        err = errno ? errno : ENOMEM;
        goto err_free;
    }
    if ((err = dcxemu_cq_wake_owner(cq->cq)) != 0 ||
        (err = face_obj_add(f, &cq->obj, FACE_OBJ_CQ, user_handle)) != 0) {
        goto err_destroy;
    }
    cq->buf      = (void *)(uintptr_t)ureq.buf_addr;
    cq->dbrec    = (uint32_t *)(uintptr_t)ureq.db_addr;
    cq->ncqe     = cqe + 1;
    cq->cqe_size = ureq.cqe_size;
    pthread_mutex_init(&cq->lock, NULL);
    memset(&resp, 0, sizeof(resp));
    resp.base.cq_handle  = cq->obj.handle;
    resp.base.cqe        = cqe;
    resp.response_length = sizeof(resp);
    memset(&uresp, 0, sizeof(uresp));
    uresp.cqn = (uint32_t)cq->obj.handle;
    face_resp_out(c->resp, c->resp_len, &resp,
                  ex ? sizeof(resp) : sizeof(resp.base));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    face_pump_register(&cq->obj);
    return 0;

err_destroy:
    dcxemu_ibv_destroy_cq(cq->cq);
err_free:
    free(cq);
    return err;
}

static void cq_free(struct face_cq *cq)
{
    face_pump_unregister(&cq->obj);
    dcxemu_ibv_destroy_cq(cq->cq);
    pthread_mutex_destroy(&cq->lock);
    free(cq);
}

int face_cmd_destroy_cq(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_destroy_cq req;
    struct ib_uverbs_destroy_cq_resp resp;
    struct face_cq *cq;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    cq = face_obj_get(f, req.cq_handle, FACE_OBJ_CQ);
    if (cq == NULL) {
        return EINVAL;
    }
    if (face_cq_busy(f, cq)) {
        return EBUSY;
    }
    face_pump_unregister(&cq->obj); /* no more events from here on */
    resp.comp_events_reported  = face_cq_events_read(cq);
    resp.async_events_reported = face_async_events_read(&cq->obj);
    face_obj_del(f, &cq->obj);
    cq_free(cq);
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

/* ---- SRQs */

int face_cmd_create_srq(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_create_srq req;
    struct ib_uverbs_create_srq_resp resp;
    struct mlx5_ib_create_srq ureq;
    struct mlx5_ib_create_srq_resp uresp;
    struct ibv_srq_init_attr attr;
    struct face_srq *srq;
    struct face_pd *pd;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    face_udata_in(&ureq, sizeof(ureq), c->udata, c->udata_len);
    pd = face_obj_get(f, req.pd_handle, FACE_OBJ_PD);
    if (pd == NULL || ureq.buf_addr == 0 || ureq.db_addr == 0 ||
        req.max_sge == 0 || req.max_sge > 31) {
        return EINVAL;
    }
    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        return ENOMEM;
    }
    memset(&attr, 0, sizeof(attr));
    attr.attr.max_wr    = req.max_wr;
    attr.attr.max_sge   = req.max_sge;
    attr.attr.srq_limit = req.srq_limit;
    srq->srq            = dcxemu_ibv_create_srq(pd->pd, &attr);
    if (srq->srq == NULL) {
        err = errno ? errno : ENOMEM;
        goto err_free;
    }
    if ((err = dcxemu_srq_wake_owner(srq->srq)) != 0 ||
        (err = face_obj_add(f, &srq->obj, FACE_OBJ_SRQ, req.user_handle)) !=
                0) {
        goto err_destroy;
    }
    /* libmlx5's SRQ WQE: a next segment and max_sge data segments, a power
     * of two in size; max_wr + 1 of them */
    srq->buf     = (void *)(uintptr_t)ureq.buf_addr;
    srq->dbrec   = (uint32_t *)(uintptr_t)ureq.db_addr;
    srq->max_sge = req.max_sge;
    srq->stride  = 16 * (req.max_sge + 1);
    srq->nwqe    = req.max_wr + 1;
    pthread_mutex_init(&srq->lock, NULL);
    memset(&resp, 0, sizeof(resp));
    resp.srq_handle = srq->obj.handle;
    resp.max_wr     = attr.attr.max_wr;
    resp.max_sge    = attr.attr.max_sge;
    resp.srqn       = srq->obj.handle;
    memset(&uresp, 0, sizeof(uresp));
    uresp.srqn = srq->obj.handle;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    face_pump_register(&srq->obj);
    return 0;

err_destroy:
    dcxemu_ibv_destroy_srq(srq->srq);
err_free:
    free(srq);
    return err;
}

int face_cmd_modify_srq(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_modify_srq req;
    struct ibv_srq_attr attr;
    struct face_srq *srq;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    srq = face_obj_get(f, req.srq_handle, FACE_OBJ_SRQ);
    if (srq == NULL) {
        return EINVAL;
    }
    memset(&attr, 0, sizeof(attr));
    attr.max_wr    = req.max_wr;
    attr.srq_limit = req.srq_limit;
    return dcxemu_ibv_modify_srq(srq->srq, &attr, (int)req.attr_mask);
}

int face_cmd_query_srq(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_query_srq req;
    struct ib_uverbs_query_srq_resp resp;
    struct ibv_srq_attr attr;
    struct face_srq *srq;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    srq = face_obj_get(f, req.srq_handle, FACE_OBJ_SRQ);
    if (srq == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_ibv_query_srq(srq->srq, &attr)) != 0) {
        return err;
    }
    memset(&resp, 0, sizeof(resp));
    resp.max_wr    = attr.max_wr;
    resp.max_sge   = attr.max_sge;
    resp.srq_limit = attr.srq_limit;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

/* Destroy; *events: the asynchronous events the application read. */
static int srq_free(struct face_srq *srq, uint32_t *events)
{
    int err;
    /* out of the engine's pump first: it may be pulling WQEs into the
     * model's SRQ this moment (unregistering waits for it) */
    face_pump_unregister(&srq->obj);
    err = dcxemu_ibv_destroy_srq(srq->srq);
    if (err != 0) {
        face_pump_register(&srq->obj);
        return err;
    }
    *events = face_async_events_read(&srq->obj);
    pthread_mutex_destroy(&srq->lock);
    free(srq);
    return 0;
}


/* ---- QPs */

/* The create-QP fields both command forms share. */
struct qp_req {
    uint64_t user_handle;
    uint32_t pd_handle, send_cq_handle, recv_cq_handle, srq_handle;
    uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
    uint32_t max_inline_data;
    uint8_t sq_sig_all, qp_type, is_srq;
};

#define QP_REQ_COPY(_r, _q)                           \
    do {                                              \
        (_r)->user_handle     = (_q).user_handle;     \
        (_r)->pd_handle       = (_q).pd_handle;       \
        (_r)->send_cq_handle  = (_q).send_cq_handle;  \
        (_r)->recv_cq_handle  = (_q).recv_cq_handle;  \
        (_r)->srq_handle      = (_q).srq_handle;      \
        (_r)->max_send_wr     = (_q).max_send_wr;     \
        (_r)->max_recv_wr     = (_q).max_recv_wr;     \
        (_r)->max_send_sge    = (_q).max_send_sge;    \
        (_r)->max_recv_sge    = (_q).max_recv_sge;    \
        (_r)->max_inline_data = (_q).max_inline_data; \
        (_r)->sq_sig_all      = (_q).sq_sig_all;      \
        (_r)->qp_type         = (_q).qp_type;         \
        (_r)->is_srq          = (_q).is_srq;          \
    } while (0)

static void qp_req_read(const struct face_cmd *c, int ex, struct qp_req *r)
{
    if (ex) {
        struct ib_uverbs_ex_create_qp q;
        face_udata_in(&q, sizeof(q), c->in, c->in_len);
        QP_REQ_COPY(r, q);
    } else {
        struct ib_uverbs_create_qp q;
        face_udata_in(&q, sizeof(q), c->in, c->in_len);
        QP_REQ_COPY(r, q);
    }
}

static uint32_t pow2_at_least(uint32_t v)
{
    uint32_t p = 1;
    while (p < v) {
        p <<= 1;
    }
    return p;
}

/* The model's QP for the command: a DCI, a DCT or an RC QP. */
static struct ibv_qp *qp_model_create(struct face_file *f, struct face_qp *qp,
                                      const struct qp_req *r,
                                      const struct mlx5_ib_create_qp *u)
{
    struct ibv_qp_init_attr_ex a;
    struct mlx5dv_qp_init_attr dv;
    struct ibv_qp *mq;
    memset(&a, 0, sizeof(a));
    memset(&dv, 0, sizeof(dv));
    a.pd                  = qp->pd->pd;
    a.send_cq             = qp->send_cq != NULL ? qp->send_cq->cq : NULL;
    a.recv_cq             = qp->recv_cq != NULL ? qp->recv_cq->cq : NULL;
    a.srq                 = qp->srq != NULL ? qp->srq->srq : NULL;
    a.sq_sig_all          = r->sq_sig_all;
    a.comp_mask           = IBV_QP_INIT_ATTR_PD;
    a.cap.max_send_sge    = r->max_send_sge;
    a.cap.max_inline_data = r->max_inline_data;
    a.cap.max_recv_wr     = r->max_recv_wr;
    a.cap.max_recv_sge    = r->max_recv_sge;
    /* room for every WQE the application's queue can hold at once: one per
     * basic block (its producers track their room in basic blocks, and the
     * model frees a slot only once its completion, or a later one, is
     * polled) */
    a.cap.max_send_wr = pow2_at_least(r->max_send_wr);
    if (u->sq_wqe_count > a.cap.max_send_wr) {
        a.cap.max_send_wr = u->sq_wqe_count;
    }
    if (u->flags & (QP_FLAG_TYPE_DCT | QP_FLAG_TYPE_DCI)) {
        a.qp_type    = IBV_QPT_DRIVER;
        dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
    } else {
        a.qp_type = r->qp_type;
    }
    if (u->flags & QP_FLAG_TYPE_DCT) {
        dv.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
        dv.dc_init_attr.dct_access_key = u->access_key;
        memset(&a.cap, 0, sizeof(a.cap));
        a.send_cq = a.recv_cq;
        return dcxemu_mlx5dv_create_qp(f->ctx, &a, &dv);
    }
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
                       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                       IBV_QP_EX_WITH_RDMA_READ |
                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    if (u->flags & QP_FLAG_TYPE_DCI) {
        dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
        if (u->flags & QP_FLAG_DCI_STREAM) {
            /* libmlx5 checked the logs against the caps it was given */
            dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
            dv.dc_init_attr.dci_streams.log_num_concurent =
                    u->dci_streams.log_num_concurent;
            dv.dc_init_attr.dci_streams.log_num_errored =
                    u->dci_streams.log_num_errored;
            if (face_trace) {
                face_log("CREATE_QP: a DCI with %u streams, %u may fail",
                         1u << u->dci_streams.log_num_concurent,
                         1u << u->dci_streams.log_num_errored);
            }
        }
        /* masked atomics and NOPs arrive as raw WQEs */
        dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
    } else {
        /* an RC QP: data, and UMR and LOCAL_INV as dcx's UMR host */
        a.send_ops_flags |= IBV_QP_EX_WITH_LOCAL_INV;
        dv.comp_mask      = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
                            MLX5DV_QP_EX_WITH_MR_LIST |
                            MLX5DV_QP_EX_WITH_RAW_WQE;
    }
    mq = dcxemu_mlx5dv_create_qp(f->ctx, &a, &dv);
    if (mq == NULL && errno == EOPNOTSUPP) {
        /* a device without atomics: an atomic WQE then completes in error,
         * as the HCA's would, instead of the QP not being made at all */
        a.send_ops_flags &= ~(uint64_t)(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
        mq = dcxemu_mlx5dv_create_qp(f->ctx, &a, &dv);
    }
    if (mq == NULL && errno == EOPNOTSUPP && (u->flags & QP_FLAG_TYPE_DCI)) {
        dv.comp_mask &= ~MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = 0;
        mq                = dcxemu_mlx5dv_create_qp(f->ctx, &a, &dv);
    }
    return mq;
}

static int
qp_queues(struct face_file *f, struct face_qp *qp, const struct qp_req *r)
{
    qp->pd = face_obj_get(f, r->pd_handle, FACE_OBJ_PD);
    if (qp->pd == NULL) {
        return EINVAL;
    }
    qp->send_cq = face_obj_get(f, r->send_cq_handle, FACE_OBJ_CQ);
    qp->recv_cq = face_obj_get(f, r->recv_cq_handle, FACE_OBJ_CQ);
    if (r->is_srq) {
        qp->srq = face_obj_get(f, r->srq_handle, FACE_OBJ_SRQ);
        if (qp->srq == NULL) {
            return EINVAL;
        }
    }
    return 0;
}

int face_cmd_create_qp(struct face_file *f, const struct face_cmd *c)
{
    const int ex = c->ex;
    struct ib_uverbs_ex_create_qp_resp resp;
    struct mlx5_ib_create_qp_resp uresp;
    struct mlx5_ib_create_qp ureq;
    struct qp_req r;
    struct face_qp *qp;
    int err;
    qp_req_read(c, ex, &r);
    face_udata_in(&ureq, sizeof(ureq), c->udata, c->udata_len);
    if (f->ctx == NULL) {
        return EINVAL;
    }
    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        return ENOMEM;
    }
    if ((err = qp_queues(f, qp, &r)) != 0) {
        goto err_free;
    }
    qp->is_dct = !!(ureq.flags & QP_FLAG_TYPE_DCT);
    /* libmlx5 asks for it where the device offers it (SCAT2CQE_DCT), unless
     * MLX5_SCATTER_TO_CQE=0 or the QP's create flags say otherwise */
    qp->scatter_cqe = qp->is_dct && (ureq.flags & QP_FLAG_SCATTER_CQE);
    qp->kind = (ureq.flags & QP_FLAG_TYPE_DCI) ? FACE_QP_DCI : FACE_QP_RC;
    qp->dci_streams = qp->kind == FACE_QP_DCI &&
                      (ureq.flags & QP_FLAG_DCI_STREAM) != 0;
    if (!qp->is_dct) {
        if (ureq.buf_addr == 0 || ureq.db_addr == 0 || ureq.sq_wqe_count == 0 ||
            (ureq.sq_wqe_count & (ureq.sq_wqe_count - 1)) != 0) {
            err = EINVAL;
            goto err_free;
        }
        qp->sq_buf = (char *)(uintptr_t)ureq.buf_addr +
                     ((size_t)ureq.rq_wqe_count << ureq.rq_wqe_shift);
        qp->sq_wqebb_cnt  = ureq.sq_wqe_count;
        qp->dbrec         = (uint32_t *)(uintptr_t)ureq.db_addr;
        qp->rq_buf        = (void *)(uintptr_t)ureq.buf_addr;
        qp->rq_wqe_cnt    = ureq.rq_wqe_count;
        qp->rq_stride     = ureq.rq_wqe_count ? 1u << ureq.rq_wqe_shift : 0;
        qp->wqe           = calloc(qp->sq_wqebb_cnt, sizeof(*qp->wqe));
        qp->dec           = malloc(sizeof(*qp->dec));
        qp->raw           = malloc(FACE_MAX_WQE);
        qp->max_wqe_bytes = FACE_MAX_WQE;
        if (qp->wqe == NULL || qp->dec == NULL || qp->raw == NULL) {
            err = ENOMEM;
            goto err_free;
        }
    }
    qp->uidx = ureq.uidx;
    qp->qp   = qp_model_create(f, qp, &r, &ureq);
    if (qp->qp == NULL) {
        err = errno ? errno : EINVAL;
        goto err_free;
    }
    if (!qp->is_dct) {
        qp->qpx = dcxemu_ibv_qp_to_qp_ex(qp->qp);
        qp->dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(qp->qpx);
    }
    /* receives come from the application's queue, without a doorbell */
    if (qp->rq_wqe_cnt != 0 && qp->srq == NULL &&
        (err = dcxemu_qp_wake_owner(qp->qp)) != 0) {
        goto err_destroy;
    }
    if ((err = face_obj_add(f, &qp->obj, FACE_OBJ_QP, r.user_handle)) != 0) {
        goto err_destroy;
    }
    qp->qpn = qp->qp->qp_num;
    pthread_mutex_init(&qp->sq_lock, NULL);
    qp->bfreg = -1;
    pthread_mutex_init(&qp->rq_lock, NULL);
    memset(&resp, 0, sizeof(resp));
    resp.base.qp_handle       = qp->obj.handle;
    resp.base.qpn             = qp->qpn;
    resp.base.max_send_wr     = r.max_send_wr;
    resp.base.max_recv_wr     = r.max_recv_wr;
    resp.base.max_send_sge    = r.max_send_sge;
    resp.base.max_recv_sge    = r.max_recv_sge;
    resp.base.max_inline_data = r.max_inline_data;
    resp.response_length      = sizeof(resp);
    memset(&uresp, 0, sizeof(uresp));
    /* with BlueFlame a register as the kernel gives it, else every QP
     * rings the first UAR's doorbell */
    uresp.bfreg_index = f->bf_half ? face_bfreg_get(f, &qp->bfreg) : 0;
    face_resp_out(c->resp, c->resp_len, &resp,
                  ex ? sizeof(resp) : sizeof(resp.base));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    face_pump_register(&qp->obj);
    return 0;

err_destroy:
    dcxemu_ibv_destroy_qp(qp->qp);
err_free:
    free(qp->wqe);
    free(qp->dec);
    free(qp->raw);
    free(qp);
    return err;
}

static void ah_attr_of(const struct ib_uverbs_qp_dest *d, struct ibv_ah_attr *a)
{
    memset(a, 0, sizeof(*a));
    memcpy(a->grh.dgid.raw, d->dgid, sizeof(d->dgid));
    a->grh.flow_label    = d->flow_label;
    a->grh.sgid_index    = d->sgid_index;
    a->grh.hop_limit     = d->hop_limit;
    a->grh.traffic_class = d->traffic_class;
    a->dlid              = d->dlid;
    a->sl                = d->sl;
    a->src_path_bits     = d->src_path_bits;
    a->static_rate       = d->static_rate;
    a->is_global         = d->is_global;
    a->port_num          = d->port_num;
}

/* MLX5_IB_MODIFY_QP_OOO_DP (rdma-core 55's mlx5-abi.h): libmlx5 sends it
 * with RESET->INIT of a QP created with MLX5DV_QP_CREATE_OOO_DP.  As the
 * kernel: an unknown bit is EOPNOTSUPP, the bit on another transition
 * EINVAL, on a QP type the device does not offer it for EOPNOTSUPP. */
#define MODIFY_QP_OOO_DP (1u << 0)
static int modify_qp_ooo(struct face_qp *qp,
                         const struct ib_uverbs_modify_qp *m,
                         const struct mlx5_ib_modify_qp *ureq)
{
    if (ureq->comp_mask & ~MODIFY_QP_OOO_DP) {
        return EOPNOTSUPP;
    }
    if (!(ureq->comp_mask & MODIFY_QP_OOO_DP)) {
        return 0;
    }
    if (!(m->attr_mask & IBV_QP_STATE) || m->qp_state != IBV_QPS_INIT) {
        return EINVAL;
    }
    return dcxemu_qp_set_ooo_dp(qp->qp);
}

int face_cmd_modify_qp(struct face_file *f, const struct face_cmd *c)
{
    const int ex = c->ex;
    struct ib_uverbs_ex_modify_qp req;
    struct ib_uverbs_ex_modify_qp_resp resp;
    struct mlx5_ib_modify_qp_resp uresp;
    const struct ib_uverbs_modify_qp *m = &req.base;
    struct mlx5_ib_modify_qp ureq;
    struct ibv_qp_attr a;
    struct face_qp *qp;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    face_udata_in(&ureq, sizeof(ureq), c->udata, c->udata_len);
    qp = face_obj_get(f, m->qp_handle, FACE_OBJ_QP);
    if (qp == NULL) {
        return EINVAL;
    }
    if ((err = modify_qp_ooo(qp, m, &ureq)) != 0) {
        return err;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state            = m->qp_state;
    a.cur_qp_state        = m->cur_qp_state;
    a.path_mtu            = m->path_mtu;
    a.path_mig_state      = m->path_mig_state;
    a.qkey                = m->qkey;
    a.rq_psn              = m->rq_psn;
    a.sq_psn              = m->sq_psn;
    a.dest_qp_num         = m->dest_qp_num;
    a.qp_access_flags     = (int)m->qp_access_flags;
    a.pkey_index          = m->pkey_index;
    a.alt_pkey_index      = m->alt_pkey_index;
    a.en_sqd_async_notify = m->en_sqd_async_notify;
    a.max_rd_atomic       = m->max_rd_atomic;
    a.max_dest_rd_atomic  = m->max_dest_rd_atomic;
    a.min_rnr_timer       = m->min_rnr_timer;
    a.port_num            = m->port_num;
    a.timeout             = m->timeout;
    a.retry_cnt           = m->retry_cnt;
    a.rnr_retry           = m->rnr_retry;
    a.alt_port_num        = m->alt_port_num;
    a.alt_timeout         = m->alt_timeout;
    ah_attr_of(&m->dest, &a.ah_attr);
    ah_attr_of(&m->alt_dest, &a.alt_ah_attr);
    if (ex) {
        a.rate_limit = req.rate_limit;
    }
    err = dcxemu_ibv_modify_qp(qp->qp, &a, (int)m->attr_mask);
    if (err != 0) {
        return err;
    }
    if ((m->attr_mask & IBV_QP_STATE) && m->qp_state == IBV_QPS_RESET) {
        face_sq_reset(qp);
    }
    if (qp->is_dct) {
        qp->qpn = qp->qp->qp_num; /* a DCT's number comes with RTR */
    }
    memset(&resp, 0, sizeof(resp));
    resp.response_length = sizeof(resp);
    memset(&uresp, 0, sizeof(uresp));
    uresp.response_length = sizeof(uresp);
    uresp.dctn            = qp->qpn;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    return 0;
}

static void dest_of(const struct ibv_ah_attr *a, struct ib_uverbs_qp_dest *d)
{
    memset(d, 0, sizeof(*d));
    memcpy(d->dgid, a->grh.dgid.raw, sizeof(d->dgid));
    d->flow_label    = a->grh.flow_label;
    d->sgid_index    = a->grh.sgid_index;
    d->hop_limit     = a->grh.hop_limit;
    d->traffic_class = a->grh.traffic_class;
    d->dlid          = a->dlid;
    d->sl            = a->sl;
    d->src_path_bits = a->src_path_bits;
    d->static_rate   = a->static_rate;
    d->is_global     = a->is_global;
    d->port_num      = a->port_num;
}

int face_cmd_query_qp(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_query_qp req;
    struct ib_uverbs_query_qp_resp resp;
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr a;
    struct face_qp *qp;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    qp = face_obj_get(f, req.qp_handle, FACE_OBJ_QP);
    if (qp == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_ibv_query_qp(qp->qp, &a, (int)req.attr_mask, &init)) !=
        0) {
        return err;
    }
    memset(&resp, 0, sizeof(resp));
    dest_of(&a.ah_attr, &resp.dest);
    dest_of(&a.alt_ah_attr, &resp.alt_dest);
    resp.max_send_wr        = a.cap.max_send_wr;
    resp.max_recv_wr        = a.cap.max_recv_wr;
    resp.max_send_sge       = a.cap.max_send_sge;
    resp.max_recv_sge       = a.cap.max_recv_sge;
    resp.max_inline_data    = a.cap.max_inline_data;
    resp.qkey               = a.qkey;
    resp.rq_psn             = a.rq_psn;
    resp.sq_psn             = a.sq_psn;
    resp.dest_qp_num        = a.dest_qp_num;
    resp.qp_access_flags    = (uint32_t)a.qp_access_flags;
    resp.pkey_index         = a.pkey_index;
    resp.alt_pkey_index     = a.alt_pkey_index;
    resp.qp_state           = a.qp_state;
    resp.cur_qp_state       = a.cur_qp_state;
    resp.path_mtu           = a.path_mtu;
    resp.path_mig_state     = a.path_mig_state;
    resp.sq_draining        = a.sq_draining;
    resp.max_rd_atomic      = a.max_rd_atomic;
    resp.max_dest_rd_atomic = a.max_dest_rd_atomic;
    resp.min_rnr_timer      = a.min_rnr_timer;
    resp.port_num           = a.port_num;
    resp.timeout            = a.timeout;
    resp.retry_cnt          = a.retry_cnt;
    resp.rnr_retry          = a.rnr_retry;
    resp.alt_port_num       = a.alt_port_num;
    resp.alt_timeout        = a.alt_timeout;
    resp.sq_sig_all         = (uint8_t)init.sq_sig_all;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

/* Destroy; *events: the asynchronous events the application read. */
static int qp_free(struct face_qp *qp, uint32_t *events)
{
    int err;
    /* out of the engine's pump first (receive WQEs, the backstop) */
    face_pump_unregister(&qp->obj);
    err = dcxemu_ibv_destroy_qp(qp->qp);
    if (err != 0) {
        face_pump_register(&qp->obj);
        return err;
    }
    *events = face_async_events_read(&qp->obj);
    face_bfreg_put(qp->obj.file, qp->bfreg);
    pthread_mutex_destroy(&qp->sq_lock);
    pthread_mutex_destroy(&qp->rq_lock);
    free(qp->wqe);
    free(qp->dec);
    free(qp->raw);
    free(qp);
    return 0;
}

/* An SRQ or a QP goes; *events: the asynchronous events read for it. */
static int queue_free(struct face_obj *o, uint32_t *events)
{
    return o->type == FACE_OBJ_QP ? qp_free((struct face_qp *)o, events) :
                                    srq_free((struct face_srq *)o, events);
}

/* DESTROY_SRQ and DESTROY_QP: the same request (the response address, the
 * handle) and response (the events reported). */
static int
destroy_queue(struct face_file *f, const struct face_cmd *c, int type)
{
    struct ib_uverbs_destroy_qp req;
    struct ib_uverbs_destroy_qp_resp resp = {};
    struct face_obj *o;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    o = face_obj_get(f, req.qp_handle, type);
    if (o == NULL) {
        return EINVAL;
    }
    face_obj_del(f, o);
    if ((err = queue_free(o, &resp.events_reported)) != 0) {
        f->objs[o->handle] = o; /* still in use */
        return err;
    }
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

int face_cmd_destroy_srq(struct face_file *f, const struct face_cmd *c)
{
    return destroy_queue(f, c, FACE_OBJ_SRQ);
}

int face_cmd_destroy_qp(struct face_file *f, const struct face_cmd *c)
{
    return destroy_queue(f, c, FACE_OBJ_QP);
}

/* A CQ that a QP of the file still uses cannot go. */
int face_cq_busy(struct face_file *f, struct face_cq *cq)
{
    for (uint32_t h = 0; h < f->nobjs; h++) {
        struct face_qp *qp = (struct face_qp *)f->objs[h];
        if (qp != NULL && qp->obj.type == FACE_OBJ_QP &&
            (qp->send_cq == cq || qp->recv_cq == cq)) {
            return 1;
        }
    }
    return 0;
}

void face_queue_release(struct face_obj *o)
{
    uint32_t events;
    switch (o->type) {
    case FACE_OBJ_QP:
        (void)qp_free((struct face_qp *)o, &events);
        break;
    case FACE_OBJ_SRQ:
        (void)srq_free((struct face_srq *)o, &events);
        break;
    case FACE_OBJ_CQ:
        cq_free((struct face_cq *)o);
        break;
    default:
        free(o);
        break;
    }
}
