# contrib/dcx.d/style.sh: sourced by contrib/dcx. See LICENSE for terms.
#
# suite style: every C source and header under src/ and test/ (and the
# googletests' C++) is formatted as
# .clang-format says (UCX's house style), checked by `make check-style` with
# Debian 12's clang-format 14 (another version formats some constructs
# differently, so the check names the version it needs instead of guessing).
# Runs on the host only: the Debian 13 roots of --ucx 1.18/1.22 carry another
# clang-format.

if [ -z "${DCX_IN_ROOT:-}" ]; then
    SUITES_ALL+=(style)
fi

suite_style() {
    [ -z "${DCX_IN_ROOT:-}" ] ||
        die "the style suite runs on the host (clang-format 14): contrib/dcx test style"
    check clang-format-clean make -C "$DCX_BUILD" -s check-style
}
