/* Golden WQEs: every operation dcx posts on a DCI, built by libmlx5 through
 * ibv_wr_* / mlx5dv_wr_*, read back from the send queue and decoded by the
 * device's own decoder, field by field against what was posted; then
 * executed.  And WQEs libmlx5 would never write, put straight into the send
 * queue: they complete in error and nothing else is disturbed. */
#include "mlx5face_test.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

using namespace mlx5face;

namespace {

/* Whether a doorbell store runs the device before it returns: the face
 * traps the UAR pages (not DCXEMU_UAR=rw, the default under valgrind, where
 * a scan every millisecond finds the WQEs instead) and the model executes
 * as it is rung (not DCXEMU_EXEC=deferred). */
bool doorbell_synchronous()
{
    const char *u = getenv("DCXEMU_UAR"), *e = getenv("DCXEMU_EXEC");
    std::string uar = (u != nullptr) ? u : "", exec = (e != nullptr) ? e : "";
    bool trapped = (uar == "trap") || ((uar != "rw") && !RUNNING_ON_VALGRIND);

    return trapped && (exec != "deferred");
}

/* The permissions /proc/self/maps shows for the page at addr. */
std::string page_perms(const void *addr)
{
    char line[512], perms[8] = "";
    unsigned long start, end;
    FILE *maps = fopen("/proc/self/maps", "r");

    while ((maps != nullptr) && (fgets(line, sizeof(line), maps) != nullptr)) {
        if ((sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3) &&
            ((uintptr_t)addr >= start) && ((uintptr_t)addr < end)) {
            break;
        }
        perms[0] = '\0';
    }
    if (maps != nullptr) {
        fclose(maps);
    }
    return perms;
}

/* The CQE there is now, without waiting. */
bool cqe_now(ibv_cq *cq, completion *c)
{
    ibv_wc wc;

    if (ibv_poll_cq(cq, 1, &wc) != 1) {
        return false;
    }
    memset(c, 0, sizeof(*c));
    c->wr_id  = wc.wr_id;
    c->status = wc.status;
    c->opcode = wc.opcode;
    c->qp_num = wc.qp_num;
    return true;
}

struct mlx5face_wqe : public ::testing::Test {
    device d;
    target t;
    initiator i;
    sq_view v;

    void SetUp() override
    {
        ASSERT_TRUE(d.open(face_verbs()));
        ASSERT_TRUE(t.create(d));
        ASSERT_TRUE(i.create(d, d.lid, 32, 10, 3, true));
        i.dctn = t.dctn();
        ASSERT_TRUE(v.init(i.qp));
        ASSERT_EQ(64u, v.dv.sq.stride);
    }

    void TearDown() override
    {
        i.destroy();
        t.destroy();
        d.close();
    }

    /* Post through post(), decode what libmlx5 wrote, check the control
     * and datagram segments; the caller checks the rest. */
    template <typename F> dcxemu_mlx5_wqe *posted(F post, bool signaled = true)
    {
        uint16_t pi0 = v.pi();

        EXPECT_EQ(0, post());
        uint16_t pi1 = v.pi();
        EXPECT_EQ(0, v.decode(pi0, &m_w));
        EXPECT_EQ(pi0, m_w.wqe_index);
        EXPECT_EQ((uint32_t)(uint16_t)(pi1 - pi0), m_w.num_wqebb);
        EXPECT_EQ(i.qp->qp_num, m_w.qpn);
        EXPECT_EQ(signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0,
                  m_w.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE);
        EXPECT_TRUE(m_w.has_av);
        EXPECT_TRUE(m_w.av.ext);
        EXPECT_EQ(t.dctn(), m_w.av.dctn);
        EXPECT_EQ(DC_KEY, m_w.av.dc_key);
        EXPECT_EQ(d.lid, m_w.av.rlid);
        return &m_w;
    }

    /* The WQE's completion, through the CQ both poll APIs read. */
    completion done(int status = IBV_WC_SUCCESS)
    {
        completion c;

        memset(&c, 0, sizeof(c));
        EXPECT_TRUE(poll_ex(i.cqx, &c));
        EXPECT_EQ(status, c.status)
                << ibv_wc_status_str((ibv_wc_status)c.status);
        return c;
    }

    void expect_sge(const dcxemu_mlx5_wqe *w, size_t loff, uint32_t len)
    {
        ASSERT_EQ(1u, w->num_sge);
        EXPECT_EQ(i.mem.addr(loff), w->sge[0].addr);
        EXPECT_EQ(i.mem.mr->lkey, w->sge[0].lkey);
        EXPECT_EQ(len, w->sge[0].length);
        EXPECT_FALSE(w->is_inline);
    }

    void expect_inline(const dcxemu_mlx5_wqe *w, const std::vector<char> &data)
    {
        EXPECT_TRUE(w->is_inline);
        EXPECT_EQ(0u, w->num_sge);
        ASSERT_EQ(data.size(), w->inline_len);
        EXPECT_EQ(0, memcmp(data.data(), w->inline_data, data.size()));
    }

    /* A WQE libmlx5 never wrote, at the next basic block: the doorbell
     * record bumped and the doorbell rung as libmlx5 rings it (one 8-byte
     * store of the control segment's first half). */
    void ring_own_wqe(uint8_t opcode, uint8_t ds)
    {
        uint16_t pi = v.pi();
        auto *ctrl  = (mlx5_wqe_ctrl_seg *)((char *)v.dv.sq.buf +
                                           (pi & v.mask()) * 64u);
        uint64_t db;

        memset(ctrl, 0, 64);
        ctrl->opmod_idx_opcode = htobe32((uint32_t)pi << 8 | opcode);
        ctrl->qpn_ds           = htobe32(i.qp->qp_num << 8 | ds);
        ctrl->fm_ce_se         = MLX5_WQE_CTRL_CQ_UPDATE;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        v.dv.dbrec[MLX5_SND_DBR] = htobe32((uint16_t)(pi + 1));
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        memcpy(&db, ctrl, sizeof(db));
        *(volatile uint64_t *)v.dv.bf.reg = db;
    }

    dcxemu_mlx5_wqe m_w;
};

} // namespace

TEST_F(mlx5face_wqe, rdma_write_sge_and_inline)
{
    counters c0;
    dcx_test::fill_data(i.mem.ptr(), 256, 1);
    auto *w = posted(
            [&] { return i.write(1, 0, 256, t.mem.mr->rkey, t.mem.addr(64)); });
    EXPECT_EQ(MLX5_OPCODE_RDMA_WRITE, w->opcode);
    EXPECT_EQ(6, w->ds); /* ctrl, datagram (3), raddr, data */
    EXPECT_TRUE(w->has_raddr);
    EXPECT_EQ(t.mem.addr(64), w->raddr);
    EXPECT_EQ(t.mem.mr->rkey, w->rkey);
    expect_sge(w, 0, 256);
    EXPECT_EQ(1u, done().wr_id);
    EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(64), 256, 1));

    std::vector<char> data = dcx_test::data_vector(100, 2);
    w                      = posted([&] {
        return i.write_inline(2, data.data(), 100, t.mem.mr->rkey,
                                                   t.mem.addr(1024));
    });
    EXPECT_EQ(MLX5_OPCODE_RDMA_WRITE, w->opcode);
    EXPECT_EQ((16 + 48 + 16 + 112) / 16, w->ds); /* 4 + 100 bytes, padded */
    EXPECT_EQ(t.mem.addr(1024), w->raddr);
    EXPECT_EQ(t.mem.mr->rkey, w->rkey);
    expect_inline(w, data);
    EXPECT_EQ(2u, done().wr_id);
    EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(1024), 100, 2));

    counters c = counters() - c0;
    EXPECT_EQ(2u, c.wr(DCXEMU_CNT_OP_WRITE));
    EXPECT_EQ(356u, c.c.bytes);
}

TEST_F(mlx5face_wqe, send_and_send_imm)
{
    counters c0;
    for (int k = 0; k < 4; k++) {
        ASSERT_EQ(0, t.post_recv(100 + k, 4096 * k, 4096));
    }
    std::vector<char> data = dcx_test::data_vector(40, 3);
    dcx_test::fill_data(i.mem.ptr(), 300, 4);

    auto *w = posted(
            [&] { return i.send_inline(1, data.data(), 40, false, 0); });
    EXPECT_EQ(MLX5_OPCODE_SEND, w->opcode);
    EXPECT_FALSE(w->has_raddr);
    EXPECT_EQ((16 + 48 + 48) / 16, w->ds);
    expect_inline(w, data);
    done();

    w = posted([&] { return i.send_inline(2, data.data(), 40, true, 0xabcd); });
    EXPECT_EQ(MLX5_OPCODE_SEND_IMM, w->opcode);
    EXPECT_EQ(htobe32(0xabcd), w->imm);
    expect_inline(w, data);
    done();

    w = posted([&] { return i.send(3, 0, 300, false, 0); });
    EXPECT_EQ(MLX5_OPCODE_SEND, w->opcode);
    EXPECT_EQ(5, w->ds);
    expect_sge(w, 0, 300);
    done();

    w = posted([&] { return i.send(4, 0, 300, true, 0x12345678); });
    EXPECT_EQ(MLX5_OPCODE_SEND_IMM, w->opcode);
    EXPECT_EQ(htobe32(0x12345678), w->imm);
    expect_sge(w, 0, 300);
    done();

    /* what arrived, in order, in the SRQ's buffers */
    const uint32_t lens[] = { 40, 40, 300, 300 };
    for (int k = 0; k < 4; k++) {
        completion r;
        ASSERT_TRUE(poll_legacy(t.cq, &r));
        EXPECT_EQ(IBV_WC_SUCCESS, r.status);
        EXPECT_EQ(100u + k, r.wr_id);
        EXPECT_EQ(lens[k], r.byte_len);
        EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(4096 * k), lens[k],
                                           k < 2 ? 3 : 4));
    }
    counters c = counters() - c0;
    EXPECT_EQ(2u, c.wr(DCXEMU_CNT_OP_SEND));
    EXPECT_EQ(2u, c.wr(DCXEMU_CNT_OP_SEND_IMM));
    EXPECT_EQ(4u, c.c.recv_cqes);
}

TEST_F(mlx5face_wqe, read_and_atomics)
{
    counters c0;
    dcx_test::fill_data(t.mem.ptr(512), 128, 5);
    auto *w = posted(
            [&] { return i.read(1, 0, 128, t.mem.mr->rkey, t.mem.addr(512)); });
    EXPECT_EQ(MLX5_OPCODE_RDMA_READ, w->opcode);
    EXPECT_EQ(t.mem.addr(512), w->raddr);
    EXPECT_EQ(t.mem.mr->rkey, w->rkey);
    expect_sge(w, 0, 128);
    completion c = done();
    EXPECT_EQ(IBV_WC_RDMA_READ, c.opcode);
    EXPECT_EQ(128u, c.byte_len);
    EXPECT_EQ(-1, dcx_test::check_data(i.mem.ptr(), 128, 5));

    t.mem.word(8) = 41;
    w             = posted([&] {
        return i.cswap(2, 16, t.mem.mr->rkey, t.mem.addr(8), 41, 0x77);
    });
    EXPECT_EQ(MLX5_OPCODE_ATOMIC_CS, w->opcode);
    EXPECT_EQ(7, w->ds); /* ctrl, datagram, raddr, atomic, data */
    EXPECT_TRUE(w->has_atomic);
    EXPECT_FALSE(w->masked);
    EXPECT_EQ(8u, w->atomic_size);
    EXPECT_EQ(0x77u, w->swap_add);
    EXPECT_EQ(41u, w->compare);
    EXPECT_EQ(t.mem.addr(8), w->raddr);
    expect_sge(w, 16, 8);
    c = done();
    EXPECT_EQ(IBV_WC_COMP_SWAP, c.opcode);
    EXPECT_EQ(8u, c.byte_len);
    EXPECT_EQ(0x77u, t.mem.word(8));

    w = posted([&] {
        return i.fadd(3, 24, t.mem.mr->rkey, t.mem.addr(8), 0x100);
    });
    EXPECT_EQ(MLX5_OPCODE_ATOMIC_FA, w->opcode);
    EXPECT_EQ(0x100u, w->swap_add);
    EXPECT_EQ(t.mem.mr->rkey, w->rkey);
    expect_sge(w, 24, 8);
    c = done();
    EXPECT_EQ(IBV_WC_FETCH_ADD, c.opcode);
    EXPECT_EQ(0x177u, t.mem.word(8));

    counters n = counters() - c0;
    EXPECT_EQ(1u, n.wr(DCXEMU_CNT_OP_READ));
    EXPECT_EQ(1u, n.wr(DCXEMU_CNT_OP_ATOMIC_CS));
    EXPECT_EQ(1u, n.wr(DCXEMU_CNT_OP_ATOMIC_FA));
}

/* mlx5dv_wr_raw_wqe: libmlx5 copies the WQE and writes only its own index
 * into it; the device executes the masked fetch-add. */
TEST_F(mlx5face_wqe, raw_masked_fetch_add)
{
    counters c0;
    t.mem.word(0) = 0x00000005ffffffffull;
    raw_fadd r    = make_raw_fadd(i.qp->qp_num, true, DC_KEY, t.dctn(), d.lid,
                                  t.mem.addr(0), t.mem.mr->rkey, 1,
                                  0x8000000080000000ull, i.mem.mr->lkey,
                                  i.mem.addr(32));
    uint16_t pi0  = v.pi();
    auto *w       = posted([&] { return i.raw(9, r.b); });
    EXPECT_EQ(MLX5_OPCODE_ATOMIC_MASKED_FA, w->opcode);
    EXPECT_EQ(0x09, w->opmod);
    EXPECT_EQ(r.size / 16, w->ds);
    EXPECT_TRUE(w->masked);
    EXPECT_EQ(8u, w->atomic_size);
    EXPECT_EQ(1u, w->swap_add);
    EXPECT_EQ(0x8000000080000000ull, w->compare);
    EXPECT_EQ(t.mem.addr(0), w->raddr);
    expect_sge(w, 32, 8);
    /* byte for byte but the index */
    const uint8_t *sq = (const uint8_t *)v.dv.sq.buf + (pi0 & v.mask()) * 64u;
    EXPECT_EQ(0, memcmp(sq + 4, r.b + 4, r.size - 4));
    EXPECT_EQ(0, memcmp(sq, r.b, 1)); /* opmod */
    EXPECT_EQ(r.b[3], sq[3]); /* opcode */

    completion c = done();
    EXPECT_EQ(9u, c.wr_id);
    EXPECT_EQ((int)MLX5DV_WC_RAW_WQE, c.opcode);
    /* two 32-bit fields: the low one wraps without carrying */
    EXPECT_EQ(0x0000000500000000ull, t.mem.word(0));
    EXPECT_EQ(0x00000005ffffffffull, i.mem.word(32));
    EXPECT_EQ(1u, (counters() - c0).wr(DCXEMU_CNT_OP_ATOMIC_FA));
}

/* A WQE that starts in the last basic block and ends at the queue's start:
 * libmlx5 wraps it, and so does the device. */
TEST_F(mlx5face_wqe, wraps_the_end_of_the_queue)
{
    std::vector<char> fill = dcx_test::data_vector(100, 6);
    uint64_t id            = 1;
    /* 3-block inline writes to reach an odd block, 2-block ones after */
    while ((v.pi() & v.mask()) != v.mask()) {
        uint32_t left = v.mask() - (v.pi() & v.mask());
        int ret       = (left & 1) ? i.write_inline(id, fill.data(), 100,
                                                    t.mem.mr->rkey, t.mem.addr(0)) :
                                     i.write(id, 0, 8, t.mem.mr->rkey, t.mem.addr(0));
        ASSERT_EQ(0, ret);
        ASSERT_EQ(id, done().wr_id);
        id++;
    }
    std::vector<char> data = dcx_test::data_vector(100, 7);
    counters c0;
    auto *w = posted([&] {
        return i.write_inline(id, data.data(), 100, t.mem.mr->rkey,
                              t.mem.addr(2048));
    });
    EXPECT_EQ(3u, w->num_wqebb);
    EXPECT_EQ(2, (uint16_t)(v.pi() & v.mask())); /* it ended at block 2 */
    EXPECT_EQ(MLX5_OPCODE_RDMA_WRITE, w->opcode);
    EXPECT_EQ(t.mem.addr(2048), w->raddr);
    expect_inline(w, data);
    EXPECT_EQ(id, done().wr_id);
    EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(2048), 100, 7));
    counters c = counters() - c0;
    EXPECT_EQ(1u, c.wr(DCXEMU_CNT_OP_WRITE));
    EXPECT_EQ(100u, c.c.bytes);
}

/* Unsignaled WQEs then a signaled one: one CQE, and libmlx5 retires all of
 * them by its wqe_counter (the queue can be filled again and again). */
TEST_F(mlx5face_wqe, unsignaled_retired_by_wqe_counter)
{
    counters c0;
    /* an unsignaled WQE asks for no CQE */
    posted([&] { return i.write(0, 0, 64, t.mem.mr->rkey, t.mem.addr(), 0); },
           false);
    for (int round = 0; round < 8; round++) {
        for (int k = 0; k < 7; k++) {
            ASSERT_EQ(0, i.write(k, 64 * k, 64, t.mem.mr->rkey,
                                 t.mem.addr(64 * k), 0));
        }
        ASSERT_EQ(0,
                  i.write(100 + round, 0, 64, t.mem.mr->rkey, t.mem.addr(0)));
        completion c = done();
        EXPECT_EQ(100u + round, c.wr_id);
        EXPECT_EQ(IBV_WC_RDMA_WRITE, c.opcode);
        EXPECT_TRUE(cq_empty(i.cq));
    }
    counters c = counters() - c0;
    EXPECT_EQ(65u, c.wr(DCXEMU_CNT_OP_WRITE));
    EXPECT_EQ(8u, c.c.send_cqes);
}

/* WQEs libmlx5 never writes: a ds of 0 and an unknown opcode.  Each
 * completes with a local QP operation error and its QP goes to ERR; another
 * QP of the same CQ and PD keeps working. */
TEST_F(mlx5face_wqe, malformed_wqes_complete_in_error)
{
    const struct {
        uint8_t opcode, ds;
    } bad[] = { { MLX5_OPCODE_RDMA_WRITE, 0 }, { 0x3f, 6 } };

    for (const auto &b : bad) {
        SCOPED_TRACE("opcode " + std::to_string(b.opcode) + " ds " +
                     std::to_string(b.ds));
        initiator other;
        ASSERT_TRUE(other.create(d, d.lid));
        other.dctn = t.dctn();

        counters c0;
        ring_own_wqe(b.opcode, b.ds);
        completion c;
        if (doorbell_synchronous()) { /* the store itself completed it */
            ASSERT_TRUE(cqe_now(i.cq, &c));
            EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, c.status);
        } else {
            c = done(IBV_WC_LOC_QP_OP_ERR);
        }
        EXPECT_EQ(i.qp->qp_num, c.qp_num);
        ibv_qp_attr qa;
        ibv_qp_init_attr qi;
        ASSERT_EQ(0, ibv_query_qp(i.qp, &qa, IBV_QP_STATE, &qi));
        EXPECT_EQ(IBV_QPS_ERR, qa.qp_state);
        EXPECT_EQ(0u, (counters() - c0).wr(DCXEMU_CNT_OP_WRITE));

        dcx_test::fill_data(other.mem.ptr(), 64, 8);
        ASSERT_EQ(0, other.write(5, 0, 64, t.mem.mr->rkey, t.mem.addr(256)));
        completion oc;
        ASSERT_TRUE(poll_legacy(other.cq, &oc));
        EXPECT_EQ(IBV_WC_SUCCESS, oc.status);
        EXPECT_EQ(5u, oc.wr_id);
        EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(256), 64, 8));
        EXPECT_EQ(1u, (counters() - c0).wr(DCXEMU_CNT_OP_WRITE));
        other.destroy();

        /* a fresh DCI for the next case: this one is in error */
        i.destroy();
        ASSERT_TRUE(i.create(d, d.lid, 32, 10, 3, true));
        i.dctn = t.dctn();
        ASSERT_TRUE(v.init(i.qp));
    }
}

/* mlx5 completes in send-queue order: a malformed WQE behind a WQE the
 * device still holds (here a write delayed on its way to the DCT) completes
 * after it, and the write is not flushed by it: it executes. */
TEST_F(mlx5face_wqe, malformed_wqe_completes_after_older_wqes)
{
    counters c0;
    dcx_test::fill_data(i.mem.ptr(), 64, 11);
    ASSERT_EQ(0, dcxemu_fault_inject(DCXEMU_FAULT_DELAY, t.dctn(), 200000));
    ASSERT_EQ(0, i.write(21, 0, 64, t.mem.mr->rkey, t.mem.addr(128)));
    ring_own_wqe(0x3f, 6);
    completion c;
    ASSERT_TRUE(poll_legacy(i.cq, &c));
    EXPECT_EQ(21u, c.wr_id);
    EXPECT_EQ(IBV_WC_SUCCESS, c.status)
            << ibv_wc_status_str((ibv_wc_status)c.status);
    EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(128), 64, 11));
    ASSERT_TRUE(poll_legacy(i.cq, &c));
    EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, c.status)
            << ibv_wc_status_str((ibv_wc_status)c.status);
    EXPECT_EQ(i.qp->qp_num, c.qp_num);
    EXPECT_TRUE(cq_empty(i.cq));
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(0, ibv_query_qp(i.qp, &qa, IBV_QP_STATE, &qi));
    EXPECT_EQ(IBV_QPS_ERR, qa.qp_state);
    EXPECT_EQ(1u, (counters() - c0).wr(DCXEMU_CNT_OP_WRITE));

    EXPECT_EQ(0, dcxemu_fault_inject(DCXEMU_FAULT_DELAY, t.dctn(), 0));
}

/* Garbage harms nobody: stores anywhere in the UAR page, a doorbell that
 * names no QP, and a doorbell record far ahead of what was written complete
 * the QP's WQEs in error or flush them (at most a CQ overrun), and another
 * QP keeps working. */
TEST_F(mlx5face_wqe, garbage_harms_nobody)
{
    volatile uint64_t *page = (volatile uint64_t *)((uintptr_t)v.dv.bf.reg &
                                                    ~(uintptr_t)4095);
    page[0]                 = 0xdeadbeefdeadbeefull;
    page[0x100 / 8]         = 0x0123456789abcdefull;
    *(volatile uint64_t *)v.dv.bf.reg = htobe64(
            0xffffff00ull); /* QP 0xffffff */

    counters c0;
    uint16_t pi = v.pi();
    memset(v.dv.sq.buf, 0xa5, (size_t)v.dv.sq.wqe_cnt * v.dv.sq.stride);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    v.dv.dbrec[MLX5_SND_DBR] = htobe32((uint16_t)(pi + 1000));
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *(volatile uint64_t *)v.dv.bf.reg = htobe64((uint64_t)i.qp->qp_num << 8);

    completion c;
    ASSERT_TRUE(poll_legacy(i.cq, &c));
    EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, c.status);
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(0, ibv_query_qp(i.qp, &qa, IBV_QP_STATE, &qi));
    EXPECT_EQ(IBV_QPS_ERR, qa.qp_state);
    EXPECT_EQ(0u, (counters() - c0).wr(DCXEMU_CNT_OP_WRITE));

    initiator other;
    ASSERT_TRUE(other.create(d, d.lid));
    other.dctn = t.dctn();
    dcx_test::fill_data(other.mem.ptr(), 64, 9);
    ASSERT_EQ(0, other.write(7, 0, 64, t.mem.mr->rkey, t.mem.addr(512)));
    completion oc;
    ASSERT_TRUE(poll_legacy(other.cq, &oc));
    EXPECT_EQ(IBV_WC_SUCCESS, oc.status);
    EXPECT_EQ(-1, dcx_test::check_data(t.mem.ptr(512), 64, 9));
    other.destroy();
}

/* The doorbell is the store that runs the device: the UAR page is trapped
 * (no access), and a WQE to a DCT of this process has its CQE when the
 * store returns, long before the face's millisecond scan. */
TEST_F(mlx5face_wqe, doorbell_store_runs_the_device)
{
    if (!doorbell_synchronous()) {
        GTEST_SKIP() << "doorbell stores are not trapped or execution is "
                        "deferred";
    }
    EXPECT_EQ("---", page_perms(v.dv.bf.reg).substr(0, 3));
    counters c0;
    for (uint64_t id = 1; id <= 16; id++) {
        ASSERT_EQ(0, i.write(id, 0, 64, t.mem.mr->rkey, t.mem.addr()));
        completion c;
        ASSERT_TRUE(cqe_now(i.cq, &c)) << "WQE " << id;
        EXPECT_EQ(id, c.wr_id);
        EXPECT_EQ(IBV_WC_SUCCESS, c.status);
    }
    EXPECT_EQ(16u, (counters() - c0).wr(DCXEMU_CNT_OP_WRITE));
}

/* BlueFlame (DCXEMU_MLX5_BF; the mlx5 suite runs these tests with it too):
 * libmlx5's single inline WQEs go whole through the register, alternating
 * its halves, and every copy matches the WQE in the send queue; a producer
 * that rings the half it just used, copies other bytes than the WQE's or
 * stores where no copy goes is counted, never trusted. */
TEST_F(mlx5face_wqe, blueflame_copies_and_producer_bugs)
{
    auto counter = (uint64_t(*)(const char *))dlsym(RTLD_DEFAULT,
                                                    "dcxemu_mlx5_face_counter");
    ASSERT_NE(nullptr, counter);
    if (v.dv.bf.size == 0) {
        GTEST_SKIP() << "no BlueFlame (DCXEMU_MLX5_BF unset)";
    }
    if (!doorbell_synchronous()) {
        GTEST_SKIP() << "doorbell stores are not trapped or execution is "
                        "deferred";
    }
    EXPECT_EQ(256u, v.dv.bf.size);

    uint64_t copies = counter("bf_copies"), same = counter("bf_same_half");
    uint64_t mism = counter("bf_mismatches"), errs = counter("bf_errors");
    for (uint64_t id = 1; id <= 16; id++) {
        uint64_t data = 0x1122334455667700ull | id;
        ASSERT_EQ(0, i.write_inline(id, &data, sizeof(data), t.mem.mr->rkey,
                                    t.mem.addr()));
        completion c;
        ASSERT_TRUE(cqe_now(i.cq, &c)) << "WQE " << id;
        EXPECT_EQ(IBV_WC_SUCCESS, c.status);
    }
    EXPECT_EQ(copies + 16, counter("bf_copies"));
    EXPECT_EQ(same, counter("bf_same_half"));
    EXPECT_EQ(mism, counter("bf_mismatches"));
    EXPECT_EQ(errs, counter("bf_errors"));

    /* two doorbells of our own to one half: the second one did not toggle */
    ring_own_wqe(MLX5_OPCODE_NOP, 1);
    ring_own_wqe(MLX5_OPCODE_NOP, 1);
    EXPECT_LE(same + 1, counter("bf_same_half"));

    /* a copy of one basic block unlike the WQE in the queue */
    uint16_t pi = v.pi();
    auto *ctrl  = (mlx5_wqe_ctrl_seg *)((char *)v.dv.sq.buf +
                                       (pi & v.mask()) * 64u);
    uint64_t copy[8];
    memset(ctrl, 0, 64);
    ctrl->opmod_idx_opcode = htobe32((uint32_t)pi << 8 | MLX5_OPCODE_NOP);
    ctrl->qpn_ds           = htobe32(i.qp->qp_num << 8 | 1);
    ctrl->fm_ce_se         = MLX5_WQE_CTRL_CQ_UPDATE;
    memcpy(copy, ctrl, 64);
    copy[7] = 0x5a5a5a5a5a5a5a5aull;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    v.dv.dbrec[MLX5_SND_DBR] = htobe32((uint16_t)(pi + 1));
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    volatile uint64_t *half = (volatile uint64_t *)((char *)v.dv.bf.reg + 256);
    for (unsigned w = 0; w < 8; w++) {
        half[w] = copy[w];
    }
    EXPECT_EQ(mism + 1, counter("bf_mismatches"));

    /* a store over the checked copy with other bytes */
    half[4] = 0x7777777777777777ull;
    EXPECT_EQ(errs + 1, counter("bf_errors"));
}
