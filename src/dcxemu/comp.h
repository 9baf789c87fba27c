/* dcxemu completer stage (comp.c): send CQEs, syndromes, counters and the trace
 * of executed WQEs. */
#ifndef DCXEMU_COMP_H
#define DCXEMU_COMP_H

#include "exec.h"

/* The model's name of an opcode (trace). */
const char *dcxemu_op_name(uint32_t op);

/* Send CQE for the WQE at index i; returns 1 if a channel event was raised. */
int dcxemu_comp_send(struct dcxemu_qp *qp, struct dcxemu_wqe *w, uint64_t i,
                     const struct exec_out *o);

void dcxemu_comp_count(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                       const struct exec_out *o);

#endif
