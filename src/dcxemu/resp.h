/* dcxemu responder stage (resp.c): the target side of a WQE -- DCT, SRQ, access
 * checks, receive scatter and CQE, atomics. */
#ifndef DCXEMU_RESP_H
#define DCXEMU_RESP_H

#include "exec.h"

/* A target that vanished mid-operation is unreachable (retried, then
 * RETRY_EXC_ERR); any other failure to touch registered target memory is a
 * remote access error. */
enum exec_result dcxemu_copy_failed(int err, struct exec_out *o);

/* SEND, SEND_IMM and WRITE_IMM at the target (fabric lock held).  A WRITE_IMM
 * with data checks the rkey and that a receive WQE waits, and takes it only
 * once the data is placed (recv_finish). */
enum exec_result
dcxemu_resp_recv(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                 const struct dcxemu_shm_qp *t, struct exec_plan *p,
                 struct exec_out *o, int *wake);

/* The receive after its data copy (fabric lock held).  A SEND's WQE was taken
 * before the copy; a WRITE_IMM takes one now, and if another sender took the
 * last one meanwhile it is an RNR (the retry places the data again, as a
 * retransmission does). */
enum exec_result dcxemu_resp_recv_finish(struct exec_plan *p, int cerr,
                                         struct exec_out *o, int *wake);

/* Reach the target (fabric lock held): wrong LID/GID, unknown/destroyed/dead
 * DCT and wrong key all look alike.  *tp = the DCT's slot, or NULL when the WQE
 * ends here with the result. */
enum exec_result
dcxemu_resp_reach(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                  struct exec_out *o, struct dcxemu_shm_qp **tp);

/* A responder error (REM_ACCESS, REM_INV_REQ, REM_OP) at an RC target moves
 * it to ERR too, as hardware does (fabric lock held): peers no longer reach
 * it, and its owner (*wake) flushes its queues. */
void dcxemu_resp_rc_error(const struct exec_plan *p, const struct exec_out *o,
                          int *wake);

/* WRITE and READ at the target (fabric lock held): the rkey; the copy follows
 * without the lock. */
enum exec_result
dcxemu_resp_rdma(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                 const struct dcxemu_shm_qp *t, struct exec_plan *p,
                 struct exec_out *o, int *wake);

/* CMP_SWP and FETCH_ADD at the target: a read-modify-write of 4 or 8 bytes
 * under the fabric lock (not a bulk copy), so it is atomic with respect to all
 * device atomics on the fabric. */
enum exec_result
dcxemu_resp_atomic(struct dcxemu_qp *qp, const struct dcxemu_wqe *w,
                   const struct dcxemu_shm_qp *t, struct exec_plan *p,
                   struct exec_out *o, int *wake);

#endif
