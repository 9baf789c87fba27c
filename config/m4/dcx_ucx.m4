# DCX_CHECK_UCX: find the installed UCX, its build configuration and the
# matching UCX source tree whose internal headers the plugin compiles against.
#
# Sets and substitutes:
#   UCX_VERSION        installed UCX version (e.g. 1.13.1)
#   UCX_INFO           path of ucx_info of that installation
#   UCX_CPPFLAGS       -I for the installed public headers (if not in /usr)
#   UCX_LDFLAGS        -L for the installed libraries (if not in /usr)
#   UCX_SRC            the UCX source tree (--with-ucx-src)
#   UCX_BASE_IFACE_SIZE / UCX_BASE_EP_SIZE  layout fingerprint of libuct
AC_DEFUN([DCX_CHECK_UCX], [
AC_ARG_WITH([ucx],
    [AS_HELP_STRING([--with-ucx=PREFIX], [UCX installation prefix (default: pkg-config ucx)])],
    [], [with_ucx=pkgconfig])
AC_ARG_WITH([ucx-src],
    [AS_HELP_STRING([--with-ucx-src=DIR],
        [source tree of exactly the installed UCX version; its internal headers
         (uct/base, ucs/datastruct, ...) are not installed by distributions])],
    [], [with_ucx_src=no])
# The same choice for a configure of the tarball (make distcheck).
AS_IF([test "x$with_ucx" = xpkgconfig], [UCX_WITH_FLAG=""],
      [UCX_WITH_FLAG="--with-ucx=$with_ucx"])
AC_SUBST([UCX_WITH_FLAG])

UCX_CPPFLAGS=""
UCX_LDFLAGS=""
AS_IF([test "x$with_ucx" = xpkgconfig], [
    PKG_PROG_PKG_CONFIG
    AS_IF([test -n "$PKG_CONFIG" && $PKG_CONFIG --exists ucx], [
        UCX_VERSION=`$PKG_CONFIG --modversion ucx`
        ucx_prefix=`$PKG_CONFIG --variable=prefix ucx`
        ucx_libdir=`$PKG_CONFIG --variable=libdir ucx`
        ucx_incdir=`$PKG_CONFIG --variable=includedir ucx`
    ], [
        AC_MSG_ERROR([UCX not found by pkg-config (package 'ucx'). Install it
              (Debian/Ubuntu: apt-get install libucx-dev ucx-utils) or pass --with-ucx=PREFIX])
    ])
], [
    ucx_prefix="$with_ucx"
    ucx_libdir="$with_ucx/lib"
    AS_IF([test -d "$with_ucx/lib64"], [ucx_libdir="$with_ucx/lib64"])
    ucx_incdir="$with_ucx/include"
    AS_IF([test -r "$ucx_incdir/uct/api/version.h"], [],
          [AC_MSG_ERROR([$ucx_incdir/uct/api/version.h not found: --with-ucx=$with_ucx is not a UCX installation prefix])])
    UCX_VERSION=`sed -n 's/^#define UCT_VERNO_STRING *"\(.*\)"/\1/p' "$ucx_incdir/uct/api/version.h"`
])
AS_IF([test "x$ucx_incdir" != "x/usr/include"], [UCX_CPPFLAGS="-isystem $ucx_incdir"])
# No run path into a directory the dynamic linker searches anyway (a
# distribution's package must not carry one): /usr/lib, /usr/lib64 and the
# multiarch directory (Debian: /usr/lib/x86_64-linux-gnu).
AS_CASE(["$ucx_libdir"],
        [/usr/lib|/usr/lib64|/usr/lib/$host_cpu-$host_os|/usr/lib/$host_alias], [],
        [UCX_LDFLAGS="-L$ucx_libdir -Wl,-rpath,$ucx_libdir"])
AC_MSG_CHECKING([installed UCX version])
AC_MSG_RESULT([$UCX_VERSION])

AC_PATH_PROG([UCX_INFO], [ucx_info], [no], [$ucx_prefix/bin$PATH_SEPARATOR$PATH])
AS_IF([test "x$UCX_INFO" = xno],
      [AC_MSG_ERROR([ucx_info not found: install UCX's tools (Debian/Ubuntu: apt-get install ucx-utils)])])
# Older releases print "# Version 1.13.1", newer "# Library version: 1.18.1".
ucx_info_version=`$UCX_INFO -v | sed -n 's/^# \(Library \)\{0,1\}@<:@Vv@:>@ersion:\{0,1\} *//p' | head -1`
AS_IF([test "x$ucx_info_version" != "x$UCX_VERSION"],
      [AC_MSG_ERROR([$UCX_INFO reports UCX $ucx_info_version but the headers are $UCX_VERSION: use one installation])])

AS_IF([test "x$with_ucx_src" = xno],
      [AC_MSG_ERROR([--with-ucx-src=DIR is required: the source tree of UCX $UCX_VERSION
              (contrib/dcx setup fetches it; by hand: apt-get source ucx, then pass the ucx-$UCX_VERSION directory)])])
UCX_SRC=`cd "$with_ucx_src" 2>/dev/null && pwd`
AS_IF([test -r "$UCX_SRC/src/uct/base/uct_iface.h" && test -r "$UCX_SRC/configure.ac"], [],
      [AC_MSG_ERROR([--with-ucx-src=$with_ucx_src is not a UCX source tree (no src/uct/base/uct_iface.h)])])
ucx_src_version=`sed -n 's/.*\@<:@ucx_ver_\(major\|minor\|patch\)@:>@, *\(@<:@0-9@:>@*\)).*/\2/p' "$UCX_SRC/configure.ac" | tr '\n' '.' | sed 's/\.$//'`
AC_MSG_CHECKING([UCX source tree version])
AC_MSG_RESULT([$ucx_src_version])
AS_IF([test "x$ucx_src_version" != "x$UCX_VERSION"],
      [AC_MSG_ERROR([UCX source tree $UCX_SRC is version $ucx_src_version but the installed UCX is $UCX_VERSION: they must match exactly])])

DCX_SELECT_UCX_COMPAT([$UCX_VERSION])

# The installed UCX's build configuration, force-included into plugin objects:
# ENABLE_ASSERT and ENABLE_STATS change the layout of UCS/UCT structures.
$UCX_INFO -b > ucx_build_config.h
AS_IF([grep -q '^#define UCX_CONFIGURE_FLAGS' ucx_build_config.h], [],
      [AC_MSG_ERROR([$UCX_INFO -b did not print a build configuration])])

UCX_PLUGIN_CPPFLAGS="-include \$(abs_top_builddir)/ucx_build_config.h -isystem $UCX_SRC/src $UCX_CPPFLAGS"

# Layout fingerprint of the installed libuct, pinned at build time.
dcx_save_CFLAGS="$CFLAGS"; dcx_save_LIBS="$LIBS"; dcx_save_LDFLAGS="$LDFLAGS"
CFLAGS="-std=gnu11 -include $PWD/ucx_build_config.h -isystem $UCX_SRC/src $UCX_CPPFLAGS"
LDFLAGS="$LDFLAGS $UCX_LDFLAGS"
LIBS="-luct -lucs $LIBS"
AC_MSG_CHECKING([layout of uct_base_iface_t and uct_base_ep_t in libuct])
AC_RUN_IFELSE([AC_LANG_PROGRAM([[
#include <uct/base/uct_iface.h>
#include <stdio.h>
]], [[
FILE *f = fopen("conftest.sizes", "w");
if (f == NULL) return 1;
fprintf(f, "%zu %zu %zu %zu\n", uct_base_iface_t_class.size, uct_base_ep_t_class.size,
        sizeof(uct_base_iface_t), sizeof(uct_base_ep_t));
return fclose(f) != 0;
]])], [
    read UCX_BASE_IFACE_SIZE UCX_BASE_EP_SIZE hdr_iface_size hdr_ep_size < conftest.sizes
    AC_MSG_RESULT([$UCX_BASE_IFACE_SIZE / $UCX_BASE_EP_SIZE bytes])
], [
    AC_MSG_RESULT([failed])
    AC_MSG_ERROR([cannot build and run a program against libuct with UCX's internal headers; see config.log])
])
CFLAGS="$dcx_save_CFLAGS"; LIBS="$dcx_save_LIBS"; LDFLAGS="$dcx_save_LDFLAGS"
AS_IF([test "$UCX_BASE_IFACE_SIZE" != "$hdr_iface_size" || test "$UCX_BASE_EP_SIZE" != "$hdr_ep_size"],
      [AC_MSG_ERROR([libuct's uct_base_iface_t/uct_base_ep_t are $UCX_BASE_IFACE_SIZE/$UCX_BASE_EP_SIZE bytes but the
              source headers give $hdr_iface_size/$hdr_ep_size: the source tree or 'ucx_info -b' does not match the installed UCX])])

AC_SUBST([UCX_VERSION])
AC_SUBST([UCX_CPPFLAGS])
AC_SUBST([UCX_LDFLAGS])
AC_SUBST([UCX_SRC])
AC_SUBST([UCX_PLUGIN_CPPFLAGS])
AC_SUBST([UCX_BASE_IFACE_SIZE])
AC_SUBST([UCX_BASE_EP_SIZE])
])


# DCX_SELECT_UCX_COMPAT(VERSION): the compatibility layer for a UCX release
# (src/uct/ib/dcx/compat/). UCX's internal ABI changes between releases
# (md ops and attributes in 1.14, mkey_pack and the component in 1.16, iface
# internal ops in 1.14-1.22), so one layer serves a range of releases whose
# internals it was written against; anything else stops here.
#
# Sets and substitutes:
#   UCX_COMPAT         the layer: ucx113 (1.13.x) or ucx116 (1.16.x-1.22.x)
#   UCX_VERSION_CODE   major * 10000 + minor * 100 + patch, for the layer
#   AM_CONDITIONAL UCX_COMPAT_UCX113 / UCX_COMPAT_UCX116
AC_DEFUN([DCX_SELECT_UCX_COMPAT], [
dcx_ucx_major=`echo "$1" | cut -d. -f1`
dcx_ucx_minor=`echo "$1" | cut -d. -f2`
dcx_ucx_patch=`echo "$1" | cut -d. -f3 | sed 's/@<:@^0-9@:>@.*//'`
AS_CASE(["$dcx_ucx_major.$dcx_ucx_minor"],
    [1.13],                                [UCX_COMPAT=ucx113],
    [1.16|1.17|1.18|1.19|1.20|1.21|1.22],  [UCX_COMPAT=ucx116],
    [AC_MSG_ERROR([UCX $1 is not supported by dcx $PACKAGE_VERSION. Supported: UCX 1.13.x
              (tested: 1.13.1) and 1.16.x to 1.22.x (tested: 1.18.1, 1.22.0). 1.14 and 1.15
              changed the md and iface internals in ways no layer here adapts to; later
              releases have not been examined.])])
UCX_VERSION_CODE=`expr $dcx_ucx_major \* 10000 + $dcx_ucx_minor \* 100 + ${dcx_ucx_patch:-0}`
AC_MSG_CHECKING([compatibility layer for UCX $1])
AS_CASE(["$1"],
    [1.13.1|1.18.1|1.22.0], [AC_MSG_RESULT([$UCX_COMPAT (tested release)])],
    [AC_MSG_RESULT([$UCX_COMPAT])
     AC_MSG_WARN([UCX $1 is within the range of the $UCX_COMPAT layer but was not tested; tested releases: 1.13.1, 1.18.1, 1.22.0])])
AC_SUBST([UCX_COMPAT])
AC_SUBST([UCX_VERSION_CODE])
AM_CONDITIONAL([UCX_COMPAT_UCX113], [test "x$UCX_COMPAT" = xucx113])
AM_CONDITIONAL([UCX_COMPAT_UCX116], [test "x$UCX_COMPAT" = xucx116])
])
