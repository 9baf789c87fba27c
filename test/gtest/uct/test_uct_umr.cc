/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Strided zero-copy: put_zcopy / get_zcopy with a strided uct_iov_t entry
 * move through an indirect mkey programmed by UMR (or, without UMR, through
 * a bounce buffer), data verified block by block.
 */
#include "uct_test.h"

#include <uct/ib/dcx/dcx.h>

#include "dcxemu.h"

#include <stdlib.h>
#include <string.h>

using namespace dcx_test;

namespace {

struct shape {
    size_t length;
    size_t stride;
    size_t count;
    size_t offset; /* of the first block in the local buffer (unaligned) */
};

std::ostream &operator<<(std::ostream &os, const shape &s)
{
    return os << s.length << "x" << s.count << "@" << s.stride << "+"
              << s.offset;
}

char local_byte(size_t i)
{
    return (char)(i * 13 + 7);
}
char remote_byte(size_t i)
{
    return (char)(i * 29 + 3);
}

} // namespace

/* Parameter: the UCX_DCX_UMR setting ("try": UMR on the model; "no": the
 * bounce-buffer path). */
class uct_umr : public testing::TestWithParam<std::string>,
                protected entity_pair {
protected:
    /* The sender's pool of UMR mkeys (small, so tests reach its end). */
    static const unsigned num_mkeys = 4;

    void SetUp() override
    {
        /* Registrations with exactly their requested rights on every UCX
         * release (views must not lend rights a registration lacks). */
        scoped_env env(env_vars{ { "UCX_DCX_REG_ACCESS", "requested" } });

        /* Every strided size through UMR here; the threshold has its own
         * test. */
        ASSERT_NO_FATAL_FAILURE(
                open_pair(config_t(),
                          { { "UMR", GetParam() },
                            { "UMR_MKEYS", std::to_string(num_mkeys) },
                            { "UMR_PACK_THRESH", "0" } }));
    }

    ucs_status_t wait(ucs_status_t status, test_comp &comp)
    {
        return wait_comp(all(), status, comp);
    }

    ucs_status_t rma(bool is_get, const buffer &local, const shape &s,
                     const buffer &remote, const rkey &rk)
    {
        test_comp comp;
        uct_iov_t iov = {};

        iov.buffer          = local.ptr() + s.offset;
        iov.length          = s.length;
        iov.stride          = s.stride;
        iov.count           = s.count;
        iov.memh            = local.memh();
        ucs_status_t status = retry(all(), [&] {
            return is_get ? uct_ep_get_zcopy(m_ep, &iov, 1, remote.addr(),
                                             rk.get(), &comp.uct) :
                            uct_ep_put_zcopy(m_ep, &iov, 1, remote.addr(),
                                             rk.get(), &comp.uct);
        });
        return wait(status, comp);
    }

    /* Strided local blocks <-> contiguous remote bytes, both directions. */
    void check_shape(const shape &s)
    {
        size_t span  = s.offset + (s.count - 1) * s.stride + s.length;
        size_t total = s.length * s.count;
        buffer local(*m_sender, span + 64);
        buffer remote(*m_receiver, total + 64);
        rkey rk(remote.packed_rkey());

        ASSERT_NO_FATAL_FAILURE(check_shape_on(s, local, remote, rk));
    }

    /* The same on given buffers (large enough), e.g. a layout kept cached. */
    void check_shape_on(const shape &s, const buffer &local,
                        const buffer &remote, const rkey &rk)
    {
        size_t total = s.length * s.count;

        for (size_t i = 0; i < local.length(); ++i) {
            local.ptr()[i] = local_byte(i);
        }
        memset(remote.ptr(), 0, remote.length());
        ASSERT_EQ(UCS_OK, rma(false, local, s, remote, rk)) << s;
        for (size_t b = 0; b < s.count; ++b) {
            for (size_t j = 0; j < s.length; ++j) {
                size_t l = s.offset + b * s.stride + j;
                ASSERT_EQ(local_byte(l), remote.ptr()[b * s.length + j])
                        << "put " << s << " block " << b << " byte " << j;
            }
        }
        EXPECT_EQ(0, remote.ptr()[total]) << "put " << s << " wrote past";

        for (size_t i = 0; i < remote.length(); ++i) {
            remote.ptr()[i] = remote_byte(i);
        }
        memset(local.ptr(), 0, local.length());
        ASSERT_EQ(UCS_OK, rma(true, local, s, remote, rk)) << s;
        for (size_t l = 0; l < local.length(); ++l) {
            size_t rel = l - s.offset;
            bool in    = (l >= s.offset) && (rel / s.stride < s.count) &&
                      (rel % s.stride < s.length);
            char want = in ? remote_byte((rel / s.stride) * s.length +
                                         rel % s.stride) :
                             0;
            ASSERT_EQ(want, local.ptr()[l])
                    << "get " << s << " local byte " << l
                    << (in ? " (block)" : " (gap: must stay untouched)");
        }
    }
};

TEST_P(uct_umr, shapes)
{
    const std::vector<shape> shapes = {
        { 8, 64, 512, 0 }, /* small blocks */
        { 1, 3, 1000, 1 }, /* 1-byte blocks, unaligned */
        { 1024, 4096, 16, 5 }, /* 1 KiB blocks */
        { 60000, 65535, 3, 7 }, /* the largest block and stride of one UMR */
        { 100, 100, 1, 0 }, /* count 1 */
        { 16, 48, 20000, 3 }, /* many blocks */
    };
    for (const shape &s : shapes) {
        if ((GetParam() == "no") && (s.length * s.count > 8192)) {
            continue; /* the bounce-buffer path packs up to SEG_SIZE */
        }
        ASSERT_NO_FATAL_FAILURE(check_shape(s));
    }

    /* Every operation took the path the setting asks for. */
    uct_dcx_umr_counters_t c = umr_counters(m_sender->iface());
    size_t strided           = 0; /* count 1 is contiguous, not strided */
    for (const shape &s : shapes) {
        strided += (s.count > 1);
    }
    if (GetParam() == "no") {
        EXPECT_EQ(0u, c.zcopy_ops);
        EXPECT_EQ(0u, c.umrs);
        EXPECT_GT(c.copy_ops, 0u);
    } else {
        EXPECT_EQ(0u, c.copy_ops);
        EXPECT_EQ(2 * strided, c.zcopy_ops); /* a put and a get each */
        EXPECT_EQ(strided, c.umrs); /* the get reuses the put's */
        EXPECT_EQ(strided, c.hits);
    }
}

/* Tests of the mkey pool and cache: UMR only. */
class uct_umr_pool : public uct_umr {};

namespace {

std::vector<std::vector<char>> am_payloads;

ucs_status_t am_keep(void *arg, void *data, size_t length, unsigned flags)
{
    am_payloads.emplace_back((char *)data, (char *)data + length);
    return UCS_OK;
}

} // namespace

/* Active messages with a strided payload: the receiver sees the header and
 * the blocks back to back. */
TEST_P(uct_umr, am_zcopy_strided)
{
    const size_t blen = 16, stride = 48, count = 256;
    buffer local(*m_sender, stride * count);
    uint64_t header = 0x1122334455667788ull;
    uct_iov_t iov   = {};
    test_comp comp;

    am_payloads.clear();
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface(), 4, am_keep,
                                               NULL, 0));
    for (size_t i = 0; i < local.length(); ++i) {
        local.ptr()[i] = local_byte(i);
    }
    iov.buffer          = local.ptr();
    iov.length          = blen;
    iov.stride          = stride;
    iov.count           = count;
    iov.memh            = local.memh();
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_am_zcopy(m_ep, 4, &header, sizeof(header), &iov, 1, 0,
                               &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait(status, comp));
    ASSERT_TRUE(wait_for(all(), [&] { return !am_payloads.empty(); }));

    const std::vector<char> &got = am_payloads[0];
    ASSERT_EQ(sizeof(header) + blen * count, got.size());
    EXPECT_EQ(0, memcmp(&header, got.data(), sizeof(header)));
    for (size_t b = 0; b < count; ++b) {
        ASSERT_EQ(0, memcmp(local.ptr() + b * stride,
                            got.data() + sizeof(header) + b * blen, blen))
                << "block " << b;
    }
    uct_dcx_umr_counters_t c = umr_counters(m_sender->iface());
    EXPECT_EQ((GetParam() == "no") ? 1u : 0u, c.copy_ops);
    EXPECT_EQ((GetParam() == "no") ? 0u : 1u, c.zcopy_ops);
}

/* The same layout again (a cache hit), more layouts than mkeys (evictions),
 * and several strided operations in flight at once. */
TEST_P(uct_umr_pool, reuse_evict_and_in_flight)
{
    /* One layout again and again: programmed once, then cache hits (the
     * buffers are the same registrations each time, via the rcache). */
    buffer local1(*m_sender, 8192), remote1(*m_receiver, 8192);
    rkey rk1(remote1.packed_rkey());
    uct_dcx_umr_counters_t c0 = umr_counters(m_sender->iface());
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(UCS_OK, rma(false, local1, { 8, 64, 100, 0 }, remote1, rk1));
    }
    uct_dcx_umr_counters_t c1 = umr_counters(m_sender->iface());
    EXPECT_EQ(1u, c1.umrs - c0.umrs);
    EXPECT_EQ(4u, c1.hits - c0.hits);

    /* Two layouts more than mkeys, three times: evictions. */
    for (int round = 0; round < 3; ++round) {
        for (size_t len = 8; len <= 8 * (num_mkeys + 2); len += 8) {
            ASSERT_NO_FATAL_FAILURE(check_shape({ len, 64, 100, 0 }));
        }
    }
    EXPECT_GT(umr_counters(m_sender->iface()).evictions, 0u);

    const int num_ops = 3 * num_mkeys;
    buffer local(*m_sender, 64 * 1024);
    buffer remote(*m_receiver, num_ops * 1024);
    rkey rk(remote.packed_rkey());
    std::vector<test_comp> comps(num_ops);
    std::vector<uct_iov_t> iovs(num_ops);
    for (size_t i = 0; i < local.length(); ++i) {
        local.ptr()[i] = local_byte(i);
    }
    for (int op = 0; op < num_ops; ++op) {
        uct_iov_t &iov      = iovs[op];
        iov                 = {};
        iov.buffer          = local.ptr() + op;
        iov.length          = 8;
        iov.stride          = 32 + op; /* a different layout each */
        iov.count           = 128;
        iov.memh            = local.memh();
        ucs_status_t status = retry(all(), [&] {
            return uct_ep_put_zcopy(m_ep, &iov, 1, remote.addr() + op * 1024,
                                    rk.get(), &comps[op].uct);
        });
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
        if (status == UCS_OK) {
            comps[op].done = 1;
        }
    }
    ASSERT_TRUE(wait_for(all(), [&] {
        for (auto &c : comps) {
            if (!c.done) {
                return false;
            }
        }
        return true;
    }));
    for (int op = 0; op < num_ops; ++op) {
        EXPECT_EQ(UCS_OK, comps[op].status);
        for (size_t b = 0; b < 128; ++b) {
            for (size_t j = 0; j < 8; ++j) {
                ASSERT_EQ(local_byte(op + b * (32 + op) + j),
                          remote.ptr()[op * 1024 + b * 8 + j])
                        << "op " << op << " block " << b;
            }
        }
    }
}

/* A registration that goes away takes its cached layouts with it (no
 * registration cache here, so every buffer is registered and deregistered
 * for real): a new registration never reaches through an old mkey. */
TEST_P(uct_umr, dereg_under_cached_layout)
{
    const shape s = { 16, 64, 64, 0 };
    std::unique_ptr<scoped_env> no_rcache(
            new scoped_env(env_vars{ { "UCX_DCX_RCACHE", "no" } }));
    entity sender(config_t{ { "UMR", GetParam() },
                            { "UMR_MKEYS", std::to_string(num_mkeys) },
                            { "UMR_PACK_THRESH", "0" } });
    no_rcache.reset();
    buffer remote(*m_receiver, 4096);
    rkey rk(remote.packed_rkey());
    uct_ep_h ep                = sender.connect(*m_receiver);
    std::vector<entity *> both = { &sender, m_receiver.get() };

    for (int round = 0; round < 6; ++round) {
        buffer local(sender, 8192);
        test_comp comp;
        uct_iov_t iov = {};

        for (size_t i = 0; i < local.length(); ++i) {
            local.ptr()[i] = (char)(round * 31 + i);
        }
        iov.buffer          = local.ptr();
        iov.length          = s.length;
        iov.stride          = s.stride;
        iov.count           = s.count;
        iov.memh            = local.memh();
        ucs_status_t status = retry(both, [&] {
            return uct_ep_put_zcopy(ep, &iov, 1, remote.addr(), rk.get(),
                                    &comp.uct);
        });
        status              = wait_comp(both, status, comp);
        ASSERT_EQ(UCS_OK, status) << "round " << round;
        for (size_t b = 0; b < s.count; ++b) {
            ASSERT_EQ((char)(round * 31 + b * s.stride),
                      remote.ptr()[b * s.length])
                    << "round " << round;
        }
    }
    if (GetParam() != "no") {
        /* Each deregistration dropped the layout built over it. */
        EXPECT_GE(umr_counters(sender.iface()).invalidations, 5u);
    }
    uct_ep_destroy(ep);
}

namespace {

typedef ucs_status_t (*view_create_fn_t)(uct_iface_h, uct_mem_h, void *, size_t,
                                         size_t, size_t, uct_mem_h *);
typedef ucs_status_t (*view_destroy_fn_t)(uct_iface_h, uct_mem_h);

} // namespace

/* A persistent remote strided view: the peer puts and gets contiguous
 * bytes, they land in (come from) the view's blocks; after the view is
 * destroyed its key fails the peer's endpoint and touches nothing. */
TEST_P(uct_umr_pool, remote_strided_view)
{
    auto view_create  = plugin_sym<view_create_fn_t>("uct_dcx_mem_view_create");
    auto view_destroy = plugin_sym<view_destroy_fn_t>(
            "uct_dcx_mem_view_destroy");
    ASSERT_TRUE((view_create != nullptr) && (view_destroy != nullptr));

    const size_t blen = 16, stride = 64, count = 32, total = blen * count;
    failure_record failures;
    entity sender(config_t(), record_failure, &failures);
    buffer target(*m_receiver, 8192);
    buffer src(sender, 4096), dst(sender, 4096);
    uct_ep_h ep                = sender.connect(*m_receiver);
    std::vector<entity *> both = { &sender, m_receiver.get() };
    uct_mem_h view;

    memset(target.ptr(), 0, target.length());
    ASSERT_EQ(UCS_OK,
              view_create(m_receiver->iface(), target.memh(), target.ptr() + 8,
                          blen, stride, count, &view));
    std::vector<char> packed(64);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(m_receiver->md(), view, packed.data()));
    rkey view_rkey(packed);

    auto op = [&](bool get, void *buf, const buffer &reg, size_t len,
                  uint64_t offset) {
        test_comp comp;
        uct_iov_t iov       = {};
        iov.buffer          = buf;
        iov.length          = len;
        iov.count           = 1;
        iov.memh            = reg.memh();
        ucs_status_t status = retry(both, [&] {
            return get ? uct_ep_get_zcopy(ep, &iov, 1, offset, view_rkey.get(),
                                          &comp.uct) :
                         uct_ep_put_zcopy(ep, &iov, 1, offset, view_rkey.get(),
                                          &comp.uct);
        });
        status              = wait_comp(both, status, comp);
        return status;
    };

    /* Contiguous put -> strided blocks; gaps untouched. */
    for (size_t i = 0; i < total; ++i) {
        src.ptr()[i] = (char)(i * 3 + 1);
    }
    ASSERT_EQ(UCS_OK, op(false, src.ptr(), src, total, 0));
    for (size_t l = 0; l < target.length(); ++l) {
        size_t rel = l - 8;
        bool in = (l >= 8) && (rel / stride < count) && (rel % stride < blen);
        ASSERT_EQ(in ? (char)(((rel / stride) * blen + rel % stride) * 3 + 1) :
                       0,
                  target.ptr()[l])
                << "target byte " << l;
    }

    /* A part of the view at an offset, read back contiguously. */
    memset(dst.ptr(), 0, dst.length());
    ASSERT_EQ(UCS_OK, op(true, dst.ptr(), dst, 100, 37));
    for (size_t i = 0; i < 100; ++i) {
        ASSERT_EQ((char)((37 + i) * 3 + 1), dst.ptr()[i]) << "byte " << i;
    }
    EXPECT_TRUE(failures.statuses.empty());

    /* Both strided: local blocks of 8 bytes, 24 apart, into the view. */
    {
        test_comp comp;
        uct_iov_t iov = {};
        for (size_t i = 0; i < src.length(); ++i) {
            src.ptr()[i] = (char)(i * 5 + 2);
        }
        iov.buffer      = src.ptr();
        iov.length      = 8;
        iov.stride      = 24;
        iov.count       = total / 8;
        iov.memh        = src.memh();
        ucs_status_t st = retry(both, [&] {
            return uct_ep_put_zcopy(ep, &iov, 1, 0, view_rkey.get(), &comp.uct);
        });
        st              = wait_comp(both, st, comp);
        ASSERT_EQ(UCS_OK, st);
        for (size_t o = 0; o < total; ++o) {
            char want = (char)(((o / 8) * 24 + o % 8) * 5 + 2);
            ASSERT_EQ(want, target.ptr()[8 + (o / blen) * stride + o % blen])
                    << "offset " << o;
        }
    }

    /* The view is not a registration. */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_md_mem_dereg(m_receiver->md(), view));

    /* Destroyed: the old key fails the endpoint, memory untouched. */
    ASSERT_EQ(UCS_OK, view_destroy(m_receiver->iface(), view));
    std::vector<char> before(target.ptr(), target.ptr() + target.length());
    ucs_status_t status = op(false, src.ptr(), src, total, 0);
    EXPECT_NE(UCS_OK, status);
    ASSERT_TRUE(wait_for(both, [&] { return !failures.statuses.empty(); }));
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, failures.statuses[0]);
    EXPECT_EQ(0, memcmp(before.data(), target.ptr(), target.length()))
            << "a destroyed view's key reached memory";
    uct_ep_destroy(ep);
}

typedef ucs_status_t (*view_create_iov_fn_t)(uct_iface_h, const uct_iov_t *,
                                             size_t, uct_mem_h *);

/* A piece-list view: scattered pieces (and a strided entry) of the target
 * filled by one contiguous put, in order. */
TEST_P(uct_umr_pool, remote_piece_list_view)
{
    auto create_iov = plugin_sym<view_create_iov_fn_t>(
            "uct_dcx_mem_view_create_iov");
    auto view_destroy = plugin_sym<view_destroy_fn_t>(
            "uct_dcx_mem_view_destroy");
    ASSERT_TRUE((create_iov != nullptr) && (view_destroy != nullptr));

    buffer target(*m_receiver, 4096), src(*m_sender, 4096);
    uct_iov_t pieces[3] = {};
    pieces[0]           = { target.ptr(), 10, target.memh(), 0, 1 };
    pieces[1]           = { target.ptr() + 100, 20, target.memh(), 0, 1 };
    pieces[2]           = { target.ptr() + 500, 5, target.memh(), 50, 3 };
    const std::vector<std::pair<size_t, size_t>> where = { { 0, 10 },
                                                           { 100, 20 },
                                                           { 500, 5 },
                                                           { 550, 5 },
                                                           { 600, 5 } };
    uct_mem_h view;

    memset(target.ptr(), 0, target.length());
    ASSERT_EQ(UCS_OK, create_iov(m_receiver->iface(), pieces, 3, &view));
    std::vector<char> packed(64);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(m_receiver->md(), view, packed.data()));
    rkey rk(packed);

    for (size_t i = 0; i < 45; ++i) {
        src.ptr()[i] = (char)(i + 1);
    }
    test_comp comp;
    uct_iov_t iov       = { src.ptr(), 45, src.memh(), 0, 1 };
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_put_zcopy(m_ep, &iov, 1, 0, rk.get(), &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait(status, comp));

    size_t o = 0, covered = 0;
    for (auto &w : where) {
        for (size_t i = 0; i < w.second; ++i) {
            ASSERT_EQ((char)(o + 1), target.ptr()[w.first + i])
                    << "offset " << o;
            ++o;
        }
        covered += w.second;
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < target.length(); ++i) {
        nonzero += (target.ptr()[i] != 0);
    }
    EXPECT_EQ(covered, nonzero) << "bytes outside the pieces were written";
    ASSERT_EQ(UCS_OK, view_destroy(m_receiver->iface(), view));
}

/* Views refuse what they cannot map. */
TEST_P(uct_umr_pool, remote_strided_view_invalid)
{
    auto view_create = plugin_sym<view_create_fn_t>("uct_dcx_mem_view_create");
    ASSERT_NE(nullptr, view_create);
    buffer target(*m_receiver, 4096);
    uct_mem_h view;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              view_create(m_receiver->iface(), target.memh(), target.ptr(), 16,
                          64, 1000, &view))
            << "beyond the registration";
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              view_create(m_receiver->iface(), target.memh(), target.ptr(), 64,
                          16, 4, &view))
            << "overlapping blocks";
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              view_create(m_receiver->iface(), nullptr, target.ptr(), 16, 64, 4,
                          &view))
            << "no registration";
    buffer local(*m_receiver, 4096, 0,
                 UCT_MD_MEM_ACCESS_LOCAL_READ | UCT_MD_MEM_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              view_create(m_receiver->iface(), local.memh(), local.ptr(), 16,
                          64, 4, &view))
            << "a local-only registration";
}

/* A view's key is not reusable by a stale holder: a destroyed view's mkey
 * comes back for the next view with the next key variant (mkey tag), so a
 * peer that kept the old key fails with a remote access error and touches
 * nothing, while the new key works. */
TEST_P(uct_umr_pool, stale_view_key_fails_on_next_view)
{
    auto view_create  = plugin_sym<view_create_fn_t>("uct_dcx_mem_view_create");
    auto view_destroy = plugin_sym<view_destroy_fn_t>(
            "uct_dcx_mem_view_destroy");
    ASSERT_TRUE((view_create != nullptr) && (view_destroy != nullptr));
    failure_record failures;
    entity sender(config_t(), record_failure, &failures);
    buffer target(*m_receiver, 4096);
    std::vector<entity *> both = { &sender, m_receiver.get() };
    std::vector<char> old_packed(64), new_packed(64);
    uct_mem_h view;

    ASSERT_EQ(UCS_OK, view_create(m_receiver->iface(), target.memh(),
                                  target.ptr(), 16, 64, 8, &view));
    ASSERT_EQ(UCS_OK,
              uct_md_mkey_pack(m_receiver->md(), view, old_packed.data()));
    ASSERT_EQ(UCS_OK, view_destroy(m_receiver->iface(), view));
    ASSERT_EQ(UCS_OK, view_create(m_receiver->iface(), target.memh(),
                                  target.ptr(), 16, 64, 8, &view));
    ASSERT_EQ(UCS_OK,
              uct_md_mkey_pack(m_receiver->md(), view, new_packed.data()));
    uint32_t old_key, new_key;
    memcpy(&old_key, old_packed.data(), 4);
    memcpy(&new_key, new_packed.data(), 4);
    EXPECT_NE(old_key, new_key);
    EXPECT_EQ(old_key & ~0xffu, new_key & ~0xffu) << "the mkey was reused";

    uint64_t value = 0xbad;
    {
        rkey stale(old_packed);
        uct_ep_h ep = sender.connect(*m_receiver);
        ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, &value, 8, 0, stale.get()));
        ASSERT_TRUE(wait_for(
                both, [&] { return !failures.eps.empty(); }, 30))
                << "a stale view key reached the new view";
        EXPECT_EQ(UCS_ERR_CONNECTION_RESET, failures.statuses[0]);
        uint64_t got = target.word(0);
        EXPECT_EQ(0u, got) << "a stale view key wrote memory";
        uct_ep_destroy(ep);
    }
    {
        rkey fresh(new_packed);
        uct_ep_h ep = sender.connect(*m_receiver);
        value       = 0x600d;
        ASSERT_EQ(UCS_OK, retry(both, [&] {
                      return uct_ep_put_short(ep, &value, 8, 0, fresh.get());
                  }));
        ASSERT_TRUE(iface_flushed(both, sender));
        EXPECT_EQ(1u, failures.eps.size());
        uint64_t got = target.word(0);
        EXPECT_EQ(0x600du, got);
        uct_ep_destroy(ep);
    }
    EXPECT_EQ(UCS_OK, view_destroy(m_receiver->iface(), view));
}

/* Cached layouts are local keys only: after strided operations leave
 * programmed layouts in the sender's pool, a peer that knows the sender's
 * DC key and tries every key the pool's mkeys can have (the device model
 * numbers mkeys (65536 + slot) << 8, tag 0) reaches none of them. */
TEST_P(uct_umr_pool, cached_layouts_have_local_rights_only)
{
    buffer local(*m_sender, 8192), remote(*m_receiver, 8192);
    rkey rk(remote.packed_rkey());
    const shape s = { 16, 48, 64, 3 };

    memset(local.ptr(), 0, local.length());
    ASSERT_EQ(UCS_OK, rma(false, local, s, remote, rk));
    ASSERT_EQ(UCS_OK, rma(true, local, s, remote, rk));
    ASSERT_GT(umr_counters(m_sender->iface()).umrs, 0u);

    failure_record failures;
    entity attacker(config_t(), record_failure, &failures);
    std::vector<entity *> all3 = { &attacker, m_sender.get(),
                                   m_receiver.get() };
    std::vector<char> packed   = remote.packed_rkey();
    std::vector<char> before(local.ptr(), local.ptr() + local.length());
    const unsigned slots = 64;
    for (unsigned slot = 0; slot < slots; ++slot) {
        uint32_t key = (65536u + slot) << 8;
        memcpy(packed.data(), &key, 4);
        rkey guess(packed);
        uct_ep_h ep    = attacker.connect(*m_sender);
        uint64_t value = 0xbadbadbad;
        ASSERT_EQ(UCS_OK, retry(all3, [&] {
                      return uct_ep_put_short(ep, &value, 8, 0, guess.get());
                  }));
        ASSERT_TRUE(wait_for(all3, [&] {
            return (failures.eps.size() > slot) ||
                   (uct_iface_flush(attacker.iface(), 0, NULL) == UCS_OK);
        }));
        ASSERT_EQ(slot + 1, failures.eps.size())
                << "key 0x" << std::hex << key << " was accepted";
        uct_ep_destroy(ep);
    }
    EXPECT_EQ(0, memcmp(before.data(), local.ptr(), local.length()))
            << "a peer wrote through a cached layout";
}

/* Small strided transfers are packed (cheaper than gathering tiny blocks),
 * larger ones go through UMR; the threshold is a setting. */
TEST_P(uct_umr_pool, pack_threshold)
{
    entity sender(config_t{ { "UMR_PACK_THRESH", "1k" } });
    buffer local(sender, 8192), remote(*m_receiver, 8192);
    rkey rk(remote.packed_rkey());
    uct_ep_h ep                = sender.connect(*m_receiver);
    std::vector<entity *> both = { &sender, m_receiver.get() };

    auto put = [&](size_t len, size_t count) {
        test_comp comp;
        uct_iov_t iov       = {};
        iov.buffer          = local.ptr();
        iov.length          = len;
        iov.stride          = 2 * len;
        iov.count           = count;
        iov.memh            = local.memh();
        ucs_status_t status = retry(both, [&] {
            return uct_ep_put_zcopy(ep, &iov, 1, remote.addr(), rk.get(),
                                    &comp.uct);
        });
        status              = wait_comp(both, status, comp);
        EXPECT_EQ(UCS_OK, status);
    };

    for (size_t i = 0; i < local.length(); ++i) {
        local.ptr()[i] = local_byte(i);
    }
    put(8, 128); /* 1 KiB: packed */
    put(8, 129); /* just above: UMR */
    uct_dcx_umr_counters_t c = umr_counters(sender.iface());
    EXPECT_EQ(1u, c.copy_ops);
    EXPECT_EQ(1u, c.zcopy_ops);
    for (size_t b = 0; b < 129; ++b) {
        ASSERT_EQ(0, memcmp(local.ptr() + b * 16, remote.ptr() + b * 8, 8))
                << "block " << b;
    }
    uct_ep_destroy(ep);
}

/* Beyond one interleaved entry: several strided entries, strides of 64 KiB
 * and more, and more contiguous entries than the gather list holds all go
 * through a list mkey, one piece per block; without UMR they are refused
 * (or packed, for one strided entry that fits a bounce buffer). */
TEST_P(uct_umr, piece_lists)
{
    buffer local(*m_sender, 4 * 70000 + 4096);
    buffer remote(*m_receiver, 8192);
    rkey rk(remote.packed_rkey());
    std::vector<char> want;

    for (size_t i = 0; i < local.length(); ++i) {
        local.ptr()[i] = local_byte(i);
    }
    auto run = [&](std::vector<uct_iov_t> iov) {
        test_comp comp;
        want.clear();
        for (const uct_iov_t &e : iov) {
            size_t stride = (e.count > 1) ? e.stride : e.length;
            for (size_t b = 0; b < e.count; ++b) {
                const char *p = (const char *)e.buffer + b * stride;
                want.insert(want.end(), p, p + e.length);
            }
        }
        memset(remote.ptr(), 0, remote.length());
        ucs_status_t status = retry(all(), [&] {
            return uct_ep_put_zcopy(m_ep, iov.data(), iov.size(), remote.addr(),
                                    rk.get(), &comp.uct);
        });
        return wait(status, comp);
    };
    auto entry = [&](size_t off, size_t len, size_t stride, size_t count) {
        uct_iov_t e = {};
        e.buffer    = local.ptr() + off;
        e.length    = len;
        e.stride    = stride;
        e.count     = count;
        e.memh      = local.memh();
        return e;
    };

    std::vector<std::vector<uct_iov_t>> cases = {
        { entry(0, 16, 64, 4), entry(1000, 8, 32, 4) }, /* two strided */
        { entry(3, 100, 70000, 3) }, /* stride > 64 KiB */
        { entry(5, 10, 0, 1), entry(40, 10, 0, 1), entry(90, 10, 0, 1),
          entry(140, 10, 0, 1), entry(190, 10, 0, 1), entry(240, 10, 0, 1),
          entry(290, 10, 0, 1), entry(340, 10, 0, 1), entry(390, 10, 0, 1),
          entry(440, 10, 0, 1), entry(490, 10, 0, 1) }, /* 11 > max_sge */
    };
    for (size_t c = 0; c < cases.size(); ++c) {
        ucs_status_t status = run(cases[c]);
        if ((GetParam() == "no") && (c != 1)) {
            EXPECT_EQ(UCS_ERR_UNSUPPORTED, status) << "case " << c;
            continue;
        }
        ASSERT_EQ(UCS_OK, status) << "case " << c;
        ASSERT_EQ(0, memcmp(want.data(), remote.ptr(), want.size()))
                << "case " << c;
        EXPECT_EQ(0, remote.ptr()[want.size()]) << "case " << c;
    }
    uct_dcx_umr_counters_t ctr = umr_counters(m_sender->iface());
    EXPECT_EQ((GetParam() == "no") ? 0u : 3u, ctr.zcopy_ops);
    EXPECT_EQ((GetParam() == "no") ? 1u : 0u, ctr.copy_ops);
}

/* The list capacity follows the device's WQE size (the suite runs at 512
 * and 1024 bytes): a list of exactly that many pieces works, one more is
 * refused with nothing moved. */
TEST_P(uct_umr_pool, list_capacity_limit)
{
    buffer local(*m_sender, 4096), remote(*m_receiver, 4096);
    rkey rk(remote.packed_rkey());
    ASSERT_NO_FATAL_FAILURE(check_shape({ 8, 64, 4, 0 })); /* creates the QP */
    size_t max = umr_counters(m_sender->iface()).max_pieces;
    ASSERT_GT(max, 8u);
    /* What the interface reported before the UMR QP existed. */
    EXPECT_EQ(max, m_sender->attr().cap.put.max_iov);
    EXPECT_EQ(max, m_sender->attr().cap.get.max_iov);
    printf("[ umr      ] %zu pieces per list UMR\n", max);

    std::vector<uct_iov_t> iov(max + 1);
    for (size_t i = 0; i <= max; ++i) {
        iov[i]              = {};
        iov[i].buffer       = local.ptr() + 11 * i;
        iov[i].length       = 7;
        iov[i].count        = 1;
        iov[i].memh         = local.memh();
        local.ptr()[11 * i] = (char)(i + 1);
    }
    memset(remote.ptr(), 0, remote.length());
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_ep_put_zcopy(m_ep, iov.data(), max + 1, remote.addr(),
                               rk.get(), NULL));
    EXPECT_EQ(0, remote.ptr()[0]) << "a refused operation wrote";

    test_comp comp;
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_put_zcopy(m_ep, iov.data(), max, remote.addr(), rk.get(),
                                &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait(status, comp));
    for (size_t i = 0; i < max; ++i) {
        ASSERT_EQ((char)(i + 1), remote.ptr()[7 * i]) << "piece " << i;
    }
}

/* Without UMR the iov capacity is the gather list's. */
TEST(uct_umr_caps, max_iov_without_umr)
{
    entity plain(config_t{ { "UMR", "no" } });
    ASSERT_NE(nullptr, plain.iface());
    EXPECT_EQ(8u, plain.attr().cap.put.max_iov);
    EXPECT_EQ(8u, plain.attr().cap.get.max_iov);
}

/* Impossible shapes fail with no side effect. */
TEST_P(uct_umr, invalid_shapes)
{
    buffer local(*m_sender, 4096);
    buffer remote(*m_receiver, 4096);
    rkey rk(remote.packed_rkey());
    uct_iov_t iov = {};

    memset(remote.ptr(), 0, remote.length());
    iov.buffer = local.ptr();
    iov.length = 64;
    iov.stride = 32; /* overlapping blocks */
    iov.count  = 4;
    iov.memh   = local.memh();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_zcopy(m_ep, &iov, 1, remote.addr(), rk.get(), NULL));

    iov.stride = 128;
    iov.memh   = UCT_MEM_HANDLE_NULL;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_zcopy(m_ep, &iov, 1, remote.addr(), rk.get(), NULL));

    for (int i = 0; i < 100; ++i) {
        m_sender->progress();
        m_receiver->progress();
    }
    for (size_t i = 0; i < remote.length(); ++i) {
        ASSERT_EQ(0, remote.ptr()[i]) << "a refused operation wrote";
    }
}

/* Local blocks outside their registration: the device would fail the data
 * operation that reaches them (an mkey's entries are checked only then), and
 * with it the DCI and, under the rand policy, every endpoint sharing it, so
 * dcx refuses the call before posting anything. Another endpoint on the same
 * DCI, and the same endpoint, still move data afterwards. */
TEST_P(uct_umr, outside_registration_refused_before_posting)
{
    failure_record failures;
    entity sender(config_t{ { "TX_POLICY", "rand" },
                            { "NUM_DCI", "1" },
                            { "UMR", GetParam() },
                            { "UMR_PACK_THRESH", "0" } },
                  record_failure, &failures);
    entity receiver, other;
    std::vector<entity *> everyone = { &sender, &receiver, &other };
    std::vector<char> big(65536); /* mapped, 4096 bytes registered */
    buffer remote(receiver, 4096), remote2(other, 4096);
    rkey rk(remote.packed_rkey()), rk2(remote2.packed_rkey());
    uct_ep_h ep = sender.connect(receiver), ep2 = sender.connect(other);
    uct_mem_h part;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(sender.md(), big.data(), 4096,
                                     UCT_MD_MEM_ACCESS_ALL, &part));

    uct_iov_t iov = {};
    iov.buffer    = big.data();
    iov.length    = 64;
    iov.stride    = 1000;
    iov.count     = 16; /* 15064 bytes, 4096 of them registered */
    iov.memh      = part;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_zcopy(ep, &iov, 1, remote.addr(), rk.get(), NULL));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_get_zcopy(ep, &iov, 1, remote.addr(), rk.get(), NULL));
    uct_iov_t two[2] = { iov, iov };
    two[0].count     = 1;
    EXPECT_EQ((GetParam() == "no") ? UCS_ERR_UNSUPPORTED : /* no list UMR */
                                     UCS_ERR_INVALID_PARAM,
              uct_ep_put_zcopy(ep, two, 2, remote.addr(), rk.get(), NULL));

    /* inside the registration: 4 x 64 bytes, 1000 apart */
    iov.count                                   = 4;
    const std::pair<uct_ep_h, rkey *> targets[] = { { ep, &rk },
                                                    { ep2, &rk2 } };
    for (const auto &e : targets) {
        test_comp comp;
        ucs_status_t status = retry(everyone, [&] {
            return uct_ep_put_zcopy(e.first, &iov, 1,
                                    (e.first == ep) ? remote.addr() :
                                                      remote2.addr(),
                                    e.second->get(), &comp.uct);
        });
        EXPECT_EQ(UCS_OK, wait_comp(everyone, status, comp));
    }
    EXPECT_EQ(UCS_OK, flush_ep(everyone, ep));
    EXPECT_EQ(UCS_OK, flush_ep(everyone, ep2));
    EXPECT_TRUE(failures.statuses.empty()) << "an endpoint failed";
    uct_ep_destroy(ep);
    uct_ep_destroy(ep2);
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(sender.md(), part));
}

/* An error completion on the UMR QP (forced by the device model): the
 * operation whose UMR failed fails (no hang), the QP is reset and
 * reconnected once it has drained, the layouts cached before are dropped,
 * and strided put/get zero-copy works again, data verified. */
TEST_P(uct_umr_pool, umr_qp_recovers_after_error)
{
    typedef int (*inject_fn_t)(enum dcxemu_fault_kind, uint32_t, uint64_t);
    typedef int (*rc_qps_fn_t)(uint32_t *, unsigned, unsigned *);
    auto inject = emu_sym<inject_fn_t>("dcxemu_fault_inject");
    auto rc_qps = emu_sym<rc_qps_fn_t>("dcxemu_rc_qp_numbers");
    ASSERT_TRUE((inject != nullptr) && (rc_qps != nullptr));

    /* A layout cached before the error (its buffers stay registered). */
    const shape s_old = { 8, 64, 100, 0 };
    buffer old_local(*m_sender, 8192), old_remote(*m_receiver, 8192);
    rkey old_rk(old_remote.packed_rkey());
    ASSERT_NO_FATAL_FAILURE(
            check_shape_on(s_old, old_local, old_remote, old_rk));
    uct_dcx_umr_counters_t c0 = umr_counters(m_sender->iface());
    EXPECT_EQ(0u, c0.recoveries);

    /* The sender's UMR QP is the only RC QP of this process. */
    uint32_t qpn  = 0;
    unsigned nqps = 0;
    ASSERT_EQ(0, rc_qps(&qpn, 1, &nqps));
    ASSERT_EQ(1u, nqps);
    ASSERT_EQ(0, inject(DCXEMU_FAULT_FORCE_STATUS, qpn, IBV_WC_GENERAL_ERR));

    /* A new layout: its UMR completes in error. */
    const shape s_new = { 16, 64, 100, 0 };
    buffer local(*m_sender, 8192), remote(*m_receiver, 8192);
    rkey rk(remote.packed_rkey());
    EXPECT_EQ(UCS_ERR_IO_ERROR, rma(false, local, s_new, remote, rk));
    uct_dcx_umr_counters_t c1 = umr_counters(m_sender->iface());
    EXPECT_EQ(1u, c1.recoveries);

    /* Every layout works again: the failed one, the one cached before the
     * error (programmed again), and another. */
    ASSERT_NO_FATAL_FAILURE(check_shape_on(s_new, local, remote, rk));
    ASSERT_NO_FATAL_FAILURE(
            check_shape_on(s_old, old_local, old_remote, old_rk));
    ASSERT_NO_FATAL_FAILURE(check_shape({ 24, 40, 50, 3 }));
    uct_dcx_umr_counters_t c2 = umr_counters(m_sender->iface());
    EXPECT_EQ(1u, c2.recoveries);
    EXPECT_EQ(3u, c2.umrs - c1.umrs);
    EXPECT_EQ(c0.zcopy_ops + 6, c2.zcopy_ops);
}

INSTANTIATE_TEST_SUITE_P(umr, uct_umr, testing::Values("try", "no"));
INSTANTIATE_TEST_SUITE_P(umr, uct_umr_pool, testing::Values("try"));
