/* dcxemu out-of-order data placement (MLX5DV_QP_CREATE_OOO_DP): which QPs
 * have it, the capability the device reports, and what a DCI and a DCT that
 * both have it do differently -- the data of a WRITE, WRITE_IMM or SEND is
 * placed in chunks in a shuffled order, and a SEND or WRITE_IMM takes any of
 * the first receive WQEs of the SRQ, not its head.  Completions, READ and
 * atomic responses and the order of the receive CQEs stay as they are
 * (mlx5dv_create_qp(3)); so does everything of a pair where one side lacks
 * the flag. */
#define _GNU_SOURCE
#include "dcxemu_int.h"
#include "exec.h"

#include <errno.h>
#include <string.h>

/* A WQE's data goes out in at most this many chunks of at least this many
 * bytes: small messages keep some chunks, large ones are not cut to bytes. */
#define OOO_MAX_CHUNKS 16
#define OOO_MIN_CHUNK  64
/* A receive takes one of the first this many WQEs of the SRQ. */
#define OOO_RECV_WINDOW 8
/* Pieces of one side handed to one copy call. */
#define OOO_SLICE 32

void dcxemu_ooo_caps(struct dcxemu_mlx5dv_ooo_recv_wrs_caps *caps)
{
    memset(caps, 0, sizeof(*caps));
    if (dcxemu_cfg.ooo_dp) {
        /* libmlx5 (get_hca_general_caps): a linked-list receive queue (DC,
         * XRC) takes the context's max_recv_wr out of order */
        caps->max_dct = DCXEMU_MAX_QP_WR;
    }
}

int dcxemu_ooo_create_ok(void)
{
    return dcxemu_cfg.ooo_dp ? 0 : EOPNOTSUPP;
}

/* Fabric lock not held: the slot is the caller's and nobody reaches it yet
 * (a DCT before RTR, a DCI that only its owner executes). */
void dcxemu_ooo_mark(struct dcxemu_qp *qp)
{
    qp->ooo_dp                      = 1;
    dcxemu_fab->qps[qp->idx].ooo_dp = 1;
}

DCXEMU_API int dcxemu_qp_set_ooo_dp(struct ibv_qp *ibqp)
{
    struct dcxemu_qp *qp = (struct dcxemu_qp *)ibqp;
    int err;
    if (ibqp == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (qp->is_rc || (err = dcxemu_ooo_create_ok()) != 0) {
        return EOPNOTSUPP; /* the device offers it on DC only */
    }
    if (atomic_load(&qp->hw_state) != IBV_QPS_RESET) {
        return EINVAL; /* only with RESET->INIT */
    }
    dcxemu_ooo_mark(qp);
    return 0;
}

int dcxemu_ooo_pair(const struct dcxemu_qp *qp, const struct dcxemu_shm_qp *t)
{
    return qp->ooo_dp && t->is_dct && t->ooo_dp;
}

/* Swap the head WQE of srq with one of the next OOO_RECV_WINDOW (SRQ lock
 * held, not empty): the receive that takes the head takes that one. */
void dcxemu_ooo_recv_pick(struct dcxemu_shm_srq *srq)
{
    uint64_t n = srq->tail - srq->head, k;
    char tmp[sizeof(struct dcxemu_shm_srq_wqe) +
             DCXEMU_MAX_RQ_DESC / 16 * sizeof(struct ibv_sge)];
    char *a, *b;
    if (n > OOO_RECV_WINDOW) {
        n = OOO_RECV_WINDOW;
    }
    k = dcxemu_random() % n;
    if (k == 0 || srq->wqe_size > sizeof(tmp)) {
        return;
    }
    a = dcxemu_ptr(srq->ring_off + (srq->head % srq->max_wr) * srq->wqe_size);
    b = dcxemu_ptr(srq->ring_off +
                   ((srq->head + k) % srq->max_wr) * srq->wqe_size);
    memcpy(tmp, a, srq->wqe_size);
    memcpy(a, b, srq->wqe_size);
    memcpy(b, tmp, srq->wqe_size);
}

/* The pieces of v[0..n) that hold bytes [off, off + len), at most max of
 * them, into out (*k of them): the bytes they cover. */
static size_t iov_slice(const struct iovec *v, int n, size_t off, size_t len,
                        struct iovec *out, int max, int *k)
{
    size_t pos = 0, got = 0;
    *k = 0;
    for (int i = 0; i < n && got < len && *k < max; i++) {
        size_t l = v[i].iov_len, skip, take;
        if (pos + l <= off) {
            pos += l;
            continue;
        }
        skip             = off + got > pos ? off + got - pos : 0;
        take             = l - skip < len - got ? l - skip : len - got;
        out[*k].iov_base = (char *)v[i].iov_base + skip;
        out[*k].iov_len  = take;
        (*k)++;
        got += take;
        pos += l;
    }
    return got;
}

/* Bytes [off, off + len) of the WQE's data, as many copy calls as the pieces
 * need.  0 or errno as dcxemu_vm_copy. */
static int copy_range(const struct exec_plan *p, size_t off, size_t len)
{
    struct iovec l[OOO_SLICE], r[OOO_SLICE];
    int nl, nr, err;
    while (len > 0) {
        size_t lb = iov_slice(p->liov.v, p->liov.n, off, len, l, OOO_SLICE,
                              &nl);
        size_t rb = iov_slice(p->riov.v, p->riov.n, off, lb, r, OOO_SLICE, &nr);
        if (rb == 0) {
            return EINVAL; /* the pieces are shorter than the data: a bug */
        }
        if (rb < lb) {
            iov_slice(p->liov.v, p->liov.n, off, rb, l, OOO_SLICE, &nl);
        }
        if ((err = dcxemu_vm_copy(p->pid, 1, l, nl, r, nr)) != 0) {
            return err;
        }
        off += rb;
        len -= rb;
    }
    return 0;
}

int dcxemu_ooo_copy(const struct exec_plan *p, uint32_t qpn)
{
    size_t total = p->total, chunk, n;
    uint8_t order[OOO_MAX_CHUNKS];
    int err;
    chunk = (total + OOO_MAX_CHUNKS - 1) / OOO_MAX_CHUNKS;
    chunk = chunk < OOO_MIN_CHUNK ? OOO_MIN_CHUNK : chunk;
    n     = (total + chunk - 1) / chunk;
    for (size_t i = 0; i < n; i++) {
        order[i] = (uint8_t)i;
    }
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates, the model's seed */
        size_t j     = dcxemu_random() % i;
        uint8_t t    = order[i - 1];
        order[i - 1] = order[j];
        order[j]     = t;
    }
    for (size_t i = 0; i < n; i++) {
        size_t off = (size_t)order[i] * chunk;
        size_t len = total - off < chunk ? total - off : chunk;
        dcxemu_test_hook_call(DCXEMU_TEST_OOO_CHUNK, qpn, off);
        if ((err = copy_range(p, off, len)) != 0) {
            return err;
        }
    }
    return 0;
}
