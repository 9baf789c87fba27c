/* Out-of-order data placement (UCX_DCX_DDP): the setting against what the
 * device offers, the flag reaching the device on both sides, and a fence
 * that waits for everything before it while the device keeps no order. */
#include "uct_test.h"

#include "dcxemu.h"

#include <mutex>
#include <stdlib.h>
#include <string.h>

using namespace dcx_test;

namespace {

/* Whether the run's device offers out-of-order data placement on DC: the
 * API face unless DCXEMU_OOO_DP=0; the mlx5 face only under a libmlx5 of
 * rdma-core 55 or later (the rdma-core suite's wrappers name the release in
 * DCX_RDMA_CORE; without it the host's, rdma-core 44). */
bool ddp_offered()
{
    const char *ooo = getenv("DCXEMU_OOO_DP");
    const char *rc  = getenv("DCX_RDMA_CORE");

    if ((ooo != nullptr) && (strcmp(ooo, "0") == 0)) {
        return false;
    }
    if (getenv("DCX_TEST_DEVICE") == nullptr) {
        return true;
    }
    return (rc != nullptr) && (atoi(rc) >= 55);
}

TEST(uct_ddp, setting_against_the_device)
{
    EXPECT_EQ(UCS_OK, iface_open_status({ { "DDP", "no" } }));
    EXPECT_EQ(UCS_OK, iface_open_status({ { "DDP", "try" } }));
    EXPECT_EQ(ddp_offered() ? UCS_OK : UCS_ERR_UNSUPPORTED,
              iface_open_status({ { "DDP", "yes" } }));
}

/* The chunks the device model placed out of order, seen by its test hook
 * (the API face only: the hook is the model's). */
struct chunk_count {
    std::mutex lock;
    unsigned chunks = 0;
};
chunk_count g_chunks;

void count_chunk(enum dcxemu_test_event ev, uint32_t, uint64_t, void *)
{
    if (ev == DCXEMU_TEST_OOO_CHUNK) {
        std::lock_guard<std::mutex> g(g_chunks.lock);
        g_chunks.chunks++;
    }
}

class uct_ddp_pair : public testing::TestWithParam<std::string>,
                     protected entity_pair {
protected:
    typedef void (*hook_fn_t)(dcxemu_test_hook_fn, void *);

    void SetUp() override
    {
        ASSERT_NO_FATAL_FAILURE(open_pair({ { "DDP", GetParam() } },
                                          { { "DDP", GetParam() } }));
        m_hook = emu_sym<hook_fn_t>("dcxemu_test_hook");
        ASSERT_NE(nullptr, m_hook);
        std::lock_guard<std::mutex> g(g_chunks.lock);
        g_chunks.chunks = 0;
    }

    void TearDown() override
    {
        if (m_hook != nullptr) {
            m_hook(nullptr, nullptr);
        }
    }

    unsigned chunks()
    {
        std::lock_guard<std::mutex> g(g_chunks.lock);
        return g_chunks.chunks;
    }

    bool ddp() const
    {
        return GetParam() != "no";
    }

    hook_fn_t m_hook = nullptr;
};

/* A put between two interfaces with DDP is placed out of order by the
 * device (both the DCI and the DCT have the flag); without, in order. */
TEST_P(uct_ddp_pair, put_placed_as_configured)
{
    const size_t length = 8192;
    buffer source(*m_sender, length, 'p');
    buffer target(*m_receiver, length);
    rkey rk(target.packed_rkey());
    uct_iov_t iov = { source.ptr(), length, source.memh(), 0, 1 };
    test_comp comp;

    m_hook(count_chunk, nullptr);
    ucs_status_t status = retry(all(), [&] {
        return uct_ep_put_zcopy(m_ep, &iov, 1, target.addr(), rk.get(),
                                &comp.uct);
    });
    ASSERT_EQ(UCS_OK, wait_comp(all(), status, comp));
    EXPECT_EQ(0, memcmp(source.ptr(), target.ptr(), length));
    if (ddp()) {
        EXPECT_EQ(16u, chunks());
    } else {
        EXPECT_EQ(0u, chunks());
    }
}

/* A fence between two puts: with DDP the second waits (NO_RESOURCE) until
 * the first has completed, so its data cannot land before the first's;
 * without DDP the device keeps the order and the second goes at once. */
TEST_P(uct_ddp_pair, fence_waits_for_earlier_puts)
{
    const size_t length = 65536;
    buffer source(*m_sender, length, 'a');
    buffer target(*m_receiver, length + 8);
    rkey rk(target.packed_rkey());
    uct_iov_t iov = { source.ptr(), length, source.memh(), 0, 1 };
    uint64_t flag = 1;
    test_comp comp;
    ucs_status_t first, second;

    first = uct_ep_put_zcopy(m_ep, &iov, 1, target.addr(), rk.get(), &comp.uct);
    ASSERT_EQ(UCS_INPROGRESS, first);
    ASSERT_EQ(UCS_OK, uct_ep_fence(m_ep, 0));
    second = uct_ep_put_short(m_ep, &flag, sizeof(flag), target.addr() + length,
                              rk.get());
    if (!ddp()) {
        EXPECT_EQ(UCS_OK, second);
    } else {
        EXPECT_EQ(UCS_ERR_NO_RESOURCE, second);
        EXPECT_EQ(0, comp.done) << "the first put has not completed yet";
        /* retried until it goes: only once the first put completed */
        second = retry(all(), [&] {
            ucs_status_t s = uct_ep_put_short(m_ep, &flag, sizeof(flag),
                                              target.addr() + length, rk.get());
            if (s == UCS_OK) {
                EXPECT_EQ(1, comp.done) << "went before the first completed";
            }
            return s;
        });
        EXPECT_EQ(UCS_OK, second);
    }
    ASSERT_EQ(UCS_OK, wait_comp(all(), first, comp));
    ASSERT_EQ(UCS_OK, flush_ep(all(), m_ep));
    EXPECT_EQ(0, memcmp(source.ptr(), target.ptr(), length));
    EXPECT_EQ(0, memcmp(&flag, target.ptr() + length, sizeof(flag)));
}

INSTANTIATE_TEST_SUITE_P(ddp, uct_ddp_pair,
                         testing::Values("no", "yes", "try"));

} // namespace
