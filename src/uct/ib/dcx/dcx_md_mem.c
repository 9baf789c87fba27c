/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Memory registration of a dcx memory domain: the rights a registration
 * gets, registering directly or through the registration cache, and the
 * remote keys that reach a registration.
 */
#include "dcx_md_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucm/api/ucm.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>


/* Direct registration cost of mlx5 (pinning and translation tables). */
static const ucs_linear_func_t uct_dcx_md_reg_cost = { .c = 16.0e-6,
                                                       .m = 0.06e-9 };

/* Whether registrations ask for relaxed ordering: 'auto' where UCX's IB
 * memory domains do, on the CPUs UCS prefers it for. */
static int uct_dcx_md_relaxed_order(ucs_ternary_auto_value_t config)
{
    if (config == UCS_AUTO) {
        return uct_dcx_compat_cpu_prefers_relaxed_order();
    }
    return config != UCS_NO;
}

/* The verbs rights for UCT registration flags: the remote rights asked for
 * (none without a UCT_MD_MEM_ACCESS_REMOTE_* flag), or all of them when the
 * domain grants all. Local write always, as UCX's IB domains: UCP writes
 * into memory it registered for reading, and IB needs it with remote write
 * or atomic access anyway (ibv_reg_mr(3)). */
static unsigned uct_dcx_md_access(const uct_dcx_md_t *md, unsigned flags)
{
    unsigned access = IBV_ACCESS_LOCAL_WRITE;

    if (md->reg_access_all) {
        return access | UCT_DCX_MR_REMOTE_ACCESS;
    }

    if (flags & UCT_MD_MEM_ACCESS_REMOTE_PUT) {
        access |= IBV_ACCESS_REMOTE_WRITE;
    }
    if (flags & UCT_MD_MEM_ACCESS_REMOTE_GET) {
        access |= IBV_ACCESS_REMOTE_READ;
    }
    if (flags & UCT_MD_MEM_ACCESS_REMOTE_ATOMIC) {
        access |= IBV_ACCESS_REMOTE_ATOMIC;
    }
    return access;
}

static ucs_status_t uct_dcx_md_reg_mr(uct_dcx_md_t *md, void *address,
                                      size_t length, unsigned flags,
                                      unsigned access, uct_dcx_mem_t *memh)
{
    struct rlimit limit;
    int err;

    memh->flags  = 0;
    memh->access = access;
    memh->mr     = md->ops->reg_mr_iova2(md->pd, address, length,
                                         (uintptr_t)address,
                                         access | md->mr_access_extra);
    if (ucs_likely(memh->mr != NULL)) {
        return UCS_OK;
    }

    err = errno;
    if (((err == ENOMEM) || (err == EAGAIN) || (err == EPERM)) &&
        (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) &&
        (limit.rlim_cur != RLIM_INFINITY)) {
        ucs_log(uct_md_reg_log_lvl(flags),
                "dcx: %s: failed to register %p length %zu: %s; "
                "the locked memory limit is %llu KiB: "
                "raise it (ulimit -l unlimited)",
                md->device->name, address, length, strerror(err),
                (unsigned long long)limit.rlim_cur / UCS_KBYTE);
    } else {
        ucs_log(uct_md_reg_log_lvl(flags),
                "dcx: %s: failed to register %p length %zu: %s",
                md->device->name, address, length, strerror(err));
    }
    return UCS_ERR_IO_ERROR;
}

static void uct_dcx_md_dereg_mr(uct_dcx_md_t *md, uct_dcx_mem_t *memh)
{
    uct_dcx_md_mr_listener_t *listener;
    int ret;

    ucs_list_for_each(listener, &md->mr_listeners, list) {
        listener->cb(listener->arg, memh->mr->lkey);
    }

    ret = md->ops->dereg_mr(memh->mr);

    if (ret != 0) {
        ucs_warn("dcx: %s: dereg_mr(%p) failed: %s", md->device->name, memh->mr,
                 strerror(ret));
    }
}

static ucs_status_t
uct_dcx_rcache_mem_reg_cb(void *context, ucs_rcache_t *rcache, void *arg,
                          ucs_rcache_region_t *rregion, uint16_t rcache_flags)
{
    uct_dcx_rcache_region_t *region     = ucs_derived_of(rregion,
                                                         uct_dcx_rcache_region_t);
    const uct_dcx_rcache_reg_arg_t *reg = arg;
    unsigned flags                      = reg->flags;

    if (rcache_flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS) {
        flags |= UCT_MD_MEM_FLAG_HIDE_ERRORS;
    }

    return uct_dcx_md_reg_mr(context, (void *)region->super.super.start,
                             region->super.super.end -
                                     region->super.super.start,
                             flags, reg->access, &region->memh);
}

static void uct_dcx_rcache_mem_dereg_cb(void *context, ucs_rcache_t *rcache,
                                        ucs_rcache_region_t *rregion)
{
    uct_dcx_md_dereg_mr(
            context, &ucs_derived_of(rregion, uct_dcx_rcache_region_t)->memh);
}

/* A new region absorbs a cached one: it keeps the absorbed one's rights. */
static UCS_F_MAYBE_UNUSED void
uct_dcx_rcache_merge_cb(void *context, ucs_rcache_t *rcache, void *arg,
                        ucs_rcache_region_t *rregion)
{
    uct_dcx_rcache_reg_arg_t *reg   = arg;
    uct_dcx_rcache_region_t *region = ucs_derived_of(rregion,
                                                     uct_dcx_rcache_region_t);

    reg->access |= region->memh.access;
}

static void uct_dcx_rcache_dump_region_cb(void *context, ucs_rcache_t *rcache,
                                          ucs_rcache_region_t *rregion,
                                          char *buf, size_t max)
{
    uct_dcx_rcache_region_t *region = ucs_derived_of(rregion,
                                                     uct_dcx_rcache_region_t);

    snprintf(buf, max, "lkey 0x%x rkey 0x%x access 0x%x", region->memh.mr->lkey,
             region->memh.mr->rkey, region->memh.access);
}

static ucs_rcache_ops_t uct_dcx_rcache_ops = UCT_DCX_RCACHE_OPS(
        uct_dcx_rcache_mem_reg_cb, uct_dcx_rcache_mem_dereg_cb,
        uct_dcx_rcache_merge_cb, uct_dcx_rcache_dump_region_cb);

static ucs_status_t
uct_dcx_md_rcache_init(uct_dcx_md_t *md, const uct_dcx_md_config_t *config)
{
    ucs_rcache_params_t params;
    ucs_status_t status;

    if (config->rcache == UCS_NO) {
        md->reg_cost = uct_dcx_md_reg_cost;
        return UCS_OK;
    }

    uct_dcx_compat_rcache_params(&params, &config->rcache_config);
    params.region_struct_size = sizeof(uct_dcx_rcache_region_t);
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.context            = md;
    params.ops                = &uct_dcx_rcache_ops;
    params.flags              = UCS_RCACHE_FLAG_PURGE_ON_FORK;

    status = ucs_rcache_create(&params, md->device->name, NULL, &md->rcache);
    if (status == UCS_OK) {
        md->reg_cost = ucs_linear_func_make(uct_dcx_compat_rcache_overhead(
                                                    &config->rcache_config),
                                            0);
        return UCS_OK;
    }

    if (config->rcache == UCS_YES) {
        ucs_error("dcx: %s: cannot create a registration cache: %s",
                  md->device->name, ucs_status_string(status));
        return status;
    }

    ucs_debug("dcx: %s: no registration cache (%s), registering directly",
              md->device->name, ucs_status_string(status));
    md->reg_cost = uct_dcx_md_reg_cost;
    return UCS_OK;
}

ucs_status_t
uct_dcx_md_mem_init(uct_dcx_md_t *md, const uct_dcx_md_config_t *config)
{
    md->reg_access_all = (config->reg_access == UCT_DCX_REG_ACCESS_ALL);
    /* An optional flag (IBV_ACCESS_OPTIONAL_RANGE): ignored where the
     * device or kernel lacks relaxed ordering (ibv_reg_mr(3)). */
    md->mr_access_extra = uct_dcx_md_relaxed_order(config->relaxed_order) ?
                                  IBV_ACCESS_RELAXED_ORDERING :
                                  0;
    return uct_dcx_md_rcache_init(md, config);
}

void uct_dcx_md_mem_cleanup(uct_dcx_md_t *md)
{
    if (md->rcache != NULL) {
        ucs_rcache_destroy(md->rcache);
    }
}

static void uct_dcx_md_rcache_invalidated(void *arg)
{
}

/* A cached registration covering the range, with at least the rights asked
 * for. One with fewer rights leaves the cache (its holders keep it) and the
 * range is registered again with the rights of both, so a registration never
 * has fewer rights than asked for; it may have more (those of another
 * registration of overlapping memory that is still cached). */
static ucs_status_t uct_dcx_md_rcache_reg(uct_dcx_md_t *md, void *address,
                                          size_t length, unsigned flags,
                                          uct_mem_h *memh_p)
{
    uct_dcx_rcache_reg_arg_t arg = { flags, uct_dcx_md_access(md, flags) };
    ucs_rcache_region_t *region;
    uct_dcx_mem_t *memh;
    ucs_status_t status;

    for (;;) {
        status = uct_dcx_compat_rcache_get(md->rcache, address, length, &arg,
                                           &region);
        if (status != UCS_OK) {
            return status;
        }

        memh = &ucs_derived_of(region, uct_dcx_rcache_region_t)->memh;
        if (ucs_test_all_flags(memh->access, arg.access)) {
            *memh_p = memh;
            return UCS_OK;
        }

        ucs_debug("dcx: %s: cached registration 0x%lx..0x%lx has access 0x%x, "
                  "0x%x asked: registering again",
                  md->device->name, region->super.start, region->super.end,
                  memh->access, arg.access);
        arg.access |= memh->access;
        ucs_rcache_region_invalidate(md->rcache, region,
                                     uct_dcx_md_rcache_invalidated, NULL);
        ucs_rcache_region_put(md->rcache, region);
    }
}

ucs_status_t uct_dcx_md_mem_reg_flags(uct_md_h uct_md, void *address,
                                      size_t length, unsigned flags,
                                      uct_mem_h *memh_p)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);
    uct_dcx_mem_t *memh;
    ucs_status_t status;

    if (md->device == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    if (md->rcache != NULL) {
        return uct_dcx_md_rcache_reg(md, address, length, flags, memh_p);
    }

    memh = ucs_malloc(sizeof(*memh), "uct_dcx_mem_t");
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_dcx_md_reg_mr(md, address, length, flags,
                               uct_dcx_md_access(md, flags), memh);
    if (status != UCS_OK) {
        ucs_free(memh);
        return status;
    }

    *memh_p = memh;
    return UCS_OK;
}

ucs_status_t
uct_dcx_md_mem_dereg(uct_md_h uct_md, const uct_md_mem_dereg_params_t *params)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);
    uct_dcx_mem_t *memh;

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);

    memh = params->memh;
    if (memh->flags & UCT_DCX_MEM_FLAG_VIEW) {
        ucs_error("dcx: memory handle %p is a strided view: "
                  "destroy it with uct_dcx_mem_view_destroy()",
                  memh);
        return UCS_ERR_INVALID_PARAM;
    }

    if (md->rcache != NULL) {
        ucs_rcache_region_put(
                md->rcache,
                &ucs_container_of(memh, uct_dcx_rcache_region_t, memh)->super);
        return UCS_OK;
    }

    uct_dcx_md_dereg_mr(md, memh);
    ucs_free(memh);
    return UCS_OK;
}

ucs_status_t
uct_dcx_md_mkey_pack_memh(uct_md_h uct_md, uct_mem_h memh, void *rkey_buffer)
{
    uct_dcx_packed_rkey_t *packed = rkey_buffer;

    packed->rkey     = ((uct_dcx_mem_t *)memh)->mr->rkey;
    packed->magic    = UCT_DCX_RKEY_MAGIC;
    packed->version  = UCT_DCX_RKEY_VERSION;
    packed->reserved = 0;
    return UCS_OK;
}

ucs_status_t uct_dcx_rkey_unpack_buffer(const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p)
{
    const uct_dcx_packed_rkey_t *packed = rkey_buffer;

    if ((packed->magic != UCT_DCX_RKEY_MAGIC) ||
        (packed->version != UCT_DCX_RKEY_VERSION) || (packed->reserved != 0)) {
        ucs_error("dcx: malformed remote key (magic 0x%x version %u): "
                  "not packed by a dcx memory domain of this version",
                  packed->magic, packed->version);
        return UCS_ERR_INVALID_PARAM;
    }

    *rkey_p   = UCT_DCX_RKEY_TAG | packed->rkey;
    *handle_p = NULL;
    return UCS_OK;
}
