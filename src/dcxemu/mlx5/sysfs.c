/* The mlx5 face's sysfs: the files libibverbs reads to find and describe
 * devices, generated into a private directory that SYSFS_PATH names.
 *
 * libibverbs lists devices from the RDMA netlink socket first and from sysfs
 * only when that socket fails (preload.c refuses it); it honours SYSFS_PATH
 * for every sysfs read.  The tree holds what a ConnectX-6 shows under
 * /sys/class/infiniband_verbs and /sys/class/infiniband: the uverbs ABI
 * versions, each uverbsN with its ibdev name and char device number, and per
 * device its PCI function (vendor, device, the modalias libmlx5 matches on,
 * link width and speed), its node type, GUIDs and board, and port 1 with its
 * state, LID, GIDs and P_Keys.  Device names say what
 * they are (dcxemu_mlx5_N), so nobody takes them for hardware.
 */
#define _GNU_SOURCE
#include "face.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ConnectX-6 (PCI 15b3:101b), as libmlx5's device table matches it */
#define FACE_MODALIAS "pci:v000015B3d0000101Bsv000015B3sd00000007bc02sc07i00"

static char sysfs_root[256];
static int sysfs_num_devices;

int face_num_devices(void)
{
    return sysfs_num_devices;
}

static const char *face_ibdev_name(int dev, char *buf, size_t len)
{
    snprintf(buf, len, "dcxemu_mlx5_%d", dev);
    return buf;
}

/* Write one file under the root; the directories on its way are made. */
static int put(const char *value, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static int put(const char *value, const char *fmt, ...)
{
    char path[512];
    size_t n = strlen(sysfs_root);
    va_list ap;
    FILE *f;
    memcpy(path, sysfs_root, n);
    path[n] = '/';
    va_start(ap, fmt);
    vsnprintf(path + n + 1, sizeof(path) - n - 1, fmt, ap);
    va_end(ap);
    for (char *p = path + n + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            return -1;
        }
        *p = '/';
    }
    f = fopen(path, "w");
    if (f == NULL) {
        return -1;
    }
    fputs(value, f);
    fputc('\n', f);
    return fclose(f);
}

static void guid_str(uint64_t g, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
             (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
             (unsigned)g & 0xffff);
}

static void gid_str(const union ibv_gid *gid, char *buf, size_t len)
{
    const uint8_t *r = gid->raw;
    snprintf(buf, len,
             "%02x%02x:%02x%02x:%02x%02x:%02x%02x:"
             "%02x%02x:%02x%02x:%02x%02x:%02x%02x",
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
             r[11], r[12], r[13], r[14], r[15]);
}

static const char *gid_type_str(uint32_t type)
{
    switch (type) {
    case IBV_GID_TYPE_ROCE_V1:
        return "IB/RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
        return "RoCE v2";
    default:
        return "IB/RoCE v1";
    }
}

/* Where a device's files live: its PCI function's directory, as the kernel
 * lays it out (class/infiniband/<name> is a link into it; UCX finds the PCI
 * function's vendor, device and link from there). */
static void pci_dir(int dev, char *buf, size_t len)
{
    snprintf(buf, len, "devices/pci0000:00/0000:00:%02x.0", dev + 2);
}

static int
port_files(const char *ib, const char *pci, const struct dcxemu_port_desc *d)
{
    char v[64], p[256];
    int err = 0;
    snprintf(p, sizeof(p), "%s/infiniband/%s/ports/1", pci, ib);
    err |= put("4: ACTIVE", "%s/state", p);
    err |= put("5: LinkUp", "%s/phys_state", p);
    err |= put("200 Gb/sec (4X HDR)", "%s/rate", p);
    err |= put(d->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" :
                                                          "InfiniBand",
               "%s/link_layer", p);
    snprintf(v, sizeof(v), "0x%x", d->lid);
    err |= put(v, "%s/lid", p);
    err |= put(d->lid ? "0x1" : "0x0", "%s/sm_lid", p);
    err |= put("0", "%s/lid_mask_count", p);
    err |= put("0", "%s/sm_sl", p);
    err |= put("0x00010000", "%s/cap_mask", p);
    for (uint32_t i = 0; i < d->gid_tbl_len; i++) {
        union ibv_gid zero     = {};
        const union ibv_gid *g = i < d->num_gids ? &d->gid[i] : &zero;
        gid_str(g, v, sizeof(v));
        err |= put(v, "%s/gids/%u", p, i);
        if (i < d->num_gids) {
            err |= put(gid_type_str(d->gid_type[i]), "%s/gid_attrs/types/%u", p,
                       i);
            err |= put("", "%s/gid_attrs/ndevs/%u", p, i);
        }
    }
    for (uint32_t i = 0; i < d->pkey_tbl_len; i++) {
        snprintf(v, sizeof(v), "0x%04x", d->pkey[i]);
        err |= put(v, "%s/pkeys/%u", p, i);
    }
    if (d->tclass >= 0) {
        /* where MLNX_OFED's driver shows a RoCE port's configured class */
        snprintf(v, sizeof(v), "Global tclass=%d", d->tclass);
        err |= put(v, "%s/infiniband/%s/tc/1/traffic_class", pci, ib);
    }
    return err ? -1 : 0;
}

/* A symbolic link at path (under the root) to target. */
static int link_to(const char *target, const char *path)
{
    char full[512];
    snprintf(full, sizeof(full), "%s/%s", sysfs_root, path);
    return symlink(target, full);
}

static int device_files(int dev)
{
    struct dcxemu_port_desc d;
    char ib[64], v[64], pci[64], p[160], l[200], t[200];
    int err;
    if ((err = dcxemu_port_describe(dev, &d)) != 0) {
        return -1;
    }
    face_ibdev_name(dev, ib, sizeof(ib));
    pci_dir(dev, pci, sizeof(pci));
    err = put(ib, "class/infiniband_verbs/uverbs%d/ibdev", dev);
    snprintf(v, sizeof(v), "%d:%d", FACE_UVERBS_MAJOR, FACE_UVERBS_MINOR + dev);
    err |= put(v, "class/infiniband_verbs/uverbs%d/dev", dev);
    err |= put("1", "class/infiniband_verbs/uverbs%d/abi_version", dev);
    /* the PCI function */
    err |= put("0x15b3", "%s/vendor", pci);
    err |= put("0x101b", "%s/device", pci);
    err |= put("0x15b3", "%s/subsystem_vendor", pci);
    err |= put("0x0007", "%s/subsystem_device", pci);
    err |= put(FACE_MODALIAS, "%s/modalias", pci);
    err |= put("16", "%s/current_link_width", pci);
    err |= put("16.0 GT/s PCIe", "%s/current_link_speed", pci);
    err |= put("-1", "%s/numa_node", pci);
    /* the RDMA device */
    snprintf(p, sizeof(p), "%s/infiniband/%s", pci, ib);
    err |= put("1: CA", "%s/node_type", p);
    guid_str(d.node_guid, v, sizeof(v));
    err |= put(v, "%s/node_guid", p);
    err |= put(v, "%s/sys_image_guid", p);
    err |= put("20.31.1014", "%s/fw_ver", p);
    err |= put("MT4123", "%s/hca_type", p);
    err |= put("0x0", "%s/hw_rev", p);
    err |= put("DCXEMU0000000001", "%s/board_id", p);
    err |= put(ib, "%s/node_desc", p);
    if (err || port_files(ib, pci, &d) != 0) {
        return -1;
    }
    snprintf(l, sizeof(l), "%s/device", p);
    err |= link_to("../..", l);
    err |= put("", "class/infiniband/.keep");
    snprintf(t, sizeof(t), "../../%s", p);
    snprintf(l, sizeof(l), "class/infiniband/%s", ib);
    err |= link_to(t, l);
    return err ? -1 : 0;
}

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void face_sysfs_remove(void)
{
    if (sysfs_root[0] != '\0') {
        nftw(sysfs_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        sysfs_root[0] = '\0';
    }
}

/* Trees left by processes that died without removing theirs (killed, or
 * gone through _exit): the tree names its process. */
static void sweep_stale(const char *dir)
{
    char path[512];
    struct dirent *e;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid;
        if (strncmp(e->d_name, "dcxemu-mlx5-sysfs.", 18) != 0) {
            continue;
        }
        pid = strtol(e->d_name + 18, &end, 10);
        if (end == e->d_name + 18 || *end != '.' || pid <= 0 ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH) {
            continue; /* not one of ours, or its process lives */
        }
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    closedir(d);
}

/* The tree for this process, named after it; SYSFS_PATH points there. */
int face_sysfs_create(void)
{
    struct dcxemu_port_desc d;
    const char *tmp = getenv("TMPDIR");
    if (dcxemu_port_describe(0, &d) != 0) {
        return -1;
    }
    if (tmp == NULL || *tmp == '\0') {
        tmp = "/tmp";
    }
    sweep_stale(tmp);
    snprintf(sysfs_root, sizeof(sysfs_root), "%s/dcxemu-mlx5-sysfs.%d.XXXXXX",
             tmp, (int)getpid());
    if (mkdtemp(sysfs_root) == NULL) {
        face_log("cannot make the sysfs tree under %s: %m", tmp);
        sysfs_root[0] = '\0';
        return -1;
    }
    sysfs_num_devices = d.num_devices;
    if (put("6", "class/infiniband_verbs/abi_version") != 0) {
        goto err;
    }
    for (int dev = 0; dev < d.num_devices; dev++) {
        if (device_files(dev) != 0) {
            goto err;
        }
    }
    setenv("SYSFS_PATH", sysfs_root, 1);
    return 0;

err:
    face_log("cannot write the sysfs tree in %s: %m", sysfs_root);
    face_sysfs_remove();
    return -1;
}
