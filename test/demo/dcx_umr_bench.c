/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_umr_bench: one strided transfer (count blocks of length bytes, stride
 * apart, into contiguous remote memory) four ways, between two processes:
 *
 *   umr-first   put_zcopy of a strided iov whose layout is not cached (the
 *               UMR is part of the cost: layouts cycle through more
 *               buffers than the interface has mkeys)
 *   umr-cached  put_zcopy of a strided iov whose layout is cached
 *   per-element one put_short (or put_zcopy above the inline size) per
 *               block
 *   pack-bcopy  put_bcopy of packed segments
 *
 * Each transfer is waited for (flush) before the next. Prints one line per
 * method: "shape method usec_per_transfer MB/s". Run under dcx-run:
 *
 *   dcx-run --emu dcx_umr_bench LENGTH STRIDE COUNT [ITERATIONS]
 */
#include "demo_uct.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* More distinct layouts than mkeys, so "first use" never hits the cache. */
#define BENCH_MKEYS        4
#define BENCH_COLD_LAYOUTS 8

typedef struct {
    demo_uct_t uct;
    uct_ep_h ep;
    uct_rkey_bundle_t rkey;
    uint64_t raddr;
    char *src;
    uct_mem_h memh;
    size_t length, stride, count;
} bench_t;

typedef struct {
    const char *src;
    size_t length, stride, count, first, num;
} pack_arg_t;

static double now_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static size_t pack_blocks(void *dest, void *arg)
{
    pack_arg_t *p = arg;
    size_t i;

    for (i = 0; i < p->num; ++i) {
        memcpy((char *)dest + i * p->length,
               p->src + (p->first + i) * p->stride, p->length);
    }
    return p->num * p->length;
}

/* Retry an operation while resources are busy. */
#define BENCH_RETRY(_b, _call)                          \
    ({                                                  \
        ucs_status_t _s;                                \
        while ((_s = (_call)) == UCS_ERR_NO_RESOURCE) { \
            uct_worker_progress((_b)->uct.worker);      \
        }                                               \
        _s;                                             \
    })

static void bench_strided(bench_t *b, size_t offset)
{
    uct_iov_t iov;
    ucs_status_t status;

    iov.buffer = b->src + offset;
    iov.length = b->length;
    iov.stride = b->stride;
    iov.count  = b->count;
    iov.memh   = b->memh;
    status     = BENCH_RETRY(b, uct_ep_put_zcopy(b->ep, &iov, 1, b->raddr,
                                                 b->rkey.rkey, NULL));
    if ((status != UCS_OK) && (status != UCS_INPROGRESS)) {
        demo_check(status, "strided put_zcopy");
    }
}

static void bench_per_element(bench_t *b)
{
    size_t max_short = b->uct.iface_attr.cap.put.max_short;
    ucs_status_t status;
    uct_iov_t iov;
    size_t i;

    for (i = 0; i < b->count; ++i) {
        if (b->length <= max_short) {
            status = BENCH_RETRY(b,
                                 uct_ep_put_short(b->ep, b->src + i * b->stride,
                                                  b->length,
                                                  b->raddr + i * b->length,
                                                  b->rkey.rkey));
        } else {
            iov.buffer = b->src + i * b->stride;
            iov.length = b->length;
            iov.stride = 0;
            iov.count  = 1;
            iov.memh   = b->memh;
            status     = BENCH_RETRY(b, uct_ep_put_zcopy(b->ep, &iov, 1,
                                                         b->raddr + i * b->length,
                                                         b->rkey.rkey, NULL));
        }
        if ((status != UCS_OK) && (status != UCS_INPROGRESS)) {
            demo_check(status, "per-element put");
        }
    }
}

static void bench_pack_bcopy(bench_t *b)
{
    size_t per_seg = b->uct.iface_attr.cap.put.max_bcopy / b->length;
    pack_arg_t arg;
    ssize_t packed;
    size_t first;

    for (first = 0; first < b->count; first += per_seg) {
        arg.src    = b->src;
        arg.length = b->length;
        arg.stride = b->stride;
        arg.count  = b->count;
        arg.first  = first;
        arg.num    = (b->count - first < per_seg) ? b->count - first : per_seg;
        do {
            packed = uct_ep_put_bcopy(b->ep, pack_blocks, &arg,
                                      b->raddr + first * b->length,
                                      b->rkey.rkey);
            if (packed == UCS_ERR_NO_RESOURCE) {
                uct_worker_progress(b->uct.worker);
            }
        } while (packed == UCS_ERR_NO_RESOURCE);
        if (packed < 0) {
            demo_check((ucs_status_t)packed, "put_bcopy");
        }
    }
}

static int
bench_sender(int fd, size_t length, size_t stride, size_t count, int iters)
{
    static const char *settings[] = { "UMR_MKEYS=4", NULL };
    const char *methods[]         = { "umr-first", "umr-cached", "per-element",
                                      "pack-bcopy" };
    size_t span                   = (count - 1) * stride + length;
    size_t total                  = length * count;
    double start, usec;
    bench_t b;
    int m, i;

    memset(&b, 0, sizeof(b));
    demo_uct_open(&b.uct, settings);
    b.length = length;
    b.stride = stride;
    b.count  = count;
    /* Room for BENCH_COLD_LAYOUTS shifted copies of the layout. */
    b.src = aligned_alloc(4096,
                          ((span + BENCH_COLD_LAYOUTS) + 4095) & ~(size_t)4095);
    memset(b.src, 0x5a, span + BENCH_COLD_LAYOUTS);
    demo_check(uct_md_mem_reg(b.uct.md, b.src, span + BENCH_COLD_LAYOUTS,
                              UCT_MD_MEM_ACCESS_ALL, &b.memh),
               "mem_reg");
    demo_connect(&b.uct, fd, &b.ep, &b.rkey);
    {
        uint32_t len;
        uint64_t *raddr = demo_blob_recv(fd, &len);
        b.raddr         = *raddr;
        free(raddr);
    }

    for (m = 0; m < 4; ++m) {
        /* Warm up (and, for umr-cached, program the layout). */
        for (i = 0; i < 3; ++i) {
            switch (m) {
            case 0:
                bench_strided(&b, 1 + i % BENCH_COLD_LAYOUTS);
                break;
            case 1:
                bench_strided(&b, 0);
                break;
            case 2:
                bench_per_element(&b);
                break;
            default:
                bench_pack_bcopy(&b);
                break;
            }
            demo_flush(&b.uct);
        }

        start = now_usec();
        for (i = 0; i < iters; ++i) {
            switch (m) {
            case 0:
                bench_strided(&b, i % BENCH_COLD_LAYOUTS);
                break;
            case 1:
                bench_strided(&b, 0);
                break;
            case 2:
                bench_per_element(&b);
                break;
            default:
                bench_pack_bcopy(&b);
                break;
            }
            demo_flush(&b.uct);
        }
        usec = (now_usec() - start) / iters;
        printf("%zux%zu@%zu %s %.3f %.1f\n", length, count, stride, methods[m],
               usec, total / usec);
        fflush(stdout);
    }

    {
        uct_dcx_umr_counters_t c;
        demo_check(b.uct.query_umr(b.uct.iface, &c), "umr counters");
        fprintf(stderr,
                "dcx_umr_bench: umr %lu zero-copy, %lu packed, "
                "%lu programmed, %lu hits, %lu evictions\n",
                (unsigned long)c.zcopy_ops, (unsigned long)c.copy_ops,
                (unsigned long)c.umrs, (unsigned long)c.hits,
                (unsigned long)c.evictions);
    }

    demo_blob_send(fd, "bye", 3);
    uct_rkey_release(b.uct.component, &b.rkey);
    uct_ep_destroy(b.ep);
    demo_check(uct_md_mem_dereg(b.uct.md, b.memh), "mem_dereg");
    demo_uct_close(&b.uct);
    free(b.src);
    return 0;
}

static int bench_receiver(int fd, size_t total)
{
    char *dst      = aligned_alloc(4096, (total + 4095) & ~(size_t)4095);
    uint64_t raddr = (uintptr_t)dst;
    struct timeval tv;
    demo_uct_t d;
    uct_mem_h memh;
    fd_set fds;

    demo_uct_open(&d, NULL);
    demo_check(uct_md_mem_reg(d.md, dst, total, UCT_MD_MEM_ACCESS_ALL, &memh),
               "mem_reg");
    demo_send_addr(&d, fd, memh);
    demo_blob_send(fd, &raddr, sizeof(raddr));

    /* One-sided: serve the device until the sender says goodbye. */
    for (;;) {
        uct_worker_progress(d.worker);
        FD_ZERO(&fds);
        FD_SET(fd, &fds);
        tv.tv_sec  = 0;
        tv.tv_usec = 0;
        if (select(fd + 1, &fds, NULL, NULL, &tv) > 0) {
            uint32_t len;
            free(demo_blob_recv(fd, &len));
            break;
        }
    }

    demo_check(uct_md_mem_dereg(d.md, memh), "mem_dereg");
    demo_uct_close(&d);
    free(dst);
    return 0;
}

int main(int argc, char **argv)
{
    size_t length, stride, count;
    int iters, sv[2], status, rc;
    pid_t pid;

    if (argc < 4) {
        fprintf(stderr, "usage: dcx_umr_bench LENGTH STRIDE COUNT "
                        "[ITERATIONS]\n");
        return 2;
    }
    length = strtoul(argv[1], NULL, 0);
    stride = strtoul(argv[2], NULL, 0);
    count  = strtoul(argv[3], NULL, 0);
    iters  = (argc > 4) ? atoi(argv[4]) : 100;
    if ((length == 0) || (count == 0) || (stride < length) || (iters < 1)) {
        fprintf(stderr, "dcx_umr_bench: bad shape\n");
        return 2;
    }

    /* Both processes open the device after the fork. */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        return 1;
    }
    pid = fork();
    if (pid == 0) {
        close(sv[0]);
        return bench_receiver(sv[1], length * count);
    }
    close(sv[1]);
    rc = bench_sender(sv[0], length, stride, count, iters);
    waitpid(pid, &status, 0);
    return (rc == 0) && WIFEXITED(status) && (WEXITSTATUS(status) == 0) ? 0 : 1;
}
