/* dcxemu internal definitions: shared-memory fabric layout and process-local
 * objects. */
#ifndef DCXEMU_INT_H
#define DCXEMU_INT_H

#include "dcxemu.h"
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <stdatomic.h>
#include <sys/types.h>

#define DCXEMU_MAGIC 0x4443584546414252ULL /* "DCXEFABR" */
/* 11: owner wake-ups; 10: RC QPs on the fabric; 9: copy epochs; 8: DCT RoCE
 * address; 7: mkey tags; 6: send_cqes counter; 5: 1024 members, 32768 QPs,
 * lazy tables */
#define DCXEMU_LAYOUT_VERSION 12u

/* Member slots: the table is sized for the most, but only slots ever taken are
 * touched (the fabric file is sparse), so memory grows with the number of
 * members. */
#define DCXEMU_MAX_MEMBERS 1024
#define DCXEMU_QP_IDX_BITS 15 /* qpn = gen << 15 | index (24 bits) */
#define DCXEMU_MAX_QPS     (1u << DCXEMU_QP_IDX_BITS)
/* DCI streams the device offers (dci_streams_caps): 2^5 streams, 2^3 of them
 * in error before the DCI goes to ERR (docs/device-spec.md §2.4) */
#define DCXEMU_LOG_MAX_DCI_STREAMS 5
#define DCXEMU_LOG_MAX_DCI_ERRORED 3
#define DCXEMU_QP_GEN_MAX \
    ((1u << (24 - DCXEMU_QP_IDX_BITS)) - 1) /* gen 1..511 */
#define DCXEMU_MAX_MRS     65536 /* key = index << 8 | tag */
#define DCXEMU_MAX_MKEYS   4096 /* key = (MAX_MRS + index) << 8, tag 0 */
#define DCXEMU_MKEY_BASE   DCXEMU_MAX_MRS
#define DCXEMU_MAX_CQS     4096
#define DCXEMU_MAX_SRQS    4096
#define DCXEMU_MAX_DEVICES 16
#define DCXEMU_NO_OWNER    0xffffu

/* Device capabilities (ConnectX-6-like, docs/device-spec.md §5). */
#define DCXEMU_MAX_QP_WR   32768
#define DCXEMU_SEND_WQE_BB 64 /* MLX5_SEND_WQE_BB */
#define DCXEMU_MAX_SEND_WQEBB \
    32768 /* max_send_wqebb = 1 << log_max_qp_sz = max_qp_wr */
#define DCXEMU_MAX_SGE      30
#define DCXEMU_MAX_CQE      4194303
#define DCXEMU_MAX_SRQ_WR   32767
#define DCXEMU_MAX_SRQ_SGE  31
#define DCXEMU_MAX_RQ_DESC  512 /* max_rq_desc_sz: 32 scatter entries */
#define DCXEMU_MAX_RD_ATOM  16
#define DCXEMU_MAX_PKEYS    128
#define DCXEMU_MAX_MSG_SZ   (1u << 30)
#define DCXEMU_MAX_MR_SIZE  (~0ULL)
#define DCXEMU_PKEY_DEFAULT 0xffff
#define DCXEMU_GID_TBL_LEN  128

/* ---------------------------------------------------------------- shared
 * memory layout ---- */

struct dcxemu_shm_member {
    uint32_t in_use;
    int32_t pid;
    uint64_t starttime; /* /proc/<pid>/stat field 22: tells a reused PID apart */
    uint64_t token; /* changes every time the slot is (re)used */
    uint32_t doorbell; /* futex word: rung to wake the member's engine thread */
    uint32_t pad;
};

struct dcxemu_shm_mr {
    uint32_t in_use;
    uint32_t tag; /* low 8 bits of the key; bumped on every free */
    uint16_t owner;
    uint16_t pad;
    uint32_t access;
    uint64_t owner_token;
    uint64_t pd_id;
    uint64_t addr; /* address in the owner's address space */
    uint64_t iova; /* address the keys use */
    uint64_t length;
};

/* One pointed-to range of an indirect mkey.  list: [addr, addr+bytes);
 * interleaved: bytes at addr + r*stride for repeat r (bytes and stride already
 * truncated to 16 bits, as hardware). */
struct dcxemu_mkey_entry {
    uint64_t addr;
    uint32_t lkey;
    uint32_t bytes;
    uint32_t stride;
    uint32_t pad;
};

struct dcxemu_shm_mkey {
    uint32_t in_use;
    uint16_t owner;
    uint8_t programmed; /* 0 = free/unusable (new, or after LOCAL_INV) */
    uint8_t interleaved;
    uint64_t owner_token;
    uint64_t pd_id;
    uint32_t max_entries;
    uint32_t n;
    uint32_t access;
    uint32_t repeat;
    uint32_t tag; /* low 8 bits of the valid key: set by each UMR */
    uint32_t pad;
    uint64_t length; /* L: valid offsets are [0, L) */
    uint64_t entries_off; /* heap: max_entries entries */
};

struct dcxemu_shm_qp {
    uint32_t in_use;
    uint32_t gen; /* generation of the last number handed out from this slot */
    uint32_t qpn; /* 0 until a DCT reaches RTR */
    uint16_t owner;
    uint8_t is_dct;
    uint8_t dct_ready; /* DCT in RTR: reachable */
    uint64_t owner_token;
    /* DCT attributes, read by initiators */
    uint64_t pd_id;
    uint64_t dc_key;
    uint32_t access;
    uint32_t lid;
    int32_t srq_idx;
    int32_t cq_idx;
    uint32_t min_rnr_timer;
    /* DCT address on a RoCE port (INIT->RTR AV): responses leave from GID
     * sgid_index */
    uint8_t roce; /* created by a process in RoCE mode */
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
    /* injected faults (dcxemu_fault_inject); cleared when the slot is reused */
    uint32_t fault_unreachable;
    uint32_t fault_drop_next;
    uint32_t fault_force_status; /* ibv_wc_status + 1; 0 = none */
    uint32_t fault_delay_us;
    /* data copy in flight on this (send) QP, with no fabric lock held: 1 + the
     * fabric's copy epoch when it began, 0 = none; copy_token: the copier's
     * member token (a dead copier blocks nobody) */
    _Atomic uint64_t copy_epoch;
    uint64_t copy_token;
    /* RC QP (the responder side reads these; pd_id, access, lid, srq_idx,
     * cq_idx, min_rnr_timer and the RoCE fields as for a DCT) */
    uint8_t is_rc;
    uint8_t rc_state; /* ibv_qp_state: reachable in RTR and RTS */
    _Atomic uint8_t rc_remote_err; /* a responder error moved it to ERR: the
                                      owner flushes its queues */
    uint8_t pad_rc;
    uint32_t rc_dest_qpn; /* the peer it is connected to */
    /* the P_Key of a DCT or RC QP (its pkey_index in its owner's table): a
     * request whose own P_Key does not match it is dropped */
    uint16_t pkey;
    uint8_t atomic_mode; /* DCT or RC responder: DCXEMU_ATOMIC_MODE_* */
    uint8_t ooo_dp; /* DCI or DCT created with MLX5DV_QP_CREATE_OOO_DP */
    uint32_t pad_pkey2;
};

struct dcxemu_shm_cqe {
    uint64_t wr_id;
    uint64_t sq_index; /* send CQEs: WQE index, frees SQ slots when polled */
    uint64_t ts_ns;
    uint32_t status;
    uint32_t opcode;
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;
    uint32_t imm; /* network order, opaque */
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
    uint16_t pkey_index;
    uint8_t solicited;
    uint8_t is_send;
};

struct dcxemu_shm_cq {
    uint32_t in_use;
    uint16_t owner;
    uint16_t ignore_overrun;
    uint32_t lock_ready; /* lock initialised when the slot is first used (keeps
                            pages untouched) */
    uint32_t wake_owner; /* ring the owner on every CQE (dcxemu_cq_wake_owner) */
    uint64_t owner_token;
    pthread_mutex_t lock; /* robust, process-shared; producers take it under the
                             fabric lock */
    uint64_t ring_off; /* heap offset of capacity CQEs */
    uint32_t capacity; /* cqe + 1 */
    uint32_t armed; /* 0, 1 = next CQE, 2 = solicited only */
    uint64_t head, tail; /* consumer / producer counters */
    uint32_t overrun; /* CQ in error after an overrun */
    uint32_t overrun_event;
    _Atomic uint64_t
            events_raised; /* completion events owed to the owner's channel */
};

struct dcxemu_shm_srq_wqe {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t pad;
    struct ibv_sge sge[]; /* max_sge entries */
};

struct dcxemu_shm_srq {
    uint32_t in_use;
    uint16_t owner;
    uint8_t rq; /* 1: the receive queue of an RC QP, not an ibv_srq */
    uint8_t wake_owner; /* ring the owner when found empty */
    uint32_t lock_ready; /* as for CQs */
    uint32_t pad0;
    uint64_t owner_token;
    pthread_mutex_t lock; /* robust, process-shared */
    uint64_t pd_id;
    uint64_t ring_off;
    uint32_t wqe_size;
    uint32_t max_wr; /* written-back max_wr */
    uint32_t max_sge;
    uint32_t limit; /* armed limit, 0 = disarmed */
    uint64_t head, tail;
    _Atomic uint32_t limit_event; /* owed SRQ_LIMIT_REACHED event */
    uint32_t pad2;
};

struct dcxemu_shm {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t uid;
    uint64_t struct_size;
    uint64_t total_size;
    pthread_mutex_t lock; /* the fabric lock: robust, process-shared */
    uint64_t next_pd_id;
    uint64_t next_token;
    uint32_t next_qp_idx;
    uint32_t next_mr_idx;
    uint64_t heap_off, heap_size,
            heap_free; /* heap_free: offset of first free block or 0 */
    _Atomic uint64_t atomic_ops; /* statistics */
    uint32_t max_members; /* slots that may be taken (DCXEMU_MAX_MEMBERS) */
    uint32_t pad1;
    _Atomic uint64_t
            next_reap_ns; /* one periodic reap per interval, fabric-wide */
    /* 1 + highest slot ever taken per table: scans stop there, because reading
     * a never-written page of the file allocates it (tmpfs) and would make
     * every table resident */
    uint32_t member_hwm, qp_hwm, mr_hwm, mkey_hwm, cq_hwm, srq_hwm;
    struct dcxemu_shm_member members[DCXEMU_MAX_MEMBERS];
    struct dcxemu_shm_qp qps[DCXEMU_MAX_QPS];
    struct dcxemu_shm_mr mrs[DCXEMU_MAX_MRS];
    struct dcxemu_shm_mkey mkeys[DCXEMU_MAX_MKEYS];
    struct dcxemu_shm_cq cqs[DCXEMU_MAX_CQS];
    struct dcxemu_shm_srq srqs[DCXEMU_MAX_SRQS];
    /* observability: fabric-wide per device, and per member slot (reset when
     * the slot is taken) */
    uint32_t num_devices; /* largest DCXEMU_NUM_DEVICES of any member */
    uint32_t pad;
    struct dcxemu_counters dev_cnt[DCXEMU_MAX_DEVICES];
    struct dcxemu_counters member_cnt[DCXEMU_MAX_MEMBERS][DCXEMU_MAX_DEVICES];
    /* copies in flight without the fabric lock (dcxemu_copy_begin/end/wait) */
    uint64_t copy_epoch; /* bumped by every dcxemu_copy_wait() */
    _Atomic uint64_t
            copies_active; /* copies begun and not ended (dead copiers stay) */
};

/* ----------------------------------------------------------------
 * process-local objects --- */

struct dcxemu_context {
    struct verbs_context vctx; /* handed out as &vctx.context */
    int dev_index;
    int devx;
    int async_wfd; /* write end of the async event pipe */
    struct dcxemu_context *next;
};

struct dcxemu_pd {
    struct ibv_pd pd;
    uint64_t pd_id;
    _Atomic int refcnt;
};

struct dcxemu_mr {
    struct ibv_mr mr;
    uint32_t idx;
};

struct dcxemu_mkey {
    struct mlx5dv_mkey mkey;
    uint32_t idx;
    struct dcxemu_pd *pd;
};

struct dcxemu_ah {
    struct ibv_ah ah;
    struct ibv_ah_attr attr;
};

struct dcxemu_channel {
    struct ibv_comp_channel ch;
    int wfd;
};

struct dcxemu_cq {
    struct ibv_cq_ex cqx;
    int idx;
    int single_threaded;
    uint64_t wc_flags;
    struct dcxemu_shm_cq *s;
    struct dcxemu_shm_cqe cur; /* CQE read_* describe */
    pthread_mutex_t poll_lock; /* start_poll .. end_poll */
    uint64_t events_delivered;
    uint32_t events_gotten;
    _Atomic int refcnt; /* QPs attached */
};

struct dcxemu_srq {
    struct ibv_srq srq;
    int idx;
    struct dcxemu_shm_srq *s;
    struct dcxemu_pd *pd;
    _Atomic int refcnt;
};

/* One send WQE as the model keeps it (process-local: only the owner executes
 * its DCI). */
enum dcxemu_op {
    DCXEMU_OP_NONE,
    DCXEMU_OP_SEND,
    DCXEMU_OP_SEND_IMM,
    DCXEMU_OP_WRITE,
    DCXEMU_OP_WRITE_IMM,
    DCXEMU_OP_READ,
    DCXEMU_OP_CMP_SWP,
    DCXEMU_OP_FETCH_ADD,
    DCXEMU_OP_UMR_LIST,
    DCXEMU_OP_UMR_INTERLEAVED,
    DCXEMU_OP_LOCAL_INV,
    DCXEMU_OP_NOP,
};

struct dcxemu_wqe {
    uint64_t wr_id;
    uint64_t raddr;
    uint64_t cmp, swap_add;
    uint64_t dc_key;
    uint32_t flags;
    uint32_t opcode;
    uint32_t rkey;
    uint32_t imm;
    uint32_t dlid;
    uint32_t dctn;
    uint8_t data_setters;
    uint8_t addr_setters;
    uint8_t is_inline;
    uint8_t is_global; /* the AH's GRH: RoCE routing (dgid), source GID, hop
                          limit */
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
    uint8_t pad;
    union ibv_gid dgid;
    uint32_t num_sge;
    uint32_t inline_len;
    uint32_t umr_n; /* UMR: entries in the QP's umr area of this slot */
    uint32_t umr_access;
    uint32_t umr_repeat;
    uint32_t pad2;
    uint64_t not_before_ns; /* deferred mode: earliest execution time */
    /* raw WQE (mlx5dv_wr_raw_wqe) atomics, decoded at post; opcode is CMP_SWP
     * or FETCH_ADD */
    uint64_t cmp_mask; /* masked CS: compare mask; masked FA: field boundary in
                          cmp */
    uint64_t swap_mask; /* masked CS: swap mask */
    uint8_t raw; /* 1: posted as a raw WQE (CQE opcode MLX5DV_WC_RAW_WQE) */
    uint8_t raw_masked; /* extended (masked) atomic opcode */
    uint8_t raw_size; /* operand size in bytes: 4 or 8 */
    uint8_t raw_bad; /* malformed: completes with LOC_QP_OP_ERR, nothing
                        executes */
    uint16_t stream_id; /* DCI stream (mlx5dv_wr_set_dc_addr_stream) */
    uint16_t pad3;
    /* followed by max_send_sge struct ibv_sge, then max_inline_data bytes */
};

/* The retry state of a send queue's head WQE: the QP's, or each DCI stream's
 * (req.c). */
struct dcxemu_lane {
    uint32_t rnr_count, retry_count;
    uint64_t gate_ns; /* head WQE may run from then on (deferral, delay); 0 =
                         unset */
};

struct dcxemu_streams;

struct dcxemu_qp {
    struct ibv_qp_ex qpx;
    struct mlx5dv_qp_ex dv;
    struct dcxemu_context *ctx;
    int idx;
    int is_dct;
    int is_rc; /* RC QP (also the loopback one hosting UMR / LOCAL_INV) */
    int ooo_dp; /* DCI or DCT with MLX5DV_QP_CREATE_OOO_DP (ooo.c) */
    int has_qpx; /* created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS */
    int sq_sig_all;
    int been_rts; /* wr_complete accepted only after RTS since last RESET */
    _Atomic int hw_state; /* what the device thinks (ibv_query_qp reports it) */
    uint64_t send_ops;
    struct ibv_qp_cap cap;
    uint32_t port, pkey_index, path_mtu;
    uint32_t timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic,
            sq_psn, access;
    uint64_t dc_key;
    struct dcxemu_pd *pd;
    struct dcxemu_cq *send_cq, *recv_cq;
    struct dcxemu_srq *srq;
    /* RC: the peer (INIT->RTR) and the QP's own receive queue, a ring of the
     * SRQ table used by this QP alone (-1: none, or an SRQ) */
    uint32_t dest_qpn, rq_psn, max_dest_rd_atomic;
    struct ibv_ah_attr av;
    int rq_idx;
    struct dcxemu_shm_srq *rq;
    /* send queue */
    pthread_mutex_t post_lock; /* wr_start .. wr_complete/abort */
    pthread_mutex_t exec_lock; /* one executor at a time, FIFO */
    size_t wqe_size;
    char *ring;
    uint32_t ring_slots;
    struct dcxemu_mkey_entry
            *umr_ring; /* umr_max entries per slot (RC with MR ops) */
    uint32_t umr_max;
    uint64_t sq_posted; /* published WQEs */
    uint64_t sq_done; /* executed (completed or flushed) */
    _Atomic uint64_t sq_freed; /* slots released by polled CQEs */
    /* batch being built */
    int batch_err;
    uint32_t batch_n;
    struct dcxemu_wqe *cur;
    /* retry state of the head WQE */
    struct dcxemu_lane lane;
    _Atomic uint64_t deadline_ns; /* 0 = nothing waits */
    /* DCI streams (NULL: none); exec_lock held */
    struct dcxemu_streams *streams;
};

struct dcxemu_settings {
    char fabric[200]; /* "/name" of the fabric in use */
    int fabric_explicit; /* DCXEMU_FABRIC given: no fallback name */
    int keep_fabric; /* DCXEMU_KEEP_FABRIC: leave the file when the last member
                        leaves */
    uint32_t max_members; /* DCXEMU_MAX_MEMBERS, used when the fabric is created
                           */
    int num_devices;
    uint32_t max_wqe;
    double time_scale;
    uint64_t heap_mb;
    int strict_umr; /* DCXEMU_STRICT_UMR: re-UMR needs LOCAL_INV first */
    int mkey_update_tag; /* DCXEMU_MKEY_UPDATE_TAG: a UMR may set the mkey's tag
                          */
    int yama_scope; /* DCXEMU_YAMA_SCOPE (test-only): -1 = read the kernel's */
    long ptracer; /* DCXEMU_PTRACER: -1 any, 0 none, else a PID */
    int no_atomics; /* DCXEMU_ATOMIC_CAP=none: atomic_cap IBV_ATOMIC_NONE */
    int log_max_ra_dc; /* DCXEMU_LOG_MAX_RA_DC: HCA cap log_max_ra_{req,res}_dc */
    int no_ext_atomics; /* DCXEMU_EXT_ATOMICS=0: no masked atomics (HCA atomic
                           caps) */
    int no_raw_wqe; /* DCXEMU_RAW_WQE=0: a provider without the raw-WQE
                       builder (rdma-core before v36) */
    int ooo_dp; /* DCXEMU_OOO_DP: DC out-of-order data placement offered */
    int compact_av; /* DCXEMU_COMPACT_AV: HCA cap compact_address_vector;
                       0: a DC WQE with a compact AV is malformed */
    int roce; /* DCXEMU_LINK_LAYER=ethernet: RoCE port, GID routing */
    uint16_t pkeys[DCXEMU_MAX_PKEYS]; /* DCXEMU_PKEY_TABLE: the port's P_Key
                                         table, 0 = an empty entry */
    uint32_t roce_routers; /* DCXEMU_ROCE_ROUTERS: routers every RoCE packet
                              crosses */
    int grh_required; /* DCXEMU_GRH_REQUIRED: an InfiniBand port that
                         requires a GRH (IBV_QPF_GRH_REQUIRED) */
    int roce_tclass; /* DCXEMU_ROCE_TCLASS: the port's configured global
                        traffic class, -1: none */
    int deferred; /* DCXEMU_EXEC=deferred */
    uint32_t defer_us;
    /* DCXEMU_FAULTS: probabilities scaled to 2^32 (0 = off) */
    int faults;
    uint64_t fault_seed;
    uint32_t drop_p, delay_p, status_p;
    uint32_t delay_us, status;
};

/* ---------------------------------------------------------------- fabric.c
 * ---------------- */

/* settings.c */
extern struct dcxemu_settings dcxemu_cfg;
/* The QPC atomic mode the kernel gives a responder created with
 * REMOTE_ATOMIC (mlx5_ib get_atomic_mode): with masked atomics in the HCA's
 * caps, the mode of the largest atomic size (4 | 8 bytes: up to 8 bytes,
 * which takes masked operations), else IB-compatible (standard 8-byte
 * compare-swap and fetch-add only). A DCI gets none: the kernel takes no
 * access flags on a DCI. */
#define DCXEMU_ATOMIC_MODE_NONE    0
#define DCXEMU_ATOMIC_MODE_IB_COMP 1
#define DCXEMU_ATOMIC_MODE_8B      3
static inline uint8_t dcxemu_atomic_mode(uint32_t access)
{
    if (!(access & IBV_ACCESS_REMOTE_ATOMIC) || dcxemu_cfg.no_atomics) {
        return DCXEMU_ATOMIC_MODE_NONE;
    }
    return dcxemu_cfg.no_ext_atomics ? DCXEMU_ATOMIC_MODE_IB_COMP :
                                       DCXEMU_ATOMIC_MODE_8B;
}

/* Must an address (AH, QP AV) carry a GRH?  RoCE, and InfiniBand ports that
 * report IBV_QPF_GRH_REQUIRED. */
static inline int dcxemu_grh_required(void)
{
    return dcxemu_cfg.roce || dcxemu_cfg.grh_required;
}
/* resp.c: the traffic classes of this process's last RoCE request that
 * reached its target and of that target's responses; -1: none yet */
extern _Atomic int dcxemu_last_req_tclass, dcxemu_last_resp_tclass;
/* Do two P_Keys let their ports talk?  The same partition (low 15 bits, not
 * 0) and at least one full member (bit 15): two limited members cannot. */
static inline int dcxemu_pkey_match(uint16_t a, uint16_t b)
{
    return ((a & 0x7fff) != 0) && ((a & 0x7fff) == (b & 0x7fff)) &&
           ((a | b) & 0x8000);
}
void dcxemu_read_settings(void); /* once per process */
#define FABRIC_NAME_TRIES \
    16 /* the default name, then "<default>.1" .. "<default>.15" */
/* "/name" of fabric candidate cand into buf; 1 if the name is explicit
 * (DCXEMU_FABRIC) */
int dcxemu_fabric_candidate(int cand, char *buf, size_t len);

extern struct dcxemu_shm *dcxemu_fab;
extern int dcxemu_me; /* my member slot */
extern uint64_t dcxemu_my_token;
extern pthread_mutex_t dcxemu_reg_lock; /* process registry below */
extern struct dcxemu_cq *dcxemu_local_cqs[DCXEMU_MAX_CQS];
extern struct dcxemu_srq *dcxemu_local_srqs[DCXEMU_MAX_SRQS];
extern struct dcxemu_qp *dcxemu_local_qps[DCXEMU_MAX_QPS];
extern struct dcxemu_context *dcxemu_contexts;

/* Device-fatal mode (dcxemu_device_fatal), per process and device: set once,
 * never cleared. */
extern int dcxemu_dev_fatal[DCXEMU_MAX_DEVICES];
static inline int dcxemu_is_fatal(int dev)
{
    return __atomic_load_n(&dcxemu_dev_fatal[dev], __ATOMIC_ACQUIRE);
}

/* This process's QP / CQ / SRQ slot indices, dense (under dcxemu_reg_lock), so
 * the engine's scans cost what the process uses rather than the size of the
 * fabric-wide tables. */
struct dcxemu_idx_set {
    uint32_t n;
    uint32_t *item; /* item[0..n) */
    uint32_t *pos; /* pos[index] = position in item */
};
extern struct dcxemu_idx_set dcxemu_qp_set, dcxemu_cq_set, dcxemu_srq_set;
void dcxemu_idx_set_add(struct dcxemu_idx_set *s, uint32_t index);
void dcxemu_idx_set_del(struct dcxemu_idx_set *s, uint32_t index);

int dcxemu_attach(void); /* engine.c: attach and start the engine; 0 or errno */
/* Attach once per process (later calls return the first result); start runs
 * once attached, stop when leaving at exit: the engine's own calls, so that the
 * fabric never names the layer above. */
int dcxemu_fabric_attach(int (*start)(void), void (*stop)(void));
void dcxemu_ptracer_allow(void); /* let peers reach our memory (first DCT) */
int dcxemu_usable(void); /* 0, or EPERM in a forked child / errno of attach */
int dcxemu_lock(void); /* fabric lock; 0 or errno */
void dcxemu_unlock(void);
int dcxemu_shm_lock(pthread_mutex_t *m);
void dcxemu_shm_mutex_init(pthread_mutex_t *m);
/* heap.c, all under the fabric lock */
void dcxemu_heap_init(void); /* a new fabric: one free block */
uint64_t dcxemu_heap_alloc(uint64_t size); /* 0 = ENOMEM */
void dcxemu_heap_free(uint64_t off);
void dcxemu_heap_rebuild(
        void); /* after a member died holding the fabric lock */
void dcxemu_heap_free_owned(
        uint64_t token); /* what a member that left still held */
static inline void *dcxemu_ptr(uint64_t off)
{
    return (char *)dcxemu_fab + off;
}
int dcxemu_member_alive(int m, uint64_t token); /* under the fabric lock */
int dcxemu_owner_is_me(uint16_t owner, uint64_t token);
void dcxemu_ring(int member); /* wake a member's engine (its doorbell) */
void dcxemu_engine_kick(void); /* ring my own doorbell */
uint64_t dcxemu_now_ns(void);
uint64_t dcxemu_scaled_ns(double ns);
void dcxemu_reap_dead_members(void); /* under the fabric lock */
uint64_t dcxemu_random(void); /* deterministic per process (seed) */
uint32_t dcxemu_qp_next_gen(
        uint32_t idx); /* fabric lock held: the slot's next generation */
static inline void
dcxemu_hwm_bump(uint32_t *hwm, uint32_t idx) /* fabric lock held */
{
    if (idx + 1 > *hwm) {
        *hwm = idx + 1;
    }
}
int dcxemu_chance(uint32_t p); /* true with probability p / 2^32 */

void dcxemu_count(int member, int dev, size_t field_off, uint64_t n);
#define DCXEMU_COUNT(_m, _d, _field, _n) \
    dcxemu_count(_m, _d, offsetof(struct dcxemu_counters, _field), _n)

extern int dcxemu_trace_fd; /* trace.c; -1: tracing off */
void dcxemu_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define DCXEMU_TRACE(...)                              \
    do {                                               \
        if (__builtin_expect(dcxemu_trace_fd >= 0, 0)) \
            dcxemu_trace(__VA_ARGS__);                 \
    } while (0)

struct iovec;
int dcxemu_vm_copy(pid_t pid, int to_remote, const struct iovec *local, int nl,
                   const struct iovec *remote, int nr);
/* The process dcxemu_vm_copy() reaches member m through (fabric lock held): 0 =
 * this process. */
static inline pid_t dcxemu_copy_pid(int member)
{
    return member == dcxemu_me ? 0 : dcxemu_fab->members[member].pid;
}

/* ---------------------------------------------------------------- verbs
 * objects ----------- */

static inline struct dcxemu_context *dcxemu_ctx(struct ibv_context *c)
{
    return (struct dcxemu_context *)((char *)c - offsetof(struct dcxemu_context,
                                                          vctx.context));
}

/* Node GUID of device dev: Mellanox OUI, then a device number the same in every
 * member. */
static inline uint64_t dcxemu_guid(int dev)
{
    return 0x0002c90300dc0000ull | (uint64_t)(dev + 1);
}

/* port.c: entry `index` of device `dev`'s GID table in this process's port mode
 * (the table is the same in every process): 0, ENODATA (an empty entry) or
 * EINVAL (beyond the table). */
int dcxemu_gid_entry(int dev, uint32_t index, union ibv_gid *gid,
                     uint32_t *type);
int dcxemu_query_port_op(struct ibv_context *context, uint8_t port_num,
                         struct ibv_port_attr *port_attr, size_t port_attr_len);

/* The context's ops (device.c fills the table): cq.c, srq.c. */
struct ibv_cq_ex *dcxemu_create_cq_ex_op(struct ibv_context *context,
                                         struct ibv_cq_init_attr_ex *a);
int dcxemu_poll_cq_op(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc);
int dcxemu_req_notify_cq_op(struct ibv_cq *ibcq, int solicited_only);
struct ibv_srq *dcxemu_create_srq_ex_op(struct ibv_context *context,
                                        struct ibv_srq_init_attr_ex *a);
int dcxemu_post_srq_recv_op(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad_wr);

int dcxemu_cq_push(struct dcxemu_shm_cq *cq,
                   const struct dcxemu_shm_cqe *cqe); /* fabric lock held */
void dcxemu_cq_purge_qpn(struct dcxemu_shm_cq *cq, uint32_t qpn);
void dcxemu_deliver_events(void); /* owner side: channels and async events */
void dcxemu_async_post(struct dcxemu_context *ctx, enum ibv_event_type type,
                       void *obj);
void dcxemu_qp_progress(struct dcxemu_qp *qp);

/* DCI streams (req.c): the state of a DCI created with 2^log_conc streams,
 * 2^log_err of them allowed in error (0 or ENOMEM); its reset (RESET,
 * exec_lock held) and release. */
int dcxemu_streams_create(struct dcxemu_qp *qp, uint8_t log_conc,
                          uint8_t log_err);
void dcxemu_streams_reset(struct dcxemu_qp *qp);
void dcxemu_streams_free(struct dcxemu_qp *qp);
uint32_t dcxemu_streams_num(const struct dcxemu_qp *qp); /* 1 without */
int dcxemu_streams_reset_one(struct dcxemu_qp *qp, uint32_t stream_id);
/* srq.c: an RC QP's own receive queue (caps sized and written back) */
int dcxemu_rq_create(struct dcxemu_qp *qp, struct ibv_qp_cap *cap);
void dcxemu_rq_destroy(struct dcxemu_qp *qp);
/* flush (or drop: discard) its WQEs; 1 if a channel event was raised */
int dcxemu_rq_flush(struct dcxemu_qp *qp, int discard);
int dcxemu_rq_post(struct dcxemu_qp *qp, struct ibv_recv_wr *wr,
                   struct ibv_recv_wr **bad_wr);
/* resp.c: an RC QP the device moved to ERR (a local error, or a responder
 * error a peer recorded): publish, absorb and flush (exec_lock held) */
void dcxemu_rc_set_err(struct dcxemu_qp *qp);
int dcxemu_rc_absorb_remote_err(struct dcxemu_qp *qp);
struct ibv_qp *dcxemu_create_qp_ex_op(struct ibv_context *context,
                                      struct ibv_qp_init_attr_ex *attr);
void dcxemu_ops_init(struct ibv_context_ops *ops);


/* ---------------------------------------------------------------- testapi.c
 * ---------------- */

/* Hooks behind the test-only queries of dcxemu.h. */
void dcxemu_test_engine_waits(uint32_t seen,
                              uint64_t interval_ns); /* before its futex wait */
void dcxemu_test_engine_runs(void); /* after it */
void dcxemu_test_cq_destroy_wait(
        int delta); /* +1/-1 around destroy_cq's wait for acks */

/* ---------------------------------------------------------------- data copies
 * without the lock */

/* An executor about to copy for send QP slot qp_idx records the copy (fabric
 * lock held, in the same hold that resolved the keys); it ends it after the
 * copy (with or without the lock).  A caller that just invalidated a key, an
 * mkey or a DCT under the fabric lock calls dcxemu_copy_wait() after releasing
 * it: it returns once every copy that began before is over (or its copier
 * died), so on return no copy through the invalidated object runs or can start.
 */
void dcxemu_copy_begin(int qp_idx);
void dcxemu_copy_end(int qp_idx);
void dcxemu_copy_wait(void); /* no fabric lock held */
/* ooo.c: out-of-order data placement.  The caps query device reports; 0 or
 * EOPNOTSUPP for a DC QP asking for the flag; mark a new DCI or DCT (before
 * anyone reaches it). */
void dcxemu_ooo_caps(struct dcxemu_mlx5dv_ooo_recv_wrs_caps *caps);
int dcxemu_ooo_create_ok(void);
void dcxemu_ooo_mark(struct dcxemu_qp *qp);

void dcxemu_test_hook_call(enum dcxemu_test_event ev, uint32_t qpn,
                           uint64_t len);

#endif
