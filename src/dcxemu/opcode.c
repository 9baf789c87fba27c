/* dcxemu opcode table: per model opcode, its name, QP types, access right, how
 * the stages execute it, its send CQE opcode and its counter.  Data only: the
 * requester dispatches on it. */
#define _GNU_SOURCE
#include "opcode.h"

static const struct dcxemu_opcode opcodes[] = {
    [DCXEMU_OP_NONE] = {
        .name = "none", .wc_opcode = IBV_WC_SEND, .cnt = -1,
    },
    [DCXEMU_OP_SEND] = {
        .name = "send", .qp_types = DCXEMU_QPT_ANY, .exec = DCXEMU_EXEC_RECV,
        .wc_opcode = IBV_WC_SEND, .cnt = DCXEMU_CNT_OP_SEND,
    },
    [DCXEMU_OP_SEND_IMM] = {
        .name = "send_imm", .qp_types = DCXEMU_QPT_ANY, .imm = 1, .exec = DCXEMU_EXEC_RECV,
        .wc_opcode = IBV_WC_SEND, .cnt = DCXEMU_CNT_OP_SEND_IMM,
    },
    [DCXEMU_OP_WRITE] = {
        .name = "write", .qp_types = DCXEMU_QPT_ANY, .remote_right = IBV_ACCESS_REMOTE_WRITE,
        .exec = DCXEMU_EXEC_RDMA, .wc_opcode = IBV_WC_RDMA_WRITE, .cnt = DCXEMU_CNT_OP_WRITE,
    },
    [DCXEMU_OP_WRITE_IMM] = {
        .name = "write_imm", .qp_types = DCXEMU_QPT_ANY, .imm = 1,
        .remote_right = IBV_ACCESS_REMOTE_WRITE, .exec = DCXEMU_EXEC_RECV,
        .wc_opcode = IBV_WC_RDMA_WRITE, .cnt = DCXEMU_CNT_OP_WRITE_IMM,
    },
    [DCXEMU_OP_READ] = {
        .name = "read", .qp_types = DCXEMU_QPT_ANY, .writes_local = 1,
        .remote_right = IBV_ACCESS_REMOTE_READ, .exec = DCXEMU_EXEC_RDMA,
        .wc_opcode = IBV_WC_RDMA_READ, .cnt = DCXEMU_CNT_OP_READ,
    },
    [DCXEMU_OP_CMP_SWP] = {
        .name = "atomic_cs", .qp_types = DCXEMU_QPT_ANY, .writes_local = 1, .atomic = 1,
        .remote_right = IBV_ACCESS_REMOTE_ATOMIC, .exec = DCXEMU_EXEC_ATOMIC,
        .wc_opcode = IBV_WC_COMP_SWAP, .cnt = DCXEMU_CNT_OP_ATOMIC_CS,
    },
    [DCXEMU_OP_FETCH_ADD] = {
        .name = "atomic_fa", .qp_types = DCXEMU_QPT_ANY, .writes_local = 1, .atomic = 1,
        .remote_right = IBV_ACCESS_REMOTE_ATOMIC, .exec = DCXEMU_EXEC_ATOMIC,
        .wc_opcode = IBV_WC_FETCH_ADD, .cnt = DCXEMU_CNT_OP_ATOMIC_FA,
    },
    [DCXEMU_OP_UMR_LIST] = {
        .name = "umr_list", .qp_types = DCXEMU_QPT_RC, .exec = DCXEMU_EXEC_LOCAL_MEM,
        .wc_opcode = IBV_WC_DRIVER1 /* MLX5DV_WC_UMR */, .cnt = DCXEMU_CNT_OP_UMR,
    },
    [DCXEMU_OP_UMR_INTERLEAVED] = {
        .name = "umr_interleaved", .qp_types = DCXEMU_QPT_RC, .exec = DCXEMU_EXEC_LOCAL_MEM,
        .wc_opcode = IBV_WC_DRIVER1, .cnt = DCXEMU_CNT_OP_UMR,
    },
    [DCXEMU_OP_LOCAL_INV] = {
        .name = "local_inv", .qp_types = DCXEMU_QPT_RC, .exec = DCXEMU_EXEC_LOCAL_MEM,
        .wc_opcode = IBV_WC_LOCAL_INV, .cnt = DCXEMU_CNT_OP_LOCAL_INV,
    },
    /* only as a raw WQE (MLX5_OPCODE_NOP): UCX posts them to have a CQE */
    [DCXEMU_OP_NOP] = {
        .name = "nop", .qp_types = DCXEMU_QPT_ANY, .exec = DCXEMU_EXEC_NOP,
        .wc_opcode = IBV_WC_SEND, .cnt = -1,
    },
};

const struct dcxemu_opcode *dcxemu_opcode(uint32_t op)
{
    return &opcodes[op < sizeof(opcodes) / sizeof(opcodes[0]) ? op :
                                                                DCXEMU_OP_NONE];
}
