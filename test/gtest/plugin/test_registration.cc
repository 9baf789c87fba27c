/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Registration of the dcx component: exactly once per process, also with two
 * copies of the plugin loaded, and its configuration variables.
 */
#include "test_util.h"

#include <gtest/gtest.h>
#include <uct/api/uct.h>

#include <dlfcn.h>
#include <fstream>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

/* Number of registered components named "dcx" in this process. */
unsigned count_dcx_components(uct_component_h *dcx_p = nullptr)
{
    uct_component_h *components;
    unsigned num, found = 0;

    if (uct_query_components(&components, &num) != UCS_OK) {
        return ~0u;
    }
    for (unsigned i = 0; i < num; ++i) {
        uct_component_attr_t attr;
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            (std::string(attr.name) == "dcx")) {
            ++found;
            if (dcx_p != nullptr) {
                *dcx_p = components[i];
            }
        }
    }
    uct_release_component_list(components);
    return found;
}

/* Load the build's plugin into this process (once; it is never unloaded). */
uct_component_h load_plugin()
{
    static void *handle = dlopen(dcx_test::plugin_path().c_str(),
                                 RTLD_NOW | RTLD_LOCAL);
    uct_component_h dcx = nullptr;

    EXPECT_NE(nullptr, handle) << dlerror();
    EXPECT_EQ(1u, count_dcx_components(&dcx));
    return dcx;
}

/* A second copy of the plugin: the plugin and its transport library, which
 * it opens from its own directory, in a directory of their own. */
struct plugin_copy {
    std::string dir, plugin;

    plugin_copy()
        : dir(P_tmpdir "/dcx-plugin-copy-" + std::to_string(getpid())),
          plugin(dir + "/libuct_dcx.so")
    {
        std::string src_dir = dcx_test::plugin_path();

        src_dir.resize(src_dir.rfind('/'));
        mkdir(dir.c_str(), 0700);
        copy(dcx_test::plugin_path(), plugin);
        copy(src_dir + "/libdcx_transport.so.0",
             dir + "/libdcx_transport.so.0");
    }

    ~plugin_copy()
    {
        unlink(plugin.c_str());
        unlink((dir + "/libdcx_transport.so.0").c_str());
        rmdir(dir.c_str());
    }

    static void copy(const std::string &from, const std::string &to)
    {
        std::ifstream src(from, std::ios::binary);
        std::ofstream dst(to, std::ios::binary);
        ASSERT_TRUE(src.good()) << from;
        dst << src.rdbuf();
    }
};

} // namespace

TEST(registration, absent_before_load)
{
    /* The test binary links the internals, which do not register. */
    if (dlopen(dcx_test::plugin_path().c_str(), RTLD_NOLOAD | RTLD_LAZY) !=
        nullptr) {
        GTEST_SKIP() << "plugin already loaded by an earlier test";
    }
    EXPECT_EQ(0u, count_dcx_components());
}

TEST(registration, once_after_load)
{
    ASSERT_NE(nullptr, load_plugin());
    EXPECT_EQ(1u, count_dcx_components());
    /* Loading the same file again is a no-op for the dynamic linker. */
    void *again = dlopen(dcx_test::plugin_path().c_str(), RTLD_NOW);
    ASSERT_NE(nullptr, again);
    EXPECT_EQ(1u, count_dcx_components());
}

TEST(registration, second_copy_registers_nothing)
{
    plugin_copy copy;

    ASSERT_NE(nullptr, load_plugin());
    void *handle = dlopen(copy.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(nullptr, handle) << dlerror();
    EXPECT_EQ(1u, count_dcx_components());
}

TEST(registration, second_copy_warns_in_ucx_info)
{
    plugin_copy copy;
    int status;
    std::string out = dcx_test::run("LD_PRELOAD=" + dcx_test::plugin_path() +
                                            ":" + copy.plugin + " ucx_info -d",
                                    &status);

    EXPECT_EQ(0, status) << out;
    EXPECT_EQ(1u, dcx_test::count(out, "Component: dcx")) << out;
    EXPECT_EQ(1u, dcx_test::count(out, "registers nothing")) << out;
    /* Whichever registered first, the warning names both copies. */
    EXPECT_NE(std::string::npos, out.find(copy.dir + "/")) << out;
}

TEST(registration, component_without_devices)
{
    uct_component_h dcx = load_plugin();
    uct_md_resource_desc_t *resources;
    uct_tl_resource_desc_t *tl_resources;
    unsigned num_resources, num_tl_resources;
    uct_component_attr_t attr;
    uct_md_config_t *md_config;
    uct_md_attr_t md_attr;
    uct_md_h md;

    ASSERT_NE(nullptr, dcx);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    ASSERT_EQ(UCS_OK, uct_component_query(dcx, &attr));
    if (attr.md_resource_count != 1) {
        GTEST_SKIP() << "this host has DC devices";
    }

    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    resources = attr.md_resources = new uct_md_resource_desc_t[1];
    ASSERT_EQ(UCS_OK, uct_component_query(dcx, &attr));
    EXPECT_STREQ("dcx", resources[0].md_name);
    num_resources = 1;

    ASSERT_EQ(UCS_OK, uct_md_config_read(dcx, NULL, NULL, &md_config));
    ASSERT_EQ(UCS_OK, uct_md_open(dcx, "dcx", md_config, &md));
    uct_config_release(md_config);

    ASSERT_EQ(UCS_OK,
              uct_md_query_tl_resources(md, &tl_resources, &num_tl_resources));
    EXPECT_EQ(0u, num_tl_resources);
    uct_release_tl_resource_list(tl_resources);

    ASSERT_EQ(UCS_OK, uct_md_query(md, &md_attr));
    EXPECT_EQ(0u, md_attr.cap.flags & (UCT_MD_FLAG_REG | UCT_MD_FLAG_ALLOC));
    uct_md_close(md);

    /* A device name that does not exist is refused, not crashed on. */
    ASSERT_EQ(UCS_OK, uct_md_config_read(dcx, NULL, NULL, &md_config));
    EXPECT_EQ(UCS_ERR_NO_DEVICE, uct_md_open(dcx, "mlx5_99", md_config, &md));
    uct_config_release(md_config);
    (void)num_resources;
    delete[] resources;
}

class config : public testing::Test {
protected:
    void SetUp() override
    {
        m_dcx = load_plugin();
        ASSERT_NE(nullptr, m_dcx);
        uct_md_config_t *md_config;
        ASSERT_EQ(UCS_OK, uct_md_config_read(m_dcx, NULL, NULL, &md_config));
        ucs_status_t status = uct_md_open(m_dcx, "dcx", md_config, &m_md);
        uct_config_release(md_config);
        if (status != UCS_OK) {
            GTEST_SKIP() << "this host has DC devices";
        }
    }

    void TearDown() override
    {
        if (m_md != nullptr) {
            uct_md_close(m_md);
        }
    }

    std::string iface_value(const char *name, ucs_status_t *status_p)
    {
        uct_iface_config_t *config;
        char buf[256] = "";

        *status_p = uct_md_iface_config_read(m_md, "dcx", NULL, NULL, &config);
        if (*status_p != UCS_OK) {
            return "";
        }
        EXPECT_EQ(UCS_OK, uct_config_get(config, name, buf, sizeof(buf)));
        uct_config_release(config);
        return buf;
    }

    uct_component_h m_dcx = nullptr;
    uct_md_h m_md         = nullptr;
};

TEST_F(config, iface_defaults)
{
    ucs_status_t status;

    EXPECT_EQ("32", iface_value("NUM_DCI", &status));
    ASSERT_EQ(UCS_OK, status);
    EXPECT_EQ("256", iface_value("TX_QUEUE_LEN", &status));
    EXPECT_EQ("4095", iface_value("RX_QUEUE_LEN", &status));
}

TEST_F(config, iface_from_environment)
{
    ucs_status_t status;

    setenv("UCX_DCX_NUM_DCI", "7", 1);
    setenv("UCX_DCX_SEG_SIZE", "4k", 1);
    EXPECT_EQ("7", iface_value("NUM_DCI", &status));
    EXPECT_EQ(UCS_OK, status);
    EXPECT_EQ("4K", iface_value("SEG_SIZE", &status));
    unsetenv("UCX_DCX_NUM_DCI");
    unsetenv("UCX_DCX_SEG_SIZE");
}

TEST_F(config, iface_invalid_value_rejected)
{
    ucs_status_t status;

    setenv("UCX_DCX_NUM_DCI", "many", 1);
    iface_value("NUM_DCI", &status);
    unsetenv("UCX_DCX_NUM_DCI");
    EXPECT_NE(UCS_OK, status);
}

TEST_F(config, md_devx)
{
    uct_md_config_t *md_config;
    char buf[64];

    setenv("UCX_DCX_DEVX", "no", 1);
    ASSERT_EQ(UCS_OK, uct_md_config_read(m_dcx, NULL, NULL, &md_config));
    EXPECT_EQ(UCS_OK, uct_config_get(md_config, "DEVX", buf, sizeof(buf)));
    EXPECT_STREQ("n", buf);
    uct_config_release(md_config);

    setenv("UCX_DCX_DEVX", "perhaps", 1);
    EXPECT_NE(UCS_OK, uct_md_config_read(m_dcx, NULL, NULL, &md_config));
    unsetenv("UCX_DCX_DEVX");
}
