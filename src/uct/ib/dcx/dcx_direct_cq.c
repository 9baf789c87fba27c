/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * A CQ dcx parses in place (see dcx_direct_cq.h).
 */
#include "dcx_direct_cq.h"

#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>

#include <endian.h>


ucs_status_t uct_dcx_direct_cq_init(uct_dcx_direct_cq_t *dcq,
                                    const uct_dcx_verbs_ops_t *ops,
                                    struct ibv_cq *cq, const char **reason_p)
{
    struct mlx5dv_cq dv_cq = {};
    struct mlx5dv_obj obj  = {};

    obj.cq.in  = cq;
    obj.cq.out = &dv_cq;
    if (ops->mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) != 0) {
        *reason_p = "the provider offers no direct objects (mlx5dv_init_obj)";
        return UCS_ERR_UNSUPPORTED;
    }
    if (dv_cq.cqe_size != sizeof(struct mlx5_cqe64)) {
        *reason_p = "CQEs other than 64 bytes";
        return UCS_ERR_UNSUPPORTED;
    }
    if (!ucs_is_pow2(dv_cq.cqe_cnt)) {
        *reason_p = "a CQ whose size is not a power of two";
        return UCS_ERR_UNSUPPORTED;
    }

    dcq->buf            = dv_cq.buf;
    dcq->cqe_cnt        = dv_cq.cqe_cnt;
    dcq->ci             = 0; /* a CQ nobody polled yet */
    dcq->dbrec          = dv_cq.dbrec;
    dcq->uar            = dv_cq.cq_uar;
    dcq->cqn            = dv_cq.cqn;
    dcq->arm_sn         = 0;
    dcq->cqx.context    = cq->context;
    dcq->cqx.channel    = cq->channel;
    dcq->cqx.cq_context = cq->cq_context;
    dcq->cqx.handle     = cq->handle;
    dcq->cqx.cqe        = cq->cqe;
    return UCS_OK;
}

void uct_dcx_direct_cq_arm_db(uct_dcx_direct_cq_t *dcq, int solicited)
{
    uint32_t cmd = solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT;
    uint32_t arm = ((dcq->arm_sn & 3) << 28) | cmd | (dcq->ci & 0xffffff);

    dcq->dbrec[UCT_DCX_DIRECT_CQ_ARM_DB] = htobe32(arm);
    /* the record in host memory before the doorbell */
    UCT_DCX_DIRECT_MMIO_WC_START();
    *(volatile uint64_t *)UCS_PTR_BYTE_OFFSET(dcq->uar, MLX5_CQ_DOORBELL) =
            htobe64(((uint64_t)arm << 32) | dcq->cqn);
    UCT_DCX_DIRECT_MMIO_FLUSH();
}

enum ibv_wc_status uct_dcx_direct_syndrome_status(uint8_t syndrome)
{
    switch (syndrome) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
        return IBV_WC_LOC_LEN_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
        return IBV_WC_LOC_QP_OP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
        return IBV_WC_LOC_PROT_ERR;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
        return IBV_WC_WR_FLUSH_ERR;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR:
        return IBV_WC_MW_BIND_ERR;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
        return IBV_WC_BAD_RESP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
        return IBV_WC_LOC_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
        return IBV_WC_REM_INV_REQ_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
        return IBV_WC_REM_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
        return IBV_WC_REM_OP_ERR;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
        return IBV_WC_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
        return IBV_WC_RNR_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
        return IBV_WC_REM_ABORT_ERR;
    default:
        return IBV_WC_GENERAL_ERR;
    }
}
