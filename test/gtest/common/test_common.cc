/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "test_common.h"

#include <algorithm>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace dcx_test {

double now_sec()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool poll_until(const std::function<bool()> &cond,
                const std::function<void()> &progress, double timeout)
{
    double deadline = now_sec() + timeout;

    while (!cond()) {
        if (now_sec() > deadline) {
            return false;
        }
        progress();
    }
    return true;
}

void fill_data(void *buf, size_t length, uint64_t seq)
{
    for (size_t i = 0; i < length; ++i) {
        ((char *)buf)[i] = data_byte(seq, i);
    }
}

long check_data(const void *buf, size_t length, uint64_t seq)
{
    for (size_t i = 0; i < length; ++i) {
        if (((const char *)buf)[i] != data_byte(seq, i)) {
            return (long)i;
        }
    }
    return -1;
}

std::vector<char> data_vector(size_t length, uint64_t seq)
{
    std::vector<char> v(length);

    fill_data(v.data(), length, seq);
    return v;
}

scoped_env::scoped_env(const env_vars &vars)
{
    for (const auto &kv : vars) {
        const char *old = getenv(kv.first.c_str());
        m_saved.push_back({ kv.first, { old != nullptr, old ? old : "" } });
        setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
}

scoped_env::~scoped_env()
{
    for (auto it = m_saved.rbegin(); it != m_saved.rend(); ++it) {
        if (it->second.first) {
            setenv(it->first.c_str(), it->second.second.c_str(), 1);
        } else {
            unsetenv(it->first.c_str());
        }
    }
}

void *emu_sym_ptr(const char *name)
{
    /* Kept open: the plugin holds the same library for the process's life. */
    static void *lib = []() -> void * {
        void *handle = dlopen(getenv("UCX_DCX_EMU_LIB"), RTLD_NOW);
        if (handle == nullptr) {
            ADD_FAILURE() << "the device model is not loaded: " << dlerror();
        }
        return handle;
    }();
    void *fn = (lib == nullptr) ? nullptr : dlsym(lib, name);

    if ((lib != nullptr) && (fn == nullptr)) {
        ADD_FAILURE() << "the device model has no " << name;
    }
    return fn;
}

std::map<std::string, child_role_t> &child_roles()
{
    static std::map<std::string, child_role_t> roles;
    return roles;
}

static int run_child_role(int argc, char **argv)
{
    if ((argc < 5) || (std::string(argv[1]) != "--dcx-child")) {
        return -1;
    }

    auto it = child_roles().find(argv[2]);
    if (it == child_roles().end()) {
        fprintf(stderr, "unknown child role %s\n", argv[2]);
        return 127;
    }

    std::vector<std::string> args(argv + 5, argv + argc);
    int ret = it->second(atoi(argv[3]), atoi(argv[4]), args);
    /* A role's exit status is its result: an EXPECT that failed in it must
     * not pass unseen behind a 0. */
    if ((ret == 0) && ::testing::Test::HasFailure()) {
        fprintf(stderr, "child role %s: a check failed (above)\n", argv[2]);
        return 126;
    }
    return ret;
}

/* The test binary's own path: resolved before fork, because tools that run
 * the test (valgrind) answer readlink for it but cannot exec the link. */
static std::string self_exe()
{
    char path[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 1);

    if (len <= 0) {
        return "/proc/self/exe";
    }
    path[len] = '\0';
    return path;
}

/* The test binary's argv[0], as run_suite() saw it. */
static std::string test_argv0;

/* How a child starts: the test binary itself, or, when a dynamic loader
 * started this process ("ld.so PROG", as a run on another release's glibc
 * does: /proc/self/exe is then the loader), that loader and the program. */
static std::vector<std::string> self_cmd(const std::string &exe)
{
    char prog[PATH_MAX];
    const char *base = strrchr(exe.c_str(), '/');

    base = (base != NULL) ? base + 1 : exe.c_str();
    if (!test_argv0.empty() && (strncmp(base, "ld-", 3) == 0) &&
        (realpath(test_argv0.c_str(), prog) != NULL) && (exe != prog)) {
        return { exe, prog };
    }
    return { exe };
}

child::child(const std::string &role, const std::vector<std::string> &args,
             const env_vars &env)
{
    std::string exe                 = self_exe();
    std::vector<std::string> argv_s = self_cmd(exe);

    EXPECT_EQ(0, pipe(m_to));
    EXPECT_EQ(0, pipe(m_from));
    m_pid = fork();
    if (m_pid == 0) {
        argv_s.insert(argv_s.end(),
                      { "--dcx-child", role, std::to_string(m_to[0]),
                        std::to_string(m_from[1]) });
        argv_s.insert(argv_s.end(), args.begin(), args.end());
        std::vector<char *> argv;
        for (auto &s : argv_s) {
            argv.push_back(&s[0]);
        }
        argv.push_back(nullptr);
        for (const auto &kv : env) {
            setenv(kv.first.c_str(), kv.second.c_str(), 1);
        }
        close(m_to[1]);
        close(m_from[0]);
        execv(exe.c_str(), argv.data());
        _exit(126);
    }
    close(m_to[0]);
    close(m_from[1]);
}

child::~child()
{
    if (m_pid > 0) {
        kill();
    }
    close(m_to[1]);
    close(m_from[0]);
}

int child::wait(double timeout)
{
    double deadline = now_sec() + timeout;
    int status;

    while (m_pid > 0) {
        pid_t ret = waitpid(m_pid, &status, WNOHANG);
        if (ret == m_pid) {
            m_pid = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        if (now_sec() > deadline) {
            kill();
            return -1;
        }
        usleep(1000);
    }
    return -1;
}

bool child::exited(int *status_p)
{
    int status;

    if ((m_pid > 0) && (waitpid(m_pid, &status, WNOHANG) == m_pid)) {
        m_pid     = -1;
        *status_p = WIFEXITED(status) ?
                            WEXITSTATUS(status) :
                            128 + WTERMSIG(
                                          status); /* as the shell reports it */
        return true;
    }
    return false;
}

void child::kill()
{
    if (m_pid > 0) {
        ::kill(m_pid, SIGKILL);
        waitpid(m_pid, NULL, 0);
        m_pid = -1;
    }
}

static bool read_full(int fd, void *buf, size_t len, double deadline)
{
    char *p = (char *)buf;
    while (len > 0) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        int timeout_ms    = (int)((deadline - now_sec()) * 1000);
        if ((timeout_ms <= 0) || (poll(&pfd, 1, timeout_ms) <= 0)) {
            return false;
        }
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            return false;
        }
        p += n;
        len -= n;
    }
    return true;
}

void send_msg(int fd, const std::vector<char> &msg)
{
    uint32_t len = msg.size();
    EXPECT_EQ((ssize_t)sizeof(len), write(fd, &len, sizeof(len)))
            << "the peer process is gone: " << strerror(errno);
    if (len > 0) {
        EXPECT_EQ((ssize_t)len, write(fd, msg.data(), len));
    }
}

std::vector<char> recv_msg(int fd, double timeout)
{
    double deadline = now_sec() + timeout;
    uint32_t len    = 0;
    std::vector<char> msg;

    if (!read_full(fd, &len, sizeof(len), deadline)) {
        ADD_FAILURE() << "no message from the peer";
        return msg;
    }
    msg.resize(len);
    if ((len > 0) && !read_full(fd, msg.data(), len, deadline)) {
        ADD_FAILURE() << "truncated message from the peer";
        msg.clear();
    }
    return msg;
}

std::vector<char> u64_msg(uint64_t value)
{
    return std::vector<char>((char *)&value, (char *)&value + sizeof(value));
}

uint64_t msg_u64(const std::vector<char> &msg)
{
    uint64_t value = 0;

    memcpy(&value, msg.data(), std::min(msg.size(), sizeof(value)));
    return value;
}

std::vector<char> u64s_msg(const std::vector<uint64_t> &values)
{
    return std::vector<char>((const char *)values.data(),
                             (const char *)(values.data() + values.size()));
}

std::vector<uint64_t> msg_u64s(const std::vector<char> &msg)
{
    std::vector<uint64_t> values(msg.size() / sizeof(uint64_t));

    memcpy(values.data(), msg.data(), values.size() * sizeof(uint64_t));
    return values;
}

int run_suite(int argc, char **argv, const char *suite, const env_vars &env)
{
    std::string fabric = std::string("dcx-") + suite + "-test-" +
                         std::to_string(getpid());
    const char *emu_lib = getenv("DCX_TEST_EMU_LIB");

    test_argv0 = argv[0];

    /* Before UCX reads its configuration and discovers devices (once per
     * process); children inherit all of it. */
    setenv("DCXEMU_FABRIC", fabric.c_str(), 0);
    setenv("DCXEMU_TIME_SCALE", "0.01", 0);
    if (getenv("DCX_TEST_DEVICE") != NULL) {
        /* dcx's hardware binding on the device named there (the mlx5 face
         * preloaded), as on a host with an mlx5 HCA; the model's test API is
         * the library the face loaded (by its soname: a second copy from
         * another path would be a second member of the fabric) */
        setenv("UCX_DCX_EMU", "n", 1);
        setenv("UCX_DCX_EMU_LIB", "libdcxemu.so.0", 1);
    } else {
        setenv("UCX_DCX_EMU", "y", 1);
        setenv("UCX_DCX_EMU_LIB",
               (emu_lib != NULL) ? emu_lib : DCX_TEST_EMU_LIB, 1);
    }
    for (const auto &kv : env) {
        setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }

    int ret = run_child_role(argc, argv);
    if (ret >= 0) {
        return ret;
    }

    /* A child that died must fail its test, not kill the whole run. */
    signal(SIGPIPE, SIG_IGN);
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}

} // namespace dcx_test
