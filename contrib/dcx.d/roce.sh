# contrib/dcx.d/roce.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite roce: dcx on the device model's RoCE port mode (RoCE addressing):
# DCXEMU_LINK_LAYER=ethernet (no LIDs; a GID table with RoCE v1/v2 and
# IPv4-mapped entries, index 0 the link-local RoCE v1 one) and two routers
# between any two ports (DCXEMU_ROCE_ROUTERS=2: a packet whose hop limit is
# 2 or less never arrives, a DCT's response included). Runs the UCT suite in
# both execution modes, a ucx_perftest pair and the MPI point-to-point run;
# with --face mlx5 the same through the system's libibverbs/libmlx5 (the
# face reports the port's link layer, GID table and traffic class in sysfs
# and makes RoCE address handles with their MAC), the UCT suite in one
# execution mode under DCX_FACE_QUICK=1.

SUITES_ALL+=(roce)

# The interface of a RoCE port carries its GID in its device address
# (2 + 1 + 16 bytes): the run is on the RoCE path, not the LID path.
roce_ucx_info_global_address() {
    local out
    out=$(DCXEMU_FABRIC="$E2E_FABRIC" "$DCX_PREFIX/bin/dcx-run" $FACE_RUN \
              env UCX_LOG_LEVEL=debug ucx_info -d -t dcx 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -E '^#[[:space:]]+device address: 19 bytes' || {
        echo "$out" | grep -E 'device address'; echo "no RoCE (GID) device address"; return 1; }
    echo "$out" | grep -E "dcx: $FACE_DEV:1: RoCE v2 GID index 3 ::ffff:198\.51\.100\.1" || {
        echo "dcx did not choose the RoCE v2 IPv4-mapped GID"; return 1; }
}

suite_roce() {
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null || die "building the tests failed"
    local -x DCXEMU_LINK_LAYER=ethernet DCXEMU_ROCE_ROUTERS=2
    local bin="$DCX_BUILD/test/e2e"
    DCXEMU_EXEC=immediate face_gtest uct-roce "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest"
    face_quick ||
        DCXEMU_EXEC=deferred face_gtest uct-roce-deferred "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest"
    E2E_FABRIC="dcx-roce-$$"
    check roce-ucx-info-global-address roce_ucx_info_global_address
    check roce-perftest-am_lat  perftest_pair roce-am_lat -t am_lat -n 2000 -w 100
    check roce-perftest-put_bw  perftest_pair roce-put_bw -t put_bw -D zcopy -s 65536 -n 500 -w 50
    e2e_users_build
    check roce-mpi-p2p \
        launcher_run '^mpi_check: PASS \(p2p\)' mpirun "$bin/mpi_check" p2p
    [ "$DCX_FACE" = mlx5 ] || return 0
    # Programs nobody here wrote on the face's RoCE port: perftest with the
    # RoCE v2 IPv4-mapped GID (-x 3), UCX's own dc_mlx5 (its GID choice).
    check roce-mlx5-perftest-dc-write_lat mlx5_perftest write 1000 ib_write_lat -c DC -x 3 -n 500
    check roce-mlx5-perftest-rc-send_lat  mlx5_perftest recv_cqes 1000 ib_send_lat -c RC -x 3 -n 500
    check roce-mlx5-ucx-dc_mlx5-put_lat   mlx5_ucx_perftest write 1000 dc_mlx5 -t put_lat -n 1000 -w 100
}
