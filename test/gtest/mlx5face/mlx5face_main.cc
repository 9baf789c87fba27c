/* Test main of the mlx5 face's suite through real rdma-core: the binary
 * re-executes itself with the built face preloaded (the face must be in
 * place before libibverbs looks for devices), on a fresh fabric per run;
 * that run is the common suite main (child roles, tests). */
#include "mlx5face_test.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define FACE_LIB DCX_TEST_BUILDDIR "/src/dcxemu/mlx5/.libs/libdcxemu_mlx5.so.0"

namespace mlx5face {

static const verbs g_face = {
    "mlx5 face",
    [](int *num) { return ibv_get_device_list(num); },
    [](ibv_device **list) { ibv_free_device_list(list); },
    [](ibv_device *dev) { return ibv_open_device(dev); },
    [](ibv_context *ctx) { return ibv_close_device(ctx); },
    [](ibv_context *ctx, uint8_t port, ibv_port_attr *attr) {
        return ibv_query_port(ctx, port, attr);
    },
    [](ibv_context *ctx) { return ibv_alloc_pd(ctx); },
    [](ibv_pd *pd) { return ibv_dealloc_pd(pd); },
    [](ibv_pd *pd, void *addr, size_t len, int access) {
        return ibv_reg_mr(pd, addr, len, access);
    },
    [](ibv_mr *mr) { return ibv_dereg_mr(mr); },
    [](ibv_context *ctx, int cqe, void *cq_ctx, ibv_comp_channel *ch,
       int vector) { return ibv_create_cq(ctx, cqe, cq_ctx, ch, vector); },
    [](ibv_context *ctx, ibv_cq_init_attr_ex *attr) {
        return ibv_create_cq_ex(ctx, attr);
    },
    [](ibv_cq *cq) { return ibv_destroy_cq(cq); },
    [](ibv_pd *pd, ibv_srq_init_attr *attr) {
        return ibv_create_srq(pd, attr);
    },
    [](ibv_srq *srq) { return ibv_destroy_srq(srq); },
    [](ibv_context *ctx, ibv_qp_init_attr_ex *attr, mlx5dv_qp_init_attr *dv) {
        return mlx5dv_create_qp(ctx, attr, dv);
    },
    [](ibv_qp *qp, ibv_qp_attr *attr, int mask) {
        return ibv_modify_qp(qp, attr, mask);
    },
    [](ibv_qp *qp) { return ibv_destroy_qp(qp); },
    [](ibv_qp *qp) { return ibv_qp_to_qp_ex(qp); },
    [](ibv_qp_ex *qp) { return mlx5dv_qp_ex_from_ibv_qp_ex(qp); },
    [](ibv_pd *pd, ibv_ah_attr *attr) { return ibv_create_ah(pd, attr); },
    [](ibv_ah *ah) { return ibv_destroy_ah(ah); },
};

static const verbs g_model = {
    "model API",
    dcxemu_ibv_get_device_list,
    dcxemu_ibv_free_device_list,
    dcxemu_ibv_open_device,
    dcxemu_ibv_close_device,
    dcxemu_ibv_query_port,
    dcxemu_ibv_alloc_pd,
    dcxemu_ibv_dealloc_pd,
    dcxemu_ibv_reg_mr,
    dcxemu_ibv_dereg_mr,
    dcxemu_ibv_create_cq,
    dcxemu_ibv_create_cq_ex,
    dcxemu_ibv_destroy_cq,
    dcxemu_ibv_create_srq,
    dcxemu_ibv_destroy_srq,
    dcxemu_mlx5dv_create_qp,
    dcxemu_ibv_modify_qp,
    dcxemu_ibv_destroy_qp,
    dcxemu_ibv_qp_to_qp_ex,
    dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex,
    dcxemu_ibv_create_ah,
    dcxemu_ibv_destroy_ah,
};

const verbs &face_verbs()
{
    return g_face;
}

const verbs &model_verbs()
{
    return g_model;
}

counters::counters()
{
    memset(&c, 0, sizeof(c));
    EXPECT_EQ(0, dcxemu_counters_read(0, DCXEMU_SCOPE_PROCESS, &c));
}

counters counters::operator-(const counters &o) const
{
    counters d(*this);
    uint64_t *a       = (uint64_t *)&d.c;
    const uint64_t *b = (const uint64_t *)&o.c;

    for (size_t i = 0; i < sizeof(c) / sizeof(uint64_t); i++) {
        a[i] -= b[i];
    }
    return d;
}

bool device::open(const verbs &verbs)
{
    int n = 0;
    ibv_device **list;
    ibv_port_attr pa;

    v    = &verbs;
    list = v->get_device_list(&n);
    if ((list == nullptr) || (n < 1)) {
        return false;
    }
    ctx = v->open_device(list[0]);
    v->free_device_list(list);
    if ((ctx == nullptr) || (v->query_port(ctx, 1, &pa) != 0)) {
        return false;
    }
    lid = pa.lid;
    pd  = v->alloc_pd(ctx);
    return pd != nullptr;
}

void device::close()
{
    if (pd != nullptr) {
        EXPECT_EQ(0, v->dealloc_pd(pd));
    }
    if (ctx != nullptr) {
        EXPECT_EQ(0, v->close_device(ctx));
    }
    pd  = nullptr;
    ctx = nullptr;
}

bool memory::reg(device &d, size_t len)
{
    v = d.v;
    buf.assign(len, 0);
    mr = v->reg_mr(d.pd, buf.data(), len, MR_ACCESS);
    return mr != nullptr;
}

void memory::dereg()
{
    if (mr != nullptr) {
        EXPECT_EQ(0, v->dereg_mr(mr));
    }
    mr = nullptr;
}

/* A CQ both poll APIs read: ibv_cq_ex with the fields the tests check. */
static ibv_cq_ex *create_cq_ex(device &d, int cqe, ibv_comp_channel *ch)
{
    ibv_cq_init_attr_ex a;

    memset(&a, 0, sizeof(a));
    a.cqe      = cqe;
    a.channel  = ch;
    a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
                 IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
                 IBV_WC_EX_WITH_SLID;
    return d.v->create_cq_ex(d.ctx, &a);
}

ibv_qp *create_dci(device &d, ibv_cq *cq, uint32_t max_send_wr, bool raw,
                   int sig_all, const mlx5dv_dci_streams *streams,
                   uint32_t create_flags)
{
    ibv_qp_init_attr_ex a;
    mlx5dv_qp_init_attr dv;

    memset(&a, 0, sizeof(a));
    memset(&dv, 0, sizeof(dv));
    a.qp_type             = IBV_QPT_DRIVER;
    a.send_cq             = cq;
    a.recv_cq             = cq;
    a.pd                  = d.pd;
    a.sq_sig_all          = sig_all;
    a.cap.max_send_wr     = max_send_wr;
    a.cap.max_send_sge    = 2;
    a.cap.max_inline_data = 128;
    a.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
                       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    dv.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    if (raw) {
        dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
    }
    if (streams != nullptr) {
        dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
        dv.dc_init_attr.dci_streams = *streams;
    }
    if (create_flags != 0) {
        dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
        dv.create_flags = create_flags;
    }
    return d.v->create_qp(d.ctx, &a, &dv);
}

int dci_to_rts(device &d, ibv_qp *qp, uint8_t timeout, uint8_t retry)
{
    ibv_qp_attr a;
    int r;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    if ((r = d.v->modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)) !=
        0) {
        return r;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state         = IBV_QPS_RTR;
    a.path_mtu         = IBV_MTU_4096;
    a.ah_attr.port_num = 1;
    if ((r = d.v->modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV)) != 0) {
        return r;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = timeout;
    a.retry_cnt     = retry;
    a.rnr_retry     = 7;
    a.max_rd_atomic = 16;
    return d.v->modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                                  IBV_QP_SQ_PSN);
}

ibv_qp *create_dct(device &d, ibv_cq *cq, ibv_srq *srq, uint64_t key,
                   uint32_t create_flags)
{
    ibv_qp_init_attr_ex a;
    mlx5dv_qp_init_attr dv;

    memset(&a, 0, sizeof(a));
    memset(&dv, 0, sizeof(dv));
    a.qp_type                      = IBV_QPT_DRIVER;
    a.send_cq                      = cq;
    a.recv_cq                      = cq;
    a.srq                          = srq;
    a.pd                           = d.pd;
    a.comp_mask                    = IBV_QP_INIT_ATTR_PD;
    dv.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv.dc_init_attr.dct_access_key = key;
    if (create_flags != 0) {
        dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
        dv.create_flags = create_flags;
    }
    return d.v->create_qp(d.ctx, &a, &dv);
}

int dct_to_rtr(device &d, ibv_qp *qp)
{
    ibv_qp_attr a;
    int r;

    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.port_num        = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
    if ((r = d.v->modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                    IBV_QP_ACCESS_FLAGS)) != 0) {
        return r;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state         = IBV_QPS_RTR;
    a.path_mtu         = IBV_MTU_4096;
    a.min_rnr_timer    = 1;
    a.ah_attr.port_num = 1;
    return d.v->modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                                  IBV_QP_PATH_MTU);
}

bool target::create(device &dev, size_t len, uint64_t key, ibv_comp_channel *ch,
                    uint32_t create_flags)
{
    ibv_srq_init_attr sa;

    d   = &dev;
    cqx = create_cq_ex(dev, 256, ch);
    if (cqx == nullptr) {
        return false;
    }
    cq = ibv_cq_ex_to_cq(cqx);
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 64;
    sa.attr.max_sge = 2;
    srq             = dev.v->create_srq(dev.pd, &sa);
    if ((srq == nullptr) || !mem.reg(dev, len)) {
        return false;
    }
    dct = create_dct(dev, cq, srq, key, create_flags);
    return (dct != nullptr) && (dct_to_rtr(dev, dct) == 0);
}

void target::destroy()
{
    if (dct != nullptr) {
        EXPECT_EQ(0, d->v->destroy_qp(dct));
    }
    if (srq != nullptr) {
        EXPECT_EQ(0, d->v->destroy_srq(srq));
    }
    mem.dereg();
    if (cq != nullptr) {
        EXPECT_EQ(0, d->v->destroy_cq(cq));
    }
    dct = nullptr;
    srq = nullptr;
    cq  = nullptr;
    cqx = nullptr;
}

int target::post_recv(uint64_t wr_id, size_t off, uint32_t len)
{
    ibv_sge sge = { mem.addr(off), len, mem.mr->lkey };
    ibv_recv_wr wr, *bad = nullptr;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_srq_recv(srq, &wr, &bad);
}

bool initiator::create(device &dev, uint16_t dlid, uint32_t max_send_wr,
                       uint8_t timeout, uint8_t retry, bool raw,
                       ibv_comp_channel *ch, size_t len, uint32_t create_flags)
{
    ibv_ah_attr aa;

    d   = &dev;
    cqx = create_cq_ex(dev, 256, ch);
    if ((cqx == nullptr) || !mem.reg(dev, len)) {
        return false;
    }
    cq = ibv_cq_ex_to_cq(cqx);
    qp = create_dci(dev, cq, max_send_wr, raw, 0, nullptr, create_flags);
    if ((qp == nullptr) || (dci_to_rts(dev, qp, timeout, retry) != 0)) {
        return false;
    }
    qpx = dev.v->qp_to_qp_ex(qp);
    dv  = dev.v->dv_qp_ex(qpx);
    memset(&aa, 0, sizeof(aa));
    aa.dlid     = dlid;
    aa.port_num = 1;
    ah          = dev.v->create_ah(dev.pd, &aa);
    return (qpx != nullptr) && (dv != nullptr) && (ah != nullptr);
}

void initiator::destroy()
{
    if (ah != nullptr) {
        EXPECT_EQ(0, d->v->destroy_ah(ah));
    }
    if (qp != nullptr) {
        EXPECT_EQ(0, d->v->destroy_qp(qp));
    }
    mem.dereg();
    if (cq != nullptr) {
        EXPECT_EQ(0, d->v->destroy_cq(cq));
    }
    ah  = nullptr;
    qp  = nullptr;
    cq  = nullptr;
    cqx = nullptr;
}

/* ibv_wr_start, the operation (op), the DC address, the data (data), then
 * ibv_wr_complete: as dcx posts a WR on a DCI. */
template <typename Op, typename Data>
static int post(initiator &i, uint64_t wr_id, unsigned flags, Op op, Data data)
{
    ibv_wr_start(i.qpx);
    i.qpx->wr_id    = wr_id;
    i.qpx->wr_flags = flags;
    op();
    mlx5dv_wr_set_dc_addr(i.dv, i.ah, i.dctn, i.key);
    data();
    return ibv_wr_complete(i.qpx);
}

int initiator::write(uint64_t wr_id, size_t loff, uint32_t len, uint32_t rkey,
                     uint64_t raddr, unsigned flags)
{
    return post(
            *this, wr_id, flags, [&] { ibv_wr_rdma_write(qpx, rkey, raddr); },
            [&] { ibv_wr_set_sge(qpx, mem.mr->lkey, mem.addr(loff), len); });
}

int initiator::write_inline(uint64_t wr_id, const void *data, uint32_t len,
                            uint32_t rkey, uint64_t raddr, unsigned flags)
{
    return post(
            *this, wr_id, flags | IBV_SEND_INLINE,
            [&] { ibv_wr_rdma_write(qpx, rkey, raddr); },
            [&] { ibv_wr_set_inline_data(qpx, (void *)data, len); });
}

int initiator::read(uint64_t wr_id, size_t loff, uint32_t len, uint32_t rkey,
                    uint64_t raddr, unsigned flags)
{
    return post(
            *this, wr_id, flags, [&] { ibv_wr_rdma_read(qpx, rkey, raddr); },
            [&] { ibv_wr_set_sge(qpx, mem.mr->lkey, mem.addr(loff), len); });
}

int initiator::send(uint64_t wr_id, size_t loff, uint32_t len, bool imm,
                    uint32_t imm_data, unsigned flags)
{
    return post(
            *this, wr_id, flags,
            [&] {
                if (imm) {
                    ibv_wr_send_imm(qpx, htobe32(imm_data));
                } else {
                    ibv_wr_send(qpx);
                }
            },
            [&] { ibv_wr_set_sge(qpx, mem.mr->lkey, mem.addr(loff), len); });
}

int initiator::send_inline(uint64_t wr_id, const void *data, uint32_t len,
                           bool imm, uint32_t imm_data, unsigned flags)
{
    return post(
            *this, wr_id, flags | IBV_SEND_INLINE,
            [&] {
                if (imm) {
                    ibv_wr_send_imm(qpx, htobe32(imm_data));
                } else {
                    ibv_wr_send(qpx);
                }
            },
            [&] { ibv_wr_set_inline_data(qpx, (void *)data, len); });
}

int initiator::cswap(uint64_t wr_id, size_t loff, uint32_t rkey, uint64_t raddr,
                     uint64_t compare, uint64_t swap, unsigned flags)
{
    return post(
            *this, wr_id, flags,
            [&] { ibv_wr_atomic_cmp_swp(qpx, rkey, raddr, compare, swap); },
            [&] { ibv_wr_set_sge(qpx, mem.mr->lkey, mem.addr(loff), 8); });
}

int initiator::fadd(uint64_t wr_id, size_t loff, uint32_t rkey, uint64_t raddr,
                    uint64_t add, unsigned flags)
{
    return post(
            *this, wr_id, flags,
            [&] { ibv_wr_atomic_fetch_add(qpx, rkey, raddr, add); },
            [&] { ibv_wr_set_sge(qpx, mem.mr->lkey, mem.addr(loff), 8); });
}

int initiator::raw(uint64_t wr_id, const void *wqe)
{
    ibv_wr_start(qpx);
    qpx->wr_id    = wr_id;
    qpx->wr_flags = 0;
    mlx5dv_wr_raw_wqe(dv, wqe);
    return ibv_wr_complete(qpx);
}

std::vector<uint64_t> completion_msg(const completion &c)
{
    return { c.wr_id,   (uint64_t)c.status, (uint64_t)c.opcode, c.byte_len,
             c.imm,     c.src_qp,           c.vendor_err,       c.qp_num,
             c.wc_flags };
}

completion msg_completion(const std::vector<uint64_t> &v, size_t at)
{
    completion c;

    memset(&c, 0, sizeof(c));
    if (v.size() >= at + 9) {
        c.wr_id      = v[at];
        c.status     = (int)v[at + 1];
        c.opcode     = (int)v[at + 2];
        c.byte_len   = (uint32_t)v[at + 3];
        c.imm        = (uint32_t)v[at + 4];
        c.src_qp     = (uint32_t)v[at + 5];
        c.vendor_err = (uint32_t)v[at + 6];
        c.qp_num     = (uint32_t)v[at + 7];
        c.wc_flags   = (unsigned)v[at + 8];
    }
    return c;
}

bool poll_legacy(ibv_cq *cq, completion *c, double timeout)
{
    ibv_wc wc;
    int n = 0;

    if (!dcx_test::poll_until([&] { return n != 0; },
                              [&] { n = ibv_poll_cq(cq, 1, &wc); }, timeout) ||
        (n != 1)) {
        return false;
    }
    c->wr_id      = wc.wr_id;
    c->status     = wc.status;
    c->opcode     = wc.opcode;
    c->byte_len   = wc.byte_len;
    c->imm        = be32toh(wc.imm_data);
    c->src_qp     = wc.src_qp;
    c->vendor_err = wc.vendor_err;
    c->qp_num     = wc.qp_num;
    c->wc_flags   = wc.wc_flags;
    return true;
}

/* The completion an ibv_cq_ex poll sequence is at. */
static completion read_ex(ibv_cq_ex *cq)
{
    completion c;

    c.wr_id      = cq->wr_id;
    c.status     = cq->status;
    c.opcode     = ibv_wc_read_opcode(cq);
    c.byte_len   = ibv_wc_read_byte_len(cq);
    c.imm        = be32toh(ibv_wc_read_imm_data(cq));
    c.src_qp     = ibv_wc_read_src_qp(cq);
    c.vendor_err = ibv_wc_read_vendor_err(cq);
    c.qp_num     = ibv_wc_read_qp_num(cq);
    c.wc_flags   = ibv_wc_read_wc_flags(cq);
    return c;
}

bool poll_ex_n(ibv_cq_ex *cq, unsigned n, std::vector<completion> *out,
               double timeout)
{
    double deadline       = dcx_test::now_sec() + timeout;
    ibv_poll_cq_attr attr = {};
    int ret;

    while (out->size() < n) {
        /* a sequence: ibv_start_poll, then ibv_next_poll while CQEs are
         * there */
        while ((ret = ibv_start_poll(cq, &attr)) == ENOENT) {
            if (dcx_test::now_sec() > deadline) {
                return false;
            }
        }
        if (ret != 0) {
            return false;
        }
        do {
            out->push_back(read_ex(cq));
        } while ((out->size() < n) && ((ret = ibv_next_poll(cq)) == 0));
        ibv_end_poll(cq);
        if ((ret != 0) && (ret != ENOENT)) {
            return false;
        }
    }
    return true;
}

bool poll_ex(ibv_cq_ex *cq, completion *c, double timeout)
{
    std::vector<completion> v;

    if (!poll_ex_n(cq, 1, &v, timeout)) {
        return false;
    }
    *c = v[0];
    return true;
}

bool cq_empty(ibv_cq *cq)
{
    ibv_wc wc;

    return ibv_poll_cq(cq, 1, &wc) == 0;
}

bool sq_view::init(ibv_qp *qp)
{
    mlx5dv_obj obj;

    memset(&obj, 0, sizeof(obj));
    memset(&dv, 0, sizeof(dv));
    obj.qp.in  = qp;
    obj.qp.out = &dv;
    return mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP) == 0;
}

int sq_view::decode(uint16_t pi, dcxemu_mlx5_wqe *w) const
{
    return dcxemu_mlx5_wqe_decode(dv.sq.buf, dv.sq.wqe_cnt, pi & mask(),
                                  DCXEMU_MLX5_QP_DCI, 1024, w);
}

raw_fadd make_raw_fadd(uint32_t qpn, bool signaled, uint64_t dc_key,
                       uint32_t dctn, uint16_t lid, uint64_t raddr,
                       uint32_t rkey, uint64_t add, uint64_t boundary,
                       uint32_t lkey, uint64_t laddr)
{
    const uint8_t opmod_ext64 = 0x09; /* extended atomic, 8-byte operands */
    raw_fadd w;
    unsigned off = 0;

    memset(&w, 0, sizeof(w));
    auto *ctrl = (mlx5_wqe_ctrl_seg *)w.b;
    off += sizeof(*ctrl);
    auto *av       = (mlx5_wqe_av *)(w.b + off);
    av->key.dc_key = htobe64(dc_key);
    av->dqp_dct    = htobe32(dctn | MLX5_EXTENDED_UD_AV);
    av->rlid       = htobe16(lid);
    off += sizeof(*av);
    auto *r  = (mlx5_wqe_raddr_seg *)(w.b + off);
    r->raddr = htobe64(raddr);
    r->rkey  = htobe32(rkey);
    off += sizeof(*r);
    uint64_t ops[2] = { htobe64(add), htobe64(boundary) };
    memcpy(w.b + off, ops, sizeof(ops));
    off += sizeof(ops);
    auto *data       = (mlx5_wqe_data_seg *)(w.b + off);
    data->byte_count = htobe32(8);
    data->lkey       = htobe32(lkey);
    data->addr       = htobe64(laddr);
    off += sizeof(*data);
    ctrl->opmod_idx_opcode = htobe32((uint32_t)opmod_ext64 << 24 |
                                     MLX5_OPCODE_ATOMIC_MASKED_FA);
    ctrl->qpn_ds           = htobe32(qpn << 8 | off / 16);
    ctrl->fm_ce_se         = signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
    w.size                 = off;
    return w;
}

} // namespace mlx5face

/* Whether the face is loaded in this process. */
static int find_face(struct dl_phdr_info *info, size_t size, void *arg)
{
    return strstr(info->dlpi_name, "libdcxemu_mlx5.so") != nullptr;
}

int main(int argc, char **argv)
{
    if (dl_iterate_phdr(find_face, nullptr) == 0) {
        const char *old     = getenv("LD_PRELOAD");
        std::string preload = FACE_LIB;
        std::string fabric  = "dcx-mlx5face-test-" + std::to_string(getpid());
        int status;

        if ((old != nullptr) && (*old != '\0')) {
            preload += std::string(":") + old;
        }
        setenv("LD_PRELOAD", preload.c_str(), 1);
        setenv("DCXEMU_FABRIC", fabric.c_str(), 1);
        /* the run in a child, so that a run that crashed leaves no fabric
         * behind (this process never attaches to it) */
        char exe[PATH_MAX];
        ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[(len > 0) ? len : 0] = '\0';
        pid_t pid                = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* killed with its parent */
            execv((len > 0) ? exe : "/proc/self/exe", argv);
            fprintf(stderr, "cannot re-execute with %s preloaded: %s\n",
                    FACE_LIB, strerror(errno));
            _exit(127);
        }
        if ((pid < 0) || (waitpid(pid, &status, 0) != pid)) {
            return 127;
        }
        (void)dcxemu_fabric_remove(fabric.c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return dcx_test::run_suite(argc, argv, "mlx5face", dcx_test::env_vars());
}
