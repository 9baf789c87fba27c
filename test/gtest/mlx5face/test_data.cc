/* Data and completions through rdma-core on the face: every operation dcx
 * uses, to a DCT in this process and in another one, completions read through
 * ibv_poll_cq and through the ibv_cq_ex poll API, the errors a requester sees,
 * completion events, and one scenario run through both of the device's faces
 * with the same outcome.  The model's counters prove the device did the
 * work.  Not written yet here: RC QPs between processes and UMR (the mlx5
 * suite runs them through ibv_rc_pingpong, perftest, UCX and face_devx). */
#include "mlx5face_test.h"

#include <errno.h>
#include <poll.h>

using namespace mlx5face;

namespace {

/* Where a DCI's WRs go. */
struct remote {
    uint16_t lid;
    uint32_t dctn;
    uint32_t rkey;
    uint64_t addr;
};

/* The DCT side of a test, in this process or in a child. */
class peer {
public:
    virtual ~peer()
    {
    }
    virtual remote where() = 0;
    /* n receives of len bytes each, at off + k * len, wr_id + k */
    virtual void
    post_recv(unsigned n, uint64_t wr_id, size_t off, uint32_t len) = 0;
    virtual std::vector<completion> poll_recv(unsigned n, bool ex)  = 0;
    virtual std::vector<char> read(size_t off, size_t len)          = 0;
    virtual void set_word(size_t off, uint64_t value)               = 0;
    virtual dcxemu_counters counters_now()                          = 0;
    virtual bool same_process()                                     = 0;
};

class local_peer : public peer {
public:
    explicit local_peer(device &d)
    {
        EXPECT_TRUE(m_t.create(d, 1 << 17));
    }
    ~local_peer()
    {
        m_t.destroy();
    }
    target &t()
    {
        return m_t;
    }

    remote where() override
    {
        return { m_t.d->lid, m_t.dctn(), m_t.mem.mr->rkey, m_t.mem.addr() };
    }
    void
    post_recv(unsigned n, uint64_t wr_id, size_t off, uint32_t len) override
    {
        for (unsigned k = 0; k < n; k++) {
            EXPECT_EQ(0, m_t.post_recv(wr_id + k, off + k * len, len));
        }
    }
    std::vector<completion> poll_recv(unsigned n, bool ex) override
    {
        std::vector<completion> out;
        if (ex) {
            EXPECT_TRUE(poll_ex_n(m_t.cqx, n, &out));
        }
        while (!ex && (out.size() < n)) {
            completion c;
            EXPECT_TRUE(poll_legacy(m_t.cq, &c));
            out.push_back(c);
        }
        out.resize(n);
        return out;
    }
    std::vector<char> read(size_t off, size_t len) override
    {
        return std::vector<char>(m_t.mem.ptr(off), m_t.mem.ptr(off + len));
    }
    void set_word(size_t off, uint64_t value) override
    {
        m_t.mem.word(off) = value;
    }
    dcxemu_counters counters_now() override
    {
        return counters().c;
    }
    bool same_process() override
    {
        return true;
    }

private:
    target m_t;
};

enum {
    CMD_EXIT,
    CMD_RECV,
    CMD_POLL,
    CMD_READ,
    CMD_SET,
    CMD_COUNTERS
};

/* The DCT side in a child process of its own, driven over its pipes. */
class child_peer : public peer {
public:
    child_peer() : m_child("mlx5face_target")
    {
        auto v = dcx_test::msg_u64s(dcx_test::recv_msg(m_child.from_fd()));
        EXPECT_EQ(4u, v.size());
        if (v.size() == 4) {
            m_where = { (uint16_t)v[0], (uint32_t)v[1], (uint32_t)v[2], v[3] };
        }
    }
    ~child_peer()
    {
        cmd({ CMD_EXIT });
        EXPECT_EQ(0, m_child.wait());
    }
    remote where() override
    {
        return m_where;
    }
    void
    post_recv(unsigned n, uint64_t wr_id, size_t off, uint32_t len) override
    {
        EXPECT_EQ(0u, dcx_test::msg_u64(cmd({ CMD_RECV, n, wr_id, off, len })));
    }
    std::vector<completion> poll_recv(unsigned n, bool ex) override
    {
        auto v = dcx_test::msg_u64s(cmd({ CMD_POLL, n, ex }));
        std::vector<completion> out;
        for (size_t at = 0; at + 9 <= v.size(); at += 9) {
            out.push_back(msg_completion(v, at));
        }
        EXPECT_EQ(n, out.size());
        return out;
    }
    std::vector<char> read(size_t off, size_t len) override
    {
        return cmd({ CMD_READ, off, len });
    }
    void set_word(size_t off, uint64_t value) override
    {
        cmd({ CMD_SET, off, value });
    }
    bool same_process() override
    {
        return false;
    }
    dcxemu_counters counters_now() override
    {
        dcxemu_counters c;
        std::vector<char> m = cmd({ CMD_COUNTERS });
        memset(&c, 0, sizeof(c));
        EXPECT_EQ(sizeof(c), m.size());
        memcpy(&c, m.data(), std::min(sizeof(c), m.size()));
        return c;
    }

private:
    std::vector<char> cmd(const std::vector<uint64_t> &args)
    {
        dcx_test::send_msg(m_child.to_fd(), dcx_test::u64s_msg(args));
        return dcx_test::recv_msg(m_child.from_fd());
    }

    dcx_test::child m_child;
    remote m_where = {};
};

} // namespace

static void serve_target(device &d, int in_fd, int out_fd);

/* The DCT, its SRQ and memory, in a process of their own. */
DCX_CHILD_ROLE(mlx5face_target)
{
    device d;
    if (!d.open(face_verbs())) {
        return 1;
    }
    serve_target(d, in_fd, out_fd);
    d.close();
    return ::testing::Test::HasFailure() ? 1 : 0;
}

static void serve_target(device &d, int in_fd, int out_fd)
{
    local_peer p(d);
    remote r = p.where();
    dcx_test::send_msg(out_fd,
                       dcx_test::u64s_msg({ r.lid, r.dctn, r.rkey, r.addr }));
    for (;;) {
        auto v = dcx_test::msg_u64s(dcx_test::recv_msg(in_fd, 120.0));
        std::vector<char> reply;
        if (v.empty() || (v[0] == CMD_EXIT)) {
            break;
        }
        switch (v[0]) {
        case CMD_RECV:
            p.post_recv((unsigned)v[1], v[2], v[3], (uint32_t)v[4]);
            reply = dcx_test::u64_msg(::testing::Test::HasFailure());
            break;
        case CMD_POLL: {
            std::vector<uint64_t> all;
            for (const auto &c : p.poll_recv((unsigned)v[1], v[2] != 0)) {
                auto m = completion_msg(c);
                all.insert(all.end(), m.begin(), m.end());
            }
            reply = dcx_test::u64s_msg(all);
            break;
        }
        case CMD_READ:
            reply = p.read(v[1], v[2]);
            break;
        case CMD_SET:
            p.set_word(v[1], v[2]);
            break;
        case CMD_COUNTERS: {
            dcxemu_counters c = p.counters_now();
            reply.assign((char *)&c, (char *)&c + sizeof(c));
            break;
        }
        }
        dcx_test::send_msg(out_fd, reply);
    }
    dcx_test::send_msg(out_fd, {});
}

namespace {

struct mlx5face_data : public ::testing::Test {
    device d;

    void SetUp() override
    {
        ASSERT_TRUE(d.open(face_verbs()));
    }
    void TearDown() override
    {
        d.close();
    }

    completion next(initiator &i, bool ex)
    {
        completion c;
        memset(&c, 0, sizeof(c));
        EXPECT_TRUE(ex ? poll_ex(i.cqx, &c) : poll_legacy(i.cq, &c));
        return c;
    }

    completion next_recv(target &t)
    {
        completion c;
        memset(&c, 0, sizeof(c));
        EXPECT_TRUE(poll_legacy(t.cq, &c));
        return c;
    }

    void expect_done(initiator &i, bool ex, uint64_t wr_id, int opcode,
                     int status = IBV_WC_SUCCESS)
    {
        completion c = next(i, ex);
        EXPECT_EQ(status, c.status)
                << ibv_wc_status_str((ibv_wc_status)c.status);
        EXPECT_EQ(wr_id, c.wr_id);
        EXPECT_EQ(i.qp->qp_num, c.qp_num);
        if (status == IBV_WC_SUCCESS) {
            EXPECT_EQ(opcode, c.opcode);
        }
    }

    /* Every operation dcx uses, to peer p, completions read through one of
     * the poll APIs on both sides; the counters of both processes. */
    void operations(peer &p, bool ex)
    {
        remote r = p.where();
        initiator i;
        ASSERT_TRUE(i.create(d, r.lid, 64, 10, 3, false, nullptr, 1 << 17));
        i.dctn = r.dctn;
        counters c0;
        dcxemu_counters p0 = p.counters_now();

        /* write, and read it back elsewhere */
        dcx_test::fill_data(i.mem.ptr(), 4096, 10);
        ASSERT_EQ(0, i.write(1, 0, 4096, r.rkey, r.addr));
        expect_done(i, ex, 1, IBV_WC_RDMA_WRITE);
        std::vector<char> got = p.read(0, 4096);
        EXPECT_EQ(-1, dcx_test::check_data(got.data(), 4096, 10));
        ASSERT_EQ(0, i.read(2, 8192, 4096, r.rkey, r.addr));
        completion c = next(i, ex);
        EXPECT_EQ(IBV_WC_SUCCESS, c.status);
        EXPECT_EQ(IBV_WC_RDMA_READ, c.opcode);
        EXPECT_EQ(4096u, c.byte_len);
        EXPECT_EQ(-1, dcx_test::check_data(i.mem.ptr(8192), 4096, 10));

        /* sends, with and without immediate data, into the SRQ; the short
         * one is scattered into the CQE (libmlx5 copies it out) */
        p.post_recv(2, 500, 16384, 1024);
        dcx_test::fill_data(i.mem.ptr(0), 24, 11);
        dcx_test::fill_data(i.mem.ptr(1024), 300, 12);
        ASSERT_EQ(0, i.send(3, 0, 24, false, 0));
        ASSERT_EQ(0, i.send(4, 1024, 300, true, 0xdeadbeef));
        if (ex) { /* both in one poll sequence where both are there */
            std::vector<completion> sc;
            ASSERT_TRUE(poll_ex_n(i.cqx, 2, &sc));
            for (int k = 0; k < 2; k++) {
                EXPECT_EQ(IBV_WC_SUCCESS, sc[k].status);
                EXPECT_EQ(3u + k, sc[k].wr_id);
                EXPECT_EQ(IBV_WC_SEND, sc[k].opcode);
            }
        } else {
            expect_done(i, ex, 3, IBV_WC_SEND);
            expect_done(i, ex, 4, IBV_WC_SEND);
        }
        std::vector<completion> rc = p.poll_recv(2, ex);
        ASSERT_EQ(2u, rc.size());
        for (int k = 0; k < 2; k++) {
            EXPECT_EQ(IBV_WC_SUCCESS, rc[k].status);
            EXPECT_EQ(IBV_WC_RECV, rc[k].opcode);
            EXPECT_EQ(500u + k, rc[k].wr_id); /* the SRQ WQE's */
            EXPECT_EQ(k ? 300u : 24u, rc[k].byte_len);
            if (k > 0) { /* a scattered one's data is where src_qp was */
                EXPECT_EQ(i.qp->qp_num, rc[k].src_qp);
            }
            EXPECT_EQ(r.dctn, rc[k].qp_num);
        }
        EXPECT_FALSE(rc[0].wc_flags & IBV_WC_WITH_IMM);
        EXPECT_TRUE(rc[1].wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(0xdeadbeefu, rc[1].imm);
        got = p.read(16384, 2048);
        EXPECT_EQ(-1, dcx_test::check_data(got.data(), 24, 11));
        EXPECT_EQ(-1, dcx_test::check_data(got.data() + 1024, 300, 12));

        /* atomics: the old value comes back, the new one lands */
        p.set_word(32768, 5);
        ASSERT_EQ(0, i.cswap(5, 40000, r.rkey, r.addr + 32768, 5, 50));
        c = next(i, ex);
        EXPECT_EQ(IBV_WC_SUCCESS, c.status);
        EXPECT_EQ(IBV_WC_COMP_SWAP, c.opcode);
        EXPECT_EQ(8u, c.byte_len);
        EXPECT_EQ(5u, i.mem.word(40000));
        ASSERT_EQ(0, i.fadd(6, 40008, r.rkey, r.addr + 32768, 7));
        c = next(i, ex);
        EXPECT_EQ(IBV_WC_FETCH_ADD, c.opcode);
        EXPECT_EQ(8u, c.byte_len);
        EXPECT_EQ(50u, i.mem.word(40008));
        uint64_t word;
        got = p.read(32768, 8);
        memcpy(&word, got.data(), 8);
        EXPECT_EQ(57u, word);

        /* 64 KiB in one write */
        dcx_test::fill_data(i.mem.ptr(), 65536, 13);
        ASSERT_EQ(0, i.write(7, 0, 65536, r.rkey, r.addr + 65536));
        expect_done(i, ex, 7, IBV_WC_RDMA_WRITE);
        got = p.read(65536, 65536);
        EXPECT_EQ(-1, dcx_test::check_data(got.data(), 65536, 13));

        counters s = counters() - c0;
        EXPECT_EQ(2u, s.wr(DCXEMU_CNT_OP_WRITE));
        EXPECT_EQ(1u, s.wr(DCXEMU_CNT_OP_READ));
        EXPECT_EQ(1u, s.wr(DCXEMU_CNT_OP_SEND));
        EXPECT_EQ(1u, s.wr(DCXEMU_CNT_OP_SEND_IMM));
        EXPECT_EQ(1u, s.wr(DCXEMU_CNT_OP_ATOMIC_CS));
        EXPECT_EQ(1u, s.wr(DCXEMU_CNT_OP_ATOMIC_FA));
        EXPECT_EQ(4096u * 2 + 24 + 300 + 16 + 65536, s.c.bytes);
        EXPECT_EQ(0u, s.c.error_cqes);
        /* The receives were posted before the sends, so hardware has no RNR.
         * Another process's SRQ WQEs reach the device only when that
         * process's face takes them (its engine, woken by the empty SRQ or
         * every millisecond): there the sender may see RNR retries. */
        if (p.same_process()) {
            EXPECT_EQ(0u, s.c.rnr_retries);
        }
        dcxemu_counters pn = p.counters_now();
        EXPECT_EQ(2u, pn.recv_cqes - p0.recv_cqes);
        i.destroy();
    }
};

} // namespace

TEST_F(mlx5face_data, one_process_poll_cq)
{
    local_peer p(d);
    operations(p, false);
}

TEST_F(mlx5face_data, one_process_poll_ex)
{
    local_peer p(d);
    operations(p, true);
}

TEST_F(mlx5face_data, two_processes_poll_cq)
{
    child_peer p;
    operations(p, false);
}

TEST_F(mlx5face_data, two_processes_poll_ex)
{
    child_peer p;
    operations(p, true);
}

/* A bad rkey: REM_ACCESS_ERR with the device's syndrome, the QP in error,
 * and what follows flushed. */
TEST_F(mlx5face_data, remote_access_error_then_flush)
{
    local_peer p(d);
    remote r = p.where();
    initiator i;
    ASSERT_TRUE(i.create(d, r.lid));
    i.dctn = r.dctn;
    counters c0;

    ASSERT_EQ(0, i.write(1, 0, 64, r.rkey ^ 0x100, r.addr));
    ASSERT_EQ(0, i.write(2, 0, 64, r.rkey, r.addr));
    ASSERT_EQ(0, i.write(3, 0, 64, r.rkey, r.addr));
    completion c = next(i, true);
    EXPECT_EQ(1u, c.wr_id);
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, c.status);
    EXPECT_EQ(0x13u, c.vendor_err); /* remote access error syndrome */
    for (uint64_t id = 2; id <= 3; id++) {
        c = next(i, id == 2);
        EXPECT_EQ(id, c.wr_id);
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, c.status);
    }
    EXPECT_TRUE(cq_empty(i.cq));
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(0, ibv_query_qp(i.qp, &qa, IBV_QP_STATE, &qi));
    EXPECT_EQ(IBV_QPS_ERR, qa.qp_state);

    counters s = counters() - c0;
    EXPECT_EQ(1u, s.wr(DCXEMU_CNT_OP_WRITE)); /* flushed WRs never run */
    EXPECT_EQ(1u, s.c.key_violations);
    EXPECT_EQ(3u, s.c.error_cqes);
    EXPECT_EQ(3u, s.c.send_cqes);
    i.destroy();
}

/* No DCT behind the number: transport retries, then RETRY_EXC_ERR. */
TEST_F(mlx5face_data, missing_dct_retry_exceeded)
{
    initiator i;
    ASSERT_TRUE(i.create(d, d.lid, 16, 4, 2));
    i.dctn = 0xfedcb;
    counters c0;

    ASSERT_EQ(0, i.write(1, 0, 64, 0x1234, 0x10000));
    completion c = next(i, false);
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, c.status)
            << ibv_wc_status_str((ibv_wc_status)c.status);
    EXPECT_EQ(1u, c.wr_id);
    counters s = counters() - c0;
    EXPECT_EQ(2u, s.c.transport_retries);
    EXPECT_EQ(1u, s.c.error_cqes);
    i.destroy();
}

/* A completion on an armed CQ: an event on the channel (its fd polls
 * readable), acknowledged, re-armed for the next; none without an arm. */
TEST_F(mlx5face_data, completion_events)
{
    local_peer p(d);
    remote r             = p.where();
    ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
    ASSERT_NE(nullptr, ch);
    initiator i;
    ASSERT_TRUE(i.create(d, r.lid, 16, 10, 3, false, ch));
    i.dctn = r.dctn;
    counters c0;

    for (uint64_t id = 1; id <= 2; id++) {
        ASSERT_EQ(0, ibv_req_notify_cq(i.cq, 0));
        ASSERT_EQ(0, i.write(id, 0, 64, r.rkey, r.addr));
        struct pollfd pfd = { ch->fd, POLLIN, 0 };
        ASSERT_EQ(1, poll(&pfd, 1, 10000));
        ibv_cq *ev_cq = nullptr;
        void *ev_ctx  = nullptr;
        ASSERT_EQ(0, ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
        EXPECT_EQ(i.cq, ev_cq);
        ibv_ack_cq_events(ev_cq, 1);
        completion c = next(i, false);
        EXPECT_EQ(id, c.wr_id);
        EXPECT_EQ(IBV_WC_SUCCESS, c.status);
    }
    /* not armed: the completion comes, the event does not */
    ASSERT_EQ(0, i.write(3, 0, 64, r.rkey, r.addr));
    EXPECT_EQ(3u, next(i, false).wr_id);
    struct pollfd pfd = { ch->fd, POLLIN, 0 };
    EXPECT_EQ(0, poll(&pfd, 1, 100));
    EXPECT_EQ(3u, (counters() - c0).wr(DCXEMU_CNT_OP_WRITE));

    i.destroy();
    EXPECT_EQ(0, ibv_destroy_comp_channel(ch));
}

/* A CQ armed for solicited events only: a send without the solicited flag
 * completes without an event, a solicited one raises it. */
TEST_F(mlx5face_data, solicited_only_events)
{
    ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
    ASSERT_NE(nullptr, ch);
    target t;
    ASSERT_TRUE(t.create(d, 65536, DC_KEY, ch));
    initiator i;
    ASSERT_TRUE(i.create(d, d.lid));
    i.dctn            = t.dctn();
    struct pollfd pfd = { ch->fd, POLLIN, 0 };

    ASSERT_EQ(0, t.post_recv(1, 0, 64));
    ASSERT_EQ(0, t.post_recv(2, 64, 64));
    ASSERT_EQ(0, ibv_req_notify_cq(t.cq, 1));
    ASSERT_EQ(0, i.send(10, 0, 8, false, 0));
    EXPECT_EQ(IBV_WC_SUCCESS, next(i, false).status);
    EXPECT_EQ(1u, next_recv(t).wr_id);
    EXPECT_EQ(0, poll(&pfd, 1, 100)) << "an unsolicited send raised the event";

    ASSERT_EQ(0, i.send(11, 0, 8, false, 0,
                        IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    EXPECT_EQ(IBV_WC_SUCCESS, next(i, false).status);
    ASSERT_EQ(1, poll(&pfd, 1, 10000)) << "the solicited send raised none";
    ibv_cq *ev_cq = nullptr;
    void *ev_ctx  = nullptr;
    ASSERT_EQ(0, ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
    EXPECT_EQ(t.cq, ev_cq);
    ibv_ack_cq_events(ev_cq, 1);
    EXPECT_EQ(2u, next_recv(t).wr_id);

    i.destroy();
    t.destroy();
    EXPECT_EQ(0, ibv_destroy_comp_channel(ch));
}

namespace {

/* What one run of the differential scenario gave. */
struct outcome {
    std::vector<completion> send, recv;
    std::vector<char> remote_bytes, local_bytes;
    dcxemu_counters counters;
    uint32_t dci_qpn;
};

/* A few writes, a send with immediate data, a compare-and-swap, a
 * fetch-and-add, and a write with a bad rkey, through one face of the
 * device. */
outcome differential_run(const verbs &v)
{
    outcome o;
    device d;
    target t;
    initiator i;

    memset(&o.counters, 0, sizeof(o.counters));
    EXPECT_TRUE(d.open(v));
    EXPECT_TRUE(t.create(d, 16384));
    EXPECT_TRUE(i.create(d, d.lid, 32, 10, 3, false, nullptr, 16384));
    if (::testing::Test::HasFatalFailure() || (i.qpx == nullptr)) {
        return o;
    }
    i.dctn    = t.dctn();
    o.dci_qpn = i.qp->qp_num;
    counters c0;

    uint32_t rkey = t.mem.mr->rkey;
    for (int k = 0; k < 3; k++) {
        dcx_test::fill_data(i.mem.ptr(1000 * k), 1000, 20 + k);
        EXPECT_EQ(0, i.write(k, 1000 * k, 1000, rkey, t.mem.addr(1000 * k)));
    }
    EXPECT_EQ(0, t.post_recv(77, 8192, 1024));
    dcx_test::fill_data(i.mem.ptr(4096), 500, 23);
    EXPECT_EQ(0, i.send(3, 4096, 500, true, 0x55));
    t.mem.word(4096) = 7;
    t.mem.word(4104) = 100;
    EXPECT_EQ(0, i.cswap(4, 12000, rkey, t.mem.addr(4096), 7, 9));
    EXPECT_EQ(0, i.fadd(5, 12008, rkey, t.mem.addr(4104), 5));
    EXPECT_EQ(0, i.write(6, 0, 64, rkey + 1, t.mem.addr(0)));

    for (int k = 0; k < 7; k++) {
        completion c;
        EXPECT_TRUE(poll_legacy(i.cq, &c));
        o.send.push_back(c);
    }
    completion rc;
    EXPECT_TRUE(poll_legacy(t.cq, &rc));
    o.recv.push_back(rc);
    o.counters     = (counters() - c0).c;
    o.remote_bytes = std::vector<char>(t.mem.ptr(), t.mem.ptr(16384));
    o.local_bytes  = std::vector<char>(i.mem.ptr(12000), i.mem.ptr(12016));
    i.destroy();
    t.destroy();
    d.close();
    return o;
}

} // namespace

/* The same scenario through the model's API and through rdma-core on the
 * mlx5 face: the same data, completions and counters. */
TEST(mlx5face_differential, api_face_and_mlx5_face_agree)
{
    outcome m = differential_run(model_verbs());
    outcome f = differential_run(face_verbs());

    ASSERT_EQ(7u, m.send.size());
    ASSERT_EQ(m.send.size(), f.send.size());
    for (size_t k = 0; k < m.send.size(); k++) {
        SCOPED_TRACE("send completion " + std::to_string(k));
        EXPECT_EQ(m.send[k].wr_id, f.send[k].wr_id);
        EXPECT_EQ(m.send[k].status, f.send[k].status);
        if (m.send[k].status == IBV_WC_SUCCESS) {
            EXPECT_EQ(m.send[k].opcode, f.send[k].opcode);
        } else {
            EXPECT_EQ(m.send[k].vendor_err, f.send[k].vendor_err);
        }
        if ((m.send[k].opcode == IBV_WC_COMP_SWAP) ||
            (m.send[k].opcode == IBV_WC_FETCH_ADD)) {
            EXPECT_EQ(m.send[k].byte_len, f.send[k].byte_len);
        }
        EXPECT_EQ(m.dci_qpn, m.send[k].qp_num);
        EXPECT_EQ(f.dci_qpn, f.send[k].qp_num);
    }
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, m.send[6].status);
    ASSERT_EQ(1u, m.recv.size());
    ASSERT_EQ(1u, f.recv.size());
    EXPECT_EQ(m.recv[0].status, f.recv[0].status);
    EXPECT_EQ(m.recv[0].opcode, f.recv[0].opcode);
    EXPECT_EQ(m.recv[0].wr_id, f.recv[0].wr_id);
    EXPECT_EQ(m.recv[0].byte_len, f.recv[0].byte_len);
    EXPECT_EQ(m.recv[0].imm, f.recv[0].imm);
    EXPECT_EQ(m.recv[0].wc_flags & IBV_WC_WITH_IMM,
              f.recv[0].wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(m.dci_qpn, m.recv[0].src_qp);
    EXPECT_EQ(f.dci_qpn, f.recv[0].src_qp);
    EXPECT_TRUE(m.remote_bytes == f.remote_bytes);
    EXPECT_TRUE(m.local_bytes == f.local_bytes);
    EXPECT_EQ(m.counters.rnr_retries, f.counters.rnr_retries);
    EXPECT_EQ(m.counters.transport_retries, f.counters.transport_retries);
    for (int op = 0; op < DCXEMU_CNT_OP_MAX; op++) {
        EXPECT_EQ(m.counters.wr[op], f.counters.wr[op]) << "op " << op;
    }
    EXPECT_EQ(m.counters.bytes, f.counters.bytes);
    EXPECT_EQ(m.counters.error_cqes, f.counters.error_cqes);
    EXPECT_EQ(m.counters.recv_cqes, f.counters.recv_cqes);
    EXPECT_EQ(m.counters.send_cqes, f.counters.send_cqes);
    EXPECT_EQ(m.counters.key_violations, f.counters.key_violations);
    EXPECT_EQ(4u, m.counters.wr[DCXEMU_CNT_OP_WRITE]);
}
