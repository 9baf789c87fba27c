/* dcxemu QP state: modify (the transition rules per QP type), query and destroy. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Drop queued WQEs and the QP's unpolled CQEs (RESET / destroy). exec_lock held. */
static void purge_qp(struct dcxemu_qp *qp)
{
    uint32_t qpn = qp->qpx.qp_base.qp_num;
    qp->sq_posted = qp->sq_done = 0;
    atomic_store(&qp->sq_freed, 0);
    qp->rnr_count = qp->retry_count = 0;
    qp->head_gate_ns = 0;
    atomic_store(&qp->deadline_ns, 0);
    if (qpn != 0) {
        dcxemu_cq_purge_qpn(qp->send_cq->s, qpn);
        if (qp->recv_cq != qp->send_cq) {
            dcxemu_cq_purge_qpn(qp->recv_cq->s, qpn);
        }
    }
}

static int check_values(const struct ibv_qp_attr *a, int mask)
{
    if ((mask & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= DCXEMU_MAX_PKEYS) return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) return EINVAL;
    if ((mask & IBV_QP_AV) && (a->ah_attr.port_num > 1 || a->ah_attr.sl > 15)) return EINVAL;
    if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
    if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
    if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > DCXEMU_MAX_RD_ATOM) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > DCXEMU_MAX_RD_ATOM) return EINVAL;
    if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num >= (1u << 24)) return EINVAL;
    return 0;
}

/* An address vector on a RoCE port needs a GRH (the kernel's rdma_check_ah_attr: a RoCE AV
 * without IB_AH_GRH is EINVAL) whose source GID is an entry of the port's table. */
static int check_roce_av(struct dcxemu_qp *qp, const struct ibv_ah_attr *ah)
{
    union ibv_gid gid;
    uint32_t type;
    if (!dcxemu_cfg.roce) {
        return 0;
    }
    if (!ah->is_global ||
        dcxemu_gid_entry(qp->ctx->dev_index, ah->grh.sgid_index, &gid, &type) != 0) {
        return EINVAL;
    }
    return 0;
}

static int dci_masks(int cur, int next, int *req, int *opt)
{
    *req = *opt = 0;
    if (next == IBV_QPS_RESET) return 0;
    if (next == IBV_QPS_ERR) return cur == IBV_QPS_RESET ? EINVAL : 0;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) { *req = IBV_QP_PKEY_INDEX | IBV_QP_PORT; return 0; }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) { *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT; return 0; }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        *req = IBV_QP_PATH_MTU;
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_AV;
        return 0;
    }
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
        *req = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN;
        *opt = IBV_QP_MIN_RNR_TIMER;
        return 0;
    }
    if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) { *opt = IBV_QP_MIN_RNR_TIMER; return 0; }
    return EINVAL;
}

static int rc_masks(int cur, int next, int *req, int *opt)
{
    *req = *opt = 0;
    if (next == IBV_QPS_RESET) return 0;
    if (next == IBV_QPS_ERR) return cur == IBV_QPS_RESET ? EINVAL : 0;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        *req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) {
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        *req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        return 0;
    }
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
        *req = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
               IBV_QP_TIMEOUT;
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        return 0;
    }
    if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) {
        *opt = IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        return 0;
    }
    return EINVAL;
}

static int modify_dct(struct dcxemu_qp *qp, struct ibv_qp_attr *a, int mask, int cur, int next)
{
    const uint32_t access_ok = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    int err;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        if (mask != (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) ||
            (a->qp_access_flags & ~access_ok)) {
            return EINVAL;
        }
        if (dcxemu_cfg.no_atomics && (a->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC)) {
            return EOPNOTSUPP;   /* kernel mlx5_ib_modify_dct: no atomic mode */
        }
        qp->access = a->qp_access_flags;
        qp->pkey_index = a->pkey_index;
        qp->port = a->port_num;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        struct dcxemu_shm_qp *s;
        if (mask != (IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU)) {
            return EINVAL;
        }
        if ((err = dcxemu_lock()) != 0) {
            return err;
        }
        s = &dcxemu_fab->qps[qp->idx];
        s->gen = dcxemu_qp_next_gen((uint32_t)qp->idx);
        s->qpn = s->gen << DCXEMU_QP_IDX_BITS | (uint32_t)qp->idx;
        s->pd_id = qp->pd->pd_id;
        s->dc_key = qp->dc_key;
        s->access = qp->access;
        s->lid = (uint32_t)qp->ctx->dev_index + 1;
        s->roce = (uint8_t)dcxemu_cfg.roce;
        s->sgid_index = a->ah_attr.grh.sgid_index;
        s->hop_limit = a->ah_attr.grh.hop_limit;
        s->traffic_class = a->ah_attr.grh.traffic_class;
        s->srq_idx = qp->srq->idx;
        s->cq_idx = qp->recv_cq->idx;
        s->min_rnr_timer = a->min_rnr_timer;
        s->dct_ready = 1;   /* the DCT number exists from here on */
        qp->qpx.qp_base.qp_num = s->qpn;
        qp->min_rnr_timer = a->min_rnr_timer;
        qp->path_mtu = a->path_mtu;
        dcxemu_unlock();
        return 0;
    }
    return EINVAL;   /* a DCT is never modified back; destroy it instead */
}

DCXEMU_API int dcxemu_ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int cur, next, req, opt, err;
    if (ibqp == NULL || a == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    cur = atomic_load(&qp->hw_state);
    if (mask & IBV_QP_CUR_STATE) {
        return EINVAL;
    }
    next = (mask & IBV_QP_STATE) ? (int)a->qp_state : cur;
    if (next < IBV_QPS_RESET || next > IBV_QPS_ERR || next == IBV_QPS_SQD || next == IBV_QPS_SQE) {
        return EINVAL;
    }
    if ((err = check_values(a, mask)) != 0) {
        return err;
    }
    /* kernel mlx5_ib_modify_qp -> validate_rd_atomic: a DCI's max_rd_atomic is bounded by the
     * DC capability 1 << log_max_ra_res_dc, not by max_qp_init_rd_atom */
    if (!qp->is_dct && !qp->is_rc && (mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
        a->max_rd_atomic > (1u << dcxemu_cfg.log_max_ra_dc)) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index) && next != IBV_QPS_RESET && next != IBV_QPS_ERR) {
        return EIO;   /* only 2RST_QP / 2ERR_QP succeed after an internal error */
    }
    if ((mask & IBV_QP_AV) && (err = check_roce_av(qp, &a->ah_attr)) != 0) {
        return err;
    }
    if (qp->is_dct) {
        if ((err = modify_dct(qp, a, mask, cur, next)) != 0) {
            return err;
        }
        atomic_store(&qp->hw_state, next);
    } else {
        if ((err = (qp->is_rc ? rc_masks : dci_masks)(cur, next, &req, &opt)) != 0) {
            return err;
        }
        if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE))) {
            return EINVAL;   /* every required bit, and nothing outside req ∪ opt */
        }
        if (dcxemu_cfg.no_atomics && (mask & IBV_QP_ACCESS_FLAGS) &&
            (a->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC)) {
            return EOPNOTSUPP;   /* kernel mlx5 set_qpc_atomic_flags: no atomic mode */
        }
        if (mask & IBV_QP_PKEY_INDEX) qp->pkey_index = a->pkey_index;
        if (mask & IBV_QP_PORT) qp->port = a->port_num;
        if (mask & IBV_QP_PATH_MTU) qp->path_mtu = a->path_mtu;
        if (mask & IBV_QP_TIMEOUT) qp->timeout = a->timeout;
        if (mask & IBV_QP_RETRY_CNT) qp->retry_cnt = a->retry_cnt;
        if (mask & IBV_QP_RNR_RETRY) qp->rnr_retry = a->rnr_retry;
        if (mask & IBV_QP_MIN_RNR_TIMER) qp->min_rnr_timer = a->min_rnr_timer;
        if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->max_rd_atomic = a->max_rd_atomic;
        if (mask & IBV_QP_SQ_PSN) qp->sq_psn = a->sq_psn;
        if (mask & IBV_QP_ACCESS_FLAGS) qp->access = a->qp_access_flags;
        if (next == IBV_QPS_RESET) {
            pthread_mutex_lock(&qp->post_lock);
            pthread_mutex_lock(&qp->exec_lock);
            atomic_store(&qp->hw_state, IBV_QPS_RESET);
            qp->been_rts = 0;
            purge_qp(qp);
            pthread_mutex_unlock(&qp->exec_lock);
            pthread_mutex_unlock(&qp->post_lock);
        } else {
            /* the device may have moved the QP to ERR since cur was read: then this
             * transition is no longer valid (as the kernel would see it) */
            int expect = cur;
            if (next != IBV_QPS_ERR &&
                !atomic_compare_exchange_strong(&qp->hw_state, &expect, next)) {
                return EINVAL;
            }
            atomic_store(&qp->hw_state, next);
            if (next == IBV_QPS_RTS) {
                qp->been_rts = 1;
            }
        }
        if (next == IBV_QPS_ERR) {
            dcxemu_qp_progress(qp);   /* outstanding WRs complete with WR_FLUSH_ERR */
        }
    }
    if (mask & IBV_QP_STATE) {
        ibqp->state = (enum ibv_qp_state)next;
    }
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask,
                                   struct ibv_qp_init_attr *init)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    (void)mask;   /* like the provider, report everything */
    if (ibqp == NULL || a == NULL || init == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (dcxemu_is_fatal(qp->ctx->dev_index)) {
        return EIO;   /* QUERY_QP / QUERY_DCT */
    }
    memset(a, 0, sizeof(*a));
    memset(init, 0, sizeof(*init));
    a->qp_state = (enum ibv_qp_state)atomic_load(&qp->hw_state);
    a->cur_qp_state = a->qp_state;
    a->path_mtu = (enum ibv_mtu)qp->path_mtu;
    a->qp_access_flags = qp->access;
    a->pkey_index = (uint16_t)qp->pkey_index;
    a->port_num = (uint8_t)qp->port;
    a->timeout = (uint8_t)qp->timeout;
    a->retry_cnt = (uint8_t)qp->retry_cnt;
    a->rnr_retry = (uint8_t)qp->rnr_retry;
    a->min_rnr_timer = (uint8_t)qp->min_rnr_timer;
    a->max_rd_atomic = (uint8_t)qp->max_rd_atomic;
    a->sq_psn = qp->sq_psn;
    a->cap = qp->cap;
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = qp->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = qp->sq_sig_all;
    ibqp->state = a->qp_state;   /* the only other writer of qp->state besides modify */
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
            s->in_use = 0;
            s->dct_ready = 0;   /* later packets to this dctn find no target */
            s->qpn = 0;
            s->fault_unreachable = s->fault_drop_next = s->fault_force_status = 0;
            __atomic_store_n(&s->fault_delay_us, 0, __ATOMIC_RELAXED);
        }
        dcxemu_unlock();
    }
    purge_qp(qp);
    pthread_mutex_unlock(&qp->exec_lock);
    pthread_mutex_unlock(&qp->post_lock);
    atomic_fetch_sub(&qp->pd->refcnt, 1);
    atomic_fetch_sub(&qp->send_cq->refcnt, 1);
    atomic_fetch_sub(&qp->recv_cq->refcnt, 1);
    if (qp->srq != NULL && qp->is_dct) {
        atomic_fetch_sub(&qp->srq->refcnt, 1);
    }
    pthread_mutex_destroy(&qp->post_lock);
    pthread_mutex_destroy(&qp->exec_lock);
    free(qp->ring);
    free(qp->umr_ring);
    free(qp);
    return 0;
}
