/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * What the UCT demo programs share: opening dcx on the software device,
 * exchanging addresses and keys over a socket, and the dcx extensions
 * (found in the plugin that dcx-run preloads).
 */
#ifndef DCX_DEMO_UCT_H_
#define DCX_DEMO_UCT_H_

#include <uct/api/uct.h>
#include <uct/ib/dcx/dcx.h>
#include <ucs/async/async_fwd.h>

#include <stdint.h>

typedef ucs_status_t (*demo_view_create_fn_t)(uct_iface_h, uct_mem_h, void *,
                                              size_t, size_t, size_t,
                                              uct_mem_h *);
typedef ucs_status_t (*demo_view_destroy_fn_t)(uct_iface_h, uct_mem_h);
typedef ucs_status_t (*demo_query_umr_fn_t)(uct_iface_h,
                                            uct_dcx_umr_counters_t *);

typedef struct {
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_component_h component;
    uct_md_h md;
    uct_md_attr_t md_attr;
    uct_iface_h iface;
    uct_iface_attr_t iface_attr;
    demo_view_create_fn_t view_create;
    demo_view_destroy_fn_t view_destroy;
    demo_query_umr_fn_t query_umr;
} demo_uct_t;

/* Exit with a message unless status is UCS_OK. */
void demo_check(ucs_status_t status, const char *what);

/* Open dcx on dcxemu0:1 with extra iface settings ("NAME=VALUE" pairs,
 * NULL-terminated, may be NULL). */
void demo_uct_open(demo_uct_t *d, const char *const *iface_settings);
void demo_uct_close(demo_uct_t *d);

/* Length-prefixed blobs over a socket. */
void demo_blob_send(int fd, const void *data, uint32_t len);
void *demo_blob_recv(int fd, uint32_t *len_p);

/* Send our addresses and the packed key of memh; connect to the peer's. */
void demo_send_addr(demo_uct_t *d, int fd, uct_mem_h memh);
void demo_connect(demo_uct_t *d, int fd, uct_ep_h *ep_p,
                  uct_rkey_bundle_t *rkey_p);

/* Progress until the flush of the interface completes. */
void demo_flush(demo_uct_t *d);

#endif
