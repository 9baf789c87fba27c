/* dcxemu completer stage: the send CQE of an executed WQE, its opcode and
 * syndrome, counters and trace. */
#define _GNU_SOURCE
#include "comp.h"
#include "opcode.h"

#include <string.h>

const char *dcxemu_op_name(uint32_t op)
{
    return dcxemu_opcode(op)->name;
}

static uint32_t wc_opcode(const struct dcxemu_wqe *w)
{
    if (w->raw) {
        return IBV_WC_DRIVER2; /* MLX5DV_WC_RAW_WQE (rdma-core: wr_data =
                                  IBV_WC_DRIVER2) */
    }
    return dcxemu_opcode(w->opcode)->wc_opcode;
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
    cqe.wr_id      = w->wr_id;
    cqe.sq_index   = i;
    cqe.ts_ns      = dcxemu_now_ns();
    cqe.status     = o->status;
    cqe.vendor_err = o->vendor_err;
    cqe.opcode     = wc_opcode(w);
    cqe.byte_len   = o->byte_len;
    cqe.qp_num     = qp->qpx.qp_base.qp_num;
    cqe.is_send    = 1;
    return dcxemu_cq_push(qp->send_cq->s, &cqe);
}

void dcxemu_comp_count(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                       const struct exec_out *o)
{
    int dev = qp->ctx->dev_index, c = dcxemu_opcode(w->opcode)->cnt;
    if (c >= 0) {
        DCXEMU_COUNT(dcxemu_me, dev, wr[c], 1);
    }
    if (o->bytes != 0) {
        DCXEMU_COUNT(dcxemu_me, dev, bytes, o->bytes);
    }
    if (o->status == IBV_WC_LOC_PROT_ERR ||
        o->status == IBV_WC_REM_ACCESS_ERR) {
        DCXEMU_COUNT(dcxemu_me, dev, key_violations, 1);
    }
    DCXEMU_TRACE("exec qp=0x%x op=%s len=%llu wr_id=0x%llx status=%u",
                 qp->qpx.qp_base.qp_num, dcxemu_op_name(w->opcode),
                 (unsigned long long)wqe_len(w), (unsigned long long)w->wr_id,
                 o->status);
}
