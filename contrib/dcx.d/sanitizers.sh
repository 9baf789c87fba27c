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
    make -C "$DCX_ASAN_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null ||
        die "building the ASan tests failed"

    local t mode tests=(emu/dcxemu_gtest uct/dcx_uct_gtest ucp/dcx_ucp_gtest) name
    # On the mlx5 face: the UCT and UCP suites on the ASan build's face (the
    # face's own code checked too); the ASan runtime comes first in the
    # preload, as it must come first among a process's libraries. The
    # device model's own suite does not run on a face.
    local FACE_PRELOAD=
    if [ "$DCX_FACE" = mlx5 ]; then
        tests=(uct/dcx_uct_gtest ucp/dcx_ucp_gtest)
        FACE_PRELOAD="$(gcc -print-file-name=libasan.so):$DCX_ASAN_BUILD/install/lib/libdcxemu_mlx5.so.0"
    fi
    for mode in immediate deferred; do
        for t in "${tests[@]}"; do
            name="asan-$mode-$(basename "$t")"
            [ "$DCX_FACE" = api ] || name="asan-$DCX_FACE-$mode-$(basename "$t")"
            ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
            DCXEMU_FABRIC="dcx-asan-$mode-$$" DCXEMU_EXEC=$mode \
                face_gtest "$name" "$DCX_ASAN_BUILD/test/gtest/$t"
        done
    done
}

# run_valgrind NAME BINARY GTEST_ARGS...: the gtest report counts the tests;
# memcheck errors (exit code 99) fail one more check named NAME-memcheck.
run_valgrind() {
    local name=$1 binary=$2; shift 2
    local log="$DCX_LOGS/$name.memcheck.log"
    local xml="$DCX_LOGS/$name.xml" rc=0 fabric="dcx-valgrind-$$" wrs
    local -a face_env=() face_opts=()
    rm -f "$xml"
    note "gtest $name (valgrind memcheck)"
    # On the mlx5 face: the face preloaded on a fabric kept for its
    # counters; its doorbells trapped (DCXEMU_UAR=trap: the face would
    # otherwise leave its UARs read-write under valgrind and take WQEs only
    # every millisecond), which memcheck delivers when it keeps every
    # register exact at each memory access.
    if [ "$DCX_FACE" = mlx5 ]; then
        fabric="dcx-valgrind-$$-$name"
        face_env=("${FACE_GTEST_ENV[@]}" DCXEMU_KEEP_FABRIC=1 DCXEMU_UAR=trap
                  "LD_PRELOAD=$DCX_PREFIX/lib/libdcxemu_mlx5.so.0")
        face_opts=(--px-default=allregs-at-mem-access)
    fi
    set +e
    # --fair-sched=yes: valgrind runs one thread at a time, and its default
    # lock lets a thread that spins in progress starve the device model's
    # engine thread (retries then take seconds, and waits time out).
    env "${face_env[@]}" DCXEMU_FABRIC="$fabric" \
        valgrind -q --fair-sched=yes --error-exitcode=99 --trace-children=no --log-file="$log" \
        "${face_opts[@]}" "$binary" --gtest_output="xml:$xml" "$@" 2>&1 | sed 's/^/      /'
    rc=${PIPESTATUS[0]}
    set -e
    gtest_account "$xml"
    if [ "$DCX_FACE" = mlx5 ]; then
        wrs=$(face_fabric_wrs "$fabric")
        "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$fabric" >/dev/null || true
        note "device $FACE_DEV: $wrs work requests executed"
        if [ "$wrs" -eq 0 ]; then
            note "FAIL $name-device: the device executed no work request"
            total_failed=$((total_failed + 1))
            failed_names+=("$name-device")
        fi
    fi
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
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null || die "building the tests failed"
    # the device model's own suite does not run on a face
    if [ "$DCX_FACE" = api ]; then
        run_valgrind valgrind-emu "$DCX_BUILD/test/gtest/emu/dcxemu_gtest"
        run_valgrind valgrind-uct "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" \
            --gtest_filter='-uct_scale.*'
    else
        run_valgrind "valgrind-$DCX_FACE-uct" "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" \
            --gtest_filter="$(face_gtest_filter '*-uct_scale.*')"
    fi
}
