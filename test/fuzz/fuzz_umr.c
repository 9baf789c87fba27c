/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * fuzz_umr: the device model's checks of UMR work requests and of the
 * indirect keys they build. On a loopback RC QP (the only QP type with the
 * mkey builders), mlx5dv_wr_mr_interleaved and mlx5dv_wr_mr_list program
 * two indirect mkeys with fuzzed access, repeat counts, entry counts and
 * entries (any key, address, byte count and skip), and LOCAL_INV
 * invalidates them; a raw DCI then uses an mkey as the remote key of a
 * WRITE or READ, or as the local key of a WRITE's gather, at any offset and
 * length. An RC QP or DCI that an error moved to ERR is reset.
 *
 * Input: up to FUZZ_UMR_MAX_STEPS records (struct below). Both mkeys are
 * invalidated before each input, so an input does not depend on the ones
 * before it and its reproducer replays alone.
 */
#include "fuzz_emu.h"
#include "fuzz_util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_UMR_MAX_STEPS   6
#define FUZZ_UMR_MAX_ENTRIES 6
#define FUZZ_UMR_RC_WR_ID    0x756d72ull

enum {
    FUZZ_UMR_INTERLEAVED,
    FUZZ_UMR_LIST,
    FUZZ_UMR_LOCAL_INV,
    FUZZ_UMR_DCI_WRITE,
    FUZZ_UMR_DCI_READ,
    FUZZ_UMR_DCI_GATHER,
    FUZZ_UMR_KIND_LAST
};

typedef struct {
    int32_t offset;
    uint32_t count; /* bytes_count, or the SGE's length */
    uint32_t skip;
    uint8_t key; /* which region's key, or 3: the fuzzed one */
    uint32_t lkey;
} __attribute__((packed)) fuzz_umr_entry_t;

typedef struct {
    uint8_t kind;
    uint8_t mkey; /* bit 0: which mkey */
    uint8_t wr_flags;
    uint8_t num; /* entries */
    uint32_t access;
    uint32_t repeat;
    int32_t offset; /* DCI steps: offset in the mkey */
    uint32_t length;
    fuzz_umr_entry_t entries[FUZZ_UMR_MAX_ENTRIES];
} __attribute__((packed)) fuzz_umr_record_t;

static dcx_fuzz_emu_t fuzz_emu;
static struct ibv_cq *fuzz_rc_cq;
static struct ibv_qp *fuzz_rc;
static struct ibv_qp_ex *fuzz_rcx;
static struct mlx5dv_qp_ex *fuzz_rcdv;
static struct mlx5dv_mkey *fuzz_mkeys[2];
static struct ibv_mr *fuzz_ro_mr; /* remote read only */
static void *fuzz_ro_buf;

static void fuzz_umr_rc_to_rts(void)
{
    static const int masks[] = {
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                IBV_QP_MIN_RNR_TIMER,
        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT
    };
    static const enum ibv_qp_state states[] = { IBV_QPS_INIT, IBV_QPS_RTR,
                                                IBV_QPS_RTS };
    struct ibv_qp_attr a;
    unsigned i;
    int ret;

    for (i = 0; i < 3; ++i) {
        memset(&a, 0, sizeof(a));
        a.qp_state           = states[i];
        a.port_num           = 1;
        a.qp_access_flags    = IBV_ACCESS_LOCAL_WRITE;
        a.path_mtu           = IBV_MTU_4096;
        a.dest_qp_num        = fuzz_rc->qp_num; /* loopback */
        a.ah_attr.dlid       = 1;
        a.ah_attr.port_num   = 1;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer      = 1;
        a.max_rd_atomic      = 1;
        a.retry_cnt          = 1;
        a.rnr_retry          = 1;
        a.timeout            = 5;
        ret                  = fuzz_emu.modify_qp(fuzz_rc, &a, masks[i]);
        if (ret != 0) {
            dcx_fuzz_fatal("rc qp to state %d: %s", states[i], strerror(ret));
        }
    }
}

/* Every completion of the RC QP; an error resets it. */
static void fuzz_umr_rc_drain(void)
{
    double start = dcx_fuzz_now();
    struct ibv_qp_attr a;
    struct ibv_wc wc[8];
    int i, n, error = 0, done = 0;
    unsigned count;
    int ret;

    /* A signaled no-op would need a WR type RC supports without a peer:
     * the UMR step itself is signaled, so wait for it. */
    for (count = 0; !done; ++count) {
        if ((count >= DCX_FUZZ_MAX_PROGRESS) ||
            (((count % 1024) == 0) &&
             (dcx_fuzz_now() > start + DCX_FUZZ_MAX_SECONDS))) {
            dcx_fuzz_fatal("the rc qp's umr did not complete after %u "
                           "polls in %.1f s: a hang",
                           count, dcx_fuzz_now() - start);
        }
        n = ibv_poll_cq(fuzz_rc_cq, 8, wc);
        if (n < 0) {
            dcx_fuzz_fatal("polling the rc qp's cq failed");
        }
        for (i = 0; i < n; ++i) {
            error |= (wc[i].status != IBV_WC_SUCCESS);
            done |= (wc[i].wr_id == FUZZ_UMR_RC_WR_ID);
        }
    }
    if (error) {
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RESET;
        ret        = fuzz_emu.modify_qp(fuzz_rc, &a, IBV_QP_STATE);
        if (ret != 0) {
            dcx_fuzz_fatal("rc qp to reset: %s", strerror(ret));
        }
        fuzz_umr_rc_to_rts();
    }
}

static void fuzz_umr_invalidate(struct mlx5dv_mkey *mkey)
{
    int ret;

    ibv_wr_start(fuzz_rcx);
    fuzz_rcx->wr_id    = FUZZ_UMR_RC_WR_ID;
    fuzz_rcx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_local_inv(fuzz_rcx, mkey->lkey);
    ret = ibv_wr_complete(fuzz_rcx);
    if (ret != 0) {
        dcx_fuzz_fatal("posting local_inv failed: %s", strerror(ret));
    }
    fuzz_umr_rc_drain();
}

static uint64_t fuzz_umr_base(uint8_t choice, uint32_t fuzzed, uint32_t *lkey_p)
{
    switch (choice % 4) {
    case 1:
        *lkey_p = fuzz_ro_mr->lkey;
        return (uintptr_t)fuzz_ro_buf;
    case 2:
        *lkey_p = fuzz_mkeys[0]->lkey; /* an mkey in an mkey */
        return 0;
    case 3:
        *lkey_p = fuzzed;
        return (uintptr_t)fuzz_emu.buf;
    default:
        *lkey_p = fuzz_emu.mr->lkey;
        return (uintptr_t)fuzz_emu.buf;
    }
}

static void fuzz_umr_build(const fuzz_umr_record_t *r)
{
    struct mlx5dv_mr_interleaved il[FUZZ_UMR_MAX_ENTRIES];
    struct ibv_sge sge[FUZZ_UMR_MAX_ENTRIES];
    struct mlx5dv_mkey *mkey = fuzz_mkeys[r->mkey & 1];
    unsigned i, num = r->num % (FUZZ_UMR_MAX_ENTRIES + 1);
    uint64_t base;
    uint32_t lkey;

    for (i = 0; i < num; ++i) {
        base = fuzz_umr_base(r->entries[i].key, r->entries[i].lkey, &lkey);
        il[i].addr        = base + (int64_t)r->entries[i].offset;
        il[i].bytes_count = r->entries[i].count;
        il[i].bytes_skip  = r->entries[i].skip;
        il[i].lkey        = lkey;
        sge[i].addr       = il[i].addr;
        sge[i].length     = r->entries[i].count;
        sge[i].lkey       = lkey;
    }

    ibv_wr_start(fuzz_rcx);
    fuzz_rcx->wr_id = FUZZ_UMR_RC_WR_ID;
    /* Signaled always, so the step has a completion to wait for. */
    fuzz_rcx->wr_flags = r->wr_flags | IBV_SEND_SIGNALED;
    switch (r->kind % FUZZ_UMR_KIND_LAST) {
    case FUZZ_UMR_INTERLEAVED:
        mlx5dv_wr_mr_interleaved(fuzz_rcdv, mkey, r->access, r->repeat, num,
                                 il);
        break;
    case FUZZ_UMR_LIST:
        mlx5dv_wr_mr_list(fuzz_rcdv, mkey, r->access, num, sge);
        break;
    default:
        ibv_wr_local_inv(fuzz_rcx, mkey->lkey);
        break;
    }
    if (ibv_wr_complete(fuzz_rcx) == 0) {
        fuzz_umr_rc_drain();
    }
}

static void fuzz_umr_dci(const fuzz_umr_record_t *r)
{
    struct ibv_qp_ex *qpx    = fuzz_emu.qpx;
    struct mlx5dv_mkey *mkey = fuzz_mkeys[r->mkey & 1];
    uint32_t length          = r->length % 8192;
    uint64_t local           = (uintptr_t)fuzz_emu.buf;

    ibv_wr_start(qpx);
    qpx->wr_id    = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    switch (r->kind % FUZZ_UMR_KIND_LAST) {
    case FUZZ_UMR_DCI_WRITE:
        ibv_wr_rdma_write(qpx, mkey->rkey, (int64_t)r->offset);
        ibv_wr_set_sge(qpx, fuzz_emu.mr->lkey, local, length);
        break;
    case FUZZ_UMR_DCI_READ:
        ibv_wr_rdma_read(qpx, mkey->rkey, (int64_t)r->offset);
        ibv_wr_set_sge(qpx, fuzz_emu.mr->lkey, local, length);
        break;
    default:
        /* The mkey gathers the data: a write into the DCI's own region. */
        ibv_wr_rdma_write(qpx, fuzz_emu.mr->rkey, local + 8192);
        ibv_wr_set_sge(qpx, mkey->lkey, (int64_t)r->offset, length);
        break;
    }
    mlx5dv_wr_set_dc_addr(fuzz_emu.dv, fuzz_emu.ah, fuzz_emu.dct->qp_num,
                          fuzz_emu.dc_key);
    (void)ibv_wr_complete(qpx);
    (void)dcx_fuzz_emu_drain(&fuzz_emu, NULL, NULL);
}

static void fuzz_umr_write_seed(const char *dir, const char *name,
                                const fuzz_umr_record_t *r, unsigned count)
{
    char path[4096];
    FILE *file;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    file = fopen(path, "w");
    if ((file == NULL) || (fwrite(r, sizeof(*r), count, file) != count) ||
        (fclose(file) != 0)) {
        dcx_fuzz_fatal("writing %s: %m", path);
    }
}

static void fuzz_umr_write_seeds(const char *dir)
{
    static const uint32_t all = IBV_ACCESS_LOCAL_WRITE |
                                IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ;
    fuzz_umr_record_t r[4];

    memset(r, 0, sizeof(r));
    /* interleaved: 3 x (8 B, skip 56) then (4 B, skip 12); write, read */
    r[0].kind              = FUZZ_UMR_INTERLEAVED;
    r[0].wr_flags          = IBV_SEND_INLINE;
    r[0].num               = 2;
    r[0].access            = all;
    r[0].repeat            = 3;
    r[0].entries[0].offset = 3;
    r[0].entries[0].count  = 8;
    r[0].entries[0].skip   = 56;
    r[0].entries[1].offset = 1000;
    r[0].entries[1].count  = 4;
    r[0].entries[1].skip   = 12;
    r[1].kind              = FUZZ_UMR_DCI_WRITE;
    r[1].length            = 36;
    r[2].kind              = FUZZ_UMR_DCI_READ;
    r[2].offset            = 4;
    r[2].length            = 20;
    r[3].kind              = FUZZ_UMR_LOCAL_INV;
    fuzz_umr_write_seed(dir, "interleaved", r, 4);

    /* list of two SGEs; gather from it; invalidate */
    r[0].kind              = FUZZ_UMR_LIST;
    r[0].mkey              = 1;
    r[0].repeat            = 0;
    r[0].entries[0].count  = 100;
    r[0].entries[1].key    = 1;
    r[0].entries[1].offset = 64;
    r[0].entries[1].count  = 50;
    r[1].kind              = FUZZ_UMR_DCI_GATHER;
    r[1].mkey              = 1;
    r[1].offset            = 90;
    r[1].length            = 30;
    r[2].kind              = FUZZ_UMR_LOCAL_INV;
    r[2].mkey              = 1;
    fuzz_umr_write_seed(dir, "list", r, 3);

    /* interleaved with an entry of zero bytes, gathered (the regression of
     * test/gtest/emu/test_umr.cc: interleaved_zero_byte_entry) */
    memset(r, 0, sizeof(r));
    r[0].kind              = FUZZ_UMR_INTERLEAVED;
    r[0].wr_flags          = IBV_SEND_INLINE;
    r[0].num               = 3;
    r[0].access            = all;
    r[0].repeat            = 5;
    r[0].entries[0].offset = 100;
    r[0].entries[0].count  = 4;
    r[0].entries[0].skip   = 12;
    r[0].entries[1].offset = 900;
    r[0].entries[2].offset = 2000;
    r[0].entries[2].count  = 12;
    r[0].entries[2].skip   = 12;
    r[1].kind              = FUZZ_UMR_DCI_GATHER;
    r[1].offset            = 2;
    r[1].length            = 30;
    fuzz_umr_write_seed(dir, "zero-byte-entry", r, 2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *,
                                struct ibv_comp_channel *, int);
    struct ibv_qp *(*create_qp)(struct ibv_context *,
                                struct ibv_qp_init_attr_ex *,
                                struct mlx5dv_qp_init_attr *);
    struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *);
    struct mlx5dv_qp_ex *(*qp_ex_to_dv)(struct ibv_qp_ex *);
    struct mlx5dv_mkey *(*create_mkey)(struct mlx5dv_mkey_init_attr *);
    struct mlx5dv_mkey_init_attr mkey_attr;
    struct mlx5dv_qp_init_attr dv_attr;
    struct ibv_qp_init_attr_ex attr;
    const char *seeds;
    void *lib;

    dcx_fuzz_env_init("umr", argc, argv);
    dcx_fuzz_emu_open(&fuzz_emu, 16384, 1, 1);

    lib = dlopen(dcx_fuzz_emu_lib(), RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        dcx_fuzz_fatal("the device model is not loaded");
    }
    create_cq   = dlsym(lib, "dcxemu_ibv_create_cq");
    create_qp   = dlsym(lib, "dcxemu_mlx5dv_create_qp");
    qp_to_qp_ex = dlsym(lib, "dcxemu_ibv_qp_to_qp_ex");
    qp_ex_to_dv = dlsym(lib, "dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex");
    create_mkey = dlsym(lib, "dcxemu_mlx5dv_create_mkey");
    if ((create_cq == NULL) || (create_qp == NULL) || (qp_to_qp_ex == NULL) ||
        (qp_ex_to_dv == NULL) || (create_mkey == NULL)) {
        dcx_fuzz_fatal("the device model lacks an entry point");
    }

    fuzz_rc_cq = create_cq(fuzz_emu.ctx, 256, NULL, NULL, 0);
    memset(&attr, 0, sizeof(attr));
    memset(&dv_attr, 0, sizeof(dv_attr));
    attr.qp_type             = IBV_QPT_RC;
    attr.send_cq             = fuzz_rc_cq;
    attr.recv_cq             = fuzz_rc_cq;
    attr.pd                  = fuzz_emu.pd;
    attr.cap.max_send_wr     = 16;
    attr.cap.max_send_sge    = 1;
    attr.cap.max_inline_data = 128;
    attr.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
    dv_attr.comp_mask   = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    dv_attr.send_ops_flags = MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
                             MLX5DV_QP_EX_WITH_MR_LIST;
    fuzz_rc = (fuzz_rc_cq == NULL) ? NULL :
                                     create_qp(fuzz_emu.ctx, &attr, &dv_attr);
    if ((fuzz_rc == NULL) || ((fuzz_rcx = qp_to_qp_ex(fuzz_rc)) == NULL) ||
        ((fuzz_rcdv = qp_ex_to_dv(fuzz_rcx)) == NULL)) {
        dcx_fuzz_fatal("creating the loopback rc qp failed");
    }
    fuzz_umr_rc_to_rts();

    mkey_attr.pd           = fuzz_emu.pd;
    mkey_attr.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
    mkey_attr.max_entries  = 4;
    fuzz_mkeys[0]          = create_mkey(&mkey_attr);
    mkey_attr.max_entries  = 2;
    fuzz_mkeys[1]          = create_mkey(&mkey_attr);
    if ((fuzz_mkeys[0] == NULL) || (fuzz_mkeys[1] == NULL)) {
        dcx_fuzz_fatal("creating indirect mkeys failed");
    }

    if (posix_memalign(&fuzz_ro_buf, 4096, 4096) != 0) {
        dcx_fuzz_fatal("out of memory");
    }
    memset(fuzz_ro_buf, 0x11, 4096);
    fuzz_ro_mr = fuzz_emu.reg_mr(fuzz_emu.pd, fuzz_ro_buf, 4096,
                                 IBV_ACCESS_REMOTE_READ);
    if (fuzz_ro_mr == NULL) {
        dcx_fuzz_fatal("registering a read-only region failed");
    }

    seeds = getenv("DCX_FUZZ_SEEDS");
    if (seeds != NULL) {
        fuzz_umr_write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcx_fuzz_input_t in = { data, size };
    fuzz_umr_record_t record;
    unsigned step;

    fuzz_umr_invalidate(fuzz_mkeys[0]);
    fuzz_umr_invalidate(fuzz_mkeys[1]);
    for (step = 0; (step < FUZZ_UMR_MAX_STEPS) && (in.left > 0); ++step) {
        dcx_fuzz_bytes(&in, &record, sizeof(record));
        if ((record.kind % FUZZ_UMR_KIND_LAST) <= FUZZ_UMR_LOCAL_INV) {
            fuzz_umr_build(&record);
        } else {
            fuzz_umr_dci(&record);
        }
    }
    return 0;
}
