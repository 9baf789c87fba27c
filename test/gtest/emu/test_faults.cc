/* Execution modes, fault injection, counters and trace of the device model (docs/dcxemu.md). */
#include "emu_test.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

using namespace emu;

namespace {

const uint64_t KEY = 0x600df00dcafe1234ull;

/* A DCI and a DCT (with SRQ and receive CQ) in this process, plus two MRs. */
struct loop {
    dev d;
    ibv_cq *rcq  = nullptr;
    ibv_srq *srq = nullptr;
    ibv_qp *dct  = nullptr;
    dci c;
    std::vector<char> lbuf, rbuf;
    ibv_mr *lmr = nullptr, *rmr = nullptr;

    bool open(uint8_t timeout = 10, uint8_t retry = 3)
    {
        if (!d.open())
            return false;
        rcq = dcxemu_ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
        srq = rcq ? create_srq(d, 64, 2) : nullptr;
        dct = srq ? create_dct(d, srq, KEY, rcq) : nullptr;
        if (dct == nullptr || dct_to_rtr(dct) != 0)
            return false;
        lbuf.assign(1 << 16, 0);
        rbuf.assign(1 << 16, 0);
        int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        lmr = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(), acc);
        rmr = dcxemu_ibv_reg_mr(d.pd, rbuf.data(), rbuf.size(), acc);
        return lmr && rmr && make_dci(d, c, d.lid, 64, timeout, retry);
    }
    void close()
    {
        destroy_dci(c);
        if (dct)
            dcxemu_ibv_destroy_qp(dct);
        if (srq)
            dcxemu_ibv_destroy_srq(srq);
        if (lmr)
            dcxemu_ibv_dereg_mr(lmr);
        if (rmr)
            dcxemu_ibv_dereg_mr(rmr);
        if (rcq)
            dcxemu_ibv_destroy_cq(rcq);
        d.close();
        dct = nullptr;
        srq = nullptr;
        lmr = rmr = nullptr;
        rcq       = nullptr;
    }
    uint64_t raddr(size_t off = 0)
    {
        return (uintptr_t)rbuf.data() + off;
    }
    int write(size_t loff, size_t roff, uint32_t len, uint64_t wr_id = 1,
              unsigned flags = IBV_SEND_SIGNALED)
    {
        return post_one(c, OP_WRITE, lmr->lkey, lbuf.data() + loff, len,
                        rmr->rkey, raddr(roff), dct->qp_num, KEY, wr_id, flags);
    }
};

/* A DCI of l (same DCT) whose CQ stamps completions with the model's clock (CLOCK_MONOTONIC):
 * when the model ran a WR, rather than when the test saw it. */
struct stamped {
    ibv_cq_ex *cq = nullptr;
    dci c;
    bool open(loop &l, uint8_t timeout = 10, uint8_t retry = 3)
    {
        ibv_cq_init_attr_ex ca;
        memset(&ca, 0, sizeof(ca));
        ca.cqe      = 16;
        ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
        cq          = dcxemu_ibv_create_cq_ex(l.d.ctx, &ca);
        c.qp = cq ? create_dci(l.d, 16, 1, 64, true, ibv_cq_ex_to_cq(cq)) :
                    nullptr;
        if (c.qp == nullptr || dci_to_rts(c.qp, timeout, retry) != 0)
            return false;
        c.qpx = dcxemu_ibv_qp_to_qp_ex(c.qp);
        c.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(c.qpx);
        c.ah  = l.c.ah;
        return true;
    }
    void close()
    {
        c.ah = nullptr; /* l's */
        destroy_dci(c);
        if (cq)
            dcxemu_ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
        cq = nullptr;
    }
    int write(loop &l, uint32_t len)
    {
        return post_one(c, OP_WRITE, l.lmr->lkey, l.lbuf.data(), len,
                        l.rmr->rkey, l.raddr(), l.dct->qp_num, KEY);
    }
    /* One completion within timeout_ms: its status and stamp. */
    bool poll(ibv_wc_status *st, uint64_t *ts_ns, int timeout_ms = 5000)
    {
        return wait_until(
                [&] {
                    ibv_poll_cq_attr pa;
                    memset(&pa, 0, sizeof(pa));
                    if (ibv_start_poll(cq, &pa) != 0)
                        return false;
                    *st    = cq->status;
                    *ts_ns = ibv_wc_read_completion_ts(cq);
                    ibv_end_poll(cq);
                    return true;
                },
                timeout_ms);
    }
};

uint64_t mono_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int run_and_wait(const std::vector<std::string> &args,
                 const std::vector<std::string> &env, int timeout_ms = 20000)
{
    pid_t pid = spawn(g_fabric, args, env);
    if (pid <= 0)
        return -1;
    int st = wait_child(pid, timeout_ms);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct counters : dcxemu_counters {
    counters(int scope, int dev = 0)
    {
        EXPECT_EQ(dcxemu_counters_read(dev, (dcxemu_counter_scope)scope, this),
                  0);
    }
    counters operator-(const counters &o) const
    {
        counters r(*this);
        for (size_t i = 0; i < sizeof(dcxemu_counters) / 8; i++) {
            ((uint64_t *)&r)[i] -= ((const uint64_t *)&o)[i];
        }
        return r;
    }
};

} // namespace

/* ------------------------------------------------------------------ child roles ---- */

/* reuse: WRITE 'A' from a buffer, overwrite the buffer with 'B' right after wr_complete, then
 * poll.  Exit 10 + (target byte == 'B'), so the parent sees which contents reached the target. */
EMU_CHILD(reuse)
{
    (void)argc;
    (void)argv;
    loop l;
    if (!l.open())
        return 2;
    memset(l.lbuf.data(), 'A', 4096);
    if (l.write(0, 0, 4096) != 0)
        return 3;
    memset(l.lbuf.data(), 'B',
           4096); /* a transport bug: reuse before the completion */
    ibv_wc wc;
    bool early = ibv_poll_cq(l.d.cq, 1, &wc) == 1;
    if ((!early && !poll_one(l.d.cq, &wc)) || wc.status != IBV_WC_SUCCESS)
        return 4;
    int got_b = l.rbuf[0] == 'B' && l.rbuf[4095] == 'B';
    if (!got_b && (l.rbuf[0] != 'A' || l.rbuf[4095] != 'A'))
        return 5;
    l.close();
    /* deferred: no CQE before execution; immediate: the CQE was there at once */
    return got_b == early ? 6 : 10 + got_b;
}

/* deferred_order: many batches of WRITEs to one word, then ERR flush, destroy with queued WRs,
 * and exit with queued WRs.  0 on success. */
EMU_CHILD(deferred_order)
{
    (void)argc;
    (void)argv;
    /* left open at exit on purpose: never destroyed, so the buffers stay valid while the engine
     * may still run queued WRs, and reachable for LSan */
    static loop &l = *new loop;
    ibv_wc wc;
    if (!l.open())
        return 2;
    /* FIFO: the last WRITE wins and the CQEs come in posting order */
    for (uint32_t i = 0; i < 40; i++) {
        memcpy(l.lbuf.data() + 8 * i, &i, 4);
        if (l.write(8 * i, 0, 4, i) != 0)
            return 3;
    }
    for (uint32_t i = 0; i < 40; i++) {
        if (!poll_one(l.d.cq, &wc) || wc.status != IBV_WC_SUCCESS ||
            wc.wr_id != i)
            return 4;
    }
    uint32_t last;
    memcpy(&last, l.rbuf.data(), 4);
    if (last != 39)
        return 5;
    /* ERR while WRs wait: every one flushes, in order, signaled or not */
    for (uint32_t i = 0; i < 5; i++) {
        if (l.write(0, 64, 8, 100 + i, i % 2 ? 0 : IBV_SEND_SIGNALED) != 0)
            return 6;
    }
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    if (dcxemu_ibv_modify_qp(l.c.qp, &a, IBV_QP_STATE) != 0)
        return 7;
    /* WRs that ran before ERR complete (if signaled); from the first flush on, every later WR
     * flushes, signaled or not, in order.  The last (signaled) always has a CQE: after it, none */
    uint64_t prev = 99, flushed = 0;
    do {
        if (!poll_one(l.d.cq, &wc))
            return 8;
        if (wc.wr_id <= prev)
            return 8;
        if (flushed > 0 &&
            (wc.status != IBV_WC_WR_FLUSH_ERR || wc.wr_id != prev + 1))
            return 8;
        if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR)
            return 8;
        flushed += wc.status == IBV_WC_WR_FLUSH_ERR;
        prev = wc.wr_id;
    } while (wc.wr_id < 104);
    if (!cq_empty_now(l.d.cq))
        return 8;
    const char *mode = getenv("DCXEMU_EXEC");
    bool deferred    = mode != nullptr && strcmp(mode, "deferred") == 0;
    if (deferred ? (flushed < 1 || prev != 104) : flushed != 0)
        return 9;
    /* destroy a DCI with queued WRs, and exit with more queued on another */
    dci c2;
    if (!make_dci(l.d, c2, l.d.lid))
        return 10;
    for (uint32_t i = 0; i < 8; i++) {
        if (post_one(c2, OP_WRITE, l.lmr->lkey, l.lbuf.data(), 8, l.rmr->rkey,
                     l.raddr(128), l.dct->qp_num, KEY, i) != 0)
            return 11;
    }
    destroy_dci(c2);
    static dci &c3 = *new dci;
    if (!make_dci(l.d, c3, l.d.lid))
        return 12;
    for (uint32_t i = 0; i < 8; i++) {
        if (post_one(c3, OP_WRITE, l.lmr->lkey, l.lbuf.data(), 8, l.rmr->rkey,
                     l.raddr(128), l.dct->qp_num, KEY, i) != 0)
            return 13;
    }
    return 0; /* exit with queued WRs: the destructor must leave cleanly */
}

/* envfault <which>: single-process WR under DCXEMU_FAULTS; exit code tells the outcome */
EMU_CHILD(envfault)
{
    if (argc < 1)
        return 2;
    loop l;
    stamped s;
    ibv_wc wc;
    if (!l.open(4, 2) || !s.open(l, 4, 2))
        return 3;
    memset(l.lbuf.data(), 0x5c, 64);
    uint64_t t0 = mono_ns(), ts = 0;
    if (s.write(l, 64) != 0)
        return 4;
    if (!s.poll(&wc.status, &ts, 10000))
        return 5;
    uint64_t ms = (ts - t0) / 1000000; /* when the model completed it */
    s.close();
    counters p(DCXEMU_SCOPE_PROCESS);
    int rc = 24;
    if (strcmp(argv[0], "status") == 0) {
        rc = wc.status == IBV_WC_REM_OP_ERR && l.rbuf[0] == 0 ? 0 : 20;
    } else if (strcmp(argv[0], "drop") == 0) {
        rc = wc.status == IBV_WC_RETRY_EXC_ERR && p.transport_retries == 2 &&
                             l.rbuf[0] == 0 ?
                     0 :
                     21;
    } else if (strcmp(argv[0], "delay") == 0) {
        rc = wc.status == IBV_WC_SUCCESS && ms >= 150 && l.rbuf[63] == 0x5c ?
                     0 :
                     22;
    } else if (strcmp(argv[0], "none") == 0) {
        rc = wc.status == IBV_WC_SUCCESS && p.transport_retries == 0 ? 0 : 23;
    }
    l.close();
    return rc;
}

/* traced: one WRITE and its completion, then exit (DCXEMU_TRACE set by the parent) */
EMU_CHILD(traced)
{
    (void)argc;
    (void)argv;
    loop l;
    ibv_wc wc;
    if (!l.open())
        return 2;
    if (l.write(0, 0, 77, 0x4242) != 0)
        return 3;
    if (!poll_one(l.d.cq, &wc) || wc.status != IBV_WC_SUCCESS)
        return 4;
    l.close();
    return 0;
}

/* counted: 3 WRITEs of 100 bytes and one READ of 8 on device 0, then exit */
EMU_CHILD(counted)
{
    (void)argc;
    (void)argv;
    loop l;
    ibv_wc wc;
    if (!l.open())
        return 2;
    for (int i = 0; i < 3; i++) {
        if (l.write(0, 0, 100) != 0 || !poll_one(l.d.cq, &wc) || wc.status)
            return 3;
    }
    if (post_one(l.c, OP_READ, l.lmr->lkey, l.lbuf.data(), 8, l.rmr->rkey,
                 l.raddr(0), l.dct->qp_num, KEY) != 0 ||
        !poll_one(l.d.cq, &wc) || wc.status)
        return 4;
    l.close();
    return 0;
}

/* freed: deregister the send buffer's MR right after wr_complete.  Exit 10 + (the WR failed with
 * LOC_PROT_ERR and the target was not written). */
EMU_CHILD(freed)
{
    (void)argc;
    (void)argv;
    loop l;
    ibv_wc wc;
    if (!l.open())
        return 2;
    memset(l.lbuf.data(), 'A', 64);
    if (l.write(0, 0, 64) != 0)
        return 3;
    if (dcxemu_ibv_dereg_mr(l.lmr) != 0)
        return 4;
    l.lmr = nullptr;
    if (!poll_one(l.d.cq, &wc))
        return 5;
    int failed = wc.status == IBV_WC_LOC_PROT_ERR && l.rbuf[0] == 0;
    if (!failed && (wc.status != IBV_WC_SUCCESS || l.rbuf[0] != 'A'))
        return 6;
    l.close();
    return 10 + failed;
}

/* victim <resp_fd> <cmd_fd>: report this process's DCI number, wait for the go byte, post two
 * WRITEs.  Exit 0 if the first completed with REM_OP_ERR (injected by the parent), the second
 * flushed and the target is untouched. */
EMU_CHILD(victim)
{
    if (argc < 2)
        return 2;
    int rfd = atoi(argv[0]), cfd = atoi(argv[1]);
    loop l;
    ibv_wc wc;
    char go;
    if (!l.open())
        return 3;
    uint32_t qpn = l.c.qp->qp_num;
    if (!write_full(rfd, &qpn, sizeof(qpn)) || !read_full(cfd, &go, 1, 10000))
        return 4;
    memset(l.lbuf.data(), 0x66, 32);
    if (l.write(0, 0, 32, 1) != 0 || l.write(0, 0, 32, 2) != 0)
        return 5;
    if (!poll_one(l.d.cq, &wc) || wc.wr_id != 1 ||
        wc.status != IBV_WC_REM_OP_ERR)
        return 6;
    if (!poll_one(l.d.cq, &wc) || wc.wr_id != 2 ||
        wc.status != IBV_WC_WR_FLUSH_ERR)
        return 7;
    int rc = l.rbuf[0] == 0 ? 0 : 8;
    l.close();
    return rc;
}

/* ------------------------------------------------------------------ deferred mode ---- */

/* A buffer reused right after wr_complete: in deferred mode the target gets the reused contents
 * (the bug is caught); in immediate mode it got the original. */
TEST(emu_deferred, reused_send_buffer_caught)
{
    EXPECT_EQ(run_and_wait({ "reuse" }, { "DCXEMU_EXEC=deferred",
                                          "DCXEMU_DEFER_US=200000" }),
              11);
    EXPECT_EQ(run_and_wait({ "reuse" }, { "DCXEMU_EXEC=immediate" }), 10);
    /* a buffer freed (MR deregistered) before the completion: the WR fails in deferred mode */
    EXPECT_EQ(run_and_wait({ "freed" }, { "DCXEMU_EXEC=deferred",
                                          "DCXEMU_DEFER_US=200000" }),
              11);
    EXPECT_EQ(run_and_wait({ "freed" }, { "DCXEMU_EXEC=immediate" }), 10);
}

/* FIFO order and last-writer-wins across batches; ERR flushes queued WRs in order; destroy and
 * process exit with queued WRs are clean (in both modes of this process). */
TEST(emu_deferred, fifo_flush_destroy_exit)
{
    EXPECT_EQ(run_and_wait({ "deferred_order" }, { "DCXEMU_EXEC=deferred",
                                                   "DCXEMU_DEFER_US=100000" }),
              0);
    EXPECT_EQ(run_and_wait({ "deferred_order" }, { "DCXEMU_EXEC=immediate" }),
              0);
    /* the fabric still works after those exits */
    loop l;
    ASSERT_TRUE(l.open());
    ASSERT_EQ(l.write(0, 0, 8), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    l.close();
}

/* No completion before execution: with a long deferral (reuse child) the CQ is empty right after
 * wr_complete; here, in this process's mode, data is in place once the CQE is seen. */
TEST(emu_deferred, completion_only_after_execution)
{
    EXPECT_EQ(run_and_wait({ "reuse" }, { "DCXEMU_EXEC=deferred",
                                          "DCXEMU_DEFER_US=100000" }),
              11);
    const char *m = getenv("DCXEMU_EXEC");
    loop l;
    ASSERT_TRUE(l.open());
    memset(l.lbuf.data(), 7, 64);
    ASSERT_EQ(l.write(0, 0, 64), 0);
    ibv_wc wc;
    if (m == nullptr || strcmp(m, "deferred") != 0) {
        EXPECT_EQ(l.rbuf[63], 7); /* immediate: executed inside wr_complete */
    }
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(l.rbuf[63], 7);
    l.close();
}

/* ------------------------------------------------------------------ faults ---- */

struct emu_faults : public ::testing::Test {
    loop l;
    void SetUp() override
    {
        ASSERT_TRUE(l.open(4, 3));
    }
    void TearDown() override
    {
        EXPECT_EQ(dcxemu_fault_clear_all(), 0);
        l.close();
    }
};

TEST_F(emu_faults, inject_argument_errors)
{
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_fault_inject((dcxemu_fault_kind)0,
                                                l.dct->qp_num, 1));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_fault_inject((dcxemu_fault_kind)99,
                                                l.dct->qp_num, 1));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE,
                                                l.dct->qp_num, 2));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE,
                                                l.c.qp->qp_num, 1));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_fault_inject(DCXEMU_FAULT_DROP_NEXT,
                                                l.c.qp->qp_num, 1));
    EXPECT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_FORCE_STATUS, l.c.qp->qp_num,
                                  IBV_WC_SUCCESS),
              EINVAL);
    EXPECT_ERRNO_EQ(ENOENT, dcxemu_fault_inject(DCXEMU_FAULT_DELAY, 0, 5));
    EXPECT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DELAY,
                                  (l.dct->qp_num + (1u << 15)) & 0xffffff, 5),
              ENOENT); /* same slot, other generation */
    EXPECT_ERRNO_EQ(ENOENT,
                    dcxemu_fault_inject(DCXEMU_FAULT_DELAY, 1u << 24, 5));
    EXPECT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DELAY, l.c.qp->qp_num, 0), 0);
}

/* FORCE_STATUS: exactly the next WR completes with the status without executing; the QP goes to
 * ERR and the following WRs flush; another QP is not affected. */
TEST_F(emu_faults, force_status_next_wr_then_flush)
{
    counters p0(DCXEMU_SCOPE_PROCESS);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_FORCE_STATUS, l.c.qp->qp_num,
                                  IBV_WC_REM_ACCESS_ERR),
              0);
    memset(l.lbuf.data(), 0x33, 64);
    ASSERT_EQ(l.write(0, 0, 64, 1, 0), 0); /* unsignaled: an error CQE anyway */
    ASSERT_EQ(l.write(0, 0, 64, 2), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(wc.vendor_err, 0x13u);
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(l.rbuf[0], 0); /* nothing executed */
    counters p = counters(DCXEMU_SCOPE_PROCESS) - p0;
    EXPECT_EQ(p.error_cqes, 2u);
    EXPECT_EQ(p.key_violations, 1u);
    EXPECT_EQ(p.wr[DCXEMU_CNT_OP_WRITE],
              1u); /* the flushed WR never executed */
    /* one-shot: a fresh DCI (new number) runs normally */
    dci c2;
    ASSERT_TRUE(make_dci(l.d, c2, l.d.lid));
    ASSERT_EQ(post_one(c2, OP_WRITE, l.lmr->lkey, l.lbuf.data(), 64,
                       l.rmr->rkey, l.raddr(), l.dct->qp_num, KEY),
              0);
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(l.rbuf[63], 0x33);
    destroy_dci(c2);
}

/* FORCE_STATUS on a DCT: the next WR that reaches it, from whichever DCI, completes with the
 * status at its sender and nothing executes; one-shot. */
TEST_F(emu_faults, force_status_via_dct)
{
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_FORCE_STATUS, l.dct->qp_num,
                                  IBV_WC_REM_OP_ERR),
              0);
    memset(l.lbuf.data(), 0x44, 64);
    ASSERT_EQ(l.write(0, 0, 64, 7), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.status, IBV_WC_REM_OP_ERR);
    EXPECT_EQ(l.rbuf[0], 0); /* nothing executed */
    /* one-shot: a fresh DCI reaches the DCT normally */
    dci c2;
    ASSERT_TRUE(make_dci(l.d, c2, l.d.lid));
    ASSERT_EQ(post_one(c2, OP_WRITE, l.lmr->lkey, l.lbuf.data(), 64,
                       l.rmr->rkey, l.raddr(), l.dct->qp_num, KEY),
              0);
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(l.rbuf[63], 0x44);
    destroy_dci(c2);
}

/* DELAY on the DCI and on the DCT: each operation completes (by the model's stamp) at least that
 * long after it was posted; 0 clears (a cleared 10 s delay would outlast poll's 5 s guard). */
TEST_F(emu_faults, delay_on_qp_and_dct)
{
    stamped s;
    ASSERT_TRUE(s.open(l, 4, 3));
    ibv_wc_status st;
    uint64_t ts;
    const uint32_t targets[2] = { s.c.qp->qp_num, l.dct->qp_num };
    for (uint32_t t : targets) {
        ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DELAY, t, 150000), 0);
        uint64_t t0 = mono_ns();
        ASSERT_EQ(s.write(l, 8), 0);
        ASSERT_TRUE(s.poll(&st, &ts));
        EXPECT_EQ(st, IBV_WC_SUCCESS);
        EXPECT_GE(ts - t0, 150000000u);
        ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DELAY, t, 10000000), 0);
        ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DELAY, t, 0), 0);
        ASSERT_EQ(s.write(l, 8), 0);
        ASSERT_TRUE(s.poll(&st, &ts));
        EXPECT_EQ(st, IBV_WC_SUCCESS);
    }
    s.close();
}

/* DROP_NEXT with N <= retry_cnt: success after N counted transport retries; more than retry_cnt:
 * RETRY_EXC_ERR.  Same-process target here; test_multiproc covers another process's DCT. */
TEST_F(emu_faults, drop_next_counts_retries)
{
    counters p0(DCXEMU_SCOPE_PROCESS), f0(DCXEMU_SCOPE_FABRIC);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DROP_NEXT, l.dct->qp_num, 3), 0);
    memset(l.lbuf.data(), 0x44, 16);
    ASSERT_EQ(l.write(0, 0, 16), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(l.rbuf[15], 0x44);
    EXPECT_EQ((counters(DCXEMU_SCOPE_PROCESS) - p0).transport_retries, 3u);
    EXPECT_EQ((counters(DCXEMU_SCOPE_FABRIC) - f0).transport_retries, 3u);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DROP_NEXT, l.dct->qp_num, 4), 0);
    ASSERT_EQ(l.write(0, 100, 16), 0);
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(l.rbuf[100], 0);
    EXPECT_EQ((counters(DCXEMU_SCOPE_PROCESS) - p0).transport_retries, 6u);
}

/* A fault injected by this process acts in the process that executes the QP (FORCE_STATUS on
 * another process's DCI); the control API refuses a forked child with EPERM. */
TEST(emu_faults_xproc, force_status_on_other_process_and_fork_eperm)
{
    dev d;
    ASSERT_TRUE(
            d.open()); /* attached: a forked child of ours may not use the fabric */
    int r[2], c[2];
    ASSERT_EQ(pipe(r), 0);
    ASSERT_EQ(pipe(c), 0);
    pid_t pid = spawn(g_fabric,
                      { "victim", std::to_string(r[1]), std::to_string(c[0]) });
    ASSERT_GT(pid, 0);
    ::close(r[1]);
    ::close(c[0]);
    uint32_t qpn = 0;
    ASSERT_TRUE(read_full(r[0], &qpn, sizeof(qpn), 10000));
    EXPECT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_FORCE_STATUS, qpn,
                                  IBV_WC_REM_OP_ERR),
              0);
    ASSERT_TRUE(write_full(c[1], "g", 1));
    int st = wait_child(pid, 20000);
    EXPECT_TRUE(st >= 0 && WIFEXITED(st)) << st;
    EXPECT_EQ(WEXITSTATUS(st), 0);
    ::close(r[0]);
    ::close(c[1]);
    pid = fork();
    if (pid == 0) {
        dcxemu_counters x;
        _exit(dcxemu_fault_inject(DCXEMU_FAULT_DELAY, qpn, 1) == EPERM &&
                              dcxemu_fault_clear_all() == EPERM &&
                              dcxemu_counters_read(0, DCXEMU_SCOPE_FABRIC,
                                                   &x) == EPERM ?
                      0 :
                      1);
    }
    ASSERT_GT(pid, 0);
    st = wait_child(pid, 10000);
    EXPECT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    d.close();
}

TEST_F(emu_faults, clear_all)
{
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE, l.dct->qp_num,
                                  1),
              0);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_FORCE_STATUS, l.c.qp->qp_num,
                                  IBV_WC_GENERAL_ERR),
              0);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DELAY, l.c.qp->qp_num, 10000000),
              0);
    ASSERT_EQ(dcxemu_fault_clear_all(), 0);
    ASSERT_EQ(l.write(0, 0, 8), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc)); /* within 5 s: the 10 s delay is gone */
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

/* DCXEMU_FAULTS in a child: status=, drop= (RETRY_EXC after retry_cnt counted retries), delay_us=;
 * a bad spec is ignored. */
TEST(emu_faults_env, coarse_switch)
{
    EXPECT_EQ(run_and_wait({ "envfault", "status" },
                           { "DCXEMU_FAULTS=status=REM_OP_ERR:1,seed=3" }),
              0);
    EXPECT_EQ(run_and_wait({ "envfault", "drop" },
                           { "DCXEMU_FAULTS=drop=1.0" }),
              0);
    EXPECT_EQ(run_and_wait({ "envfault", "delay" },
                           { "DCXEMU_FAULTS=delay_us=150000:1,seed=9" }),
              0);
    EXPECT_EQ(run_and_wait({ "envfault", "none" },
                           { "DCXEMU_FAULTS=drop=0,bogus=1" }),
              0);
}

/* ------------------------------------------------------------------ counters ---- */

/* A known sequence, checked exactly in both scopes (this process is initiator and target). */
TEST(emu_counters, exact_sequence_both_scopes)
{
    loop l;
    ASSERT_TRUE(l.open());
    counters p0(DCXEMU_SCOPE_PROCESS), f0(DCXEMU_SCOPE_FABRIC),
            q0(DCXEMU_SCOPE_PROCESS, 1);
    ibv_wc wc;
    auto done = [&](ibv_cq *cq, ibv_wc_status st) {
        ASSERT_TRUE(poll_one(cq, &wc));
        EXPECT_EQ(wc.status, st);
    };
    ASSERT_EQ(l.write(0, 0, 100), 0);
    done(l.d.cq, IBV_WC_SUCCESS);
    ASSERT_EQ(l.write(0, 0, 100, 2, 0),
              0); /* unsignaled: counted all the same */
    ASSERT_EQ(post_recv(l.srq, l.rmr, l.rbuf.data() + 1000, 64, 1), 0);
    ASSERT_EQ(post_recv(l.srq, l.rmr, l.rbuf.data() + 2000, 64, 2), 0);
    ASSERT_EQ(post_recv(l.srq, l.rmr, l.rbuf.data() + 3000, 64, 3), 0);
    ASSERT_EQ(post_one(l.c, OP_WRITE_IMM, l.lmr->lkey, l.lbuf.data(), 50,
                       l.rmr->rkey, l.raddr(), l.dct->qp_num, KEY),
              0);
    done(l.d.cq, IBV_WC_SUCCESS);
    done(l.rcq, IBV_WC_SUCCESS);
    ASSERT_EQ(post_one(l.c, OP_SEND, l.lmr->lkey, l.lbuf.data(), 30, 0, 0,
                       l.dct->qp_num, KEY),
              0);
    done(l.d.cq, IBV_WC_SUCCESS);
    done(l.rcq, IBV_WC_SUCCESS);
    ASSERT_EQ(post_one(l.c, OP_SEND_IMM, l.lmr->lkey, l.lbuf.data(), 20, 0, 0,
                       l.dct->qp_num, KEY),
              0);
    done(l.d.cq, IBV_WC_SUCCESS);
    done(l.rcq, IBV_WC_SUCCESS);
    ASSERT_EQ(post_one(l.c, OP_READ, l.lmr->lkey, l.lbuf.data(), 64,
                       l.rmr->rkey, l.raddr(), l.dct->qp_num, KEY),
              0);
    done(l.d.cq, IBV_WC_SUCCESS);
    ASSERT_EQ(post_one(l.c, OP_FADD, l.lmr->lkey, l.lbuf.data(), 8, l.rmr->rkey,
                       l.raddr(8), l.dct->qp_num, KEY, 1, IBV_SEND_SIGNALED, 1),
              0);
    done(l.d.cq, IBV_WC_SUCCESS);
    ASSERT_EQ(post_one(l.c, OP_CSWAP, l.lmr->lkey, l.lbuf.data(), 8,
                       l.rmr->rkey, l.raddr(8), l.dct->qp_num, KEY, 1,
                       IBV_SEND_SIGNALED, 0, 5),
              0);
    done(l.d.cq, IBV_WC_SUCCESS);
    /* a key violation, then a flushed WR (not executed) */
    ASSERT_EQ(post_one(l.c, OP_WRITE, l.lmr->lkey, l.lbuf.data(), 8,
                       l.rmr->rkey + 1, l.raddr(), l.dct->qp_num, KEY),
              0);
    ASSERT_EQ(l.write(0, 0, 8), 0);
    done(l.d.cq, IBV_WC_REM_ACCESS_ERR);
    done(l.d.cq, IBV_WC_WR_FLUSH_ERR);
    for (int scope = 0; scope < 2; scope++) {
        counters n = counters(scope) - (scope ? f0 : p0);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_WRITE], 3u) << scope;
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_WRITE_IMM], 1u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_SEND], 1u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_SEND_IMM], 1u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_READ], 1u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_ATOMIC_FA], 1u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_ATOMIC_CS], 1u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_UMR], 0u);
        EXPECT_EQ(n.wr[DCXEMU_CNT_OP_LOCAL_INV], 0u);
        EXPECT_EQ(n.bytes, 100u + 100 + 50 + 30 + 20 + 64 + 8 + 8);
        EXPECT_EQ(n.rnr_retries, 0u);
        EXPECT_EQ(n.transport_retries, 0u);
        EXPECT_EQ(n.key_violations, 1u);
        EXPECT_EQ(n.error_cqes, 2u);
        EXPECT_EQ(n.recv_cqes, 3u);
        /* every signaled WR, the unsignaled write not, the error and the
         * flush both */
        EXPECT_EQ(n.send_cqes, 9u);
    }
    /* device 1 saw nothing; bad arguments */
    counters q = counters(DCXEMU_SCOPE_PROCESS, 1) - q0;
    EXPECT_EQ(q.wr[DCXEMU_CNT_OP_WRITE] + q.bytes + q.recv_cqes + q.send_cqes,
              0u);
    dcxemu_counters x;
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_counters_read(-1, DCXEMU_SCOPE_FABRIC, &x));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_counters_read(16, DCXEMU_SCOPE_FABRIC, &x));
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu_counters_read(0, (dcxemu_counter_scope)2, &x));
    EXPECT_ERRNO_EQ(EINVAL,
                    dcxemu_counters_read(0, DCXEMU_SCOPE_FABRIC, nullptr));
    l.close();
}

/* RNR retries are counted (a SEND waits for a receive WQE). */
TEST(emu_counters, rnr_retries)
{
    loop l;
    ASSERT_TRUE(l.open());
    counters p0(DCXEMU_SCOPE_PROCESS);
    ASSERT_EQ(post_one(l.c, OP_SEND, l.lmr->lkey, l.lbuf.data(), 8, 0, 0,
                       l.dct->qp_num, KEY),
              0);
    ASSERT_TRUE(wait_until([&] {
        return (counters(DCXEMU_SCOPE_PROCESS) - p0).rnr_retries > 0;
    }));
    EXPECT_TRUE(
            cq_empty_now(l.d.cq)); /* waiting for a receive WQE (rnr_retry 7) */
    ASSERT_EQ(post_recv(l.srq, l.rmr, l.rbuf.data(), 64, 1), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(poll_one(l.rcq, &wc));
    EXPECT_GE((counters(DCXEMU_SCOPE_PROCESS) - p0).rnr_retries, 1u);
    l.close();
}

/* The live-object count of this process follows creation and destruction of send QPs and DCTs. */
TEST(emu_counters, objects_read)
{
    dcxemu_objects o0, o1, o2;
    ASSERT_ERRNO_EQ(EINVAL, dcxemu_objects_read(nullptr));
    ASSERT_EQ(dcxemu_objects_read(&o0), 0);
    loop l;
    ASSERT_TRUE(l.open()); /* one DCI, one DCT */
    ASSERT_EQ(dcxemu_objects_read(&o1), 0);
    EXPECT_EQ(o1.qps, o0.qps + 1);
    EXPECT_EQ(o1.dcts, o0.dcts + 1);
    l.close();
    ASSERT_EQ(dcxemu_objects_read(&o2), 0);
    EXPECT_EQ(o2.qps, o0.qps);
    EXPECT_EQ(o2.dcts, o0.dcts);
}

/* Fabric counters survive a member's exit (and reaping); its work is not in our process scope. */
TEST(emu_counters, fabric_scope_survives_exit)
{
    counters p0(DCXEMU_SCOPE_PROCESS), f0(DCXEMU_SCOPE_FABRIC);
    ASSERT_EQ(run_and_wait({ "counted" }, {}), 0);
    counters f = counters(DCXEMU_SCOPE_FABRIC) - f0,
             p = counters(DCXEMU_SCOPE_PROCESS) - p0;
    EXPECT_EQ(f.wr[DCXEMU_CNT_OP_WRITE], 3u);
    EXPECT_EQ(f.wr[DCXEMU_CNT_OP_READ], 1u);
    EXPECT_EQ(f.bytes, 308u);
    EXPECT_EQ(p.wr[DCXEMU_CNT_OP_WRITE] + p.wr[DCXEMU_CNT_OP_READ] + p.bytes,
              0u);
}

static std::string stat_tool()
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return "";
    exe[n] = '\0';
    std::string dir(exe);
    for (int up = 0; up < 5; up++) {
        dir           = dir.substr(0, dir.rfind('/'));
        std::string p = dir + "/src/dcxemu/dcxemu-stat";
        if (access(p.c_str(), X_OK) == 0)
            return p;
    }
    return "";
}

static std::string run_capture(const std::string &cmd, int *rc)
{
    std::string out;
    FILE *f = popen(cmd.c_str(), "r");
    char buf[4096];
    if (f == nullptr)
        return out;
    while (fgets(buf, sizeof(buf), f) != nullptr)
        out += buf;
    int st = pclose(f);
    *rc    = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* dcxemu-stat -c prints the fabric-wide counters per device, read-only; a missing fabric is
 * reported with exit 1 and not created. */
TEST(emu_counters, stat_tool)
{
    std::string tool = stat_tool();
    ASSERT_FALSE(tool.empty())
            << "dcxemu-stat not found next to the build tree";
    loop l;
    ASSERT_TRUE(l.open());
    ASSERT_EQ(l.write(0, 0, 123), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    counters f(DCXEMU_SCOPE_FABRIC);
    int rc          = -1;
    std::string out = run_capture(tool + " -c -f " + g_fabric, &rc);
    EXPECT_EQ(rc, 0);
    std::string want = "dcxemu0 write=" +
                       std::to_string(f.wr[DCXEMU_CNT_OP_WRITE]) + " ";
    EXPECT_EQ(out.compare(0, want.size(), want), 0) << out;
    EXPECT_NE(out.find(" bytes=" + std::to_string(f.bytes) + " "),
              std::string::npos)
            << out;
    EXPECT_NE(out.find("\ndcxemu1 write="), std::string::npos)
            << out; /* 2 devices */
    out = run_capture("DCXEMU_FABRIC=" + g_fabric + " " + tool, &rc);
    EXPECT_EQ(rc, 0);
    EXPECT_NE(out.find("  write "), std::string::npos) << out;
    std::string none = g_fabric + "-absent";
    out              = run_capture(tool + " -f " + none + " 2>&1", &rc);
    EXPECT_EQ(rc, 1);
    EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
    struct stat st;
    EXPECT_NE(stat(("/dev/shm/" + none).c_str(), &st), 0);
    /* the live fabric is undisturbed */
    ASSERT_EQ(l.write(0, 0, 8), 0);
    ASSERT_TRUE(poll_one(l.d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    l.close();
}

/* DCXEMU_TRACE=/path: one line per WR posted and executed and per CQE. */
TEST(emu_trace, lines_per_wr_and_cqe)
{
    char path[] = P_tmpdir "/dcxemu-trace-XXXXXX";
    int fd      = mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    EXPECT_EQ(run_and_wait({ "traced" },
                           { std::string("DCXEMU_TRACE=") + path }),
              0);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    unlink(path);
    EXPECT_NE(t.find(" post qp=0x"), std::string::npos) << t;
    EXPECT_NE(t.find(" op=write len=77 wr_id=0x4242"), std::string::npos) << t;
    EXPECT_NE(t.find(" exec qp=0x"), std::string::npos) << t;
    EXPECT_NE(t.find("len=77 wr_id=0x4242 status=0"), std::string::npos) << t;
    EXPECT_NE(t.find(" cqe qp=0x"), std::string::npos) << t;
    EXPECT_NE(t.find("send opcode=1 len=0 wr_id=0x4242 status=0"),
              std::string::npos)
            << t;
}
