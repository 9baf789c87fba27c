/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Between the memory domain's two files: dcx_md.c opens the domain and runs
 * the init step of dcx_md_mem.c, memory registration, with its cleanup.
 * Interfaces need none of it (dcx_md.h).
 */
#ifndef UCT_DCX_MD_INT_H_
#define UCT_DCX_MD_INT_H_

#include "dcx_md.h"


/* The rights registrations get and the registration cache, as configured. */
ucs_status_t
uct_dcx_md_mem_init(uct_dcx_md_t *md, const uct_dcx_md_config_t *config);
void uct_dcx_md_mem_cleanup(uct_dcx_md_t *md);

#endif
