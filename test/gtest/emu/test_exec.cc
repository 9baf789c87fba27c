/* Single-process execution: DCI and DCT in one process (same-process target path). */
#include "emu_test.h"

#include <stdlib.h>

#include <atomic>
#include <thread>

using namespace emu;

namespace {

struct emu_exec : public loopback_test {
    emu_exec() : loopback_test(0x1122334455667788ull)
    {
    }
    void SetUp() override
    {
        loopback_test::SetUp();
        if (!HasFatalFailure()) {
            ASSERT_TRUE(make_dci(d, c, d.lid));
        }
    }
};

TEST_F(emu_exec, write_then_read)
{
    for (int i = 0; i < 4096; i++)
        lbuf[i] = (char)(i * 7);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 4096, rmr->rkey,
                       raddr(100), dct->qp_num, key, 11),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(wc.qp_num, c.qp->qp_num);
    EXPECT_EQ(memcmp(rbuf.data() + 100, lbuf.data(), 4096), 0);
    EXPECT_EQ(rbuf[99], 0);
    EXPECT_EQ(rbuf[4196], 0);

    ASSERT_EQ(post_one(c, OP_READ, lmr->lkey, lbuf.data() + 8192, 4096,
                       rmr->rkey, raddr(100), dct->qp_num, key, 12),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc.byte_len, 4096u);
    EXPECT_EQ(memcmp(lbuf.data() + 8192, lbuf.data(), 4096), 0);
}


TEST_F(emu_exec, atomics)
{
    uint64_t *word = (uint64_t *)(rbuf.data() + 64);
    uint64_t *res  = (uint64_t *)lbuf.data();
    *word          = 40;
    ibv_wc wc;
    ASSERT_EQ(post_one(c, OP_FADD, lmr->lkey, res, 8, rmr->rkey, raddr(64),
                       dct->qp_num, key, 1, IBV_SEND_SIGNALED, 2),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
    EXPECT_EQ(wc.byte_len, 8u);
    EXPECT_EQ(*res, 40u);
    EXPECT_EQ(*word, 42u);
    /* compare fails: no swap, original returned */
    ASSERT_EQ(post_one(c, OP_CSWAP, lmr->lkey, res, 8, rmr->rkey, raddr(64),
                       dct->qp_num, key, 2, IBV_SEND_SIGNALED, 7, 99),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
    EXPECT_EQ(*res, 42u);
    EXPECT_EQ(*word, 42u);
    ASSERT_EQ(post_one(c, OP_CSWAP, lmr->lkey, res, 8, rmr->rkey, raddr(64),
                       dct->qp_num, key, 3, IBV_SEND_SIGNALED, 42, 99),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(*res, 42u);
    EXPECT_EQ(*word, 99u);
}

TEST_F(emu_exec, send_recv_cqe_fields)
{
    /* one receive WQE with two SGEs: the payload is scattered in order, the rest untouched */
    ibv_sge sg[2] = { { (uintptr_t)rbuf.data(), 10, rmr->lkey },
                      { (uintptr_t)rbuf.data() + 1000, 100, rmr->lkey } };
    ibv_recv_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = 77;
    wr.sg_list = sg;
    wr.num_sge = 2;
    memset(rbuf.data(), 0x5a, 2000);
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
    for (int i = 0; i < 30; i++)
        lbuf[i] = (char)(i + 1);
    ASSERT_EQ(post_one(c, OP_SEND_IMM, lmr->lkey, lbuf.data(), 30, 0, 0,
                       dct->qp_num, key, 5, IBV_SEND_SIGNALED, 0, 0, 0xabcd),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.wr_id, 77u);
    EXPECT_EQ(wc.byte_len, 30u);
    EXPECT_EQ(wc.qp_num, dct->qp_num);
    EXPECT_EQ(wc.src_qp, c.qp->qp_num);
    EXPECT_EQ(wc.slid, d.lid);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 0xabcdu);
    EXPECT_EQ(memcmp(rbuf.data(), lbuf.data(), 10), 0);
    EXPECT_EQ(memcmp(rbuf.data() + 1000, lbuf.data() + 10, 20), 0);
    EXPECT_EQ((unsigned char)rbuf[10], 0x5a);
    EXPECT_EQ((unsigned char)rbuf[1020], 0x5a);
}

TEST_F(emu_exec, write_imm_consumes_recv)
{
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 30000, 16, 9), 0);
    memset(lbuf.data(), 0x11, 512);
    ASSERT_EQ(post_one(c, OP_WRITE_IMM, lmr->lkey, lbuf.data(), 512, rmr->rkey,
                       raddr(0), dct->qp_num, key, 6, IBV_SEND_SIGNALED, 0, 0,
                       7),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(wc.byte_len, 512u);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(ntohl(wc.imm_data), 7u);
    EXPECT_EQ(rbuf[511], 0x11);
    EXPECT_EQ(rbuf[30000], 0); /* nothing scattered into the receive buffer */
}

/* An error CQE moves the DCI to ERR (query_qp) without touching qp->state; later WRs flush,
 * signaled or not. */
TEST_F(emu_exec, rem_access_err_then_flush)
{
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey + 1,
                       raddr(0), dct->qp_num, key, 1, 0),
              0);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 2, 0),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(c.qp->state, IBV_QPS_RTS);
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    ASSERT_EQ(dcxemu_ibv_query_qp(c.qp, &a, IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(a.qp_state, IBV_QPS_ERR);
    EXPECT_EQ(c.qp->state, IBV_QPS_ERR);
    /* posting in ERR is allowed and flushes */
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 3, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

static void expect_status(emu_exec &t, wr_op op, uint32_t lkey, void *l,
                          uint32_t len, uint32_t rkey, uint64_t ra,
                          ibv_wc_status st, uint64_t key)
{
    ibv_wc wc;
    ASSERT_EQ(post_one(t.c, op, lkey, l, len, rkey, ra, t.dct->qp_num, key, 1,
                       0, 1, 2),
              0);
    ASSERT_TRUE(poll_one(t.d.cq, &wc));
    EXPECT_EQ(wc.status, st);
    EXPECT_EQ(wc.qp_num, t.c.qp->qp_num);
}

TEST_F(emu_exec, rem_access_err_rights)
{
    /* MR without remote write */
    ibv_mr *ro = dcxemu_ibv_reg_mr(d.pd, rbuf.data(), 4096,
                                   IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(ro, nullptr);
    expect_status(*this, OP_WRITE, lmr->lkey, lbuf.data(), 8, ro->rkey,
                  raddr(0), IBV_WC_REM_ACCESS_ERR, key);
    EXPECT_EQ(dcxemu_ibv_dereg_mr(ro), 0);
}

TEST_F(emu_exec, rem_access_err_bounds)
{
    expect_status(*this, OP_READ, lmr->lkey, lbuf.data(), 16, rmr->rkey,
                  raddr(rbuf.size() - 8), IBV_WC_REM_ACCESS_ERR, key);
}

TEST_F(emu_exec, rem_access_err_dct_access_flags)
{
    /* a DCT without REMOTE_READ refuses reads even on a readable MR */
    ibv_qp *ro = create_dct(d, srq, key, rcq);
    ASSERT_NE(ro, nullptr);
    ASSERT_EQ(dct_to_rtr(ro, IBV_ACCESS_REMOTE_WRITE), 0);
    ibv_wc wc;
    ASSERT_EQ(post_one(c, OP_READ, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), ro->qp_num, key, 1, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(ro), 0);
}

TEST_F(emu_exec, loc_prot_err_bad_lkey)
{
    expect_status(*this, OP_WRITE, lmr->lkey ^ 0x100, lbuf.data(), 8, rmr->rkey,
                  raddr(0), IBV_WC_LOC_PROT_ERR, key);
}

TEST_F(emu_exec, loc_prot_err_read_needs_local_write)
{
    ibv_mr *ro = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), 4096, 0);
    ASSERT_NE(ro, nullptr);
    expect_status(*this, OP_READ, ro->lkey, lbuf.data(), 8, rmr->rkey, raddr(0),
                  IBV_WC_LOC_PROT_ERR, key);
    EXPECT_EQ(dcxemu_ibv_dereg_mr(ro), 0);
}

TEST_F(emu_exec, loc_qp_op_err_inline_read)
{
    ibv_wc wc;
    char x[8] = {};
    ibv_wr_start(c.qpx);
    c.qpx->wr_id    = 4;
    c.qpx->wr_flags = 0;
    ibv_wr_rdma_read(c.qpx, rmr->rkey, raddr(0));
    ibv_wr_set_inline_data(c.qpx, x, 8);
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, key);
    ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(emu_exec, rem_inv_req_misaligned_atomic)
{
    expect_status(*this, OP_FADD, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                  raddr(4), IBV_WC_REM_INV_REQ_ERR, key);
}

TEST_F(emu_exec, send_too_long_rem_inv_req_and_loc_len)
{
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data(), 16, 3), 0);
    expect_status(*this, OP_SEND, lmr->lkey, lbuf.data(), 64, 0, 0,
                  IBV_WC_REM_INV_REQ_ERR, key);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(emu_exec, recv_bad_lkey_rem_op_err)
{
    ibv_sge s = { (uintptr_t)rbuf.data(), 64, rmr->lkey ^ 0x200 };
    ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = 8;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
    expect_status(*this, OP_SEND, lmr->lkey, lbuf.data(), 8, 0, 0,
                  IBV_WC_REM_OP_ERR, key);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(emu_exec, zero_length_write_skips_rkey)
{
    ibv_wc wc;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 0, 0xdead00, 0,
                       dct->qp_num, key),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(emu_exec, retry_exc_wrong_key)
{
    /* a wrong DC key is silently dropped: the DCI's retry_cnt (3) transport retries, then the
     * error, not a hang */
    uint64_t r0 = PROCESS_COUNT(transport_retries);
    expect_status(*this, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                  raddr(0), IBV_WC_RETRY_EXC_ERR, key + 1);
    EXPECT_EQ(PROCESS_COUNT(transport_retries) - r0, 3u);
    EXPECT_EQ(rbuf[0], 0);
}

TEST_F(emu_exec, retry_exc_unknown_dct)
{
    ibv_wc wc;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), (dct->qp_num + 1) & 0xffffff, key, 1, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(emu_exec, retry_exc_wrong_lid)
{
    dci other;
    ibv_wc wc;
    ASSERT_TRUE(make_dci(d, other,
                         (uint16_t)(d.lid + 1))); /* LID of dcxemu1, not ours */
    ASSERT_EQ(post_one(other, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 1, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    destroy_dci(other);
}

TEST_F(emu_exec, retry_exc_destroyed_dct)
{
    uint32_t n = dct->qp_num;
    ASSERT_EQ(dcxemu_ibv_destroy_qp(dct), 0);
    dct = nullptr;
    ibv_wc wc;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), n, key, 1, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(emu_exec, retry_budget_scales_with_retry_cnt)
{
    /* timeout 18 = 1.07 s per retry, x0.01 => ~10.7 ms: the DCI waits that long 7 times, each
     * wait counted, then fails */
    dci slow;
    ASSERT_TRUE(make_dci(d, slow, d.lid, 64, 18, 7, 7));
    uint64_t r0 = PROCESS_COUNT(transport_retries);
    ibv_wc wc;
    ASSERT_EQ(post_one(slow, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key + 5, 1, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(PROCESS_COUNT(transport_retries) - r0, 7u);
    destroy_dci(slow);
}

TEST_F(emu_exec, rnr_retry_exceeded)
{
    dci r;
    ASSERT_TRUE(make_dci(d, r, d.lid, 64, 10, 3, 2));
    ibv_wc wc;
    ASSERT_EQ(post_one(r, OP_SEND, lmr->lkey, lbuf.data(), 8, 0, 0, dct->qp_num,
                       key, 1, 0),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_TRUE(cq_empty_now(
            rcq)); /* a receive CQE would precede the sender's completion */
    destroy_dci(r);
}

TEST_F(emu_exec, rnr_infinite_then_recover)
{
    ibv_wc wc;
    memset(lbuf.data(), 0x33, 64);
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 64, 0, 0,
                       dct->qp_num, key, 1),
              0);
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 64, 0, 0,
                       dct->qp_num, key, 2),
              0);
    /* rnr_retry=7 waits forever: more RNR retries than any finite rnr_retry (at most 6) allows,
     * and no completion */
    uint64_t r0 = PROCESS_COUNT(rnr_retries);
    ASSERT_TRUE(
            wait_until([&] { return PROCESS_COUNT(rnr_retries) - r0 >= 8; }));
    EXPECT_TRUE(cq_empty_now(d.cq));
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data(), 64, 10), 0);
    ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 64, 64, 11), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 1u);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    /* FIFO: WQEs consumed in posting order */
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.wr_id, 10u);
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(rbuf[127], 0x33);
}

TEST_F(emu_exec, reset_discards_cqes_and_recovery_keeps_number)
{
    uint32_t n = c.qp->qp_num;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey + 1,
                       raddr(0), dct->qp_num, key, 1, 0),
              0);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 2, 0),
              0);
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(dcxemu_ibv_modify_qp(c.qp, &a, IBV_QP_STATE), 0);
    ASSERT_EQ(dci_to_rts(c.qp), 0);
    EXPECT_EQ(c.qp->qp_num, n);
    lbuf[0] = 9;
    ibv_wc wc;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 3),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id,
              3u); /* first: both error CQEs were discarded (per-QP order) */
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[0], 9);
}

TEST_F(emu_exec, user_err_flushes_outstanding)
{
    /* a send waiting for RNR is flushed when the user moves the DCI to ERR */
    uint64_t r0 = PROCESS_COUNT(rnr_retries);
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 8, 0, 0, dct->qp_num,
                       key, 1, 0),
              0);
    ASSERT_TRUE(wait_until(
            [&] { return PROCESS_COUNT(rnr_retries) > r0; })); /* it waits */
    EXPECT_TRUE(cq_empty_now(d.cq));
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(dcxemu_ibv_modify_qp(c.qp, &a, IBV_QP_STATE), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(emu_exec, inline_copied_at_call_time)
{
    char tmp[32];
    memset(tmp, 0x44, sizeof(tmp));
    ibv_wr_start(c.qpx);
    c.qpx->wr_id    = 1;
    c.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(c.qpx, rmr->rkey, raddr(0));
    ibv_wr_set_inline_data(c.qpx, tmp, sizeof(tmp));
    memset(tmp, 0x55, sizeof(tmp)); /* the WQE already holds the data */
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, key);
    ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[31], 0x44);
}

TEST_F(emu_exec, sge_list_and_inline_list_concatenate)
{
    for (int i = 0; i < 64; i++)
        lbuf[i] = (char)i;
    ibv_sge sl[2] = { { (uintptr_t)lbuf.data(), 4, lmr->lkey },
                      { (uintptr_t)lbuf.data() + 32, 4, lmr->lkey } };
    ibv_wr_start(c.qpx);
    c.qpx->wr_id    = 1;
    c.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(c.qpx, rmr->rkey, raddr(0));
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, key);
    ibv_wr_set_sge_list(c.qpx, 2, sl);
    ibv_data_buf bl[2] = { { lbuf.data() + 8, 2 }, { lbuf.data() + 40, 3 } };
    ibv_wr_rdma_write(c.qpx, rmr->rkey, raddr(100));
    ibv_wr_set_inline_data_list(c.qpx, 2, bl);
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, key);
    ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    ASSERT_TRUE(poll_one(d.cq, &wc));
    const char want1[] = { 0, 1, 2, 3, 32, 33, 34, 35 };
    const char want2[] = { 8, 9, 40, 41, 42 };
    EXPECT_EQ(memcmp(rbuf.data(), want1, 8), 0);
    EXPECT_EQ(memcmp(rbuf.data() + 100, want2, 5), 0);
}

TEST_F(emu_exec, cq_overrun_async_event)
{
    ibv_cq *small = dcxemu_ibv_create_cq(d.ctx, 1, nullptr, nullptr,
                                         0); /* 2 entries */
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(small->cqe, 1);
    ibv_qp *q = create_dci(d, 16, 1, 0, true, small);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(dci_to_rts(q), 0);
    dci s;
    s.qp  = q;
    s.qpx = dcxemu_ibv_qp_to_qp_ex(q);
    s.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(s.qpx);
    s.ah  = c.ah;
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(post_one(s, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                           raddr(0), dct->qp_num, key, (uint64_t)i),
                  0);
    }
    pollfd p = { d.ctx->async_fd, POLLIN, 0 };
    ASSERT_EQ(poll(&p, 1, 5000), 1);
    ibv_async_event ev;
    ASSERT_EQ(dcxemu_ibv_get_async_event(d.ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    EXPECT_EQ(ev.element.cq, small);
    dcxemu_ibv_ack_async_event(&ev);
    s.ah = nullptr;
    destroy_dci(s);
    EXPECT_EQ(dcxemu_ibv_destroy_cq(small), 0);
}

TEST_F(emu_exec, srq_limit_event)
{
    ibv_srq_attr a;
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + 64 * i, 64, (uint64_t)i),
                  0);
    a.srq_limit = 2;
    ASSERT_EQ(dcxemu_ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
    ASSERT_EQ(dcxemu_ibv_query_srq(srq, &a), 0);
    EXPECT_EQ(a.srq_limit, 2u);
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 8, 0, 0, dct->qp_num,
                       key, 1),
              0);
    ibv_wc wc;
    /* its completion follows the receive and the ring for any event it raised; once the engine
     * is quiescent after that, such an event is on the async fd */
    ASSERT_TRUE(poll_one(d.cq, &wc));
    ASSERT_TRUE(engine_quiescent());
    pollfd p = { d.ctx->async_fd, POLLIN, 0 };
    EXPECT_EQ(poll(&p, 1, 0), 0); /* 2 left: not below the limit yet */
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 8, 0, 0, dct->qp_num,
                       key, 2, 0),
              0);
    ASSERT_EQ(poll(&p, 1, 5000), 1);
    ibv_async_event ev;
    ASSERT_EQ(dcxemu_ibv_get_async_event(d.ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(ev.element.srq, srq);
    dcxemu_ibv_ack_async_event(&ev);
    ASSERT_EQ(dcxemu_ibv_query_srq(srq, &a), 0);
    EXPECT_EQ(a.srq_limit, 0u); /* one-shot: disarmed */
}

TEST_F(emu_exec, sq_sig_all_signals_every_wr)
{
    ibv_qp *q = create_dci(d, 16, 1, 0, true, nullptr, 1);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(dci_to_rts(q), 0);
    dci s;
    s.qp  = q;
    s.qpx = dcxemu_ibv_qp_to_qp_ex(q);
    s.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(s.qpx);
    s.ah  = c.ah;
    ASSERT_EQ(post_one(s, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 21, 0),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 21u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    /* without sq_sig_all an unsignaled success has no CQE */
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 22, 0),
              0);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 23),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(
            wc.wr_id,
            23u); /* the signaled marker comes first: 22 wrote none (per-QP order) */
    s.ah = nullptr;
    destroy_dci(s);
}

TEST_F(emu_exec, ah_copied_at_set_dc_addr)
{
    ibv_ah_attr aa;
    memset(&aa, 0, sizeof(aa));
    aa.dlid     = d.lid;
    aa.port_num = 1;
    ibv_ah *ah  = dcxemu_ibv_create_ah(d.pd, &aa);
    ASSERT_NE(ah, nullptr);
    ibv_wr_start(c.qpx);
    c.qpx->wr_id    = 1;
    c.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(c.qpx, rmr->rkey, raddr(0));
    mlx5dv_wr_set_dc_addr(c.dv, ah, dct->qp_num, key);
    ASSERT_EQ(dcxemu_ibv_destroy_ah(ah),
              0); /* the WQE holds a copy of the AV */
    ibv_wr_set_sge(c.qpx, lmr->lkey, (uintptr_t)lbuf.data(), 8);
    ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(emu_exec, bytes_land_in_ascending_order)
{
    /* a reader polling the last byte of a large WRITE sees every earlier byte */
    const size_t len = 8 << 20;
    std::vector<char> src(len, 0x6b), dst(len, 0);
    ibv_mr *smr = dcxemu_ibv_reg_mr(d.pd, src.data(), len,
                                    IBV_ACCESS_LOCAL_WRITE);
    ibv_mr *dmr = dcxemu_ibv_reg_mr(d.pd, dst.data(), len,
                                    IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE);
    ASSERT_TRUE(smr && dmr);
    std::atomic<int> ok{ -1 };
    std::atomic<bool> watching{ false };
    std::thread reader([&] {
        volatile char *last = &dst[len - 1];
        uint64_t end        = now_ms() + 10000;
        if (*last != 0x6b)
            watching = true; /* saw the byte unwritten */
        while (*last != 0x6b && now_ms() < end) {
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        size_t missing = 0;
        for (size_t i = 0; i < len; i++)
            missing += dst[i] != 0x6b;
        ok = missing == 0;
    });
    ASSERT_TRUE(wait_until(
            [&] { return watching.load(); })); /* the reader runs first */
    ASSERT_EQ(post_one(c, OP_WRITE, smr->lkey, src.data(), (uint32_t)len,
                       dmr->rkey, (uintptr_t)dst.data(), dct->qp_num, key),
              0);
    reader.join();
    EXPECT_EQ(ok.load(), 1);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    dcxemu_ibv_dereg_mr(smr);
    dcxemu_ibv_dereg_mr(dmr);
}

/* A poller that posts from inside start_poll..end_poll, with the new send CQE going to the CQ
 * being polled, must not deadlock (the pattern of a transport answering in its poll loop). */
TEST_F(emu_exec, post_inside_poll_loop)
{
    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe        = 64;
    ibv_cq_ex *cq = dcxemu_ibv_create_cq_ex(d.ctx, &ca);
    ASSERT_NE(cq, nullptr);
    dci s;
    s.qp = create_dci(d, 16, 1, 0, true, ibv_cq_ex_to_cq(cq));
    ASSERT_NE(s.qp, nullptr);
    ASSERT_EQ(dci_to_rts(s.qp), 0);
    s.qpx = dcxemu_ibv_qp_to_qp_ex(s.qp);
    s.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(s.qpx);
    s.ah  = c.ah;
    ASSERT_EQ(post_one(s, OP_WRITE, lmr->lkey, lbuf.data(), 8, rmr->rkey,
                       raddr(0), dct->qp_num, key, 1),
              0);
    int seen     = 0;
    uint64_t end = now_ms() + 5000;
    while (seen < 5 && now_ms() < end) {
        ibv_poll_cq_attr pa = { 0 };
        if (ibv_start_poll(cq, &pa) != 0)
            continue;
        do {
            EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
            if (++seen < 5) {
                EXPECT_EQ(post_one(s, OP_WRITE, lmr->lkey, lbuf.data(), 8,
                                   rmr->rkey, raddr(0), dct->qp_num, key,
                                   (uint64_t)seen + 1),
                          0);
            }
        } while (ibv_next_poll(cq) == 0);
        ibv_end_poll(cq);
    }
    EXPECT_EQ(seen, 5);
    s.ah = nullptr;
    destroy_dci(s);
    EXPECT_EQ(dcxemu_ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

} // namespace
