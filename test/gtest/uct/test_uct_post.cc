/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The two ways work requests reach the DCIs (UCX_DCX_POST): direct posting
 * is refused where the device offers no direct objects (the device model's
 * API face) and taken where it does (its mlx5 face, or an mlx5 adapter);
 * one DCI's send queue wrapped many times by WQEs of every shape (inline of
 * several basic blocks, gather lists, reads, sends, atomics and masked
 * atomics), every byte checked. The suite runs once with the setting the
 * environment gives (contrib/dcx runs it with direct and verbs on the
 * mlx5 face).
 */
#include "uct_test.h"

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include <atomic>
#include <stdlib.h>
#include <string.h>

using namespace dcx_test;

namespace {

/* Whether the suite runs on the mlx5 face (dcx's hardware binding). */
bool on_mlx5_face()
{
    return getenv("DCX_TEST_DEVICE") != nullptr;
}

/* uct_iface_open's status for an interface with UCX_DCX_POST=post. */
ucs_status_t open_with_post(const char *post)
{
    ucs_async_context_t *async = nullptr;
    uct_iface_config_t *config = nullptr;
    uct_md_config_t *md_config = nullptr;
    uct_iface_params_t params  = {};
    uct_worker_h worker        = nullptr;
    uct_iface_h iface          = nullptr;
    uct_md_h md                = nullptr;
    ucs_status_t status;

    EXPECT_EQ(UCS_OK,
              ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async));
    EXPECT_EQ(UCS_OK,
              uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker));
    EXPECT_EQ(UCS_OK,
              uct_md_config_read(dcx_component(), NULL, NULL, &md_config));
    EXPECT_EQ(UCS_OK,
              uct_md_open(dcx_component(), emu_md_name, md_config, &md));
    uct_config_release(md_config);
    EXPECT_EQ(UCS_OK, uct_md_iface_config_read(md, "dcx", NULL, NULL, &config));
    status = uct_config_modify(config, "POST", post);
    if (status == UCS_ERR_NO_ELEM) {
        status = uct_config_modify(config, "DCX_POST", post);
    }
    EXPECT_EQ(UCS_OK, status);

    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "dcx";
    params.mode.device.dev_name = emu_dev_name;
    params.rx_headroom          = rx_headroom;
    status = uct_iface_open(md, worker, &params, config, &iface);
    uct_config_release(config);

    if (iface != nullptr) {
        uct_iface_close(iface);
    }
    uct_md_close(md);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
    return status;
}

struct am_count {
    size_t count = 0;
    size_t bytes = 0;
};

ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    am_count *c = (am_count *)arg;

    ++c->count;
    c->bytes += length;
    return UCS_OK;
}

} // namespace

TEST(uct_post, direct_refused_where_unavailable)
{
    EXPECT_EQ(UCS_OK, open_with_post("verbs"));
    EXPECT_EQ(UCS_OK, open_with_post("auto"));
    if (on_mlx5_face()) {
        /* libmlx5 describes its queues: dcx writes its own WQEs */
        EXPECT_EQ(UCS_OK, open_with_post("direct"));
    } else {
        /* the model's API face has no mlx5dv_init_obj */
        EXPECT_EQ(UCS_ERR_UNSUPPORTED, open_with_post("direct"));
    }
}

namespace {

/* Direct posting on a device without compact DC address vectors (the
 * model's DCXEMU_COMPACT_AV=0: the HCA cap compact_address_vector is 0, and
 * a DC WQE carrying the compact form completes in error): every WQE dcx
 * writes carries the extended address vector, so puts of every size, a get
 * and an active message reach the peer on a GRH-less port. */
DCX_CHILD_ROLE(direct_extended_av)
{
    config_t config = { { "POST", "direct" }, { "NUM_DCI", "2" } };
    entity sender(config), receiver(config);
    if ((sender.iface() == nullptr) || (receiver.iface() == nullptr)) {
        return 1;
    }

    std::vector<entity *> all = { &sender, &receiver };
    buffer target(receiver, 8192, 0), local(sender, 8192, 'l');
    rkey rk(target.packed_rkey());
    uct_ep_h ep = sender.connect(receiver);
    am_count am;
    if ((ep == nullptr) ||
        (uct_iface_set_am_handler(receiver.iface(), 7, am_handler, &am, 0) !=
         UCS_OK)) {
        return 2;
    }

    uint64_t value = 0x5eed;
    if ((retry(all,
               [&] {
                   return uct_ep_put_short(ep, &value, sizeof(value),
                                           target.addr(), rk.get());
               }) != UCS_OK) ||
        (flush_ep(all, ep, 0, 30) != UCS_OK) || (target.word(0) != value)) {
        return 3;
    }

    /* a gather entry: the extended AV moves the data segments up */
    test_comp zcomp;
    uct_iov_t iov       = { local.ptr(), 4096, local.memh(), 0, 1 };
    ucs_status_t status = retry(all, [&] {
        return uct_ep_put_zcopy(ep, &iov, 1, target.addr() + 64, rk.get(),
                                &zcomp.uct);
    });
    if ((wait_comp(all, status, zcomp, 30) != UCS_OK) ||
        (memcmp(target.ptr() + 64, local.ptr(), 4096) != 0)) {
        return 4;
    }

    test_comp gcomp;
    uct_iov_t giov = { local.ptr() + 4096, 8, local.memh(), 0, 1 };
    status         = retry(all, [&] {
        return uct_ep_get_zcopy(ep, &giov, 1, target.addr(), rk.get(),
                                        &gcomp.uct);
    });
    if ((wait_comp(all, status, gcomp, 30) != UCS_OK) ||
        (memcmp(local.ptr() + 4096, &value, sizeof(value)) != 0)) {
        return 5;
    }

    if ((retry(all, [&] { return uct_ep_am_short(ep, 7, 1, &value, 8); }) !=
         UCS_OK) ||
        !wait_for(
                all, [&] { return am.count == 1; }, 30)) {
        return 6;
    }
    uct_ep_destroy(ep);
    return 0;
}

} // namespace

TEST(uct_post, direct_extended_av_without_compact_av_cap)
{
    if (!on_mlx5_face()) {
        GTEST_SKIP() << "direct posting needs the mlx5 face";
    }
    child c("direct_extended_av", {}, { { "DCXEMU_COMPACT_AV", "0" } });
    EXPECT_EQ(0, c.wait(90));
}

/* One DCI with a short send queue, so that it wraps many times. */
class uct_post_wrap : public testing::Test, protected entity_pair {
protected:
    void SetUp() override
    {
        config_t config = { { "NUM_DCI", "1" }, { "TX_QUEUE_LEN", "16" } };

        ASSERT_NO_FATAL_FAILURE(open_pair(config, config));
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface(), 7,
                                                   am_handler, &m_am, 0));
    }

    am_count m_am;
};

TEST_F(uct_post_wrap, mixed_shapes_wrap_the_send_queue)
{
    const uct_iface_attr_t &attr = m_sender->attr();
    const size_t slot            = 512;
    const unsigned rounds        = 60;
    const size_t max_short = std::min<size_t>(attr.cap.put.max_short, slot);
    buffer target(*m_receiver, slot * 8 * rounds);
    buffer source(*m_sender, slot * 4);
    buffer words(*m_receiver, 64);
    rkey rk(target.packed_rkey()), wrk(words.packed_rkey());
    std::vector<char> expect(target.length(), 0);
    size_t am_bytes = 0;
    uint64_t sum    = 0;
    uint32_t xor32  = 0;

    ASSERT_GT(max_short, 64u) << "inline data of several basic blocks";
    memset(words.ptr(), 0, words.length());
    for (unsigned r = 0; r < rounds; ++r) {
        char *base = target.ptr() + r * slot * 8;
        size_t off = base - target.ptr();
        /* inline put: 1 .. max_short bytes, so WQEs of 2 to many blocks */
        size_t len = 1 + (r * 37) % max_short;
        auto data  = data_vector(len, r);
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_put_short(m_ep, data.data(), len,
                                              target.addr() + off, rk.get());
                  }));
        memcpy(&expect[off], data.data(), len);

        /* bcopy put: one data segment */
        auto bdata   = data_vector(slot - r, r + 1000);
        pack_arg arg = { bdata.data(), bdata.size() };
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      ssize_t packed = uct_ep_put_bcopy(m_ep, pack_cb, &arg,
                                                        target.addr() + off +
                                                                slot,
                                                        rk.get());
                      return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
                  }));
        memcpy(&expect[off + slot], bdata.data(), bdata.size());

        /* zcopy put: a gather list of three entries */
        auto zdata = data_vector(slot * 3, r + 2000);
        memcpy(source.ptr(), zdata.data(), zdata.size());
        uct_iov_t iov[3];
        for (int i = 0; i < 3; ++i) {
            iov[i].buffer = source.ptr() + i * slot;
            iov[i].length = slot - 16 * i;
            iov[i].memh   = source.memh();
            iov[i].stride = 0;
            iov[i].count  = 1;
        }
        test_comp zcomp;
        ucs_status_t status = retry(all(), [&] {
            return uct_ep_put_zcopy(m_ep, iov, 3,
                                    target.addr() + off + 2 * slot, rk.get(),
                                    &zcomp.uct);
        });
        ASSERT_EQ(UCS_OK, wait_comp(all(), status, zcomp));
        size_t at = off + 2 * slot;
        for (int i = 0; i < 3; ++i) {
            memcpy(&expect[at], source.ptr() + i * slot, iov[i].length);
            at += iov[i].length;
        }

        /* active messages: inline and bcopy */
        uint64_t header = r;
        auto payload    = data_vector(1 + (r * 13) % (attr.cap.am.max_short -
                                                   sizeof(header)),
                                      r + 3000);
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_am_short(m_ep, 7, header, payload.data(),
                                             payload.size());
                  }));
        am_bytes += sizeof(header) + payload.size();
        pack_arg am_arg = { payload.data(), payload.size() };
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      ssize_t packed = uct_ep_am_bcopy(m_ep, 7, pack_cb,
                                                       &am_arg, 0);
                      return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
                  }));
        am_bytes += payload.size();

        /* a device atomic and a masked 32-bit one, when offered */
        ASSERT_EQ(UCS_OK, retry(all(), [&] {
                      return uct_ep_atomic64_post(m_ep, UCT_ATOMIC_OP_ADD,
                                                  r + 1, words.addr(),
                                                  wrk.get());
                  }));
        sum += r + 1;
        if (attr.cap.atomic32.op_flags & UCS_BIT(UCT_ATOMIC_OP_XOR)) {
            ASSERT_EQ(UCS_OK, retry(all(), [&] {
                          return uct_ep_atomic32_post(m_ep, UCT_ATOMIC_OP_XOR,
                                                      0x9e3779b9u * (r + 1),
                                                      words.addr() + 8,
                                                      wrk.get());
                      }));
            xor32 ^= 0x9e3779b9u * (r + 1);
        }

        /* read back what the inline put wrote, through a read */
        std::vector<char> back(len);
        test_comp gcomp;
        status = retry(all(), [&] {
            return uct_ep_get_bcopy(m_ep, unpack_cb, back.data(), len,
                                    target.addr() + off, rk.get(), &gcomp.uct);
        });
        ASSERT_EQ(UCS_OK, wait_comp(all(), status, gcomp));
        EXPECT_EQ(data, back) << "round " << r;
    }

    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
    ASSERT_TRUE(wait_for(all(), [&] { return m_am.count >= 2 * rounds; }));
    EXPECT_EQ(2 * rounds, m_am.count);
    EXPECT_EQ(am_bytes, m_am.bytes);
    EXPECT_EQ(0, memcmp(expect.data(), target.ptr(), expect.size()));
    EXPECT_EQ(sum, words.word(0));
    if (attr.cap.atomic32.op_flags & UCS_BIT(UCT_ATOMIC_OP_XOR)) {
        uint32_t got;
        memcpy(&got, words.ptr() + 8, sizeof(got));
        EXPECT_EQ(xor32, got);
    }
    /* the queue of 16 requests wrapped many times over */
    EXPECT_GT(tx_counters(m_sender->iface()).work_requests, 16u * 20);
}

/* A receiver with a short SRQ (and so a short receive CQ), so that a
 * stream of active messages wraps both many times. */
class uct_post_rx : public testing::Test, protected entity_pair {
protected:
    struct received {
        uint8_t id;
        std::vector<char> data;
    };

    struct handler_arg {
        uct_post_rx *self;
        uint8_t id;
    };

    void SetUp() override
    {
        config_t receiver = { { "RX_QUEUE_LEN", "16" } };

        ASSERT_NO_FATAL_FAILURE(open_pair(receiver, config_t()));
        for (handler_arg &arg : m_args) {
            arg.self = this;
            ASSERT_EQ(UCS_OK,
                      uct_iface_set_am_handler(m_receiver->iface(), arg.id,
                                               record, &arg, 0));
        }
    }

    static ucs_status_t
    record(void *arg, void *data, size_t length, unsigned flags)
    {
        handler_arg *h = (handler_arg *)arg;

        h->self->m_received.push_back(
                { h->id,
                  std::vector<char>((char *)data, (char *)data + length) });
        return UCS_OK;
    }

    /* Wait until @a count messages arrived, in all. */
    bool wait_received(size_t count)
    {
        return wait_for(all(), [&] { return m_received.size() >= count; });
    }

    handler_arg m_args[3] = { { nullptr, 0 },
                              { nullptr, 17 },
                              { nullptr, UCT_AM_ID_MAX - 1 } };
    std::vector<received> m_received;
};

/* Every message of a long stream arrives once, in order, with its id (the
 * immediate) and its bytes (the byte count): inline and bcopy, empty to
 * full size, through an SRQ of 16 buffers and its CQ, each wrapped over a
 * hundred times. */
TEST_F(uct_post_rx, stream_wraps_the_srq_and_the_cq)
{
    const uct_iface_attr_t &attr = m_sender->attr();
    const unsigned count         = 2000;
    std::vector<received> expect;

    for (unsigned i = 0; i < count; ++i) {
        uint8_t id = m_args[i % 3].id;
        std::vector<char> data;

        if (i % 2) {
            uint64_t header = i;
            size_t length   = (i * 7) %
                            (attr.cap.am.max_short - sizeof(header) + 1);
            auto payload = data_vector(length, i);

            ASSERT_EQ(UCS_OK, retry(all(), [&] {
                          return uct_ep_am_short(m_ep, id, header,
                                                 payload.data(),
                                                 payload.size());
                      }));
            data.resize(sizeof(header));
            memcpy(data.data(), &header, sizeof(header));
            data.insert(data.end(), payload.begin(), payload.end());
        } else {
            /* empty, small, and up to the largest message */
            size_t length = (i % 50 == 0) ? 0 :
                            (i % 7 == 0)  ? attr.cap.am.max_bcopy :
                                            (i * 131) % attr.cap.am.max_bcopy;
            data          = data_vector(length, i);
            pack_arg arg  = { data.data(), data.size() };

            ASSERT_EQ(UCS_OK, retry(all(), [&] {
                          ssize_t packed = uct_ep_am_bcopy(m_ep, id, pack_cb,
                                                           &arg, 0);
                          return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
                      }));
        }
        expect.push_back({ id, data });
    }

    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
    ASSERT_TRUE(wait_received(count));
    ASSERT_EQ(count, m_received.size());
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_EQ(expect[i].id, m_received[i].id) << "message " << i;
        ASSERT_EQ(expect[i].data, m_received[i].data) << "message " << i;
    }
}

/* A receiver sleeping on its event fd wakes for each message, armed again
 * after each wakeup: the arm carries the count of events read. */
TEST_F(uct_post_rx, every_arm_wakes_the_receiver)
{
    const unsigned rounds = 10;
    int fd;

    ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(m_receiver->iface(), &fd));
    for (unsigned r = 0; r < rounds; ++r) {
        ASSERT_TRUE(wait_for(all(), [&] {
            return uct_iface_event_arm(m_receiver->iface(), UCT_EVENT_RECV) ==
                   UCS_OK;
        }));
        EXPECT_FALSE(fd_readable(fd, 0)) << "round " << r;

        ASSERT_EQ(UCS_OK, retry({ m_sender.get() }, [&] {
                      return uct_ep_am_short(m_ep, 17, r, NULL, 0);
                  }));

        /* Only the sender progresses: the receiver sleeps on its fd. */
        bool woke = false;
        for (int i = 0; (i < 2000) && !woke; ++i) {
            m_sender->progress();
            woke = fd_readable(fd, 1);
        }
        ASSERT_TRUE(woke) << "no wakeup in round " << r;
        EXPECT_EQ(UCS_ERR_BUSY,
                  uct_iface_event_arm(m_receiver->iface(), UCT_EVENT_RECV));
        ASSERT_TRUE(wait_received(r + 1));
    }
    EXPECT_EQ(rounds, m_received.size());
}

namespace {

std::atomic<int> rx_len_errors{ 0 };

/* The receiver's account of a receive that failed for its length. */
ucs_log_func_rc_t catch_rx_len_error(const char *file, unsigned line,
                                     const char *function,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *comp,
                                     const char *message, va_list ap)
{
    char buf[512];

    vsnprintf(buf, sizeof(buf), message, ap);
    if (strstr(buf, "dropped a receive: local length error") != NULL) {
        ++rx_len_errors;
        return UCS_LOG_FUNC_RC_STOP;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

ucs_status_t count_failure(void *arg, uct_ep_h ep, ucs_status_t status)
{
    ++*(std::atomic<int> *)arg;
    return UCS_OK;
}

} // namespace

/* A message longer than the receive buffers: the device completes the SRQ
 * WQE with a responder error (local length), which is read as such, its
 * buffer and WQE freed, and nothing delivered; the receiver goes on
 * receiving from another sender through an SRQ that wraps many times. */
TEST(uct_post_rx_error, too_long_message_is_a_receive_error)
{
    const size_t seg = 1024;
    std::atomic<int> failures{ 0 };
    entity receiver(config_t{ { "SEG_SIZE", std::to_string(seg) },
                              { "RX_QUEUE_LEN", "16" } });
    entity bad(config_t(), count_failure, &failures), good;
    std::vector<entity *> all = { &bad, &good, &receiver };
    ucs_log_level_t saved     = ucs_global_opts.log_component.log_level;
    am_count am;

    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver.iface(), 9, am_handler,
                                               &am, 0));
    ASSERT_GT(bad.attr().cap.am.max_bcopy, 2 * seg);
    uct_ep_h ep_bad = bad.connect(receiver), ep_good = good.connect(receiver);

    rx_len_errors                           = 0;
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_DEBUG;
    ucs_log_push_handler(catch_rx_len_error);
    auto big       = data_vector(2 * seg, 1);
    pack_arg arg   = { big.data(), big.size() };
    ssize_t packed = uct_ep_am_bcopy(ep_bad, 9, pack_cb, &arg, 0);
    bool seen      = wait_for(all,
                              [&] { return (rx_len_errors > 0) && (failures > 0); });
    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = saved;
    EXPECT_EQ((ssize_t)big.size(), packed);
    EXPECT_TRUE(seen) << rx_len_errors << " receive errors, " << failures
                      << " sender failures";
    EXPECT_EQ(0u, am.count) << "a message longer than the buffer arrived";

    const unsigned count = 200;
    size_t bytes         = 0;
    for (unsigned i = 0; i < count; ++i) {
        auto data  = data_vector(1 + (i * 61) % seg, i);
        pack_arg a = { data.data(), data.size() };
        ASSERT_EQ(UCS_OK, retry(all, [&] {
                      ssize_t n = uct_ep_am_bcopy(ep_good, 9, pack_cb, &a, 0);
                      return (n < 0) ? (ucs_status_t)n : UCS_OK;
                  }));
        bytes += data.size();
    }
    ASSERT_TRUE(wait_for(all, [&] { return am.count >= count; }));
    EXPECT_EQ(count, am.count);
    EXPECT_EQ(bytes, am.bytes);
    uct_ep_destroy(ep_good);
    uct_ep_destroy(ep_bad);
}
