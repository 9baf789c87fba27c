/* The control path through rdma-core: what libibverbs and libmlx5 learn of
 * the device, the objects dcx makes, the orders the kernel lets them go in,
 * and the errno of every refusal (the kernel's or libmlx5's own). */
#include "mlx5face_test.h"

#include <stdlib.h>
#include <string.h>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <errno.h>

using namespace mlx5face;

namespace {

struct mlx5face_control : public ::testing::Test {
    device d;

    void SetUp() override
    {
        ASSERT_TRUE(d.open(face_verbs()));
    }
    void TearDown() override
    {
        d.close();
    }
};

uint32_t live_qps()
{
    dcxemu_objects o;

    EXPECT_EQ(0, dcxemu_objects_read(&o));
    return o.qps + o.dcts;
}

} // namespace

TEST_F(mlx5face_control, device_and_port)
{
    dcxemu_port_desc desc;
    int n             = 0;
    bool found        = false;
    ibv_device **list = ibv_get_device_list(&n);

    ASSERT_NE(nullptr, list);
    for (int i = 0; i < n; i++) {
        found = found ||
                (std::string(ibv_get_device_name(list[i])) == "dcxemu_mlx5_0");
        EXPECT_TRUE(mlx5dv_is_supported(list[i])); /* libmlx5 drives it */
    }
    ibv_free_device_list(list);
    EXPECT_TRUE(found);
    EXPECT_STREQ("dcxemu_mlx5_0", ibv_get_device_name(d.ctx->device));
    ASSERT_EQ(0, dcxemu_port_describe(0, &desc));

    ibv_device_attr da;
    ASSERT_EQ(0, ibv_query_device(d.ctx, &da));
    EXPECT_EQ(0x02c9u, da.vendor_id);
    EXPECT_EQ(1, da.phys_port_cnt);
    EXPECT_EQ(htobe64(desc.node_guid), da.node_guid);
    EXPECT_GT(da.max_qp_wr, 0);
    EXPECT_GT(da.max_cqe, 0);
    EXPECT_NE(IBV_ATOMIC_NONE, da.atomic_cap);

    ibv_device_attr_ex dx;
    memset(&dx, 0, sizeof(dx));
    ASSERT_EQ(0, ibv_query_device_ex(d.ctx, nullptr, &dx));
    EXPECT_EQ(da.max_qp, dx.orig_attr.max_qp);
    EXPECT_EQ(da.max_cqe, dx.orig_attr.max_cqe);
    EXPECT_EQ(da.node_guid, dx.orig_attr.node_guid);

    ibv_port_attr pa;
    ASSERT_EQ(0, ibv_query_port(d.ctx, 1, &pa));
    EXPECT_EQ(IBV_PORT_ACTIVE, pa.state);
    EXPECT_EQ(desc.lid, pa.lid);
    EXPECT_EQ(1, pa.lid); /* device 0 */
    EXPECT_EQ(IBV_LINK_LAYER_INFINIBAND, pa.link_layer);
    EXPECT_EQ(IBV_MTU_4096, pa.active_mtu);

    union ibv_gid gid;
    ASSERT_EQ(0, ibv_query_gid(d.ctx, 1, 0, &gid));
    EXPECT_EQ(0, memcmp(&gid, &desc.gid[0], sizeof(gid)));
    /* the model's port settings, as the kernel side reports them: the
     * whole P_Key table (sysfs), the port flags (QUERY_PORT) */
    __be16 pkey = 0;
    for (uint32_t i = 0; i < desc.pkey_tbl_len; i++) {
        ASSERT_EQ(0, ibv_query_pkey(d.ctx, 1, (int)i, &pkey)) << i;
        EXPECT_EQ(htobe16(desc.pkey[i]), pkey) << "P_Key index " << i;
    }
    EXPECT_EQ(desc.port_flags, pa.flags);

    mlx5dv_context mc;
    memset(&mc, 0, sizeof(mc));
    ASSERT_EQ(0, mlx5dv_query_device(d.ctx, &mc));
    EXPECT_TRUE(mc.flags & MLX5DV_CONTEXT_FLAGS_CQE_V1);

    /* out of range: the kernel's EINVAL; sysfs has no such GID / P_Key */
    EXPECT_ERRNO_EQ(EINVAL, ibv_query_port(d.ctx, 2, &pa));
    EXPECT_NE(0, ibv_query_gid(d.ctx, 1, (int)desc.gid_tbl_len, &gid));
    EXPECT_NE(0, ibv_query_pkey(d.ctx, 1, (int)desc.pkey_tbl_len, &pkey));
}

/* Every object dcx makes, through the commands libmlx5 sends; the DCI's
 * doorbell is one store (no BlueFlame). */
TEST_F(mlx5face_control, objects_and_states)
{
    uint32_t qps0 = live_qps();
    memory m;
    ASSERT_TRUE(m.reg(d, 4096));
    EXPECT_NE(0u, m.mr->lkey);
    EXPECT_EQ(m.ptr(), m.mr->addr);

    ibv_cq *cq = ibv_create_cq(d.ctx, 100, this, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    EXPECT_GE(cq->cqe, 100);
    EXPECT_EQ(this, cq->cq_context);
    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe         = 16;
    ca.wc_flags    = IBV_WC_EX_WITH_BYTE_LEN;
    ibv_cq_ex *cqx = ibv_create_cq_ex(d.ctx, &ca);
    ASSERT_NE(nullptr, cqx);

    ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 32;
    sa.attr.max_sge = 1;
    ibv_srq *srq    = ibv_create_srq(d.pd, &sa);
    ASSERT_NE(nullptr, srq);
    ibv_srq_attr sq;
    ASSERT_EQ(0, ibv_query_srq(srq, &sq));
    EXPECT_GE(sq.max_wr, 32u);
    ibv_srq_attr sm;
    memset(&sm, 0, sizeof(sm));
    sm.srq_limit = 4;
    EXPECT_EQ(0, ibv_modify_srq(srq, &sm, IBV_SRQ_LIMIT));
    ASSERT_EQ(0, ibv_query_srq(srq, &sq));
    EXPECT_EQ(4u, sq.srq_limit);
    sm.max_wr = 64; /* mlx5 SRQs do not resize */
    EXPECT_ERRNO_EQ(EINVAL, ibv_modify_srq(srq, &sm, IBV_SRQ_MAX_WR));

    ibv_qp *dci = create_dci(d, cq, 32, true);
    ASSERT_NE(nullptr, dci);
    ibv_qp *dct = create_dct(d, ibv_cq_ex_to_cq(cqx), srq, DC_KEY);
    ASSERT_NE(nullptr, dct);
    EXPECT_EQ(qps0 + 2, live_qps());
    ASSERT_EQ(0, dci_to_rts(d, dci, 12, 5));
    ASSERT_EQ(0, dct_to_rtr(d, dct));
    EXPECT_NE(0u, dct->qp_num); /* the DCT number, known from RTR on */

    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(0, ibv_query_qp(dci, &qa,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT,
                              &qi));
    EXPECT_EQ(IBV_QPS_RTS, qa.qp_state);
    EXPECT_EQ(12, qa.timeout);
    EXPECT_EQ(5, qa.retry_cnt);
    ASSERT_EQ(0, ibv_query_qp(dct, &qa, IBV_QP_STATE, &qi));
    EXPECT_EQ(IBV_QPS_RTR, qa.qp_state);

    sq_view v;
    ASSERT_TRUE(v.init(dci));
    /* BlueFlame halves only where the face offers them (DCXEMU_MLX5_BF) */
    const char *bf = getenv("DCXEMU_MLX5_BF");
    EXPECT_EQ((bf == nullptr || !strcmp(bf, "0")) ? 0u :
              !strcmp(bf, "1")                    ? 256u :
                                                    strtoul(bf, nullptr, 0) / 2,
              v.dv.bf.size);
    EXPECT_NE(nullptr, v.dv.bf.reg);
    EXPECT_EQ(64u, v.dv.sq.stride);
    EXPECT_GE(v.dv.sq.wqe_cnt, 32u);

    /* what the kernel refuses while something uses it */
    EXPECT_ERRNO_EQ(EBUSY, ibv_destroy_cq(cq));
    EXPECT_ERRNO_EQ(EBUSY, ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
    EXPECT_ERRNO_EQ(EBUSY, ibv_destroy_srq(srq));
    EXPECT_ERRNO_EQ(EBUSY, ibv_dealloc_pd(d.pd));

    /* a state transition the QP does not have */
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTR;
    EXPECT_ERRNO_EQ(EINVAL, ibv_modify_qp(dci, &qa, IBV_QP_STATE));
    /* back to RESET and up again */
    qa.qp_state = IBV_QPS_RESET;
    EXPECT_EQ(0, ibv_modify_qp(dci, &qa, IBV_QP_STATE));
    ASSERT_EQ(0, ibv_query_qp(dci, &qa, IBV_QP_STATE, &qi));
    EXPECT_EQ(IBV_QPS_RESET, qa.qp_state);
    EXPECT_EQ(0, dci_to_rts(d, dci));

    /* MR first, then the QPs, then what they used */
    m.dereg();
    EXPECT_EQ(0, ibv_destroy_qp(dci));
    EXPECT_ERRNO_EQ(EBUSY, ibv_destroy_srq(srq)); /* the DCT still uses it */
    EXPECT_EQ(0, ibv_destroy_qp(dct));
    EXPECT_EQ(qps0, live_qps());
    EXPECT_EQ(0, ibv_destroy_srq(srq));
    EXPECT_EQ(0, ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
    EXPECT_EQ(0, ibv_destroy_cq(cq));
}

TEST_F(mlx5face_control, completion_channel_busy)
{
    ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
    ASSERT_NE(nullptr, ch);
    ibv_cq *cq = ibv_create_cq(d.ctx, 8, nullptr, ch, 0);
    ASSERT_NE(nullptr, cq);
    EXPECT_ERRNO_EQ(EBUSY, ibv_destroy_comp_channel(ch));
    EXPECT_EQ(0, ibv_destroy_cq(cq));
    EXPECT_EQ(0, ibv_destroy_comp_channel(ch));
}

/* As many completion channels as a process has interfaces (UCX's own gtest
 * opens 257, each with its channel): the kernel sets no limit of its own. */
TEST_F(mlx5face_control, many_completion_channels)
{
    std::vector<ibv_comp_channel *> chs;
    for (int i = 0; i < 300; ++i) {
        ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
        ASSERT_NE(nullptr, ch) << "channel " << i << ": " << strerror(errno);
        chs.push_back(ch);
    }
    ibv_cq *cq = ibv_create_cq(d.ctx, 8, nullptr, chs.back(), 0);
    ASSERT_NE(nullptr, cq);
    EXPECT_EQ(0, ibv_destroy_cq(cq));
    for (ibv_comp_channel *ch : chs) {
        EXPECT_EQ(0, ibv_destroy_comp_channel(ch));
    }
}

/* Refusals: the errno the kernel (or libmlx5 before it) gives, and the
 * process goes on. */
TEST_F(mlx5face_control, invalid_arguments)
{
    ibv_device_attr da;
    ASSERT_EQ(0, ibv_query_device(d.ctx, &da));

    errno = 0;
    EXPECT_EQ(nullptr,
              ibv_create_cq(d.ctx, da.max_cqe + 1, nullptr, nullptr, 0));
    EXPECT_ERRNO_EQ(EINVAL, errno);

    ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof(ca));
    ca.cqe      = 8;
    ca.wc_flags = 1ull << 40; /* no such field */
    errno       = 0;
    EXPECT_EQ(nullptr, ibv_create_cq_ex(d.ctx, &ca));
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);

    /* remote write without local write (ib_check_mr_access) */
    std::vector<char> buf(4096);
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                  IBV_ACCESS_REMOTE_WRITE));
    EXPECT_ERRNO_EQ(EINVAL, errno);

    ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = (uint32_t)da.max_srq_wr + 1;
    sa.attr.max_sge = 1;
    errno           = 0;
    EXPECT_EQ(nullptr, ibv_create_srq(d.pd, &sa));
    EXPECT_ERRNO_EQ(EINVAL, errno);

    ibv_cq *cq = ibv_create_cq(d.ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    errno = 0;
    EXPECT_EQ(nullptr, create_dci(d, cq, (uint32_t)da.max_qp_wr + 1, false));
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(nullptr, create_dct(d, cq, nullptr, DC_KEY)); /* no SRQ */
    EXPECT_ERRNO_EQ(EINVAL, errno);
    EXPECT_EQ(0, ibv_destroy_cq(cq));

    /* and the device still works */
    ibv_pd *pd = ibv_alloc_pd(d.ctx);
    ASSERT_NE(nullptr, pd);
    EXPECT_EQ(0, ibv_dealloc_pd(pd));
}

/* Closing the device releases what is left, as the kernel does on the last
 * close of the file: the model's QPs go. */
TEST_F(mlx5face_control, close_releases_objects)
{
    uint32_t qps0 = live_qps();
    device d2;
    ASSERT_TRUE(d2.open(face_verbs()));
    memory m;
    ASSERT_TRUE(m.reg(d2, 4096));
    ibv_cq *cq = ibv_create_cq(d2.ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    ibv_qp *dci = create_dci(d2, cq, 16, false);
    ASSERT_NE(nullptr, dci);
    EXPECT_EQ(qps0 + 1, live_qps());
    EXPECT_EQ(0, ibv_close_device(d2.ctx));
    EXPECT_EQ(qps0, live_qps());
    /* rdma-core's objects of the closed context leak, as they do on Linux */
}

/* A duplicate of the device's descriptor is the same open file: commands
 * work through it after the original is closed, and the file lives until
 * its last descriptor goes. */
TEST_F(mlx5face_control, descriptor_duplicates)
{
    uint32_t qps0 = live_qps();
    device d2;
    ASSERT_TRUE(d2.open(face_verbs()));
    int dup_fd = dup(d2.ctx->cmd_fd);
    int hi_fd  = fcntl(d2.ctx->cmd_fd, F_DUPFD_CLOEXEC, 100);
    ASSERT_GE(dup_fd, 0);
    ASSERT_GE(hi_fd, 100);
    ASSERT_EQ(0, close(d2.ctx->cmd_fd));
    d2.ctx->cmd_fd = dup_fd;
    ibv_cq *cq     = ibv_create_cq(d2.ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    ibv_qp *dci = create_dci(d2, cq, 16, false);
    ASSERT_NE(nullptr, dci);
    EXPECT_EQ(qps0 + 1, live_qps());
    EXPECT_EQ(0, close(hi_fd));
    EXPECT_EQ(qps0 + 1, live_qps()); /* still open through dup_fd */
    EXPECT_EQ(0, ibv_close_device(d2.ctx));
    EXPECT_EQ(qps0, live_qps());
}

/* Orders the kernel allows with work in flight: a PD that cannot go yet
 * keeps serving its QPs; a QP destroyed with CQEs unpolled takes them with
 * it (libmlx5 cleans its CQ); a DCT destroyed with receives posted, then its
 * SRQ. */
TEST_F(mlx5face_control, teardown_with_work_in_flight)
{
    target t;
    ASSERT_TRUE(t.create(d));
    initiator i;
    ASSERT_TRUE(i.create(d, d.lid));
    i.dctn = t.dctn();
    completion c;

    ASSERT_EQ(0, i.write(1, 0, 64, t.mem.mr->rkey, t.mem.addr()));
    ASSERT_TRUE(poll_legacy(i.cq, &c));
    EXPECT_ERRNO_EQ(EBUSY, ibv_dealloc_pd(d.pd));
    ASSERT_EQ(0, i.write(2, 0, 64, t.mem.mr->rkey, t.mem.addr()));
    ASSERT_TRUE(poll_legacy(i.cq, &c));
    EXPECT_EQ(IBV_WC_SUCCESS, c.status);
    EXPECT_EQ(2u, c.wr_id);

    counters c0;
    for (uint64_t id = 3; id < 7; id++) {
        ASSERT_EQ(0, i.write(id, 0, 64, t.mem.mr->rkey, t.mem.addr()));
    }
    EXPECT_TRUE(dcx_test::poll_until(
            [&] { return (counters() - c0).c.send_cqes == 4; }, [] {}, 10.0));
    EXPECT_EQ(0, ibv_destroy_ah(i.ah));
    EXPECT_EQ(0, ibv_destroy_qp(i.qp));
    i.ah = nullptr;
    i.qp = nullptr;
    EXPECT_TRUE(cq_empty(i.cq));
    i.destroy();

    for (int k = 0; k < 4; k++) {
        ASSERT_EQ(0, t.post_recv(k, 1024 * k, 1024));
    }
    EXPECT_EQ(0, ibv_destroy_qp(t.dct));
    t.dct = nullptr;
    EXPECT_EQ(0, ibv_destroy_srq(t.srq));
    t.srq = nullptr;
    t.destroy();
}
