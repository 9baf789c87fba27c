/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The seam between dcx and UCX's internal ABI. UCX changes its md ops, its
 * component, its iface internal ops and some UCS helpers between releases
 * (docs/ucx-releases.md, "What changes between UCX releases"), so configure
 * picks one layer for the release dcx is built against (compat/<layer>/, on
 * the include path):
 *   ucx113  UCX 1.13.x
 *   ucx116  UCX 1.16.x to 1.22.x
 * The layer owns every UCX table whose layout differs (md ops, component,
 * iface internal ops) and adapts them to the version-free functions below,
 * which the transport implements. Nothing outside compat/ tests the UCX
 * version.
 */
#ifndef UCT_DCX_COMPAT_H_
#define UCT_DCX_COMPAT_H_

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/config/parser.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/memory/rcache.h>

/* The layer's types and macros: uct_dcx_rcache_config_t,
 * UCT_DCX_RCACHE_CONFIG_TABLE, UCT_DCX_RCACHE_OPS, UCT_DCX_COMPAT_RKEY_OPS,
 * UCT_DCX_IFACE_MPOOL_CONFIG_FIELDS, ucs_align_up. */
#include "dcx_compat_layer.h"


/* A UCS stub (ucs_empty_function*) in a slot of another type. Newer UCX
 * declares the stubs with (void), so a direct cast trips
 * -Wcast-function-type; a cast through void (*)(void) is the sanctioned
 * escape, in every release. */
#define UCT_DCX_STUB(_type, _stub) ((_type)(void (*)(void))(_stub))


/* --- implemented by the transport, called by the layer ------------------ */

/* What a memory domain offers, whatever the release's attribute struct. */
typedef struct uct_dcx_md_caps {
    uint64_t flags; /* UCT_MD_FLAG_* */
    uint64_t reg_mem_types;
    uint64_t access_mem_types;
    size_t max_reg;
    size_t rkey_packed_size;
    size_t reg_alignment;
    ucs_linear_func_t reg_cost;
} uct_dcx_md_caps_t;

void uct_dcx_md_caps_get(uct_md_h md, uct_dcx_md_caps_t *caps);

ucs_status_t uct_dcx_md_open(uct_component_t *component, const char *md_name,
                             const uct_md_config_t *config, uct_md_h *md_p);

void uct_dcx_md_close(uct_md_h md);

ucs_status_t uct_dcx_query_md_resources(uct_component_t *component,
                                        uct_md_resource_desc_t **resources_p,
                                        unsigned *num_resources_p);

/* The component; its remote key slots come from the layer
 * (UCT_DCX_COMPAT_RKEY_OPS). */
extern uct_component_t uct_dcx_component;

/* @a flags: UCT_MD_MEM_FLAG_* */
ucs_status_t uct_dcx_md_mem_reg_flags(uct_md_h md, void *address, size_t length,
                                      unsigned flags, uct_mem_h *memh_p);

ucs_status_t
uct_dcx_md_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params);

ucs_status_t
uct_dcx_md_mkey_pack_memh(uct_md_h md, uct_mem_h memh, void *rkey_buffer);

ucs_status_t uct_dcx_rkey_unpack_buffer(const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p);

/* Whether an interface reaches the given addresses; on 0, a reason in
 * @a info (which may be NULL). */
int uct_dcx_iface_addr_is_reachable(uct_iface_h iface,
                                    const uct_device_addr_t *dev_addr,
                                    const uct_iface_addr_t *iface_addr,
                                    char *info, size_t max);

/* Whether @a ep sends to the interface with these addresses. */
int uct_dcx_ep_is_connected_to(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                               const uct_iface_addr_t *iface_addr);

/* The kind of operation a performance estimate is for. */
typedef enum {
    UCT_DCX_PERF_OP_ANY, /* iface_query: no operation named */
    UCT_DCX_PERF_OP_SHORT, /* inline: the CPU writes the data into the WQE */
    UCT_DCX_PERF_OP_BCOPY, /* from a bounce buffer the NIC reads */
    UCT_DCX_PERF_OP_ZCOPY /* from user memory, with a completion to retire */
} uct_dcx_perf_op_t;

/* The device's figures for UCP's protocol selection (uct_perf_attr_t). */
typedef struct uct_dcx_iface_perf {
    double send_pre_overhead; /* CPU time to post one work request, s */
    double send_post_overhead; /* CPU time after posting (doorbell, CQE), s */
    double recv_overhead; /* CPU time to receive one message, s */
    double bandwidth; /* the port's payload bandwidth, bytes/s,
                                  shared by the node's processes */
    double latency; /* one-way latency, s */
    size_t max_inflight_eps; /* endpoints with work in flight at once */
} uct_dcx_iface_perf_t;

void uct_dcx_iface_perf_get(uct_iface_h iface, uct_dcx_perf_op_t op,
                            uct_dcx_iface_perf_t *perf);

/* Scatter-gather put (uct_ep_put_sgl_zcopy, UCX >= 1.22): the most elements
 * one call takes, 0 when disabled (UCX_DCX_PUT_SGL=n). */
size_t uct_dcx_iface_put_sgl_max(uct_iface_h iface);

ucs_status_t
uct_dcx_ep_put_sgl_zcopy(uct_ep_h ep, void *const *buffers,
                         const size_t *lengths, uct_mem_h const *memhs,
                         const uint64_t *remote_addrs, uct_rkey_t const *rkeys,
                         const size_t *counts, const size_t *strides,
                         size_t count, uct_completion_t *comp);


/* --- implemented by the layer, called by the transport ------------------ */

extern uct_md_ops_t uct_dcx_md_ops;
extern uct_iface_internal_ops_t uct_dcx_iface_internal_ops;

/* The transport's uct_iface_ops_t.iface_is_reachable for this release. */
int uct_dcx_compat_iface_is_reachable(const uct_iface_h iface,
                                      const uct_device_addr_t *dev_addr,
                                      const uct_iface_addr_t *iface_addr);

/* Parse a global configuration table registered as @a entry. */
ucs_status_t
uct_dcx_compat_config_fill(void *opts, ucs_config_global_list_entry_t *entry);

/* A plain (malloc-backed) memory pool. */
ucs_status_t uct_dcx_compat_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                       size_t alignment, unsigned grow,
                                       unsigned max_elems, ucs_mpool_ops_t *ops,
                                       const char *name);

/* Registration cache parameters and lookup. */
void uct_dcx_compat_rcache_params(ucs_rcache_params_t *params,
                                  const uct_dcx_rcache_config_t *config);

double uct_dcx_compat_rcache_overhead(const uct_dcx_rcache_config_t *config);

ucs_status_t uct_dcx_compat_rcache_get(ucs_rcache_t *rcache, void *address,
                                       size_t length, void *arg,
                                       ucs_rcache_region_t **region_p);

#endif
