/* The mlx5 face's ioctl() command ABI: what the kernel's ib_uverbs does with
 * RDMA_VERBS_IOCTL on /dev/infiniband/uverbsN, for mlx5's DEVX methods.
 *
 * A command is a header (object, method, number of attributes) and an array
 * of attributes, each an id, flags, a length and its data: inline when an
 * input is at most 8 bytes, else a pointer; an output points at the caller's
 * buffer, and what was written is flagged UVERBS_ATTR_F_VALID_OUTPUT.  The
 * core objects keep answering ENOTTY ("no ioctl framework"), so libibverbs
 * keeps the write() ABI of uverbs.c for every verb it has; so do mlx5's
 * objects outside DEVX (UAR, VAR, flow steering), which libmlx5 tries and does
 * without.  Of DEVX the face serves general commands (the model's firmware:
 * QUERY_HCA_CAP) and CREATE_MKEY objects, the indirect mkeys that
 * mlx5dv_create_mkey makes and UMR WQEs (umr.c) configure; every other DEVX
 * method answers EOPNOTSUPP, with a log line (the first time).
 */
#define _GNU_SOURCE
#include "face.h"

#include <errno.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/mlx5_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <stdlib.h>
#include <string.h>

#define FACE_MAX_ATTRS   3 /* the most a served method takes */
#define FACE_IOCTL_MAX   4096 /* the kernel's bound on a header (a page) */
#define MBOX_HDR         16 /* a mailbox header: opcode or status, syndrome */
#define OP_CREATE_MKEY   0x200
#define STATUS_BAD_PARAM 0x03
#define STATUS_BAD_RES   0x05

/* ---- PRM mailboxes: big-endian, bit offsets from the MSB of each dword */

static uint32_t prm_get(const uint8_t *base, unsigned off, unsigned bits)
{
    uint32_t dw = (uint32_t)base[off / 32 * 4] << 24 |
                  (uint32_t)base[off / 32 * 4 + 1] << 16 |
                  (uint32_t)base[off / 32 * 4 + 2] << 8 |
                  base[off / 32 * 4 + 3];
    uint32_t mask = bits == 32 ? UINT32_MAX : (1u << bits) - 1;
    return (dw >> (32 - off % 32 - bits)) & mask;
}

/* create_mkey_in: the mkey context (mkc) at bit 0x80; create_mkey_out:
 * mkey_index at 0x48.  Offsets below are within the mkc. */
#define CREATE_MKEY_MKC     16
#define MKC_SIZE            64
#define MKC_EN_RINVAL       0x67
#define MKC_PD              0x68
#define MKC_XLT_OCTWORDS    0x1a0
#define CREATE_MKEY_OUT_LEN 16

/* What libmlx5 writes in the mkc of mlx5dv_create_mkey, the only mkey the
 * model makes: a free KLM mkey UMR configures, of any QP, tag 0, no BSF. */
static const struct {
    unsigned off, bits;
    uint32_t value;
    const char *name;
} mkc_modelled[] = {
    { 0x01, 1, 1, "free" },        { 0x03, 3, 0, "access_mode_4_2" },
    { 0x10, 1, 1, "umr_en" },      { 0x16, 2, 2, "access_mode_1_0 (KLMs)" },
    { 0x20, 24, 0xffffff, "qpn" }, { 0x38, 8, 0, "mkey_7_0" },
    { 0x61, 1, 0, "bsf_en" },      { 0x1e3, 2, 0, "crypto_en" },
};

/* ---- the methods */

/* How the kernel declares an attribute (its UVERBS_ATTR_* kind). */
enum face_attr_kind {
    ATTR_PTR_IN,
    ATTR_PTR_OUT,
    ATTR_IDR_NEW, /* the new object's handle, written back in data */
    ATTR_IDR_DESTROY /* the handle of the object to destroy, in data */
};

struct face_attr_spec {
    uint16_t id; /* 0: no more (driver attribute ids are never 0) */
    uint16_t kind;
    uint16_t min_len; /* pointers: the least the kernel takes */
};

/* One command: its attributes, in the order of the method's spec. */
struct face_ioctl {
    struct ib_uverbs_attr *attr[FACE_MAX_ATTRS];
};

struct face_method {
    uint16_t object, method;
    const char *name;
    int (*fn)(struct face_file *f, struct face_ioctl *io); /* NULL: known to
                                                              the kernel only */
    struct face_attr_spec attrs[FACE_MAX_ATTRS]; /* all mandatory */
};

static int devx_other(struct face_file *f, struct face_ioctl *io);
static int devx_obj_create(struct face_file *f, struct face_ioctl *io);
static int devx_obj_destroy(struct face_file *f, struct face_ioctl *io);

#define OBJ(_o)  MLX5_IB_OBJECT_##_o
#define METH(_m) MLX5_IB_METHOD_##_m
#define ATTR(_a, _k, _n)                 \
    {                                    \
        MLX5_IB_ATTR_##_a, ATTR_##_k, _n \
    }

/* Every method of the DEVX objects: an object absent here is not DEVX. */
static const struct face_method face_methods[] = {
    { OBJ(DEVX),
      METH(DEVX_OTHER),
      "DEVX OTHER",
      devx_other,
      { ATTR(DEVX_OTHER_CMD_IN, PTR_IN, MBOX_HDR),
        ATTR(DEVX_OTHER_CMD_OUT, PTR_OUT, MBOX_HDR) } },
    { OBJ(DEVX), METH(DEVX_QUERY_UAR), "DEVX QUERY_UAR" },
    { OBJ(DEVX), METH(DEVX_QUERY_EQN), "DEVX QUERY_EQN" },
    { OBJ(DEVX), METH(DEVX_SUBSCRIBE_EVENT), "DEVX SUBSCRIBE_EVENT" },
    { OBJ(DEVX_OBJ),
      METH(DEVX_OBJ_CREATE),
      "DEVX_OBJ CREATE",
      devx_obj_create,
      { ATTR(DEVX_OBJ_CREATE_HANDLE, IDR_NEW, 0),
        ATTR(DEVX_OBJ_CREATE_CMD_IN, PTR_IN, MBOX_HDR),
        ATTR(DEVX_OBJ_CREATE_CMD_OUT, PTR_OUT, MBOX_HDR) } },
    { OBJ(DEVX_OBJ),
      METH(DEVX_OBJ_DESTROY),
      "DEVX_OBJ DESTROY",
      devx_obj_destroy,
      { ATTR(DEVX_OBJ_DESTROY_HANDLE, IDR_DESTROY, 0) } },
    { OBJ(DEVX_OBJ), METH(DEVX_OBJ_MODIFY), "DEVX_OBJ MODIFY" },
    { OBJ(DEVX_OBJ), METH(DEVX_OBJ_QUERY), "DEVX_OBJ QUERY" },
    { OBJ(DEVX_OBJ), METH(DEVX_OBJ_ASYNC_QUERY), "DEVX_OBJ ASYNC_QUERY" },
    { OBJ(DEVX_UMEM), METH(DEVX_UMEM_REG), "DEVX_UMEM REG" },
    { OBJ(DEVX_UMEM), METH(DEVX_UMEM_DEREG), "DEVX_UMEM DEREG" },
    { OBJ(DEVX_ASYNC_CMD_FD), METH(DEVX_ASYNC_CMD_FD_ALLOC),
      "DEVX_ASYNC_CMD_FD ALLOC" },
    { OBJ(DEVX_ASYNC_EVENT_FD), METH(DEVX_ASYNC_EVENT_FD_ALLOC),
      "DEVX_ASYNC_EVENT_FD ALLOC" },
};

#define FACE_NUM_METHODS (sizeof(face_methods) / sizeof(face_methods[0]))

static _Atomic int face_method_logged[FACE_NUM_METHODS];

static int is_devx_object(uint16_t object)
{
    for (size_t i = 0; i < FACE_NUM_METHODS; i++) {
        if (face_methods[i].object == object) {
            return 1;
        }
    }
    return 0;
}

static const struct face_method *method_find(uint16_t object, uint16_t method)
{
    for (size_t i = 0; i < FACE_NUM_METHODS; i++) {
        if (face_methods[i].object == object &&
            face_methods[i].method == method) {
            return &face_methods[i];
        }
    }
    return NULL;
}

/* ---- attributes */

static const void *attr_in(const struct ib_uverbs_attr *a)
{
    return a->len <= sizeof(a->data) ? (const void *)&a->data :
                                       (const void *)(uintptr_t)a->data;
}

static void attr_out(struct ib_uverbs_attr *a, const void *src, size_t len)
{
    size_t n = len < a->len ? len : a->len;
    memcpy((void *)(uintptr_t)a->data, src, n);
    a->len = (uint16_t)n;
    a->flags |= UVERBS_ATTR_F_VALID_OUTPUT;
}

/* One attribute into its slot, checked as the kernel checks it: an unknown
 * one is ignored unless mandatory, a pointer no shorter than its spec. */
static int attr_take(const struct face_method *m, struct ib_uverbs_attr *a,
                     struct face_ioctl *io)
{
    const struct face_attr_spec *s;
    unsigned k;
    for (k = 0; k < FACE_MAX_ATTRS && m->attrs[k].id != 0; k++) {
        if (m->attrs[k].id == a->attr_id) {
            break;
        }
    }
    if (k == FACE_MAX_ATTRS || m->attrs[k].id == 0) {
        return (a->flags & UVERBS_ATTR_F_MANDATORY) ? EPROTONOSUPPORT : 0;
    }
    s = &m->attrs[k];
    if (io->attr[k] != NULL || a->attr_data.reserved != 0) {
        return EINVAL; /* twice, or reserved bits set */
    }
    if ((s->kind == ATTR_PTR_IN || s->kind == ATTR_PTR_OUT) ?
                a->len < s->min_len :
                a->len != 0) {
        return EINVAL;
    }
    io->attr[k] = a;
    return 0;
}

/* The header, before the method is looked up: 0, or the kernel's errno. */
static int hdr_check(const struct ib_uverbs_ioctl_hdr *h)
{
    if (h->length > FACE_IOCTL_MAX ||
        h->length != sizeof(*h) + (size_t)h->num_attrs * sizeof(h->attrs[0])) {
        return EINVAL;
    }
    return (h->reserved1 != 0 || h->reserved2 != 0) ? EPROTONOSUPPORT : 0;
}

/* The attributes of the method: 0, or the kernel's errno. */
static int ioctl_parse(struct ib_uverbs_ioctl_hdr *h,
                       const struct face_method *m, struct face_ioctl *io)
{
    int err;
    memset(io, 0, sizeof(*io));
    for (unsigned i = 0; i < h->num_attrs; i++) {
        if ((err = attr_take(m, &h->attrs[i], io)) != 0) {
            return err;
        }
    }
    for (unsigned k = 0; k < FACE_MAX_ATTRS && m->attrs[k].id != 0; k++) {
        if (io->attr[k] == NULL) {
            return EINVAL; /* a mandatory attribute is missing */
        }
    }
    return 0;
}

/* One DEVX command: 0, or the kernel's errno. */
static int ioctl_run(struct face_file *f, struct ib_uverbs_ioctl_hdr *h)
{
    const struct face_method *m;
    struct face_ioctl io;
    int err;
    if ((err = hdr_check(h)) != 0) {
        return err; /* as the kernel: a malformed header fails first */
    }
    m = method_find(h->object_id, h->method_id);
    if (m == NULL) {
        return EPROTONOSUPPORT; /* no such method */
    }
    if (m->fn == NULL) {
        /* once a method: UCX asks for an event channel at every open */
        if (!atomic_exchange(&face_method_logged[m - face_methods], 1)) {
            face_log("uverbs%d: %s is not supported", f->dev_index, m->name);
        }
        return EOPNOTSUPP;
    }
    if ((err = ioctl_parse(h, m, &io)) != 0) {
        return err;
    }
    pthread_mutex_lock(&f->lock);
    err = m->fn(f, &io);
    pthread_mutex_unlock(&f->lock);
    return err;
}

int face_uverbs_ioctl(struct face_file *f, unsigned long req, void *arg)
{
    struct ib_uverbs_ioctl_hdr *h = arg;
    int err;
    if (req != RDMA_VERBS_IOCTL || h == NULL || !is_devx_object(h->object_id)) {
        errno = ENOTTY; /* libibverbs uses the write() ABI */
        return -1;
    }
    if ((err = ioctl_run(f, h)) != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

/* ---- DEVX general commands: the model's firmware */

static int devx_other(struct face_file *f, struct face_ioctl *io)
{
    struct ib_uverbs_attr *in = io->attr[0], *out = io->attr[1];
    void *buf;
    int err;
    if (f->ctx == NULL) {
        return EINVAL;
    }
    buf = calloc(1, out->len);
    if (buf == NULL) {
        return ENOMEM;
    }
    err = dcxemu_mlx5dv_devx_general_cmd(f->ctx, attr_in(in), in->len, buf,
                                         out->len);
    if (err == 0 || err == EREMOTEIO) {
        attr_out(out, buf, out->len); /* a failed command's status too */
    }
    free(buf);
    return err;
}

/* ---- DEVX objects: CREATE_MKEY */

static struct face_pd *pd_by_pdn(struct face_file *f, uint32_t pdn)
{
    for (uint32_t h = 0; h < f->nobjs; h++) {
        struct face_pd *pd = face_obj_get(f, h, FACE_OBJ_PD);
        if (pd != NULL && pd->pd->handle == pdn) {
            return pd;
        }
    }
    return NULL;
}

/* A command the firmware fails: its status in the out mailbox, EREMOTEIO. */
static int fw_error(struct ib_uverbs_attr *out, uint8_t status)
{
    uint8_t mbox[MBOX_HDR] = { status };
    attr_out(out, mbox, sizeof(mbox));
    return EREMOTEIO;
}

/* The mkc as the model's mkey attributes: 0, or an errno. */
static int mkc_read(struct face_file *f, const uint8_t *mkc,
                    struct mlx5dv_mkey_init_attr *a, struct ib_uverbs_attr *out)
{
    struct face_pd *pd;
    uint32_t xlt;
    for (size_t i = 0; i < sizeof(mkc_modelled) / sizeof(mkc_modelled[0]);
         i++) {
        uint32_t v = prm_get(mkc, mkc_modelled[i].off, mkc_modelled[i].bits);
        if (v != mkc_modelled[i].value) {
            face_log("uverbs%d: DEVX CREATE_MKEY with %s 0x%x is not "
                     "supported",
                     f->dev_index, mkc_modelled[i].name, v);
            return EOPNOTSUPP;
        }
    }
    pd  = pd_by_pdn(f, prm_get(mkc, MKC_PD, 24));
    xlt = prm_get(mkc, MKC_XLT_OCTWORDS, 32);
    if (pd == NULL) {
        return fw_error(out, STATUS_BAD_RES);
    }
    if (xlt == 0 || xlt > UINT16_MAX) {
        return fw_error(out, STATUS_BAD_PARAM);
    }
    memset(a, 0, sizeof(*a));
    a->pd           = pd->pd;
    a->max_entries  = (uint16_t)xlt; /* a KLM is one octword */
    a->create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
    if (prm_get(mkc, MKC_EN_RINVAL, 1)) {
        a->create_flags |= MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
    }
    return 0;
}

static int
mkey_create(struct face_file *f, struct face_ioctl *io, const uint8_t *in)
{
    uint8_t out[CREATE_MKEY_OUT_LEN] = { 0 };
    struct mlx5dv_mkey_init_attr a;
    struct face_mkey *mk;
    uint32_t index;
    int err;
    if (io->attr[1]->len < CREATE_MKEY_MKC + MKC_SIZE) {
        return EINVAL;
    }
    if ((err = mkc_read(f, in + CREATE_MKEY_MKC, &a, io->attr[2])) != 0) {
        return err;
    }
    mk = calloc(1, sizeof(*mk));
    if (mk == NULL) {
        return ENOMEM;
    }
    mk->mkey = dcxemu_mlx5dv_create_mkey(&a);
    if (mk->mkey == NULL) {
        err = errno ? errno : ENOMEM;
        free(mk);
        return err;
    }
    if ((err = face_obj_add(f, &mk->obj, FACE_OBJ_MKEY, 0)) != 0) {
        dcxemu_mlx5dv_destroy_mkey(mk->mkey);
        free(mk);
        return err;
    }
    /* libmlx5 makes the key mkey_index << 8 | tag 0, as the model does */
    index   = mk->mkey->lkey >> 8;
    out[9]  = (uint8_t)(index >> 16);
    out[10] = (uint8_t)(index >> 8);
    out[11] = (uint8_t)index;
    attr_out(io->attr[2], out, sizeof(out));
    io->attr[0]->data = mk->obj.handle;
    pthread_mutex_lock(&f->mkey_lock);
    mk->next = f->mkeys;
    f->mkeys = mk;
    pthread_mutex_unlock(&f->mkey_lock);
    return 0;
}

static int devx_obj_create(struct face_file *f, struct face_ioctl *io)
{
    const uint8_t *in = attr_in(io->attr[1]);
    uint32_t opcode   = prm_get(in, 0, 16);
    if (f->ctx == NULL || !f->devx) {
        return EINVAL; /* no DEVX user context (the kernel's devx_get_uid) */
    }
    if (opcode != OP_CREATE_MKEY) {
        face_log("uverbs%d: DEVX_OBJ CREATE of command 0x%x is not supported",
                 f->dev_index, opcode);
        return EOPNOTSUPP;
    }
    return mkey_create(f, io, in);
}

/* Off the file's mkey list, then the model's mkey: 0, or an errno. */
static int mkey_destroy(struct face_file *f, struct face_mkey *mk)
{
    struct face_mkey **pp;
    int err;
    pthread_mutex_lock(&f->mkey_lock);
    for (pp = &f->mkeys; *pp != NULL && *pp != mk; pp = &(*pp)->next) {
    }
    if (*pp == mk) {
        *pp = mk->next;
    }
    pthread_mutex_unlock(&f->mkey_lock);
    if ((err = dcxemu_mlx5dv_destroy_mkey(mk->mkey)) != 0) {
        pthread_mutex_lock(&f->mkey_lock);
        mk->next = f->mkeys;
        f->mkeys = mk;
        pthread_mutex_unlock(&f->mkey_lock);
    }
    return err;
}

static int devx_obj_destroy(struct face_file *f, struct face_ioctl *io)
{
    uint64_t h         = io->attr[0]->data;
    struct face_obj *o = h < f->nobjs ? f->objs[h] : NULL;
    int err;
    if (o == NULL) {
        return ENOENT;
    }
    if (o->type != FACE_OBJ_MKEY) {
        return EINVAL; /* a handle of another object type */
    }
    if ((err = mkey_destroy(f, (struct face_mkey *)o)) != 0) {
        return err;
    }
    face_obj_del(f, o);
    free(o);
    return 0;
}

void face_devx_release(struct face_obj *o)
{
    (void)mkey_destroy(o->file, (struct face_mkey *)o);
    free(o);
}

struct mlx5dv_mkey *face_mkey_get(struct face_file *f, uint32_t key)
{
    pthread_mutex_lock(&f->mkey_lock);
    for (struct face_mkey *mk = f->mkeys; mk != NULL; mk = mk->next) {
        /* by index: a UMR names the mkey with the tag it is to get */
        if ((mk->mkey->lkey >> 8) == (key >> 8)) {
            return mk->mkey;
        }
    }
    pthread_mutex_unlock(&f->mkey_lock);
    return NULL;
}

void face_mkey_put(struct face_file *f)
{
    pthread_mutex_unlock(&f->mkey_lock);
}
