/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Receive: buffers posted to the shared receive queue of the DCT, and
 * receive progress, which hands active messages to their handlers and
 * flow-control messages to dcx_fc.c.
 */
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>

#include <string.h>


/* --- receive ---------------------------------------------------------- */

void uct_dcx_iface_recv_desc_init(uct_iface_h tl_iface, void *obj,
                                  uct_mem_h memh)
{
    ((uct_dcx_recv_desc_t *)obj)->lkey = uct_dcx_memh_lkey(memh);
}

void uct_dcx_iface_release_desc(uct_recv_desc_t *self, void *desc)
{
    uct_dcx_iface_t *iface = ucs_container_of(self, uct_dcx_iface_t,
                                              rx.release_desc);

    ucs_mpool_put_inline(
            UCS_PTR_BYTE_OFFSET(desc, -(ptrdiff_t)iface->rx.headroom_offset));
    /* The SRQ may have run short while the user held every buffer, and
     * then no receive completion comes to refill it: progress does. */
    iface->rx.refill = 1;
}

/* Fill the SRQ up to its length. */
void uct_dcx_iface_post_recv(uct_dcx_iface_t *iface)
{
    struct ibv_recv_wr wrs[UCT_DCX_RX_POST_BATCH], *bad_wr;
    struct ibv_sge sges[UCT_DCX_RX_POST_BATCH];
    uct_dcx_recv_desc_t *desc;
    unsigned count;
    int ret;

    while (iface->rx.posted < iface->rx.queue_len) {
        for (count = 0; (count < UCT_DCX_RX_POST_BATCH) &&
                        (iface->rx.posted + count < iface->rx.queue_len);
             ++count) {
            desc = ucs_mpool_get_inline(&iface->rx.mp);
            if (desc == NULL) {
                break;
            }

            sges[count].addr = (uintptr_t)
                    UCS_PTR_BYTE_OFFSET(desc, iface->rx.payload_offset);
            sges[count].length = iface->tx.seg_size;
            sges[count].lkey   = desc->lkey;
            wrs[count].wr_id   = (uintptr_t)desc;
            wrs[count].sg_list = &sges[count];
            wrs[count].num_sge = 1;
            wrs[count].next    = &wrs[count + 1];
        }

        if (count == 0) {
            return;
        }

        wrs[count - 1].next = NULL;
        ret = iface->rx.post_srq_recv(iface->rx.post_srq, wrs, &bad_wr);
        if (ucs_unlikely(ret != 0)) {
            ucs_error("dcx: post_srq_recv failed: %s", strerror(ret));
            iface->rx.posted += bad_wr - wrs;
            for (; bad_wr != NULL; bad_wr = bad_wr->next) {
                ucs_mpool_put_inline((void *)(uintptr_t)bad_wr->wr_id);
            }
            return;
        }

        iface->rx.posted += count;
    }
}

/* Receive completions, after ibv_start_poll found the first. */
UCS_F_NOINLINE unsigned uct_dcx_iface_poll_rx_batch(uct_dcx_iface_t *iface)
{
    uct_dcx_wc_t wc[UCT_DCX_POLL_BATCH];
    struct ibv_cq_ex *cq = iface->rx.poll_cq;
    unsigned i, count = 0;
    ucs_status_t status;
    void *desc, *udesc;
    int granted = 0;
    uint8_t am_id;

    do {
        wc[count].wr_id    = cq->wr_id;
        wc[count].status   = cq->status;
        wc[count].opcode   = ibv_wc_read_opcode(cq);
        wc[count].byte_len = ibv_wc_read_byte_len(cq);
        /* A message without immediate data comes from no dcx sender: its
         * immediate field means nothing (mlx5 leaves it undefined). */
        wc[count].imm        = ((wc[count].status == IBV_WC_SUCCESS) &&
                         (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM)) ?
                                       be32toh(ibv_wc_read_imm_data(cq)) :
                                       UCT_DCX_IMM_NONE;
        wc[count].vendor_err = (wc[count].status == IBV_WC_SUCCESS) ?
                                       0 :
                                       ibv_wc_read_vendor_err(cq);
        ++count;
    } while ((count < UCT_DCX_POLL_BATCH) && (ibv_next_poll(cq) == 0));
    ibv_end_poll(cq);

    iface->rx.posted -= count;
    for (i = 0; i < count; ++i) {
        desc  = (void *)(uintptr_t)wc[i].wr_id;
        am_id = wc[i].imm;

        if (ucs_unlikely(wc[i].imm >= UCT_AM_ID_MAX) &&
            (wc[i].status == IBV_WC_SUCCESS) && (wc[i].opcode == IBV_WC_RECV)) {
            granted |= uct_dcx_iface_fc_recv(
                    iface, wc[i].imm,
                    UCS_PTR_BYTE_OFFSET(desc, iface->rx.payload_offset),
                    wc[i].byte_len);
            ucs_mpool_put_inline(desc);
            continue;
        }

        if (ucs_unlikely((wc[i].status != IBV_WC_SUCCESS) ||
                         (wc[i].opcode != IBV_WC_RECV) ||
                         (wc[i].imm >= UCT_AM_ID_MAX))) {
            /* A malformed or failed message is dropped, never delivered. */
            ucs_debug("dcx: dropped a receive: %s (vendor error 0x%x), "
                      "opcode %d, am id %u",
                      iface->ops->wc_status_str(wc[i].status), wc[i].vendor_err,
                      wc[i].opcode, wc[i].imm);
            ucs_mpool_put_inline(desc);
            continue;
        }

        udesc = UCS_PTR_BYTE_OFFSET(desc, iface->rx.headroom_offset);
        uct_recv_desc(udesc) = &iface->rx.release_desc;
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, am_id,
                           UCS_PTR_BYTE_OFFSET(desc, iface->rx.payload_offset),
                           wc[i].byte_len, "RX: AM");
        status = uct_iface_invoke_am(
                &iface->super, am_id,
                UCS_PTR_BYTE_OFFSET(desc, iface->rx.payload_offset),
                wc[i].byte_len, UCT_CB_PARAM_FLAG_DESC);
        if (status == UCS_OK) {
            ucs_mpool_put_inline(desc);
        }
    }

    /* Refill in batches: one post call (one doorbell on hardware) per
     * rx.refill_batch messages, not per message. */
    if ((iface->rx.queue_len - iface->rx.posted) >= iface->rx.refill_batch) {
        uct_dcx_iface_post_recv(iface);
    }
    if (ucs_unlikely(granted)) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1, uct_dcx_ep_pending_dispatch,
                             NULL);
    }
    return count;
}

/* Receives go through dcx's own SRQ writer and CQE parser (UCX_DCX_POST
 * direct or auto) where the provider describes the receive CQ and the SRQ;
 * through rdma-core's otherwise (auto, verbs). */
static ucs_status_t
uct_dcx_iface_rx_objects(uct_dcx_iface_t *iface, const char *dev_name)
{
    const char *reason = "UCX_DCX_POST=verbs";
    ucs_status_t status;

    iface->rx.poll_cq       = iface->rx.cq;
    iface->rx.post_srq      = iface->rx.srq;
    iface->rx.post_srq_recv = iface->rx.srq->context->ops.post_srq_recv;
    iface->rx.direct        = NULL;
    if (iface->tx.post == UCT_DCX_POST_VERBS) {
        return UCS_OK;
    }

    status = uct_dcx_direct_rx_create(iface->ops, ibv_cq_ex_to_cq(iface->rx.cq),
                                      iface->rx.srq, &iface->rx.direct,
                                      &iface->rx.poll_cq, &iface->rx.post_srq,
                                      &iface->rx.post_srq_recv, &reason);
    if (status == UCS_OK) {
        ucs_debug("dcx: %s: dcx posts its own receives and parses its "
                  "receive CQEs",
                  dev_name);
    } else if (iface->tx.post == UCT_DCX_POST_DIRECT) {
        ucs_error("dcx: %s: UCX_DCX_POST=direct: receive side: %s", dev_name,
                  reason);
    } else {
        ucs_debug("dcx: %s: receiving through rdma-core: %s", dev_name, reason);
        status = UCS_OK;
    }
    return status;
}

/* The shared receive queue of the DCT, as long as the device allows, and
 * how receives are posted and polled. */
ucs_status_t
uct_dcx_iface_srq_create(uct_dcx_iface_t *iface, const char *dev_name)
{
    struct ibv_srq_init_attr srq_attr = {};
    ucs_status_t status;

    srq_attr.attr.max_wr  = iface->rx.queue_len;
    srq_attr.attr.max_sge = 1;
    iface->rx.srq         = iface->ops->create_srq(iface->md->pd, &srq_attr);
    if (iface->rx.srq == NULL) {
        ucs_error("dcx: %s: cannot create an srq of %u entries: %m", dev_name,
                  iface->rx.queue_len);
        return UCS_ERR_IO_ERROR;
    }
    iface->rx.queue_len = ucs_min(iface->rx.queue_len, srq_attr.attr.max_wr);
    /* A quarter of the queue at most may be missing before a refill. */
    iface->rx.refill_batch = ucs_max(ucs_min(UCT_DCX_RX_POST_BATCH,
                                             iface->rx.queue_len / 4),
                                     1);

    status = uct_dcx_iface_rx_objects(iface, dev_name);
    if (status != UCS_OK) {
        iface->ops->destroy_srq(iface->rx.srq);
    }
    return status;
}

void uct_dcx_iface_srq_destroy(uct_dcx_iface_t *iface)
{
    iface->ops->destroy_srq(iface->rx.srq);
    if (iface->rx.direct != NULL) {
        uct_dcx_direct_rx_destroy(iface->rx.direct);
        iface->rx.direct = NULL;
    }
}

/* Fill the SRQ; the pool of receive buffers exists by now. */
ucs_status_t
uct_dcx_iface_rx_start(uct_dcx_iface_t *iface, const char *dev_name)
{
    struct ibv_srq_attr srq_mod = {};
    int ret;

    iface->rx.refill = 0;
    uct_dcx_iface_post_recv(iface);
    if (iface->rx.posted == 0) {
        ucs_error("dcx: %s: cannot post receive buffers", dev_name);
        return UCS_ERR_NO_MEMORY;
    }

    /* A device event (logged by the memory domain) tells when receive
     * buffers run low: the one sign of a receiver that falls behind. */
    srq_mod.srq_limit = ucs_max(iface->rx.queue_len / 8, 1);
    ret = iface->ops->modify_srq(iface->rx.srq, &srq_mod, IBV_SRQ_LIMIT);
    if (ret != 0) {
        ucs_debug("dcx: %s: cannot arm the srq limit: %s", dev_name,
                  strerror(ret));
    }
    return UCS_OK;
}
