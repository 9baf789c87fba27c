/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Between the interface's own files (dcx_iface*.c, dcx_qp.c, dcx_dci.c,
 * dcx_rx.c, dcx_fc.c, dcx_peer.c, dcx_mem_view.c): the constructor's
 * init steps with their cleanups, in the order the constructor runs them,
 * and what progress calls. Endpoints need none of it (dcx_iface.h).
 */
#ifndef UCT_DCX_IFACE_INT_H_
#define UCT_DCX_IFACE_INT_H_

#include "dcx_direct.h"
#include "dcx_direct_rx.h"
#include "dcx_iface.h"


/* A completion as progress keeps it, read from the CQ in one batch. */
typedef struct {
    uint64_t wr_id;
    enum ibv_wc_status status;
    uint32_t vendor_err; /* the device's syndrome, on errors */
    uint32_t byte_len;
    uint32_t imm;
    int opcode;
} uct_dcx_wc_t;


/* dcx_iface_config.c */
ucs_status_t uct_dcx_iface_check_config(const uct_dcx_iface_config_t *config);
uint8_t uct_dcx_qp_timeout_exp(double seconds);
uint8_t uct_dcx_rnr_timer_code(double seconds);
ucs_status_t
uct_dcx_path_mtu(unsigned bytes, enum ibv_mtu active, enum ibv_mtu *mtu_p);

/* dcx_peer.c */
ucs_status_t uct_dcx_iface_init_roce(uct_dcx_iface_t *iface,
                                     const uct_dcx_iface_config_t *config,
                                     const char *dev_name);
ucs_status_t
uct_dcx_iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr);
ucs_status_t
uct_dcx_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr);
void uct_dcx_iface_peers_init(uct_dcx_iface_t *iface);
void uct_dcx_iface_peers_cleanup(uct_dcx_iface_t *iface);

/* dcx_qp.c */
ucs_status_t uct_dcx_iface_queues_create(uct_dcx_iface_t *iface,
                                         const uct_dcx_iface_config_t *config,
                                         const char *dev_name);
void uct_dcx_iface_queues_destroy(uct_dcx_iface_t *iface);
ucs_status_t
uct_dcx_iface_dci_create(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci);
ucs_status_t
uct_dcx_iface_dci_connect(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci);
void uct_dcx_iface_dcis_destroy(uct_dcx_iface_t *iface, unsigned count);
void uct_dcx_iface_direct_cleanup(uct_dcx_iface_t *iface);
unsigned uct_dcx_iface_config_num_dci(const uct_dcx_iface_config_t *config);
unsigned uct_dcx_iface_num_dci_qps(const uct_dcx_iface_t *iface,
                                   const uct_dcx_iface_config_t *config);
void uct_dcx_iface_streams_init(uct_dcx_iface_t *iface,
                                const uct_dcx_iface_config_t *config);
ucs_status_t uct_dcx_iface_ddp_init(uct_dcx_iface_t *iface,
                                    const uct_dcx_iface_config_t *config);

/* dcx_rx.c */
ucs_status_t
uct_dcx_iface_srq_create(uct_dcx_iface_t *iface, const char *dev_name);
void uct_dcx_iface_srq_destroy(uct_dcx_iface_t *iface);
void uct_dcx_iface_recv_desc_init(uct_iface_h tl_iface, void *obj,
                                  uct_mem_h memh);
void uct_dcx_iface_release_desc(uct_recv_desc_t *self, void *desc);
ucs_status_t
uct_dcx_iface_rx_start(uct_dcx_iface_t *iface, const char *dev_name);
void uct_dcx_iface_post_recv(uct_dcx_iface_t *iface);
unsigned uct_dcx_iface_poll_rx_batch(uct_dcx_iface_t *iface);

/* dcx_dci.c */
ucs_status_t uct_dcx_iface_dci_pool_init(uct_dcx_iface_t *iface,
                                         const uct_dcx_iface_config_t *config);
void uct_dcx_iface_dci_pool_cleanup(uct_dcx_iface_t *iface);
void uct_dcx_iface_fatal_listen(uct_dcx_iface_t *iface);
void uct_dcx_iface_fatal_unlisten(uct_dcx_iface_t *iface);
unsigned uct_dcx_iface_poll_tx_batch(uct_dcx_iface_t *iface);
void uct_dcx_iface_dci_recover(uct_dcx_iface_t *iface, uct_dcx_dci_t *dci);
void uct_dcx_iface_dci_release(uct_dcx_iface_t *iface, uint16_t dci_index);

/* dcx_fc.c */
void uct_dcx_iface_fc_init(uct_dcx_iface_t *iface,
                           const uct_dcx_iface_config_t *config);
void uct_dcx_iface_fc_cleanup(uct_dcx_iface_t *iface);
int uct_dcx_iface_fc_recv(uct_dcx_iface_t *iface, uint32_t imm,
                          const void *data, size_t length);
void uct_dcx_iface_fc_progress(uct_dcx_iface_t *iface);

/* dcx_mem_view.c */
void uct_dcx_iface_umr_init(uct_dcx_iface_t *iface,
                            const uct_dcx_iface_config_t *config);
unsigned uct_dcx_iface_umr_progress(uct_dcx_iface_t *iface);
void uct_dcx_iface_umr_cleanup(uct_dcx_iface_t *iface);

/* dcx_iface.c */
int uct_dcx_iface_is_dcx(uct_iface_h tl_iface);


/* Progress finds nothing most of the time: that check stays inline. */
static UCS_F_ALWAYS_INLINE unsigned
uct_dcx_iface_poll_rx(uct_dcx_iface_t *iface)
{
    struct ibv_poll_cq_attr attr = {};

    if (ucs_likely(ibv_start_poll(iface->rx.poll_cq, &attr) != 0)) {
        if (ucs_unlikely(iface->rx.refill)) {
            iface->rx.refill = 0;
            uct_dcx_iface_post_recv(iface);
        }
        return 0;
    }
    return uct_dcx_iface_poll_rx_batch(iface);
}

static UCS_F_ALWAYS_INLINE unsigned
uct_dcx_iface_poll_tx(uct_dcx_iface_t *iface)
{
    struct ibv_poll_cq_attr attr = {};

    if (ucs_likely(ibv_start_poll(iface->tx.poll_cq, &attr) != 0)) {
        return 0;
    }
    return uct_dcx_iface_poll_tx_batch(iface);
}

#endif
