/* dcxemu protection-domain objects: PDs, memory regions, indirect mkeys and
 * address handles. */
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

/* ---------------------------------------------------------------- PD, MR, AH
 * ---- */

DCXEMU_API struct ibv_pd *dcxemu_ibv_alloc_pd(struct ibv_context *context)
{
    struct dcxemu_pd *pd;
    int err;
    if ((err = dcxemu_usable()) != 0) {
        errno = err;
        return NULL;
    }
    if (context == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (dcxemu_is_fatal(dcxemu_ctx(context)->dev_index)) {
        errno = EIO; /* a firmware command on a device in fatal mode */
        return NULL;
    }
    pd = calloc(1, sizeof(*pd));
    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if ((err = dcxemu_lock()) != 0) {
        free(pd);
        errno = err;
        return NULL;
    }
    pd->pd_id = dcxemu_fab->next_pd_id++;
    dcxemu_unlock();
    pd->pd.context = context;
    pd->pd.handle  = (uint32_t)pd->pd_id;
    return &pd->pd;
}

DCXEMU_API int dcxemu_ibv_dealloc_pd(struct ibv_pd *pd)
{
    struct dcxemu_pd *p = (struct dcxemu_pd *)pd;
    int err;
    if (pd == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if (atomic_load(&p->refcnt) != 0) {
        return EBUSY;
    }
    free(p);
    return 0;
}

/* Registration pins pages on hardware; here it must at least refuse unmapped
 * ranges (EFAULT). */
static int range_mapped(void *addr, size_t length)
{
    long pg         = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    uintptr_t end   = ((uintptr_t)addr + length + (uintptr_t)pg - 1) &
                    ~(uintptr_t)(pg - 1);
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

#define MR_ACCESS_KNOWN                                                       \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                       \
     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | \
     IBV_ACCESS_RELAXED_ORDERING)

static int
check_mr_args(struct ibv_pd *pd, void *addr, size_t length, unsigned int access)
{
    int err = dcxemu_usable();
    if (err != 0) {
        return err;
    }
    if (pd == NULL || length == 0 ||
        (access & ~(unsigned)MR_ACCESS_KNOWN &
         ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE)) {
        return EINVAL;
    }
    /* IB rule: remote write or atomic access needs local write */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(dcxemu_ctx(pd->context)->dev_index)) {
        return EIO; /* a firmware command on a device in fatal mode */
    }
    if (!range_mapped(addr, length)) {
        return EFAULT;
    }
    return 0;
}

/* Fabric lock held: a free MR slot, or 0.  Never slot 0 (key 0 is no key) nor
 * 1: its first key would be 0x100, mlx5's invalid lkey (MLX5_INVALID_LKEY),
 * which ends a receive WQE's scatter list on hardware. */
static uint32_t find_mr_slot(void)
{
    for (uint32_t n = 0; n < DCXEMU_MAX_MRS; n++) {
        uint32_t i = (dcxemu_fab->next_mr_idx + n) % DCXEMU_MAX_MRS;
        if (i > 1 && !dcxemu_fab->mrs[i].in_use) {
            return i;
        }
    }
    return 0;
}

DCXEMU_API struct ibv_mr *dcxemu_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                                  size_t length, uint64_t iova,
                                                  unsigned int access)
{
    struct dcxemu_pd *p = (struct dcxemu_pd *)pd;
    struct dcxemu_shm_mr *s;
    struct dcxemu_mr *mr;
    uint32_t idx;
    int err;

    err = check_mr_args(pd, addr, length, access);
    if (err != 0) {
        goto err;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        err = ENOMEM;
        goto err;
    }
    err = dcxemu_lock();
    if (err != 0) {
        goto err_free;
    }
    idx = find_mr_slot();
    if (idx == 0) {
        dcxemu_unlock();
        err = ENOMEM;
        goto err_free;
    }
    s                       = &dcxemu_fab->mrs[idx];
    dcxemu_fab->next_mr_idx = idx + 1;
    s->owner                = (uint16_t)dcxemu_me;
    s->owner_token          = dcxemu_my_token;
    s->in_use               = 1; /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->mr_hwm, idx);
    s->pd_id    = p->pd_id;
    s->access   = access & MR_ACCESS_KNOWN;
    s->addr     = (uintptr_t)addr;
    s->iova     = iova;
    s->length   = length;
    mr->idx     = idx;
    mr->mr.lkey = mr->mr.rkey = idx << 8 | (s->tag & 0xff);
    dcxemu_unlock();
    mr->mr.context = pd->context;
    mr->mr.pd      = pd;
    mr->mr.addr    = addr;
    mr->mr.length  = length;
    mr->mr.handle  = idx;
    atomic_fetch_add(&p->refcnt, 1);
    return &mr->mr;

err_free:
    free(mr);
err:
    errno = err;
    return NULL;
}

DCXEMU_API struct ibv_mr *
dcxemu_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return dcxemu_ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr,
                                   (unsigned int)access);
}

DCXEMU_API int dcxemu_ibv_dereg_mr(struct ibv_mr *ibmr)
{
    struct dcxemu_mr *mr = (struct dcxemu_mr *)ibmr;
    struct dcxemu_shm_mr *s;
    int err;
    if (ibmr == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    s = &dcxemu_fab->mrs[mr->idx];
    if (s->in_use && dcxemu_owner_is_me(s->owner, s->owner_token)) {
        s->in_use = 0;
        s->tag    = (s->tag + 1) &
                 0xff; /* the key comes back only with a new tag */
    }
    dcxemu_unlock();
    dcxemu_copy_wait(); /* a copy through the key that began before is over */
    atomic_fetch_sub(&((struct dcxemu_pd *)ibmr->pd)->refcnt, 1);
    free(mr);
    return 0;
}

static int check_mkey_attr(const struct mlx5dv_mkey_init_attr *attr)
{
    const uint32_t known = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG |
                           MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
    uint32_t supported;
    int err = dcxemu_usable();
    if (err != 0) {
        return err;
    }
    if (attr == NULL || attr->pd == NULL) {
        return EINVAL;
    }
    if (dcxemu_is_fatal(dcxemu_ctx(attr->pd->context)->dev_index)) {
        return EIO;
    }
    supported = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                (dcxemu_cfg.mkey_update_tag ?
                         MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG :
                         0);
    if (attr->create_flags == 0 || (attr->create_flags & ~known) ||
        !(attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT) ||
        (attr->create_flags & ~supported)) {
        return EOPNOTSUPP; /* signature, crypto (and tag update when off): no
                              capability */
    }
    if (!dcxemu_ctx(attr->pd->context)->devx) {
        return EOPNOTSUPP; /* mkeys are created through DEVX */
    }
    if (attr->max_entries == 0 || attr->max_entries > 0xfffc) {
        return EINVAL;
    }
    return 0;
}

/* Fabric lock held: a free mkey slot with room for max entries on the heap, or
 * -1. */
static int take_mkey_slot(uint32_t max)
{
    for (int i = 0; i < DCXEMU_MAX_MKEYS; i++) {
        struct dcxemu_shm_mkey *k = &dcxemu_fab->mkeys[i];
        if (!k->in_use) {
            k->entries_off = dcxemu_heap_alloc(
                    max * sizeof(struct dcxemu_mkey_entry));
            return k->entries_off != 0 ? i : -1;
        }
    }
    return -1;
}

/* Indirect mkeys (docs/device-spec.md §3.5): need a DEVX context;
 * free/unusable until a UMR programs them. */
DCXEMU_API struct mlx5dv_mkey *
dcxemu_mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *attr)
{
    struct dcxemu_shm_mkey *k;
    struct dcxemu_mkey *mk;
    uint32_t max;
    int idx, err;

    err = check_mkey_attr(attr);
    if (err != 0) {
        goto err;
    }
    max = ((uint32_t)attr->max_entries + 3) & ~3u;
    mk  = calloc(1, sizeof(*mk));
    if (mk == NULL) {
        err = ENOMEM;
        goto err;
    }
    err = dcxemu_lock();
    if (err != 0) {
        goto err_free;
    }
    idx = take_mkey_slot(max);
    if (idx < 0) {
        dcxemu_unlock();
        err = ENOMEM;
        goto err_free;
    }
    k              = &dcxemu_fab->mkeys[idx];
    k->owner       = (uint16_t)dcxemu_me;
    k->owner_token = dcxemu_my_token;
    k->pd_id       = ((struct dcxemu_pd *)attr->pd)->pd_id;
    k->max_entries = max;
    k->programmed  = 0;
    k->n           = 0;
    k->length      = 0;
    k->tag         = 0; /* as rdma-core: mkey_7_0 = 0 at creation */
    k->in_use      = 1; /* last: a half-made slot is never live */
    dcxemu_hwm_bump(&dcxemu_fab->mkey_hwm, (uint32_t)idx);
    dcxemu_unlock();
    attr->max_entries = (uint16_t)max;
    mk->idx           = (uint32_t)idx;
    mk->pd            = (struct dcxemu_pd *)attr->pd;
    mk->mkey.lkey = mk->mkey.rkey = (uint32_t)(DCXEMU_MKEY_BASE + idx)
                                    << 8; /* tag 0 */
    atomic_fetch_add(&mk->pd->refcnt, 1);
    return &mk->mkey;

err_free:
    free(mk);
err:
    errno = err;
    return NULL;
}

DCXEMU_API int dcxemu_mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
    struct dcxemu_mkey *mk = (struct dcxemu_mkey *)mkey;
    struct dcxemu_shm_mkey *k;
    int err;
    if (mkey == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    if ((err = dcxemu_lock()) != 0) {
        return err;
    }
    k = &dcxemu_fab->mkeys[mk->idx];
    if (k->in_use && dcxemu_owner_is_me(k->owner, k->owner_token)) {
        k->in_use     = 0;
        k->programmed = 0;
        dcxemu_heap_free(k->entries_off);
        k->entries_off = 0;
    }
    dcxemu_unlock();
    dcxemu_copy_wait(); /* a copy through the key that began before is over */
    atomic_fetch_sub(&mk->pd->refcnt, 1);
    free(mk);
    return 0;
}

DCXEMU_API struct ibv_ah *
dcxemu_ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    struct dcxemu_ah *ah;
    int err;
    if ((err = dcxemu_usable()) != 0) {
        errno = err;
        return NULL;
    }
    if (pd == NULL || attr == NULL || attr->port_num != 1 || attr->sl > 15 ||
        attr->static_rate > 18) {
        errno = EINVAL;
        return NULL;
    }
    if (attr->is_global && attr->grh.sgid_index >= DCXEMU_GID_TBL_LEN) {
        errno = EINVAL;
        return NULL;
    }
    if (dcxemu_grh_required()) {
        union ibv_gid sgid;
        uint32_t type;
        /* mlx5_create_ah: RoCE packets always carry a GRH, and so must those
         * of an IB port with IBV_QPF_GRH_REQUIRED: an AH without one is
         * EINVAL; the source GID must be an entry of the table */
        if (!attr->is_global ||
            dcxemu_gid_entry(dcxemu_ctx(pd->context)->dev_index,
                             attr->grh.sgid_index, &sgid, &type) != 0) {
            errno = EINVAL;
            return NULL;
        }
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ah->ah.context = pd->context;
    ah->ah.pd      = pd;
    ah->attr       = *attr;
    atomic_fetch_add(&((struct dcxemu_pd *)pd)->refcnt, 1);
    return &ah->ah;
}

DCXEMU_API int dcxemu_ibv_destroy_ah(struct ibv_ah *ah)
{
    int err;
    if (ah == NULL) {
        return EINVAL;
    }
    if ((err = dcxemu_usable()) != 0) {
        return err;
    }
    atomic_fetch_sub(&((struct dcxemu_pd *)ah->pd)->refcnt, 1);
    free(ah);
    return 0;
}
