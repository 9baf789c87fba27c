/* mlx5 WQE decoding (src/dcxemu/mlx5_wqe.c): send WQEs laid out byte for byte as libmlx5 v44's
 * builders (ibv_wr_*, mlx5dv_wr_set_dc_addr, mlx5dv_wr_mr_list / mr_interleaved) and UCX 1.13's
 * rc/dc_mlx5 writers lay them out, with mlx5dv.h's structs and inline helpers; receive WQEs as
 * mlx5_post_recv and mlx5_post_srq_recv write them. */
#include <gtest/gtest.h>

#include <infiniband/mlx5dv.h>

#include <endian.h>
#include <memory>
#include <string>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

extern "C" {
#include "mlx5_wqe.h"
}

namespace {

const uint32_t QPN     = 0x123456;
const uint32_t MAX_WQE = 1024; /* bytes a WQE may take (the decoder's limit) */
const uint8_t JUNK = 0x5a; /* what the queue holds outside the WQE under test */

/* The 4-byte inline segment header (libmlx5's wqe.h is not a public header) */
struct mlx5_wqe_inline_seg_t {
    uint32_t byte_count;
};

/* A send queue written the way libmlx5 and UCX write theirs: segments follow each other from the
 * control segment; one that starts at the queue end goes to its start; inline data wraps byte by
 * byte (libmlx5's set_data_inl_seg, UCX's uct_ib_mlx5_inline_copy). */
struct sq {
    std::vector<uint8_t> mem;
    uint32_t cnt;
    uint8_t *q, *qend, *ctrl = nullptr, *cur = nullptr;
    unsigned size = 0; /* bytes of the WQE so far */

    explicit sq(uint32_t wqebbs)
        : mem(wqebbs * MLX5_SEND_WQE_BB, JUNK), cnt(wqebbs)
    {
        q    = mem.data();
        qend = q + mem.size();
    }
    void start(uint32_t wqebb)
    {
        ctrl = q + wqebb * MLX5_SEND_WQE_BB;
        memset(ctrl, 0, sizeof(mlx5_wqe_ctrl_seg));
        cur  = ctrl + sizeof(mlx5_wqe_ctrl_seg);
        size = sizeof(mlx5_wqe_ctrl_seg);
    }
    void *next(size_t len)
    {
        if (cur == qend) {
            cur = q;
        }
        EXPECT_LE(cur + len, qend) << "a segment the writers never split";
        void *p = cur;
        memset(p, 0, len);
        cur += len;
        size += len;
        return p;
    }
    template <class T> T *seg()
    {
        return (T *)next(sizeof(T));
    }
    /* an inline segment holding data, padded to 16 bytes */
    void inl(const void *data, uint32_t len)
    {
        auto *h          = (mlx5_wqe_inline_seg_t *)next(4);
        h->byte_count    = htobe32(len | MLX5_INLINE_SEG);
        const uint8_t *d = (const uint8_t *)data;
        for (uint32_t i = 0; i < len; i++) {
            if (cur == qend) {
                cur = q;
            }
            *cur++ = d[i];
        }
        unsigned pad = (16 - (4 + len) % 16) % 16;
        for (unsigned i = 0; i < pad; i++) {
            if (cur == qend) {
                cur = q;
            }
            *cur++ = 0;
        }
        size += len + pad;
    }
    void data(uint32_t len, uint32_t lkey, uint64_t addr)
    {
        mlx5dv_set_data_seg(seg<mlx5_wqe_data_seg>(), len, lkey, addr);
    }
    uint8_t ds() const
    {
        return (uint8_t)(size / 16);
    }
    void finish(uint16_t pi, uint8_t opcode, uint8_t opmod, uint8_t fm_ce_se,
                uint32_t imm)
    {
        mlx5dv_set_ctrl_seg((mlx5_wqe_ctrl_seg *)ctrl, pi, opcode, opmod, QPN,
                            fm_ce_se, ds(), 0, imm);
    }
};

/* What an address handle holds and mlx5dv_wr_set_dc_addr copies: libmlx5's mlx5_create_ah */
struct ah_attr {
    uint16_t dlid         = 0x2a;
    uint8_t sl            = 5;
    uint8_t static_rate   = 3;
    uint8_t src_path_bits = 0;
    bool global           = false;
    uint8_t sgid_index = 0, hop_limit = 0, tclass = 0;
    uint32_t flow_label = 0;
    uint8_t dgid[16]    = {};
    uint8_t dmac[6]     = {};
};

const uint32_t DCTN   = 0xabcde;
const uint64_t DC_KEY = 0x1122334455667788ull;

/* The extended datagram segment of a libmlx5 DCI WQE (IB link layer) */
void set_dc_av(sq &s, const ah_attr &a)
{
    auto *d      = s.seg<mlx5_wqe_datagram_seg>();
    uint32_t gfl = a.global ? (1u << 30 | (uint32_t)a.sgid_index << 20 |
                               a.flow_label) :
                              0;
    mlx5dv_set_dgram_seg(d, DC_KEY, DCTN, 1,
                         (uint8_t)(a.static_rate << 4 | (a.sl & 0xf)),
                         a.src_path_bits, a.dlid, (uint8_t *)a.dmac,
                         a.global ? a.tclass : 0, a.global ? a.hop_limit : 0,
                         gfl, (uint8_t *)a.dgid);
}

/* UCX's compact (link-local) AV: 16 bytes, no extension bit */
void set_compact_av(sq &s, uint16_t rlid, uint8_t sl)
{
    auto *av         = (mlx5_wqe_av *)s.next(16);
    av->key.dc_key   = htobe64(DC_KEY);
    av->dqp_dct      = htobe32(DCTN);
    av->stat_rate_sl = sl;
    av->rlid         = htobe16(rlid);
}

void set_raddr(sq &s, uint64_t raddr, uint32_t rkey)
{
    auto *r  = s.seg<mlx5_wqe_raddr_seg>();
    r->raddr = htobe64(raddr);
    r->rkey  = htobe32(rkey);
}

struct wqe_test : public ::testing::Test {
    std::unique_ptr<dcxemu_mlx5_wqe> w{ new dcxemu_mlx5_wqe };

    int decode(const sq &s, uint32_t wqebb, dcxemu_mlx5_qp_kind kind,
               uint32_t max = MAX_WQE)
    {
        memset(w.get(), 0xcc, sizeof(*w)); /* nothing left from before counts */
        return dcxemu_mlx5_wqe_decode(s.q, s.cnt, wqebb, kind, max, w.get());
    }
    void expect_av(const ah_attr &a)
    {
        EXPECT_TRUE(w->has_av);
        EXPECT_EQ(w->av.dc_key, DC_KEY);
        EXPECT_EQ(w->av.dctn, DCTN);
        EXPECT_EQ(w->av.ext, 1);
        EXPECT_EQ(w->av.rlid, a.dlid);
        EXPECT_EQ(w->av.sl, a.sl);
        EXPECT_EQ(w->av.stat_rate, a.static_rate);
        EXPECT_EQ(w->av.grh, a.global ? 1 : 0);
    }
};

/* ---- every opcode on an RC QP and a DCI, as libmlx5's ibv_wr_* builders write it */

enum class op {
    send,
    send_imm,
    send_inv,
    write,
    write_imm,
    read,
    cs,
    fa,
    nop,
    local_inv
};

struct op_case {
    op o;
    uint8_t opcode;
    const char *name;
};

const op_case op_cases[] = {
    { op::send, MLX5_OPCODE_SEND, "send" },
    { op::send_imm, MLX5_OPCODE_SEND_IMM, "send_imm" },
    { op::send_inv, MLX5_OPCODE_SEND_INVAL, "send_inv" },
    { op::write, MLX5_OPCODE_RDMA_WRITE, "write" },
    { op::write_imm, MLX5_OPCODE_RDMA_WRITE_IMM, "write_imm" },
    { op::read, MLX5_OPCODE_RDMA_READ, "read" },
    { op::cs, MLX5_OPCODE_ATOMIC_CS, "atomic_cs" },
    { op::fa, MLX5_OPCODE_ATOMIC_FA, "atomic_fa" },
    { op::nop, MLX5_OPCODE_NOP, "nop" },
    { op::local_inv, MLX5_OPCODE_UMR, "local_inv" },
};

const uint32_t IMM_BE =
        0xdeadbeef; /* an imm_data as the caller gives it (already big-endian) */
const uint32_t INV_RKEY = 0x4455;
const uint64_t RADDR    = 0x7f0000001000ull;
const uint32_t RKEY     = 0x9876;

/* One WQE at wqebb: _common_wqe_init, the builder, wr_set_sge (two SGEs for send/write/read,
 * the 8-byte response for atomics), mlx5dv_wr_set_dc_addr on a DCI, _common_wqe_finalize */
void build_op(sq &s, uint32_t wqebb, uint16_t pi, const op_case &c, bool dci,
              const ah_attr &a)
{
    uint32_t imm     = 0;
    uint8_t fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED;
    s.start(wqebb);
    switch (c.o) {
    case op::local_inv: {
        /* _build_umr_wqe with an empty bind: UMR control, mkey context (free), nothing else */
        imm       = htobe32(INV_RKEY);
        auto *uc  = s.seg<mlx5_wqe_umr_ctrl_seg>();
        uc->flags = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET |
                    MLX5_WQE_UMR_CTRL_FLAG_INLINE |
                    MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
        uc->mkey_mask = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN);
        auto *mk      = s.seg<mlx5_wqe_mkey_context_seg>();
        mk->qpn_mkey  = htobe32((INV_RKEY & 0xff) | 0xffffff00);
        mk->free      = MLX5_WQE_MKEY_CONTEXT_FREE;
        s.finish(pi, c.opcode, 0, fm_ce_se, imm);
        return;
    }
    case op::nop:
        /* UCX's NOP: control (and AV on a DCI), an empty inline segment past ds */
        if (dci) {
            set_dc_av(s, a);
        }
        s.finish(pi, c.opcode, 0, MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE,
                 0);
        *(uint32_t *)s.next(16) = htobe32(MLX5_INLINE_SEG);
        s.size -= 16; /* not in ds */
        return;
    default:
        break;
    }
    if (dci) {
        set_dc_av(s, a);
    }
    switch (c.o) {
    case op::send_imm:
    case op::write_imm:
        imm = IMM_BE;
        break;
    case op::send_inv:
        imm = htobe32(INV_RKEY);
        break;
    default:
        break;
    }
    if (c.o == op::write || c.o == op::write_imm || c.o == op::read ||
        c.o == op::cs || c.o == op::fa) {
        set_raddr(s, RADDR, RKEY);
    }
    if (c.o == op::cs || c.o == op::fa) {
        auto *at = s.seg<mlx5_wqe_atomic_seg>();
        if (c.o == op::cs) {
            at->swap_add = htobe64(0x1111222233334444ull);
            at->compare  = htobe64(0x5555666677778888ull);
        } else {
            at->swap_add = htobe64(0x10);
            at->compare =
                    0xffffffffffffffffull; /* libmlx5 leaves it as it was */
        }
        s.data(8, 0x77, 0x600000);
    } else {
        s.data(100, 0x71, 0x500000);
        s.data(200, 0x72, 0x510000);
    }
    s.finish(pi, c.opcode, 0, fm_ce_se, imm);
}

TEST_F(wqe_test, every_opcode_rc_and_dci)
{
    ah_attr a;
    for (bool dci : { false, true }) {
        for (const op_case &c : op_cases) {
            SCOPED_TRACE(std::string(c.name) + (dci ? " dci" : " rc"));
            sq s(8);
            build_op(s, 2, 0x1234, c, dci, a);
            const uint8_t ds = s.ds();
            ASSERT_EQ(decode(s, 2,
                             dci ? DCXEMU_MLX5_QP_DCI : DCXEMU_MLX5_QP_RC),
                      0);
            EXPECT_EQ(w->opcode, c.opcode);
            EXPECT_EQ(w->opmod, 0);
            EXPECT_EQ(w->wqe_index, 0x1234);
            EXPECT_EQ(w->qpn, QPN);
            EXPECT_EQ(w->ds, ds);
            EXPECT_EQ(w->num_wqebb, (ds * 16u + 63) / 64);
            bool local  = c.o == op::local_inv;
            bool remote = c.o == op::write || c.o == op::write_imm ||
                          c.o == op::read || c.o == op::cs || c.o == op::fa;
            bool atomic = c.o == op::cs || c.o == op::fa;
            if (c.o == op::nop) {
                EXPECT_EQ(w->fm_ce_se,
                          MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE);
                EXPECT_EQ(w->ds, dci ? 4 : 1);
                EXPECT_EQ(w->num_sge, 0u);
                EXPECT_FALSE(w->is_inline);
                continue;
            }
            EXPECT_EQ(w->fm_ce_se,
                      MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED);
            if (dci && !local) {
                expect_av(a);
            } else {
                EXPECT_FALSE(w->has_av);
            }
            EXPECT_EQ(w->has_raddr, remote ? 1 : 0);
            EXPECT_EQ(w->has_atomic, atomic ? 1 : 0);
            if (remote) {
                EXPECT_EQ(w->raddr, RADDR);
                EXPECT_EQ(w->rkey, RKEY);
            }
            EXPECT_FALSE(w->is_inline);
            switch (c.o) {
            case op::send_imm:
            case op::write_imm:
                EXPECT_EQ(w->imm, IMM_BE);
                break;
            case op::send_inv:
                EXPECT_EQ(be32toh(w->imm), INV_RKEY);
                break;
            case op::local_inv:
                EXPECT_EQ(w->umr.mkey, INV_RKEY);
                EXPECT_EQ(w->umr.free, 1);
                EXPECT_EQ(w->umr.klm_octowords, 0);
                EXPECT_EQ(w->umr.num_entries, 0u);
                EXPECT_EQ(w->umr.qpn, 0xffffffu);
                EXPECT_EQ(w->umr.tag, INV_RKEY & 0xff);
                EXPECT_EQ(w->umr.mkey_mask,
                          (uint64_t)(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE |
                                     MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                                     MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN));
                EXPECT_EQ(w->ds, 8);
                EXPECT_EQ(w->num_sge, 0u);
                continue;
            default:
                break;
            }
            if (atomic) {
                EXPECT_EQ(w->atomic_size, 8u);
                EXPECT_FALSE(w->masked);
                if (c.o == op::cs) {
                    EXPECT_EQ(w->swap_add, 0x1111222233334444ull);
                    EXPECT_EQ(w->compare, 0x5555666677778888ull);
                    EXPECT_EQ(w->swap_mask, UINT64_MAX);
                    EXPECT_EQ(w->compare_mask, UINT64_MAX);
                } else {
                    EXPECT_EQ(w->swap_add, 0x10u);
                    EXPECT_EQ(w->compare,
                              0u); /* a standard FA has no compare operand */
                }
                ASSERT_EQ(w->num_sge, 1u);
                EXPECT_EQ(w->sge[0].length, 8u);
                EXPECT_EQ(w->sge[0].lkey, 0x77u);
                EXPECT_EQ(w->sge[0].addr, 0x600000u);
            } else {
                ASSERT_EQ(w->num_sge, 2u);
                EXPECT_EQ(w->sge[0].length, 100u);
                EXPECT_EQ(w->sge[0].lkey, 0x71u);
                EXPECT_EQ(w->sge[0].addr, 0x500000u);
                EXPECT_EQ(w->sge[1].length, 200u);
                EXPECT_EQ(w->sge[1].lkey, 0x72u);
                EXPECT_EQ(w->sge[1].addr, 0x510000u);
            }
        }
    }
}

/* UD takes sends only (libmlx5: MLX5_SUPPORTED_SEND_OPS_FLAGS_UD), with the Q_Key in the AV */
TEST_F(wqe_test, ud_send_and_refused_opcodes)
{
    sq s(4);
    s.start(0);
    auto *d        = s.seg<mlx5_wqe_datagram_seg>();
    uint8_t mac[6] = {}, gid[16] = {};
    mlx5dv_set_dgram_seg(d, 0, 0x321, 1, 0, 0, 7, mac, 0, 0, 0, gid);
    d->av.key.qkey.qkey = htobe32(0x11111111);
    s.data(64, 1, 0x1000);
    s.finish(0, MLX5_OPCODE_SEND, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0);
    ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_UD), 0);
    EXPECT_TRUE(w->has_av);
    EXPECT_EQ(w->av.qkey, 0x11111111u);
    EXPECT_EQ(w->av.dctn, 0x321u);
    EXPECT_EQ(w->av.rlid, 7);
    ASSERT_EQ(w->num_sge, 1u);

    ah_attr a;
    for (const op_case &c : op_cases) {
        if (c.o == op::send || c.o == op::send_imm || c.o == op::nop) {
            continue;
        }
        SCOPED_TRACE(c.name);
        sq t(8);
        build_op(t, 0, 0, c, true, a);
        EXPECT_EQ(decode(t, 0, DCXEMU_MLX5_QP_UD),
                  MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    }
}

/* ---- address vectors */

TEST_F(wqe_test, extended_av_with_grh)
{
    ah_attr a;
    a.global     = true;
    a.sgid_index = 3;
    a.hop_limit  = 64;
    a.tclass     = 0x28;
    a.flow_label = 0xabcde;
    for (int i = 0; i < 16; i++) {
        a.dgid[i] = (uint8_t)(0xf0 + i);
    }
    for (int i = 0; i < 6; i++) {
        a.dmac[i] = (uint8_t)(0x10 + i);
    }
    sq s(4);
    s.start(1);
    set_dc_av(s, a);
    set_raddr(s, RADDR, RKEY);
    s.data(4096, 5, 0x8000);
    s.finish(1, MLX5_OPCODE_RDMA_WRITE, 0, 0, 0);
    ((mlx5_wqe_ctrl_seg *)s.ctrl)->dci_stream_channel_id = htobe16(
            0x105); /* set_dc_addr_stream */
    ASSERT_EQ(decode(s, 1, DCXEMU_MLX5_QP_DCI), 0);
    expect_av(a);
    EXPECT_EQ(w->stream_id, 0x105);
    EXPECT_EQ(w->av.sgid_index, 3);
    EXPECT_EQ(w->av.hop_limit, 64);
    EXPECT_EQ(w->av.tclass, 0x28);
    EXPECT_EQ(w->av.flow_label, 0xabcdeu);
    EXPECT_EQ(memcmp(w->av.rgid, a.dgid, 16), 0);
    EXPECT_EQ(memcmp(w->av.rmac, a.dmac, 6), 0);
    EXPECT_EQ(w->av.stat_rate_sl, (3 << 4) | 5);
    EXPECT_EQ(w->ds, 6);
}

/* UCX's dc_mlx5 without a GRH: the 16-byte base AV, so the raddr segment follows at 32 */
TEST_F(wqe_test, compact_av)
{
    sq s(4);
    s.start(0);
    set_compact_av(s, 0x77, 9);
    set_raddr(s, RADDR, RKEY);
    s.data(512, 6, 0x9000);
    s.finish(7, MLX5_OPCODE_RDMA_READ, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0);
    ASSERT_EQ(s.ds(), 4);
    ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_DCI), 0);
    EXPECT_TRUE(w->has_av);
    EXPECT_EQ(w->av.ext, 0);
    EXPECT_EQ(w->av.dc_key, DC_KEY);
    EXPECT_EQ(w->av.dctn, DCTN);
    EXPECT_EQ(w->av.rlid, 0x77);
    EXPECT_EQ(w->av.sl, 9);
    EXPECT_EQ(w->av.grh, 0);
    EXPECT_EQ(w->raddr, RADDR);
    ASSERT_EQ(w->num_sge, 1u);
    EXPECT_EQ(w->sge[0].length, 512u);
}

/* A device without compact_address_vector (DCXEMU_COMPACT_AV=0) cannot parse
 * the compact form: LOC_QP_OP_ERR for a DCI's WQE carrying it; the extended
 * form, RC WQEs and WQEs without an AV pass either way. */
TEST_F(wqe_test, compact_av_refused_without_the_capability)
{
    const int ERR = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;

    {
        sq s(4);
        s.start(0);
        set_compact_av(s, 0x77, 9);
        set_raddr(s, RADDR, RKEY);
        s.data(512, 6, 0x9000);
        s.finish(7, MLX5_OPCODE_RDMA_WRITE, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0);
        ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_DCI), 0);
        EXPECT_EQ(dcxemu_mlx5_wqe_check_av(w.get(), DCXEMU_MLX5_QP_DCI, 1), 0);
        EXPECT_EQ(dcxemu_mlx5_wqe_check_av(w.get(), DCXEMU_MLX5_QP_DCI, 0),
                  ERR);
    }
    {
        ah_attr a;
        sq s(4);
        s.start(0);
        set_dc_av(s, a);
        set_raddr(s, RADDR, RKEY);
        s.data(512, 6, 0x9000);
        s.finish(7, MLX5_OPCODE_RDMA_WRITE, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0);
        ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_DCI), 0);
        EXPECT_EQ(w->av.ext, 1);
        EXPECT_EQ(dcxemu_mlx5_wqe_check_av(w.get(), DCXEMU_MLX5_QP_DCI, 0), 0);
    }
    {
        sq s(4);
        s.start(0);
        set_raddr(s, RADDR, RKEY);
        s.data(512, 6, 0x9000);
        s.finish(7, MLX5_OPCODE_RDMA_WRITE, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0);
        ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), 0);
        EXPECT_FALSE(w->has_av);
        EXPECT_EQ(dcxemu_mlx5_wqe_check_av(w.get(), DCXEMU_MLX5_QP_RC, 0), 0);
    }
}

/* ---- wrapping at the queue end */

/* libmlx5's set_data_inl_seg: the inline data runs past the queue end and goes on at its start */
TEST_F(wqe_test, inline_data_wraps_queue_end)
{
    uint8_t data[100];
    for (unsigned i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)(i * 7 + 1);
    }
    sq s(4);
    s.start(3); /* the last basic block: 44 bytes of data fit before the end */
    s.inl(data, sizeof(data));
    s.finish(3, MLX5_OPCODE_SEND, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0);
    ASSERT_EQ(s.ds(), 1 + (4 + 100 + 15) / 16);
    ASSERT_EQ(decode(s, 3, DCXEMU_MLX5_QP_RC), 0);
    EXPECT_EQ(w->num_wqebb, 2u);
    EXPECT_TRUE(w->is_inline);
    EXPECT_EQ(w->num_sge, 0u);
    ASSERT_EQ(w->inline_len, sizeof(data));
    EXPECT_EQ(memcmp(w->inline_data, data, sizeof(data)), 0);

    /* the same on a DCI: control + extended AV fill the block, the inline segment starts the
     * queue (libmlx5: "In UD/DC cur_data may overrun the SQ") */
    ah_attr a;
    sq t(4);
    t.start(3);
    set_dc_av(t, a);
    t.inl(data, 33);
    t.finish(3, MLX5_OPCODE_SEND_IMM, 0, 0, IMM_BE);
    ASSERT_EQ(decode(t, 3, DCXEMU_MLX5_QP_DCI), 0);
    expect_av(a);
    EXPECT_EQ(w->imm, IMM_BE);
    ASSERT_EQ(w->inline_len, 33u);
    EXPECT_EQ(memcmp(w->inline_data, data, 33), 0);
}

/* A WQE of several basic blocks that wraps between its data segments */
TEST_F(wqe_test, wqe_wraps_with_many_sges)
{
    sq s(4);
    s.start(3);
    for (uint32_t i = 0; i < 9; i++) {
        s.data(1000 + i, 0x100 + i, 0x10000ull * (i + 1));
    }
    s.finish(0xffff, MLX5_OPCODE_SEND, 0, 0, 0);
    ASSERT_EQ(s.ds(), 10);
    ASSERT_EQ(decode(s, 3, DCXEMU_MLX5_QP_RC), 0);
    EXPECT_EQ(w->wqe_index, 0xffff);
    EXPECT_EQ(w->num_wqebb, 3u);
    ASSERT_EQ(w->num_sge, 9u);
    for (uint32_t i = 0; i < 9; i++) {
        EXPECT_EQ(w->sge[i].length, 1000 + i);
        EXPECT_EQ(w->sge[i].lkey, 0x100 + i);
        EXPECT_EQ(w->sge[i].addr, 0x10000ull * (i + 1));
    }

    /* a DCI RDMA write whose raddr segment starts the queue (ctrl + AV end the last block) */
    ah_attr a;
    sq t(2);
    t.start(1);
    set_dc_av(t, a);
    set_raddr(t, RADDR, RKEY);
    t.data(8, 1, 2);
    t.finish(1, MLX5_OPCODE_RDMA_WRITE, 0, 0, 0);
    ASSERT_EQ(decode(t, 1, DCXEMU_MLX5_QP_DCI), 0);
    EXPECT_EQ(w->raddr, RADDR);
    EXPECT_EQ(w->rkey, RKEY);
    ASSERT_EQ(w->num_sge, 1u);
    EXPECT_EQ(w->sge[0].addr, 2u);
}

/* UCX's am_zcopy: a header inline ahead of pointer segments */
TEST_F(wqe_test, inline_header_then_pointers)
{
    uint8_t hdr[13] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };
    ah_attr a;
    sq s(8);
    s.start(0);
    set_compact_av(s, 3, 0);
    s.inl(hdr, sizeof(hdr));
    s.data(4000, 9, 0x1000);
    s.data(96, 9, 0x3000);
    s.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
    ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_DCI), 0);
    EXPECT_TRUE(w->is_inline);
    EXPECT_EQ(w->inline_at, 0u);
    ASSERT_EQ(w->inline_len, sizeof(hdr));
    EXPECT_EQ(memcmp(w->inline_data, hdr, sizeof(hdr)), 0);
    ASSERT_EQ(w->num_sge, 2u);
    EXPECT_EQ(w->sge[1].length, 96u);

    /* an empty inline segment (UCX's zero-length AM) */
    sq t(2);
    t.start(0);
    t.inl(hdr, 0);
    t.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
    ASSERT_EQ(decode(t, 0, DCXEMU_MLX5_QP_RC), 0);
    EXPECT_TRUE(w->is_inline);
    EXPECT_EQ(w->inline_len, 0u);
}

/* UCX's zero-length RDMA write: ctrl, AV, raddr, nothing else */
TEST_F(wqe_test, zero_length_write)
{
    sq s(2);
    s.start(0);
    set_compact_av(s, 3, 0);
    set_raddr(s, RADDR, RKEY);
    s.finish(0, MLX5_OPCODE_RDMA_WRITE, 0, 0, 0);
    ASSERT_EQ(decode(s, 0, DCXEMU_MLX5_QP_DCI), 0);
    EXPECT_EQ(w->num_sge, 0u);
    EXPECT_FALSE(w->is_inline);
    EXPECT_EQ(w->raddr, RADDR);
}

/* ---- atomics: libmlx5's standard ones and UCX's masked ones (opmod 8 | log2(size) - 2) */

struct masked_case {
    uint8_t opcode;
    unsigned size;
    const char *name;
};

TEST_F(wqe_test, masked_atomics_4_and_8_bytes)
{
    const masked_case cases[] = {
        { MLX5_OPCODE_ATOMIC_MASKED_CS, 4, "cs32" },
        { MLX5_OPCODE_ATOMIC_MASKED_FA, 4, "fa32" },
        { MLX5_OPCODE_ATOMIC_MASKED_CS, 8, "cs64" },
        { MLX5_OPCODE_ATOMIC_MASKED_FA, 8, "fa64" },
    };
    for (bool dci : { false, true }) {
        for (const masked_case &c : cases) {
            SCOPED_TRACE(std::string(c.name) + (dci ? " dci" : " rc"));
            sq s(4);
            /* the last block: on a DCI an 8-byte CS's second half wraps (UCX's wrap_exact) */
            s.start(3);
            if (dci) {
                set_compact_av(s, 1, 0);
            }
            set_raddr(s, RADDR, RKEY);
            bool cs = c.opcode == MLX5_OPCODE_ATOMIC_MASKED_CS;
            if (c.size == 4) {
                uint32_t *v = (uint32_t *)s.next(16);
                v[0]        = htobe32(0xa1a2a3a4);
                v[1]        = htobe32(0xb1b2b3b4);
                if (cs) {
                    v[2] = htobe32(0xc1c2c3c4);
                    v[3] = htobe32(0xd1d2d3d4);
                }
            } else {
                uint64_t *v = (uint64_t *)s.next(16);
                v[0]        = htobe64(0xa1a2a3a4a5a6a7a8ull);
                v[1]        = htobe64(0xb1b2b3b4b5b6b7b8ull);
                if (cs) {
                    v    = (uint64_t *)s.next(16);
                    v[0] = htobe64(0xc1c2c3c4c5c6c7c8ull);
                    v[1] = htobe64(0xd1d2d3d4d5d6d7d8ull);
                }
            }
            s.data(c.size, 0x55, 0x4000);
            uint8_t opmod = (uint8_t)(8 | (c.size == 4 ? 0 : 1));
            s.finish(3, c.opcode, opmod, MLX5_WQE_CTRL_CQ_UPDATE, 0);
            ASSERT_EQ(decode(s, 3,
                             dci ? DCXEMU_MLX5_QP_DCI : DCXEMU_MLX5_QP_RC),
                      0);
            EXPECT_EQ(w->opmod, opmod);
            EXPECT_TRUE(w->has_atomic);
            EXPECT_TRUE(w->masked);
            EXPECT_EQ(w->atomic_size, c.size);
            EXPECT_EQ(w->raddr, RADDR);
            if (c.size == 4) {
                EXPECT_EQ(w->swap_add, 0xa1a2a3a4u);
                EXPECT_EQ(w->compare, 0xb1b2b3b4u);
                EXPECT_EQ(w->swap_mask, cs ? 0xc1c2c3c4u : 0u);
                EXPECT_EQ(w->compare_mask, cs ? 0xd1d2d3d4u : 0u);
            } else {
                EXPECT_EQ(w->swap_add, 0xa1a2a3a4a5a6a7a8ull);
                EXPECT_EQ(w->compare, 0xb1b2b3b4b5b6b7b8ull);
                EXPECT_EQ(w->swap_mask, cs ? 0xc1c2c3c4c5c6c7c8ull : 0u);
                EXPECT_EQ(w->compare_mask, cs ? 0xd1d2d3d4d5d6d7d8ull : 0u);
            }
            ASSERT_EQ(w->num_sge, 1u);
            EXPECT_EQ(w->sge[0].length, c.size);
            EXPECT_EQ(w->sge[0].lkey, 0x55u);
            EXPECT_EQ(w->sge[0].addr, 0x4000u);
        }
    }
}

/* UCX's uct_rc_mlx5_iface_common_atomic_data: how each UCT atomic is encoded, 32- and 64-bit
 * (a 64-bit ADD and CSWAP use the standard opcodes, everything else the masked ones) */
TEST_F(wqe_test, ucx_atomic_encodings)
{
    const uint64_t V = 0x0123456789abcdefull, C = 0xfedcba9876543210ull;
    const struct {
        const char *name;
        unsigned size;
        uint8_t opcode;
        uint64_t swap, compare, swap_mask,
                compare_mask; /* host order, as UCX computes them */
    } ops[] = {
        { "add64", 8, MLX5_OPCODE_ATOMIC_FA, V, 0, 0, 0 },
        { "add32", 4, MLX5_OPCODE_ATOMIC_MASKED_FA, V, 0, 0, 0 },
        { "xor64", 8, MLX5_OPCODE_ATOMIC_MASKED_FA, V, UINT64_MAX, 0, 0 },
        { "xor32", 4, MLX5_OPCODE_ATOMIC_MASKED_FA, V, UINT64_MAX, 0, 0 },
        { "and64", 8, MLX5_OPCODE_ATOMIC_MASKED_CS, V, 0, ~V, 0 },
        { "or32", 4, MLX5_OPCODE_ATOMIC_MASKED_CS, V, 0, V, 0 },
        { "swap64", 8, MLX5_OPCODE_ATOMIC_MASKED_CS, V, 0, UINT64_MAX, 0 },
        { "swap32", 4, MLX5_OPCODE_ATOMIC_MASKED_CS, V, 0, UINT64_MAX, 0 },
        { "cswap64", 8, MLX5_OPCODE_ATOMIC_CS, V, C, 0, 0 },
        { "cswap32", 4, MLX5_OPCODE_ATOMIC_MASKED_CS, V, C, UINT64_MAX,
          UINT64_MAX },
    };
    for (const auto &o : ops) {
        SCOPED_TRACE(o.name);
        bool masked = o.opcode == MLX5_OPCODE_ATOMIC_MASKED_CS ||
                      o.opcode == MLX5_OPCODE_ATOMIC_MASKED_FA;
        bool cs = o.opcode == MLX5_OPCODE_ATOMIC_MASKED_CS ||
                  o.opcode == MLX5_OPCODE_ATOMIC_CS;
        uint64_t m = o.size == 4 ? UINT32_MAX : UINT64_MAX;
        sq s(4);
        s.start(2);
        set_compact_av(s, 1, 0);
        set_raddr(s, RADDR, RKEY);
        if (o.size == 4) {
            uint32_t *v = (uint32_t *)s.next(16);
            v[0]        = htobe32((uint32_t)o.swap);
            v[1]        = htobe32((uint32_t)o.compare);
            v[2]        = htobe32((uint32_t)o.swap_mask);
            v[3]        = htobe32((uint32_t)o.compare_mask);
        } else {
            uint64_t *v = (uint64_t *)s.next(16);
            v[0]        = htobe64(o.swap);
            v[1]        = htobe64(o.compare);
            if (masked && cs) {
                v    = (uint64_t *)s.next(16);
                v[0] = htobe64(o.swap_mask);
                v[1] = htobe64(o.compare_mask);
            }
        }
        s.data(o.size, 1, 0x2000);
        uint8_t opmod = masked ? (uint8_t)(8 | (o.size == 4 ? 0 : 1)) : 0;
        s.finish(2, o.opcode, opmod, MLX5_WQE_CTRL_CQ_UPDATE, 0);
        ASSERT_EQ(decode(s, 2, DCXEMU_MLX5_QP_DCI), 0);
        EXPECT_EQ(w->masked, masked ? 1 : 0);
        EXPECT_EQ(w->atomic_size, o.size);
        EXPECT_EQ(w->swap_add, o.swap & m);
        if (cs && !masked) {
            EXPECT_EQ(w->compare, o.compare);
            EXPECT_EQ(
                    w->swap_mask,
                    UINT64_MAX); /* a standard CS compares and swaps all bits */
            EXPECT_EQ(w->compare_mask, UINT64_MAX);
        } else if (cs) {
            EXPECT_EQ(w->compare, o.compare & m);
            EXPECT_EQ(w->swap_mask, o.swap_mask & m);
            EXPECT_EQ(w->compare_mask, o.compare_mask & m);
        } else {
            EXPECT_EQ(w->compare,
                      masked ? o.compare & m : 0); /* the field boundary */
            EXPECT_EQ(w->swap_mask, 0u);
            EXPECT_EQ(w->compare_mask, 0u);
        }
    }
}

/* ---- UMR, as mlx5dv_wr_mr_list and mlx5dv_wr_mr_interleaved write it (mkey_configure with two
 * setters: access flags, then the layout) */

const uint32_t MKEY = 0x00abcd07; /* index 0xabcd, tag 7 */

/* control, UMR control, mkey context; the layout setter fills in the rest */
void umr_begin(sq &s, uint32_t wqebb, uint32_t access)
{
    s.start(wqebb);
    auto *uc         = s.seg<mlx5_wqe_umr_ctrl_seg>();
    uc->flags        = MLX5_WQE_UMR_CTRL_FLAG_INLINE;
    uc->mkey_mask    = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN);
    auto *mk         = s.seg<mlx5_wqe_mkey_context_seg>();
    mk->qpn_mkey     = htobe32(0xffffff00 | (MKEY & 0xff));
    mk->access_flags = (uint8_t)access;
}

mlx5_wqe_umr_ctrl_seg *umr_ctrl(sq &s)
{
    return (mlx5_wqe_umr_ctrl_seg *)(s.ctrl + sizeof(mlx5_wqe_ctrl_seg));
}

mlx5_wqe_mkey_context_seg *umr_mkc(sq &s)
{
    uint8_t *p = s.ctrl + 64;
    return (mlx5_wqe_mkey_context_seg *)(p == s.qend ? s.q : p);
}

void umr_list(sq &s, uint32_t wqebb, const std::vector<ibv_sge> &l)
{
    umr_begin(s, wqebb,
              MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE |
                      MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
                      MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE);
    uint64_t len = 0;
    for (const ibv_sge &e : l) {
        auto *k       = s.seg<mlx5_wqe_umr_klm_seg>();
        k->address    = htobe64(e.addr);
        k->mkey       = htobe32(e.lkey);
        k->byte_count = htobe32(e.length);
        len += e.length;
    }
    for (size_t i = l.size(); i % 4 != 0; i++) {
        s.seg<mlx5_wqe_umr_klm_seg>();
    }
    umr_mkc(s)->len            = htobe64(len);
    umr_ctrl(s)->klm_octowords = htobe16(
            (uint16_t)((l.size() * 16 + 63) / 64 * 4));
    s.finish((uint16_t)wqebb, MLX5_OPCODE_UMR, 0,
             MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE,
             htobe32(MKEY));
}

TEST_F(wqe_test, umr_klm_list)
{
    for (size_t n : { 1, 3, 4, 5, 9 }) {
        for (uint32_t at :
             { 0u, 6u }) { /* at 6 of 8: the KLM list starts the queue */
            SCOPED_TRACE("n=" + std::to_string(n) +
                         " at=" + std::to_string(at));
            std::vector<ibv_sge> l;
            for (size_t i = 0; i < n; i++) {
                l.push_back({ 0x100000 + 0x1000 * i, (uint32_t)(100 + i),
                              0x300 + (uint32_t)i });
            }
            sq s(8);
            umr_list(s, at, l);
            EXPECT_EQ(s.ds(), 8 + (n + 3) / 4 * 4);
            ASSERT_EQ(decode(s, at, DCXEMU_MLX5_QP_RC), 0);
            EXPECT_EQ(w->opcode, MLX5_OPCODE_UMR);
            EXPECT_EQ(w->umr.mkey, MKEY);
            EXPECT_EQ(w->umr.tag, MKEY & 0xff);
            EXPECT_EQ(w->umr.qpn, 0xffffffu);
            EXPECT_EQ(w->umr.free, 0);
            EXPECT_EQ(w->umr.flags, MLX5_WQE_UMR_CTRL_FLAG_INLINE);
            EXPECT_TRUE(w->umr.mkey_mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN);
            EXPECT_FALSE(w->umr.mkey_mask &
                         MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR);
            EXPECT_EQ(w->umr.access_flags, (uint32_t)(IBV_ACCESS_LOCAL_WRITE |
                                                      IBV_ACCESS_REMOTE_READ |
                                                      IBV_ACCESS_REMOTE_WRITE));
            EXPECT_EQ(w->umr.klm_octowords, (n + 3) / 4 * 4);
            EXPECT_FALSE(w->umr.interleaved);
            ASSERT_EQ(w->umr.num_entries, n);
            uint64_t len = 0;
            for (size_t i = 0; i < n; i++) {
                EXPECT_EQ(w->umr.ent[i].va, l[i].addr);
                EXPECT_EQ(w->umr.ent[i].key, l[i].lkey);
                EXPECT_EQ(w->umr.ent[i].byte_count, l[i].length);
                len += l[i].length;
            }
            EXPECT_EQ(w->umr.len, len);
            EXPECT_EQ(w->num_sge, 0u);
        }
    }
}

/* mlx5dv_wr_mr_interleaved: a repeat block (op 0x400), its entries, padding to four */
TEST_F(wqe_test, umr_repeat_block)
{
    struct {
        uint64_t addr;
        uint32_t bytes, skip, lkey;
    } data[]              = { { 0x200000, 64, 192, 0x501 },
                              { 0x300000, 16, 0, 0x502 },
                              { 0x400000, 8, 56, 0x503 } };
    const uint32_t repeat = 100, n = 3;
    for (uint32_t at : { 0u, 6u }) {
        SCOPED_TRACE("at=" + std::to_string(at));
        sq s(8);
        umr_begin(s, at,
                  MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC |
                          MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ);
        auto *rb    = s.seg<mlx5_wqe_umr_repeat_block_seg>();
        uint32_t bc = 0;
        for (uint32_t i = 0; i < n; i++) {
            auto *e       = s.seg<mlx5_wqe_umr_repeat_ent_seg>();
            e->va         = htobe64(data[i].addr);
            e->byte_count = htobe16((uint16_t)data[i].bytes);
            e->stride     = htobe16((uint16_t)(data[i].bytes + data[i].skip));
            e->memkey     = htobe32(data[i].lkey);
            bc += data[i].bytes;
        }
        for (uint32_t i = n + 1; i % 4 != 0; i++) {
            s.seg<mlx5_wqe_umr_repeat_ent_seg>();
        }
        rb->op                     = htobe32(0x400);
        rb->num_ent                = htobe16(n);
        rb->repeat_count           = htobe32(repeat);
        rb->byte_count             = htobe32(bc);
        umr_mkc(s)->len            = htobe64((uint64_t)bc * repeat);
        umr_ctrl(s)->klm_octowords = htobe16(
                (uint16_t)(((n + 1) * 16 + 63) / 64 * 4));
        s.finish(0, MLX5_OPCODE_UMR, 0, MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE,
                 htobe32(MKEY));
        ASSERT_EQ(s.ds(), 12);
        ASSERT_EQ(decode(s, at, DCXEMU_MLX5_QP_RC), 0);
        EXPECT_TRUE(w->umr.interleaved);
        EXPECT_EQ(w->umr.repeat_count, repeat);
        EXPECT_EQ(w->umr.byte_count, bc);
        EXPECT_EQ(w->umr.len, (uint64_t)bc * repeat);
        EXPECT_EQ(w->umr.access_flags, (uint32_t)(IBV_ACCESS_REMOTE_ATOMIC |
                                                  IBV_ACCESS_REMOTE_READ));
        ASSERT_EQ(w->umr.num_entries, n);
        for (uint32_t i = 0; i < n; i++) {
            EXPECT_EQ(w->umr.ent[i].va, data[i].addr);
            EXPECT_EQ(w->umr.ent[i].key, data[i].lkey);
            EXPECT_EQ(w->umr.ent[i].byte_count, data[i].bytes);
            EXPECT_EQ(w->umr.ent[i].stride, data[i].bytes + data[i].skip);
        }
    }
}

/* ibv_wr_bind_mw (type 2), as _build_umr_wqe / set_bind_wr write it: one KLM in a 64-byte block */
TEST_F(wqe_test, umr_bind_mw)
{
    const uint32_t mw_rkey = 0x00333344, new_rkey = 0x00333345, mr_lkey = 0x777;
    sq s(4);
    s.start(3); /* the mkey context and the KLM wrap to the queue start */
    auto *uc  = s.seg<mlx5_wqe_umr_ctrl_seg>();
    uc->flags = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET |
                MLX5_WQE_UMR_CTRL_FLAG_INLINE |
                MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
    uc->mkey_mask     = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE |
                                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC);
    uc->klm_octowords = htobe16(4);
    auto *mk          = s.seg<mlx5_wqe_mkey_context_seg>();
    mk->qpn_mkey      = htobe32((new_rkey & 0xff) | QPN << 8);
    mk->access_flags  = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
    mk->start_addr    = htobe64(0x5000);
    mk->len           = htobe64(0x800);
    auto *k           = (mlx5_wqe_umr_klm_seg *)s.next(64);
    k->byte_count     = htobe32(0x800);
    k->mkey           = htobe32(mr_lkey);
    k->address        = htobe64(0x5000);
    s.finish(3, MLX5_OPCODE_UMR, 0, MLX5_WQE_CTRL_CQ_UPDATE, htobe32(mw_rkey));
    ASSERT_EQ(s.ds(), 12);
    ASSERT_EQ(decode(s, 3, DCXEMU_MLX5_QP_RC), 0);
    EXPECT_EQ(w->umr.mkey, mw_rkey);
    EXPECT_EQ(w->umr.tag, new_rkey & 0xff);
    EXPECT_EQ(w->umr.qpn, QPN);
    EXPECT_EQ(w->umr.free, 0);
    EXPECT_EQ(w->umr.start_addr, 0x5000u);
    EXPECT_EQ(w->umr.len, 0x800u);
    EXPECT_EQ(w->umr.access_flags, (uint32_t)IBV_ACCESS_REMOTE_WRITE);
    ASSERT_EQ(w->umr.num_entries, 1u);
    EXPECT_EQ(w->umr.ent[0].key, mr_lkey);
    EXPECT_EQ(w->umr.ent[0].va, 0x5000u);
    EXPECT_EQ(w->umr.ent[0].byte_count, 0x800u);
}

/* The PRM's LOCAL_INVAL opcode: the key in the control segment's imm */
TEST_F(wqe_test, local_inval_opcode)
{
    for (auto kind : { DCXEMU_MLX5_QP_RC, DCXEMU_MLX5_QP_DCI }) {
        sq s(2);
        s.start(1);
        s.finish(1, MLX5_OPCODE_LOCAL_INVAL, 0, MLX5_WQE_CTRL_CQ_UPDATE,
                 htobe32(0x4242));
        ASSERT_EQ(decode(s, 1, kind), 0);
        EXPECT_EQ(w->opcode, MLX5_OPCODE_LOCAL_INVAL);
        EXPECT_EQ(w->umr.mkey, 0x4242u);
        EXPECT_FALSE(w->has_av);
    }
}

/* mlx5dv_wr_raw_wqe hands over exactly ds * 16 bytes: nothing past them is read (a WQE at the end
 * of a page whose next page is inaccessible) */
TEST_F(wqe_test, never_reads_past_ds)
{
    long pg = sysconf(_SC_PAGESIZE);
    auto *m = (uint8_t *)mmap(nullptr, 2 * pg, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    ASSERT_EQ(mprotect(m + pg, pg, PROT_NONE), 0);
    sq s(2);
    s.start(0);
    set_compact_av(s, 1, 0);
    set_raddr(s, RADDR, RKEY);
    uint32_t *v = (uint32_t *)s.next(16);
    v[0]        = htobe32(1);
    v[1]        = htobe32(0x80808080);
    s.data(4, 3, 0x1000);
    s.finish(0, MLX5_OPCODE_ATOMIC_MASKED_FA, 8, MLX5_WQE_CTRL_CQ_UPDATE, 0);
    uint8_t *b = m + pg - s.size;
    memcpy(b, s.ctrl, s.size);
    memset(w.get(), 0, sizeof(*w));
    EXPECT_EQ(dcxemu_mlx5_wqe_decode(b, 2, 0, DCXEMU_MLX5_QP_DCI, 128, w.get()),
              0);
    EXPECT_EQ(w->num_sge, 1u);
    EXPECT_EQ(w->compare, 0x80808080u);
    munmap(m, 2 * pg);
}

/* ---- malformed WQEs: the requester's syndrome, LOCAL_QP_OP_ERR */

TEST_F(wqe_test, malformed)
{
    const int ERR = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    ah_attr a;
    uint8_t data[64] = {};

    {
        SCOPED_TRACE("ds 0");
        sq s(2);
        s.start(0);
        s.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
        ((mlx5_wqe_ctrl_seg *)s.ctrl)->qpn_ds = htobe32(QPN << 8);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
        EXPECT_EQ(w->qpn, QPN); /* filled as far as it got */
    }
    for (uint8_t opcode : { 0x02, 0x13, 0x0e, 0x20, 0x28, 0x2f, 0x80 }) {
        SCOPED_TRACE("opcode " + std::to_string(opcode));
        sq s(2);
        s.start(0);
        s.data(8, 1, 2);
        s.finish(0, opcode, 0, 0, 0);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
        EXPECT_EQ(w->opcode, opcode);
    }
    {
        SCOPED_TRACE("ds beyond the limit");
        sq s(8);
        s.start(0);
        for (int i = 0; i < 9; i++) {
            s.data(8, 1, 2);
        }
        s.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC, 160), 0);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC, 144), ERR);
        /* nor larger than the queue */
        sq t(2);
        t.start(0);
        t.finish(0, MLX5_OPCODE_NOP, 0, 0, 0);
        ((mlx5_wqe_ctrl_seg *)t.ctrl)->qpn_ds = htobe32(QPN << 8 | 9);
        EXPECT_EQ(decode(t, 0, DCXEMU_MLX5_QP_RC), ERR);
    }
    {
        SCOPED_TRACE("more SGEs than the decoder holds");
        sq s(16);
        s.start(0);
        for (int i = 0; i < DCXEMU_MLX5_MAX_SGE + 1; i++) {
            s.data(8, 1, 2);
        }
        s.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
    }
    {
        SCOPED_TRACE("inline length larger than ds");
        sq s(4);
        s.start(0);
        s.inl(data, 40);
        s.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
        ((mlx5_wqe_ctrl_seg *)s.ctrl)->qpn_ds = htobe32(QPN << 8 |
                                                        (s.ds() - 1));
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
    }
    {
        SCOPED_TRACE("inline on a read, inline after a pointer run");
        sq s(4);
        s.start(0);
        set_raddr(s, RADDR, RKEY);
        s.inl(data, 8);
        s.finish(0, MLX5_OPCODE_RDMA_READ, 0, 0, 0);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
        sq t(4);
        t.start(0);
        t.inl(data, 8);
        t.data(8, 1, 2);
        t.inl(data, 8);
        t.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
        EXPECT_EQ(decode(t, 0, DCXEMU_MLX5_QP_RC), ERR);
    }
    {
        SCOPED_TRACE("a ds that ends in the AV of a DCI");
        sq t(4);
        t.start(0);
        set_dc_av(t, a);
        t.finish(0, MLX5_OPCODE_SEND, 0, 0, 0);
        ((mlx5_wqe_ctrl_seg *)t.ctrl)->qpn_ds = htobe32(QPN << 8 | 2);
        EXPECT_EQ(decode(t, 0, DCXEMU_MLX5_QP_DCI), ERR);
        ((mlx5_wqe_ctrl_seg *)t.ctrl)->qpn_ds = htobe32(QPN << 8 | 1);
        EXPECT_EQ(decode(t, 0, DCXEMU_MLX5_QP_DCI), ERR);
    }
    {
        SCOPED_TRACE("atomic on a WQE too short");
        for (int cut :
             { 1,
               2 }) { /* without the atomic segment; without the raddr one too */
            sq s(4);
            s.start(0);
            set_raddr(s, RADDR, RKEY);
            s.seg<mlx5_wqe_atomic_seg>();
            s.data(8, 1, 2);
            s.finish(0, MLX5_OPCODE_ATOMIC_FA, 0, 0, 0);
            ((mlx5_wqe_ctrl_seg *)s.ctrl)->qpn_ds = htobe32(
                    QPN << 8 | (uint32_t)(4 - 1 - cut));
            EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
        }
        /* an 8-byte masked CS needs 32 bytes of atomic segment */
        sq s(4);
        s.start(0);
        set_raddr(s, RADDR, RKEY);
        s.next(16);
        s.finish(0, MLX5_OPCODE_ATOMIC_MASKED_CS, 9, 0, 0);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
    }
    {
        SCOPED_TRACE("atomic opmods");
        for (auto c : std::vector<std::pair<uint8_t, uint8_t>>{
                     { MLX5_OPCODE_ATOMIC_FA, 8 },
                     { MLX5_OPCODE_ATOMIC_MASKED_FA, 0 },
                     { MLX5_OPCODE_ATOMIC_MASKED_FA, 0x0a },
                     { MLX5_OPCODE_ATOMIC_MASKED_CS, 1 } }) {
            sq s(4);
            s.start(0);
            set_raddr(s, RADDR, RKEY);
            s.next(32);
            s.data(8, 1, 2);
            s.finish(0, c.first, c.second, 0, 0);
            EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
        }
    }
    {
        SCOPED_TRACE("UMR: a BSF, an indirect list, a repeat block longer than "
                     "its translation");
        sq s(8);
        umr_list(s, 0, { { 0x1000, 16, 1 } });
        umr_ctrl(s)->bsf_octowords = htobe16(4);
        EXPECT_EQ(decode(s, 0, DCXEMU_MLX5_QP_RC), ERR);
        sq t(8);
        umr_list(t, 0, { { 0x1000, 16, 1 } });
        umr_ctrl(t)->flags = 0;
        EXPECT_EQ(decode(t, 0, DCXEMU_MLX5_QP_RC), ERR);
        sq u(8);
        umr_list(u, 0, { { 0x1000, 16, 1 } });
        auto *rb    = (mlx5_wqe_umr_repeat_block_seg *)(u.ctrl + 128);
        rb->op      = htobe32(0x400);
        rb->num_ent = htobe16(4); /* 1 + 4 entries in 4 octowords */
        EXPECT_EQ(decode(u, 0, DCXEMU_MLX5_QP_RC), ERR);
        rb->num_ent = htobe16(3);
        EXPECT_EQ(decode(u, 0, DCXEMU_MLX5_QP_RC), 0);
        /* a translation that ds does not hold */
        ((mlx5_wqe_ctrl_seg *)u.ctrl)->qpn_ds = htobe32(QPN << 8 | 11);
        EXPECT_EQ(decode(u, 0, DCXEMU_MLX5_QP_RC), ERR);
        EXPECT_EQ(decode(u, 0, DCXEMU_MLX5_QP_UD), ERR);
    }
    {
        SCOPED_TRACE("queue arguments");
        sq s(4);
        s.start(0);
        s.finish(0, MLX5_OPCODE_NOP, 0, 0, 0);
        EXPECT_EQ(dcxemu_mlx5_wqe_decode(s.q, 3, 0, DCXEMU_MLX5_QP_RC, MAX_WQE,
                                         w.get()),
                  ERR);
        EXPECT_EQ(dcxemu_mlx5_wqe_decode(s.q, 4, 4, DCXEMU_MLX5_QP_RC, MAX_WQE,
                                         w.get()),
                  ERR);
        EXPECT_EQ(dcxemu_mlx5_wqe_decode(s.q, 4, 0, DCXEMU_MLX5_QP_RC, MAX_WQE,
                                         w.get()),
                  0);
    }
}

/* ---- receive WQEs */

/* mlx5_post_recv: stride 16 * max_gs (a power of two), zero-length SGEs dropped, an
 * MLX5_INVALID_LKEY entry after a short list */
void post_recv(uint8_t *buf, uint32_t stride, uint32_t ind,
               const std::vector<ibv_sge> &l)
{
    auto *scat = (mlx5_wqe_data_seg *)(buf + ind * stride);
    uint32_t j = 0;
    for (const ibv_sge &e : l) {
        if (e.length != 0) {
            mlx5dv_set_data_seg(&scat[j++], e.length, e.lkey, e.addr);
        }
    }
    if (j < stride / 16) {
        scat[j].byte_count = 0;
        scat[j].lkey       = htobe32(MLX5_INVALID_LKEY);
        scat[j].addr       = 0;
    }
}

TEST(rq_wqe, ring)
{
    const uint32_t stride = 64, n = 8;
    std::vector<uint8_t> buf(stride * n, JUNK);
    post_recv(buf.data(), stride, 5,
              { { 0x1000, 100, 7 }, { 0x2000, 0, 7 }, { 0x3000, 300, 8 } });
    post_recv(buf.data(), stride, 6,
              { { 0x1000, 1, 1 },
                { 0x2000, 2, 2 },
                { 0x3000, 3, 3 },
                { 0x4000, 4, 4 } });
    dcxemu_mlx5_sge sge[8];
    uint32_t num = 99;
    ASSERT_EQ(dcxemu_mlx5_rq_wqe_read(buf.data(), stride, 5, 4, sge, &num), 0);
    ASSERT_EQ(num, 2u);
    EXPECT_EQ(sge[0].addr, 0x1000u);
    EXPECT_EQ(sge[0].length, 100u);
    EXPECT_EQ(sge[0].lkey, 7u);
    EXPECT_EQ(sge[1].addr, 0x3000u);
    EXPECT_EQ(sge[1].length, 300u);
    EXPECT_EQ(sge[1].lkey, 8u);
    /* a full WQE has no terminator */
    ASSERT_EQ(dcxemu_mlx5_rq_wqe_read(buf.data(), stride, 6, 8, sge, &num), 0);
    ASSERT_EQ(num, 4u);
    EXPECT_EQ(sge[3].addr, 0x4000u);
    EXPECT_EQ(sge[3].length, 4u);
    /* more entries than the caller takes */
    EXPECT_EQ(dcxemu_mlx5_rq_wqe_read(buf.data(), stride, 6, 3, sge, &num),
              MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    /* an empty list */
    post_recv(buf.data(), stride, 0, {});
    ASSERT_EQ(dcxemu_mlx5_rq_wqe_read(buf.data(), stride, 0, 4, sge, &num), 0);
    EXPECT_EQ(num, 0u);
}

/* libmlx5's SRQ: set_srq_buf_ll links WQE i to i + 1; mlx5_post_srq_recv fills the head's data
 * segments (zero lengths kept) and ends a short list with MLX5_INVALID_LKEY */
TEST(rq_wqe, srq_list)
{
    const uint32_t stride = 64, n = 8, max_gs = 3;
    std::vector<uint8_t> buf(stride * n, JUNK);
    for (uint32_t i = 0; i < n; i++) {
        auto *next = (mlx5_wqe_srq_next_seg *)(buf.data() + i * stride);
        memset(next, 0, sizeof(*next));
        next->next_wqe_index = htobe16((uint16_t)(i + 1));
    }
    auto post = [&](uint32_t head, const std::vector<ibv_sge> &l) {
        auto *scat = (mlx5_wqe_data_seg *)(buf.data() + head * stride + 16);
        uint32_t i = 0;
        for (; i < l.size(); i++) {
            scat[i].byte_count = htobe32(l[i].length);
            scat[i].lkey       = htobe32(l[i].lkey);
            scat[i].addr       = htobe64(l[i].addr);
        }
        if (i < max_gs) {
            scat[i].byte_count = 0;
            scat[i].lkey       = htobe32(MLX5_INVALID_LKEY);
            scat[i].addr       = 0;
        }
    };
    post(2, { { 0xa000, 64, 3 }, { 0xb000, 0, 4 } });
    post(3, { { 0xc000, 1, 5 }, { 0xd000, 2, 6 }, { 0xe000, 3, 7 } });
    dcxemu_mlx5_sge sge[4];
    uint32_t num  = 99;
    uint16_t next = 0;
    ASSERT_EQ(dcxemu_mlx5_srq_wqe_read(buf.data(), stride, 2, 4, sge, &num,
                                       &next),
              0);
    EXPECT_EQ(next, 3);
    ASSERT_EQ(num, 2u);
    EXPECT_EQ(sge[0].addr, 0xa000u);
    EXPECT_EQ(sge[0].length, 64u);
    EXPECT_EQ(sge[0].lkey, 3u);
    EXPECT_EQ(sge[1].length, 0u);
    EXPECT_EQ(sge[1].lkey, 4u);
    ASSERT_EQ(dcxemu_mlx5_srq_wqe_read(buf.data(), stride, 3, 4, sge, &num,
                                       &next),
              0);
    EXPECT_EQ(next, 4);
    ASSERT_EQ(num, 3u);
    EXPECT_EQ(sge[2].addr, 0xe000u);
    EXPECT_EQ(dcxemu_mlx5_srq_wqe_read(buf.data(), stride, 3, 2, sge, &num,
                                       &next),
              MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    EXPECT_EQ(
            dcxemu_mlx5_srq_wqe_read(buf.data(), 16, 0, 2, sge, &num, &next),
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR); /* a stride without data segments */
}

} // namespace
