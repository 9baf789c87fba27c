/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCT suite's main(): the plugin on the device model of this run, or on
 * the device that DCX_TEST_DEVICE names.
 */
#include "uct_test.h"

#include <stdlib.h>
#include <string>

int main(int argc, char **argv)
{
    /* DCX_TEST_DEVICE=dcxemu_mlx5_0: the tests run on that device (the
     * device's mlx5 face, preloaded) through dcx's hardware binding. */
    static std::string md, dev;
    const char *device = getenv("DCX_TEST_DEVICE");

    if (device != NULL) {
        md                     = device;
        dev                    = md + ":1";
        dcx_test::emu_md_name  = md.c_str();
        dcx_test::emu_dev_name = dev.c_str();
    }
    return dcx_test::run_suite(argc, argv, "uct", {});
}
