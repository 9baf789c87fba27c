/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The interface's hot inline helpers, shared by the endpoint operations and
 * the interface's own files: send queue accounting of a DCI, completion
 * signaling, the peer of an endpoint, and taking a DCI from the pool.
 * Included by dcx_iface.h, after the declarations they call.
 */
#ifndef UCT_DCX_IFACE_INL_
#define UCT_DCX_IFACE_INL_

/* A send queue slot goes back to the DCI (after a completion's callbacks;
 * a compare-swap loop takes its own completion's slot for the next try). */
static UCS_F_ALWAYS_INLINE void
uct_dcx_iface_dci_slot_return(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    dci->slot_held = 0;
    ++dci->available;
    ++iface->tx.cq_available;
}

/* Whether a work request posted after @a unsignaled unsignaled ones asks
 * for a completion: when an operation waits for it, every tx.moderation
 * requests, and while endpoints wait for a DCI to come back to the pool. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_signal_after(const uct_dcx_iface_t *iface, unsigned unsignaled,
                           int need_completion)
{
    return need_completion || (unsignaled + 1 >= iface->tx.moderation) ||
           uct_dcx_dci_pool_has_waiters(&iface->tx.pool);
}

/* The same for the DCI's next work request; a fenced one asks too. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_signal(const uct_dcx_iface_t *iface, const uct_dcx_dci_t *dci,
                         int need_completion)
{
    return uct_dcx_iface_signal_after(iface, dci->unsignaled,
                                      need_completion) ||
           dci->fence;
}

/* A work request went out on the DCI. */
static UCS_F_ALWAYS_INLINE void uct_dcx_iface_dci_posted(uct_dcx_iface_t *iface,
                                                         uct_dcx_dci_t *dci,
                                                         int signaled)
{
    ucs_assert(iface->tx.cq_available > 0);
    --dci->available;
    --iface->tx.cq_available;
    ++dci->posted;
    ++iface->tx.stats.work_requests;
    if (signaled) {
        dci->unsignaled = 0;
        ++iface->tx.stats.signaled;
    } else {
        ++dci->unsignaled;
    }
}

/* Keep @a comp for the (signaled) work request just posted on @a dci. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_iface_comp_push(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                        uct_dcx_ep_t *ep, uct_completion_t *comp)
{
    uct_dcx_comp_slot_t *slot = &dci->comps[dci->posted & iface->tx.comp_mask];

    ucs_assert(slot->comp == NULL);
    slot->comp = comp;
    slot->ep   = ep;
}

/* The shared DCT address an endpoint sends to. */
static UCS_F_ALWAYS_INLINE uct_dcx_peer_t *
uct_dcx_ep_peer(uct_dcx_iface_t *iface, const uct_dcx_ep_t *ep)
{
    void *peer;
    int found;

    found = ucs_ptr_array_lookup(&iface->peer_table, ep->peer_index, peer);
    ucs_assert(found);
    (void)found;
    return (uct_dcx_peer_t *)peer;
}

/* The DCI policy's traits (see uct_dcx_dci_policy_ops_t): DCIs shared by
 * endpoints (rand), holders yielding at their quota (dcs_quota). */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_shared(const uct_dcx_iface_t *iface)
{
    return iface->tx.policy_flags & UCT_DCX_DCI_POLICY_FLAG_SHARED;
}

static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_quota(const uct_dcx_iface_t *iface)
{
    return iface->tx.policy_flags & UCT_DCX_DCI_POLICY_FLAG_QUOTA;
}

/* Whether the DCI at @a dci_index (never UCT_DCX_EP_NO_DCI) is shared by
 * endpoints: every DCI of rand and hw_dcs, the stream DCI of dcs_hybrid.
 * The endpoints' check: no load of the DCI. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_index_shared(const uct_dcx_iface_t *iface, uint16_t dci_index)
{
    return uct_dcx_iface_dci_shared(iface) ||
           ucs_unlikely(dci_index == iface->tx.stream_dci);
}

/* The DCIs that exist, in index order: the pool's created ones, then the
 * stream DCI of dcs_hybrid (past the pool's). UCT_DCX_EP_NO_DCI ends. */
static UCS_F_ALWAYS_INLINE uint16_t
uct_dcx_iface_dci_next(const uct_dcx_iface_t *iface, unsigned index)
{
    if (index + 1 < iface->tx.pool.num_created) {
        return index + 1;
    }
    if ((iface->tx.stream_dci != UCT_DCX_NO_STREAM_DCI) &&
        (index < iface->tx.stream_dci)) {
        return iface->tx.stream_dci;
    }
    return UCT_DCX_EP_NO_DCI;
}

#define UCT_DCX_IFACE_FOREACH_DCI(_iface, _index)                 \
    for ((_index) = uct_dcx_iface_dci_next(_iface, (unsigned)-1); \
         (_index) != UCT_DCX_EP_NO_DCI;                           \
         (_index) = uct_dcx_iface_dci_next(_iface, _index))

/* Take a DCI from the pool (dcs policies), creating it at its first use
 * (dcx_dci_pool.h). */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_dcx_iface_dci_take(uct_dcx_iface_t *iface, uint16_t *index_p)
{
    if (ucs_unlikely(iface->tx.fatal != UCS_OK)) {
        return iface->tx.fatal; /* a failed device completes nothing */
    }
    if (ucs_unlikely(!uct_dcx_dci_pool_has_free(&iface->tx.pool))) {
        /* Held DCIs come back only once their last work request completes:
         * make sure it will (dcs_hybrid: nobody waits, the stream DCI
         * serves). */
        if (iface->tx.stream_dci == UCT_DCX_NO_STREAM_DCI) {
            uct_dcx_iface_dcis_request_completions(iface);
        }
        return UCS_ERR_NO_RESOURCE;
    }

    if (ucs_unlikely(uct_dcx_dci_pool_top_missing(&iface->tx.pool)) &&
        (uct_dcx_iface_dci_create_next(iface) != UCS_OK)) {
        return UCS_ERR_NO_RESOURCE;
    }

    *index_p = uct_dcx_dci_pool_take(&iface->tx.pool);
    return UCS_OK;
}

#endif
