# contrib/dcx bench: performance as ratios measured side by side in one run.
# Sourced by contrib/dcx.

BENCH_ROUNDS=${DCX_BENCH_ROUNDS:-3}

# Median of the numbers on stdin.
bench_median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'
}

# ucx_perftest pair; prints one figure of the client's final line:
# lat = typical latency (us), bw = average bandwidth (MB/s).
bench_perftest() {
    local field=$1 tl=$2 dev=$3; shift 3
    local port=$((20000 + (RANDOM % 20000))) spid line
    local run=("$DCX_PREFIX/bin/dcx-run" --emu)
    DCXEMU_FABRIC="$BENCH_FABRIC" "${run[@]}" \
        ucx_perftest -x "$tl" -d "$dev" -p $port >/dev/null 2>&1 &
    spid=$!
    sleep 0.3
    line=$(DCXEMU_FABRIC="$BENCH_FABRIC" timeout 300 "${run[@]}" \
           ucx_perftest -x "$tl" -d "$dev" -p $port "$@" localhost 2>/dev/null |
           grep '^Final:')
    wait $spid 2>/dev/null
    [ -n "$line" ] || { echo nan; return 1; }
    # Final: iters typical avg overall | bw avg overall | msg avg overall
    echo "$line" | awk -v f="$field" '{ print (f == "lat") ? $3 : $6 }'
}

bench_floor() {
    DCXEMU_FABRIC="$BENCH_FABRIC" timeout 300 \
        "$DCX_BUILD/test/bench/dcx_floor" "$@" | awk '{ print $(NF-1) }'
}

# One row: name, goal text, ratio direction (le|ge), goal value, then the
# two measurement commands (dcx first).
bench_row() {
    local name=$1 what=$2 dir=$3 goal=$4 dcx_cmd=$5 ref_cmd=$6
    local dcx_vals=() ref_vals=() i dcx ref ratio met
    for ((i = 0; i < BENCH_ROUNDS; ++i)); do
        dcx_vals+=("$(eval "$dcx_cmd")")
        ref_vals+=("$(eval "$ref_cmd")")
    done
    dcx=$(printf '%s\n' "${dcx_vals[@]}" | bench_median)
    ref=$(printf '%s\n' "${ref_vals[@]}" | bench_median)
    ratio=$(awk -v a="$dcx" -v b="$ref" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
    met=$(awk -v r="$ratio" -v g="$goal" -v d="$dir" 'BEGIN {
        if (r == "nan") print "no data"; else if ((d == "le" && r <= g) || (d == "ge" && r >= g)) print "met"; else print "missed" }')
    printf '  %-4s %-44s %10s %10s %7s  goal %s %-5s %s\n' "$name" "$what" "$dcx" "$ref" "$ratio" \
        "$([ "$dir" = le ] && echo '<=' || echo '>=')" "$goal" "$met"
    echo "$name,$what,$dcx,$ref,$ratio,$dir,$goal,$met" >> "$BENCH_CSV"
}

bench_uct() {
    say "bench uct: dcx against the device floor and UCX's cma, $BENCH_ROUNDS rounds, medians"
    note "device-model figures on this host, not mlx5 hardware"
    printf '  %-4s %-44s %10s %10s %7s\n' id measure dcx reference ratio
    bench_row P1 "put_lat 8 B (us): dcx / floor WRITE ping-pong" le 1.10 \
        "bench_perftest lat dcx dcxemu0:1 -t put_lat -s 8 -n 20000 -w 2000" \
        "bench_floor -t write_lat -s 8 -n 20000 -w 2000"
    bench_row P2 "am_lat 8 B (us): dcx / floor SEND ping-pong" le 1.15 \
        "bench_perftest lat dcx dcxemu0:1 -t am_lat -s 8 -n 20000 -w 2000" \
        "bench_floor -t send_lat -s 8 -n 20000 -w 2000"
    bench_row P3 "put_bw 1 MiB (MB/s): dcx / cma" ge 0.90 \
        "bench_perftest bw dcx dcxemu0:1 -t put_bw -D zcopy -s 1048576 -n 1000 -w 50" \
        "bench_perftest bw cma memory -t put_bw -D zcopy -s 1048576 -n 1000 -w 50"
}

cmd_bench() {
    local what=${1:-uct}
    cmd_build
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check >/dev/null || die "building the benchmarks failed"
    mkdir -p "$DCX_TOP/bench-results"
    BENCH_FABRIC="dcx-bench-$$"
    BENCH_CSV="$DCX_TOP/bench-results/$what.csv"
    echo "id,measure,dcx,reference,ratio,direction,goal,result" > "$BENCH_CSV"
    case "$what" in
    uct) bench_uct ;;
    umr) bench_umr ;;
    *)   die "unknown benchmark '$what' (benchmarks: uct umr)" ;;
    esac
    note "saved $BENCH_CSV"
}
