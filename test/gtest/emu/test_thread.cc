/* Thread safety (docs/device-spec.md §6.7): per-QP posting and per-CQ polling from several threads. */
#include "emu_test.h"

#include <atomic>
#include <set>
#include <thread>

using namespace emu;

namespace {

struct emu_thread : public ::testing::Test {
    dev d;
    ibv_srq *srq = nullptr;
    ibv_qp *dct  = nullptr;
    std::vector<char> buf;
    ibv_mr *mr = nullptr;
    void SetUp() override
    {
        ASSERT_TRUE(d.open(0, 8192));
        srq = create_srq(d);
        dct = create_dct(d, srq, 11);
        ASSERT_EQ(dct_to_rtr(dct), 0);
        buf.assign(1 << 16, 0);
        mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                               IBV_ACCESS_LOCAL_WRITE |
                                       IBV_ACCESS_REMOTE_WRITE);
        ASSERT_NE(mr, nullptr);
    }
    void TearDown() override
    {
        dcxemu_ibv_destroy_qp(dct);
        dcxemu_ibv_destroy_srq(srq);
        dcxemu_ibv_dereg_mr(mr);
        d.close();
    }
};

TEST_F(emu_thread, shared_dci_posting_and_legacy_polling)
{
    dci c;
    ASSERT_TRUE(make_dci(d, c, d.lid, 64));
    const int P = 4, K = 500;
    std::atomic<int> done{ 0 }, bad{ 0 };
    std::vector<std::vector<uint64_t>> seen(2);
    std::vector<std::thread> th;
    for (int p = 0; p < P; p++) {
        th.emplace_back([&, p] {
            for (int i = 0; i < K; i++) {
                uint64_t id = (uint64_t)p << 32 | (uint64_t)i;
                int r;
                uint64_t end = now_ms() + 10000;
                while ((r = post_one(c, OP_WRITE, mr->lkey, buf.data() + 64 * p,
                                     64, mr->rkey,
                                     (uintptr_t)buf.data() + 32768 + 64 * p,
                                     dct->qp_num, 11, id)) == ENOMEM &&
                       now_ms() < end) {
                    usleep(20); /* SQ full until the pollers free slots */
                }
                if (r != 0)
                    bad++;
            }
        });
    }
    for (int q = 0; q < 2; q++) {
        th.emplace_back([&, q] {
            uint64_t end = now_ms() + 20000;
            while (done.load() < P * K && now_ms() < end) {
                ibv_wc wc[8];
                int n = ibv_poll_cq(d.cq, 8, wc);
                for (int i = 0; i < n; i++) {
                    if (wc[i].status != IBV_WC_SUCCESS)
                        bad++;
                    seen[q].push_back(wc[i].wr_id);
                }
                done += n > 0 ? n : 0;
            }
        });
    }
    for (auto &t : th)
        t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(done.load(), P * K);
    std::set<uint64_t> all(seen[0].begin(), seen[0].end());
    all.insert(seen[1].begin(), seen[1].end());
    EXPECT_EQ(all.size(),
              (size_t)(P * K)); /* each CQE delivered exactly once */
    destroy_dci(c);
}

TEST_F(emu_thread, ex_cq_concurrent_pollers)
{
    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe        = 4096;
    ca.wc_flags   = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
    ibv_cq_ex *cq = dcxemu_ibv_create_cq_ex(d.ctx, &ca);
    ASSERT_NE(cq, nullptr);
    const int T = 3, K = 300;
    std::vector<dci> cs(T);
    for (int i = 0; i < T; i++) {
        cs[i].qp = create_dci(d, 32, 1, 0, true, ibv_cq_ex_to_cq(cq));
        ASSERT_NE(cs[i].qp, nullptr);
        ASSERT_EQ(dci_to_rts(cs[i].qp), 0);
        cs[i].qpx = dcxemu_ibv_qp_to_qp_ex(cs[i].qp);
        cs[i].dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(cs[i].qpx);
        ibv_ah_attr ah;
        memset(&ah, 0, sizeof(ah));
        ah.dlid     = d.lid;
        ah.port_num = 1;
        cs[i].ah    = dcxemu_ibv_create_ah(d.pd, &ah);
    }
    std::atomic<int> got{ 0 }, bad{ 0 };
    std::vector<std::thread> th;
    for (int i = 0; i < T; i++) {
        th.emplace_back([&, i] {
            for (int k = 0; k < K; k++) {
                uint64_t end = now_ms() + 10000;
                int r;
                while ((r = post_one(cs[i], OP_WRITE, mr->lkey, buf.data(), 8,
                                     mr->rkey, (uintptr_t)buf.data() + 100,
                                     dct->qp_num, 11, (uint64_t)k)) == ENOMEM &&
                       now_ms() < end) {
                    usleep(20);
                }
                if (r)
                    bad++;
            }
        });
    }
    for (int q = 0; q < 2; q++) {
        th.emplace_back([&] {
            uint64_t end = now_ms() + 20000;
            while (got.load() < T * K && now_ms() < end) {
                ibv_poll_cq_attr pa = { 0 };
                if (ibv_start_poll(cq, &pa) != 0)
                    continue;
                int n = 0;
                do {
                    if (cq->status != IBV_WC_SUCCESS ||
                        ibv_wc_read_opcode(cq) != IBV_WC_RDMA_WRITE)
                        bad++;
                    n++;
                } while (ibv_next_poll(cq) == 0);
                ibv_end_poll(cq);
                got += n;
            }
        });
    }
    for (auto &t : th)
        t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(got.load(), T * K);
    for (auto &c : cs)
        destroy_dci(c);
    EXPECT_EQ(dcxemu_ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

} // namespace
