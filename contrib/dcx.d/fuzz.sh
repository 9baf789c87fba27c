# contrib/dcx.d/fuzz.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# contrib/dcx fuzz [TARGET...] [--time S] [--seeds] (hostile input):
# builds the plugin and the device model with clang for libFuzzer, under
# AddressSanitizer and UBSan, in a build tree of their own (build-fuzz/,
# configure --enable-fuzzing), and runs each libFuzzer target of
# test/fuzz/ for S seconds (default 60) from its seeds in
# test/fuzz/corpus/TARGET/. Each target prints its executions
# (stat::number_of_executed_units) and rate; a crash, a sanitizer report, a
# hang (libFuzzer's -timeout) or any other non-zero exit fails the command,
# with the reproducer's path and the command that replays it. --seeds
# writes the seed corpora again from the real objects (packed keys,
# addresses, messages) instead of fuzzing. docs/fuzzing.md has the ledger.

FUZZ_TARGETS_ALL=(rkey addr rx wr umr)
DCX_FUZZ_BUILD=${DCX_FUZZ_BUILD_DIR:-$DCX_TOP/build-fuzz}
# clang 14 and its sanitizer/libFuzzer runtimes (Debian 12).
DCX_FUZZ_CC=${DCX_FUZZ_CC:-clang-14}
DCX_FUZZ_CXX=${DCX_FUZZ_CXX:-clang++-14}
FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)

fuzz_install() {
    local p missing=()
    for p in "${FUZZ_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        return
    fi
    as_root true ||
        die "missing packages: ${missing[*]}
    run as root: apt-get update && apt-get install --no-install-recommends ${missing[*]}"
    note "installing: ${missing[*]}"
    apt_update_once
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install failed for: ${missing[*]}"
}

fuzz_build() {
    local log="$DCX_FUZZ_BUILD/fuzz-build.log"
    mkdir -p "$DCX_FUZZ_BUILD"
    note "building $DCX_FUZZ_BUILD ($DCX_FUZZ_CC, --enable-fuzzing; log: $log)"
    if ! CC=$DCX_FUZZ_CC CXX=$DCX_FUZZ_CXX DCX_BUILD_DIR="$DCX_FUZZ_BUILD" \
         DCX_PREFIX="$DCX_FUZZ_BUILD/install" DCX_CONFIGURE_FLAGS="--enable-fuzzing" \
         "$DCX_TOP/contrib/dcx" build > "$log" 2>&1; then
        tail -30 "$log"
        die "the fuzzing build failed"
    fi
}

# fuzz_seeds TARGET: the target writes its seeds from the real objects.
fuzz_seeds() {
    local t=$1 dir="$DCX_TOP/test/fuzz/corpus/$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    DCXEMU_FABRIC="dcx-fuzz-seeds-$t-$$" DCX_FUZZ_SEEDS="$dir" \
        "$DCX_FUZZ_BUILD/test/fuzz/fuzz_$t" -runs=0 > "$DCX_FUZZ_BUILD/fuzz-logs/seeds-$t.log" 2>&1 ||
        { tail -20 "$DCX_FUZZ_BUILD/fuzz-logs/seeds-$t.log"; die "fuzz_$t could not write its seeds"; }
    note "seeds of $t: $(find "$dir" -type f | wc -l) files in ${dir#"$DCX_TOP"/}"
}

FUZZ_FAILED=()
FUZZ_ROWS=()

# fuzz_run TARGET SECONDS: one libFuzzer run; its working corpus grows in
# build-fuzz/corpus/TARGET (the seeds are read only).
fuzz_run() {
    local t=$1 secs=$2 rc=0 execs rate crash start elapsed
    local bin="$DCX_FUZZ_BUILD/test/fuzz/fuzz_$t"
    local work="$DCX_FUZZ_BUILD/corpus/$t"
    local art="$DCX_FUZZ_BUILD/fuzz-artifacts/$t"
    local log="$DCX_FUZZ_BUILD/fuzz-logs/$t.log"
    local seeds="$DCX_TOP/test/fuzz/corpus/$t"
    [ -d "$seeds" ] || die "no seed corpus $seeds"
    mkdir -p "$work" "$art"
    # Earlier reproducers stay, marked by their time: only this run's count.
    touch "$log.start"
    note "fuzz_$t for $secs s (log: $log)"
    start=$(date +%s)
    DCXEMU_FABRIC="dcx-fuzz-$t-$$" timeout -k 10 $((secs + 300)) "$bin" \
        -max_total_time="$secs" -print_final_stats=1 -timeout=30 \
        -rss_limit_mb=4096 -artifact_prefix="$art/" "$work" "$seeds" \
        > "$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    execs=${execs:-0}
    # per second of the run as it happened (a crash ends it early)
    elapsed=$(( $(date +%s) - start ))
    rate=$(awk -v e="$execs" -v s="$elapsed" 'BEGIN { printf "%.0f", (s > 0) ? e / s : 0 }')
    crash=$(find "$art" -maxdepth 1 -type f -newer "$log.start" | head -1)
    rm -f "$log.start"
    if [ "$rc" -eq 0 ] && [ -z "$crash" ]; then
        note "fuzz_$t: #execs $execs in $elapsed s ($rate/s), 0 crashes"
        FUZZ_ROWS+=("$t|$elapsed|$execs|$rate|0")
        printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$elapsed" "$execs" ok \
            >> "$DCX_FUZZ_BUILD/fuzz-ledger.tsv"
        return 0
    fi
    note "FAIL fuzz_$t: exit status $rc after #execs $execs"
    awk '/^==[0-9]+== ?ERROR|^SUMMARY|^dcx fuzz:|runtime error:|^[*][*][*]/ && n < 8 {
             print "      | " $0; ++n }' "$log"
    if [ -n "$crash" ]; then
        note "reproducer: $crash"
        note "replay:     $bin $crash"
    else
        note "no reproducer was written (killed by the time limit, or failed before fuzzing); see $log"
    fi
    FUZZ_ROWS+=("$t|$elapsed|$execs|$rate|FAILED")
    FUZZ_FAILED+=("fuzz_$t")
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$elapsed" "$execs" "FAILED${crash:+ $crash}" \
        >> "$DCX_FUZZ_BUILD/fuzz-ledger.tsv"
}

cmd_fuzz() {
    local targets=() secs=${DCX_FUZZ_TIME:-60} seeds=0 t row
    while [ $# -gt 0 ]; do
        case "$1" in
        --time)   [ $# -ge 2 ] || die "--time needs seconds"; secs=$2; shift 2 ;;
        --time=*) secs=${1#--time=}; shift ;;
        --seeds)  seeds=1; shift ;;
        -*)       die "unknown option $1 (fuzz [TARGET...] [--time S] [--seeds])" ;;
        *)        targets+=("$1"); shift ;;
        esac
    done
    case "$secs" in
    ''|*[!0-9]*) die "--time needs a whole number of seconds, not '$secs'" ;;
    esac
    [ ${#targets[@]} -gt 0 ] || targets=("${FUZZ_TARGETS_ALL[@]}")
    for t in "${targets[@]}"; do
        case " ${FUZZ_TARGETS_ALL[*]} " in
        *" $t "*) ;;
        *) die "unknown fuzz target '$t' (targets: ${FUZZ_TARGETS_ALL[*]})" ;;
        esac
    done

    say "fuzz: ${targets[*]}"
    install_packages
    fuzz_install
    fuzz_build
    mkdir -p "$DCX_FUZZ_BUILD/fuzz-logs"
    if [ $seeds -eq 1 ]; then
        for t in "${targets[@]}"; do
            fuzz_seeds "$t"
        done
        return
    fi
    for t in "${targets[@]}"; do
        fuzz_run "$t" "$secs"
    done

    echo
    printf '    %-8s %8s %12s %10s  %s\n' target seconds '#execs' 'execs/s' crashes
    for row in "${FUZZ_ROWS[@]}"; do
        IFS='|' read -r t secs execs rate crash <<< "$row"
        printf '    %-8s %8s %12s %10s  %s\n' "$t" "$secs" "$execs" "$rate" "$crash"
    done
    note "every run: $DCX_FUZZ_BUILD/fuzz-ledger.tsv"
    [ ${#FUZZ_FAILED[@]} -eq 0 ] || die "fuzzing found a failure in: ${FUZZ_FAILED[*]}"
}
