/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Put and get: RDMA WRITE and READ to the peer's memory. Short puts are
 * inline, bcopy ones go through a registered bounce buffer, zcopy ones
 * gather from (or scatter to) the user's registered memory. One contiguous
 * buffer is the common case, posted in one pass; everything else (several
 * entries, strided ones, zero length, invalid input) goes out of line, and
 * strided or long lists on to dcx_ep_strided.c.
 */
#include "dcx_ep.inl"


/* --- short and bcopy --------------------------------------------------- */

ucs_status_t uct_dcx_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                  unsigned length, uint64_t remote_addr,
                                  uct_rkey_t rkey)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    status = uct_dcx_ep_rma_check(length, iface->tx.max_inline, rkey,
                                  "put_short");
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, 0, NULL, NULL, NULL, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 0);
    ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    ibv_wr_set_inline_data(qpx, (void *)buffer, length);
    return uct_dcx_ep_tx_post(iface, ep, 0, &tx);
}

ssize_t uct_dcx_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                             void *arg, uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    size_t length;

    status = uct_dcx_ep_tx_begin_bcopy(iface, ep, 0, pack_cb, arg, "put_bcopy",
                                       &tx, &length);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_check_rkey(rkey, length);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(tx.op);
        uct_dcx_ep_tx_abort(iface, ep);
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    ibv_wr_set_sge(qpx, tx.op->lkey, (uintptr_t)tx.op->buf, length);
    status = uct_dcx_ep_tx_post(iface, ep, 0, &tx);
    return ucs_likely(status == UCS_OK) ? (ssize_t)length : status;
}

/* A get_bcopy read into the operation's buffer: unpacked when it
 * completes. */
static void uct_dcx_op_get_bcopy(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        op->get_bcopy.unpack_cb(op->get_bcopy.arg, op->buf,
                                op->get_bcopy.length);
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

ucs_status_t uct_dcx_ep_get_bcopy(uct_ep_h tl_ep,
                                  uct_unpack_callback_t unpack_cb, void *arg,
                                  size_t length, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    status = uct_dcx_ep_rma_check(length, iface->tx.seg_size, rkey,
                                  "get_bcopy");
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, 0, &iface->tx.mp,
                                 uct_dcx_op_get_bcopy, comp, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    tx.op->get_bcopy.unpack_cb = unpack_cb;
    tx.op->get_bcopy.arg       = arg;
    tx.op->get_bcopy.length    = length;

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    ibv_wr_set_sge(qpx, tx.op->lkey, (uintptr_t)tx.op->buf, length);
    status = uct_dcx_ep_tx_post(iface, ep, 0, &tx);
    return ucs_likely(status == UCS_OK) ? UCS_INPROGRESS : status;
}


/* --- zcopy ------------------------------------------------------------- */

/* Post one RDMA write or read of a gather/scatter list; the user's
 * completion waits in the DCI's ring. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_rma_post(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, const struct ibv_sge *sge,
        size_t num_sge, uint64_t remote_addr, uct_rkey_t rkey,
        uct_completion_t *comp, int is_read)
{
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    status = uct_dcx_ep_tx_begin(iface, ep, 0, NULL, NULL, NULL, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, comp != NULL);
    if (is_read) {
        ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    } else {
        ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    }

    if (num_sge == 0) {
        /* A zero-length operation still carries one (empty) element. */
        ibv_wr_set_sge(qpx, 0, 0, 0);
    } else if (num_sge == 1) {
        ibv_wr_set_sge(qpx, sge[0].lkey, sge[0].addr, sge[0].length);
    } else {
        ibv_wr_set_sge_list(qpx, num_sge, sge);
    }

    status = uct_dcx_ep_tx_post(iface, ep, 0, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    if (comp != NULL) {
        uct_dcx_iface_comp_push(iface, tx.dci, ep, comp);
    }
    return UCS_INPROGRESS;
}

/* put_zcopy / get_zcopy other than one contiguous registered buffer:
 * several entries, strided ones, zero length, or invalid input. */
static UCS_F_NOINLINE ucs_status_t uct_dcx_ep_rma_zcopy_general(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, const uct_iov_t *iov,
        size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
        uct_completion_t *comp, int is_read)
{
    struct ibv_sge sge[UCT_DCX_MAX_SGE];
    size_t num_sge = 0, length, num_nonempty;
    const uct_iov_t *strided;
    ucs_status_t status;

    if (ucs_unlikely(!uct_dcx_rkey_is_valid(rkey))) {
        /* Only a zero-length operation may go without a key: sum the
         * lengths here, off the common path. */
        status = uct_dcx_ep_check_rkey(rkey, uct_iov_total_length(iov, iovcnt));
        if (status != UCS_OK) {
            return status;
        }
    }

    strided = uct_dcx_ep_iov_strided(iov, iovcnt, &num_nonempty);
    if (ucs_unlikely(strided != NULL)) {
        if (num_nonempty > 1) {
            return uct_dcx_ep_rma_pieces(iface, ep, iov, iovcnt, remote_addr,
                                         rkey, comp, is_read);
        }
        return uct_dcx_ep_rma_strided(iface, ep, strided, remote_addr, rkey,
                                      comp, is_read);
    }
    if (ucs_unlikely(num_nonempty > iface->tx.max_sge)) {
        return uct_dcx_ep_rma_pieces(iface, ep, iov, iovcnt, remote_addr, rkey,
                                     comp, is_read);
    }

    status = uct_dcx_ep_iov_to_sge(iface, iov, iovcnt, sge, &num_sge, &length);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    UCT_CHECK_LENGTH(length, 0, iface->port_attr.max_msg_sz,
                     is_read ? "get_zcopy" : "put_zcopy");

    return uct_dcx_ep_rma_post(iface, ep, sge, num_sge, remote_addr, rkey, comp,
                               is_read);
}

/* put_zcopy / get_zcopy: the common case, one contiguous registered
 * buffer, in one pass; everything else out of line. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_rma_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                     uint64_t remote_addr, uct_rkey_t rkey,
                     uct_completion_t *comp, int is_read)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_sge sge;

    if (ucs_likely((iovcnt == 1) && (iov->count == 1) && (iov->length > 0) &&
                   (iov->memh != UCT_MEM_HANDLE_NULL) &&
                   (iov->length <= iface->port_attr.max_msg_sz) &&
                   uct_dcx_rkey_is_valid(rkey))) {
        sge.addr   = (uintptr_t)iov->buffer;
        sge.length = iov->length;
        sge.lkey   = uct_dcx_memh_lkey(iov->memh);
        return uct_dcx_ep_rma_post(iface, ep, &sge, 1, remote_addr, rkey, comp,
                                   is_read);
    }

    return uct_dcx_ep_rma_zcopy_general(iface, ep, iov, iovcnt, remote_addr,
                                        rkey, comp, is_read);
}

ucs_status_t uct_dcx_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_dcx_ep_rma_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, comp, 0);
}

ucs_status_t uct_dcx_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_dcx_ep_rma_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, comp, 1);
}
