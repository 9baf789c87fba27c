/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * The UCP suite's main(): UCP over dcx only, on the device model of this run,
 * or on the device that DCX_TEST_DEVICE names.
 */
#include "ucp_test.h"

int main(int argc, char **argv)
{
    dcx_test::select_test_device();
    return dcx_test::run_suite(argc, argv, "ucp", { { "UCX_TLS", "dcx" } });
}
