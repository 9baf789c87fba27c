/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The DCI pool as a unit, white-box: an interface opened through UCT, its
 * pool driven through the transport's own functions (this program links
 * them, src/uct/ib/dcx/libdcx_core.la) and its state read from the
 * interface and endpoint structures. The order DCIs are taken and given
 * back in, credit grants, the dcs_quota yield point, rand sharing.
 */
#include "uct_test.h"

#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <ucs/datastruct/khash.h>
#include <uct/base/uct_iface.h>

extern "C" {
#include <dcx_iface.h>
}

#include <set>

using namespace dcx_test;

namespace {

uct_dcx_iface_t *dcx_iface(const entity &e)
{
    return ucs_derived_of(e.iface(), uct_dcx_iface_t);
}

uct_dcx_ep_t *dcx_ep(uct_ep_h ep)
{
    return ucs_derived_of(ep, uct_dcx_ep_t);
}

/* Send queue slots of the DCI not retired yet. */
unsigned dci_outstanding(const uct_dcx_iface_t *iface, uint16_t index)
{
    return iface->tx.queue_len - iface->tx.dcis[index].available;
}

/* A pending put that records the DCI its endpoint held when it went. */
struct dci_put : pending_put {
    uint16_t dci = 0;

    dci_put(uct_ep_h ep, uint64_t addr, uct_rkey_t rkey, uint64_t value)
        : pending_put(ep, addr, rkey, value)
    {
        req.func = [](uct_pending_req_t *self) {
            dci_put *put        = ucs_container_of(self, dci_put, req);
            ucs_status_t status = put->run();

            if (status == UCS_OK) {
                put->dci = dcx_ep(put->ep)->dci;
            }
            return status;
        };
    }
};

} // namespace


/* dcs: the lowest DCI first, each created when it is first taken; a DCI
 * given back is the next one taken (the free stack). */
TEST(uct_dci, dcs_take_lowest_first_give_back_lifo)
{
    entity e({ { "TX_POLICY", "dcs" }, { "NUM_DCI", "4" } });
    uct_dcx_iface_t *iface = dcx_iface(e);
    uint16_t index;

    ASSERT_EQ(4u, iface->tx.pool.size);
    EXPECT_EQ(1u, iface->tx.pool.num_created)
            << "only DCI 0 with the interface";
    EXPECT_TRUE(iface->tx.dci_policy->is_idle(iface));

    for (uint16_t expected = 0; expected < 4; ++expected) {
        ASSERT_EQ(UCS_OK, uct_dcx_iface_dci_take(iface, &index));
        EXPECT_EQ(expected, index);
        EXPECT_EQ(expected + 1u, iface->tx.pool.num_created);
        iface->tx.dcis[index].ep = NULL; /* held by nobody: an orphan */
    }
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_dcx_iface_dci_take(iface, &index));
    EXPECT_FALSE(iface->tx.dci_policy->is_idle(iface));

    /* Drained orphans go back to the pool: the last one back comes first. */
    EXPECT_TRUE(iface->tx.dci_policy->dci_drained(iface, 2));
    EXPECT_TRUE(iface->tx.dci_policy->dci_drained(iface, 0));
    ASSERT_EQ(UCS_OK, uct_dcx_iface_dci_take(iface, &index));
    EXPECT_EQ(0, index);
    ASSERT_EQ(UCS_OK, uct_dcx_iface_dci_take(iface, &index));
    EXPECT_EQ(2, index);
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_dcx_iface_dci_take(iface, &index));

    for (index = 0; index < 4; ++index) {
        iface->tx.dci_policy->dci_drained(iface, index);
    }
    EXPECT_EQ(4u, iface->tx.pool.num_free);
    EXPECT_TRUE(iface->tx.dci_policy->is_idle(iface));
}

/* dcs: an endpoint holds its DCI while it has work outstanding and gives
 * it back once everything completed. */
TEST(uct_dci, dcs_endpoint_holds_while_busy)
{
    entity sender({ { "TX_POLICY", "dcs" }, { "NUM_DCI", "2" } });
    entity receiver;
    buffer target(receiver, 64);
    rkey rk(target.packed_rkey());
    uct_dcx_iface_t *iface     = dcx_iface(sender);
    std::vector<entity *> both = { &sender, &receiver };
    uint64_t value             = 7;

    uct_ep_h a = sender.connect(receiver);
    uct_ep_h b = sender.connect(receiver);
    EXPECT_EQ(UCT_DCX_EP_NO_DCI, dcx_ep(a)->dci);

    ASSERT_EQ(UCS_OK, uct_ep_put_short(a, &value, 8, target.addr(), rk.get()));
    ASSERT_EQ(UCS_OK, uct_ep_put_short(b, &value, 8, target.addr(), rk.get()));
    EXPECT_EQ(0, dcx_ep(a)->dci);
    EXPECT_EQ(1, dcx_ep(b)->dci);
    EXPECT_EQ(dcx_ep(a), iface->tx.dcis[0].ep);
    EXPECT_EQ(dcx_ep(b), iface->tx.dcis[1].ep);
    EXPECT_EQ(0u, iface->tx.pool.num_free);

    ASSERT_TRUE(iface_flushed(both, sender));
    EXPECT_EQ(UCT_DCX_EP_NO_DCI, dcx_ep(a)->dci);
    EXPECT_EQ(UCT_DCX_EP_NO_DCI, dcx_ep(b)->dci);
    EXPECT_EQ(2u, iface->tx.pool.num_free);
    EXPECT_EQ(NULL, iface->tx.dcis[0].ep);
    uct_ep_destroy(b);
    uct_ep_destroy(a);
}

/* dcs: a credit grant takes a DCI without an endpoint; the interface is
 * idle with grants in flight (a flush does not wait for them), and the
 * DCI comes back when the grant completes. */
TEST(uct_dci, dcs_grant_takes_no_holder)
{
    entity e({ { "TX_POLICY", "dcs" }, { "NUM_DCI", "2" } });
    uct_dcx_iface_t *iface                 = dcx_iface(e);
    const uct_dcx_dci_policy_ops_t *policy = iface->tx.dci_policy;
    uint16_t index;

    ASSERT_EQ(UCS_OK, policy->grant_get(iface, &index));
    EXPECT_EQ(0, index);
    EXPECT_EQ(NULL, iface->tx.dcis[index].ep);
    EXPECT_EQ(1u, iface->tx.pool.num_free);
    EXPECT_FALSE(policy->is_idle(iface)) << "taken, not yet a grant";

    policy->grant_posted(iface, &iface->tx.dcis[index]);
    policy->grant_posted(iface, &iface->tx.dcis[index]);
    EXPECT_EQ(1u, iface->tx.pool.num_grants) << "counted once per DCI";
    EXPECT_TRUE(policy->is_idle(iface));

    EXPECT_TRUE(policy->dci_drained(iface, index));
    EXPECT_EQ(0u, iface->tx.pool.num_grants);
    EXPECT_EQ(2u, iface->tx.pool.num_free);
    EXPECT_EQ(0, iface->tx.dcis[index].grant);

    /* A grant that could not be posted gives its DCI straight back. */
    ASSERT_EQ(UCS_OK, policy->grant_get(iface, &index));
    policy->grant_abort(iface, index);
    EXPECT_EQ(2u, iface->tx.pool.num_free);
    EXPECT_TRUE(policy->is_idle(iface));
}

/* dcs_quota: while another endpoint waits for the only DCI, its holder
 * posts until QUOTA requests are outstanding, then yields: it posts
 * nothing more, and the DCI, once drained, goes to the waiting endpoint. */
TEST(uct_dci, dcs_quota_yields_at_quota)
{
    const unsigned quota = 6;
    entity sender({ { "TX_POLICY", "dcs_quota" },
                    { "NUM_DCI", "1" },
                    { "QUOTA", std::to_string(quota) },
                    { "TX_QUEUE_LEN", "64" } });
    entity receiver;
    buffer target(receiver, 64);
    rkey rk(target.packed_rkey());
    uct_dcx_iface_t *iface     = dcx_iface(sender);
    std::vector<entity *> both = { &sender, &receiver };
    uint64_t value             = 1;
    unsigned sent              = 0;

    ASSERT_EQ(quota, iface->tx.quota);
    EXPECT_TRUE(uct_dcx_iface_dci_quota(iface));
    uct_ep_h busy   = sender.connect(receiver);
    uct_ep_h waiter = sender.connect(receiver);

    /* Alone, the holder is not held to its quota. */
    for (unsigned i = 0; i < quota + 2; ++i) {
        ASSERT_EQ(UCS_OK,
                  uct_ep_put_short(busy, &value, 8, target.addr(), rk.get()));
    }
    ASSERT_TRUE(iface_flushed(both, sender));

    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(busy, &value, 8, target.addr(), rk.get()));
    dci_put ctx(waiter, target.addr() + 8, rk.get(), 2);
    ASSERT_EQ(UCS_ERR_NO_RESOURCE,
              uct_ep_put_short(waiter, &value, 8, ctx.addr, ctx.rkey));
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(waiter, &ctx.req, 0));
    EXPECT_EQ(1u, iface->tx.pool.num_waiters);

    /* Nothing is progressed: the holder's requests stay outstanding. */
    while (uct_ep_put_short(busy, &value, 8, target.addr(), rk.get()) ==
           UCS_OK) {
        ASSERT_LT(++sent, 64u);
    }
    EXPECT_EQ(quota, dci_outstanding(iface, 0)) << "yielded elsewhere";
    EXPECT_TRUE(dcx_ep(busy)->flags & UCT_DCX_EP_FLAG_TX_WAIT);
    EXPECT_EQ(UCS_ERR_NO_RESOURCE,
              uct_ep_put_short(busy, &value, 8, target.addr(), rk.get()));

    ASSERT_TRUE(wait_for(both, [&] { return ctx.done; }));
    EXPECT_EQ(0, ctx.dci) << "the waiter got the yielded DCI";
    EXPECT_FALSE(dcx_ep(busy)->flags & UCT_DCX_EP_FLAG_TX_WAIT);
    ASSERT_TRUE(iface_flushed(both, sender));
    uct_ep_destroy(waiter);
    uct_ep_destroy(busy);
}

/* rand: every DCI exists from the start and stays in the pool; endpoints
 * share them without holding one, and an error on a DCI is seen by every
 * endpoint on it (a new generation), while the DCI keeps serving. */
TEST(uct_dci, rand_endpoints_share)
{
    const int num_eps = 8;
    failure_record failures;
    entity sender({ { "TX_POLICY", "rand" }, { "NUM_DCI", "2" } },
                  record_failure, &failures);
    entity receiver;
    buffer target(receiver, 8 * num_eps);
    rkey rk(target.packed_rkey());
    uct_dcx_iface_t *iface     = dcx_iface(sender);
    std::vector<entity *> both = { &sender, &receiver };
    std::vector<uct_ep_h> eps;
    std::vector<int> users(2, 0);
    uint64_t value = 3;

    EXPECT_TRUE(uct_dcx_iface_dci_shared(iface));
    EXPECT_EQ(2u, iface->tx.pool.num_created);
    for (int i = 0; i < num_eps; ++i) {
        eps.push_back(sender.connect(receiver));
        ASSERT_LT(dcx_ep(eps.back())->dci, 2);
        ++users[dcx_ep(eps.back())->dci];
        ASSERT_EQ(UCS_OK, uct_ep_put_short(eps.back(), &value, 8,
                                           target.addr() + 8 * i, rk.get()));
    }
    EXPECT_EQ(2u, iface->tx.pool.num_free) << "no DCI is taken from the pool";
    EXPECT_EQ(NULL, iface->tx.dcis[0].ep);
    EXPECT_EQ(NULL, iface->tx.dcis[1].ep);
    EXPECT_EQ((uint64_t)users[0], iface->tx.dcis[0].posted);
    EXPECT_EQ((uint64_t)users[1], iface->tx.dcis[1].posted);
    EXPECT_FALSE(iface->tx.dci_policy->is_idle(iface));
    ASSERT_TRUE(iface_flushed(both, sender));
    EXPECT_TRUE(iface->tx.dci_policy->is_idle(iface));
    EXPECT_FALSE(iface->tx.dci_policy->dci_drained(iface, 0))
            << "a shared DCI does not go back to the pool";
    EXPECT_EQ(2u, iface->tx.pool.num_free);

    uint16_t shared = (users[0] >= users[1]) ? 0 : 1;
    uint8_t gen     = iface->tx.dcis[shared].generation;
    iface->tx.dci_policy->dci_error(iface, &iface->tx.dcis[shared],
                                    UCS_ERR_ENDPOINT_TIMEOUT);
    EXPECT_EQ((uint8_t)(gen + 1), iface->tx.dcis[shared].generation);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, iface->tx.dcis[shared].last_error);
    for (uct_ep_h ep : eps) {
        ucs_status_t status = uct_ep_put_short(ep, &value, 8, target.addr(),
                                               rk.get());
        if (dcx_ep(ep)->dci == shared) {
            EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, status);
        } else {
            EXPECT_EQ(UCS_OK, status);
        }
    }
    EXPECT_EQ((size_t)users[shared], failures.eps.size());
    ASSERT_TRUE(iface_flushed(both, sender));
    for (uct_ep_h ep : eps) {
        uct_ep_destroy(ep);
    }
}

/* dcs_hybrid: endpoints take pool DCIs as under dcs_quota; one that finds
 * the pool empty goes, instead of waiting, to the next stream of the
 * stream DCI past the pool's, and stays there once the pool has DCIs
 * again. A grant that finds the pool empty goes there too. */
TEST(uct_dci, dcs_hybrid_empty_pool_moves_to_stream)
{
    entity sender({ { "TX_POLICY", "dcs_hybrid" }, { "NUM_DCI", "2" } });
    entity receiver;
    buffer target(receiver, 64);
    rkey rk(target.packed_rkey());
    uct_dcx_iface_t *iface     = dcx_iface(sender);
    std::vector<entity *> both = { &sender, &receiver };
    std::vector<uct_ep_h> eps;
    uint64_t value = 5;
    uint16_t index;

    if (iface->tx.stream_dci == UCT_DCX_NO_STREAM_DCI) {
        GTEST_SKIP() << "no DCI streams (device or rdma-core)";
    }
    EXPECT_EQ(2, iface->tx.stream_dci) << "past the pool's";
    EXPECT_TRUE(iface->tx.dcis[2].shared);
    EXPECT_FALSE(iface->tx.dcis[0].shared);
    EXPECT_FALSE(uct_dcx_iface_dci_shared(iface));
    EXPECT_TRUE(uct_dcx_iface_dci_quota(iface));
    EXPECT_GT(iface->tx.num_streams, 1u);

    for (int i = 0; i < 4; ++i) {
        eps.push_back(sender.connect(receiver));
        ASSERT_EQ(UCS_OK, uct_ep_put_short(eps.back(), &value, 8,
                                           target.addr() + 8 * i, rk.get()));
    }
    EXPECT_EQ(0, dcx_ep(eps[0])->dci);
    EXPECT_EQ(1, dcx_ep(eps[1])->dci);
    EXPECT_EQ(0, dcx_ep(eps[0])->stream) << "a pool DCI has no streams";
    EXPECT_EQ(2, dcx_ep(eps[2])->dci);
    EXPECT_EQ(2, dcx_ep(eps[3])->dci);
    EXPECT_EQ(0, dcx_ep(eps[2])->stream);
    EXPECT_EQ(1, dcx_ep(eps[3])->stream) << "streams in turn";
    EXPECT_EQ(0u, iface->tx.pool.num_waiters) << "nobody waits";
    EXPECT_EQ(2u, iface->tx.dcis[2].posted);
    EXPECT_EQ(NULL, iface->tx.dcis[2].ep) << "shared: no holder";

    /* With the pool empty a grant goes out on the stream DCI, and neither
     * takes nor gives back a pool DCI. */
    ASSERT_EQ(UCS_OK, iface->tx.dci_policy->grant_get(iface, &index));
    EXPECT_EQ(2, index);
    iface->tx.dci_policy->grant_abort(iface, index);
    EXPECT_EQ(0u, iface->tx.pool.num_free);

    EXPECT_FALSE(iface->tx.dci_policy->is_idle(iface));
    ASSERT_TRUE(iface_flushed(both, sender));
    EXPECT_TRUE(iface->tx.dci_policy->is_idle(iface));
    EXPECT_EQ(2u, iface->tx.pool.num_free);
    EXPECT_EQ(UCT_DCX_EP_NO_DCI, dcx_ep(eps[0])->dci);
    EXPECT_EQ(2, dcx_ep(eps[2])->dci) << "stays on the stream DCI";

    /* The pool has DCIs again: a new endpoint takes one. */
    eps.push_back(sender.connect(receiver));
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(eps.back(), &value, 8, target.addr(), rk.get()));
    EXPECT_LT(dcx_ep(eps.back())->dci, 2);
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(eps[3], &value, 8, target.addr(), rk.get()));
    ASSERT_TRUE(iface_flushed(both, sender));
    for (uct_ep_h ep : eps) {
        uct_ep_destroy(ep);
    }
}

/* dcs_hybrid: an error on the stream DCI fails the endpoints on it (a new
 * generation, as under rand), not those holding pool DCIs; it serves the
 * endpoints that come after. */
TEST(uct_dci, dcs_hybrid_stream_dci_error_fails_its_endpoints)
{
    failure_record failures;
    entity sender({ { "TX_POLICY", "dcs_hybrid" }, { "NUM_DCI", "1" } },
                  record_failure, &failures);
    entity receiver;
    buffer target(receiver, 64);
    rkey rk(target.packed_rkey());
    uct_dcx_iface_t *iface     = dcx_iface(sender);
    std::vector<entity *> both = { &sender, &receiver };
    uint64_t value             = 9;

    if (iface->tx.stream_dci == UCT_DCX_NO_STREAM_DCI) {
        GTEST_SKIP() << "no DCI streams (device or rdma-core)";
    }
    uct_ep_h pooled = sender.connect(receiver);
    uct_ep_h on_dci = sender.connect(receiver);
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(pooled, &value, 8, target.addr(), rk.get()));
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(on_dci, &value, 8, target.addr(), rk.get()));
    ASSERT_EQ(iface->tx.stream_dci, dcx_ep(on_dci)->dci);
    ASSERT_TRUE(iface_flushed(both, sender));

    iface->tx.dci_policy->dci_error(iface,
                                    &iface->tx.dcis[iface->tx.stream_dci],
                                    UCS_ERR_ENDPOINT_TIMEOUT);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT,
              uct_ep_put_short(on_dci, &value, 8, target.addr(), rk.get()));
    EXPECT_EQ(UCS_OK,
              uct_ep_put_short(pooled, &value, 8, target.addr(), rk.get()));
    ASSERT_EQ(1u, failures.eps.size());
    EXPECT_EQ(on_dci, failures.eps[0]);

    uct_ep_h later = sender.connect(receiver);
    ASSERT_EQ(UCS_OK,
              uct_ep_put_short(later, &value, 8, target.addr(), rk.get()));
    EXPECT_EQ(iface->tx.stream_dci, dcx_ep(later)->dci);
    ASSERT_TRUE(iface_flushed(both, sender));
    uct_ep_destroy(later);
    uct_ep_destroy(on_dci);
    uct_ep_destroy(pooled);
}

/* dcs_hybrid without DCI streams (NUM_DCI_CHANNELS 1): no stream DCI, an
 * endpoint that finds the pool empty waits as under dcs_quota, and peer
 * failure handling is offered as there. */
TEST(uct_dci, dcs_hybrid_without_streams_waits)
{
    entity sender({ { "TX_POLICY", "dcs_hybrid" },
                    { "NUM_DCI", "1" },
                    { "NUM_DCI_CHANNELS", "1" } });
    entity receiver;
    buffer target(receiver, 64);
    rkey rk(target.packed_rkey());
    uct_dcx_iface_t *iface     = dcx_iface(sender);
    std::vector<entity *> both = { &sender, &receiver };
    uint64_t value             = 4;

    EXPECT_EQ(UCT_DCX_NO_STREAM_DCI, iface->tx.stream_dci);
    EXPECT_EQ(1u, iface->tx.num_streams);
    EXPECT_TRUE(sender.attr().cap.flags &
                UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE);
    uct_ep_h a = sender.connect(receiver);
    uct_ep_h b = sender.connect(receiver);
    ASSERT_EQ(UCS_OK, uct_ep_put_short(a, &value, 8, target.addr(), rk.get()));
    EXPECT_EQ(UCS_ERR_NO_RESOURCE,
              uct_ep_put_short(b, &value, 8, target.addr(), rk.get()));
    EXPECT_EQ(UCT_DCX_EP_NO_DCI, dcx_ep(b)->dci);
    ASSERT_TRUE(iface_flushed(both, sender));
    uct_ep_destroy(b);
    uct_ep_destroy(a);
}
