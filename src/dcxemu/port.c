/* dcxemu port: its attributes, the GID table (InfiniBand or RoCE) and the P_Key
 * table. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dcxemu_query_port_op(struct ibv_context *context, uint8_t port_num,
                         struct ibv_port_attr *port_attr, size_t port_attr_len)
{
    struct ibv_port_attr a;
    int err;
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (port_num != 1 || port_attr == NULL) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    a.state           = IBV_PORT_ACTIVE;
    a.max_mtu         = IBV_MTU_4096;
    a.active_mtu      = IBV_MTU_4096;
    a.gid_tbl_len     = DCXEMU_GID_TBL_LEN;
    a.port_cap_flags  = IBV_PORT_CM_SUP;
    a.max_msg_sz      = DCXEMU_MAX_MSG_SZ;
    a.bad_pkey_cntr   = 0;
    a.qkey_viol_cntr  = 0;
    a.pkey_tbl_len    = DCXEMU_MAX_PKEYS;
    a.max_vl_num      = 4;
    a.sm_sl           = 0;
    a.subnet_timeout  = 18;
    a.init_type_reply = 0;
    a.active_width    = 2; /* 4x */
    a.active_speed    = 64; /* HDR */
    a.phys_state      = 5; /* LinkUp */
    if (dcxemu_cfg.roce) {
        /* RoCE: no subnet manager, no LIDs; packets are routed by GID */
        a.link_layer = IBV_LINK_LAYER_ETHERNET;
    } else {
        a.lid        = (uint16_t)(dcxemu_ctx(context)->dev_index + 1);
        a.sm_lid     = 1;
        a.lmc        = 0;
        a.link_layer = IBV_LINK_LAYER_INFINIBAND;
        if (dcxemu_cfg.grh_required) {
            a.flags |= IBV_QPF_GRH_REQUIRED; /* e.g. an SR-IOV function */
        }
    }
    memcpy(port_attr, &a,
           port_attr_len < sizeof(a) ? port_attr_len : sizeof(a));
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_port(struct ibv_context *context,
                                     uint8_t port_num,
                                     struct ibv_port_attr *port_attr)
{
    if (context == NULL) {
        return EINVAL;
    }
    return dcxemu_query_port_op(context, port_num, port_attr,
                                sizeof(*port_attr));
}

/* The GID tables.  InfiniBand: index 0 is the port GID (fe80::/64 + GUID). RoCE
 * (DCXEMU_LINK_LAYER=ethernet), as a netdev with an IPv6 link-local and one
 * IPv4 address shows it on mlx5: 0 link-local RoCE v1, 1 the same as RoCE v2, 2
 * the IPv4-mapped address
 * ::ffff:198.51.100.<dev+1> (TEST-NET-2, never a real host's) as RoCE v1, 3 the
 * same as RoCE v2. Index 0 is not what a RoCE transport should use (not
 * routable); UCX's choice is index 3. */
int dcxemu_gid_entry(int dev, uint32_t index, union ibv_gid *gid,
                     uint32_t *type)
{
    memset(gid, 0, sizeof(*gid));
    *type = dcxemu_cfg.roce ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_IB;
    if (index >= DCXEMU_GID_TBL_LEN) {
        return EINVAL;
    }
    if (!dcxemu_cfg.roce) {
        if (index != 0) {
            return ENODATA;
        }
        gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
        gid->global.interface_id  = htobe64(dcxemu_guid(dev));
        return 0;
    }
    switch (index) {
    case 0:
    case 1:
        gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
        /* modified EUI-64 of the port's MAC: the GUID stands in for it */
        gid->global.interface_id = htobe64(dcxemu_guid(dev) ^
                                           0x0200000000000000ull);
        break;
    case 2:
    case 3:
        gid->raw[10] = 0xff;
        gid->raw[11] = 0xff;
        gid->raw[12] = 198;
        gid->raw[13] = 51;
        gid->raw[14] = 100;
        gid->raw[15] = (uint8_t)(dev + 1);
        break;
    default:
        return ENODATA;
    }
    *type = (index & 1) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    return 0;
}

DCXEMU_API int dcxemu_ibv_query_gid(struct ibv_context *context,
                                    uint8_t port_num, int index,
                                    union ibv_gid *gid)
{
    uint32_t type;
    if (context == NULL || gid == NULL || port_num != 1 || index < 0 ||
        index >= DCXEMU_GID_TBL_LEN || dcxemu_usable() != 0) {
        errno = EINVAL;
        return -1;
    }
    /* an empty entry reads as the all-zero GID, as libibverbs keeps it */
    (void)dcxemu_gid_entry(dcxemu_ctx(context)->dev_index, (uint32_t)index, gid,
                           &type);
    return 0;
}

/* _ibv_query_gid_ex (IBVERBS_1.11), the target of the inline
 * ibv_query_gid_ex(): returns an errno value; ENODATA for an empty entry inside
 * the table (man ibv_query_gid_ex). */
DCXEMU_API int dcxemu__ibv_query_gid_ex(struct ibv_context *context,
                                        uint32_t port_num, uint32_t gid_index,
                                        struct ibv_gid_entry *entry,
                                        uint32_t flags, size_t entry_size)
{
    struct ibv_gid_entry e;
    int err;
    if (context == NULL || entry == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (port_num != 1 || flags != 0 || entry_size < sizeof(e)) {
        return EINVAL;
    }
    memset(&e, 0, sizeof(e));
    err = dcxemu_gid_entry(dcxemu_ctx(context)->dev_index, gid_index, &e.gid,
                           &e.gid_type);
    if (err != 0) {
        return err;
    }
    e.gid_index    = gid_index;
    e.port_num     = port_num;
    e.ndev_ifindex = 0; /* no net device behind a model port */
    memcpy(entry, &e, sizeof(e));
    return 0;
}

/* libibverbs' ibv_read_sysfs_file on the device's directory: the model's
 * devices have only the file MLNX_OFED adds for a RoCE port's configured
 * traffic class (DCXEMU_ROCE_TCLASS). */
DCXEMU_API int dcxemu_ibv_read_sysfs_file(const char *dir, const char *file,
                                          char *buf, size_t size)
{
    int len;
    dcxemu_read_settings();
    if (dir == NULL || file == NULL || buf == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (!dcxemu_cfg.roce || dcxemu_cfg.roce_tclass < 0 ||
        strcmp(file, "tc/1/traffic_class") != 0) {
        errno = ENOENT;
        return -1;
    }
    len = snprintf(buf, size, "Global tclass=%d", dcxemu_cfg.roce_tclass);
    if (len < 0 || (size_t)len >= size) {
        errno = EOVERFLOW; /* libibverbs fails a file it would truncate */
        return -1;
    }
    return len;
}

DCXEMU_API int dcxemu_ibv_query_pkey(struct ibv_context *context,
                                     uint8_t port_num, int index, __be16 *pkey)
{
    if (context == NULL || pkey == NULL || port_num != 1 || index < 0 ||
        index >= DCXEMU_MAX_PKEYS || dcxemu_usable() != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(dcxemu_cfg.pkeys[index]);
    return 0;
}

DCXEMU_API int dcxemu_port_describe(int dev, struct dcxemu_port_desc *d)
{
    uint32_t i;
    dcxemu_read_settings();
    if (d == NULL || dev < 0 || dev >= dcxemu_cfg.num_devices) {
        return EINVAL;
    }
    memset(d, 0, sizeof(*d));
    d->num_devices     = dcxemu_cfg.num_devices;
    d->node_guid       = dcxemu_guid(dev);
    d->link_layer      = dcxemu_cfg.roce ? IBV_LINK_LAYER_ETHERNET :
                                           IBV_LINK_LAYER_INFINIBAND;
    d->lid             = dcxemu_cfg.roce ? 0 : (uint16_t)(dev + 1);
    d->gid_tbl_len     = DCXEMU_GID_TBL_LEN;
    d->pkey_tbl_len    = DCXEMU_MAX_PKEYS;
    d->port_flags      = (!dcxemu_cfg.roce && dcxemu_cfg.grh_required) ?
                                 IBV_QPF_GRH_REQUIRED :
                                 0;
    d->tclass          = dcxemu_cfg.roce ? dcxemu_cfg.roce_tclass : -1;
    d->max_wqe_size    = dcxemu_cfg.max_wqe;
    d->mkey_update_tag = dcxemu_cfg.mkey_update_tag;
    d->compact_av      = dcxemu_cfg.compact_av;
    _Static_assert(DCXEMU_DESC_PKEYS >= DCXEMU_MAX_PKEYS,
                   "the description holds the whole P_Key table");
    memcpy(d->pkey, dcxemu_cfg.pkeys, sizeof(dcxemu_cfg.pkeys));
    for (i = 0; i < DCXEMU_DESC_GIDS &&
                dcxemu_gid_entry(dev, i, &d->gid[i], &d->gid_type[i]) == 0;
         i++) {
    }
    d->num_gids = i;
    return 0;
}
