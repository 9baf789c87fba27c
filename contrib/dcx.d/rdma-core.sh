# contrib/dcx.d/rdma-core.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite rdma-core: the device's mlx5 face and dcx's hardware binding under
# the libibverbs and libmlx5 of four Debian releases (docs/rdma-core-releases.md),
# none of them installed:
#   bullseye  rdma-core 33 (Debian 11)
#   bookworm  rdma-core 44 (Debian 12, the host's release)
#   trixie    rdma-core 56 (Debian 13)
#   sid       whatever unstable has (65 when this was written)
# Each release's libibverbs1, ibverbs-providers, ibverbs-utils and perftest
# (and the libraries they need that the host lacks or has too old) come from
# the distribution's archive through a private apt configuration and are
# unpacked with dpkg-deb into $DCX_CACHE/rdma-core/<version>/. A program runs
# on a release through a wrapper (build/rdma-core/<version>/bin, made on
# every run): LD_LIBRARY_PATH names the
# release's libraries, and in a private mount namespace the release's
# providers and /etc/libibverbs.d lie at the paths compiled into its
# libibverbs (its VERBS_PROVIDER_DIR), so the libmlx5 that libibverbs loads
# is that release's and no other (each run shows it from /proc/PID/maps).
# A release whose libraries need a newer glibc than the host's runs with its
# own glibc: its own dynamic loader starts the program.

SUITES_BY_NAME+=(rdma-core)

# DCX_RDMA_CORE_RELEASES="trixie sid" runs only those (the summary names
# what ran).
read -r -a RDMA_CORE_RELEASES <<< "${DCX_RDMA_CORE_RELEASES:-bullseye bookworm trixie sid}"
# The rdma-core version each release must carry (a prefix of the package's
# version; sid's moves, so any).
declare -A RDMA_CORE_WANT=([bullseye]=33. [bookworm]=44. [trixie]=56. [sid]=)
# What is fetched: rdma-core's libraries and clients, then what they link
# that the host may lack (first name that the release has of a|b).
RDMA_CORE_PACKAGES=(libibverbs1 ibverbs-providers ibverbs-utils perftest
                    libnl-3-200 libnl-route-3-200 libibumad3
                    "librdmacm1t64|librdmacm1" libpci3)
# Bump when the way a release is fetched or unpacked changes.
RDMA_CORE_RECIPE=1
# The programs wrapped per release: the release's own where it has them,
# the host's otherwise (ucx_perftest and the gtest are always the host's).
RDMA_CORE_CLIENTS=(ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_lat ib_write_bw
                   ib_send_lat ib_read_lat ib_atomic_lat)

# The dcx UCT gtest on the face: the tests that need what the face does not
# have (FACE_MLX5_GTEST_NEEDS in contrib/dcx, the list that
# contrib/dcx test --face mlx5 leaves out too; docs/rdma-core-releases.md
# says why) are left out; of the rest, each release runs the
# policy-parameterized tests under the first DCI policy only (the others
# ask nothing more of rdma-core; DCX_RDMA_CORE_GTEST_FILTER='*' runs them too).
RDMA_CORE_GTEST_FILTER="${DCX_RDMA_CORE_GTEST_FILTER:-uct_*:policy/*/0:umr/*}-$(IFS=:; echo "${FACE_MLX5_GTEST_NEEDS[*]}")"
# What one release cannot do, left out there only. rdma-core before v36 has
# no raw WQE builder: dcx's DCIs are refused MLX5DV_QP_EX_WITH_RAW_WQE, dcx
# retries without it and offers no masked atomics (the retry is what the
# release checks), so the tests that expect them do not apply. rdma-core
# before v43 has no MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG: a view's mkey
# cannot change its key, so a destroyed view's key may reach a later view
# the device gives the same index (the limitation docs/rdma-core-releases.md
# describes), which the stale-key test shows. rdma-core before v37 has no
# DCI streams (mlx5dv_query_device reports none): hw_dcs shares one DCI in
# one stream there, so the test that shows streams running side by side
# does not apply.
RDMA_CORE_GTEST_RELEASE=
declare -A RDMA_CORE_GTEST_RELEASE_NEEDS=(
    [bullseye]='policy/uct_ops.capabilities/0:policy/uct_ops.atomics64_masked_one_request/0:policy/uct_ops.atomics32/0:umr/uct_umr_pool.stale_view_key_fails_on_next_view/0:uct_faults.hw_dcs_stalled_peer_holds_back_only_its_stream'
)

rdma_core_dir() {
    echo "$DCX_CACHE/rdma-core"
}

# The archive: DCX_DEBIAN_MIRROR, else the first Debian archive URI of the
# host's own apt sources (not its security archive), else the root's.
rdma_core_mirror() {
    local uri
    if [ -n "${DCX_DEBIAN_MIRROR:-}" ]; then
        echo "$DCX_DEBIAN_MIRROR"
        return
    fi
    uri=$( { awk '/^Types:/ { deb = ($0 ~ /[ \t]deb([ \t]|$)/) }
                 /^URIs:/ && deb { print $2 }' /etc/apt/sources.list.d/*.sources 2>/dev/null
             sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null
           } | grep -v -- '-security' | grep '/debian/\{0,1\}$' | head -1) || true
    echo "${uri:-$ROOT_MIRROR}"
}

# rdma_core_apt SUITE ARGS...: apt-get or apt-cache (ARGS[0]) against the
# suite's private configuration: its own sources, lists, cache and an empty
# dpkg status, so the host's apt state is neither read nor written.
rdma_core_apt() {
    local suite=$1 tool=$2 state
    shift 2
    state="$(rdma_core_dir)/apt/$suite"
    "$tool" -q -o Dir::Etc::sourcelist="$state/sources.list" -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$state/lists" -o Dir::Cache="$state/cache" \
        -o Dir::State::status="$state/status" -o APT::Sandbox::User=root \
        -o Debug::NoLocking=1 "$@"
}

# The glibc version (as 2.36) of the host, or the highest GLIBC_ symbol
# version that the shared objects FILE... ask for.
host_glibc() {
    getconf GNU_LIBC_VERSION | awk '{print $2}'
}
glibc_wanted() {
    objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
        sort -uV | tail -1
}

# version_gt A B: version A is newer than B.
version_gt() {
    [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$1" ]
}

# rdma_core_fetch SUITE: download and unpack SUITE's packages unless the
# cache has them; prints the directory of the unpacked release. Dies when
# the release cannot be fetched or is not what it must be.
rdma_core_fetch() {
    local suite=$1 top state link dir log pkgs=() p alt name version want upstream
    local host_libc libc_wanted debs tmp
    [ -n "${RDMA_CORE_WANT[$suite]+known}" ] ||
        die "unknown release '$suite' (releases: ${!RDMA_CORE_WANT[*]})"
    top=$(rdma_core_dir)
    state="$top/apt/$suite"
    link="$top/$suite"
    if [ -r "$link/.dcx-release" ] &&
       [ "$(sed -n 1p "$link/.dcx-release")" = "recipe $RDMA_CORE_RECIPE" ] &&
       [ -z "${DCX_RDMA_CORE_REFRESH:-}" ]; then
        readlink -f "$link"
        return
    fi
    [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] ||
        die "rdma-core of $suite: no /usr/share/keyrings/debian-archive-keyring.gpg to check the archive with (apt-get install debian-archive-keyring)"
    mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
    : > "$state/status"
    log="$state/fetch.log"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(rdma_core_mirror) $suite main" \
        > "$state/sources.list"
    note "rdma-core of $suite: apt-get update ($(cut -d' ' -f3- "$state/sources.list"); log: $log)" >&2
    rdma_core_apt "$suite" apt-get update > "$log" 2>&1 ||
        { tail -5 "$log" >&2; die "rdma-core of $suite cannot be fetched: apt-get update failed (log: $log)"; }
    # apt-get update exits 0 when an index could not be downloaded
    if grep -Eq '^(W|E): (Failed to fetch|Some index files failed)' "$log"; then
        grep -E '^(W|E):' "$log" | head -3 >&2
        die "rdma-core of $suite cannot be fetched: the archive's index could not be downloaded (log: $log)"
    fi
    for alt in "${RDMA_CORE_PACKAGES[@]}"; do
        name=
        for p in ${alt//|/ }; do
            if rdma_core_apt "$suite" apt-cache show "$p" 2>/dev/null | grep "^Version:" >/dev/null; then
                name=$p
                break
            fi
        done
        [ -n "$name" ] || die "rdma-core of $suite: the archive has no package ${alt//|/ or }"
        pkgs+=("$name")
    done
    version=$(rdma_core_apt "$suite" apt-cache show libibverbs1 | sed -n 's/^Version: //p' | sort -V | tail -1)
    want=${RDMA_CORE_WANT[$suite]}
    case "$version" in
    "$want"*) ;;
    *) die "rdma-core of $suite is $version, expected $want*: the matrix needs that release" ;;
    esac
    dir="$top/$version"
    debs="$state/debs"
    rm -rf "$debs" "$dir"
    mkdir -p "$debs" "$dir/root"
    (cd "$debs" && rdma_core_apt "$suite" apt-get download "${pkgs[@]}") >> "$log" 2>&1 ||
        { tail -5 "$log" >&2; die "rdma-core of $suite cannot be fetched: apt-get download ${pkgs[*]} failed (log: $log)"; }
    for p in "$debs"/*.deb; do
        dpkg-deb -x "$p" "$dir/root" || die "dpkg-deb -x $p failed"
    done
    # A release built for a newer glibc than the host's brings its own.
    host_libc=$(host_glibc)
    libc_wanted=$(glibc_wanted "$dir"/root/usr/lib/x86_64-linux-gnu/lib{ibverbs,mlx5}.so.1)
    if version_gt "$libc_wanted" "$host_libc"; then
        note "rdma-core of $suite asks for GLIBC_$libc_wanted, the host has $host_libc: fetching its libc6" >&2
        (cd "$debs" && rdma_core_apt "$suite" apt-get download libc6) >> "$log" 2>&1 ||
            die "rdma-core of $suite: apt-get download libc6 failed (log: $log)"
        dpkg-deb -x "$debs"/libc6_*.deb "$dir/root" || die "dpkg-deb -x libc6 failed"
    fi
    rm -rf "$debs"
    # The libraries must be the release's: libibverbs.so.1.N.<upstream>.
    upstream=${version%%-*}
    for p in libibverbs.so.1 libmlx5.so.1; do
        tmp=$(readlink -f "$dir/root/usr/lib/x86_64-linux-gnu/$p")
        case "$tmp" in
        *".$upstream") ;;
        *) die "rdma-core of $suite: $p is $tmp, not version $upstream" ;;
        esac
    done
    # The release's provider directory: links to its libraries by absolute
    # path, so libibverbs' dlopen of a provider and a program's link to
    # libmlx5.so.1 map one file.
    mkdir -p "$dir/providers"
    for p in "$dir"/root/usr/lib/x86_64-linux-gnu/libibverbs/*.so; do
        ln -sfn "$(readlink -f "$p")" "$dir/providers/$(basename "$p")"
    done
    [ -d "$dir/root/etc/libibverbs.d" ] || die "rdma-core of $suite: ibverbs-providers has no etc/libibverbs.d"
    ln -sfn "$version" "$link"
    {
        echo "recipe $RDMA_CORE_RECIPE"
        echo "suite $suite"
        echo "version $version"
        echo "packages $(cd "$dir/root" && find usr/share/doc -mindepth 1 -maxdepth 1 -printf '%f ' | sed 's/ $//')"
        echo "glibc $libc_wanted (host $host_libc)"
    } > "$dir/.dcx-release"
    echo "$dir"
}

# The loader that runs the release's programs: its own when it brought a
# glibc (an old loader with a new libc.so.6 cannot start anything).
rdma_core_ldso() {
    local dir=$1 f
    for f in "$dir"/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
             "$dir"/root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2; do
        if [ -e "$f" ]; then
            readlink -f "$f"
            return
        fi
    done
}

# rdma_core_wrap DIR: a wrapper per program in the build tree
# ($DCX_BUILD/rdma-core/<version>/bin, made again on every run: it names this
# build's gtest), which it prints; what each wrapper runs into the log.
rdma_core_wrap() {
    local dir=$1 version lib compiled ldso libs prog real miss bin
    version=$(basename "$dir")
    bin="$DCX_BUILD/rdma-core/$version/bin"
    lib="$dir/root/usr/lib/x86_64-linux-gnu"
    # VERBS_PROVIDER_DIR, as compiled into this libibverbs
    compiled=$(strings "$(readlink -f "$lib/libibverbs.so.1")" |
               sed -n 's|^\(/.*\)/lib%s-rdmav[0-9]*\.so$|\1|p' | head -1)
    [ -n "$compiled" ] || die "no provider directory compiled into $lib/libibverbs.so.1"
    [ -d "$compiled" ] || die "$compiled (rdma-core $version's provider directory) does not exist on this host"
    rm -rf "$bin"
    mkdir -p "$bin"
    ldso=$(rdma_core_ldso "$dir")
    # /lib too: a release before the merged /usr (Debian 11, 12) keeps libnl there
    libs="$lib"
    if [ -d "$dir/root/lib/x86_64-linux-gnu" ]; then
        libs+=":$dir/root/lib/x86_64-linux-gnu"
    fi
    echo "provider directory $compiled; loader ${ldso:-the host loader}; LD_LIBRARY_PATH $libs" >&2
    for prog in "${RDMA_CORE_CLIENTS[@]}" ucx_perftest dcx_uct_gtest dcxemu_mlx5face_gtest; do
        case "$prog" in
        dcx_uct_gtest) real="$DCX_BUILD/test/gtest/uct/dcx_uct_gtest" ;;
        # libtool's program itself (the build tree's is a shell script)
        dcxemu_mlx5face_gtest) real="$DCX_BUILD/test/gtest/mlx5face/.libs/dcxemu_mlx5face_gtest" ;;
        ucx_perftest)  real=$(command -v ucx_perftest) ;;
        *)             real="$dir/root/usr/bin/$prog" ;;
        esac
        # A client that does not start on the release (a library missing)
        # is the host's, and the log says so.
        if [ -x "$real" ] && [ "${real#"$DCX_BUILD"/test/gtest/}" = "$real" ]; then
            miss=$(env LD_LIBRARY_PATH="$libs" ${ldso:+"$ldso"} ${ldso:+--list} ${ldso:-ldd} "$real" 2>&1 |
                   grep 'not found' || true)
            if [ -n "$miss" ]; then
                echo "$prog of rdma-core $version does not start here ($miss): the host's runs" >&2
                real=$(command -v "$prog")
            fi
        elif [ ! -x "$real" ] && [ "${prog%_gtest}" = "$prog" ]; then
            echo "rdma-core $version has no $prog: the host's runs" >&2
            real=$(command -v "$prog")
        fi
        echo "$prog: $real" >&2
        rdma_core_wrapper "$version" "$prog" "$real" "$libs" "$ldso" "$compiled" \
            "$dir/providers" "$dir/root/etc/libibverbs.d" > "$bin/$prog"
        chmod +x "$bin/$prog"
    done
    echo "$bin"
}

# The wrapper of one program: the mounts in a namespace of its own (the
# caller's preloads left out of mount and sh), then the program under the
# release's libraries with the caller's preloads.
rdma_core_wrapper() {
    local version=$1 prog=$2 real=$3 libs=$4 ldso=$5 compiled=$6 providers=$7 etc=$8
    cat <<WRAPPER
#!/bin/sh
# $prog on rdma-core $version (contrib/dcx.d/rdma-core.sh)
pre=\${LD_PRELOAD-}
exec env -u LD_PRELOAD unshare --mount --propagation private -- sh -c \\
    'mount --bind "\$1" "\$2" && mount --bind "\$3" /etc/libibverbs.d && shift 3 && exec "\$@"' \\
    rdma-core-$version '$providers' '$compiled' '$etc' \\
    env LD_PRELOAD="\$pre" LD_LIBRARY_PATH='$libs' DCX_RDMA_CORE='$version' \\
    ${ldso:+"'$ldso' --argv0 '$real'"} '$real' "\$@"
WRAPPER
}

# --- the suite ---------------------------------------------------------------

# rdma_core_maps DIR COUNTER MIN -- SERVER...: as mlx5_pair, and the
# libibverbs and libmlx5 files both processes run (the face's trace names
# them when a context opens: DCXEMU_MLX5_TRACE is on in this suite) must
# all come from DIR, the release, and libmlx5.so.1 must be among them (by
# the path it was loaded by: the soname link or the file).
rdma_core_maps() {
    local dir=$1 counter=$2 min=$3 log="$DCX_LOGS/rdma-core-maps-$$-$RANDOM"
    local maps foreign
    shift 3
    mlx5_pair "$counter" "$min" "$@" > "$log" 2>&1 || { cat "$log"; return 1; }
    cat "$log"
    maps=$(cat "$MLX5_PAIR_LOG.client" "$MLX5_PAIR_LOG.server" 2>/dev/null |
           sed -n 's/^dcxemu-mlx5\[[0-9]*\]: uverbs[0-9]*: GET_CONTEXT from //p' |
           LC_ALL=C sort -u) || true
    echo "the processes ran:"
    echo "${maps:-  nothing named}" | sed 's/^/  /'
    foreign=$(echo "$maps" | grep . | grep -v "^$dir/" || true)
    if ! echo "$maps" | grep -Eq '/libmlx5\.so\.1(\.|$)' || [ -n "$foreign" ]; then
        echo "expected libibverbs and libmlx5 from $dir only; from elsewhere: ${foreign:-none}"
        return 1
    fi
}

# rdma_core_dcx RELEASE_DIR COUNTER MIN ARGS...: dcx's ucx_perftest as
# mlx5_ucx_perftest runs it (dcx and the face preloaded), with the maps check.
rdma_core_dcx() {
    local dir=$1 counter=$2 min=$3
    shift 3
    local -x UCX_IB_MLX5_DEVX=n
    rdma_core_maps "$dir" "$counter" "$min" -- \
        env "LD_PRELOAD=$DCX_PREFIX/lib/ucx/libuct_dcx.so:$DCX_PREFIX/lib/libdcxemu_mlx5.so.0" \
        ucx_perftest "${PERFTEST_OPTS[@]}" -x dcx -d dcxemu_mlx5_0:1 \
        -p $((20000 + RANDOM % 20000)) "$@"
}

# dcx's UCT gtest on the face (run_gtest calls it as its binary): the
# release's wrapper, the face preloaded on a fresh fabric, UCX_DCX_EMU unset
# (DCX_TEST_DEVICE), the tests of RDMA_CORE_GTEST_FILTER.
rdma_core_gtest() {
    local filter=$RDMA_CORE_GTEST_FILTER extra=${RDMA_CORE_GTEST_RELEASE_NEEDS[$RDMA_CORE_GTEST_RELEASE]:-}
    mlx5_face_env
    if [ -n "$extra" ] && [ -z "${DCX_RDMA_CORE_GTEST_FILTER:-}" ]; then
        filter="$filter:$extra"
    fi
    env -u DCXEMU_MLX5_TRACE "${MLX5_ENV[@]}" DCX_TEST_DEVICE=dcxemu_mlx5_0 \
        dcx_uct_gtest --gtest_filter="$filter" "$@"
    local rc=$?
    "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
    return $rc
}

# The face's out-of-order data placement under the release's libmlx5: the
# caps and the flag where it is rdma-core 55 or later, neither before
# (mlx5face_ooo.* tells them apart by DCX_RDMA_CORE, which the wrapper sets).
rdma_core_mlx5face_ooo() {
    mlx5_face_env
    env -u DCXEMU_MLX5_TRACE "${MLX5_ENV[@]}" \
        dcxemu_mlx5face_gtest --gtest_filter='mlx5face_ooo.*'
    local rc=$?
    "$DCX_PREFIX/bin/dcxemu-stat" -r -f "$MLX5_FABRIC" >/dev/null || true
    return $rc
}

# rdma_core_retry CMD...: CMD, run again (twice at most) when its client came
# before its server listened (perftest and ucx_perftest say so).
rdma_core_retry() {
    local out try
    out=$(mktemp)
    for try in 1 2 3; do
        if "$@" > "$out" 2>&1; then
            cat "$out"
            rm -f "$out"
            return 0
        fi
        if [ $try -eq 3 ] ||
           ! grep -Eq "Couldn't connect to|Unable to init the socket connection|connect\(.*\) failed" "$out"; then
            break
        fi
        echo "try $try: the client came before its server listened; again"
    done
    cat "$out"
    rm -f "$out"
    return 1
}

# rdma_core_check RELEASE NAME CMD...: check, and the result in the table.
declare -A RDMA_CORE_RESULT=()
rdma_core_check() {
    local release=$1 name=$2 before=$total_failed
    shift 2
    check "rdma-core-$release-$name" rdma_core_retry "$@"
    if [ "$total_failed" -eq "$before" ]; then
        RDMA_CORE_RESULT[$release,$name]=pass
    else
        RDMA_CORE_RESULT[$release,$name]=FAIL
    fi
}
RDMA_CORE_ROWS=(provider ibv_devinfo rc_pingpong perftest-dc-write_lat perftest-dc-send_lat
                ucx-dc_mlx5-put_lat dcx-put_lat dcx-am_lat mlx5face-ooo dcx_uct_gtest)

# The gtest's row: its report's counts.
rdma_core_gtest_row() {
    local release=$1 before=$total_failed xml="$DCX_LOGS/rdma-core-$1-dcx_uct_gtest.xml" counts
    RDMA_CORE_GTEST_RELEASE=$release
    run_gtest "rdma-core-$release-dcx_uct_gtest" rdma_core_gtest
    counts=$(sed -n 's/.*<testsuites tests="\([0-9]*\)" failures="\([0-9]*\)".*/\1 \2/p' "$xml" 2>/dev/null |
             head -1 | awk -v s="$(grep -c '<skipped' "$xml" 2>/dev/null)" \
                 '{print $1 - $2 - s "/" $1 (s ? "+" s "skip" : "")}') || true
    if [ "$total_failed" -eq "$before" ]; then
        RDMA_CORE_RESULT[$release,dcx_uct_gtest]="${counts:-?}"
    else
        RDMA_CORE_RESULT[$release,dcx_uct_gtest]="FAIL:${counts:-crash}"
    fi
}

# What RELEASE's runs asked of the face's kernel side, from the face's trace
# in their logs: each command with its result, each ioctl it refused.
rdma_core_asks() {
    cat "$DCX_LOGS"/rdma-core-"$1"-*.log 2>/dev/null |
        sed -n 's/^dcxemu-mlx5\[[0-9]*\]: \(uverbs[0-9]*: \)\{0,1\}//p' |
        grep -v '^send doorbells' | sed 's/: done$//' | LC_ALL=C sort -u
}

# One release: the face and dcx under its libraries, every command traced.
rdma_core_release() {
    local release=$1 dir=$2 n=2000 bin wlog="$DCX_LOGS/rdma-core-$1-wrappers.txt"
    rm -f "$DCX_LOGS"/rdma-core-"$release"-*.log
    say "rdma-core $(basename "$dir") ($release): $(sed -n 's/^glibc //p' "$dir/.dcx-release" | sed 's/^/asks for GLIBC_/')"
    bin=$(rdma_core_wrap "$dir" 2> "$wlog") || { cat "$wlog" >&2; die "rdma-core $(basename "$dir"): its programs cannot be wrapped"; }
    sed -n '1p; /does not start\|has no/p' "$wlog" | sed 's/^/    /'
    local -x PATH="$bin:$PATH" DCXEMU_MLX5_TRACE=1
    rdma_core_check "$release" provider rdma_core_maps "$dir" recv_cqes 200 -- \
        ibv_rc_pingpong -d dcxemu_mlx5_0 -g 0 -n 100 -p $((20000 + RANDOM % 20000))
    rdma_core_check "$release" ibv_devinfo mlx5_devinfo
    rdma_core_check "$release" rc_pingpong mlx5_pair recv_cqes 1000 -- \
        ibv_rc_pingpong -d dcxemu_mlx5_0 -g 0 -n 500 -p $((20000 + RANDOM % 20000))
    rdma_core_check "$release" perftest-dc-write_lat mlx5_perftest write $((2 * n)) ib_write_lat -c DC -n $n
    rdma_core_check "$release" perftest-dc-send_lat mlx5_perftest recv_cqes 2000 ib_send_lat -c DC -n 1000
    rdma_core_check "$release" ucx-dc_mlx5-put_lat mlx5_ucx_perftest write $n dc_mlx5 -t put_lat -n $n -w 100
    rdma_core_check "$release" dcx-put_lat rdma_core_dcx "$dir" write $n -t put_lat -n $n -w 100
    rdma_core_check "$release" dcx-am_lat rdma_core_dcx "$dir" recv_cqes 1000 -t am_lat -n 500 -w 50
    rdma_core_check "$release" mlx5face-ooo rdma_core_mlx5face_ooo
    rdma_core_gtest_row "$release"
}

suite_rdma-core() {
    local r d dirs=() i row line
    [ "$(id -u)" -eq 0 ] || die "suite rdma-core mounts each release's providers in a mount namespace: run as root"
    make -C "$DCX_BUILD" -s -j"$DCX_JOBS" check TESTS= >/dev/null || die "building the tests failed"
    for r in "${RDMA_CORE_RELEASES[@]}"; do
        d=$(rdma_core_fetch "$r") || die "rdma-core of $r cannot be fetched"
        dirs+=("$d")
        note "rdma-core of $r: $(sed -n 's/^version //p' "${dirs[-1]}/.dcx-release") in ${dirs[-1]}"
    done
    for i in "${!RDMA_CORE_RELEASES[@]}"; do
        rdma_core_release "${RDMA_CORE_RELEASES[$i]}" "${dirs[$i]}"
    done
    say "what each release asks of the face's kernel side that another does not"
    for r in "${RDMA_CORE_RELEASES[@]}"; do
        rdma_core_asks "$r" > "$DCX_LOGS/rdma-core-$r-asks.txt"
    done
    for r in "${RDMA_CORE_RELEASES[@]}"; do
        local other
        for other in "${RDMA_CORE_RELEASES[@]}"; do
            [ "$other" != "$r" ] || continue
            LC_ALL=C comm -23 "$DCX_LOGS/rdma-core-$r-asks.txt" "$DCX_LOGS/rdma-core-$other-asks.txt" |
                sed "s/^/    $r, not $other: /"
        done
    done
    say "rdma-core matrix"
    line=$(printf '%-24s' check)
    for r in "${RDMA_CORE_RELEASES[@]}"; do
        line+=$(printf ' %-12s' "$r")
    done
    note "$line"
    for row in "${RDMA_CORE_ROWS[@]}"; do
        line=$(printf '%-24s' "$row")
        for r in "${RDMA_CORE_RELEASES[@]}"; do
            line+=$(printf ' %-12s' "${RDMA_CORE_RESULT[$r,$row]:--}")
        done
        note "$line"
    done
}
