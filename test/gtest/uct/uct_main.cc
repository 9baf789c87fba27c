/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCT suite's main(): the plugin on the device model of this run.
 */
#include "uct_test.h"

int main(int argc, char **argv)
{
    return dcx_test::run_suite(argc, argv, "uct", {});
}
