/* mlx5 completion format, as the device writes it: CQE64s (in 64- or
 * 128-byte entries) in a CQ buffer in user memory, exactly as libmlx5's
 * mlx5_parse_cqe and UCX read them; and the error syndromes of the verbs
 * completion statuses.  Pure functions: no I/O, no state. */
#ifndef DCXEMU_MLX5_CQE_H
#define DCXEMU_MLX5_CQE_H

#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The syndrome of a status libmlx5 has none for: it reads any syndrome it
 * does not know as IBV_WC_GENERAL_ERR. */
#define DCXEMU_MLX5_SYNDROME_GENERAL 0xff

struct dcxemu_mlx5_cqe_info {
    uint8_t opcode; /* MLX5_CQE_REQ, RESP_WR_IMM, RESP_SEND, RESP_SEND_IMM,
                       RESP_SEND_INV, REQ_ERR, RESP_ERR */
    uint8_t wqe_opcode; /* requester: the WQE's MLX5_OPCODE_*
                           (sop_drop_qpn[31:24]) */
    uint32_t qpn; /* QP number (or DCT number for a DCT receive) */
    uint32_t srqn_uidx; /* cqe_version 1: the user index of the QP/DCT;
                           version 0: the SRQ number of an SRQ receive */
    uint16_t wqe_counter; /* requester: WQE index; SRQ receive: SRQ WQE
                             index */
    uint32_t byte_cnt;
    uint32_t imm; /* as stored (big-endian value); SEND_INV: htobe32(rkey) */
    uint32_t src_qpn;
    uint16_t slid;
    uint8_t sl;
    uint8_t grh;
    uint8_t solicited;
    uint8_t syndrome, vendor_err_synd; /* error CQEs */
    /* a receive of at most 32 bytes scattered into a 64-byte CQE
       (scatter-to-CQE): its bytes take the CQE's first 32 and op_own says
       MLX5_INLINE_SCATTER_32; 0: none */
    uint8_t scatter_len;
    uint8_t scatter[32];
};

/* Write CQE number `pi` (producer counter, not wrapped) into the CQ buffer of
 * `ncqe` entries (power of two) of cqe_size 64 or 128 (the CQE64 is the second
 * half of a 128-byte entry): the body first, then op_own with the owner bit
 * of pi's pass, with release ordering.  The first half of a 128-byte entry is
 * left alone (no 64-byte inline scatter). */
void dcxemu_mlx5_cqe_write(void *cq_buf, uint32_t cqe_size, uint32_t ncqe,
                           uint32_t pi, const struct dcxemu_mlx5_cqe_info *ci);

/* The syndrome for an ibv_wc_status and back, as libmlx5's
 * mlx5_handle_error_cqe maps them: a status without a syndrome of its own
 * gets DCXEMU_MLX5_SYNDROME_GENERAL (IBV_WC_SUCCESS: 0). */
uint8_t dcxemu_mlx5_syndrome(enum ibv_wc_status status);
enum ibv_wc_status dcxemu_mlx5_wc_status(uint8_t syndrome);

#ifdef __cplusplus
}
#endif

#endif
