/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Direct posting: dcx's own WQE writer for its DCIs and CQE parser for the
 * send CQ (see dcx_direct.h). The bytes are those libmlx5 writes for the
 * same work requests (mlx5dv.h's segment layouts): a control segment, the
 * DC address vector, then remote-address, atomic, inline or data segments;
 * a WQE spans 64-byte basic blocks and continues at the start of the queue
 * where it passes the end. The address vector is the compact 16-byte base
 * form where the address handle has nothing for the extended part (no GRH:
 * InfiniBand without a global address), as UCX's dc_mlx5 writes it, and the
 * extended 48-byte form (libmlx5's, always) otherwise: two units of 16
 * bytes less per WQE on the common path.
 */
#include "dcx_direct.h"
#include "dcx_direct_cq.h"

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>


/* A WQE begins with its control segment and the DC address vector. The
 * segments after it are written where the compact (base) address vector
 * ends, before the address vector is known (dcx sets it last); an extended
 * one moves them up by the extension (uct_dcx_direct_av_extend). */
#define UCT_DCX_DIRECT_AV_BASE_SIZE 16
#define UCT_DCX_DIRECT_AV_EXT_SIZE \
    (sizeof(struct mlx5_wqe_av) - UCT_DCX_DIRECT_AV_BASE_SIZE)
#define UCT_DCX_DIRECT_DC_HDR_SIZE \
    (sizeof(struct mlx5_wqe_ctrl_seg) + UCT_DCX_DIRECT_AV_BASE_SIZE)
_Static_assert(sizeof(struct mlx5_wqe_datagram_seg) ==
                       UCT_DCX_DIRECT_AV_BASE_SIZE + UCT_DCX_DIRECT_AV_EXT_SIZE,
               "the extended address vector is the whole datagram segment");
_Static_assert(UCT_DCX_DIRECT_DC_HDR_SIZE + UCT_DCX_DIRECT_AV_EXT_SIZE ==
                       MLX5_SEND_WQE_BB,
               "an extended DC WQE header is one basic block");

#define UCT_DCX_DIRECT_DS(_size) ((_size) / 16)


KHASH_MAP_INIT_INT(uct_dcx_direct_sq, uct_dcx_direct_sq_t *)


/* A doorbell / BlueFlame register (a bfreg of libmlx5) and the half of it
 * the next doorbell goes to. The half alternates per register, not per
 * queue: libmlx5 keeps it in the register's struct mlx5_bf and UCX in its
 * uct_ib_mlx5_mmio_reg_t, and QPs share registers (beyond a context's
 * dedicated ones every QP gets a shared one). So every DCI on a register,
 * in any interface of the process, uses one state; the lock keeps a
 * doorbell and its toggle whole where interfaces of several threads ring
 * one register (libmlx5 locks a shared register, UCX's DB_LOCK mode), and
 * is uncontended otherwise: dcx cannot tell a dedicated register from a
 * shared one that another interface will be given later. */
typedef struct uct_dcx_direct_bfreg {
    ucs_list_link_t list; /* in uct_dcx_direct_bfregs */
    void *reg;
    unsigned size; /* BlueFlame buffer (each half), 0: none */
    unsigned offset; /* the half the next doorbell goes to */
    unsigned refs; /* DCIs on the register */
    int lock;
} uct_dcx_direct_bfreg_t;

static pthread_mutex_t uct_dcx_direct_bfregs_lock = PTHREAD_MUTEX_INITIALIZER;

#if defined(__x86_64__)
#define UCT_DCX_DIRECT_CPU_RELAX() asm volatile("pause" ::: "memory")
#elif defined(__aarch64__)
#define UCT_DCX_DIRECT_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define UCT_DCX_DIRECT_CPU_RELAX() __sync_synchronize()
#endif
static UCS_LIST_HEAD(uct_dcx_direct_bfregs);


struct uct_dcx_direct_sq {
    struct ibv_qp_ex qpx; /* the DCI's builders: dci->qpx */
    struct mlx5dv_qp_ex mqpx; /* ... and dci->mqpx */
    uct_dcx_direct_t *direct;
    void *buf; /* the send queue */
    void *qend;
    uint64_t *wrid; /* by basic block: work request id of the WQE there */
    volatile __be32 *dbrec; /* the send queue's doorbell record */
    uct_dcx_direct_bfreg_t *bf; /* doorbell / BlueFlame register */
    uint32_t wqe_mask; /* basic blocks - 1 */
    uint32_t qpn;
    size_t max_inline;
    unsigned max_sge;
    uint32_t pi; /* basic blocks of the WQEs finished */
    uint32_t pi_start; /* ... when the batch began (rolled back to) */
    struct mlx5_wqe_ctrl_seg *ctrl; /* the WQE being written, or NULL */
    void *seg; /* where its next segment goes */
    unsigned ds; /* its size so far, in 16-byte units */
    struct mlx5_wqe_ctrl_seg *last_ctrl; /* the batch's last WQE */
    unsigned last_ds;
    unsigned nreq; /* WQEs of the batch */
    int inl; /* the batch carries inline data */
    int err; /* first error of the batch (an errno) */
};


struct uct_dcx_direct {
    uct_dcx_direct_cq_t cq; /* the send CQ, polled through: tx.poll_cq */
    const uct_dcx_verbs_ops_t *ops;
    uint32_t vendor_err; /* of the current CQE */
    uct_dcx_direct_sq_t *last_sq; /* of the last CQE */
    khash_t(uct_dcx_direct_sq) sqs; /* by QP number */
    struct ibv_ah *av_ah; /* the last address handle used ... */
    const struct mlx5_wqe_av *av; /* ... its address vector */
    int av_compact; /* ... and whether its base form carries it all */
    int compact_av; /* the device takes compact address vectors */
};


/* --- the WQE writer ------------------------------------------------------ */

/* A control segment's fence, completion and solicited flags, by the work
 * request's IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED. */
#define UCT_DCX_DIRECT_SEND_FLAGS \
    (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED)
#define UCT_DCX_DIRECT_FM_CE_SE(_flags)                             \
    ((((_flags)&IBV_SEND_FENCE) ? MLX5_WQE_CTRL_FENCE : 0) |        \
     (((_flags)&IBV_SEND_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) | \
     (((_flags)&IBV_SEND_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0))
_Static_assert(UCT_DCX_DIRECT_SEND_FLAGS == 7, "send flags are bits 0..2");

/* The 32-bit word at byte 8 of a control segment with the flags byte (its
 * last) set, in memory order. */
#if __BYTE_ORDER == __LITTLE_ENDIAN
#define UCT_DCX_DIRECT_CTRL_WORD2(_flags) \
    ((uint32_t)UCT_DCX_DIRECT_FM_CE_SE(_flags) << 24)
#else
#define UCT_DCX_DIRECT_CTRL_WORD2(_flags) \
    ((uint32_t)UCT_DCX_DIRECT_FM_CE_SE(_flags))
#endif

static const uint32_t uct_dcx_direct_ctrl_word2[] = {
    UCT_DCX_DIRECT_CTRL_WORD2(0), UCT_DCX_DIRECT_CTRL_WORD2(1),
    UCT_DCX_DIRECT_CTRL_WORD2(2), UCT_DCX_DIRECT_CTRL_WORD2(3),
    UCT_DCX_DIRECT_CTRL_WORD2(4), UCT_DCX_DIRECT_CTRL_WORD2(5),
    UCT_DCX_DIRECT_CTRL_WORD2(6), UCT_DCX_DIRECT_CTRL_WORD2(7)
};

/* A copy of at most 16 bytes (inline data), in place: no call. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_memcpy_small(void *dst, const void *src, size_t length)
{
    uint64_t head, tail;
    uint32_t head32, tail32;

    if (length >= 8) {
        memcpy(&head, src, 8);
        memcpy(&tail, UCS_PTR_BYTE_OFFSET(src, length - 8), 8);
        memcpy(dst, &head, 8);
        memcpy(UCS_PTR_BYTE_OFFSET(dst, length - 8), &tail, 8);
    } else if (length >= 4) {
        memcpy(&head32, src, 4);
        memcpy(&tail32, UCS_PTR_BYTE_OFFSET(src, length - 4), 4);
        memcpy(dst, &head32, 4);
        memcpy(UCS_PTR_BYTE_OFFSET(dst, length - 4), &tail32, 4);
    } else {
        while (length-- > 0) {
            *(uint8_t *)dst = *(const uint8_t *)src;
            dst             = UCS_PTR_BYTE_OFFSET(dst, 1);
            src             = UCS_PTR_BYTE_OFFSET(src, 1);
        }
    }
}

/* memcpy, with the short copies of inline data done in place. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_memcpy(void *dst, const void *src, size_t length)
{
    if (length > 16) {
        memcpy(dst, src, length);
    } else {
        uct_dcx_direct_memcpy_small(dst, src, length);
    }
}

static UCS_F_ALWAYS_INLINE uct_dcx_direct_sq_t *
uct_dcx_direct_sq(struct ibv_qp_ex *qpx)
{
    return ucs_container_of(qpx, uct_dcx_direct_sq_t, qpx);
}

/* The WQE written so far gets its size; the next one starts after it. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_wqe_finish(uct_dcx_direct_sq_t *sq)
{
    struct mlx5_wqe_ctrl_seg *ctrl = sq->ctrl;

    ctrl->qpn_ds = htobe32((sq->qpn << 8) | sq->ds);
    sq->pi += ucs_div_round_up(sq->ds, MLX5_SEND_WQE_BB / 16);
    sq->last_ctrl = ctrl;
    sq->last_ds   = sq->ds;
    sq->ctrl      = NULL;
}

/* A new WQE of @a opcode: its control segment, room for its address
 * vector; returns where the segment after the address vector goes. */
static UCS_F_ALWAYS_INLINE void *
uct_dcx_direct_wqe_begin(uct_dcx_direct_sq_t *sq, uint8_t opcode, __be32 imm)
{
    unsigned flags = sq->qpx.wr_flags;
    struct mlx5_wqe_ctrl_seg *ctrl;
    uint32_t idx;

    if (ucs_unlikely(sq->ctrl != NULL)) {
        uct_dcx_direct_wqe_finish(sq); /* the previous WQE of a batch */
    }

    idx           = sq->pi & sq->wqe_mask;
    ctrl          = UCS_PTR_BYTE_OFFSET(sq->buf, idx * MLX5_SEND_WQE_BB);
    sq->wrid[idx] = sq->qpx.wr_id;

    ctrl->opmod_idx_opcode = htobe32(((sq->pi & 0xffff) << 8) | opcode);
    /* signature and stream 0, then the flags: one store, as libmlx5's */
    memcpy(&ctrl->signature,
           &uct_dcx_direct_ctrl_word2[flags & UCT_DCX_DIRECT_SEND_FLAGS],
           sizeof(uint32_t));
    ctrl->imm = imm;

    sq->ctrl = ctrl;
    sq->ds   = UCT_DCX_DIRECT_DS(UCT_DCX_DIRECT_DC_HDR_SIZE);
    ++sq->nreq;

    /* within the control segment's basic block: never the queue's end */
    return UCS_PTR_BYTE_OFFSET(ctrl, UCT_DCX_DIRECT_DC_HDR_SIZE);
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_wqe_rdma(uct_dcx_direct_sq_t *sq, uint8_t opcode, uint32_t rkey,
                        uint64_t remote_addr)
{
    struct mlx5_wqe_raddr_seg *raddr = uct_dcx_direct_wqe_begin(sq, opcode, 0);

    raddr->raddr    = htobe64(remote_addr);
    raddr->rkey     = htobe32(rkey);
    raddr->reserved = 0;
    sq->seg         = raddr + 1;
    sq->ds += UCT_DCX_DIRECT_DS(sizeof(*raddr));
}

static void uct_dcx_direct_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
                                         uint64_t remote_addr)
{
    uct_dcx_direct_wqe_rdma(uct_dcx_direct_sq(qpx), MLX5_OPCODE_RDMA_WRITE,
                            rkey, remote_addr);
}

static void uct_dcx_direct_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
                                        uint64_t remote_addr)
{
    uct_dcx_direct_wqe_rdma(uct_dcx_direct_sq(qpx), MLX5_OPCODE_RDMA_READ, rkey,
                            remote_addr);
}

static void uct_dcx_direct_wr_send(struct ibv_qp_ex *qpx)
{
    uct_dcx_direct_sq_t *sq = uct_dcx_direct_sq(qpx);

    sq->seg = uct_dcx_direct_wqe_begin(sq, MLX5_OPCODE_SEND, 0);
}

static void uct_dcx_direct_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
    uct_dcx_direct_sq_t *sq = uct_dcx_direct_sq(qpx);

    sq->seg = uct_dcx_direct_wqe_begin(sq, MLX5_OPCODE_SEND_IMM, imm_data);
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_wqe_atomic(uct_dcx_direct_sq_t *sq, uint8_t opcode,
                          uint32_t rkey, uint64_t remote_addr,
                          uint64_t swap_add, uint64_t compare)
{
    struct mlx5_wqe_raddr_seg *raddr = uct_dcx_direct_wqe_begin(sq, opcode, 0);
    struct mlx5_wqe_atomic_seg *atomic;

    /* Both segments fit in the control segment's basic block. */
    raddr->raddr     = htobe64(remote_addr);
    raddr->rkey      = htobe32(rkey);
    raddr->reserved  = 0;
    atomic           = (struct mlx5_wqe_atomic_seg *)(raddr + 1);
    atomic->swap_add = htobe64(swap_add);
    atomic->compare  = htobe64(compare);
    sq->seg          = atomic + 1;
    sq->ds += UCT_DCX_DIRECT_DS(sizeof(*raddr) + sizeof(*atomic));
}

static void uct_dcx_direct_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx,
                                             uint32_t rkey,
                                             uint64_t remote_addr,
                                             uint64_t compare, uint64_t swap)
{
    uct_dcx_direct_wqe_atomic(uct_dcx_direct_sq(qpx), MLX5_OPCODE_ATOMIC_CS,
                              rkey, remote_addr, swap, compare);
}

static void
uct_dcx_direct_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
                                   uint64_t remote_addr, uint64_t add)
{
    uct_dcx_direct_wqe_atomic(uct_dcx_direct_sq(qpx), MLX5_OPCODE_ATOMIC_FA,
                              rkey, remote_addr, add, 0);
}

/* Copy @a length bytes to @a dst in the send queue, continuing at its start
 * where they pass the end; returns where the copy ended. */
static UCS_F_ALWAYS_INLINE void *
uct_dcx_direct_copy_to_sq(uct_dcx_direct_sq_t *sq, void *dst, const void *src,
                          size_t length)
{
    size_t room = UCS_PTR_BYTE_DIFF(dst, sq->qend);

    if (ucs_unlikely(length >= room)) {
        memcpy(dst, src, room);
        src = UCS_PTR_BYTE_OFFSET(src, room);
        length -= room;
        dst = sq->buf;
    }
    uct_dcx_direct_memcpy(dst, src, length);
    return UCS_PTR_BYTE_OFFSET(dst, length);
}

/* The inline segment's byte count and the WQE's size, once its @a length
 * bytes of data are in place. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_inline_seg(uct_dcx_direct_sq_t *sq,
                          struct mlx5_wqe_inl_data_seg *inl_seg, size_t length)
{
    inl_seg->byte_count = htobe32(length | MLX5_INLINE_SEG);
    sq->ds += ucs_div_round_up(length + sizeof(*inl_seg), 16);
}

/* Inline data of @a length bytes (at most max_inline, not 0) that has a
 * piece longer than 16 bytes or passes the end of the queue: out of the
 * common path, which then calls nothing. */
static UCS_F_NOINLINE void
uct_dcx_direct_inline_copy(uct_dcx_direct_sq_t *sq, size_t num_buf,
                           const struct ibv_data_buf *buf_list, size_t length)
{
    struct mlx5_wqe_inl_data_seg *inl_seg = sq->seg;
    void *dst                             = inl_seg + 1;
    size_t i;

    for (i = 0; i < num_buf; ++i) {
        dst = uct_dcx_direct_copy_to_sq(sq, dst, buf_list[i].addr,
                                        buf_list[i].length);
    }
    uct_dcx_direct_inline_seg(sq, inl_seg, length);
}

static void uct_dcx_direct_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
                                              size_t length)
{
    uct_dcx_direct_sq_t *sq               = uct_dcx_direct_sq(qpx);
    struct mlx5_wqe_inl_data_seg *inl_seg = sq->seg;
    struct ibv_data_buf buf;

    if (ucs_unlikely(length > sq->max_inline)) {
        sq->err = sq->err ?: ENOMEM;
        return;
    }

    sq->inl = 1;
    if (length == 0) {
        return; /* a zero-length write carries no data segment */
    }

    if (ucs_likely((length <= 16) &&
                   (UCS_PTR_BYTE_OFFSET(inl_seg + 1, length) <= sq->qend))) {
        uct_dcx_direct_memcpy_small(inl_seg + 1, addr, length);
        uct_dcx_direct_inline_seg(sq, inl_seg, length);
        return;
    }

    buf.addr   = addr;
    buf.length = length;
    uct_dcx_direct_inline_copy(sq, 1, &buf, length);
}

static void
uct_dcx_direct_wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
                                       const struct ibv_data_buf *buf_list)
{
    uct_dcx_direct_sq_t *sq               = uct_dcx_direct_sq(qpx);
    struct mlx5_wqe_inl_data_seg *inl_seg = sq->seg;
    void *dst                             = inl_seg + 1;
    size_t i, piece, length, any;

    /* any: the lengths or'ed, at least the longest piece; two pieces (an
     * active message's header and payload) without a loop */
    if (num_buf == 2) {
        length = buf_list[0].length + buf_list[1].length;
        any    = buf_list[0].length | buf_list[1].length;
    } else {
        for (i = 0, length = 0, any = 0; i < num_buf; ++i) {
            length += buf_list[i].length;
            any |= buf_list[i].length;
        }
    }
    if (ucs_unlikely(length > sq->max_inline)) {
        sq->err = sq->err ?: ENOMEM;
        return;
    }

    sq->inl = 1;
    if (length == 0) {
        return;
    }

    if (ucs_unlikely((any > 16) ||
                     (UCS_PTR_BYTE_OFFSET(dst, length) > sq->qend))) {
        uct_dcx_direct_inline_copy(sq, num_buf, buf_list, length);
        return;
    }

    /* the common case: short pieces before the end of the queue */
    if (num_buf == 2) {
        piece = buf_list[0].length;
        uct_dcx_direct_memcpy_small(dst, buf_list[0].addr, piece);
        uct_dcx_direct_memcpy_small(UCS_PTR_BYTE_OFFSET(dst, piece),
                                    buf_list[1].addr, length - piece);
    } else {
        for (i = 0; i < num_buf; ++i) {
            piece = buf_list[i].length;
            uct_dcx_direct_memcpy_small(dst, buf_list[i].addr, piece);
            dst = UCS_PTR_BYTE_OFFSET(dst, piece);
        }
    }
    uct_dcx_direct_inline_seg(sq, inl_seg, length);
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_data_seg(uct_dcx_direct_sq_t *sq, uint32_t lkey, uint64_t addr,
                        uint32_t length)
{
    struct mlx5_wqe_data_seg *dseg = sq->seg;

    if (ucs_unlikely((void *)dseg == sq->qend)) {
        dseg = sq->buf;
    }
    dseg->byte_count = htobe32(length);
    dseg->lkey       = htobe32(lkey);
    dseg->addr       = htobe64(addr);
    sq->seg          = dseg + 1;
    ++sq->ds;
}

static void uct_dcx_direct_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey,
                                      uint64_t addr, uint32_t length)
{
    if (length == 0) {
        return; /* as libmlx5: no data segment */
    }
    uct_dcx_direct_data_seg(uct_dcx_direct_sq(qpx), lkey, addr, length);
}

static void uct_dcx_direct_wr_set_sge_list(struct ibv_qp_ex *qpx,
                                           size_t num_sge,
                                           const struct ibv_sge *sg_list)
{
    uct_dcx_direct_sq_t *sq = uct_dcx_direct_sq(qpx);
    size_t i;

    if (ucs_unlikely(num_sge > sq->max_sge)) {
        sq->err = sq->err ?: ENOMEM;
        return;
    }

    for (i = 0; i < num_sge; ++i) {
        if (sg_list[i].length != 0) {
            uct_dcx_direct_data_seg(sq, sg_list[i].lkey, sg_list[i].addr,
                                    sg_list[i].length);
        }
    }
}

/* The address vector of an address handle, as libmlx5 keeps it, and
 * whether its base form carries all of it: the device takes compact ones,
 * and it is not marked extended, with nothing in the extended part (no GRH,
 * no RoCE addresses). */
static UCS_F_NOINLINE const struct mlx5_wqe_av *
uct_dcx_direct_av_lookup(uct_dcx_direct_t *direct, struct ibv_ah *ah)
{
    static const uint8_t zero_ext[UCT_DCX_DIRECT_AV_EXT_SIZE] = {};
    struct mlx5dv_obj obj                                     = {};
    struct mlx5dv_ah dv_ah                                    = {};

    obj.ah.in  = ah;
    obj.ah.out = &dv_ah;
    if (direct->ops->mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH) != 0) {
        return NULL;
    }
    direct->av_ah = ah;
    direct->av    = dv_ah.av;
    direct->av_compact =
            direct->compact_av &&
            !(dv_ah.av->dqp_dct & htobe32(MLX5_EXTENDED_UD_AV)) &&
            !memcmp(UCS_PTR_BYTE_OFFSET(dv_ah.av, UCT_DCX_DIRECT_AV_BASE_SIZE),
                    zero_ext, sizeof(zero_ext));
    return dv_ah.av;
}

/* An extended address vector: the segments written after the compact one
 * move up by the extension (continuing at the queue's start past its end),
 * last first. */
static UCS_F_NOINLINE void uct_dcx_direct_av_extend(uct_dcx_direct_sq_t *sq)
{
    size_t qsize = UCS_PTR_BYTE_DIFF(sq->buf, sq->qend);
    size_t base  = UCS_PTR_BYTE_DIFF(sq->buf, sq->ctrl);
    unsigned i;

    for (i = sq->ds; i-- > UCT_DCX_DIRECT_DS(UCT_DCX_DIRECT_DC_HDR_SIZE);) {
        memcpy(UCS_PTR_BYTE_OFFSET(sq->buf, (base + i * 16 +
                                             UCT_DCX_DIRECT_AV_EXT_SIZE) %
                                                    qsize),
               UCS_PTR_BYTE_OFFSET(sq->buf, (base + i * 16) % qsize), 16);
    }
    sq->seg = UCS_PTR_BYTE_OFFSET(sq->buf,
                                  (UCS_PTR_BYTE_DIFF(sq->buf, sq->seg) +
                                   UCT_DCX_DIRECT_AV_EXT_SIZE) %
                                          qsize);
    sq->ds += UCT_DCX_DIRECT_DS(UCT_DCX_DIRECT_AV_EXT_SIZE);
}

/* The extended address vector: the segments written after the compact one
 * move up, then the whole vector. */
static UCS_F_NOINLINE void
uct_dcx_direct_dc_addr_ext(uct_dcx_direct_sq_t *sq,
                           const struct mlx5_wqe_av *av, uint32_t remote_dctn,
                           uint64_t remote_dc_key)
{
    struct mlx5_wqe_datagram_seg *dgram =
            UCS_PTR_BYTE_OFFSET(sq->ctrl, sizeof(struct mlx5_wqe_ctrl_seg));

    uct_dcx_direct_av_extend(sq);
    memcpy(&dgram->av, av, sizeof(dgram->av));
    dgram->av.dqp_dct |= htobe32(remote_dctn | MLX5_EXTENDED_UD_AV);
    dgram->av.key.dc_key = htobe64(remote_dc_key);
}

/* The address vector after the control segment: the compact one in place,
 * the extended one out of line (a tail call: the common path saves no
 * registers). */
static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_dc_addr(uct_dcx_direct_sq_t *sq, const struct mlx5_wqe_av *av,
                       int compact, uint32_t remote_dctn,
                       uint64_t remote_dc_key)
{
    struct mlx5_wqe_datagram_seg *dgram =
            UCS_PTR_BYTE_OFFSET(sq->ctrl, sizeof(struct mlx5_wqe_ctrl_seg));

    if (ucs_unlikely(!compact)) {
        uct_dcx_direct_dc_addr_ext(sq, av, remote_dctn, remote_dc_key);
        return;
    }
    memcpy(&dgram->av, av, UCT_DCX_DIRECT_AV_BASE_SIZE);
    dgram->av.dqp_dct |= htobe32(remote_dctn);
    dgram->av.key.dc_key = htobe64(remote_dc_key);
}

/* An address handle other than the last one: its address vector first. */
static UCS_F_NOINLINE void
uct_dcx_direct_dc_addr_lookup(uct_dcx_direct_sq_t *sq, struct ibv_ah *ah,
                              uint32_t remote_dctn, uint64_t remote_dc_key)
{
    const struct mlx5_wqe_av *av = uct_dcx_direct_av_lookup(sq->direct, ah);

    if (av == NULL) {
        sq->err = sq->err ?: EINVAL;
        return;
    }
    uct_dcx_direct_dc_addr(sq, av, sq->direct->av_compact, remote_dctn,
                           remote_dc_key);
}

static void
uct_dcx_direct_wr_set_dc_addr(struct mlx5dv_qp_ex *mqpx, struct ibv_ah *ah,
                              uint32_t remote_dctn, uint64_t remote_dc_key)
{
    uct_dcx_direct_sq_t *sq = ucs_container_of(mqpx, uct_dcx_direct_sq_t, mqpx);
    uct_dcx_direct_t *direct = sq->direct;

    if (ucs_unlikely(ah != direct->av_ah)) {
        uct_dcx_direct_dc_addr_lookup(sq, ah, remote_dctn, remote_dc_key);
        return;
    }
    uct_dcx_direct_dc_addr(sq, direct->av, direct->av_compact, remote_dctn,
                           remote_dc_key);
}

/* The same on a DCI stream: the control segment names it, as libmlx5
 * writes it (the device checks it against the DCI's streams). */
static void
uct_dcx_direct_wr_set_dc_addr_stream(struct mlx5dv_qp_ex *mqpx,
                                     struct ibv_ah *ah, uint32_t remote_dctn,
                                     uint64_t remote_dc_key, uint16_t stream_id)
{
    uct_dcx_direct_sq_t *sq = ucs_container_of(mqpx, uct_dcx_direct_sq_t, mqpx);

    uct_dcx_direct_wr_set_dc_addr(mqpx, ah, remote_dctn, remote_dc_key);
    sq->ctrl->dci_stream_channel_id = htobe16(stream_id);
}

/* A WQE the caller laid out whole (masked atomics): copied as it is, with
 * its index, as libmlx5's raw-WQE builder does. */
static void
uct_dcx_direct_wr_raw_wqe(struct mlx5dv_qp_ex *mqpx, const void *wqe)
{
    uct_dcx_direct_sq_t *sq = ucs_container_of(mqpx, uct_dcx_direct_sq_t, mqpx);
    const struct mlx5_wqe_ctrl_seg *src = wqe;
    unsigned ds                         = be32toh(src->qpn_ds) & 0x3f;
    struct mlx5_wqe_ctrl_seg *ctrl;
    uint32_t idx;

    if (ucs_unlikely(sq->ctrl != NULL)) {
        uct_dcx_direct_wqe_finish(sq);
    }

    idx           = sq->pi & sq->wqe_mask;
    ctrl          = UCS_PTR_BYTE_OFFSET(sq->buf, idx * MLX5_SEND_WQE_BB);
    sq->wrid[idx] = sq->qpx.wr_id;
    uct_dcx_direct_copy_to_sq(sq, ctrl, wqe, ds * 16);
    ctrl->opmod_idx_opcode = htobe32(
            (be32toh(src->opmod_idx_opcode) & 0xff0000ff) |
            ((sq->pi & 0xffff) << 8));

    ++sq->nreq;
    sq->pi += ucs_div_round_up(ds, MLX5_SEND_WQE_BB / 16);
    sq->last_ctrl = ctrl;
    sq->last_ds   = ds;
}

static void uct_dcx_direct_wr_start(struct ibv_qp_ex *qpx)
{
    uct_dcx_direct_sq_t *sq = uct_dcx_direct_sq(qpx);

    sq->pi_start = sq->pi;
    sq->ctrl     = NULL;
    sq->nreq     = 0;
    sq->inl      = 0;
    sq->err      = 0;
}

static void uct_dcx_direct_wr_abort(struct ibv_qp_ex *qpx)
{
    uct_dcx_direct_sq_t *sq = uct_dcx_direct_sq(qpx);

    sq->pi   = sq->pi_start;
    sq->ctrl = NULL;
}

/* A BlueFlame copy of the WQE at @a ctrl, @a size bytes (a multiple of 64),
 * into the write-combining register, 64-bit stores in ascending order. */
static void uct_dcx_direct_bf_copy(uct_dcx_direct_sq_t *sq,
                                   volatile uint64_t *dst, const uint64_t *src,
                                   unsigned size)
{
    unsigned i;

    do {
        for (i = 0; i < MLX5_SEND_WQE_BB / sizeof(uint64_t); ++i) {
            dst[i] = src[i];
        }
        dst += MLX5_SEND_WQE_BB / sizeof(uint64_t);
        src += MLX5_SEND_WQE_BB / sizeof(uint64_t);
        size -= MLX5_SEND_WQE_BB;
        if (src == sq->qend) {
            src = sq->buf;
        }
    } while (size > 0);
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_bfreg_lock(uct_dcx_direct_bfreg_t *bf)
{
    while (ucs_unlikely(__atomic_exchange_n(&bf->lock, 1, __ATOMIC_ACQUIRE))) {
        while (__atomic_load_n(&bf->lock, __ATOMIC_RELAXED)) {
            UCT_DCX_DIRECT_CPU_RELAX(); /* a spin, as libmlx5's: no call */
        }
    }
}

static UCS_F_ALWAYS_INLINE void
uct_dcx_direct_bfreg_unlock(uct_dcx_direct_bfreg_t *bf)
{
    __atomic_store_n(&bf->lock, 0, __ATOMIC_RELEASE);
}

/* The doorbell: the record says how far the device may take WQEs, the
 * store to the UAR tells it to look (the first 8 bytes of the batch's last
 * control segment), or a single inline WQE goes whole through BlueFlame;
 * the write-combining buffer is flushed before the half toggles, inside
 * the register's lock, as libmlx5 does. */
static UCS_F_ALWAYS_INLINE void uct_dcx_direct_doorbell(uct_dcx_direct_sq_t *sq)
{
    uct_dcx_direct_bfreg_t *bf = sq->bf;
    volatile uint64_t *reg;

    UCT_DCX_DIRECT_TO_DEVICE_FENCE();
    *sq->dbrec = htobe32(sq->pi & 0xffff);

    uct_dcx_direct_bfreg_lock(bf);
    UCT_DCX_DIRECT_MMIO_WC_START();
    reg = UCS_PTR_BYTE_OFFSET(bf->reg, bf->offset);
    if ((bf->size > 0) && (sq->nreq == 1) && sq->inl && (sq->last_ds > 1) &&
        (sq->last_ds <= bf->size / 16)) {
        uct_dcx_direct_bf_copy(sq, reg, (const uint64_t *)sq->last_ctrl,
                               ucs_div_round_up(sq->last_ds * 16,
                                                MLX5_SEND_WQE_BB) *
                                       MLX5_SEND_WQE_BB);
    } else {
        *reg = *(const uint64_t *)sq->last_ctrl;
    }
    UCT_DCX_DIRECT_MMIO_FLUSH();
    bf->offset ^= bf->size;
    uct_dcx_direct_bfreg_unlock(bf);
}

static int uct_dcx_direct_wr_complete(struct ibv_qp_ex *qpx)
{
    uct_dcx_direct_sq_t *sq = uct_dcx_direct_sq(qpx);

    if (ucs_likely(sq->ctrl != NULL)) {
        uct_dcx_direct_wqe_finish(sq);
    }

    if (ucs_unlikely(sq->err != 0)) {
        sq->pi = sq->pi_start; /* nothing of the batch goes out */
        return sq->err;
    }

    if (ucs_likely(sq->nreq > 0)) {
        uct_dcx_direct_doorbell(sq);
    }
    return 0;
}


/* --- the CQE parser ----------------------------------------------------- */

static UCS_F_NOINLINE void
uct_dcx_direct_cqe_error(uct_dcx_direct_t *direct, struct mlx5_cqe64 *cqe)
{
    struct mlx5_err_cqe *ecqe = (struct mlx5_err_cqe *)cqe;
    uint8_t opcode            = mlx5dv_get_cqe_opcode(cqe);

    if ((opcode == MLX5_CQE_REQ_ERR) || (opcode == MLX5_CQE_RESP_ERR)) {
        direct->cq.cqx.status = uct_dcx_direct_syndrome_status(ecqe->syndrome);
        direct->vendor_err    = ecqe->vendor_err_synd;
    } else {
        ucs_error("dcx: send cq 0x%x: unexpected cqe opcode %u", direct->cq.cqn,
                  opcode);
        direct->cq.cqx.status = IBV_WC_GENERAL_ERR;
        direct->vendor_err    = 0;
    }
}

static UCS_F_NOINLINE uct_dcx_direct_sq_t *
uct_dcx_direct_sq_find(uct_dcx_direct_t *direct, uint32_t qpn)
{
    khiter_t it = kh_get(uct_dcx_direct_sq, &direct->sqs, qpn);

    if (it == kh_end(&direct->sqs)) {
        return NULL;
    }
    direct->last_sq = kh_val(&direct->sqs, it);
    return direct->last_sq;
}

/* The next CQE the device wrote, in place: 0, or ENOENT when there is
 * none. */
static int uct_dcx_direct_next_poll(struct ibv_cq_ex *cqx)
{
    uct_dcx_direct_t *direct = ucs_container_of(cqx, uct_dcx_direct_t, cq.cqx);
    struct mlx5_cqe64 *cqe;
    uct_dcx_direct_sq_t *sq;
    uint32_t qpn;

    for (;;) {
        cqe = uct_dcx_direct_cq_next(&direct->cq);
        if (cqe == NULL) {
            return ENOENT;
        }

        qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff;
        sq  = direct->last_sq;
        if (ucs_unlikely((sq == NULL) || (sq->qpn != qpn))) {
            sq = uct_dcx_direct_sq_find(direct, qpn);
            if (sq == NULL) {
                ucs_error("dcx: send cq 0x%x: cqe of unknown qp 0x%x",
                          direct->cq.cqn, qpn);
                continue;
            }
        }

        cqx->wr_id = sq->wrid[be16toh(cqe->wqe_counter) & sq->wqe_mask];
        if (ucs_likely(mlx5dv_get_cqe_opcode(cqe) == MLX5_CQE_REQ)) {
            cqx->status = IBV_WC_SUCCESS;
        } else {
            uct_dcx_direct_cqe_error(direct, cqe);
        }
        return 0;
    }
}

static int
uct_dcx_direct_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
    return uct_dcx_direct_next_poll(cqx);
}

static void uct_dcx_direct_end_poll(struct ibv_cq_ex *cqx)
{
    uct_dcx_direct_cq_publish(ucs_container_of(cqx, uct_dcx_direct_cq_t, cqx));
}

static uint32_t uct_dcx_direct_read_vendor_err(struct ibv_cq_ex *cqx)
{
    return ucs_container_of(cqx, uct_dcx_direct_t, cq.cqx)->vendor_err;
}

void uct_dcx_direct_cq_arm(uct_dcx_direct_t *direct, int solicited)
{
    uct_dcx_direct_cq_arm_db(&direct->cq, solicited);
}

void uct_dcx_direct_cq_event(uct_dcx_direct_t *direct)
{
    ++direct->cq.arm_sn;
}

void uct_dcx_direct_ah_forget(uct_dcx_direct_t *direct, struct ibv_ah *ah)
{
    if (direct->av_ah == ah) {
        direct->av_ah = NULL;
        direct->av    = NULL;
    }
}

struct ibv_cq_ex *uct_dcx_direct_poll_cq(uct_dcx_direct_t *direct)
{
    return &direct->cq.cqx;
}

ucs_status_t uct_dcx_direct_create(const uct_dcx_verbs_ops_t *ops,
                                   struct ibv_cq *cq, int compact_av,
                                   uct_dcx_direct_t **direct_p,
                                   const char **reason_p)
{
    uct_dcx_direct_t *direct;
    ucs_status_t status;

    direct = ucs_calloc(1, sizeof(*direct), "dcx direct");
    if (direct == NULL) {
        *reason_p = "out of memory";
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_dcx_direct_cq_init(&direct->cq, ops, cq, reason_p);
    if (status != UCS_OK) {
        ucs_free(direct);
        return status;
    }

    direct->ops        = ops;
    direct->compact_av = compact_av;
    kh_init_inplace(uct_dcx_direct_sq, &direct->sqs);

    direct->cq.cqx.start_poll      = uct_dcx_direct_start_poll;
    direct->cq.cqx.next_poll       = uct_dcx_direct_next_poll;
    direct->cq.cqx.end_poll        = uct_dcx_direct_end_poll;
    direct->cq.cqx.read_vendor_err = uct_dcx_direct_read_vendor_err;

    *direct_p = direct;
    return UCS_OK;
}

void uct_dcx_direct_destroy(uct_dcx_direct_t *direct)
{
    ucs_assertv(kh_size(&direct->sqs) == 0, "%u direct dcis left",
                kh_size(&direct->sqs));
    kh_destroy_inplace(uct_dcx_direct_sq, &direct->sqs);
    ucs_free(direct);
}


/* --- a DCI's send queue -------------------------------------------------- */

/* The state of the register at @a reg, shared with the DCIs already on it. */
static ucs_status_t uct_dcx_direct_bfreg_get(void *reg, unsigned size,
                                             uct_dcx_direct_bfreg_t **bf_p,
                                             const char **reason_p)
{
    ucs_status_t status = UCS_OK;
    uct_dcx_direct_bfreg_t *bf;

    pthread_mutex_lock(&uct_dcx_direct_bfregs_lock);
    ucs_list_for_each(bf, &uct_dcx_direct_bfregs, list) {
        if (bf->reg == reg) {
            if (bf->size != size) {
                *reason_p = "two sizes of BlueFlame buffer for one doorbell "
                            "register";
                status    = UCS_ERR_UNSUPPORTED;
            } else {
                ++bf->refs;
            }
            goto out;
        }
    }

    bf = ucs_calloc(1, sizeof(*bf), "dcx direct bfreg");
    if (bf == NULL) {
        *reason_p = "out of memory";
        status    = UCS_ERR_NO_MEMORY;
        goto out;
    }
    bf->reg  = reg;
    bf->size = size;
    bf->refs = 1;
    ucs_list_add_tail(&uct_dcx_direct_bfregs, &bf->list);
out:
    pthread_mutex_unlock(&uct_dcx_direct_bfregs_lock);
    *bf_p = bf;
    return status;
}

static void uct_dcx_direct_bfreg_put(uct_dcx_direct_bfreg_t *bf)
{
    pthread_mutex_lock(&uct_dcx_direct_bfregs_lock);
    if (--bf->refs == 0) {
        ucs_list_del(&bf->list);
        ucs_free(bf);
    }
    pthread_mutex_unlock(&uct_dcx_direct_bfregs_lock);
}

ucs_status_t
uct_dcx_direct_sq_create(uct_dcx_direct_t *direct, struct ibv_qp *qp,
                         size_t max_inline, unsigned max_sge,
                         uct_dcx_direct_sq_t **sq_p, struct ibv_qp_ex **qpx_p,
                         struct mlx5dv_qp_ex **mqpx_p, const char **reason_p)
{
    struct mlx5dv_qp dv_qp = {};
    struct mlx5dv_obj obj  = {};
    uct_dcx_direct_bfreg_t *bf;
    uct_dcx_direct_sq_t *sq;
    ucs_status_t status;
    khiter_t it;
    int ret;

    obj.qp.in  = qp;
    obj.qp.out = &dv_qp;
    if (direct->ops->mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP) != 0) {
        *reason_p = "the provider describes no send queue (mlx5dv_init_obj)";
        return UCS_ERR_UNSUPPORTED;
    }
    if ((dv_qp.sq.stride != MLX5_SEND_WQE_BB) ||
        !ucs_is_pow2(dv_qp.sq.wqe_cnt) || (dv_qp.sq.wqe_cnt > UINT16_MAX)) {
        *reason_p = "a send queue layout dcx does not write (stride other "
                    "than 64 bytes, or its size)";
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_direct_bfreg_get(dv_qp.bf.reg, dv_qp.bf.size, &bf,
                                      reason_p);
    if (status != UCS_OK) {
        return status;
    }

    sq = ucs_calloc(1, sizeof(*sq), "dcx direct sq");
    if (sq == NULL) {
        goto err_put_bfreg;
    }
    sq->wrid = ucs_calloc(dv_qp.sq.wqe_cnt, sizeof(*sq->wrid),
                          "dcx direct wrid");
    if (sq->wrid == NULL) {
        goto err_free_sq;
    }

    it = kh_put(uct_dcx_direct_sq, &direct->sqs, qp->qp_num, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        goto err_free_wrid;
    }
    kh_val(&direct->sqs, it) = sq;

    sq->direct     = direct;
    sq->buf        = dv_qp.sq.buf;
    sq->qend       = UCS_PTR_BYTE_OFFSET(dv_qp.sq.buf,
                                         (size_t)dv_qp.sq.wqe_cnt * MLX5_SEND_WQE_BB);
    sq->dbrec      = &dv_qp.dbrec[MLX5_SND_DBR];
    sq->bf         = bf;
    sq->wqe_mask   = dv_qp.sq.wqe_cnt - 1;
    sq->qpn        = qp->qp_num;
    sq->max_inline = max_inline;
    sq->max_sge    = max_sge;
    sq->pi         = 0; /* a QP nobody posted on yet */

    sq->qpx.qp_base.context         = qp->context;
    sq->qpx.qp_base.qp_num          = qp->qp_num;
    sq->qpx.qp_base.qp_type         = qp->qp_type;
    sq->qpx.wr_start                = uct_dcx_direct_wr_start;
    sq->qpx.wr_complete             = uct_dcx_direct_wr_complete;
    sq->qpx.wr_abort                = uct_dcx_direct_wr_abort;
    sq->qpx.wr_rdma_write           = uct_dcx_direct_wr_rdma_write;
    sq->qpx.wr_rdma_read            = uct_dcx_direct_wr_rdma_read;
    sq->qpx.wr_send                 = uct_dcx_direct_wr_send;
    sq->qpx.wr_send_imm             = uct_dcx_direct_wr_send_imm;
    sq->qpx.wr_atomic_cmp_swp       = uct_dcx_direct_wr_atomic_cmp_swp;
    sq->qpx.wr_atomic_fetch_add     = uct_dcx_direct_wr_atomic_fetch_add;
    sq->qpx.wr_set_inline_data      = uct_dcx_direct_wr_set_inline_data;
    sq->qpx.wr_set_inline_data_list = uct_dcx_direct_wr_set_inline_data_list;
    sq->qpx.wr_set_sge              = uct_dcx_direct_wr_set_sge;
    sq->qpx.wr_set_sge_list         = uct_dcx_direct_wr_set_sge_list;
    sq->mqpx.wr_set_dc_addr         = uct_dcx_direct_wr_set_dc_addr;
    sq->mqpx.wr_set_dc_addr_stream  = uct_dcx_direct_wr_set_dc_addr_stream;
    sq->mqpx.wr_raw_wqe             = uct_dcx_direct_wr_raw_wqe;

    *sq_p   = sq;
    *qpx_p  = &sq->qpx;
    *mqpx_p = &sq->mqpx;
    return UCS_OK;

err_free_wrid:
    ucs_free(sq->wrid);
err_free_sq:
    ucs_free(sq);
err_put_bfreg:
    uct_dcx_direct_bfreg_put(bf);
    *reason_p = "out of memory";
    return UCS_ERR_NO_MEMORY;
}

void uct_dcx_direct_sq_destroy(uct_dcx_direct_sq_t *sq)
{
    uct_dcx_direct_t *direct = sq->direct;
    khiter_t it;

    it = kh_get(uct_dcx_direct_sq, &direct->sqs, sq->qpn);
    if (it != kh_end(&direct->sqs)) {
        kh_del(uct_dcx_direct_sq, &direct->sqs, it);
    }
    if (direct->last_sq == sq) {
        direct->last_sq = NULL;
    }
    uct_dcx_direct_bfreg_put(sq->bf);
    ucs_free(sq->wrid);
    ucs_free(sq);
}

void uct_dcx_direct_sq_reset(uct_dcx_direct_sq_t *sq)
{
    sq->pi   = 0;
    sq->ctrl = NULL;
}
