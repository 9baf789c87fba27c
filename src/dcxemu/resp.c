/* dcxemu responder stage: what happens at the target of a WQE -- reaching the
 * DCT or RC peer, rkey and access checks, the SRQ (or an RC QP's own receive
 * queue) and receive CQE of a SEND / WRITE_IMM, atomics, and an RC responder
 * moved to ERR by an error. */
#define _GNU_SOURCE
#include "resp.h"
#include "opcode.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

/* IB RNR NAK timer encodings (min_rnr_timer 0..31), in milliseconds */
static const double rnr_timer_ms[32] = {
    655.36, 0.01,  0.02,  0.03,   0.04,   0.06,   0.08,   0.12,
    0.16,   0.24,  0.32,  0.48,   0.64,   0.96,   1.28,   1.92,
    2.56,   3.84,  5.12,  7.68,   10.24,  15.36,  20.48,  30.72,
    40.96,  61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
};

/* Does the WR's address reach DCT slot t?  InfiniBand: the AH's DLID is the
 * DCT's device LID. RoCE (no LIDs): the AH's destination GID must be the DCT's
 * own address (the table entry its RTR AV names, sgid_index) and the request
 * must use the same GID type (RoCE v1 frames and RoCE v2 UDP datagrams are
 * different packets); every packet, request and response, crosses
 * DCXEMU_ROCE_ROUTERS routers, so a hop limit (IP TTL) not above that count
 * dies on the way (the request by the AH's hop limit, the response by the
 * DCT's).  Ports of different link layers never reach each other. */
static int roce_route_ok(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                         const struct dcxemu_shm_qp *t)
{
    union ibv_gid sgid, tgid;
    uint32_t stype, ttype;
    if (!dcxemu_cfg.roce) {
        /* a GRH on InfiniBand: the target port takes a packet only if its
         * destination GID is one of the port's */
        return !t->roce && w->dlid >= 1 &&
               w->dlid <= (uint32_t)dcxemu_cfg.num_devices &&
               t->lid == w->dlid &&
               (!w->is_global ||
                (dcxemu_gid_entry((int)t->lid - 1, 0, &tgid, &ttype) == 0 &&
                 memcmp(&tgid, &w->dgid, sizeof(tgid)) == 0));
    }
    if (!t->roce || !w->is_global || t->lid < 1 ||
        t->lid > DCXEMU_MAX_DEVICES ||
        dcxemu_gid_entry(qp->ctx->dev_index, w->sgid_index, &sgid, &stype) !=
                0 ||
        dcxemu_gid_entry((int)t->lid - 1, t->sgid_index, &tgid, &ttype) != 0) {
        return 0;
    }
    return stype == ttype && memcmp(&tgid, &w->dgid, sizeof(tgid)) == 0 &&
           w->hop_limit > dcxemu_cfg.roce_routers &&
           t->hop_limit > dcxemu_cfg.roce_routers;
}

_Atomic int dcxemu_last_req_tclass  = -1;
_Atomic int dcxemu_last_resp_tclass = -1;

/* A target that vanished mid-operation is unreachable (retried, then
 * RETRY_EXC_ERR); any other failure to touch registered target memory is a
 * remote access error. */
enum exec_result dcxemu_copy_failed(int err, struct exec_out *o)
{
    if (err == ESRCH) {
        return EXEC_UNREACHABLE;
    }
    fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
    return EXEC_DONE;
}

/* ---------------------------------------------------------------- receive side
 * ---- */

/* The receive CQE of a SEND or WRITE_IMM at target t, but for its wr_id, status
 * and time. */
static void recv_cqe_init(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                          const struct dcxemu_shm_qp *t, struct exec_plan *p)
{
    struct dcxemu_shm_cqe *cqe = &p->rcqe;
    memset(cqe, 0, sizeof(*cqe));
    cqe->qp_num = t->qpn;
    cqe->src_qp = qp->qpx.qp_base.qp_num;
    /* RoCE packets carry a GRH and no LID */
    cqe->slid      = dcxemu_cfg.roce ? 0 : (uint16_t)(qp->ctx->dev_index + 1);
    cqe->wc_flags  = dcxemu_cfg.roce ? IBV_WC_GRH : 0;
    cqe->solicited = (w->flags & IBV_SEND_SOLICITED) != 0;
    cqe->byte_len  = (uint32_t)p->total;
    cqe->opcode = w->opcode == DCXEMU_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM :
                                                     IBV_WC_RECV;
    if (p->op->imm) {
        cqe->wc_flags |= IBV_WC_WITH_IMM;
        cqe->imm = w->imm;
    }
}

static struct dcxemu_shm_srq_wqe *srq_head(struct dcxemu_shm_srq *srq)
{
    return (struct dcxemu_shm_srq_wqe *)dcxemu_ptr(
            srq->ring_off + (srq->head % srq->max_wr) * srq->wqe_size);
}

/* Take the SRQ's head WQE (SRQ lock held, not empty): its wr_id.  The limit
 * event fires (one-shot) when fewer than `limit` WQEs remain. */
static uint64_t srq_take(struct dcxemu_shm_srq *srq, uint16_t owner, int *wake)
{
    uint64_t wr_id = srq_head(srq)->wr_id;
    srq->head++;
    if (srq->limit != 0 && srq->tail - srq->head < srq->limit) {
        srq->limit = 0;
        atomic_store(&srq->limit_event, 1);
        *wake = owner;
    }
    return wr_id;
}

/* An SRQ found empty wakes an owner that posts receives without calling the
 * model (the mlx5 face takes them from the application's SRQ buffer). */
static void
srq_found_empty(struct dcxemu_shm_srq *srq, uint16_t owner, int *wake)
{
    if (srq->wake_owner) {
        *wake = owner;
    }
}

/* Push the receive CQE into the target's CQ, charged to the target's member and
 * device (fabric lock held, so the owner is not reaped meanwhile). */
static void recv_cqe_push(struct exec_plan *p, int *wake)
{
    struct dcxemu_shm_cq *cq;
    if (p->cq_idx < 0) {
        return;
    }
    cq = &dcxemu_fab->cqs[p->cq_idx];
    if (!cq->in_use || cq->owner != p->towner || cq->owner_token != p->ttoken) {
        return;
    }
    DCXEMU_COUNT(p->towner, (int)p->tlid - 1, recv_cqes, 1);
    if (p->rcqe.status != IBV_WC_SUCCESS) {
        DCXEMU_COUNT(p->towner, (int)p->tlid - 1, error_cqes, 1);
    }
    p->rcqe.ts_ns = dcxemu_now_ns();
    if (dcxemu_cq_push(cq, &p->rcqe)) {
        *wake = p->towner;
    }
}

/* The pieces of receive WQE rw that take `total` bytes of a SEND, in order,
 * into riov (fabric and SRQ lock held).  IBV_WC_SUCCESS, or the receive CQE's
 * status with *synd. */
static uint32_t recv_scatter(const struct dcxemu_shm_srq *srq,
                             const struct dcxemu_shm_srq_wqe *rw,
                             const struct exec_plan *p, struct iovbuf *riov,
                             uint32_t *synd)
{
    uint64_t room = 0, total = p->total;
    for (uint32_t i = 0; i < rw->num_sge && i < srq->max_sge; i++) {
        const struct ibv_sge *sg = &rw->sge[i];
        uint64_t take;
        if (sg->length == 0 || room >= total) {
            room += sg->length;
            continue;
        }
        take = total - room < sg->length ? total - room : sg->length;
        if (dcxemu_resolve(sg->lkey, p->towner, p->ttoken, srq->pd_id, sg->addr,
                           sg->length, IBV_ACCESS_LOCAL_WRITE, riov) != 0) {
            *synd = SYND_LOC_PROT;
            return IBV_WC_LOC_PROT_ERR;
        }
        /* only `take` bytes of this SGE receive data: trim what resolve added */
        for (uint64_t extra = sg->length - take; extra > 0 && riov->n > 0;) {
            struct iovec *last = &riov->v[riov->n - 1];
            uint64_t cut       = extra < last->iov_len ? extra : last->iov_len;
            last->iov_len -= cut;
            extra -= cut;
            if (last->iov_len == 0) {
                riov->n--;
            }
        }
        room += sg->length;
    }
    if (room < total) {
        *synd = SYND_LOC_LEN;
        return IBV_WC_LOC_LEN_ERR;
    }
    return IBV_WC_SUCCESS;
}

/* A SEND (or a WRITE_IMM without data) takes the SRQ's head WQE now (fabric and
 * SRQ lock held, SRQ not empty): its data needs the WQE's buffers.  A receive
 * that fails, or has nothing to copy, completes here; else the copy and the
 * receive CQE follow without the lock. */
static void recv_take_now(const struct dcxemu_wqe *w,
                          struct dcxemu_shm_srq *srq, struct exec_plan *p,
                          struct exec_out *o, int *wake)
{
    uint32_t st = IBV_WC_SUCCESS, synd = 0;
    if (p->ooo) {
        dcxemu_ooo_recv_pick(srq);
    }
    if (w->opcode != DCXEMU_OP_WRITE_IMM) {
        st = recv_scatter(srq, srq_head(srq), p, &p->riov, &synd);
    }
    p->rcqe.wr_id = srq_take(srq, p->towner, wake);
    if (st != IBV_WC_SUCCESS) {
        p->rcqe.status     = st;
        p->rcqe.vendor_err = synd;
        if (st == IBV_WC_LOC_LEN_ERR) {
            fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        } else {
            fail(o, IBV_WC_REM_OP_ERR, SYND_REM_OP);
        }
    }
    if (st != IBV_WC_SUCCESS || p->total == 0 ||
        w->opcode == DCXEMU_OP_WRITE_IMM) {
        recv_cqe_push(p, wake);
        return;
    }
    p->kind = COPY_SEND;
}

/* SEND, SEND_IMM and WRITE_IMM at the target (fabric lock held).  A WRITE_IMM
 * with data checks the rkey and that a receive WQE waits, and takes it only
 * once the data is placed (recv_finish). */
enum exec_result
dcxemu_resp_recv(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                 const struct dcxemu_shm_qp *t, struct exec_plan *p,
                 struct exec_out *o, int *wake)
{
    int imm_data = w->opcode == DCXEMU_OP_WRITE_IMM && p->total > 0;
    struct dcxemu_shm_srq *srq;
    enum exec_result r = EXEC_DONE;
    if (imm_data &&
        (!(t->access & p->op->remote_right) ||
         dcxemu_resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr,
                        p->total, p->op->remote_right, &p->riov) != 0)) {
        fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
        return EXEC_DONE;
    }
    if (t->srq_idx < 0 || !dcxemu_fab->srqs[t->srq_idx].in_use) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    srq = &dcxemu_fab->srqs[t->srq_idx];
    if (dcxemu_shm_lock(&srq->lock) != 0) {
        fail(o, IBV_WC_GENERAL_ERR, 0);
        return EXEC_DONE;
    }
    recv_cqe_init(qp, w, t, p);
    if (srq->head == srq->tail) {
        r = EXEC_RNR; /* nothing happens at the target until a WQE is posted */
        srq_found_empty(srq, p->towner, wake);
    } else if (imm_data) {
        p->kind = COPY_WRITE_IMM;
    } else {
        recv_take_now(w, srq, p, o, wake);
    }
    pthread_mutex_unlock(&srq->lock);
    return r;
}

/* The receive after its data copy (fabric lock held).  A SEND's WQE was taken
 * before the copy; a WRITE_IMM takes one now, and if another sender took the
 * last one meanwhile it is an RNR (the retry places the data again, as a
 * retransmission does). */
enum exec_result dcxemu_resp_recv_finish(struct exec_plan *p, int cerr,
                                         struct exec_out *o, int *wake)
{
    struct dcxemu_shm_srq *srq;
    if (p->kind == COPY_SEND) {
        if (cerr == ESRCH) {
            return EXEC_UNREACHABLE; /* the target is exiting: no receive CQE */
        }
        if (cerr != 0) {
            p->rcqe.status     = IBV_WC_LOC_PROT_ERR;
            p->rcqe.vendor_err = SYND_LOC_PROT;
            fail(o, IBV_WC_REM_OP_ERR, SYND_REM_OP);
        }
        recv_cqe_push(p, wake);
        return EXEC_DONE;
    }
    if (cerr != 0) {
        return dcxemu_copy_failed(cerr, o); /* no receive WQE taken */
    }
    srq = &dcxemu_fab->srqs[p->srq_idx];
    if (!srq->in_use || srq->owner != p->towner ||
        srq->owner_token != p->ttoken) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    if (dcxemu_shm_lock(&srq->lock) != 0) {
        fail(o, IBV_WC_GENERAL_ERR, 0);
        return EXEC_DONE;
    }
    if (srq->head == srq->tail) {
        srq_found_empty(srq, p->towner, wake);
        pthread_mutex_unlock(&srq->lock);
        return EXEC_RNR;
    }
    if (p->ooo) {
        dcxemu_ooo_recv_pick(srq);
    }
    p->rcqe.wr_id = srq_take(srq, p->towner, wake);
    pthread_mutex_unlock(&srq->lock);
    recv_cqe_push(p, wake);
    return EXEC_DONE;
}

/* The new value of an atomic; 0 if memory is left alone (compare failed).
 * Masked compare-swap: if ((old ^ compare) & compare_mask) == 0, new = (old &
 * ~swap_mask) | (swap & swap_mask). Masked fetch-add: a set bit of the field
 * boundary (in cmp) ends a field, so no carry leaves it (all ones: a per-bit
 * add, i.e. xor). */
static int atomic_compute(const struct dcxemu_wqe *w, uint64_t old,
                          uint32_t asize, uint64_t *val)
{
    uint64_t mask = asize == 4 ? UINT32_MAX : UINT64_MAX;
    if (w->opcode == DCXEMU_OP_FETCH_ADD) {
        if (!w->raw_masked || (w->cmp & mask) == 0) {
            *val = (old + w->swap_add) & mask;
        } else {
            uint64_t sum = 0, carry = 0;
            for (uint32_t bit = 0; bit < asize * 8; bit++) {
                uint64_t a = (old >> bit) & 1, b = (w->swap_add >> bit) & 1;
                uint64_t s = a ^ b ^ carry;
                carry      = (a & b) | (a & carry) | (b & carry);
                sum |= s << bit;
                if ((w->cmp >> bit) & 1) {
                    carry = 0; /* field boundary: the carry does not cross it */
                }
            }
            *val = sum;
        }
        return 1;
    }
    if (!w->raw) {
        if (old != w->cmp) {
            return 0;
        }
        *val = w->swap_add;
        return 1;
    }
    if (((old ^ w->cmp) & w->cmp_mask & mask) != 0) {
        return 0;
    }
    *val = ((old & ~w->swap_mask) | (w->swap_add & w->swap_mask)) & mask;
    return 1;
}

/* Does slot t take this WQE?  A DCT in RTR with the WQE's DC key; an RC QP in
 * RTR or RTS connected back to the sender (a packet of another connection is
 * dropped, as a QP in any other state drops it). The packet carries the
 * P_Key at the sender's pkey_index; the target's port drops one that does
 * not match the target's (a P_Key violation: the sender only sees its
 * retries run out). */
static int target_accepts(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                          const struct dcxemu_shm_qp *t)
{
    if (!t->in_use || t->qpn != w->dctn || !roce_route_ok(qp, w, t) ||
        !dcxemu_pkey_match(dcxemu_cfg.pkeys[qp->pkey_index], t->pkey)) {
        return 0;
    }
    if (qp->is_rc) {
        return t->is_rc &&
               (t->rc_state == IBV_QPS_RTR || t->rc_state == IBV_QPS_RTS) &&
               t->rc_dest_qpn == qp->qpx.qp_base.qp_num;
    }
    return t->is_dct && t->dct_ready && t->dc_key == w->dc_key;
}

/* Reach the target (fabric lock held): wrong LID/GID, unknown/destroyed/dead
 * DCT or RC peer, a peer not connected back and a wrong key all look alike.
 * *tp = the target's slot, or NULL when the WQE ends here with the result. */
enum exec_result
dcxemu_resp_reach(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                  struct exec_out *o, struct dcxemu_shm_qp **tp)
{
    struct dcxemu_shm_qp *t = &dcxemu_fab->qps[w->dctn & (DCXEMU_MAX_QPS - 1)];
    *tp                     = NULL;
    if (!target_accepts(qp, w, t) ||
        !dcxemu_member_alive(t->owner, t->owner_token) ||
        t->fault_unreachable) {
        return EXEC_UNREACHABLE;
    }
    if (t->is_dct && t->fault_force_status != 0) {
        /* injected on the target: this WR completes with the status, nothing
         * executes (on an RC QP the fault is for its own next WR) */
        uint32_t st           = t->fault_force_status - 1;
        t->fault_force_status = 0;
        fail(o, st, dcxemu_forced_syndrome(st));
        return EXEC_DONE;
    }
    if (t->fault_drop_next > 0) {
        t->fault_drop_next--; /* injected: this delivery attempt is lost on the
                                 wire */
        return EXEC_UNREACHABLE;
    }
    if (__builtin_expect(dcxemu_cfg.faults, 0) &&
        dcxemu_chance(dcxemu_cfg.drop_p)) {
        return EXEC_UNREACHABLE;
    }
    if (dcxemu_cfg.roce) {
        atomic_store(&dcxemu_last_req_tclass, w->traffic_class);
        atomic_store(&dcxemu_last_resp_tclass, t->traffic_class);
    }
    o->rnr_ms = rnr_timer_ms[t->min_rnr_timer & 31];
    *tp       = t;
    return EXEC_DONE;
}

/* A responder error (REM_ACCESS, REM_INV_REQ, REM_OP) at an RC target moves
 * it to ERR too, as hardware does (fabric lock held): peers no longer reach
 * it, and its owner (*wake) flushes its queues. */
void dcxemu_resp_rc_error(const struct exec_plan *p, const struct exec_out *o,
                          int *wake)
{
    struct dcxemu_shm_qp *t = &dcxemu_fab->qps[p->tidx];
    if (!p->trc || (o->status != IBV_WC_REM_ACCESS_ERR &&
                    o->status != IBV_WC_REM_INV_REQ_ERR &&
                    o->status != IBV_WC_REM_OP_ERR)) {
        return;
    }
    if (!t->in_use || !t->is_rc || t->qpn != p->tqpn ||
        (t->rc_state != IBV_QPS_RTR && t->rc_state != IBV_QPS_RTS)) {
        return;
    }
    t->rc_state = IBV_QPS_ERR;
    atomic_store(&t->rc_remote_err, 1);
    *wake = t->owner;
}

/* The device moved an RC QP to ERR (exec_lock held): peers no longer reach it. */
void dcxemu_rc_set_err(struct dcxemu_qp *qp)
{
    if (qp->is_rc && dcxemu_lock() == 0) {
        dcxemu_fab->qps[qp->idx].rc_state = IBV_QPS_ERR;
        dcxemu_unlock();
    }
}

/* A peer's WQE failed at this RC QP as responder and recorded it in the fabric
 * (which already shows ERR): the QP enters ERR here too and its own receive
 * queue is flushed; its send queue flushes as the requester runs it.  exec_lock
 * held; 1 if a channel event was raised. */
int dcxemu_rc_absorb_remote_err(struct dcxemu_qp *qp)
{
    struct dcxemu_shm_qp *s = &dcxemu_fab->qps[qp->idx];
    int st;
    if (!qp->is_rc || !atomic_load(&s->rc_remote_err) ||
        !atomic_exchange(&s->rc_remote_err, 0)) {
        return 0;
    }
    st = atomic_load(&qp->hw_state);
    if (st == IBV_QPS_RESET || st == IBV_QPS_ERR) {
        return 0;
    }
    atomic_store(&qp->hw_state, IBV_QPS_ERR);
    DCXEMU_TRACE("error qp=0x%x responder error: ERR", qp->qpx.qp_base.qp_num);
    return dcxemu_rq_flush(qp, 0);
}

/* WRITE and READ at the target (fabric lock held): the rkey; the copy follows
 * without the lock. */
enum exec_result
dcxemu_resp_rdma(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                 const struct dcxemu_shm_qp *t, struct exec_plan *p,
                 struct exec_out *o, int *wake)
{
    const struct dcxemu_opcode *op = p->op;
    uint32_t right                 = op->remote_right;
    if (p->total == 0) {
        return EXEC_DONE; /* zero-length RDMA does not check the rkey */
    }
    if (!(t->access & right) ||
        dcxemu_resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr,
                       p->total, right, &p->riov) != 0) {
        fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
        return EXEC_DONE;
    }
    p->kind      = COPY_RDMA;
    p->to_remote = !op->writes_local;
    return EXEC_DONE;
}

/* The atomic's response into the local buffer: 4-byte extended atomic responses
 * are big-endian (mlx5: ext_atomic_arg_sizes_be), 8-byte ones in host order
 * (atomic_req_8B_endianness_mode 1). */
static void atomic_respond(void *dst, uint64_t old, uint32_t asize)
{
    if (asize == 4) {
        uint32_t r32 = htobe32((uint32_t)old);
        memcpy(dst, &r32, 4);
    } else {
        memcpy(dst, &old, 8);
    }
}

/* CMP_SWP and FETCH_ADD at the target: a read-modify-write of 4 or 8 bytes
 * under the fabric lock (not a bulk copy), so it is atomic with respect to all
 * device atomics on the fabric. */
enum exec_result
dcxemu_resp_atomic(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                   const struct dcxemu_shm_qp *t, struct exec_plan *p,
                   struct exec_out *o, int *wake)
{
    uint32_t asize    = atomic_size(w);
    uint64_t old      = 0, val;
    struct iovec viov = { .iov_base = &old, .iov_len = asize };
    int cerr;
    if (w->raddr % asize != 0) {
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    if (w->raw_masked && (t->access & p->op->remote_right) &&
        t->atomic_mode < DCXEMU_ATOMIC_MODE_8B) {
        /* a responder in IB-compatible atomic mode (its HCA lists no masked
         * atomics) takes no masked operation */
        fail(o, IBV_WC_REM_INV_REQ_ERR, SYND_REM_INV_REQ);
        return EXEC_DONE;
    }
    if (!(t->access & p->op->remote_right) ||
        dcxemu_resolve(w->rkey, t->owner, t->owner_token, t->pd_id, w->raddr,
                       asize, p->op->remote_right, &p->riov) != 0) {
        fail(o, IBV_WC_REM_ACCESS_ERR, SYND_REM_ACCESS);
        return EXEC_DONE;
    }
    if (p->riov.n != 1 || (uintptr_t)p->riov.v[0].iov_base % asize != 0) {
        fail(o, IBV_WC_REM_INV_REQ_ERR,
             SYND_REM_INV_REQ); /* word split or misaligned */
        return EXEC_DONE;
    }
    if ((cerr = dcxemu_vm_copy(p->pid, 0, &viov, 1, p->riov.v, 1)) != 0) {
        return dcxemu_copy_failed(cerr, o);
    }
    if (asize == 4) {
        uint32_t v32;
        memcpy(&v32, &old, 4);
        old = v32;
    }
    if (atomic_compute(w, old, asize, &val)) {
        struct iovec niov = { .iov_base = &val, .iov_len = asize };
        if (asize == 4) {
            uint32_t v32 = (uint32_t)val;
            memcpy(&val, &v32, 4);
        }
        if ((cerr = dcxemu_vm_copy(p->pid, 1, &niov, 1, p->riov.v, 1)) != 0) {
            return dcxemu_copy_failed(cerr, o);
        }
    }
    atomic_respond(p->liov.v[0].iov_base, old, asize);
    atomic_fetch_add(&dcxemu_fab->atomic_ops, 1);
    o->byte_len = asize;
    o->bytes    = asize;
    return EXEC_DONE;
}
