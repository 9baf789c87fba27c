# contrib/dcx.d/mlx5.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite mlx5: the device's mlx5 face (docs/mlx5-face.md), under programs
# nobody here wrote. The system's unmodified libibverbs and libmlx5 drive
# the device: ibv_devices and ibv_devinfo see it, ibv_rc_pingpong (with and
# without completion events) and perftest run RC and DC tests between two
# processes, UCX's own rc_mlx5 and dc_mlx5 run ucx_perftest, and dcx runs
# its hardware binding through rdma-core, writing its own WQEs and through
# rdma-core's builders (UCX_DCX_POST=direct, verbs). Every pair proves from the
# device's fabric counters (dcxemu-stat) that the device carried the
# traffic: the run fails if the counter it names stayed below what the run
# must have done.

SUITES_ALL+=(mlx5)

# mlx5_face_env: sets MLX5_ENV, the environment of one run on a fresh
# fabric (MLX5_FABRIC) that outlives its processes: its counters are read
# after them.
mlx5_face_env() {
    mlx5_runs=$((mlx5_runs + 1))
    MLX5_FABRIC="dcx-mlx5-$$-$mlx5_runs"
    MLX5_ENV=("DCXEMU_FABRIC=$MLX5_FABRIC" DCXEMU_KEEP_FABRIC=1
              "LD_PRELOAD=$DCX_PREFIX/lib/libdcxemu_mlx5.so.0")
}
mlx5_runs=0
MLX5_PAIR_LOG=
MLX5_FABRIC=
MLX5_ENV=()

# mlx5_counter NAME MIN: the fabric's counter NAME (summed over devices) is
# at least MIN; the fabric is removed either way.
mlx5_counter() {
    local name=$1 min=$2 line value
    line=$("$DCX_PREFIX/bin/dcxemu-stat" -c -f "$MLX5_FABRIC")
    value=$(fabric_counter_sum "$MLX5_FABRIC" "^$name\$")
    "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
    echo "device counters: $line"
    if [ "$value" -lt "$min" ]; then
        echo "the device's $name counter is $value, expected at least $min: it did not carry the traffic"
        return 1
    fi
}

# mlx5_pair COUNTER MIN -- SERVER... : a server and its client (the same
# command with "localhost" appended) on the face; both must exit 0, then
# the counter check. A client that came before its server listened (a
# loaded host) is tried again, twice at most, with a new server.
mlx5_pair() {
    local counter=$1 min=$2 log="$DCX_LOGS/mlx5-pair-$$-$RANDOM" spid rc src try
    shift 3
    MLX5_PAIR_LOG=$log # the logs of the last pair: $log.server, $log.client
    for try in 1 2 3; do
        mlx5_face_env
        env "${MLX5_ENV[@]}" timeout -k 5 120 "$@" > "$log.server" 2>&1 &
        spid=$!
        sleep $((try == 1 ? 1 : 3))
        rc=0 src=0
        env "${MLX5_ENV[@]}" timeout -k 5 100 "$@" localhost > "$log.client" 2>&1 || rc=$?
        if [ $rc -ne 0 ] && [ $try -lt 3 ] &&
           grep -Eq "Couldn't connect to|Unable to init the socket connection|connect\(.*\) failed|Connection refused" "$log.client"; then
            kill $spid 2>/dev/null
            wait $spid 2>/dev/null
            "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
            echo "try $try: the client came before its server listened; again"
            continue
        fi
        wait $spid || src=$?
        break
    done
    cat "$log.client"
    if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
        echo "client exit $rc, server exit $src; server said:"
        cat "$log.server"
        "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
        return 1
    fi
    mlx5_counter "$counter" "$min"
}

mlx5_devices() {
    local out
    mlx5_face_env
    out=$(env "${MLX5_ENV[@]}" ibv_devices) || { echo "$out"; return 1; }
    echo "$out"
    echo "$out" | grep -q 'dcxemu_mlx5_0' || {
        echo "ibv_devices does not list dcxemu_mlx5_0"; return 1; }
}

mlx5_devinfo() {
    local out want
    mlx5_face_env
    out=$(env "${MLX5_ENV[@]}" ibv_devinfo -v) || { echo "$out"; return 1; }
    echo "$out"
    "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
    for want in 'hca_id:[[:space:]]*dcxemu_mlx5_0' 'fw_ver:[[:space:]]*20\.31\.1014' \
                'vendor_id:[[:space:]]*0x02c9' 'board_id:[[:space:]]*DCXEMU' \
                'state:[[:space:]]*PORT_ACTIVE' 'link_layer:[[:space:]]*InfiniBand' \
                'port_lid:[[:space:]]*1$' 'GID\[  0\]:[[:space:]]*fe80:0000:0000:0000:0002:c903:00dc:0001'; do
        echo "$out" | grep -Eq "$want" || { echo "ibv_devinfo -v: no line matching '$want'"; return 1; }
    done
}

# perftest: -c DC, its own TCP exchange on a port of its own.
mlx5_perftest() {
    local counter=$1 min=$2 test=$3
    shift 3
    mlx5_pair "$counter" "$min" -- "$test" -d dcxemu_mlx5_0 -p $((20000 + RANDOM % 20000)) "$@"
}

# perftest's DC initiator with DCI streams (--log_dci_streams=3): libmlx5
# asks the face for a DCI with 8 streams (the face's trace says so) and
# every write goes out on one of them.
mlx5_perftest_streams() {
    local -x DCXEMU_MLX5_TRACE=1
    mlx5_perftest write 1000 ib_write_bw -c DC -n 1000 -s 65536 --log_dci_streams=3 || return 1
    grep -q 'CREATE_QP: a DCI with 8 streams' "$MLX5_PAIR_LOG.client" ||
        { echo "the face's trace shows no DCI with streams"; return 1; }
}

# ucx_perftest over a UCX transport on the face. UCX's own mlx5 transports
# run without DEVX objects (UCX_IB_MLX5_DEVX=n): the face creates QPs
# through the verbs commands libmlx5 sends.
mlx5_ucx_perftest() {
    local counter=$1 min=$2 tl=$3
    shift 3
    local -a pre=()
    local -x UCX_IB_MLX5_DEVX=n
    # dcx both ways: writing its own WQEs (dcx), through rdma-core's
    # builders (dcx-verbs); direct fails the interface where unavailable
    case "$tl" in
    dcx)       local -x UCX_DCX_POST=direct ;;
    dcx-verbs) local -x UCX_DCX_POST=verbs; tl=dcx ;;
    esac
    if [ "$tl" = dcx ]; then
        pre=(env "LD_PRELOAD=$DCX_PREFIX/lib/ucx/libuct_dcx.so:$DCX_PREFIX/lib/libdcxemu_mlx5.so.0")
    fi
    mlx5_pair "$counter" "$min" -- "${pre[@]}" \
        ucx_perftest "${PERFTEST_OPTS[@]}" -x "$tl" -d dcxemu_mlx5_0:1 \
        -p $((20000 + RANDOM % 20000)) "$@"
}

# DEVX through the ioctl framing (QUERY_HCA_CAP, mkeys) and UMR, through
# real libmlx5 (test/mlx5/face_devx.c).
mlx5_devx() {
    mlx5_face_env
    env "${MLX5_ENV[@]}" "$DCX_BUILD/test/mlx5/face_devx" || return 1
    mlx5_counter umr 2
}

# The halo exchange: strided columns into remote strided views through
# UMR, dcx on its hardware binding (4 processes).
mlx5_halo() {
    local log="$DCX_LOGS/mlx5-halo.log"
    mlx5_face_env
    DCX_DEMO_DEVICE=dcxemu_mlx5_0 timeout -k 10 120 env "${MLX5_ENV[@]}" \
        "LD_PRELOAD=$DCX_PREFIX/lib/ucx/libuct_dcx.so:$DCX_PREFIX/lib/libdcxemu_mlx5.so.0" \
        "$DCX_BUILD/test/demo/dcx_halo" 4 10 > "$log" 2>&1 || { cat "$log"; return 1; }
    cat "$log"
    grep -q '^dcx_halo: PASS (4 ranks' "$log" || return 1
    mlx5_counter umr 4
}

# The face looks for the UAR pages an application mapped (a scan of the
# process's mappings) only before a command that makes something that
# rings them: ibv_rc_pingpong's one CQ and one QP take 2 scans of its
# commands, and its doorbells are still trapped.
mlx5_uar_scans() {
    local log="$DCX_LOGS/mlx5-uar-scans" port=$((20000 + RANDOM % 20000)) spid rc=0 line
    mlx5_face_env
    env "${MLX5_ENV[@]}" timeout -k 5 60 ibv_rc_pingpong -d dcxemu_mlx5_0 -g 0 -n 50 -p $port \
        > "$log.server" 2>&1 &
    spid=$!
    wait_listening $port $spid || { cat "$log.server"; return 1; }
    env "${MLX5_ENV[@]}" DCXEMU_MLX5_STATS=1 timeout -k 5 60 ibv_rc_pingpong -d dcxemu_mlx5_0 \
        -g 0 -n 50 -p $port localhost > "$log.client" 2>&1 || rc=$?
    wait $spid || rc=1
    "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
    cat "$log.client"
    [ $rc -eq 0 ] || { cat "$log.server"; return 1; }
    line=$(grep 'dcxemu-mlx5.*send doorbells' "$log.client") || { echo "no statistics line"; return 1; }
    echo "$line" | grep -Eq 'send doorbells [1-9]' || { echo "no doorbell was trapped"; return 1; }
    echo "$line" | grep -q 'mappings scanned 2 times' ||
        { echo "expected 2 scans of the mappings (one CQ, one QP)"; return 1; }
}

suite_mlx5() {
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null || die "building the tests failed"
    run_gtest mlx5 "$DCX_BUILD/test/gtest/mlx5/dcxemu_mlx5_gtest"
    # through real rdma-core: control path, golden WQEs, data and errors,
    # events, and the same scenario through both faces
    run_gtest mlx5face "$DCX_BUILD/test/gtest/mlx5face/dcxemu_mlx5face_gtest"
    # again with BlueFlame: libmlx5 copies its single inline WQEs into the
    # registers, the face checks each copy and the halves
    DCXEMU_MLX5_BF=1 run_gtest mlx5face-blueflame \
        "$DCX_BUILD/test/gtest/mlx5face/dcxemu_mlx5face_gtest"
    check mlx5-ibv_devices mlx5_devices
    check mlx5-ibv_devinfo mlx5_devinfo
    check mlx5-uar-scans mlx5_uar_scans
    check mlx5-devx-umr mlx5_devx
    check mlx5-dcx-halo mlx5_halo
    local n=2000
    check mlx5-rc_pingpong          mlx5_pair recv_cqes 1000 -- ibv_rc_pingpong -d dcxemu_mlx5_0 -g 0 -n 500 -p $((20000 + RANDOM % 20000))
    check mlx5-rc_pingpong-events   mlx5_pair recv_cqes 1000 -- ibv_rc_pingpong -d dcxemu_mlx5_0 -g 0 -n 500 -e -p $((20000 + RANDOM % 20000))
    check mlx5-perftest-rc-send_lat   mlx5_perftest recv_cqes $((2 * 1000)) ib_send_lat -c RC -n 1000
    check mlx5-perftest-rc-write_lat  mlx5_perftest write $((2 * n)) ib_write_lat -c RC -n $n
    check mlx5-perftest-rc-read_lat   mlx5_perftest read $n ib_read_lat -c RC -n $n
    check mlx5-perftest-rc-atomic_lat mlx5_perftest atomic_fa $n ib_atomic_lat -c RC -n $n
    check mlx5-perftest-rc-write_bw   mlx5_perftest write 1000 ib_write_bw -c RC -n 1000 -s 1048576
    check mlx5-perftest-dc-write_lat  mlx5_perftest write $((2 * n)) ib_write_lat -c DC -n $n
    check mlx5-perftest-dc-write_bw   mlx5_perftest write 1000 ib_write_bw -c DC -n 1000 -s 1048576
    check mlx5-perftest-dc-write_bw-streams mlx5_perftest_streams
    check mlx5-perftest-dc-read_lat   mlx5_perftest read $n ib_read_lat -c DC -n $n
    check mlx5-perftest-dc-send_lat   mlx5_perftest recv_cqes $((2 * 1000)) ib_send_lat -c DC -n 1000
    check mlx5-perftest-dc-atomic_lat mlx5_perftest atomic_fa $n ib_atomic_lat -c DC -n $n
    check mlx5-ucx-dc_mlx5-put_lat mlx5_ucx_perftest write $n dc_mlx5 -t put_lat -n $n -w 100
    check mlx5-ucx-dc_mlx5-am_lat  mlx5_ucx_perftest recv_cqes 1000 dc_mlx5 -t am_lat -n 500 -w 50
    check mlx5-ucx-dc_mlx5-put_bw  mlx5_ucx_perftest write 500 dc_mlx5 -t put_bw -D zcopy -s 65536 -n 500 -w 10
    check mlx5-ucx-rc_mlx5-put_lat mlx5_ucx_perftest write $n rc_mlx5 -t put_lat -n $n -w 100
    check mlx5-ucx-rc_mlx5-am_lat  mlx5_ucx_perftest recv_cqes 1000 rc_mlx5 -t am_lat -n 500 -w 50
    check mlx5-ucx-rc_mlx5-put_bw  mlx5_ucx_perftest write 500 rc_mlx5 -t put_bw -D zcopy -s 65536 -n 500 -w 10
    check mlx5-ucx-dcx-put_lat     mlx5_ucx_perftest write $n dcx -t put_lat -n $n -w 100
    check mlx5-ucx-dcx-am_lat      mlx5_ucx_perftest recv_cqes 1000 dcx -t am_lat -n 500 -w 50
    check mlx5-ucx-dcx-put_bw      mlx5_ucx_perftest write 500 dcx -t put_bw -D zcopy -s 65536 -n 500 -w 10
    check mlx5-ucx-dcx-verbs-put_lat mlx5_ucx_perftest write $n dcx-verbs -t put_lat -n $n -w 100
    check mlx5-ucx-dcx-verbs-am_lat  mlx5_ucx_perftest recv_cqes 1000 dcx-verbs -t am_lat -n 500 -w 50
    check mlx5-ucx-dcx-verbs-put_bw  mlx5_ucx_perftest write 500 dcx-verbs -t put_bw -D zcopy -s 65536 -n 500 -w 10
}
