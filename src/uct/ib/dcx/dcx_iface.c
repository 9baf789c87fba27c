/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The interface's lifecycle: its devices, query and performance figures,
 * progress and events, and the constructor as a sequence of init steps,
 * each undone in reverse by the destructor. The steps themselves live
 * with their concept: dcx_qp.c (CQs, DCT, DCIs), dcx_dci.c (the DCI
 * pool), dcx_rx.c (SRQ and receive buffers), dcx_fc.c (flow control),
 * dcx_peer.c (peers, address handles, RoCE), dcx_mem_view.c.
 */
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <string.h>


static ucs_status_t
uct_dcx_query_tl_devices(uct_md_h uct_md, uct_tl_device_resource_t **devices_p,
                         unsigned *num_devices_p)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);
    uct_tl_device_resource_t *devices;
    unsigned i;

    if ((md->device == NULL) || (md->device->num_ports == 0)) {
        *devices_p     = NULL;
        *num_devices_p = 0;
        return UCS_OK;
    }

    devices = ucs_calloc(md->device->num_ports, sizeof(*devices),
                         "dcx tl devices");
    if (devices == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < md->device->num_ports; ++i) {
        ucs_snprintf_zero(devices[i].name, sizeof(devices[i].name), "%s:%u",
                          md->device->name, md->device->ports[i]);
        devices[i].type       = UCT_DEVICE_TYPE_NET;
        devices[i].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    }

    *devices_p     = devices;
    *num_devices_p = md->device->num_ports;
    return UCS_OK;
}

/* Atomics as the device has them (see uct_dcx_iface_ext_atomics). */
static void uct_dcx_iface_query_atomics(const uct_dcx_iface_t *iface,
                                        uct_iface_attr_t *attr)
{
    /* 64-bit atomics: add, fetch-add and compare-swap natively, the others
     * as masked atomics where the device has them, else as compare-swap
     * loops on the device. A device without atomics offers none, so UCP
     * emulates them. */
    if (iface->config.atomics) {
        attr->cap.flags |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic64.op_flags = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                      UCS_BIT(UCT_ATOMIC_OP_AND) |
                                      UCS_BIT(UCT_ATOMIC_OP_OR) |
                                      UCS_BIT(UCT_ATOMIC_OP_XOR);
        attr->cap.atomic64.fop_flags = attr->cap.atomic64.op_flags |
                                       UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                                       UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }

    /* 32-bit atomics: masked (extended) atomics in raw WQEs, only where the
     * device's atomic capabilities list them for DC. */
    if (iface->config.ext_atomics32) {
        attr->cap.flags |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic32.op_flags = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                      UCS_BIT(UCT_ATOMIC_OP_AND) |
                                      UCS_BIT(UCT_ATOMIC_OP_OR) |
                                      UCS_BIT(UCT_ATOMIC_OP_XOR);
        attr->cap.atomic32.fop_flags = attr->cap.atomic32.op_flags |
                                       UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                                       UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }
}

static ucs_status_t
uct_dcx_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    size_t max_msg         = iface->port_attr.max_msg_sz;
    uct_dcx_iface_perf_t perf;

    uct_base_iface_query(&iface->super, attr);

    attr->iface_addr_len  = sizeof(uct_dcx_iface_addr_t);
    attr->device_addr_len = sizeof(uct_dcx_dev_addr_t) +
                            (iface->is_global ? sizeof(union ibv_gid) : 0);
    attr->ep_addr_len   = 0;
    attr->max_conn_priv = 0;

    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                            UCT_IFACE_FLAG_EVENT_RECV | UCT_IFACE_FLAG_EVENT_FD;

    attr->cap.flags = 0;
    if (!uct_dcx_iface_dci_shared(iface) &&
        (iface->tx.stream_dci == UCT_DCX_NO_STREAM_DCI)) {
        /* A failure fails only the endpoint that owns the DCI (not so on
         * dcs_hybrid's stream DCI, shared as under hw_dcs). */
        attr->cap.flags |= UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                           UCT_IFACE_FLAG_ERRHANDLE_ZCOPY_BUF |
                           UCT_IFACE_FLAG_ERRHANDLE_REMOTE_MEM |
                           UCT_IFACE_FLAG_EP_CHECK;
    }

    attr->cap.flags |= UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                       UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT |
                       UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                       UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                       UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                       UCT_IFACE_FLAG_CONNECT_TO_IFACE;

    uct_dcx_iface_query_atomics(iface, attr);

    attr->cap.put.max_short       = iface->tx.max_inline;
    attr->cap.put.max_bcopy       = iface->tx.seg_size;
    attr->cap.put.min_zcopy       = 0;
    attr->cap.put.max_zcopy       = max_msg;
    attr->cap.put.opt_zcopy_align = UCS_SYS_PCI_MAX_PAYLOAD;
    attr->cap.put.align_mtu       = (128u << iface->config.path_mtu);
    attr->cap.put.max_iov         = iface->umr.max_iov;

    attr->cap.get.max_bcopy       = iface->tx.seg_size;
    attr->cap.get.min_zcopy       = 0;
    attr->cap.get.max_zcopy       = max_msg;
    attr->cap.get.opt_zcopy_align = UCS_SYS_PCI_MAX_PAYLOAD;
    attr->cap.get.align_mtu       = attr->cap.put.align_mtu;
    attr->cap.get.max_iov         = iface->umr.max_iov;

    /* Active messages carry their id in the immediate data. */
    attr->cap.am.max_short       = iface->tx.max_inline;
    attr->cap.am.max_bcopy       = iface->tx.seg_size;
    attr->cap.am.min_zcopy       = 0;
    attr->cap.am.max_zcopy       = iface->tx.seg_size;
    attr->cap.am.opt_zcopy_align = UCS_SYS_PCI_MAX_PAYLOAD;
    attr->cap.am.align_mtu       = attr->cap.put.align_mtu;
    attr->cap.am.max_hdr         = iface->tx.seg_size / 2;
    attr->cap.am.max_iov         = iface->tx.max_sge - 1;

    uct_dcx_iface_perf_get(tl_iface, UCT_DCX_PERF_OP_ANY, &perf);
    attr->latency             = ucs_linear_func_make(perf.latency, 0);
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = perf.bandwidth;
    attr->overhead            = perf.send_pre_overhead;
    attr->priority            = 0;
    return UCS_OK;
}

/* Payload rate of one lane in Gb/s after line encoding, by the port's
 * active_speed (IBTA: 8b/10b up to QDR, 64b/66b from FDR10 on). */
static double uct_dcx_iface_lane_gbps(uint8_t active_speed)
{
    switch (active_speed) {
    case 1:
        return 2.0; /* SDR */
    case 2:
        return 4.0; /* DDR */
    case 4:
        return 8.0; /* QDR */
    case 8:
        return 10.0; /* FDR10 */
    case 16:
        return 13.64; /* FDR */
    case 32:
        return 25.0; /* EDR */
    case 64:
        return 50.0; /* HDR */
    case 128:
        return 100.0; /* NDR */
    default:
        return 2.0; /* unknown: the slowest */
    }
}

/* Lanes of the link, by the port's active_width. */
static unsigned uct_dcx_iface_lanes(uint8_t active_width)
{
    switch (active_width) {
    case 1:
        return 1;
    case 2:
        return 4;
    case 4:
        return 8;
    case 8:
        return 12;
    case 16:
        return 2;
    default:
        return 1;
    }
}

void uct_dcx_iface_perf_get(uct_iface_h tl_iface, uct_dcx_perf_op_t op,
                            uct_dcx_iface_perf_t *perf)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    /* A packet carries one path MTU of payload behind LRH/GRH, BTH, the
     * DC extended header (DCETH) and the CRCs. */
    double mtu  = 128u << iface->config.path_mtu;
    double hdrs = (iface->is_global ? 40 + 8 : 8) + 12 + 16 + 4 + 2;
    double wire = uct_dcx_iface_lane_gbps(iface->port_attr.active_speed) *
                  uct_dcx_iface_lanes(iface->port_attr.active_width) * 1e9 / 8;

    /* Estimates for mlx5, as UCX models its IB transports: writing a WQE
     * and ringing the doorbell cost the CPU ~40 ns each; retiring a CQE
     * ~50 ns; receiving a message ~75 ns; the NIC fetching a WQE it was
     * not given inline adds ~350 ns; DC's connect adds ~60 ns on the wire
     * to the port's ~600 ns (RoCE: +200 ns). */
    perf->bandwidth          = wire * mtu / (mtu + hdrs);
    perf->latency            = 660e-9 + (iface->is_roce ? 200e-9 : 0);
    perf->send_pre_overhead  = 40e-9;
    perf->send_post_overhead = 40e-9;
    perf->recv_overhead      = 75e-9;
    switch (op) {
    case UCT_DCX_PERF_OP_ZCOPY:
        perf->send_post_overhead += 50e-9;
        perf->latency += 350e-9;
        break;
    case UCT_DCX_PERF_OP_BCOPY:
        perf->latency += 350e-9;
        break;
    default:
        break;
    }
    /* Under dcs and dcs_quota an endpoint with work in flight holds a DCI;
     * under rand, hw_dcs and dcs_hybrid any number share them. */
    perf->max_inflight_eps = (uct_dcx_iface_dci_shared(iface) ||
                              (iface->tx.stream_dci != UCT_DCX_NO_STREAM_DCI)) ?
                                     SIZE_MAX :
                                     iface->tx.pool.size;
}

/* Whether a handle passed to the public API (include/uct/ib/dcx/dcx.h) is a
 * dcx interface: every UCT interface is a base interface, and only dcx's
 * point to dcx's internal operations table (unlike its public operations,
 * which UCX copies into the handle and a wrapper may replace). */
int uct_dcx_iface_is_dcx(uct_iface_h tl_iface)
{
    return (tl_iface != NULL) &&
           (ucs_derived_of(tl_iface, uct_base_iface_t)->internal_ops ==
            &uct_dcx_iface_internal_ops);
}

size_t uct_dcx_iface_put_sgl_max(uct_iface_h tl_iface)
{
    return ucs_derived_of(tl_iface, uct_dcx_iface_t)->tx.put_sgl_max;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t
uct_dcx_iface_query_tx(uct_iface_h tl_iface, uct_dcx_tx_counters_t *counters)
{
    if (!uct_dcx_iface_is_dcx(tl_iface) || (counters == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    *counters = ucs_derived_of(tl_iface, uct_dcx_iface_t)->tx.stats;
    return UCS_OK;
}

/* --- device capabilities ---------------------------------------------- */

unsigned uct_dcx_iface_progress(uct_iface_h tl_iface)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    unsigned count;

    count = uct_dcx_iface_poll_rx(iface);
    count += uct_dcx_iface_poll_tx(iface);
    if (ucs_unlikely(iface->umr.engine != NULL)) {
        count += uct_dcx_iface_umr_progress(iface);
    }
    if (ucs_unlikely(!ucs_queue_is_empty(&iface->fc.grants) ||
                     (kh_size(&iface->fc.waiting) > 0))) {
        uct_dcx_iface_fc_progress(iface);
    }
    return count;
}

static ucs_status_t uct_dcx_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    *fd_p = iface->channel->fd;
    return UCS_OK;
}

/* Arm the CQs for the next completion. Events already delivered mean work
 * to progress (UCS_ERR_BUSY); CQEs not yet polled fire the armed CQ at
 * once, as mlx5 arms carry the consumer index. */
static ucs_status_t
uct_dcx_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    struct ibv_cq *cq;
    void *cq_context;
    int pending = 0;
    int ret;

    while (iface->ops->get_cq_event(iface->channel, &cq, &cq_context) == 0) {
        if ((iface->tx.direct != NULL) &&
            (cq == ibv_cq_ex_to_cq(iface->tx.cq))) {
            uct_dcx_direct_cq_event(iface->tx.direct);
        } else if ((iface->rx.direct != NULL) &&
                   (cq == ibv_cq_ex_to_cq(iface->rx.cq))) {
            uct_dcx_direct_rx_cq_event(iface->rx.direct);
        }
        iface->ops->ack_cq_events(cq, 1);
        pending = 1;
    }

    /* Queued grants and due credit requests need progress, not events. */
    if (pending || !ucs_arbiter_is_empty(&iface->tx.arbiter) ||
        !ucs_queue_is_empty(&iface->fc.grants) ||
        ((kh_size(&iface->fc.waiting) > 0) &&
         (ucs_get_time() >= iface->fc.next_check))) {
        return UCS_ERR_BUSY;
    }

    if (events & UCT_EVENT_SEND_COMP) {
        /* An unsignaled tail would never raise the event. */
        uct_dcx_iface_dcis_request_completions(iface);
        if (iface->tx.direct != NULL) {
            /* libmlx5 knows nothing of the CQEs dcx consumed */
            uct_dcx_direct_cq_arm(iface->tx.direct, 0);
            ret = 0;
        } else {
            ret = ibv_req_notify_cq(ibv_cq_ex_to_cq(iface->tx.cq), 0);
        }
        if (ret != 0) {
            ucs_error("dcx: req_notify_cq(tx) failed: %s", strerror(ret));
            return UCS_ERR_IO_ERROR;
        }
    }

    if (events & (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG)) {
        if (iface->rx.direct != NULL) {
            /* libmlx5 knows nothing of the CQEs dcx consumed */
            uct_dcx_direct_rx_cq_arm(iface->rx.direct, 0);
            ret = 0;
        } else {
            ret = ibv_req_notify_cq(ibv_cq_ex_to_cq(iface->rx.cq), 0);
        }
        if (ret != 0) {
            ucs_error("dcx: req_notify_cq(rx) failed: %s", strerror(ret));
            return UCS_ERR_IO_ERROR;
        }
    }

    return UCS_OK;
}

static void
uct_dcx_iface_tx_op_init(uct_iface_h tl_iface, void *obj, uct_mem_h memh)
{
    uct_dcx_op_t *op = obj;

    op->iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    op->lkey  = uct_dcx_memh_lkey(memh);
}

static ucs_mpool_ops_t uct_dcx_malloc_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

static uct_iface_ops_t uct_dcx_iface_tl_ops;

/* InfiniBand addressing, as UCX's: the port's GID (index 0), and a GRH on
 * every packet where the port requires one (libmlx5 refuses an address
 * handle without it), has no LID, has a GID outside the link-local prefix
 * (the subnet has routers) or UCX_DCX_IS_GLOBAL asks for it. */
static ucs_status_t
uct_dcx_iface_init_ib_gid(uct_dcx_iface_t *iface,
                          const uct_dcx_iface_config_t *config,
                          const char *dev_name)
{
    const char *why;
    int ret;

    iface->config.hop_limit     = config->hop_limit;
    iface->config.traffic_class = (config->traffic_class == UCS_ULUNITS_AUTO) ?
                                          0 :
                                          config->traffic_class;
    ret = iface->ops->query_gid(iface->md->ctx, iface->port, 0, &iface->gid);
    if (ret != 0) {
        ucs_error("dcx: %s: query_gid(0) failed: %m", dev_name);
        return UCS_ERR_IO_ERROR;
    }

    if (config->is_global) {
        why = "UCX_DCX_IS_GLOBAL";
    } else if (iface->port_attr.flags & IBV_QPF_GRH_REQUIRED) {
        why = "the port requires a GRH";
    } else if (iface->port_attr.lid == 0) {
        why = "the port has no LID";
    } else if (be64toh(iface->gid.global.subnet_prefix) !=
               UCT_DCX_IB_LINK_LOCAL_PREFIX) {
        why = "the port's GID is not link-local";
    } else {
        return UCS_OK;
    }

    iface->is_global      = 1;
    iface->dev_addr_flags = UCT_DCX_DEV_ADDR_FLAG_IB_GID;
    ucs_debug("dcx: %s: a GRH on every packet (%s)", dev_name, why);
    return UCS_OK;
}

/* The partition of every QP (UCX_DCX_PKEY), as UCX's InfiniBand transports
 * choose it: the port's first P_Key table entry of the partition (any, for
 * "auto") with full membership, else the first with limited membership.
 * Entry 0 need not be a full member (partitioned fabrics, SR-IOV virtual
 * functions), and two limited members cannot talk. */
static ucs_status_t
uct_dcx_iface_init_pkey(uct_dcx_iface_t *iface,
                        const uct_dcx_iface_config_t *config,
                        const char *dev_name)
{
    int lim_index = -1;
    uint16_t pkey, lim_pkey = 0;
    __be16 be_pkey;
    int index;

    for (index = 0; index < iface->port_attr.pkey_tbl_len; ++index) {
        if (iface->ops->query_pkey(iface->md->ctx, iface->port, index,
                                   &be_pkey) != 0) {
            ucs_debug("dcx: %s: query_pkey(%d) failed: %m", dev_name, index);
            continue;
        }
        pkey = be16toh(be_pkey);
        if (((pkey & UCT_DCX_PKEY_PARTITION_MASK) == 0) ||
            ((config->pkey != UCS_HEXUNITS_AUTO) &&
             ((pkey & UCT_DCX_PKEY_PARTITION_MASK) != config->pkey))) {
            continue; /* an empty entry, or another partition */
        }
        if (pkey & UCT_DCX_PKEY_MEMBERSHIP_MASK) {
            lim_index = index;
            lim_pkey  = pkey;
            break;
        }
        if (lim_index < 0) {
            lim_index = index;
            lim_pkey  = pkey;
        }
    }

    if (lim_index < 0) {
        if (config->pkey == UCS_HEXUNITS_AUTO) {
            ucs_error("dcx: %s: the port has no valid P_Key", dev_name);
        } else {
            ucs_error("dcx: %s: the port has no P_Key of partition 0x%zx "
                      "(UCX_DCX_PKEY)",
                      dev_name, config->pkey);
        }
        return UCS_ERR_NO_ELEM;
    }

    iface->pkey_index = lim_index;
    iface->pkey       = lim_pkey;
    ucs_debug("dcx: %s: P_Key 0x%x at index %d%s", dev_name, lim_pkey,
              lim_index,
              (lim_pkey & UCT_DCX_PKEY_MEMBERSHIP_MASK) ? "" :
                                                          " (limited member)");
    return UCS_OK;
}

/* "<device>:<port>" of the memory domain's device, active; on RoCE the
 * source GID too. */
static ucs_status_t
uct_dcx_iface_init_port(uct_dcx_iface_t *iface, uct_dcx_md_t *md,
                        const uct_iface_params_t *params,
                        const uct_dcx_iface_config_t *config)
{
    const char *dev_name;
    unsigned port;
    ucs_status_t status;
    int ret;

    if (!(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE) ||
        (params->open_mode != UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("dcx: only device open mode is supported");
        return UCS_ERR_UNSUPPORTED;
    }

    if (md->device == NULL) {
        ucs_error("dcx: memory domain '%s' has no device",
                  UCT_DCX_NO_DEVICE_MD_NAME);
        return UCS_ERR_NO_DEVICE;
    }

    status = uct_dcx_iface_check_config(config);
    if (status != UCS_OK) {
        return status;
    }

    dev_name = params->mode.device.dev_name;
    if ((strncmp(dev_name, md->device->name, strlen(md->device->name)) != 0) ||
        (dev_name[strlen(md->device->name)] != ':') ||
        (sscanf(dev_name + strlen(md->device->name) + 1, "%u", &port) != 1) ||
        (port == 0) || (port > UINT8_MAX)) {
        ucs_error("dcx: invalid device name '%s' for memory domain %s",
                  dev_name, md->device->name);
        return UCS_ERR_NO_DEVICE;
    }

    iface->md   = md;
    iface->ops  = md->ops;
    iface->port = port;

    ret = iface->ops->query_port(md->ctx, port, &iface->port_attr);
    if (ret != 0) {
        ucs_error("dcx: %s: query_port failed: %s", dev_name, strerror(ret));
        return UCS_ERR_NO_DEVICE;
    }
    if (iface->port_attr.state != IBV_PORT_ACTIVE) {
        ucs_error("dcx: %s: port is not active", dev_name);
        return UCS_ERR_NO_DEVICE;
    }

    iface->is_roce   = (iface->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET);
    iface->is_global = iface->is_roce;
    iface->dev_addr_flags = 0;
    iface->gid_index      = 0;
    iface->config.sl      = config->sl;
    memset(&iface->gid, 0, sizeof(iface->gid));
    if (iface->is_roce) {
        iface->pkey_index = 0; /* RoCE: the default P_Key */
        iface->pkey       = UINT16_MAX;
        return uct_dcx_iface_init_roce(iface, config, dev_name);
    }

    status = uct_dcx_iface_init_ib_gid(iface, config, dev_name);
    if (status != UCS_OK) {
        return status;
    }
    return uct_dcx_iface_init_pkey(iface, config, dev_name);
}

/* What the device allows and the configuration asks: QP timers and
 * limits, atomics, the DCI pool's policy and the receive buffer layout. */
static ucs_status_t
uct_dcx_iface_init_caps(uct_dcx_iface_t *iface,
                        const uct_iface_params_t *params,
                        const uct_dcx_iface_config_t *config,
                        const char *dev_name)
{
    uct_dcx_md_t *md = iface->md;
    struct ibv_device_attr dev_attr;
    size_t rx_headroom;
    ucs_status_t status;
    int ret;

    ret = iface->ops->query_device(md->ctx, &dev_attr);
    if (ret != 0) {
        ucs_error("dcx: %s: query_device failed: %s", dev_name, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    status = uct_dcx_path_mtu(config->path_mtu, iface->port_attr.active_mtu,
                              &iface->config.path_mtu);
    if (status != UCS_OK) {
        return status;
    }

    iface->config.timeout         = uct_dcx_qp_timeout_exp(config->timeout);
    iface->config.min_rnr_timer   = uct_dcx_rnr_timer_code(config->rnr_timeout);
    iface->config.retry_count     = config->retry_count;
    iface->config.rnr_retry_count = config->rnr_retry_count;
    /* max_qp_init_rd_atom is the RC limit; a DCI has its own (QUERY_HCA_CAP
     * through DEVX), else the first DCI to connect finds it. */
    iface->config.max_rd_atomic =
            ucs_min(ucs_min(config->max_rd_atomic,
                            (unsigned)dev_attr.max_qp_init_rd_atom),
                    UINT8_MAX);
    if (md->dc_max_rd_atomic != 0) {
        iface->config.max_rd_atomic   = ucs_min(iface->config.max_rd_atomic,
                                                md->dc_max_rd_atomic);
        iface->config.rd_atomic_known = 1;
    }
    iface->config.atomics = (dev_attr.atomic_cap != IBV_ATOMIC_NONE);
    if (!iface->config.atomics) {
        ucs_debug("dcx: %s: no device atomics (atomic_cap NONE)", dev_name);
    }
    uct_dcx_iface_ext_atomics(iface, dev_name);
    iface->tx.seg_size = config->seg_size;
    uct_dcx_iface_dci_policy_select(iface, config->tx_policy);
    uct_dcx_iface_streams_init(iface, config);
    status = uct_dcx_iface_ddp_init(iface, config);
    if (status != UCS_OK) {
        return status;
    }
    /* A quota as long as the queue would never yield: cap it at half. */
    iface->tx.quota     = ucs_min(config->quota,
                                  ucs_max(config->tx_queue_len / 2, 1));
    iface->tx.rand_seed = ucs_generate_uuid((uintptr_t)iface);
    iface->rx.queue_len = ucs_min(config->rx_queue_len,
                                  (unsigned)dev_attr.max_srq_wr);

    /* Receive buffer layout: see uct_dcx_recv_desc_t. */
    rx_headroom = (params->field_mask & UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                          params->rx_headroom :
                          0;
    iface->rx.headroom_offset = ucs_align_up(sizeof(uct_dcx_recv_desc_t) +
                                                     sizeof(uct_recv_desc_t *),
                                             sizeof(void *));
    iface->rx.payload_offset  = iface->rx.headroom_offset + rx_headroom;
    iface->rx.release_desc.cb = uct_dcx_iface_release_desc;
    return UCS_OK;
}

/* Operations with their send buffers, flush operations, pending grants,
 * endpoints and receive buffers. */
static ucs_status_t
uct_dcx_iface_mpools_init(uct_dcx_iface_t *iface,
                          const uct_iface_params_t *params,
                          const uct_dcx_iface_config_t *config)
{
    size_t op_size, rx_align, rx_align_offset;
    ucs_status_t status;

    op_size = sizeof(uct_dcx_op_t) + iface->tx.seg_size;
    status  = uct_iface_mpool_init(&iface->super, &iface->tx.mp, op_size,
                                   ucs_offsetof(uct_dcx_op_t, buf),
                                   UCS_SYS_CACHE_LINE_SIZE, &config->tx_mp,
                                   config->tx_queue_len,
                                   uct_dcx_iface_tx_op_init, "dcx_tx");
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_compat_mpool_init(&iface->tx.flush_mp,
                                       sizeof(uct_dcx_op_t),
                                       UCS_SYS_CACHE_LINE_SIZE, 128, UINT_MAX,
                                       &uct_dcx_malloc_mpool_ops, "dcx_flush");
    if (status != UCS_OK) {
        goto err_cleanup_tx_mp;
    }

    status = uct_dcx_compat_mpool_init(&iface->fc.grant_mp,
                                       sizeof(uct_dcx_fc_pending_grant_t),
                                       UCS_SYS_CACHE_LINE_SIZE, 64, 4096,
                                       &uct_dcx_malloc_mpool_ops,
                                       "dcx_fc_grants");
    if (status != UCS_OK) {
        goto err_cleanup_flush_mp;
    }

    status = uct_dcx_compat_mpool_init(&iface->ep_mp, sizeof(uct_dcx_ep_t),
                                       sizeof(void *), 1024, UINT_MAX,
                                       &uct_dcx_malloc_mpool_ops, "dcx_eps");
    if (status != UCS_OK) {
        goto err_cleanup_grant_mp;
    }

    /* By default the user's headroom starts cache-line aligned; with
     * UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT the payload (plus the requested
     * offset) is aligned as asked. */
    status = uct_iface_param_am_alignment(params, iface->tx.seg_size,
                                          iface->rx.headroom_offset,
                                          iface->rx.payload_offset, &rx_align,
                                          &rx_align_offset);
    if (status != UCS_OK) {
        goto err_cleanup_ep_mp;
    }

    status = uct_iface_mpool_init(&iface->super, &iface->rx.mp,
                                  iface->rx.payload_offset + iface->tx.seg_size,
                                  rx_align_offset, rx_align, &config->rx_mp,
                                  iface->rx.queue_len,
                                  uct_dcx_iface_recv_desc_init, "dcx_rx");
    if (status != UCS_OK) {
        goto err_cleanup_ep_mp;
    }
    return UCS_OK;

err_cleanup_ep_mp:
    ucs_mpool_cleanup(&iface->ep_mp, 0);
err_cleanup_grant_mp:
    ucs_mpool_cleanup(&iface->fc.grant_mp, 0);
err_cleanup_flush_mp:
    ucs_mpool_cleanup(&iface->tx.flush_mp, 0);
err_cleanup_tx_mp:
    ucs_mpool_cleanup(&iface->tx.mp, 0);
    return status;
}

/* @a leak_check: whether to report what was not returned (receive buffers
 * may be held by the user). */
static void uct_dcx_iface_mpools_cleanup(uct_dcx_iface_t *iface, int leak_check)
{
    ucs_mpool_cleanup(&iface->fc.grant_mp, leak_check);
    ucs_mpool_cleanup(&iface->ep_mp, leak_check);
    ucs_mpool_cleanup(&iface->rx.mp, 0);
    ucs_mpool_cleanup(&iface->tx.flush_mp, leak_check);
    ucs_mpool_cleanup(&iface->tx.mp, leak_check);
}

/* What needs no device resource: pending requests, peers, flow control and
 * the strided path's settings. */
static void uct_dcx_iface_tables_init(uct_dcx_iface_t *iface,
                                      const uct_dcx_iface_config_t *config)
{
    ucs_arbiter_init(&iface->tx.arbiter);
    iface->tx.dispatching = NULL;
    uct_dcx_iface_peers_init(iface);
    uct_dcx_iface_fc_init(iface, config);
    uct_dcx_iface_umr_init(iface, config);
}

static void uct_dcx_iface_tables_cleanup(uct_dcx_iface_t *iface)
{
    ucs_arbiter_cleanup(&iface->tx.arbiter);
    uct_dcx_iface_fc_cleanup(iface);
    uct_dcx_iface_peers_cleanup(iface);
}

/* Each step below is undone by the labels at the end, in reverse, and by
 * the destructor. */
static UCS_CLASS_INIT_FUNC(uct_dcx_iface_t, uct_md_h tl_md, uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_dcx_iface_config_t *config =
            ucs_derived_of(tl_config, uct_dcx_iface_config_t);
    uct_dcx_md_t *md = ucs_derived_of(tl_md, uct_dcx_md_t);
    const char *dev_name;
    ucs_status_t status;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_dcx_iface_tl_ops,
                              &uct_dcx_iface_internal_ops, tl_md, worker,
                              params, tl_config);

    /* Classes are allocated without zeroing. */
    memset(UCS_PTR_BYTE_OFFSET(self, sizeof(self->super)), 0,
           sizeof(*self) - sizeof(self->super));

    status = uct_dcx_iface_init_port(self, md, params, config);
    if (status != UCS_OK) {
        return status;
    }

    dev_name = params->mode.device.dev_name;
    status   = uct_dcx_iface_init_caps(self, params, config, dev_name);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_iface_queues_create(self, config, dev_name);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_iface_dci_pool_init(self, config);
    if (status != UCS_OK) {
        goto err_queues_destroy;
    }

    status = uct_dcx_iface_mpools_init(self, params, config);
    if (status != UCS_OK) {
        goto err_dci_pool_cleanup;
    }

    uct_dcx_iface_tables_init(self, config);

    status = uct_dcx_iface_rx_start(self, dev_name);
    if (status != UCS_OK) {
        goto err_cleanup_tables;
    }

    /* Last: from now on the event thread may ask for uct_dcx_iface_fail. */
    uct_dcx_iface_fatal_listen(self);

    ucs_debug("dcx: %s: iface %p dct 0x%x, %u dcis, inline %zu, sge %u",
              dev_name, self, self->rx.dctn, self->tx.pool.size,
              self->tx.max_inline, self->tx.max_sge);
    return UCS_OK;

err_cleanup_tables:
    uct_dcx_iface_tables_cleanup(self);
    uct_dcx_iface_mpools_cleanup(self, 0);
err_dci_pool_cleanup:
    uct_dcx_iface_dci_pool_cleanup(self);
err_queues_destroy:
    uct_dcx_iface_queues_destroy(self);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_dcx_iface_t)
{
    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_dcx_iface_fatal_unlisten(self);

    /* The DCIs first: what still waits for them is cancelled (see
     * uct_dcx_iface_dci_pool_cleanup), then the UMR engine goes away. */
    uct_dcx_iface_dci_pool_cleanup(self);
    uct_dcx_iface_umr_cleanup(self);
    uct_dcx_iface_queues_destroy(self);
    uct_dcx_iface_tables_cleanup(self);
    uct_dcx_iface_mpools_cleanup(self, 1);
}

UCS_CLASS_DEFINE(uct_dcx_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_dcx_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t *,
                                 const uct_iface_config_t *);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_dcx_iface_t, uct_iface_t);

static uct_iface_ops_t uct_dcx_iface_tl_ops = {
    .ep_put_short             = uct_dcx_ep_put_short,
    .ep_put_bcopy             = uct_dcx_ep_put_bcopy,
    .ep_put_zcopy             = uct_dcx_ep_put_zcopy,
    .ep_get_bcopy             = uct_dcx_ep_get_bcopy,
    .ep_get_zcopy             = uct_dcx_ep_get_zcopy,
    .ep_am_short              = uct_dcx_ep_am_short,
    .ep_am_short_iov          = uct_dcx_ep_am_short_iov,
    .ep_am_bcopy              = uct_dcx_ep_am_bcopy,
    .ep_am_zcopy              = uct_dcx_ep_am_zcopy,
    .ep_atomic_cswap64        = uct_dcx_ep_atomic_cswap64,
    .ep_atomic_cswap32        = uct_dcx_ep_atomic_cswap32,
    .ep_atomic32_post         = uct_dcx_ep_atomic32_post,
    .ep_atomic32_fetch        = uct_dcx_ep_atomic32_fetch,
    .ep_atomic64_post         = uct_dcx_ep_atomic64_post,
    .ep_atomic64_fetch        = uct_dcx_ep_atomic64_fetch,
    .ep_check                 = uct_dcx_ep_check,
    .ep_pending_add           = uct_dcx_ep_pending_add,
    .ep_pending_purge         = uct_dcx_ep_pending_purge,
    .ep_flush                 = uct_dcx_ep_flush,
    .ep_fence                 = uct_dcx_ep_fence,
    .ep_create                = uct_dcx_ep_create,
    .ep_destroy               = uct_dcx_ep_destroy,
    .ep_get_address           = UCT_DCX_STUB(uct_ep_get_address_func_t,
                                             ucs_empty_function_return_unsupported),
    .ep_connect_to_ep         = UCT_DCX_STUB(uct_ep_connect_to_ep_func_t,
                                             ucs_empty_function_return_unsupported),
    .iface_flush              = uct_dcx_iface_flush,
    .iface_fence              = uct_dcx_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_dcx_iface_progress,
    .iface_event_fd_get       = uct_dcx_iface_event_fd_get,
    .iface_event_arm          = uct_dcx_iface_event_arm,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(uct_dcx_iface_t),
    .iface_query              = uct_dcx_iface_query,
    .iface_get_device_address = uct_dcx_iface_get_device_address,
    .iface_get_address        = uct_dcx_iface_get_address,
    .iface_is_reachable       = uct_dcx_compat_iface_is_reachable
};

uct_tl_t uct_dcx_tl = { .name          = "dcx",
                        .query_devices = uct_dcx_query_tl_devices,
                        .iface_open = UCS_CLASS_NEW_FUNC_NAME(uct_dcx_iface_t),
                        .config     = {
                                    .name   = "dcx transport",
                                    .prefix = "DCX_",
                                    .table  = uct_dcx_iface_config_table,
                                    .size   = sizeof(uct_dcx_iface_config_t),
                        } };
