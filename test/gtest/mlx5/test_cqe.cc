/* mlx5 CQE writing (src/dcxemu/mlx5_cqe.c), read back the way libmlx5 v44 reads it: get_sw_cqe's
 * ownership test, mlx5dv.h's accessors, mlx5_parse_cqe / handle_good_req / handle_responder's
 * fields, mlx5_handle_error_cqe's syndromes. */
#include <gtest/gtest.h>

#include "../common/test_print.h"

#include <infiniband/mlx5dv.h>

#include <endian.h>
#include <string.h>
#include <string>
#include <vector>

extern "C" {
#include "mlx5_cqe.h"
}

namespace {

/* A CQ buffer as mlx5_alloc_cq_buf leaves it: every CQE64 invalid (opcode 0xf), owner 0 */
struct cq {
    std::vector<uint8_t> mem;
    uint32_t ncqe, size;

    cq(uint32_t n, uint32_t cqe_size)
        : mem(n * cqe_size, 0xab), ncqe(n), size(cqe_size)
    {
        for (uint32_t i = 0; i < n; i++) {
            cqe64(i)->op_own = MLX5_CQE_INVALID << 4;
        }
    }
    mlx5_cqe64 *cqe64(uint32_t n)
    {
        return (mlx5_cqe64 *)(mem.data() + (n & (ncqe - 1)) * size + size - 64);
    }
    /* libmlx5's get_sw_cqe: CQE n is the software's */
    mlx5_cqe64 *sw_cqe(uint32_t n)
    {
        mlx5_cqe64 *c = cqe64(n);
        if (mlx5dv_get_cqe_opcode(c) != MLX5_CQE_INVALID &&
            !((c->op_own & MLX5_CQE_OWNER_MASK) ^ !!(n & ncqe))) {
            return c;
        }
        return nullptr;
    }
    void write(uint32_t pi, const dcxemu_mlx5_cqe_info &ci)
    {
        dcxemu_mlx5_cqe_write(mem.data(), size, ncqe, pi, &ci);
    }
};

dcxemu_mlx5_cqe_info req_info(uint8_t wqe_opcode, uint16_t wqe_counter)
{
    dcxemu_mlx5_cqe_info ci;
    memset(&ci, 0, sizeof(ci));
    ci.opcode      = MLX5_CQE_REQ;
    ci.wqe_opcode  = wqe_opcode;
    ci.qpn         = 0x12345;
    ci.srqn_uidx   = 0x777;
    ci.wqe_counter = wqe_counter;
    ci.byte_cnt    = 4096;
    return ci;
}

/* Requester CQE: what mlx5_parse_cqe (cqe_version 1) and handle_good_req read */
TEST(cqe, requester)
{
    for (uint32_t size : { 64u, 128u }) {
        SCOPED_TRACE(size);
        cq c(8, size);
        c.write(3, req_info(MLX5_OPCODE_RDMA_READ, 0xfffe));
        EXPECT_EQ(c.sw_cqe(2), nullptr);
        mlx5_cqe64 *e = c.sw_cqe(3);
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_REQ);
        EXPECT_EQ(mlx5dv_get_cqe_owner(e), 0);
        EXPECT_EQ(mlx5dv_get_cqe_se(e), 0);
        EXPECT_EQ(mlx5dv_get_cqe_format(e),
                  0); /* not compressed, no inline scatter */
        EXPECT_EQ(e->op_own & (MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64),
                  0);
        EXPECT_EQ(be32toh(e->sop_drop_qpn) >> 24,
                  (uint32_t)MLX5_OPCODE_RDMA_READ);
        EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, 0x12345u);
        EXPECT_EQ(be32toh(e->srqn_uidx) & 0xffffff, 0x777u);
        EXPECT_EQ(be16toh(e->wqe_counter), 0xfffe);
        EXPECT_EQ(be32toh(e->byte_cnt), 4096u);
        EXPECT_EQ(e->app, 0);
        if (size == 128) {
            /* the first half, inline scatter room, is left as it was */
            const uint8_t *half = (const uint8_t *)e - 64;
            for (int i = 0; i < 64; i++) {
                ASSERT_EQ(half[i], 0xab) << i;
            }
        }
    }
}

/* Responder CQEs: handle_responder's opcode, byte_len, imm / invalidated rkey, slid, sl, src_qp,
 * GRH flag; the SRQ WQE index in wqe_counter; solicited in op_own */
TEST(cqe, responder_kinds)
{
    const struct {
        uint8_t opcode;
        const char *name;
    } kinds[] = {
        { MLX5_CQE_RESP_SEND, "send" },
        { MLX5_CQE_RESP_SEND_IMM, "send_imm" },
        { MLX5_CQE_RESP_WR_IMM, "write_imm" },
        { MLX5_CQE_RESP_SEND_INV, "send_inv" },
    };
    for (uint32_t size : { 64u, 128u }) {
        for (const auto &k : kinds) {
            SCOPED_TRACE(std::string(k.name) + " " + std::to_string(size));
            cq c(4, size);
            dcxemu_mlx5_cqe_info ci;
            memset(&ci, 0, sizeof(ci));
            ci.opcode      = k.opcode;
            ci.qpn         = 0xabcde; /* a DCT */
            ci.srqn_uidx   = 0x1000042; /* only 24 bits are the index */
            ci.wqe_counter = 17;
            ci.byte_cnt    = 1234;
            ci.imm     = k.opcode == MLX5_CQE_RESP_SEND_INV ? htobe32(0x5566) :
                                                              0xefbeadde;
            ci.src_qpn = 0x654321;
            ci.slid    = 0x31;
            ci.sl      = 6;
            ci.grh     = 1;
            ci.solicited = 1;
            c.write(0, ci);
            mlx5_cqe64 *e = c.sw_cqe(0);
            ASSERT_NE(e, nullptr);
            EXPECT_EQ(mlx5dv_get_cqe_opcode(e), k.opcode);
            EXPECT_EQ(mlx5dv_get_cqe_se(e), 1);
            EXPECT_EQ(mlx5dv_get_cqe_format(e), 0);
            EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, 0xabcdeu);
            EXPECT_EQ(be32toh(e->srqn_uidx) & 0xffffff, 0x42u);
            EXPECT_EQ(be16toh(e->wqe_counter), 17);
            EXPECT_EQ(be32toh(e->byte_cnt), 1234u);
            if (k.opcode == MLX5_CQE_RESP_SEND_INV) {
                EXPECT_EQ(be32toh(e->imm_inval_pkey),
                          0x5566u); /* invalidated_rkey */
            } else {
                EXPECT_EQ(e->imm_inval_pkey,
                          0xefbeaddeu); /* imm_data, as stored */
            }
            uint32_t f = be32toh(e->flags_rqpn);
            EXPECT_EQ(f & 0xffffff, 0x654321u);
            EXPECT_EQ((f >> 24) & 0xf, 6u);
            EXPECT_NE((f >> 28) & 3, 0u);
            EXPECT_EQ(be16toh(e->slid), 0x31);
            EXPECT_EQ(e->ml_path & 0x7f, 0);

            /* without GRH and solicitation */
            ci.grh       = 0;
            ci.solicited = 0;
            c.write(1, ci);
            e = c.sw_cqe(1);
            ASSERT_NE(e, nullptr);
            EXPECT_EQ(mlx5dv_get_cqe_se(e), 0);
            EXPECT_EQ((be32toh(e->flags_rqpn) >> 28) & 3, 0u);
        }
    }
}

/* Error CQEs: struct mlx5_err_cqe's syndrome, vendor syndrome, opcode and QPN, WQE counter */
TEST(cqe, error)
{
    for (uint8_t opcode :
         { (uint8_t)MLX5_CQE_REQ_ERR, (uint8_t)MLX5_CQE_RESP_ERR }) {
        for (uint32_t size : { 64u, 128u }) {
            cq c(4, size);
            dcxemu_mlx5_cqe_info ci = req_info(MLX5_OPCODE_ATOMIC_MASKED_CS, 9);
            ci.opcode               = opcode;
            ci.syndrome             = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
            ci.vendor_err_synd      = 0x88;
            c.write(6, ci);
            auto *e = (mlx5_err_cqe *)c.sw_cqe(6);
            ASSERT_NE(e, nullptr);
            EXPECT_EQ(mlx5dv_get_cqe_opcode((mlx5_cqe64 *)e), opcode);
            EXPECT_EQ(mlx5dv_get_cqe_owner((mlx5_cqe64 *)e), 1);
            EXPECT_EQ(e->syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
            EXPECT_EQ(e->vendor_err_synd, 0x88);
            EXPECT_EQ(be32toh(e->s_wqe_opcode_qpn) >> 24,
                      (uint32_t)MLX5_OPCODE_ATOMIC_MASKED_CS);
            EXPECT_EQ(be32toh(e->s_wqe_opcode_qpn) & 0xffffff, 0x12345u);
            EXPECT_EQ(be16toh(e->wqe_counter), 9);
            EXPECT_EQ(be32toh(e->srqn) & 0xffffff, 0x777u);
        }
    }
}

/* The owner bit flips each pass: CQE n is the software's only once written for n's pass, never
 * while it still holds the previous pass's */
TEST(cqe, owner_across_passes)
{
    for (uint32_t size : { 64u, 128u }) {
        SCOPED_TRACE(size);
        const uint32_t n = 4;
        cq c(n, size);
        for (uint32_t pi = 0; pi < 5 * n; pi++) {
            ASSERT_EQ(c.sw_cqe(pi), nullptr) << pi;
            c.write(pi, req_info(MLX5_OPCODE_SEND, (uint16_t)pi));
            mlx5_cqe64 *e = c.sw_cqe(pi);
            ASSERT_NE(e, nullptr) << pi;
            EXPECT_EQ(mlx5dv_get_cqe_owner(e), (pi / n) & 1) << pi;
            EXPECT_EQ(be16toh(e->wqe_counter), (uint16_t)pi);
            /* the consumer one pass ahead does not take it */
            EXPECT_EQ(c.sw_cqe(pi + n), nullptr) << pi;
        }
        /* a wrapped 32-bit producer counter keeps the parity */
        c.write(0xfffffffdu, req_info(MLX5_OPCODE_SEND, 1));
        EXPECT_NE(c.sw_cqe(0xfffffffdu), nullptr);
        EXPECT_EQ(mlx5dv_get_cqe_owner(c.cqe64(0xfffffffdu)), 1);
    }
}

/* Only the entry written changes */
TEST(cqe, neighbours_untouched)
{
    cq c(4, 64);
    std::vector<uint8_t> before = c.mem;
    c.write(2, req_info(MLX5_OPCODE_RDMA_WRITE, 2));
    for (size_t i = 0; i < c.mem.size(); i++) {
        if (i < 2 * 64 || i >= 3 * 64) {
            ASSERT_EQ(c.mem[i], before[i]) << i;
        }
    }
}

/* libmlx5 v44's mlx5_handle_error_cqe, as a table (default: IBV_WC_GENERAL_ERR) */
const struct {
    uint8_t syndrome;
    ibv_wc_status status;
} libmlx5_syndromes[] = {
    { MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, IBV_WC_LOC_LEN_ERR },
    { MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR },
    { MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, IBV_WC_LOC_PROT_ERR },
    { MLX5_CQE_SYNDROME_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR },
    { MLX5_CQE_SYNDROME_MW_BIND_ERR, IBV_WC_MW_BIND_ERR },
    { MLX5_CQE_SYNDROME_BAD_RESP_ERR, IBV_WC_BAD_RESP_ERR },
    { MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR, IBV_WC_LOC_ACCESS_ERR },
    { MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, IBV_WC_REM_INV_REQ_ERR },
    { MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR },
    { MLX5_CQE_SYNDROME_REMOTE_OP_ERR, IBV_WC_REM_OP_ERR },
    { MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, IBV_WC_RETRY_EXC_ERR },
    { MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR },
    { MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, IBV_WC_REM_ABORT_ERR },
};

ibv_wc_status libmlx5_status(uint8_t syndrome)
{
    for (const auto &s : libmlx5_syndromes) {
        if (s.syndrome == syndrome) {
            return s.status;
        }
    }
    return IBV_WC_GENERAL_ERR;
}

/* Every status: its syndrome reads back as the status in libmlx5, or as GENERAL_ERR when libmlx5
 * has no syndrome for it; every syndrome reads as libmlx5 reads it */
TEST(cqe, syndrome_table)
{
    EXPECT_EQ(dcxemu_mlx5_syndrome(IBV_WC_SUCCESS), 0);
    int own = 0;
    for (int st = IBV_WC_LOC_LEN_ERR; st <= IBV_WC_TM_RNDV_INCOMPLETE; st++) {
        SCOPED_TRACE(st);
        uint8_t s = dcxemu_mlx5_syndrome((ibv_wc_status)st);
        bool has  = false;
        for (const auto &e : libmlx5_syndromes) {
            has |= e.status == st;
        }
        EXPECT_EQ(libmlx5_status(s),
                  has ? (ibv_wc_status)st : IBV_WC_GENERAL_ERR);
        if (!has) {
            EXPECT_EQ(s, DCXEMU_MLX5_SYNDROME_GENERAL);
        }
        own += has;
    }
    EXPECT_EQ(own,
              (int)(sizeof(libmlx5_syndromes) / sizeof(libmlx5_syndromes[0])));
    for (int s = 0; s < 256; s++) {
        EXPECT_EQ(dcxemu_mlx5_wc_status((uint8_t)s), libmlx5_status((uint8_t)s))
                << s;
    }
}

} // namespace

/* Scatter-to-CQE: a short receive's bytes are the 64-byte CQE's first ones,
 * op_own says MLX5_INLINE_SCATTER_32, and the fields after them are whole. */
TEST(cqe, responder_scatter_32)
{
    for (uint8_t len : { 1, 13, 32 }) {
        SCOPED_TRACE(std::to_string(len) + " bytes");
        cq c(4, 64);
        dcxemu_mlx5_cqe_info ci;
        memset(&ci, 0, sizeof(ci));
        ci.opcode      = MLX5_CQE_RESP_SEND_IMM;
        ci.qpn         = 0xabcde;
        ci.srqn_uidx   = 0x42;
        ci.wqe_counter = 9;
        ci.byte_cnt    = len;
        ci.imm         = 0x11223344;
        ci.scatter_len = len;
        for (uint8_t i = 0; i < len; i++) {
            ci.scatter[i] = (uint8_t)(0x80 + i);
        }
        c.write(0, ci);
        mlx5_cqe64 *e = c.sw_cqe(0);
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_SEND_IMM);
        EXPECT_NE(e->op_own & MLX5_INLINE_SCATTER_32, 0);
        EXPECT_EQ(e->op_own & MLX5_INLINE_SCATTER_64, 0);
        EXPECT_EQ(0, memcmp(e, ci.scatter, len));
        EXPECT_EQ(be32toh(e->byte_cnt), len);
        EXPECT_EQ(be16toh(e->wqe_counter), 9);
        EXPECT_EQ(e->imm_inval_pkey, 0x11223344u);
        EXPECT_EQ(be32toh(e->srqn_uidx) & 0xffffff, 0x42u);

        /* without: no scatter bit */
        ci.scatter_len = 0;
        c.write(1, ci);
        e = c.sw_cqe(1);
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->op_own & MLX5_INLINE_SCATTER_32, 0);
    }
}
