/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Strided and long iov lists (an entry of count blocks of length bytes,
 * stride apart; more entries than one work request gathers). Small ones
 * are packed into a bounce buffer (put, am) or read into one and unpacked
 * on completion (get); the others go zero-copy through a UMR mkey
 * (src/uct/ib/umr) that maps the blocks contiguously from offset 0: an
 * interleaved one for a strided entry, a list one for a piece per block.
 * An mkey being programmed, or none free, makes the operation wait
 * (UCS_ERR_NO_RESOURCE, retried from pending when a UMR completes).
 */
#include "dcx_ep.inl"

#include <endian.h>


/* Blocks of a local buffer (count blocks of length bytes, stride apart) lie
 * inside memh's registration. The device checks an indirect mkey's entries
 * only when data reaches them, so a block outside would fail the data
 * operation on the DCI, its endpoint and, under the rand policy, every
 * endpoint sharing the DCI: it is refused here, before anything is posted. */
ucs_status_t uct_dcx_memh_check_span(uct_mem_h memh, const void *buffer,
                                     size_t length, size_t stride, size_t count,
                                     const char *what, size_t index)
{
    const struct ibv_mr *mr = ((const uct_dcx_mem_t *)memh)->mr;
    uintptr_t start = (uintptr_t)buffer, mr_start = (uintptr_t)mr->addr;
    size_t span;

    if ((length == 0) || (count == 0)) {
        return UCS_OK;
    }
    if ((count > 1) && (stride > (SIZE_MAX - length) / (count - 1))) {
        goto err;
    }
    span = (count - 1) * stride + length;
    if ((start >= mr_start) && (span <= mr->length) &&
        (start - mr_start <= mr->length - span)) {
        return UCS_OK;
    }

err:
    ucs_error("dcx: %s: entry %zu (%p, %zu x %zu bytes, stride %zu) is "
              "outside its registration (%p, %zu bytes)",
              what, index, buffer, count, length, stride, mr->addr, mr->length);
    return UCS_ERR_INVALID_PARAM;
}

/* The UMR layout of a strided iov entry. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_ep_iov_layout(const uct_iov_t *iov, uct_dcx_umr_layout_t *layout)
{
    layout->addr   = (uintptr_t)iov->buffer;
    layout->lkey   = uct_dcx_memh_lkey(iov->memh);
    layout->length = iov->length;
    layout->stride = iov->stride;
    layout->count  = iov->count;
}


/* --- active messages ---------------------------------------------------- */

/* The mkey of a strided am_zcopy payload that goes zero-copy; *mkey_p NULL:
 * it is packed after the header instead (small, or without UMR). */
static ucs_status_t
uct_dcx_ep_am_strided_mkey(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                           const uct_iov_t *iov, size_t total,
                           uct_dcx_umr_t **umr_p, uct_dcx_umr_mkey_t **mkey_p)
{
    uct_dcx_umr_layout_t layout;
    ucs_status_t status;

    *umr_p  = NULL;
    *mkey_p = NULL;
    uct_dcx_ep_iov_layout(iov, &layout);
    if ((total > iface->umr.pack_thresh) && (iface->umr.enable != UCS_NO) &&
        (uct_dcx_iface_umr_engine(iface, umr_p) == UCS_OK) &&
        uct_dcx_umr_layout_fits(*umr_p, &layout)) {
        status = uct_dcx_umr_get(*umr_p, &layout, mkey_p);
        if (status != UCS_OK) {
            *mkey_p = NULL;
            return uct_dcx_ep_umr_wait(iface, ep, status);
        }
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_UMR;
    } else if (iface->umr.enable == UCS_YES) {
        ucs_error("dcx: strided am_zcopy needs UMR (UCX_DCX_UMR=yes), "
                  "which this device or layout does not allow");
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

/* The gather list of a strided active message: the header from the
 * operation's buffer, then the payload through @a mkey, or both packed in
 * the buffer. Returns its first element, *num_p how many. */
static struct ibv_sge *
uct_dcx_ep_am_strided_sge(uct_dcx_op_t *op, const void *header,
                          unsigned header_length, const uct_iov_t *iov,
                          size_t total, uct_dcx_umr_mkey_t *mkey,
                          struct ibv_sge *sge, size_t *num_p)
{
    size_t i;

    memcpy(op->buf, header, header_length);
    sge[0].addr = (uintptr_t)op->buf;
    sge[0].lkey = op->lkey;
    if (mkey == NULL) {
        for (i = 0; i < iov->count; ++i) {
            memcpy(op->buf + header_length + i * iov->length,
                   UCS_PTR_BYTE_OFFSET(iov->buffer, i * iov->stride),
                   iov->length);
        }
        sge[0].length = header_length + total;
        *num_p        = 1;
        return sge;
    }

    op->umr.mkey  = mkey;
    sge[0].length = header_length;
    sge[1].addr   = 0; /* the layout is zero-based */
    sge[1].length = total;
    sge[1].lkey   = mkey->mkey->lkey;
    *num_p        = (header_length > 0) ? 2 : 1;
    return (header_length > 0) ? sge : &sge[1];
}

/* A strided payload: packed after the header when small or without UMR,
 * otherwise gathered by the device through a layout's mkey. */
ucs_status_t
uct_dcx_ep_am_zcopy_strided(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                            uint8_t id, const void *header,
                            unsigned header_length, const uct_iov_t *iov,
                            uct_completion_t *comp)
{
    size_t total = (size_t)iov->length * iov->count;
    struct ibv_sge sge[2], *first;
    uct_dcx_umr_mkey_t *mkey;
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    uct_dcx_umr_t *umr;
    size_t num_sge;

    if ((iov->stride < iov->length) || (iov->memh == UCT_MEM_HANDLE_NULL)) {
        ucs_error("dcx: am_zcopy: strided entry with overlapping blocks "
                  "or no memory handle");
        return UCS_ERR_INVALID_PARAM;
    }
    status = uct_dcx_memh_check_span(iov->memh, iov->buffer, iov->length,
                                     iov->stride, iov->count, "am_zcopy", 0);
    if (status != UCS_OK) {
        return status;
    }
    UCT_CHECK_LENGTH(header_length + total, 0, iface->tx.seg_size, "am_zcopy");

    /* A credit before an mkey: the prologue below takes none again. */
    status = uct_dcx_ep_fc_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_am_strided_mkey(iface, ep, iov, total, &umr, &mkey);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, 0, &iface->tx.mp,
                                 (mkey != NULL) ?
                                         uct_dcx_op_umr_release :
                                         ((comp == NULL) ?
                                                  uct_dcx_op_release :
                                                  uct_dcx_op_comp_release),
                                 comp, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        goto err_put_mkey;
    }

    first = uct_dcx_ep_am_strided_sge(tx.op, header, header_length, iov, total,
                                      mkey, sge, &num_sge);
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, header,
                       header_length, "TX: AM_ZCOPY strided");

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    ibv_wr_send_imm(qpx, htobe32(id));
    ibv_wr_set_sge_list(qpx, num_sge, first);
    status = uct_dcx_ep_tx_post(iface, ep, UCT_DCX_EP_TX_AM, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        goto err_put_mkey;
    }
    if (mkey != NULL) {
        ++iface->umr.zcopy_ops;
    } else {
        ++iface->umr.copy_ops;
    }
    return UCS_INPROGRESS;

err_put_mkey:
    if (mkey != NULL) {
        uct_dcx_umr_put(umr, mkey);
    }
    return status;
}


/* --- put and get: packed ------------------------------------------------- */

static void uct_dcx_op_strided_get(uct_dcx_op_t *op, ucs_status_t status)
{
    uint32_t i;

    if (status == UCS_OK) {
        for (i = 0; i < op->strided.count; ++i) {
            memcpy(UCS_PTR_BYTE_OFFSET(op->strided.buffer,
                                       (size_t)i * op->strided.stride),
                   op->buf + (size_t)i * op->strided.length,
                   op->strided.length);
        }
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

/* Without UMR: strided data that fits a bounce buffer is packed (put) or
 * read and unpacked on completion (get). */
static ucs_status_t
uct_dcx_ep_rma_strided_copy(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                            const uct_iov_t *iov, uint64_t remote_addr,
                            uct_rkey_t rkey, uct_completion_t *comp,
                            int is_read)
{
    size_t total = (size_t)iov->length * iov->count;
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    size_t i;

    if (total > iface->tx.seg_size) {
        ucs_error("dcx: strided %s of %zu bytes without UMR: "
                  "at most UCX_DCX_SEG_SIZE (%zu) bytes are packed",
                  is_read ? "get_zcopy" : "put_zcopy", total,
                  iface->tx.seg_size);
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, 0, &iface->tx.mp,
                                 is_read ? uct_dcx_op_strided_get :
                                           ((comp == NULL) ?
                                                    uct_dcx_op_release :
                                                    uct_dcx_op_comp_release),
                                 comp, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    if (is_read) {
        tx.op->strided.buffer = iov->buffer;
        tx.op->strided.length = iov->length;
        tx.op->strided.stride = iov->stride;
        tx.op->strided.count  = iov->count;
        ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    } else {
        for (i = 0; i < iov->count; ++i) {
            memcpy(tx.op->buf + i * iov->length,
                   UCS_PTR_BYTE_OFFSET(iov->buffer, i * iov->stride),
                   iov->length);
        }
        ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    }
    ibv_wr_set_sge(qpx, tx.op->lkey, (uintptr_t)tx.op->buf, total);
    status = uct_dcx_ep_tx_post(iface, ep, 0, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    ++iface->umr.copy_ops;
    return UCS_INPROGRESS;
}


/* --- put and get: through an mkey ---------------------------------------- */

/* The pieces an iov list describes, strided entries expanded; fails when
 * there are more than max. */
static ucs_status_t uct_dcx_ep_iov_pieces(const uct_iov_t *iov, size_t iovcnt,
                                          struct ibv_sge *pieces, unsigned max,
                                          unsigned *num_p, size_t *total_p)
{
    unsigned n = 0;
    size_t i, j, total = 0;

    for (i = 0; i < iovcnt; ++i) {
        if (uct_iov_get_length(&iov[i]) == 0) {
            continue;
        }
        if (iov[i].memh == UCT_MEM_HANDLE_NULL) {
            ucs_error("dcx: iov entry %zu: no memory handle", i);
            return UCS_ERR_INVALID_PARAM;
        }
        if (uct_dcx_memh_check_span(iov[i].memh, iov[i].buffer, iov[i].length,
                                    (iov[i].count > 1) ? iov[i].stride : 0,
                                    ucs_max(iov[i].count, 1), "iov",
                                    i) != UCS_OK) {
            return UCS_ERR_INVALID_PARAM;
        }
        if ((iov[i].count > 1) && (iov[i].stride != iov[i].length)) {
            if (iov[i].stride < iov[i].length) {
                ucs_error("dcx: iov entry %zu: "
                          "stride %zu is below the block length %zu",
                          i, iov[i].stride, iov[i].length);
                return UCS_ERR_INVALID_PARAM;
            }
            for (j = 0; j < iov[i].count; ++j) {
                if (n == max) {
                    return UCS_ERR_UNSUPPORTED;
                }
                pieces[n].addr   = (uintptr_t)iov[i].buffer + j * iov[i].stride;
                pieces[n].length = iov[i].length;
                pieces[n].lkey   = uct_dcx_memh_lkey(iov[i].memh);
                ++n;
            }
        } else {
            if (n == max) {
                return UCS_ERR_UNSUPPORTED;
            }
            pieces[n].addr   = (uintptr_t)iov[i].buffer;
            pieces[n].length = uct_iov_get_length(&iov[i]);
            pieces[n].lkey   = uct_dcx_memh_lkey(iov[i].memh);
            ++n;
        }
        total += uct_iov_get_length(&iov[i]);
    }

    *num_p   = n;
    *total_p = total;
    return UCS_OK;
}

/* Post an RDMA read or write whose local side is an mkey's zero-based
 * layout; the operation holds a reference until it completes. */
static ucs_status_t uct_dcx_ep_rma_mkey(uct_dcx_iface_t *iface,
                                        uct_dcx_ep_t *ep, uct_dcx_umr_t *umr,
                                        uct_dcx_umr_mkey_t *mkey, size_t total,
                                        uint64_t remote_addr, uct_rkey_t rkey,
                                        uct_completion_t *comp, int is_read)
{
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    status = uct_dcx_ep_tx_begin(iface, ep, 0, &iface->tx.flush_mp,
                                 uct_dcx_op_umr_release, comp, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        goto err_put_mkey;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    if (is_read) {
        ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    } else {
        ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    }
    ibv_wr_set_sge(qpx, mkey->mkey->lkey, 0, total);
    tx.op->umr.mkey = mkey; /* held until the write completes */
    status          = uct_dcx_ep_tx_post(iface, ep, 0, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        goto err_put_mkey;
    }
    ++iface->umr.zcopy_ops;
    return UCS_INPROGRESS;

err_put_mkey:
    uct_dcx_umr_put(umr, mkey);
    return status;
}

/* Pieces beyond the gather list or one UMR entry's limits: a list mkey
 * (one piece per block, up to the list capacity of one UMR). */
ucs_status_t uct_dcx_ep_rma_pieces(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                                   const uct_iov_t *iov, size_t iovcnt,
                                   uint64_t remote_addr, uct_rkey_t rkey,
                                   uct_completion_t *comp, int is_read)
{
    struct ibv_sge pieces[UCT_DCX_UMR_LIST_MAX];
    uct_dcx_umr_mkey_t *mkey;
    uct_dcx_umr_t *umr = NULL;
    ucs_status_t status;
    size_t total = 0;
    unsigned n   = 0;

    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return ep->status;
    }

    status = (iface->umr.enable == UCS_NO) ?
                     UCS_ERR_UNSUPPORTED :
                     uct_dcx_iface_umr_engine(iface, &umr);
    if (status == UCS_OK) {
        status = uct_dcx_ep_iov_pieces(iov, iovcnt, pieces, umr->list_max, &n,
                                       &total);
        if (status == UCS_ERR_INVALID_PARAM) {
            return status;
        }
    }
    if (status != UCS_OK) {
        ucs_error("dcx: %s: %zu iov entries need a list UMR, "
                  "which holds %u pieces, or UMR is unavailable",
                  is_read ? "get_zcopy" : "put_zcopy", iovcnt,
                  (umr == NULL) ? 0 : umr->list_max);
        return UCS_ERR_UNSUPPORTED;
    }
    UCT_CHECK_LENGTH(total, 0, iface->port_attr.max_msg_sz,
                     is_read ? "get_zcopy" : "put_zcopy");

    status = uct_dcx_umr_get_list(umr, pieces, n, &mkey);
    if (status != UCS_OK) {
        return uct_dcx_ep_umr_wait(iface, ep, status);
    }
    ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_UMR;
    return uct_dcx_ep_rma_mkey(iface, ep, umr, mkey, total, remote_addr, rkey,
                               comp, is_read);
}

/* A strided entry moves zero-copy through an indirect mkey that maps its
 * blocks contiguously from offset 0. */
ucs_status_t uct_dcx_ep_rma_strided(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                                    const uct_iov_t *iov, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp,
                                    int is_read)
{
    size_t total       = (size_t)iov->length * iov->count;
    uct_dcx_umr_t *umr = NULL;
    uct_dcx_umr_layout_t layout;
    uct_dcx_umr_mkey_t *mkey;
    ucs_status_t status;

    if (iov->stride < iov->length) {
        ucs_error("dcx: strided iov: stride %zu is below the block length %zu",
                  iov->stride, iov->length);
        return UCS_ERR_INVALID_PARAM;
    }
    if (iov->memh == UCT_MEM_HANDLE_NULL) {
        ucs_error("dcx: strided iov without a memory handle");
        return UCS_ERR_INVALID_PARAM;
    }
    status = uct_dcx_memh_check_span(iov->memh, iov->buffer, iov->length,
                                     iov->stride, iov->count,
                                     is_read ? "get_zcopy" : "put_zcopy", 0);
    if (status != UCS_OK) {
        return status;
    }
    UCT_CHECK_LENGTH(total, 0, iface->port_attr.max_msg_sz,
                     is_read ? "get_zcopy" : "put_zcopy");

    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return ep->status;
    }

    if ((total <= iface->umr.pack_thresh) && (iface->umr.enable != UCS_YES)) {
        return uct_dcx_ep_rma_strided_copy(iface, ep, iov, remote_addr, rkey,
                                           comp, is_read);
    }

    status = (iface->umr.enable == UCS_NO) ?
                     UCS_ERR_UNSUPPORTED :
                     uct_dcx_iface_umr_engine(iface, &umr);
    uct_dcx_ep_iov_layout(iov, &layout);
    if ((status == UCS_OK) && !uct_dcx_umr_layout_fits(umr, &layout)) {
        if (iov->count <= umr->list_max) {
            /* Too wide for an interleaved entry: one piece per block. */
            return uct_dcx_ep_rma_pieces(iface, ep, iov, 1, remote_addr, rkey,
                                         comp, is_read);
        }
        ucs_debug("dcx: strided layout %zu x %zu @ %zu does not fit one UMR",
                  iov->length, (size_t)iov->count, iov->stride);
        status = UCS_ERR_UNSUPPORTED;
    }
    if (status != UCS_OK) {
        if (iface->umr.enable == UCS_YES) {
            ucs_error("dcx: strided %s needs UMR (UCX_DCX_UMR=yes), "
                      "which this device or layout does not allow",
                      is_read ? "get_zcopy" : "put_zcopy");
            return UCS_ERR_UNSUPPORTED;
        }
        return uct_dcx_ep_rma_strided_copy(iface, ep, iov, remote_addr, rkey,
                                           comp, is_read);
    }

    status = uct_dcx_umr_get(umr, &layout, &mkey);
    if (status != UCS_OK) {
        return uct_dcx_ep_umr_wait(iface, ep, status);
    }
    ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_UMR;
    return uct_dcx_ep_rma_mkey(iface, ep, umr, mkey, total, remote_addr, rkey,
                               comp, is_read);
}
