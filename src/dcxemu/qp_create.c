/* dcxemu QP creation: send-queue sizing, the shared QP slot, RC QPs (also the
 * loopback one that hosts UMR), DC initiators (DCI) and targets (DCT), and the
 * ibv_qp_ex / mlx5dv_qp_ex views. */
#define _GNU_SOURCE
#include "dcxemu_int.h"
#include "wr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEND_OPS                                              \
    (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |             \
     IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |   \
     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | \
     IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV)
#define ATOMIC_SEND_OPS \
    (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
/* Operations the model executes; the others are refused at create time. */
#define MODEL_SEND_OPS                                                \
    (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |             \
     IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |   \
     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static uint32_t roundup_pow2(uint64_t v)
{
    uint64_t r = 1;
    while (r < v) {
        r <<= 1;
    }
    return (uint32_t)r;
}

/* docs/device-spec.md §2.1 sizing; 0 or errno, caps written back */
static int size_sq(struct ibv_qp_cap *cap, uint64_t ops, uint64_t dv_ops,
                   int dc, size_t *wqe_out)
{
    uint32_t ovh = 16, wqe, inl;
    if (ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
               IBV_QP_EX_WITH_RDMA_READ)) {
        ovh = 32;
    }
    if (ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
               IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)) {
        ovh = 48;
    }
    if ((ops & (IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW)) ||
        (dv_ops &
         (MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST))) {
        ovh = 192;
    }
    if (dc) {
        ovh += 48; /* datagram segment of a DC WQE */
    }
    if (cap->max_send_wr > DCXEMU_MAX_QP_WR ||
        cap->max_send_sge > DCXEMU_MAX_SGE ||
        cap->max_inline_data > dcxemu_cfg.max_wqe) {
        return EINVAL;
    }
    wqe = ovh + 16 * cap->max_send_sge;
    inl = cap->max_inline_data ?
                  ovh + ((4 + cap->max_inline_data + 15) & ~15u) :
                  0;
    if (inl > wqe) {
        wqe = inl;
    }
    wqe = (wqe + 63) & ~63u;
    if (wqe > dcxemu_cfg.max_wqe) {
        return EINVAL;
    }
    cap->max_inline_data = wqe - ovh - 4;
    cap->max_send_sge    = (wqe - ovh) / 16;
    if (cap->max_send_sge > DCXEMU_MAX_SGE) {
        cap->max_send_sge = DCXEMU_MAX_SGE;
    }
    if (cap->max_send_wr > 0) {
        /* providers/mlx5/verbs.c:mlx5_calc_sq_size: the queue is
         * roundup_pow2(max_send_wr * wqe) bytes, at most max_send_wqebb 64-byte
         * basic blocks (1 << log_max_qp_sz, reported as max_qp_wr), whatever
         * max_send_wr alone would allow */
        uint64_t wq_size;
        if (cap->max_send_wr > 0x7fffffffu / dcxemu_cfg.max_wqe) {
            return EINVAL;
        }
        wq_size = roundup_pow2((uint64_t)cap->max_send_wr * wqe);
        if (wq_size / DCXEMU_SEND_WQE_BB > DCXEMU_MAX_SEND_WQEBB) {
            return EINVAL;
        }
        cap->max_send_wr = (uint32_t)(wq_size / wqe);
    }
    if (dc) {
        cap->max_recv_wr  = 0;
        cap->max_recv_sge = 0;
    }
    *wqe_out = wqe;
    return 0;
}

static int alloc_qp_slot(struct dcxemu_qp *qp, int is_dct, int is_rc)
{
    int err = dcxemu_lock();
    if (err) {
        return err;
    }
    for (uint32_t n = 0; n < DCXEMU_MAX_QPS; n++) {
        uint32_t i = (dcxemu_fab->next_qp_idx + n) % DCXEMU_MAX_QPS;
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        if (s->in_use) {
            continue;
        }
        memset(&s->pd_id, 0,
               sizeof(*s) - offsetof(struct dcxemu_shm_qp, pd_id));
        s->is_dct      = (uint8_t)is_dct;
        s->is_rc       = (uint8_t)is_rc;
        s->rc_state    = IBV_QPS_RESET; /* unreachable until RTR */
        s->dct_ready   = 0;
        s->owner       = (uint16_t)dcxemu_me;
        s->owner_token = dcxemu_my_token;
        s->in_use      = 1; /* last: a half-made slot is never live */
        dcxemu_hwm_bump(&dcxemu_fab->qp_hwm, i);
        s->qpn     = 0;
        s->srq_idx = -1;
        s->cq_idx  = -1;
        if (!is_dct) {
            s->gen = dcxemu_qp_next_gen(
                    i); /* a freed number returns with a new gen */
            s->qpn = s->gen << DCXEMU_QP_IDX_BITS | i;
        }
        dcxemu_fab->next_qp_idx = i + 1;
        qp->idx                 = (int)i;
        qp->qpx.qp_base.qp_num  = s->qpn;
        dcxemu_unlock();
        return 0;
    }
    dcxemu_unlock();
    return ENOMEM;
}

/* A new QP, not yet on the fabric: what RC QPs, DCIs and DCTs share. */
static struct dcxemu_qp *new_qp(struct ibv_context *context,
                                struct ibv_qp_init_attr_ex *attr, uint64_t ops)
{
    struct dcxemu_qp *qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        return NULL;
    }
    qp->ctx        = dcxemu_ctx(context);
    qp->pd         = (struct dcxemu_pd *)attr->pd;
    qp->send_cq    = (struct dcxemu_cq *)attr->send_cq;
    qp->recv_cq    = (struct dcxemu_cq *)attr->recv_cq;
    qp->sq_sig_all = attr->sq_sig_all;
    qp->send_ops   = ops;
    qp->port       = 1;
    qp->rq_idx     = -1;
    return qp;
}

/* The process-local send ring for the sized caps; with_umr: room for UMR
 * descriptors too. */
static int
alloc_sq_ring(struct dcxemu_qp *qp, const struct ibv_qp_cap *cap, int with_umr)
{
    qp->cap      = *cap;
    qp->wqe_size = (sizeof(struct dcxemu_wqe) +
                    cap->max_send_sge * sizeof(struct ibv_sge) +
                    cap->max_inline_data + 15) &
                   ~(size_t)15;
    qp->ring_slots = cap->max_send_wr ? cap->max_send_wr : 1;
    qp->ring       = calloc(qp->ring_slots, qp->wqe_size);
    if (with_umr) {
        qp->umr_max = (cap->max_inline_data + 4) /
                      16; /* descriptors one WQE can carry */
        qp->umr_ring = calloc((size_t)qp->ring_slots *
                                      (qp->umr_max ? qp->umr_max : 1),
                              sizeof(struct dcxemu_mkey_entry));
        if (qp->umr_ring == NULL) {
            return ENOMEM;
        }
    }
    return qp->ring == NULL ? ENOMEM : 0;
}

static void free_qp(struct dcxemu_qp *qp)
{
    dcxemu_rq_destroy(qp);
    dcxemu_streams_free(qp);
    free(qp->ring);
    free(qp->umr_ring);
    free(qp);
}

/* The verbs view of a QP that has its slot, and the references it holds. */
static void init_qp_common(struct dcxemu_qp *qp, struct ibv_context *context,
                           struct ibv_qp_init_attr_ex *attr,
                           enum ibv_qp_type type)
{
    struct ibv_qp *b = &qp->qpx.qp_base;
    pthread_mutex_init(&qp->post_lock, NULL);
    pthread_mutex_init(&qp->exec_lock, NULL);
    atomic_store(&qp->hw_state, IBV_QPS_RESET);
    b->context    = context;
    b->qp_context = attr->qp_context;
    b->pd         = attr->pd;
    b->send_cq    = attr->send_cq;
    b->recv_cq    = attr->recv_cq;
    b->srq        = attr->srq;
    b->handle     = (uint32_t)qp->idx;
    b->state      = IBV_QPS_RESET;
    b->qp_type    = type;
    pthread_mutex_init(&b->mutex, NULL);
    pthread_cond_init(&b->cond, NULL);
    atomic_fetch_add(&qp->pd->refcnt, 1);
    atomic_fetch_add(&qp->send_cq->refcnt, 1);
    atomic_fetch_add(&qp->recv_cq->refcnt, 1);
    if (qp->srq != NULL) {
        atomic_fetch_add(&qp->srq->refcnt, 1);
    }
}

/* Last step of every create: the engine and the CQ consumers find the QP from
 * here on. */
static void publish_qp(struct dcxemu_qp *qp)
{
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_qps[qp->idx] = qp;
    dcxemu_idx_set_add(&dcxemu_qp_set, (uint32_t)qp->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
}

/* ---------------------------------------------------------------- RC ---- */

static int check_rc_dv(const struct mlx5dv_qp_init_attr *dv, uint64_t *dv_ops)
{
    const uint64_t rc_dv_ops = MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
                               MLX5DV_QP_EX_WITH_MR_LIST |
                               MLX5DV_QP_EX_WITH_RAW_WQE;
    if (dv == NULL) {
        return 0;
    }
    if (dv->comp_mask & ~(uint64_t)(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS |
                                    MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS)) {
        return EINVAL;
    }
    if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
        (dv->create_flags &
         ~(uint32_t)(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE |
                     MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE |
                     DCXEMU_MLX5DV_QP_CREATE_OOO_DP))) {
        return EINVAL;
    }
    if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
        (dv->create_flags & DCXEMU_MLX5DV_QP_CREATE_OOO_DP)) {
        return EOPNOTSUPP; /* ooo_recv_wrs_caps.max_rc is 0 */
    }
    if (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) {
        *dv_ops = dv->send_ops_flags;
        if (*dv_ops & ~rc_dv_ops) {
            return EOPNOTSUPP;
        }
        if (dcxemu_cfg.no_raw_wqe && (*dv_ops & MLX5DV_QP_EX_WITH_RAW_WQE)) {
            return EOPNOTSUPP; /* rdma-core before v36: RC takes MR_* only */
        }
    }
    return 0;
}

static int check_rc_attr(struct ibv_context *context,
                         const struct ibv_qp_init_attr_ex *attr,
                         const struct mlx5dv_qp_init_attr *dv, uint64_t *ops,
                         uint64_t *dv_ops)
{
    const uint64_t rc_ops = MODEL_SEND_OPS | IBV_QP_EX_WITH_LOCAL_INV;
    int err;
    if ((attr->comp_mask &
         ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) ||
        !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == NULL ||
        attr->pd->context != context || attr->send_cq == NULL ||
        attr->recv_cq == NULL) {
        return EINVAL;
    }
    err = check_rc_dv(dv, dv_ops);
    if (err != 0) {
        return err;
    }
    if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        *ops = attr->send_ops_flags;
        if (dcxemu_cfg.no_atomics && (*ops & ATOMIC_SEND_OPS)) {
            return EOPNOTSUPP; /* checked before the QP type, as mlx5 does */
        }
        if (*ops & ~rc_ops) {
            return EOPNOTSUPP; /* SEND_WITH_INV, BIND_MW: not modelled */
        }
    }
    if (attr->srq != NULL && attr->srq->context != context) {
        return EINVAL;
    }
    return 0;
}

/* What an RC QP and a DCI share once their attributes are checked and their
 * send queue sized (cap): the QP, its ring and slot, its builders (dv_ops: an
 * RC QP's MR builders; raw_wqe: a DCI's raw WQEs; streams: a DCI's streams, or
 * NULL), then publication. */
static struct ibv_qp *
create_send_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
               uint64_t ops, const struct ibv_qp_cap *cap,
               enum ibv_qp_type type, uint64_t dv_ops, int raw_wqe,
               const struct mlx5dv_dci_streams *streams)
{
    int is_rc             = type == IBV_QPT_RC;
    struct ibv_qp_cap all = *cap;
    struct dcxemu_qp *qp;
    int err;

    qp = new_qp(context, attr, ops);
    if (qp == NULL) {
        err = ENOMEM;
        goto err;
    }
    qp->is_rc = is_rc;
    qp->srq   = is_rc ? (struct dcxemu_srq *)attr->srq : NULL;
    err       = alloc_sq_ring(qp, cap, is_rc);
    if (err == 0 && is_rc && qp->srq == NULL) {
        err = dcxemu_rq_create(qp, &all);
    }
    if (err == 0 && streams != NULL) {
        err = dcxemu_streams_create(qp, streams->log_num_concurent,
                                    streams->log_num_errored);
    }
    if (err == 0) {
        err = alloc_qp_slot(qp, 0, is_rc);
    }
    if (err != 0) {
        goto err_free;
    }
    qp->has_qpx = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    init_qp_common(qp, context, attr, type);
    if (is_rc) {
        dcxemu_wr_install_rc(qp, dv_ops);
    } else {
        dcxemu_wr_install_dci(qp, raw_wqe);
    }
    qp->cap   = all;
    attr->cap = all;
    publish_qp(qp);
    return &qp->qpx.qp_base;

err_free:
    free_qp(qp);
err:
    errno = err;
    return NULL;
}

/* An RC QP: its qp_num is valid at once; its receive queue is its own
 * (max_recv_wr) or the SRQ given.  Connected to itself it hosts UMR and
 * LOCAL_INV (docs/device-spec.md §2.5). */
static struct ibv_qp *create_rc(struct ibv_context *context,
                                struct ibv_qp_init_attr_ex *attr,
                                struct mlx5dv_qp_init_attr *dv)
{
    uint64_t ops = DEFAULT_SEND_OPS, dv_ops = 0;
    struct ibv_qp_cap cap;
    size_t wqe = 0;
    int err;

    err = check_rc_attr(context, attr, dv, &ops, &dv_ops);
    if (err != 0) {
        goto err;
    }
    cap = attr->cap;
    err = size_sq(&cap, ops, dv_ops, 0, &wqe);
    if (err != 0) {
        goto err;
    }
    cap.max_recv_wr  = 0;
    cap.max_recv_sge = 0;
    if (attr->srq == NULL) {
        cap.max_recv_wr  = attr->cap.max_recv_wr;
        cap.max_recv_sge = attr->cap.max_recv_sge;
    }
    return create_send_qp(context, attr, ops, &cap, IBV_QPT_RC, dv_ops, 0,
                          NULL);

err:
    errno = err;
    return NULL;
}

/* verbs_context.create_qp_ex: RC only; DC QPs need mlx5dv_create_qp. */
struct ibv_qp *dcxemu_create_qp_ex_op(struct ibv_context *context,
                                      struct ibv_qp_init_attr_ex *attr)
{
    int err = dcxemu_usable();
    if (err == 0 && (context == NULL || attr == NULL)) {
        err = EINVAL;
    }
    if (err == 0 && dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        err = EIO;
    }
    if (err == 0 && attr->qp_type != IBV_QPT_RC) {
        err = EOPNOTSUPP;
    }
    if (err != 0) {
        errno = err;
        return NULL;
    }
    return create_rc(context, attr, NULL);
}

/* ibv_create_qp: the plain request is ibv_create_qp_ex with a PD. */
DCXEMU_API struct ibv_qp *
dcxemu_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    struct ibv_qp_init_attr_ex ex;
    struct ibv_qp *qp;
    if (pd == NULL || init == NULL) {
        errno = EINVAL;
        return NULL;
    }
    memset(&ex, 0, sizeof(ex));
    ex.qp_context = init->qp_context;
    ex.send_cq    = init->send_cq;
    ex.recv_cq    = init->recv_cq;
    ex.srq        = init->srq;
    ex.cap        = init->cap;
    ex.qp_type    = init->qp_type;
    ex.sq_sig_all = init->sq_sig_all;
    ex.comp_mask  = IBV_QP_INIT_ATTR_PD;
    ex.pd         = pd;
    qp            = dcxemu_create_qp_ex_op(pd->context, &ex);
    if (qp != NULL) {
        init->cap = ex.cap;
    }
    return qp;
}

/* ---------------------------------------------------------------- DC ---- */

/* What both DC types need: a DC request of type DRIVER on a PD of this context.
 */
static int check_dc_attr(struct ibv_context *context,
                         const struct ibv_qp_init_attr_ex *attr,
                         const struct mlx5dv_qp_init_attr *dv)
{
    const uint64_t dv_known = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS |
                              MLX5DV_QP_INIT_ATTR_MASK_DC |
                              MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS |
                              MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
    if (context == NULL || attr == NULL || dv == NULL ||
        (dv->comp_mask & ~dv_known)) {
        return EINVAL;
    }
    if (!(dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC)) {
        /* RC/UD QPs are not modelled yet (part 2); a DRIVER QP without DC is
         * invalid */
        return attr->qp_type == IBV_QPT_DRIVER ? EINVAL : EOPNOTSUPP;
    }
    if (attr->qp_type != IBV_QPT_DRIVER ||
        !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == NULL ||
        attr->pd->context != context) {
        return EINVAL;
    }
    return 0;
}

/* A DCI or DCT asking for out-of-order data placement. */
static int dc_ooo_wanted(const struct mlx5dv_qp_init_attr *dv)
{
    return (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
           (dv->create_flags & DCXEMU_MLX5DV_QP_CREATE_OOO_DP);
}

static int check_dct_attr(const struct ibv_qp_init_attr_ex *attr,
                          const struct mlx5dv_qp_init_attr *dv)
{
    if (attr->comp_mask != IBV_QP_INIT_ATTR_PD ||
        (dv->comp_mask &
         ~(uint64_t)(MLX5DV_QP_INIT_ATTR_MASK_DC |
                     MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS)) ||
        ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
         (dv->create_flags &
          ~(uint32_t)(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE |
                      DCXEMU_MLX5DV_QP_CREATE_OOO_DP))) ||
        attr->srq == NULL || attr->recv_cq == NULL || attr->send_cq == NULL) {
        return EINVAL;
    }
    return dc_ooo_wanted(dv) ? dcxemu_ooo_create_ok() : 0;
}

static struct ibv_qp *create_dct(struct ibv_context *context,
                                 struct ibv_qp_init_attr_ex *attr,
                                 struct mlx5dv_qp_init_attr *dv)
{
    struct dcxemu_qp *qp;
    int err;

    err = check_dct_attr(attr, dv);
    if (err != 0) {
        goto err;
    }
    qp = new_qp(context, attr, DEFAULT_SEND_OPS);
    if (qp == NULL) {
        err = ENOMEM;
        goto err;
    }
    qp->is_dct = 1;
    dcxemu_ptracer_allow(); /* peers will reach this process's memory */
    qp->srq    = (struct dcxemu_srq *)attr->srq;
    qp->dc_key = dv->dc_init_attr.dct_access_key;
    err        = alloc_qp_slot(qp, 1, 0);
    if (err != 0) {
        goto err_free;
    }
    if (dc_ooo_wanted(dv)) {
        dcxemu_ooo_mark(qp);
    }
    init_qp_common(qp, context, attr, IBV_QPT_DRIVER);
    publish_qp(qp);
    return &qp->qpx.qp_base;

err_free:
    free_qp(qp);
err:
    errno = err;
    return NULL;
}

static int check_dci_ops(const struct ibv_qp_init_attr_ex *attr,
                         const struct mlx5dv_qp_init_attr *dv, uint64_t *ops,
                         int *raw_wqe)
{
    if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        *ops = attr->send_ops_flags;
        if (dcxemu_cfg.no_atomics && (*ops & ATOMIC_SEND_OPS)) {
            return EOPNOTSUPP; /* mlx5 qp.c:mlx5_qp_fill_wr_pfns:
                                  !atomics_enabled */
        }
        if (*ops & ~(uint64_t)DEFAULT_SEND_OPS) {
            return EOPNOTSUPP;
        }
        if (*ops & ~(uint64_t)MODEL_SEND_OPS) {
            return EOPNOTSUPP; /* SEND_INV/LOCAL_INV/BIND_MW: not modelled yet */
        }
    }
    if (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) {
        if (dv->send_ops_flags & ~(uint64_t)MLX5DV_QP_EX_WITH_RAW_WQE) {
            return EOPNOTSUPP; /* MR_* are RC-only; MEMCPY not modelled */
        }
        /* rdma-core before v36 (no mlx5dv_wr_raw_wqe) takes no dv send
         * ops on a DCI: "ops & ~DCI_OPS || mlx5_ops" is EOPNOTSUPP */
        if (dcxemu_cfg.no_raw_wqe && (dv->send_ops_flags != 0)) {
            return EOPNOTSUPP;
        }
        /* rdma-core v44 mlx5_qp_fill_wr_pfns: DCI takes RAW_WQE|MEMCPY */
        *raw_wqe = (dv->send_ops_flags & MLX5DV_QP_EX_WITH_RAW_WQE) != 0;
    }
    return 0;
}

static int check_dci_attr(const struct ibv_qp_init_attr_ex *attr,
                          const struct mlx5dv_qp_init_attr *dv, uint64_t *ops,
                          int *raw_wqe)
{
    if (attr->comp_mask &
        ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
        return EINVAL;
    }
    if (attr->send_cq == NULL || attr->recv_cq == NULL ||
        attr->cap.max_recv_wr != 0 || attr->cap.max_recv_sge != 0) {
        return EINVAL;
    }
    if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
        (dv->create_flags &
         ~(uint32_t)(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE |
                     MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE |
                     DCXEMU_MLX5DV_QP_CREATE_OOO_DP))) {
        return EINVAL;
    }
    if (dc_ooo_wanted(dv) && dcxemu_ooo_create_ok() != 0) {
        return EOPNOTSUPP; /* libmlx5: is_qpt_ooo_sup */
    }
    if ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) &&
        (dv->dc_init_attr.dci_streams.log_num_concurent >
                 DCXEMU_LOG_MAX_DCI_STREAMS ||
         dv->dc_init_attr.dci_streams.log_num_errored >
                 DCXEMU_LOG_MAX_DCI_ERRORED)) {
        return EINVAL; /* beyond dci_streams_caps */
    }
    return check_dci_ops(attr, dv, ops, raw_wqe);
}

static struct ibv_qp *create_dci(struct ibv_context *context,
                                 struct ibv_qp_init_attr_ex *attr,
                                 struct mlx5dv_qp_init_attr *dv)
{
    uint64_t ops = DEFAULT_SEND_OPS;
    struct ibv_qp_cap cap;
    struct ibv_qp *qp;
    size_t wqe = 0;
    int err, raw_wqe = 0;

    err = check_dci_attr(attr, dv, &ops, &raw_wqe);
    if (err != 0) {
        goto err;
    }
    cap = attr->cap;
    err = size_sq(&cap, ops, 0, 1, &wqe);
    if (err != 0) {
        goto err;
    }
    qp = create_send_qp(context, attr, ops, &cap, IBV_QPT_DRIVER, 0, raw_wqe,
                        (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) ?
                                &dv->dc_init_attr.dci_streams :
                                NULL);
    if (qp != NULL && dc_ooo_wanted(dv)) {
        dcxemu_ooo_mark((struct dcxemu_qp *)qp);
    }
    return qp;

err:
    errno = err;
    return NULL;
}

DCXEMU_API struct ibv_qp *
dcxemu_mlx5dv_create_qp(struct ibv_context *context,
                        struct ibv_qp_init_attr_ex *attr,
                        struct mlx5dv_qp_init_attr *dv)
{
    int err = dcxemu_usable();
    if (err == 0 && context != NULL &&
        dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        err = EIO; /* CREATE_QP / CREATE_DCT */
    }
    if (err != 0) {
        errno = err;
        return NULL;
    }
    if (context != NULL && attr != NULL && attr->qp_type == IBV_QPT_RC &&
        (dv == NULL || !(dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC))) {
        return create_rc(context, attr, dv);
    }
    err = check_dc_attr(context, attr, dv);
    if (err != 0) {
        errno = err;
        return NULL;
    }
    switch (dv->dc_init_attr.dc_type) {
    case MLX5DV_DCTYPE_DCT:
        return create_dct(context, attr, dv);
    case MLX5DV_DCTYPE_DCI:
        return create_dci(context, attr, dv);
    default:
        errno = EINVAL;
        return NULL;
    }
}

DCXEMU_API struct ibv_qp_ex *dcxemu_ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    if (ibqp == NULL || !qp->has_qpx) {
        return NULL;
    }
    return &qp->qpx;
}

DCXEMU_API struct mlx5dv_qp_ex *
dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *q)
{
    return q == NULL ? NULL : &QP(q)->dv;
}
