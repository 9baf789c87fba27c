/* Indirect mkeys programmed by UMR on a loopback RC QP (docs/device-spec.md §2.5, §3.5), used by DCI traffic. */
#include "emu_test.h"
#include <algorithm>

using namespace emu;

namespace {

struct emu_umr : public ::testing::Test {
    dev d;
    ibv_qp *rc         = nullptr;
    ibv_qp_ex *rcx     = nullptr;
    mlx5dv_qp_ex *rcdv = nullptr;
    ibv_srq *srq       = nullptr;
    ibv_qp *dct        = nullptr;
    dci c;
    std::vector<char> a, b, cbuf, lbuf;
    ibv_mr *amr = nullptr, *bmr = nullptr, *cmr = nullptr, *lmr = nullptr;
    const uint64_t key = 0xabcdef;
    uint32_t rc_inline = 0;

    void SetUp() override
    {
        int n          = 0;
        ibv_device **l = dcxemu_ibv_get_device_list(&n);
        ASSERT_NE(l, nullptr);
        mlx5dv_context_attr da = { MLX5DV_CONTEXT_FLAGS_DEVX, 0 };
        d.ctx                  = dcxemu_mlx5dv_open_device(l[0], &da);
        dcxemu_ibv_free_device_list(l);
        ASSERT_NE(d.ctx, nullptr);
        d.lid = 1;
        d.pd  = dcxemu_ibv_alloc_pd(d.ctx);
        d.cq  = dcxemu_ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
        ASSERT_TRUE(d.pd && d.cq);
        rc = create_rc(16, 1, 0);
        ASSERT_NE(rc, nullptr);
        ASSERT_EQ(rc_to_rts(rc), 0);
        rcx  = dcxemu_ibv_qp_to_qp_ex(rc);
        rcdv = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(rcx);
        srq  = create_srq(d);
        dct  = create_dct(d, srq, key);
        ASSERT_EQ(dct_to_rtr(dct), 0);
        ASSERT_TRUE(make_dci(d, c, d.lid, 64, 10, 0, 0));
        a.assign(4096, 0);
        b.assign(4096, 0);
        cbuf.assign(4096, 0);
        lbuf.assign(4096, 0);
        const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ;
        amr = dcxemu_ibv_reg_mr(d.pd, a.data(), a.size(), acc);
        bmr = dcxemu_ibv_reg_mr(d.pd, b.data(), b.size(), acc);
        cmr = dcxemu_ibv_reg_mr(d.pd, cbuf.data(), cbuf.size(), acc);
        lmr = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(), acc);
        ASSERT_TRUE(amr && bmr && cmr && lmr);
    }
    void TearDown() override
    {
        destroy_dci(c);
        if (dct)
            dcxemu_ibv_destroy_qp(dct);
        if (srq)
            dcxemu_ibv_destroy_srq(srq);
        if (rc)
            dcxemu_ibv_destroy_qp(rc);
        for (ibv_mr *m : { amr, bmr, cmr, lmr }) {
            if (m)
                dcxemu_ibv_dereg_mr(m);
        }
        d.close();
    }
    ibv_qp *create_rc(uint32_t wr, uint32_t sge, uint32_t inl,
                      uint64_t ops    = IBV_QP_EX_WITH_LOCAL_INV,
                      uint64_t dv_ops = MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
                                        MLX5DV_QP_EX_WITH_MR_LIST,
                      uint32_t max_recv_wr = 0)
    {
        ibv_qp_init_attr_ex at;
        mlx5dv_qp_init_attr dv;
        memset(&at, 0, sizeof(at));
        memset(&dv, 0, sizeof(dv));
        at.qp_type = IBV_QPT_RC;
        at.send_cq = at.recv_cq = d.cq;
        at.pd                   = d.pd;
        at.cap.max_send_wr      = wr;
        at.cap.max_send_sge     = sge;
        at.cap.max_inline_data  = inl;
        at.cap.max_recv_wr      = max_recv_wr;
        at.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        at.send_ops_flags = ops;
        dv.comp_mask      = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = dv_ops;
        ibv_qp *q         = dcxemu_mlx5dv_create_qp(d.ctx, &at, &dv);
        if (q)
            rc_inline = at.cap.max_inline_data;
        return q;
    }
    int rc_mod(ibv_qp *q, int state, int mask)
    {
        ibv_qp_attr x;
        memset(&x, 0, sizeof(x));
        x.qp_state           = (ibv_qp_state)state;
        x.port_num           = 1;
        x.qp_access_flags    = IBV_ACCESS_LOCAL_WRITE;
        x.path_mtu           = IBV_MTU_4096;
        x.dest_qp_num        = q->qp_num; /* loopback */
        x.ah_attr.dlid       = d.lid;
        x.ah_attr.port_num   = 1;
        x.max_dest_rd_atomic = 1;
        x.min_rnr_timer      = 1;
        x.max_rd_atomic      = 1;
        x.retry_cnt          = 7;
        x.rnr_retry          = 7;
        x.timeout            = 14;
        return dcxemu_ibv_modify_qp(q, &x, mask | IBV_QP_STATE);
    }
    int rc_to_rts(ibv_qp *q)
    {
        int r;
        if ((r = rc_mod(q, IBV_QPS_INIT,
                        IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
            return r;
        if ((r = rc_mod(q, IBV_QPS_RTR,
                        IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                IBV_QP_MIN_RNR_TIMER)))
            return r;
        return rc_mod(q, IBV_QPS_RTS,
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                              IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_TIMEOUT);
    }
    mlx5dv_mkey *mkey(uint16_t entries)
    {
        mlx5dv_mkey_init_attr ma = { d.pd, MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
                                     entries };
        return dcxemu_mlx5dv_create_mkey(&ma);
    }
    int umr_list(mlx5dv_mkey *mk, std::vector<ibv_sge> sg, uint32_t access,
                 unsigned flags, ibv_wc *wc)
    {
        ibv_wr_start(rcx);
        rcx->wr_id    = 77;
        rcx->wr_flags = flags;
        mlx5dv_wr_mr_list(rcdv, mk, access, (uint16_t)sg.size(), sg.data());
        int r = ibv_wr_complete(rcx);
        if (r == 0 && wc != nullptr && !poll_one(d.cq, wc))
            return -1;
        return r;
    }
    ibv_wc_status local_inv(mlx5dv_mkey *mk)
    {
        ibv_wc wc;
        ibv_wr_start(rcx);
        rcx->wr_id    = 9;
        rcx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_local_inv(rcx, mk->lkey);
        if (ibv_wr_complete(rcx) != 0 || !poll_one(d.cq, &wc)) {
            return IBV_WC_GENERAL_ERR;
        }
        return wc.status;
    }
    ibv_wc_status write(uint32_t rkey, uint64_t raddr, uint32_t len)
    {
        ibv_wc wc;
        if (post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), len, rkey, raddr,
                     dct->qp_num, key) != 0 ||
            !poll_one(d.cq, &wc)) {
            return IBV_WC_GENERAL_ERR;
        }
        return wc.status;
    }
    void reset_dci()
    {
        ibv_qp_attr z;
        memset(&z, 0, sizeof(z));
        z.qp_state = IBV_QPS_RESET;
        ASSERT_EQ(dcxemu_ibv_modify_qp(c.qp, &z, IBV_QP_STATE), 0);
        ASSERT_EQ(dci_to_rts(c.qp, 10, 0, 0), 0);
    }
};

const unsigned SI  = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
const uint32_t ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_READ;

TEST_F(emu_umr, mkey_create_rules)
{
    dev plain; /* opened without DEVX */
    ASSERT_TRUE(plain.open());
    mlx5dv_mkey_init_attr ma = { plain.pd, MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
                                 4 };
    errno                    = 0;
    EXPECT_EQ(dcxemu_mlx5dv_create_mkey(&ma), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    plain.close();
    mlx5dv_mkey_init_attr bad = { d.pd, 0, 4 };
    errno                     = 0;
    EXPECT_EQ(dcxemu_mlx5dv_create_mkey(&bad), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    bad.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | (1u << 9);
    errno            = 0;
    EXPECT_EQ(dcxemu_mlx5dv_create_mkey(&bad), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    mlx5dv_mkey_init_attr ok = { d.pd, MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
                                 3 };
    mlx5dv_mkey *mk          = dcxemu_mlx5dv_create_mkey(&ok);
    ASSERT_NE(mk, nullptr);
    EXPECT_EQ(ok.max_entries, 4); /* aligned to 4, written back */
    EXPECT_EQ(mk->lkey, mk->rkey);
    EXPECT_EQ(mk->lkey & 0xff, 0u);
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_ibv_dealloc_pd(d.pd));
    /* a new mkey is free: unusable until a UMR */
    EXPECT_EQ(write(mk->rkey, 0, 8), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

TEST_F(emu_umr, rc_qp_caps_masks_and_ops)
{
    EXPECT_EQ(rc_inline,
              60u); /* device-spec.md §2.1: RC with MR ops, sge 1, inline 0 */
    EXPECT_NE(rc->qp_num, 0u); /* valid at creation */
    EXPECT_EQ(rcdv->wr_set_dc_addr, nullptr);
    EXPECT_NE(rcdv->wr_mr_list, nullptr);
    errno = 0;
    EXPECT_EQ(create_rc(16, 1, 0, IBV_QP_EX_WITH_SEND_WITH_INV), nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno); /* SEND_WITH_INV is not modelled */
    /* rdma-core v44 takes raw WQEs on RC QPs too (mlx5_qp_fill_wr_pfns) */
    ibv_qp *q = create_rc(16, 1, 0, IBV_QP_EX_WITH_LOCAL_INV,
                          MLX5DV_QP_EX_WITH_RAW_WQE);
    ASSERT_NE(q, nullptr);
    EXPECT_NE(dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(dcxemu_ibv_qp_to_qp_ex(q))
                      ->wr_raw_wqe,
              nullptr);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    q = create_rc(16, 1, 0, IBV_QP_EX_WITH_LOCAL_INV, 0, 4);
    ASSERT_NE(q, nullptr); /* with a receive queue */
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    q = create_rc(16, 1, 0);
    ASSERT_NE(q, nullptr);
    EXPECT_ERRNO_EQ(EINVAL,
                    rc_mod(q, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT));
    ASSERT_EQ(rc_mod(q, IBV_QPS_INIT,
                     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    const int rtr = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                    IBV_QP_MIN_RNR_TIMER;
    EXPECT_ERRNO_EQ(EINVAL, rc_mod(q, IBV_QPS_RTR, rtr & ~IBV_QP_DEST_QPN));
    EXPECT_ERRNO_EQ(EINVAL, rc_mod(q, IBV_QPS_RTR, rtr | IBV_QP_TIMEOUT));
    ASSERT_EQ(rc_mod(q, IBV_QPS_RTR, rtr), 0);
    const int rts = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT;
    EXPECT_ERRNO_EQ(EINVAL, rc_mod(q, IBV_QPS_RTS, rts & ~IBV_QP_TIMEOUT));
    ASSERT_EQ(rc_mod(q, IBV_QPS_RTS, rts | IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    /* verbs_context.create_qp_ex serves RC only */
    ibv_qp_init_attr_ex at;
    memset(&at, 0, sizeof(at));
    at.qp_type = IBV_QPT_UD;
    at.send_cq = at.recv_cq = d.cq;
    at.pd                   = d.pd;
    at.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    errno        = 0;
    EXPECT_EQ(verbs_get_ctx_op(d.ctx, create_qp_ex)->create_qp_ex(d.ctx, &at),
              nullptr);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, errno);
    at.qp_type        = IBV_QPT_RC;
    at.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
    q = verbs_get_ctx_op(d.ctx, create_qp_ex)->create_qp_ex(d.ctx, &at);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    /* an unmodelled builder on the RC QP is refused, never dropped */
    ibv_wr_start(rcx);
    ibv_wr_send_inv(rcx, 1);
    EXPECT_ERRNO_EQ(EOPNOTSUPP, ibv_wr_complete(rcx));
}

TEST_F(emu_umr, list_write_read_through_mkey)
{
    mlx5dv_mkey *mk = mkey(4);
    ASSERT_NE(mk, nullptr);
    ibv_wc wc;
    ASSERT_EQ(umr_list(mk,
                       { { (uintptr_t)a.data() + 10, 20, amr->lkey },
                         { (uintptr_t)b.data(), 30, bmr->lkey },
                         { (uintptr_t)cbuf.data() + 5, 10, cmr->lkey } },
                       ALL, SI, &wc),
              0);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_DRIVER1); /* MLX5DV_WC_UMR */
    EXPECT_EQ(wc.wr_id, 77u);
    for (int i = 0; i < 60; i++)
        lbuf[i] = (char)(i + 1);
    EXPECT_EQ(write(mk->rkey, 0, 60),
              IBV_WC_SUCCESS); /* zero-based: offset 0 */
    for (int i = 0; i < 20; i++)
        EXPECT_EQ(a[10 + i], (char)(i + 1));
    for (int i = 0; i < 30; i++)
        EXPECT_EQ(b[i], (char)(21 + i));
    for (int i = 0; i < 10; i++)
        EXPECT_EQ(cbuf[5 + i], (char)(51 + i));
    EXPECT_EQ(a[9], 0);
    EXPECT_EQ(a[30], 0);
    EXPECT_EQ(cbuf[15], 0);
    /* the mkey as a local key: READ plain remote memory into the pieces */
    std::vector<char> src(64);
    for (int i = 0; i < 64; i++)
        src[i] = (char)(100 + i);
    ibv_mr *smr = dcxemu_ibv_reg_mr(d.pd, src.data(), src.size(), ALL);
    ASSERT_EQ(post_one(c, OP_READ, mk->lkey, nullptr, 25, smr->rkey,
                       (uintptr_t)src.data(), dct->qp_num, key),
              0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 25u);
    EXPECT_EQ(a[10], (char)100);
    EXPECT_EQ(a[29], (char)119);
    EXPECT_EQ(b[0], (char)120);
    EXPECT_EQ(b[4], (char)124);
    EXPECT_EQ(b[5], (char)26); /* untouched by the 25-byte read */
    dcxemu_ibv_dereg_mr(smr);
    /* beyond L */
    EXPECT_EQ(write(mk->rkey, 55, 10), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

TEST_F(emu_umr, interleaved_layout)
{
    mlx5dv_mkey *mk = mkey(3); /* 2 entries + the repeat header */
    ASSERT_NE(mk, nullptr);
    mlx5dv_mr_interleaved e[2] = { { (uintptr_t)a.data(), 4, 12, amr->lkey },
                                   { (uintptr_t)b.data(), 8, 8, bmr->lkey } };
    ibv_wr_start(rcx);
    rcx->wr_id    = 5;
    rcx->wr_flags = SI;
    mlx5dv_wr_mr_interleaved(rcdv, mk, ALL, 3, 2, e);
    ASSERT_EQ(ibv_wr_complete(rcx), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    for (int i = 0; i < 36; i++)
        lbuf[i] = (char)(i + 1);
    EXPECT_EQ(write(mk->rkey, 0, 36), IBV_WC_SUCCESS); /* L = 3 x (4 + 8) */
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 4; i++)
            EXPECT_EQ(a[16 * r + i], (char)(12 * r + i + 1)) << r;
        for (int i = 0; i < 8; i++)
            EXPECT_EQ(b[16 * r + i], (char)(12 * r + 4 + i + 1)) << r;
        EXPECT_EQ(a[16 * r + 4], 0);
        EXPECT_EQ(b[16 * r + 8], 0);
    }
    EXPECT_EQ(write(mk->rkey, 30, 7), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

/* An interleaved entry of zero bytes owns no piece: the device gathers and scatters around it,
 * and never forms an address from it (found by contrib/dcx fuzz umr: the gather copied nothing
 * from an unset base, which UBSan reports when that stack slot holds zero). */
TEST_F(emu_umr, interleaved_zero_byte_entry)
{
    for (size_t i = 0; i < a.size(); i++)
        a[i] = (char)(i * 7 + 1);
    for (size_t i = 0; i < cbuf.size(); i++)
        cbuf[i] = (char)(i * 5 + 3);
    mlx5dv_mkey *mk = mkey(4); /* 3 entries + the repeat header */
    ASSERT_NE(mk, nullptr);
    mlx5dv_mr_interleaved e[3] = {
        { (uintptr_t)a.data() + 100, 4, 12, amr->lkey },
        { (uintptr_t)cbuf.data() + 900, 0, 0, cmr->lkey },
        { (uintptr_t)cbuf.data() + 7, 12, 12, cmr->lkey }
    };
    ibv_wc wc;
    ibv_wr_start(rcx);
    rcx->wr_flags = SI;
    mlx5dv_wr_mr_interleaved(rcdv, mk, ALL, 5, 3, e);
    ASSERT_EQ(ibv_wr_complete(rcx), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    /* byte o of the layout (L = 5 x 16) */
    auto at = [&](uint64_t o) -> char * {
        uint64_t r = o / 16, w = o % 16;
        return (w < 4) ? &a[100 + r * 16 + w] : &cbuf[7 + r * 24 + (w - 4)];
    };
    /* gathered by a WRITE whose local key is the mkey: whole, and from inside an entry */
    const uint64_t ranges[][2] = { { 0, 80 }, { 2, 30 }, { 4, 12 }, { 3, 2 } };
    for (auto &rg : ranges) {
        std::fill(b.begin(), b.end(), 0);
        ibv_wr_start(c.qpx);
        c.qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(c.qpx, bmr->rkey, (uintptr_t)b.data());
        mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, key);
        ibv_wr_set_sge(c.qpx, mk->lkey, rg[0], (uint32_t)rg[1]);
        ASSERT_EQ(ibv_wr_complete(c.qpx), 0);
        ASSERT_TRUE(poll_one(d.cq, &wc));
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << rg[0];
        for (uint64_t i = 0; i < rg[1]; i++)
            ASSERT_EQ(b[i], *at(rg[0] + i)) << rg[0] << "+" << i;
        EXPECT_EQ(b[rg[1]], 0);
    }
    /* scattered by a WRITE whose remote key is the mkey */
    for (int i = 0; i < 80; i++)
        lbuf[i] = (char)(200 + i);
    EXPECT_EQ(write(mk->rkey, 0, 80), IBV_WC_SUCCESS);
    for (uint64_t i = 0; i < 80; i++)
        ASSERT_EQ(*at(i), (char)(200 + i)) << i;
    EXPECT_EQ(cbuf[900],
              (char)(900 * 5 +
                     3)); /* the zero-byte entry's address: untouched */
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

/* An interleaved mkey as the local key of a WRITE: the device gathers the blocks.  Whole and
 * partial ranges, one and two entries, mixed with a plain SGE, and a leaf deregistered after the
 * UMR (checked at the access, like every leaf of every access). */
TEST_F(emu_umr, interleaved_local_gather)
{
    for (size_t i = 0; i < a.size(); i++)
        a[i] = (char)(i * 7 + 1);
    for (size_t i = 0; i < cbuf.size(); i++)
        cbuf[i] = (char)(i * 5 + 3);
    ibv_wc wc;
    auto program = [&](mlx5dv_mkey *mk, uint32_t repeat,
                       std::vector<mlx5dv_mr_interleaved> &e) {
        ibv_wr_start(rcx);
        rcx->wr_flags = SI;
        mlx5dv_wr_mr_interleaved(rcdv, mk, ALL, repeat, (uint16_t)e.size(),
                                 e.data());
        ASSERT_EQ(ibv_wr_complete(rcx), 0);
        ASSERT_TRUE(poll_one(d.cq, &wc));
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    };
    auto put = [&](std::vector<ibv_sge> sg) {
        ibv_wr_start(c.qpx);
        c.qpx->wr_id    = 3;
        c.qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(c.qpx, bmr->rkey, (uintptr_t)b.data());
        mlx5dv_wr_set_dc_addr(c.dv, c.ah, dct->qp_num, key);
        ibv_wr_set_sge_list(c.qpx, sg.size(), sg.data());
        if (ibv_wr_complete(c.qpx) != 0 || !poll_one(d.cq, &wc))
            return IBV_WC_GENERAL_ERR;
        return wc.status;
    };
    /* the bytes at offsets [off, off+len) of the layout, as the spec maps them */
    auto expect = [&](std::vector<mlx5dv_mr_interleaved> e, uint64_t off,
                      uint64_t len) {
        std::vector<char> out;
        uint64_t unit = 0;
        for (auto &x : e)
            unit += x.bytes_count;
        for (uint64_t o = off; o < off + len; o++) {
            uint64_t r = o / unit, w = o % unit, i = 0;
            while (w >= e[i].bytes_count)
                w -= e[i].bytes_count, i++;
            out.push_back(*(char *)(e[i].addr +
                                    r * (e[i].bytes_count + e[i].bytes_skip) +
                                    w));
        }
        return out;
    };
    auto check = [&](const std::vector<char> &want, size_t at) {
        for (size_t i = 0; i < want.size(); i++)
            ASSERT_EQ(b[at + i], want[i]) << i;
        EXPECT_EQ(b[at + want.size()], 0);
    };
    /* one entry: 8 B blocks at stride 64, 40 repeats */
    mlx5dv_mkey *m1 = mkey(2);
    ASSERT_NE(m1, nullptr);
    std::vector<mlx5dv_mr_interleaved> e1 = { { (uintptr_t)a.data() + 3, 8, 56,
                                                amr->lkey } };
    program(m1, 40, e1);
    const uint64_t ranges1[][2] = { { 0, 320 },
                                    { 8, 21 },
                                    { 3, 30 },
                                    { 317, 3 },
                                    { 5, 1 } };
    for (auto &r : ranges1) {
        std::fill(b.begin(), b.end(), 0);
        EXPECT_EQ(put({ { r[0], (uint32_t)r[1], m1->lkey } }), IBV_WC_SUCCESS)
                << r[0];
        check(expect(e1, r[0], r[1]), 0);
    }
    /* two entries in two MRs: 4 B at stride 16 and 12 B at stride 24, 9 repeats */
    mlx5dv_mkey *m2 = mkey(3);
    ASSERT_NE(m2, nullptr);
    std::vector<mlx5dv_mr_interleaved> e2 = {
        { (uintptr_t)a.data() + 100, 4, 12, amr->lkey },
        { (uintptr_t)cbuf.data() + 7, 12, 12, cmr->lkey }
    };
    program(m2, 9, e2);
    const uint64_t ranges2[][2] = { { 0, 144 },
                                    { 2, 50 },
                                    { 4, 12 },
                                    { 5, 3 },
                                    { 140, 4 } };
    for (auto &r : ranges2) {
        std::fill(b.begin(), b.end(), 0);
        EXPECT_EQ(put({ { r[0], (uint32_t)r[1], m2->lkey } }), IBV_WC_SUCCESS)
                << r[0];
        check(expect(e2, r[0], r[1]), 0);
    }
    /* a plain SGE, then the layout, then the other layout */
    for (int i = 0; i < 16; i++)
        lbuf[i] = (char)(90 + i);
    std::fill(b.begin(), b.end(), 0);
    EXPECT_EQ(put({ { (uintptr_t)lbuf.data(), 16, lmr->lkey },
                    { 8, 100, m1->lkey } }),
              IBV_WC_SUCCESS);
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(b[i], (char)(90 + i));
    check(expect(e1, 8, 100), 16);
    /* a list mkey beside the layout */
    mlx5dv_mkey *ml = mkey(2);
    ASSERT_NE(ml, nullptr);
    ASSERT_EQ(umr_list(ml, { { (uintptr_t)lbuf.data() + 4, 12, lmr->lkey } },
                       ALL, SI, &wc),
              0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    std::fill(b.begin(), b.end(), 0);
    EXPECT_EQ(put({ { 2, 10, ml->lkey }, { 0, 24, m1->lkey } }),
              IBV_WC_SUCCESS);
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(b[i], (char)(96 + i));
    check(expect(e1, 0, 24), 10);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(ml), 0);
    /* beyond L: local protection, nothing reaches the target */
    std::fill(b.begin(), b.end(), 0);
    EXPECT_EQ(put({ { 300, 21, m1->lkey } }), IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(b[0], 0);
    reset_dci();
    /* a leaf deregistered after the UMR: local protection at the access */
    std::vector<char> x(4096, 9);
    ibv_mr *xmr = dcxemu_ibv_reg_mr(d.pd, x.data(), x.size(), ALL);
    ASSERT_NE(xmr, nullptr);
    std::vector<mlx5dv_mr_interleaved> e3 = {
        { (uintptr_t)a.data(), 8, 8, amr->lkey },
        { (uintptr_t)x.data() + 64, 8, 56, xmr->lkey }
    };
    ASSERT_EQ(local_inv(m2),
              IBV_WC_SUCCESS); /* invalidate before re-registering */
    program(m2, 10, e3);
    std::fill(b.begin(), b.end(), 0);
    EXPECT_EQ(put({ { 0, 160, m2->lkey } }), IBV_WC_SUCCESS);
    check(expect(e3, 0, 160), 0);
    ASSERT_EQ(dcxemu_ibv_dereg_mr(xmr), 0);
    std::fill(b.begin(), b.end(), 0);
    EXPECT_EQ(put({ { 0, 8, m2->lkey } }),
              IBV_WC_SUCCESS); /* only the live leaf */
    EXPECT_EQ(put({ { 0, 16, m2->lkey } }), IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(b[8], 0);
    reset_dci();
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(m1), 0);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(m2), 0);
}

TEST_F(emu_umr, builder_rules)
{
    mlx5dv_mkey *mk = mkey(4);
    ASSERT_NE(mk, nullptr);
    std::vector<ibv_sge> one = { { (uintptr_t)a.data(), 8, amr->lkey } };
    EXPECT_ERRNO_EQ(EOPNOTSUPP, umr_list(mk, one, ALL, IBV_SEND_SIGNALED,
                                         nullptr)); /* no INLINE */
    EXPECT_ERRNO_EQ(EINVAL, umr_list(mk, one, IBV_ACCESS_MW_BIND, SI, nullptr));
    EXPECT_ERRNO_EQ(EINVAL, umr_list(nullptr, one, ALL, SI, nullptr));
    std::vector<ibv_sge> five(5, one[0]);
    EXPECT_ERRNO_EQ(ENOMEM,
                    umr_list(mk, five, ALL, SI,
                             nullptr)); /* > entries a 64 B inline area holds */
    mlx5dv_mr_interleaved e[4];
    for (auto &x : e)
        x = { (uintptr_t)a.data(), 4, 0, amr->lkey };
    ibv_wr_start(rcx);
    rcx->wr_flags = SI;
    mlx5dv_wr_mr_interleaved(rcdv, mk, ALL, 1, 4,
                             e); /* 4 + header > 4 entries */
    EXPECT_ERRNO_EQ(ENOMEM, ibv_wr_complete(rcx));
    ibv_wr_start(rcx);
    rcx->wr_flags = SI;
    mlx5dv_wr_mr_list(rcdv, mk, ALL, 1, one.data());
    ibv_wr_set_sge(rcx, amr->lkey, (uintptr_t)a.data(),
                   8); /* a UMR takes no setters */
    EXPECT_ERRNO_EQ(EINVAL, ibv_wr_complete(rcx));
    /* none was queued: a valid UMR posted now is the QP's next CQE (per-QP order) */
    ibv_wr_start(rcx);
    rcx->wr_id    = 78;
    rcx->wr_flags = SI;
    mlx5dv_wr_mr_list(rcdv, mk, ALL, 1, one.data());
    ASSERT_EQ(ibv_wr_complete(rcx), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.wr_id, 78u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

/* A UMR only writes the translation (hardware checks the leaves when data
 * reaches them): a nested or out-of-range leaf is accepted, and the access
 * that reaches it fails; the UMR QP is unharmed. */
TEST_F(emu_umr, bad_or_nested_leaf_fails_the_access)
{
    mlx5dv_mkey *mk = mkey(4), *inner = mkey(4);
    ASSERT_TRUE(mk && inner);
    ibv_wc wc;
    ASSERT_EQ(umr_list(inner, { { (uintptr_t)a.data(), 8, amr->lkey } }, ALL,
                       SI, &wc),
              0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(umr_list(mk, { { 0, 8, inner->lkey } }, ALL, SI, &wc), 0);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(write(mk->rkey, 0, 8), IBV_WC_REM_ACCESS_ERR); /* nested */
    reset_dci();
    ibv_qp_attr x;
    ibv_qp_init_attr ix;
    ASSERT_EQ(dcxemu_ibv_query_qp(rc, &x, IBV_QP_STATE, &ix), 0);
    EXPECT_EQ(x.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(inner), 0);
    mk = mkey(4);
    ASSERT_EQ(umr_list(mk, { { (uintptr_t)a.data() + 4090, 16, amr->lkey } },
                       ALL, SI, &wc),
              0);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    /* the leaf range ends outside its MR: what lies inside is reachable */
    EXPECT_EQ(write(mk->rkey, 0, 16), IBV_WC_REM_ACCESS_ERR);
    reset_dci();
    EXPECT_EQ(write(mk->rkey, 0, 4), IBV_WC_SUCCESS);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

TEST_F(emu_umr, local_inv_then_reprogram)
{
    mlx5dv_mkey *mk = mkey(4);
    ASSERT_NE(mk, nullptr);
    ibv_wc wc;
    std::vector<ibv_sge> one = { { (uintptr_t)a.data(), 64, amr->lkey } };
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(write(mk->rkey, 0, 8), IBV_WC_SUCCESS);
    ibv_wr_start(rcx);
    rcx->wr_id    = 9;
    rcx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_local_inv(rcx, mk->lkey);
    ASSERT_EQ(ibv_wr_complete(rcx), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
    EXPECT_EQ(write(mk->rkey, 0, 8),
              IBV_WC_REM_ACCESS_ERR); /* free until the next UMR */
    reset_dci();
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(write(mk->rkey, 0, 8), IBV_WC_SUCCESS);
    /* rights come from the UMR's access flags */
    ASSERT_EQ(local_inv(mk), IBV_WC_SUCCESS);
    ASSERT_EQ(umr_list(mk, one, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
                       SI, &wc),
              0);
    EXPECT_EQ(write(mk->rkey, 0, 8), IBV_WC_REM_ACCESS_ERR);
    /* re-registering without LOCAL_INV first breaks the documented contract:
     * strict by default (DCXEMU_STRICT_UMR=1), an error CQE and the QP in ERR */
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
    ibv_qp_attr x;
    ibv_qp_init_attr xi;
    ASSERT_EQ(dcxemu_ibv_query_qp(rc, &x, IBV_QP_STATE, &xi), 0);
    EXPECT_EQ(x.qp_state, IBV_QPS_ERR);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

/* UMR and LOCAL_INV are counted by opcode on the device of the RC QP, in both scopes. */
TEST_F(emu_umr, counters_umr_and_local_inv)
{
    mlx5dv_mkey *mk = mkey(4);
    ASSERT_NE(mk, nullptr);
    dcxemu_counters p0, f0, p1, f1;
    ASSERT_EQ(dcxemu_counters_read(0, DCXEMU_SCOPE_PROCESS, &p0), 0);
    ASSERT_EQ(dcxemu_counters_read(0, DCXEMU_SCOPE_FABRIC, &f0), 0);
    ibv_wc wc;
    std::vector<ibv_sge> one = { { (uintptr_t)a.data(), 64, amr->lkey } };
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(local_inv(mk), IBV_WC_SUCCESS);
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(local_inv(mk), IBV_WC_SUCCESS);
    ASSERT_EQ(dcxemu_counters_read(0, DCXEMU_SCOPE_PROCESS, &p1), 0);
    ASSERT_EQ(dcxemu_counters_read(0, DCXEMU_SCOPE_FABRIC, &f1), 0);
    EXPECT_EQ(p1.wr[DCXEMU_CNT_OP_UMR] - p0.wr[DCXEMU_CNT_OP_UMR], 2u);
    EXPECT_EQ(f1.wr[DCXEMU_CNT_OP_UMR] - f0.wr[DCXEMU_CNT_OP_UMR], 2u);
    EXPECT_EQ(p1.wr[DCXEMU_CNT_OP_LOCAL_INV] - p0.wr[DCXEMU_CNT_OP_LOCAL_INV],
              2u);
    EXPECT_EQ(f1.wr[DCXEMU_CNT_OP_LOCAL_INV] - f0.wr[DCXEMU_CNT_OP_LOCAL_INV],
              2u);
    EXPECT_EQ(p1.bytes - p0.bytes, 0u);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

} // namespace

/* dcxemu_rc_qp_numbers names this process's RC QPs (only those), so a transport test can aim
 * FORCE_STATUS at its UMR QP. */
TEST_F(emu_umr, rc_qp_numbers)
{
    unsigned n0 = 0, n = 0;
    uint32_t nums[64];
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_rc_qp_numbers(nullptr, 0, nullptr));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_rc_qp_numbers(nullptr, 1, &n));
    ASSERT_EQ(dcxemu_rc_qp_numbers(nums, 64, &n0), 0);
    ASSERT_GE(n0, 1u);
    ASSERT_LE(n0, 63u);
    auto listed = [&](uint32_t qpn) {
        return std::count(nums, nums + std::min(n, 64u), qpn);
    };
    n = n0;
    EXPECT_EQ(listed(rc->qp_num), 1);
    EXPECT_EQ(listed(c.qp->qp_num), 0); /* a DCI is not listed */
    ibv_qp *q = create_rc(16, 1, 0);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(dcxemu_rc_qp_numbers(nums, 1, &n), 0);
    EXPECT_EQ(n, n0 + 1); /* counted beyond max */
    ASSERT_EQ(dcxemu_rc_qp_numbers(nums, 64, &n), 0);
    EXPECT_EQ(listed(q->qp_num), 1);
    EXPECT_EQ(listed(rc->qp_num), 1);
    EXPECT_EQ(dcxemu_ibv_destroy_qp(q), 0);
    ASSERT_EQ(dcxemu_rc_qp_numbers(nums, 64, &n), 0);
    EXPECT_EQ(n, n0);
}

/* The mkey tag (key variant): rdma-core takes the tag of a UMR from the low byte of mkey->lkey
 * (qp.c, mlx5_send_wr_mkey_configure: qpn_mkey = 0xffffff00 | (lkey & 0xff)) when the kernel
 * reports MKEY_UPDATE_TAG, and mlx5dv_create_mkey accepts MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG
 * then.  After a UMR with a new tag only the new key reaches the memory: a holder of the old key
 * gets a remote access error, and LOCAL_INV with the old key invalidates nothing. */
TEST_F(emu_umr, mkey_tag_set_by_umr)
{
    mlx5dv_mkey_init_attr ma = { d.pd,
                                 MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                                         MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG,
                                 4 };
    mlx5dv_mkey *mk          = dcxemu_mlx5dv_create_mkey(&ma);
    ASSERT_NE(mk, nullptr);
    EXPECT_EQ(mk->lkey & 0xff, 0u); /* created with tag 0 */
    ibv_wc wc;
    std::vector<ibv_sge> one = { { (uintptr_t)a.data(), 64, amr->lkey } };
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    const uint32_t old_key = mk->rkey;
    lbuf[0]                = 1;
    EXPECT_EQ(write(old_key, 0, 1), IBV_WC_SUCCESS);
    EXPECT_EQ(a[0], 1);
    ASSERT_EQ(local_inv(mk), IBV_WC_SUCCESS);
    mk->lkey = mk->rkey = (old_key & ~0xffu) |
                          0x2a; /* the next variant to hand out */
    ASSERT_EQ(umr_list(mk, one, ALL, SI, &wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    lbuf[0] = 2;
    EXPECT_EQ(write(mk->rkey, 0, 1), IBV_WC_SUCCESS);
    EXPECT_EQ(a[0], 2);
    lbuf[0] = 3;
    EXPECT_EQ(write(old_key, 0, 1),
              IBV_WC_REM_ACCESS_ERR); /* the stale variant */
    EXPECT_EQ(a[0], 2);
    reset_dci();
    /* LOCAL_INV with the stale key: an error, the mkey stays valid */
    ibv_wr_start(rcx);
    rcx->wr_id    = 9;
    rcx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_local_inv(rcx, old_key);
    ASSERT_EQ(ibv_wr_complete(rcx), 0);
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
    lbuf[0] = 4;
    EXPECT_EQ(write(mk->rkey, 0, 1), IBV_WC_SUCCESS);
    EXPECT_EQ(a[0], 4);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
}

/* An indirect mkey lends no rights its leaves lack: an mkey programmed with remote write over an
 * MR registered for local access only is refused on use (the UMR itself succeeds), and the memory
 * is untouched; a leaf with the right works through the same UMR access. */
TEST_F(emu_umr, leaf_rights_checked_at_use)
{
    std::vector<char> local(256, 0);
    ibv_mr *lo = dcxemu_ibv_reg_mr(d.pd, local.data(), local.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(lo, nullptr);
    mlx5dv_mkey *mk = mkey(4), *ok = mkey(4);
    ASSERT_TRUE(mk && ok);
    ibv_wc wc;
    ASSERT_EQ(umr_list(mk, { { (uintptr_t)local.data(), 64, lo->lkey } }, ALL,
                       SI, &wc),
              0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(umr_list(ok, { { (uintptr_t)a.data(), 64, amr->lkey } }, ALL, SI,
                       &wc),
              0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    lbuf[0] = 7;
    EXPECT_EQ(write(mk->rkey, 0, 8), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(local[0], 0);
    reset_dci();
    EXPECT_EQ(write(ok->rkey, 0, 8), IBV_WC_SUCCESS);
    EXPECT_EQ(a[0], 7);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(mk), 0);
    EXPECT_EQ(dcxemu_mlx5dv_destroy_mkey(ok), 0);
    EXPECT_EQ(dcxemu_ibv_dereg_mr(lo), 0);
}
