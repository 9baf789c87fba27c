/* dcxemu-stat: print the fabric-wide device counters of a dcxemu fabric.
 *
 * Maps the fabric read-only and takes no lock, so it never disturbs live
 * members and never (re-)initialises a fabric: it only reads counters that
 * writers update with atomic adds. -r removes the fabric instead, if no process
 * is attached; "-r -- COMMAND ..." runs COMMAND first (dcx-run --emu does that,
 * so a fabric whose processes were all killed goes too). */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const op_names[DCXEMU_CNT_OP_MAX] = {
    "write",     "write_imm", "send", "send_imm",  "read",
    "atomic_fa", "atomic_cs", "umr",  "local_inv",
};

/* One source line per line printed. */
static const char usage_text[] =
        "usage: dcxemu-stat [-c] [-f FABRIC]\n"
        "       dcxemu-stat -r [-f FABRIC] [-- COMMAND [ARGS...]]\n"
        "  Print the fabric-wide counters of every device of a dcxemu fabric\n"
        "  (default: $DCXEMU_FABRIC, else dcxemu-<uid> or its fallback name).\n"
        "  -c  one line per device: dcxemuN key=value ...\n"
        "  -r  remove the fabric if no process is attached to it; exit 0 when\n"
        "      removed or absent, 3 when in use (left in place), 1 on error.\n"
        "      With COMMAND: run it, then remove the fabric if idle, and exit\n"
        "      with COMMAND's status (128+N if signal N ended it).\n";

static void usage(FILE *f)
{
    fputs(usage_text, f);
}

static volatile pid_t child_pid;

static void forward_signal(int sig)
{
    if (child_pid > 0) {
        kill(child_pid, sig);
    }
}

/* Run cmd as our child and wait for it.  SIGTERM and SIGHUP sent to us are
 * passed on; the terminal's SIGINT / SIGQUIT reach the child anyway (same
 * process group), so we only outlive them to clean up.  Returns cmd's exit
 * status, or 128 + N when signal N ended it. */
static int run_command(char **cmd)
{
    struct sigaction sa;
    sigset_t block, old;
    int st;
    pid_t pid;

    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGQUIT);
    sigprocmask(SIG_BLOCK, &block,
                &old); /* no signal lost between fork and the handlers */
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dcxemu-stat: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(cmd[0], cmd);
        fprintf(stderr, "dcxemu-stat: cannot run %s: %s\n", cmd[0],
                strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    child_pid = pid;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "dcxemu-stat: waitpid: %s\n", strerror(errno));
            return 1;
        }
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* -r: remove the fabric if idle, after running cmd if there is one. */
static int remove_fabric(const char *name, char **cmd)
{
    int cmd_rc = cmd[0] != NULL ? run_command(cmd) : -1;
    int err    = dcxemu_fabric_remove(name);
    if (cmd_rc >= 0) {
        /* after a command: in use means others still run on it, which is fine */
        if (err != 0 && err != ENOENT && err != EBUSY) {
            fprintf(stderr, "dcxemu-stat: cannot remove fabric %s: %s\n", name,
                    strerror(err));
        }
        return cmd_rc;
    }
    if (err == 0 || err == ENOENT) {
        return 0;
    }
    fprintf(stderr, "dcxemu-stat: fabric %s %s\n", name,
            err == EBUSY ? "is in use; left in place" : strerror(err));
    return err == EBUSY ? 3 : 1;
}

/* The fabric at path mapped read-only (its header and tables, not the heap), or
 * NULL. */
static const struct dcxemu_shm *map_fabric(const char *path)
{
    const struct dcxemu_shm *f;
    struct stat st;
    int fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "dcxemu-stat: fabric %s %s\n", path + 1,
                errno == ENOENT ? "does not exist" : strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(*f)) {
        fprintf(stderr, "dcxemu-stat: fabric %s is not initialised\n",
                path + 1);
        return NULL;
    }
    f = mmap(NULL, sizeof(*f), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (f == MAP_FAILED) {
        fprintf(stderr, "dcxemu-stat: cannot map fabric %s: %s\n", path + 1,
                strerror(errno));
        return NULL;
    }
    if (f->magic != DCXEMU_MAGIC ||
        f->layout_version != DCXEMU_LAYOUT_VERSION ||
        f->struct_size != sizeof(*f)) {
        fprintf(stderr,
                "dcxemu-stat: fabric %s has magic 0x%llx layout %u; "
                "this tool reads layout %u\n",
                path + 1, (unsigned long long)f->magic, f->layout_version,
                DCXEMU_LAYOUT_VERSION);
        return NULL;
    }
    return f;
}

static void
print_device(const struct dcxemu_shm *f, uint32_t d, const char *name, int csv)
{
    const uint64_t *src = (const uint64_t *)&f->dev_cnt[d];
    struct dcxemu_counters c;
    for (size_t i = 0; i < sizeof(c) / sizeof(uint64_t); i++) {
        ((uint64_t *)&c)[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
    const struct {
        const char *k;
        uint64_t v;
    } more[] = {
        { "bytes", c.bytes },
        { "rnr_retries", c.rnr_retries },
        { "transport_retries", c.transport_retries },
        { "key_violations", c.key_violations },
        { "error_cqes", c.error_cqes },
        { "recv_cqes", c.recv_cqes },
        { "send_cqes", c.send_cqes },
    };
    printf(csv ? "dcxemu%u" : "dcxemu%u (fabric %s)\n", d, name);
    for (int i = 0; i < DCXEMU_CNT_OP_MAX; i++) {
        printf(csv ? " %s=%llu" : "  %-18s %llu\n", op_names[i],
               (unsigned long long)c.wr[i]);
    }
    for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
        printf(csv ? " %s=%llu" : "  %-18s %llu\n", more[i].k,
               (unsigned long long)more[i].v);
    }
    if (csv) {
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    const char *name = NULL;
    char path[256];
    const struct dcxemu_shm *f;
    int opt, csv = 0, remove = 0;
    uint32_t ndev;

    while ((opt = getopt(argc, argv, "+cf:hr")) != -1) {
        switch (opt) {
        case 'c':
            csv = 1;
            break;
        case 'r':
            remove = 1;
            break;
        case 'f':
            name = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (name == NULL || *name == '\0') {
        name = dcxemu_fabric_name();
    }
    snprintf(path, sizeof(path), "/%s", name);
    if (optind < argc && !remove) {
        usage(stderr);
        return 2;
    }
    if (remove) {
        return remove_fabric(name, argv + optind);
    }
    f = map_fabric(path);
    if (f == NULL) {
        return 1;
    }
    ndev = f->num_devices ? f->num_devices : 1;
    if (ndev > DCXEMU_MAX_DEVICES) {
        ndev = DCXEMU_MAX_DEVICES;
    }
    for (uint32_t d = 0; d < ndev; d++) {
        print_device(f, d, path + 1, csv);
    }
    return 0;
}
