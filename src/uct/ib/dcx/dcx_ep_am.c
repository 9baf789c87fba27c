/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Active messages: SEND with immediate data (the AM id) to the peer's DCT.
 * Short ones are inline, bcopy ones from a registered bounce buffer,
 * zcopy ones gather the header from a bounce buffer and the payload from
 * the user's memory (strided payloads: dcx_ep_strided.c). Each takes a
 * flow-control credit (dcx_fc.c).
 */
#include "dcx_ep.inl"

#include <endian.h>


/* Data-path tracing (UCX_LOG_LEVEL=trace_data, and the AM tracer UCP
 * installs): an inline message as one buffer, the way the peer gets it. */
static UCS_F_NOINLINE void
uct_dcx_ep_trace_am_inline(uct_dcx_iface_t *iface, uint8_t id,
                           const struct ibv_data_buf *bufs, size_t num,
                           const char *what)
{
    char data[UCT_DCX_TRACE_AM_MAX];
    size_t i, length = 0, n;

    for (i = 0; i < num; ++i) {
        n = ucs_min(bufs[i].length, sizeof(data) - length);
        memcpy(data + length, bufs[i].addr, n);
        length += n;
    }
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, data, length,
                       "TX: %s", what);
}

/* An inline active message of @a num buffers. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_am_inline(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, uint8_t id,
        const struct ibv_data_buf *bufs, size_t num, const char *what)
{
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    status = uct_dcx_ep_tx_begin(iface, ep, UCT_DCX_EP_TX_AM, NULL, NULL, NULL,
                                 &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (ucs_log_is_enabled(UCS_LOG_LEVEL_TRACE_DATA)) {
        uct_dcx_ep_trace_am_inline(iface, id, bufs, num, what);
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 0);
    ibv_wr_send_imm(qpx, htobe32(id));
    ibv_wr_set_inline_data_list(qpx, num, bufs);
    return uct_dcx_ep_tx_post(iface, ep, UCT_DCX_EP_TX_AM, &tx);
}

ucs_status_t uct_dcx_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                 const void *payload, unsigned length)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_data_buf bufs[2];

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0, iface->tx.max_inline,
                     "am_short");

    bufs[0].addr   = &header;
    bufs[0].length = sizeof(header);
    bufs[1].addr   = (void *)payload;
    bufs[1].length = length;
    return uct_dcx_ep_am_inline(iface, ep, id, bufs, 2, "AM_SHORT");
}

ucs_status_t uct_dcx_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                     const uct_iov_t *iov, size_t iovcnt)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_data_buf bufs[UCT_DCX_MAX_SGE];
    size_t i, num = 0, length = 0;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_PARAM(iovcnt <= iface->tx.max_sge - 1,
                    "am_short_iov: %zu iov entries (at most %u)", iovcnt,
                    iface->tx.max_sge - 1);

    for (i = 0; i < iovcnt; ++i) {
        bufs[num].addr   = iov[i].buffer;
        bufs[num].length = uct_iov_get_length(&iov[i]);
        length += bufs[num].length;
        num += (bufs[num].length > 0);
    }
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_inline, "am_short_iov");

    return uct_dcx_ep_am_inline(iface, ep, id, bufs, num, "AM_SHORT_IOV");
}

ssize_t uct_dcx_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                            uct_pack_callback_t pack_cb, void *arg,
                            unsigned flags)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    size_t length;

    UCT_CHECK_AM_ID(id);

    status = uct_dcx_ep_tx_begin_bcopy(iface, ep, UCT_DCX_EP_TX_AM, pack_cb,
                                       arg, "am_bcopy", &tx, &length);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, tx.op->buf,
                       length, "TX: AM_BCOPY");

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    ibv_wr_send_imm(qpx, htobe32(id));
    ibv_wr_set_sge(qpx, tx.op->lkey, (uintptr_t)tx.op->buf, length);
    status = uct_dcx_ep_tx_post(iface, ep, UCT_DCX_EP_TX_AM, &tx);
    return ucs_likely(status == UCS_OK) ? (ssize_t)length : status;
}

/* Gather list of a contiguous am_zcopy: the header (from the operation's
 * registered buffer, filled in later) first when there is one. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_am_zcopy_sge(
        uct_dcx_iface_t *iface, unsigned header_length, const uct_iov_t *iov,
        size_t iovcnt, struct ibv_sge *sge, size_t *num_sge_p)
{
    ucs_status_t status;
    size_t length;

    *num_sge_p = (header_length > 0) ? 1 : 0;
    status = uct_dcx_ep_iov_to_sge(iface, iov, iovcnt, sge, num_sge_p, &length);
    if (status != UCS_OK) {
        return status;
    }
    UCT_CHECK_LENGTH(header_length + length, 0, iface->tx.seg_size, "am_zcopy");
    return UCS_OK;
}

ucs_status_t uct_dcx_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                 unsigned header_length, const uct_iov_t *iov,
                                 size_t iovcnt, unsigned flags,
                                 uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_sge sge[UCT_DCX_MAX_SGE];
    size_t num_sge, num_nonempty;
    const uct_iov_t *strided;
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(header_length, 0, iface->tx.seg_size / 2,
                     "am_zcopy header");

    strided = uct_dcx_ep_iov_strided(iov, iovcnt, &num_nonempty);
    if (ucs_unlikely(strided != NULL)) {
        if (num_nonempty > 1) {
            ucs_error("dcx: a strided iov entry with other non-empty entries "
                      "is not supported yet");
            return UCS_ERR_UNSUPPORTED;
        }
        return uct_dcx_ep_am_zcopy_strided(iface, ep, id, header, header_length,
                                           strided, comp);
    }

    status = uct_dcx_ep_am_zcopy_sge(iface, header_length, iov, iovcnt, sge,
                                     &num_sge);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, UCT_DCX_EP_TX_AM, &iface->tx.mp,
                                 (comp == NULL) ? uct_dcx_op_release :
                                                  uct_dcx_op_comp_release,
                                 comp, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (header_length > 0) {
        memcpy(tx.op->buf, header, header_length);
        sge[0].addr   = (uintptr_t)tx.op->buf;
        sge[0].length = header_length;
        sge[0].lkey   = tx.op->lkey;
    }
    /* The header only: the payload is the user's, not contiguous. */
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, header,
                       header_length, "TX: AM_ZCOPY");

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    ibv_wr_send_imm(qpx, htobe32(id));
    if (num_sge == 0) {
        ibv_wr_set_sge(qpx, tx.op->lkey, (uintptr_t)tx.op->buf, 0);
    } else {
        ibv_wr_set_sge_list(qpx, num_sge, sge);
    }
    status = uct_dcx_ep_tx_post(iface, ep, UCT_DCX_EP_TX_AM, &tx);
    return ucs_likely(status == UCS_OK) ? UCS_INPROGRESS : status;
}
