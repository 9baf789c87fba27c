/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The DCI pool object alone (src/uct/ib/dcx/dcx_dci_pool.h), without an
 * interface or a device: its arguments, the order it gives DCIs in, its
 * growth and where it stops, waiters and grants, and its invariants under
 * a long random sequence of calls checked against a plain model.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

extern "C" {
#include <dcx_dci_pool.h>
}

namespace {

class dci_pool : public ::testing::Test {
protected:
    void TearDown() override
    {
        uct_dcx_dci_pool_cleanup(&m_pool);
    }

    void init(unsigned size, unsigned num_created)
    {
        ASSERT_EQ(UCS_OK, uct_dcx_dci_pool_init(&m_pool, size, num_created));
    }

    /* Take the top, creating it first when the pool says it is missing,
     * as the interface does. */
    uint16_t take()
    {
        if (uct_dcx_dci_pool_top_missing(&m_pool)) {
            uct_dcx_dci_pool_created(&m_pool);
        }
        return uct_dcx_dci_pool_take(&m_pool);
    }

    uct_dcx_dci_pool_t m_pool = {};
};

TEST_F(dci_pool, bad_arguments)
{
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_dcx_dci_pool_init(&m_pool, 0, 0));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_dcx_dci_pool_init(&m_pool, 4, 5));
    /* All ones is an endpoint's "no DCI": never an index of the pool. */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_dcx_dci_pool_init(&m_pool, UINT16_MAX + 1u, 0));
    EXPECT_EQ(UCS_OK, uct_dcx_dci_pool_init(&m_pool, UINT16_MAX, 0));
    uct_dcx_dci_pool_cleanup(&m_pool);
    EXPECT_EQ(nullptr, m_pool.stack);
}

TEST_F(dci_pool, lowest_index_first_then_lifo)
{
    init(4, 1);
    EXPECT_TRUE(uct_dcx_dci_pool_is_idle(&m_pool));
    EXPECT_FALSE(uct_dcx_dci_pool_top_missing(&m_pool)) << "DCI 0 exists";
    EXPECT_EQ(0, uct_dcx_dci_pool_take(&m_pool));
    EXPECT_FALSE(uct_dcx_dci_pool_is_idle(&m_pool));

    /* The next ones do not exist yet: each comes up in index order. */
    EXPECT_TRUE(uct_dcx_dci_pool_top_missing(&m_pool));
    EXPECT_EQ(1, take());
    EXPECT_EQ(2, take());
    EXPECT_EQ(3u, m_pool.num_created);

    /* Given back, the last one is taken first; and the DCIs that exist
     * are used before another is created. */
    uct_dcx_dci_pool_give_back(&m_pool, 0);
    uct_dcx_dci_pool_give_back(&m_pool, 2);
    EXPECT_FALSE(uct_dcx_dci_pool_top_missing(&m_pool));
    EXPECT_EQ(2, uct_dcx_dci_pool_take(&m_pool));
    EXPECT_EQ(0, uct_dcx_dci_pool_take(&m_pool));
    EXPECT_EQ(3, take());
    EXPECT_EQ(4u, m_pool.num_created);
    EXPECT_FALSE(uct_dcx_dci_pool_has_free(&m_pool));
}

TEST_F(dci_pool, stops_growing_at_what_exists)
{
    init(4, 1);
    EXPECT_EQ(0, uct_dcx_dci_pool_take(&m_pool));
    EXPECT_EQ(1, take());
    ASSERT_TRUE(uct_dcx_dci_pool_top_missing(&m_pool));

    /* DCI 2 cannot be created: the pool is the two it has, both taken. */
    uct_dcx_dci_pool_stop_growing(&m_pool);
    EXPECT_EQ(2u, m_pool.size);
    EXPECT_FALSE(uct_dcx_dci_pool_has_free(&m_pool));

    uct_dcx_dci_pool_give_back(&m_pool, 1);
    EXPECT_TRUE(uct_dcx_dci_pool_has_free(&m_pool));
    EXPECT_FALSE(uct_dcx_dci_pool_top_missing(&m_pool));
    EXPECT_FALSE(uct_dcx_dci_pool_is_idle(&m_pool));
    uct_dcx_dci_pool_give_back(&m_pool, 0);
    EXPECT_TRUE(uct_dcx_dci_pool_is_idle(&m_pool));
    EXPECT_EQ(0, uct_dcx_dci_pool_take(&m_pool));
}

TEST_F(dci_pool, waiters)
{
    init(2, 2);
    EXPECT_FALSE(uct_dcx_dci_pool_has_waiters(&m_pool));
    EXPECT_TRUE(uct_dcx_dci_pool_waiter_add(&m_pool)) << "the first";
    EXPECT_FALSE(uct_dcx_dci_pool_waiter_add(&m_pool));
    EXPECT_TRUE(uct_dcx_dci_pool_has_waiters(&m_pool));
    uct_dcx_dci_pool_waiter_remove(&m_pool);
    EXPECT_TRUE(uct_dcx_dci_pool_has_waiters(&m_pool));
    uct_dcx_dci_pool_waiter_remove(&m_pool);
    EXPECT_FALSE(uct_dcx_dci_pool_has_waiters(&m_pool));
    EXPECT_TRUE(uct_dcx_dci_pool_waiter_add(&m_pool)) << "first again";
    uct_dcx_dci_pool_waiter_remove(&m_pool);
}

TEST_F(dci_pool, grants_count_as_idle)
{
    init(2, 2);
    uint16_t grant = uct_dcx_dci_pool_take(&m_pool);
    EXPECT_FALSE(uct_dcx_dci_pool_is_idle(&m_pool));
    uct_dcx_dci_pool_grant_add(&m_pool);
    EXPECT_TRUE(uct_dcx_dci_pool_is_idle(&m_pool))
            << "a DCI out for a grant does not hold a flush";

    uint16_t held = uct_dcx_dci_pool_take(&m_pool);
    EXPECT_FALSE(uct_dcx_dci_pool_is_idle(&m_pool));
    uct_dcx_dci_pool_give_back(&m_pool, held);
    uct_dcx_dci_pool_grant_remove(&m_pool);
    EXPECT_FALSE(uct_dcx_dci_pool_is_idle(&m_pool));
    uct_dcx_dci_pool_give_back(&m_pool, grant);
    EXPECT_TRUE(uct_dcx_dci_pool_is_idle(&m_pool));
}

/* A long random sequence of takes (creating as needed), give-backs and a
 * growth stop, against a model: a LIFO of idle DCIs with the missing ones
 * below, in index order. */
TEST_F(dci_pool, random_against_model)
{
    const unsigned size = 16;
    std::mt19937 rng(12345);
    std::vector<uint16_t> model; /* idle, top last */
    std::vector<uint16_t> taken;
    unsigned created = 3, model_size = size;
    bool stopped = false; /* the pool stops growing at 8 */

    init(size, created);
    for (unsigned i = 0; i < size; ++i) {
        model.push_back(size - 1 - i);
    }

    for (unsigned step = 0; step < 20000; ++step) {
        bool do_take = taken.empty() || (!model.empty() && (rng() % 2));

        if (do_take) {
            ASSERT_TRUE(uct_dcx_dci_pool_has_free(&m_pool));
            uint16_t expected = model.back();
            bool missing      = expected >= created;
            ASSERT_EQ(missing, !!uct_dcx_dci_pool_top_missing(&m_pool));
            if (missing && (created == size / 2)) {
                /* The device has no QP left for the ninth. */
                uct_dcx_dci_pool_stop_growing(&m_pool);
                stopped    = true;
                model_size = created;
                model.clear();
                ASSERT_FALSE(uct_dcx_dci_pool_has_free(&m_pool));
                continue;
            }
            if (missing) {
                ASSERT_EQ(created, expected) << "created in index order";
                uct_dcx_dci_pool_created(&m_pool);
                ++created;
            }
            ASSERT_EQ(expected, uct_dcx_dci_pool_take(&m_pool));
            model.pop_back();
            taken.push_back(expected);
        } else {
            size_t k      = rng() % taken.size();
            uint16_t back = taken[k];
            taken.erase(taken.begin() + k);
            uct_dcx_dci_pool_give_back(&m_pool, back);
            model.push_back(back);
        }

        ASSERT_EQ(model.size(), m_pool.num_free);
        ASSERT_EQ(model_size, m_pool.size);
        ASSERT_EQ(created, m_pool.num_created);
        ASSERT_EQ(model.size() == model_size,
                  !!uct_dcx_dci_pool_is_idle(&m_pool));
        std::set<uint16_t> all(taken.begin(), taken.end());
        for (unsigned j = 0; j < m_pool.num_free; ++j) {
            ASSERT_EQ(model[j], m_pool.stack[j]);
            ASSERT_TRUE(all.insert(m_pool.stack[j]).second) << "each once";
        }
        ASSERT_EQ(model_size, all.size()) << "every DCI idle or taken";
    }
    EXPECT_TRUE(stopped) << "the sequence reached the growth stop";
}

} // namespace
