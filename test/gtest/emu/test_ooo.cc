/* Out-of-order data placement (mlx5dv_create_qp(3) MLX5DV_QP_CREATE_OOO_DP,
 * mlx5dv_query_device(3) ooo_recv_wrs_caps): the capability, which QPs take
 * the flag, data of WRITEs and SENDs placed out of order and receive WQEs
 * consumed out of order between a DCI and a DCT that both have it, and
 * everything in order when either lacks it. */
#include "emu_test.h"

#include <algorithm>
#include <mutex>

using namespace emu;

namespace {

/* What the test hook saw: the chunk offsets of each out-of-order copy, and
 * whether, at some chunk, a byte of the watched span was placed while a byte
 * before it was not (what a reader polling a later byte for the end of the
 * message would have taken for a complete message). */
struct ooo_trace {
    std::mutex lock;
    std::vector<uint64_t> chunks;
    unsigned copies           = 0;
    const char *watch         = nullptr;
    size_t watch_len          = 0;
    char want                 = 0;
    bool later_before_earlier = false;
};

ooo_trace g_trace;

void ooo_hook(dcxemu_test_event ev, uint32_t, uint64_t len, void *)
{
    std::lock_guard<std::mutex> g(g_trace.lock);
    if (ev == DCXEMU_TEST_COPY_START) {
        g_trace.copies++;
    } else if (ev == DCXEMU_TEST_OOO_CHUNK) {
        g_trace.chunks.push_back(len);
        const char *w     = g_trace.watch;
        size_t first_hole = 0;
        while (w != nullptr && first_hole < g_trace.watch_len &&
               w[first_hole] == g_trace.want) {
            first_hole++;
        }
        for (size_t i = first_hole; w != nullptr && i < g_trace.watch_len;
             i++) {
            if (w[i] == g_trace.want) {
                g_trace.later_before_earlier = true;
                break;
            }
        }
    }
}

mlx5dv_qp_init_attr ooo_attr(bool ooo)
{
    mlx5dv_qp_init_attr x;
    memset(&x, 0, sizeof(x));
    if (ooo) {
        x.comp_mask    = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
        x.create_flags = DCXEMU_MLX5DV_QP_CREATE_OOO_DP;
    }
    return x;
}

ibv_qp *create_ooo_dct(dev &d, ibv_srq *srq, uint64_t key, ibv_cq *cq, bool ooo)
{
    ibv_qp_init_attr_ex a;
    mlx5dv_qp_init_attr dv = ooo_attr(ooo);
    memset(&a, 0, sizeof(a));
    a.qp_type = IBV_QPT_DRIVER;
    a.send_cq = a.recv_cq = cq;
    a.srq                 = srq;
    a.pd                  = d.pd;
    a.comp_mask           = IBV_QP_INIT_ATTR_PD;
    dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv.dc_init_attr.dct_access_key = key;
    return dcxemu_mlx5dv_create_qp(d.ctx, &a, &dv);
}

/* A loopback DCI and DCT, each with or without the flag. */
struct emu_ooo : public loopback_test {
    emu_ooo() : loopback_test(0x0770077007700770ull)
    {
    }
    void TearDown() override
    {
        dcxemu_test_hook(nullptr, nullptr);
        loopback_test::TearDown();
    }
    void make(bool dci_ooo, bool dct_ooo)
    {
        ASSERT_EQ(dcxemu_ibv_destroy_qp(dct), 0);
        dct = create_ooo_dct(d, srq, key, rcq, dct_ooo);
        ASSERT_NE(dct, nullptr);
        ASSERT_EQ(dct_to_rtr(dct), 0);
        mlx5dv_qp_init_attr x = ooo_attr(dci_ooo);
        c.qp                  = create_dci(d, 64, 2, 64, true, nullptr, 0, &x);
        ASSERT_NE(c.qp, nullptr);
        ASSERT_EQ(dci_to_rts(c.qp), 0);
        c.qpx = dcxemu_ibv_qp_to_qp_ex(c.qp);
        c.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(c.qpx);
        ibv_ah_attr ah;
        memset(&ah, 0, sizeof(ah));
        ah.dlid     = d.lid;
        ah.port_num = 1;
        c.ah        = dcxemu_ibv_create_ah(d.pd, &ah);
        ASSERT_TRUE(c.qpx && c.dv && c.ah);
        std::lock_guard<std::mutex> g(g_trace.lock);
        g_trace.chunks.clear();
        g_trace.copies               = 0;
        g_trace.watch                = nullptr;
        g_trace.later_before_earlier = false;
        dcxemu_test_hook(ooo_hook, nullptr);
    }
    int write(size_t off, uint32_t len, uint64_t wr_id)
    {
        return post_one(c, OP_WRITE, lmr->lkey, lbuf.data() + off, len,
                        rmr->rkey, raddr(off), dct->qp_num, key, wr_id);
    }
    int send(size_t off, uint32_t len, uint64_t wr_id)
    {
        return post_one(c, OP_SEND, lmr->lkey, lbuf.data() + off, len, 0, 0,
                        dct->qp_num, key, wr_id);
    }
    void expect_cqe(ibv_cq *cq, uint64_t wr_id)
    {
        ibv_wc wc;
        ASSERT_TRUE(poll_one(cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.status;
        EXPECT_EQ(wc.wr_id, wr_id);
    }
    /* Receives 0..n-1 for n SENDs of 256 bytes, each in its own part of rbuf;
     * the SENDs carry their number in every byte.  The receive CQEs come in
     * message order; returns which receive each message took. */
    std::vector<uint64_t> sends_to_receives(unsigned n)
    {
        std::vector<uint64_t> took;
        for (unsigned i = 0; i < n; i++) {
            EXPECT_EQ(post_recv(srq, rmr, rbuf.data() + i * 256, 256, i), 0);
            memset(lbuf.data() + i * 256, 'a' + i, 256);
        }
        for (unsigned i = 0; i < n; i++) {
            EXPECT_EQ(send(i * 256, 256, 100 + i), 0);
        }
        for (unsigned i = 0; i < n; i++) {
            expect_cqe(d.cq, 100 + i); /* requester completions in order */
        }
        for (unsigned i = 0; i < n; i++) {
            ibv_wc wc;
            EXPECT_TRUE(poll_one(rcq, &wc));
            EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
            EXPECT_EQ(wc.byte_len, 256u);
            EXPECT_LT(wc.wr_id, n);
            if (wc.wr_id < n) {
                /* message i landed in the receive the CQE names */
                EXPECT_EQ(rbuf[wc.wr_id * 256], (char)('a' + i));
                EXPECT_EQ(rbuf[wc.wr_id * 256 + 255], (char)('a' + i));
            }
            took.push_back(wc.wr_id);
        }
        return took;
    }
};

TEST_F(emu_ooo, caps_reported)
{
    dcxemu_mlx5dv_context_ooo x;
    memset(&x, 0, sizeof(x));
    x.base.comp_mask = DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS;
    ASSERT_EQ(dcxemu_mlx5dv_query_device(d.ctx, &x.base), 0);
    ASSERT_TRUE(x.base.comp_mask & DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS);
    EXPECT_EQ(x.ooo_recv_wrs_caps.max_dct, 32768u);
    EXPECT_EQ(x.ooo_recv_wrs_caps.max_rc, 0u);
    EXPECT_EQ(x.ooo_recv_wrs_caps.max_xrc, 0u);
    EXPECT_EQ(x.ooo_recv_wrs_caps.max_ud, 0u);
    EXPECT_EQ(x.ooo_recv_wrs_caps.max_uc, 0u);
    /* a caller that does not ask gets nothing written past its struct */
    memset(&x, 0x5a, sizeof(x));
    x.base.comp_mask = 0;
    ASSERT_EQ(dcxemu_mlx5dv_query_device(d.ctx, &x.base), 0);
    EXPECT_EQ(x.base.comp_mask, 0u);
    EXPECT_EQ(x.ooo_recv_wrs_caps.max_dct, 0x5a5a5a5au);
    /* DEVX QUERY_HCA_CAP general: dp_ordering_ooo_all_dc (bit 0x333) only */
    uint8_t in[16] = {}, out[16 + 4096];
    in[0]          = 0x01;
    in[7]          = 1;
    ASSERT_EQ(dcxemu_mlx5dv_devx_general_cmd(d.ctx, in, sizeof(in), out,
                                             sizeof(out)),
              0);
    uint8_t byte = out[16 + 0x330 / 8]; /* bits 0x330..0x337, MSB first */
    EXPECT_EQ(byte & 0xf8, 0x10) << "ud uc xrc dc rc: 0 0 0 1 0";
    /* the layout of rdma-core 55's struct: the caps after reg_c0 */
    EXPECT_EQ(offsetof(dcxemu_mlx5dv_context_ooo, max_dc_rd_atom),
              sizeof(mlx5dv_context));
}

TEST_F(emu_ooo, flag_on_dc_only)
{
    make(true, true);
    /* RC: EOPNOTSUPP (max_rc 0) */
    ibv_qp_init_attr_ex a;
    memset(&a, 0, sizeof(a));
    a.qp_type             = IBV_QPT_RC;
    a.send_cq             = d.cq;
    a.recv_cq             = d.cq;
    a.pd                  = d.pd;
    a.comp_mask           = IBV_QP_INIT_ATTR_PD;
    a.cap.max_send_wr     = 4;
    a.cap.max_send_sge    = 1;
    a.cap.max_recv_wr     = 4;
    a.cap.max_recv_sge    = 1;
    mlx5dv_qp_init_attr x = ooo_attr(true);
    errno                 = 0;
    EXPECT_EQ(dcxemu_mlx5dv_create_qp(d.ctx, &a, &x), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    /* the kernel's modify-QP bit: a DC QP in RESET only */
    EXPECT_EQ(dcxemu_qp_set_ooo_dp(c.qp), EINVAL); /* in RTS */
    ibv_qp *q = create_dci(d);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(dcxemu_qp_set_ooo_dp(q), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    /* an unknown create flag is still EINVAL */
    x.create_flags        = 1u << 12;
    mlx5dv_qp_init_attr y = x;
    errno                 = 0;
    EXPECT_EQ(create_dci(d, 64, 2, 64, true, nullptr, 0, &y), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(emu_ooo, write_placed_out_of_order)
{
    make(true, true);
    const uint32_t len = 4096;
    memset(lbuf.data(), 'w', len);
    {
        std::lock_guard<std::mutex> g(g_trace.lock);
        g_trace.watch     = rbuf.data();
        g_trace.watch_len = len;
        g_trace.want      = 'w';
    }
    ASSERT_EQ(write(0, len, 1), 0);
    expect_cqe(d.cq, 1);
    /* placed in 16 chunks of 256 bytes, not in ascending order */
    std::vector<uint64_t> seen;
    {
        std::lock_guard<std::mutex> g(g_trace.lock);
        seen = g_trace.chunks;
        EXPECT_TRUE(g_trace.later_before_earlier)
                << "no byte was ever placed before an earlier one";
    }
    ASSERT_EQ(seen.size(), 16u);
    EXPECT_FALSE(std::is_sorted(seen.begin(), seen.end()));
    std::vector<uint64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); i++) {
        EXPECT_EQ(sorted[i], i * 256) << "each chunk once";
    }
    /* every byte arrives, and no byte beyond */
    for (uint32_t i = 0; i < len; i++) {
        ASSERT_EQ(rbuf[i], 'w') << i;
    }
    EXPECT_EQ(rbuf[len], 0);
}

TEST_F(emu_ooo, completions_reads_and_atomics_in_order)
{
    make(true, true);
    memset(lbuf.data(), 'x', 8192);
    ASSERT_EQ(write(0, 4096, 1), 0);
    ASSERT_EQ(write(4096, 4096, 2), 0);
    /* a READ after them sees both (each WQE's data is placed before the
     * next starts; READ responses are not reordered) */
    memset(rbuf.data() + 8192, 'r', 512);
    ASSERT_EQ(post_one(c, OP_READ, lmr->lkey, lbuf.data() + 16384, 512,
                       rmr->rkey, raddr(8192), dct->qp_num, key, 3),
              0);
    uint64_t *counter = (uint64_t *)(rbuf.data() + 12288);
    ASSERT_EQ(post_one(c, OP_FADD, lmr->lkey, lbuf.data() + 20480, 8, rmr->rkey,
                       raddr(12288), dct->qp_num, key, 4, IBV_SEND_SIGNALED, 5),
              0);
    for (uint64_t id = 1; id <= 4; id++) {
        expect_cqe(d.cq, id);
    }
    EXPECT_EQ(*counter, 5u);
    for (int i = 0; i < 8192; i++) {
        ASSERT_EQ(rbuf[i], 'x') << i;
    }
    EXPECT_EQ(lbuf[16384], 'r');
    EXPECT_EQ(lbuf[16384 + 511], 'r');
    std::lock_guard<std::mutex> g(g_trace.lock);
    EXPECT_EQ(g_trace.chunks.size(), 32u); /* the two WRITEs only */
}

TEST_F(emu_ooo, receives_consumed_out_of_order)
{
    make(true, true);
    std::vector<uint64_t> took   = sends_to_receives(16);
    std::vector<uint64_t> sorted = took;
    std::sort(sorted.begin(), sorted.end());
    for (unsigned i = 0; i < 16; i++) {
        EXPECT_EQ(sorted[i], i) << "each receive once";
    }
    EXPECT_FALSE(std::is_sorted(took.begin(), took.end()))
            << "the receives were taken in the order they were posted";
}

/* The flag on one side only: the pair keeps IBTA order (mlx5dv_create_qp(3):
 * it must be set on both). */
TEST_F(emu_ooo, one_side_only_in_order)
{
    for (int side = 0; side < 2; side++) {
        SCOPED_TRACE(side == 0 ? "dci only" : "dct only");
        destroy_dci(c);
        make(side == 0, side == 1);
        memset(lbuf.data(), 'v' + side, 4096);
        ASSERT_EQ(write(0, 4096, 1), 0);
        expect_cqe(d.cq, 1);
        std::vector<uint64_t> took = sends_to_receives(16);
        for (unsigned i = 0; i < 16; i++) {
            EXPECT_EQ(took[i], i);
        }
        std::lock_guard<std::mutex> g(g_trace.lock);
        EXPECT_TRUE(g_trace.chunks.empty());
        EXPECT_EQ(g_trace.copies, 17u);
    }
}

/* DCXEMU_OOO_DP=0: no caps, the flag refused (a child: settings are read
 * once per process). */
EMU_CHILD(ooo_off)
{
    (void)argc;
    (void)argv;
    dev d;
    if (!d.open())
        return 2;
    dcxemu_mlx5dv_context_ooo x;
    memset(&x, 0, sizeof(x));
    x.base.comp_mask = DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS;
    if (dcxemu_mlx5dv_query_device(d.ctx, &x.base) != 0)
        return 3;
    int ret = (x.base.comp_mask & DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS) ? 4 :
                                                                             0;
    mlx5dv_qp_init_attr a = ooo_attr(true);
    errno                 = 0;
    ibv_qp *q             = create_dci(d, 64, 2, 64, true, nullptr, 0, &a);
    if (q != nullptr || errno != EOPNOTSUPP)
        ret = 5;
    ibv_srq *srq = create_srq(d);
    q            = create_ooo_dct(d, srq, 1, d.cq, true);
    if (q != nullptr || errno != EOPNOTSUPP)
        ret = 6;
    q = create_dci(d);
    if (q == nullptr || dcxemu_qp_set_ooo_dp(q) != EOPNOTSUPP)
        ret = 7;
    dcxemu_ibv_destroy_qp(q);
    dcxemu_ibv_destroy_srq(srq);
    d.close();
    return ret;
}

TEST(emu_ooo_off, device_without_ooo)
{
    pid_t p = spawn(fresh_fabric(), { "ooo_off" }, { "DCXEMU_OOO_DP=0" });
    int st  = wait_child(p, 20000);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
}

} // namespace
