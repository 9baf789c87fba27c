# contrib/dcx.d/cost.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# contrib/dcx bench cost: what one operation costs the CPU, counted (not
# timed) by callgrind around test/bench/dcx_cost's measured loop:
#   dcx tx   instructions in libdcx_transport.so per operation, posting and
#            the sender's progress (its completions included); a stream
#            that progresses every 16 posts and when out of resources (the
#            sender's progress called until it reports nothing done)
#   dcx rx   the same for the receiver's progress (active messages, tags)
#   post     every instruction of the posting call (UCT call or ucp_*_nbx
#            to its return, the device's work-request functions included)
#   cqe      send CQEs the device wrote per operation (the model's counter,
#            read by dcx_cost around the measured loop)
#   tx by object: where the sender's instructions go (dcx, the device
#            model and verbs, UCX, libc, the rest)
# Counted on the device model in immediate execution mode, so the counts
# repeat from run to run. "bench cost mlx5" (below) counts the posting call
# of dcx (rdma-core's builders and its own WQE writer), dc_mlx5 and rc_mlx5
# side by side on the device's mlx5 face.

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
    local face=${1:-api}
    command -v valgrind >/dev/null 2>&1 || die "bench cost needs valgrind (contrib/dcx setup installs it)"
    COST_DIR="$DCX_TOP/bench-results/cost"
    mkdir -p "$COST_DIR"
    case "$face" in
    api)  ;;
    mlx5)
        bench_cost_mlx5
        return ;;
    *)    die "unknown face '$face' for bench cost (faces: api mlx5)" ;;
    esac
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

# --- bench cost mlx5: dcx next to UCX's dc_mlx5 and rc_mlx5 ----------------
#
# The same measured loop on the device's mlx5 face (docs/mlx5-face.md):
# dcx on its hardware binding (the system's libibverbs and libmlx5), UCX's
# dc_mlx5 and rc_mlx5 (UCX_IB_MLX5_DEVX=n), each on dcxemu_mlx5_0:1. Counted:
# every instruction of the posting thread from the UCT (or ucp_*_nbx) call
# to its return (--toggle-collect=cost_post), by object. A doorbell is a
# store to a PROT_NONE UAR page; the face's SIGSEGV handler takes the WQEs
# there and the device runs them in it. Callgrind delivers the trap only
# with --vex-guest-max-insns=1 --px-default=allregs-at-mem-access (and the
# face keeps its UARs read-write under valgrind unless DCXEMU_UAR=trap), and
# runs a signal handler in a context of its own, outside cost_post: the
# handler and the device's work are not counted. The check at the end shows
# it: the same runs with DCXEMU_UAR=rw (no trap at all; the engine thread's
# backstop takes the doorbells) count the same.

# dcx twice: through rdma-core's builders (UCX_DCX_POST=verbs) and writing
# its own WQEs (dcx_direct: UCX_DCX_POST=direct).
COST_MLX5_TLS=(dcx dcx_direct dc_mlx5 rc_mlx5)
# The operations measured (DCX_COST_MLX5_OPS: a subset, e.g. "put_short am_short").
read -r -a COST_MLX5_OPS <<< "${DCX_COST_MLX5_OPS:-put_short am_short put_zcopy get_zcopy fadd ucp_put ucp_tag}"

COST_MLX5_DEV=dcxemu_mlx5_0:1
COST_MLX5_VG=(--vex-guest-max-insns=1 --px-default=allregs-at-mem-access)

# The transport's own library, as an object pattern.
cost_mlx5_own() {
    case "$1" in
    dcx|dcx_direct) echo 'libdcx_transport' ;;
    *)   echo '/libuct_ib[.-]' ;;
    esac
}

# The function whose insides a run on the face counts (cost_mlx5_poll:
# the sender's progress).
COST_MLX5_TOGGLE=cost_post

# One callgrind run on the face: $1 output name, $2 transport, $3 op,
# $4 DCXEMU_UAR (trap|rw), $5 count, $6 warmup. Fails if no dump was
# written (a failure after the dump, in the teardown, is logged).
cost_mlx5_callgrind() {
    local out=$1 tl=$2 op=$3 uar=$4 count=$5 warmup=$6 rc=0 post=
    local -a run=("$DCX_PREFIX/bin/dcx-run" --emu=mlx5)
    case "$tl" in
    dcx)        post=verbs ;;
    dcx_direct) post=direct tl=dcx ;;
    esac
    [ -z "$post" ] || run+=(env "UCX_DCX_POST=$post")
    if [ "$tl" != dcx ]; then
        # UCX's transports: the face alone, no dcx plugin
        run=("$DCX_PREFIX/bin/dcxemu-stat" -r -- env
             "LD_PRELOAD=$DCX_PREFIX/lib/libdcxemu_mlx5.so.0")
    fi
    local attempt
    # Under valgrind the engine thread's backstop now and then takes a WQE
    # before its trapped store does, and such a WQE may fail on the face
    # (then UCX aborts): a run without its dump is tried again, its log kept.
    for attempt in 1 2 3; do
        rm -f "$COST_DIR/$out" "$COST_DIR/$out".[0-9]* "$COST_DIR/$out.parsed"
        rc=0
        DCXEMU_FABRIC="$BENCH_FABRIC-$out" DCXEMU_EXEC=immediate DCXEMU_UAR="$uar" \
            UCX_IB_MLX5_DEVX=n DCX_COST_TL="$tl" DCX_COST_DEV="$COST_MLX5_DEV" \
            DCX_COST_WARMUP="$warmup" UCX_TLS="$tl" UCX_NET_DEVICES="$COST_MLX5_DEV" \
            timeout 1200 "${run[@]}" \
            valgrind --tool=callgrind --collect-atstart=no "${COST_MLX5_VG[@]}" \
            --toggle-collect="$COST_MLX5_TOGGLE" --callgrind-out-file="$COST_DIR/$out" \
            "$DCX_BUILD/test/bench/dcx_cost" "$op" "$count" \
            > "$COST_DIR/$out.log" 2>&1 || rc=$?
        if grep -q 'unsupported=' "$COST_DIR/$out.log"; then
            return 0
        fi
        [ ! -s "$COST_DIR/$out.1" ] || break
        cp "$COST_DIR/$out.log" "$COST_DIR/$out.failed$attempt.log"
        echo "$out: attempt $attempt wrote no dump (exit $rc, $out.failed$attempt.log)" >> "$COST_DIR/failures"
    done
    [ -s "$COST_DIR/$out.1" ] || {
        tail -20 "$COST_DIR/$out.log" >&2
        die "dcx_cost $op on $tl under callgrind wrote no dump (log: $COST_DIR/$out.log)"; }
    [ $rc -eq 0 ] || echo "$out: dcx_cost exited $rc after the measured loop" >> "$COST_DIR/failures"
    cost_parse "$COST_DIR/$out.1" > "$COST_DIR/$out.parsed"
}

# Instructions per operation of the objects matching $2 but not $3.
cost_per_op_but() {
    awk -v p="$2" -v x="$3" -v n="$COST_N" '
            $1 ~ p && (x == "" || $1 !~ x) { s += $2 } END { printf "%.0f", s / n }' "$1"
}

# Self instructions by function of a callgrind dump, largest first:
# "<Ir> <object>:<function>" (names from the raw file, inlined code kept
# with its function).
cost_functions() {
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
        /^fn=/  { fn = resolve("fn", substr($0, 4)); next }
        /^cfn=/ { resolve("fn", substr($0, 5)); next }
        /^calls=/ { inclusive = 1; next }
        /^[0-9+*-]/ {
            if (inclusive) { inclusive = 0; next }
            o = ob; sub(/.*\//, "", o); sub(/\.so.*/, "", o)
            self[o ":" fn] += $2
            next
        }
        END { for (f in self) printf "%d %s\n", self[f], f }' "$1" | sort -nr
}

# libmlx5 is stripped: its work-request functions (static, reached through
# ibv_qp_ex's pointers) have no names in the dump. Names them after the
# inline verbs.h / mlx5dv.h wrapper whose line called them from a named
# function: "<address> <wrapper>" lines.
cost_mlx5_names() {
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
        function pos(tok) {
            if (tok == "*") return line
            if (tok ~ /^[+-]/) return line + tok
            return tok + 0
        }
        /^ob=/  { resolve("ob", substr($0, 4)); next }
        /^cob=/ { resolve("ob", substr($0, 5)); next }
        /^fl=/  { fl = resolve("fl", substr($0, 4)); file = fl; next }
        /^fi=/ || /^fe=/ { file = resolve("fl", substr($0, 4)); next }
        /^cfi=/ || /^cfl=/ { resolve("fl", substr($0, 5)); next }
        /^fn=/  { fn = resolve("fn", substr($0, 4)); file = fl; next }
        /^cfn=/ { cfn = resolve("fn", substr($0, 5)); next }
        /^calls=/ { incall = 1; next }
        /^[0-9+*-]/ {
            line = pos($1)
            if (incall && cfn ~ /^0x/ && fn !~ /^0x/ && file ~ /\/infiniband\//)
                print cfn, file, line
            incall = 0
        }' "$1" | sort -u |
    while read -r hex file line; do
        [ -r "$file" ] || continue
        awk -v L="$line" -v h="$hex" '
            NR <= L && /^static inline / && match($0, /[A-Za-z0-9_]+\(/) {
                n = substr($0, RSTART, RLENGTH - 1)
            }
            NR == L { if (n != "") print h, n; exit }' "$file"
    done | sort -u
}

# One measured cell: sets the globals of one (op, transport); "-" when the
# transport lacks the operation.
cost_mlx5_cell() {
    local op=$1 tl=$2 out="mlx5.$1.$2" p own
    cost_mlx5_callgrind "$out" "$tl" "$op" trap "$COST_COUNT" "$COST_WARMUP"
    if grep -q 'unsupported=' "$COST_DIR/$out.log"; then
        C_WHY=$(sed -n 's/.*unsupported=//p' "$COST_DIR/$out.log" | head -1)
        C_POST=- C_OWN=- C_VERBS=- C_UCX=- C_LIBC=- C_BENCH=- C_FACE=- C_CQE=- C_WRS=- C_TRIES=-
        return
    fi
    C_WHY=
    p="$COST_DIR/$out.parsed"
    own=$(cost_mlx5_own "$tl")
    COST_N=$COST_COUNT
    C_OWN=$(cost_per_op_but "$p" "$own" '')
    C_VERBS=$(cost_per_op_but "$p" 'libmlx5|libibverbs' '')
    C_UCX=$(cost_per_op_but "$p" '/libuc[mpst][.-]|/libuct_[a-z_]*[.-]' "$own")
    C_LIBC=$(cost_per_op_but "$p" '/libc[.-]' '')
    C_BENCH=$(cost_per_op_but "$p" '/dcx_cost$' '')
    C_FACE=$(cost_per_op_but "$p" 'libdcxemu' '')
    C_POST=$(awk -v all="$(cost_per_op_but "$p" '.' '')" -v b="$C_BENCH" \
                 'BEGIN { printf "%.0f", all - b }')
    read -r C_CQE C_WRS C_TRIES < <(awk -v n="$COST_COUNT" '
        match($0, /send_cqes=-?[0-9]+ wrs=-?[0-9]+ tries=[0-9]+/) {
            split(substr($0, RSTART, RLENGTH), f, /[= ]/)
            printf "%.3f %.3f %.3f\n", f[2] / n, f[4] / n, f[6] / n; found = 1
        }
        END { if (!found) exit 1 }' "$COST_DIR/$out.log") ||
        die "dcx_cost printed no send_cqes count for $op on $tl ($COST_DIR/$out.log)"
}

# The trap's handler is not counted: the posting count of a short run with
# trapped doorbells equals that with read-write UARs (no trap), or is
# within 1% of it (dc_mlx5's moves by a few instructions with when its
# completions arrive; a counted handler would add hundreds).
cost_mlx5_check() {
    local op tl a b line=()
    COST_N=200
    for op in put_short am_short; do
        for tl in "${COST_MLX5_TLS[@]}"; do
            cost_mlx5_callgrind "chk.$op.$tl.trap" "$tl" "$op" trap 200 50
            cost_mlx5_callgrind "chk.$op.$tl.rw" "$tl" "$op" rw 200 50
            a=$(cost_per_op_but "$COST_DIR/chk.$op.$tl.trap.parsed" '.' '/dcx_cost$')
            b=$(cost_per_op_but "$COST_DIR/chk.$op.$tl.rw.parsed" '.' '/dcx_cost$')
            line+=("$op/$tl $a/$b $(awk -v a="$a" -v b="$b" 'BEGIN {
                       d = (a > b) ? a - b : b - a
                       print (d == 0) ? "same" : (d <= 0.01 * b) ? "within-1%" : "DIFFERENT" }')")
            echo "$op,$tl,check,$a,$b" >> "$COST_CSV_CHECK"
        done
    done
    note "check, posting instructions per operation with trapped doorbells / with DCXEMU_UAR=rw (no trap):"
    note "  ${line[*]:0:4}"
    note "  ${line[*]:4:4}"
}

# A stream that wraps every transport's send queue more than once (dc_mlx5:
# 1,024 basic blocks, 2 per put_short; rc_mlx5: 2,048, 1 per put_short).
# UCX's dc_mlx5 and rc_mlx5 poll one send CQE per progress call: dcx_cost
# calls the sender's progress until it reports nothing done, so none of
# them is refused a post (tries 1; a run where one was fails the bench, as
# its count would include the refused tries).
COST_MLX5_COUNT=${DCX_COST_COUNT:-2000}

# Per send CQE polled: the sender's progress (cost_progress_tx) over a
# stream of put_zcopy, every one signaled on every transport; all of its
# instructions (dcx_cost's own, the completion callback, excluded) over the
# send CQEs the device wrote in the measured loop, which ends with a
# progress until nothing is left: every CQE written is polled in it. Sets
# poll[TL] (of the caller).
cost_mlx5_poll() {
    local tl out cqes
    for tl in "${COST_MLX5_TLS[@]}"; do
        out="mlx5.poll.$tl"
        COST_MLX5_TOGGLE=cost_progress_tx \
            cost_mlx5_callgrind "$out" "$tl" put_zcopy trap "$COST_COUNT" "$COST_WARMUP"
        cqes=$(sed -n 's/.* send_cqes=\([0-9]*\) .*/\1/p' "$COST_DIR/$out.log")
        if [ -z "$cqes" ] || [ "$cqes" -eq 0 ]; then
            die "dcx_cost put_zcopy on $tl wrote no send CQE to poll ($COST_DIR/$out.log)"
        fi
        COST_N=$cqes
        poll[$tl]=$(cost_per_op_but "$COST_DIR/$out.parsed" '.' '/dcx_cost$')
        echo "poll_cqe,$tl,$COST_COUNT,${poll[$tl]},,,,,,,$(awk -v c="$cqes" -v n="$COST_COUNT" \
             'BEGIN { printf "%.3f", c / n }'),,," >> "$BENCH_CSV"
    done
}

bench_cost_mlx5() {
    local op tl row dcx dd dc rc ratio dratio result dresult pct refused=()
    local -A post=() split=() poll=()
    COST_COUNT=$COST_MLX5_COUNT
    COST_WARMUP=${DCX_COST_WARMUP:-200}
    COST_CSV_CHECK="$COST_DIR/mlx5-check.csv"
    : > "$COST_CSV_CHECK"
    rm -f "$COST_DIR/failures"
    echo "op,tl,count,post,own,verbs,ucx,libc,bench,face,cqe_per_op,wr_per_op,tries_per_op,unsupported" > "$BENCH_CSV"
    say "bench cost mlx5: instructions per operation in the posting thread (callgrind, $COST_COUNT operations after $COST_WARMUP, the device's mlx5 face, $COST_MLX5_DEV)"
    note "post: the UCT call (UCP: ucp_*_nbx) to its return, the doorbell trap's handler and the device excluded"
    note "dcx: through rdma-core's builders (UCX_DCX_POST=verbs); dcx_direct: its own WQE writer (UCX_DCX_POST=direct)"
    note "own: the transport's library (dcx: libdcx_transport, dc_mlx5/rc_mlx5: libuct_ib); verbs: libmlx5 + libibverbs;"
    note "ucx: the rest of UCX; cqe: send CQEs the device wrote per operation (polled by the sender's progress);"
    note "wr: work requests the device ran per operation; tries: posting calls per operation (those refused with"
    note "NO_RESOURCE are in post); -: not offered"
    printf '  %-10s %-10s %7s | %6s %6s %6s %6s | %6s %6s %6s\n' op tl post own verbs ucx libc cqe wr tries
    for op in "${COST_MLX5_OPS[@]}"; do
        for tl in "${COST_MLX5_TLS[@]}"; do
            cost_mlx5_cell "$op" "$tl"
            post[$op.$tl]=$C_POST
            split[$op.$tl]="$C_OWN in libdcx_transport, $C_VERBS in libmlx5 + libibverbs, $C_UCX in the rest of UCX, $C_LIBC in libc"
            printf '  %-10s %-10s %7s | %6s %6s %6s %6s | %6s %6s %6s%s\n' "$op" "$tl" "$C_POST" \
                "$C_OWN" "$C_VERBS" "$C_UCX" "$C_LIBC" "$C_CQE" "$C_WRS" "$C_TRIES" \
                "${C_WHY:+   (not offered: $C_WHY)}"
            awk -v t="$C_TRIES" 'BEGIN { exit !(t != "-" && t > 1) }' && refused+=("$op/$tl")
            [ "$C_FACE" = - ] || [ "$C_FACE" -eq 0 ] ||
                note "  $op/$tl: $C_FACE instructions per operation in the face or the model: the trap was counted"
            echo "$op,$tl,$COST_COUNT,$C_POST,$C_OWN,$C_VERBS,$C_UCX,$C_LIBC,$C_BENCH,$C_FACE,$C_CQE,$C_WRS,$C_TRIES,$C_WHY" >> "$BENCH_CSV"
        done
    done

    [ ${#refused[@]} -eq 0 ] ||
        die "refused posts (tries > 1) in ${refused[*]}: their counts include the refused tries"
    cost_mlx5_poll
    for tl in "${COST_MLX5_TLS[@]}"; do
        post[poll_cqe.$tl]=${poll[$tl]}
    done
    echo
    say "side by side: posting instructions per operation; goals dcx <= 1.5 x dc_mlx5 for put_short and am_short, dcx_direct < dc_mlx5"
    note "poll_cqe: the sender's progress per send CQE it polled (a put_zcopy stream, every one signaled)"
    printf '  %-10s %8s %10s %8s %8s %12s %-6s %15s %-6s\n' op dcx dcx_direct dc_mlx5 rc_mlx5 dcx/dc_mlx5 result direct/dc_mlx5 result
    for op in "${COST_MLX5_OPS[@]}" poll_cqe; do
        dcx=${post[$op.dcx]} dd=${post[$op.dcx_direct]} dc=${post[$op.dc_mlx5]} rc=${post[$op.rc_mlx5]}
        ratio=$(awk -v a="$dcx" -v b="$dc" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b; else print "-" }')
        dratio=$(awk -v a="$dd" -v b="$dc" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b; else print "-" }')
        result=- dresult=-
        if [ "$op" = put_short ] || [ "$op" = am_short ]; then
            result=$(awk -v r="$ratio" 'BEGIN { print (r != "-" && r <= 1.5) ? "met" : "missed" }')
        fi
        [ "$dratio" = - ] || dresult=$(awk -v a="$dd" -v b="$dc" 'BEGIN { print (a < b) ? "met" : "missed" }')
        printf '  %-10s %8s %10s %8s %8s %12s %-6s %15s %-6s\n' "$op" "$dcx" "$dd" "$dc" "$rc" "$ratio" "$result" "$dratio" "$dresult"
        echo "$op,ratio,$COST_COUNT,$ratio,,,,,,,,,,$result" >> "$BENCH_CSV"
        echo "$op,direct_ratio,$COST_COUNT,$dratio,,,,,,,,,,$dresult" >> "$BENCH_CSV"
    done

    echo
    note "where dcx's posting instructions go (self instructions per operation, top functions; libmlx5's are static"
    note "and unnamed: each is named by the verbs.h / mlx5dv.h inline that called it):"
    for op in put_short am_short; do
      for tl in dcx dcx_direct; do
        [ -s "$COST_DIR/mlx5.$op.$tl.1" ] || continue
        note "  $op, $tl: ${post[$op.$tl]} = ${split[$op.$tl]}; by function:"
        cost_mlx5_names "$COST_DIR/mlx5.$op.$tl.1" > "$COST_DIR/mlx5.$op.$tl.names"
        cost_functions "$COST_DIR/mlx5.$op.$tl.1" | head -10 |
            awk -v n="$COST_COUNT" -v names="$COST_DIR/mlx5.$op.$tl.names" '
                BEGIN { while ((getline l < names) > 0) { split(l, f, " "); nm[f[1]] = f[2] } }
                {
                    fn = $2; sub(/.*:/, "", fn)
                    via = (fn in nm) ? "  (called by " nm[fn] ")" : ""
                    printf "        %7.1f  %s%s\n", $1 / n, $2, via
                }'
      done
    done

    echo
    cost_mlx5_check
    [ ! -s "$COST_DIR/failures" ] || {
        note "runs that failed after their measured loop (their counts stand; see the logs):"
        sed 's/^/      /' "$COST_DIR/failures"; }
    note "callgrind files and logs: $COST_DIR/mlx5.* (check runs: chk.*)"
}
