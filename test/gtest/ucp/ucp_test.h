/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * UCP-level harness for dcx on the software DC device: a UCP context and
 * worker over UCX_TLS=dcx, endpoints from a peer's worker address, bounded
 * waits, and scoped environment settings (children inherit them). Peers in
 * other processes use the UCT harness's children and pipes (uct_test.h).
 */
#ifndef DCX_UCP_TEST_H_
#define DCX_UCP_TEST_H_

#include "../uct/uct_test.h"

#include <ucp/api/ucp.h>

#include <string>
#include <utility>
#include <vector>

namespace dcx_test {

/* Sets environment variables for its lifetime (UCP reads UCX_* when a
 * context is created; children started meanwhile inherit them). */
typedef std::vector<std::pair<std::string, std::string>> env_vars;

class scoped_env {
public:
    explicit scoped_env(const std::vector<std::pair<std::string, std::string>> &vars);
    ~scoped_env();

private:
    std::vector<std::pair<std::string, std::pair<bool, std::string>>> m_saved;
};

/* A UCP context and worker over dcx. */
class ucp_entity {
public:
    explicit ucp_entity(uint64_t features, bool wakeup = false);
    ~ucp_entity();

    bool ok() const { return m_worker != nullptr; }
    ucp_context_h context() const { return m_context; }
    ucp_worker_h worker() const { return m_worker; }
    std::vector<char> address() const;

    /* Endpoint to a peer's worker address; err_mode PEER installs a handler
     * that records the failure status (see failed()). */
    ucs_status_t connect(const std::vector<char> &address, ucp_ep_h *ep_p,
                         ucp_err_handling_mode_t err_mode =
                                 UCP_ERR_HANDLING_MODE_NONE);
    /* Close an endpoint (flush, or force after a failure), bounded. */
    void disconnect(ucp_ep_h ep, bool force = false);

    unsigned progress() { return ucp_worker_progress(m_worker); }

    /* Progress until the request completes or the timeout passes: returns
     * its status (UCS_ERR_TIMED_OUT on timeout; the request is then left to
     * the worker's teardown). NULL and error pointers are handled. */
    ucs_status_t wait(ucs_status_ptr_t request, double timeout = 30.0);
    bool wait_for(const std::function<bool()> &cond, double timeout = 30.0);

    /* Set by the error handler of PEER-mode endpoints. */
    ucs_status_t failed() const { return m_failed; }
    int failures() const { return m_failures; }

    /* ucp_ep_print_info as a string (lanes and their transports). */
    static std::string ep_info(ucp_ep_h ep);

private:
    static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status);

    ucp_context_h m_context = nullptr;
    ucp_worker_h  m_worker  = nullptr;
    ucs_status_t  m_failed  = UCS_OK;
    int           m_failures = 0;
};

/* A mapped memory region and its packed remote key. */
class ucp_region {
public:
    ucp_region(ucp_context_h context, size_t length);
    ~ucp_region();
    char *ptr() const { return m_ptr; }
    size_t length() const { return m_length; }
    const std::vector<char> &packed_rkey() const { return m_rkey; }

private:
    ucp_context_h     m_context;
    ucp_mem_h         m_memh = nullptr;
    char              *m_ptr = nullptr;
    size_t            m_length;
    std::vector<char> m_rkey;
};

double now_sec();

/* Pipe helpers for plain values. */
std::vector<char> u64_msg(uint64_t value);
uint64_t msg_u64(const std::vector<char> &msg);

/* The byte at offset i of test message 'seq' (never constant). */
static inline char data_byte(uint64_t seq, size_t i)
{
    return (char)(seq * 251 + i * 7 + (i >> 9) + 1);
}
void fill_data(void *buf, size_t length, uint64_t seq);
/* First wrong offset, or -1. */
long check_data(const void *buf, size_t length, uint64_t seq);

} // namespace dcx_test

#endif
