/* mlx5 CQE format: the CQE64 (and its error form) written into a CQ buffer
 * the consumer polls by the owner bit, and the syndrome table. */
#define _GNU_SOURCE
#include "mlx5_cqe.h"

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <stddef.h>
#include <string.h>

/* libmlx5's mlx5_handle_error_cqe, as data: every syndrome it knows */
static const struct {
    uint8_t status;
    uint8_t syndrome;
} cqe_syndromes[] = {
    { IBV_WC_LOC_LEN_ERR, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR },
    { IBV_WC_LOC_QP_OP_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR },
    { IBV_WC_LOC_PROT_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR },
    { IBV_WC_WR_FLUSH_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR },
    { IBV_WC_MW_BIND_ERR, MLX5_CQE_SYNDROME_MW_BIND_ERR },
    { IBV_WC_BAD_RESP_ERR, MLX5_CQE_SYNDROME_BAD_RESP_ERR },
    { IBV_WC_LOC_ACCESS_ERR, MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR },
    { IBV_WC_REM_INV_REQ_ERR, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR },
    { IBV_WC_REM_ACCESS_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR },
    { IBV_WC_REM_OP_ERR, MLX5_CQE_SYNDROME_REMOTE_OP_ERR },
    { IBV_WC_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR },
    { IBV_WC_RNR_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR },
    { IBV_WC_REM_ABORT_ERR, MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR },
};

#define NUM_SYNDROMES (sizeof(cqe_syndromes) / sizeof(cqe_syndromes[0]))

void dcxemu_mlx5_cqe_write(void *cq_buf, uint32_t cqe_size, uint32_t ncqe,
                           uint32_t pi, const struct dcxemu_mlx5_cqe_info *ci)
{
    uint8_t *entry = (uint8_t *)cq_buf + (size_t)(pi & (ncqe - 1)) * cqe_size;
    struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)(entry + cqe_size - sizeof(*c));
    uint8_t op_own;

    /* op_own stays as it was until the body is complete: the consumer must
     * not see this pass's owner bit over a half-written CQE */
    memset(c, 0, offsetof(struct mlx5_cqe64, op_own));
    c->slid           = htobe16(ci->slid);
    c->flags_rqpn     = htobe32((uint32_t) !!ci->grh << 28 |
                                (uint32_t)(ci->sl & 0xf) << 24 |
                                (ci->src_qpn & 0xffffff));
    c->srqn_uidx      = htobe32(ci->srqn_uidx & 0xffffff);
    c->imm_inval_pkey = ci->imm;
    c->byte_cnt       = htobe32(ci->byte_cnt);
    c->sop_drop_qpn   = htobe32((uint32_t)ci->wqe_opcode << 24 |
                                (ci->qpn & 0xffffff));
    c->wqe_counter    = htobe16(ci->wqe_counter);
    if (ci->opcode == MLX5_CQE_REQ_ERR || ci->opcode == MLX5_CQE_RESP_ERR) {
        struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)c;
        e->syndrome            = ci->syndrome;
        e->vendor_err_synd     = ci->vendor_err_synd;
    }
    op_own = (uint8_t)(ci->opcode << 4) | (ci->solicited ? 1 << 1 : 0) |
             !!(pi & ncqe);
    if (ci->scatter_len > 0) {
        /* the data is where slid and flags_rqpn would be */
        memset(c, 0, sizeof(ci->scatter));
        memcpy(c, ci->scatter, ci->scatter_len);
        op_own |= MLX5_INLINE_SCATTER_32;
    }
    __atomic_store_n(&c->op_own, op_own, __ATOMIC_RELEASE);
}

uint8_t dcxemu_mlx5_syndrome(enum ibv_wc_status status)
{
    if (status == IBV_WC_SUCCESS) {
        return 0;
    }
    for (size_t i = 0; i < NUM_SYNDROMES; i++) {
        if (cqe_syndromes[i].status == status) {
            return cqe_syndromes[i].syndrome;
        }
    }
    return DCXEMU_MLX5_SYNDROME_GENERAL;
}

enum ibv_wc_status dcxemu_mlx5_wc_status(uint8_t syndrome)
{
    for (size_t i = 0; i < NUM_SYNDROMES; i++) {
        if (cqe_syndromes[i].syndrome == syndrome) {
            return (enum ibv_wc_status)cqe_syndromes[i].status;
        }
    }
    return IBV_WC_GENERAL_ERR;
}
