/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The dcx transport: configuration, devices and interface.
 */
#include "dcx_iface.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>


ucs_config_field_t uct_dcx_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_dcx_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"NUM_DCI", "32",
     "Number of DC initiator QPs (DCIs) in the pool of each interface. An\n"
     "endpoint holds a DCI only while it has outstanding operations, so the\n"
     "pool bounds the number of peers served concurrently, not the number\n"
     "of endpoints.",
     ucs_offsetof(uct_dcx_iface_config_t, num_dci), UCS_CONFIG_TYPE_UINT},

    {"TX_QUEUE_LEN", "256",
     "Length of the send queue of each DCI.",
     ucs_offsetof(uct_dcx_iface_config_t, tx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"RX_QUEUE_LEN", "4095",
     "Number of receive buffers posted to the shared receive queue of the\n"
     "interface's DC target (DCT).",
     ucs_offsetof(uct_dcx_iface_config_t, rx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"SEG_SIZE", "8256",
     "Size of bounce buffers used for bcopy sends and for receives: the\n"
     "largest active message that is not zero-copy.",
     ucs_offsetof(uct_dcx_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {NULL}
};


static ucs_status_t
uct_dcx_query_tl_devices(uct_md_h uct_md, uct_tl_device_resource_t **devices_p,
                         unsigned *num_devices_p)
{
    uct_dcx_md_t *md = ucs_derived_of(uct_md, uct_dcx_md_t);
    uct_tl_device_resource_t *devices;
    unsigned i;

    if ((md->device == NULL) || (md->device->num_ports == 0)) {
        *devices_p     = NULL;
        *num_devices_p = 0;
        return UCS_OK;
    }

    devices = ucs_calloc(md->device->num_ports, sizeof(*devices),
                         "dcx tl devices");
    if (devices == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < md->device->num_ports; ++i) {
        ucs_snprintf_zero(devices[i].name, sizeof(devices[i].name), "%s:%u",
                          md->device->name, md->device->ports[i]);
        devices[i].type       = UCT_DEVICE_TYPE_NET;
        devices[i].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    }

    *devices_p     = devices;
    *num_devices_p = md->device->num_ports;
    return UCS_OK;
}

static ucs_status_t
uct_dcx_iface_open(uct_md_h md, uct_worker_h worker,
                   const uct_iface_params_t *params,
                   const uct_iface_config_t *tl_config, uct_iface_h *iface_p)
{
    /* The DCI pool and DCT interface are the next milestone (see NEWS);
     * devices are listed so that discovery can be checked on real hosts. */
    ucs_error("dcx: this version discovers devices but has no data path yet");
    return UCS_ERR_UNSUPPORTED;
}

uct_tl_t uct_dcx_tl = {
    .name          = "dcx",
    .query_devices = uct_dcx_query_tl_devices,
    .iface_open    = uct_dcx_iface_open,
    .config        = {
        .name      = "dcx transport",
        .prefix    = "DCX_",
        .table     = uct_dcx_iface_config_table,
        .size      = sizeof(uct_dcx_iface_config_t),
    }
};
