/* The mlx5 face's UAR pages: where the application mapped them, and what a
 * store into them means.
 *
 * libmlx5 maps the UAR pages from the uverbs descriptor right after its
 * context is made.  That descriptor is a memfd, so the kernel maps it
 * whatever path the mmap() takes (UCX's memory hooks patch mmap, and a
 * preloaded wrapper would not see it); the face finds the mappings in
 * /proc/self/maps by the memfd's inode before every command that creates a
 * CQ or a QP, so they are trapped before anything exists to ring them.  With
 * bf_reg_size 0 every send doorbell is one 8-byte store of the first half of
 * the last WQE's control segment (the QP number is in it) at offset 0x800, and
 * a CQ arm is one store at 0x20 of the arm word and the CQ number.
 */
#define _GNU_SOURCE
#include "face.h"
#include "trap.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define UAR_CQ_DOORBELL 0x20 /* MLX5_CQ_DOORBELL */
#define UAR_SQ_DOORBELL 0x800 /* MLX5_BF_OFFSET */

static void uar_store(void *arg, void *addr, uint64_t value)
{
    struct face_file *f = arg;
    uintptr_t off = (uintptr_t)addr & (uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
    uint32_t hi   = be32toh((uint32_t)(value >> 32));
    if (off == UAR_CQ_DOORBELL) {
        FACE_STAT(arm_doorbells, 1);
        face_cq_arm(f, hi & 0xffffff);
    } else if (off >= UAR_SQ_DOORBELL) {
        FACE_STAT(sq_doorbells, 1);
        face_sq_ring(f, hi >> 8);
    }
}

/* Register one mapping of file f's pages (the table of files is locked). */
static void uar_add(struct face_file *f, void *addr, size_t len)
{
    int slot = -1, err;
    for (int i = 0; i < FACE_UAR_PAGES; i++) {
        if (f->uar[i].addr == addr && f->uar[i].len == len) {
            f->uar[i].seen = 1;
            return;
        }
        if (f->uar[i].addr == NULL && slot < 0) {
            slot = i;
        }
    }
    if (slot < 0) {
        face_log("uverbs%d: more than %d UAR mappings; %p is not trapped",
                 f->dev_index, FACE_UAR_PAGES, addr);
        return;
    }
    if ((err = dcxemu_trap_add(addr, len, uar_store, f)) != 0) {
        face_log("uverbs%d: cannot trap the UAR at %p: %s", f->dev_index, addr,
                 strerror(err));
        return;
    }
    f->uar[slot].addr = addr;
    f->uar[slot].len  = len;
    f->uar[slot].seen = 1;
}

/* The mappings of the files' pages now, against what is trapped: new ones
 * are trapped, those the application unmapped are forgotten (their addresses
 * may hold another mapping by now, which is left alone). */
void face_uar_scan(void)
{
    char line[512], path[256];
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL) {
        return;
    }
    FACE_STAT(uar_scans, 1);
    pthread_mutex_lock(&face_files_lock);
    for (int i = 0; i < face_files_hwm; i++) {
        for (int k = 0; face_files[i] != NULL && k < FACE_UAR_PAGES; k++) {
            face_files[i]->uar[k].seen = 0;
        }
    }
    /* libmlx5 maps the pages one by one: adjacent lines of one file are one
     * region */
    unsigned long rstart = 0, rend = 0, rino = 0;
    int more;
    do {
        unsigned long start = 0, end = 0, ino = 0;
        more    = fgets(line, sizeof(line), maps) != NULL;
        path[0] = '\0';
        if (more && strstr(line, "dcxemu-uverbs") == NULL) {
            continue; /* not the face's: no need to parse it */
        }
        if (more && (sscanf(line, "%lx-%lx %*s %*s %*s %lu %255s", &start, &end,
                            &ino, path) < 3 ||
                     strstr(path, "dcxemu-uverbs") == NULL)) {
            continue;
        }
        if (more && ino == rino && start == rend) {
            rend = end;
            continue;
        }
        for (int i = 0; rend != 0 && i < face_files_hwm; i++) {
            struct face_file *f = face_files[i];
            if (f != NULL && f->ino == (ino_t)rino) {
                uar_add(f, (void *)rstart, rend - rstart);
            }
        }
        rstart = start;
        rend   = end;
        rino   = ino;
    } while (more);
    for (int i = 0; i < face_files_hwm; i++) {
        for (int k = 0; face_files[i] != NULL && k < FACE_UAR_PAGES; k++) {
            struct face_file *f = face_files[i];
            if (f->uar[k].addr != NULL && !f->uar[k].seen) {
                dcxemu_trap_forget(f->uar[k].addr);
                f->uar[k].addr = NULL;
            }
        }
    }
    pthread_mutex_unlock(&face_files_lock);
    fclose(maps);
}

/* The file is released: libmlx5 unmapped its pages before it closed the
 * descriptor, so they are only forgotten. */
void face_uar_forget(struct face_file *f)
{
    for (int i = 0; i < FACE_UAR_PAGES; i++) {
        if (f->uar[i].addr != NULL) {
            dcxemu_trap_forget(f->uar[i].addr);
            f->uar[i].addr = NULL;
        }
    }
}
