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

/* Requester handler of a local operation (no target, no data copy), fabric lock
 * held. */
typedef void (*dcxemu_req_fn)(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                              struct exec_out *o);

/* Responder handler: the target side, fabric lock held; a data copy it leaves
 * in p follows without the lock. */
typedef enum exec_result (*dcxemu_resp_fn)(struct dcxemu_qp *qp,
                                           const struct dcxemu_wqe *w,
                                           const struct dcxemu_shm_qp *t,
                                           struct exec_plan *p,
                                           struct exec_out *o, int *wake);

struct dcxemu_opcode {
    const char *name; /* trace */
    uint8_t qp_types; /* DCXEMU_QPT_*: QPs whose builders take it */
    uint8_t writes_local; /* the local buffer receives data: needs LOCAL_WRITE,
                             no inline */
    uint8_t atomic; /* one 4- or 8-byte operand */
    uint8_t imm; /* carries immediate data to the receive CQE */
    uint32_t remote_right; /* IBV_ACCESS_REMOTE_* the MR and the DCT must grant,
                              0: none */
    dcxemu_req_fn req; /* local operation, or NULL */
    dcxemu_resp_fn resp; /* operation at a target, or NULL */
    uint32_t wc_opcode; /* send CQE opcode (a raw WQE's is MLX5DV_WC_RAW_WQE) */
    int cnt; /* DCXEMU_CNT_OP_*, -1: not counted */
};

/* The row of opcode op (an unknown opcode gets the row of DCXEMU_OP_NONE: no
 * handler). */
const struct dcxemu_opcode *dcxemu_opcode(uint32_t op);

#endif
