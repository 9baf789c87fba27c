/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * RoCE addressing (hardware the transport must run on) on the device model's RoCE port mode
 * (DCXEMU_LINK_LAYER=ethernet, read once per process, hence children),
 * with two routers between any two ports (DCXEMU_ROCE_ROUTERS=2): the GID
 * dcx picks by itself (RoCE v2, IPv4-mapped; index 0 of the model's table
 * is the link-local RoCE v1 entry), UCX_DCX_GID_INDEX, UCX_DCX_HOP_LIMIT
 * for requests and for the DCT's responses, and reachability between
 * interfaces of different RoCE versions.
 */
#include "uct_test.h"

#include <stdlib.h>
#include <string.h>

using namespace dcx_test;

namespace {

/* The device address: lid (2 bytes), flags, then the GID on RoCE. */
const size_t dev_addr_flags_offset = 2;
const size_t dev_addr_gid_offset   = 3;
const uint8_t flag_global          = 1;
const uint8_t flag_roce_v2         = 2;
const uint8_t flag_ipv4            = 4;

/* Run a role in a child on a RoCE port with two routers; this process's
 * environment is restored (the suite itself may run in RoCE mode). */
int run_roce(const std::string &role, const std::vector<std::string> &args = {})
{
    child c(role, args,
            { { "DCXEMU_LINK_LAYER", "ethernet" },
              { "DCXEMU_ROCE_ROUTERS", "2" } });
    return c.wait(90);
}

/* 0 when the device address says flags and carries the GID that ends in
 * tail (the last 6 bytes), else 1. */
int check_dev_addr(const entity &e, uint8_t flags, const uint8_t tail[6])
{
    const std::vector<char> &a = e.dev_addr();
    if ((a.size() != dev_addr_gid_offset + 16) ||
        ((uint8_t)a[dev_addr_flags_offset] != flags) || (a[0] != 0) ||
        (a[1] != 0) || memcmp(a.data() + dev_addr_gid_offset + 10, tail, 6)) {
        return 1;
    }
    return 0;
}

/* A put, a get and an active message from a to b, each completed: 0, or
 * the failed step. */
int exchange(entity &a, entity &b)
{
    std::vector<entity *> all = { &a, &b };
    buffer target(b, 4096, 0), local(a, 4096, 0);
    rkey rk(target.packed_rkey());
    uct_ep_h ep    = a.connect(b);
    uint64_t value = 0x1234abcd;
    int am_count   = 0;

    if (ep == nullptr) {
        return 1;
    }
    if (uct_iface_set_am_handler(
                b.iface(), 7,
                [](void *arg, void *data, size_t length, unsigned flags) {
                    ++*(int *)arg;
                    return UCS_OK;
                },
                &am_count, 0) != UCS_OK) {
        return 2;
    }
    if (retry(all, [&] {
            return uct_ep_put_short(ep, &value, sizeof(value), target.addr(),
                                    rk.get());
        }) != UCS_OK) {
        return 3;
    }
    if (flush_ep(all, ep, 0, 30) != UCS_OK) {
        return 4;
    }
    if (memcmp(target.ptr(), &value, sizeof(value)) != 0) {
        return 6;
    }

    test_comp gcomp;
    uct_iov_t iov       = { local.ptr(), 64, local.memh(), 0, 1 };
    ucs_status_t status = retry(all, [&] {
        return uct_ep_get_zcopy(ep, &iov, 1, target.addr(), rk.get(),
                                &gcomp.uct);
    });
    if (wait_comp(all, status, gcomp, 30) != UCS_OK) {
        return 7;
    }
    if (memcmp(local.ptr(), &value, sizeof(value)) != 0) {
        return 8;
    }

    if (retry(all, [&] { return uct_ep_am_short(ep, 7, 1, &value, 8); }) !=
        UCS_OK) {
        return 9;
    }
    if (!wait_for(
                all, [&] { return am_count == 1; }, 30)) {
        return 10;
    }
    uct_ep_destroy(ep);
    return 0;
}

/* A put from a to b: 0 when the endpoint fails with a timeout, as a packet
 * that dies on the way makes it (a short retry budget in a's config). */
int put_times_out(entity &a, failure_record &f, entity &b)
{
    std::vector<entity *> all = { &a, &b };
    buffer target(b, 4096, 0);
    rkey rk(target.packed_rkey());
    uct_ep_h ep    = a.connect(b);
    uint64_t value = 5;

    if ((ep == nullptr) ||
        (uct_ep_put_short(ep, &value, sizeof(value), target.addr(), rk.get()) !=
         UCS_OK)) {
        return 1;
    }
    if (!wait_for(
                all, [&] { return !f.eps.empty(); }, 30)) {
        return 2;
    }
    if ((f.eps[0] != ep) || (f.statuses[0] != UCS_ERR_ENDPOINT_TIMEOUT)) {
        return 3;
    }
    uct_ep_destroy(ep);
    return 0;
}

} // namespace

/* Defaults: dcx picks the RoCE v2 IPv4-mapped GID (index 3 of the model's
 * table, not index 0) and a hop limit that crosses the routers both ways. */
DCX_CHILD_ROLE(roce_default_gid)
{
    static const uint8_t v4[6] = { 0xff, 0xff, 198, 51, 100, 1 };
    entity a, b;

    if ((a.iface() == nullptr) || (b.iface() == nullptr)) {
        return 10;
    }
    if (check_dev_addr(a, flag_global | flag_roce_v2 | flag_ipv4, v4) != 0) {
        return 11;
    }
    if (!uct_iface_is_reachable(
                a.iface(), (const uct_device_addr_t *)b.dev_addr().data(),
                (const uct_iface_addr_t *)b.iface_addr().data())) {
        return 12;
    }
    int ret = exchange(a, b);
    return (ret == 0) ? 0 : 20 + ret;
}

TEST(uct_roce, default_gid_is_roce_v2_ipv4)
{
    EXPECT_EQ(0, run_roce("roce_default_gid"));
}

/* UCX_DCX_GID_INDEX: index 1 (RoCE v2 link-local) and 2 (RoCE v1 IPv4)
 * work between peers that use the same; an empty entry or one beyond the
 * table makes the interface fail to open. */
DCX_CHILD_ROLE(roce_gid_index)
{
    static const uint8_t v4[6] = { 0xff, 0xff, 198, 51, 100, 1 };
    {
        entity a(config_t{ { "GID_INDEX", "1" } }),
                b(config_t{ { "GID_INDEX", "1" } });
        if ((a.iface() == nullptr) || (b.iface() == nullptr)) {
            return 10;
        }
        const std::vector<char> &addr = a.dev_addr();
        if ((addr.size() != dev_addr_gid_offset + 16) ||
            ((uint8_t)addr[dev_addr_flags_offset] !=
             (flag_global | flag_roce_v2)) ||
            ((uint8_t)addr[dev_addr_gid_offset] != 0xfe) ||
            ((uint8_t)addr[dev_addr_gid_offset + 1] != 0x80)) {
            return 11;
        }
        int ret = exchange(a, b);
        if (ret != 0) {
            return 20 + ret;
        }
    }
    {
        entity a(config_t{ { "GID_INDEX", "2" } }),
                b(config_t{ { "GID_INDEX", "2" } });
        if ((a.iface() == nullptr) || (b.iface() == nullptr)) {
            return 30;
        }
        if (check_dev_addr(a, flag_global | flag_ipv4, v4) != 0) {
            return 31;
        }
        int ret = exchange(a, b);
        if (ret != 0) {
            return 40 + ret;
        }
    }
    {
        entity empty(config_t{ { "GID_INDEX", "4" } },
                     entity::open_fails{ UCS_ERR_INVALID_PARAM });
        if (empty.iface() != nullptr) {
            return 50;
        }
    }
    return 0;
}

TEST(uct_roce, gid_index_config)
{
    EXPECT_EQ(0, run_roce("roce_gid_index"));
}

/* Peers of different RoCE versions (v1 frames never reach a v2 address)
 * are not reachable, both ways. */
DCX_CHILD_ROLE(roce_mixed_versions)
{
    entity v1(config_t{ { "GID_INDEX", "2" } }), v2;
    if ((v1.iface() == nullptr) || (v2.iface() == nullptr)) {
        return 10;
    }
    if (uct_iface_is_reachable(
                v1.iface(), (const uct_device_addr_t *)v2.dev_addr().data(),
                (const uct_iface_addr_t *)v2.iface_addr().data()) ||
        uct_iface_is_reachable(
                v2.iface(), (const uct_device_addr_t *)v1.dev_addr().data(),
                (const uct_iface_addr_t *)v1.iface_addr().data())) {
        return 11;
    }
    return 0;
}

TEST(uct_roce, other_roce_version_unreachable)
{
    EXPECT_EQ(0, run_roce("roce_mixed_versions"));
}

/* UCX_DCX_HOP_LIMIT: 2 does not cross two routers. On the sender it kills
 * the requests; on the receiver it kills the DCT's responses (the DCT's
 * GRH); 3 crosses them both ways. */
DCX_CHILD_ROLE(roce_hop_limit)
{
    const config_t short_retry = quick_timeout(1);
    {
        failure_record f;
        config_t c     = short_retry;
        c["HOP_LIMIT"] = "2";
        entity sender(c, record_failure, &f), receiver;
        int ret = put_times_out(sender, f, receiver);
        if (ret != 0) {
            return 10 + ret;
        }
    }
    {
        failure_record f;
        entity sender(short_retry, record_failure, &f),
                receiver(config_t{ { "HOP_LIMIT", "2" } });
        int ret = put_times_out(sender, f, receiver);
        if (ret != 0) {
            return 20 + ret;
        }
    }
    {
        entity sender(config_t{ { "HOP_LIMIT", "3" } }),
                receiver(config_t{ { "HOP_LIMIT", "3" } });
        int ret = exchange(sender, receiver);
        if (ret != 0) {
            return 30 + ret;
        }
    }
    {
        entity bad(config_t{ { "HOP_LIMIT", "256" } },
                   entity::open_fails{ UCS_ERR_INVALID_PARAM }),
                bad_tc(config_t{ { "TRAFFIC_CLASS", "256" } },
                       entity::open_fails{ UCS_ERR_INVALID_PARAM });
        if ((bad.iface() != nullptr) || (bad_tc.iface() != nullptr)) {
            return 40;
        }
    }
    return 0;
}

TEST(uct_roce, hop_limit_for_requests_and_dct_responses)
{
    EXPECT_EQ(0, run_roce("roce_hop_limit"));
}

namespace {

/* The traffic class "auto" takes on RoCE v2 (UCX 1.22): the port's
 * configured global class where the device's sysfs directory has
 * tc/1/traffic_class (the model's DCXEMU_ROCE_TCLASS), else 106. A put
 * crosses, and the model reports the class of the request and of the
 * DCT's responses. args[0]: the class expected. */
DCX_CHILD_ROLE(roce_port_tclass)
{
    typedef int (*tclass_read_fn)(int *, int *);
    tclass_read_fn tclass_read = emu_sym<tclass_read_fn>("dcxemu_tclass_read");
    int expected               = atoi(args.at(0).c_str());
    int request = -1, response = -1;
    if (tclass_read == nullptr) {
        return 9;
    }
    entity sender, receiver;
    int ret = exchange(sender, receiver);
    if (ret != 0) {
        return 10 + ret;
    }
    if (tclass_read(&request, &response) != 0) {
        return 20;
    }
    if ((request != expected) || (response != expected)) {
        fprintf(stderr, "traffic class: request %d, response %d, expected %d\n",
                request, response, expected);
        return 21;
    }
    return 0;
}

} // namespace

TEST(uct_roce, traffic_class_from_the_port)
{
    child configured("roce_port_tclass", { "96" },
                     { { "DCXEMU_LINK_LAYER", "ethernet" },
                       { "DCXEMU_ROCE_TCLASS", "96" } });
    EXPECT_EQ(0, configured.wait(90));
    child unset("roce_port_tclass", { "106" },
                { { "DCXEMU_LINK_LAYER", "ethernet" } });
    EXPECT_EQ(0, unset.wait(90));
    child forced("roce_port_tclass", { "8" },
                 { { "DCXEMU_LINK_LAYER", "ethernet" },
                   { "DCXEMU_ROCE_TCLASS", "96" },
                   { "UCX_DCX_TRAFFIC_CLASS", "8" } });
    EXPECT_EQ(0, forced.wait(90));
}

namespace {

/* InfiniBand with a GRH on every packet: a port that requires one (the
 * model's DCXEMU_GRH_REQUIRED=1: IBV_QPF_GRH_REQUIRED in the port's flags,
 * and an address handle or QP address vector without a GRH is EINVAL, as
 * libmlx5 and the kernel refuse it) or UCX_DCX_IS_GLOBAL=y. The device
 * address carries the port's GID, and put, get, active messages and the
 * masked atomics (raw WQEs with their own address vector) reach the peer,
 * whose port drops a GRH not addressed to its GID. */
DCX_CHILD_ROLE(ib_global)
{
    const uint8_t flag_ib_gid = 8;
    entity sender, receiver;
    if ((sender.iface() == nullptr) || (receiver.iface() == nullptr)) {
        return 1;
    }
    const std::vector<char> &a = sender.dev_addr();
    if ((a.size() != dev_addr_gid_offset + 16) ||
        ((uint8_t)a[dev_addr_flags_offset] != flag_ib_gid) ||
        ((uint8_t)a[dev_addr_gid_offset] != 0xfe) ||
        ((uint8_t)a[dev_addr_gid_offset + 1] != 0x80)) {
        return 2;
    }
    int ret = exchange(sender, receiver);
    if (ret != 0) {
        return 10 + ret;
    }

    std::vector<entity *> all = { &sender, &receiver };
    uct_ep_h ep               = sender.connect(receiver);
    buffer target(receiver, 64, 0);
    rkey rk(target.packed_rkey());
    uint32_t *word32  = (uint32_t *)target.ptr();
    uint64_t *word64  = (uint64_t *)target.ptr() + 1;
    uint32_t result32 = 0;
    uint64_t result64 = 0;
    *word32           = 40;
    *word64           = 7;
    /* masked atomics stay on with a GRH, where the provider has them */
    const bool masked = !args.empty() && (args[0] == "masked");
    if (!(sender.attr().cap.atomic32.fop_flags & UCS_BIT(UCT_ATOMIC_OP_ADD))) {
        return masked ? 20 : 0;
    }
    test_comp c32, c64;
    ucs_status_t status = retry(all, [&] {
        return uct_ep_atomic32_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &result32,
                                     target.addr(), rk.get(), &c32.uct);
    });
    if ((wait_comp(all, status, c32, 30) != UCS_OK) || (result32 != 40) ||
        (*word32 != 42)) {
        return 21;
    }
    status = retry(all, [&] {
        return uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_SWAP, 9, &result64,
                                     target.addr() + 8, rk.get(), &c64.uct);
    });
    if ((wait_comp(all, status, c64, 30) != UCS_OK) || (result64 != 7) ||
        (*word64 != 9)) {
        return 22;
    }
    uct_ep_destroy(ep);
    return 0;
}

} // namespace

/* What a GRH-less interface of this process offers: the child must keep
 * masked atomics with a GRH when the provider has them (rdma-core before
 * v36 has no raw WQE builder, and then no interface has them). */
static std::vector<std::string> ib_global_args()
{
    entity plain;
    return (plain.iface() != nullptr) && (plain.attr().cap.atomic32.fop_flags &
                                          UCS_BIT(UCT_ATOMIC_OP_ADD)) ?
                   std::vector<std::string>{ "masked" } :
                   std::vector<std::string>{};
}

TEST(uct_ib_global, grh_required_port)
{
    child c("ib_global", ib_global_args(),
            { { "DCXEMU_LINK_LAYER", "infiniband" },
              { "DCXEMU_GRH_REQUIRED", "1" } });
    EXPECT_EQ(0, c.wait(90));
}

TEST(uct_ib_global, is_global_config)
{
    child c("ib_global", ib_global_args(),
            { { "DCXEMU_LINK_LAYER", "infiniband" },
              { "UCX_DCX_IS_GLOBAL", "y" } });
    EXPECT_EQ(0, c.wait(90));
}
