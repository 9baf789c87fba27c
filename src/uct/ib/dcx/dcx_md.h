/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#ifndef UCT_DCX_MD_H_
#define UCT_DCX_MD_H_

#include "dcx_device.h"
#include "compat/dcx_compat.h"

#include <uct/base/uct_md.h>
#include <ucs/config/types.h>
#include <ucs/memory/rcache.h>
#include <ucs/type/spinlock.h>


/* Name of the memory domain a host without DC devices shows, so that the
 * component is visible (and says "no supported devices") in ucx_info. */
#define UCT_DCX_NO_DEVICE_MD_NAME "dcx"


/* The remote rights a registration can carry (UCT_MD_MEM_ACCESS_REMOTE_*). */
#define UCT_DCX_MR_REMOTE_ACCESS                        \
    (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
     IBV_ACCESS_REMOTE_ATOMIC)

/* Packed remote key: checked on unpack, so a malformed buffer is an error. */
#define UCT_DCX_RKEY_MAGIC   0xdc58u
#define UCT_DCX_RKEY_VERSION 1

/* An unpacked uct_rkey_t carries the magic above the 32-bit rkey. */
#define UCT_DCX_RKEY_TAG ((uint64_t)UCT_DCX_RKEY_MAGIC << 32)


typedef struct uct_dcx_packed_rkey {
    uint32_t rkey;
    uint16_t magic;
    uint8_t version;
    uint8_t reserved; /* 0 */
} UCS_S_PACKED uct_dcx_packed_rkey_t;


/* Which rights a registration gets (REG_ACCESS). */
typedef enum {
    UCT_DCX_REG_ACCESS_REQUESTED, /* the UCT_MD_MEM_ACCESS_* asked for */
    UCT_DCX_REG_ACCESS_ALL, /* every right, as UCX's IB domains */
    UCT_DCX_REG_ACCESS_LAST
} uct_dcx_reg_access_t;


typedef struct uct_dcx_md_config {
    uct_md_config_t super;
    ucs_ternary_auto_value_t devx; /* open devices with DEVX (UMR) */
    uct_dcx_reg_access_t reg_access;
    ucs_ternary_auto_value_t rcache; /* use a registration cache */
    ucs_ternary_auto_value_t relaxed_order; /* IBV_ACCESS_RELAXED_ORDERING */
    uct_dcx_rcache_config_t rcache_config;
    ucs_linear_func_t reg_cost;
} uct_dcx_md_config_t;


/* Told when a registration goes away, before its keys become invalid
 * (layouts built over it must be dropped first). */
typedef struct uct_dcx_md_mr_listener {
    ucs_list_link_t list;
    void (*cb)(void *arg, uint32_t lkey);
    void *arg;
} uct_dcx_md_mr_listener_t;


/* Told (from the async event thread, under the memory domain's lock) when
 * the device reports IBV_EVENT_DEVICE_FATAL. */
typedef struct uct_dcx_md_fatal_listener {
    ucs_list_link_t list;
    void (*cb)(void *arg);
    void *arg;
} uct_dcx_md_fatal_listener_t;


/* A memory registration (the memory handle). */
typedef struct uct_dcx_mem {
    struct ibv_mr *mr;
    uint32_t flags; /* UCT_DCX_MEM_FLAG_* */
    uint32_t access; /* IBV_ACCESS_* the registration was made with */
} uct_dcx_mem_t;

enum {
    /* A strided view (uct_dcx_mem_view_create): mr describes its mkey. */
    UCT_DCX_MEM_FLAG_VIEW = UCS_BIT(0)
};


/* A memory registration that lives in the registration cache. */
typedef struct uct_dcx_rcache_region {
    ucs_rcache_region_t super;
    uct_dcx_mem_t memh;
} uct_dcx_rcache_region_t;


/* What a registration through the cache asks for. */
typedef struct uct_dcx_rcache_reg_arg {
    unsigned flags; /* UCT_MD_MEM_FLAG_* */
    unsigned access; /* IBV_ACCESS_* */
} uct_dcx_rcache_reg_arg_t;


typedef struct uct_dcx_md {
    uct_md_t super;
    const uct_dcx_device_t *device; /* NULL: the no-device memory domain */
    const uct_dcx_verbs_ops_t *ops; /* the device's binding */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    int devx; /* ctx was opened with DEVX */
    size_t max_mr_size;
    ucs_rcache_t *rcache; /* NULL: register directly */
    int reg_access_all; /* ignore the requested rights */
    ucs_linear_func_t reg_cost;
    ucs_list_link_t mr_listeners; /* uct_dcx_md_mr_listener_t */
    unsigned mr_access_extra; /* added to every registration:
                                                  relaxed ordering or 0 */
    unsigned dc_max_rd_atomic; /* DCI read/atomic depth the
                                                   device allows (QUERY_HCA_CAP);
                                                   0: unknown */
    int compact_av; /* DC WQEs may carry compact address vectors
                       (HCA cap compact_address_vector; 1 without DEVX) */
    ucs_spinlock_t fatal_lock; /* fatal, fatal_listeners */
    int fatal; /* IBV_EVENT_DEVICE_FATAL seen */
    ucs_list_link_t fatal_listeners; /* uct_dcx_md_fatal_listener_t */
} uct_dcx_md_t;


static UCS_F_ALWAYS_INLINE uint32_t uct_dcx_memh_lkey(uct_mem_h memh)
{
    return ((uct_dcx_mem_t *)memh)->mr->lkey;
}

static UCS_F_ALWAYS_INLINE int uct_dcx_rkey_is_valid(uct_rkey_t rkey)
{
    return (rkey >> 32) == UCT_DCX_RKEY_MAGIC;
}

static UCS_F_ALWAYS_INLINE uint32_t uct_dcx_rkey(uct_rkey_t rkey)
{
    return (uint32_t)rkey;
}


/* Listen for a fatal device error; returns UCS_ERR_IO_ERROR (not added) if
 * the device has failed already. */
ucs_status_t uct_dcx_md_fatal_listen(uct_dcx_md_t *md,
                                     uct_dcx_md_fatal_listener_t *listener);
void uct_dcx_md_fatal_unlisten(uct_dcx_md_t *md,
                               uct_dcx_md_fatal_listener_t *listener);

/* mlx5 PRM QUERY_HCA_CAP (through DEVX): mailbox layout and page types. */
#define UCT_DCX_PRM_OP_QUERY_HCA_CAP 0x100
#define UCT_DCX_PRM_MBOX_HDR         16 /* status, syndrome, reserved */
#define UCT_DCX_PRM_HCA_CAP_SIZE     4096 /* a capability page */
#define UCT_DCX_PRM_HCA_CAP_GENERAL  0x0
#define UCT_DCX_PRM_HCA_CAP_ATOMIC   0x3

/* The first @a length bytes of capability page @a type (current values):
 * 0, or an errno value (EREMOTEIO: the command failed). */
int uct_dcx_md_query_hca_cap(uct_dcx_md_t *md, unsigned type, uint8_t *page,
                             size_t length);

/* A field of @a bits bits at PRM bit offset @a bit_off of a capability page
 * (big-endian, most significant bit first; within one 32-bit word). */
unsigned
uct_dcx_prm_field(const uint8_t *page, unsigned bit_off, unsigned bits);


extern ucs_config_field_t uct_dcx_md_config_table[];
extern ucs_config_field_t uct_dcx_global_config_table[];

#endif
