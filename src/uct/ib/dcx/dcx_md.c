/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The dcx component and its memory domains: one per DC-capable device, named
 * after it, or a single device-less one when the host has none. Opening and
 * closing a domain, the device's events; registration is in dcx_md_mem.c.
 */
#include "dcx_md_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/async/async.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>


static const char *uct_dcx_reg_access_names[] = {
    [UCT_DCX_REG_ACCESS_REQUESTED] = "requested",
    [UCT_DCX_REG_ACCESS_ALL]       = "all",
    [UCT_DCX_REG_ACCESS_LAST]      = NULL
};

/* clang-format off */
ucs_config_field_t uct_dcx_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_dcx_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"DEVX", "try",
     "Open devices with DEVX. UMR (strided zero-copy) needs it; without it\n"
     "dcx runs with UMR disabled. 'try' falls back to a plain open, 'yes'\n"
     "fails when DEVX is unavailable, 'no' never asks for it.",
     ucs_offsetof(uct_dcx_md_config_t, devx), UCS_CONFIG_TYPE_TERNARY_AUTO},

    {"RCACHE", "try",
     "Keep memory registrations in a registration cache, released when the\n"
     "memory is unmapped. 'try' registers directly when the cache cannot be\n"
     "created (e.g. memory hooks are disabled). A cached registration covers\n"
     "its range rounded out to the cache alignment (RCACHE_ADDR_ALIGN with\n"
     "UCX 1.13, the page size with later UCX), merged with overlapping ones,\n"
     "and stays reachable through its key after deregistration until the\n"
     "cache releases it; 'no' registers exactly the requested bytes.",
     ucs_offsetof(uct_dcx_md_config_t, rcache), UCS_CONFIG_TYPE_TERNARY},

    {"PCI_RELAXED_ORDERING", "auto",
     "Register memory with IBV_ACCESS_RELAXED_ORDERING, letting the device\n"
     "reorder its PCIe writes to host memory. It is an optional access flag:\n"
     "a device or kernel without relaxed ordering ignores it. 'yes' and 'try'\n"
     "ask for it, 'no' never does, 'auto' asks on the CPUs where UCX's IB\n"
     "memory domains do (AMD Naples, Rome, Milan and, with UCX 1.16 and\n"
     "later, Genoa and Turin).",
     ucs_offsetof(uct_dcx_md_config_t, relaxed_order),
     UCS_CONFIG_TYPE_TERNARY_AUTO},

    {"REG_ACCESS", "all",
     "The rights a memory registration gets:\n"
     " all       - remote read, write and atomic for every registration, as\n"
     "             UCX's own IB memory domains grant. UCP needs it: it reuses\n"
     "             a registration for other purposes than it was made for.\n"
     " requested - those asked for with UCT_MD_MEM_ACCESS_*: remote put gives\n"
     "             remote write, remote get remote read, remote atomic remote\n"
     "             atomic; local write always. Memory registered for local\n"
     "             access only cannot be reached through its key. For UCT\n"
     "             users that ask for the rights they use.",
     ucs_offsetof(uct_dcx_md_config_t, reg_access),
     UCS_CONFIG_TYPE_ENUM(uct_dcx_reg_access_names)},

    {"", "", NULL,
     ucs_offsetof(uct_dcx_md_config_t, rcache_config),
     UCS_CONFIG_TYPE_TABLE(UCT_DCX_RCACHE_CONFIG_TABLE)},

    {NULL}
};
/* clang-format on */


ucs_status_t uct_dcx_query_md_resources(uct_component_t *component,
                                        uct_md_resource_desc_t **resources_p,
                                        unsigned *num_resources_p)
{
    const uct_dcx_device_t *devices;
    uct_md_resource_desc_t *resources;
    unsigned i, num_devices;

    uct_dcx_devices_get(&devices, &num_devices);
    if (num_devices == 0) {
        return uct_md_query_single_md_resource(component, resources_p,
                                               num_resources_p);
    }

    resources = ucs_calloc(num_devices, sizeof(*resources), "dcx md resources");
    if (resources == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < num_devices; ++i) {
        ucs_snprintf_zero(resources[i].md_name, sizeof(resources[i].md_name),
                          "%s", devices[i].name);
    }

    *resources_p     = resources;
    *num_resources_p = num_devices;
    return UCS_OK;
}

/* The device has failed: it completes nothing more. Every interface learns
 * of it (once) and fails its endpoints from its worker's progress. */
static void uct_dcx_md_fatal_dispatch(uct_dcx_md_t *md)
{
    uct_dcx_md_fatal_listener_t *listener;

    ucs_spin_lock(&md->fatal_lock);
    if (!md->fatal) {
        md->fatal = 1;
        ucs_list_for_each(listener, &md->fatal_listeners, list) {
            listener->cb(listener->arg);
        }
    }
    ucs_spin_unlock(&md->fatal_lock);
}

ucs_status_t
uct_dcx_md_fatal_listen(uct_dcx_md_t *md, uct_dcx_md_fatal_listener_t *listener)
{
    ucs_status_t status = UCS_OK;

    ucs_spin_lock(&md->fatal_lock);
    if (md->fatal) {
        status = UCS_ERR_IO_ERROR;
    } else {
        ucs_list_add_tail(&md->fatal_listeners, &listener->list);
    }
    ucs_spin_unlock(&md->fatal_lock);
    return status;
}

void uct_dcx_md_fatal_unlisten(uct_dcx_md_t *md,
                               uct_dcx_md_fatal_listener_t *listener)
{
    ucs_spin_lock(&md->fatal_lock);
    ucs_list_del(&listener->list);
    ucs_spin_unlock(&md->fatal_lock);
}

/* Device events: logged with what they mean for the user. Error
 * completions are what fail endpoints; these only explain. */
static void
uct_dcx_md_async_event(int fd, ucs_event_set_types_t events, void *arg)
{
    uct_dcx_md_t *md = arg;
    struct ibv_async_event event;
    const char *name = md->device->name;

    while (md->ops->get_async_event(md->ctx, &event) == 0) {
        switch (event.event_type) {
        case IBV_EVENT_PORT_ERR:
            ucs_warn("dcx: %s: port %d is down; "
                     "peers will see transport errors",
                     name, event.element.port_num);
            break;
        case IBV_EVENT_PORT_ACTIVE:
            ucs_diag("dcx: %s: port %d is active", name,
                     event.element.port_num);
            break;
        case IBV_EVENT_DEVICE_FATAL:
            ucs_error("dcx: %s: fatal device error: its endpoints fail "
                      "and what they had outstanding completes with an error",
                      name);
            uct_dcx_md_fatal_dispatch(md);
            break;
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            ucs_diag("dcx: %s: a receive queue ran below its limit: "
                     "the receiver does not progress fast enough, "
                     "senders will see receiver-not-ready retries",
                     name);
            break;
        case IBV_EVENT_CQ_ERR:
            ucs_error("dcx: %s: completion queue %p overrun", name,
                      event.element.cq);
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            ucs_diag("dcx: %s: qp 0x%x: %s", name, event.element.qp->qp_num,
                     (event.event_type == IBV_EVENT_QP_ACCESS_ERR) ?
                             "access error" :
                             "error");
            break;
        default:
            ucs_debug("dcx: %s: async event %d", name, event.event_type);
            break;
        }
        md->ops->ack_async_event(&event);
    }
}

static ucs_status_t uct_dcx_md_async_init(uct_dcx_md_t *md)
{
    int fd = md->ctx->async_fd;
    int flags;

    flags = fcntl(fd, F_GETFL);
    if ((flags < 0) || (fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)) {
        ucs_error("dcx: %s: cannot make the event fd non-blocking: %m",
                  md->device->name);
        return UCS_ERR_IO_ERROR;
    }

    return ucs_async_set_event_handler(UCS_ASYNC_MODE_THREAD_SPINLOCK, fd,
                                       UCS_EVENT_SET_EVREAD,
                                       uct_dcx_md_async_event, md, NULL);
}

void uct_dcx_md_close(uct_md_h uct_md)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);
    const uct_dcx_verbs_ops_t *ops;
    int ret;

    if (md->device != NULL) {
        ucs_async_remove_handler(md->ctx->async_fd, 1);
        uct_dcx_md_mem_cleanup(md);
        ops = md->ops;
        ret = ops->dealloc_pd(md->pd);
        if (ret != 0) {
            ucs_warn("dcx: %s: dealloc_pd failed: %s", md->device->name,
                     strerror(ret));
        }
        ret = ops->close_device(md->ctx);
        if (ret != 0) {
            ucs_warn("dcx: %s: close_device failed: %s", md->device->name,
                     strerror(ret));
        }
    }

    ucs_spinlock_destroy(&md->fatal_lock);
    ucs_free(md);
}

void uct_dcx_md_caps_get(uct_md_h uct_md, uct_dcx_md_caps_t *caps)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);

    /* Any byte range registers (the device pins whole pages itself). */
    memset(caps, 0, sizeof(*caps));
    caps->reg_alignment = 1;
    if (md->device == NULL) {
        /* The no-device memory domain registers nothing. */
        return;
    }

    caps->flags = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                  UCT_MD_FLAG_NEED_RKEY;
    caps->reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->max_reg          = md->max_mr_size;
    caps->rkey_packed_size = sizeof(uct_dcx_packed_rkey_t);
    caps->reg_cost         = md->reg_cost;
}

/* Open the device, with DEVX as configured. */
static ucs_status_t
uct_dcx_md_open_device(uct_dcx_md_t *md, ucs_ternary_auto_value_t devx)
{
    const uct_dcx_binding_t *binding   = md->device->binding;
    struct mlx5dv_context_attr dv_attr = {};
    struct ibv_device **list;
    struct ibv_device *ibdev;
    ucs_status_t status;
    int num;

    list = binding->ops.get_device_list(&num);
    if (list == NULL) {
        ucs_error("dcx: %s: cannot list devices: %m", md->device->name);
        return UCS_ERR_NO_DEVICE;
    }

    if ((md->device->binding_index >= (unsigned)num) ||
        strcmp(binding->ops.get_device_name(list[md->device->binding_index]),
               md->device->name)) {
        ucs_error("dcx: %s: device disappeared", md->device->name);
        status = UCS_ERR_NO_DEVICE;
        goto out_free_list;
    }

    ibdev = list[md->device->binding_index];
    if (devx != UCS_NO) {
        dv_attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
        md->ctx       = binding->ops.mlx5dv_open_device(ibdev, &dv_attr);
        if (md->ctx != NULL) {
            md->devx = 1;
        } else if (devx == UCS_YES) {
            ucs_error("dcx: %s: cannot open with DEVX (UCX_DCX_DEVX=yes): %m",
                      md->device->name);
            status = UCS_ERR_UNSUPPORTED;
            goto out_free_list;
        } else {
            ucs_debug("dcx: %s: DEVX unavailable (%m), UMR disabled",
                      md->device->name);
        }
    }

    if (md->ctx == NULL) {
        dv_attr.flags = 0;
        md->ctx       = binding->ops.mlx5dv_open_device(ibdev, &dv_attr);
        if (md->ctx == NULL) {
            ucs_error("dcx: %s: cannot open device: %m", md->device->name);
            status = UCS_ERR_NO_DEVICE;
            goto out_free_list;
        }
    }

    status = UCS_OK;

out_free_list:
    binding->ops.free_device_list(list);
    return status;
}

static ucs_status_t uct_dcx_md_query_device(uct_dcx_md_t *md)
{
    struct ibv_device_attr attr;
    int ret;

    ret = md->ops->query_device(md->ctx, &attr);
    if (ret != 0) {
        ucs_error("dcx: %s: query_device failed: %s", md->device->name,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    md->max_mr_size = attr.max_mr_size;
    return UCS_OK;
}

unsigned uct_dcx_prm_field(const uint8_t *page, unsigned bit_off, unsigned bits)
{
    uint32_t dw, mask = (bits == 32) ? UINT32_MAX : (UCS_BIT(bits) - 1);

    memcpy(&dw, page + (bit_off / 32) * 4, sizeof(dw));
    return (be32toh(dw) >> (32 - (bit_off % 32) - bits)) & mask;
}

int uct_dcx_md_query_hca_cap(uct_dcx_md_t *md, unsigned type, uint8_t *page,
                             size_t length)
{
    uint8_t in[UCT_DCX_PRM_MBOX_HDR]                             = {};
    uint8_t out[UCT_DCX_PRM_MBOX_HDR + UCT_DCX_PRM_HCA_CAP_SIZE] = {};
    int ret;

    ucs_assert(length <= UCT_DCX_PRM_HCA_CAP_SIZE);
    in[0] = UCT_DCX_PRM_OP_QUERY_HCA_CAP >> 8;
    in[1] = UCT_DCX_PRM_OP_QUERY_HCA_CAP & 0xff;
    in[7] = (type << 1) | 1; /* op_mod: the page, current values */
    /* The whole output, as rdma-core, UCX and the kernel pass it: the
     * firmware checks a command's output length. */
    ret = md->ops->mlx5dv_devx_general_cmd(md->ctx, in, sizeof(in), out,
                                           sizeof(out));
    if (ret == 0) {
        ret = (out[0] == 0) ? 0 : EREMOTEIO; /* the command's status */
    }
    if (ret != 0) {
        ucs_debug("dcx: %s: QUERY_HCA_CAP (page %u) failed: %s, status 0x%x",
                  md->device->name, type, strerror(ret), out[0]);
        return ret;
    }

    memcpy(page, out + UCT_DCX_PRM_MBOX_HDR, length);
    return 0;
}

/* What dcx reads of the general capability page, with DEVX where the device
 * was opened with it:
 * - the read/atomic depth of a DCI: the kernel refuses RTR->RTS with
 *   max_rd_atomic above 1 << log_max_ra_res_dc (mlx5_ib validate_rd_atomic),
 *   UCX's dc_mlx5 uses 1 << log_max_ra_req_dc; both bound it here. Without
 *   the page it stays unknown and the DCIs find it
 *   (uct_dcx_iface_dci_connect).
 * - compact_address_vector: whether a DC WQE may carry the 16-byte base
 *   address vector, as UCX's ib_mlx5dv_md.c reads it (UCT_IB_DEVICE_FLAG_AV).
 *   Without the page, as UCX without DEVX: the address vector libmlx5 built
 *   for an address handle alone decides (compact when not extended). */
static void uct_dcx_md_query_hca_general(uct_dcx_md_t *md)
{
    uint8_t cap[0x220 / 8] = {}; /* up to compact_address_vector */
    unsigned req, res;

    md->compact_av = 1;
    if (!md->devx || (uct_dcx_md_query_hca_cap(md, UCT_DCX_PRM_HCA_CAP_GENERAL,
                                               cap, sizeof(cap)) != 0)) {
        ucs_debug("dcx: %s: compact address vectors as the address handles "
                  "allow (no DEVX capability page)",
                  md->device->name);
        return; /* depth found when a DCI connects */
    }

    req                  = uct_dcx_prm_field(cap, 0x12a, 6);
    res                  = uct_dcx_prm_field(cap, 0x13a, 6);
    md->dc_max_rd_atomic = 1u << ucs_min(ucs_min(req, res), 7);
    md->compact_av       = uct_dcx_prm_field(cap, 0x200, 1);
    ucs_debug("dcx: %s: log_max_ra_req_dc %u log_max_ra_res_dc %u "
              "compact_address_vector %d",
              md->device->name, req, res, md->compact_av);
}

/* The DC device named @a md_name (the last one of that name), or NULL;
 * @a num_devices_p: how many there are. */
static const uct_dcx_device_t *
uct_dcx_md_find_device(const char *md_name, unsigned *num_devices_p)
{
    const uct_dcx_device_t *devices, *found = NULL;
    unsigned i;

    uct_dcx_devices_get(&devices, num_devices_p);
    for (i = 0; i < *num_devices_p; ++i) {
        if (!strcmp(devices[i].name, md_name)) {
            found = &devices[i];
        }
    }
    return found;
}

/* The device's context, its limits and a protection domain. */
static ucs_status_t
uct_dcx_md_device_init(uct_dcx_md_t *md, const uct_dcx_md_config_t *config)
{
    ucs_status_t status;

    md->ops = &md->device->binding->ops;
    status  = uct_dcx_md_open_device(md, config->devx);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_md_query_device(md);
    if (status != UCS_OK) {
        goto err_close_device;
    }
    uct_dcx_md_query_hca_general(md);

    md->pd = md->ops->alloc_pd(md->ctx);
    if (md->pd == NULL) {
        ucs_error("dcx: %s: alloc_pd failed: %m", md->device->name);
        status = UCS_ERR_IO_ERROR;
        goto err_close_device;
    }

    return UCS_OK;

err_close_device:
    md->ops->close_device(md->ctx);
    return status;
}

ucs_status_t uct_dcx_md_open(uct_component_t *component, const char *md_name,
                             const uct_md_config_t *uct_config, uct_md_h *md_p)
{
    const uct_dcx_md_config_t *config = ucs_derived_of(uct_config,
                                                       uct_dcx_md_config_t);
    unsigned num_devices;
    ucs_status_t status;
    uct_dcx_md_t *md;

    md = ucs_calloc(1, sizeof(*md), "uct_dcx_md_t");
    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    md->super.ops       = &uct_dcx_md_ops;
    md->super.component = &uct_dcx_component;
    ucs_list_head_init(&md->mr_listeners);
    ucs_list_head_init(&md->fatal_listeners);
    ucs_spinlock_init(&md->fatal_lock, 0);

    md->device = uct_dcx_md_find_device(md_name, &num_devices);
    if (md->device == NULL) {
        if ((num_devices == 0) && !strcmp(md_name, UCT_DCX_NO_DEVICE_MD_NAME)) {
            goto out;
        }
        ucs_error("dcx: no DC-capable device named '%s'", md_name);
        status = UCS_ERR_NO_DEVICE;
        goto err_free;
    }

    status = uct_dcx_md_device_init(md, config);
    if (status != UCS_OK) {
        goto err_free;
    }

    status = uct_dcx_md_mem_init(md, config);
    if (status != UCS_OK) {
        goto err_device_close;
    }

    status = uct_dcx_md_async_init(md);
    if (status != UCS_OK) {
        goto err_mem_cleanup;
    }

out:
    *md_p = &md->super;
    return UCS_OK;

err_mem_cleanup:
    uct_dcx_md_mem_cleanup(md);
err_device_close:
    md->ops->dealloc_pd(md->pd);
    md->ops->close_device(md->ctx);
err_free:
    ucs_spinlock_destroy(&md->fatal_lock);
    ucs_free(md);
    return status;
}

uct_component_t uct_dcx_component = {
    .name               = "dcx",
    .query_md_resources = uct_dcx_query_md_resources,
    .md_open            = uct_dcx_md_open,
    .cm_open            = UCT_DCX_STUB(uct_component_cm_open_func_t,
                                       ucs_empty_function_return_unsupported),
    UCT_DCX_COMPAT_RKEY_OPS,
    .rkey_ptr           = UCT_DCX_STUB(uct_component_rkey_ptr_func_t,
                                       ucs_empty_function_return_unsupported),
    .rkey_release       = UCT_DCX_STUB(uct_component_rkey_release_func_t,
                                       ucs_empty_function_return_success),
    .md_config          = {
        .name           = "dcx memory domain",
        .prefix         = "DCX_",
        .table          = uct_dcx_md_config_table,
        .size           = sizeof(uct_dcx_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_dcx_component),
    .flags              = 0,
    .md_vfs_init        = UCT_DCX_STUB(uct_component_md_vfs_init_func_t,
                                       ucs_empty_function)
};
