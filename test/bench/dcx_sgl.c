/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_sgl: scatter-gather put through UCP (UCX 1.22 and later) between two
 * workers of this process over dcx, against the same data sent as a loop of
 * contiguous ucp_put_nbx calls (contrib/dcx bench sgl).
 *
 *   dcx_sgl MODE ELEMENTS SIZE LAYOUT [ITERS]
 *   MODE:   sgl  - one ucp_put_nbx with ucp_dt_make_sgl() per iteration
 *           loop - ELEMENTS contiguous ucp_put_nbx calls per iteration
 *   LAYOUT: contig  - element i to remote offset i * SIZE (one region)
 *           scatter - element i to a remote slot 2 * SIZE apart, in a
 *                     shuffled order
 *
 * Local pieces are 2 * SIZE apart (a strided gather). Prints
 * "elements_per_sec=<x> mb_per_sec=<y>" and exits 0 only if every remote
 * byte is right after the last iteration.
 */
#include <ucp/api/ucp.h>
#include <ucp/api/ucp_version.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SGL_WINDOW 16 /* iterations between flushes */

#define SGL_CHECK(_cond, _what)                             \
    do {                                                    \
        if (!(_cond)) {                                     \
            fprintf(stderr, "dcx_sgl: %s failed\n", _what); \
            exit(1);                                        \
        }                                                   \
    } while (0)

#define SGL_OK(_call) SGL_CHECK((_call) == UCS_OK, #_call)

#if UCP_API_VERSION >= UCP_VERSION(1, 22)

typedef struct {
    ucp_context_h context;
    ucp_worker_h tx, rx;
    ucp_ep_h ep, back_ep;
    ucp_mem_h local_memh, remote_memh;
    ucp_rkey_h rkey;
    char *local, *remote;
    size_t region;
} sgl_bench_t;

static double sgl_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sgl_progress(sgl_bench_t *b)
{
    ucp_worker_progress(b->tx);
    ucp_worker_progress(b->rx);
}

static void sgl_wait(sgl_bench_t *b, ucs_status_ptr_t req)
{
    ucs_status_t status;

    if (req == NULL) {
        return;
    }
    SGL_CHECK(!UCS_PTR_IS_ERR(req), "a UCP request");
    do {
        sgl_progress(b);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    SGL_OK(status);
    ucp_request_free(req);
}

static ucp_mem_h sgl_map(sgl_bench_t *b, void *address, size_t length)
{
    ucp_mem_map_params_t params = {};
    ucp_mem_h memh;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = address;
    params.length  = length;
    SGL_OK(ucp_mem_map(b->context, &params, &memh));
    return memh;
}

static void sgl_connect(ucp_worker_h from, ucp_worker_h to, ucp_ep_h *ep_p)
{
    ucp_ep_params_t params = {};
    ucp_address_t *address;
    size_t length;

    SGL_OK(ucp_worker_get_address(to, &address, &length));
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address    = address;
    SGL_OK(ucp_ep_create(from, &params, ep_p));
    ucp_worker_release_address(to, address);
}

static void sgl_init(sgl_bench_t *b, size_t region)
{
    ucp_params_t params         = {};
    ucp_worker_params_t wparams = {};
    void *rkey_buf;
    size_t rkey_size;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_RMA;
    SGL_OK(ucp_init(&params, NULL, &b->context));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    SGL_OK(ucp_worker_create(b->context, &wparams, &b->tx));
    SGL_OK(ucp_worker_create(b->context, &wparams, &b->rx));
    sgl_connect(b->tx, b->rx, &b->ep);
    sgl_connect(b->rx, b->tx, &b->back_ep);

    b->region = region;
    b->local  = aligned_alloc(4096, region);
    b->remote = aligned_alloc(4096, region);
    SGL_CHECK((b->local != NULL) && (b->remote != NULL), "aligned_alloc");
    b->local_memh  = sgl_map(b, b->local, region);
    b->remote_memh = sgl_map(b, b->remote, region);
    SGL_OK(ucp_rkey_pack(b->context, b->remote_memh, &rkey_buf, &rkey_size));
    SGL_OK(ucp_ep_rkey_unpack(b->ep, rkey_buf, &b->rkey));
    ucp_rkey_buffer_release(rkey_buf);
}

static void sgl_cleanup(sgl_bench_t *b)
{
    ucp_request_param_t param = {};

    sgl_wait(b, ucp_worker_flush_nbx(b->tx, &param));
    ucp_rkey_destroy(b->rkey);
    sgl_wait(b, ucp_ep_close_nbx(b->ep, &param));
    sgl_wait(b, ucp_ep_close_nbx(b->back_ep, &param));
    ucp_mem_unmap(b->context, b->local_memh);
    ucp_mem_unmap(b->context, b->remote_memh);
    ucp_worker_destroy(b->tx);
    ucp_worker_destroy(b->rx);
    ucp_cleanup(b->context);
    free(b->local);
    free(b->remote);
}

int main(int argc, char **argv)
{
    sgl_bench_t b             = {};
    ucp_request_param_t param = {}, cparam = {};
    ucp_dt_local_sgl_t local;
    ucp_dt_remote_sgl_t remote;
    size_t n, size, iters, it, i, j, *lengths, *slots;
    uint64_t *raddrs;
    void **buffers;
    ucp_mem_h *memhs;
    ucp_rkey_h *rkeys;
    ucs_status_ptr_t req;
    double t0, t;
    int sgl, scatter;

    if ((argc != 5) && (argc != 6)) {
        fprintf(stderr, "usage: dcx_sgl sgl|loop ELEMENTS SIZE contig|scatter "
                        "[ITERS]\n");
        return 2;
    }
    sgl     = !strcmp(argv[1], "sgl");
    n       = strtoul(argv[2], NULL, 0);
    size    = strtoul(argv[3], NULL, 0);
    scatter = !strcmp(argv[4], "scatter");
    iters   = (argc == 6) ? strtoul(argv[5], NULL, 0) : 2000;
    SGL_CHECK(sgl || !strcmp(argv[1], "loop"), "recognising the mode");
    SGL_CHECK(scatter || !strcmp(argv[4], "contig"), "recognising the layout");
    SGL_CHECK((n > 0) && (size > 0) && (iters > 0), "the sizes");

    sgl_init(&b, 2 * n * size);
    buffers = calloc(n, sizeof(*buffers));
    lengths = calloc(n, sizeof(*lengths));
    slots   = calloc(n, sizeof(*slots));
    raddrs  = calloc(n, sizeof(*raddrs));
    memhs   = calloc(n, sizeof(*memhs));
    rkeys   = calloc(n, sizeof(*rkeys));
    SGL_CHECK(buffers && lengths && slots && raddrs && memhs && rkeys,
              "calloc");

    /* Remote slots: in order, or a fixed shuffle of every other slot. */
    for (i = 0; i < n; ++i) {
        slots[i] = scatter ? 2 * i : i;
    }
    for (i = n - 1; scatter && (i > 0); --i) {
        j        = (i * 2654435761u) % (i + 1);
        t        = slots[i];
        slots[i] = slots[j];
        slots[j] = (size_t)t;
    }
    for (i = 0; i < n; ++i) {
        buffers[i] = b.local + 2 * i * size;
        lengths[i] = size;
        memhs[i]   = b.local_memh;
        rkeys[i]   = b.rkey;
        raddrs[i]  = (uintptr_t)b.remote + slots[i] * size;
        memset(buffers[i], (int)(i * 7 + 1), size);
    }
    memset(b.remote, 0, b.region);

    local.field_mask = UCP_DT_LOCAL_SGL_FIELD_BUFFERS |
                       UCP_DT_LOCAL_SGL_FIELD_LENGTHS |
                       UCP_DT_LOCAL_SGL_FIELD_MEMHS;
    local.buffers     = buffers;
    local.lengths     = lengths;
    local.memhs       = memhs;
    remote.field_mask = UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS |
                        UCP_DT_REMOTE_SGL_FIELD_LENGTHS |
                        UCP_DT_REMOTE_SGL_FIELD_RKEYS;
    remote.remote_addrs = raddrs;
    remote.lengths      = lengths;
    remote.rkeys        = rkeys;
    param.op_attr_mask  = UCP_OP_ATTR_FIELD_DATATYPE |
                         UCP_OP_ATTR_FIELD_REMOTE_DATATYPE |
                         UCP_OP_ATTR_FIELD_REMOTE |
                         UCP_OP_ATTR_FIELD_REMOTE_COUNT;
    param.datatype        = ucp_dt_make_sgl();
    param.remote_datatype = ucp_dt_make_sgl();
    param.remote          = &remote;
    param.remote_count    = n;
    cparam.op_attr_mask   = UCP_OP_ATTR_FIELD_MEMH;
    cparam.memh           = b.local_memh;

    /* Iteration 0 warms up (wireup, registration cache, protocol choice).
     * Requests are released at once and complete by progress; a flush
     * every SGL_WINDOW iterations bounds what is in flight. */
    t0 = 0;
    for (it = 0; it <= iters; ++it) {
        if (it == 1) {
            sgl_wait(&b, ucp_worker_flush_nbx(b.tx, &cparam));
            t0 = sgl_now();
        }
        for (i = 0; i < (sgl ? 1 : n); ++i) {
            req = sgl ? ucp_put_nbx(b.ep, &local, n, UCP_REMOTE_ADDR_INVALID,
                                    UCP_RKEY_INVALID, &param) :
                        ucp_put_nbx(b.ep, buffers[i], size, raddrs[i], b.rkey,
                                    &cparam);
            SGL_CHECK(!UCS_PTR_IS_ERR(req), "ucp_put_nbx");
            if (req != NULL) {
                ucp_request_free(req);
            }
        }
        sgl_progress(&b);
        if ((it % SGL_WINDOW) == 0) {
            sgl_wait(&b, ucp_worker_flush_nbx(b.tx, &cparam));
        }
    }
    sgl_wait(&b, ucp_worker_flush_nbx(b.tx, &cparam));
    t = sgl_now() - t0;

    for (i = 0; i < n; ++i) {
        for (j = 0; j < size; ++j) {
            SGL_CHECK(b.remote[slots[i] * size + j] == (char)(i * 7 + 1),
                      "the remote data");
        }
    }

    printf("elements_per_sec=%.0f mb_per_sec=%.1f\n", iters * n / t,
           iters * n * size / t / 1e6);
    sgl_cleanup(&b);
    free(buffers);
    free(lengths);
    free(slots);
    free(raddrs);
    free(memhs);
    free(rkeys);
    return 0;
}

#else

int main(int argc, char **argv)
{
    fprintf(stderr,
            "dcx_sgl: scatter-gather put needs UCX 1.22 or later "
            "(built against %d.%d)\n",
            UCP_API_MAJOR, UCP_API_MINOR);
    return 77;
}

#endif
