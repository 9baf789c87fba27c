# contrib/dcx.d/roce.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite roce: dcx on the device model's RoCE port mode (RoCE addressing):
# DCXEMU_LINK_LAYER=ethernet (no LIDs; a GID table with RoCE v1/v2 and
# IPv4-mapped entries, index 0 the link-local RoCE v1 one) and two routers
# between any two ports (DCXEMU_ROCE_ROUTERS=2: a packet whose hop limit is
# 2 or less never arrives, a DCT's response included). Runs the UCT suite in
# both execution modes, a ucx_perftest pair and the MPI point-to-point run.

SUITES_ALL+=(roce)

# The interface of a RoCE port carries its GID in its device address
# (2 + 1 + 16 bytes): the run is on the RoCE path, not the LID path.
roce_ucx_info_global_address() {
    local out
    out=$(DCXEMU_FABRIC="$E2E_FABRIC" "$DCX_PREFIX/bin/dcx-run" --emu \
              env UCX_LOG_LEVEL=debug ucx_info -d -t dcx 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -E '^#[[:space:]]+device address: 19 bytes' || {
        echo "$out" | grep -E 'device address'; echo "no RoCE (GID) device address"; return 1; }
    echo "$out" | grep -E 'dcx: dcxemu0:1: RoCE v2 GID index 3 ::ffff:198\.51\.100\.1' || {
        echo "dcx did not choose the RoCE v2 IPv4-mapped GID"; return 1; }
}

suite_roce() {
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check >/dev/null || die "building the tests failed"
    local -x DCXEMU_LINK_LAYER=ethernet DCXEMU_ROCE_ROUTERS=2
    local bin="$DCX_BUILD/test/e2e"
    DCXEMU_EXEC=immediate run_gtest uct-roce "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest"
    DCXEMU_EXEC=deferred run_gtest uct-roce-deferred "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest"
    E2E_FABRIC="dcx-roce-$$"
    check roce-ucx-info-global-address roce_ucx_info_global_address
    check roce-perftest-am_lat  perftest_pair roce-am_lat -t am_lat -n 2000 -w 100
    check roce-perftest-put_bw  perftest_pair roce-put_bw -t put_bw -D zcopy -s 65536 -n 500 -w 50
    e2e_users_build
    check roce-mpi-p2p \
        launcher_run '^mpi_check: PASS \(p2p\)' mpirun "$bin/mpi_check" p2p
}
