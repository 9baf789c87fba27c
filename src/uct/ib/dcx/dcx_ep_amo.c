/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Atomics. 64-bit add and compare-swap are the device's native atomics;
 * the others (swap, and, or, xor) are one masked atomic where the device
 * has them, else a compare-swap loop that runs from the completions.
 * 32-bit atomics are masked atomics only. The result of a fetching atomic
 * lands in the operation's registered buffer and is copied out when it
 * completes.
 */
#include "dcx_ep.inl"

#include <endian.h>


/* The arguments of an atomic on a word of @a size bytes; @a supported: the
 * interface advertises it (else UCP emulates it). */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_dcx_ep_amo_check(
        int supported, unsigned size, uint64_t remote_addr, uct_rkey_t rkey)
{
    if (ucs_unlikely(!supported)) {
        return UCS_ERR_UNSUPPORTED;
    }

    UCT_CHECK_PARAM(!(remote_addr & (size - 1)),
                    "unaligned %u-bit atomic address 0x%" PRIx64, size * 8,
                    remote_addr);
    return uct_dcx_ep_check_rkey(rkey, size);
}


/* --- masked atomics (raw WQEs) ------------------------------------------ */

/* Masked (extended) atomics: 32-bit atomics, and the 64-bit ones that would
 * otherwise be compare-swap loops, go out as mlx5 masked atomics in raw WQEs
 * with the segments of mlx5dv.h: control, datagram (the extended DC address
 * vector, as mlx5dv_wr_set_dc_addr writes it), remote address, the masked
 * atomic segment and the data segment that receives the response.
 * Masked compare-swap: if ((old ^ compare) & compare_mask) == 0, then
 * new = (old & ~swap_mask) | (swap & swap_mask). Masked fetch-add: a set bit
 * in the field boundary stops the carry there. The segment: 4 bytes -
 * swap/add, compare/boundary, swap mask, compare mask (16 bytes); 8 bytes -
 * fetch-add: add, boundary (16 bytes); compare-swap: swap, compare, swap
 * mask, compare mask (32 bytes). All fields big-endian, and so is the
 * response, except an 8-byte one from a device answering 8-byte atomics in
 * host order (atomic_req_8B_endianness_mode). */
#define UCT_DCX_MLX5_OPMOD_EXT_ATOMIC(_size) (0x08 | (ucs_ilog2(_size) - 2))

typedef struct {
    struct mlx5_wqe_ctrl_seg ctrl;
    struct mlx5_wqe_datagram_seg dgram;
    struct mlx5_wqe_raddr_seg raddr;
    uint8_t atomic_data[32 + 16]; /* atomic, data */
} uct_dcx_amo_wqe_t;

_Static_assert(sizeof(uct_dcx_amo_wqe_t) == 8 * 16,
               "a masked atomic WQE is at most 8 units of 16 bytes");

static void uct_dcx_op_amo32_fetch(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        *(uint32_t *)op->amo.result = be32toh(*(uint32_t *)op->buf);
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static void uct_dcx_op_amo64_fetch_be(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        *(uint64_t *)op->amo.result = be64toh(*(uint64_t *)op->buf);
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static void uct_dcx_amo_put_be(uint8_t *p, unsigned size, uint64_t value)
{
    uint32_t v32;
    uint64_t v64;

    if (size == sizeof(uint32_t)) {
        v32 = htobe32((uint32_t)value);
        memcpy(p, &v32, sizeof(v32));
    } else {
        v64 = htobe64(value);
        memcpy(p, &v64, sizeof(v64));
    }
}

static void uct_dcx_op_amo_fetch(uct_dcx_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        *(uint64_t *)op->amo.result = *(uint64_t *)op->buf;
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

/* A masked atomic for @a opcode on a word of @a size bytes: the mlx5
 * opcode, and the masks or field boundary that make it one. */
typedef struct {
    uint8_t mlx5_op;
    uint64_t swap_mask;
    uint64_t compare_mask;
    uint64_t boundary;
} uct_dcx_amo_masked_t;

static ucs_status_t uct_dcx_amo_masked_map(uct_atomic_op_t opcode,
                                           unsigned size, uint64_t value,
                                           uct_dcx_amo_masked_t *m)
{
    uint64_t all = (size == sizeof(uint32_t)) ? UINT32_MAX : UINT64_MAX;

    m->swap_mask    = 0;
    m->compare_mask = 0;
    m->boundary     = 0;
    switch (opcode) {
    case UCT_ATOMIC_OP_ADD:
        m->mlx5_op = MLX5_OPCODE_ATOMIC_MASKED_FA;
        break;
    case UCT_ATOMIC_OP_XOR: /* every bit its own field: add without carry */
        m->mlx5_op  = MLX5_OPCODE_ATOMIC_MASKED_FA;
        m->boundary = all;
        break;
    case UCT_ATOMIC_OP_AND: /* clear the bits that are clear in value */
        m->mlx5_op   = MLX5_OPCODE_ATOMIC_MASKED_CS;
        m->swap_mask = ~value & all;
        break;
    case UCT_ATOMIC_OP_OR: /* set the bits that are set in value */
        m->mlx5_op   = MLX5_OPCODE_ATOMIC_MASKED_CS;
        m->swap_mask = value;
        break;
    case UCT_ATOMIC_OP_SWAP:
        m->mlx5_op   = MLX5_OPCODE_ATOMIC_MASKED_CS;
        m->swap_mask = all;
        break;
    case UCT_ATOMIC_OP_CSWAP:
        m->mlx5_op      = MLX5_OPCODE_ATOMIC_MASKED_CS;
        m->swap_mask    = all;
        m->compare_mask = all;
        break;
    default:
        ucs_error("dcx: unsupported atomic operation %d", opcode);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

/* The raw WQE of a masked atomic from the endpoint on @a dci, its response
 * into @a op's buffer. */
static void
uct_dcx_ep_amo_masked_wqe(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep,
                          uct_dcx_dci_t *dci, const uct_dcx_op_t *op,
                          const uct_dcx_amo_masked_t *m, unsigned size,
                          uint64_t value, uint64_t compare,
                          uint64_t remote_addr, uct_rkey_t rkey, int signaled,
                          uct_dcx_amo_wqe_t *wqe)
{
    uct_dcx_peer_t *peer = uct_dcx_ep_peer(iface, ep);
    int cs               = (m->mlx5_op == MLX5_OPCODE_ATOMIC_MASKED_CS);
    unsigned atomic_size = (cs && (size == sizeof(uint64_t))) ? 32 : 16;
    struct mlx5_wqe_data_seg *data;
    uint8_t *seg;
    unsigned ds;

    ds = (sizeof(wqe->ctrl) + sizeof(wqe->dgram) + sizeof(wqe->raddr) +
          atomic_size + sizeof(*data)) /
         16;
    memset(wqe, 0, sizeof(*wqe));
    /* The WQE index is filled in by mlx5dv_wr_raw_wqe. */
    wqe->ctrl.opmod_idx_opcode = htobe32(
            ((uint32_t)UCT_DCX_MLX5_OPMOD_EXT_ATOMIC(size) << 24) | m->mlx5_op);
    wqe->ctrl.qpn_ds   = htobe32((dci->qp->qp_num << 8) | ds);
    wqe->ctrl.fm_ce_se = (signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                         (dci->fence ? MLX5_WQE_CTRL_FENCE : 0);
    /* the endpoint's DCI stream, as mlx5dv_wr_set_dc_addr_stream sets it */
    wqe->ctrl.dci_stream_channel_id = htobe16(ep->stream);
    wqe->dgram.av.key.dc_key        = htobe64(peer->dc_key);
    wqe->dgram.av.dqp_dct           = htobe32(peer->dctn | MLX5_EXTENDED_UD_AV);
    wqe->dgram.av.stat_rate_sl      = iface->config.sl & 0xf;
    wqe->dgram.av.rlid              = htobe16(peer->lid);
    if (peer->is_global) {
        /* the GRH as libmlx5 writes an InfiniBand AH's: the GRH bit, the
         * source GID index, hop limit, class and the destination GID */
        wqe->dgram.av.grh_gid_fl = htobe32(UCS_BIT(30) |
                                           ((uint32_t)iface->gid_index << 20));
        wqe->dgram.av.hop_limit  = iface->config.hop_limit;
        wqe->dgram.av.tclass     = iface->config.traffic_class;
        memcpy(wqe->dgram.av.rgid, peer->gid.raw, sizeof(peer->gid.raw));
    }
    wqe->raddr.raddr = htobe64(remote_addr);
    wqe->raddr.rkey  = htobe32(uct_dcx_rkey(rkey));

    seg = wqe->atomic_data;
    uct_dcx_amo_put_be(seg, size, value);
    seg += size;
    uct_dcx_amo_put_be(seg, size, cs ? compare : m->boundary);
    seg += size;
    if (cs) {
        uct_dcx_amo_put_be(seg, size, m->swap_mask);
        uct_dcx_amo_put_be(seg + size, size, m->compare_mask);
    }
    data = (struct mlx5_wqe_data_seg *)(wqe->atomic_data + atomic_size);
    data->byte_count = htobe32(size);
    data->lkey       = htobe32(op->lkey);
    data->addr       = htobe64((uintptr_t)op->buf);
}

static ucs_status_t
uct_dcx_ep_amo_masked(uct_ep_h tl_ep, unsigned size, uct_atomic_op_t opcode,
                      uint64_t value, uint64_t compare, void *result,
                      uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_op_handler_t handler;
    uct_dcx_amo_masked_t masked;
    uct_dcx_amo_wqe_t wqe;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    int signaled;

    status = uct_dcx_amo_masked_map(opcode, size, value, &masked);
    if (status != UCS_OK) {
        return status;
    }

    if (result == NULL) {
        handler = uct_dcx_op_release;
    } else if (size == sizeof(uint32_t)) {
        handler = uct_dcx_op_amo32_fetch;
    } else {
        handler = iface->config.ext_atomics64_be ? uct_dcx_op_amo64_fetch_be :
                                                   uct_dcx_op_amo_fetch;
    }
    status = uct_dcx_ep_tx_begin(iface, ep, 0, &iface->tx.mp, handler, comp,
                                 &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    tx.op->amo.result = result;

    signaled = uct_dcx_iface_dci_signal(iface, tx.dci, 1);
    uct_dcx_ep_amo_masked_wqe(iface, ep, tx.dci, tx.op, &masked, size, value,
                              compare, remote_addr, rkey, signaled, &wqe);

    ibv_wr_start(tx.dci->qpx);
    tx.dci->qpx->wr_id = UCT_DCX_WR_ID(ep->dci, tx.dci->posted + 1);
    mlx5dv_wr_raw_wqe(tx.dci->mqpx, &wqe);
    /* The raw WQE carries its own address vector. */
    status = uct_dcx_ep_tx_end(iface, ep, 0, &tx,
                               uct_dcx_ep_wr_submit(iface, ep, tx.dci, tx.op,
                                                    signaled));
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    return (result == NULL) ? UCS_OK : UCS_INPROGRESS;
}

static ucs_status_t uct_dcx_ep_atomic32(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                        uint32_t value, uint32_t compare,
                                        uint32_t *result, uint64_t remote_addr,
                                        uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    ucs_status_t status;

    status = uct_dcx_ep_amo_check(iface->config.ext_atomics32, sizeof(uint32_t),
                                  remote_addr, rkey);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    if (ucs_unlikely(
                !uct_dcx_ep_peer(iface, ucs_derived_of(tl_ep, uct_dcx_ep_t))
                         ->ext_atomics)) {
        /* The peer's responder would refuse a masked atomic (REM_INV_REQ),
         * failing the DCI: there is no other way to a 32-bit atomic. */
        return UCS_ERR_UNSUPPORTED;
    }

    return uct_dcx_ep_amo_masked(tl_ep, sizeof(uint32_t), opcode, value,
                                 compare, result, remote_addr, rkey, comp);
}

ucs_status_t uct_dcx_ep_atomic32_post(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                      uint32_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey)
{
    if ((opcode == UCT_ATOMIC_OP_SWAP) || (opcode == UCT_ATOMIC_OP_CSWAP)) {
        return UCS_ERR_UNSUPPORTED; /* only as fetching operations */
    }
    return uct_dcx_ep_atomic32(tl_ep, opcode, value, 0, NULL, remote_addr, rkey,
                               NULL);
}

ucs_status_t uct_dcx_ep_atomic32_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint32_t value, uint32_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp)
{
    if (opcode == UCT_ATOMIC_OP_CSWAP) {
        return UCS_ERR_UNSUPPORTED; /* uct_ep_atomic_cswap32 */
    }
    return uct_dcx_ep_atomic32(tl_ep, opcode, value, 0, result, remote_addr,
                               rkey, comp);
}

ucs_status_t uct_dcx_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare,
                                       uint32_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint32_t *result,
                                       uct_completion_t *comp)
{
    return uct_dcx_ep_atomic32(tl_ep, UCT_ATOMIC_OP_CSWAP, swap, compare,
                               result, remote_addr, rkey, comp);
}


/* --- 64-bit: native atomics and compare-swap loops ----------------------- */

/* The op's native atomic, fetch-add or compare-swap, as the DCI's next work
 * request. */
static UCS_F_ALWAYS_INLINE void
uct_dcx_ep_amo_wr(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep, uct_dcx_dci_t *dci,
                  const uct_dcx_op_t *op, int cswap, uint64_t swap)
{
    struct ibv_qp_ex *qpx;

    qpx = uct_dcx_ep_wr_start(iface, ep, dci, 1);
    if (cswap) {
        ibv_wr_atomic_cmp_swp(qpx, uct_dcx_rkey(op->amo.rkey),
                              op->amo.remote_addr, op->amo.compare, swap);
    } else {
        ibv_wr_atomic_fetch_add(qpx, uct_dcx_rkey(op->amo.rkey),
                                op->amo.remote_addr, op->amo.operand);
    }
    ibv_wr_set_sge(qpx, op->lkey, (uintptr_t)op->buf, sizeof(uint64_t));
}

static uint64_t
uct_dcx_amo_apply(uct_atomic_op_t opcode, uint64_t value, uint64_t operand)
{
    switch (opcode) {
    case UCT_ATOMIC_OP_AND:
        return value & operand;
    case UCT_ATOMIC_OP_OR:
        return value | operand;
    case UCT_ATOMIC_OP_XOR:
        return value ^ operand;
    default: /* UCT_ATOMIC_OP_SWAP */
        return operand;
    }
}

/* Swap, and, or, xor: compare-swap until the word did not change between
 * reading and writing; atomic with respect to all device atomics. */
void uct_dcx_op_amo_cas_loop(uct_dcx_op_t *op, ucs_status_t status)
{
    uct_dcx_iface_t *iface = op->iface;
    uint64_t old           = *(uint64_t *)op->buf;
    uct_dcx_dci_t *dci     = &iface->tx.dcis[op->dci];
    uct_dcx_ep_t *ep       = ucs_derived_of(op->amo.ep, uct_dcx_ep_t);

    if ((status == UCS_OK) && (old != op->amo.compare)) {
        if (ep == NULL) {
            status = UCS_ERR_CANCELED; /* the endpoint was destroyed */
        } else {
            /* The next try takes the send queue slot of the completion
             * being handled, before anybody else can. */
            ucs_assert(dci->slot_held);
            uct_dcx_iface_dci_slot_return(iface, dci);
            op->amo.compare = old;
            uct_dcx_ep_amo_wr(iface, ep, dci, op, 1,
                              uct_dcx_amo_apply(op->amo.opcode, old,
                                                op->amo.operand));
            status = uct_dcx_ep_wr_complete(iface, ep, dci, op);
            if (status == UCS_OK) {
                /* The operation goes on: flushes issued after it wait for
                 * its new request. */
                uct_dcx_iface_flushes_to_tail(dci);
                return;
            }
        }
    }

    if ((status == UCS_OK) && (op->amo.result != NULL)) {
        *(uint64_t *)op->amo.result = old;
    }
    uct_dcx_op_complete(op, status);
    ucs_mpool_put_inline(op);
}

static ucs_status_t uct_dcx_ep_atomic64(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                        uint64_t value, uint64_t compare,
                                        uint64_t *result, uint64_t remote_addr,
                                        uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_dcx_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_dcx_iface_t);
    uct_dcx_ep_t *ep       = ucs_derived_of(tl_ep, uct_dcx_ep_t);
    uct_dcx_op_handler_t handler;
    uint64_t swap = 0;
    ucs_status_t status;
    uct_dcx_ep_tx_t tx;
    int cswap;

    status = uct_dcx_ep_amo_check(iface->config.atomics, sizeof(uint64_t),
                                  remote_addr, rkey);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    switch (opcode) {
    case UCT_ATOMIC_OP_ADD:
        cswap   = 0;
        handler = (result == NULL) ? uct_dcx_op_release : uct_dcx_op_amo_fetch;
        break;
    case UCT_ATOMIC_OP_CSWAP:
        cswap   = 1;
        swap    = value;
        handler = uct_dcx_op_amo_fetch;
        break;
    case UCT_ATOMIC_OP_SWAP:
    case UCT_ATOMIC_OP_AND:
    case UCT_ATOMIC_OP_OR:
    case UCT_ATOMIC_OP_XOR:
        if (iface->config.ext_atomics64 &&
            uct_dcx_ep_peer(iface, ep)->ext_atomics) {
            /* One masked atomic instead of a compare-swap loop. */
            return uct_dcx_ep_amo_masked(tl_ep, sizeof(uint64_t), opcode, value,
                                         0, result, remote_addr, rkey, comp);
        }
        /* First guess: the word is 0 (one round trip when it is). */
        cswap   = 1;
        compare = 0;
        swap    = uct_dcx_amo_apply(opcode, 0, value);
        handler = uct_dcx_op_amo_cas_loop;
        break;
    default:
        ucs_error("dcx: unsupported atomic operation %d", opcode);
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_dcx_ep_tx_begin(iface, ep, 0, &iface->tx.mp, handler, comp,
                                 &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    tx.op->amo.result      = result;
    tx.op->amo.ep          = tl_ep;
    tx.op->amo.remote_addr = remote_addr;
    tx.op->amo.rkey        = rkey;
    tx.op->amo.operand     = value;
    tx.op->amo.compare     = compare;
    tx.op->amo.opcode      = opcode;

    uct_dcx_ep_amo_wr(iface, ep, tx.dci, tx.op, cswap, swap);
    status = uct_dcx_ep_tx_post(iface, ep, 0, &tx);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    return (result == NULL) ? UCS_OK : UCS_INPROGRESS;
}

ucs_status_t uct_dcx_ep_atomic64_post(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                      uint64_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey)
{
    if (opcode == UCT_ATOMIC_OP_SWAP) {
        return UCS_ERR_UNSUPPORTED; /* only as a fetching operation */
    }
    return uct_dcx_ep_atomic64(tl_ep, opcode, value, 0, NULL, remote_addr, rkey,
                               NULL);
}

ucs_status_t uct_dcx_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint64_t value, uint64_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp)
{
    return uct_dcx_ep_atomic64(tl_ep, opcode, value, 0, result, remote_addr,
                               rkey, comp);
}

ucs_status_t uct_dcx_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                       uint64_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint64_t *result,
                                       uct_completion_t *comp)
{
    return uct_dcx_ep_atomic64(tl_ep, UCT_ATOMIC_OP_CSWAP, swap, compare,
                               result, remote_addr, rkey, comp);
}
