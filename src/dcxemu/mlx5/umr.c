/* The mlx5 face's UMR WQEs: a decoded UMR (mlx5_wqe.c) as the model's
 * builder on the model's RC QP.  libmlx5 writes three: mlx5dv_wr_mr_list (an
 * inline KLM list), mlx5dv_wr_mr_interleaved (an inline repeat block), and
 * ibv_wr_local_inv (a UMR that sets the mkey context's free bit).  The mkey
 * is the DEVX object of the file whose key the control segment names
 * (ioctl.c); its completion needs nothing here: libmlx5 reports a UMR CQE
 * with the work completion opcode it kept for the WQE.
 */
#define _GNU_SOURCE
#include "face.h"
#include "mlx5_wqe.h"

#include <errno.h>

/* a WQE holds at most this many translation entries */
#define UMR_MAX_ENT (FACE_MAX_WQE / 16)

static void umr_list(struct face_qp *qp, struct mlx5dv_mkey *mkey,
                     const struct dcxemu_mlx5_umr *u)
{
    struct ibv_sge sge[UMR_MAX_ENT];
    for (uint32_t i = 0; i < u->num_entries; i++) {
        sge[i].addr   = u->ent[i].va;
        sge[i].length = u->ent[i].byte_count;
        sge[i].lkey   = u->ent[i].key;
    }
    mlx5dv_wr_mr_list(qp->dv, mkey, u->access_flags, (uint16_t)u->num_entries,
                      sge);
}

/* An entry's stride is its bytes and the gap after them. */
static void umr_interleaved(struct face_qp *qp, struct mlx5dv_mkey *mkey,
                            const struct dcxemu_mlx5_umr *u)
{
    struct mlx5dv_mr_interleaved d[UMR_MAX_ENT];
    for (uint32_t i = 0; i < u->num_entries; i++) {
        d[i].addr        = u->ent[i].va;
        d[i].bytes_count = u->ent[i].byte_count;
        d[i].bytes_skip  = u->ent[i].stride - u->ent[i].byte_count;
        d[i].lkey        = u->ent[i].key;
    }
    mlx5dv_wr_mr_interleaved(qp->dv, mkey, u->access_flags, u->repeat_count,
                             (uint16_t)u->num_entries, d);
}

int face_umr_wr(struct face_qp *qp, const struct dcxemu_mlx5_wqe *w)
{
    const struct dcxemu_mlx5_umr *u = &w->umr;
    struct face_file *f             = qp->obj.file;
    struct mlx5dv_mkey *mkey;
    if (qp->kind != FACE_QP_RC) {
        return EOPNOTSUPP; /* the model's DCI has no UMR builders */
    }
    if (u->free) {
        ibv_wr_local_inv(qp->qpx, u->mkey);
        return -1;
    }
    if (u->klm_octowords == 0 || u->num_entries > UMR_MAX_ENT) {
        return EOPNOTSUPP; /* a context update alone: not modelled */
    }
    mkey = face_mkey_get(f, u->mkey);
    if (mkey == NULL) {
        return EINVAL; /* no mkey of this process has the key */
    }
    if (u->mkey_mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY) {
        /* the key variant: the mkey context's tag (MKEY_UPDATE_TAG) */
        mkey->lkey = (mkey->lkey & ~0xffu) | u->tag;
        mkey->rkey = mkey->lkey;
    }
    /* the translation came inline, as the model's builders require */
    qp->qpx->wr_flags |= IBV_SEND_INLINE;
    if (u->interleaved) {
        umr_interleaved(qp, mkey, u);
    } else {
        umr_list(qp, mkey, u);
    }
    face_mkey_put(f);
    return -1;
}
