/* The mlx5 face's send queues: the WQEs an application wrote into its send
 * queue, decoded (mlx5_wqe.c) and posted to the model's QP through the
 * model's own builders, so that the model executes them as it executes its
 * API face's work requests.
 *
 * The doorbell record is the truth: every producer writes the SQ's producer
 * counter (in 64-byte WQE basic blocks) before it rings, so a doorbell only
 * says when to look.  Each WQE is posted in a batch of its own, with the
 * WQE's index as its work request ID: the model's completion then carries
 * the index libmlx5 expects in the CQE's wqe_counter.  A WQE that cannot be
 * decoded, or that the model refuses, completes in error with the syndrome
 * hardware reports (local QP operation error), in its turn behind older WQEs,
 * and the QP goes to the error state, flushing what follows.
 */
#define _GNU_SOURCE
#include "face.h"
#include "mlx5_cqe.h"
#include "mlx5_wqe.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The address handle for a DC address vector, made once per PD. */
static struct ibv_ah *av_ah(struct face_pd *pd, const struct dcxemu_mlx5_av *av)
{
    struct ibv_ah_attr a;
    struct ibv_ah *ah = NULL;
    memset(&a, 0, sizeof(a));
    a.dlid     = av->rlid;
    a.sl       = av->sl;
    a.port_num = 1;
    /* libmlx5 leaves the GRH bit clear on RoCE, where every packet has one */
    if (av->grh || pd->eth) {
        a.is_global         = 1;
        a.grh.sgid_index    = av->sgid_index;
        a.grh.hop_limit     = av->hop_limit;
        a.grh.traffic_class = av->tclass;
        a.grh.flow_label    = av->flow_label;
        memcpy(a.grh.dgid.raw, av->rgid, sizeof(a.grh.dgid.raw));
    }
    pthread_mutex_lock(&pd->ah_lock);
    for (uint32_t i = 0; i < pd->num_ahs; i++) {
        if (memcmp(&pd->ahs[i].attr, &a, sizeof(a)) == 0) {
            ah = pd->ahs[i].ah;
            goto out;
        }
    }
    if (pd->num_ahs == pd->ah_cap) {
        uint32_t cap            = pd->ah_cap ? 2 * pd->ah_cap : 16;
        struct face_ah_entry *e = realloc(pd->ahs, cap * sizeof(*e));
        if (e == NULL) {
            goto out;
        }
        pd->ahs    = e;
        pd->ah_cap = cap;
    }
    ah = dcxemu_ibv_create_ah(pd->pd, &a);
    if (ah != NULL) {
        pd->ahs[pd->num_ahs].attr = a;
        pd->ahs[pd->num_ahs].ah   = ah;
        pd->num_ahs++;
    }
out:
    pthread_mutex_unlock(&pd->ah_lock);
    return ah;
}

void face_pd_release_ahs(struct face_pd *pd)
{
    for (uint32_t i = 0; i < pd->num_ahs; i++) {
        dcxemu_ibv_destroy_ah(pd->ahs[i].ah);
    }
    free(pd->ahs);
    pd->ahs     = NULL;
    pd->num_ahs = pd->ah_cap = 0;
}

static unsigned wr_flags(const struct dcxemu_mlx5_wqe *w)
{
    unsigned flags = 0;
    if (w->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) {
        flags |= IBV_SEND_SIGNALED;
    }
    if (w->fm_ce_se & MLX5_WQE_CTRL_SOLICITED) {
        flags |= IBV_SEND_SOLICITED;
    }
    if (w->fm_ce_se &
        (MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE)) {
        flags |= IBV_SEND_FENCE;
    }
    if (w->is_inline) {
        flags |= IBV_SEND_INLINE;
    }
    return flags;
}

/* The WQE's bytes in one piece (it may wrap the end of the queue). */
static const void *wqe_bytes(struct face_qp *qp, uint32_t wqebb, uint32_t n)
{
    char *dst = qp->raw;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(dst + 64 * i,
               (char *)qp->sq_buf + 64 * ((wqebb + i) & (qp->sq_wqebb_cnt - 1)),
               64);
    }
    return dst;
}

/* The operation itself, through the model's builders; 0 or an errno. */
static int
wqe_op(struct face_qp *qp, const struct dcxemu_mlx5_wqe *w, uint32_t wqebb)
{
    struct ibv_qp_ex *x = qp->qpx;
    switch (w->opcode) {
    case MLX5_OPCODE_SEND:
        ibv_wr_send(x);
        return 0;
    case MLX5_OPCODE_SEND_IMM:
        ibv_wr_send_imm(x, w->imm);
        return 0;
    case MLX5_OPCODE_RDMA_WRITE:
        ibv_wr_rdma_write(x, w->rkey, w->raddr);
        return 0;
    case MLX5_OPCODE_RDMA_WRITE_IMM:
        ibv_wr_rdma_write_imm(x, w->rkey, w->raddr, w->imm);
        return 0;
    case MLX5_OPCODE_RDMA_READ:
        ibv_wr_rdma_read(x, w->rkey, w->raddr);
        return 0;
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
        if (w->masked || w->atomic_size != 8) {
            break;
        }
        if (w->opcode == MLX5_OPCODE_ATOMIC_CS) {
            ibv_wr_atomic_cmp_swp(x, w->rkey, w->raddr, w->compare,
                                  w->swap_add);
        } else {
            ibv_wr_atomic_fetch_add(x, w->rkey, w->raddr, w->swap_add);
        }
        return 0;
    case MLX5_OPCODE_LOCAL_INVAL:
        ibv_wr_local_inv(x, be32toh(w->imm));
        return 0;
    case MLX5_OPCODE_UMR:
        return face_umr_wr(qp, w);
    default:
        break;
    }
    /* NOPs, masked atomics and whatever else the device takes as written */
    mlx5dv_wr_raw_wqe(qp->dv, wqe_bytes(qp, wqebb, w->num_wqebb));
    return -1; /* complete: a raw WQE carries its address and data */
}

static int
wqe_post(struct face_qp *qp, const struct dcxemu_mlx5_wqe *w, uint32_t wqebb)
{
    struct ibv_qp_ex *x = qp->qpx;
    struct ibv_sge sge[DCXEMU_MLX5_MAX_SGE];
    int r;
    ibv_wr_start(x);
    x->wr_id    = w->wqe_index;
    x->wr_flags = wr_flags(w);
    r           = wqe_op(qp, w, wqebb);
    if (r > 0) {
        ibv_wr_abort(x);
        return r;
    }
    if (r == 0) {
        if (qp->kind == FACE_QP_DCI) {
            struct ibv_ah *ah = av_ah(qp->pd, &w->av);
            if (ah == NULL) {
                ibv_wr_abort(x);
                return EINVAL;
            }
            /* the control segment's stream id; a DCI without streams
             * ignores it, as the HCA does (perftest leaves a count there) */
            mlx5dv_wr_set_dc_addr_stream(qp->dv, ah, w->av.dctn, w->av.dc_key,
                                         qp->dci_streams ? w->stream_id : 0);
        }
        if (w->opcode == MLX5_OPCODE_LOCAL_INVAL) {
            /* no data */
        } else if (w->is_inline) {
            ibv_wr_set_inline_data(x, (void *)w->inline_data, w->inline_len);
        } else {
            for (uint32_t i = 0; i < w->num_sge; i++) {
                sge[i].addr   = w->sge[i].addr;
                sge[i].length = w->sge[i].length;
                sge[i].lkey   = w->sge[i].lkey;
            }
            ibv_wr_set_sge_list(x, w->num_sge, sge);
        }
    }
    return ibv_wr_complete(x);
}

/* A WQE the model never executes, failed at once: its error CQE, then the QP
 * in error.  Only where the model refused even to hold its failure (see
 * wqe_bad). */
static void wqe_fail_now(struct face_qp *qp, uint16_t index, uint8_t opcode)
{
    struct dcxemu_mlx5_cqe_info ci;
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
    uint8_t syndrome     = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    if (qp->failed_now) {
        syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
    } else {
        (void)dcxemu_ibv_modify_qp(qp->qp, &a, IBV_QP_STATE);
        qp->failed_now = 1;
    }
    if (qp->send_cq == NULL) {
        return;
    }
    memset(&ci, 0, sizeof(ci));
    ci.opcode      = MLX5_CQE_REQ_ERR;
    ci.wqe_opcode  = opcode;
    ci.qpn         = qp->qpn;
    ci.srqn_uidx   = qp->uidx;
    ci.wqe_counter = index;
    ci.syndrome    = syndrome;
    face_cq_write_now(qp->send_cq, &ci);
}

/* A WQE that cannot be decoded (the decoder's only syndrome is a local QP
 * operation error), or that the model refused: the model holds its failure
 * as a WR of its own, which completes with that error when its turn comes,
 * so its CQE follows those of older WQEs still waiting in the model (RNR,
 * deferred execution, delays), as the HCA completes in send-queue order; the
 * QP goes to ERR then and the model flushes what follows.  A bad WQE is
 * logged once per QP: garbage in a queue must not flood the log. */
static void wqe_bad(struct face_qp *qp, uint16_t index, uint8_t opcode)
{
    struct ibv_qp_ex *x = qp->qpx;
    FACE_STAT(bad_wqes, 1);
    if (!qp->in_error) {
        face_log("QP 0x%x: WQE %u (opcode 0x%x) completes in error, "
                 "syndrome 0x%x",
                 qp->qpn, index, opcode, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
        qp->in_error = 1;
    }
    if (!qp->failed_now) {
        ibv_wr_start(x);
        x->wr_id    = index;
        x->wr_flags = 0;
        dcxemu_wr_malformed(x);
        if (ibv_wr_complete(x) == 0) {
            return;
        }
    }
    wqe_fail_now(qp, index, opcode);
}

/* Take every WQE the doorbell record shows (sq_lock held); how many. */
static unsigned sq_take(struct face_qp *qp, uint16_t pi)
{
    unsigned count = 0;
    while (qp->sq_pi != pi) {
        uint32_t wqebb            = qp->sq_pi & (qp->sq_wqebb_cnt - 1);
        struct dcxemu_mlx5_wqe *w = qp->dec;
        int synd   = dcxemu_mlx5_wqe_decode(qp->sq_buf, qp->sq_wqebb_cnt, wqebb,
                                          qp->kind == FACE_QP_DCI ?
                                                    DCXEMU_MLX5_QP_DCI :
                                                    DCXEMU_MLX5_QP_RC,
                                            qp->max_wqe_bytes, w);
        uint32_t n = synd == 0 && w->num_wqebb != 0 ? w->num_wqebb : 1;
        if (synd == 0) { /* an AV the device cannot parse: still n long */
            synd = dcxemu_mlx5_wqe_check_av(w,
                                            qp->kind == FACE_QP_DCI ?
                                                    DCXEMU_MLX5_QP_DCI :
                                                    DCXEMU_MLX5_QP_RC,
                                            qp->obj.file->compact_av);
        }
        qp->wqe[wqebb].opcode = w->opcode;
        if (synd != 0) {
            wqe_bad(qp, (uint16_t)qp->sq_pi, w->opcode);
        } else if (wqe_post(qp, w, wqebb) != 0) {
            wqe_bad(qp, w->wqe_index, w->opcode);
        }
        qp->sq_pi = (uint16_t)(qp->sq_pi + n);
        count++;
    }
    FACE_STAT(wqes, count);
    return count;
}

static uint16_t sq_dbrec(struct face_qp *qp)
{
    return (uint16_t)be32toh(
            __atomic_load_n(&qp->dbrec[MLX5_SND_DBR], __ATOMIC_ACQUIRE));
}

/* A doorbell: the WQEs written before it. */
unsigned face_sq_doorbell(struct face_qp *qp)
{
    unsigned count;
    pthread_mutex_lock(&qp->sq_lock);
    count = sq_take(qp, sq_dbrec(qp));
    pthread_mutex_unlock(&qp->sq_lock);
    return count;
}

/* The engine's look for a doorbell nobody trapped (read-write UARs): WQEs
 * that stood in the record since its last look, so that it never races a
 * doorbell being served. */
unsigned face_sq_backstop(struct face_qp *qp)
{
    unsigned count = 0;
    uint16_t pi;
    if (pthread_mutex_trylock(&qp->sq_lock) != 0) {
        return 0;
    }
    pi = sq_dbrec(qp);
    if (pi != qp->sq_pi && pi == qp->backstop_pi) {
        count = sq_take(qp, pi);
    }
    qp->backstop_pi = pi;
    pthread_mutex_unlock(&qp->sq_lock);
    return count;
}

int face_sq_untaken(struct face_qp *qp)
{
    return sq_dbrec(qp) != __atomic_load_n(&qp->sq_pi, __ATOMIC_RELAXED);
}

/* A BlueFlame copy against the WQE its control segment names (the index in
 * it), in the send queue: 0, or the first differing byte + 1. */
int face_sq_compare(struct face_qp *qp, const uint8_t *bytes, uint32_t len)
{
    __be32 opmod_idx_opcode;
    uint32_t idx, i;
    const uint8_t *q;

    memcpy(&opmod_idx_opcode, bytes, sizeof(opmod_idx_opcode));
    idx = (be32toh(opmod_idx_opcode) >> 8) & 0xffff;
    for (i = 0; i < len; i++) {
        q = (const uint8_t *)qp->sq_buf +
            64 * ((idx + i / 64) & (qp->sq_wqebb_cnt - 1)) + i % 64;
        if (*q != bytes[i]) {
            return (int)i + 1;
        }
    }
    return 0;
}

/* RESET: libmlx5 starts its queue over, and so does the face. */
void face_sq_reset(struct face_qp *qp)
{
    pthread_mutex_lock(&qp->sq_lock);
    qp->sq_pi       = 0;
    qp->backstop_pi = 0;
    qp->in_error    = 0;
    qp->failed_now  = 0;
    pthread_mutex_unlock(&qp->sq_lock);
    pthread_mutex_lock(&qp->rq_lock);
    qp->rq_taken = 0;
    pthread_mutex_unlock(&qp->rq_lock);
}
