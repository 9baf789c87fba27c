/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#ifndef DCX_TEST_UTIL_H_
#define DCX_TEST_UTIL_H_

#include "../common/test_print.h"
#include "../common/test_print_ucs.h"

#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace dcx_test {

/* Build tree paths of the artefacts under test. */
inline std::string plugin_path()
{
    return DCX_TEST_BUILDDIR "/src/uct/ib/plugin/.libs/libuct_dcx.so";
}

inline std::string test_lib_path(const std::string &name)
{
    return DCX_TEST_BUILDDIR "/test/gtest/plugin/.libs/" + name;
}

/* Run a shell command; returns its output (stdout and stderr) and sets
 * *exit_status to its exit code (-1 if it did not exit normally). */
inline std::string run(const std::string &cmd, int *exit_status)
{
    std::string out;
    char buf[4096];
    FILE *f = popen((cmd + " 2>&1").c_str(), "r");
    if (f == NULL) {
        *exit_status = -1;
        return out;
    }
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        out.append(buf, n);
    }
    int status   = pclose(f);
    *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

inline size_t count(const std::string &haystack, const std::string &needle)
{
    size_t n = 0;
    for (size_t pos = haystack.find(needle); pos != std::string::npos;
         pos        = haystack.find(needle, pos + needle.size())) {
        ++n;
    }
    return n;
}

} // namespace dcx_test

#endif
