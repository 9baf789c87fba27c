/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "demo_uct.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void demo_check(ucs_status_t status, const char *what)
{
    if (status != UCS_OK) {
        fprintf(stderr, "dcx demo: %s: %s\n", what, ucs_status_string(status));
        exit(1);
    }
}

void demo_uct_open(demo_uct_t *d, const char *const *iface_settings)
{
    uct_component_h *components;
    uct_component_attr_t cattr;
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_iface_params_t params;
    unsigned i, num;
    char name[64], prefixed[80], dev_port[64];
    const char *dev;
    ucs_status_t status;
    void *plugin;
    const char *eq;

    memset(d, 0, sizeof(*d));
    demo_check(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                        &d->async),
               "async context");
    demo_check(uct_worker_create(d->async, UCS_THREAD_MODE_SINGLE, &d->worker),
               "worker");
    demo_check(uct_query_components(&components, &num), "components");
    for (i = 0; i < num; ++i) {
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        uct_component_query(components[i], &cattr);
        if (!strcmp(cattr.name, "dcx")) {
            d->component = components[i];
        }
    }
    uct_release_component_list(components);
    if (d->component == NULL) {
        fprintf(stderr, "dcx demo: no dcx component: run under dcx-run\n");
        exit(1);
    }

    demo_check(uct_md_config_read(d->component, NULL, NULL, &md_config),
               "md config");
    /* the model's API face by default; DCX_DEMO_DEVICE names another
     * (dcxemu_mlx5_0: the device's mlx5 face, preloaded) */
    dev = getenv("DCX_DEMO_DEVICE");
    if (dev == NULL) {
        dev = "dcxemu0";
    }
    snprintf(dev_port, sizeof(dev_port), "%s:1", dev);
    demo_check(uct_md_open(d->component, dev, md_config, &d->md), "md open");
    uct_config_release(md_config);
    demo_check(uct_md_query(d->md, &d->md_attr), "md query");

    demo_check(uct_md_iface_config_read(d->md, "dcx", NULL, NULL,
                                        &iface_config),
               "iface config");
    for (i = 0; (iface_settings != NULL) && (iface_settings[i] != NULL); ++i) {
        eq = strchr(iface_settings[i], '=');
        if ((eq == NULL) ||
            ((size_t)(eq - iface_settings[i]) >= sizeof(name))) {
            continue;
        }
        memcpy(name, iface_settings[i], eq - iface_settings[i]);
        name[eq - iface_settings[i]] = '\0';
        /* UCX 1.13 matches a name without the table's prefix, 1.16 and
         * later only with it (DCX_...). */
        status = uct_config_modify(iface_config, name, eq + 1);
        if (status == UCS_ERR_NO_ELEM) {
            snprintf(prefixed, sizeof(prefixed), "DCX_%s", name);
            status = uct_config_modify(iface_config, prefixed, eq + 1);
        }
        demo_check(status, iface_settings[i]);
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "dcx";
    params.mode.device.dev_name = dev_port;
    demo_check(uct_iface_open(d->md, d->worker, &params, iface_config,
                              &d->iface),
               "iface open");
    uct_config_release(iface_config);
    demo_check(uct_iface_query(d->iface, &d->iface_attr), "iface query");
    uct_iface_progress_enable(d->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    /* The extensions are exported by the plugin, which UCX >= 1.22 loads
     * itself, with RTLD_LOCAL: look in the plugin (found by its soname),
     * or in the global scope where dcx-run preloaded it. */
    plugin = dlopen("libuct_dcx.so.0", RTLD_NOLOAD | RTLD_LAZY);
    if (plugin == NULL) {
        plugin = RTLD_DEFAULT;
    }
    d->view_create  = (demo_view_create_fn_t)dlsym(plugin,
                                                   "uct_dcx_mem_view_create");
    d->view_destroy = (demo_view_destroy_fn_t)dlsym(plugin,
                                                    "uct_dcx_mem_view_destroy");
    d->query_umr    = (demo_query_umr_fn_t)dlsym(plugin,
                                                 "uct_dcx_iface_query_umr");
    if ((d->view_create == NULL) || (d->view_destroy == NULL) ||
        (d->query_umr == NULL)) {
        fprintf(stderr,
                "dcx demo: the dcx plugin's extensions are not "
                "visible: run under dcx-run, or with UCX >= 1.22 with dcx in "
                "UCX's plugin path\n");
        exit(1);
    }
}

void demo_uct_close(demo_uct_t *d)
{
    uct_iface_close(d->iface);
    uct_md_close(d->md);
    uct_worker_destroy(d->worker);
    ucs_async_context_destroy(d->async);
}

void demo_blob_send(int fd, const void *data, uint32_t len)
{
    if ((write(fd, &len, sizeof(len)) != sizeof(len)) ||
        ((len > 0) && (write(fd, data, len) != (ssize_t)len))) {
        perror("dcx demo: write");
        exit(1);
    }
}

void *demo_blob_recv(int fd, uint32_t *len_p)
{
    uint32_t len;
    size_t got = 0;
    ssize_t n;
    char *buf;

    if (read(fd, &len, sizeof(len)) != sizeof(len)) {
        fprintf(stderr, "dcx demo: the peer went away\n");
        exit(1);
    }
    buf = malloc(len + 1);
    while (got < len) {
        n = read(fd, buf + got, len - got);
        if (n <= 0) {
            fprintf(stderr, "dcx demo: short read from the peer\n");
            exit(1);
        }
        got += n;
    }
    *len_p = len;
    return buf;
}

void demo_send_addr(demo_uct_t *d, int fd, uct_mem_h memh)
{
    size_t dev_len   = d->iface_attr.device_addr_len;
    size_t iface_len = d->iface_attr.iface_addr_len;
    size_t rkey_len  = d->md_attr.rkey_packed_size;
    char *buf        = malloc(dev_len + iface_len + rkey_len);

    demo_check(uct_iface_get_device_address(d->iface, (uct_device_addr_t *)buf),
               "device address");
    demo_check(uct_iface_get_address(d->iface,
                                     (uct_iface_addr_t *)(buf + dev_len)),
               "iface address");
    demo_check(uct_md_mkey_pack(d->md, memh, buf + dev_len + iface_len),
               "key pack");
    demo_blob_send(fd, buf, dev_len + iface_len + rkey_len);
    free(buf);
}

void demo_connect(demo_uct_t *d, int fd, uct_ep_h *ep_p,
                  uct_rkey_bundle_t *rkey_p)
{
    size_t dev_len = d->iface_attr.device_addr_len;
    size_t if_len  = d->iface_attr.iface_addr_len;
    uct_ep_params_t ep_params;
    uint32_t len;
    char *buf = demo_blob_recv(fd, &len);

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                           UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.iface      = d->iface;
    ep_params.dev_addr   = (const uct_device_addr_t *)buf;
    ep_params.iface_addr = (const uct_iface_addr_t *)(buf + dev_len);
    demo_check(uct_ep_create(&ep_params, ep_p), "ep create");
    demo_check(uct_rkey_unpack(d->component, buf + dev_len + if_len, rkey_p),
               "rkey unpack");
    free(buf);
}

void demo_flush(demo_uct_t *d)
{
    ucs_status_t status;

    while ((status = uct_iface_flush(d->iface, 0, NULL)) == UCS_INPROGRESS) {
        uct_worker_progress(d->worker);
    }
    demo_check(status, "flush");
}
