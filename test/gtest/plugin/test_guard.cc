/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The version guard: unit checks of the fingerprint comparison, and end to
 * end: ucx_info with a preloaded shim that makes the running UCX differ.
 */
#include "test_util.h"

#include <dcx_guard.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

namespace {

uct_dcx_abi_t built_abi()
{
    uct_dcx_abi_t abi;
    uct_dcx_abi_built(&abi);
    return abi;
}

} // namespace

TEST(guard, built_fingerprint_matches_installed_ucx)
{
    uct_dcx_abi_t built = built_abi(), running;
    char reason[512]    = "";

    uct_dcx_abi_running(&running);
    EXPECT_EQ(built.base_iface_size, running.base_iface_size);
    EXPECT_EQ(built.base_ep_size, running.base_ep_size);
    EXPECT_TRUE(uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason)))
            << reason;
    EXPECT_EQ(std::string(DCX_TEST_UCX_VERSION),
              std::to_string(built.major) + "." + std::to_string(built.minor) +
                      "." + std::to_string(built.release));
}

TEST(guard, version_unknown_without_libucp)
{
    uct_dcx_abi_t running;

    /* This test binary does not link libucp. */
    ASSERT_EQ(nullptr, dlsym(RTLD_DEFAULT, "ucp_get_version"));
    uct_dcx_abi_running(&running);
    EXPECT_FALSE(running.version_known);
}

TEST(guard, layout_mismatch_refused_with_both_versions)
{
    uct_dcx_abi_t built = built_abi(), running = built_abi();
    char reason[512] = "";

    running.base_iface_size += 8;
    running.minor   = 16;
    running.release = 0;
    ASSERT_FALSE(
            uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason)));
    std::string r(reason);
    EXPECT_NE(std::string::npos, r.find("built for UCX " DCX_TEST_UCX_VERSION))
            << r;
    EXPECT_NE(std::string::npos, r.find("runs UCX 1.16.0")) << r;
    EXPECT_NE(std::string::npos,
              r.find(std::to_string(running.base_iface_size) + " B"))
            << r;
}

TEST(guard, ep_layout_mismatch_refused)
{
    uct_dcx_abi_t built = built_abi(), running = built_abi();
    char reason[512] = "";

    running.base_ep_size  = 16;
    running.version_known = 0;
    ASSERT_FALSE(
            uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason)));
    EXPECT_NE(std::string::npos,
              std::string(reason).find("an unknown UCX version"))
            << reason;
}

TEST(guard, version_mismatch_with_same_layout_refused)
{
    uct_dcx_abi_t built = built_abi(), running = built_abi();
    char reason[512] = "";

    running.release += 1;
    EXPECT_FALSE(
            uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason)));
    running               = built_abi();
    running.version_known = 0;
    EXPECT_TRUE(
            uct_dcx_abi_compatible(&built, &running, reason, sizeof(reason)));
}

/* End to end: a shim makes libuct look like another layout. */
TEST(guard, ucx_info_refuses_other_layout)
{
    int status;
    std::string out = dcx_test::run(
            "LD_PRELOAD=" + dcx_test::test_lib_path("libdcx_shim_class.so") +
                    ":" + dcx_test::plugin_path() + " ucx_info -d",
            &status);

    EXPECT_EQ(0, status) << out;
    EXPECT_EQ(0u, dcx_test::count(out, "Component: dcx")) << out;
    EXPECT_EQ(1u, dcx_test::count(out, "dcx is not registered")) << out;
    EXPECT_NE(std::string::npos,
              out.find("dcx was built for UCX " DCX_TEST_UCX_VERSION
                       " (uct_base_iface_t 1280 B"))
            << out;
    EXPECT_NE(std::string::npos, out.find("(uct_base_iface_t 1344 B")) << out;
    /* The rest of UCX keeps working. */
    EXPECT_NE(std::string::npos, out.find("Component: self")) << out;
}

/* End to end: libucp reports another version. */
TEST(guard, ucx_info_refuses_other_version)
{
    int status;
    std::string out = dcx_test::run(
            "LD_PRELOAD=" + dcx_test::test_lib_path("libdcx_shim_version.so") +
                    ":" + dcx_test::plugin_path() + " ucx_info -d",
            &status);

    EXPECT_EQ(0, status) << out;
    EXPECT_EQ(0u, dcx_test::count(out, "Component: dcx")) << out;
    EXPECT_NE(std::string::npos, out.find("runs UCX 1.99.0")) << out;
    EXPECT_NE(std::string::npos,
              out.find("built for UCX " DCX_TEST_UCX_VERSION))
            << out;
    EXPECT_NE(std::string::npos, out.find("Component: self")) << out;
}
