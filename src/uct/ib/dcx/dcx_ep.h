/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx endpoints as the interface sees them: the operations of its ops
 * table, and the calls its completion, flow-control and pending paths make
 * into the endpoint. The endpoint's own inline helpers are private to its
 * files (dcx_ep.inl).
 *
 *   dcx_ep.c          lifecycle, failure, flush, keepalive, fence, pending
 *   dcx_fc.c          active-message flow control, both halves
 *   dcx_ep_am.c       active messages
 *   dcx_ep_rma.c      put and get: short, bcopy, zcopy
 *   dcx_ep_strided.c  strided and long iov lists: packed or through UMR
 *   dcx_ep_sgl.c      the scatter-gather put (UCX >= 1.22)
 *   dcx_ep_amo.c      atomics: native, masked (raw WQEs), compare-swap loops
 */
#ifndef UCT_DCX_EP_H_
#define UCT_DCX_EP_H_

#include <uct/api/uct.h>
#include <ucs/datastruct/arbiter.h>


typedef struct uct_dcx_iface uct_dcx_iface_t;
typedef struct uct_dcx_ep uct_dcx_ep_t;
typedef struct uct_dcx_op uct_dcx_op_t;


/* The ops table (is_connected_to and put_sgl_zcopy, which depend on the
 * UCX release, are declared by compat/dcx_compat.h). */
ucs_status_t uct_dcx_ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p);
void uct_dcx_ep_destroy(uct_ep_h tl_ep);
ucs_status_t uct_dcx_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                 const void *payload, unsigned length);
ucs_status_t uct_dcx_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                     const uct_iov_t *iov, size_t iovcnt);
ssize_t uct_dcx_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                            uct_pack_callback_t pack_cb, void *arg,
                            unsigned flags);
ucs_status_t uct_dcx_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                 unsigned header_length, const uct_iov_t *iov,
                                 size_t iovcnt, unsigned flags,
                                 uct_completion_t *comp);
ucs_status_t uct_dcx_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                  unsigned length, uint64_t remote_addr,
                                  uct_rkey_t rkey);
ssize_t uct_dcx_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                             void *arg, uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t uct_dcx_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_dcx_ep_get_bcopy(uct_ep_h tl_ep,
                                  uct_unpack_callback_t unpack_cb, void *arg,
                                  size_t length, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_dcx_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_dcx_ep_atomic32_post(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                      uint32_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey);
ucs_status_t uct_dcx_ep_atomic32_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint32_t value, uint32_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp);
ucs_status_t uct_dcx_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare,
                                       uint32_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint32_t *result,
                                       uct_completion_t *comp);
ucs_status_t uct_dcx_ep_atomic64_post(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                      uint64_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey);
ucs_status_t uct_dcx_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint64_t value, uint64_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp);
ucs_status_t uct_dcx_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                       uint64_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint64_t *result,
                                       uct_completion_t *comp);
ucs_status_t
uct_dcx_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);
ucs_status_t uct_dcx_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t
uct_dcx_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);
ucs_status_t
uct_dcx_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags);
void uct_dcx_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                              void *arg);

/* What the interface calls: a failed DCI or device fails its endpoints,
 * flow-control timers ask again, the arbiter dispatches pending requests,
 * and the completion loop recognises flushes by their handler. */
void uct_dcx_ep_handle_failure(uct_dcx_ep_t *ep, ucs_status_t status);
void uct_dcx_ep_fc_request(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);
void uct_dcx_ep_fc_wait_remove(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);
ucs_arbiter_cb_result_t
uct_dcx_ep_pending_dispatch(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                            ucs_arbiter_elem_t *elem, void *arg);
void uct_dcx_op_flush_done(uct_dcx_op_t *op, ucs_status_t status);

#endif
