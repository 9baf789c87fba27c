/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCX 1.16-1.22 layer: md ops with uct_md_attr_v2_t, mem_reg params and
 * the address in mkey_pack, a component with rkey_compare, iface internal
 * ops that carry reachability (is_reachable_v2, ep_is_connected) and
 * performance estimates for protocols v2, and UCS helpers taking parameter
 * structs. Changes inside the range follow UCT_DCX_UCX_AT_LEAST:
 * rkey_unpack params (1.19), mem_alloc's sys_dev (1.19), iface_query_v2
 * and ep_get_device_ep (1.20), mem_elem_pack (1.21), mem_query v2 and
 * ep_put_sgl_zcopy (1.22), the perf attribute path_bandwidth (after 1.18).
 */
#include "../../dcx_md.h"

#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>

#include <string.h>
#include <sys/mman.h>


/* --- memory domain -------------------------------------------------------- */

static ucs_status_t uct_dcx_compat_md_query(uct_md_h md, uct_md_attr_v2_t *attr)
{
    uct_dcx_md_caps_t caps;

    uct_dcx_md_caps_get(md, &caps);
    /* uct_md_query_v2 zeroes the struct and copies what the caller asked. */
    attr->flags            = caps.flags;
    attr->reg_mem_types    = caps.reg_mem_types;
    attr->cache_mem_types  = (caps.flags & UCT_MD_FLAG_REG) ?
                                     caps.reg_mem_types :
                                     0;
    attr->access_mem_types = caps.access_mem_types;
    attr->max_reg          = caps.max_reg;
    attr->max_alloc        = 0;
    attr->rkey_packed_size = caps.rkey_packed_size;
    attr->reg_cost         = caps.reg_cost;
    attr->reg_alignment    = caps.reg_alignment;
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t
uct_dcx_compat_mem_reg(uct_md_h md, void *address, size_t length,
                       const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    unsigned flags = UCT_MD_MEM_REG_FIELD_VALUE(params, flags, FIELD_FLAGS, 0);

    if (params->field_mask &
        (UCT_MD_MEM_REG_FIELD_DMABUF_FD | UCT_MD_MEM_REG_FIELD_DMABUF_OFFSET)) {
        /* The caps report no dmabuf memory types. */
        return UCS_ERR_UNSUPPORTED;
    }

    return uct_dcx_md_mem_reg_flags(md, address, length, flags, memh_p);
}

static ucs_status_t
uct_dcx_compat_mkey_pack(uct_md_h md, uct_mem_h memh, void *address,
                         size_t length, const uct_md_mkey_pack_params_t *params,
                         void *rkey_buffer)
{
    uint64_t flags = UCS_PARAM_VALUE(UCT_MD_MKEY_PACK_FIELD, params, flags,
                                     FLAGS, 0);

    if (flags & UCT_MD_MKEY_PACK_FLAG_EXPORT) {
        /* No exported mkeys (exported_mkey_packed_size is 0). */
        return UCS_ERR_UNSUPPORTED;
    }

    return uct_dcx_md_mkey_pack_memh(md, memh, rkey_buffer);
}

uct_md_ops_t uct_dcx_md_ops = {
    .close              = uct_dcx_md_close,
    .query              = uct_dcx_compat_md_query,
    .mem_alloc          = UCT_DCX_STUB(uct_md_mem_alloc_func_t,
                                       ucs_empty_function_return_unsupported),
    .mem_free           = UCT_DCX_STUB(uct_md_mem_free_func_t,
                                       ucs_empty_function_return_unsupported),
    .mem_advise         = UCT_DCX_STUB(uct_md_mem_advise_func_t,
                                       ucs_empty_function_return_unsupported),
    .mem_reg            = uct_dcx_compat_mem_reg,
    .mem_dereg          = uct_dcx_md_mem_dereg,
    .mem_query          = UCT_DCX_STUB(uct_md_mem_query_func_t,
                                       ucs_empty_function_return_unsupported),
    .mkey_pack          = uct_dcx_compat_mkey_pack,
    .mem_attach         = UCT_DCX_STUB(uct_md_mem_attach_func_t,
                                       ucs_empty_function_return_unsupported),
    .detect_memory_type = UCT_DCX_STUB(uct_md_detect_memory_type_func_t,
                                       ucs_empty_function_return_unsupported),
#if UCT_DCX_UCX_AT_LEAST(1, 21)
    .mem_elem_pack = UCT_DCX_STUB(uct_md_mem_elem_pack_func_t,
                                  ucs_empty_function_return_unsupported),
#endif
};


/* --- component (uct_dcx_component is in dcx_md.c) ------------------------ */

#if UCT_DCX_UCX_AT_LEAST(1, 19)
ucs_status_t uct_dcx_compat_rkey_unpack(uct_component_t *component,
                                        const void *rkey_buffer,
                                        const uct_rkey_unpack_params_t *params,
                                        uct_rkey_t *rkey_p, void **handle_p)
#else
ucs_status_t uct_dcx_compat_rkey_unpack(uct_component_t *component,
                                        const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p)
#endif
{
    return uct_dcx_rkey_unpack_buffer(rkey_buffer, rkey_p, handle_p);
}

/* Unpacked keys are plain values (tag and 32-bit key), no handle. */
ucs_status_t
uct_dcx_compat_rkey_compare(uct_component_t *component, uct_rkey_t rkey1,
                            uct_rkey_t rkey2,
                            const uct_rkey_compare_params_t *params,
                            int *result)
{
    if ((params->field_mask != 0) || (result == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    *result = (rkey1 > rkey2) ? 1 : (rkey1 < rkey2) ? -1 : 0;
    return UCS_OK;
}


/* --- interface ------------------------------------------------------------ */

/* The public op goes through UCX's front end to is_reachable_v2 below. */
int uct_dcx_compat_iface_is_reachable(const uct_iface_h iface,
                                      const uct_device_addr_t *dev_addr,
                                      const uct_iface_addr_t *iface_addr)
{
    return uct_base_iface_is_reachable(iface, dev_addr, iface_addr);
}

static int uct_dcx_compat_iface_is_reachable_v2(
        const uct_iface_h iface, const uct_iface_is_reachable_params_t *params)
{
    char *info = UCS_PARAM_VALUE(UCT_IFACE_IS_REACHABLE_FIELD, params,
                                 info_string, INFO_STRING, NULL);
    size_t max = UCS_PARAM_VALUE(UCT_IFACE_IS_REACHABLE_FIELD, params,
                                 info_string_length, INFO_STRING_LENGTH, 0);

    /* A DC target is reached through the fabric, so both scopes (device,
     * network) ask the same: do the addresses name a target this interface
     * can send to. */
    if (!uct_iface_is_reachable_params_addrs_valid(params)) {
        if ((info != NULL) && (max > 0)) {
            ucs_snprintf_zero(info, max, "dcx: no device or interface address");
        }
        return 0;
    }

    return uct_dcx_iface_addr_is_reachable(iface, params->device_addr,
                                           params->iface_addr, info, max);
}

static int
uct_dcx_compat_ep_is_connected(uct_ep_h ep,
                               const uct_ep_is_connected_params_t *params)
{
    const uct_device_addr_t *dev_addr = UCS_PARAM_VALUE(
            UCT_EP_IS_CONNECTED_FIELD, params, device_addr, DEVICE_ADDR, NULL);
    const uct_iface_addr_t *iface_addr = UCS_PARAM_VALUE(
            UCT_EP_IS_CONNECTED_FIELD, params, iface_addr, IFACE_ADDR, NULL);

    if ((dev_addr == NULL) || (iface_addr == NULL)) {
        return 0;
    }

    return uct_dcx_ep_is_connected_to(ep, dev_addr, iface_addr);
}

/* Protocols v2 (on by default since 1.16) build their thresholds from
 * these figures, per operation. */
static ucs_status_t
uct_dcx_compat_estimate_perf(uct_iface_h iface, uct_perf_attr_t *attr)
{
    uct_ep_operation_t op = UCS_PARAM_VALUE(UCT_PERF_ATTR_FIELD, attr,
                                            operation, OPERATION,
                                            UCT_EP_OP_LAST);
    uct_dcx_iface_perf_t perf;

    uct_dcx_iface_perf_get(iface,
                           (op == UCT_EP_OP_LAST) ? UCT_DCX_PERF_OP_ANY :
                           uct_ep_op_is_zcopy(op) ? UCT_DCX_PERF_OP_ZCOPY :
                           uct_ep_op_is_bcopy(op) ? UCT_DCX_PERF_OP_BCOPY :
                                                    UCT_DCX_PERF_OP_SHORT,
                           &perf);
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD) {
        attr->send_pre_overhead = perf.send_pre_overhead;
    }
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_POST_OVERHEAD) {
        attr->send_post_overhead = perf.send_post_overhead;
    }
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_RECV_OVERHEAD) {
        attr->recv_overhead = perf.recv_overhead;
    }
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_BANDWIDTH) {
        attr->bandwidth.dedicated = 0;
        attr->bandwidth.shared    = perf.bandwidth;
    }
#if UCT_DCX_UCX_AT_LEAST(1, 19)
    /* Not in 1.18; present in 1.22 (1.19-1.21 are untested: if one lacks
     * it, this fails to compile rather than leave it unset). */
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_PATH_BANDWIDTH) {
        attr->path_bandwidth.dedicated = 0;
        attr->path_bandwidth.shared    = perf.bandwidth;
    }
#endif
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_LATENCY) {
        attr->latency = ucs_linear_func_make(perf.latency, 0);
    }
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_MAX_INFLIGHT_EPS) {
        attr->max_inflight_eps = perf.max_inflight_eps;
    }
    if (attr->field_mask & UCT_PERF_ATTR_FIELD_FLAGS) {
        attr->flags = 0;
    }
    return UCS_OK;
}

#if UCT_DCX_UCX_AT_LEAST(1, 22)
/* The v2 capabilities: scatter-gather put. */
static ucs_status_t
uct_dcx_compat_iface_query_v2(uct_iface_h iface, uct_iface_attr_v2_t *attr)
{
    size_t sgl_max = uct_dcx_iface_put_sgl_max(iface);
    ucs_status_t status;

    status = uct_iface_base_query_v2(iface, attr);
    if (status != UCS_OK) {
        return status;
    }

    if ((attr->field_mask & UCT_IFACE_ATTR_FIELD_CAP_FLAGS) && (sgl_max > 0)) {
        attr->cap.flags |= UCT_IFACE_FLAG_V2_PUT_SGL_ZCOPY;
    }
    if (attr->field_mask & UCT_IFACE_ATTR_FIELD_MAX_PUT_SGL_ZCOPY_COUNT) {
        attr->max_put_sgl_zcopy_count = sgl_max;
    }
    return UCS_OK;
}
#endif

uct_iface_internal_ops_t uct_dcx_iface_internal_ops = {
#if UCT_DCX_UCX_AT_LEAST(1, 22)
    .iface_query_v2 = uct_dcx_compat_iface_query_v2,
#elif UCT_DCX_UCX_AT_LEAST(1, 20)
    /* No v2-only capability before 1.22. */
    .iface_query_v2 = uct_iface_base_query_v2,
#endif
    .iface_estimate_perf   = uct_dcx_compat_estimate_perf,
    .iface_vfs_refresh     = UCT_DCX_STUB(uct_iface_vfs_refresh_func_t,
                                          ucs_empty_function),
    .ep_query              = UCT_DCX_STUB(uct_ep_query_func_t,
                                          ucs_empty_function_return_unsupported),
    .ep_invalidate         = UCT_DCX_STUB(uct_ep_invalidate_func_t,
                                          ucs_empty_function_return_unsupported),
    .ep_connect_to_ep_v2   = UCT_DCX_STUB(uct_ep_connect_to_ep_v2_func_t,
                                          ucs_empty_function_return_unsupported),
    .iface_is_reachable_v2 = uct_dcx_compat_iface_is_reachable_v2,
    .ep_is_connected       = uct_dcx_compat_ep_is_connected,
#if UCT_DCX_UCX_AT_LEAST(1, 20)
    .ep_get_device_ep = UCT_DCX_STUB(uct_ep_get_device_ep_func_t,
                                     ucs_empty_function_return_unsupported),
#endif
#if UCT_DCX_UCX_AT_LEAST(1, 22)
    .ep_put_sgl_zcopy = uct_dcx_ep_put_sgl_zcopy,
#endif
};


/* --- UCS helpers ---------------------------------------------------------- */

ucs_status_t
uct_dcx_compat_config_fill(void *opts, ucs_config_global_list_entry_t *entry)
{
    return ucs_config_parser_fill_opts(opts, entry, UCS_DEFAULT_ENV_PREFIX, 0);
}

ucs_status_t uct_dcx_compat_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                       size_t alignment, unsigned grow,
                                       unsigned max_elems, ucs_mpool_ops_t *ops,
                                       const char *name)
{
    ucs_mpool_params_t params;

    ucs_mpool_params_reset(&params);
    params.elem_size       = elem_size;
    params.alignment       = alignment;
    params.elems_per_chunk = grow;
    params.max_elems       = max_elems;
    params.ops             = ops;
    params.name            = name;
    return ucs_mpool_init(&params, mp);
}

void uct_dcx_compat_rcache_params(ucs_rcache_params_t *params,
                                  const uct_dcx_rcache_config_t *config)
{
    ucs_rcache_set_params(params, config);
}

/* "auto": the lookup cost UCX's IB memory domains assume. */
double uct_dcx_compat_rcache_overhead(const uct_dcx_rcache_config_t *config)
{
    return ucs_time_units_to_sec(config->overhead, 180e-9);
}

ucs_status_t uct_dcx_compat_rcache_get(ucs_rcache_t *rcache, void *address,
                                       size_t length, void *arg,
                                       ucs_rcache_region_t **region_p)
{
    return ucs_rcache_get(rcache, address, length, ucs_get_page_size(),
                          PROT_READ | PROT_WRITE, arg, region_p);
}
