/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "fuzz_util.h"

#include <uct/ib/dcx/dcx.h>

#include <ucs/async/async_fwd.h>
#include <ucs/sys/compiler_def.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


uint8_t dcx_fuzz_u8(dcx_fuzz_input_t *in)
{
    uint8_t v;

    dcx_fuzz_bytes(in, &v, sizeof(v));
    return v;
}

uint16_t dcx_fuzz_u16(dcx_fuzz_input_t *in)
{
    uint16_t v;

    dcx_fuzz_bytes(in, &v, sizeof(v));
    return v;
}

uint32_t dcx_fuzz_u32(dcx_fuzz_input_t *in)
{
    uint32_t v;

    dcx_fuzz_bytes(in, &v, sizeof(v));
    return v;
}

uint64_t dcx_fuzz_u64(dcx_fuzz_input_t *in)
{
    uint64_t v;

    dcx_fuzz_bytes(in, &v, sizeof(v));
    return v;
}

size_t dcx_fuzz_bytes(dcx_fuzz_input_t *in, void *buf, size_t max)
{
    size_t n = (in->left < max) ? in->left : max;

    memcpy(buf, in->data, n);
    memset((char *)buf + n, 0, max - n);
    in->data += n;
    in->left -= n;
    return n;
}

void dcx_fuzz_fatal(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dcx fuzz: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

const char *dcx_fuzz_emu_lib(void)
{
    const char *lib = getenv("UCX_DCX_EMU_LIB");

    return (lib != NULL) ? lib : DCX_FUZZ_EMU_LIB;
}

void dcx_fuzz_env_init(const char *name, int *argc, char ***argv)
{
    char fabric[64];

    if (getenv("DCX_FUZZ_ENV") != NULL) {
        return;
    }

    snprintf(fabric, sizeof(fabric), "dcx-fuzz-%s-%d", name, (int)getpid());
    setenv("DCX_FUZZ_ENV", "1", 1);
    setenv("UCX_DCX_EMU", "y", 1);
    setenv("UCX_DCX_EMU_LIB", dcx_fuzz_emu_lib(), 0);
    setenv("DCXEMU_FABRIC", fabric, 0);
    setenv("DCXEMU_TIME_SCALE", "0.01", 0);
    setenv("DCXEMU_EXEC", "immediate", 0);
    /* Crashes are for ASan and libFuzzer to report with the input. */
    setenv("UCX_HANDLE_ERRORS", "none", 1);
    /* Malformed input is logged as an error by design: not per run. */
    setenv("UCX_LOG_LEVEL", "fatal", 0);
    setenv("UCX_VFS_ENABLE", "n", 0);
    /* UCX reads these when libucs loads, before any code of the target. */
    execv("/proc/self/exe", *argv);
    dcx_fuzz_fatal("re-executing %s: %m", (*argv)[0]);
}

static uct_component_h dcx_fuzz_component(void)
{
    uct_component_h *components, found = NULL;
    uct_component_attr_t attr;
    unsigned i, num;

    if (dlopen(DCX_FUZZ_PLUGIN, RTLD_NOW | RTLD_LOCAL) == NULL) {
        dcx_fuzz_fatal("loading the plugin: %s", dlerror());
    }
    if (uct_query_components(&components, &num) != UCS_OK) {
        dcx_fuzz_fatal("uct_query_components failed");
    }
    for (i = 0; i < num; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            !strcmp(attr.name, "dcx")) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    if (found == NULL) {
        dcx_fuzz_fatal("the dcx component is not registered");
    }
    return found;
}

void dcx_fuzz_iface_open(dcx_fuzz_iface_t *f, const char *const *config,
                         uct_error_handler_t err_handler, void *err_arg)
{
    uct_iface_params_t params = {};
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_md_attr_t md_attr;
    ucs_status_t status;
    char name[128];
    const char *eq;

    memset(f, 0, sizeof(*f));
    f->component = dcx_fuzz_component();
    if ((ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &f->async) !=
         UCS_OK) ||
        (uct_worker_create(f->async, UCS_THREAD_MODE_SINGLE, &f->worker) !=
         UCS_OK) ||
        (uct_md_config_read(f->component, NULL, NULL, &md_config) != UCS_OK)) {
        dcx_fuzz_fatal("creating a worker failed");
    }
    status = uct_md_open(f->component, "dcxemu0", md_config, &f->md);
    uct_config_release(md_config);
    if ((status != UCS_OK) ||
        (uct_md_iface_config_read(f->md, "dcx", NULL, NULL, &iface_config) !=
         UCS_OK)) {
        dcx_fuzz_fatal("opening memory domain dcxemu0: %s",
                       ucs_status_string(status));
    }

    for (; (config != NULL) && (*config != NULL); ++config) {
        eq = strchr(*config, '=');
        if ((eq == NULL) || ((size_t)(eq - *config) >= sizeof(name) - 4)) {
            dcx_fuzz_fatal("bad setting %s", *config);
        }
        /* UCX 1.13 matches a name without the table's prefix, 1.16 and
         * later only with it. */
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *config), *config);
        status = uct_config_modify(iface_config, name, eq + 1);
        if (status == UCS_ERR_NO_ELEM) {
            snprintf(name, sizeof(name), "DCX_%.*s", (int)(eq - *config),
                     *config);
            status = uct_config_modify(iface_config, name, eq + 1);
        }
        if (status != UCS_OK) {
            dcx_fuzz_fatal("setting %s: %s", *config,
                           ucs_status_string(status));
        }
    }

    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "dcx";
    params.mode.device.dev_name = "dcxemu0:1";
    params.rx_headroom          = DCX_FUZZ_RX_HEADROOM;
    if (err_handler != NULL) {
        params.field_mask |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                             UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                             UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler       = err_handler;
        params.err_handler_arg   = err_arg;
        params.err_handler_flags = UCT_CB_FLAG_ASYNC;
    }
    status = uct_iface_open(f->md, f->worker, &params, iface_config, &f->iface);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        dcx_fuzz_fatal("opening a dcx interface: %s",
                       ucs_status_string(status));
    }

    if ((uct_iface_query(f->iface, &f->attr) != UCS_OK) ||
        (f->attr.device_addr_len > sizeof(f->dev_addr)) ||
        (f->attr.iface_addr_len > sizeof(f->iface_addr)) ||
        (uct_iface_get_device_address(f->iface,
                                      (uct_device_addr_t *)f->dev_addr) !=
         UCS_OK) ||
        (uct_iface_get_address(f->iface, (uct_iface_addr_t *)f->iface_addr) !=
         UCS_OK) ||
        (uct_md_query(f->md, &md_attr) != UCS_OK) ||
        (md_attr.rkey_packed_size >
         sizeof(((dcx_fuzz_buf_t *)NULL)->packed_rkey))) {
        dcx_fuzz_fatal("querying the dcx interface failed");
    }
    f->rkey_packed_size = md_attr.rkey_packed_size;
    uct_iface_progress_enable(f->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

void dcx_fuzz_buf_reg(dcx_fuzz_iface_t *f, dcx_fuzz_buf_t *buf, size_t length)
{
    buf->length = length;
    if (posix_memalign(&buf->ptr, 4096, length) != 0) {
        dcx_fuzz_fatal("out of memory");
    }
    memset(buf->ptr, 0, length);
    if ((uct_md_mem_reg(f->md, buf->ptr, length, UCT_MD_MEM_ACCESS_ALL,
                        &buf->memh) != UCS_OK) ||
        (uct_md_mkey_pack(f->md, buf->memh, buf->packed_rkey) != UCS_OK)) {
        dcx_fuzz_fatal("registering %zu bytes failed", length);
    }
}

double dcx_fuzz_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

/* What the interface asked of the device when a wait hangs. */
static void dcx_fuzz_print_tx(dcx_fuzz_iface_t *f)
{
    ucs_status_t (*query)(uct_iface_h, uct_dcx_tx_counters_t *) = NULL;
    uct_dcx_tx_counters_t tx;
    void *plugin;

    plugin = dlopen(DCX_FUZZ_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
    if (plugin != NULL) {
        query = (ucs_status_t(*)(uct_iface_h, uct_dcx_tx_counters_t *))
                dlsym(plugin, "uct_dcx_iface_query_tx");
    }
    if ((query != NULL) && (query(f->iface, &tx) == UCS_OK)) {
        fprintf(stderr,
                "dcx fuzz: interface: %lu work requests, %lu "
                "signaled, %lu cqes, %lu completion requests\n",
                (unsigned long)tx.work_requests, (unsigned long)tx.signaled,
                (unsigned long)tx.cqes, (unsigned long)tx.completion_requests);
    }
}

void dcx_fuzz_wait(dcx_fuzz_iface_t *f, const volatile int *done,
                   const char *what)
{
    double start = dcx_fuzz_now();
    unsigned count;

    for (count = 0; !*done; ++count) {
        if ((count >= DCX_FUZZ_MAX_PROGRESS) ||
            (((count % 1024) == 0) &&
             (dcx_fuzz_now() > start + DCX_FUZZ_MAX_SECONDS))) {
            dcx_fuzz_print_tx(f);
            dcx_fuzz_fatal("%s did not complete after %u progress calls in "
                           "%.1f s: a hang",
                           what, count, dcx_fuzz_now() - start);
        }
        uct_worker_progress(f->worker);
    }
}

void dcx_fuzz_progress(dcx_fuzz_iface_t *f, unsigned count)
{
    while ((count-- > 0) && (uct_worker_progress(f->worker) != 0)) {
    }
}

typedef struct {
    uct_completion_t uct;
    int done;
} dcx_fuzz_comp_t;

static void dcx_fuzz_comp_cb(uct_completion_t *self)
{
    ucs_container_of(self, dcx_fuzz_comp_t, uct)->done = 1;
}

ucs_status_t dcx_fuzz_ep_flush(dcx_fuzz_iface_t *f, uct_ep_h ep)
{
    double start = dcx_fuzz_now();
    dcx_fuzz_comp_t comp;
    ucs_status_t status;
    unsigned count;

    for (count = 0;; ++count) {
        comp.uct.func   = dcx_fuzz_comp_cb;
        comp.uct.count  = 1;
        comp.uct.status = UCS_OK;
        comp.done       = 0;
        status          = uct_ep_flush(ep, 0, &comp.uct);
        if (status != UCS_ERR_NO_RESOURCE) {
            break;
        }
        if ((count >= DCX_FUZZ_MAX_PROGRESS) ||
            (((count % 1024) == 0) &&
             (dcx_fuzz_now() > start + DCX_FUZZ_MAX_SECONDS))) {
            dcx_fuzz_print_tx(f);
            dcx_fuzz_fatal("flush found no resource %u times in %.1f s: a "
                           "hang",
                           count, dcx_fuzz_now() - start);
        }
        uct_worker_progress(f->worker);
    }
    if (status != UCS_INPROGRESS) {
        return status;
    }
    dcx_fuzz_wait(f, &comp.done, "flush");
    return comp.uct.status;
}
