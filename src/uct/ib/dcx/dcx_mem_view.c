/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Strided views and their public API (include/uct/ib/dcx/dcx.h): memory
 * described as a pattern of blocks, mapped by an indirect mkey that the
 * UMR engine (dcx_umr.c) programs; the interface creates the engine at
 * its first strided operation.
 */
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#include <string.h>


/* --- strided zero-copy (UMR) ------------------------------------------------ */

static void uct_dcx_iface_umr_forget(void *arg, uint32_t lkey)
{
    uct_dcx_iface_t *iface = arg;

    uct_dcx_umr_forget_lkey(iface->umr.engine, lkey);
}

ucs_status_t
uct_dcx_iface_umr_engine(uct_dcx_iface_t *iface, uct_dcx_umr_t **umr_p)
{
    struct ibv_ah_attr av;
    uct_dcx_umr_t *umr;
    ucs_status_t status;

    if (ucs_likely(iface->umr.engine != NULL)) {
        *umr_p = iface->umr.engine;
        return UCS_OK;
    }
    if (iface->umr.unavailable) {
        return UCS_ERR_UNSUPPORTED;
    }

    umr = ucs_malloc(sizeof(*umr), "dcx umr");
    if (umr == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    uct_dcx_iface_fill_av(iface, iface->port_attr.lid,
                          iface->is_global ? &iface->gid : NULL, &av);
    status = uct_dcx_umr_init(umr, iface->ops, iface->md->ctx, iface->md->pd,
                              iface->port, iface->pkey_index, &iface->port_attr,
                              av.is_global ? &av.grh : NULL,
                              iface->umr.num_mkeys, iface->umr.max_inline);
    if (status != UCS_OK) {
        ucs_free(umr);
        ucs_debug("dcx: %s: UMR unavailable (%s): "
                  "strided operations are packed",
                  iface->md->device->name, ucs_status_string(status));
        iface->umr.unavailable = 1;
        return UCS_ERR_UNSUPPORTED;
    }

    iface->umr.listener.cb  = uct_dcx_iface_umr_forget;
    iface->umr.listener.arg = iface;
    ucs_list_add_tail(&iface->md->mr_listeners, &iface->umr.listener.list);
    iface->umr.engine = umr;
    *umr_p            = umr;
    return UCS_OK;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t
uct_dcx_iface_query_umr(uct_iface_h tl_iface, uct_dcx_umr_counters_t *counters)
{
    uct_dcx_iface_t *iface;

    if (!uct_dcx_iface_is_dcx(tl_iface) || (counters == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    memset(counters, 0, sizeof(*counters));
    counters->zcopy_ops = iface->umr.zcopy_ops;
    counters->copy_ops  = iface->umr.copy_ops;
    if (iface->umr.engine != NULL) {
        counters->umrs          = iface->umr.engine->stats.umrs;
        counters->hits          = iface->umr.engine->stats.hits;
        counters->evictions     = iface->umr.engine->stats.evictions;
        counters->invalidations = iface->umr.engine->stats.invalidations;
        counters->max_pieces    = iface->umr.engine->list_max;
        counters->recoveries    = iface->umr.engine->stats.recoveries;
    }
    return UCS_OK;
}

/* A view: the memory handle mkey_pack reads, describing the view's mkey. */
typedef struct uct_dcx_mem_view {
    uct_dcx_mem_t memh;
    struct ibv_mr mr;
    uct_dcx_umr_view_t umr;
} uct_dcx_mem_view_t;

/* The rights a view can lend over a registration: remote put and get, as
 * far as the registration has them (never more: an mkey must not open
 * memory registered for local access only). */
#define UCT_DCX_VIEW_ACCESS \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static uint32_t uct_dcx_mem_view_access(const uct_dcx_mem_t *mem)
{
    return mem->access & UCT_DCX_VIEW_ACCESS;
}

/* The memory handle of a view: what mkey_pack reads, zero-based. */
static void uct_dcx_mem_view_init(uct_dcx_iface_t *iface,
                                  uct_dcx_mem_view_t *view, size_t length,
                                  uint32_t access)
{
    view->mr.context  = iface->md->ctx;
    view->mr.pd       = iface->md->pd;
    view->mr.addr     = NULL;
    view->mr.length   = length;
    view->mr.lkey     = view->umr.mkey->lkey;
    view->mr.rkey     = view->umr.mkey->rkey;
    view->memh.mr     = &view->mr;
    view->memh.flags  = UCT_DCX_MEM_FLAG_VIEW;
    view->memh.access = access;
}

/* A view of @a length bytes: its mkey programmed over @a layout, or over
 * @a pieces when @a num_pieces is not 0, and its memory handle. */
static ucs_status_t
uct_dcx_mem_view_new(uct_dcx_iface_t *iface, uct_dcx_umr_t *umr,
                     const uct_dcx_umr_layout_t *layout,
                     const struct ibv_sge *pieces, unsigned num_pieces,
                     size_t length, uint32_t access, uct_mem_h *view_p)
{
    uct_dcx_mem_view_t *view;
    ucs_status_t status;

    view = ucs_calloc(1, sizeof(*view), "dcx view");
    if (view == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_dcx_umr_view_create(umr, iface->md->pd, layout, pieces,
                                     num_pieces, access, &view->umr);
    ++iface->umr.gen; /* its wait may have taken completions for others */
    if (status != UCS_OK) {
        ucs_free(view);
        return status;
    }

    uct_dcx_mem_view_init(iface, view, length, access);
    *view_p = &view->memh;
    return UCS_OK;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_mem_view_create(uct_iface_h tl_iface, uct_mem_h memh,
                                     void *address, size_t length,
                                     size_t stride, size_t count,
                                     uct_mem_h *view_p)
{
    uct_dcx_mem_t *mem = memh;
    uct_dcx_umr_layout_t layout;
    uct_dcx_iface_t *iface;
    uct_dcx_umr_t *umr;
    ucs_status_t status;
    uintptr_t first, end;
    uint32_t access;

    if (!uct_dcx_iface_is_dcx(tl_iface) || (mem == NULL) || (view_p == NULL) ||
        (mem->flags & UCT_DCX_MEM_FLAG_VIEW)) {
        ucs_error("dcx: a view needs a dcx interface and a registration");
        return UCS_ERR_INVALID_PARAM;
    }
    iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    access = uct_dcx_mem_view_access(mem);
    if (!(access & UCT_DCX_MR_REMOTE_ACCESS)) {
        ucs_error("dcx: a view needs a registration "
                  "with remote put or get rights "
                  "(UCT_MD_MEM_ACCESS_REMOTE_PUT/GET)");
        return UCS_ERR_INVALID_PARAM;
    }

    first = (uintptr_t)address;
    end   = first + (count - 1) * stride + length;
    if ((length == 0) || (count == 0) || (stride < length) ||
        (first < (uintptr_t)mem->mr->addr) ||
        (end > (uintptr_t)mem->mr->addr + mem->mr->length)) {
        ucs_error(
                "dcx: view %zu x %zu @ %zu at %p "
                "is empty, overlapping or outside its registration [%p, +%zu)",
                count, length, stride, address, mem->mr->addr, mem->mr->length);
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_dcx_iface_umr_engine(iface, &umr);
    if (status != UCS_OK) {
        ucs_error("dcx: %s: strided views need UMR", iface->md->device->name);
        return status;
    }

    layout.addr   = first;
    layout.lkey   = mem->mr->lkey;
    layout.length = length;
    layout.stride = stride;
    layout.count  = count;
    return uct_dcx_mem_view_new(iface, umr, &layout, NULL, 0, length * count,
                                access, view_p);
}

/* The pieces of view entry @a entry: one per block, each inside the
 * entry's registration, appended at @a pieces[*num_pieces_p]. */
static ucs_status_t
uct_dcx_mem_view_add_blocks(const uct_dcx_umr_t *umr, const uct_iov_t *iov,
                            size_t entry, struct ibv_sge *pieces,
                            unsigned *num_pieces_p)
{
    const uct_dcx_mem_t *mem = iov->memh;
    unsigned n               = *num_pieces_p;
    uintptr_t end;
    size_t j;

    if ((mem == NULL) || (mem->flags & UCT_DCX_MEM_FLAG_VIEW) ||
        ((iov->count > 1) && (iov->stride < iov->length))) {
        ucs_error("dcx: view entry %zu: no registration, or overlapping blocks",
                  entry);
        return UCS_ERR_INVALID_PARAM;
    }

    for (j = 0; j < iov->count; ++j) {
        if (n == umr->list_max) {
            ucs_error("dcx: a view maps at most %u pieces", umr->list_max);
            return UCS_ERR_INVALID_PARAM;
        }
        pieces[n].addr = (uintptr_t)iov->buffer +
                         j * ((iov->count > 1) ? iov->stride : 0);
        pieces[n].length = iov->length;
        pieces[n].lkey   = mem->mr->lkey;
        end              = pieces[n].addr + pieces[n].length;
        if ((pieces[n].addr < (uintptr_t)mem->mr->addr) ||
            (end > (uintptr_t)mem->mr->addr + mem->mr->length)) {
            ucs_error(
                    "dcx: view entry %zu block %zu is outside its registration",
                    entry, j);
            return UCS_ERR_INVALID_PARAM;
        }
        ++n;
    }

    *num_pieces_p = n;
    return UCS_OK;
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_mem_view_create_iov(uct_iface_h tl_iface,
                                         const uct_iov_t *iov, size_t iovcnt,
                                         uct_mem_h *view_p)
{
    struct ibv_sge pieces[UCT_DCX_UMR_LIST_MAX];
    uct_dcx_umr_layout_t layout = {};
    uint32_t access             = UCT_DCX_VIEW_ACCESS;
    size_t i, total = 0;
    uct_dcx_iface_t *iface;
    uct_dcx_umr_t *umr;
    ucs_status_t status;
    unsigned n = 0;

    if (!uct_dcx_iface_is_dcx(tl_iface) || (view_p == NULL)) {
        ucs_error("dcx: a view needs a dcx interface");
        return UCS_ERR_INVALID_PARAM;
    }
    iface = ucs_derived_of(tl_iface, uct_dcx_iface_t);

    status = uct_dcx_iface_umr_engine(iface, &umr);
    if (status != UCS_OK) {
        ucs_error("dcx: %s: views need UMR", iface->md->device->name);
        return status;
    }

    for (i = 0; i < iovcnt; ++i) {
        if (uct_iov_get_length(&iov[i]) == 0) {
            continue;
        }
        status = uct_dcx_mem_view_add_blocks(umr, &iov[i], i, pieces, &n);
        if (status != UCS_OK) {
            return status;
        }
        access &= uct_dcx_mem_view_access(iov[i].memh);
        total += uct_iov_get_length(&iov[i]);
    }

    if (!(access & UCT_DCX_MR_REMOTE_ACCESS)) {
        ucs_error("dcx: a view needs registrations that all have remote put "
                  "or all have remote get rights");
        return UCS_ERR_INVALID_PARAM;
    }

    return uct_dcx_mem_view_new(iface, umr, &layout, pieces, n, total, access,
                                view_p);
}

/* Public (include/uct/ib/dcx/dcx.h) through the plugin: dcx_loader.c. */
ucs_status_t uct_dcx_mem_view_destroy(uct_iface_h tl_iface, uct_mem_h memh)
{
    uct_dcx_mem_t *mem = memh;
    uct_dcx_mem_view_t *view;
    uct_dcx_iface_t *iface;
    ucs_status_t status;

    if (!uct_dcx_iface_is_dcx(tl_iface) || (mem == NULL) ||
        !(mem->flags & UCT_DCX_MEM_FLAG_VIEW)) {
        ucs_error("dcx: %p is not a strided view of a dcx interface", memh);
        return UCS_ERR_INVALID_PARAM;
    }

    iface  = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    view   = ucs_container_of(mem, uct_dcx_mem_view_t, memh);
    status = uct_dcx_umr_view_destroy(iface->umr.engine, &view->umr);
    ++iface->umr.gen; /* its wait may have taken completions for others */
    ucs_free(view);
    return status;
}

/* UMR completions (also those a view's wait took) and the UMR QP's
 * recovery make layouts ready: endpoints waiting for one retry. */
unsigned uct_dcx_iface_umr_progress(uct_dcx_iface_t *iface)
{
    unsigned count = uct_dcx_umr_progress(iface->umr.engine);

    if (count > 0) {
        ++iface->umr.gen;
    }
    if (iface->umr.gen != iface->umr.dispatched_gen) {
        iface->umr.dispatched_gen = iface->umr.gen;
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1, uct_dcx_ep_pending_dispatch,
                             NULL);
    }
    return count;
}

void uct_dcx_iface_umr_cleanup(uct_dcx_iface_t *iface)
{
    if (iface->umr.engine == NULL) {
        return;
    }
    ucs_list_del(&iface->umr.listener.list);
    uct_dcx_umr_cleanup(iface->umr.engine);
    ucs_free(iface->umr.engine);
    iface->umr.engine = NULL;
}

/* Strided zero-copy: the engine comes with the first operation that needs
 * it; iov lists longer than the gather list go through a list UMR, whose
 * capacity is probed now. */
void uct_dcx_iface_umr_init(uct_dcx_iface_t *iface,
                            const uct_dcx_iface_config_t *config)
{
    uct_dcx_md_t *md = iface->md;
    unsigned list_max;

    iface->umr.enable      = config->umr;
    iface->umr.num_mkeys   = config->umr_mkeys;
    iface->umr.max_inline  = config->umr_max_inline;
    iface->umr.pack_thresh = ucs_min(config->umr_pack_thresh,
                                     iface->tx.seg_size);
    iface->umr.unavailable = (config->umr == UCS_NO) || !md->devx ||
                             (config->umr_mkeys == 0);
    iface->umr.max_iov = iface->tx.max_sge;
    if (!iface->umr.unavailable &&
        (uct_dcx_umr_probe(iface->ops, md->ctx, md->pd, config->umr_max_inline,
                           &list_max) == UCS_OK)) {
        iface->umr.max_iov = ucs_max(iface->tx.max_sge, list_max);
    }
}
