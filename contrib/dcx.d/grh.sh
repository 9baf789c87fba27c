# contrib/dcx.d/grh.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite grh: dcx on InfiniBand ports that require a global routing header
# (the device model's DCXEMU_GRH_REQUIRED=1: IBV_QPF_GRH_REQUIRED in the
# port's flags, and an address handle or QP address vector without a GRH is
# refused, as libmlx5 and the kernel refuse it). Runs the UCT suite in both
# execution modes; every address dcx builds must carry a GRH. With --face
# mlx5 through the system's libibverbs/libmlx5 (the face reports the port
# flag in QUERY_PORT), in one execution mode under DCX_FACE_QUICK=1.

SUITES_BY_NAME+=(grh)

suite_grh() {
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null || die "building the tests failed"
    local -x DCXEMU_GRH_REQUIRED=1
    DCXEMU_EXEC=immediate face_gtest uct-grh "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest"
    face_quick ||
        DCXEMU_EXEC=deferred face_gtest uct-grh-deferred "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest"
}
