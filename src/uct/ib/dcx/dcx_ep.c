/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx endpoints: connect-to-iface, failure, flush, keepalive, fence and
 * pending requests. The data operations are in dcx_ep_*.c (dcx_ep.h lists
 * them); every one goes out as ibv_wr_* / mlx5dv_wr_set_dc_addr work
 * requests on a DCI borrowed from the pool, through the send prologue of
 * dcx_ep.inl.
 */
#include "dcx_ep.inl"


/* --- resources -------------------------------------------------------- */

/* A shared DCI (rand policy) failed since the endpoint last used it. */
void uct_dcx_ep_check_shared_dci(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[ep->dci];

    if (ep->dci_generation != dci->generation) {
        uct_dcx_ep_handle_failure(ep, dci->last_error);
    }
}

/* Undo uct_dcx_ep_tx_get() when nothing was posted after all. */
void uct_dcx_ep_tx_abort(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[ep->dci];

    if (!uct_dcx_iface_dci_index_shared(iface, ep->dci) &&
        (dci->posted == dci->completed)) {
        uct_dcx_iface_dci_put(iface, ep);
    }
}

/* dcs_hybrid: the pool has no DCI for the endpoint, which moves to the next
 * stream of the stream DCI instead of waiting, and stays there, as under
 * hw_dcs (its work there completes in no order known per endpoint).
 * UCS_ERR_NO_RESOURCE without a stream DCI: the endpoint waits. */
ucs_status_t uct_dcx_ep_stream_join(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    uct_dcx_dci_t *dci;

    if (iface->tx.stream_dci == UCT_DCX_NO_STREAM_DCI) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (ucs_unlikely(iface->tx.fatal != UCS_OK)) {
        uct_dcx_ep_handle_failure(ep, iface->tx.fatal);
        return iface->tx.fatal;
    }

    if (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI) {
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_DCI;
        uct_dcx_dci_pool_waiter_remove(&iface->tx.pool);
    }
    dci                = &iface->tx.dcis[iface->tx.stream_dci];
    ep->dci            = iface->tx.stream_dci;
    ep->dci_generation = dci->generation;
    ep->stream         = iface->tx.next_stream++ & (iface->tx.num_streams - 1);
    ucs_debug("dcx: ep %p: pool empty, on stream %u of dci 0x%x", ep,
              ep->stream, dci->qp->qp_num);
    return UCS_OK;
}

/* --- operation completions -------------------------------------------- */

void uct_dcx_op_release(uct_dcx_op_t *op, ucs_status_t status)
{
    ucs_mpool_put_inline(op);
}

void uct_dcx_op_comp_release(uct_dcx_op_t *op, ucs_status_t status)
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

/* An operation that held an mkey (strided zero-copy, SGL runs). */
void uct_dcx_op_umr_release(uct_dcx_op_t *op, ucs_status_t status)
{
    uct_dcx_iface_t *iface = op->iface;

    uct_dcx_umr_put(iface->umr.engine, op->umr.mkey);
    ++iface->umr.gen; /* an mkey may be free for a waiting endpoint */
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

/* --- endpoint ----------------------------------------------------------- */

static UCS_CLASS_INIT_FUNC(uct_dcx_ep_t, const uct_ep_params_t *params)
{
    uct_dcx_iface_t *iface = ucs_derived_of(params->iface, uct_dcx_iface_t);
    const uct_dcx_iface_addr_t *iface_addr;
    const uct_dcx_dev_addr_t *dev_addr;
    const union ibv_gid *dgid;
    uct_dcx_peer_t *peer;
    struct ibv_ah *ah;
    ucs_status_t status;
    char reason[128];
    uint32_t dctn;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    if (!(params->field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR) ||
        !(params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR)) {
        ucs_error("dcx: endpoints connect to an interface: "
                  "device and interface addresses are required");
        return UCS_ERR_INVALID_PARAM;
    }

    dev_addr   = (const uct_dcx_dev_addr_t *)params->dev_addr;
    iface_addr = (const uct_dcx_iface_addr_t *)params->iface_addr;
    if (!uct_dcx_iface_addr_is_reachable(&iface->super.super, params->dev_addr,
                                         params->iface_addr, reason,
                                         sizeof(reason))) {
        ucs_error("%s: malformed or unreachable peer address", reason);
        return UCS_ERR_UNREACHABLE;
    }

    dgid   = uct_dcx_iface_peer_dgid(iface, dev_addr->flags, dev_addr + 1);
    status = uct_dcx_iface_ah_get(iface, dev_addr->lid, dgid, &ah);
    if (status != UCS_OK) {
        return status;
    }

    dctn = iface_addr->dctn[0] | ((uint32_t)iface_addr->dctn[1] << 8) |
           ((uint32_t)iface_addr->dctn[2] << 16);
    status = uct_dcx_iface_peer_get(iface, ah, dctn, iface_addr->dc_key, &peer);
    if (status != UCS_OK) {
        return status;
    }
    self->peer_index  = peer->index;
    peer->lid         = dev_addr->lid;
    peer->is_global   = (dgid != NULL);
    peer->ext_atomics = !!(iface_addr->flags &
                           UCT_DCX_IFACE_ADDR_FLAG_EXT_ATOMICS);
    if (dgid != NULL) {
        memcpy(&peer->gid, dgid, sizeof(peer->gid));
    }

    self->dci    = UCT_DCX_EP_NO_DCI;
    self->flags  = 0;
    self->status = UCS_OK;
    if (ucs_unlikely(iface->tx.fatal != UCS_OK)) {
        /* On a failed device: every operation fails at once. */
        self->flags  = UCT_DCX_EP_FLAG_FAILED;
        self->status = iface->tx.fatal;
    }
    if (uct_dcx_iface_dci_shared(iface)) {
        self->dci = rand_r(&iface->tx.rand_seed) % iface->tx.pool.size;
        self->dci_generation = iface->tx.dcis[self->dci].generation;
    }
    /* hw_dcs: the streams in turn (a power of two of them; 1 elsewhere);
     * dcs_hybrid: stream 0 of a pool DCI, until it joins the stream DCI */
    self->stream = uct_dcx_iface_dci_shared(iface) ?
                           (iface->tx.next_stream++ &
                            (iface->tx.num_streams - 1)) :
                           0;
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
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    const uct_dcx_dev_addr_t *daddr  = (const uct_dcx_dev_addr_t *)dev_addr;
    const uct_dcx_iface_addr_t *addr = (const uct_dcx_iface_addr_t *)iface_addr;
    const uct_dcx_peer_t *peer;
    struct ibv_ah *ah;

    if (!uct_dcx_iface_addr_is_reachable(tl_ep->iface, dev_addr, iface_addr,
                                         NULL, 0) ||
        (uct_dcx_iface_ah_get(iface, daddr->lid,
                              uct_dcx_iface_peer_dgid(iface, daddr->flags,
                                                      daddr + 1),
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
    uct_pending_req_t *req    = ucs_container_of(elem, uct_pending_req_t, priv);

    if (args->cb != NULL) {
        args->cb(req, args->arg);
    }
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void uct_dcx_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                              void *arg)
{
    uct_dcx_ep_t *ep         = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_iface_t *iface   = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_purge_cb_args_t args = { cb, arg };

    ucs_arbiter_group_purge(&iface->tx.arbiter, &ep->arb_group,
                            uct_dcx_ep_pending_purge_cb, &args);
    if (ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI) {
        ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_DCI;
        uct_dcx_dci_pool_waiter_remove(&iface->tx.pool);
    }
}


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
        uct_dcx_dci_pool_waiter_remove(&iface->tx.pool);
    }

    if (self->dci != UCT_DCX_EP_NO_DCI) {
        uct_dcx_ep_cancel_ops(iface, self);
    }

    /* Outstanding work requests complete without the endpoint (their
     * operations were cancelled above); the DCI returns to the pool when it
     * drains. Shared DCIs (rand) are not owned. */
    if ((self->dci != UCT_DCX_EP_NO_DCI) &&
        !uct_dcx_iface_dci_index_shared(iface, self->dci)) {
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

    ep->flags |= UCT_DCX_EP_FLAG_FAILED;
    ep->status = status;
    uct_dcx_ep_fc_wait_remove(iface, ep);
    err_status = uct_iface_handle_ep_err(&iface->super.super, &ep->super.super,
                                         status);
    if (err_status != UCS_OK) {
        ucs_log(iface->super.config.failure_level,
                "dcx: ep %p to dct 0x%x failed: %s", ep,
                uct_dcx_ep_peer(iface, ep)->dctn, ucs_status_string(status));
    }
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
static int
uct_dcx_ep_has_pending_ahead(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    return !ucs_arbiter_group_is_empty(&ep->arb_group) &&
           (iface->tx.dispatching != ep);
}

ucs_status_t
uct_dcx_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
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
        if (uct_dcx_iface_dci_index_shared(iface, ep->dci)) {
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

    uct_dcx_op_init(op, iface, ep, uct_dcx_op_flush_done, comp);
    op->sn = dci->posted;
    ucs_queue_push(&dci->outstanding, &op->queue);
    return UCS_INPROGRESS;
}

/* Keepalive: a zero-length RDMA write (no remote key is checked) reaches
 * the peer's DCT or fails the endpoint through the usual error path. An
 * endpoint with work outstanding learns of a dead peer from that work. */
ucs_status_t
uct_dcx_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    struct ibv_qp_ex *qpx;
    uct_dcx_ep_tx_t tx;
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

    status = uct_dcx_ep_tx_begin(iface, ep, UCT_DCX_EP_TX_CTRL, NULL, NULL,
                                 NULL, &tx);
    if (status != UCS_OK) {
        return status;
    }

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 1);
    ibv_wr_rdma_write(qpx, 0, 0);
    ibv_wr_set_inline_data(qpx, NULL, 0);
    return uct_dcx_ep_tx_post(iface, ep, UCT_DCX_EP_TX_CTRL, &tx);
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
                   (uct_dcx_ep_dci_has_room(iface, ep,
                                            &iface->tx.dcis[ep->dci]) &&
                    !uct_dcx_ep_ddp_fence_wait(iface,
                                               &iface->tx.dcis[ep->dci]));
}

ucs_status_t
uct_dcx_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags)
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

ucs_arbiter_cb_result_t
uct_dcx_ep_pending_dispatch(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                            ucs_arbiter_elem_t *elem, void *arg)
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
