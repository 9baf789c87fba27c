/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Scatter-gather put (uct_ep_put_sgl_zcopy, UCX 1.22 and later): N local
 * buffers to N remote address / key pairs in one batch of work requests
 * with one completion, per-element counts and strides, the limits and the
 * errors. Built against an older UCX, the suite says it is skipped.
 */
#include "uct_test.h"

#if __has_include(<uct/api/v2/uct_v2.h>)
#include <uct/api/v2/uct_v2.h>
#endif

#include <algorithm>
#include <string.h>

using namespace dcx_test;

#ifdef UCT_IFACE_FLAG_V2_PUT_SGL_ZCOPY

namespace {

char local_byte(size_t i)
{
    return (char)(i * 7 + 3);
}

} // namespace

class uct_sgl : public testing::TestWithParam<std::string>,
                protected entity_pair {
protected:
    void start(config_t sender_extra = config_t())
    {
        sender_extra["TX_POLICY"] = GetParam();
        ASSERT_NO_FATAL_FAILURE(
                open_pair({ { "TX_POLICY", GetParam() } }, sender_extra));
        m_local.reset(new buffer(*m_sender, 64 * 1024));
        for (size_t i = 0; i < m_local->length(); ++i) {
            m_local->ptr()[i] = local_byte(i);
        }
        m_remote[0].reset(new buffer(*m_receiver, 64 * 1024));
        m_remote[1].reset(new buffer(*m_receiver, 64 * 1024));
        m_rkey[0].reset(new rkey(m_remote[0]->packed_rkey()));
        m_rkey[1].reset(new rkey(m_remote[1]->packed_rkey()));
    }

    uct_iface_attr_v2_t query_v2()
    {
        uct_iface_attr_v2_t attr = {};
        attr.field_mask          = UCT_IFACE_ATTR_FIELD_CAP_FLAGS |
                          UCT_IFACE_ATTR_FIELD_MAX_PUT_SGL_ZCOPY_COUNT;
        EXPECT_EQ(UCS_OK, uct_iface_query_v2(m_sender->iface(), &attr));
        return attr;
    }

    /* One element: @a length bytes from local offset @a loff to remote
     * buffer @a which at offset @a roff. */
    void add(size_t loff, size_t length, int which, size_t roff,
             size_t count = 1, size_t stride = 0)
    {
        m_buffers.push_back(m_local->ptr() + loff);
        m_lengths.push_back(length);
        m_memhs.push_back(m_local->memh());
        m_raddrs.push_back(m_remote[which]->addr() + roff);
        m_rkeys.push_back(m_rkey[which]->get());
        m_counts.push_back(count);
        m_strides.push_back(stride);
    }

public:
    ucs_status_t put_sgl(uct_completion_t *comp, bool with_counts = false)
    {
        return uct_ep_put_sgl_zcopy(m_ep, m_buffers.data(), m_lengths.data(),
                                    m_memhs.data(), m_raddrs.data(),
                                    m_rkeys.data(),
                                    with_counts ? m_counts.data() : NULL,
                                    with_counts ? m_strides.data() : NULL,
                                    m_buffers.size(), comp);
    }

protected:
    ucs_status_t put_sgl_wait(bool with_counts = false)
    {
        test_comp comp;
        ucs_status_t status = retry(all(), [&] {
            return put_sgl(&comp.uct, with_counts);
        });

        return wait_comp(all(), status, comp);
    }

    /* Remote buffer @a which at @a roff holds local bytes from @a loff. */
    void check(int which, size_t roff, size_t loff, size_t length)
    {
        for (size_t i = 0; i < length; ++i) {
            ASSERT_EQ(local_byte(loff + i), m_remote[which]->ptr()[roff + i])
                    << "remote " << which << " byte " << roff + i;
        }
    }

    bool remote_untouched()
    {
        for (int w = 0; w < 2; ++w) {
            for (size_t i = 0; i < m_remote[w]->length(); ++i) {
                if (m_remote[w]->ptr()[i] != 0) {
                    return false;
                }
            }
        }
        return true;
    }

    std::unique_ptr<buffer> m_local, m_remote[2];
    std::unique_ptr<rkey> m_rkey[2];
    std::vector<void *> m_buffers;
    std::vector<size_t> m_lengths, m_counts, m_strides;
    std::vector<uct_mem_h> m_memhs;
    std::vector<uint64_t> m_raddrs;
    std::vector<uct_rkey_t> m_rkeys;
};

/* Offered, with the count the device can carry in one batch. */
TEST_P(uct_sgl, capability)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "TX_QUEUE_LEN", "256" } }));
    uct_iface_attr_v2_t attr = query_v2();
    EXPECT_TRUE(attr.cap.flags & UCT_IFACE_FLAG_V2_PUT_SGL_ZCOPY);
    EXPECT_GE(attr.max_put_sgl_zcopy_count, 64u);
    EXPECT_LE(attr.max_put_sgl_zcopy_count, 256u);
}

/* Scattered elements to two registrations: every byte lands, one batch
 * with a single completion. */
TEST_P(uct_sgl, scattered_elements_one_completion)
{
    ASSERT_NO_FATAL_FAILURE(start());
    const size_t n = 32;
    for (size_t i = 0; i < n; ++i) {
        /* varying lengths, local pieces out of order, remote gaps */
        add((n - 1 - i) * 512, 8 + 13 * i, (int)(i % 2), i * 1024 + 5);
    }
    uct_dcx_tx_counters_t c0 = tx_counters(m_sender->iface());
    ASSERT_EQ(UCS_OK, put_sgl_wait());
    for (size_t i = 0; i < n; ++i) {
        ASSERT_NO_FATAL_FAILURE(check((int)(i % 2), i * 1024 + 5,
                                      (n - 1 - i) * 512, 8 + 13 * i));
    }
    uct_dcx_tx_counters_t c1 = tx_counters(m_sender->iface());
    EXPECT_EQ(n, c1.work_requests - c0.work_requests);
    EXPECT_EQ(1u, c1.signaled - c0.signaled);
    EXPECT_EQ(1u, c1.cqes - c0.cqes);
}

/* Per-element counts and strides: blocks on both sides. */
TEST_P(uct_sgl, counts_and_strides)
{
    ASSERT_NO_FATAL_FAILURE(start());
    add(0, 8, 0, 0, 16, 64); /* 16 blocks of 8 B, 64 apart */
    add(4096, 100, 1, 512, 3, 300);
    add(8192, 32, 0, 8192, 1, 0);
    ASSERT_EQ(UCS_OK, put_sgl_wait(true));
    for (size_t b = 0; b < 16; ++b) {
        ASSERT_NO_FATAL_FAILURE(check(0, b * 64, b * 64, 8));
        EXPECT_EQ(0, m_remote[0]->ptr()[b * 64 + 8]) << "past block " << b;
    }
    for (size_t b = 0; b < 3; ++b) {
        ASSERT_NO_FATAL_FAILURE(check(1, 512 + b * 300, 4096 + b * 300, 100));
    }
    ASSERT_NO_FATAL_FAILURE(check(0, 8192, 8192, 32));
}

/* Blocks that follow each other (stride = length, on both sides) are one
 * write; others one write per block. */
TEST_P(uct_sgl, adjacent_blocks_one_write)
{
    ASSERT_NO_FATAL_FAILURE(start());
    add(0, 16, 0, 1024, 32, 16); /* 32 adjacent blocks: one write */
    add(2048, 8, 1, 0, 4, 24); /* 4 separate blocks */
    uint64_t before = tx_counters(m_sender->iface()).work_requests;
    ASSERT_EQ(UCS_OK, put_sgl_wait(true));
    EXPECT_EQ(5u, tx_counters(m_sender->iface()).work_requests - before);
    ASSERT_NO_FATAL_FAILURE(check(0, 1024, 0, 32 * 16));
    EXPECT_EQ(0, m_remote[0]->ptr()[1024 + 32 * 16]);
    for (size_t b = 0; b < 4; ++b) {
        ASSERT_NO_FATAL_FAILURE(check(1, b * 24, 2048 + b * 24, 8));
        EXPECT_EQ(0, m_remote[1]->ptr()[b * 24 + 8]) << "past block " << b;
    }
}

/* Empty elements post nothing; a call with nothing to send is done. */
TEST_P(uct_sgl, empty_elements)
{
    ASSERT_NO_FATAL_FAILURE(start());
    add(0, 0, 0, 0);
    add(64, 16, 1, 64);
    add(128, 0, 0, 128);
    ASSERT_EQ(UCS_OK, put_sgl_wait());
    ASSERT_NO_FATAL_FAILURE(check(1, 64, 64, 16));
    EXPECT_EQ(1u, tx_counters(m_sender->iface()).work_requests);

    m_buffers.clear();
    m_lengths.clear();
    m_memhs.clear();
    m_raddrs.clear();
    m_rkeys.clear();
    m_counts.clear();
    m_strides.clear();
    add(0, 0, 0, 0);
    EXPECT_EQ(UCS_OK, put_sgl(NULL));
    EXPECT_EQ(UCS_OK, uct_ep_put_sgl_zcopy(m_ep, NULL, NULL, NULL, NULL, NULL,
                                           NULL, NULL, 0, NULL));
}

/* Bad input: a clear error, nothing written, the endpoint still works. */
TEST_P(uct_sgl, bad_input)
{
    ASSERT_NO_FATAL_FAILURE(start());
    size_t max = query_v2().max_put_sgl_zcopy_count;
    for (size_t i = 0; i <= max; ++i) {
        add(0, 8, 0, 8 * (i % 512));
    }
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, put_sgl(NULL)) << "count > max";

    m_buffers.resize(2);
    m_lengths.resize(2);
    m_memhs.resize(2);
    m_raddrs.resize(2);
    m_rkeys.resize(2);
    m_counts.resize(2);
    m_strides.resize(2);
    m_memhs[1] = UCT_MEM_HANDLE_NULL;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, put_sgl(NULL)) << "no memh";

    m_memhs[1] = m_local->memh();
    m_rkeys[1] = 0x1234; /* not from uct_rkey_unpack */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, put_sgl(NULL)) << "invalid rkey";

    m_rkeys[1]   = m_rkey[0]->get();
    m_lengths[1] = (size_t)UINT32_MAX + 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, put_sgl(NULL)) << "too long";
    m_lengths[1] = 8;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_sgl_zcopy(m_ep, m_buffers.data(), NULL, m_memhs.data(),
                                   m_raddrs.data(), m_rkeys.data(), NULL, NULL,
                                   2, NULL))
            << "NULL lengths";
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_sgl_zcopy(m_ep, m_buffers.data(), m_lengths.data(),
                                   m_memhs.data(), m_raddrs.data(),
                                   m_rkeys.data(), m_counts.data(), NULL, 2,
                                   NULL))
            << "counts without strides";
    EXPECT_TRUE(remote_untouched());

    /* The endpoint still works. */
    m_buffers.clear();
    m_lengths.clear();
    m_memhs.clear();
    m_raddrs.clear();
    m_rkeys.clear();
    m_counts.clear();
    m_strides.clear();
    add(256, 64, 1, 4096);
    ASSERT_EQ(UCS_OK, put_sgl_wait());
    ASSERT_NO_FATAL_FAILURE(check(1, 4096, 256, 64));
}

/* Elements whose remote ranges follow each other in one registration go
 * out as one write from a list mkey, programmed once and then found in the
 * layout cache; gaps, other registrations and the list's capacity cut the
 * runs. */
class uct_sgl_merge : public uct_sgl {
protected:
    uct_dcx_umr_counters_t umr()
    {
        return umr_counters(m_sender->iface());
    }

    uint64_t wrs_of_put()
    {
        uint64_t before = tx_counters(m_sender->iface()).work_requests;
        EXPECT_EQ(UCS_OK, put_sgl_wait());
        return tx_counters(m_sender->iface()).work_requests - before;
    }
};

TEST_P(uct_sgl_merge, consecutive_one_write_then_cached)
{
    ASSERT_NO_FATAL_FAILURE(start());
    const size_t n = 16;
    for (size_t i = 0; i < n; ++i) {
        add((n - i) * 1000, 64, 0, 128 + i * 64); /* local pieces scattered */
    }
    EXPECT_EQ(1u, wrs_of_put());
    for (size_t i = 0; i < n; ++i) {
        ASSERT_NO_FATAL_FAILURE(check(0, 128 + i * 64, (n - i) * 1000, 64));
    }
    uct_dcx_umr_counters_t c0 = umr();
    EXPECT_EQ(1u, c0.umrs);

    memset(m_remote[0]->ptr(), 0, m_remote[0]->length());
    EXPECT_EQ(1u, wrs_of_put());
    for (size_t i = 0; i < n; ++i) {
        ASSERT_NO_FATAL_FAILURE(check(0, 128 + i * 64, (n - i) * 1000, 64));
    }
    uct_dcx_umr_counters_t c1 = umr();
    EXPECT_EQ(c0.umrs, c1.umrs) << "the layout was not found in the cache";
    EXPECT_GT(c1.hits, c0.hits);
}

TEST_P(uct_sgl_merge, gaps_and_registrations_cut_runs)
{
    ASSERT_NO_FATAL_FAILURE(start());
    for (size_t i = 0; i < 4; ++i) {
        add(i * 256, 32, 0, i * 32); /* run 1: remote 0, 0..127 */
    }
    for (size_t i = 0; i < 4; ++i) {
        add(2048 + i * 256, 32, 1, i * 32); /* run 2: other registration */
    }
    add(4096, 32, 1, 1024); /* alone: a gap before it */
    add(4352, 32, 1, 1024 + 64); /* alone: a gap again */
    EXPECT_EQ(4u, wrs_of_put());
    for (size_t i = 0; i < 4; ++i) {
        ASSERT_NO_FATAL_FAILURE(check(0, i * 32, i * 256, 32));
        ASSERT_NO_FATAL_FAILURE(check(1, i * 32, 2048 + i * 256, 32));
    }
    ASSERT_NO_FATAL_FAILURE(check(1, 1024, 4096, 32));
    ASSERT_NO_FATAL_FAILURE(check(1, 1024 + 64, 4352, 32));
}

TEST_P(uct_sgl_merge, more_elements_than_one_list)
{
    ASSERT_NO_FATAL_FAILURE(start());
    add(0, 8, 0, 0); /* a run of two creates the UMR engine: its list */
    add(64, 8, 0, 8);
    ASSERT_EQ(UCS_OK, put_sgl_wait());
    size_t list = umr().max_pieces;
    ASSERT_GT(list, 1u);
    size_t n        = std::min<size_t>(2 * list + 3,
                                query_v2().max_put_sgl_zcopy_count);
    size_t expected = (n + list - 1) / list;

    /* Unevenly spaced pieces (gaps of 12 and 4 bytes): lists, not one
     * interleaved mkey. */
    m_buffers.clear();
    m_lengths.clear();
    m_memhs.clear();
    m_raddrs.clear();
    m_rkeys.clear();
    m_counts.clear();
    m_strides.clear();
    for (size_t i = 0; i < n; ++i) {
        add(i * 24 + (i % 2) * 4, 16, 0, 4096 + i * 16);
    }
    EXPECT_EQ(expected, wrs_of_put()) << n << " elements, lists of " << list;
    for (size_t i = 0; i < n; ++i) {
        ASSERT_NO_FATAL_FAILURE(
                check(0, 4096 + i * 16, i * 24 + (i % 2) * 4, 16));
    }
}

/* Evenly spaced local pieces of one length in one registration, into one
 * remote range: one write from one interleaved mkey, beyond a list's
 * capacity, programmed once and then found in the cache. */
TEST_P(uct_sgl_merge, evenly_spaced_one_interleaved_write)
{
    ASSERT_NO_FATAL_FAILURE(start());
    add(0, 8, 0, 0); /* a run of two creates the UMR engine */
    add(64, 8, 0, 8);
    ASSERT_EQ(UCS_OK, put_sgl_wait());
    size_t list = umr().max_pieces;
    size_t n    = std::min<size_t>(3 * list + 1,
                                query_v2().max_put_sgl_zcopy_count);
    ASSERT_GT(n, list);

    m_buffers.clear();
    m_lengths.clear();
    m_memhs.clear();
    m_raddrs.clear();
    m_rkeys.clear();
    m_counts.clear();
    m_strides.clear();
    for (size_t i = 0; i < n; ++i) {
        add(100 + i * 40, 16, 0, 8192 + i * 16);
    }
    uct_dcx_umr_counters_t c0 = umr();
    EXPECT_EQ(1u, wrs_of_put()) << n << " elements, lists of " << list;
    for (size_t i = 0; i < n; ++i) {
        ASSERT_NO_FATAL_FAILURE(check(0, 8192 + i * 16, 100 + i * 40, 16));
    }
    uct_dcx_umr_counters_t c1 = umr();
    EXPECT_EQ(c0.umrs + 1, c1.umrs);

    memset(m_remote[0]->ptr(), 0, m_remote[0]->length());
    EXPECT_EQ(1u, wrs_of_put());
    ASSERT_NO_FATAL_FAILURE(check(0, 8192, 100, 16));
    ASSERT_NO_FATAL_FAILURE(
            check(0, 8192 + (n - 1) * 16, 100 + (n - 1) * 40, 16));
    EXPECT_EQ(c1.umrs, umr().umrs) << "the layout was not found in the cache";
}

/* Pieces that follow each other on both sides are one plain write: no UMR,
 * also with UMR off. */
TEST_P(uct_sgl_merge, contiguous_on_both_sides_one_plain_write)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "UMR", "no" } }));
    for (size_t i = 0; i < 40; ++i) {
        add(512 + i * 24, 24, 1, 2048 + i * 24);
    }
    EXPECT_EQ(1u, wrs_of_put());
    ASSERT_NO_FATAL_FAILURE(check(1, 2048, 512, 40 * 24));
    EXPECT_EQ(0u, umr().umrs);
}

TEST_P(uct_sgl_merge, without_umr_one_write_each)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "UMR", "no" } }));
    for (size_t i = 0; i < 8; ++i) {
        add(i * 100, 40, 0, i * 40);
    }
    EXPECT_EQ(8u, wrs_of_put());
    for (size_t i = 0; i < 8; ++i) {
        ASSERT_NO_FATAL_FAILURE(check(0, i * 40, i * 100, 40));
    }
}

INSTANTIATE_TEST_SUITE_P(policy, uct_sgl_merge,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));

/* A peer process exposes a zeroed buffer and, when told, sends it back
 * whole, so the parent checks every byte: written ones and untouched ones. */
DCX_CHILD_ROLE(sgl_target)
{
    entity e;
    buffer buf(e, 64 * 1024);

    if (e.iface() == nullptr) {
        return 2;
    }
    memset(buf.ptr(), 0, buf.length());
    send_msg(out_fd, e.address());
    send_msg(out_fd, buf.packed_rkey());
    uint64_t addr = buf.addr();
    send_msg(out_fd, std::vector<char>((char *)&addr, (char *)&addr + 8));
    recv_msg(in_fd, 120); /* the parent flushed */
    send_msg(out_fd, std::vector<char>(buf.ptr(), buf.ptr() + buf.length()));
    recv_msg(in_fd, 120); /* the parent is done */
    return 0;
}

/* Between processes: a run that merges, scattered pieces and strided
 * blocks, in three calls, every byte of the peer's buffer checked. */
TEST(uct_sgl_multiproc, pieces_land_in_another_process)
{
    child peer("sgl_target");
    entity e;
    buffer local(e, 64 * 1024);
    std::vector<entity *> me = { &e };
    uct_ep_h ep;

    for (size_t i = 0; i < local.length(); ++i) {
        local.ptr()[i] = local_byte(i);
    }
    ASSERT_EQ(UCS_OK, e.connect(recv_msg(peer.from_fd()), &ep));
    rkey rk(recv_msg(peer.from_fd()));
    std::vector<char> addr_msg = recv_msg(peer.from_fd());
    uint64_t raddr;
    ASSERT_EQ(8u, addr_msg.size());
    memcpy(&raddr, addr_msg.data(), 8);

    /* expected[] mirrors the peer's buffer. */
    std::vector<char> expected(64 * 1024, 0);
    struct call {
        std::vector<void *> buffers;
        std::vector<size_t> lengths, counts, strides;
        std::vector<uct_mem_h> memhs;
        std::vector<uint64_t> raddrs;
        std::vector<uct_rkey_t> rkeys;
    } calls[3];
    auto add = [&](call &c, size_t loff, size_t len, size_t roff, size_t count,
                   size_t stride) {
        c.buffers.push_back(local.ptr() + loff);
        c.lengths.push_back(len);
        c.memhs.push_back(local.memh());
        c.raddrs.push_back(raddr + roff);
        c.rkeys.push_back(rk.get());
        c.counts.push_back(count);
        c.strides.push_back(stride);
        for (size_t b = 0; b < count; ++b) {
            memcpy(&expected[roff + b * stride],
                   local.ptr() + loff + b * stride, len);
        }
    };
    for (size_t i = 0; i < 40; ++i) { /* one run: merged */
        add(calls[0], 30000 - i * 700, 48, i * 48, 1, 0);
    }
    for (size_t i = 0; i < 40; ++i) { /* scattered, out of order */
        add(calls[1], i * 300, 7 + i, 8192 + ((i * 17) % 40) * 128, 1, 0);
    }
    add(calls[2], 40000, 24, 20000, 10, 100); /* strided blocks */
    add(calls[2], 50000, 500, 30000, 1, 0);

    for (int k = 0; k < 3; ++k) {
        call &c = calls[k];
        test_comp comp;
        ucs_status_t status = retry(me, [&] {
            return uct_ep_put_sgl_zcopy(ep, c.buffers.data(), c.lengths.data(),
                                        c.memhs.data(), c.raddrs.data(),
                                        c.rkeys.data(),
                                        (k == 2) ? c.counts.data() : NULL,
                                        (k == 2) ? c.strides.data() : NULL,
                                        c.buffers.size(), &comp.uct);
        });
        status              = wait_comp(me, status, comp);
        ASSERT_EQ(UCS_OK, status) << "call " << k;
    }
    ASSERT_TRUE(iface_flushed(me, e));

    send_msg(peer.to_fd(), std::vector<char>(1, 0));
    std::vector<char> got = recv_msg(peer.from_fd());
    ASSERT_EQ(expected.size(), got.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(expected[i], got[i]) << "peer byte " << i;
    }
    uct_ep_destroy(ep);
    send_msg(peer.to_fd(), std::vector<char>(1, 0));
    EXPECT_EQ(0, peer.wait());
}

/* Disabled: not offered, and the call refuses. */
TEST_P(uct_sgl, disabled)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "PUT_SGL", "n" } }));
    uct_iface_attr_v2_t attr = query_v2();
    EXPECT_FALSE(attr.cap.flags & UCT_IFACE_FLAG_V2_PUT_SGL_ZCOPY);
    EXPECT_EQ(0u, attr.max_put_sgl_zcopy_count);
    add(0, 8, 0, 0);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, put_sgl(NULL));
    EXPECT_TRUE(remote_untouched());
}

/* A batch that does not fit the free send queue waits (NO_RESOURCE) and
 * goes out whole once completions free it. */
TEST_P(uct_sgl, waits_for_room)
{
    ASSERT_NO_FATAL_FAILURE(start({ { "TX_QUEUE_LEN", "64" } }));
    size_t max = query_v2().max_put_sgl_zcopy_count;
    ASSERT_GE(max, 16u);
    uint64_t v    = 1;
    size_t posted = 0;
    /* Fill the queue without progress. */
    while (uct_ep_put_short(m_ep, &v, 8, m_remote[1]->addr(),
                            m_rkey[1]->get()) == UCS_OK) {
        ++posted;
    }
    ASSERT_GT(posted, 0u);
    for (size_t i = 0; i < max; ++i) {
        add(i * 8, 8, 0, i * 8);
    }
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, put_sgl(NULL));
    ASSERT_EQ(UCS_OK, put_sgl_wait());
    ASSERT_NO_FATAL_FAILURE(check(0, 0, 0, 8 * max));
}

/* A batch that does not fit goes to the pending queue and stays there until
 * it fits: pending_add does not answer BUSY because one slot is free (UCP
 * would call again at once, for ever). */
TEST_P(uct_sgl, pending_until_the_batch_fits)
{
    struct pending_sgl {
        uct_pending_req_t req;
        uct_sgl *test;
        int done;
    } p;

    ASSERT_NO_FATAL_FAILURE(start({ { "TX_QUEUE_LEN", "64" } }));
    size_t max = query_v2().max_put_sgl_zcopy_count;
    ASSERT_GE(max, 8u);
    /* Leave half a batch of free slots (no progress meanwhile). */
    uint64_t v = 1;
    for (size_t i = 0; i < max + max / 2; ++i) {
        ASSERT_EQ(UCS_OK, uct_ep_put_short(m_ep, &v, 8, m_remote[1]->addr(),
                                           m_rkey[1]->get()));
    }
    /* Remote gaps: one write per element (pieces that follow each other on
     * both sides would be one write). */
    for (size_t i = 0; i < max; ++i) {
        add(i * 8, 8, 0, i * 16);
    }
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, put_sgl(NULL));

    p.test     = this;
    p.done     = 0;
    p.req.func = [](uct_pending_req_t *req) -> ucs_status_t {
        pending_sgl *ps     = ucs_container_of(req, pending_sgl, req);
        ucs_status_t status = ps->test->put_sgl(NULL);
        ps->done += (status == UCS_INPROGRESS) || (status == UCS_OK);
        return UCS_STATUS_IS_ERR(status) ? status : UCS_OK;
    };
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &p.req, 0))
            << "pending_add refused while the batch does not fit";
    ASSERT_TRUE(wait_for(all(), [&] { return p.done != 0; }))
            << "the pending batch was never sent";
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    for (size_t i = 0; i < max; ++i) {
        ASSERT_NO_FATAL_FAILURE(check(0, i * 16, i * 8, 8));
    }
}

INSTANTIATE_TEST_SUITE_P(policy, uct_sgl,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));

#else

TEST(uct_sgl, needs_ucx_1_22)
{
    GTEST_SKIP() << "uct_ep_put_sgl_zcopy comes with UCX 1.22";
}

#endif
