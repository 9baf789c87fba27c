# contrib/dcx.d/ucx-patches/gtest-dcx.sed.sh: sourced by contrib/dcx.d/conformance.sh.
# See LICENSE for terms.
#
# Adds the dcx transport to UCX's own googletest transport lists, in a
# pristine copy of UCX's source tree (argument: its test/gtest directory).
# Known layouts: UCX 1.13, 1.18 and 1.22. Every edit is checked; a file
# that looks like none of them fails loudly, naming the file and the edit.
# The hash of this file is part of the build cache key.

# Called as "ucx_gtest_patch_dcx DIR || die": set -e does not hold inside,
# so every step returns explicitly.

# ucx_gtest_edit FILE WHAT CHECK COUNT SED-ARGS...: run sed -i SED-ARGS on
# FILE, then FILE must have exactly COUNT lines matching the basic regex
# CHECK.
ucx_gtest_edit() {
    local file=$1 what=$2 check=$3 count=$4 n; shift 4
    if [ ! -r "$file" ]; then
        echo "dcx gtest patch: $file: no such file (edit: $what)" >&2
        return 1
    fi
    sed -i "$@" "$file" || { echo "dcx gtest patch: $file: sed failed (edit: $what)" >&2; return 1; }
    n=$(grep -c -- "$check" "$file" || true)
    if [ "$n" != "$count" ]; then
        echo "dcx gtest patch: $file: unknown layout: $what ($n lines match '$check' after the edit, expected $count)" >&2
        return 1
    fi
}

ucx_gtest_patch_dcx() {
    local g=$1
    # UCT: every UCT_INSTANTIATE_{,IB_,IB_AND_GGA_,NO_SELF_,NO_GPU_}TEST_CASE
    # suite gets a "dcx/" instance (resources whose tl_name is "dcx").
    local uct="$g/uct/uct_test.h" ib
    ib=$(sed -n '/^#define UCT_TEST_IB_TLS \\$/,/[^\\]$/p' "$uct" | tr -d ' \\\n')
    case "$ib" in
    "#defineUCT_TEST_IB_TLSrc_mlx5,rc_verbs,dc_mlx5,ud_verbs,ud_mlx5")
        # 1.13, 1.18: dcx goes into the IB list.
        ucx_gtest_edit "$uct" "dcx in UCT_TEST_IB_TLS" '^    dcx,  *\\$' 1 \
            '/^#define UCT_TEST_IB_TLS \\$/a\    dcx,                \\' || return 1 ;;
    "#defineUCT_TEST_IB_TLSrc_mlx5,rc_verbs,dc_mlx5,ud_verbs,ud_mlx5,srd")
        # 1.22: UCT_TEST_TLS already has UCS_PP_MAX_ARGS (21) entries, one
        # more overflows UCS_PP_FOREACH: the five macros that expand the IB
        # list instantiate dcx first, then their list.
        ucx_gtest_edit "$uct" "dcx in the UCT_INSTANTIATE_*TEST_CASE macros that hold UCT_TEST_IB_TLS" \
            '^    _UCT_INSTANTIATE_TEST_CASE(_test_case, dcx) \\$' 5 \
            -E '/^#define UCT_INSTANTIATE_(|IB_|IB_AND_GGA_|NO_SELF_|NO_GPU_)TEST_CASE\(_test_case\) \\$/a\    _UCT_INSTANTIATE_TEST_CASE(_test_case, dcx) \\' || return 1 ;;
    *)
        echo "dcx gtest patch: $uct: unknown layout: UCT_TEST_IB_TLS is '$ib' (known: 1.13, 1.18, 1.22)" >&2
        return 1 ;;
    esac
    # test_md: the MD (component) named "dcx" (same in 1.13-1.22).
    ucx_gtest_edit "$g/uct/test_md.cc" "dcx in UCT_MD_INSTANTIATE_TEST_CASE" '^                   dcx, \\$' 1 \
        '/^#define UCT_MD_INSTANTIATE_TEST_CASE(_test_case) \\$/{n;s/\\$/\\\n                   dcx, \\/}' || return 1
    # UCP: a "dcxtl/" variant with UCX_TLS=dcx ("dcx/" is taken: it is
    # UCX's own name for dc_x = dc_mlx5). Same in 1.13-1.22.
    ucx_gtest_edit "$g/ucp/ucp_test.h" "dcxtl in UCP_INSTANTIATE_TEST_CASE{,_GPU_AWARE}" 'dcxtl' 2 \
        -e '/^#define UCP_INSTANTIATE_TEST_CASE(_test_case) \\$/a\    UCP_INSTANTIATE_TEST_CASE_TLS(_test_case, dcxtl,  "dcx") \\' \
        -e '/^#define UCP_INSTANTIATE_TEST_CASE_GPU_AWARE(_test_case) \\$/a\    UCP_INSTANTIATE_TEST_CASE_TLS_GPU_AWARE(_test_case, dcxtl, "dcx") \\' || return 1
    # uct_p2p_test trims every transfer size at the MD's max_alloc, which is
    # meaningful only for MDs that allocate (UCT_MD_FLAG_ALLOC). A
    # registration-only MD reports 0 (dcx, tcp), so every put/get/am/atomic
    # transfer test would be skipped ("max_length <= min_length"); UCX's IB
    # MD gets through only by reporting ULONG_MAX. UCX fixed this itself
    # after 1.18 (1.22 trims only for memory types the MD can allocate).
    local p2p="$g/uct/uct_p2p_test.cc"
    if grep -q '^    max_length = ucs_min(max_length, sender().md_attr().cap.max_alloc / 2.5);$' "$p2p"; then
        # 1.13 (uct_md_attr_t): use max_reg for those.
        ucx_gtest_edit "$p2p" "max_alloc trim (1.13 layout)" \
            'UCT_MD_FLAG_ALLOC) ? sender().md_attr().cap.max_alloc' 1 \
            's|^    max_length = ucs_min(max_length, sender().md_attr().cap.max_alloc / 2.5);$|    max_length = ucs_min(max_length, ((sender().md_attr().cap.flags \& UCT_MD_FLAG_ALLOC) ? sender().md_attr().cap.max_alloc : sender().md_attr().cap.max_reg) / 2.5);|' || return 1
    elif grep -q '^    max_length = ucs_min(max_length, sender().md_attr().max_alloc / 2.5);$' "$p2p"; then
        # 1.18 (uct_md_attr_v2_t): UCX 1.22's own condition.
        ucx_gtest_edit "$p2p" "max_alloc trim (1.18 layout)" \
            '^    if (sender().md_attr().alloc_mem_types & UCS_BIT(mem_type)) max_length = ucs_min(max_length, sender().md_attr().max_alloc / 2.5);$' 1 \
            's|^    max_length = ucs_min(max_length, sender().md_attr().max_alloc / 2.5);$|    if (sender().md_attr().alloc_mem_types \& UCS_BIT(mem_type)) max_length = ucs_min(max_length, sender().md_attr().max_alloc / 2.5);|' || return 1
    elif awk 'p == "    if (sender().md_attr().alloc_mem_types & UCS_BIT(mem_type)) {" &&
              $0 == "        max_length = ucs_min(max_length, sender().md_attr().max_alloc / 2.5);" { f = 1 }
              { p = $0 } END { exit !f }' "$p2p"; then
        : # 1.22: already trims only for memory types the MD allocates
    else
        echo "dcx gtest patch: $p2p: unknown layout: the max_alloc trim in test_xfer_multi_mem_type (known: 1.13, 1.18, 1.22)" >&2
        return 1
    fi
    # 1.22: the SGL put tests run only with UCX_TLS=all, where UCP picks
    # shared memory between the test's two workers: a dcxtl instance runs
    # them over dcx (UCP's put/sgl/offload protocol, dcx's put_sgl_zcopy).
    local rma="$g/ucp/test_ucp_rma.cc"
    if grep -q '^UCP_INSTANTIATE_TEST_CASE_TLS(test_ucp_rma_sgl, all, "all")$' "$rma"; then
        ucx_gtest_edit "$rma" "dcxtl instance of test_ucp_rma_sgl" \
            '^UCP_INSTANTIATE_TEST_CASE_TLS(test_ucp_rma_sgl, dcxtl, "dcx")$' 1 \
            '/^UCP_INSTANTIATE_TEST_CASE_TLS(test_ucp_rma_sgl, all, "all")$/a\UCP_INSTANTIATE_TEST_CASE_TLS(test_ucp_rma_sgl, dcxtl, "dcx")' || return 1
    fi
}
