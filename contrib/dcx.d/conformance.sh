# contrib/dcx.d/conformance.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# UCX's own googletest suites, run against dcx (UCT and UCP conformance):
#   suite ucx-conformance     every listed UCT and UCP suite, dcx instances only
#   suite ucx-conformance-ci  a subset that fits in ~15 min on 2 cores,
#                             including an uncached build
# UCX's gtest is built from the source of the UCX dcx was built against (the
# host's: Debian 12's UCX 1.13.1; with --ucx 1.18: Debian 13's 1.18.1; with
# --ucx 1.22: the 1.22.0 release source), configured like that UCX was built,
# with dcx added to its transport lists by
# contrib/dcx.d/ucx-patches/gtest-dcx.sed.sh. It runs under dcx-run --emu
# (--emu=mlx5 with contrib/dcx test --face mlx5),
# so the plugin registers itself into the source-built libuct (1.13, 1.18:
# preloaded; 1.22: loaded from UCX_PLUGIN_PATH).
# ucx-conformance-ci is part of the default run (SUITES_ALL, so CI runs it);
# ucx-conformance runs by name. Documentation: docs/conformance.md.
#
# Knobs: DCX_CONF_ALL=1 (or "ucx-conformance --all" style: DCX_CONF_ALL=1)
# runs the known failures too; DCX_CONF_FILTER=PATTERN runs only suites whose
# name matches; DCX_CONF_TEST_TIMEOUT (s, per test, default 120);
# DCX_CONF_SUITE_TIMEOUT (s, per gtest process, default 1800).

# Build dependencies of UCX's gtest beyond DCX_PACKAGES (found from
# configure: HAVE_NUMA is in ucx_info -b; googletest is bundled with UCX).
CONF_PACKAGES=(libnuma-dev)

SUITES_ALL+=(ucx-conformance-ci)
SUITES_BY_NAME+=(ucx-conformance)

CONF_TEST_TIMEOUT=${DCX_CONF_TEST_TIMEOUT:-120}
CONF_SUITE_TIMEOUT=${DCX_CONF_SUITE_TIMEOUT:-1800}

. "$DCX_TOP/contrib/dcx.d/ucx-patches/gtest-dcx.sed.sh"
# The files it edits (restored from the pristine tree before patching).
CONF_PATCHED="uct/uct_test.h uct/test_md.cc uct/uct_p2p_test.cc ucp/ucp_test.h"

# The UCX release of this run: the host's (1.13) or that of the --ucx
# environment this runs in (DCX_IN_ROOT).
conf_release() {
    echo "${DCX_IN_ROOT:-1.13}"
}

# The ucx_info of the UCX dcx was built against: the installation under
# DCX_UCX_PREFIX (1.22: /opt/ucx-1.22.0), otherwise the distribution's.
conf_ucx_info() {
    if [ -n "${DCX_UCX_PREFIX:-}" ]; then
        echo "$DCX_UCX_PREFIX/bin/ucx_info"
    else
        echo ucx_info
    fi
}

# The configure flags that UCX was built with (ucx_info -v: Debian's for
# 1.13 and 1.18, those of the 1.22 prefix's recipe for 1.22) minus the
# install layout, plus no Java/Go bindings and the gtest. Debian 13 builds
# 1.18 also --with-rocm=/usr --with-mad=yes --enable-lcov and with libfuse3:
# ROCm, MAD and lcov are turned off and fuse is not found, as their
# packages are not in the root; they add only GPU modules, ucx_perftest's
# MAD launcher, coverage make targets and the VFS fuse module
# (CONF_MAY_DIFFER).
conf_ucx_configure_flags() {
    "$(conf_ucx_info)" -v | sed -n 's/^# Configured with: //p' | tr ' ' '\n' |
        grep -vE '^--(build|prefix|includedir|mandir|infodir|sysconfdir|localstatedir|libdir|runstatedir)=' |
        sed -E -e 's/^--with-(rocm|mad)(=.*)?$/--without-\1/' -e 's/^--enable-lcov$/--disable-lcov/' |
        tr '\n' ' '
    echo "--without-java --without-go --enable-gtest"
}

# An identifier of the UCX source tree: the archive's sha256 when it came
# from one (ucx-src/<v>/origin), otherwise a hash over the tree's files.
conf_src_id() {
    local src=$1 sum
    sum=$(sed -n 's/.*(sha256 \([0-9a-f]*\).*/\1/p' "$(dirname "$src")/origin" 2>/dev/null || true)
    if [ -z "$sum" ] || [ -n "${DCX_UCX_SRC:-}" ]; then
        sum=$(cd "$src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
              sha256sum | cut -d' ' -f1)
    fi
    echo "${sum:0:12}"
}

# The build cache: per release and per UCX source. The host's keeps its
# name (the Debian package version, e.g. 1.13.1-1); a --ucx environment's
# is ucx<release>-<UCX version>-<source id>.
conf_cache_dir() {
    if [ -z "${DCX_IN_ROOT:-}" ]; then
        echo "$DCX_CACHE/ucx-gtest/$(ucx_deb_version)"
    else
        local src
        src=$(ucx_src_dir)
        [ -n "$src" ] || die "no UCX source tree (contrib/dcx setup --ucx $DCX_IN_ROOT)"
        echo "$DCX_CACHE/ucx-gtest/ucx$DCX_IN_ROOT-$(ucx_version)-$(conf_src_id "$src")"
    fi
}

# Cache key: the patch, the configure flags and the build recipe's version.
conf_key() {
    { cat "$DCX_TOP/contrib/dcx.d/ucx-patches/gtest-dcx.sed.sh"
      conf_ucx_configure_flags
      echo "recipe 1"; } | sha256sum | cut -c1-16
}

# Settings that change struct layouts or inline code shared with the
# installed UCX (and with libuct_dcx.so, built against ucx_info -b).
# Module lists and the configure line itself may differ, and so may
# CONF_MAY_DIFFER (regexes): defines that only GPU modules (uct/ucm rocm),
# ucx_perftest (MAD launcher), the VFS fuse module (src/ucs/vfs/fuse,
# src/tools/vfs) and UCX's gtest's GPU memory types read (UCX 1.18's
# src/ucs/ outside vfs/fuse, src/uct/ and src/ucp/ never do), and
# HAVE_NETLINK_RDMA: found by the source build in Debian 13's current
# headers, not by Debian's build of 1.18.1; it only compiles uct_ib's SMI
# device filter (uct_ib_device_is_smi in src/uct/ib/base/ib_device.c), code
# that dcx, not a uct_ib transport, never runs.
CONF_MAY_DIFFER="HAVE_ROCM HAVE_HIP HAVE_HIP_RUNTIME_H HAVE_HSA_[A-Z_]+ HAVE_MAD FUSE_USE_VERSION HAVE_DECL_FUSE_[A-Z_]+ HAVE_FUSE_[A-Z_]+ HAVE_NETLINK_RDMA"
conf_norm_config() {
    awk '$1 == "#define" { v = $3; for (i = 4; i <= NF; i++) v = v " " $i; print $2 "=" v }' |
        grep -vE "^(UCX_CONFIGURE_FLAGS|[a-z_]+_MODULES|__restrict__|${CONF_MAY_DIFFER// /|})=" | sort
}

conf_check_layout() {
    local build=$1 diffs info
    info=$(conf_ucx_info)
    diffs=$(diff <("$info" -b | conf_norm_config) \
                 <(conf_norm_config < "$build/config.h")) || true
    if [ -n "$diffs" ]; then
        printf '%s\n' "$diffs" | sed 's/^/      /' >&2
        die "the source-built UCX's configuration differs from the installed one's
    (< installed $info -b, > $build/config.h): a missing build dependency?"
    fi
    for v in ENABLE_ASSERT ENABLE_MT ENABLE_DEBUG_DATA ENABLE_PARAMS_CHECK; do
        grep -q "^#define $v " "$build/config.h" || grep -q "^#define $v$" "$build/config.h" ||
            die "$v missing from $build/config.h"
    done
    ! grep -q '^#define ENABLE_STATS' "$build/config.h" || die "ENABLE_STATS set in the source build"
    note "source-built UCX matches the installed $info -b (ENABLE_*, HAVE_*, UCS_*)"
}

# Build (or reuse) UCX's gtest; prints nothing, sets CONF_GTEST.
conf_build() {
    local cache key src pristine build f start flags lock
    cache=$CONF_CACHE
    mkdir -p "$(dirname "$cache")"
    # One build at a time per cache (runs from several worktrees share it).
    exec {lock}>"$cache.lock"
    flock "$lock"
    key=$(conf_key)
    build="$cache/build"
    CONF_GTEST="$build/test/gtest/gtest"
    if [ -f "$cache/stamp" ] && [ "$(cat "$cache/stamp")" = "$key" ] && [ -x "$CONF_GTEST" ]; then
        note "UCX gtest: cached ($cache, key $key)"
        conf_check_layout "$build"
        exec {lock}>&-
        return
    fi
    start=$(date +%s)
    local missing=() p
    for p in "${CONF_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        as_root true || die "missing packages: ${missing[*]} (apt-get install them as root)"
        apt_update_once
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null ||
            die "apt-get install failed for: ${missing[*]}"
    fi
    pristine=$(ucx_src_dir)
    [ -n "$pristine" ] || die "no UCX source tree (contrib/dcx setup)"
    src="$cache/src"
    mkdir -p "$cache"
    flags=$(conf_ucx_configure_flags)
    if [ ! -f "$build/config.status" ] || [ "$(cat "$cache/configured" 2>/dev/null)" != "$flags" ]; then
        note "UCX gtest: copying $pristine and configuring ($flags)"
        rm -rf "$src" "$build" "$cache/stamp"
        cp -a "$pristine" "$src"
        (cd "$src" && ./autogen.sh) > "$cache/autogen.log" 2>&1 || die "UCX autogen failed ($cache/autogen.log)"
        mkdir -p "$build"
        # shellcheck disable=SC2086
        (cd "$build" && "$src/configure" --prefix="$cache/install" $flags) \
            > "$cache/configure.log" 2>&1 || die "UCX configure failed ($cache/configure.log)"
        echo "$flags" > "$cache/configured"
    fi
    conf_check_layout "$build"
    note "UCX gtest: patching the transport lists (dcx)"
    for f in $CONF_PATCHED; do
        cp -p "$pristine/test/gtest/$f" "$src/test/gtest/$f"
    done
    ucx_gtest_patch_dcx "$src/test/gtest" ||
        die "patching UCX $(ucx_version)'s gtest failed (contrib/dcx.d/ucx-patches/gtest-dcx.sed.sh knows 1.13, 1.18 and 1.22)"
    (cd "$src" && for f in $CONF_PATCHED; do
         diff -u "$pristine/test/gtest/$f" "test/gtest/$f" | sed "1,2s|$pristine/||"; done) \
        > "$cache/gtest-dcx.diff" || true
    note "UCX gtest: make -j$DCX_JOBS (libraries, then test/gtest without -Werror)"
    local d
    for d in src/ucm src/ucs src/uct src/ucp src/tools/info src/tools/perf; do
        make -C "$build/$d" -j"$DCX_JOBS" >> "$cache/make.log" 2>&1 ||
            die "UCX build failed in $d ($cache/make.log)"
    done
    # No dependency tracking (Debian's flags): rebuild the test objects.
    make -C "$build/test/gtest" clean >/dev/null 2>&1 || true
    make -C "$build/test/gtest" -j"$DCX_JOBS" all \
        CFLAGS="-g -O2 -Wno-error" CXXFLAGS="-g -O2 -Wno-error" >> "$cache/make.log" 2>&1 ||
        die "UCX gtest build failed ($cache/make.log)"
    echo "$key" > "$cache/stamp"
    note "UCX gtest: built in $(( $(date +%s) - start )) s"
    exec {lock}>&-
}

# How dcx-run loads the plugin here: "preload" (UCX before 1.22) or
# "plugin-path" (UCX_PLUGIN_PATH, 1.22). UCX 1.22's gtest must find dcx
# the way 1.22 users do, with nothing preloaded.
conf_load_mode() {
    local env plugin
    plugin=$(plugin_path)
    env=$("${CONF_RUN[@]}" sh -c 'printf "%s\n%s\n" "${LD_PRELOAD:-}" "${UCX_PLUGIN_PATH:-}"') ||
        die "dcx-run failed"
    if [[ ":$(echo "$env" | sed -n 1p):" == *":$plugin:"* ]]; then
        CONF_LOAD=preload
    elif [[ ":$(echo "$env" | sed -n 2p):" == *":$(cd "$(dirname "$plugin")" && pwd -P):"* ]]; then
        CONF_LOAD="plugin-path"
    else
        die "dcx-run neither preloads $plugin nor puts its directory into UCX_PLUGIN_PATH"
    fi
    case "$(conf_release)" in
    1.13|1.18) [ "$CONF_LOAD" = preload ] || die "UCX $(conf_release): dcx-run does not preload dcx" ;;
    *)         [ "$CONF_LOAD" = plugin-path ] ||
                   die "UCX $(conf_release): dcx-run preloads dcx instead of using UCX_PLUGIN_PATH" ;;
    esac
}

# The gtest binary must load the dcx plugin into the source-built libuct.
# First statically (the libraries it links, and the preloaded plugin), then
# in a real run (listing the dcx tests loads UCX's modules and dcx): every
# libucs/libuct/libucp/libucm initialised comes from the source build, and
# so does the plugin's transport library (its libuct.so.0 dependency
# resolves to the copy already loaded).
conf_check_loading() {
    local cache=$CONF_CACHE out bad preload=()
    if [ "$CONF_LOAD" = preload ]; then
        preload=(LD_PRELOAD="$(plugin_path)")
    fi
    out=$(env -u LD_LIBRARY_PATH LD_TRACE_LOADED_OBJECTS=1 "${preload[@]}" "$CONF_REAL_GTEST" 2>&1) ||
        die "cannot inspect $CONF_REAL_GTEST"
    bad=$(echo "$out" | grep -E 'lib(ucs|uct|ucp|ucm)\.so' | grep -v "$cache/build" || true)
    [ -z "$bad" ] || die "UCX gtest would load the installed UCX next to the source-built one:
$bad"
    if [ "$CONF_LOAD" = preload ]; then
        echo "$out" | grep -q 'libuct_dcx.so' || die "the plugin is not preloaded"
    fi
    out=$(LD_DEBUG=files DCXEMU_FABRIC="dcx-conf-$$-load" "${CONF_RUN[@]}" "$CONF_GTEST" \
              --gtest_list_tests --gtest_filter='dcx/test_md.*' 2>&1 >/dev/null) ||
        die "UCX gtest --gtest_list_tests failed under dcx-run"
    out=$(echo "$out" | sed -n 's/.*calling init: //p' | sort -u)
    bad=$(echo "$out" | grep -E '/lib(ucs|uct|ucp|ucm)\.so' | grep -v "^$cache/build/" || true)
    [ -z "$bad" ] || die "UCX gtest loaded the installed UCX next to the source-built one:
$bad"
    echo "$out" | grep -qE '/libuct_dcx\.so' || die "UCX gtest did not load the dcx plugin"
    note "UCX $(conf_release) gtest: source-built UCX libraries only; dcx $( [ "$CONF_LOAD" = preload ] &&
        echo "preloaded" || echo "loaded from UCX_PLUGIN_PATH, nothing preloaded")"
}

# Excluded from the default run (DCX_CONF_ALL=1 runs them), each as
# "gtest-filter-pattern|reason"; docs/conformance.md explains every entry.
# Tests written for UCX's uct_ib transports that set uct_ib-only options
# (not capabilities a UCT transport advertises): dcx has no such option.
CONF_NA=(
    "dcx/uct_p2p_rma_test_inlresp.*|n/a: sets IB_TX_INLINE_RESP, a uct_ib_iface option"
    "dcx/uct_amo_*_inlresp.*|n/a: sets IB_TX_INLINE_RESP, a uct_ib_iface option"
    "dcx/uct_p2p_rma_test_alloc_methods.*|n/a: sets REG_METHODS, a uct_ib_md option"
    "dcx/uct_p2p_mix_test_alloc_methods.*|n/a: sets REG_METHODS, a uct_ib_md option"
    "dcx/uct_p2p_mix_test_indirect_atomic.*|n/a: sets INDIRECT_ATOMIC, a uct_ib_md option"
)
# Diagnosed dcx transport bugs still excluded (none now; docs/conformance.md
# lists the ones fixed since the first runs).
CONF_KNOWN=(
)
# The same, for one release only (CONF_KNOWN_UCX<release without dots>):
# n/a tests and known dcx bugs that only that release's gtest shows.
CONF_KNOWN_UCX113=(
)
# Since 1.18 (both classes exist in 1.13 without these tests/options).
CONF_NA_SINCE_118=(
    "dcx/uct_p2p_rma_test_xfer.fence_relaxed_order/*|n/a: sets IB_PCI_RELAXED_ORDERING, a uct_ib_md option"
    "dcx/uct_p2p_mix_test_mt.*|n/a: sets IB_REG_MT_THRESH / IB_REG_MT_BIND, uct_ib_md options"
)
# (The data-path tracing that UCX builds with logging up to TRACE_DATA check
# -- 1.18 and 1.22 here; Debian 12's 1.13 is built --disable-logging -- was
# a known dcx bug excluded here until dcx traced; docs/conformance.md.)
CONF_KNOWN_UCX118=("${CONF_NA_SINCE_118[@]}")
CONF_KNOWN_UCX122=("${CONF_NA_SINCE_118[@]}")

# On the mlx5 face only (contrib/dcx test --face mlx5). UCX's own IB
# memory domain opens the face's device too. The face refuses RDMA netlink,
# so rdma-core finds no kernel copy-on-fork (a kernel before 5.13); dcx's
# registrations (ibv_dontfork_range) come before UCX's ibv_fork_init, which
# then fails, and UCX's IB md warns at every fork: the test fails on the
# warning. dcx itself never calls ibv_fork_init (open; docs/mlx5-face.md).
CONF_FACE_MLX5=(
    "dcx/test_md_fork.fork/*|mlx5 face: no copy-on-fork reported; UCX's IB md cannot init fork safety after dcx registered memory"
)

# Every exclusion of this release (and face), one "pattern|reason" a line.
conf_excluded() {
    local name face=()
    name="CONF_KNOWN_UCX$(conf_release | tr -d .)"
    local -n rel=$name
    [ "$DCX_FACE" != mlx5 ] || face=("${CONF_FACE_MLX5[@]}")
    printf '%s\n' "${CONF_NA[@]}" "${CONF_KNOWN[@]}" "${rel[@]}" "${face[@]}" | grep .
}

# Suites: "name|gtest filter[|VAR=value ...]" (dcx instances only). dcx/ is
# the UCT transport dcx; dcxtl/ is UCP with UCX_TLS=dcx. Peer-failure suites
# get short transport timeouts, as UCX's tests set for rc/dc_mlx5
# (test_peer_failure.cc: RC_TIMEOUT?=100us, RC_RETRY_COUNT?=4).
CONF_PF_ENV="UCX_DCX_TIMEOUT=100us UCX_DCX_RETRY_COUNT=4"
# UCX's fence test posts an operation right after uct_ep_fence and ignores
# its status: with out-of-order data placement dcx refuses a fenced
# operation (NO_RESOURCE) until everything before it on the DCI completed
# (docs/conformance.md), so the test runs on in-order placement.
CONF_FENCE_ENV="UCX_DCX_DDP=no"
CONF_UCT_SUITES=(
    "uct-test_p2p_rma|dcx/uct_p2p_rma_test*:dcx/test_p2p_rma_madvise.*"
    "uct-test_p2p_am|dcx/uct_p2p_am_*"
    "uct-test_p2p_err|dcx/uct_p2p_err_test.*"
    "uct-test_p2p_mix|dcx/uct_p2p_mix_test*"
    "uct-test_amo|dcx/uct_amo_*"
    "uct-test_flush|dcx/uct_flush_test.*:dcx/uct_cancel_test.*"
    "uct-test_fence|dcx/uct_fence_test.*|$CONF_FENCE_ENV"
    "uct-test_pending|dcx/test_uct_pending.*"
    "uct-test_peer_failure|dcx/test_uct_peer_failure*|$CONF_PF_ENV"
    "uct-test_many2one_am|dcx/test_many2one_am.*"
    "uct-test_uct_ep|dcx/test_uct_ep.*"
    "uct-test_zcopy_comp|dcx/test_zcopy_comp.*"
    "uct-test_event|dcx/test_uct_event.*"
    "uct-test_progress|dcx/test_uct_progress.*"
    "uct-test_md|dcx/test_md.*:dcx/test_md_fork.*"
)
CONF_UCP_SUITES=(
    "ucp-tag|dcxtl/test_ucp_tag*"
    "ucp-rma|dcxtl/test_ucp_rma*"
    "ucp-amo|dcxtl/test_ucp_atomic*"
    "ucp-am|dcxtl/test_ucp_am*"
    "ucp-stream|dcxtl/test_ucp_stream*"
    "ucp-peer_failure|dcxtl/test_ucp_peer_failure*|$CONF_PF_ENV"
)

# The negative part of a filter: the known failures (unless DCX_CONF_ALL=1).
conf_known_negative() {
    local k neg=""
    [ "${DCX_CONF_ALL:-0}" = 1 ] && return
    while IFS= read -r k; do
        neg="$neg:${k%%|*}"
    done < <(conf_excluded)
    echo "${neg#:}"
}

# Run one suite: gtest processes in a loop, so that a test that hangs (the
# gtest watchdog aborts it after CONF_TEST_TIMEOUT s) or crashes fails on
# its own and the rest of the suite still runs. Counts from the gtest log.
conf_run_suite() {
    local name=$1 filter=$2 env=()
    [ -z "${3:-}" ] || read -r -a env <<< "$3"
    local log="$DCX_LOGS/conf-$name.log" done_tests="" neg rc round=0
    local pass fail skip listed crashed f
    : > "$log"
    neg=$(conf_known_negative)
    listed=$(DCXEMU_FABRIC="dcx-conf-$$-$name-list" "${CONF_RUN[@]}" "$CONF_GTEST" --gtest_list_tests \
             --gtest_filter="$filter${neg:+-$neg}" 2>/dev/null | grep -c '^  ' || true)
    if [ "$listed" -eq 0 ]; then
        note "FAIL $name: no dcx instance of '$filter' in UCX $(conf_release) (is the plugin loaded?)"
        total_failed=$((total_failed + 1))
        failed_names+=("$name (no dcx instances)")
        return
    fi
    # Test classes a release does not have (or has without dcx instances)
    # are reported, not passed over.
    local pat t hit
    for pat in ${filter//:/ }; do
        hit=0
        for t in "${CONF_ALL_TESTS[@]}"; do
            # shellcheck disable=SC2053 # gtest filters are globs
            if [[ $t == $pat ]]; then hit=1; break; fi
        done
        if [ $hit -eq 0 ]; then
            note "ABSENT $name: '$pat' has no dcx test in UCX $(conf_release)'s gtest"
            CONF_ABSENT+=("$name: $pat")
        fi
    done
    while :; do
        round=$((round + 1))
        rc=0
        env "${env[@]}" DCXEMU_FABRIC="dcx-conf-$$-$name-$round" UCX_HANDLE_ERRORS=bt \
            DCXEMU_KEEP_FABRIC=1 \
            timeout -k 10 "$CONF_SUITE_TIMEOUT" "${CONF_RUN[@]}" "$CONF_GTEST" \
            -t "$CONF_TEST_TIMEOUT" \
            --gtest_filter="$filter-${neg:+$neg:}${done_tests#:}" \
            >> "$log" 2>&1 || rc=$?
        # the device's work requests of the round (the fabric was kept for them)
        CONF_WRS=$((CONF_WRS + $(face_fabric_wrs "dcx-conf-$$-$name-$round")))
        "$DCX_PREFIX/bin/dcxemu-stat" -r -f "dcx-conf-$$-$name-$round" >/dev/null || true
        grep -q '^\[==========\] .* ran\.' "$log" && break
        # The process died (watchdog abort, crash, suite timeout): the test
        # that was running fails; continue after it.
        crashed=$(awk '/^\[ RUN      \]/ { t = $4 } /^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]/ { n = $4; sub(/,$/, "", n); if (n == t) t = "" } END { print t }' "$log")
        [ -n "$crashed" ] || break
        echo "[  FAILED  ] $crashed (process died, exit $rc: hang or crash)" >> "$log"
        done_tests=$(awk '/^\[       OK \] |^\[  FAILED  \] [^ ]*\/|^\[  SKIPPED \] [^ ]*\// { n = $4; sub(/,$/, "", n); if (!(n in d)) printf ":%s", n; d[n] = 1 }' "$log")
        [ $round -lt 50 ] || break
    done
    # Tally: UCX's skips print "[     SKIP ] (reason)" and then "[ OK ]".
    conf_tally "$log" > "$log.results"
    pass=$(grep -c '^PASS ' "$log.results" || true)
    skip=$(grep -c '^SKIP ' "$log.results" || true)
    fail=$(grep -c '^FAIL ' "$log.results" || true)
    total_passed=$((total_passed + pass))
    total_failed=$((total_failed + fail))
    total_skipped=$((total_skipped + skip))
    CONF_TABLE+=("$(printf '%-24s %6d %6d %6d %6d' "$name" "$listed" "$pass" "$fail" "$skip")")
    if [ "$fail" -gt 0 ]; then
        note "FAIL $name: $pass passed, $fail failed, $skip skipped (log: $log)"
        grep '^FAIL ' "$log.results" | sed 's/^/      | /'
        failed_names+=("$name")
    else
        note "PASS $name: $pass passed, $skip skipped"
    fi
}

# PASS/SKIP/FAIL NAME [reason] for every test of a gtest log, once each.
conf_tally() {
    awk '
        /^\[ RUN      \] / { cur = $4; why = ""; sk = 0; next }
        /^\[ *SKIP \] / { sk = 1; why = $0; sub(/^\[ *SKIP \] */, "", why); next }
        /^\[  SKIPPED \] [^ ]*\/[^ ]* \(/ { r[$4] = "SKIP " $4; next }
        /^\[       OK \] / { r[$4] = (sk && $4 == cur) ? "SKIP " $4 " " why : "PASS " $4; next }
        /^\[  FAILED  \] [^ ]*\// { n = $4; sub(/,$/, "", n); r[n] = "FAIL " n; next }
        END { for (t in r) print r[t] }' "$1" | sort -k2
}

conf_prepare() {
    CONF_CACHE=$(conf_cache_dir)
    note "UCX $(conf_release) ($(ucx_version)): gtest cache $CONF_CACHE"
    conf_build
    # LD_LIBRARY_PATH (the 1.22 environment's /opt/ucx-1.22.0/lib) would
    # win over the gtest's RUNPATH, i.e. over the source-built libraries.
    # The face of this run (contrib/dcx test --face); UCX's own mlx5
    # transports, which open the mlx5 face's device too, without DEVX there.
    CONF_RUN=(env -u LD_LIBRARY_PATH "$DCX_PREFIX/bin/dcx-run" $FACE_RUN)
    if [ "$DCX_FACE" = mlx5 ]; then
        CONF_RUN=(env -u LD_LIBRARY_PATH UCX_IB_MLX5_DEVX=n "$DCX_PREFIX/bin/dcx-run" $FACE_RUN)
    fi
    # The libtool wrapper runs the real binary; inspect that.
    CONF_REAL_GTEST="$(dirname "$CONF_GTEST")/.libs/gtest"
    [ -x "$CONF_REAL_GTEST" ] || CONF_REAL_GTEST=$CONF_GTEST
    CONF_GTEST=$CONF_REAL_GTEST
    conf_load_mode
    conf_check_loading
    # Every dcx test of this release's gtest ("Suite.test" names).
    local list
    list=$(DCXEMU_FABRIC="dcx-conf-$$-all" "${CONF_RUN[@]}" "$CONF_GTEST" \
           --gtest_list_tests --gtest_filter='dcx/*:dcxtl/*' 2>/dev/null) ||
        die "UCX gtest --gtest_list_tests failed under dcx-run"
    mapfile -t CONF_ALL_TESTS < <(echo "$list" | awk '/^[^ ]/ { s = $1; next } /^  / { print s $1 }')
    [ ${#CONF_ALL_TESTS[@]} -gt 0 ] || die "UCX gtest lists no dcx test"
    CONF_TABLE=()
    CONF_ABSENT=()
    CONF_WRS=0
}

conf_run_list() {
    local entry name filter extra k
    for entry in "$@"; do
        IFS='|' read -r name filter extra <<< "$entry"
        if [ -n "${DCX_CONF_FILTER:-}" ] && ! [[ $name =~ $DCX_CONF_FILTER ]]; then
            continue
        fi
        conf_run_suite "$name" "$filter" "$extra"
    done
    note ""
    note "UCX $(conf_release) ($(ucx_version)), dcx loaded by $CONF_LOAD:"
    note "$(printf '%-24s %6s %6s %6s %6s' suite listed passed failed skipped)"
    local row
    for row in "${CONF_TABLE[@]}"; do
        note "$row"
    done
    if [ "${DCX_CONF_ALL:-0}" != 1 ]; then
        note "not run (docs/conformance.md; DCX_CONF_ALL=1 runs them):"
        while IFS= read -r k; do
            note "  ${k%%|*}: ${k#*|}"
        done < <(conf_excluded)
    fi
    if [ ${#CONF_ABSENT[@]} -gt 0 ]; then
        note "not in UCX $(conf_release)'s gtest (no dcx test matches):"
        for k in "${CONF_ABSENT[@]}"; do
            note "  $k"
        done
    fi
    # The device's own counters: the runs moved their data through it.
    note "device $FACE_DEV: $CONF_WRS work requests executed"
    # (uct-test_md alone moves no data)
    if [ "$CONF_WRS" -eq 0 ] && printf '%s\n' "${CONF_TABLE[@]}" | grep -qv '^uct-test_md '; then
        note "FAIL ucx-conformance-device: the device executed no work request"
        total_failed=$((total_failed + 1))
        failed_names+=("ucx-conformance-device")
    fi
}

suite_ucx-conformance() {
    conf_prepare
    conf_run_list "${CONF_UCT_SUITES[@]}" "${CONF_UCP_SUITES[@]}"
}

# CI subset: every UCT suite plus the small UCP ones (see docs/conformance.md).
CONF_CI_SUITES=()
CONF_CI_UCP="ucp-tag-ci ucp-rma ucp-amo ucp-am ucp-stream ucp-peer_failure"
# ucp-tag without test_ucp_tag_xfer (468 of its 625 tests, ~4 min here).
CONF_CI_EXTRA=(
    "ucp-tag-ci|dcxtl/test_ucp_tag_match*:dcxtl/test_ucp_tag_probe*:dcxtl/test_ucp_tag_cancel*:dcxtl/test_ucp_tag_limits*:dcxtl/test_ucp_tag_nbx*:dcxtl/test_ucp_tag_mem_type*:dcxtl/test_ucp_tag_mt*:dcxtl/test_ucp_tag_perf*"
)
suite_ucx-conformance-ci() {
    conf_prepare
    local s
    if [ ${#CONF_CI_SUITES[@]} -eq 0 ]; then
        CONF_CI_SUITES=("${CONF_UCT_SUITES[@]}")
        for s in "${CONF_CI_EXTRA[@]}" "${CONF_UCP_SUITES[@]}"; do
            [[ " $CONF_CI_UCP " == *" ${s%%|*} "* ]] && CONF_CI_SUITES+=("$s")
        done
    fi
    conf_run_list "${CONF_CI_SUITES[@]}"
}
