/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The direct WQE writer (dcx_direct.c) white-box, over send queues, a
 * doorbell register and address handles in plain memory that a fake
 * mlx5dv_init_obj describes: the DC address vector in its compact and
 * extended forms (before and after the data, wrapping the queue's end, the
 * extended one always on a device without compact address vectors),
 * and the BlueFlame halves alternating per register, not per DCI.
 */
#include "uct_test.h"

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

extern "C" {
#include <dcx_direct.h>
}

#include <endian.h>
#include <map>
#include <memory>
#include <string.h>
#include <vector>

namespace {

constexpr unsigned wqe_cnt = 8; /* basic blocks of each send queue */
constexpr unsigned bf_size = 256; /* each half of a BlueFlame register */
constexpr uint32_t dctn    = 0x1234;
constexpr uint64_t dc_key  = 0x0102030405060708ull;

/* What the fake mlx5dv_init_obj describes. */
struct fake_qp {
    struct ibv_qp qp = {};
    alignas(16) uint8_t buf[wqe_cnt * MLX5_SEND_WQE_BB];
    __be32 dbrec[2] = {};
    void *reg       = nullptr;
};

struct fake_objects {
    struct ibv_cq cq = {};
    alignas(16) uint8_t cqes[4 * 64];
    __be32 cq_dbrec[2] = {};
    alignas(16) uint8_t cq_uar[4096];
    std::map<struct ibv_qp *, fake_qp *> qps;
    std::map<struct ibv_ah *, struct mlx5_wqe_av *> avs;
};

fake_objects *fake;

int fake_init_obj(struct mlx5dv_obj *obj, uint64_t type)
{
    if (type == MLX5DV_OBJ_CQ) {
        obj->cq.out->buf      = fake->cqes;
        obj->cq.out->dbrec    = fake->cq_dbrec;
        obj->cq.out->cqe_cnt  = 4;
        obj->cq.out->cqe_size = 64;
        obj->cq.out->cq_uar   = fake->cq_uar;
        obj->cq.out->cqn      = 7;
        return 0;
    }
    if (type == MLX5DV_OBJ_QP) {
        fake_qp *q              = fake->qps.at(obj->qp.in);
        obj->qp.out->dbrec      = q->dbrec;
        obj->qp.out->sq.buf     = q->buf;
        obj->qp.out->sq.wqe_cnt = wqe_cnt;
        obj->qp.out->sq.stride  = MLX5_SEND_WQE_BB;
        obj->qp.out->bf.reg     = q->reg;
        obj->qp.out->bf.size    = bf_size;
        return 0;
    }
    if (type == MLX5DV_OBJ_AH) {
        obj->ah.out->av = fake->avs.at(obj->ah.in);
        return 0;
    }
    return EINVAL;
}

class uct_direct : public ::testing::Test {
protected:
    void SetUp() override
    {
        const char *reason = nullptr;

        fake = &m_objs;
        memset(m_regs, 0, sizeof(m_regs));
        m_sqs.reserve(8); /* add_sq hands out references into it */
        m_ops.mlx5dv_init_obj = fake_init_obj;
        ASSERT_EQ(UCS_OK, uct_dcx_direct_create(&m_ops, &m_objs.cq, 1,
                                                &m_direct, &reason))
                << reason;

        /* libmlx5's address vectors: no GRH, and a global one */
        memset(&m_av_compact, 0, sizeof(m_av_compact));
        m_av_compact.rlid         = htobe16(0x77);
        m_av_compact.stat_rate_sl = 9;
        memset(&m_av_global, 0, sizeof(m_av_global));
        m_av_global.rlid         = htobe16(0x78);
        m_av_global.stat_rate_sl = 3;
        m_av_global.hop_limit    = 64;
        m_av_global.grh_gid_fl   = htobe32((1u << 30) | (2u << 20) | 0x12345);
        for (unsigned i = 0; i < sizeof(m_av_global.rgid); ++i) {
            m_av_global.rgid[i] = (uint8_t)(0xa0 + i);
        }
        m_objs.avs[&m_ah_compact] = &m_av_compact;
        m_objs.avs[&m_ah_global]  = &m_av_global;
    }

    void TearDown() override
    {
        for (auto &sq : m_sqs) {
            uct_dcx_direct_sq_destroy(sq.sq);
        }
        if (m_direct != nullptr) {
            uct_dcx_direct_destroy(m_direct);
        }
        fake = nullptr;
    }

    struct sq {
        fake_qp *q;
        uct_dcx_direct_sq_t *sq;
        struct ibv_qp_ex *qpx;
        struct mlx5dv_qp_ex *mqpx;
        unsigned pi; /* basic blocks posted */
    };

    /* A DCI whose doorbell register is half @a reg of the register page. */
    sq &add_sq(unsigned reg, uint32_t qpn)
    {
        const char *reason = nullptr;
        m_qps.emplace_back(new fake_qp);
        fake_qp *q         = m_qps.back().get();
        q->qp.qp_num       = qpn;
        q->qp.qp_type      = IBV_QPT_DRIVER;
        q->reg             = &m_regs[reg][0x800];
        m_objs.qps[&q->qp] = q;
        memset(q->buf, 0xee, sizeof(q->buf));

        sq s = { q, nullptr, nullptr, nullptr, 0 };
        EXPECT_EQ(UCS_OK,
                  uct_dcx_direct_sq_create(m_direct, &q->qp, 128, 4, &s.sq,
                                           &s.qpx, &s.mqpx, &reason))
                << reason;
        m_sqs.push_back(s);
        return m_sqs.back();
    }

    /* An 8-byte RDMA write, the address set after the data (as dcx's
     * operations do) or before it; the WQE's first basic block. */
    unsigned put_short(sq &s, struct ibv_ah *ah, bool av_first,
                       const void *data = "12345678", size_t length = 8)
    {
        unsigned idx = s.pi % wqe_cnt;

        s.qpx->wr_start(s.qpx);
        s.qpx->wr_id    = 100 + s.pi;
        s.qpx->wr_flags = IBV_SEND_SIGNALED;
        s.qpx->wr_rdma_write(s.qpx, 0xabcd, 0x1000 + s.pi);
        if (av_first) {
            s.mqpx->wr_set_dc_addr(s.mqpx, ah, dctn, dc_key);
        }
        s.qpx->wr_set_inline_data(s.qpx, (void *)data, length);
        if (!av_first) {
            s.mqpx->wr_set_dc_addr(s.mqpx, ah, dctn, dc_key);
        }
        EXPECT_EQ(0, s.qpx->wr_complete(s.qpx));
        s.pi += (ds(s, idx) * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
        return idx;
    }

    /* The WQE starting at basic block @a idx, @a len bytes from @a off,
     * in one piece. */
    static std::vector<uint8_t>
    wqe(const sq &s, unsigned idx, size_t off, size_t len)
    {
        std::vector<uint8_t> out(len);
        for (size_t i = 0; i < len; ++i) {
            out[i] = s.q->buf[(idx * MLX5_SEND_WQE_BB + off + i) %
                              sizeof(s.q->buf)];
        }
        return out;
    }

    static unsigned ds(const sq &s, unsigned idx)
    {
        uint32_t qpn_ds;
        memcpy(&qpn_ds, wqe(s, idx, 4, 4).data(), 4);
        return be32toh(qpn_ds) & 0x3f;
    }

    /* Check the raddr and inline segments at @a off of the WQE. */
    static void
    check_data(const sq &s, unsigned idx, size_t off, uint64_t raddr)
    {
        std::vector<uint8_t> seg = wqe(s, idx, off, 32);
        struct mlx5_wqe_raddr_seg r;
        uint32_t bc;

        memcpy(&r, seg.data(), sizeof(r));
        EXPECT_EQ(raddr, be64toh(r.raddr));
        EXPECT_EQ(0xabcdu, be32toh(r.rkey));
        memcpy(&bc, &seg[16], 4);
        EXPECT_EQ(8u | MLX5_INLINE_SEG, be32toh(bc));
        EXPECT_EQ(0, memcmp(&seg[20], "12345678", 8));
    }

    uct_dcx_verbs_ops_t m_ops = {};
    fake_objects m_objs;
    uct_dcx_direct_t *m_direct = nullptr;
    alignas(16) uint8_t m_regs[2][4096];
    std::vector<std::unique_ptr<fake_qp>> m_qps;
    std::vector<sq> m_sqs;
    struct ibv_ah m_ah_compact = {}, m_ah_global = {};
    struct mlx5_wqe_av m_av_compact, m_av_global;
};

TEST_F(uct_direct, compact_av_without_grh)
{
    for (bool av_first : { false, true }) {
        sq &s        = add_sq(0, 0x100 + av_first);
        unsigned idx = put_short(s, &m_ah_compact, av_first);
        struct mlx5_wqe_av av;

        /* control, base AV, raddr, inline header and 8 bytes: 4 units */
        EXPECT_EQ(4u, ds(s, idx));
        memcpy(&av, wqe(s, idx, 16, 16).data(), 16);
        EXPECT_EQ(dctn, be32toh(av.dqp_dct)) << "no MLX5_EXTENDED_UD_AV";
        EXPECT_EQ(dc_key, be64toh(av.key.dc_key));
        EXPECT_EQ(0x77, be16toh(av.rlid));
        EXPECT_EQ(9, av.stat_rate_sl);
        check_data(s, idx, 32, 0x1000);
    }
}

/* A device without compact_address_vector: the address vector of an
 * address handle without GRH goes out extended, whole, after the data
 * segments are moved up; the device said so once, no WQE asks again. */
TEST_F(uct_direct, extended_av_when_device_lacks_compact_av)
{
    const char *reason = nullptr;

    uct_dcx_direct_destroy(m_direct);
    m_direct = nullptr;
    ASSERT_EQ(UCS_OK,
              uct_dcx_direct_create(&m_ops, &m_objs.cq, 0, &m_direct, &reason))
            << reason;

    for (bool av_first : { false, true }) {
        sq &s = add_sq(0, 0x180 + av_first);

        for (unsigned i = 0; i < 2; ++i) {
            uint64_t raddr = 0x1000 + s.pi;
            unsigned idx   = put_short(s, &m_ah_compact, av_first);
            struct mlx5_wqe_av av;

            /* control, extended AV, raddr, inline header and 8 bytes */
            EXPECT_EQ(6u, ds(s, idx));
            memcpy(&av, wqe(s, idx, 16, sizeof(av)).data(), sizeof(av));
            EXPECT_EQ(dctn | MLX5_EXTENDED_UD_AV, be32toh(av.dqp_dct));
            EXPECT_EQ(dc_key, be64toh(av.key.dc_key));
            EXPECT_EQ(0x77, be16toh(av.rlid));
            EXPECT_EQ(9, av.stat_rate_sl);
            EXPECT_EQ(0u, av.grh_gid_fl);
            check_data(s, idx, 64, raddr);
        }
    }
}

TEST_F(uct_direct, extended_av_with_grh_wraps_the_queue)
{
    for (bool av_first : { false, true }) {
        sq &s = add_sq(0, 0x200 + av_first);

        /* a compact WQE (1 basic block), then extended ones (2 each): the
         * fourth starts in the last basic block and wraps */
        put_short(s, &m_ah_compact, av_first);
        for (unsigned i = 0; i < 4; ++i) {
            uint64_t raddr = 0x1000 + s.pi;
            unsigned idx   = put_short(s, &m_ah_global, av_first);
            struct mlx5_wqe_av av;

            EXPECT_EQ(1u + 2 * i, idx);
            EXPECT_EQ(6u, ds(s, idx));
            memcpy(&av, wqe(s, idx, 16, sizeof(av)).data(), sizeof(av));
            EXPECT_EQ(dctn | MLX5_EXTENDED_UD_AV, be32toh(av.dqp_dct));
            EXPECT_EQ(dc_key, be64toh(av.key.dc_key));
            EXPECT_EQ(0x78, be16toh(av.rlid));
            EXPECT_EQ(0, memcmp(av.rgid, m_av_global.rgid, sizeof(av.rgid)));
            EXPECT_EQ(m_av_global.grh_gid_fl, av.grh_gid_fl);
            EXPECT_EQ(64, av.hop_limit);
            check_data(s, idx, 64, raddr);
        }
        EXPECT_EQ(9u, s.pi);
    }
}

/* Two DCIs on one register take its halves in turn, whichever posts; a DCI
 * on another register starts at its own first half. */
TEST_F(uct_direct, dcis_on_one_register_alternate_halves)
{
    sq &a         = add_sq(0, 0x300);
    sq &b         = add_sq(0, 0x301);
    sq &c         = add_sq(1, 0x302);
    sq *order[]   = { &a, &b, &b, &a, &a, &b };
    unsigned half = 0, n = 0;

    for (sq *s : order) {
        char data[9];
        snprintf(data, sizeof(data), "wqe%05u", n++);
        unsigned idx = put_short(*s, &m_ah_compact, false, data, 8);
        /* a single inline WQE of one basic block: a BlueFlame copy of it */
        EXPECT_EQ(0,
                  memcmp(&m_regs[0][0x800 + half * bf_size],
                         &s->q->buf[idx * MLX5_SEND_WQE_BB], MLX5_SEND_WQE_BB))
                << "post " << n << " to half " << half;
        half ^= 1;
    }

    put_short(c, &m_ah_compact, false);
    EXPECT_EQ(0, memcmp(&m_regs[1][0x800], c.q->buf, MLX5_SEND_WQE_BB));

    /* a batch of two WQEs: an 8-byte doorbell, to the next half */
    a.qpx->wr_start(a.qpx);
    a.qpx->wr_flags = 0;
    a.qpx->wr_rdma_write(a.qpx, 1, 2);
    a.qpx->wr_set_sge(a.qpx, 3, 4, 5);
    a.mqpx->wr_set_dc_addr(a.mqpx, &m_ah_compact, dctn, dc_key);
    a.qpx->wr_rdma_write(a.qpx, 1, 2);
    a.qpx->wr_set_sge(a.qpx, 3, 4, 5);
    a.mqpx->wr_set_dc_addr(a.mqpx, &m_ah_compact, dctn, dc_key);
    memset(&m_regs[0][0x800 + half * bf_size], 0, 8);
    EXPECT_EQ(0, a.qpx->wr_complete(a.qpx));
    EXPECT_EQ(0, memcmp(&m_regs[0][0x800 + half * bf_size],
                        &a.q->buf[(a.pi + 1) % wqe_cnt * MLX5_SEND_WQE_BB], 8))
            << "the doorbell names the batch's last WQE";
}

} // namespace
