/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Version guard: libuct/libucs have the same soname in every release, so a
 * newer UCX would load a plugin built against 1.13's internal ABI. Before
 * registering, dcx compares an ABI fingerprint of the running UCX with the
 * one it was built against.
 */
#ifndef UCT_DCX_GUARD_H_
#define UCT_DCX_GUARD_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct uct_dcx_abi {
    size_t base_iface_size; /* uct_base_iface_t_class.size */
    size_t base_ep_size; /* uct_base_ep_t_class.size */
    int version_known; /* the fields below are valid */
    unsigned major;
    unsigned minor;
    unsigned release;
} uct_dcx_abi_t;


/* The fingerprint dcx was compiled against. */
void uct_dcx_abi_built(uct_dcx_abi_t *abi);

/* The fingerprint of the UCX in this process: class sizes exported by
 * libuct, and the version from ucp_get_version() when libucp is loaded. */
void uct_dcx_abi_running(uct_dcx_abi_t *abi);

/**
 * @return 1 if a plugin built for @a built may register in @a running;
 *         otherwise 0, with a one-line reason naming both versions.
 */
int uct_dcx_abi_compatible(const uct_dcx_abi_t *built,
                           const uct_dcx_abi_t *running, char *reason,
                           size_t max);

#ifdef __cplusplus
}
#endif

#endif
