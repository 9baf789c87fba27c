# contrib/dcx.d/cost.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# contrib/dcx bench cost: what one operation costs the CPU, counted (not
# timed) by callgrind around test/bench/dcx_cost's measured loop:
#   dcx tx   instructions in libdcx_transport.so per operation, posting and
#            the sender's progress (its completions included); a stream
#            that progresses every 16 posts and when out of resources
#   dcx rx   the same for the receiver's progress (active messages, tags)
#   post     every instruction of the posting call (UCT call or ucp_*_nbx
#            to its return, the device's work-request functions included)
#   cqe      send CQEs the device wrote per operation (the model's counter,
#            read by dcx_cost around the measured loop)
#   tx by object: where the sender's instructions go (dcx, the device
#            model and verbs, UCX, libc, the rest)
# Counted on the device model in immediate execution mode, so the counts
# repeat from run to run.

COST_COUNT=${DCX_COST_COUNT:-10000}

# Sum a callgrind dump by object. Reads the raw file: callgrind_annotate
# leaves out code inlined from headers (fi=/fe= blocks), which is most of
# dcx's hot path. Prints "<object> <Ir>" lines.
cost_parse() {
    awk '
        function resolve(kind, s,   id, rest) {
            if (match(s, /^\([0-9]+\)/)) {
                id   = substr(s, 2, RLENGTH - 2)
                rest = substr(s, RLENGTH + 1)
                sub(/^ /, "", rest)
                if (rest != "") names[kind, id] = rest
                return names[kind, id]
            }
            return s
        }
        /^ob=/  { ob = resolve("ob", substr($0, 4)); next }
        /^cob=/ { resolve("ob", substr($0, 5)); next }
        /^calls=/ { inclusive = 1; next }
        /^[0-9+*-]/ {
            if (inclusive) { inclusive = 0; next } # the call above, not self
            self[ob] += $2
            next
        }
        END { for (o in self) printf "%s %d\n", o, self[o] }' "$1"
}

# Instructions per operation of the objects matching a pattern ("." = all).
cost_per_op() {
    local parsed=$1 pattern=$2
    awk -v p="$pattern" -v n="$COST_COUNT" '
            $1 ~ p { s += $2 } END { printf "%.0f", s / n }' "$parsed"
}

# One callgrind run of dcx_cost; $1: output name, $2: op, then the
# functions whose insides are collected.
cost_callgrind() {
    local out=$1 op=$2 fn args=()
    shift 2
    for fn in "$@"; do
        args+=("--toggle-collect=$fn")
    done
    rm -f "$COST_DIR/$out" "$COST_DIR/$out".*
    DCXEMU_FABRIC="$BENCH_FABRIC" DCXEMU_EXEC=immediate UCX_TLS=dcx \
        timeout 1200 "$DCX_PREFIX/bin/dcx-run" --emu \
        valgrind --tool=callgrind --collect-atstart=no "${args[@]}" \
        --callgrind-out-file="$COST_DIR/$out" \
        "$DCX_BUILD/test/bench/dcx_cost" "$op" "$COST_COUNT" \
        > "$COST_DIR/$out.log" 2>&1 ||
        { tail -20 "$COST_DIR/$out.log" >&2; die "dcx_cost $op under callgrind failed (log: $COST_DIR/$out.log)"; }
    [ -s "$COST_DIR/$out.1" ] ||
        die "callgrind wrote no dump of the measured loop for $op ($COST_DIR/$out.1)"
    cost_parse "$COST_DIR/$out.1" > "$COST_DIR/$out.parsed"
}

# One row: op, the posting function, whether it has a receive side, goal.
cost_row() {
    local op=$1 post_fn=$2 has_rx=$3 goal=$4
    local dcx_tx dcx_rx=- post cqe dev ucx libc other result=-

    cost_callgrind "$op.tx" "$op" cost_post cost_progress_tx
    cost_callgrind "$op.post" "$op" "$post_fn"
    if [ "$has_rx" = rx ]; then
        cost_callgrind "$op.rx" "$op" cost_progress_rx
        dcx_rx=$(cost_per_op "$COST_DIR/$op.rx.parsed" 'libdcx_transport')
    fi

    dcx_tx=$(cost_per_op "$COST_DIR/$op.tx.parsed" 'libdcx_transport')
    post=$(cost_per_op "$COST_DIR/$op.post.parsed" '.')
    dev=$(cost_per_op "$COST_DIR/$op.tx.parsed" 'libdcxemu|libibverbs|libmlx5')
    ucx=$(cost_per_op "$COST_DIR/$op.tx.parsed" '/libuc[mpst][.-]|/libuct_[a-z]*[.-]')
    libc=$(cost_per_op "$COST_DIR/$op.tx.parsed" '/libc[.-]')
    other=$(awk -v all="$(cost_per_op "$COST_DIR/$op.tx.parsed" '.')" \
                -v a="$dcx_tx" -v b="$dev" -v c="$ucx" -v d="$libc" \
                'BEGIN { printf "%.0f", all - a - b - c - d }')
    cqe=$(awk -v n="$COST_COUNT" '
              match($0, /send_cqes=-?[0-9]+/) {
                  v = substr($0, RSTART + 10, RLENGTH - 10) + 0
                  if (v >= 0) printf "%.3f", v / n; else printf "-"
                  found = 1
              }
              END { if (!found) exit 1 }' "$COST_DIR/$op.tx.log") ||
        die "dcx_cost printed no send_cqes count for $op ($COST_DIR/$op.tx.log)"
    if [ "$goal" != - ]; then
        result=$(awk -v v="$dcx_tx" -v g="$goal" 'BEGIN { print (v <= g) ? "met" : "missed" }')
    fi
    printf '  %-10s %8s %8s %8s %7s   %-6s %-6s | %8s %8s %8s %8s\n' "$op" "$dcx_tx" \
        "$dcx_rx" "$post" "$cqe" "$([ "$goal" = - ] && echo - || echo "<=$goal")" \
        "$result" "$dev" "$ucx" "$libc" "$other"
    echo "$op,$COST_COUNT,$dcx_tx,$dcx_rx,$post,$cqe,$goal,$result,$dev,$ucx,$libc,$other" >> "$BENCH_CSV"
}

bench_cost() {
    command -v valgrind >/dev/null 2>&1 || die "bench cost needs valgrind (contrib/dcx setup installs it)"
    COST_DIR="$DCX_TOP/bench-results/cost"
    mkdir -p "$COST_DIR"
    echo "op,count,dcx_tx,dcx_rx,post,cqe_per_op,goal,result,tx_device,tx_ucx,tx_libc,tx_other" > "$BENCH_CSV"
    say "bench cost: instructions per operation (callgrind, $COST_COUNT operations after warmup, device model, immediate execution)"
    note "dcx tx/rx: in libdcx_transport.so; post: the whole posting call; cqe: send completions per operation; goal on dcx tx"
    printf '  %-10s %8s %8s %8s %7s   %-6s %-6s | %8s %8s %8s %8s\n' op "dcx tx" "dcx rx" post cqe \
        goal result "tx:dev" "tx:ucx" "tx:libc" "tx:other"
    cost_row put_short uct_dcx_ep_put_short     -  150
    cost_row am_short  uct_dcx_ep_am_short      rx 200
    cost_row put_zcopy uct_dcx_ep_put_zcopy     -  250
    cost_row get_zcopy uct_dcx_ep_get_zcopy     -  250
    cost_row fadd      uct_dcx_ep_atomic64_fetch -  -
    cost_row ucp_put   ucp_put_nbx              -  -
    cost_row ucp_tag   ucp_tag_send_nbx         rx -
    note "callgrind files and logs: $COST_DIR"
}
