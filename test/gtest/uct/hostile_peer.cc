/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * What the fuzz targets' raw device (test/fuzz/fuzz_emu.c) needs from their
 * utilities, so that UCT tests drive it too: a hostile peer that sends a
 * dcx interface what no dcx sender would.
 */
#include "uct_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {

void dcx_fuzz_fatal(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "hostile peer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

const char *dcx_fuzz_emu_lib(void)
{
    const char *lib = getenv("UCX_DCX_EMU_LIB");

    return (lib != NULL) ? lib : DCX_TEST_EMU_LIB;
}

double dcx_fuzz_now(void)
{
    return dcx_test::now_sec();
}

} // extern "C"
