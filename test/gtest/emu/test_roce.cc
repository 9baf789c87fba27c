/* The RoCE port mode (DCXEMU_LINK_LAYER=ethernet): Ethernet link layer without LIDs, a GID
 * table with RoCE v1/v2 and IPv4-mapped entries read with ibv_query_gid_ex, address handles
 * and QP address vectors that must carry a GRH, and delivery by destination GID with matching
 * GID types and hop limits (DCXEMU_ROCE_ROUTERS).  Settings are read once per process, so each
 * check runs in a child process started with the mode's environment; a child exits 0 when all
 * its checks hold, else with the number of the first that failed. */
#include "emu_test.h"

#include <infiniband/verbs.h>

using namespace emu;

namespace {

const std::vector<std::string> roce_env = { "DCXEMU_LINK_LAYER=ethernet" };

int run_roce(const std::vector<std::string> &args,
             const std::vector<std::string> &env)
{
    std::string f = fresh_fabric();
    pid_t p       = spawn(f, args, env);
    int st        = wait_child(p, 30000);
    return WIFEXITED(st) ? WEXITSTATUS(st) :
                           1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

union ibv_gid mapped_v4(uint8_t last)
{
    union ibv_gid g;
    memset(&g, 0, sizeof(g));
    g.raw[10] = g.raw[11] = 0xff;
    g.raw[12]             = 198;
    g.raw[13]             = 51;
    g.raw[14]             = 100;
    g.raw[15]             = last;
    return g;
}

ibv_ah *roce_ah(dev &d, const union ibv_gid &dgid, uint8_t sgid_index,
                uint8_t hop_limit)
{
    ibv_ah_attr a;
    memset(&a, 0, sizeof(a));
    a.port_num          = 1;
    a.is_global         = 1;
    a.grh.dgid          = dgid;
    a.grh.sgid_index    = sgid_index;
    a.grh.hop_limit     = hop_limit;
    a.grh.traffic_class = 106;
    return dcxemu_ibv_create_ah(d.pd, &a);
}

/* RESET -> RTS with a global AV, as a RoCE DCI needs; a short retry budget */
int roce_dci_to_rts(ibv_qp *qp, uint8_t sgid_index, bool global = true)
{
    ibv_qp_attr a;
    int r;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RESET;
    if ((r = dcxemu_ibv_modify_qp(qp, &a, IBV_QP_STATE)))
        return r;
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    if ((r = dcxemu_ibv_modify_qp(
                 qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state               = IBV_QPS_RTR;
    a.path_mtu               = IBV_MTU_4096;
    a.ah_attr.port_num       = 1;
    a.ah_attr.is_global      = global;
    a.ah_attr.grh.sgid_index = sgid_index;
    a.ah_attr.grh.hop_limit  = 64;
    if ((r = dcxemu_ibv_modify_qp(qp, &a,
                                  IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = 1;
    a.retry_cnt     = 1;
    a.rnr_retry     = 7;
    a.max_rd_atomic = 16;
    return dcxemu_ibv_modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_TIMEOUT |
                                        IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                        IBV_QP_MAX_QP_RD_ATOMIC |
                                        IBV_QP_SQ_PSN);
}

/* DCT RESET -> RTR with a RoCE address: GRH source GID index, hop limit */
int roce_dct_to_rtr(ibv_qp *qp, bool global, uint8_t sgid_index,
                    uint8_t hop_limit)
{
    ibv_qp_attr a;
    int r;
    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.port_num        = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if ((r = dcxemu_ibv_modify_qp(qp, &a,
                                  IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                          IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state                  = IBV_QPS_RTR;
    a.path_mtu                  = IBV_MTU_4096;
    a.min_rnr_timer             = 1;
    a.ah_attr.port_num          = 1;
    a.ah_attr.is_global         = global;
    a.ah_attr.grh.sgid_index    = sgid_index;
    a.ah_attr.grh.hop_limit     = hop_limit;
    a.ah_attr.grh.traffic_class = 106;
    return dcxemu_ibv_modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER |
                                        IBV_QP_AV | IBV_QP_PATH_MTU);
}

/* One RDMA write through `ah` to the DCT; the completion status (or -1 if none came). */
int write_status(dev &d, dci &c, ibv_ah *ah, ibv_mr *mr, char *buf,
                 uint32_t dctn, uint8_t sgid_index)
{
    ibv_wc wc;
    if (roce_dci_to_rts(c.qp, sgid_index) != 0)
        return -2;
    c.ah = ah;
    if (post_one(c, OP_WRITE, mr->lkey, buf, 64, mr->rkey,
                 (uintptr_t)(buf + 4096), dctn, 77) != 0)
        return -3;
    c.ah = nullptr;
    if (!poll_one(d.cq, &wc, 10000))
        return -1;
    return wc.status;
}

} // namespace

/* roce_port: link layer, LID and the GID table through ibv_query_gid_ex / ibv_query_gid */
EMU_CHILD(roce_port)
{
    dev d;
    if (!d.open())
        return 2;
    ibv_port_attr pa;
    if (dcxemu_ibv_query_port(d.ctx, 1, &pa) != 0)
        return 3;
    if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
        d.close(); /* the IB default stops here (no leak: LeakSanitizer watches children) */
        return 4;
    }
    if (pa.lid != 0 || pa.sm_lid != 0 || pa.gid_tbl_len < 4)
        return 5;
    static const uint32_t types[4] = { IBV_GID_TYPE_ROCE_V1,
                                       IBV_GID_TYPE_ROCE_V2,
                                       IBV_GID_TYPE_ROCE_V1,
                                       IBV_GID_TYPE_ROCE_V2 };
    for (uint32_t i = 0; i < 4; i++) {
        ibv_gid_entry e;
        union ibv_gid g;
        memset(&e, 0xa5, sizeof(e));
        if (dcxemu__ibv_query_gid_ex(d.ctx, 1, i, &e, 0, sizeof(e)) != 0)
            return 10 + (int)i;
        if (e.gid_type != types[i] || e.gid_index != i || e.port_num != 1 ||
            e.ndev_ifindex != 0)
            return 20 + (int)i;
        if (dcxemu_ibv_query_gid(d.ctx, 1, (int)i, &g) != 0 ||
            memcmp(&g, &e.gid, sizeof(g)))
            return 30 + (int)i;
        if (i < 2 &&
            be64toh(e.gid.global.subnet_prefix) != 0xfe80000000000000ull)
            return 40;
        union ibv_gid v4 = mapped_v4(1);
        if (i >= 2 && memcmp(&e.gid, &v4, sizeof(v4)) != 0)
            return 41;
    }
    ibv_gid_entry e;
    if (dcxemu__ibv_query_gid_ex(d.ctx, 1, 4, &e, 0, sizeof(e)) != ENODATA)
        return 50;
    if (dcxemu__ibv_query_gid_ex(d.ctx, 1, pa.gid_tbl_len, &e, 0, sizeof(e)) !=
        EINVAL)
        return 51;
    if (dcxemu__ibv_query_gid_ex(d.ctx, 1, 3, &e, 1, sizeof(e)) != EINVAL)
        return 52;
    if (dcxemu__ibv_query_gid_ex(d.ctx, 2, 3, &e, 0, sizeof(e)) != EINVAL)
        return 53;
    union ibv_gid g;
    if (dcxemu_ibv_query_gid(d.ctx, 1, 4, &g) != 0 ||
        g.global.interface_id != 0)
        return 54;
    /* the second device has its own addresses */
    dev d1;
    if (!d1.open(1))
        return 60;
    if (dcxemu__ibv_query_gid_ex(d1.ctx, 1, 3, &e, 0, sizeof(e)) != 0)
        return 61;
    union ibv_gid v4 = mapped_v4(2);
    if (memcmp(&e.gid, &v4, sizeof(v4)) != 0)
        return 62;
    d1.close();
    d.close();
    return 0;
}

/* roce_grh: address handles and QP address vectors must carry a GRH with a source GID from the
 * table (mlx5_create_ah; the kernel's rdma_check_ah_attr for modify_qp) */
EMU_CHILD(roce_grh)
{
    dev d;
    if (!d.open())
        return 2;
    ibv_ah_attr a;
    memset(&a, 0, sizeof(a));
    a.port_num = 1;
    a.dlid     = 1;
    errno      = 0;
    ibv_ah *ah = dcxemu_ibv_create_ah(d.pd, &a);
    if (ah != nullptr) {
        dcxemu_ibv_destroy_ah(ah);
        d.close();
        return 3; /* the IB default stops here: a LID-routed AH is fine there */
    }
    if (errno != EINVAL)
        return 4;
    errno = 0;
    if (roce_ah(d, mapped_v4(1), 4, 64) != nullptr || errno != EINVAL)
        return 5; /* empty */
    errno = 0;
    if (roce_ah(d, mapped_v4(1), 200, 64) != nullptr || errno != EINVAL)
        return 6; /* beyond */
    ah = roce_ah(d, mapped_v4(1), 3, 64);
    if (ah == nullptr)
        return 7;
    dcxemu_ibv_destroy_ah(ah);

    ibv_qp *qp = create_dci(d);
    if (qp == nullptr)
        return 10;
    if (roce_dci_to_rts(qp, 3, false) != EINVAL)
        return 11; /* AV without GRH */
    if (roce_dci_to_rts(qp, 9) != EINVAL)
        return 12; /* empty source GID */
    if (roce_dci_to_rts(qp, 3) != 0)
        return 13;

    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = create_dct(d, srq, 77);
    if (dct == nullptr)
        return 20;
    if (roce_dct_to_rtr(dct, false, 3, 64) != EINVAL)
        return 21;
    if (dct->qp_num != 0)
        return 22; /* no number without RTR */
    ibv_qp *dct2 = create_dct(d, srq, 77);
    if (roce_dct_to_rtr(dct2, true, 250, 64) != EINVAL)
        return 23;
    ibv_qp *dct3 = create_dct(d, srq, 77);
    if (roce_dct_to_rtr(dct3, true, 3, 64) != 0 || dct3->qp_num == 0)
        return 24;
    dcxemu_ibv_destroy_qp(dct3);
    dcxemu_ibv_destroy_qp(dct2);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    dcxemu_ibv_destroy_qp(qp);
    d.close();
    return 0;
}

/* roce_route [routers]: delivery by GID.  A write reaches the DCT when the AH names the DCT's own
 * GID (the entry of its RTR sgid_index) with the same GID type; another entry of the same port,
 * or the same address as the other RoCE version, is a transport retry and RETRY_EXC_ERR.  With
 * routers > 0 (DCXEMU_ROCE_ROUTERS), a hop limit not above the router count kills the request
 * (AH) or the response (DCT).  Receive CQEs carry a GRH and no LID. */
EMU_CHILD(roce_route)
{
    int routers = argc > 0 ? atoi(argv[0]) : 0;
    dev d;
    if (!d.open())
        return 2;
    std::vector<char> buf(8192);
    ibv_mr *mr   = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                     IBV_ACCESS_LOCAL_WRITE |
                                             IBV_ACCESS_REMOTE_WRITE |
                                             IBV_ACCESS_REMOTE_READ);
    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = create_dct(d, srq, 77);
    if (mr == nullptr || srq == nullptr || dct == nullptr)
        return 3;
    if (roce_dct_to_rtr(dct, true, 3, 64) != 0)
        return 4;
    dci c;
    c.qp = create_dci(d);
    if (c.qp == nullptr)
        return 5;
    c.qpx                = dcxemu_ibv_qp_to_qp_ex(c.qp);
    c.dv                 = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(c.qpx);
    union ibv_gid own_v4 = mapped_v4(1), own_ll;
    if (dcxemu_ibv_query_gid(d.ctx, 1, 0, &own_ll) != 0)
        return 6;

    ibv_ah *good       = roce_ah(d, own_v4, 3, 64);
    ibv_ah *wrong_gid  = roce_ah(d, own_ll, 1,
                                 64); /* v2 link-local: not the DCT's GID */
    ibv_ah *wrong_type = roce_ah(d, own_v4, 2,
                                 64); /* RoCE v1 frame to a v2 address */
    ibv_ah *low_hop    = roce_ah(d, own_v4, 3, 1);
    if (!good || !wrong_gid || !wrong_type || !low_hop)
        return 7;

    auto cleanup = [&] {
        for (ibv_ah *ah : { good, wrong_gid, wrong_type, low_hop })
            dcxemu_ibv_destroy_ah(ah);
        dcxemu_ibv_destroy_qp(c.qp);
        dcxemu_ibv_destroy_qp(dct);
        dcxemu_ibv_destroy_srq(srq);
        dcxemu_ibv_dereg_mr(mr);
        d.close();
    };
    /* the IB default stops here: its AHs route by LID (0 is none) */
    if (write_status(d, c, good, mr, buf.data(), dct->qp_num, 3) !=
        IBV_WC_SUCCESS) {
        cleanup();
        return 10;
    }
    if (write_status(d, c, wrong_gid, mr, buf.data(), dct->qp_num, 1) !=
        IBV_WC_RETRY_EXC_ERR)
        return 11;
    if (write_status(d, c, wrong_type, mr, buf.data(), dct->qp_num, 2) !=
        IBV_WC_RETRY_EXC_ERR)
        return 12;
    int st = write_status(d, c, low_hop, mr, buf.data(), dct->qp_num, 3);
    if (st != (routers > 0 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS))
        return 13;
    if (routers > 0) {
        /* the response leaves with the DCT's hop limit: 1 dies at the first router */
        ibv_qp *dct1 = create_dct(d, srq, 77);
        if (dct1 == nullptr || roce_dct_to_rtr(dct1, true, 3, 1) != 0)
            return 14;
        if (write_status(d, c, good, mr, buf.data(), dct1->qp_num, 3) !=
            IBV_WC_RETRY_EXC_ERR)
            return 15;
        dcxemu_ibv_destroy_qp(dct1);
    }

    /* a SEND: the receive CQE says GRH, no LID */
    if (roce_dci_to_rts(c.qp, 3) != 0)
        return 20;
    if (post_recv(srq, mr, buf.data() + 4096, 256, 99) != 0)
        return 21;
    c.ah = good;
    if (post_one(c, OP_SEND, mr->lkey, buf.data(), 32, 0, 0, dct->qp_num, 77) !=
        0)
        return 22;
    c.ah          = nullptr;
    bool got_send = false, got_recv = false;
    for (int i = 0; i < 2; i++) {
        ibv_wc wc;
        if (!poll_one(d.cq, &wc, 5000) || wc.status != IBV_WC_SUCCESS)
            return 23;
        if (wc.opcode == IBV_WC_RECV) {
            if (!(wc.wc_flags & IBV_WC_GRH) || wc.slid != 0 ||
                wc.byte_len != 32)
                return 24;
            got_recv = true;
        } else {
            got_send = true;
        }
    }
    if (!got_send || !got_recv)
        return 25;

    cleanup();
    return 0;
}

TEST(emu_roce, port_and_gid_table)
{
    std::vector<std::string> env = roce_env;
    env.push_back("DCXEMU_NUM_DEVICES=2");
    EXPECT_EQ(run_roce({ "roce_port" }, env), 0);
    /* the default port is InfiniBand: the same checks stop at the link layer */
    EXPECT_EQ(run_roce({ "roce_port" }, { "DCXEMU_NUM_DEVICES=2" }), 4);
}

TEST(emu_roce, ah_and_av_need_grh)
{
    EXPECT_EQ(run_roce({ "roce_grh" }, roce_env), 0);
    EXPECT_EQ(run_roce({ "roce_grh" }, {}), 3);
}

TEST(emu_roce, delivery_by_gid_and_type)
{
    EXPECT_EQ(run_roce({ "roce_route" }, roce_env), 0);
    EXPECT_EQ(run_roce({ "roce_route" }, {}), 10);
}

TEST(emu_roce, hop_limit_and_routers)
{
    std::vector<std::string> env = roce_env;
    env.push_back("DCXEMU_ROCE_ROUTERS=1");
    EXPECT_EQ(run_roce({ "roce_route", "1" }, env), 0);
}

/* InfiniBand: ibv_query_gid_ex gives the port GID at index 0 with type IB; empty entries
 * ENODATA, beyond the table EINVAL */
TEST(emu_device, query_gid_ex_ib)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_gid_entry e;
    ASSERT_EQ(dcxemu__ibv_query_gid_ex(d.ctx, 1, 0, &e, 0, sizeof(e)), 0);
    EXPECT_EQ(e.gid_type, (uint32_t)IBV_GID_TYPE_IB);
    EXPECT_EQ(be64toh(e.gid.global.subnet_prefix), 0xfe80000000000000ull);
    EXPECT_EQ(e.gid_index, 0u);
    EXPECT_EQ(e.port_num, 1u);
    EXPECT_ERRNO_EQ(ENODATA,
                    dcxemu__ibv_query_gid_ex(d.ctx, 1, 1, &e, 0, sizeof(e)));
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu__ibv_query_gid_ex(d.ctx, 1, 128, &e, 0, sizeof(e)));
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu__ibv_query_gid_ex(nullptr, 1, 0, &e, 0, sizeof(e)));
    d.close();
}
