/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "dcx_device.h"
#include "compat/dcx_compat.h"

#include <ucs/config/parser.h>
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>


#define UCT_DCX_MAX_DEVICES 32


uct_dcx_global_config_t uct_dcx_global_config;

/* clang-format off */
ucs_config_field_t uct_dcx_global_config_table[] = {
    {"VERBS_LIB", UCT_DCX_HW_VERBS_LIB,
     "libibverbs that the hardware binding loads at run time. dcx has no\n"
     "link-time dependency on rdma-core: without it there are simply no\n"
     "hardware devices.",
     ucs_offsetof(uct_dcx_global_config_t, verbs_lib), UCS_CONFIG_TYPE_STRING},

    {"MLX5_LIB", UCT_DCX_HW_MLX5_LIB,
     "libmlx5 (the mlx5 direct-verbs provider) that the hardware binding loads\n"
     "at run time. DC needs it: without it no hardware device is DC-capable.",
     ucs_offsetof(uct_dcx_global_config_t, mlx5_lib), UCS_CONFIG_TYPE_STRING},

    {"EMU", "n",
     "Also list the devices of the software DC device (the device model,\n"
     "libdcxemu), named dcxemu0, dcxemu1, ...: a DC device shared by the\n"
     "processes of one host, for running and testing without mlx5 hardware.\n"
     "'dcx-run --emu' sets it. Its own settings are DCXEMU_* variables.",
     ucs_offsetof(uct_dcx_global_config_t, emu), UCS_CONFIG_TYPE_BOOL},

    {"EMU_LIB", UCT_DCX_EMU_LIB_DEFAULT,
     "The software DC device library loaded when UCX_DCX_EMU is set.",
     ucs_offsetof(uct_dcx_global_config_t, emu_lib), UCS_CONFIG_TYPE_STRING},

    {NULL}
};
/* clang-format on */

/* Listed by ucx_info -c; dcx_init.c adds it to UCX's list of tables. */
ucs_config_global_list_entry_t uct_dcx_global_config_entry = {
    .name   = "dcx devices",
    .prefix = "DCX_",
    .table  = uct_dcx_global_config_table,
    .size   = sizeof(uct_dcx_global_config_t)
};


static struct {
    pthread_once_t once;
    uct_dcx_binding_t hw;
    uct_dcx_binding_t emu;
    uct_dcx_device_t devices[UCT_DCX_MAX_DEVICES];
    unsigned num_devices;
} uct_dcx_devices = { .once = PTHREAD_ONCE_INIT };


/* The probe's DCT through INIT to RTR, which is what a DC device does. */
static ucs_status_t
uct_dcx_device_probe_dct_connect(const uct_dcx_verbs_ops_t *ops,
                                 struct ibv_qp *dct, uint8_t port,
                                 const struct ibv_port_attr *port_attr)
{
    struct ibv_qp_attr attr;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = port;
    attr.pkey_index      = 0;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    ret                  = ops->modify_qp(dct, &attr,
                                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                  IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        ucs_debug("dcx: dc probe: dct to init failed: %s", strerror(ret));
        return UCS_ERR_UNSUPPORTED;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state          = IBV_QPS_RTR;
    attr.path_mtu          = port_attr->active_mtu;
    attr.min_rnr_timer     = 1;
    attr.ah_attr.port_num  = port;
    attr.ah_attr.is_global = (port_attr->link_layer ==
                              IBV_LINK_LAYER_ETHERNET) ||
                             (port_attr->flags & IBV_QPF_GRH_REQUIRED);
    attr.ah_attr.grh.hop_limit = 1;
    ret                        = ops->modify_qp(dct, &attr,
                                                IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                                                        IBV_QP_PATH_MTU);
    if (ret != 0) {
        ucs_debug("dcx: dc probe: dct to rtr failed: %s", strerror(ret));
        return UCS_ERR_UNSUPPORTED;
    }

    return UCS_OK;
}

ucs_status_t uct_dcx_device_probe_dc(const uct_dcx_binding_t *binding,
                                     struct ibv_context *ctx, uint8_t port,
                                     const struct ibv_port_attr *port_attr)
{
    const uct_dcx_verbs_ops_t *ops     = &binding->ops;
    struct mlx5dv_qp_init_attr dv_attr = {};
    struct ibv_qp_init_attr_ex qp_attr = {};
    struct ibv_srq_init_attr srq_attr  = {};
    struct ibv_cq_init_attr_ex cq_attr = {};
    ucs_status_t status                = UCS_ERR_UNSUPPORTED;
    struct ibv_cq_ex *cq;
    struct ibv_srq *srq;
    struct ibv_pd *pd;
    struct ibv_qp *dct;

    pd = ops->alloc_pd(ctx);
    if (pd == NULL) {
        ucs_debug("dcx: dc probe: alloc_pd failed: %m");
        goto out;
    }

    cq_attr.cqe = 1;
    cq          = ops->create_cq_ex(ctx, &cq_attr);
    if (cq == NULL) {
        ucs_debug("dcx: dc probe: create_cq failed: %m");
        goto out_dealloc_pd;
    }

    srq_attr.attr.max_wr  = 1;
    srq_attr.attr.max_sge = 1;
    srq                   = ops->create_srq(pd, &srq_attr);
    if (srq == NULL) {
        ucs_debug("dcx: dc probe: create_srq failed: %m");
        goto out_destroy_cq;
    }

    qp_attr.qp_type                     = IBV_QPT_DRIVER;
    qp_attr.comp_mask                   = IBV_QP_INIT_ATTR_PD;
    qp_attr.pd                          = pd;
    qp_attr.send_cq                     = ibv_cq_ex_to_cq(cq);
    qp_attr.recv_cq                     = ibv_cq_ex_to_cq(cq);
    qp_attr.srq                         = srq;
    dv_attr.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv_attr.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv_attr.dc_init_attr.dct_access_key = 1;
    dct = ops->mlx5dv_create_qp(ctx, &qp_attr, &dv_attr);
    if (dct == NULL) {
        ucs_debug("dcx: dc probe: cannot create a dct: %m");
        goto out_destroy_srq;
    }

    status = uct_dcx_device_probe_dct_connect(ops, dct, port, port_attr);
    ops->destroy_qp(dct);
out_destroy_srq:
    ops->destroy_srq(srq);
out_destroy_cq:
    ops->destroy_cq(ibv_cq_ex_to_cq(cq));
out_dealloc_pd:
    ops->dealloc_pd(pd);
out:
    return status;
}

/* Fill @a device with the DC-capable active ports of @a ibdev. */
static int uct_dcx_device_check(const uct_dcx_binding_t *binding,
                                struct ibv_device *ibdev,
                                uct_dcx_device_t *device)
{
    const uct_dcx_verbs_ops_t *ops     = &binding->ops;
    const char *name                   = ops->get_device_name(ibdev);
    struct mlx5dv_context_attr dv_attr = {};
    struct ibv_device_attr dev_attr;
    struct ibv_port_attr port_attr;
    struct ibv_context *ctx;
    uint8_t port;
    int ret;

    if (!binding->dv || !ops->mlx5dv_is_supported(ibdev)) {
        ucs_debug("dcx: %s: not an mlx5 device, no DC", name);
        return 0;
    }

    ctx = ops->mlx5dv_open_device(ibdev, &dv_attr);
    if (ctx == NULL) {
        ucs_debug("dcx: %s: cannot open device: %m", name);
        return 0;
    }

    ret = ops->query_device(ctx, &dev_attr);
    if (ret != 0) {
        ucs_debug("dcx: %s: query_device failed: %s", name, strerror(ret));
        goto out_close;
    }

    device->num_ports = 0;
    for (port = 1; (port <= dev_attr.phys_port_cnt) &&
                   (device->num_ports < UCT_DCX_MAX_PORTS);
         ++port) {
        ret = ops->query_port(ctx, port, &port_attr);
        if (ret != 0) {
            ucs_debug("dcx: %s:%u: query_port failed: %s", name, port,
                      strerror(ret));
            continue;
        }

        if (port_attr.state != IBV_PORT_ACTIVE) {
            ucs_debug("dcx: %s:%u: port is not active", name, port);
            continue;
        }

        if (uct_dcx_device_probe_dc(binding, ctx, port, &port_attr) != UCS_OK) {
            ucs_debug("dcx: %s:%u: no DC support", name, port);
            continue;
        }

        device->ports[device->num_ports++] = port;
    }

    ucs_snprintf_zero(device->name, sizeof(device->name), "%s", name);
    device->binding = binding;

out_close:
    ops->close_device(ctx);
    return device->num_ports > 0;
}

unsigned uct_dcx_devices_scan(const uct_dcx_binding_t *binding,
                              uct_dcx_device_t *devices, unsigned max)
{
    struct ibv_device **list;
    unsigned count = 0;
    int i, num;

    list = binding->ops.get_device_list(&num);
    if (list == NULL) {
        ucs_debug("dcx: %s: no devices: %m", binding->name);
        return 0;
    }

    for (i = 0; (i < num) && (count < max); ++i) {
        memset(&devices[count], 0, sizeof(devices[count]));
        if (uct_dcx_device_check(binding, list[i], &devices[count])) {
            devices[count].binding_index = i;
            ++count;
        }
    }

    binding->ops.free_device_list(list);

    if (count == 0) {
        ucs_debug("dcx: %s: %d device(s), none DC-capable", binding->name, num);
    }
    return count;
}

static void uct_dcx_devices_discover(void)
{
    ucs_status_t status;

    status = uct_dcx_compat_config_fill(&uct_dcx_global_config,
                                        &uct_dcx_global_config_entry);
    if (status != UCS_OK) {
        ucs_warn("dcx: invalid UCX_DCX_ global settings, no devices");
        return;
    }

    if (uct_dcx_hw_binding_open(uct_dcx_global_config.verbs_lib,
                                uct_dcx_global_config.mlx5_lib,
                                &uct_dcx_devices.hw) == UCS_OK) {
        uct_dcx_devices.num_devices = uct_dcx_devices_scan(
                &uct_dcx_devices.hw, uct_dcx_devices.devices,
                UCT_DCX_MAX_DEVICES);
    }

    if (uct_dcx_global_config.emu &&
        (uct_dcx_emu_binding_open(uct_dcx_global_config.emu_lib,
                                  &uct_dcx_devices.emu) == UCS_OK)) {
        uct_dcx_devices.num_devices += uct_dcx_devices_scan(
                &uct_dcx_devices.emu,
                uct_dcx_devices.devices + uct_dcx_devices.num_devices,
                UCT_DCX_MAX_DEVICES - uct_dcx_devices.num_devices);
    }

    ucs_debug("dcx: %u DC-capable device(s)", uct_dcx_devices.num_devices);
}

void uct_dcx_devices_get(const uct_dcx_device_t **devices_p,
                         unsigned *num_devices_p)
{
    pthread_once(&uct_dcx_devices.once, uct_dcx_devices_discover);
    *devices_p     = uct_dcx_devices.devices;
    *num_devices_p = uct_dcx_devices.num_devices;
}
