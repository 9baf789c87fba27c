/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_cost: one operation in a loop between two UCT interfaces (or two UCP
 * workers) of this process, shaped for callgrind: contrib/dcx bench cost
 * runs it under valgrind --tool=callgrind and counts the instructions of
 * the measured loop by object and by function.
 *
 *   dcx_cost OP COUNT
 *   OP: put_short am_short put_zcopy get_zcopy fadd ucp_put ucp_tag
 *
 * The transport and device (UCT operations) come from DCX_COST_TL and
 * DCX_COST_DEV (default dcx on dcxemu0:1, the device model's API face);
 * any UCT transport runs, e.g. dcx, dc_mlx5 or rc_mlx5 on dcxemu_mlx5_0:1
 * (the mlx5 face preloaded). UCP operations use what UCX_TLS and
 * UCX_NET_DEVICES select. An operation the transport does not offer (its
 * capability flags) is not run: the program prints
 * "op=OP tl=TL unsupported=WHY" and exits 0.
 *
 * The loop calls three functions (noipa: no clone renames them) at top
 * level, never nested, so each can be
 * collected on its own with --toggle-collect: cost_post (one try of the
 * operation), cost_progress_tx (the sender's progress) and cost_progress_rx
 * (the receiver's). WARMUP operations run first; then callgrind's counters
 * are zeroed, COUNT operations run, and the counters are dumped (the dump
 * file's ".1"), before the teardown. Without valgrind the client requests do
 * nothing, so the program also runs as a plain test of itself.
 *
 * stdout: "op=OP tl=TL count=COUNT send_cqes=N wrs=W" (N: send CQEs the
 * device model wrote during the measured loop, through either face, W: the
 * work requests it executed; -1 off the model; tries: the posting calls
 * of the measured loop, those refused with NO_RESOURCE included); exit status 0 only if every operation completed with its data in
 * place.
 */
#include "bench_uct.h"

#include <uct/api/uct.h>
#include <ucp/api/ucp.h>
#include <ucs/async/async_fwd.h>

/* Without valgrind's headers (a build root without valgrind) the program
 * still builds and runs; only callgrind needs its client requests. */
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(_name)
#endif

#include <dcxemu.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COST_WARMUP     2000 /* DCX_COST_WARMUP overrides */
#define COST_AM_ID      7
#define COST_ZCOPY_SIZE 65536
#define COST_SHORT_SIZE 8
#define COST_TAG        0x17ull
#define COST_UCP_SLOTS  256 /* UCP operations in flight, power of 2 */

typedef enum {
    COST_PUT_SHORT,
    COST_AM_SHORT,
    COST_PUT_ZCOPY,
    COST_GET_ZCOPY,
    COST_FADD,
    COST_UCP_PUT,
    COST_UCP_TAG,
    COST_LAST
} cost_op_t;

static const char *cost_op_names[] = { "put_short", "am_short", "put_zcopy",
                                       "get_zcopy", "fadd",     "ucp_put",
                                       "ucp_tag" };

/* One side: a UCT interface or a UCP worker. */
typedef struct {
    bench_uct_side_t uct;
    ucp_worker_h ucp_worker;
} cost_side_t;

typedef struct {
    cost_op_t op;
    bench_uct_resource_t res;
    cost_side_t tx, rx;
    uct_ep_h ep, rx_ep; /* rx_ep: a peer-to-peer transport's */
    size_t zcopy_size; /* <= COST_ZCOPY_SIZE */
    char *local, *remote; /* COST_ZCOPY_SIZE each */
    uct_mem_h local_memh, remote_memh;
    uct_rkey_bundle_t rkey;
    uct_completion_t comp; /* counts completed operations */
    uint64_t fetched;
    unsigned am_received;
    uint64_t posted; /* operations that went out */
    uint64_t tries; /* cost_post calls, refused ones too */
    /* UCP */
    ucp_context_h context;
    ucp_ep_h ucp_ep, ucp_back_ep;
    ucp_mem_h ucp_memh;
    ucp_rkey_h ucp_rkey;
    unsigned tag_received;
    char tag_buf[COST_SHORT_SIZE];
    ucs_status_ptr_t tag_req;
    /* A UCP operation that does not complete at once (e.g. queued while
     * the transport is out of resources) reads its source later: each has
     * a slot, its source and its request, reused once it completed. */
    uint64_t ucp_src[COST_UCP_SLOTS];
    ucs_status_ptr_t ucp_reqs[COST_UCP_SLOTS];
} cost_t;

#define COST_CHECK(_cond, _what)                             \
    do {                                                     \
        if (!(_cond)) {                                      \
            fprintf(stderr, "dcx_cost: %s failed\n", _what); \
            exit(1);                                         \
        }                                                    \
    } while (0)

#define COST_OK(_call) COST_CHECK((_call) == UCS_OK, #_call)


/* --- UCT --------------------------------------------------------------- */

static ucs_status_t
cost_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ++((cost_t *)arg)->am_received;
    return UCS_OK;
}

static void cost_comp_cb(uct_completion_t *self)
{
    COST_CHECK(self->status == UCS_OK, "an operation's completion");
}

/* The capability an operation needs, NULL when the transport has it. */
static const char *cost_uct_missing(cost_t *c, const uct_iface_attr_t *attr)
{
    uint64_t flags = attr->cap.flags;

    switch (c->op) {
    case COST_PUT_SHORT:
        return (flags & UCT_IFACE_FLAG_PUT_SHORT) ? NULL : "PUT_SHORT";
    case COST_AM_SHORT:
        return (flags & UCT_IFACE_FLAG_AM_SHORT) ? NULL : "AM_SHORT";
    case COST_PUT_ZCOPY:
        return (flags & UCT_IFACE_FLAG_PUT_ZCOPY) ? NULL : "PUT_ZCOPY";
    case COST_GET_ZCOPY:
        return (flags & UCT_IFACE_FLAG_GET_ZCOPY) ? NULL : "GET_ZCOPY";
    case COST_FADD:
        return (attr->cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_ADD)) ?
                       NULL :
                       "atomic64 fetch-add";
    default:
        return NULL;
    }
}

/* Endpoints: to the receiver's interface, or (a peer-to-peer transport
 * such as rc_mlx5) a pair connected to each other. */
static void cost_uct_connect(cost_t *c, const uct_iface_attr_t *attr)
{
    uct_ep_params_t ep_params = {};
    uct_device_addr_t *tx_dev, *rx_dev;
    uct_iface_addr_t *iface_addr;
    uct_ep_addr_t *tx_ep_addr, *rx_ep_addr;

    rx_dev = malloc(attr->device_addr_len);
    tx_dev = malloc(attr->device_addr_len);
    COST_CHECK((rx_dev != NULL) && (tx_dev != NULL), "malloc");
    COST_OK(uct_iface_get_device_address(c->rx.uct.iface, rx_dev));
    COST_OK(uct_iface_get_device_address(c->tx.uct.iface, tx_dev));
    if (attr->cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE) {
        iface_addr = malloc(attr->iface_addr_len);
        COST_CHECK(iface_addr != NULL, "malloc");
        COST_OK(uct_iface_get_address(c->rx.uct.iface, iface_addr));
        ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                               UCT_EP_PARAM_FIELD_DEV_ADDR |
                               UCT_EP_PARAM_FIELD_IFACE_ADDR;
        ep_params.iface      = c->tx.uct.iface;
        ep_params.dev_addr   = rx_dev;
        ep_params.iface_addr = iface_addr;
        COST_OK(uct_ep_create(&ep_params, &c->ep));
        free(iface_addr);
    } else {
        COST_CHECK(attr->cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP,
                   "a transport that connects to an interface or an endpoint");
        ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
        ep_params.iface      = c->tx.uct.iface;
        COST_OK(uct_ep_create(&ep_params, &c->ep));
        ep_params.iface = c->rx.uct.iface;
        COST_OK(uct_ep_create(&ep_params, &c->rx_ep));
        tx_ep_addr = malloc(attr->ep_addr_len);
        rx_ep_addr = malloc(attr->ep_addr_len);
        COST_CHECK((tx_ep_addr != NULL) && (rx_ep_addr != NULL), "malloc");
        COST_OK(uct_ep_get_address(c->ep, tx_ep_addr));
        COST_OK(uct_ep_get_address(c->rx_ep, rx_ep_addr));
        COST_OK(uct_ep_connect_to_ep(c->ep, rx_dev, rx_ep_addr));
        COST_OK(uct_ep_connect_to_ep(c->rx_ep, tx_dev, tx_ep_addr));
        free(tx_ep_addr);
        free(rx_ep_addr);
    }
    free(rx_dev);
    free(tx_dev);
}

static void cost_uct_init(cost_t *c)
{
    uct_iface_attr_t attr;
    const char *missing;
    void *packed;
    uct_md_attr_t md_attr;
    size_t max_zcopy;

    bench_uct_find_resource(&c->res, "dcx needs dcx-run; the mlx5 face "
                                     "its library preloaded");
    bench_uct_side_open(&c->res, &c->tx.uct);
    bench_uct_side_open(&c->res, &c->rx.uct);
    COST_OK(uct_iface_query(c->tx.uct.iface, &attr));
    missing = cost_uct_missing(c, &attr);
    if (missing != NULL) {
        printf("op=%s tl=%s unsupported=%s\n", cost_op_names[c->op],
               c->res.tl_name, missing);
        exit(0);
    }
    max_zcopy     = (c->op == COST_GET_ZCOPY) ? attr.cap.get.max_zcopy :
                                                attr.cap.put.max_zcopy;
    c->zcopy_size = (max_zcopy < COST_ZCOPY_SIZE) ? max_zcopy : COST_ZCOPY_SIZE;
    if (attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT) {
        COST_OK(uct_iface_set_am_handler(c->rx.uct.iface, COST_AM_ID,
                                         cost_am_handler, c, 0));
    }

    COST_OK(uct_iface_query(c->rx.uct.iface, &attr));
    cost_uct_connect(c, &attr);

    COST_OK(uct_md_query(c->rx.uct.md, &md_attr));
    if (!(md_attr.cap.flags & UCT_MD_FLAG_REG)) {
        /* e.g. shared memory transports: no registered remote memory */
        if (c->op != COST_AM_SHORT) {
            printf("op=%s tl=%s unsupported=memory registration\n",
                   cost_op_names[c->op], c->res.tl_name);
            exit(0);
        }
        return;
    }
    COST_OK(uct_md_mem_reg(c->tx.uct.md, c->local, COST_ZCOPY_SIZE,
                           UCT_MD_MEM_ACCESS_ALL, &c->local_memh));
    COST_OK(uct_md_mem_reg(c->rx.uct.md, c->remote, COST_ZCOPY_SIZE,
                           UCT_MD_MEM_ACCESS_ALL, &c->remote_memh));
    packed = malloc(md_attr.rkey_packed_size);
    COST_CHECK(packed != NULL, "malloc");
    COST_OK(uct_md_mkey_pack(c->rx.uct.md, c->remote_memh, packed));
    COST_OK(uct_rkey_unpack(c->res.component, packed, &c->rkey));
    free(packed);
}

static void cost_uct_flush(cost_t *c)
{
    ucs_status_t status;

    do {
        uct_worker_progress(c->tx.uct.worker);
        uct_worker_progress(c->rx.uct.worker);
        status = uct_iface_flush(c->tx.uct.iface, 0, NULL);
    } while (status == UCS_INPROGRESS);
    COST_OK(status);
}

static void cost_uct_cleanup(cost_t *c)
{
    cost_uct_flush(c);
    uct_ep_destroy(c->ep);
    if (c->rx_ep != NULL) {
        uct_ep_destroy(c->rx_ep);
    }
    if (c->local_memh != NULL) {
        uct_rkey_release(c->res.component, &c->rkey);
        uct_md_mem_dereg(c->tx.uct.md, c->local_memh);
        uct_md_mem_dereg(c->rx.uct.md, c->remote_memh);
    }
    bench_uct_side_close(&c->tx.uct);
    bench_uct_side_close(&c->rx.uct);
}


/* --- UCP --------------------------------------------------------------- */

static void cost_ucp_worker(cost_t *c, ucp_worker_h *worker_p)
{
    ucp_worker_params_t params = {};

    params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    COST_OK(ucp_worker_create(c->context, &params, worker_p));
}

static void cost_ucp_init(cost_t *c)
{
    ucp_params_t params          = {};
    ucp_ep_params_t ep_params    = {};
    ucp_mem_map_params_t mparams = {};
    ucp_address_t *address;
    size_t address_length, rkey_size;
    ucs_status_t status;
    void *rkey_buf;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_RMA | UCP_FEATURE_TAG;
    COST_OK(ucp_init(&params, NULL, &c->context));
    cost_ucp_worker(c, &c->tx.ucp_worker);
    cost_ucp_worker(c, &c->rx.ucp_worker);

    COST_OK(ucp_worker_get_address(c->rx.ucp_worker, &address,
                                   &address_length));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = address;
    status = ucp_ep_create(c->tx.ucp_worker, &ep_params, &c->ucp_ep);
    ucp_worker_release_address(c->rx.ucp_worker, address);
    if (status != UCS_OK) {
        /* e.g. a peer-to-peer transport without an auxiliary one to wire
         * it up: UCP does not offer the operation on this transport */
        printf("op=%s tl=%s unsupported=ucp_ep_create:%s\n",
               cost_op_names[c->op], c->res.tl_name, ucs_status_string(status));
        exit(0);
    }

    /* The receiver connects back, as both sides of a benchmark do: UCP
     * progresses an interface only once an endpoint uses it (or an event
     * wakes it, which would make the counts depend on timing). */
    COST_OK(ucp_worker_get_address(c->tx.ucp_worker, &address,
                                   &address_length));
    ep_params.address = address;
    COST_OK(ucp_ep_create(c->rx.ucp_worker, &ep_params, &c->ucp_back_ep));
    ucp_worker_release_address(c->tx.ucp_worker, address);

    mparams.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                         UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mparams.address = c->remote;
    mparams.length  = COST_ZCOPY_SIZE;
    COST_OK(ucp_mem_map(c->context, &mparams, &c->ucp_memh));
    COST_OK(ucp_rkey_pack(c->context, c->ucp_memh, &rkey_buf, &rkey_size));
    COST_OK(ucp_ep_rkey_unpack(c->ucp_ep, rkey_buf, &c->ucp_rkey));
    ucp_rkey_buffer_release(rkey_buf);
}

static void cost_ucp_wait(cost_t *c, ucs_status_ptr_t req)
{
    ucs_status_t status;

    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        fprintf(stderr, "dcx_cost: a UCP request failed: %s\n",
                ucs_status_string(UCS_PTR_STATUS(req)));
        exit(1);
    }
    do {
        ucp_worker_progress(c->tx.ucp_worker);
        ucp_worker_progress(c->rx.ucp_worker);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    COST_OK(status);
    ucp_request_free(req);
}

static void cost_ucp_slot_wait(cost_t *c, unsigned slot);

static void cost_ucp_cleanup(cost_t *c)
{
    ucp_request_param_t param = {};
    unsigned slot;

    for (slot = 0; slot < COST_UCP_SLOTS; ++slot) {
        cost_ucp_slot_wait(c, slot);
    }
    if (c->tag_req != NULL) {
        ucp_request_cancel(c->rx.ucp_worker, c->tag_req);
        ucp_worker_progress(c->rx.ucp_worker);
        ucp_request_free(c->tag_req);
    }
    cost_ucp_wait(c, ucp_worker_flush_nbx(c->tx.ucp_worker, &param));
    ucp_rkey_destroy(c->ucp_rkey);
    cost_ucp_wait(c, ucp_ep_close_nbx(c->ucp_ep, &param));
    cost_ucp_wait(c, ucp_ep_close_nbx(c->ucp_back_ep, &param));
    ucp_mem_unmap(c->context, c->ucp_memh);
    ucp_worker_destroy(c->tx.ucp_worker);
    ucp_worker_destroy(c->rx.ucp_worker);
    ucp_cleanup(c->context);
}

static void cost_tag_recv_cb(void *request, ucs_status_t status,
                             const ucp_tag_recv_info_t *info, void *arg)
{
    cost_t *c = arg;

    if (status == UCS_OK) {
        ++c->tag_received;
    }
}

/* The receiver keeps one receive posted, as a message-rate loop does. */
static void cost_tag_recv_post(cost_t *c)
{
    ucp_request_param_t param = {};

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv   = cost_tag_recv_cb;
    param.user_data = c;
    c->tag_req      = ucp_tag_recv_nbx(c->rx.ucp_worker, c->tag_buf,
                                       sizeof(c->tag_buf), COST_TAG, UINT64_MAX,
                                       &param);
    COST_CHECK(!UCS_PTR_IS_ERR(c->tag_req), "ucp_tag_recv_nbx");
}


/* --- the measured functions --------------------------------------------- */

/* One try of the operation: UCS_OK or UCS_INPROGRESS when it went out. */
static __attribute__((noipa)) ucs_status_t cost_post(cost_t *c, uint64_t i)
{
    ucp_request_param_t param = {};
    uint64_t value            = i;
    ucs_status_ptr_t req;
    uct_iov_t iov;

    switch (c->op) {
    case COST_PUT_SHORT:
        return uct_ep_put_short(c->ep, &value, COST_SHORT_SIZE,
                                (uintptr_t)c->remote, c->rkey.rkey);
    case COST_AM_SHORT:
        return uct_ep_am_short(c->ep, COST_AM_ID, value, NULL, 0);
    case COST_PUT_ZCOPY:
    case COST_GET_ZCOPY:
        iov.buffer = c->local;
        iov.length = c->zcopy_size;
        iov.memh   = c->local_memh;
        iov.stride = 0;
        iov.count  = 1;
        ++c->comp.count;
        return (c->op == COST_PUT_ZCOPY) ?
                       uct_ep_put_zcopy(c->ep, &iov, 1, (uintptr_t)c->remote,
                                        c->rkey.rkey, &c->comp) :
                       uct_ep_get_zcopy(c->ep, &iov, 1, (uintptr_t)c->remote,
                                        c->rkey.rkey, &c->comp);
    case COST_FADD:
        ++c->comp.count;
        return uct_ep_atomic64_fetch(c->ep, UCT_ATOMIC_OP_ADD, 1, &c->fetched,
                                     (uintptr_t)c->remote, c->rkey.rkey,
                                     &c->comp);
    case COST_UCP_PUT:
        c->ucp_src[i % COST_UCP_SLOTS] = value;
        req = ucp_put_nbx(c->ucp_ep, &c->ucp_src[i % COST_UCP_SLOTS],
                          COST_SHORT_SIZE, (uintptr_t)c->remote, c->ucp_rkey,
                          &param);
        break;
    case COST_UCP_TAG:
        c->ucp_src[i % COST_UCP_SLOTS] = value;
        req = ucp_tag_send_nbx(c->ucp_ep, &c->ucp_src[i % COST_UCP_SLOTS],
                               COST_SHORT_SIZE, COST_TAG, &param);
        break;
    default:
        return UCS_ERR_INVALID_PARAM;
    }

    /* UCP: a request that did not complete at once completes by progress;
     * it keeps its slot until then and counts as in progress. */
    if (UCS_PTR_IS_ERR(req)) {
        fprintf(stderr, "dcx_cost: %s: %s\n", cost_op_names[c->op],
                ucs_status_string(UCS_PTR_STATUS(req)));
        exit(1);
    }
    if (req != NULL) {
        c->ucp_reqs[i % COST_UCP_SLOTS] = req;
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

static __attribute__((noipa)) unsigned cost_progress_tx(cost_t *c)
{
    return (c->op >= COST_UCP_PUT) ? ucp_worker_progress(c->tx.ucp_worker) :
                                     uct_worker_progress(c->tx.uct.worker);
}

static __attribute__((noipa)) unsigned cost_progress_rx(cost_t *c)
{
    return (c->op >= COST_UCP_PUT) ? ucp_worker_progress(c->rx.ucp_worker) :
                                     uct_worker_progress(c->rx.uct.worker);
}

/* A zero-copy operation with an unused completion counter would fail its
 * callback at zero; count them up front instead. */
static void cost_op_failed(cost_t *c)
{
    if ((c->op == COST_PUT_ZCOPY) || (c->op == COST_GET_ZCOPY) ||
        (c->op == COST_FADD)) {
        --c->comp.count;
    }
}

/* A stream: progress after every COST_POSTS_PER_PROGRESS-th operation (as
 * UCX's perftest does after operations that complete at once) and after
 * NO_RESOURCE. perftest also progresses after every operation in progress,
 * but on hardware its completion is not there yet; on the device model
 * (immediate execution) it is, and progressing then would return the DCI
 * to the pool after every operation, which a stream on hardware does not.
 * Each side's progress is called until it reports nothing done: UCX's
 * dc_mlx5 and rc_mlx5 poll one CQE per call, so a single call would leave
 * the sender a send CQE per 16 posts, and once its send queue filled (its
 * length in basic blocks) it would refuse every other post; the receiver
 * likewise would fall behind the active messages and their credits. */
#define COST_POSTS_PER_PROGRESS 16

/* Send CQEs the device model wrote for this process so far, every device
 * summed, and in *wrs the work requests it executed; -1 off the model. The model is the library the plugin loaded
 * (UCX_DCX_EMU_LIB, the API face) or the one the mlx5 face links
 * (libdcxemu.so.0): either way it is already loaded, and nothing is loaded
 * when it is not (the program runs on any transport). */
static int64_t cost_send_cqes(int64_t *wrs)
{
    int (*counters_read)(int, enum dcxemu_counter_scope,
                         struct dcxemu_counters *);
    const char *lib = getenv("UCX_DCX_EMU_LIB");
    struct dcxemu_counters counters;
    int64_t total = 0;
    void *handle  = NULL;
    int dev, i;

    if (lib != NULL) {
        handle = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    }
    if (handle == NULL) {
        handle = dlopen("libdcxemu.so.0", RTLD_NOW | RTLD_NOLOAD);
    }
    *wrs = -1;
    if (handle == NULL) {
        return -1;
    }
    *wrs          = 0;
    counters_read = (int (*)(int, enum dcxemu_counter_scope,
                             struct dcxemu_counters *))
            dlsym(handle, "dcxemu_counters_read");
    COST_CHECK(counters_read != NULL, "finding dcxemu_counters_read");
    for (dev = 0; counters_read(dev, DCXEMU_SCOPE_PROCESS, &counters) == 0;
         ++dev) {
        total += counters.send_cqes;
        for (i = 0; i < DCXEMU_CNT_OP_MAX; ++i) {
            *wrs += counters.wr[i];
        }
    }
    dlclose(handle);
    return total;
}

/* The slot's earlier operation completed (progress until it did). */
static void cost_ucp_slot_wait(cost_t *c, unsigned slot)
{
    if (c->ucp_reqs[slot] != NULL) {
        cost_ucp_wait(c, c->ucp_reqs[slot]);
        c->ucp_reqs[slot] = NULL;
    }
}

static void cost_run(cost_t *c, uint64_t count)
{
    uint64_t i = 0;
    ucs_status_t status;

    while (i < count) {
        if (c->op >= COST_UCP_PUT) {
            cost_ucp_slot_wait(c, c->posted % COST_UCP_SLOTS);
        }
        status = cost_post(c, c->posted);
        ++c->tries;
        if ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
            if ((status == UCS_OK) && (c->op >= COST_PUT_ZCOPY) &&
                (c->op <= COST_FADD)) {
                --c->comp.count; /* done at once: no callback */
            }
            ++i;
            if ((c->posted++ % COST_POSTS_PER_PROGRESS) != 0) {
                continue;
            }
        } else {
            COST_CHECK(status == UCS_ERR_NO_RESOURCE, "posting");
            cost_op_failed(c);
        }
        while (cost_progress_tx(c) != 0) {
        }
        while (cost_progress_rx(c) != 0) {
        }
        if ((c->op == COST_UCP_TAG) &&
            (ucp_request_check_status(c->tag_req) != UCS_INPROGRESS)) {
            ucp_request_free(c->tag_req);
            cost_tag_recv_post(c);
        }
    }
    /* what completed is polled in the loop: a count of the sender's
     * progress per send CQE (bench cost mlx5) covers every CQE */
    while (cost_progress_tx(c) != 0) {
    }
}

int main(int argc, char **argv)
{
    cost_t c = {};
    uint64_t count, total, warmup, tries;
    const char *env;
    int64_t send_cqes, wrs, wrs_end;
    int op;

    if (argc != 3) {
        fprintf(stderr, "usage: dcx_cost OP COUNT (OP: put_short am_short "
                        "put_zcopy get_zcopy fadd ucp_put ucp_tag)\n");
        return 2;
    }
    for (op = 0; op < COST_LAST; ++op) {
        if (!strcmp(argv[1], cost_op_names[op])) {
            break;
        }
    }
    COST_CHECK(op < COST_LAST, "recognising the operation");
    c.op           = op;
    count          = strtoull(argv[2], NULL, 0);
    env            = getenv("DCX_COST_WARMUP");
    warmup         = (env != NULL) ? strtoull(env, NULL, 0) : COST_WARMUP;
    total          = warmup + count;
    env            = getenv("DCX_COST_TL");
    c.res.prog     = "dcx_cost";
    c.res.tl_name  = (env != NULL) ? env : "dcx";
    env            = getenv("DCX_COST_DEV");
    c.res.dev_name = (env != NULL) ? env : "dcxemu0:1";
    if (c.op >= COST_UCP_PUT) {
        env           = getenv("UCX_TLS");
        c.res.tl_name = (env != NULL) ? env : "ucp";
    }
    c.zcopy_size = COST_ZCOPY_SIZE;
    c.local      = aligned_alloc(4096, COST_ZCOPY_SIZE);
    c.remote     = aligned_alloc(4096, COST_ZCOPY_SIZE);
    COST_CHECK((c.local != NULL) && (c.remote != NULL), "aligned_alloc");
    memset(c.local, 0x5a, COST_ZCOPY_SIZE);
    memset(c.remote, 0, COST_ZCOPY_SIZE);
    c.comp.func   = cost_comp_cb;
    c.comp.count  = 1; /* dropped after the loop: the callback runs once */
    c.comp.status = UCS_OK;

    if (c.op >= COST_UCP_PUT) {
        cost_ucp_init(&c);
        if (c.op == COST_UCP_TAG) {
            cost_tag_recv_post(&c);
        }
    } else {
        cost_uct_init(&c);
    }

    cost_run(&c, warmup);
    send_cqes = cost_send_cqes(&wrs);
    c.tries   = 0;
    CALLGRIND_ZERO_STATS;
    cost_run(&c, count);
    CALLGRIND_DUMP_STATS_AT("measured");
    tries = c.tries;
    if (send_cqes >= 0) {
        send_cqes = cost_send_cqes(&wrs_end) - send_cqes;
        wrs       = wrs_end - wrs;
    }

    if (c.op >= COST_UCP_PUT) {
        if (c.op == COST_UCP_TAG) {
            while (c.tag_received < total) {
                ucp_worker_progress(c.tx.ucp_worker);
                ucp_worker_progress(c.rx.ucp_worker);
                if (ucp_request_check_status(c.tag_req) != UCS_INPROGRESS) {
                    ucp_request_free(c.tag_req);
                    c.tag_req = NULL;
                    if (c.tag_received < total) {
                        cost_tag_recv_post(&c);
                    }
                }
            }
        }
        cost_ucp_cleanup(&c);
        if ((c.op == COST_UCP_PUT) && (*(uint64_t *)c.remote != total - 1)) {
            fprintf(stderr,
                    "dcx_cost: the put data: %" PRIu64 ", expected %" PRIu64
                    "\n",
                    *(uint64_t *)c.remote, total - 1);
            exit(1);
        }
    } else {
        cost_uct_flush(&c);
        while ((c.op == COST_AM_SHORT) && (c.am_received < total)) {
            uct_worker_progress(c.rx.uct.worker);
        }
        COST_CHECK(c.comp.count == 1, "every completion");
        switch (c.op) {
        case COST_PUT_SHORT:
            COST_CHECK(*(uint64_t *)c.remote == total - 1, "the put data");
            break;
        case COST_PUT_ZCOPY:
            COST_CHECK((unsigned char)c.remote[c.zcopy_size - 1] == 0x5a,
                       "the put data");
            break;
        case COST_FADD:
            COST_CHECK(*(uint64_t *)c.remote == total, "the fetch-add data");
            break;
        default:
            break;
        }
        cost_uct_cleanup(&c);
    }

    printf("op=%s tl=%s count=%" PRIu64 " send_cqes=%" PRId64 " wrs=%" PRId64
           " tries=%" PRIu64 "\n",
           cost_op_names[c.op], c.res.tl_name, count, send_cqes, wrs, tries);
    free(c.local);
    free(c.remote);
    return 0;
}
