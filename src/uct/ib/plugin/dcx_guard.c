/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "dcx_guard.h"

#include <uct/base/uct_iface.h>
#include <uct/api/version.h>

#include <dlfcn.h>
#include <stdio.h>


/* Layout-critical build settings (ENABLE_ASSERT, ENABLE_STATS) change these
 * sizes; configure pinned them to the installed libuct's. */
_Static_assert(sizeof(uct_base_iface_t) == UCT_DCX_UCX_BASE_IFACE_SIZE,
               "uct_base_iface_t differs from the installed libuct's: "
               "ucx_build_config.h does not match the installed UCX");
_Static_assert(sizeof(uct_base_ep_t) == UCT_DCX_UCX_BASE_EP_SIZE,
               "uct_base_ep_t differs from the installed libuct's: "
               "ucx_build_config.h does not match the installed UCX");


typedef void (*uct_dcx_ucp_get_version_func_t)(unsigned *major_version,
                                               unsigned *minor_version,
                                               unsigned *release_number);


void uct_dcx_abi_built(uct_dcx_abi_t *abi)
{
    abi->base_iface_size = sizeof(uct_base_iface_t);
    abi->base_ep_size    = sizeof(uct_base_ep_t);
    abi->version_known   = 1;
    abi->major           = UCT_VERNO_MAJOR;
    abi->minor           = UCT_VERNO_MINOR;
    abi->release         = UCT_VERNO_PATCH;
}

void uct_dcx_abi_running(uct_dcx_abi_t *abi)
{
    uct_dcx_ucp_get_version_func_t get_version;

    abi->base_iface_size = uct_base_iface_t_class.size;
    abi->base_ep_size    = uct_base_ep_t_class.size;

    /* libucp is not a dependency: look it up only if the process has it. */
    get_version = (uct_dcx_ucp_get_version_func_t)dlsym(RTLD_DEFAULT,
                                                        "ucp_get_version");
    if (get_version == NULL) {
        abi->version_known = 0;
        abi->major = abi->minor = abi->release = 0;
        return;
    }

    get_version(&abi->major, &abi->minor, &abi->release);
    abi->version_known = 1;
}

static void uct_dcx_abi_str(const uct_dcx_abi_t *abi, char *buf, size_t max)
{
    if (abi->version_known) {
        snprintf(buf, max,
                 "UCX %u.%u.%u (uct_base_iface_t %zu B, "
                 "uct_base_ep_t %zu B)",
                 abi->major, abi->minor, abi->release, abi->base_iface_size,
                 abi->base_ep_size);
    } else {
        snprintf(buf, max,
                 "an unknown UCX version (uct_base_iface_t %zu B, "
                 "uct_base_ep_t %zu B)",
                 abi->base_iface_size, abi->base_ep_size);
    }
}

int uct_dcx_abi_compatible(const uct_dcx_abi_t *built,
                           const uct_dcx_abi_t *running, char *reason,
                           size_t max)
{
    char built_str[128], running_str[128];

    if ((built->base_iface_size == running->base_iface_size) &&
        (built->base_ep_size == running->base_ep_size) &&
        (!running->version_known || ((built->major == running->major) &&
                                     (built->minor == running->minor) &&
                                     (built->release == running->release)))) {
        return 1;
    }

    uct_dcx_abi_str(built, built_str, sizeof(built_str));
    uct_dcx_abi_str(running, running_str, sizeof(running_str));
    snprintf(reason, max,
             "dcx was built for %s but this process runs %s; "
             "rebuild dcx against the running UCX",
             built_str, running_str);
    return 0;
}
