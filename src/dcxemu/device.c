/* dcxemu devices and contexts: the device list, open/close, device queries,
 * DEVX commands, and the context's ops table. */
#define _GNU_SOURCE
#include "dcxemu_int.h"
#include "wr.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct ibv_device devices[DCXEMU_MAX_DEVICES];
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static int devices_ready;

static int dev_index(struct ibv_device *d)
{
    if (d < devices || d >= devices + DCXEMU_MAX_DEVICES) {
        return -1;
    }
    return (int)(d - devices) < dcxemu_cfg.num_devices ? (int)(d - devices) :
                                                         -1;
}

/* ---------------------------------------------------------------- devices ----
 */

DCXEMU_API struct ibv_device **dcxemu_ibv_get_device_list(int *num_devices)
{
    struct ibv_device **list;
    int err = dcxemu_attach();
    if (err) {
        errno = err;
        return NULL;
    }
    pthread_mutex_lock(&devices_lock);
    if (!devices_ready) {
        for (int i = 0; i < dcxemu_cfg.num_devices; i++) {
            struct ibv_device *d = &devices[i];
            d->node_type         = IBV_NODE_CA;
            d->transport_type    = IBV_TRANSPORT_IB;
            snprintf(d->name, sizeof(d->name), "dcxemu%d", i);
            snprintf(d->dev_name, sizeof(d->dev_name), "uverbs-dcxemu%d", i);
            snprintf(d->dev_path, sizeof(d->dev_path), "/dev/shm%s",
                     dcxemu_cfg.fabric);
            snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/dev/shm%s",
                     dcxemu_cfg.fabric);
        }
        devices_ready = 1;
    }
    pthread_mutex_unlock(&devices_lock);
    list = calloc((size_t)dcxemu_cfg.num_devices + 1, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 0; i < dcxemu_cfg.num_devices; i++) {
        list[i] = &devices[i];
    }
    if (num_devices != NULL) {
        *num_devices = dcxemu_cfg.num_devices;
    }
    return list;
}

DCXEMU_API void dcxemu_ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

DCXEMU_API const char *dcxemu_ibv_get_device_name(struct ibv_device *device)
{
    if (dev_index(device) < 0) {
        errno = EINVAL;
        return NULL;
    }
    return device->name;
}

DCXEMU_API __be64 dcxemu_ibv_get_device_guid(struct ibv_device *device)
{
    int i = dev_index(device);
    if (i < 0) {
        errno = EINVAL;
        return 0;
    }
    return htobe64(dcxemu_guid(i));
}

DCXEMU_API bool dcxemu_mlx5dv_is_supported(struct ibv_device *device)
{
    return dev_index(device) >= 0;
}

static int query_device_ex_op(struct ibv_context *,
                              const struct ibv_query_device_ex_input *,
                              struct ibv_device_attr_ex *, size_t);

static struct ibv_context *open_device(struct ibv_device *device, int devx)
{
    struct dcxemu_context *c;
    int fds[2];
    int i = dev_index(device);
    int err;
    if ((err = dcxemu_usable()) != 0) {
        errno = err;
        return NULL;
    }
    if (i < 0) {
        errno = ENODEV;
        return NULL;
    }
    if (dcxemu_is_fatal(i)) {
        errno = EIO; /* the ucontext's transport domain is a firmware command */
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        free(c);
        errno = e;
        return NULL;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    c->dev_index                     = i;
    c->devx                          = devx;
    c->async_wfd                     = fds[1];
    c->vctx.sz                       = sizeof(struct verbs_context);
    c->vctx.query_port               = dcxemu_query_port_op;
    c->vctx.query_device_ex          = query_device_ex_op;
    c->vctx.create_cq_ex             = dcxemu_create_cq_ex_op;
    c->vctx.create_srq_ex            = dcxemu_create_srq_ex_op;
    c->vctx.create_qp_ex             = dcxemu_create_qp_ex_op;
    c->vctx.context.device           = device;
    c->vctx.context.cmd_fd           = open("/dev/null", O_RDWR | O_CLOEXEC);
    c->vctx.context.async_fd         = fds[0];
    c->vctx.context.num_comp_vectors = 4;
    c->vctx.context.abi_compat       = (void *)UINTPTR_MAX;
    pthread_mutex_init(&c->vctx.context.mutex, NULL);
    dcxemu_ops_init(&c->vctx.context.ops);
    pthread_mutex_lock(&dcxemu_reg_lock);
    c->next         = dcxemu_contexts;
    dcxemu_contexts = c;
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &c->vctx.context;
}

DCXEMU_API struct ibv_context *dcxemu_ibv_open_device(struct ibv_device *device)
{
    return open_device(device, 0);
}

DCXEMU_API struct ibv_context *
dcxemu_mlx5dv_open_device(struct ibv_device *device,
                          struct mlx5dv_context_attr *attr)
{
    if (attr != NULL && ((attr->flags & ~(uint32_t)MLX5DV_CONTEXT_FLAGS_DEVX) ||
                         attr->comp_mask)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return open_device(device, attr != NULL && (attr->flags &
                                                MLX5DV_CONTEXT_FLAGS_DEVX));
}

DCXEMU_API int dcxemu_ibv_close_device(struct ibv_context *context)
{
    struct dcxemu_context *c, **pp;
    int err;
    if (context == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    c = dcxemu_ctx(context);
    pthread_mutex_lock(&dcxemu_reg_lock);
    for (pp = &dcxemu_contexts; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
    close(c->async_wfd);
    close(context->async_fd);
    close(context->cmd_fd);
    pthread_mutex_destroy(&context->mutex);
    free(c);
    return 0;
}

DCXEMU_API const char *dcxemu_ibv_wc_status_str(enum ibv_wc_status status)
{
    /* the strings of libibverbs' ibv_wc_status_str */
    static const char *const str[] = {
        [IBV_WC_SUCCESS]            = "success",
        [IBV_WC_LOC_LEN_ERR]        = "local length error",
        [IBV_WC_LOC_QP_OP_ERR]      = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR]     = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR]       = "local protection error",
        [IBV_WC_WR_FLUSH_ERR]       = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR]        = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR]       = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR]     = "local access error",
        [IBV_WC_REM_INV_REQ_ERR]    = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR]     = "remote access error",
        [IBV_WC_REM_OP_ERR]         = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR]      = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR]  = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR]   = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR]      = "aborted error",
        [IBV_WC_INV_EECN_ERR]       = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR]  = "invalid EE context state",
        [IBV_WC_FATAL_ERR]          = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR]   = "response timeout error",
        [IBV_WC_GENERAL_ERR]        = "general error",
        [IBV_WC_TM_ERR]             = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status >= sizeof(str) / sizeof(str[0]) ||
        str[status] == NULL) {
        return "unknown";
    }
    return str[status];
}

/* ---------------------------------------------------------------- queries ----
 */

static void fill_device_attr(int dev, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "20.99.1000 (dcxemu)");
    a->node_guid        = htobe64(dcxemu_guid(dev));
    a->sys_image_guid   = htobe64(dcxemu_guid(dev));
    a->max_mr_size      = DCXEMU_MAX_MR_SIZE;
    a->page_size_cap    = 0xfffffffffffff000ull;
    a->vendor_id        = 0x02c9;
    a->vendor_part_id   = 4123;
    a->hw_ver           = 0;
    a->max_qp           = DCXEMU_MAX_QPS;
    a->max_qp_wr        = DCXEMU_MAX_QP_WR;
    a->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
                          IBV_DEVICE_CHANGE_PHY_PORT |
                          IBV_DEVICE_PORT_ACTIVE_EVENT |
                          IBV_DEVICE_SYS_IMAGE_GUID |
                          IBV_DEVICE_RC_RNR_NAK_GEN |
                          IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_MEM_WINDOW;
    a->max_sge             = DCXEMU_MAX_SGE;
    a->max_sge_rd          = DCXEMU_MAX_SGE;
    a->max_cq              = DCXEMU_MAX_CQS;
    a->max_cqe             = DCXEMU_MAX_CQE;
    a->max_mr              = DCXEMU_MAX_MRS - 1;
    a->max_pd              = 0xffffff;
    a->max_qp_rd_atom      = DCXEMU_MAX_RD_ATOM;
    a->max_res_rd_atom     = DCXEMU_MAX_RD_ATOM * DCXEMU_MAX_QPS;
    a->max_qp_init_rd_atom = DCXEMU_MAX_RD_ATOM;
    a->atomic_cap  = dcxemu_cfg.no_atomics ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
    a->max_srq     = DCXEMU_MAX_SRQS;
    a->max_srq_wr  = DCXEMU_MAX_SRQ_WR;
    a->max_srq_sge = DCXEMU_MAX_SRQ_SGE;
    a->max_pkeys   = DCXEMU_MAX_PKEYS;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt      = 1;
}

DCXEMU_API int dcxemu_ibv_query_device(struct ibv_context *context,
                                       struct ibv_device_attr *device_attr)
{
    int err;
    if (context == NULL || device_attr == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    fill_device_attr(dcxemu_ctx(context)->dev_index, device_attr);
    return 0;
}

static int query_device_ex_op(struct ibv_context *context,
                              const struct ibv_query_device_ex_input *input,
                              struct ibv_device_attr_ex *attr, size_t attr_size)
{
    struct ibv_device_attr_ex a;
    int err;
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (input != NULL && input->comp_mask != 0) {
        return EINVAL;
    }
    if (attr == NULL || attr_size < sizeof(a.orig_attr)) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    fill_device_attr(dcxemu_ctx(context)->dev_index, &a.orig_attr);
    a.completion_timestamp_mask = (1ull << 63) - 1;
    a.hca_core_clock            = 1000000; /* kHz: timestamps are nanoseconds */
    a.device_cap_flags_ex       = a.orig_attr.device_cap_flags;
    if (!dcxemu_cfg.no_atomics) {
        a.pci_atomic_caps.fetch_add = IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
        a.pci_atomic_caps.compare_swap =
                IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
    }
    a.max_dm_size      = 0;
    a.phys_port_cnt_ex = 1;
    memcpy(attr, &a, attr_size < sizeof(a) ? attr_size : sizeof(a));
    return 0;
}

DCXEMU_API int
dcxemu_ibv_query_device_ex(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *input,
                           struct ibv_device_attr_ex *attr)
{
    if (context == NULL) {
        return EINVAL;
    }
    return query_device_ex_op(context, input, attr, sizeof(*attr));
}

DCXEMU_API int dcxemu_mlx5dv_query_device(struct ibv_context *ctx_in,
                                          struct mlx5dv_context *attrs_out)
{
    uint64_t want;
    int err;
    if (ctx_in == NULL || attrs_out == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    want               = attrs_out->comp_mask;
    attrs_out->version = 0;
    attrs_out->flags   = MLX5DV_CONTEXT_FLAGS_CQE_V1 |
                       MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED |
                       MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW |
                       MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP |
                       MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD;
    attrs_out->comp_mask = 0;
    if (want & MLX5DV_CONTEXT_MASK_DC_ODP_CAPS) {
        attrs_out->dc_odp_caps = 0; /* no ODP on DC */
        attrs_out->comp_mask |= MLX5DV_CONTEXT_MASK_DC_ODP_CAPS;
    }
    if (want & MLX5DV_CONTEXT_MASK_DCI_STREAMS) {
        attrs_out->dci_streams_caps.max_log_num_concurent =
                DCXEMU_LOG_MAX_DCI_STREAMS;
        attrs_out->dci_streams_caps.max_log_num_errored =
                DCXEMU_LOG_MAX_DCI_ERRORED;
        attrs_out->comp_mask |= MLX5DV_CONTEXT_MASK_DCI_STREAMS;
    }
    if (want & MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH) {
        attrs_out->max_wr_memcpy_length = 0;
        attrs_out->comp_mask |= MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH;
    }
    /* as libmlx5: reported only where the device has it (the caller asking
     * for it passes rdma-core 55's longer struct) */
    if ((want & DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS) && dcxemu_cfg.ooo_dp) {
        dcxemu_ooo_caps(&((struct dcxemu_mlx5dv_context_ooo *)attrs_out)
                                 ->ooo_recv_wrs_caps);
        attrs_out->comp_mask |= DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS;
    }
    return 0;
}

/* DEVX general commands (PRM mailboxes, big-endian, MSB-first bit offsets).
 * Only QUERY_HCA_CAP of the general device capabilities is answered, and in it
 * only the fields a DC transport reads: log_max_ra_req_dc, log_max_ra_res_dc,
 * log_max_ra_req_qp, log_max_ra_res_qp, compact_address_vector,
 * dp_ordering_ooo_all_dc (every other field reads 0).
 * QUERY_HCA_CAP is on the kernel's whitelist (devx.c:devx_is_whitelist_cmd),
 * so, as on a DEVX-capable mlx5, it works on a context opened without DEVX too;
 * any other command needs a DEVX context (kernel devx_get_uid: EINVAL) and is
 * not modelled there (EOPNOTSUPP). */
enum {
    DEVX_OP_QUERY_HCA_CAP  = 0x100,
    DEVX_HCA_CAP_GENERAL   = 0x0,
    DEVX_HCA_CAP_ATOMIC    = 0x3,
    DEVX_STATUS_BAD_OP     = 0x02,
    DEVX_STATUS_BAD_PARAM  = 0x03,
    DEVX_STATUS_BAD_OUTLEN = 0x51, /* the output mailbox is too short */
    DEVX_MBOX_HDR          = 16, /* status, syndrome, reserved */
    DEVX_HCA_CAP_SIZE      = 4096 /* cmd_hca_cap: 0x8000 bits */
};

static void
devx_set_field(uint8_t *base, unsigned bit_off, unsigned bits, uint32_t value)
{
    uint32_t dw, mask = (bits == 32) ? UINT32_MAX : ((1u << bits) - 1);
    unsigned shift = 32 - (bit_off % 32) - bits;
    memcpy(&dw, base + (bit_off / 32) * 4, 4);
    dw = be32toh(dw);
    dw = (dw & ~(mask << shift)) | ((value & mask) << shift);
    dw = htobe32(dw);
    memcpy(base + (bit_off / 32) * 4, &dw, 4);
}

/* The general capability page: only the read/atomic depths, whether a DC WQE
 * may carry the compact address vector (compact_address_vector, as UCX reads
 * it) and the out-of-order data placement of DC (dp_ordering_ooo_all_dc,
 * which libmlx5 55 reads into ooo_recv_wrs_caps.max_dct) are filled. */
static void devx_cap_general(uint8_t *cap)
{
    devx_set_field(cap, 0x333, 1, (uint32_t)dcxemu_cfg.ooo_dp);
    devx_set_field(cap, 0x200, 1, (uint32_t)dcxemu_cfg.compact_av);
    devx_set_field(cap, 0x12a, 6,
                   (uint32_t)dcxemu_cfg.log_max_ra_dc); /* log_max_ra_req_dc */
    devx_set_field(cap, 0x13a, 6,
                   (uint32_t)dcxemu_cfg.log_max_ra_dc); /* log_max_ra_res_dc */
    devx_set_field(cap, 0x14a, 6, 4); /* log_max_ra_req_qp */
    devx_set_field(cap, 0x15a, 6, 4); /* log_max_ra_res_qp */
}

/* The atomic capability page (what UCX's ib_mlx5dv_md.c reads):
 * atomic_req_8B_endianness_mode at bit 0x40 (1: host order), atomic_operations
 * at 0x90 (bit 0 CS, 1 FA, 2 masked CS, 3 masked FA), atomic_size_qp at 0xb0
 * and atomic_size_dc at 0xd0 (bit n: 2^n bytes); empty on a device without
 * atomics. */
static void devx_cap_atomic(uint8_t *cap)
{
    if (dcxemu_cfg.no_atomics) {
        return;
    }
    devx_set_field(cap, 0x40, 2, 1);
    devx_set_field(cap, 0x90, 16, 0x3 | (dcxemu_cfg.no_ext_atomics ? 0 : 0xc));
    devx_set_field(cap, 0xb0, 16, 0x4 | 0x8);
    devx_set_field(cap, 0xd0, 16, 0x4 | 0x8);
}

/* A failed firmware command: the status in the output mailbox, EREMOTEIO (as the
 * kernel's DEVX general command returns it, with the mailbox copied out). */
static int devx_fw_error(void *out, uint8_t status)
{
    ((uint8_t *)out)[0] = status;
    errno               = EREMOTEIO;
    return EREMOTEIO;
}

/* mlx5dv_devx_general_cmd: QUERY_HCA_CAP of the general and atomic capability
 * pages (op_mod = cap type << 1 | current).  QUERY_HCA_CAP is on the kernel's
 * whitelist (devx.c: devx_is_whitelist_cmd), so, as on a DEVX-capable mlx5, it
 * works on a context opened without DEVX too; any other command needs a DEVX
 * context (kernel devx_get_uid: EINVAL) and is refused there by the firmware
 * model (BAD_OP). */
DCXEMU_API int dcxemu_mlx5dv_devx_general_cmd(struct ibv_context *context,
                                              const void *in, size_t inlen,
                                              void *out, size_t outlen)
{
    const uint8_t *i = in;
    uint8_t full[DEVX_HCA_CAP_SIZE];
    uint16_t opcode, op_mod;
    size_t n;
    int e = dcxemu_usable();
    if (e == 0 && (context == NULL || in == NULL || out == NULL ||
                   inlen < DEVX_MBOX_HDR || outlen < DEVX_MBOX_HDR)) {
        e = EINVAL;
    }
    if (e == 0 && dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        e = EIO;
    }
    if (e != 0) {
        errno = e;
        return e;
    }
    opcode = (uint16_t)(i[0] << 8 | i[1]);
    op_mod = (uint16_t)(i[6] << 8 | i[7]);
    if (opcode != DEVX_OP_QUERY_HCA_CAP && !dcxemu_ctx(context)->devx) {
        errno = EINVAL;
        return EINVAL;
    }
    memset(out, 0, outlen); /* status 0 (OK), syndrome 0 */
    if (opcode != DEVX_OP_QUERY_HCA_CAP) {
        return devx_fw_error(out, DEVX_STATUS_BAD_OP);
    }
    memset(full, 0, sizeof(full));
    switch (op_mod >> 1) {
    case DEVX_HCA_CAP_GENERAL:
        devx_cap_general(full);
        break;
    case DEVX_HCA_CAP_ATOMIC:
        devx_cap_atomic(full);
        break;
    default:
        return devx_fw_error(
                out, DEVX_STATUS_BAD_PARAM); /* a page the model lacks */
    }
    /* The command's output is the whole page: the firmware checks the
     * output length against its layout (query_hca_cap_out, 0x1010 bytes),
     * which rdma-core, UCX and the kernel all pass in full. */
    if (outlen < DEVX_MBOX_HDR + sizeof(full)) {
        return devx_fw_error(out, DEVX_STATUS_BAD_OUTLEN);
    }
    n = outlen - DEVX_MBOX_HDR;
    memcpy((uint8_t *)out + DEVX_MBOX_HDR, full,
           n < sizeof(full) ? n : sizeof(full));
    return 0;
}

/* ---------------------------------------------------------------- ops table
 * ---- */

void dcxemu_ops_init(struct ibv_context_ops *ops)
{
    memset(ops, 0, sizeof(*ops));
    ops->poll_cq       = dcxemu_poll_cq_op;
    ops->req_notify_cq = dcxemu_req_notify_cq_op;
    ops->post_srq_recv = dcxemu_post_srq_recv_op;
    ops->post_send     = dcxemu_post_send_op;
    ops->post_recv     = dcxemu_post_recv_op;
}
