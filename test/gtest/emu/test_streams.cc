/* DCI streams (mlx5dv_create_qp(3) MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS,
 * mlx5dv_wr_set_dc_addr_stream): the capability, order within a stream, streams that do not
 * wait for each other, errored-stream accounting, and stream ids checked. */
#include "emu_test.h"

#include <endian.h>

using namespace emu;

namespace {

struct emu_streams : public loopback_test {
    emu_streams() : loopback_test(0x5151515151515151ull)
    {
    }

    /* A DCI with 2^log_conc streams, 2^log_err of them allowed in error (streams: false, a
     * DCI without the streams attribute). */
    ibv_qp *create(uint8_t log_conc, uint8_t log_err, bool streams = true)
    {
        mlx5dv_qp_init_attr x;
        memset(&x, 0, sizeof(x));
        x.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS |
                      (streams ? MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS : 0);
        x.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
        x.dc_init_attr.dci_streams.log_num_concurent = log_conc;
        x.dc_init_attr.dci_streams.log_num_errored   = log_err;
        return create_dci(d, 64, 1, 64, true, nullptr, 0, &x);
    }
    void make(uint8_t log_conc, uint8_t log_err, bool streams = true)
    {
        c.qp = create(log_conc, log_err, streams);
        ASSERT_NE(c.qp, nullptr);
        ASSERT_EQ(dci_to_rts(c.qp), 0); /* rnr_retry 7: RNR waits forever */
        c.qpx = dcxemu_ibv_qp_to_qp_ex(c.qp);
        c.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(c.qpx);
        ibv_ah_attr ah;
        memset(&ah, 0, sizeof(ah));
        ah.dlid     = d.lid;
        ah.port_num = 1;
        c.ah        = dcxemu_ibv_create_ah(d.pd, &ah);
        ASSERT_TRUE(c.qpx && c.dv && c.ah);
    }
    /* One WR on a stream: a WRITE of len bytes from lbuf+loff to rbuf+roff (rkey: the target
     * key, or a bad one), or a SEND of len bytes. */
    int post(uint16_t stream, bool send, size_t loff, uint32_t len, size_t roff,
             uint64_t wr_id, uint32_t rkey = 0,
             unsigned flags = IBV_SEND_SIGNALED)
    {
        ibv_wr_start(c.qpx);
        c.qpx->wr_id    = wr_id;
        c.qpx->wr_flags = flags;
        if (send) {
            ibv_wr_send(c.qpx);
        } else {
            ibv_wr_rdma_write(c.qpx, rkey ? rkey : rmr->rkey, raddr(roff));
        }
        mlx5dv_wr_set_dc_addr_stream(c.dv, c.ah, dct->qp_num, key, stream);
        ibv_wr_set_sge(c.qpx, lmr->lkey, (uintptr_t)lbuf.data() + loff, len);
        return ibv_wr_complete(c.qpx);
    }
    int write(uint16_t stream, size_t off, char v, uint64_t wr_id,
              uint32_t rkey = 0)
    {
        memset(lbuf.data() + off, v, 8);
        return post(stream, false, off, 8, off, wr_id, rkey);
    }
    ibv_qp_state hw_state()
    {
        ibv_qp_attr qa;
        ibv_qp_init_attr qi;
        EXPECT_EQ(dcxemu_ibv_query_qp(c.qp, &qa, IBV_QP_STATE, &qi), 0);
        return qa.qp_state;
    }
    /* The next CQE: wr_id and status as expected. */
    void expect_cqe(uint64_t wr_id, ibv_wc_status st)
    {
        ibv_wc wc;
        ASSERT_TRUE(poll_one(d.cq, &wc));
        EXPECT_EQ(wc.wr_id, wr_id);
        EXPECT_EQ(wc.status, st) << "status " << wc.status;
    }
    /* A signaled NOP as a raw WQE whose control segment names a stream. */
    int nop(uint16_t stream, uint64_t wr_id)
    {
        alignas(64) uint8_t b[64];
        memset(b, 0, sizeof(b));
        auto *ctrl                  = (mlx5_wqe_ctrl_seg *)b;
        ctrl->opmod_idx_opcode      = htobe32(MLX5_OPCODE_NOP);
        ctrl->qpn_ds                = htobe32((c.qp->qp_num << 8) | 1);
        ctrl->fm_ce_se              = MLX5_WQE_CTRL_CQ_UPDATE;
        ctrl->dci_stream_channel_id = htobe16(stream);
        ibv_wr_start(c.qpx);
        c.qpx->wr_id = wr_id;
        mlx5dv_wr_raw_wqe(c.dv, b);
        return ibv_wr_complete(c.qpx);
    }
    /* Stall stream s: a SEND the DCT has no receive for waits (RNR) until one is posted. */
    void stall(uint16_t s, uint64_t wr_id)
    {
        uint64_t r0 = PROCESS_COUNT(rnr_retries);
        ASSERT_EQ(post(s, true, 0, 8, 0, wr_id), 0);
        ASSERT_TRUE(
                wait_until([&] { return PROCESS_COUNT(rnr_retries) > r0; }));
    }
};

TEST_F(emu_streams, caps_reported)
{
    mlx5dv_context dv;
    memset(&dv, 0, sizeof(dv));
    dv.comp_mask = MLX5DV_CONTEXT_MASK_DCI_STREAMS;
    ASSERT_EQ(dcxemu_mlx5dv_query_device(d.ctx, &dv), 0);
    ASSERT_TRUE(dv.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS);
    EXPECT_EQ(dv.dci_streams_caps.max_log_num_concurent, 5);
    EXPECT_EQ(dv.dci_streams_caps.max_log_num_errored, 3);
    /* at the caps: a DCI; past either: EINVAL */
    ibv_qp *q = create(5, 3);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    errno = 0;
    EXPECT_EQ(create(6, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(create(1, 4), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(emu_streams, bad_stream_id_refused)
{
    make(2, 0); /* streams 0..3 */
    EXPECT_EQ(write(3, 0, 1, 1), 0);
    expect_cqe(1, IBV_WC_SUCCESS);
    EXPECT_EQ(write(4, 0, 2, 2), EINVAL);
    EXPECT_EQ(write(0xffff, 0, 2, 3), EINVAL);
    EXPECT_TRUE(cq_empty_now(d.cq)); /* nothing refused was posted */
    EXPECT_EQ(rbuf[0], 1);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
    destroy_dci(c);
    /* a DCI without streams has stream 0 only */
    make(0, 0, false);
    EXPECT_EQ(write(1, 0, 3, 4), EINVAL);
    EXPECT_EQ(write(0, 0, 3, 5), 0);
    expect_cqe(5, IBV_WC_SUCCESS);
}

/* A stream waiting for RNR holds back its own later WQEs, not another stream's; CQEs come in
 * send-queue order once the stalled one completes. */
TEST_F(emu_streams, stalled_stream_does_not_hold_back_others)
{
    make(1, 0);
    stall(0, 1);
    ASSERT_EQ(write(0, 64, 0x11, 2),
              0); /* behind the stalled SEND, same stream */
    ASSERT_EQ(write(1, 128, 0x22, 3), 0); /* another stream */
    ASSERT_EQ(write(1, 192, 0x33, 4), 0);
    ASSERT_TRUE(wait_until([&] { return rbuf[192] == 0x33; }));
    EXPECT_EQ(rbuf[128], 0x22);
    EXPECT_EQ(rbuf[64], 0); /* stream 0 keeps its order */
    EXPECT_TRUE(cq_empty_now(d.cq)); /* the head of the queue is not done */
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 1024, 64, 10), 0);
    for (uint64_t id = 1; id <= 4; id++) {
        expect_cqe(id, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(rbuf[64], 0x11);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.wr_id, 10u);
}

/* Within a stream, WQEs run in order even when other streams are interleaved with them. */
TEST_F(emu_streams, order_within_stream)
{
    make(2, 0);
    for (int i = 0; i < 24; i++) {
        /* each stream writes its own word over and over: the last value must stay */
        uint16_t s         = (uint16_t)(i % 4);
        lbuf[1024 + i * 8] = (char)(i + 1);
        ASSERT_EQ(post(s, false, 1024 + i * 8, 1, s * 8, i + 1), 0);
    }
    for (uint64_t id = 1; id <= 24; id++) {
        expect_cqe(id, IBV_WC_SUCCESS);
    }
    for (int s = 0; s < 4; s++) {
        EXPECT_EQ(rbuf[s * 8], (char)(20 + s + 1)) << "stream " << s;
    }
    /* a stalled stream's later writes wait behind it, in their order */
    stall(2, 100);
    for (int i = 0; i < 3; i++) {
        lbuf[2048 + i] = (char)(0x40 + i);
        ASSERT_EQ(post(2, false, 2048 + i, 1, 16, 101 + i), 0);
    }
    ASSERT_EQ(write(3, 512, 0x77, 104), 0);
    ASSERT_TRUE(wait_until([&] { return rbuf[512] == 0x77; }));
    EXPECT_EQ(rbuf[16], (char)23); /* stream 2's writes have not run */
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 4096, 64, 10), 0);
    for (uint64_t id = 100; id <= 104; id++) {
        expect_cqe(id, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(rbuf[16], 0x42);
}

/* An error CQE ends its stream only: its later WQEs flush, others go on, the DCI stays in RTS
 * while at most 2^log_num_errored streams are in error; one more and the DCI goes to ERR. */
TEST_F(emu_streams, errored_streams_then_dci_error)
{
    make(2, 1); /* 4 streams, 2 may be in error */
    ASSERT_EQ(write(1, 0, 1, 1, rmr->rkey + 7), 0);
    expect_cqe(1, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
    ASSERT_EQ(write(1, 8, 2, 2), 0); /* stream 1 is in error: flushed */
    expect_cqe(2, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(rbuf[8], 0);
    ASSERT_EQ(write(0, 16, 3, 3), 0); /* stream 0 goes on */
    expect_cqe(3, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[16], 3);
    /* a second stream in error: still at the limit */
    ASSERT_EQ(write(2, 24, 4, 4, rmr->rkey + 7), 0);
    expect_cqe(4, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
    ASSERT_EQ(write(3, 32, 5, 5), 0);
    expect_cqe(5, IBV_WC_SUCCESS);
    /* another error on a stream already in error changes nothing */
    ASSERT_EQ(write(1, 40, 6, 6, rmr->rkey + 7), 0);
    expect_cqe(6, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
    /* a third stream in error: past the limit, the DCI goes to ERR and everything flushes */
    ASSERT_EQ(write(0, 48, 7, 7, rmr->rkey + 7), 0);
    expect_cqe(7, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_ERR);
    ASSERT_EQ(write(3, 56, 8, 8), 0);
    expect_cqe(8, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(rbuf[56], 0);
    /* RESET and back: every stream starts clean */
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(dcxemu_ibv_modify_qp(c.qp, &a, IBV_QP_STATE), 0);
    ASSERT_EQ(dci_to_rts(c.qp), 0);
    ASSERT_EQ(write(1, 64, 9, 9), 0);
    expect_cqe(9, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[64], 9);
}

/* An error on a stream whose later WQEs were already queued: they flush, while WQEs of another
 * stream posted between them run. */
TEST_F(emu_streams, queued_wqes_of_errored_stream_flush)
{
    make(1, 0); /* 2 streams, 1 may be in error */
    stall(0, 1);
    ASSERT_EQ(write(1, 8, 2, 2, rmr->rkey + 7), 0);
    ASSERT_EQ(write(1, 16, 3, 3), 0);
    ASSERT_EQ(write(0, 24, 4, 4), 0);
    EXPECT_TRUE(cq_empty_now(d.cq));
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 1024, 64, 10), 0);
    expect_cqe(1, IBV_WC_SUCCESS);
    expect_cqe(2, IBV_WC_REM_ACCESS_ERR);
    expect_cqe(3, IBV_WC_WR_FLUSH_ERR);
    expect_cqe(4, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[16], 0);
    EXPECT_EQ(rbuf[24], 4);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
}

/* A raw WQE's control segment carries its stream (dci_stream_channel_id): a NOP on a stream
 * other than a stalled one completes behind it; one naming a stream the DCI does not have
 * completes with LOC_QP_OP_ERR and moves the DCI to ERR. */
TEST_F(emu_streams, raw_wqe_stream_from_control_segment)
{
    make(1, 0);
    stall(0, 1);
    ASSERT_EQ(nop(0, 2), 0);
    ASSERT_EQ(write(1, 8, 3, 3), 0);
    ASSERT_TRUE(wait_until([&] { return rbuf[8] == 3; }));
    EXPECT_TRUE(cq_empty_now(d.cq));
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 1024, 64, 10), 0);
    expect_cqe(1, IBV_WC_SUCCESS);
    expect_cqe(2, IBV_WC_SUCCESS);
    expect_cqe(3, IBV_WC_SUCCESS);
    ASSERT_EQ(nop(2, 4), 0);
    expect_cqe(4, IBV_WC_LOC_QP_OP_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_ERR);
}

/* A DCI without streams ignores the control segment's stream id, as the HCA does (perftest
 * leaves a running count there). */
TEST_F(emu_streams, raw_wqe_stream_ignored_without_streams)
{
    make(0, 0, false);
    ASSERT_EQ(nop(7, 1), 0);
    expect_cqe(1, IBV_WC_SUCCESS);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
}

} // namespace

/* mlx5dv_dci_stream_id_reset(3): an errored stream, its WRs flushed, runs again after a reset,
 * and counts as in error no more, so a DCI at its limit stays in RTS at the next stream error.
 * Refused: a stream the DCI does not have, a DCI gone to ERR (EINVAL, the firmware's), a QP
 * not in RTS as software knows it (EOPNOTSUPP, libmlx5's). */
TEST_F(emu_streams, stream_id_reset_ends_stream_error)
{
    make(2, 0); /* 4 streams, 1 may be in error */
    ASSERT_EQ(write(1, 0, 1, 1, rmr->rkey + 7), 0);
    expect_cqe(1, IBV_WC_REM_ACCESS_ERR);
    ASSERT_EQ(write(1, 8, 2, 2), 0);
    expect_cqe(2, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 1), 0);
    ASSERT_EQ(write(1, 16, 3, 3), 0);
    expect_cqe(3, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[16], 3);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 2), 0) << "not in error";
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 4), EINVAL) << "no such";

    /* stream 1 counts no more: another stream in error is within the limit */
    ASSERT_EQ(write(2, 24, 4, 4, rmr->rkey + 7), 0);
    expect_cqe(4, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 2), 0);
    ASSERT_EQ(write(3, 32, 5, 5, rmr->rkey + 7), 0);
    expect_cqe(5, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(hw_state(), IBV_QPS_RTS);

    /* two in error: the DCI goes to ERR, which no stream reset undoes */
    ASSERT_EQ(write(0, 40, 6, 6, rmr->rkey + 7), 0);
    expect_cqe(6, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 0), EINVAL);
    EXPECT_EQ(hw_state(), IBV_QPS_ERR); /* software learns it */
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 0), EOPNOTSUPP);
}

/* A stream reset on a DCI without streams is refused, and so is one on a DCT (in RTR: libmlx5
 * checks the state first). */
TEST_F(emu_streams, stream_id_reset_refused_without_streams)
{
    make(2, 0, false);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(c.qp, 0), EINVAL);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(dct, 0), EOPNOTSUPP);
    EXPECT_EQ(dcxemu_mlx5dv_dci_stream_id_reset(nullptr, 0), EINVAL);
}
