/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Registration of the dcx component and transport. UCX 1.13 only dlopens
 * modules compiled into it, so the plugin registers itself from a
 * constructor when it is preloaded or linked. It is linked with
 * -z nodelete: UCX's unregister calls leave the component in its lists.
 */
#include "dcx_guard.h"
#include "dcx_iface.h"

#include <ucs/config/parser.h>
#include <ucs/debug/log.h>

#include <dlfcn.h>
#include <string.h>


static ucs_config_global_list_entry_t uct_dcx_global_config_entry = {
    .name   = "dcx devices",
    .prefix = "DCX_",
    .table  = uct_dcx_global_config_table,
    .size   = sizeof(uct_dcx_global_config_t)
};


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
