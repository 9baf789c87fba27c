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
} uct_dcx_umr_counters_t;


/**
 * Read the strided zero-copy counters of a dcx interface.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM if @a iface is not a dcx
 *         interface.
 */
ucs_status_t uct_dcx_iface_query_umr(uct_iface_h iface,
                                     uct_dcx_umr_counters_t *counters);


#ifdef __cplusplus
}
#endif

#endif
