/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Test shims, preloaded before libuct_dcx.so so that the version guard is
 * observed end to end while everything else keeps working:
 *  - DCX_SHIM_CLASS:   the running libuct has another internal layout
 *                      (uct_base_iface_t 64 bytes larger);
 *  - DCX_SHIM_VERSION: libucp reports another UCX version.
 */
#include <dlfcn.h>
#include <stddef.h>

#define SHIM_EXPORT __attribute__((visibility("default")))

#if DCX_SHIM_CLASS

/* The public layout of ucs_class_t (ucs/type/class.h). */
typedef struct {
    const char *name;
    size_t size;
    void *superclass;
    void *init;
    void *cleanup;
} shim_class_t;

extern shim_class_t uct_iface_t_class;
void uct_base_iface_t_init(void);

/* Interposes libuct's class object for every user in the process. */
SHIM_EXPORT shim_class_t uct_base_iface_t_class = {
    "uct_base_iface_t", 1280 + 64, &uct_iface_t_class,
    (void *)uct_base_iface_t_init, NULL
};

__attribute__((constructor)) static void shim_init(void)
{
    void *libuct = dlopen("libuct.so.0", RTLD_NOLOAD | RTLD_LAZY);
    shim_class_t *real;

    /* Keep libuct's own cleanup so that interfaces still close. */
    real = (libuct == NULL) ?
                   NULL :
                   (shim_class_t *)dlsym(libuct, "uct_base_iface_t_class");
    if ((real != NULL) && (real != &uct_base_iface_t_class)) {
        uct_base_iface_t_class.cleanup = real->cleanup;
    }
}

#endif

#if DCX_SHIM_VERSION

SHIM_EXPORT void
ucp_get_version(unsigned *major, unsigned *minor, unsigned *release)
{
    *major   = 1;
    *minor   = 99;
    *release = 0;
}

#endif
