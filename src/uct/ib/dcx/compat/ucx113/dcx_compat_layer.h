/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Types and macros of the UCX 1.13 layer (see ../dcx_compat.h).
 */
#ifndef UCT_DCX_COMPAT_LAYER_H_
#define UCT_DCX_COMPAT_LAYER_H_

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/arch/cpu.h>
#include <ucs/sys/math.h>


#define UCT_DCX_COMPAT_LAYER "ucx113"

/* Whether UCS prefers PCIe relaxed ordering on this CPU. */
#define uct_dcx_compat_cpu_prefers_relaxed_order() \
    ucs_cpu_prefer_relaxed_order()

/* Registration cache settings: UCT's table in 1.13. */
typedef uct_md_rcache_config_t uct_dcx_rcache_config_t;
#define UCT_DCX_RCACHE_CONFIG_TABLE uct_md_config_rcache_table

/* The component's remote key slots (uct_dcx_component). */
ucs_status_t uct_dcx_compat_rkey_unpack(uct_component_t *component,
                                        const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p);

#define UCT_DCX_COMPAT_RKEY_OPS .rkey_unpack = uct_dcx_compat_rkey_unpack

/* A registration cache's callbacks (UCX 1.13 has no merge callback: a
 * merged region gets the rights of the registration that made it, and one
 * that needs more finds it lacking and registers again). */
#define UCT_DCX_RCACHE_OPS(_mem_reg, _mem_dereg, _merge, _dump_region) \
    {                                                                  \
        .mem_reg = _mem_reg, .mem_dereg = _mem_dereg,                  \
        .dump_region = _dump_region                                    \
    }

/* MAX_BUFS and BUFS_GROW of an interface memory pool. */
#define UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow,   \
                                          _mp_name, _offset)              \
    UCT_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow, _mp_name, \
                                  _offset, "")

#endif
