/* The mlx5 face's uverbs command ABI: what the kernel's ib_uverbs does with a
 * write() on /dev/infiniband/uverbsN, for the commands libibverbs and libmlx5
 * send.
 *
 * A legacy command is a header (command, in_words and out_words in 4-byte
 * words, both counting the header's and the driver's part), the core request
 * whose first field is the response's address, then the driver's (mlx5's)
 * request.  An extended command has a second header with the response's
 * address and the driver's sizes, all in 8-byte words.  The core response is
 * written at the address, the driver's right after it.  Every request part is
 * read as the kernel does: a shorter one is zero-filled, a longer one
 * truncated; every response only as far as the caller made room.  This file
 * holds the table of commands, the object table, and the context-wide
 * commands; the queues' commands are in uverbs_queue.c.
 */
#define _GNU_SOURCE
#include "face.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* MLX5_IB_QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT, _OOO_DP (mlx5-abi.h; the latter
 * in rdma-core 55's) */
#define QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT (1u << 3)
#define QUERY_DEV_RESP_FLAGS_OOO_DP       (1u << 4)

/* ---- the object table */

int face_obj_add(struct face_file *f, struct face_obj *o,
                 enum face_obj_type type, uint64_t user_handle)
{
    uint32_t h;
    for (h = 0; h < f->nobjs && f->objs[h] != NULL; h++) {
    }
    if (h == f->cap) {
        uint32_t cap           = f->cap ? 2 * f->cap : 64;
        struct face_obj **objs = realloc(f->objs, cap * sizeof(*objs));
        if (objs == NULL) {
            return ENOMEM;
        }
        memset(objs + f->cap, 0, (cap - f->cap) * sizeof(*objs));
        f->objs = objs;
        f->cap  = cap;
    }
    if (h == f->nobjs) {
        f->nobjs++;
    }
    o->type        = type;
    o->handle      = h;
    o->user_handle = user_handle;
    o->file        = f;
    f->objs[h]     = o;
    return 0;
}

void *
face_obj_get(struct face_file *f, uint32_t handle, enum face_obj_type type)
{
    if (handle >= f->nobjs || f->objs[handle] == NULL ||
        f->objs[handle]->type != type) {
        return NULL;
    }
    return f->objs[handle];
}

void face_obj_del(struct face_file *f, struct face_obj *o)
{
    f->objs[o->handle] = NULL;
}

void face_udata_in(void *dst, size_t dst_len, const void *src, size_t src_len)
{
    memset(dst, 0, dst_len);
    memcpy(dst, src, src_len < dst_len ? src_len : dst_len);
}

void face_resp_out(uint64_t addr, size_t room, const void *src, size_t len)
{
    if (addr != 0 && room != 0) {
        memcpy((void *)(uintptr_t)addr, src, len < room ? len : room);
    }
}

/* ---- context-wide commands */

/* Traced: the libibverbs and libmlx5 this process runs, by path (a test
 * that selects an rdma-core release checks it got that release's). */
static int trace_provider(struct dl_phdr_info *info, size_t size, void *arg)
{
    char *file;
    (void)size;
    if ((info->dlpi_name == NULL) || (info->dlpi_name[0] == '\0')) {
        return 0;
    }
    /* the file, whatever link loaded it (libibverbs loads its provider as
     * libibverbs/libmlx5-rdmavN.so) */
    file = realpath(info->dlpi_name, NULL);
    if ((file != NULL) && (strstr(file, "/libibverbs.so") != NULL ||
                           strstr(file, "/libmlx5.so") != NULL)) {
        face_log("uverbs%d: GET_CONTEXT from %s", *(int *)arg, file);
    }
    free(file);
    return 0;
}

static int cmd_get_context(struct face_file *f, const struct face_cmd *c)
{
    struct mlx5_ib_alloc_ucontext_req_v2 req;
    struct mlx5_ib_alloc_ucontext_resp uresp;
    struct ib_uverbs_get_context_resp resp;
    struct mlx5dv_context_attr attr = { 0 };
    struct dcxemu_port_desc desc;
    struct ibv_device **list;
    struct ibv_context *ctx;
    int n, pfd[2];
    if (f->ctx != NULL) {
        return EINVAL; /* one context per open, as the kernel */
    }
    face_udata_in(&req, sizeof(req), c->udata, c->udata_len);
    if (face_trace) {
        dl_iterate_phdr(trace_provider, &f->dev_index);
    }
    /* a DEVX context (ioctl.c) only when asked, as the kernel's uid */
    f->devx    = !!(req.flags & MLX5_IB_ALLOC_UCTX_DEVX);
    attr.flags = f->devx ? MLX5DV_CONTEXT_FLAGS_DEVX : 0;
    if (dcxemu_port_describe(f->dev_index, &desc) != 0) {
        return ENODEV;
    }
    f->compact_av = desc.compact_av;
    list          = dcxemu_ibv_get_device_list(&n);
    if (list == NULL) {
        return errno ? errno : ENODEV;
    }
    ctx = f->dev_index < n ?
                  dcxemu_mlx5dv_open_device(list[f->dev_index], &attr) :
                  NULL;
    dcxemu_ibv_free_device_list(list);
    if (ctx == NULL) {
        return errno ? errno : ENODEV;
    }
    if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) != 0) {
        int err = errno;
        dcxemu_ibv_close_device(ctx);
        return err;
    }
    /* the reader blocks in ibv_get_async_event unless it asked otherwise */
    fcntl(pfd[0], F_SETFL, fcntl(pfd[0], F_GETFL) & ~O_NONBLOCK);
    f->async_wfd = pfd[1];
    f->async_rfd = pfd[0];
    /* the engine drains the model's events without waiting: the context is
     * published (the engine may look at once) only once it cannot block */
    fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
    __atomic_store_n(&f->ctx, ctx, __ATOMIC_RELEASE);

    memset(&resp, 0, sizeof(resp));
    resp.async_fd         = (uint32_t)pfd[0];
    resp.num_comp_vectors = 1;
    memset(&uresp, 0, sizeof(uresp));
    uresp.qp_tab_size = 1u << 18;
    /* BlueFlame only when asked (DCXEMU_MLX5_BF): else a doorbell is one
     * store, and libmlx5 copies no WQE */
    uresp.bf_reg_size = face_bf_reg_size();
    face_bf_init(f, uresp.bf_reg_size, req.num_low_latency_bfregs);
    uresp.tot_bfregs      = FACE_TOT_BFREGS;
    uresp.cache_line_size = 64;
    uresp.max_sq_desc_sz  = (uint16_t)desc.max_wqe_size;
    uresp.max_rq_desc_sz  = 512;
    uresp.max_send_wqebb  = 32768;
    uresp.max_recv_wr     = 32768;
    uresp.max_srq_recv_wr = 32767;
    uresp.num_ports       = 1;
    uresp.cqe_version     = req.max_cqe_version >= 1 ? 1 : 0;
    uresp.cmds_supp_uhw   = MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE |
                          MLX5_USER_CMDS_SUPP_UHW_CREATE_AH;
    if (desc.mkey_update_tag) {
        uresp.comp_mask |= MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG;
    }
    uresp.response_length = (uint32_t)sizeof(uresp);
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    return 0;
}

static void device_resp(const struct ibv_device_attr *a,
                        struct ib_uverbs_query_device_resp *r)
{
    memset(r, 0, sizeof(*r));
    r->fw_ver                    = (20ull << 32) | (31ull << 16) | 1014;
    r->node_guid                 = a->node_guid;
    r->sys_image_guid            = a->sys_image_guid;
    r->max_mr_size               = a->max_mr_size;
    r->page_size_cap             = a->page_size_cap;
    r->vendor_id                 = a->vendor_id;
    r->vendor_part_id            = a->vendor_part_id;
    r->hw_ver                    = a->hw_ver;
    r->max_qp                    = (uint32_t)a->max_qp;
    r->max_qp_wr                 = (uint32_t)a->max_qp_wr;
    r->device_cap_flags          = a->device_cap_flags;
    r->max_sge                   = (uint32_t)a->max_sge;
    r->max_sge_rd                = (uint32_t)a->max_sge_rd;
    r->max_cq                    = (uint32_t)a->max_cq;
    r->max_cqe                   = (uint32_t)a->max_cqe;
    r->max_mr                    = (uint32_t)a->max_mr;
    r->max_pd                    = (uint32_t)a->max_pd;
    r->max_qp_rd_atom            = (uint32_t)a->max_qp_rd_atom;
    r->max_ee_rd_atom            = (uint32_t)a->max_ee_rd_atom;
    r->max_res_rd_atom           = (uint32_t)a->max_res_rd_atom;
    r->max_qp_init_rd_atom       = (uint32_t)a->max_qp_init_rd_atom;
    r->max_ee_init_rd_atom       = (uint32_t)a->max_ee_init_rd_atom;
    r->atomic_cap                = a->atomic_cap;
    r->max_ee                    = (uint32_t)a->max_ee;
    r->max_rdd                   = (uint32_t)a->max_rdd;
    r->max_mw                    = (uint32_t)a->max_mw;
    r->max_raw_ipv6_qp           = (uint32_t)a->max_raw_ipv6_qp;
    r->max_raw_ethy_qp           = (uint32_t)a->max_raw_ethy_qp;
    r->max_mcast_grp             = (uint32_t)a->max_mcast_grp;
    r->max_mcast_qp_attach       = (uint32_t)a->max_mcast_qp_attach;
    r->max_total_mcast_qp_attach = (uint32_t)a->max_total_mcast_qp_attach;
    r->max_ah                    = (uint32_t)a->max_ah;
    r->max_fmr                   = (uint32_t)a->max_fmr;
    r->max_map_per_fmr           = (uint32_t)a->max_map_per_fmr;
    r->max_srq                   = (uint32_t)a->max_srq;
    r->max_srq_wr                = (uint32_t)a->max_srq_wr;
    r->max_srq_sge               = (uint32_t)a->max_srq_sge;
    r->max_pkeys                 = a->max_pkeys;
    r->local_ca_ack_delay        = a->local_ca_ack_delay;
    r->phys_port_cnt             = a->phys_port_cnt;
}

static int cmd_query_device(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_query_device_resp resp;
    struct ibv_device_attr a;
    int err;
    if (f->ctx == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_ibv_query_device(f->ctx, &a)) != 0) {
        return err;
    }
    device_resp(&a, &resp);
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

static int cmd_ex_query_device(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_ex_query_device_resp resp;
    struct mlx5_ib_query_device_resp uresp;
    struct dcxemu_mlx5dv_context_ooo dvx;
    struct mlx5dv_context dv;
    struct ibv_device_attr a;
    int err;
    if (f->ctx == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_ibv_query_device(f->ctx, &a)) != 0) {
        return err;
    }
    memset(&resp, 0, sizeof(resp));
    device_resp(&a, &resp.base);
    resp.response_length = (uint32_t)(c->resp_len < sizeof(resp) ?
                                              c->resp_len :
                                              sizeof(resp));
    memset(&uresp, 0, sizeof(uresp));
    /* DCTs scatter receives of up to 32 bytes into 64-byte CQEs, as
     * ConnectX does (MLX5_IB_QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT) */
    uresp.flags = QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT;
    /* libmlx5 keeps the DCI stream caps it checks mlx5dv_create_qp against */
    dv.comp_mask = MLX5DV_CONTEXT_MASK_DCI_STREAMS;
    if (dcxemu_mlx5dv_query_device(f->ctx, &dv) == 0 &&
        (dv.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS)) {
        uresp.dci_streams_caps.max_log_num_concurent =
                dv.dci_streams_caps.max_log_num_concurent;
        uresp.dci_streams_caps.max_log_num_errored =
                dv.dci_streams_caps.max_log_num_errored;
    }
    /* out-of-order data placement: libmlx5 55 reads which QP types have it
     * from DEVX QUERY_HCA_CAP (dp_ordering_ooo_all_*), only with this flag */
    memset(&dvx, 0, sizeof(dvx));
    dvx.base.comp_mask = DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS;
    if (dcxemu_mlx5dv_query_device(f->ctx, &dvx.base) == 0 &&
        (dvx.base.comp_mask & DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS)) {
        uresp.flags |= QUERY_DEV_RESP_FLAGS_OOO_DP;
    }
    uresp.response_length = (uint32_t)(c->uresp_len < sizeof(uresp) ?
                                               c->uresp_len :
                                               sizeof(uresp));
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    return 0;
}

static int cmd_query_port(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_query_port req;
    struct ib_uverbs_query_port_resp resp;
    struct ibv_port_attr a;
    int err;
    if (f->ctx == NULL) {
        return EINVAL;
    }
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    if ((err = dcxemu_ibv_query_port(f->ctx, req.port_num, &a)) != 0) {
        return err;
    }
    memset(&resp, 0, sizeof(resp));
    resp.port_cap_flags  = a.port_cap_flags;
    resp.max_msg_sz      = a.max_msg_sz;
    resp.bad_pkey_cntr   = a.bad_pkey_cntr;
    resp.qkey_viol_cntr  = a.qkey_viol_cntr;
    resp.gid_tbl_len     = (uint32_t)a.gid_tbl_len;
    resp.pkey_tbl_len    = a.pkey_tbl_len;
    resp.lid             = a.lid;
    resp.sm_lid          = a.sm_lid;
    resp.state           = a.state;
    resp.max_mtu         = a.max_mtu;
    resp.active_mtu      = a.active_mtu;
    resp.lmc             = a.lmc;
    resp.max_vl_num      = a.max_vl_num;
    resp.sm_sl           = a.sm_sl;
    resp.subnet_timeout  = a.subnet_timeout;
    resp.init_type_reply = a.init_type_reply;
    resp.active_width    = a.active_width;
    resp.active_speed    = a.active_speed;
    resp.phys_state      = a.phys_state;
    resp.link_layer      = a.link_layer;
    resp.flags           = (uint8_t)a.flags; /* IB_UVERBS_QPF_GRH_REQUIRED */
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

static int face_port_is_eth(struct face_file *f)
{
    struct ibv_port_attr a;
    return (dcxemu_ibv_query_port(f->ctx, 1, &a) == 0) &&
           (a.link_layer == IBV_LINK_LAYER_ETHERNET);
}

static int cmd_alloc_pd(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_alloc_pd_resp resp;
    struct mlx5_ib_alloc_pd_resp uresp;
    struct face_pd *pd;
    int err;
    if (f->ctx == NULL) {
        return EINVAL;
    }
    pd = calloc(1, sizeof(*pd));
    if (pd == NULL) {
        return ENOMEM;
    }
    pthread_mutex_init(&pd->ah_lock, NULL);
    pd->pd = dcxemu_ibv_alloc_pd(f->ctx);
    if (pd->pd == NULL) {
        err = errno ? errno : ENOMEM;
        goto err_free;
    }
    pd->eth = face_port_is_eth(f);
    if ((err = face_obj_add(f, &pd->obj, FACE_OBJ_PD, 0)) != 0) {
        goto err_dealloc;
    }
    resp.pd_handle = pd->obj.handle;
    uresp.pdn      = pd->pd->handle;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    return 0;

err_dealloc:
    dcxemu_ibv_dealloc_pd(pd->pd);
err_free:
    free(pd);
    return err;
}

static int cmd_dealloc_pd(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_dealloc_pd req;
    struct face_pd *pd;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    pd = face_obj_get(f, req.pd_handle, FACE_OBJ_PD);
    if (pd == NULL) {
        return EINVAL;
    }
    face_pd_release_ahs(pd);
    if ((err = dcxemu_ibv_dealloc_pd(pd->pd)) != 0) {
        return err;
    }
    face_obj_del(f, &pd->obj);
    free(pd);
    return 0;
}

/* The MAC behind a RoCE GID, as the kernel's neighbour resolution would give
 * it: a link-local GID carries it in its modified EUI-64, any other is
 * given a locally administered address made from its last four bytes. */
static void roce_dmac(const uint8_t *gid, uint8_t *mac)
{
    static const uint8_t link_local[8] = { 0xfe, 0x80 };
    if (memcmp(gid, link_local, sizeof(link_local)) == 0) {
        mac[0] = gid[8] ^ 0x02;
        mac[1] = gid[9];
        mac[2] = gid[10];
        mac[3] = gid[13];
        mac[4] = gid[14];
        mac[5] = gid[15];
    } else {
        mac[0] = 0x02;
        mac[1] = 0x00;
        memcpy(mac + 2, gid + 12, 4);
    }
}

/* Address handles: libmlx5 builds InfiniBand AVs itself and asks the kernel
 * only on RoCE, for the destination MAC (MLX5_USER_CMDS_SUPP_UHW_CREATE_AH).
 * The kernel refuses an AH without a GRH there and one whose source GID
 * entry is empty. */
static int cmd_create_ah(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_create_ah req;
    struct ib_uverbs_create_ah_resp resp;
    struct mlx5_ib_create_ah_resp uresp;
    struct ibv_gid_entry sgid;
    struct face_obj *ah;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    if ((f->ctx == NULL) ||
        (face_obj_get(f, req.pd_handle, FACE_OBJ_PD) == NULL) ||
        (req.attr.port_num != 1) || !req.attr.is_global ||
        (dcxemu__ibv_query_gid_ex(f->ctx, 1, req.attr.grh.sgid_index, &sgid, 0,
                                  sizeof(sgid)) != 0)) {
        return EINVAL;
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        return ENOMEM;
    }
    if ((err = face_obj_add(f, ah, FACE_OBJ_AH, req.user_handle)) != 0) {
        free(ah);
        return err;
    }
    memset(&uresp, 0, sizeof(uresp));
    resp.ah_handle        = ah->handle;
    uresp.response_length = sizeof(uresp);
    roce_dmac(req.attr.grh.dgid, uresp.dmac);
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    face_resp_out(c->uresp, c->uresp_len, &uresp, sizeof(uresp));
    return 0;
}

static int cmd_destroy_ah(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_destroy_ah req;
    struct face_obj *ah;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    ah = face_obj_get(f, req.ah_handle, FACE_OBJ_AH);
    if (ah == NULL) {
        return EINVAL;
    }
    face_obj_del(f, ah);
    free(ah);
    return 0;
}

static int cmd_reg_mr(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_reg_mr req;
    struct ib_uverbs_reg_mr_resp resp;
    struct face_pd *pd;
    struct face_mr *mr;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    pd = face_obj_get(f, req.pd_handle, FACE_OBJ_PD);
    if (pd == NULL) {
        return EINVAL;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        return ENOMEM;
    }
    mr->mr = dcxemu_ibv_reg_mr_iova2(pd->pd, (void *)(uintptr_t)req.start,
                                     req.length, req.hca_va, req.access_flags);
    if (mr->mr == NULL) {
        err = errno ? errno : EINVAL;
        free(mr);
        return err;
    }
    if ((err = face_obj_add(f, &mr->obj, FACE_OBJ_MR, 0)) != 0) {
        dcxemu_ibv_dereg_mr(mr->mr);
        free(mr);
        return err;
    }
    resp.mr_handle = mr->obj.handle;
    resp.lkey      = mr->mr->lkey;
    resp.rkey      = mr->mr->rkey;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

static int cmd_dereg_mr(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_dereg_mr req;
    struct face_mr *mr;
    int err;
    face_udata_in(&req, sizeof(req), c->in, c->in_len);
    mr = face_obj_get(f, req.mr_handle, FACE_OBJ_MR);
    if (mr == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_ibv_dereg_mr(mr->mr)) != 0) {
        return err;
    }
    face_obj_del(f, &mr->obj);
    free(mr);
    return 0;
}

static int
cmd_create_comp_channel(struct face_file *f, const struct face_cmd *c)
{
    struct ib_uverbs_create_comp_channel_resp resp;
    int fd;
    if (f->ctx == NULL) {
        return EINVAL;
    }
    fd = face_channel_new();
    if (fd < 0) {
        return errno;
    }
    resp.fd = (uint32_t)fd;
    face_resp_out(c->resp, c->resp_len, &resp, sizeof(resp));
    return 0;
}

/* ---- the table of commands */

struct face_cmd_desc {
    uint32_t command; /* IB_USER_VERBS_CMD_*, with the extended flag */
    const char *name;
    size_t req; /* core request, without the headers */
    size_t resp; /* core response */
    int (*fn)(struct face_file *f, const struct face_cmd *c);
};

#define EX IB_USER_VERBS_CMD_FLAG_EXTENDED
#define CMD(_cmd, _req, _resp, _fn)                       \
    {                                                     \
        IB_USER_VERBS_CMD_##_cmd, #_cmd, _req, _resp, _fn \
    }
#define EXCMD(_cmd, _req, _resp, _fn)                                   \
    {                                                                   \
        EX | IB_USER_VERBS_EX_CMD_##_cmd, "EX_" #_cmd, _req, _resp, _fn \
    }
#define SZ(_s) sizeof(struct ib_uverbs_##_s)

static const struct face_cmd_desc face_cmds[] = {
    CMD(GET_CONTEXT, SZ(get_context), SZ(get_context_resp), cmd_get_context),
    CMD(QUERY_DEVICE, SZ(query_device), SZ(query_device_resp),
        cmd_query_device),
    CMD(QUERY_PORT, SZ(query_port), SZ(query_port_resp), cmd_query_port),
    CMD(ALLOC_PD, SZ(alloc_pd), SZ(alloc_pd_resp), cmd_alloc_pd),
    CMD(DEALLOC_PD, SZ(dealloc_pd), 0, cmd_dealloc_pd),
    CMD(CREATE_AH, SZ(create_ah), SZ(create_ah_resp), cmd_create_ah),
    CMD(DESTROY_AH, SZ(destroy_ah), 0, cmd_destroy_ah),
    CMD(REG_MR, SZ(reg_mr), SZ(reg_mr_resp), cmd_reg_mr),
    CMD(DEREG_MR, SZ(dereg_mr), 0, cmd_dereg_mr),
    CMD(CREATE_COMP_CHANNEL, SZ(create_comp_channel),
        SZ(create_comp_channel_resp), cmd_create_comp_channel),
    CMD(CREATE_CQ, SZ(create_cq), SZ(create_cq_resp), face_cmd_create_cq),
    CMD(DESTROY_CQ, SZ(destroy_cq), SZ(destroy_cq_resp), face_cmd_destroy_cq),
    CMD(CREATE_QP, SZ(create_qp), SZ(create_qp_resp), face_cmd_create_qp),
    CMD(QUERY_QP, SZ(query_qp), SZ(query_qp_resp), face_cmd_query_qp),
    CMD(MODIFY_QP, SZ(modify_qp), 0, face_cmd_modify_qp),
    CMD(DESTROY_QP, SZ(destroy_qp), SZ(destroy_qp_resp), face_cmd_destroy_qp),
    CMD(CREATE_SRQ, SZ(create_srq), SZ(create_srq_resp), face_cmd_create_srq),
    CMD(MODIFY_SRQ, SZ(modify_srq), 0, face_cmd_modify_srq),
    CMD(QUERY_SRQ, SZ(query_srq), SZ(query_srq_resp), face_cmd_query_srq),
    CMD(DESTROY_SRQ, SZ(destroy_srq), SZ(destroy_srq_resp),
        face_cmd_destroy_srq),
    EXCMD(QUERY_DEVICE, SZ(ex_query_device), SZ(ex_query_device_resp),
          cmd_ex_query_device),
    EXCMD(CREATE_CQ, SZ(ex_create_cq), SZ(ex_create_cq_resp),
          face_cmd_create_cq),
    EXCMD(CREATE_QP, SZ(ex_create_qp), SZ(ex_create_qp_resp),
          face_cmd_create_qp),
    EXCMD(MODIFY_QP, SZ(ex_modify_qp), SZ(ex_modify_qp_resp),
          face_cmd_modify_qp),
};

static const struct face_cmd_desc *cmd_find(uint32_t command)
{
    for (size_t i = 0; i < sizeof(face_cmds) / sizeof(face_cmds[0]); i++) {
        if (face_cmds[i].command == command) {
            return &face_cmds[i];
        }
    }
    return NULL;
}

/* Split a write() into its parts: 0, or EINVAL for a malformed command. */
static int
cmd_parse(const void *buf, size_t len, struct face_cmd *c, uint32_t *command)
{
    const struct ib_uverbs_cmd_hdr *h = buf;
    const struct face_cmd_desc *d;
    memset(c, 0, sizeof(*c));
    if (len < sizeof(*h)) {
        return EINVAL;
    }
    *command = h->command;
    d        = cmd_find(h->command);
    if (h->command & EX) {
        const struct ib_uverbs_ex_cmd_hdr *x = (const void *)(h + 1);
        size_t in                            = (size_t)h->in_words * 8;
        size_t uin                           = (size_t)x->provider_in_words * 8;
        if (len < sizeof(*h) + sizeof(*x) ||
            len != sizeof(*h) + sizeof(*x) + in + uin) {
            return EINVAL;
        }
        c->ex        = 1;
        c->in        = x + 1;
        c->in_len    = in;
        c->udata     = (const char *)c->in + in;
        c->udata_len = uin;
        c->resp      = x->response;
        c->resp_len  = (size_t)h->out_words * 8;
        c->uresp     = x->response + c->resp_len;
        c->uresp_len = (size_t)x->provider_out_words * 8;
        return 0;
    }
    if ((size_t)h->in_words * 4 != len) {
        return EINVAL;
    }
    c->in     = h + 1;
    c->in_len = len - sizeof(*h);
    if (d != NULL && c->in_len > d->req) {
        c->udata     = (const char *)c->in + d->req;
        c->udata_len = c->in_len - d->req;
        c->in_len    = d->req;
    }
    if (c->in_len >= sizeof(uint64_t) && d != NULL && d->resp != 0) {
        size_t out = (size_t)h->out_words * 4;
        memcpy(&c->resp, c->in, sizeof(c->resp));
        c->resp_len = out < d->resp ? out : d->resp;
        if (out > d->resp) {
            c->uresp     = c->resp + d->resp;
            c->uresp_len = out - d->resp;
        }
    }
    return 0;
}

ssize_t face_uverbs_write(struct face_file *f, const void *buf, size_t len)
{
    const struct face_cmd_desc *d;
    struct face_cmd c;
    uint32_t command = 0;
    int err;
    if ((err = cmd_parse(buf, len, &c, &command)) != 0) {
        face_log("uverbs%d: malformed command (%zu bytes)", f->dev_index, len);
        errno = err;
        return -1;
    }
    d = cmd_find(command);
    if (d == NULL) {
        face_log("uverbs%d: command %s%u is not supported", f->dev_index,
                 (command & EX) ? "EX_" : "", command & ~EX);
        errno = EOPNOTSUPP;
        return -1;
    }
    FACE_STAT(commands, 1);
    /* Pages the application mapped since then become UARs, before a command
     * that makes something that rings them (libmlx5 maps its UAR pages when
     * the context is made). Not before every command: a scan reads all the
     * process's mappings, and a process with many contexts and registrations
     * (UCX's gtest opens 257 interfaces) would spend its time there. */
    if ((d->fn == face_cmd_create_cq) || (d->fn == face_cmd_create_qp)) {
        face_uar_scan();
    }
    pthread_mutex_lock(&f->lock);
    err = d->fn(f, &c);
    pthread_mutex_unlock(&f->lock);
    if (face_trace) {
        face_log("uverbs%d: %s: %s", f->dev_index, d->name,
                 (err != 0) ? strerror(err) : "done");
    }
    if (err != 0) {
        errno = err;
        return -1;
    }
    return (ssize_t)len;
}

/* The kernel's release of a file: every object, then the context. */
void face_file_release(struct face_file *f)
{
    pthread_mutex_lock(&f->lock);
    face_uar_forget(f);
    /* QPs before the SRQs and CQs they use, MRs and mkeys before their PDs */
    static const enum face_obj_type order[] = { FACE_OBJ_QP, FACE_OBJ_SRQ,
                                                FACE_OBJ_CQ, FACE_OBJ_MKEY,
                                                FACE_OBJ_MR, FACE_OBJ_AH,
                                                FACE_OBJ_PD };
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        for (uint32_t h = 0; h < f->nobjs; h++) {
            struct face_obj *o = f->objs[h];
            if (o == NULL || o->type != order[k]) {
                continue;
            }
            face_obj_del(f, o);
            if (o->type == FACE_OBJ_MR) {
                dcxemu_ibv_dereg_mr(((struct face_mr *)o)->mr);
                free(o);
            } else if (o->type == FACE_OBJ_PD) {
                face_pd_release_ahs((struct face_pd *)o);
                dcxemu_ibv_dealloc_pd(((struct face_pd *)o)->pd);
                free(o);
            } else if (o->type == FACE_OBJ_MKEY) {
                face_devx_release(o);
            } else if (o->type == FACE_OBJ_AH) {
                free(o);
            } else {
                face_queue_release(o);
            }
        }
    }
    free(f->objs);
    f->objs = NULL;
    if (f->ctx != NULL) {
        dcxemu_ibv_close_device(f->ctx);
        f->ctx = NULL;
    }
    if (f->async_wfd >= 0) {
        face_real_close(f->async_wfd);
    }
    pthread_mutex_unlock(&f->lock);
    free(f);
}
