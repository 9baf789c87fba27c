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
#include "demo_uct.h"

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

typedef struct {
    int rank, nranks, iters;
    size_t rows, cols, pitch;
    int left_fd, right_fd; /* sockets to the neighbours */
    demo_uct_t uct;
    double *grid;
    uct_mem_h memh;
    uct_mem_h view_west, view_east;
    uct_ep_h ep_left, ep_right;
    uct_rkey_bundle_t rkey_left, rkey_right; /* their ghost views */
    unsigned notes[2]; /* AMs per side */
} halo_t;

/* The value rank r holds at (row, interior column c) in iteration it. */
static double halo_value(int r, int it, size_t row, size_t c)
{
    return r * 1e6 + it * 1e3 + row * 10.0 + c * 0.001;
}

static double *cell(halo_t *h, size_t row, size_t col)
{
    return &h->grid[row * h->pitch + col];
}

static ucs_status_t
halo_am(void *arg, void *data, size_t length, unsigned flags)
{
    halo_t *h = arg;
    uint8_t side;

    memcpy(&side, (char *)data + sizeof(uint64_t), 1);
    ++h->notes[side & 1];
    return UCS_OK;
}

static void progress_until(halo_t *h, unsigned *counter, unsigned target)
{
    time_t start = time(NULL);

    while (*counter < target) {
        uct_worker_progress(h->uct.worker);
        if (time(NULL) - start > 60) {
            fprintf(stderr, "dcx_halo: rank %d: timed out\n", h->rank);
            exit(1);
        }
    }
}

typedef struct {
    uct_completion_t uct;
    unsigned *done;
} halo_comp_t;

static void halo_comp_cb(uct_completion_t *self)
{
    halo_comp_t *c = ucs_container_of(self, halo_comp_t, uct);
    demo_check(self->status, "halo put");
    ++*c->done;
}

/* Put my boundary column (interior column col) into the neighbour's ghost
 * view: strided on both sides. */
static void halo_put_column(halo_t *h, uct_ep_h ep, uct_rkey_t rkey, size_t col,
                            halo_comp_t *comp, unsigned *posted)
{
    uct_iov_t iov;
    ucs_status_t status;

    iov.buffer       = cell(h, 0, col);
    iov.length       = sizeof(double);
    iov.stride       = h->pitch * sizeof(double);
    iov.count        = h->rows;
    iov.memh         = h->memh;
    comp->uct.func   = halo_comp_cb;
    comp->uct.count  = 1;
    comp->uct.status = UCS_OK;
    do {
        status = uct_ep_put_zcopy(ep, &iov, 1, 0, rkey, &comp->uct);
        if (status == UCS_ERR_NO_RESOURCE) {
            uct_worker_progress(h->uct.worker); /* the layout is programmed */
        }
    } while (status == UCS_ERR_NO_RESOURCE);
    if (status == UCS_OK) {
        ++*comp->done;
    } else if (status != UCS_INPROGRESS) {
        demo_check(status, "put_zcopy");
    }
    ++*posted;
}

static void halo_note(halo_t *h, uct_ep_h ep, uint8_t side, int it)
{
    ucs_status_t status;
    do {
        status = uct_ep_am_short(ep, HALO_AM_ID, (uint64_t)it, &side, 1);
        if (status == UCS_ERR_NO_RESOURCE) {
            uct_worker_progress(h->uct.worker);
        }
    } while (status == UCS_ERR_NO_RESOURCE);
    demo_check(status, "am_short");
}

static int halo_run(halo_t *h)
{
    int left      = (h->rank + h->nranks - 1) % h->nranks;
    int right     = (h->rank + 1) % h->nranks;
    unsigned done = 0, posted = 0;
    halo_comp_t comps[2];
    size_t row, col, grid_bytes;
    uct_dcx_umr_counters_t ctr;
    int it, errors = 0;

    grid_bytes = h->rows * h->pitch * sizeof(double);
    h->grid    = aligned_alloc(4096, (grid_bytes + 4095) & ~(size_t)4095);
    memset(h->grid, 0, grid_bytes);
    demo_check(uct_md_mem_reg(h->uct.md, h->grid, grid_bytes,
                              UCT_MD_MEM_ACCESS_ALL, &h->memh),
               "mem_reg");

    /* My ghost columns, exposed as strided views. */
    demo_check(h->uct.view_create(h->uct.iface, h->memh, cell(h, 0, 0),
                                  sizeof(double), h->pitch * sizeof(double),
                                  h->rows, &h->view_west),
               "west ghost view");
    demo_check(h->uct.view_create(h->uct.iface, h->memh,
                                  cell(h, 0, h->cols + 1), sizeof(double),
                                  h->pitch * sizeof(double), h->rows,
                                  &h->view_east),
               "east ghost view");

    /* The left neighbour writes my west ghost, the right one my east. */
    demo_send_addr(&h->uct, h->left_fd, h->view_west);
    demo_send_addr(&h->uct, h->right_fd, h->view_east);
    demo_connect(&h->uct, h->right_fd, &h->ep_right, &h->rkey_right);
    demo_connect(&h->uct, h->left_fd, &h->ep_left, &h->rkey_left);
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
        halo_put_column(h, h->ep_right, h->rkey_right.rkey, h->cols, &comps[1],
                        &posted);
        progress_until(h, &done, posted);
        halo_note(h, h->ep_left, 1, it); /* your east ghost is written */
        halo_note(h, h->ep_right, 0, it); /* your west ghost is written */
        progress_until(h, &h->notes[0], 2 * it + 1);
        progress_until(h, &h->notes[1], 2 * it + 1);

        for (row = 0; row < h->rows; ++row) {
            errors += (*cell(h, row, 0) != halo_value(left, it, row, h->cols));
            errors += (*cell(h, row, h->cols + 1) !=
                       halo_value(right, it, row, 1));
        }

        /* Nobody writes the next iteration before everyone checked. */
        halo_note(h, h->ep_left, 1, it);
        halo_note(h, h->ep_right, 0, it);
        progress_until(h, &h->notes[0], 2 * it + 2);
        progress_until(h, &h->notes[1], 2 * it + 2);
    }

    demo_check(h->uct.query_umr(h->uct.iface, &ctr), "umr counters");
    printf("dcx_halo: rank %d: %d iterations, %zu x %zu slab, %u columns "
           "moved strided -> strided view; umr: %lu zero-copy, %lu packed, "
           "%lu programmed, %lu cache hits; %s\n",
           h->rank, h->iters, h->rows, h->cols, posted,
           (unsigned long)ctr.zcopy_ops, (unsigned long)ctr.copy_ops,
           (unsigned long)ctr.umrs, (unsigned long)ctr.hits,
           errors ? "GHOSTS WRONG" : "ghosts verified");

    /* Quiesce before tearing down: everyone is done with my views. */
    demo_flush(&h->uct);
    demo_blob_send(h->left_fd, "bye", 3);
    demo_blob_send(h->right_fd, "bye", 3);
    {
        uint32_t len;
        free(demo_blob_recv(h->left_fd, &len));
        free(demo_blob_recv(h->right_fd, &len));
    }
    uct_rkey_release(h->uct.component, &h->rkey_left);
    uct_rkey_release(h->uct.component, &h->rkey_right);
    uct_ep_destroy(h->ep_left);
    uct_ep_destroy(h->ep_right);
    demo_check(h->uct.view_destroy(h->uct.iface, h->view_west), "view destroy");
    demo_check(h->uct.view_destroy(h->uct.iface, h->view_east), "view destroy");
    demo_check(uct_md_mem_dereg(h->uct.md, h->memh), "mem_dereg");
    demo_uct_close(&h->uct);
    free(h->grid);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    int nranks  = (argc > 1) ? atoi(argv[1]) : 4;
    int iters   = (argc > 2) ? atoi(argv[2]) : 20;
    size_t rows = (argc > 3) ? strtoul(argv[3], NULL, 0) : 256;
    size_t cols = (argc > 4) ? strtoul(argv[4], NULL, 0) : 64;
    int ring[HALO_MAX_RANKS][2];
    int r, status, failed = 0;
    pid_t pids[HALO_MAX_RANKS];
    halo_t h;

    if ((nranks < 2) || (nranks > HALO_MAX_RANKS) || (iters < 1) ||
        (rows < 1) || (cols < 1) || ((cols + 2) * sizeof(double) > 65535)) {
        fprintf(stderr,
                "usage: dcx_halo [NRANKS 2..%d [ITERATIONS [ROWS "
                "[COLS < 8190]]]]\n",
                HALO_MAX_RANKS);
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
            demo_uct_open(&h.uct, NULL);
            demo_check(uct_iface_set_am_handler(h.uct.iface, HALO_AM_ID,
                                                halo_am, &h, 0),
                       "am handler");
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
