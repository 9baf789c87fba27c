/* dcxemu send-queue WQEs: the slot layout shared by the WR builders (wr.c),
 * which fill slots, and the execution stages, which read them; and the
 * builders' entry points for QP creation. */
#ifndef DCXEMU_WR_H
#define DCXEMU_WR_H

#include "dcxemu_int.h"

static inline struct dcxemu_qp *QP(struct ibv_qp_ex *q)
{
    return (struct dcxemu_qp *)q;
}
static inline struct dcxemu_qp *QPDV(struct mlx5dv_qp_ex *d)
{
    return (struct dcxemu_qp *)((char *)d - offsetof(struct dcxemu_qp, dv));
}

/* A slot is a struct dcxemu_wqe, then max_send_sge SGEs, then max_inline_data
 * bytes. */
static inline struct dcxemu_wqe *slot(struct dcxemu_qp *qp, uint64_t i)
{
    return (struct dcxemu_wqe *)(qp->ring +
                                 (i % qp->ring_slots) * qp->wqe_size);
}
static inline struct ibv_sge *wqe_sges(struct dcxemu_wqe *w)
{
    return (struct ibv_sge *)(w + 1);
}
static inline char *wqe_inline(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    return (char *)(wqe_sges(w) + qp->cap.max_send_sge);
}
static inline uint64_t wqe_len(struct dcxemu_wqe *w)
{
    uint64_t len = w->inline_len;
    for (uint32_t i = 0; !w->is_inline && i < w->num_sge; i++) {
        len += wqe_sges(w)[i].length;
    }
    return len;
}

/* The UMR descriptors of a slot live beside the ring: umr_max entries per slot.
 */
static inline struct dcxemu_mkey_entry *
umr_entries(struct dcxemu_qp *qp, struct dcxemu_wqe *w)
{
    return qp->umr_ring +
           (size_t)(((char *)w - qp->ring) / (ptrdiff_t)qp->wqe_size) *
                   qp->umr_max;
}

/* Install the builders of a QP being created: the loopback RC QP (UMR /
 * LOCAL_INV host; dv_ops picks the MR builders), or a DCI (raw_wqe:
 * MLX5DV_QP_EX_WITH_RAW_WQE was asked for). */
void dcxemu_wr_install_rc(struct dcxemu_qp *qp, uint64_t dv_ops);
void dcxemu_wr_install_dci(struct dcxemu_qp *qp, int raw_wqe);

/* The batch a post builds (post_lock held): a new slot of the batch (an error
 * is latched in batch_err), publication (returns the time the batch may run
 * from, 0 in immediate mode), reset; and running it once post_lock is given
 * back. */
void dcxemu_wqe_new(struct dcxemu_qp *qp, uint32_t op, uint64_t wr_id,
                    uint32_t flags);
uint64_t dcxemu_batch_publish(struct dcxemu_qp *qp);
void dcxemu_batch_reset(struct dcxemu_qp *qp);
void dcxemu_batch_run(struct dcxemu_qp *qp, uint64_t nb);

/* ibv_post_send / ibv_post_recv (post.c): RC QPs only; DC QPs have no legacy
 * post path. */
int dcxemu_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad);
int dcxemu_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad);

#endif
