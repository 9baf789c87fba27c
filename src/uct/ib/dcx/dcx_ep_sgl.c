/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The scatter-gather put (uct_ep_put_sgl_zcopy, UCX >= 1.22): a call's
 * elements go out as one batch of RDMA WRITEs on the endpoint's DCI (one
 * doorbell). Runs of elements whose remote ranges follow each other in one
 * registration become one write, whose local side is the elements' own
 * bytes when they follow each other there too, else an mkey (interleaved
 * when evenly spaced, a list otherwise).
 */
#include "dcx_ep.inl"


/* --- scatter-gather put (uct_ep_put_sgl_zcopy, UCX >= 1.22) ------------ */

/* Check one call's elements and count its work requests: one per block (an
 * element is counts[i] blocks of lengths[i] bytes, strides[i] apart on both
 * sides). Empty elements and blocks post nothing. */
static ucs_status_t
uct_dcx_ep_sgl_check(uct_dcx_iface_t *iface, void *const *buffers,
                     const size_t *lengths, uct_mem_h const *memhs,
                     const uint64_t *remote_addrs, uct_rkey_t const *rkeys,
                     const size_t *counts, const size_t *strides, size_t count,
                     size_t *num_wrs_p)
{
    size_t i, blocks, num_wrs = 0;
    ucs_status_t status;

    if ((count > 0) &&
        ((buffers == NULL) || (lengths == NULL) || (memhs == NULL) ||
         (remote_addrs == NULL) || (rkeys == NULL))) {
        ucs_error("dcx: put_sgl_zcopy: NULL element array");
        return UCS_ERR_INVALID_PARAM;
    }
    if ((counts == NULL) != (strides == NULL)) {
        ucs_error("dcx: put_sgl_zcopy: counts and strides go together");
        return UCS_ERR_INVALID_PARAM;
    }
    if (count > iface->tx.put_sgl_max) {
        ucs_error("dcx: put_sgl_zcopy: %zu elements, at most %zu", count,
                  iface->tx.put_sgl_max);
        return UCS_ERR_INVALID_PARAM;
    }

    for (i = 0; i < count; ++i) {
        blocks = (counts == NULL) ? 1 : counts[i];
        if ((lengths[i] == 0) || (blocks == 0)) {
            continue;
        }
        if (lengths[i] > iface->port_attr.max_msg_sz) {
            ucs_error("dcx: put_sgl_zcopy: element %zu: %zu bytes, at most %u",
                      i, lengths[i], iface->port_attr.max_msg_sz);
            return UCS_ERR_INVALID_PARAM;
        }
        if (memhs[i] == UCT_MEM_HANDLE_NULL) {
            ucs_error("dcx: put_sgl_zcopy: element %zu has no memory handle",
                      i);
            return UCS_ERR_INVALID_PARAM;
        }
        status = uct_dcx_memh_check_span(memhs[i], buffers[i], lengths[i],
                                         (strides == NULL) ? 0 : strides[i],
                                         blocks, "put_sgl_zcopy", i);
        if (status != UCS_OK) {
            return status;
        }
        status = uct_dcx_ep_check_rkey(rkeys[i], lengths[i]);
        if (status != UCS_OK) {
            return status;
        }
        num_wrs += blocks;
        if (num_wrs > iface->tx.put_sgl_max) {
            ucs_error("dcx: put_sgl_zcopy: more than %zu blocks in one call",
                      iface->tx.put_sgl_max);
            return UCS_ERR_INVALID_PARAM;
        }
    }

    *num_wrs_p = num_wrs;
    return UCS_OK;
}

/* Whether the @a wr-th write of an SGL batch asks for a completion: the
 * last one when an operation waits for it, and on the way as any request.
 * @a unsignaled: before this write. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_sgl_signal(const uct_dcx_iface_t *iface, unsigned unsignaled,
                      size_t wr, size_t num_wrs, int need_completion)
{
    return uct_dcx_iface_signal_after(iface, unsignaled,
                                      (wr + 1 == num_wrs) && need_completion);
}

/* Elements [first, first + n) of an SGL call that go out together: when
 * their remote ranges follow each other in one registration, one RDMA
 * WRITE (merged) whose local side is the elements' own bytes when they
 * follow each other there too, an interleaved mkey when they are evenly
 * spaced (same length, same registration), else a list mkey; otherwise
 * one write per element (per block with counts). */
typedef struct {
    size_t first;
    size_t n;
    size_t total;
    size_t stride; /* local distance between the elements
                                   while they are evenly spaced, else 0 */
    int merged; /* one write for the whole run */
    uct_dcx_umr_mkey_t *mkey; /* its local side, unless contiguous */
} uct_dcx_sgl_run_t;

/* The writes of element @a i outside a merged run: one per block, or one
 * for all its blocks when they follow each other (stride = length, so on
 * both sides) and fit one message. */
static UCS_F_ALWAYS_INLINE size_t
uct_dcx_ep_sgl_blocks(const uct_dcx_iface_t *iface, const size_t *lengths,
                      const size_t *counts, const size_t *strides, size_t i)
{
    size_t total;

    if (counts == NULL) {
        return 1;
    }
    if ((strides[i] == lengths[i]) &&
        !__builtin_mul_overflow(counts[i], lengths[i], &total) &&
        (total <= iface->port_attr.max_msg_sz)) {
        return 1;
    }
    return counts[i];
}

/* Whether element @a i lands right after element @a prev in the same
 * registration. */
static UCS_F_ALWAYS_INLINE int
uct_dcx_ep_sgl_adjacent(const size_t *lengths, const uint64_t *remote_addrs,
                        uct_rkey_t const *rkeys, size_t prev, size_t i)
{
    return (rkeys[i] == rkeys[prev]) &&
           (remote_addrs[i] == remote_addrs[prev] + lengths[prev]);
}

/* The local distance from the run's last element to element @a i if it
 * keeps the run evenly spaced (same length and registration, the same
 * distance as before, one an interleaved mkey can describe or 0 bytes of
 * gap), else 0. @a umr: whether gaps can be mapped. */
static size_t
uct_dcx_ep_sgl_even_stride(const uct_dcx_sgl_run_t *run, void *const *buffers,
                           const size_t *lengths, uct_mem_h const *memhs,
                           int umr, size_t i)
{
    size_t last = run->first + run->n - 1;
    uintptr_t from, to;

    if (((run->n > 1) && (run->stride == 0)) || (lengths[i] != lengths[last]) ||
        (memhs[i] != memhs[last])) {
        return 0;
    }
    from = (uintptr_t)buffers[last];
    to   = (uintptr_t)buffers[i];
    if ((to < from + lengths[i]) || (to - from > UCT_DCX_UMR_MAX_FIELD) ||
        ((run->n > 1) && (to - from != run->stride)) ||
        (!umr && (to - from != lengths[i]))) {
        return 0;
    }
    return to - from;
}

/* Add element @a i to the run @a run if its remote range follows the run's
 * in the same registration: evenly spaced elements without a bound, others
 * up to one list mkey (@a list_max, 1 without UMR). */
static int
uct_dcx_ep_sgl_extend(const uct_dcx_iface_t *iface, uct_dcx_sgl_run_t *run,
                      void *const *buffers, const size_t *lengths,
                      uct_mem_h const *memhs, const uint64_t *remote_addrs,
                      uct_rkey_t const *rkeys, unsigned list_max, size_t i)
{
    size_t stride;

    if (!uct_dcx_ep_sgl_adjacent(lengths, remote_addrs, rkeys,
                                 run->first + run->n - 1, i) ||
        (run->total + lengths[i] > iface->port_attr.max_msg_sz) ||
        (run->total + lengths[i] > INT32_MAX)) {
        return 0;
    }
    stride = uct_dcx_ep_sgl_even_stride(run, buffers, lengths, memhs,
                                        list_max > 1, i);
    if ((stride == 0) && (run->n >= list_max)) {
        return 0;
    }
    run->stride = stride;
    run->total += lengths[i];
    ++run->n;
    return 1;
}

/* Whether two non-empty elements of the call land next to each other in one
 * registration: only then is the UMR engine worth creating (its QP is
 * polled by every progress call once it exists). */
static int uct_dcx_ep_sgl_has_adjacent(const size_t *lengths,
                                       const uint64_t *remote_addrs,
                                       uct_rkey_t const *rkeys, size_t count)
{
    size_t i, prev = SIZE_MAX;

    for (i = 0; i < count; ++i) {
        if (lengths[i] == 0) {
            continue;
        }
        if ((prev != SIZE_MAX) &&
            uct_dcx_ep_sgl_adjacent(lengths, remote_addrs, rkeys, prev, i)) {
            return 1;
        }
        prev = i;
    }
    return 0;
}

/* Cut the call into runs (see uct_dcx_sgl_run_t): without per-element
 * counts, elements join the run before them when uct_dcx_ep_sgl_extend
 * allows; *umr_p: the UMR engine when runs may need mkeys, else NULL. */
static size_t uct_dcx_ep_sgl_cut(uct_dcx_iface_t *iface, void *const *buffers,
                                 const size_t *lengths, uct_mem_h const *memhs,
                                 const uint64_t *remote_addrs,
                                 uct_rkey_t const *rkeys, const size_t *counts,
                                 size_t count, uct_dcx_sgl_run_t *runs,
                                 uct_dcx_umr_t **umr_p)
{
    unsigned list_max = 1;
    size_t num_runs   = 0;
    uct_dcx_sgl_run_t *run;
    size_t i;

    *umr_p = NULL;
    if ((counts == NULL) && (count > 1) && (iface->umr.enable != UCS_NO) &&
        uct_dcx_ep_sgl_has_adjacent(lengths, remote_addrs, rkeys, count) &&
        (uct_dcx_iface_umr_engine(iface, umr_p) == UCS_OK)) {
        list_max = ucs_min((*umr_p)->list_max, UCT_DCX_UMR_LIST_MAX);
    }

    for (i = 0; i < count; ++i) {
        if ((lengths[i] == 0) || ((counts != NULL) && (counts[i] == 0))) {
            continue;
        }
        if ((num_runs > 0) && (counts == NULL) &&
            uct_dcx_ep_sgl_extend(iface, &runs[num_runs - 1], buffers, lengths,
                                  memhs, remote_addrs, rkeys, list_max, i)) {
            continue;
        }
        run         = &runs[num_runs++];
        run->first  = i;
        run->n      = 1;
        run->total  = lengths[i];
        run->stride = 0;
        run->merged = 0;
        run->mkey   = NULL;
    }
    return num_runs;
}

/* The mkey of a merged run that is not contiguous on the local side: an
 * interleaved one when its elements are evenly spaced, else a list. */
static ucs_status_t
uct_dcx_ep_sgl_run_mkey(uct_dcx_umr_t *umr, uct_dcx_sgl_run_t *run,
                        void *const *buffers, const size_t *lengths,
                        uct_mem_h const *memhs)
{
    struct ibv_sge pieces[UCT_DCX_UMR_LIST_MAX];
    uct_dcx_umr_layout_t layout;
    size_t i;

    if (run->stride != 0) {
        layout.addr   = (uintptr_t)buffers[run->first];
        layout.lkey   = uct_dcx_memh_lkey(memhs[run->first]);
        layout.length = lengths[run->first];
        layout.stride = run->stride;
        layout.count  = run->n;
        return uct_dcx_umr_layout_fits(umr, &layout) ?
                       uct_dcx_umr_get(umr, &layout, &run->mkey) :
                       UCS_ERR_INVALID_PARAM;
    }

    for (i = 0; i < run->n; ++i) {
        pieces[i].addr   = (uintptr_t)buffers[run->first + i];
        pieces[i].length = lengths[run->first + i];
        pieces[i].lkey   = uct_dcx_memh_lkey(memhs[run->first + i]);
    }
    return uct_dcx_umr_get_list(umr, pieces, run->n, &run->mkey);
}

/* Cut the call into runs; merge runs of 2 or more elements (see
 * uct_dcx_sgl_run_t) when there are no per-element counts; an element whose
 * blocks follow each other is one write. *num_wrs_p: the work requests the
 * runs take. */
static ucs_status_t
uct_dcx_ep_sgl_runs(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                    void *const *buffers, const size_t *lengths,
                    uct_mem_h const *memhs, const uint64_t *remote_addrs,
                    uct_rkey_t const *rkeys, const size_t *counts,
                    const size_t *strides, size_t count,
                    uct_dcx_sgl_run_t *runs, size_t *num_runs_p,
                    size_t *num_wrs_p)
{
    size_t num_wrs = 0;
    uct_dcx_sgl_run_t *run;
    size_t r, num_runs;
    ucs_status_t status;
    uct_dcx_umr_t *umr;

    num_runs = uct_dcx_ep_sgl_cut(iface, buffers, lengths, memhs, remote_addrs,
                                  rkeys, counts, count, runs, &umr);
    for (r = 0; r < num_runs; ++r) {
        run = &runs[r];
        if (run->n < 2) {
            num_wrs += uct_dcx_ep_sgl_blocks(iface, lengths, counts, strides,
                                             run->first);
            continue;
        }
        run->merged = 1;
        if (run->stride == lengths[run->first]) {
            /* Contiguous on both sides: one plain write. */
            ++num_wrs;
            continue;
        }
        status = uct_dcx_ep_sgl_run_mkey(umr, run, buffers, lengths, memhs);
        if (status == UCS_ERR_INVALID_PARAM) {
            /* the device refused the layout: one by one */
            run->mkey   = NULL;
            run->merged = 0;
            num_wrs += run->n;
            continue;
        }
        if (status != UCS_OK) {
            /* Being programmed, or every mkey busy: the whole call waits,
             * and the mkeys taken so far go back. */
            while (r-- > 0) {
                if (runs[r].mkey != NULL) {
                    uct_dcx_umr_put(umr, runs[r].mkey);
                }
            }
            return uct_dcx_ep_umr_wait(iface, ep, status);
        }
        ++num_wrs;
    }

    ep->flags &= ~UCT_DCX_EP_FLAG_WAIT_UMR;
    *num_runs_p = num_runs;
    *num_wrs_p  = num_wrs;
    return UCS_OK;
}

/* Undo what an SGL call took before it posted. */
static void uct_dcx_ep_sgl_release(uct_dcx_iface_t *iface,
                                   uct_dcx_sgl_run_t *runs, size_t num_runs,
                                   uct_dcx_op_t **ops, size_t num_ops)
{
    size_t r;

    for (r = 0; r < num_runs; ++r) {
        if (runs[r].mkey != NULL) {
            uct_dcx_umr_put(iface->umr.engine, runs[r].mkey);
        }
    }
    while (num_ops-- > 0) {
        ucs_mpool_put_inline(ops[num_ops]);
    }
}

/* Post the runs' writes as one batch (num_wrs work requests); run_sn[r]:
 * the sequence number of run r's last write. */
static void
uct_dcx_ep_sgl_post(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                    uct_dcx_dci_t *dci, const uct_dcx_peer_t *peer,
                    void *const *buffers, const size_t *lengths,
                    uct_mem_h const *memhs, const uint64_t *remote_addrs,
                    uct_rkey_t const *rkeys, const size_t *counts,
                    const size_t *strides, const uct_dcx_sgl_run_t *runs,
                    size_t num_runs, size_t num_wrs, int need_completion,
                    uint64_t *run_sn)
{
    struct ibv_qp_ex *qpx = dci->qpx;
    unsigned unsignaled   = dci->unsignaled;
    size_t r, i, b, blocks, stride, length, wr = 0;
    int signal;

    for (r = 0; r < num_runs; ++r) {
        for (i = runs[r].first; i < runs[r].first + runs[r].n; ++i) {
            blocks = runs[r].merged ? 1 :
                                      uct_dcx_ep_sgl_blocks(iface, lengths,
                                                            counts, strides, i);
            stride = (strides == NULL) ? 0 : strides[i];
            length = ((blocks == 1) && (counts != NULL)) ?
                             counts[i] * lengths[i] :
                             lengths[i];
            for (b = 0; b < blocks; ++b, ++wr) {
                signal = uct_dcx_ep_sgl_signal(iface, unsignaled, wr, num_wrs,
                                               need_completion);
                unsignaled    = signal ? 0 : unsignaled + 1;
                qpx->wr_id    = UCT_DCX_WR_ID(ep->dci, dci->posted + wr + 1);
                qpx->wr_flags = (signal ? IBV_SEND_SIGNALED : 0) |
                                (((wr == 0) && dci->fence) ? IBV_SEND_FENCE :
                                                             0);
                ibv_wr_rdma_write(qpx, uct_dcx_rkey(rkeys[i]),
                                  remote_addrs[i] + (b * stride));
                if (runs[r].mkey != NULL) {
                    ibv_wr_set_sge(qpx, runs[r].mkey->mkey->lkey, 0,
                                   runs[r].total);
                } else if (runs[r].merged) {
                    ibv_wr_set_sge(qpx, uct_dcx_memh_lkey(memhs[i]),
                                   (uintptr_t)buffers[i], runs[r].total);
                } else {
                    ibv_wr_set_sge(qpx, uct_dcx_memh_lkey(memhs[i]),
                                   (uintptr_t)buffers[i] + (b * stride),
                                   length);
                }
                uct_dcx_ep_set_dc_addr(ep, dci, peer);
            }
            if (runs[r].merged) {
                break; /* the whole run was one write */
            }
        }
        run_sn[r] = dci->posted + wr; /* its last work request */
    }
    ucs_assert(wr == num_wrs);
}

/* An operation per list mkey (released when its write completes), and one
 * for the user's completion after the last write; op->sn: its run, until
 * it has its sequence number. */
static ucs_status_t uct_dcx_ep_sgl_ops(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                                       const uct_dcx_sgl_run_t *runs,
                                       size_t num_runs, uct_completion_t *comp,
                                       uct_dcx_op_t **ops, size_t *num_ops_p)
{
    size_t r, num_ops = 0;
    uct_dcx_op_t *op;
    int is_run;

    for (r = 0; r <= num_runs; ++r) {
        is_run = (r < num_runs);
        if (is_run ? (runs[r].mkey == NULL) : (comp == NULL)) {
            continue;
        }
        op = uct_dcx_ep_op_get(iface, ep, &iface->tx.flush_mp,
                               is_run ? uct_dcx_op_umr_release :
                                        uct_dcx_op_comp_release,
                               is_run ? NULL : comp);
        if (ucs_unlikely(op == NULL)) {
            *num_ops_p = num_ops;
            return UCS_ERR_NO_RESOURCE;
        }
        op->umr.mkey   = is_run ? runs[r].mkey : NULL;
        op->sn         = r;
        ops[num_ops++] = op;
    }

    *num_ops_p = num_ops;
    return UCS_OK;
}

/* The batch is posted: the same signaling decisions again, and the
 * operations wait for their writes (run_sn[r]: run r's last one). */
static void uct_dcx_ep_sgl_posted(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                                  uct_dcx_op_t **ops, size_t num_ops,
                                  size_t num_wrs, const uint64_t *run_sn)
{
    size_t r;

    dci->fence = 0;
    dci->room  = 1;
    for (r = 0; r < num_wrs; ++r) {
        uct_dcx_iface_dci_posted(iface, dci,
                                 uct_dcx_ep_sgl_signal(iface, dci->unsignaled,
                                                       r, num_wrs,
                                                       num_ops > 0));
    }
    for (r = 0; r < num_ops; ++r) {
        ops[r]->sn = (ops[r]->comp != NULL) ? dci->posted : run_sn[ops[r]->sn];
        ucs_queue_push(&dci->outstanding, &ops[r]->queue);
        if (ops[r]->umr.mkey != NULL) {
            ++iface->umr.zcopy_ops;
        }
    }
}

/* The elements go out as one batch of RDMA WRITEs on the endpoint's DCI
 * (one doorbell); runs of elements whose remote ranges follow each other
 * in one registration become one write from a list mkey. Only the last
 * write asks for a completion, when an operation waits for it (and every
 * moderation-th on the way). */
ucs_status_t
uct_dcx_ep_put_sgl_zcopy(uct_ep_h tl_ep, void *const *buffers,
                         const size_t *lengths, uct_mem_h const *memhs,
                         const uint64_t *remote_addrs, uct_rkey_t const *rkeys,
                         const size_t *counts, const size_t *strides,
                         size_t count, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_sgl_run_t runs[UCT_DCX_SGL_MAX];
    uint64_t run_sn[UCT_DCX_SGL_MAX];
    uct_dcx_op_t *ops[UCT_DCX_SGL_MAX + 1];
    size_t num_runs, num_wrs, num_ops = 0;
    uct_dcx_peer_t *peer;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    int ret;

    status = uct_dcx_ep_sgl_check(iface, buffers, lengths, memhs, remote_addrs,
                                  rkeys, counts, strides, count, &num_wrs);
    if (status != UCS_OK) {
        return status;
    }
    if (num_wrs == 0) {
        return (ep->flags & UCT_DCX_EP_FLAG_FAILED) ? ep->status : UCS_OK;
    }
    if (ucs_unlikely(ep->flags & UCT_DCX_EP_FLAG_FAILED)) {
        return ep->status;
    }

    status = uct_dcx_ep_sgl_runs(iface, ep, buffers, lengths, memhs,
                                 remote_addrs, rkeys, counts, strides, count,
                                 runs, &num_runs, &num_wrs);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, 0, NULL, NULL, NULL, &tx);
    if ((status == UCS_OK) && (tx.dci->available < num_wrs)) {
        /* The endpoint may send nothing more until the batch fits: a
         * pending request waits for that, not for one free slot. */
        tx.dci->room = num_wrs;
        uct_dcx_ep_tx_abort(iface, ep);
        status = UCS_ERR_NO_RESOURCE;
    }
    if (ucs_likely(status == UCS_OK)) {
        status = uct_dcx_ep_sgl_ops(iface, ep, runs, num_runs, comp, ops,
                                    &num_ops);
    }
    if (ucs_unlikely(status != UCS_OK)) {
        goto err_release;
    }

    peer = uct_dcx_ep_peer(iface, ep);
    ibv_wr_start(tx.dci->qpx);
    uct_dcx_ep_sgl_post(iface, ep, tx.dci, peer, buffers, lengths, memhs,
                        remote_addrs, rkeys, counts, strides, runs, num_runs,
                        num_wrs, num_ops > 0, run_sn);
    ret = ibv_wr_complete(tx.dci->qpx);
    if (ucs_unlikely(ret != 0)) {
        ucs_error("dcx: dci 0x%x: posting %zu scatter-gather writes failed: %s",
                  tx.dci->qp->qp_num, num_wrs, strerror(ret));
        uct_dcx_ep_tx_abort(iface, ep);
        status = UCS_ERR_IO_ERROR;
        goto err_release;
    }

    uct_dcx_ep_sgl_posted(iface, tx.dci, ops, num_ops, num_wrs, run_sn);
    ucs_trace_data("dcx: ep %p: posted %zu writes "
                   "for %zu scatter-gather elements up to %" PRIu64
                   " on dci 0x%x to dct 0x%x",
                   ep, num_wrs, count, (uint64_t)tx.dci->posted,
                   tx.dci->qp->qp_num, peer->dctn);
    return UCS_INPROGRESS;

err_release:
    uct_dcx_ep_sgl_release(iface, runs, num_runs, ops, num_ops);
    return status;
}
