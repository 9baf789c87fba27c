/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "dcx_seam_symbols.h"

#include <ucs/sys/compiler_def.h>

#include <dlfcn.h>
#include <errno.h>
#include <string.h>


#define UCT_DCX_SEAM_SYM(_lib, _slot, _symbol, _version) \
    {                                                    \
        UCT_DCX_SEAM_LIB_##_lib, _symbol, _version,      \
                offsetof(uct_dcx_verbs_ops_t, _slot)     \
    }


/* Versions are the ones rdma-core has exported since the call was added
 * (libibverbs.map / libmlx5.map); a newer rdma-core keeps them. */
const uct_dcx_seam_symbol_t uct_dcx_seam_symbols[] = {
    UCT_DCX_SEAM_SYM(VERBS, get_device_list, "ibv_get_device_list",
                     "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, free_device_list, "ibv_free_device_list",
                     "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, get_device_name, "ibv_get_device_name",
                     "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, get_device_guid, "ibv_get_device_guid",
                     "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, open_device, "ibv_open_device", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, close_device, "ibv_close_device", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, query_device, "ibv_query_device", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, query_gid, "ibv_query_gid", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, query_gid_ex, "_ibv_query_gid_ex", "IBVERBS_1.11"),
    UCT_DCX_SEAM_SYM(VERBS, query_pkey, "ibv_query_pkey", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, read_sysfs_file, "ibv_read_sysfs_file",
                     "IBVERBS_1.0"),
    UCT_DCX_SEAM_SYM(VERBS, alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8"),
    UCT_DCX_SEAM_SYM(VERBS, dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, create_comp_channel, "ibv_create_comp_channel",
                     "IBVERBS_1.0"),
    UCT_DCX_SEAM_SYM(VERBS, destroy_comp_channel, "ibv_destroy_comp_channel",
                     "IBVERBS_1.0"),
    UCT_DCX_SEAM_SYM(VERBS, destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, create_srq, "ibv_create_srq", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, modify_srq, "ibv_modify_srq", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, query_srq, "ibv_query_srq", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, destroy_srq, "ibv_destroy_srq", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, modify_qp, "ibv_modify_qp", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, query_qp, "ibv_query_qp", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, qp_to_qp_ex, "ibv_qp_to_qp_ex", "IBVERBS_1.6"),
    UCT_DCX_SEAM_SYM(VERBS, create_ah, "ibv_create_ah", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, destroy_ah, "ibv_destroy_ah", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, get_async_event, "ibv_get_async_event",
                     "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, ack_async_event, "ibv_ack_async_event",
                     "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(VERBS, wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1"),
    UCT_DCX_SEAM_SYM(INLINE, query_device_ex, "ibv_query_device_ex", NULL),
    UCT_DCX_SEAM_SYM(INLINE, query_port, "ibv_query_port", NULL),
    UCT_DCX_SEAM_SYM(INLINE, create_cq_ex, "ibv_create_cq_ex", NULL),
    UCT_DCX_SEAM_SYM(MLX5, mlx5dv_is_supported, "mlx5dv_is_supported",
                     "MLX5_1.8"),
    UCT_DCX_SEAM_SYM(MLX5, mlx5dv_open_device, "mlx5dv_open_device",
                     "MLX5_1.7"),
    UCT_DCX_SEAM_SYM(MLX5, mlx5dv_query_device, "mlx5dv_query_device",
                     "MLX5_1.0"),
    UCT_DCX_SEAM_SYM(MLX5, mlx5dv_create_qp, "mlx5dv_create_qp", "MLX5_1.3"),
    UCT_DCX_SEAM_SYM(MLX5, mlx5dv_qp_ex_from_ibv_qp_ex,
                     "mlx5dv_qp_ex_from_ibv_qp_ex", "MLX5_1.10"),
    UCT_DCX_SEAM_SYM(MLX5, mlx5dv_devx_general_cmd, "mlx5dv_devx_general_cmd",
                     "MLX5_1.7"),
    UCT_DCX_SEAM_SYM(DIRECT, mlx5dv_init_obj, "mlx5dv_init_obj", "MLX5_1.2"),
    UCT_DCX_SEAM_SYM(UMR, mlx5dv_create_mkey, "mlx5dv_create_mkey",
                     "MLX5_1.10"),
    UCT_DCX_SEAM_SYM(UMR, mlx5dv_destroy_mkey, "mlx5dv_destroy_mkey",
                     "MLX5_1.10"),
};

const size_t uct_dcx_seam_num_symbols = ucs_static_array_size(
        uct_dcx_seam_symbols);


struct mlx5dv_mkey *
uct_dcx_seam_no_create_mkey(struct mlx5dv_mkey_init_attr *attr)
{
    errno = EOPNOTSUPP;
    return NULL;
}

int uct_dcx_seam_no_destroy_mkey(struct mlx5dv_mkey *mkey)
{
    return EOPNOTSUPP;
}

int uct_dcx_seam_no_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)
{
    return EOPNOTSUPP;
}

int uct_dcx_seam_no_devx_general_cmd(struct ibv_context *context,
                                     const void *in, size_t inlen, void *out,
                                     size_t outlen)
{
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
}

void uct_dcx_binding_close(uct_dcx_binding_t *binding)
{
    if (binding->mlx5_handle != NULL) {
        dlclose(binding->mlx5_handle);
    }
    if (binding->verbs_handle != NULL) {
        dlclose(binding->verbs_handle);
    }
    memset(binding, 0, sizeof(*binding));
}
