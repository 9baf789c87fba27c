/* dcxemu execution stages -- requester (req.c), responder (resp.c), completer
 * (comp.c), memory (mem.c): what they share about one send WQE. */
#ifndef DCXEMU_EXEC_H
#define DCXEMU_EXEC_H

#include "mem.h"
#include "wr.h"

/* mlx5-style syndromes reported as vendor_err */
enum {
    SYND_LOC_LEN       = 0x01,
    SYND_LOC_QP_OP     = 0x02,
    SYND_LOC_PROT      = 0x04,
    SYND_WR_FLUSH      = 0x05,
    SYND_REM_INV_REQ   = 0x12,
    SYND_REM_ACCESS    = 0x13,
    SYND_REM_OP        = 0x14,
    SYND_RETRY_EXC     = 0x15,
    SYND_RNR_RETRY_EXC = 0x16,
};

enum exec_result {
    EXEC_DONE,
    EXEC_RNR,
    EXEC_UNREACHABLE
};

struct exec_out {
    uint32_t status, vendor_err, byte_len;
    double rnr_ms;
    uint64_t bytes; /* payload moved (counters) */
};

static inline void fail(struct exec_out *o, uint32_t st, uint32_t synd)
{
    o->status     = st;
    o->vendor_err = synd;
}

/* What a WQE still has to do once its checks are made under the fabric lock and
 * the lock is given back: move its data, then (SEND, WRITE_IMM) complete the
 * receive at the target. */
enum copy_kind {
    COPY_NONE,
    COPY_RDMA,
    COPY_SEND,
    COPY_WRITE_IMM
};

struct dcxemu_opcode;

struct exec_plan {
    const struct dcxemu_opcode *op; /* the WQE's row of the opcode table */
    enum copy_kind kind;
    int to_remote;
    pid_t pid; /* the target process, as dcxemu_copy_pid() */
    uint64_t total;
    struct iovbuf liov,
            riov; /* local pieces; target pieces (rkey, or the receive WQE) */
    struct gather_key
            *gk; /* a WRITE gathered from small-block local mkeys, else NULL */
    uint32_t ngk;
    /* the target, for the receive completion */
    struct dcxemu_shm_cqe rcqe;
    uint16_t towner;
    uint64_t ttoken;
    int32_t cq_idx, srq_idx;
    uint32_t tlid;
    int ooo; /* DCI and DCT both place data out of order (ooo.c) */
    /* an RC target: its slot and number, for a responder error */
    int trc;
    uint32_t tidx, tqpn;
};

/* ooo.c: whether DCI qp and target t both have the flag (then WRITE and
 * SEND data is placed out of order, and receives take any of the SRQ's first
 * WQEs); a receive's pick (SRQ lock held, not empty: the chosen WQE is moved
 * to the head); the data copy of such a plan, chunks in shuffled order (no
 * lock held; 0 or errno as dcxemu_vm_copy). */
int dcxemu_ooo_pair(const struct dcxemu_qp *qp, const struct dcxemu_shm_qp *t);
void dcxemu_ooo_recv_pick(struct dcxemu_shm_srq *srq);
int dcxemu_ooo_copy(const struct exec_plan *p, uint32_t qpn);

static inline uint32_t atomic_size(const struct dcxemu_wqe *w)
{
    return w->raw ? w->raw_size : 8;
}

/* The syndrome of a status forced by fault injection. */
static inline uint32_t dcxemu_forced_syndrome(uint32_t st)
{
    switch (st) {
    case IBV_WC_RETRY_EXC_ERR:
        return SYND_RETRY_EXC;
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return SYND_RNR_RETRY_EXC;
    case IBV_WC_REM_ACCESS_ERR:
        return SYND_REM_ACCESS;
    case IBV_WC_LOC_PROT_ERR:
        return SYND_LOC_PROT;
    case IBV_WC_REM_INV_REQ_ERR:
        return SYND_REM_INV_REQ;
    case IBV_WC_REM_OP_ERR:
        return SYND_REM_OP;
    case IBV_WC_LOC_LEN_ERR:
        return SYND_LOC_LEN;
    case IBV_WC_LOC_QP_OP_ERR:
        return SYND_LOC_QP_OP;
    case IBV_WC_WR_FLUSH_ERR:
        return SYND_WR_FLUSH;
    default:
        return 0;
    }
}

#endif
