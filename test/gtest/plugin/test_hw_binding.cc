/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The hardware binding of the device seam: loads rdma-core at run time,
 * with and without libmlx5, and lists DC-capable devices (none here).
 */
#include "test_util.h"

#include <dcx_device.h>
#include <dcx_seam.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <errno.h>

namespace {

bool host_has_rdma_devices()
{
    DIR *dir   = opendir("/sys/class/infiniband");
    bool found = false;
    if (dir == NULL) {
        return false;
    }
    for (struct dirent *e = readdir(dir); e != NULL; e = readdir(dir)) {
        found |= (e->d_name[0] != '.');
    }
    closedir(dir);
    return found;
}

void expect_all_slots_filled(const uct_dcx_verbs_ops_t &ops)
{
    void *const *slot = reinterpret_cast<void *const *>(&ops);
    size_t n          = sizeof(ops) / sizeof(void *);
    for (size_t i = 0; i < n; ++i) {
        EXPECT_NE(nullptr, slot[i]) << "slot " << i;
    }
}

} // namespace

TEST(hw_binding, loads_rdma_core)
{
    uct_dcx_binding_t binding;

    ASSERT_EQ(UCS_OK, uct_dcx_hw_binding_open(UCT_DCX_HW_VERBS_LIB,
                                              UCT_DCX_HW_MLX5_LIB, &binding));
    EXPECT_STREQ("rdma-core", binding.name);
    EXPECT_TRUE(binding.dv);
    expect_all_slots_filled(binding.ops);
    EXPECT_STREQ("remote access error",
                 binding.ops.wc_status_str(IBV_WC_REM_ACCESS_ERR));
    uct_dcx_binding_close(&binding);
    EXPECT_EQ(nullptr, binding.verbs_handle);
}

TEST(hw_binding, lists_no_dc_device_here)
{
    uct_dcx_device_t devices[4];
    uct_dcx_binding_t binding;

    if (host_has_rdma_devices()) {
        GTEST_SKIP() << "this host has RDMA devices";
    }

    ASSERT_EQ(UCS_OK, uct_dcx_hw_binding_open(UCT_DCX_HW_VERBS_LIB,
                                              UCT_DCX_HW_MLX5_LIB, &binding));
    EXPECT_EQ(0u, uct_dcx_devices_scan(&binding, devices, 4));
    uct_dcx_binding_close(&binding);
}

TEST(hw_binding, without_libmlx5)
{
    uct_dcx_device_t devices[4];
    uct_dcx_binding_t binding;

    ASSERT_EQ(UCS_OK, uct_dcx_hw_binding_open(UCT_DCX_HW_VERBS_LIB,
                                              "libmlx5-absent.so.1", &binding));
    EXPECT_FALSE(binding.dv);
    EXPECT_EQ(nullptr, binding.mlx5_handle);
    expect_all_slots_filled(binding.ops);

    /* The mlx5dv slots answer as rdma-core does for a missing provider. */
    EXPECT_FALSE(binding.ops.mlx5dv_is_supported(nullptr));
    errno = 0;
    EXPECT_EQ(nullptr, binding.ops.mlx5dv_create_qp(nullptr, nullptr, nullptr));
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    errno = 0;
    EXPECT_EQ(nullptr, binding.ops.mlx5dv_open_device(nullptr, nullptr));
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    EXPECT_ERRNO_EQ(EOPNOTSUPP,
                    binding.ops.mlx5dv_query_device(nullptr, nullptr));

    /* No DC device without mlx5, whatever the host has. */
    EXPECT_EQ(0u, uct_dcx_devices_scan(&binding, devices, 4));
    uct_dcx_binding_close(&binding);
}

TEST(hw_binding, without_libibverbs)
{
    uct_dcx_binding_t binding;

    EXPECT_EQ(UCS_ERR_NO_DEVICE,
              uct_dcx_hw_binding_open("libibverbs-absent.so.1",
                                      UCT_DCX_HW_MLX5_LIB, &binding));
    EXPECT_EQ(nullptr, binding.verbs_handle);
    EXPECT_FALSE(binding.dv);
}

TEST(hw_binding, library_without_verbs_symbols)
{
    uct_dcx_binding_t binding;

    /* A loadable library that is not libibverbs: refused, not a crash. */
    EXPECT_EQ(UCS_ERR_NO_DEVICE,
              uct_dcx_hw_binding_open("libm.so.6", UCT_DCX_HW_MLX5_LIB,
                                      &binding));
    EXPECT_EQ(nullptr, binding.verbs_handle);
}

/* End to end: the same settings through the plugin's UCX_DCX_ variables. */
TEST(hw_binding, ucx_info_without_rdma_core)
{
    int status;
    std::string out = dcx_test::run(
            "UCX_LOG_LEVEL=debug UCX_DCX_VERBS_LIB=libibverbs-absent.so.1 "
            "LD_PRELOAD=" +
                    dcx_test::plugin_path() + " ucx_info -d",
            &status);

    EXPECT_EQ(0, status) << out;
    EXPECT_NE(std::string::npos, out.find("no hardware devices: cannot load "
                                          "libibverbs-absent.so.1"))
            << out;
    EXPECT_EQ(1u, dcx_test::count(out, "Component: dcx")) << out;
}

TEST(hw_binding, ucx_info_without_libmlx5)
{
    int status;
    std::string out = dcx_test::run(
            "UCX_LOG_LEVEL=debug UCX_DCX_MLX5_LIB=libmlx5-absent.so.1 "
            "LD_PRELOAD=" +
                    dcx_test::plugin_path() + " ucx_info -d",
            &status);

    EXPECT_EQ(0, status) << out;
    EXPECT_NE(std::string::npos, out.find("cannot load libmlx5-absent.so.1"))
            << out;
    EXPECT_NE(std::string::npos, out.find("DC needs mlx5")) << out;
    EXPECT_EQ(1u, dcx_test::count(out, "Component: dcx")) << out;
}

TEST(emu_binding, missing_library_is_an_error_not_a_crash)
{
    uct_dcx_binding_t binding;

    EXPECT_EQ(UCS_ERR_NO_DEVICE,
              uct_dcx_emu_binding_open("libdcxemu-absent.so.0", &binding));
    EXPECT_EQ(nullptr, binding.verbs_handle);
    /* A library that is not a device model is refused as well. */
    EXPECT_EQ(UCS_ERR_NO_DEVICE,
              uct_dcx_emu_binding_open("libm.so.6", &binding));
    EXPECT_EQ(nullptr, binding.verbs_handle);
}

TEST(emu_binding, ucx_info_with_missing_model)
{
    int status;
    std::string out =
            dcx_test::run("UCX_DCX_EMU=y UCX_DCX_EMU_LIB=libdcxemu-absent.so.0 "
                          "LD_PRELOAD=" +
                                  dcx_test::plugin_path() + " ucx_info -d",
                          &status);

    EXPECT_EQ(0, status) << out;
    EXPECT_NE(std::string::npos, out.find("cannot load the software DC device "
                                          "libdcxemu-absent.so.0"))
            << out;
    EXPECT_EQ(1u, dcx_test::count(out, "Component: dcx")) << out;
}
