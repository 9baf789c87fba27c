# contrib/dcx.d/sanitizers.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# Memory checkers:
#   suite asan      a second build tree (build-asan/) configured with
#                   --enable-sanitizers (AddressSanitizer + UBSan, leaks
#                   detected, undefined behaviour fatal); runs the device
#                   model's, the UCT and the UCP googletests from it, in both
#                   of the model's execution modes. Child
#                   processes are images of the same ASan binaries.
#   suite valgrind  memcheck on the normal build: the device model's suite
#                   and the UCT suite except uct_scale.* (sixteen busy
#                   senders against one receiver slowed down 50x by
#                   valgrind take minutes). Children of multi-process tests
#                   run natively; their writes into the checked process go
#                   to memory the process initialised or registered.
# ASan cannot be preloaded into the non-ASan ucx_info / ucx_perftest, so the
# e2e suites are not part of it.

SUITES_ALL+=(asan valgrind)

# Next to the release's own build tree (build-asan-ucx1.18/ under --ucx 1.18).
DCX_ASAN_BUILD=${DCX_ASAN_BUILD_DIR:-$DCX_TOP/build-asan${DCX_IN_ROOT:+-ucx$DCX_IN_ROOT}}

suite_asan() {
    note "building $DCX_ASAN_BUILD with --enable-sanitizers"
    DCX_BUILD_DIR="$DCX_ASAN_BUILD" DCX_PREFIX="$DCX_ASAN_BUILD/install" \
        DCX_CONFIGURE_FLAGS="--enable-sanitizers" \
        "$DCX_TOP/contrib/dcx" build > "$DCX_LOGS/asan-build.log" 2>&1 ||
        { tail -20 "$DCX_LOGS/asan-build.log"; die "the ASan build failed"; }
    make -C "$DCX_ASAN_BUILD" -s -j"$DCX_JOBS" check >/dev/null ||
        die "building the ASan tests failed"

    local t mode
    for mode in immediate deferred; do
        for t in emu/dcxemu_gtest uct/dcx_uct_gtest ucp/dcx_ucp_gtest; do
            ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
            DCXEMU_FABRIC="dcx-asan-$mode-$$" DCXEMU_EXEC=$mode \
                run_gtest "asan-$mode-$(basename "$t")" "$DCX_ASAN_BUILD/test/gtest/$t"
        done
    done
}

# run_valgrind NAME BINARY GTEST_ARGS...: the gtest report counts the tests;
# memcheck errors (exit code 99) fail one more check named NAME-memcheck.
run_valgrind() {
    local name=$1 binary=$2; shift 2
    local log="$DCX_LOGS/$name.memcheck.log"
    local xml="$DCX_LOGS/$name.xml" rc=0
    rm -f "$xml"
    note "gtest $name (valgrind memcheck)"
    set +e
    # --fair-sched=yes: valgrind runs one thread at a time, and its default
    # lock lets a thread that spins in progress starve the device model's
    # engine thread (retries then take seconds, and waits time out).
    DCXEMU_FABRIC="dcx-valgrind-$$" \
        valgrind -q --fair-sched=yes --error-exitcode=99 --trace-children=no --log-file="$log" \
        "$binary" --gtest_output="xml:$xml" "$@" 2>&1 | sed 's/^/      /'
    rc=${PIPESTATUS[0]}
    set -e
    gtest_account "$xml"
    if [ "$rc" -ne 99 ]; then
        note "PASS $name-memcheck"
        total_passed=$((total_passed + 1))
    else
        note "FAIL $name-memcheck (log: $log)"
        head -40 "$log" | sed 's/^/      | /'
        total_failed=$((total_failed + 1))
        failed_names+=("$name-memcheck")
    fi
}

suite_valgrind() {
    command -v valgrind >/dev/null || die "valgrind not found (apt-get install valgrind)"
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check >/dev/null || die "building the tests failed"
    run_valgrind valgrind-emu "$DCX_BUILD/test/gtest/emu/dcxemu_gtest"
    run_valgrind valgrind-uct "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" \
        --gtest_filter='-uct_scale.*'
}
