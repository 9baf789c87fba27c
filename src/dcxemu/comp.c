/* dcxemu completer stage: the send CQE of an executed WQE, its opcode and syndrome, counters and
 * trace. */
#define _GNU_SOURCE
#include "comp.h"

#include <string.h>

static const struct { const char *name; int cnt; } op_info[] = {
    [DCXEMU_OP_NONE] = { "none", -1 },
    [DCXEMU_OP_SEND] = { "send", DCXEMU_CNT_OP_SEND },
    [DCXEMU_OP_SEND_IMM] = { "send_imm", DCXEMU_CNT_OP_SEND_IMM },
    [DCXEMU_OP_WRITE] = { "write", DCXEMU_CNT_OP_WRITE },
    [DCXEMU_OP_WRITE_IMM] = { "write_imm", DCXEMU_CNT_OP_WRITE_IMM },
    [DCXEMU_OP_READ] = { "read", DCXEMU_CNT_OP_READ },
    [DCXEMU_OP_CMP_SWP] = { "atomic_cs", DCXEMU_CNT_OP_ATOMIC_CS },
    [DCXEMU_OP_FETCH_ADD] = { "atomic_fa", DCXEMU_CNT_OP_ATOMIC_FA },
    [DCXEMU_OP_UMR_LIST] = { "umr_list", DCXEMU_CNT_OP_UMR },
    [DCXEMU_OP_UMR_INTERLEAVED] = { "umr_interleaved", DCXEMU_CNT_OP_UMR },
    [DCXEMU_OP_LOCAL_INV] = { "local_inv", DCXEMU_CNT_OP_LOCAL_INV },
};

const char *dcxemu_op_name(uint32_t op)
{
    return op_info[op].name;
}

uint32_t dcxemu_forced_syndrome(uint32_t st)
{
    switch (st) {
    case IBV_WC_RETRY_EXC_ERR: return SYND_RETRY_EXC;
    case IBV_WC_RNR_RETRY_EXC_ERR: return SYND_RNR_RETRY_EXC;
    case IBV_WC_REM_ACCESS_ERR: return SYND_REM_ACCESS;
    case IBV_WC_LOC_PROT_ERR: return SYND_LOC_PROT;
    case IBV_WC_REM_INV_REQ_ERR: return SYND_REM_INV_REQ;
    case IBV_WC_REM_OP_ERR: return SYND_REM_OP;
    case IBV_WC_LOC_LEN_ERR: return SYND_LOC_LEN;
    case IBV_WC_LOC_QP_OP_ERR: return SYND_LOC_QP_OP;
    case IBV_WC_WR_FLUSH_ERR: return SYND_WR_FLUSH;
    default: return 0;
    }
}

static uint32_t wc_opcode(const struct dcxemu_wqe *w)
{
    if (w->raw) {
        return IBV_WC_DRIVER2;   /* MLX5DV_WC_RAW_WQE (rdma-core: wr_data = IBV_WC_DRIVER2) */
    }
    switch (w->opcode) {
    case DCXEMU_OP_WRITE:
    case DCXEMU_OP_WRITE_IMM: return IBV_WC_RDMA_WRITE;
    case DCXEMU_OP_READ: return IBV_WC_RDMA_READ;
    case DCXEMU_OP_CMP_SWP: return IBV_WC_COMP_SWAP;
    case DCXEMU_OP_FETCH_ADD: return IBV_WC_FETCH_ADD;
    case DCXEMU_OP_UMR_LIST:
    case DCXEMU_OP_UMR_INTERLEAVED: return IBV_WC_DRIVER1;   /* MLX5DV_WC_UMR */
    case DCXEMU_OP_LOCAL_INV: return IBV_WC_LOCAL_INV;
    default: return IBV_WC_SEND;
    }
}

/* Send CQE for the WQE at index i; returns 1 if a channel event was raised. */
int dcxemu_comp_send(struct dcxemu_qp *qp, struct dcxemu_wqe *w, uint64_t i,
                     const struct exec_out *o)
{
    struct dcxemu_shm_cqe cqe;
    if (o->status == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED) &&
        (w->raw || !qp->sq_sig_all)) {
        return 0;
    }
    DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, send_cqes, 1);
    if (o->status != IBV_WC_SUCCESS) {
        DCXEMU_COUNT(dcxemu_me, qp->ctx->dev_index, error_cqes, 1);
    }
    memset(&cqe, 0, sizeof(cqe));
    cqe.wr_id = w->wr_id;
    cqe.sq_index = i;
    cqe.ts_ns = dcxemu_now_ns();
    cqe.status = o->status;
    cqe.vendor_err = o->vendor_err;
    cqe.opcode = wc_opcode(w);
    cqe.byte_len = o->byte_len;
    cqe.qp_num = qp->qpx.qp_base.qp_num;
    cqe.is_send = 1;
    return dcxemu_cq_push(qp->send_cq->s, &cqe);
}

void dcxemu_comp_count(struct dcxemu_qp *qp, struct dcxemu_wqe *w, const struct exec_out *o)
{
    int dev = qp->ctx->dev_index, c = op_info[w->opcode].cnt;
    if (c >= 0) {
        DCXEMU_COUNT(dcxemu_me, dev, wr[c], 1);
    }
    if (o->bytes != 0) {
        DCXEMU_COUNT(dcxemu_me, dev, bytes, o->bytes);
    }
    if (o->status == IBV_WC_LOC_PROT_ERR || o->status == IBV_WC_REM_ACCESS_ERR) {
        DCXEMU_COUNT(dcxemu_me, dev, key_violations, 1);
    }
    DCXEMU_TRACE("exec qp=0x%x op=%s len=%llu wr_id=0x%llx status=%u", qp->qpx.qp_base.qp_num,
                 dcxemu_op_name(w->opcode), (unsigned long long)wqe_len(w),
                 (unsigned long long)w->wr_id, o->status);
}
