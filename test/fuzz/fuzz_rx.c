/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * fuzz_rx: a hostile peer on the fabric. A raw DCI of the device model in
 * this process sends fuzzed messages to a real dcx interface's DCT, with the
 * interface's DC key (a peer that learnt its address) or a fuzzed one, and
 * the interface is progressed: active messages with any id and length,
 * flow-control credit requests and grants with any contents, other
 * immediate data, RDMA writes with immediate, messages longer than a
 * receive buffer. The requests' grants go wherever the request says: the
 * seeds point them at the raw device's own DCT.
 *
 * Input: up to FUZZ_RX_MAX_MSGS records of
 *   kind (1 byte), flags (1 byte), immediate (4), length (2), payload.
 * The payload is the rest of the record's bytes up to its length (short
 * input reads as zeros).
 */
#include "fuzz_emu.h"
#include "fuzz_util.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_RX_MAX_MSGS     16
#define FUZZ_RX_BUF_LEN      16384
#define FUZZ_RX_MAX_KEPT     64
#define FUZZ_RX_IMM_FC_REQ   0xfc01u /* dcx_iface.h: UCT_DCX_IMM_FC_* */
#define FUZZ_RX_IMM_FC_GRANT 0xfc02u

enum {
    FUZZ_RX_SEND, /* no immediate data */
    FUZZ_RX_SEND_IMM, /* immediate as given */
    FUZZ_RX_SEND_AM, /* immediate: an active message id (imm % 32) */
    FUZZ_RX_SEND_FC_REQ, /* immediate: a credit request */
    FUZZ_RX_SEND_FC_GRANT, /* immediate: a credit grant */
    FUZZ_RX_WRITE_IMM, /* RDMA write with immediate into the buffer */
    FUZZ_RX_KIND_LAST
};

enum {
    FUZZ_RX_FLAG_INLINE  = 1, /* payload inline in the WQE */
    FUZZ_RX_FLAG_BAD_KEY = 2, /* DC key: not the interface's */
    FUZZ_RX_FLAG_KEEP    = 4 /* the AM handler keeps the descriptor */
};

static dcx_fuzz_iface_t fuzz_iface;
static dcx_fuzz_buf_t fuzz_target;
static dcx_fuzz_emu_t fuzz_emu;
static uint32_t fuzz_dctn;
static uint64_t fuzz_dc_key;
static void *fuzz_kept[FUZZ_RX_MAX_KEPT];
static unsigned fuzz_num_kept;
static int fuzz_keep_next;
static uint64_t fuzz_am_bytes;

static ucs_status_t
fuzz_rx_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    const uint8_t *p = data;
    size_t i;

    /* Touch every byte dcx says it delivered. */
    for (i = 0; i < length; ++i) {
        fuzz_am_bytes += p[i];
    }
    if (fuzz_keep_next && (flags & UCT_CB_PARAM_FLAG_DESC) &&
        (fuzz_num_kept < FUZZ_RX_MAX_KEPT)) {
        fuzz_kept[fuzz_num_kept++] = (char *)data - DCX_FUZZ_RX_HEADROOM;
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

static void fuzz_rx_progress(void *arg)
{
    uct_worker_progress(fuzz_iface.worker);
}

/* What the seeds hold: a credit request whose grant reaches the raw DCT
 * (dcx_iface.h: uct_dcx_fc_request_t), and a grant. */
static size_t fuzz_rx_fc_request(uint8_t *p)
{
    uint64_t ep_id = 0x1234, key = fuzz_emu.dc_key;
    uint32_t dctn    = fuzz_emu.dct->qp_num;
    uint16_t credits = 4, lid = 1;

    memcpy(p, &ep_id, 8);
    memcpy(p + 8, &key, 8);
    p[16] = dctn & 0xff;
    p[17] = (dctn >> 8) & 0xff;
    p[18] = (dctn >> 16) & 0xff;
    p[19] = 1; /* sn */
    memcpy(p + 20, &credits, 2);
    memcpy(p + 22, &lid, 2);
    p[24] = 0; /* dev_flags */
    return 25;
}

static void fuzz_rx_seed_record(FILE *file, uint8_t kind, uint8_t flags,
                                uint32_t imm, const uint8_t *payload,
                                uint16_t length)
{
    if ((fputc(kind, file) == EOF) || (fputc(flags, file) == EOF) ||
        (fwrite(&imm, 4, 1, file) != 1) || (fwrite(&length, 2, 1, file) != 1) ||
        ((length > 0) && (fwrite(payload, length, 1, file) != 1))) {
        dcx_fuzz_fatal("writing a seed: %m");
    }
}

static FILE *fuzz_rx_seed_open(const char *dir, const char *name)
{
    char path[4096];
    FILE *file;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    file = fopen(path, "w");
    if (file == NULL) {
        dcx_fuzz_fatal("writing %s: %m", path);
    }
    return file;
}

static void fuzz_rx_seed_close(FILE *file)
{
    if (fclose(file) != 0) {
        dcx_fuzz_fatal("writing a seed: %m");
    }
}

static void fuzz_rx_write_seeds(const char *dir)
{
    uint8_t payload[256];
    size_t len;
    FILE *file;

    memset(payload, 0xab, sizeof(payload));
    file = fuzz_rx_seed_open(dir, "am-short");
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_AM, 0, 3, payload, 8);
    fuzz_rx_seed_close(file);

    file = fuzz_rx_seed_open(dir, "am-kept-inline");
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_AM,
                        FUZZ_RX_FLAG_INLINE | FUZZ_RX_FLAG_KEEP, 31, payload,
                        100);
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_AM, 0, 0, payload, 0);
    fuzz_rx_seed_close(file);

    len  = fuzz_rx_fc_request(payload);
    file = fuzz_rx_seed_open(dir, "fc-request");
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_FC_REQ, 0, 0, payload, len);
    fuzz_rx_seed_close(file);

    file = fuzz_rx_seed_open(dir, "fc-grant");
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_FC_GRANT, 0, 0, payload, 11);
    fuzz_rx_seed_close(file);

    memset(payload, 0xcd, sizeof(payload));
    file = fuzz_rx_seed_open(dir, "imm-write-send");
    fuzz_rx_seed_record(file, FUZZ_RX_WRITE_IMM, 0, 7, payload, 64);
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_IMM, 0, 0x12345678, payload, 16);
    fuzz_rx_seed_record(file, FUZZ_RX_SEND, 0, 0, payload, 32);
    fuzz_rx_seed_close(file);

    file = fuzz_rx_seed_open(dir, "bad-key");
    fuzz_rx_seed_record(file, FUZZ_RX_SEND_AM, FUZZ_RX_FLAG_BAD_KEY, 1, payload,
                        8);
    fuzz_rx_seed_close(file);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const config[] = {
        "RX_QUEUE_LEN=128",  "TIMEOUT=100us", "RETRY_COUNT=1",
        "RNR_RETRY_COUNT=1", "NUM_DCI=4",     NULL
    };
    const char *seeds;
    uint8_t id;

    dcx_fuzz_env_init("rx", argc, argv);
    dcx_fuzz_iface_open(&fuzz_iface, config, NULL, NULL);
    dcx_fuzz_buf_reg(&fuzz_iface, &fuzz_target, FUZZ_RX_BUF_LEN);
    for (id = 0; id < UCT_AM_ID_MAX; ++id) {
        if (uct_iface_set_am_handler(fuzz_iface.iface, id, fuzz_rx_am_handler,
                                     NULL, 0) != UCS_OK) {
            dcx_fuzz_fatal("setting active message handler %u failed", id);
        }
    }

    /* dcx_iface.h: uct_dcx_iface_addr_t (24-bit DCT number, flags, key). */
    fuzz_dctn = fuzz_iface.iface_addr[0] |
                ((uint32_t)fuzz_iface.iface_addr[1] << 8) |
                ((uint32_t)fuzz_iface.iface_addr[2] << 16);
    memcpy(&fuzz_dc_key, &fuzz_iface.iface_addr[4], sizeof(fuzz_dc_key));

    /* The hostile peer: the raw DCI gives up after one retry. */
    dcx_fuzz_emu_open(&fuzz_emu, FUZZ_RX_BUF_LEN, 1, 1);

    seeds = getenv("DCX_FUZZ_SEEDS");
    if (seeds != NULL) {
        fuzz_rx_write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcx_fuzz_input_t in   = { data, size };
    struct ibv_qp_ex *qpx = fuzz_emu.qpx;
    uint8_t kind, flags;
    unsigned i, num_msgs;
    uint16_t length;
    uint32_t imm;
    int ret;

    fuzz_num_kept  = 0;
    fuzz_keep_next = 0;

    for (num_msgs = 0; (num_msgs < FUZZ_RX_MAX_MSGS) && (in.left > 0);
         ++num_msgs) {
        kind   = dcx_fuzz_u8(&in) % FUZZ_RX_KIND_LAST;
        flags  = dcx_fuzz_u8(&in);
        imm    = dcx_fuzz_u32(&in);
        length = dcx_fuzz_u16(&in) % FUZZ_RX_BUF_LEN;
        dcx_fuzz_bytes(&in, fuzz_emu.buf, length);

        ibv_wr_start(qpx);
        qpx->wr_id    = num_msgs;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        switch (kind) {
        case FUZZ_RX_SEND:
            ibv_wr_send(qpx);
            break;
        case FUZZ_RX_SEND_IMM:
            ibv_wr_send_imm(qpx, htonl(imm));
            break;
        case FUZZ_RX_SEND_AM:
            ibv_wr_send_imm(qpx, htonl(imm % UCT_AM_ID_MAX));
            break;
        case FUZZ_RX_SEND_FC_REQ:
            ibv_wr_send_imm(qpx, htonl(FUZZ_RX_IMM_FC_REQ));
            break;
        case FUZZ_RX_SEND_FC_GRANT:
            ibv_wr_send_imm(qpx, htonl(FUZZ_RX_IMM_FC_GRANT));
            break;
        default:
            /* Anywhere near the registered buffer: the device checks. */
            ibv_wr_rdma_write_imm(
                    qpx,
                    (uint32_t)fuzz_target.packed_rkey[0] |
                            ((uint32_t)fuzz_target.packed_rkey[1] << 8) |
                            ((uint32_t)fuzz_target.packed_rkey[2] << 16) |
                            ((uint32_t)fuzz_target.packed_rkey[3] << 24),
                    (uintptr_t)fuzz_target.ptr + (imm % (2 * FUZZ_RX_BUF_LEN)),
                    htonl(imm));
            break;
        }
        if ((flags & FUZZ_RX_FLAG_INLINE) && (length <= fuzz_emu.max_inline)) {
            ibv_wr_set_inline_data(qpx, fuzz_emu.buf, length);
        } else {
            ibv_wr_set_sge(qpx, fuzz_emu.mr->lkey, (uintptr_t)fuzz_emu.buf,
                           length);
        }
        mlx5dv_wr_set_dc_addr(fuzz_emu.dv, fuzz_emu.ah, fuzz_dctn,
                              (flags & FUZZ_RX_FLAG_BAD_KEY) ?
                                      fuzz_dc_key ^ imm ^ 1 :
                                      fuzz_dc_key);
        ret = ibv_wr_complete(qpx);
        if (ret != 0) {
            dcx_fuzz_fatal("posting message %u failed: %s", num_msgs,
                           strerror(ret));
        }

        /* Each message's completion before the next message's bytes are
         * written into the send buffer. */
        fuzz_keep_next = !!(flags & FUZZ_RX_FLAG_KEEP);
        (void)dcx_fuzz_emu_drain(&fuzz_emu, fuzz_rx_progress, NULL);
        dcx_fuzz_progress(&fuzz_iface, 64);
    }

    /* Grants dcx sent, receives it refills; then the kept descriptors. */
    dcx_fuzz_progress(&fuzz_iface, 1024);
    for (i = 0; i < fuzz_num_kept; ++i) {
        uct_iface_release_desc(fuzz_kept[i]);
    }
    dcx_fuzz_emu_recv_drain(&fuzz_emu);
    return 0;
}
