/* Helpers of the mlx5 face's suite: the device through unmodified rdma-core
 * (libibverbs + libmlx5, the face preloaded beneath them), and the same verbs
 * through the model's API face for the differential test.  Only rdma-core's
 * public API is used on the face. */
#ifndef DCXEMU_MLX5FACE_TEST_H
#define DCXEMU_MLX5FACE_TEST_H

#include "../common/test_common.h"

#include "dcxemu.h"
#include "mlx5_wqe.h"

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <string>
#include <vector>

namespace mlx5face {

/* The control-path verbs a test needs, through one of the device's two faces:
 * rdma-core's (the mlx5 face) or the model's API.  The data path (ibv_wr_*,
 * ibv_poll_cq, ibv_post_srq_recv) is rdma-core's inline wrappers on both. */
struct verbs {
    const char *name;
    ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(ibv_device **list);
    ibv_context *(*open_device)(ibv_device *dev);
    int (*close_device)(ibv_context *ctx);
    int (*query_port)(ibv_context *ctx, uint8_t port, ibv_port_attr *attr);
    ibv_pd *(*alloc_pd)(ibv_context *ctx);
    int (*dealloc_pd)(ibv_pd *pd);
    ibv_mr *(*reg_mr)(ibv_pd *pd, void *addr, size_t len, int access);
    int (*dereg_mr)(ibv_mr *mr);
    ibv_cq *(*create_cq)(ibv_context *ctx, int cqe, void *cq_ctx,
                         ibv_comp_channel *ch, int vector);
    ibv_cq_ex *(*create_cq_ex)(ibv_context *ctx, ibv_cq_init_attr_ex *attr);
    int (*destroy_cq)(ibv_cq *cq);
    ibv_srq *(*create_srq)(ibv_pd *pd, ibv_srq_init_attr *attr);
    int (*destroy_srq)(ibv_srq *srq);
    ibv_qp *(*create_qp)(ibv_context *ctx, ibv_qp_init_attr_ex *attr,
                         mlx5dv_qp_init_attr *dv);
    int (*modify_qp)(ibv_qp *qp, ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(ibv_qp *qp);
    ibv_qp_ex *(*qp_to_qp_ex)(ibv_qp *qp);
    mlx5dv_qp_ex *(*dv_qp_ex)(ibv_qp_ex *qp);
    ibv_ah *(*create_ah)(ibv_pd *pd, ibv_ah_attr *attr);
    int (*destroy_ah)(ibv_ah *ah);
};

const verbs &face_verbs();
const verbs &model_verbs();

/* The model's counters of device 0, this process; differences of them. */
struct counters {
    dcxemu_counters c;
    counters();
    counters operator-(const counters &o) const;
    uint64_t wr(dcxemu_counter_op op) const
    {
        return c.wr[op];
    }
};

/* Device 0 opened through a face, with a PD. */
struct device {
    const verbs *v   = nullptr;
    ibv_context *ctx = nullptr;
    ibv_pd *pd       = nullptr;
    uint16_t lid     = 0;
    bool open(const verbs &verbs);
    void close();
};

/* Registered memory, filled with zeros. */
struct memory {
    std::vector<char> buf;
    ibv_mr *mr     = nullptr;
    const verbs *v = nullptr;
    bool reg(device &d, size_t len);
    void dereg();
    char *ptr(size_t off = 0)
    {
        return buf.data() + off;
    }
    uint64_t addr(size_t off = 0)
    {
        return (uintptr_t)ptr(off);
    }
    uint64_t &word(size_t off)
    {
        return *(uint64_t *)ptr(off);
    }
};

const int MR_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
const uint64_t DC_KEY = 0x0123456789abcdefull;

/* A DCT with its SRQ and receive CQ (an ibv_cq_ex where the face makes it,
 * so that both poll APIs can read it). */
struct target {
    device *d      = nullptr;
    ibv_cq *cq     = nullptr;
    ibv_cq_ex *cqx = nullptr;
    ibv_srq *srq   = nullptr;
    ibv_qp *dct    = nullptr;
    memory mem;
    bool create(device &dev, size_t len = 65536, uint64_t key = DC_KEY,
                ibv_comp_channel *ch = nullptr, uint32_t create_flags = 0);
    void destroy();
    uint32_t dctn() const
    {
        return dct->qp_num;
    }
    int post_recv(uint64_t wr_id, size_t off, uint32_t len);
};

/* A DCI in RTS with its send CQ and an address handle to the LID. */
struct initiator {
    device *d        = nullptr;
    ibv_cq *cq       = nullptr;
    ibv_cq_ex *cqx   = nullptr;
    ibv_qp *qp       = nullptr;
    ibv_qp_ex *qpx   = nullptr;
    mlx5dv_qp_ex *dv = nullptr;
    ibv_ah *ah       = nullptr;
    memory mem;
    uint32_t dctn = 0;
    uint64_t key  = DC_KEY;
    bool create(device &dev, uint16_t dlid, uint32_t max_send_wr = 64,
                uint8_t timeout = 10, uint8_t retry = 3, bool raw = false,
                ibv_comp_channel *ch = nullptr, size_t len = 65536,
                uint32_t create_flags = 0);
    void destroy();
    /* One WR; wr_flags as ibv_qp_ex takes them.  ibv_wr_complete's errno. */
    int write(uint64_t wr_id, size_t loff, uint32_t len, uint32_t rkey,
              uint64_t raddr, unsigned flags = IBV_SEND_SIGNALED);
    int write_inline(uint64_t wr_id, const void *data, uint32_t len,
                     uint32_t rkey, uint64_t raddr,
                     unsigned flags = IBV_SEND_SIGNALED);
    int read(uint64_t wr_id, size_t loff, uint32_t len, uint32_t rkey,
             uint64_t raddr, unsigned flags = IBV_SEND_SIGNALED);
    int send(uint64_t wr_id, size_t loff, uint32_t len, bool imm,
             uint32_t imm_data, unsigned flags = IBV_SEND_SIGNALED);
    int send_inline(uint64_t wr_id, const void *data, uint32_t len, bool imm,
                    uint32_t imm_data, unsigned flags = IBV_SEND_SIGNALED);
    int cswap(uint64_t wr_id, size_t loff, uint32_t rkey, uint64_t raddr,
              uint64_t compare, uint64_t swap,
              unsigned flags = IBV_SEND_SIGNALED);
    int fadd(uint64_t wr_id, size_t loff, uint32_t rkey, uint64_t raddr,
             uint64_t add, unsigned flags = IBV_SEND_SIGNALED);
    int raw(uint64_t wr_id, const void *wqe);
};

/* The DCI QP's create attributes, as the tests make them; streams: a DCI
 * with these streams, create_flags: these mlx5dv create flags
 * (mlx5dv_create_qp(3)). */
ibv_qp *create_dci(device &d, ibv_cq *cq, uint32_t max_send_wr, bool raw,
                   int sig_all = 0, const mlx5dv_dci_streams *streams = nullptr,
                   uint32_t create_flags = 0);
int dci_to_rts(device &d, ibv_qp *qp, uint8_t timeout = 10, uint8_t retry = 3);
ibv_qp *create_dct(device &d, ibv_cq *cq, ibv_srq *srq, uint64_t key,
                   uint32_t create_flags = 0);
int dct_to_rtr(device &d, ibv_qp *qp);

/* A completion as both poll APIs give it. */
struct completion {
    uint64_t wr_id;
    int status;
    int opcode;
    uint32_t byte_len, imm, src_qp, vendor_err, qp_num;
    unsigned wc_flags;
};
std::vector<uint64_t> completion_msg(const completion &c);
completion msg_completion(const std::vector<uint64_t> &v, size_t at = 0);

/* One completion within the timeout through ibv_poll_cq / through
 * ibv_start_poll + ibv_next_poll and the ibv_wc_read_* readers (one CQE per
 * poll sequence). */
bool poll_legacy(ibv_cq *cq, completion *c, double timeout = 10.0);
bool poll_ex(ibv_cq_ex *cq, completion *c, double timeout = 10.0);
/* n completions, as many per poll sequence as are there (ibv_next_poll). */
bool poll_ex_n(ibv_cq_ex *cq, unsigned n, std::vector<completion> *out,
               double timeout = 10.0);
/* Nothing more on the CQ now. */
bool cq_empty(ibv_cq *cq);

/* The send queue libmlx5 allocated for a QP (mlx5dv_init_obj). */
struct sq_view {
    mlx5dv_qp dv;
    bool init(ibv_qp *qp);
    uint16_t pi() const
    {
        return (uint16_t)be32toh(dv.dbrec[MLX5_SND_DBR]);
    }
    uint32_t mask() const
    {
        return dv.sq.wqe_cnt - 1;
    }
    /* Decode the WQE at basic block pi with the device's decoder. */
    int decode(uint16_t pi, dcxemu_mlx5_wqe *w) const;
};

/* The raw bytes of a masked 64-bit fetch-add on a DCI as UCX lays it out:
 * control, extended datagram, remote address, masked atomic and data
 * segments; 112 bytes. */
struct raw_fadd {
    uint8_t b[128];
    unsigned size;
};
raw_fadd make_raw_fadd(uint32_t qpn, bool signaled, uint64_t dc_key,
                       uint32_t dctn, uint16_t lid, uint64_t raddr,
                       uint32_t rkey, uint64_t add, uint64_t boundary,
                       uint32_t lkey, uint64_t laddr);

} // namespace mlx5face

#endif
