# contrib/dcx.d/pkg.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite pkg: dcx as a distribution package (debian/, docs/packaging.md).
# For each release in DCX_PKG_RELEASES (default "bookworm trixie"):
#   - the source package: dcx_<version>.orig.tar.xz from the repository's
#     files (debian/ apart), dcx_<version>.orig-ucx-src.tar.xz from the
#     Debian source of that release's UCX (apt-get source, patches applied;
#     where the archive lacks it, the upstream release of the same version
#     as contrib/dcx finds it, and the tarball says so), then
#     dpkg-buildpackage -us -uc (source and binaries, no network);
#     bookworm on the host (UCX 1.13.1), trixie in an overlay of the Debian
#     13 root of releases.sh (UCX 1.18.1) with debhelper added;
#   - lintian on the result (errors fail, the rest is shown);
#   - a fresh root of the release: an overlay (its writes in a directory of
#     this run) on a cached root that holds what an MPI user has (Open MPI
#     over Debian's UCX): for bookworm a minbase debootstrap with openmpi-bin
#     ucx-utils ibverbs-providers made by releases.sh's machinery and cached
#     in $DCX_CACHE/roots/bookworm; for trixie the Debian 13 root itself;
#   - apt install ./ucx-dcx_*.deb ./dcxemu_*.deb there, dcx-run ucx_info,
#     the MPI and OpenSHMEM check programs of test/e2e under
#     "dcx-run --emu mpirun/oshrun -np 2" with proof from the device's
#     counters (and UCX's log) that the device carried the traffic;
#   - apt purge of both, and the root's file list must be the one it had
#     before the install;
#   - with both releases: the bookworm package refuses to install into the
#     trixie root (its Depends names the exact UCX it was built against);
#   - with bookworm: the RPM spec built with rpmbuild against the host's UCX.
# Everything runs as root (debootstrap, chroot, mount namespaces).

SUITES_BY_NAME+=(pkg)

read -r -a PKG_RELEASES <<< "${DCX_PKG_RELEASES:-bookworm trixie}"
# What the build needs besides DCX_PACKAGES (on the host; in the trixie
# root's build overlay).
PKG_BUILD_PACKAGES=(debhelper help2man lintian)
# On the host only: rpmbuild for the RPM spec.
PKG_HOST_PACKAGES=(rpm)
# The bookworm root an MPI user would have: Open MPI over Debian's UCX.
PKG_BOOKWORM_PACKAGES=(openmpi-bin ucx-utils ibverbs-providers)
# Bump when the way the trixie build overlay is made changes.
PKG_RECIPE=1
PKG_TIMEOUT=${DCX_PKG_TIMEOUT:-180}

pkg_work() {
    echo "$DCX_BUILD/pkg"
}

# The upstream version: configure.ac's, which debian/changelog must carry.
pkg_upstream_version() {
    sed -n 's/^AC_INIT(\[dcx\], \[\([^]]*\)\].*/\1/p' "$DCX_TOP/configure.ac"
}

pkg_deb_version() {
    dpkg-parsechangelog -l "$DCX_TOP/debian/changelog" -S Version
}

# --- environments ------------------------------------------------------------

# pkg_overlay_exec LOWER DIR CMD...: CMD in an overlay of the root LOWER whose
# writes go to DIR/upper (kept between calls), chrooted as releases.sh does
# (/proc, /sys, /dev, a private /tmp, the repository and the cache at their
# own paths), with the clean environment of a root command.
pkg_overlay_exec() {
    local lower=$1 dir=$2; shift 2
    local env=() binds=() bind cwd=/
    mkdir -p "$dir/upper" "$dir/work" "$dir/merged"
    mapfile -t env < <(root_env 1.18 | grep -v '^DCX_IN_ROOT=')
    mapfile -t binds < <(root_binds)
    for bind in "${binds[@]}"; do
        if path_under "$PWD" "${bind#* }"; then
            cwd=$PWD
        fi
    done
    unshare --mount --propagation private -- bash -c '
        mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$2/merged" || exit 1
        shift 2
        exec "$@"' _ "$lower" "$dir" \
        "$DCX_TOP/contrib/dcx" __chroot "$dir/merged" "${binds[@]}" -- \
        env -i -C "$cwd" "${env[@]}" "$@"
}

# The trixie build overlay: the Debian 13 root plus debhelper, help2man and
# lintian, kept in $DCX_CACHE/roots/trixie.pkg-build while the root's stamp
# and this recipe are the same.
pkg_trixie_build_dir() {
    echo "$(root_dir).pkg-build"
}

pkg_trixie_stamp() {
    printf 'recipe %s\npackages %s\n' "$PKG_RECIPE" "${PKG_BUILD_PACKAGES[*]}"
    cat "$(root_dir)/.dcx-root"
}

# An overlay's upper directory serves one mount at a time: runs of this
# suite from other trees wait for each other's use of the build overlay.
pkg_trixie_build_lock() {
    exec {PKG_TRIXIE_BUILD_LOCK}>"$(pkg_trixie_build_dir).lock"
    flock "$PKG_TRIXIE_BUILD_LOCK"
}

pkg_trixie_build_ensure() {
    local dir
    dir=$(pkg_trixie_build_dir)
    pkg_trixie_build_lock
    if [ "$(cat "$dir.stamp" 2>/dev/null)" = "$(pkg_trixie_stamp)" ]; then
        exec {PKG_TRIXIE_BUILD_LOCK}>&-
        return
    fi
    note "trixie build overlay: $dir (+ ${PKG_BUILD_PACKAGES[*]})"
    rm -rf "$dir" "$dir.stamp"
    pkg_overlay_exec "$(root_dir)" "$dir" sh -c "apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${PKG_BUILD_PACKAGES[*]}" \
        > "$dir.log" 2>&1 || { tail -5 "$dir.log"; die "trixie build overlay failed (log: $dir.log)"; }
    pkg_trixie_stamp > "$dir.stamp"
    exec {PKG_TRIXIE_BUILD_LOCK}>&-
}

# pkg_build_exec RELEASE CMD...: CMD where RELEASE's package is built.
pkg_build_exec() {
    local release=$1; shift
    case "$release" in
    bookworm) "$@" ;;
    trixie)   (pkg_trixie_build_lock
               pkg_overlay_exec "$(root_dir)" "$(pkg_trixie_build_dir)" "$@") ;;
    esac
}

# The bookworm root of an MPI user, made with releases.sh's machinery
# (debootstrap minbase, packages, stamp) in $DCX_CACHE/roots/bookworm.
pkg_bookworm_root_ensure() {
    (
        # shellcheck disable=SC2034 # read by releases.sh's functions
        ROOT_SUITE=bookworm
        # shellcheck disable=SC2034
        ROOT_PURPOSE=" for the package tests"
        root_packages() { echo "${PKG_BOOKWORM_PACKAGES[*]}"; }
        root_versions() {
            root_exec 1.13 sh -c 'for p in libucx0 openmpi-bin; do
                printf "%s=%s\n" $p "$(dpkg-query -W -f="\${Version}" $p)"; done'
        }
        exec {lock}>"$(root_dir).lock"
        flock "$lock"
        root_ensure
    )
}

# pkg_test_exec RELEASE CMD...: CMD in RELEASE's fresh root (an overlay whose
# writes are this run's, in $(pkg_work)/RELEASE/root).
pkg_test_exec() {
    local release=$1 lower; shift
    case "$release" in
    bookworm) lower=$DCX_CACHE/roots/bookworm ;;
    trixie)   lower=$(root_dir) ;;
    esac
    pkg_overlay_exec "$lower" "$(pkg_work)/$release/root" "$@"
}

# --- the source package ------------------------------------------------------

# The UCX source of RELEASE's libucx-dev, in $DCX_CACHE/pkg/ucx-src/<Debian
# source version>/ (not the cache of contrib/dcx build, which may hold the
# upstream release for the same version); prints the tree. Its file origin
# says where it came from: the Debian source package as Debian ships it
# (apt-get source, patches applied) when the archive has it, otherwise the
# upstream release of the same version as contrib/dcx finds it (a verified
# archive in DCX_UCX_ARCHIVES, or the download).
pkg_ucx_source() {
    local release=$1 deb version dir why
    deb=$(pkg_build_exec "$release" dpkg-query -W -f='${source:Version}' libucx-dev) || {
        echo "$release: libucx-dev is not installed" >&2
        return 1
    }
    version=${deb#*:}
    version=${version%%-*}
    version=${version%%+*}
    dir=$DCX_CACHE/pkg/ucx-src/$deb
    if is_ucx_tree "$dir/ucx-$version" && [ -r "$dir/origin" ]; then
        echo "$dir/ucx-$version"
        return
    fi
    rm -rf "$dir"
    mkdir -p "$dir/fetch"
    if [ "$(cat "$DCX_CACHE/ucx-src/$deb/origin" 2>/dev/null)" = "Debian source package ucx=$deb" ] &&
       is_ucx_tree "$DCX_CACHE/ucx-src/$deb/ucx-$version"; then
        cp -a "$DCX_CACHE/ucx-src/$deb/ucx-$version" "$dir/fetch/"
    else
        if [ "$release" = bookworm ]; then
            enable_deb_src >&2
            apt_update_once >&2
        fi
        (cd "$dir/fetch" && pkg_build_exec "$release" apt-get source -qq "ucx=$deb") > "$dir.log" 2>&1 ||
            why=$(grep -m1 '^E:' "$dir.log" || tail -1 "$dir.log")
    fi
    if [ -z "${why:-}" ]; then
        mv "$(find "$dir/fetch" -mindepth 1 -maxdepth 1 -type d -name 'ucx-*' | head -1)" \
            "$dir/ucx-$version" || return 1
        printf 'ucx %s\nfrom: Debian source package ucx=%s (apt-get source, %s)\n' \
            "$deb" "$deb" "$release" > "$dir/origin"
    else
        echo "apt-get source ucx=$deb failed ($why): using the upstream release $version" >&2
        (find_ucx_src "$version" "" && cp -a "$UCX_SRC" "$dir/ucx-$version" &&
             printf 'ucx %s\nfrom: upstream release %s, %s (the archive had no source package ucx=%s)\n' \
                 "$deb" "$version" "$(cat "$(dirname "$UCX_SRC")/origin")" "$deb" > "$dir/origin") >&2 ||
            return 1
    fi
    rm -rf "$dir/fetch"
    echo "$dir/ucx-$version"
}

# Deterministic tar.xz of DIR's files (names relative to DIR's parent) as TOP.
pkg_tar() {
    local out=$1 parent=$2 top=$3 mtime=$4; shift 4
    tar -C "$parent" --sort=name --mtime="@$mtime" --owner=0 --group=0 --numeric-owner \
        --transform="flags=rh;s|^[^/]*|$top|" -cf - "$@" | xz -T1 -6 > "$out"
}

# The two upstream tarballs and the unpacked tree for RELEASE, in
# $(pkg_work)/RELEASE; prints the tree.
pkg_source_tree() {
    local release=$1 w version ucx_tree deb mtime files
    w=$(pkg_work)/$release
    version=$(pkg_upstream_version)
    if [ "$(pkg_deb_version | sed 's/-[^-]*$//; s/^[0-9]*://')" != "$version" ]; then
        echo "debian/changelog's upstream version ($(pkg_deb_version)) is not configure.ac's ($version)" >&2
        return 1
    fi
    ucx_tree=$(pkg_ucx_source "$release") || return 1
    deb=$(sed -n '1s/^ucx //p' "$(dirname "$ucx_tree")/origin")
    rm -rf "$w/dcx-$version" "$w"/*.deb "$w"/*.changes "$w"/*.buildinfo "$w"/*.dsc "$w"/*.debian.tar.xz
    mkdir -p "$w"
    mtime=$(git -C "$DCX_TOP" log -1 --format=%ct)
    # The repository's files as they are (tracked or new, not ignored), debian/ apart.
    files=$(mktemp)
    (cd "$DCX_TOP" && git ls-files -z --cached --others --exclude-standard |
         while IFS= read -r -d '' f; do
             case "$f" in debian/*) continue ;; esac
             if [ -f "$f" ]; then printf '%s\0' "$f"; fi
         done) > "$files"
    tar -C "$DCX_TOP" --sort=name --mtime="@$mtime" --owner=0 --group=0 --numeric-owner \
        --transform="flags=rh;s|^|dcx-$version/|" --null -T "$files" -cf - |
        xz -T1 -6 > "$w/dcx_$version.orig.tar.xz" || return 1
    rm -f "$files"
    # The UCX component, made once per Debian UCX source version.
    if ! cmp -s "$w/ucx-src.origin" "$(dirname "$ucx_tree")/origin" ||
       [ ! -r "$w/dcx_$version.orig-ucx-src.tar.xz" ]; then
        cp "$(dirname "$ucx_tree")/origin" "$ucx_tree/DCX-UCX-SOURCE"
        pkg_tar "$w/dcx_$version.orig-ucx-src.tar.xz" "$(dirname "$ucx_tree")" ucx-src "$mtime" \
            --exclude="$(basename "$ucx_tree")/.pc" "$(basename "$ucx_tree")" || return 1
        cp "$(dirname "$ucx_tree")/origin" "$w/ucx-src.origin"
    fi
    mkdir -p "$w/dcx-$version/ucx-src"
    tar -C "$w/dcx-$version" --strip-components=1 -xJf "$w/dcx_$version.orig.tar.xz" &&
        tar -C "$w/dcx-$version/ucx-src" --strip-components=1 -xJf "$w/dcx_$version.orig-ucx-src.tar.xz" &&
        cp -a "$DCX_TOP/debian" "$w/dcx-$version/" || return 1
    echo "$w/dcx-$version"
}

# --- checks ------------------------------------------------------------------

# Build RELEASE's packages; show each package's files and its Depends.
pkg_build() {
    local release=$1 tree w want depends
    w=$(pkg_work)/$release
    tree=$(pkg_source_tree "$release") || return 1
    echo "source: $(cd "$w" && ls dcx_*.orig*.tar.xz | tr '\n' ' ')"
    (cd "$tree" && pkg_build_exec "$release" nice -n 10 \
         env DEB_BUILD_OPTIONS="parallel=$DCX_JOBS" dpkg-buildpackage -us -uc) \
        > "$w/build.log" 2>&1 || { tail -30 "$w/build.log"; return 1; }
    ls "$w"/*.deb "$w"/*.dsc > /dev/null || return 1
    for deb in "$w"/*.deb; do
        echo "== $(basename "$deb")"
        dpkg-deb -f "$deb" Depends | sed 's/^/Depends: /'
        dpkg-deb -c "$deb" | awk '{ $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print "  " $0 }'
    done
    # Depends: exactly the libucx0 of the build environment.
    want="libucx0 (= $(pkg_build_exec "$release" dpkg-query -W -f='${Version}' libucx0))"
    depends=$(dpkg-deb -f "$w"/ucx-dcx_*.deb Depends)
    case ", $depends," in
    *", $want,"*) echo "ucx-dcx depends on $want: the UCX it was built against" ;;
    *) echo "ucx-dcx's Depends ($depends) lacks $want"; return 1 ;;
    esac
}

# lintian on RELEASE's build: errors fail, the rest is listed. The project
# has no mail address: the packages override bogus-mail-host (debian/*.
# lintian-overrides), and it is suppressed here for the .changes and the
# automatic -dbgsym packages, which take no overrides.
pkg_lintian() {
    local release=$1 w out rc=0
    w=$(pkg_work)/$release
    out=$(cd "$w" && pkg_build_exec "$release" lintian --info --display-info --pedantic \
              --suppress-tags bogus-mail-host "$(ls "$w"/dcx_*.changes)" 2>&1) || rc=$?
    echo "$out"
    # lintian exits 1 when it reports errors (the E: lines decide), 2 and
    # above when it could not check
    [ $rc -le 1 ] || { echo "lintian failed (exit $rc)"; return 1; }
    ! echo "$out" | grep -q '^E: '
}

# Names of the root's files (not the package database, caches and logs, and
# not other mounts: -xdev).
PKG_SNAPSHOT='find / -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache \
    -o -path /var/log -o -path /etc/ld.so.cache \) -prune -o -print | LC_ALL=C sort'

pkg_install() {
    local release=$1 w
    w=$(pkg_work)/$release
    pkg_test_exec "$release" sh -c "$PKG_SNAPSHOT" > "$w/files-before" || return 1
    pkg_test_exec "$release" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y "$(ls "$w"/ucx-dcx_*.deb)" "$(ls "$w"/dcxemu_*.deb)" || return 1
    pkg_test_exec "$release" sh -c "$PKG_SNAPSHOT" > "$w/files-installed" || return 1
    pkg_test_exec "$release" dpkg -L ucx-dcx dcxemu | LC_ALL=C sort -u > "$w/files-packages"
    echo "new files in the root:"
    comm -13 "$w/files-before" "$w/files-installed" | sed 's/^/  /'
    # Where Debian's UCX keeps its modules (libuct_ib.so.0's directory).
    pkg_test_exec "$release" sh -c '
        d=$(dirname "$(dpkg -L libucx0 | grep "/ucx/libuct_ib.so.0$")")
        echo "UCX module directory: $d"
        test -e "$d/libuct_dcx.so.0" && test -e "$d/libdcx_transport.so.0"
        dcx-run -v ucx_info -d | grep -E "Component: dcx|Transport: dcx"' || return 1
}

# Counters of every device of FABRIC, summed by name (dcxemu-stat -c).
pkg_counters() {
    awk '{ for (i = 2; i <= NF; ++i) { split($i, kv, "="); n[kv[1]] += kv[2] } }
         END { for (k in n) print k, n[k] }'
}

# pkg_launch RELEASE NAME PASS LAUNCHER PROGRAM ARGS...: the installed
# dcx-run --emu LAUNCHER -np 2 in the fresh root, on a fabric of its own that
# is kept to read its counters: passes when the program printed PASS, UCX's
# log shows dcx lanes in both ranks and no other transport, and the device
# executed work requests (and atomics for the OpenSHMEM run).
pkg_launch() {
    local release=$1 name=$2 pass=$3 launcher=$4; shift 4
    local fabric="dcx-pkg-$release-$name-$$" log counters rc=0 wrs amos
    log=$(pkg_work)/$release/$name.log
    pkg_test_exec "$release" env DCXEMU_FABRIC="$fabric" DCXEMU_KEEP_FABRIC=1 \
        timeout -k 10 "$PKG_TIMEOUT" dcx-run --emu "$launcher" --allow-run-as-root --oversubscribe \
        -np 2 -x UCX_LOG_LEVEL=info "$@" > "$log" 2>&1 || rc=$?
    counters=$(pkg_test_exec "$release" dcxemu-stat -c -f "$fabric" | pkg_counters)
    pkg_test_exec "$release" dcxemu-stat -r -f "$fabric" || true
    grep -E '^(mpi|shmem)_check:' "$log"
    [ $rc -eq 0 ] || { echo "$launcher exited with $rc"; failure_excerpt "$log"; return 1; }
    grep -qE "$pass" "$log" || { echo "no '$pass' line"; return 1; }
    dcx_carried "$log" 2 || return 1
    wrs=$(echo "$counters" | awk '$1 ~ /^(write|write_imm|send|send_imm|read|atomic_fa|atomic_cs)$/ { n += $2 } END { print n + 0 }')
    amos=$(echo "$counters" | awk '$1 ~ /^(atomic_fa|atomic_cs)$/ { n += $2 } END { print n + 0 }')
    echo "device counters of $fabric: $(echo "$counters" | LC_ALL=C sort | tr '\n' ' ')"
    [ "$wrs" -ge 100 ] || { echo "the device executed $wrs work requests (expected >= 100)"; return 1; }
    # one-sided MPI and OpenSHMEM use the device's atomics (UCP does not
    # emulate them over dcx: see the e2e-users suite)
    if [ "$name" != mpi-p2p ] && [ "$amos" -eq 0 ]; then
        echo "the device executed no atomics"
        return 1
    fi
    echo "the device executed $wrs work requests ($amos atomics)"
}

# apt purge: the root's files are those it had before the install.
pkg_purge() {
    local release=$1 w
    w=$(pkg_work)/$release
    pkg_test_exec "$release" env DEBIAN_FRONTEND=noninteractive apt-get purge -y ucx-dcx dcxemu ||
        return 1
    pkg_test_exec "$release" sh -c "$PKG_SNAPSHOT" > "$w/files-after" || return 1
    if ! cmp -s "$w/files-before" "$w/files-after"; then
        echo "the root's files after the purge differ from before the install:"
        diff "$w/files-before" "$w/files-after" | sed 's/^/  /'
        return 1
    fi
    echo "the install added $(comm -13 "$w/files-before" "$w/files-installed" | wc -l) paths" \
         "($(wc -l < "$w/files-packages") listed by dpkg -L, directories shared with other packages included);" \
         "after the purge the root has the $(wc -l < "$w/files-after") paths it had before the install"
}

# The bookworm package's Depends keeps it out of a Debian 13 root.
pkg_refuses_other_ucx() {
    local out
    if out=$(pkg_test_exec trixie apt-get install -s "$(ls "$(pkg_work)"/bookworm/ucx-dcx_*.deb)" 2>&1); then
        echo "$out"
        echo "apt would install the bookworm package into the trixie root"
        return 1
    fi
    echo "$out" | grep -E 'Depends|libucx0' | head -3
    echo "$out" | grep -q 'libucx0 (= ' || { echo "$out"; return 1; }
}

# The RPM spec (contrib/ucx-dcx.spec, made by configure) built with rpmbuild
# as far as a Debian host allows: against the host's UCX 1.13.1 (no UCX RPM
# here: its version is defined, BuildRequires are not resolved, --nodeps), with
# Debian's UCX source as Source1; no debuginfo packages. Shows each RPM's
# files and Requires; ucx-dcx must require exactly ucx = 1.13.1-1.
pkg_rpm() {
    local w top spec version ucx_tree ucx_version rpm
    w=$(pkg_work)/rpm
    top=$w/rpmbuild
    spec=$DCX_BUILD/contrib/ucx-dcx.spec
    version=$(pkg_upstream_version)
    command -v rpmbuild > /dev/null || { echo "rpmbuild not installed (apt-get install rpm)"; return 1; }
    [ -r "$spec" ] || { echo "$spec: not made by configure"; return 1; }
    [ -r "$(pkg_work)/bookworm/dcx_$version.orig.tar.xz" ] || { echo "no bookworm source (pkg-bookworm-build)"; return 1; }
    ucx_tree=$(pkg_ucx_source bookworm) || return 1
    ucx_version=$(ucx_tree_version "$ucx_tree")
    rm -rf "$w"
    mkdir -p "$top/SOURCES" "$top/SPECS"
    xz -dc "$(pkg_work)/bookworm/dcx_$version.orig.tar.xz" | gzip -n > "$top/SOURCES/dcx-$version.tar.gz" &&
        tar -C "$(dirname "$ucx_tree")" --exclude="$(basename "$ucx_tree")/.pc" \
            --transform="flags=rh;s|^[^/]*|ucx-$ucx_version|" -czf "$top/SOURCES/ucx-$ucx_version.tar.gz" \
            "$(basename "$ucx_tree")" || return 1
    cp "$spec" "$top/SPECS/"
    nice -n 10 rpmbuild -bb --nodeps --define "_topdir $top" --define "debug_package %{nil}" \
        --define "ucx_version $ucx_version" --define "ucx_release 1" \
        --define "_smp_mflags -j$DCX_JOBS" "$top/SPECS/ucx-dcx.spec" > "$w/rpmbuild.log" 2>&1 ||
        { tail -30 "$w/rpmbuild.log"; return 1; }
    for rpm in "$top"/RPMS/*/*.rpm; do
        echo "== $(basename "$rpm")"
        rpm -qp --requires "$rpm" 2>/dev/null | grep -v '^rpmlib(' | sed 's/^/Requires: /'
        rpm -qpl "$rpm" 2>/dev/null | sed 's/^/  /'
    done
    rpm -qp --requires "$top"/RPMS/*/ucx-dcx-"$version"-*.rpm 2>/dev/null |
        grep -qx "ucx(x86-64) = $ucx_version-1" ||
        { echo "ucx-dcx does not require ucx(x86-64) = $ucx_version-1"; return 1; }
    echo "ucx-dcx requires ucx(x86-64) = $ucx_version-1: the UCX it was built against"
}

pkg_e2e_build() {
    local release=$1 dir flags="-std=gnu11 -Wall -Wextra -Werror -O2"
    dir=$(pkg_work)/$release/e2e
    mkdir -p "$dir"
    pkg_build_exec "$release" mpicc $flags -o "$dir/mpi_check" "$DCX_TOP/test/e2e/mpi_check.c" &&
        pkg_build_exec "$release" oshcc $flags -o "$dir/shmem_check" "$DCX_TOP/test/e2e/shmem_check.c"
}

suite_pkg() {
    local release missing=() p bin start
    [ -z "${DCX_IN_ROOT:-}" ] || die "suite pkg runs on the host (no --ucx)"
    [ "$(id -u)" -eq 0 ] || die "suite pkg needs root (debootstrap, chroot, mount namespaces)"
    for p in "${PKG_BUILD_PACKAGES[@]}" "${PKG_HOST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        note "installing on the host: ${missing[*]}"
        apt_update_once
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" > /dev/null || die "apt-get install ${missing[*]} failed"
    fi
    for release in "${PKG_RELEASES[@]}"; do
        case "$release" in
        bookworm)
            start=$(date +%s)
            pkg_bookworm_root_ensure
            note "bookworm root: $(( $(date +%s) - start )) s" ;;
        trixie)
            # The Debian 13 root (made or updated by releases.sh), held
            # shared while this suite uses it, as the --ucx commands do.
            "$DCX_TOP/contrib/dcx" setup --ucx 1.18 > "$DCX_LOGS/pkg-trixie-setup.log" 2>&1 ||
                { tail -5 "$DCX_LOGS/pkg-trixie-setup.log"; die "the Debian 13 root failed"; }
            exec {PKG_TRIXIE_LOCK}>"$(root_dir).lock"
            flock -s "$PKG_TRIXIE_LOCK"
            pkg_trixie_build_ensure ;;
        *) die "suite pkg: unknown release '$release' (bookworm, trixie)" ;;
        esac
        rm -rf "$(pkg_work)/$release/root"
        bin=$(pkg_work)/$release/e2e
        check "pkg-$release-build"   pkg_build "$release"
        check "pkg-$release-lintian" pkg_lintian "$release"
        check "pkg-$release-e2e-programs" pkg_e2e_build "$release"
        check "pkg-$release-install" pkg_install "$release"
        check "pkg-$release-mpi-p2p" pkg_launch "$release" mpi-p2p '^mpi_check: PASS \(p2p\)' \
            mpirun "$bin/mpi_check" p2p
        check "pkg-$release-mpi-one-sided" pkg_launch "$release" mpi-rma '^mpi_check: PASS \(rma\)' \
            mpirun "$bin/mpi_check" rma
        check "pkg-$release-shmem" pkg_launch "$release" shmem '^shmem_check: PASS' \
            oshrun "$bin/shmem_check"
        check "pkg-$release-purge" pkg_purge "$release"
    done
    if [[ " ${PKG_RELEASES[*]} " == *" bookworm "* ]]; then
        if [[ " ${PKG_RELEASES[*]} " == *" trixie "* ]]; then
            check pkg-bookworm-deb-refused-by-trixie pkg_refuses_other_ucx
        fi
        check pkg-rpm-build pkg_rpm
    fi
    for release in "${PKG_RELEASES[@]}"; do
        rm -rf "$(pkg_work)/$release/root"
    done
}
