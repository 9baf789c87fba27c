/* The mlx5 face's DEVX and UMR, through unmodified libibverbs and libmlx5:
 * run with the face preloaded (LD_PRELOAD=libdcxemu_mlx5.so.0, a fabric of
 * its own in DCXEMU_FABRIC).  It checks
 *  - the ioctl() framing: core objects answer ENOTTY, malformed DEVX
 *    commands EINVAL, an unknown mandatory attribute EPROTONOSUPPORT;
 *  - mlx5dv_devx_general_cmd: QUERY_HCA_CAP of the general and atomic pages
 *    gives the model's capabilities, another command the firmware's status;
 *  - DEVX the face does not serve (UMEM, EQN, other objects): EOPNOTSUPP;
 *  - mlx5dv_create_mkey, then UMR on an RC QP (mlx5dv_wr_mr_list and
 *    mlx5dv_wr_mr_interleaved), RDMA write and read from a DCI to a DCT
 *    through the indirect key, invalidation, destroy.
 * Prints one line per check and "face_devx: PASS" at the end; exits 1 on the
 * first failure.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/mlx5_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#define CHECK(_cond, ...)                                                   \
    do {                                                                    \
        if (!(_cond)) {                                                     \
            fprintf(stderr, "face_devx: FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, " (%s)\n", #_cond);                             \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define DEVICE    "dcxemu_mlx5_0"
#define DC_KEY    0x1234ull
#define BUF_SIZE  256
#define CAP_QUERY 0x100 /* QUERY_HCA_CAP */
#define MBOX_OUT  (16 + 4096) /* header and a capability page */

/* ---- PRM mailboxes */

static uint32_t prm_get(const uint8_t *base, unsigned off, unsigned bits)
{
    const uint8_t *p = base + off / 32 * 4;
    uint32_t dw      = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                  (uint32_t)p[2] << 8 | p[3];
    uint32_t mask = bits == 32 ? UINT32_MAX : (1u << bits) - 1;
    return (dw >> (32 - off % 32 - bits)) & mask;
}

static int query_cap(struct ibv_context *ctx, unsigned page, uint8_t *out)
{
    uint8_t in[16] = { CAP_QUERY >> 8, CAP_QUERY & 0xff };
    in[7] = (uint8_t)(page << 1 | 1); /* op_mod: page, current values */
    memset(out, 0xa5, MBOX_OUT);
    return mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, MBOX_OUT);
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v != NULL ? atoi(v) : dflt;
}

static void test_hca_caps(struct ibv_context *ctx)
{
    static uint8_t out[MBOX_OUT];
    uint8_t in[16] = { 0x09, 0x99 }; /* no such command */
    int ra         = env_int("DCXEMU_LOG_MAX_RA_DC", 4);
    int ext        = env_int("DCXEMU_EXT_ATOMICS", 1);
    int ret;
    CHECK((ret = query_cap(ctx, 0, out)) == 0, "general caps: %d", ret);
    CHECK(out[0] == 0, "status 0x%x", out[0]);
    CHECK(prm_get(out + 16, 0x12a, 6) == (uint32_t)ra, "log_max_ra_req_dc");
    CHECK(prm_get(out + 16, 0x13a, 6) == (uint32_t)ra, "log_max_ra_res_dc");
    CHECK(prm_get(out + 16, 0x14a, 6) == 4, "log_max_ra_req_qp");
    CHECK((ret = query_cap(ctx, 3, out)) == 0, "atomic caps: %d", ret);
    CHECK(prm_get(out + 16, 0x90, 16) == (ext ? 0xfu : 0x3u),
          "atomic_operations 0x%x", prm_get(out + 16, 0x90, 16));
    CHECK(prm_get(out + 16, 0xd0, 16) == 0xc, "atomic_size_dc");
    printf("face_devx: QUERY_HCA_CAP: log_max_ra_*_dc %d, atomic operations "
           "0x%x, DC sizes 0x%x\n",
           ra, prm_get(out + 16, 0x90, 16), prm_get(out + 16, 0xd0, 16));
    ret = mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, 16);
    CHECK(ret == EREMOTEIO && out[0] == 0x02, "bad opcode: %d status 0x%x", ret,
          out[0]);
    printf("face_devx: unknown command: EREMOTEIO, status BAD_OP\n");
}

/* ---- the ioctl() framing, by hand */

struct cmd {
    struct ib_uverbs_ioctl_hdr hdr;
    struct ib_uverbs_attr attrs[3];
};

static int raw_ioctl(struct ibv_context *ctx, struct cmd *c, unsigned nattrs)
{
    c->hdr.num_attrs = (uint16_t)nattrs;
    c->hdr.length = (uint16_t)(sizeof(c->hdr) + nattrs * sizeof(c->attrs[0]));
    c->hdr.driver_id = RDMA_DRIVER_MLX5;
    return ioctl(ctx->cmd_fd, RDMA_VERBS_IOCTL, &c->hdr) == 0 ? 0 : errno;
}

static void devx_other_cmd(struct cmd *c, const void *in, uint8_t *out)
{
    memset(c, 0, sizeof(*c));
    c->hdr.object_id    = MLX5_IB_OBJECT_DEVX;
    c->hdr.method_id    = MLX5_IB_METHOD_DEVX_OTHER;
    c->attrs[0].attr_id = MLX5_IB_ATTR_DEVX_OTHER_CMD_IN;
    c->attrs[0].len     = 16;
    c->attrs[0].data    = (uintptr_t)in;
    c->attrs[0].flags   = UVERBS_ATTR_F_MANDATORY;
    c->attrs[1].attr_id = MLX5_IB_ATTR_DEVX_OTHER_CMD_OUT;
    c->attrs[1].len     = MBOX_OUT;
    c->attrs[1].data    = (uintptr_t)out;
    c->attrs[1].flags   = UVERBS_ATTR_F_MANDATORY;
}

static void test_framing(struct ibv_context *ctx)
{
    static uint8_t out[MBOX_OUT];
    uint8_t in[16] = { CAP_QUERY >> 8, CAP_QUERY & 0xff, 0, 0, 0, 0, 0, 1 };
    struct cmd c;
    memset(&c, 0, sizeof(c));
    c.hdr.object_id = UVERBS_OBJECT_DEVICE;
    c.hdr.method_id = UVERBS_METHOD_INVOKE_WRITE;
    CHECK(raw_ioctl(ctx, &c, 0) == ENOTTY, "a core method");
    CHECK(ioctl(ctx->cmd_fd, 0x5401 /* TCGETS */, out) == -1 && errno == ENOTTY,
          "another request");
    devx_other_cmd(&c, in, out);
    CHECK(raw_ioctl(ctx, &c, 2) == 0, "a well-formed DEVX OTHER");
    CHECK(c.attrs[1].flags & UVERBS_ATTR_F_VALID_OUTPUT, "output flagged");
    devx_other_cmd(&c, in, out);
    c.attrs[0].len = 8; /* shorter than a mailbox header */
    CHECK(raw_ioctl(ctx, &c, 2) == EINVAL, "a short input");
    devx_other_cmd(&c, in, out);
    CHECK(raw_ioctl(ctx, &c, 1) == EINVAL, "a mandatory attribute missing");
    devx_other_cmd(&c, in, out);
    c.attrs[2] = c.attrs[0];
    CHECK(raw_ioctl(ctx, &c, 3) == EINVAL, "an attribute twice");
    devx_other_cmd(&c, in, out);
    c.attrs[2].attr_id = 0x1fff;
    c.attrs[2].flags   = UVERBS_ATTR_F_MANDATORY;
    CHECK(raw_ioctl(ctx, &c, 3) == EPROTONOSUPPORT, "unknown, mandatory");
    c.attrs[2].flags = 0;
    CHECK(raw_ioctl(ctx, &c, 3) == 0, "unknown, optional: ignored");
    memset(&c, 0, sizeof(c));
    c.hdr.object_id    = MLX5_IB_OBJECT_DEVX_OBJ;
    c.hdr.method_id    = MLX5_IB_METHOD_DEVX_OBJ_DESTROY;
    c.attrs[0].attr_id = MLX5_IB_ATTR_DEVX_OBJ_DESTROY_HANDLE;
    c.attrs[0].data    = 9999;
    CHECK(raw_ioctl(ctx, &c, 1) == ENOENT, "destroy of no object");
    devx_other_cmd(&c, in, out);
    c.hdr.length = 4; /* the header claims less than it holds */
    CHECK(ioctl(ctx->cmd_fd, RDMA_VERBS_IOCTL, &c.hdr) == -1 && errno == EINVAL,
          "a short header");
    printf("face_devx: ioctl framing: ENOTTY for core methods, EINVAL and "
           "EPROTONOSUPPORT for malformed DEVX commands\n");
}

/* ---- what the face does not serve */

static void test_unsupported(struct ibv_context *ctx)
{
    uint8_t in[16] = { 0x04, 0x00 }, out[16]; /* CREATE_CQ */
    static char buf[4096] __attribute__((aligned(4096)));
    uint32_t eqn;
    errno = 0;
    CHECK(mlx5dv_devx_umem_reg(ctx, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) ==
                          NULL &&
                  errno == EOPNOTSUPP,
          "umem: %d", errno);
    CHECK(mlx5dv_devx_query_eqn(ctx, 0, &eqn) == EOPNOTSUPP, "eqn");
    errno = 0;
    CHECK(mlx5dv_devx_obj_create(ctx, in, sizeof(in), out, sizeof(out)) ==
                          NULL &&
                  errno == EOPNOTSUPP,
          "CREATE_CQ object: %d", errno);
    printf("face_devx: DEVX UMEM, QUERY_EQN, a CQ object: EOPNOTSUPP\n");
}

/* ---- UMR and data through the indirect key */

struct res {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    struct ibv_qp *rc, *dci, *dct;
    struct ibv_ah *ah;
    uint16_t lid;
    uint8_t *local, *remote; /* BUF_SIZE each */
    struct ibv_mr *local_mr, *remote_mr;
};

static struct ibv_wc poll_one(struct res *r)
{
    struct ibv_wc wc;
    int n;
    for (long i = 0; (n = ibv_poll_cq(r->cq, 1, &wc)) == 0; i++) {
        CHECK(i < 100000000L, "no completion");
    }
    CHECK(n == 1, "poll: %d", n);
    return wc;
}

static void rc_create(struct res *r)
{
    struct ibv_qp_init_attr_ex a  = { 0 };
    struct mlx5dv_qp_init_attr dv = { 0 };
    struct ibv_qp_attr m          = { 0 };
    a.qp_type                     = IBV_QPT_RC;
    a.send_cq = a.recv_cq = r->cq;
    a.pd                  = r->pd;
    a.cap.max_send_wr     = 16;
    a.cap.max_send_sge    = 1;
    a.cap.max_inline_data = 128; /* within a 512-byte WQE */
    a.comp_mask       = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags  = IBV_QP_EX_WITH_LOCAL_INV;
    dv.comp_mask      = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    dv.send_ops_flags = MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
                        MLX5DV_QP_EX_WITH_MR_LIST;
    r->rc = mlx5dv_create_qp(r->ctx, &a, &dv);
    CHECK(r->rc != NULL, "RC QP: %s", strerror(errno));
    m.qp_state        = IBV_QPS_INIT;
    m.port_num        = 1;
    m.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    CHECK(ibv_modify_qp(r->rc, &m,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS) == 0,
          "RC INIT");
    m.qp_state           = IBV_QPS_RTR;
    m.path_mtu           = IBV_MTU_1024;
    m.dest_qp_num        = r->rc->qp_num; /* to itself */
    m.ah_attr.dlid       = r->lid;
    m.ah_attr.port_num   = 1;
    m.min_rnr_timer      = 12;
    m.max_dest_rd_atomic = 1;
    CHECK(ibv_modify_qp(r->rc, &m,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC |
                                IBV_QP_MIN_RNR_TIMER) == 0,
          "RC RTR");
    m.qp_state      = IBV_QPS_RTS;
    m.timeout       = 14;
    m.retry_cnt     = 7;
    m.rnr_retry     = 7;
    m.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(r->rc, &m,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC) == 0,
          "RC RTS");
}

static void dct_create(struct res *r)
{
    struct ibv_srq_init_attr sa   = { .attr = { .max_wr = 16, .max_sge = 1 } };
    struct ibv_qp_init_attr_ex a  = { 0 };
    struct mlx5dv_qp_init_attr dv = { 0 };
    struct ibv_qp_attr m          = { 0 };
    r->srq                        = ibv_create_srq(r->pd, &sa);
    CHECK(r->srq != NULL, "SRQ");
    a.qp_type = IBV_QPT_DRIVER;
    a.send_cq = a.recv_cq          = r->cq;
    a.srq                          = r->srq;
    a.pd                           = r->pd;
    a.comp_mask                    = IBV_QP_INIT_ATTR_PD;
    dv.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv.dc_init_attr.dct_access_key = DC_KEY;
    r->dct                         = mlx5dv_create_qp(r->ctx, &a, &dv);
    CHECK(r->dct != NULL, "DCT: %s", strerror(errno));
    m.qp_state        = IBV_QPS_INIT;
    m.port_num        = 1;
    m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    CHECK(ibv_modify_qp(r->dct, &m,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS) == 0,
          "DCT INIT");
    m.qp_state         = IBV_QPS_RTR;
    m.path_mtu         = IBV_MTU_1024;
    m.min_rnr_timer    = 12;
    m.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(r->dct, &m,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                IBV_QP_MIN_RNR_TIMER) == 0,
          "DCT RTR");
}

static void dci_create(struct res *r)
{
    struct ibv_qp_init_attr_ex a  = { 0 };
    struct mlx5dv_qp_init_attr dv = { 0 };
    struct ibv_ah_attr ah         = { .dlid = r->lid, .port_num = 1 };
    struct ibv_qp_attr m          = { 0 };
    a.qp_type                     = IBV_QPT_DRIVER;
    a.send_cq = a.recv_cq = r->cq;
    a.pd                  = r->pd;
    a.cap.max_send_wr     = 16;
    a.cap.max_send_sge    = 1;
    a.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
    dv.comp_mask     = MLX5DV_QP_INIT_ATTR_MASK_DC |
                   MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    dv.send_ops_flags       = MLX5DV_QP_EX_WITH_RAW_WQE; /* test_dci_umr */
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    r->dci                  = mlx5dv_create_qp(r->ctx, &a, &dv);
    CHECK(r->dci != NULL, "DCI: %s", strerror(errno));
    m.qp_state = IBV_QPS_INIT;
    m.port_num = 1;
    CHECK(ibv_modify_qp(r->dci, &m,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == 0,
          "DCI INIT");
    m.qp_state         = IBV_QPS_RTR;
    m.path_mtu         = IBV_MTU_1024;
    m.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(r->dci, &m, IBV_QP_STATE | IBV_QP_PATH_MTU) == 0,
          "DCI RTR");
    m.qp_state      = IBV_QPS_RTS;
    m.timeout       = 14;
    m.retry_cnt     = 7;
    m.rnr_retry     = 7;
    m.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(r->dci, &m,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC) == 0,
          "DCI RTS");
    r->ah = ibv_create_ah(r->pd, &ah);
    CHECK(r->ah != NULL, "AH");
}

static void res_open(struct res *r)
{
    struct ibv_device **list;
    struct mlx5dv_context_attr ca = { .flags = MLX5DV_CONTEXT_FLAGS_DEVX };
    struct ibv_port_attr pa;
    int n;
    memset(r, 0, sizeof(*r));
    list = ibv_get_device_list(&n);
    CHECK(list != NULL && n > 0, "no devices: is the face preloaded?");
    for (int i = 0; i < n && r->ctx == NULL; i++) {
        if (strcmp(ibv_get_device_name(list[i]), DEVICE) == 0) {
            r->ctx = mlx5dv_open_device(list[i], &ca);
        }
    }
    ibv_free_device_list(list);
    CHECK(r->ctx != NULL, "open " DEVICE ": %s", strerror(errno));
    CHECK(ibv_query_port(r->ctx, 1, &pa) == 0, "query_port");
    r->lid = pa.lid;
    r->pd  = ibv_alloc_pd(r->ctx);
    r->cq  = ibv_create_cq(r->ctx, 64, NULL, NULL, 0);
    CHECK(r->pd != NULL && r->cq != NULL, "PD, CQ");
    r->local  = aligned_alloc(64, BUF_SIZE);
    r->remote = aligned_alloc(64, BUF_SIZE);
    CHECK(r->local != NULL && r->remote != NULL, "buffers");
    r->local_mr = ibv_reg_mr(r->pd, r->local, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
    r->remote_mr = ibv_reg_mr(r->pd, r->remote, BUF_SIZE,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                      IBV_ACCESS_REMOTE_READ);
    CHECK(r->local_mr != NULL && r->remote_mr != NULL, "MRs");
}

/* One UMR on the RC QP, built by the caller between start and complete. */
static void umr_start(struct res *r)
{
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(r->rc);
    ibv_wr_start(x);
    x->wr_id    = 7;
    x->wr_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
}

static void umr_end(struct res *r, enum ibv_wc_opcode opcode, const char *what)
{
    struct ibv_wc wc;
    CHECK(ibv_wr_complete(ibv_qp_to_qp_ex(r->rc)) == 0, "%s: post", what);
    wc = poll_one(r);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.opcode == opcode &&
                  wc.qp_num == r->rc->qp_num,
          "%s: status %s opcode %d", what, ibv_wc_status_str(wc.status),
          wc.opcode);
}

/* An RDMA write or read of len bytes at offset off of the indirect key. */
static void dc_rdma(struct res *r, struct mlx5dv_mkey *mkey, int write,
                    uint64_t off, uint32_t len)
{
    struct ibv_qp_ex *x     = ibv_qp_to_qp_ex(r->dci);
    struct mlx5dv_qp_ex *dv = mlx5dv_qp_ex_from_ibv_qp_ex(x);
    struct ibv_wc wc;
    ibv_wr_start(x);
    x->wr_id    = 9;
    x->wr_flags = IBV_SEND_SIGNALED;
    if (write) {
        ibv_wr_rdma_write(x, mkey->rkey, off);
    } else {
        ibv_wr_rdma_read(x, mkey->rkey, off);
    }
    mlx5dv_wr_set_dc_addr(dv, r->ah, r->dct->qp_num, DC_KEY);
    ibv_wr_set_sge(x, r->local_mr->lkey, (uintptr_t)r->local, len);
    CHECK(ibv_wr_complete(x) == 0, "DC post");
    wc = poll_one(r);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 9,
          "DC %s through mkey 0x%x: %s", write ? "write" : "read", mkey->rkey,
          ibv_wc_status_str(wc.status));
}

static const uint32_t umr_access = IBV_ACCESS_LOCAL_WRITE |
                                   IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ;

/* Two pieces of the remote buffer, 16 bytes at 0 and at 64: a write of 32
 * bytes through the key lands in both, a read brings them back. */
static void test_mr_list(struct res *r, struct mlx5dv_mkey *mkey)
{
    struct ibv_sge sge[2] = {
        { (uintptr_t)r->remote, 16, r->remote_mr->lkey },
        { (uintptr_t)r->remote + 64, 16, r->remote_mr->lkey },
    };
    umr_start(r);
    mlx5dv_wr_mr_list(mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_to_qp_ex(r->rc)), mkey,
                      umr_access, 2, sge);
    umr_end(r, IBV_WC_DRIVER1, "mr_list");
    memset(r->remote, 0, BUF_SIZE);
    for (int i = 0; i < 32; i++) {
        r->local[i] = (uint8_t)(i + 1);
    }
    dc_rdma(r, mkey, 1, 0, 32);
    for (int i = 0; i < 16; i++) {
        CHECK(r->remote[i] == i + 1 && r->remote[64 + i] == i + 17,
              "mr_list write: byte %d", i);
    }
    CHECK(r->remote[16] == 0 && r->remote[80] == 0, "mr_list write: beyond");
    memset(r->local, 0, BUF_SIZE);
    dc_rdma(r, mkey, 0, 8, 16);
    for (int i = 0; i < 16; i++) {
        CHECK(r->local[i] == i + 9, "mr_list read: byte %d", i);
    }
    printf("face_devx: UMR mr_list (2 KLMs) on RC QP 0x%x, DC write and read "
           "through mkey 0x%x\n",
           r->rc->qp_num, mkey->rkey);
}

/* A repeat block: two repetitions of (4 bytes of every 8 at 0) and (4 bytes
 * of every 8 at 128), 16 bytes in all. */
static void test_mr_interleaved(struct res *r, struct mlx5dv_mkey *mkey)
{
    struct mlx5dv_mr_interleaved il[2] = {
        { (uintptr_t)r->remote, 4, 4, r->remote_mr->lkey },
        { (uintptr_t)r->remote + 128, 4, 4, r->remote_mr->lkey },
    };
    static const unsigned at[16] = { 0, 1, 2,  3,  128, 129, 130, 131,
                                     8, 9, 10, 11, 136, 137, 138, 139 };
    umr_start(r);
    mlx5dv_wr_mr_interleaved(mlx5dv_qp_ex_from_ibv_qp_ex(
                                     ibv_qp_to_qp_ex(r->rc)),
                             mkey, umr_access, 2, 2, il);
    umr_end(r, IBV_WC_DRIVER1, "mr_interleaved");
    for (int i = 0; i < BUF_SIZE; i++) {
        r->remote[i] = (uint8_t)i;
    }
    memset(r->local, 0, BUF_SIZE);
    dc_rdma(r, mkey, 0, 0, 16);
    for (int i = 0; i < 16; i++) {
        CHECK(r->local[i] == at[i], "interleaved read: byte %d is %u", i,
              r->local[i]);
    }
    memset(r->local, 0xee, 16);
    dc_rdma(r, mkey, 1, 0, 16);
    for (int i = 0; i < 16; i++) {
        CHECK(r->remote[at[i]] == 0xee, "interleaved write: byte %d", i);
    }
    CHECK(r->remote[4] == 4 && r->remote[132] == 132, "interleaved: gaps");
    printf("face_devx: UMR mr_interleaved (repeat 2 x 2 entries), DC read and "
           "write through mkey 0x%x\n",
           mkey->rkey);
}

static void local_inv(struct res *r, struct mlx5dv_mkey *mkey)
{
    umr_start(r);
    ibv_wr_local_inv(ibv_qp_to_qp_ex(r->rc), mkey->lkey);
    umr_end(r, IBV_WC_LOCAL_INV, "local_inv");
}

/* A UMR WQE on a DCI (as a raw WQE: libmlx5 has no UMR builder there)
 * completes in error, and the process lives. */
static void test_dci_umr(struct res *r, struct mlx5dv_mkey *mkey)
{
    struct {
        struct mlx5_wqe_ctrl_seg ctrl;
        struct mlx5_wqe_umr_ctrl_seg umr;
        struct mlx5_wqe_mkey_context_seg mk;
        struct mlx5_wqe_umr_klm_seg klm[4];
    } w;
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(r->dci);
    struct ibv_wc wc;
    memset(&w, 0, sizeof(w));
    w.ctrl.opmod_idx_opcode = htobe32(MLX5_OPCODE_UMR);
    w.ctrl.qpn_ds           = htobe32(r->dci->qp_num << 8 | sizeof(w) / 16);
    w.ctrl.fm_ce_se         = MLX5_WQE_CTRL_CQ_UPDATE;
    w.ctrl.imm              = htobe32(mkey->lkey);
    w.umr.flags             = MLX5_WQE_UMR_CTRL_FLAG_INLINE;
    w.umr.klm_octowords     = htobe16(4);
    w.umr.mkey_mask         = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN);
    w.mk.len                = htobe64(16);
    w.klm[0].byte_count     = htobe32(16);
    w.klm[0].mkey           = htobe32(r->remote_mr->lkey);
    w.klm[0].address        = htobe64((uintptr_t)r->remote);
    ibv_wr_start(x);
    x->wr_id = 11;
    mlx5dv_wr_raw_wqe(mlx5dv_qp_ex_from_ibv_qp_ex(x), &w);
    CHECK(ibv_wr_complete(x) == 0, "raw UMR post");
    wc = poll_one(r);
    CHECK(wc.wr_id == 11 && wc.status == IBV_WC_LOC_QP_OP_ERR,
          "UMR on a DCI: %s", ibv_wc_status_str(wc.status));
    printf("face_devx: a UMR WQE on a DCI: %s\n", ibv_wc_status_str(wc.status));
}

static void test_umr(struct res *r)
{
    struct mlx5dv_mkey_init_attr ma = {
        .pd           = r->pd,
        .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
        .max_entries  = 8,
    };
    struct mlx5dv_mkey *mkey = mlx5dv_create_mkey(&ma);
    CHECK(mkey != NULL, "create_mkey: %s", strerror(errno));
    CHECK(mkey->lkey == mkey->rkey && (mkey->lkey & 0xff) == 0, "mkey 0x%x",
          mkey->lkey);
    printf("face_devx: mlx5dv_create_mkey: key 0x%x, %u entries\n", mkey->lkey,
           ma.max_entries);
    rc_create(r);
    dct_create(r);
    dci_create(r);
    test_mr_list(r, mkey);
    local_inv(r, mkey); /* before the next UMR, as the model insists */
    test_mr_interleaved(r, mkey);
    local_inv(r, mkey);
    CHECK(mlx5dv_destroy_mkey(mkey) == 0, "destroy_mkey");
    printf("face_devx: LOCAL_INV and destroy of the mkey\n");
    /* one left for the close of the device to release */
    mkey = mlx5dv_create_mkey(&ma);
    CHECK(mkey != NULL, "create_mkey: %s", strerror(errno));
    test_dci_umr(r, mkey);
}

static void res_close(struct res *r)
{
    CHECK(ibv_destroy_qp(r->dci) == 0 && ibv_destroy_qp(r->dct) == 0 &&
                  ibv_destroy_qp(r->rc) == 0,
          "destroy QPs");
    CHECK(ibv_destroy_ah(r->ah) == 0 && ibv_destroy_srq(r->srq) == 0 &&
                  ibv_destroy_cq(r->cq) == 0,
          "destroy AH, SRQ, CQ");
    CHECK(ibv_dereg_mr(r->local_mr) == 0 && ibv_dereg_mr(r->remote_mr) == 0,
          "dereg");
    /* the PD and an mkey on it are left to the close, as the kernel's
     * release of the file frees them */
    CHECK(ibv_close_device(r->ctx) == 0, "close");
    free(r->local);
    free(r->remote);
}

int main(void)
{
    struct res r;
    setvbuf(stdout, NULL, _IOLBF, 0);
    res_open(&r);
    test_framing(r.ctx);
    test_hca_caps(r.ctx);
    test_unsupported(r.ctx);
    test_umr(&r);
    res_close(&r);
    printf("face_devx: PASS\n");
    return 0;
}
