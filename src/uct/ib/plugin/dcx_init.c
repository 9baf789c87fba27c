/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The transport library's entry: the plugin (dcx_loader.c) calls it once
 * the running UCX is the release dcx was built for and no other copy of
 * dcx is registered.
 */
#include "dcx_api.h"
#include "../dcx/dcx_iface.h"

#include <ucs/config/parser.h>


void __attribute__((visibility("default")))
uct_dcx_transport_register(uct_dcx_api_t *api);

void uct_dcx_transport_register(uct_dcx_api_t *api)
{
    api->iface_query_umr     = uct_dcx_iface_query_umr;
    api->iface_query_tx      = uct_dcx_iface_query_tx;
    api->mem_view_create     = uct_dcx_mem_view_create;
    api->mem_view_create_iov = uct_dcx_mem_view_create_iov;
    api->mem_view_destroy    = uct_dcx_mem_view_destroy;

    uct_component_register(&uct_dcx_component);
    uct_tl_register(&uct_dcx_component, &uct_dcx_tl);
    ucs_list_add_tail(&ucs_config_global_list,
                      &uct_dcx_global_config_entry.list);
}
