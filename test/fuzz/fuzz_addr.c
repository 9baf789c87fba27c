/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * fuzz_addr: a peer's device and interface addresses (what UCP unpacks from
 * a worker address and hands to the transport) are checked for
 * reachability, an endpoint is created from them, and a put and an active
 * message go out on it, followed by a flush: the address may name this
 * interface, a LID or DCT nobody has, a wrong DC key, or another kind of
 * fabric.
 *
 * Input: the device address, the interface address (iface_addr_len bytes),
 * then one byte of operations (bit 0: put_short, bit 1: am_short, bit 2:
 * put_bcopy). The device address is as long as a peer packs it: its header,
 * then a GID when its flags say one follows (UCT passes no address lengths;
 * a peer's device_addr_len covers its GID). Both addresses live in buffers
 * of exactly their length, so a read past either one is reported.
 *
 * An interface's DC key is random per run, so the seeds carry
 * FUZZ_ADDR_SEED_KEY in its place (dcx_iface.h: uct_dcx_iface_addr_t, bytes
 * 4..11), which the target replaces with this run's key; any other value
 * is used as it is (a wrong key but for a chance of 2^-64).
 */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ADDR_SEED_KEY   0x59454b4445455344ull /* "DSEEDKEY" */
#define FUZZ_ADDR_KEY_OFFSET 4

/* The device address's wire format (dcx_iface.h: uct_dcx_dev_addr_t): a
 * 16-bit LID, a flags byte, then a GID when flag bit 0 (RoCE) or bit 3
 * (InfiniBand, global addressing) is set. */
#define FUZZ_ADDR_DEV_HDR_LEN   3
#define FUZZ_ADDR_DEV_FLAGS     2
#define FUZZ_ADDR_DEV_GID_FLAGS 0x09
#define FUZZ_ADDR_GID_LEN       16

static dcx_fuzz_iface_t fuzz_iface;
static dcx_fuzz_buf_t fuzz_target;
static uct_rkey_bundle_t fuzz_rkey;
static uint8_t *fuzz_dev_addr, *fuzz_dev_addr_gid, *fuzz_iface_addr;

static ucs_status_t
fuzz_addr_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    return UCS_OK;
}

static ucs_status_t
fuzz_addr_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    return UCS_OK;
}

static size_t fuzz_addr_pack_cb(void *dest, void *arg)
{
    memset(dest, 0x77, 64);
    return 64;
}

static void fuzz_addr_write_seed(const char *dir, const char *name,
                                 const uint8_t *dev_addr, size_t dev_addr_len,
                                 const uint8_t *iface_addr, uint8_t ops)
{
    char path[4096];
    FILE *file;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    file = fopen(path, "w");
    if ((file == NULL) || (fwrite(dev_addr, dev_addr_len, 1, file) != 1) ||
        (fwrite(iface_addr, fuzz_iface.attr.iface_addr_len, 1, file) != 1) ||
        (fputc(ops, file) == EOF) || (fclose(file) != 0)) {
        dcx_fuzz_fatal("writing %s: %m", path);
    }
}

static void fuzz_addr_write_seeds(const char *dir)
{
    size_t dev_addr_len = fuzz_iface.attr.device_addr_len;
    uint8_t dev_addr[64], iface_addr[64], self[64];
    uint64_t key = FUZZ_ADDR_SEED_KEY;

    memcpy(self, fuzz_iface.iface_addr, sizeof(self));
    memcpy(self + FUZZ_ADDR_KEY_OFFSET, &key, sizeof(key));
    fuzz_addr_write_seed(dir, "self-put", fuzz_iface.dev_addr, dev_addr_len,
                         self, 1);
    fuzz_addr_write_seed(dir, "self-all", fuzz_iface.dev_addr, dev_addr_len,
                         self, 7);

    /* A DCT that does not exist (the DCT number's top byte set). */
    memcpy(iface_addr, self, sizeof(iface_addr));
    iface_addr[2] ^= 0x80;
    fuzz_addr_write_seed(dir, "no-dct", fuzz_iface.dev_addr, dev_addr_len,
                         iface_addr, 1);

    /* The right DCT, a wrong key. */
    memcpy(iface_addr, self, sizeof(iface_addr));
    iface_addr[4] ^= 1;
    fuzz_addr_write_seed(dir, "bad-key", fuzz_iface.dev_addr, dev_addr_len,
                         iface_addr, 3);

    /* A RoCE (global) address on an IB fabric, with a link-local GID. */
    memset(dev_addr, 0, sizeof(dev_addr));
    memcpy(dev_addr, fuzz_iface.dev_addr, FUZZ_ADDR_DEV_HDR_LEN);
    dev_addr[FUZZ_ADDR_DEV_FLAGS] |= 1;
    dev_addr[FUZZ_ADDR_DEV_HDR_LEN]     = 0xfe;
    dev_addr[FUZZ_ADDR_DEV_HDR_LEN + 1] = 0x80;
    fuzz_addr_write_seed(dir, "global", dev_addr,
                         FUZZ_ADDR_DEV_HDR_LEN + FUZZ_ADDR_GID_LEN, self, 1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const config[] = {
        "TIMEOUT=100us", "RETRY_COUNT=1",        "RNR_RETRY_COUNT=1",
        "NUM_DCI=4",     "FC_GRANT_TIMEOUT=1ms", NULL
    };
    const char *seeds;

    dcx_fuzz_env_init("addr", argc, argv);
    dcx_fuzz_iface_open(&fuzz_iface, config, fuzz_addr_err_handler, NULL);
    dcx_fuzz_buf_reg(&fuzz_iface, &fuzz_target, 4096);
    if ((uct_rkey_unpack(fuzz_iface.component, fuzz_target.packed_rkey,
                         &fuzz_rkey) != UCS_OK) ||
        (uct_iface_set_am_handler(fuzz_iface.iface, 5, fuzz_addr_am_handler,
                                  NULL, 0) != UCS_OK)) {
        dcx_fuzz_fatal("setting up the interface failed");
    }
    if (fuzz_iface.attr.iface_addr_len < FUZZ_ADDR_KEY_OFFSET + 8) {
        dcx_fuzz_fatal("the interface address has no DC key");
    }
    fuzz_dev_addr     = malloc(FUZZ_ADDR_DEV_HDR_LEN);
    fuzz_dev_addr_gid = malloc(FUZZ_ADDR_DEV_HDR_LEN + FUZZ_ADDR_GID_LEN);
    fuzz_iface_addr   = malloc(fuzz_iface.attr.iface_addr_len);
    if ((fuzz_dev_addr == NULL) || (fuzz_dev_addr_gid == NULL) ||
        (fuzz_iface_addr == NULL)) {
        dcx_fuzz_fatal("out of memory");
    }

    seeds = getenv("DCX_FUZZ_SEEDS");
    if (seeds != NULL) {
        fuzz_addr_write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcx_fuzz_input_t in    = { data, size };
    uct_ep_params_t params = {};
    uint64_t payload       = 0x1122334455667788ull;
    uct_ep_h ep;
    uint8_t header[FUZZ_ADDR_DEV_HDR_LEN];
    uint8_t *dev_addr;
    uint64_t key;
    uint8_t ops;

    dcx_fuzz_bytes(&in, header, sizeof(header));
    if (header[FUZZ_ADDR_DEV_FLAGS] & FUZZ_ADDR_DEV_GID_FLAGS) {
        dev_addr = fuzz_dev_addr_gid;
        dcx_fuzz_bytes(&in, dev_addr + sizeof(header), FUZZ_ADDR_GID_LEN);
    } else {
        dev_addr = fuzz_dev_addr;
    }
    memcpy(dev_addr, header, sizeof(header));
    dcx_fuzz_bytes(&in, fuzz_iface_addr, fuzz_iface.attr.iface_addr_len);
    ops = dcx_fuzz_u8(&in);
    memcpy(&key, fuzz_iface_addr + FUZZ_ADDR_KEY_OFFSET, sizeof(key));
    if (key == FUZZ_ADDR_SEED_KEY) {
        memcpy(fuzz_iface_addr + FUZZ_ADDR_KEY_OFFSET,
               fuzz_iface.iface_addr + FUZZ_ADDR_KEY_OFFSET, sizeof(key));
    }

    /* UCP asks first; an endpoint must refuse what is not reachable on its
     * own too, so it is created either way. */
    (void)uct_iface_is_reachable(fuzz_iface.iface,
                                 (const uct_device_addr_t *)dev_addr,
                                 (const uct_iface_addr_t *)fuzz_iface_addr);

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = fuzz_iface.iface;
    params.dev_addr   = (const uct_device_addr_t *)dev_addr;
    params.iface_addr = (const uct_iface_addr_t *)fuzz_iface_addr;
    if (uct_ep_create(&params, &ep) != UCS_OK) {
        return 0;
    }

    /* Any status is an answer (done, no resource, the endpoint failed);
     * the flush below waits for whatever went out. */
    if (ops & 1) {
        (void)uct_ep_put_short(ep, &payload, sizeof(payload),
                               (uintptr_t)fuzz_target.ptr + 64, fuzz_rkey.rkey);
    }
    if (ops & 2) {
        (void)uct_ep_am_short(ep, 5, 0x42, &payload, sizeof(payload));
    }
    if (ops & 4) {
        (void)uct_ep_put_bcopy(ep, fuzz_addr_pack_cb, NULL,
                               (uintptr_t)fuzz_target.ptr + 128,
                               fuzz_rkey.rkey);
    }
    (void)dcx_fuzz_ep_flush(&fuzz_iface, ep);
    uct_ep_destroy(ep);
    /* Messages this interface sent to itself. */
    dcx_fuzz_progress(&fuzz_iface, 64);
    return 0;
}
