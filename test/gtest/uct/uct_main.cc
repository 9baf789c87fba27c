/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCT suite runs dcx on the software DC device, on a fabric of its own.
 */
#include "uct_test.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <string>
#include <unistd.h>

int main(int argc, char **argv)
{
    std::string fabric = "dcx-uct-test-" + std::to_string(getpid());
    const char *emu_lib = getenv("DCX_TEST_EMU_LIB");

    /* Before UCX discovers devices (once per process). */
    setenv("DCXEMU_FABRIC", fabric.c_str(), 0);
    setenv("DCXEMU_TIME_SCALE", "0.01", 0);
    setenv("UCX_DCX_EMU", "y", 1);
    setenv("UCX_DCX_EMU_LIB", (emu_lib != NULL) ? emu_lib : DCX_TEST_EMU_LIB,
           1);

    int ret = dcx_test::run_child_role(argc, argv);
    if (ret >= 0) {
        return ret;
    }

    /* A child that died must fail its test, not kill the whole run. */
    signal(SIGPIPE, SIG_IGN);
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
