/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Scatter-gather put with UCP (UCX 1.22 and later): four pieces of a local
 * buffer go to four places in a peer's memory with one ucp_put_nbx. Over
 * dcx the pieces leave as one batch of RDMA writes; pieces that land next
 * to each other become one write from a UMR list key.
 *
 * Two workers of one process stand for two peers. Build and run:
 *   cc ucp_sgl_put.c -o ucp_sgl_put -lucp -lucs
 *   UCX_TLS=dcx dcx-run --emu ./ucp_sgl_put
 */
#include <ucp/api/ucp.h>
#include <ucp/api/ucp_version.h>

#include <stdio.h>
#include <string.h>

#define CHECK(_call) \
    do { \
        if ((_call) != UCS_OK) { \
            fprintf(stderr, "ucp_sgl_put: %s failed\n", #_call); \
            return 1; \
        } \
    } while (0)

#if UCP_API_VERSION >= UCP_VERSION(1, 22)

static void example_wait(ucp_worker_h w1, ucp_worker_h w2,
                         ucs_status_ptr_t req)
{
    if (UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(w1);
            ucp_worker_progress(w2);
        }
        ucp_request_free(req);
    }
}

int main(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_RMA};
    ucp_worker_params_t wparams = {};
    ucp_mem_map_params_t mparams;
    ucp_ep_params_t eparams;
    ucp_context_h ctx;
    ucp_worker_h me, peer;
    ucp_address_t *addr;
    size_t addr_len, rkey_len, i;
    ucp_mem_h lmemh, rmemh;
    ucp_rkey_h rkey;
    ucp_ep_h ep;
    void *rkey_buf;
    char local[64] = "scatter-gather put over dcx: four pieces, one call";
    char remote[256];

    memset(remote, '.', sizeof(remote));
    CHECK(ucp_init(&params, NULL, &ctx));
    CHECK(ucp_worker_create(ctx, &wparams, &me));
    CHECK(ucp_worker_create(ctx, &wparams, &peer));
    CHECK(ucp_worker_get_address(peer, &addr, &addr_len));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = addr;
    CHECK(ucp_ep_create(me, &eparams, &ep));
    ucp_worker_release_address(peer, addr);

    mparams.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                         UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mparams.address    = local;
    mparams.length     = sizeof(local);
    CHECK(ucp_mem_map(ctx, &mparams, &lmemh));
    mparams.address    = remote;
    mparams.length     = sizeof(remote);
    CHECK(ucp_mem_map(ctx, &mparams, &rmemh));
    CHECK(ucp_rkey_pack(ctx, rmemh, &rkey_buf, &rkey_len));
    CHECK(ucp_ep_rkey_unpack(ep, rkey_buf, &rkey));
    ucp_rkey_buffer_release(rkey_buf);

    /* --- the scatter-gather put ------------------------------------------ */
    void *bufs[4]       = {local, local + 15, local + 29, local + 40};
    size_t lens[4]      = {14, 13, 10, 11};
    ucp_mem_h memhs[4]  = {lmemh, lmemh, lmemh, lmemh};
    uint64_t raddrs[4]  = {(uintptr_t)remote, (uintptr_t)remote + 14,
                           (uintptr_t)remote + 100, (uintptr_t)remote + 200};
    ucp_rkey_h rkeys[4] = {rkey, rkey, rkey, rkey};
    ucp_dt_local_sgl_t lsgl = {
        .field_mask = UCP_DT_LOCAL_SGL_FIELD_BUFFERS |
                      UCP_DT_LOCAL_SGL_FIELD_LENGTHS |
                      UCP_DT_LOCAL_SGL_FIELD_MEMHS,
        .buffers = bufs, .lengths = lens, .memhs = memhs};
    ucp_dt_remote_sgl_t rsgl = {
        .field_mask = UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS |
                      UCP_DT_REMOTE_SGL_FIELD_LENGTHS |
                      UCP_DT_REMOTE_SGL_FIELD_RKEYS,
        .remote_addrs = raddrs, .lengths = lens, .rkeys = rkeys};
    ucp_request_param_t param = {
        .op_attr_mask    = UCP_OP_ATTR_FIELD_DATATYPE |
                           UCP_OP_ATTR_FIELD_REMOTE_DATATYPE |
                           UCP_OP_ATTR_FIELD_REMOTE |
                           UCP_OP_ATTR_FIELD_REMOTE_COUNT,
        .datatype        = ucp_dt_make_sgl(),
        .remote_datatype = ucp_dt_make_sgl(),
        .remote          = &rsgl,
        .remote_count    = 4};
    example_wait(me, peer, ucp_put_nbx(ep, &lsgl, 4, UCP_REMOTE_ADDR_INVALID,
                                       UCP_RKEY_INVALID, &param));
    /* ---------------------------------------------------------------------- */

    ucp_request_param_t flush = {};
    example_wait(me, peer, ucp_ep_flush_nbx(ep, &flush));
    for (i = 0; i < 4; ++i) {
        if (memcmp((char*)(uintptr_t)raddrs[i], bufs[i], lens[i]) != 0) {
            fprintf(stderr, "ucp_sgl_put: piece %zu did not arrive\n", i);
            return 1;
        }
    }
    printf("ucp_sgl_put: PASS: remote[0..26] = \"%.27s\", [100..109] = "
           "\"%.10s\", [200..210] = \"%.11s\"\n", remote, remote + 100,
           remote + 200);

    ucp_rkey_destroy(rkey);
    example_wait(me, peer, ucp_ep_close_nbx(ep, &flush));
    ucp_mem_unmap(ctx, lmemh);
    ucp_mem_unmap(ctx, rmemh);
    ucp_worker_destroy(me);
    ucp_worker_destroy(peer);
    ucp_cleanup(ctx);
    return 0;
}

#else

int main(void)
{
    fprintf(stderr, "ucp_sgl_put: scatter-gather put needs UCX 1.22 or "
            "later\n");
    return 77;
}

#endif
