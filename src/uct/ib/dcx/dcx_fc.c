/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Active-message flow control, both halves.
 *
 * Sender: an endpoint starts with fc.wnd_size credits, spends one per active
 * message (dcx_ep.inl, uct_dcx_ep_fc_check / uct_dcx_ep_fc_consume), and asks
 * the peer for more with a credit request on its own DCI, in order after the
 * messages it covers.
 *
 * Receiver: credit requests are answered with grants once the messages sent
 * before them were taken, grants wait for a DCI when none is free, and lost
 * requests are sent again.
 */
#include "dcx_ep.inl"
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>

#include <endian.h>
#include <string.h>


/* --- sender ------------------------------------------------------------ */

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

/* Post a credit request on the endpoint's DCI, in order after the messages
 * it covers. */
static ucs_status_t
uct_dcx_ep_fc_post_request(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep)
{
    uct_dcx_fc_request_t req;
    struct ibv_data_buf bufs[2];
    struct ibv_qp_ex *qpx;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;

    status = uct_dcx_ep_tx_begin(iface, ep, UCT_DCX_EP_TX_CTRL, NULL, NULL,
                                 NULL, &tx);
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

    qpx = uct_dcx_ep_wr_start(iface, ep, tx.dci, 0);
    ibv_wr_send_imm(qpx, htobe32(UCT_DCX_IMM_FC_REQUEST));
    ibv_wr_set_inline_data_list(qpx, 2, bufs);
    return uct_dcx_ep_tx_post(iface, ep, UCT_DCX_EP_TX_CTRL, &tx);
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
    it       = kh_put(uct_dcx_fc_wait, &iface->fc.waiting, (uintptr_t)ep, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_error("dcx: ep %p: cannot track a credit request", ep);
        return;
    }
    kh_value(&iface->fc.waiting, it) = deadline;
    ep->flags |= UCT_DCX_EP_FLAG_FC_WAIT;
    if ((kh_size(&iface->fc.waiting) == 1) ||
        (deadline < iface->fc.next_check)) {
        iface->fc.next_check = deadline;
    }
}


/* --- receiver ---------------------------------------------------------- */

/* Post a grant on a DCI of its own, which returns to the pool when the
 * grant completes: grants never pin a DCI. An error there fails no
 * endpoint (dcs policies); the sender asks again after its timeout. */
static ucs_status_t
uct_dcx_iface_fc_post_grant(uct_dcx_iface_t *iface,
                            const uct_dcx_fc_pending_grant_t *pg)
{
    uct_dcx_dci_t *dci;
    uint16_t index;
    int ret;

    if (iface->tx.dci_policy->grant_get(iface, &index) != UCS_OK) {
        return UCS_ERR_NO_RESOURCE;
    }

    /* Signaled: the DCI returns to the pool when the grant completes. */
    dci = &iface->tx.dcis[index];
    ibv_wr_start(dci->qpx);
    dci->qpx->wr_id    = UCT_DCX_WR_ID(index, dci->posted + 1);
    dci->qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(dci->qpx, htobe32(UCT_DCX_IMM_FC_GRANT));
    ibv_wr_set_inline_data(dci->qpx, (void *)&pg->grant, sizeof(pg->grant));
    mlx5dv_wr_set_dc_addr(dci->mqpx, pg->ah, pg->dctn, pg->dc_key);
    ret = ibv_wr_complete(dci->qpx);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x: posting a grant failed: %s", dci->qp->qp_num,
                  strerror(ret));
        iface->tx.dci_policy->grant_abort(iface, index);
        return UCS_ERR_IO_ERROR;
    }

    iface->tx.dci_policy->grant_posted(iface, dci);
    uct_dcx_iface_dci_posted(iface, dci, 1);
    return UCS_OK;
}

static void uct_dcx_iface_fc_grant_request(uct_dcx_iface_t *iface,
                                           const void *data, size_t length)
{
    const union ibv_gid *gid = NULL;
    uct_dcx_fc_pending_grant_t pg, *queued;
    uct_dcx_fc_request_t req;

    if (length < sizeof(req)) {
        ucs_debug("dcx: dropped a short credit request (%zu bytes)", length);
        return;
    }
    if (iface->tx.fatal != UCS_OK) {
        return; /* a failed device sends nothing */
    }
    memcpy(&req, data, sizeof(req));
    if (req.dev_flags &
        (UCT_DCX_DEV_ADDR_FLAG_GLOBAL | UCT_DCX_DEV_ADDR_FLAG_IB_GID)) {
        if (length < sizeof(req) + sizeof(*gid)) {
            ucs_debug("dcx: dropped a credit request without its GID");
            return;
        }
        gid = uct_dcx_iface_peer_dgid(iface, req.dev_flags,
                                      UCS_PTR_BYTE_OFFSET(data, sizeof(req)));
    }

    if (uct_dcx_iface_ah_get(iface, req.lid, gid, &pg.ah) != UCS_OK) {
        return; /* the sender asks again */
    }

    pg.dc_key = req.dc_key;
    pg.dctn   = req.dctn[0] | ((uint32_t)req.dctn[1] << 8) |
              ((uint32_t)req.dctn[2] << 16);
    pg.grant.ep_id   = req.ep_id;
    pg.grant.credits = req.credits;
    pg.grant.sn      = req.sn;

    if (ucs_queue_is_empty(&iface->fc.grants) &&
        (uct_dcx_iface_fc_post_grant(iface, &pg) == UCS_OK)) {
        return;
    }

    queued = ucs_mpool_get(&iface->fc.grant_mp);
    if (queued == NULL) {
        ucs_debug("dcx: too many grants waiting; the sender asks again");
        return;
    }
    *queued = pg;
    ucs_queue_push(&iface->fc.grants, &queued->queue);
}

/* A grant for one of our endpoints: credits for the messages it sent
 * before its request. Returns whether pending work may go on. */
static int uct_dcx_iface_fc_apply_grant(uct_dcx_iface_t *iface,
                                        const void *data, size_t length)
{
    uct_dcx_fc_grant_t grant;
    uct_dcx_ep_t *ep;
    khiter_t it;

    if (length < sizeof(grant)) {
        ucs_debug("dcx: dropped a short grant (%zu bytes)", length);
        return 0;
    }
    memcpy(&grant, data, sizeof(grant));

    /* Only endpoints that wait are in the table: a grant for a destroyed
     * endpoint finds nothing. */
    it = kh_get(uct_dcx_fc_wait, &iface->fc.waiting, grant.ep_id);
    if (it == kh_end(&iface->fc.waiting)) {
        return 0;
    }
    ep = (uct_dcx_ep_t *)(uintptr_t)grant.ep_id;
    if (grant.sn != ep->fc_sn) {
        return 0; /* a late grant of a request asked again */
    }

    kh_del(uct_dcx_fc_wait, &iface->fc.waiting, it);
    ep->flags &= ~UCT_DCX_EP_FLAG_FC_WAIT;
    ep->fc_wnd = ucs_min(ep->fc_wnd + grant.credits, iface->fc.wnd_size);
    if (ep->fc_wnd <= iface->fc.req_thresh) {
        /* Many were sent after the request: ask again at once. */
        uct_dcx_ep_fc_request(iface, ep);
    }
    return 1;
}

int uct_dcx_iface_fc_recv(uct_dcx_iface_t *iface, uint32_t imm,
                          const void *data, size_t length)
{
    switch (imm) {
    case UCT_DCX_IMM_FC_REQUEST:
        uct_dcx_iface_fc_grant_request(iface, data, length);
        return 0;
    case UCT_DCX_IMM_FC_GRANT:
        return uct_dcx_iface_fc_apply_grant(iface, data, length);
    case UCT_DCX_IMM_NONE:
        ucs_debug("dcx: dropped a message without immediate data");
        return 0;
    default:
        ucs_debug("dcx: dropped a message with immediate 0x%x", imm);
        return 0;
    }
}

/* Grants that found no DCI, and credit requests that are due again. */
void uct_dcx_iface_fc_progress(uct_dcx_iface_t *iface)
{
    uct_dcx_ep_t *due[UCT_DCX_FC_TIMER_BATCH];
    uct_dcx_fc_pending_grant_t *pg;
    ucs_time_t now, next, deadline;
    unsigned i, num_due = 0;
    uint64_t ep_id;

    while (!ucs_queue_is_empty(&iface->fc.grants)) {
        pg = ucs_queue_head_elem_non_empty(&iface->fc.grants,
                                           uct_dcx_fc_pending_grant_t, queue);
        if (uct_dcx_iface_fc_post_grant(iface, pg) == UCS_ERR_NO_RESOURCE) {
            break;
        }
        ucs_queue_pull_non_empty(&iface->fc.grants);
        ucs_mpool_put(pg);
    }

    if (kh_size(&iface->fc.waiting) == 0) {
        return;
    }

    now = ucs_get_time();
    if (now < iface->fc.next_check) {
        return;
    }

    /* Collect first: asking again updates the table. */
    next = now + iface->fc.timeout;
    kh_foreach(&iface->fc.waiting, ep_id, deadline, {
        if ((deadline <= now) && (num_due < UCT_DCX_FC_TIMER_BATCH)) {
            due[num_due++] = (uct_dcx_ep_t *)(uintptr_t)ep_id;
        } else if (deadline < next) {
            next = deadline;
        }
    })
        ;
    iface->fc.next_check = (num_due == UCT_DCX_FC_TIMER_BATCH) ? now : next;

    for (i = 0; i < num_due; ++i) {
        ucs_debug("dcx: ep %p: asking again for credits", due[i]);
        uct_dcx_ep_fc_request(iface, due[i]);
    }
}

/* Credits per endpoint; off, an endpoint never runs out. */
void uct_dcx_iface_fc_init(uct_dcx_iface_t *iface,
                           const uct_dcx_iface_config_t *config)
{
    kh_init_inplace(uct_dcx_fc_wait, &iface->fc.waiting);
    ucs_queue_head_init(&iface->fc.grants);
    if (config->fc_enable) {
        iface->fc.wnd_size   = config->fc_wnd_size;
        iface->fc.req_thresh = (int16_t)(config->fc_wnd_size *
                                         config->fc_req_thresh);
        iface->fc.consume    = 1;
    } else {
        iface->fc.wnd_size   = INT16_MAX;
        iface->fc.req_thresh = INT16_MIN;
        iface->fc.consume    = 0;
    }
    iface->fc.timeout = ucs_time_from_sec(config->fc_grant_timeout);
}

void uct_dcx_iface_fc_cleanup(uct_dcx_iface_t *iface)
{
    uct_dcx_fc_pending_grant_t *grant;

    ucs_queue_for_each_extract(grant, &iface->fc.grants, queue, 1) {
        ucs_mpool_put(grant);
    }
    kh_destroy_inplace(uct_dcx_fc_wait, &iface->fc.waiting);
}
