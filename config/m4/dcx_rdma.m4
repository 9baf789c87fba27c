# DCX_CHECK_RDMA_CORE: rdma-core headers. Only headers: the plugin resolves
# libibverbs/libmlx5 at run time (dlopen), so it loads where they are absent.
AC_DEFUN([DCX_CHECK_RDMA_CORE], [
AC_CHECK_HEADERS([infiniband/verbs.h infiniband/mlx5dv.h], [],
    [AC_MSG_ERROR([rdma-core headers not found (Debian/Ubuntu: apt-get install libibverbs-dev)])])
AC_CHECK_DECLS([mlx5dv_create_qp, mlx5dv_qp_ex_from_ibv_qp_ex, mlx5dv_create_mkey,
                mlx5dv_wr_mr_interleaved, MLX5DV_DCTYPE_DCI],
    [], [AC_MSG_ERROR([infiniband/mlx5dv.h lacks the DC/UMR API: rdma-core >= 28 is required])],
    [[#include <infiniband/mlx5dv.h>]])
])
