/* Test main of the mlx5 face's suite: its pieces (doorbell trap, WQE and CQE
 * formats) tested on their own, without rdma-core. */
#include <gtest/gtest.h>

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
