/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Reaching peers: the interface and device addresses, reachability, the
 * address vector and the shared address-handle and peer caches, and on
 * RoCE the choice of the source GID.
 */
#include "dcx_iface_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>

#include <arpa/inet.h>
#include <string.h>


ucs_status_t uct_dcx_iface_get_device_address(uct_iface_h tl_iface,
                                              uct_device_addr_t *dev_addr)
{
    uct_dcx_iface_t *iface   = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    uct_dcx_dev_addr_t *addr = (uct_dcx_dev_addr_t *)dev_addr;

    addr->lid   = iface->port_attr.lid;
    addr->flags = iface->dev_addr_flags;
    if (iface->is_global) {
        memcpy(addr + 1, &iface->gid, sizeof(iface->gid));
    }
    return UCS_OK;
}

ucs_status_t
uct_dcx_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *iface_addr)
{
    uct_dcx_iface_t *iface     = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    uct_dcx_iface_addr_t *addr = (uct_dcx_iface_addr_t *)iface_addr;

    addr->dctn[0] = iface->rx.dctn & 0xff;
    addr->dctn[1] = (iface->rx.dctn >> 8) & 0xff;
    addr->dctn[2] = (iface->rx.dctn >> 16) & 0xff;
    addr->flags =
            UCT_DCX_IFACE_ADDR_VERSION_1 |
            (iface->config.atomics ? UCT_DCX_IFACE_ADDR_FLAG_ATOMIC64 : 0) |
            ((iface->config.ext_atomics32 || iface->config.ext_atomics64) ?
                     UCT_DCX_IFACE_ADDR_FLAG_EXT_ATOMICS :
                     0);
    addr->dc_key = iface->rx.dc_key;
    return UCS_OK;
}

/* gid may be unaligned: it comes from a packed peer address. */
static int uct_dcx_gid_is_zero(const void *gid)
{
    static const uint8_t zero[sizeof(union ibv_gid)];

    return !memcmp(gid, zero, sizeof(zero));
}

int uct_dcx_iface_addr_is_reachable(uct_iface_h tl_iface,
                                    const uct_device_addr_t *dev_addr,
                                    const uct_iface_addr_t *iface_addr,
                                    char *info, size_t max)
{
    uct_dcx_iface_t *iface          = ucs_derived_of(tl_iface, uct_dcx_iface_t);
    const uct_dcx_dev_addr_t *daddr = (const uct_dcx_dev_addr_t *)dev_addr;
    const uct_dcx_iface_addr_t *ifaddr = (const uct_dcx_iface_addr_t *)
            iface_addr;
    const char *reason;

    if ((daddr == NULL) || (ifaddr == NULL)) {
        reason = "no device or interface address";
    } else if ((ifaddr->flags & UCT_DCX_IFACE_ADDR_VERSION_MASK) !=
               UCT_DCX_IFACE_ADDR_VERSION_1) {
        reason = "unknown interface address format";
    } else if (!!(daddr->flags & UCT_DCX_DEV_ADDR_FLAG_GLOBAL) !=
               iface->is_roce) {
        /* Not the same kind of fabric (IB or RoCE). */
        reason = "the peer is on another kind of fabric (IB/RoCE)";
    } else if (iface->is_roce &&
               ((daddr->flags ^ iface->dev_addr_flags) &
                (UCT_DCX_DEV_ADDR_FLAG_ROCE_V2 | UCT_DCX_DEV_ADDR_FLAG_IPV4))) {
        /* A RoCE v1 frame never reaches a RoCE v2 (UDP/IP) address, nor an
         * IPv4 address an IPv6 one. */
        reason = "the peer uses another RoCE version or address family";
    } else if ((daddr->flags & (UCT_DCX_DEV_ADDR_FLAG_GLOBAL |
                                UCT_DCX_DEV_ADDR_FLAG_IB_GID)) &&
               uct_dcx_gid_is_zero(daddr + 1)) {
        reason = "the all-zero GID";
    } else if (iface->is_global && !iface->is_roce &&
               !(daddr->flags & UCT_DCX_DEV_ADDR_FLAG_IB_GID)) {
        /* a GRH needs the peer's GID */
        reason = "the peer's address has no GID";
    } else if (!iface->is_roce &&
               ((daddr->lid == 0) || (daddr->lid >= 0xc000))) {
        /* IB unicast LIDs are 1..0xbfff; RoCE addresses by GID. */
        reason = "not an IB unicast LID";
    } else {
        return 1;
    }

    if ((info != NULL) && (max > 0)) {
        ucs_snprintf_zero(info, max, "dcx: %s", reason);
    }
    return 0;
}

const union ibv_gid *uct_dcx_iface_peer_dgid(const uct_dcx_iface_t *iface,
                                             uint8_t dev_flags, const void *gid)
{
    union ibv_gid peer_gid;

    if (!(dev_flags &
          (UCT_DCX_DEV_ADDR_FLAG_GLOBAL | UCT_DCX_DEV_ADDR_FLAG_IB_GID))) {
        return NULL;
    }
    if (iface->is_global) {
        return gid;
    }

    /* may be unaligned: a GID of a packed peer address */
    memcpy(&peer_gid, gid, sizeof(peer_gid));
    return (peer_gid.global.subnet_prefix != iface->gid.global.subnet_prefix) ?
                   gid :
                   NULL;
}

void uct_dcx_iface_fill_av(const uct_dcx_iface_t *iface, uint16_t dlid,
                           const union ibv_gid *dgid,
                           struct ibv_ah_attr *ah_attr)
{
    memset(ah_attr, 0, sizeof(*ah_attr));
    ah_attr->dlid     = dlid;
    ah_attr->sl       = iface->config.sl;
    ah_attr->port_num = iface->port;
    if (!iface->is_global && (dgid == NULL)) {
        return; /* InfiniBand in one subnet: routed by LID */
    }

    /* RoCE packets always carry a GRH (an AH without one is EINVAL), and
     * so do those of a global InfiniBand interface and to another subnet */
    ah_attr->is_global         = 1;
    ah_attr->grh.sgid_index    = iface->gid_index;
    ah_attr->grh.hop_limit     = iface->config.hop_limit;
    ah_attr->grh.traffic_class = iface->config.traffic_class;
    if (dgid != NULL) {
        /* may be unaligned: a GID of a packed peer address */
        memcpy(&ah_attr->grh.dgid, dgid, sizeof(ah_attr->grh.dgid));
    }
}

ucs_status_t uct_dcx_iface_ah_get(uct_dcx_iface_t *iface, uint16_t lid,
                                  const union ibv_gid *gid,
                                  struct ibv_ah **ah_p)
{
    struct ibv_ah_attr ah_attr;
    uct_dcx_ah_key_t key;
    struct ibv_ah *ah;
    khiter_t it;
    int ret;

    memset(&key, 0, sizeof(key));
    key.lid    = lid;
    key.global = (gid != NULL);
    if (gid != NULL) {
        memcpy(&key.gid, gid, sizeof(key.gid));
    }

    it = kh_get(uct_dcx_ah, &iface->ah_cache, key);
    if (it != kh_end(&iface->ah_cache)) {
        *ah_p = kh_value(&iface->ah_cache, it);
        return UCS_OK;
    }

    uct_dcx_iface_fill_av(iface, lid, gid, &ah_attr);

    ah = iface->ops->create_ah(iface->md->pd, &ah_attr);
    if (ah == NULL) {
        ucs_error("dcx: cannot create an address handle to lid %u: %m", lid);
        return UCS_ERR_IO_ERROR;
    }

    it = kh_put(uct_dcx_ah, &iface->ah_cache, key, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        iface->ops->destroy_ah(ah);
        return UCS_ERR_NO_MEMORY;
    }
    kh_value(&iface->ah_cache, it) = ah;
    *ah_p                          = ah;
    return UCS_OK;
}

ucs_status_t uct_dcx_iface_peer_get(uct_dcx_iface_t *iface, struct ibv_ah *ah,
                                    uint32_t dctn, uint64_t dc_key,
                                    uct_dcx_peer_t **peer_p)
{
    uct_dcx_peer_key_t key = { ah, dc_key, dctn };
    uct_dcx_peer_t *peer;
    khiter_t it;
    int ret;

    it = kh_get(uct_dcx_peer, &iface->peers, key);
    if (it != kh_end(&iface->peers)) {
        peer = kh_value(&iface->peers, it);
        ++peer->refcount;
        *peer_p = peer;
        return UCS_OK;
    }

    peer = ucs_malloc(sizeof(*peer), "dcx peer");
    if (peer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    it = kh_put(uct_dcx_peer, &iface->peers, key, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_free(peer);
        return UCS_ERR_NO_MEMORY;
    }

    peer->ah       = ah;
    peer->dc_key   = dc_key;
    peer->dctn     = dctn;
    peer->refcount = 1;
    peer->index    = ucs_ptr_array_insert(&iface->peer_table, peer);
    kh_value(&iface->peers, it) = peer;
    *peer_p                     = peer;
    return UCS_OK;
}

void uct_dcx_iface_peer_put(uct_dcx_iface_t *iface, uct_dcx_peer_t *peer)
{
    uct_dcx_peer_key_t key = { peer->ah, peer->dc_key, peer->dctn };
    khiter_t it;

    if (--peer->refcount > 0) {
        return;
    }

    it = kh_get(uct_dcx_peer, &iface->peers, key);
    ucs_assert(it != kh_end(&iface->peers));
    kh_del(uct_dcx_peer, &iface->peers, it);
    ucs_ptr_array_remove(&iface->peer_table, peer->index);
    ucs_free(peer);
}

static int uct_dcx_gid_is_ipv4(const union ibv_gid *gid)
{
    static const uint8_t v4_prefix[12] = { 0, 0, 0, 0, 0,    0,
                                           0, 0, 0, 0, 0xff, 0xff };

    return !memcmp(gid->raw, v4_prefix, sizeof(v4_prefix)); /* ::ffff:0:0/96 */
}

/* Rank of a RoCE GID table entry in UCX's order (uct_ib_device_select_gid):
 * RoCE v2 before v1; within a version IPv4-mapped, then IPv6 not
 * link-local, then IPv6 link-local. -1: not a RoCE entry. */
static int uct_dcx_gid_rank(const struct ibv_gid_entry *entry)
{
    const uint8_t *raw = entry->gid.raw;
    int rank;

    if (uct_dcx_gid_is_ipv4(&entry->gid)) {
        rank = 0;
    } else if ((raw[0] == 0xfe) && ((raw[1] & 0xc0) == 0x80)) {
        rank = 2; /* fe80::/10 */
    } else {
        rank = 1;
    }

    switch (entry->gid_type) {
    case IBV_GID_TYPE_ROCE_V2:
        return rank;
    case IBV_GID_TYPE_ROCE_V1:
        return 3 + rank;
    default:
        return -1;
    }
}

/* An entry the port can send from: the device accepts an address handle
 * with it as the source GID (as UCX checks, a listed GID may not be
 * operational). */
static int uct_dcx_iface_gid_usable(uct_dcx_iface_t *iface,
                                    const struct ibv_gid_entry *entry)
{
    struct ibv_ah_attr ah_attr;
    struct ibv_ah *ah;

    uct_dcx_iface_fill_av(iface, 0, &entry->gid, &ah_attr);
    ah_attr.grh.sgid_index = entry->gid_index;
    ah                     = iface->ops->create_ah(iface->md->pd, &ah_attr);
    if (ah == NULL) {
        return 0;
    }
    iface->ops->destroy_ah(ah);
    return 1;
}

/* The traffic class a RoCE v2 port is configured with, as UCX 1.22 finds
 * it: MLNX_OFED's tc/<port>/traffic_class in the device's sysfs directory
 * ("Global tclass=N"), else 106 (DSCP 26, ECN capable). The address vector
 * is built in user space, so the kernel cannot impose the port's class. */
static unsigned
uct_dcx_iface_roce_tclass(uct_dcx_iface_t *iface, const char *dev_name)
{
    struct ibv_device *device = iface->md->ctx->device;
    unsigned long tclass;
    char file[32], buf[64];

    snprintf(file, sizeof(file), "tc/%u/traffic_class", iface->port);
    if ((iface->ops->read_sysfs_file(device->ibdev_path, file, buf,
                                     sizeof(buf)) < 0) ||
        (sscanf(buf, "Global tclass=%lu", &tclass) != 1) || (tclass > 255)) {
        return UCT_DCX_ROCE_V2_TCLASS_DEFAULT;
    }

    ucs_debug("dcx: %s: the port's traffic class is %lu", dev_name, tclass);
    return tclass;
}

/* RoCE addressing: the source GID (UCX_DCX_GID_INDEX or UCX's choice, by the
 * types ibv_query_gid_ex reports), hop limit and traffic class. */
ucs_status_t uct_dcx_iface_init_roce(uct_dcx_iface_t *iface,
                                     const uct_dcx_iface_config_t *config,
                                     const char *dev_name)
{
    struct ibv_gid_entry entry, best;
    int best_rank, rank, ret;
    char buf[INET6_ADDRSTRLEN];
    uint32_t i;

    iface->config.hop_limit     = config->hop_limit;
    iface->config.traffic_class = 0; /* chosen with the GID's RoCE version */

    if (config->gid_index != UCS_ULUNITS_AUTO) {
        ret = iface->ops->query_gid_ex(iface->md->ctx, iface->port,
                                       config->gid_index, &best, 0,
                                       sizeof(best));
        if (ret != 0) {
            ucs_error("dcx: %s: UCX_DCX_GID_INDEX=%lu: %s", dev_name,
                      config->gid_index,
                      (ret == ENODATA) ? "an empty GID table entry" :
                                         strerror(ret));
            return UCS_ERR_INVALID_PARAM;
        }
        if (uct_dcx_gid_rank(&best) < 0) {
            ucs_error("dcx: %s: UCX_DCX_GID_INDEX=%lu is not a RoCE GID",
                      dev_name, config->gid_index);
            return UCS_ERR_INVALID_PARAM;
        }
    } else {
        best_rank = -1;
        for (i = 0; i < (uint32_t)iface->port_attr.gid_tbl_len; ++i) {
            ret = iface->ops->query_gid_ex(iface->md->ctx, iface->port, i,
                                           &entry, 0, sizeof(entry));
            if (ret != 0) {
                /* An empty entry: ENODATA from the kernel's GID query, but
                 * EINVAL where rdma-core reads the table from sysfs (a
                 * kernel without the query, or a driver that fails one
                 * entry): either way not a GID to choose. */
                ucs_debug("dcx: %s: GID index %u skipped: %s", dev_name, i,
                          (ret == ENODATA) ? "empty" : strerror(ret));
                continue;
            }

            rank = uct_dcx_gid_rank(&entry);
            if ((rank < 0) || ((best_rank >= 0) && (rank >= best_rank)) ||
                !uct_dcx_iface_gid_usable(iface, &entry)) {
                continue;
            }
            best      = entry;
            best_rank = rank;
        }
        if (best_rank < 0) {
            ucs_error("dcx: %s: no usable RoCE GID in the port's table",
                      dev_name);
            return UCS_ERR_NO_DEVICE;
        }
    }

    iface->gid            = best.gid;
    iface->gid_index      = best.gid_index;
    iface->dev_addr_flags = UCT_DCX_DEV_ADDR_FLAG_GLOBAL |
                            ((best.gid_type == IBV_GID_TYPE_ROCE_V2) ?
                                     UCT_DCX_DEV_ADDR_FLAG_ROCE_V2 :
                                     0) |
                            (uct_dcx_gid_is_ipv4(&best.gid) ?
                                     UCT_DCX_DEV_ADDR_FLAG_IPV4 :
                                     0);

    if (config->traffic_class == UCS_ULUNITS_AUTO) {
        /* UCX 1.22: the port's configured class on RoCE v2, else 0 */
        iface->config.traffic_class =
                (best.gid_type == IBV_GID_TYPE_ROCE_V2) ?
                        uct_dcx_iface_roce_tclass(iface, dev_name) :
                        0;
    } else {
        iface->config.traffic_class = config->traffic_class;
    }

    ucs_debug("dcx: %s: RoCE %s GID index %u %s, "
              "hop limit %u, traffic class %u",
              dev_name, (best.gid_type == IBV_GID_TYPE_ROCE_V2) ? "v2" : "v1",
              iface->gid_index,
              inet_ntop(AF_INET6, best.gid.raw, buf, sizeof(buf)),
              iface->config.hop_limit, iface->config.traffic_class);
    return UCS_OK;
}

void uct_dcx_iface_peers_init(uct_dcx_iface_t *iface)
{
    kh_init_inplace(uct_dcx_ah, &iface->ah_cache);
    kh_init_inplace(uct_dcx_peer, &iface->peers);
    ucs_ptr_array_init(&iface->peer_table, "dcx_peers");
}

void uct_dcx_iface_peers_cleanup(uct_dcx_iface_t *iface)
{
    uct_dcx_peer_t *peer;
    struct ibv_ah *ah;

    if (kh_size(&iface->peers) > 0) {
        ucs_warn("dcx: iface %p destroyed with %u peers in use: "
                 "endpoints were not destroyed first",
                 iface, kh_size(&iface->peers));
    }
    /* The endpoints still holding them go with their pool. */
    kh_foreach_value(&iface->peers, peer, { ucs_free(peer); })
        ;
    ucs_ptr_array_cleanup(&iface->peer_table, 0);
    kh_destroy_inplace(uct_dcx_peer, &iface->peers);
    kh_foreach_value(&iface->ah_cache, ah, {
        if (iface->tx.direct != NULL) {
            uct_dcx_direct_ah_forget(iface->tx.direct, ah);
        }
        if (iface->ops->destroy_ah(ah) != 0) {
            ucs_warn("dcx: destroy_ah failed: %m");
        }
    })
        ;
    kh_destroy_inplace(uct_dcx_ah, &iface->ah_cache);
}
