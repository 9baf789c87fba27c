/* dcxemu QP state: modify-QP against one transition table per QP type, query
 * and destroy.
 *
 * A modify is checked whole (values, then the table, then capabilities) before
 * anything is applied, under the QP's exec_lock: the device moves a QP to ERR
 * only under that lock, so the state a request was checked against is still the
 * state it is applied to, and a refused request leaves the QP exactly as it
 * was. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Drop queued WQEs and the QP's unpolled CQEs (RESET / destroy). exec_lock
 * held. */
static void purge_qp(struct dcxemu_qp *qp)
{
    uint32_t qpn  = qp->qpx.qp_base.qp_num;
    qp->sq_posted = qp->sq_done = 0;
    atomic_store(&qp->sq_freed, 0);
    memset(&qp->lane, 0, sizeof(qp->lane));
    dcxemu_streams_reset(qp);
    atomic_store(&qp->deadline_ns, 0);
    dcxemu_rq_flush(qp, 1);
    if (qpn != 0) {
        dcxemu_cq_purge_qpn(qp->send_cq->s, qpn);
        if (qp->recv_cq != qp->send_cq) {
            dcxemu_cq_purge_qpn(qp->recv_cq->s, qpn);
        }
    }
}

static int check_values(const struct ibv_qp_attr *a, int mask)
{
    if ((mask & IBV_QP_PORT) && a->port_num != 1)
        return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= DCXEMU_MAX_PKEYS)
        return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) &&
        (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
        return EINVAL;
    if ((mask & IBV_QP_AV) && (a->ah_attr.port_num > 1 || a->ah_attr.sl > 15))
        return EINVAL;
    if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
        return EINVAL;
    if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
        return EINVAL;
    if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
        return EINVAL;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
        return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
        a->max_rd_atomic > DCXEMU_MAX_RD_ATOM)
        return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
        a->max_dest_rd_atomic > DCXEMU_MAX_RD_ATOM)
        return EINVAL;
    if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num >= (1u << 24))
        return EINVAL;
    return 0;
}

/* An address vector on a RoCE port needs a GRH (the kernel's
 * rdma_check_ah_attr: a RoCE AV without IB_AH_GRH is EINVAL) whose source GID
 * is an entry of the port's table. */
static int check_roce_av(struct dcxemu_qp *qp, const struct ibv_ah_attr *ah)
{
    union ibv_gid gid;
    uint32_t type;
    if (!dcxemu_grh_required()) {
        return 0; /* kernel rdma_check_ah_attr: RoCE or GRH required */
    }
    if (!ah->is_global ||
        dcxemu_gid_entry(qp->ctx->dev_index, ah->grh.sgid_index, &gid, &type) !=
                0) {
        return EINVAL;
    }
    return 0;
}

/* ---------------------------------------------------------------- transition
 * table ---- */

/* clang-format off */
enum qp_kind { QPK_RC, QPK_DCI, QPK_DCT, QPK_NUM };

static const char *const kind_name[QPK_NUM] = {
    [QPK_RC] = "rc", [QPK_DCI] = "dci", [QPK_DCT] = "dct",
};

static const char *const state_name[IBV_QPS_ERR + 1] = {
    [IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
    [IBV_QPS_RTS] = "RTS",     [IBV_QPS_SQD] = "SQD",   [IBV_QPS_SQE] = "SQE",
    [IBV_QPS_ERR] = "ERR",
};

/* A legal transition: the attributes it must carry (req) and may carry (opt).  IBV_QP_STATE may
 * always be given; a DCT also requires it (its entries list it in req). */
struct qp_transition {
    uint8_t legal;
    int req;
    int opt;
};

#define T(_req, _opt) { 1, (_req), (_opt) }

#define RTS_REQ     (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
                     IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN)
#define RC_RTR_REQ  (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | \
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RC_RTR_OPT  (IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX)
#define RC_RTS_OPT  (IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | \
                     IBV_QP_PATH_MIG_STATE)

/* [kind][current state][next state]; anything not listed is EINVAL.  RC and DCI: every state
 * may go to RESET, every state but RESET to ERR.  A DCT only goes RESET->INIT->RTR: it is
 * destroyed, never modified back. */
static const struct qp_transition qp_table[QPK_NUM][IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
    [QPK_DCI] = {
        [IBV_QPS_RESET] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_INIT]  = T(IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0),
        },
        [IBV_QPS_INIT] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_INIT]  = T(0, IBV_QP_PKEY_INDEX | IBV_QP_PORT),
            [IBV_QPS_RTR]   = T(IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX | IBV_QP_AV),
            [IBV_QPS_ERR]   = T(0, 0),
        },
        [IBV_QPS_RTR] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_RTS]   = T(RTS_REQ, IBV_QP_MIN_RNR_TIMER),
            [IBV_QPS_ERR]   = T(0, 0),
        },
        [IBV_QPS_RTS] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_RTS]   = T(0, IBV_QP_MIN_RNR_TIMER),
            [IBV_QPS_ERR]   = T(0, 0),
        },
        [IBV_QPS_SQD] = { [IBV_QPS_RESET] = T(0, 0), [IBV_QPS_ERR] = T(0, 0) },
        [IBV_QPS_SQE] = { [IBV_QPS_RESET] = T(0, 0), [IBV_QPS_ERR] = T(0, 0) },
        [IBV_QPS_ERR] = { [IBV_QPS_RESET] = T(0, 0), [IBV_QPS_ERR] = T(0, 0) },
    },
    [QPK_RC] = {
        [IBV_QPS_RESET] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_INIT]  = T(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
        },
        [IBV_QPS_INIT] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_INIT]  = T(0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            [IBV_QPS_RTR]   = T(RC_RTR_REQ, RC_RTR_OPT),
            [IBV_QPS_ERR]   = T(0, 0),
        },
        [IBV_QPS_RTR] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_RTS]   = T(RTS_REQ, RC_RTS_OPT),
            [IBV_QPS_ERR]   = T(0, 0),
        },
        [IBV_QPS_RTS] = {
            [IBV_QPS_RESET] = T(0, 0),
            [IBV_QPS_RTS]   = T(0, RC_RTS_OPT),
            [IBV_QPS_ERR]   = T(0, 0),
        },
        [IBV_QPS_SQD] = { [IBV_QPS_RESET] = T(0, 0), [IBV_QPS_ERR] = T(0, 0) },
        [IBV_QPS_SQE] = { [IBV_QPS_RESET] = T(0, 0), [IBV_QPS_ERR] = T(0, 0) },
        [IBV_QPS_ERR] = { [IBV_QPS_RESET] = T(0, 0), [IBV_QPS_ERR] = T(0, 0) },
    },
    [QPK_DCT] = {
        [IBV_QPS_RESET] = {
            [IBV_QPS_INIT] = T(IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0),
        },
        [IBV_QPS_INIT] = {
            [IBV_QPS_RTR] = T(IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU, 0),
        },
    },
};
/* clang-format on */

#undef T

static enum qp_kind kind_of(const struct dcxemu_qp *qp)
{
    return qp->is_dct ? QPK_DCT : qp->is_rc ? QPK_RC : QPK_DCI;
}

/* EINVAL unless the table allows cur -> next with exactly these attributes. */
static int check_transition(enum qp_kind k, int cur, int next, int mask)
{
    const struct qp_transition *t = &qp_table[k][cur][next];
    if (!t->legal) {
        return EINVAL;
    }
    if ((mask & t->req) != t->req ||
        (mask & ~(t->req | t->opt | IBV_QP_STATE))) {
        return EINVAL; /* every required bit, and nothing outside req | opt */
    }
    return 0;
}

/* ---------------------------------------------------------------- modify ---- */

/* Attribute values, whatever the transition (EINVAL), then what this QP type
 * can take. */
static int check_attr_values(struct dcxemu_qp *qp, enum qp_kind k,
                             const struct ibv_qp_attr *a, int mask)
{
    int err = check_values(a, mask);
    if (err != 0) {
        return err;
    }
    /* kernel mlx5_ib_modify_qp -> validate_rd_atomic: a DCI's max_rd_atomic is
     * bounded by the DC capability 1 << log_max_ra_res_dc, not by
     * max_qp_init_rd_atom */
    if (k == QPK_DCI && (mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
        a->max_rd_atomic > (1u << dcxemu_cfg.log_max_ra_dc)) {
        return EINVAL;
    }
    return 0;
}

/* The access flags a transition carries: a DCT takes only the four data rights
 * (EINVAL); a device without atomics refuses remote atomic access (EOPNOTSUPP:
 * kernel mlx5_ib_modify_dct, set_qpc_atomic_flags). */
static int check_access(enum qp_kind k, const struct ibv_qp_attr *a, int mask)
{
    const uint32_t dct_access = IBV_ACCESS_LOCAL_WRITE |
                                IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_ATOMIC;
    if (!(mask & IBV_QP_ACCESS_FLAGS)) {
        return 0;
    }
    if (k == QPK_DCT && (a->qp_access_flags & ~dct_access)) {
        return EINVAL;
    }
    if (dcxemu_cfg.no_atomics &&
        (a->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC)) {
        return EOPNOTSUPP;
    }
    return 0;
}

/* The whole request against the QP as it is now (exec_lock held); nothing is
 * written. */
static int check_modify(struct dcxemu_qp *qp, const struct ibv_qp_attr *a,
                        int mask, int cur, int next)
{
    enum qp_kind k = kind_of(qp);
    int err;
    if (next < IBV_QPS_RESET || next > IBV_QPS_ERR || next == IBV_QPS_SQD ||
        next == IBV_QPS_SQE) {
        return EINVAL;
    }
    err = check_attr_values(qp, k, a, mask);
    if (err != 0) {
        return err;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index) && next != IBV_QPS_RESET &&
        next != IBV_QPS_ERR) {
        return EIO; /* only 2RST_QP / 2ERR_QP succeed after an internal error */
    }
    if (mask & IBV_QP_AV) {
        err = check_roce_av(qp, &a->ah_attr);
        if (err != 0) {
            return err;
        }
    }
    err = check_transition(k, cur, next, mask);
    if (err != 0) {
        return err;
    }
    return check_access(k, a, mask);
}

/* An RC QP's connection and state go to the fabric on every modify: a peer's
 * WQE reaches it only in RTR or RTS, connected back to the sender.  Its receive
 * queue is its SRQ or its own ring. */
static int publish_rc(struct dcxemu_qp *qp, int state)
{
    struct dcxemu_shm_qp *s;
    int err = dcxemu_lock();
    if (err != 0) {
        return err;
    }
    s                = &dcxemu_fab->qps[qp->idx];
    s->pd_id         = qp->pd->pd_id;
    s->access        = qp->access;
    s->lid           = (uint32_t)qp->ctx->dev_index + 1;
    s->roce          = (uint8_t)dcxemu_cfg.roce;
    s->sgid_index    = qp->av.grh.sgid_index;
    s->hop_limit     = qp->av.grh.hop_limit;
    s->traffic_class = qp->av.grh.traffic_class;
    s->srq_idx       = qp->srq != NULL ? qp->srq->idx : qp->rq_idx;
    s->cq_idx        = qp->recv_cq->idx;
    s->min_rnr_timer = qp->min_rnr_timer;
    s->rc_dest_qpn   = qp->dest_qpn;
    s->pkey          = dcxemu_cfg.pkeys[qp->pkey_index];
    s->atomic_mode   = dcxemu_atomic_mode(qp->access);
    s->rc_state      = (uint8_t)state;
    if (state == IBV_QPS_RESET) {
        atomic_store(&s->rc_remote_err, 0);
    }
    dcxemu_unlock();
    return 0;
}

/* A DCT reaching RTR: its number and attributes go to the fabric, where
 * initiators find it. The only step of a modify that can fail once checked (the
 * fabric lock). */
static int publish_dct(struct dcxemu_qp *qp, const struct ibv_qp_attr *a)
{
    struct dcxemu_shm_qp *s;
    int err = dcxemu_lock();
    if (err != 0) {
        return err;
    }
    s                      = &dcxemu_fab->qps[qp->idx];
    s->gen                 = dcxemu_qp_next_gen((uint32_t)qp->idx);
    s->qpn                 = s->gen << DCXEMU_QP_IDX_BITS | (uint32_t)qp->idx;
    s->pd_id               = qp->pd->pd_id;
    s->dc_key              = qp->dc_key;
    s->access              = qp->access;
    s->lid                 = (uint32_t)qp->ctx->dev_index + 1;
    s->roce                = (uint8_t)dcxemu_cfg.roce;
    s->sgid_index          = a->ah_attr.grh.sgid_index;
    s->hop_limit           = a->ah_attr.grh.hop_limit;
    s->traffic_class       = a->ah_attr.grh.traffic_class;
    s->srq_idx             = qp->srq->idx;
    s->cq_idx              = qp->recv_cq->idx;
    s->min_rnr_timer       = a->min_rnr_timer;
    s->pkey                = dcxemu_cfg.pkeys[qp->pkey_index];
    s->atomic_mode         = dcxemu_atomic_mode(qp->access);
    s->dct_ready           = 1; /* the DCT number exists from here on */
    qp->qpx.qp_base.qp_num = s->qpn;
    dcxemu_unlock();
    return 0;
}

static void
apply_attrs(struct dcxemu_qp *qp, const struct ibv_qp_attr *a, int mask)
{
    if (mask & IBV_QP_PKEY_INDEX)
        qp->pkey_index = a->pkey_index;
    if (mask & IBV_QP_PORT)
        qp->port = a->port_num;
    if (mask & IBV_QP_PATH_MTU)
        qp->path_mtu = a->path_mtu;
    if (mask & IBV_QP_TIMEOUT)
        qp->timeout = a->timeout;
    if (mask & IBV_QP_RETRY_CNT)
        qp->retry_cnt = a->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY)
        qp->rnr_retry = a->rnr_retry;
    if (mask & IBV_QP_MIN_RNR_TIMER)
        qp->min_rnr_timer = a->min_rnr_timer;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
        qp->max_rd_atomic = a->max_rd_atomic;
    if (mask & IBV_QP_SQ_PSN)
        qp->sq_psn = a->sq_psn;
    if (mask & IBV_QP_ACCESS_FLAGS)
        qp->access = a->qp_access_flags;
    if (mask & IBV_QP_DEST_QPN)
        qp->dest_qpn = a->dest_qp_num;
    if (mask & IBV_QP_AV)
        qp->av = a->ah_attr;
    if (mask & IBV_QP_RQ_PSN)
        qp->rq_psn = a->rq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
        qp->max_dest_rd_atomic = a->max_dest_rd_atomic;
}

/* A checked request: publish (DCT to RTR), the attributes, then the state. */
static int apply_modify(struct dcxemu_qp *qp, const struct ibv_qp_attr *a,
                        int mask, int cur, int next)
{
    int err;
    if (qp->is_dct && cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        err = publish_dct(qp, a);
        if (err != 0) {
            return err;
        }
    }
    apply_attrs(qp, a, mask);
    if (qp->is_rc) {
        err = publish_rc(qp, next);
        if (err != 0) {
            return err;
        }
    }
    atomic_store(&qp->hw_state, next);
    if (next == IBV_QPS_RESET) {
        qp->been_rts = 0;
        purge_qp(qp);
    } else if (next == IBV_QPS_RTS) {
        qp->been_rts = 1;
    }
    DCXEMU_TRACE("modify qp=0x%x %s %s->%s mask=0x%x", qp->qpx.qp_base.qp_num,
                 kind_name[kind_of(qp)], state_name[cur], state_name[next],
                 (unsigned)mask);
    return 0;
}

/* Check and apply under exec_lock (and post_lock for RESET, which drops the
 * queue): nothing changes the state in between; a responder error a peer
 * recorded is taken in first.  *next_out: the state reached. */
static int modify_locked(struct dcxemu_qp *qp, const struct ibv_qp_attr *a,
                         int mask, int *next_out)
{
    for (;;) {
        int cur   = atomic_load(&qp->hw_state);
        int next  = (mask & IBV_QP_STATE) ? (int)a->qp_state : cur;
        int reset = next == IBV_QPS_RESET;
        int err, raised;
        if (reset) {
            pthread_mutex_lock(&qp->post_lock);
        }
        pthread_mutex_lock(&qp->exec_lock);
        raised = dcxemu_rc_absorb_remote_err(qp);
        if (atomic_load(&qp->hw_state) == cur) {
            err = check_modify(qp, a, mask, cur, next);
            if (err == 0) {
                err = apply_modify(qp, a, mask, cur, next);
            }
            *next_out = next;
        } else {
            err = -1; /* the device moved it before we held the lock: look again
                       */
        }
        pthread_mutex_unlock(&qp->exec_lock);
        if (reset) {
            pthread_mutex_unlock(&qp->post_lock);
        }
        if (raised) {
            dcxemu_deliver_events(); /* a responder error's receive flush */
        }
        if (err >= 0) {
            return err;
        }
    }
}

DCXEMU_API int
dcxemu_ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int next, err;
    if (ibqp == NULL || a == NULL) {
        return EINVAL;
    }
    err = dcxemu_usable();
    if (err != 0) {
        return err;
    }
    if (mask & IBV_QP_CUR_STATE) {
        return EINVAL;
    }
    err = modify_locked(qp, a, mask, &next);
    if (err != 0) {
        return err;
    }
    if (next == IBV_QPS_ERR && !qp->is_dct) {
        dcxemu_qp_progress(qp); /* outstanding WRs complete with WR_FLUSH_ERR */
        if (dcxemu_rq_flush(qp, 0)) { /* and the receive queue's */
            dcxemu_deliver_events();
        }
    }
    if (mask & IBV_QP_STATE) {
        ibqp->state = (enum ibv_qp_state)next;
    }
    return 0;
}

/* mlx5dv_dci_stream_id_reset(3) as libmlx5 serves it (an RTS2RTS_QP command
 * naming the DCI's stream channel): EOPNOTSUPP unless the QP is in RTS as
 * software last knew it, EINVAL for a QP that is no DCI; the device refuses
 * a stream the DCI does not have and a DCI gone to ERR (EINVAL). */
DCXEMU_API int
dcxemu_mlx5dv_dci_stream_id_reset(struct ibv_qp *ibqp, uint16_t stream_id)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    if (ibqp == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (ibqp->state != IBV_QPS_RTS) {
        return EOPNOTSUPP;
    }
    if (qp->is_dct || qp->is_rc || ibqp->qp_type != IBV_QPT_DRIVER) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index)) {
        return EIO;
    }
    pthread_mutex_lock(&qp->exec_lock);
    err = dcxemu_streams_reset_one(qp, stream_id);
    pthread_mutex_unlock(&qp->exec_lock);
    if (err == 0) {
        dcxemu_qp_progress(qp); /* WQEs of the stream queued meanwhile */
    }
    return err;
}

DCXEMU_API int dcxemu_ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a,
                                   int mask, struct ibv_qp_init_attr *init)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err, raised;
    (void)mask; /* like the provider, report everything */
    if (ibqp == NULL || a == NULL || init == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index)) {
        return EIO; /* QUERY_QP / QUERY_DCT */
    }
    raised = 0;
    if (qp->is_rc && atomic_load(&dcxemu_fab->qps[qp->idx].rc_remote_err)) {
        /* a responder error not taken in yet: the state it reports is ERR */
        pthread_mutex_lock(&qp->exec_lock);
        raised = dcxemu_rc_absorb_remote_err(qp);
        pthread_mutex_unlock(&qp->exec_lock);
    }
    if (raised) {
        dcxemu_deliver_events(); /* takes the registry: never under exec_lock */
    }
    memset(a, 0, sizeof(*a));
    memset(init, 0, sizeof(*init));
    a->qp_state           = (enum ibv_qp_state)atomic_load(&qp->hw_state);
    a->cur_qp_state       = a->qp_state;
    a->path_mtu           = (enum ibv_mtu)qp->path_mtu;
    a->qp_access_flags    = qp->access;
    a->pkey_index         = (uint16_t)qp->pkey_index;
    a->port_num           = (uint8_t)qp->port;
    a->timeout            = (uint8_t)qp->timeout;
    a->retry_cnt          = (uint8_t)qp->retry_cnt;
    a->rnr_retry          = (uint8_t)qp->rnr_retry;
    a->min_rnr_timer      = (uint8_t)qp->min_rnr_timer;
    a->max_rd_atomic      = (uint8_t)qp->max_rd_atomic;
    a->sq_psn             = qp->sq_psn;
    a->rq_psn             = qp->rq_psn;
    a->dest_qp_num        = qp->dest_qpn;
    a->ah_attr            = qp->av;
    a->max_dest_rd_atomic = (uint8_t)qp->max_dest_rd_atomic;
    a->cap                = qp->cap;
    init->qp_context      = ibqp->qp_context;
    init->send_cq         = ibqp->send_cq;
    init->recv_cq         = ibqp->recv_cq;
    init->srq             = ibqp->srq;
    init->cap             = qp->cap;
    init->qp_type         = ibqp->qp_type;
    init->sq_sig_all      = qp->sq_sig_all;
    ibqp->state =
            a->qp_state; /* the only other writer of qp->state besides modify */
    return 0;
}

DCXEMU_API int dcxemu_ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    if (ibqp == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_qps[qp->idx] = NULL;
    dcxemu_idx_set_del(&dcxemu_qp_set, (uint32_t)qp->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    pthread_mutex_lock(&qp->post_lock);
    pthread_mutex_lock(&qp->exec_lock);
    if (dcxemu_lock() == 0) {
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[qp->idx];
        if (s->in_use && dcxemu_owner_is_me(s->owner, s->owner_token)) {
            s->in_use    = 0;
            s->dct_ready = 0; /* later packets to this dctn find no target */
            s->rc_state  = IBV_QPS_RESET;
            s->qpn       = 0;
            s->fault_unreachable = s->fault_drop_next = s->fault_force_status =
                    0;
            __atomic_store_n(&s->fault_delay_us, 0, __ATOMIC_RELAXED);
        }
        dcxemu_unlock();
        dcxemu_copy_wait(); /* a copy through the DCT that began before is over */
    }
    purge_qp(qp);
    pthread_mutex_unlock(&qp->exec_lock);
    pthread_mutex_unlock(&qp->post_lock);
    atomic_fetch_sub(&qp->pd->refcnt, 1);
    atomic_fetch_sub(&qp->send_cq->refcnt, 1);
    atomic_fetch_sub(&qp->recv_cq->refcnt, 1);
    if (qp->srq != NULL) {
        atomic_fetch_sub(&qp->srq->refcnt, 1);
    }
    dcxemu_rq_destroy(qp);
    pthread_mutex_destroy(&qp->post_lock);
    pthread_mutex_destroy(&qp->exec_lock);
    dcxemu_streams_free(qp);
    free(qp->ring);
    free(qp->umr_ring);
    free(qp);
    return 0;
}
