/* dcxemu settings: the DCXEMU_* environment read once at attach, the fabric's
 * candidate names, the model's clock and its deterministic random source. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct dcxemu_settings dcxemu_cfg;

uint64_t dcxemu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t dcxemu_scaled_ns(double ns)
{
    double v = ns * dcxemu_cfg.time_scale;
    if (v < 1000.0) {
        v = 1000.0; /* keep retries from spinning */
    }
    if (v > 1e15) {
        v = 1e15;
    }
    return (uint64_t)v;
}

static long env_long(const char *name, long def, long min, long max)
{
    const char *s = getenv(name);
    char *end;
    long v;
    if (s == NULL || *s == '\0') {
        return def;
    }
    v = strtol(s, &end, 0);
    if (*end != '\0' || v < min || v > max) {
        fprintf(stderr, "dcxemu: ignoring %s=%s (expected %ld..%ld)\n", name, s,
                min, max);
        return def;
    }
    return v;
}

/* "0.01" -> 0.01 * 2^32 (saturated); -1 if not a probability */
static int64_t parse_prob(const char *v)
{
    char *end;
    double p = strtod(v, &end);
    if (end == v || (*end != '\0' && *end != ',') || !(p >= 0.0 && p <= 1.0)) {
        return -1;
    }
    return p >= 1.0 ? 0xffffffffLL : (int64_t)(p * 4294967296.0);
}

static int parse_status(const char *v, char **end)
{
    static const struct {
        const char *name;
        int st;
    } names[] = {
        { "RETRY_EXC_ERR", IBV_WC_RETRY_EXC_ERR },
        { "RNR_RETRY_EXC_ERR", IBV_WC_RNR_RETRY_EXC_ERR },
        { "REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR },
        { "LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR },
        { "REM_OP_ERR", IBV_WC_REM_OP_ERR },
        { "REM_INV_REQ_ERR", IBV_WC_REM_INV_REQ_ERR },
        { "LOC_LEN_ERR", IBV_WC_LOC_LEN_ERR },
        { "LOC_QP_OP_ERR", IBV_WC_LOC_QP_OP_ERR },
        { "GENERAL_ERR", IBV_WC_GENERAL_ERR },
        { "WR_FLUSH_ERR", IBV_WC_WR_FLUSH_ERR },
    };
    if (strncmp(v, "IBV_WC_", 7) == 0) {
        v += 7;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = strlen(names[i].name);
        if (strncmp(v, names[i].name, n) == 0 &&
            (v[n] == ':' || v[n] == '\0' || v[n] == ',')) {
            *end = (char *)v + n;
            return names[i].st;
        }
    }
    long st = strtol(v, end, 0);
    return *end == v || st <= IBV_WC_SUCCESS || st > IBV_WC_TM_RNDV_INCOMPLETE ?
                   -1 :
                   (int)st;
}

/* DCXEMU_FAULTS="drop=P,delay_us=U:P,status=NAME:P,seed=N"; a bad item is
 * ignored with a line */
static void read_faults(const char *spec)
{
    char *copy = strdup(spec), *save = NULL, *item;
    if (copy == NULL) {
        return;
    }
    for (item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *eq  = strchr(item, '='), *end, *colon;
        int64_t p = -1;
        if (eq == NULL) {
            goto bad;
        }
        *eq++ = '\0';
        colon = strchr(eq, ':');
        if (strcmp(item, "drop") == 0) {
            p = parse_prob(eq);
            if (p < 0)
                goto bad;
            dcxemu_cfg.drop_p = (uint32_t)p;
        } else if (strcmp(item, "delay_us") == 0) {
            unsigned long us = strtoul(eq, &end, 0);
            if (colon == NULL || end != colon || us > 10000000 ||
                (p = parse_prob(colon + 1)) < 0)
                goto bad;
            dcxemu_cfg.delay_us = (uint32_t)us;
            dcxemu_cfg.delay_p  = (uint32_t)p;
        } else if (strcmp(item, "status") == 0) {
            int st = parse_status(eq, &end);
            if (st < 0 || colon == NULL || end != colon ||
                (p = parse_prob(colon + 1)) < 0)
                goto bad;
            dcxemu_cfg.status   = (uint32_t)st;
            dcxemu_cfg.status_p = (uint32_t)p;
        } else if (strcmp(item, "seed") == 0) {
            dcxemu_cfg.fault_seed = strtoull(eq, &end, 0);
            if (*end != '\0')
                goto bad;
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "dcxemu: ignoring DCXEMU_FAULTS item '%s'\n", item);
    }
    free(copy);
    dcxemu_cfg.faults = dcxemu_cfg.drop_p || dcxemu_cfg.delay_p ||
                        dcxemu_cfg.status_p;
}

static void read_trace(const char *t)
{
    if (t == NULL || *t == '\0' || strcmp(t, "0") == 0) {
        return;
    }
    if (strcmp(t, "1") == 0) {
        dcxemu_trace_fd = STDERR_FILENO;
        return;
    }
    dcxemu_trace_fd = open(t, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (dcxemu_trace_fd < 0) {
        fprintf(stderr, "dcxemu: cannot open DCXEMU_TRACE=%s: %s\n", t,
                strerror(errno));
    }
}

/* "/name" of fabric candidate cand: DCXEMU_FABRIC (explicit, one candidate
 * only), else the default "dcxemu-<uid>" (DCXEMU_DEFAULT_FABRIC replaces it,
 * for tests that must not touch the user's real default) and its fallbacks.
 * Returns 1 if the name is explicit. */
int dcxemu_fabric_candidate(int cand, char *buf, size_t len)
{
    const char *f    = getenv("DCXEMU_FABRIC");
    const char *base = getenv("DCXEMU_DEFAULT_FABRIC");
    char def[64];
    if (f != NULL && *f != '\0' && strlen(f) < len - 2 &&
        strchr(f, '/') == NULL) {
        snprintf(buf, len, "/%s", f);
        return 1;
    }
    if (base == NULL || *base == '\0' || strlen(base) > 100 ||
        strchr(base, '/') != NULL) {
        snprintf(def, sizeof(def), "dcxemu-%u", (unsigned)getuid());
        base = def;
    }
    if (cand == 0) {
        snprintf(buf, len, "/%s", base);
    } else {
        snprintf(buf, len, "/%s.%d", base, cand);
    }
    return 0;
}

/* DCXEMU_PTRACER: "any" (default), "none" or a process ID. */
static void read_ptracer(const char *s)
{
    char *end;
    long pid;
    dcxemu_cfg.ptracer = -1;
    if (s == NULL || *s == '\0' || strcmp(s, "any") == 0) {
        return;
    }
    if (strcmp(s, "none") == 0) {
        dcxemu_cfg.ptracer = 0;
        return;
    }
    pid = strtol(s, &end, 10);
    if (*end == '\0' && pid > 0 && pid <= INT_MAX) {
        dcxemu_cfg.ptracer = pid;
    } else {
        fprintf(stderr,
                "dcxemu: ignoring DCXEMU_PTRACER=%s "
                "(any, none or a process ID)\n",
                s);
    }
}

/* DCXEMU_PKEY_TABLE: comma-separated P_Keys from index 0 (empty entries are
 * 0); a malformed list is ignored with a line (the default table). */
static void read_pkeys(const char *s)
{
    uint16_t pkeys[DCXEMU_MAX_PKEYS] = { 0 };
    const char *p                    = s;
    unsigned n                       = 0;
    unsigned long v;
    char *end;

    memset(dcxemu_cfg.pkeys, 0, sizeof(dcxemu_cfg.pkeys));
    dcxemu_cfg.pkeys[0] = DCXEMU_PKEY_DEFAULT;
    if (s == NULL || *s == '\0') {
        return;
    }
    for (;;) {
        v = strtoul(p, &end, 0);
        if (end == p || v > 0xffff || n >= DCXEMU_MAX_PKEYS ||
            (*end != ',' && *end != '\0')) {
            fprintf(stderr,
                    "dcxemu: ignoring DCXEMU_PKEY_TABLE=%s (up to %d "
                    "comma-separated 16-bit P_Keys)\n",
                    s, DCXEMU_MAX_PKEYS);
            return;
        }
        pkeys[n++] = (uint16_t)v;
        if (*end == '\0') {
            break;
        }
        p = end + 1;
    }
    memcpy(dcxemu_cfg.pkeys, pkeys, sizeof(pkeys));
}

static void read_settings(void)
{
    const char *ex             = getenv("DCXEMU_EXEC");
    const char *fs             = getenv("DCXEMU_FAULTS");
    const char *ts             = getenv("DCXEMU_TIME_SCALE");
    const char *ac             = getenv("DCXEMU_ATOMIC_CAP");
    const char *ll             = getenv("DCXEMU_LINK_LAYER");
    dcxemu_cfg.fabric_explicit = dcxemu_fabric_candidate(
            0, dcxemu_cfg.fabric, sizeof(dcxemu_cfg.fabric));
    dcxemu_cfg.keep_fabric = (int)env_long("DCXEMU_KEEP_FABRIC", 0, 0, 1);
    dcxemu_cfg.max_members = (uint32_t)env_long("DCXEMU_MAX_MEMBERS",
                                                DCXEMU_MAX_MEMBERS, 2,
                                                DCXEMU_MAX_MEMBERS);
    dcxemu_cfg.num_devices = (int)env_long("DCXEMU_NUM_DEVICES", 1, 1,
                                           DCXEMU_MAX_DEVICES);
    dcxemu_cfg.max_wqe     = (uint32_t)env_long("DCXEMU_MAX_WQE_SIZE", 512, 256,
                                                4096) &
                         ~63u;
    dcxemu_cfg.heap_mb = (uint64_t)env_long("DCXEMU_HEAP_MB", 1024, 16, 65536);
    dcxemu_cfg.strict_umr = (int)env_long("DCXEMU_STRICT_UMR", 1, 0, 1);
    /* DC read/atomic depth (log2), at most max_qp_init_rd_atom (16) */
    dcxemu_cfg.log_max_ra_dc   = (int)env_long("DCXEMU_LOG_MAX_RA_DC", 4, 0, 4);
    dcxemu_cfg.mkey_update_tag = (int)env_long("DCXEMU_MKEY_UPDATE_TAG", 1, 0,
                                               1);
    dcxemu_cfg.yama_scope      = (int)env_long("DCXEMU_YAMA_SCOPE", -1, -1, 3);
    read_ptracer(getenv("DCXEMU_PTRACER"));
    dcxemu_cfg.no_ext_atomics = !env_long("DCXEMU_EXT_ATOMICS", 1, 0, 1);
    dcxemu_cfg.no_raw_wqe     = !env_long("DCXEMU_RAW_WQE", 1, 0, 1);
    dcxemu_cfg.ooo_dp         = (int)env_long("DCXEMU_OOO_DP", 1, 0, 1);
    dcxemu_cfg.compact_av     = (int)env_long("DCXEMU_COMPACT_AV", 1, 0, 1);
    dcxemu_cfg.no_atomics     = 0;
    if (ac != NULL && strcmp(ac, "none") == 0) {
        dcxemu_cfg.no_atomics = 1;
    } else if (ac != NULL && *ac != '\0' && strcmp(ac, "hca") != 0) {
        fprintf(stderr, "dcxemu: ignoring DCXEMU_ATOMIC_CAP=%s (hca or none)\n",
                ac);
    }
    dcxemu_cfg.roce = 0;
    if (ll != NULL && strcmp(ll, "ethernet") == 0) {
        dcxemu_cfg.roce = 1;
    } else if (ll != NULL && *ll != '\0' && strcmp(ll, "infiniband") != 0) {
        fprintf(stderr,
                "dcxemu: ignoring DCXEMU_LINK_LAYER=%s "
                "(infiniband or ethernet)\n",
                ll);
    }
    read_pkeys(getenv("DCXEMU_PKEY_TABLE"));
    dcxemu_cfg.roce_tclass  = (int)env_long("DCXEMU_ROCE_TCLASS", -1, 0, 255);
    dcxemu_cfg.grh_required = (int)env_long("DCXEMU_GRH_REQUIRED", 0, 0, 1);
    dcxemu_cfg.roce_routers = (uint32_t)env_long("DCXEMU_ROCE_ROUTERS", 0, 0,
                                                 254);
    dcxemu_cfg.time_scale   = 1.0;
    if (ts != NULL && *ts != '\0') {
        char *end;
        double v = strtod(ts, &end);
        if (*end == '\0' && v > 0 && v < 1e6) {
            dcxemu_cfg.time_scale = v;
        } else {
            fprintf(stderr, "dcxemu: ignoring DCXEMU_TIME_SCALE=%s\n", ts);
        }
    }
    dcxemu_cfg.deferred = 0;
    if (ex != NULL && strcmp(ex, "deferred") == 0) {
        dcxemu_cfg.deferred = 1;
    } else if (ex != NULL && *ex != '\0' && strcmp(ex, "immediate") != 0) {
        fprintf(stderr,
                "dcxemu: ignoring DCXEMU_EXEC=%s (immediate or deferred)\n",
                ex);
    }
    dcxemu_cfg.defer_us = (uint32_t)env_long("DCXEMU_DEFER_US", 20, 1, 1000000);
    dcxemu_cfg.fault_seed =
            1; /* also drives the deferral delays: reproducible by default */
    if (fs != NULL && *fs != '\0') {
        read_faults(fs);
    }
    read_trace(getenv("DCXEMU_TRACE"));
}

/* splitmix64 over a shared counter: deterministic sequence for a given seed,
 * thread-safe */
uint64_t dcxemu_random(void)
{
    static _Atomic uint64_t ctr;
    uint64_t z = dcxemu_cfg.fault_seed * 0x9e3779b97f4a7c15ull +
                 (atomic_fetch_add(&ctr, 1) + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int dcxemu_chance(uint32_t p)
{
    return p != 0 && (uint32_t)(dcxemu_random() >> 32) < p;
}

/* Next generation of QP slot idx, 1..DCXEMU_QP_GEN_MAX.  A slot never used
 * starts at a spread value derived from its index, so the table needs no
 * initialisation (untouched pages stay free). */
uint32_t dcxemu_qp_next_gen(uint32_t idx)
{
    uint32_t g = dcxemu_fab->qps[idx].gen;
    if (g == 0) {
        g = (idx * 7) % DCXEMU_QP_GEN_MAX;
    }
    return g % DCXEMU_QP_GEN_MAX + 1;
}

void dcxemu_read_settings(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_settings);
}
