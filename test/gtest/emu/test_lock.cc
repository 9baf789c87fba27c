/* Locking of execution: a data copy runs with no fabric-wide lock held, so one pair's copy does not
 * hold up another pair, and a deregistration waits for a copy through its key that began before
 * it.  The copy is held still by the model's test hook (dcxemu_test_hook), not by a timing. */
#include "emu_test.h"

#include <fcntl.h>
#include <stdlib.h>

#include <condition_variable>
#include <mutex>
#include <thread>

using namespace emu;

namespace {

const uint64_t A_KEY       = 0xa11ce0000000000aull;
const uint64_t B_KEY       = 0xb0b000000000000bull;
const uint32_t A_LEN       = 65536;
const unsigned char A_BYTE = 0xa5;
const int BOUND_MS = 10000; /* fall-back only: passing never waits for it */

/* In the writer: the hook stops the first copy of our DCI, says so ("e" and the QP number on
 * stdout) and waits for any byte (or EOF) on stdin. */
uint32_t g_writer_qpn;

void writer_hook(dcxemu_test_event ev, uint32_t qpn, uint64_t len, void *arg)
{
    static bool once;
    char c;
    if (ev != DCXEMU_TEST_COPY_START || qpn != g_writer_qpn || once) {
        return;
    }
    once = true;
    if (write_full(1, "e", 1) && write_full(1, &qpn, sizeof(qpn))) {
        while (read(0, &c, 1) < 0 && errno == EINTR) {
        }
    }
}

/* lock_writer <lid> <dctn> <rkey> <addr>: pair A's initiator, in its own process (so its
 * executor is its own, in both execution modes).  WRITEs A_LEN bytes of A_BYTE to the target,
 * paused in the copy by the hook; reports the send CQE's status as one byte. */
EMU_CHILD(lock_writer)
{
    if (argc < 4)
        return 2;
    uint16_t lid  = (uint16_t)strtoul(argv[0], nullptr, 0);
    uint32_t dctn = (uint32_t)strtoul(argv[1], nullptr, 0);
    uint32_t rkey = (uint32_t)strtoul(argv[2], nullptr, 0);
    uint64_t addr = strtoull(argv[3], nullptr, 0);
    std::vector<char> buf(A_LEN, (char)A_BYTE);
    dev d;
    dci c;
    ibv_wc wc;
    if (!d.open())
        return 3;
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr || !make_dci(d, c, lid))
        return 4;
    g_writer_qpn = c.qp->qp_num;
    dcxemu_test_hook(writer_hook, nullptr);
    if (post_one(c, OP_WRITE, mr->lkey, buf.data(), A_LEN, rkey, addr, dctn,
                 A_KEY, 7) != 0) {
        return 5;
    }
    if (!poll_one(d.cq, &wc, 30000))
        return 6;
    unsigned char st = (unsigned char)wc.status;
    if (!write_full(1, &st, 1))
        return 7;
    dcxemu_test_hook(nullptr, nullptr);
    destroy_dci(c);
    dcxemu_ibv_dereg_mr(mr);
    d.close();
    return 0;
}

/* A flag a thread sets, waited for with a bounded fall-back. */
struct signal_flag {
    std::mutex m;
    std::condition_variable cv;
    bool set       = false;
    uint32_t value = 0;
    void raise(uint32_t v = 0)
    {
        std::lock_guard<std::mutex> g(m);
        set   = true;
        value = v;
        cv.notify_all();
    }
    bool wait(int ms)
    {
        std::unique_lock<std::mutex> g(m);
        return cv.wait_for(g, std::chrono::milliseconds(ms),
                           [this] { return set; });
    }
    bool is_set()
    {
        std::lock_guard<std::mutex> g(m);
        return set;
    }
};

signal_flag g_copy_wait;

void waiter_hook(dcxemu_test_event ev, uint32_t qpn, uint64_t len, void *arg)
{
    if (ev == DCXEMU_TEST_COPY_WAIT) {
        g_copy_wait.raise(qpn);
    }
}

bool all_bytes(const std::vector<char> &v, unsigned char b)
{
    for (char c : v) {
        if ((unsigned char)c != b)
            return false;
    }
    return true;
}

} // namespace

/* Pair A's copy is paused (its source process sits in the hook, no fabric lock held): pair B's
 * WRITE and SEND complete meanwhile, with their data; then a deregistration of A's target MR
 * waits for A's copy and returns only once the copy is over, with every byte in place. */
TEST(emu_lock, copy_holds_no_fabric_lock)
{
    dev d;
    ASSERT_TRUE(d.open());
    ibv_cq *rcq  = dcxemu_ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
    ibv_srq *srq = create_srq(d, 16, 1);
    ASSERT_TRUE(rcq && srq);
    ibv_qp *dct_a = create_dct(d, srq, A_KEY, rcq),
           *dct_b = create_dct(d, srq, B_KEY, rcq);
    ASSERT_TRUE(dct_a && dct_b);
    ASSERT_EQ(dct_to_rtr(dct_a), 0);
    ASSERT_EQ(dct_to_rtr(dct_b), 0);
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    std::vector<char> abuf(A_LEN, 0), bsrc(8192), bdst(4096, 0), brecv(4096, 0);
    for (size_t i = 0; i < bsrc.size(); i++)
        bsrc[i] = (char)(i * 13 + 1);
    ibv_mr *amr  = dcxemu_ibv_reg_mr(d.pd, abuf.data(), abuf.size(), acc);
    ibv_mr *bsmr = dcxemu_ibv_reg_mr(d.pd, bsrc.data(), bsrc.size(), acc);
    ibv_mr *bdmr = dcxemu_ibv_reg_mr(d.pd, bdst.data(), bdst.size(), acc);
    ibv_mr *brmr = dcxemu_ibv_reg_mr(d.pd, brecv.data(), brecv.size(), acc);
    ASSERT_TRUE(amr && bsmr && bdmr && brmr);
    ASSERT_EQ(post_recv(srq, brmr, brecv.data(), (uint32_t)brecv.size(), 99),
              0);
    dci b;
    ASSERT_TRUE(make_dci(d, b, d.lid));

    /* pair A: the writer process, paused inside its copy */
    int in[2], out[2];
    ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    pid_t pid = spawn_io(g_fabric,
                         { "lock_writer", std::to_string(d.lid),
                           std::to_string(dct_a->qp_num),
                           std::to_string(amr->rkey),
                           std::to_string((uintptr_t)abuf.data()) },
                         {}, in[0], out[1]);
    ASSERT_GT(pid, 0);
    ::close(in[0]);
    ::close(out[1]);
    char e         = 0;
    uint32_t a_qpn = 0;
    bool entered   = read_full(out[0], &e, 1, BOUND_MS) && e == 'e' &&
                   read_full(out[0], &a_qpn, sizeof(a_qpn), BOUND_MS);
    auto release_a = [&] {
        if (in[1] >= 0) {
            EXPECT_TRUE(write_full(in[1], "g", 1));
            ::close(in[1]);
            in[1] = -1;
        }
    };
    if (!entered) {
        release_a();
        wait_child(pid, BOUND_MS);
        FAIL() << "pair A's copy never reached the hook";
    }

    /* pair B, from another thread (it would block in the fabric lock if A held it) */
    signal_flag b_done;
    ibv_wc bwc[2];
    int b_polled = 0;
    std::thread tb([&] {
        if (post_one(b, OP_WRITE, bsmr->lkey, bsrc.data(), 4096, bdmr->rkey,
                     (uintptr_t)bdst.data(), dct_b->qp_num, B_KEY, 1) == 0 &&
            post_one(b, OP_SEND, bsmr->lkey, bsrc.data() + 4096, 512, 0, 0,
                     dct_b->qp_num, B_KEY, 2) == 0) {
            while (b_polled < 2 && poll_one(d.cq, &bwc[b_polled], BOUND_MS)) {
                b_polled++;
            }
        }
        b_done.raise();
    });
    bool b_in_time = b_done.wait(BOUND_MS);
    EXPECT_TRUE(b_in_time) << "pair B waited for pair A's copy";
    EXPECT_TRUE(all_bytes(abuf, 0)) << "pair A's copy was not paused";
    if (!b_in_time) {
        release_a(); /* let A (and so B) finish, to end cleanly */
    }
    tb.join();
    ASSERT_EQ(b_polled, 2);
    EXPECT_EQ(bwc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(bwc[0].wr_id, 1u);
    EXPECT_EQ(bwc[1].status, IBV_WC_SUCCESS);
    EXPECT_EQ(bwc[1].wr_id, 2u);
    EXPECT_EQ(memcmp(bdst.data(), bsrc.data(), 4096), 0);
    ibv_wc rwc;
    ASSERT_TRUE(poll_one(rcq, &rwc, BOUND_MS));
    EXPECT_EQ(rwc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rwc.wr_id, 99u);
    EXPECT_EQ(rwc.byte_len, 512u);
    EXPECT_EQ(memcmp(brecv.data(), bsrc.data() + 4096, 512), 0);

    /* deregistering A's target while A's copy is paused waits for the copy */
    signal_flag dereg_done;
    bool full_at_return = false;
    int dereg_ret       = -1;
    dcxemu_test_hook(waiter_hook, nullptr);
    std::thread td([&] {
        dereg_ret      = dcxemu_ibv_dereg_mr(amr);
        full_at_return = all_bytes(abuf, A_BYTE);
        dereg_done.raise();
    });
    bool waited = g_copy_wait.wait(BOUND_MS);
    EXPECT_TRUE(waited) << "the deregistration did not wait for pair A's copy";
    if (waited) {
        EXPECT_EQ(g_copy_wait.value, a_qpn);
    }
    EXPECT_FALSE(dereg_done.is_set())
            << "deregistered while a copy through the key was paused";
    release_a();
    td.join();
    dcxemu_test_hook(nullptr, nullptr);
    EXPECT_EQ(dereg_ret, 0);
    EXPECT_TRUE(full_at_return)
            << "the deregistration returned before the copy was over";
    EXPECT_TRUE(all_bytes(abuf, A_BYTE));
    unsigned char st = 0xff;
    EXPECT_TRUE(read_full(out[0], &st, 1, BOUND_MS));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    int ws = wait_child(pid, BOUND_MS);
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
            << "writer status " << ws;
    ::close(out[0]);

    destroy_dci(b);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(dct_a), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(dct_b), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_srq(srq), 0);
    for (ibv_mr *m : { bsmr, bdmr, brmr }) {
        EXPECT_EQ(dcxemu_ibv_dereg_mr(m), 0);
    }
    EXPECT_EQ(dcxemu_ibv_destroy_cq(rcq), 0);
    d.close();
}
