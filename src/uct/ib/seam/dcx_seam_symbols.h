/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The rdma-core symbols behind the seam's slots, shared by the bindings.
 */
#ifndef UCT_DCX_SEAM_SYMBOLS_H_
#define UCT_DCX_SEAM_SYMBOLS_H_

#include "dcx_seam.h"

#include <stddef.h>


typedef enum {
    UCT_DCX_SEAM_LIB_VERBS, /* exported by libibverbs */
    UCT_DCX_SEAM_LIB_MLX5, /* exported by libmlx5 */
    UCT_DCX_SEAM_LIB_INLINE, /* an inline wrapper in verbs.h: the hardware
                                binding implements it, a model exports it */
    UCT_DCX_SEAM_LIB_UMR, /* libmlx5's mkey and DEVX calls: a model may
                                lack them */
    UCT_DCX_SEAM_LIB_DIRECT /* libmlx5's direct objects: optional in every
                                binding */
} uct_dcx_seam_lib_t;


typedef struct {
    uct_dcx_seam_lib_t lib;
    const char *symbol;
    const char *version; /* ELF symbol version node in rdma-core */
    size_t offset; /* slot in uct_dcx_verbs_ops_t */
} uct_dcx_seam_symbol_t;


extern const uct_dcx_seam_symbol_t uct_dcx_seam_symbols[];
extern const size_t uct_dcx_seam_num_symbols;


/* Slots of a binding without indirect mkeys: EOPNOTSUPP, as rdma-core. */
struct mlx5dv_mkey *
uct_dcx_seam_no_create_mkey(struct mlx5dv_mkey_init_attr *attr);
int uct_dcx_seam_no_destroy_mkey(struct mlx5dv_mkey *mkey);
int uct_dcx_seam_no_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type);
int uct_dcx_seam_no_devx_general_cmd(struct ibv_context *context,
                                     const void *in, size_t inlen, void *out,
                                     size_t outlen);

#endif
