/* dcxemu-stat: print the fabric-wide device counters of a dcxemu fabric.
 *
 * Maps the fabric read-only and takes no lock, so it never disturbs live members and never
 * (re-)initialises a fabric: it only reads counters that writers update with atomic adds.
 * -r removes the fabric instead, if no process is attached (dcx-run does that when it ends). */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const op_names[DCXEMU_CNT_OP_MAX] = {
    "write", "write_imm", "send", "send_imm", "read", "atomic_fa", "atomic_cs", "umr", "local_inv",
};

static void usage(FILE *f)
{
    fprintf(f, "usage: dcxemu-stat [-c] [-r] [-f FABRIC]\n"
               "  Print the fabric-wide counters of every device of a dcxemu fabric\n"
               "  (default: $DCXEMU_FABRIC, else dcxemu-<uid> or its fallback name).\n"
               "  -c  one line per device: dcxemuN key=value ...\n"
               "  -r  remove the fabric if no process is attached to it; exit 0 when\n"
               "      removed or absent, 3 when in use (left in place), 1 on error\n");
}

int main(int argc, char **argv)
{
    const char *name = NULL;
    char path[256];
    struct dcxemu_counters c;
    const struct dcxemu_shm *f;
    struct stat st;
    int opt, csv = 0, remove = 0, fd, err;
    uint32_t ndev;

    while ((opt = getopt(argc, argv, "cf:hr")) != -1) {
        switch (opt) {
        case 'c': csv = 1; break;
        case 'r': remove = 1; break;
        case 'f': name = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (name == NULL || *name == '\0') {
        name = dcxemu_fabric_name();
    }
    snprintf(path, sizeof(path), "/%s", name);
    if (remove) {
        err = dcxemu_fabric_remove(name);
        if (err == 0 || err == ENOENT) {
            return 0;
        }
        fprintf(stderr, "dcxemu-stat: fabric %s %s\n", name,
                err == EBUSY ? "is in use; left in place" : strerror(err));
        return err == EBUSY ? 3 : 1;
    }
    fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "dcxemu-stat: fabric %s %s\n", path + 1,
                errno == ENOENT ? "does not exist" : strerror(errno));
        return 1;
    }
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(*f)) {
        fprintf(stderr, "dcxemu-stat: fabric %s is not initialised\n", path + 1);
        return 1;
    }
    f = mmap(NULL, sizeof(*f), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (f == MAP_FAILED) {
        fprintf(stderr, "dcxemu-stat: cannot map fabric %s: %s\n", path + 1, strerror(errno));
        return 1;
    }
    if (f->magic != DCXEMU_MAGIC || f->layout_version != DCXEMU_LAYOUT_VERSION ||
        f->struct_size != sizeof(*f)) {
        fprintf(stderr, "dcxemu-stat: fabric %s has magic 0x%llx layout %u; this tool reads "
                "layout %u\n", path + 1, (unsigned long long)f->magic, f->layout_version,
                DCXEMU_LAYOUT_VERSION);
        return 1;
    }
    ndev = f->num_devices ? f->num_devices : 1;
    if (ndev > DCXEMU_MAX_DEVICES) {
        ndev = DCXEMU_MAX_DEVICES;
    }
    for (uint32_t d = 0; d < ndev; d++) {
        const uint64_t *src = (const uint64_t *)&f->dev_cnt[d];
        for (size_t i = 0; i < sizeof(c) / sizeof(uint64_t); i++) {
            ((uint64_t *)&c)[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
        }
        const struct { const char *k; uint64_t v; } more[] = {
            { "bytes", c.bytes }, { "rnr_retries", c.rnr_retries },
            { "transport_retries", c.transport_retries }, { "key_violations", c.key_violations },
            { "error_cqes", c.error_cqes }, { "recv_cqes", c.recv_cqes },
        };
        printf(csv ? "dcxemu%u" : "dcxemu%u (fabric %s)\n", d, path + 1);
        for (int i = 0; i < DCXEMU_CNT_OP_MAX; i++) {
            printf(csv ? " %s=%llu" : "  %-18s %llu\n", op_names[i], (unsigned long long)c.wr[i]);
        }
        for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
            printf(csv ? " %s=%llu" : "  %-18s %llu\n", more[i].k, (unsigned long long)more[i].v);
        }
        if (csv) {
            printf("\n");
        }
    }
    return 0;
}
