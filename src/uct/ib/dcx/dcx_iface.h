/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The dcx interface: one DC target (DCT) on a shared receive queue, reached
 * by peers with (LID or GID, DCT number, DC key), and a pool of DC initiators
 * (DCIs) that endpoints borrow while they have work outstanding.
 *
 *   endpoints (any number)          DCI pool (NUM_DCI)           peers' DCTs
 *   +-------+  borrow while busy   +------+------+-----+
 *   | ep A  |--------------------->| dci0 | dci1 | ... |---> (lid, dctn, key)
 *   | ep B  |---(waits in the      +------+------+-----+
 *   +-------+    arbiter)          free stack: indices of idle DCIs
 *
 * A DCI is created when the pool first needs it (DCI 0 with the interface,
 * or all of them under the rand policy), so an interface that only
 * receives, or serves few peers at a time, holds few QPs.
 *
 * A DCI counts posted and completed WRs; operations that need a completion
 * (user callbacks, bcopy gets, atomic results, flushes) wait in its
 * outstanding queue, ordered by the sequence number of the last WR they
 * depend on. An endpoint returns its DCI when everything it posted has
 * completed.
 *
 * Completion moderation (UCX_DCX_TX_CQ_MODERATION): a work request asks for
 * a completion (IBV_SEND_SIGNALED) when an operation waits for it, every
 * N-th request, and while endpoints wait for a DCI; the others are retired
 * by the next signaled one, as on mlx5, where one CQE completes every
 * earlier WQE of its send queue. The work request id carries its sequence
 * number, so a CQE tells how many requests it retires. Whoever waits for a
 * DCI to drain (a flush, a keepalive, the pool) and finds an unsignaled
 * tail asks for a completion with a signaled zero-length write.
 */
#ifndef UCT_DCX_IFACE_H_
#define UCT_DCX_IFACE_H_

#include "dcx_dci_pool.h"
#include "dcx_ep.h"
#include "dcx_md.h"

#include "../umr/dcx_umr.h"
#include <uct/ib/dcx/dcx.h>

#include <uct/base/uct_iface.h>
#include <uct/base/uct_iov.inl>
#include <ucs/arch/cpu.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/ptr_array.h>
#include <ucs/datastruct/queue.h>
#include <ucs/time/time.h>


/* The largest DCI pool: DCI indices double as work request ids. */
#define UCT_DCX_MAX_DCI 1024
/* DCI streams of a DCI at most: an endpoint keeps its stream in 8 bits. */
#define UCT_DCX_MAX_DCI_STREAMS 256

/* Completions polled per progress call, as UCX's IB transports do. */
#define UCT_DCX_POLL_BATCH 16

/* Gather entries per DCI work request (written back by the device). */
#define UCT_DCX_MAX_SGE                8
#define UCT_DCX_PKEY_PARTITION_MASK    0x7fff /* a P_Key's partition */
#define UCT_DCX_IB_LINK_LOCAL_PREFIX   0xfe80000000000000ull /* IBTA 4.1.1 */
#define UCT_DCX_ROCE_V2_TCLASS_DEFAULT 106 /* DSCP 26 (AF31), ECN capable */
#define UCT_DCX_PKEY_MEMBERSHIP_MASK   0x8000 /* a P_Key's full membership */
#define UCT_DCX_TRACE_AM_MAX           512 /* bytes of an inline AM traced */

/* Elements of one scatter-gather put at most (also bounded by half the
 * send queue): runs and operations of one call live on the stack. */
#define UCT_DCX_SGL_MAX 256

/* Receive buffers posted to the SRQ per post call. */
#define UCT_DCX_RX_POST_BATCH 64

#define UCT_DCX_EP_NO_DCI UINT16_MAX
/* tx.stream_dci of an interface that has none (never a DCI index). */
#define UCT_DCX_NO_STREAM_DCI (UCT_DCX_EP_NO_DCI - 1)

/* Work request ids: the DCI index below, its sequence number above. */
#define UCT_DCX_WR_ID_DCI_BITS 16
#define UCT_DCX_WR_ID(_dci, _sn) \
    (((uint64_t)(_sn) << UCT_DCX_WR_ID_DCI_BITS) | (_dci))
#define UCT_DCX_WR_ID_DCI(_wr_id) \
    ((uint16_t)((_wr_id)&UCS_MASK(UCT_DCX_WR_ID_DCI_BITS)))
#define UCT_DCX_WR_ID_SN(_wr_id) ((_wr_id) >> UCT_DCX_WR_ID_DCI_BITS)

/* Immediate data of flow-control messages: above every active message id,
 * so they never reach a user handler. */
#define UCT_DCX_IMM_FC_REQUEST 0xfc01u
#define UCT_DCX_IMM_FC_GRANT   0xfc02u
/* A receive without immediate data (no dcx sender sends one). */
#define UCT_DCX_IMM_NONE UINT32_MAX

/* Flow-control requests re-sent per progress call at most. */
#define UCT_DCX_FC_TIMER_BATCH 32


/* How endpoints share the DCI pool (UCX_DCX_TX_POLICY); each is one
 * uct_dcx_dci_policy_ops_t (dcx_dci_policy.c). */
typedef enum {
    /* An endpoint takes a DCI from the pool while it has operations
     * outstanding and returns it when they have all completed. */
    UCT_DCX_TX_POLICY_DCS,
    /* As dcs, but while other endpoints wait for a DCI, an endpoint with
     * QUOTA operations outstanding stops until its DCI drains, so one busy
     * endpoint cannot starve the others. */
    UCT_DCX_TX_POLICY_DCS_QUOTA,
    /* Every endpoint uses a DCI chosen at random when it is created,
     * shared and never released: nobody waits for a DCI, but an error on a
     * DCI fails every endpoint using it. */
    UCT_DCX_TX_POLICY_RAND,
    /* One DCI shared by every endpoint, its DCI streams (where the device
     * has them) handed out in turn, so an endpoint whose peer stalls holds
     * back only the endpoints on its stream; as rand, an error on the DCI
     * fails every endpoint that uses it. */
    UCT_DCX_TX_POLICY_HW_DCS,
    /* As dcs_quota, but an endpoint that finds the pool empty moves to a
     * DCI stream of one more DCI, shared as under hw_dcs, instead of
     * waiting (where the device has streams; else it waits as dcs_quota). */
    UCT_DCX_TX_POLICY_DCS_HYBRID,
    UCT_DCX_TX_POLICY_LAST
} uct_dcx_tx_policy_t;


/* How work requests reach the DCIs (UCX_DCX_POST): chosen when the
 * interface opens, by the DCIs' builders (dci->qpx, dci->mqpx) and the
 * send CQ's polling functions (tx.poll_cq), never per operation. */
typedef enum {
    UCT_DCX_POST_AUTO,
    UCT_DCX_POST_DIRECT, /* dcx's own WQE writer and CQE parser */
    UCT_DCX_POST_VERBS, /* rdma-core's builders and ibv_cq_ex */
    UCT_DCX_POST_LAST
} uct_dcx_post_t;


/* What the data path needs to know of the DCI policy, without a call:
 * kept in the interface (tx.policy_flags), read by the inline helpers in
 * dcx_iface.inl. */
enum {
    /* Endpoints share DCIs picked when they are created (rand): a DCI has
     * no holder, never goes back to the free stack, and its error fails
     * every endpoint using it. */
    UCT_DCX_DCI_POLICY_FLAG_SHARED = UCS_BIT(0),
    /* While endpoints wait for a DCI, a holder with QUOTA operations
     * outstanding yields its DCI (dcs_quota). */
    UCT_DCX_DCI_POLICY_FLAG_QUOTA = UCS_BIT(1)
};


/* Flags of the interface address. */
enum {
    UCT_DCX_IFACE_ADDR_VERSION_1    = 1, /* bits 0..3: address format version */
    UCT_DCX_IFACE_ADDR_VERSION_MASK = 0xf,
    UCT_DCX_IFACE_ADDR_FLAG_ATOMIC64 = UCS_BIT(4),
    /* the DCT takes masked atomics: its device lists them, so the kernel
     * gives it the extended atomic mode (a DCI gets none: the kernel takes no
     * access flags on one, and the requester needs none) */
    UCT_DCX_IFACE_ADDR_FLAG_EXT_ATOMICS = UCS_BIT(5)
};


/* Flags of the device address. */
enum {
    UCT_DCX_DEV_ADDR_FLAG_GLOBAL  = UCS_BIT(0), /* a GID follows (RoCE) */
    UCT_DCX_DEV_ADDR_FLAG_ROCE_V2 = UCS_BIT(1), /* RoCE v2 (else v1) */
    UCT_DCX_DEV_ADDR_FLAG_IPV4    = UCS_BIT(2), /* an IPv4-mapped GID */
    UCT_DCX_DEV_ADDR_FLAG_IB_GID  = UCS_BIT(3) /* a GID follows (InfiniBand,
                                                  global addressing) */
};


/* What a peer needs to reach this interface's DCT. */
typedef struct uct_dcx_iface_addr {
    uint8_t dctn[3]; /* 24-bit DCT number, little endian */
    uint8_t flags; /* UCT_DCX_IFACE_ADDR_* */
    uint64_t dc_key; /* DC access key of the DCT */
} UCS_S_PACKED uct_dcx_iface_addr_t;


typedef struct uct_dcx_dev_addr {
    uint16_t lid;
    uint8_t flags; /* UCT_DCX_DEV_ADDR_FLAG_* */
    /* union ibv_gid follows when UCT_DCX_DEV_ADDR_FLAG_GLOBAL or
     * UCT_DCX_DEV_ADDR_FLAG_IB_GID is set */
} UCS_S_PACKED uct_dcx_dev_addr_t;


/* A sender asks for credits: the grant goes to the sender's own DCT, with
 * the sender's DC key (never a well-known one). */
typedef struct uct_dcx_fc_request {
    uint64_t ep_id; /* the sender's endpoint, echoed by the grant */
    uint64_t dc_key; /* of the sender's DCT */
    uint8_t dctn[3]; /* the sender's DCT number, little endian */
    uint8_t sn; /* request number, echoed by the grant */
    uint16_t credits; /* messages sent before this request, not granted */
    uint16_t lid; /* the sender's device address */
    uint8_t dev_flags; /* UCT_DCX_DEV_ADDR_FLAG_*: a GID follows */
} UCS_S_PACKED uct_dcx_fc_request_t;


typedef struct uct_dcx_fc_grant {
    uint64_t ep_id;
    uint16_t credits;
    uint8_t sn;
} UCS_S_PACKED uct_dcx_fc_grant_t;


/* A grant that waits for a DCI. */
typedef struct uct_dcx_fc_pending_grant {
    ucs_queue_elem_t queue;
    struct ibv_ah *ah;
    uint64_t dc_key;
    uint32_t dctn;
    uct_dcx_fc_grant_t grant;
} uct_dcx_fc_pending_grant_t;


/* Address handles are shared by every endpoint and grant to a device. */
typedef struct uct_dcx_ah_key {
    union ibv_gid gid; /* zero unless global */
    uint16_t lid;
    uint8_t global;
} uct_dcx_ah_key_t;

static inline khint32_t uct_dcx_ah_key_hash(uct_dcx_ah_key_t key)
{
    uint64_t h = key.gid.global.subnet_prefix ^
                 (key.gid.global.interface_id * 31) ^ ((uint64_t)key.lid << 1) ^
                 key.global;
    return kh_int64_hash_func(h);
}

static inline int uct_dcx_ah_key_equal(uct_dcx_ah_key_t a, uct_dcx_ah_key_t b)
{
    return (a.lid == b.lid) && (a.global == b.global) &&
           !memcmp(&a.gid, &b.gid, sizeof(a.gid));
}

KHASH_INIT(uct_dcx_ah, uct_dcx_ah_key_t, struct ibv_ah *, 1,
           uct_dcx_ah_key_hash, uct_dcx_ah_key_equal)

/* A peer DCT as endpoints address it: shared by every endpoint to the same
 * DCT, so an endpoint stays small however many there are. */
typedef struct uct_dcx_peer {
    struct ibv_ah *ah;
    uint64_t dc_key;
    uint32_t dctn;
    uint32_t refcount;
    unsigned index; /* in the interface's peer table */
    uint16_t lid; /* for raw WQEs, which carry their own AV */
    uint8_t is_global; /* raw WQEs: the AV has a GRH to gid */
    uint8_t ext_atomics; /* its DCT takes masked atomics */
    union ibv_gid gid;
} uct_dcx_peer_t;

typedef struct uct_dcx_peer_key {
    struct ibv_ah *ah;
    uint64_t dc_key;
    uint32_t dctn;
} uct_dcx_peer_key_t;

static inline khint32_t uct_dcx_peer_key_hash(uct_dcx_peer_key_t key)
{
    return kh_int64_hash_func((uintptr_t)key.ah ^ key.dc_key ^
                              ((uint64_t)key.dctn << 40));
}

static inline int
uct_dcx_peer_key_equal(uct_dcx_peer_key_t a, uct_dcx_peer_key_t b)
{
    return (a.ah == b.ah) && (a.dc_key == b.dc_key) && (a.dctn == b.dctn);
}

KHASH_INIT(uct_dcx_peer, uct_dcx_peer_key_t, uct_dcx_peer_t *, 1,
           uct_dcx_peer_key_hash, uct_dcx_peer_key_equal)

/* Endpoints waiting for a grant -> when to ask again. */
KHASH_MAP_INIT_INT64(uct_dcx_fc_wait, ucs_time_t)


typedef struct uct_dcx_iface_config {
    uct_iface_config_t super;
    unsigned num_dci;
    int tx_policy; /* uct_dcx_tx_policy_t */
    unsigned num_dci_channels; /* hw_dcs: DCI streams asked for */
    ucs_ternary_auto_value_t ddp; /* out-of-order data placement */
    unsigned quota;
    unsigned tx_queue_len;
    unsigned tx_cq_moderation;
    unsigned rx_queue_len;
    size_t seg_size;
    size_t tx_max_inline;
    double timeout; /* seconds: ack timeout of one try */
    unsigned retry_count;
    double rnr_timeout; /* seconds: the DCT's RNR NAK timer */
    unsigned rnr_retry_count;
    unsigned sl;
    size_t pkey; /* UCS_HEXUNITS_AUTO: the first full member */
    int is_global; /* InfiniBand: a GRH on every packet */
    unsigned long gid_index; /* UCS_ULUNITS_AUTO: UCX's choice */
    unsigned hop_limit;
    unsigned long traffic_class; /* UCS_ULUNITS_AUTO: by RoCE version */
    unsigned max_rd_atomic;
    unsigned path_mtu; /* 0: the port's active MTU */
    int fc_enable;
    unsigned fc_wnd_size;
    double fc_req_thresh;
    double fc_grant_timeout; /* seconds */
    ucs_ternary_auto_value_t umr;
    unsigned umr_mkeys;
    size_t umr_pack_thresh;
    size_t umr_max_inline;
    int put_sgl;
    int post; /* uct_dcx_post_t */
    uct_iface_mpool_config_t tx_mp;
    uct_iface_mpool_config_t rx_mp;
} uct_dcx_iface_config_t;


typedef struct uct_dcx_iface uct_dcx_iface_t;
typedef struct uct_dcx_ep uct_dcx_ep_t;
typedef struct uct_dcx_op uct_dcx_op_t;

typedef void (*uct_dcx_op_handler_t)(uct_dcx_op_t *op, ucs_status_t status);


/* An operation waiting for the completion of its work request. It comes
 * from the registered send pool: its buffer serves bcopy data and atomic
 * results. */
struct uct_dcx_op {
    ucs_queue_elem_t queue; /* in the DCI's outstanding queue */
    uint64_t sn; /* done when the DCI completed this many */
    uct_dcx_op_handler_t handler;
    uct_completion_t *comp; /* user completion, may be NULL */
    uct_dcx_ep_t *ep; /* posted by, NULL once it is destroyed */
    uct_dcx_iface_t *iface;
    uint32_t lkey; /* of the buffer below */
    uint16_t dci;
    union {
        struct {
            uct_unpack_callback_t unpack_cb;
            void *arg;
            size_t length;
        } get_bcopy;
        struct {
            uct_dcx_umr_mkey_t *mkey; /* strided zero-copy */
        } umr;
        struct {
            void *buffer; /* strided get, packed */
            uint32_t length;
            uint32_t stride;
            uint32_t count;
        } strided;
        struct {
            void *result; /* user's result, or NULL */
            uct_ep_h ep; /* for compare-swap loops */
            uint64_t remote_addr;
            uct_rkey_t rkey;
            uint64_t operand;
            uint64_t compare; /* expected value */
            uct_atomic_op_t opcode;
        } amo;
    };
    uint8_t buf[0] UCS_V_ALIGNED(UCS_SYS_CACHE_LINE_SIZE);
};


/* The user completion of a work request that needs nothing else when it
 * completes (zero-copy put and get): a slot in its DCI's ring, indexed by
 * the request's sequence number, instead of an operation from a pool. Such
 * a request is always signaled, so its own CQE finds the slot. */
typedef struct uct_dcx_comp_slot {
    uct_completion_t *comp; /* NULL: none, or consumed/cancelled */
    uct_dcx_ep_t *ep; /* posted by (uct_dcx_ep_cancel_ops) */
} uct_dcx_comp_slot_t;


typedef struct uct_dcx_dci {
    struct ibv_qp *qp;
    struct ibv_qp_ex *qpx; /* libmlx5's builders, or dcx's own (direct) */
    struct mlx5dv_qp_ex *mqpx;
    struct uct_dcx_direct_sq *direct; /* the direct writer, or NULL */
    uct_dcx_ep_t *ep; /* the endpoint holding it, or NULL */
    ucs_queue_head_t outstanding; /* uct_dcx_op_t, by sequence number */
    uct_dcx_comp_slot_t *comps; /* by sequence number & comp_mask */
    uint64_t posted; /* work requests posted */
    uint64_t completed; /* ... and completed */
    uint16_t available; /* free send queue slots */
    uint16_t unsignaled; /* posted since the last signaled */
    uint16_t room; /* free slots the next operation of
                                          its holder needs: 1, or a whole
                                          SGL batch that did not fit */
    uint8_t fence; /* fence the next work request */
    uint8_t error; /* got an error completion */
    uint8_t slot_held; /* the send queue slot of the
                                          completion being handled: returned
                                          after its callbacks */
    uint8_t completing; /* its completion's callbacks run:
                                          the DCI is returned after them */
    uint8_t grant; /* dcs: taken for a credit grant */
    uint8_t generation; /* shared: bumped by every error */
    uint8_t shared; /* endpoints share it (rand, hw_dcs,
                                          dcs_hybrid's stream DCI) */
    ucs_status_t last_error; /* shared: what failed the DCI */
} uct_dcx_dci_t;


/* A DCI policy (UCX_DCX_TX_POLICY), chosen once when the interface is
 * created (uct_dcx_iface_dci_policy_select). Endpoints take a DCI with
 * uct_dcx_iface_dci_take() and give it back with uct_dcx_iface_dci_put()
 * under the dcs policies; what differs between the policies beyond that is
 * here, and the traits the data path tests inline are in flags. */
typedef struct uct_dcx_dci_policy_ops {
    unsigned flags; /* UCT_DCX_DCI_POLICY_FLAG_* */
    /* A DCI for a credit grant, which no endpoint holds: UCS_OK, or
     * UCS_ERR_NO_RESOURCE when the grant has to wait. */
    ucs_status_t (*grant_get)(uct_dcx_iface_t *iface, uint16_t *index_p);
    /* The grant went out on the DCI, or could not be posted after all. */
    void (*grant_posted)(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci);
    void (*grant_abort)(uct_dcx_iface_t *iface, uint16_t index);
    /* The first error completion of the DCI (before dci->error is set). */
    void (*dci_error)(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                      ucs_status_t status);
    /* The device failed while the DCI had nothing outstanding. */
    void (*dci_idle_fail)(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                          ucs_status_t status);
    /* Everything the DCI posted completed; returns whether it went back to
     * the pool, so that pending requests may have it. */
    int (*dci_drained)(uct_dcx_iface_t *iface, uint16_t index);
    /* Whether no DCI has work outstanding (an interface flush). */
    int (*is_idle)(const uct_dcx_iface_t *iface);
} uct_dcx_dci_policy_ops_t;


/* A posted receive buffer: this header, the pointer to the release
 * descriptor that uct_iface_release_desc() reads, the user's headroom and
 * the payload. */
typedef struct uct_dcx_recv_desc {
    uint32_t lkey;
} uct_dcx_recv_desc_t;


struct uct_dcx_iface {
    uct_base_iface_t super;
    uct_dcx_md_t *md;
    const uct_dcx_verbs_ops_t *ops;
    uint8_t port;
    struct ibv_port_attr port_attr;
    int is_roce; /* the port's link layer is Ethernet */
    int is_global; /* every address has a GRH: RoCE, or an InfiniBand port
                      that needs one (UCX_DCX_IS_GLOBAL) */
    union ibv_gid gid; /* RoCE: the source GID */
    uint8_t gid_index;
    uint8_t dev_addr_flags; /* UCT_DCX_DEV_ADDR_FLAG_* */
    uint16_t pkey_index; /* of every QP: the port's P_Key table */
    uint16_t pkey; /* the P_Key at pkey_index */
    struct ibv_comp_channel *channel; /* events of both CQs */

    struct {
        struct ibv_cq_ex *cq;
        /* polled through: the CQ itself (verbs), or dcx's CQE parser over
         * its buffer (direct) */
        struct ibv_cq_ex *poll_cq;
        struct uct_dcx_direct *direct; /* direct posting, or NULL */
        uct_dcx_post_t post; /* UCX_DCX_POST as configured */
        uct_dcx_dci_t *dcis;
        uct_dcx_dci_pool_t pool; /* which of dcis are idle */
        const uct_dcx_dci_policy_ops_t *dci_policy; /* UCX_DCX_TX_POLICY */
        unsigned policy_flags; /* dci_policy->flags, at hand */
        uint16_t quota;
        unsigned rand_seed;
        /* streams of each DCI (hw_dcs where the device has them, a power
         * of two), 1: none */
        uint16_t num_streams;
        uint8_t log_streams_errored; /* of a stream DCI */
        uint8_t next_stream; /* the next endpoint's, in turn */
        /* dcs_hybrid: the DCI with streams, past the pool's, that
         * endpoints finding the pool empty move to; else
         * UCT_DCX_NO_STREAM_DCI */
        uint16_t stream_dci;
        uint16_t queue_len; /* send WRs per DCI */
        uint16_t moderation; /* signal every this many WRs */
        uint32_t comp_mask; /* ring of a DCI's comps: a power
                                               of two >= queue_len, less 1 */
        uct_dcx_comp_slot_t *comp_rings; /* every DCI's ring */
        struct ibv_ah *self_ah; /* to the own DCT: completion
                                               requests (created lazily) */
        uct_dcx_tx_counters_t stats;
        size_t put_sgl_max; /* elements of one SGL put */
        unsigned req_queue_len; /* asked for a new DCI */
        size_t req_max_inline;
        int cq_available;
        size_t max_inline; /* written back by the device */
        unsigned max_sge;
        ucs_mpool_t mp; /* uct_dcx_op_t + segment */
        ucs_mpool_t flush_mp; /* unregistered flush ops */
        ucs_arbiter_t arbiter; /* endpoints with pending work */
        uct_dcx_ep_t *dispatching; /* endpoint whose pending request
                                               runs now */
        size_t seg_size;
        ucs_status_t fatal; /* UCS_OK; else the device failed:
                                               no DCI is taken any more */
        uct_worker_cb_id_t fatal_cb_id; /* fails the interface in its
                                               worker's progress */
        uct_dcx_md_fatal_listener_t fatal_listener;
    } tx;

    struct {
        struct ibv_cq_ex *cq;
        struct ibv_srq *srq;
        /* polled through: the CQ itself (verbs), or dcx's CQE parser over
         * its buffer (direct) */
        struct ibv_cq_ex *poll_cq;
        /* posted to: the SRQ itself with its provider's post_srq_recv
         * (verbs), or dcx's own (direct) */
        struct ibv_srq *post_srq;
        int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                             struct ibv_recv_wr **bad_wr);
        struct uct_dcx_direct_rx *direct; /* direct receive, or NULL */
        struct ibv_qp *dct;
        uint32_t dctn;
        uint64_t dc_key;
        ucs_mpool_t mp;
        unsigned queue_len;
        unsigned posted; /* buffers in the SRQ */
        unsigned refill_batch; /* refill when this many are
                                               missing */
        int refill; /* a held buffer came back */
        size_t headroom_offset;
        size_t payload_offset;
        uct_recv_desc_t release_desc;
    } rx;

    /* Active-message flow control: credits per endpoint, granted by the
     * receiver once it has taken the messages sent before the request. */
    struct {
        int16_t wnd_size; /* credits of a new endpoint */
        int16_t req_thresh; /* ask for more at this many */
        int16_t consume; /* 1 on, 0 off */
        ucs_time_t timeout; /* ask again after this long */
        ucs_time_t next_check; /* earliest deadline in waiting */
        khash_t(uct_dcx_fc_wait) waiting; /* endpoints owed a grant */
        ucs_queue_head_t grants; /* grants waiting for a DCI */
        ucs_mpool_t grant_mp;
    } fc;

    /* Strided zero-copy: created at the first strided operation, so
     * interfaces that never use it keep their QP count. */
    struct {
        uct_dcx_umr_t *engine; /* NULL: not (yet) created */
        int unavailable; /* no DEVX / UMR: copy path */
        uint8_t gen; /* bumped by UMR completions */
        uint8_t dispatched_gen; /* gen the waiters last saw */
        ucs_ternary_auto_value_t enable;
        unsigned num_mkeys;
        size_t max_inline;
        size_t pack_thresh; /* pack strided ops this small */
        unsigned max_iov; /* iov entries one op takes */
        uct_dcx_md_mr_listener_t listener;
        uint64_t zcopy_ops; /* strided ops through an mkey */
        uint64_t copy_ops; /* strided ops packed instead */
    } umr;

    khash_t(uct_dcx_ah) ah_cache;
    khash_t(uct_dcx_peer) peers;
    ucs_ptr_array_t peer_table; /* endpoints' peers, by index */
    ucs_mpool_t ep_mp; /* endpoints */

    struct {
        unsigned retry_count;
        unsigned rnr_retry_count;
        uint8_t timeout; /* IB exponent */
        uint8_t min_rnr_timer; /* IB 5-bit code */
        uint8_t sl;
        uint8_t hop_limit; /* RoCE GRH */
        uint8_t traffic_class; /* RoCE GRH */
        uint8_t max_rd_atomic;
        uint8_t rd_atomic_known; /* the device said its limit */
        uint8_t atomics; /* atomic_cap is not NONE */
        uint8_t ext_atomics32; /* masked 32-bit atomics (raw WQE) */
        uint8_t ext_atomics64; /* masked 64-bit atomics (raw WQE) */
        uint8_t ext_atomics64_be; /* their response is big-endian */
        uint8_t ddp; /* DCIs and DCT place data out of order */
        enum ibv_mtu path_mtu;
    } config;
};


/* Kept small (48 B with UCX's assertions on, 32 B without) because a
 * process may hold one per peer process: the DCT address is shared with
 * the other endpoints to the same DCT, by index rather than pointer. */
struct uct_dcx_ep {
    uct_base_ep_t super;
    uint32_t peer_index; /* shared address of the DCT */
    ucs_status_t status; /* the failure, once failed */
    uint8_t flags;
    uint16_t dci; /* UCT_DCX_EP_NO_DCI when none */
    int16_t fc_wnd; /* active messages it may send */
    uint8_t dci_generation; /* rand: of the shared DCI */
    uint8_t fc_sn; /* of its last credit request */
    uint8_t umr_gen; /* umr.gen when a layout was due */
    uint8_t stream; /* DCI stream of its work requests (hw_dcs), or 0 */
    ucs_arbiter_group_t arb_group; /* pending requests */
};


enum {
    UCT_DCX_EP_FLAG_FAILED   = UCS_BIT(0),
    UCT_DCX_EP_FLAG_WAIT_DCI = UCS_BIT(1), /* a waiter of tx.pool */
    UCT_DCX_EP_FLAG_FC_WAIT  = UCS_BIT(2), /* in fc.waiting: owed a grant */
    UCT_DCX_EP_FLAG_WAIT_UMR = UCS_BIT(3), /* a layout it needs is being
                                              programmed (umr_gen) */
    UCT_DCX_EP_FLAG_TX_WAIT  = UCS_BIT(4) /* dcs_quota: yielded its DCI,
                                              posts nothing until it drains
                                              and returns to the pool */
};


extern uct_tl_t uct_dcx_tl;
extern ucs_config_field_t uct_dcx_iface_config_table[];
extern const char *uct_dcx_tx_policy_names[];
extern const char *uct_dcx_post_names[];


/* The interface (dcx_iface.c, dcx_dci.c, dcx_peer.c, dcx_fc.c, dcx_mem_view.c) */
ucs_status_t uct_dcx_iface_dci_create_next(uct_dcx_iface_t *iface);
void uct_dcx_iface_dci_policy_select(uct_dcx_iface_t *iface,
                                     uct_dcx_tx_policy_t policy);
void uct_dcx_iface_dci_put(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);
ucs_status_t uct_dcx_iface_dci_request_completion(uct_dcx_iface_t *iface,
                                                  uint16_t dci_index);
void uct_dcx_iface_dcis_request_completions(uct_dcx_iface_t *iface);
void uct_dcx_iface_waiter_add(uct_dcx_iface_t *iface, uct_dcx_ep_t *ep);
unsigned uct_dcx_iface_progress(uct_iface_h tl_iface);
ucs_status_t uct_dcx_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                 uct_completion_t *comp);
ucs_status_t uct_dcx_iface_fence(uct_iface_h tl_iface, unsigned flags);
ucs_status_t
uct_dcx_iface_umr_engine(uct_dcx_iface_t *iface, uct_dcx_umr_t **umr_p);
void uct_dcx_iface_ext_atomics(uct_dcx_iface_t *iface, const char *dev_name);

/* The address vector this interface gives every address handle and QP (the
 * DCIs, the DCT, the UMR loopback QP): port, service level and, on RoCE, the
 * GRH with the interface's source GID index, hop limit and traffic class, and
 * dgid when given. One place, so that requests and the DCT's responses leave
 * with the same addressing. */
void uct_dcx_iface_fill_av(const uct_dcx_iface_t *iface, uint16_t dlid,
                           const union ibv_gid *dgid,
                           struct ibv_ah_attr *ah_attr);

/* The GID a peer's address carries (NULL: none) if packets to it need a GRH:
 * every packet of a global interface, or the peer is in another subnet. */
const union ibv_gid *uct_dcx_iface_peer_dgid(const uct_dcx_iface_t *iface,
                                             uint8_t dev_flags,
                                             const void *gid);

ucs_status_t uct_dcx_iface_ah_get(uct_dcx_iface_t *iface, uint16_t lid,
                                  const union ibv_gid *gid,
                                  struct ibv_ah **ah_p);
ucs_status_t uct_dcx_iface_peer_get(uct_dcx_iface_t *iface, struct ibv_ah *ah,
                                    uint32_t dctn, uint64_t dc_key,
                                    uct_dcx_peer_t **peer_p);
void uct_dcx_iface_peer_put(uct_dcx_iface_t *iface, uct_dcx_peer_t *peer);

void uct_dcx_iface_flushes_to_tail(uct_dcx_dci_t *dci);

void uct_dcx_iface_dci_cancel_comps(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci,
                                    uct_dcx_ep_t *ep);

#include "dcx_iface.inl"

#endif
