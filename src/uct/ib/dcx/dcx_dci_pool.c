/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The DCI pool's slow path: its stack, and its growth (dcx_dci_pool.h).
 */
#include "dcx_dci_pool.h"

#include <ucs/debug/memtrack_int.h>


ucs_status_t uct_dcx_dci_pool_init(uct_dcx_dci_pool_t *pool, unsigned size,
                                   unsigned num_created)
{
    unsigned i;

    /* Indices are 16 bits, all ones meaning none; a pool of none could
     * give nothing. */
    if ((size == 0) || (size > UINT16_MAX) || (num_created > size)) {
        return UCS_ERR_INVALID_PARAM;
    }

    pool->stack = ucs_calloc(size, sizeof(*pool->stack), "dcx dci stack");
    if (pool->stack == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    /* Lowest index on top: the created DCIs are used first, and the others
     * come up in order. */
    for (i = 0; i < size; ++i) {
        pool->stack[size - 1 - i] = i;
    }
    pool->size        = size;
    pool->num_created = num_created;
    pool->num_free    = size;
    pool->num_waiters = 0;
    pool->num_grants  = 0;
    return UCS_OK;
}

void uct_dcx_dci_pool_cleanup(uct_dcx_dci_pool_t *pool)
{
    ucs_free(pool->stack);
    pool->stack = NULL;
}

void uct_dcx_dci_pool_created(uct_dcx_dci_pool_t *pool)
{
    ucs_assert(pool->num_created < pool->size);
    ++pool->num_created;
}

void uct_dcx_dci_pool_stop_growing(uct_dcx_dci_pool_t *pool)
{
    /* Only when every created DCI is taken is the top a missing one, so
     * the missing ones are exactly the stack. */
    ucs_assert(pool->num_free == pool->size - pool->num_created);
    pool->size     = pool->num_created;
    pool->num_free = 0;
}
