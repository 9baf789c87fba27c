/* The device's mlx5 face: what its files share.
 *
 * The face makes the device model look, to unmodified rdma-core, like the
 * Linux kernel's uverbs interface over an mlx5 device: a generated sysfs tree
 * (sysfs.c), a character device whose write() commands it serves (uverbs.c,
 * uverbs_queue.c), UAR pages whose doorbell stores it traps (uar.c), send
 * WQEs it translates into the model's work requests (sq.c) and completions it
 * writes back as CQE64s (pump.c).  Every object it creates is a model object
 * made through the model's own API, so the rules of the device live once, in
 * the model: this face only translates formats.
 */
#ifndef DCXEMU_MLX5_FACE_H
#define DCXEMU_MLX5_FACE_H

#include "dcxemu.h"

struct dcxemu_mlx5_wqe;

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define FACE_UVERBS_MAJOR 231
#define FACE_UVERBS_MINOR 192 /* uverbs0; uverbsN is 192 + N */
#define FACE_UAR_PAGES    8 /* 16 static bfregs, 2 per UAR, one UAR a page */
#define FACE_TOT_BFREGS   16
#define FACE_MAX_FILES    1024 /* opens of the device per process */
#define FACE_MAX_WQE      1024 /* a ctrl segment's ds counts 63 16-byte units */

/* What one object of the uverbs interface is. */
enum face_obj_type {
    FACE_OBJ_PD = 1,
    FACE_OBJ_MR,
    FACE_OBJ_CQ,
    FACE_OBJ_SRQ,
    FACE_OBJ_QP,
    FACE_OBJ_MKEY, /* a DEVX object: an indirect mkey (ioctl.c) */
    FACE_OBJ_AH /* a kernel address handle (RoCE: its destination MAC) */
};

struct face_file;

/* Common head of every object: its handle is its index in the file's table. */
struct face_obj {
    enum face_obj_type type;
    uint32_t handle;
    uint64_t user_handle; /* the rdma-core object, echoed in events */
    struct face_file *file;
    uint32_t async_events; /* asynchronous events written for it */
};

struct face_ah_entry {
    struct ibv_ah_attr attr;
    struct ibv_ah *ah;
};

struct face_pd {
    struct face_obj obj;
    struct ibv_pd *pd;
    int eth; /* a RoCE port: address vectors are routed by GID */
    /* address handles for the DC address vectors seen so far */
    pthread_mutex_t ah_lock;
    struct face_ah_entry *ahs;
    uint32_t num_ahs, ah_cap;
};

struct face_mr {
    struct face_obj obj;
    struct ibv_mr *mr;
};

struct face_cq {
    struct face_obj obj;
    struct ibv_cq *cq; /* the model's CQ the completions arrive on */
    int channel_wfd; /* write end of the completion channel, -1: none */
    /* the CQ as libmlx5 allocated it */
    void *buf;
    uint32_t *dbrec; /* [0] consumer index, [1] arm: sn << 28 | cmd | ci */
    uint32_t ncqe;
    uint32_t cqe_size;
    uint32_t pi; /* CQEs written so far */
    uint32_t last_arm_sn; /* sn + 1 of the arm that last fired, 0: none */
    uint32_t comp_events; /* events written to the channel */
    int armed; /* an arm doorbell came and has not fired yet */
    int overrun; /* a CQE found no room (CQ error reported) */
    pthread_mutex_t lock; /* one writer of the CQ buffer at a time */
};

struct face_srq {
    struct face_obj obj;
    struct ibv_srq *srq;
    void *buf;
    uint32_t *dbrec;
    uint32_t stride;
    uint32_t nwqe;
    uint32_t max_sge;
    uint16_t head; /* next WQE the device takes */
    uint16_t taken; /* WQEs taken, as the 16-bit doorbell counter */
    pthread_mutex_t lock;
};

enum {
    FACE_QP_RC,
    FACE_QP_DCI
};

/* What the face remembers of a posted WQE until its completion. */
struct face_wqe_info {
    uint8_t opcode; /* MLX5_OPCODE_* */
};

struct face_qp {
    struct face_obj obj;
    struct ibv_qp *qp;
    struct ibv_qp_ex *qpx;
    struct mlx5dv_qp_ex *dv;
    int kind; /* FACE_QP_* */
    int is_dct;
    int scatter_cqe; /* a DCT that scatters short receives into the CQE */
    int dci_streams; /* a DCI with streams: its WQEs' stream ids count */
    uint32_t qpn;
    uint32_t uidx;
    struct face_pd *pd;
    struct face_cq *send_cq, *recv_cq;
    struct face_srq *srq;
    /* send queue as libmlx5 allocated it */
    void *sq_buf;
    uint32_t sq_wqebb_cnt;
    uint32_t *dbrec; /* [0] receive, [1] send producer counters */
    uint16_t sq_pi; /* WQE basic blocks taken so far (16-bit, as the dbrec) */
    /* receive queue (RC without an SRQ) */
    void *rq_buf;
    uint32_t rq_wqe_cnt;
    uint32_t rq_stride;
    uint16_t rq_taken; /* receive WQEs handed to the model */
    pthread_mutex_t rq_lock;
    uint16_t backstop_pi; /* the send record when the engine last looked */
    int in_error; /* a bad WQE was logged (once per QP) */
    int failed_now; /* the face failed a WQE itself (the model refused its
                       failure): what follows is flushed */
    struct face_wqe_info *wqe; /* per WQE basic block index */
    struct dcxemu_mlx5_wqe *dec; /* the WQE being decoded (large: not on a
                                    signal stack) */
    void *raw; /* a raw WQE, unwrapped */
    uint32_t max_wqe_bytes;
    pthread_mutex_t sq_lock;
    int bfreg; /* the register given to it, compact numbering; -1: none */
};

/* A DEVX CREATE_MKEY object: the model's indirect mkey.  Also on its file's
 * mkey list, which UMR WQEs read under mkey_lock (never under the file's
 * lock: a doorbell may come while another thread runs a command). */
struct face_mkey {
    struct face_obj obj;
    struct mlx5dv_mkey *mkey;
    struct face_mkey *next;
};

/* A BlueFlame register (a bfreg) as the device sees it: the half the last
 * doorbell went to, and per half the copy being written into it. */
#define FACE_BFREGS_PER_UAR 4 /* libmlx5's numbering: 2, then 2 fast-path */
#define FACE_BF_REG_MAX     512 /* 4 in the 2 KiB after MLX5_BF_OFFSET */

struct face_bf {
    int last_half; /* -1: none yet */
    struct {
        int live; /* a doorbell began a copy that fits the half */
        int checked; /* all of it came and was checked */
        uint32_t filled; /* the 8-byte words written */
        uint32_t need; /* the WQE's bytes, in whole basic blocks */
        uint32_t qpn;
        uint8_t buf[FACE_BF_REG_MAX / 2];
    } half[2];
};

/* One open of /dev/infiniband/uverbsN. */
#define FACE_FILE_FDS 8

struct face_file {
    int fd[FACE_FILE_FDS]; /* the memfd the application holds, and its
                              duplicates; -1: free */
    int dev_index;
    ino_t ino; /* the memfd's inode: finds its mappings in /proc/self/maps */
    struct ibv_context *ctx; /* the model's context, after GET_CONTEXT */
    int async_wfd; /* write end of the async event fd, -1: none */
    int async_rfd; /* its read end, the application's; -1: closed */
    pthread_mutex_t lock; /* the object table and commands */
    struct {
        void *addr;
        size_t len;
        int seen; /* still mapped at the last scan */
    } uar[FACE_UAR_PAGES]; /* where the application mapped the UAR pages */
    unsigned long uar_page[FACE_UAR_PAGES]; /* each UAR page's address */
    /* BlueFlame (DCXEMU_MLX5_BF): each half's size, 0: none; the registers'
     * state by libmlx5's bfreg number; the registers given to QPs */
    unsigned bf_half;
    struct face_bf bf[FACE_UAR_PAGES * FACE_BFREGS_PER_UAR];
    pthread_mutex_t bf_lock;
    uint16_t bfreg_qps[FACE_TOT_BFREGS];
    unsigned bfreg_low_lat; /* the last ones, each for one QP */
    struct face_obj **objs;
    uint32_t nobjs;
    uint32_t cap;
    int devx; /* the context was asked with DEVX (MLX5_IB_ALLOC_UCTX_DEVX) */
    int compact_av; /* the device parses compact DC address vectors */
    pthread_mutex_t mkey_lock; /* the mkey list; taken after lock */
    struct face_mkey *mkeys;
};

/* ---- sysfs.c */
int face_sysfs_create(void);
void face_sysfs_remove(void);
int face_num_devices(void);

/* ---- preload.c: the files the application holds */
int face_real_close(int fd);
ssize_t face_real_write(int fd, const void *buf, size_t len);

/* ---- uverbs.c: the write() command ABI */
ssize_t face_uverbs_write(struct face_file *f, const void *buf, size_t len);
void face_file_release(struct face_file *f);
int face_obj_add(struct face_file *f, struct face_obj *o,
                 enum face_obj_type type, uint64_t user_handle);
void *
face_obj_get(struct face_file *f, uint32_t handle, enum face_obj_type type);
void face_obj_del(struct face_file *f, struct face_obj *o);
/* Copy a command's driver part in, zero-filled or truncated to the struct. */
void face_udata_in(void *dst, size_t dst_len, const void *src, size_t src_len);
/* Write a response: its core part then its driver part, each truncated to
 * what the caller made room for. */
void face_resp_out(uint64_t addr, size_t room, const void *src, size_t len);

/* A command handler: in/in_len the core request after its header (the
 * response address first), udata the driver part; out_len the room of the
 * response (core and driver).  0 or a positive errno. */
struct face_cmd {
    int ex; /* the extended form */
    const void *in;
    size_t in_len; /* the core request as sent */
    const void *udata;
    size_t udata_len;
    uint64_t resp; /* address of the response */
    size_t resp_len; /* room for the core response */
    uint64_t uresp; /* address of the driver's response */
    size_t uresp_len;
};

/* ---- ioctl.c: the ioctl() command ABI, for DEVX (0, or -1 and errno) */
int face_uverbs_ioctl(struct face_file *f, unsigned long req, void *arg);
void face_devx_release(struct face_obj *o);
/* The model's mkey of a key, with the file's mkey_lock held; NULL (and the
 * lock not held) when the file has none.  face_mkey_put drops the lock. */
struct mlx5dv_mkey *face_mkey_get(struct face_file *f, uint32_t key);
void face_mkey_put(struct face_file *f);

/* ---- umr.c: a UMR WQE as the model's builder: -1 (built), or an errno */
int face_umr_wr(struct face_qp *qp, const struct dcxemu_mlx5_wqe *w);

/* ---- uverbs_queue.c: CQs, SRQs, QPs */
int face_cmd_create_cq(struct face_file *f, const struct face_cmd *c);
int face_cmd_destroy_cq(struct face_file *f, const struct face_cmd *c);
int face_cmd_create_srq(struct face_file *f, const struct face_cmd *c);
int face_cmd_modify_srq(struct face_file *f, const struct face_cmd *c);
int face_cmd_query_srq(struct face_file *f, const struct face_cmd *c);
int face_cmd_destroy_srq(struct face_file *f, const struct face_cmd *c);
int face_cmd_create_qp(struct face_file *f, const struct face_cmd *c);
int face_cmd_modify_qp(struct face_file *f, const struct face_cmd *c);
int face_cmd_query_qp(struct face_file *f, const struct face_cmd *c);
int face_cmd_destroy_qp(struct face_file *f, const struct face_cmd *c);
void face_queue_release(struct face_obj *o);
int face_cq_busy(struct face_file *f, struct face_cq *cq);

/* ---- uar.c: UAR pages and their doorbells */
void face_uar_scan(void);
void face_uar_forget(struct face_file *f);
/* DCXEMU_MLX5_BF: the BlueFlame register size GET_CONTEXT reports, 0: none */
unsigned face_bf_reg_size(void);
void face_bf_init(struct face_file *f, unsigned reg_size, unsigned low_lat);
/* A register for a new QP, as the kernel gives them: libmlx5's bfreg index
 * for CREATE_QP's response; *bfreg what face_bfreg_put takes back. */
uint32_t face_bfreg_get(struct face_file *f, int *bfreg);
void face_bfreg_put(struct face_file *f, int bfreg);

/* ---- sq.c: send WQEs into the model */
unsigned face_sq_doorbell(struct face_qp *qp); /* WQEs taken */
unsigned face_sq_backstop(struct face_qp *qp);
void face_sq_reset(struct face_qp *qp);

void face_pd_release_ahs(struct face_pd *pd);

/* ---- async.c: asynchronous events */
void face_async_pump(struct face_file *f);
void face_async_event(struct face_file *f, struct face_obj *o, uint32_t type);
uint32_t face_async_events_read(struct face_obj *o);

/* ---- pump.c: completions out, receive WQEs in, completion channels */
void face_pump_register(struct face_obj *o);
void face_pump_unregister(struct face_obj *o);
void face_pump_all(void); /* every queue of the process */
/* the face object of a model QP, CQ or SRQ (pump_lock held) */
struct face_obj *face_pump_find(struct face_file *f, const void *model);
struct dcxemu_mlx5_cqe_info;
void face_cq_write_now(struct face_cq *cq,
                       const struct dcxemu_mlx5_cqe_info *ci);
void face_cq_arm(struct face_file *f, uint32_t cqn); /* an arm doorbell */
void face_sq_ring(struct face_file *f, uint32_t qpn); /* a send doorbell */
/* A BlueFlame copy against the WQE it names in the QP's send queue: 0 when
 * they match, else the first differing byte + 1 (-1: no such QP). */
int face_sq_bf_check(struct face_file *f, uint32_t qpn, const uint8_t *bytes,
                     uint32_t len);
int face_sq_compare(struct face_qp *qp, const uint8_t *bytes, uint32_t len);
/* The doorbell record shows WQEs the device has not taken (1), or not. */
int face_sq_pending(struct face_file *f, uint32_t qpn);
int face_sq_untaken(struct face_qp *qp);
uint32_t face_cq_events_read(struct face_cq *cq);
int face_channel_new(void); /* a completion channel: its read end */
int face_channel_wfd(int rfd); /* its write end, -1: not a channel */
void face_channel_closed(int fd);

/* every open file (preload.c) */
extern struct face_file *face_files[FACE_MAX_FILES];
extern int face_files_hwm; /* 1 + the highest slot ever used: scans stop there */
extern pthread_mutex_t face_files_lock;

/* What the face did (DCXEMU_MLX5_STATS=1 prints them at exit). */
struct face_stats {
    _Atomic uint64_t sq_doorbells; /* send doorbells trapped */
    _Atomic uint64_t arm_doorbells; /* CQ arm doorbells trapped */
    _Atomic uint64_t backstop_wqes; /* WQEs found by the backstop scan */
    _Atomic uint64_t wqes; /* WQEs posted to the model */
    _Atomic uint64_t bad_wqes; /* WQEs completed in error by the face */
    _Atomic uint64_t cqes; /* CQEs written */
    _Atomic uint64_t events; /* completion events written */
    _Atomic uint64_t recv_wqes; /* receive WQEs taken */
    _Atomic uint64_t commands; /* uverbs commands served */
    _Atomic uint64_t uar_scans; /* scans of the process's mappings for UARs */
    _Atomic uint64_t bf_copies; /* BlueFlame copies completed and checked */
    _Atomic uint64_t bf_stores; /* stores into BlueFlame buffers */
    _Atomic uint64_t bf_mismatches; /* copies unlike the WQE in the queue */
    _Atomic uint64_t bf_errors; /* stray, overlong or unfinished copies */
    _Atomic uint64_t bf_same_half; /* doorbells to the half just used */
};
extern struct face_stats face_stats;
#define FACE_STAT(_f, _n) \
    atomic_fetch_add_explicit(&face_stats._f, _n, memory_order_relaxed)

void face_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* DCXEMU_MLX5_TRACE=1: every command and its result is logged */
extern int face_trace;

#endif
