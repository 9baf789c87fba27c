/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Every dcx operation between two interfaces of one process, with the data
 * verified, plus flush, pending and misuse.
 */
#include "uct_test.h"

#include <gtest/gtest-spi.h>

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <string.h>

using namespace dcx_test;

namespace {

struct am_record {
    std::vector<std::vector<char>> messages;
    std::vector<void *> kept; /* descriptors kept */
    bool keep = false;
};

ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    am_record *rec = (am_record *)arg;

    rec->messages.emplace_back((char *)data, (char *)data + length);
    if (rec->keep && (flags & UCT_CB_PARAM_FLAG_DESC)) {
        rec->kept.push_back(data);
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

} // namespace

/* Every operation under every DCI policy. */
class uct_ops : public testing::TestWithParam<std::string>,
                protected entity_pair {
protected:
    virtual config_t sender_config()
    {
        return { { "TX_POLICY", GetParam() } };
    }

    void SetUp() override
    {
        /* hw_dcs: the fixture's endpoint on DCI stream 1 (one made and
         * destroyed before it takes stream 0), so that every operation goes
         * out on a stream that only a stream DCI has. */
        bool hw_dcs     = GetParam() == "hw_dcs";
        bool hybrid     = GetParam() == "dcs_hybrid";
        config_t config = sender_config();

        /* dcs_hybrid: a pool of one DCI, which another endpoint holds when
         * the fixture's first asks, so that it goes to the stream DCI. */
        if (hybrid) {
            config["NUM_DCI"] = "1";
        }
        ASSERT_NO_FATAL_FAILURE(open_pair({ { "TX_POLICY", GetParam() } },
                                          config, !hw_dcs && !hybrid));
        if (hw_dcs) {
            uct_ep_h first = m_sender->connect(*m_receiver);
            ASSERT_NE(nullptr, first);
            uct_ep_destroy(first);
            m_ep = m_sender->connect(*m_receiver);
            ASSERT_NE(nullptr, m_ep);
        } else if (hybrid) {
            ASSERT_NO_FATAL_FAILURE(join_stream_dci());
        }
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface(), 5,
                                                   am_handler, &m_am, 0));
    }

    /* dcs_hybrid: the fixture's endpoint on stream 1 of the stream DCI.
     * A keepalive takes the pool's only DCI (its completion is not polled
     * yet, so the DCI stays taken); the next two endpoints' keepalives find
     * the pool empty and take streams 0 and 1 for good. Without DCI streams
     * (rdma-core before 37) there is no stream DCI: the second keepalive
     * waits, and the fixture's endpoint is an ordinary one. */
    void join_stream_dci()
    {
        uct_ep_h holder = m_sender->connect(*m_receiver);
        uct_ep_h first  = m_sender->connect(*m_receiver);
        ucs_status_t status;

        ASSERT_NE(nullptr, holder);
        ASSERT_NE(nullptr, first);
        m_ep = m_sender->connect(*m_receiver);
        ASSERT_NE(nullptr, m_ep);
        ASSERT_EQ(UCS_OK, uct_ep_check(holder, 0, NULL));
        status = uct_ep_check(first, 0, NULL);
        if (status == UCS_OK) {
            m_stream_dci = true;
            ASSERT_EQ(UCS_OK, uct_ep_check(m_ep, 0, NULL));
        } else {
            ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
        }
        EXPECT_EQ(UCS_OK, flush_ep(all(), holder));
        EXPECT_EQ(UCS_OK, flush_ep(all(), first));
        uct_ep_destroy(holder);
        uct_ep_destroy(first);
    }

    bool m_stream_dci = false; /* dcs_hybrid: it has one */

    void TearDown() override
    {
        if (m_ep != nullptr) {
            EXPECT_EQ(UCS_OK, flush_ep(all(), m_ep));
        }
        for (void *desc : m_am.kept) {
            uct_iface_release_desc(
                    UCS_PTR_BYTE_OFFSET(desc, -(ptrdiff_t)rx_headroom));
        }
        close_pair();
    }

    /* Whether the port is RoCE (the device address flags: a GID follows).
     * dcx offers no masked atomics there: the raw WQE's address vector would
     * need the peer's Ethernet address. */
    bool roce()
    {
        return m_receiver->address()[3] & 1;
    }

    /* A fetching atomic (32 or 64 bits, by T) on the fixture's endpoint,
     * waited for: the old value. */
    template <typename T>
    T atomic_fetch(uct_atomic_op_t op, T value, uint64_t addr, uct_rkey_t rk)
    {
        T result = (T)0xdeadbeefdeadbeefull;
        test_comp comp;
        ucs_status_t status = retry(all(), [&] {
            return (sizeof(T) == 4) ?
                           uct_ep_atomic32_fetch(m_ep, op, value,
                                                 (uint32_t *)&result, addr, rk,
                                                 &comp.uct) :
                           uct_ep_atomic64_fetch(m_ep, op, value,
                                                 (uint64_t *)&result, addr, rk,
                                                 &comp.uct);
        });

        EXPECT_EQ(UCS_OK, wait_comp(all(), status, comp)) << "op " << op;
        return result;
    }

    /* A compare-swap, waited for: the old value. */
    template <typename T>
    T atomic_cswap(T compare, T swap, uint64_t addr, uct_rkey_t rk)
    {
        T result = 0;
        test_comp comp;
        ucs_status_t status = retry(all(), [&] {
            return (sizeof(T) == 4) ?
                           uct_ep_atomic_cswap32(m_ep, compare, swap, addr, rk,
                                                 (uint32_t *)&result,
                                                 &comp.uct) :
                           uct_ep_atomic_cswap64(m_ep, compare, swap, addr, rk,
                                                 (uint64_t *)&result,
                                                 &comp.uct);
        });

        EXPECT_EQ(UCS_OK, wait_comp(all(), status, comp)) << "compare-swap";
        return result;
    }

    /* A posted atomic, flushed (asserts). */
    template <typename T>
    void atomic_post(uct_atomic_op_t op, T value, uint64_t addr, uct_rkey_t rk)
    {
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return (sizeof(T) == 4) ?
                                     uct_ep_atomic32_post(m_ep, op, value, addr,
                                                          rk) :
                                     uct_ep_atomic64_post(m_ep, op, value, addr,
                                                          rk);
                  }));
        ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
    }

    void wait_am(size_t count)
    {
        ASSERT_TRUE(
                wait_for(all(), [&] { return m_am.messages.size() >= count; }))
                << "received " << m_am.messages.size() << " of " << count;
    }

    am_record m_am;
};

TEST_P(uct_ops, capabilities)
{
    const uct_iface_attr_t &attr = m_sender->attr();
    uint64_t need = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                    UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT |
                    UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                    UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                    UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                    UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                    UCT_IFACE_FLAG_ATOMIC_DEVICE;

    EXPECT_EQ(need, attr.cap.flags & need);
    /* A shared DCI fails every endpoint using it: no peer failure handling
     * for rand, hw_dcs, and dcs_hybrid with its stream DCI. */
    EXPECT_EQ((GetParam() != "rand") && (GetParam() != "hw_dcs") &&
                      !m_stream_dci,
              !!(attr.cap.flags & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE));
    EXPECT_FALSE(attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP);
    EXPECT_GE(attr.cap.am.max_short, 64u);
    EXPECT_GE(attr.cap.am.max_bcopy, 64u); /* UCP_MIN_BCOPY */
    EXPECT_EQ(SIZE_MAX, attr.max_num_eps);
    EXPECT_LT(attr.iface_addr_len, 64u);
    EXPECT_LT(attr.device_addr_len, 32u);
    EXPECT_TRUE(attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_CSWAP));
    /* 32-bit: every op UCP uses, as masked atomics (the model reports them
     * in its DEVX atomic capabilities, as mlx5 does) */
    const uint64_t ops32 = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                           UCS_BIT(UCT_ATOMIC_OP_AND) |
                           UCS_BIT(UCT_ATOMIC_OP_OR) |
                           UCS_BIT(UCT_ATOMIC_OP_XOR);
    if (roce()) {
        EXPECT_EQ(0u, attr.cap.atomic32.op_flags);
        EXPECT_EQ(0u, attr.cap.atomic32.fop_flags);
        return;
    }
    EXPECT_EQ(ops32, attr.cap.atomic32.op_flags);
    EXPECT_EQ(ops32 | UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                      UCS_BIT(UCT_ATOMIC_OP_CSWAP),
              attr.cap.atomic32.fop_flags);
}

TEST_P(uct_ops, put_short)
{
    buffer target(*m_receiver, 4096);
    rkey rk(target.packed_rkey());

    for (size_t length : { size_t(0), size_t(1), size_t(8), size_t(100),
                           m_sender->attr().cap.put.max_short }) {
        std::vector<char> data = data_vector(length, length);
        memset(target.ptr(), 0, target.length());
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_put_short(m_ep, data.data(), length,
                                              target.addr(), rk.get());
                  }));
        ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
        EXPECT_EQ(data, std::vector<char>(target.ptr(), target.ptr() + length))
                << length;
        EXPECT_EQ(0, target.ptr()[length]) << "wrote past the end";
    }
}

TEST_P(uct_ops, put_short_too_long)
{
    buffer target(*m_receiver, 4096);
    rkey rk(target.packed_rkey());
    std::vector<char> data(m_sender->attr().cap.put.max_short + 1);

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_short(m_ep, data.data(), data.size(), target.addr(),
                               rk.get()));
}

TEST_P(uct_ops, put_bcopy)
{
    buffer target(*m_receiver, 16384);
    rkey rk(target.packed_rkey());

    for (size_t length :
         { size_t(1), size_t(1000), m_sender->attr().cap.put.max_bcopy }) {
        std::vector<char> data = data_vector(length, 3);
        pack_arg arg           = { data.data(), length };
        ssize_t packed;
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      packed = uct_ep_put_bcopy(m_ep, pack_cb, &arg,
                                                target.addr(), rk.get());
                      return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
                  }));
        EXPECT_EQ((ssize_t)length, packed);
        ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
        EXPECT_EQ(0, memcmp(data.data(), target.ptr(), length)) << length;
    }
}

TEST_P(uct_ops, put_zcopy_iov)
{
    const size_t length = 1024 * 1024 + 333;
    buffer source(*m_sender, length);
    buffer target(*m_receiver, length);
    rkey rk(target.packed_rkey());
    std::vector<char> data = data_vector(length, 9);
    uct_iov_t iov[4];
    test_comp comp;

    memcpy(source.ptr(), data.data(), length);
    /* Three pieces and an empty entry, which must be skipped. */
    size_t cuts[] = { 0, 100, 100, 70000, length };
    for (int i = 0; i < 4; ++i) {
        iov[i].buffer = source.ptr() + cuts[i];
        iov[i].length = cuts[i + 1] - cuts[i];
        iov[i].memh   = source.memh();
        iov[i].count  = 1;
        iov[i].stride = 0;
    }

    ucs_status_t status = retry(all(), [&] {
        return uct_ep_put_zcopy(m_ep, iov, 4, target.addr(), rk.get(),
                                &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait_comp(all(), status, comp));
    EXPECT_EQ(0, memcmp(data.data(), target.ptr(), length));
}

TEST_P(uct_ops, get_bcopy)
{
    buffer source(*m_receiver, 8192);
    rkey rk(source.packed_rkey());

    for (size_t length : { size_t(1), size_t(64), size_t(8192) }) {
        std::vector<char> data = data_vector(length, 5), got(length);
        test_comp comp;
        memcpy(source.ptr(), data.data(), length);
        ucs_status_t status = retry(all(), [&] {
            return uct_ep_get_bcopy(m_ep, unpack_cb, got.data(), length,
                                    source.addr(), rk.get(), &comp.uct);
        });
        ASSERT_EQ(UCS_OK, wait_comp(all(), status, comp));
        EXPECT_EQ(data, got) << length;
    }
}

TEST_P(uct_ops, get_zcopy)
{
    const size_t length = 300000;
    buffer source(*m_receiver, length);
    buffer dest(*m_sender, length);
    rkey rk(source.packed_rkey());
    std::vector<char> data = data_vector(length, 11);
    uct_iov_t iov          = { dest.ptr(), length, dest.memh(), 0, 1 };
    test_comp comp;

    memcpy(source.ptr(), data.data(), length);
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_get_zcopy(m_ep, &iov, 1, source.addr(), rk.get(),
                                &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait_comp(all(), status, comp));
    EXPECT_EQ(0, memcmp(data.data(), dest.ptr(), length));
}

TEST_P(uct_ops, am_short_and_iov)
{
    std::vector<char> payload = data_vector(40, 1);
    uint64_t header           = 0x1122334455667788ull;

    ASSERT_EQ(UCS_OK, retry(all(), [&] {
                  return uct_ep_am_short(m_ep, 5, header, payload.data(),
                                         payload.size());
              }));
    ASSERT_NO_FATAL_FAILURE(wait_am(1));
    ASSERT_EQ(sizeof(header) + payload.size(), m_am.messages[0].size());
    EXPECT_EQ(0, memcmp(&header, m_am.messages[0].data(), sizeof(header)));
    EXPECT_EQ(0,
              memcmp(payload.data(), m_am.messages[0].data() + sizeof(header),
                     payload.size()));

    uct_iov_t iov[3] = { { payload.data(), 10, UCT_MEM_HANDLE_NULL, 0, 1 },
                         { payload.data() + 10, 0, UCT_MEM_HANDLE_NULL, 0, 1 },
                         { payload.data() + 10, 30, UCT_MEM_HANDLE_NULL, 0,
                           1 } };
    ASSERT_EQ(UCS_OK, retry(all(), [&] {
                  return uct_ep_am_short_iov(m_ep, 5, iov, 3);
              }));
    ASSERT_NO_FATAL_FAILURE(wait_am(2));
    EXPECT_EQ(payload, m_am.messages[1]);
}

TEST_P(uct_ops, am_bcopy_keep_descriptor)
{
    const size_t length    = m_sender->attr().cap.am.max_bcopy;
    std::vector<char> data = data_vector(length, 2);
    pack_arg arg           = { data.data(), length };

    m_am.keep = true;
    for (int i = 0; i < 3; ++i) {
        ssize_t packed;
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      packed = uct_ep_am_bcopy(m_ep, 5, pack_cb, &arg, 0);
                      return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
                  }));
        EXPECT_EQ((ssize_t)length, packed);
    }
    ASSERT_NO_FATAL_FAILURE(wait_am(3));
    ASSERT_EQ(3u, m_am.kept.size());
    for (int i = 0; i < 3; ++i) {
        /* The kept descriptors still hold their data. */
        EXPECT_EQ(0, memcmp(m_am.kept[i], data.data(), length));
    }
}

TEST_P(uct_ops, am_zcopy)
{
    const size_t length = 5000;
    buffer source(*m_sender, length);
    std::vector<char> data = data_vector(length, 4);
    char header[20];
    uct_iov_t iov[2] = { { source.ptr(), 1000, source.memh(), 0, 1 },
                         { source.ptr() + 1000, length - 1000, source.memh(), 0,
                           1 } };
    test_comp comp;

    memcpy(source.ptr(), data.data(), length);
    memset(header, 'h', sizeof(header));
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_am_zcopy(m_ep, 5, header, sizeof(header), iov, 2, 0,
                               &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait_comp(all(), status, comp));
    ASSERT_NO_FATAL_FAILURE(wait_am(1));
    ASSERT_EQ(sizeof(header) + length, m_am.messages[0].size());
    EXPECT_EQ(0, memcmp(header, m_am.messages[0].data(), sizeof(header)));
    EXPECT_EQ(0, memcmp(data.data(), m_am.messages[0].data() + sizeof(header),
                        length));
}

TEST_P(uct_ops, am_many_in_order)
{
    const int count = 3000; /* several times the send queue */

    for (int i = 0; i < count; ++i) {
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_am_short(m_ep, 5, i, NULL, 0);
                  }));
    }
    ASSERT_NO_FATAL_FAILURE(wait_am(count));
    for (int i = 0; i < count; ++i) {
        uint64_t header;
        memcpy(&header, m_am.messages[i].data(), sizeof(header));
        ASSERT_EQ((uint64_t)i, header);
    }
}

TEST_P(uct_ops, atomics)
{
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());
    uint64_t *word = (uint64_t *)target.ptr();
    auto fetch     = [&](uct_atomic_op_t op, uint64_t value) {
        return atomic_fetch<uint64_t>(op, value, target.addr(), rk.get());
    };
    auto post = [&](uct_atomic_op_t op, uint64_t value) {
        atomic_post<uint64_t>(op, value, target.addr(), rk.get());
    };

    *word = 10;
    EXPECT_EQ(10u, fetch(UCT_ATOMIC_OP_ADD, 5));
    EXPECT_EQ(15u, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_ADD, 5));
    EXPECT_EQ(20u, *word);
    EXPECT_EQ(20u, fetch(UCT_ATOMIC_OP_SWAP, 0xff00));
    EXPECT_EQ(0xff00u, *word);
    EXPECT_EQ(0xff00u, fetch(UCT_ATOMIC_OP_AND, 0x0ff0));
    EXPECT_EQ(0x0f00u, *word);
    EXPECT_EQ(0x0f00u, fetch(UCT_ATOMIC_OP_OR, 0x000f));
    EXPECT_EQ(0x0f0fu, *word);
    EXPECT_EQ(0x0f0fu, fetch(UCT_ATOMIC_OP_XOR, 0x0101));
    EXPECT_EQ(0x0e0eu, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_AND, 0x0f00));
    EXPECT_EQ(0x0e00u, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_OR, 0x1));
    EXPECT_EQ(0x0e01u, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_XOR, 0x0e00));
    EXPECT_EQ(0x1u, *word);
    *word = 0; /* the first compare-swap guess of the loop */
    EXPECT_EQ(0u, fetch(UCT_ATOMIC_OP_SWAP, 7));
    EXPECT_EQ(7u, *word);

    EXPECT_EQ(7u, atomic_cswap<uint64_t>(7, 99, target.addr(), rk.get()));
    EXPECT_EQ(99u, *word);
    /* no swap: the compare failed */
    EXPECT_EQ(99u, atomic_cswap<uint64_t>(7, 1, target.addr(), rk.get()));
    EXPECT_EQ(99u, *word);
}

/* 64-bit swap/and/or/xor are one masked atomic each where the device has
 * them (the model does), not a compare-swap loop: one work request even when
 * the word is not 0 (the loop's first guess). */
TEST_P(uct_ops, atomics64_masked_one_request)
{
    if (roce()) {
        GTEST_SKIP() << "no masked atomics on RoCE";
    }
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());
    uint64_t *word = (uint64_t *)target.ptr();
    auto fetch     = [&](uct_atomic_op_t op, uint64_t value) {
        uint64_t before = tx_counters(m_sender->iface()).work_requests;
        uint64_t result = atomic_fetch<uint64_t>(op, value, target.addr(),
                                                 rk.get());
        EXPECT_EQ(1u, tx_counters(m_sender->iface()).work_requests - before)
                << "op " << op;
        return result;
    };

    *word = 0xf0f0f0f0f0f0f0f0ull;
    EXPECT_EQ(0xf0f0f0f0f0f0f0f0ull, fetch(UCT_ATOMIC_OP_OR, 0x0f));
    EXPECT_EQ(0xf0f0f0f0f0f0f0ffull, *word);
    EXPECT_EQ(0xf0f0f0f0f0f0f0ffull,
              fetch(UCT_ATOMIC_OP_AND, 0xff00000000ffffffull));
    EXPECT_EQ(0xf000000000f0f0ffull, *word);
    EXPECT_EQ(0xf000000000f0f0ffull,
              fetch(UCT_ATOMIC_OP_XOR, 0x8000000000000001ull));
    EXPECT_EQ(0x7000000000f0f0feull, *word);
    EXPECT_EQ(0x7000000000f0f0feull, fetch(UCT_ATOMIC_OP_SWAP, 5));
    EXPECT_EQ(5u, *word);
}

TEST_P(uct_ops, atomics32)
{
    if (roce()) {
        GTEST_SKIP() << "no masked atomics on RoCE";
    }
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());
    uint32_t *word  = (uint32_t *)target.ptr() + 1; /* second half of a word */
    uint32_t *other = (uint32_t *)target.ptr();
    auto fetch      = [&](uct_atomic_op_t op, uint32_t value) {
        return atomic_fetch<uint32_t>(op, value, target.addr() + 4, rk.get());
    };
    auto post = [&](uct_atomic_op_t op, uint32_t value) {
        atomic_post<uint32_t>(op, value, target.addr() + 4, rk.get());
    };

    *other = 0x5a5a5a5a;
    *word  = 10;
    EXPECT_EQ(10u, fetch(UCT_ATOMIC_OP_ADD, 5));
    EXPECT_EQ(15u, *word);
    /* wraps at 32 bits */
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_ADD, UINT32_MAX));
    EXPECT_EQ(14u, *word);
    EXPECT_EQ(14u, fetch(UCT_ATOMIC_OP_SWAP, 0xff00ff00u));
    EXPECT_EQ(0xff00ff00u, *word);
    EXPECT_EQ(0xff00ff00u, fetch(UCT_ATOMIC_OP_AND, 0x0ff00ff0u));
    EXPECT_EQ(0x0f000f00u, *word);
    EXPECT_EQ(0x0f000f00u, fetch(UCT_ATOMIC_OP_OR, 0x8000000fu));
    EXPECT_EQ(0x8f000f0fu, *word);
    EXPECT_EQ(0x8f000f0fu, fetch(UCT_ATOMIC_OP_XOR, 0x81010101u));
    EXPECT_EQ(0x0e010e0eu, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_AND, 0x0f00ffffu));
    EXPECT_EQ(0x0e000e0eu, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_OR, 0x1));
    EXPECT_EQ(0x0e000e0fu, *word);
    ASSERT_NO_FATAL_FAILURE(post(UCT_ATOMIC_OP_XOR, 0x0e000e00u));
    EXPECT_EQ(0xfu, *word);

    EXPECT_EQ(0xfu, atomic_cswap<uint32_t>(0xf, 0x80000000u, target.addr() + 4,
                                           rk.get()));
    EXPECT_EQ(0x80000000u, *word);
    /* no swap: the compare failed */
    EXPECT_EQ(0x80000000u,
              atomic_cswap<uint32_t>(0xf, 1, target.addr() + 4, rk.get()));
    EXPECT_EQ(0x80000000u, *word);
    EXPECT_EQ(0x5a5a5a5au, *other);

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_atomic32_post(m_ep, UCT_ATOMIC_OP_ADD, 1,
                                   target.addr() + 2, rk.get()));
}

TEST_P(uct_ops, atomic_unaligned_rejected)
{
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_atomic64_post(m_ep, UCT_ATOMIC_OP_ADD, 1,
                                   target.addr() + 4, rk.get()));
}

TEST_P(uct_ops, malformed_rkey)
{
    char garbage[16];
    uct_rkey_bundle_t bundle;

    memset(garbage, 0x5a, sizeof(garbage));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rkey_unpack(dcx_component(), garbage, &bundle));

    /* A remote key value that did not come from unpack. */
    buffer target(*m_receiver, 64);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_short(m_ep, garbage, 8, target.addr(), 0x1234));
}

TEST_P(uct_ops, malformed_address)
{
    std::vector<char> address = m_receiver->address();
    size_t dev_len            = (unsigned char)address[0];
    uct_ep_h ep;

    /* Unknown interface address version. */
    address[1 + dev_len + 3] = (char)0x0f;
    EXPECT_FALSE(uct_iface_is_reachable(
            m_sender->iface(), (const uct_device_addr_t *)&address[1],
            (const uct_iface_addr_t *)&address[1 + dev_len]));
    EXPECT_EQ(UCS_ERR_UNREACHABLE, m_sender->connect(address, &ep));

    address = m_receiver->address();
    if (address[3] & 1) {
        /* RoCE (a GID follows the flags): the all-zero GID is no address. */
        memset(&address[4], 0, 16);
    } else {
        /* LID 0 is not a unicast IB address. */
        address[1] = address[2] = 0;
    }
    EXPECT_EQ(UCS_ERR_UNREACHABLE, m_sender->connect(address, &ep));
}

/* uct_ep_create with a NULL device or interface address, an address cut short (the bytes
 * after the cut zero) or garbage returns an error status and never crashes; it used to read
 * the NULL address while printing why it was refused. */
TEST_P(uct_ops, null_truncated_garbage_address)
{
    std::vector<char> good = m_receiver->address();
    size_t dev_len         = (unsigned char)good[0];
    uct_ep_params_t params = {};
    uct_ep_h ep            = nullptr;

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface                 = m_sender->iface();
    const uct_device_addr_t *dev = (const uct_device_addr_t *)&good[1];
    const uct_iface_addr_t *ifa  = (const uct_iface_addr_t *)&good[1 + dev_len];
    const struct {
        const uct_device_addr_t *dev;
        const uct_iface_addr_t *iface;
    } nulls[] = { { nullptr, ifa }, { dev, nullptr }, { nullptr, nullptr } };
    for (const auto &n : nulls) {
        params.dev_addr   = n.dev;
        params.iface_addr = n.iface;
        EXPECT_FALSE(uct_iface_is_reachable(m_sender->iface(), n.dev, n.iface));
        EXPECT_EQ(UCS_ERR_UNREACHABLE, uct_ep_create(&params, &ep));
    }

    /* cut anywhere before the interface address's format byte */
    for (size_t cut = 0; cut < dev_len + 4; ++cut) {
        std::vector<char> t(good.size(), 0);
        t[0] = good[0];
        std::copy(good.begin() + 1, good.begin() + 1 + cut, t.begin() + 1);
        EXPECT_EQ(UCS_ERR_UNREACHABLE, m_sender->connect(t, &ep))
                << "cut at " << cut;
    }

    for (char fill : { (char)0x00, (char)0xff, (char)0x5a }) {
        std::vector<char> t(good.size(), fill);
        t[0] = good[0];
        EXPECT_EQ(UCS_ERR_UNREACHABLE, m_sender->connect(t, &ep)) << (int)fill;
    }

    /* random bytes: whatever they say, an error or a usable endpoint, never a
     * crash.  UCT passes no address lengths: a device address whose flags say
     * it carries a GID is read that far, so the buffer has room for one. */
    unsigned seed = 16;
    int refused   = 0;
    for (int i = 0; i < 200; ++i) {
        std::vector<char> t(good.size() + 16); /* a GID */
        t[0] = good[0];
        for (size_t j = 1; j < t.size(); ++j) {
            t[j] = (char)rand_r(&seed);
        }
        ucs_status_t status = m_sender->connect(t, &ep);
        if (status == UCS_OK) {
            uct_ep_destroy(ep);
        } else {
            EXPECT_EQ(UCS_ERR_UNREACHABLE, status);
            ++refused;
        }
    }
    EXPECT_GT(refused, 0);
}

TEST_P(uct_ops, iface_flush)
{
    buffer target(*m_receiver, 65536);
    rkey rk(target.packed_rkey());
    std::vector<char> data = data_vector(256, 8);

    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_put_short(m_ep, data.data(), 256,
                                              target.addr() + 256 * (i % 200),
                                              rk.get());
                  }));
    }
    ASSERT_TRUE(iface_flushed(all(), *m_sender));
    EXPECT_EQ(0, memcmp(data.data(), target.ptr() + 256 * 99, 256));
}

/* One DCI for many endpoints: they queue as pending and all complete. */
class uct_ops_one_dci : public uct_ops {
protected:
    config_t sender_config() override
    {
        return { { "NUM_DCI", "1" },
                 { "TX_QUEUE_LEN", "16" },
                 { "TX_POLICY", GetParam() } };
    }
};

TEST_P(uct_ops_one_dci, pending_with_dci_exhaustion)
{
    const int num_eps = 6, per_ep = 40;
    std::vector<std::unique_ptr<entity>> peers;
    std::vector<std::unique_ptr<buffer>> targets;
    std::vector<std::unique_ptr<rkey>> rkeys;
    std::vector<uct_ep_h> eps;
    std::vector<pending_put> ctxs(num_eps * per_ep);
    std::vector<entity *> everybody = all();

    for (int i = 0; i < num_eps; ++i) {
        peers.emplace_back(new entity());
        targets.emplace_back(new buffer(*peers.back(), 8 * per_ep));
        rkeys.emplace_back(new rkey(targets.back()->packed_rkey()));
        eps.push_back(m_sender->connect(*peers.back()));
        everybody.push_back(peers.back().get());
    }

    int queued = 0;
    for (int j = 0; j < per_ep; ++j) {
        for (int i = 0; i < num_eps; ++i) {
            pending_put &ctx = ctxs[j * num_eps + i];
            ctx              = pending_put(eps[i], targets[i]->addr() + 8 * j,
                                           rkeys[i]->get(), 1000 * i + j);
            ucs_status_t status = ctx.run();
            if (status == UCS_OK) {
                continue;
            }
            ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
            status = uct_ep_pending_add(eps[i], &ctx.req, 0);
            if (status == UCS_ERR_BUSY) {
                /* Resources came back meanwhile: send it now. */
                ASSERT_EQ(UCS_OK, retry(everybody, [&] { return ctx.run(); }));
            } else {
                ASSERT_EQ(UCS_OK, status);
                ++queued;
            }
        }
    }
    EXPECT_GT(queued, 0) << "the single DCI was never exhausted";

    ASSERT_TRUE(wait_for(everybody, [&] {
        for (auto &ctx : ctxs) {
            if (!ctx.done) {
                return false;
            }
        }
        return uct_iface_flush(m_sender->iface(), 0, NULL) == UCS_OK;
    }));

    for (int i = 0; i < num_eps; ++i) {
        for (int j = 0; j < per_ep; ++j) {
            uint64_t value = targets[i]->word(j);
            ASSERT_EQ((uint64_t)(1000 * i + j), value) << i << "," << j;
        }
        uct_ep_destroy(eps[i]);
    }
}

TEST_P(uct_ops_one_dci, pending_purge)
{
    pending_put ctx;
    int purged = 0;
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());
    ucs_status_t status;

    /* Fill the single DCI's queue. */
    do {
        status = uct_ep_put_short(m_ep, &ctx.value, 8, target.addr(), rk.get());
    } while (status == UCS_OK);
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &ctx.req, 0));
    uct_ep_pending_purge(
            m_ep, [](uct_pending_req_t *req, void *arg) { ++*(int *)arg; },
            &purged);
    EXPECT_EQ(1, purged);
    /* the puts land in target before it goes away */
    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
}

struct pending_flush_ctx {
    uct_pending_req_t req;
    uct_completion_t comp;
    uct_ep_h ep;
    const uint64_t *target; /* where the queued put lands */
    uint64_t seen; /* target value when the flush completed */
    int done;
};

static ucs_status_t pending_flush(uct_pending_req_t *req)
{
    pending_flush_ctx *ctx = ucs_container_of(req, pending_flush_ctx, req);
    ucs_status_t status    = uct_ep_flush(ctx->ep, 0, &ctx->comp);

    if (status == UCS_OK) {
        ctx->seen = *ctx->target;
        ctx->done = 1;
    }
    return (status == UCS_ERR_NO_RESOURCE) ? status : UCS_OK;
}

/* A flush behind queued requests waits for them (UCP adds it as pending);
 * dispatched from the queue it starts, and iface_flush says "in progress"
 * meanwhile, never "no resource" (which UCP treats as an error). */
TEST_P(uct_ops_one_dci, flush_queued_behind_pending)
{
    pending_flush_ctx flush = {};
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());
    pending_put put(m_ep, target.addr(), rk.get(), 0x1234567890abcdefull);
    ucs_status_t status;

    do {
        uint64_t zero = 0;
        status = uct_ep_put_short(m_ep, &zero, 8, target.addr(), rk.get());
    } while (status == UCS_OK);
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &put.req, 0));

    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_flush(m_ep, 0, NULL));
    EXPECT_EQ(UCS_INPROGRESS, uct_iface_flush(m_sender->iface(), 0, NULL));

    flush.req.func  = pending_flush;
    flush.ep        = m_ep;
    flush.target    = (const uint64_t *)target.ptr();
    flush.comp.func = [](uct_completion_t *comp) {
        pending_flush_ctx *ctx = ucs_container_of(comp, pending_flush_ctx,
                                                  comp);
        ctx->seen              = *ctx->target;
        ctx->done              = 1;
    };
    flush.comp.count  = 1;
    flush.comp.status = UCS_OK;
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &flush.req, 0));

    ASSERT_TRUE(wait_for(all(), [&] {
        status = uct_iface_flush(m_sender->iface(), 0, NULL);
        EXPECT_NE(UCS_ERR_NO_RESOURCE, status);
        return flush.done && (status == UCS_OK);
    }));
    EXPECT_TRUE(put.done);
    EXPECT_EQ(put.value, flush.seen) << "flush completed before the put";
}

struct pending_am_ctx {
    uct_pending_req_t req;
    uct_ep_h ep;
    int done;
};

static ucs_status_t pending_am(uct_pending_req_t *req)
{
    pending_am_ctx *ctx = ucs_container_of(req, pending_am_ctx, req);
    ucs_status_t status = uct_ep_am_short(ctx->ep, 5, 2, NULL, 0);

    if (status == UCS_OK) {
        ctx->done = 1;
    }
    return status;
}

struct comp_am_ctx {
    uct_completion_t uct;
    uct_ep_h ep;
    ucs_status_t sent;
    int done;
};

/* UCX's test_uct_pending.send_ooo_with_comp: a send from a completion
 * callback must not overtake a request queued before it (UCX's rc and dc:
 * a completion's resources are returned after its callbacks, and pending
 * requests are dispatched before the next completion's callbacks). */
TEST_P(uct_ops_one_dci, completion_send_after_pending)
{
    buffer src(*m_sender, 32, 'z');
    uct_iov_t iov       = { src.ptr(), src.length(), src.memh(), 0, 1 };
    uint64_t zhdr       = 0;
    pending_am_ctx pend = {};
    comp_am_ctx comp    = {};
    ucs_status_t status;

    comp.uct.func = [](uct_completion_t *self) {
        comp_am_ctx *ctx = ucs_container_of(self, comp_am_ctx, uct);
        ctx->sent        = uct_ep_am_short(ctx->ep, 5, 3, NULL, 0);
        ctx->done        = 1;
    };
    comp.uct.count  = 1;
    comp.uct.status = UCS_OK;
    comp.ep         = m_ep;
    status          = uct_ep_am_zcopy(m_ep, 5, &zhdr, sizeof(zhdr), &iov, 1, 0,
                                      &comp.uct);
    ASSERT_EQ(UCS_INPROGRESS, status);

    /* Fill the DCI behind the zero-copy message, then queue one. */
    size_t expected = 1;
    while ((status = uct_ep_am_short(m_ep, 5, 1, NULL, 0)) == UCS_OK) {
        ++expected;
    }
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
    pend.req.func = pending_am;
    pend.ep       = m_ep;
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &pend.req, 0));

    ASSERT_TRUE(wait_for(all(), [&] { return comp.done && pend.done; }));
    EXPECT_TRUE((comp.sent == UCS_OK) || (comp.sent == UCS_ERR_NO_RESOURCE))
            << ucs_status_string(comp.sent);
    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));

    expected += 1 + (comp.sent == UCS_OK);
    ASSERT_NO_FATAL_FAILURE(wait_am(expected));
    int pending_at = -1, comp_at = -1;
    for (size_t i = 0; i < m_am.messages.size(); ++i) {
        uint64_t hdr = *(const uint64_t *)m_am.messages[i].data();
        if (hdr == 2) {
            pending_at = i;
        } else if (hdr == 3) {
            comp_at = i;
        }
    }
    ASSERT_GE(pending_at, 0) << "the queued request was never sent";
    if (comp_at >= 0) {
        EXPECT_LT(pending_at, comp_at)
                << "the completion callback's message overtook the request "
                   "queued before it";
    }
}

TEST_P(uct_ops, wakeup_on_receive)
{
    int fd;

    ASSERT_TRUE(m_receiver->attr().cap.event_flags & UCT_IFACE_FLAG_EVENT_RECV);
    ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(m_receiver->iface(), &fd));
    ASSERT_TRUE(wait_for(all(), [&] {
        return uct_iface_event_arm(m_receiver->iface(), UCT_EVENT_RECV) ==
               UCS_OK;
    }));
    EXPECT_FALSE(fd_readable(fd, 0));

    ASSERT_EQ(UCS_OK, retry({ m_sender.get() }, [&] {
                  return uct_ep_am_short(m_ep, 5, 42, NULL, 0);
              }));

    /* Only the sender makes progress: the receiver sleeps on its fd. */
    bool woke = false;
    for (int i = 0; (i < 2000) && !woke; ++i) {
        m_sender->progress();
        woke = fd_readable(fd, 1);
    }
    EXPECT_TRUE(woke) << "no wakeup for a received message";
    EXPECT_EQ(UCS_ERR_BUSY,
              uct_iface_event_arm(m_receiver->iface(), UCT_EVENT_RECV));
    ASSERT_NO_FATAL_FAILURE(wait_am(1));
}

TEST_P(uct_ops, wakeup_on_send_completion)
{
    buffer target(*m_receiver, 64);
    rkey rk(target.packed_rkey());
    uint64_t value = 7;
    int fd;

    ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(m_sender->iface(), &fd));
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(m_ep, &value, 8, target.addr(), rk.get()));
    /* Armed with the completion possibly already there: it still fires. */
    ucs_status_t status = uct_iface_event_arm(m_sender->iface(),
                                              UCT_EVENT_SEND_COMP);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_ERR_BUSY));
    if (status == UCS_OK) {
        EXPECT_TRUE(fd_readable(fd, 5000)) << "no send-completion wakeup";
    }
    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
    EXPECT_EQ(7u, *(uint64_t *)target.ptr());
}

/* Active-message flow control with a small window. */
class uct_ops_fc : public uct_ops {
protected:
    const int window = 16;

    config_t sender_config() override
    {
        return { { "FC_WND_SIZE", std::to_string(window) },
                 { "FC_REQ_THRESH", "0" },
                 { "TX_POLICY", GetParam() } };
    }
};

/* A sender stops after exactly its window while the receiver does not
 * progress, then every message arrives in order once it does. */
TEST_P(uct_ops_fc, window_enforced_then_granted)
{
    const int count = 200;
    int sent        = 0;
    ucs_status_t status;

    /* Progress only the sender: its DCI drains, but nobody grants. */
    for (int spins = 0; spins < 100000; ++spins) {
        status = uct_ep_am_short(m_ep, 5, sent, NULL, 0);
        if (status == UCS_OK) {
            ++sent;
        } else {
            ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
            m_sender->progress();
        }
    }
    EXPECT_EQ(window, sent) << "the window was not enforced";

    /* The pending request is dispatched by the grant. */
    pending_put pctx(m_ep, 0, 0, sent);
    pctx.req.func =
            [](uct_pending_req_t *req) { /* an AM, not a put */
                                         pending_put *ctx = ucs_container_of(
                                                 req, pending_put, req);
                                         ucs_status_t st = uct_ep_am_short(
                                                 ctx->ep, 5, ctx->value, NULL,
                                                 0);
                                         ctx->done |= (st == UCS_OK);
                                         return st;
            };
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &pctx.req, 0));
    ASSERT_TRUE(wait_for(all(), [&] { return pctx.done != 0; }));
    ++sent;

    for (; sent < count; ++sent) {
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_am_short(m_ep, 5, sent, NULL, 0);
                  }));
    }
    ASSERT_NO_FATAL_FAILURE(wait_am(count));
    ASSERT_EQ((size_t)count, m_am.messages.size()) << "extra messages";
    for (int i = 0; i < count; ++i) {
        uint64_t header;
        memcpy(&header, m_am.messages[i].data(), sizeof(header));
        ASSERT_EQ((uint64_t)i, header);
    }
}

/* Flow control with a small window: every kind of active message
 * counts, none is lost, and flow-control messages never reach a handler. */
TEST_P(uct_ops_fc, all_am_kinds_counted)
{
    const int rounds = 100;
    buffer src(*m_sender, 64, 'z');
    std::vector<char> data = data_vector(64, 3);
    pack_arg parg          = { data.data(), data.size() };
    uct_iov_t iov          = {};

    iov.buffer = src.ptr();
    iov.length = 64;
    iov.memh   = src.memh();
    iov.count  = 1;
    for (int i = 0; i < rounds; ++i) {
        test_comp comp;
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_am_short(m_ep, 5, i, data.data(), 8);
                  }));
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      ssize_t len = uct_ep_am_bcopy(m_ep, 5, pack_cb, &parg, 0);
                      return (len < 0) ? (ucs_status_t)len : UCS_OK;
                  }));
        ucs_status_t status = retry(all(), [&] {
            return uct_ep_am_zcopy(m_ep, 5, NULL, 0, &iov, 1, 0, &comp.uct);
        });
        ASSERT_EQ(UCS_OK, wait_comp(all(), status, comp));
    }
    ASSERT_NO_FATAL_FAILURE(wait_am(3 * rounds));
    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
    for (int i = 0; i < 100; ++i) {
        m_sender->progress();
        m_receiver->progress();
    }
    EXPECT_EQ((size_t)(3 * rounds), m_am.messages.size());
    for (int i = 0; i < rounds; ++i) {
        ASSERT_EQ(16u, m_am.messages[3 * i].size());
        ASSERT_EQ(64u, m_am.messages[3 * i + 1].size());
        ASSERT_EQ(0, memcmp(data.data(), m_am.messages[3 * i + 1].data(), 64));
        ASSERT_EQ(64u, m_am.messages[3 * i + 2].size());
    }
}

INSTANTIATE_TEST_SUITE_P(policy, uct_ops,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));
INSTANTIATE_TEST_SUITE_P(policy, uct_ops_one_dci,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));
INSTANTIATE_TEST_SUITE_P(policy, uct_ops_fc,
                         testing::Values("dcs", "dcs_quota", "rand", "hw_dcs",
                                         "dcs_hybrid"));

namespace {

std::atomic<int> srq_limit_logged{ 0 };

ucs_log_func_rc_t catch_srq_limit(const char *file, unsigned line,
                                  const char *function, ucs_log_level_t level,
                                  const ucs_log_component_config_t *comp,
                                  const char *message, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof(buf), message, ap);
    if (strstr(buf, "receive queue ran below its limit") != NULL) {
        ++srq_limit_logged;
        return UCS_LOG_FUNC_RC_STOP;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

/* Device events are read and explained: a receiver that falls behind
 * (its receive queue below the armed limit) is reported. */
TEST(uct_events, srq_limit_reported)
{
    entity receiver(config_t{ { "RX_QUEUE_LEN", "64" } });
    entity sender;
    uct_ep_h ep              = sender.connect(receiver);
    std::vector<entity *> me = { &sender };
    ucs_log_level_t saved    = ucs_global_opts.log_component.log_level;

    ASSERT_NE(nullptr, ep);
    am_record rec;
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver.iface(), 1, am_handler,
                                               &rec, 0));
    srq_limit_logged                        = 0;
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_DIAG;
    ucs_log_push_handler(catch_srq_limit);

    /* The receiver does not progress: its buffers run out. */
    for (int i = 0; i < 60; ++i) {
        ASSERT_EQ(UCS_OK, retry(me, [&] {
                      return uct_ep_am_short(ep, 1, i, NULL, 0);
                  }));
    }
    bool seen = wait_for(
            me, [&] { return srq_limit_logged > 0; }, 10);

    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = saved;
    EXPECT_TRUE(seen) << "no srq-limit event was reported";

    std::vector<entity *> both = { &sender, &receiver };
    ASSERT_TRUE(wait_for(both, [&] {
        return (rec.messages.size() == 60) &&
               (uct_iface_flush(sender.iface(), 0, NULL) == UCS_OK);
    }));
    uct_ep_destroy(ep);
}

/* dcs_quota: one endpoint streaming without pause cannot keep the only DCI
 * from endpoints that wait for it. */
TEST(uct_policy, dcs_quota_no_starvation)
{
    const int num_waiters = 8, max_busy = 200000;
    entity sender({ { "NUM_DCI", "1" },
                    { "TX_QUEUE_LEN", "64" },
                    { "TX_POLICY", "dcs_quota" },
                    { "QUOTA", "8" } });
    entity receiver;
    buffer target(receiver, 8 * (num_waiters + 1));
    rkey rk(target.packed_rkey());
    std::vector<pending_put> ctxs(num_waiters);
    std::vector<uct_ep_h> eps;
    std::vector<entity *> both = { &sender, &receiver };
    uint64_t value             = 1;
    int busy_sent = 0, waiters_done = 0;

    uct_ep_h busy = sender.connect(receiver);
    for (int i = 0; i < num_waiters; ++i) {
        eps.push_back(sender.connect(receiver));
    }

    /* Fill the DCI from the busy endpoint, then the others wait for it. */
    while (uct_ep_put_short(busy, &value, 8, target.addr(), rk.get()) ==
           UCS_OK) {
        ++busy_sent;
    }
    for (int i = 0; i < num_waiters; ++i) {
        pending_put &ctx = ctxs[i];
        ctx = pending_put(eps[i], target.addr() + 8 * (i + 1), rk.get(),
                          100 + i);
        ASSERT_EQ(UCS_ERR_NO_RESOURCE, ctx.run());
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(eps[i], &ctx.req, 0));
    }

    /* The busy endpoint refills its DCI whenever it may, so the DCI never
     * drains by itself; everybody progresses. */
    while ((waiters_done < num_waiters) && (busy_sent < max_busy)) {
        while (uct_ep_put_short(busy, &value, 8, target.addr(), rk.get()) ==
               UCS_OK) {
            ++busy_sent;
        }
        sender.progress();
        receiver.progress();
        waiters_done = 0;
        for (auto &ctx : ctxs) {
            waiters_done += ctx.done;
        }
    }

    EXPECT_EQ(num_waiters, waiters_done)
            << "waiters starved while the busy endpoint sent " << busy_sent;
    ASSERT_TRUE(iface_flushed(both, sender));
    for (int i = 0; i < num_waiters; ++i) {
        uint64_t got = target.word(i + 1);
        EXPECT_EQ((uint64_t)(100 + i), got);
        uct_ep_destroy(eps[i]);
    }
    uct_ep_destroy(busy);
}

struct fair_ctx {
    uct_pending_req_t req;
    uct_ep_h ep;
    uint64_t addr;
    uct_rkey_t rkey;
    bool pending;
    int sends;
    int *num_pending;
};

static ucs_status_t fair_put_now(fair_ctx *ctx)
{
    uint64_t value = ctx->sends;

    return uct_ep_put_short(ctx->ep, &value, sizeof(value), ctx->addr,
                            ctx->rkey);
}

static ucs_status_t fair_put(uct_pending_req_t *req)
{
    fair_ctx *ctx       = ucs_container_of(req, fair_ctx, req);
    ucs_status_t status = fair_put_now(ctx);

    if (status == UCS_OK) {
        ctx->pending = false;
        ++ctx->sends;
        --*ctx->num_pending;
    }
    return status;
}

/* Send one, or queue it when out of resources. */
static bool fair_send_or_queue(fair_ctx *ctx)
{
    ucs_status_t status;

    for (;;) {
        status = fair_put_now(ctx);
        if (status == UCS_OK) {
            ++ctx->sends;
            return true;
        }
        if (status != UCS_ERR_NO_RESOURCE) {
            return false;
        }
        status = uct_ep_pending_add(ctx->ep, &ctx->req, 0);
        if (status == UCS_OK) {
            ctx->pending = true;
            ++*ctx->num_pending;
            return true;
        }
        if (status != UCS_ERR_BUSY) {
            return false;
        }
    }
}

/* UCX's test_uct_pending.pending_fairness on one DCI: every endpoint sends
 * until it runs out of resources and queues one request; as soon as any
 * request went, everybody that is not queued sends again. The endpoint
 * holding the DCI gets its own request dispatched whenever a completion
 * frees a slot, so unless it yields the DCI after its quota (until the DCI
 * drains) the others never get it. */
TEST(uct_policy, dcs_quota_fair_pending)
{
    const int num_eps = 16, iters = 2000;
    entity sender({ { "NUM_DCI", "1" },
                    { "TX_QUEUE_LEN", "64" },
                    { "TX_POLICY", "dcs_quota" },
                    { "QUOTA", "32" } });
    entity receiver;
    buffer target(receiver, 8 * num_eps);
    rkey rk(target.packed_rkey());
    std::vector<entity *> both = { &sender, &receiver };
    std::vector<fair_ctx> ctxs(num_eps);
    int num_pending = 0;

    for (int i = 0; i < num_eps; ++i) {
        ctxs[i].req.func    = fair_put;
        ctxs[i].ep          = sender.connect(receiver);
        ctxs[i].addr        = target.addr() + 8 * i;
        ctxs[i].rkey        = rk.get();
        ctxs[i].pending     = false;
        ctxs[i].sends       = 0;
        ctxs[i].num_pending = &num_pending;
        ASSERT_NE(nullptr, ctxs[i].ep);
    }

    for (int iter = 0; iter < iters; ++iter) {
        while (num_pending < num_eps) {
            for (auto &ctx : ctxs) {
                if (!ctx.pending) {
                    ASSERT_TRUE(fair_send_or_queue(&ctx));
                }
            }
        }
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(20);
        while ((num_pending == num_eps) &&
               (std::chrono::steady_clock::now() < deadline)) {
            sender.progress();
            receiver.progress();
        }
        ASSERT_LT(num_pending, num_eps) << "no request dispatched in 20 s";
    }

    int min_sends = INT_MAX, max_sends = 0;
    for (auto &ctx : ctxs) {
        min_sends = std::min(min_sends, ctx.sends);
        max_sends = std::max(max_sends, ctx.sends);
    }
    EXPECT_LT(0, min_sends) << "an endpoint starved (max " << max_sends << ")";
    EXPECT_GE(min_sends * 2, max_sends)
            << "unfair: " << min_sends << " .. " << max_sends;

    ASSERT_TRUE(wait_for(both, [&] {
        return (num_pending == 0) &&
               (uct_iface_flush(sender.iface(), 0, NULL) == UCS_OK);
    }));
    for (auto &ctx : ctxs) {
        uct_ep_destroy(ctx.ep);
    }
}

/* A device without atomics (the model's DCXEMU_ATOMIC_CAP=none, read once
 * per process, hence a child): the interface opens, offers no device
 * atomics so UCP emulates them, refuses atomic calls, and moves data.
 * Exit 0 when every check holds, else the number of the failed one. */
DCX_CHILD_ROLE(no_atomics_device)
{
    entity receiver, sender;
    if ((receiver.iface() == nullptr) || (sender.iface() == nullptr)) {
        return 10; /* mlx5 refused the atomic flags of the DCI or DCT */
    }

    const uct_iface_attr_t &attr = sender.attr();
    if ((attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE) ||
        (attr.cap.atomic64.op_flags != 0) ||
        (attr.cap.atomic64.fop_flags != 0) ||
        (attr.cap.atomic32.op_flags != 0) ||
        (attr.cap.atomic32.fop_flags != 0)) {
        return 11;
    }
    if (!(attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) ||
        !(attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) ||
        !(attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT)) {
        return 12;
    }

    am_record am;
    if (uct_iface_set_am_handler(receiver.iface(), 5, am_handler, &am, 0) !=
        UCS_OK) {
        return 13;
    }
    std::vector<entity *> all = { &sender, &receiver };
    uct_ep_h ep               = sender.connect(receiver);
    buffer target(receiver, 8192), src(sender, 8192);
    rkey rk(target.packed_rkey());
    std::vector<char> small = data_vector(64, 3), big = data_vector(8192, 4);
    memcpy(src.ptr(), big.data(), big.size());

    if (retry(all, [&] {
            return uct_ep_put_short(ep, small.data(), small.size(),
                                    target.addr(), rk.get());
        }) != UCS_OK) {
        return 14;
    }
    uct_iov_t iov = { src.ptr() + 64, big.size() - 64, src.memh(), 0, 1 };
    test_comp comp;
    ucs_status_t status = retry(all, [&] {
        return uct_ep_put_zcopy(ep, &iov, 1, target.addr() + 64, rk.get(),
                                &comp.uct);
    });
    if (wait_comp(all, status, comp) != UCS_OK) {
        return 16;
    }
    if ((memcmp(target.ptr(), small.data(), small.size()) != 0) ||
        (memcmp(target.ptr() + 64, big.data() + 64, big.size() - 64) != 0)) {
        return 17;
    }

    if ((retry(all,
               [&] {
                   return uct_ep_am_short(ep, 5, 0x42, small.data(),
                                          small.size());
               }) != UCS_OK) ||
        !wait_for(all, [&] { return am.messages.size() == 1; }) ||
        (am.messages[0].size() != 8 + small.size()) ||
        (memcmp(am.messages[0].data() + 8, small.data(), small.size()) != 0)) {
        return 18;
    }

    uint64_t result;
    test_comp acomp;
    if ((uct_ep_atomic64_post(ep, UCT_ATOMIC_OP_ADD, 1, target.addr(),
                              rk.get()) != UCS_ERR_UNSUPPORTED) ||
        (uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 1, &result, target.addr(),
                               rk.get(), &acomp.uct) != UCS_ERR_UNSUPPORTED) ||
        (uct_ep_atomic_cswap64(ep, 0, 1, target.addr(), rk.get(), &result,
                               &acomp.uct) != UCS_ERR_UNSUPPORTED)) {
        return 19;
    }

    if (flush_ep(all, ep) != UCS_OK) {
        return 20;
    }
    uct_ep_destroy(ep);
    return 0;
}

/* A device whose atomic capabilities list no masked atomics (the model's
 * DCXEMU_EXT_ATOMICS=0): 64-bit atomics as before, no 32-bit ones, and the
 * 32-bit calls are refused. Exit 0 when every check holds. */
DCX_CHILD_ROLE(no_ext_atomics_device)
{
    entity receiver, sender;
    if ((receiver.iface() == nullptr) || (sender.iface() == nullptr)) {
        return 10;
    }

    const uct_iface_attr_t &attr = sender.attr();
    if (!(attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE) ||
        !(attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_CSWAP)) ||
        (attr.cap.atomic32.op_flags != 0) ||
        (attr.cap.atomic32.fop_flags != 0)) {
        return 11;
    }

    std::vector<entity *> all = { &sender, &receiver };
    uct_ep_h ep               = sender.connect(receiver);
    buffer target(receiver, 64);
    rkey rk(target.packed_rkey());
    uint32_t result;
    test_comp acomp;
    if ((uct_ep_atomic32_post(ep, UCT_ATOMIC_OP_ADD, 1, target.addr(),
                              rk.get()) != UCS_ERR_UNSUPPORTED) ||
        (uct_ep_atomic32_fetch(ep, UCT_ATOMIC_OP_ADD, 1, &result, target.addr(),
                               rk.get(), &acomp.uct) != UCS_ERR_UNSUPPORTED) ||
        (uct_ep_atomic_cswap32(ep, 0, 1, target.addr(), rk.get(), &result,
                               &acomp.uct) != UCS_ERR_UNSUPPORTED)) {
        return 12;
    }

    uint64_t result64;
    test_comp comp;
    ucs_status_t status = retry(all, [&] {
        return uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 3, &result64,
                                     target.addr(), rk.get(), &comp.uct);
    });
    if (wait_comp(all, status, comp) != UCS_OK) {
        return 13;
    }
    if ((result64 != 0) || (*(uint64_t *)target.ptr() != 3)) {
        return 15;
    }
    /* without masked atomics a 64-bit or is a compare-swap loop: still
     * right when the first guess (0) is wrong */
    test_comp ocomp;
    status = retry(all, [&] {
        return uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_OR, 0x10, &result64,
                                     target.addr(), rk.get(), &ocomp.uct);
    });
    if (wait_comp(all, status, ocomp) != UCS_OK) {
        return 16;
    }
    if ((result64 != 3) || (*(uint64_t *)target.ptr() != 0x13)) {
        return 17;
    }
    uct_ep_destroy(ep);
    return 0;
}

TEST(uct_no_atomics, no_masked_atomics_no_atomic32)
{
    child c("no_ext_atomics_device", {}, { { "DCXEMU_EXT_ATOMICS", "0" } });
    EXPECT_EQ(0, c.wait());
}

/* A provider without the raw-WQE builder (rdma-core before v36, the model's
 * DCXEMU_RAW_WQE=0) refuses a DCI that asks for it with EOPNOTSUPP although
 * the device lists masked atomics: the interface opens all the same and
 * offers what it can post without raw WQEs, as on a device without them. */
TEST(uct_no_atomics, provider_without_raw_wqe_builder)
{
    child c("no_ext_atomics_device", {}, { { "DCXEMU_RAW_WQE", "0" } });
    EXPECT_EQ(0, c.wait());
}

TEST(uct_no_atomics, iface_opens_without_device_atomics)
{
    child c("no_atomics_device", {}, { { "DCXEMU_ATOMIC_CAP", "none" } });
    EXPECT_EQ(0, c.wait());
}

/* A port whose P_Key table (the model's DCXEMU_PKEY_TABLE) does not start
 * with a full member: the model drops a packet whose P_Key does not match
 * the target's, and two limited members never match, so data moves only if
 * the interface chose a full-membership entry. Exit 0 when puts and a get
 * arrive, 10 when the interface does not open, else the failed check. */
DCX_CHILD_ROLE(pkey_device)
{
    entity receiver, sender;
    if ((receiver.iface() == nullptr) || (sender.iface() == nullptr)) {
        return 10;
    }

    std::vector<entity *> all = { &sender, &receiver };
    uct_ep_h ep               = sender.connect(receiver);
    buffer target(receiver, 4096), local(sender, 4096);
    rkey rk(target.packed_rkey());
    std::vector<char> data = data_vector(64, 7);
    if (retry(all, [&] {
            return uct_ep_put_short(ep, data.data(), data.size(), target.addr(),
                                    rk.get());
        }) != UCS_OK) {
        return 11;
    }
    if (flush_ep(all, ep) != UCS_OK) {
        return 12;
    }
    if (memcmp(target.ptr(), data.data(), data.size()) != 0) {
        return 13;
    }
    uct_ep_destroy(ep);
    return 0;
}

TEST(uct_pkey, first_full_member_when_index_0_is_limited)
{
    /* index 0: the default partition, limited membership */
    child c("pkey_device", {},
            { { "DCXEMU_LINK_LAYER", "infiniband" },
              { "DCXEMU_PKEY_TABLE", "0x7fff,0xffff" },
              { "DCXEMU_TIME_SCALE", "0.01" } });
    EXPECT_EQ(0, c.wait());
}

TEST(uct_pkey, configured_partition_full_member_first)
{
    /* UCX_DCX_PKEY=0x5: the full member at index 2, not the limited one
     * before it (two limited members cannot talk) */
    child c("pkey_device", {},
            { { "DCXEMU_LINK_LAYER", "infiniband" },
              { "DCXEMU_PKEY_TABLE", "0x7fff,0x0005,0x8005" },
              { "UCX_DCX_PKEY", "0x5" },
              { "DCXEMU_TIME_SCALE", "0.01" } });
    EXPECT_EQ(0, c.wait());
}

/* An interface whose UCX_DCX_PKEY the port cannot serve does not open:
 * a partition absent from the P_Key table (NO_ELEM) or a value out of range
 * (INVALID_PARAM). */
DCX_CHILD_ROLE(pkey_refused)
{
    ucs_status_t expected = (args.at(0) == "absent") ? UCS_ERR_NO_ELEM :
                                                       UCS_ERR_INVALID_PARAM;
    entity e(config_t(), entity::open_fails{ expected });
    return (e.iface() == nullptr) ? 0 : 10;
}

TEST(uct_pkey, configured_partition_absent_or_invalid)
{
    child absent("pkey_refused", { "absent" },
                 { { "DCXEMU_LINK_LAYER", "infiniband" },
                   { "DCXEMU_PKEY_TABLE", "0xffff,0x8005" },
                   { "UCX_DCX_PKEY", "0x6" } });
    EXPECT_EQ(0, absent.wait());
    child invalid("pkey_refused", { "invalid" },
                  { { "DCXEMU_LINK_LAYER", "infiniband" },
                    { "UCX_DCX_PKEY", "0x8000" } });
    EXPECT_EQ(0, invalid.wait());
}

/* A device whose WQEs hold 256 bytes (DCXEMU_MAX_WQE_SIZE, read once per
 * process, hence a child) refuses a DCI with the default 256 bytes of
 * inline data (EINVAL, as mlx5 does beyond max_wqe_sz): the interface asks
 * for less until the device agrees, and puts of the inline size it then
 * reports arrive. Exit 0 when every check holds, else the failed one. */
DCX_CHILD_ROLE(small_wqe_device)
{
    entity receiver, sender;
    if ((receiver.iface() == nullptr) || (sender.iface() == nullptr)) {
        return 10;
    }

    size_t max_short = sender.attr().cap.put.max_short;
    if ((max_short == 0) || (max_short >= 256)) {
        return 11;
    }

    std::vector<entity *> all = { &sender, &receiver };
    uct_ep_h ep               = sender.connect(receiver);
    buffer target(receiver, 4096);
    rkey rk(target.packed_rkey());
    std::vector<char> data = data_vector(max_short, 5);
    for (int i = 0; i < 300; ++i) {
        if (retry(all, [&] {
                return uct_ep_put_short(ep, data.data(), data.size(),
                                        target.addr(), rk.get());
            }) != UCS_OK) {
            return 12;
        }
    }
    if (flush_ep(all, ep) != UCS_OK) {
        return 13;
    }
    if (memcmp(target.ptr(), data.data(), data.size()) != 0) {
        return 14;
    }
    uct_ep_destroy(ep);
    return 0;
}

TEST(uct_small_wqe, dci_asks_for_less_inline_until_the_device_agrees)
{
    child c("small_wqe_device", {}, { { "DCXEMU_MAX_WQE_SIZE", "256" } });
    EXPECT_EQ(0, c.wait());
}

namespace {

/* An interface of UCX's own "self" transport: a UCT handle that is not a
 * dcx interface. */
struct foreign_iface {
    ucs_async_context_t *async = nullptr;
    uct_worker_h worker        = nullptr;
    uct_md_h md                = nullptr;
    uct_iface_h iface          = nullptr;

    void open()
    {
        uct_component_h *components, self = nullptr;
        uct_tl_resource_desc_t *tls;
        uct_md_config_t *md_config;
        uct_iface_config_t *iface_config;
        uct_iface_params_t params = {};
        unsigned num, num_tls;

        ASSERT_EQ(UCS_OK, uct_query_components(&components, &num));
        for (unsigned i = 0; i < num; ++i) {
            uct_component_attr_t attr = {};
            attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
            ASSERT_EQ(UCS_OK, uct_component_query(components[i], &attr));
            if (!strcmp(attr.name, "self")) {
                self = components[i];
            }
        }
        uct_release_component_list(components);
        ASSERT_NE(nullptr, self) << "UCX has no self transport";

        ASSERT_EQ(UCS_OK,
                  ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                           &async));
        ASSERT_EQ(UCS_OK,
                  uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker));
        ASSERT_EQ(UCS_OK, uct_md_config_read(self, NULL, NULL, &md_config));
        ASSERT_EQ(UCS_OK, uct_md_open(self, "self", md_config, &md));
        uct_config_release(md_config);
        ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(md, &tls, &num_tls));
        ASSERT_GT(num_tls, 0u);
        ASSERT_EQ(UCS_OK, uct_md_iface_config_read(md, tls[0].tl_name, NULL,
                                                   NULL, &iface_config));
        params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                            UCT_IFACE_PARAM_FIELD_DEVICE;
        params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
        params.mode.device.tl_name  = tls[0].tl_name;
        params.mode.device.dev_name = tls[0].dev_name;
        ucs_status_t status = uct_iface_open(md, worker, &params, iface_config,
                                             &iface);
        uct_config_release(iface_config);
        uct_release_tl_resource_list(tls);
        ASSERT_EQ(UCS_OK, status);
    }

    ~foreign_iface()
    {
        if (iface != nullptr) {
            uct_iface_close(iface);
        }
        if (md != nullptr) {
            uct_md_close(md);
        }
        if (worker != nullptr) {
            uct_worker_destroy(worker);
        }
        if (async != nullptr) {
            ucs_async_context_destroy(async);
        }
    }
};

} // namespace

/* The public API (include/uct/ib/dcx/dcx.h) recognises its own interfaces:
 * another transport's interface is refused with UCS_ERR_INVALID_PARAM and
 * nothing is read from it as if it were dcx's. */
TEST(uct_public_api, foreign_interface_is_refused)
{
    typedef ucs_status_t (*query_umr_t)(uct_iface_h, uct_dcx_umr_counters_t *);
    typedef ucs_status_t (*query_tx_t)(uct_iface_h, uct_dcx_tx_counters_t *);
    typedef ucs_status_t (*view_create_t)(uct_iface_h, uct_mem_h, void *,
                                          size_t, size_t, size_t, uct_mem_h *);
    typedef ucs_status_t (*view_create_iov_t)(uct_iface_h, const uct_iov_t *,
                                              size_t, uct_mem_h *);
    typedef ucs_status_t (*view_destroy_t)(uct_iface_h, uct_mem_h);
    ASSERT_NE(nullptr, dcx_component()); /* loads the plugin */
    entity dcx;
    ASSERT_NE(nullptr, dcx.iface());
    foreign_iface other;
    ASSERT_NO_FATAL_FAILURE(other.open());

    auto query_umr       = plugin_sym<query_umr_t>("uct_dcx_iface_query_umr");
    auto query_tx        = plugin_sym<query_tx_t>("uct_dcx_iface_query_tx");
    auto view_create     = plugin_sym<view_create_t>("uct_dcx_mem_view_create");
    auto view_create_iov = plugin_sym<view_create_iov_t>(
            "uct_dcx_mem_view_create_iov");
    auto view_destroy = plugin_sym<view_destroy_t>("uct_dcx_mem_view_destroy");
    ASSERT_TRUE(query_umr && query_tx && view_create && view_create_iov &&
                view_destroy);

    buffer mem(dcx, 4096);
    uct_dcx_umr_counters_t umr;
    uct_dcx_tx_counters_t tx;
    uct_iov_t iov = {};
    uct_mem_h view;
    iov.buffer = mem.ptr();
    iov.length = 16;
    iov.memh   = mem.memh();
    iov.stride = 64;
    iov.count  = 4;

    /* The dcx interface is accepted ... */
    EXPECT_EQ(UCS_OK, query_umr(dcx.iface(), &umr));
    EXPECT_EQ(UCS_OK, query_tx(dcx.iface(), &tx));
    /* ... another transport's and none are not. */
    for (uct_iface_h iface : { other.iface, (uct_iface_h) nullptr }) {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, query_umr(iface, &umr));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, query_tx(iface, &tx));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  view_create(iface, mem.memh(), mem.ptr(), 16, 64, 4, &view));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  view_create_iov(iface, &iov, 1, &view));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, view_destroy(iface, mem.memh()));
    }
}

/* Failures that read (../common/test_print_ucs.h): a ucs_status_t prints by
 * name in a failing check ("UCS_ERR_TIMED_OUT (-20)"), not as "-20".
 * Checked through googletest's own printer and a failing EXPECT_EQ caught as
 * a non-fatal failure, so a printer that is not picked up fails here. */
TEST(uct_print, status_names_in_failures)
{
    EXPECT_EQ(::testing::PrintToString(UCS_ERR_TIMED_OUT),
              "UCS_ERR_TIMED_OUT (-20)");
    EXPECT_EQ(::testing::PrintToString(UCS_OK), "UCS_OK (0)");
    EXPECT_EQ(::testing::PrintToString(UCS_ERR_ENDPOINT_TIMEOUT),
              "UCS_ERR_ENDPOINT_TIMEOUT (-80)");
    EXPECT_EQ(::testing::PrintToString((ucs_status_t)-45), "ucs_status_t -45");
    std::vector<ucs_status_t> sts = { UCS_INPROGRESS,
                                      UCS_ERR_CONNECTION_RESET };
    EXPECT_EQ(::testing::PrintToString(sts),
              "{ UCS_INPROGRESS (1), UCS_ERR_CONNECTION_RESET (-25) }");
    EXPECT_NONFATAL_FAILURE(EXPECT_EQ(UCS_OK, UCS_ERR_NO_RESOURCE),
                            "Which is: UCS_ERR_NO_RESOURCE (-2)");
    EXPECT_NONFATAL_FAILURE(EXPECT_EQ(UCS_OK, UCS_ERR_IO_ERROR),
                            "Which is: UCS_OK (0)");
}
