/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Between the UMR engine's files (dcx_umr.c, dcx_umr_view.c).
 */
#ifndef UCT_DCX_UMR_INT_H_
#define UCT_DCX_UMR_INT_H_

#include "dcx_umr.h"


/* Work request ids: the mkey index, and whether the WR is the mkey's UMR
 * or a stand-alone invalidation. */
#define UCT_DCX_UMR_WR_INV  UCS_BIT(31)
#define UCT_DCX_UMR_WR_VIEW UCS_BIT(30) /* a view's UMR or invalidation */

/* How long a view waits for its UMR or invalidation. */
#define UCT_DCX_UMR_VIEW_TIMEOUT 10.0


/* The next variant of a key (its low 8 bits, the mkey tag). */
uint32_t uct_dcx_umr_key_next_variant(uint32_t key);

/* One completion of the UMR QP (a layout's, or a view's). */
void uct_dcx_umr_complete(uct_dcx_umr_t *umr, uint64_t wr_id,
                          enum ibv_wc_status status, uint32_t vendor_err);

#endif
