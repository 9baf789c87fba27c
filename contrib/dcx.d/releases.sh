# contrib/dcx.d/releases.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# The UCX releases dcx is built and tested against, chosen with
# "--ucx RELEASE" after setup, build, run, test or demo:
#   1.13  the host's UCX (Debian 12: 1.13.1); build tree build/, as without
#         the option
#   1.18  a Debian 13 (trixie) root with Debian's UCX 1.18.1 and Open MPI
#         5.0.7; build tree build-ucx1.18/
#   1.22  the same root with UCX 1.22.0 built from its release source into
#         /opt/ucx-1.22.0 (Open MPI 5 runs on it through LD_LIBRARY_PATH);
#         dcx is loaded from UCX's plugin path; build tree build-ucx1.22/
# The root is made by debootstrap and cached in $DCX_CACHE/roots/trixie. A
# command for 1.18 or 1.22 runs as a re-exec of contrib/dcx inside the root
# (chroot in a private mount namespace, DCX_IN_ROOT=<release>), with the
# repository and the cache mounted at their own paths, so build trees and
# logs name the same files inside and out. Nothing stays mounted afterwards.

DCX_RELEASES=(1.13 1.18 1.22)

ROOT_SUITE=trixie
ROOT_MIRROR=${DCX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Bump when the way the root is made changes (forces a new root).
ROOT_RECIPE=1
# Beyond DCX_PACKAGES and the conformance suite's: UCX 1.22's build and the
# suites' tools; curl and certificates for the upstream source download.
ROOT_EXTRA_PACKAGES=(libnuma-dev git procps curl ca-certificates)
ROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

UCX122_VERSION=1.22.0
UCX122_PREFIX=/opt/ucx-$UCX122_VERSION
# Bump when the way UCX 1.22 is built changes (forces a rebuild).
UCX122_RECIPE=1
# Configured as a distribution would (no gtest, no bindings, no docs);
# --with-verbs makes a missing rdma-core an error instead of a silent gap.
UCX122_CONFIGURE_FLAGS=(--prefix="$UCX122_PREFIX" --enable-mt --without-java --without-go
                        --disable-doxygen-doc --with-verbs)

root_dir() {
    echo "$DCX_CACHE/roots/$ROOT_SUITE"
}

root_packages() {
    printf '%s\n' "${DCX_PACKAGES[@]}" "${CONF_PACKAGES[@]:-}" "${ROOT_EXTRA_PACKAGES[@]}" |
        grep . | sort -u | tr '\n' ' ' | sed 's/ $//'
}

# What the root was made from; a root whose stamp differs is stale.
root_stamp() {
    printf 'recipe %s\nsuite %s\nmirror %s\npackages %s\n' \
        "$ROOT_RECIPE" "$ROOT_SUITE" "$ROOT_MIRROR" "$(root_packages)"
}

# --- running inside the root -------------------------------------------------

# Paths bound into the root at their own path: the repository and the cache
# (read-write), the release archives (read-only), and build, install or
# source trees named in the environment that lie outside both. Each line:
# rw|ro PATH.
root_binds() {
    local p mode seen=("$DCX_TOP" "$DCX_CACHE") prefix=
    echo "rw $DCX_TOP"
    echo "rw $DCX_CACHE"
    # DCX_PREFIX only when the caller set it (the script's own default is
    # under the build tree).
    if [[ "$(declare -p DCX_PREFIX)" == "declare -x"* ]]; then
        prefix=$DCX_PREFIX
    fi
    for p in "ro $(ucx_archives_dir)" "ro ${DCX_UCX_SRC:-}" \
             "rw ${DCX_BUILD_DIR:-}" "rw $prefix"; do
        mode=${p%% *}
        p=${p#* }
        [ -n "$p" ] || continue
        if [ "$mode" = rw ]; then
            mkdir -p "$p"
        fi
        [ -d "$p" ] || die "$p: no such directory"
        p=$(cd "$p" && pwd)
        if ! path_under "$p" "${seen[@]}"; then
            seen+=("$p")
            echo "$mode $p"
        fi
    done
}

# path_under PATH DIR...: PATH is one of DIRs or inside one.
path_under() {
    local p=$1 d; shift
    for d in "$@"; do
        case "$p/" in "$d"/*) return 0 ;; esac
    done
    return 1
}

# The environment of a command in the root for RELEASE: a clean one (the
# host's PATH, library paths and HOME mean nothing there) plus the caller's
# DCX_*, DCXEMU_*, UCX_*, OMPI_* and PRTE_* settings.
root_env() {
    local release=$1 name path=$ROOT_PATH
    for name in $(compgen -e); do
        case "$name" in
        DCX_IN_ROOT|DCX_CACHE_DIR|DCX_UCX_ARCHIVES|DCX_UCX_PREFIX) ;;
        DCX_*|DCXEMU_*|UCX_*|OMPI_*|PRTE_*) echo "$name=${!name}" ;;
        esac
    done
    echo "DCX_IN_ROOT=$release"
    echo "DCX_CACHE_DIR=$DCX_CACHE"
    echo "DCX_UCX_ARCHIVES=$(ucx_archives_dir)"
    if [ "$release" = 1.22 ]; then
        # Debian's Open MPI 5 links libucp.so.0: LD_LIBRARY_PATH gives it 1.22.
        path=$UCX122_PREFIX/bin:$path
        echo "DCX_UCX_PREFIX=$UCX122_PREFIX"
        echo "PKG_CONFIG_PATH=$UCX122_PREFIX/lib/pkgconfig"
        echo "LD_LIBRARY_PATH=$UCX122_PREFIX/lib"
    fi
    echo "PATH=$path"
    echo "HOME=/root"
    echo "TMPDIR=/tmp"
    echo "LANG=C.UTF-8"
    echo "TERM=${TERM:-dumb}"
}

# root_exec RELEASE CMD...: run CMD in the root, in a private mount namespace
# (every mount below disappears with it), with RELEASE's environment.
# The command starts in the caller's directory when that is bound into the
# root (relative paths then mean the same), otherwise in /.
root_exec() {
    local release=$1; shift
    local root env=() binds=() bind cwd=/
    root=$(root_dir)
    mapfile -t env < <(root_env "$release")
    mapfile -t binds < <(root_binds)
    for bind in "${binds[@]}"; do
        if path_under "$PWD" "${bind#* }"; then
            cwd=$PWD
        fi
    done
    unshare --mount --propagation private -- \
        "$DCX_TOP/contrib/dcx" __chroot "$root" "${binds[@]}" -- \
        env -i -C "$cwd" "${env[@]}" "$@"
}

# The private half of root_exec, run by the re-exec in the new mount
# namespace: mount /proc, /sys, /dev (with /dev/shm, shared with the host so
# device-model fabrics are the same files), a private /tmp and the binds
# ("rw PATH" / "ro PATH"), then chroot.
root_chroot() {
    local root=$1 mode path; shift
    [ "${DCX_IN_ROOT:-}" = "" ] || die "__chroot: already inside a root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        read -r mode path <<< "$1"
        shift
        mkdir -p "$root$path"
        mount --bind "$path" "$root$path"
        if [ "$mode" = ro ]; then
            mount -o remount,bind,ro "$root$path"
        fi
    done
    [ "${1:-}" = -- ] || die "__chroot: no command"
    shift
    # Names resolve as on the host: the mirror for apt, localhost and this
    # host's name for ucx_perftest and Open MPI (debootstrap writes no hosts).
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    cp -L /etc/hosts "$root/etc/hosts"
    exec chroot "$root" "$@"
}

# --- making the root ---------------------------------------------------------

# Install the root's packages (apt-get update first); output into LOG.
root_install_packages() {
    local log=$1
    root_exec 1.18 sh -c "apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(root_packages)" \
        >> "$log" 2>&1
}

# Make a new root from scratch next to the old one and swap it in.
root_create() {
    local root=$1 log=$2 new start
    new="$root.new"
    rm -rf "$new"
    command -v debootstrap >/dev/null 2>&1 || {
        note "installing debootstrap on the host"
        apt_update_once
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends debootstrap >/dev/null || die "apt-get install debootstrap failed"
    }
    start=$(date +%s)
    note "debootstrap --variant=minbase $ROOT_SUITE $new $ROOT_MIRROR (log: $log)"
    debootstrap --variant=minbase "$ROOT_SUITE" "$new" "$ROOT_MIRROR" >> "$log" 2>&1 ||
        { tail -5 "$log" >&2; die "debootstrap failed (log: $log)"; }
    note "debootstrap took $(( $(date +%s) - start )) s"
    # No daemon starts from a package's maintainer script in the root.
    printf '#!/bin/sh\nexit 101\n' > "$new/usr/sbin/policy-rc.d"
    chmod +x "$new/usr/sbin/policy-rc.d"
    # Mounts of earlier runs live in namespaces that ended with them; refuse
    # to delete anything if one is visible here (rm would follow a bind).
    if awk -v r="$root" '$5 == r || index($5, r "/") == 1 { found = 1 } END { exit !found }' \
           /proc/self/mountinfo; then
        die "something is mounted under $root: unmount it first"
    fi
    rm -rf "$root"
    mv "$new" "$root"
    start=$(date +%s)
    note "installing packages into the root: $(root_packages)"
    root_install_packages "$log" ||
        { tail -5 "$log" >&2; die "apt-get install in the root failed (log: $log)"; }
    note "package install took $(( $(date +%s) - start )) s"
}

# Make the root or bring it up to date: a new recipe, suite or mirror makes
# a new one; a changed package list is installed into the existing one, and
# a root in which that fails is made again.
root_is_current() {
    local root
    root=$(root_dir)
    [ -r "$root/.dcx-root" ] && [ "$(cat "$root/.dcx-root")" = "$(root_stamp)" ]
}

root_ensure() {
    local root log
    root=$(root_dir)
    log="$root.log"
    if root_is_current; then
        return
    fi
    say "Debian $ROOT_SUITE root${ROOT_PURPOSE:- for UCX 1.18 / 1.22}: $root"
    : > "$log"
    if [ -r "$root/.dcx-root" ] &&
       [ "$(sed '/^packages /d' "$root/.dcx-root")" = "$(root_stamp | sed '/^packages /d')" ]; then
        note "package list changed: installing into the existing root"
        if ! root_install_packages "$log"; then
            note "apt-get in the root failed: making it again (log: $log)"
            root_create "$root" "$log"
        fi
    else
        root_create "$root" "$log"
    fi
    root_stamp > "$root/.dcx-root"
    note "root ready: $(root_versions | tr '\n' ' ')"
}

# The versions that matter in the root (apt-cache policy).
root_versions() {
    root_exec 1.18 sh -c 'for p in libucx-dev openmpi-bin libibverbs-dev gcc; do
            printf "%s=%s\n" $p "$(apt-cache policy $p | sed -n "s/^ *Installed: //p")"
        done'
}

# --- UCX 1.22 inside the root ------------------------------------------------

# Stamp of the installed prefix: recipe, configure flags and source checksum.
ucx122_stamp() {
    printf 'recipe %s\nflags %s\nsource %s\n' \
        "$UCX122_RECIPE" "${UCX122_CONFIGURE_FLAGS[*]}" "$1"
}

# A checksum of the source tree: the archive's when it came from one,
# otherwise one over the tree's files.
ucx_src_checksum() {
    local sum='' origin
    origin="$(dirname "$UCX_SRC")/origin"
    if [ "$UCX_SRC_ORIGIN" != DCX_UCX_SRC ] && [ -r "$origin" ]; then
        sum=$(sed -n 's/.*(sha256 \([0-9a-f]*\).*/\1/p' "$origin")
    fi
    if [ -n "$sum" ]; then
        echo "$sum"
    else
        (cd "$UCX_SRC" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
             sha256sum | cut -d' ' -f1)
    fi
}

# Build UCX 1.22.0 from its release source into UCX122_PREFIX, unless the
# prefix's stamp says it is already that build. Runs inside the root.
ucx122_ensure() {
    local stamp log work start lock found
    exec {lock}>"$(root_dir).ucx-$UCX122_VERSION.lock"
    flock "$lock"
    # What the search says is shown only when UCX is built.
    found=$(mktemp)
    find_ucx_src "$UCX122_VERSION" "" > "$found"
    stamp=$(ucx122_stamp "$(ucx_src_checksum)")
    if [ "$(cat "$UCX122_PREFIX/.dcx-stamp" 2>/dev/null)" = "$stamp" ]; then
        rm -f "$found"
        exec {lock}>&-
        return
    fi
    log="$(root_dir).ucx-$UCX122_VERSION.log"
    work=/var/tmp/dcx-ucx-$UCX122_VERSION
    say "UCX $UCX122_VERSION into $UCX122_PREFIX (log: $log)"
    cat "$found"
    rm -f "$found"
    start=$(date +%s)
    rm -rf "$work" "$UCX122_PREFIX"
    mkdir -p "$work/build"
    # A copy: autogen writes into the tree, which stays pristine for dcx.
    cp -a "$UCX_SRC" "$work/src"
    if ! (set -e
          cd "$work/src"
          ./autogen.sh
          cd "$work/build"
          # no stale UCX from an earlier prefix while building
          env -u LD_LIBRARY_PATH ../src/configure "${UCX122_CONFIGURE_FLAGS[@]}"
          env -u LD_LIBRARY_PATH make -j"$DCX_JOBS"
          env -u LD_LIBRARY_PATH make install) > "$log" 2>&1; then
        tail -15 "$log" >&2
        die "building UCX $UCX122_VERSION failed (log: $log; tree: $work)"
    fi
    ucx122_stamp "$(ucx_src_checksum)" > "$UCX122_PREFIX/.dcx-stamp"
    rm -rf "$work"
    note "UCX $UCX122_VERSION built in $(( $(date +%s) - start )) s: $("$UCX122_PREFIX/bin/ucx_info" -v | sed -n 's/^# Library version: //p')"
    exec {lock}>&-
}

# --- choosing a release ------------------------------------------------------

# Inside the 1.22 environment, before any command: its UCX is built.
release_prepare_inner() {
    if [ "${DCX_IN_ROOT:-}" = 1.22 ]; then
        ucx122_ensure
    fi
}

# release_run RELEASE CMD ARGS...: run a contrib/dcx command for RELEASE;
# returns for the host's release, does not return for the others.
release_run() {
    local release=$1 host; shift
    case " ${DCX_RELEASES[*]} " in
    *" $release "*) ;;
    *) die "unknown UCX release '$release' (--ucx takes one of: ${DCX_RELEASES[*]})" ;;
    esac
    if [ -n "${DCX_IN_ROOT:-}" ]; then
        [ "$release" = "$DCX_IN_ROOT" ] ||
            die "--ucx $release inside the UCX $DCX_IN_ROOT environment"
        return
    fi
    if [ "$release" = 1.13 ]; then
        host=$(pkg-config --modversion ucx 2>/dev/null || echo "not installed")
        case "$host" in
        1.13|1.13.*) return ;;
        *) die "--ucx 1.13 is the host's UCX, which is $host here (run without --ucx)" ;;
        esac
    fi
    [ "$(id -u)" -eq 0 ] ||
        die "--ucx $release runs in a Debian $ROOT_SUITE root (debootstrap, chroot, mount namespace): run as root"
    local lock
    mkdir -p "$DCX_CACHE/roots"
    # Shared while the root is used (commands run side by side), exclusive
    # only while a stale root is made again.
    exec {lock}>"$(root_dir).lock"
    flock -s "$lock"
    if ! root_is_current; then
        flock -u "$lock"
        flock "$lock"
        root_ensure
        flock -s "$lock"
    fi
    root_exec "$release" "$DCX_TOP/contrib/dcx" "$@"
    exit $?
}

# --- suite cross-load: a build for one release loaded into another ----------

SUITES_BY_NAME+=(cross-load)

# cross_load_refused RELEASE HOW PLUGIN BUILT_FOR: in RELEASE's environment,
# ucx_info with PLUGIN (a build for BUILT_FOR) loaded HOW (preload or
# plugin-path) exits 0, lists no dcx component, and warns once naming both
# releases.
cross_load_refused() {
    local release=$1 how=$2 plugin=$3 built_for=$4 out rc=0 loader
    [ -r "$plugin" ] || { echo "$plugin: not built"; return 1; }
    case "$how" in
    preload)     loader="LD_PRELOAD=$plugin" ;;
    plugin-path) loader="UCX_PLUGIN_PATH=$(dirname "$plugin")" ;;
    esac
    out=$("$DCX_TOP/contrib/dcx" shell --ucx "$release" -- \
          env "$loader" ucx_info -d 2>&1) || rc=$?
    echo "$out" | grep -E 'dcx|Component' | head -5
    [ $rc -eq 0 ] || { echo "ucx_info exited with $rc"; return 1; }
    if echo "$out" | grep -q 'Component: dcx'; then
        echo "a build for UCX $built_for registered in UCX $release"
        return 1
    fi
    [ "$(echo "$out" | grep -c "dcx was built for UCX $built_for.* but this process runs UCX $release")" -eq 1 ] ||
        { echo "no single warning naming UCX $built_for and UCX $release"; return 1; }
}

# The three builds, then each loaded into the next release: the plugin
# binds nothing release-specific before its check (dcx_loader.c), so the
# process goes on without dcx instead of failing in the dynamic loader.
suite_cross-load() {
    local r plugin13 plugin18 plugin22
    [ -z "${DCX_IN_ROOT:-}" ] || die "suite cross-load runs on the host (no --ucx)"
    for r in 1.13 1.18 1.22; do
        "$DCX_TOP/contrib/dcx" build --ucx "$r" > "$DCX_LOGS/cross-load-build-$r.log" 2>&1 ||
            { tail -20 "$DCX_LOGS/cross-load-build-$r.log"; die "building dcx for UCX $r failed"; }
    done
    plugin13=$DCX_TOP/build/install/lib/ucx/libuct_dcx.so
    plugin18=$DCX_TOP/build-ucx1.18/install/lib/ucx/libuct_dcx.so
    plugin22=$DCX_TOP/build-ucx1.22/install/lib/ucx/libuct_dcx.so
    check cross-load-1.13-build-into-1.18 cross_load_refused 1.18 preload "$plugin13" 1.13.1
    check cross-load-1.18-build-into-1.22 cross_load_refused 1.22 preload "$plugin18" 1.18.1
    check cross-load-1.18-build-in-1.22-plugin-path \
        cross_load_refused 1.22 plugin-path "$plugin18" 1.18.1
    check cross-load-1.22-build-into-1.18 cross_load_refused 1.18 preload "$plugin22" 1.22.0
}
