/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Hardware binding of the device seam: rdma-core's libibverbs and libmlx5,
 * loaded with dlopen and resolved by symbol version, so the plugin has no
 * link-time dependency on them and loads on hosts without rdma-core.
 */
#include "dcx_seam.h"
#include "dcx_seam_symbols.h"

#include <ucs/debug/log.h>
#include <ucs/sys/compiler_def.h>

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>


/* The compat ibv_query_device, resolved for the query_device_ex fallback. */
static int (*uct_dcx_hw_query_device_compat)(struct ibv_context *,
                                             struct ibv_device_attr *);
/* The compat ibv_query_port, resolved for the query_port fallback. */
static int (*uct_dcx_hw_query_port_compat)(struct ibv_context *, uint8_t,
                                           struct ibv_port_attr *);


/* Same dispatch as the inline ibv_query_device_ex() of verbs.h, without its
 * link-time reference to the exported ibv_query_device. */
static int
uct_dcx_hw_query_device_ex(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *input,
                           struct ibv_device_attr_ex *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_device_ex);
    int ret;

    if ((input != NULL) && (input->comp_mask != 0)) {
        return EINVAL;
    }

    if (vctx != NULL) {
        ret = vctx->query_device_ex(context, input, attr, sizeof(*attr));
        if ((ret != EOPNOTSUPP) && (ret != ENOSYS)) {
            return ret;
        }
    }

    memset(attr, 0, sizeof(*attr));
    return uct_dcx_hw_query_device_compat(context, &attr->orig_attr);
}

/* Same dispatch as the inline ibv_query_port() of verbs.h. */
static int uct_dcx_hw_query_port(struct ibv_context *context, uint8_t port_num,
                                 struct ibv_port_attr *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);

    if (vctx == NULL) {
        memset(attr, 0, sizeof(*attr));
        return uct_dcx_hw_query_port_compat(context, port_num, attr);
    }

    return vctx->query_port(context, port_num, attr, sizeof(*attr));
}

/* ibv_create_cq_ex() is a pure context-op dispatch; kept here so that the
 * transport calls every create through the table. */
static struct ibv_cq_ex *
uct_dcx_hw_create_cq_ex(struct ibv_context *context,
                        struct ibv_cq_init_attr_ex *attr)
{
    return ibv_create_cq_ex(context, attr);
}

/* Slots used when libmlx5 is absent: answer as a device without mlx5. */
static bool uct_dcx_hw_no_mlx5_is_supported(struct ibv_device *device)
{
    return false;
}

static struct ibv_context *
uct_dcx_hw_no_mlx5_open_device(struct ibv_device *device,
                               struct mlx5dv_context_attr *attr)
{
    errno = EOPNOTSUPP;
    return NULL;
}

static int uct_dcx_hw_no_mlx5_query_device(struct ibv_context *context,
                                           struct mlx5dv_context *attrs_out)
{
    return EOPNOTSUPP;
}

static struct ibv_qp *
uct_dcx_hw_no_mlx5_create_qp(struct ibv_context *context,
                             struct ibv_qp_init_attr_ex *attr,
                             struct mlx5dv_qp_init_attr *dv_attr)
{
    errno = EOPNOTSUPP;
    return NULL;
}

static struct mlx5dv_qp_ex *
uct_dcx_hw_no_mlx5_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
    return NULL;
}

static void uct_dcx_hw_set_no_mlx5(uct_dcx_verbs_ops_t *ops)
{
    ops->mlx5dv_is_supported         = uct_dcx_hw_no_mlx5_is_supported;
    ops->mlx5dv_open_device          = uct_dcx_hw_no_mlx5_open_device;
    ops->mlx5dv_query_device         = uct_dcx_hw_no_mlx5_query_device;
    ops->mlx5dv_create_qp            = uct_dcx_hw_no_mlx5_create_qp;
    ops->mlx5dv_qp_ex_from_ibv_qp_ex = uct_dcx_hw_no_mlx5_qp_ex_from_ibv_qp_ex;
    ops->mlx5dv_create_mkey          = uct_dcx_seam_no_create_mkey;
    ops->mlx5dv_destroy_mkey         = uct_dcx_seam_no_destroy_mkey;
    ops->mlx5dv_devx_general_cmd     = uct_dcx_seam_no_devx_general_cmd;
    ops->mlx5dv_init_obj             = uct_dcx_seam_no_init_obj;
}

static int uct_dcx_hw_resolve(void *handle, uct_dcx_seam_lib_t lib,
                              const char *lib_name, uct_dcx_verbs_ops_t *ops)
{
    const uct_dcx_seam_symbol_t *sym;
    void *func;

    for (sym = uct_dcx_seam_symbols;
         sym < uct_dcx_seam_symbols + uct_dcx_seam_num_symbols; ++sym) {
        /* libmlx5 also provides the mkey calls and the direct objects. */
        if ((sym->lib != lib) && !((lib == UCT_DCX_SEAM_LIB_MLX5) &&
                                   ((sym->lib == UCT_DCX_SEAM_LIB_UMR) ||
                                    (sym->lib == UCT_DCX_SEAM_LIB_DIRECT)))) {
            continue;
        }

        func = dlvsym(handle, sym->symbol, sym->version);
        if ((func == NULL) && (sym->lib == UCT_DCX_SEAM_LIB_DIRECT)) {
            ucs_debug("dcx: %s has no %s@%s: no direct posting", lib_name,
                      sym->symbol, sym->version);
            func = (void *)uct_dcx_seam_no_init_obj;
        } else if (func == NULL) {
            ucs_debug("dcx: %s has no %s@%s: rdma-core is too old", lib_name,
                      sym->symbol, sym->version);
            return 0;
        }

        *(void **)UCS_PTR_BYTE_OFFSET(ops, sym->offset) = func;
    }

    return 1;
}

ucs_status_t uct_dcx_hw_binding_open(const char *verbs_lib,
                                     const char *mlx5_lib,
                                     uct_dcx_binding_t *binding)
{
    memset(binding, 0, sizeof(*binding));
    binding->name = "rdma-core";

    /* RTLD_NODELETE: objects from these libraries may outlive a close of
     * the binding (e.g. freed device lists cached by rdma-core). */
    binding->verbs_handle = dlopen(verbs_lib,
                                   RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (binding->verbs_handle == NULL) {
        ucs_debug("dcx: no hardware devices: cannot load %s: %s", verbs_lib,
                  dlerror());
        goto err;
    }

    if (!uct_dcx_hw_resolve(binding->verbs_handle, UCT_DCX_SEAM_LIB_VERBS,
                            verbs_lib, &binding->ops)) {
        goto err_close_verbs;
    }

    uct_dcx_hw_query_device_compat = binding->ops.query_device;
    uct_dcx_hw_query_port_compat   = dlvsym(binding->verbs_handle,
                                            "ibv_query_port", "IBVERBS_1.1");
    if (uct_dcx_hw_query_port_compat == NULL) {
        ucs_debug("dcx: %s has no ibv_query_port", verbs_lib);
        goto err_close_verbs;
    }

    binding->ops.query_device_ex = uct_dcx_hw_query_device_ex;
    binding->ops.query_port      = uct_dcx_hw_query_port;
    binding->ops.create_cq_ex    = uct_dcx_hw_create_cq_ex;

    binding->mlx5_handle = dlopen(mlx5_lib,
                                  RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (binding->mlx5_handle == NULL) {
        ucs_debug("dcx: cannot load %s (%s): "
                  "DC needs mlx5, no hardware DC devices",
                  mlx5_lib, dlerror());
        uct_dcx_hw_set_no_mlx5(&binding->ops);
    } else if (!uct_dcx_hw_resolve(binding->mlx5_handle, UCT_DCX_SEAM_LIB_MLX5,
                                   mlx5_lib, &binding->ops)) {
        dlclose(binding->mlx5_handle);
        binding->mlx5_handle = NULL;
        uct_dcx_hw_set_no_mlx5(&binding->ops);
    } else {
        binding->dv = true;
    }

    return UCS_OK;

err_close_verbs:
    dlclose(binding->verbs_handle);
err:
    memset(binding, 0, sizeof(*binding));
    return UCS_ERR_NO_DEVICE;
}
