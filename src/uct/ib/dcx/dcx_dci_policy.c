/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The DCI policies (UCX_DCX_TX_POLICY): how endpoints share the pool of
 * dcx_dci.c. Each is one uct_dcx_dci_policy_ops_t, chosen when the
 * interface is created; the data path reads its traits inline
 * (uct_dcx_iface_dci_shared, uct_dcx_iface_dci_quota in dcx_iface.inl).
 *
 *   dcs        an endpoint takes a DCI from the free stack while it has
 *              work outstanding and gives it back when that completed
 *   dcs_quota  dcs, but a holder yields at QUOTA outstanding operations
 *              while other endpoints wait for a DCI
 *   rand       every DCI exists from the start; endpoints share the one
 *              picked when they were created, and never give it back
 *   hw_dcs     rand with a pool of one DCI, endpoints on its DCI streams in
 *              turn (uct_dcx_iface_streams_init)
 *   dcs_hybrid dcs_quota, and one more DCI with streams (tx.stream_dci):
 *              an endpoint that finds the pool empty moves to its next
 *              stream and stays there, as under hw_dcs
 *              (uct_dcx_ep_stream_join); that DCI is handled as rand's
 */
#include "dcx_iface_int.h"

#include <stdlib.h>


/* dcs and dcs_quota: a grant takes a DCI from the pool like an endpoint,
 * but has no holder; it comes back when the grant completes. */
static ucs_status_t
uct_dcx_dci_dcs_grant_get(uct_dcx_iface_t *iface, uint16_t *index_p)
{
    if (uct_dcx_iface_dci_take(iface, index_p) != UCS_OK) {
        return UCS_ERR_NO_RESOURCE;
    }
    iface->tx.dcis[*index_p].ep = NULL;
    return UCS_OK;
}

static void
uct_dcx_dci_dcs_grant_posted(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    if (!dci->grant) {
        dci->grant = 1;
        uct_dcx_dci_pool_grant_add(&iface->tx.pool);
    }
}

static void uct_dcx_dci_dcs_grant_abort(uct_dcx_iface_t *iface, uint16_t index)
{
    uct_dcx_dci_pool_give_back(&iface->tx.pool, index);
}

/* The holder fails through the error handler; nobody else uses the DCI. */
static void uct_dcx_dci_dcs_error(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                                  ucs_status_t status)
{
}

/* The next endpoint to take it finds the device failed (dci_take). */
static void uct_dcx_dci_dcs_idle_fail(uct_dcx_iface_t *iface,
                                      uct_dcx_dci_t *dci, ucs_status_t status)
{
}

/* An endpoint holds a DCI only while it has work outstanding; an orphan's
 * endpoint was destroyed meanwhile. */
static int uct_dcx_dci_dcs_drained(uct_dcx_iface_t *iface, uint16_t index)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[index];

    if (dci->ep == NULL) {
        uct_dcx_iface_dci_release(iface, index);
    } else {
        uct_dcx_iface_dci_put(iface, dci->ep);
    }
    return 1;
}

/* Every DCI is back in the pool, but those taken by credit grants. */
static int uct_dcx_dci_dcs_is_idle(const uct_dcx_iface_t *iface)
{
    return uct_dcx_dci_pool_is_idle(&iface->tx.pool);
}

/* rand: a grant goes out on any DCI that has room, as it is. */
static ucs_status_t
uct_dcx_dci_rand_grant_get(uct_dcx_iface_t *iface, uint16_t *index_p)
{
    uint16_t index = rand_r(&iface->tx.rand_seed) % iface->tx.pool.size;

    if ((iface->tx.dcis[index].available == 0) || iface->tx.dcis[index].error) {
        return UCS_ERR_NO_RESOURCE;
    }
    *index_p = index;
    return UCS_OK;
}

static void
uct_dcx_dci_rand_grant_posted(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
}

static void uct_dcx_dci_rand_grant_abort(uct_dcx_iface_t *iface, uint16_t index)
{
}

/* Endpoints sharing the DCI notice the new generation at their next use. */
static void uct_dcx_dci_rand_error(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                                   ucs_status_t status)
{
    ++dci->generation;
    dci->last_error = status;
}

static void uct_dcx_dci_rand_idle_fail(uct_dcx_iface_t *iface,
                                       uct_dcx_dci_t *dci, ucs_status_t status)
{
    if (!dci->error) {
        uct_dcx_dci_rand_error(iface, dci, status);
        dci->error = 1;
    }
}

/* Shared DCIs stay with their endpoints; once drained after an error, the
 * DCI serves the endpoints created since. */
static int uct_dcx_dci_rand_drained(uct_dcx_iface_t *iface, uint16_t index)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[index];

    if (dci->error) {
        uct_dcx_iface_dci_recover(iface, dci);
    }
    return 0;
}

/* Shared DCIs never return to the free stack: check them all. */
static int uct_dcx_dci_rand_is_idle(const uct_dcx_iface_t *iface)
{
    unsigned i;

    if (!uct_dcx_dci_dcs_is_idle(iface)) {
        return 0;
    }
    for (i = 0; i < iface->tx.pool.size; ++i) {
        if (iface->tx.dcis[i].posted != iface->tx.dcis[i].completed) {
            return 0;
        }
    }
    return 1;
}

/* dcs_hybrid: the pool's DCIs as dcs_quota's, the stream DCI as rand's. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_dci_is_stream(const uct_dcx_iface_t *iface, const uct_dcx_dci_t *dci)
{
    return (dci - iface->tx.dcis) == iface->tx.stream_dci;
}

/* A grant waits for no DCI while the stream DCI has room. */
static ucs_status_t
uct_dcx_dci_hybrid_grant_get(uct_dcx_iface_t *iface, uint16_t *index_p)
{
    uint16_t index = iface->tx.stream_dci;

    if (uct_dcx_dci_dcs_grant_get(iface, index_p) == UCS_OK) {
        return UCS_OK;
    }
    if ((index == UCT_DCX_NO_STREAM_DCI) ||
        (iface->tx.dcis[index].available == 0) || iface->tx.dcis[index].error) {
        return UCS_ERR_NO_RESOURCE;
    }
    *index_p = index;
    return UCS_OK;
}

static void
uct_dcx_dci_hybrid_grant_posted(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    if (!uct_dcx_dci_is_stream(iface, dci)) {
        uct_dcx_dci_dcs_grant_posted(iface, dci);
    }
}

static void
uct_dcx_dci_hybrid_grant_abort(uct_dcx_iface_t *iface, uint16_t index)
{
    if (index != iface->tx.stream_dci) {
        uct_dcx_dci_dcs_grant_abort(iface, index);
    }
}

static void uct_dcx_dci_hybrid_error(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                                     ucs_status_t status)
{
    if (uct_dcx_dci_is_stream(iface, dci)) {
        uct_dcx_dci_rand_error(iface, dci, status);
    }
}

static void uct_dcx_dci_hybrid_idle_fail(uct_dcx_iface_t *iface,
                                         uct_dcx_dci_t *dci,
                                         ucs_status_t status)
{
    if (uct_dcx_dci_is_stream(iface, dci)) {
        uct_dcx_dci_rand_idle_fail(iface, dci, status);
    }
}

static int uct_dcx_dci_hybrid_drained(uct_dcx_iface_t *iface, uint16_t index)
{
    if (index == iface->tx.stream_dci) {
        return uct_dcx_dci_rand_drained(iface, index);
    }
    return uct_dcx_dci_dcs_drained(iface, index);
}

static int uct_dcx_dci_hybrid_is_idle(const uct_dcx_iface_t *iface)
{
    const uct_dcx_dci_t *dci;

    if (!uct_dcx_dci_dcs_is_idle(iface)) {
        return 0;
    }
    if (iface->tx.stream_dci == UCT_DCX_NO_STREAM_DCI) {
        return 1;
    }
    dci = &iface->tx.dcis[iface->tx.stream_dci];
    return dci->posted == dci->completed;
}

/* dcs and dcs_quota differ only in the quota, which the data path checks. */
#define UCT_DCX_DCI_POLICY_DCS(_flags)                             \
    {                                                              \
        .flags = (_flags), .grant_get = uct_dcx_dci_dcs_grant_get, \
        .grant_posted  = uct_dcx_dci_dcs_grant_posted,             \
        .grant_abort   = uct_dcx_dci_dcs_grant_abort,              \
        .dci_error     = uct_dcx_dci_dcs_error,                    \
        .dci_idle_fail = uct_dcx_dci_dcs_idle_fail,                \
        .dci_drained   = uct_dcx_dci_dcs_drained,                  \
        .is_idle       = uct_dcx_dci_dcs_is_idle                   \
    }

/* rand and hw_dcs: endpoints share the DCIs they were given. */
#define UCT_DCX_DCI_POLICY_SHARED                        \
    {                                                    \
        .flags         = UCT_DCX_DCI_POLICY_FLAG_SHARED, \
        .grant_get     = uct_dcx_dci_rand_grant_get,     \
        .grant_posted  = uct_dcx_dci_rand_grant_posted,  \
        .grant_abort   = uct_dcx_dci_rand_grant_abort,   \
        .dci_error     = uct_dcx_dci_rand_error,         \
        .dci_idle_fail = uct_dcx_dci_rand_idle_fail,     \
        .dci_drained   = uct_dcx_dci_rand_drained,       \
        .is_idle       = uct_dcx_dci_rand_is_idle        \
    }

/* By UCX_DCX_TX_POLICY (uct_dcx_tx_policy_t); see the enum for why each. */
static const uct_dcx_dci_policy_ops_t uct_dcx_dci_policies
        [] = { [UCT_DCX_TX_POLICY_DCS]       = UCT_DCX_DCI_POLICY_DCS(0),
               [UCT_DCX_TX_POLICY_DCS_QUOTA] = UCT_DCX_DCI_POLICY_DCS(
                       UCT_DCX_DCI_POLICY_FLAG_QUOTA),
               [UCT_DCX_TX_POLICY_RAND]       = UCT_DCX_DCI_POLICY_SHARED,
               [UCT_DCX_TX_POLICY_HW_DCS]     = UCT_DCX_DCI_POLICY_SHARED,
               [UCT_DCX_TX_POLICY_DCS_HYBRID] = {
                       .flags         = UCT_DCX_DCI_POLICY_FLAG_QUOTA,
                       .grant_get     = uct_dcx_dci_hybrid_grant_get,
                       .grant_posted  = uct_dcx_dci_hybrid_grant_posted,
                       .grant_abort   = uct_dcx_dci_hybrid_grant_abort,
                       .dci_error     = uct_dcx_dci_hybrid_error,
                       .dci_idle_fail = uct_dcx_dci_hybrid_idle_fail,
                       .dci_drained   = uct_dcx_dci_hybrid_drained,
                       .is_idle       = uct_dcx_dci_hybrid_is_idle } };

void uct_dcx_iface_dci_policy_select(uct_dcx_iface_t *iface,
                                     uct_dcx_tx_policy_t policy)
{
    ucs_assert(policy < UCT_DCX_TX_POLICY_LAST);
    iface->tx.dci_policy   = &uct_dcx_dci_policies[policy];
    iface->tx.policy_flags = iface->tx.dci_policy->flags;
}
