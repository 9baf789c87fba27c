/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Shared pieces of the libFuzzer targets (contrib/dcx fuzz, docs/fuzzing.md):
 * the process environment, a dcx interface on the software DC device, a
 * reader of fuzzed bytes, and progress that is bounded whatever the input.
 */
#ifndef DCX_FUZZ_UTIL_H_
#define DCX_FUZZ_UTIL_H_

#include <uct/api/uct.h>

#include <stddef.h>
#include <stdint.h>


/* Bounds of one wait: a wait that reaches one of them means that dcx or the
 * device model hangs on this input, which is a finding. The device model's
 * timers (transport and RNR retries) run on its engine thread in real
 * time, so time is the bound that counts on a loaded host; the count of
 * progress calls (about a microsecond each) only backs it up. */
#define DCX_FUZZ_MAX_PROGRESS 50000000u
#define DCX_FUZZ_MAX_SECONDS  10.0


/* Headroom of every received descriptor: a kept active message is released
 * as (char*)data - DCX_FUZZ_RX_HEADROOM. */
#define DCX_FUZZ_RX_HEADROOM 16


/* Fuzzed bytes, taken from the front; exhausted input reads as zeros. */
typedef struct {
    const uint8_t *data;
    size_t left;
} dcx_fuzz_input_t;

uint8_t dcx_fuzz_u8(dcx_fuzz_input_t *in);
uint16_t dcx_fuzz_u16(dcx_fuzz_input_t *in);
uint32_t dcx_fuzz_u32(dcx_fuzz_input_t *in);
uint64_t dcx_fuzz_u64(dcx_fuzz_input_t *in);
/* Up to max bytes into buf; returns how many (the rest of buf is zeroed). */
size_t dcx_fuzz_bytes(dcx_fuzz_input_t *in, void *buf, size_t max);


/* A setup step failed: not a finding about the input, but the target
 * cannot run; libFuzzer reports it as a crash with this message. */
void dcx_fuzz_fatal(const char *fmt, ...)
        __attribute__((noreturn, format(printf, 1, 2)));

/*
 * Called first from LLVMFuzzerInitialize: the settings UCX and the device
 * model read when they load (so the process re-executes itself once with
 * them set): dcx on the device model of this build tree, a fabric of its
 * own (DCXEMU_FABRIC, default dcx-fuzz-<name>-<pid>), short transport
 * timers, UCX's own error handler off (crashes belong to the sanitizers
 * and libFuzzer), UCX's log at fatal unless UCX_LOG_LEVEL is set.
 */
void dcx_fuzz_env_init(const char *name, int *argc, char ***argv);

/* The path of the device model library dcx uses (same instance). */
const char *dcx_fuzz_emu_lib(void);


/* One dcx interface on device dcxemu0:1, its worker and memory domain. */
typedef struct {
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_component_h component;
    uct_md_h md;
    uct_iface_h iface;
    uct_iface_attr_t attr;
    size_t rkey_packed_size;
    uint8_t dev_addr[64];
    uint8_t iface_addr[64];
} dcx_fuzz_iface_t;

/* config: NULL-terminated "NAME=VALUE" settings of the iface (DCX_ names
 * without the prefix), err_handler may be NULL. */
void dcx_fuzz_iface_open(dcx_fuzz_iface_t *f, const char *const *config,
                         uct_error_handler_t err_handler, void *err_arg);

/* A registered buffer of the interface's memory domain. */
typedef struct {
    void *ptr;
    size_t length;
    uct_mem_h memh;
    uint8_t packed_rkey[64];
} dcx_fuzz_buf_t;

void dcx_fuzz_buf_reg(dcx_fuzz_iface_t *f, dcx_fuzz_buf_t *buf, size_t length);

/* Monotonic seconds. */
double dcx_fuzz_now(void);

/* Progress until *done is non-zero; aborts (a finding) when a bound is
 * reached, naming what it waited for. */
void dcx_fuzz_wait(dcx_fuzz_iface_t *f, const volatile int *done,
                   const char *what);

/* Progress at most count times (returns when nothing progressed). */
void dcx_fuzz_progress(dcx_fuzz_iface_t *f, unsigned count);

/* Flush an endpoint with a completion and wait for it (bounded); returns
 * the flush status. */
ucs_status_t dcx_fuzz_ep_flush(dcx_fuzz_iface_t *f, uct_ep_h ep);

#endif
