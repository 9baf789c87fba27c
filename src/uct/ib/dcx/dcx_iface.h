/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#ifndef UCT_DCX_IFACE_H_
#define UCT_DCX_IFACE_H_

#include "dcx_md.h"

#include <uct/base/uct_iface.h>


typedef struct uct_dcx_iface_config {
    uct_iface_config_t super;
    unsigned           num_dci;      /* DCIs in the pool */
    unsigned           tx_queue_len; /* send queue length of each DCI */
    unsigned           rx_queue_len; /* receive buffers in the DCT's SRQ */
    size_t             seg_size;     /* bcopy / receive segment size */
} uct_dcx_iface_config_t;


extern uct_tl_t uct_dcx_tl;
extern ucs_config_field_t uct_dcx_iface_config_table[];

#endif
