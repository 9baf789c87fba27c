# contrib/dcx.d/umr.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# Strided zero-copy through UMR (issue 8):
#   suite umr   the UCT googletests of strided put/get, the layout cache and
#               remote strided views, and the halo-exchange program
#               test/demo/dcx_halo (4 processes, columns moved strided into
#               remote strided views, every ghost cell verified)
# and the halo part of the demo (demo_umr, called by cmd_demo).

SUITES_ALL+=(umr)

halo_run() {
    local log=$1; shift
    DCXEMU_FABRIC="dcx-halo-$$-$RANDOM" timeout -k 10 120 \
        "$DCX_PREFIX/bin/dcx-run" --emu "$DCX_BUILD/test/demo/dcx_halo" "$@" > "$log" 2>&1
}

# PASS line, and every rank verified its ghosts through the zero-copy path.
halo_check() {
    local nranks=$1; shift
    local log="$DCX_BUILD/test-logs/halo.log"
    halo_run "$log" "$nranks" "$@" || { cat "$log"; return 1; }
    grep -q "^dcx_halo: PASS ($nranks ranks" "$log" || { cat "$log"; return 1; }
    [ "$(grep -c 'ghosts verified' "$log")" -eq "$nranks" ] || { cat "$log"; return 1; }
    ! grep -q ' 0 zero-copy' "$log" || { echo "no strided zero-copy"; cat "$log"; return 1; }
    cat "$log"
}

suite_umr() {
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" all check >/dev/null || die "building the tests failed"
    DCXEMU_FABRIC="dcx-umr-test-$$" \
        run_gtest umr "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" --gtest_filter='umr/*'
    check halo-4-ranks halo_check 4 20
    check halo-8-ranks-tall halo_check 8 5 2048 32
}

demo_umr() {
    local log="$DCX_BUILD/demo-logs/halo.log"
    mkdir -p "$DCX_BUILD/demo-logs"
    note ""
    note "Halo exchange over UCT, 4 processes: columns (strided) into remote"
    note "strided views, zero-copy through UMR (test/demo/dcx_halo.c):"
    if halo_run "$log" 4 20 && grep -q '^dcx_halo: PASS' "$log"; then
        sed -n 's/^dcx_halo: rank 0: /    rank 0: /p; s/^dcx_halo: PASS/    PASS/p' "$log"
        return 0
    fi
    note "    FAILED (log: $log)"
    return 1
}
