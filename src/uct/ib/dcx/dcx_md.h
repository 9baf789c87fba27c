/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#ifndef UCT_DCX_MD_H_
#define UCT_DCX_MD_H_

#include "dcx_device.h"

#include <uct/base/uct_md.h>
#include <ucs/config/types.h>


/* Name of the memory domain a host without DC devices shows, so that the
 * component is visible (and says "no supported devices") in ucx_info. */
#define UCT_DCX_NO_DEVICE_MD_NAME "dcx"


typedef struct uct_dcx_md_config {
    uct_md_config_t    super;
    ucs_ternary_auto_value_t devx; /* open devices with DEVX (needed by UMR) */
} uct_dcx_md_config_t;


typedef struct uct_dcx_md {
    uct_md_t               super;
    const uct_dcx_device_t *device; /* NULL: the no-device memory domain */
    struct ibv_context     *ctx;
    struct ibv_pd          *pd;
    int                    devx;    /* ctx was opened with DEVX */
} uct_dcx_md_t;


extern uct_component_t uct_dcx_component;
extern ucs_config_field_t uct_dcx_md_config_table[];
extern ucs_config_field_t uct_dcx_global_config_table[];

#endif
