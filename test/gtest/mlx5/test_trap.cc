/* Tests of the doorbell trap (trap.h): every store encoding it emulates, traps
 * from threads (concurrent, on an alternate stack, with SIGSEGV blocked),
 * chaining to the application's handler installed before and after init,
 * refusal of what it cannot emulate (in children that must die), rw mode (in
 * a fresh process) and the cost of a trap. */
#include "trap.h"
#include "x86_store.h"

#include <gtest/gtest.h>

#include "../common/test_print.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <cpuid.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

/* not declared with _GNU_SOURCE; the trap interposes it */
extern "C" sighandler_t bsd_signal(int sig, sighandler_t handler);

namespace {

const uint64_t V  = 0x8877665544332211ull; /* stored value */
const uint64_t HI = 0xf1e2d3c4b5a69788ull; /* upper half of xmm2, xmm15 */
const size_t PAGE = 4096;

/* A page in .bss that RIP-relative stores can reach. */
alignas(4096) char rip_page[4096] __asm__("dcxemu_test_rip_page");

/* What the kernel has installed for SIGSEGV, past the interposed sigaction. */
struct kernel_sigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

kernel_sigaction kernel_segv()
{
    kernel_sigaction k;
    memset(&k, 0, sizeof(k));
    syscall(SYS_rt_sigaction, SIGSEGV, NULL, &k, sizeof(k.mask));
    return k;
}

/* ---- the application's handler installed before init, as libucs does from
 * its constructor: it fixes a write to fixable_page and otherwise gives up
 * (back to SIG_DFL) */

std::atomic<char *> fixable_page{ nullptr };
std::atomic<int> preinit_calls{ 0 };

void preinit_handler(int sig, siginfo_t *si, void *ctx)
{
    char *page = fixable_page.load();
    ++preinit_calls;
    if ((page != nullptr) && ((char *)si->si_addr >= page) &&
        ((char *)si->si_addr < page + PAGE)) {
        mprotect(page, PAGE, PROT_READ | PROT_WRITE);
        return;
    }
    signal(SIGSEGV, SIG_DFL);
}

int install_preinit_handler()
{
    struct sigaction act;
    memset(&act, 0, sizeof(act));
    act.sa_sigaction = preinit_handler;
    act.sa_flags     = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    return sigaction(SIGSEGV, &act, NULL);
}

const int preinit_installed = install_preinit_handler();

/* Under valgrind the default is rw mode (DCXEMU_UAR=trap to trap). */
#define SKIP_IF_RW()                                   \
    if (dcxemu_trap_rw_mode()) {                       \
        GTEST_SKIP() << "rw mode: nothing is trapped"; \
    }

/* ---- regions */

struct seen_t {
    std::atomic<uint64_t> count{ 0 };
    std::atomic<uintptr_t> addr{ 0 };
    std::atomic<uint64_t> value{ 0 };
    std::atomic<uint64_t> sum{ 0 };
    uint8_t bytes[64]; /* of the last store (one thread at a time) */
    std::atomic<unsigned> size{ 0 };
};

void record(void *arg, void *addr, uint64_t value,
            const uint8_t *bytes = nullptr, unsigned size = 8)
{
    seen_t *s = (seen_t *)arg;
    s->addr   = (uintptr_t)addr;
    s->value  = value;
    if (bytes != nullptr) {
        memcpy(s->bytes, bytes, size);
    }
    s->size = size;
    s->sum += value;
    ++s->count;
}

/* Anonymous read-write pages, the last `trapped` of them trapped. */
struct region_t {
    char *map;
    char *base; /* the trapped part */
    size_t pages, trapped;
    seen_t seen;

    region_t(size_t n = 1, size_t t = 1) : pages(n), trapped(t)
    {
        map = (char *)mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT_NE(MAP_FAILED, (void *)map);
        base = map + (n - t) * PAGE;
        EXPECT_EQ(0, dcxemu_trap_add(base, t * PAGE, record, &seen));
    }

    ~region_t()
    {
        dcxemu_trap_remove(base, trapped * PAGE);
        munmap(map, pages * PAGE);
    }
};

/* Runs f in a child with stderr captured; returns its wait status. */
int run_child(void (*f)(void *), void *arg, std::string *err)
{
    int fds[2], status = 0;
    char buf[4096];
    ssize_t n;
    pid_t pid;

    if (pipe(fds) != 0) {
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        struct rlimit nocore = { 0, 0 };
        setrlimit(RLIMIT_CORE, &nocore);
        dup2(fds[1], STDERR_FILENO);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        f(arg);
        _exit(0);
    }
    close(fds[1]);
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) {
        err->append(buf, (size_t)n);
    }
    close(fds[0]);
    waitpid(pid, &status, 0);
    return status;
}

bool died_of_segv(int status)
{
    return WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV);
}

bool cpu_has(unsigned leaf, unsigned reg, unsigned bit)
{
    unsigned r[4] = { 0, 0, 0, 0 };
    if (!__get_cpuid_count(leaf, 0, &r[0], &r[1], &r[2], &r[3])) {
        return false;
    }
    return (r[reg] >> bit) & 1;
}

/* AVX usable: the CPU has it and the OS saves ymm (OSXSAVE, XCR0). */
bool have_avx()
{
    unsigned lo, hi;
    if (!cpu_has(1, 2, 28) || !cpu_has(1, 2, 27)) {
        return false;
    }
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

bool have_avx512f()
{
    unsigned lo, hi;
    if (!have_avx() || !cpu_has(7, 1, 16)) {
        return false;
    }
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xe6) == 0xe6;
}

/* ---- the stores: the encoding is spelled out in bytes; each sets done
 * after it, so a wrong length shows */

#define DONE "\n movl $1, %k[done]\n"
#define LOAD_XMM                                 \
    "movq %[lo], %%xmm2\n movq %[hi], %%xmm15\n" \
    " punpcklqdq %%xmm15, %%xmm2\n"

/* rcx (V) to (rax = p) */
#define STORE_RCX(name, bytes)                \
    void name(char *p, int &done)             \
    {                                         \
        __asm__ volatile(bytes DONE           \
                         : [done] "=&r"(done) \
                         : "a"(p), "c"(V)     \
                         : "memory");         \
    }

/* xmm2 (V, HI) or xmm15 (HI, 0) to (rax = p) */
#define STORE_XMM(name, bytes)                               \
    void name(char *p, int &done)                            \
    {                                                        \
        __asm__ volatile(LOAD_XMM bytes DONE                 \
                         : [done] "=&r"(done)                \
                         : "a"(p), [lo] "r"(V), [hi] "r"(HI) \
                         : "xmm2", "xmm15", "memory");       \
    }

/* ymm-wide VEX stores leave the upper halves dirty */
#define STORE_VEX(name, bytes) STORE_XMM(name, bytes "\n vzeroupper")

/* mm3 (V) to (rax = p) */
#define STORE_MM(name, bytes)                                      \
    void name(char *p, int &done)                                  \
    {                                                              \
        __asm__ volatile("movq %[v], %%mm3\n" bytes "\n emms" DONE \
                         : [done] "=&r"(done)                      \
                         : "a"(p), [v] "r"(V)                      \
                         : "mm3", "st", "memory");                 \
    }

/* the doorbell stores of libmlx5 and UCX */
void st_mlx5_sib(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x0c,0x02" DONE /* mov %rcx,(%rdx,%rax) */
                     : [done] "=&r"(done)
                     : "d"(p), "a"(8ul), "c"(V)
                     : "memory");
}

void st_mlx5_disp8(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x42,0x20" DONE /* mov %rax,0x20(%rdx) */
                     : [done] "=&r"(done)
                     : "d"(p), "a"(V)
                     : "memory");
}

void st_mlx5_base(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x07" DONE /* mov %rax,(%rdi) */
                     : [done] "=&r"(done)
                     : "D"(p), "a"(V)
                     : "memory");
}

void st_mlx5_r9(char *p, int &done)
{
    register uint64_t r9 __asm__("r9") = V;
    __asm__ volatile(".byte 0x4c,0x89,0x08" DONE /* mov %r9,(%rax) */
                     : [done] "=&r"(done)
                     : "a"(p), "r"(r9)
                     : "memory");
}

void st_mlx5_sib_disp8(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x54,0x37,0x08" DONE
                     /* mov %rdx,0x8(%rdi,%rsi) */
                     : [done] "=&r"(done)
                     : "D"(p), "S"(0x10ul), "d"(V)
                     : "memory");
}

/* the other addressing forms */
void st_disp32(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x82,0x00,0x01,0x00,0x00" DONE
                     /* mov %rax,0x100(%rdx) */
                     : [done] "=&r"(done)
                     : "d"(p), "a"(V)
                     : "memory");
}

void st_disp8_negative(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x42,0xf8" DONE /* mov %rax,-8(%rdx) */
                     : [done] "=&r"(done)
                     : "d"(p + 0x30), "a"(V)
                     : "memory");
}

void st_rex_xb_scale8(char *p, int &done)
{
    register char *r8 __asm__("r8")    = p;
    register uint64_t r9 __asm__("r9") = 5;
    __asm__ volatile(".byte 0x4b,0x89,0x04,0xc8" DONE /* mov %rax,(%r8,%r9,8) */
                     : [done] "=&r"(done)
                     : "r"(r8), "r"(r9), "a"(V)
                     : "memory");
}

void st_no_base(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x04,0xcd,0x10,0x00,0x00,0x00" DONE
                     /* mov %rax,0x10(,%rcx,8) */
                     : [done] "=&r"(done)
                     : "c"((uintptr_t)p / 8), "a"(V)
                     : "memory");
}

void st_r13_disp8(char *p, int &done)
{
    register char *r13 __asm__("r13") = p;
    __asm__ volatile(".byte 0x49,0x89,0x45,0x08" DONE /* mov %rax,0x8(%r13) */
                     : [done] "=&r"(done)
                     : "r"(r13), "a"(V)
                     : "memory");
}

void st_r12_base(char *p, int &done)
{
    register char *r12 __asm__("r12") = p;
    __asm__ volatile(".byte 0x49,0x89,0x04,0x24" DONE /* mov %rax,(%r12) */
                     : [done] "=&r"(done)
                     : "r"(r12), "a"(V)
                     : "memory");
}

void st_r12_index(char *p, int &done)
{
    register uint64_t r12 __asm__("r12") = 0x40;
    __asm__ volatile(".byte 0x4a,0x89,0x0c,0x20" DONE /* mov %rcx,(%rax,%r12) */
                     : [done] "=&r"(done)
                     : "r"(r12), "a"(p), "c"(V)
                     : "memory");
}

void st_dil(char *p, int &done)
{
    __asm__ volatile(".byte 0x40,0x88,0x38" DONE /* mov %dil,(%rax) */
                     : [done] "=&r"(done)
                     : "a"(p), "D"(V)
                     : "memory");
}

void st_imm_disp8(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0xc7,0x40,0x10,0x78,0x56,0x34,0x12" DONE
                     /* movq $0x12345678,0x10(%rax) */
                     : [done] "=&r"(done)
                     : "a"(p)
                     : "memory");
}

STORE_RCX(st_sib_no_index, ".byte 0x48,0x89,0x0c,0x20") /* mov %rcx,(%rax) */
STORE_RCX(st_ds_prefix, ".byte 0x3e,0x48,0x89,0x08") /* ds mov %rcx,(%rax) */
STORE_RCX(st_mov32, ".byte 0x89,0x08") /* mov %ecx,(%rax) */
STORE_RCX(st_mov16, ".byte 0x66,0x89,0x08") /* mov %cx,(%rax) */
STORE_RCX(st_mov8, ".byte 0x88,0x08") /* mov %cl,(%rax) */
STORE_RCX(st_mov8_high, ".byte 0x88,0x28") /* mov %ch,(%rax) */
STORE_RCX(st_imm32_sext, ".byte 0x48,0xc7,0x00,0xef,0xcd,0xab,0x89")
STORE_RCX(st_imm32, ".byte 0xc7,0x00,0xef,0xcd,0xab,0x89")
STORE_RCX(st_imm16, ".byte 0x66,0xc7,0x00,0x34,0x12")
STORE_RCX(st_imm8, ".byte 0xc6,0x00,0x5a")
STORE_RCX(st_movnti32, ".byte 0x0f,0xc3,0x08") /* movnti %ecx,(%rax) */
STORE_RCX(st_movnti64, ".byte 0x48,0x0f,0xc3,0x08") /* movnti %rcx,(%rax) */

STORE_XMM(st_movups, ".byte 0x0f,0x11,0x10")
STORE_XMM(st_movupd, ".byte 0x66,0x0f,0x11,0x10")
STORE_XMM(st_movss, ".byte 0xf3,0x0f,0x11,0x10")
STORE_XMM(st_movsd, ".byte 0xf2,0x0f,0x11,0x10")
STORE_XMM(st_movaps, ".byte 0x0f,0x29,0x10")
STORE_XMM(st_movapd, ".byte 0x66,0x0f,0x29,0x10")
STORE_XMM(st_movntps, ".byte 0x0f,0x2b,0x10")
STORE_XMM(st_movdqa, ".byte 0x66,0x0f,0x7f,0x10")
STORE_XMM(st_movdqu, ".byte 0xf3,0x0f,0x7f,0x10")
STORE_XMM(st_movntdq, ".byte 0x66,0x0f,0xe7,0x10")
STORE_XMM(st_movq_d6, ".byte 0x66,0x0f,0xd6,0x10")
STORE_XMM(st_movd_7e, ".byte 0x66,0x0f,0x7e,0x10")
STORE_XMM(st_movq_7e, ".byte 0x66,0x48,0x0f,0x7e,0x10")
STORE_XMM(st_movdqu_xmm15, ".byte 0xf3,0x44,0x0f,0x7f,0x38")

void st_movaps_sib_disp32(char *p, int &done)
{
    __asm__ volatile(LOAD_XMM
                     ".byte 0x0f,0x29,0x94,0x08,0x00,0x02,0x00,0x00" DONE
                     /* movaps %xmm2,0x200(%rax,%rcx) */
                     : [done] "=&r"(done)
                     : "a"(p), "c"(0x40ul), [lo] "r"(V), [hi] "r"(HI)
                     : "xmm2", "xmm15", "memory");
}

STORE_MM(st_movntq, ".byte 0x0f,0xe7,0x18")
STORE_MM(st_movq_mm, ".byte 0x0f,0x7f,0x18")
STORE_MM(st_movd_mm, ".byte 0x0f,0x7e,0x18")

STORE_VEX(st_vmovups, ".byte 0xc5,0xf8,0x11,0x10")
STORE_VEX(st_vmovdqa, ".byte 0xc5,0xf9,0x7f,0x10")
STORE_VEX(st_vmovdqu, ".byte 0xc5,0xfa,0x7f,0x10")
STORE_VEX(st_vmovaps_ymm, ".byte 0xc5,0xfc,0x29,0x10")
STORE_VEX(st_vmovdqu_xmm15, ".byte 0xc4,0x61,0x7a,0x7f,0x38")
STORE_VEX(st_vmovq_d6, ".byte 0xc5,0xf9,0xd6,0x10")
STORE_VEX(st_vmovntdq, ".byte 0xc5,0xf9,0xe7,0x10")
STORE_VEX(st_vmovss, ".byte 0xc5,0xfa,0x11,0x10")
STORE_VEX(st_vmovq_7e, ".byte 0xc4,0xe1,0xf9,0x7e,0x10")

/* RIP-relative, to rip_page (p unused) */
void st_rip(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0x89,0x05\n"
                     ".long dcxemu_test_rip_page + 0x18 - 1f\n"
                     "1:" DONE /* mov %rax,rip_page+0x18(%rip) */
                     : [done] "=&r"(done)
                     : "a"(V)
                     : "memory");
}

void st_rip_imm(char *p, int &done)
{
    __asm__ volatile(".byte 0x48,0xc7,0x05\n"
                     ".long dcxemu_test_rip_page + 0x20 - 1f\n"
                     ".long 0x12345678\n"
                     "1:" DONE /* movq $0x12345678,rip_page+0x20(%rip) */
                     : [done] "=&r"(done)
                     :
                     : "memory");
}

void st_rip_movups(char *p, int &done)
{
    __asm__ volatile(LOAD_XMM ".byte 0x0f,0x11,0x15\n"
                              ".long dcxemu_test_rip_page + 0x30 - 1f\n"
                              "1:" DONE /* movups %xmm2,rip_page+0x30(%rip) */
                     : [done] "=&r"(done)
                     : [lo] "r"(V), [hi] "r"(HI)
                     : "xmm2", "xmm15", "memory");
}

enum {
    NEED_NONE     = 0,
    NEED_AVX      = 1 << 0,
    NEED_RIP_PAGE = 1 << 1,
    FROM_FP       = 1 << 2 /* the value is in an xmm or mm register */
};

struct store_case {
    const char *name;
    void (*store)(char *p, int &done);
    size_t offset;
    uint64_t value;
    int need;
};

std::ostream &operator<<(std::ostream &os, const store_case &c)
{
    return os << c.name;
}

const store_case store_cases[] = {
    { "mlx5_sib", st_mlx5_sib, 0x8, V, NEED_NONE },
    { "mlx5_disp8", st_mlx5_disp8, 0x20, V, NEED_NONE },
    { "mlx5_base", st_mlx5_base, 0, V, NEED_NONE },
    { "mlx5_r9", st_mlx5_r9, 0, V, NEED_NONE },
    { "mlx5_sib_disp8", st_mlx5_sib_disp8, 0x18, V, NEED_NONE },
    { "disp32", st_disp32, 0x100, V, NEED_NONE },
    { "disp8_negative", st_disp8_negative, 0x28, V, NEED_NONE },
    { "rex_xb_scale8", st_rex_xb_scale8, 0x28, V, NEED_NONE },
    { "no_base", st_no_base, 0x10, V, NEED_NONE },
    { "r13_disp8", st_r13_disp8, 0x8, V, NEED_NONE },
    { "r12_base", st_r12_base, 0, V, NEED_NONE },
    { "r12_index", st_r12_index, 0x40, V, NEED_NONE },
    { "sib_no_index", st_sib_no_index, 0, V, NEED_NONE },
    { "ds_prefix", st_ds_prefix, 0, V, NEED_NONE },
    { "mov32", st_mov32, 0, V & 0xffffffff, NEED_NONE },
    { "mov16", st_mov16, 0, V & 0xffff, NEED_NONE },
    { "mov8", st_mov8, 0, V & 0xff, NEED_NONE },
    { "mov8_high", st_mov8_high, 0, (V >> 8) & 0xff, NEED_NONE },
    { "mov8_dil", st_dil, 0, V & 0xff, NEED_NONE },
    { "imm32_sext", st_imm32_sext, 0, 0xffffffff89abcdefull, NEED_NONE },
    { "imm32_disp8", st_imm_disp8, 0x10, 0x12345678, NEED_NONE },
    { "imm32", st_imm32, 0, 0x89abcdef, NEED_NONE },
    { "imm16", st_imm16, 0, 0x1234, NEED_NONE },
    { "imm8", st_imm8, 0, 0x5a, NEED_NONE },
    { "movnti32", st_movnti32, 0, V & 0xffffffff, NEED_NONE },
    { "movnti64", st_movnti64, 0, V, NEED_NONE },
    { "movups", st_movups, 0, V, FROM_FP },
    { "movupd", st_movupd, 0, V, FROM_FP },
    { "movss", st_movss, 0, V & 0xffffffff, FROM_FP },
    { "movsd", st_movsd, 0, V, FROM_FP },
    { "movaps", st_movaps, 0, V, FROM_FP },
    { "movapd", st_movapd, 0, V, FROM_FP },
    { "movntps", st_movntps, 0, V, FROM_FP },
    { "movdqa", st_movdqa, 0, V, FROM_FP },
    { "movdqu", st_movdqu, 0, V, FROM_FP },
    { "movntdq", st_movntdq, 0, V, FROM_FP },
    { "movq_d6", st_movq_d6, 0, V, FROM_FP },
    { "movd_7e", st_movd_7e, 0, V & 0xffffffff, FROM_FP },
    { "movq_7e", st_movq_7e, 0, V, FROM_FP },
    { "movdqu_xmm15", st_movdqu_xmm15, 0, HI, FROM_FP },
    { "movaps_sib_disp32", st_movaps_sib_disp32, 0x240, V, FROM_FP },
    { "movntq_mm", st_movntq, 0, V, FROM_FP },
    { "movq_mm", st_movq_mm, 0, V, FROM_FP },
    { "movd_mm", st_movd_mm, 0, V & 0xffffffff, FROM_FP },
    { "vmovups", st_vmovups, 0, V, NEED_AVX | FROM_FP },
    { "vmovdqa", st_vmovdqa, 0, V, NEED_AVX | FROM_FP },
    { "vmovdqu", st_vmovdqu, 0, V, NEED_AVX | FROM_FP },
    { "vmovaps_ymm", st_vmovaps_ymm, 0, V, NEED_AVX | FROM_FP },
    { "vmovdqu_xmm15", st_vmovdqu_xmm15, 0, HI, NEED_AVX | FROM_FP },
    { "vmovq_d6", st_vmovq_d6, 0, V, NEED_AVX | FROM_FP },
    { "vmovntdq", st_vmovntdq, 0, V, NEED_AVX | FROM_FP },
    { "vmovss", st_vmovss, 0, V & 0xffffffff, NEED_AVX | FROM_FP },
    { "vmovq_7e", st_vmovq_7e, 0, V, NEED_AVX | FROM_FP },
    { "rip", st_rip, 0x18, V, NEED_RIP_PAGE },
    { "rip_imm", st_rip_imm, 0x20, 0x12345678, NEED_RIP_PAGE },
    { "rip_movups", st_rip_movups, 0x30, V, NEED_RIP_PAGE | FROM_FP },
};

class TrapStore : public ::testing::TestWithParam<store_case> {};

/* Each encoding traps once, with its address and value, and execution goes
 * on right after it. */
TEST_P(TrapStore, TrapsOnce)
{
    const store_case &c = GetParam();
    seen_t rip_seen;
    uint64_t before;
    int done = 0;
    char *p;

    SKIP_IF_RW();

    if ((c.need & NEED_AVX) && !have_avx()) {
        GTEST_SKIP() << "no AVX";
    }
    if ((c.need & FROM_FP) && RUNNING_ON_VALGRIND) {
        GTEST_SKIP() << "valgrind passes no xmm/mm values: refused";
    }
    region_t r;
    if (c.need & NEED_RIP_PAGE) {
        ASSERT_EQ(0, dcxemu_trap_add(rip_page, PAGE, record, &rip_seen));
        p = rip_page;
    } else {
        p = r.base;
    }
    seen_t &seen = (c.need & NEED_RIP_PAGE) ? rip_seen : r.seen;

    before = dcxemu_trap_count();
    c.store(p, done);
    EXPECT_EQ(1, done);
    EXPECT_EQ(1u, seen.count.load());
    EXPECT_EQ(before + 1, dcxemu_trap_count());
    EXPECT_EQ((uintptr_t)p + c.offset, seen.addr.load());
    EXPECT_EQ(c.value, seen.value.load()) << std::hex << seen.value.load();

    if (c.need & NEED_RIP_PAGE) {
        dcxemu_trap_remove(rip_page, PAGE);
    }
}

/* ---- BlueFlame copies: every byte of the wide stores libmlx5, UCX and
 * memcpy-like code use, ymm's upper half from the signal frame's XSAVE
 * image */

/* ymm2 = (V, HI, HI, 0): xmm2 as LOAD_XMM makes it, xmm15 above it */
#define LOAD_YMM LOAD_XMM " vinsertf128 $1, %%xmm15, %%ymm2, %%ymm2\n"
#define STORE_YMM(name, bytes)                               \
    void name(char *p, int &done)                            \
    {                                                        \
        __asm__ volatile(LOAD_YMM bytes "\n vzeroupper" DONE \
                         : [done] "=&r"(done)                \
                         : "a"(p), [lo] "r"(V), [hi] "r"(HI) \
                         : "xmm2", "xmm15", "memory");       \
    }

STORE_YMM(st_vmovdqu_ymm, ".byte 0xc5,0xfe,0x7f,0x10")
STORE_YMM(st_vmovdqa_ymm, ".byte 0xc5,0xfd,0x7f,0x10")
STORE_YMM(st_vmovntdq_ymm, ".byte 0xc5,0xfd,0xe7,0x10")
STORE_YMM(st_vmovaps_ymm2, ".byte 0xc5,0xfc,0x29,0x10")
STORE_YMM(st_vmovups_ymm, ".byte 0xc5,0xfc,0x11,0x10")

/* what the zmm stores store: the ymm cases' 32 bytes, then 32 more */
const uint64_t wide_words[8] = { V, HI, HI, 0, V ^ 1, HI ^ 1, 1, 2 };

/* glibc's memcpy of 64 to 128 bytes with AVX-512: vmovdqu64 %zmm16,(%rdi)
 * and vmovdqu64 %zmm17,-0x40(%rdi,%rdx,1) (disp8 * 64) */
__attribute__((target("avx512f"))) void st_vmovdqu64_zmm(char *p, int &done)
{
    __asm__ volatile("vmovdqu64 (%[src]), %%zmm16\n"
                     ".byte 0x62,0xe1,0xfe,0x48,0x7f,0x00\n" DONE
                     : [done] "=&r"(done)
                     : "a"(p), [src] "r"(wide_words)
                     : "xmm16", "memory");
}

__attribute__((target("avx512f"))) void
st_vmovdqu64_zmm17_disp8(char *p, int &done)
{
    __asm__ volatile("vmovdqu64 (%[src]), %%zmm17\n"
                     ".byte 0x62,0xe1,0xfe,0x48,0x7f,0x4c,0x10,0xff\n" DONE
                     : [done] "=&r"(done)
                     : "a"(p), "d"(128ul), [src] "r"(wide_words)
                     : "xmm17", "memory");
}

__attribute__((target("avx512f"))) void st_vmovdqa64_zmm2(char *p, int &done)
{
    __asm__ volatile("vmovdqu64 (%[src]), %%zmm2\n"
                     ".byte 0x62,0xf1,0xfd,0x48,0x7f,0x10\n vzeroupper" DONE
                     : [done] "=&r"(done)
                     : "a"(p), [src] "r"(wide_words)
                     : "xmm2", "memory");
}

__attribute__((target("avx512f"))) void st_vmovntdq_zmm(char *p, int &done)
{
    __asm__ volatile("vmovdqu64 (%[src]), %%zmm18\n"
                     ".byte 0x62,0xe1,0x7d,0x48,0xe7,0x10\n" DONE
                     : [done] "=&r"(done)
                     : "a"(p), [src] "r"(wide_words)
                     : "xmm18", "memory");
}

struct wide_case {
    const char *name;
    void (*store)(char *p, int &done);
    unsigned size;
    bool avx;
    bool avx512;
    size_t offset;
};

std::ostream &operator<<(std::ostream &os, const wide_case &c)
{
    return os << c.name;
}

const wide_case wide_cases[] = {
    { "movaps", st_movaps, 16, false },
    { "movups", st_movups, 16, false },
    { "movapd", st_movapd, 16, false },
    { "movntps", st_movntps, 16, false },
    { "movdqa", st_movdqa, 16, false },
    { "movdqu", st_movdqu, 16, false },
    { "movntdq", st_movntdq, 16, false },
    { "vmovdqa", st_vmovdqa, 16, true },
    { "vmovdqu", st_vmovdqu, 16, true },
    { "vmovntdq", st_vmovntdq, 16, true },
    { "vmovdqu_ymm", st_vmovdqu_ymm, 32, true },
    { "vmovdqa_ymm", st_vmovdqa_ymm, 32, true },
    { "vmovntdq_ymm", st_vmovntdq_ymm, 32, true },
    { "vmovaps_ymm", st_vmovaps_ymm2, 32, true },
    { "vmovups_ymm", st_vmovups_ymm, 32, true },
    { "vmovdqu64_zmm16", st_vmovdqu64_zmm, 64, true, true },
    { "vmovdqu64_zmm17_disp8", st_vmovdqu64_zmm17_disp8, 64, true, true, 64 },
    { "vmovdqa64_zmm2", st_vmovdqa64_zmm2, 64, true, true },
    { "vmovntdq_zmm18", st_vmovntdq_zmm, 64, true, true },
};

class TrapWideStore : public ::testing::TestWithParam<wide_case> {};

TEST_P(TrapWideStore, EveryByte)
{
    const wide_case &c = GetParam();
    int done           = 0;

    SKIP_IF_RW();
    if (c.avx && !have_avx()) {
        GTEST_SKIP() << "no AVX";
    }
    if (c.avx512 && !have_avx512f()) {
        GTEST_SKIP() << "no AVX-512";
    }
    if (RUNNING_ON_VALGRIND) {
        GTEST_SKIP() << "valgrind passes no xmm values: refused";
    }
    region_t r;
    c.store(r.base, done);
    EXPECT_EQ(1, done);
    ASSERT_EQ(1u, r.seen.count.load());
    EXPECT_EQ(c.size, r.seen.size.load());
    EXPECT_EQ((uintptr_t)r.base + c.offset, r.seen.addr.load());
    EXPECT_EQ(V, r.seen.value.load());
    EXPECT_EQ(0, memcmp(wide_words, r.seen.bytes, c.size));
}

INSTANTIATE_TEST_SUITE_P(Encodings, TrapWideStore,
                         ::testing::ValuesIn(wide_cases),
                         [](const ::testing::TestParamInfo<wide_case> &i) {
                             return std::string(i.param.name);
                         });

INSTANTIATE_TEST_SUITE_P(Encodings, TrapStore, ::testing::ValuesIn(store_cases),
                         [](const ::testing::TestParamInfo<store_case> &i) {
                             return std::string(i.param.name);
                         });

/* ---- the decoder alone, on a made-up context */

class X86Decode : public ::testing::Test {
protected:
    void SetUp() override
    {
        memset(&uc, 0, sizeof(uc));
        memset(&fp, 0, sizeof(fp));
        uc.uc_mcontext.fpregs         = &fp;
        uc.uc_mcontext.gregs[REG_RIP] = 0x400000;
    }

    dcxemu_x86_status_t decode(std::vector<uint8_t> code)
    {
        return dcxemu_x86_store_decode(code.data(), code.size(), &uc, &st);
    }

    ucontext_t uc;
    struct _libc_fpstate fp;
    dcxemu_x86_store_t st;
};

TEST_F(X86Decode, AddressAndLength)
{
    uc.uc_mcontext.gregs[REG_RDI] = 0x1000;
    uc.uc_mcontext.gregs[REG_RSI] = 0x20;
    uc.uc_mcontext.gregs[REG_RDX] = 42;
    ASSERT_EQ(DCXEMU_X86_OK, decode({ 0x48, 0x89, 0x54, 0x37, 0x08 }));
    EXPECT_EQ(0x1028u, st.addr);
    EXPECT_EQ(42u, st.value);
    EXPECT_EQ(8u, st.size);
    EXPECT_EQ(5u, st.length);

    /* RIP-relative counts from the end, immediate included */
    ASSERT_EQ(DCXEMU_X86_OK,
              decode({ 0x48, 0xc7, 0x05, 0x10, 0, 0, 0, 1, 0, 0, 0 }));
    EXPECT_EQ(0x400000u + 11 + 0x10, st.addr);
    EXPECT_EQ(1u, st.value);
    EXPECT_EQ(11u, st.length);
}

/* mmN is at ST((N - TOP) mod 8) of the FXSAVE image. */
TEST_F(X86Decode, Registers)
{
    uc.uc_mcontext.gregs[REG_RAX] = 0x1000;
    uc.uc_mcontext.gregs[REG_RCX] = 0x4433;
    fp.swd                        = 3 << 11; /* TOP = 3 */
    fp._st[0].significand[0]      = 0x1111;
    fp._st[0].significand[3]      = 0x4444;
    ASSERT_EQ(DCXEMU_X86_OK, decode({ 0x0f, 0xe7, 0x18 })); /* movntq %mm3 */
    EXPECT_EQ(0x4444000000001111ull, st.value);
    EXPECT_TRUE(st.fpregs);

    fp._xmm[9].element[0] = 0x89abcdef;
    fp._xmm[9].element[1] = 0x01234567;
    fp._xmm[9].element[2] = 0xffffffff;
    ASSERT_EQ(DCXEMU_X86_OK, decode({ 0xf3, 0x44, 0x0f, 0x7f, 0x08 }));
    EXPECT_EQ(0x0123456789abcdefull, st.value); /* movdqu %xmm9 */
    EXPECT_EQ(16u, st.size);

    ASSERT_EQ(DCXEMU_X86_OK, decode({ 0x88, 0x28 })); /* mov %ch */
    EXPECT_EQ(0x44u, st.value);
    EXPECT_FALSE(st.fpregs);
    uc.uc_mcontext.gregs[REG_RBP] = 0x1277;
    ASSERT_EQ(DCXEMU_X86_OK, decode({ 0x40, 0x88, 0x28 })); /* mov %bpl */
    EXPECT_EQ(0x77u, st.value);
}

TEST_F(X86Decode, Refusals)
{
    EXPECT_EQ(DCXEMU_X86_REGISTER, decode({ 0x48, 0x89, 0xc8 })); /* mod=3 */
    EXPECT_EQ(DCXEMU_X86_REGISTER, decode({ 0x66, 0x0f, 0x7e, 0xc0 }));
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0x48, 0x8b, 0x08 })); /* a load */
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0x48, 0x87, 0x08 })); /* xchg */
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0x48, 0x01, 0x08 })); /* add */
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0xf3, 0xaa })); /* rep stosb */
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0x0f, 0x17, 0x10 })); /* movhps */
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0xc7, 0x08, 0, 0, 0, 0 })); /* /1 */
    EXPECT_EQ(DCXEMU_X86_OPCODE, decode({ 0x66, 0xc5, 0xf8, 0x11, 0x10 }));
    /* a masked store: which bytes it writes depends on k1 */
    EXPECT_EQ(DCXEMU_X86_EVEX, decode({ 0x62, 0xf1, 0xfe, 0x49, 0x7f, 0x00 }));
    /* a zmm store without the AVX-512 state in the frame */
    EXPECT_EQ(DCXEMU_X86_NO_FPREGS,
              decode({ 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x00 }));
    EXPECT_EQ(DCXEMU_X86_PREFIX, decode({ 0x64, 0x48, 0x89, 0x08 }));
    EXPECT_EQ(DCXEMU_X86_PREFIX, decode({ 0x67, 0x48, 0x89, 0x08 }));
    EXPECT_EQ(DCXEMU_X86_PREFIX, decode({ 0xf0, 0x48, 0x89, 0x08 }));
    EXPECT_EQ(DCXEMU_X86_TRUNCATED, decode({ 0x48, 0x89, 0x82, 0x00 }));
    EXPECT_EQ(DCXEMU_X86_TRUNCATED, decode({}));
    uc.uc_mcontext.fpregs = NULL;
    EXPECT_EQ(DCXEMU_X86_NO_FPREGS, decode({ 0x0f, 0x11, 0x10 }));
    EXPECT_STRNE("", dcxemu_x86_status_str(DCXEMU_X86_OPCODE));
}

/* ---- the API */

TEST(Trap, AddRemove)
{
    SKIP_IF_RW();

    region_t r;
    char *other;

    EXPECT_EQ(0, dcxemu_trap_rw_mode());
    EXPECT_TRUE(dcxemu_trap_covers(r.base));
    EXPECT_TRUE(dcxemu_trap_covers(r.base + PAGE - 1));
    EXPECT_FALSE(dcxemu_trap_covers(r.base + PAGE));
    EXPECT_ERRNO_EQ(EEXIST, dcxemu_trap_add(r.base, PAGE, record, &r.seen));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_trap_add(r.base + 8, PAGE, record, &r.seen));
    EXPECT_ERRNO_EQ(EINVAL, dcxemu_trap_add(r.base, 0, record, &r.seen));

    /* remove() makes the page an ordinary one again */
    dcxemu_trap_remove(r.base, PAGE);
    EXPECT_FALSE(dcxemu_trap_covers(r.base));
    *(volatile uint64_t *)r.base = V;
    EXPECT_EQ(V, *(volatile uint64_t *)r.base);
    EXPECT_EQ(0u, r.seen.count.load());

    /* and the slot is reused */
    other = (char *)mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_EQ(0, dcxemu_trap_add(other, PAGE, record, &r.seen));
    *(volatile uint64_t *)other = 7;
    EXPECT_EQ(7u, r.seen.value.load());
    dcxemu_trap_remove(other, PAGE);
    munmap(other, PAGE);
    ASSERT_EQ(0, dcxemu_trap_add(r.base, PAGE, record, &r.seen));
}

TEST(Trap, TableFull)
{
    SKIP_IF_RW();

    const size_t n = DCXEMU_TRAP_MAX_REGIONS + 44;
    char *map      = (char *)mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    seen_t seen;
    size_t i, added = 0;
    int rc = 0;

    ASSERT_NE(MAP_FAILED, (void *)map);
    for (i = 0; i < n; ++i) {
        rc = dcxemu_trap_add(map + i * PAGE, PAGE, record, &seen);
        if (rc != 0) {
            break;
        }
        ++added;
    }
    EXPECT_ERRNO_EQ(ENOSPC, rc);
    EXPECT_LE(added, (size_t)DCXEMU_TRAP_MAX_REGIONS);
    EXPECT_GE(added, (size_t)DCXEMU_TRAP_MAX_REGIONS - 56);
    *(volatile uint64_t *)(map + (added - 1) * PAGE) = 3;
    EXPECT_EQ(3u, seen.value.load());
    for (i = 0; i < added; ++i) {
        dcxemu_trap_remove(map + i * PAGE, PAGE);
    }
    munmap(map, n * PAGE);
}

TEST(Trap, Counts)
{
    SKIP_IF_RW();

    region_t r;
    uint64_t before = dcxemu_trap_count();
    int i;

    for (i = 0; i < 100; ++i) {
        ((volatile uint64_t *)r.base)[i % 512] = (uint64_t)i;
    }
    EXPECT_EQ(before + 100, dcxemu_trap_count());
    EXPECT_EQ(100u, r.seen.count.load());
    EXPECT_EQ(99u * 100 / 2, r.seen.sum.load());
    EXPECT_EQ((uintptr_t)r.base + 99 * 8, r.seen.addr.load());
}

/* A callback that stores to another trapped region: the handler nests. */
TEST(Trap, Nested)
{
    SKIP_IF_RW();

    region_t inner, outer;
    struct ctx_t {
        region_t *inner;
        seen_t seen;
    } ctx;

    ctx.inner = &inner;
    dcxemu_trap_remove(outer.base, PAGE);
    ASSERT_EQ(0, dcxemu_trap_add(
                         outer.base, PAGE,
                         [](void *arg, void *addr, uint64_t value,
                            const uint8_t *, unsigned) {
                             ctx_t *c = (ctx_t *)arg;
                             *(volatile uint64_t *)c->inner->base = value + 1;
                             record(&c->seen, addr, value);
                         },
                         &ctx));
    *(volatile uint64_t *)outer.base = 5;
    EXPECT_EQ(1u, ctx.seen.count.load());
    EXPECT_EQ(1u, inner.seen.count.load());
    EXPECT_EQ(6u, inner.seen.value.load());
}

/* ---- code at the end of a page: the trap reads the next page only when it
 * must, and survives its absence */

/* Code in an executable mapping: `before` of its bytes at the end of the first
 * page, the rest on the next one (unmapped unless next). */
char *
code_at_boundary(const std::vector<uint8_t> &bytes, size_t before, bool next)
{
    char *m = (char *)mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *code;

    EXPECT_NE(MAP_FAILED, (void *)m);
    code = m + PAGE - before;
    memcpy(code, bytes.data(), bytes.size());
    EXPECT_EQ(0, mprotect(m, 2 * PAGE, PROT_READ | PROT_EXEC));
    if (!next) {
        munmap(m + PAGE, PAGE);
    }
    return code;
}

/* Calls code with rdi = p, rdx = p, rax = a, rcx = c (below the red zone) */
void call_code(const char *code, char *p, uint64_t a, uint64_t c)
{
    __asm__ volatile("sub $128, %%rsp\n call *%[f]\n add $128, %%rsp"
                     : "+a"(a), "+c"(c), "+D"(p)
                     : [f] "r"(code), "d"(p)
                     : "memory", "cc");
}

TEST(TrapDecode, StoreAcrossCodePages)
{
    SKIP_IF_RW();

    region_t r;
    /* mov %rcx,(%rdx,%rax); ret: two bytes on the first page */
    char *code = code_at_boundary({ 0x48, 0x89, 0x0c, 0x02, 0xc3 }, 2, true);

    call_code(code, r.base, 8, V);
    EXPECT_EQ(1u, r.seen.count.load());
    EXPECT_EQ((uintptr_t)r.base + 8, r.seen.addr.load());
    EXPECT_EQ(V, r.seen.value.load());
    munmap(code - (PAGE - 2), 2 * PAGE);
}

void child_refused_at_code_end(void *)
{
    region_t r;
    /* rep stosb, the last instruction before an unmapped page */
    char *code = code_at_boundary({ 0xf3, 0xaa }, 2, false);
    call_code(code, r.base, 1, 8);
}

TEST(TrapDecode, RefusedAtCodeEnd)
{
    std::string out;
    int status;

    SKIP_IF_RW();
    ASSERT_EQ(0, dcxemu_trap_init());
    status = run_child(child_refused_at_code_end, NULL, &out);
    EXPECT_TRUE(died_of_segv(status)) << std::hex << status << " " << out;
    EXPECT_NE(std::string::npos, out.find("code: f3 aa\n")) << out;
    printf("%s", out.c_str());
}

/* ---- threads */

void store_many(char *base, int n, uint64_t first)
{
    for (int i = 0; i < n; ++i) {
        ((volatile uint64_t *)base)[i % 512] = first + (uint64_t)i;
    }
}

TEST(Trap, ConcurrentThreads)
{
    SKIP_IF_RW();

    const int n = 20000;
    region_t r(2, 2);
    uint64_t before = dcxemu_trap_count();

    std::thread a(store_many, r.base, n, 0);
    std::thread b(store_many, r.base + PAGE, n, 1000000);
    a.join();
    b.join();
    EXPECT_EQ(2u * n, r.seen.count.load());
    EXPECT_EQ(before + 2 * n, dcxemu_trap_count());
    EXPECT_EQ((uint64_t)n * (n - 1) + 1000000ull * n, r.seen.sum.load());
}

/* A thread with a small alternate signal stack (a guard page below it): the
 * handler runs there, the callback on the thread's own stack, deep enough to
 * overflow the alternate one, and the alternate stack stays configured. */
TEST(Trap, AltStack)
{
    SKIP_IF_RW();
    if (RUNNING_ON_VALGRIND) {
        GTEST_SKIP() << "under valgrind the callback stays on the alternate "
                        "stack";
    }

    const size_t alt_size = 4 * PAGE;
    region_t r;
    struct ctx_t {
        seen_t seen;
        char *alt;
        std::atomic<int> on_alt{ -1 };
    } ctx;

    char *alt = (char *)mmap(NULL, PAGE + alt_size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void *)alt);
    ASSERT_EQ(0, mprotect(alt, PAGE, PROT_NONE));
    ctx.alt = alt + PAGE;
    dcxemu_trap_remove(r.base, PAGE);
    ASSERT_EQ(0, dcxemu_trap_add(
                         r.base, PAGE,
                         [](void *arg, void *addr, uint64_t value,
                            const uint8_t *, unsigned) {
                             ctx_t *c = (ctx_t *)arg;
                             volatile char deep[64 * 1024];
                             memset((char *)deep, 1, sizeof(deep));
                             c->on_alt = ((char *)deep >= c->alt - PAGE) &&
                                         ((char *)deep < c->alt + 4 * PAGE);
                             record(&c->seen, addr, value + deep[100]);
                         },
                         &ctx));

    std::thread t([&] {
        stack_t ss, now;
        ss.ss_sp    = ctx.alt;
        ss.ss_size  = alt_size;
        ss.ss_flags = 0;
        ASSERT_EQ(0, sigaltstack(&ss, NULL));
        store_many(r.base, 10, 100);
        ASSERT_EQ(0, sigaltstack(NULL, &now));
        EXPECT_EQ(ss.ss_sp, now.ss_sp);
        EXPECT_EQ(0, now.ss_flags);
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
    });
    t.join();
    EXPECT_EQ(10u, ctx.seen.count.load());
    EXPECT_EQ(0, ctx.on_alt.load());
    EXPECT_EQ(10u * 100 + 9 * 10 / 2 + 10, ctx.seen.sum.load());
    EXPECT_TRUE(kernel_segv().flags & SA_ONSTACK);
    munmap(alt, PAGE + alt_size);
}

/* A thread that blocks every signal still traps: SIGSEGV is not blocked. */
TEST(Trap, BlockedThread)
{
    SKIP_IF_RW();

    region_t r;

    std::thread t([&] {
        sigset_t all, now;
        sigfillset(&all);
        ASSERT_EQ(0, pthread_sigmask(SIG_BLOCK, &all, NULL));
        ASSERT_EQ(0, pthread_sigmask(SIG_BLOCK, NULL, &now));
        EXPECT_FALSE(sigismember(&now, SIGSEGV));
        EXPECT_TRUE(sigismember(&now, SIGUSR1));
        store_many(r.base, 10, 0);
        ASSERT_EQ(0, sigprocmask(SIG_SETMASK, &all, NULL));
        ASSERT_EQ(0, sigprocmask(SIG_BLOCK, NULL, &now));
        EXPECT_FALSE(sigismember(&now, SIGSEGV));
        store_many(r.base, 10, 0);
    });
    t.join();
    EXPECT_EQ(20u, r.seen.count.load());
}

/* ---- chaining to the application's handler */

struct app_t {
    std::atomic<int> calls{ 0 };
    std::atomic<uintptr_t> addr{ 0 };
    char *page = nullptr;
} app;

void app_handler(int sig, siginfo_t *si, void *ctx)
{
    ++app.calls;
    app.addr = (uintptr_t)si->si_addr;
    mprotect(app.page, PAGE, PROT_READ | PROT_WRITE);
}

void app_plain_handler(int sig)
{
    ++app.calls;
    mprotect(app.page, PAGE, PROT_READ | PROT_WRITE);
}

char *read_only_page()
{
    char *p = (char *)mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
    EXPECT_NE(MAP_FAILED, (void *)p);
    return p;
}

/* Installed before init (from a constructor here): the kernel's handler
 * becomes ours, the application's is reported and chained to. */
TEST(TrapChain, HandlerBeforeInit)
{
    struct sigaction now;
    int calls = preinit_calls;
    char *page;

    SKIP_IF_RW();

    page = read_only_page();

    ASSERT_EQ(0, preinit_installed);
    ASSERT_EQ(0, dcxemu_trap_init());
    ASSERT_EQ(0, sigaction(SIGSEGV, NULL, &now));
    EXPECT_EQ((void *)preinit_handler, (void *)now.sa_sigaction);
    EXPECT_NE((void *)preinit_handler, kernel_segv().handler);

    fixable_page               = page;
    *(volatile uint64_t *)page = V;
    fixable_page               = nullptr;
    EXPECT_EQ(V, *(volatile uint64_t *)page);
    EXPECT_EQ(calls + 1, preinit_calls.load());
    munmap(page, PAGE);
}

/* Installed after init: recorded, reported back as oldact, chained to, and
 * the kernel's handler stays ours. */
TEST(TrapChain, HandlerAfterInit)
{
    struct sigaction act, old, back;
    kernel_sigaction ours;

    SKIP_IF_RW();

    ASSERT_EQ(0, dcxemu_trap_init());
    ours = kernel_segv();
    memset(&act, 0, sizeof(act));
    act.sa_sigaction = app_handler;
    act.sa_flags     = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    ASSERT_EQ(0, sigaction(SIGSEGV, &act, &old));
    EXPECT_EQ((void *)preinit_handler, (void *)old.sa_sigaction);
    EXPECT_EQ(ours.handler, kernel_segv().handler);
    EXPECT_EQ(ours.flags, kernel_segv().flags);

    app.page                           = read_only_page();
    app.calls                          = 0;
    ((volatile uint64_t *)app.page)[3] = V;
    EXPECT_EQ(1, app.calls.load());
    EXPECT_EQ((uintptr_t)app.page + 24, app.addr.load());
    EXPECT_EQ(V, ((volatile uint64_t *)app.page)[3]);
    munmap(app.page, PAGE);

    /* a trapped store does not reach it */
    {
        region_t r;
        *(volatile uint64_t *)r.base = 1;
        EXPECT_EQ(1u, r.seen.count.load());
        EXPECT_EQ(1, app.calls.load());
    }

    ASSERT_EQ(0, sigaction(SIGSEGV, &old, &back));
    EXPECT_EQ((void *)app_handler, (void *)back.sa_sigaction);
    EXPECT_EQ(ours.handler, kernel_segv().handler);
}

/* signal() installs a plain handler, sysv_signal() a one-shot one. */
TEST(TrapChain, SignalVariants)
{
    struct sigaction now, restore;

    SKIP_IF_RW();

    ASSERT_EQ(0, dcxemu_trap_init());
    ASSERT_EQ(0, sigaction(SIGSEGV, NULL, &restore));

    EXPECT_EQ((void *)preinit_handler,
              (void *)signal(SIGSEGV, app_plain_handler));
    app.page                       = read_only_page();
    app.calls                      = 0;
    *(volatile uint64_t *)app.page = V;
    EXPECT_EQ(1, app.calls.load());
    munmap(app.page, PAGE);

    EXPECT_EQ(app_plain_handler, sysv_signal(SIGSEGV, app_plain_handler));
    app.page                       = read_only_page();
    *(volatile uint64_t *)app.page = V;
    EXPECT_EQ(2, app.calls.load());
    ASSERT_EQ(0, sigaction(SIGSEGV, NULL, &now));
    EXPECT_EQ(SIG_DFL, now.sa_handler); /* SA_RESETHAND */
    munmap(app.page, PAGE);

    EXPECT_EQ(SIG_DFL, bsd_signal(SIGSEGV, SIG_IGN));
    raise(SIGSEGV); /* a sent SIGSEGV can be ignored */

    ASSERT_EQ(0, sigaction(SIGSEGV, &restore, NULL));

    /* other signals pass through */
    EXPECT_NE(SIG_ERR, signal(SIGUSR2, app_plain_handler));
    ASSERT_EQ(0, sigaction(SIGUSR2, NULL, &now));
    EXPECT_EQ(app_plain_handler, now.sa_handler);
    signal(SIGUSR2, SIG_DFL);
}

/* ---- what must kill: children */

void child_fault_with_default(void *)
{
    char *page = read_only_page();
    dcxemu_trap_init();
    signal(SIGSEGV, SIG_DFL);
    *(volatile uint64_t *)page = V;
}

TEST(TrapChain, FaultOutsideDiesByDefault)
{
    std::string out;
    int status = run_child(child_fault_with_default, NULL, &out);
    EXPECT_TRUE(died_of_segv(status)) << std::hex << status << " " << out;
    EXPECT_EQ(std::string::npos, out.find("doorbell trap")) << out;
}

struct refusal_case {
    const char *name;
    void (*access)(char *p);
    bool need_avx512;
};

std::ostream &operator<<(std::ostream &os, const refusal_case &c)
{
    return os << c.name;
}

void rf_rep_stosb(char *p)
{
    size_t n = 8;
    __asm__ volatile("rep stosb" : "+D"(p), "+c"(n) : "a"(1) : "memory");
}

void rf_xchg(char *p)
{
    __asm__ volatile(".byte 0x48,0x87,0x08" ::"a"(p), "c"(V) : "memory");
}

void rf_load(char *p)
{
    uint64_t v;
    __asm__ volatile(".byte 0x48,0x8b,0x08" : "=c"(v) : "a"(p) : "memory");
    (void)v;
}

void rf_add(char *p)
{
    __asm__ volatile(".byte 0x48,0x01,0x08" ::"a"(p), "c"(V) : "memory");
}

void rf_movhps(char *p)
{
    __asm__ volatile(".byte 0x0f,0x17,0x10" ::"a"(p) : "memory");
}

/* vmovdqu64 %zmm0,(%rax){%k1}, every element selected */
__attribute__((target("avx512f"))) void rf_evex(char *p)
{
    __asm__ volatile("kxnorw %%k1, %%k1, %%k1\n"
                     ".byte 0x62,0xf1,0xfe,0x49,0x7f,0x00" ::"a"(p)
                     : "k1", "memory");
}

/* fs-relative: fs:0 holds the fs base in glibc */
void rf_fs(char *p)
{
    __asm__ volatile("mov %%fs:0, %%rdx\n"
                     " sub %%rdx, %%rax\n"
                     " .byte 0x64,0x48,0x89,0x08"
                     : "+a"(p)
                     : "c"(V)
                     : "rdx", "memory");
}

/* starts on the read-write page before: the fault address is not its */
void rf_straddle(char *p)
{
    __asm__ volatile(".byte 0x48,0x89,0x48,0xfc" ::"a"(p), "c"(V) : "memory");
}

const refusal_case refusal_cases[] = {
    { "rep_stosb", rf_rep_stosb, false }, { "xchg", rf_xchg, false },
    { "load", rf_load, false },           { "add", rf_add, false },
    { "movhps", rf_movhps, false },       { "evex", rf_evex, true },
    { "fs_prefix", rf_fs, false },        { "straddle", rf_straddle, false },
};

class TrapRefusal : public ::testing::TestWithParam<refusal_case> {};

void child_refused(void *arg)
{
    const refusal_case *c = (const refusal_case *)arg;
    region_t r(2, 1);
    c->access(r.base);
    fprintf(stderr, "survived\n");
}

/* Refused loudly, and the process dies of SIGSEGV (after the application's
 * handler, which gives up). */
TEST_P(TrapRefusal, DiesLoudly)
{
    const refusal_case &c = GetParam();
    std::string out;
    int status;

    SKIP_IF_RW();

    if (c.need_avx512 && !have_avx512f()) {
        GTEST_SKIP() << "no AVX-512";
    }
    ASSERT_EQ(0, dcxemu_trap_init());
    status = run_child(child_refused, (void *)&c, &out);
    EXPECT_TRUE(died_of_segv(status)) << std::hex << status << " " << out;
    EXPECT_NE(std::string::npos,
              out.find("dcxemu: doorbell trap: cannot emulate the access"))
            << out;
    EXPECT_NE(std::string::npos, out.find("code: ")) << out;
    printf("%s", out.c_str());
}

INSTANTIATE_TEST_SUITE_P(Encodings, TrapRefusal,
                         ::testing::ValuesIn(refusal_cases),
                         [](const ::testing::TestParamInfo<refusal_case> &i) {
                             return std::string(i.param.name);
                         });

/* ---- rw mode, in a fresh process with DCXEMU_UAR=rw */

TEST(TrapRw, InChild)
{
    if (getenv("DCXEMU_TRAP_TEST_RW") == NULL) {
        GTEST_SKIP() << "run by TrapRw.FreshProcess";
    }
    ASSERT_EQ(1, dcxemu_trap_rw_mode());
    ASSERT_EQ(0, dcxemu_trap_init());
    region_t r;
    EXPECT_TRUE(dcxemu_trap_covers(r.base));
    *(volatile uint64_t *)r.base = V;
    EXPECT_EQ(V, *(volatile uint64_t *)r.base);
    EXPECT_EQ(0u, r.seen.count.load());
    EXPECT_EQ(0u, dcxemu_trap_count());
    EXPECT_EQ((void *)preinit_handler, kernel_segv().handler);
}

void child_rw(void *)
{
    char exe[4096];
    /* readlink, not exec of /proc/self/exe, which is valgrind's under it */
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0) {
        _exit(126);
    }
    exe[n] = '\0';
    setenv("DCXEMU_UAR", "rw", 1);
    setenv("DCXEMU_TRAP_TEST_RW", "1", 1);
    execl(exe, exe, "--gtest_filter=TrapRw.InChild", (char *)NULL);
    _exit(127);
}

TEST(TrapRw, FreshProcess)
{
    std::string out;
    int status = run_child(child_rw, NULL, &out);
    EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0)) << out;
    EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

/* ---- cost */

double trap_cost_us(char *base, int n)
{
    auto start = std::chrono::steady_clock::now();
    store_many(base, n, 0);
    std::chrono::duration<double, std::micro> d =
            std::chrono::steady_clock::now() - start;
    return d.count() / n;
}

TEST(Trap, Cost)
{
    SKIP_IF_RW();

    const int n = 20000;
    region_t r;
    double plain, alt = 0;

    plain = trap_cost_us(r.base, n);
    std::thread t([&] {
        std::vector<char> stack(64 * 1024);
        stack_t ss;
        ss.ss_sp    = stack.data();
        ss.ss_size  = stack.size();
        ss.ss_flags = 0;
        sigaltstack(&ss, NULL);
        alt         = trap_cost_us(r.base, n);
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
    });
    t.join();
    EXPECT_EQ(2u * n, r.seen.count.load());
    printf("cost per trapped store: %.2f us; on an alternate signal stack: "
           "%.2f us\n",
           plain, alt);
}

} // namespace
