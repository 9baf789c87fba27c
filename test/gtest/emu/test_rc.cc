/* RC QPs: two QPs connected in one process and across two processes -- SEND with a receive
 * queue or an SRQ, WRITE, WRITE_IMM, READ, atomics, inline, signaling, RNR, remote and transport
 * errors with their flushes, modify masks and query. */
#include "emu_test.h"

#include <stdlib.h>

using namespace emu;

namespace {

const uint32_t ALL_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
const uint64_t RC_SEND_OPS = IBV_QP_EX_WITH_SEND |
                             IBV_QP_EX_WITH_SEND_WITH_IMM |
                             IBV_QP_EX_WITH_RDMA_WRITE |
                             IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                             IBV_QP_EX_WITH_RDMA_READ |
                             IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                             IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
const int INIT_MASK = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                      IBV_QP_ACCESS_FLAGS;
const int RTR_MASK = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
const int RTS_MASK = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC;

/* Connection parameters (what ibv_rc_pingpong passes, plus the timers a test picks). */
struct conn {
    uint32_t access       = ALL_ACCESS;
    uint8_t min_rnr_timer = 1;
    uint8_t timeout       = 10;
    uint8_t retry_cnt     = 3;
    uint8_t rnr_retry     = 7;
    bool global =
            false; /* a GRH (RoCE): destination GID, source GID index, hop limit */
    ibv_global_route grh;
};

/* The attributes of one transition towards dest_qpn on dlid. */
ibv_qp_attr
conn_attr(int state, uint32_t dest_qpn, uint16_t dlid, const conn &c)
{
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state           = (ibv_qp_state)state;
    a.pkey_index         = 0;
    a.port_num           = 1;
    a.qp_access_flags    = c.access;
    a.path_mtu           = IBV_MTU_1024;
    a.dest_qp_num        = dest_qpn;
    a.rq_psn             = 0x123;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer      = c.min_rnr_timer;
    a.ah_attr.dlid       = dlid;
    a.ah_attr.port_num   = 1;
    a.ah_attr.is_global  = c.global;
    if (c.global)
        a.ah_attr.grh = c.grh;
    a.sq_psn        = 0x456;
    a.timeout       = c.timeout;
    a.retry_cnt     = c.retry_cnt;
    a.rnr_retry     = c.rnr_retry;
    a.max_rd_atomic = 2;
    return a;
}

int connect_qp(ibv_qp *qp, uint32_t dest_qpn, uint16_t dlid,
               const conn &c = conn())
{
    ibv_qp_attr a = conn_attr(IBV_QPS_INIT, dest_qpn, dlid, c);
    int r         = dcxemu_ibv_modify_qp(qp, &a, INIT_MASK);
    if (r)
        return r;
    a = conn_attr(IBV_QPS_RTR, dest_qpn, dlid, c);
    if ((r = dcxemu_ibv_modify_qp(qp, &a, RTR_MASK)))
        return r;
    a = conn_attr(IBV_QPS_RTS, dest_qpn, dlid, c);
    return dcxemu_ibv_modify_qp(qp, &a, RTS_MASK);
}

int qp_state(ibv_qp *qp)
{
    ibv_qp_attr a;
    ibv_qp_init_attr i;
    if (dcxemu_ibv_query_qp(qp, &a, IBV_QP_STATE, &i) != 0)
        return -1;
    return a.qp_state;
}

/* One legacy send WR.  rkey/raddr for RDMA and atomics; cmp/swp for atomics. */
int post_send(ibv_qp *qp, ibv_wr_opcode op, void *addr, uint32_t len,
              uint32_t lkey, uint64_t wr_id, unsigned flags, uint32_t rkey = 0,
              uint64_t raddr = 0, uint32_t imm = 0, uint64_t cmp = 0,
              uint64_t swp = 0)
{
    ibv_sge sge = { (uintptr_t)addr, len, lkey };
    ibv_send_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = wr_id;
    wr.opcode     = op;
    wr.send_flags = flags;
    wr.sg_list    = &sge;
    wr.num_sge    = len ? 1 : 0;
    wr.imm_data   = htonl(imm);
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = raddr;
        wr.wr.atomic.rkey        = rkey;
        wr.wr.atomic.compare_add = cmp;
        wr.wr.atomic.swap        = swp;
    } else {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey        = rkey;
    }
    return ibv_post_send(qp, &wr, &bad);
}

int post_rq(ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
    ibv_sge sge = { (uintptr_t)addr, len, lkey };
    ibv_recv_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
}

/* One end of a connection: a context with its send CQ (d.cq), a receive CQ, a QP whose receive
 * queue is its own or an SRQ, and a registered buffer. */
struct rc_end {
    dev d;
    ibv_cq *rcq    = nullptr;
    ibv_srq *srq   = nullptr;
    ibv_qp *qp     = nullptr;
    ibv_qp_ex *qpx = nullptr;
    ibv_qp_cap cap;
    std::vector<char> buf;
    ibv_mr *mr = nullptr;

    /* ex: ibv_create_qp_ex with send_ops_flags (the ibv_wr_* builders), else ibv_create_qp */
    bool open(bool use_srq, bool ex, int sig_all = 0, uint32_t rq_wr = 16,
              size_t len = 1 << 16)
    {
        if (!d.open(0, 256))
            return false;
        rcq = dcxemu_ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
        if (use_srq)
            srq = create_srq(d, 64, 2);
        if (rcq == nullptr || (use_srq && srq == nullptr))
            return false;
        if (ex) {
            ibv_qp_init_attr_ex at;
            memset(&at, 0, sizeof(at));
            at.qp_type             = IBV_QPT_RC;
            at.send_cq             = d.cq;
            at.recv_cq             = rcq;
            at.srq                 = srq;
            at.pd                  = d.pd;
            at.sq_sig_all          = sig_all;
            at.cap.max_send_wr     = 32;
            at.cap.max_send_sge    = 2;
            at.cap.max_inline_data = 64;
            at.cap.max_recv_wr     = use_srq ? 0 : rq_wr;
            at.cap.max_recv_sge    = use_srq ? 0 : 2;
            at.comp_mask           = IBV_QP_INIT_ATTR_PD |
                           IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            at.send_ops_flags = RC_SEND_OPS;
            qp = verbs_get_ctx_op(d.ctx, create_qp_ex)->create_qp_ex(d.ctx, &at);
            cap = at.cap;
            qpx = qp ? dcxemu_ibv_qp_to_qp_ex(qp) : nullptr;
        } else {
            ibv_qp_init_attr at;
            memset(&at, 0, sizeof(at));
            at.qp_type             = IBV_QPT_RC;
            at.send_cq             = d.cq;
            at.recv_cq             = rcq;
            at.srq                 = srq;
            at.sq_sig_all          = sig_all;
            at.cap.max_send_wr     = 32;
            at.cap.max_send_sge    = 2;
            at.cap.max_inline_data = 64;
            at.cap.max_recv_wr     = use_srq ? 0 : rq_wr;
            at.cap.max_recv_sge    = use_srq ? 0 : 2;
            qp                     = dcxemu_ibv_create_qp(d.pd, &at);
            cap                    = at.cap;
        }
        buf.assign(len, 0);
        mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(), ALL_ACCESS);
        return qp != nullptr && mr != nullptr && (!ex || qpx != nullptr);
    }
    /* a receive of len bytes at buf + off, into the SRQ or the QP's queue */
    int recv(uint64_t off, uint32_t len, uint64_t wr_id)
    {
        return srq ? emu::post_recv(srq, mr, buf.data() + off, len, wr_id) :
                     post_rq(qp, buf.data() + off, len, mr->lkey, wr_id);
    }
    uint64_t addr(uint64_t off)
    {
        return (uintptr_t)buf.data() + off;
    }
    void close()
    {
        if (qp)
            dcxemu_ibv_destroy_qp(qp);
        if (srq)
            dcxemu_ibv_destroy_srq(srq);
        if (mr)
            dcxemu_ibv_dereg_mr(mr);
        if (rcq)
            dcxemu_ibv_destroy_cq(rcq);
        d.close();
        qp  = nullptr;
        srq = nullptr;
        mr  = nullptr;
        rcq = nullptr;
    }
};

struct emu_rc : public ::testing::Test {
    rc_end a, b;
    void TearDown() override
    {
        a.close();
        b.close();
    }
    /* a and b connected to each other */
    void pair(bool a_srq = false, bool b_srq = false, bool ex = false,
              const conn &c = conn())
    {
        ASSERT_TRUE(a.open(a_srq, ex));
        ASSERT_TRUE(b.open(b_srq, ex));
        ASSERT_EQ(connect_qp(a.qp, b.qp->qp_num, b.d.lid, c), 0);
        ASSERT_EQ(connect_qp(b.qp, a.qp->qp_num, a.d.lid, c), 0);
    }
};

} // namespace

TEST_F(emu_rc, create_caps_and_query)
{
    ASSERT_TRUE(a.open(false, false, 0, 5));
    /* mlx5 sizing: roundup_pow2(5) descriptors of roundup_pow2(16 * 2) bytes */
    EXPECT_EQ(a.cap.max_recv_wr, 8u);
    EXPECT_EQ(a.cap.max_recv_sge, 2u);
    EXPECT_NE(a.qp->qp_num, 0u);
    EXPECT_EQ(a.qp->qp_type, IBV_QPT_RC);
    EXPECT_EQ(dcxemu_ibv_qp_to_qp_ex(a.qp), nullptr); /* no send_ops_flags */
    ASSERT_TRUE(b.open(true, true));
    EXPECT_EQ(b.cap.max_recv_wr, 0u); /* the SRQ receives */
    conn c;
    c.min_rnr_timer = 12;
    c.timeout       = 14;
    c.retry_cnt     = 5;
    c.rnr_retry     = 6;
    c.access        = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    ASSERT_EQ(connect_qp(a.qp, b.qp->qp_num, b.d.lid, c), 0);
    ibv_qp_attr q;
    ibv_qp_init_attr init;
    ASSERT_EQ(dcxemu_ibv_query_qp(a.qp, &q, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(q.dest_qp_num, b.qp->qp_num);
    EXPECT_EQ(q.ah_attr.dlid, b.d.lid);
    EXPECT_EQ(q.ah_attr.port_num, 1);
    EXPECT_EQ(q.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(q.rq_psn, 0x123u);
    EXPECT_EQ(q.sq_psn, 0x456u);
    EXPECT_EQ(q.max_dest_rd_atomic, 4);
    EXPECT_EQ(q.max_rd_atomic, 2);
    EXPECT_EQ(q.min_rnr_timer, 12);
    EXPECT_EQ(q.timeout, 14);
    EXPECT_EQ(q.retry_cnt, 5);
    EXPECT_EQ(q.rnr_retry, 6);
    EXPECT_EQ(q.qp_access_flags, c.access);
    EXPECT_EQ(q.port_num, 1);
    EXPECT_EQ(q.cap.max_recv_wr, 8u);
    EXPECT_EQ(init.qp_type, IBV_QPT_RC);
    EXPECT_EQ(init.recv_cq, a.rcq);
    EXPECT_EQ(init.cap.max_recv_sge, 2u);
    /* an SRQ in use by an RC QP cannot go */
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_ibv_destroy_srq(b.srq));
    /* too many scatter entries for a 512-byte receive descriptor */
    ibv_qp_init_attr big;
    memset(&big, 0, sizeof(big));
    big.qp_type = IBV_QPT_RC;
    big.send_cq = big.recv_cq = a.d.cq;
    big.cap.max_send_wr       = 1;
    big.cap.max_recv_wr       = 1;
    big.cap.max_recv_sge      = 33;
    errno                     = 0;
    EXPECT_EQ(dcxemu_ibv_create_qp(a.d.pd, &big), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    big.qp_type          = IBV_QPT_UD;
    big.cap.max_recv_sge = 1;
    errno                = 0;
    EXPECT_EQ(dcxemu_ibv_create_qp(a.d.pd, &big), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
}

TEST_F(emu_rc, modify_masks)
{
    ASSERT_TRUE(a.open(false, false));
    conn c;
    ibv_qp_attr x = conn_attr(IBV_QPS_INIT, 1, 1, c);
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu_ibv_modify_qp(a.qp, &x,
                                         INIT_MASK & ~IBV_QP_ACCESS_FLAGS));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x,
                                                 INIT_MASK | IBV_QP_PATH_MTU));
    x = conn_attr(IBV_QPS_RTR, 1, 1, c);
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x,
                                                 RTR_MASK)); /* RESET -> RTR */
    EXPECT_EQ(qp_state(a.qp), IBV_QPS_RESET);
    x = conn_attr(IBV_QPS_INIT, 1, 1, c);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, INIT_MASK), 0);
    x                    = conn_attr(IBV_QPS_RTR, 1, 1, c);
    const int required[] = {
        IBV_QP_AV,     IBV_QP_PATH_MTU,           IBV_QP_DEST_QPN,
        IBV_QP_RQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER
    };
    for (int bit : required) {
        EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x, RTR_MASK & ~bit))
                << bit;
    }
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu_ibv_modify_qp(a.qp, &x, RTR_MASK | IBV_QP_SQ_PSN));
    x.path_mtu = (ibv_mtu)6;
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x, RTR_MASK));
    EXPECT_EQ(qp_state(a.qp), IBV_QPS_INIT);
    x = conn_attr(IBV_QPS_RTR, 1, 1, c);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, RTR_MASK | IBV_QP_PKEY_INDEX), 0);
    x                        = conn_attr(IBV_QPS_RTS, 1, 1, c);
    const int rts_required[] = { IBV_QP_SQ_PSN, IBV_QP_TIMEOUT,
                                 IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY,
                                 IBV_QP_MAX_QP_RD_ATOMIC };
    for (int bit : rts_required) {
        EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x, RTS_MASK & ~bit))
                << bit;
    }
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu_ibv_modify_qp(a.qp, &x, RTS_MASK | IBV_QP_DEST_QPN));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x,
                                                 RTS_MASK | IBV_QP_CUR_STATE));
    EXPECT_EQ(qp_state(a.qp), IBV_QPS_RTR);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, RTS_MASK | IBV_QP_MIN_RNR_TIMER),
              0);
    x.qp_state = IBV_QPS_RTS;
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(a.qp, &x,
                                                 IBV_QP_STATE | IBV_QP_SQ_PSN));
    EXPECT_EQ(dcxemu_ibv_modify_qp(a.qp, &x,
                                   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS),
              0);
    x.qp_state = IBV_QPS_RESET;
    EXPECT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, IBV_QP_STATE), 0);
    EXPECT_EQ(qp_state(a.qp), IBV_QPS_RESET);
}

TEST_F(emu_rc, send_pingpong_rq)
{
    pair();
    for (int i = 0; i < 20; i++) {
        ibv_wc wc;
        ASSERT_EQ(b.recv(1000, 100, 10 + i), 0);
        ASSERT_EQ(a.recv(2000, 100, 20 + i), 0);
        snprintf(a.buf.data(), 32, "ping %d", i);
        ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 32, a.mr->lkey, i,
                            IBV_SEND_SIGNALED),
                  0);
        ASSERT_TRUE(poll_one(a.d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.opcode, IBV_WC_SEND);
        EXPECT_EQ(wc.wr_id, (uint64_t)i);
        ASSERT_TRUE(poll_one(b.rcq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.opcode, IBV_WC_RECV);
        EXPECT_EQ(wc.wr_id, (uint64_t)(10 + i));
        EXPECT_EQ(wc.byte_len, 32u);
        EXPECT_EQ(wc.qp_num, b.qp->qp_num);
        EXPECT_EQ(wc.src_qp, a.qp->qp_num);
        EXPECT_EQ(wc.slid, a.d.lid);
        EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_STREQ(b.buf.data() + 1000, a.buf.data());
        /* pong with immediate data */
        ASSERT_EQ(post_send(b.qp, IBV_WR_SEND_WITH_IMM, b.buf.data() + 1000, 32,
                            b.mr->lkey, 100 + i, IBV_SEND_SIGNALED, 0, 0,
                            0xabc0 + i),
                  0);
        ASSERT_TRUE(poll_one(b.d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        ASSERT_TRUE(poll_one(a.rcq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.opcode, IBV_WC_RECV);
        EXPECT_EQ(wc.wr_id, (uint64_t)(20 + i));
        EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(ntohl(wc.imm_data), 0xabc0u + i);
        EXPECT_EQ(wc.src_qp, b.qp->qp_num);
        EXPECT_STREQ(a.buf.data() + 2000, a.buf.data());
    }
}

TEST_F(emu_rc, send_srq_with_builders)
{
    pair(true, true, true);
    ibv_wc wc;
    ASSERT_EQ(b.recv(4096, 64, 7), 0);
    ASSERT_EQ(b.recv(8192, 64, 8), 0);
    memset(a.buf.data(), 'x', 48);
    ibv_wr_start(a.qpx);
    a.qpx->wr_id    = 1;
    a.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(a.qpx);
    ibv_wr_set_sge(a.qpx, a.mr->lkey, a.addr(0), 48);
    a.qpx->wr_id = 2;
    ibv_wr_send_imm(a.qpx, htonl(77));
    ibv_wr_set_inline_data(a.qpx, (void *)"inline!", 8);
    ASSERT_EQ(ibv_wr_complete(a.qpx), 0);
    for (uint64_t id = 1; id <= 2; id++) {
        ASSERT_TRUE(poll_one(a.d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, id);
    }
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.byte_len, 48u);
    EXPECT_EQ(wc.qp_num, b.qp->qp_num);
    EXPECT_EQ(wc.src_qp, a.qp->qp_num);
    EXPECT_EQ(memcmp(b.buf.data() + 4096, a.buf.data(), 48), 0);
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.wr_id, 8u);
    EXPECT_EQ(wc.byte_len, 8u);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 77u);
    EXPECT_STREQ(b.buf.data() + 8192, "inline!");
    /* a QP that receives through an SRQ has no queue of its own */
    EXPECT_ERRNO_EQ(ENOMEM, post_rq(b.qp, b.buf.data(), 8, b.mr->lkey, 1));
}

TEST_F(emu_rc, write_write_imm_read_atomics_inline)
{
    pair();
    ibv_wc wc;
    for (int i = 0; i < 4000; i++)
        a.buf[i] = (char)(i * 7 + 3);
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, a.buf.data(), 4000, a.mr->lkey,
                        1, IBV_SEND_SIGNALED, b.mr->rkey, b.addr(10000)),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(memcmp(b.buf.data() + 10000, a.buf.data(), 4000), 0);
    EXPECT_TRUE(cq_empty_now(b.rcq)); /* a WRITE takes no receive */
    /* WRITE_IMM: data placed, a receive consumed with the immediate */
    ASSERT_EQ(b.recv(0, 16, 55), 0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, a.buf.data(), 300,
                        a.mr->lkey, 2, IBV_SEND_SIGNALED, b.mr->rkey,
                        b.addr(20000), 0x5151),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(wc.wr_id, 55u);
    EXPECT_EQ(wc.byte_len, 300u);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 0x5151u);
    EXPECT_EQ(wc.src_qp, a.qp->qp_num);
    EXPECT_EQ(memcmp(b.buf.data() + 20000, a.buf.data(), 300), 0);
    /* READ back */
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_READ, a.buf.data() + 30000, 4000,
                        a.mr->lkey, 3, IBV_SEND_SIGNALED, b.mr->rkey,
                        b.addr(10000)),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc.byte_len, 4000u);
    EXPECT_EQ(memcmp(a.buf.data() + 30000, a.buf.data(), 4000), 0);
    /* atomics on b's memory */
    uint64_t v = 40;
    memcpy(b.buf.data() + 40000, &v, 8);
    ASSERT_EQ(post_send(a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, a.buf.data() + 50000,
                        8, a.mr->lkey, 4, IBV_SEND_SIGNALED, b.mr->rkey,
                        b.addr(40000), 0, 2),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
    EXPECT_EQ(wc.byte_len, 8u);
    memcpy(&v, a.buf.data() + 50000, 8);
    EXPECT_EQ(v, 40u);
    ASSERT_EQ(post_send(a.qp, IBV_WR_ATOMIC_CMP_AND_SWP, a.buf.data() + 50008,
                        8, a.mr->lkey, 5, IBV_SEND_SIGNALED, b.mr->rkey,
                        b.addr(40000), 0, 42, 99),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
    memcpy(&v, a.buf.data() + 50008, 8);
    EXPECT_EQ(v, 42u);
    memcpy(&v, b.buf.data() + 40000, 8);
    EXPECT_EQ(v, 99u);
    /* inline WRITE: the source buffer is reusable at once */
    char tmp[40];
    memset(tmp, 'q', sizeof(tmp));
    ASSERT_EQ(post_send(b.qp, IBV_WR_RDMA_WRITE, tmp, sizeof(tmp), 0, 6,
                        IBV_SEND_SIGNALED | IBV_SEND_INLINE, a.mr->rkey,
                        a.addr(60000)),
              0);
    memset(tmp, 0, sizeof(tmp));
    ASSERT_TRUE(poll_one(b.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(a.buf[60000], 'q');
    EXPECT_EQ(a.buf[60039], 'q');
    /* a fenced READ after a WRITE sees the WRITE (strict order per QP) */
    a.buf[0] = 'F';
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, a.buf.data(), 1, a.mr->lkey, 7,
                        0, b.mr->rkey, b.addr(100)),
              0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_READ, a.buf.data() + 1, 1, a.mr->lkey,
                        8, IBV_SEND_SIGNALED | IBV_SEND_FENCE, b.mr->rkey,
                        b.addr(100)),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 8u);
    EXPECT_EQ(a.buf[1], 'F');
}

TEST_F(emu_rc, unsignaled_and_sq_sig_all)
{
    ASSERT_TRUE(a.open(false, false, 1)); /* sq_sig_all */
    ASSERT_TRUE(b.open(false, false));
    ASSERT_EQ(connect_qp(a.qp, b.qp->qp_num, b.d.lid), 0);
    ASSERT_EQ(connect_qp(b.qp, a.qp->qp_num, a.d.lid), 0);
    ibv_wc wc;
    /* b: three unsignaled WRITEs, then a signaled one: one CQE */
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(post_send(b.qp, IBV_WR_RDMA_WRITE, b.buf.data(), 8,
                            b.mr->lkey, i, 0, a.mr->rkey, a.addr(0)),
                  0);
    }
    ASSERT_EQ(post_send(b.qp, IBV_WR_RDMA_WRITE, b.buf.data(), 8, b.mr->lkey, 3,
                        IBV_SEND_SIGNALED, a.mr->rkey, a.addr(0)),
              0);
    ASSERT_TRUE(poll_one(b.d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 3u);
    ASSERT_TRUE(engine_idle());
    EXPECT_TRUE(cq_empty_now(b.d.cq));
    /* a (sq_sig_all): every WR completes */
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, a.buf.data(), 8,
                            a.mr->lkey, i, 0, b.mr->rkey, b.addr(0)),
                  0);
    }
    for (uint64_t i = 0; i < 3; i++) {
        ASSERT_TRUE(poll_one(a.d.cq, &wc));
        EXPECT_EQ(wc.wr_id, i);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
}

TEST_F(emu_rc, rnr_then_post)
{
    pair();
    ibv_wc wc;
    uint64_t rnr0 = PROCESS_COUNT(rnr_retries);
    ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 64, a.mr->lkey, 1,
                        IBV_SEND_SIGNALED),
              0);
    ASSERT_TRUE(wait_until([&] { return PROCESS_COUNT(rnr_retries) > rnr0; }));
    EXPECT_TRUE(cq_empty_now(
            a.d.cq)); /* waits for a receive (rnr_retry 7: forever) */
    EXPECT_TRUE(cq_empty_now(b.rcq));
    ASSERT_EQ(b.recv(0, 64, 9), 0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.byte_len, 64u);
}

TEST_F(emu_rc, rnr_retry_exceeded)
{
    conn c;
    c.rnr_retry = 2;
    pair(false, false, false, c);
    ibv_wc wc;
    ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 64, a.mr->lkey, 1,
                        IBV_SEND_SIGNALED),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_TRUE(wait_until([&] { return qp_state(a.qp) == IBV_QPS_ERR; }));
    EXPECT_EQ(qp_state(b.qp),
              IBV_QPS_RTS); /* an RNR is no error at the responder */
}

TEST_F(emu_rc, bad_rkey_rem_access_and_flush)
{
    pair();
    ibv_wc wc;
    ASSERT_EQ(a.recv(0, 64, 31), 0);
    ASSERT_EQ(a.recv(64, 64, 32), 0);
    ASSERT_EQ(b.recv(0, 64, 41), 0);
    ASSERT_EQ(b.recv(64, 64, 42), 0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, a.buf.data(), 8, a.mr->lkey, 1,
                        IBV_SEND_SIGNALED, b.mr->rkey + 1, b.addr(0)),
              0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 8, a.mr->lkey, 2, 0),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(wc.wr_id, 1u);
    ASSERT_TRUE(poll_one(a.d.cq, &wc)); /* flushed although unsignaled */
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(qp_state(a.qp), IBV_QPS_ERR);
    /* the requester's own receive queue is flushed, in order */
    for (uint64_t id = 31; id <= 32; id++) {
        ASSERT_TRUE(poll_one(a.rcq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc.wr_id, id);
        EXPECT_EQ(wc.qp_num, a.qp->qp_num);
    }
    /* the responder went to ERR too, and flushed its receives */
    EXPECT_TRUE(wait_until([&] { return qp_state(b.qp) == IBV_QPS_ERR; }));
    for (uint64_t id = 41; id <= 42; id++) {
        ASSERT_TRUE(poll_one(b.rcq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc.wr_id, id);
    }
    /* a receive posted in ERR is flushed at once; a send too */
    ASSERT_EQ(b.recv(0, 64, 43), 0);
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 43u);
    ASSERT_EQ(post_send(b.qp, IBV_WR_SEND, b.buf.data(), 8, b.mr->lkey, 44, 0),
              0);
    ASSERT_TRUE(poll_one(b.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    /* RESET, then a new connection works again */
    ibv_qp_attr x;
    memset(&x, 0, sizeof(x));
    x.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, IBV_QP_STATE), 0);
    ASSERT_EQ(dcxemu_ibv_modify_qp(b.qp, &x, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_qp(a.qp, b.qp->qp_num, b.d.lid), 0);
    ASSERT_EQ(connect_qp(b.qp, a.qp->qp_num, a.d.lid), 0);
    ASSERT_EQ(b.recv(0, 64, 50), 0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 8, a.mr->lkey, 3,
                        IBV_SEND_SIGNALED),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.wr_id, 50u);
}

TEST_F(emu_rc, recv_too_small_rem_inv_req)
{
    pair();
    ibv_wc wc;
    ASSERT_EQ(b.recv(0, 16, 61), 0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 64, a.mr->lkey, 1,
                        IBV_SEND_SIGNALED),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    ASSERT_TRUE(poll_one(b.rcq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(wc.wr_id, 61u);
    EXPECT_TRUE(wait_until([&] { return qp_state(b.qp) == IBV_QPS_ERR; }));
}

TEST_F(emu_rc, wrong_dest_qpn_retry_exc)
{
    conn c;
    c.retry_cnt = 2;
    ASSERT_TRUE(a.open(false, false));
    ASSERT_TRUE(b.open(false, false));
    rc_end other;
    ASSERT_TRUE(other.open(false, false));
    /* b is connected to another QP, not back to a */
    ASSERT_EQ(connect_qp(a.qp, b.qp->qp_num, b.d.lid, c), 0);
    ASSERT_EQ(connect_qp(b.qp, other.qp->qp_num, other.d.lid, c), 0);
    ASSERT_EQ(b.recv(0, 64, 1), 0);
    ibv_wc wc;
    uint64_t retries0 = PROCESS_COUNT(transport_retries);
    ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, a.buf.data(), 8, a.mr->lkey, 1,
                        IBV_SEND_SIGNALED),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(PROCESS_COUNT(transport_retries) - retries0, 2u);
    EXPECT_TRUE(cq_empty_now(b.rcq));
    /* a number nobody has, and the right number on a wrong LID */
    ibv_qp_attr x;
    memset(&x, 0, sizeof(x));
    x.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_qp(a.qp, (b.qp->qp_num + 1) & 0xffffff, b.d.lid, c), 0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, a.buf.data(), 8, a.mr->lkey, 2,
                        IBV_SEND_SIGNALED, b.mr->rkey, b.addr(0)),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, IBV_QP_STATE), 0);
    ASSERT_EQ(dcxemu_ibv_modify_qp(b.qp, &x, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_qp(b.qp, a.qp->qp_num, a.d.lid, c), 0);
    ASSERT_EQ(connect_qp(a.qp, b.qp->qp_num, (uint16_t)(b.d.lid + 1), c), 0);
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, a.buf.data(), 8, a.mr->lkey, 3,
                        IBV_SEND_SIGNALED, b.mr->rkey, b.addr(0)),
              0);
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    other.close();
}

TEST_F(emu_rc, post_errors)
{
    ASSERT_TRUE(a.open(false, false, 0, 4));
    ASSERT_TRUE(b.open(false, false));
    ibv_sge sge     = { (uintptr_t)a.buf.data(), 8, a.mr->lkey };
    ibv_sge sges[3] = { sge, sge, sge };
    ibv_recv_wr rw, *rbad = nullptr;
    memset(&rw, 0, sizeof(rw));
    rw.sg_list = &sge;
    rw.num_sge = 1;
    EXPECT_ERRNO_EQ(EINVAL, ibv_post_recv(a.qp, &rw, &rbad)); /* RESET */
    EXPECT_EQ(rbad, &rw);
    conn c;
    ibv_qp_attr x = conn_attr(IBV_QPS_INIT, b.qp->qp_num, b.d.lid, c);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, INIT_MASK), 0);
    /* INIT: receives are taken, sends are not (mlx5: ENOMEM before RTS) */
    EXPECT_ERRNO_EQ(ENOMEM, post_send(a.qp, IBV_WR_SEND, a.buf.data(), 8,
                                      a.mr->lkey, 1, 0));
    rw.sg_list = sges;
    rw.num_sge = 3;
    EXPECT_ERRNO_EQ(EINVAL, ibv_post_recv(a.qp, &rw,
                                          &rbad)); /* more than max_recv_sge */
    rw.num_sge = 1;
    for (uint32_t i = 0; i < a.cap.max_recv_wr; i++) {
        ASSERT_EQ(ibv_post_recv(a.qp, &rw, &rbad), 0);
    }
    EXPECT_ERRNO_EQ(ENOMEM, ibv_post_recv(a.qp, &rw, &rbad)); /* full */
    ASSERT_EQ(connect_qp(b.qp, a.qp->qp_num, a.d.lid), 0);
    x = conn_attr(IBV_QPS_RTR, b.qp->qp_num, b.d.lid, c);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, RTR_MASK), 0);
    x = conn_attr(IBV_QPS_RTS, b.qp->qp_num, b.d.lid, c);
    ASSERT_EQ(dcxemu_ibv_modify_qp(a.qp, &x, RTS_MASK), 0);
    /* a list: the WRs before the bad one are posted and run; *bad_wr is the bad one */
    ibv_send_wr w[3], *bad = nullptr;
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 3; i++) {
        w[i].wr_id               = 100 + i;
        w[i].opcode              = IBV_WR_RDMA_WRITE;
        w[i].send_flags          = IBV_SEND_SIGNALED;
        w[i].sg_list             = &sge;
        w[i].num_sge             = 1;
        w[i].wr.rdma.rkey        = b.mr->rkey;
        w[i].wr.rdma.remote_addr = b.addr(0);
        w[i].next                = i < 2 ? &w[i + 1] : nullptr;
    }
    w[1].opcode = (ibv_wr_opcode)99;
    EXPECT_ERRNO_EQ(EINVAL, ibv_post_send(a.qp, w, &bad));
    EXPECT_EQ(bad, &w[1]);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(a.d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 100u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(engine_idle());
    EXPECT_TRUE(cq_empty_now(a.d.cq));
    w[1].opcode = IBV_WR_BIND_MW;
    EXPECT_ERRNO_EQ(EOPNOTSUPP,
                    ibv_post_send(a.qp, &w[1], &bad)); /* valid, not modelled */
    w[1].opcode = IBV_WR_RDMA_WRITE;
    std::vector<ibv_sge> many(a.cap.max_send_sge + 1, sge);
    w[1].sg_list = many.data();
    w[1].num_sge = (int)many.size();
    EXPECT_ERRNO_EQ(ENOMEM, ibv_post_send(a.qp, &w[1],
                                          &bad)); /* more than max_send_sge */
    w[1].num_sge    = 1;
    w[1].next       = nullptr;
    w[1].send_flags = IBV_SEND_INLINE;
    sge.length      = a.cap.max_inline_data + 1;
    w[1].sg_list    = &sge;
    EXPECT_ERRNO_EQ(ENOMEM, ibv_post_send(a.qp, &w[1],
                                          &bad)); /* beyond max_inline_data */
    EXPECT_EQ(bad, &w[1]);
    EXPECT_EQ(qp_state(a.qp), IBV_QPS_RTS);
}

/* ------------------------------------------------------------------ two processes ---- */

namespace {

enum {
    RC_POST_RECV = 1,
    RC_POLL,
    RC_SEND,
    RC_DUMP,
    RC_STATE,
    RC_EXIT
};

struct rc_cmd {
    uint32_t op, a, b, c;
    uint64_t d;
};

struct rc_info {
    uint32_t lid, qpn, rkey, pad;
    uint64_t addr;
};

struct rc_wc {
    uint64_t wr_id;
    uint32_t status, opcode, byte_len, qp_num, src_qp, imm, flags, pad;
};

} // namespace

/* rcpeer <cmd_fd> <resp_fd> <srq 0|1>: an RC QP that publishes its address, connects to the
 * parent's and then obeys commands: post receives, poll its receive CQ, SEND back, dump memory,
 * report its state. */
EMU_CHILD(rcpeer)
{
    if (argc < 3)
        return 2;
    int cfd = atoi(argv[0]), rfd = atoi(argv[1]);
    rc_end e;
    if (!e.open(atoi(argv[2]) != 0, false))
        return 3;
    rc_info me = { e.d.lid, e.qp->qp_num, e.mr->rkey, 0, e.addr(0) }, peer;
    if (!write_full(rfd, &me, sizeof(me)) ||
        !read_full(cfd, &peer, sizeof(peer), 10000)) {
        return 4;
    }
    if (connect_qp(e.qp, peer.qpn, (uint16_t)peer.lid) != 0)
        return 5;
    write_full(rfd, "k", 1);
    for (;;) {
        rc_cmd c;
        if (!read_full(cfd, &c, sizeof(c), 60000))
            return 6;
        switch (c.op) {
        case RC_POST_RECV:
            for (uint32_t i = 0; i < c.a; i++) {
                if (e.recv(c.d + (uint64_t)i * c.b, c.b, c.c + i) != 0)
                    return 7;
            }
            write_full(rfd, "k", 1);
            break;
        case RC_POLL: {
            std::vector<rc_wc> out;
            uint64_t end = now_ms() + c.b;
            while (out.size() < c.a && now_ms() < end) {
                ibv_wc wc;
                if (ibv_poll_cq(e.rcq, 1, &wc) == 1) {
                    rc_wc r = { wc.wr_id,           wc.status,   wc.opcode,
                                wc.byte_len,        wc.qp_num,   wc.src_qp,
                                ntohl(wc.imm_data), wc.wc_flags, 0 };
                    out.push_back(r);
                } else {
                    usleep(100);
                }
            }
            uint32_t n = (uint32_t)out.size();
            write_full(rfd, &n, sizeof(n));
            if (n)
                write_full(rfd, out.data(), n * sizeof(rc_wc));
            break;
        }
        case RC_SEND: {
            /* SEND_WITH_IMM of a bytes at offset d, immediate c; reply with the status */
            ibv_wc wc;
            uint32_t st = 0xffff;
            if (post_send(e.qp, IBV_WR_SEND_WITH_IMM, e.buf.data() + c.d, c.a,
                          e.mr->lkey, 1, IBV_SEND_SIGNALED, 0, 0, c.c) == 0 &&
                poll_one(e.d.cq, &wc)) {
                st = wc.status;
            }
            write_full(rfd, &st, sizeof(st));
            break;
        }
        case RC_DUMP:
            write_full(rfd, e.buf.data() + c.d, c.a);
            break;
        case RC_STATE: {
            int32_t st = qp_state(e.qp);
            write_full(rfd, &st, sizeof(st));
            break;
        }
        case RC_EXIT:
            e.close();
            return 0;
        }
    }
}

namespace {

struct rc_peer {
    pid_t pid = -1;
    int cmd_w = -1, resp_r = -1;
    rc_info info;
    bool start(bool srq)
    {
        int c[2], r[2];
        if (pipe(c) || pipe(r))
            return false;
        pid = spawn(g_fabric, { "rcpeer", std::to_string(c[0]),
                                std::to_string(r[1]), srq ? "1" : "0" });
        ::close(c[0]);
        ::close(r[1]);
        cmd_w  = c[1];
        resp_r = r[0];
        return pid > 0 && read_full(resp_r, &info, sizeof(info), 10000);
    }
    /* give the peer our address; it connects */
    bool connect_to(const rc_end &e)
    {
        rc_info me = { e.d.lid, e.qp->qp_num, e.mr->rkey, 0, 0 };
        char k     = 0;
        return write_full(cmd_w, &me, sizeof(me)) &&
               read_full(resp_r, &k, 1, 10000) && k == 'k';
    }
    bool cmd(uint32_t op, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0,
             uint64_t d = 0)
    {
        rc_cmd x = { op, a, b, c, d };
        return write_full(cmd_w, &x, sizeof(x));
    }
    bool post_recv(uint32_t n, uint32_t size, uint64_t off, uint32_t wr_id)
    {
        char k = 0;
        return cmd(RC_POST_RECV, n, size, wr_id, off) &&
               read_full(resp_r, &k, 1, 10000) && k == 'k';
    }
    std::vector<rc_wc> poll(uint32_t n, uint32_t ms = 5000)
    {
        std::vector<rc_wc> v;
        uint32_t got = 0;
        if (!cmd(RC_POLL, n, ms) || !read_full(resp_r, &got, 4, (int)ms + 5000))
            return v;
        v.resize(got);
        if (got && !read_full(resp_r, v.data(), got * sizeof(rc_wc), 5000))
            v.clear();
        return v;
    }
    uint32_t send_imm(uint32_t len, uint64_t off, uint32_t imm)
    {
        uint32_t st = 0xfffe;
        if (!cmd(RC_SEND, len, 0, imm, off) ||
            !read_full(resp_r, &st, 4, 15000))
            return 0xfffd;
        return st;
    }
    std::vector<char> dump(uint64_t off, uint32_t len)
    {
        std::vector<char> v(len);
        if (!cmd(RC_DUMP, len, 0, 0, off) ||
            !read_full(resp_r, v.data(), len, 10000))
            v.clear();
        return v;
    }
    int state()
    {
        int32_t st = -1;
        if (!cmd(RC_STATE) || !read_full(resp_r, &st, 4, 10000))
            return -2;
        return st;
    }
    int stop()
    {
        if (pid <= 0)
            return -1;
        cmd(RC_EXIT);
        int st = wait_child(pid, 10000);
        pid    = -1;
        return st;
    }
    ~rc_peer()
    {
        if (pid > 0) {
            kill(pid, SIGKILL);
            wait_child(pid, 5000);
        }
        if (cmd_w >= 0)
            ::close(cmd_w);
        if (resp_r >= 0)
            ::close(resp_r);
    }
};

struct emu_rc_mp : public ::testing::TestWithParam<bool> {
    rc_end e;
    rc_peer p;
    void SetUp() override
    {
        ASSERT_TRUE(e.open(false, false));
        ASSERT_TRUE(p.start(GetParam()));
        ASSERT_EQ(connect_qp(e.qp, p.info.qpn, (uint16_t)p.info.lid), 0);
        ASSERT_TRUE(p.connect_to(e));
    }
    void TearDown() override
    {
        EXPECT_EQ(p.stop(), 0);
        e.close();
    }
};

} // namespace

/* ping-pong SENDs between two processes; the peer receives through its own queue (false) or an
 * SRQ (true) */
TEST_P(emu_rc_mp, send_pingpong)
{
    ibv_wc wc;
    for (uint32_t i = 0; i < 10; i++) {
        ASSERT_TRUE(p.post_recv(1, 256, 1024, 500 + i));
        ASSERT_EQ(e.recv(4096, 256, 600 + i), 0);
        memset(e.buf.data(), (int)('a' + i), 200);
        ASSERT_EQ(post_send(e.qp, IBV_WR_SEND, e.buf.data(), 200, e.mr->lkey, i,
                            IBV_SEND_SIGNALED),
                  0);
        ASSERT_TRUE(poll_one(e.d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        std::vector<rc_wc> r = p.poll(1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, (uint32_t)IBV_WC_SUCCESS);
        EXPECT_EQ(r[0].opcode, (uint32_t)IBV_WC_RECV);
        EXPECT_EQ(r[0].wr_id, 500u + i);
        EXPECT_EQ(r[0].byte_len, 200u);
        EXPECT_EQ(r[0].qp_num, p.info.qpn);
        EXPECT_EQ(r[0].src_qp, e.qp->qp_num);
        /* the peer echoes what it received, with an immediate */
        EXPECT_EQ(p.send_imm(200, 1024, 0x7000 + i), (uint32_t)IBV_WC_SUCCESS);
        ASSERT_TRUE(poll_one(e.rcq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, 600u + i);
        EXPECT_EQ(wc.byte_len, 200u);
        EXPECT_EQ(wc.src_qp, p.info.qpn);
        EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(ntohl(wc.imm_data), 0x7000u + i);
        EXPECT_EQ(memcmp(e.buf.data() + 4096, e.buf.data(), 200), 0);
    }
}

TEST_P(emu_rc_mp, one_sided_and_rnr)
{
    ibv_wc wc;
    for (int i = 0; i < 3000; i++)
        e.buf[i] = (char)(i * 5 + 1);
    ASSERT_EQ(post_send(e.qp, IBV_WR_RDMA_WRITE, e.buf.data(), 3000, e.mr->lkey,
                        1, IBV_SEND_SIGNALED, p.info.rkey, p.info.addr + 8192),
              0);
    ASSERT_TRUE(poll_one(e.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    std::vector<char> got = p.dump(8192, 3000);
    ASSERT_EQ(got.size(), 3000u);
    EXPECT_EQ(memcmp(got.data(), e.buf.data(), 3000), 0);
    ASSERT_EQ(post_send(e.qp, IBV_WR_RDMA_READ, e.buf.data() + 20000, 3000,
                        e.mr->lkey, 2, IBV_SEND_SIGNALED, p.info.rkey,
                        p.info.addr + 8192),
              0);
    ASSERT_TRUE(poll_one(e.d.cq, &wc));
    EXPECT_EQ(wc.byte_len, 3000u);
    EXPECT_EQ(memcmp(e.buf.data() + 20000, e.buf.data(), 3000), 0);
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(post_send(e.qp, IBV_WR_ATOMIC_FETCH_AND_ADD,
                            e.buf.data() + 30000 + 8 * i, 8, e.mr->lkey, 3,
                            IBV_SEND_SIGNALED, p.info.rkey, p.info.addr + 16384,
                            0, 3),
                  0);
        ASSERT_TRUE(poll_one(e.d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        uint64_t v;
        memcpy(&v, e.buf.data() + 30000 + 8 * i, 8);
        EXPECT_EQ(v, 3u * i);
    }
    ASSERT_EQ(post_send(e.qp, IBV_WR_ATOMIC_CMP_AND_SWP, e.buf.data() + 31000,
                        8, e.mr->lkey, 4, IBV_SEND_SIGNALED, p.info.rkey,
                        p.info.addr + 16384, 0, 15, 1234),
              0);
    ASSERT_TRUE(poll_one(e.d.cq, &wc));
    got = p.dump(16384, 8);
    ASSERT_EQ(got.size(), 8u);
    uint64_t v;
    memcpy(&v, got.data(), 8);
    EXPECT_EQ(v, 1234u);
    /* WRITE_IMM with no receive posted: RNR, then it lands once one is */
    uint64_t rnr0 = PROCESS_COUNT(rnr_retries);
    ASSERT_EQ(post_send(e.qp, IBV_WR_RDMA_WRITE_WITH_IMM, e.buf.data(), 100,
                        e.mr->lkey, 5, IBV_SEND_SIGNALED, p.info.rkey,
                        p.info.addr + 40000, 0x99),
              0);
    ASSERT_TRUE(wait_until([&] { return PROCESS_COUNT(rnr_retries) > rnr0; }));
    EXPECT_TRUE(cq_empty_now(e.d.cq));
    ASSERT_TRUE(p.post_recv(1, 16, 0, 77));
    ASSERT_TRUE(poll_one(e.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    std::vector<rc_wc> r = p.poll(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].opcode, (uint32_t)IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(r[0].wr_id, 77u);
    EXPECT_EQ(r[0].byte_len, 100u);
    EXPECT_EQ(r[0].imm, 0x99u);
    got = p.dump(40000, 100);
    EXPECT_EQ(memcmp(got.data(), e.buf.data(), 100), 0);
}

TEST_P(emu_rc_mp, bad_rkey_both_to_err)
{
    ibv_wc wc;
    ASSERT_TRUE(p.post_recv(2, 64, 0, 900));
    ASSERT_EQ(post_send(e.qp, IBV_WR_RDMA_READ, e.buf.data(), 8, e.mr->lkey, 1,
                        IBV_SEND_SIGNALED, p.info.rkey ^ 0x100, p.info.addr),
              0);
    ASSERT_TRUE(poll_one(e.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(qp_state(e.qp), IBV_QPS_ERR);
    EXPECT_TRUE(wait_until([&] { return p.state() == IBV_QPS_ERR; }));
    std::vector<rc_wc> r = p.poll(2, GetParam() ? 300 : 5000);
    if (GetParam()) {
        EXPECT_EQ(r.size(),
                  0u); /* an SRQ's receives are not the QP's to flush */
    } else {
        ASSERT_EQ(r.size(), 2u);
        EXPECT_EQ(r[0].status, (uint32_t)IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(r[0].wr_id, 900u);
        EXPECT_EQ(r[1].wr_id, 901u);
    }
}

INSTANTIATE_TEST_SUITE_P(rq_srq, emu_rc_mp, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &i) {
                             return std::string(i.param ? "srq" : "rq");
                         });

/* rc_roce: on a RoCE port an RC QP's address vector needs a GRH, the peer is found by its GID
 * and GID type, and receives carry IBV_WC_GRH. */
EMU_CHILD(rc_roce)
{
    (void)argc;
    (void)argv;
    rc_end a, b;
    if (!a.open(false, false) || !b.open(false, false))
        return 2;
    conn c;
    c.retry_cnt = 1;
    if (connect_qp(a.qp, b.qp->qp_num, 0, c) != EINVAL)
        return 3; /* no GRH */
    c.global = true;
    memset(&c.grh, 0, sizeof(c.grh));
    if (dcxemu_ibv_query_gid(a.d.ctx, 1, 3, &c.grh.dgid) != 0)
        return 4;
    c.grh.sgid_index = 3;
    c.grh.hop_limit  = 64;
    ibv_qp_attr x;
    memset(&x, 0, sizeof(x));
    x.qp_state = IBV_QPS_RESET;
    if (dcxemu_ibv_modify_qp(a.qp, &x, IBV_QP_STATE) != 0)
        return 5;
    if (connect_qp(a.qp, b.qp->qp_num, 0, c) ||
        connect_qp(b.qp, a.qp->qp_num, 0, c))
        return 6;
    ibv_wc wc;
    if (b.recv(0, 64, 1) != 0 ||
        post_send(a.qp, IBV_WR_SEND, a.buf.data(), 16, a.mr->lkey, 1,
                  IBV_SEND_SIGNALED) != 0) {
        return 7;
    }
    if (!poll_one(a.d.cq, &wc) || wc.status != IBV_WC_SUCCESS)
        return 8;
    if (!poll_one(b.rcq, &wc) || wc.status != IBV_WC_SUCCESS ||
        !(wc.wc_flags & IBV_WC_GRH) || wc.slid != 0 ||
        wc.src_qp != a.qp->qp_num) {
        return 9;
    }
    /* the same address through a RoCE v1 source GID: another packet type, never delivered */
    if (dcxemu_ibv_modify_qp(a.qp, &x, IBV_QP_STATE) != 0)
        return 10;
    c.grh.sgid_index = 2;
    if (connect_qp(a.qp, b.qp->qp_num, 0, c) != 0 ||
        post_send(a.qp, IBV_WR_SEND, a.buf.data(), 16, a.mr->lkey, 2,
                  IBV_SEND_SIGNALED) != 0) {
        return 11;
    }
    if (!poll_one(a.d.cq, &wc) || wc.status != IBV_WC_RETRY_EXC_ERR)
        return 12;
    a.close();
    b.close();
    return 0;
}

TEST(emu_rc_roce, grh_routing)
{
    pid_t p = spawn(fresh_fabric(), { "rc_roce" },
                    { "DCXEMU_LINK_LAYER=ethernet" });
    int st  = wait_child(p, 30000);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
}
