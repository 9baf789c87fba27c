# contrib/dcx.d/ucx-patches/gtest-dcx.sed.sh: sourced by contrib/dcx.d/conformance.sh.
# See LICENSE for terms.
#
# Adds the dcx transport to UCX 1.13's own googletest transport lists, in a
# pristine copy of UCX's source tree (argument: its test/gtest directory).
# Each edit is checked: a tree that does not look like 1.13's fails loudly.
# The hash of this file is part of the build cache key.

ucx_gtest_patch_dcx() {
    local g=$1
    # UCT: every UCT_INSTANTIATE_{,IB_,NO_SELF_,NO_GPU_}TEST_CASE suite gets a
    # "dcx/" instance (resources whose tl_name is "dcx").
    sed -i '/^#define UCT_TEST_IB_TLS \\$/a\    dcx,                \\' "$g/uct/uct_test.h"
    grep -q '^    dcx,  *\\$' "$g/uct/uct_test.h" || return 1
    # test_md: the MD (component) named "dcx".
    sed -i '/^#define UCT_MD_INSTANTIATE_TEST_CASE(_test_case) \\$/{n;s/\\$/\\\n                   dcx, \\/}' \
        "$g/uct/test_md.cc"
    grep -q '^                   dcx, \\$' "$g/uct/test_md.cc" || return 1
    # UCP: a "dcxtl/" variant with UCX_TLS=dcx ("dcx/" is taken: it is
    # UCX's own name for dc_x = dc_mlx5).
    sed -i -e '/^#define UCP_INSTANTIATE_TEST_CASE(_test_case) \\$/a\    UCP_INSTANTIATE_TEST_CASE_TLS(_test_case, dcxtl,  "dcx") \\' \
           -e '/^#define UCP_INSTANTIATE_TEST_CASE_GPU_AWARE(_test_case) \\$/a\    UCP_INSTANTIATE_TEST_CASE_TLS_GPU_AWARE(_test_case, dcxtl, "dcx") \\' \
        "$g/ucp/ucp_test.h"
    [ "$(grep -c 'dcxtl' "$g/ucp/ucp_test.h")" -eq 2 ] || return 1
    # uct_p2p_test trims every transfer size at md_attr.cap.max_alloc, which
    # is meaningful only for MDs that allocate (UCT_MD_FLAG_ALLOC). A
    # registration-only MD reports 0 (dcx, tcp), so every put/get/am/atomic
    # transfer test would be skipped ("max_length <= min_length"); UCX's IB
    # MD gets through only by reporting ULONG_MAX. Use max_reg for those.
    sed -i 's|^    max_length = ucs_min(max_length, sender().md_attr().cap.max_alloc / 2.5);$|    max_length = ucs_min(max_length, ((sender().md_attr().cap.flags \& UCT_MD_FLAG_ALLOC) ? sender().md_attr().cap.max_alloc : sender().md_attr().cap.max_reg) / 2.5);|' \
        "$g/uct/uct_p2p_test.cc"
    grep -q 'UCT_MD_FLAG_ALLOC) ? sender().md_attr().cap.max_alloc' "$g/uct/uct_p2p_test.cc" || return 1
}
