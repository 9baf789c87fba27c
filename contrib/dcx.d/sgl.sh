# contrib/dcx.d/sgl.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# contrib/dcx --ucx 1.22 bench sgl: scatter-gather put through UCP
# (ucp_put_nbx with ucp_dt_make_sgl(), UCX 1.22 and later) over dcx, side by
# side with the same data sent as a loop of contiguous ucp_put_nbx calls and
# with dcx's merging of adjacent pieces switched off (UCX_DCX_UMR=no: every
# piece its own write, still one batch). With UCX_DCX_PUT_SGL=n there is no
# third way to compare: UCP 1.22 has no SGL put protocol without a transport
# that offers one and fails the call ("cannot find remote protocol").
# test/bench/dcx_sgl measures element rates; each row is BENCH_ROUNDS rounds
# of the three back to back, medians and the median of the per-round
# ratios. Goals: SGL / loop >= 3 into one contiguous region with
# small pieces, >= 1.5 to scattered addresses.

# The demo's SGL row (UCX 1.22 and later): the example of docs/usage.md.
demo_sgl() {
    local log="$DCX_LOGS/ucp-sgl-put.log"
    case "$(ucx_version)" in
    1.1[0-9].*|1.2[01].*) return 0 ;;
    esac
    note ""
    note "UCP scatter-gather put, four pieces in one ucp_put_nbx (share/dcx/examples/ucp_sgl_put.c):"
    if DCXEMU_FABRIC="$DEMO_FABRIC" UCX_TLS=dcx timeout 120 "$DCX_PREFIX/bin/dcx-run" --emu \
           "$DCX_BUILD/examples/ucp_sgl_put" > "$log" 2>&1 &&
       grep -q '^ucp_sgl_put: PASS' "$log"; then
        sed -n 's/^ucp_sgl_put: /    /p' "$log"
        return 0
    fi
    note "    FAILED (log: $log)"
    failure_excerpt "$log"
    return 1
}

# Elements per second of one dcx_sgl run; $1: extra environment (or "").
bench_sgl_one() {
    local env=$1; shift
    local out
    # shellcheck disable=SC2086
    out=$(env $env DCXEMU_FABRIC="$BENCH_FABRIC" UCX_TLS=dcx timeout 300 \
          "$DCX_PREFIX/bin/dcx-run" --emu "$DCX_BUILD/test/bench/dcx_sgl" "$@" 2>&1) ||
        { echo "$out" | tail -3 >&2; echo nan; return 0; }
    echo "$out" | sed -n 's/^elements_per_sec=\([0-9.]*\) .*/\1/p'
}

# One row: id, elements, size, layout, goal ("-": none).
bench_sgl_row() {
    local id=$1 n=$2 size=$3 layout=$4 goal=$5
    local iters=$(( n * size >= 32768 ? 500 : 2000 ))
    local s l o ratios_l=() ratios_o=() sv=() lv=() ov=() i sm lm om rl ro met
    for ((i = 0; i < BENCH_ROUNDS; ++i)); do
        s=$(bench_sgl_one "" sgl "$n" "$size" "$layout" "$iters")
        l=$(bench_sgl_one "" loop "$n" "$size" "$layout" "$iters")
        o=$(bench_sgl_one "UCX_DCX_UMR=no" sgl "$n" "$size" "$layout" "$iters")
        sv+=("$s"); lv+=("$l"); ov+=("$o")
        ratios_l+=("$(awk -v a="$s" -v b="$l" 'BEGIN { if (a > 0 && b > 0) printf "%.4f", a / b }')")
        ratios_o+=("$(awk -v a="$s" -v b="$o" 'BEGIN { if (a > 0 && b > 0) printf "%.4f", a / b }')")
    done
    sm=$(printf '%s\n' "${sv[@]}" | bench_median)
    lm=$(printf '%s\n' "${lv[@]}" | bench_median)
    om=$(printf '%s\n' "${ov[@]}" | bench_median)
    rl=$(printf '%s\n' "${ratios_l[@]}" | awk 'NF' | bench_median)
    ro=$(printf '%s\n' "${ratios_o[@]}" | awk 'NF' | bench_median)
    rl=$(awk -v r="$rl" 'BEGIN { if (r == "" || r == "nan") print "nan"; else printf "%.2f", r }')
    ro=$(awk -v r="$ro" 'BEGIN { if (r == "" || r == "nan") print "nan"; else printf "%.2f", r }')
    if [ "$goal" = - ]; then
        met=-
    else
        met=$(awk -v r="$rl" -v g="$goal" 'BEGIN { if (r == "nan") print "no data"; else print (r >= g) ? "met" : "missed" }')
    fi
    printf '  %-3s %5s x %-5s %-8s %12s %12s %12s %8s %8s   %-6s %s\n' "$id" "$n" "${size}B" \
        "$layout" "$sm" "$lm" "$om" "$rl" "$ro" "$([ "$goal" = - ] && echo - || echo ">=$goal")" "$met"
    echo "$id,$n,$size,$layout,$sm,$lm,$om,$rl,$ro,$goal,$met" >> "$BENCH_CSV"
}

bench_sgl() {
    local png="$DCX_TOP/bench-results/sgl.png"
    case "$(ucx_version)" in
    1.1[0-9].*|1.2[01].*) die "scatter-gather put comes with UCX 1.22: run 'contrib/dcx --ucx 1.22 bench sgl'" ;;
    esac
    say "bench sgl: ucp_put_nbx with an SGL over dcx, UCX $(ucx_version), device model, $BENCH_ROUNDS rounds"
    note "elements per second: SGL put, loop of contiguous puts, SGL without merging (UCX_DCX_UMR=no); ratios SGL/loop (goal), SGL/unmerged"
    echo "id,elements,size,layout,sgl,loop,sgl_unmerged,sgl_over_loop,sgl_over_unmerged,goal,result" > "$BENCH_CSV"
    printf '  %-3s %-15s %-8s %12s %12s %12s %8s %8s   %s\n' id pieces layout sgl loop unmerged sgl/loop sgl/unm goal
    bench_sgl_row G1 64 8 contig 3
    bench_sgl_row G2 64 512 contig -
    bench_sgl_row G3 1024 64 contig 3
    bench_sgl_row G4 64 8 scatter 1.5
    bench_sgl_row G5 64 512 scatter 1.5
    bench_sgl_row G6 1024 64 scatter 1.5
    if command -v gnuplot >/dev/null 2>&1; then
        gnuplot <<EOF || die "gnuplot failed"
set terminal png size 900,500
set output "$png"
set datafile separator ","
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "elements per second"
set logscale y
set key top right
set xtics rotate by -30
set title "dcx scatter-gather put (UCX $(ucx_version), device model)"
plot "$BENCH_CSV" every ::1 using 5:xtic(stringcolumn(2)."x".stringcolumn(3)."B ".stringcolumn(4)) title "SGL put", \
     "" every ::1 using 6 title "loop of puts", \
     "" every ::1 using 7 title "SGL put, no merging (UMR=no)"
EOF
        note "plot: $png"
    fi
}
