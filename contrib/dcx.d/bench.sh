# contrib/dcx bench: performance as ratios measured side by side in one run.
# Sourced by contrib/dcx.

BENCH_ROUNDS=${DCX_BENCH_ROUNDS:-5}

# Median of the numbers on stdin.
bench_median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'
}

# ucx_perftest pair; prints one figure of the client's final line:
# lat = typical latency (us), bw = average bandwidth (MB/s), mr = overall
# message rate (messages/s).
bench_perftest() {
    local field=$1 tl=$2 dev=$3; shift 3
    local port=$((20000 + (RANDOM % 20000))) spid line
    local run=("$DCX_PREFIX/bin/dcx-run" --emu)
    DCXEMU_FABRIC="$BENCH_FABRIC" "${run[@]}" \
        ucx_perftest -x "$tl" -d "$dev" -p $port >/dev/null 2>&1 &
    spid=$!
    wait_listening $port $spid >/dev/null || { kill $spid 2>/dev/null; wait $spid 2>/dev/null; echo nan; return 1; }
    line=$(DCXEMU_FABRIC="$BENCH_FABRIC" timeout 300 "${run[@]}" \
           ucx_perftest -x "$tl" -d "$dev" -p $port "$@" localhost 2>/dev/null |
           grep '^Final:')
    wait $spid 2>/dev/null
    [ -n "$line" ] || { echo nan; return 1; }
    # Final: iters typical avg overall | bw avg overall | msg avg overall
    echo "$line" | awk -v f="$field" '{ print (f == "lat") ? $3 : (f == "mr") ? $9 : $6 }'
}

bench_floor() {
    DCXEMU_FABRIC="$BENCH_FABRIC" timeout 300 \
        "$DCX_BUILD/test/bench/dcx_floor" "$@" | awk '{ print $(NF-1) }'
}

# One row: name, goal text, ratio direction (le|ge), goal value, then the
# two measurement commands (dcx first).
bench_row() {
    local name=$1 what=$2 dir=$3 goal=$4 dcx_cmd=$5 ref_cmd=$6
    local dcx_vals=() ref_vals=() ratios=() i dcx ref ratio met d r
    # Each round measures dcx and its reference back to back; the ratio is
    # the median of the rounds' ratios, so load that drifts between rounds
    # (a shared host) moves both sides of a ratio together.
    for ((i = 0; i < BENCH_ROUNDS; ++i)); do
        d=$(eval "$dcx_cmd")
        r=$(eval "$ref_cmd")
        dcx_vals+=("$d")
        ref_vals+=("$r")
        ratios+=("$(awk -v a="$d" -v b="$r" 'BEGIN { if (a > 0 && b > 0) printf "%.4f", a / b }')")
    done
    dcx=$(printf '%s\n' "${dcx_vals[@]}" | bench_median)
    ref=$(printf '%s\n' "${ref_vals[@]}" | bench_median)
    ratio=$(printf '%s\n' "${ratios[@]}" | awk 'NF' | bench_median)
    ratio=$(awk -v r="$ratio" 'BEGIN { if (r == "" || r == "nan") print "nan"; else printf "%.3f", r }')
    met=$(awk -v r="$ratio" -v g="$goal" -v d="$dir" 'BEGIN {
        if (r == "nan") print "no data"; else if ((d == "le" && r <= g) || (d == "ge" && r >= g)) print "met"; else print "missed" }')
    printf '  %-4s %-44s %10s %10s %7s  goal %s %-5s %s\n' "$name" "$what" "$dcx" "$ref" "$ratio" \
        "$([ "$dir" = le ] && echo '<=' || echo '>=')" "$goal" "$met"
    echo "$name,$what,$dcx,$ref,$ratio,$dir,$goal,$met" >> "$BENCH_CSV"
}

bench_uct() {
    say "bench uct: dcx against the device floor and UCX's cma, $BENCH_ROUNDS rounds: median values, median of the per-round ratios"
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
    # Completion moderation must not cost message rate: the same
    # stream with the default and with every request signaled.
    bench_row P4 "put_bw 8 B msg rate: moderation 64 / off" ge 0.97 \
        "bench_perftest mr dcx dcxemu0:1 -t put_bw -s 8 -n 200000 -w 20000" \
        "UCX_DCX_TX_CQ_MODERATION=1 bench_perftest mr dcx dcxemu0:1 -t put_bw -s 8 -n 200000 -w 20000"
    bench_row P5 "am_bw 8 B msg rate: moderation 64 / off" ge 0.97 \
        "bench_perftest mr dcx dcxemu0:1 -t am_bw -s 8 -n 200000 -w 20000" \
        "UCX_DCX_TX_CQ_MODERATION=1 bench_perftest mr dcx dcxemu0:1 -t am_bw -s 8 -n 200000 -w 20000"
}

# --- bench uct mlx5: dcx next to UCX's dc_mlx5 and rc_mlx5 ---------------
#
# ucx_perftest over each transport on the device's mlx5 face (the system's
# libibverbs and libmlx5 beneath dcx and beneath UCX's own transports).
# Each round measures every transport back to back; a column's value is
# the median of its rounds, a ratio the median of the per-round ratios.
# The figures are the face's (a doorbell is a trapped store), not a NIC's:
# what they compare is the transports on one device.

# The transports measured, dcx first; an entry may carry settings after a
# colon (bench_face_ucx), e.g. DCX_BENCH_FACE_TLS="dcx dcx:UCX_DCX_TX_CQ_MODERATION=1 dc_mlx5".
# By default dcx both ways, writing its own WQEs and through rdma-core's
# builders, next to UCX's dc_mlx5 and rc_mlx5.
read -r -a BENCH_FACE_TLS <<< "${DCX_BENCH_FACE_TLS:-dcx:UCX_DCX_POST=direct dcx:UCX_DCX_POST=verbs dc_mlx5 rc_mlx5}"

# A transport's column label: dcx's two post paths by name (dcx_direct,
# dcx_verbs), any other entry as it is.
bench_face_label() {
    case "$1" in
    dcx:UCX_DCX_POST=direct) echo dcx_direct ;;
    dcx:UCX_DCX_POST=verbs)  echo dcx_verbs ;;
    *)                       echo "$1" ;;
    esac
}

# One row: id, what, field, then ucx_perftest's arguments.
bench_face_row() {
    local id=$1 what=$2 field=$3 i tl v base ratios=() line
    shift 3
    local -A vals=() rat=()
    for ((i = 0; i < BENCH_ROUNDS; ++i)); do
        base=
        for tl in "${BENCH_FACE_TLS[@]}"; do
            v=$(bench_face_ucx "$field" "$tl" "$@") || v=nan
            vals[$tl]+="$v "
            [ -n "$base" ] || { base=$v; continue; }
            rat[$tl]+="$(awk -v a="$base" -v b="$v" 'BEGIN { if (a > 0 && b > 0) printf "%.4f", a / b; else print "nan" }') "
        done
    done
    line=$(printf '  %-4s %-34s' "$id" "$what")
    local csv="$id,$what"
    for tl in "${BENCH_FACE_TLS[@]}"; do
        v=$(printf '%s\n' ${vals[$tl]} | grep -v nan | bench_median)
        line+=$(printf ' %12s' "$v")
        csv+=",$v"
    done
    for tl in "${BENCH_FACE_TLS[@]:1}"; do
        v=$(printf '%s\n' ${rat[$tl]} | grep -v nan | bench_median)
        v=$(awk -v r="$v" 'BEGIN { if (r == "" || r == "nan") print "nan"; else printf "%.2f", r }')
        line+=$(printf ' %10s' "$v")
        csv+=",$v"
    done
    echo "$line"
    echo "$csv" >> "$BENCH_CSV"
}

bench_uct_mlx5() {
    local tl head csv="id,measure" first=${BENCH_FACE_TLS[0]}
    BENCH_PERFTEST_OPTS=""
    if ucx_perftest -h 2>&1 | grep -q -- '-P <'; then
        BENCH_PERFTEST_OPTS="-P 0"
    fi
    local label first_label
    first_label=$(bench_face_label "$first")
    say "bench uct mlx5: ${BENCH_FACE_TLS[*]} on the device's mlx5 face (dcxemu_mlx5_0:1), $BENCH_ROUNDS rounds"
    note "the system's libibverbs/libmlx5 beneath every transport (UCX's with UCX_IB_MLX5_DEVX=n); face figures, not a NIC's"
    note "dcx_direct: dcx writing its own WQEs (UCX_DCX_POST=direct); dcx_verbs: through rdma-core's builders (verbs)"
    note "median values; ratios: $first_label / each other transport (median of the per-round ratios; latency: lower is"
    note "better for $first_label below 1, rates and bandwidth: higher is better for $first_label above 1)"
    head=$(printf '  %-4s %-34s' id measure)
    for tl in "${BENCH_FACE_TLS[@]}"; do
        label=$(bench_face_label "$tl")
        head+=$(printf ' %12s' "${label:0:12}")
        csv+=",$label"
    done
    for tl in "${BENCH_FACE_TLS[@]:1}"; do
        label=$(bench_face_label "$tl")
        head+=$(printf ' %10s' "/${label:0:9}")
        csv+=",ratio_$label"
    done
    echo "$head"
    echo "$csv" > "$BENCH_CSV"
    bench_face_row M1 "put_lat 8 B (us)"            lat -t put_lat -s 8 -n 20000 -w 2000
    bench_face_row M2 "am_lat 8 B (us)"             lat -t am_lat -s 8 -n 20000 -w 2000
    bench_face_row M3 "put_bw 8 B (msg/s)"          mr  -t put_bw -s 8 -n 100000 -w 10000
    bench_face_row M4 "am_bw 8 B (msg/s)"           mr  -t am_bw -s 8 -n 100000 -w 10000
    bench_face_row M5 "put_bw 64 KiB zcopy (MB/s)"  bw  -t put_bw -D zcopy -s 65536 -n 5000 -w 500
    bench_face_row M6 "get 64 KiB zcopy (MB/s)"     bw  -t get -D zcopy -s 65536 -n 5000 -w 500
}

# The device floor: dcx_floor by test and size; one number.
bench_floor_one() {
    local test=$1 size=$2 n=$3
    DCXEMU_FABRIC="$BENCH_FABRIC" timeout 300 \
        "$DCX_BUILD/test/bench/dcx_floor" -t "$test" -s "$size" -n "$n" \
        -w $(( n / 10 + 1 )) | awk '{ print $(NF-1) }'
}

# Iterations that keep each measurement near a tenth of a second.
bench_emu_iters() {
    local size=$1 kind=$2
    if [ "$kind" = lat ]; then
        [ "$size" -le 8192 ] && echo 5000 || echo 500
    else
        echo $(( (64 << 20) / size > 20000 ? 20000 : ((64 << 20) / size < 50 ? 50 : (64 << 20) / size) ))
    fi
}

bench_emu() {
    local sizes=(8 64 1024 8192 65536 1048576) size test v n
    local lat_tests=(write_lat send_lat read_lat) bw_tests=(write_bw send_bw read_bw memcpy_bw)
    local cma_lat cma_bw w_lat w_bw
    say "bench emu: the device model's floor between two processes, with memcpy and UCX's cma"
    note "latency: median of half a ping-pong (read: one round trip), us; bandwidth: 32 in flight, MB/s"
    note "memcpy: one process, 256 MiB walked so large copies miss the caches"
    echo "kind,test,size,value,unit" > "$BENCH_CSV"
    printf '  %8s' size
    for test in "${lat_tests[@]}" "${bw_tests[@]}"; do printf ' %11s' "$test"; done
    printf '\n'
    for size in "${sizes[@]}"; do
        printf '  %8s' "$size"
        for test in "${lat_tests[@]}"; do
            n=$(bench_emu_iters "$size" lat)
            v=$(bench_floor_one "$test" "$size" "$n") || v=nan
            printf ' %11s' "$v"
            echo "floor,$test,$size,$v,us" >> "$BENCH_CSV"
            [ "$test" = write_lat ] && [ "$size" = 8 ] && w_lat=$v
        done
        for test in "${bw_tests[@]}"; do
            n=$(bench_emu_iters "$size" bw)
            v=$(bench_floor_one "$test" "$size" "$n") || v=nan
            printf ' %11s' "$v"
            echo "floor,$test,$size,$v,MB/s" >> "$BENCH_CSV"
            [ "$test" = write_bw ] && [ "$size" = 1048576 ] && w_bw=$v
        done
        printf '\n'
    done

    note "UCX's cma transport on this host (ucx_perftest -x cma -D zcopy), same run:"
    cma_lat=$(bench_perftest lat cma memory -t put_lat -D zcopy -s 8 -n 20000 -w 2000) || cma_lat=nan
    cma_bw=$(bench_perftest bw cma memory -t put_bw -D zcopy -s 1048576 -n 1000 -w 50) || cma_bw=nan
    echo "cma,put_lat,8,$cma_lat,us" >> "$BENCH_CSV"
    echo "cma,put_bw,1048576,$cma_bw,MB/s" >> "$BENCH_CSV"
    printf '  %-4s %-44s %10s %10s %7s\n' id measure model cma ratio
    bench_goal F1 "8 B WRITE latency (us): model / cma put_lat" le 2.0 "$w_lat" "$cma_lat"
    bench_goal F2 "1 MiB WRITE bandwidth (MB/s): model / cma put_bw" ge 0.9 "$w_bw" "$cma_bw"
    bench_emu_faces "$w_lat" "$w_bw" "$cma_lat" "$cma_bw"
}

# One perftest pair on the device's mlx5 face (the system's rdma-core);
# prints lat: the typical latency (us), bw: the average bandwidth (MB/s).
bench_face_perftest() {
    local field=$1 test=$2 port=$((20000 + (RANDOM % 20000))) spid line
    shift 2
    local -a env=("DCXEMU_FABRIC=$BENCH_FABRIC-face"
                  "LD_PRELOAD=$DCX_PREFIX/lib/libdcxemu_mlx5.so.0")
    env "${env[@]}" timeout 300 "$test" -d dcxemu_mlx5_0 -p $port "$@" >/dev/null 2>&1 &
    spid=$!
    wait_listening $port $spid >/dev/null || { kill $spid 2>/dev/null; wait $spid 2>/dev/null; echo nan; return 1; }
    line=$(env "${env[@]}" timeout 300 "$test" -d dcxemu_mlx5_0 -p $port "$@" localhost 2>/dev/null |
           awk '$1 ~ /^[0-9]+$/ && NF >= 4 { l = $0 } END { print l }')
    wait $spid 2>/dev/null
    [ -n "$line" ] || { echo nan; return 1; }
    # latency: bytes iters min max typical ...; bandwidth: bytes iters peak average ...
    echo "$line" | awk -v f="$field" '{ print (f == "lat") ? $5 : $4 }'
}

# ucx_perftest on the mlx5 face: FIELD (lat: typical latency in us, bw:
# average bandwidth in MB/s, mr: overall message rate) of TL's run with the
# remaining arguments. TL may carry settings after a colon
# ("dcx:UCX_DCX_TX_CQ_MODERATION=1"), given to both sides.
bench_face_ucx() {
    local field=$1 spec=$2 port=$((20000 + (RANDOM % 20000))) spid line
    shift 2
    local tl=${spec%%:*} settings= settings_arr=()
    [ "$spec" = "$tl" ] || settings=${spec#*:}
    local pre="$DCX_PREFIX/lib/libdcxemu_mlx5.so.0"
    [ "$tl" = dcx ] && pre="$DCX_PREFIX/lib/ucx/libuct_dcx.so:$pre"
    local -a env=("DCXEMU_FABRIC=$BENCH_FABRIC-face" "LD_PRELOAD=$pre" UCX_IB_MLX5_DEVX=n)
    [ -z "$settings" ] || read -r -a settings_arr <<< "${settings//,/ }"
    [ -z "$settings" ] || env+=("${settings_arr[@]}")
    env "${env[@]}" ucx_perftest $BENCH_PERFTEST_OPTS -x "$tl" -d dcxemu_mlx5_0:1 -p $port \
        >/dev/null 2>&1 &
    spid=$!
    wait_listening $port $spid >/dev/null || { kill $spid 2>/dev/null; wait $spid 2>/dev/null; echo nan; return 1; }
    line=$(env "${env[@]}" timeout 300 ucx_perftest $BENCH_PERFTEST_OPTS -x "$tl" \
           -d dcxemu_mlx5_0:1 -p $port "$@" localhost 2>/dev/null | grep '^Final:')
    wait $spid 2>/dev/null
    [ -n "$line" ] || { echo nan; return 1; }
    # Final: iters typical avg overall | bw avg overall | msg avg overall
    echo "$line" | awk -v f="$field" '{ print (f == "lat") ? $3 : (f == "mr") ? $9 : $6 }'
}

# The mlx5 face next to the API face and cma: the doorbell's cost (a trapped
# store, docs/mlx5-face.md), 8 B writes and 1 MiB writes through the
# system's libibverbs/libmlx5, and put_lat of dcx on both faces and of
# UCX's dc_mlx5 on the mlx5 face.
bench_emu_faces() {
    local api_lat=$1 api_bw=$2 cma_lat=$3 cma_bw=$4 db face_lat face_bw
    local dcx_api dcx_face dc_mlx5
    BENCH_PERFTEST_OPTS=""
    if ucx_perftest -h 2>&1 | grep -q -- '-P <'; then
        BENCH_PERFTEST_OPTS="-P 0"
    fi
    note "the mlx5 face (the system's libibverbs/libmlx5; a doorbell is a trapped store), same run:"
    db=$("$DCX_BUILD/test/gtest/mlx5/dcxemu_mlx5_gtest" --gtest_filter=Trap.Cost 2>/dev/null |
         sed -n 's/^cost per trapped store: \([0-9.]*\) us.*/\1/p')
    face_lat=$(bench_face_perftest lat ib_write_lat -c DC -s 8 -n 5000) || face_lat=nan
    face_bw=$(bench_face_perftest bw ib_write_bw -c DC -s 1048576 -n 1000) || face_bw=nan
    dcx_api=$(bench_perftest lat dcx dcxemu0:1 -t put_lat -s 8 -n 20000 -w 2000) || dcx_api=nan
    dcx_face=$(bench_face_ucx lat dcx -t put_lat -s 8 -n 20000 -w 2000) || dcx_face=nan
    dc_mlx5=$(bench_face_ucx lat dc_mlx5 -t put_lat -s 8 -n 20000 -w 2000) || dc_mlx5=nan
    printf '  %-52s %10s %10s %10s\n' measure "API face" "mlx5 face" cma
    printf '  %-52s %10s %10s %10s\n' "doorbell (us)" "call" "${db:-nan}" -
    printf '  %-52s %10s %10s %10s\n' "8 B WRITE latency (us; floor / ib_write_lat -c DC)" \
        "$api_lat" "$face_lat" "$cma_lat"
    printf '  %-52s %10s %10s %10s\n' "1 MiB WRITE bandwidth (MB/s; floor / ib_write_bw -c DC)" \
        "$api_bw" "$face_bw" "$cma_bw"
    printf '  %-52s %10s %10s %10s\n' "dcx put_lat 8 B (us, ucx_perftest)" "$dcx_api" "$dcx_face" -
    printf '  %-52s %10s %10s %10s\n' "dc_mlx5 put_lat 8 B (us, ucx_perftest)" - "$dc_mlx5" -
    {
        echo "face,doorbell,8,${db:-nan},us"
        echo "face,write_lat,8,$face_lat,us"
        echo "face,write_bw,1048576,$face_bw,MB/s"
        echo "face,dcx_put_lat_api,8,$dcx_api,us"
        echo "face,dcx_put_lat_mlx5,8,$dcx_face,us"
        echo "face,dc_mlx5_put_lat,8,$dc_mlx5,us"
    } >> "$BENCH_CSV"
}

# A goal line from two numbers measured above.
bench_goal() {
    local name=$1 what=$2 dir=$3 goal=$4 a=$5 b=$6 ratio met
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
    met=$(awk -v r="$ratio" -v g="$goal" -v d="$dir" 'BEGIN {
        if (r == "nan") print "no data"; else if ((d == "le" && r <= g) || (d == "ge" && r >= g)) print "met"; else print "missed" }')
    printf '  %-4s %-44s %10s %10s %7s  goal %s %-5s %s\n' "$name" "$what" "$a" "$b" "$ratio" \
        "$([ "$dir" = le ] && echo '<=' || echo '>=')" "$goal" "$met"
    echo "goal,$name,$what,$ratio,$dir $goal $met" >> "$BENCH_CSV"
}

# The protocols UCP (protocols v2, UCX >= 1.16) picks over dcx, as
# UCX_PROTO_INFO prints them: tag, RMA put and get, active messages.
bench_proto_one() {
    local port=$((20000 + (RANDOM % 20000))) spid rc=0 out
    DCXEMU_FABRIC="$BENCH_FABRIC" UCX_TLS=dcx "$DCX_PREFIX/bin/dcx-run" --emu \
        ucx_perftest $BENCH_PERFTEST_OPTS -p $port >/dev/null 2>&1 &
    spid=$!
    wait_listening $port $spid >&2 || { kill $spid 2>/dev/null; wait $spid 2>/dev/null; return 1; }
    out=$(DCXEMU_FABRIC="$BENCH_FABRIC" UCX_TLS=dcx UCX_PROTO_INFO=y timeout 120 \
          "$DCX_PREFIX/bin/dcx-run" --emu ucx_perftest $BENCH_PERFTEST_OPTS -p $port \
          "$@" -n 20 -w 2 localhost 2>&1) || rc=$?
    wait $spid || rc=$?
    [ $rc -eq 0 ] || { echo "$out" | tail -5 >&2; return 1; }
    # the table rows of UCX's log lines, without timestamp and host
    echo "$out" | sed -n 's/^\[[^]]*\] \[[^]]*\] *\(|.*\)$/\1/p'
}

bench_proto() {
    local out="$DCX_TOP/bench-results/proto-ucx$(ucx_version).txt" t
    case "$(ucx_version)" in
    1.1[0-5].*) die "UCP selects protocols this way (protocols v2) from UCX 1.16 on: run 'contrib/dcx bench --ucx 1.18 proto' or '--ucx 1.22'" ;;
    esac
    # Debian 13's ucx_perftest enters MPI mode when stdin is no terminal.
    BENCH_PERFTEST_OPTS=""
    if ucx_perftest -h 2>&1 | grep -q -- '-P <'; then
        BENCH_PERFTEST_OPTS="-P 0"
    fi
    say "bench proto: UCP's protocol choices over dcx, UCX $(ucx_version), device model"
    : > "$out"
    for t in "tag_bw -s 1048576" "ucp_put_bw -s 1048576" "ucp_get -s 1048576" \
             "ucp_am_bw -s 1048576"; do
        echo "ucx_perftest -t $t" | tee -a "$out"
        # shellcheck disable=SC2086
        bench_proto_one -t $t | tee -a "$out" || die "ucx_perftest -t $t failed"
    done
    note "saved $out"
}

cmd_bench() {
    local what=${1:-uct}
    cmd_build
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null || die "building the benchmarks failed"
    mkdir -p "$DCX_TOP/bench-results"
    BENCH_FABRIC="dcx-bench-$$"
    if [ "$what" = proto ]; then
        bench_proto
        return
    fi
    BENCH_CSV="$DCX_TOP/bench-results/$what.csv"
    if [ "$what" = cost ] && [ -n "${2:-}" ]; then
        BENCH_CSV="$DCX_TOP/bench-results/cost-$2.csv" # bench cost mlx5
    fi
    echo "id,measure,dcx,reference,ratio,direction,goal,result" > "$BENCH_CSV"
    case "$what" in
    uct)
        case "${2:-api}" in
        api)  bench_uct ;;
        mlx5) BENCH_CSV="$DCX_TOP/bench-results/uct-mlx5.csv"; bench_uct_mlx5 ;;
        *)    die "unknown face '$2' for bench uct (faces: api mlx5)" ;;
        esac ;;
    umr) bench_umr ;;
    emu) bench_emu ;;
    cost) bench_cost "${@:2}" ;;
    sgl) bench_sgl ;;
    policies) bench_policies ;;
    *)   die "unknown benchmark '$what' (benchmarks: uct umr emu cost sgl policies proto)" ;;
    esac
    note "saved $BENCH_CSV"
}
