/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Active-message flow control, the sender's half: an endpoint starts with
 * fc.wnd_size credits, spends one per active message (dcx_ep.inl,
 * uct_dcx_ep_fc_check / uct_dcx_ep_fc_consume), and asks the peer for more
 * with a credit request on its own DCI, in order after the messages it
 * covers. The receiver's half (grants) is the interface's.
 */
#include "dcx_ep.inl"

#include <endian.h>


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
static ucs_status_t uct_dcx_ep_fc_post_request(uct_dcx_iface_t *iface,
                                               uct_dcx_ep_t *ep)
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
