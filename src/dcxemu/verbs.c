/* dcxemu control objects: devices, contexts, queries, PD, MR, AH, channels, CQs, SRQs, events. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK_USABLE_NULL()  do { int e_ = dcxemu_usable(); if (e_) DCXEMU_ERR(e_); } while (0)
#define CHECK_USABLE_RET()   do { int e_ = dcxemu_usable(); if (e_) return e_; } while (0)
/* A firmware command on a device in fatal mode: EIO (dcxemu_device_fatal). */
#define CHECK_FATAL_NULL(ctx) \
    do { if (dcxemu_is_fatal(dcxemu_ctx(ctx)->dev_index)) DCXEMU_ERR(EIO); } while (0)

static struct ibv_device devices[DCXEMU_MAX_DEVICES];
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static int devices_ready;
static _Atomic uint32_t cq_serial = 1;

static int dev_index(struct ibv_device *d)
{
    if (d < devices || d >= devices + DCXEMU_MAX_DEVICES) {
        return -1;
    }
    return (int)(d - devices) < dcxemu_cfg.num_devices ? (int)(d - devices) : -1;
}

struct dcxemu_context *dcxemu_ctx(struct ibv_context *c)
{
    return (struct dcxemu_context *)((char *)c - offsetof(struct dcxemu_context, vctx.context));
}

static uint64_t guid_of(int dev)
{
    /* Mellanox OUI, then a per-fabric-member-independent device number */
    return 0x0002c90300dc0000ull | (uint64_t)(dev + 1);
}

/* ---------------------------------------------------------------- devices ---- */

DCXEMU_API struct ibv_device **dcxemu_ibv_get_device_list(int *num_devices)
{
    struct ibv_device **list;
    int err = dcxemu_attach();
    if (err) {
        DCXEMU_ERR(err);
    }
    pthread_mutex_lock(&devices_lock);
    if (!devices_ready) {
        for (int i = 0; i < dcxemu_cfg.num_devices; i++) {
            struct ibv_device *d = &devices[i];
            d->node_type = IBV_NODE_CA;
            d->transport_type = IBV_TRANSPORT_IB;
            snprintf(d->name, sizeof(d->name), "dcxemu%d", i);
            snprintf(d->dev_name, sizeof(d->dev_name), "uverbs-dcxemu%d", i);
            snprintf(d->dev_path, sizeof(d->dev_path), "/dev/shm%s", dcxemu_cfg.fabric);
            snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/dev/shm%s", dcxemu_cfg.fabric);
        }
        devices_ready = 1;
    }
    pthread_mutex_unlock(&devices_lock);
    list = calloc((size_t)dcxemu_cfg.num_devices + 1, sizeof(*list));
    if (list == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    for (int i = 0; i < dcxemu_cfg.num_devices; i++) {
        list[i] = &devices[i];
    }
    if (num_devices != NULL) {
        *num_devices = dcxemu_cfg.num_devices;
    }
    return list;
}

DCXEMU_API void dcxemu_ibv_free_device_list(struct ibv_device **list) { free(list); }

DCXEMU_API const char *dcxemu_ibv_get_device_name(struct ibv_device *device)
{
    if (dev_index(device) < 0) {
        DCXEMU_ERR(EINVAL);
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
    return htobe64(guid_of(i));
}

DCXEMU_API bool dcxemu_mlx5dv_is_supported(struct ibv_device *device)
{
    return dev_index(device) >= 0;
}

static int query_port_op(struct ibv_context *, uint8_t, struct ibv_port_attr *, size_t);
static int query_device_ex_op(struct ibv_context *, const struct ibv_query_device_ex_input *,
                              struct ibv_device_attr_ex *, size_t);
static struct ibv_cq_ex *create_cq_ex_op(struct ibv_context *, struct ibv_cq_init_attr_ex *);
static struct ibv_srq *create_srq_ex_op(struct ibv_context *, struct ibv_srq_init_attr_ex *);

static struct ibv_context *open_device(struct ibv_device *device, int devx)
{
    struct dcxemu_context *c;
    int fds[2];
    int i = dev_index(device);
    CHECK_USABLE_NULL();
    if (i < 0) {
        DCXEMU_ERR(ENODEV);
    }
    if (dcxemu_is_fatal(i)) {
        DCXEMU_ERR(EIO);   /* the ucontext's transport domain is a firmware command */
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        free(c);
        DCXEMU_ERR(e);
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    c->dev_index = i;
    c->devx = devx;
    c->async_wfd = fds[1];
    c->vctx.sz = sizeof(struct verbs_context);
    c->vctx.query_port = query_port_op;
    c->vctx.query_device_ex = query_device_ex_op;
    c->vctx.create_cq_ex = create_cq_ex_op;
    c->vctx.create_srq_ex = create_srq_ex_op;
    c->vctx.create_qp_ex = dcxemu_create_qp_ex_op;
    c->vctx.context.device = device;
    c->vctx.context.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    c->vctx.context.async_fd = fds[0];
    c->vctx.context.num_comp_vectors = 4;
    c->vctx.context.abi_compat = (void *)UINTPTR_MAX;
    pthread_mutex_init(&c->vctx.context.mutex, NULL);
    dcxemu_ops_init(&c->vctx.context.ops);
    pthread_mutex_lock(&dcxemu_reg_lock);
    c->next = dcxemu_contexts;
    dcxemu_contexts = c;
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &c->vctx.context;
}

DCXEMU_API struct ibv_context *dcxemu_ibv_open_device(struct ibv_device *device)
{
    return open_device(device, 0);
}

DCXEMU_API struct ibv_context *dcxemu_mlx5dv_open_device(struct ibv_device *device,
                                                         struct mlx5dv_context_attr *attr)
{
    if (attr != NULL && ((attr->flags & ~(uint32_t)MLX5DV_CONTEXT_FLAGS_DEVX) || attr->comp_mask)) {
        DCXEMU_ERR(EOPNOTSUPP);
    }
    return open_device(device, attr != NULL && (attr->flags & MLX5DV_CONTEXT_FLAGS_DEVX));
}

DCXEMU_API int dcxemu_ibv_close_device(struct ibv_context *context)
{
    struct dcxemu_context *c, **pp;
    if (context == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
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
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status >= sizeof(str) / sizeof(str[0]) || str[status] == NULL) {
        return "unknown";
    }
    return str[status];
}

/* ---------------------------------------------------------------- queries ---- */

static void fill_device_attr(int dev, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "20.99.1000 (dcxemu)");
    a->node_guid = htobe64(guid_of(dev));
    a->sys_image_guid = htobe64(guid_of(dev));
    a->max_mr_size = DCXEMU_MAX_MR_SIZE;
    a->page_size_cap = 0xfffffffffffff000ull;
    a->vendor_id = 0x02c9;
    a->vendor_part_id = 4123;
    a->hw_ver = 0;
    a->max_qp = DCXEMU_MAX_QPS;
    a->max_qp_wr = DCXEMU_MAX_QP_WR;
    a->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
                          IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_PORT_ACTIVE_EVENT |
                          IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN |
                          IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_MEM_WINDOW;
    a->max_sge = DCXEMU_MAX_SGE;
    a->max_sge_rd = DCXEMU_MAX_SGE;
    a->max_cq = DCXEMU_MAX_CQS;
    a->max_cqe = DCXEMU_MAX_CQE;
    a->max_mr = DCXEMU_MAX_MRS - 1;
    a->max_pd = 0xffffff;
    a->max_qp_rd_atom = DCXEMU_MAX_RD_ATOM;
    a->max_res_rd_atom = DCXEMU_MAX_RD_ATOM * DCXEMU_MAX_QPS;
    a->max_qp_init_rd_atom = DCXEMU_MAX_RD_ATOM;
    a->atomic_cap = dcxemu_cfg.no_atomics ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
    a->max_srq = DCXEMU_MAX_SRQS;
    a->max_srq_wr = DCXEMU_MAX_SRQ_WR;
    a->max_srq_sge = DCXEMU_MAX_SRQ_SGE;
    a->max_pkeys = DCXEMU_MAX_PKEYS;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
}

DCXEMU_API int dcxemu_ibv_query_device(struct ibv_context *context,
                                       struct ibv_device_attr *device_attr)
{
    if (context == NULL || device_attr == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    fill_device_attr(dcxemu_ctx(context)->dev_index, device_attr);
    return 0;
}

static int query_device_ex_op(struct ibv_context *context,
                              const struct ibv_query_device_ex_input *input,
                              struct ibv_device_attr_ex *attr, size_t attr_size)
{
    struct ibv_device_attr_ex a;
    CHECK_USABLE_RET();
    if (input != NULL && input->comp_mask != 0) {
        return EINVAL;
    }
    if (attr == NULL || attr_size < sizeof(a.orig_attr)) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    fill_device_attr(dcxemu_ctx(context)->dev_index, &a.orig_attr);
    a.completion_timestamp_mask = (1ull << 63) - 1;
    a.hca_core_clock = 1000000;   /* kHz: timestamps are nanoseconds */
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    if (!dcxemu_cfg.no_atomics) {
        a.pci_atomic_caps.fetch_add = IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
        a.pci_atomic_caps.compare_swap = IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP;
    }
    a.max_dm_size = 0;
    a.phys_port_cnt_ex = 1;
    memcpy(attr, &a, attr_size < sizeof(a) ? attr_size : sizeof(a));
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_device_ex(struct ibv_context *context,
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
    if (ctx_in == NULL || attrs_out == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    want = attrs_out->comp_mask;
    attrs_out->version = 0;
    attrs_out->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1 | MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED |
                       MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW | MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP |
                       MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD;
    attrs_out->comp_mask = 0;
    if (want & MLX5DV_CONTEXT_MASK_DC_ODP_CAPS) {
        attrs_out->dc_odp_caps = 0;        /* no ODP on DC */
        attrs_out->comp_mask |= MLX5DV_CONTEXT_MASK_DC_ODP_CAPS;
    }
    if (want & MLX5DV_CONTEXT_MASK_DCI_STREAMS) {
        attrs_out->dci_streams_caps.max_log_num_concurent = 0;   /* streams not modelled */
        attrs_out->dci_streams_caps.max_log_num_errored = 0;
        attrs_out->comp_mask |= MLX5DV_CONTEXT_MASK_DCI_STREAMS;
    }
    if (want & MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH) {
        attrs_out->max_wr_memcpy_length = 0;
        attrs_out->comp_mask |= MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH;
    }
    return 0;
}

static int query_port_op(struct ibv_context *context, uint8_t port_num,
                         struct ibv_port_attr *port_attr, size_t port_attr_len)
{
    struct ibv_port_attr a;
    CHECK_USABLE_RET();
    if (port_num != 1 || port_attr == NULL) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = IBV_MTU_4096;
    a.gid_tbl_len = DCXEMU_GID_TBL_LEN;
    a.port_cap_flags = IBV_PORT_CM_SUP;
    a.max_msg_sz = DCXEMU_MAX_MSG_SZ;
    a.bad_pkey_cntr = 0;
    a.qkey_viol_cntr = 0;
    a.pkey_tbl_len = DCXEMU_MAX_PKEYS;
    a.max_vl_num = 4;
    a.sm_sl = 0;
    a.subnet_timeout = 18;
    a.init_type_reply = 0;
    a.active_width = 2;    /* 4x */
    a.active_speed = 64;   /* HDR */
    a.phys_state = 5;      /* LinkUp */
    if (dcxemu_cfg.roce) {
        /* RoCE: no subnet manager, no LIDs; packets are routed by GID */
        a.link_layer = IBV_LINK_LAYER_ETHERNET;
    } else {
        a.lid = (uint16_t)(dcxemu_ctx(context)->dev_index + 1);
        a.sm_lid = 1;
        a.lmc = 0;
        a.link_layer = IBV_LINK_LAYER_INFINIBAND;
    }
    memcpy(port_attr, &a, port_attr_len < sizeof(a) ? port_attr_len : sizeof(a));
    return 0;
}

/* DEVX general commands (PRM mailboxes, big-endian, MSB-first bit offsets).  Only QUERY_HCA_CAP
 * of the general device capabilities is answered, and in it only the fields a DC transport reads:
 * log_max_ra_req_dc, log_max_ra_res_dc, log_max_ra_req_qp, log_max_ra_res_qp (every other field
 * reads 0).  QUERY_HCA_CAP is on the kernel's whitelist (devx.c:devx_is_whitelist_cmd), so, as on
 * a DEVX-capable mlx5, it works on a context opened without DEVX too; any other command needs a
 * DEVX context (kernel devx_get_uid: EINVAL) and is not modelled there (EOPNOTSUPP). */
enum {
    DEVX_OP_QUERY_HCA_CAP = 0x100,
    DEVX_HCA_CAP_GENERAL  = 0x0,
    DEVX_HCA_CAP_ATOMIC   = 0x3,
    DEVX_STATUS_BAD_OP    = 0x02,
    DEVX_STATUS_BAD_PARAM = 0x03,
    DEVX_MBOX_HDR         = 16,      /* status, syndrome, reserved */
    DEVX_HCA_CAP_SIZE     = 4096     /* cmd_hca_cap: 0x8000 bits */
};

static void devx_set_field(uint8_t *base, unsigned bit_off, unsigned bits, uint32_t value)
{
    uint32_t dw, mask = (bits == 32) ? UINT32_MAX : ((1u << bits) - 1);
    unsigned shift = 32 - (bit_off % 32) - bits;
    memcpy(&dw, base + (bit_off / 32) * 4, 4);
    dw = be32toh(dw);
    dw = (dw & ~(mask << shift)) | ((value & mask) << shift);
    dw = htobe32(dw);
    memcpy(base + (bit_off / 32) * 4, &dw, 4);
}

/* The general capability page: only the read/atomic depths are filled. */
static void devx_cap_general(uint8_t *cap)
{
    devx_set_field(cap, 0x12a, 6, (uint32_t)dcxemu_cfg.log_max_ra_dc);  /* log_max_ra_req_dc */
    devx_set_field(cap, 0x13a, 6, (uint32_t)dcxemu_cfg.log_max_ra_dc);  /* log_max_ra_res_dc */
    devx_set_field(cap, 0x14a, 6, 4);                                    /* log_max_ra_req_qp */
    devx_set_field(cap, 0x15a, 6, 4);                                    /* log_max_ra_res_qp */
}

/* The atomic capability page (what UCX's ib_mlx5dv_md.c reads): atomic_req_8B_endianness_mode
 * at bit 0x40 (1: host order), atomic_operations at 0x90 (bit 0 CS, 1 FA, 2 masked CS, 3 masked
 * FA), atomic_size_qp at 0xb0 and atomic_size_dc at 0xd0 (bit n: 2^n bytes); empty on a device
 * without atomics. */
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

/* A failed firmware command: the status in the output mailbox, EREMOTEIO (as the kernel's DEVX
 * general command returns it, with the mailbox copied out). */
static int devx_fw_error(void *out, uint8_t status)
{
    ((uint8_t *)out)[0] = status;
    errno = EREMOTEIO;
    return EREMOTEIO;
}

/* mlx5dv_devx_general_cmd: QUERY_HCA_CAP of the general and atomic capability pages (op_mod =
 * cap type << 1 | current).  QUERY_HCA_CAP is on the kernel's whitelist (devx.c:
 * devx_is_whitelist_cmd), so, as on a DEVX-capable mlx5, it works on a context opened without
 * DEVX too; any other command needs a DEVX context (kernel devx_get_uid: EINVAL) and is refused
 * there by the firmware model (BAD_OP). */
DCXEMU_API int dcxemu_mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in,
                                              size_t inlen, void *out, size_t outlen)
{
    const uint8_t *i = in;
    uint8_t full[DEVX_HCA_CAP_SIZE];
    uint16_t opcode, op_mod;
    size_t n;
    int e = dcxemu_usable();
    if (e == 0 && (context == NULL || in == NULL || out == NULL || inlen < DEVX_MBOX_HDR ||
                   outlen < DEVX_MBOX_HDR)) {
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
    memset(out, 0, outlen);   /* status 0 (OK), syndrome 0 */
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
        return devx_fw_error(out, DEVX_STATUS_BAD_PARAM);   /* a page the model lacks */
    }
    n = outlen - DEVX_MBOX_HDR;
    memcpy((uint8_t *)out + DEVX_MBOX_HDR, full, n < sizeof(full) ? n : sizeof(full));
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_port(struct ibv_context *context, uint8_t port_num,
                                     struct ibv_port_attr *port_attr)
{
    if (context == NULL) {
        return EINVAL;
    }
    return query_port_op(context, port_num, port_attr, sizeof(*port_attr));
}

/* The GID tables.  InfiniBand: index 0 is the port GID (fe80::/64 + GUID).  RoCE
 * (DCXEMU_LINK_LAYER=ethernet), as a netdev with an IPv6 link-local and one IPv4 address shows
 * it on mlx5: 0 link-local RoCE v1, 1 the same as RoCE v2, 2 the IPv4-mapped address
 * ::ffff:198.51.100.<dev+1> (TEST-NET-2, never a real host's) as RoCE v1, 3 the same as RoCE v2.
 * Index 0 is not what a RoCE transport should use (not routable); UCX's choice is index 3. */
int dcxemu_gid_entry(int dev, uint32_t index, union ibv_gid *gid, uint32_t *type)
{
    memset(gid, 0, sizeof(*gid));
    *type = dcxemu_cfg.roce ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_IB;
    if (index >= DCXEMU_GID_TBL_LEN) {
        return EINVAL;
    }
    if (!dcxemu_cfg.roce) {
        if (index != 0) {
            return ENODATA;
        }
        gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
        gid->global.interface_id = htobe64(guid_of(dev));
        return 0;
    }
    switch (index) {
    case 0:
    case 1:
        gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
        /* modified EUI-64 of the port's MAC: the GUID stands in for it */
        gid->global.interface_id = htobe64(guid_of(dev) ^ 0x0200000000000000ull);
        break;
    case 2:
    case 3:
        gid->raw[10] = 0xff;
        gid->raw[11] = 0xff;
        gid->raw[12] = 198;
        gid->raw[13] = 51;
        gid->raw[14] = 100;
        gid->raw[15] = (uint8_t)(dev + 1);
        break;
    default:
        return ENODATA;
    }
    *type = (index & 1) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                                    union ibv_gid *gid)
{
    uint32_t type;
    if (context == NULL || gid == NULL || port_num != 1 || index < 0 ||
        index >= DCXEMU_GID_TBL_LEN || dcxemu_usable() != 0) {
        errno = EINVAL;
        return -1;
    }
    /* an empty entry reads as the all-zero GID, as libibverbs keeps it */
    (void)dcxemu_gid_entry(dcxemu_ctx(context)->dev_index, (uint32_t)index, gid, &type);
    return 0;
}

/* _ibv_query_gid_ex (IBVERBS_1.11), the target of the inline ibv_query_gid_ex(): returns an
 * errno value; ENODATA for an empty entry inside the table (man ibv_query_gid_ex). */
DCXEMU_API int dcxemu__ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                                        uint32_t gid_index, struct ibv_gid_entry *entry,
                                        uint32_t flags, size_t entry_size)
{
    struct ibv_gid_entry e;
    int err;
    if (context == NULL || entry == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (port_num != 1 || flags != 0 || entry_size < sizeof(e)) {
        return EINVAL;
    }
    memset(&e, 0, sizeof(e));
    err = dcxemu_gid_entry(dcxemu_ctx(context)->dev_index, gid_index, &e.gid, &e.gid_type);
    if (err != 0) {
        return err;
    }
    e.gid_index = gid_index;
    e.port_num = port_num;
    e.ndev_ifindex = 0;   /* no net device behind a model port */
    memcpy(entry, &e, sizeof(e));
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
                                     __be16 *pkey)
{
    if (context == NULL || pkey == NULL || port_num != 1 || index < 0 ||
        index >= DCXEMU_MAX_PKEYS || dcxemu_usable() != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(index == 0 ? DCXEMU_PKEY_DEFAULT : 0);
    return 0;
}

/* ---------------------------------------------------------------- PD, MR, AH ---- */

DCXEMU_API struct ibv_pd *dcxemu_ibv_alloc_pd(struct ibv_context *context)
{
    struct dcxemu_pd *pd;
    int err;
    CHECK_USABLE_NULL();
    if (context == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    CHECK_FATAL_NULL(context);
    pd = calloc(1, sizeof(*pd));
    if (pd == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(pd);
        DCXEMU_ERR(err);
    }
    pd->pd_id = dcxemu_fab->next_pd_id++;
    dcxemu_unlock();
    pd->pd.context = context;
    pd->pd.handle = (uint32_t)pd->pd_id;
    return &pd->pd;
}

DCXEMU_API int dcxemu_ibv_dealloc_pd(struct ibv_pd *pd)
{
    struct dcxemu_pd *p = (struct dcxemu_pd *)pd;
    if (pd == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (atomic_load(&p->refcnt) != 0) {
        return EBUSY;
    }
    free(p);
    return 0;
}

/* Registration pins pages on hardware; here it must at least refuse unmapped ranges (EFAULT). */
static int range_mapped(void *addr, size_t length)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    uintptr_t end = ((uintptr_t)addr + length + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    unsigned char vec[4096];
    if ((uintptr_t)addr + length < (uintptr_t)addr) {
        return 0;
    }
    while (start < end) {
        size_t chunk = (size_t)(end - start);
        if (chunk > sizeof(vec) * (size_t)pg) {
            chunk = sizeof(vec) * (size_t)pg;
        }
        if (mincore((void *)start, chunk, vec) != 0) {
            return 0;
        }
        start += chunk;
    }
    return 1;
}

DCXEMU_API struct ibv_mr *dcxemu_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                                  uint64_t iova, unsigned int access)
{
    const unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                               IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;
    struct dcxemu_pd *p = (struct dcxemu_pd *)pd;
    struct dcxemu_mr *mr;
    uint32_t idx = 0;
    int err;
    CHECK_USABLE_NULL();
    if (pd == NULL || length == 0 || (access & ~known & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE)) {
        DCXEMU_ERR(EINVAL);
    }
    /* IB rule: remote write or atomic access needs local write */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        DCXEMU_ERR(EINVAL);
    }
    CHECK_FATAL_NULL(pd->context);
    if (!range_mapped(addr, length)) {
        DCXEMU_ERR(EFAULT);
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(mr);
        DCXEMU_ERR(err);
    }
    for (uint32_t n = 0; n < DCXEMU_MAX_MRS; n++) {
        uint32_t i = (dcxemu_fab->next_mr_idx + n) % DCXEMU_MAX_MRS;
        if (i != 0 && !dcxemu_fab->mrs[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx == 0) {
        dcxemu_unlock();
        free(mr);
        DCXEMU_ERR(ENOMEM);
    }
    {
        struct dcxemu_shm_mr *s = &dcxemu_fab->mrs[idx];
        dcxemu_fab->next_mr_idx = idx + 1;
        s->owner = (uint16_t)dcxemu_me;
        s->owner_token = dcxemu_my_token;
        s->in_use = 1;   /* last: a half-made slot is never live */
        dcxemu_hwm_bump(&dcxemu_fab->mr_hwm, idx);
        s->pd_id = p->pd_id;
        s->access = access & known;
        s->addr = (uintptr_t)addr;
        s->iova = iova;
        s->length = length;
        mr->idx = idx;
        mr->mr.lkey = mr->mr.rkey = idx << 8 | (s->tag & 0xff);
    }
    dcxemu_unlock();
    mr->mr.context = pd->context;
    mr->mr.pd = pd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.handle = idx;
    atomic_fetch_add(&p->refcnt, 1);
    return &mr->mr;
}

DCXEMU_API struct ibv_mr *dcxemu_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                                            int access)
{
    return dcxemu_ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

DCXEMU_API int dcxemu_ibv_dereg_mr(struct ibv_mr *ibmr)
{
    struct dcxemu_mr *mr = (struct dcxemu_mr *)ibmr;
    struct dcxemu_shm_mr *s;
    int err;
    if (ibmr == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    s = &dcxemu_fab->mrs[mr->idx];
    if (s->in_use && dcxemu_owner_is_me(s->owner, s->owner_token)) {
        s->in_use = 0;
        s->tag = (s->tag + 1) & 0xff;   /* the key comes back only with a new tag */
    }
    dcxemu_unlock();
    dcxemu_copy_wait();   /* a copy through the key that began before is over */
    atomic_fetch_sub(&((struct dcxemu_pd *)ibmr->pd)->refcnt, 1);
    free(mr);
    return 0;
}

/* Indirect mkeys (spec §3.5): need a DEVX context; free/unusable until a UMR programs them. */
DCXEMU_API struct mlx5dv_mkey *dcxemu_mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *attr)
{
    const uint32_t known = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
    struct dcxemu_mkey *mk;
    struct dcxemu_shm_mkey *k = NULL;
    uint32_t max, supported;
    int idx = -1, err;
    CHECK_USABLE_NULL();
    if (attr == NULL || attr->pd == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    if (dcxemu_is_fatal(dcxemu_ctx(attr->pd->context)->dev_index)) {
        DCXEMU_ERR(EIO);
    }
    supported = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                (dcxemu_cfg.mkey_update_tag ? MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG : 0);
    if (attr->create_flags == 0 || (attr->create_flags & ~known) ||
        !(attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT) ||
        (attr->create_flags & ~supported)) {
        DCXEMU_ERR(EOPNOTSUPP);   /* signature, crypto (and tag update when off): no capability */
    }
    if (!dcxemu_ctx(attr->pd->context)->devx) {
        DCXEMU_ERR(EOPNOTSUPP);   /* mkeys are created through DEVX */
    }
    if (attr->max_entries == 0 || attr->max_entries > 0xfffc) {
        DCXEMU_ERR(EINVAL);
    }
    max = ((uint32_t)attr->max_entries + 3) & ~3u;
    mk = calloc(1, sizeof(*mk));
    if (mk == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(mk);
        DCXEMU_ERR(err);
    }
    for (int i = 0; i < DCXEMU_MAX_MKEYS; i++) {
        if (!dcxemu_fab->mkeys[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx >= 0) {
        k = &dcxemu_fab->mkeys[idx];
        k->entries_off = dcxemu_heap_alloc(max * sizeof(struct dcxemu_mkey_entry));
        if (k->entries_off == 0) {
            idx = -1;
        }
    }
    if (idx < 0) {
        dcxemu_unlock();
        free(mk);
        DCXEMU_ERR(ENOMEM);
    }
    k->owner = (uint16_t)dcxemu_me;
    k->owner_token = dcxemu_my_token;
    k->pd_id = ((struct dcxemu_pd *)attr->pd)->pd_id;
    k->max_entries = max;
    k->programmed = 0;
    k->n = 0;
    k->length = 0;
    k->tag = 0;      /* as rdma-core: mkey_7_0 = 0 at creation */
    k->in_use = 1;   /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->mkey_hwm, (uint32_t)idx);
    dcxemu_unlock();
    attr->max_entries = (uint16_t)max;
    mk->idx = (uint32_t)idx;
    mk->pd = (struct dcxemu_pd *)attr->pd;
    mk->mkey.lkey = mk->mkey.rkey = (uint32_t)(DCXEMU_MKEY_BASE + idx) << 8;   /* tag 0 */
    atomic_fetch_add(&mk->pd->refcnt, 1);
    return &mk->mkey;
}

DCXEMU_API int dcxemu_mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
    struct dcxemu_mkey *mk = (struct dcxemu_mkey *)mkey;
    struct dcxemu_shm_mkey *k;
    int err;
    if (mkey == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    k = &dcxemu_fab->mkeys[mk->idx];
    if (k->in_use && dcxemu_owner_is_me(k->owner, k->owner_token)) {
        k->in_use = 0;
        k->programmed = 0;
        dcxemu_heap_free(k->entries_off);
        k->entries_off = 0;
    }
    dcxemu_unlock();
    dcxemu_copy_wait();   /* a copy through the key that began before is over */
    atomic_fetch_sub(&mk->pd->refcnt, 1);
    free(mk);
    return 0;
}

DCXEMU_API struct ibv_ah *dcxemu_ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    struct dcxemu_ah *ah;
    CHECK_USABLE_NULL();
    if (pd == NULL || attr == NULL || attr->port_num != 1 || attr->sl > 15 ||
        attr->static_rate > 18) {
        DCXEMU_ERR(EINVAL);
    }
    if (attr->is_global && attr->grh.sgid_index >= DCXEMU_GID_TBL_LEN) {
        DCXEMU_ERR(EINVAL);
    }
    if (dcxemu_cfg.roce) {
        union ibv_gid sgid;
        uint32_t type;
        /* mlx5_create_ah: RoCE packets always carry a GRH, so an AH without one is EINVAL;
         * the source GID must be an entry of the table */
        if (!attr->is_global ||
            dcxemu_gid_entry(dcxemu_ctx(pd->context)->dev_index, attr->grh.sgid_index, &sgid,
                             &type) != 0) {
            DCXEMU_ERR(EINVAL);
        }
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    ah->ah.context = pd->context;
    ah->ah.pd = pd;
    ah->attr = *attr;
    atomic_fetch_add(&((struct dcxemu_pd *)pd)->refcnt, 1);
    return &ah->ah;
}

DCXEMU_API int dcxemu_ibv_destroy_ah(struct ibv_ah *ah)
{
    if (ah == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    atomic_fetch_sub(&((struct dcxemu_pd *)ah->pd)->refcnt, 1);
    free(ah);
    return 0;
}

/* ---------------------------------------------------------------- async events ---- */

struct async_rec {
    uint32_t type;
    uint32_t pad;
    uint64_t obj;
};

void dcxemu_async_post(struct dcxemu_context *ctx, enum ibv_event_type type, void *obj)
{
    struct async_rec r = { .type = (uint32_t)type, .pad = 0, .obj = (uintptr_t)obj };
    if (write(ctx->async_wfd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
        /* pipe full: the application is not reading events; hardware drops them too */
    }
}

DCXEMU_API int dcxemu_ibv_get_async_event(struct ibv_context *context,
                                          struct ibv_async_event *event)
{
    struct async_rec r;
    ssize_t n;
    int e = dcxemu_usable();
    if (e || context == NULL || event == NULL) {
        errno = e ? e : EINVAL;
        return -1;
    }
    n = read(context->async_fd, &r, sizeof(r));
    if (n != (ssize_t)sizeof(r)) {
        if (n >= 0) {
            errno = EIO;
        }
        return -1;
    }
    event->event_type = (enum ibv_event_type)r.type;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        event->element.cq = (struct ibv_cq *)(uintptr_t)r.obj;
        break;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR:
        event->element.srq = (struct ibv_srq *)(uintptr_t)r.obj;
        break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:   /* mlx5_ib_event: port 1 */
        event->element.port_num = (int)r.obj;
        break;
    default:
        event->element.qp = (struct ibv_qp *)(uintptr_t)r.obj;
        break;
    }
    return 0;
}

DCXEMU_API void dcxemu_ibv_ack_async_event(struct ibv_async_event *event)
{
    pthread_mutex_t *m = NULL;
    pthread_cond_t *cv = NULL;
    uint32_t *cnt = NULL;
    if (event == NULL) {
        return;
    }
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
        struct ibv_cq *cq = event->element.cq;
        m = &cq->mutex; cv = &cq->cond; cnt = &cq->async_events_completed;
        break;
    }
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR: {
        struct ibv_srq *srq = event->element.srq;
        m = &srq->mutex; cv = &srq->cond; cnt = &srq->events_completed;
        break;
    }
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
        return;
    default: {
        struct ibv_qp *qp = event->element.qp;
        m = &qp->mutex; cv = &qp->cond; cnt = &qp->events_completed;
        break;
    }
    }
    pthread_mutex_lock(m);
    (*cnt)++;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(m);
}

/* ---------------------------------------------------------------- channels ---- */

DCXEMU_API struct ibv_comp_channel *dcxemu_ibv_create_comp_channel(struct ibv_context *context)
{
    struct dcxemu_channel *ch;
    int fds[2];
    CHECK_USABLE_NULL();
    if (context == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        free(ch);
        DCXEMU_ERR(e);
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->ch.context = context;
    ch->ch.fd = fds[0];
    ch->ch.refcnt = 0;
    ch->wfd = fds[1];
    return &ch->ch;
}

DCXEMU_API int dcxemu_ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct dcxemu_channel *ch = (struct dcxemu_channel *)channel;
    int busy;
    if (channel == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    pthread_mutex_lock(&channel->context->mutex);
    busy = channel->refcnt != 0;
    pthread_mutex_unlock(&channel->context->mutex);
    if (busy) {
        return EBUSY;
    }
    close(ch->wfd);
    close(channel->fd);
    free(ch);
    return 0;
}

/* Owner side: turn events raised in shared memory into channel records and async events. */
void dcxemu_deliver_events(void)
{
    pthread_mutex_lock(&dcxemu_reg_lock);
    for (uint32_t k = 0; k < dcxemu_cq_set.n; k++) {
        uint32_t i = dcxemu_cq_set.item[k];
        struct dcxemu_cq *cq = dcxemu_local_cqs[i];
        uint64_t raised;
        if (cq == NULL) {
            continue;
        }
        raised = atomic_load(&cq->s->events_raised);
        while (cq->events_delivered < raised) {
            uint64_t rec = (uint64_t)i << 32 | cq->cqx.handle;
            struct dcxemu_channel *ch = (struct dcxemu_channel *)cq->cqx.channel;
            if (ch == NULL) {
                cq->events_delivered = raised;
                break;
            }
            if (write(ch->wfd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec)) {
                break;   /* pipe full: retried on the next wakeup */
            }
            cq->events_delivered++;
        }
        if (__atomic_exchange_n(&cq->s->overrun_event, 0, __ATOMIC_SEQ_CST)) {
            dcxemu_async_post(dcxemu_ctx(cq->cqx.context), IBV_EVENT_CQ_ERR, cq);
        }
    }
    for (uint32_t k = 0; k < dcxemu_srq_set.n; k++) {
        struct dcxemu_srq *srq = dcxemu_local_srqs[dcxemu_srq_set.item[k]];
        if (srq != NULL && atomic_exchange(&srq->s->limit_event, 0)) {
            dcxemu_async_post(dcxemu_ctx(srq->srq.context), IBV_EVENT_SRQ_LIMIT_REACHED, srq);
        }
    }
    pthread_mutex_unlock(&dcxemu_reg_lock);
}

DCXEMU_API int dcxemu_ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                                       void **cq_context)
{
    int e = dcxemu_usable();
    if (e || channel == NULL || cq == NULL || cq_context == NULL) {
        errno = e ? e : EINVAL;
        return -1;
    }
    for (;;) {
        uint64_t rec;
        ssize_t n = read(channel->fd, &rec, sizeof(rec));
        struct dcxemu_cq *c;
        if (n != (ssize_t)sizeof(rec)) {
            if (n >= 0) {
                errno = EIO;
            }
            return -1;
        }
        pthread_mutex_lock(&dcxemu_reg_lock);
        c = dcxemu_local_cqs[(rec >> 32) % DCXEMU_MAX_CQS];
        if (c != NULL && c->cqx.handle == (uint32_t)rec &&
            c->cqx.channel == channel) {
            c->events_gotten++;
            *cq = ibv_cq_ex_to_cq(&c->cqx);
            *cq_context = c->cqx.cq_context;
            pthread_mutex_unlock(&dcxemu_reg_lock);
            return 0;
        }
        pthread_mutex_unlock(&dcxemu_reg_lock);
        /* event of a CQ destroyed meanwhile: dropped, as the kernel drops it */
    }
}

DCXEMU_API void dcxemu_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    if (cq == NULL) {
        return;
    }
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ---------------------------------------------------------------- CQ ---- */

static inline struct dcxemu_shm_cqe *cq_ring(struct dcxemu_shm_cq *s)
{
    return (struct dcxemu_shm_cqe *)dcxemu_ptr(s->ring_off);
}

/* Producer side, fabric lock held.  Returns 1 if the owner must be woken (event or overrun). */
int dcxemu_cq_push(struct dcxemu_shm_cq *s, const struct dcxemu_shm_cqe *cqe)
{
    int wake = 0;
    DCXEMU_TRACE("cqe qp=0x%x %s opcode=%u len=%u wr_id=0x%llx status=%u", cqe->qp_num,
                 cqe->is_send ? "send" : "recv", cqe->opcode, cqe->byte_len,
                 (unsigned long long)cqe->wr_id, cqe->status);
    if (dcxemu_shm_lock(&s->lock) != 0) {
        return 0;
    }
    if (s->overrun) {
        pthread_mutex_unlock(&s->lock);
        return 0;     /* a CQ in error takes no more CQEs */
    }
    if (s->tail - s->head >= s->capacity) {
        if (s->ignore_overrun) {
            s->head++;   /* hardware overwrites the oldest entry */
        } else {
            s->overrun = 1;
            s->overrun_event = 1;
            pthread_mutex_unlock(&s->lock);
            return 1;
        }
    }
    cq_ring(s)[s->tail % s->capacity] = *cqe;
    __atomic_store_n(&s->tail, s->tail + 1, __ATOMIC_RELEASE);
    if (s->armed == 1 || (s->armed == 2 && (cqe->solicited || cqe->status != IBV_WC_SUCCESS))) {
        s->armed = 0;
        atomic_fetch_add(&s->events_raised, 1);
        wake = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return wake;
}

/* Remove the unpolled CQEs of one QP (RESET / destroy); CQ lock taken here. */
void dcxemu_cq_purge_qpn(struct dcxemu_shm_cq *s, uint32_t qpn)
{
    struct dcxemu_shm_cqe *r = cq_ring(s);
    uint64_t w;
    if (qpn == 0 || dcxemu_shm_lock(&s->lock) != 0) {
        return;
    }
    w = s->head;
    for (uint64_t i = s->head; i < s->tail; i++) {
        struct dcxemu_shm_cqe *e = &r[i % s->capacity];
        if (e->qp_num != qpn) {
            if (w != i) {
                r[w % s->capacity] = *e;
            }
            w++;
        }
    }
    s->tail = w;
    pthread_mutex_unlock(&s->lock);
}

struct sq_free { uint32_t qpn; uint64_t idx; };
#define MAX_FREES 32

static void note_free(struct sq_free *f, int *n, const struct dcxemu_shm_cqe *e)
{
    if (!e->is_send) {
        return;
    }
    for (int i = 0; i < *n; i++) {
        if (f[i].qpn == e->qp_num) {
            f[i].idx = e->sq_index;
            return;
        }
    }
    if (*n < MAX_FREES) {
        f[*n].qpn = e->qp_num;
        f[*n].idx = e->sq_index;
        (*n)++;
    }
}

static void apply_frees(struct sq_free *f, int n)
{
    for (int i = 0; i < n; i++) {
        dcxemu_qp_sq_polled(f[i].qpn, f[i].idx);
    }
}

static int poll_cq_op(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
    struct dcxemu_cq *cq = (struct dcxemu_cq *)ibcq;
    struct dcxemu_shm_cq *s = cq->s;
    struct sq_free frees[MAX_FREES];
    int nf = 0, n = 0;
    if (dcxemu_usable() != 0 || num_entries < 0 || (num_entries > 0 && wc == NULL)) {
        return -1;
    }
    if (dcxemu_shm_lock(&s->lock) != 0) {
        return -1;
    }
    while (n < num_entries && s->head != s->tail) {
        const struct dcxemu_shm_cqe *e = &cq_ring(s)[s->head % s->capacity];
        struct ibv_wc *w = &wc[n++];
        memset(w, 0, sizeof(*w));
        w->wr_id = e->wr_id;
        w->status = (enum ibv_wc_status)e->status;
        w->opcode = (enum ibv_wc_opcode)e->opcode;
        w->vendor_err = e->vendor_err;
        w->byte_len = e->byte_len;
        w->imm_data = e->imm;
        w->qp_num = e->qp_num;
        w->src_qp = e->src_qp;
        w->wc_flags = e->wc_flags;
        w->pkey_index = e->pkey_index;
        w->slid = e->slid;
        w->sl = e->sl;
        w->dlid_path_bits = e->dlid_path_bits;
        note_free(frees, &nf, e);
        s->head++;
    }
    pthread_mutex_unlock(&s->lock);
    apply_frees(frees, nf);
    return n;
}

static int req_notify_cq_op(struct ibv_cq *ibcq, int solicited_only)
{
    struct dcxemu_cq *cq = (struct dcxemu_cq *)ibcq;
    struct dcxemu_shm_cq *s = cq->s;
    int fire = 0, err;
    CHECK_USABLE_RET();
    if ((err = dcxemu_shm_lock(&s->lock)) != 0) {
        return err;
    }
    /* The arm carries the consumer index: CQEs already waiting fire at once. */
    for (uint64_t i = s->head; i < s->tail && !fire; i++) {
        const struct dcxemu_shm_cqe *e = &cq_ring(s)[i % s->capacity];
        fire = !solicited_only || e->solicited || e->status != IBV_WC_SUCCESS;
    }
    if (fire) {
        s->armed = 0;
        atomic_fetch_add(&s->events_raised, 1);
    } else {
        s->armed = solicited_only ? 2 : 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (fire) {
        dcxemu_deliver_events();
    }
    return 0;
}

static inline struct dcxemu_cq *xcq(struct ibv_cq_ex *c) { return (struct dcxemu_cq *)c; }

/* Extended polling.  The shared ring lock is held only while one CQE is taken (and consumed at
 * once, which is also when mlx5 advances the SQ tail); the start..end critical section is a
 * process-local lock.  So a poller that posts from inside its poll loop, with its send CQEs going
 * to this very CQ, never blocks a producer that holds the fabric lock. */
static int take_current(struct dcxemu_cq *cq)
{
    struct dcxemu_shm_cq *s = cq->s;
    struct sq_free f[1];
    int nf = 0, err;
    if ((err = dcxemu_shm_lock(&s->lock)) != 0) {
        return err;
    }
    if (s->head == s->tail) {
        pthread_mutex_unlock(&s->lock);
        return ENOENT;
    }
    cq->cur = cq_ring(s)[s->head % s->capacity];
    s->head++;
    pthread_mutex_unlock(&s->lock);
    cq->cqx.status = (enum ibv_wc_status)cq->cur.status;
    cq->cqx.wr_id = cq->cur.wr_id;
    note_free(f, &nf, &cq->cur);
    apply_frees(f, nf);
    return 0;
}

static int start_poll_op(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
    struct dcxemu_cq *cq = xcq(c);
    int err;
    if (attr == NULL || attr->comp_mask != 0) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (!cq->single_threaded) {
        pthread_mutex_lock(&cq->poll_lock);
    }
    err = take_current(cq);
    if (err != 0 && !cq->single_threaded) {
        pthread_mutex_unlock(&cq->poll_lock);   /* no end_poll after a failed start_poll */
    }
    return err;
}

static int next_poll_op(struct ibv_cq_ex *c)
{
    return take_current(xcq(c));
}

static void end_poll_op(struct ibv_cq_ex *c)
{
    struct dcxemu_cq *cq = xcq(c);
    if (!cq->single_threaded) {
        pthread_mutex_unlock(&cq->poll_lock);
    }
}

static enum ibv_wc_opcode rd_opcode(struct ibv_cq_ex *c) { return (enum ibv_wc_opcode)xcq(c)->cur.opcode; }
static uint32_t rd_vendor_err(struct ibv_cq_ex *c) { return xcq(c)->cur.vendor_err; }
static uint32_t rd_byte_len(struct ibv_cq_ex *c) { return xcq(c)->cur.byte_len; }
static __be32 rd_imm(struct ibv_cq_ex *c) { return xcq(c)->cur.imm; }
static uint32_t rd_qp_num(struct ibv_cq_ex *c) { return xcq(c)->cur.qp_num; }
static uint32_t rd_src_qp(struct ibv_cq_ex *c) { return xcq(c)->cur.src_qp; }
static unsigned int rd_wc_flags(struct ibv_cq_ex *c) { return xcq(c)->cur.wc_flags; }
static uint32_t rd_slid(struct ibv_cq_ex *c) { return xcq(c)->cur.slid; }
static uint8_t rd_sl(struct ibv_cq_ex *c) { return xcq(c)->cur.sl; }
static uint8_t rd_path_bits(struct ibv_cq_ex *c) { return xcq(c)->cur.dlid_path_bits; }
static uint64_t rd_ts(struct ibv_cq_ex *c) { return xcq(c)->cur.ts_ns; }
static uint16_t rd_cvlan(struct ibv_cq_ex *c) { (void)c; return 0; }
static uint32_t rd_flow_tag(struct ibv_cq_ex *c) { (void)c; return 0; }
static void rd_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *t) { (void)c; memset(t, 0, sizeof(*t)); }

static struct ibv_cq_ex *create_cq_ex_op(struct ibv_context *context,
                                         struct ibv_cq_init_attr_ex *a)
{
    struct dcxemu_cq *cq;
    struct dcxemu_shm_cq *s = NULL;
    uint32_t cap = 1;
    int idx = -1, err;
    CHECK_USABLE_NULL();
    if (context == NULL || a == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    CHECK_FATAL_NULL(context);
    if (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
        DCXEMU_ERR(EINVAL);
    }
    if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (a->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))) {
        DCXEMU_ERR(EINVAL);
    }
    if (a->wc_flags & ~(uint64_t)IBV_CREATE_CQ_SUP_WC_FLAGS) {
        DCXEMU_ERR(EOPNOTSUPP);
    }
    if (a->cqe < 1 || a->cqe > DCXEMU_MAX_CQE || (int)a->comp_vector < 0 ||
        (int)a->comp_vector >= context->num_comp_vectors ||
        (a->channel != NULL && a->channel->context != context)) {
        DCXEMU_ERR(EINVAL);
    }
    while (cap < a->cqe + 1) {
        cap <<= 1;
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(cq);
        DCXEMU_ERR(err);
    }
    for (int i = 0; i < DCXEMU_MAX_CQS; i++) {
        if (!dcxemu_fab->cqs[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx >= 0) {
        s = &dcxemu_fab->cqs[idx];
        if (!s->lock_ready) {
            dcxemu_shm_mutex_init(&s->lock);   /* first use of the slot: nobody can hold it */
            s->lock_ready = 1;
        }
        s->ring_off = dcxemu_heap_alloc((uint64_t)cap * sizeof(struct dcxemu_shm_cqe));
        if (s->ring_off == 0) {
            idx = -1;
        }
    }
    if (idx < 0) {
        dcxemu_unlock();
        free(cq);
        DCXEMU_ERR(ENOMEM);
    }
    s->owner = (uint16_t)dcxemu_me;
    s->owner_token = dcxemu_my_token;
    s->in_use = 1;   /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->cq_hwm, (uint32_t)idx);
    s->capacity = cap;
    s->armed = 0;
    s->head = s->tail = 0;
    s->overrun = 0;
    s->overrun_event = 0;
    s->ignore_overrun = (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                        (a->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
    atomic_store(&s->events_raised, 0);
    dcxemu_unlock();

    cq->idx = idx;
    cq->s = s;
    cq->wc_flags = a->wc_flags;
    cq->single_threaded = (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                          (a->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
    cq->cqx.context = context;
    cq->cqx.channel = a->channel;
    cq->cqx.cq_context = a->cq_context;
    cq->cqx.handle = atomic_fetch_add(&cq_serial, 1);
    cq->cqx.cqe = (int)(cap - 1);
    pthread_mutex_init(&cq->cqx.mutex, NULL);
    pthread_cond_init(&cq->cqx.cond, NULL);
    pthread_mutex_init(&cq->poll_lock, NULL);
    cq->cqx.start_poll = start_poll_op;
    cq->cqx.next_poll = next_poll_op;
    cq->cqx.end_poll = end_poll_op;
    cq->cqx.read_opcode = rd_opcode;
    cq->cqx.read_vendor_err = rd_vendor_err;
    cq->cqx.read_wc_flags = rd_wc_flags;
    /* unrequested readers stay NULL, as on mlx5 */
    if (a->wc_flags & IBV_WC_EX_WITH_BYTE_LEN) cq->cqx.read_byte_len = rd_byte_len;
    if (a->wc_flags & IBV_WC_EX_WITH_IMM) cq->cqx.read_imm_data = rd_imm;
    if (a->wc_flags & IBV_WC_EX_WITH_QP_NUM) cq->cqx.read_qp_num = rd_qp_num;
    if (a->wc_flags & IBV_WC_EX_WITH_SRC_QP) cq->cqx.read_src_qp = rd_src_qp;
    if (a->wc_flags & IBV_WC_EX_WITH_SLID) cq->cqx.read_slid = rd_slid;
    if (a->wc_flags & IBV_WC_EX_WITH_SL) cq->cqx.read_sl = rd_sl;
    if (a->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) cq->cqx.read_dlid_path_bits = rd_path_bits;
    if (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) cq->cqx.read_completion_ts = rd_ts;
    if (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
        cq->cqx.read_completion_wallclock_ns = rd_ts;
    if (a->wc_flags & IBV_WC_EX_WITH_CVLAN) cq->cqx.read_cvlan = rd_cvlan;
    if (a->wc_flags & IBV_WC_EX_WITH_FLOW_TAG) cq->cqx.read_flow_tag = rd_flow_tag;
    if (a->wc_flags & IBV_WC_EX_WITH_TM_INFO) cq->cqx.read_tm_info = rd_tm_info;
    if (a->channel != NULL) {
        pthread_mutex_lock(&context->mutex);
        a->channel->refcnt++;
        pthread_mutex_unlock(&context->mutex);
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_cqs[idx] = cq;
    dcxemu_idx_set_add(&dcxemu_cq_set, (uint32_t)idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &cq->cqx;
}

DCXEMU_API struct ibv_cq_ex *dcxemu_ibv_create_cq_ex(struct ibv_context *context,
                                                     struct ibv_cq_init_attr_ex *cq_attr)
{
    return create_cq_ex_op(context, cq_attr);
}

DCXEMU_API struct ibv_cq *dcxemu_ibv_create_cq(struct ibv_context *context, int cqe,
                                               void *cq_context,
                                               struct ibv_comp_channel *channel,
                                               int comp_vector)
{
    struct ibv_cq_init_attr_ex a;
    struct ibv_cq_ex *cq;
    if (cqe < 1 || comp_vector < 0) {
        DCXEMU_ERR(EINVAL);
    }
    memset(&a, 0, sizeof(a));
    a.cqe = (uint32_t)cqe;
    a.cq_context = cq_context;
    a.channel = channel;
    a.comp_vector = (uint32_t)comp_vector;
    a.wc_flags = IBV_WC_STANDARD_FLAGS;
    cq = create_cq_ex_op(context, &a);
    return cq != NULL ? ibv_cq_ex_to_cq(cq) : NULL;
}

DCXEMU_API int dcxemu_ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct dcxemu_cq *cq = (struct dcxemu_cq *)ibcq;
    int err;
    if (ibcq == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (atomic_load(&cq->refcnt) != 0) {
        return EBUSY;
    }
    /* like the kernel ABI: wait until every event gotten has been acked */
    pthread_mutex_lock(&ibcq->mutex);
    while (ibcq->comp_events_completed != cq->events_gotten) {
        pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
    }
    pthread_mutex_unlock(&ibcq->mutex);
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_cqs[cq->idx] = NULL;
    dcxemu_idx_set_del(&dcxemu_cq_set, (uint32_t)cq->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    if ((err = dcxemu_lock()) == 0) {
        if (cq->s->in_use && dcxemu_owner_is_me(cq->s->owner, cq->s->owner_token)) {
            dcxemu_heap_free(cq->s->ring_off);
            cq->s->ring_off = 0;
            cq->s->in_use = 0;
        }
        dcxemu_unlock();
    }
    if (ibcq->channel != NULL) {
        pthread_mutex_lock(&ibcq->context->mutex);
        ibcq->channel->refcnt--;
        pthread_mutex_unlock(&ibcq->context->mutex);
    }
    free(cq);
    return 0;
}

/* ---------------------------------------------------------------- SRQ ---- */

static inline struct dcxemu_shm_srq_wqe *srq_wqe(struct dcxemu_shm_srq *s, uint64_t i)
{
    return (struct dcxemu_shm_srq_wqe *)dcxemu_ptr(s->ring_off + (i % s->max_wr) * s->wqe_size);
}

DCXEMU_API struct ibv_srq *dcxemu_ibv_create_srq(struct ibv_pd *pd,
                                                 struct ibv_srq_init_attr *init)
{
    struct dcxemu_srq *srq;
    struct dcxemu_shm_srq *s = NULL;
    uint32_t max = 1, desc = 32, max_sge;
    int idx = -1, err;
    CHECK_USABLE_NULL();
    if (pd == NULL || init == NULL || init->attr.max_wr == 0 ||
        init->attr.max_wr > DCXEMU_MAX_SRQ_WR || init->attr.max_sge > DCXEMU_MAX_SRQ_SGE ||
        init->attr.srq_limit > init->attr.max_wr) {
        DCXEMU_ERR(EINVAL);
    }
    CHECK_FATAL_NULL(pd->context);
    /* mlx5 sizing: queue of roundup_pow2(max_wr+1) entries holds one less; descriptor of
     * roundup_pow2(16 + 16*max_sge) bytes gives the written-back max_sge */
    while (max < init->attr.max_wr + 1) {
        max <<= 1;
    }
    while (desc < 16 + 16 * (init->attr.max_sge ? init->attr.max_sge : 1)) {
        desc <<= 1;
    }
    max_sge = desc / 16 - 1;
    if (max_sge > DCXEMU_MAX_SRQ_SGE) {
        max_sge = DCXEMU_MAX_SRQ_SGE;
    }
    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(srq);
        DCXEMU_ERR(err);
    }
    for (int i = 0; i < DCXEMU_MAX_SRQS; i++) {
        if (!dcxemu_fab->srqs[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx >= 0) {
        s = &dcxemu_fab->srqs[idx];
        if (!s->lock_ready) {
            dcxemu_shm_mutex_init(&s->lock);   /* first use of the slot: nobody can hold it */
            s->lock_ready = 1;
        }
        s->wqe_size = (uint32_t)(sizeof(struct dcxemu_shm_srq_wqe) + max_sge * sizeof(struct ibv_sge));
        s->max_wr = max - 1;
        s->ring_off = dcxemu_heap_alloc((uint64_t)s->max_wr * s->wqe_size);
        if (s->ring_off == 0) {
            idx = -1;
        }
    }
    if (idx < 0) {
        dcxemu_unlock();
        free(srq);
        DCXEMU_ERR(ENOMEM);
    }
    s->owner = (uint16_t)dcxemu_me;
    s->owner_token = dcxemu_my_token;
    s->in_use = 1;   /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->srq_hwm, (uint32_t)idx);
    s->pd_id = ((struct dcxemu_pd *)pd)->pd_id;
    s->max_sge = max_sge;
    s->limit = 0;
    s->head = s->tail = 0;
    atomic_store(&s->limit_event, 0);
    dcxemu_unlock();
    init->attr.max_wr = s->max_wr;
    init->attr.max_sge = max_sge;
    srq->idx = idx;
    srq->s = s;
    srq->pd = (struct dcxemu_pd *)pd;
    srq->srq.context = pd->context;
    srq->srq.srq_context = init->srq_context;
    srq->srq.pd = pd;
    srq->srq.handle = (uint32_t)idx;
    pthread_mutex_init(&srq->srq.mutex, NULL);
    pthread_cond_init(&srq->srq.cond, NULL);
    atomic_fetch_add(&srq->pd->refcnt, 1);
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_srqs[idx] = srq;
    dcxemu_idx_set_add(&dcxemu_srq_set, (uint32_t)idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    return &srq->srq;
}

/* ibv_create_srq_ex reaches this for anything but a plain PD-only request: only basic SRQs
 * exist on the model (no XRC, no tag matching). */
static struct ibv_srq *create_srq_ex_op(struct ibv_context *context,
                                        struct ibv_srq_init_attr_ex *a)
{
    struct ibv_srq_init_attr basic;
    struct ibv_srq *srq;
    if (context == NULL || a == NULL ||
        (a->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD)) ||
        !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || a->pd == NULL || a->pd->context != context) {
        DCXEMU_ERR(EINVAL);
    }
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC) {
        DCXEMU_ERR(EOPNOTSUPP);
    }
    basic.srq_context = a->srq_context;
    basic.attr = a->attr;
    srq = dcxemu_ibv_create_srq(a->pd, &basic);
    if (srq != NULL) {
        a->attr = basic.attr;
    }
    return srq;
}

DCXEMU_API int dcxemu_ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err;
    if (ibsrq == NULL || attr == NULL || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (mask & IBV_SRQ_MAX_WR) {
        return EINVAL;   /* mlx5 cannot resize an SRQ */
    }
    if (mask & IBV_SRQ_LIMIT) {
        if (attr->srq_limit > srq->s->max_wr) {
            return EINVAL;
        }
        if (dcxemu_is_fatal(dcxemu_ctx(ibsrq->context)->dev_index)) {
            return EIO;   /* ARM_RQ */
        }
        if ((err = dcxemu_shm_lock(&srq->s->lock)) != 0) {
            return err;
        }
        srq->s->limit = attr->srq_limit;
        pthread_mutex_unlock(&srq->s->lock);
    }
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    if (ibsrq == NULL || attr == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    attr->max_wr = srq->s->max_wr;
    attr->max_sge = srq->s->max_sge;
    attr->srq_limit = srq->s->limit;
    return 0;
}

DCXEMU_API int dcxemu_ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    int err;
    if (ibsrq == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (atomic_load(&srq->refcnt) != 0) {
        return EBUSY;
    }
    pthread_mutex_lock(&dcxemu_reg_lock);
    dcxemu_local_srqs[srq->idx] = NULL;
    dcxemu_idx_set_del(&dcxemu_srq_set, (uint32_t)srq->idx);
    pthread_mutex_unlock(&dcxemu_reg_lock);
    if ((err = dcxemu_lock()) == 0) {
        if (srq->s->in_use && dcxemu_owner_is_me(srq->s->owner, srq->s->owner_token)) {
            dcxemu_heap_free(srq->s->ring_off);
            srq->s->in_use = 0;
        }
        dcxemu_unlock();
    }
    atomic_fetch_sub(&srq->pd->refcnt, 1);
    free(srq);
    return 0;
}

static int post_srq_recv_op(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad_wr)
{
    struct dcxemu_srq *srq = (struct dcxemu_srq *)ibsrq;
    struct dcxemu_shm_srq *s = srq->s;
    int err = dcxemu_usable();
    if (err) {
        if (bad_wr) *bad_wr = wr;
        return err;
    }
    if ((err = dcxemu_shm_lock(&s->lock)) != 0) {
        if (bad_wr) *bad_wr = wr;
        return err;
    }
    for (; wr != NULL; wr = wr->next) {
        struct dcxemu_shm_srq_wqe *w;
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_sge ||
            (wr->num_sge > 0 && wr->sg_list == NULL)) {
            err = EINVAL;
            break;
        }
        if (s->tail - s->head >= s->max_wr) {
            err = ENOMEM;
            break;
        }
        w = srq_wqe(s, s->tail);
        w->wr_id = wr->wr_id;
        w->num_sge = (uint32_t)wr->num_sge;
        if (wr->num_sge > 0) {
            memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
        }
        __atomic_store_n(&s->tail, s->tail + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->lock);
    if (err && bad_wr) {
        *bad_wr = wr;
    }
    return err;
}

/* ---------------------------------------------------------------- member cleanup ---- */

/* Fabric lock held: release everything a member (dead, or exiting) owned.  Keys and QP numbers
 * become invalid at once; rings return to the heap.  Only slots below each table's high-water
 * mark can be in use, and pages above it stay untouched. */
void dcxemu_free_member_objects(int m)
{
    for (unsigned i = 0; i < dcxemu_fab->mr_hwm && i < DCXEMU_MAX_MRS; i++) {
        struct dcxemu_shm_mr *s = &dcxemu_fab->mrs[i];
        if (s->in_use && s->owner == m) {
            s->in_use = 0;
            s->tag = (s->tag + 1) & 0xff;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->mkey_hwm && i < DCXEMU_MAX_MKEYS; i++) {
        struct dcxemu_shm_mkey *s = &dcxemu_fab->mkeys[i];
        if (s->in_use && s->owner == m) {
            s->in_use = 0;
            s->programmed = 0;
            dcxemu_heap_free(s->entries_off);
            s->entries_off = 0;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->qp_hwm && i < DCXEMU_MAX_QPS; i++) {
        struct dcxemu_shm_qp *s = &dcxemu_fab->qps[i];
        if (s->in_use && s->owner == m) {
            s->in_use = 0;
            s->dct_ready = 0;
            s->qpn = 0;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->cq_hwm && i < DCXEMU_MAX_CQS; i++) {
        struct dcxemu_shm_cq *s = &dcxemu_fab->cqs[i];
        if (s->in_use && s->owner == m) {
            dcxemu_heap_free(s->ring_off);
            s->ring_off = 0;
            s->in_use = 0;
        }
    }
    for (unsigned i = 0; i < dcxemu_fab->srq_hwm && i < DCXEMU_MAX_SRQS; i++) {
        struct dcxemu_shm_srq *s = &dcxemu_fab->srqs[i];
        if (s->in_use && s->owner == m) {
            dcxemu_heap_free(s->ring_off);
            s->ring_off = 0;
            s->in_use = 0;
        }
    }
}

/* ---------------------------------------------------------------- ops table ---- */

int dcxemu_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int dcxemu_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

void dcxemu_ops_init(struct ibv_context_ops *ops)
{
    memset(ops, 0, sizeof(*ops));
    ops->poll_cq = poll_cq_op;
    ops->req_notify_cq = req_notify_cq_op;
    ops->post_srq_recv = post_srq_recv_op;
    ops->post_send = dcxemu_post_send_op;
    ops->post_recv = dcxemu_post_recv_op;
}
