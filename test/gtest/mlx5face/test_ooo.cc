/* Out-of-order data placement through unmodified rdma-core: the caps libmlx5
 * builds from the query-device response and DEVX QUERY_HCA_CAP, and a DCI and
 * a DCT created with MLX5DV_QP_CREATE_OOO_DP, whose flag libmlx5 sends with
 * the RESET->INIT modify; the SRQ's receives then taken out of order, which
 * libmlx5 learns from each CQE's wqe_counter.  rdma-core before 55 knows
 * neither the mask bit nor the flag: the caps are absent and the flag is
 * refused. */
#include "mlx5face_test.h"

#include <algorithm>
#include <stdlib.h>

using namespace mlx5face;

namespace {

/* rdma-core 55's values and the caps after the older struct (the model's
 * header lays them out). */
const uint32_t OOO_DP = DCXEMU_MLX5DV_QP_CREATE_OOO_DP;

/* The run's libmlx5 sends the flag: rdma-core 55 or later (the rdma-core
 * suite's wrappers name the release in DCX_RDMA_CORE; without it the host's,
 * rdma-core 44). */
bool libmlx5_has_ooo()
{
    const char *rc = getenv("DCX_RDMA_CORE");
    return (rc != nullptr) && (atoi(rc) >= 55);
}

struct mlx5face_ooo : public ::testing::Test {
    device d;
    target t;
    initiator i;

    void SetUp() override
    {
        ASSERT_TRUE(d.open(face_verbs()));
    }
    void TearDown() override
    {
        i.destroy();
        t.destroy();
        d.close();
    }
};

TEST_F(mlx5face_ooo, caps_from_query_device_and_hca_caps)
{
    dcxemu_mlx5dv_context_ooo x;
    memset(&x, 0, sizeof(x));
    x.base.comp_mask = DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS;
    ASSERT_EQ(0, mlx5dv_query_device(d.ctx, &x.base));
    if (!libmlx5_has_ooo()) {
        EXPECT_FALSE(x.base.comp_mask &
                     DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS);
        return;
    }
    ASSERT_TRUE(x.base.comp_mask & DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS);
    /* libmlx5: dp_ordering_ooo_all_dc gives the context's max_recv_wr */
    EXPECT_EQ(32768u, x.ooo_recv_wrs_caps.max_dct);
    EXPECT_EQ(0u, x.ooo_recv_wrs_caps.max_rc);
    EXPECT_EQ(0u, x.ooo_recv_wrs_caps.max_xrc);
    EXPECT_EQ(0u, x.ooo_recv_wrs_caps.max_ud);
    EXPECT_EQ(0u, x.ooo_recv_wrs_caps.max_uc);
}

TEST_F(mlx5face_ooo, receives_taken_out_of_order)
{
    const unsigned n = 16;
    completion c;

    if (!libmlx5_has_ooo()) {
        ibv_cq *cq = ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0);
        ASSERT_NE(nullptr, cq);
        errno = 0;
        EXPECT_EQ(nullptr, create_dci(d, cq, 16, false, 0, nullptr, OOO_DP))
                << "a libmlx5 before rdma-core 55 took the flag";
        EXPECT_EQ(0, ibv_destroy_cq(cq));
        return;
    }
    ASSERT_TRUE(t.create(d, 65536, DC_KEY, nullptr, OOO_DP));
    ASSERT_TRUE(i.create(d, d.lid, 64, 10, 3, false, nullptr, 65536, OOO_DP));
    i.dctn = t.dctn();
    for (unsigned k = 0; k < n; k++) {
        ASSERT_EQ(0, t.post_recv(k, k * 256, 256));
        memset(i.mem.ptr(k * 256), 'a' + k, 256);
    }
    for (unsigned k = 0; k < n; k++) {
        ASSERT_EQ(0, i.send(100 + k, k * 256, 256, false, 0));
    }
    for (unsigned k = 0; k < n; k++) { /* send completions in order */
        ASSERT_TRUE(poll_legacy(i.cq, &c));
        EXPECT_EQ(100 + k, c.wr_id);
        EXPECT_EQ(IBV_WC_SUCCESS, c.status);
    }
    std::vector<uint64_t> took;
    for (unsigned k = 0; k < n; k++) { /* receive completions: message order */
        ASSERT_TRUE(poll_legacy(t.cq, &c));
        ASSERT_EQ(IBV_WC_SUCCESS, c.status);
        ASSERT_LT(c.wr_id, n);
        EXPECT_EQ('a' + k, t.mem.ptr(c.wr_id * 256)[0]);
        EXPECT_EQ('a' + k, t.mem.ptr(c.wr_id * 256)[255]);
        took.push_back(c.wr_id);
    }
    std::vector<uint64_t> sorted = took;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
            << "a receive taken twice";
    EXPECT_FALSE(std::is_sorted(took.begin(), took.end()))
            << "the receives were taken in posting order";
    /* libmlx5 freed them out of order: the SRQ takes n more */
    for (unsigned k = 0; k < n; k++) {
        ASSERT_EQ(0, t.post_recv(k, k * 256, 256));
    }
    ASSERT_EQ(0, i.write(200, 0, 4096, t.mem.mr->rkey, t.mem.addr(8192)));
    ASSERT_TRUE(poll_legacy(i.cq, &c));
    EXPECT_EQ(IBV_WC_SUCCESS, c.status);
    EXPECT_EQ(0, memcmp(i.mem.ptr(0), t.mem.ptr(8192), 4096));
}

} // namespace
