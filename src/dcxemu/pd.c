/* dcxemu protection-domain objects: PDs, memory regions, indirect mkeys and address handles. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <sys/mman.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_USABLE_NULL()  do { int e_ = dcxemu_usable(); if (e_) DCXEMU_ERR(e_); } while (0)
#define CHECK_USABLE_RET()   do { int e_ = dcxemu_usable(); if (e_) return e_; } while (0)
/* A firmware command on a device in fatal mode: EIO (dcxemu_device_fatal). */
#define CHECK_FATAL_NULL(ctx) \
    do { if (dcxemu_is_fatal(dcxemu_ctx(ctx)->dev_index)) DCXEMU_ERR(EIO); } while (0)

/* ---------------------------------------------------------------- PD, MR, AH ---- */

DCXEMU_API struct ibv_pd *dcxemu_ibv_alloc_pd(struct ibv_context *context)
{
    struct dcxemu_pd *pd;
    int err;
    CHECK_USABLE_NULL();
    if (context == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    CHECK_FATAL_NULL(context);
    pd = calloc(1, sizeof(*pd));
    if (pd == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(pd);
        DCXEMU_ERR(err);
    }
    pd->pd_id = dcxemu_fab->next_pd_id++;
    dcxemu_unlock();
    pd->pd.context = context;
    pd->pd.handle = (uint32_t)pd->pd_id;
    return &pd->pd;
}

DCXEMU_API int dcxemu_ibv_dealloc_pd(struct ibv_pd *pd)
{
    struct dcxemu_pd *p = (struct dcxemu_pd *)pd;
    if (pd == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if (atomic_load(&p->refcnt) != 0) {
        return EBUSY;
    }
    free(p);
    return 0;
}

/* Registration pins pages on hardware; here it must at least refuse unmapped ranges (EFAULT). */
static int range_mapped(void *addr, size_t length)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    uintptr_t end = ((uintptr_t)addr + length + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    unsigned char vec[4096];
    if ((uintptr_t)addr + length < (uintptr_t)addr) {
        return 0;
    }
    while (start < end) {
        size_t chunk = (size_t)(end - start);
        if (chunk > sizeof(vec) * (size_t)pg) {
            chunk = sizeof(vec) * (size_t)pg;
        }
        if (mincore((void *)start, chunk, vec) != 0) {
            return 0;
        }
        start += chunk;
    }
    return 1;
}

DCXEMU_API struct ibv_mr *dcxemu_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                                  uint64_t iova, unsigned int access)
{
    const unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                               IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;
    struct dcxemu_pd *p = (struct dcxemu_pd *)pd;
    struct dcxemu_mr *mr;
    uint32_t idx = 0;
    int err;
    CHECK_USABLE_NULL();
    if (pd == NULL || length == 0 || (access & ~known & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE)) {
        DCXEMU_ERR(EINVAL);
    }
    /* IB rule: remote write or atomic access needs local write */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        DCXEMU_ERR(EINVAL);
    }
    CHECK_FATAL_NULL(pd->context);
    if (!range_mapped(addr, length)) {
        DCXEMU_ERR(EFAULT);
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(mr);
        DCXEMU_ERR(err);
    }
    for (uint32_t n = 0; n < DCXEMU_MAX_MRS; n++) {
        uint32_t i = (dcxemu_fab->next_mr_idx + n) % DCXEMU_MAX_MRS;
        if (i != 0 && !dcxemu_fab->mrs[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx == 0) {
        dcxemu_unlock();
        free(mr);
        DCXEMU_ERR(ENOMEM);
    }
    {
        struct dcxemu_shm_mr *s = &dcxemu_fab->mrs[idx];
        dcxemu_fab->next_mr_idx = idx + 1;
        s->owner = (uint16_t)dcxemu_me;
        s->owner_token = dcxemu_my_token;
        s->in_use = 1;   /* last: a half-made slot is never live */
        dcxemu_hwm_bump(&dcxemu_fab->mr_hwm, idx);
        s->pd_id = p->pd_id;
        s->access = access & known;
        s->addr = (uintptr_t)addr;
        s->iova = iova;
        s->length = length;
        mr->idx = idx;
        mr->mr.lkey = mr->mr.rkey = idx << 8 | (s->tag & 0xff);
    }
    dcxemu_unlock();
    mr->mr.context = pd->context;
    mr->mr.pd = pd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.handle = idx;
    atomic_fetch_add(&p->refcnt, 1);
    return &mr->mr;
}

DCXEMU_API struct ibv_mr *dcxemu_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                                            int access)
{
    return dcxemu_ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

DCXEMU_API int dcxemu_ibv_dereg_mr(struct ibv_mr *ibmr)
{
    struct dcxemu_mr *mr = (struct dcxemu_mr *)ibmr;
    struct dcxemu_shm_mr *s;
    int err;
    if (ibmr == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    s = &dcxemu_fab->mrs[mr->idx];
    if (s->in_use && dcxemu_owner_is_me(s->owner, s->owner_token)) {
        s->in_use = 0;
        s->tag = (s->tag + 1) & 0xff;   /* the key comes back only with a new tag */
    }
    dcxemu_unlock();
    atomic_fetch_sub(&((struct dcxemu_pd *)ibmr->pd)->refcnt, 1);
    free(mr);
    return 0;
}

/* Indirect mkeys (spec §3.5): need a DEVX context; free/unusable until a UMR programs them. */
DCXEMU_API struct mlx5dv_mkey *dcxemu_mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *attr)
{
    const uint32_t known = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
    struct dcxemu_mkey *mk;
    struct dcxemu_shm_mkey *k = NULL;
    uint32_t max, supported;
    int idx = -1, err;
    CHECK_USABLE_NULL();
    if (attr == NULL || attr->pd == NULL) {
        DCXEMU_ERR(EINVAL);
    }
    if (dcxemu_is_fatal(dcxemu_ctx(attr->pd->context)->dev_index)) {
        DCXEMU_ERR(EIO);
    }
    supported = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                (dcxemu_cfg.mkey_update_tag ? MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG : 0);
    if (attr->create_flags == 0 || (attr->create_flags & ~known) ||
        !(attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT) ||
        (attr->create_flags & ~supported)) {
        DCXEMU_ERR(EOPNOTSUPP);   /* signature, crypto (and tag update when off): no capability */
    }
    if (!dcxemu_ctx(attr->pd->context)->devx) {
        DCXEMU_ERR(EOPNOTSUPP);   /* mkeys are created through DEVX */
    }
    if (attr->max_entries == 0 || attr->max_entries > 0xfffc) {
        DCXEMU_ERR(EINVAL);
    }
    max = ((uint32_t)attr->max_entries + 3) & ~3u;
    mk = calloc(1, sizeof(*mk));
    if (mk == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    if ((err = dcxemu_lock()) != 0) {
        free(mk);
        DCXEMU_ERR(err);
    }
    for (int i = 0; i < DCXEMU_MAX_MKEYS; i++) {
        if (!dcxemu_fab->mkeys[i].in_use) {
            idx = i;
            break;
        }
    }
    if (idx >= 0) {
        k = &dcxemu_fab->mkeys[idx];
        k->entries_off = dcxemu_heap_alloc(max * sizeof(struct dcxemu_mkey_entry));
        if (k->entries_off == 0) {
            idx = -1;
        }
    }
    if (idx < 0) {
        dcxemu_unlock();
        free(mk);
        DCXEMU_ERR(ENOMEM);
    }
    k->owner = (uint16_t)dcxemu_me;
    k->owner_token = dcxemu_my_token;
    k->pd_id = ((struct dcxemu_pd *)attr->pd)->pd_id;
    k->max_entries = max;
    k->programmed = 0;
    k->n = 0;
    k->length = 0;
    k->tag = 0;      /* as rdma-core: mkey_7_0 = 0 at creation */
    k->in_use = 1;   /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->mkey_hwm, (uint32_t)idx);
    dcxemu_unlock();
    attr->max_entries = (uint16_t)max;
    mk->idx = (uint32_t)idx;
    mk->pd = (struct dcxemu_pd *)attr->pd;
    mk->mkey.lkey = mk->mkey.rkey = (uint32_t)(DCXEMU_MKEY_BASE + idx) << 8;   /* tag 0 */
    atomic_fetch_add(&mk->pd->refcnt, 1);
    return &mk->mkey;
}

DCXEMU_API int dcxemu_mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
    struct dcxemu_mkey *mk = (struct dcxemu_mkey *)mkey;
    struct dcxemu_shm_mkey *k;
    int err;
    if (mkey == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    k = &dcxemu_fab->mkeys[mk->idx];
    if (k->in_use && dcxemu_owner_is_me(k->owner, k->owner_token)) {
        k->in_use = 0;
        k->programmed = 0;
        dcxemu_heap_free(k->entries_off);
        k->entries_off = 0;
    }
    dcxemu_unlock();
    atomic_fetch_sub(&mk->pd->refcnt, 1);
    free(mk);
    return 0;
}

DCXEMU_API struct ibv_ah *dcxemu_ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    struct dcxemu_ah *ah;
    CHECK_USABLE_NULL();
    if (pd == NULL || attr == NULL || attr->port_num != 1 || attr->sl > 15 ||
        attr->static_rate > 18) {
        DCXEMU_ERR(EINVAL);
    }
    if (attr->is_global && attr->grh.sgid_index >= DCXEMU_GID_TBL_LEN) {
        DCXEMU_ERR(EINVAL);
    }
    if (dcxemu_cfg.roce) {
        union ibv_gid sgid;
        uint32_t type;
        /* mlx5_create_ah: RoCE packets always carry a GRH, so an AH without one is EINVAL;
         * the source GID must be an entry of the table */
        if (!attr->is_global ||
            dcxemu_gid_entry(dcxemu_ctx(pd->context)->dev_index, attr->grh.sgid_index, &sgid,
                             &type) != 0) {
            DCXEMU_ERR(EINVAL);
        }
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        DCXEMU_ERR(ENOMEM);
    }
    ah->ah.context = pd->context;
    ah->ah.pd = pd;
    ah->attr = *attr;
    atomic_fetch_add(&((struct dcxemu_pd *)pd)->refcnt, 1);
    return &ah->ah;
}

DCXEMU_API int dcxemu_ibv_destroy_ah(struct ibv_ah *ah)
{
    if (ah == NULL) {
        return EINVAL;
    }
    CHECK_USABLE_RET();
    atomic_fetch_sub(&((struct dcxemu_pd *)ah->pd)->refcnt, 1);
    free(ah);
    return 0;
}
