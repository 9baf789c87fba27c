/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The interface's configuration: the table of UCX_DCX_* variables, their
 * checks, and the conversions of times and sizes into what the device
 * takes (IB timer exponents and codes, path MTU).
 */
#include "dcx_iface_int.h"

#include <ucs/sys/string.h>
#include <ucs/debug/log.h>


const char *uct_dcx_tx_policy_names[] = {
    [UCT_DCX_TX_POLICY_DCS]        = "dcs",
    [UCT_DCX_TX_POLICY_DCS_QUOTA]  = "dcs_quota",
    [UCT_DCX_TX_POLICY_RAND]       = "rand",
    [UCT_DCX_TX_POLICY_HW_DCS]     = "hw_dcs",
    [UCT_DCX_TX_POLICY_DCS_HYBRID] = "dcs_hybrid",
    [UCT_DCX_TX_POLICY_LAST]       = NULL
};

const char *uct_dcx_post_names[] = { [UCT_DCX_POST_AUTO]   = "auto",
                                     [UCT_DCX_POST_DIRECT] = "direct",
                                     [UCT_DCX_POST_VERBS]  = "verbs",
                                     [UCT_DCX_POST_LAST]   = NULL };

/* clang-format off */
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
     "             offered.\n"
     " hw_dcs    - one DCI shared by every endpoint, created with\n"
     "             NUM_DCI_CHANNELS DCI streams where the device offers them\n"
     "             (mlx5dv_create_qp, rdma-core 37 and later), each endpoint on\n"
     "             the next stream in turn: streams run side by side, so a\n"
     "             stalled peer holds back only the endpoints on its stream.\n"
     "             NUM_DCI does not apply. Without streams, one shared DCI.\n"
     "             As with rand, an error fails every endpoint on the DCI and\n"
     "             peer failure handling is not offered.\n"
     " dcs_hybrid - as dcs_quota, but an endpoint that finds the pool empty\n"
     "             moves to the next DCI stream of one more DCI, shared as\n"
     "             with hw_dcs, instead of waiting, and stays there. Without\n"
     "             DCI streams (device, rdma-core before 37, NUM_DCI_CHANNELS\n"
     "             1) endpoints wait as with dcs_quota. With the stream DCI,\n"
     "             peer failure handling is not offered.",
     ucs_offsetof(uct_dcx_iface_config_t, tx_policy),
     UCS_CONFIG_TYPE_ENUM(uct_dcx_tx_policy_names)},

    {"DDP", "try",
     "Out-of-order data placement between the interface's DCIs and the DCTs\n"
     "of peers that have it too (mlx5dv_create_qp MLX5DV_QP_CREATE_OOO_DP,\n"
     "rdma-core 55 and later, on a device whose ooo_recv_wrs_caps list DC):\n"
     "the device may place the data of puts and active messages in any order\n"
     "and consume receive buffers out of order; completions stay in order.\n"
     "A fenced operation then waits until everything posted before it on its\n"
     "DCI has completed. yes - fail the interface where the device or\n"
     "rdma-core does not offer it; try - use it where offered; no - never.",
     ucs_offsetof(uct_dcx_iface_config_t, ddp), UCS_CONFIG_TYPE_TERNARY},

    {"NUM_DCI_CHANNELS", "32",
     "With the hw_dcs and dcs_hybrid policies: the DCI streams of the shared\n"
     "DCI asked for (1 to 256, rounded up to a power of two; the device's\n"
     "maximum at most). 1: no streams.",
     ucs_offsetof(uct_dcx_iface_config_t, num_dci_channels),
     UCS_CONFIG_TYPE_UINT},

    {"QUOTA", "32",
     "With the dcs_quota and dcs_hybrid policies: the outstanding operations\n"
     "after which an endpoint yields its DCI to endpoints that wait for one\n"
     "(at most half of TX_QUEUE_LEN).",
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

    {"PKEY", "auto",
     "InfiniBand partition (P_Key, 0x0..0x7fff) of the DCIs, the DCT and the\n"
     "UMR queue pair: the port's P_Key table entry of that partition with\n"
     "full membership, else one with limited membership (which reaches only\n"
     "full members). \"auto\" takes the table's first full-membership P_Key,\n"
     "else its first limited one, as UCX's UCX_IB_PKEY. RoCE ports use entry\n"
     "0.",
     ucs_offsetof(uct_dcx_iface_config_t, pkey), UCS_CONFIG_TYPE_HEX},

    {"IS_GLOBAL", "n",
     "InfiniBand: give every packet a global routing header (GRH) and carry\n"
     "the port's GID in the device address, as UCX's UCX_IB_IS_GLOBAL; peers\n"
     "behind an IB router need it. dcx does so by itself on a port that\n"
     "requires a GRH (IBV_QPF_GRH_REQUIRED), has LID 0 or a GID outside the\n"
     "link-local prefix, and for a peer whose address shows another subnet.\n"
     "RoCE packets always carry one.",
     ucs_offsetof(uct_dcx_iface_config_t, is_global), UCS_CONFIG_TYPE_BOOL},

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
     "responses included (0..255). \"auto\" is, on RoCE v2, the port's\n"
     "configured global class (MLNX_OFED's tc/<port>/traffic_class in the\n"
     "device's sysfs directory), else 106; 0 on RoCE v1; as UCX 1.22's\n"
     "UCX_IB_TRAFFIC_CLASS.",
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

    {"POST", "auto",
     "How work requests reach the DCIs and the SRQ, and completions are\n"
     "read:\n"
     " direct - dcx writes the WQEs into each DCI's send queue, rings its\n"
     "          doorbell, links receive WQEs into the SRQ and parses the\n"
     "          send and receive CQs' CQEs in place, with the layouts\n"
     "          mlx5dv_init_obj reports; the interface fails to open where\n"
     "          the provider offers no direct objects or a layout dcx does\n"
     "          not write (CQEs other than 64 bytes, send queue strides other\n"
     "          than 64 bytes, an SRQ already posted to).\n"
     " verbs  - through rdma-core's ibv_wr_* / mlx5dv_wr_* builders,\n"
     "          ibv_post_srq_recv and the ibv_cq_ex polling API.\n"
     " auto   - direct where it is available, verbs otherwise (the device\n"
     "          model's API face offers no direct objects).",
     ucs_offsetof(uct_dcx_iface_config_t, post),
     UCS_CONFIG_TYPE_ENUM(uct_dcx_post_names)},

    UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS("TX_", -1, 128, "send",
                                      ucs_offsetof(uct_dcx_iface_config_t,
                                                   tx_mp)),

    UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS("RX_", -1, 256, "receive",
                                      ucs_offsetof(uct_dcx_iface_config_t,
                                                   rx_mp)),

    {NULL}
};
/* clang-format on */


/* IB RNR NAK timer codes 1..31 in microseconds (code 0 is 655.36 ms). */
static const double uct_dcx_rnr_timer_us[] = {
    655360, 10,    20,    30,     40,     60,     80,     120,
    160,    240,   320,   480,    640,    960,    1280,   1920,
    2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
    40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520
};


uint8_t uct_dcx_qp_timeout_exp(double seconds)
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

uint8_t uct_dcx_rnr_timer_code(double seconds)
{
    uint8_t code;

    for (code = 1; code < ucs_static_array_size(uct_dcx_rnr_timer_us); ++code) {
        if (uct_dcx_rnr_timer_us[code] * 1e-6 >= seconds) {
            return code;
        }
    }
    return 0;
}

ucs_status_t
uct_dcx_path_mtu(unsigned bytes, enum ibv_mtu active, enum ibv_mtu *mtu_p)
{
    switch (bytes) {
    case 0:
        *mtu_p = active;
        return UCS_OK;
    case 256:
        *mtu_p = IBV_MTU_256;
        return UCS_OK;
    case 512:
        *mtu_p = IBV_MTU_512;
        return UCS_OK;
    case 1024:
        *mtu_p = IBV_MTU_1024;
        return UCS_OK;
    case 2048:
        *mtu_p = IBV_MTU_2048;
        return UCS_OK;
    case 4096:
        *mtu_p = IBV_MTU_4096;
        return UCS_OK;
    default:
        ucs_error("dcx: invalid UCX_DCX_PATH_MTU %u (256..4096 or 0)", bytes);
        return UCS_ERR_INVALID_PARAM;
    }
}

ucs_status_t uct_dcx_iface_check_config(const uct_dcx_iface_config_t *config)
{
    if ((config->num_dci == 0) || (config->num_dci > UCT_DCX_MAX_DCI)) {
        ucs_error("dcx: UCX_DCX_NUM_DCI=%u is out of range 1..%u",
                  config->num_dci, UCT_DCX_MAX_DCI);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->num_dci_channels == 0) ||
        (config->num_dci_channels > UCT_DCX_MAX_DCI_STREAMS)) {
        ucs_error("dcx: UCX_DCX_NUM_DCI_CHANNELS=%u is out of range 1..%u",
                  config->num_dci_channels, UCT_DCX_MAX_DCI_STREAMS);
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
    if ((config->pkey != UCS_HEXUNITS_AUTO) &&
        (config->pkey > UCT_DCX_PKEY_PARTITION_MASK)) {
        ucs_error("dcx: UCX_DCX_PKEY=0x%zx is out of range 0..0x%x",
                  config->pkey, UCT_DCX_PKEY_PARTITION_MASK);
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
