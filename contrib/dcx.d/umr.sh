# contrib/dcx.d/umr.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# Strided zero-copy through UMR:
#   suite umr   the UCT googletests of strided put/get, the layout cache and
#               remote strided views (on 512 B and 1024 B WQE devices), and
#               the halo-exchange program
#               test/demo/dcx_halo (4 processes, columns moved strided into
#               remote strided views, every ghost cell verified)
# and the halo part of the demo (demo_umr, called by cmd_demo).

SUITES_ALL+=(umr)

# halo_run LOG ARGS...: dcx_halo on the face of this run (on the fabric
# HALO_FABRIC when set, kept for its counters).
halo_run() {
    local log=$1; shift
    DCXEMU_FABRIC="${HALO_FABRIC:-dcx-halo-$$-$RANDOM}" DCX_DEMO_DEVICE=$FACE_DEV timeout -k 10 120 \
        "$DCX_PREFIX/bin/dcx-run" $FACE_RUN "$DCX_BUILD/test/demo/dcx_halo" "$@" > "$log" 2>&1
}

# PASS line, every rank verified its ghosts through the zero-copy path, and
# the device's counters show a UMR from every rank.
halo_check() {
    local nranks=$1; shift
    local log="$DCX_LOGS/halo.log" rc=0 umrs
    local HALO_FABRIC="dcx-halo-$$-$RANDOM"
    DCXEMU_KEEP_FABRIC=1 halo_run "$log" "$nranks" "$@" || rc=$?
    umrs=$(fabric_counter_sum "$HALO_FABRIC" '^umr$')
    "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$HALO_FABRIC" >/dev/null || true
    [ $rc -eq 0 ] || { cat "$log"; return 1; }
    grep -q "^dcx_halo: PASS ($nranks ranks" "$log" || { cat "$log"; return 1; }
    [ "$(grep -c 'ghosts verified' "$log")" -eq "$nranks" ] || { cat "$log"; return 1; }
    ! grep -q ' 0 zero-copy' "$log" || { echo "no strided zero-copy"; cat "$log"; return 1; }
    cat "$log"
    echo "device $FACE_DEV: $umrs UMRs"
    [ "$umrs" -ge "$nranks" ] || { echo "the device executed $umrs UMRs for $nranks ranks"; return 1; }
}

suite_umr() {
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" all check TESTS= >/dev/null || die "building the tests failed"
    # The UMR entry limits follow the device's largest WQE: pinned 512 B and
    # a larger 1024 B device.
    DCXEMU_FABRIC="dcx-umr-test-$$" \
        face_gtest umr "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" --gtest_filter='umr/*:uct_umr_caps.*:uct_multiproc.strided*'
    if face_quick; then
        # DCX_FACE_QUICK=1 on the mlx5 face: the 512 B device, one execution
        # mode (the engine's, beneath both faces), the 4-rank halo exchange
        check halo-4-ranks halo_check 4 20
        return
    fi
    DCXEMU_FABRIC="dcx-umr-test-1k-$$" DCXEMU_MAX_WQE_SIZE=1024 \
        face_gtest umr-wqe1024 "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" --gtest_filter='umr/*:uct_umr_caps.*:uct_multiproc.strided*'
    DCXEMU_FABRIC="dcx-umr-test-d-$$" DCXEMU_EXEC=deferred \
        face_gtest umr-deferred "$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" --gtest_filter='umr/*:uct_umr_caps.*:uct_multiproc.strided*'
    DCXEMU_EXEC=deferred check halo-4-ranks-deferred halo_check 4 10
    check halo-4-ranks halo_check 4 20
    check halo-8-ranks-tall halo_check 8 5 2048 32
}

demo_umr() {
    local log="$DCX_LOGS/halo.log"
    note ""
    note "Halo exchange over UCT, 4 processes: columns (strided) into remote"
    note "strided views, zero-copy through UMR (test/demo/dcx_halo.c):"
    if halo_run "$log" 4 20 && grep -q '^dcx_halo: PASS' "$log"; then
        sed -n 's/^dcx_halo: rank 0: /    rank 0: /p; s/^dcx_halo: PASS/    PASS/p' "$log"
        return 0
    fi
    note "    FAILED (log: $log)"
    failure_excerpt "$log"
    return 1
}

# --- contrib/dcx bench umr ----------------------------------------------------

# One shape: "LENGTH STRIDE COUNT ITERATIONS" -> lines "shape method usec MB/s".
bench_umr_shape() {
    DCXEMU_FABRIC="$BENCH_FABRIC" timeout 600 "$DCX_PREFIX/bin/dcx-run" --emu \
        "$DCX_BUILD/test/demo/dcx_umr_bench" "$@" 2>/dev/null
}

bench_umr() {
    local shapes=("8 64 4096 100" "1024 4096 1024 50" "64 128 65536 10")
    local png="$DCX_TOP/bench-results/umr.png" dat line shape
    dat=$(mktemp)
    say "bench umr: one strided transfer into contiguous remote memory, four ways"
    note "device-model figures on this host, not mlx5 hardware: the model gathers"
    note "every UMR block with a CPU copy where a NIC gathers by DMA, and a UMR"
    note "costs no device round trip"
    echo "shape,method,usec_per_transfer,MBps" > "$BENCH_CSV"
    printf '  %-18s %-12s %14s %10s\n' shape method usec/transfer MB/s
    for shape in "${shapes[@]}"; do
        # shellcheck disable=SC2086
        bench_umr_shape $shape > "$dat.one" || die "dcx_umr_bench $shape failed"
        while read -r s m u b; do
            printf '  %-18s %-12s %14s %10s\n' "$s" "$m" "$u" "$b"
            echo "$s,$m,$u,$b" >> "$BENCH_CSV"
        done < "$dat.one"
        awk '{ bw[$2] = $4; s = $1 } END {
                 printf "  %-18s umr-cached vs pack-bcopy %.2fx, vs per-element %.1fx\n",
                        s, bw["umr-cached"] / bw["pack-bcopy"], bw["umr-cached"] / bw["per-element"] }' \
            "$dat.one"
        cat "$dat.one" >> "$dat"
    done
    if command -v gnuplot >/dev/null; then
        # One row per shape, one column per method, MB/s on a log scale.
        awk '{ v[$1, $2] = $4; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 } }
             END { print "shape umr-first umr-cached per-element pack-bcopy";
                   for (i = 0; i < n; ++i) { s = order[i];
                       print s, v[s, "umr-first"], v[s, "umr-cached"],
                             v[s, "per-element"], v[s, "pack-bcopy"] } }' \
            "$dat" > "$dat.plot"
        gnuplot <<GNUPLOT || die "gnuplot failed"
set terminal pngcairo size 900,500 noenhanced
set output '$png'
set title "dcx strided put, device model (not hardware): MB/s per method"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel "MB/s (log)"
set key top left autotitle columnhead
set grid ytics
plot '$dat.plot' using 2:xtic(1), '' using 3, '' using 4, '' using 5
GNUPLOT
        note "plot: $png"
    else
        note "gnuplot not found: no plot (contrib/dcx setup installs gnuplot-nox)"
    fi
    rm -f "$dat" "$dat.one" "$dat.plot"
}
