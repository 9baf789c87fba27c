/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Types and macros of the UCX 1.16-1.22 layer (see ../dcx_compat.h).
 */
#ifndef UCT_DCX_COMPAT_LAYER_H_
#define UCT_DCX_COMPAT_LAYER_H_

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/arch/cpu.h>
#include <ucs/sys/math.h>
#include <ucs/sys/ptr_arith.h>


#define UCT_DCX_COMPAT_LAYER "ucx116"

/* UCT_DCX_UCX_VERSION_CODE (major * 10000 + minor * 100 + patch) comes from
 * configure; the layer follows changes inside its range with it. */
#define UCT_DCX_UCX_AT_LEAST(_major, _minor) \
    (UCT_DCX_UCX_VERSION_CODE >= ((_major)*10000 + (_minor)*100))

/* Whether UCS prefers PCIe relaxed ordering on this CPU (by CPU model
 * from 1.22). */
#if UCT_DCX_UCX_AT_LEAST(1, 22)
#define uct_dcx_compat_cpu_prefers_relaxed_order()                \
    ucs_cpu_model_prefer_relaxed_order(ucs_arch_get_cpu_vendor(), \
                                       ucs_arch_get_cpu_model())
#else
#define uct_dcx_compat_cpu_prefers_relaxed_order() \
    ucs_cpu_prefer_relaxed_order()
#endif

/* The component's remote key slots (uct_dcx_component): rkey_unpack took
 * params in 1.19, rkey_compare came in 1.16. */
#if UCT_DCX_UCX_AT_LEAST(1, 19)
ucs_status_t uct_dcx_compat_rkey_unpack(uct_component_t *component,
                                        const void *rkey_buffer,
                                        const uct_rkey_unpack_params_t *params,
                                        uct_rkey_t *rkey_p, void **handle_p);
#else
ucs_status_t uct_dcx_compat_rkey_unpack(uct_component_t *component,
                                        const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p);
#endif

ucs_status_t
uct_dcx_compat_rkey_compare(uct_component_t *component, uct_rkey_t rkey1,
                            uct_rkey_t rkey2,
                            const uct_rkey_compare_params_t *params,
                            int *result);

#define UCT_DCX_COMPAT_RKEY_OPS                 \
    .rkey_unpack  = uct_dcx_compat_rkey_unpack, \
    .rkey_compare = uct_dcx_compat_rkey_compare

/* Registration cache settings: UCS's own table since 1.16. */
typedef ucs_rcache_config_t uct_dcx_rcache_config_t;
#define UCT_DCX_RCACHE_CONFIG_TABLE ucs_config_rcache_table

/* A registration cache's callbacks; a region that absorbs others takes
 * their rights too (merge). */
#define UCT_DCX_RCACHE_OPS(_mem_reg, _mem_dereg, _merge, _dump_region) \
    {                                                                  \
        .mem_reg = _mem_reg, .mem_dereg = _mem_dereg, .merge = _merge, \
        .dump_region = _dump_region                                    \
    }

/* MAX_BUFS, BUFS_GROW, MAX_CHUNK_SIZE and GROW_FACTOR of an interface memory
 * pool, with the defaults of UCX's IB transports for the last two. */
#define UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow,    \
                                          _mp_name, _offset)               \
    UCT_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow, 128m, 1.0, \
                                  _mp_name, _offset, "")

#endif
