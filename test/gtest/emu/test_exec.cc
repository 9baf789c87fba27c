/* Single-process execution: DCI and DCT in one process (same-process target path). */
#include "emu_test.h"

#include <stdlib.h>

using namespace emu;

namespace {

struct emu_exec : public ::testing::Test {
    dev d;
    ibv_cq *rcq = nullptr;
    ibv_srq *srq = nullptr;
    ibv_qp *dct = nullptr;
    dci c;
    std::vector<char> lbuf, rbuf;
    ibv_mr *lmr = nullptr, *rmr = nullptr;
    uint64_t key = 0x1122334455667788ull;

    void SetUp() override
    {
        ASSERT_TRUE(d.open());
        rcq = dcxemu_ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
        ASSERT_NE(rcq, nullptr);
        srq = create_srq(d, 64, 2);
        ASSERT_NE(srq, nullptr);
        dct = create_dct(d, srq, key, rcq);
        ASSERT_NE(dct, nullptr);
        ASSERT_EQ(dct_to_rtr(dct), 0);
        lbuf.assign(1 << 16, 0);
        rbuf.assign(1 << 16, 0);
        int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                  IBV_ACCESS_REMOTE_ATOMIC;
        lmr = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(), acc);
        rmr = dcxemu_ibv_reg_mr(d.pd, rbuf.data(), rbuf.size(), acc);
        ASSERT_TRUE(lmr && rmr);
        ASSERT_TRUE(make_dci(d, c, d.lid));
    }
    void TearDown() override
    {
        destroy_dci(c);
        if (dct) { EXPECT_EQ(dcxemu_ibv_destroy_qp(dct), 0); }
        if (srq) { EXPECT_EQ(dcxemu_ibv_destroy_srq(srq), 0); }
        if (lmr) dcxemu_ibv_dereg_mr(lmr);
        if (rmr) dcxemu_ibv_dereg_mr(rmr);
        if (rcq) { EXPECT_EQ(dcxemu_ibv_destroy_cq(rcq), 0); }
        d.close();
    }
    uint64_t raddr(size_t off = 0) { return (uintptr_t)rbuf.data() + off; }
};

TEST_F(emu_exec, write_then_read)
{
    for (int i = 0; i < 4096; i++) lbuf[i] = (char)(i * 7);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 4096, rmr->rkey, raddr(100),
                       dct->qp_num, key, 11), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(wc.qp_num, c.qp->qp_num);
    EXPECT_EQ(memcmp(rbuf.data() + 100, lbuf.data(), 4096), 0);
    EXPECT_EQ(rbuf[99], 0);
    EXPECT_EQ(rbuf[4196], 0);

    ASSERT_EQ(post_one(c, OP_READ, lmr->lkey, lbuf.data() + 8192, 4096, rmr->rkey, raddr(100),
                       dct->qp_num, key, 12), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc.byte_len, 4096u);
    EXPECT_EQ(memcmp(lbuf.data() + 8192, lbuf.data(), 4096), 0);
}

} // namespace
