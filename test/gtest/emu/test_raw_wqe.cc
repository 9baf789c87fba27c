/* Raw WQEs on a DCI (mlx5dv_wr_raw_wqe) carrying mlx5 atomics, standard and masked (extended),
 * and the HCA atomic capabilities behind them (DEVX QUERY_HCA_CAP). The WQEs are laid out here
 * from mlx5dv.h's segments, independently of the transport. */
#include "emu_test.h"

#include <endian.h>

using namespace emu;

namespace {

/* mlx5 opmod of an extended atomic: 0x08 | (log2(operand bytes) - 2). */
const uint8_t OPMOD_EXT32 = 0x08, OPMOD_EXT64 = 0x09;

struct raw_wqe {
    uint8_t b[128];
    unsigned size = 0;
};

struct raw_args {
    uint8_t opcode;
    uint8_t opmod;
    uint32_t qpn;
    bool signaled = true;
    uint64_t dc_key;
    uint32_t dctn;
    uint16_t lid;
    bool ext_av = true;
    uint64_t raddr;
    uint32_t rkey;
    uint64_t a[4]  = {}; /* the atomic segment's fields, in order */
    unsigned aseg  = 16; /* 16 or 32 bytes */
    unsigned asize = 8; /* field width in the atomic segment: 4 or 8 */
    uint32_t lkey;
    uint64_t laddr;
    uint32_t byte_count;
    int ds_delta = 0; /* to make a malformed ds */
};

raw_wqe build(const raw_args &r)
{
    raw_wqe w;
    memset(w.b, 0, sizeof(w.b));
    auto *ctrl     = (mlx5_wqe_ctrl_seg *)w.b;
    unsigned off   = sizeof(*ctrl);
    auto *av       = (mlx5_wqe_av *)(w.b + off);
    av->key.dc_key = htobe64(r.dc_key);
    av->dqp_dct    = htobe32(r.dctn |
                             (r.ext_av ? (uint32_t)MLX5_EXTENDED_UD_AV : 0u));
    av->rlid       = htobe16(r.lid);
    off += r.ext_av ? sizeof(mlx5_wqe_av) : 16;
    auto *raddr  = (mlx5_wqe_raddr_seg *)(w.b + off);
    raddr->raddr = htobe64(r.raddr);
    raddr->rkey  = htobe32(r.rkey);
    off += sizeof(*raddr);
    for (unsigned i = 0; i < r.aseg / r.asize; i++) {
        if (r.asize == 4) {
            uint32_t v = htobe32((uint32_t)r.a[i]);
            memcpy(w.b + off + 4 * i, &v, 4);
        } else {
            uint64_t v = htobe64(r.a[i]);
            memcpy(w.b + off + 8 * i, &v, 8);
        }
    }
    off += r.aseg;
    auto *data       = (mlx5_wqe_data_seg *)(w.b + off);
    data->byte_count = htobe32(r.byte_count);
    data->lkey       = htobe32(r.lkey);
    data->addr       = htobe64(r.laddr);
    off += sizeof(*data);
    w.size                 = off;
    ctrl->opmod_idx_opcode = htobe32((uint32_t)r.opmod << 24 | r.opcode);
    ctrl->qpn_ds           = htobe32(r.qpn << 8 |
                                     (uint32_t)((int)(off / 16) + r.ds_delta));
    ctrl->fm_ce_se         = r.signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
    return w;
}

ibv_qp *create_raw_dci(dev &d, uint64_t dv_ops, int sig_all = 0)
{
    ibv_qp_init_attr_ex a;
    mlx5dv_qp_init_attr dv;
    memset(&a, 0, sizeof(a));
    memset(&dv, 0, sizeof(dv));
    a.qp_type = IBV_QPT_DRIVER;
    a.send_cq = a.recv_cq = d.cq;
    a.pd                  = d.pd;
    a.sq_sig_all          = sig_all;
    a.cap.max_send_wr     = 64;
    a.cap.max_send_sge    = 2;
    a.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    dv.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    if (dv_ops != 0) {
        dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = dv_ops;
    }
    return dcxemu_mlx5dv_create_qp(d.ctx, &a, &dv);
}

struct emu_raw_wqe : public loopback_test {
    emu_raw_wqe() : loopback_test(0x0123456789abcdefull)
    {
    }
    void SetUp() override
    {
        loopback_test::SetUp();
        if (!HasFatalFailure()) {
            make(MLX5DV_QP_EX_WITH_RAW_WQE);
        }
    }
    void make(uint64_t dv_ops, int sig_all = 0)
    {
        destroy_dci(c);
        c.qp = create_raw_dci(d, dv_ops, sig_all);
        ASSERT_NE(c.qp, nullptr);
        ASSERT_EQ(dci_to_rts(c.qp, 8, 2), 0);
        c.qpx = dcxemu_ibv_qp_to_qp_ex(c.qp);
        c.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(c.qpx);
        ASSERT_TRUE(c.qpx && c.dv && c.dv->wr_raw_wqe);
    }
    /* A masked 32-bit atomic on rbuf[off], its response in lbuf[0..3]. */
    raw_args args32(uint8_t opcode, size_t off, uint64_t a0, uint64_t a1 = 0,
                    uint64_t a2 = 0, uint64_t a3 = 0)
    {
        raw_args r;
        r.opcode     = opcode;
        r.opmod      = OPMOD_EXT32;
        r.qpn        = c.qp->qp_num;
        r.dc_key     = key;
        r.dctn       = dct->qp_num;
        r.lid        = d.lid;
        r.raddr      = (uintptr_t)rbuf.data() + off;
        r.rkey       = rmr->rkey;
        r.a[0]       = a0;
        r.a[1]       = a1;
        r.a[2]       = a2;
        r.a[3]       = a3;
        r.asize      = 4;
        r.aseg       = 16;
        r.lkey       = lmr->lkey;
        r.laddr      = (uintptr_t)lbuf.data();
        r.byte_count = 4;
        return r;
    }
    int post(const raw_args &r, uint64_t wr_id = 1, unsigned wr_flags = 0)
    {
        raw_wqe w = build(r);
        ibv_wr_start(c.qpx);
        c.qpx->wr_id    = wr_id;
        c.qpx->wr_flags = wr_flags;
        mlx5dv_wr_raw_wqe(c.dv, w.b);
        return ibv_wr_complete(c.qpx);
    }
    /* Post, expect one CQE with the status; returns the response (host order). */
    uint32_t run32(const raw_args &r, ibv_wc_status st = IBV_WC_SUCCESS)
    {
        ibv_wc wc;
        memset(lbuf.data(), 0xee, 8);
        EXPECT_EQ(post(r, 42), 0);
        EXPECT_TRUE(poll_one(d.cq, &wc));
        EXPECT_EQ(wc.status, st);
        EXPECT_EQ(wc.wr_id, 42u);
        if (st == IBV_WC_SUCCESS) {
            EXPECT_EQ((int)wc.opcode, (int)MLX5DV_WC_RAW_WQE);
            EXPECT_EQ(wc.byte_len, 4u);
        }
        uint32_t v;
        memcpy(&v, lbuf.data(), 4);
        return be32toh(v);
    }
    uint32_t &word32(size_t off)
    {
        return *(uint32_t *)(rbuf.data() + off);
    }
    uint64_t &word64(size_t off)
    {
        return *(uint64_t *)(rbuf.data() + off);
    }
};

/* rdma-core v44 mlx5_qp_fill_wr_pfns: a DCI takes RAW_WQE (and MEMCPY) as mlx5 send ops. */
TEST_F(emu_raw_wqe, dci_accepts_raw_wqe_send_op)
{
    errno = 0;
    EXPECT_EQ(create_raw_dci(d, MLX5DV_QP_EX_WITH_RAW_WQE |
                                        MLX5DV_QP_EX_WITH_MR_LIST),
              nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    /* without the flag the builder is refused, never run */
    make(0);
    raw_wqe w = build(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1));
    ibv_wr_start(c.qpx);
    mlx5dv_wr_raw_wqe(c.dv, w.b);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, ibv_wr_complete(c.qpx));
    EXPECT_EQ(word32(0), 0u);
}

TEST_F(emu_raw_wqe, masked_atomics_32)
{
    /* the neighbouring 4 bytes must never change */
    word32(64) = 40;
    word32(68) = 0x5a5a5a5a;
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 64, 2)),
              40u); /* add */
    EXPECT_EQ(word32(64), 42u);
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 64, 0xffffffffu)),
              42u); /* add -1 */
    EXPECT_EQ(word32(64), 41u);
    word32(64) = 0xf0f0f0f0u;
    /* xor: masked fetch-add, every bit its own field */
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 64, 0xff00ff00u,
                           0xffffffffu)),
              0xf0f0f0f0u);
    EXPECT_EQ(word32(64), 0x0ff00ff0u);
    /* and: swap_mask = ~v, swap = v, compare_mask 0 */
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 64, 0x00ffff00u, 0,
                           ~0x00ffff00u, 0)),
              0x0ff00ff0u);
    EXPECT_EQ(word32(64), 0x00f00f00u);
    /* or: swap_mask = v */
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 64, 0x80000001u, 0,
                           0x80000001u, 0)),
              0x00f00f00u);
    EXPECT_EQ(word32(64), 0x80f00f01u);
    /* swap: swap_mask all ones */
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 64, 7, 0, 0xffffffffu,
                           0)),
              0x80f00f01u);
    EXPECT_EQ(word32(64), 7u);
    /* compare-swap: a failed compare leaves memory alone, returns the old value */
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 64, 99, 8, 0xffffffffu,
                           0xffffffffu)),
              7u);
    EXPECT_EQ(word32(64), 7u);
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 64, 99, 7, 0xffffffffu,
                           0xffffffffu)),
              7u);
    EXPECT_EQ(word32(64), 99u);
    /* compare under a mask: only the low byte is compared */
    word32(64) = 0x12345678u;
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 64, 0xaa, 0xff000078u,
                           0xff, 0xff)),
              0x12345678u);
    EXPECT_EQ(word32(64), 0x123456aau);
    EXPECT_EQ(word32(68), 0x5a5a5a5au);
    /* the second half of an 8-byte word is a valid 4-byte target */
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 68, 1)), 0x5a5a5a5au);
    EXPECT_EQ(word32(68), 0x5a5a5a5bu);
    EXPECT_EQ(word32(64), 0x123456aau);
}

TEST_F(emu_raw_wqe, masked_fetch_add_field_boundary)
{
    /* four byte fields (boundary = the top bit of each): no carry leaves a byte */
    word32(0) = 0x01ff7fffu;
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 0x01010101u,
                           0x80808080u)),
              0x01ff7fffu);
    EXPECT_EQ(word32(0), 0x02008000u);
    /* 64-bit: two 32-bit fields */
    raw_args r   = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 8, 1,
                          0x8000000080000000ull);
    r.opmod      = OPMOD_EXT64;
    r.asize      = 8;
    r.byte_count = 8;
    word64(8)    = 0x00000005ffffffffull;
    ibv_wc wc;
    ASSERT_EQ(post(r), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 8u);
    EXPECT_EQ(*(uint64_t *)lbuf.data(),
              0x00000005ffffffffull); /* 8-byte: host order */
    EXPECT_EQ(word64(8), 0x0000000500000000ull);
}

TEST_F(emu_raw_wqe, masked_compare_swap_64)
{
    /* 32-byte segment: swap, compare, swap_mask, compare_mask */
    raw_args r = args32(MLX5_OPCODE_ATOMIC_MASKED_CS, 16, 0xffff0000ffff0000ull,
                        0, 0xffffffff00000000ull, 0);
    r.opmod    = OPMOD_EXT64;
    r.asize    = 8;
    r.aseg     = 32;
    r.byte_count = 8;
    word64(16)   = 0x1111111122222222ull;
    ibv_wc wc;
    ASSERT_EQ(post(r), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ((int)wc.opcode, (int)MLX5DV_WC_RAW_WQE);
    EXPECT_EQ(*(uint64_t *)lbuf.data(), 0x1111111122222222ull);
    EXPECT_EQ(word64(16), 0xffff000022222222ull);
}

TEST_F(emu_raw_wqe, standard_atomics_and_base_av)
{
    /* opmod 0: the ordinary 8-byte atomics, here with a 16-byte (base) address vector */
    raw_args r   = args32(MLX5_OPCODE_ATOMIC_FA, 24, 5);
    r.opmod      = 0;
    r.asize      = 8;
    r.byte_count = 8;
    r.ext_av     = false;
    word64(24)   = 10;
    ibv_wc wc;
    ASSERT_EQ(post(r), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(*(uint64_t *)lbuf.data(), 10u);
    EXPECT_EQ(word64(24), 15u);
    r.opcode = MLX5_OPCODE_ATOMIC_CS;
    r.a[0]   = 77; /* swap */
    r.a[1]   = 15; /* compare */
    ASSERT_EQ(post(r), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(word64(24), 77u);
}

/* Signaling comes from the control segment only: wr_flags and sq_sig_all do not apply. */
TEST_F(emu_raw_wqe, signaled_by_control_segment)
{
    make(MLX5DV_QP_EX_WITH_RAW_WQE, 1);
    raw_args r = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1);
    r.signaled = false;
    ASSERT_EQ(post(r, 1, IBV_SEND_SIGNALED), 0);
    r.signaled = true;
    ASSERT_EQ(post(r, 2, 0), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id,
              2u); /* 1 wrote none: it would precede 2 (per-QP order) */
    EXPECT_TRUE(cq_empty_now(d.cq)); /* 2 was the last WR */
    EXPECT_EQ(word32(0), 2u);
}

/* A WQE the HCA cannot parse completes with LOC_QP_OP_ERR (even unsignaled), executes nothing,
 * and moves the DCI to ERR: bad opcode, bad opmod (operand size), ds not matching the layout,
 * response length not the operand size, another QP's number. */
TEST_F(emu_raw_wqe, malformed_wqe_loc_qp_op_err)
{
    struct {
        const char *what;
        raw_args r;
    } bad[7];
    bad[0] = { "opcode", args32(0x13, 0, 1) };
    bad[1] = { "opmod 16B", args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1) };
    bad[1].r.opmod = 0x0a; /* 16-byte operands: not in the atomic caps */
    bad[1].r.byte_count =
            8; /* so that only the opmod is wrong for an 8-byte reading */
    bad[2]            = { "ds", args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1) };
    bad[2].r.ds_delta = 1;
    bad[3] = { "byte_count", args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1) };
    bad[3].r.byte_count = 8;
    bad[4]              = { "qpn", args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1) };
    bad[5] = { "standard 4B", args32(MLX5_OPCODE_ATOMIC_FA, 0, 1) };
    bad[5].r.opmod =
            0; /* a standard atomic is 8 bytes: a 4-byte response is malformed */
    bad[6] = { "masked opmod 0", args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1) };
    bad[6].r.opmod      = 0; /* a masked atomic needs the extended opmod */
    bad[6].r.byte_count = 8;
    for (auto &b : bad) {
        SCOPED_TRACE(b.what);
        make(MLX5DV_QP_EX_WITH_RAW_WQE);
        raw_args r = b.r;
        r.qpn      = c.qp->qp_num ^
                (strcmp(b.what, "qpn") == 0 ? 1 : 0); /* the new DCI's */
        r.signaled = false;
        word32(0)  = 5;
        ASSERT_EQ(post(r, 9), 0);
        ibv_wc wc;
        ASSERT_TRUE(poll_one(d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR);
        EXPECT_EQ(wc.wr_id, 9u);
        EXPECT_EQ(word32(0), 5u);
        ibv_qp_attr qa;
        ibv_qp_init_attr qi;
        ASSERT_EQ(dcxemu_ibv_query_qp(c.qp, &qa, IBV_QP_STATE, &qi), 0);
        EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
    }
}

TEST_F(emu_raw_wqe, misaligned_rem_inv_req)
{
    word32(0) = 1;
    EXPECT_EQ(run32(args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 2, 1),
                    IBV_WC_REM_INV_REQ_ERR),
              0xeeeeeeeeu);
    EXPECT_EQ(word32(0), 1u);
    make(MLX5DV_QP_EX_WITH_RAW_WQE);
    /* 8-byte masked atomic on a 4-byte aligned address */
    raw_args r   = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 4, 1);
    r.opmod      = OPMOD_EXT64;
    r.asize      = 8;
    r.byte_count = 8;
    ASSERT_EQ(post(r), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
}

/* The datagram segment is resolved like an AH + DCT number + DC key: wrong key or LID is a
 * target that never answers (RETRY_EXC_ERR); remote key and rights are checked as for verbs. */
TEST_F(emu_raw_wqe, address_and_keys_checked)
{
    raw_args r = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1);
    r.dc_key ^= 1;
    EXPECT_EQ(run32(r, IBV_WC_RETRY_EXC_ERR), 0xeeeeeeeeu);
    make(MLX5DV_QP_EX_WITH_RAW_WQE);
    r     = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1);
    r.lid = (uint16_t)(d.lid + 7);
    run32(r, IBV_WC_RETRY_EXC_ERR);
    make(MLX5DV_QP_EX_WITH_RAW_WQE);
    r = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1);
    r.rkey ^= 0x100;
    run32(r, IBV_WC_REM_ACCESS_ERR);
    make(MLX5DV_QP_EX_WITH_RAW_WQE);
    r = args32(MLX5_OPCODE_ATOMIC_MASKED_FA, 0, 1);
    r.lkey ^= 0x100;
    run32(r, IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(word32(0), 0u);
}

/* DEVX QUERY_HCA_CAP, atomic page: what UCX's mlx5 md reads (ib_mlx5dv_md.c). */
int query_atomic_caps(ibv_context *ctx, uint16_t *ops, uint16_t *size_qp,
                      uint16_t *size_dc, uint8_t *mode8b)
{
    uint8_t in[16] = {}, out[16 + 4096] = {};
    in[0]   = 0x01; /* QUERY_HCA_CAP 0x100 */
    in[7]   = (3 << 1) | 1;
    int ret = dcxemu_mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out,
                                             sizeof(out));
    if (ret != 0)
        return ret;
    const uint8_t *p = out + 16;
    *ops             = (uint16_t)(p[0x12] << 8 | p[0x13]);
    *size_qp         = (uint16_t)(p[0x16] << 8 | p[0x17]);
    *size_dc         = (uint16_t)(p[0x1a] << 8 | p[0x1b]);
    *mode8b          = p[8] >> 6;
    return 0;
}

ibv_context *open_devx()
{
    int n             = 0;
    ibv_device **list = dcxemu_ibv_get_device_list(&n);
    if (list == nullptr || n < 1)
        return nullptr;
    mlx5dv_context_attr a;
    memset(&a, 0, sizeof(a));
    a.flags          = MLX5DV_CONTEXT_FLAGS_DEVX;
    ibv_context *ctx = dcxemu_mlx5dv_open_device(list[0], &a);
    dcxemu_ibv_free_device_list(list);
    return ctx;
}

TEST(emu_devx, query_atomic_caps)
{
    uint16_t ops = 0, qp = 0, dc = 0;
    uint8_t mode = 0;
    dev d;
    ASSERT_TRUE(d.open());
    /* QUERY_HCA_CAP is whitelisted: the same answer without DEVX */
    EXPECT_EQ(query_atomic_caps(d.ctx, &ops, &qp, &dc, &mode), 0);
    EXPECT_EQ(ops, 0xf);
    d.close();
    ibv_context *ctx = open_devx();
    ASSERT_NE(ctx, nullptr);
    ASSERT_EQ(query_atomic_caps(ctx, &ops, &qp, &dc, &mode), 0);
    EXPECT_EQ(ops, 0xf); /* CS, FA, masked CS, masked FA */
    EXPECT_EQ(qp, 0xc); /* 4 and 8 bytes */
    EXPECT_EQ(dc, 0xc);
    EXPECT_EQ(mode, 1); /* 8-byte responses in host order */
    /* any other command: firmware status BAD_OP (EINVAL without DEVX) */
    uint8_t in[16] = {}, out[64] = {};
    in[0] = 0x01;
    in[1] = 0x01;
    EXPECT_ERRNO_EQ(EREMOTEIO,
                    dcxemu_mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out,
                                                   sizeof(out)));
    EXPECT_EQ(out[0], 0x02);
    /* QUERY_HCA_CAP into less than the whole output: BAD_OUTPUT_LEN */
    in[1] = 0x00;
    in[7] = (3 << 1) | 1;
    EXPECT_ERRNO_EQ(EREMOTEIO,
                    dcxemu_mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out,
                                                   sizeof(out)));
    EXPECT_EQ(out[0], 0x51);
    EXPECT_EQ(dcxemu_ibv_close_device(ctx), 0);
}

/* What the DEVX capability children post on: a device, a DCT (key 3) at RTR,
 * a DCI taking raw WQEs at RTS and a registered buffer, freed in reverse. */
struct raw_pair {
    dev d;
    ibv_srq *srq = nullptr;
    ibv_qp *dct  = nullptr;
    dci c;
    ibv_mr *mr = nullptr;

    /* 0, or the child's exit code for the step that failed: 4 the device,
     * 5 the DCT, 6 the DCI, 7 the registration, 14 no raw-WQE builder. */
    int setup(void *buf, size_t len)
    {
        if (!d.open())
            return 4;
        srq = create_srq(d);
        dct = create_dct(d, srq, 3);
        if (dct == nullptr || dct_to_rtr(dct) != 0)
            return 5;
        c.qp = create_raw_dci(d, MLX5DV_QP_EX_WITH_RAW_WQE);
        if (c.qp == nullptr && errno == EOPNOTSUPP)
            return 14;
        if (c.qp == nullptr || dci_to_rts(c.qp) != 0)
            return 6;
        c.qpx = dcxemu_ibv_qp_to_qp_ex(c.qp);
        c.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(c.qpx);
        mr    = dcxemu_ibv_reg_mr(d.pd, buf, len,
                                  IBV_ACCESS_LOCAL_WRITE |
                                          IBV_ACCESS_REMOTE_ATOMIC |
                                          IBV_ACCESS_REMOTE_WRITE);
        return (mr == nullptr) ? 7 : 0;
    }

    /* A raw atomic WQE to @a target in the buffer, its response into the
     * buffer too (the caller sets laddr and byte_count). */
    raw_args args(uint8_t opcode, uint8_t opmod, void *target) const
    {
        raw_args r;
        r.opcode = opcode;
        r.opmod  = opmod;
        r.qpn    = c.qp->qp_num;
        r.dc_key = 3;
        r.dctn   = dct->qp_num;
        r.lid    = d.lid;
        r.raddr  = (uintptr_t)target;
        r.rkey   = mr->rkey;
        r.lkey   = mr->lkey;
        return r;
    }

    ~raw_pair()
    {
        if (mr != nullptr)
            dcxemu_ibv_dereg_mr(mr);
        if (c.qp != nullptr)
            dcxemu_ibv_destroy_qp(c.qp);
        if (dct != nullptr)
            dcxemu_ibv_destroy_qp(dct);
        if (srq != nullptr)
            dcxemu_ibv_destroy_srq(srq);
        d.close();
    }
};

/* extatomics: the device's answer to the atomic-caps query and to a masked raw WQE, in a
 * process with the caller's settings. Exit 0 if masked atomics are offered and work, 10 if they
 * are neither offered nor executed (LOC_QP_OP_ERR), 11 if atomics are off altogether; other
 * values: a check failed. */
EMU_CHILD(extatomics)
{
    ibv_context *ctx = open_devx();
    if (ctx == nullptr)
        return 2;
    uint16_t ops, qp, dc;
    uint8_t mode;
    if (query_atomic_caps(ctx, &ops, &qp, &dc, &mode) != 0)
        return 3;
    dcxemu_ibv_close_device(ctx);
    if (ops == 0 && qp == 0 && dc == 0) {
        return 11;
    }
    bool offered = (ops & 0xc) == 0xc;
    static uint32_t buf[4];
    raw_pair p;
    int err = p.setup(buf, sizeof(buf));
    if (err != 0)
        return err;
    dci &c       = p.c;
    raw_args r   = p.args(MLX5_OPCODE_ATOMIC_MASKED_FA, OPMOD_EXT32, &buf[0]);
    r.a[0]       = 1;
    r.asize      = 4;
    r.laddr      = (uintptr_t)&buf[2];
    r.byte_count = 4;
    raw_wqe w    = build(r);
    ibv_wr_start(c.qpx);
    mlx5dv_wr_raw_wqe(c.dv, w.b);
    if (ibv_wr_complete(c.qpx) != 0)
        return 8;
    ibv_wc wc;
    if (!poll_one(p.d.cq, &wc))
        return 9;
    if (offered) {
        return (wc.status == IBV_WC_SUCCESS && buf[0] == 1) ? 0 : 12;
    }
    return (wc.status == IBV_WC_LOC_QP_OP_ERR && buf[0] == 0) ? 10 : 13;
}

/* compactav: the general capability compact_address_vector (bit 0x200) and a DCI's raw WQEs with
 * the extended, then the compact address vector, in a process with the caller's settings. Exit 0
 * if the capability is set and both execute, 10 if it is clear, the extended one executes and
 * the compact one completes with LOC_QP_OP_ERR, touching nothing; other values: a check failed. */
EMU_CHILD(compactav)
{
    ibv_context *ctx = open_devx();
    if (ctx == nullptr)
        return 2;
    uint8_t in[16] = {}, out[16 + 4096] = {};
    in[0] = 0x01; /* QUERY_HCA_CAP 0x100, the general page, current */
    in[7] = 1;
    if (dcxemu_mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, sizeof(out)) !=
        0)
        return 3;
    dcxemu_ibv_close_device(ctx);
    bool cap = (out[16 + 0x200 / 8] & 0x80) != 0;
    static uint64_t buf[2];
    raw_pair p;
    int err = p.setup(buf, sizeof(buf));
    if (err != 0)
        return err;
    dci &c       = p.c;
    raw_args r   = p.args(MLX5_OPCODE_ATOMIC_FA, 0, &buf[0]);
    r.a[0]       = 1;
    r.laddr      = (uintptr_t)&buf[1];
    r.byte_count = 8;
    int ret      = 0;
    for (bool ext : { true, false }) {
        r.ext_av  = ext;
        raw_wqe w = build(r);
        ibv_wr_start(c.qpx);
        mlx5dv_wr_raw_wqe(c.dv, w.b);
        if (ibv_wr_complete(c.qpx) != 0)
            return 8;
        ibv_wc wc;
        if (!poll_one(p.d.cq, &wc))
            return 9;
        if (ext || cap) {
            ret = (wc.status == IBV_WC_SUCCESS) ? ret : 12;
        } else {
            ret = (wc.status == IBV_WC_LOC_QP_OP_ERR && buf[0] == 1) ? 10 : 13;
        }
    }
    if (ret == 0 && buf[0] != 2)
        ret = 15;
    return ret;
}

TEST(emu_devx, compact_av_mode)
{
    pid_t p = spawn(fresh_fabric(), { "compactav" }, {});
    int st  = wait_child(p, 20000);
    EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : 1000, 0);
    p  = spawn(fresh_fabric(), { "compactav" }, { "DCXEMU_COMPACT_AV=0" });
    st = wait_child(p, 20000);
    EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : 1000, 10);
}

int run_child(const std::vector<std::string> &env)
{
    pid_t p = spawn(fresh_fabric(), { "extatomics" }, env);
    int st  = wait_child(p, 20000);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000;
}

TEST(emu_devx, ext_atomics_mode)
{
    EXPECT_EQ(run_child({}), 0);
    EXPECT_EQ(run_child({ "DCXEMU_EXT_ATOMICS=0" }), 10);
    EXPECT_EQ(run_child({ "DCXEMU_ATOMIC_CAP=none" }), 11);
    /* rdma-core before v36: no raw-WQE builder, the DCI is refused */
    EXPECT_EQ(run_child({ "DCXEMU_RAW_WQE=0" }), 14);
}

} // namespace
