/* Hardware behaviour the transport must survive (docs/device-spec.md §8): device-fatal mode,
 * optional memory-access flags, the DC read/atomic depth, the send queue in basic blocks. */
#include "emu_test.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

using namespace emu;

namespace {

const uint64_t KEY = 0xfa7a1dc0ffee0015ull;

int run_and_wait(const std::vector<std::string> &args,
                 const std::vector<std::string> &env, int timeout_ms = 30000)
{
    pid_t pid = spawn(g_fabric, args, env);
    if (pid <= 0)
        return -1;
    int st = wait_child(pid, timeout_ms);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* One async event within timeout_ms, or false. */
bool async_event(ibv_context *ctx, ibv_async_event *ev, int timeout_ms)
{
    pollfd p = { ctx->async_fd, POLLIN, 0 };
    return poll(&p, 1, timeout_ms) == 1 &&
           dcxemu_ibv_get_async_event(ctx, ev) == 0;
}

#define FAIL_IF(cond, code)                                                  \
    do {                                                                     \
        if (cond) {                                                          \
            fprintf(stderr, "fatal child: %s (line %d)\n", #cond, __LINE__); \
            return (code);                                                   \
        }                                                                    \
    } while (0)

} // namespace

/* fatal: device 0 goes fatal with a WR queued (deferred mode) or just executed (immediate).
 * Device 1 of the same process is a bystander that sends to device 0's DCT.  0 on success. */
EMU_CHILD(fatal)
{
    (void)argc;
    (void)argv;
    dev d0, d1;
    dci c0, c1;
    ibv_wc wc;
    ibv_async_event ev;
    std::vector<char> lbuf(8192, 1), rbuf(8192, 0);
    const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                    IBV_ACCESS_REMOTE_READ;

    FAIL_IF(!d0.open(0) || !d1.open(1), 2);
    ibv_cq *rcq  = dcxemu_ibv_create_cq(d0.ctx, 64, nullptr, nullptr, 0);
    ibv_srq *srq = rcq ? create_srq(d0, 16, 1) : nullptr;
    ibv_qp *dct  = srq ? create_dct(d0, srq, KEY, rcq) : nullptr;
    FAIL_IF(dct == nullptr || dct_to_rtr(dct) != 0, 3);
    ibv_mr *lmr = dcxemu_ibv_reg_mr(d0.pd, lbuf.data(), lbuf.size(), acc);
    ibv_mr *rmr = dcxemu_ibv_reg_mr(d0.pd, rbuf.data(), rbuf.size(), acc);
    FAIL_IF(lmr == nullptr || rmr == nullptr, 4);
    FAIL_IF(!make_dci(d0, c0, d0.lid, 64, 4, 2) ||
                    !make_dci(d1, c1, d0.lid, 64, 4, 2),
            5);
    ibv_mr *lmr1 = dcxemu_ibv_reg_mr(d1.pd, lbuf.data(), lbuf.size(), acc);
    FAIL_IF(lmr1 == nullptr, 6);

    /* healthy first */
    FAIL_IF(post_one(c0, OP_WRITE, lmr->lkey, lbuf.data(), 64, rmr->rkey,
                     (uintptr_t)rbuf.data(), dct->qp_num, KEY, 1) != 0,
            7);
    FAIL_IF(!poll_one(d0.cq, &wc) || wc.status != IBV_WC_SUCCESS, 8);

    /* queued before the failure: in deferred mode it has not executed yet */
    rbuf[4096] = 0;
    FAIL_IF(post_one(c0, OP_WRITE, lmr->lkey, lbuf.data(), 64, rmr->rkey,
                     (uintptr_t)rbuf.data() + 4096, dct->qp_num, KEY, 2) != 0,
            9);
    const char *mode = getenv("DCXEMU_EXEC");
    bool deferred    = mode != nullptr && strcmp(mode, "deferred") == 0;
    if (!deferred) {
        FAIL_IF(!poll_one(d0.cq, &wc) || wc.status != IBV_WC_SUCCESS, 10);
    }

    FAIL_IF(dcxemu_device_fatal(5) != EINVAL ||
                    dcxemu_device_fatal(-1) != EINVAL,
            11);
    FAIL_IF(dcxemu_device_fatal(0) != 0, 12);
    FAIL_IF(dcxemu_device_fatal(0) != 0, 13); /* idempotent, one event */

    /* IBV_EVENT_DEVICE_FATAL on the device's context, port 1; once; none on device 1 */
    FAIL_IF(!async_event(d0.ctx, &ev, 2000), 14);
    FAIL_IF(ev.event_type != IBV_EVENT_DEVICE_FATAL || ev.element.port_num != 1,
            15);
    dcxemu_ibv_ack_async_event(&ev);
    /* dcxemu_device_fatal writes the events before it returns: what is not there now never comes */
    FAIL_IF(async_event(d0.ctx, &ev, 0), 16);
    FAIL_IF(async_event(d1.ctx, &ev, 0), 17);

    /* Posting is user space on mlx5: it succeeds, and nothing ever completes (the queued WR
     * neither: no success, no flush). */
    FAIL_IF(post_one(c0, OP_WRITE, lmr->lkey, lbuf.data(), 64, rmr->rkey,
                     (uintptr_t)rbuf.data(), dct->qp_num, KEY, 3) != 0,
            18);
    /* the engine has seen both WRs (deferred: their deadlines) and no QP has a timer left:
     * neither is scheduled; immediate: WR 3 would have run inside wr_complete */
    FAIL_IF(!engine_idle(), 19);
    FAIL_IF(!cq_empty_now(d0.cq), 19);
    if (deferred) {
        FAIL_IF(rbuf[4096] != 0, 20); /* the queued WR never executed */
    }

    /* firmware commands fail with EIO */
    errno = 0;
    FAIL_IF(dcxemu_ibv_alloc_pd(d0.ctx) != nullptr || errno != EIO, 21);
    errno = 0;
    FAIL_IF(dcxemu_ibv_reg_mr(d0.pd, lbuf.data(), 4096,
                              IBV_ACCESS_LOCAL_WRITE) != nullptr ||
                    errno != EIO,
            22);
    errno = 0;
    FAIL_IF(dcxemu_ibv_create_cq(d0.ctx, 16, nullptr, nullptr, 0) != nullptr ||
                    errno != EIO,
            23);
    errno = 0;
    FAIL_IF(create_srq(d0, 16, 1) != nullptr || errno != EIO, 24);
    errno = 0;
    FAIL_IF(create_dci(d0) != nullptr || errno != EIO, 25);
    ibv_qp_attr qa;
    ibv_qp_init_attr qia;
    FAIL_IF(dcxemu_ibv_query_qp(c0.qp, &qa, IBV_QP_STATE, &qia) != EIO, 26);
    ibv_srq_attr sa = {};
    sa.srq_limit    = 1;
    FAIL_IF(dcxemu_ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) != EIO, 27);
    {
        int n             = 0;
        ibv_device **list = dcxemu_ibv_get_device_list(&n);
        FAIL_IF(list == nullptr, 28);
        errno              = 0;
        ibv_context *again = dcxemu_ibv_open_device(list[0]);
        int e              = errno;
        dcxemu_ibv_free_device_list(list);
        FAIL_IF(again != nullptr || e != EIO, 29);
    }
    /* to ERR and RESET succeed (2ERR_QP / 2RST_QP), back up does not; still no flush CQE */
    qa.qp_state = IBV_QPS_ERR;
    FAIL_IF(dcxemu_ibv_modify_qp(c0.qp, &qa, IBV_QP_STATE) != 0, 30);
    FAIL_IF(!engine_idle() || !cq_empty_now(d0.cq), 31);
    qa.qp_state = IBV_QPS_RESET;
    FAIL_IF(dcxemu_ibv_modify_qp(c0.qp, &qa, IBV_QP_STATE) != 0, 32);
    FAIL_IF(dci_to_rts(c0.qp) != EIO, 33);

    /* the bystander device works, and its sender finds the dead device's DCT unreachable */
    FAIL_IF(post_one(c1, OP_WRITE, lmr1->lkey, lbuf.data(), 64, rmr->rkey,
                     (uintptr_t)rbuf.data(), dct->qp_num, KEY, 4) != 0,
            34);
    FAIL_IF(!poll_one(d1.cq, &wc, 10000) || wc.status != IBV_WC_RETRY_EXC_ERR,
            35);

    /* teardown succeeds (destroy commands report success after an internal error) */
    destroy_dci(c0);
    destroy_dci(c1);
    FAIL_IF(dcxemu_ibv_destroy_qp(dct) != 0 || dcxemu_ibv_destroy_srq(srq) != 0,
            36);
    FAIL_IF(dcxemu_ibv_dereg_mr(lmr) != 0 || dcxemu_ibv_dereg_mr(rmr) != 0 ||
                    dcxemu_ibv_dereg_mr(lmr1) != 0,
            37);
    FAIL_IF(dcxemu_ibv_destroy_cq(rcq) != 0, 38);
    d0.close();
    d1.close();
    return 0;
}

/* Device-fatal mode (docs/device-spec.md §8), in both execution modes. */
TEST(emu_device_fatal, event_no_completions_eio)
{
    EXPECT_EQ(run_and_wait({ "fatal" },
                           { "DCXEMU_NUM_DEVICES=2", "DCXEMU_EXEC=immediate",
                             "DCXEMU_TIME_SCALE=0.01" }),
              0);
    EXPECT_EQ(run_and_wait({ "fatal" },
                           { "DCXEMU_NUM_DEVICES=2", "DCXEMU_EXEC=deferred",
                             "DCXEMU_DEFER_US=200000",
                             "DCXEMU_TIME_SCALE=0.01" }),
              0);
}

/* Optional access flags (IBV_ACCESS_OPTIONAL_RANGE, bits 20..29) are accepted and ignored where
 * unsupported, as libibverbs and the kernel do (ib_check_mr_access); unknown bits outside it are
 * EINVAL.  An MR with IBV_ACCESS_RELAXED_ORDERING works as any other. */
TEST(emu_pd_mr, optional_access_flags)
{
    const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                    IBV_ACCESS_REMOTE_READ;
    dev d;
    ASSERT_TRUE(d.open());
    std::vector<char> lbuf(4096, 9), rbuf(4096, 0);
    ibv_mr *ro = dcxemu_ibv_reg_mr(d.pd, rbuf.data(), rbuf.size(),
                                   acc | IBV_ACCESS_RELAXED_ORDERING);
    ASSERT_NE(ro, nullptr);
    ibv_mr *opt = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(),
                                    acc | (1 << 21) | (1 << 29));
    ASSERT_NE(opt, nullptr);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(),
                                acc | (1 << 30)),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(),
                                acc | (1 << 12)),
              nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);

    ibv_cq *rcq  = dcxemu_ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
    ibv_srq *srq = create_srq(d, 16, 1);
    ibv_qp *dct  = create_dct(d, srq, KEY, rcq);
    ASSERT_NE(dct, nullptr);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    dci c;
    ASSERT_TRUE(make_dci(d, c, d.lid));
    ASSERT_EQ(post_one(c, OP_WRITE, opt->lkey, lbuf.data(), 4096, ro->rkey,
                       (uintptr_t)rbuf.data(), dct->qp_num, KEY),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf[4095], 9);
    destroy_dci(c);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    dcxemu_ibv_destroy_cq(rcq);
    dcxemu_ibv_dereg_mr(ro);
    dcxemu_ibv_dereg_mr(opt);
    d.close();
}

namespace {

/* QUERY_HCA_CAP (general, current) through mlx5dv_devx_general_cmd: 0 or the errno value;
 * *req / *res the DC read/atomic logs. */
int query_ra_dc(ibv_context *ctx, unsigned *req, unsigned *res,
                uint16_t opcode = 0x100, size_t inlen = 16)
{
    uint8_t in[16] = {}, out[16 + 4096];
    uint32_t dw;
    in[0] = opcode >> 8;
    in[1] = opcode & 0xff;
    in[7] = 1; /* op_mod: HCA_CAP_OPMOD_GET_CUR | GENERAL << 1 */
    memset(out, 0xff, sizeof(out));
    int r = dcxemu_mlx5dv_devx_general_cmd(ctx, in, inlen, out, sizeof(out));
    if (r != 0)
        return r;
    if (out[0] != 0)
        return -1; /* status */
    memcpy(&dw, out + 16 + 0x120 / 8, 4); /* dword of log_max_ra_{req,res}_dc */
    dw   = ntohl(dw);
    *req = (dw >> 16) & 0x3f;
    *res = dw & 0x3f;
    return 0;
}

ibv_context *open_ctx(bool devx)
{
    int n          = 0;
    ibv_device **l = dcxemu_ibv_get_device_list(&n);
    if (l == nullptr || n < 1)
        return nullptr;
    mlx5dv_context_attr da = {};
    da.flags               = MLX5DV_CONTEXT_FLAGS_DEVX;
    ibv_context *ctx       = devx ? dcxemu_mlx5dv_open_device(l[0], &da) :
                                    dcxemu_ibv_open_device(l[0]);
    dcxemu_ibv_free_device_list(l);
    return ctx;
}

/* A DCI to RTR, then RTR->RTS with max_rd_atomic: modify's return value. */
int dci_rts_with(dev &d, uint8_t max_rd_atomic)
{
    ibv_qp *qp = create_dci(d);
    if (qp == nullptr)
        return -1;
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    int r      = dcxemu_ibv_modify_qp(qp, &a,
                                      IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                              IBV_QP_PORT);
    memset(&a, 0, sizeof(a));
    a.qp_state         = IBV_QPS_RTR;
    a.path_mtu         = IBV_MTU_4096;
    a.ah_attr.port_num = 1;
    if (r == 0)
        r = dcxemu_ibv_modify_qp(qp, &a,
                                 IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV);
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = 14;
    a.retry_cnt     = 7;
    a.rnr_retry     = 7;
    a.max_rd_atomic = max_rd_atomic;
    if (r == 0) {
        r = dcxemu_ibv_modify_qp(qp, &a,
                                 IBV_QP_STATE | IBV_QP_TIMEOUT |
                                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_MAX_QP_RD_ATOMIC |
                                         IBV_QP_SQ_PSN);
    }
    dcxemu_ibv_destroy_qp(qp);
    return r;
}

} // namespace

/* ra_dc <log>: the DC limit is 1 << log (DCXEMU_LOG_MAX_RA_DC), below max_qp_init_rd_atom. */
EMU_CHILD(ra_dc)
{
    unsigned want = argc > 0 ? (unsigned)atoi(argv[0]) : 4, req = 99, res = 99;
    dev d;
    ibv_device_attr da;
    FAIL_IF(!d.open(), 2);
    FAIL_IF(dcxemu_ibv_query_device(d.ctx, &da) != 0 ||
                    da.max_qp_init_rd_atom != 16,
            3);
    ibv_context *devx = open_ctx(true);
    FAIL_IF(devx == nullptr, 4);
    FAIL_IF(query_ra_dc(devx, &req, &res) != 0 || req != want || res != want,
            5);
    FAIL_IF(dci_rts_with(d, 16) != (want < 4 ? EINVAL : 0), 6);
    FAIL_IF(dci_rts_with(d, (uint8_t)(1u << want)) != 0, 7);
    FAIL_IF(want > 0 && dci_rts_with(d, (uint8_t)((1u << want) + 1)) != EINVAL,
            8);
    dcxemu_ibv_close_device(devx);
    d.close();
    return 0;
}

/* The DC read/atomic depth (docs/device-spec.md §8): QUERY_HCA_CAP through mlx5dv_devx_general_cmd
 * reports log_max_ra_req_dc / log_max_ra_res_dc at their PRM offsets; RTR->RTS of a DCI with
 * max_rd_atomic above 1 << log_max_ra_res_dc is EINVAL (kernel mlx5_ib validate_rd_atomic) even
 * where max_qp_init_rd_atom allows it.  QUERY_HCA_CAP is whitelisted (works without DEVX); other
 * commands need a DEVX context. */
TEST(emu_devx, dc_rd_atomic_capability)
{
    unsigned req = 99, res = 99;
    ibv_context *devx = open_ctx(true), *plain = open_ctx(false);
    ASSERT_NE(devx, nullptr);
    ASSERT_NE(plain, nullptr);
    EXPECT_EQ(query_ra_dc(devx, &req, &res), 0);
    EXPECT_EQ(req, 4u);
    EXPECT_EQ(res, 4u);
    req = res = 99;
    EXPECT_EQ(query_ra_dc(plain, &req, &res), 0); /* whitelisted */
    EXPECT_EQ(res, 4u);
    EXPECT_ERRNO_EQ(EINVAL, query_ra_dc(plain, &req, &res,
                                        0x200)); /* CREATE_MKEY, no DEVX */
    EXPECT_ERRNO_EQ(EREMOTEIO, query_ra_dc(devx, &req, &res,
                                           0x200)); /* firmware: BAD_OP */
    EXPECT_ERRNO_EQ(EINVAL, query_ra_dc(devx, &req, &res, 0x100,
                                        8)); /* short mailbox */
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_mlx5dv_devx_general_cmd(nullptr, &req, 16,
                                                           &res, 16));
    dcxemu_ibv_close_device(devx);
    dcxemu_ibv_close_device(plain);

    EXPECT_EQ(run_and_wait({ "ra_dc", "2" }, { "DCXEMU_LOG_MAX_RA_DC=2" }), 0);
    EXPECT_EQ(run_and_wait({ "ra_dc", "0" }, { "DCXEMU_LOG_MAX_RA_DC=0" }), 0);
    EXPECT_EQ(run_and_wait({ "ra_dc", "4" }, {}), 0);
}

/* The send queue is bounded in 64-byte basic blocks as well as in WRs (rdma-core
 * providers/mlx5/verbs.c:mlx5_calc_sq_size): roundup_pow2(max_send_wr * wqe_size) / 64 may not
 * exceed max_send_wqebb (1 << log_max_qp_sz = max_qp_wr, 32768), else EINVAL; the written-back
 * max_send_wr is wq_size / wqe_size. */
TEST(emu_sq, send_queue_bounded_in_wqebb)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_device_attr da;
    ASSERT_EQ(dcxemu_ibv_query_device(d.ctx, &da), 0);
    ASSERT_EQ(da.max_qp_wr, 32768);
    struct shape {
        uint32_t inl,
                ok_wr; /* 128 B WQEs (1 SGE, no inline) and 512 B WQEs (inline 400) */
    };
    for (shape s : { shape{ 0, 16384 }, shape{ 400, 4096 } }) {
        ibv_qp *qp = create_dci(d, s.ok_wr, 1, s.inl);
        ASSERT_NE(qp, nullptr) << "inline " << s.inl;
        ibv_qp_attr qa;
        ibv_qp_init_attr qia;
        ASSERT_EQ(dcxemu_ibv_query_qp(qp, &qa, IBV_QP_CAP, &qia), 0);
        EXPECT_EQ(qa.cap.max_send_wr, s.ok_wr);
        EXPECT_EQ(dcxemu_ibv_destroy_qp(qp), 0);
        errno = 0;
        EXPECT_EQ(create_dci(d, s.ok_wr + 1, 1, s.inl), nullptr)
                << "inline " << s.inl;
        EXPECT_ERRNO_EQ(EINVAL, errno);
    }
    /* max_qp_wr WRs of the smallest DCI WQE are already more basic blocks than the queue has */
    errno = 0;
    EXPECT_EQ(create_dci(d, 32768, 1, 0), nullptr);
    EXPECT_ERRNO_EQ(EINVAL, errno);
    d.close();
}
