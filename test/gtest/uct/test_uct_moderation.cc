/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Send completion moderation (UCX_DCX_TX_CQ_MODERATION): how many work
 * requests ask for a completion, and that everything waiting for a DCI to
 * drain (flushes, keepalives, the DCI pool, pending requests, wakeups) gets
 * there when the DCI's last requests asked for none.
 */
#include "uct_test.h"

#include <poll.h>
#include <string.h>

using namespace dcx_test;

/* Parameter: the DCI policy. */
class uct_moderation : public testing::TestWithParam<std::string>,
                       protected entity_pair {
protected:
    config_t cfg(config_t extra = config_t()) const
    {
        extra["TX_POLICY"] = GetParam();
        return extra;
    }

    void start(const config_t &sender_extra = config_t())
    {
        ASSERT_NO_FATAL_FAILURE(open_pair(cfg(), cfg(sender_extra), false));
        m_target.reset(new buffer(*m_receiver, 64 * 1024));
        m_rkey.reset(new rkey(m_target->packed_rkey()));
    }

    void TearDown() override
    {
        for (uct_ep_h ep : m_eps) {
            uct_ep_destroy(ep);
        }
        m_rkey.reset();
        m_target.reset();
        close_pair();
    }

    uct_ep_h connect()
    {
        uct_ep_h ep = m_sender->connect(*m_receiver);
        EXPECT_NE(nullptr, ep);
        m_eps.push_back(ep);
        return ep;
    }

    /* Value i at word i of the target. */
    ucs_status_t put(uct_ep_h ep, uint64_t i)
    {
        return uct_ep_put_short(ep, &i, sizeof(i), m_target->addr() + 8 * i,
                                m_rkey->get());
    }

    void put_range(uct_ep_h ep, uint64_t first, uint64_t count)
    {
        for (uint64_t i = first; i < first + count; ++i) {
            ASSERT_EQ(UCS_OK, retry(all(), [&] { return put(ep, i); }));
        }
    }

    void check_range(uint64_t first, uint64_t count)
    {
        for (uint64_t i = first; i < first + count; ++i) {
            ASSERT_EQ(i, m_target->word(i)) << "word " << i;
        }
    }

    uct_dcx_tx_counters_t counters()
    {
        return tx_counters(m_sender->iface());
    }

    std::unique_ptr<buffer> m_target;
    std::unique_ptr<rkey> m_rkey;
    std::vector<uct_ep_h> m_eps;
};

/* A stream of puts asks for one completion per window, and the device
 * writes (and dcx polls) no more CQEs than that. */
TEST_P(uct_moderation, puts_signal_once_per_window)
{
    const unsigned count = 1000;

    ASSERT_NO_FATAL_FAILURE(start());
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, count));
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    ASSERT_NO_FATAL_FAILURE(check_range(0, count));

    /* The default window (UCX_DCX_TX_CQ_MODERATION). */
    const unsigned long window = iface_config_ulong("TX_CQ_MODERATION");
    uct_dcx_tx_counters_t c    = counters();
    ASSERT_GT(window, 1u);
    EXPECT_EQ(count + c.completion_requests, c.work_requests);
    EXPECT_GE(c.signaled, count / window);
    EXPECT_LE(c.signaled, count / window + c.completion_requests);
    EXPECT_LE(c.completion_requests, 1u);
    EXPECT_EQ(c.signaled, c.cqes);
}

/* 0 and 1 turn moderation off: every request is signaled. */
TEST_P(uct_moderation, off_signals_every_request)
{
    const unsigned count = 200;

    ASSERT_NO_FATAL_FAILURE(start({ { "TX_CQ_MODERATION", "1" } }));
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, count));
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    ASSERT_NO_FATAL_FAILURE(check_range(0, count));

    uct_dcx_tx_counters_t c = counters();
    EXPECT_EQ(count, c.work_requests);
    EXPECT_EQ(count, c.signaled);
    EXPECT_EQ(count, c.cqes);
    EXPECT_EQ(0u, c.completion_requests);
}

/* A window larger than the send queue is cut to a quarter of it, so a full
 * queue always holds signaled requests and frees slots. */
TEST_P(uct_moderation, window_capped_by_queue)
{
    const unsigned count = 1000;

    ASSERT_NO_FATAL_FAILURE(start(
            { { "TX_CQ_MODERATION", "100000" }, { "TX_QUEUE_LEN", "32" } }));
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, count));
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    ASSERT_NO_FATAL_FAILURE(check_range(0, count));

    /* The device may round the queue up, so the window is not exact; an
     * uncapped one would signal only the flush. */
    uct_dcx_tx_counters_t c = counters();
    EXPECT_GE(c.signaled, count / 64);
}

/* Every DCI full of signaled requests fits the send CQ: the device rounds a
 * DCI's queue up (7 x 256 requested, 341 each granted with 192-byte WQEs)
 * but a DCI takes no more than requested, so 7 x 256 CQEs at most, within
 * the CQ of 7 x 256 entries (2047 on mlx5; one DCI more for dcs_hybrid). More would overrun the CQ, a
 * CQ error that hardware reports by failing every DCI on it. */
TEST_P(uct_moderation, send_cq_holds_every_dci_full)
{
    const unsigned num_dci = 7, queue_len = 256;

    ASSERT_NO_FATAL_FAILURE(
            start({ { "NUM_DCI", std::to_string(num_dci) },
                    { "TX_QUEUE_LEN", std::to_string(queue_len) },
                    { "TX_CQ_MODERATION", "0" } }));
    std::vector<uct_ep_h> eps;
    for (unsigned i = 0; i < 4 * num_dci; ++i) {
        eps.push_back(connect());
    }

    /* No progress: each endpoint posts until its DCI (or the pool) is full. */
    uint64_t posted = 0;
    for (uct_ep_h ep : eps) {
        while (put(ep, posted) == UCS_OK) {
            ++posted;
            ASSERT_LE(posted, (uint64_t)num_dci * 512) << "no end";
        }
    }
    /* dcs_hybrid: and the stream DCI past the pool's (its CQ counts it) */
    EXPECT_LE(posted,
              (uint64_t)(num_dci + (GetParam() == "dcs_hybrid")) * queue_len);

    for (uct_ep_h ep : eps) {
        ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    }
    ASSERT_NO_FATAL_FAILURE(check_range(0, posted));
    uct_dcx_tx_counters_t c = counters();
    EXPECT_EQ(c.work_requests, c.cqes);
}

/* A flush of requests that asked for no completion asks for one itself. */
TEST_P(uct_moderation, flush_retires_unsignaled_tail)
{
    ASSERT_NO_FATAL_FAILURE(start());
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, 5));
    EXPECT_EQ(0u, counters().signaled);

    ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 5));
    uct_dcx_tx_counters_t c = counters();
    EXPECT_EQ(1u, c.completion_requests);
    EXPECT_EQ(1u, c.signaled);
    EXPECT_EQ(1u, c.cqes);
    EXPECT_EQ(UCS_OK, uct_iface_flush(m_sender->iface(), 0, NULL));
}

/* A cancel after unsignaled requests ran: they are done and get no flush
 * CQE when the DCI goes to error, yet the flush completes and the DCI comes
 * back (a flushed signaled request retires them). */
TEST_P(uct_moderation, flush_cancel_after_unsignaled_tail_ran)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "NUM_DCI", "1" } }));
    uct_ep_h ep1 = connect(), ep2 = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep1, 0, 3));
    ASSERT_TRUE(wait_for(all(), [&] {
        uint64_t v = m_target->word(2);
        return v == 2;
    })) << "the puts did not arrive";

    ucs_status_t status = flush_ep(all(), ep1, UCT_FLUSH_FLAG_CANCEL);
    EXPECT_TRUE((status == UCS_OK) || (status == UCS_ERR_CANCELED))
            << ucs_status_string(status);
    ASSERT_TRUE(iface_flushed(all(), *m_sender));

    /* The DCI is back (recovered under dcs): another endpoint uses it. */
    ASSERT_NO_FATAL_FAILURE(put_range(ep2, 3, 3));
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep2));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 6));
}

/* The same through the interface flush (without a completion: polled). */
TEST_P(uct_moderation, iface_flush_retires_unsignaled_tail)
{
    ASSERT_NO_FATAL_FAILURE(start());
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, 5));
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 5));
    EXPECT_EQ(1u, counters().completion_requests);
}

/* An endpoint whose last requests asked for no completion gives its DCI
 * back: another endpoint that retries (without pending requests) gets it. */
TEST_P(uct_moderation, dci_returns_for_retrying_endpoint)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "NUM_DCI", "1" } }));
    uct_ep_h ep1 = connect(), ep2 = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep1, 0, 3));
    ASSERT_NO_FATAL_FAILURE(put_range(ep2, 3, 3));
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 6));
}

/* A pending request waiting for the DCI held by an unsignaled tail runs. */
TEST_P(uct_moderation, pending_request_gets_the_dci)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "NUM_DCI", "1" } }));
    uct_ep_h ep1 = connect(), ep2 = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep1, 0, 3));

    /* Value 3 at word 3, as put(ep2, 3) writes it. */
    pending_put p(ep2, m_target->addr() + 8 * 3, m_rkey->get(), 3);
    ucs_status_t status = put(ep2, 3);
    if (status == UCS_ERR_NO_RESOURCE) { /* dcs policies: ep1 holds it */
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep2, &p.req, 0));
        ASSERT_TRUE(wait_for(all(), [&] { return p.done != 0; }))
                << "the pending request never got the DCI";
    } else {
        ASSERT_EQ(UCS_OK, status); /* rand: the DCI is shared */
    }
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 4));
}

/* The DCI of an endpoint destroyed with an unsignaled tail drains and
 * returns to the pool. */
TEST_P(uct_moderation, destroyed_endpoint_returns_its_dci)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "NUM_DCI", "1" } }));
    uct_ep_h ep1 = m_sender->connect(*m_receiver);
    ASSERT_NE(nullptr, ep1);
    ASSERT_NO_FATAL_FAILURE(put_range(ep1, 0, 3));
    uct_ep_destroy(ep1);

    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    uct_ep_h ep2 = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep2, 3, 3));
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep2));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 6));
}

/* Arming for send completions with an unsignaled tail still wakes up. */
TEST_P(uct_moderation, send_wakeup_with_unsignaled_tail)
{
    int fd;

    ASSERT_NO_FATAL_FAILURE(start());
    uct_ep_h ep = connect();
    ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(m_sender->iface(), &fd));
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, 3));

    ucs_status_t status = uct_iface_event_arm(m_sender->iface(),
                                              UCT_EVENT_SEND_COMP);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_ERR_BUSY));
    if (status == UCS_OK) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        EXPECT_EQ(1, poll(&pfd, 1, 10000)) << "no send-completion wakeup";
    }
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    ASSERT_NO_FATAL_FAILURE(check_range(0, 3));
}

/* A keepalive behind an unsignaled tail asks for a completion. */
TEST_P(uct_moderation, ep_check_signals)
{
    ASSERT_NO_FATAL_FAILURE(start());
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_range(ep, 0, 3));
    ASSERT_EQ(UCS_OK, retry(all(), [&] { return uct_ep_check(ep, 0, NULL); }));
    EXPECT_EQ(1u, counters().signaled);
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    EXPECT_EQ(0u, counters().completion_requests);
    EXPECT_EQ(1u, counters().cqes);
}

/* Zero-copy completions wait in their DCI's ring, not in operation
 * objects: called once each, in posting order, before a flush issued after
 * them; cancelled once when their endpoint goes. */
namespace {

const int num_ops   = 8;
const size_t length = 4096;
const int flush_id  = 100; /* the flush's entry in the log */

struct ordered_comp {
    uct_completion_t uct;
    std::vector<int> *log;
    int id;
    int calls;
    ucs_status_t status;

    ordered_comp(std::vector<int> *l, int i)
        : log(l), id(i), calls(0), status(UCS_INPROGRESS)
    {
        uct.func   = cb;
        uct.count  = 1;
        uct.status = UCS_OK;
    }

    static void cb(uct_completion_t *self)
    {
        ordered_comp *c = ucs_container_of(self, ordered_comp, uct);
        c->log->push_back(c->id);
        c->status = self->status;
        ++c->calls;
    }
};

} // namespace

class uct_moderation_zcopy : public uct_moderation {
protected:
    void SetUp() override
    {
        ASSERT_NO_FATAL_FAILURE(start());
        m_source.reset(new buffer(*m_sender, num_ops * length));
        memset(m_source->ptr(), 0x3c, num_ops * length);
        for (int i = 0; i < num_ops; ++i) {
            m_comps.emplace_back(new ordered_comp(&m_log, i));
        }
        m_flush_comp.reset(new ordered_comp(&m_log, flush_id));
    }

    void TearDown() override
    {
        m_source.reset();
        uct_moderation::TearDown();
    }

    void put_all(uct_ep_h ep)
    {
        for (int i = 0; i < num_ops; ++i) {
            uct_iov_t iov       = { m_source->ptr() + i * length, length,
                                    m_source->memh(), length, 1 };
            ucs_status_t status = retry(all(), [&] {
                return uct_ep_put_zcopy(ep, &iov, 1,
                                        m_target->addr() + i * length,
                                        m_rkey->get(), &m_comps[i]->uct);
            });
            ASSERT_EQ(UCS_INPROGRESS, status) << "put " << i;
        }
    }

    /* Progress a while longer: nothing may be called again. */
    void settle()
    {
        wait_for(
                all(), [] { return false; }, 0.2);
    }

    std::unique_ptr<buffer> m_source;
    std::vector<std::unique_ptr<ordered_comp>> m_comps;
    std::unique_ptr<ordered_comp> m_flush_comp;
    std::vector<int> m_log;
};

TEST_P(uct_moderation_zcopy, completions_in_order_before_flush)
{
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_all(ep));
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_flush(ep, 0, &m_flush_comp->uct);
    });
    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(wait_for(all(), [&] { return m_flush_comp->calls > 0; }))
            << "the flush did not complete";
    settle();

    std::vector<int> expected;
    for (int i = 0; i < num_ops; ++i) {
        expected.push_back(i);
        EXPECT_EQ(UCS_OK, m_comps[i]->status) << "put " << i;
    }
    expected.push_back(flush_id);
    EXPECT_EQ(expected, m_log);
    EXPECT_EQ(0, memcmp(m_source->ptr(), m_target->ptr(), num_ops * length));
    /* One CQE per operation that waits for it: no pool object per
     * operation, so nothing else is counted. */
    EXPECT_EQ((uint64_t)num_ops, counters().signaled);
}

TEST_P(uct_moderation_zcopy, destroyed_endpoint_cancels_once)
{
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_all(ep));
    m_eps.clear();
    uct_ep_destroy(ep);
    for (int i = 0; i < num_ops; ++i) {
        EXPECT_EQ(1, m_comps[i]->calls) << "put " << i;
        EXPECT_EQ(UCS_ERR_CANCELED, m_comps[i]->status) << "put " << i;
    }
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    settle();
    EXPECT_EQ((size_t)num_ops, m_log.size());
}

TEST_P(uct_moderation_zcopy, flush_cancel_calls_each_once)
{
    uct_ep_h ep = connect();
    ASSERT_NO_FATAL_FAILURE(put_all(ep));
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_flush(ep, UCT_FLUSH_FLAG_CANCEL, &m_flush_comp->uct);
    });
    if (status == UCS_INPROGRESS) {
        ASSERT_TRUE(wait_for(all(), [&] { return m_flush_comp->calls > 0; }))
                << "the cancelling flush did not complete";
    }
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    settle();
    for (int i = 0; i < num_ops; ++i) {
        EXPECT_EQ(1, m_comps[i]->calls) << "put " << i;
        EXPECT_TRUE((m_comps[i]->status == UCS_OK) ||
                    (m_comps[i]->status == UCS_ERR_CANCELED))
                << "put " << i << ": " << ucs_status_string(m_comps[i]->status);
    }
    /* Every put's completion before the flush's. */
    ASSERT_FALSE(m_log.empty());
    if (status == UCS_INPROGRESS) {
        EXPECT_EQ(flush_id, m_log.back());
        EXPECT_EQ((size_t)num_ops + 1, m_log.size());
    } else {
        EXPECT_EQ((size_t)num_ops, m_log.size());
    }
}

/* Work a completion callback posts is new work: a flush issued before it
 * does not wait for it (it used to move behind it, and behind a request
 * that asked for no completion it waited for ever; UCP's rendezvous put
 * with flush hung that way when a flush completion sent the next message). */
namespace {

struct posting_comp {
    uct_completion_t uct;
    uct_ep_h ep;
    uct_rkey_t rkey;
    uint64_t addr;
    ucs_status_t posted;
    int calls;

    static void cb(uct_completion_t *self)
    {
        posting_comp *c = ucs_container_of(self, posting_comp, uct);
        uint64_t v      = 0x77;
        c->posted = uct_ep_put_short(c->ep, &v, sizeof(v), c->addr, c->rkey);
        ++c->calls;
    }
};

} // namespace

TEST_P(uct_moderation_zcopy, flush_not_held_by_work_from_a_callback)
{
    uct_ep_h ep = connect();
    posting_comp pc;
    pc.uct.func   = posting_comp::cb;
    pc.uct.count  = 1;
    pc.uct.status = UCS_OK;
    pc.ep         = ep;
    pc.rkey       = m_rkey->get();
    pc.addr       = m_target->addr() + num_ops * length;
    pc.posted     = UCS_INPROGRESS;
    pc.calls      = 0;

    uct_iov_t iov = { m_source->ptr(), length, m_source->memh(), length, 1 };
    ASSERT_EQ(UCS_INPROGRESS, retry(all(), [&] {
                  return uct_ep_put_zcopy(ep, &iov, 1, m_target->addr(),
                                          m_rkey->get(), &pc.uct);
              }));
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_flush(ep, 0, &m_flush_comp->uct));
    ASSERT_TRUE(wait_for(all(), [&] { return m_flush_comp->calls > 0; }))
            << "the flush waited for work posted after it";
    EXPECT_EQ(1, pc.calls);
    EXPECT_EQ(UCS_OK, pc.posted);
    ASSERT_EQ(UCS_OK, flush_ep(all(), ep));
    uint64_t v;
    memcpy(&v, m_target->ptr() + num_ops * length, sizeof(v));
    EXPECT_EQ(0x77u, v);
}

INSTANTIATE_TEST_SUITE_P(policy, uct_moderation_zcopy,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));

INSTANTIATE_TEST_SUITE_P(policy, uct_moderation,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));
