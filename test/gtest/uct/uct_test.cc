/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "uct_test.h"

#include <algorithm>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

namespace dcx_test {

const char *emu_md_name  = "dcxemu0";
const char *emu_dev_name = "dcxemu0:1";

void select_test_device()
{
    static std::string md, dev;
    const char *device = getenv("DCX_TEST_DEVICE");

    if (device != NULL) {
        md           = device;
        dev          = md + ":1";
        emu_md_name  = md.c_str();
        emu_dev_name = dev.c_str();
    }
}

uct_component_h dcx_component()
{
    static uct_component_h dcx = []() -> uct_component_h {
        if (dlopen(DCX_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL) == nullptr) {
            ADD_FAILURE() << dlerror();
            return nullptr;
        }

        uct_component_h *components, found = nullptr;
        unsigned num;
        if (uct_query_components(&components, &num) != UCS_OK) {
            return nullptr;
        }
        for (unsigned i = 0; i < num; ++i) {
            uct_component_attr_t attr;
            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
            uct_component_query(components[i], &attr);
            if (std::string(attr.name) == "dcx") {
                found = components[i];
            }
        }
        uct_release_component_list(components);
        return found;
    }();
    return dcx;
}

config_t quick_timeout(unsigned retry_count, config_t extra)
{
    extra["TIMEOUT"]     = "100us";
    extra["RETRY_COUNT"] = std::to_string(retry_count);
    return extra;
}

/* A configuration call on a dcx interface variable: UCX 1.13 matches a name
 * without the table's prefix, 1.16 and later only with it (DCX_...). */
static ucs_status_t
config_by_name(const std::string &name,
               const std::function<ucs_status_t(const char *)> &op)
{
    ucs_status_t status = op(name.c_str());

    return (status == UCS_ERR_NO_ELEM) ? op(("DCX_" + name).c_str()) : status;
}

/* The model device's memory domain, or nullptr with a failure. */
static uct_md_h open_md()
{
    uct_component_h dcx = dcx_component();
    uct_md_config_t *md_config;
    uct_md_h md = nullptr;

    if ((dcx == nullptr) ||
        (uct_md_config_read(dcx, NULL, NULL, &md_config) != UCS_OK)) {
        ADD_FAILURE() << "no dcx component";
        return nullptr;
    }
    EXPECT_EQ(UCS_OK, uct_md_open(dcx, emu_md_name, md_config, &md));
    uct_config_release(md_config);
    return md;
}

std::string iface_config(const std::string &name)
{
    uct_md_h md = open_md();
    uct_iface_config_t *config;
    char value[256] = "";

    if (md == nullptr) {
        return value;
    }
    if (uct_md_iface_config_read(md, "dcx", NULL, NULL, &config) == UCS_OK) {
        EXPECT_EQ(UCS_OK,
                  config_by_name(name,
                                 [&](const char *n) {
                                     return uct_config_get(config, n, value,
                                                           sizeof(value));
                                 }))
                << "no dcx configuration variable " << name;
        uct_config_release(config);
    } else {
        ADD_FAILURE() << "cannot read the dcx interface configuration";
    }
    uct_md_close(md);
    return value;
}

unsigned long iface_config_ulong(const std::string &name)
{
    std::string value = iface_config(name);
    char *end         = nullptr;
    unsigned long n   = strtoul(value.c_str(), &end, 10);

    EXPECT_TRUE(!value.empty() && (*end == '\0'))
            << name << "=" << value << " is not a number";
    return n;
}

entity::entity(const config_t &config, uct_error_handler_t err_handler,
               void *err_arg)
{
    static const ucs_status_t ok = UCS_OK;

    init(config, err_handler, err_arg, &ok);
}

entity::entity(const config_t &config, open_fails expected)
{
    EXPECT_NE(UCS_OK, expected.status);
    init(config, nullptr, nullptr, &expected.status);
}

entity::entity(const config_t &config, open_any)
{
    init(config, nullptr, nullptr, nullptr);
}

void entity::init(const config_t &config, uct_error_handler_t err_handler,
                  void *err_arg, const ucs_status_t *expected_open_status)
{
    uct_iface_config_t *iface_config;
    uct_iface_params_t params = {};

    EXPECT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                               &m_async));
    EXPECT_EQ(UCS_OK,
              uct_worker_create(m_async, UCS_THREAD_MODE_SINGLE, &m_worker));
    m_md = open_md();
    if (m_md == nullptr) {
        return;
    }

    EXPECT_EQ(UCS_OK,
              uct_md_iface_config_read(m_md, "dcx", NULL, NULL, &iface_config));
    for (const auto &kv : config) {
        EXPECT_EQ(UCS_OK, config_by_name(kv.first,
                                         [&](const char *name) {
                                             return uct_config_modify(
                                                     iface_config, name,
                                                     kv.second.c_str());
                                         }))
                << kv.first << "=" << kv.second;
    }

    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "dcx";
    params.mode.device.dev_name = emu_dev_name;
    params.rx_headroom          = rx_headroom;
    if (err_handler != nullptr) {
        params.field_mask |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                             UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                             UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler       = err_handler;
        params.err_handler_arg   = err_arg;
        params.err_handler_flags = UCT_CB_FLAG_ASYNC;
    }

    m_open_status = uct_iface_open(m_md, m_worker, &params, iface_config,
                                   &m_iface);
    if (expected_open_status != nullptr) {
        EXPECT_EQ(*expected_open_status, m_open_status);
    }
    uct_config_release(iface_config);
    if (m_iface == nullptr) {
        return;
    }
    if ((expected_open_status == nullptr) ||
        (*expected_open_status != UCS_OK)) {
        close_iface();
        return;
    }

    EXPECT_EQ(UCS_OK, uct_iface_query(m_iface, &m_attr));
    m_dev_addr.resize(m_attr.device_addr_len);
    m_iface_addr.resize(m_attr.iface_addr_len);
    EXPECT_EQ(UCS_OK, uct_iface_get_device_address(
                              m_iface, (uct_device_addr_t *)m_dev_addr.data()));
    EXPECT_EQ(UCS_OK,
              uct_iface_get_address(m_iface,
                                    (uct_iface_addr_t *)m_iface_addr.data()));
    uct_iface_progress_enable(m_iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

ucs_status_t iface_open_status(const config_t &config)
{
    entity e(config, entity::open_any());
    return e.open_status();
}

entity::~entity()
{
    if (m_iface != nullptr) {
        uct_iface_close(m_iface);
    }
    if (m_md != nullptr) {
        uct_md_close(m_md);
    }
    if (m_worker != nullptr) {
        uct_worker_destroy(m_worker);
    }
    if (m_async != nullptr) {
        ucs_async_context_destroy(m_async);
    }
}

void entity::close_iface()
{
    if (m_iface != nullptr) {
        uct_iface_close(m_iface);
        m_iface = nullptr;
    }
}

std::vector<char> entity::address() const
{
    std::vector<char> blob;
    blob.push_back((char)m_dev_addr.size());
    blob.insert(blob.end(), m_dev_addr.begin(), m_dev_addr.end());
    blob.insert(blob.end(), m_iface_addr.begin(), m_iface_addr.end());
    return blob;
}

ucs_status_t entity::connect(const std::vector<char> &address, uct_ep_h *ep_p)
{
    uct_ep_params_t params = {};
    size_t dev_len         = (unsigned char)address.at(0);

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = m_iface;
    params.dev_addr   = (const uct_device_addr_t *)&address[1];
    params.iface_addr = (const uct_iface_addr_t *)&address[1 + dev_len];
    return uct_ep_create(&params, ep_p);
}

uct_ep_h entity::connect(const entity &peer)
{
    uct_ep_h ep = nullptr;
    EXPECT_EQ(UCS_OK, connect(peer.address(), &ep));
    return ep;
}

unsigned entity::progress()
{
    return uct_worker_progress(m_worker);
}

buffer::buffer(const entity &e, size_t length, char fill, unsigned flags)
    : m_md(e.md()), m_length(length), m_memh(UCT_MEM_HANDLE_NULL)
{
    uct_md_attr_t attr;

    EXPECT_EQ(0, posix_memalign((void **)&m_ptr, 4096,
                                std::max(length, (size_t)64)));
    memset(m_ptr, fill, length);
    EXPECT_EQ(UCS_OK, uct_md_mem_reg(m_md, m_ptr, std::max(length, (size_t)64),
                                     flags, &m_memh));
    EXPECT_EQ(UCS_OK, uct_md_query(m_md, &attr));
    m_packed.resize(attr.rkey_packed_size);
    EXPECT_EQ(UCS_OK, uct_md_mkey_pack(m_md, m_memh, m_packed.data()));
}

uint64_t buffer::word(size_t i) const
{
    uint64_t value;

    if ((i + 1) * sizeof(value) > m_length) {
        ADD_FAILURE() << "word " << i << " is past the buffer's end";
        return 0;
    }
    memcpy(&value, m_ptr + i * sizeof(value), sizeof(value));
    return value;
}

buffer::~buffer()
{
    if (m_memh != UCT_MEM_HANDLE_NULL) {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(m_md, m_memh));
    }
    free(m_ptr);
}

rkey::rkey(const std::vector<char> &packed)
{
    EXPECT_EQ(UCS_OK,
              uct_rkey_unpack(dcx_component(), packed.data(), &m_bundle));
}

rkey::~rkey()
{
    uct_rkey_release(dcx_component(), &m_bundle);
}

static void progress_all(const std::vector<entity *> &entities)
{
    for (entity *e : entities) {
        e->progress();
    }
}

bool wait_for(const std::vector<entity *> &entities,
              const std::function<bool()> &cond, double timeout)
{
    return poll_until(
            cond, [&] { progress_all(entities); }, timeout);
}

static void test_comp_cb(uct_completion_t *self)
{
    test_comp *comp = ucs_container_of(self, test_comp, uct);
    comp->status    = self->status;
    comp->done      = 1;
}

test_comp::test_comp() : status(UCS_INPROGRESS), done(0)
{
    uct.func   = test_comp_cb;
    uct.count  = 1;
    uct.status = UCS_OK;
}

pending_put::pending_put(uct_ep_h ep, uint64_t addr, uct_rkey_t rkey,
                         uint64_t value)
    : ep(ep), addr(addr), rkey(rkey), value(value), done(0)
{
    req.func = [](uct_pending_req_t *self) {
        return ucs_container_of(self, pending_put, req)->run();
    };
}

ucs_status_t pending_put::run()
{
    ucs_status_t status = uct_ep_put_short(ep, &value, sizeof(value), addr,
                                           rkey);

    done |= (status == UCS_OK);
    return status;
}

ucs_status_t wait_comp(const std::vector<entity *> &entities,
                       ucs_status_t status, test_comp &comp, double timeout)
{
    if (status != UCS_INPROGRESS) {
        return status;
    }
    if (!wait_for(
                entities, [&] { return comp.done != 0; }, timeout)) {
        return UCS_ERR_TIMED_OUT;
    }
    return comp.status;
}

ucs_status_t flush_ep(const std::vector<entity *> &entities, uct_ep_h ep,
                      unsigned flags, double timeout)
{
    test_comp comp;
    ucs_status_t status = retry(entities, [&] {
        return uct_ep_flush(ep, flags, &comp.uct);
    });

    return wait_comp(entities, status, comp, timeout);
}

bool iface_flushed(const std::vector<entity *> &entities, const entity &e,
                   double timeout)
{
    return wait_for(
            entities,
            [&] { return uct_iface_flush(e.iface(), 0, NULL) == UCS_OK; },
            timeout);
}

ucs_status_t retry(const std::vector<entity *> &entities,
                   const std::function<ucs_status_t()> &op)
{
    ucs_status_t status = UCS_ERR_NO_RESOURCE;

    poll_until([&] { return (status = op()) != UCS_ERR_NO_RESOURCE; },
               [&] { progress_all(entities); }, 20.0);
    return status;
}

void entity_pair::open_pair(const config_t &receiver_config,
                            const config_t &sender_config, bool connect)
{
    m_receiver.reset(new entity(receiver_config));
    m_sender.reset(new entity(sender_config));
    ASSERT_NE(nullptr, m_receiver->iface());
    ASSERT_NE(nullptr, m_sender->iface());
    if (connect) {
        m_ep = m_sender->connect(*m_receiver);
        ASSERT_NE(nullptr, m_ep);
    }
}

void entity_pair::close_pair()
{
    if (m_ep != nullptr) {
        uct_ep_destroy(m_ep);
        m_ep = nullptr;
    }
    m_sender.reset();
    m_receiver.reset();
}

ucs_status_t record_failure(void *arg, uct_ep_h ep, ucs_status_t status)
{
    failure_record *rec = (failure_record *)arg;
    rec->eps.push_back(ep);
    rec->statuses.push_back(status);
    return UCS_OK;
}

} // namespace dcx_test
