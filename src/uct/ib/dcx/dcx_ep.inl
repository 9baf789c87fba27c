/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The endpoint's private inline helpers, shared by its files: the one send
 * prologue and epilogue every operation goes through, and what they are
 * made of (DCI acquisition, operation descriptors, work request start and
 * submit, flow-control credits). Only the endpoint's files include this;
 * the interface sees the endpoint through dcx_ep.h.
 *
 * An operation reads:
 *
 *   status = uct_dcx_ep_tx_begin(iface, ep, flags, mp, handler, comp, &tx);
 *   ...                             checks passed: a DCI slot (tx.dci) and,
 *                                   with a pool, a descriptor (tx.op)
 *   qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, need_completion);
 *   ibv_wr_...(qpx, ...);           the work request: what differs
 *   status = uct_dcx_ep_tx_post(iface, ep, flags, &tx);
 *                                   addressed, posted, or unwound
 */
#ifndef UCT_DCX_EP_INL_
#define UCT_DCX_EP_INL_

#include "dcx_iface.h"
#include "dcx_ep.h"

#include <ucs/debug/log.h>

#include <string.h>


/* --- resources --------------------------------------------------------- */

void uct_dcx_ep_check_shared_dci(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);
void uct_dcx_ep_tx_abort(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);
ucs_status_t uct_dcx_ep_stream_join(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);

/* Completion handlers used by more than one file (dcx_ep.c). */
void uct_dcx_op_release(uct_dcx_op_t *op, ucs_status_t status);
void uct_dcx_op_comp_release(uct_dcx_op_t *op, ucs_status_t status);
void uct_dcx_op_umr_release(uct_dcx_op_t *op, ucs_status_t status);
/* dcx_ep_amo.c: an endpoint being destroyed ends its loops */
void uct_dcx_op_amo_cas_loop(uct_dcx_op_t *op, ucs_status_t status);

/* Whether the endpoint may take a DCI from the pool now: waiting endpoints
 * are served first, in turn; under dcs_hybrid it may always move to the
 * stream DCI instead (uct_dcx_ep_stream_join). */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_may_take_dci(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    return (uct_dcx_dci_pool_has_free(&iface->tx.pool) &&
            (!uct_dcx_dci_pool_has_waiters(&iface->tx.pool) ||
             (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI))) ||
           (iface->tx.stream_dci != UCT_DCX_NO_STREAM_DCI);
}

/* Whether the endpoint's DCI takes its next work request now: one slot, or
 * the whole batch of an SGL put that found too few (dci->room), so that a
 * pending request is not dispatched to fail again for want of room. */
static UCS_F_ALWAYS_INLINE int uct_dcx_ep_dci_has_room(uct_dcx_iface_t *iface,
                                                       uct_dcx_ep_t *ep,
                                                       const uct_dcx_dci_t *dci)
{
    if (ucs_unlikely(dci->available < dci->room)) {
        return 0;
    }

    /* The stream DCI of dcs_hybrid is shared: nobody yields it. */
    if (!uct_dcx_iface_dci_quota(iface) ||
        ucs_unlikely(ep->dci == iface->tx.stream_dci)) {
        return 1;
    }

    /* dcs_quota: an endpoint that has used its quota while others wait for
     * a DCI yields: it posts nothing more until its DCI has drained and gone
     * back to the pool (uct_dcx_iface_dci_put), where it queues behind the
     * endpoints that waited before it. Stopping only while the quota is
     * exceeded is not enough: every completion would let it post again, so
     * its DCI would never drain and the waiting endpoints would starve. */
    if (ucs_unlikely(ep->flags & UCT_DCX_EP_FLAG_TX_WAIT)) {
        return 0;
    }
    if (!uct_dcx_dci_pool_has_waiters(&iface->tx.pool) ||
        ((iface->tx.queue_len - dci->available) < iface->tx.quota)) {
        return 1;
    }
    ep->flags |= UCT_DCX_EP_FLAG_TX_WAIT;
    return 0;
}

/* Give the endpoint a DCI from the pool (dcs policies), or, when it is
 * empty, a stream of dcs_hybrid's stream DCI; it stops waiting for one. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_dci_take(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    ucs_status_t status;
    uint16_t index;

    status = uct_dcx_iface_dci_take(iface, &index);
    if (ucs_unlikely(status != UCS_OK)) {
        if (status == UCS_ERR_NO_RESOURCE) {
            return uct_dcx_ep_stream_join(iface, ep);
        }
        /* The device failed: the endpoint fails with it. */
        uct_dcx_ep_handle_failure(ep, status);
        return status;
    }
    if (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI) {
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_DCI;
        uct_dcx_dci_pool_waiter_remove(&iface->tx.pool);
    }
    ep->dci                  = index;
    iface->tx.dcis[index].ep = ep;
    return UCS_OK;
}

/* Whether the endpoint may send at all: not failed, nor its shared DCI
 * (rand, hw_dcs, dcs_hybrid's stream DCI) since it last used it. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_tx_check(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    if (ucs_unlikely(uct_dcx_iface_dci_index_shared(iface, ep->dci))) {
        uct_dcx_ep_check_shared_dci(iface, ep);
    }

    if (ucs_unlikely(ep->flags & UCT_DCX_EP_FLAG_FAILED)) {
        return ep->status;
    }
    return UCS_OK;
}

/* With out-of-order data placement the device keeps no order between the
 * data of a DCI's requests, and IBTA's fence (IBV_SEND_FENCE) waits only
 * for earlier READs and atomics: a fenced request waits until everything
 * posted before it on the DCI has completed, as UCX's rc/dc_mlx5 fence puts
 * with strong ordering under DDP. The DCI is asked for the completion that
 * ends the wait. 1 while the request must wait. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_ddp_fence_wait(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    if (ucs_likely(!dci->fence) || !iface->config.ddp ||
        (dci->posted == dci->completed)) {
        return 0;
    }
    (void)uct_dcx_iface_dci_request_completion(iface, dci - iface->tx.dcis);
    return 1;
}

/* Make sure the endpoint holds a DCI with a free send queue slot. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_tx_get(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, uct_dcx_dci_t **dci_p)
{
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    *dci_p = NULL;
    status = uct_dcx_ep_tx_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (ep->dci == UCT_DCX_EP_NO_DCI) {
        /* Waiting endpoints first (dcs_hybrid: to the stream DCI); an
         * empty pool asks its holders for completions
         * (uct_dcx_iface_dci_take). */
        if (ucs_unlikely(uct_dcx_dci_pool_has_waiters(&iface->tx.pool) &&
                         !(ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI))) {
            status = uct_dcx_ep_stream_join(iface, ep);
        } else {
            status = uct_dcx_ep_dci_take(iface, ep);
        }
        if (ucs_unlikely(status != UCS_OK)) {
            return status;
        }
        dci = &iface->tx.dcis[ep->dci];
        /* A pool DCI comes empty; the stream DCI may be full. */
        if (ucs_unlikely(dci->available < dci->room)) {
            return UCS_ERR_NO_RESOURCE;
        }
    } else {
        dci = &iface->tx.dcis[ep->dci];
        if (ucs_unlikely(!uct_dcx_ep_dci_has_room(iface, ep, dci) ||
                         uct_dcx_ep_ddp_fence_wait(iface, dci))) {
            return UCS_ERR_NO_RESOURCE;
        }
    }

    *dci_p = dci;
    return UCS_OK;
}

/* A DCI slot for control traffic (credit requests, keepalives): it may
 * take a free DCI ahead of endpoints waiting for one and ignores the
 * dcs_quota limit; like any work it holds the DCI only until it completes. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_ctrl_dci_get(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, uct_dcx_dci_t **dci_p)
{
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    status = uct_dcx_ep_tx_check(iface, ep);
    if (status != UCS_OK) {
        return status;
    }

    if (ep->dci == UCT_DCX_EP_NO_DCI) {
        status = uct_dcx_ep_dci_take(iface, ep);
        if (status != UCS_OK) {
            return status;
        }
    }

    dci = &iface->tx.dcis[ep->dci];
    if ((dci->available == 0) || uct_dcx_ep_ddp_fence_wait(iface, dci)) {
        return UCS_ERR_NO_RESOURCE;
    }

    *dci_p = dci;
    return UCS_OK;
}

/* An operation of the endpoint on its DCI. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_op_init(uct_dcx_op_t *op, uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                uct_dcx_op_handler_t handler, uct_completion_t *comp)
{
    op->handler = handler;
    op->comp    = comp;
    op->ep      = ep;
    op->iface   = iface;
    op->dci     = ep->dci;
}

/* An operation descriptor from @a mp for the endpoint's DCI; none left:
 * the DCI taken for it goes back. */
static UCS_F_ALWAYS_INLINE uct_dcx_op_t *
uct_dcx_ep_op_get(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, ucs_mpool_t *mp,
                  uct_dcx_op_handler_t handler, uct_completion_t *comp)
{
    uct_dcx_op_t *op = ucs_mpool_get_inline(mp);

    if (ucs_unlikely(op == NULL)) {
        uct_dcx_ep_tx_abort(iface, ep);
        return NULL;
    }

    uct_dcx_op_init(op, iface, ep, handler, comp);
    return op;
}


/* --- active-message flow control ---------------------------------------- */

/* Before an active message: NO_RESOURCE without credits. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_fc_check(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    if (ucs_likely(ep->fc_wnd > 0)) {
        return UCS_OK;
    }
    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return ep->status;
    }
    if (!(ep->flags & UCT_DCX_EP_FLAG_FC_WAIT)) {
        uct_dcx_ep_fc_request(iface, ep);
    }
    return UCS_ERR_NO_RESOURCE;
}

/* After an active message was posted. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_ep_fc_consume(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    ep->fc_wnd -= iface->fc.consume;
    if (ucs_unlikely(ep->fc_wnd <= iface->fc.req_thresh) &&
        !(ep->flags & UCT_DCX_EP_FLAG_FC_WAIT)) {
        uct_dcx_ep_fc_request(iface, ep);
    }
}


/* --- work requests ------------------------------------------------------ */

/* Start the endpoint's next work request; @a need_completion: an operation
 * waits for it (else it may go unsignaled, see uct_dcx_iface_dci_signal). */
static UCS_F_ALWAYS_INLINE struct ibv_qp_ex *
uct_dcx_ep_wr_start(uct_dcx_iface_t *iface, const uct_dcx_ep_t *ep,
                    uct_dcx_dci_t *dci, int need_completion)
{
    struct ibv_qp_ex *qpx = dci->qpx;

    ibv_wr_start(qpx);
    qpx->wr_id    = UCT_DCX_WR_ID(ep->dci, dci->posted + 1);
    qpx->wr_flags = (uct_dcx_iface_dci_signal(iface, dci, need_completion) ?
                             IBV_SEND_SIGNALED :
                             0) |
                    (dci->fence ? IBV_SEND_FENCE : 0);
    return qpx;
}

/* Hand the work request built since ibv_wr_start to the device. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_wr_submit(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                     uct_dcx_dci_t *dci, uct_dcx_op_t *op, int signaled)
{
    int ret;

    ret = ibv_wr_complete(dci->qpx);
    if (ucs_unlikely(ret != 0)) {
        ucs_error("dcx: dci 0x%x: posting failed: %s", dci->qp->qp_num,
                  strerror(ret));
        uct_dcx_ep_tx_abort(iface, ep);
        return UCS_ERR_IO_ERROR;
    }

    dci->fence = 0;
    uct_dcx_iface_dci_posted(iface, dci, signaled);
    ucs_trace_data("dcx: ep %p: posted work request %" PRIu64
                   " on dci 0x%x to dct 0x%x",
                   ep, (uint64_t)dci->posted, dci->qp->qp_num,
                   uct_dcx_ep_peer(iface, ep)->dctn);
    if (op != NULL) {
        op->sn = dci->posted;
        ucs_queue_push(&dci->outstanding, &op->queue);
    }
    return UCS_OK;
}

/* Address the work request to the peer's DCT, on the endpoint's DCI stream:
 * stream 0 is every DCI's (mlx5dv_wr_set_dc_addr), the others exist only on
 * a DCI created with streams (so with rdma-core 37 or later, whose
 * mlx5dv_qp_ex has the stream builder). */
static UCS_F_ALWAYS_INLINE void
uct_dcx_ep_set_dc_addr(const uct_dcx_ep_t *ep, uct_dcx_dci_t *dci,
                       const uct_dcx_peer_t *peer)
{
    if (ucs_likely(ep->stream == 0)) {
        mlx5dv_wr_set_dc_addr(dci->mqpx, peer->ah, peer->dctn, peer->dc_key);
    } else {
        mlx5dv_wr_set_dc_addr_stream(dci->mqpx, peer->ah, peer->dctn,
                                     peer->dc_key, ep->stream);
    }
}

/* Address the work request to the peer's DCT and hand it to the device. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_wr_complete(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                       uct_dcx_dci_t *dci, uct_dcx_op_t *op)
{
    uct_dcx_peer_t *peer = uct_dcx_ep_peer(iface, ep);

    uct_dcx_ep_set_dc_addr(ep, dci, peer);
    return uct_dcx_ep_wr_submit(iface, ep, dci, op,
                                dci->qpx->wr_flags & IBV_SEND_SIGNALED);
}


/* --- the send prologue and epilogue -------------------------------------- */

/* What the prologue gives an operation's body. */
typedef struct uct_dcx_ep_tx {
    uct_dcx_dci_t *dci; /* the endpoint's DCI, a send queue slot free */
    uct_dcx_op_t *op; /* the operation's descriptor, NULL without one */
} uct_dcx_ep_tx_t;

/* What kind of work an operation sends (constant at every call). */
enum {
    /* An active message: takes a flow-control credit, which it spends
     * once posted. */
    UCT_DCX_EP_TX_AM = UCS_BIT(0),
    /* Control traffic (credit requests, keepalives): a DCI slot from
     * uct_dcx_ep_ctrl_dci_get. */
    UCT_DCX_EP_TX_CTRL = UCS_BIT(1)
};

/* The send prologue of every operation: the endpoint may send (not failed,
 * an active message has a credit), holds a DCI with room, and, when @a mp
 * is given, an operation descriptor for @a handler and @a comp. On failure
 * nothing is held: the status is the operation's. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_tx_begin(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, unsigned flags,
                    ucs_mpool_t *mp, uct_dcx_op_handler_t handler,
                    uct_completion_t *comp, uct_dcx_ep_tx_t *tx)
{
    ucs_status_t status;

    if (flags & UCT_DCX_EP_TX_AM) {
        status = uct_dcx_ep_fc_check(iface, ep);
        if (ucs_unlikely(status != UCS_OK)) {
            return status;
        }
    }

    if (flags & UCT_DCX_EP_TX_CTRL) {
        status = uct_dcx_ep_ctrl_dci_get(iface, ep, &tx->dci);
    } else {
        status = uct_dcx_ep_tx_get(iface, ep, &tx->dci);
    }
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    tx->op = NULL;
    if (mp != NULL) {
        tx->op = uct_dcx_ep_op_get(iface, ep, mp, handler, comp);
        if (ucs_unlikely(tx->op == NULL)) {
            return UCS_ERR_NO_RESOURCE;
        }
    }
    return UCS_OK;
}

/* The end of the epilogue, given how the hand-over went (@a status): a
 * failed one gives the descriptor back, a posted active message spends its
 * credit. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_tx_end(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, unsigned flags,
                  const uct_dcx_ep_tx_t *tx, ucs_status_t status)
{
    if (ucs_unlikely(status != UCS_OK)) {
        if (tx->op != NULL) {
            ucs_mpool_put_inline(tx->op);
        }
        return status;
    }

    if (flags & UCT_DCX_EP_TX_AM) {
        uct_dcx_ep_fc_consume(iface, ep);
    }
    return UCS_OK;
}

/* The send epilogue: the work request built since uct_dcx_ep_wr_start goes
 * to the peer's DCT, the descriptor (if any) waits for its completion. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_tx_post(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, unsigned flags,
                   const uct_dcx_ep_tx_t *tx)
{
    return uct_dcx_ep_tx_end(iface, ep, flags, tx,
                             uct_dcx_ep_wr_complete(iface, ep, tx->dci,
                                                    tx->op));
}


/* The prologue of a bcopy operation (active message or put), then the
 * user's data packed into its descriptor's buffer: *length_p bytes. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_tx_begin_bcopy(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, unsigned flags,
        uct_pack_callback_t pack_cb, void *arg, const char *name,
        uct_dcx_ep_tx_t *tx, size_t *length_p)
{
    ucs_status_t status;

    status = uct_dcx_ep_tx_begin(iface, ep, flags, &iface->tx.mp,
                                 uct_dcx_op_release, NULL, tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    *length_p = pack_cb(tx->op->buf, arg);
    ucs_assertv(*length_p <= iface->tx.seg_size, "%s packed %zu > %zu", name,
                *length_p, iface->tx.seg_size);
    return UCS_OK;
}


/* --- operation arguments ------------------------------------------------ */

/* A zero-length RDMA operation never touches remote memory, so its rkey is
 * not checked (UCX passes UCT_INVALID_RKEY there, as the device does). */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_check_rkey(uct_rkey_t rkey,
                                                              size_t length)
{
    if (ucs_unlikely(!uct_dcx_rkey_is_valid(rkey) && (length != 0))) {
        ucs_error("dcx: invalid remote key 0x%" PRIx64
                  ": not unpacked by the dcx component",
                  rkey);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

/* The length and remote key of a short or bcopy RMA operation. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_rma_check(size_t length,
                                                             size_t max_length,
                                                             uct_rkey_t rkey,
                                                             const char *name)
{
    UCT_CHECK_LENGTH(length, 0, max_length, name);
    return uct_dcx_ep_check_rkey(rkey, length);
}

/* Gather list of a zero-copy operation; zero-length entries are skipped. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_iov_to_sge(
        uct_dcx_iface_t *iface, const uct_iov_t *iov, size_t iovcnt,
        struct ibv_sge *sge, size_t *num_sge_p, size_t *length_p)
{
    size_t i, num_sge = *num_sge_p, length = 0, iov_length;

    for (i = 0; i < iovcnt; ++i) {
        if ((iov[i].count > 1) && (iov[i].stride != iov[i].length)) {
            ucs_error("dcx: strided iov entries are not supported yet");
            return UCS_ERR_UNSUPPORTED;
        }

        iov_length = uct_iov_get_length(&iov[i]);
        if (iov_length == 0) {
            continue;
        }

        if ((num_sge >= iface->tx.max_sge) ||
            (iov[i].memh == UCT_MEM_HANDLE_NULL)) {
            ucs_error("dcx: iov entry %zu: %s", i,
                      (num_sge >= iface->tx.max_sge) ? "too many entries" :
                                                       "no memory handle");
            return UCS_ERR_INVALID_PARAM;
        }

        sge[num_sge].addr   = (uintptr_t)iov[i].buffer;
        sge[num_sge].length = iov_length;
        sge[num_sge].lkey   = uct_dcx_memh_lkey(iov[i].memh);
        length += iov_length;
        ++num_sge;
    }

    *num_sge_p = num_sge;
    *length_p  = length;
    return UCS_OK;
}

/* The one strided entry of an iov list, NULL when there is none. Entries
 * with count > 1 and a stride other than their length are strided. */
static UCS_F_ALWAYS_INLINE const uct_iov_t *
uct_dcx_ep_iov_strided(const uct_iov_t *iov, size_t iovcnt,
                       size_t *num_nonempty_p)
{
    const uct_iov_t *strided = NULL;
    size_t i, num_nonempty = 0;

    for (i = 0; i < iovcnt; ++i) {
        num_nonempty += (uct_iov_get_length(&iov[i]) > 0);
        if ((iov[i].count > 1) && (iov[i].stride != iov[i].length) &&
            (iov[i].length > 0)) {
            strided = &iov[i];
        }
    }
    *num_nonempty_p = num_nonempty;
    return strided;
}

/* A layout the caller waits for: retried when a UMR or an operation
 * completes. */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_umr_wait(
        uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, ucs_status_t status)
{
    if ((status == UCS_INPROGRESS) || (status == UCS_ERR_NO_RESOURCE)) {
        ep->flags |= UCT_DCX_EP_FLAG_WAIT_UMR;
        ep->umr_gen = iface->umr.gen;
        return UCS_ERR_NO_RESOURCE;
    }
    return status;
}


/* --- operation completions ---------------------------------------------- */

static UCS_F_ALWAYS_INLINE void
uct_dcx_op_complete(uct_dcx_op_t *op, ucs_status_t status)
{
    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }
}


/* Out of the common path (dcx_ep_strided.c): strided and long iov lists. */
ucs_status_t uct_dcx_memh_check_span(uct_mem_h memh, const void *buffer,
                                     size_t length, size_t stride, size_t count,
                                     const char *what, size_t index);
ucs_status_t
uct_dcx_ep_am_zcopy_strided(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                            uint8_t id, const void *header,
                            unsigned header_length, const uct_iov_t *iov,
                            uct_completion_t *comp);
ucs_status_t uct_dcx_ep_rma_pieces(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                                   const uct_iov_t *iov, size_t iovcnt,
                                   uint64_t remote_addr, uct_rkey_t rkey,
                                   uct_completion_t *comp, int is_read);
ucs_status_t uct_dcx_ep_rma_strided(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                                    const uct_iov_t *iov, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp,
                                    int is_read);

#endif
