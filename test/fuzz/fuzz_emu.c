/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "fuzz_emu.h"
#include "fuzz_util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define DCX_FUZZ_EMU_MARKER 0xfeedfacecafe0000ull


static void *dcx_fuzz_emu_sym(void *lib, const char *name)
{
    void *sym = dlsym(lib, name);

    if (sym == NULL) {
        dcx_fuzz_fatal("the device model has no %s", name);
    }
    return sym;
}

/* The address vector of every raw object: LID 1 on InfiniBand; on RoCE a GRH
 * from and to dcxemu0's GID that dcx picks by default (RoCE v2,
 * IPv4-mapped), so raw packets reach dcx interfaces and the raw DCT. */
static void
dcx_fuzz_emu_fill_av(const dcx_fuzz_emu_t *e, struct ibv_ah_attr *ah)
{
    memset(ah, 0, sizeof(*ah));
    ah->port_num = 1;
    if (!e->roce) {
        ah->dlid = 1;
        if (!e->ib_grh) {
            return;
        }
    }
    ah->is_global      = 1;
    ah->grh.dgid       = e->gid;
    ah->grh.sgid_index = e->sgid_index;
    ah->grh.hop_limit  = 255;
}

static void dcx_fuzz_emu_dci_to_rts(dcx_fuzz_emu_t *e)
{
    struct ibv_qp_attr a;
    int ret;

    memset(&a, 0, sizeof(a));
    a.qp_state   = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num   = 1;
    ret          = e->modify_qp(e->dci, &a,
                                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
    if (ret == 0) {
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_4096;
        dcx_fuzz_emu_fill_av(e, &a.ah_attr);
        ret = e->modify_qp(e->dci, &a,
                           IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV);
    }
    if (ret == 0) {
        memset(&a, 0, sizeof(a));
        a.qp_state      = IBV_QPS_RTS;
        a.timeout       = 5;
        a.retry_cnt     = e->retry;
        a.rnr_retry     = e->rnr_retry;
        a.max_rd_atomic = 16;
        ret             = e->modify_qp(e->dci, &a,
                                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                               IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                                               IBV_QP_SQ_PSN);
    }
    if (ret != 0) {
        dcx_fuzz_fatal("raw dci to rts: %s", strerror(ret));
    }
}

void dcx_fuzz_emu_dci_reset(dcx_fuzz_emu_t *e)
{
    struct ibv_qp_attr a;
    int ret;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RESET;
    ret        = e->modify_qp(e->dci, &a, IBV_QP_STATE);
    if (ret != 0) {
        dcx_fuzz_fatal("raw dci to reset: %s", strerror(ret));
    }
    dcx_fuzz_emu_dci_to_rts(e);
}

void dcx_fuzz_emu_recv_drain(dcx_fuzz_emu_t *e)
{
    struct ibv_recv_wr wr, *bad;
    struct ibv_wc wc[16];
    struct ibv_sge sge;
    int i, n;

    while ((n = ibv_poll_cq(e->recv_cq, 16, wc)) > 0) {
        for (i = 0; i < n; ++i) {
            if (wc[i].opcode & IBV_WC_RECV) {
                --e->srq_posted;
            }
        }
    }
    if (n < 0) {
        dcx_fuzz_fatal("polling the raw dct's cq failed");
    }

    while (e->srq_posted < DCX_FUZZ_EMU_SRQ_LEN) {
        sge.addr = (uintptr_t)e->recv_buf +
                   (e->srq_posted * DCX_FUZZ_EMU_RECV_LEN);
        sge.length = DCX_FUZZ_EMU_RECV_LEN;
        sge.lkey   = e->recv_mr->lkey;
        memset(&wr, 0, sizeof(wr));
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (ibv_post_srq_recv(e->srq, &wr, &bad) != 0) {
            dcx_fuzz_fatal("posting a receive on the raw srq failed");
        }
        ++e->srq_posted;
    }
}

void dcx_fuzz_emu_open(dcx_fuzz_emu_t *e, size_t buf_len, uint8_t retry,
                       uint8_t rnr_retry)
{
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    struct ibv_context *(*open_device)(struct ibv_device *,
                                       struct mlx5dv_context_attr *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *,
                                struct ibv_comp_channel *, int);
    struct ibv_srq *(*create_srq)(struct ibv_pd *, struct ibv_srq_init_attr *);
    struct ibv_qp *(*create_qp)(struct ibv_context *,
                                struct ibv_qp_init_attr_ex *,
                                struct mlx5dv_qp_init_attr *);
    struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *);
    struct mlx5dv_qp_ex *(*qp_ex_to_dv)(struct ibv_qp_ex *);
    struct ibv_ah *(*create_ah)(struct ibv_pd *, struct ibv_ah_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t,
                        struct ibv_gid_entry *, uint32_t, size_t);
    struct ibv_gid_entry gid_entry;
    struct ibv_port_attr port_attr;
    uint32_t i;
    struct mlx5dv_qp_init_attr dv_attr;
    struct ibv_qp_init_attr_ex attr;
    struct ibv_srq_init_attr srq_attr;
    struct mlx5dv_context_attr ctx_attr = { .flags = MLX5DV_CONTEXT_FLAGS_DEVX };
    struct ibv_device **list;
    struct ibv_ah_attr ah_attr;
    struct ibv_qp_attr qp_attr;
    void *lib;
    int num = 0;

    memset(e, 0, sizeof(*e));
    lib = dlopen(dcx_fuzz_emu_lib(), RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        dcx_fuzz_fatal("loading the device model: %s", dlerror());
    }
    get_device_list  = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_get_device_list");
    free_device_list = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_free_device_list");
    open_device      = dcx_fuzz_emu_sym(lib, "dcxemu_mlx5dv_open_device");
    alloc_pd         = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_alloc_pd");
    create_cq        = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_create_cq");
    create_srq       = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_create_srq");
    create_qp        = dcx_fuzz_emu_sym(lib, "dcxemu_mlx5dv_create_qp");
    qp_to_qp_ex      = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_qp_to_qp_ex");
    qp_ex_to_dv  = dcx_fuzz_emu_sym(lib, "dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex");
    create_ah    = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_create_ah");
    query_port   = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_query_port");
    query_gid_ex = dcx_fuzz_emu_sym(lib, "dcxemu__ibv_query_gid_ex");
    e->modify_qp = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_modify_qp");
    e->reg_mr    = dcx_fuzz_emu_sym(lib, "dcxemu_ibv_reg_mr");
    e->retry     = retry;
    e->rnr_retry = rnr_retry;

    list = get_device_list(&num);
    if ((list == NULL) || (num < 1)) {
        dcx_fuzz_fatal("the device model lists no device");
    }
    /* With DEVX, as dcx opens it: the mkey builders need it. */
    e->ctx = open_device(list[0], &ctx_attr);
    free_device_list(list);
    if ((e->ctx == NULL) || ((e->pd = alloc_pd(e->ctx)) == NULL) ||
        ((e->send_cq = create_cq(e->ctx, 1024, NULL, NULL, 0)) == NULL) ||
        ((e->recv_cq = create_cq(e->ctx, 1024, NULL, NULL, 0)) == NULL)) {
        dcx_fuzz_fatal("opening the raw device dcxemu0 failed");
    }

    if (query_port(e->ctx, 1, &port_attr) != 0) {
        dcx_fuzz_fatal("querying the raw device's port failed");
    }
    e->roce = (port_attr.link_layer == IBV_LINK_LAYER_ETHERNET);
    for (i = 0; e->roce && (i < (uint32_t)port_attr.gid_tbl_len); ++i) {
        if ((query_gid_ex(e->ctx, 1, i, &gid_entry, 0, sizeof(gid_entry)) ==
             0) &&
            (gid_entry.gid_type == IBV_GID_TYPE_ROCE_V2) &&
            (gid_entry.gid.raw[10] == 0xff) &&
            (gid_entry.gid.raw[11] == 0xff)) {
            e->sgid_index = (uint8_t)i;
            e->gid        = gid_entry.gid;
            break;
        }
    }
    if (e->roce && (i == (uint32_t)port_attr.gid_tbl_len)) {
        dcx_fuzz_fatal("the raw device has no RoCE v2 IPv4 GID");
    }
    e->ib_grh = !e->roce && (port_attr.flags & IBV_QPF_GRH_REQUIRED);
    if (e->ib_grh) {
        if (query_gid_ex(e->ctx, 1, 0, &gid_entry, 0, sizeof(gid_entry)) != 0) {
            dcx_fuzz_fatal("the raw device has no GID 0");
        }
        e->sgid_index = 0;
        e->gid        = gid_entry.gid;
    }

    e->buf_len = buf_len;
    if ((posix_memalign(&e->buf, 4096, buf_len) != 0) ||
        (posix_memalign(&e->recv_buf, 4096,
                        DCX_FUZZ_EMU_SRQ_LEN * DCX_FUZZ_EMU_RECV_LEN) != 0)) {
        dcx_fuzz_fatal("out of memory");
    }
    memset(e->buf, 0, buf_len);
    memset(e->recv_buf, 0, DCX_FUZZ_EMU_SRQ_LEN * DCX_FUZZ_EMU_RECV_LEN);
    e->mr      = e->reg_mr(e->pd, e->buf, buf_len,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC);
    e->recv_mr = e->reg_mr(e->pd, e->recv_buf,
                           DCX_FUZZ_EMU_SRQ_LEN * DCX_FUZZ_EMU_RECV_LEN,
                           IBV_ACCESS_LOCAL_WRITE);
    if ((e->mr == NULL) || (e->recv_mr == NULL)) {
        dcx_fuzz_fatal("registering raw buffers failed");
    }

    memset(&attr, 0, sizeof(attr));
    memset(&dv_attr, 0, sizeof(dv_attr));
    attr.qp_type             = IBV_QPT_DRIVER;
    attr.send_cq             = e->send_cq;
    attr.recv_cq             = e->send_cq;
    attr.pd                  = e->pd;
    attr.cap.max_send_wr     = 64;
    attr.cap.max_send_sge    = 4;
    attr.cap.max_inline_data = 128;
    attr.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
                          IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                          IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_READ |
                          IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    dv_attr.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv_attr.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    e->dci                       = create_qp(e->ctx, &attr, &dv_attr);
    if ((e->dci == NULL) || ((e->qpx = qp_to_qp_ex(e->dci)) == NULL) ||
        ((e->dv = qp_ex_to_dv(e->qpx)) == NULL)) {
        dcx_fuzz_fatal("creating the raw dci failed");
    }
    e->max_inline = attr.cap.max_inline_data;
    e->max_sge    = attr.cap.max_send_sge;
    dcx_fuzz_emu_dci_to_rts(e);

    memset(&srq_attr, 0, sizeof(srq_attr));
    srq_attr.attr.max_wr  = DCX_FUZZ_EMU_SRQ_LEN;
    srq_attr.attr.max_sge = 1;
    e->srq                = create_srq(e->pd, &srq_attr);
    if (e->srq == NULL) {
        dcx_fuzz_fatal("creating the raw srq failed");
    }
    e->dc_key = 0x5eedfacedull;
    memset(&attr, 0, sizeof(attr));
    memset(&dv_attr, 0, sizeof(dv_attr));
    attr.qp_type                        = IBV_QPT_DRIVER;
    attr.send_cq                        = e->recv_cq;
    attr.recv_cq                        = e->recv_cq;
    attr.srq                            = e->srq;
    attr.pd                             = e->pd;
    attr.comp_mask                      = IBV_QP_INIT_ATTR_PD;
    dv_attr.comp_mask                   = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv_attr.dc_init_attr.dc_type        = MLX5DV_DCTYPE_DCT;
    dv_attr.dc_init_attr.dct_access_key = e->dc_key;
    e->dct                              = create_qp(e->ctx, &attr, &dv_attr);
    if (e->dct == NULL) {
        dcx_fuzz_fatal("creating the raw dct failed");
    }
    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_state        = IBV_QPS_INIT;
    qp_attr.port_num        = 1;
    qp_attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC;
    if (e->modify_qp(e->dct, &qp_attr,
                     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                             IBV_QP_ACCESS_FLAGS) != 0) {
        dcx_fuzz_fatal("raw dct to init failed");
    }
    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_state      = IBV_QPS_RTR;
    qp_attr.path_mtu      = IBV_MTU_4096;
    qp_attr.min_rnr_timer = 1;
    dcx_fuzz_emu_fill_av(e, &qp_attr.ah_attr);
    if (e->modify_qp(e->dct, &qp_attr,
                     IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                             IBV_QP_PATH_MTU) != 0) {
        dcx_fuzz_fatal("raw dct to rtr failed");
    }
    dcx_fuzz_emu_recv_drain(e);

    dcx_fuzz_emu_fill_av(e, &ah_attr);
    e->ah = create_ah(e->pd, &ah_attr);
    if (e->ah == NULL) {
        dcx_fuzz_fatal("creating an address handle to dcxemu0 failed");
    }
}

int dcx_fuzz_emu_drain(dcx_fuzz_emu_t *e, void (*progress)(void *), void *arg)
{
    double start = dcx_fuzz_now();
    struct ibv_wc wc[16];
    int i, n, error = 0, ret;
    unsigned count;

    ibv_wr_start(e->qpx);
    e->qpx->wr_id    = DCX_FUZZ_EMU_MARKER;
    e->qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(e->qpx, e->mr->rkey, (uintptr_t)e->buf);
    ibv_wr_set_sge(e->qpx, e->mr->lkey, (uintptr_t)e->buf, 0);
    mlx5dv_wr_set_dc_addr(e->dv, e->ah, e->dct->qp_num, e->dc_key);
    ret = ibv_wr_complete(e->qpx);
    if (ret != 0) {
        dcx_fuzz_fatal("posting the marker failed: %s", strerror(ret));
    }

    for (count = 0;; ++count) {
        if ((count >= DCX_FUZZ_MAX_PROGRESS) ||
            (((count % 1024) == 0) &&
             (dcx_fuzz_now() > start + DCX_FUZZ_MAX_SECONDS))) {
            dcx_fuzz_fatal("the raw dci's work did not complete after %u "
                           "polls in %.1f s: a hang",
                           count, dcx_fuzz_now() - start);
        }
        n = ibv_poll_cq(e->send_cq, 16, wc);
        if (n < 0) {
            dcx_fuzz_fatal("polling the raw dci's cq failed");
        }
        for (i = 0; i < n; ++i) {
            error |= (wc[i].status != IBV_WC_SUCCESS);
            if (wc[i].wr_id == DCX_FUZZ_EMU_MARKER) {
                goto out;
            }
        }
        if (progress != NULL) {
            progress(arg);
        }
    }

out:
    /* Completions after the marker cannot exist: it was the last WR. */
    if (error) {
        dcx_fuzz_emu_dci_reset(e);
    }
    dcx_fuzz_emu_recv_drain(e);
    return error;
}
