/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The dcx transport: configuration, devices, and the interface (DCT, SRQ,
 * CQs, DCI pool, receive and completion progress).
 */
#include "dcx_iface.h"

#include <ucs/arch/bitops.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>


const char *uct_dcx_tx_policy_names[] = {
    [UCT_DCX_TX_POLICY_DCS]       = "dcs",
    [UCT_DCX_TX_POLICY_DCS_QUOTA] = "dcs_quota",
    [UCT_DCX_TX_POLICY_RAND]      = "rand",
    [UCT_DCX_TX_POLICY_LAST]      = NULL
};

ucs_config_field_t uct_dcx_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_dcx_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"NUM_DCI", "32",
     "Number of DC initiator QPs (DCIs) in the pool of each interface. An\n"
     "endpoint holds a DCI only while it has outstanding operations, so the\n"
     "pool bounds the number of peers served concurrently, not the number\n"
     "of endpoints.",
     ucs_offsetof(uct_dcx_iface_config_t, num_dci), UCS_CONFIG_TYPE_UINT},

    {"TX_POLICY", "dcs_quota",
     "How endpoints share the DCI pool:\n"
     " dcs       - an endpoint takes a DCI while it has operations outstanding\n"
     "             and returns it when they have completed; endpoints that\n"
     "             find the pool empty wait in turn.\n"
     " dcs_quota - as dcs, but while other endpoints wait for a DCI, an\n"
     "             endpoint with QUOTA operations outstanding stops until its\n"
     "             DCI drains, so one busy endpoint cannot starve the others.\n"
     " rand      - every endpoint uses a DCI chosen at random when it is\n"
     "             created, shared with other endpoints and never returned:\n"
     "             nobody waits for a DCI, but an error on a DCI fails every\n"
     "             endpoint that uses it, so peer failure handling is not\n"
     "             offered.",
     ucs_offsetof(uct_dcx_iface_config_t, tx_policy),
     UCS_CONFIG_TYPE_ENUM(uct_dcx_tx_policy_names)},

    {"QUOTA", "32",
     "With the dcs_quota policy: the outstanding operations after which an\n"
     "endpoint yields its DCI to endpoints that wait for one (at most half\n"
     "of TX_QUEUE_LEN).",
     ucs_offsetof(uct_dcx_iface_config_t, quota), UCS_CONFIG_TYPE_UINT},

    {"TX_QUEUE_LEN", "256",
     "Length of the send queue of each DCI: the work requests it holds at\n"
     "once (the device may allocate more; they are not used, so that the\n"
     "send completion queue of NUM_DCI x TX_QUEUE_LEN entries never\n"
     "overruns).",
     ucs_offsetof(uct_dcx_iface_config_t, tx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"TX_CQ_MODERATION", "64",
     "Maximum number of work requests a DCI posts without asking for a\n"
     "completion (as UCX's rc transports). Requests that an operation waits\n"
     "for always ask for one, and so does every request while endpoints wait\n"
     "for a DCI. At most a quarter of TX_QUEUE_LEN is used; 0 or 1: every\n"
     "request asks for a completion.",
     ucs_offsetof(uct_dcx_iface_config_t, tx_cq_moderation),
     UCS_CONFIG_TYPE_UINT},

    {"RX_QUEUE_LEN", "4095",
     "Number of receive buffers posted to the shared receive queue of the\n"
     "interface's DC target (DCT).",
     ucs_offsetof(uct_dcx_iface_config_t, rx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"SEG_SIZE", "8256",
     "Size of bounce buffers used for bcopy sends and for receives: the\n"
     "largest active message that is not zero-copy.",
     ucs_offsetof(uct_dcx_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"TX_MAX_INLINE", "256",
     "Inline data requested for each DCI work request; the device may grant\n"
     "more or less (it writes back the effective size, which bounds the\n"
     "short active message and put sizes). A device that refuses a DCI this\n"
     "large is asked for half as much, then for half TX_QUEUE_LEN, until it\n"
     "agrees.",
     ucs_offsetof(uct_dcx_iface_config_t, tx_max_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"TIMEOUT", "1s",
     "Transport timeout of one try of a DCI request (rounded to the IB\n"
     "exponent 4.096us * 2^N). A peer that does not answer is reported after\n"
     "(RETRY_COUNT + 1) tries.",
     ucs_offsetof(uct_dcx_iface_config_t, timeout), UCS_CONFIG_TYPE_TIME},

    {"RETRY_COUNT", "7",
     "Transport retries of a DCI request before its endpoint fails (0..7).",
     ucs_offsetof(uct_dcx_iface_config_t, retry_count), UCS_CONFIG_TYPE_UINT},

    {"RNR_TIMEOUT", "1ms",
     "How long a sender waits before retrying when this interface has no\n"
     "receive buffer posted (the DCT's RNR NAK timer, rounded to the IB\n"
     "table of values).",
     ucs_offsetof(uct_dcx_iface_config_t, rnr_timeout), UCS_CONFIG_TYPE_TIME},

    {"RNR_RETRY_COUNT", "7",
     "Receiver-not-ready retries of a DCI request before its endpoint fails\n"
     "(0..7; 7 retries forever).",
     ucs_offsetof(uct_dcx_iface_config_t, rnr_retry_count),
     UCS_CONFIG_TYPE_UINT},

    {"SL", "0",
     "InfiniBand service level of DCIs and of the DCT.",
     ucs_offsetof(uct_dcx_iface_config_t, sl), UCS_CONFIG_TYPE_UINT},

    {"GID_INDEX", "auto",
     "RoCE: index of the port's GID table entry that is the source address of\n"
     "every packet (address handles, the DCIs, the DCT). \"auto\" takes the\n"
     "first usable entry in UCX's order: RoCE v2 IPv4-mapped, RoCE v2 IPv6\n"
     "(not link-local first), then the same for RoCE v1. Peers must use GIDs\n"
     "of the same RoCE version and address family. InfiniBand ports route by\n"
     "LID and ignore it.",
     ucs_offsetof(uct_dcx_iface_config_t, gid_index), UCS_CONFIG_TYPE_ULUNITS},

    {"HOP_LIMIT", "255",
     "RoCE: hop limit (IPv6) / time to live (IPv4) of every packet, the DCT's\n"
     "responses included (0..255). A packet that crosses more routers is lost.",
     ucs_offsetof(uct_dcx_iface_config_t, hop_limit), UCS_CONFIG_TYPE_UINT},

    {"TRAFFIC_CLASS", "auto",
     "RoCE: traffic class (DSCP and ECN bits) of every packet, the DCT's\n"
     "responses included (0..255). \"auto\" is 106 on RoCE v2 and 0 on RoCE v1,\n"
     "as UCX's UCX_IB_TRAFFIC_CLASS.",
     ucs_offsetof(uct_dcx_iface_config_t, traffic_class),
     UCS_CONFIG_TYPE_ULUNITS},

    {"MAX_RD_ATOMIC", "16",
     "Outstanding RDMA reads and atomics per DCI (bounded by the device).",
     ucs_offsetof(uct_dcx_iface_config_t, max_rd_atomic), UCS_CONFIG_TYPE_UINT},

    {"PATH_MTU", "0",
     "Path MTU in bytes (256, 512, 1024, 2048 or 4096); 0 uses the port's\n"
     "active MTU.",
     ucs_offsetof(uct_dcx_iface_config_t, path_mtu), UCS_CONFIG_TYPE_UINT},

    {"FC_ENABLE", "y",
     "Active-message flow control: an endpoint sends at most FC_WND_SIZE\n"
     "messages that the receiver has not yet taken, asking for more credits\n"
     "before it runs out. Keeps many senders from losing messages or driving\n"
     "a receiver's DCT into receiver-not-ready retry storms. Interfaces\n"
     "always answer credit requests, whatever this setting.",
     ucs_offsetof(uct_dcx_iface_config_t, fc_enable), UCS_CONFIG_TYPE_BOOL},

    {"FC_WND_SIZE", "512",
     "Active messages an endpoint may send before the receiver grants more\n"
     "(1..32767).",
     ucs_offsetof(uct_dcx_iface_config_t, fc_wnd_size), UCS_CONFIG_TYPE_UINT},

    {"FC_REQ_THRESH", "0.5",
     "Fraction of FC_WND_SIZE left when an endpoint asks the receiver for\n"
     "more credits (0..1; 0 asks only when the window is empty).",
     ucs_offsetof(uct_dcx_iface_config_t, fc_req_thresh),
     UCS_CONFIG_TYPE_DOUBLE},

    {"FC_GRANT_TIMEOUT", "500ms",
     "An endpoint whose credit request got no grant within this time asks\n"
     "again (a grant can be lost when the receiver's DCI fails), so no\n"
     "sender waits forever.",
     ucs_offsetof(uct_dcx_iface_config_t, fc_grant_timeout),
     UCS_CONFIG_TYPE_TIME},

    {"UMR", "try",
     "Strided zero-copy: put_zcopy/get_zcopy iov entries with count > 1 and\n"
     "a stride go through an indirect memory key programmed by UMR (needs a\n"
     "device opened with DEVX). yes - fail strided operations without UMR;\n"
     "try - without UMR, pack strided data that fits SEG_SIZE through a\n"
     "bounce buffer; no - always pack.",
     ucs_offsetof(uct_dcx_iface_config_t, umr),
     UCS_CONFIG_TYPE_TERNARY_AUTO},

    {"UMR_PACK_THRESH", "1k",
     "Strided operations of at most this many bytes (and at most SEG_SIZE)\n"
     "are packed through a bounce buffer instead of a UMR layout: below it\n"
     "the copy is cheaper than gathering many small blocks (measure with\n"
     "contrib/dcx bench umr).",
     ucs_offsetof(uct_dcx_iface_config_t, umr_pack_thresh),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"UMR_MKEYS", "256",
     "Indirect memory keys per interface: strided layouts cached for reuse\n"
     "(least recently used ones are replaced) and in flight at once.",
     ucs_offsetof(uct_dcx_iface_config_t, umr_mkeys), UCS_CONFIG_TYPE_UINT},

    {"UMR_MAX_INLINE", "512",
     "Inline space requested for the UMR QP's work requests; the device's\n"
     "written-back size bounds the entries of one UMR.",
     ucs_offsetof(uct_dcx_iface_config_t, umr_max_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"PUT_SGL", "y",
     "Offer scatter-gather put (uct_ep_put_sgl_zcopy, UCX 1.22 and later):\n"
     "the elements of one call go out as one batch of work requests on one\n"
     "DCI with one completion. n - not offered (UCP 1.22 has no other\n"
     "protocol for SGL puts and fails them).",
     ucs_offsetof(uct_dcx_iface_config_t, put_sgl), UCS_CONFIG_TYPE_BOOL},

    UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS("TX_", -1, 128, "send",
                                      ucs_offsetof(uct_dcx_iface_config_t,
                                                   tx_mp)),

    UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS("RX_", -1, 256, "receive",
                                      ucs_offsetof(uct_dcx_iface_config_t,
                                                   rx_mp)),

    {NULL}
};


/* IB RNR NAK timer codes 1..31 in microseconds (code 0 is 655.36 ms). */
static const double uct_dcx_rnr_timer_us[] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
    1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
    81920, 122880, 163840, 245760, 327680, 491520
};


static uint8_t uct_dcx_qp_timeout_exp(double seconds)
{
    uint8_t exp;

    /* The smallest 4.096us * 2^exp that is not shorter than asked. */
    for (exp = 1; exp < 31; ++exp) {
        if ((4.096e-6 * (double)(1ul << exp)) >= seconds) {
            break;
        }
    }
    return exp;
}

static uint8_t uct_dcx_rnr_timer_code(double seconds)
{
    uint8_t code;

    for (code = 1; code < ucs_static_array_size(uct_dcx_rnr_timer_us);
         ++code) {
        if (uct_dcx_rnr_timer_us[code] * 1e-6 >= seconds) {
            return code;
        }
    }
    return 0;
}

static ucs_status_t uct_dcx_path_mtu(unsigned bytes, enum ibv_mtu active,
                                     enum ibv_mtu *mtu_p)
{
    switch (bytes) {
    case 0:    *mtu_p = active;       return UCS_OK;
    case 256:  *mtu_p = IBV_MTU_256;  return UCS_OK;
    case 512:  *mtu_p = IBV_MTU_512;  return UCS_OK;
    case 1024: *mtu_p = IBV_MTU_1024; return UCS_OK;
    case 2048: *mtu_p = IBV_MTU_2048; return UCS_OK;
    case 4096: *mtu_p = IBV_MTU_4096; return UCS_OK;
    default:
        ucs_error("dcx: invalid UCX_DCX_PATH_MTU %u (256..4096 or 0)", bytes);
        return UCS_ERR_INVALID_PARAM;
    }
}

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

/* A random DC access key: a peer must know it to reach the DCT. */
static ucs_status_t uct_dcx_random_key(uint64_t *key_p)
{
    ssize_t ret;

    do {
        ret = getrandom(key_p, sizeof(*key_p), 0);
    } while ((ret < 0) && (errno == EINTR));

    if (ret != sizeof(*key_p)) {
        ucs_error("dcx: getrandom() failed: %m");
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

static ucs_status_t uct_dcx_iface_query(uct_iface_h tl_iface,
                                        uct_iface_attr_t *attr)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    size_t max_msg         = iface->port_attr.max_msg_sz;
    uct_dcx_iface_perf_t perf;

    uct_base_iface_query(&iface->super, attr);

    attr->iface_addr_len  = sizeof(uct_dcx_iface_addr_t);
    attr->device_addr_len = sizeof(uct_dcx_dev_addr_t) +
                            (iface->is_global ? sizeof(union ibv_gid) : 0);
    attr->ep_addr_len     = 0;
    attr->max_conn_priv   = 0;

    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                            UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;

    attr->cap.flags = 0;
    if (iface->tx.policy != UCT_DCX_TX_POLICY_RAND) {
        /* A failure fails only the endpoint that owns the DCI. */
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

    /* 64-bit atomics: add, fetch-add and compare-swap natively, the others
     * as masked atomics where the device has them, else as compare-swap
     * loops on the device. A device without atomics offers none, so UCP
     * emulates them. */
    if (iface->config.atomics) {
        attr->cap.flags              |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic64.op_flags   = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                        UCS_BIT(UCT_ATOMIC_OP_AND) |
                                        UCS_BIT(UCT_ATOMIC_OP_OR)  |
                                        UCS_BIT(UCT_ATOMIC_OP_XOR);
        attr->cap.atomic64.fop_flags  = attr->cap.atomic64.op_flags |
                                        UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                                        UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }

    /* 32-bit atomics: masked (extended) atomics in raw WQEs, only where the
     * device's atomic capabilities list them for DC. */
    if (iface->config.ext_atomics32) {
        attr->cap.flags              |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic32.op_flags   = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                        UCS_BIT(UCT_ATOMIC_OP_AND) |
                                        UCS_BIT(UCT_ATOMIC_OP_OR)  |
                                        UCS_BIT(UCT_ATOMIC_OP_XOR);
        attr->cap.atomic32.fop_flags  = attr->cap.atomic32.op_flags |
                                        UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                                        UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }

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
    attr->cap.am.max_short        = iface->tx.max_inline;
    attr->cap.am.max_bcopy        = iface->tx.seg_size;
    attr->cap.am.min_zcopy        = 0;
    attr->cap.am.max_zcopy        = iface->tx.seg_size;
    attr->cap.am.opt_zcopy_align  = UCS_SYS_PCI_MAX_PAYLOAD;
    attr->cap.am.align_mtu        = attr->cap.put.align_mtu;
    attr->cap.am.max_hdr          = iface->tx.seg_size / 2;
    attr->cap.am.max_iov          = iface->tx.max_sge - 1;

    uct_dcx_iface_perf_get(tl_iface, UCT_DCX_PERF_OP_ANY, &perf);
    attr->latency             = ucs_linear_func_make(perf.latency, 0);
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = perf.bandwidth;
    attr->overhead            = perf.send_pre_overhead;
    attr->priority            = 0;
    return UCS_OK;
}

static ucs_status_t
uct_dcx_iface_get_device_address(uct_iface_h tl_iface,
                                 uct_device_addr_t *dev_addr)
{
    uct_dcx_iface_t *iface   = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    uct_dcx_dev_addr_t *addr = (uct_dcx_dev_addr_t*)dev_addr;

    addr->lid   = iface->port_attr.lid;
    addr->flags = iface->dev_addr_flags;
    if (iface->is_global) {
        memcpy(addr + 1, &iface->gid, sizeof(iface->gid));
    }
    return UCS_OK;
}

static ucs_status_t uct_dcx_iface_get_address(uct_iface_h tl_iface,
                                              uct_iface_addr_t *iface_addr)
{
    uct_dcx_iface_t *iface     = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    uct_dcx_iface_addr_t *addr = (uct_dcx_iface_addr_t*)iface_addr;

    addr->dctn[0] = iface->rx.dctn & 0xff;
    addr->dctn[1] = (iface->rx.dctn >> 8) & 0xff;
    addr->dctn[2] = (iface->rx.dctn >> 16) & 0xff;
    addr->flags   = UCT_DCX_IFACE_ADDR_VERSION_1 |
                    (iface->config.atomics ?
                     UCT_DCX_IFACE_ADDR_FLAG_ATOMIC64 : 0);
    addr->dc_key  = iface->rx.dc_key;
    return UCS_OK;
}

/* gid may be unaligned: it comes from a packed peer address. */
static int uct_dcx_gid_is_zero(const void *gid)
{
    static const uint8_t zero[sizeof(union ibv_gid)];

    return !memcmp(gid, zero, sizeof(zero));
}

int uct_dcx_iface_addr_is_reachable(uct_iface_h tl_iface,
                                    const uct_device_addr_t *dev_addr,
                                    const uct_iface_addr_t *iface_addr,
                                    char *info, size_t max)
{
    uct_dcx_iface_t *iface             = ucs_derived_of(tl_iface,
                                                        uct_dcx_iface_t);
    const uct_dcx_dev_addr_t *daddr    = (const uct_dcx_dev_addr_t*)dev_addr;
    const uct_dcx_iface_addr_t *ifaddr = (const uct_dcx_iface_addr_t*)
                                         iface_addr;
    const char *reason;

    if ((daddr == NULL) || (ifaddr == NULL)) {
        reason = "no device or interface address";
    } else if ((ifaddr->flags & UCT_DCX_IFACE_ADDR_VERSION_MASK) !=
               UCT_DCX_IFACE_ADDR_VERSION_1) {
        reason = "unknown interface address format";
    } else if (!!(daddr->flags & UCT_DCX_DEV_ADDR_FLAG_GLOBAL) !=
               iface->is_global) {
        /* Not the same kind of fabric (IB or RoCE). */
        reason = "the peer is on another kind of fabric (IB/RoCE)";
    } else if (iface->is_global &&
               ((daddr->flags ^ iface->dev_addr_flags) &
                (UCT_DCX_DEV_ADDR_FLAG_ROCE_V2 | UCT_DCX_DEV_ADDR_FLAG_IPV4))) {
        /* A RoCE v1 frame never reaches a RoCE v2 (UDP/IP) address, nor an
         * IPv4 address an IPv6 one. */
        reason = "the peer uses another RoCE version or address family";
    } else if (iface->is_global &&
               uct_dcx_gid_is_zero(daddr + 1)) {
        reason = "the all-zero GID";
    } else if (!iface->is_global &&
               ((daddr->lid == 0) || (daddr->lid >= 0xc000))) {
        /* IB unicast LIDs are 1..0xbfff; RoCE addresses by GID. */
        reason = "not an IB unicast LID";
    } else {
        return 1;
    }

    if ((info != NULL) && (max > 0)) {
        ucs_snprintf_zero(info, max, "dcx: %s", reason);
    }
    return 0;
}

/* Payload rate of one lane in Gb/s after line encoding, by the port's
 * active_speed (IBTA: 8b/10b up to QDR, 64b/66b from FDR10 on). */
static double uct_dcx_iface_lane_gbps(uint8_t active_speed)
{
    switch (active_speed) {
    case 1:   return 2.0;    /* SDR */
    case 2:   return 4.0;    /* DDR */
    case 4:   return 8.0;    /* QDR */
    case 8:   return 10.0;   /* FDR10 */
    case 16:  return 13.64;  /* FDR */
    case 32:  return 25.0;   /* EDR */
    case 64:  return 50.0;   /* HDR */
    case 128: return 100.0;  /* NDR */
    default:  return 2.0;    /* unknown: the slowest */
    }
}

/* Lanes of the link, by the port's active_width. */
static unsigned uct_dcx_iface_lanes(uint8_t active_width)
{
    switch (active_width) {
    case 1:  return 1;
    case 2:  return 4;
    case 4:  return 8;
    case 8:  return 12;
    case 16: return 2;
    default: return 1;
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
                  uct_dcx_iface_lanes(iface->port_attr.active_width) *
                  1e9 / 8;

    /* Estimates for mlx5, as UCX models its IB transports: writing a WQE
     * and ringing the doorbell cost the CPU ~40 ns each; retiring a CQE
     * ~50 ns; receiving a message ~75 ns; the NIC fetching a WQE it was
     * not given inline adds ~350 ns; DC's connect adds ~60 ns on the wire
     * to the port's ~600 ns (RoCE: +200 ns). */
    perf->bandwidth          = wire * mtu / (mtu + hdrs);
    perf->latency            = 660e-9 + (iface->is_global ? 200e-9 : 0);
    perf->send_pre_overhead  = 40e-9;
    perf->send_post_overhead = 40e-9;
    perf->recv_overhead      = 75e-9;
    switch (op) {
    case UCT_DCX_PERF_OP_ZCOPY:
        perf->send_post_overhead += 50e-9;
        perf->latency            += 350e-9;
        break;
    case UCT_DCX_PERF_OP_BCOPY:
        perf->latency            += 350e-9;
        break;
    default:
        break;
    }
    /* Under dcs and dcs_quota an endpoint with work in flight holds a DCI;
     * under rand any number share them. */
    perf->max_inflight_eps = (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) ?
                             SIZE_MAX : iface->tx.num_dci;
}

/* --- receive ---------------------------------------------------------- */

static void uct_dcx_iface_recv_desc_init(uct_iface_h tl_iface, void *obj,
                                         uct_mem_h memh)
{
    ((uct_dcx_recv_desc_t*)obj)->lkey = uct_dcx_memh_lkey(memh);
}

static void uct_dcx_iface_release_desc(uct_recv_desc_t *self, void *desc)
{
    uct_dcx_iface_t *iface = ucs_container_of(self, uct_dcx_iface_t,
                                              rx.release_desc);

    ucs_mpool_put_inline(UCS_PTR_BYTE_OFFSET(desc,
                                             -(ptrdiff_t)iface->rx.headroom_offset));
    /* The SRQ may have run short while the user held every buffer, and
     * then no receive completion comes to refill it: progress does. */
    iface->rx.refill = 1;
}

/* Fill the SRQ up to its length. */
static void uct_dcx_iface_post_recv(uct_dcx_iface_t *iface)
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

            sges[count].addr   = (uintptr_t)UCS_PTR_BYTE_OFFSET(
                                         desc, iface->rx.payload_offset);
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
        ret = ibv_post_srq_recv(iface->rx.srq, wrs, &bad_wr);
        if (ucs_unlikely(ret != 0)) {
            ucs_error("dcx: post_srq_recv failed: %s", strerror(ret));
            iface->rx.posted += bad_wr - wrs;
            for (; bad_wr != NULL; bad_wr = bad_wr->next) {
                ucs_mpool_put_inline((void*)(uintptr_t)bad_wr->wr_id);
            }
            return;
        }

        iface->rx.posted += count;
    }
}

typedef struct {
    uint64_t           wr_id;
    enum ibv_wc_status status;
    uint32_t           vendor_err;  /* the device's syndrome, on errors */
    uint32_t           byte_len;
    uint32_t           imm;
    int                opcode;
} uct_dcx_wc_t;

/* --- strided zero-copy (UMR) ------------------------------------------------ */

static void uct_dcx_iface_umr_forget(void *arg, uint32_t lkey)
{
    uct_dcx_iface_t *iface = arg;

    uct_dcx_umr_forget_lkey(iface->umr.engine, lkey);
}

ucs_status_t uct_dcx_iface_umr_engine(uct_dcx_iface_t *iface,
                                      uct_dcx_umr_t **umr_p)
{
    struct ibv_ah_attr av;
    uct_dcx_umr_t *umr;
    ucs_status_t status;

    if (ucs_likely(iface->umr.engine != NULL)) {
        *umr_p = iface->umr.engine;
        return UCS_OK;
    }
    if (iface->umr.unavailable) {
        return UCS_ERR_UNSUPPORTED;
    }

    umr = ucs_malloc(sizeof(*umr), "dcx umr");
    if (umr == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    uct_dcx_iface_fill_av(iface, iface->port_attr.lid, &iface->gid, &av);
    status = uct_dcx_umr_init(umr, iface->ops, iface->md->ctx, iface->md->pd,
                              iface->port, &iface->port_attr,
                              av.is_global ? &av.grh : NULL,
                              iface->umr.num_mkeys, iface->umr.max_inline);
    if (status != UCS_OK) {
        ucs_free(umr);
        ucs_debug("dcx: %s: UMR unavailable (%s): strided operations are "
                  "packed", iface->md->device->name,
                  ucs_status_string(status));
        iface->umr.unavailable = 1;
        return UCS_ERR_UNSUPPORTED;
    }

    iface->umr.listener.cb  = uct_dcx_iface_umr_forget;
    iface->umr.listener.arg = iface;
    ucs_list_add_tail(&iface->md->mr_listeners, &iface->umr.listener.list);
    iface->umr.engine = umr;
    *umr_p            = umr;
    return UCS_OK;
}

/* Whether a handle passed to the public API (include/uct/ib/dcx/dcx.h) is a
 * dcx interface: every UCT interface is a base interface, and only dcx's
 * point to dcx's internal operations table (unlike its public operations,
 * which UCX copies into the handle and a wrapper may replace). */
static int uct_dcx_iface_is_dcx(uct_iface_h tl_iface)
{
    return (tl_iface != NULL) &&
           (ucs_derived_of(tl_iface, uct_base_iface_t)->internal_ops ==
            &uct_dcx_iface_internal_ops);
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_iface_query_umr(uct_iface_h tl_iface,
                                     uct_dcx_umr_counters_t *counters)
{
    uct_dcx_iface_t *iface;

    if (!uct_dcx_iface_is_dcx(tl_iface) || (counters == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    memset(counters, 0, sizeof(*counters));
    counters->zcopy_ops = iface->umr.zcopy_ops;
    counters->copy_ops  = iface->umr.copy_ops;
    if (iface->umr.engine != NULL) {
        counters->umrs          = iface->umr.engine->stats.umrs;
        counters->hits          = iface->umr.engine->stats.hits;
        counters->evictions     = iface->umr.engine->stats.evictions;
        counters->invalidations = iface->umr.engine->stats.invalidations;
        counters->max_pieces    = iface->umr.engine->list_max;
        counters->recoveries    = iface->umr.engine->stats.recoveries;
    }
    return UCS_OK;
}

size_t uct_dcx_iface_put_sgl_max(uct_iface_h tl_iface)
{
    return ucs_derived_of(tl_iface, uct_dcx_iface_t)->tx.put_sgl_max;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_iface_query_tx(uct_iface_h tl_iface,
                                    uct_dcx_tx_counters_t *counters)
{
    if (!uct_dcx_iface_is_dcx(tl_iface) || (counters == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    *counters = ucs_derived_of(tl_iface, uct_dcx_iface_t)->tx.stats;
    return UCS_OK;
}

/* A view: the memory handle mkey_pack reads, describing the view's mkey. */
typedef struct uct_dcx_mem_view {
    uct_dcx_mem_t      memh;
    struct ibv_mr      mr;
    uct_dcx_umr_view_t umr;
} uct_dcx_mem_view_t;

/* The rights a view can lend over a registration: remote put and get, as
 * far as the registration has them (never more: an mkey must not open
 * memory registered for local access only). */
#define UCT_DCX_VIEW_ACCESS (IBV_ACCESS_LOCAL_WRITE | \
                             IBV_ACCESS_REMOTE_WRITE | \
                             IBV_ACCESS_REMOTE_READ)

static uint32_t uct_dcx_mem_view_access(const uct_dcx_mem_t *mem)
{
    return mem->access & UCT_DCX_VIEW_ACCESS;
}

/* The memory handle of a view: what mkey_pack reads, zero-based. */
static void uct_dcx_mem_view_init(uct_dcx_iface_t *iface,
                                  uct_dcx_mem_view_t *view, size_t length,
                                  uint32_t access)
{
    view->mr.context = iface->md->ctx;
    view->mr.pd      = iface->md->pd;
    view->mr.addr    = NULL;
    view->mr.length  = length;
    view->mr.lkey    = view->umr.mkey->lkey;
    view->mr.rkey    = view->umr.mkey->rkey;
    view->memh.mr     = &view->mr;
    view->memh.flags  = UCT_DCX_MEM_FLAG_VIEW;
    view->memh.access = access;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_mem_view_create(uct_iface_h tl_iface, uct_mem_h memh,
                                     void *address, size_t length,
                                     size_t stride, size_t count,
                                     uct_mem_h *view_p)
{
    uct_dcx_mem_t *mem = memh;
    uct_dcx_umr_layout_t layout;
    uct_dcx_mem_view_t *view;
    uct_dcx_iface_t *iface;
    uct_dcx_umr_t *umr;
    ucs_status_t status;
    uintptr_t first, end;
    uint32_t access;

    if (!uct_dcx_iface_is_dcx(tl_iface) ||
        (mem == NULL) || (view_p == NULL) ||
        (mem->flags & UCT_DCX_MEM_FLAG_VIEW)) {
        ucs_error("dcx: a view needs a dcx interface and a registration");
        return UCS_ERR_INVALID_PARAM;
    }
    iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    access = uct_dcx_mem_view_access(mem);
    if (!(access & UCT_DCX_MR_REMOTE_ACCESS)) {
        ucs_error("dcx: a view needs a registration with remote put or get "
                  "rights (UCT_MD_MEM_ACCESS_REMOTE_PUT/GET)");
        return UCS_ERR_INVALID_PARAM;
    }

    first = (uintptr_t)address;
    end   = first + (count - 1) * stride + length;
    if ((length == 0) || (count == 0) || (stride < length) ||
        (first < (uintptr_t)mem->mr->addr) ||
        (end > (uintptr_t)mem->mr->addr + mem->mr->length)) {
        ucs_error("dcx: view %zu x %zu @ %zu at %p is empty, overlapping or "
                  "outside its registration [%p, +%zu)", count, length,
                  stride, address, mem->mr->addr, mem->mr->length);
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_dcx_iface_umr_engine(iface, &umr);
    if (status != UCS_OK) {
        ucs_error("dcx: %s: strided views need UMR", iface->md->device->name);
        return status;
    }

    view = ucs_calloc(1, sizeof(*view), "dcx view");
    if (view == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    layout.addr   = first;
    layout.lkey   = mem->mr->lkey;
    layout.length = length;
    layout.stride = stride;
    layout.count  = count;
    status        = uct_dcx_umr_view_create(umr, iface->md->pd, &layout,
                                            NULL, 0, access, &view->umr);
    ++iface->umr.gen; /* its wait may have taken completions for others */
    if (status != UCS_OK) {
        ucs_free(view);
        return status;
    }

    uct_dcx_mem_view_init(iface, view, length * count, access);
    *view_p = &view->memh;
    return UCS_OK;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_mem_view_create_iov(uct_iface_h tl_iface,
                                         const uct_iov_t *iov, size_t iovcnt,
                                         uct_mem_h *view_p)
{
    struct ibv_sge pieces[UCT_DCX_UMR_LIST_MAX];
    uct_dcx_umr_layout_t layout = {};
    uct_dcx_mem_view_t *view;
    uct_dcx_iface_t *iface;
    uct_dcx_mem_t *mem;
    size_t i, j, total = 0;
    uint32_t access = UCT_DCX_VIEW_ACCESS;
    uct_dcx_umr_t *umr;
    ucs_status_t status;
    unsigned n = 0;
    uintptr_t end;

    if (!uct_dcx_iface_is_dcx(tl_iface) || (view_p == NULL)) {
        ucs_error("dcx: a view needs a dcx interface");
        return UCS_ERR_INVALID_PARAM;
    }
    iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    status = uct_dcx_iface_umr_engine(iface, &umr);
    if (status != UCS_OK) {
        ucs_error("dcx: %s: views need UMR", iface->md->device->name);
        return status;
    }

    /* One piece per block of every entry, each inside its registration. */
    for (i = 0; i < iovcnt; ++i) {
        mem = iov[i].memh;
        if (uct_iov_get_length(&iov[i]) == 0) {
            continue;
        }
        if ((mem == NULL) || (mem->flags & UCT_DCX_MEM_FLAG_VIEW) ||
            ((iov[i].count > 1) && (iov[i].stride < iov[i].length))) {
            ucs_error("dcx: view entry %zu: no registration, or overlapping "
                      "blocks", i);
            return UCS_ERR_INVALID_PARAM;
        }
        access &= uct_dcx_mem_view_access(mem);
        for (j = 0; j < iov[i].count; ++j) {
            if (n == umr->list_max) {
                ucs_error("dcx: a view maps at most %u pieces", umr->list_max);
                return UCS_ERR_INVALID_PARAM;
            }
            pieces[n].addr   = (uintptr_t)iov[i].buffer +
                               j * ((iov[i].count > 1) ? iov[i].stride : 0);
            pieces[n].length = iov[i].length;
            pieces[n].lkey   = mem->mr->lkey;
            end              = pieces[n].addr + pieces[n].length;
            if ((pieces[n].addr < (uintptr_t)mem->mr->addr) ||
                (end > (uintptr_t)mem->mr->addr + mem->mr->length)) {
                ucs_error("dcx: view entry %zu block %zu is outside its "
                          "registration", i, j);
                return UCS_ERR_INVALID_PARAM;
            }
            total += iov[i].length;
            ++n;
        }
    }

    if (!(access & UCT_DCX_MR_REMOTE_ACCESS)) {
        ucs_error("dcx: a view needs registrations that all have remote put "
                  "or all have remote get rights");
        return UCS_ERR_INVALID_PARAM;
    }

    view = ucs_calloc(1, sizeof(*view), "dcx view");
    if (view == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_dcx_umr_view_create(umr, iface->md->pd, &layout, pieces, n,
                                     access, &view->umr);
    ++iface->umr.gen; /* its wait may have taken completions for others */
    if (status != UCS_OK) {
        ucs_free(view);
        return status;
    }

    uct_dcx_mem_view_init(iface, view, total, access);
    *view_p = &view->memh;
    return UCS_OK;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_mem_view_destroy(uct_iface_h tl_iface, uct_mem_h memh)
{
    uct_dcx_mem_t *mem = memh;
    uct_dcx_mem_view_t *view;
    uct_dcx_iface_t *iface;
    ucs_status_t status;

    if (!uct_dcx_iface_is_dcx(tl_iface) ||
        (mem == NULL) || !(mem->flags & UCT_DCX_MEM_FLAG_VIEW)) {
        ucs_error("dcx: %p is not a strided view of a dcx interface", memh);
        return UCS_ERR_INVALID_PARAM;
    }

    iface  = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    view   = ucs_container_of(mem, uct_dcx_mem_view_t, memh);
    status = uct_dcx_umr_view_destroy(iface->umr.engine, &view->umr);
    ++iface->umr.gen; /* its wait may have taken completions for others */
    ucs_free(view);
    return status;
}

/* UMR completions (also those a view's wait took) and the UMR QP's
 * recovery make layouts ready: endpoints waiting for one retry. */
static unsigned uct_dcx_iface_umr_progress(uct_dcx_iface_t *iface)
{
    unsigned count = uct_dcx_umr_progress(iface->umr.engine);

    if (count > 0) {
        ++iface->umr.gen;
    }
    if (iface->umr.gen != iface->umr.dispatched_gen) {
        iface->umr.dispatched_gen = iface->umr.gen;
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_dcx_ep_pending_dispatch, NULL);
    }
    return count;
}

static void uct_dcx_iface_umr_cleanup(uct_dcx_iface_t *iface)
{
    if (iface->umr.engine == NULL) {
        return;
    }
    ucs_list_del(&iface->umr.listener.list);
    uct_dcx_umr_cleanup(iface->umr.engine);
    ucs_free(iface->umr.engine);
    iface->umr.engine = NULL;
}

/* --- device capabilities ---------------------------------------------- */

/* Bit offsets in the atomic capability page (mlx5 PRM). */
#define UCT_DCX_PRM_ATOMIC_8B_MODE_BIT  0x40 /* 2 bits: 1 = host order */
#define UCT_DCX_PRM_ATOMIC_OPS_BIT      0x90
#define UCT_DCX_PRM_ATOMIC_SIZE_QP_BIT  0xb0
#define UCT_DCX_PRM_ATOMIC_SIZE_DC_BIT  0xd0
#define UCT_DCX_PRM_ATOMIC_MASKED_OPS   (UCS_BIT(2) | UCS_BIT(3)) /* CS, FA */

/* Which masked atomic sizes the device does on DC, as UCX's mlx5 transports
 * read them from the same capability page. Needs DEVX; on RoCE the raw
 * WQE's address vector would need the peer's MAC, so not there. */
void uct_dcx_iface_ext_atomics(uct_dcx_iface_t *iface, const char *dev_name)
{
    uint8_t page[0x100 / 8] = {};
    uint16_t ops, sizes;

    iface->config.ext_atomics32    = 0;
    iface->config.ext_atomics64    = 0;
    iface->config.ext_atomics64_be = 0;
    if (!iface->config.atomics) {
        return;
    }

    if (!iface->md->devx || iface->is_global) {
        ucs_debug("dcx: %s: no masked atomics (%s)", dev_name,
                  iface->is_global ? "RoCE" : "device not opened with DEVX");
        return;
    }

    if (uct_dcx_md_query_hca_cap(iface->md, UCT_DCX_PRM_HCA_CAP_ATOMIC, page,
                                 sizeof(page)) != 0) {
        return;
    }

    ops   = uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_OPS_BIT, 16);
    sizes = uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_SIZE_QP_BIT, 16) &
            uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_SIZE_DC_BIT, 16);
    if ((ops & UCT_DCX_PRM_ATOMIC_MASKED_OPS) == UCT_DCX_PRM_ATOMIC_MASKED_OPS) {
        iface->config.ext_atomics32    = !!(sizes & sizeof(uint32_t));
        iface->config.ext_atomics64    = !!(sizes & sizeof(uint64_t));
        iface->config.ext_atomics64_be =
                uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_8B_MODE_BIT, 2) != 1;
    }
    ucs_debug("dcx: %s: atomic operations 0x%x, sizes 0x%x: masked atomics "
              "32-bit %s, 64-bit %s", dev_name, ops, sizes,
              iface->config.ext_atomics32 ? "yes" : "no",
              iface->config.ext_atomics64 ? "yes" : "no");
}

void uct_dcx_iface_fill_av(const uct_dcx_iface_t *iface, uint16_t dlid,
                           const union ibv_gid *dgid,
                           struct ibv_ah_attr *ah_attr)
{
    memset(ah_attr, 0, sizeof(*ah_attr));
    ah_attr->dlid     = dlid;
    ah_attr->sl       = iface->config.sl;
    ah_attr->port_num = iface->port;
    if (!iface->is_global) {
        return; /* InfiniBand: routed by LID */
    }

    /* RoCE packets always carry a GRH (an AH without one is EINVAL) */
    ah_attr->is_global         = 1;
    ah_attr->grh.sgid_index    = iface->gid_index;
    ah_attr->grh.hop_limit     = iface->config.hop_limit;
    ah_attr->grh.traffic_class = iface->config.traffic_class;
    if (dgid != NULL) {
        /* may be unaligned: a GID of a packed peer address */
        memcpy(&ah_attr->grh.dgid, dgid, sizeof(ah_attr->grh.dgid));
    }
}

ucs_status_t uct_dcx_iface_ah_get(uct_dcx_iface_t *iface, uint16_t lid,
                                  const union ibv_gid *gid,
                                  struct ibv_ah **ah_p)
{
    struct ibv_ah_attr ah_attr;
    uct_dcx_ah_key_t key;
    struct ibv_ah *ah;
    khiter_t it;
    int ret;

    memset(&key, 0, sizeof(key));
    key.lid    = lid;
    key.global = (gid != NULL);
    if (gid != NULL) {
        memcpy(&key.gid, gid, sizeof(key.gid));
    }

    it = kh_get(uct_dcx_ah, &iface->ah_cache, key);
    if (it != kh_end(&iface->ah_cache)) {
        *ah_p = kh_value(&iface->ah_cache, it);
        return UCS_OK;
    }

    uct_dcx_iface_fill_av(iface, lid, gid, &ah_attr);

    ah = iface->ops->create_ah(iface->md->pd, &ah_attr);
    if (ah == NULL) {
        ucs_error("dcx: cannot create an address handle to lid %u: %m", lid);
        return UCS_ERR_IO_ERROR;
    }

    it = kh_put(uct_dcx_ah, &iface->ah_cache, key, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        iface->ops->destroy_ah(ah);
        return UCS_ERR_NO_MEMORY;
    }
    kh_value(&iface->ah_cache, it) = ah;
    *ah_p                          = ah;
    return UCS_OK;
}

ucs_status_t uct_dcx_iface_peer_get(uct_dcx_iface_t *iface,
                                    struct ibv_ah *ah, uint32_t dctn,
                                    uint64_t dc_key, uct_dcx_peer_t **peer_p)
{
    uct_dcx_peer_key_t key = {ah, dc_key, dctn};
    uct_dcx_peer_t *peer;
    khiter_t it;
    int ret;

    it = kh_get(uct_dcx_peer, &iface->peers, key);
    if (it != kh_end(&iface->peers)) {
        peer = kh_value(&iface->peers, it);
        ++peer->refcount;
        *peer_p = peer;
        return UCS_OK;
    }

    peer = ucs_malloc(sizeof(*peer), "dcx peer");
    if (peer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    it = kh_put(uct_dcx_peer, &iface->peers, key, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_free(peer);
        return UCS_ERR_NO_MEMORY;
    }

    peer->ah                    = ah;
    peer->dc_key                = dc_key;
    peer->dctn                  = dctn;
    peer->refcount              = 1;
    peer->index                 = ucs_ptr_array_insert(&iface->peer_table,
                                                       peer);
    kh_value(&iface->peers, it) = peer;
    *peer_p                     = peer;
    return UCS_OK;
}

void uct_dcx_iface_peer_put(uct_dcx_iface_t *iface, uct_dcx_peer_t *peer)
{
    uct_dcx_peer_key_t key = {peer->ah, peer->dc_key, peer->dctn};
    khiter_t it;

    if (--peer->refcount > 0) {
        return;
    }

    it = kh_get(uct_dcx_peer, &iface->peers, key);
    ucs_assert(it != kh_end(&iface->peers));
    kh_del(uct_dcx_peer, &iface->peers, it);
    ucs_ptr_array_remove(&iface->peer_table, peer->index);
    ucs_free(peer);
}

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

    if (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) {
        index = rand_r(&iface->tx.rand_seed) % iface->tx.num_dci;
        if ((iface->tx.dcis[index].available == 0) ||
            iface->tx.dcis[index].error) {
            return UCS_ERR_NO_RESOURCE;
        }
    } else {
        if (uct_dcx_iface_dci_take(iface, &index) != UCS_OK) {
            return UCS_ERR_NO_RESOURCE;
        }
        iface->tx.dcis[index].ep = NULL;
    }

    /* Signaled: the DCI returns to the pool when the grant completes. */
    dci = &iface->tx.dcis[index];
    ibv_wr_start(dci->qpx);
    dci->qpx->wr_id    = UCT_DCX_WR_ID(index, dci->posted + 1);
    dci->qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(dci->qpx, htobe32(UCT_DCX_IMM_FC_GRANT));
    ibv_wr_set_inline_data(dci->qpx, (void*)&pg->grant, sizeof(pg->grant));
    mlx5dv_wr_set_dc_addr(dci->mqpx, pg->ah, pg->dctn, pg->dc_key);
    ret = ibv_wr_complete(dci->qpx);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x: posting a grant failed: %s",
                  dci->qp->qp_num, strerror(ret));
        if (iface->tx.policy != UCT_DCX_TX_POLICY_RAND) {
            iface->tx.free_stack[iface->tx.num_free++] = index;
        }
        return UCS_ERR_IO_ERROR;
    }

    if ((iface->tx.policy != UCT_DCX_TX_POLICY_RAND) && !dci->grant) {
        dci->grant = 1;
        ++iface->tx.num_grants;
    }
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
    if (req.dev_flags & UCT_DCX_DEV_ADDR_FLAG_GLOBAL) {
        if (length < sizeof(req) + sizeof(*gid)) {
            ucs_debug("dcx: dropped a credit request without its GID");
            return;
        }
        gid = UCS_PTR_BYTE_OFFSET(data, sizeof(req));
    }

    if (uct_dcx_iface_ah_get(iface, req.lid, gid, &pg.ah) != UCS_OK) {
        return; /* the sender asks again */
    }

    pg.dc_key        = req.dc_key;
    pg.dctn          = req.dctn[0] | ((uint32_t)req.dctn[1] << 8) |
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
    ep = (uct_dcx_ep_t*)(uintptr_t)grant.ep_id;
    if (grant.sn != ep->fc_sn) {
        return 0; /* a late grant of a request asked again */
    }

    kh_del(uct_dcx_fc_wait, &iface->fc.waiting, it);
    ep->flags  &= ~UCT_DCX_EP_FLAG_FC_WAIT;
    ep->fc_wnd  = ucs_min(ep->fc_wnd + grant.credits, iface->fc.wnd_size);
    if (ep->fc_wnd <= iface->fc.req_thresh) {
        /* Many were sent after the request: ask again at once. */
        uct_dcx_ep_fc_request(iface, ep);
    }
    return 1;
}

static int uct_dcx_iface_fc_recv(uct_dcx_iface_t *iface, uint32_t imm,
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
static void uct_dcx_iface_fc_progress(uct_dcx_iface_t *iface)
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
            due[num_due++] = (uct_dcx_ep_t*)(uintptr_t)ep_id;
        } else if (deadline < next) {
            next = deadline;
        }
    });
    iface->fc.next_check = (num_due == UCT_DCX_FC_TIMER_BATCH) ? now : next;

    for (i = 0; i < num_due; ++i) {
        ucs_debug("dcx: ep %p: asking again for credits", due[i]);
        uct_dcx_ep_fc_request(iface, due[i]);
    }
}

/* Receive completions, after ibv_start_poll found the first. */
static UCS_F_NOINLINE unsigned uct_dcx_iface_poll_rx_batch(uct_dcx_iface_t *iface)
{
    uct_dcx_wc_t wc[UCT_DCX_POLL_BATCH];
    struct ibv_cq_ex *cq = iface->rx.cq;
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
        wc[count].imm      = ((wc[count].status == IBV_WC_SUCCESS) &&
                              (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM)) ?
                             be32toh(ibv_wc_read_imm_data(cq)) :
                             UCT_DCX_IMM_NONE;
        wc[count].vendor_err = (wc[count].status == IBV_WC_SUCCESS) ? 0 :
                               ibv_wc_read_vendor_err(cq);
        ++count;
    } while ((count < UCT_DCX_POLL_BATCH) && (ibv_next_poll(cq) == 0));
    ibv_end_poll(cq);

    iface->rx.posted -= count;
    for (i = 0; i < count; ++i) {
        desc  = (void*)(uintptr_t)wc[i].wr_id;
        am_id = wc[i].imm;

        if (ucs_unlikely(wc[i].imm >= UCT_AM_ID_MAX) &&
            (wc[i].status == IBV_WC_SUCCESS) &&
            (wc[i].opcode == IBV_WC_RECV)) {
            granted |= uct_dcx_iface_fc_recv(iface, wc[i].imm,
                                             UCS_PTR_BYTE_OFFSET(desc,
                                                   iface->rx.payload_offset),
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
                      iface->ops->wc_status_str(wc[i].status),
                      wc[i].vendor_err, wc[i].opcode, wc[i].imm);
            ucs_mpool_put_inline(desc);
            continue;
        }

        udesc = UCS_PTR_BYTE_OFFSET(desc, iface->rx.headroom_offset);
        uct_recv_desc(udesc) = &iface->rx.release_desc;
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, am_id,
                           UCS_PTR_BYTE_OFFSET(desc, iface->rx.payload_offset),
                           wc[i].byte_len, "RX: AM");
        status = uct_iface_invoke_am(&iface->super, am_id,
                                     UCS_PTR_BYTE_OFFSET(desc,
                                                         iface->rx.payload_offset),
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
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_dcx_ep_pending_dispatch, NULL);
    }
    return count;
}

/* Progress finds nothing most of the time: that check stays inline. */
static UCS_F_ALWAYS_INLINE unsigned uct_dcx_iface_poll_rx(uct_dcx_iface_t *iface)
{
    struct ibv_poll_cq_attr attr = {};

    if (ucs_likely(ibv_start_poll(iface->rx.cq, &attr) != 0)) {
        if (ucs_unlikely(iface->rx.refill)) {
            iface->rx.refill = 0;
            uct_dcx_iface_post_recv(iface);
        }
        return 0;
    }
    return uct_dcx_iface_poll_rx_batch(iface);
}

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
static ucs_status_t uct_dcx_iface_dci_connect(uct_dcx_iface_t *iface,
                                              uct_dcx_dci_t *dci);
static ucs_status_t uct_dcx_iface_dci_create(uct_dcx_iface_t *iface,
                                             uct_dcx_dci_t *dci);

static void uct_dcx_iface_dci_recover(uct_dcx_iface_t *iface,
                                      uct_dcx_dci_t *dci)
{
    struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RESET };
    int ret;

    if (iface->tx.fatal != UCS_OK) {
        return; /* a failed device takes no command: never used again */
    }

    ret = iface->ops->modify_qp(dci->qp, &attr, IBV_QP_STATE);
    if ((ret != 0) || (uct_dcx_iface_dci_connect(iface, dci) != UCS_OK)) {
        ucs_error("dcx: cannot recover dci 0x%x: %s", dci->qp->qp_num,
                  strerror(ret));
        return; /* stays in error: its work requests keep failing */
    }
    dci->error = 0;
}

/* Return an idle DCI to the pool, recovering it first after an error. */
static void uct_dcx_iface_dci_release(uct_dcx_iface_t *iface,
                                      uint16_t dci_index)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[dci_index];

    ucs_assert(dci->posted == dci->completed);
    if (dci->error) {
        uct_dcx_iface_dci_recover(iface, dci);
    }
    if (dci->grant) {
        dci->grant = 0;
        --iface->tx.num_grants;
    }
    dci->ep    = NULL;
    dci->fence = 0;
    dci->room  = 1;
    iface->tx.free_stack[iface->tx.num_free++] = dci_index;
}

/* The top of the free stack was never created (see uct_dcx_iface_dci_take):
 * every created DCI is taken. When the device has no QP left the pool
 * stops growing at the DCIs it has (endpoints wait for one of them)
 * instead of failing operations. */
ucs_status_t uct_dcx_iface_dci_create_next(uct_dcx_iface_t *iface)
{
    uint16_t index = iface->tx.free_stack[iface->tx.num_free - 1];
    ucs_status_t status;

    ucs_assert(index == iface->tx.num_created);
    ucs_assert(iface->tx.num_free == iface->tx.num_dci - iface->tx.num_created);
    status = uct_dcx_iface_dci_create(iface, &iface->tx.dcis[index]);
    if (status != UCS_OK) {
        ucs_diag("dcx: %s: cannot create dci %u (%s): the pool keeps %u dcis",
                 iface->md->device->name, index, ucs_status_string(status),
                 iface->tx.num_created);
        iface->tx.num_dci  = iface->tx.num_created;
        iface->tx.num_free = 0;
        return UCS_ERR_NO_RESOURCE;
    }

    ++iface->tx.num_created;
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
    ep->dci    = UCT_DCX_EP_NO_DCI;
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
ucs_status_t uct_dcx_iface_dci_request_completion(uct_dcx_iface_t *iface,
                                                  uint16_t dci_index)
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
    unsigned i;

    for (i = 0; i < iface->tx.num_created; ++i) {
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
    if (iface->tx.num_waiters++ == 0) {
        uct_dcx_iface_dcis_request_completions(iface);
    }
}

/* Call the user completions still in @a dci's ring with UCS_ERR_CANCELED:
 * those of @a ep, or every one (@a ep NULL). Their requests run on or were
 * discarded; when they complete, nothing is called again. */
void uct_dcx_iface_dci_cancel_comps(uct_dcx_iface_t *iface,
                                    uct_dcx_dci_t *dci, uct_dcx_ep_t *ep)
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
 * policies; shared DCIs under rand have no holder). */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_orphan(const uct_dcx_iface_t *iface,
                         const uct_dcx_dci_t *dci)
{
    return (dci->ep == NULL) && (iface->tx.policy != UCT_DCX_TX_POLICY_RAND);
}

/* An unsignaled tail that someone waits for: endpoints waiting for a DCI,
 * or (dcs) the pool for the DCI of a destroyed endpoint. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_dci_tail_awaited(const uct_dcx_iface_t *iface,
                               const uct_dcx_dci_t *dci)
{
    return ucs_unlikely(dci->unsignaled > 0) &&
           ((iface->tx.num_waiters > 0) ||
            uct_dcx_iface_dci_orphan(iface, dci));
}

/* A CQE of request @a sn retires it and the unsignaled ones before it: their
 * slots go back now, except the CQE's own when @a hold (slot_held, returned
 * after the callbacks). */
static UCS_F_ALWAYS_INLINE void
uct_dcx_iface_dci_retire(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                         uint64_t sn, int hold)
{
    uint64_t retired = sn - dci->completed;

    dci->completed          = sn;
    dci->available         += retired - hold;
    iface->tx.cq_available += retired - hold;
    dci->slot_held          = hold;
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
                "dci %u: sn %" PRIu64 " completed %" PRIu64 " posted %"
                PRIu64, dci_index, sn, (uint64_t)dci->completed,
                (uint64_t)dci->posted);
    uct_dcx_iface_dci_retire(iface, dci, sn, 1);
    status = uct_dcx_wc_to_status(wc->status);

    if (ucs_unlikely(status != UCS_OK)) {
        if (!dci->error && (iface->tx.policy == UCT_DCX_TX_POLICY_RAND)) {
            /* Endpoints sharing the DCI notice the new generation. */
            ++dci->generation;
            dci->last_error = status;
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
     * yields the DCI (dcs_quota), or under rand any endpoint sharing it. */
    if ((iface->tx.policy == UCT_DCX_TX_POLICY_RAND) ||
        ((dci->ep != NULL) && !(dci->ep->flags & UCT_DCX_EP_FLAG_TX_WAIT) &&
         !ucs_arbiter_group_is_empty(&dci->ep->arb_group))) {
        dispatch = 1;
    }

    if (dci->posted != dci->completed) {
        if (uct_dcx_iface_dci_tail_awaited(iface, dci)) {
            (void)uct_dcx_iface_dci_request_completion(iface, dci_index);
        }
    } else {
        if (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) {
            /* Shared DCIs stay with their endpoints; once drained after an
             * error, the DCI serves the endpoints created since. */
            if (dci->error) {
                uct_dcx_iface_dci_recover(iface, dci);
            }
        } else if (dci->ep == NULL) {
            /* dcs policies: an endpoint holds a DCI only while it has work
             * outstanding; an orphan's endpoint was destroyed meanwhile. */
            uct_dcx_iface_dci_release(iface, dci_index);
            dispatch = 1;
        } else {
            uct_dcx_iface_dci_put(iface, dci->ep);
            dispatch = 1;
        }
    }

    /* Completions that return nothing a pending request could use do not
     * walk the arbiter (with many endpoints waiting for a DCI, every send
     * completion would). */
    if (dispatch) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_dcx_ep_pending_dispatch, NULL);
    }
}

/* The common send completion: a successful request that leaves its DCI
 * busy, while nothing waits on the interface (no pending request, no
 * endpoint waiting for a DCI) and the DCI has a holder (or is shared).
 * What uct_dcx_iface_tx_completion() does after the callbacks is then
 * nothing, unless the callbacks queued work. Returns 0, having done
 * nothing, for any other completion. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_iface_tx_completion_fast(uct_dcx_iface_t *iface,
                                 const uct_dcx_wc_t *wc)
{
    uct_dcx_dci_t *dci = &iface->tx.dcis[UCT_DCX_WR_ID_DCI(wc->wr_id)];
    uint64_t sn        = UCT_DCX_WR_ID_SN(wc->wr_id);

    if (ucs_unlikely((wc->status != IBV_WC_SUCCESS) || dci->error ||
                     (sn == dci->posted) || (iface->tx.num_waiters > 0) ||
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
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_dcx_ep_pending_dispatch, NULL);
    }
    if (uct_dcx_iface_dci_tail_awaited(iface, dci)) {
        (void)uct_dcx_iface_dci_request_completion(iface,
                                                   dci - iface->tx.dcis);
    }
    return 1;
}

/* Send completions, after ibv_start_poll found the first. */
static UCS_F_NOINLINE unsigned uct_dcx_iface_poll_tx_batch(uct_dcx_iface_t *iface)
{
    uct_dcx_wc_t wc[UCT_DCX_POLL_BATCH];
    struct ibv_cq_ex *cq = iface->tx.cq;
    unsigned i, count = 0;

    do {
        wc[count].wr_id      = cq->wr_id;
        wc[count].status     = cq->status;
        wc[count].vendor_err = (cq->status == IBV_WC_SUCCESS) ? 0 :
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

static UCS_F_ALWAYS_INLINE unsigned uct_dcx_iface_poll_tx(uct_dcx_iface_t *iface)
{
    struct ibv_poll_cq_attr attr = {};

    if (ucs_likely(ibv_start_poll(iface->tx.cq, &attr) != 0)) {
        return 0;
    }
    return uct_dcx_iface_poll_tx_batch(iface);
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
    unsigned i;

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
    for (i = 0; i < iface->tx.num_created; ++i) {
        dci = &iface->tx.dcis[i];
        if (dci->posted != dci->completed) {
            do {
                wc.wr_id = UCT_DCX_WR_ID(i, dci->completed + 1);
                uct_dcx_iface_tx_completion(iface, &wc);
            } while (dci->posted != dci->completed);
        } else if ((iface->tx.policy == UCT_DCX_TX_POLICY_RAND) &&
                   !dci->error) {
            /* Idle shared DCIs: their endpoints fail at their next use. */
            ++dci->generation;
            dci->last_error = status;
            dci->error      = 1;
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

unsigned uct_dcx_iface_progress(uct_iface_h tl_iface)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    unsigned count;

    count  = uct_dcx_iface_poll_rx(iface);
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

static ucs_status_t uct_dcx_iface_event_fd_get(uct_iface_h tl_iface,
                                               int *fd_p)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    *fd_p = iface->channel->fd;
    return UCS_OK;
}

/* Arm the CQs for the next completion. Events already delivered mean work
 * to progress (UCS_ERR_BUSY); CQEs not yet polled fire the armed CQ at
 * once, as mlx5 arms carry the consumer index. */
static ucs_status_t uct_dcx_iface_event_arm(uct_iface_h tl_iface,
                                            unsigned events)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    struct ibv_cq *cq;
    void *cq_context;
    int pending = 0;
    int ret;

    while (iface->ops->get_cq_event(iface->channel, &cq, &cq_context) == 0) {
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
        ret = ibv_req_notify_cq(ibv_cq_ex_to_cq(iface->tx.cq), 0);
        if (ret != 0) {
            ucs_error("dcx: req_notify_cq(tx) failed: %s", strerror(ret));
            return UCS_ERR_IO_ERROR;
        }
    }

    if (events & (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG)) {
        ret = ibv_req_notify_cq(ibv_cq_ex_to_cq(iface->rx.cq), 0);
        if (ret != 0) {
            ucs_error("dcx: req_notify_cq(rx) failed: %s", strerror(ret));
            return UCS_ERR_IO_ERROR;
        }
    }

    return UCS_OK;
}

ucs_status_t uct_dcx_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                 uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    unsigned i;

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* Pending requests are sent by progress; the caller polls again.
     * Credit grants are no operation of the user's: a grant to a peer
     * that is gone takes the whole transport timeout to fail, and must not
     * hold the flush that long. Shared DCIs (rand) never return to the free
     * stack: check them all. */
    if (!ucs_arbiter_is_empty(&iface->tx.arbiter) ||
        (iface->tx.num_free + iface->tx.num_grants != iface->tx.num_dci)) {
        goto in_progress;
    }
    if (iface->tx.policy == UCT_DCX_TX_POLICY_RAND) {
        for (i = 0; i < iface->tx.num_dci; ++i) {
            if (iface->tx.dcis[i].posted != iface->tx.dcis[i].completed) {
                goto in_progress;
            }
        }
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
    unsigned i;

    /* Idle DCIs have nothing to order against. */
    for (i = 0; i < iface->tx.num_dci; ++i) {
        if (iface->tx.dcis[i].posted != iface->tx.dcis[i].completed) {
            iface->tx.dcis[i].fence = 1;
        }
    }
    return UCS_OK;
}

/* --- DCIs and the DCT ------------------------------------------------- */

static ucs_status_t uct_dcx_iface_dci_connect(uct_dcx_iface_t *iface,
                                              uct_dcx_dci_t *dci)
{
    struct ibv_qp_attr attr;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state   = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num   = iface->port;
    ret = iface->ops->modify_qp(dci->qp, &attr, IBV_QP_STATE |
                                IBV_QP_PKEY_INDEX | IBV_QP_PORT);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x to init failed: %s", dci->qp->qp_num,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state          = IBV_QPS_RTR;
    attr.path_mtu          = iface->config.path_mtu;
    uct_dcx_iface_fill_av(iface, 0, NULL, &attr.ah_attr);
    ret = iface->ops->modify_qp(dci->qp, &attr, IBV_QP_STATE |
                                IBV_QP_PATH_MTU | IBV_QP_AV);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x to rtr failed: %s", dci->qp->qp_num,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = iface->config.timeout;
    attr.retry_cnt     = iface->config.retry_count;
    attr.rnr_retry     = iface->config.rnr_retry_count;
    attr.sq_psn        = 0;
    for (;;) {
        attr.max_rd_atomic = iface->config.max_rd_atomic;
        ret = iface->ops->modify_qp(dci->qp, &attr, IBV_QP_STATE |
                                    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                    IBV_QP_MAX_QP_RD_ATOMIC);
        if ((ret != EINVAL) || iface->config.rd_atomic_known ||
            (iface->config.max_rd_atomic <= 1)) {
            break;
        }
        /* Without the DC capability (no DEVX) max_qp_init_rd_atom may be
         * more than a DCI may have: the kernel refuses it with EINVAL.
         * Halve it until the device accepts; later DCIs start there. */
        ucs_debug("dcx: dci 0x%x: max_rd_atomic %u refused, trying %u",
                  dci->qp->qp_num, iface->config.max_rd_atomic,
                  iface->config.max_rd_atomic / 2);
        iface->config.max_rd_atomic /= 2;
    }
    if (ret == 0) {
        iface->config.rd_atomic_known = 1;
    }
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x to rts failed: %s", dci->qp->qp_num,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    return UCS_OK;
}

static ucs_status_t uct_dcx_iface_dci_create(uct_dcx_iface_t *iface,
                                             uct_dcx_dci_t *dci)
{
    struct mlx5dv_qp_init_attr dv_attr = {};
    struct ibv_qp_init_attr_ex attr    = {};
    ucs_status_t status;

    dci->room                = 1;
    attr.qp_type             = IBV_QPT_DRIVER;
    attr.comp_mask           = IBV_QP_INIT_ATTR_PD |
                               IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.pd                  = iface->md->pd;
    attr.send_cq             = ibv_cq_ex_to_cq(iface->tx.cq);
    attr.recv_cq             = ibv_cq_ex_to_cq(iface->tx.cq);
    attr.sq_sig_all          = 0;
    attr.send_ops_flags      = IBV_QP_EX_WITH_SEND |
                               IBV_QP_EX_WITH_SEND_WITH_IMM |
                               IBV_QP_EX_WITH_RDMA_WRITE |
                               IBV_QP_EX_WITH_RDMA_READ;
    /* mlx5 refuses atomic send ops on a device without atomics. */
    if (iface->config.atomics) {
        attr.send_ops_flags |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                               IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    }
    dv_attr.comp_mask             = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv_attr.dc_init_attr.dc_type  = MLX5DV_DCTYPE_DCI;
    /* Masked atomics are posted as raw WQEs (rdma-core v44 takes RAW_WQE
     * on a DCI). */
    if (iface->config.ext_atomics32 || iface->config.ext_atomics64) {
        dv_attr.comp_mask        |= MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv_attr.send_ops_flags    = MLX5DV_QP_EX_WITH_RAW_WQE;
    }

    /* A WQE or queue beyond the device's limits is EINVAL: ask for half the
     * inline space, then half the queue, until the device agrees, and keep
     * that for the other DCIs (which must match the first). */
    for (;;) {
        attr.cap.max_send_wr     = iface->tx.req_queue_len;
        attr.cap.max_send_sge    = UCT_DCX_MAX_SGE;
        attr.cap.max_inline_data = iface->tx.req_max_inline;
        dci->qp = iface->ops->mlx5dv_create_qp(iface->md->ctx, &attr,
                                               &dv_attr);
        if (dci->qp != NULL) {
            break;
        }
        if ((errno != EINVAL) || (iface->tx.num_created > 0) ||
            ((iface->tx.req_max_inline == 0) &&
             (iface->tx.req_queue_len <= 1))) {
            ucs_error("dcx: %s: cannot create a dci (queue %u, inline %zu): "
                      "%m", iface->md->device->name, iface->tx.req_queue_len,
                      iface->tx.req_max_inline);
            return UCS_ERR_IO_ERROR;
        }
        if (iface->tx.req_max_inline > 0) {
            iface->tx.req_max_inline /= 2;
        } else {
            iface->tx.req_queue_len /= 2;
        }
        ucs_diag("dcx: %s: the device refused a dci of that size, asking for "
                 "queue %u, inline %zu", iface->md->device->name,
                 iface->tx.req_queue_len, iface->tx.req_max_inline);
    }

    dci->qpx  = iface->ops->qp_to_qp_ex(dci->qp);
    dci->mqpx = (dci->qpx == NULL) ? NULL :
                iface->ops->mlx5dv_qp_ex_from_ibv_qp_ex(dci->qpx);
    if (dci->mqpx == NULL) {
        ucs_error("dcx: %s: dci 0x%x has no extended work request API",
                  iface->md->device->name, dci->qp->qp_num);
        status = UCS_ERR_UNSUPPORTED;
        goto err_destroy;
    }

    /* The device writes back what it granted: the first DCI sets what the
     * interface offers, and a later one must grant no less. */
    /* A DCI takes no more requests than asked for, although the device may
     * grant more (rdma-core rounds the queue up to a power of two bytes):
     * the send CQ holds NUM_DCI x TX_QUEUE_LEN completions, and one more
     * would overrun it, a CQ error that fails every DCI on it. */
    if (iface->tx.num_created == 0) {
        iface->tx.queue_len  = ucs_min(ucs_min(attr.cap.max_send_wr,
                                               iface->tx.req_queue_len),
                                       UINT16_MAX);
        iface->tx.max_inline = attr.cap.max_inline_data;
        iface->tx.max_sge    = ucs_min(attr.cap.max_send_sge, UCT_DCX_MAX_SGE);
    } else if ((attr.cap.max_send_wr < iface->tx.queue_len) ||
               (attr.cap.max_inline_data < iface->tx.max_inline) ||
               (attr.cap.max_send_sge < iface->tx.max_sge)) {
        ucs_error("dcx: %s: dci 0x%x got a smaller send queue than the "
                  "first one", iface->md->device->name, dci->qp->qp_num);
        status = UCS_ERR_IO_ERROR;
        goto err_destroy;
    }

    status = uct_dcx_iface_dci_connect(iface, dci);
    if (status != UCS_OK) {
        goto err_destroy;
    }

    dci->available = iface->tx.queue_len;
    return UCS_OK;

err_destroy:
    iface->ops->destroy_qp(dci->qp);
    dci->qp   = NULL;
    dci->qpx  = NULL;
    dci->mqpx = NULL;
    return status;
}

static ucs_status_t uct_dcx_iface_dct_create(uct_dcx_iface_t *iface)
{
    struct mlx5dv_qp_init_attr dv_attr = {};
    struct ibv_qp_init_attr_ex attr    = {};
    struct ibv_qp_attr qp_attr;
    ucs_status_t status;
    int ret;

    status = uct_dcx_random_key(&iface->rx.dc_key);
    if (status != UCS_OK) {
        return status;
    }

    attr.qp_type                        = IBV_QPT_DRIVER;
    attr.comp_mask                      = IBV_QP_INIT_ATTR_PD;
    attr.pd                             = iface->md->pd;
    attr.send_cq                        = ibv_cq_ex_to_cq(iface->rx.cq);
    attr.recv_cq                        = ibv_cq_ex_to_cq(iface->rx.cq);
    attr.srq                            = iface->rx.srq;
    dv_attr.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv_attr.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv_attr.dc_init_attr.dct_access_key = iface->rx.dc_key;

    iface->rx.dct = iface->ops->mlx5dv_create_qp(iface->md->ctx, &attr,
                                                 &dv_attr);
    if (iface->rx.dct == NULL) {
        ucs_error("dcx: %s: cannot create a dct: %m", iface->md->device->name);
        return UCS_ERR_IO_ERROR;
    }

    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_state        = IBV_QPS_INIT;
    qp_attr.pkey_index      = 0;
    qp_attr.port_num        = iface->port;
    qp_attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ |
                              (iface->config.atomics ?
                               IBV_ACCESS_REMOTE_ATOMIC : 0);
    ret = iface->ops->modify_qp(iface->rx.dct, &qp_attr, IBV_QP_STATE |
                                IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        ucs_error("dcx: dct to init failed: %s", strerror(ret));
        goto err_destroy;
    }

    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_state           = IBV_QPS_RTR;
    qp_attr.path_mtu           = iface->config.path_mtu;
    qp_attr.min_rnr_timer      = iface->config.min_rnr_timer;
    /* The DCT's responses leave with this GRH: the same source GID, hop
     * limit and traffic class as the interface's requests. */
    uct_dcx_iface_fill_av(iface, 0, NULL, &qp_attr.ah_attr);
    ret = iface->ops->modify_qp(iface->rx.dct, &qp_attr, IBV_QP_STATE |
                                IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                                IBV_QP_PATH_MTU);
    if (ret != 0) {
        ucs_error("dcx: dct to rtr failed: %s", strerror(ret));
        goto err_destroy;
    }

    /* The DCT number exists only from RTR on. */
    iface->rx.dctn = iface->rx.dct->qp_num;
    return UCS_OK;

err_destroy:
    iface->ops->destroy_qp(iface->rx.dct);
    return UCS_ERR_IO_ERROR;
}

static struct ibv_cq_ex *uct_dcx_iface_cq_create(uct_dcx_iface_t *iface,
                                                 unsigned cqe,
                                                 uint64_t wc_flags)
{
    struct ibv_cq_init_attr_ex attr = {};
    struct ibv_cq_ex *cq;

    attr.cqe           = cqe;
    attr.wc_flags      = wc_flags;
    attr.channel       = iface->channel;
    attr.comp_mask     = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    attr.flags         = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    cq = iface->ops->create_cq_ex(iface->md->ctx, &attr);
    if (cq == NULL) {
        ucs_error("dcx: %s: cannot create a cq of %u entries: %m",
                  iface->md->device->name, cqe);
    }
    return cq;
}

static void uct_dcx_iface_dcis_destroy(uct_dcx_iface_t *iface, unsigned count)
{
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (iface->tx.dcis[i].qp != NULL) {
            iface->ops->destroy_qp(iface->tx.dcis[i].qp);
        }
    }
}

static void uct_dcx_iface_tx_op_init(uct_iface_h tl_iface, void *obj,
                                     uct_mem_h memh)
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

static int uct_dcx_gid_is_ipv4(const union ibv_gid *gid)
{
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0xff, 0xff};

    return !memcmp(gid->raw, v4_prefix, sizeof(v4_prefix)); /* ::ffff:0:0/96 */
}

/* Rank of a RoCE GID table entry in UCX's order (uct_ib_device_select_gid):
 * RoCE v2 before v1; within a version IPv4-mapped, then IPv6 not
 * link-local, then IPv6 link-local. -1: not a RoCE entry. */
static int uct_dcx_gid_rank(const struct ibv_gid_entry *entry)
{
    const uint8_t *raw = entry->gid.raw;
    int rank;

    if (uct_dcx_gid_is_ipv4(&entry->gid)) {
        rank = 0;
    } else if ((raw[0] == 0xfe) && ((raw[1] & 0xc0) == 0x80)) {
        rank = 2; /* fe80::/10 */
    } else {
        rank = 1;
    }

    switch (entry->gid_type) {
    case IBV_GID_TYPE_ROCE_V2:
        return rank;
    case IBV_GID_TYPE_ROCE_V1:
        return 3 + rank;
    default:
        return -1;
    }
}

/* An entry the port can send from: the device accepts an address handle
 * with it as the source GID (as UCX checks, a listed GID may not be
 * operational). */
static int uct_dcx_iface_gid_usable(uct_dcx_iface_t *iface,
                                    const struct ibv_gid_entry *entry)
{
    struct ibv_ah_attr ah_attr;
    struct ibv_ah *ah;

    uct_dcx_iface_fill_av(iface, 0, &entry->gid, &ah_attr);
    ah_attr.grh.sgid_index = entry->gid_index;
    ah = iface->ops->create_ah(iface->md->pd, &ah_attr);
    if (ah == NULL) {
        return 0;
    }
    iface->ops->destroy_ah(ah);
    return 1;
}

/* RoCE addressing: the source GID (UCX_DCX_GID_INDEX or UCX's choice, by the
 * types ibv_query_gid_ex reports), hop limit and traffic class. */
static ucs_status_t
uct_dcx_iface_init_roce(uct_dcx_iface_t *iface,
                        const uct_dcx_iface_config_t *config,
                        const char *dev_name)
{
    struct ibv_gid_entry entry, best;
    int best_rank, rank, ret;
    char buf[INET6_ADDRSTRLEN];
    uint32_t i;

    iface->config.hop_limit     = config->hop_limit;
    iface->config.traffic_class = 0; /* chosen with the GID's RoCE version */

    if (config->gid_index != UCS_ULUNITS_AUTO) {
        ret = iface->ops->query_gid_ex(iface->md->ctx, iface->port,
                                       config->gid_index, &best, 0,
                                       sizeof(best));
        if (ret != 0) {
            ucs_error("dcx: %s: UCX_DCX_GID_INDEX=%lu: %s", dev_name,
                      config->gid_index,
                      (ret == ENODATA) ? "an empty GID table entry" :
                      strerror(ret));
            return UCS_ERR_INVALID_PARAM;
        }
        if (uct_dcx_gid_rank(&best) < 0) {
            ucs_error("dcx: %s: UCX_DCX_GID_INDEX=%lu is not a RoCE GID",
                      dev_name, config->gid_index);
            return UCS_ERR_INVALID_PARAM;
        }
    } else {
        best_rank = -1;
        for (i = 0; i < (uint32_t)iface->port_attr.gid_tbl_len; ++i) {
            ret = iface->ops->query_gid_ex(iface->md->ctx, iface->port, i,
                                           &entry, 0, sizeof(entry));
            if (ret == ENODATA) {
                continue; /* an empty entry */
            } else if (ret != 0) {
                ucs_error("dcx: %s: ibv_query_gid_ex(%u) failed: %s", dev_name,
                          i, strerror(ret));
                return UCS_ERR_IO_ERROR;
            }

            rank = uct_dcx_gid_rank(&entry);
            if ((rank < 0) || ((best_rank >= 0) && (rank >= best_rank)) ||
                !uct_dcx_iface_gid_usable(iface, &entry)) {
                continue;
            }
            best      = entry;
            best_rank = rank;
        }
        if (best_rank < 0) {
            ucs_error("dcx: %s: no usable RoCE GID in the port's table",
                      dev_name);
            return UCS_ERR_NO_DEVICE;
        }
    }

    iface->gid            = best.gid;
    iface->gid_index      = best.gid_index;
    iface->dev_addr_flags = UCT_DCX_DEV_ADDR_FLAG_GLOBAL |
                            ((best.gid_type == IBV_GID_TYPE_ROCE_V2) ?
                             UCT_DCX_DEV_ADDR_FLAG_ROCE_V2 : 0) |
                            (uct_dcx_gid_is_ipv4(&best.gid) ?
                             UCT_DCX_DEV_ADDR_FLAG_IPV4 : 0);

    if (config->traffic_class == UCS_ULUNITS_AUTO) {
        /* UCX 1.18: 106 (DSCP 26, ECN capable) on RoCE v2, else 0 */
        iface->config.traffic_class =
                (best.gid_type == IBV_GID_TYPE_ROCE_V2) ? 106 : 0;
    } else {
        iface->config.traffic_class = config->traffic_class;
    }

    ucs_debug("dcx: %s: RoCE %s GID index %u %s, hop limit %u, traffic "
              "class %u", dev_name,
              (best.gid_type == IBV_GID_TYPE_ROCE_V2) ? "v2" : "v1",
              iface->gid_index,
              inet_ntop(AF_INET6, best.gid.raw, buf, sizeof(buf)),
              iface->config.hop_limit, iface->config.traffic_class);
    return UCS_OK;
}

static ucs_status_t
uct_dcx_iface_check_config(const uct_dcx_iface_config_t *config)
{
    if ((config->num_dci == 0) || (config->num_dci > UCT_DCX_MAX_DCI)) {
        ucs_error("dcx: UCX_DCX_NUM_DCI=%u is out of range 1..%u",
                  config->num_dci, UCT_DCX_MAX_DCI);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->tx_queue_len == 0) || (config->rx_queue_len == 0)) {
        ucs_error("dcx: UCX_DCX_TX_QUEUE_LEN and RX_QUEUE_LEN must be > 0");
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->retry_count > 7) || (config->rnr_retry_count > 7)) {
        ucs_error("dcx: UCX_DCX_RETRY_COUNT and RNR_RETRY_COUNT are 0..7");
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->quota == 0) {
        ucs_error("dcx: UCX_DCX_QUOTA must be at least 1");
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->sl > 15) {
        ucs_error("dcx: UCX_DCX_SL=%u is out of range 0..15", config->sl);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->gid_index != UCS_ULUNITS_AUTO) && (config->gid_index > 255)) {
        ucs_error("dcx: UCX_DCX_GID_INDEX=%lu is out of range 0..255",
                  config->gid_index);
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->hop_limit > 255) {
        ucs_error("dcx: UCX_DCX_HOP_LIMIT=%u is out of range 0..255",
                  config->hop_limit);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->traffic_class != UCS_ULUNITS_AUTO) &&
        (config->traffic_class > 255)) {
        ucs_error("dcx: UCX_DCX_TRAFFIC_CLASS=%lu is out of range 0..255",
                  config->traffic_class);
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->seg_size < 64) {
        ucs_error("dcx: UCX_DCX_SEG_SIZE=%zu is below 64 bytes",
                  config->seg_size);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->fc_wnd_size == 0) || (config->fc_wnd_size > INT16_MAX)) {
        ucs_error("dcx: UCX_DCX_FC_WND_SIZE=%u is out of range 1..%d",
                  config->fc_wnd_size, INT16_MAX);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->fc_req_thresh < 0) || (config->fc_req_thresh > 1)) {
        ucs_error("dcx: UCX_DCX_FC_REQ_THRESH=%g is out of range 0..1",
                  config->fc_req_thresh);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

static uct_iface_ops_t uct_dcx_iface_tl_ops;

static UCS_CLASS_INIT_FUNC(uct_dcx_iface_t, uct_md_h tl_md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_dcx_iface_config_t *config = ucs_derived_of(tl_config,
                                                          uct_dcx_iface_config_t);
    uct_dcx_md_t *md                     = ucs_derived_of(tl_md, uct_dcx_md_t);
    struct ibv_srq_init_attr srq_attr    = {};
    struct ibv_srq_attr srq_mod          = {};
    unsigned list_max;
    struct ibv_device_attr dev_attr;
    size_t rx_headroom, op_size, rx_align, rx_align_offset;
    const char *dev_name;
    ucs_status_t status;
    unsigned i, port;
    int ret;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_dcx_iface_tl_ops,
                              &uct_dcx_iface_internal_ops, tl_md, worker,
                              params, tl_config);

    /* Classes are allocated without zeroing. */
    memset(UCS_PTR_BYTE_OFFSET(self, sizeof(self->super)), 0,
           sizeof(*self) - sizeof(self->super));

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

    /* "<device>:<port>" */
    dev_name = params->mode.device.dev_name;
    if ((strncmp(dev_name, md->device->name, strlen(md->device->name)) != 0) ||
        (dev_name[strlen(md->device->name)] != ':') ||
        (sscanf(dev_name + strlen(md->device->name) + 1, "%u", &port) != 1) ||
        (port == 0) || (port > UINT8_MAX)) {
        ucs_error("dcx: invalid device name '%s' for memory domain %s",
                  dev_name, md->device->name);
        return UCS_ERR_NO_DEVICE;
    }

    self->md   = md;
    self->ops  = md->ops;
    self->port = port;

    ret = self->ops->query_port(md->ctx, port, &self->port_attr);
    if (ret != 0) {
        ucs_error("dcx: %s: query_port failed: %s", dev_name, strerror(ret));
        return UCS_ERR_NO_DEVICE;
    }
    if (self->port_attr.state != IBV_PORT_ACTIVE) {
        ucs_error("dcx: %s: port is not active", dev_name);
        return UCS_ERR_NO_DEVICE;
    }

    self->is_global      = (self->port_attr.link_layer ==
                            IBV_LINK_LAYER_ETHERNET);
    self->dev_addr_flags = 0;
    self->gid_index      = 0;
    self->config.sl      = config->sl;
    memset(&self->gid, 0, sizeof(self->gid));
    if (self->is_global) {
        status = uct_dcx_iface_init_roce(self, config, dev_name);
        if (status != UCS_OK) {
            return status;
        }
    }

    ret = self->ops->query_device(md->ctx, &dev_attr);
    if (ret != 0) {
        ucs_error("dcx: %s: query_device failed: %s", dev_name, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    status = uct_dcx_path_mtu(config->path_mtu, self->port_attr.active_mtu,
                              &self->config.path_mtu);
    if (status != UCS_OK) {
        return status;
    }

    self->config.timeout         = uct_dcx_qp_timeout_exp(config->timeout);
    self->config.min_rnr_timer   = uct_dcx_rnr_timer_code(config->rnr_timeout);
    self->config.retry_count     = config->retry_count;
    self->config.rnr_retry_count = config->rnr_retry_count;
    /* max_qp_init_rd_atom is the RC limit; a DCI has its own (QUERY_HCA_CAP
     * through DEVX), else the first DCI to connect finds it. */
    self->config.max_rd_atomic   = ucs_min(ucs_min(config->max_rd_atomic,
                                           (unsigned)dev_attr.max_qp_init_rd_atom),
                                           UINT8_MAX);
    if (md->dc_max_rd_atomic != 0) {
        self->config.max_rd_atomic   = ucs_min(self->config.max_rd_atomic,
                                               md->dc_max_rd_atomic);
        self->config.rd_atomic_known = 1;
    }
    self->config.atomics         = (dev_attr.atomic_cap != IBV_ATOMIC_NONE);
    if (!self->config.atomics) {
        ucs_debug("dcx: %s: no device atomics (atomic_cap NONE)", dev_name);
    }
    uct_dcx_iface_ext_atomics(self, dev_name);
    self->tx.seg_size            = config->seg_size;
    self->tx.num_dci             = config->num_dci;
    self->tx.policy              = config->tx_policy;
    /* A quota as long as the queue would never yield: cap it at half. */
    self->tx.quota               = ucs_min(config->quota,
                                           ucs_max(config->tx_queue_len / 2, 1));
    self->tx.rand_seed           = ucs_generate_uuid((uintptr_t)self);
    self->rx.queue_len           = ucs_min(config->rx_queue_len,
                                           (unsigned)dev_attr.max_srq_wr);

    /* Receive buffer layout: see uct_dcx_recv_desc_t. */
    rx_headroom = (params->field_mask & UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                  params->rx_headroom : 0;
    self->rx.headroom_offset    = ucs_align_up(sizeof(uct_dcx_recv_desc_t) +
                                               sizeof(uct_recv_desc_t*),
                                               sizeof(void*));
    self->rx.payload_offset     = self->rx.headroom_offset + rx_headroom;
    self->rx.release_desc.cb    = uct_dcx_iface_release_desc;

    self->channel = self->ops->create_comp_channel(md->ctx);
    if (self->channel == NULL) {
        ucs_error("dcx: %s: cannot create a completion channel: %m", dev_name);
        return UCS_ERR_IO_ERROR;
    }

    status = ucs_sys_fcntl_modfl(self->channel->fd, O_NONBLOCK, 0);
    if (status != UCS_OK) {
        goto err_destroy_channel;
    }

    /* CQs sized so that they cannot overrun: every send work request of
     * every DCI (each takes at most TX_QUEUE_LEN, see
     * uct_dcx_iface_dci_create), and every posted receive. */
    self->tx.cq = uct_dcx_iface_cq_create(self,
                                          config->num_dci *
                                          config->tx_queue_len, 0);
    if (self->tx.cq == NULL) {
        status = UCS_ERR_IO_ERROR;
        goto err_destroy_channel;
    }

    self->rx.cq = uct_dcx_iface_cq_create(self, self->rx.queue_len,
                                          IBV_WC_EX_WITH_BYTE_LEN |
                                          IBV_WC_EX_WITH_IMM);
    if (self->rx.cq == NULL) {
        status = UCS_ERR_IO_ERROR;
        goto err_destroy_tx_cq;
    }

    srq_attr.attr.max_wr  = self->rx.queue_len;
    srq_attr.attr.max_sge = 1;
    self->rx.srq          = self->ops->create_srq(md->pd, &srq_attr);
    if (self->rx.srq == NULL) {
        ucs_error("dcx: %s: cannot create an srq of %u entries: %m", dev_name,
                  self->rx.queue_len);
        status = UCS_ERR_IO_ERROR;
        goto err_destroy_rx_cq;
    }
    self->rx.queue_len    = ucs_min(self->rx.queue_len, srq_attr.attr.max_wr);
    /* A quarter of the queue at most may be missing before a refill. */
    self->rx.refill_batch = ucs_max(ucs_min(UCT_DCX_RX_POST_BATCH,
                                            self->rx.queue_len / 4), 1);

    status = uct_dcx_iface_dct_create(self);
    if (status != UCS_OK) {
        goto err_destroy_srq;
    }

    self->tx.dcis       = ucs_calloc(config->num_dci, sizeof(*self->tx.dcis),
                                     "dcx dcis");
    self->tx.free_stack = ucs_calloc(config->num_dci,
                                     sizeof(*self->tx.free_stack),
                                     "dcx dci stack");
    if ((self->tx.dcis == NULL) || (self->tx.free_stack == NULL)) {
        status = UCS_ERR_NO_MEMORY;
        goto err_free_dcis;
    }

    /* DCI 0 tells what the device grants; the others come when the pool
     * needs them, except under rand, where endpoints pick any. */
    self->tx.req_queue_len  = config->tx_queue_len;
    self->tx.req_max_inline = config->tx_max_inline;
    for (i = 0; i < config->num_dci; ++i) {
        ucs_queue_head_init(&self->tx.dcis[i].outstanding);
        /* Lowest index on top of the stack. */
        self->tx.free_stack[config->num_dci - 1 - i] = i;
        if ((i > 0) && (self->tx.policy != UCT_DCX_TX_POLICY_RAND)) {
            continue;
        }
        status = uct_dcx_iface_dci_create(self, &self->tx.dcis[i]);
        if (status != UCS_OK) {
            uct_dcx_iface_dcis_destroy(self, i);
            goto err_free_dcis;
        }
        ++self->tx.num_created;
    }
    /* Every DCI's ring of user completions; its requests in flight never
     * exceed the send queue, so their sequence numbers never share a slot. */
    self->tx.comp_mask  = ucs_roundup_pow2(self->tx.queue_len) - 1;
    self->tx.comp_rings = ucs_calloc((size_t)config->num_dci *
                                     (self->tx.comp_mask + 1),
                                     sizeof(*self->tx.comp_rings),
                                     "dcx comp rings");
    if (self->tx.comp_rings == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_destroy_dcis;
    }
    for (i = 0; i < config->num_dci; ++i) {
        self->tx.dcis[i].comps = self->tx.comp_rings +
                                 ((size_t)i * (self->tx.comp_mask + 1));
    }

    self->tx.num_free     = config->num_dci;
    self->tx.cq_available = config->num_dci * config->tx_queue_len;
    /* A quarter of the queue at most, so a full send queue always holds
     * signaled requests that free its slots. */
    self->tx.moderation   = ucs_max(ucs_min(config->tx_cq_moderation,
                                            self->tx.queue_len / 4), 1);
    self->tx.self_ah      = NULL;
    /* One SGL call is one batch on one DCI: it must fit in half a send
     * queue, so it can go out while the other half is in flight. */
    self->tx.put_sgl_max  = config->put_sgl ?
                            ucs_min(self->tx.queue_len / 2,
                                    UCT_DCX_SGL_MAX) : 0;
    memset(&self->tx.stats, 0, sizeof(self->tx.stats));

    op_size = sizeof(uct_dcx_op_t) + self->tx.seg_size;
    status  = uct_iface_mpool_init(&self->super, &self->tx.mp, op_size,
                                   ucs_offsetof(uct_dcx_op_t, buf),
                                   UCS_SYS_CACHE_LINE_SIZE, &config->tx_mp,
                                   config->tx_queue_len,
                                   uct_dcx_iface_tx_op_init, "dcx_tx");
    if (status != UCS_OK) {
        goto err_destroy_dcis;
    }

    status = uct_dcx_compat_mpool_init(&self->tx.flush_mp, sizeof(uct_dcx_op_t),
                                       UCS_SYS_CACHE_LINE_SIZE, 128, UINT_MAX,
                                       &uct_dcx_malloc_mpool_ops, "dcx_flush");
    if (status != UCS_OK) {
        goto err_cleanup_tx_mp;
    }

    status = uct_dcx_compat_mpool_init(&self->fc.grant_mp,
                                       sizeof(uct_dcx_fc_pending_grant_t),
                                       UCS_SYS_CACHE_LINE_SIZE, 64, 4096,
                                       &uct_dcx_malloc_mpool_ops,
                                       "dcx_fc_grants");
    if (status != UCS_OK) {
        goto err_cleanup_flush_mp;
    }

    status = uct_dcx_compat_mpool_init(&self->ep_mp, sizeof(uct_dcx_ep_t),
                                       sizeof(void*), 1024, UINT_MAX,
                                       &uct_dcx_malloc_mpool_ops, "dcx_eps");
    if (status != UCS_OK) {
        goto err_cleanup_grant_mp;
    }

    /* By default the user's headroom starts cache-line aligned; with
     * UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT the payload (plus the requested
     * offset) is aligned as asked. */
    status = uct_iface_param_am_alignment(params, self->tx.seg_size,
                                          self->rx.headroom_offset,
                                          self->rx.payload_offset,
                                          &rx_align, &rx_align_offset);
    if (status != UCS_OK) {
        goto err_cleanup_ep_mp;
    }

    status = uct_iface_mpool_init(&self->super, &self->rx.mp,
                                  self->rx.payload_offset + self->tx.seg_size,
                                  rx_align_offset, rx_align, &config->rx_mp,
                                  self->rx.queue_len,
                                  uct_dcx_iface_recv_desc_init, "dcx_rx");
    if (status != UCS_OK) {
        goto err_cleanup_ep_mp;
    }

    ucs_arbiter_init(&self->tx.arbiter);
    self->tx.dispatching = NULL;
    kh_init_inplace(uct_dcx_ah, &self->ah_cache);
    kh_init_inplace(uct_dcx_peer, &self->peers);
    ucs_ptr_array_init(&self->peer_table, "dcx_peers");
    kh_init_inplace(uct_dcx_fc_wait, &self->fc.waiting);
    ucs_queue_head_init(&self->fc.grants);
    if (config->fc_enable) {
        self->fc.wnd_size   = config->fc_wnd_size;
        self->fc.req_thresh = (int16_t)(config->fc_wnd_size *
                                        config->fc_req_thresh);
        self->fc.consume    = 1;
    } else {
        self->fc.wnd_size   = INT16_MAX;
        self->fc.req_thresh = INT16_MIN;
        self->fc.consume    = 0;
    }
    self->fc.timeout = ucs_time_from_sec(config->fc_grant_timeout);
    self->umr.enable      = config->umr;
    self->umr.num_mkeys   = config->umr_mkeys;
    self->umr.max_inline  = config->umr_max_inline;
    self->umr.pack_thresh = ucs_min(config->umr_pack_thresh,
                                    self->tx.seg_size);
    self->umr.unavailable = (config->umr == UCS_NO) || !md->devx ||
                            (config->umr_mkeys == 0);
    /* Iov lists longer than the gather list go through a list UMR: report
     * its capacity (probed now; the UMR QP itself comes with the first
     * operation that needs it). */
    self->umr.max_iov = self->tx.max_sge;
    if (!self->umr.unavailable &&
        (uct_dcx_umr_probe(self->ops, md->ctx, md->pd, config->umr_max_inline,
                           &list_max) == UCS_OK)) {
        self->umr.max_iov = ucs_max(self->tx.max_sge, list_max);
    }
    self->rx.refill = 0;
    uct_dcx_iface_post_recv(self);
    if (self->rx.posted == 0) {
        ucs_error("dcx: %s: cannot post receive buffers", dev_name);
        status = UCS_ERR_NO_MEMORY;
        goto err_cleanup_rx_mp;
    }

    /* A device event (logged by the memory domain) tells when receive
     * buffers run low: the one sign of a receiver that falls behind. */
    srq_mod.srq_limit = ucs_max(self->rx.queue_len / 8, 1);
    ret = self->ops->modify_srq(self->rx.srq, &srq_mod, IBV_SRQ_LIMIT);
    if (ret != 0) {
        ucs_debug("dcx: %s: cannot arm the srq limit: %s", dev_name,
                  strerror(ret));
    }

    /* Last: from now on the event thread may ask for uct_dcx_iface_fail. */
    self->tx.fatal_cb_id        = UCS_CALLBACKQ_ID_NULL;
    self->tx.fatal_listener.cb  = uct_dcx_iface_fatal_event;
    self->tx.fatal_listener.arg = self;
    ucs_list_head_init(&self->tx.fatal_listener.list);
    if (uct_dcx_md_fatal_listen(md, &self->tx.fatal_listener) != UCS_OK) {
        self->tx.fatal = UCS_ERR_IO_ERROR; /* failed meanwhile */
    }

    ucs_debug("dcx: %s: iface %p dct 0x%x, %u dcis, inline %zu, sge %u",
              dev_name, self, self->rx.dctn, self->tx.num_dci,
              self->tx.max_inline, self->tx.max_sge);
    return UCS_OK;

err_cleanup_rx_mp:
    ucs_ptr_array_cleanup(&self->peer_table, 0);
    kh_destroy_inplace(uct_dcx_peer, &self->peers);
    kh_destroy_inplace(uct_dcx_fc_wait, &self->fc.waiting);
    kh_destroy_inplace(uct_dcx_ah, &self->ah_cache);
    ucs_arbiter_cleanup(&self->tx.arbiter);
    ucs_mpool_cleanup(&self->rx.mp, 0);
err_cleanup_ep_mp:
    ucs_mpool_cleanup(&self->ep_mp, 0);
err_cleanup_grant_mp:
    ucs_mpool_cleanup(&self->fc.grant_mp, 0);
err_cleanup_flush_mp:
    ucs_mpool_cleanup(&self->tx.flush_mp, 0);
err_cleanup_tx_mp:
    ucs_mpool_cleanup(&self->tx.mp, 0);
err_destroy_dcis:
    ucs_free(self->tx.comp_rings);
    uct_dcx_iface_dcis_destroy(self, config->num_dci);
err_free_dcis:
    ucs_free(self->tx.free_stack);
    ucs_free(self->tx.dcis);
    self->ops->destroy_qp(self->rx.dct);
err_destroy_srq:
    self->ops->destroy_srq(self->rx.srq);
err_destroy_rx_cq:
    self->ops->destroy_cq(ibv_cq_ex_to_cq(self->rx.cq));
err_destroy_tx_cq:
    self->ops->destroy_cq(ibv_cq_ex_to_cq(self->tx.cq));
err_destroy_channel:
    self->ops->destroy_comp_channel(self->channel);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_dcx_iface_t)
{
    uct_dcx_fc_pending_grant_t *grant;
    uct_completion_t *comp;
    uct_dcx_peer_t *peer;
    struct ibv_ah *ah;
    uct_dcx_op_t *op;
    unsigned i;

    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_dcx_md_fatal_unlisten(self->md, &self->tx.fatal_listener);
    uct_worker_progress_unregister_safe(&self->super.worker->super,
                                        &self->tx.fatal_cb_id);

    /* Destroying the QPs discards their completions: what still waits is
     * cancelled, its user completion called once with UCS_ERR_CANCELED
     * (operations of destroyed endpoints have none left). Handlers are not
     * run: results never arrived, and the UMR engine goes away. */
    uct_dcx_iface_dcis_destroy(self, self->tx.num_dci);
    for (i = 0; i < self->tx.num_dci; ++i) {
        ucs_queue_for_each_extract(op, &self->tx.dcis[i].outstanding, queue,
                                   1) {
            comp     = op->comp;
            op->comp = NULL;
            ucs_mpool_put(op);
            if (comp != NULL) {
                uct_invoke_completion(comp, UCS_ERR_CANCELED);
            }
        }
        uct_dcx_iface_dci_cancel_comps(self, &self->tx.dcis[i], NULL);
    }
    ucs_free(self->tx.comp_rings);
    uct_dcx_iface_umr_cleanup(self);

    self->ops->destroy_qp(self->rx.dct);
    self->ops->destroy_srq(self->rx.srq);
    self->ops->destroy_cq(ibv_cq_ex_to_cq(self->rx.cq));
    self->ops->destroy_cq(ibv_cq_ex_to_cq(self->tx.cq));
    self->ops->destroy_comp_channel(self->channel);
    ucs_arbiter_cleanup(&self->tx.arbiter);
    ucs_queue_for_each_extract(grant, &self->fc.grants, queue, 1) {
        ucs_mpool_put(grant);
    }
    ucs_mpool_cleanup(&self->fc.grant_mp, 1);
    kh_destroy_inplace(uct_dcx_fc_wait, &self->fc.waiting);
    if (kh_size(&self->peers) > 0) {
        ucs_warn("dcx: iface %p destroyed with %u peers in use: endpoints "
                 "were not destroyed first", self, kh_size(&self->peers));
    }
    /* The endpoints still holding them go with their pool below. */
    kh_foreach_value(&self->peers, peer, {
        ucs_free(peer);
    });
    ucs_ptr_array_cleanup(&self->peer_table, 0);
    kh_destroy_inplace(uct_dcx_peer, &self->peers);
    ucs_mpool_cleanup(&self->ep_mp, 1);
    kh_foreach_value(&self->ah_cache, ah, {
        if (self->ops->destroy_ah(ah) != 0) {
            ucs_warn("dcx: destroy_ah failed: %m");
        }
    });
    kh_destroy_inplace(uct_dcx_ah, &self->ah_cache);
    ucs_mpool_cleanup(&self->rx.mp, 0);
    ucs_mpool_cleanup(&self->tx.flush_mp, 1);
    ucs_mpool_cleanup(&self->tx.mp, 1);
    ucs_free(self->tx.free_stack);
    ucs_free(self->tx.dcis);
}

UCS_CLASS_DEFINE(uct_dcx_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_dcx_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*);
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
    .ep_get_address           = UCT_DCX_STUB(uct_ep_get_address_func_t, ucs_empty_function_return_unsupported),
    .ep_connect_to_ep         = UCT_DCX_STUB(uct_ep_connect_to_ep_func_t, ucs_empty_function_return_unsupported),
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

uct_tl_t uct_dcx_tl = {
    .name          = "dcx",
    .query_devices = uct_dcx_query_tl_devices,
    .iface_open    = UCS_CLASS_NEW_FUNC_NAME(uct_dcx_iface_t),
    .config        = {
        .name      = "dcx transport",
        .prefix    = "DCX_",
        .table     = uct_dcx_iface_config_table,
        .size      = sizeof(uct_dcx_iface_config_t),
    }
};
