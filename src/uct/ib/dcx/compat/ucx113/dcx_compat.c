/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCX 1.13 layer: md ops with uct_md_attr_t and a flags argument to
 * mem_reg, a component without rkey_compare, four iface internal ops, and
 * UCS helpers with positional arguments.
 */
#include "../../dcx_md.h"

#include <ucs/sys/sys.h>

#include <string.h>
#include <sys/mman.h>


/* --- memory domain -------------------------------------------------------- */

static ucs_status_t uct_dcx_compat_md_query(uct_md_h md, uct_md_attr_t *attr)
{
    uct_dcx_md_caps_t caps;

    uct_dcx_md_caps_get(md, &caps);
    memset(attr, 0, sizeof(*attr));
    attr->cap.flags            = caps.flags;
    attr->cap.reg_mem_types    = caps.reg_mem_types;
    attr->cap.access_mem_types = caps.access_mem_types;
    attr->cap.max_reg          = caps.max_reg;
    attr->rkey_packed_size     = caps.rkey_packed_size;
    attr->reg_cost             = caps.reg_cost;
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t
uct_dcx_compat_mkey_pack(uct_md_h md, uct_mem_h memh,
                         const uct_md_mkey_pack_params_t *params,
                         void *rkey_buffer)
{
    return uct_dcx_md_mkey_pack_memh(md, memh, rkey_buffer);
}

uct_md_ops_t uct_dcx_md_ops = {
    .close                  = uct_dcx_md_close,
    .query                  = uct_dcx_compat_md_query,
    .mem_alloc              = UCT_DCX_STUB(uct_md_mem_alloc_func_t,
                                           ucs_empty_function_return_unsupported),
    .mem_free               = UCT_DCX_STUB(uct_md_mem_free_func_t,
                                           ucs_empty_function_return_unsupported),
    .mem_advise             = UCT_DCX_STUB(uct_md_mem_advise_func_t,
                                           ucs_empty_function_return_unsupported),
    .mem_reg                = uct_dcx_md_mem_reg_flags,
    .mem_dereg              = uct_dcx_md_mem_dereg,
    .mem_query              = UCT_DCX_STUB(uct_md_mem_query_func_t,
                                           ucs_empty_function_return_unsupported),
    .mkey_pack              = uct_dcx_compat_mkey_pack,
    .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
    .detect_memory_type     = ucs_empty_function_return_unsupported
};


/* --- component (uct_dcx_component is in dcx_md.c) ------------------------ */

ucs_status_t uct_dcx_compat_rkey_unpack(uct_component_t *component,
                                        const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p)
{
    return uct_dcx_rkey_unpack_buffer(rkey_buffer, rkey_p, handle_p);
}


/* --- interface ------------------------------------------------------------ */

int uct_dcx_compat_iface_is_reachable(const uct_iface_h iface,
                                      const uct_device_addr_t *dev_addr,
                                      const uct_iface_addr_t *iface_addr)
{
    return uct_dcx_iface_addr_is_reachable(iface, dev_addr, iface_addr, NULL,
                                           0);
}

/* 1.13's UCP reads the figures from iface_query (latency, bandwidth,
 * overhead), which the transport fills from the same source. */
uct_iface_internal_ops_t uct_dcx_iface_internal_ops = {
    .iface_estimate_perf = uct_base_iface_estimate_perf,
    .iface_vfs_refresh   = UCT_DCX_STUB(uct_iface_vfs_refresh_func_t,
                                        ucs_empty_function),
    .ep_query            = UCT_DCX_STUB(uct_ep_query_func_t,
                                        ucs_empty_function_return_unsupported),
    .ep_invalidate       = UCT_DCX_STUB(uct_ep_invalidate_func_t,
                                        ucs_empty_function_return_unsupported)
};


/* --- UCS helpers ---------------------------------------------------------- */

ucs_status_t
uct_dcx_compat_config_fill(void *opts, ucs_config_global_list_entry_t *entry)
{
    return ucs_config_parser_fill_opts(opts, entry->table,
                                       UCS_DEFAULT_ENV_PREFIX, entry->prefix,
                                       0);
}

ucs_status_t uct_dcx_compat_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                       size_t alignment, unsigned grow,
                                       unsigned max_elems, ucs_mpool_ops_t *ops,
                                       const char *name)
{
    return ucs_mpool_init(mp, 0, elem_size, 0, alignment, grow, max_elems, ops,
                          name);
}

void uct_dcx_compat_rcache_params(ucs_rcache_params_t *params,
                                  const uct_dcx_rcache_config_t *config)
{
    uct_md_set_rcache_params(params, config);
    params->max_alignment = ucs_get_page_size();
}

double uct_dcx_compat_rcache_overhead(const uct_dcx_rcache_config_t *config)
{
    return uct_md_rcache_overhead(config);
}

ucs_status_t uct_dcx_compat_rcache_get(ucs_rcache_t *rcache, void *address,
                                       size_t length, void *arg,
                                       ucs_rcache_region_t **region_p)
{
    return ucs_rcache_get(rcache, address, length, PROT_READ | PROT_WRITE, arg,
                          region_p);
}
