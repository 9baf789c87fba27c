/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx extensions for UCT-level users: what the generic UCT API cannot say.
 * Link against libuct_dcx.so (or look the symbols up with dlsym in the
 * plugin a program preloads).
 */
#ifndef UCT_DCX_H_
#define UCT_DCX_H_

#include <uct/api/uct.h>

#ifdef __cplusplus
extern "C" {
#endif


/**
 * Strided zero-copy counters of one dcx interface: which path each strided
 * put_zcopy / get_zcopy took, and what the layout cache did.
 */
typedef struct uct_dcx_umr_counters {
    uint64_t zcopy_ops;      /**< strided operations through an mkey */
    uint64_t copy_ops;       /**< strided operations packed instead */
    uint64_t umrs;           /**< layouts programmed by UMR */
    uint64_t hits;           /**< operations served by a cached layout */
    uint64_t evictions;      /**< cached layouts replaced by new ones */
    uint64_t invalidations;  /**< layouts dropped with their registration */
    uint64_t max_pieces;     /**< pieces one list UMR maps (0 until the first
                                  strided operation creates the UMR QP) */
    uint64_t recoveries;     /**< times the UMR QP was reset and reconnected
                                  after an error completion */
} uct_dcx_umr_counters_t;


/**
 * Read the strided zero-copy counters of a dcx interface.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM if @a iface is not a dcx
 *         interface.
 */
ucs_status_t uct_dcx_iface_query_umr(uct_iface_h iface,
                                     uct_dcx_umr_counters_t *counters);


/**
 * Send-side work counters of one dcx interface: what it asked of the
 * device, and how many completions it made the device write (see
 * UCX_DCX_TX_CQ_MODERATION).
 */
typedef struct uct_dcx_tx_counters {
    uint64_t work_requests;        /**< work requests posted on DCIs */
    uint64_t signaled;             /**< ... of which asked for a completion */
    uint64_t cqes;                 /**< send completions polled */
    uint64_t completion_requests;  /**< signaled zero-length writes posted
                                        only to retire an unsignaled tail */
} uct_dcx_tx_counters_t;


/**
 * Read the send-side work counters of a dcx interface.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM if @a iface is not a dcx
 *         interface.
 */
ucs_status_t uct_dcx_iface_query_tx(uct_iface_h iface,
                                    uct_dcx_tx_counters_t *counters);


/**
 * Create a persistent strided view of registered memory: @a count blocks of
 * @a length bytes, @a stride bytes apart, starting at @a address inside the
 * registration @a memh of @a iface's memory domain. The view is a memory
 * handle: pack its remote key with uct_md_mkey_pack(); a peer that puts or
 * gets contiguous data at remote offset o (0 <= o < length * count, the
 * view is zero-based) reaches block o / length, byte o % length.
 *
 * Contract: peers stop using a view before it is destroyed; one that does
 * not gets a remote-access error on its endpoint, and the memory is not
 * touched. Destroy views before their registration and before @a iface.
 * The block length and the stride are below 64 KiB (one UMR).
 *
 * Example: expose column j of a row-major N x N matrix of doubles:
 * @code
 *   uct_mem_h view;
 *   uct_dcx_mem_view_create(iface, memh, &a[0][j], sizeof(double),
 *                           N * sizeof(double), N, &view);
 *   uct_md_mkey_pack(md, view, rkey_buffer);  // send to the peer
 *   // peer: uct_ep_put_zcopy(ep, column, 1, 0, rkey, comp) fills column j
 *   uct_dcx_mem_view_destroy(iface, view);
 * @endcode
 *
 * @return UCS_OK, UCS_ERR_INVALID_PARAM (not a dcx interface, a layout
 *         outside the registration or too large for one UMR),
 *         UCS_ERR_UNSUPPORTED (the device has no UMR).
 */
ucs_status_t uct_dcx_mem_view_create(uct_iface_h iface, uct_mem_h memh,
                                     void *address, size_t length,
                                     size_t stride, size_t count,
                                     uct_mem_h *view_p);


/**
 * Create a persistent piece-list view: the blocks of an iov list (strided
 * entries expanded to one piece per block; each entry's memh a registration
 * of @a iface's memory domain) mapped one after the other from offset 0, at
 * most one list UMR's capacity of pieces (uct_dcx_umr_counters_t
 * max_pieces). Same contract as uct_dcx_mem_view_create().
 */
ucs_status_t uct_dcx_mem_view_create_iov(uct_iface_h iface,
                                         const uct_iov_t *iov, size_t iovcnt,
                                         uct_mem_h *view_p);


/**
 * Destroy a view: its remote key stops working at once.
 */
ucs_status_t uct_dcx_mem_view_destroy(uct_iface_h iface, uct_mem_h view);


#ifdef __cplusplus
}
#endif

#endif
