/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Registration of the dcx component and transport, from a constructor: it
 * runs when the plugin is preloaded or linked (UCX 1.13 to 1.21 dlopen only
 * the modules compiled into them) and when UCX 1.22 or later dlopens it
 * from its module directory or UCX_PLUGIN_PATH. It is linked with
 * -z nodelete: UCX's unregister calls leave the component in its lists.
 */
#include "dcx_guard.h"
#include "dcx_iface.h"

#include <ucs/config/parser.h>
#include <ucs/debug/log.h>

#include <dlfcn.h>
#include <string.h>


static const char *uct_dcx_object_path(const void *address)
{
    Dl_info info;

    if (!dladdr(address, &info) || (info.dli_fname == NULL)) {
        return "<unknown>";
    }
    return info.dli_fname;
}

static uct_component_t *uct_dcx_find_registered(void)
{
    uct_component_t *component;

    ucs_list_for_each(component, &uct_components_list, list) {
        if (!strcmp(component->name, uct_dcx_component.name)) {
            return component;
        }
    }
    return NULL;
}

static void UCS_F_CTOR uct_dcx_init(void)
{
    uct_dcx_abi_t built, running;
    uct_component_t *other;
    char reason[512];

    uct_dcx_abi_built(&built);
    uct_dcx_abi_running(&running);
    if (!uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason))) {
        ucs_warn("%s; dcx is not registered", reason);
        return;
    }

    other = uct_dcx_find_registered();
    if (other != NULL) {
        ucs_warn("dcx: already registered by %s; this second copy (%s) "
                 "registers nothing", uct_dcx_object_path(other),
                 uct_dcx_object_path(&uct_dcx_component));
        return;
    }

    uct_component_register(&uct_dcx_component);
    uct_tl_register(&uct_dcx_component, &uct_dcx_tl);
    ucs_list_add_tail(&ucs_config_global_list,
                      &uct_dcx_global_config_entry.list);
}
