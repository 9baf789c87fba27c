/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The DCI pool of an interface, by index: which DCIs are idle (a stack,
 * the one given back last on top), how many exist (a DCI is created at its
 * first use: those not created yet are the bottom of the stack, lowest
 * index on top, so one comes up only when every created DCI is taken), how
 * many endpoints wait for one, and how many are out for credit grants.
 *
 * It knows no QP: the interface creates the DCI the pool names
 * (uct_dcx_dci_pool_top_missing, then uct_dcx_dci_pool_created or
 * uct_dcx_dci_pool_stop_growing), and recovers a DCI that failed before it
 * gives it back. The DCI policies (dcx_dci_policy.c) and the endpoints go
 * through these calls only, so the pool's invariants hold in one place:
 *
 *   num_free <= size, num_created <= size,
 *   the stack holds every DCI not taken, each once,
 *   the DCIs not created yet are all in the stack, below the created ones.
 */
#ifndef UCT_DCX_DCI_POOL_H_
#define UCT_DCX_DCI_POOL_H_

#include <ucs/debug/assert.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stdint.h>


typedef struct uct_dcx_dci_pool {
    uint16_t *stack; /* indices of idle DCIs, top at num_free - 1 */
    unsigned size; /* DCIs the pool holds: 0..size-1 */
    unsigned num_created; /* DCIs 0..num_created-1 exist */
    unsigned num_free; /* DCIs in the stack */
    unsigned num_waiters; /* endpoints waiting for a DCI */
    unsigned num_grants; /* DCIs taken for credit grants */
} uct_dcx_dci_pool_t;


/**
 * A pool of @a size DCIs, every one idle, of which DCIs 0..@a num_created-1
 * exist already.
 *
 * @return UCS_OK, UCS_ERR_INVALID_PARAM (size 0, above 65535, or fewer than
 *         num_created), UCS_ERR_NO_MEMORY.
 */
ucs_status_t uct_dcx_dci_pool_init(uct_dcx_dci_pool_t *pool, unsigned size,
                                   unsigned num_created);

void uct_dcx_dci_pool_cleanup(uct_dcx_dci_pool_t *pool);

/* The interface created DCI num_created (the missing top of the stack, or
 * one more while it opens): it exists from now on. */
void uct_dcx_dci_pool_created(uct_dcx_dci_pool_t *pool);

/* The next DCI cannot be created (the device has no QP left): the pool
 * keeps the DCIs it has, all taken, and never asks for another. */
void uct_dcx_dci_pool_stop_growing(uct_dcx_dci_pool_t *pool);


static UCS_F_ALWAYS_INLINE int
uct_dcx_dci_pool_has_free(const uct_dcx_dci_pool_t *pool)
{
    return pool->num_free > 0;
}

/* Whether the DCI the next take gives does not exist yet. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_dci_pool_top_missing(const uct_dcx_dci_pool_t *pool)
{
    ucs_assert(pool->num_free > 0);
    return pool->stack[pool->num_free - 1] >= pool->num_created;
}

/* The DCI on top of the stack, which must exist. */
static UCS_F_ALWAYS_INLINE uint16_t
uct_dcx_dci_pool_take(uct_dcx_dci_pool_t *pool)
{
    ucs_assert(!uct_dcx_dci_pool_top_missing(pool));
    return pool->stack[--pool->num_free];
}

/* An idle DCI goes back on top of the stack. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_dci_pool_give_back(uct_dcx_dci_pool_t *pool, uint16_t index)
{
    ucs_assert(pool->num_free < pool->size);
    ucs_assert(index < pool->num_created);
    pool->stack[pool->num_free++] = index;
}

/* An endpoint starts waiting for a DCI; returns whether it is the first. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_dci_pool_waiter_add(uct_dcx_dci_pool_t *pool)
{
    return pool->num_waiters++ == 0;
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_dci_pool_waiter_remove(uct_dcx_dci_pool_t *pool)
{
    ucs_assert(pool->num_waiters > 0);
    --pool->num_waiters;
}

static UCS_F_ALWAYS_INLINE int
uct_dcx_dci_pool_has_waiters(const uct_dcx_dci_pool_t *pool)
{
    return pool->num_waiters > 0;
}

/* A DCI taken for a credit grant, which no endpoint holds, went out; the
 * grant completed (before the DCI is given back). */
static UCS_F_ALWAYS_INLINE void
uct_dcx_dci_pool_grant_add(uct_dcx_dci_pool_t *pool)
{
    ucs_assert(pool->num_grants < pool->size);
    ++pool->num_grants;
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_dci_pool_grant_remove(uct_dcx_dci_pool_t *pool)
{
    ucs_assert(pool->num_grants > 0);
    --pool->num_grants;
}

/* Every DCI is back in the pool, but those out for credit grants. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_dci_pool_is_idle(const uct_dcx_dci_pool_t *pool)
{
    return pool->num_free + pool->num_grants == pool->size;
}

#endif
