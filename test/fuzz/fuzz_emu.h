/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * A raw device of the software DC device model in the fuzzer's process: a
 * DCI, a DCT with its SRQ and a registered buffer, driven through the
 * model's entry points in the same library instance dcx uses (so both are
 * members of one fabric) and rdma-core's inline data-path wrappers.
 */
#ifndef DCX_FUZZ_EMU_H_
#define DCX_FUZZ_EMU_H_

#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#include <stddef.h>
#include <stdint.h>


#define DCX_FUZZ_EMU_SRQ_LEN  64 /* receives kept posted on the DCT */
#define DCX_FUZZ_EMU_RECV_LEN 256 /* bytes of each */


typedef struct {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *send_cq; /* the DCI's */
    struct ibv_cq *recv_cq; /* the DCT's */
    struct ibv_srq *srq;
    struct ibv_qp *dci;
    struct ibv_qp_ex *qpx;
    struct mlx5dv_qp_ex *dv;
    struct ibv_qp *dct;
    uint64_t dc_key; /* of the DCT */
    struct ibv_ah *ah; /* to LID 1 (RoCE: the GID below):
                                         every member's dcxemu0 */
    int roce; /* the port is Ethernet: GRH addresses */
    int ib_grh; /* an InfiniBand port that requires a
                                         GRH: its GID 0 in every address */
    uint8_t sgid_index; /* RoCE: dcx's default choice */
    union ibv_gid gid; /* RoCE: dcxemu0's GID at sgid_index */
    void *buf; /* registered, buf_len bytes */
    size_t buf_len;
    struct ibv_mr *mr;
    void *recv_buf; /* the SRQ's buffers */
    struct ibv_mr *recv_mr;
    unsigned srq_posted;
    uint32_t max_inline; /* written back at create */
    uint32_t max_sge;
    uint8_t rnr_retry;
    uint8_t retry;
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
} dcx_fuzz_emu_t;


/* Opens device dcxemu0 of the library dcx_fuzz_emu_lib() names. */
void dcx_fuzz_emu_open(dcx_fuzz_emu_t *e, size_t buf_len, uint8_t retry,
                       uint8_t rnr_retry);

/* The DCI back to RTS from whatever state an error left it in. */
void dcx_fuzz_emu_dci_reset(dcx_fuzz_emu_t *e);

/* Post one signaled marker (a zero-length write to our own DCT) and poll the
 * DCI's CQ until its completion, calling progress (may be NULL) between
 * polls; the marker completes after every WR posted before it. Returns
 * whether any completion had an error status (then the DCI is reset).
 * Aborts, as a hang, when the marker does not complete within the bounds. */
int dcx_fuzz_emu_drain(dcx_fuzz_emu_t *e, void (*progress)(void *), void *arg);

/* Receive completions of the DCT: polled, and the SRQ refilled. */
void dcx_fuzz_emu_recv_drain(dcx_fuzz_emu_t *e);

#endif
