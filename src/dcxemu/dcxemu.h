/*
 * dcxemu — software DC device ("the device model").
 *
 * Implements the rdma-core 44 verbs + mlx5dv DC subset with mlx5 semantics,
 * shared by real processes on one host through a named fabric in POSIX shared
 * memory.  Every export is the rdma-core name prefixed with "dcxemu_" and has
 * exactly rdma-core 44's signature; the data path runs through the function
 * pointers of the real public structs, so rdma-core's inline wrappers
 * (ibv_wr_*, mlx5dv_wr_set_dc_addr, ibv_poll_cq, ibv_start_poll,
 * ibv_post_srq_recv, ...) work unchanged on model objects.  Semantics:
 * docs/device-spec.md; design: docs/dcxemu.md.
 */

/* clang-format off */
/*
 * Settings (environment, read once when the fabric is first used in a process):
 *
 *   Variable              Default          Meaning
 *   --------------------  ---------------  -------------------------------------------------------
 *   DCXEMU_FABRIC         dcxemu-<uid>     Fabric name; processes with the same name share one
 *                                          fabric (shared memory object /dev/shm/<name>).  The
 *                                          default name falls back to dcxemu-<uid>.1 .. .15 (one
 *                                          line on stderr) when it is held by another user, has
 *                                          another mode than 0600 or is no fabric of this library;
 *                                          an explicit name is refused instead.
 *   DCXEMU_DEFAULT_FABRIC dcxemu-<uid>     Base of the default name (tests: keeps them off the
 *                                          user's real default fabric).
 *   DCXEMU_KEEP_FABRIC    0                1: keep the fabric file when the last member leaves
 *                                          (to read its counters with dcxemu-stat afterwards).
 *                                          Otherwise the last member to leave removes it.
 *   DCXEMU_MAX_MEMBERS    1024             Member processes a new fabric admits (2..1024); memory
 *                                          grows with the members attached, not with this.
 *   DCXEMU_NUM_DEVICES    1                Number of devices dcxemu0..N-1 (1..16); device i has
 *                                          LID i+1 on every member of the fabric.
 *   DCXEMU_MAX_WQE_SIZE   512              Largest send WQE in bytes (multiple of 64, 256..4096);
 *                                          sets the written-back max_inline_data / max_send_sge.
 *   DCXEMU_ATOMIC_CAP     hca              none: a device without atomics (atomic_cap
 *                                          IBV_ATOMIC_NONE); atomic send_ops_flags at QP create
 *                                          and REMOTE_ATOMIC at DCT/RC modify fail EOPNOTSUPP.
 *   DCXEMU_EXT_ATOMICS    1                0: the HCA atomic caps (DEVX QUERY_HCA_CAP) list no
 *                                          masked atomics; masked raw WQEs fail LOC_QP_OP_ERR.
 *   DCXEMU_COMPACT_AV     1                0: the HCA cap compact_address_vector (DEVX
 *                                          QUERY_HCA_CAP) reads 0, and a DC WQE carrying the
 *                                          compact 16-byte AV fails LOC_QP_OP_ERR (mlx5 face,
 *                                          raw WQEs).
 *   DCXEMU_RAW_WQE        1                0: a provider without the raw-WQE builder (rdma-core
 *                                          before v36): a QP created with the dv send op
 *                                          MLX5DV_QP_EX_WITH_RAW_WQE fails EOPNOTSUPP.
 *   DCXEMU_OOO_DP         1                0: the device offers no out-of-order data placement
 *                                          (query device reports none; a DC QP asking for
 *                                          MLX5DV_QP_CREATE_OOO_DP fails EOPNOTSUPP).  1: DCIs and
 *                                          DCTs take the flag; a DCI and a DCT that both have it
 *                                          place WRITE / SEND data in shuffled chunks and take
 *                                          SRQ WQEs out of order (seed=N of DCXEMU_FAULTS).
 *   DCXEMU_LINK_LAYER     infiniband       ethernet: RoCE ports (link layer Ethernet, LID 0; GID
 *                                          table 0 fe80:: RoCE v1, 1 the same RoCE v2, 2
 *                                          ::ffff:198.51.100.<dev+1> RoCE v1, 3 the same RoCE v2);
 *                                          AHs and QP AVs need a GRH, delivery by GID and type.
 *   DCXEMU_PKEY_TABLE     0xffff           The port's P_Key table from index 0, comma-separated
 *                                          16-bit values (up to 128; the rest are empty, 0).
 *                                          A request is dropped (the sender's retries run out)
 *                                          unless its QP's P_Key and the target's are of one
 *                                          partition and at least one is a full member.
 *   DCXEMU_ROCE_TCLASS    (none)           RoCE: the port's configured global traffic class
 *                                          (0..255), read from the device's sysfs file
 *                                          tc/1/traffic_class ("Global tclass=N", as MLNX_OFED
 *                                          writes it; dcxemu_ibv_read_sysfs_file).  Unset: the
 *                                          file does not exist, as on a kernel without it.
 *                                          (dcxemu_tclass_read: the classes the last request
 *                                          and its target's responses used.)
 *   DCXEMU_GRH_REQUIRED   0                1: InfiniBand ports report IBV_QPF_GRH_REQUIRED in
 *                                          ibv_query_port's flags, and an AH or a QP's AV
 *                                          without a GRH is EINVAL (libmlx5 mlx5_create_ah, the
 *                                          kernel's rdma_check_ah_attr), as on RoCE.  On
 *                                          InfiniBand a packet with a GRH whose destination
 *                                          GID is not the target port's is dropped (always).
 *   DCXEMU_ROCE_ROUTERS   0                RoCE: routers every packet crosses (0..254); a packet
 *                                          whose hop limit is not above it is lost (the request
 *                                          by its AH's, the response by the DCT's hop limit).
 *   DCXEMU_TIME_SCALE     1.0              Factor applied to transport-retry and RNR timers
 *                                          (e.g. 0.01 makes RETRY_EXC_ERR arrive 100x sooner).
 *                                          Counts and "infinite" cases are never scaled away.
 *   DCXEMU_HEAP_MB        1024             Size of the fabric's sparse shared heap (CQ and SRQ
 *                                          rings) in MiB; only touched pages use memory.
 *   DCXEMU_EXEC           immediate        immediate: wr_complete executes the SQ in the posting
 *                                          thread.  deferred: wr_complete only publishes; the
 *                                          engine thread executes each batch after a pseudo-random
 *                                          delay in (0, DCXEMU_DEFER_US] (FIFO per QP kept), so a
 *                                          send buffer reused before its completion is caught.
 *   DCXEMU_DEFER_US       20               Upper bound of the deferred delay, 1..1000000 us.
 *   DCXEMU_FAULTS         (none)           Coarse random faults on data WRs, comma-separated:
 *                                          drop=P (lost on the wire: one transport retry),
 *                                          delay_us=U:P (U us added before execution),
 *                                          status=NAME:P (completes with IBV_WC_NAME, e.g.
 *                                          RETRY_EXC_ERR, or a number; QP goes to ERR),
 *                                          seed=N (default 1; the sequence, also used for the
 *                                          deferral delays, is deterministic per process).
 *   DCXEMU_TRACE          (off)            1: one line per WR posted / executed / flushed and per
 *                                          CQE on stderr; a path: appended to that file.
 */
/* clang-format on */

/*
 * Errors specific to the model: a fabric with a foreign magic/layout version or
 * owner is refused with EPROTO / EACCES and one line on stderr; any call from a
 * forked child of a process that attached to the fabric fails with EPERM
 * (NULL/-1 + errno, or the errno as return value).
 */
#ifndef DCXEMU_H
#define DCXEMU_H

#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DCXEMU_API __attribute__((visibility("default")))

/* Out-of-order data placement (rdma-core 55, mlx5dv_create_qp(3),
   mlx5dv_query_device(3)).  The model and its callers build against older
   headers too: these are rdma-core's values, and the context with the caps
   appended is laid out as rdma-core 55's struct mlx5dv_context (every field
   after crypto_caps is 8-byte aligned, so it starts where the older struct
   ends).  Callers pass it, cast, with DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS
   in comp_mask. */
#define DCXEMU_MLX5DV_QP_CREATE_OOO_DP          (1u << 7)
#define DCXEMU_MLX5DV_CONTEXT_MASK_OOO_RECV_WRS (1ull << 16)
struct dcxemu_mlx5dv_ooo_recv_wrs_caps {
    uint32_t max_rc;
    uint32_t max_xrc;
    uint32_t max_dct;
    uint32_t max_ud;
    uint32_t max_uc;
};
struct dcxemu_mlx5dv_context_ooo {
    struct mlx5dv_context base; /* up to crypto_caps (rdma-core 37) */
    uint64_t max_dc_rd_atom; /* rdma-core 50 */
    uint64_t max_dc_init_rd_atom;
    struct {
        uint32_t value, mask;
    } reg_c0; /* rdma-core 51 */
    struct dcxemu_mlx5dv_ooo_recv_wrs_caps ooo_recv_wrs_caps; /* 55 */
};

DCXEMU_API struct ibv_device **dcxemu_ibv_get_device_list(int *num_devices);
DCXEMU_API void dcxemu_ibv_free_device_list(struct ibv_device **list);
DCXEMU_API const char *dcxemu_ibv_get_device_name(struct ibv_device *device);
DCXEMU_API __be64 dcxemu_ibv_get_device_guid(struct ibv_device *device);
DCXEMU_API struct ibv_context *
dcxemu_ibv_open_device(struct ibv_device *device);
DCXEMU_API struct ibv_context *
dcxemu_mlx5dv_open_device(struct ibv_device *device,
                          struct mlx5dv_context_attr *attr);
DCXEMU_API int dcxemu_ibv_close_device(struct ibv_context *context);
DCXEMU_API bool dcxemu_mlx5dv_is_supported(struct ibv_device *device);

DCXEMU_API int dcxemu_ibv_query_device(struct ibv_context *context,
                                       struct ibv_device_attr *device_attr);
DCXEMU_API int
dcxemu_ibv_query_device_ex(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *input,
                           struct ibv_device_attr_ex *attr);
DCXEMU_API int dcxemu_mlx5dv_devx_general_cmd(struct ibv_context *context,
                                              const void *in, size_t inlen,
                                              void *out, size_t outlen);
DCXEMU_API int dcxemu_mlx5dv_query_device(struct ibv_context *ctx_in,
                                          struct mlx5dv_context *attrs_out);
DCXEMU_API int dcxemu_ibv_query_port(struct ibv_context *context,
                                     uint8_t port_num,
                                     struct ibv_port_attr *port_attr);
DCXEMU_API int dcxemu_ibv_query_gid(struct ibv_context *context,
                                    uint8_t port_num, int index,
                                    union ibv_gid *gid);
DCXEMU_API int dcxemu__ibv_query_gid_ex(struct ibv_context *context,
                                        uint32_t port_num, uint32_t gid_index,
                                        struct ibv_gid_entry *entry,
                                        uint32_t flags, size_t entry_size);
/* The device's sysfs files, as libibverbs reads them (dir: the device's
 * ibdev_path): only tc/1/traffic_class on a RoCE port with DCXEMU_ROCE_TCLASS
 * ("Global tclass=N", MLNX_OFED's format); any other file -1/ENOENT. */
DCXEMU_API int dcxemu_ibv_read_sysfs_file(const char *dir, const char *file,
                                          char *buf, size_t size);
DCXEMU_API int dcxemu_ibv_query_pkey(struct ibv_context *context,
                                     uint8_t port_num, int index, __be16 *pkey);

DCXEMU_API struct ibv_pd *dcxemu_ibv_alloc_pd(struct ibv_context *context);
DCXEMU_API int dcxemu_ibv_dealloc_pd(struct ibv_pd *pd);
DCXEMU_API struct ibv_mr *
dcxemu_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
DCXEMU_API struct ibv_mr *dcxemu_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                                  size_t length, uint64_t iova,
                                                  unsigned int access);
DCXEMU_API int dcxemu_ibv_dereg_mr(struct ibv_mr *mr);

DCXEMU_API struct ibv_comp_channel *
dcxemu_ibv_create_comp_channel(struct ibv_context *context);
DCXEMU_API int
dcxemu_ibv_destroy_comp_channel(struct ibv_comp_channel *channel);
DCXEMU_API struct ibv_cq *
dcxemu_ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                     struct ibv_comp_channel *channel, int comp_vector);
DCXEMU_API struct ibv_cq_ex *
dcxemu_ibv_create_cq_ex(struct ibv_context *context,
                        struct ibv_cq_init_attr_ex *cq_attr);
DCXEMU_API int dcxemu_ibv_destroy_cq(struct ibv_cq *cq);
DCXEMU_API int dcxemu_ibv_get_cq_event(struct ibv_comp_channel *channel,
                                       struct ibv_cq **cq, void **cq_context);
DCXEMU_API void
dcxemu_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);

DCXEMU_API struct ibv_srq *
dcxemu_ibv_create_srq(struct ibv_pd *pd,
                      struct ibv_srq_init_attr *srq_init_attr);
DCXEMU_API int dcxemu_ibv_modify_srq(struct ibv_srq *srq,
                                     struct ibv_srq_attr *srq_attr,
                                     int srq_attr_mask);
DCXEMU_API int
dcxemu_ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr);
DCXEMU_API int dcxemu_ibv_destroy_srq(struct ibv_srq *srq);

DCXEMU_API struct ibv_qp *
dcxemu_mlx5dv_create_qp(struct ibv_context *context,
                        struct ibv_qp_init_attr_ex *qp_attr,
                        struct mlx5dv_qp_init_attr *mlx5_qp_attr);
DCXEMU_API struct ibv_qp *
dcxemu_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
DCXEMU_API int dcxemu_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                                    int attr_mask);
DCXEMU_API int dcxemu_ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                                   int attr_mask,
                                   struct ibv_qp_init_attr *init_attr);
DCXEMU_API int dcxemu_ibv_destroy_qp(struct ibv_qp *qp);
DCXEMU_API int
dcxemu_mlx5dv_dci_stream_id_reset(struct ibv_qp *qp, uint16_t stream_id);
DCXEMU_API struct ibv_qp_ex *dcxemu_ibv_qp_to_qp_ex(struct ibv_qp *qp);
DCXEMU_API struct mlx5dv_qp_ex *
dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp);

DCXEMU_API struct mlx5dv_mkey *
dcxemu_mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *mkey_init_attr);
DCXEMU_API int dcxemu_mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey);

DCXEMU_API struct ibv_ah *
dcxemu_ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
DCXEMU_API int dcxemu_ibv_destroy_ah(struct ibv_ah *ah);

DCXEMU_API int dcxemu_ibv_get_async_event(struct ibv_context *context,
                                          struct ibv_async_event *event);
DCXEMU_API void dcxemu_ibv_ack_async_event(struct ibv_async_event *event);
DCXEMU_API const char *dcxemu_ibv_wc_status_str(enum ibv_wc_status status);

/* ---- test-only control and observability API (no ibv_context needed: attaches
 * on demand) ---- */

enum dcxemu_fault_kind {
    DCXEMU_FAULT_DCT_UNREACHABLE =
            1, /* target = DCT number; arg = 1 on, 0 off. Senders see transport
                                         retries then IBV_WC_RETRY_EXC_ERR, as
                  for a dead peer. */
    DCXEMU_FAULT_DROP_NEXT =
            2, /* target = DCT number; arg = N: the next N delivery attempts to
                                         it are lost on the wire; each costs the
                  sender one transport retry (counted); exhausting retry_cnt
                  gives RETRY_EXC_ERR. */
    DCXEMU_FAULT_FORCE_STATUS =
            3, /* target = send QP number (DCI or RC); arg = enum ibv_wc_status:
                                         the next WR executed on it completes
                  with that status instead of executing (QP goes to ERR as
                  hardware would for an error CQE; following WRs flush).  target
                  = DCT number: the next WR that reaches that DCT, from any DCI,
                  does so instead (the test needs no DCI number). */
    DCXEMU_FAULT_DELAY =
            4, /* target = send QP number or DCT number; arg = microseconds
                  added before each operation executes; 0 clears. */
};
/* Returns 0 or an errno value (EINVAL for bad kind/arg, ENOENT if the target
   number does not exist on the fabric, EPERM from a forked child). The fault
   lives in the shared fabric, so it acts on whichever process executes the
   operation. */
DCXEMU_API int
dcxemu_fault_inject(enum dcxemu_fault_kind kind, uint32_t target, uint64_t arg);
DCXEMU_API int dcxemu_fault_clear_all(void);

enum dcxemu_counter_op {
    DCXEMU_CNT_OP_WRITE,
    DCXEMU_CNT_OP_WRITE_IMM,
    DCXEMU_CNT_OP_SEND,
    DCXEMU_CNT_OP_SEND_IMM,
    DCXEMU_CNT_OP_READ,
    DCXEMU_CNT_OP_ATOMIC_FA,
    DCXEMU_CNT_OP_ATOMIC_CS,
    DCXEMU_CNT_OP_UMR,
    DCXEMU_CNT_OP_LOCAL_INV,
    DCXEMU_CNT_OP_MAX
};

/* wr[]: WRs executed (success or error; flushed WRs are not executed) by
   opcode, on the sender's device; bytes: payload moved by successful WRs;
   rnr_retries / transport_retries: each wait before a retry; key_violations:
   LOC_PROT_ERR / REM_ACCESS_ERR completions; error_cqes: every CQE with a
   non-success status (send and receive side, flushes included); recv_cqes:
   receive CQEs, on the target's device; send_cqes: CQEs written to send CQs
   (signaled WRs and every error or flush), on the sender's device: the
   completions a NIC would write and the CPU poll. */
struct dcxemu_counters {
    uint64_t wr[DCXEMU_CNT_OP_MAX];
    uint64_t bytes, rnr_retries, transport_retries, key_violations, error_cqes,
            recv_cqes;
    uint64_t send_cqes;
};

/* PROCESS: events charged to this process (what it executed, and receive CQEs
   for its DCTs) since it attached.  FABRIC: cumulative over every process that
   ever attached, until the fabric is re-initialised.  Returns 0 or an errno
   value (EINVAL for a bad index/scope/NULL). */
enum dcxemu_counter_scope {
    DCXEMU_SCOPE_PROCESS = 0,
    DCXEMU_SCOPE_FABRIC  = 1
};
DCXEMU_API int dcxemu_counters_read(int device_index,
                                    enum dcxemu_counter_scope scope,
                                    struct dcxemu_counters *out);

/* Live objects of this process on the fabric: a transport test asserts with it
   that endpoints cost no QP.  Returns 0 or an errno value. */
struct dcxemu_objects {
    uint32_t qps; /* send QPs: DCIs and RC QPs */
    uint32_t dcts;
};
DCXEMU_API int dcxemu_objects_read(struct dcxemu_objects *out);

/* What this process declared for peers' access to its memory (test-only):
   *scope = the Yama ptrace_scope seen (-1: no Yama), *ptracer = 0 (nothing
   declared), -1 (PR_SET_PTRACER_ANY) or the PID declared.  Decided when the
   process creates its first DCT: ENOENT before.  0, or EINVAL for NULL
   arguments. */
DCXEMU_API int dcxemu_ptracer_read(int *scope, long *ptracer);

/* RoCE (test-only): the traffic class of this process's last request that
   reached its target (its AH's or RC QP's GRH) and of that target's
   responses (the DCT's RTR AV); -1 before any.  0, or EINVAL for NULL. */
DCXEMU_API int dcxemu_tclass_read(int *request, int *response);

/* Numbers of this process's RC QPs (the UMR hosts), lowest slot first: a
   transport test aims DCXEMU_FAULT_FORCE_STATUS at the QP it cannot otherwise
   name.  Fills up to max numbers and sets *count to how many exist.  Returns 0
   or an errno value (EINVAL for NULL count, or NULL nums with max > 0). */
DCXEMU_API int
dcxemu_rc_qp_numbers(uint32_t *nums, unsigned max, unsigned *count);

/* Device-fatal mode: device device_index of this process fails as an mlx5 HCA
   after an internal error (kernel mlx5_core cmd.c:mlx5_internal_err_ret_value).
   Every open context of the device in this process gets IBV_EVENT_DEVICE_FATAL
   on its async fd; its QPs stop executing (posted and later WRs never complete,
   no CQE is written); its DCTs become unreachable for every sender; verbs that
   would issue a firmware command fail with EIO (open, alloc/reg/create,
   modify_qp to any state but RESET/ERR, query_qp, modify_srq, DEVX commands)
   while destroy/dealloc/dereg/close and modify to RESET/ERR succeed.  Posting
   and polling (user-space on mlx5) still succeed.  Per process: other
   processes' contexts of the same device are not affected.  Returns 0 (also if
   already fatal) or an errno value (EINVAL for a bad index, EPERM in a forked
   child). */
DCXEMU_API int dcxemu_device_fatal(int device_index);

/* Test-only: a hook the model calls at points of its execution that a test must
   hold still. DCXEMU_TEST_COPY_START: an executor of send QP qpn is about to
   copy len bytes of a WQE's data, with no fabric lock held (called in the
   executing thread: a test may block there). DCXEMU_TEST_COPY_WAIT: a
   deregistration or destroy in this process waits for a copy that QP qpn (of
   any process) began before it (called once per wait, len 0).
   DCXEMU_TEST_OOO_CHUNK: an executor of DCI qpn placing a WQE's data out of
   order is about to place the chunk that starts at byte len of it (no lock
   held; the chunks come in a shuffled order).  fn NULL removes
   the hook. Process-wide; set it before the work it observes is posted. */
enum dcxemu_test_event {
    DCXEMU_TEST_COPY_START = 0,
    DCXEMU_TEST_COPY_WAIT  = 1,
    DCXEMU_TEST_OOO_CHUNK  = 2
};
typedef void (*dcxemu_test_hook_fn)(enum dcxemu_test_event ev, uint32_t qpn,
                                    uint64_t len, void *arg);
DCXEMU_API void dcxemu_test_hook(dcxemu_test_hook_fn fn, void *arg);

/* The fabric name this process uses (or would use): DCXEMU_FABRIC, else the
   default "dcxemu-<uid>", or its first fallback ("dcxemu-<uid>.1" ...) when
   that name is held by another user or is not a fabric of this library. Without
   a leading '/'.  Never NULL. */
DCXEMU_API const char *dcxemu_fabric_name(void);

/* Remove fabric NAME (NULL: dcxemu_fabric_name()) if no process is attached to
   it.  Serialised with attaching processes, so nobody is left on a removed
   file.  Returns 0 (removed), ENOENT (no such fabric), EBUSY (a member is
   attached), EACCES (owned by another user), EPROTO (not a fabric of this
   library), or another errno value. */
DCXEMU_API int dcxemu_fabric_remove(const char *name);

/* ---- for the device's mlx5 face (src/dcxemu/mlx5/), which serves the kernel's
 * uverbs interface over this model ---- */

/* What device dev's port looks like, from the settings alone (no fabric is
 * attached): its sysfs description.  0, or EINVAL for a device that does not
 * exist. */
#define DCXEMU_DESC_GIDS  4
#define DCXEMU_DESC_PKEYS 128
struct dcxemu_port_desc {
    int num_devices;
    uint64_t node_guid; /* host order */
    uint16_t lid; /* 0 on a RoCE port */
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint32_t num_gids; /* entries 0..num_gids-1 below; the rest are empty */
    union ibv_gid gid[DCXEMU_DESC_GIDS];
    uint32_t gid_type[DCXEMU_DESC_GIDS]; /* IBV_GID_TYPE_* */
    uint32_t gid_tbl_len;
    uint32_t pkey_tbl_len; /* at most DCXEMU_DESC_PKEYS */
    uint16_t pkey[DCXEMU_DESC_PKEYS]; /* the P_Key table, 0 where empty */
    uint32_t port_flags; /* IBV_QPF_GRH_REQUIRED */
    int tclass; /* a RoCE port's configured traffic class, -1: none */
    uint32_t max_wqe_size; /* DCXEMU_MAX_WQE_SIZE */
    int mkey_update_tag; /* DCXEMU_MKEY_UPDATE_TAG: a UMR may set a tag */
    int compact_av; /* DCXEMU_COMPACT_AV: DC WQEs may carry compact AVs */
};
DCXEMU_API int dcxemu_port_describe(int dev, struct dcxemu_port_desc *d);

/* A CQ or receive queue whose owner must hear of every change: every CQE
 * pushed into the CQ, and every receive that finds the SRQ (or an RC QP's own
 * receive queue) empty, rings the owner's engine
 * (which runs the hook below), as a device's writes into host memory are seen
 * by a polling host.  0 or an errno value. */
DCXEMU_API int dcxemu_cq_wake_owner(struct ibv_cq *cq);
DCXEMU_API int dcxemu_srq_wake_owner(struct ibv_srq *srq);
DCXEMU_API int dcxemu_qp_wake_owner(struct ibv_qp *qp); /* its own RQ */
/* The kernel's MLX5_IB_MODIFY_QP_OOO_DP (modify-QP udata of RESET->INIT, as
   libmlx5 55 sends it for a QP created with MLX5DV_QP_CREATE_OOO_DP): the DC
   QP places data out of order from now on.  0, EOPNOTSUPP (not a DCI or DCT,
   or the device offers none), EINVAL (the QP is not in RESET). */
DCXEMU_API int dcxemu_qp_set_ooo_dp(struct ibv_qp *qp);

/* ibv_poll_cq, and each completion's solicited event bit (struct ibv_wc has
 * none; a CQ armed for solicited events fires on it). */
DCXEMU_API int dcxemu_poll_cq_solicited(struct ibv_cq *cq, int num_entries,
                                        struct ibv_wc *wc, uint8_t *solicited);

/* Between ibv_wr_start and ibv_wr_complete of a QP of this library: a WR
 * for a WQE the caller could not decode (the mlx5 face).  It executes nothing
 * and completes with IBV_WC_LOC_QP_OP_ERR when its turn comes (after every
 * older WR), and its QP goes to ERR; wr_id is the QP's at the call. */
DCXEMU_API void dcxemu_wr_malformed(struct ibv_qp_ex *qpx);

/* A function this process's engine thread runs every time it wakes, and at
 * least every interval_ns (0: only when woken).  One hook per process; NULL
 * removes it.  0 or an errno value. */
typedef void (*dcxemu_engine_hook_fn)(void);
DCXEMU_API int
dcxemu_engine_hook(dcxemu_engine_hook_fn fn, uint64_t interval_ns);

/* ---- test-only queries for tests that wait on the model instead of sleeping
 * (testapi.c) ---- */

/* This process's engine thread.  quiescent: it waits on its doorbell and
   nothing was rung since it read it, so it has seen every post, kick and remote
   event so far; interval_ns: the timeout it chose for that wait (at most the
   housekeeping tick, 100 ms; shorter when a QP's timer is due sooner); timers:
   QPs of this process with a timer now (an RNR or retry wait, a deferral or
   delay: work the engine will run without being rung); waits: how many waits it
   began. Returns 0 or an errno value (EINVAL for NULL, EPERM in a forked child,
   or the attach error). */
struct dcxemu_engine_state {
    uint32_t quiescent;
    uint32_t timers;
    uint64_t interval_ns;
    uint64_t waits;
};
DCXEMU_API int dcxemu_engine_state_read(struct dcxemu_engine_state *out);

/* Threads of this process blocked in ibv_destroy_cq until the CQ's events are
 * acked. */
DCXEMU_API int dcxemu_cq_destroy_waiters(void);

#ifdef __cplusplus
}
#endif

#endif
