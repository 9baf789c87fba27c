/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */

#include "bench_uct.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_uct_check(const bench_uct_resource_t *r, int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "%s: %s failed\n", r->prog, what);
        exit(1);
    }
}

#define BENCH_UCT_OK(_r, _call) bench_uct_check(_r, (_call) == UCS_OK, #_call)

/* Does the memory domain 'md_name' of 'component' offer the transport? */
static int bench_uct_md_offers(const bench_uct_resource_t *r,
                               uct_component_h component, const char *md_name)
{
    uct_tl_resource_desc_t *tls;
    uct_md_config_t *md_config;
    unsigned k, num_tls;
    int found = 0;
    uct_md_h md;

    BENCH_UCT_OK(r, uct_md_config_read(component, NULL, NULL, &md_config));
    if (uct_md_open(component, md_name, md_config, &md) != UCS_OK) {
        uct_config_release(md_config);
        return 0;
    }
    uct_config_release(md_config);
    if (uct_md_query_tl_resources(md, &tls, &num_tls) == UCS_OK) {
        for (k = 0; k < num_tls; ++k) {
            found |= !strcmp(tls[k].tl_name, r->tl_name) &&
                     !strcmp(tls[k].dev_name, r->dev_name);
        }
        uct_release_tl_resource_list(tls);
    }
    uct_md_close(md);
    return found;
}

void bench_uct_find_resource(bench_uct_resource_t *r, const char *hint)
{
    uct_component_h *components;
    uct_component_attr_t attr;
    uct_md_resource_desc_t *mds;
    unsigned i, j, num;

    r->component = NULL;
    BENCH_UCT_OK(r, uct_query_components(&components, &num));
    for (i = 0; (i < num) && (r->component == NULL); ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        BENCH_UCT_OK(r, uct_component_query(components[i], &attr));
        mds = calloc(attr.md_resource_count + 1, sizeof(*mds));
        bench_uct_check(r, mds != NULL, "calloc");
        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        BENCH_UCT_OK(r, uct_component_query(components[i], &attr));
        for (j = 0; (j < attr.md_resource_count) && (r->component == NULL);
             ++j) {
            if (bench_uct_md_offers(r, components[i], mds[j].md_name)) {
                r->component = components[i];
                snprintf(r->md_name, sizeof(r->md_name), "%s", mds[j].md_name);
            }
        }
        free(mds);
    }
    uct_release_component_list(components);
    if (r->component == NULL) {
        fprintf(stderr, "%s: no transport %s on device %s (%s)\n", r->prog,
                r->tl_name, r->dev_name, hint);
        exit(1);
    }
}

void bench_uct_side_open(const bench_uct_resource_t *r, bench_uct_side_t *s)
{
    uct_iface_params_t params = {};
    uct_iface_config_t *iface_config;
    uct_md_config_t *md_config;

    BENCH_UCT_OK(r, ucs_async_context_create(UCS_ASYNC_MODE_POLL, &s->async));
    BENCH_UCT_OK(r, uct_worker_create(s->async, UCS_THREAD_MODE_SINGLE,
                                      &s->worker));
    BENCH_UCT_OK(r, uct_md_config_read(r->component, NULL, NULL, &md_config));
    BENCH_UCT_OK(r, uct_md_open(r->component, r->md_name, md_config, &s->md));
    uct_config_release(md_config);
    BENCH_UCT_OK(r, uct_md_iface_config_read(s->md, r->tl_name, NULL, NULL,
                                             &iface_config));
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = r->tl_name;
    params.mode.device.dev_name = r->dev_name;
    BENCH_UCT_OK(r, uct_iface_open(s->md, s->worker, &params, iface_config,
                                   &s->iface));
    uct_config_release(iface_config);
    uct_iface_progress_enable(s->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

void bench_uct_side_close(bench_uct_side_t *s)
{
    uct_iface_close(s->iface);
    uct_md_close(s->md);
    uct_worker_destroy(s->worker);
    ucs_async_context_destroy(s->async);
}
