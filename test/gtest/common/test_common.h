/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * What every dcx gtest suite shares whatever the layer it tests: time and
 * bounded waits, the test data pattern, environment settings, the device
 * model's test API, peers in child processes with pipes to them, and the
 * suites' common main().
 */
#ifndef DCX_TEST_COMMON_H_
#define DCX_TEST_COMMON_H_

#include <gtest/gtest.h>

#include "test_print.h"

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <stdint.h>
#include <sys/types.h>

namespace dcx_test {

/* Monotonic time in seconds. */
double now_sec();

/* Call progress() until cond() holds or the timeout (seconds) passes;
 * whether cond() held. */
bool poll_until(const std::function<bool()> &cond,
                const std::function<void()> &progress, double timeout);

/* The byte at offset i of test data 'seq' (never constant along a buffer,
 * different for neighbouring seq). */
static inline char data_byte(uint64_t seq, size_t i)
{
    return (char)(seq * 251 + i * 7 + (i >> 9) + 1);
}
void fill_data(void *buf, size_t length, uint64_t seq);
/* First offset that differs from fill_data's bytes, or -1. */
long check_data(const void *buf, size_t length, uint64_t seq);
std::vector<char> data_vector(size_t length, uint64_t seq);

/* Sets environment variables for its lifetime (UCX reads UCX_* when a
 * context or configuration is created; children started meanwhile inherit
 * them). */
typedef std::vector<std::pair<std::string, std::string>> env_vars;

class scoped_env {
public:
    explicit scoped_env(const env_vars &vars);
    ~scoped_env();

private:
    std::vector<std::pair<std::string, std::pair<bool, std::string>>> m_saved;
};

/* A function of the device model's test API (dcxemu.h) in the library the
 * plugin loads (UCX_DCX_EMU_LIB: the same library, so the function reaches
 * the plugin's device); nullptr, with a test failure, if there is none. */
void *emu_sym_ptr(const char *name);

template <typename F> F emu_sym(const char *name)
{
    return (F)emu_sym_ptr(name);
}

/* A role a child process can play: fn(read_fd, write_fd, args) returns
 * the exit code. Children are fresh processes (fork + exec of the test
 * binary): a process may not use a device it inherited through fork. */
typedef std::function<int(int, int, const std::vector<std::string> &)>
        child_role_t;
std::map<std::string, child_role_t> &child_roles();

struct child_role_registrar {
    child_role_registrar(const char *name, child_role_t fn)
    {
        child_roles()[name] = fn;
    }
};

#define DCX_CHILD_ROLE(_name)                                               \
    static int _name(int, int, const std::vector<std::string> &);           \
    static dcx_test::child_role_registrar _name##_registrar(#_name, _name); \
    static int _name(int in_fd, int out_fd,                                 \
                     const std::vector<std::string> &args)

/* A child process playing a role, with a pipe each way; 'env' is set in the
 * child only. */
class child {
public:
    child(const std::string &role,
          const std::vector<std::string> &args = std::vector<std::string>(),
          const env_vars &env                  = env_vars());
    ~child();
    int to_fd() const
    {
        return m_to[1];
    }
    int from_fd() const
    {
        return m_from[0];
    }
    int wait(double timeout = 60.0); /* exit status, -1 on signal/timeout */
    bool exited(int *status_p); /* without waiting or killing */
    void kill();
    pid_t pid() const
    {
        return m_pid;
    }

private:
    pid_t m_pid;
    int m_to[2], m_from[2];
};

/* Length-prefixed messages over a pipe. */
void send_msg(int fd, const std::vector<char> &msg);
std::vector<char> recv_msg(int fd, double timeout = 30.0);

/* Plain values in messages. */
std::vector<char> u64_msg(uint64_t value);
uint64_t msg_u64(const std::vector<char> &msg);
std::vector<char> u64s_msg(const std::vector<uint64_t> &values);
std::vector<uint64_t> msg_u64s(const std::vector<char> &msg);

/* A suite's main(): one device-model fabric per run, the plugin on the
 * model, 'env' set before UCX reads its configuration; a child role if argv
 * asks for one, the tests otherwise. */
int run_suite(int argc, char **argv, const char *suite, const env_vars &env);

} // namespace dcx_test

#endif
