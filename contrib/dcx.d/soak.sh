# contrib/dcx.d/soak.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# contrib/dcx soak [--procs N] [--minutes M] [--seconds S] [--seed N]:
# test/soak/dcx_soak on one fabric of the software DC device: N processes
# doing random mixed operations (active messages, put, get, 64-bit atomics,
# strided zero-copy, remote strided views) to each other with every byte
# verified, while the device model drops, delays and fails work requests
# and one process at a time is killed and restarted. Prints the table of
# operations, bytes verified, errors by kind, restarts, corruptions and
# hangs; exits non-zero on any corruption, hang or crashed worker.
# --check hang|corruption makes one worker stop, or flip bytes of its
# peers' regions behind the transport's back: that run must fail.

cmd_soak() {
    local procs=8 minutes="" seconds=120 seed="" check="" rc=0 dir log
    while [ $# -gt 0 ]; do
        case "$1" in
        --procs)   [ $# -ge 2 ] || die "--procs needs a number"; procs=$2; shift 2 ;;
        --minutes) [ $# -ge 2 ] || die "--minutes needs a number"; minutes=$2; shift 2 ;;
        --seconds) [ $# -ge 2 ] || die "--seconds needs a number"; seconds=$2; shift 2 ;;
        --seed)    [ $# -ge 2 ] || die "--seed needs a number"; seed=$2; shift 2 ;;
        --check)   [ $# -ge 2 ] || die "--check needs hang or corruption"; check=$2; shift 2 ;;
        *) die "soak: unknown argument '$1' (soak [--procs N] [--minutes M] [--seconds S] [--seed N] [--check hang|corruption])" ;;
        esac
    done
    case "$procs$minutes$seconds" in
    *[!0-9]*) die "soak: --procs, --minutes and --seconds take whole numbers" ;;
    esac
    if [ -n "$minutes" ]; then
        seconds=$((minutes * 60))
    fi
    if [ "$procs" -lt 2 ] || [ "$procs" -gt 16 ]; then
        die "soak: --procs takes 2..16"
    fi
    if [ "$seconds" -lt 1 ]; then
        die "soak: the run needs at least a second"
    fi
    cmd_build
    dir=$DCX_BUILD/soak-logs/run-$$
    log=$DCX_BUILD/soak-logs/soak-$$.log
    rm -rf "$dir"
    mkdir -p "$dir"
    say "soak: $procs processes for $seconds s under faults (logs: $dir)"
    # The run's own watchdog finds hangs; this bound only catches the
    # parent itself stuck (its drain and exit take at most 2 x 60 s).
    DCXEMU_FABRIC="dcx-soak-$$" timeout -k 10 $((seconds + 300)) \
        "$DCX_PREFIX/bin/dcx-run" --emu "$DCX_BUILD/test/soak/dcx_soak" \
        --procs "$procs" --seconds "$seconds" --dir "$dir" \
        ${seed:+--seed "$seed"} ${check:+--check "$check"} > "$log" 2>&1 || rc=$?
    cat "$log"
    note "full log: $log"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        die "soak: the run did not end within $((seconds + 300)) s (a hang of the parent)"
    fi
    [ "$rc" -eq 0 ] || die "soak: FAILED (exit $rc)"
}
