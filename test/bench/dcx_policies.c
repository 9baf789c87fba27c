/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * dcx_policies: one sending UCT interface and PEERS receiving interfaces
 * (each its own DCT) of this process, 8-byte puts spread over all peers in
 * bursts, for contrib/dcx bench policies, which runs it once per DCI policy
 * (UCX_DCX_TX_POLICY, UCX_DCX_NUM_DCI from the environment, as any UCT
 * setting).
 *
 *   dcx_policies [COUNT [PEERS [BURST]]]
 *
 * Message i goes to peer (i / BURST) % PEERS, as uct_ep_put_short; one the
 * transport refuses (UCS_ERR_NO_RESOURCE: no DCI, or no room on it) is
 * tried again after progressing the sender, as a caller without pending
 * requests would. The transport and device come from DCX_COST_TL and
 * DCX_COST_DEV (default dcx on dcxemu0:1).
 *
 * stdout: "peers=P count=N burst=B secs=S msg_rate=R ns_per_msg=T
 * nores_per_msg=X": the measured loop from the first put to the flush of
 * the sending interface (which waits for every put to complete); exit
 * status 0 only if every peer's memory holds the last value put to each of
 * its slots.
 */
#include "bench_uct.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POL_MAX_PEERS 256
#define POL_SLOTS     64 /* 8-byte slots of each peer's region */
#define POL_WARMUP    2000

#define POL_CHECK(_cond, _what)                                  \
    do {                                                         \
        if (!(_cond)) {                                          \
            fprintf(stderr, "dcx_policies: %s failed\n", _what); \
            exit(1);                                             \
        }                                                        \
    } while (0)

#define POL_OK(_call) POL_CHECK((_call) == UCS_OK, #_call)

typedef struct {
    bench_uct_side_t side;
    uint64_t *region;
    uct_mem_h memh;
    uct_rkey_bundle_t rkey;
    uct_ep_h ep; /* the sender's, to this peer */
    uint64_t expected[POL_SLOTS];
} pol_peer_t;

typedef struct {
    bench_uct_resource_t res;
    bench_uct_side_t tx;
    pol_peer_t *peers;
    unsigned num_peers, burst;
    uint64_t nores;
} pol_t;

static double pol_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* A peer: its interface, its registered region, the sender's endpoint. */
static void pol_peer_open(pol_t *p, pol_peer_t *peer)
{
    uct_ep_params_t ep_params = {};
    uct_iface_attr_t attr;
    uct_md_attr_t md_attr;
    void *dev_addr, *iface_addr, *packed;

    bench_uct_side_open(&p->res, &peer->side);
    peer->region = calloc(POL_SLOTS, sizeof(*peer->region));
    POL_CHECK(peer->region != NULL, "calloc");
    POL_OK(uct_md_mem_reg(peer->side.md, peer->region,
                          POL_SLOTS * sizeof(*peer->region),
                          UCT_MD_MEM_ACCESS_ALL, &peer->memh));
    POL_OK(uct_md_query(peer->side.md, &md_attr));
    packed = malloc(md_attr.rkey_packed_size);
    POL_CHECK(packed != NULL, "malloc");
    POL_OK(uct_md_mkey_pack(peer->side.md, peer->memh, packed));
    POL_OK(uct_rkey_unpack(p->res.component, packed, &peer->rkey));
    free(packed);

    POL_OK(uct_iface_query(peer->side.iface, &attr));
    POL_CHECK(attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE,
              "a transport that connects to an interface");
    dev_addr   = malloc(attr.device_addr_len);
    iface_addr = malloc(attr.iface_addr_len);
    POL_CHECK((dev_addr != NULL) && (iface_addr != NULL), "malloc");
    POL_OK(uct_iface_get_device_address(peer->side.iface, dev_addr));
    POL_OK(uct_iface_get_address(peer->side.iface, iface_addr));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                           UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.iface      = p->tx.iface;
    ep_params.dev_addr   = dev_addr;
    ep_params.iface_addr = iface_addr;
    POL_OK(uct_ep_create(&ep_params, &peer->ep));
    free(dev_addr);
    free(iface_addr);
}

static void pol_peer_close(pol_t *p, pol_peer_t *peer)
{
    uct_ep_destroy(peer->ep);
    uct_rkey_release(p->res.component, &peer->rkey);
    uct_md_mem_dereg(peer->side.md, peer->memh);
    bench_uct_side_close(&peer->side);
    free(peer->region);
}

/* Message @a i: its peer and slot, and the value it writes. */
static void pol_put(pol_t *p, uint64_t i)
{
    pol_peer_t *peer = &p->peers[(i / p->burst) % p->num_peers];
    unsigned slot    = (i / (p->burst * p->num_peers)) % POL_SLOTS;
    uint64_t value   = i + 1;
    ucs_status_t status;

    for (;;) {
        status = uct_ep_put_short(peer->ep, &value, sizeof(value),
                                  (uintptr_t)&peer->region[slot],
                                  peer->rkey.rkey);
        if (status != UCS_ERR_NO_RESOURCE) {
            break;
        }
        ++p->nores;
        uct_worker_progress(p->tx.worker);
    }
    POL_OK(status);
    peer->expected[slot] = value;
}

static void pol_flush(pol_t *p)
{
    ucs_status_t status;

    do {
        uct_worker_progress(p->tx.worker);
        status = uct_iface_flush(p->tx.iface, 0, NULL);
    } while (status == UCS_INPROGRESS);
    POL_OK(status);
}

int main(int argc, char **argv)
{
    uint64_t count = (argc > 1) ? strtoull(argv[1], NULL, 0) : 200000;
    pol_t p        = {};
    uint64_t i;
    unsigned j, k;
    double start, secs;

    p.num_peers = (argc > 2) ? strtoul(argv[2], NULL, 0) : 16;
    p.burst     = (argc > 3) ? strtoul(argv[3], NULL, 0) : 4;
    if ((count == 0) || (p.num_peers == 0) || (p.num_peers > POL_MAX_PEERS) ||
        (p.burst == 0)) {
        fprintf(stderr,
                "usage: dcx_policies [COUNT [PEERS (1..%u) "
                "[BURST]]]\n",
                POL_MAX_PEERS);
        return 2;
    }
    p.res.prog     = "dcx_policies";
    p.res.tl_name  = getenv("DCX_COST_TL") ? getenv("DCX_COST_TL") : "dcx";
    p.res.dev_name = getenv("DCX_COST_DEV") ? getenv("DCX_COST_DEV") :
                                              "dcxemu0:1";

    bench_uct_find_resource(&p.res, "dcx needs dcx-run");
    bench_uct_side_open(&p.res, &p.tx);
    p.peers = calloc(p.num_peers, sizeof(*p.peers));
    POL_CHECK(p.peers != NULL, "calloc");
    for (j = 0; j < p.num_peers; ++j) {
        pol_peer_open(&p, &p.peers[j]);
    }

    for (i = 0; i < POL_WARMUP; ++i) {
        pol_put(&p, i);
    }
    pol_flush(&p);

    p.nores = 0;
    start   = pol_now();
    for (i = POL_WARMUP; i < POL_WARMUP + count; ++i) {
        pol_put(&p, i);
    }
    pol_flush(&p);
    secs = pol_now() - start;

    for (j = 0; j < p.num_peers; ++j) {
        for (k = 0; k < POL_SLOTS; ++k) {
            if (p.peers[j].region[k] != p.peers[j].expected[k]) {
                fprintf(stderr,
                        "dcx_policies: peer %u slot %u holds %" PRIu64
                        ", not %" PRIu64 "\n",
                        j, k, p.peers[j].region[k], p.peers[j].expected[k]);
                return 1;
            }
        }
    }

    printf("peers=%u count=%" PRIu64 " burst=%u secs=%.4f msg_rate=%.0f "
           "ns_per_msg=%.1f nores_per_msg=%.3f\n",
           p.num_peers, count, p.burst, secs, count / secs, secs * 1e9 / count,
           (double)p.nores / count);

    for (j = 0; j < p.num_peers; ++j) {
        pol_peer_close(&p, &p.peers[j]);
    }
    free(p.peers);
    bench_uct_side_close(&p.tx);
    return 0;
}
