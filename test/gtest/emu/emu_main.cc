/* Test main: child-role dispatch, a fresh fabric per run, cleanup of fabric files. */
#include "emu_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <map>

namespace emu {

std::string g_fabric;
static std::vector<std::string> g_fabrics;
static int g_fabric_counter;

static std::map<std::string, child_fn> &children()
{
    static std::map<std::string, child_fn> m;
    return m;
}

child_reg::child_reg(const char *name, child_fn fn)
{
    children()[name] = fn;
}

std::string fresh_fabric()
{
    std::string f = "dcxemu-gtest-" + std::to_string(getpid()) + "-" +
                    std::to_string(++g_fabric_counter);
    g_fabrics.push_back(f);
    return f;
}

uint64_t now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int run_child_main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "--emu-child") != 0) {
        return -1;
    }
    auto it = children().find(argv[2]);
    if (it == children().end()) {
        fprintf(stderr, "unknown child role %s\n", argv[2]);
        return 100;
    }
    alarm(60); /* a child never outlives a broken test for long */
    return it->second(argc - 3, argv + 3);
}

pid_t spawn_io(const std::string &fabric, const std::vector<std::string> &args,
               const std::vector<std::string> &env, int in_fd, int out_fd,
               int err_fd)
{
    std::vector<std::string> a = { "/proc/self/exe", "--emu-child" };
    a.insert(a.end(), args.begin(), args.end());
    pid_t pid = fork();
    if (pid == 0) {
        if ((in_fd >= 0 && dup2(in_fd, 0) < 0) ||
            (out_fd >= 0 && dup2(out_fd, 1) < 0) ||
            (err_fd >= 0 && dup2(err_fd, 2) < 0)) {
            _exit(126);
        }
        std::vector<char *> av;
        for (auto &s : a)
            av.push_back(const_cast<char *>(s.c_str()));
        av.push_back(nullptr);
        setenv("DCXEMU_FABRIC", fabric.c_str(), 1);
        for (auto &e : env)
            putenv(strdup(e.c_str()));
        execv("/proc/self/exe", av.data());
        _exit(127);
    }
    return pid;
}

pid_t spawn(const std::string &fabric, const std::vector<std::string> &args,
            const std::vector<std::string> &env)
{
    return spawn_io(fabric, args, env, -1, -1, -1);
}

int wait_child(pid_t pid, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            return st;
        }
        if (r < 0 || now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
}

bool read_full(int fd, void *buf, size_t len, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    size_t got   = 0;
    while (got < len) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left        = (int)(end - now_ms());
        if ((int64_t)(end - now_ms()) <= 0 || poll(&p, 1, left) <= 0) {
            return false;
        }
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0) {
            return false;
        }
        got += (size_t)n;
    }
    return true;
}

bool write_full(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, (const char *)buf + done, len - done);
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

bool dev::open(int index, int cqe, ibv_comp_channel *ch)
{
    int n             = 0;
    ibv_device **list = dcxemu_ibv_get_device_list(&n);
    if (list == nullptr || index >= n)
        return false;
    ctx = dcxemu_ibv_open_device(list[index]);
    dcxemu_ibv_free_device_list(list);
    if (ctx == nullptr)
        return false;
    ibv_port_attr pa;
    if (dcxemu_ibv_query_port(ctx, 1, &pa) != 0)
        return false;
    lid = pa.lid;
    pd  = dcxemu_ibv_alloc_pd(ctx);
    cq  = dcxemu_ibv_create_cq(ctx, cqe, nullptr, ch, 0);
    return pd != nullptr && cq != nullptr;
}

void dev::close()
{
    if (cq)
        dcxemu_ibv_destroy_cq(cq);
    if (pd)
        dcxemu_ibv_dealloc_pd(pd);
    if (ctx)
        dcxemu_ibv_close_device(ctx);
    cq  = nullptr;
    pd  = nullptr;
    ctx = nullptr;
}

ibv_qp *create_dci(dev &d, uint32_t max_send_wr, uint32_t sge, uint32_t inl,
                   bool send_ops, ibv_cq *cq, int sig_all,
                   const mlx5dv_qp_init_attr *mlx5)
{
    ibv_qp_init_attr_ex a;
    mlx5dv_qp_init_attr dv;
    memset(&a, 0, sizeof(a));
    memset(&dv, 0, sizeof(dv));
    a.qp_type = IBV_QPT_DRIVER;
    a.send_cq = a.recv_cq = cq ? cq : d.cq;
    a.pd                  = d.pd;
    a.sq_sig_all          = sig_all;
    a.cap.max_send_wr     = max_send_wr;
    a.cap.max_send_sge    = sge;
    a.cap.max_inline_data = inl;
    a.comp_mask           = IBV_QP_INIT_ATTR_PD;
    if (send_ops) {
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
                           IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                           IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                           IBV_QP_EX_WITH_RDMA_READ |
                           IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                           IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    }
    dv.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    if (mlx5 != nullptr) {
        dv.comp_mask |= mlx5->comp_mask &
                        (MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS |
                         MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS |
                         MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
        dv.create_flags             = mlx5->create_flags;
        dv.send_ops_flags           = mlx5->send_ops_flags;
        dv.dc_init_attr.dci_streams = mlx5->dc_init_attr.dci_streams;
    }
    return dcxemu_mlx5dv_create_qp(d.ctx, &a, &dv);
}

int dci_to_rts(ibv_qp *qp, uint8_t timeout, uint8_t retry, uint8_t rnr_retry)
{
    ibv_qp_attr a;
    int r;
    memset(&a, 0, sizeof(a));
    a.qp_state   = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num   = 1;
    if ((r = dcxemu_ibv_modify_qp(
                 qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state         = IBV_QPS_RTR;
    a.path_mtu         = IBV_MTU_4096;
    a.ah_attr.port_num = 1;
    if ((r = dcxemu_ibv_modify_qp(qp, &a,
                                  IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = timeout;
    a.retry_cnt     = retry;
    a.rnr_retry     = rnr_retry;
    a.max_rd_atomic = 16;
    a.sq_psn        = 0;
    return dcxemu_ibv_modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_TIMEOUT |
                                        IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                        IBV_QP_MAX_QP_RD_ATOMIC |
                                        IBV_QP_SQ_PSN);
}

bool make_dci(dev &d, dci &out, uint16_t dlid, uint32_t max_send_wr,
              uint8_t timeout, uint8_t retry, uint8_t rnr_retry)
{
    out.qp = create_dci(d, max_send_wr);
    if (!out.qp || dci_to_rts(out.qp, timeout, retry, rnr_retry) != 0)
        return false;
    out.qpx = dcxemu_ibv_qp_to_qp_ex(out.qp);
    out.dv  = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(out.qpx);
    ibv_ah_attr ah;
    memset(&ah, 0, sizeof(ah));
    ah.dlid     = dlid;
    ah.port_num = 1;
    out.ah      = dcxemu_ibv_create_ah(d.pd, &ah);
    return out.qpx && out.dv && out.ah;
}

void destroy_dci(dci &c)
{
    if (c.ah)
        dcxemu_ibv_destroy_ah(c.ah);
    if (c.qp)
        dcxemu_ibv_destroy_qp(c.qp);
    c = dci();
}

ibv_srq *create_srq(dev &d, uint32_t max_wr, uint32_t max_sge)
{
    ibv_srq_init_attr a;
    memset(&a, 0, sizeof(a));
    a.attr.max_wr  = max_wr;
    a.attr.max_sge = max_sge;
    return dcxemu_ibv_create_srq(d.pd, &a);
}

ibv_qp *create_dct(dev &d, ibv_srq *srq, uint64_t key, ibv_cq *cq)
{
    ibv_qp_init_attr_ex a;
    mlx5dv_qp_init_attr dv;
    memset(&a, 0, sizeof(a));
    memset(&dv, 0, sizeof(dv));
    a.qp_type = IBV_QPT_DRIVER;
    a.send_cq = a.recv_cq          = cq ? cq : d.cq;
    a.srq                          = srq;
    a.pd                           = d.pd;
    a.comp_mask                    = IBV_QP_INIT_ATTR_PD;
    dv.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv.dc_init_attr.dct_access_key = key;
    return dcxemu_mlx5dv_create_qp(d.ctx, &a, &dv);
}

int dct_to_rtr(ibv_qp *qp, uint32_t access, uint8_t min_rnr_timer)
{
    ibv_qp_attr a;
    int r;
    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.pkey_index      = 0;
    a.port_num        = 1;
    a.qp_access_flags = access;
    if ((r = dcxemu_ibv_modify_qp(qp, &a,
                                  IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                          IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state         = IBV_QPS_RTR;
    a.path_mtu         = IBV_MTU_4096;
    a.min_rnr_timer    = min_rnr_timer;
    a.ah_attr.port_num = 1;
    return dcxemu_ibv_modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER |
                                        IBV_QP_AV | IBV_QP_PATH_MTU);
}

int post_recv(ibv_srq *srq, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id)
{
    ibv_sge s = { (uintptr_t)buf, len, mr->lkey };
    ibv_recv_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    return ibv_post_srq_recv(srq, &wr, &bad);
}

bool poll_one(ibv_cq *cq, ibv_wc *wc, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n == 1)
            return true;
        if (n < 0 || now_ms() > end)
            return false;
        usleep(50);
    }
}

bool cq_empty_now(ibv_cq *cq)
{
    ibv_wc wc;
    return ibv_poll_cq(cq, 1, &wc) == 0;
}

bool wait_until(const std::function<bool()> &cond, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (!cond()) {
        if (now_ms() > end)
            return false;
        usleep(100);
    }
    return true;
}

uint64_t process_count(size_t field_offset, int dev)
{
    dcxemu_counters c;
    if (dcxemu_counters_read(dev, DCXEMU_SCOPE_PROCESS, &c) != 0)
        return UINT64_MAX;
    return *(const uint64_t *)((const char *)&c + field_offset);
}

bool engine_quiescent(dcxemu_engine_state *st, int timeout_ms)
{
    dcxemu_engine_state s;
    bool ok = wait_until(
            [&] { return dcxemu_engine_state_read(&s) == 0 && s.quiescent; },
            timeout_ms);
    if (st != nullptr)
        *st = s;
    return ok;
}

bool engine_idle(int timeout_ms)
{
    dcxemu_engine_state s;
    return wait_until(
            [&] {
                return dcxemu_engine_state_read(&s) == 0 && s.quiescent &&
                       s.timers == 0;
            },
            timeout_ms);
}

void loopback_test::SetUp()
{
    ASSERT_TRUE(d.open());
    rcq = dcxemu_ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
    ASSERT_NE(rcq, nullptr);
    srq = create_srq(d, 64, 2);
    ASSERT_NE(srq, nullptr);
    dct = create_dct(d, srq, key, rcq);
    ASSERT_NE(dct, nullptr);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    lbuf.assign(1 << 16, 0);
    rbuf.assign(1 << 16, 0);
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    lmr = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(), acc);
    rmr = dcxemu_ibv_reg_mr(d.pd, rbuf.data(), rbuf.size(), acc);
    ASSERT_TRUE(lmr && rmr);
}

void loopback_test::TearDown()
{
    destroy_dci(c);
    if (dct) {
        EXPECT_EQ(dcxemu_ibv_destroy_qp(dct), 0);
    }
    if (srq) {
        EXPECT_EQ(dcxemu_ibv_destroy_srq(srq), 0);
    }
    if (lmr)
        dcxemu_ibv_dereg_mr(lmr);
    if (rmr)
        dcxemu_ibv_dereg_mr(rmr);
    if (rcq) {
        EXPECT_EQ(dcxemu_ibv_destroy_cq(rcq), 0);
    }
    d.close();
}

int post_one(dci &c, wr_op op, uint32_t lkey, void *laddr, uint32_t len,
             uint32_t rkey, uint64_t raddr, uint32_t dctn, uint64_t key,
             uint64_t wr_id, unsigned flags, uint64_t a1, uint64_t a2,
             uint32_t imm)
{
    ibv_wr_start(c.qpx);
    c.qpx->wr_id    = wr_id;
    c.qpx->wr_flags = flags;
    switch (op) {
    case OP_WRITE:
        ibv_wr_rdma_write(c.qpx, rkey, raddr);
        break;
    case OP_READ:
        ibv_wr_rdma_read(c.qpx, rkey, raddr);
        break;
    case OP_SEND:
        ibv_wr_send(c.qpx);
        break;
    case OP_SEND_IMM:
        ibv_wr_send_imm(c.qpx, htonl(imm));
        break;
    case OP_WRITE_IMM:
        ibv_wr_rdma_write_imm(c.qpx, rkey, raddr, htonl(imm));
        break;
    case OP_CSWAP:
        ibv_wr_atomic_cmp_swp(c.qpx, rkey, raddr, a1, a2);
        break;
    case OP_FADD:
        ibv_wr_atomic_fetch_add(c.qpx, rkey, raddr, a1);
        break;
    }
    mlx5dv_wr_set_dc_addr(c.dv, c.ah, dctn, key);
    ibv_wr_set_sge(c.qpx, lkey, (uintptr_t)laddr, len);
    return ibv_wr_complete(c.qpx);
}

} // namespace emu

int main(int argc, char **argv)
{
    int r = emu::run_child_main(argc, argv);
    if (r >= 0) {
        return r;
    }
    /* this process's own fabric: fresh per run, two devices, fast timers */
    emu::g_fabric = emu::fresh_fabric();
    setenv("DCXEMU_FABRIC", emu::g_fabric.c_str(), 1);
    setenv("DCXEMU_NUM_DEVICES", "2", 1);
    setenv("DCXEMU_TIME_SCALE", "0.01", 1);
    setenv("DCXEMU_HEAP_MB", "256", 1);
    ::testing::InitGoogleTest(&argc, argv);
    r = RUN_ALL_TESTS();
    for (auto &f : emu::g_fabrics) {
        shm_unlink(("/" + f).c_str());
    }
    return r;
}
