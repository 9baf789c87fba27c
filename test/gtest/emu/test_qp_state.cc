/* The modify-QP state machine: each QP type's legal path, illegal transitions, and the rule that a
 * refused modify (EINVAL) leaves the QP exactly as it was, also when the device moves the QP to
 * ERR while the modify runs. */
#include "emu_test.h"

#include <atomic>
#include <thread>

using namespace emu;

namespace {

/* Everything ibv_query_qp reports that a modify can change. */
struct qp_view {
    int state;
    int path_mtu, access, pkey_index, port, timeout, retry_cnt, rnr_retry,
            min_rnr_timer;
    int max_rd_atomic;
    uint32_t sq_psn;
    bool operator==(const qp_view &o) const
    {
        return state == o.state && path_mtu == o.path_mtu &&
               access == o.access && pkey_index == o.pkey_index &&
               port == o.port && timeout == o.timeout &&
               retry_cnt == o.retry_cnt && rnr_retry == o.rnr_retry &&
               min_rnr_timer == o.min_rnr_timer &&
               max_rd_atomic == o.max_rd_atomic && sq_psn == o.sq_psn;
    }
};

qp_view view(ibv_qp *qp)
{
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    qp_view v;
    memset(&v, 0xff, sizeof(v));
    if (dcxemu_ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != 0) {
        return v;
    }
    v.state         = a.qp_state;
    v.path_mtu      = a.path_mtu;
    v.access        = (int)a.qp_access_flags;
    v.pkey_index    = a.pkey_index;
    v.port          = a.port_num;
    v.timeout       = a.timeout;
    v.retry_cnt     = a.retry_cnt;
    v.rnr_retry     = a.rnr_retry;
    v.min_rnr_timer = a.min_rnr_timer;
    v.max_rd_atomic = a.max_rd_atomic;
    v.sq_psn        = a.sq_psn;
    return v;
}

/* Attribute values that differ from what the legal paths below set, valid for every field. */
ibv_qp_attr other_values(int state)
{
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state           = (ibv_qp_state)state;
    a.pkey_index         = 5;
    a.port_num           = 1;
    a.qp_access_flags    = IBV_ACCESS_REMOTE_READ;
    a.path_mtu           = IBV_MTU_1024;
    a.ah_attr.port_num   = 1;
    a.timeout            = 20;
    a.retry_cnt          = 6;
    a.rnr_retry          = 5;
    a.min_rnr_timer      = 17;
    a.max_rd_atomic      = 2;
    a.max_dest_rd_atomic = 2;
    a.sq_psn             = 77;
    a.rq_psn             = 78;
    a.dest_qp_num        = 1;
    return a;
}

const int DCI_INIT = IBV_QP_PKEY_INDEX | IBV_QP_PORT;
const int DCI_RTR  = IBV_QP_PATH_MTU;
const int DCI_RTS  = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN;
const int RC_INIT = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
const int RC_RTR  = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                   IBV_QP_MIN_RNR_TIMER;
const int RC_RTS = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
                   IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT;
const int DCT_INIT = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
const int DCT_RTR  = IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU;

struct emu_qp_state : public ::testing::Test {
    dev d;
    ibv_srq *srq = nullptr;
    void SetUp() override
    {
        ASSERT_TRUE(d.open());
        srq = create_srq(d);
        ASSERT_NE(srq, nullptr);
    }
    void TearDown() override
    {
        dcxemu_ibv_destroy_srq(srq);
        d.close();
    }
    ibv_qp *create_rc()
    {
        ibv_qp_init_attr_ex at;
        memset(&at, 0, sizeof(at));
        at.qp_type = IBV_QPT_RC;
        at.send_cq = at.recv_cq = d.cq;
        at.pd                   = d.pd;
        at.cap.max_send_wr      = 4;
        at.cap.max_send_sge     = 1;
        at.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        at.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
        return dcxemu_mlx5dv_create_qp(d.ctx, &at, nullptr);
    }
    /* A legal step: the transition with its attributes (the values of other_values, or the
     * usual ones), and the QP ends in state with qp->state following. */
    int step(ibv_qp *qp, int state, int mask, bool other = false)
    {
        ibv_qp_attr a = other_values(state);
        if (!other) {
            a.pkey_index         = 0;
            a.qp_access_flags    = IBV_ACCESS_REMOTE_WRITE;
            a.path_mtu           = IBV_MTU_4096;
            a.timeout            = 10;
            a.retry_cnt          = 3;
            a.rnr_retry          = 7;
            a.min_rnr_timer      = 2;
            a.max_rd_atomic      = 4;
            a.max_dest_rd_atomic = 4;
            a.sq_psn             = 0;
            a.dest_qp_num        = qp->qp_num;
            a.ah_attr.dlid       = d.lid;
        }
        return dcxemu_ibv_modify_qp(qp, &a, mask | IBV_QP_STATE);
    }
    /* A refused modify: EINVAL, and nothing about the QP changed. */
    void refused(ibv_qp *qp, int state, int mask, const char *what)
    {
        SCOPED_TRACE(what);
        qp_view before     = view(qp);
        ibv_qp_state shown = qp->state;
        ibv_qp_attr a      = other_values(state);
        EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(qp, &a, mask));
        EXPECT_TRUE(view(qp) == before);
        EXPECT_EQ(qp->state, shown);
    }
};

} // namespace

TEST_F(emu_qp_state, dci_legal_path)
{
    ibv_qp *qp = create_dci(d);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(view(qp).state, IBV_QPS_RESET);
    ASSERT_EQ(step(qp, IBV_QPS_RESET, 0), 0); /* RESET -> RESET */
    ASSERT_EQ(step(qp, IBV_QPS_INIT, DCI_INIT), 0);
    ASSERT_EQ(step(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX, true),
              0); /* INIT -> INIT */
    EXPECT_EQ(view(qp).pkey_index, 5);
    ASSERT_EQ(step(qp, IBV_QPS_RTR, DCI_RTR | IBV_QP_AV), 0);
    EXPECT_EQ(view(qp).path_mtu, IBV_MTU_4096);
    ASSERT_EQ(step(qp, IBV_QPS_RTS, DCI_RTS | IBV_QP_MIN_RNR_TIMER), 0);
    qp_view v = view(qp);
    EXPECT_EQ(v.state, IBV_QPS_RTS);
    EXPECT_EQ(v.timeout, 10);
    EXPECT_EQ(v.retry_cnt, 3);
    EXPECT_EQ(v.rnr_retry, 7);
    EXPECT_EQ(v.max_rd_atomic, 4);
    EXPECT_EQ(v.min_rnr_timer, 2);
    ASSERT_EQ(step(qp, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER, true),
              0); /* RTS -> RTS */
    EXPECT_EQ(view(qp).min_rnr_timer, 17);
    ASSERT_EQ(step(qp, IBV_QPS_ERR, 0), 0);
    ASSERT_EQ(step(qp, IBV_QPS_ERR, 0), 0); /* ERR -> ERR */
    ASSERT_EQ(step(qp, IBV_QPS_RESET, 0), 0);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    for (int s : { IBV_QPS_INIT, IBV_QPS_RTR,
                   IBV_QPS_RTS }) { /* any state -> ERR / RESET */
        ASSERT_EQ(step(qp, IBV_QPS_INIT, DCI_INIT), 0);
        if (s != IBV_QPS_INIT) {
            ASSERT_EQ(step(qp, IBV_QPS_RTR, DCI_RTR), 0);
        }
        if (s == IBV_QPS_RTS) {
            ASSERT_EQ(step(qp, IBV_QPS_RTS, DCI_RTS), 0);
        }
        EXPECT_EQ(view(qp).state, s);
        ASSERT_EQ(step(qp, s == IBV_QPS_RTS ? IBV_QPS_ERR : IBV_QPS_RESET, 0),
                  0);
        ASSERT_EQ(step(qp, IBV_QPS_RESET, 0), 0);
        EXPECT_EQ(view(qp).state, IBV_QPS_RESET);
    }
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
}

TEST_F(emu_qp_state, rc_legal_path)
{
    ibv_qp *qp = create_rc();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(step(qp, IBV_QPS_INIT, RC_INIT), 0);
    EXPECT_EQ(view(qp).access, IBV_ACCESS_REMOTE_WRITE);
    ASSERT_EQ(step(qp, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS, true),
              0); /* INIT -> INIT */
    EXPECT_EQ(view(qp).access, IBV_ACCESS_REMOTE_READ);
    ASSERT_EQ(step(qp, IBV_QPS_RTR, RC_RTR | IBV_QP_PKEY_INDEX), 0);
    EXPECT_EQ(view(qp).min_rnr_timer, 2);
    ASSERT_EQ(step(qp, IBV_QPS_RTS, RC_RTS | IBV_QP_ACCESS_FLAGS), 0);
    EXPECT_EQ(view(qp).state, IBV_QPS_RTS);
    ASSERT_EQ(step(qp, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER, true),
              0); /* RTS -> RTS */
    EXPECT_EQ(view(qp).min_rnr_timer, 17);
    ASSERT_EQ(step(qp, IBV_QPS_ERR, 0), 0);
    ASSERT_EQ(step(qp, IBV_QPS_RESET, 0), 0);
    EXPECT_EQ(view(qp).state, IBV_QPS_RESET);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
}

TEST_F(emu_qp_state, dct_legal_path)
{
    ibv_qp *qp = create_dct(d, srq, 5);
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(step(qp, IBV_QPS_INIT, DCT_INIT), 0);
    EXPECT_EQ(view(qp).state, IBV_QPS_INIT);
    EXPECT_EQ(view(qp).access, IBV_ACCESS_REMOTE_WRITE);
    ASSERT_EQ(step(qp, IBV_QPS_RTR, DCT_RTR), 0);
    EXPECT_EQ(view(qp).state, IBV_QPS_RTR);
    EXPECT_EQ(view(qp).min_rnr_timer, 2);
    EXPECT_NE(qp->qp_num, 0u);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
}

TEST_F(emu_qp_state, illegal_transitions_change_nothing)
{
    ibv_qp *dci = create_dci(d);
    ibv_qp *rc  = create_rc();
    ibv_qp *dct = create_dct(d, srq, 5);
    ASSERT_NE(dci, nullptr);
    ASSERT_NE(rc, nullptr);
    ASSERT_NE(dct, nullptr);
    const int S = IBV_QP_STATE;

    /* each refused request carries valid attribute values the QP does not have yet */
    refused(dci, IBV_QPS_RTR, S | DCI_RTR, "DCI RESET->RTR");
    refused(dci, IBV_QPS_ERR, S, "DCI RESET->ERR");
    refused(dci, IBV_QPS_INIT, S | DCI_INIT | IBV_QP_ACCESS_FLAGS,
            "DCI RESET->INIT + access");
    refused(dci, IBV_QPS_INIT, S | IBV_QP_PORT, "DCI RESET->INIT without pkey");
    ASSERT_EQ(step(dci, IBV_QPS_INIT, DCI_INIT), 0);
    refused(dci, IBV_QPS_RTS, S | DCI_RTS, "DCI INIT->RTS");
    refused(dci, IBV_QPS_RTR, S | DCI_RTR | IBV_QP_TIMEOUT,
            "DCI INIT->RTR + timeout");
    refused(dci, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_CUR_STATE,
            "DCI cur_state");
    ASSERT_EQ(step(dci, IBV_QPS_RTR, DCI_RTR), 0);
    refused(dci, IBV_QPS_INIT, S | IBV_QP_PKEY_INDEX, "DCI RTR->INIT");
    refused(dci, IBV_QPS_RTS,
            S | (DCI_RTS & ~IBV_QP_SQ_PSN) | IBV_QP_MIN_RNR_TIMER,
            "DCI RTR->RTS without sq_psn");
    refused(dci, IBV_QPS_SQD, S, "DCI RTR->SQD");
    ASSERT_EQ(step(dci, IBV_QPS_RTS, DCI_RTS), 0);
    refused(dci, IBV_QPS_RTR, S | IBV_QP_PATH_MTU, "DCI RTS->RTR");
    refused(dci, IBV_QPS_RTS, S | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT,
            "DCI RTS->RTS + timeout");
    refused(dci, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER | IBV_QP_PKEY_INDEX,
            "DCI RTS + pkey");

    refused(rc, IBV_QPS_RTS, S | RC_RTS, "RC RESET->RTS");
    refused(rc, IBV_QPS_INIT, S | IBV_QP_PKEY_INDEX | IBV_QP_PORT,
            "RC RESET->INIT without access");
    ASSERT_EQ(step(rc, IBV_QPS_INIT, RC_INIT), 0);
    refused(rc, IBV_QPS_RTR, S | (RC_RTR & ~IBV_QP_DEST_QPN),
            "RC INIT->RTR without dest_qpn");
    refused(rc, IBV_QPS_RTS, S | RC_RTS | IBV_QP_ACCESS_FLAGS, "RC INIT->RTS");

    refused(dct, IBV_QPS_INIT, S | IBV_QP_PKEY_INDEX | IBV_QP_PORT,
            "DCT RESET->INIT without access");
    refused(dct, IBV_QPS_RESET, S, "DCT RESET->RESET");
    refused(dct, IBV_QPS_RTR, S | DCT_RTR, "DCT RESET->RTR");
    ASSERT_EQ(step(dct, IBV_QPS_INIT, DCT_INIT), 0);
    refused(dct, IBV_QPS_INIT, S | DCT_INIT, "DCT INIT->INIT");
    refused(dct, IBV_QPS_RTR, S | DCT_RTR | IBV_QP_PKEY_INDEX,
            "DCT INIT->RTR + pkey");
    refused(dct, IBV_QPS_RTR, DCT_RTR, "DCT INIT->RTR without the state bit");
    EXPECT_EQ(dct->qp_num, 0u); /* the refused RTR published nothing */
    ASSERT_EQ(step(dct, IBV_QPS_RTR, DCT_RTR), 0);
    refused(dct, IBV_QPS_RTS, S | DCI_RTS, "DCT RTR->RTS");
    refused(dct, IBV_QPS_ERR, S, "DCT RTR->ERR");
    refused(dct, IBV_QPS_RESET, S, "DCT RTR->RESET");

    EXPECT_EQ(dcxemu_ibv_destroy_qp(dct), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(rc), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(dci), 0);
}

/* The device moves a DCI to ERR by itself (an error CQE) while another thread modifies it
 * RTS->RTS.  Whichever comes first, a modify that is refused must not have written its attribute:
 * the RNR timer stays what the last accepted modify set.  The recovering thread never sets the
 * RNR timer, so that value is known. */
TEST_F(emu_qp_state, refused_modify_racing_device_error_changes_nothing)
{
    dci c;
    ibv_qp *dct = create_dct(d, srq, 7);
    ASSERT_NE(dct, nullptr);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    ASSERT_TRUE(make_dci(d, c, d.lid, 4));
    std::vector<char> buf(64, 0);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);

    std::atomic<bool> stop(false);
    std::atomic<int> cycles(0);
    std::atomic<bool> recover_failed(false);
    std::thread device_errors([&] {
        /* a WRITE to a key that does not exist: REM_ACCESS_ERR, the DCI goes to ERR; then the
         * usual recovery, without the RNR timer */
        while (!stop) {
            ibv_wc wc;
            if (post_one(c, OP_WRITE, mr->lkey, buf.data(), 8, 0xdead00, 0,
                         dct->qp_num, 7) != 0 ||
                !poll_one(d.cq, &wc, 5000) ||
                step(c.qp, IBV_QPS_RESET, 0) != 0 || dci_to_rts(c.qp) != 0) {
                recover_failed = true;
                break;
            }
            cycles++;
        }
    });
    uint8_t last = 0; /* make_dci leaves the RNR timer at 0 */
    int accepted = 0, refused_n = 0, changed = 0;
    uint64_t until = now_ms() + 3000;
    /* until both outcomes were seen often enough (the device thread may win
     * every race for a while on a loaded host) or the time is up */
    for (uint8_t v = 1; now_ms() < until && !recover_failed &&
                        (cycles < 20000 || refused_n < 1000 || accepted == 0);
         v = (uint8_t)(v % 31 + 1)) {
        ibv_qp_attr a;
        memset(&a, 0, sizeof(a));
        a.qp_state      = IBV_QPS_RTS;
        a.min_rnr_timer = v;
        int r           = dcxemu_ibv_modify_qp(c.qp, &a,
                                               IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
        if (r == 0) {
            last = v;
            accepted++;
        } else if (r == EINVAL) {
            refused_n++;
            if (view(c.qp).min_rnr_timer != last) {
                changed++;
                last = (uint8_t)view(c.qp).min_rnr_timer;
            }
        } else {
            ADD_FAILURE() << "modify returned " << r;
            break;
        }
    }
    stop = true;
    device_errors.join();
    EXPECT_FALSE(recover_failed);
    EXPECT_GT(cycles.load(), 0);
    EXPECT_GT(accepted, 0);
    EXPECT_EQ(changed, 0) << "refused modifies that wrote their attribute, of "
                          << refused_n;
    dcxemu_ibv_dereg_mr(mr);
    destroy_dci(c);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(dct), 0);
}
