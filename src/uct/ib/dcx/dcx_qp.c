/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The interface's queues on the device: the CQs, the DCT with its DC key,
 * the DCIs (created, connected through INIT/RTR/RTS, destroyed), and the
 * masked atomics a DCI may post as raw WQEs. The constructor creates the
 * completion channel, the CQs, the SRQ and the DCT in one step.
 */
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>


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

/* --- DCIs and the DCT ------------------------------------------------- */

ucs_status_t
uct_dcx_iface_dci_connect(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    struct ibv_qp_attr attr;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state   = IBV_QPS_INIT;
    attr.pkey_index = iface->pkey_index;
    attr.port_num   = iface->port;
    ret             = iface->ops->modify_qp(dci->qp, &attr,
                                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x to init failed: %s", dci->qp->qp_num,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = iface->config.path_mtu;
    uct_dcx_iface_fill_av(iface, 0, NULL, &attr.ah_attr);
    ret = iface->ops->modify_qp(dci->qp, &attr,
                                IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV);
    if (ret != 0) {
        ucs_error("dcx: dci 0x%x to rtr failed: %s", dci->qp->qp_num,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state  = IBV_QPS_RTS;
    attr.timeout   = iface->config.timeout;
    attr.retry_cnt = iface->config.retry_count;
    attr.rnr_retry = iface->config.rnr_retry_count;
    attr.sq_psn    = 0;
    for (;;) {
        attr.max_rd_atomic = iface->config.max_rd_atomic;
        ret                = iface->ops->modify_qp(dci->qp, &attr,
                                                   IBV_QP_STATE | IBV_QP_TIMEOUT |
                                                           IBV_QP_RETRY_CNT |
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

/* Bit offsets in the atomic capability page (mlx5 PRM). */
#define UCT_DCX_PRM_ATOMIC_8B_MODE_BIT 0x40 /* 2 bits: 1 = host order */
#define UCT_DCX_PRM_ATOMIC_OPS_BIT     0x90
#define UCT_DCX_PRM_ATOMIC_SIZE_QP_BIT 0xb0
#define UCT_DCX_PRM_ATOMIC_SIZE_DC_BIT 0xd0
#define UCT_DCX_PRM_ATOMIC_MASKED_OPS  (UCS_BIT(2) | UCS_BIT(3)) /* CS, FA */

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

    if (!iface->md->devx || iface->is_roce) {
        ucs_debug("dcx: %s: no masked atomics (%s)", dev_name,
                  iface->is_roce ? "RoCE" : "device not opened with DEVX");
        return;
    }

    if (uct_dcx_md_query_hca_cap(iface->md, UCT_DCX_PRM_HCA_CAP_ATOMIC, page,
                                 sizeof(page)) != 0) {
        return;
    }

    ops   = uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_OPS_BIT, 16);
    sizes = uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_SIZE_QP_BIT, 16) &
            uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_SIZE_DC_BIT, 16);
    if ((ops & UCT_DCX_PRM_ATOMIC_MASKED_OPS) ==
        UCT_DCX_PRM_ATOMIC_MASKED_OPS) {
        iface->config.ext_atomics32 = !!(sizes & sizeof(uint32_t));
        iface->config.ext_atomics64 = !!(sizes & sizeof(uint64_t));
        iface->config.ext_atomics64_be =
                uct_dcx_prm_field(page, UCT_DCX_PRM_ATOMIC_8B_MODE_BIT, 2) != 1;
    }
    ucs_debug("dcx: %s: atomic operations 0x%x, sizes 0x%x: "
              "masked atomics 32-bit %s, 64-bit %s",
              dev_name, ops, sizes, iface->config.ext_atomics32 ? "yes" : "no",
              iface->config.ext_atomics64 ? "yes" : "no");
}

/* DCIs of the pool: hw_dcs has one, shared through its streams. */
unsigned uct_dcx_iface_config_num_dci(const uct_dcx_iface_config_t *config)
{
    return (config->tx_policy == UCT_DCX_TX_POLICY_HW_DCS) ? 1 :
                                                             config->num_dci;
}

/* DCIs the interface may create: the pool's, and dcs_hybrid's stream DCI
 * past them (uct_dcx_iface_streams_init decides whether it exists). */
unsigned uct_dcx_iface_num_dci_qps(const uct_dcx_iface_t *iface,
                                   const uct_dcx_iface_config_t *config)
{
    return (iface->tx.stream_dci != UCT_DCX_NO_STREAM_DCI) ?
                   iface->tx.stream_dci + 1u :
                   uct_dcx_iface_config_num_dci(config);
}

/* hw_dcs and dcs_hybrid: the streams of their shared DCI, NUM_DCI_CHANNELS
 * rounded up to a power of two and cut to what mlx5dv_query_device says
 * the device has (rdma-core before v37 and devices without streams say
 * nothing: one stream), with as many streams in error before the DCI
 * fails as the device allows. dcs_hybrid has a stream DCI only with
 * streams: without, endpoints finding the pool empty wait as dcs_quota. */
void uct_dcx_iface_streams_init(uct_dcx_iface_t *iface,
                                const uct_dcx_iface_config_t *config)
{
    const char *policy       = uct_dcx_tx_policy_names[config->tx_policy];
    unsigned channels        = config->num_dci_channels;
    struct mlx5dv_context dv = {};
    unsigned log_streams;

    iface->tx.num_streams         = 1;
    iface->tx.log_streams_errored = 0;
    iface->tx.next_stream         = 0;
    iface->tx.stream_dci          = UCT_DCX_NO_STREAM_DCI;
    if (((config->tx_policy != UCT_DCX_TX_POLICY_HW_DCS) &&
         (config->tx_policy != UCT_DCX_TX_POLICY_DCS_HYBRID)) ||
        (channels == 1)) {
        return;
    }

    dv.comp_mask = MLX5DV_CONTEXT_MASK_DCI_STREAMS;
    if ((iface->ops->mlx5dv_query_device(iface->md->ctx, &dv) != 0) ||
        !(dv.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS) ||
        (dv.dci_streams_caps.max_log_num_concurent == 0)) {
        ucs_diag("dcx: %s: the device has no DCI streams: %s",
                 iface->md->device->name,
                 (config->tx_policy == UCT_DCX_TX_POLICY_HW_DCS) ?
                         "hw_dcs shares one DCI in one stream" :
                         "dcs_hybrid waits for a DCI as dcs_quota");
        return;
    }

    log_streams           = ucs_min(ucs_ilog2(ucs_roundup_pow2(channels)),
                                    dv.dci_streams_caps.max_log_num_concurent);
    iface->tx.num_streams = 1u << log_streams;
    iface->tx.log_streams_errored =
            ucs_min(dv.dci_streams_caps.max_log_num_errored, log_streams);
    if (config->tx_policy == UCT_DCX_TX_POLICY_DCS_HYBRID) {
        iface->tx.stream_dci = config->num_dci;
    }
    ucs_debug("dcx: %s: %s: %u DCI streams, up to %u in error",
              iface->md->device->name, policy, iface->tx.num_streams,
              1u << iface->tx.log_streams_errored);
}

/* Out-of-order data placement (mlx5dv_create_qp(3), mlx5dv_query_device(3)),
 * rdma-core 55: its values, and rdma-core 55's struct mlx5dv_context, whose
 * fields after crypto_caps (rdma-core 37, the end of older headers' struct)
 * are 8-byte aligned, so they start where the older struct ends. An older
 * libmlx5 knows neither: it clears the mask bit (no caps) and refuses the
 * create flag. */
#define UCT_DCX_MLX5DV_QP_CREATE_OOO_DP          (1u << 7)
#define UCT_DCX_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS (1ull << 16)
typedef struct {
    struct mlx5dv_context base;
    uint64_t max_dc_rd_atom;
    uint64_t max_dc_init_rd_atom;
    struct {
        uint32_t value, mask;
    } reg_c0;
    struct {
        uint32_t max_rc, max_xrc, max_dct, max_ud, max_uc;
    } ooo_recv_wrs_caps;
} uct_dcx_mlx5dv_context_t;

/* UCX_DCX_DDP: DCIs and the DCT with out-of-order data placement where the
 * device takes it on DC (ooo_recv_wrs_caps.max_dct, which covers DCIs too:
 * libmlx5 checks DRIVER QPs against it). */
ucs_status_t uct_dcx_iface_ddp_init(uct_dcx_iface_t *iface,
                                    const uct_dcx_iface_config_t *config)
{
    uct_dcx_mlx5dv_context_t dv = {};

    iface->config.ddp = 0;
    if (config->ddp == UCS_NO) {
        return UCS_OK;
    }

    dv.base.comp_mask = UCT_DCX_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS;
    if ((iface->ops->mlx5dv_query_device(iface->md->ctx, &dv.base) == 0) &&
        (dv.base.comp_mask & UCT_DCX_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS) &&
        (dv.ooo_recv_wrs_caps.max_dct != 0)) {
        iface->config.ddp = 1;
        ucs_debug("dcx: %s: out-of-order data placement on (up to %u "
                  "receives)",
                  iface->md->device->name, dv.ooo_recv_wrs_caps.max_dct);
        return UCS_OK;
    }

    if (config->ddp == UCS_YES) {
        ucs_error("dcx: %s: UCX_DCX_DDP=yes, but the device offers no "
                  "out-of-order data placement on DC (mlx5dv_query_device "
                  "reports no ooo_recv_wrs_caps.max_dct; it needs rdma-core "
                  "55 or later and a device that has it)",
                  iface->md->device->name);
        return UCS_ERR_UNSUPPORTED;
    }
    ucs_debug("dcx: %s: no out-of-order data placement on DC",
              iface->md->device->name);
    return UCS_OK;
}

/* What a DCI is created with: its CQ and the operations it posts. */
static void uct_dcx_iface_dci_attr(const uct_dcx_iface_t *iface,
                                   const uct_dcx_dci_t *dci,
                                   struct ibv_qp_init_attr_ex *attr_p,
                                   struct mlx5dv_qp_init_attr *dv_attr_p)
{
    struct mlx5dv_qp_init_attr dv_attr = {};
    struct ibv_qp_init_attr_ex attr    = {};

    attr.qp_type        = IBV_QPT_DRIVER;
    attr.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.pd             = iface->md->pd;
    attr.send_cq        = ibv_cq_ex_to_cq(iface->tx.cq);
    attr.recv_cq        = ibv_cq_ex_to_cq(iface->tx.cq);
    attr.sq_sig_all     = 0;
    attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
    /* mlx5 refuses atomic send ops on a device without atomics. */
    if (iface->config.atomics) {
        attr.send_ops_flags |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                               IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    }
    dv_attr.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv_attr.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    /* Masked atomics are posted as raw WQEs: rdma-core takes RAW_WQE on a
     * DCI since v36 (uct_dcx_iface_dci_qp_create copes with older ones). */
    if (iface->config.ext_atomics32 || iface->config.ext_atomics64) {
        dv_attr.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv_attr.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
    }
    if (iface->config.ddp) {
        dv_attr.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
        dv_attr.create_flags |= UCT_DCX_MLX5DV_QP_CREATE_OOO_DP;
    }
    /* Streams on the shared DCI only: an endpoint holding a pool DCI of
     * dcs_hybrid posts on stream 0. */
    if (dci->shared && (iface->tx.num_streams > 1)) {
        dv_attr.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
        dv_attr.dc_init_attr.dci_streams.log_num_concurent = ucs_ilog2(
                iface->tx.num_streams);
        dv_attr.dc_init_attr.dci_streams.log_num_errored =
                iface->tx.log_streams_errored;
    }
    *attr_p    = attr;
    *dv_attr_p = dv_attr;
}

/* rdma-core before v36 has no raw-WQE builder and refuses a DCI that asks
 * for it with EOPNOTSUPP: the first DCI then goes without, and so does the
 * interface's masked atomics (the interface offers what it has without
 * them, as on a device that lists none). */
static int uct_dcx_iface_dci_drop_raw_wqe(uct_dcx_iface_t *iface,
                                          struct mlx5dv_qp_init_attr *dv_attr)
{
    if ((errno != EOPNOTSUPP) || (iface->tx.pool.num_created > 0) ||
        !(dv_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS)) {
        return 0;
    }

    ucs_diag("dcx: %s: the provider refused a dci with raw work requests "
             "(rdma-core before v36?): no masked atomics",
             iface->md->device->name);
    dv_attr->comp_mask &= ~MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    dv_attr->send_ops_flags        = 0;
    iface->config.ext_atomics32    = 0;
    iface->config.ext_atomics64    = 0;
    iface->config.ext_atomics64_be = 0;
    return 1;
}

/* A WQE or queue beyond the device's limits is EINVAL: ask for half the
 * inline space, then half the queue, until the device agrees, and keep
 * that for the other DCIs (which must match the first). */
static ucs_status_t
uct_dcx_iface_dci_qp_create(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                            struct ibv_qp_init_attr_ex *attr,
                            struct mlx5dv_qp_init_attr *dv_attr)
{
    for (;;) {
        attr->cap.max_send_wr     = iface->tx.req_queue_len;
        attr->cap.max_send_sge    = UCT_DCX_MAX_SGE;
        attr->cap.max_inline_data = iface->tx.req_max_inline;
        dci->qp = iface->ops->mlx5dv_create_qp(iface->md->ctx, attr, dv_attr);
        if (dci->qp != NULL) {
            return UCS_OK;
        }
        if (uct_dcx_iface_dci_drop_raw_wqe(iface, dv_attr)) {
            continue;
        }
        if ((errno != EINVAL) || (iface->tx.pool.num_created > 0) ||
            ((iface->tx.req_max_inline == 0) &&
             (iface->tx.req_queue_len <= 1))) {
            ucs_error("dcx: %s: cannot create a dci (queue %u, inline %zu): %m",
                      iface->md->device->name, iface->tx.req_queue_len,
                      iface->tx.req_max_inline);
            return UCS_ERR_IO_ERROR;
        }
        if (iface->tx.req_max_inline > 0) {
            iface->tx.req_max_inline /= 2;
        } else {
            iface->tx.req_queue_len /= 2;
        }
        ucs_diag("dcx: %s: the device refused a dci of that size, "
                 "asking for queue %u, inline %zu",
                 iface->md->device->name, iface->tx.req_queue_len,
                 iface->tx.req_max_inline);
    }
}

/* Direct posting is unavailable (@a reason): UCX_DCX_POST=direct fails the
 * interface, auto goes on with rdma-core's builders. */
static ucs_status_t uct_dcx_iface_direct_unavailable(uct_dcx_iface_t *iface,
                                                     ucs_status_t status,
                                                     const char *reason)
{
    if (iface->tx.post == UCT_DCX_POST_DIRECT) {
        ucs_error("dcx: %s: UCX_DCX_POST=direct: %s", iface->md->device->name,
                  reason);
        return status;
    }

    ucs_debug("dcx: %s: posting through rdma-core's builders: %s",
              iface->md->device->name, reason);
    iface->tx.post = UCT_DCX_POST_VERBS;
    return UCS_OK;
}

/* The DCI gets dcx's own WQE writer (UCX_DCX_POST direct or auto). The first
 * DCI decides for the interface: direct needs the send CQ's layout and the
 * DCI's; the others are made alike, and every DCI has one writer. */
static ucs_status_t
uct_dcx_iface_dci_direct(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    uct_dcx_direct_sq_t *sq;
    struct mlx5dv_qp_ex *mqpx;
    struct ibv_qp_ex *qpx;
    const char *reason;
    ucs_status_t status;

    if (iface->tx.direct == NULL) {
        ucs_assert(iface->tx.pool.num_created == 0);
        status = uct_dcx_direct_create(iface->ops,
                                       ibv_cq_ex_to_cq(iface->tx.cq),
                                       iface->md->compact_av, &iface->tx.direct,
                                       &reason);
        if (status != UCS_OK) {
            return uct_dcx_iface_direct_unavailable(iface, status, reason);
        }
    }

    status = uct_dcx_direct_sq_create(iface->tx.direct, dci->qp,
                                      iface->tx.max_inline, iface->tx.max_sge,
                                      &sq, &qpx, &mqpx, &reason);
    if (status != UCS_OK) {
        if (iface->tx.pool.num_created > 0) {
            ucs_error("dcx: %s: dci 0x%x: no direct posting: %s",
                      iface->md->device->name, dci->qp->qp_num, reason);
            return status;
        }
        uct_dcx_iface_direct_cleanup(iface);
        return uct_dcx_iface_direct_unavailable(iface, status, reason);
    }

    if (iface->tx.pool.num_created == 0) {
        iface->tx.poll_cq = uct_dcx_direct_poll_cq(iface->tx.direct);
        ucs_debug("dcx: %s: dcx writes its own WQEs and parses its send CQEs",
                  iface->md->device->name);
    }
    dci->direct = sq;
    dci->qpx    = qpx;
    dci->mqpx   = mqpx;
    return UCS_OK;
}

ucs_status_t
uct_dcx_iface_dci_create(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci)
{
    struct mlx5dv_qp_init_attr dv_attr;
    struct ibv_qp_init_attr_ex attr;
    ucs_status_t status;

    dci->room = 1;
    uct_dcx_iface_dci_attr(iface, dci, &attr, &dv_attr);
    status = uct_dcx_iface_dci_qp_create(iface, dci, &attr, &dv_attr);
    if (status != UCS_OK) {
        return status;
    }

    dci->qpx  = iface->ops->qp_to_qp_ex(dci->qp);
    dci->mqpx = (dci->qpx == NULL) ?
                        NULL :
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
    if (iface->tx.pool.num_created == 0) {
        iface->tx.queue_len  = ucs_min(ucs_min(attr.cap.max_send_wr,
                                               iface->tx.req_queue_len),
                                       UINT16_MAX);
        iface->tx.max_inline = attr.cap.max_inline_data;
        iface->tx.max_sge    = ucs_min(attr.cap.max_send_sge, UCT_DCX_MAX_SGE);
    } else if ((attr.cap.max_send_wr < iface->tx.queue_len) ||
               (attr.cap.max_inline_data < iface->tx.max_inline) ||
               (attr.cap.max_send_sge < iface->tx.max_sge)) {
        ucs_error(
                "dcx: %s: dci 0x%x got a smaller send queue than the first one",
                iface->md->device->name, dci->qp->qp_num);
        status = UCS_ERR_IO_ERROR;
        goto err_destroy;
    }

    if (iface->tx.post != UCT_DCX_POST_VERBS) {
        status = uct_dcx_iface_dci_direct(iface, dci);
        if (status != UCS_OK) {
            goto err_destroy;
        }
    }

    status = uct_dcx_iface_dci_connect(iface, dci);
    if (status != UCS_OK) {
        goto err_destroy;
    }

    dci->available = iface->tx.queue_len;
    return UCS_OK;

err_destroy:
    if (dci->direct != NULL) {
        uct_dcx_direct_sq_destroy(dci->direct);
        dci->direct = NULL;
    }
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
    if (iface->config.ddp) {
        dv_attr.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
        dv_attr.create_flags = UCT_DCX_MLX5DV_QP_CREATE_OOO_DP;
    }

    iface->rx.dct = iface->ops->mlx5dv_create_qp(iface->md->ctx, &attr,
                                                 &dv_attr);
    if (iface->rx.dct == NULL) {
        ucs_error("dcx: %s: cannot create a dct: %m", iface->md->device->name);
        return UCS_ERR_IO_ERROR;
    }

    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_state        = IBV_QPS_INIT;
    qp_attr.pkey_index      = iface->pkey_index;
    qp_attr.port_num        = iface->port;
    qp_attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              (iface->config.atomics ?
                                       IBV_ACCESS_REMOTE_ATOMIC :
                                       0);
    ret = iface->ops->modify_qp(iface->rx.dct, &qp_attr,
                                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        ucs_error("dcx: dct to init failed: %s", strerror(ret));
        goto err_destroy;
    }

    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_state      = IBV_QPS_RTR;
    qp_attr.path_mtu      = iface->config.path_mtu;
    qp_attr.min_rnr_timer = iface->config.min_rnr_timer;
    /* The DCT's responses leave with this GRH: the same source GID, hop
     * limit and traffic class as the interface's requests. */
    uct_dcx_iface_fill_av(iface, 0, NULL, &qp_attr.ah_attr);
    ret = iface->ops->modify_qp(iface->rx.dct, &qp_attr,
                                IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER |
                                        IBV_QP_AV | IBV_QP_PATH_MTU);
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

static struct ibv_cq_ex *
uct_dcx_iface_cq_create(uct_dcx_iface_t *iface, unsigned cqe, uint64_t wc_flags)
{
    struct ibv_cq_init_attr_ex attr = {};
    struct ibv_cq_ex *cq;

    attr.cqe       = cqe;
    attr.wc_flags  = wc_flags;
    attr.channel   = iface->channel;
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    attr.flags     = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    cq             = iface->ops->create_cq_ex(iface->md->ctx, &attr);
    if (cq == NULL) {
        ucs_error("dcx: %s: cannot create a cq of %u entries: %m",
                  iface->md->device->name, cqe);
    }
    return cq;
}

void uct_dcx_iface_dcis_destroy(uct_dcx_iface_t *iface, unsigned count)
{
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (iface->tx.dcis[i].direct != NULL) {
            uct_dcx_direct_sq_destroy(iface->tx.dcis[i].direct);
            iface->tx.dcis[i].direct = NULL;
        }
        if (iface->tx.dcis[i].qp != NULL) {
            iface->ops->destroy_qp(iface->tx.dcis[i].qp);
        }
    }
}

/* The send CQ is polled through itself again (the DCIs are gone). */
void uct_dcx_iface_direct_cleanup(uct_dcx_iface_t *iface)
{
    if (iface->tx.direct != NULL) {
        uct_dcx_direct_destroy(iface->tx.direct);
        iface->tx.direct = NULL;
    }
    iface->tx.poll_cq = iface->tx.cq;
}

/* --- the CQs, and the constructor's queues step ----------------------- */

/* CQs sized so that they cannot overrun: every send work request of every
 * DCI (each takes at most TX_QUEUE_LEN, see uct_dcx_iface_dci_create), and
 * every posted receive. */
static ucs_status_t
uct_dcx_iface_cqs_create(uct_dcx_iface_t *iface,
                         const uct_dcx_iface_config_t *config)
{
    iface->tx.cq = uct_dcx_iface_cq_create(
            iface,
            uct_dcx_iface_num_dci_qps(iface, config) * config->tx_queue_len, 0);
    if (iface->tx.cq == NULL) {
        return UCS_ERR_IO_ERROR;
    }
    /* Until the first DCI says whether dcx writes its own WQEs. */
    iface->tx.poll_cq = iface->tx.cq;
    iface->tx.direct  = NULL;
    iface->tx.post    = (uct_dcx_post_t)config->post;

    iface->rx.cq = uct_dcx_iface_cq_create(iface, iface->rx.queue_len,
                                           IBV_WC_EX_WITH_BYTE_LEN |
                                                   IBV_WC_EX_WITH_IMM);
    if (iface->rx.cq == NULL) {
        iface->ops->destroy_cq(ibv_cq_ex_to_cq(iface->tx.cq));
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

static void uct_dcx_iface_cqs_destroy(uct_dcx_iface_t *iface)
{
    iface->ops->destroy_cq(ibv_cq_ex_to_cq(iface->rx.cq));
    iface->ops->destroy_cq(ibv_cq_ex_to_cq(iface->tx.cq));
}

/* One completion channel for the events of both CQs. */
static ucs_status_t
uct_dcx_iface_channel_create(uct_dcx_iface_t *iface, const char *dev_name)
{
    ucs_status_t status;

    iface->channel = iface->ops->create_comp_channel(iface->md->ctx);
    if (iface->channel == NULL) {
        ucs_error("dcx: %s: cannot create a completion channel: %m", dev_name);
        return UCS_ERR_IO_ERROR;
    }

    status = ucs_sys_fcntl_modfl(iface->channel->fd, O_NONBLOCK, 0);
    if (status != UCS_OK) {
        iface->ops->destroy_comp_channel(iface->channel);
    }
    return status;
}

/* The queues on the device: the completion channel, the CQs, the SRQ and
 * the DCT. */
ucs_status_t uct_dcx_iface_queues_create(uct_dcx_iface_t *iface,
                                         const uct_dcx_iface_config_t *config,
                                         const char *dev_name)
{
    ucs_status_t status;

    status = uct_dcx_iface_channel_create(iface, dev_name);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_iface_cqs_create(iface, config);
    if (status != UCS_OK) {
        goto err_destroy_channel;
    }

    status = uct_dcx_iface_srq_create(iface, dev_name);
    if (status != UCS_OK) {
        goto err_destroy_cqs;
    }

    status = uct_dcx_iface_dct_create(iface);
    if (status != UCS_OK) {
        goto err_destroy_srq;
    }

    return UCS_OK;

err_destroy_srq:
    uct_dcx_iface_srq_destroy(iface);
err_destroy_cqs:
    uct_dcx_iface_cqs_destroy(iface);
err_destroy_channel:
    iface->ops->destroy_comp_channel(iface->channel);
    return status;
}

void uct_dcx_iface_queues_destroy(uct_dcx_iface_t *iface)
{
    iface->ops->destroy_qp(iface->rx.dct);
    uct_dcx_iface_srq_destroy(iface);
    uct_dcx_iface_cqs_destroy(iface);
    iface->ops->destroy_comp_channel(iface->channel);
}
