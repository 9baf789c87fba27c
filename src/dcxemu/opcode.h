/* dcxemu opcode table (opcode.c): one row per model opcode (DCXEMU_OP_*), read
 * by the stages instead of switches on the opcode. */
#ifndef DCXEMU_OPCODE_H
#define DCXEMU_OPCODE_H

#include "exec.h"

/* QPs that execute an opcode */
enum {
    DCXEMU_QPT_DCI = 1 << 0,
    DCXEMU_QPT_RC  = 1 << 1,
    DCXEMU_QPT_ANY = DCXEMU_QPT_DCI | DCXEMU_QPT_RC
};

/* How the stages execute an opcode: the requester dispatches on it (req.c),
 * so the table holds data only and no stage reaches another through it. */
enum dcxemu_exec {
    DCXEMU_EXEC_NONE, /* nothing executes it (an unknown opcode) */
    DCXEMU_EXEC_NOP, /* completes in its turn, does nothing */
    DCXEMU_EXEC_LOCAL_MEM, /* a local key update (UMR, LOCAL_INV), mem.c */
    DCXEMU_EXEC_RECV, /* consumes a receive WQE at the target, resp.c */
    DCXEMU_EXEC_RDMA, /* reads or writes target memory, resp.c */
    DCXEMU_EXEC_ATOMIC /* read-modify-write of target memory, resp.c */
};

struct dcxemu_opcode {
    const char *name; /* trace */
    uint8_t qp_types; /* DCXEMU_QPT_*: QPs whose builders take it */
    uint8_t writes_local; /* the local buffer receives data: needs LOCAL_WRITE,
                             no inline */
    uint8_t atomic; /* one 4- or 8-byte operand */
    uint8_t imm; /* carries immediate data to the receive CQE */
    uint32_t remote_right; /* IBV_ACCESS_REMOTE_* the MR and the DCT must grant,
                              0: none */
    uint8_t exec; /* enum dcxemu_exec */
    uint32_t wc_opcode; /* send CQE opcode (a raw WQE's is MLX5DV_WC_RAW_WQE) */
    int cnt; /* DCXEMU_CNT_OP_*, -1: not counted */
};

/* The row of opcode op (an unknown opcode gets the row of DCXEMU_OP_NONE: no
 * handler). */
const struct dcxemu_opcode *dcxemu_opcode(uint32_t op);

#endif
