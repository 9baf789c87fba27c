/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_floor: the raw speed of the software DC device, measured with plain
 * verbs (DCI -> DCT, ibv_wr_* + mlx5dv_wr_set_dc_addr) between two
 * processes, with no UCX in the way. It is the floor that dcx's overhead is
 * measured against (contrib/dcx bench).
 *
 *   dcx_floor [-n iters] [-w warmup] [-s size] [-t test] [-c csv]
 *   tests: write_lat send_lat read_lat write_bw send_bw read_bw memcpy_bw
 *
 * Latencies are the median of half a ping-pong (write_lat, send_lat) or of
 * one round trip (read_lat), in microseconds; bandwidth in MB/s (1e6 B),
 * streaming with 32 operations in flight. memcpy_bw is the reference the
 * device's data movement compares with: plain memcpy of size bytes in one
 * process, source and destination walking 256 MiB so that large copies miss
 * the caches, as the device's copies between processes do.
 */
#define _GNU_SOURCE
#include "dcxemu.h"

#include <errno.h>
#include <getopt.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FLOOR_QUEUE   128
#define FLOOR_RX_BUFS 128
#define FLOOR_KEY     0x5eed5eedull

typedef struct {
    uint32_t lid, dctn, rkey, pad;
    uint64_t dc_key, addr;
} floor_addr_t;

typedef struct {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq_ex *cq; /* send and receive completions */
    struct ibv_srq *srq;
    struct ibv_qp *dct, *dci;
    struct ibv_qp_ex *qpx;
    struct mlx5dv_qp_ex *mqpx;
    struct ibv_ah *ah;
    struct ibv_mr *mr;
    char *buf; /* [0,size): remote target; then rx bufs */
    long early_recvs; /* received before they were waited for */
    size_t size;
    floor_addr_t self, peer;
} floor_t;

static void die(const char *what)
{
    fprintf(stderr, "dcx_floor: %s: %s\n", what, strerror(errno));
    exit(2);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    errno = dcxemu_ibv_modify_qp(qp, attr, mask);
    if (errno != 0) {
        die("modify_qp");
    }
}

static void floor_open(floor_t *f, size_t size)
{
    struct mlx5dv_qp_init_attr dv = {};
    struct ibv_qp_init_attr_ex qa = {};
    struct ibv_srq_init_attr sa   = {};
    struct ibv_cq_init_attr_ex ca = {};
    struct ibv_port_attr port;
    struct ibv_qp_attr attr;
    struct ibv_device **list;
    int num;

    list = dcxemu_ibv_get_device_list(&num);
    if ((list == NULL) || (num < 1)) {
        die("no device");
    }
    f->ctx = dcxemu_mlx5dv_open_device(list[0], NULL);
    dcxemu_ibv_free_device_list(list);
    if (f->ctx == NULL) {
        die("open_device");
    }
    if (dcxemu_ibv_query_port(f->ctx, 1, &port) != 0) {
        die("query_port");
    }

    f->size = size;
    f->pd   = dcxemu_ibv_alloc_pd(f->ctx);
    if ((f->pd == NULL) || (posix_memalign((void **)&f->buf, 4096,
                                           size * (1 + FLOOR_RX_BUFS)) != 0)) {
        die("alloc");
    }
    memset(f->buf, 0, size * (1 + FLOOR_RX_BUFS));
    f->mr = dcxemu_ibv_reg_mr_iova2(f->pd, f->buf, size * (1 + FLOOR_RX_BUFS),
                                    (uintptr_t)f->buf,
                                    IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE |
                                            IBV_ACCESS_REMOTE_READ);
    if (f->mr == NULL) {
        die("reg_mr");
    }

    ca.cqe          = 4 * FLOOR_QUEUE + FLOOR_RX_BUFS;
    ca.wc_flags     = IBV_WC_EX_WITH_BYTE_LEN;
    f->cq           = dcxemu_ibv_create_cq_ex(f->ctx, &ca);
    sa.attr.max_wr  = FLOOR_RX_BUFS;
    sa.attr.max_sge = 1;
    f->srq          = dcxemu_ibv_create_srq(f->pd, &sa);
    if ((f->cq == NULL) || (f->srq == NULL)) {
        die("cq/srq");
    }

    /* DCT */
    qa.qp_type   = IBV_QPT_DRIVER;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD;
    qa.pd        = f->pd;
    qa.send_cq = qa.recv_cq        = ibv_cq_ex_to_cq(f->cq);
    qa.srq                         = f->srq;
    dv.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv.dc_init_attr.dct_access_key = FLOOR_KEY;
    f->dct                         = dcxemu_mlx5dv_create_qp(f->ctx, &qa, &dv);
    if (f->dct == NULL) {
        die("create dct");
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    modify(f->dct, &attr,
           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                   IBV_QP_ACCESS_FLAGS);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state         = IBV_QPS_RTR;
    attr.path_mtu         = IBV_MTU_4096;
    attr.min_rnr_timer    = 1;
    attr.ah_attr.port_num = 1;
    modify(f->dct, &attr,
           IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU);

    /* DCI */
    memset(&qa, 0, sizeof(qa));
    memset(&dv, 0, sizeof(dv));
    qa.qp_type   = IBV_QPT_DRIVER;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.pd        = f->pd;
    qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(f->cq);
    qa.cap.max_send_wr      = FLOOR_QUEUE;
    qa.cap.max_send_sge     = 1;
    qa.cap.max_inline_data  = 64;
    qa.send_ops_flags       = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
                        IBV_QP_EX_WITH_RDMA_READ;
    dv.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    f->dci                  = dcxemu_mlx5dv_create_qp(f->ctx, &qa, &dv);
    if (f->dci == NULL) {
        die("create dci");
    }
    f->qpx  = dcxemu_ibv_qp_to_qp_ex(f->dci);
    f->mqpx = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(f->qpx);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    modify(f->dci, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_4096;
    modify(f->dci, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = 14;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;
    attr.max_rd_atomic = 1;
    modify(f->dci, &attr,
           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);

    f->self.lid    = port.lid;
    f->self.dctn   = f->dct->qp_num;
    f->self.rkey   = f->mr->rkey;
    f->self.dc_key = FLOOR_KEY;
    f->self.addr   = (uintptr_t)f->buf;
}

static void floor_connect(floor_t *f)
{
    struct ibv_ah_attr ah = {};

    ah.dlid     = f->peer.lid;
    ah.port_num = 1;
    f->ah       = dcxemu_ibv_create_ah(f->pd, &ah);
    if (f->ah == NULL) {
        die("create_ah");
    }
}

static void post_recv(floor_t *f, int index)
{
    struct ibv_sge sge    = { (uintptr_t)(f->buf + f->size * (1 + index)),
                              (uint32_t)f->size, f->mr->lkey };
    struct ibv_recv_wr wr = { (uint64_t)index, NULL, &sge, 1 }, *bad;

    if (ibv_post_srq_recv(f->srq, &wr, &bad) != 0) {
        die("post_srq_recv");
    }
}

enum {
    OP_WRITE,
    OP_SEND,
    OP_READ
};

static void post(floor_t *f, int op, size_t len, int signaled, int inl)
{
    struct ibv_qp_ex *qpx = f->qpx;
    int ret;

    ibv_wr_start(qpx);
    qpx->wr_id    = op;
    qpx->wr_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if (op == OP_WRITE) {
        ibv_wr_rdma_write(qpx, f->peer.rkey, f->peer.addr);
    } else if (op == OP_SEND) {
        ibv_wr_send(qpx);
    } else {
        ibv_wr_rdma_read(qpx, f->peer.rkey, f->peer.addr);
    }
    if (inl) {
        ibv_wr_set_inline_data(qpx, f->buf, len);
    } else {
        ibv_wr_set_sge(qpx, f->mr->lkey, (uintptr_t)f->buf, len);
    }
    mlx5dv_wr_set_dc_addr(f->mqpx, f->ah, f->peer.dctn, f->peer.dc_key);
    ret = ibv_wr_complete(qpx);
    if (ret != 0) {
        errno = ret;
        die("wr_complete");
    }
}

/* Poll one completion; returns its wr_id (receives: the buffer index). */
static uint64_t poll_one(floor_t *f, int *is_recv)
{
    struct ibv_poll_cq_attr pa = {};
    uint64_t wr_id;
    int ret;

    while ((ret = ibv_start_poll(f->cq, &pa)) == ENOENT) {
    }
    if (ret != 0) {
        errno = ret;
        die("start_poll");
    }
    if (f->cq->status != IBV_WC_SUCCESS) {
        fprintf(stderr, "dcx_floor: completion error %d\n", f->cq->status);
        exit(3);
    }
    wr_id    = f->cq->wr_id;
    *is_recv = (ibv_wc_read_opcode(f->cq) == IBV_WC_RECV);
    ibv_end_poll(f->cq);
    return wr_id;
}

/* Poll until this many send and receive completions were seen (they have
 * no mutual order); receive buffers are reposted at once. */
static void wait_comps(floor_t *f, int sends, int recvs)
{
    int is_recv;
    uint64_t wr_id;
    long take;

    take = (f->early_recvs < recvs) ? f->early_recvs : recvs;
    f->early_recvs -= take;
    recvs -= take;
    while ((sends > 0) || (recvs > 0)) {
        wr_id = poll_one(f, &is_recv);
        if (is_recv) {
            post_recv(f, (int)wr_id);
            if (recvs > 0) {
                --recvs;
            } else {
                ++f->early_recvs; /* the peer's next message */
            }
        } else {
            --sends;
        }
    }
}

static void wait_send(floor_t *f)
{
    wait_comps(f, 1, 0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of per-iteration samples: robust against the preemptions of a
 * shared machine, like ucx_perftest's "typical" column. */
static double median(double *samples, long n)
{
    qsort(samples, n, sizeof(*samples), cmp_double);
    return samples[n / 2];
}

/* Ping-pong of WRITEs: each side polls the last byte of its buffer. */
static double write_pingpong(floor_t *f, int initiator, size_t len, long iters,
                             double *samples)
{
    volatile char *last = f->buf + len - 1;
    double t0;
    long i;

    for (i = 0; i < iters; ++i) {
        char seq = (char)(i % 127 + 1);
        t0       = now_us();
        if (initiator) {
            f->buf[len - 1] = seq;
            post(f, OP_WRITE, len, (i % 64) == 63, len <= 64);
            while (*last != (char)-seq) {
            }
        } else {
            while (*last != seq) {
            }
            f->buf[len - 1] = (char)-seq;
            post(f, OP_WRITE, len, (i % 64) == 63, len <= 64);
        }
        samples[i] = (now_us() - t0) / 2;
        if ((i % 64) == 63) {
            wait_send(f);
        }
    }
    return median(samples, iters);
}

static double send_pingpong(floor_t *f, int initiator, size_t len, long iters,
                            double *samples)
{
    double t0;
    long i;

    for (i = 0; i < iters; ++i) {
        t0 = now_us();
        if (initiator) {
            post(f, OP_SEND, len, 1, len <= 64);
            wait_comps(f, 1, 1);
        } else {
            wait_comps(f, 0, 1);
            post(f, OP_SEND, len, 1, len <= 64);
            wait_send(f);
        }
        samples[i] = (now_us() - t0) / 2;
    }
    return median(samples, iters);
}

static double read_lat(floor_t *f, size_t len, long iters, double *samples)
{
    double t0;
    long i;

    for (i = 0; i < iters; ++i) {
        t0 = now_us();
        post(f, OP_READ, len, 1, 0);
        wait_send(f);
        samples[i] = now_us() - t0;
    }
    return median(samples, iters);
}

static double write_bw(floor_t *f, size_t len, long iters)
{
    const int window = 32;
    long posted = 0, done = 0;
    double start = now_us();

    while (done < iters) {
        while ((posted < iters) && (posted - done < window)) {
            post(f, OP_WRITE, len, 1, 0);
            ++posted;
        }
        wait_send(f);
        ++done;
    }
    return (double)len * iters / (now_us() - start); /* bytes/us = MB/s */
}

/* Streaming SENDs or READs, like write_bw; the target of SENDs consumes
 * (and reposts) its receive buffers meanwhile. */
static double stream_bw(floor_t *f, int op, size_t len, long iters)
{
    const int window = 32;
    long posted = 0, done = 0;
    double start = now_us();

    while (done < iters) {
        while ((posted < iters) && (posted - done < window)) {
            post(f, op, len, 1, 0);
            ++posted;
        }
        wait_send(f);
        ++done;
    }
    return (double)len * iters / (now_us() - start);
}

#define MEMCPY_SPAN (256ul << 20)

static double memcpy_bw(size_t len, long iters)
{
    size_t span = (len < MEMCPY_SPAN / 2) ? MEMCPY_SPAN / 2 : len;
    char *src = malloc(span), *dst = malloc(span);
    size_t off = 0;
    double start;
    long i;

    if ((src == NULL) || (dst == NULL)) {
        die("malloc");
    }
    memset(src, 1, span);
    memset(dst, 2, span);
    start = now_us();
    for (i = 0; i < iters; ++i) {
        if (off + len > span) {
            off = 0;
        }
        memcpy(dst + off, src + off, len);
        off += len;
    }
    start = (double)len * iters / (now_us() - start);
    /* Keep the copies observable. */
    if (dst[len - 1] != 1) {
        die("memcpy");
    }
    free(src);
    free(dst);
    return start;
}

static long floor_max(long a, long b)
{
    return (a > b) ? a : b;
}

static void xfer(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n <= 0) {
            die("pipe");
        }
        p += n;
        len -= n;
    }
}

int main(int argc, char **argv)
{
    const char *test = "write_lat", *csv = NULL;
    long iters = 10000, warmup = 1000;
    size_t size = 8;
    int to_child[2], to_parent[2], c, status, initiator;
    double result = 0, *samples;
    floor_t f     = {};
    pid_t pid;
    char sync = 0;

    while ((c = getopt(argc, argv, "n:w:s:t:c:")) != -1) {
        switch (c) {
        case 'n':
            iters = atol(optarg);
            break;
        case 'w':
            warmup = atol(optarg);
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 't':
            test = optarg;
            break;
        case 'c':
            csv = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: dcx_floor [-n iters] [-w warmup] "
                    "[-s size] [-t write_lat|send_lat|read_lat|write_bw|"
                    "send_bw|read_bw|memcpy_bw] "
                    "[-c csv]\n");
            return 1;
        }
    }
    if ((size == 0) || (iters <= 0)) {
        fprintf(stderr, "dcx_floor: size and iterations must be > 0\n");
        return 1;
    }

    if (!strcmp(test, "memcpy_bw")) {
        memcpy_bw(size, warmup);
        result = memcpy_bw(size, iters);
        printf("%s size %zu: %.3f MB/s\n", test, size, result);
        return 0;
    }

    if ((pipe(to_child) != 0) || (pipe(to_parent) != 0)) {
        die("pipe");
    }

    /* Fork before opening the device: each process opens its own. */
    pid       = fork();
    initiator = (pid != 0);
    floor_open(&f, size);
    for (int i = 0; i < FLOOR_RX_BUFS; ++i) {
        post_recv(&f, i);
    }

    xfer(initiator ? to_child[1] : to_parent[1], &f.self, sizeof(f.self), 1);
    xfer(initiator ? to_parent[0] : to_child[0], &f.peer, sizeof(f.peer), 0);
    floor_connect(&f);

    samples = calloc(floor_max(iters, warmup) + 1, sizeof(*samples));
    if (samples == NULL) {
        die("calloc");
    }

    if (!strcmp(test, "write_lat")) {
        write_pingpong(&f, initiator, size, warmup, samples);
        result = write_pingpong(&f, initiator, size, iters, samples);
    } else if (!strcmp(test, "send_lat")) {
        send_pingpong(&f, initiator, size, warmup, samples);
        result = send_pingpong(&f, initiator, size, iters, samples);
    } else if (!strcmp(test, "read_lat") || !strcmp(test, "write_bw") ||
               !strcmp(test, "read_bw")) {
        if (initiator) {
            if (!strcmp(test, "read_lat")) {
                read_lat(&f, size, warmup, samples);
                result = read_lat(&f, size, iters, samples);
            } else if (!strcmp(test, "read_bw")) {
                stream_bw(&f, OP_READ, size, warmup);
                result = stream_bw(&f, OP_READ, size, iters);
            } else {
                write_bw(&f, size, warmup);
                result = write_bw(&f, size, iters);
            }
        }
    } else if (!strcmp(test, "send_bw")) {
        if (initiator) {
            stream_bw(&f, OP_SEND, size, warmup);
            result = stream_bw(&f, OP_SEND, size, iters);
        } else {
            wait_comps(&f, 0, (int)(warmup + iters));
        }
    } else {
        fprintf(stderr, "dcx_floor: unknown test %s\n", test);
        if (initiator) {
            kill(pid, SIGKILL);
        }
        return 1;
    }

    /* The target stays until the initiator is done. */
    if (initiator) {
        xfer(to_child[1], &sync, 1, 1);
        waitpid(pid, &status, 0);
        printf("%s size %zu: %.3f %s\n", test, size, result,
               strstr(test, "bw") ? "MB/s" : "us");
        if (csv != NULL) {
            FILE *out = fopen(csv, "a");
            if (out == NULL) {
                die(csv);
            }
            fprintf(out, "floor,%s,%zu,%.3f\n", test, size, result);
            fclose(out);
        }
        return (WIFEXITED(status) && (WEXITSTATUS(status) == 0)) ? 0 : 4;
    }

    xfer(to_child[0], &sync, 1, 0);
    return 0;
}
