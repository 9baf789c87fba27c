/* dcxemu requester stage: runs a QP's send queue -- head gating, one WQE
 * through resolution (under the fabric lock), its data copy (without it) and
 * completion, RNR and transport retries. */
#define _GNU_SOURCE
#include "opcode.h"
#include "resp.h"
#include "comp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What ends a WQE before it looks at any key (fabric lock held): an injected
 * status, a local key operation (UMR, LOCAL_INV), a malformed raw WQE.  1 if
 * the WQE is finished. */
static int exec_local_only(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                           struct exec_plan *p, struct exec_out *o)
{
    struct dcxemu_shm_qp *s = &dcxemu_fab->qps[qp->idx];
    if (s->fault_force_status != 0) {
        /* injected: this WR completes with the status instead of executing */
        uint32_t st           = s->fault_force_status - 1;
        s->fault_force_status = 0;
        fail(o, st, dcxemu_forced_syndrome(st));
        return 1;
    }
    switch (p->op->exec) {
    case DCXEMU_EXEC_LOCAL_MEM:
        dcxemu_mem_local_op(qp, w, o);
        return 1;
    case DCXEMU_EXEC_NOP:
        return 1;
    default:
        break;
    }
    if (__builtin_expect(dcxemu_cfg.faults, 0) &&
        dcxemu_chance(dcxemu_cfg.status_p)) {
        fail(o, dcxemu_cfg.status, dcxemu_forced_syndrome(dcxemu_cfg.status));
        return 1;
    }
    if (w->raw_bad) {
        fail(o, IBV_WC_LOC_QP_OP_ERR,
             SYND_LOC_QP_OP); /* a WQE the HCA cannot parse */
        return 1;
    }
    return 0;
}

/* The local side (fabric lock held): checks that never reach the wire, and the
 * local pieces.  A WRITE from small-block local mkeys is gathered later:
 * checked here, its mkeys copied.  0, or -1 with the WQE failed. */
static int local_resolve(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                         struct exec_plan *p, struct exec_out *o)
{
    const struct dcxemu_opcode *op = p->op;
    int gather                     = 0;
    if (w->is_inline) {
        if (op->writes_local) {
            fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
            return -1;
        }
        p->total = w->inline_len;
        dcxemu_iovbuf_push(&p->liov, wqe_inline(qp, w), p->total);
    } else {
        if (w->opcode == DCXEMU_OP_WRITE) {
            for (uint32_t i = 0; i < w->num_sge && !gather; i++) {
                gather = dcxemu_sge_is_small_interleaved(&wqe_sges(w)[i]);
            }
        }
        for (uint32_t i = 0; i < w->num_sge; i++) {
            struct ibv_sge *sg = &wqe_sges(w)[i];
            /* gathered: the same checks, no piece list */
            if (dcxemu_resolve(sg->lkey, (uint16_t)dcxemu_me, dcxemu_my_token,
                               qp->pd->pd_id, sg->addr, sg->length,
                               op->writes_local ? IBV_ACCESS_LOCAL_WRITE : 0,
                               gather ? NULL : &p->liov) != 0) {
                fail(o, IBV_WC_LOC_PROT_ERR, SYND_LOC_PROT);
                return -1;
            }
            p->total += sg->length;
        }
    }
    if (p->total > DCXEMU_MAX_MSG_SZ) {
        fail(o, IBV_WC_LOC_LEN_ERR, SYND_LOC_LEN);
        return -1;
    }
    if (op->atomic && (p->liov.n != 1 || p->total != atomic_size(w))) {
        fail(o, IBV_WC_LOC_QP_OP_ERR,
             SYND_LOC_QP_OP); /* malformed atomic WQE */
        return -1;
    }
    if (gather) {
        p->gk  = calloc(w->num_sge, sizeof(*p->gk));
        p->ngk = p->gk != NULL ? w->num_sge : 0;
        if (p->gk == NULL ||
            dcxemu_gather_keys_take(wqe_sges(w), w->num_sge, p->gk) != 0) {
            fail(o, IBV_WC_GENERAL_ERR, 0);
            return -1;
        }
    }
    return 0;
}

static void plan_init(struct exec_plan *p, const struct dcxemu_wqe *w)
{
    p->op        = dcxemu_opcode(w->opcode);
    p->kind      = COPY_NONE;
    p->to_remote = 1;
    p->total     = 0;
    p->gk        = NULL;
    p->ngk       = 0;
    p->trc       = 0;
    p->ooo       = 0;
    dcxemu_iovbuf_init(&p->liov);
    dcxemu_iovbuf_init(&p->riov);
}

static void plan_fini(struct exec_plan *p)
{
    dcxemu_iovbuf_fini(&p->liov);
    dcxemu_iovbuf_fini(&p->riov);
    dcxemu_gather_keys_free(p->gk, p->ngk);
}

/* The target as the completion needs it after the lock was given back (fabric
 * lock held). */
static void plan_target(struct exec_plan *p, const struct dcxemu_shm_qp *t)
{
    p->pid     = dcxemu_copy_pid(t->owner);
    p->towner  = t->owner;
    p->ttoken  = t->owner_token;
    p->cq_idx  = t->cq_idx;
    p->srq_idx = t->srq_idx;
    p->tlid    = t->lid;
    p->trc     = t->is_rc;
    p->tidx    = (uint32_t)(t - dcxemu_fab->qps);
    p->tqpn    = t->qpn;
}

/* Checks and resolution of one WQE, fabric lock held: everything but a data
 * copy.  What is left to do is in p (p->kind); *wake: a member to wake once the
 * lock is given back, or -1. */
static enum exec_result exec_resolve(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                                     struct exec_out *o, struct exec_plan *p,
                                     int *wake)
{
    struct dcxemu_shm_qp *t;
    enum exec_result r;
    if (exec_local_only(qp, w, p, o) || local_resolve(qp, w, p, o) != 0) {
        return EXEC_DONE;
    }
    r = dcxemu_resp_reach(qp, w, o, &t);
    if (t == NULL) {
        return r;
    }
    plan_target(p, t);
    p->ooo = dcxemu_ooo_pair(qp, t);
    switch (p->op->exec) {
    case DCXEMU_EXEC_RECV:
        return dcxemu_resp_recv(qp, w, t, p, o, wake);
    case DCXEMU_EXEC_RDMA:
        return dcxemu_resp_rdma(qp, w, t, p, o, wake);
    case DCXEMU_EXEC_ATOMIC:
        return dcxemu_resp_atomic(qp, w, t, p, o, wake);
    default:
        fail(o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
        return EXEC_DONE;
    }
}

/* The data copy of a plan (no lock held).  0 or errno as dcxemu_vm_copy. A
 * WRITE or SEND between two out-of-order QPs is placed out of order; READ
 * responses and gathered WRITEs are not. */
static int
plan_copy(const struct exec_plan *p, struct dcxemu_wqe *w, uint32_t qpn)
{
    if (p->ooo && p->to_remote && p->gk == NULL) {
        return dcxemu_ooo_copy(p, qpn);
    }
    if (p->gk != NULL) {
        return dcxemu_gather_write(p->pid, wqe_sges(w), p->gk, w->num_sge,
                                   p->riov.v, p->riov.n);
    }
    return dcxemu_vm_copy(p->pid, p->to_remote, p->liov.v, p->liov.n, p->riov.v,
                          p->riov.n);
}

/* After the copy: end it and complete what it did.  RDMA needs no lock; a
 * receive retakes the fabric lock, and the copy ends in that hold, after the
 * receive CQE (a destroy or deregistration waiting for the copy then also finds
 * the CQE written). */
static enum exec_result exec_finish(struct dcxemu_qp *qp, struct exec_plan *p,
                                    int cerr, struct exec_out *o, int *wake)
{
    enum exec_result r;
    if (p->kind == COPY_RDMA) {
        dcxemu_copy_end(qp->idx);
        r = cerr != 0 ? dcxemu_copy_failed(cerr, o) : EXEC_DONE;
    } else if (dcxemu_lock() != 0) {
        dcxemu_copy_end(qp->idx);
        fail(o, IBV_WC_GENERAL_ERR, 0);
        return EXEC_DONE;
    } else {
        r = dcxemu_resp_recv_finish(p, cerr, o, wake);
        dcxemu_copy_end(qp->idx);
        dcxemu_unlock();
    }
    if (r == EXEC_DONE && o->status == IBV_WC_SUCCESS) {
        o->bytes = p->total;
        if (p->kind == COPY_RDMA && !p->to_remote) {
            o->byte_len = (uint32_t)p->total; /* READ */
        }
    }
    return r;
}

/* Ring what a WQE woke (after the fabric lock is released). */
static void wake_target(int wake)
{
    if (wake >= 0 && wake != dcxemu_me) {
        dcxemu_ring(wake);
    } else if (wake == dcxemu_me) {
        dcxemu_engine_kick();
    }
}

/* Execute one WQE: checks and resolution under the fabric lock, the data copy
 * with no fabric lock held (recorded as in flight, see dcxemu_copy_wait), then
 * its completion at the target. */
static enum exec_result
execute(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_out *o)
{
    struct exec_plan p;
    enum exec_result r;
    int wake = -1;
    plan_init(&p, w);
    if (dcxemu_lock() != 0) {
        fail(o, IBV_WC_GENERAL_ERR, 0);
        plan_fini(&p);
        return EXEC_DONE;
    }
    r = exec_resolve(qp, w, o, &p, &wake);
    if (p.kind != COPY_NONE) {
        dcxemu_copy_begin(qp->idx); /* in the hold that resolved the keys */
    }
    dcxemu_unlock();
    wake_target(wake);
    if (p.kind != COPY_NONE) {
        int cerr;
        dcxemu_test_hook_call(DCXEMU_TEST_COPY_START, qp->qpx.qp_base.qp_num,
                              p.total);
        cerr = plan_copy(&p, w, qp->qpx.qp_base.qp_num);
        wake = -1;
        r    = exec_finish(qp, &p, cerr, o, &wake);
        wake_target(wake);
    }
    if (p.trc && r == EXEC_DONE && o->status != IBV_WC_SUCCESS &&
        dcxemu_lock() == 0) {
        wake = -1;
        dcxemu_resp_rc_error(&p, o, &wake);
        dcxemu_unlock();
        wake_target(wake);
    }
    plan_fini(&p);
    return r;
}

/* Microseconds to wait before the head WQE runs: injected delays of the QP and
 * of its target DCT (read without the fabric lock: a stale value only shifts
 * one delay), and DCXEMU_FAULTS. */
static uint64_t head_delay_us(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    uint64_t us  = __atomic_load_n(&dcxemu_fab->qps[qp->idx].fault_delay_us,
                                   __ATOMIC_RELAXED);
    uint8_t exec = dcxemu_opcode(w->opcode)->exec;
    if (exec != DCXEMU_EXEC_LOCAL_MEM && exec != DCXEMU_EXEC_NOP) {
        /* it goes to a target */
        struct dcxemu_shm_qp *t =
                &dcxemu_fab->qps[w->dctn & (DCXEMU_MAX_QPS - 1)];
        if (w->dctn != 0 &&
            __atomic_load_n(&t->qpn, __ATOMIC_RELAXED) == w->dctn) {
            us += __atomic_load_n(&t->fault_delay_us, __ATOMIC_RELAXED);
        }
        if (__builtin_expect(dcxemu_cfg.faults, 0) &&
            dcxemu_chance(dcxemu_cfg.delay_p)) {
            us += dcxemu_cfg.delay_us;
        }
    }
    return us;
}

/* The head WQE's gate (deferral, injected delays), set at the first look at it.
 * 1 if it must wait: *until is when it may run. */
static int head_waits(struct dcxemu_qp *qp, struct dcxemu_lane *l,
                      struct dcxemu_wqe *w, uint64_t *now, uint64_t *until)
{
    if (l->gate_ns == 0) {
        uint64_t gate = w->not_before_ns, extra = head_delay_us(qp, w);
        if (extra != 0) {
            *now = *now != 0 ? *now : dcxemu_now_ns();
            gate = (gate > *now ? gate : *now) + extra * 1000;
        }
        l->gate_ns = gate != 0 ? gate : 1;
    }
    if (l->gate_ns > 1) {
        *now = *now != 0 ? *now : dcxemu_now_ns();
        if (*now < l->gate_ns) {
            *until = l->gate_ns;
            return 1;
        }
    }
    return 0;
}

/* An RNR or an unreachable target: 1 if the head WQE waits for a retry (*until
 * is when, 0 = forever), else 0 with the WQE failed (retries exhausted). */
static int retry_waits(struct dcxemu_qp *qp, struct dcxemu_lane *l,
                       enum exec_result r, struct exec_out *o, uint64_t *now,
                       uint64_t *until)
{
    double t;
    *now = *now != 0 ? *now : dcxemu_now_ns();
    if (r == EXEC_RNR) {
        l->rnr_count++;
        if (qp->rnr_retry == 7 || l->rnr_count <= qp->rnr_retry) {
            *until = *now + dcxemu_scaled_ns(o->rnr_ms * 1e6);
            DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, rnr_retries, 1);
            return 1;
        }
        fail(o, IBV_WC_RNR_RETRY_EXC_ERR, SYND_RNR_RETRY_EXC);
        return 0;
    }
    t = qp->timeout == 0 ? 4096.0 * (1 << 14) :
                           4096.0 * (double)(1ull << qp->timeout);
    l->retry_count++;
    if (qp->timeout == 0 || l->retry_count <= qp->retry_cnt) {
        *until = *now + dcxemu_scaled_ns(t); /* 0 = forever */
        DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, transport_retries, 1);
        return 1;
    }
    fail(o, IBV_WC_RETRY_EXC_ERR, SYND_RETRY_EXC);
    return 0;
}

/* A lane's head WQE is done: the next one starts afresh. */
static void lane_next(struct dcxemu_lane *l)
{
    l->rnr_count   = 0;
    l->retry_count = 0;
    l->gate_ns     = 0;
}

/* The head WQE is done (executed, failed or flushed): its CQE, and the next WQE
 * becomes the head. 1 if a channel event was raised. */
static int head_retire(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                       const struct exec_out *o)
{
    int raised = dcxemu_comp_send(qp, w, qp->sq_done, o);
    qp->sq_done++;
    qp->lane.gate_ns = 0;
    return raised;
}

/* A WQE flushed instead of executed (its QP or its stream in error). */
static void
flush_out(struct dcxemu_qp *qp, struct dcxemu_wqe *w, struct exec_out *o)
{
    memset(o, 0, sizeof(*o));
    fail(o, IBV_WC_WR_FLUSH_ERR, SYND_WR_FLUSH);
    DCXEMU_TRACE("flush qp=0x%x op=%s len=%llu wr_id=0x%llx status=%u",
                 qp->qpx.qp_base.qp_num, dcxemu_op_name(w->opcode),
                 (unsigned long long)wqe_len(w), (unsigned long long)w->wr_id,
                 o->status);
}

/* Flush the head WQE of a QP in error. */
static int head_flush(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    struct exec_out o;
    flush_out(qp, w, &o);
    return head_retire(qp, w, &o);
}

/* Execute published WQEs in order until done or the head WQE must wait for a
 * timer.  The clock is read only where a timer is involved. */
static int queue_progress(struct dcxemu_qp *qp)
{
    int raised = dcxemu_rc_absorb_remote_err(qp);
    for (;;) {
        uint64_t posted = __atomic_load_n(&qp->sq_posted, __ATOMIC_ACQUIRE);
        uint64_t now = 0, deadline, until = 0;
        struct dcxemu_wqe *w;
        struct exec_out o;
        enum exec_result r;
        /* a dead HCA executes nothing more: queued WRs never complete (checked
         * before every WR, so a device failing while this loop runs stops it at
         * the next one) */
        if (__builtin_expect(dcxemu_is_fatal(qp->ctx->dev_index), 0) ||
            qp->sq_done >= posted) {
            atomic_store(&qp->deadline_ns, 0);
            break;
        }
        w = slot(qp, qp->sq_done);
        if (atomic_load(&qp->hw_state) == IBV_QPS_ERR) {
            raised |= head_flush(qp, w);
            continue;
        }
        deadline = atomic_load(&qp->deadline_ns);
        if (deadline != 0 && (now = dcxemu_now_ns()) < deadline) {
            break;
        }
        if (head_waits(qp, &qp->lane, w, &now, &until)) {
            atomic_store(&qp->deadline_ns, until);
            break;
        }
        memset(&o, 0, sizeof(o));
        r = execute(qp, w, &o);
        if (r != EXEC_DONE && retry_waits(qp, &qp->lane, r, &o, &now, &until)) {
            atomic_store(&qp->deadline_ns, until);
            break;
        }
        lane_next(&qp->lane);
        if (deadline != 0) {
            atomic_store(&qp->deadline_ns, 0);
        }
        if (o.status != IBV_WC_SUCCESS) {
            atomic_store(&qp->hw_state,
                         IBV_QPS_ERR); /* qp->state is left alone */
        }
        dcxemu_comp_count(qp, w, &o);
        raised |= head_retire(qp, w, &o);
        if (o.status != IBV_WC_SUCCESS) {
            /* an RC QP in ERR: peers no longer reach it, its receives flush */
            dcxemu_rc_set_err(qp);
            raised |= dcxemu_rq_flush(qp, 0);
        }
    }
    return raised;
}

/* ------------------------------------------------------------ DCI streams
 * A DCI created with streams (mlx5dv_create_qp(3)) runs each stream in order
 * and the streams side by side: a stream whose head waits (RNR, a target not
 * reachable yet, a delay) does not hold back the others.  What ran ahead of
 * the send queue's head keeps its result here; CQEs still come in send-queue
 * order (libmlx5 frees every slot up to a CQE's wqe_counter).  An error ends
 * only its stream: its later WQEs flush, until more than max_errored streams
 * are in error and the whole DCI goes to ERR. */
struct stream {
    struct dcxemu_lane lane;
    uint64_t wait_ns; /* the head retries from then on; 0: no retry pending */
    uint32_t pass; /* the pass in which an older WQE of the stream waits */
    uint8_t errored;
};

struct ahead {
    struct exec_out o;
    uint8_t done; /* executed or flushed, its CQE not yet written */
};

struct dcxemu_streams {
    uint32_t num, max_errored, num_errored, pass;
    struct stream *s; /* num */
    struct ahead *a; /* one per send-queue slot */
};

int dcxemu_streams_create(struct dcxemu_qp *qp, uint8_t log_conc,
                          uint8_t log_err)
{
    struct dcxemu_streams *ss = calloc(1, sizeof(*ss));
    if (ss == NULL) {
        return ENOMEM;
    }
    ss->num         = 1u << log_conc;
    ss->max_errored = 1u << log_err;
    ss->s           = calloc(ss->num, sizeof(*ss->s));
    ss->a           = calloc(qp->ring_slots, sizeof(*ss->a));
    if (ss->s == NULL || ss->a == NULL) {
        goto err_free;
    }
    qp->streams = ss;
    return 0;

err_free:
    free(ss->s);
    free(ss->a);
    free(ss);
    return ENOMEM;
}

void dcxemu_streams_reset(struct dcxemu_qp *qp)
{
    struct dcxemu_streams *ss = qp->streams;
    if (ss != NULL) {
        memset(ss->s, 0, ss->num * sizeof(*ss->s));
        memset(ss->a, 0, qp->ring_slots * sizeof(*ss->a));
        ss->num_errored = 0;
        ss->pass        = 0;
    }
}

void dcxemu_streams_free(struct dcxemu_qp *qp)
{
    if (qp->streams != NULL) {
        free(qp->streams->s);
        free(qp->streams->a);
        free(qp->streams);
        qp->streams = NULL;
    }
}

uint32_t dcxemu_streams_num(const struct dcxemu_qp *qp)
{
    return qp->streams != NULL ? qp->streams->num : 1;
}

/* An error completion on stream s: the stream is in error; past max_errored
 * streams in error, the DCI. */
static void stream_error(struct dcxemu_qp *qp, struct stream *s)
{
    struct dcxemu_streams *ss = qp->streams;
    if (!s->errored) {
        s->errored = 1;
        ss->num_errored++;
    }
    if (ss->num_errored > ss->max_errored) {
        atomic_store(&qp->hw_state, IBV_QPS_ERR); /* qp->state left alone */
    }
}

/* mlx5dv_dci_stream_id_reset(3), exec_lock held: stream @stream_id leaves
 * the error state (one in error no more) and runs its later WQEs again. The
 * device refuses a stream the DCI does not have, and a DCI gone to ERR. */
int dcxemu_streams_reset_one(struct dcxemu_qp *qp, uint32_t stream_id)
{
    struct dcxemu_streams *ss = qp->streams;
    struct stream *s;
    if (ss == NULL || stream_id >= ss->num ||
        atomic_load(&qp->hw_state) != IBV_QPS_RTS) {
        return EINVAL;
    }
    s = &ss->s[stream_id];
    if (s->errored) {
        s->errored = 0;
        ss->num_errored--;
    }
    return 0;
}

/* Run the head WQE of its stream; 1 if it waits (*next lowered to when it
 * may go on, 0 kept for never). */
static int stream_run(struct dcxemu_qp *qp, struct stream *s,
                      struct dcxemu_wqe *w, struct ahead *a, uint64_t *now,
                      uint64_t *next)
{
    uint64_t until = 0;
    enum exec_result r;
    if (s->wait_ns != 0) {
        *now = *now != 0 ? *now : dcxemu_now_ns();
        if (*now < s->wait_ns) {
            until = s->wait_ns;
            goto wait;
        }
    }
    if (head_waits(qp, &s->lane, w, now, &until)) {
        goto wait;
    }
    memset(&a->o, 0, sizeof(a->o));
    r = execute(qp, w, &a->o);
    if (r != EXEC_DONE && retry_waits(qp, &s->lane, r, &a->o, now, &until)) {
        s->wait_ns = until;
        goto wait;
    }
    s->wait_ns = 0;
    lane_next(&s->lane);
    a->done = 1;
    dcxemu_comp_count(qp, w, &a->o);
    if (a->o.status != IBV_WC_SUCCESS) {
        stream_error(qp, s);
    }
    return 0;

wait:
    if (until != 0 && (*next == 0 || until < *next)) {
        *next = until;
    }
    return 1;
}

/* One pass over the published WQEs: each stream's head runs (an errored
 * stream's flushes); then the CQEs of what is done, in send-queue order. */
static int streams_progress(struct dcxemu_qp *qp)
{
    struct dcxemu_streams *ss = qp->streams;
    uint64_t posted = __atomic_load_n(&qp->sq_posted, __ATOMIC_ACQUIRE);
    uint64_t now = 0, next = 0;
    uint32_t pass;
    int raised = 0, older_waits = 0;
    pass = ++ss->pass != 0 ? ss->pass : ++ss->pass; /* 0: no pass */
    if (__builtin_expect(dcxemu_is_fatal(qp->ctx->dev_index), 0)) {
        atomic_store(&qp->deadline_ns, 0); /* a dead HCA executes nothing */
        return 0;
    }
    for (uint64_t i = qp->sq_done;
         i < posted && atomic_load(&qp->hw_state) != IBV_QPS_ERR; i++) {
        struct dcxemu_wqe *w = slot(qp, i);
        struct ahead *a      = &ss->a[i % qp->ring_slots];
        struct stream *s;
        if (a->done) {
            continue;
        }
        if (w->stream_id >= ss->num) {
            /* a raw WQE naming a stream the DCI does not have, or a WQE the
             * face could not decode: the DCI's error, not a stream's, once
             * every older WQE is done; nothing later runs before it */
            if (older_waits) {
                break;
            }
            memset(&a->o, 0, sizeof(a->o));
            fail(&a->o, IBV_WC_LOC_QP_OP_ERR, SYND_LOC_QP_OP);
            a->done = 1;
            dcxemu_comp_count(qp, w, &a->o);
            atomic_store(&qp->hw_state, IBV_QPS_ERR);
            break;
        }
        s = &ss->s[w->stream_id];
        if (s->pass == pass) {
            older_waits = 1; /* an older WQE of its stream is not done */
            continue;
        }
        s->pass = pass;
        if (s->errored) {
            flush_out(qp, w, &a->o);
            a->done = 1;
        } else if (((w->flags & IBV_SEND_FENCE) && older_waits) ||
                   stream_run(qp, s, w, a, &now, &next)) {
            /* a fence waits for every older WQE, of any stream */
            older_waits = 1;
            continue;
        }
        s->pass = 0;
    }
    while (qp->sq_done < posted) {
        struct dcxemu_wqe *w = slot(qp, qp->sq_done);
        struct ahead *a      = &ss->a[qp->sq_done % qp->ring_slots];
        if (a->done) {
            a->done = 0;
            raised |= head_retire(qp, w, &a->o);
        } else if (atomic_load(&qp->hw_state) == IBV_QPS_ERR) {
            raised |= head_flush(qp, w);
        } else {
            break;
        }
    }
    atomic_store(&qp->deadline_ns,
                 atomic_load(&qp->hw_state) == IBV_QPS_ERR ? 0 : next);
    return raised;
}

void dcxemu_qp_progress(struct dcxemu_qp *qp)
{
    int raised;
    pthread_mutex_lock(&qp->exec_lock);
    raised = qp->streams != NULL ? streams_progress(qp) : queue_progress(qp);
    pthread_mutex_unlock(&qp->exec_lock);
    if (atomic_load(&qp->deadline_ns) != 0) {
        dcxemu_engine_kick(); /* let the engine recompute its sleep */
    }
    if (raised) {
        dcxemu_deliver_events();
    }
}
