/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The DCI pool: endpoints take a DCI while they have work outstanding and
 * return it when everything completed (see the diagram in dcx_iface.h),
 * as the policy chosen for the interface says (dcx_dci_policy.c); send
 * completions, which retire work requests, run the operations'
 * callbacks and bring DCIs back; the device's failure; flush and fence
 * of the whole interface.
 */
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>

#include <string.h>


/* --- send completions ------------------------------------------------- */

static ucs_status_t uct_dcx_wc_to_status(enum ibv_wc_status wc_status)
{
    switch (wc_status) {
    case IBV_WC_SUCCESS:
        return UCS_OK;
    case IBV_WC_WR_FLUSH_ERR:
        return UCS_ERR_CANCELED;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return UCS_ERR_ENDPOINT_TIMEOUT;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
        return UCS_ERR_CONNECTION_RESET;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

/* Move a DCI that had an error back to RTS once it has drained. */
void uct_dcx_iface_dci_recover(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RESET };
    int ret;

    if (iface->tx.fatal != UCS_OK) {
        return; /* a failed device takes no command: never used again */
    }

    ret = iface->ops->modify_qp(dci->qp, &attr, IBV_QP_STATE);
    if ((ret == 0) && (dci->direct != NULL)) {
        uct_dcx_direct_sq_reset(dci->direct); /* as the device's indices */
    }
    if ((ret != 0) || (uct_dcx_iface_dci_connect(iface, dci) != UCS_OK)) {
        ucs_error("dcx: cannot recover dci 0x%x: %s", dci->qp->qp_num,
                  strerror(ret));
        return; /* stays in error: its work requests keep failing */
    }
    dci->error = 0;
}

/* Return an idle DCI to the pool, recovering it first after an error. */
void uct_dcx_iface_dci_release(uct_dcx_iface_t *iface, uint16_t dci_index)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[dci_index];

    ucs_assert(dci->posted == dci->completed);
    if (dci->error) {
        uct_dcx_iface_dci_recover(iface, dci);
    }
    if (dci->grant) {
        dci->grant = 0;
        uct_dcx_dci_pool_grant_remove(&iface->tx.pool);
    }
    dci->ep    = NULL;
    dci->fence = 0;
    dci->room  = 1;
    uct_dcx_dci_pool_give_back(&iface->tx.pool, dci_index);
}

/* The top of the free stack was never created (see uct_dcx_iface_dci_take):
 * every created DCI is taken. When the device has no QP left the pool
 * stops growing at the DCIs it has (endpoints wait for one of them)
 * instead of failing operations. */
ucs_status_t uct_dcx_iface_dci_create_next(uct_dcx_iface_t *iface)
{
    uct_dcx_dci_pool_t *pool = &iface->tx.pool;
    uint16_t index           = pool->num_created;
    ucs_status_t status;

    ucs_assert(uct_dcx_dci_pool_top_missing(pool));
    status = uct_dcx_iface_dci_create(iface, &iface->tx.dcis[index]);
    if (status != UCS_OK) {
        ucs_diag("dcx: %s: cannot create dci %u (%s): the pool keeps %u dcis",
                 iface->md->device->name, index, ucs_status_string(status),
                 pool->num_created);
        uct_dcx_dci_pool_stop_growing(pool);
        return UCS_ERR_NO_RESOURCE;
    }

    uct_dcx_dci_pool_created(pool);
    return UCS_OK;
}

void uct_dcx_iface_dci_put(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    /* From a callback of the DCI's own completion (the endpoint destroyed,
     * or nothing posted after all): the completion returns the DCI once
     * its callbacks are done, and only once. */
    if (iface->tx.dcis[ep->dci].completing) {
        return;
    }

    uct_dcx_iface_dci_release(iface, ep->dci);
    ep->dci = UCT_DCX_EP_NO_DCI;
    ep->flags &= ~UCT_DCX_EP_FLAG_TX_WAIT;

    /* Work still pending: from now on it waits for a DCI like the others. */
    if (!ucs_arbiter_group_is_empty(&ep->arb_group) &&
        !(ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI)) {
        uct_dcx_iface_waiter_add(iface, ep);
    }
}

/* Ask for a completion of everything the DCI has posted: a signaled
 * zero-length RDMA write to the interface's own DCT, which is always there
 * (a dead peer would hold it for the whole transport timeout). A send queue
 * completes in order, so its CQE retires the unsignaled requests before it;
 * after an error it is flushed like them. */
ucs_status_t
uct_dcx_iface_dci_request_completion(uct_dcx_iface_t *iface, uint16_t dci_index)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[dci_index];
    ucs_status_t status;
    int ret;

    if (dci->unsignaled == 0) {
        return UCS_OK; /* the last request asked for one already */
    }
    if (dci->available == 0) {
        return UCS_ERR_NO_RESOURCE; /* a signaled request frees a slot */
    }

    if (iface->tx.self_ah == NULL) {
        status = uct_dcx_iface_ah_get(iface, iface->port_attr.lid,
                                      iface->is_global ? &iface->gid : NULL,
                                      &iface->tx.self_ah);
        if (status != UCS_OK) {
            return status;
        }
    }

    ibv_wr_start(dci->qpx);
    dci->qpx->wr_id    = UCT_DCX_WR_ID(dci_index, dci->posted + 1);
    dci->qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(dci->qpx, 0, 0);
    ibv_wr_set_inline_data(dci->qpx, NULL, 0);
    mlx5dv_wr_set_dc_addr(dci->mqpx, iface->tx.self_ah, iface->rx.dctn,
                          iface->rx.dc_key);
    ret = ibv_wr_complete(dci->qpx);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x: posting a completion request failed: %s",
                  dci->qp->qp_num, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    uct_dcx_iface_dci_posted(iface, dci, 1);
    ++iface->tx.stats.completion_requests;
    ucs_trace_data("dcx: dci 0x%x: completion request %" PRIu64,
                   dci->qp->qp_num, (uint64_t)dci->posted);
    return UCS_OK;
}

/* Every DCI with an unsignaled tail: the pool or a flush waits for them. */
void uct_dcx_iface_dcis_request_completions(uct_dcx_iface_t *iface)
{
    uint16_t i;

    UCT_DCX_IFACE_FOREACH_DCI(iface, i)
    {
        if (iface->tx.dcis[i].unsignaled > 0) {
            (void)uct_dcx_iface_dci_request_completion(iface, i);
        }
    }
}

/* An endpoint starts waiting for a DCI: from now on every request asks for
 * a completion (uct_dcx_iface_dci_signal), and the tails already posted are
 * asked for one, so the DCIs holding them drain and come back. */
void uct_dcx_iface_waiter_add(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    ucs_assert(!(ep->flags & UCT_DCX_EP_FLAG_WAIT_DCI));
    ep->flags |= UCT_DCX_EP_FLAG_WAIT_DCI;
    if (uct_dcx_dci_pool_waiter_add(&iface->tx.pool)) {
        uct_dcx_iface_dcis_request_completions(iface);
    }
}

/* Call the user completions still in @a dci's ring with UCS_ERR_CANCELED:
 * those of @a ep, or every one (@a ep NULL). Their requests run on or were
 * discarded; when they complete, nothing is called again. */
void uct_dcx_iface_dci_cancel_comps(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                                    uct_dcx_ep_t *ep)
{
    uct_dcx_comp_slot_t *slot;
    uct_completion_t *comp;
    uint64_t sn;

    for (sn = dci->completed + 1; sn <= dci->posted; ++sn) {
        slot = &dci->comps[sn & iface->tx.comp_mask];
        if ((slot->comp == NULL) || ((ep != NULL) && (slot->ep != ep))) {
            continue;
        }
        comp       = slot->comp;
        slot->comp = NULL;
        uct_invoke_completion(comp, UCS_ERR_CANCELED);
    }
}

/* An operation went on with a new work request (a compare-swap loop that
 * has to try again): flushes issued after it must wait for that request,
 * so they move behind it. Only that: work a completion callback posts is
 * new work, which flushes issued before it do not wait for (they would
 * wait for a request that may ask for no completion). */
void uct_dcx_iface_flushes_to_tail(uct_dcx_dci_t *dci)
{
    ucs_queue_head_t flushes;
    uct_dcx_op_t *op;

    ucs_queue_head_init(&flushes);
    ucs_queue_for_each_extract(op, &dci->outstanding, queue,
                               op->handler == uct_dcx_op_flush_done) {
        op->sn = dci->posted;
        ucs_queue_push(&flushes, &op->queue);
    }
    ucs_queue_splice(&dci->outstanding, &flushes);
}

/* A DCI whose endpoint was destroyed while it had work outstanding (dcs
 * policies; shared DCIs have no holder). */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_orphan(const uct_dcx_iface_t *iface, const uct_dcx_dci_t *dci)
{
    return (dci->ep == NULL) && !dci->shared;
}

/* An unsignaled tail that someone waits for: endpoints waiting for a DCI,
 * or (dcs) the pool for the DCI of a destroyed endpoint. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_tail_awaited(const uct_dcx_iface_t *iface,
                               const uct_dcx_dci_t *dci)
{
    return ucs_unlikely(dci->unsignaled > 0) &&
           (uct_dcx_dci_pool_has_waiters(&iface->tx.pool) ||
            uct_dcx_iface_dci_orphan(iface, dci));
}

/* A CQE of request @a sn retires it and the unsignaled ones before it: their
 * slots go back now, except the CQE's own when @a hold (slot_held, returned
 * after the callbacks). */
static UCS_F_ALWAYS_INLINE void uct_dcx_iface_dci_retire(uct_dcx_iface_t *iface,
                                                         uct_dcx_dci_t *dci,
                                                         uint64_t sn, int hold)
{
    uint64_t retired = sn - dci->completed;

    dci->completed = sn;
    dci->available += retired - hold;
    iface->tx.cq_available += retired - hold;
    dci->slot_held = hold;
    if (dci->unsignaled > dci->posted - sn) {
        dci->unsignaled = dci->posted - sn;
    }
}

/* One completion callback: an operation's handler, or (@a op NULL) a user
 * completion from the ring. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_iface_tx_callback(uct_dcx_dci_t *dci, uct_dcx_op_t *op,
                          uct_completion_t *comp, ucs_status_t status)
{
    dci->completing = 1;
    if (op != NULL) {
        op->handler(op, status);
    } else {
        uct_invoke_completion(comp, status);
    }
    dci->completing = 0;
}

/* Run the operations of @a dci done once it completed @a sn requests;
 * returns whether any ran (their buffers went back to the pool). */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_ops_done(uct_dcx_dci_t *dci, uint64_t sn, ucs_status_t status)
{
    int done = 0;
    uct_dcx_op_t *op;

    while (!ucs_queue_is_empty(&dci->outstanding)) {
        op = ucs_queue_head_elem_non_empty(&dci->outstanding, uct_dcx_op_t,
                                           queue);
        if (op->sn > sn) {
            break;
        }
        ucs_queue_pull_non_empty(&dci->outstanding);
        uct_dcx_iface_tx_callback(dci, op, NULL, status);
        done = 1;
    }
    return done;
}

/* The callbacks of what @a dci completed up to request @a sn, in order:
 * the operations before that request, its user completion (from the
 * ring), then flushes that waited for it. Returns whether any ran. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_tx_callbacks(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                           uint64_t sn, ucs_status_t status)
{
    uct_dcx_comp_slot_t *slot = &dci->comps[sn & iface->tx.comp_mask];
    uct_completion_t *comp    = slot->comp;
    int done                  = 0;

    if (comp != NULL) {
        slot->comp = NULL;
        uct_dcx_iface_ops_done(dci, sn - 1, status);
        uct_dcx_iface_tx_callback(dci, NULL, comp, status);
        done = 1;
    }
    return uct_dcx_iface_ops_done(dci, sn, status) | done;
}

/* One send completion, in the order of UCX's rc and dc transports: first
 * the callbacks of the operations it finishes, then its send queue slot
 * (and the DCI, once drained) goes back, then pending requests are
 * dispatched, before the next completion's callbacks. So a send from a
 * completion callback cannot take the resources that pending requests
 * queued before it are waiting for, and overtake them. */
static UCS_F_NOINLINE void
uct_dcx_iface_tx_completion(uct_dcx_iface_t *iface, const uct_dcx_wc_t *wc)
{
    uint16_t dci_index = UCT_DCX_WR_ID_DCI(wc->wr_id);
    uint64_t sn        = UCT_DCX_WR_ID_SN(wc->wr_id);
    uct_dcx_dci_t *dci = &iface->tx.dcis[dci_index];
    int dispatch       = 0;
    ucs_status_t status, op_status;

    ucs_assertv((sn > dci->completed) && (sn <= dci->posted),
                "dci %u: sn %" PRIu64 " completed %" PRIu64 " posted %" PRIu64,
                dci_index, sn, (uint64_t)dci->completed, (uint64_t)dci->posted);
    uct_dcx_iface_dci_retire(iface, dci, sn, 1);
    status = uct_dcx_wc_to_status(wc->status);

    if (ucs_unlikely(status != UCS_OK)) {
        if (!dci->error) {
            iface->tx.dci_policy->dci_error(iface, dci, status);
        }
        if (!dci->error && (status != UCS_ERR_CANCELED)) {
            /* Like UCX's IB transports: an endpoint's error completion is
             * reported at UCX_DCX_FAILURE (diag by default). */
            ucs_log(uct_dcx_iface_dci_orphan(iface, dci) ?
                            UCS_LOG_LEVEL_DEBUG :
                            iface->super.config.failure_level,
                    "dcx: dci 0x%x: %s (vendor error 0x%x)", dci->qp->qp_num,
                    iface->ops->wc_status_str(wc->status), wc->vendor_err);
        }
        dci->error = 1;
        /* Flushed work requests (UCS_ERR_CANCELED) follow an error already
         * reported, or a flush with UCT_FLUSH_FLAG_CANCEL: no new failure. */
        if ((dci->ep != NULL) && (status != UCS_ERR_CANCELED)) {
            uct_dcx_ep_handle_failure(dci->ep, status);
        }
    }

    op_status = dci->error ? ((status == UCS_OK) ? UCS_ERR_CANCELED : status) :
                             UCS_OK;
    dispatch  = uct_dcx_iface_tx_callbacks(iface, dci, sn, op_status);

    /* The slot, unless a compare-swap loop took it for its next try. */
    if (dci->slot_held) {
        uct_dcx_iface_dci_slot_return(iface, dci);
    }

    /* The endpoints that the slot may serve: the DCI's holder unless it
     * yields the DCI (dcs_quota), or any endpoint sharing a shared one. */
    if (dci->shared ||
        ((dci->ep != NULL) && !(dci->ep->flags & UCT_DCX_EP_FLAG_TX_WAIT) &&
         !ucs_arbiter_group_is_empty(&dci->ep->arb_group))) {
        dispatch = 1;
    }

    if (dci->posted != dci->completed) {
        if (uct_dcx_iface_dci_tail_awaited(iface, dci)) {
            (void)uct_dcx_iface_dci_request_completion(iface, dci_index);
        }
    } else if (iface->tx.dci_policy->dci_drained(iface, dci_index)) {
        dispatch = 1;
    }

    /* Completions that return nothing a pending request could use do not
     * walk the arbiter (with many endpoints waiting for a DCI, every send
     * completion would). */
    if (dispatch) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1, uct_dcx_ep_pending_dispatch,
                             NULL);
    }
}

/* The common send completion: a successful request that leaves its DCI
 * busy, while nothing waits on the interface (no pending request, no
 * endpoint waiting for a DCI) and the DCI has a holder (or is shared).
 * What uct_dcx_iface_tx_completion() does after the callbacks is then
 * nothing, unless the callbacks queued work. Returns 0, having done
 * nothing, for any other completion. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_tx_completion_fast(uct_dcx_iface_t *iface, const uct_dcx_wc_t *wc)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[UCT_DCX_WR_ID_DCI(wc->wr_id)];
    uint64_t sn        = UCT_DCX_WR_ID_SN(wc->wr_id);

    if (ucs_unlikely((wc->status != IBV_WC_SUCCESS) || dci->error ||
                     (sn == dci->posted) ||
                     uct_dcx_dci_pool_has_waiters(&iface->tx.pool) ||
                     !ucs_arbiter_is_empty(&iface->tx.arbiter) ||
                     uct_dcx_iface_dci_orphan(iface, dci))) {
        return 0;
    }

    ucs_assert((sn > dci->completed) && (sn < dci->posted));
    if (ucs_likely(ucs_queue_is_empty(&dci->outstanding))) {
        /* At most a user completion: with nothing pending, its callback
         * may have every slot at once. */
        uct_dcx_iface_dci_retire(iface, dci, sn, 0);
        uct_dcx_iface_tx_callbacks(iface, dci, sn, UCS_OK);
    } else {
        /* As uct_dcx_iface_tx_completion(): the request's slot is held
         * through the callbacks, for a compare-swap loop's next try. */
        uct_dcx_iface_dci_retire(iface, dci, sn, 1);
        uct_dcx_iface_tx_callbacks(iface, dci, sn, UCS_OK);
        if (dci->slot_held) {
            uct_dcx_iface_dci_slot_return(iface, dci);
        }
    }

    /* What the callbacks queued or changed. */
    if (ucs_unlikely(!ucs_arbiter_is_empty(&iface->tx.arbiter))) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1, uct_dcx_ep_pending_dispatch,
                             NULL);
    }
    if (uct_dcx_iface_dci_tail_awaited(iface, dci)) {
        (void)uct_dcx_iface_dci_request_completion(iface, dci - iface->tx.dcis);
    }
    return 1;
}

/* Send completions, after ibv_start_poll found the first. */
UCS_F_NOINLINE unsigned uct_dcx_iface_poll_tx_batch(uct_dcx_iface_t *iface)
{
    uct_dcx_wc_t wc[UCT_DCX_POLL_BATCH];
    struct ibv_cq_ex *cq = iface->tx.poll_cq;
    unsigned i, count = 0;

    do {
        wc[count].wr_id      = cq->wr_id;
        wc[count].status     = cq->status;
        wc[count].vendor_err = (cq->status == IBV_WC_SUCCESS) ?
                                       0 :
                                       ibv_wc_read_vendor_err(cq);
        ++count;
    } while ((count < UCT_DCX_POLL_BATCH) && (ibv_next_poll(cq) == 0));
    ibv_end_poll(cq);

    iface->tx.stats.cqes += count;
    for (i = 0; i < count; ++i) {
        if (!uct_dcx_iface_tx_completion_fast(iface, &wc[i])) {
            uct_dcx_iface_tx_completion(iface, &wc[i]);
        }
    }
    return count;
}

/* The device failed (IBV_EVENT_DEVICE_FATAL): it completes nothing more,
 * so what it had outstanding completes here, with @a status, as error
 * completions would: the endpoints holding DCIs fail through the error
 * handler, operations and flushes complete with the error, DCIs drain.
 * From now on no DCI is taken (uct_dcx_iface_dci_take), so every other
 * endpoint fails at its next operation, and new endpoints are created
 * failed. Runs in the worker's progress, never in the event thread. */
static void uct_dcx_iface_fail(uct_dcx_iface_t *iface, ucs_status_t status)
{
    uct_dcx_fc_pending_grant_t *grant;
    uct_dcx_wc_t wc = {};
    uct_dcx_dci_t *dci;
    uint16_t i;

    if (iface->tx.fatal != UCS_OK) {
        return;
    }

    /* What the device completed before it failed comes first. */
    while (uct_dcx_iface_poll_tx(iface) > 0) {
    }

    iface->tx.fatal = status;
    ucs_queue_for_each_extract(grant, &iface->fc.grants, queue, 1) {
        ucs_mpool_put(grant);
    }

    /* One error completion per request, signaled or not, in order (as a
     * QP in error flushes them), each with the device's failure. */
    wc.status = IBV_WC_FATAL_ERR; /* UCS_ERR_IO_ERROR */
    UCT_DCX_IFACE_FOREACH_DCI(iface, i)
    {
        dci = &iface->tx.dcis[i];
        if (dci->posted != dci->completed) {
            do {
                wc.wr_id = UCT_DCX_WR_ID(i, dci->completed + 1);
                uct_dcx_iface_tx_completion(iface, &wc);
            } while (dci->posted != dci->completed);
        } else {
            iface->tx.dci_policy->dci_idle_fail(iface, dci, status);
        }
    }

    if (iface->umr.engine != NULL) {
        uct_dcx_umr_fail(iface->umr.engine);
        ++iface->umr.gen;
    }
    ucs_arbiter_dispatch(&iface->tx.arbiter, 1, uct_dcx_ep_pending_dispatch,
                         NULL);
}

static unsigned uct_dcx_iface_fatal_progress(void *arg)
{
    uct_dcx_iface_t *iface = arg;

    uct_worker_progress_unregister_safe(&iface->super.worker->super,
                                        &iface->tx.fatal_cb_id);
    uct_dcx_iface_fail(iface, UCS_ERR_IO_ERROR);
    return 1;
}

/* From the event thread: the rest happens in the worker's progress. */
static void uct_dcx_iface_fatal_event(void *arg)
{
    uct_dcx_iface_t *iface = arg;

    uct_worker_progress_register_safe(&iface->super.worker->super,
                                      uct_dcx_iface_fatal_progress, iface, 0,
                                      &iface->tx.fatal_cb_id);
}

ucs_status_t uct_dcx_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                 uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* Pending requests are sent by progress; the caller polls again.
     * Credit grants are no operation of the user's: a grant to a peer
     * that is gone takes the whole transport timeout to fail, and must not
     * hold the flush that long. Shared DCIs (rand) never return to the free
     * stack: the policy checks them all. */
    if (!ucs_arbiter_is_empty(&iface->tx.arbiter) ||
        !iface->tx.dci_policy->is_idle(iface)) {
        goto in_progress;
    }
    return UCS_OK;

in_progress:
    /* Held DCIs drain only once their last requests ask for completions. */
    uct_dcx_iface_dcis_request_completions(iface);
    return UCS_INPROGRESS;
}

ucs_status_t uct_dcx_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    uint16_t i;

    /* Idle DCIs have nothing to order against. */
    UCT_DCX_IFACE_FOREACH_DCI(iface, i)
    {
        if (iface->tx.dcis[i].posted != iface->tx.dcis[i].completed) {
            iface->tx.dcis[i].fence = 1;
        }
    }
    return UCS_OK;
}

/* dcs_hybrid: the DCI with streams past the pool's, created with DCI 0.
 * A device that refuses it leaves the policy without one: endpoints wait
 * for a pool DCI as under dcs_quota. */
static void uct_dcx_iface_stream_dci_create(uct_dcx_iface_t *iface)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[iface->tx.stream_dci];
    ucs_status_t status;

    dci->shared = 1;
    status      = uct_dcx_iface_dci_create(iface, dci);
    if (status != UCS_OK) {
        ucs_diag("dcx: %s: no stream dci (%s): dcs_hybrid waits for a DCI "
                 "as dcs_quota",
                 iface->md->device->name, ucs_status_string(status));
        dci->shared           = 0;
        iface->tx.stream_dci  = UCT_DCX_NO_STREAM_DCI;
        iface->tx.num_streams = 1;
    }
}

/* The pool: every DCI's state, the free stack and the rings of user
 * completions. DCI 0 tells what the device grants; the others come when
 * the pool needs them, except under rand, where endpoints pick any, and
 * dcs_hybrid's stream DCI, which exists from the start. */
ucs_status_t uct_dcx_iface_dci_pool_init(uct_dcx_iface_t *iface,
                                         const uct_dcx_iface_config_t *config)
{
    unsigned num_dci = uct_dcx_iface_config_num_dci(config);
    unsigned num_qps = uct_dcx_iface_num_dci_qps(iface, config);
    ucs_status_t status;
    unsigned i;

    status = uct_dcx_dci_pool_init(&iface->tx.pool, num_dci, 0);
    if (status != UCS_OK) {
        return status;
    }

    iface->tx.dcis = ucs_calloc(num_qps, sizeof(*iface->tx.dcis), "dcx dcis");
    if (iface->tx.dcis == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_free_dcis;
    }

    iface->tx.req_queue_len  = config->tx_queue_len;
    iface->tx.req_max_inline = config->tx_max_inline;
    for (i = 0; i < num_qps; ++i) {
        ucs_queue_head_init(&iface->tx.dcis[i].outstanding);
    }
    for (i = 0; i < num_dci; ++i) {
        if ((i > 0) && !uct_dcx_iface_dci_shared(iface)) {
            continue;
        }
        iface->tx.dcis[i].shared = uct_dcx_iface_dci_shared(iface);
        status = uct_dcx_iface_dci_create(iface, &iface->tx.dcis[i]);
        if (status != UCS_OK) {
            uct_dcx_iface_dcis_destroy(iface, i);
            goto err_free_dcis;
        }
        uct_dcx_dci_pool_created(&iface->tx.pool);
    }
    if (iface->tx.stream_dci != UCT_DCX_NO_STREAM_DCI) {
        uct_dcx_iface_stream_dci_create(iface);
    }

    /* Every DCI's ring of user completions; its requests in flight never
     * exceed the send queue, so their sequence numbers never share a slot. */
    iface->tx.comp_mask  = ucs_roundup_pow2(iface->tx.queue_len) - 1;
    iface->tx.comp_rings = ucs_calloc((size_t)num_qps *
                                              (iface->tx.comp_mask + 1),
                                      sizeof(*iface->tx.comp_rings),
                                      "dcx comp rings");
    if (iface->tx.comp_rings == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_destroy_dcis;
    }
    for (i = 0; i < num_qps; ++i) {
        iface->tx.dcis[i].comps = iface->tx.comp_rings +
                                  ((size_t)i * (iface->tx.comp_mask + 1));
    }

    iface->tx.cq_available = num_qps * config->tx_queue_len;
    /* A quarter of the queue at most, so a full send queue always holds
     * signaled requests that free its slots. */
    iface->tx.moderation = ucs_max(ucs_min(config->tx_cq_moderation,
                                           iface->tx.queue_len / 4),
                                   1);
    iface->tx.self_ah    = NULL;
    /* One SGL call is one batch on one DCI: it must fit in half a send
     * queue, so it can go out while the other half is in flight. */
    iface->tx.put_sgl_max = config->put_sgl ? ucs_min(iface->tx.queue_len / 2,
                                                      UCT_DCX_SGL_MAX) :
                                              0;
    memset(&iface->tx.stats, 0, sizeof(iface->tx.stats));
    return UCS_OK;

err_destroy_dcis:
    uct_dcx_iface_dcis_destroy(iface, num_qps);
err_free_dcis:
    uct_dcx_iface_direct_cleanup(iface);
    ucs_free(iface->tx.dcis);
    uct_dcx_dci_pool_cleanup(&iface->tx.pool);
    return status;
}

/* Destroying the QPs discards their completions: what still waits is
 * cancelled, its user completion called once with UCS_ERR_CANCELED
 * (operations of destroyed endpoints have none left). Handlers are not run:
 * results never arrived, and the UMR engine goes away. */
void uct_dcx_iface_dci_pool_cleanup(uct_dcx_iface_t *iface)
{
    uct_completion_t *comp;
    uct_dcx_op_t *op;
    uint16_t i;

    /* Those never created have no QP. */
    uct_dcx_iface_dcis_destroy(iface,
                               (iface->tx.stream_dci != UCT_DCX_NO_STREAM_DCI) ?
                                       iface->tx.stream_dci + 1u :
                                       iface->tx.pool.num_created);
    uct_dcx_iface_direct_cleanup(iface);
    UCT_DCX_IFACE_FOREACH_DCI(iface, i)
    {
        ucs_queue_for_each_extract(op, &iface->tx.dcis[i].outstanding, queue,
                                   1) {
            comp     = op->comp;
            op->comp = NULL;
            ucs_mpool_put(op);
            if (comp != NULL) {
                uct_invoke_completion(comp, UCS_ERR_CANCELED);
            }
        }
        uct_dcx_iface_dci_cancel_comps(iface, &iface->tx.dcis[i], NULL);
    }
    ucs_free(iface->tx.comp_rings);
    ucs_free(iface->tx.dcis);
    uct_dcx_dci_pool_cleanup(&iface->tx.pool);
}

/* The device's failure reaches the interface from the event thread. */
void uct_dcx_iface_fatal_listen(uct_dcx_iface_t *iface)
{
    iface->tx.fatal_cb_id        = UCS_CALLBACKQ_ID_NULL;
    iface->tx.fatal_listener.cb  = uct_dcx_iface_fatal_event;
    iface->tx.fatal_listener.arg = iface;
    ucs_list_head_init(&iface->tx.fatal_listener.list);
    if (uct_dcx_md_fatal_listen(iface->md, &iface->tx.fatal_listener) !=
        UCS_OK) {
        iface->tx.fatal = UCS_ERR_IO_ERROR; /* failed meanwhile */
    }
}

void uct_dcx_iface_fatal_unlisten(uct_dcx_iface_t *iface)
{
    uct_dcx_md_fatal_unlisten(iface->md, &iface->tx.fatal_listener);
    uct_worker_progress_unregister_safe(&iface->super.worker->super,
                                        &iface->tx.fatal_cb_id);
}
