/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * UMR engine: indirect memory keys that describe strided memory, programmed
 * by UMR work requests on a loopback RC QP (DCIs cannot post UMR), kept in a
 * pool and cached by layout.
 *
 *   layout (lkey, addr, length, stride, count)
 *      |  cache hit: the mkey is used at once
 *      v  miss: take a free mkey, or evict the least recently used idle one
 *   [LOCAL_INV if it was programmed] + UMR interleaved  -->  CQE  --> READY
 *
 * An mkey is usable by other QPs only after its UMR completed, so a miss
 * returns UCS_INPROGRESS and the caller retries after progress. An mkey in
 * use by operations (reference count) is never invalidated; one whose
 * registration goes away leaves the cache and is invalidated once idle.
 *
 * An error completion moves the UMR QP to error and flushes everything
 * after it. Once every work request has completed, the QP is reset and
 * reconnected, the cached layouts are dropped, and programming resumes;
 * layouts whose UMR was only flushed are programmed again on the next try.
 */
#ifndef UCT_DCX_UMR_H_
#define UCT_DCX_UMR_H_

#include "../seam/dcx_seam.h"

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/type/status.h>


/* Interleaved UMR field widths (per-entry byte count and stride). */
#define UCT_DCX_UMR_MAX_FIELD UINT16_MAX


/* A strided region: count blocks of length bytes, stride bytes apart. A
 * piece list is keyed by the same fields: addr = hash of the pieces, lkey =
 * the first piece's, length = total bytes, stride = UCT_DCX_UMR_LIST, count
 * = number of pieces (the pieces themselves are compared on a hit). */
typedef struct uct_dcx_umr_layout {
    uint64_t addr; /* first byte of the first block */
    uint32_t lkey; /* registration holding every block */
    uint32_t length; /* bytes per block */
    uint32_t stride; /* distance between block starts */
    uint32_t count; /* number of blocks */
} uct_dcx_umr_layout_t;

#define UCT_DCX_UMR_LIST UINT32_MAX

/* Pieces of one list UMR at most (also bounded by the inline size). */
#define UCT_DCX_UMR_LIST_MAX 64


typedef enum {
    UCT_DCX_UMR_MKEY_FREE, /* programmable */
    UCT_DCX_UMR_MKEY_PROGRAMMING, /* UMR posted, no CQE yet */
    UCT_DCX_UMR_MKEY_READY, /* usable by any QP of the PD */
    UCT_DCX_UMR_MKEY_INVALIDATING, /* LOCAL_INV posted */
    UCT_DCX_UMR_MKEY_FAILED /* the UMR failed; reported once */
} uct_dcx_umr_mkey_state_t;


typedef struct uct_dcx_umr_mkey {
    struct mlx5dv_mkey *mkey;
    uct_dcx_umr_layout_t layout;
    struct ibv_sge *pieces; /* of a piece list (list_max entries) */
    ucs_list_link_t list; /* in free or lru, when there */
    uint32_t refcount; /* operations using it */
    uint8_t state; /* uct_dcx_umr_mkey_state_t */
    uint8_t cached; /* in the layout table */
    uint8_t dirty; /* programmed since its last LOCAL_INV */
    uint8_t listed; /* on free or lru */
    uint8_t fresh; /* programmed, not used yet: its first
                                       use is not a cache hit */
    int8_t failure; /* FAILED: the status to report */
} uct_dcx_umr_mkey_t;


static inline khint32_t uct_dcx_umr_layout_hash(uct_dcx_umr_layout_t l)
{
    uint64_t h = l.addr ^ ((uint64_t)l.lkey << 32) ^
                 ((uint64_t)l.length * 0x9e3779b1u) ^
                 ((uint64_t)l.stride << 17) ^ ((uint64_t)l.count << 41);
    return kh_int64_hash_func(h);
}

static inline int
uct_dcx_umr_layout_equal(uct_dcx_umr_layout_t a, uct_dcx_umr_layout_t b)
{
    return (a.addr == b.addr) && (a.lkey == b.lkey) && (a.length == b.length) &&
           (a.stride == b.stride) && (a.count == b.count);
}

KHASH_INIT(uct_dcx_umr_layouts, uct_dcx_umr_layout_t, uct_dcx_umr_mkey_t *, 1,
           uct_dcx_umr_layout_hash, uct_dcx_umr_layout_equal)


typedef struct uct_dcx_umr_stats {
    uint64_t umrs; /* layouts programmed */
    uint64_t hits; /* operations served by a cached layout */
    uint64_t evictions; /* cached layouts replaced */
    uint64_t invalidations; /* layouts dropped with their registration */
    uint64_t recoveries; /* UMR QP reset after an error completion */
} uct_dcx_umr_stats_t;


typedef struct uct_dcx_umr {
    const uct_dcx_verbs_ops_t *ops;
    struct ibv_cq_ex *cq;
    struct ibv_qp *qp;
    struct ibv_qp_ex *qpx;
    struct mlx5dv_qp_ex *mqpx;
    unsigned sq_available;
    unsigned sq_len; /* work requests the QP holds */
    int qp_error; /* an error completion: the QP
                                              is in error until recovered */
    int qp_dead; /* recovery failed */
    uint8_t port; /* to reconnect after an error */
    uint16_t pkey_index; /* the interface's partition */
    struct ibv_port_attr port_attr;
    struct ibv_global_route grh; /* loopback GRH (RoCE) */
    int is_global;
    unsigned max_entries; /* interleaved entries per UMR */
    unsigned list_max; /* pieces per list UMR */
    uint32_t access; /* rights of every layout */
    int view_tags; /* view mkeys change key variant */
    ucs_list_link_t view_free; /* uct_dcx_umr_view_mkey_t */
    uct_dcx_umr_mkey_t *mkeys;
    unsigned num_mkeys;
    ucs_list_link_t free; /* FREE mkeys */
    ucs_list_link_t lru; /* idle cached READY, oldest first */
    khash_t(uct_dcx_umr_layouts) layouts;
    uct_dcx_umr_stats_t stats;
} uct_dcx_umr_t;


/* Open the engine on a device context opened with DEVX, its QP on port
 * port in the partition at pkey_index. num_mkeys bounds
 * the cached layouts (and operations in flight on distinct layouts). grh is
 * the loopback QP's GRH on a RoCE port (dgid = the port's own GID), NULL on
 * InfiniBand. */
ucs_status_t
uct_dcx_umr_init(uct_dcx_umr_t *umr, const uct_dcx_verbs_ops_t *ops,
                 struct ibv_context *ctx, struct ibv_pd *pd, uint8_t port,
                 uint16_t pkey_index, const struct ibv_port_attr *port_attr,
                 const struct ibv_global_route *grh, unsigned num_mkeys,
                 unsigned max_inline);

void uct_dcx_umr_cleanup(uct_dcx_umr_t *umr);

/* How many pieces one list UMR would map on this device, without keeping
 * any resource (creates and destroys a UMR QP): lets an interface report
 * its iov capacity before its first strided operation. */
ucs_status_t uct_dcx_umr_probe(const uct_dcx_verbs_ops_t *ops,
                               struct ibv_context *ctx, struct ibv_pd *pd,
                               unsigned max_inline, unsigned *list_max_p);

/* An mkey mapping the layout zero-based, with a reference for the caller:
 * UCS_OK (use it now), UCS_INPROGRESS (being programmed: retry after
 * progress), UCS_ERR_NO_RESOURCE (every mkey busy, or the UMR QP is
 * recovering from an error: retry after progress), UCS_ERR_INVALID_PARAM
 * (the device refused the layout), UCS_ERR_IO_ERROR (its UMR failed
 * otherwise, or the UMR QP could not be recovered). */
ucs_status_t uct_dcx_umr_get(uct_dcx_umr_t *umr,
                             const uct_dcx_umr_layout_t *layout,
                             uct_dcx_umr_mkey_t **mkey_p);

/* The same for a list of pieces (n <= list_max, each in a registration of
 * the PD), mapped one after the other from offset 0. */
ucs_status_t uct_dcx_umr_get_list(uct_dcx_umr_t *umr,
                                  const struct ibv_sge *pieces, unsigned n,
                                  uct_dcx_umr_mkey_t **mkey_p);

/* Drop the reference of an operation that completed. */
void uct_dcx_umr_put(uct_dcx_umr_t *umr, uct_dcx_umr_mkey_t *mkey);

/* Completions of UMR and invalidation work requests, and the recovery of
 * the UMR QP once it has drained after an error (counted as progress). */
unsigned uct_dcx_umr_progress(uct_dcx_umr_t *umr);

/* The device failed: nothing it had outstanding completes. Layouts being
 * programmed fail (UCS_ERR_IO_ERROR to their next user), and so does every
 * later request; nothing is posted any more. */
void uct_dcx_umr_fail(uct_dcx_umr_t *umr);

/* A registration goes away: forget every layout over it and invalidate the
 * idle ones now. */
void uct_dcx_umr_forget_lkey(uct_dcx_umr_t *umr, uint32_t lkey);

/* A persistent view: its own mkey, programmed with remote rights, outside
 * the cache. Programming and invalidation wait for their completion. A
 * destroyed view's mkey is kept for a later view, which programs it with
 * the next key variant (the mkey tag), so the old key reaches nothing. */
typedef struct uct_dcx_umr_view {
    struct mlx5dv_mkey *mkey;
    unsigned max_entries;
    uct_dcx_umr_layout_t layout;
} uct_dcx_umr_view_t;

/* An invalidated view mkey, waiting for a later view. */
typedef struct uct_dcx_umr_view_mkey {
    ucs_list_link_t list;
    struct mlx5dv_mkey *mkey;
    unsigned max_entries;
} uct_dcx_umr_view_mkey_t;

/* A strided layout, or (pieces != NULL) a list of n pieces, with the given
 * rights (IBV_ACCESS_*). */
ucs_status_t uct_dcx_umr_view_create(uct_dcx_umr_t *umr, struct ibv_pd *pd,
                                     const uct_dcx_umr_layout_t *layout,
                                     const struct ibv_sge *pieces, unsigned n,
                                     uint32_t access, uct_dcx_umr_view_t *view);

ucs_status_t
uct_dcx_umr_view_destroy(uct_dcx_umr_t *umr, uct_dcx_umr_view_t *view);

/* Whether the layout can be one interleaved UMR: 16-bit block length and
 * stride fields, and a 32-bit mapped length. */
int uct_dcx_umr_layout_fits(const uct_dcx_umr_t *umr,
                            const uct_dcx_umr_layout_t *layout);

#endif
