# contrib/dcx.d/ucp.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# dcx under its real users (UCP, Open MPI, OpenSHMEM):
#   suite ucp        googletest at UCP level: UCP over UCX_TLS=dcx between
#                    processes on the device model
#   suite e2e-users  UCP ucx_perftest, an MPI program under mpirun -np 4 and an
#                    OpenSHMEM program under oshrun -np 4, all over dcx, each
#                    run proving that dcx carried the traffic
# and the MPI / OpenSHMEM part of the demo (demo_users, called by cmd_demo).

SUITES_ALL+=(ucp e2e-users)

E2E_NP=${DCX_E2E_NP:-4}
E2E_TIMEOUT=${DCX_E2E_TIMEOUT:-180}

suite_ucp() {
    build_tests
    dcx_suite ucp
}

# Build the MPI and OpenSHMEM programs (C, warnings as errors) into the
# build tree when their source is newer.
e2e_users_build() {
    local dir="$DCX_BUILD/test/e2e" flags="-std=gnu11 -Wall -Wextra -Werror -O2"
    mkdir -p "$dir"
    command -v mpicc >/dev/null && command -v oshcc >/dev/null ||
        die "mpicc/oshcc not found (Open MPI: run contrib/dcx setup)"
    if [ ! -x "$dir/mpi_check" ] || [ "$DCX_TOP/test/e2e/mpi_check.c" -nt "$dir/mpi_check" ]; then
        mpicc $flags -o "$dir/mpi_check" "$DCX_TOP/test/e2e/mpi_check.c" ||
            die "building test/e2e/mpi_check.c failed"
    fi
    if [ ! -x "$dir/shmem_check" ] || [ "$DCX_TOP/test/e2e/shmem_check.c" -nt "$dir/shmem_check" ]; then
        oshcc $flags -o "$dir/shmem_check" "$DCX_TOP/test/e2e/shmem_check.c" ||
            die "building test/e2e/shmem_check.c failed"
    fi
}

# Proof that dcx carried the traffic. UCP logs the transport of every lane
# it selects: at UCX_LOG_LEVEL=info each endpoint configuration (UCX 1.13:
# "ep_cfg[N]: tag(dcx/dcxemu0:1)"; from 1.16 on: "ucp_context_0 intra-node
# cfg#N tag(dcx/dcxemu0:1)"; not printed for atomics-only endpoints in 1.13),
# at debug each lane ("lane[0]:  0:dcx/dcxemu0:1.0 md[0] ... amo#0").
# Passes when LOG shows dcx lanes on the device of this run's face
# (FACE_DEV) in at least NPROC distinct processes and no lane of another
# transport than dcx and self.
DCX_CFG_LINE='UCX +INFO +(ep_cfg\[[0-9]+\]:|[a-z_0-9]+ [a-z-]+ cfg#[0-9]+ )'
DCX_LANE_LINE='UCX +DEBUG +ep 0x[0-9a-f]+: lane\[[0-9]+\]:'
dcx_carried() {
    local log=$1 nproc=$2 procs others
    procs=$(grep -E "($DCX_CFG_LINE|$DCX_LANE_LINE).*dcx/$FACE_DEV:1" "$log" |
            sed -n 's/^\[[0-9.]*\] \[[^:]*:\([0-9]*\) *:.*/\1/p' | sort -u | wc -l)
    others=$( { grep -E "$DCX_CFG_LINE" "$log" |
                sed -E 's/.*(ep_cfg\[[0-9]*\]:|cfg#[0-9]* )//' | grep -oE '[a-z_0-9]+/[A-Za-z0-9_:.-]+' || true
                grep -E "$DCX_LANE_LINE" "$log" |
                sed 's/.*lane\[[0-9]*\]: *[0-9]*:\([^ ]*\)\.[0-9]* .*/\1/' || true; } |
             grep -vE "^(dcx/$FACE_DEV:1|self/memory0?)\$" | sort -u | tr '\n' ' ')
    if [ "$procs" -lt "$nproc" ]; then
        echo "dcx lanes on $FACE_DEV in $procs process(es), expected $nproc"
        return 1
    fi
    if [ -n "$others" ]; then
        echo "lanes of other transports: $others"
        return 1
    fi
    echo "dcx carried the traffic of $procs processes"
}

# A UCP ucx_perftest pair over UCX_TLS=dcx on the device model (the face of
# this run): dcx's lanes in both processes, and the device executed work
# requests on the pair's own fabric.
ucp_perftest_pair() {
    local name=$1; shift
    local log="$DCX_LOGS/ucp-perftest-$name"
    local port try spid fabric wrs
    for try in 1 2 3; do
        port=$((20000 + (RANDOM % 20000)))
        fabric="$E2E_FABRIC-$name-$try"
        DCXEMU_FABRIC="$fabric" DCXEMU_KEEP_FABRIC=1 UCX_TLS=dcx UCX_LOG_LEVEL=debug \
            timeout -k 5 "$E2E_TIMEOUT" "$DCX_PREFIX/bin/dcx-run" $FACE_RUN \
            ucx_perftest "${PERFTEST_OPTS[@]}" -p $port > "$log.server" 2>&1 &
        spid=$!
        if wait_listening $port $spid > "$log.client" &&
           DCXEMU_FABRIC="$fabric" DCXEMU_KEEP_FABRIC=1 UCX_TLS=dcx UCX_LOG_LEVEL=debug \
               timeout -k 5 "$E2E_TIMEOUT" "$DCX_PREFIX/bin/dcx-run" $FACE_RUN \
               ucx_perftest "${PERFTEST_OPTS[@]}" -p $port "$@" localhost > "$log.client" 2>&1; then
            wait $spid || { cat "$log.server"; "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$fabric" >/dev/null; return 1; }
            wrs=$(face_fabric_wrs "$fabric")
            "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$fabric" >/dev/null || true
            grep -q '^Final:' "$log.client" || { cat "$log.client"; return 1; }
            cat "$log.server" "$log.client" > "$log.both"
            dcx_carried "$log.both" 2 || return 1
            grep '^Final:' "$log.client"
            echo "device $FACE_DEV: $wrs work requests executed"
            [ "$wrs" -gt 0 ] || { echo "the device executed no work request: it did not carry the traffic"; return 1; }
            return 0
        fi
        kill $spid 2>/dev/null; wait $spid 2>/dev/null
        "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$fabric" >/dev/null || true
        grep -q "connect" "$log.client" || break
    done
    cat "$log.client" "$log.server"
    return 1
}

# Launcher options every run here needs (root, 4 ranks on 2 cores), and
# UCX_LOG_LEVEL=info for the proof.
E2E_LAUNCH_OPTS=(--allow-run-as-root --oversubscribe -np "$E2E_NP" -x UCX_LOG_LEVEL=info)

# oshrun's options: Open MPI 5's OpenSHMEM fails shmem_init when PE 0's heap
# address is taken in another PE (address-space randomisation makes that rare,
# not impossible); start address 0 makes all PEs fall back to a fixed one
# instead (docs/usage.md, OpenSHMEM).
oshrun_opts() {
    case "$(oshrun --version 2>/dev/null | head -1)" in
    *") 5."*) echo "--mca sshmem_base_start_address 0" ;;
    esac
}

# launcher_run PASS_PATTERN LAUNCHER PROGRAM [ARGS]: through dcx-run --emu
# (--emu=mlx5 on the mlx5 face);
# passes when it exits 0, printed PASS_PATTERN and dcx carried the traffic
# of every rank.
# Work requests the device model executed on the e2e fabric (its fabric-wide
# counters; 0 when the fabric does not exist).
device_wrs() {
    fabric_counter_sum "$E2E_FABRIC" '^(write|write_imm|send|send_imm|read|atomic_fa|atomic_cs)$'
}

# Device atomics the device model executed on the e2e fabric.
device_atomics() {
    fabric_counter_sum "$E2E_FABRIC" '^(atomic_fa|atomic_cs)$'
}

# launcher_run with E2E_DEVICE_AMO=1: the run must also have used device
# atomics over dcx, not UCP's active-message emulation: no "amo_am(" lane
# in the log, and the device model executed atomics. Open MPI and OpenSHMEM
# ask UCP for 32- and 64-bit atomics, so this needs both widths from dcx.
device_amo_run() {
    E2E_DEVICE_AMO=1 launcher_run "$@"
}

launcher_run() {
    local pattern=$1 launcher=$2; shift 2
    local out rc=0 wrs_before wrs_after amo_before amo_after
    out=$(mktemp)
    # A fresh fabric (nobody is attached between runs): its counters then
    # count this run only. Kept after its last process leaves, to read them.
    rm -f "/dev/shm/$E2E_FABRIC"
    wrs_before=$(device_wrs)
    amo_before=$(device_atomics)
    DCXEMU_FABRIC="$E2E_FABRIC" DCXEMU_KEEP_FABRIC=1 timeout -k 10 "$E2E_TIMEOUT" \
        "$DCX_PREFIX/bin/dcx-run" -v $FACE_RUN "$launcher" "${E2E_LAUNCH_OPTS[@]}" "$@" \
        > "$out" 2>&1 || rc=$?
    wrs_after=$(device_wrs)
    amo_after=$(device_atomics)
    cat "$out"
    if [ $rc -ne 0 ]; then
        rm -f "$out"
        echo "$launcher exited with $rc"
        return 1
    fi
    if ! grep -qE "$pattern" "$out"; then
        rm -f "$out"
        echo "no '$pattern' line"
        return 1
    fi
    dcx_carried "$out" "$E2E_NP" || { rm -f "$out"; return 1; }
    if [ "${E2E_DEVICE_AMO:-0}" = 1 ]; then
        if grep -q 'amo_am(' "$out"; then
            rm -f "$out"
            echo "UCP emulates the atomics over active messages (amo_am lanes): no device atomics"
            return 1
        fi
        if [ "$amo_after" -le "$amo_before" ]; then
            rm -f "$out"
            echo "the device model executed no atomic for this run"
            return 1
        fi
        echo "device atomics: $((amo_after - amo_before)) executed, no amo_am lane"
    fi
    rm -f "$out"
    # The device's own counters: the run moved its data through it.
    if [ "$wrs_after" -le "$wrs_before" ]; then
        echo "the device model executed no work request for this run"
        return 1
    fi
    echo "device model: $((wrs_after - wrs_before)) work requests executed"
}

# Control: the same MPI run without the plugin must fail (UCX_TLS=dcx,self
# leaves no transport that reaches another process), so a passing run cannot
# have used anything but dcx.
control_without_dcx() {
    local out rc=0
    out=$(mktemp)
    OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx OMPI_MCA_opal_common_ucx_tls=any \
        OMPI_MCA_opal_common_ucx_devices=any UCX_TLS=dcx,self \
        timeout -k 10 "$E2E_TIMEOUT" mpirun "${E2E_LAUNCH_OPTS[@]}" -x UCX_TLS \
        "$DCX_BUILD/test/e2e/mpi_check" p2p > "$out" 2>&1 || rc=$?
    cat "$out"
    if [ $rc -eq 0 ]; then
        rm -f "$out"
        echo "mpi_check passed without the dcx plugin: the checks cannot tell dcx from another transport"
        return 1
    fi
    grep -q "transport 'dcx' is not available" "$out" ||
        { rm -f "$out"; echo "failed, but not because dcx was missing"; return 1; }
    rm -f "$out"
    echo "without the plugin mpirun fails as it should (rc $rc)"
}

# Control for the perftests: UCX_TLS=dcx without the plugin must fail.
perftest_control_without_dcx() {
    local out rc=0 port=$((20000 + (RANDOM % 20000))) spid
    UCX_TLS=dcx timeout -k 5 30 ucx_perftest "${PERFTEST_OPTS[@]}" -p $port \
        > "$DCX_LOGS/control.server" 2>&1 &
    spid=$!
    wait_listening $port $spid || { cat "$DCX_LOGS/control.server"; return 1; }
    out=$(UCX_TLS=dcx timeout -k 5 30 ucx_perftest "${PERFTEST_OPTS[@]}" -p $port \
          -t tag_lat -n 10 localhost 2>&1) || rc=$?
    wait $spid 2>/dev/null || true
    echo "$out"
    [ $rc -ne 0 ] || { echo "ucx_perftest ran over UCX_TLS=dcx without the plugin"; return 1; }
    echo "$out" | grep -q "transport 'dcx' is not available" ||
        { echo "failed, but not because dcx was missing"; return 1; }
}

# How dcx-run loads dcx into this build's UCX: "plugin-path" (UCX >= 1.22,
# UCX_PLUGIN_PATH or UCX's module directory) or "preload" (LD_PRELOAD).
dcx_run_load_mode() {
    local out
    out=$("$DCX_PREFIX/bin/dcx-run" -v true 2>&1) || { echo "$out" >&2; return 1; }
    case "$out" in
    *"dcx is loaded from UCX's"*) echo plugin-path ;;
    *"dcx is preloaded"*)         echo preload ;;
    *) echo "dcx-run -v did not say how dcx is loaded: $out" >&2; return 1 ;;
    esac
}

# What a process started by dcx-run has that loads dcx: LD_PRELOAD's first
# entry is the plugin, or UCX_PLUGIN_PATH starts with the plugin's directory
# (prints the pattern for a "NAME=VALUE" line of env).
dcx_loading_env_pattern() {
    local mode
    mode=$(dcx_run_load_mode) || return 1
    if [ "$mode" = plugin-path ]; then
        echo "^UCX_PLUGIN_PATH=$(dirname "$(plugin_path)")"
    else
        echo '^LD_PRELOAD=[^:]*libuct_dcx.so'
    fi
}

# UCX >= 1.22: two plain ucx_perftest processes over UCX_TLS=dcx with only
# UCX_PLUGIN_PATH and the device model's settings (no dcx-run, no preload).
plugin_path_perftest() {
    local port=$((20000 + (RANDOM % 20000))) spid rc=0 src=0
    local log="$DCX_LOGS/plugin-path-perftest" dir
    dir=$(dirname "$(plugin_path)")
    set -- env -u LD_PRELOAD DCXEMU_FABRIC="$E2E_FABRIC" UCX_TLS=dcx \
        UCX_PLUGIN_PATH="$dir" UCX_DCX_EMU=y UCX_DCX_EMU_LIB="$DCX_PREFIX/lib/libdcxemu.so.0" \
        UCX_LOG_LEVEL=info timeout -k 5 "$E2E_TIMEOUT" ucx_perftest "${PERFTEST_OPTS[@]}"
    "$@" -p $port > "$log.server" 2>&1 &
    spid=$!
    wait_listening $port $spid > "$log.client" &&
        "$@" -p $port -t tag_bw -s 65536 -n 500 -w 50 localhost > "$log.client" 2>&1 || rc=$?
    wait $spid || src=$?
    cat "$log.server" "$log.client" > "$log.both"
    [ $rc -eq 0 ] && [ $src -eq 0 ] ||
        { cat "$log.both"; echo "client exit $rc, server exit $src"; return 1; }
    grep '^Final:' "$log.client" || { cat "$log.client"; return 1; }
    dcx_carried "$log.both" 2
    echo "UCX_PLUGIN_PATH=$dir, no LD_PRELOAD"
}

# dcx-run in front of launchers: ranks load the plugin and get the settings;
# the caller's settings win; plain commands get nothing but what loads dcx.
dcx_run_ranks_load_plugin() {
    local out want face='$UCX_DCX_EMU'
    # each rank's device: the API face by UCX_DCX_EMU=y, the mlx5 face by
    # the face in its preload and UCX_DCX_EMU unset
    want='^rank loads dcx: ucx any dcx,self y$'
    if [ "$DCX_FACE" = mlx5 ]; then
        face='${UCX_DCX_EMU-unset} $(case "$LD_PRELOAD" in (*libdcxemu_mlx5.so*) echo face;; esac)'
        want='^rank loads dcx: ucx any dcx,self unset face$'
    fi
    out=$(DCXEMU_FABRIC="$E2E_FABRIC" timeout -k 5 60 "$DCX_PREFIX/bin/dcx-run" -v $FACE_RUN \
          mpirun --allow-run-as-root --oversubscribe -np 2 \
          sh -c 'ucx_info -d | grep -q "^#     Component: dcx$" && echo "rank loads dcx: $OMPI_MCA_pml $OMPI_MCA_opal_common_ucx_tls $UCX_TLS '"$face"'"' 2>&1) ||
        { echo "$out"; return 1; }
    echo "$out"
    [ "$(echo "$out" | grep -cE "$want")" -eq 2 ] ||
        { echo "ranks did not load the plugin with the settings"; return 1; }
    echo "$out" | grep -q '^dcx-run: OMPI_MCA_pml=ucx$' || { echo "-v did not print the settings"; return 1; }
    echo "$out" | grep -qE "^dcx-run: dcx is (preloaded|loaded from UCX's)" ||
        { echo "-v did not say how dcx is loaded"; return 1; }
}

dcx_run_caller_settings_win() {
    local out pattern
    pattern=$(dcx_loading_env_pattern) || return 1
    out=$(UCX_TLS=tcp,self OMPI_MCA_mca_base_env_list='DCX_E2E_MARK=42' \
          timeout -k 5 60 "$DCX_PREFIX/bin/dcx-run" -v \
          mpirun --allow-run-as-root -np 1 \
          sh -c 'echo "rank: $UCX_TLS $DCX_E2E_MARK"; env' 2>&1) ||
        { echo "$out"; return 1; }
    echo "$out" | grep -E '^(rank|dcx-run|UCX_PLUGIN_PATH|LD_PRELOAD)'
    echo "$out" | grep -q "^rank: tcp,self 42$" ||
        { echo "caller's UCX_TLS / env list not kept"; return 1; }
    echo "$out" | grep -q "$pattern" || { echo "the rank has no $pattern"; return 1; }
    echo "$out" | grep -q "UCX_TLS=tcp,self (kept: set by the caller)" ||
        { echo "-v did not say the caller's UCX_TLS was kept"; return 1; }
}

# srun is not installed here: a stand-in named srun shows what it receives
# (Slurm forwards the whole environment by default; no -x options).
dcx_run_srun_settings() {
    local dir out pattern
    pattern=$(dcx_loading_env_pattern) || return 1
    dir=$(mktemp -d)
    printf '#!/bin/sh\necho "srun args: $*"\nenv\n' > "$dir/srun"
    chmod +x "$dir/srun"
    out=$(env -u UCX_TLS "$DCX_PREFIX/bin/dcx-run" "$dir/srun" -n 4 ./app) ||
        { rm -rf "$dir"; return 1; }
    rm -rf "$dir"
    echo "$out" | grep -E '^(srun args|OMPI_MCA_|UCX_TLS|UCX_PLUGIN_PATH|LD_PRELOAD)'
    echo "$out" | grep -q '^srun args: -n 4 ./app$' || { echo "srun's arguments changed"; return 1; }
    local v
    for v in OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx OMPI_MCA_spml=ucx \
             OMPI_MCA_opal_common_ucx_tls=any OMPI_MCA_opal_common_ucx_devices=any \
             UCX_TLS=dcx,self; do
        echo "$out" | grep -qx "$v" || { echo "missing $v"; return 1; }
    done
    echo "$out" | grep -q "$pattern" || { echo "no $pattern"; return 1; }
}

dcx_run_plain_command_untouched() {
    local out pattern
    pattern=$(dcx_loading_env_pattern) || return 1
    out=$(env -u UCX_TLS -u OMPI_MCA_pml "$DCX_PREFIX/bin/dcx-run" env) || return 1
    if echo "$out" | grep -qE '^(UCX_TLS|OMPI_MCA_[a-z_]*)='; then
        echo "a plain command got launcher settings:"
        echo "$out" | grep -E '^(UCX_TLS|OMPI_MCA_)'
        return 1
    fi
    echo "$out" | grep -q "$pattern" || { echo "no $pattern"; return 1; }
    "$DCX_PREFIX/bin/dcx-run" 2>/dev/null && { echo "no command: exit 0"; return 1; }
    "$DCX_PREFIX/bin/dcx-run" --bogus true 2>/dev/null && { echo "bad option: exit 0"; return 1; }
    echo "plain command: only $pattern set; misuse exits non-zero"
}

# A launcher behind timeout, env, nice and stdbuf still gets the settings
# and the -x options (right after the launcher's name); env's UCX_* words
# are forwarded too.
dcx_run_launcher_behind_wrappers() {
    local out
    out=$(env -u UCX_TLS timeout -k 5 60 "$DCX_PREFIX/bin/dcx-run" -v \
          timeout -k 5 50 env UCX_E2E_MARK=7 nice -n 1 stdbuf -oL \
          mpirun --allow-run-as-root -np 1 \
          sh -c 'echo "rank: $OMPI_MCA_pml $OMPI_MCA_opal_common_ucx_tls $UCX_TLS $UCX_E2E_MARK"' 2>&1) ||
        { echo "$out"; return 1; }
    echo "$out"
    echo "$out" | grep -q '^rank: ucx any dcx,self 7$' ||
        { echo "the launcher behind the wrappers did not get the settings"; return 1; }
    echo "$out" | grep -qE '^dcx-run: running: timeout -k 5 50 env UCX_E2E_MARK=7 nice -n 1 stdbuf -oL mpirun (-x [A-Z_0-9]+ )*-x UCX_E2E_MARK (-x [A-Z_0-9]+ )*--allow-run-as-root' ||
        { echo "the -x options are not right after mpirun"; return 1; }
}

# A launcher behind a command dcx-run does not know (nohup): a warning that
# says to put the launcher first, and no launcher settings.
dcx_run_hidden_launcher_warns() {
    local out
    out=$(env -u UCX_TLS -u OMPI_MCA_pml timeout -k 5 60 "$DCX_PREFIX/bin/dcx-run" -v \
          nohup mpirun --version 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep '^dcx-run'
    echo "$out" | grep -q "^dcx-run: warning: 'mpirun' comes after 'nohup'.*Put the launcher first" ||
        { echo "no warning about the launcher behind nohup"; return 1; }
    if echo "$out" | grep -qE '^dcx-run: (OMPI_MCA_pml|UCX_TLS)='; then
        echo "launcher settings were made for a hidden launcher"
        return 1
    fi
}

suite_e2e-users() {
    E2E_FABRIC="dcx-e2e-users-$$"
    e2e_users_build
    local n="-n 2000 -w 100" bin="$DCX_BUILD/test/e2e"
    check dcx-run-ranks-load-plugin       dcx_run_ranks_load_plugin
    # On the mlx5 face only the runs on the device: the checks of dcx-run's
    # launcher settings and the controls without the plugin run no device
    # (they are the same on both faces), and the plugin-path run is the API
    # face's (UCX_DCX_EMU=y by hand).
    if [ "$DCX_FACE" != mlx5 ]; then
        check dcx-run-caller-settings-win     dcx_run_caller_settings_win
        check dcx-run-plain-command-untouched dcx_run_plain_command_untouched
        check dcx-run-srun-settings           dcx_run_srun_settings
        check dcx-run-launcher-behind-wrappers dcx_run_launcher_behind_wrappers
        check dcx-run-hidden-launcher-warns   dcx_run_hidden_launcher_warns
        if [ "$(dcx_run_load_mode)" = plugin-path ]; then
            check ucp-perftest-plugin-path-no-dcx-run plugin_path_perftest
        fi
    fi
    # DCX_FACE_QUICK=1 on the mlx5 face: a latency and a rendezvous pair,
    # and every MPI and OpenSHMEM program (ranks through the launcher, each
    # with the face preloaded)
    local quick=0
    face_quick && quick=1
    check ucp-perftest-tag_lat       ucp_perftest_pair tag_lat     -t tag_lat $n
    [ $quick -eq 1 ] ||
        check ucp-perftest-tag_bw-eager  ucp_perftest_pair tag_bw-eag  -t tag_bw -s 4096 $n
    check ucp-perftest-tag_bw-rndv   ucp_perftest_pair tag_bw-rndv -t tag_bw -s 1048576 -n 200 -w 10
    if [ $quick -eq 0 ]; then
        check ucp-perftest-ucp_put_bw    ucp_perftest_pair put_bw      -t ucp_put_bw -s 65536 $n
        check ucp-perftest-ucp_get       ucp_perftest_pair get         -t ucp_get -s 65536 $n
        check ucp-perftest-ucp_fadd      ucp_perftest_pair fadd        -t ucp_fadd $n
        check ucp-perftest-tag_lat-sleep ucp_perftest_pair tag_lat-sleep -t tag_lat -E sleep -n 2000 -w 100
    fi
    check mpi-p2p \
        launcher_run '^mpi_check: PASS \(p2p\)' mpirun "$bin/mpi_check" p2p
    [ $quick -eq 1 ] ||
        check mpi-p2p-rndv-put_zcopy \
            launcher_run '^mpi_check: PASS \(p2p\)' mpirun -x UCX_RNDV_SCHEME=put_zcopy \
            "$bin/mpi_check" p2p
    check mpi-collectives \
        launcher_run '^mpi_check: PASS \(coll\)' mpirun "$bin/mpi_check" coll
    check mpi-one-sided \
        device_amo_run '^mpi_check: PASS \(rma\)' mpirun "$bin/mpi_check" rma
    check shmem-put-get-iput-atomics \
        device_amo_run '^shmem_check: PASS' oshrun $(oshrun_opts) "$bin/shmem_check"
    if [ "$DCX_FACE" != mlx5 ]; then
        check mpi-control-without-dcx-fails control_without_dcx
        check ucp-perftest-control-without-dcx-fails perftest_control_without_dcx
    fi
}

# --- demo: UCP, Open MPI and OpenSHMEM over dcx (called by cmd_demo) --------

# Rows of the demo's summary table: "what|result|carried by".
DEMO_ROWS=()

# A UCP ucx_perftest pair for the demo; field: lat or bw.
demo_ucp_perftest() {
    local label=$1 field=$2; shift 2
    local log="$DCX_LOGS/ucp-$field-$RANDOM" value
    E2E_FABRIC="$DEMO_FABRIC"
    if ucp_perftest_pair "demo" "$@" > "$log" 2>&1; then
        value=$(grep '^Final:' "$log" | tail -1 | awk -v f="$field" '{
            if (f == "lat") printf "%.2f us", $3; else printf "%.1f MB/s", $6 }')
        printf '    %-44s %s\n' "$label" "$value"
        DEMO_ROWS+=("$label|$value|dcx (2 processes)")
    else
        printf '    %-44s %s (log: %s)\n' "$label" "FAILED" "$log"
        failure_excerpt "$log"
        DEMO_ROWS+=("$label|FAILED|-")
        return 1
    fi
}

# An MPI / OpenSHMEM program under LAUNCHER -np 4 through dcx-run, its
# progress lines shown as they come.
demo_launcher() {
    local label=$1 launcher=$2; shift 2
    local log="$DCX_LOGS/${launcher}-$RANDOM" rc proof carried result
    note "  $label"
    set +e
    DCXEMU_FABRIC="$DEMO_FABRIC" timeout -k 10 "$E2E_TIMEOUT" \
        "$DCX_PREFIX/bin/dcx-run" --emu "$launcher" "${E2E_LAUNCH_OPTS[@]}" "$@" 2>&1 |
        tee "$log" | grep --line-buffered -E '^(mpi|shmem)_check:' | sed -u 's/^/        /'
    rc=${PIPESTATUS[0]}
    set -e
    carried=1
    proof=$(dcx_carried "$log" "$E2E_NP") || carried=0
    if [ "$rc" -eq 0 ] && [ $carried -eq 1 ] && grep -qE '^(mpi|shmem)_check: PASS' "$log"; then
        result="PASS ($(sed -n 's/^\(mpi\|shmem\)_check: PASS[^:]*: .*, \([0-9]*\) checks.*/\2/p' "$log") checks)"
        DEMO_ROWS+=("$label|$result|dcx ($E2E_NP ranks)")
        return 0
    fi
    note "    FAILED (exit $rc; log: $log)"
    if [ $carried -eq 0 ]; then
        printf '%s\n' "$proof" | sed 's/^/      | /'
    fi
    failure_excerpt "$log"
    DEMO_ROWS+=("$label|FAILED|-")
    return 1
}

demo_users() {
    local failed=0 bin="$DCX_BUILD/test/e2e" row what result by
    e2e_users_build
    note ""
    note "ucx_perftest at UCP level (UCX_TLS=dcx):"
    demo_ucp_perftest "UCP tag latency, 8 B (tag_lat)" lat \
        -t tag_lat -n 5000 -w 500 || failed=1
    demo_ucp_perftest "UCP tag bandwidth, 1 MiB rendezvous (tag_bw)" bw \
        -t tag_bw -s 1048576 -n 200 -w 20 || failed=1
    note ""
    note "Open MPI, $E2E_NP ranks: dcx-run --emu mpirun -np $E2E_NP mpi_check STAGE"
    note "(dcx-run sets pml ucx, osc ucx, the UCX allow-lists and UCX_TLS=dcx,self)"
    demo_launcher "MPI point-to-point, 0 B .. 4 MiB" mpirun "$bin/mpi_check" p2p || failed=1
    demo_launcher "MPI collectives" mpirun "$bin/mpi_check" coll || failed=1
    demo_launcher "MPI one-sided (osc ucx)" mpirun "$bin/mpi_check" rma || failed=1
    note ""
    note "OpenSHMEM, $E2E_NP PEs: dcx-run --emu oshrun -np $E2E_NP shmem_check   (spml ucx)"
    demo_launcher "OpenSHMEM put/get, iput/iget, atomics" oshrun $(oshrun_opts) "$bin/shmem_check" || failed=1

    note ""
    note "Summary (software DC device on this host; data verified in every run):"
    printf '    %-46s %-24s %s\n' "run" "result" "carried by"
    printf '    %-46s %-24s %s\n' "---" "------" "----------"
    for row in "${DEMO_ROWS[@]}"; do
        IFS='|' read -r what result by <<< "$row"
        printf '    %-46s %-24s %s\n' "$what" "$result" "$by"
    done
    return $failed
}
