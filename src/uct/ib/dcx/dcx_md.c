/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The dcx component and its memory domains: one per DC-capable device, named
 * after it, or a single device-less one when the host has none.
 */
#include "dcx_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>

#include <errno.h>
#include <string.h>


ucs_config_field_t uct_dcx_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_dcx_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"DEVX", "try",
     "Open devices with DEVX. UMR (strided zero-copy) needs it; without it\n"
     "dcx runs with UMR disabled. 'try' falls back to a plain open, 'yes'\n"
     "fails when DEVX is unavailable, 'no' never asks for it.",
     ucs_offsetof(uct_dcx_md_config_t, devx), UCS_CONFIG_TYPE_TERNARY_AUTO},

    {NULL}
};


static ucs_status_t
uct_dcx_query_md_resources(uct_component_t *component,
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

    resources = ucs_calloc(num_devices, sizeof(*resources),
                           "dcx md resources");
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

static void uct_dcx_md_close(uct_md_h uct_md)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);
    const uct_dcx_verbs_ops_t *ops;
    int ret;

    if (md->device != NULL) {
        ops = &md->device->binding->ops;
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

    ucs_free(md);
}

static ucs_status_t uct_dcx_md_query(uct_md_h uct_md, uct_md_attr_t *attr)
{
    /* Memory registration and remote keys arrive with the data path; until
     * then the memory domain honestly advertises no capability. */
    memset(attr, 0, sizeof(*attr));
    attr->reg_cost = ucs_linear_func_make(0, 0);
    UCS_CPU_ZERO(&attr->local_cpus);
    return UCS_OK;
}

static ucs_status_t uct_dcx_md_mem_reg(uct_md_h md, void *address,
                                       size_t length, unsigned flags,
                                       uct_mem_h *memh_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t
uct_dcx_md_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    return UCS_ERR_UNSUPPORTED;
}

static uct_md_ops_t uct_dcx_md_ops = {
    .close                  = uct_dcx_md_close,
    .query                  = uct_dcx_md_query,
    .mem_alloc              = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported,
    .mem_free               = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported,
    .mem_advise             = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
    .mem_reg                = uct_dcx_md_mem_reg,
    .mem_dereg              = uct_dcx_md_mem_dereg,
    .mem_query              = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
    .mkey_pack              = (uct_md_mkey_pack_func_t)ucs_empty_function_return_unsupported,
    .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
    .detect_memory_type     = ucs_empty_function_return_unsupported,
};

/* Open the device, with DEVX as configured. */
static ucs_status_t uct_dcx_md_open_device(uct_dcx_md_t *md,
                                           ucs_ternary_auto_value_t devx)
{
    const uct_dcx_binding_t *binding = md->device->binding;
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

static ucs_status_t
uct_dcx_md_open(uct_component_t *component, const char *md_name,
                const uct_md_config_t *uct_config, uct_md_h *md_p)
{
    const uct_dcx_md_config_t *config = ucs_derived_of(uct_config,
                                                       uct_dcx_md_config_t);
    const uct_dcx_device_t *devices;
    unsigned i, num_devices;
    ucs_status_t status;
    uct_dcx_md_t *md;

    md = ucs_calloc(1, sizeof(*md), "uct_dcx_md_t");
    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    md->super.ops       = &uct_dcx_md_ops;
    md->super.component = &uct_dcx_component;

    uct_dcx_devices_get(&devices, &num_devices);
    for (i = 0; i < num_devices; ++i) {
        if (!strcmp(devices[i].name, md_name)) {
            md->device = &devices[i];
        }
    }

    if (md->device == NULL) {
        if ((num_devices == 0) && !strcmp(md_name, UCT_DCX_NO_DEVICE_MD_NAME)) {
            goto out;
        }
        ucs_error("dcx: no DC-capable device named '%s'", md_name);
        status = UCS_ERR_NO_DEVICE;
        goto err_free;
    }

    status = uct_dcx_md_open_device(md, config->devx);
    if (status != UCS_OK) {
        goto err_free;
    }

    md->pd = md->device->binding->ops.alloc_pd(md->ctx);
    if (md->pd == NULL) {
        ucs_error("dcx: %s: alloc_pd failed: %m", md->device->name);
        status = UCS_ERR_IO_ERROR;
        goto err_close_device;
    }

out:
    *md_p = &md->super;
    return UCS_OK;

err_close_device:
    md->device->binding->ops.close_device(md->ctx);
err_free:
    ucs_free(md);
    return status;
}

static ucs_status_t
uct_dcx_rkey_unpack(uct_component_t *component, const void *rkey_buffer,
                    uct_rkey_t *rkey_p, void **handle_p)
{
    /* No memory domain of this version packs remote keys. */
    ucs_error("dcx: cannot unpack a remote key: not supported by this "
              "version");
    return UCS_ERR_UNSUPPORTED;
}

uct_component_t uct_dcx_component = {
    .name               = "dcx",
    .query_md_resources = uct_dcx_query_md_resources,
    .md_open            = uct_dcx_md_open,
    .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_dcx_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release       = (uct_component_rkey_release_func_t)ucs_empty_function_return_success,
    .md_config          = {
        .name           = "dcx memory domain",
        .prefix         = "DCX_",
        .table          = uct_dcx_md_config_table,
        .size           = sizeof(uct_dcx_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_dcx_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function
};
