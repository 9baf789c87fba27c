/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * UCT-level test harness for dcx on the software DC device: interfaces,
 * endpoints, registered buffers, progress, bounded waits for completions and
 * flushes, and the plugin's public API. Peers in child processes, pipes and
 * the test data pattern come from ../common/test_common.h.
 */
#ifndef DCX_UCT_TEST_H_
#define DCX_UCT_TEST_H_

#include "../common/test_common.h"
#include "../common/test_print_ucs.h"

#include <gtest/gtest.h>
#include <uct/api/uct.h>
#include <uct/ib/dcx/dcx.h>
#include <ucs/async/async_fwd.h>

#include <cstring>
#include <dlfcn.h>
#include <poll.h>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dcx_test {

/* The dcx component, loaded from the build tree (registers once). */
uct_component_h dcx_component();

/* Name of the device-model memory domain and transport device. */
extern const char *emu_md_name;
extern const char *emu_dev_name;

/* DCX_TEST_DEVICE=dcxemu_mlx5_0: the tests run on that device (the device's
 * mlx5 face, preloaded) through dcx's hardware binding; sets the names
 * above. Called by main() before the tests. */
void select_test_device();

typedef std::map<std::string, std::string> config_t;

/* The receive headroom every entity asks for: a kept active-message
 * descriptor starts this far before its data. */
const size_t rx_headroom = 16;

/* A short transport timeout (100 us) with 'retry_count' retries, added to
 * 'extra': a dead or unreachable peer fails its endpoint within
 * milliseconds. */
config_t quick_timeout(unsigned retry_count, config_t extra = config_t());

/* What uct_iface_open says for an interface of this configuration (opened
 * and closed again at once). */
ucs_status_t iface_open_status(const config_t &config);

/* One UCT worker + interface on the model device. */
class entity {
public:
    /* The interface is expected not to open, with this status (a test of a
     * refused setting): no test failure is reported when it does not. */
    struct open_fails {
        ucs_status_t status;
    };

    explicit entity(const config_t &config          = config_t(),
                    uct_error_handler_t err_handler = nullptr,
                    void *err_arg                   = nullptr);
    entity(const config_t &config, open_fails expected);

    /* The interface is opened only to learn what uct_iface_open says
     * (open_status), and closed again at once. */
    struct open_any {};
    entity(const config_t &config, open_any);
    ~entity();

    ucs_status_t open_status() const
    {
        return m_open_status;
    }

    uct_iface_h iface() const
    {
        return m_iface;
    }
    uct_md_h md() const
    {
        return m_md;
    }
    const uct_iface_attr_t &attr() const
    {
        return m_attr;
    }
    const std::vector<char> &dev_addr() const
    {
        return m_dev_addr;
    }
    const std::vector<char> &iface_addr() const
    {
        return m_iface_addr;
    }

    /* All addresses in one blob (to send to another process). */
    std::vector<char> address() const;

    /* Connect an endpoint to a peer's address blob. */
    ucs_status_t connect(const std::vector<char> &address, uct_ep_h *ep_p);
    uct_ep_h connect(const entity &peer);

    unsigned progress();

    /* Close the interface now (the memory domain stays open). */
    void close_iface();

private:
    /* expected_open_status: what uct_iface_open must return, NULL: any */
    void init(const config_t &config, uct_error_handler_t err_handler,
              void *err_arg, const ucs_status_t *expected_open_status);

    ucs_async_context_t *m_async = nullptr;
    uct_worker_h m_worker        = nullptr;
    uct_md_h m_md                = nullptr;
    uct_iface_h m_iface          = nullptr;
    ucs_status_t m_open_status   = UCS_ERR_NO_DEVICE; /* no memory domain */
    uct_iface_attr_t m_attr;
    std::vector<char> m_dev_addr, m_iface_addr;
};

/* A registered buffer and its packed / unpacked remote key. */
class buffer {
public:
    buffer(const entity &e, size_t length, char fill = 0,
           unsigned flags = UCT_MD_MEM_ACCESS_ALL);
    ~buffer();

    char *ptr() const
    {
        return m_ptr;
    }
    size_t length() const
    {
        return m_length;
    }
    uct_mem_h memh() const
    {
        return m_memh;
    }
    uint64_t addr() const
    {
        return (uintptr_t)m_ptr;
    }
    /* The 64-bit word at word index i (reads any alignment). */
    uint64_t word(size_t i) const;
    const std::vector<char> &packed_rkey() const
    {
        return m_packed;
    }

private:
    uct_md_h m_md;
    char *m_ptr;
    size_t m_length;
    uct_mem_h m_memh;
    std::vector<char> m_packed;
};

/* Unpacked remote key of a peer's buffer. */
class rkey {
public:
    explicit rkey(const std::vector<char> &packed);
    ~rkey();
    uct_rkey_t get() const
    {
        return m_bundle.rkey;
    }

private:
    uct_rkey_bundle_t m_bundle;
};

/* Progress the entities until cond() or the timeout (seconds). */
bool wait_for(const std::vector<entity *> &entities,
              const std::function<bool()> &cond, double timeout = 20.0);

/* The bcopy callbacks: pack_cb copies a pack_arg's bytes out, unpack_cb
 * copies what arrived into the buffer it is given. */
struct pack_arg {
    const char *src;
    size_t length;
};

static inline size_t pack_cb(void *dest, void *arg)
{
    pack_arg *p = (pack_arg *)arg;

    if (p->length > 0) { /* an empty message's source may be NULL */
        memcpy(dest, p->src, p->length);
    }
    return p->length;
}

static inline void unpack_cb(void *arg, const void *data, size_t length)
{
    if (length > 0) {
        memcpy(arg, data, length);
    }
}

/* A completion that counts down. */
struct test_comp {
    uct_completion_t uct;
    ucs_status_t status;
    int done;
    test_comp();
};

/* The status of an operation that returned 'status' with 'comp' as its
 * completion: waits (progressing the entities) if it is in progress;
 * UCS_ERR_TIMED_OUT if it did not complete in time. */
ucs_status_t wait_comp(const std::vector<entity *> &entities,
                       ucs_status_t status, test_comp &comp,
                       double timeout = 20.0);

/* uct_ep_flush (retried while out of resources), waited for: its status. */
ucs_status_t flush_ep(const std::vector<entity *> &entities, uct_ep_h ep,
                      unsigned flags = 0, double timeout = 20.0);

/* Whether the entity's interface flushed (uct_iface_flush returned UCS_OK)
 * within the timeout, progressing the entities meanwhile. */
bool iface_flushed(const std::vector<entity *> &entities, const entity &e,
                   double timeout = 20.0);

/* A pending request that puts the 8-byte 'value' at 'addr' when it runs;
 * 'done' once the put went. */
struct pending_put {
    uct_pending_req_t req;
    uct_ep_h ep;
    uint64_t addr;
    uct_rkey_t rkey;
    uint64_t value;
    int done;

    pending_put(uct_ep_h ep = nullptr, uint64_t addr = 0, uct_rkey_t rkey = 0,
                uint64_t value = 0);
    /* The put now, as the pending dispatch does: uct_ep_put_short's status. */
    ucs_status_t run();
};

/* Endpoint failures reported to an entity's error handler. */
struct failure_record {
    std::vector<uct_ep_h> eps;
    std::vector<ucs_status_t> statuses;
};

/* An error handler (arg: failure_record*) that records and accepts. */
ucs_status_t record_failure(void *arg, uct_ep_h ep, ucs_status_t status);

/* A receiving and a sending interface, and the sender's endpoint to the
 * receiver (unless asked not to connect): how most fixtures start. Members
 * of a derived fixture go before these (C++ destroys them first). */
class entity_pair {
protected:
    ~entity_pair()
    {
        close_pair();
    }

    /* Asserts: call it in ASSERT_NO_FATAL_FAILURE (SetUp() too). */
    void open_pair(const config_t &receiver_config,
                   const config_t &sender_config, bool connect = true);
    /* Destroys the endpoint, then the interfaces. */
    void close_pair();

    std::vector<entity *> all() const
    {
        return { m_sender.get(), m_receiver.get() };
    }

    std::unique_ptr<entity> m_sender, m_receiver;
    uct_ep_h m_ep = nullptr;
};

/* A function of the plugin's public API (include/uct/ib/dcx/dcx.h), looked
 * up in the plugin the suite loaded, as a program that preloads it would
 * (the suite keeps the plugin loaded, so the pointer stays valid). */
template <typename F> F plugin_sym(const char *name)
{
    void *handle = dlopen(DCX_TEST_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
    F fn         = (handle == nullptr) ? nullptr : (F)dlsym(handle, name);

    EXPECT_NE(nullptr, fn) << name << " is not exported";
    if (handle != nullptr) {
        dlclose(handle);
    }
    return fn;
}

/* A query of the plugin's public API: its result, zero if it failed. */
template <typename T> T plugin_query(const char *symbol, uct_iface_h iface)
{
    typedef ucs_status_t (*query_fn_t)(uct_iface_h, T *);
    query_fn_t query = plugin_sym<query_fn_t>(symbol);
    T result         = {};

    if (query != nullptr) {
        EXPECT_EQ(UCS_OK, query(iface, &result));
    }
    return result;
}

/* The send-side counters of a dcx interface. */
static inline uct_dcx_tx_counters_t tx_counters(uct_iface_h iface)
{
    return plugin_query<uct_dcx_tx_counters_t>("uct_dcx_iface_query_tx", iface);
}

/* The UMR counters of a dcx interface. */
static inline uct_dcx_umr_counters_t umr_counters(uct_iface_h iface)
{
    return plugin_query<uct_dcx_umr_counters_t>("uct_dcx_iface_query_umr",
                                                iface);
}

/* The value of a dcx interface configuration variable (name without the
 * UCX_DCX_ prefix) as an interface opened now would read it: its default
 * unless the environment sets it. Tests derive their expectations from it
 * instead of repeating the configuration table's defaults. */
std::string iface_config(const std::string &name);
unsigned long iface_config_ulong(const std::string &name);

/* Whether @a fd becomes readable within @a timeout_ms. */
static inline bool fd_readable(int fd, int timeout_ms)
{
    struct pollfd pfd = { fd, POLLIN, 0 };
    return poll(&pfd, 1, timeout_ms) == 1;
}

/* Retry an operation while it returns UCS_ERR_NO_RESOURCE. */
ucs_status_t retry(const std::vector<entity *> &entities,
                   const std::function<ucs_status_t()> &op);

} // namespace dcx_test

#endif
