/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx under injected faults (the device model's fault control): a lost
 * flow-control grant, an unreachable or destroyed DCT, a bad remote key and
 * a forced error status each fail only what they concern, and everything
 * else completes with its data verified.
 */
#include "uct_test.h"

#include "dcxemu.h"

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

extern "C" {
#include "fuzz_emu.h"
}

#include <arpa/inet.h>
#include <string.h>

using namespace dcx_test;

namespace {

/* The device model the plugin loaded into this process. */
struct fault_api {
    int (*inject)(enum dcxemu_fault_kind, uint32_t, uint64_t) = nullptr;
    int (*clear_all)(void)                                    = nullptr;
    int (*counters)(int, enum dcxemu_counter_scope,
                    struct dcxemu_counters *)                 = nullptr;

    fault_api()
    {
        inject    = emu_sym<decltype(inject)>("dcxemu_fault_inject");
        clear_all = emu_sym<decltype(clear_all)>("dcxemu_fault_clear_all");
        counters  = emu_sym<decltype(counters)>("dcxemu_counters_read");
    }

    ~fault_api()
    {
        if (clear_all != nullptr) {
            clear_all();
        }
    }
};

/* The DCT number in a dcx interface address (24 bits, little endian). */
uint32_t iface_dctn(const entity &e)
{
    const std::vector<char> &a = e.iface_addr();
    return (uint8_t)a[0] | ((uint32_t)(uint8_t)a[1] << 8) |
           ((uint32_t)(uint8_t)a[2] << 16);
}

struct am_seq {
    uint64_t next = 0;
    uint64_t bad  = 0;
};

ucs_status_t am_seq_cb(void *arg, void *data, size_t length, unsigned flags)
{
    am_seq *s = (am_seq *)arg;
    uint64_t v;

    memcpy(&v, data, sizeof(v));
    s->bad += (v != s->next);
    s->next = v + 1;
    return UCS_OK;
}

} // namespace

/* A grant lost to the receiver's DCI error (its deliveries to the sender's
 * DCT dropped until the retries run out) is asked for again after
 * FC_GRANT_TIMEOUT: the sender does not hang and nothing is lost. */
TEST(uct_faults, lost_grant_is_requested_again)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    const int count         = 64;
    const unsigned grant_ms = 200; /* FC_GRANT_TIMEOUT */
    entity receiver(quick_timeout(1));
    entity sender(config_t{
            { "FC_WND_SIZE", "8" },
            { "FC_REQ_THRESH", "0" },
            { "FC_GRANT_TIMEOUT", std::to_string(grant_ms) + "ms" } });
    std::vector<entity *> both = { &sender, &receiver };
    am_seq seq;

    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver.iface(), 3, am_seq_cb,
                                               &seq, 0));
    uct_ep_h ep = sender.connect(receiver);
    ASSERT_NE(nullptr, ep);

    /* The first grant's delivery and its one retry are lost. */
    struct dcxemu_counters before = {}, after = {};
    ASSERT_EQ(0, api.counters(0, DCXEMU_SCOPE_PROCESS, &before));
    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DROP_NEXT, iface_dctn(sender), 2));

    double start = now_sec();
    for (int i = 0; i < count; ++i) {
        ASSERT_EQ(UCS_OK,
                  retry(both,
                        [&] { return uct_ep_am_short(ep, 3, i, NULL, 0); }))
                << "message " << i;
    }
    ASSERT_TRUE(wait_for(both, [&] { return seq.next >= (uint64_t)count; }));
    double elapsed = now_sec() - start;

    ASSERT_EQ(0, api.counters(0, DCXEMU_SCOPE_PROCESS, &after));

    EXPECT_EQ(0u, seq.bad);
    EXPECT_EQ((uint64_t)count, seq.next);
    /* Both drops acted: normally the grant's DCI failed (one retry, then
     * retries exhausted); on a stalled machine the sender's timeout may
     * fire first, and the two drops then cost the old and the new grant
     * one retry each. Either way the sender waited for its timeout (two
     * clocks: allow a little skew) before asking again. */
    uint64_t retries = after.transport_retries - before.transport_retries;
    uint64_t errors  = after.error_cqes - before.error_cqes;
    EXPECT_GE(retries + errors, 2u)
            << "the fault did not act: " << retries << " retries, " << errors
            << " error completions";
    EXPECT_GE(elapsed, 0.9 * grant_ms / 1000)
            << retries << " retries, " << errors << " error completions";
    ASSERT_TRUE(iface_flushed(both, sender));
    uct_ep_destroy(ep);
}

/* A DCT that becomes unreachable fails only the endpoint to it (after the
 * transport retries); the endpoint to another DCT keeps working. */
TEST(uct_faults, unreachable_dct_fails_only_its_endpoint)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    failure_record f;
    entity sender(quick_timeout(2), record_failure, &f);
    entity gone, alive;
    buffer buf_gone(gone, 4096), buf_alive(alive, 4096);
    rkey rk_gone(buf_gone.packed_rkey()), rk_alive(buf_alive.packed_rkey());
    std::vector<entity *> all = { &sender, &gone, &alive };
    uct_ep_h ep_gone = sender.connect(gone), ep_alive = sender.connect(alive);

    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(gone), 1));
    uint64_t value = 7;
    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep_gone, &value, 8, buf_gone.addr(),
                                       rk_gone.get()));
    for (uint64_t i = 0; i < 100; ++i) {
        ASSERT_EQ(UCS_OK, retry(all, [&] {
                      return uct_ep_put_short(ep_alive, &i, 8,
                                              buf_alive.addr() + 8 * i,
                                              rk_alive.get());
                  }));
    }
    ASSERT_TRUE(wait_for(
            all, [&] { return !f.eps.empty(); }, 30));
    ASSERT_TRUE(iface_flushed(all, sender));

    ASSERT_EQ(1u, f.eps.size());
    EXPECT_EQ(ep_gone, f.eps[0]);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, f.statuses[0]);
    uint64_t untouched = buf_gone.word(0);
    EXPECT_EQ(0u, untouched) << "an unreachable DCT was written";
    for (uint64_t i = 0; i < 100; ++i) {
        uint64_t v = buf_alive.word(i);
        ASSERT_EQ(i, v);
    }
    uct_ep_destroy(ep_gone);
    uct_ep_destroy(ep_alive);
}

/* Completion moderation: puts that asked for no completion have reached the
 * peer, which then becomes unreachable; a keepalive behind that unsignaled
 * tail asks for a completion of its own and fails the endpoint. */
TEST(uct_faults, keepalive_behind_unsignaled_tail_finds_dead_peer)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    failure_record f;
    entity sender(quick_timeout(2), record_failure, &f);
    entity peer;
    buffer buf(peer, 4096);
    rkey rk(buf.packed_rkey());
    std::vector<entity *> all = { &sender, &peer };
    uct_ep_h ep               = sender.connect(peer);

    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_EQ(UCS_OK,
                  uct_ep_put_short(ep, &i, 8, buf.addr() + 8 * i, rk.get()));
    }
    ASSERT_TRUE(wait_for(all, [&] {
        uint64_t v = buf.word(3);
        return v == 3;
    })) << "the puts did not arrive";
    EXPECT_EQ(0u, tx_counters(sender.iface()).signaled);

    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(peer), 1));
    ASSERT_EQ(UCS_OK, uct_ep_check(ep, 0, NULL));
    ASSERT_TRUE(wait_for(
            all, [&] { return !f.eps.empty(); }, 30))
            << "the keepalive did not find the dead peer";
    ASSERT_EQ(1u, f.eps.size());
    EXPECT_EQ(ep, f.eps[0]);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, f.statuses[0]);
    ASSERT_TRUE(iface_flushed(all, sender));
    uct_ep_destroy(ep);
}

/* A destroyed DCT (its interface closed) fails the endpoints to it, not the
 * sender's other endpoints. */
TEST(uct_faults, destroyed_dct_fails_only_its_endpoint)
{
    failure_record f;
    entity sender(quick_timeout(2), record_failure, &f);
    std::unique_ptr<entity> doomed(new entity());
    entity alive;
    buffer buf_alive(alive, 4096);
    rkey rk_alive(buf_alive.packed_rkey());
    uct_ep_h ep_doomed        = sender.connect(*doomed);
    uct_ep_h ep_alive         = sender.connect(alive);
    std::vector<entity *> all = { &sender, &alive };

    doomed.reset();
    ASSERT_EQ(UCS_OK, uct_ep_am_short(ep_doomed, 1, 0, NULL, 0));
    uint64_t value = 99;
    ASSERT_EQ(UCS_OK, retry(all, [&] {
                  return uct_ep_put_short(ep_alive, &value, 8, buf_alive.addr(),
                                          rk_alive.get());
              }));
    ASSERT_TRUE(wait_for(
            all, [&] { return !f.eps.empty(); }, 30));
    ASSERT_TRUE(iface_flushed(all, sender));
    ASSERT_EQ(1u, f.eps.size());
    EXPECT_EQ(ep_doomed, f.eps[0]);
    uint64_t got = buf_alive.word(0);
    EXPECT_EQ(99u, got);
    uct_ep_destroy(ep_doomed);
    uct_ep_destroy(ep_alive);
}

/* A well-formed but wrong remote key (the tag byte of a real key changed,
 * as after the registration went away) fails that endpoint with a remote
 * access error; the target's memory is untouched and another endpoint
 * keeps working. */
TEST(uct_faults, wrong_rkey_fails_only_its_endpoint)
{
    failure_record f;
    entity sender(config_t(), record_failure, &f);
    entity target, other;
    buffer live(target, 4096), buf_other(other, 4096);
    std::vector<char> wrong_packed = live.packed_rkey();
    wrong_packed[0] ^= 0x5a; /* the key's tag: the key format stays valid */
    rkey stale(wrong_packed), rk_other(buf_other.packed_rkey());
    uct_ep_h ep_bad           = sender.connect(target);
    uct_ep_h ep_other         = sender.connect(other);
    std::vector<entity *> all = { &sender, &target, &other };

    uint64_t value = 0xbad;
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(ep_bad, &value, 8, live.addr(), stale.get()));
    value = 0x600d;
    ASSERT_EQ(UCS_OK, retry(all, [&] {
                  return uct_ep_put_short(ep_other, &value, 8, buf_other.addr(),
                                          rk_other.get());
              }));
    ASSERT_TRUE(wait_for(
            all, [&] { return !f.eps.empty(); }, 30));
    ASSERT_TRUE(iface_flushed(all, sender));
    ASSERT_EQ(1u, f.eps.size());
    EXPECT_EQ(ep_bad, f.eps[0]);
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, f.statuses[0]);
    uint64_t got = live.word(0);
    EXPECT_EQ(0u, got) << "a stale key wrote memory";
    got = buf_other.word(0);
    EXPECT_EQ(0x600du, got);
    uct_ep_destroy(ep_bad);
    uct_ep_destroy(ep_other);
}

/* Drops that the transport retries hide: data arrives, retries counted. */
TEST(uct_faults, dropped_deliveries_are_retried)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    failure_record f;
    entity sender(quick_timeout(7), record_failure, &f);
    entity target;
    buffer buf(target, 4096);
    rkey rk(buf.packed_rkey());
    uct_ep_h ep                   = sender.connect(target);
    std::vector<entity *> all     = { &sender, &target };
    struct dcxemu_counters before = {}, after = {};

    ASSERT_EQ(0, api.counters(0, DCXEMU_SCOPE_PROCESS, &before));
    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DROP_NEXT, iface_dctn(target), 3));
    uint64_t value = 0x1234;
    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, &value, 8, buf.addr(), rk.get()));
    ASSERT_TRUE(iface_flushed(all, sender));
    ASSERT_EQ(0, api.counters(0, DCXEMU_SCOPE_PROCESS, &after));

    EXPECT_TRUE(f.eps.empty());
    uint64_t got = buf.word(0);
    EXPECT_EQ(0x1234u, got);
    EXPECT_EQ(3u, after.transport_retries - before.transport_retries);
    uct_ep_destroy(ep);
}

/* rand: endpoints share DCIs, so an error on one fails every endpoint on
 * that DCI (the policy does not offer peer-failure handling); the DCI is
 * reset and endpoints created afterwards work. Never the process. */
TEST(uct_faults, rand_error_fails_sharers_and_resets_dci)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    failure_record f;
    entity sender(quick_timeout(1, { { "TX_POLICY", "rand" },
                                     { "NUM_DCI", "1" } }),
                  record_failure, &f);
    entity gone, other;
    buffer buf_gone(gone, 4096), buf_other(other, 4096);
    rkey rk_gone(buf_gone.packed_rkey()), rk_other(buf_other.packed_rkey());
    std::vector<entity *> all = { &sender, &gone, &other };
    uct_ep_h ep_gone = sender.connect(gone), ep_other = sender.connect(other);

    EXPECT_FALSE(sender.attr().cap.flags &
                 UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE);
    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(gone), 1));
    uint64_t value = 5;
    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep_gone, &value, 8, buf_gone.addr(),
                                       rk_gone.get()));
    ASSERT_TRUE(iface_flushed(all, sender, 30));

    /* Every endpoint that shared the failed DCI learns it at its next
     * operation (no per-DCI endpoint list: endpoints stay small). */
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT,
              uct_ep_put_short(ep_gone, &value, 8, buf_gone.addr(),
                               rk_gone.get()));
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT,
              uct_ep_put_short(ep_other, &value, 8, buf_other.addr(),
                               rk_other.get()));
    ASSERT_EQ(2u, f.eps.size());
    EXPECT_EQ(ep_gone, f.eps[0]);
    EXPECT_EQ(ep_other, f.eps[1]);
    uint64_t untouched = buf_other.word(0);
    EXPECT_EQ(0u, untouched);

    /* A new endpoint on the reset DCI works. */
    uct_ep_h ep_new = sender.connect(other);
    value           = 77;
    ASSERT_EQ(UCS_OK, retry(all, [&] {
                  return uct_ep_put_short(ep_new, &value, 8, buf_other.addr(),
                                          rk_other.get());
              }));
    ASSERT_TRUE(iface_flushed(all, sender, 30));
    uint64_t got = buf_other.word(0);
    EXPECT_EQ(77u, got);
    uct_ep_destroy(ep_gone);
    uct_ep_destroy(ep_other);
    uct_ep_destroy(ep_new);
}


namespace {

std::vector<std::string> logged_failures;

/* Keeps the messages about failed DCIs ("dcx: dci ..."). */
ucs_log_func_rc_t catch_dci_failure(const char *file, unsigned line,
                                    const char *function, ucs_log_level_t level,
                                    const ucs_log_component_config_t *comp,
                                    const char *message, va_list ap)
{
    char buf[512];
    va_list copy;

    va_copy(copy, ap);
    vsnprintf(buf, sizeof(buf), message, copy);
    va_end(copy);
    if (strncmp(buf, "dcx: dci ", 9) == 0) {
        logged_failures.push_back(buf);
        return UCS_LOG_FUNC_RC_STOP;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

/* A failed send completion is reported with the device's syndrome
 * (vendor_err), which says on hardware what the status alone does not. */
TEST(uct_faults, error_completion_reports_vendor_error)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    failure_record f;
    entity sender(config_t{}, record_failure, &f);
    entity bad;
    buffer buf_bad(bad, 4096), src(sender, 4096);
    rkey rk_bad(buf_bad.packed_rkey());
    std::vector<entity *> all = { &sender, &bad };
    uct_ep_h ep_bad           = sender.connect(bad);
    ucs_log_level_t saved     = ucs_global_opts.log_component.log_level;

    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_FORCE_STATUS, iface_dctn(bad),
                            IBV_WC_REM_OP_ERR));
    logged_failures.clear();
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_DIAG;
    ucs_log_push_handler(catch_dci_failure);
    test_comp comp;
    uct_iov_t iov       = { src.ptr(), 4096, src.memh(), 0, 1 };
    ucs_status_t status = uct_ep_put_zcopy(ep_bad, &iov, 1, buf_bad.addr(),
                                           rk_bad.get(), &comp.uct);
    bool done           = (status == UCS_INPROGRESS) &&
                wait_for(
                        all, [&] { return comp.done != 0; }, 30);
    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = saved;

    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(done);
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, comp.status);
    ASSERT_EQ(1u, logged_failures.size());
    /* mlx5's syndrome for a remote operation error */
    EXPECT_NE(std::string::npos, logged_failures[0].find("(vendor error 0x14)"))
            << logged_failures[0];
    ASSERT_TRUE(iface_flushed(all, sender, 30));
    uct_ep_destroy(ep_bad);
}

/* A forced error status on the way to one peer fails that endpoint only,
 * with the status mapped as documented (remote operation error -> reset),
 * its outstanding operations complete with that status, and the DCI is
 * reset: the same interface goes on serving another peer and, after the
 * one-shot fault, a new endpoint to the first peer. */
TEST(uct_faults, forced_status_fails_only_its_endpoint)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    failure_record f;
    entity sender(config_t{ { "NUM_DCI", "2" } }, record_failure, &f);
    entity bad, good;
    buffer buf_bad(bad, 4096), buf_good(good, 4096), src(sender, 4096);
    rkey rk_bad(buf_bad.packed_rkey()), rk_good(buf_good.packed_rkey());
    std::vector<entity *> all = { &sender, &bad, &good };
    uct_ep_h ep_bad = sender.connect(bad), ep_good = sender.connect(good);

    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_FORCE_STATUS, iface_dctn(bad),
                            IBV_WC_REM_OP_ERR));
    memset(src.ptr(), 0x3c, 4096);
    test_comp comp;
    uct_iov_t iov       = { src.ptr(), 4096, src.memh(), 0, 1 };
    ucs_status_t status = uct_ep_put_zcopy(ep_bad, &iov, 1, buf_bad.addr(),
                                           rk_bad.get(), &comp.uct);
    ASSERT_EQ(UCS_INPROGRESS, status);
    for (uint64_t i = 0; i < 50; ++i) {
        ASSERT_EQ(UCS_OK, retry(all, [&] {
                      return uct_ep_put_short(ep_good, &i, 8,
                                              buf_good.addr() + 8 * i,
                                              rk_good.get());
                  }));
    }
    ASSERT_TRUE(wait_for(
            all, [&] { return comp.done != 0; }, 30));
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, comp.status);
    ASSERT_TRUE(iface_flushed(all, sender, 30));
    ASSERT_EQ(1u, f.eps.size());
    EXPECT_EQ(ep_bad, f.eps[0]);
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, f.statuses[0]);
    EXPECT_EQ(0, buf_bad.ptr()[0]) << "a forced error executed";
    for (uint64_t i = 0; i < 50; ++i) {
        uint64_t v = buf_good.word(i);
        ASSERT_EQ(i, v);
    }

    /* One-shot; the DCI was reset: a new endpoint to the same peer works. */
    uct_ep_h ep_again = sender.connect(bad);
    test_comp comp2;
    status = retry(all, [&] {
        return uct_ep_put_zcopy(ep_again, &iov, 1, buf_bad.addr(), rk_bad.get(),
                                &comp2.uct);
    });
    status = wait_comp(all, status, comp2);
    EXPECT_EQ(UCS_OK, status);
    EXPECT_EQ(0x3c, buf_bad.ptr()[4095]);
    uct_ep_destroy(ep_bad);
    uct_ep_destroy(ep_good);
    uct_ep_destroy(ep_again);
}

namespace {

/* One completion per operation: count 1, so a second call shows as -1. */
struct cancel_comp {
    uct_completion_t uct;
    int calls           = 0;
    ucs_status_t status = UCS_INPROGRESS;
};

void cancel_comp_cb(uct_completion_t *self)
{
    cancel_comp *c = ucs_container_of(self, cancel_comp, uct);

    ++c->calls;
    c->status = self->status;
}

void unpack_count_cb(void *arg, const void *data, size_t length)
{
    ++*(int *)arg;
}

/* Zero-copy puts, a get_bcopy and a fetching atomic to a DCT that does not
 * answer (the first try fails at once and the next waits for TIMEOUT):
 * all outstanding when the caller destroys the endpoint or the interface. */
struct stuck_ops {
    static const int num_zcopy = 8;
    cancel_comp zcopy[num_zcopy], get, amo;
    int unpacked    = 0;
    uint64_t result = 0x5e7u;

    void post(uct_ep_h ep, const buffer &src, const buffer &dst, const rkey &rk)
    {
        for (cancel_comp *c : all()) {
            c->uct.func   = cancel_comp_cb;
            c->uct.count  = 1;
            c->uct.status = UCS_OK;
        }
        for (int i = 0; i < num_zcopy; ++i) {
            uct_iov_t iov = { src.ptr() + 256 * i, 256, src.memh(), 0, 1 };
            ASSERT_EQ(UCS_INPROGRESS,
                      uct_ep_put_zcopy(ep, &iov, 1, dst.addr() + 256 * i,
                                       rk.get(), &zcopy[i].uct));
        }
        ASSERT_EQ(UCS_INPROGRESS,
                  uct_ep_get_bcopy(ep, unpack_count_cb, &unpacked, 64,
                                   dst.addr(), rk.get(), &get.uct));
        ASSERT_EQ(UCS_INPROGRESS,
                  uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 1, &result,
                                        dst.addr() + 4096, rk.get(), &amo.uct));
    }

    std::vector<cancel_comp *> all()
    {
        std::vector<cancel_comp *> v = { &get, &amo };
        for (cancel_comp &c : zcopy) {
            v.push_back(&c);
        }
        return v;
    }

    /* Every completion called once, cancelled; no result delivered. */
    void expect_cancelled(const char *when)
    {
        for (cancel_comp *c : all()) {
            EXPECT_EQ(1, c->calls) << when;
            EXPECT_EQ(0, c->uct.count) << when << ": called more than once";
            EXPECT_EQ(UCS_ERR_CANCELED, c->status) << when;
        }
        EXPECT_EQ(0, unpacked) << when << ": a cancelled get was unpacked";
        EXPECT_EQ(0x5e7u, result) << when << ": a cancelled fetch wrote";
    }
};

} // namespace

/* Destroying an endpoint with operations outstanding completes each of
 * them at once, with UCS_ERR_CANCELED, exactly once: not again when their
 * work requests finish later, nor when the interface closes. */
TEST(uct_faults, ep_destroy_cancels_outstanding_ops)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    entity receiver;
    std::unique_ptr<entity> sender(new entity());
    buffer dst(receiver, 8192);
    rkey rk(dst.packed_rkey());
    std::unique_ptr<buffer> src(new buffer(*sender, 4096, 0x11));
    std::vector<entity *> both = { sender.get(), &receiver };
    uct_ep_h ep                = sender->connect(receiver);
    stuck_ops ops;

    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(receiver),
                            1));
    ops.post(ep, *src, dst, rk);
    sender->progress();
    for (cancel_comp *c : ops.all()) {
        ASSERT_EQ(0, c->calls) << "an operation finished before the test";
    }

    uct_ep_destroy(ep);
    ops.expect_cancelled("after ep destroy");

    /* The work requests go on without the endpoint and drain. */
    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(receiver),
                            0));
    ASSERT_TRUE(iface_flushed(both, *sender, 30));
    ops.expect_cancelled("after the work requests drained");
    sender->close_iface();
    ops.expect_cancelled("after iface close");
    src.reset();
}

/* Closing an interface that still has operations outstanding (its
 * endpoint was not destroyed) completes each of them once, cancelled. */
TEST(uct_faults, iface_close_cancels_outstanding_ops)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);
    entity receiver;
    std::unique_ptr<entity> sender(new entity());
    buffer dst(receiver, 8192);
    rkey rk(dst.packed_rkey());
    std::unique_ptr<buffer> src(new buffer(*sender, 4096, 0x22));
    uct_ep_h ep = sender->connect(receiver);
    stuck_ops ops;

    ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(receiver),
                            1));
    ops.post(ep, *src, dst, rk);
    sender->progress();
    for (cancel_comp *c : ops.all()) {
        ASSERT_EQ(0, c->calls) << "an operation finished before the test";
    }

    /* The endpoint goes with its interface (a warning says so). */
    sender->close_iface();
    ops.expect_cancelled("after iface close");
    src.reset();
}

/* uct_ep_flush(UCT_FLUSH_FLAG_CANCEL) on an endpoint whose work is stuck
 * (its peer does not answer) completes every outstanding operation once,
 * cancelled, long before the transport timeout, and then the flush; it is
 * not reported as an endpoint failure. With its own DCI (dcs, dcs_quota)
 * the DCI goes to ERR and is recovered for the next user; a shared DCI
 * (rand) is not stopped: the operations are cancelled, the work requests
 * run on, and the other endpoints sharing it keep working. */
TEST(uct_faults, flush_cancel_completes_outstanding_ops)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);

    for (const char *policy : { "dcs_quota", "dcs", "rand" }) {
        SCOPED_TRACE(policy);
        failure_record f;
        /* dcs policies: one try lasts longer than the wait below (1000 s,
         * 11 s at the tests' time scale; 8 tries), so a flush that waited
         * for the transport timeout cannot complete within it. rand: the
         * cancel is seen at once, before the peer answers again. */
        bool rand_policy = std::string(policy) == "rand";
        entity sender(config_t{ { "TX_POLICY", policy },
                                { "NUM_DCI", "1" },
                                { "TIMEOUT", rand_policy ? "1s" : "1000s" } },
                      record_failure, &f);
        entity stuck, other;
        buffer dst(stuck, 8192), dst_other(other, 4096);
        rkey rk(dst.packed_rkey()), rk_other(dst_other.packed_rkey());
        buffer src(sender, 4096, 0x33);
        std::vector<entity *> all = { &sender, &stuck, &other };
        uct_ep_h ep               = sender.connect(stuck);
        stuck_ops ops;
        cancel_comp flush;

        ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(stuck),
                                1));
        ops.post(ep, src, dst, rk);
        sender.progress();
        for (cancel_comp *c : ops.all()) {
            ASSERT_EQ(0, c->calls) << "an operation finished before the test";
        }

        flush.uct.func   = cancel_comp_cb;
        flush.uct.count  = 1;
        flush.uct.status = UCS_OK;
        ASSERT_EQ(UCS_INPROGRESS,
                  uct_ep_flush(ep, UCT_FLUSH_FLAG_CANCEL, &flush.uct));
        if (rand_policy) {
            /* The peer answers again, so the shared DCI drains. */
            ops.expect_cancelled("at once (rand)");
            ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE,
                                    iface_dctn(stuck), 0));
        }
        ASSERT_TRUE(wait_for(
                all, [&] { return flush.calls > 0; }, 30))
                << "cancel waited for the timeout";
        ops.expect_cancelled("after the flush");
        EXPECT_EQ(1, flush.calls);
        EXPECT_TRUE(f.eps.empty()) << "a cancel was reported as a failure";
        uct_ep_destroy(ep);
        ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DCT_UNREACHABLE, iface_dctn(stuck),
                                0));

        /* The (only) DCI serves the next endpoint. */
        uct_ep_h ep_other = sender.connect(other);
        uint64_t value    = 0xc0ffee;
        ASSERT_EQ(UCS_OK, retry(all, [&] {
                      return uct_ep_put_short(ep_other, &value, 8,
                                              dst_other.addr(), rk_other.get());
                  }));
        ASSERT_TRUE(iface_flushed(all, sender, 30));
        uint64_t got = dst_other.word(0);
        EXPECT_EQ(0xc0ffeeu, got);
        EXPECT_TRUE(f.eps.empty());
        uct_ep_destroy(ep_other);
    }
}

namespace {

/* With REG_ACCESS=requested, each registration allows exactly the remote
 * access it asked for (with the registration cache on and off): a put into
 * a local-only or get-only
 * registration fails its endpoint with a remote access error and leaves
 * the memory untouched; the same range registered again with put rights,
 * while the local-only registration is cached, takes puts. */
void check_registration_rights(const char *rcache)
{
    std::unique_ptr<scoped_env> env(
            new scoped_env({ { "UCX_DCX_RCACHE", rcache },
                             { "UCX_DCX_REG_ACCESS", "requested" } }));
    failure_record f;
    entity sender(config_t(), record_failure, &f);
    entity target;
    env.reset();
    std::vector<entity *> all = { &sender, &target };
    buffer local(target, 4096, 0,
                 UCT_MD_MEM_ACCESS_LOCAL_READ | UCT_MD_MEM_ACCESS_LOCAL_WRITE);
    buffer get_only(target, 4096, 0, UCT_MD_MEM_ACCESS_REMOTE_GET);
    uint64_t value = 0xbad, got;

    for (const buffer *b : { &local, &get_only }) {
        rkey rk(b->packed_rkey());
        uct_ep_h ep   = sender.connect(target);
        size_t before = f.eps.size();
        ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, &value, 8, b->addr(), rk.get()));
        ASSERT_TRUE(wait_for(
                all, [&] { return f.eps.size() > before; }, 30))
                << "a put into memory without put rights "
                   "succeeded (RCACHE="
                << rcache << ")";
        EXPECT_EQ(ep, f.eps.back());
        EXPECT_EQ(UCS_ERR_CONNECTION_RESET, f.statuses.back());
        got = b->word(0);
        EXPECT_EQ(0u, got) << "memory without put rights was written";
        uct_ep_destroy(ep);
    }

    /* The local-only range again, now with put rights. */
    uct_mem_h memh;
    std::vector<char> packed(local.packed_rkey().size());
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(target.md(), local.ptr(), 4096,
                                     UCT_MD_MEM_ACCESS_RMA, &memh));
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(target.md(), memh, packed.data()));
    {
        rkey rk(packed);
        uct_ep_h ep   = sender.connect(target);
        size_t before = f.eps.size();
        value         = 0x600d;
        ASSERT_EQ(UCS_OK, retry(all, [&] {
                      return uct_ep_put_short(ep, &value, 8, local.addr(),
                                              rk.get());
                  }));
        ASSERT_TRUE(iface_flushed(all, sender));
        EXPECT_EQ(before, f.eps.size());
        got = local.word(0);
        EXPECT_EQ(0x600du, got);
        uct_ep_destroy(ep);
    }
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(target.md(), memh));
}

} // namespace

TEST(uct_faults, registration_rights_are_honoured_cached)
{
    ASSERT_NO_FATAL_FAILURE(check_registration_rights("try"));
}

TEST(uct_faults, registration_rights_are_honoured_direct)
{
    ASSERT_NO_FATAL_FAILURE(check_registration_rights("no"));
}

namespace {

/* Whether a put into memory registered for local access only arrives, with
 * the given REG_ACCESS (NULL: the default). */
void put_into_local_only(const char *reg_access, bool *arrived)
{
    env_vars vars;
    if (reg_access != NULL) {
        vars.push_back({ "UCX_DCX_REG_ACCESS", reg_access });
    }
    std::unique_ptr<scoped_env> env(new scoped_env(vars));
    failure_record f;
    entity sender(config_t(), record_failure, &f);
    entity target;
    env.reset();
    std::vector<entity *> all = { &sender, &target };
    buffer local(target, 4096, 0,
                 UCT_MD_MEM_ACCESS_LOCAL_READ | UCT_MD_MEM_ACCESS_LOCAL_WRITE);
    rkey rk(local.packed_rkey());
    uct_ep_h ep    = sender.connect(target);
    uint64_t value = 0x600d, got;

    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, &value, 8, local.addr(), rk.get()));
    ASSERT_TRUE(wait_for(all, [&] {
        return !f.eps.empty() ||
               (uct_iface_flush(sender.iface(), 0, NULL) == UCS_OK);
    }));
    got      = local.word(0);
    *arrived = f.eps.empty() && (got == value);
    EXPECT_TRUE(*arrived || (got == 0)) << "a failed put wrote the memory";
    uct_ep_destroy(ep);
}

} // namespace

/* REG_ACCESS=all (the default) gives every registration every right, as
 * UCX's IB memory domains do; requested gives only the rights asked for. */
TEST(uct_faults, registration_rights_all_and_requested)
{
    bool arrived;

    ASSERT_NO_FATAL_FAILURE(put_into_local_only(NULL, &arrived));
    EXPECT_TRUE(arrived) << "default REG_ACCESS";
    ASSERT_NO_FATAL_FAILURE(put_into_local_only("all", &arrived));
    EXPECT_TRUE(arrived) << "REG_ACCESS=all";
    ASSERT_NO_FATAL_FAILURE(put_into_local_only("requested", &arrived));
    EXPECT_FALSE(arrived) << "REG_ACCESS=requested";
}

/* A peer that is no dcx sender (a raw DCI of the device model, the fuzz
 * targets' hostile peer) sends the interface's DCT a message without
 * immediate data: it is dropped, not delivered as an active message (the
 * immediate field of such a completion means nothing; the model leaves it
 * 0, which read as an id is active message 0). The same peer's message
 * with an active message id in its immediate data is delivered. */
namespace {

struct hostile_am_record {
    std::vector<size_t> lengths;
};

ucs_status_t
hostile_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ((hostile_am_record *)arg)->lengths.push_back(length);
    return UCS_OK;
}

void hostile_progress(void *arg)
{
    ((entity *)arg)->progress();
}

} // namespace

TEST(uct_faults, receive_without_immediate_is_dropped)
{
    /* Kept for the process: the fuzz targets' raw device has no close. */
    static dcx_fuzz_emu_t peer;
    static bool opened = false;
    entity receiver;
    hostile_am_record rec;
    uint64_t dc_key;

    ASSERT_NE(nullptr, receiver.iface());
    for (uint8_t id = 0; id < UCT_AM_ID_MAX; ++id) {
        ASSERT_EQ(UCS_OK,
                  uct_iface_set_am_handler(receiver.iface(), id,
                                           hostile_am_handler, &rec, 0));
    }
    if (!opened) {
        dcx_fuzz_emu_open(&peer, 4096, 1, 1);
        opened = true;
    }
    memcpy(&dc_key, receiver.iface_addr().data() + 4, sizeof(dc_key));
    memset(peer.buf, 0x5a, 64);

    for (int with_imm = 0; with_imm < 2; ++with_imm) {
        ibv_wr_start(peer.qpx);
        peer.qpx->wr_id    = with_imm;
        peer.qpx->wr_flags = IBV_SEND_SIGNALED;
        if (with_imm) {
            ibv_wr_send_imm(peer.qpx, htonl(3));
        } else {
            ibv_wr_send(peer.qpx);
        }
        ibv_wr_set_sge(peer.qpx, peer.mr->lkey, (uintptr_t)peer.buf, 64);
        mlx5dv_wr_set_dc_addr(peer.dv, peer.ah, iface_dctn(receiver), dc_key);
        ASSERT_EQ(0, ibv_wr_complete(peer.qpx));
        EXPECT_EQ(0, dcx_fuzz_emu_drain(&peer, hostile_progress, &receiver))
                << "the message did not arrive";
        std::vector<entity *> me = { &receiver };
        wait_for(
                me, [&] { return rec.lengths.size() > (size_t)with_imm; }, 1.0);
        EXPECT_EQ((size_t)with_imm, rec.lengths.size())
                << (with_imm ? "a message with an id was not delivered" :
                               "a message without immediate data was "
                               "delivered");
    }
}

namespace {

#define FATAL_CHECK(_cond, _code)                                        \
    do {                                                                 \
        if (!(_cond)) {                                                  \
            fprintf(stderr, "device_fatal child: %s failed (line %d)\n", \
                    #_cond, __LINE__);                                   \
            return (_code);                                              \
        }                                                                \
    } while (0)

} // namespace

/* device_fatal <policy>: operations are outstanding on one endpoint (their
 * peer's DCT delays everything by seconds) and another endpoint is idle when
 * the device fails (IBV_EVENT_DEVICE_FATAL; the device completes nothing
 * more). Runs in a process of its own: the model's fatal mode is per process
 * and cannot be undone. */
DCX_CHILD_ROLE(device_fatal)
{
    typedef int (*fatal_fn_t)(int);
    const std::string policy = args.empty() ? "dcs" : args[0];
    fault_api api;
    failure_record f;

    FATAL_CHECK(api.inject != nullptr, 2);
    auto device_fatal = emu_sym<fatal_fn_t>("dcxemu_device_fatal");
    FATAL_CHECK(device_fatal != nullptr, 3);

    /* dcs_hybrid: the busy endpoint holds the pool's only DCI, so the
     * others go to the stream DCI. */
    config_t config{ { "TX_POLICY", policy } };
    if (policy == "dcs_hybrid") {
        config["NUM_DCI"] = "1";
    }
    entity sender(config, record_failure, &f);
    entity receiver;
    std::vector<entity *> both = { &sender, &receiver };
    buffer dst(receiver, 8192);
    rkey rk(dst.packed_rkey());
    buffer src(sender, 4096, 0x33);
    uct_ep_h busy = sender.connect(receiver);
    uct_ep_h idle = sender.connect(receiver);
    FATAL_CHECK((busy != nullptr) && (idle != nullptr), 4);

    /* Everything to the receiver's DCT waits 5 s before it executes. */
    FATAL_CHECK(api.inject(DCXEMU_FAULT_DELAY, iface_dctn(receiver), 5000000) ==
                        0,
                5);
    const int num_zcopy = 4;
    cancel_comp zcopy[num_zcopy], flush;
    for (int i = 0; i < num_zcopy; ++i) {
        zcopy[i].uct.func   = cancel_comp_cb;
        zcopy[i].uct.count  = 1;
        zcopy[i].uct.status = UCS_OK;
        uct_iov_t iov       = { src.ptr() + 256 * i, 256, src.memh(), 0, 1 };
        FATAL_CHECK(uct_ep_put_zcopy(busy, &iov, 1, dst.addr() + 256 * i,
                                     rk.get(), &zcopy[i].uct) == UCS_INPROGRESS,
                    6);
    }
    uint64_t value = 7;
    FATAL_CHECK(uct_ep_put_short(busy, &value, 8, dst.addr() + 4096,
                                 rk.get()) == UCS_OK,
                7);
    flush.uct.func   = cancel_comp_cb;
    flush.uct.count  = 1;
    flush.uct.status = UCS_OK;
    FATAL_CHECK(uct_ep_flush(busy, 0, &flush.uct) == UCS_INPROGRESS, 8);
    sender.progress();
    FATAL_CHECK(zcopy[0].calls == 0, 9); /* still outstanding */

    FATAL_CHECK(device_fatal(0) == 0, 10);

    /* The busy endpoint fails through the error handler, its operations and
     * its flush complete with the error: nothing waits for completions that
     * never come. */
    FATAL_CHECK(wait_for(
                        both, [&] { return flush.calls > 0; }, 10),
                11);
    if ((policy != "rand") && (policy != "hw_dcs")) {
        /* (rand, hw_dcs: endpoints sharing a DCI learn at their next
         * operation) */
        FATAL_CHECK((f.eps.size() == 1) && (f.eps[0] == busy), 12);
        FATAL_CHECK(f.statuses[0] == UCS_ERR_IO_ERROR, 13);
    }
    for (int i = 0; i < num_zcopy; ++i) {
        FATAL_CHECK((zcopy[i].calls == 1) &&
                            (zcopy[i].status == UCS_ERR_IO_ERROR),
                    14);
    }
    FATAL_CHECK(flush.status == UCS_ERR_IO_ERROR, 15);

    /* New work is refused with the error, on the failed endpoint, on the
     * idle one (which fails now) and on one created after the failure. */
    FATAL_CHECK(uct_ep_put_short(busy, &value, 8, dst.addr(), rk.get()) ==
                        UCS_ERR_IO_ERROR,
                16);
    FATAL_CHECK(uct_ep_put_short(idle, &value, 8, dst.addr(), rk.get()) ==
                        UCS_ERR_IO_ERROR,
                17);
    FATAL_CHECK((f.eps.size() == 2) && (f.eps[0] == busy) &&
                        (f.eps[1] == idle) &&
                        (f.statuses[0] == UCS_ERR_IO_ERROR) &&
                        (f.statuses[1] == UCS_ERR_IO_ERROR),
                18);
    FATAL_CHECK(uct_ep_am_short(idle, 1, 0, NULL, 0) == UCS_ERR_IO_ERROR, 19);
    FATAL_CHECK(uct_ep_flush(idle, 0, NULL) == UCS_ERR_IO_ERROR, 20);
    uct_ep_h late = sender.connect(receiver);
    FATAL_CHECK(late != nullptr, 21);
    FATAL_CHECK(uct_ep_put_short(late, &value, 8, dst.addr(), rk.get()) ==
                        UCS_ERR_IO_ERROR,
                22);

    /* The interface flushes: nothing of it is left outstanding. */
    FATAL_CHECK(iface_flushed(both, sender, 10), 23);
    for (int i = 0; i < num_zcopy; ++i) {
        FATAL_CHECK(zcopy[i].calls == 1, 24); /* and never again */
    }
    FATAL_CHECK(flush.calls == 1, 25);
    uct_ep_destroy(late);
    uct_ep_destroy(idle);
    uct_ep_destroy(busy);
    return 0;
}

/* IBV_EVENT_DEVICE_FATAL (a device-fatal error, docs/device-spec.md §8): the interface's endpoints fail
 * and what was outstanding completes with UCS_ERR_IO_ERROR, instead of
 * waiting for completions that never come; later sends are refused. */
TEST(uct_faults, device_fatal_fails_endpoints_and_flushes)
{
    for (const char *policy :
         { "dcs", "dcs_quota", "rand", "hw_dcs", "dcs_hybrid" }) {
        child c("device_fatal", { policy });
        EXPECT_EQ(0, c.wait(60)) << "policy " << policy;
    }
}

/* rd_atomic_dc <devx try|no>: the device allows a DCI fewer outstanding
 * reads and atomics than max_qp_init_rd_atom (DCXEMU_LOG_MAX_RA_DC, set by
 * the parent): reads and atomics still work, with the limit read through
 * DEVX (QUERY_HCA_CAP) or, without DEVX, found when the first DCI connects. */
DCX_CHILD_ROLE(rd_atomic_dc)
{
    setenv("UCX_DCX_DEVX", args.empty() ? "try" : args[0].c_str(), 1);
    entity sender, receiver;
    std::vector<entity *> both = { &sender, &receiver };
    buffer dst(receiver, 4096, 0x44), src(sender, 4096);
    rkey rk(dst.packed_rkey());
    uct_ep_h ep = sender.connect(receiver);
    FATAL_CHECK(ep != nullptr, 2);

    const int count = 16;
    cancel_comp gets[count], amo;
    uint64_t result = 0;
    for (int i = 0; i < count; ++i) {
        gets[i].uct.func   = cancel_comp_cb;
        gets[i].uct.count  = 1;
        gets[i].uct.status = UCS_OK;
        uct_iov_t iov      = { src.ptr() + 128 * i, 128, src.memh(), 0, 1 };
        FATAL_CHECK(retry(both,
                          [&] {
                              return uct_ep_get_zcopy(ep, &iov, 1,
                                                      dst.addr() + 128 * i,
                                                      rk.get(), &gets[i].uct);
                          }) == UCS_INPROGRESS,
                    3);
    }
    amo.uct.func        = cancel_comp_cb;
    amo.uct.count       = 1;
    amo.uct.status      = UCS_OK;
    ucs_status_t status = retry(both, [&] {
        return uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 1, &result,
                                     dst.addr() + 2048, rk.get(), &amo.uct);
    });
    FATAL_CHECK((status == UCS_INPROGRESS) || (status == UCS_OK), 4);
    if (status == UCS_OK) {
        amo.calls  = 1;
        amo.status = UCS_OK;
    }
    FATAL_CHECK(wait_for(
                        both,
                        [&] {
                            for (auto &g : gets) {
                                if (g.calls == 0) {
                                    return false;
                                }
                            }
                            return amo.calls > 0;
                        },
                        20),
                5);
    for (auto &g : gets) {
        FATAL_CHECK(g.status == UCS_OK, 6);
    }
    FATAL_CHECK(amo.status == UCS_OK, 7);
    FATAL_CHECK((src.ptr()[0] == 0x44) && (src.ptr()[128 * count - 1] == 0x44),
                8);
    FATAL_CHECK(result == 0x4444444444444444ull, 9);
    uct_ep_destroy(ep);
    return 0;
}

/* A DCI's read/atomic depth is the DC capability (log_max_ra_res_dc), not
 * max_qp_init_rd_atom (docs/device-spec.md §8): with DEVX the limit is read, without
 * it the DCI finds it (the device refuses more with EINVAL). */
TEST(uct_faults, dc_rd_atomic_depth_below_rc_limit)
{
    for (const char *devx : { "try", "no" }) {
        /* Only children attach to the device anew. */
        child c("rd_atomic_dc", { devx }, { { "DCXEMU_LOG_MAX_RA_DC", "1" } });
        EXPECT_EQ(0, c.wait(60)) << "UCX_DCX_DEVX=" << devx;
    }
}

namespace {

int dci_refusals = 0;

/* Counts the diagnostics of DCIs the device refused as too large. */
ucs_log_func_rc_t count_dci_refusal(const char *file, unsigned line,
                                    const char *function, ucs_log_level_t level,
                                    const ucs_log_component_config_t *comp,
                                    const char *message, va_list ap)
{
    char buf[512];
    va_list copy;

    va_copy(copy, ap);
    vsnprintf(buf, sizeof(buf), message, copy);
    va_end(copy);
    if (strstr(buf, "refused a dci of that size") != NULL) {
        ++dci_refusals;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

/* TX_QUEUE_LEN is within max_qp_wr, but its queue is more 64-byte basic
 * blocks than the device has (max_send_wqebb; rdma-core mlx5_calc_sq_size
 * refuses it with EINVAL): the DCI is asked for again smaller, and works. */
TEST(uct_faults, dci_queue_beyond_wqebb_limit_is_shortened)
{
    ucs_log_level_t level = ucs_global_opts.log_component.log_level;
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_DIAG;
    dci_refusals                            = 0;
    ucs_log_push_handler(count_dci_refusal);
    {
        entity sender(
                config_t{ { "TX_QUEUE_LEN", "32768" }, { "NUM_DCI", "2" } });
        entity receiver;
        std::vector<entity *> both = { &sender, &receiver };
        buffer dst(receiver, 8 * 256);
        rkey rk(dst.packed_rkey());
        uct_ep_h ep = sender.connect(receiver);
        for (uint64_t i = 0; i < 256; ++i) {
            ASSERT_EQ(UCS_OK, retry(both, [&] {
                          return uct_ep_put_short(ep, &i, 8, dst.addr() + 8 * i,
                                                  rk.get());
                      }));
        }
        ASSERT_TRUE(iface_flushed(both, sender));
        for (uint64_t i = 0; i < 256; ++i) {
            uint64_t v = dst.word(i);
            ASSERT_EQ(i, v);
        }
        uct_ep_destroy(ep);
    }
    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = level;
    EXPECT_GT(dci_refusals, 0) << "the device accepted a queue beyond its "
                                  "basic blocks";
}

/* hw_dcs: every endpoint on the one DCI, each on the next DCI stream. A
 * peer that stalls holds back only its own stream: a put to another peer,
 * posted behind the stalled one on the same DCI, lands while the stalled
 * one still waits. With one channel (a DCI without streams) the same put
 * waits behind it: what the streams are for. Completions come in send
 * queue order either way, so both complete once the stall ends. */
TEST(uct_faults, hw_dcs_stalled_peer_holds_back_only_its_stream)
{
    fault_api api;
    ASSERT_NE(nullptr, api.inject);

    for (const char *channels : { "32", "1" }) {
        SCOPED_TRACE(std::string("NUM_DCI_CHANNELS=") + channels);
        const bool streams = std::string(channels) != "1";
        entity sender(config_t{ { "TX_POLICY", "hw_dcs" },
                                { "NUM_DCI_CHANNELS", channels } });
        entity slow, fast;
        buffer dst_slow(slow, 4096), dst_fast(fast, 4096);
        rkey rk_slow(dst_slow.packed_rkey()), rk_fast(dst_fast.packed_rkey());
        buffer src(sender, 4096, 0x5a);
        std::vector<entity *> all = { &sender, &slow, &fast };
        uct_ep_h ep_slow          = sender.connect(slow);
        uct_ep_h ep_fast          = sender.connect(fast);
        cancel_comp comp_slow, comp_fast;

        comp_slow.uct = { cancel_comp_cb, 1, UCS_OK };
        comp_fast.uct = { cancel_comp_cb, 1, UCS_OK };
        /* Everything to the slow peer's DCT waits 4 s before it executes. */
        ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DELAY, iface_dctn(slow), 4000000));
        uct_iov_t iov = { src.ptr(), 256, src.memh(), 0, 1 };
        ASSERT_EQ(UCS_INPROGRESS,
                  uct_ep_put_zcopy(ep_slow, &iov, 1, dst_slow.addr(),
                                   rk_slow.get(), &comp_slow.uct));
        ASSERT_EQ(UCS_INPROGRESS,
                  uct_ep_put_zcopy(ep_fast, &iov, 1, dst_fast.addr(),
                                   rk_fast.get(), &comp_fast.uct));

        /* Within 2 s, half the stall: the other stream's data lands. */
        bool landed = wait_for(
                all, [&] { return dst_fast.ptr()[255] == 0x5a; }, 2.0);
        EXPECT_EQ(streams, landed);
        EXPECT_EQ(0, comp_slow.calls) << "the slow peer's put still waits";
        EXPECT_NE(0x5a, dst_slow.ptr()[0]);

        ASSERT_TRUE(wait_for(all, [&] {
            return (comp_slow.calls == 1) && (comp_fast.calls == 1);
        }));
        EXPECT_EQ(UCS_OK, comp_slow.status);
        EXPECT_EQ(UCS_OK, comp_fast.status);
        EXPECT_EQ(0, memcmp(dst_slow.ptr(), src.ptr(), 256));
        EXPECT_EQ(0, memcmp(dst_fast.ptr(), src.ptr(), 256));
        ASSERT_EQ(0, api.inject(DCXEMU_FAULT_DELAY, iface_dctn(slow), 0));
        uct_ep_destroy(ep_fast);
        uct_ep_destroy(ep_slow);
    }
}
