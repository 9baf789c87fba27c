/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx endpoints: connect-to-iface, and every data operation as ibv_wr_* /
 * mlx5dv_wr_set_dc_addr work requests on a DCI borrowed from the pool.
 */
#include "dcx_iface.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#include <endian.h>
#include <string.h>


/* --- resources -------------------------------------------------------- */

/* A shared DCI (rand policy) failed since the endpoint last used it. */
static void uct_dcx_ep_check_shared_dci(uct_dcx_iface_t *iface,
                                        uct_dcx_ep_t *ep)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[ep->dci];

    if (ep->dci_generation != dci->generation) {
        uct_dcx_ep_handle_failure(ep, dci->last_error);
    }
}

/* Whether the endpoint may take a DCI from the pool now: waiting endpoints
 * are served first, in turn. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_may_take_dci(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    return (iface->tx.num_free > 0) &&
           ((iface->tx.num_waiters == 0) ||
            (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI));
}

/* Whether the endpoint's DCI takes its next work request now: one slot, or
 * the whole batch of an SGL put that found too few (dci->room), so that a
 * pending request is not dispatched to fail again for want of room. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_dci_has_room(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                        const uct_dcx_dci_t *dci)
{
    if (ucs_unlikely(dci->available < dci->room)) {
        return 0;
    }

    if (iface->tx.policy != UCT_DCX_TX_POLICY_DCS_QUOTA) {
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
    if ((iface->tx.num_waiters == 0) ||
        ((iface->tx.queue_len - dci->available) < iface->tx.quota)) {
        return 1;
    }
    ep->flags |= UCT_DCX_EP_FLAG_TX_WAIT;
    return 0;
}

/* Give the endpoint a DCI from the pool (dcs policies); it stops waiting
 * for one. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_dci_take(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    ucs_status_t status;
    uint16_t index;

    status = uct_dcx_iface_dci_take(iface, &index);
    if (ucs_unlikely(status != UCS_OK)) {
        if (status != UCS_ERR_NO_RESOURCE) {
            /* The device failed: the endpoint fails with it. */
            uct_dcx_ep_handle_failure(ep, status);
        }
        return status;
    }
    if (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI) {
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_DCI;
        --iface->tx.num_waiters;
    }
    ep->dci                  = index;
    iface->tx.dcis[index].ep = ep;
    return UCS_OK;
}

/* Make sure the endpoint holds a DCI with a free send queue slot. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_tx_get(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                  uct_dcx_dci_t **dci_p)
{
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    *dci_p = NULL;
    if (ucs_unlikely(iface->tx.policy == UCT_DCX_TX_POLICY_RAND)) {
        uct_dcx_ep_check_shared_dci(iface, ep);
    }

    if (ucs_unlikely(ep->flags & UCT_DCX_EP_FLAG_FAILED)) {
        return ep->status;
    }

    if (ep->dci == UCT_DCX_EP_NO_DCI) {
        /* Waiting endpoints first; an empty pool asks its holders for
         * completions (uct_dcx_iface_dci_take). */
        if (ucs_unlikely((iface->tx.num_waiters > 0) &&
                         !(ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI))) {
            return UCS_ERR_NO_RESOURCE;
        }
        status = uct_dcx_ep_dci_take(iface, ep);
        if (ucs_unlikely(status != UCS_OK)) {
            return status;
        }
        dci = &iface->tx.dcis[ep->dci];
    } else {
        dci = &iface->tx.dcis[ep->dci];
        if (ucs_unlikely(!uct_dcx_ep_dci_has_room(iface, ep, dci))) {
            return UCS_ERR_NO_RESOURCE;
        }
    }

    *dci_p = dci;
    return UCS_OK;
}

/* Undo uct_dcx_ep_tx_get() when nothing was posted after all. */
static void uct_dcx_ep_tx_abort(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[ep->dci];

    if ((iface->tx.policy != UCT_DCX_TX_POLICY_RAND) &&
        (dci->posted == dci->completed)) {
        uct_dcx_iface_dci_put(iface, ep);
    }
}

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
                     IBV_SEND_SIGNALED : 0) |
                    (dci->fence ? IBV_SEND_FENCE : 0);
    return qpx;
}

/* Hand the work request built since ibv_wr_start to the device. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_wr_submit(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                     uct_dcx_dci_t *dci, uct_dcx_op_t *op, int signaled)
{
    uct_dcx_peer_t *peer = uct_dcx_ep_peer(iface, ep);
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
    ucs_trace_data("dcx: ep %p: posted work request %" PRIu64 " on dci 0x%x "
                   "to dct 0x%x", ep, (uint64_t)dci->posted, dci->qp->qp_num,
                   peer->dctn);
    if (op != NULL) {
        op->sn = dci->posted;
        ucs_queue_push(&dci->outstanding, &op->queue);
    }
    return UCS_OK;
}

/* Address the work request to the peer's DCT and hand it to the device. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_wr_complete(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                       uct_dcx_dci_t *dci, uct_dcx_op_t *op)
{
    uct_dcx_peer_t *peer = uct_dcx_ep_peer(iface, ep);

    mlx5dv_wr_set_dc_addr(dci->mqpx, peer->ah, peer->dctn, peer->dc_key);
    return uct_dcx_ep_wr_submit(iface, ep, dci, op,
                                dci->qpx->wr_flags & IBV_SEND_SIGNALED);
}

static UCS_F_ALWAYS_INLINE uct_dcx_op_t *
uct_dcx_ep_op_get(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, ucs_mpool_t *mp,
                  uct_dcx_op_handler_t handler, uct_completion_t *comp)
{
    uct_dcx_op_t *op = ucs_mpool_get_inline(mp);

    if (ucs_unlikely(op == NULL)) {
        uct_dcx_ep_tx_abort(iface, ep);
        return NULL;
    }

    op->handler = handler;
    op->comp    = comp;
    op->ep      = ep;
    op->iface   = iface;
    op->dci     = ep->dci;
    return op;
}

/* A zero-length RDMA operation never touches remote memory, so its rkey is
 * not checked (UCX passes UCT_INVALID_RKEY there, as the device does). */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_check_rkey(uct_rkey_t rkey, size_t length)
{
    if (ucs_unlikely(!uct_dcx_rkey_is_valid(rkey) && (length != 0))) {
        ucs_error("dcx: invalid remote key 0x%" PRIx64 ": not unpacked by "
                  "the dcx component", rkey);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

/* Gather list of a zero-copy operation; zero-length entries are skipped. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_iov_to_sge(uct_dcx_iface_t *iface, const uct_iov_t *iov,
                      size_t iovcnt, struct ibv_sge *sge, size_t *num_sge_p,
                      size_t *length_p)
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

        if ((num_sge >= iface->tx.max_sge) || (iov[i].memh == UCT_MEM_HANDLE_NULL)) {
            ucs_error("dcx: iov entry %zu: %s", i,
                      (num_sge >= iface->tx.max_sge) ?
                      "too many entries" : "no memory handle");
            return UCS_ERR_INVALID_PARAM;
        }

        sge[num_sge].addr   = (uintptr_t)iov[i].buffer;
        sge[num_sge].length = iov_length;
        sge[num_sge].lkey   = uct_dcx_memh_lkey(iov[i].memh);
        length             += iov_length;
        ++num_sge;
    }

    *num_sge_p = num_sge;
    *length_p  = length;
    return UCS_OK;
}

/* --- operation completions -------------------------------------------- */

static UCS_F_ALWAYS_INLINE void uct_dcx_op_complete(uct_dcx_op_t *op,
                                                    ucs_status_t status)
{
    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }
}

static void uct_dcx_op_release(uct_dcx_op_t *op, ucs_status_t status)
{
    ucs_mpool_put_inline(op);
}

static void uct_dcx_op_comp_release(uct_dcx_op_t *op, ucs_status_t status)
{
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

/* A flush: recognised by the completion loop, which keeps flushes behind
 * operations that post again (compare-swap loops). */
void uct_dcx_op_flush_done(uct_dcx_op_t *op, ucs_status_t status)
{
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static void uct_dcx_op_get_bcopy(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        op->get_bcopy.unpack_cb(op->get_bcopy.arg, op->buf,
                                op->get_bcopy.length);
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static void uct_dcx_op_umr_release(uct_dcx_op_t *op, ucs_status_t status)
{
    uct_dcx_iface_t *iface = op->iface;

    uct_dcx_umr_put(iface->umr.engine, op->umr.mkey);
    ++iface->umr.gen; /* an mkey may be free for a waiting endpoint */
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

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

static void uct_dcx_op_amo_fetch(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        *(uint64_t*)op->amo.result = *(uint64_t*)op->buf;
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

/* --- endpoint ----------------------------------------------------------- */

static UCS_CLASS_INIT_FUNC(uct_dcx_ep_t, const uct_ep_params_t *params)
{
    uct_dcx_iface_t *iface = ucs_derived_of(params->iface, uct_dcx_iface_t);
    const uct_dcx_iface_addr_t *iface_addr;
    const uct_dcx_dev_addr_t *dev_addr;
    uct_dcx_peer_t *peer;
    struct ibv_ah *ah;
    ucs_status_t status;
    char reason[128];
    uint32_t dctn;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    if (!(params->field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR) ||
        !(params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR)) {
        ucs_error("dcx: endpoints connect to an interface: device and "
                  "interface addresses are required");
        return UCS_ERR_INVALID_PARAM;
    }

    dev_addr   = (const uct_dcx_dev_addr_t*)params->dev_addr;
    iface_addr = (const uct_dcx_iface_addr_t*)params->iface_addr;
    if (!uct_dcx_iface_addr_is_reachable(&iface->super.super,
                                         params->dev_addr, params->iface_addr,
                                         reason, sizeof(reason))) {
        ucs_error("%s: malformed or unreachable peer address", reason);
        return UCS_ERR_UNREACHABLE;
    }

    status = uct_dcx_iface_ah_get(iface, dev_addr->lid,
                                  iface->is_global ?
                                  (const union ibv_gid*)(dev_addr + 1) : NULL,
                                  &ah);
    if (status != UCS_OK) {
        return status;
    }

    dctn   = iface_addr->dctn[0] | ((uint32_t)iface_addr->dctn[1] << 8) |
             ((uint32_t)iface_addr->dctn[2] << 16);
    status = uct_dcx_iface_peer_get(iface, ah, dctn, iface_addr->dc_key,
                                    &peer);
    if (status != UCS_OK) {
        return status;
    }
    self->peer_index = peer->index;
    peer->lid        = dev_addr->lid;

    self->dci    = UCT_DCX_EP_NO_DCI;
    self->flags  = 0;
    self->status = UCS_OK;
    if (ucs_unlikely(iface->tx.fatal != UCS_OK)) {
        /* On a failed device: every operation fails at once. */
        self->flags  = UCT_DCX_EP_FLAG_FAILED;
        self->status = iface->tx.fatal;
    }
    if (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) {
        self->dci            = rand_r(&iface->tx.rand_seed) % iface->tx.num_dci;
        self->dci_generation = iface->tx.dcis[self->dci].generation;
    }
    ucs_arbiter_group_init(&self->arb_group);

    self->fc_wnd  = iface->fc.wnd_size;
    self->fc_sn   = 0;
    self->umr_gen = 0;

    ucs_debug("dcx: ep %p to lid %u dct 0x%x", self, dev_addr->lid, dctn);
    return UCS_OK;
}

int uct_dcx_ep_is_connected_to(uct_ep_h tl_ep,
                               const uct_device_addr_t *dev_addr,
                               const uct_iface_addr_t *iface_addr)
{
    uct_dcx_ep_t *ep                 = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_iface_t *iface           = ucs_derived_of(tl_ep->iface,
                                                      uct_dcx_iface_t);
    const uct_dcx_dev_addr_t *daddr  = (const uct_dcx_dev_addr_t*)dev_addr;
    const uct_dcx_iface_addr_t *addr = (const uct_dcx_iface_addr_t*)
                                       iface_addr;
    const uct_dcx_peer_t *peer;
    struct ibv_ah *ah;

    if (!uct_dcx_iface_addr_is_reachable(tl_ep->iface, dev_addr, iface_addr,
                                         NULL, 0) ||
        (uct_dcx_iface_ah_get(iface, daddr->lid,
                              iface->is_global ?
                              (const union ibv_gid*)(daddr + 1) : NULL,
                              &ah) != UCS_OK)) {
        return 0;
    }

    /* Address handles are cached per destination: the same handle, DCT
     * number and DC key are the same target. */
    peer = uct_dcx_ep_peer(iface, ep);
    return (peer->ah == ah) && (peer->dc_key == addr->dc_key) &&
           (peer->dctn == (addr->dctn[0] | ((uint32_t)addr->dctn[1] << 8) |
                           ((uint32_t)addr->dctn[2] << 16)));
}

static ucs_arbiter_cb_result_t
uct_dcx_ep_pending_purge_cb(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                            ucs_arbiter_elem_t *elem, void *arg)
{
    uct_purge_cb_args_t *args = arg;
    uct_pending_req_t *req    = ucs_container_of(elem, uct_pending_req_t,
                                                 priv);

    if (args->cb != NULL) {
        args->cb(req, args->arg);
    }
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void uct_dcx_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                              void *arg)
{
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_purge_cb_args_t args = {cb, arg};

    ucs_arbiter_group_purge(&iface->tx.arbiter, &ep->arb_group,
                            uct_dcx_ep_pending_purge_cb, &args);
    if (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI) {
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_DCI;
        --iface->tx.num_waiters;
    }
}

static void uct_dcx_op_amo_cas_loop(uct_dcx_op_t *op, ucs_status_t status);

/* An operation of an endpoint being destroyed: its user completion is
 * called now, with UCS_ERR_CANCELED, and never again. Its work request may
 * still complete, so it stays queued and releases its resources then,
 * without touching user memory (results, unpacking); a compare-swap loop
 * ends at its next completion. */
static void uct_dcx_op_cancel(uct_dcx_op_t *op)
{
    uct_completion_t *comp = op->comp;

    op->comp = NULL;
    op->ep   = NULL;
    if (op->handler == uct_dcx_op_amo_cas_loop) {
        op->amo.ep     = NULL;
        op->amo.result = NULL;
    } else if (op->handler != uct_dcx_op_umr_release) {
        op->handler = uct_dcx_op_release;
    }

    if (comp != NULL) {
        uct_invoke_completion(comp, UCS_ERR_CANCELED);
    }
}

/* Every operation the endpoint has outstanding (a shared DCI, rand, also
 * holds other endpoints' operations). */
static void uct_dcx_ep_cancel_ops(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    uct_dcx_op_t *op;

    ucs_queue_for_each(op, &iface->tx.dcis[ep->dci].outstanding, queue) {
        if (op->ep == ep) {
            uct_dcx_op_cancel(op);
        }
    }
    uct_dcx_iface_dci_cancel_comps(iface, &iface->tx.dcis[ep->dci], ep);
}

static UCS_CLASS_CLEANUP_FUNC(uct_dcx_ep_t)
{
    uct_dcx_iface_t *iface = ucs_derived_of(self->super.super.iface,
                                            uct_dcx_iface_t);
    uct_dcx_ep_pending_purge(&self->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&self->arb_group);
    uct_dcx_ep_fc_wait_remove(iface, self);

    if (self->flags & UCT_DCX_EP_FLAG_WAIT_DCI) {
        --iface->tx.num_waiters;
    }

    if (self->dci != UCT_DCX_EP_NO_DCI) {
        uct_dcx_ep_cancel_ops(iface, self);
    }

    /* Outstanding work requests complete without the endpoint (their
     * operations were cancelled above); the DCI returns to the pool when it
     * drains. Shared DCIs (rand) are not owned. */
    if ((self->dci != UCT_DCX_EP_NO_DCI) &&
        (iface->tx.policy != UCT_DCX_TX_POLICY_RAND)) {
        iface->tx.dcis[self->dci].ep = NULL;
        if (iface->tx.dcis[self->dci].posted ==
            iface->tx.dcis[self->dci].completed) {
            uct_dcx_iface_dci_put(iface, self);
        } else {
            /* The DCI returns to the pool when its last request completes:
             * if none asked for a completion, ask now. A full queue asks
             * again from its next completion (an orphan's tail). */
            (void)uct_dcx_iface_dci_request_completion(iface, self->dci);
        }
    }
    uct_dcx_iface_peer_put(iface, uct_dcx_ep_peer(iface, self));
}

UCS_CLASS_DEFINE(uct_dcx_ep_t, uct_base_ep_t);

/* Per-endpoint memory is a design goal (<= 64 B with its pool slot). */
_Static_assert(sizeof(uct_dcx_ep_t) <= 48, "uct_dcx_ep_t grew");

/* Endpoints come from the interface's pool: no allocator overhead per
 * endpoint at scale. */
ucs_status_t uct_dcx_ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p)
{
    uct_dcx_iface_t *iface = ucs_derived_of(params->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep;
    ucs_status_t status;

    ep = ucs_mpool_get(&iface->ep_mp);
    if (ep == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = UCS_CLASS_INIT(uct_dcx_ep_t, ep, params);
    if (status != UCS_OK) {
        ucs_mpool_put(ep);
        return status;
    }

    *ep_p = &ep->super.super;
    return UCS_OK;
}

void uct_dcx_ep_destroy(uct_ep_h tl_ep)
{
    UCS_CLASS_CLEANUP(uct_dcx_ep_t, tl_ep);
    ucs_mpool_put(tl_ep);
}

void uct_dcx_ep_handle_failure(uct_dcx_ep_t *ep, ucs_status_t status)
{
    uct_dcx_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                            uct_dcx_iface_t);
    ucs_status_t err_status;

    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return;
    }

    ep->flags  |= UCT_DCX_EP_FLAG_FAILED;
    ep->status  = status;
    uct_dcx_ep_fc_wait_remove(iface, ep);
    err_status  = uct_iface_handle_ep_err(&iface->super.super,
                                          &ep->super.super, status);
    if (err_status != UCS_OK) {
        ucs_log(iface->super.config.failure_level,
                "dcx: ep %p to dct 0x%x failed: %s", ep,
                uct_dcx_ep_peer(iface, ep)->dctn,
                ucs_status_string(status));
    }
}

/* --- active-message flow control --------------------------------------- */

void uct_dcx_ep_fc_wait_remove(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    khiter_t it;

    if (!(ep->flags & UCT_DCX_EP_FLAG_FC_WAIT)) {
        return;
    }

    it = kh_get(uct_dcx_fc_wait, &iface->fc.waiting, (uintptr_t)ep);
    if (it != kh_end(&iface->fc.waiting)) {
        kh_del(uct_dcx_fc_wait, &iface->fc.waiting, it);
    }
    ep->flags &= ~UCT_DCX_EP_FLAG_FC_WAIT;
}

/* A DCI slot for control traffic (credit requests, keepalives): it may
 * take a free DCI ahead of endpoints waiting for one and ignores the
 * dcs_quota limit; like any work it holds the DCI only until it completes. */
static ucs_status_t uct_dcx_ep_ctrl_dci_get(uct_dcx_iface_t *iface,
                                            uct_dcx_ep_t *ep,
                                            uct_dcx_dci_t **dci_p)
{
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    if (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) {
        uct_dcx_ep_check_shared_dci(iface, ep);
    }
    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return ep->status;
    }

    if (ep->dci == UCT_DCX_EP_NO_DCI) {
        status = uct_dcx_ep_dci_take(iface, ep);
        if (status != UCS_OK) {
            return status;
        }
    }

    dci = &iface->tx.dcis[ep->dci];
    if (dci->available == 0) {
        return UCS_ERR_NO_RESOURCE;
    }

    *dci_p = dci;
    return UCS_OK;
}

/* Post a credit request on the endpoint's DCI, in order after the messages
 * it covers. */
static ucs_status_t uct_dcx_ep_fc_post_request(uct_dcx_iface_t *iface,
                                               uct_dcx_ep_t *ep)
{
    uct_dcx_fc_request_t req;
    struct ibv_data_buf bufs[2];
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    status = uct_dcx_ep_ctrl_dci_get(iface, ep, &dci);
    if (status != UCS_OK) {
        return status;
    }

    req.ep_id     = (uintptr_t)ep;
    req.dc_key    = iface->rx.dc_key;
    req.dctn[0]   = iface->rx.dctn & 0xff;
    req.dctn[1]   = (iface->rx.dctn >> 8) & 0xff;
    req.dctn[2]   = (iface->rx.dctn >> 16) & 0xff;
    req.sn        = ep->fc_sn;
    req.credits   = iface->fc.wnd_size - ep->fc_wnd;
    req.lid       = iface->port_attr.lid;
    req.dev_flags = iface->dev_addr_flags;

    bufs[0].addr   = &req;
    bufs[0].length = sizeof(req);
    bufs[1].addr   = &iface->gid;
    bufs[1].length = iface->is_global ? sizeof(iface->gid) : 0;

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 0);
    ibv_wr_send_imm(qpx, htobe32(UCT_DCX_IMM_FC_REQUEST));
    ibv_wr_set_inline_data_list(qpx, 2, bufs);
    return uct_dcx_ep_wr_complete(iface, ep, dci, NULL);
}

/* Ask the peer for credits (again); a request that cannot be posted now,
 * or whose grant does not come within the timeout, is retried by progress. */
void uct_dcx_ep_fc_request(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    ucs_time_t now = ucs_get_time();
    ucs_status_t status;
    ucs_time_t deadline;
    khiter_t it;
    int ret;

    ++ep->fc_sn; /* a late grant of an earlier request is ignored */
    status = uct_dcx_ep_fc_post_request(iface, ep);
    if (UCS_STATUS_IS_ERR(status) && (status != UCS_ERR_NO_RESOURCE)) {
        uct_dcx_ep_fc_wait_remove(iface, ep);
        return; /* the endpoint failed */
    }

    deadline = now + ((status == UCS_OK) ? iface->fc.timeout : 0);
    it       = kh_put(uct_dcx_fc_wait, &iface->fc.waiting, (uintptr_t)ep,
                      &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_error("dcx: ep %p: cannot track a credit request", ep);
        return;
    }
    kh_value(&iface->fc.waiting, it) = deadline;
    ep->flags                       |= UCT_DCX_EP_FLAG_FC_WAIT;
    if ((kh_size(&iface->fc.waiting) == 1) ||
        (deadline < iface->fc.next_check)) {
        iface->fc.next_check = deadline;
    }
}

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

/* --- active messages ------------------------------------------------- */

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
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, data,
                       length, "TX: %s", what);
}

ucs_status_t uct_dcx_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                 const void *payload, unsigned length)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_data_buf bufs[2];
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0, iface->tx.max_inline,
                     "am_short");

    status = uct_dcx_ep_fc_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    bufs[0].addr   = &header;
    bufs[0].length = sizeof(header);
    bufs[1].addr   = (void*)payload;
    bufs[1].length = length;

    if (ucs_log_is_enabled(UCS_LOG_LEVEL_TRACE_DATA)) {
        uct_dcx_ep_trace_am_inline(iface, id, bufs, 2, "AM_SHORT");
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 0);
    ibv_wr_send_imm(qpx, htobe32(id));
    ibv_wr_set_inline_data_list(qpx, 2, bufs);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, NULL);
    if (ucs_likely(status == UCS_OK)) {
        uct_dcx_ep_fc_consume(iface, ep);
    }
    return status;
}

ucs_status_t uct_dcx_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                     const uct_iov_t *iov, size_t iovcnt)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_data_buf bufs[UCT_DCX_MAX_SGE];
    struct ibv_qp_ex *qpx;
    size_t i, num = 0, length = 0;
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_PARAM(iovcnt <= iface->tx.max_sge - 1,
                    "am_short_iov: %zu iov entries (at most %u)", iovcnt,
                    iface->tx.max_sge - 1);

    for (i = 0; i < iovcnt; ++i) {
        bufs[num].addr   = iov[i].buffer;
        bufs[num].length = uct_iov_get_length(&iov[i]);
        length          += bufs[num].length;
        num             += (bufs[num].length > 0);
    }
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_inline, "am_short_iov");

    status = uct_dcx_ep_fc_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (ucs_log_is_enabled(UCS_LOG_LEVEL_TRACE_DATA)) {
        uct_dcx_ep_trace_am_inline(iface, id, bufs, num, "AM_SHORT_IOV");
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 0);
    ibv_wr_send_imm(qpx, htobe32(id));
    ibv_wr_set_inline_data_list(qpx, num, bufs);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, NULL);
    if (ucs_likely(status == UCS_OK)) {
        uct_dcx_ep_fc_consume(iface, ep);
    }
    return status;
}

ssize_t uct_dcx_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                            uct_pack_callback_t pack_cb, void *arg,
                            unsigned flags)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    size_t length;

    UCT_CHECK_AM_ID(id);

    status = uct_dcx_ep_fc_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp, uct_dcx_op_release,
                           NULL);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    length = pack_cb(op->buf, arg);
    ucs_assertv(length <= iface->tx.seg_size, "am_bcopy packed %zu > %zu",
                length, iface->tx.seg_size);
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, op->buf,
                       length, "TX: AM_BCOPY");

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    ibv_wr_send_imm(qpx, htobe32(id));
    ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, length);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    uct_dcx_ep_fc_consume(iface, ep);
    return length;
}

/* The one strided entry of an iov list, NULL when there is none. Entries
 * with count > 1 and a stride other than their length are strided. */
static UCS_F_ALWAYS_INLINE const uct_iov_t *
uct_dcx_ep_iov_strided(const uct_iov_t *iov, size_t iovcnt,
                       size_t *num_nonempty_p)
{
    const uct_iov_t *strided = NULL;
    size_t i, num_nonempty   = 0;

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

/* A strided payload: packed after the header when small or without UMR,
 * otherwise gathered by the device through a layout's mkey. */
static ucs_status_t
uct_dcx_ep_am_zcopy_strided(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                            uint8_t id, const void *header,
                            unsigned header_length, const uct_iov_t *iov,
                            uct_completion_t *comp)
{
    size_t total = (size_t)iov->length * iov->count;
    uct_dcx_umr_mkey_t *mkey = NULL;
    uct_dcx_umr_t *umr       = NULL;
    uct_dcx_umr_layout_t layout;
    struct ibv_sge sge[2];
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    size_t i;

    if ((iov->stride < iov->length) || (iov->memh == UCT_MEM_HANDLE_NULL)) {
        ucs_error("dcx: am_zcopy: strided entry with overlapping blocks or "
                  "no memory handle");
        return UCS_ERR_INVALID_PARAM;
    }
    UCT_CHECK_LENGTH(header_length + total, 0, iface->tx.seg_size,
                     "am_zcopy");

    status = uct_dcx_ep_fc_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    layout.addr   = (uintptr_t)iov->buffer;
    layout.lkey   = uct_dcx_memh_lkey(iov->memh);
    layout.length = iov->length;
    layout.stride = iov->stride;
    layout.count  = iov->count;
    if ((total > iface->umr.pack_thresh) && (iface->umr.enable != UCS_NO) &&
        (uct_dcx_iface_umr_engine(iface, &umr) == UCS_OK) &&
        uct_dcx_umr_layout_fits(umr, &layout)) {
        status = uct_dcx_umr_get(umr, &layout, &mkey);
        if ((status == UCS_INPROGRESS) || (status == UCS_ERR_NO_RESOURCE)) {
            ep->flags  |= UCT_DCX_EP_FLAG_WAIT_UMR;
            ep->umr_gen = iface->umr.gen;
            return UCS_ERR_NO_RESOURCE;
        } else if (status != UCS_OK) {
            return status;
        }
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_UMR;
    } else if (iface->umr.enable == UCS_YES) {
        ucs_error("dcx: strided am_zcopy needs UMR (UCX_DCX_UMR=yes), which "
                  "this device or layout does not allow");
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        goto err_put_mkey;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp,
                           (mkey != NULL) ? uct_dcx_op_umr_release :
                           ((comp == NULL) ? uct_dcx_op_release :
                                             uct_dcx_op_comp_release), comp);
    if (ucs_unlikely(op == NULL)) {
        status = UCS_ERR_NO_RESOURCE;
        goto err_put_mkey;
    }

    memcpy(op->buf, header, header_length);
    sge[0].addr   = (uintptr_t)op->buf;
    sge[0].lkey   = op->lkey;
    if (mkey != NULL) {
        op->umr.mkey  = mkey;
        sge[0].length = header_length;
        sge[1].addr   = 0; /* the layout is zero-based */
        sge[1].length = total;
        sge[1].lkey   = mkey->mkey->lkey;
    } else {
        for (i = 0; i < iov->count; ++i) {
            memcpy(op->buf + header_length + i * iov->length,
                   UCS_PTR_BYTE_OFFSET(iov->buffer, i * iov->stride),
                   iov->length);
        }
        sge[0].length = header_length + total;
    }
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, header,
                       header_length, "TX: AM_ZCOPY strided");

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    ibv_wr_send_imm(qpx, htobe32(id));
    if ((mkey != NULL) && (header_length > 0)) {
        ibv_wr_set_sge_list(qpx, 2, sge);
    } else if (mkey != NULL) {
        ibv_wr_set_sge_list(qpx, 1, &sge[1]);
    } else {
        ibv_wr_set_sge_list(qpx, 1, sge);
    }
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        goto err_put_mkey;
    }
    if (mkey != NULL) {
        ++iface->umr.zcopy_ops;
    } else {
        ++iface->umr.copy_ops;
    }
    uct_dcx_ep_fc_consume(iface, ep);
    return UCS_INPROGRESS;

err_put_mkey:
    if (mkey != NULL) {
        uct_dcx_umr_put(umr, mkey);
    }
    return status;
}

ucs_status_t uct_dcx_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                 const void *header, unsigned header_length,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 unsigned flags, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_sge sge[UCT_DCX_MAX_SGE];
    size_t num_sge = 0, length;
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;

    const uct_iov_t *strided;
    size_t num_nonempty;

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
        return uct_dcx_ep_am_zcopy_strided(iface, ep, id, header,
                                           header_length, strided, comp);
    }

    if (header_length > 0) {
        /* The header travels from the op's registered buffer. */
        num_sge = 1;
    }
    status = uct_dcx_ep_iov_to_sge(iface, iov, iovcnt, sge, &num_sge,
                                   &length);
    if (status != UCS_OK) {
        return status;
    }
    UCT_CHECK_LENGTH(header_length + length, 0, iface->tx.seg_size,
                     "am_zcopy");

    status = uct_dcx_ep_fc_check(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp,
                           (comp == NULL) ? uct_dcx_op_release :
                                            uct_dcx_op_comp_release, comp);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (header_length > 0) {
        memcpy(op->buf, header, header_length);
        sge[0].addr   = (uintptr_t)op->buf;
        sge[0].length = header_length;
        sge[0].lkey   = op->lkey;
    }
    /* The header only: the payload is the user's, not contiguous. */
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, header,
                       header_length, "TX: AM_ZCOPY");

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    ibv_wr_send_imm(qpx, htobe32(id));
    if (num_sge == 0) {
        ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, 0);
    } else {
        ibv_wr_set_sge_list(qpx, num_sge, sge);
    }
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    uct_dcx_ep_fc_consume(iface, ep);
    return UCS_INPROGRESS;
}

/* --- RMA ------------------------------------------------------------- */

ucs_status_t uct_dcx_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                  unsigned length, uint64_t remote_addr,
                                  uct_rkey_t rkey)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, iface->tx.max_inline, "put_short");
    status = uct_dcx_ep_check_rkey(rkey, length);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 0);
    ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    ibv_wr_set_inline_data(qpx, (void*)buffer, length);
    return uct_dcx_ep_wr_complete(iface, ep, dci, NULL);
}

ssize_t uct_dcx_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                             void *arg, uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    size_t length;

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp, uct_dcx_op_release,
                           NULL);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    length = pack_cb(op->buf, arg);
    ucs_assertv(length <= iface->tx.seg_size, "put_bcopy packed %zu > %zu",
                length, iface->tx.seg_size);
    status = uct_dcx_ep_check_rkey(rkey, length);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        uct_dcx_ep_tx_abort(iface, ep);
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, length);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    return length;
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
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    size_t i;

    if (total > iface->tx.seg_size) {
        ucs_error("dcx: strided %s of %zu bytes without UMR: at most "
                  "UCX_DCX_SEG_SIZE (%zu) bytes are packed",
                  is_read ? "get_zcopy" : "put_zcopy", total,
                  iface->tx.seg_size);
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp,
                           is_read ? uct_dcx_op_strided_get :
                           ((comp == NULL) ? uct_dcx_op_release :
                                             uct_dcx_op_comp_release), comp);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    if (is_read) {
        op->strided.buffer = iov->buffer;
        op->strided.length = iov->length;
        op->strided.stride = iov->stride;
        op->strided.count  = iov->count;
        ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    } else {
        for (i = 0; i < iov->count; ++i) {
            memcpy(op->buf + i * iov->length,
                   UCS_PTR_BYTE_OFFSET(iov->buffer, i * iov->stride),
                   iov->length);
        }
        ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    }
    ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, total);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    ++iface->umr.copy_ops;
    return UCS_INPROGRESS;
}

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
        if ((iov[i].count > 1) && (iov[i].stride != iov[i].length)) {
            if (iov[i].stride < iov[i].length) {
                ucs_error("dcx: iov entry %zu: stride %zu is below the block "
                          "length %zu", i, iov[i].stride, iov[i].length);
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
static ucs_status_t
uct_dcx_ep_rma_mkey(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                    uct_dcx_umr_t *umr, uct_dcx_umr_mkey_t *mkey, size_t total,
                    uint64_t remote_addr, uct_rkey_t rkey,
                    uct_completion_t *comp, int is_read)
{
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        uct_dcx_umr_put(umr, mkey);
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.flush_mp,
                           uct_dcx_op_umr_release, comp);
    if (ucs_unlikely(op == NULL)) {
        uct_dcx_umr_put(umr, mkey);
        return UCS_ERR_NO_RESOURCE;
    }
    op->umr.mkey = mkey;

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    if (is_read) {
        ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    } else {
        ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkey), remote_addr);
    }
    ibv_wr_set_sge(qpx, mkey->mkey->lkey, 0, total);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        uct_dcx_umr_put(umr, mkey);
        ucs_mpool_put_inline(op);
        return status;
    }
    ++iface->umr.zcopy_ops;
    return UCS_INPROGRESS;
}

/* A layout the caller waits for: retried when a UMR or an operation
 * completes. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_umr_wait(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                    ucs_status_t status)
{
    if ((status == UCS_INPROGRESS) || (status == UCS_ERR_NO_RESOURCE)) {
        ep->flags  |= UCT_DCX_EP_FLAG_WAIT_UMR;
        ep->umr_gen = iface->umr.gen;
        return UCS_ERR_NO_RESOURCE;
    }
    return status;
}

/* Pieces beyond the gather list or one UMR entry's limits: a list mkey
 * (one piece per block, up to the list capacity of one UMR). */
static ucs_status_t
uct_dcx_ep_rma_pieces(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
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

    status = (iface->umr.enable == UCS_NO) ? UCS_ERR_UNSUPPORTED :
             uct_dcx_iface_umr_engine(iface, &umr);
    if (status == UCS_OK) {
        status = uct_dcx_ep_iov_pieces(iov, iovcnt, pieces, umr->list_max,
                                       &n, &total);
        if (status == UCS_ERR_INVALID_PARAM) {
            return status;
        }
    }
    if (status != UCS_OK) {
        ucs_error("dcx: %s: %zu iov entries need a list UMR, which holds "
                  "%u pieces, or UMR is unavailable",
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
    return uct_dcx_ep_rma_mkey(iface, ep, umr, mkey, total, remote_addr,
                               rkey, comp, is_read);
}

/* A strided entry moves zero-copy through an indirect mkey that maps its
 * blocks contiguously from offset 0. */
static ucs_status_t
uct_dcx_ep_rma_strided(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                       const uct_iov_t *iov, uint64_t remote_addr,
                       uct_rkey_t rkey, uct_completion_t *comp, int is_read)
{
    size_t total = (size_t)iov->length * iov->count;
    uct_dcx_umr_t *umr = NULL;
    uct_dcx_umr_layout_t layout;
    uct_dcx_umr_mkey_t *mkey;
    ucs_status_t status;

    if (iov->stride < iov->length) {
        ucs_error("dcx: strided iov: stride %zu is below the block length "
                  "%zu", iov->stride, iov->length);
        return UCS_ERR_INVALID_PARAM;
    }
    if (iov->memh == UCT_MEM_HANDLE_NULL) {
        ucs_error("dcx: strided iov without a memory handle");
        return UCS_ERR_INVALID_PARAM;
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

    status = (iface->umr.enable == UCS_NO) ? UCS_ERR_UNSUPPORTED :
             uct_dcx_iface_umr_engine(iface, &umr);
    layout.addr   = (uintptr_t)iov->buffer;
    layout.lkey   = uct_dcx_memh_lkey(iov->memh);
    layout.length = iov->length;
    layout.stride = iov->stride;
    layout.count  = iov->count;
    if ((status == UCS_OK) && !uct_dcx_umr_layout_fits(umr, &layout)) {
        if (iov->count <= umr->list_max) {
            /* Too wide for an interleaved entry: one piece per block. */
            return uct_dcx_ep_rma_pieces(iface, ep, iov, 1, remote_addr, rkey,
                                         comp, is_read);
        }
        ucs_debug("dcx: strided layout %zu x %zu @ %zu does not fit one "
                  "UMR", iov->length, (size_t)iov->count, iov->stride);
        status = UCS_ERR_UNSUPPORTED;
    }
    if (status != UCS_OK) {
        if (iface->umr.enable == UCS_YES) {
            ucs_error("dcx: strided %s needs UMR (UCX_DCX_UMR=yes), which "
                      "this device or layout does not allow",
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

/* Post one RDMA write or read of a gather/scatter list; the user's
 * completion waits in the DCI's ring. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_ep_rma_post(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                    const struct ibv_sge *sge, size_t num_sge,
                    uint64_t remote_addr, uct_rkey_t rkey,
                    uct_completion_t *comp, int is_read)
{
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, comp != NULL);
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

    status = uct_dcx_ep_wr_complete(iface, ep, dci, NULL);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    if (comp != NULL) {
        uct_dcx_iface_comp_push(iface, dci, ep, comp);
    }
    return UCS_INPROGRESS;
}

/* put_zcopy / get_zcopy other than one contiguous registered buffer:
 * several entries, strided ones, zero length, or invalid input. */
static UCS_F_NOINLINE ucs_status_t
uct_dcx_ep_rma_zcopy_general(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                             const uct_iov_t *iov, size_t iovcnt,
                             uint64_t remote_addr, uct_rkey_t rkey,
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

    status = uct_dcx_ep_iov_to_sge(iface, iov, iovcnt, sge, &num_sge,
                                   &length);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    UCT_CHECK_LENGTH(length, 0, iface->port_attr.max_msg_sz,
                     is_read ? "get_zcopy" : "put_zcopy");

    return uct_dcx_ep_rma_post(iface, ep, sge, num_sge, remote_addr, rkey,
                               comp, is_read);
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

    if (ucs_likely((iovcnt == 1) && (iov->count == 1) &&
                   (iov->length > 0) && (iov->memh != UCT_MEM_HANDLE_NULL) &&
                   (iov->length <= iface->port_attr.max_msg_sz) &&
                   uct_dcx_rkey_is_valid(rkey))) {
        sge.addr   = (uintptr_t)iov->buffer;
        sge.length = iov->length;
        sge.lkey   = uct_dcx_memh_lkey(iov->memh);
        return uct_dcx_ep_rma_post(iface, ep, &sge, 1, remote_addr, rkey,
                                   comp, is_read);
    }

    return uct_dcx_ep_rma_zcopy_general(iface, ep, iov, iovcnt, remote_addr,
                                        rkey, comp, is_read);
}

ucs_status_t uct_dcx_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_dcx_ep_rma_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, comp,
                                0);
}

ucs_status_t uct_dcx_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_dcx_ep_rma_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, comp,
                                1);
}

/* --- scatter-gather put (uct_ep_put_sgl_zcopy, UCX >= 1.22) ------------ */

/* Check one call's elements and count its work requests: one per block (an
 * element is counts[i] blocks of lengths[i] bytes, strides[i] apart on both
 * sides). Empty elements and blocks post nothing. */
static ucs_status_t
uct_dcx_ep_sgl_check(uct_dcx_iface_t *iface, void * const *buffers,
                     const size_t *lengths, uct_mem_h const *memhs,
                     const uint64_t *remote_addrs, uct_rkey_t const *rkeys,
                     const size_t *counts, const size_t *strides,
                     size_t count, size_t *num_wrs_p)
{
    size_t i, blocks, num_wrs = 0;
    ucs_status_t status;

    if ((count > 0) && ((buffers == NULL) || (lengths == NULL) ||
                        (memhs == NULL) || (remote_addrs == NULL) ||
                        (rkeys == NULL))) {
        ucs_error("dcx: put_sgl_zcopy: NULL element array");
        return UCS_ERR_INVALID_PARAM;
    }
    if ((counts == NULL) != (strides == NULL)) {
        ucs_error("dcx: put_sgl_zcopy: counts and strides go together");
        return UCS_ERR_INVALID_PARAM;
    }
    if (count > iface->tx.put_sgl_max) {
        ucs_error("dcx: put_sgl_zcopy: %zu elements, at most %zu", count,
                  iface->tx.put_sgl_max);
        return UCS_ERR_INVALID_PARAM;
    }

    for (i = 0; i < count; ++i) {
        blocks = (counts == NULL) ? 1 : counts[i];
        if ((lengths[i] == 0) || (blocks == 0)) {
            continue;
        }
        if (lengths[i] > iface->port_attr.max_msg_sz) {
            ucs_error("dcx: put_sgl_zcopy: element %zu: %zu bytes, at most %u",
                      i, lengths[i], iface->port_attr.max_msg_sz);
            return UCS_ERR_INVALID_PARAM;
        }
        if (memhs[i] == UCT_MEM_HANDLE_NULL) {
            ucs_error("dcx: put_sgl_zcopy: element %zu has no memory handle",
                      i);
            return UCS_ERR_INVALID_PARAM;
        }
        status = uct_dcx_ep_check_rkey(rkeys[i], lengths[i]);
        if (status != UCS_OK) {
            return status;
        }
        num_wrs += blocks;
        if (num_wrs > iface->tx.put_sgl_max) {
            ucs_error("dcx: put_sgl_zcopy: more than %zu blocks in one call",
                      iface->tx.put_sgl_max);
            return UCS_ERR_INVALID_PARAM;
        }
    }

    *num_wrs_p = num_wrs;
    return UCS_OK;
}

/* Whether the @a wr-th write of an SGL batch asks for a completion: the
 * last one when an operation waits for it, and on the way as any request.
 * @a unsignaled: before this write. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_sgl_signal(const uct_dcx_iface_t *iface, unsigned unsignaled,
                      size_t wr, size_t num_wrs, int need_completion)
{
    return uct_dcx_iface_signal_after(iface, unsignaled,
                                      (wr + 1 == num_wrs) && need_completion);
}

/* Elements [first, first + n) of an SGL call that go out together: when
 * their remote ranges follow each other in one registration, one RDMA
 * WRITE (merged) whose local side is the elements' own bytes when they
 * follow each other there too, an interleaved mkey when they are evenly
 * spaced (same length, same registration), else a list mkey; otherwise
 * one write per element (per block with counts). */
typedef struct {
    size_t             first;
    size_t             n;
    size_t             total;
    size_t             stride;  /* local distance between the elements
                                   while they are evenly spaced, else 0 */
    int                merged;  /* one write for the whole run */
    uct_dcx_umr_mkey_t *mkey;   /* its local side, unless contiguous */
} uct_dcx_sgl_run_t;

/* The writes of element @a i outside a merged run: one per block, or one
 * for all its blocks when they follow each other (stride = length, so on
 * both sides) and fit one message. */
static UCS_F_ALWAYS_INLINE size_t
uct_dcx_ep_sgl_blocks(const uct_dcx_iface_t *iface, const size_t *lengths,
                      const size_t *counts, const size_t *strides, size_t i)
{
    size_t total;

    if (counts == NULL) {
        return 1;
    }
    if ((strides[i] == lengths[i]) &&
        !__builtin_mul_overflow(counts[i], lengths[i], &total) &&
        (total <= iface->port_attr.max_msg_sz)) {
        return 1;
    }
    return counts[i];
}

/* Whether element @a i lands right after element @a prev in the same
 * registration. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_sgl_adjacent(const size_t *lengths, const uint64_t *remote_addrs,
                        uct_rkey_t const *rkeys, size_t prev, size_t i)
{
    return (rkeys[i] == rkeys[prev]) &&
           (remote_addrs[i] == remote_addrs[prev] + lengths[prev]);
}

/* The local distance from the run's last element to element @a i if it
 * keeps the run evenly spaced (same length and registration, the same
 * distance as before, one an interleaved mkey can describe or 0 bytes of
 * gap), else 0. @a umr: whether gaps can be mapped. */
static size_t uct_dcx_ep_sgl_even_stride(const uct_dcx_sgl_run_t *run,
                                         void * const *buffers,
                                         const size_t *lengths,
                                         uct_mem_h const *memhs, int umr,
                                         size_t i)
{
    size_t last = run->first + run->n - 1;
    uintptr_t from, to;

    if (((run->n > 1) && (run->stride == 0)) ||
        (lengths[i] != lengths[last]) || (memhs[i] != memhs[last])) {
        return 0;
    }
    from = (uintptr_t)buffers[last];
    to   = (uintptr_t)buffers[i];
    if ((to < from + lengths[i]) || (to - from > UCT_DCX_UMR_MAX_FIELD) ||
        ((run->n > 1) && (to - from != run->stride)) ||
        (!umr && (to - from != lengths[i]))) {
        return 0;
    }
    return to - from;
}

/* Add element @a i to the run @a run if its remote range follows the run's
 * in the same registration: evenly spaced elements without a bound, others
 * up to one list mkey (@a list_max, 1 without UMR). */
static int uct_dcx_ep_sgl_extend(const uct_dcx_iface_t *iface,
                                 uct_dcx_sgl_run_t *run, void * const *buffers,
                                 const size_t *lengths, uct_mem_h const *memhs,
                                 const uint64_t *remote_addrs,
                                 uct_rkey_t const *rkeys, unsigned list_max,
                                 size_t i)
{
    size_t stride;

    if (!uct_dcx_ep_sgl_adjacent(lengths, remote_addrs, rkeys,
                                 run->first + run->n - 1, i) ||
        (run->total + lengths[i] > iface->port_attr.max_msg_sz) ||
        (run->total + lengths[i] > INT32_MAX)) {
        return 0;
    }
    stride = uct_dcx_ep_sgl_even_stride(run, buffers, lengths, memhs,
                                        list_max > 1, i);
    if ((stride == 0) && (run->n >= list_max)) {
        return 0;
    }
    run->stride = stride;
    run->total += lengths[i];
    ++run->n;
    return 1;
}

/* Whether two non-empty elements of the call land next to each other in one
 * registration: only then is the UMR engine worth creating (its QP is
 * polled by every progress call once it exists). */
static int uct_dcx_ep_sgl_has_adjacent(const size_t *lengths,
                                       const uint64_t *remote_addrs,
                                       uct_rkey_t const *rkeys, size_t count)
{
    size_t i, prev = SIZE_MAX;

    for (i = 0; i < count; ++i) {
        if (lengths[i] == 0) {
            continue;
        }
        if ((prev != SIZE_MAX) &&
            uct_dcx_ep_sgl_adjacent(lengths, remote_addrs, rkeys, prev, i)) {
            return 1;
        }
        prev = i;
    }
    return 0;
}

/* Cut the call into runs; merge runs of 2 or more elements (see
 * uct_dcx_sgl_run_t) when there are no per-element counts; an element whose
 * blocks follow each other is one write. *num_wrs_p: the work requests the
 * runs take. */
static ucs_status_t
uct_dcx_ep_sgl_runs(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                    void * const *buffers, const size_t *lengths,
                    uct_mem_h const *memhs, const uint64_t *remote_addrs,
                    uct_rkey_t const *rkeys, const size_t *counts,
                    const size_t *strides, size_t count,
                    uct_dcx_sgl_run_t *runs, size_t *num_runs_p,
                    size_t *num_wrs_p)
{
    struct ibv_sge pieces[UCT_DCX_UMR_LIST_MAX];
    uct_dcx_umr_layout_t layout;
    uct_dcx_umr_t *umr   = NULL;
    unsigned list_max    = 1;
    size_t num_runs      = 0;
    size_t num_wrs       = 0;
    uct_dcx_sgl_run_t *run;
    ucs_status_t status;
    size_t i, r;

    if ((counts == NULL) && (count > 1) && (iface->umr.enable != UCS_NO) &&
        uct_dcx_ep_sgl_has_adjacent(lengths, remote_addrs, rkeys, count) &&
        (uct_dcx_iface_umr_engine(iface, &umr) == UCS_OK)) {
        list_max = ucs_min(umr->list_max, UCT_DCX_UMR_LIST_MAX);
    }

    for (i = 0; i < count; ++i) {
        if ((lengths[i] == 0) || ((counts != NULL) && (counts[i] == 0))) {
            continue;
        }
        if ((num_runs > 0) && (counts == NULL) &&
            uct_dcx_ep_sgl_extend(iface, &runs[num_runs - 1], buffers,
                                  lengths, memhs, remote_addrs, rkeys,
                                  list_max, i)) {
            continue;
        }
        run         = &runs[num_runs++];
        run->first  = i;
        run->n      = 1;
        run->total  = lengths[i];
        run->stride = 0;
        run->merged = 0;
        run->mkey   = NULL;
    }

    for (r = 0; r < num_runs; ++r) {
        run = &runs[r];
        if (run->n < 2) {
            num_wrs += uct_dcx_ep_sgl_blocks(iface, lengths, counts, strides,
                                             run->first);
            continue;
        }
        run->merged = 1;
        if (run->stride == lengths[run->first]) {
            /* Contiguous on both sides: one plain write. */
            ++num_wrs;
            continue;
        }
        if (run->stride != 0) {
            layout.addr   = (uintptr_t)buffers[run->first];
            layout.lkey   = uct_dcx_memh_lkey(memhs[run->first]);
            layout.length = lengths[run->first];
            layout.stride = run->stride;
            layout.count  = run->n;
            status        = uct_dcx_umr_layout_fits(umr, &layout) ?
                            uct_dcx_umr_get(umr, &layout, &run->mkey) :
                            UCS_ERR_INVALID_PARAM;
        } else {
            for (i = 0; i < run->n; ++i) {
                pieces[i].addr   = (uintptr_t)buffers[run->first + i];
                pieces[i].length = lengths[run->first + i];
                pieces[i].lkey   = uct_dcx_memh_lkey(memhs[run->first + i]);
            }
            status = uct_dcx_umr_get_list(umr, pieces, run->n, &run->mkey);
        }
        if (status == UCS_ERR_INVALID_PARAM) {
            /* the device refused the layout: one by one */
            run->mkey   = NULL;
            run->merged = 0;
            num_wrs    += run->n;
            continue;
        }
        if (status != UCS_OK) {
            /* Being programmed, or every mkey busy: the whole call waits,
             * and the mkeys taken so far go back. */
            while (r-- > 0) {
                if (runs[r].mkey != NULL) {
                    uct_dcx_umr_put(umr, runs[r].mkey);
                }
            }
            return uct_dcx_ep_umr_wait(iface, ep, status);
        }
        ++num_wrs;
    }

    ep->flags   &= ~UCT_DCX_EP_FLAG_WAIT_UMR;
    *num_runs_p  = num_runs;
    *num_wrs_p   = num_wrs;
    return UCS_OK;
}

/* Undo what an SGL call took before it posted. */
static void uct_dcx_ep_sgl_release(uct_dcx_iface_t *iface,
                                   uct_dcx_sgl_run_t *runs, size_t num_runs,
                                   uct_dcx_op_t **ops, size_t num_ops)
{
    size_t r;

    for (r = 0; r < num_runs; ++r) {
        if (runs[r].mkey != NULL) {
            uct_dcx_umr_put(iface->umr.engine, runs[r].mkey);
        }
    }
    while (num_ops-- > 0) {
        ucs_mpool_put_inline(ops[num_ops]);
    }
}

/* Post the runs' writes as one batch (num_wrs work requests); run_sn[r]:
 * the sequence number of run r's last write. */
static void uct_dcx_ep_sgl_post(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                                uct_dcx_dci_t *dci, const uct_dcx_peer_t *peer,
                                void * const *buffers, const size_t *lengths,
                                uct_mem_h const *memhs,
                                const uint64_t *remote_addrs,
                                uct_rkey_t const *rkeys, const size_t *counts,
                                const size_t *strides,
                                const uct_dcx_sgl_run_t *runs, size_t num_runs,
                                size_t num_wrs, int need_completion,
                                uint64_t *run_sn)
{
    struct ibv_qp_ex *qpx = dci->qpx;
    unsigned unsignaled   = dci->unsignaled;
    size_t r, i, b, blocks, stride, length, wr = 0;
    int signal;

    for (r = 0; r < num_runs; ++r) {
        for (i = runs[r].first; i < runs[r].first + runs[r].n; ++i) {
            blocks = runs[r].merged ? 1 :
                     uct_dcx_ep_sgl_blocks(iface, lengths, counts, strides,
                                           i);
            stride = (strides == NULL) ? 0 : strides[i];
            length = ((blocks == 1) && (counts != NULL)) ?
                     counts[i] * lengths[i] : lengths[i];
            for (b = 0; b < blocks; ++b, ++wr) {
                signal        = uct_dcx_ep_sgl_signal(iface, unsignaled, wr,
                                                      num_wrs,
                                                      need_completion);
                unsignaled    = signal ? 0 : unsignaled + 1;
                qpx->wr_id    = UCT_DCX_WR_ID(ep->dci, dci->posted + wr + 1);
                qpx->wr_flags = (signal ? IBV_SEND_SIGNALED : 0) |
                                (((wr == 0) && dci->fence) ?
                                 IBV_SEND_FENCE : 0);
                ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkeys[i]),
                                  remote_addrs[i] + (b * stride));
                if (runs[r].mkey != NULL) {
                    ibv_wr_set_sge(qpx, runs[r].mkey->mkey->lkey, 0,
                                   runs[r].total);
                } else if (runs[r].merged) {
                    ibv_wr_set_sge(qpx, uct_dcx_memh_lkey(memhs[i]),
                                   (uintptr_t)buffers[i], runs[r].total);
                } else {
                    ibv_wr_set_sge(qpx, uct_dcx_memh_lkey(memhs[i]),
                                   (uintptr_t)buffers[i] + (b * stride),
                                   length);
                }
                mlx5dv_wr_set_dc_addr(dci->mqpx, peer->ah, peer->dctn,
                                      peer->dc_key);
            }
            if (runs[r].merged) {
                break; /* the whole run was one write */
            }
        }
        run_sn[r] = dci->posted + wr; /* its last work request */
    }
    ucs_assert(wr == num_wrs);
}

/* The elements go out as one batch of RDMA WRITEs on the endpoint's DCI
 * (one doorbell); runs of elements whose remote ranges follow each other
 * in one registration become one write from a list mkey. Only the last
 * write asks for a completion, when an operation waits for it (and every
 * moderation-th on the way). */
ucs_status_t uct_dcx_ep_put_sgl_zcopy(uct_ep_h tl_ep, void * const *buffers,
                                      const size_t *lengths,
                                      uct_mem_h const *memhs,
                                      const uint64_t *remote_addrs,
                                      uct_rkey_t const *rkeys,
                                      const size_t *counts,
                                      const size_t *strides, size_t count,
                                      uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_sgl_run_t runs[UCT_DCX_SGL_MAX];
    uint64_t run_sn[UCT_DCX_SGL_MAX];
    uct_dcx_op_t *ops[UCT_DCX_SGL_MAX + 1];
    size_t r, num_runs, num_wrs, num_ops = 0;
    uct_dcx_peer_t *peer;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    int ret;

    status = uct_dcx_ep_sgl_check(iface, buffers, lengths, memhs,
                                  remote_addrs, rkeys, counts, strides, count,
                                  &num_wrs);
    if (status != UCS_OK) {
        return status;
    }
    if (num_wrs == 0) {
        return (ep->flags & UCT_DCX_EP_FLAG_FAILED) ? ep->status : UCS_OK;
    }
    if (ucs_unlikely(ep->flags & UCT_DCX_EP_FLAG_FAILED)) {
        return ep->status;
    }

    status = uct_dcx_ep_sgl_runs(iface, ep, buffers, lengths, memhs,
                                 remote_addrs, rkeys, counts, strides, count,
                                 runs, &num_runs, &num_wrs);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if ((status == UCS_OK) && (dci->available < num_wrs)) {
        /* The endpoint may send nothing more until the batch fits: a
         * pending request waits for that, not for one free slot. */
        dci->room = num_wrs;
        uct_dcx_ep_tx_abort(iface, ep);
        status = UCS_ERR_NO_RESOURCE;
    }
    if (ucs_unlikely(status != UCS_OK)) {
        uct_dcx_ep_sgl_release(iface, runs, num_runs, ops, 0);
        return status;
    }

    /* An operation per list mkey (released when its write completes), and
     * the user's completion after the last write. */
    for (r = 0; r <= num_runs; ++r) {
        if ((r < num_runs) ? (runs[r].mkey == NULL) : (comp == NULL)) {
            continue;
        }
        op = ucs_mpool_get_inline(&iface->tx.flush_mp);
        if (ucs_unlikely(op == NULL)) {
            uct_dcx_ep_tx_abort(iface, ep);
            uct_dcx_ep_sgl_release(iface, runs, num_runs, ops, num_ops);
            return UCS_ERR_NO_RESOURCE;
        }
        op->handler  = (r < num_runs) ? uct_dcx_op_umr_release :
                                        uct_dcx_op_comp_release;
        op->comp     = (r < num_runs) ? NULL : comp;
        op->ep       = ep;
        op->iface    = iface;
        op->dci      = ep->dci;
        op->umr.mkey = (r < num_runs) ? runs[r].mkey : NULL;
        op->sn       = r; /* the run, until it has its sequence number */
        ops[num_ops++] = op;
    }

    peer = uct_dcx_ep_peer(iface, ep);
    ibv_wr_start(dci->qpx);
    uct_dcx_ep_sgl_post(iface, ep, dci, peer, buffers, lengths, memhs,
                        remote_addrs, rkeys, counts, strides, runs, num_runs,
                        num_wrs, num_ops > 0, run_sn);
    ret = ibv_wr_complete(dci->qpx);
    if (ucs_unlikely(ret != 0)) {
        ucs_error("dcx: dci 0x%x: posting %zu scatter-gather writes failed: "
                  "%s", dci->qp->qp_num, num_wrs, strerror(ret));
        uct_dcx_ep_tx_abort(iface, ep);
        uct_dcx_ep_sgl_release(iface, runs, num_runs, ops, num_ops);
        return UCS_ERR_IO_ERROR;
    }

    /* The same signaling decisions again, now that the batch is posted. */
    dci->fence = 0;
    dci->room  = 1;
    for (r = 0; r < num_wrs; ++r) {
        uct_dcx_iface_dci_posted(iface, dci,
                                 uct_dcx_ep_sgl_signal(iface, dci->unsignaled,
                                                       r, num_wrs,
                                                       num_ops > 0));
    }
    for (r = 0; r < num_ops; ++r) {
        ops[r]->sn = (ops[r]->comp != NULL) ? dci->posted :
                     run_sn[ops[r]->sn];
        ucs_queue_push(&dci->outstanding, &ops[r]->queue);
        if (ops[r]->umr.mkey != NULL) {
            ++iface->umr.zcopy_ops;
        }
    }
    ucs_trace_data("dcx: ep %p: posted %zu writes for %zu scatter-gather "
                   "elements up to %" PRIu64 " on dci 0x%x to dct 0x%x", ep,
                   num_wrs, count, (uint64_t)dci->posted, dci->qp->qp_num,
                   peer->dctn);
    return UCS_INPROGRESS;
}

ucs_status_t uct_dcx_ep_get_bcopy(uct_ep_h tl_ep,
                                  uct_unpack_callback_t unpack_cb, void *arg,
                                  size_t length, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;

    UCT_CHECK_LENGTH(length, 0, iface->tx.seg_size, "get_bcopy");
    status = uct_dcx_ep_check_rkey(rkey, length);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp, uct_dcx_op_get_bcopy,
                           comp);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    op->get_bcopy.unpack_cb = unpack_cb;
    op->get_bcopy.arg       = arg;
    op->get_bcopy.length    = length;

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    ibv_wr_rdma_read(qpx, uct_dcx_rkey(rkey), remote_addr);
    ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, length);
    status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    return UCS_INPROGRESS;
}

/* --- atomics ----------------------------------------------------------- */

/* Post the op's native atomic: fetch-add or compare-swap. */
static ucs_status_t uct_dcx_ep_amo_post(uct_dcx_iface_t *iface,
                                        uct_dcx_ep_t *ep, uct_dcx_dci_t *dci,
                                        uct_dcx_op_t *op, int cswap,
                                        uint64_t swap)
{
    struct ibv_qp_ex *qpx;

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    if (cswap) {
        ibv_wr_atomic_cmp_swp(qpx, uct_dcx_rkey(op->amo.rkey),
                              op->amo.remote_addr, op->amo.compare, swap);
    } else {
        ibv_wr_atomic_fetch_add(qpx, uct_dcx_rkey(op->amo.rkey),
                                op->amo.remote_addr, op->amo.operand);
    }
    ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, sizeof(uint64_t));
    return uct_dcx_ep_wr_complete(iface, ep, dci, op);
}

static uint64_t uct_dcx_amo_apply(uct_atomic_op_t opcode, uint64_t value,
                                  uint64_t operand)
{
    switch (opcode) {
    case UCT_ATOMIC_OP_AND:
        return value & operand;
    case UCT_ATOMIC_OP_OR:
        return value | operand;
    case UCT_ATOMIC_OP_XOR:
        return value ^ operand;
    default: /* UCT_ATOMIC_OP_SWAP */
        return operand;
    }
}

/* Swap, and, or, xor: compare-swap until the word did not change between
 * reading and writing; atomic with respect to all device atomics. */
static void uct_dcx_op_amo_cas_loop(uct_dcx_op_t *op, ucs_status_t status)
{
    uct_dcx_iface_t *iface = op->iface;
    uint64_t old           = *(uint64_t*)op->buf;
    uct_dcx_dci_t *dci     = &iface->tx.dcis[op->dci];
    uct_dcx_ep_t *ep       = ucs_derived_of(op->amo.ep, uct_dcx_ep_t);

    if ((status == UCS_OK) && (old != op->amo.compare)) {
        if (ep == NULL) {
            status = UCS_ERR_CANCELED; /* the endpoint was destroyed */
        } else {
            /* The next try takes the send queue slot of the completion
             * being handled, before anybody else can. */
            ucs_assert(dci->slot_held);
            uct_dcx_iface_dci_slot_return(iface, dci);
            op->amo.compare = old;
            status = uct_dcx_ep_amo_post(iface, ep, dci, op, 1,
                                         uct_dcx_amo_apply(op->amo.opcode,
                                                           old,
                                                           op->amo.operand));
            if (status == UCS_OK) {
                /* The operation goes on: flushes issued after it wait for
                 * its new request. */
                uct_dcx_iface_flushes_to_tail(dci);
                return;
            }
        }
    }

    if ((status == UCS_OK) && (op->amo.result != NULL)) {
        *(uint64_t*)op->amo.result = old;
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static ucs_status_t
uct_dcx_ep_amo_masked(uct_ep_h tl_ep, unsigned size, uct_atomic_op_t opcode,
                      uint64_t value, uint64_t compare, void *result,
                      uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp);

static ucs_status_t
uct_dcx_ep_atomic64(uct_ep_h tl_ep, uct_atomic_op_t opcode, uint64_t value,
                    uint64_t compare, uint64_t *result, uint64_t remote_addr,
                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_op_handler_t handler;
    uint64_t swap = 0;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    int cswap;

    if (ucs_unlikely(!iface->config.atomics)) {
        return UCS_ERR_UNSUPPORTED; /* not advertised: UCP emulates them */
    }

    UCT_CHECK_PARAM(!(remote_addr & (sizeof(uint64_t) - 1)),
                    "unaligned 64-bit atomic address 0x%" PRIx64, remote_addr);
    status = uct_dcx_ep_check_rkey(rkey, sizeof(uint64_t));
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    switch (opcode) {
    case UCT_ATOMIC_OP_ADD:
        cswap   = 0;
        handler = (result == NULL) ? uct_dcx_op_release : uct_dcx_op_amo_fetch;
        break;
    case UCT_ATOMIC_OP_CSWAP:
        cswap   = 1;
        swap    = value;
        handler = uct_dcx_op_amo_fetch;
        break;
    case UCT_ATOMIC_OP_SWAP:
    case UCT_ATOMIC_OP_AND:
    case UCT_ATOMIC_OP_OR:
    case UCT_ATOMIC_OP_XOR:
        if (iface->config.ext_atomics64) {
            /* One masked atomic instead of a compare-swap loop. */
            return uct_dcx_ep_amo_masked(tl_ep, sizeof(uint64_t), opcode,
                                         value, 0, result, remote_addr, rkey,
                                         comp);
        }
        /* First guess: the word is 0 (one round trip when it is). */
        cswap   = 1;
        compare = 0;
        swap    = uct_dcx_amo_apply(opcode, 0, value);
        handler = uct_dcx_op_amo_cas_loop;
        break;
    default:
        ucs_error("dcx: unsupported atomic operation %d", opcode);
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp, handler, comp);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    op->amo.result      = result;
    op->amo.ep          = tl_ep;
    op->amo.remote_addr = remote_addr;
    op->amo.rkey        = rkey;
    op->amo.operand     = value;
    op->amo.compare     = compare;
    op->amo.opcode      = opcode;

    status = uct_dcx_ep_amo_post(iface, ep, dci, op, cswap, swap);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    return (result == NULL) ? UCS_OK : UCS_INPROGRESS;
}

ucs_status_t uct_dcx_ep_atomic64_post(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                      uint64_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey)
{
    if (opcode == UCT_ATOMIC_OP_SWAP) {
        return UCS_ERR_UNSUPPORTED; /* only as a fetching operation */
    }
    return uct_dcx_ep_atomic64(tl_ep, opcode, value, 0, NULL, remote_addr,
                               rkey, NULL);
}

ucs_status_t uct_dcx_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint64_t value, uint64_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp)
{
    return uct_dcx_ep_atomic64(tl_ep, opcode, value, 0, result, remote_addr,
                               rkey, comp);
}

ucs_status_t uct_dcx_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                       uint64_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint64_t *result,
                                       uct_completion_t *comp)
{
    return uct_dcx_ep_atomic64(tl_ep, UCT_ATOMIC_OP_CSWAP, swap, compare,
                               result, remote_addr, rkey, comp);
}

/* Masked (extended) atomics: 32-bit atomics, and the 64-bit ones that would
 * otherwise be compare-swap loops, go out as mlx5 masked atomics in raw WQEs
 * with the segments of mlx5dv.h: control, datagram (the extended DC address
 * vector, as mlx5dv_wr_set_dc_addr writes it), remote address, the masked
 * atomic segment and the data segment that receives the response.
 * Masked compare-swap: if ((old ^ compare) & compare_mask) == 0, then
 * new = (old & ~swap_mask) | (swap & swap_mask). Masked fetch-add: a set bit
 * in the field boundary stops the carry there. The segment: 4 bytes -
 * swap/add, compare/boundary, swap mask, compare mask (16 bytes); 8 bytes -
 * fetch-add: add, boundary (16 bytes); compare-swap: swap, compare, swap
 * mask, compare mask (32 bytes). All fields big-endian, and so is the
 * response, except an 8-byte one from a device answering 8-byte atomics in
 * host order (atomic_req_8B_endianness_mode). */
#define UCT_DCX_MLX5_OPMOD_EXT_ATOMIC(_size) (0x08 | (ucs_ilog2(_size) - 2))

typedef struct {
    struct mlx5_wqe_ctrl_seg     ctrl;
    struct mlx5_wqe_datagram_seg dgram;
    struct mlx5_wqe_raddr_seg    raddr;
    uint8_t                      atomic_data[32 + 16]; /* atomic, data */
} uct_dcx_amo_wqe_t;

_Static_assert(sizeof(uct_dcx_amo_wqe_t) == 8 * 16,
               "a masked atomic WQE is at most 8 units of 16 bytes");

static void uct_dcx_op_amo32_fetch(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        *(uint32_t*)op->amo.result = be32toh(*(uint32_t*)op->buf);
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static void uct_dcx_op_amo64_fetch_be(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        *(uint64_t*)op->amo.result = be64toh(*(uint64_t*)op->buf);
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static void uct_dcx_amo_put_be(uint8_t *p, unsigned size, uint64_t value)
{
    uint32_t v32;
    uint64_t v64;

    if (size == sizeof(uint32_t)) {
        v32 = htobe32((uint32_t)value);
        memcpy(p, &v32, sizeof(v32));
    } else {
        v64 = htobe64(value);
        memcpy(p, &v64, sizeof(v64));
    }
}

static ucs_status_t
uct_dcx_ep_amo_masked(uct_ep_h tl_ep, unsigned size, uct_atomic_op_t opcode,
                      uint64_t value, uint64_t compare, void *result,
                      uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uint64_t all           = (size == sizeof(uint32_t)) ? UINT32_MAX :
                                                          UINT64_MAX;
    uint64_t swap_mask = 0, compare_mask = 0, boundary = 0;
    struct mlx5_wqe_data_seg *data;
    uct_dcx_op_handler_t handler;
    unsigned atomic_size, ds;
    uct_dcx_amo_wqe_t wqe;
    uct_dcx_peer_t *peer;
    uct_dcx_dci_t *dci;
    ucs_status_t status;
    uct_dcx_op_t *op;
    uint8_t mlx5_op;
    uint8_t *seg;
    int signaled;

    switch (opcode) {
    case UCT_ATOMIC_OP_ADD:
        mlx5_op = MLX5_OPCODE_ATOMIC_MASKED_FA;
        break;
    case UCT_ATOMIC_OP_XOR: /* every bit its own field: add without carry */
        mlx5_op  = MLX5_OPCODE_ATOMIC_MASKED_FA;
        boundary = all;
        break;
    case UCT_ATOMIC_OP_AND: /* clear the bits that are clear in value */
        mlx5_op   = MLX5_OPCODE_ATOMIC_MASKED_CS;
        swap_mask = ~value & all;
        break;
    case UCT_ATOMIC_OP_OR:  /* set the bits that are set in value */
        mlx5_op   = MLX5_OPCODE_ATOMIC_MASKED_CS;
        swap_mask = value;
        break;
    case UCT_ATOMIC_OP_SWAP:
        mlx5_op   = MLX5_OPCODE_ATOMIC_MASKED_CS;
        swap_mask = all;
        break;
    case UCT_ATOMIC_OP_CSWAP:
        mlx5_op      = MLX5_OPCODE_ATOMIC_MASKED_CS;
        swap_mask    = all;
        compare_mask = all;
        break;
    default:
        ucs_error("dcx: unsupported atomic operation %d", opcode);
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_ep_tx_get(iface, ep, &dci);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (result == NULL) {
        handler = uct_dcx_op_release;
    } else if (size == sizeof(uint32_t)) {
        handler = uct_dcx_op_amo32_fetch;
    } else {
        handler = iface->config.ext_atomics64_be ? uct_dcx_op_amo64_fetch_be :
                                                   uct_dcx_op_amo_fetch;
    }
    op = uct_dcx_ep_op_get(iface, ep, &iface->tx.mp, handler, comp);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    op->amo.result = result;

    atomic_size = ((mlx5_op == MLX5_OPCODE_ATOMIC_MASKED_CS) &&
                   (size == sizeof(uint64_t))) ? 32 : 16;
    ds          = (sizeof(wqe.ctrl) + sizeof(wqe.dgram) + sizeof(wqe.raddr) +
                   atomic_size + sizeof(*data)) / 16;
    peer        = uct_dcx_ep_peer(iface, ep);
    signaled    = uct_dcx_iface_dci_signal(iface, dci, 1);
    memset(&wqe, 0, sizeof(wqe));
    /* The WQE index is filled in by mlx5dv_wr_raw_wqe. */
    wqe.ctrl.opmod_idx_opcode = htobe32(((uint32_t)UCT_DCX_MLX5_OPMOD_EXT_ATOMIC(size)
                                         << 24) | mlx5_op);
    wqe.ctrl.qpn_ds           = htobe32((dci->qp->qp_num << 8) | ds);
    wqe.ctrl.fm_ce_se         = (signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                                (dci->fence ? MLX5_WQE_CTRL_FENCE : 0);
    wqe.dgram.av.key.dc_key   = htobe64(peer->dc_key);
    wqe.dgram.av.dqp_dct      = htobe32(peer->dctn | MLX5_EXTENDED_UD_AV);
    wqe.dgram.av.stat_rate_sl = iface->config.sl & 0xf;
    wqe.dgram.av.rlid         = htobe16(peer->lid);
    wqe.raddr.raddr           = htobe64(remote_addr);
    wqe.raddr.rkey            = htobe32(uct_dcx_rkey(rkey));

    seg = wqe.atomic_data;
    uct_dcx_amo_put_be(seg, size, value);
    seg += size;
    uct_dcx_amo_put_be(seg, size, (mlx5_op == MLX5_OPCODE_ATOMIC_MASKED_FA) ?
                                  boundary : compare);
    seg += size;
    if (mlx5_op == MLX5_OPCODE_ATOMIC_MASKED_CS) {
        uct_dcx_amo_put_be(seg, size, swap_mask);
        uct_dcx_amo_put_be(seg + size, size, compare_mask);
    }
    data             = (struct mlx5_wqe_data_seg*)(wqe.atomic_data + atomic_size);
    data->byte_count = htobe32(size);
    data->lkey       = htobe32(op->lkey);
    data->addr       = htobe64((uintptr_t)op->buf);

    ibv_wr_start(dci->qpx);
    dci->qpx->wr_id = UCT_DCX_WR_ID(ep->dci, dci->posted + 1);
    mlx5dv_wr_raw_wqe(dci->mqpx, &wqe);
    status = uct_dcx_ep_wr_submit(iface, ep, dci, op, signaled);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(op);
        return status;
    }
    return (result == NULL) ? UCS_OK : UCS_INPROGRESS;
}

static ucs_status_t
uct_dcx_ep_atomic32(uct_ep_h tl_ep, uct_atomic_op_t opcode, uint32_t value,
                    uint32_t compare, uint32_t *result, uint64_t remote_addr,
                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    ucs_status_t status;

    if (ucs_unlikely(!iface->config.ext_atomics32)) {
        return UCS_ERR_UNSUPPORTED; /* not advertised: UCP emulates them */
    }

    UCT_CHECK_PARAM(!(remote_addr & (sizeof(uint32_t) - 1)),
                    "unaligned 32-bit atomic address 0x%" PRIx64, remote_addr);
    status = uct_dcx_ep_check_rkey(rkey, sizeof(uint32_t));
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    return uct_dcx_ep_amo_masked(tl_ep, sizeof(uint32_t), opcode, value,
                                 compare, result, remote_addr, rkey, comp);
}

ucs_status_t uct_dcx_ep_atomic32_post(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                      uint32_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey)
{
    if ((opcode == UCT_ATOMIC_OP_SWAP) || (opcode == UCT_ATOMIC_OP_CSWAP)) {
        return UCS_ERR_UNSUPPORTED; /* only as fetching operations */
    }
    return uct_dcx_ep_atomic32(tl_ep, opcode, value, 0, NULL, remote_addr,
                               rkey, NULL);
}

ucs_status_t uct_dcx_ep_atomic32_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint32_t value, uint32_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp)
{
    if (opcode == UCT_ATOMIC_OP_CSWAP) {
        return UCS_ERR_UNSUPPORTED; /* uct_ep_atomic_cswap32 */
    }
    return uct_dcx_ep_atomic32(tl_ep, opcode, value, 0, result, remote_addr,
                               rkey, comp);
}

ucs_status_t uct_dcx_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare,
                                       uint32_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint32_t *result,
                                       uct_completion_t *comp)
{
    return uct_dcx_ep_atomic32(tl_ep, UCT_ATOMIC_OP_CSWAP, swap, compare,
                               result, remote_addr, rkey, comp);
}

/* --- flush, fence, pending --------------------------------------------- */

static void uct_dcx_ep_cancel(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
    uct_dcx_dci_t *dci      = &iface->tx.dcis[ep->dci];
    int ret;

    /* In ERR every outstanding work request completes as flushed; the DCI
     * is recovered when it has drained. */
    ret = iface->ops->modify_qp(dci->qp, &attr, IBV_QP_STATE);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x: cannot move to error for cancel: %s",
                  dci->qp->qp_num, strerror(ret));
        return;
    }
    dci->error = 1;
}

/* Whether requests queued before a flush are still waiting to be sent: the
 * flush must queue behind them. A flush dispatched from the queue itself
 * has nothing ahead of it. */
static int uct_dcx_ep_has_pending_ahead(uct_dcx_iface_t *iface,
                                        uct_dcx_ep_t *ep)
{
    return !ucs_arbiter_group_is_empty(&ep->arb_group) &&
           (iface->tx.dispatching != ep);
}

ucs_status_t uct_dcx_ep_flush(uct_ep_h tl_ep, unsigned flags,
                              uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_dci_t *dci;
    uct_dcx_op_t *op;

    if (!(flags & UCT_FLUSH_FLAG_CANCEL) &&
        uct_dcx_ep_has_pending_ahead(iface, ep)) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (ep->dci == UCT_DCX_EP_NO_DCI) {
        return (ep->flags & UCT_DCX_EP_FLAG_FAILED) ? ep->status : UCS_OK;
    }

    dci = &iface->tx.dcis[ep->dci];
    if (dci->posted == dci->completed) {
        /* A shared DCI (rand) with nothing outstanding. */
        return (ep->flags & UCT_DCX_EP_FLAG_FAILED) ? ep->status : UCS_OK;
    }

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        if (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) {
            /* A shared DCI is not the endpoint's to stop: its operations
             * complete as cancelled now, their work requests run on. */
            uct_dcx_ep_cancel_ops(iface, ep);
        } else if (!dci->error) {
            uct_dcx_ep_cancel(iface, ep);
        }
    }

    /* The flush ends with the DCI's last request: it must ask for a
     * completion. Also after a cancel: requests that ran unsignaled before
     * the DCI went to error are done and get no flush CQE; only a later
     * (flushed) signaled request retires them. */
    if (uct_dcx_iface_dci_request_completion(iface, ep->dci) != UCS_OK) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (comp == NULL) {
        return UCS_INPROGRESS;
    }

    op = ucs_mpool_get_inline(&iface->tx.flush_mp);
    if (op == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    op->handler = uct_dcx_op_flush_done;
    op->comp    = comp;
    op->ep      = ep;
    op->iface   = iface;
    op->dci     = ep->dci;
    op->sn      = dci->posted;
    ucs_queue_push(&dci->outstanding, &op->queue);
    return UCS_INPROGRESS;
}

/* Keepalive: a zero-length RDMA write (no remote key is checked) reaches
 * the peer's DCT or fails the endpoint through the usual error path. An
 * endpoint with work outstanding learns of a dead peer from that work. */
ucs_status_t uct_dcx_ep_check(uct_ep_h tl_ep, unsigned flags,
                              uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    uct_dcx_dci_t *dci;
    ucs_status_t status;

    /* A failure is reported through the interface's error handler, never
     * through a completion (UCX's own transports do the same). */
    UCT_CHECK_PARAM(flags == 0, "Unsupported flags: %x", flags);
    UCT_CHECK_PARAM(comp == NULL, "Unsupported completion on ep_check");

    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return UCS_OK; /* already reported */
    }
    /* Work outstanding whose last request asked for a completion tells
     * of a dead peer by itself; an unsignaled tail might not, for long. */
    if ((ep->dci != UCT_DCX_EP_NO_DCI) &&
        (iface->tx.dcis[ep->dci].posted != iface->tx.dcis[ep->dci].completed) &&
        (iface->tx.dcis[ep->dci].unsignaled == 0)) {
        return UCS_OK;
    }

    status = uct_dcx_ep_ctrl_dci_get(iface, ep, &dci);
    if (status != UCS_OK) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    ibv_wr_rdma_write(qpx, 0, 0);
    ibv_wr_set_inline_data(qpx, NULL, 0);
    return uct_dcx_ep_wr_complete(iface, ep, dci, NULL);
}

ucs_status_t uct_dcx_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);

    /* Without a DCI nothing is outstanding, so nothing to order against. */
    if (ep->dci != UCT_DCX_EP_NO_DCI) {
        iface->tx.dcis[ep->dci].fence = 1;
    }
    return UCS_OK;
}

static int uct_dcx_ep_can_send(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    if (ep->flags & UCT_DCX_EP_FLAG_FAILED) {
        return 1; /* the operation fails at once instead of waiting */
    }
    if (ep->fc_wnd <= 0) {
        return 0; /* resumed by the grant */
    }
    if ((ep->flags & UCT_DCX_EP_FLAG_WAIT_UMR) &&
        (ep->umr_gen == iface->umr.gen)) {
        return 0; /* resumed when a layout or an mkey is ready */
    }
    return (ep->dci == UCT_DCX_EP_NO_DCI) ?
           uct_dcx_ep_may_take_dci(iface, ep) :
           uct_dcx_ep_dci_has_room(iface, ep, &iface->tx.dcis[ep->dci]);
}

ucs_status_t uct_dcx_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                    unsigned flags)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);

    if (uct_dcx_ep_can_send(iface, ep)) {
        return UCS_ERR_BUSY;
    }

    if ((ep->dci == UCT_DCX_EP_NO_DCI) &&
        !(ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI)) {
        uct_dcx_iface_waiter_add(iface, ep);
    }

    uct_pending_req_arb_group_push(&ep->arb_group, req);
    ucs_arbiter_group_schedule(&iface->tx.arbiter, &ep->arb_group);
    return UCS_OK;
}

ucs_arbiter_cb_result_t uct_dcx_ep_pending_dispatch(ucs_arbiter_t *arbiter,
                                                    ucs_arbiter_group_t *group,
                                                    ucs_arbiter_elem_t *elem,
                                                    void *arg)
{
    uct_dcx_ep_t *ep       = ucs_container_of(group, uct_dcx_ep_t, arb_group);
    uct_dcx_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                            uct_dcx_iface_t);
    uct_pending_req_t *req = ucs_container_of(elem, uct_pending_req_t, priv);
    ucs_status_t status;

    /* Waiting groups go to the end of this dispatch round (RESCHED), so
     * the round ends when nobody can make progress. */
    if (!uct_dcx_ep_can_send(iface, ep)) {
        return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;
    }

    iface->tx.dispatching = ep;
    status                = req->func(req);
    iface->tx.dispatching = NULL;
    if (status == UCS_OK) {
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }
    return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;
}
