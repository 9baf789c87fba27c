/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx between processes: a peer in a child process, data verified on both
 * sides, atomics under contention, and a peer that dies.
 */
#include "uct_test.h"

#include <algorithm>
#include <poll.h>
#include <string.h>
#include <unistd.h>

using namespace dcx_test;

namespace {

struct am_counter {
    uint64_t count = 0;
    uint64_t bad   = 0;
};

ucs_status_t count_am(void *arg, void *data, size_t length, unsigned flags)
{
    am_counter *c = (am_counter *)arg;
    uint64_t seq;

    memcpy(&seq, data, sizeof(seq));
    /* In order, with the payload the sender derived from the sequence. */
    if ((seq != c->count) || (length != 8 + (seq % 200))) {
        ++c->bad;
    }
    for (size_t i = 8; i < length; ++i) {
        if (((char *)data)[i] != (char)(seq + i)) {
            ++c->bad;
            break;
        }
    }
    ++c->count;
    return UCS_OK;
}

} // namespace

/* A passive peer: exposes a buffer, counts active messages, then reports
 * a checksum of its buffer and the message count. */
DCX_CHILD_ROLE(passive_peer)
{
    entity e;
    buffer buf(e, 1 << 20);
    am_counter counter;

    if ((e.iface() == nullptr) ||
        (uct_iface_set_am_handler(e.iface(), 7, count_am, &counter, 0) !=
         UCS_OK)) {
        return 2;
    }

    send_msg(out_fd, e.address());
    send_msg(out_fd, buf.packed_rkey());
    send_msg(out_fd, u64_msg(buf.addr()));

    /* Serve until told how many messages to expect. */
    uint64_t expected = ~0ull;
    std::vector<char> msg;
    for (;;) {
        e.progress();
        if (expected == ~0ull) {
            struct timeval tv = { 0, 0 };
            fd_set fds;
            FD_ZERO(&fds);
            FD_SET(in_fd, &fds);
            if (select(in_fd + 1, &fds, NULL, NULL, &tv) > 0) {
                expected = msg_u64(recv_msg(in_fd));
            }
        } else if (counter.count >= expected) {
            break;
        }
    }

    uint64_t sum = 0;
    for (size_t i = 0; i < buf.length(); ++i) {
        sum = sum * 31 + (unsigned char)buf.ptr()[i];
    }
    send_msg(out_fd, u64_msg(sum));
    send_msg(out_fd, u64_msg(counter.bad));
    recv_msg(in_fd); /* wait for the parent before tearing down */
    return 0;
}

TEST(uct_multiproc, put_get_am_between_processes)
{
    child peer("passive_peer");
    entity e;
    const size_t length = 1 << 20;
    buffer local(e, length);

    uct_ep_h ep;
    ASSERT_EQ(UCS_OK, e.connect(recv_msg(peer.from_fd()), &ep));
    rkey rk(recv_msg(peer.from_fd()));
    uint64_t remote_addr     = msg_u64(recv_msg(peer.from_fd()));
    std::vector<entity *> me = { &e };

    for (size_t i = 0; i < length; ++i) {
        local.ptr()[i] = (char)(i * 13 + 5);
    }

    /* put_zcopy of 1 MiB, then read it back with get_zcopy. */
    uct_iov_t iov = { local.ptr(), length, local.memh(), 0, 1 };
    test_comp put_comp;
    ucs_status_t status = retry(me, [&] {
        return uct_ep_put_zcopy(ep, &iov, 1, remote_addr, rk.get(),
                                &put_comp.uct);
    });
    status              = wait_comp(me, status, put_comp);
    ASSERT_EQ(UCS_OK, status);

    buffer back(e, length);
    uct_iov_t back_iov = { back.ptr(), length, back.memh(), 0, 1 };
    test_comp get_comp;
    status = retry(me, [&] {
        return uct_ep_get_zcopy(ep, &back_iov, 1, remote_addr, rk.get(),
                                &get_comp.uct);
    });
    status = wait_comp(me, status, get_comp);
    ASSERT_EQ(UCS_OK, status);
    ASSERT_EQ(0, memcmp(local.ptr(), back.ptr(), length));

    /* Active messages of varying sizes, in order, verified by the peer. */
    const uint64_t num_am = 2000;
    char payload[256];
    for (uint64_t seq = 0; seq < num_am; ++seq) {
        size_t plen = seq % 200;
        for (size_t i = 0; i < plen; ++i) {
            payload[i] = (char)(seq + 8 + i);
        }
        ASSERT_EQ(UCS_OK, retry(me, [&] {
                      return uct_ep_am_short(ep, 7, seq, payload, plen);
                  }));
    }
    send_msg(peer.to_fd(), u64_msg(num_am));

    uint64_t sum = 0;
    for (size_t i = 0; i < length; ++i) {
        sum = sum * 31 + (unsigned char)local.ptr()[i];
    }
    EXPECT_EQ(sum, msg_u64(recv_msg(peer.from_fd())));
    EXPECT_EQ(0u, msg_u64(recv_msg(peer.from_fd()))) << "bad messages";

    ASSERT_TRUE(iface_flushed(me, e));
    uct_ep_destroy(ep);
    send_msg(peer.to_fd(), u64_msg(0));
    EXPECT_EQ(0, peer.wait());
}

/* Adds 1 to the parent's word, args[0] times, with fetch-add. */
DCX_CHILD_ROLE(adder)
{
    entity e;
    uct_ep_h ep;

    if ((e.iface() == nullptr) || (e.connect(recv_msg(in_fd), &ep) != UCS_OK)) {
        return 2;
    }
    rkey rk(recv_msg(in_fd));
    uint64_t addr            = msg_u64(recv_msg(in_fd));
    int count                = std::stoi(args.at(0));
    std::vector<entity *> me = { &e };
    uint64_t results[64];
    test_comp comps[64];

    for (int i = 0; i < count; ++i) {
        test_comp &comp     = comps[i % 64];
        comp                = test_comp();
        ucs_status_t status = retry(me, [&] {
            return uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 1,
                                         &results[i % 64], addr, rk.get(),
                                         &comp.uct);
        });
        if (wait_comp(me, status, comp) != UCS_OK) {
            return 4;
        }
    }

    if (!iface_flushed(me, e)) {
        return 5;
    }
    uct_ep_destroy(ep);
    return 0;
}

TEST(uct_multiproc, atomics_under_contention)
{
    const int num_children = 4, count = 500;
    entity e;
    buffer word(e, 8);
    std::vector<std::unique_ptr<child>> children;
    std::vector<entity *> me = { &e };

    memset(word.ptr(), 0, 8);
    for (int i = 0; i < num_children; ++i) {
        children.emplace_back(new child("adder", { std::to_string(count) }));
        send_msg(children.back()->to_fd(), e.address());
        send_msg(children.back()->to_fd(), word.packed_rkey());
        send_msg(children.back()->to_fd(), u64_msg(word.addr()));
    }

    for (auto &c : children) {
        /* The parent's CPU is not needed for one-sided atomics, but it
         * keeps its receive queue serviced. */
        int status = -1;
        EXPECT_TRUE(wait_for(
                me, [&] { return c->exited(&status); }, 60));
        EXPECT_EQ(0, status);
    }
    uint64_t value = word.word(0);
    EXPECT_EQ((uint64_t)num_children * count, value);
}

/* Exposes a buffer, then progresses until killed or its parent's pipe ends
 * (it waits on the pipe between progress calls). */
DCX_CHILD_ROLE(sleeper)
{
    entity e;
    buffer buf(e, 4096);
    struct pollfd in = { in_fd, POLLIN, 0 };

    send_msg(out_fd, e.address());
    send_msg(out_fd, buf.packed_rkey());
    send_msg(out_fd, u64_msg(buf.addr()));
    for (;;) {
        e.progress();
        if (poll(&in, 1, 1) > 0) {
            return 0;
        }
    }
    return 0;
}

TEST(uct_multiproc, dead_peer_fails_only_its_endpoint)
{
    failure_record failures;
    entity e(quick_timeout(2), record_failure, &failures);
    child victim("sleeper");
    child survivor("sleeper");
    uct_ep_h ep_dead, ep_alive;

    ASSERT_EQ(UCS_OK, e.connect(recv_msg(victim.from_fd()), &ep_dead));
    rkey rk_dead(recv_msg(victim.from_fd()));
    uint64_t addr_dead = msg_u64(recv_msg(victim.from_fd()));
    ASSERT_EQ(UCS_OK, e.connect(recv_msg(survivor.from_fd()), &ep_alive));
    rkey rk_alive(recv_msg(survivor.from_fd()));
    uint64_t addr_alive      = msg_u64(recv_msg(survivor.from_fd()));
    std::vector<entity *> me = { &e };

    victim.kill();

    uint64_t value = 42;
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(ep_dead, &value, 8, addr_dead, rk_dead.get()));
    ASSERT_TRUE(wait_for(
            me, [&] { return !failures.eps.empty(); }, 60))
            << "no failure reported for a dead peer";
    EXPECT_EQ(ep_dead, failures.eps[0]);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, failures.statuses[0]);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT,
              uct_ep_put_short(ep_dead, &value, 8, addr_dead, rk_dead.get()));

    /* The interface keeps serving other peers. */
    uint64_t result = 0;
    test_comp comp;
    ucs_status_t status = retry(me, [&] {
        return uct_ep_atomic64_fetch(ep_alive, UCT_ATOMIC_OP_ADD, 1, &result,
                                     addr_alive, rk_alive.get(), &comp.uct);
    });
    status              = wait_comp(me, status, comp);
    EXPECT_EQ(UCS_OK, status);
    EXPECT_EQ(1u, failures.eps.size());

    uct_ep_destroy(ep_dead);
    uct_ep_destroy(ep_alive);
}

/* A peer whose device lists no masked atomics (the model's
 * DCXEMU_EXT_ATOMICS=0 in its process): its DCT gets the IB-compatible
 * atomic mode, whose responder refuses a masked atomic (REM_INV_REQ, the
 * DCI to error). Its address says so: a 32-bit atomic to it is refused at
 * once, and 64-bit OR is a compare-swap loop; nothing fails. */
TEST(uct_multiproc, masked_atomics_only_to_a_peer_that_takes_them)
{
    failure_record failures;
    entity e(quick_timeout(2), record_failure, &failures);
    if (e.attr().cap.atomic32.fop_flags == 0) {
        GTEST_SKIP() << "no masked atomics here (RoCE)";
    }
    child plain("sleeper", {}, { { "DCXEMU_EXT_ATOMICS", "0" } });
    uct_ep_h ep;

    ASSERT_EQ(UCS_OK, e.connect(recv_msg(plain.from_fd()), &ep));
    rkey rk(recv_msg(plain.from_fd()));
    uint64_t addr            = msg_u64(recv_msg(plain.from_fd()));
    std::vector<entity *> me = { &e };

    uint32_t result32 = 0;
    test_comp c32;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_ep_atomic32_fetch(ep, UCT_ATOMIC_OP_ADD, 1, &result32, addr,
                                    rk.get(), &c32.uct));

    uint64_t result64 = 1;
    test_comp c64;
    ucs_status_t status = retry(me, [&] {
        return uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_OR, 0x10, &result64,
                                     addr, rk.get(), &c64.uct);
    });
    EXPECT_EQ(UCS_OK, wait_comp(me, status, c64));
    EXPECT_EQ(0u, result64);
    EXPECT_EQ(UCS_OK, flush_ep(me, ep));
    EXPECT_TRUE(failures.eps.empty()) << "the endpoint failed";

    uct_ep_destroy(ep);
}

/* Keepalive: uct_ep_check finds a peer that died while the endpoint was
 * idle, and only that one; a live peer's check succeeds quietly. */
TEST(uct_multiproc, ep_check_detects_dead_idle_peer)
{
    failure_record failures;
    entity e(quick_timeout(2), record_failure, &failures);
    child victim("sleeper");
    child survivor("sleeper");
    uct_ep_h ep_dead, ep_alive;

    ASSERT_TRUE(e.attr().cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    ASSERT_EQ(UCS_OK, e.connect(recv_msg(victim.from_fd()), &ep_dead));
    recv_msg(victim.from_fd());
    recv_msg(victim.from_fd());
    ASSERT_EQ(UCS_OK, e.connect(recv_msg(survivor.from_fd()), &ep_alive));
    recv_msg(survivor.from_fd());
    recv_msg(survivor.from_fd());
    std::vector<entity *> me = { &e };

    /* Both peers answer while alive. */
    ASSERT_EQ(UCS_OK,
              retry(me, [&] { return uct_ep_check(ep_dead, 0, NULL); }));
    ASSERT_EQ(UCS_OK,
              retry(me, [&] { return uct_ep_check(ep_alive, 0, NULL); }));
    ASSERT_TRUE(iface_flushed(me, e));
    EXPECT_TRUE(failures.eps.empty());

    victim.kill();
    ASSERT_EQ(UCS_OK,
              retry(me, [&] { return uct_ep_check(ep_dead, 0, NULL); }));
    ASSERT_EQ(UCS_OK,
              retry(me, [&] { return uct_ep_check(ep_alive, 0, NULL); }));
    ASSERT_TRUE(wait_for(
            me, [&] { return !failures.eps.empty(); }, 60))
            << "keepalive did not notice the dead peer";
    ASSERT_TRUE(iface_flushed(me, e));
    ASSERT_EQ(1u, failures.eps.size());
    EXPECT_EQ(ep_dead, failures.eps[0]);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, failures.statuses[0]);

    uct_ep_destroy(ep_dead);
    uct_ep_destroy(ep_alive);
}

/* Strided zero-copy between processes: local strided blocks put into a
 * peer's contiguous memory and read back strided, for block sizes from 1 B
 * to 64 KiB - 1, strides up to 64 KiB and beyond (the list path), and
 * unaligned starts; every byte verified through a contiguous read. */
TEST(uct_multiproc, strided_put_get_between_processes)
{
    child peer("passive_peer");
    entity e(config_t{ { "UMR_PACK_THRESH", "0" } });
    uct_ep_h ep;
    ASSERT_EQ(UCS_OK, e.connect(recv_msg(peer.from_fd()), &ep));
    rkey rk(recv_msg(peer.from_fd()));
    uint64_t raddr           = msg_u64(recv_msg(peer.from_fd()));
    std::vector<entity *> me = { &e };

    struct shape {
        size_t len, stride, count, off;
    };
    const std::vector<shape> shapes = {
        { 1, 2, 4000, 1 },      { 8, 64, 4096, 3 },    { 1000, 1024, 300, 5 },
        { 65535, 65535, 2, 0 }, { 3000, 70000, 5, 7 }, { 64, 100000, 10, 2 },
    };
    auto run = [&](bool get, uct_iov_t *iov, size_t cnt, uint64_t addr) {
        test_comp comp;
        ucs_status_t status = retry(me, [&] {
            return get ? uct_ep_get_zcopy(ep, iov, cnt, addr, rk.get(),
                                          &comp.uct) :
                         uct_ep_put_zcopy(ep, iov, cnt, addr, rk.get(),
                                          &comp.uct);
        });
        status              = wait_comp(me, status, comp);
        return status;
    };

    for (const shape &s : shapes) {
        size_t span  = s.off + (s.count - 1) * s.stride + s.len;
        size_t total = s.len * s.count;
        ASSERT_LE(total, (size_t)1 << 20);
        buffer src(e, span), dst(e, span), flat(e, total);
        for (size_t i = 0; i < span; ++i) {
            src.ptr()[i] = (char)(i * 7 + s.len);
        }
        memset(dst.ptr(), 0, span);

        uct_iov_t siov = { src.ptr() + s.off, s.len, src.memh(), s.stride,
                           (unsigned)s.count };
        ASSERT_EQ(UCS_OK, run(false, &siov, 1, raddr))
                << s.len << "@" << s.stride;
        uct_iov_t fiov = { flat.ptr(), total, flat.memh(), 0, 1 };
        ASSERT_EQ(UCS_OK, run(true, &fiov, 1, raddr));
        for (size_t b = 0; b < s.count; ++b) {
            ASSERT_EQ(0, memcmp(src.ptr() + s.off + b * s.stride,
                                flat.ptr() + b * s.len, s.len))
                    << "put " << s.len << "@" << s.stride << " block " << b;
        }

        uct_iov_t diov = { dst.ptr() + s.off, s.len, dst.memh(), s.stride,
                           (unsigned)s.count };
        ASSERT_EQ(UCS_OK, run(true, &diov, 1, raddr));
        for (size_t b = 0; b < s.count; ++b) {
            ASSERT_EQ(0, memcmp(src.ptr() + s.off + b * s.stride,
                                dst.ptr() + s.off + b * s.stride, s.len))
                    << "get " << s.len << "@" << s.stride << " block " << b;
        }
    }

    send_msg(peer.to_fd(), u64_msg(0));
    recv_msg(peer.from_fd());
    recv_msg(peer.from_fd());
    send_msg(peer.to_fd(), u64_msg(0));
    EXPECT_EQ(0, peer.wait());
    uct_ep_destroy(ep);
}
