/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "ucp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

namespace dcx_test {

ucp_entity::ucp_entity(uint64_t features, bool wakeup)
{
    ucp_config_t *config;
    ucp_params_t params         = {};
    ucp_worker_params_t wparams = {};

    /* dcx registers itself when loaded (once per process). */
    if (dcx_component() == nullptr) {
        ADD_FAILURE() << "the dcx component is not registered";
        return;
    }

    EXPECT_EQ(UCS_OK, ucp_config_read(NULL, NULL, &config));
    params.field_mask   = UCP_PARAM_FIELD_FEATURES;
    params.features     = features | (wakeup ? UCP_FEATURE_WAKEUP : 0);
    ucs_status_t status = ucp_init(&params, config, &m_context);
    ucp_config_release(config);
    EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    if (status != UCS_OK) {
        m_context = nullptr;
        return;
    }

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status              = ucp_worker_create(m_context, &wparams, &m_worker);
    EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    if (status != UCS_OK) {
        m_worker = nullptr;
    }
}

ucp_entity::~ucp_entity()
{
    if (m_worker != nullptr) {
        ucp_worker_destroy(m_worker);
    }
    if (m_context != nullptr) {
        ucp_cleanup(m_context);
    }
}

std::vector<char> ucp_entity::address() const
{
    ucp_address_t *addr;
    size_t len;
    std::vector<char> blob;

    if (ucp_worker_get_address(m_worker, &addr, &len) != UCS_OK) {
        ADD_FAILURE() << "ucp_worker_get_address failed";
        return blob;
    }
    blob.assign((char *)addr, (char *)addr + len);
    ucp_worker_release_address(m_worker, addr);
    return blob;
}

void ucp_entity::err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucp_entity *e = (ucp_entity *)arg;
    e->m_failed   = status;
    ++e->m_failures;
}

ucs_status_t ucp_entity::connect(const std::vector<char> &address,
                                 ucp_ep_h *ep_p,
                                 ucp_err_handling_mode_t err_mode)
{
    ucp_ep_params_t params = {};

    if (address.empty()) {
        return UCS_ERR_INVALID_PARAM;
    }
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address  = (const ucp_address_t *)address.data();
    params.err_mode = err_mode;
    if (err_mode == UCP_ERR_HANDLING_MODE_PEER) {
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_handler.cb  = err_cb;
        params.err_handler.arg = this;
    }
    return ucp_ep_create(m_worker, &params, ep_p);
}

void ucp_entity::disconnect(ucp_ep_h ep, bool force)
{
    ucp_request_param_t param = {};

    param.op_attr_mask  = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags         = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_t status = wait(ucp_ep_close_nbx(ep, &param), 10.0);
    if (!force) {
        EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    }
}

ucs_status_t ucp_entity::wait(ucs_status_ptr_t request, double timeout)
{
    double deadline = now_sec() + timeout;
    ucs_status_t status;

    if (request == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        if (now_sec() > deadline) {
            /* Leave it to the worker's teardown: freeing it here would let
             * its callback touch released memory. */
            return UCS_ERR_TIMED_OUT;
        }
        progress();
    }
    ucp_request_free(request);
    return status;
}

bool ucp_entity::wait_for(const std::function<bool()> &cond, double timeout)
{
    return poll_until(
            cond, [this] { progress(); }, timeout);
}

std::string ucp_entity::ep_info(ucp_ep_h ep)
{
    char *buf   = nullptr;
    size_t size = 0;
    FILE *f     = open_memstream(&buf, &size);
    std::string s;

    if (f == nullptr) {
        return s;
    }
    ucp_ep_print_info(ep, f);
    fclose(f);
    s.assign(buf, size);
    free(buf);
    return s;
}

ucp_region::ucp_region(ucp_context_h context, size_t length)
    : m_context(context), m_length(length)
{
    ucp_mem_map_params_t params = {};
    void *rkey_buf;
    size_t rkey_len;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address      = nullptr;
    params.length       = length;
    params.flags        = UCP_MEM_MAP_ALLOCATE;
    ucs_status_t status = ucp_mem_map(context, &params, &m_memh);
    EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    if (status != UCS_OK) {
        m_memh = nullptr;
        return;
    }

    ucp_mem_attr_t attr;
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    EXPECT_EQ(UCS_OK, ucp_mem_query(m_memh, &attr));
    m_ptr = (char *)attr.address;
    memset(m_ptr, 0, length);

    EXPECT_EQ(UCS_OK, ucp_rkey_pack(context, m_memh, &rkey_buf, &rkey_len));
    m_rkey.assign((char *)rkey_buf, (char *)rkey_buf + rkey_len);
    ucp_rkey_buffer_release(rkey_buf);
}

ucp_region::~ucp_region()
{
    if (m_memh != nullptr) {
        EXPECT_EQ(UCS_OK, ucp_mem_unmap(m_context, m_memh));
    }
}

} // namespace dcx_test
