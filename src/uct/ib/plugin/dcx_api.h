/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The public extension API (include/uct/ib/dcx/dcx.h) as the transport
 * hands it to the plugin, which exports it: programs link against or look
 * up libuct_dcx.so, and the transport behind it is opened only after the
 * version guard (dcx_loader.c).
 */
#ifndef UCT_DCX_API_H_
#define UCT_DCX_API_H_

#include <uct/ib/dcx/dcx.h>


typedef struct uct_dcx_api {
    ucs_status_t (*iface_query_umr)(uct_iface_h iface,
                                    uct_dcx_umr_counters_t *counters);
    ucs_status_t (*iface_query_tx)(uct_iface_h iface,
                                   uct_dcx_tx_counters_t *counters);
    ucs_status_t (*mem_view_create)(uct_iface_h iface, uct_mem_h memh,
                                    void *address, size_t length, size_t stride,
                                    size_t count, uct_mem_h *view_p);
    ucs_status_t (*mem_view_create_iov)(uct_iface_h iface, const uct_iov_t *iov,
                                        size_t iovcnt, uct_mem_h *view_p);
    ucs_status_t (*mem_view_destroy)(uct_iface_h iface, uct_mem_h view);
} uct_dcx_api_t;


/* The transport's entry (libdcx_transport.so): registers the component and
 * fills @a api. Looked up by name, so it is the library's one export. */
#define UCT_DCX_TRANSPORT_REGISTER_SYMBOL "uct_dcx_transport_register"

typedef void (*uct_dcx_transport_register_func_t)(uct_dcx_api_t *api);

#endif
