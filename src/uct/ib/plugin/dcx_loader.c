/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The plugin UCX loads (libuct_dcx.so): a guard in front of the transport.
 * It runs from a constructor when the plugin is preloaded or linked (UCX
 * 1.13-1.21 dlopen only the modules compiled into them) or when UCX 1.22 and
 * later dlopen it from its module directory or UCX_PLUGIN_PATH.
 *
 * Every UCX release has the same sonames, so any UCX may load any build of
 * dcx. The transport (libdcx_transport.so) binds symbols that only the
 * release it was built for has, and the dynamic loader resolves data
 * symbols before any constructor runs: loaded into another release it would
 * end the process with "undefined symbol". So this library references only
 * what every release exports (the base class sizes, the component list),
 * checks the running UCX against the one it was built for, and only then
 * opens the transport, which lies next to it, and registers it. It logs with stdio:
 * ucs_warn reads UCX's global options, whose layout differs by release.
 *
 * Linked with -z nodelete, as is the transport: UCX's unregister calls
 * leave a component in its lists.
 */
#include "dcx_api.h"
#include "dcx_guard.h"

#include <uct/base/uct_component.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


#define UCT_DCX_TRANSPORT_LIB "libdcx_transport.so.0"
#define UCT_DCX_API_EXPORT    __attribute__((visibility("default")))


/* The public API's implementation; empty when dcx is not registered. */
static uct_dcx_api_t uct_dcx_api;


static void uct_dcx_loader_warn(const char *format, ...)
{
    char host[64] = "";
    va_list ap;

    gethostname(host, sizeof(host) - 1);
    fprintf(stderr, "[%s:%d] dcx WARN  ", host, (int)getpid());
    va_start(ap, format);
    vfprintf(stderr, format, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const char *uct_dcx_loader_object_path(const void *address)
{
    Dl_info info;

    if (!dladdr(address, &info) || (info.dli_fname == NULL)) {
        return "<unknown>";
    }
    return info.dli_fname;
}

/* Another copy of dcx (installed and build tree, say) registered first. */
static const uct_component_t *uct_dcx_loader_registered(void)
{
    const uct_component_t *component;

    ucs_list_for_each(component, &uct_components_list, list) {
        if (!strcmp(component->name, "dcx")) {
            return component;
        }
    }
    return NULL;
}

/* The transport built with this plugin lies next to it (the build tree,
 * an install). */
static void *uct_dcx_loader_open_transport(char *path, size_t max)
{
    const char *self = uct_dcx_loader_object_path(
            (const void *)uct_dcx_loader_open_transport);
    const char *slash = strrchr(self, '/');

    snprintf(path, max, "%.*s%s", (slash == NULL) ? 0 : (int)(slash - self + 1),
             self, UCT_DCX_TRANSPORT_LIB);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

static void __attribute__((constructor)) uct_dcx_loader_init(void)
{
    uct_dcx_transport_register_func_t register_func;
    const uct_component_t *other;
    uct_dcx_abi_t built, running;
    char reason[512], path[PATH_MAX];
    void *handle;

    uct_dcx_abi_built(&built);
    uct_dcx_abi_running(&running);
    if (!uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason))) {
        uct_dcx_loader_warn("%s; dcx is not registered", reason);
        return;
    }

    other = uct_dcx_loader_registered();
    if (other != NULL) {
        uct_dcx_loader_warn("dcx: already registered by %s; "
                            "this second copy (%s) registers nothing",
                            uct_dcx_loader_object_path(other),
                            uct_dcx_loader_object_path(
                                    (const void *)uct_dcx_loader_init));
        return;
    }

    handle = uct_dcx_loader_open_transport(path, sizeof(path));
    if (handle == NULL) {
        uct_dcx_loader_warn("dcx: %s cannot load its transport: %s; "
                            "dcx is not registered",
                            uct_dcx_loader_object_path(
                                    (const void *)uct_dcx_loader_init),
                            dlerror());
        return;
    }

    register_func = (uct_dcx_transport_register_func_t)
            dlsym(handle, UCT_DCX_TRANSPORT_REGISTER_SYMBOL);
    if (register_func == NULL) {
        uct_dcx_loader_warn("dcx: %s has no %s: not a dcx transport; "
                            "dcx is not registered",
                            path, UCT_DCX_TRANSPORT_REGISTER_SYMBOL);
        return;
    }

    register_func(&uct_dcx_api);
}


/* --- the public API (include/uct/ib/dcx/dcx.h) ---------------------------- */

/* Without a registered transport no interface is a dcx interface. */
#define UCT_DCX_API_CALL(_func, ...)                       \
    ((uct_dcx_api._func == NULL) ? UCS_ERR_INVALID_PARAM : \
                                   uct_dcx_api._func(__VA_ARGS__))

UCT_DCX_API_EXPORT ucs_status_t
uct_dcx_iface_query_umr(uct_iface_h iface, uct_dcx_umr_counters_t *counters)
{
    return UCT_DCX_API_CALL(iface_query_umr, iface, counters);
}

UCT_DCX_API_EXPORT ucs_status_t
uct_dcx_iface_query_tx(uct_iface_h iface, uct_dcx_tx_counters_t *counters)
{
    return UCT_DCX_API_CALL(iface_query_tx, iface, counters);
}

UCT_DCX_API_EXPORT ucs_status_t uct_dcx_mem_view_create(
        uct_iface_h iface, uct_mem_h memh, void *address, size_t length,
        size_t stride, size_t count, uct_mem_h *view_p)
{
    return UCT_DCX_API_CALL(mem_view_create, iface, memh, address, length,
                            stride, count, view_p);
}

UCT_DCX_API_EXPORT ucs_status_t
uct_dcx_mem_view_create_iov(uct_iface_h iface, const uct_iov_t *iov,
                            size_t iovcnt, uct_mem_h *view_p)
{
    return UCT_DCX_API_CALL(mem_view_create_iov, iface, iov, iovcnt, view_p);
}

UCT_DCX_API_EXPORT ucs_status_t uct_dcx_mem_view_destroy(uct_iface_h iface,
                                                         uct_mem_h view)
{
    return UCT_DCX_API_CALL(mem_view_destroy, iface, view);
}
