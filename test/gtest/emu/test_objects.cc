/* Control objects and misuse: each case asserts the exact errno. */
#include "emu_test.h"

#include <gtest/gtest-spi.h>

#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>

#include <atomic>
#include <thread>

using namespace emu;

namespace {

TEST(emu_device, list_names_guid_supported)
{
    int n          = -1;
    ibv_device **l = dcxemu_ibv_get_device_list(&n);
    ASSERT_NE(l, nullptr);
    ASSERT_EQ(n, 2); /* DCXEMU_NUM_DEVICES=2 set by main */
    EXPECT_STREQ(dcxemu_ibv_get_device_name(l[0]), "dcxemu0");
    EXPECT_STREQ(dcxemu_ibv_get_device_name(l[1]), "dcxemu1");
    EXPECT_EQ(l[2], nullptr);
    EXPECT_NE(dcxemu_ibv_get_device_guid(l[0]),
              dcxemu_ibv_get_device_guid(l[1]));
    EXPECT_TRUE(dcxemu_mlx5dv_is_supported(l[0]));
    EXPECT_EQ(l[0]->node_type, IBV_NODE_CA);
    EXPECT_EQ(l[0]->transport_type, IBV_TRANSPORT_IB);
    mlx5dv_context_attr bad = { 1u << 5, 0 };
    errno                   = 0;
    EXPECT_EQ(dcxemu_mlx5dv_open_device(l[0], &bad), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    mlx5dv_context_attr devx = { MLX5DV_CONTEXT_FLAGS_DEVX, 0 };
    ibv_context *ctx         = dcxemu_mlx5dv_open_device(l[1], &devx);
    ASSERT_NE(ctx, nullptr);
    EXPECT_EQ(dcxemu_ibv_close_device(ctx), 0);
    dcxemu_ibv_free_device_list(l);
}

TEST(emu_device, verbs_context_layout)
{
    dev d;
    ASSERT_TRUE(d.open());
    verbs_context *v = verbs_get_ctx(d.ctx);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->sz, 648u);
    EXPECT_EQ(d.ctx->abi_compat, (void *)UINTPTR_MAX);
    EXPECT_NE(verbs_get_ctx_op(d.ctx, query_port), nullptr);
    EXPECT_NE(verbs_get_ctx_op(d.ctx, create_cq_ex), nullptr);
    EXPECT_NE(verbs_get_ctx_op(d.ctx, query_device_ex), nullptr);
    EXPECT_NE(d.ctx->ops.poll_cq, nullptr);
    EXPECT_NE(d.ctx->ops.req_notify_cq, nullptr);
    EXPECT_NE(d.ctx->ops.post_srq_recv, nullptr);
    EXPECT_NE(d.ctx->ops.post_send, nullptr);
    EXPECT_NE(d.ctx->ops.post_recv, nullptr);
    EXPECT_GE(fcntl(d.ctx->async_fd, F_GETFL), 0);
    EXPECT_GE(fcntl(d.ctx->cmd_fd, F_GETFL), 0);
    EXPECT_GE(d.ctx->num_comp_vectors, 1);
    /* rdma-core's own inline wrapper dispatches through the context */
    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe        = 4;
    ca.wc_flags   = IBV_WC_EX_WITH_BYTE_LEN;
    ibv_cq_ex *cq = ibv_create_cq_ex(d.ctx, &ca);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(dcxemu_ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    d.close();
}

TEST(emu_device, query_device_caps)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_device_attr a;
    ASSERT_EQ(dcxemu_ibv_query_device(d.ctx, &a), 0);
    EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
    EXPECT_EQ(a.max_qp_wr, 32768);
    EXPECT_EQ(a.max_sge, 30);
    EXPECT_EQ(a.max_cqe, 4194303);
    EXPECT_EQ(a.max_qp_rd_atom, 16);
    EXPECT_EQ(a.max_qp_init_rd_atom, 16);
    EXPECT_EQ(a.max_srq_wr, 32767);
    EXPECT_EQ(a.max_srq_sge, 31);
    EXPECT_EQ(a.vendor_id, 0x02c9u);
    EXPECT_EQ(a.vendor_part_id, 4123u);
    EXPECT_EQ(a.phys_port_cnt, 1);
    EXPECT_EQ(a.max_pkeys, 128);
    EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS);
    EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN);
    ibv_device_attr_ex ax;
    ASSERT_EQ(dcxemu_ibv_query_device_ex(d.ctx, nullptr, &ax), 0);
    EXPECT_EQ(ax.orig_attr.atomic_cap, IBV_ATOMIC_HCA);
    EXPECT_EQ(ax.phys_port_cnt_ex, 1u);
    ibv_query_device_ex_input in = { 1 };
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_query_device_ex(d.ctx, &in, &ax));
    mlx5dv_context dv;
    memset(&dv, 0, sizeof(dv));
    dv.comp_mask = MLX5DV_CONTEXT_MASK_DC_ODP_CAPS |
                   MLX5DV_CONTEXT_MASK_DCI_STREAMS |
                   MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD;
    ASSERT_EQ(dcxemu_mlx5dv_query_device(d.ctx, &dv), 0);
    /* in/out: only the filled bits come back */
    EXPECT_EQ(dv.comp_mask, (uint64_t)(MLX5DV_CONTEXT_MASK_DC_ODP_CAPS |
                                       MLX5DV_CONTEXT_MASK_DCI_STREAMS));
    EXPECT_TRUE(dv.flags & MLX5DV_CONTEXT_FLAGS_CQE_V1);
    d.close();
}

TEST(emu_device, query_port_gid_pkey)
{
    dev d0, d1;
    ASSERT_TRUE(d0.open(0));
    ASSERT_TRUE(d1.open(1));
    ibv_port_attr pa;
    ASSERT_EQ(dcxemu_ibv_query_port(d0.ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
    EXPECT_EQ(pa.max_msg_sz, 1u << 30);
    EXPECT_EQ(pa.lid, 1);
    EXPECT_EQ(d1.lid, 2); /* one LID per device */
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_query_port(d0.ctx, 2, &pa));
    /* the rdma-core macro reaches the model through verbs_context.query_port */
    ibv_port_attr pb;
    memset(&pb, 0, sizeof(pb));
    ASSERT_EQ(verbs_get_ctx(d1.ctx)->query_port(d1.ctx, 1, &pb, sizeof(pb)), 0);
    EXPECT_EQ(pb.lid, 2);
    union ibv_gid g;
    ASSERT_EQ(dcxemu_ibv_query_gid(d0.ctx, 1, 0, &g), 0);
    EXPECT_EQ(be64toh(g.global.subnet_prefix), 0xfe80000000000000ull);
    ASSERT_EQ(dcxemu_ibv_query_gid(d0.ctx, 1, 5, &g), 0);
    EXPECT_EQ(g.global.interface_id, 0u);
    EXPECT_EQ(dcxemu_ibv_query_gid(d0.ctx, 1, 500, &g), -1);
    __be16 pk;
    ASSERT_EQ(dcxemu_ibv_query_pkey(d0.ctx, 1, 0, &pk), 0);
    EXPECT_EQ(be16toh(pk), 0xffff);
    EXPECT_EQ(dcxemu_ibv_query_pkey(d0.ctx, 1, 128, &pk), -1);
    d0.close();
    d1.close();
}

TEST(emu_pd_mr, access_rules_and_busy_pd)
{
    dev d;
    ASSERT_TRUE(d.open());
    std::vector<char> buf(8192);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                IBV_ACCESS_REMOTE_WRITE),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                IBV_ACCESS_REMOTE_ATOMIC),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(d.pd, buf.data(), 0, 0), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    void *hole = mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                      0);
    ASSERT_NE(hole, MAP_FAILED);
    munmap(hole, 8192);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(d.pd, hole, 8192, IBV_ACCESS_LOCAL_WRITE),
              nullptr);
    EXPECT_ERRNO_EQ(EFAULT, errno);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE |
                                           IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_EQ(mr->addr, buf.data());
    EXPECT_EQ(mr->length, buf.size());
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_ibv_dealloc_pd(d.pd));
    ibv_mr *mr2 = dcxemu_ibv_reg_mr_iova2(d.pd, buf.data(), 4096, 0x100000,
                                          IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr2, nullptr);
    EXPECT_NE(mr2->lkey, mr->lkey);
    EXPECT_EQ(dcxemu_ibv_dereg_mr(mr2), 0);
    EXPECT_EQ(dcxemu_ibv_dereg_mr(mr), 0);
    d.close();
}

TEST(emu_pd_mr, freed_key_returns_with_new_tag)
{
    dev d;
    ASSERT_TRUE(d.open());
    std::vector<char> buf(4096);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    uint32_t old = mr->rkey;
    ASSERT_EQ(dcxemu_ibv_dereg_mr(mr), 0);
    bool found = false;
    for (int i = 0; i < 70000 && !found; i++) {
        mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                               IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(mr, nullptr);
        if ((mr->rkey >> 8) == (old >> 8)) {
            found = true;
            EXPECT_NE(mr->rkey, old); /* same index, new tag */
            EXPECT_EQ(mr->rkey & 0xff, (old + 1) & 0xff);
        }
        ASSERT_EQ(dcxemu_ibv_dereg_mr(mr), 0);
    }
    EXPECT_TRUE(found);
    d.close();
}

TEST(emu_pd_mr, ah_validation)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_ah_attr a;
    memset(&a, 0, sizeof(a));
    a.dlid     = 1;
    a.port_num = 2;
    errno      = 0;
    EXPECT_EQ(dcxemu_ibv_create_ah(d.pd, &a), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    a.port_num = 1;
    ibv_ah *ah = dcxemu_ibv_create_ah(d.pd, &a);
    ASSERT_NE(ah, nullptr);
    EXPECT_EQ(dcxemu_ibv_destroy_ah(ah), 0);
    d.close();
}

TEST(emu_cq, create_validation_and_rounding)
{
    dev d;
    ASSERT_TRUE(d.open());
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_create_cq(d.ctx, 0, nullptr, nullptr, 0), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_create_cq(d.ctx, 8, nullptr, nullptr,
                                   d.ctx->num_comp_vectors),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_create_cq(d.ctx, 4194304, nullptr, nullptr, 0),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    ibv_cq *cq = dcxemu_ibv_create_cq(d.ctx, 100, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(cq->cqe, 127);
    errno = 0; /* 2^22 CQEs need 288 MiB; the test fabric's heap has 256 MiB */
    EXPECT_EQ(dcxemu_ibv_create_cq(d.ctx, 4194303, nullptr, nullptr, 0),
              nullptr);
    EXPECT_ERRNO_EQ(ENOMEM, errno);
    EXPECT_EQ(dcxemu_ibv_destroy_cq(cq), 0);
    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe       = 8;
    ca.comp_mask = 1u << 7;
    errno        = 0;
    EXPECT_EQ(dcxemu_ibv_create_cq_ex(d.ctx, &ca), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    ca.flags     = 1u << 5;
    errno        = 0;
    EXPECT_EQ(dcxemu_ibv_create_cq_ex(d.ctx, &ca), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    ca.flags    = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    ca.wc_flags = 1ull << 40;
    errno       = 0;
    EXPECT_EQ(dcxemu_ibv_create_cq_ex(d.ctx, &ca), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    d.close();
}

TEST(emu_cq, ex_readers_and_start_poll_rules)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe        = 8;
    ca.wc_flags   = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
    ibv_cq_ex *cq = dcxemu_ibv_create_cq_ex(d.ctx, &ca);
    ASSERT_NE(cq, nullptr);
    EXPECT_NE(cq->read_byte_len, nullptr);
    EXPECT_NE(cq->read_qp_num, nullptr);
    EXPECT_NE(cq->read_opcode, nullptr);
    EXPECT_NE(cq->read_vendor_err, nullptr);
    EXPECT_NE(cq->read_wc_flags, nullptr);
    EXPECT_EQ(cq->read_imm_data, nullptr); /* not requested */
    EXPECT_EQ(cq->read_src_qp, nullptr);
    ibv_poll_cq_attr pa = { 1 };
    EXPECT_ERRNO_EQ(EINVAL, ibv_start_poll(cq, &pa));
    pa.comp_mask = 0;
    EXPECT_ERRNO_EQ(ENOENT, ibv_start_poll(cq, &pa)); /* empty; no end_poll */
    EXPECT_EQ(dcxemu_ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    d.close();
}

TEST(emu_srq, create_modify_post_rules)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_srq_init_attr a;
    memset(&a, 0, sizeof(a));
    a.attr.max_wr  = 40000;
    a.attr.max_sge = 1;
    errno          = 0;
    EXPECT_EQ(dcxemu_ibv_create_srq(d.pd, &a), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    a.attr.max_wr  = 5;
    a.attr.max_sge = 2;
    ibv_srq *srq   = dcxemu_ibv_create_srq(d.pd, &a);
    ASSERT_NE(srq, nullptr);
    EXPECT_EQ(a.attr.max_wr, 7u); /* roundup_pow2(5+1)-1 */
    EXPECT_EQ(a.attr.max_sge, 3u); /* 64-byte descriptor */
    ibv_srq_attr sa;
    sa.max_wr = 100;
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
    sa.srq_limit = 8;
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT));
    std::vector<char> buf(4096);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sg[4];
    for (auto &s : sg)
        s = { (uintptr_t)buf.data(), 8, mr->lkey };
    ibv_recv_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.sg_list = sg;
    wr.num_sge = 4;
    EXPECT_ERRNO_EQ(EINVAL, ibv_post_srq_recv(srq, &wr, &bad));
    EXPECT_EQ(bad, &wr);
    wr.num_sge = 1;
    std::vector<ibv_recv_wr> wrs(9, wr);
    for (int i = 0; i < 8; i++)
        wrs[i].next = &wrs[i + 1];
    wrs[8].next = nullptr;
    bad         = nullptr;
    EXPECT_ERRNO_EQ(ENOMEM, ibv_post_srq_recv(srq, wrs.data(), &bad));
    EXPECT_EQ(bad, &wrs[7]); /* 7 fit */
    /* ibv_create_srq_ex reaches the model through verbs_context (called directly here: the
     * inline wrapper also references the exported ibv_create_srq, absent from the model) */
    ibv_srq_init_attr_ex ax;
    memset(&ax, 0, sizeof(ax));
    ax.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE |
                   IBV_SRQ_INIT_ATTR_CQ;
    ax.pd           = d.pd;
    ax.srq_type     = IBV_SRQT_BASIC;
    ax.attr.max_wr  = 4;
    ax.attr.max_sge = 1;
    errno           = 0;
    EXPECT_EQ(verbs_get_ctx_op(d.ctx, create_srq_ex)->create_srq_ex(d.ctx, &ax),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    ax.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
    ax.srq_type  = IBV_SRQT_XRC;
    errno        = 0;
    EXPECT_EQ(verbs_get_ctx_op(d.ctx, create_srq_ex)->create_srq_ex(d.ctx, &ax),
              nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    ax.srq_type = IBV_SRQT_BASIC;
    ibv_srq *sx =
            verbs_get_ctx_op(d.ctx, create_srq_ex)->create_srq_ex(d.ctx, &ax);
    ASSERT_NE(sx, nullptr);
    EXPECT_EQ(ax.attr.max_wr, 7u);
    EXPECT_EQ(dcxemu_ibv_destroy_srq(sx), 0);
    ibv_qp *dct = create_dct(d, srq, 1);
    ASSERT_NE(dct, nullptr);
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_ibv_destroy_srq(srq));
    EXPECT_EQ(dcxemu_ibv_destroy_qp(dct), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_srq(srq), 0);
    EXPECT_EQ(dcxemu_ibv_dereg_mr(mr), 0);
    d.close();
}

/* ---------------------------------------------------------------- channels ---- */

struct emu_channel : public ::testing::Test {
    dev d;
    ibv_comp_channel *ch = nullptr;
    ibv_cq *rcq          = nullptr;
    ibv_srq *srq         = nullptr;
    ibv_qp *dct          = nullptr;
    dci c;
    std::vector<char> buf;
    ibv_mr *mr = nullptr;
    void SetUp() override
    {
        ASSERT_TRUE(d.open());
        ch = dcxemu_ibv_create_comp_channel(d.ctx);
        ASSERT_NE(ch, nullptr);
        fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
        rcq = dcxemu_ibv_create_cq(d.ctx, 64, (void *)0x1234, ch, 0);
        ASSERT_NE(rcq, nullptr);
        srq = create_srq(d);
        dct = create_dct(d, srq, 5, rcq);
        ASSERT_EQ(dct_to_rtr(dct), 0);
        buf.assign(65536, 0);
        mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                               IBV_ACCESS_LOCAL_WRITE |
                                       IBV_ACCESS_REMOTE_WRITE);
        ASSERT_TRUE(make_dci(d, c, d.lid));
    }
    void TearDown() override
    {
        destroy_dci(c);
        dcxemu_ibv_destroy_qp(dct);
        dcxemu_ibv_destroy_srq(srq);
        dcxemu_ibv_dereg_mr(mr);
        dcxemu_ibv_destroy_cq(rcq);
        dcxemu_ibv_destroy_comp_channel(ch);
        d.close();
    }
    void send(unsigned flags)
    {
        ASSERT_EQ(post_recv(srq, mr, buf.data() + 4096, 64, 1), 0);
        ASSERT_EQ(post_one(c, OP_SEND, mr->lkey, buf.data(), 8, 0, 0,
                           dct->qp_num, 5, 1, flags),
                  0);
    }
    bool event(int ms)
    {
        pollfd p = { ch->fd, POLLIN, 0 };
        if (poll(&p, 1, ms) != 1)
            return false;
        ibv_cq *cq = nullptr;
        void *cctx = nullptr;
        if (dcxemu_ibv_get_cq_event(ch, &cq, &cctx) != 0)
            return false;
        EXPECT_EQ(cq, rcq);
        EXPECT_EQ(cctx, (void *)0x1234);
        dcxemu_ibv_ack_cq_events(cq, 1);
        return true;
    }
    void drain()
    {
        ibv_wc wc[8];
        while (ibv_poll_cq(rcq, 8, wc) > 0) {
        }
    }
    /* A signaled send, and its completion: the receive CQE was written before it (and any event
     * it raised); once the engine is quiescent, such an event is on the channel. */
    void send_done(unsigned flags)
    {
        send(flags | IBV_SEND_SIGNALED);
        ibv_wc wc;
        ASSERT_TRUE(poll_one(d.cq, &wc));
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        ASSERT_TRUE(engine_quiescent());
    }
};

TEST_F(emu_channel, one_shot_notify)
{
    ibv_cq *cq;
    void *x;
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_get_cq_event(ch, &cq, &x), -1);
    EXPECT_ERRNO_EQ(EAGAIN, errno);
    ASSERT_EQ(ibv_req_notify_cq(rcq, 0), 0);
    send(0);
    EXPECT_TRUE(event(2000));
    drain();
    send_done(0); /* not re-armed: no event */
    EXPECT_FALSE(event(0));
    drain();
}

TEST_F(emu_channel, pending_cqe_fires_at_arm)
{
    send_done(0); /* the receive CQE is there, unpolled */
    ASSERT_EQ(ibv_req_notify_cq(rcq, 0), 0);
    EXPECT_TRUE(event(2000));
    drain();
}

TEST_F(emu_channel, solicited_only)
{
    ASSERT_EQ(ibv_req_notify_cq(rcq, 1), 0);
    send_done(0);
    EXPECT_FALSE(event(0));
    send(IBV_SEND_SOLICITED);
    EXPECT_TRUE(event(2000));
    drain();
}

TEST_F(emu_channel, destroy_cq_waits_for_acks)
{
    ibv_cq *cq2 = dcxemu_ibv_create_cq(d.ctx, 8, nullptr, ch, 0);
    ASSERT_NE(cq2, nullptr);
    ibv_qp *q = create_dci(d, 16, 1, 0, true, cq2);
    ASSERT_EQ(dci_to_rts(q), 0);
    dci s;
    s.qp  = q;
    s.qpx = dcxemu_ibv_qp_to_qp_ex(q);
    s.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(s.qpx);
    s.ah  = c.ah;
    ASSERT_EQ(ibv_req_notify_cq(cq2, 0), 0);
    ASSERT_EQ(post_one(s, OP_WRITE, mr->lkey, buf.data(), 8, mr->rkey,
                       (uintptr_t)buf.data() + 64, dct->qp_num, 5),
              0);
    pollfd p = { ch->fd, POLLIN, 0 };
    ASSERT_EQ(poll(&p, 1, 2000), 1);
    ibv_cq *ev = nullptr;
    void *x;
    ASSERT_EQ(dcxemu_ibv_get_cq_event(ch, &ev, &x), 0);
    EXPECT_EQ(ev, cq2);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(cq2, &wc));
    s.ah = nullptr;
    destroy_dci(s);
    std::atomic<int> destroyed{ 0 };
    std::thread t([&] { destroyed = dcxemu_ibv_destroy_cq(cq2) == 0 ? 1 : 2; });
    /* blocked: one event not acked */
    EXPECT_TRUE(wait_until([&] {
        return dcxemu_cq_destroy_waiters() == 1 || destroyed.load();
    }));
    EXPECT_EQ(destroyed.load(), 0);
    dcxemu_ibv_ack_cq_events(ev, 1);
    t.join();
    EXPECT_EQ(destroyed.load(), 1);
    EXPECT_EQ(dcxemu_cq_destroy_waiters(), 0);
}

TEST_F(emu_channel, busy_destroy_rules)
{
    EXPECT_ERRNO_EQ(EBUSY,
                    dcxemu_ibv_destroy_comp_channel(ch)); /* a CQ uses it */
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_ibv_destroy_cq(rcq)); /* a DCT uses it */
}

/* ---------------------------------------------------------------- QP creation ---- */

struct emu_qp : public ::testing::Test {
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
    ibv_qp_init_attr_ex attr(uint32_t sge = 1, uint32_t inl = 0)
    {
        ibv_qp_init_attr_ex a;
        memset(&a, 0, sizeof(a));
        a.qp_type = IBV_QPT_DRIVER;
        a.send_cq = a.recv_cq = d.cq;
        a.pd                  = d.pd;
        a.comp_mask           = IBV_QP_INIT_ATTR_PD;
        a.cap.max_send_wr     = 16;
        a.cap.max_send_sge    = sge;
        a.cap.max_inline_data = inl;
        return a;
    }
    mlx5dv_qp_init_attr dv(int type)
    {
        mlx5dv_qp_init_attr v;
        memset(&v, 0, sizeof(v));
        v.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
        v.dc_init_attr.dc_type = (mlx5dv_dc_type)type;
        return v;
    }
    int create_errno(ibv_qp_init_attr_ex a, mlx5dv_qp_init_attr *v)
    {
        errno      = 0;
        ibv_qp *qp = dcxemu_mlx5dv_create_qp(d.ctx, &a, v);
        if (qp != nullptr) {
            dcxemu_ibv_destroy_qp(qp);
            return 0;
        }
        return errno;
    }
};

TEST_F(emu_qp, dci_caps_written_back)
{
    ibv_qp_init_attr_ex a = attr(1, 0);
    mlx5dv_qp_init_attr v = dv(MLX5DV_DCTYPE_DCI);
    ibv_qp *qp            = dcxemu_mlx5dv_create_qp(d.ctx, &a, &v);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(a.cap.max_inline_data, 12u); /* default ops: ovh 240, WQE 256 */
    EXPECT_EQ(a.cap.max_send_sge, 1u);
    EXPECT_GE(a.cap.max_send_wr, 16u);
    EXPECT_EQ(a.cap.max_recv_wr, 0u);
    EXPECT_NE(qp->qp_num, 0u); /* a DCI number is valid at once */
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_EQ(dcxemu_ibv_qp_to_qp_ex(qp), nullptr); /* no SEND_OPS_FLAGS */
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
    /* largest WQE pinned at 512 B: inline 268 fits, 269 does not */
    a  = attr(1, 268);
    qp = dcxemu_mlx5dv_create_qp(d.ctx, &a, &v);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(a.cap.max_inline_data, 268u);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
    EXPECT_ERRNO_EQ(EINVAL, create_errno(attr(1, 269), &v));
    EXPECT_EQ(create_errno(attr(17, 0), &v), 0); /* 240 + 17*16 = 512 */
    EXPECT_ERRNO_EQ(EINVAL, create_errno(attr(18, 0), &v));
    /* explicit ops without LOCAL_INV/BIND_MW: ovh 48+48 */
    a = attr(1, 0);
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    qp = dcxemu_mlx5dv_create_qp(d.ctx, &a, &v);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(a.cap.max_inline_data, 128u - 96 - 4);
    ibv_qp_ex *qpx = dcxemu_ibv_qp_to_qp_ex(qp);
    ASSERT_NE(qpx, nullptr);
    mlx5dv_qp_ex *m = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
    ASSERT_NE(m, nullptr);
    EXPECT_NE(m->wr_set_dc_addr, nullptr);
    EXPECT_EQ(m->wr_mr_interleaved, nullptr); /* UMR builders are RC-only */
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
}

TEST_F(emu_qp, create_misuse)
{
    mlx5dv_qp_init_attr v = dv(MLX5DV_DCTYPE_DCI);
    ibv_qp_init_attr_ex a = attr();
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, nullptr));
    a.qp_type = IBV_QPT_RC;
    EXPECT_ERRNO_EQ(EINVAL,
                    create_errno(a, &v)); /* DC mask with another type */
    a                        = attr();
    mlx5dv_qp_init_attr nodc = v;
    nodc.comp_mask           = 0;
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &nodc)); /* DRIVER without DC */
    mlx5dv_qp_init_attr badtype = dv(7);
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &badtype));
    mlx5dv_qp_init_attr badmask = v;
    badmask.comp_mask |= 1u << 10;
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &badmask));
    a.cap.max_recv_wr = 1;
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &v)); /* a DCI has no RQ */
    a         = attr();
    a.send_cq = nullptr;
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &v));
    a                       = attr();
    mlx5dv_qp_init_attr umr = v;
    umr.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    umr.send_ops_flags = MLX5DV_QP_EX_WITH_MR_INTERLEAVED;
    EXPECT_ERRNO_EQ(EOPNOTSUPP, create_errno(a, &umr)); /* MR_* on a DCI */
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_TSO;
    EXPECT_ERRNO_EQ(EOPNOTSUPP, create_errno(a, &v));
    mlx5dv_qp_init_attr streams = v;
    streams.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
    streams.dc_init_attr.dci_streams.log_num_concurent = 6; /* past the caps */
    EXPECT_ERRNO_EQ(EINVAL, create_errno(attr(), &streams));
    /* DCT */
    mlx5dv_qp_init_attr t = dv(MLX5DV_DCTYPE_DCT);
    a                     = attr();
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &t)); /* no SRQ */
    a.srq = srq;
    EXPECT_EQ(create_errno(a, &t), 0);
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_SEND;
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &t));
    a                      = attr();
    a.srq                  = srq;
    mlx5dv_qp_init_attr tf = t;
    tf.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
    tf.create_flags = MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE;
    EXPECT_ERRNO_EQ(EINVAL, create_errno(a, &tf));
    tf.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
    EXPECT_EQ(create_errno(a, &tf), 0);
}

static int mod(ibv_qp *qp, int state, int mask)
{
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state         = (ibv_qp_state)state;
    a.port_num         = 1;
    a.path_mtu         = IBV_MTU_4096;
    a.ah_attr.port_num = 1;
    a.timeout          = 10;
    a.retry_cnt        = 3;
    a.rnr_retry        = 3;
    a.max_rd_atomic    = 4;
    a.min_rnr_timer    = 2;
    a.qp_access_flags  = IBV_ACCESS_REMOTE_WRITE;
    return dcxemu_ibv_modify_qp(qp, &a, mask | IBV_QP_STATE);
}

TEST_F(emu_qp, freed_qp_number_returns_with_new_gen)
{
    ibv_qp *qp = create_dci(d, 1, 1, 0);
    ASSERT_NE(qp, nullptr);
    uint32_t old = qp->qp_num;
    ASSERT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
    bool found = false;
    /* qpn = gen << 15 | slot: the slot comes round after at most 32768 creations */
    for (int i = 0; i < 40000 && !found; i++) {
        qp = create_dci(d, 1, 1, 0);
        ASSERT_NE(qp, nullptr);
        EXPECT_LT(qp->qp_num, 1u << 24);
        if ((qp->qp_num & 0x7fff) == (old & 0x7fff)) {
            found = true;
            EXPECT_NE(qp->qp_num, old);
        }
        ASSERT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
    }
    EXPECT_TRUE(found);
}

TEST_F(emu_qp, dci_modify_masks)
{
    ibv_qp *qp = create_dci(d);
    ASSERT_NE(qp, nullptr);
    uint32_t n     = qp->qp_num;
    const int init = IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    const int rts  = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN;
    EXPECT_ERRNO_EQ(EINVAL,
                    mod(qp, IBV_QPS_INIT,
                        init | IBV_QP_ACCESS_FLAGS)); /* not allowed on DCI */
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_INIT,
                                IBV_QP_PORT)); /* PKEY_INDEX missing */
    EXPECT_ERRNO_EQ(EINVAL,
                    mod(qp, IBV_QPS_RTR, IBV_QP_PATH_MTU)); /* RESET->RTR */
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_ERR, 0)); /* RESET->ERR */
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    ASSERT_EQ(mod(qp, IBV_QPS_INIT, init), 0);
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
    EXPECT_EQ(mod(qp, IBV_QPS_INIT, IBV_QP_PORT), 0); /* INIT->INIT */
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RTS, rts)); /* INIT->RTS */
    EXPECT_ERRNO_EQ(EINVAL,
                    mod(qp, IBV_QPS_RTR,
                        IBV_QP_PATH_MTU | IBV_QP_TIMEOUT)); /* extra bit */
    ASSERT_EQ(mod(qp, IBV_QPS_RTR, IBV_QP_PATH_MTU | IBV_QP_AV), 0);
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RTS, rts & ~IBV_QP_SQ_PSN));
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RTS, rts | IBV_QP_PATH_MTU));
    EXPECT_EQ(qp->state, IBV_QPS_RTR);
    ASSERT_EQ(mod(qp, IBV_QPS_RTS, rts | IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_EQ(mod(qp, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RTS, IBV_QP_TIMEOUT));
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout  = 32;
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu_ibv_modify_qp(qp, &a,
                                         IBV_QP_STATE | IBV_QP_TIMEOUT));
    ASSERT_EQ(mod(qp, IBV_QPS_ERR, 0), 0);
    ASSERT_EQ(mod(qp, IBV_QPS_RESET, 0), 0);
    ASSERT_EQ(mod(qp, IBV_QPS_INIT, init), 0);
    ASSERT_EQ(mod(qp, IBV_QPS_RESET, 0), 0); /* any -> RESET */
    EXPECT_EQ(qp->qp_num, n);
    ibv_qp_init_attr ia;
    ASSERT_EQ(dcxemu_ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(a.qp_state, IBV_QPS_RESET);
    EXPECT_EQ(ia.send_cq, d.cq);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
}

TEST_F(emu_qp, dct_modify_masks_and_number)
{
    ibv_qp *qp = create_dct(d, srq, 9);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->qp_num, 0u); /* no DCT number before RTR */
    EXPECT_EQ(dcxemu_ibv_qp_to_qp_ex(qp), nullptr);
    const int init = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    EXPECT_ERRNO_EQ(EINVAL,
                    mod(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT));
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_INIT, init | IBV_QP_PATH_MTU));
    ASSERT_EQ(mod(qp, IBV_QPS_INIT, init), 0);
    EXPECT_EQ(qp->qp_num, 0u);
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RTR, IBV_QP_AV | IBV_QP_PATH_MTU));
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RTR,
                                IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                                        IBV_QP_PATH_MTU | IBV_QP_PKEY_INDEX));
    ASSERT_EQ(mod(qp, IBV_QPS_RTR,
                  IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU),
              0);
    EXPECT_NE(qp->qp_num, 0u);
    EXPECT_EQ(mod(qp, IBV_QPS_RTS,
                  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN),
              EINVAL);
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_ERR, 0));
    EXPECT_ERRNO_EQ(EINVAL, mod(qp, IBV_QPS_RESET, 0));
    EXPECT_EQ(qp->state, IBV_QPS_RTR);
    /* posting to a DCT is invalid */
    ibv_send_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    EXPECT_ERRNO_EQ(EINVAL, ibv_post_send(qp, &wr, &bad));
    EXPECT_EQ(bad, &wr);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
}

/* ---------------------------------------------------------------- WR rules ---- */

struct emu_wr : public ::testing::Test {
    dev d;
    ibv_srq *srq = nullptr;
    ibv_qp *dct  = nullptr;
    dci c;
    std::vector<char> buf;
    ibv_mr *mr = nullptr;
    void SetUp() override
    {
        ASSERT_TRUE(d.open());
        srq = create_srq(d);
        dct = create_dct(d, srq, 3);
        ASSERT_EQ(dct_to_rtr(dct), 0);
        buf.assign(65536, 0);
        mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                               IBV_ACCESS_LOCAL_WRITE |
                                       IBV_ACCESS_REMOTE_WRITE);
        ASSERT_TRUE(make_dci(d, c, d.lid, 4));
    }
    void TearDown() override
    {
        destroy_dci(c);
        dcxemu_ibv_destroy_qp(dct);
        dcxemu_ibv_destroy_srq(srq);
        dcxemu_ibv_dereg_mr(mr);
        d.close();
    }
    void
    write(uint64_t id, unsigned flags = IBV_SEND_SIGNALED, size_t off = 32768)
    {
        c.qpx->wr_id    = id;
        c.qpx->wr_flags = flags;
        ibv_wr_rdma_write(c.qpx, mr->rkey, (uintptr_t)buf.data() + off);
        ibv_wr_set_sge(c.qpx, mr->lkey, (uintptr_t)buf.data(), 8);
        mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, 3);
    }
    /* Nothing posted before on c is still to complete: a signaled marker WR posted now is the
     * next CQE (per-QP order: anything earlier would complete first). */
    void marker_first(uint64_t id = 99)
    {
        ibv_wr_start(c.qpx);
        write(id);
        ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
        ibv_wc wc;
        ASSERT_TRUE(poll_one(d.cq, &wc));
        EXPECT_EQ(wc.wr_id, id);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
};

TEST_F(emu_wr, missing_setter_einval)
{
    ibv_wr_start(c.qpx);
    ibv_wr_rdma_write(c.qpx, mr->rkey, (uintptr_t)buf.data());
    ibv_wr_set_sge(c.qpx, mr->lkey, (uintptr_t)buf.data(), 8);
    EXPECT_ERRNO_EQ(EINVAL, ibv_wr_complete(c.qpx)); /* no dc address */
    ibv_wr_start(c.qpx);
    ibv_wr_rdma_write(c.qpx, mr->rkey, (uintptr_t)buf.data());
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, 3);
    ibv_wr_rdma_write(c.qpx, mr->rkey,
                      (uintptr_t)buf.data()); /* previous lacks data */
    ibv_wr_set_sge(c.qpx, mr->lkey, (uintptr_t)buf.data(), 8);
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, 3);
    EXPECT_ERRNO_EQ(EINVAL, ibv_wr_complete(c.qpx));
    marker_first();
}

TEST_F(emu_wr, duplicate_setter_einval)
{
    ibv_wr_start(c.qpx);
    write(1);
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, 3);
    EXPECT_ERRNO_EQ(EINVAL, ibv_wr_complete(c.qpx));
    marker_first();
}

TEST_F(emu_wr, batch_rollback_on_latched_error)
{
    buf[0] = 7;
    ibv_wr_start(c.qpx);
    write(1); /* valid */
    c.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(c.qpx, mr->rkey, (uintptr_t)buf.data());
    char big[4096] = {};
    ibv_wr_set_inline_data(c.qpx, big,
                           sizeof(big)); /* > max_inline_data: ENOMEM */
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, 3);
    EXPECT_ERRNO_EQ(ENOMEM, ibv_wr_complete(c.qpx));
    EXPECT_EQ(buf[32768], 0);
    /* the QP is still usable, and nothing of the batch ran: its CQE would precede 2's */
    ibv_wr_start(c.qpx);
    write(2);
    ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(buf[32768], 7);
}

TEST_F(emu_wr, abort_rolls_back)
{
    ibv_wr_start(c.qpx);
    write(1);
    ibv_wr_abort(c.qpx);
    marker_first();
}

TEST_F(emu_wr, sge_list_too_long_enomem)
{
    ibv_sge sg[40];
    for (auto &s : sg)
        s = { (uintptr_t)buf.data(), 1, mr->lkey };
    ibv_wr_start(c.qpx);
    ibv_wr_rdma_write(c.qpx, mr->rkey, (uintptr_t)buf.data());
    ibv_wr_set_sge_list(c.qpx, 40, sg);
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, 3);
    EXPECT_ERRNO_EQ(ENOMEM, ibv_wr_complete(c.qpx));
}

TEST_F(emu_wr, complete_before_rts_einval)
{
    ibv_qp *qp = create_dci(d);
    ASSERT_NE(qp, nullptr);
    dci x;
    x.qp  = qp;
    x.qpx = dcxemu_ibv_qp_to_qp_ex(qp);
    x.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(x.qpx);
    x.ah  = c.ah;
    EXPECT_EQ(post_one(x, OP_WRITE, mr->lkey, buf.data(), 8, mr->rkey,
                       (uintptr_t)buf.data(), dct->qp_num, 3),
              EINVAL); /* RESET */
    ASSERT_EQ(mod(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT), 0);
    EXPECT_EQ(post_one(x, OP_WRITE, mr->lkey, buf.data(), 8, mr->rkey,
                       (uintptr_t)buf.data(), dct->qp_num, 3),
              EINVAL); /* INIT */
    ASSERT_EQ(mod(qp, IBV_QPS_RTR, IBV_QP_PATH_MTU), 0);
    EXPECT_EQ(post_one(x, OP_WRITE, mr->lkey, buf.data(), 8, mr->rkey,
                       (uintptr_t)buf.data(), dct->qp_num, 3),
              EINVAL); /* RTR */
    /* none of them was queued: a marker posted in RTS is x's first CQE */
    ASSERT_EQ(mod(qp, IBV_QPS_RTS,
                  IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
    ASSERT_EQ(post_one(x, OP_WRITE, mr->lkey, buf.data(), 8, mr->rkey,
                       (uintptr_t)buf.data(), dct->qp_num, 3, 98),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 98u);
    EXPECT_EQ(wc.qp_num, qp->qp_num);
    x.ah = nullptr;
    destroy_dci(x);
}

TEST_F(emu_wr, sq_capacity_enomem)
{
    /* unsignaled WRs hold their slots until a later CQE of the SQ is polled */
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    ASSERT_EQ(dcxemu_ibv_query_qp(c.qp, &a, IBV_QP_CAP, &ia), 0);
    uint32_t cap = ia.cap.max_send_wr;
    ASSERT_GE(cap,
              4u); /* requested 4; written back as roundup_pow2(4*WQE)/WQE */
    for (uint32_t i = 0; i + 1 < cap; i++) {
        ibv_wr_start(c.qpx);
        write(i, 0);
        ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    }
    ibv_wr_start(c.qpx);
    write(100, IBV_SEND_SIGNALED);
    ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
    ibv_wr_start(c.qpx);
    write(101, 0);
    EXPECT_ERRNO_EQ(ENOMEM, ibv_wr_complete(c.qpx));
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc)); /* frees every slot up to WR 100 */
    EXPECT_EQ(wc.wr_id, 100u);
    ibv_wr_start(c.qpx);
    write(102, IBV_SEND_SIGNALED);
    EXPECT_EQ(ibv_wr_complete(c.qpx), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
}

TEST_F(emu_wr, legacy_post_send_on_dci_einval)
{
    ibv_sge s = { (uintptr_t)buf.data(), 8, mr->lkey };
    ibv_send_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.opcode  = IBV_WR_RDMA_WRITE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    EXPECT_ERRNO_EQ(EINVAL, ibv_post_send(c.qp, &wr, &bad));
    EXPECT_EQ(bad, &wr);
}

/* Random builder/setter sequences, valid or not: every batch ends with 0 or an errno, never a
 * crash or a hang, and every accepted WR completes (all signaled) with some status. */
TEST_F(emu_wr, random_sequences_never_crash)
{
    unsigned seed = 12345;
    char data[600];
    memset(data, 1, sizeof(data));
    ibv_sge sg[3]      = { { (uintptr_t)buf.data(), 8, mr->lkey },
                           { (uintptr_t)buf.data() + 8, 0, mr->lkey },
                           { (uintptr_t)buf.data() + 16, 8, mr->lkey ^ 0x100 } };
    ibv_data_buf db[2] = { { data, 4 }, { data, 500 } };
    ibv_qp_attr z;
    memset(&z, 0, sizeof(z));
    z.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(dcxemu_ibv_modify_qp(c.qp, &z, IBV_QP_STATE), 0);
    ASSERT_EQ(dci_to_rts(c.qp, 10, 0, 0),
              0); /* no retries: every WR ends promptly */
    int accepted_batches = 0;
    for (int batch = 0; batch < 1500; batch++) {
        ibv_wr_start(c.qpx);
        int n = 1 + rand_r(&seed) % 4, wrs = 0;
        auto data_setter = [&] {
            switch (rand_r(&seed) % 4) {
            case 0:
                ibv_wr_set_sge(c.qpx, mr->lkey, (uintptr_t)buf.data(),
                               rand_r(&seed) % 16);
                break;
            case 1:
                ibv_wr_set_sge_list(c.qpx, rand_r(&seed) % 4, sg);
                break;
            case 2:
                ibv_wr_set_inline_data(c.qpx, data, rand_r(&seed) % 600);
                break;
            case 3:
                ibv_wr_set_inline_data_list(c.qpx, 1 + rand_r(&seed) % 2, db);
                break;
            }
        };
        auto addr_setter = [&] {
            mlx5dv_wr_set_dc_addr(c.dv, c.ah,
                                  rand_r(&seed) % 8 ? dct->qp_num : 5, 3);
        };
        for (int i = 0; i < n; i++) {
            c.qpx->wr_id    = (uint64_t)batch;
            c.qpx->wr_flags = IBV_SEND_SIGNALED;
            uint64_t ra     = (uintptr_t)buf.data() + 32768 +
                          (rand_r(&seed) % 4) * 4;
            uint32_t rk = rand_r(&seed) % 5 ? mr->rkey : 0x77700;
            wrs++;
            switch (rand_r(&seed) % 6) {
            case 0:
                ibv_wr_rdma_write(c.qpx, rk, ra);
                break;
            case 1:
                ibv_wr_rdma_read(c.qpx, rk, ra);
                break;
            case 2:
                ibv_wr_send(c.qpx);
                break;
            case 3:
                ibv_wr_atomic_fetch_add(c.qpx, rk, ra, 1);
                break;
            case 4:
                ibv_wr_atomic_cmp_swp(c.qpx, rk, ra, 0, 1);
                break;
            case 5:
                ibv_wr_rdma_write_imm(c.qpx, rk, ra, 7);
                break;
            }
            switch (rand_r(&seed) % 8) {
            case 0:
                data_setter();
                break; /* address missing */
            case 1:
                addr_setter();
                data_setter();
                data_setter();
                break; /* duplicate */
            case 2:
            case 3:
            case 4:
                addr_setter();
                data_setter();
                break;
            default:
                data_setter();
                addr_setter();
                break;
            }
        }
        int r = rand_r(&seed) % 10 ? ibv_wr_complete(c.qpx) :
                                     (ibv_wr_abort(c.qpx), -1);
        ASSERT_TRUE(r == -1 || r == 0 || r == EINVAL || r == ENOMEM) << r;
        /* every WR of an accepted batch completes (success or an error/flush status) */
        for (int k = 0; r == 0 && k < wrs; k++) {
            ibv_wc wc;
            ASSERT_TRUE(poll_one(d.cq, &wc, 5000)) << "batch " << batch;
            EXPECT_EQ(wc.wr_id, (uint64_t)batch);
        }
        accepted_batches += r == 0;
        EXPECT_TRUE(cq_empty_now(
                d.cq)); /* every WR accepted so far is accounted for */
        ibv_qp_attr a;
        ibv_qp_init_attr ia;
        ASSERT_EQ(dcxemu_ibv_query_qp(c.qp, &a, IBV_QP_STATE, &ia), 0);
        if (a.qp_state == IBV_QPS_ERR || rand_r(&seed) % 50 == 0) {
            ASSERT_EQ(dcxemu_ibv_modify_qp(c.qp, &z, IBV_QP_STATE), 0);
            ASSERT_EQ(dci_to_rts(c.qp, 10, 0, 0), 0);
        }
    }
    EXPECT_GT(accepted_batches, 50);
}

TEST_F(emu_wr, unmodelled_builders_eopnotsupp)
{
    ibv_wr_start(c.qpx);
    ibv_wr_local_inv(c.qpx, mr->rkey);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, ibv_wr_complete(c.qpx));
}

/* ---------------------------------------------------------------- fork ---- */

TEST(emu_fabric, forked_child_fails_cleanly)
{
    dev d;
    ASSERT_TRUE(d.open());
    pid_t pid = fork();
    if (pid == 0) {
        int ok = 1;
        int n;
        errno = 0;
        ok &= dcxemu_ibv_get_device_list(&n) == nullptr && errno == EPERM;
        errno = 0;
        ok &= dcxemu_ibv_alloc_pd(d.ctx) == nullptr && errno == EPERM;
        ibv_wc wc;
        ok &= ibv_poll_cq(d.cq, 1, &wc) < 0;
        ok &= dcxemu_ibv_dealloc_pd(d.pd) == EPERM;
        _exit(ok ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    int st = wait_child(pid, 10000);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
    /* the parent is unaffected */
    ibv_pd *pd = dcxemu_ibv_alloc_pd(d.ctx);
    ASSERT_NE(pd, nullptr);
    EXPECT_EQ(dcxemu_ibv_dealloc_pd(pd), 0);
    d.close();
}

TEST(emu_fabric, malformed_input_errno)
{
    EXPECT_STREQ(dcxemu_ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR),
                 "transport retry counter exceeded");
    EXPECT_STREQ(dcxemu_ibv_wc_status_str((ibv_wc_status)1000), "unknown");
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_modify_qp(nullptr, nullptr, 0));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_query_device(nullptr, nullptr));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_dealloc_pd(nullptr));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_dereg_mr(nullptr));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_destroy_cq(nullptr));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_destroy_qp(nullptr));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_ibv_query_srq(nullptr, nullptr));
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(nullptr, nullptr, 8, 0), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_mlx5dv_create_qp(nullptr, nullptr, nullptr), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_get_device_name(nullptr), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    EXPECT_EQ(dcxemu_ibv_qp_to_qp_ex(nullptr), nullptr);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_create_srq(nullptr, nullptr), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
}

} // namespace

/* Failures that read (../common/test_print.h): a work completion status, a
 * QP state and an errno print by name in a failing check, not as a bare
 * number. Checked through googletest's own printer and a failing EXPECT_EQ
 * caught as a non-fatal failure, so a printer that is not picked up (declared
 * in the wrong namespace, or after the checks) fails here. */
TEST(emu_print, names_in_failures)
{
    EXPECT_EQ(::testing::PrintToString(IBV_WC_REM_ACCESS_ERR),
              "IBV_WC_REM_ACCESS_ERR (10)");
    EXPECT_EQ(::testing::PrintToString(IBV_WC_SUCCESS), "IBV_WC_SUCCESS (0)");
    /* unnamed, yet within the enum's range (UBSan checks the load) */
    EXPECT_EQ(::testing::PrintToString((ibv_wc_status)30), "ibv_wc_status 30");
    EXPECT_EQ(::testing::PrintToString(IBV_QPS_ERR), "IBV_QPS_ERR (6)");
    std::vector<ibv_wc_status> sts = { IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR };
    EXPECT_EQ(::testing::PrintToString(sts),
              "{ IBV_WC_SUCCESS (0), IBV_WC_WR_FLUSH_ERR (5) }");
    EXPECT_EQ(dcx_test::errno_string(EINVAL), "EINVAL (22)");
    EXPECT_EQ(dcx_test::errno_string(0), "0 (no error)");
    EXPECT_NONFATAL_FAILURE(EXPECT_EQ(IBV_WC_SUCCESS, IBV_WC_RETRY_EXC_ERR),
                            "Which is: IBV_WC_RETRY_EXC_ERR (12)");
    EXPECT_NONFATAL_FAILURE(EXPECT_EQ(IBV_QPS_RTS, IBV_QPS_ERR),
                            "Which is: IBV_QPS_ERR (6)");
    EXPECT_NONFATAL_FAILURE(EXPECT_ERRNO_EQ(EINVAL, ENOMEM),
                            "Which is: ENOMEM (12)");
    EXPECT_NONFATAL_FAILURE(EXPECT_ERRNO_EQ(0, EOPNOTSUPP),
                            "Which is: EOPNOTSUPP (95)");
    /* the expressions as written, not their macro expansions */
    EXPECT_NONFATAL_FAILURE(
            EXPECT_ERRNO_EQ(EINVAL, errno = EAGAIN),
            "  EINVAL\n    Which is: EINVAL (22)\n  errno = EAGAIN\n");
    EXPECT_ERRNO_EQ(EBUSY, EBUSY);
}
