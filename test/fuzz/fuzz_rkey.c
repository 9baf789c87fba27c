/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * fuzz_rkey: a remote key buffer from a peer (what UCP passes to
 * uct_rkey_unpack) is unpacked and then used by an operation on an endpoint
 * to a real dcx interface, whose registered buffer it may or may not name.
 *
 * Input: the packed key (rkey_packed_size bytes), then the operation (one
 * byte), a signed 16-bit offset from the start of the registered buffer and
 * a length byte. A key or address the device rejects fails the endpoint
 * (remote access error), which is recreated for the next input.
 */
#include "fuzz_util.h"

#include <ucs/sys/math.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_RKEY_BUF_LEN 4096

enum {
    FUZZ_RKEY_OP_PUT_SHORT,
    FUZZ_RKEY_OP_PUT_BCOPY,
    FUZZ_RKEY_OP_PUT_ZCOPY,
    FUZZ_RKEY_OP_GET_BCOPY,
    FUZZ_RKEY_OP_GET_ZCOPY,
    FUZZ_RKEY_OP_ATOMIC_ADD,
    FUZZ_RKEY_OP_ATOMIC_FADD,
    FUZZ_RKEY_OP_ATOMIC_CSWAP,
    FUZZ_RKEY_OP_LAST
};

static dcx_fuzz_iface_t fuzz_iface;
static dcx_fuzz_buf_t fuzz_remote, fuzz_local;
static uct_ep_h fuzz_ep;
static int fuzz_ep_failed;

static ucs_status_t
fuzz_rkey_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    if (ep == fuzz_ep) {
        fuzz_ep_failed = 1;
    }
    return UCS_OK;
}

static void fuzz_rkey_ep_create(void)
{
    uct_ep_params_t params = {};

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = fuzz_iface.iface;
    params.dev_addr   = (const uct_device_addr_t *)fuzz_iface.dev_addr;
    params.iface_addr = (const uct_iface_addr_t *)fuzz_iface.iface_addr;
    if (uct_ep_create(&params, &fuzz_ep) != UCS_OK) {
        dcx_fuzz_fatal("connecting to the interface itself failed");
    }
    fuzz_ep_failed = 0;
}

static size_t fuzz_rkey_pack_cb(void *dest, void *arg)
{
    size_t length = *(size_t *)arg;

    memset(dest, 0x5a, length);
    return length;
}

static void fuzz_rkey_comp_cb(uct_completion_t *self)
{
}

static void fuzz_rkey_unpack_cb(void *arg, const void *data, size_t length)
{
    memcpy(fuzz_local.ptr, data, length);
}

/* One seed: the interface's real packed key, an operation and a place. */
static void fuzz_rkey_write_seed(const char *dir, unsigned op, int16_t offset,
                                 uint8_t length)
{
    char path[4096];
    FILE *file;

    snprintf(path, sizeof(path), "%s/op%u-off%d-len%u", dir, op, offset,
             length);
    file = fopen(path, "w");
    if ((file == NULL) ||
        (fwrite(fuzz_remote.packed_rkey, fuzz_iface.rkey_packed_size, 1,
                file) != 1) ||
        (fputc(op, file) == EOF) ||
        (fwrite(&offset, sizeof(offset), 1, file) != 1) ||
        (fputc(length, file) == EOF) || (fclose(file) != 0)) {
        dcx_fuzz_fatal("writing %s: %m", path);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const config[] = { "TIMEOUT=100us", "RETRY_COUNT=1",
                                          "RNR_RETRY_COUNT=1", "NUM_DCI=4",
                                          NULL };
    const char *seeds;
    unsigned op;

    dcx_fuzz_env_init("rkey", argc, argv);
    dcx_fuzz_iface_open(&fuzz_iface, config, fuzz_rkey_err_handler, NULL);
    dcx_fuzz_buf_reg(&fuzz_iface, &fuzz_remote, FUZZ_RKEY_BUF_LEN);
    dcx_fuzz_buf_reg(&fuzz_iface, &fuzz_local, FUZZ_RKEY_BUF_LEN);
    fuzz_rkey_ep_create();

    seeds = getenv("DCX_FUZZ_SEEDS");
    if (seeds != NULL) {
        for (op = 0; op < FUZZ_RKEY_OP_LAST; ++op) {
            fuzz_rkey_write_seed(seeds, op, 64, 8);
        }
        fuzz_rkey_write_seed(seeds, FUZZ_RKEY_OP_PUT_BCOPY, 4000, 200);
        fuzz_rkey_write_seed(seeds, FUZZ_RKEY_OP_GET_ZCOPY, -8, 16);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcx_fuzz_input_t in = { data, size };
    uint8_t packed[64], op;
    uct_rkey_bundle_t bundle;
    uct_completion_t comp;
    ucs_status_t status;
    uint64_t raddr, result;
    uct_iov_t iov;
    size_t length;
    int16_t offset;

    dcx_fuzz_bytes(&in, packed, fuzz_iface.rkey_packed_size);
    op     = dcx_fuzz_u8(&in) % FUZZ_RKEY_OP_LAST;
    offset = (int16_t)dcx_fuzz_u16(&in);
    length = dcx_fuzz_u8(&in);
    raddr  = (uintptr_t)fuzz_remote.ptr + (int64_t)offset;

    /* The length is the local caller's, within the interface's limits. */
    switch (op) {
    case FUZZ_RKEY_OP_PUT_SHORT:
        length = ucs_min(length, fuzz_iface.attr.cap.put.max_short);
        break;
    case FUZZ_RKEY_OP_PUT_BCOPY:
        length = ucs_min(length, fuzz_iface.attr.cap.put.max_bcopy);
        break;
    case FUZZ_RKEY_OP_GET_BCOPY:
        length = ucs_min(length, fuzz_iface.attr.cap.get.max_bcopy);
        break;
    case FUZZ_RKEY_OP_GET_ZCOPY:
        length = ucs_max(ucs_min(length, fuzz_iface.attr.cap.get.max_zcopy),
                         fuzz_iface.attr.cap.get.min_zcopy);
        break;
    case FUZZ_RKEY_OP_PUT_ZCOPY:
        length = ucs_min(length, fuzz_iface.attr.cap.put.max_zcopy);
        break;
    }

    if (uct_rkey_unpack(fuzz_iface.component, packed, &bundle) != UCS_OK) {
        return 0;
    }

    comp.func   = fuzz_rkey_comp_cb;
    comp.count  = INT32_MAX; /* waited for by the flush below */
    comp.status = UCS_OK;
    iov.buffer  = fuzz_local.ptr;
    iov.length  = length;
    iov.memh    = fuzz_local.memh;
    iov.stride  = 0;
    iov.count   = 1;

    switch (op) {
    case FUZZ_RKEY_OP_PUT_SHORT:
        status = uct_ep_put_short(fuzz_ep, fuzz_local.ptr, length, raddr,
                                  bundle.rkey);
        break;
    case FUZZ_RKEY_OP_PUT_BCOPY:
        status = (ucs_status_t)uct_ep_put_bcopy(fuzz_ep, fuzz_rkey_pack_cb,
                                                &length, raddr, bundle.rkey);
        break;
    case FUZZ_RKEY_OP_PUT_ZCOPY:
        status = uct_ep_put_zcopy(fuzz_ep, &iov, 1, raddr, bundle.rkey, &comp);
        break;
    case FUZZ_RKEY_OP_GET_BCOPY:
        status = uct_ep_get_bcopy(fuzz_ep, fuzz_rkey_unpack_cb, NULL, length,
                                  raddr, bundle.rkey, &comp);
        break;
    case FUZZ_RKEY_OP_GET_ZCOPY:
        status = uct_ep_get_zcopy(fuzz_ep, &iov, 1, raddr, bundle.rkey, &comp);
        break;
    case FUZZ_RKEY_OP_ATOMIC_ADD:
        status = uct_ep_atomic64_post(fuzz_ep, UCT_ATOMIC_OP_ADD, length, raddr,
                                      bundle.rkey);
        break;
    case FUZZ_RKEY_OP_ATOMIC_FADD:
        status = uct_ep_atomic64_fetch(fuzz_ep, UCT_ATOMIC_OP_ADD, length,
                                       &result, raddr, bundle.rkey, &comp);
        break;
    default:
        status = uct_ep_atomic_cswap64(fuzz_ep, 0, length, raddr, bundle.rkey,
                                       &result, &comp);
        break;
    }

    /* Whatever the operation returned (done, in progress, no resource,
     * refused), a flush completes it, or reports the endpoint's failure. */
    (void)status;
    (void)dcx_fuzz_ep_flush(&fuzz_iface, fuzz_ep);
    uct_rkey_release(fuzz_iface.component, &bundle);

    if (fuzz_ep_failed) {
        uct_ep_destroy(fuzz_ep);
        fuzz_rkey_ep_create();
    }
    return 0;
}
