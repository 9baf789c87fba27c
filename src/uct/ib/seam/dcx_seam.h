/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The device seam: every rdma-core entry point that is an exported symbol
 * (device list, open, PD, MR, CQ/SRQ/QP/AH create/modify/query/destroy,
 * channel events, qp_ex conversions, mkeys) is called through a per-device
 * table bound once when the device is opened. The hardware binding resolves
 * libibverbs/libmlx5 at run time; the device model provides its own binding.
 *
 * The data path does not go through this table: it uses the objects' own
 * function pointers (qpx->wr_*, mqpx->wr_set_dc_addr, cq->start_poll,
 * ops.post_srq_recv), exactly as rdma-core dispatches to its providers.
 * rdma-core's inline wrappers that jump into exported libibverbs functions
 * (ibv_reg_mr, ibv_query_port, ibv_create_qp_ex, ibv_get_cq_event, ...) must
 * never be used outside the hardware binding; a build check enforces it.
 */
#ifndef UCT_DCX_SEAM_H_
#define UCT_DCX_SEAM_H_

#include <ucs/type/status.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default library names of the hardware binding (sonames of rdma-core). */
#define UCT_DCX_HW_VERBS_LIB "libibverbs.so.1"
#define UCT_DCX_HW_MLX5_LIB  "libmlx5.so.1"


/**
 * rdma-core entry points, with rdma-core 44's signatures. Every slot is
 * filled by a binding; a slot the device lacks reports EOPNOTSUPP as
 * rdma-core does.
 */
typedef struct uct_dcx_verbs_ops {
    /* Devices */
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    __be64 (*get_device_guid)(struct ibv_device *device);
    bool (*mlx5dv_is_supported)(struct ibv_device *device);
    struct ibv_context *(*mlx5dv_open_device)(struct ibv_device *device,
                                              struct mlx5dv_context_attr *attr);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context,
                        struct ibv_device_attr *attr);
    int (*query_device_ex)(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr);
    int (*mlx5dv_query_device)(struct ibv_context *context,
                               struct mlx5dv_context *attrs_out);
    int (*query_port)(struct ibv_context *context, uint8_t port_num,
                      struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index,
                     union ibv_gid *gid);
    /* _ibv_query_gid_ex, behind the inline ibv_query_gid_ex(): returns an
     * errno value, ENODATA for an empty entry; entry_size is sizeof(*entry) */
    int (*query_gid_ex)(struct ibv_context *context, uint32_t port_num,
                        uint32_t gid_index, struct ibv_gid_entry *entry,
                        uint32_t flags, size_t entry_size);
    int (*query_pkey)(struct ibv_context *context, uint8_t port_num, int index,
                      __be16 *pkey);
    /* A file of the device's sysfs directory (dir: ibv_device.ibdev_path),
     * NUL-terminated without its newline: its length, or -1 and errno */
    int (*read_sysfs_file)(const char *dir, const char *file, char *buf,
                           size_t size);

    /* Protection domains and memory regions */
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length,
                                   uint64_t iova, unsigned int access);
    int (*dereg_mr)(struct ibv_mr *mr);

    /* Completion queues and channels */
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *context,
                                      struct ibv_cq_init_attr_ex *attr);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                        void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);

    /* Shared receive queues */
    struct ibv_srq *(*create_srq)(struct ibv_pd *pd,
                                  struct ibv_srq_init_attr *attr);
    int (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr,
                      int attr_mask);
    int (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
    int (*destroy_srq)(struct ibv_srq *srq);

    /* Queue pairs: DCI, DCT and the loopback RC QP for UMR */
    struct ibv_qp *(*mlx5dv_create_qp)(struct ibv_context *context,
                                       struct ibv_qp_init_attr_ex *attr,
                                       struct mlx5dv_qp_init_attr *dv_attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                     int attr_mask);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                    struct ibv_qp_init_attr *init_attr);
    int (*destroy_qp)(struct ibv_qp *qp);
    struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *qp);
    struct mlx5dv_qp_ex *(*mlx5dv_qp_ex_from_ibv_qp_ex)(struct ibv_qp_ex *qp);

    /* Address handles */
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);

    /* Asynchronous events */
    int (*get_async_event)(struct ibv_context *context,
                           struct ibv_async_event *event);
    void (*ack_async_event)(struct ibv_async_event *event);

    /* DEVX general commands (device capabilities: QUERY_HCA_CAP of the
     * general and atomic pages) */
    int (*mlx5dv_devx_general_cmd)(struct ibv_context *context, const void *in,
                                   size_t inlen, void *out, size_t outlen);

    /* Direct objects: the send queue, CQ, AH and SRQ layouts libmlx5 chose,
     * for dcx's own WQE writer and CQE parser (UCX_DCX_POST); EOPNOTSUPP
     * where the provider offers none (the device model's API face) */
    int (*mlx5dv_init_obj)(struct mlx5dv_obj *obj, uint64_t obj_type);

    /* Indirect memory keys (UMR) */
    struct mlx5dv_mkey *(*mlx5dv_create_mkey)(
            struct mlx5dv_mkey_init_attr *attr);
    int (*mlx5dv_destroy_mkey)(struct mlx5dv_mkey *mkey);

    /* Diagnostics */
    const char *(*wc_status_str)(enum ibv_wc_status status);
} uct_dcx_verbs_ops_t;


/**
 * A binding: one provider of the entry points above.
 */
typedef struct uct_dcx_binding {
    const char *name; /* "rdma-core" or the device model's */
    uct_dcx_verbs_ops_t ops;
    bool dv; /* mlx5dv entry points are available */
    void *verbs_handle;
    void *mlx5_handle;
} uct_dcx_binding_t;


/**
 * Open the hardware binding: dlopen the given libibverbs and libmlx5
 * (normally UCT_DCX_HW_VERBS_LIB / UCT_DCX_HW_MLX5_LIB) and resolve their
 * versioned symbols.
 *
 * @return UCS_OK (binding->dv tells whether libmlx5 was found), or
 *         UCS_ERR_NO_DEVICE when libibverbs cannot be loaded or lacks a
 *         symbol; the reason is logged at debug level. Never fatal: hosts
 *         without rdma-core simply have no hardware devices.
 */
ucs_status_t uct_dcx_hw_binding_open(const char *verbs_lib,
                                     const char *mlx5_lib,
                                     uct_dcx_binding_t *binding);

/**
 * Open the device-model binding: dlopen the software DC device library and
 * resolve its "dcxemu_"-prefixed entry points.
 *
 * @return UCS_OK, or UCS_ERR_NO_DEVICE (logged as an error: the model was
 *         asked for explicitly) when the library cannot be loaded or lacks a
 *         required entry point.
 */
ucs_status_t
uct_dcx_emu_binding_open(const char *emu_lib, uct_dcx_binding_t *binding);

/* Close a binding opened by either function above. */
void uct_dcx_binding_close(uct_dcx_binding_t *binding);

#ifdef __cplusplus
}
#endif

#endif
