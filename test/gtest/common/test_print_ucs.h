/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * A googletest printer for ucs_status_t, so that a failing check reads
 * "UCS_ERR_TIMED_OUT (-20)" instead of "-20". For the suites built against
 * UCX (plugin, uct, ucp); how printers take effect: test_print.h. The names
 * are those of every UCX release dcx supports (1.13 to 1.22 have the same
 * list); a value without a name prints as its number.
 */
#ifndef DCX_TEST_PRINT_UCS_H_
#define DCX_TEST_PRINT_UCS_H_

#include <gtest/gtest.h>

#include <ucs/type/status.h>

#include <ostream>

namespace dcx_test {

/* The enumerator's name of a UCS status, or nullptr. */
inline const char *ucs_status_name(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return "UCS_OK";
    case UCS_INPROGRESS:
        return "UCS_INPROGRESS";
    case UCS_ERR_NO_MESSAGE:
        return "UCS_ERR_NO_MESSAGE";
    case UCS_ERR_NO_RESOURCE:
        return "UCS_ERR_NO_RESOURCE";
    case UCS_ERR_IO_ERROR:
        return "UCS_ERR_IO_ERROR";
    case UCS_ERR_NO_MEMORY:
        return "UCS_ERR_NO_MEMORY";
    case UCS_ERR_INVALID_PARAM:
        return "UCS_ERR_INVALID_PARAM";
    case UCS_ERR_UNREACHABLE:
        return "UCS_ERR_UNREACHABLE";
    case UCS_ERR_INVALID_ADDR:
        return "UCS_ERR_INVALID_ADDR";
    case UCS_ERR_NOT_IMPLEMENTED:
        return "UCS_ERR_NOT_IMPLEMENTED";
    case UCS_ERR_MESSAGE_TRUNCATED:
        return "UCS_ERR_MESSAGE_TRUNCATED";
    case UCS_ERR_NO_PROGRESS:
        return "UCS_ERR_NO_PROGRESS";
    case UCS_ERR_BUFFER_TOO_SMALL:
        return "UCS_ERR_BUFFER_TOO_SMALL";
    case UCS_ERR_NO_ELEM:
        return "UCS_ERR_NO_ELEM";
    case UCS_ERR_SOME_CONNECTS_FAILED:
        return "UCS_ERR_SOME_CONNECTS_FAILED";
    case UCS_ERR_NO_DEVICE:
        return "UCS_ERR_NO_DEVICE";
    case UCS_ERR_BUSY:
        return "UCS_ERR_BUSY";
    case UCS_ERR_CANCELED:
        return "UCS_ERR_CANCELED";
    case UCS_ERR_SHMEM_SEGMENT:
        return "UCS_ERR_SHMEM_SEGMENT";
    case UCS_ERR_ALREADY_EXISTS:
        return "UCS_ERR_ALREADY_EXISTS";
    case UCS_ERR_OUT_OF_RANGE:
        return "UCS_ERR_OUT_OF_RANGE";
    case UCS_ERR_TIMED_OUT:
        return "UCS_ERR_TIMED_OUT";
    case UCS_ERR_EXCEEDS_LIMIT:
        return "UCS_ERR_EXCEEDS_LIMIT";
    case UCS_ERR_UNSUPPORTED:
        return "UCS_ERR_UNSUPPORTED";
    case UCS_ERR_REJECTED:
        return "UCS_ERR_REJECTED";
    case UCS_ERR_NOT_CONNECTED:
        return "UCS_ERR_NOT_CONNECTED";
    case UCS_ERR_CONNECTION_RESET:
        return "UCS_ERR_CONNECTION_RESET";
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return "UCS_ERR_ENDPOINT_TIMEOUT";
    default:
        return nullptr;
    }
}

} // namespace dcx_test

/* Found by argument-dependent lookup: ucs_status_t is a C enum of the
 * global namespace. Only the name and the number: UCX's description
 * (ucs_status_string) would make the header need libucs at link time. */
inline void PrintTo(ucs_status_t status, std::ostream *os)
{
    const char *name = dcx_test::ucs_status_name(status);

    if (name != nullptr) {
        *os << name << " (" << (int)status << ")";
    } else {
        *os << "ucs_status_t " << (int)status;
    }
}

#endif
