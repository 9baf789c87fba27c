# contrib/dcx.d/policies.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# contrib/dcx bench policies: the DCI policies side by side in one run.
# test/bench/dcx_policies opens one sending interface and 16 receiving ones
# (each its own DCT) in one process on the device model's API face and
# spreads 8-byte puts over all of them, in bursts of 4 per peer; a put the
# transport refuses (no DCI, or no room) is tried again after progressing
# the sender. The pool has DCX_BENCH_POLICY_NUM_DCI DCIs (default 4), fewer
# than the peers, so the policies differ: dcs and dcs_quota wait for a DCI,
# dcs_hybrid moves the endpoints that find the pool empty to its stream
# DCI, hw_dcs has one DCI with streams, rand shares 4 DCIs. Each round runs
# every policy back to back; a column is the median of its rounds, the ratio
# the median of the per-round ratios to dcs_quota (the default policy).

BENCH_POLICIES=(dcs_quota dcs_hybrid hw_dcs dcs rand)

# One dcx_policies run with UCX_DCX_TX_POLICY=$1: "MSG_RATE NORES_PER_MSG",
# "nan nan" when it fails.
bench_policies_one() {
    local policy=$1 out
    out=$(DCXEMU_FABRIC="$BENCH_FABRIC" UCX_DCX_TX_POLICY="$policy" \
          UCX_DCX_NUM_DCI="${DCX_BENCH_POLICY_NUM_DCI:-4}" timeout 300 \
          "$DCX_PREFIX/bin/dcx-run" --emu "$DCX_BUILD/test/bench/dcx_policies" \
          "${DCX_BENCH_POLICY_COUNT:-200000}" 16 4 2>&1) ||
        { echo "$out" | tail -3 >&2; echo nan nan; return 0; }
    echo "$out" | sed -n 's/.* msg_rate=\([0-9.]*\) .* nores_per_msg=\([0-9.]*\).*/\1 \2/p'
}

bench_policies() {
    local i p r base rate ns nores v
    local -A rates=() noress=() rat=() now=()
    say "bench policies: UCX_DCX_TX_POLICY side by side, 1 sender, 16 peers, NUM_DCI ${DCX_BENCH_POLICY_NUM_DCI:-4}, $BENCH_ROUNDS rounds"
    note "device-model figures on a shared 2-core host, not mlx5 hardware: the device model runs beside the"
    note "sender on the same cores, so a rate is the transport's and the model's work together: compare policies"
    note "msg/s: 8 B puts completed per second; ns/msg: its inverse; retries: puts refused (NO_RESOURCE) per put"
    note "medians of the rounds; /dcs_quota: the median of the per-round ratios of message rates"
    echo "policy,msg_rate,ns_per_msg,nores_per_msg,ratio_to_dcs_quota" > "$BENCH_CSV"
    for ((i = 0; i < BENCH_ROUNDS; ++i)); do
        for p in "${BENCH_POLICIES[@]}"; do
            r=$(bench_policies_one "$p")
            now[$p]=${r%% *}
            rates[$p]+="${r%% *} "
            noress[$p]+="${r##* } "
        done
        base=${now[dcs_quota]}
        for p in "${BENCH_POLICIES[@]}"; do
            rat[$p]+="$(awk -v a="${now[$p]}" -v b="$base" 'BEGIN { if (a > 0 && b > 0) printf "%.4f", a / b; else print "nan" }') "
        done
    done
    printf '  %-11s %12s %10s %10s %11s\n' policy "msg/s" "ns/msg" retries "/dcs_quota"
    for p in "${BENCH_POLICIES[@]}"; do
        rate=$(printf '%s\n' ${rates[$p]} | grep -v nan | bench_median)
        ns=$(awk -v r="$rate" 'BEGIN { if (r > 0) printf "%.1f", 1e9 / r; else print "nan" }')
        nores=$(printf '%s\n' ${noress[$p]} | grep -v nan | bench_median)
        v=$(printf '%s\n' ${rat[$p]} | grep -v nan | bench_median)
        v=$(awk -v r="$v" 'BEGIN { if (r == "" || r == "nan") print "nan"; else printf "%.2f", r }')
        printf '  %-11s %12s %10s %10s %11s\n' "$p" "$rate" "$ns" "$nores" "$v"
        echo "$p,$rate,$ns,$nores,$v" >> "$BENCH_CSV"
    done
}
