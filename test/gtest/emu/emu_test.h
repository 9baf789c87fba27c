/* Helpers for the dcxemu device-model tests. */
#ifndef DCXEMU_EMU_TEST_H
#define DCXEMU_EMU_TEST_H

#include "dcxemu.h"

#include <gtest/gtest.h>

#include "../common/test_print.h"

#include <errno.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

namespace emu {

/* Fabric used by this test process (fresh per run; set by main before anything attaches). */
extern std::string g_fabric;
/* A fresh fabric name for a group of child processes. */
std::string fresh_fabric();

uint64_t now_ms();

/* Child processes are new images of this binary (fork + exec): a plain forked child of a
 * process that attached may not use the fabric. */
typedef int (*child_fn)(int argc, char **argv);
struct child_reg {
    child_reg(const char *name, child_fn fn);
};
#define EMU_CHILD(name)                                    \
    static int child_##name(int argc, char **argv);        \
    static emu::child_reg reg_##name(#name, child_##name); \
    static int child_##name(int argc, char **argv)
int run_child_main(int argc,
                   char **argv); /* returns -1 if argv is not a child call */

pid_t spawn(const std::string &fabric, const std::vector<std::string> &args,
            const std::vector<std::string> &env = {});
/* The same with in_fd / out_fd / err_fd (-1: inherit) as the child's stdin / stdout / stderr;
 * every other descriptor of ours is close-on-exec, so a "go" pipe reaches EOF when we close its
 * write end. */
pid_t spawn_io(const std::string &fabric, const std::vector<std::string> &args,
               const std::vector<std::string> &env, int in_fd, int out_fd,
               int err_fd = -1);
/* Wait up to timeout_ms; kills the child on timeout and returns -1. Else the exit status. */
int wait_child(pid_t pid, int timeout_ms);

/* Read exactly len bytes within timeout_ms; false on timeout/EOF. */
bool read_full(int fd, void *buf, size_t len, int timeout_ms);
bool write_full(int fd, const void *buf, size_t len);

/* What a target publishes to initiators. */
struct target_info {
    uint32_t lid;
    uint32_t dctn;
    uint64_t dc_key;
    uint32_t rkey;
    uint32_t pad;
    uint64_t addr;
    uint64_t len;
    int32_t pid;
    uint32_t pad2;
};

/* A device with the objects most tests need. */
struct dev {
    ibv_context *ctx = nullptr;
    ibv_pd *pd       = nullptr;
    ibv_cq *cq       = nullptr;
    uint16_t lid     = 0;
    bool open(int index = 0, int cqe = 256, ibv_comp_channel *ch = nullptr);
    void close();
};

struct dci {
    ibv_qp *qp       = nullptr;
    ibv_qp_ex *qpx   = nullptr;
    mlx5dv_qp_ex *dv = nullptr;
    ibv_ah *ah       = nullptr;
};

/* mlx5: mlx5 send ops (MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS), DCI streams
 * (MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) and create flags
 * (MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) to add, as its comp_mask says. */
ibv_qp *create_dci(dev &d, uint32_t max_send_wr = 64, uint32_t sge = 2,
                   uint32_t inl = 64, bool send_ops = true,
                   ibv_cq *cq = nullptr, int sig_all = 0,
                   const mlx5dv_qp_init_attr *mlx5 = nullptr);
int dci_to_rts(ibv_qp *qp, uint8_t timeout = 10, uint8_t retry = 3,
               uint8_t rnr_retry = 7);
bool make_dci(dev &d, dci &out, uint16_t dlid, uint32_t max_send_wr = 64,
              uint8_t timeout = 10, uint8_t retry = 3, uint8_t rnr_retry = 7);
void destroy_dci(dci &c);

ibv_qp *create_dct(dev &d, ibv_srq *srq, uint64_t key, ibv_cq *cq = nullptr);
int dct_to_rtr(ibv_qp *qp,
               uint32_t access = IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC,
               uint8_t min_rnr_timer = 1);
ibv_srq *create_srq(dev &d, uint32_t max_wr = 64, uint32_t max_sge = 2);
int post_recv(ibv_srq *srq, ibv_mr *mr, void *buf, uint32_t len,
              uint64_t wr_id);

/* Poll exactly one CQE within timeout_ms (legacy poll). */
bool poll_one(ibv_cq *cq, ibv_wc *wc, int timeout_ms = 5000);
/* No CQE now (one poll; a CQE found is consumed).  Only a proof where the caller knows that
 * nothing can still arrive: the work that could write one has completed or provably waits. */
bool cq_empty_now(ibv_cq *cq);

/* Check cond until it holds or timeout_ms passes (a bounded fall-back, not a delay). */
bool wait_until(const std::function<bool()> &cond, int timeout_ms = 10000);

/* This process's counter field (dcxemu_counters) on device dev, process scope. */
uint64_t process_count(size_t field_offset, int dev = 0);
#define PROCESS_COUNT(_field) process_count(offsetof(dcxemu_counters, _field))

/* Wait until this process's engine thread is quiescent (dcxemu_engine_state_read): it has seen
 * every post and ring so far and waits; with it, everything executable has run, and a QP without
 * a timer has nothing scheduled.  *st gets that state.  False on timeout. */
bool engine_quiescent(dcxemu_engine_state *st = nullptr,
                      int timeout_ms          = 10000);
/* The same, and no QP of this process has a timer: nothing is scheduled, so a WR still queued
 * runs only if something new rings the engine. */
bool engine_idle(int timeout_ms = 10000);

/* A DCT with its SRQ and receive CQ and two registered 64 KiB buffers, all in this process,
 * and a DCI slot the test fills (make_dci, or its own attributes). */
struct loopback_test : public ::testing::Test {
    dev d;
    ibv_cq *rcq  = nullptr;
    ibv_srq *srq = nullptr;
    ibv_qp *dct  = nullptr;
    dci c;
    std::vector<char> lbuf, rbuf;
    ibv_mr *lmr = nullptr, *rmr = nullptr;
    uint64_t key;
    explicit loopback_test(uint64_t dc_key) : key(dc_key)
    {
    }
    void SetUp() override;
    void TearDown() override;
    uint64_t raddr(size_t off = 0)
    {
        return (uintptr_t)rbuf.data() + off;
    }
};

/* One DCI WR: op builder + sge + dc addr, then complete.  Returns wr_complete's errno. */
enum wr_op {
    OP_WRITE,
    OP_READ,
    OP_SEND,
    OP_SEND_IMM,
    OP_WRITE_IMM,
    OP_CSWAP,
    OP_FADD
};
int post_one(dci &c, wr_op op, uint32_t lkey, void *laddr, uint32_t len,
             uint32_t rkey, uint64_t raddr, uint32_t dctn, uint64_t key,
             uint64_t wr_id = 1, unsigned flags = IBV_SEND_SIGNALED,
             uint64_t a1 = 0, uint64_t a2 = 0, uint32_t imm = 0);

} // namespace emu

#endif
