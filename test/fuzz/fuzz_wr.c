/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * fuzz_wr: the device model's work-request validation. Batches of work
 * requests with fuzzed opcodes, flags, local keys, addresses and lengths
 * (one SGE, SGE lists, inline data), remote keys and addresses, DC
 * addresses (DCT number, DC key, an unreachable LID), immediate data and
 * atomic operands are built on a raw DCI with rdma-core's builders and
 * posted to the device model's own DCT in this process; every completion
 * is polled, and a DCI that an error moved to ERR is reset.
 *
 * Input: batches of
 *   count (1 byte: 1..4 WRs), then per WR a fixed record (struct below),
 *   then one byte (bit 0: abort the batch instead of completing it).
 */
#include "fuzz_emu.h"
#include "fuzz_util.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_WR_BUF_LEN     16384
#define FUZZ_WR_MAX_BATCHES 8
#define FUZZ_WR_MAX_BATCH   4
#define FUZZ_WR_MAX_SGES    6

enum {
    FUZZ_WR_SEND,
    FUZZ_WR_SEND_IMM,
    FUZZ_WR_WRITE,
    FUZZ_WR_WRITE_IMM,
    FUZZ_WR_READ,
    FUZZ_WR_CSWAP,
    FUZZ_WR_FADD,
    FUZZ_WR_LOCAL_INV,
    FUZZ_WR_SEND_INV,
    FUZZ_WR_OP_LAST
};

enum {
    FUZZ_WR_DATA_SGE,
    FUZZ_WR_DATA_SGE_LIST,
    FUZZ_WR_DATA_INLINE,
    FUZZ_WR_DATA_INLINE_LIST,
    FUZZ_WR_DATA_NONE,
    FUZZ_WR_DATA_LAST
};

enum {
    FUZZ_WR_DC_SKIP   = 1, /* no mlx5dv_wr_set_dc_addr */
    FUZZ_WR_DC_DCTN   = 2, /* the fuzzed DCT number */
    FUZZ_WR_DC_KEY    = 4, /* the fuzzed DC key */
    FUZZ_WR_DC_NO_LID = 8, /* an address handle to a LID nobody has */
    FUZZ_WR_LEN_ANY   = 16 /* lengths not reduced modulo 8 KiB */
};

/* One work request of the input. */
typedef struct {
    uint8_t op;
    uint8_t wr_flags;
    uint8_t data; /* FUZZ_WR_DATA_*, and the SGE count above it */
    uint8_t keys; /* local key (low 4 bits), remote key (high) */
    uint8_t dc; /* FUZZ_WR_DC_*, FUZZ_WR_LEN_ANY */
    int32_t loffset;
    uint32_t length;
    int32_t roffset;
    uint32_t lkey; /* when the key choice is "fuzzed" */
    uint32_t rkey;
    uint32_t dctn;
    uint64_t dc_key;
    uint64_t operand1;
    uint64_t operand2;
    uint32_t imm;
} __attribute__((packed)) fuzz_wr_record_t;

static dcx_fuzz_emu_t fuzz_emu;
static struct ibv_mr *fuzz_local_mr; /* local access only */
static void *fuzz_local_buf;
static struct ibv_ah *fuzz_no_lid_ah;
static uint8_t fuzz_inline_src[4096];

/* A key and the start of the memory it belongs to, by a 4-bit choice. */
static uint32_t
fuzz_wr_key(unsigned choice, int remote, uint32_t fuzzed, uint64_t *base_p)
{
    struct ibv_mr *mr;

    switch (choice) {
    case 1:
        mr = fuzz_local_mr;
        break;
    case 2:
        mr = fuzz_emu.recv_mr;
        break;
    case 3:
        *base_p = (uintptr_t)fuzz_emu.buf;
        return fuzzed;
    case 4:
        /* the other kind of key of the same region */
        *base_p = (uintptr_t)fuzz_emu.buf;
        return remote ? fuzz_emu.mr->lkey : fuzz_emu.mr->rkey;
    default:
        mr = fuzz_emu.mr;
        break;
    }
    *base_p = (uintptr_t)mr->addr;
    return remote ? mr->rkey : mr->lkey;
}

static uint32_t fuzz_wr_length(const fuzz_wr_record_t *r, uint32_t length)
{
    return (r->dc & FUZZ_WR_LEN_ANY) ? length : (length % 8192);
}

static void fuzz_wr_build(const fuzz_wr_record_t *r, uint64_t wr_id)
{
    struct ibv_qp_ex *qpx = fuzz_emu.qpx;
    struct ibv_sge sges[FUZZ_WR_MAX_SGES];
    struct ibv_data_buf bufs[FUZZ_WR_MAX_SGES];
    uint64_t lbase, rbase, raddr;
    uint32_t lkey, rkey, length;
    unsigned i, n;

    lkey  = fuzz_wr_key(r->keys & 0xf, 0, r->lkey, &lbase);
    rkey  = fuzz_wr_key(r->keys >> 4, 1, r->rkey, &rbase);
    raddr = rbase + (int64_t)r->roffset;

    qpx->wr_id    = wr_id;
    qpx->wr_flags = r->wr_flags;
    switch (r->op % FUZZ_WR_OP_LAST) {
    case FUZZ_WR_SEND:
        ibv_wr_send(qpx);
        break;
    case FUZZ_WR_SEND_IMM:
        ibv_wr_send_imm(qpx, htonl(r->imm));
        break;
    case FUZZ_WR_WRITE:
        ibv_wr_rdma_write(qpx, rkey, raddr);
        break;
    case FUZZ_WR_WRITE_IMM:
        ibv_wr_rdma_write_imm(qpx, rkey, raddr, htonl(r->imm));
        break;
    case FUZZ_WR_READ:
        ibv_wr_rdma_read(qpx, rkey, raddr);
        break;
    case FUZZ_WR_CSWAP:
        ibv_wr_atomic_cmp_swp(qpx, rkey, raddr, r->operand1, r->operand2);
        break;
    case FUZZ_WR_FADD:
        ibv_wr_atomic_fetch_add(qpx, rkey, raddr, r->operand1);
        break;
    case FUZZ_WR_LOCAL_INV:
        ibv_wr_local_inv(qpx, rkey);
        break;
    default:
        ibv_wr_send_inv(qpx, rkey);
        break;
    }

    n = (r->data / FUZZ_WR_DATA_LAST) % (FUZZ_WR_MAX_SGES + 1);
    switch (r->data % FUZZ_WR_DATA_LAST) {
    case FUZZ_WR_DATA_SGE:
        ibv_wr_set_sge(qpx, lkey, lbase + (int64_t)r->loffset,
                       fuzz_wr_length(r, r->length));
        break;
    case FUZZ_WR_DATA_SGE_LIST:
        /* Entries spread from one fuzzed place, keys alternating between
         * the chosen one and the region's own. */
        for (i = 0; i < n; ++i) {
            sges[i].lkey   = (i & 1) ? fuzz_emu.mr->lkey : lkey;
            sges[i].addr   = lbase + (int64_t)r->loffset + (i * 512);
            sges[i].length = fuzz_wr_length(r, r->length >> (i * 4));
        }
        ibv_wr_set_sge_list(qpx, n, sges);
        break;
    case FUZZ_WR_DATA_INLINE:
        /* The caller's memory is the caller's: only the length is fuzzed. */
        length = r->length % sizeof(fuzz_inline_src);
        ibv_wr_set_inline_data(qpx, fuzz_inline_src, length);
        break;
    case FUZZ_WR_DATA_INLINE_LIST:
        for (i = 0; i < n; ++i) {
            bufs[i].addr   = fuzz_inline_src + (i * 64);
            bufs[i].length = (r->length >> (i * 4)) % 512;
        }
        ibv_wr_set_inline_data_list(qpx, n, bufs);
        break;
    default:
        break;
    }

    if (!(r->dc & FUZZ_WR_DC_SKIP)) {
        mlx5dv_wr_set_dc_addr(
                fuzz_emu.dv,
                (r->dc & FUZZ_WR_DC_NO_LID) ? fuzz_no_lid_ah : fuzz_emu.ah,
                (r->dc & FUZZ_WR_DC_DCTN) ? r->dctn : fuzz_emu.dct->qp_num,
                (r->dc & FUZZ_WR_DC_KEY) ? r->dc_key : fuzz_emu.dc_key);
    }
}

static void fuzz_wr_seed(const char *dir, const char *name,
                         const fuzz_wr_record_t *records, unsigned count)
{
    char path[4096];
    FILE *file;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    file = fopen(path, "w");
    if ((file == NULL) || (fputc(count, file) == EOF) ||
        (fwrite(records, sizeof(*records), count, file) != count) ||
        (fputc(0, file) == EOF) || (fclose(file) != 0)) {
        dcx_fuzz_fatal("writing %s: %m", path);
    }
}

static void fuzz_wr_write_seeds(const char *dir)
{
    fuzz_wr_record_t r[FUZZ_WR_MAX_BATCH];

    memset(r, 0, sizeof(r));
    r[0].wr_flags = IBV_SEND_SIGNALED;
    r[0].length   = 64;
    r[0].roffset  = 128;
    r[0].imm      = 7;
    r[0].operand1 = 1;

    r[0].op = FUZZ_WR_WRITE;
    fuzz_wr_seed(dir, "write", r, 1);
    r[0].op = FUZZ_WR_READ;
    fuzz_wr_seed(dir, "read", r, 1);
    r[0].op = FUZZ_WR_SEND_IMM;
    fuzz_wr_seed(dir, "send-imm", r, 1);
    r[0].op     = FUZZ_WR_FADD;
    r[0].length = 8;
    fuzz_wr_seed(dir, "fetch-add", r, 1);
    r[0].op = FUZZ_WR_CSWAP;
    fuzz_wr_seed(dir, "cswap", r, 1);

    r[0].op     = FUZZ_WR_SEND;
    r[0].data   = FUZZ_WR_DATA_INLINE;
    r[0].length = 32;
    r[1]        = r[0];
    r[1].op     = FUZZ_WR_WRITE_IMM;
    r[1].data   = FUZZ_WR_DATA_SGE_LIST + (3 * FUZZ_WR_DATA_LAST);
    r[1].length = 0x444;
    r[2]        = r[0];
    r[2].op     = FUZZ_WR_WRITE;
    r[2].data   = FUZZ_WR_DATA_INLINE_LIST + (2 * FUZZ_WR_DATA_LAST);
    r[2].length = 0x22;
    fuzz_wr_seed(dir, "batch", r, 3);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct ibv_ah *(*create_ah)(struct ibv_pd *, struct ibv_ah_attr *);
    struct ibv_ah_attr ah_attr;
    const char *seeds;
    void *lib;

    dcx_fuzz_env_init("wr", argc, argv);
    dcx_fuzz_emu_open(&fuzz_emu, FUZZ_WR_BUF_LEN, 1, 1);

    if (posix_memalign(&fuzz_local_buf, 4096, 4096) != 0) {
        dcx_fuzz_fatal("out of memory");
    }
    memset(fuzz_local_buf, 0, 4096);
    fuzz_local_mr = fuzz_emu.reg_mr(fuzz_emu.pd, fuzz_local_buf, 4096,
                                    IBV_ACCESS_LOCAL_WRITE);
    lib           = dlopen(dcx_fuzz_emu_lib(), RTLD_NOW | RTLD_NOLOAD);
    create_ah     = (lib == NULL) ? NULL : dlsym(lib, "dcxemu_ibv_create_ah");
    if ((fuzz_local_mr == NULL) || (create_ah == NULL)) {
        dcx_fuzz_fatal("setting up the raw device failed");
    }
    memset(&ah_attr, 0, sizeof(ah_attr));
    ah_attr.dlid     = 0x1234; /* no member has this LID */
    ah_attr.port_num = 1;
    fuzz_no_lid_ah   = create_ah(fuzz_emu.pd, &ah_attr);
    if (fuzz_no_lid_ah == NULL) {
        dcx_fuzz_fatal("creating an address handle to lid 0x1234 failed");
    }
    memset(fuzz_inline_src, 0x3c, sizeof(fuzz_inline_src));

    seeds = getenv("DCX_FUZZ_SEEDS");
    if (seeds != NULL) {
        fuzz_wr_write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcx_fuzz_input_t in = { data, size };
    fuzz_wr_record_t record;
    unsigned batch, i, count;
    uint64_t wr_id = 0;

    for (batch = 0; (batch < FUZZ_WR_MAX_BATCHES) && (in.left > 0); ++batch) {
        count = (dcx_fuzz_u8(&in) % FUZZ_WR_MAX_BATCH) + 1;
        ibv_wr_start(fuzz_emu.qpx);
        for (i = 0; i < count; ++i) {
            dcx_fuzz_bytes(&in, &record, sizeof(record));
            fuzz_wr_build(&record, wr_id++);
        }
        if (dcx_fuzz_u8(&in) & 1) {
            ibv_wr_abort(fuzz_emu.qpx);
        } else {
            /* 0 or the errno of an invalid request: both are answers. */
            (void)ibv_wr_complete(fuzz_emu.qpx);
        }
    }

    (void)dcx_fuzz_emu_drain(&fuzz_emu, NULL, NULL);
    return 0;
}
