/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Views: one indirect mkey per user view (uct_dcx_mem_view_create),
 * programmed and invalidated synchronously on the engine's QP, and kept
 * for a later view with the next key variant when the device can change
 * mkey tags.
 */
#include "dcx_umr_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/time/time.h>

#include <errno.h>
#include <string.h>


/* A view waits for the UMR QP to leave an error first. */
static ucs_status_t uct_dcx_umr_wait_usable(uct_dcx_umr_t *umr)
{
    ucs_time_t deadline = ucs_get_time() +
                          ucs_time_from_sec(UCT_DCX_UMR_VIEW_TIMEOUT);

    while (umr->qp_error && !umr->qp_dead) {
        uct_dcx_umr_progress(umr);
        if (ucs_get_time() > deadline) {
            ucs_error("dcx: umr qp 0x%x did not drain after an error",
                      umr->qp->qp_num);
            return UCS_ERR_TIMED_OUT;
        }
    }
    return umr->qp_dead ? UCS_ERR_IO_ERROR : UCS_OK;
}

/* Post the batch in the QP's current session and wait for its one view
 * completion, handling the cache's completions on the way. */
static ucs_status_t uct_dcx_umr_view_wait(uct_dcx_umr_t *umr, const char *what)
{
    struct ibv_poll_cq_attr attr = {};
    struct ibv_cq_ex *cq         = umr->cq;
    ucs_time_t deadline          = ucs_get_time() +
                          ucs_time_from_sec(UCT_DCX_UMR_VIEW_TIMEOUT);
    enum ibv_wc_status status;
    uint32_t vendor_err;
    uint64_t wr_id;
    int ret;

    ret = ibv_wr_complete(umr->qpx);
    if (ret != 0) {
        ucs_error("dcx: umr: cannot post a view's %s: %s", what, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }
    --umr->sq_available;

    for (;;) {
        if (ibv_start_poll(cq, &attr) != 0) {
            if (ucs_get_time() > deadline) {
                ucs_error("dcx: umr: a view's %s did not complete", what);
                return UCS_ERR_TIMED_OUT;
            }
            continue;
        }
        wr_id      = cq->wr_id;
        status     = cq->status;
        vendor_err = (status == IBV_WC_SUCCESS) ? 0 :
                                                  ibv_wc_read_vendor_err(cq);
        ibv_end_poll(cq);
        uct_dcx_umr_complete(umr, wr_id, status, vendor_err);
        if (wr_id & UCT_DCX_UMR_WR_VIEW) {
            break;
        }
    }

    if (status != IBV_WC_SUCCESS) {
        ucs_error("dcx: umr: a view's %s failed: %s (vendor error 0x%x)", what,
                  umr->ops->wc_status_str(status), vendor_err);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

/* A view's mkey: a free one of enough entries, oldest first, with the next
 * key variant (so a holder of a destroyed view's key reaches nothing
 * through the new view), else a new one. Without UPDATE_TAG (a kernel that
 * does not report it) keys cannot change: view mkeys are then never
 * reused by dcx (the device may still hand out the same index again). */
static ucs_status_t
uct_dcx_umr_view_mkey_get(uct_dcx_umr_t *umr, struct ibv_pd *pd,
                          unsigned entries, uct_dcx_umr_view_t *view)
{
    struct mlx5dv_mkey_init_attr mkey_attr = {};
    uct_dcx_umr_view_mkey_t *vm;

    ucs_list_for_each(vm, &umr->view_free, list) {
        if (vm->max_entries >= entries) {
            ucs_list_del(&vm->list);
            view->mkey        = vm->mkey;
            view->max_entries = vm->max_entries;
            ucs_free(vm);
            view->mkey->lkey = uct_dcx_umr_key_next_variant(view->mkey->lkey);
            view->mkey->rkey = view->mkey->lkey;
            return UCS_OK;
        }
    }

    mkey_attr.pd           = pd;
    mkey_attr.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
    mkey_attr.max_entries  = entries;
    if (umr->view_tags) {
        mkey_attr.create_flags |= MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG;
        view->mkey = umr->ops->mlx5dv_create_mkey(&mkey_attr);
        if ((view->mkey == NULL) && (errno == EOPNOTSUPP)) {
            ucs_diag("dcx: the device cannot change mkey tags: "
                     "a destroyed view's key may come back with a later view");
            umr->view_tags         = 0;
            mkey_attr.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
            mkey_attr.max_entries  = entries;
        }
    }
    if (!umr->view_tags) {
        view->mkey = umr->ops->mlx5dv_create_mkey(&mkey_attr);
    }
    if (view->mkey == NULL) {
        ucs_error("dcx: cannot create a view's mkey: %m");
        return UCS_ERR_NO_RESOURCE;
    }
    view->max_entries = mkey_attr.max_entries;
    return UCS_OK;
}

/* A view's mkey after its invalidation: kept for a later view (with the
 * next key variant) when keys can change, destroyed otherwise. */
static void uct_dcx_umr_view_mkey_put(uct_dcx_umr_t *umr,
                                      uct_dcx_umr_view_t *view, int reuse)
{
    uct_dcx_umr_view_mkey_t *vm = NULL;
    int ret;

    if (reuse && umr->view_tags) {
        vm = ucs_malloc(sizeof(*vm), "dcx view mkey");
    }
    if (vm != NULL) {
        vm->mkey        = view->mkey;
        vm->max_entries = view->max_entries;
        ucs_list_add_tail(&umr->view_free, &vm->list);
        return;
    }

    ret = umr->ops->mlx5dv_destroy_mkey(view->mkey);
    if (ret != 0) {
        ucs_warn("dcx: cannot destroy a view's mkey: %s", strerror(ret));
    }
}

ucs_status_t uct_dcx_umr_view_create(uct_dcx_umr_t *umr, struct ibv_pd *pd,
                                     const uct_dcx_umr_layout_t *layout,
                                     const struct ibv_sge *pieces, unsigned n,
                                     uint32_t access, uct_dcx_umr_view_t *view)
{
    struct mlx5dv_mr_interleaved entry;
    ucs_status_t status;

    if ((pieces != NULL) && ((n == 0) || (n > umr->list_max))) {
        ucs_error("dcx: a view of %u pieces: one UMR maps 1 to %u", n,
                  umr->list_max);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((pieces == NULL) && !uct_dcx_umr_layout_fits(umr, layout)) {
        ucs_error("dcx: a view of %u x %u bytes @ %u does not fit one UMR "
                  "(block and stride below 64 KiB)",
                  layout->count, layout->length, layout->stride);
        return UCS_ERR_INVALID_PARAM;
    }
    status = uct_dcx_umr_wait_usable(umr);
    if (status != UCS_OK) {
        return status;
    }
    if (umr->sq_available == 0) {
        return UCS_ERR_NO_RESOURCE;
    }

    status = uct_dcx_umr_view_mkey_get(umr, pd, (pieces != NULL) ? n : 2, view);
    if (status != UCS_OK) {
        return status;
    }

    entry.addr        = layout->addr;
    entry.bytes_count = layout->length;
    entry.bytes_skip  = layout->stride - layout->length;
    entry.lkey        = layout->lkey;
    ibv_wr_start(umr->qpx);
    umr->qpx->wr_id    = UCT_DCX_UMR_WR_VIEW;
    umr->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    if (pieces != NULL) {
        mlx5dv_wr_mr_list(umr->mqpx, view->mkey, access, n,
                          (struct ibv_sge *)pieces);
    } else {
        mlx5dv_wr_mr_interleaved(umr->mqpx, view->mkey, access, layout->count,
                                 1, &entry);
    }
    status = uct_dcx_umr_view_wait(umr, "UMR");
    if (status != UCS_OK) {
        uct_dcx_umr_view_mkey_put(umr, view, 0);
        return status;
    }

    view->layout = *layout;
    return UCS_OK;
}

ucs_status_t
uct_dcx_umr_view_destroy(uct_dcx_umr_t *umr, uct_dcx_umr_view_t *view)
{
    ucs_status_t status;

    /* Invalidate first: a peer still using the view then gets a remote
     * access error instead of reaching the memory. (Without a usable QP,
     * destroying the mkey below still ends its access.) An invalidated
     * mkey is kept for a later view, which gives it a new key variant. */
    status = uct_dcx_umr_wait_usable(umr);
    while ((status == UCS_OK) && (umr->sq_available == 0)) {
        uct_dcx_umr_progress(umr);
    }
    if (status == UCS_OK) {
        ibv_wr_start(umr->qpx);
        umr->qpx->wr_id    = UCT_DCX_UMR_WR_VIEW;
        umr->qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_local_inv(umr->qpx, view->mkey->lkey);
        status = uct_dcx_umr_view_wait(umr, "invalidation");
    }

    uct_dcx_umr_view_mkey_put(umr, view, status == UCS_OK);
    return status;
}
