/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Device-model binding of the device seam: the software DC device
 * (libdcxemu) exports every rdma-core call of the seam as "dcxemu_" + the
 * rdma-core name, with the same signature. It is loaded at run time, only
 * when enabled, so the plugin never depends on it.
 */
#include "dcx_seam.h"
#include "dcx_seam_symbols.h"

#include <ucs/debug/log.h>
#include <ucs/sys/compiler_def.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>


#define UCT_DCX_EMU_SYMBOL_PREFIX "dcxemu_"


ucs_status_t
uct_dcx_emu_binding_open(const char *emu_lib, uct_dcx_binding_t *binding)
{
    const uct_dcx_seam_symbol_t *sym;
    char name[128];
    void *func;

    memset(binding, 0, sizeof(*binding));
    binding->name = "dcxemu";

    binding->verbs_handle = dlopen(emu_lib,
                                   RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (binding->verbs_handle == NULL) {
        ucs_error("dcx: cannot load the software DC device %s: %s", emu_lib,
                  dlerror());
        return UCS_ERR_NO_DEVICE;
    }

    for (sym = uct_dcx_seam_symbols;
         sym < uct_dcx_seam_symbols + uct_dcx_seam_num_symbols; ++sym) {
        snprintf(name, sizeof(name), UCT_DCX_EMU_SYMBOL_PREFIX "%s",
                 sym->symbol);
        func = dlsym(binding->verbs_handle, name);
        if (func != NULL) {
            *(void **)UCS_PTR_BYTE_OFFSET(&binding->ops, sym->offset) = func;
        } else if ((sym->lib == UCT_DCX_SEAM_LIB_UMR) ||
                   (sym->lib == UCT_DCX_SEAM_LIB_DIRECT)) {
            ucs_debug("dcx: %s has no %s", emu_lib, name);
        } else {
            ucs_error("dcx: %s is not a compatible software DC device: no %s",
                      emu_lib, name);
            uct_dcx_binding_close(binding);
            return UCS_ERR_NO_DEVICE;
        }
    }

    if (binding->ops.mlx5dv_create_mkey == NULL) {
        binding->ops.mlx5dv_create_mkey  = uct_dcx_seam_no_create_mkey;
        binding->ops.mlx5dv_destroy_mkey = uct_dcx_seam_no_destroy_mkey;
    }

    if (binding->ops.mlx5dv_init_obj == NULL) {
        binding->ops.mlx5dv_init_obj = uct_dcx_seam_no_init_obj;
    }

    binding->dv = true;
    return UCS_OK;
}
