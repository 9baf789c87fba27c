/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * UCP-level harness for dcx on the software DC device: a UCP context and
 * worker over UCX_TLS=dcx, endpoints from a peer's worker address, bounded
 * waits. Peers in other processes, pipes, environment settings and the test
 * data pattern are the common harness's (../common/test_common.h).
 */
#ifndef DCX_UCP_TEST_H_
#define DCX_UCP_TEST_H_

#include "../uct/uct_test.h"

#include <ucp/api/ucp.h>

#include <string>
#include <vector>

namespace dcx_test {

/* A UCP context and worker over dcx. */
class ucp_entity {
public:
    explicit ucp_entity(uint64_t features, bool wakeup = false);
    ~ucp_entity();

    bool ok() const
    {
        return m_worker != nullptr;
    }
    ucp_context_h context() const
    {
        return m_context;
    }
    ucp_worker_h worker() const
    {
        return m_worker;
    }
    std::vector<char> address() const;

    /* Endpoint to a peer's worker address; err_mode PEER installs a handler
     * that records the failure status (see failed()). */
    ucs_status_t
    connect(const std::vector<char> &address, ucp_ep_h *ep_p,
            ucp_err_handling_mode_t err_mode = UCP_ERR_HANDLING_MODE_NONE);
    /* Close an endpoint (flush, or force after a failure), bounded. */
    void disconnect(ucp_ep_h ep, bool force = false);

    unsigned progress()
    {
        return ucp_worker_progress(m_worker);
    }

    /* Progress until the request completes or the timeout passes: returns
     * its status (UCS_ERR_TIMED_OUT on timeout; the request is then left to
     * the worker's teardown). NULL and error pointers are handled. */
    ucs_status_t wait(ucs_status_ptr_t request, double timeout = 30.0);
    bool wait_for(const std::function<bool()> &cond, double timeout = 30.0);

    /* Set by the error handler of PEER-mode endpoints. */
    ucs_status_t failed() const
    {
        return m_failed;
    }
    int failures() const
    {
        return m_failures;
    }

    /* ucp_ep_print_info as a string (lanes and their transports). */
    static std::string ep_info(ucp_ep_h ep);

private:
    static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status);

    ucp_context_h m_context = nullptr;
    ucp_worker_h m_worker   = nullptr;
    ucs_status_t m_failed   = UCS_OK;
    int m_failures          = 0;
};

/* A mapped memory region and its packed remote key. */
class ucp_region {
public:
    ucp_region(ucp_context_h context, size_t length);
    ~ucp_region();
    char *ptr() const
    {
        return m_ptr;
    }
    size_t length() const
    {
        return m_length;
    }
    const std::vector<char> &packed_rkey() const
    {
        return m_rkey;
    }

private:
    ucp_context_h m_context;
    ucp_mem_h m_memh = nullptr;
    char *m_ptr      = nullptr;
    size_t m_length;
    std::vector<char> m_rkey;
};

} // namespace dcx_test

#endif
