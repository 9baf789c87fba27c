/* Fabric hygiene: a fabric file is removed when its last member leaves (race-safe against a
 * process attaching meanwhile), a squatted default name falls back to another one, and one fabric
 * holds 512 processes with memory that grows with the members attached. */
#include "emu_test.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace emu;

namespace {

/* member [name]: open the device, allocate a PD (a verb that takes the fabric lock), optionally
 * print the fabric name, write "r" to stdout, and leave cleanly when stdin reaches EOF. */
EMU_CHILD(member)
{
    int n = 0;
    alarm(300); /* 512 of us start one after another (slowly under ASan) */
    ibv_device **l = dcxemu_ibv_get_device_list(&n);
    if (l == nullptr || n < 1)
        return 10;
    ibv_context *ctx = dcxemu_ibv_open_device(l[0]);
    dcxemu_ibv_free_device_list(l);
    if (ctx == nullptr)
        return 11;
    ibv_pd *pd = dcxemu_ibv_alloc_pd(ctx);
    if (pd == nullptr)
        return 12;
    if (argc >= 1 && strcmp(argv[0], "name") == 0) {
        std::string s = std::string(dcxemu_fabric_name()) + "\n";
        if (!write_full(1, s.data(), s.size()))
            return 13;
    }
    if (!write_full(1, "r", 1))
        return 14;
    char c;
    while (read(0, &c, 1) > 0) {
    }
    if (dcxemu_ibv_dealloc_pd(pd) != 0)
        return 15;
    if (dcxemu_ibv_close_device(ctx) != 0)
        return 16;
    return 0;
}

bool shm_exists(const std::string &f, struct stat *st = nullptr)
{
    struct stat s;
    return stat(("/dev/shm/" + f).c_str(), st ? st : &s) == 0;
}

/* Bytes the fabric file holds in memory (tmpfs allocates a page when it is first written). */
long long shm_resident_kib(const std::string &f)
{
    struct stat st;
    return stat(("/dev/shm/" + f).c_str(), &st) == 0 ?
                   (long long)st.st_blocks / 2 :
                   -1;
}

int exit_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) :
                           1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Everything until EOF (the writers are gone), within timeout_ms. */
std::string read_all(int fd, int timeout_ms)
{
    std::string out;
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left        = (int)(end - now_ms());
        char buf[512];
        if ((int64_t)(end - now_ms()) <= 0 || poll(&p, 1, left) <= 0)
            return out;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return out;
        out.append(buf, (size_t)n);
    }
}

/* A member waiting on its own "go" pipe; ready byte on the shared pipe. */
struct member_proc {
    pid_t pid = -1;
    int go_w  = -1;
    bool start(const std::string &f, int ready_w,
               const std::vector<std::string> &env = {})
    {
        int go[2];
        if (pipe2(go, O_CLOEXEC) != 0)
            return false;
        pid = spawn_io(f, { "member" }, env, go[0], ready_w);
        ::close(go[0]);
        go_w = go[1];
        return pid > 0;
    }
    int leave()
    {
        ::close(go_w);
        go_w = -1;
        return exit_code(wait_child(pid, 20000));
    }
};

} // namespace

/* The last member to leave removes the fabric file, also when the others died before it; a
 * member that is not the last leaves it; DCXEMU_KEEP_FABRIC=1 keeps it for dcxemu-stat, and
 * dcxemu_fabric_remove then removes it only when nobody is attached. */
TEST(emu_fabric_life, removed_when_last_member_leaves)
{
    std::string f = fresh_fabric();
    int ready[2];
    char r[2];
    dev d;
    ASSERT_TRUE(d.open()); /* we are a member of g_fabric */
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);

    member_proc a, b;
    ASSERT_TRUE(a.start(f, ready[1]));
    ASSERT_TRUE(b.start(f, ready[1]));
    ASSERT_TRUE(read_full(ready[0], r, 2, 20000));
    EXPECT_TRUE(shm_exists(f));
    EXPECT_EQ(b.leave(), 0);
    EXPECT_TRUE(shm_exists(f)) << "removed while a member is attached";
    EXPECT_EQ(a.leave(), 0);
    EXPECT_FALSE(shm_exists(f))
            << "the last member left the fabric file behind";

    /* the others died (never left): the last live member still removes it */
    ASSERT_TRUE(a.start(f, ready[1]));
    ASSERT_TRUE(b.start(f, ready[1]));
    ASSERT_TRUE(read_full(ready[0], r, 2, 20000));
    kill(b.pid, SIGKILL);
    EXPECT_EQ(exit_code(wait_child(b.pid, 20000)), 1000 + SIGKILL);
    ::close(b.go_w);
    EXPECT_TRUE(shm_exists(f));
    EXPECT_EQ(a.leave(), 0);
    EXPECT_FALSE(shm_exists(f))
            << "the last live member left the fabric file behind";

    /* kept on request; removed by the API only when idle */
    ASSERT_TRUE(a.start(f, ready[1], { "DCXEMU_KEEP_FABRIC=1" }));
    ASSERT_TRUE(read_full(ready[0], r, 1, 20000));
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_fabric_remove(f.c_str()));
    EXPECT_EQ(a.leave(), 0);
    EXPECT_TRUE(shm_exists(f));
    EXPECT_EQ(dcxemu_fabric_remove(f.c_str()), 0);
    EXPECT_FALSE(shm_exists(f));
    EXPECT_ERRNO_EQ(ENOENT, dcxemu_fabric_remove(f.c_str()));
    /* never our own fabric, and never a file that is not a fabric */
    EXPECT_ERRNO_EQ(EBUSY, dcxemu_fabric_remove(g_fabric.c_str()));
    EXPECT_TRUE(shm_exists(g_fabric));
    std::string junk = fresh_fabric();
    int fd           = open(("/dev/shm/" + junk).c_str(),
                            O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> bytes(4096, 0x3c);
    ASSERT_TRUE(write_full(fd, bytes.data(), bytes.size()));
    ::close(fd);
    EXPECT_ERRNO_EQ(EPROTO, dcxemu_fabric_remove(junk.c_str()));
    EXPECT_TRUE(shm_exists(junk));
    d.close();
    ::close(ready[0]);
    ::close(ready[1]);
}

static std::string self_exe()
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return "";
    exe[n] = '\0';
    return exe;
}

/* dcxemu-stat in the build tree (a libtool wrapper next to the library). */
static std::string stat_tool_path()
{
    std::string dir = self_exe();
    for (int up = 0; up < 5 && !dir.empty(); up++) {
        dir           = dir.substr(0, dir.rfind('/'));
        std::string p = dir + "/src/dcxemu/dcxemu-stat";
        if (access(p.c_str(), X_OK) == 0)
            return p;
    }
    return "";
}

/* Members that are all killed leave the file: "dcxemu-stat -r -- COMMAND" (what dcx-run --emu
 * runs) removes it after COMMAND, passing on COMMAND's status. */
TEST(emu_fabric_life, killed_members_removed_by_stat_tool)
{
    std::string tool = stat_tool_path(), exe = self_exe();
    ASSERT_FALSE(tool.empty())
            << "dcxemu-stat not found next to the build tree";
    std::string f = fresh_fabric();
    /* control: a member killed outright leaves its fabric behind */
    pid_t p = spawn(f, { "attach", "0", "die" });
    EXPECT_EQ(exit_code(wait_child(p, 20000)), 1000 + SIGKILL);
    EXPECT_TRUE(shm_exists(f));
    ASSERT_EQ(dcxemu_fabric_remove(f.c_str()), 0);
    /* the same under dcxemu-stat -r: removed, status passed on (128 + SIGKILL) */
    p = fork();
    if (p == 0) {
        setenv("DCXEMU_FABRIC", f.c_str(), 1);
        execl(tool.c_str(), tool.c_str(), "-r", "--", exe.c_str(),
              "--emu-child", "attach", "0", "die", (char *)nullptr);
        _exit(127);
    }
    EXPECT_EQ(exit_code(wait_child(p, 20000)), 128 + SIGKILL);
    EXPECT_FALSE(shm_exists(f))
            << "dcxemu-stat -r left the fabric of a killed command";
}

/* Whether /proc/locks shows a process waiting for a flock on inode ino. */
static bool flock_waiter_on(ino_t ino)
{
    std::ifstream in("/proc/locks");
    std::string line, tag = ":" + std::to_string((unsigned long long)ino) + " ";
    while (std::getline(in, line)) {
        if (line.find("-> FLOCK") != std::string::npos &&
            line.find(tag) != std::string::npos) {
            return true;
        }
    }
    return false;
}

/* A process attaching while the last member removes the fabric (it holds the flock, the attacher
 * already opened the old file and waits for it) ends up on a new, linked file, not the removed
 * one. */
TEST(emu_fabric_life, attach_racing_removal_gets_a_linked_file)
{
    std::string f = fresh_fabric();
    int ready[2];
    char r;
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(devnull, 0);
    /* an idle fabric, kept */
    pid_t k = spawn_io(f, { "member" }, { "DCXEMU_KEEP_FABRIC=1" }, devnull,
                       ready[1]);
    ASSERT_TRUE(read_full(ready[0], &r, 1, 20000));
    ASSERT_EQ(exit_code(wait_child(k, 20000)), 0);

    /* play the leaving member: hold the flock, let the attacher block on it, then unlink */
    int fd = open(("/dev/shm/" + f).c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    struct stat old_st, new_st;
    ASSERT_EQ(fstat(fd, &old_st), 0);
    ASSERT_EQ(flock(fd, LOCK_EX), 0);
    member_proc b;
    ASSERT_TRUE(b.start(f, ready[1]));
    uint64_t end = now_ms() + 20000;
    while (!flock_waiter_on(old_st.st_ino) && now_ms() < end) {
        usleep(1000); /* polls the kernel's lock table for the event, no fixed delay */
    }
    ASSERT_TRUE(flock_waiter_on(old_st.st_ino))
            << "the attacher never waited for the flock";
    ASSERT_EQ(shm_unlink(("/" + f).c_str()), 0);
    ::close(fd);
    ASSERT_TRUE(read_full(ready[0], &r, 1, 20000));
    ASSERT_TRUE(shm_exists(f, &new_st))
            << "the attacher is on the removed file";
    EXPECT_NE(new_st.st_ino, old_st.st_ino);
    EXPECT_EQ(b.leave(), 0);
    EXPECT_FALSE(shm_exists(f));
    ::close(devnull);
    ::close(ready[0]);
    ::close(ready[1]);
}

/* Another user's file (or one with a wrong mode or content) under the default name: the owner's
 * processes fall back to <default>.1 with one clear line, rather than failing.  The default base
 * is DCXEMU_DEFAULT_FABRIC here, so the user's real default is never touched. */
TEST(emu_fabric_name, squatted_default_falls_back)
{
    std::string base     = fresh_fabric() + "-default";
    std::string fallback = base + ".1";
    struct squat {
        const char *what;
        mode_t mode;
        uid_t uid;
        bool junk;
    };
    std::vector<squat> cases = { { "none", 0, 0, false },
                                 { "mode 0644", 0644, getuid(), false },
                                 { "foreign content", 0600, getuid(), true } };
    if (geteuid() == 0) {
        cases.push_back({ "another owner", 0600, 65534, false });
    }
    for (const squat &c : cases) {
        SCOPED_TRACE(c.what);
        bool squatted = c.mode != 0;
        int fd        = -1;
        if (squatted) {
            fd = open(("/dev/shm/" + base).c_str(),
                      O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, c.mode);
            ASSERT_GE(fd, 0);
            ASSERT_EQ(fchmod(fd, c.mode), 0);
            if (c.junk) {
                std::vector<char> bytes(1 << 16, 0x3c);
                ASSERT_TRUE(write_full(fd, bytes.data(), bytes.size()));
            }
            if (c.uid != getuid()) {
                ASSERT_EQ(fchown(fd, c.uid, (gid_t)-1), 0);
            }
        }
        int out[2], err[2];
        ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
        ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        pid_t p     = spawn_io("", { "member", "name" },
                               { "DCXEMU_FABRIC=",
                                 "DCXEMU_DEFAULT_FABRIC=" + base },
                               devnull, out[1], err[1]);
        ::close(out[1]);
        ::close(err[1]);
        ::close(devnull);
        std::string o = read_all(out[0], 20000), e = read_all(err[0], 20000);
        EXPECT_EQ(exit_code(wait_child(p, 20000)), 0) << e;
        ::close(out[0]);
        ::close(err[0]);
        if (!squatted) {
            EXPECT_EQ(o, base + "\nr");
            EXPECT_EQ(e, "");
            EXPECT_FALSE(shm_exists(base)); /* and removed when it left */
            continue;
        }
        EXPECT_EQ(o, fallback + "\nr") << e;
        std::string want = "dcxemu: default fabric " + base + " ";
        EXPECT_EQ(e.compare(0, want.size(), want), 0) << e;
        EXPECT_NE(e.find("using " + fallback + " instead"), std::string::npos)
                << e;
        EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
        EXPECT_FALSE(shm_exists(
                fallback)); /* the fallback fabric left with its member */
        EXPECT_TRUE(shm_exists(
                base)); /* the squatter's file is not ours to remove */
        ::close(fd);
        ASSERT_EQ(unlink(("/dev/shm/" + base).c_str()), 0);
    }
    /* an explicit name is used or refused as it is: no fallback */
    int fd = open(("/dev/shm/" + base).c_str(),
                  O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fchmod(fd, 0644), 0);
    pid_t p = spawn_io(base, { "attach", std::to_string(EACCES) }, {}, -1, -1);
    EXPECT_EQ(exit_code(wait_child(p, 20000)), 0);
    EXPECT_FALSE(shm_exists(fallback));
    ::close(fd);
    unlink(("/dev/shm/" + base).c_str());
}

/* 512 processes attach to one fabric at once and each allocates a PD; the fabric's memory grows
 * with the members (untouched slots cost nothing), it is not sized for the maximum up front. */
TEST(emu_fabric_scale, members_512_memory_grows_with_use)
{
    const int n                        = 512;
    std::string f                      = fresh_fabric();
    const std::vector<std::string> env = { "DCXEMU_HEAP_MB=16" };
    int ready[2], go[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
    std::vector<pid_t> pids;
    char r[n];
    pids.push_back(spawn_io(f, { "member" }, env, go[0], ready[1]));
    ASSERT_TRUE(read_full(ready[0], r, 1, 20000));
    /* one more joins and leaves at once: its cleanup scans the tables, and must not make
     * them resident */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(devnull, 0);
    pid_t once = spawn_io(f, { "member" }, env, devnull, ready[1]);
    ::close(devnull);
    ASSERT_TRUE(read_full(ready[0], r, 1, 20000));
    ASSERT_EQ(exit_code(wait_child(once, 20000)), 0);
    long long kib1 = shm_resident_kib(f);
    for (int i = 1; i < n; i++) {
        pid_t p = spawn_io(f, { "member" }, env, go[0], ready[1]);
        ASSERT_GT(p, 0);
        pids.push_back(p);
    }
    bool all         = read_full(ready[0], r, n - 1, 240000);
    long long kib512 = shm_resident_kib(f);
    ::close(go[1]); /* EOF: everyone leaves */
    int failed = 0;
    for (pid_t p : pids) {
        int code = exit_code(wait_child(p, 30000));
        if (code != 0) {
            failed++;
            ADD_FAILURE() << "member " << p << " exit " << code;
        }
    }
    EXPECT_TRUE(all) << "not every member became ready";
    EXPECT_EQ(failed, 0);
    std::cout << "fabric resident memory: " << kib1 << " KiB with 1 member, "
              << kib512 << " KiB with " << n << " members" << std::endl;
    RecordProperty("resident_kib_1", std::to_string(kib1));
    RecordProperty("resident_kib_512", std::to_string(kib512));
    ASSERT_GT(kib1, 0);
    /* one member touches a few pages; tables sized for 1024 members (slot and counters,
     * ~2 MiB) are not written up front */
    EXPECT_LT(kib1, 256);
    EXPECT_GT(kib512, kib1 * 4);
    /* each member costs its slot and counter row, a few KiB at most */
    EXPECT_LT(kib512 - kib1, (long long)n * 8);
    EXPECT_FALSE(shm_exists(f));
    ::close(go[0]);
    ::close(ready[0]);
    ::close(ready[1]);
}

namespace {

/* ptracer: what the process declared for peers' access to its memory (dcxemu_ptracer_read)
 * after opening a device, after a DCI and after a DCT, on one line: "-" (not decided yet) or
 * "<scope>:<ptracer>". */
EMU_CHILD(ptracer)
{
    (void)argc;
    (void)argv;
    dev d;
    dci c;
    std::string out;
    auto state = [&] {
        int scope   = 0;
        long tracer = 0;
        int r       = dcxemu_ptracer_read(&scope, &tracer);
        out += r == ENOENT ?
                       std::string("-") :
                       std::to_string(scope) + ":" + std::to_string(tracer);
        out += " ";
    };
    if (!d.open())
        return 2;
    state();
    if (!make_dci(d, c, d.lid))
        return 3;
    state();
    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = srq != nullptr ? create_dct(d, srq, 7) : nullptr;
    if (dct == nullptr)
        return 4;
    state();
    out += "\n";
    if (!write_full(1, out.data(), out.size()))
        return 5;
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    destroy_dci(c);
    d.close();
    return 0;
}

} // namespace

/* Peers reach a process's memory with process_vm_readv/writev (a ptrace-mode access): a process
 * declares who may do that only when it creates its first DCT (a process without one is never
 * reached), and only under Yama ptrace_scope 1 (DCXEMU_YAMA_SCOPE pretends a scope): any process
 * by default, one PID (and its descendants) with DCXEMU_PTRACER=<pid>, nobody with =none; under
 * scope 0 nothing is needed and under 2 nothing helps, so nothing is declared. */
TEST(emu_fabric_ptracer, declared_by_dct_owners_under_scope_1_only)
{
    const std::string me = std::to_string(getpid());
    struct {
        std::vector<std::string> env;
        std::string want;
    } cases[] = {
        { { "DCXEMU_YAMA_SCOPE=1" }, "- - 1:-1 \n" },
        { { "DCXEMU_YAMA_SCOPE=1", "DCXEMU_PTRACER=" + me },
          "- - 1:" + me + " \n" },
        { { "DCXEMU_YAMA_SCOPE=1", "DCXEMU_PTRACER=none" }, "- - 1:0 \n" },
        { { "DCXEMU_YAMA_SCOPE=0" }, "- - 0:0 \n" },
        { { "DCXEMU_YAMA_SCOPE=2" }, "- - 2:0 \n" },
    };
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(devnull, 0);
    for (auto &c : cases) {
        int p[2];
        ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
        pid_t pid = spawn_io(fresh_fabric(), { "ptracer" }, c.env, -1, p[1],
                             devnull);
        close(p[1]);
        std::string line;
        char buf[128];
        ssize_t n;
        while ((n = read(p[0], buf, sizeof(buf))) > 0) {
            line.append(buf, (size_t)n);
        }
        close(p[0]);
        EXPECT_EQ(wait_child(pid, 30000), 0) << c.env.back();
        EXPECT_EQ(c.want, line) << c.env.back();
    }
    close(devnull);
}
