/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UMR engine: its RC loopback QP, the pool of indirect mkeys and the
 * cache of programmed layouts, their completions and recovery. Views (one
 * mkey per user view, programmed synchronously) are in dcx_umr_view.c.
 */
#include "dcx_umr_int.h"

#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/time/time.h>

#include <string.h>


/* Send queue of the UMR QP: an invalidation and a UMR per programming. */
#define UCT_DCX_UMR_SQ_LEN 128


/* Cached layouts are only ever local keys (gather and scatter lists of the
 * operations that use them): local rights only, so a peer that learns or
 * guesses their key (index << 8, reused with the pool slot) reaches nothing. */
#define UCT_DCX_UMR_LAYOUT_ACCESS IBV_ACCESS_LOCAL_WRITE

/* The next variant of a key (its low 8 bits, the mkey tag), as
 * ibv_inc_rkey(3) does for memory windows. */
uint32_t uct_dcx_umr_key_next_variant(uint32_t key)
{
    return (key & ~0xffu) | ((key + 1) & 0xffu);
}


static ucs_status_t uct_dcx_umr_qp_connect(uct_dcx_umr_t *umr)
{
    const struct ibv_port_attr *pattr = &umr->port_attr;
    uint8_t port                      = umr->port;
    struct ibv_qp_attr attr;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = umr->pkey_index;
    attr.port_num        = port;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    ret                  = umr->ops->modify_qp(umr->qp, &attr,
                                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                       IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        goto err;
    }

    /* Connected to itself. */
    memset(&attr, 0, sizeof(attr));
    attr.qp_state           = IBV_QPS_RTR;
    attr.path_mtu           = pattr->active_mtu;
    attr.dest_qp_num        = umr->qp->qp_num;
    attr.rq_psn             = 0;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer      = 1;
    attr.ah_attr.dlid       = pattr->lid;
    attr.ah_attr.port_num   = port;
    if (umr->is_global) {
        /* RoCE: the interface's own GRH (source GID, hop limit, class) */
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh       = umr->grh;
    }
    ret = umr->ops->modify_qp(umr->qp, &attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER);
    if (ret != 0) {
        goto err;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = 0;
    attr.max_rd_atomic = 1;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;
    attr.timeout       = 14;
    ret                = umr->ops->modify_qp(umr->qp, &attr,
                                             IBV_QP_STATE | IBV_QP_SQ_PSN |
                                                     IBV_QP_MAX_QP_RD_ATOMIC |
                                                     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                                     IBV_QP_TIMEOUT);
    if (ret != 0) {
        goto err;
    }
    return UCS_OK;

err:
    ucs_error("dcx: umr qp 0x%x: cannot connect to itself: %s", umr->qp->qp_num,
              strerror(ret));
    return UCS_ERR_IO_ERROR;
}

/* The RC QP that hosts UMR. Asks for max_inline of inline space (the UMR
 * entries travel inline) and halves the request until the device agrees. */
static ucs_status_t
uct_dcx_umr_qp_create(uct_dcx_umr_t *umr, struct ibv_context *ctx,
                      struct ibv_pd *pd, unsigned max_inline)
{
    struct ibv_qp_init_attr_ex attr;
    struct mlx5dv_qp_init_attr dv_attr;

    for (;;) {
        memset(&attr, 0, sizeof(attr));
        memset(&dv_attr, 0, sizeof(dv_attr));
        attr.qp_type             = IBV_QPT_RC;
        attr.send_cq             = ibv_cq_ex_to_cq(umr->cq);
        attr.recv_cq             = ibv_cq_ex_to_cq(umr->cq);
        attr.pd                  = pd;
        attr.cap.max_send_wr     = UCT_DCX_UMR_SQ_LEN;
        attr.cap.max_send_sge    = 1;
        attr.cap.max_inline_data = max_inline;
        attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        attr.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
        dv_attr.comp_mask   = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS |
                            MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
        dv_attr.create_flags   = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
        dv_attr.send_ops_flags = MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
                                 MLX5DV_QP_EX_WITH_MR_LIST;

        umr->qp = umr->ops->mlx5dv_create_qp(ctx, &attr, &dv_attr);
        if (umr->qp != NULL) {
            break;
        }
        if (max_inline < 64) {
            ucs_debug("dcx: cannot create the umr qp: %m");
            return UCS_ERR_UNSUPPORTED;
        }
        max_inline /= 2;
    }

    umr->sq_available = attr.cap.max_send_wr;
    umr->sq_len       = attr.cap.max_send_wr;
    /* One inline descriptor of 16 bytes per entry, one for the repeat
     * header of an interleaved layout (spec: n <= (inline + 4) / 16 - 1). */
    umr->list_max    = ucs_min((attr.cap.max_inline_data + 4) / 16,
                               UCT_DCX_UMR_LIST_MAX);
    umr->max_entries = (umr->list_max > 0) ? umr->list_max - 1 : 0;
    umr->qpx         = umr->ops->qp_to_qp_ex(umr->qp);
    umr->mqpx        = umr->ops->mlx5dv_qp_ex_from_ibv_qp_ex(umr->qpx);
    if ((umr->qpx == NULL) || (umr->mqpx == NULL) || (umr->max_entries == 0)) {
        ucs_debug("dcx: umr qp without usable UMR support (inline %u)",
                  attr.cap.max_inline_data);
        umr->ops->destroy_qp(umr->qp);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

ucs_status_t uct_dcx_umr_probe(const uct_dcx_verbs_ops_t *ops,
                               struct ibv_context *ctx, struct ibv_pd *pd,
                               unsigned max_inline, unsigned *list_max_p)
{
    struct ibv_cq_init_attr_ex cq_attr = {};
    uct_dcx_umr_t umr;
    ucs_status_t status;

    memset(&umr, 0, sizeof(umr));
    umr.ops           = ops;
    cq_attr.cqe       = UCT_DCX_UMR_SQ_LEN;
    cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    cq_attr.flags     = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    umr.cq            = ops->create_cq_ex(ctx, &cq_attr);
    if (umr.cq == NULL) {
        return UCS_ERR_IO_ERROR;
    }

    status = uct_dcx_umr_qp_create(&umr, ctx, pd, max_inline);
    if (status == UCS_OK) {
        *list_max_p = umr.list_max;
        ops->destroy_qp(umr.qp);
    }
    ops->destroy_cq(ibv_cq_ex_to_cq(umr.cq));
    return status;
}

/* The pool of indirect mkeys, each with room for a piece list; a device
 * that gives fewer than asked keeps those it gave (none: unsupported). */
static ucs_status_t uct_dcx_umr_mkeys_create(uct_dcx_umr_t *umr,
                                             struct ibv_pd *pd,
                                             unsigned num_mkeys)
{
    struct mlx5dv_mkey_init_attr mkey_attr;
    ucs_status_t status = UCS_OK;
    unsigned i;

    umr->mkeys = ucs_calloc(num_mkeys, sizeof(*umr->mkeys), "dcx umr mkeys");
    if (umr->mkeys == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    /* Room for a piece list (a strided layout needs two entries: one and
     * the repeat header). */
    for (i = 0; i < num_mkeys; ++i) {
        mkey_attr.pd           = pd;
        mkey_attr.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
        mkey_attr.max_entries  = ucs_max(umr->list_max, 2);
        umr->mkeys[i].pieces = ucs_calloc(umr->list_max, sizeof(struct ibv_sge),
                                          "dcx umr pieces");
        umr->mkeys[i].mkey   = (umr->mkeys[i].pieces == NULL) ?
                                       NULL :
                                       umr->ops->mlx5dv_create_mkey(&mkey_attr);
        if (umr->mkeys[i].mkey == NULL) {
            ucs_free(umr->mkeys[i].pieces);
            ucs_debug("dcx: cannot create indirect mkey %u: %m", i);
            status = (i == 0) ? UCS_ERR_UNSUPPORTED : UCS_OK;
            break;
        }
        umr->mkeys[i].state  = UCT_DCX_UMR_MKEY_FREE;
        umr->mkeys[i].listed = 1;
        ucs_list_add_tail(&umr->free, &umr->mkeys[i].list);
        ++umr->num_mkeys;
    }
    if (status != UCS_OK) {
        for (i = 0; i < umr->num_mkeys; ++i) {
            umr->ops->mlx5dv_destroy_mkey(umr->mkeys[i].mkey);
            ucs_free(umr->mkeys[i].pieces);
        }
        ucs_free(umr->mkeys);
    }
    return status;
}

ucs_status_t
uct_dcx_umr_init(uct_dcx_umr_t *umr, const uct_dcx_verbs_ops_t *ops,
                 struct ibv_context *ctx, struct ibv_pd *pd, uint8_t port,
                 uint16_t pkey_index, const struct ibv_port_attr *port_attr,
                 const struct ibv_global_route *grh, unsigned num_mkeys,
                 unsigned max_inline)
{
    struct ibv_cq_init_attr_ex cq_attr = {};
    ucs_status_t status;

    memset(umr, 0, sizeof(*umr));
    umr->ops       = ops;
    umr->access    = UCT_DCX_UMR_LAYOUT_ACCESS;
    umr->view_tags = 1; /* until the device refuses UPDATE_TAG */
    ucs_list_head_init(&umr->view_free);
    umr->port       = port;
    umr->pkey_index = pkey_index;
    umr->port_attr  = *port_attr;
    umr->is_global  = (grh != NULL);
    if (grh != NULL) {
        umr->grh = *grh;
    }
    ucs_list_head_init(&umr->free);
    ucs_list_head_init(&umr->lru);
    kh_init_inplace(uct_dcx_umr_layouts, &umr->layouts);

    cq_attr.cqe       = UCT_DCX_UMR_SQ_LEN;
    cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    cq_attr.flags     = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    umr->cq           = ops->create_cq_ex(ctx, &cq_attr);
    if (umr->cq == NULL) {
        ucs_error("dcx: cannot create the umr cq: %m");
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    status = uct_dcx_umr_qp_create(umr, ctx, pd, max_inline);
    if (status != UCS_OK) {
        goto err_destroy_cq;
    }

    status = uct_dcx_umr_qp_connect(umr);
    if (status != UCS_OK) {
        goto err_destroy_qp;
    }

    status = uct_dcx_umr_mkeys_create(umr, pd, num_mkeys);
    if (status != UCS_OK) {
        goto err_destroy_qp;
    }

    ucs_debug("dcx: umr qp 0x%x: %u mkeys, %u entries per umr", umr->qp->qp_num,
              umr->num_mkeys, umr->max_entries);
    return UCS_OK;

err_destroy_qp:
    ops->destroy_qp(umr->qp);
err_destroy_cq:
    ops->destroy_cq(ibv_cq_ex_to_cq(umr->cq));
err:
    kh_destroy_inplace(uct_dcx_umr_layouts, &umr->layouts);
    return status;
}

void uct_dcx_umr_cleanup(uct_dcx_umr_t *umr)
{
    uct_dcx_umr_view_mkey_t *vm, *tmp;
    unsigned i;

    ucs_list_for_each_safe(vm, tmp, &umr->view_free, list) {
        umr->ops->mlx5dv_destroy_mkey(vm->mkey);
        ucs_free(vm);
    }

    /* Destroying the QP ends its work; the mkeys go with their PD users. */
    umr->ops->destroy_qp(umr->qp);
    for (i = 0; i < umr->num_mkeys; ++i) {
        umr->ops->mlx5dv_destroy_mkey(umr->mkeys[i].mkey);
        ucs_free(umr->mkeys[i].pieces);
    }
    umr->ops->destroy_cq(ibv_cq_ex_to_cq(umr->cq));
    ucs_free(umr->mkeys);
    kh_destroy_inplace(uct_dcx_umr_layouts, &umr->layouts);
}

int uct_dcx_umr_layout_fits(const uct_dcx_umr_t *umr,
                            const uct_dcx_umr_layout_t *layout)
{
    return (layout->length > 0) && (layout->count > 0) &&
           (layout->length <= UCT_DCX_UMR_MAX_FIELD) &&
           (layout->stride <= UCT_DCX_UMR_MAX_FIELD) &&
           (layout->stride >= layout->length) &&
           ((uint64_t)layout->length * layout->count <= INT32_MAX) &&
           (umr->max_entries >= 1);
}

static void uct_dcx_umr_unlist(uct_dcx_umr_mkey_t *mk)
{
    if (mk->listed) {
        ucs_list_del(&mk->list);
        mk->listed = 0;
    }
}

static void uct_dcx_umr_uncache(uct_dcx_umr_t *umr, uct_dcx_umr_mkey_t *mk)
{
    khiter_t it;

    if (!mk->cached) {
        return;
    }
    it = kh_get(uct_dcx_umr_layouts, &umr->layouts, mk->layout);
    if (it != kh_end(&umr->layouts)) {
        kh_del(uct_dcx_umr_layouts, &umr->layouts, it);
    }
    mk->cached = 0;
}

/* An idle mkey whose layout is no longer wanted: invalidate it now if it
 * was programmed, so no key maps memory that may go away. */
static void uct_dcx_umr_retire(uct_dcx_umr_t *umr, uct_dcx_umr_mkey_t *mk)
{
    int ret;

    uct_dcx_umr_unlist(mk);
    if (!mk->dirty || umr->qp_error || (umr->sq_available == 0)) {
        /* Not programmed, or invalidated before its next UMR. */
        mk->state  = UCT_DCX_UMR_MKEY_FREE;
        mk->listed = 1;
        ucs_list_add_tail(&umr->free, &mk->list);
        return;
    }

    ibv_wr_start(umr->qpx);
    umr->qpx->wr_id    = UCT_DCX_UMR_WR_INV | (mk - umr->mkeys);
    umr->qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_local_inv(umr->qpx, mk->mkey->lkey);
    ret = ibv_wr_complete(umr->qpx);
    if (ret != 0) {
        ucs_error("dcx: umr: cannot invalidate mkey 0x%x: %s", mk->mkey->lkey,
                  strerror(ret));
        mk->state  = UCT_DCX_UMR_MKEY_FREE;
        mk->listed = 1;
        ucs_list_add_tail(&umr->free, &mk->list);
        return;
    }
    --umr->sq_available;
    mk->state = UCT_DCX_UMR_MKEY_INVALIDATING;
}

/* Program a free or evicted mkey with the layout (or the piece list). */
static ucs_status_t uct_dcx_umr_program(uct_dcx_umr_t *umr,
                                        uct_dcx_umr_mkey_t *mk,
                                        const uct_dcx_umr_layout_t *layout,
                                        const struct ibv_sge *pieces)
{
    struct mlx5dv_mr_interleaved entry;
    uint32_t index = mk - umr->mkeys;
    khiter_t it;
    int ret;

    if ((umr->sq_available < 2) || umr->qp_error) {
        return UCS_ERR_NO_RESOURCE;
    }

    ibv_wr_start(umr->qpx);
    if (mk->dirty) {
        /* Re-registration needs an invalidation first. */
        umr->qpx->wr_id    = UCT_DCX_UMR_WR_INV | index;
        umr->qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_local_inv(umr->qpx, mk->mkey->lkey);
    }

    umr->qpx->wr_id    = index;
    umr->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    if (pieces != NULL) {
        memcpy(mk->pieces, pieces, layout->count * sizeof(*pieces));
        mlx5dv_wr_mr_list(umr->mqpx, mk->mkey, umr->access, layout->count,
                          mk->pieces);
    } else {
        entry.addr        = layout->addr;
        entry.bytes_count = layout->length;
        entry.bytes_skip  = layout->stride - layout->length;
        entry.lkey        = layout->lkey;
        mlx5dv_wr_mr_interleaved(umr->mqpx, mk->mkey, umr->access,
                                 layout->count, 1, &entry);
    }
    ret = ibv_wr_complete(umr->qpx);
    if (ret != 0) {
        ucs_error("dcx: umr: cannot program mkey 0x%x: %s", mk->mkey->lkey,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    /* dirty follows the completions: the mkey is programmed only if the
     * UMR succeeds, and free again only if the invalidation does. */
    umr->sq_available -= mk->dirty ? 2 : 1;
    mk->fresh  = 1;
    mk->layout = *layout;
    mk->state  = UCT_DCX_UMR_MKEY_PROGRAMMING;
    it         = kh_put(uct_dcx_umr_layouts, &umr->layouts, *layout, &ret);
    if (ret != UCS_KH_PUT_FAILED) {
        kh_value(&umr->layouts, it) = mk;
        mk->cached                  = 1;
    }
    ++umr->stats.umrs;
    return UCS_OK;
}

static ucs_status_t
uct_dcx_umr_lookup(uct_dcx_umr_t *umr, const uct_dcx_umr_layout_t *layout,
                   const struct ibv_sge *pieces, uct_dcx_umr_mkey_t **mkey_p)
{
    uct_dcx_umr_mkey_t *mk;
    ucs_status_t status;
    khiter_t it;

    it = kh_get(uct_dcx_umr_layouts, &umr->layouts, *layout);
    if (it != kh_end(&umr->layouts)) {
        mk = kh_value(&umr->layouts, it);
        if ((pieces != NULL) &&
            memcmp(mk->pieces, pieces, layout->count * sizeof(*pieces))) {
            return UCS_ERR_UNSUPPORTED; /* another list with the same hash */
        }
        switch (mk->state) {
        case UCT_DCX_UMR_MKEY_READY:
            uct_dcx_umr_unlist(mk);
            ++mk->refcount;
            umr->stats.hits += !mk->fresh;
            mk->fresh = 0;
            *mkey_p   = mk;
            return UCS_OK;
        case UCT_DCX_UMR_MKEY_FAILED:
            /* Reported once; a later try programs it again. */
            uct_dcx_umr_uncache(umr, mk);
            uct_dcx_umr_retire(umr, mk);
            return (ucs_status_t)mk->failure;
        default:
            return UCS_INPROGRESS;
        }
    }

    if (ucs_unlikely(umr->qp_dead)) {
        return UCS_ERR_IO_ERROR;
    }
    if ((umr->sq_available < 2) || umr->qp_error) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (!ucs_list_is_empty(&umr->free)) {
        mk = ucs_list_head(&umr->free, uct_dcx_umr_mkey_t, list);
    } else if (!ucs_list_is_empty(&umr->lru)) {
        mk = ucs_list_head(&umr->lru, uct_dcx_umr_mkey_t, list);
        uct_dcx_umr_uncache(umr, mk);
        ++umr->stats.evictions;
    } else {
        return UCS_ERR_NO_RESOURCE; /* all in use or being invalidated */
    }

    status = uct_dcx_umr_program(umr, mk, layout, pieces);
    if (status != UCS_OK) {
        return status;
    }
    uct_dcx_umr_unlist(mk);
    return UCS_INPROGRESS;
}

ucs_status_t uct_dcx_umr_get(uct_dcx_umr_t *umr,
                             const uct_dcx_umr_layout_t *layout,
                             uct_dcx_umr_mkey_t **mkey_p)
{
    return uct_dcx_umr_lookup(umr, layout, NULL, mkey_p);
}

ucs_status_t uct_dcx_umr_get_list(uct_dcx_umr_t *umr,
                                  const struct ibv_sge *pieces, unsigned n,
                                  uct_dcx_umr_mkey_t **mkey_p)
{
    uct_dcx_umr_layout_t key;
    uint64_t hash = 0xcbf29ce484222325ull, total = 0;
    unsigned i;

    if ((n == 0) || (n > umr->list_max)) {
        return UCS_ERR_UNSUPPORTED;
    }
    for (i = 0; i < n; ++i) {
        hash = (hash ^ pieces[i].addr) * 0x100000001b3ull;
        hash = (hash ^ (((uint64_t)pieces[i].lkey << 32) | pieces[i].length)) *
               0x100000001b3ull;
        total += pieces[i].length;
    }
    if (total > INT32_MAX) {
        return UCS_ERR_UNSUPPORTED;
    }

    key.addr   = hash;
    key.lkey   = pieces[0].lkey;
    key.length = total;
    key.stride = UCT_DCX_UMR_LIST;
    key.count  = n;
    return uct_dcx_umr_lookup(umr, &key, pieces, mkey_p);
}

void uct_dcx_umr_put(uct_dcx_umr_t *umr, uct_dcx_umr_mkey_t *mk)
{
    ucs_assert(mk->refcount > 0);
    if (--mk->refcount > 0) {
        return;
    }

    if (mk->cached) {
        mk->listed = 1;
        ucs_list_add_tail(&umr->lru, &mk->list);
    } else {
        uct_dcx_umr_retire(umr, mk);
    }
}

/* One completion of the UMR QP: a cached mkey's UMR or invalidation, or
 * (reported to the caller) a view's. */
void uct_dcx_umr_complete(uct_dcx_umr_t *umr, uint64_t wr_id,
                          enum ibv_wc_status status, uint32_t vendor_err)
{
    uct_dcx_umr_mkey_t *mk;

    ++umr->sq_available;
    if (status != IBV_WC_SUCCESS) {
        /* The QP is in error now: what follows is flushed. */
        umr->qp_error = 1;
    }
    if (wr_id & UCT_DCX_UMR_WR_VIEW) {
        return;
    }

    mk = &umr->mkeys[wr_id & ~(uint64_t)UCT_DCX_UMR_WR_INV];
    if (wr_id & UCT_DCX_UMR_WR_INV) {
        /* A stand-alone invalidation, or the first half of a programming
         * (if it failed, its UMR is flushed). */
        if (status == IBV_WC_SUCCESS) {
            mk->dirty = 0;
        }
        if (mk->state == UCT_DCX_UMR_MKEY_INVALIDATING) {
            mk->state  = UCT_DCX_UMR_MKEY_FREE;
            mk->listed = 1;
            ucs_list_add_tail(&umr->free, &mk->list);
        }
    } else if (status == IBV_WC_SUCCESS) {
        mk->dirty = 1;
        mk->state = UCT_DCX_UMR_MKEY_READY;
        if (!mk->cached) {
            uct_dcx_umr_retire(umr, mk); /* forgotten meanwhile */
        } else if (mk->refcount == 0) {
            mk->listed = 1;
            ucs_list_add_tail(&umr->lru, &mk->list);
        }
    } else if (status == IBV_WC_WR_FLUSH_ERR) {
        /* Not the layout's fault: the next try programs it again once the
         * QP has recovered. */
        uct_dcx_umr_uncache(umr, mk);
        mk->state  = UCT_DCX_UMR_MKEY_FREE;
        mk->listed = 1;
        ucs_list_add_tail(&umr->free, &mk->list);
    } else {
        ucs_diag("dcx: umr of mkey 0x%x failed: %s (vendor error 0x%x)",
                 mk->mkey->lkey, umr->ops->wc_status_str(status), vendor_err);
        /* A cached failure is reported to the next user of the layout
         * and evictable meanwhile. */
        mk->failure = ((status == IBV_WC_LOC_PROT_ERR) ||
                       (status == IBV_WC_MW_BIND_ERR)) ?
                              UCS_ERR_INVALID_PARAM :
                              UCS_ERR_IO_ERROR;
        mk->state   = mk->cached ? UCT_DCX_UMR_MKEY_FAILED :
                                   UCT_DCX_UMR_MKEY_FREE;
        mk->listed  = 1;
        ucs_list_add_tail(mk->cached ? &umr->lru : &umr->free, &mk->list);
    }
}

/* The QP in error has drained: back to RTS (RESET, INIT, RTR, RTS, as a
 * DCI recovers). Cached layouts are dropped: the idle ones are invalidated
 * now, the ones in use when their operations complete; a failure still to
 * be reported stays for its next user. */
static void uct_dcx_umr_recover(uct_dcx_umr_t *umr)
{
    struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RESET };
    uct_dcx_umr_mkey_t *mk;
    unsigned i;
    int ret;

    ret = umr->ops->modify_qp(umr->qp, &attr, IBV_QP_STATE);
    if (ret != 0) {
        ucs_error("dcx: umr qp 0x%x: cannot reset it: %s", umr->qp->qp_num,
                  strerror(ret));
    }
    if ((ret != 0) || (uct_dcx_umr_qp_connect(umr) != UCS_OK)) {
        ucs_error("dcx: umr qp 0x%x not recovered: "
                  "strided zero-copy fails from now on",
                  umr->qp->qp_num);
        umr->qp_dead = 1;
        return;
    }

    umr->qp_error = 0;
    ++umr->stats.recoveries;
    for (i = 0; i < umr->num_mkeys; ++i) {
        mk = &umr->mkeys[i];
        if (!mk->cached || (mk->state == UCT_DCX_UMR_MKEY_FAILED)) {
            continue;
        }
        uct_dcx_umr_uncache(umr, mk);
        if ((mk->refcount == 0) && (mk->state == UCT_DCX_UMR_MKEY_READY)) {
            uct_dcx_umr_retire(umr, mk);
        }
    }
    ucs_diag("dcx: umr qp 0x%x recovered after an error completion",
             umr->qp->qp_num);
}

void uct_dcx_umr_fail(uct_dcx_umr_t *umr)
{
    uct_dcx_umr_mkey_t *mk;
    unsigned i;

    /* What is outstanding completes here, as with an error completion. */
    for (i = 0; i < umr->num_mkeys; ++i) {
        mk = &umr->mkeys[i];
        if (mk->state == UCT_DCX_UMR_MKEY_PROGRAMMING) {
            uct_dcx_umr_complete(umr, i, IBV_WC_FATAL_ERR, 0);
        } else if (mk->state == UCT_DCX_UMR_MKEY_INVALIDATING) {
            uct_dcx_umr_complete(umr, i | UCT_DCX_UMR_WR_INV, IBV_WC_FATAL_ERR,
                                 0);
        }
    }
    umr->qp_error = 1;
    umr->qp_dead  = 1;
}

unsigned uct_dcx_umr_progress(uct_dcx_umr_t *umr)
{
    struct ibv_poll_cq_attr attr = {};
    struct ibv_cq_ex *cq         = umr->cq;
    unsigned count               = 0;

    if (ibv_start_poll(cq, &attr) == 0) {
        do {
            uct_dcx_umr_complete(umr, cq->wr_id, cq->status,
                                 (cq->status == IBV_WC_SUCCESS) ?
                                         0 :
                                         ibv_wc_read_vendor_err(cq));
            ++count;
        } while (ibv_next_poll(cq) == 0);
        ibv_end_poll(cq);
    }

    if (ucs_unlikely(umr->qp_error && !umr->qp_dead) &&
        (umr->sq_available == umr->sq_len)) {
        uct_dcx_umr_recover(umr);
        ++count; /* layouts may be programmed again */
    }
    return count;
}

static int uct_dcx_umr_uses_lkey(const uct_dcx_umr_mkey_t *mk, uint32_t lkey)
{
    uint32_t i;

    if (mk->layout.stride != UCT_DCX_UMR_LIST) {
        return mk->layout.lkey == lkey;
    }
    for (i = 0; i < mk->layout.count; ++i) {
        if (mk->pieces[i].lkey == lkey) {
            return 1;
        }
    }
    return 0;
}

void uct_dcx_umr_forget_lkey(uct_dcx_umr_t *umr, uint32_t lkey)
{
    uct_dcx_umr_mkey_t *mk;
    unsigned i;

    for (i = 0; i < umr->num_mkeys; ++i) {
        mk = &umr->mkeys[i];
        if (!mk->cached || !uct_dcx_umr_uses_lkey(mk, lkey)) {
            continue;
        }
        uct_dcx_umr_uncache(umr, mk);
        ++umr->stats.invalidations;
        if ((mk->refcount == 0) && (mk->state == UCT_DCX_UMR_MKEY_READY)) {
            uct_dcx_umr_retire(umr, mk);
        } else if (mk->state == UCT_DCX_UMR_MKEY_FAILED) {
            uct_dcx_umr_retire(umr, mk);
        }
        /* Programming or in use: retired when it completes / is put. */
    }
}
