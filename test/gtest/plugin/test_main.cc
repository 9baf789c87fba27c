/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include <gtest/gtest.h>

int main(int argc, char **argv)
{
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
