/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx at scale: many senders streaming active messages to one receiver
 * (flow control, no loss), and ten thousand endpoints from one interface.
 */
#include "uct_test.h"

#include "dcxemu.h"

#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <ucs/datastruct/khash.h>
#include <uct/base/uct_iface.h>

extern "C" {
#include <dcx_iface.h>
}

#include <malloc.h>
#include <string.h>
#include <unistd.h>

using namespace dcx_test;

namespace {

/* Payload of a streamed message: sender, sequence, then a pattern. */
struct stream_hdr {
    uint32_t sender;
    uint32_t seq;
};

size_t stream_length(uint32_t seq)
{
    return sizeof(stream_hdr) + (seq % 97) * 8;
}

char stream_byte(uint32_t sender, uint32_t seq, size_t i)
{
    return (char)(sender * 31 + seq * 7 + i);
}

struct stream_pack_arg {
    uint32_t sender;
    uint32_t seq;
};

size_t stream_pack(void *dest, void *arg)
{
    stream_pack_arg *a = (stream_pack_arg *)arg;
    stream_hdr hdr     = { a->sender, a->seq };
    size_t length      = stream_length(a->seq);

    memcpy(dest, &hdr, sizeof(hdr));
    for (size_t i = sizeof(hdr); i < length; ++i) {
        ((char *)dest)[i] = stream_byte(a->sender, a->seq, i);
    }
    return length;
}

struct stream_checker {
    std::vector<uint32_t> next; /* expected sequence per sender */
    uint64_t total = 0;
    uint64_t bad   = 0;
};

ucs_status_t stream_check(void *arg, void *data, size_t length, unsigned flags)
{
    stream_checker *c = (stream_checker *)arg;
    stream_hdr hdr;

    memcpy(&hdr, data, sizeof(hdr));
    if ((hdr.sender >= c->next.size()) || (hdr.seq != c->next[hdr.sender]) ||
        (length != stream_length(hdr.seq))) {
        ++c->bad;
    } else {
        for (size_t i = sizeof(hdr); i < length; ++i) {
            if (((char *)data)[i] != stream_byte(hdr.sender, hdr.seq, i)) {
                ++c->bad;
                break;
            }
        }
        ++c->next[hdr.sender];
    }
    ++c->total;
    return UCS_OK;
}

/* Send QPs and DCTs this process holds on the device model. */
dcxemu_objects device_objects()
{
    typedef int (*read_fn_t)(struct dcxemu_objects *);
    static read_fn_t read_fn = emu_sym<read_fn_t>("dcxemu_objects_read");
    dcxemu_objects o         = {};

    if (read_fn != nullptr) {
        EXPECT_EQ(0, read_fn(&o));
    }
    return o;
}

} // namespace

/* Streams <count> bcopy active messages to the parent as sender <id>, then
 * keeps serving (grants, completions) until the parent says goodbye. */
DCX_CHILD_ROLE(am_streamer)
{
    entity e(config_t{ { "FC_WND_SIZE", "32" } });
    uct_ep_h ep;

    if ((e.iface() == nullptr) || (e.connect(recv_msg(in_fd), &ep) != UCS_OK)) {
        return 2;
    }

    uint32_t id              = std::stoul(args.at(0));
    uint32_t count           = std::stoul(args.at(1));
    std::vector<entity *> me = { &e };

    for (uint32_t seq = 0; seq < count; ++seq) {
        stream_pack_arg arg = { id, seq };
        ucs_status_t status = retry(me, [&] {
            ssize_t len = uct_ep_am_bcopy(ep, 9, stream_pack, &arg, 0);
            return (len < 0) ? (ucs_status_t)len : UCS_OK;
        });
        if (status != UCS_OK) {
            return 3;
        }
    }
    if (!iface_flushed(me, e, 120)) {
        return 4;
    }
    send_msg(out_fd, u64_msg(count));

    /* Stay reachable until the parent has everything. */
    for (;;) {
        struct timeval tv = { 0, 1000 };
        fd_set fds;
        e.progress();
        FD_ZERO(&fds);
        FD_SET(in_fd, &fds);
        if (select(in_fd + 1, &fds, NULL, NULL, &tv) > 0) {
            recv_msg(in_fd); /* the whole goodbye, so the parent's write
                                never meets a closed pipe */
            break;
        }
    }
    uct_ep_destroy(ep);
    return 0;
}

/* Many-to-one: 16 processes stream active messages to one receiver whose
 * receive queue holds only a fraction of what they could send at once; flow
 * control keeps every message, in order per sender, with its payload. */
TEST(uct_scale, many_to_one_16_senders_no_loss)
{
    const uint32_t num_senders = 16, count = 1000;
    entity receiver(config_t{ { "RX_QUEUE_LEN", "512" } });
    stream_checker checker;
    std::vector<std::unique_ptr<child>> children;
    std::vector<entity *> me = { &receiver };

    ASSERT_NE(nullptr, receiver.iface());
    checker.next.resize(num_senders, 0);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver.iface(), 9,
                                               stream_check, &checker, 0));

    for (uint32_t i = 0; i < num_senders; ++i) {
        children.emplace_back(
                new child("am_streamer",
                          { std::to_string(i), std::to_string(count) }));
        send_msg(children.back()->to_fd(), receiver.address());
    }

    EXPECT_TRUE(wait_for(
            me, [&] { return checker.total >= (uint64_t)num_senders * count; },
            300))
            << "received " << checker.total << " of " << num_senders * count;

    for (auto &c : children) {
        std::vector<char> done = recv_msg(c->from_fd(), 60);
        EXPECT_EQ(sizeof(uint64_t), done.size());
        send_msg(c->to_fd(), u64_msg(0));
    }
    for (size_t i = 0; i < children.size(); ++i) {
        int status = -1;
        EXPECT_TRUE(wait_for(
                me, [&] { return children[i]->exited(&status); }, 60));
        EXPECT_EQ(0, status) << "sender " << i;
    }

    EXPECT_EQ(0u, checker.bad);
    EXPECT_EQ((uint64_t)num_senders * count, checker.total);
    for (uint32_t i = 0; i < num_senders; ++i) {
        EXPECT_EQ(count, checker.next[i]) << "sender " << i;
    }
}

/* 10,000 endpoints from one interface to 64 peer interfaces (DCTs with
 * small receive queues): every endpoint puts its own word and all of them
 * land; endpoints cost no QP and little memory. */
TEST(uct_scale, ten_thousand_endpoints)
{
    const int num_peers = 64, num_eps = 10000, num_dci = 16;
    const int per_peer = (num_eps + num_peers - 1) / num_peers;
    std::vector<std::unique_ptr<entity>> peers;
    std::vector<std::unique_ptr<buffer>> targets;
    std::vector<std::unique_ptr<rkey>> rkeys;
    std::vector<uct_ep_h> eps(num_eps);
    entity sender(config_t{ { "NUM_DCI", std::to_string(num_dci) } });
    std::vector<entity *> everybody = { &sender };

    ASSERT_NE(nullptr, sender.iface());
    for (int p = 0; p < num_peers; ++p) {
        peers.emplace_back(new entity({ { "NUM_DCI", "1" },
                                        { "RX_QUEUE_LEN", "16" },
                                        { "TX_QUEUE_LEN", "16" } }));
        ASSERT_NE(nullptr, peers.back()->iface());
        targets.emplace_back(new buffer(*peers.back(), 8 * per_peer));
        rkeys.emplace_back(new rkey(targets.back()->packed_rkey()));
        everybody.push_back(peers.back().get());
    }

    dcxemu_objects objs_before = device_objects();
    struct mallinfo2 before    = mallinfo2();
    for (int i = 0; i < num_eps; ++i) {
        eps[i] = sender.connect(*peers[i % num_peers]);
        ASSERT_NE(nullptr, eps[i]) << "endpoint " << i;
    }
    struct mallinfo2 after = mallinfo2();
    double per_ep = (double)(after.uordblks - before.uordblks) / num_eps;
    dcxemu_objects objs_connected = device_objects();

    for (int i = 0; i < num_eps; ++i) {
        uint64_t value = 0x5ca1e000000000ull + i;
        uint64_t addr  = targets[i % num_peers]->addr() + 8 * (i / num_peers);
        ASSERT_EQ(UCS_OK, retry(everybody,
                                [&] {
                                    return uct_ep_put_short(
                                            eps[i], &value, 8, addr,
                                            rkeys[i % num_peers]->get());
                                }))
                << "endpoint " << i;
    }
    ASSERT_TRUE(iface_flushed(everybody, sender, 120));

    for (int i = 0; i < num_eps; ++i) {
        uint64_t value = targets[i % num_peers]->word(i / num_peers);
        ASSERT_EQ(0x5ca1e000000000ull + i, value) << "endpoint " << i;
    }

    /* Endpoints cost no QP. DCIs are created as the pool first needs them
     * (one per interface to begin with): the traffic brings the sender's
     * pool up to its NUM_DCI DCIs at most, whatever the number of endpoints;
     * the peers, which only receive, keep their one DCI and one DCT. */
    dcxemu_objects objs_after = device_objects();
    EXPECT_EQ(objs_before.qps, objs_connected.qps);
    EXPECT_EQ(objs_before.dcts, objs_connected.dcts);
    EXPECT_EQ((uint32_t)(1 + num_peers), objs_before.qps);
    EXPECT_LE(objs_after.qps, (uint32_t)(num_dci + num_peers));
    EXPECT_EQ(objs_before.dcts, objs_after.dcts);
    EXPECT_EQ((uint32_t)(1 + num_peers), objs_after.dcts);
    printf("[ scale    ] QPs of this process: %u send QPs before the "
           "endpoints, %u after them, %u after their traffic (at most %d "
           "DCIs + %d peer DCIs), %u DCTs\n",
           objs_before.qps, objs_connected.qps, objs_after.qps, num_dci,
           num_peers, objs_after.dcts);

    RecordProperty("heap_bytes_per_endpoint", std::to_string(per_ep));
    printf("[ scale    ] %d endpoints to %d DCTs: %.1f heap bytes per "
           "endpoint of %zu B (pool slots, peer table and allocator "
           "included)\n",
           num_eps, num_peers, per_ep, sizeof(uct_dcx_ep_t));
    /* The endpoint (its size depends on the UCX release's base endpoint) in
     * a pool slot with the pool's header, plus its share of the pool chunks
     * and of the shared peer records. */
    EXPECT_LE(per_ep, 64.0) << "endpoints grew past the 64 B goal";

    for (uct_ep_h ep : eps) {
        uct_ep_destroy(ep);
    }
}

/* DCIs are created when the pool first needs them: 150 interfaces with the
 * default pool of UCX_DCX_NUM_DCI (32) DCIs, which the device model, with
 * its 4096 QPs per fabric, could not hold if every DCI existed from the
 * start, open, each with one DCI and one DCT, and all of them are
 * reachable. */
TEST(uct_scale, dcis_created_on_demand)
{
    const int num_peers = 150;
    std::vector<std::unique_ptr<entity>> peers;
    entity sender;
    std::vector<entity *> everybody = { &sender };
    std::vector<uint64_t> got(num_peers, 0);

    ASSERT_NE(nullptr, sender.iface());
    dcxemu_objects objs_before = device_objects();
    for (int p = 0; p < num_peers; ++p) {
        peers.emplace_back(new entity(config_t{ { "RX_QUEUE_LEN", "16" } }));
        ASSERT_NE(nullptr, peers.back()->iface()) << "interface " << p;
        everybody.push_back(peers.back().get());
    }
    dcxemu_objects objs_after = device_objects();
    EXPECT_EQ((uint32_t)num_peers, objs_after.qps - objs_before.qps);
    EXPECT_EQ((uint32_t)num_peers, objs_after.dcts - objs_before.dcts);

    std::vector<std::unique_ptr<buffer>> targets;
    std::vector<std::unique_ptr<rkey>> rkeys;
    std::vector<uct_ep_h> eps;
    for (int p = 0; p < num_peers; ++p) {
        targets.emplace_back(new buffer(*peers[p], 8));
        rkeys.emplace_back(new rkey(targets.back()->packed_rkey()));
        eps.push_back(sender.connect(*peers[p]));
        ASSERT_NE(nullptr, eps.back());
        uint64_t value = 0xdc1000 + p;
        ASSERT_EQ(UCS_OK, retry(everybody,
                                [&] {
                                    return uct_ep_put_short(eps[p], &value, 8,
                                                            targets[p]->addr(),
                                                            rkeys[p]->get());
                                }))
                << "peer " << p;
    }
    ASSERT_TRUE(iface_flushed(everybody, sender, 60));
    for (int p = 0; p < num_peers; ++p) {
        uint64_t v = targets[p]->word(0);
        EXPECT_EQ(0xdc1000u + p, v) << "peer " << p;
        uct_ep_destroy(eps[p]);
    }
    /* The sender's pool grew with its traffic, never beyond NUM_DCI (it had
     * one DCI before). */
    EXPECT_LE(device_objects().qps - objs_after.qps,
              iface_config_ulong("NUM_DCI") - 1);
}
