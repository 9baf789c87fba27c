/* DCI streams through unmodified rdma-core: the capability libmlx5 reads
 * from the query-device response, a stream DCI created through libmlx5's
 * create-QP command, and the stream id libmlx5 writes into each WQE's
 * control segment (mlx5dv_wr_set_dc_addr_stream) reaching the device. */
#include "mlx5face_test.h"

using namespace mlx5face;

namespace {

bool wait_for(const std::function<bool()> &cond)
{
    return dcx_test::poll_until(
            cond, [] {}, 10.0);
}

struct mlx5face_streams : public ::testing::Test {
    device d;
    target t;
    ibv_cq *cq       = nullptr;
    ibv_qp *qp       = nullptr;
    ibv_qp_ex *qpx   = nullptr;
    mlx5dv_qp_ex *dv = nullptr;
    ibv_ah *ah       = nullptr;
    memory mem;
    sq_view v;

    void SetUp() override
    {
        ASSERT_TRUE(d.open(face_verbs()));
        ASSERT_TRUE(t.create(d));
        cq = ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
        ASSERT_NE(nullptr, cq);
        ASSERT_TRUE(mem.reg(d, 65536));
    }
    void TearDown() override
    {
        if (ah != nullptr) {
            EXPECT_EQ(0, ibv_destroy_ah(ah));
        }
        if (qp != nullptr) {
            EXPECT_EQ(0, ibv_destroy_qp(qp));
        }
        mem.dereg();
        if (cq != nullptr) {
            EXPECT_EQ(0, ibv_destroy_cq(cq));
        }
        t.destroy();
        d.close();
    }
    ibv_qp *create(uint8_t log_conc, uint8_t log_err, bool streams = true)
    {
        mlx5dv_dci_streams st = { log_conc, log_err };
        return create_dci(d, cq, 64, false, 0, streams ? &st : nullptr);
    }
    void make(uint8_t log_conc, uint8_t log_err, bool streams = true)
    {
        ibv_ah_attr aa;
        qp = create(log_conc, log_err, streams);
        ASSERT_NE(nullptr, qp) << strerror(errno);
        ASSERT_EQ(0, dci_to_rts(d, qp)); /* rnr_retry 7: RNR waits */
        qpx = ibv_qp_to_qp_ex(qp);
        dv  = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
        memset(&aa, 0, sizeof(aa));
        aa.dlid     = d.lid;
        aa.port_num = 1;
        ah          = ibv_create_ah(d.pd, &aa);
        ASSERT_TRUE((qpx != nullptr) && (dv != nullptr) && (ah != nullptr));
        ASSERT_TRUE(v.init(qp));
    }
    /* A WRITE of 8 bytes of v at off (or a SEND of 8 bytes) on a stream. */
    int post(uint16_t stream, bool send, size_t off, char val, uint64_t wr_id,
             uint32_t rkey = 0)
    {
        memset(mem.ptr(off), val, 8);
        ibv_wr_start(qpx);
        qpx->wr_id    = wr_id;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        if (send) {
            ibv_wr_send(qpx);
        } else {
            ibv_wr_rdma_write(qpx, rkey ? rkey : t.mem.mr->rkey,
                              t.mem.addr(off));
        }
        mlx5dv_wr_set_dc_addr_stream(dv, ah, t.dctn(), DC_KEY, stream);
        ibv_wr_set_sge(qpx, mem.mr->lkey, mem.addr(off), 8);
        return ibv_wr_complete(qpx);
    }
    void expect_cqe(uint64_t wr_id, int status)
    {
        completion c;
        ASSERT_TRUE(poll_legacy(cq, &c));
        EXPECT_EQ(wr_id, c.wr_id);
        EXPECT_EQ(status, c.status)
                << ibv_wc_status_str((ibv_wc_status)c.status);
    }
    ibv_qp_state state()
    {
        ibv_qp_attr qa;
        ibv_qp_init_attr qi;
        EXPECT_EQ(0, ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi));
        return qa.qp_state;
    }
};

/* libmlx5 keeps the caps of the query-device response and checks
 * mlx5dv_create_qp against them itself. */
TEST_F(mlx5face_streams, caps_from_the_query_device_response)
{
    mlx5dv_context c;
    memset(&c, 0, sizeof(c));
    c.comp_mask = MLX5DV_CONTEXT_MASK_DCI_STREAMS;
    ASSERT_EQ(0, mlx5dv_query_device(d.ctx, &c));
    ASSERT_TRUE(c.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS);
    EXPECT_EQ(5, c.dci_streams_caps.max_log_num_concurent);
    EXPECT_EQ(3, c.dci_streams_caps.max_log_num_errored);
    errno = 0;
    EXPECT_EQ(nullptr, create(6, 0));
    EXPECT_EQ(EINVAL, errno);
    make(5, 3);
}

/* The stream id libmlx5 writes into the control segment reaches the
 * device: a stream stalled on RNR does not hold back another stream, and
 * the stalled stream's later WQE waits behind it. */
TEST_F(mlx5face_streams, stream_id_from_the_control_segment)
{
    dcxemu_mlx5_wqe w;
    uint64_t r0 = counters().c.rnr_retries;
    make(2, 0);
    uint16_t pi = v.pi();
    ASSERT_EQ(0, post(2, true, 0, 1, 1)); /* no receive yet: RNR */
    ASSERT_EQ(0, v.decode(pi, &w));
    EXPECT_EQ(2u, w.stream_id);
    ASSERT_TRUE(wait_for([&] { return counters().c.rnr_retries > r0; }));
    ASSERT_EQ(0, post(2, false, 64, 0x11, 2));
    pi = v.pi();
    ASSERT_EQ(0, post(3, false, 128, 0x22, 3));
    ASSERT_EQ(0, v.decode(pi, &w));
    EXPECT_EQ(3u, w.stream_id);
    ASSERT_TRUE(wait_for([&] { return *t.mem.ptr(128) == 0x22; }));
    EXPECT_EQ(0, *t.mem.ptr(64)); /* behind the stalled SEND */
    EXPECT_TRUE(cq_empty(cq)); /* CQEs in send-queue order */
    ASSERT_EQ(0, t.post_recv(10, 1024, 64));
    for (uint64_t id = 1; id <= 3; id++) {
        expect_cqe(id, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(0x11, *t.mem.ptr(64));
}

/* An error ends its stream only; past 2^log_num_errored errored streams the
 * DCI goes to ERR. */
TEST_F(mlx5face_streams, errored_streams)
{
    make(2, 0); /* 4 streams, 1 may be in error */
    ASSERT_EQ(0, post(1, false, 0, 1, 1, t.mem.mr->rkey ^ 0x100));
    expect_cqe(1, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(IBV_QPS_RTS, state());
    ASSERT_EQ(0, post(1, false, 8, 2, 2));
    expect_cqe(2, IBV_WC_WR_FLUSH_ERR);
    ASSERT_EQ(0, post(0, false, 16, 3, 3));
    expect_cqe(3, IBV_WC_SUCCESS);
    EXPECT_EQ(0, *t.mem.ptr(8));
    EXPECT_EQ(3, *t.mem.ptr(16));
    ASSERT_EQ(0, post(2, false, 24, 4, 4, t.mem.mr->rkey ^ 0x100));
    expect_cqe(4, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(IBV_QPS_ERR, state());
    ASSERT_EQ(0, post(3, false, 32, 5, 5));
    expect_cqe(5, IBV_WC_WR_FLUSH_ERR);
}

/* libmlx5 writes any 16-bit stream id; one the DCI does not have is a WQE
 * the device refuses: LOC_QP_OP_ERR, the DCI in ERR. */
TEST_F(mlx5face_streams, stream_id_out_of_range)
{
    make(1, 0);
    ASSERT_EQ(0, post(1, false, 0, 1, 1));
    expect_cqe(1, IBV_WC_SUCCESS);
    ASSERT_EQ(0, post(2, false, 8, 2, 2));
    expect_cqe(2, IBV_WC_LOC_QP_OP_ERR);
    EXPECT_EQ(0, *t.mem.ptr(8));
    EXPECT_EQ(IBV_QPS_ERR, state());
}

/* A WQE the device refuses completes in its turn: behind an older SEND
 * stalled on RNR on another stream, which then executes instead of being
 * flushed; a WQE of a third stream posted after the refused one waits
 * behind it and is flushed.  Then the DCI is in ERR. */
TEST_F(mlx5face_streams, refused_wqe_completes_in_its_turn)
{
    uint64_t r0 = counters().c.rnr_retries;
    make(1, 0);
    ASSERT_EQ(0, post(0, true, 0, 1, 1)); /* no receive yet: RNR */
    ASSERT_TRUE(wait_for([&] { return counters().c.rnr_retries > r0; }));
    ASSERT_EQ(0, post(1, false, 64, 0x11, 2));
    ASSERT_TRUE(wait_for([&] { return *t.mem.ptr(64) == 0x11; }));
    ASSERT_EQ(0, post(5, false, 128, 0x22, 3)); /* no stream 5 */
    ASSERT_EQ(0, post(1, false, 192, 0x33, 4));
    EXPECT_TRUE(cq_empty(cq)); /* CQEs in send-queue order */
    ASSERT_EQ(0, t.post_recv(10, 1024, 64));
    expect_cqe(1, IBV_WC_SUCCESS);
    expect_cqe(2, IBV_WC_SUCCESS);
    expect_cqe(3, IBV_WC_LOC_QP_OP_ERR);
    expect_cqe(4, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(0, *t.mem.ptr(128));
    EXPECT_EQ(0, *t.mem.ptr(192));
    EXPECT_EQ(IBV_QPS_ERR, state());
}

/* libmlx5 writes a stream id on a DCI without streams too (perftest counts
 * one up per WQE): the DCI ignores it, as the HCA does. */
TEST_F(mlx5face_streams, stream_id_ignored_without_streams)
{
    dcxemu_mlx5_wqe w;
    make(0, 0, false);
    uint16_t pi = v.pi();
    ASSERT_EQ(0, post(5, false, 0, 1, 1));
    ASSERT_EQ(0, v.decode(pi, &w));
    EXPECT_EQ(5u, w.stream_id);
    expect_cqe(1, IBV_WC_SUCCESS);
    EXPECT_EQ(1, *t.mem.ptr(0));
    EXPECT_EQ(IBV_QPS_RTS, state());
}

} // namespace
