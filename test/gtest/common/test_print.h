/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * Failures that read. googletest prints an enum it knows nothing about as
 * its number ("Which is: 10"); these printers make a failing check name the
 * value instead ("IBV_WC_REM_ACCESS_ERR (10)"), and EXPECT_ERRNO_EQ /
 * ASSERT_ERRNO_EQ do the same for errno values ("EINVAL (22)"), which are
 * plain ints no printer can recognise. ucs_status_t has its own header,
 * test_print_ucs.h, as only the suites built against UCX may include it.
 *
 * How the printers take effect: googletest prints a value through an
 * unqualified call PrintTo(value, os), which argument-dependent lookup
 * extends to the namespace of the value's type: for a C enum, the global
 * namespace. A non-template PrintTo there is preferred to googletest's own
 * template, so every EXPECT_EQ, every container of these values and
 * ::testing::PrintToString use it without changing the checks. Suite
 * headers include this right after <gtest/gtest.h>, before any check.
 *
 * Header only: the suites that include it link different libraries (the
 * device model's API face, or the system's libibverbs), so nothing here
 * calls either.
 */
#ifndef DCX_TEST_PRINT_H_
#define DCX_TEST_PRINT_H_

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include <errno.h>
#include <string.h>

#include <ostream>
#include <sstream>
#include <string>

namespace dcx_test {

/* The enumerator's name of a work completion status (verbs.h), or nullptr. */
inline const char *wc_status_name(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS:
        return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
        return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
        return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR:
        return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
        return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
        return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR:
        return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR:
        return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
        return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
        return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
        return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
        return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
        return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR:
        return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR:
        return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR:
        return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR:
        return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR:
        return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR:
        return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR:
        return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR:
        return "IBV_WC_GENERAL_ERR";
    case IBV_WC_TM_ERR:
        return "IBV_WC_TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE:
        return "IBV_WC_TM_RNDV_INCOMPLETE";
    }
    return nullptr;
}

/* The enumerator's name of a QP state (verbs.h), or nullptr. */
inline const char *qp_state_name(enum ibv_qp_state state)
{
    switch (state) {
    case IBV_QPS_RESET:
        return "IBV_QPS_RESET";
    case IBV_QPS_INIT:
        return "IBV_QPS_INIT";
    case IBV_QPS_RTR:
        return "IBV_QPS_RTR";
    case IBV_QPS_RTS:
        return "IBV_QPS_RTS";
    case IBV_QPS_SQD:
        return "IBV_QPS_SQD";
    case IBV_QPS_SQE:
        return "IBV_QPS_SQE";
    case IBV_QPS_ERR:
        return "IBV_QPS_ERR";
    case IBV_QPS_UNKNOWN:
        return "IBV_QPS_UNKNOWN";
    }
    return nullptr;
}

/* "NAME (number)", or the type and the number for a value with no name. */
inline std::string named_value(const char *name, const char *type, long value)
{
    std::ostringstream s;
    if (name != nullptr) {
        s << name << " (" << value << ")";
    } else {
        s << type << " " << value;
    }
    return s.str();
}

/* The symbolic name of an errno value ("EINVAL"), or nullptr. */
inline const char *errno_name(int err)
{
#if defined(__GLIBC__) && \
        (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    return (err == 0) ? "0" : strerrorname_np(err);
#else
    return (err == 0) ? "0" : nullptr;
#endif
}

/* "EINVAL (22)"; 0 prints as "0 (no error)". */
inline std::string errno_string(int err)
{
    if (err == 0) {
        return "0 (no error)";
    }
    return named_value(errno_name(err), "errno", err);
}

/* The predicate of EXPECT_ERRNO_EQ: both values named in the failure. */
inline ::testing::AssertionResult errno_eq(const char *expected_expr,
                                           const char *actual_expr,
                                           long expected, long actual)
{
    if (expected == actual) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "Expected equality of these errno values:\n  " << expected_expr
           << "\n    Which is: " << errno_string((int)expected) << "\n  "
           << actual_expr << "\n    Which is: " << errno_string((int)actual);
}

} // namespace dcx_test

/* Found by argument-dependent lookup (see the top of this file). */
inline void PrintTo(enum ibv_wc_status status, std::ostream *os)
{
    *os << dcx_test::named_value(dcx_test::wc_status_name(status),
                                 "ibv_wc_status", (long)status);
}

inline void PrintTo(enum ibv_qp_state state, std::ostream *os)
{
    *os << dcx_test::named_value(dcx_test::qp_state_name(state), "ibv_qp_state",
                                 (long)state);
}

/* A function or expression that returns an errno (0 on success), or errno
 * itself, against the expected value; a failure names both values, under
 * the expressions as written (a stringified macro argument is not expanded,
 * so "errno" reads as such, not as glibc's expansion of it). */
#define EXPECT_ERRNO_EQ(_expected, _actual)                               \
    GTEST_ASSERT_(::dcx_test::errno_eq(#_expected, #_actual, (_expected), \
                                       (_actual)),                        \
                  GTEST_NONFATAL_FAILURE_)
#define ASSERT_ERRNO_EQ(_expected, _actual)                               \
    GTEST_ASSERT_(::dcx_test::errno_eq(#_expected, #_actual, (_expected), \
                                       (_actual)),                        \
                  GTEST_FATAL_FAILURE_)

#endif
