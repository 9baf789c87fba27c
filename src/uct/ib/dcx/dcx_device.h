/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Discovery of DC-capable devices through the device seam.
 */
#ifndef UCT_DCX_DEVICE_H_
#define UCT_DCX_DEVICE_H_

#include "../seam/dcx_seam.h"

#include <uct/api/uct_def.h>
#include <ucs/config/parser.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UCT_DCX_MAX_PORTS 8


/* One DC-capable device and its usable ports. */
typedef struct uct_dcx_device {
    char name[UCT_DEVICE_NAME_MAX]; /* e.g. "mlx5_0" */
    const uct_dcx_binding_t *binding;
    unsigned binding_index; /* device index in its binding */
    unsigned num_ports;
    uint8_t ports[UCT_DCX_MAX_PORTS]; /* 1-based numbers */
} uct_dcx_device_t;


/* Process-wide settings of device discovery (the "DCX" global table). */
typedef struct uct_dcx_global_config {
    char *verbs_lib;
    char *mlx5_lib;
    int emu; /* also list the software DC device's devices */
    char *emu_lib;
} uct_dcx_global_config_t;


/**
 * The DC-capable devices of all bindings, discovered once per process.
 * Devices without mlx5, without an active port or failing the DC probe are
 * skipped with a debug message. The array stays valid for the process
 * lifetime.
 */
void uct_dcx_devices_get(const uct_dcx_device_t **devices_p,
                         unsigned *num_devices_p);


/**
 * List the DC-capable devices of one binding into a caller's array (used by
 * discovery and by tests). Returns how many were found, at most @a max.
 */
unsigned uct_dcx_devices_scan(const uct_dcx_binding_t *binding,
                              uct_dcx_device_t *devices, unsigned max);


/**
 * Probe whether a port of an open device can run DC: create a DCT on a
 * scratch PD/CQ/SRQ and take it to RTR, as real mlx5 requires (verbs has no
 * DC capability bit). Returns UCS_OK or UCS_ERR_UNSUPPORTED.
 */
ucs_status_t uct_dcx_device_probe_dc(const uct_dcx_binding_t *binding,
                                     struct ibv_context *ctx, uint8_t port,
                                     const struct ibv_port_attr *port_attr);

extern uct_dcx_global_config_t uct_dcx_global_config;
extern ucs_config_global_list_entry_t uct_dcx_global_config_entry;

#ifdef __cplusplus
}
#endif

#endif
