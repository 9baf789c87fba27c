/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_halo: a halo exchange over UCT with strided zero-copy, the use case
 * dcx's UMR support exists for.
 *
 * NRANKS processes each own a COLS-wide slab of a ROWS x (NRANKS * COLS)
 * grid of doubles, stored row-major with one ghost column on each side:
 *
 *        ghost  interior columns 1..COLS  ghost
 *   row 0 [ W ][ . . . . . . . . . . . ][ E ]
 *   row 1 [ W ][ . . . . . . . . . . . ][ E ]     pitch = COLS + 2 doubles
 *
 * A column is strided in memory (one double every pitch). Each rank exposes
 * its two ghost columns to its neighbours as remote strided views
 * (uct_dcx_mem_view_create) and sends its own boundary columns with a
 * strided local iov: both sides strided, one put_zcopy per halo, no packing.
 * After every exchange each rank checks its ghosts against the values its
 * neighbours own. Ring topology; run it under dcx-run:
 *
 *   dcx-run --emu dcx_halo [NRANKS [ITERATIONS [ROWS [COLS]]]]
 */
#include <uct/api/uct.h>
#include <uct/ib/dcx/dcx.h>
#include <ucs/async/async_fwd.h>

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HALO_AM_ID     7
#define HALO_MAX_RANKS 16

typedef ucs_status_t (*view_create_fn_t)(uct_iface_h, uct_mem_h, void*,
                                         size_t, size_t, size_t, uct_mem_h*);
typedef ucs_status_t (*view_destroy_fn_t)(uct_iface_h, uct_mem_h);
typedef ucs_status_t (*query_umr_fn_t)(uct_iface_h, uct_dcx_umr_counters_t*);

typedef struct {
    int                  rank, nranks, iters;
    size_t               rows, cols, pitch;
    int                  left_fd, right_fd; /* sockets to the neighbours */
    ucs_async_context_t  *async;
    uct_worker_h         worker;
    uct_component_h      component;
    uct_md_h             md;
    uct_iface_h          iface;
    uct_iface_attr_t     iface_attr;
    uct_md_attr_t        md_attr;
    double               *grid;
    uct_mem_h            memh;
    uct_mem_h            view_west, view_east;
    uct_ep_h             ep_left, ep_right;
    uct_rkey_bundle_t    rkey_left, rkey_right; /* their ghost views */
    unsigned             notes[2];              /* "written" AMs per side */
    view_create_fn_t     view_create;
    view_destroy_fn_t    view_destroy;
    query_umr_fn_t       query_umr;
} halo_t;

static int die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "dcx_halo: %s: %s\n", what, ucs_status_string(status));
    exit(1);
}

#define CHECK(_call, _what) \
    do { \
        ucs_status_t _s = (_call); \
        if (_s != UCS_OK) { \
            die(_what, _s); \
        } \
    } while (0)

/* The value rank r holds at (row, interior column c) in iteration it. */
static double halo_value(int r, int it, size_t row, size_t c)
{
    return r * 1e6 + it * 1e3 + row * 10.0 + c * 0.001;
}

static double *cell(halo_t *h, size_t row, size_t col)
{
    return &h->grid[row * h->pitch + col];
}

/* Length-prefixed blobs between neighbours. */
static void blob_send(int fd, const void *data, uint32_t len)
{
    if ((write(fd, &len, sizeof(len)) != sizeof(len)) ||
        ((len > 0) && (write(fd, data, len) != (ssize_t)len))) {
        perror("dcx_halo: write");
        exit(1);
    }
}

static void *blob_recv(int fd, uint32_t *len_p)
{
    uint32_t len;
    char *buf;
    size_t got = 0;
    ssize_t n;

    if (read(fd, &len, sizeof(len)) != sizeof(len)) {
        fprintf(stderr, "dcx_halo: a neighbour went away\n");
        exit(1);
    }
    buf = malloc(len + 1);
    while (got < len) {
        n = read(fd, buf + got, len - got);
        if (n <= 0) {
            fprintf(stderr, "dcx_halo: short read from a neighbour\n");
            exit(1);
        }
        got += n;
    }
    *len_p = len;
    return buf;
}

static ucs_status_t halo_am(void *arg, void *data, size_t length,
                            unsigned flags)
{
    halo_t *h = arg;
    uint8_t side;

    memcpy(&side, (char*)data + sizeof(uint64_t), 1);
    ++h->notes[side & 1];
    return UCS_OK;
}

static void halo_open(halo_t *h)
{
    uct_component_h *components;
    uct_component_attr_t cattr;
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_iface_params_t params;
    unsigned i, num;

    CHECK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                   &h->async), "async context");
    CHECK(uct_worker_create(h->async, UCS_THREAD_MODE_SINGLE, &h->worker),
          "worker");
    CHECK(uct_query_components(&components, &num), "components");
    h->component = NULL;
    for (i = 0; i < num; ++i) {
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        uct_component_query(components[i], &cattr);
        if (!strcmp(cattr.name, "dcx")) {
            h->component = components[i];
        }
    }
    uct_release_component_list(components);
    if (h->component == NULL) {
        fprintf(stderr, "dcx_halo: no dcx component: run under dcx-run\n");
        exit(1);
    }

    CHECK(uct_md_config_read(h->component, NULL, NULL, &md_config),
          "md config");
    CHECK(uct_md_open(h->component, "dcxemu0", md_config, &h->md), "md open");
    uct_config_release(md_config);
    CHECK(uct_md_query(h->md, &h->md_attr), "md query");

    CHECK(uct_md_iface_config_read(h->md, "dcx", NULL, NULL, &iface_config),
          "iface config");
    memset(&params, 0, sizeof(params));
    params.field_mask            = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                   UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode             = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name   = "dcx";
    params.mode.device.dev_name  = "dcxemu0:1";
    CHECK(uct_iface_open(h->md, h->worker, &params, iface_config, &h->iface),
          "iface open");
    uct_config_release(iface_config);
    CHECK(uct_iface_query(h->iface, &h->iface_attr), "iface query");
    CHECK(uct_iface_set_am_handler(h->iface, HALO_AM_ID, halo_am, h, 0),
          "am handler");
    uct_iface_progress_enable(h->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    h->view_create  = (view_create_fn_t)dlsym(RTLD_DEFAULT,
                                              "uct_dcx_mem_view_create");
    h->view_destroy = (view_destroy_fn_t)dlsym(RTLD_DEFAULT,
                                               "uct_dcx_mem_view_destroy");
    h->query_umr    = (query_umr_fn_t)dlsym(RTLD_DEFAULT,
                                            "uct_dcx_iface_query_umr");
    if ((h->view_create == NULL) || (h->view_destroy == NULL) ||
        (h->query_umr == NULL)) {
        fprintf(stderr, "dcx_halo: the dcx plugin's extensions are not "
                "visible: run under dcx-run\n");
        exit(1);
    }
}

/* Address + the packed key of the ghost column view the peer writes. */
static void halo_send_addr(halo_t *h, int fd, uct_mem_h view)
{
    size_t dev_len   = h->iface_attr.device_addr_len;
    size_t iface_len = h->iface_attr.iface_addr_len;
    size_t rkey_len  = h->md_attr.rkey_packed_size;
    char *buf        = malloc(dev_len + iface_len + rkey_len);

    CHECK(uct_iface_get_device_address(h->iface, (uct_device_addr_t*)buf),
          "device address");
    CHECK(uct_iface_get_address(h->iface,
                                (uct_iface_addr_t*)(buf + dev_len)),
          "iface address");
    CHECK(uct_md_mkey_pack(h->md, view, buf + dev_len + iface_len),
          "view key pack");
    blob_send(fd, buf, dev_len + iface_len + rkey_len);
    free(buf);
}

static void halo_connect(halo_t *h, int fd, uct_ep_h *ep_p,
                         uct_rkey_bundle_t *rkey_p)
{
    size_t dev_len = h->iface_attr.device_addr_len;
    size_t if_len  = h->iface_attr.iface_addr_len;
    uct_ep_params_t ep_params;
    uint32_t len;
    char *buf = blob_recv(fd, &len);

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                           UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.iface      = h->iface;
    ep_params.dev_addr   = (const uct_device_addr_t*)buf;
    ep_params.iface_addr = (const uct_iface_addr_t*)(buf + dev_len);
    CHECK(uct_ep_create(&ep_params, ep_p), "ep create");
    CHECK(uct_rkey_unpack(h->component, buf + dev_len + if_len, rkey_p),
          "rkey unpack");
    free(buf);
}

static void progress_until(halo_t *h, unsigned *counter, unsigned target)
{
    time_t start = time(NULL);

    while (*counter < target) {
        uct_worker_progress(h->worker);
        if (time(NULL) - start > 60) {
            fprintf(stderr, "dcx_halo: rank %d: timed out\n", h->rank);
            exit(1);
        }
    }
}

typedef struct {
    uct_completion_t uct;
    unsigned         *done;
} halo_comp_t;

static void halo_comp_cb(uct_completion_t *self)
{
    halo_comp_t *c = ucs_container_of(self, halo_comp_t, uct);
    if (self->status != UCS_OK) {
        die("halo put", self->status);
    }
    ++*c->done;
}

/* Put my boundary column (interior column col) into the neighbour's ghost
 * view: strided on both sides. */
static void halo_put_column(halo_t *h, uct_ep_h ep, uct_rkey_t rkey,
                            size_t col, halo_comp_t *comp, unsigned *posted)
{
    uct_iov_t iov;
    ucs_status_t status;

    iov.buffer = cell(h, 0, col);
    iov.length = sizeof(double);
    iov.stride = h->pitch * sizeof(double);
    iov.count  = h->rows;
    iov.memh   = h->memh;
    comp->uct.func   = halo_comp_cb;
    comp->uct.count  = 1;
    comp->uct.status = UCS_OK;
    do {
        status = uct_ep_put_zcopy(ep, &iov, 1, 0, rkey, &comp->uct);
        if (status == UCS_ERR_NO_RESOURCE) {
            uct_worker_progress(h->worker); /* the layout is programmed */
        }
    } while (status == UCS_ERR_NO_RESOURCE);
    if (status == UCS_OK) {
        ++*comp->done;
    } else if (status != UCS_INPROGRESS) {
        die("put_zcopy", status);
    }
    ++*posted;
}

static void halo_note(halo_t *h, uct_ep_h ep, uint8_t side, int it)
{
    ucs_status_t status;
    do {
        status = uct_ep_am_short(ep, HALO_AM_ID, (uint64_t)it, &side, 1);
        if (status == UCS_ERR_NO_RESOURCE) {
            uct_worker_progress(h->worker);
        }
    } while (status == UCS_ERR_NO_RESOURCE);
    CHECK(status, "am_short");
}

static int halo_run(halo_t *h)
{
    int left  = (h->rank + h->nranks - 1) % h->nranks;
    int right = (h->rank + 1) % h->nranks;
    unsigned done = 0, posted = 0;
    halo_comp_t comps[2];
    size_t row, col, grid_bytes;
    uct_dcx_umr_counters_t ctr;
    int it, errors = 0;

    grid_bytes = h->rows * h->pitch * sizeof(double);
    h->grid    = aligned_alloc(4096, (grid_bytes + 4095) & ~(size_t)4095);
    memset(h->grid, 0, grid_bytes);
    CHECK(uct_md_mem_reg(h->md, h->grid, grid_bytes, UCT_MD_MEM_ACCESS_ALL,
                         &h->memh), "mem_reg");

    /* My ghost columns, exposed as strided views. */
    CHECK(h->view_create(h->iface, h->memh, cell(h, 0, 0), sizeof(double),
                         h->pitch * sizeof(double), h->rows, &h->view_west),
          "west ghost view");
    CHECK(h->view_create(h->iface, h->memh, cell(h, 0, h->cols + 1),
                         sizeof(double), h->pitch * sizeof(double), h->rows,
                         &h->view_east), "east ghost view");

    /* The left neighbour writes my west ghost, the right one my east. */
    halo_send_addr(h, h->left_fd, h->view_west);
    halo_send_addr(h, h->right_fd, h->view_east);
    halo_connect(h, h->right_fd, &h->ep_right, &h->rkey_right);
    halo_connect(h, h->left_fd, &h->ep_left, &h->rkey_left);
    comps[0].done = comps[1].done = &done;

    for (it = 0; it < h->iters; ++it) {
        for (row = 0; row < h->rows; ++row) {
            for (col = 1; col <= h->cols; ++col) {
                *cell(h, row, col) = halo_value(h->rank, it, row, col);
            }
        }

        /* My first column goes to the left's east ghost, my last column
         * to the right's west ghost; then a note says it is there. */
        halo_put_column(h, h->ep_left, h->rkey_left.rkey, 1, &comps[0],
                        &posted);
        halo_put_column(h, h->ep_right, h->rkey_right.rkey, h->cols,
                        &comps[1], &posted);
        progress_until(h, &done, posted);
        halo_note(h, h->ep_left, 1, it);  /* your east ghost is written */
        halo_note(h, h->ep_right, 0, it); /* your west ghost is written */
        progress_until(h, &h->notes[0], 2 * it + 1);
        progress_until(h, &h->notes[1], 2 * it + 1);

        for (row = 0; row < h->rows; ++row) {
            errors += (*cell(h, row, 0) !=
                       halo_value(left, it, row, h->cols));
            errors += (*cell(h, row, h->cols + 1) !=
                       halo_value(right, it, row, 1));
        }

        /* Nobody writes the next iteration before everyone checked. */
        halo_note(h, h->ep_left, 1, it);
        halo_note(h, h->ep_right, 0, it);
        progress_until(h, &h->notes[0], 2 * it + 2);
        progress_until(h, &h->notes[1], 2 * it + 2);
    }

    CHECK(h->query_umr(h->iface, &ctr), "umr counters");
    printf("dcx_halo: rank %d: %d iterations, %zu x %zu slab, %u columns "
           "moved strided -> strided view; umr: %lu zero-copy, %lu packed, "
           "%lu programmed, %lu cache hits; %s\n", h->rank, h->iters, h->rows,
           h->cols, posted, (unsigned long)ctr.zcopy_ops,
           (unsigned long)ctr.copy_ops, (unsigned long)ctr.umrs,
           (unsigned long)ctr.hits, errors ? "GHOSTS WRONG" : "ghosts verified");

    /* Quiesce before tearing down: everyone is done with my views. */
    while (uct_iface_flush(h->iface, 0, NULL) == UCS_INPROGRESS) {
        uct_worker_progress(h->worker);
    }
    blob_send(h->left_fd, "bye", 3);
    blob_send(h->right_fd, "bye", 3);
    {
        uint32_t len;
        free(blob_recv(h->left_fd, &len));
        free(blob_recv(h->right_fd, &len));
    }
    uct_rkey_release(h->component, &h->rkey_left);
    uct_rkey_release(h->component, &h->rkey_right);
    uct_ep_destroy(h->ep_left);
    uct_ep_destroy(h->ep_right);
    CHECK(h->view_destroy(h->iface, h->view_west), "view destroy");
    CHECK(h->view_destroy(h->iface, h->view_east), "view destroy");
    CHECK(uct_md_mem_dereg(h->md, h->memh), "mem_dereg");
    uct_iface_close(h->iface);
    uct_md_close(h->md);
    uct_worker_destroy(h->worker);
    ucs_async_context_destroy(h->async);
    free(h->grid);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    int nranks = (argc > 1) ? atoi(argv[1]) : 4;
    int iters  = (argc > 2) ? atoi(argv[2]) : 20;
    size_t rows = (argc > 3) ? strtoul(argv[3], NULL, 0) : 256;
    size_t cols = (argc > 4) ? strtoul(argv[4], NULL, 0) : 64;
    int ring[HALO_MAX_RANKS][2];
    int r, status, failed = 0;
    pid_t pids[HALO_MAX_RANKS];
    halo_t h;

    if ((nranks < 2) || (nranks > HALO_MAX_RANKS) || (iters < 1) ||
        (rows < 1) || (cols < 1) || ((cols + 2) * sizeof(double) > 65535)) {
        fprintf(stderr, "usage: dcx_halo [NRANKS 2..%d [ITERATIONS [ROWS "
                "[COLS < 8190]]]]\n", HALO_MAX_RANKS);
        return 2;
    }

    /* ring[r]: a socket pair between rank r and rank r + 1; made before
     * any process opens the device (a forked child must not use it). */
    for (r = 0; r < nranks; ++r) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, ring[r]) != 0) {
            perror("socketpair");
            return 1;
        }
    }

    for (r = 0; r < nranks; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            memset(&h, 0, sizeof(h));
            h.rank     = r;
            h.nranks   = nranks;
            h.iters    = iters;
            h.rows     = rows;
            h.cols     = cols;
            h.pitch    = cols + 2;
            h.right_fd = ring[r][0];
            h.left_fd  = ring[(r + nranks - 1) % nranks][1];
            halo_open(&h);
            exit(halo_run(&h));
        }
    }

    for (r = 0; r < nranks; ++r) {
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0)) {
            fprintf(stderr, "dcx_halo: rank %d failed\n", r);
            failed = 1;
        }
    }
    printf("dcx_halo: %s (%d ranks, %d iterations)\n",
           failed ? "FAILED" : "PASS", nranks, iters);
    return failed;
}
