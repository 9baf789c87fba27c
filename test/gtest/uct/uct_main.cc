/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCT suite's main(): the plugin on the device model of this run, or on
 * the device that DCX_TEST_DEVICE names.
 */
#include "uct_test.h"

int main(int argc, char **argv)
{
    dcx_test::select_test_device();
    return dcx_test::run_suite(argc, argv, "uct", {});
}
