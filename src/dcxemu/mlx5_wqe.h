/* mlx5 work queue formats, as the device reads them: send WQEs from a send
 * queue (control, datagram, remote address, atomic, data, inline and UMR
 * segments, as libmlx5 and UCX write them), receive WQEs from an RQ ring and
 * from an SRQ linked list.  Pure functions of the bytes: no I/O, no state.
 * Multi-byte values come out in host order unless a field says otherwise. */
#ifndef DCXEMU_MLX5_WQE_H
#define DCXEMU_MLX5_WQE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DCXEMU_MLX5_MAX_SGE     32
#define DCXEMU_MLX5_MAX_INLINE  4096
#define DCXEMU_MLX5_MAX_UMR_ENT 256

/* The QP kind a send queue belongs to: which segments follow the control
 * segment (a datagram segment on a DCI and UD) and which opcodes it takes. */
enum dcxemu_mlx5_qp_kind {
    DCXEMU_MLX5_QP_RC,
    DCXEMU_MLX5_QP_DCI,
    DCXEMU_MLX5_QP_UD
};

struct dcxemu_mlx5_sge {
    uint64_t addr;
    uint32_t lkey;
    uint32_t length;
};

/* DC (or UD) address vector: extended 48 B or compact 16 B */
struct dcxemu_mlx5_av {
    uint64_t dc_key; /* the 64-bit key word */
    uint32_t dctn; /* DCT number (UD: remote QPN) */
    uint8_t ext; /* extended (48 B) form: the GRH part below is valid */
    uint8_t sl; /* stat_rate_sl[3:0], the IB form (RoCE: (sl >> 1) & 7) */
    uint16_t rlid;
    uint8_t grh; /* grh_gid_fl[30] (libmlx5 leaves it 0 on RoCE) */
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t tclass;
    uint32_t flow_label;
    uint8_t rgid[16];
    uint8_t rmac[6];
    uint8_t stat_rate; /* stat_rate_sl[7:4] */
    uint8_t stat_rate_sl; /* as stored */
    uint8_t fl_mlid; /* force loopback, source path bits */
    uint32_t qkey; /* UD: the Q_Key (the key word's upper half) */
};

/* UMR (opcode 0x25), as mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved /
 * ibv_wr_local_inv write it.  LOCAL_INVAL (0x1b) fills mkey only. */
struct dcxemu_mlx5_umr {
    uint8_t flags; /* MLX5_WQE_UMR_CTRL_FLAG_* */
    uint16_t klm_octowords; /* inline translation size, 16-byte units */
    uint64_t mkey_mask; /* MLX5_WQE_UMR_CTRL_MKEY_MASK_*: what is updated */
    uint32_t mkey; /* ctrl imm: the mkey being configured */
    uint32_t access_flags; /* IBV_ACCESS_* (LOCAL_READ implied) */
    uint8_t tag; /* the mkey's new tag (qpn_mkey[7:0]) */
    uint64_t len, start_addr;
    uint8_t interleaved; /* the translation is a repeat block */
    uint32_t repeat_count; /* repeat block */
    uint32_t byte_count; /* repeat block: bytes of one repetition */
    uint32_t num_entries; /* KLMs, or the repeat block's entries */
    uint8_t free; /* mkey context free bit: the mkey is invalidated */
    uint32_t qpn; /* mkey context qpn_mkey[31:8] (0xffffff: any) */
    struct {
        uint64_t va;
        uint32_t key;
        uint32_t byte_count;
        uint32_t stride; /* repeat block entry */
    } ent[DCXEMU_MLX5_MAX_UMR_ENT];
};

struct dcxemu_mlx5_wqe {
    uint16_t wqe_index; /* from ctrl opmod_idx_opcode */
    uint8_t opcode, opmod, ds, fm_ce_se; /* raw fields */
    uint32_t qpn;
    uint32_t imm; /* ctrl imm, as stored (big-endian value, not swapped) */
    uint16_t stream_id; /* DCI stream (mlx5dv_wr_set_dc_addr_stream) */
    uint32_t num_wqebb; /* DIV_ROUND_UP(ds*16, 64) */
    uint8_t has_av, has_raddr, has_atomic, is_inline;
    struct dcxemu_mlx5_av av;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t atomic_size; /* 4 or 8 */
    uint8_t masked; /* extended (masked) atomic opcode */
    /* host order, the operand width.  CS: swap, compare, swap_mask,
     * compare_mask (all ones for a standard CS).  FA: swap_add is the addend,
     * compare the field boundary of a masked FA (0 for a standard FA). */
    uint64_t swap_add, compare, swap_mask, compare_mask;
    uint32_t num_sge;
    struct dcxemu_mlx5_sge sge[DCXEMU_MLX5_MAX_SGE];
    /* Inline data, copied out and unwrapped.  Adjacent inline segments are
     * one run; it comes before sge[inline_at] in the gather order (UCX puts
     * a header inline ahead of pointer segments). */
    uint32_t inline_len;
    uint32_t inline_at;
    uint8_t inline_data[DCXEMU_MLX5_MAX_INLINE];
    struct dcxemu_mlx5_umr umr;
};

/* Decode the WQE starting at WQE basic block `wqebb` (0..wqebb_cnt-1) of the
 * send queue at sq_buf (wqebb_cnt a power of two; a WQE wraps to the queue
 * start at the end, as libmlx5 writes it).  0, or the mlx5 error syndrome the
 * requester completes it with (MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR for an
 * unknown opcode / a ds of 0 / a ds past max_wqe_bytes or the queue /
 * segments that do not fit ds / an opcode the QP kind does not take / inline
 * data where the local buffer is written (READ, atomics) / what the device
 * does not model: masked operands other than 4 and 8 bytes, a UMR with a BSF
 * or an indirect translation); *w is filled as far as it got.  Bytes past
 * ds*16 are never read; byte counts are taken as written (0 stays 0). */
int dcxemu_mlx5_wqe_decode(const void *sq_buf, uint32_t wqebb_cnt,
                           uint32_t wqebb, enum dcxemu_mlx5_qp_kind kind,
                           uint32_t max_wqe_bytes, struct dcxemu_mlx5_wqe *w);

/* A decoded DC WQE against the device's compact_address_vector capability:
 * 0, or MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR for a DCI's WQE whose address
 * vector is the compact 16-byte form on a device without the capability (an
 * HCA that cannot parse it).  Other kinds and WQEs without an AV pass. */
int dcxemu_mlx5_wqe_check_av(const struct dcxemu_mlx5_wqe *w,
                             enum dcxemu_mlx5_qp_kind kind, int compact_av);

/* Receive WQEs at `index` (already wrapped to the ring / SRQ size): the RQ
 * ring (stride bytes each: data segments; an lkey of MLX5_INVALID_LKEY ends a
 * list shorter than the stride) and the SRQ (a next segment, then data
 * segments): the scatter list and, for the SRQ, next_wqe_index.  Zero-length
 * entries are kept (libmlx5's SRQ writes them).  0, or
 * MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR when the list does not end within max_sge
 * entries or the stride holds no data segment. */
int dcxemu_mlx5_rq_wqe_read(const void *buf, uint32_t stride, uint32_t index,
                            uint32_t max_sge, struct dcxemu_mlx5_sge *sge,
                            uint32_t *num_sge);
int dcxemu_mlx5_srq_wqe_read(const void *buf, uint32_t stride, uint32_t index,
                             uint32_t max_sge, struct dcxemu_mlx5_sge *sge,
                             uint32_t *num_sge, uint16_t *next_index);

#ifdef __cplusplus
}
#endif

#endif
