/* Multi-process tests: real processes (fork + exec of this binary) on one fabric. */
#include "emu_test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

using namespace emu;

namespace {

enum {
    CMD_POST_RECV = 1,
    CMD_POLL,
    CMD_DUMP,
    CMD_FILL,
    CMD_DEREG,
    CMD_EXIT,
    CMD_WATCH
};

struct cmd {
    uint32_t op, a, b, pad;
    uint64_t c;
};

struct rwc {
    uint64_t wr_id;
    uint32_t status, opcode, byte_len, qp_num, src_qp, slid, imm, flags;
};

const uint64_t FIXED_ADDR =
        0x7e5400000000ull; /* same address in target and successor */
const uint64_t TARGET_KEY = 0x5eedf00d12345678ull;

/* --------------------------------------------------------------- child roles ---- */

static void *map_buffer(size_t len, bool fixed)
{
    void *p = mmap(fixed ? (void *)FIXED_ADDR : nullptr, len,
                   PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS |
                           (fixed ? MAP_FIXED_NOREPLACE : 0),
                   -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

/* target <cmd_fd> <resp_fd> <buf_len> <fixed 0|1>: a DCT with an SRQ and one MR, driven by
 * commands; it idles in read() so one-sided operations run without its CPU. */
EMU_CHILD(target)
{
    if (argc < 4)
        return 2;
    int cfd = atoi(argv[0]), rfd = atoi(argv[1]);
    size_t len     = strtoull(argv[2], nullptr, 0);
    char *buf      = (char *)map_buffer(len, atoi(argv[3]) != 0);
    bool with_mkey = argc >= 5 && strcmp(argv[4], "mkey") == 0;
    if (buf == nullptr)
        return 3;
    memset(buf, 0, len);
    dev d;
    if (with_mkey) {
        /* a DEVX context, so that it can create an indirect mkey */
        int nd                 = 0;
        ibv_device **l         = dcxemu_ibv_get_device_list(&nd);
        mlx5dv_context_attr da = { MLX5DV_CONTEXT_FLAGS_DEVX, 0 };
        if (l == nullptr)
            return 4;
        d.ctx = dcxemu_mlx5dv_open_device(l[0], &da);
        dcxemu_ibv_free_device_list(l);
        if (d.ctx == nullptr)
            return 4;
        d.lid = 1;
        d.pd  = dcxemu_ibv_alloc_pd(d.ctx);
        d.cq  = dcxemu_ibv_create_cq(d.ctx, 4096, nullptr, nullptr, 0);
        if (!d.pd || !d.cq)
            return 4;
    } else if (!d.open(0, 4096)) {
        return 4;
    }
    ibv_srq *srq = create_srq(d, 1024, 1);
    ibv_qp *dct  = srq ? create_dct(d, srq, TARGET_KEY) : nullptr;
    if (!dct || dct_to_rtr(dct) != 0)
        return 5;
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf, len,
                                   IBV_ACCESS_LOCAL_WRITE |
                                           IBV_ACCESS_REMOTE_WRITE |
                                           IBV_ACCESS_REMOTE_READ |
                                           IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr)
        return 6;
    target_info ti;
    memset(&ti, 0, sizeof(ti));
    ti.lid               = d.lid;
    ti.dctn              = dct->qp_num;
    ti.dc_key            = TARGET_KEY;
    ti.rkey              = mr->rkey;
    ti.addr              = (uintptr_t)buf;
    ti.len               = len;
    mlx5dv_mkey *mk_keep = nullptr;
    ibv_qp *rc_keep      = nullptr;
    if (with_mkey) {
        /* strided view: 8 bytes of every 16, 64 times (L = 512), published as the rkey */
        mlx5dv_mkey_init_attr ma = { d.pd, MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
                                     2 };
        mlx5dv_mkey *mk          = dcxemu_mlx5dv_create_mkey(&ma);
        ibv_qp_init_attr_ex at;
        mlx5dv_qp_init_attr dv;
        memset(&at, 0, sizeof(at));
        memset(&dv, 0, sizeof(dv));
        at.qp_type = IBV_QPT_RC;
        at.send_cq = at.recv_cq = d.cq;
        at.pd                   = d.pd;
        at.cap.max_send_wr      = 4;
        at.cap.max_send_sge     = 1;
        at.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        at.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV;
        dv.comp_mask      = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
        dv.send_ops_flags = MLX5DV_QP_EX_WITH_MR_INTERLEAVED;
        ibv_qp *rc = mk ? dcxemu_mlx5dv_create_qp(d.ctx, &at, &dv) : nullptr;
        if (rc == nullptr)
            return 20;
        ibv_qp_attr x;
        memset(&x, 0, sizeof(x));
        x.qp_state = IBV_QPS_INIT;
        x.port_num = 1;
        if (dcxemu_ibv_modify_qp(rc, &x,
                                 IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                         IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            return 21;
        x.qp_state         = IBV_QPS_RTR;
        x.path_mtu         = IBV_MTU_4096;
        x.dest_qp_num      = rc->qp_num;
        x.ah_attr.dlid     = d.lid;
        x.ah_attr.port_num = 1;
        if (dcxemu_ibv_modify_qp(rc, &x,
                                 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC |
                                         IBV_QP_MIN_RNR_TIMER))
            return 22;
        x.qp_state = IBV_QPS_RTS;
        if (dcxemu_ibv_modify_qp(rc, &x,
                                 IBV_QP_STATE | IBV_QP_SQ_PSN |
                                         IBV_QP_MAX_QP_RD_ATOMIC |
                                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_TIMEOUT))
            return 23;
        ibv_qp_ex *qx           = dcxemu_ibv_qp_to_qp_ex(rc);
        mlx5dv_qp_ex *mx        = dcxemu_mlx5dv_qp_ex_from_ibv_qp_ex(qx);
        mlx5dv_mr_interleaved e = { (uintptr_t)buf, 8, 8, mr->lkey };
        ibv_wr_start(qx);
        qx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        mlx5dv_wr_mr_interleaved(mx, mk,
                                 IBV_ACCESS_LOCAL_WRITE |
                                         IBV_ACCESS_REMOTE_WRITE |
                                         IBV_ACCESS_REMOTE_READ |
                                         IBV_ACCESS_REMOTE_ATOMIC,
                                 64, 1, &e);
        if (ibv_wr_complete(qx) != 0)
            return 24;
        ibv_wc wc;
        if (!poll_one(d.cq, &wc) || wc.status != IBV_WC_SUCCESS)
            return 25;
        ti.rkey = mk->rkey;
        ti.addr = 0;
        ti.len  = 512;
        mk_keep = mk;
        rc_keep = rc;
    }
    ti.pid = getpid();
    if (!write_full(rfd, &ti, sizeof(ti)))
        return 7;
    for (;;) {
        cmd c;
        if (!read_full(cfd, &c, sizeof(c), 60000))
            return 8;
        switch (c.op) {
        case CMD_POST_RECV:
            for (uint32_t i = 0; i < c.a; i++) {
                if (post_recv(srq, mr, buf + c.c + (uint64_t)i * c.b, c.b, i) !=
                    0)
                    return 9;
            }
            write_full(rfd, "k", 1);
            break;
        case CMD_POLL: {
            std::vector<rwc> out;
            uint64_t end = now_ms() + c.b;
            while (out.size() < c.a && now_ms() < end) {
                ibv_wc wc;
                if (ibv_poll_cq(d.cq, 1, &wc) == 1) {
                    rwc r = { wc.wr_id,    wc.status,          wc.opcode,
                              wc.byte_len, wc.qp_num,          wc.src_qp,
                              wc.slid,     ntohl(wc.imm_data), wc.wc_flags };
                    out.push_back(r);
                } else {
                    usleep(100);
                }
            }
            uint32_t n = (uint32_t)out.size();
            write_full(rfd, &n, sizeof(n));
            if (n)
                write_full(rfd, out.data(), n * sizeof(rwc));
            break;
        }
        case CMD_DUMP:
            write_full(rfd, buf + c.c, c.a);
            break;
        case CMD_FILL:
            memset(buf + c.c, (int)c.b, c.a);
            write_full(rfd, "k", 1);
            break;
        case CMD_WATCH: {
            /* spin on the last byte of [c, c+a); then count bytes not yet equal to b.  The ack
             * follows a look at the byte still unwritten: the watch is on before the write. */
            volatile char *last = buf + c.c + c.a - 1;
            uint64_t end        = now_ms() + 10000;
            write_full(rfd, *last != (char)c.b ? "k" : "x", 1);
            while (*last != (char)c.b && now_ms() < end) {
            }
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            uint32_t missing = 0;
            for (uint32_t i = 0; i < c.a; i++)
                missing += buf[c.c + i] != (char)c.b;
            write_full(rfd, &missing, sizeof(missing));
            break;
        }
        case CMD_DEREG:
            dcxemu_ibv_dereg_mr(mr);
            mr = nullptr;
            write_full(rfd, "k", 1);
            break;
        case CMD_EXIT:
            if (rc_keep)
                dcxemu_ibv_destroy_qp(rc_keep);
            if (mk_keep)
                dcxemu_mlx5dv_destroy_mkey(mk_keep);
            if (mr)
                dcxemu_ibv_dereg_mr(mr);
            dcxemu_ibv_destroy_qp(dct);
            dcxemu_ibv_destroy_srq(srq);
            d.close();
            return 0;
        }
    }
}

/* fadd <resp_fd> <lid> <dctn> <key> <rkey> <addr> <count>: fetch_add(1) count times and report
 * every fetched value. */
EMU_CHILD(fadd)
{
    if (argc < 7)
        return 2;
    int rfd       = atoi(argv[0]);
    uint16_t lid  = (uint16_t)atoi(argv[1]);
    uint32_t dctn = (uint32_t)strtoul(argv[2], nullptr, 0);
    uint64_t key  = strtoull(argv[3], nullptr, 0);
    uint32_t rkey = (uint32_t)strtoul(argv[4], nullptr, 0);
    uint64_t addr = strtoull(argv[5], nullptr, 0);
    int count     = atoi(argv[6]);
    dev d;
    dci c;
    if (!d.open() || !make_dci(d, c, lid))
        return 3;
    std::vector<uint64_t> res(count);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, res.data(), res.size() * 8,
                                   IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        return 4;
    for (int i = 0; i < count; i++) {
        if (post_one(c, OP_FADD, mr->lkey, &res[i], 8, rkey, addr, dctn, key,
                     (uint64_t)i, IBV_SEND_SIGNALED, 1) != 0)
            return 5;
        ibv_wc wc;
        if (!poll_one(d.cq, &wc, 10000) || wc.status != IBV_WC_SUCCESS)
            return 6;
    }
    write_full(rfd, res.data(), res.size() * 8);
    dcxemu_ibv_dereg_mr(mr);
    destroy_dci(c);
    d.close();
    return 0;
}

/* sender <lid> <dctn> <key> <rkey> <slot_addr> <id> <count> <size>: per message, WRITE the
 * sequence number into this sender's slot, then SEND (id, seq, pattern). */
EMU_CHILD(sender)
{
    if (argc < 8)
        return 2;
    uint16_t lid  = (uint16_t)atoi(argv[0]);
    uint32_t dctn = (uint32_t)strtoul(argv[1], nullptr, 0);
    uint64_t key  = strtoull(argv[2], nullptr, 0);
    uint32_t rkey = (uint32_t)strtoul(argv[3], nullptr, 0);
    uint64_t slot = strtoull(argv[4], nullptr, 0);
    uint64_t id   = strtoull(argv[5], nullptr, 0);
    int count     = atoi(argv[6]);
    uint32_t size = (uint32_t)atoi(argv[7]);
    dev d;
    dci c;
    if (!d.open(0, 1024) || !make_dci(d, c, lid, 256))
        return 3;
    std::vector<char> buf(size + 64);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        return 4;
    for (int i = 0; i < count; i++) {
        uint64_t seq = (uint64_t)i;
        memcpy(buf.data() + size, &seq, 8);
        memcpy(buf.data(), &id, 8);
        memcpy(buf.data() + 8, &seq, 8);
        memset(buf.data() + 16, (int)(id * 31 + seq) & 0xff, size - 16);
        /* both unsignaled except the send: the send's CQE frees the write's slot */
        if (post_one(c, OP_WRITE, mr->lkey, buf.data() + size, 8, rkey, slot,
                     dctn, key, 0, 0) != 0)
            return 5;
        if (post_one(c, OP_SEND, mr->lkey, buf.data(), size, 0, 0, dctn, key,
                     seq) != 0)
            return 6;
        ibv_wc wc;
        if (!poll_one(d.cq, &wc, 20000))
            return 7;
        if (wc.status != IBV_WC_SUCCESS || wc.wr_id != seq)
            return 8;
    }
    dcxemu_ibv_dereg_mr(mr);
    destroy_dci(c);
    d.close();
    return 0;
}

/* idle <resp_fd> <len>: maps the target's fixed address, fills it with 0x77 and reports its
 * pid; then answers DUMP requests on <cmd_fd>. Uses no fabric. */
EMU_CHILD(idle)
{
    if (argc < 3)
        return 2;
    int cfd = atoi(argv[0]), rfd = atoi(argv[1]);
    size_t len = strtoull(argv[2], nullptr, 0);
    char *buf  = (char *)map_buffer(len, true);
    if (!buf)
        return 3;
    memset(buf, 0x77, len);
    int32_t pid = getpid();
    write_full(rfd, &pid, sizeof(pid));
    cmd c;
    while (read_full(cfd, &c, sizeof(c), 60000)) {
        if (c.op == CMD_DUMP)
            write_full(rfd, buf + c.c, c.a);
        if (c.op == CMD_EXIT)
            return 0;
    }
    return 0;
}

/* attach <expect_errno> [hang]: open the fabric; exit 0 if the outcome matches; with "hang",
 * create objects and wait to be killed. */
EMU_CHILD(attach)
{
    if (argc < 1)
        return 2;
    int expect     = atoi(argv[0]);
    int n          = 0;
    errno          = 0;
    ibv_device **l = dcxemu_ibv_get_device_list(&n);
    if (expect != 0) {
        return (l == nullptr && errno == expect) ? 0 : 10;
    }
    if (l == nullptr)
        return 11;
    dcxemu_ibv_free_device_list(l);
    if (argc >= 2 && strcmp(argv[1], "hang") == 0) {
        dev d;
        if (!d.open())
            return 12;
        ibv_srq *srq = create_srq(d);
        ibv_qp *dct  = create_dct(d, srq, 1);
        if (!dct || dct_to_rtr(dct) != 0)
            return 13;
        write_full(1, "r", 1);
        pause();
    }
    if (argc >= 2 && strcmp(argv[1], "die") == 0) {
        raise(SIGKILL);
    }
    if (argc >= 2 && strcmp(argv[1], "bigcq") == 0) {
        /* takes most of a 16 MiB heap, then dies without cleaning up */
        dev d;
        if (!d.open(0, 100000))
            return 14; /* 2^17 CQEs x 72 B: two never fit in 16 MiB */
        write_full(1, "r", 1);
        raise(SIGKILL);
    }
    return 0;
}

/* wqe <inline>: create a DCI asking for that much inline data; exit 0 on success, else errno */
EMU_CHILD(wqe)
{
    if (argc < 1)
        return 2;
    dev d;
    if (!d.open())
        return 3;
    ibv_qp *qp = create_dci(d, 16, 1, (uint32_t)atoi(argv[0]));
    int err    = qp == nullptr ? errno : 0;
    if (qp != nullptr)
        dcxemu_ibv_destroy_qp(qp);
    d.close();
    return err;
}

/* noatomics: under DCXEMU_ATOMIC_CAP=none the device reports IBV_ATOMIC_NONE and refuses atomic
 * send ops and REMOTE_ATOMIC with EOPNOTSUPP, as mlx5 does; everything else still works. Exit 0
 * when every check holds, else the number of the first that failed. */
EMU_CHILD(noatomics)
{
    dev d;
    if (!d.open())
        return 2;
    ibv_device_attr a;
    if (dcxemu_ibv_query_device(d.ctx, &a) != 0 ||
        a.atomic_cap != IBV_ATOMIC_NONE) {
        d.close(); /* the default device's answer (the test expects 3): no leak */
        return 3;
    }
    errno      = 0;
    ibv_qp *qp = create_dci(d); /* asks for both atomic send ops */
    if (qp != nullptr || errno != EOPNOTSUPP)
        return 4;
    ibv_qp_init_attr_ex ia;
    mlx5dv_qp_init_attr dv;
    memset(&ia, 0, sizeof(ia));
    memset(&dv, 0, sizeof(dv));
    ia.qp_type = IBV_QPT_DRIVER;
    ia.send_cq = ia.recv_cq = d.cq;
    ia.pd                   = d.pd;
    ia.cap.max_send_wr      = 16;
    ia.cap.max_send_sge     = 1;
    ia.comp_mask      = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    dv.comp_mask            = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    errno                   = 0;
    if (dcxemu_mlx5dv_create_qp(d.ctx, &ia, &dv) != nullptr ||
        errno != EOPNOTSUPP)
        return 5;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
    qp                = dcxemu_mlx5dv_create_qp(d.ctx, &ia, &dv);
    if (qp == nullptr || dci_to_rts(qp) != 0)
        return 6;
    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = create_dct(d, srq, 5);
    if (dct == nullptr)
        return 7;
    if (dct_to_rtr(dct) != EOPNOTSUPP)
        return 8; /* at RESET->INIT, REMOTE_ATOMIC */
    ibv_qp *dct2 = create_dct(d, srq, 5);
    if (dct2 == nullptr ||
        dct_to_rtr(dct2, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) != 0)
        return 9;
    dcxemu_ibv_destroy_qp(dct2);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_qp(qp);
    dcxemu_ibv_destroy_srq(srq);
    d.close();
    return 0;
}

/* chaos <lid> <dctn> <key> <rkey> <addr>: every kind of call in a loop until killed (the word
 * at addr takes fetch_adds, the 4 KiB after it writes and reads). */
EMU_CHILD(chaos)
{
    if (argc < 5)
        return 2;
    uint16_t lid  = (uint16_t)atoi(argv[0]);
    uint32_t dctn = (uint32_t)strtoul(argv[1], nullptr, 0);
    uint64_t key  = strtoull(argv[2], nullptr, 0);
    uint32_t rkey = (uint32_t)strtoul(argv[3], nullptr, 0);
    uint64_t addr = strtoull(argv[4], nullptr, 0);
    dev d;
    dci c;
    if (!d.open(0, 1024) || !make_dci(d, c, lid, 64))
        return 3;
    std::vector<char> buf(8192);
    ibv_mr *mr = dcxemu_ibv_reg_mr(d.pd, buf.data(), buf.size(),
                                   IBV_ACCESS_LOCAL_WRITE);
    for (uint64_t i = 0;; i++) {
        ibv_cq *cq = dcxemu_ibv_create_cq(d.ctx, 512, nullptr, nullptr,
                                          0); /* heap churn */
        ibv_mr *m2 = dcxemu_ibv_reg_mr(d.pd, buf.data(), 4096,
                                       IBV_ACCESS_LOCAL_WRITE);
        switch (i % 4) {
        case 0:
            post_one(c, OP_WRITE, mr->lkey, buf.data(), 4096, rkey, addr + 8,
                     dctn, key, i);
            break;
        case 1:
            post_one(c, OP_READ, mr->lkey, buf.data(), 4096, rkey, addr + 8,
                     dctn, key, i);
            break;
        case 2:
            post_one(c, OP_FADD, mr->lkey, buf.data(), 8, rkey, addr, dctn, key,
                     i, IBV_SEND_SIGNALED, 1);
            break;
        case 3:
            post_one(c, OP_SEND, mr->lkey, buf.data(), 64, 0, 0, dctn, key, i);
            break;
        }
        ibv_wc wc;
        poll_one(d.cq, &wc, 2000);
        if (m2)
            dcxemu_ibv_dereg_mr(m2);
        if (cq)
            dcxemu_ibv_destroy_cq(cq);
    }
}

/* lockholder <fabric>: take the fabric's robust lock directly and die holding it. */
EMU_CHILD(lockholder)
{
    if (argc < 1)
        return 2;
    int fd = shm_open(("/" + std::string(argv[0])).c_str(), O_RDWR, 0);
    if (fd < 0)
        return 3;
    void *p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 4;
    /* offset of struct dcxemu_shm.lock, pinned by a static assertion in fabric.c */
    pthread_mutex_t *m = (pthread_mutex_t *)((char *)p + 32);
    int r              = pthread_mutex_lock(m);
    if (r != 0 && r != EOWNERDEAD)
        return 5;
    write_full(1, "r", 1);
    raise(SIGKILL);
    return 6;
}

/* --------------------------------------------------------------- parent side ---- */

struct remote_target {
    pid_t pid = -1;
    int cmd_w = -1, resp_r = -1;
    target_info ti;
    bool start(const std::string &fabric, size_t len = 1 << 20,
               bool fixed = false, const char *extra = "")
    {
        int c[2], r[2];
        if (pipe(c) || pipe(r))
            return false;
        pid = spawn(fabric,
                    { "target", std::to_string(c[0]), std::to_string(r[1]),
                      std::to_string(len), fixed ? "1" : "0", extra });
        ::close(c[0]);
        ::close(r[1]);
        cmd_w  = c[1];
        resp_r = r[0];
        return pid > 0 && read_full(resp_r, &ti, sizeof(ti), 10000);
    }
    bool send_cmd(uint32_t op, uint32_t a = 0, uint32_t b = 0, uint64_t c = 0)
    {
        cmd x = { op, a, b, 0, c };
        return write_full(cmd_w, &x, sizeof(x));
    }
    bool ack()
    {
        char k;
        return read_full(resp_r, &k, 1, 10000) && k == 'k';
    }
    bool post_recv(uint32_t n, uint32_t size, uint64_t off)
    {
        return send_cmd(CMD_POST_RECV, n, size, off) && ack();
    }
    std::vector<rwc> poll(uint32_t n, uint32_t ms)
    {
        std::vector<rwc> v;
        uint32_t got = 0;
        if (!send_cmd(CMD_POLL, n, ms) ||
            !read_full(resp_r, &got, 4, (int)ms + 5000))
            return v;
        v.resize(got);
        if (got && !read_full(resp_r, v.data(), got * sizeof(rwc), 5000))
            v.clear();
        return v;
    }
    std::vector<char> dump(uint64_t off, uint32_t len)
    {
        std::vector<char> v(len);
        if (!send_cmd(CMD_DUMP, len, 0, off) ||
            !read_full(resp_r, v.data(), len, 10000))
            v.clear();
        return v;
    }
    int stop()
    {
        if (pid <= 0)
            return -1;
        send_cmd(CMD_EXIT);
        int st = wait_child(pid, 10000);
        pid    = -1;
        return st;
    }
    ~remote_target()
    {
        if (pid > 0) {
            kill(pid, SIGKILL);
            wait_child(pid, 5000);
        }
        if (cmd_w >= 0)
            ::close(cmd_w);
        if (resp_r >= 0)
            ::close(resp_r);
    }
};

struct emu_mp : public ::testing::Test {
    dev d;
    dci c;
    std::vector<char> lbuf;
    ibv_mr *lmr = nullptr;
    void SetUp() override
    {
        ASSERT_TRUE(d.open(0, 1024));
        lbuf.assign(1 << 20, 0);
        lmr = dcxemu_ibv_reg_mr(d.pd, lbuf.data(), lbuf.size(),
                                IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(lmr, nullptr);
    }
    void TearDown() override
    {
        destroy_dci(c);
        if (lmr)
            dcxemu_ibv_dereg_mr(lmr);
        d.close();
    }
    bool status_of(ibv_wc_status *st, int ms = 10000)
    {
        ibv_wc wc;
        if (!poll_one(d.cq, &wc, ms))
            return false;
        *st = wc.status;
        return true;
    }
};

TEST_F(emu_mp, write_read_send_write_imm)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid));
    const uint32_t len = 200000; /* > IOV pages; exercises chunking */
    for (uint32_t i = 0; i < len; i++)
        lbuf[i] = (char)(i * 13 + 1);
    ibv_wc_status st;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), len, t.ti.rkey,
                       t.ti.addr + 4096, t.ti.dctn, t.ti.dc_key),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    std::vector<char> got = t.dump(4096, len);
    ASSERT_EQ(got.size(), len);
    EXPECT_EQ(memcmp(got.data(), lbuf.data(), len), 0);
    std::vector<char> edge = t.dump(4095, 1);
    ASSERT_EQ(edge.size(), 1u);
    EXPECT_EQ(edge[0], 0);
    /* READ it back */
    ASSERT_EQ(post_one(c, OP_READ, lmr->lkey, lbuf.data() + 500000, len,
                       t.ti.rkey, t.ti.addr + 4096, t.ti.dctn, t.ti.dc_key),
              0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(d.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_EQ(memcmp(lbuf.data() + 500000, lbuf.data(), len), 0);
    /* SEND with immediate: target's CQE fields */
    ASSERT_TRUE(t.post_recv(1, 1024, 600000));
    ASSERT_EQ(post_one(c, OP_SEND_IMM, lmr->lkey, lbuf.data(), 1000, 0, 0,
                       t.ti.dctn, t.ti.dc_key, 1, IBV_SEND_SIGNALED, 0, 0,
                       0x1234),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    std::vector<rwc> r = t.poll(1, 5000);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, (uint32_t)IBV_WC_SUCCESS);
    EXPECT_EQ(r[0].opcode, (uint32_t)IBV_WC_RECV);
    EXPECT_EQ(r[0].byte_len, 1000u);
    EXPECT_EQ(r[0].qp_num, t.ti.dctn);
    EXPECT_EQ(r[0].src_qp, c.qp->qp_num);
    EXPECT_EQ(r[0].slid, d.lid);
    EXPECT_EQ(r[0].imm, 0x1234u);
    EXPECT_TRUE(r[0].flags & IBV_WC_WITH_IMM);
    got = t.dump(600000, 1000);
    ASSERT_EQ(got.size(), 1000u);
    EXPECT_EQ(memcmp(got.data(), lbuf.data(), 1000), 0);
    /* WRITE with immediate */
    ASSERT_TRUE(t.post_recv(1, 64, 700000));
    ASSERT_EQ(post_one(c, OP_WRITE_IMM, lmr->lkey, lbuf.data(), 4000, t.ti.rkey,
                       t.ti.addr + 800000, t.ti.dctn, t.ti.dc_key, 2,
                       IBV_SEND_SIGNALED, 0, 0, 99),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    r = t.poll(1, 5000);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].opcode, (uint32_t)IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(r[0].byte_len, 4000u);
    EXPECT_EQ(r[0].imm, 99u);
    got = t.dump(800000, 4000);
    ASSERT_EQ(got.size(), 4000u);
    EXPECT_EQ(memcmp(got.data(), lbuf.data(), 4000), 0);
    EXPECT_EQ(t.stop(), 0); /* exited with 0 (LSan-clean under ASan) */
}

/* Another process's indirect mkey as the rkey: strided WRITE, READ and an atomic land in its
 * memory through the zero-based layout. */
TEST_F(emu_mp, remote_indirect_mkey)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric, 1 << 16, false, "mkey"));
    ASSERT_EQ(t.ti.len, 512u);
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid));
    for (int i = 0; i < 512; i++)
        lbuf[i] = (char)(i % 251 + 1);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 512, t.ti.rkey, 0,
                       t.ti.dctn, t.ti.dc_key),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    ASSERT_EQ(st, IBV_WC_SUCCESS);
    std::vector<char> m = t.dump(0, 1024);
    ASSERT_EQ(m.size(), 1024u);
    int bad = 0;
    for (int r = 0; r < 64; r++) {
        for (int i = 0; i < 8; i++)
            bad += m[16 * r + i] != (char)((8 * r + i) % 251 + 1);
        for (int i = 8; i < 16; i++)
            bad += m[16 * r + i] != 0;
    }
    EXPECT_EQ(bad, 0);
    ASSERT_EQ(post_one(c, OP_READ, lmr->lkey, lbuf.data() + 4096, 24, t.ti.rkey,
                       100, t.ti.dctn, t.ti.dc_key),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(lbuf.data() + 4096, lbuf.data() + 100, 24), 0);
    uint64_t old = 0;
    ASSERT_EQ(post_one(c, OP_FADD, lmr->lkey, lbuf.data() + 8192, 8, t.ti.rkey,
                       16, t.ti.dctn, t.ti.dc_key, 1, IBV_SEND_SIGNALED, 3),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    memcpy(&old, lbuf.data() + 8192, 8);
    uint64_t expect;
    memcpy(&expect, lbuf.data() + 16, 8);
    EXPECT_EQ(
            old,
            expect); /* offset 16 of the view is byte 32 of the target buffer */
    m = t.dump(32, 8);
    ASSERT_EQ(m.size(), 8u);
    uint64_t now;
    memcpy(&now, m.data(), 8);
    EXPECT_EQ(now, expect + 3);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 16, t.ti.rkey, 500,
                       t.ti.dctn, t.ti.dc_key),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_REM_ACCESS_ERR); /* beyond L = 512 */
    EXPECT_EQ(t.stop(), 0); /* exited with 0 (LSan-clean under ASan) */
}

TEST_F(emu_mp, atomics_under_contention)
{
    /* this process hosts the word; 4 processes fetch_add(1) 250 times each */
    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = create_dct(d, srq, 42);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    uint64_t *word = (uint64_t *)(lbuf.data() + 8192);
    *word          = 0;
    ibv_mr *amr    = dcxemu_ibv_reg_mr(d.pd, word, 8,
                                       IBV_ACCESS_LOCAL_WRITE |
                                               IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(amr, nullptr);
    const int N = 4, K = 250;
    std::vector<pid_t> pids;
    std::vector<int> fds;
    for (int i = 0; i < N; i++) {
        int p[2];
        ASSERT_EQ(pipe(p), 0);
        pids.push_back(
                spawn(g_fabric,
                      { "fadd", std::to_string(p[1]), std::to_string(d.lid),
                        std::to_string(dct->qp_num), "42",
                        std::to_string(amr->rkey),
                        std::to_string((uintptr_t)word), std::to_string(K) }));
        ::close(p[1]);
        fds.push_back(p[0]);
    }
    std::set<uint64_t> seen;
    for (int i = 0; i < N; i++) {
        std::vector<uint64_t> v(K);
        EXPECT_TRUE(read_full(fds[i], v.data(), K * 8, 60000));
        for (auto x : v)
            seen.insert(x);
        int st = wait_child(pids[i], 20000);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
        ::close(fds[i]);
    }
    EXPECT_EQ(*word, (uint64_t)(N * K));
    EXPECT_EQ(seen.size(),
              (size_t)(N * K)); /* every fetched value distinct: atomic */
    if (!seen.empty()) {
        EXPECT_EQ(*seen.rbegin(), (uint64_t)(N * K - 1));
    }
    dcxemu_ibv_dereg_mr(amr);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
}

TEST_F(emu_mp, many_initiators_one_dct)
{
    const int N = 4, K = 150;
    const uint32_t SZ = 300;
    ibv_cq *rcq       = dcxemu_ibv_create_cq(d.ctx, 2048, nullptr, nullptr, 0);
    ibv_srq *srq      = create_srq(d, 1023, 1);
    ibv_qp *dct       = create_dct(d, srq, 77, rcq);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    std::vector<char> rbuf((size_t)N * K * 512);
    std::vector<uint64_t> slots(N, 0);
    ibv_mr *rmr = dcxemu_ibv_reg_mr(d.pd, rbuf.data(), rbuf.size(),
                                    IBV_ACCESS_LOCAL_WRITE);
    ibv_mr *smr = dcxemu_ibv_reg_mr(d.pd, slots.data(), N * 8,
                                    IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE);
    ASSERT_TRUE(rmr && smr);
    for (int i = 0; i < N * K && i < 1023; i++) {
        ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + (size_t)i * 512, 512,
                            (uint64_t)i),
                  0);
    }
    std::vector<pid_t> pids;
    for (int i = 0; i < N; i++) {
        pids.push_back(spawn(g_fabric, { "sender", std::to_string(d.lid),
                                         std::to_string(dct->qp_num), "77",
                                         std::to_string(smr->rkey),
                                         std::to_string((uintptr_t)&slots[i]),
                                         std::to_string(i), std::to_string(K),
                                         std::to_string(SZ) }));
    }
    std::map<uint64_t, uint64_t> next_seq;
    std::map<uint64_t, uint32_t> src;
    int got = 0, bad = 0;
    uint64_t end = now_ms() + 60000;
    while (got < N * K && now_ms() < end) {
        ibv_wc wc;
        if (ibv_poll_cq(rcq, 1, &wc) != 1) {
            usleep(100);
            continue;
        }
        got++;
        const char *m = rbuf.data() + wc.wr_id * 512;
        uint64_t id, seq;
        memcpy(&id, m, 8);
        memcpy(&seq, m + 8, 8);
        bool ok = wc.status == IBV_WC_SUCCESS && wc.byte_len == SZ &&
                  id < (uint64_t)N && seq == next_seq[id] &&
                  wc.qp_num == dct->qp_num;
        for (uint32_t k = 16; ok && k < SZ; k++)
            ok = (unsigned char)m[k] == ((id * 31 + seq) & 0xff);
        /* the WRITE posted before this SEND on the same DCI is visible */
        ok = ok && __atomic_load_n(&slots[id], __ATOMIC_ACQUIRE) >= seq;
        if (src.count(id))
            ok = ok && src[id] == wc.src_qp;
        src[id] = wc.src_qp;
        if (!ok)
            bad++;
        next_seq[id] = seq + 1;
        if (wc.wr_id + 1023 < (uint64_t)(N * K)) {
            ASSERT_EQ(post_recv(srq, rmr, rbuf.data() + (wc.wr_id + 1023) * 512,
                                512, wc.wr_id + 1023),
                      0);
        }
    }
    EXPECT_EQ(got, N * K);
    EXPECT_EQ(bad, 0);
    for (auto p : pids) {
        int st = wait_child(p, 20000);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
    }
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    dcxemu_ibv_dereg_mr(rmr);
    dcxemu_ibv_dereg_mr(smr);
    dcxemu_ibv_destroy_cq(rcq);
}

/* Events raised by another process's SEND reach this process's channel and async fd through
 * its engine thread (futex doorbell), without this process polling. */
TEST_F(emu_mp, remote_send_wakes_channel_and_srq_limit)
{
    ibv_comp_channel *ch = dcxemu_ibv_create_comp_channel(d.ctx);
    ASSERT_NE(ch, nullptr);
    ibv_cq *rcq  = dcxemu_ibv_create_cq(d.ctx, 64, nullptr, ch, 0);
    ibv_srq *srq = create_srq(d, 8, 1);
    ibv_qp *dct  = create_dct(d, srq, 77, rcq);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    std::vector<uint64_t> slots(1, 0);
    ibv_mr *smr = dcxemu_ibv_reg_mr(d.pd, slots.data(), 8,
                                    IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(smr, nullptr);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(post_recv(srq, lmr, lbuf.data() + 512 * i, 512, (uint64_t)i),
                  0);
    }
    ibv_srq_attr sa;
    sa.srq_limit = 3;
    ASSERT_EQ(dcxemu_ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0);
    ASSERT_EQ(ibv_req_notify_cq(rcq, 0), 0);
    pid_t p      = spawn(g_fabric, { "sender", std::to_string(d.lid),
                                     std::to_string(dct->qp_num), "77",
                                     std::to_string(smr->rkey),
                                     std::to_string((uintptr_t)slots.data()), "0",
                                     "1", "64" });
    pollfd pf[2] = { { ch->fd, POLLIN, 0 }, { d.ctx->async_fd, POLLIN, 0 } };
    uint64_t end = now_ms() + 10000;
    int got_comp = 0, got_async = 0;
    while ((!got_comp || !got_async) && now_ms() < end) {
        if (poll(pf, 2, 100) <= 0)
            continue;
        if (pf[0].revents & POLLIN) {
            ibv_cq *cq;
            void *x;
            ASSERT_EQ(dcxemu_ibv_get_cq_event(ch, &cq, &x), 0);
            EXPECT_EQ(cq, rcq);
            dcxemu_ibv_ack_cq_events(cq, 1);
            got_comp++;
        }
        if (pf[1].revents & POLLIN) {
            ibv_async_event ev;
            ASSERT_EQ(dcxemu_ibv_get_async_event(d.ctx, &ev), 0);
            EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
            dcxemu_ibv_ack_async_event(&ev);
            got_async++;
        }
    }
    EXPECT_EQ(got_comp, 1);
    EXPECT_EQ(got_async, 1);
    int st = wait_child(p, 10000);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(rcq, &wc));
    EXPECT_EQ(wc.byte_len, 64u);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    dcxemu_ibv_dereg_mr(smr);
    dcxemu_ibv_destroy_cq(rcq);
    dcxemu_ibv_destroy_comp_channel(ch);
}

TEST_F(emu_mp, rnr_then_recovery)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid)); /* rnr_retry 7: infinite */
    uint64_t r0 = PROCESS_COUNT(rnr_retries);
    for (uint64_t i = 0; i < 3; i++) {
        lbuf[i] = (char)(0x40 + i);
        ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data() + i, 1, 0, 0,
                           t.ti.dctn, t.ti.dc_key, i),
                  0);
    }
    /* the head SEND waits (RNR retries counted), none completes */
    ASSERT_TRUE(wait_until([&] { return PROCESS_COUNT(rnr_retries) > r0; }));
    EXPECT_TRUE(cq_empty_now(d.cq));
    ASSERT_TRUE(t.post_recv(3, 16, 0));
    for (uint64_t i = 0; i < 3; i++) {
        ibv_wc wc;
        ASSERT_TRUE(poll_one(d.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, i);
    }
    std::vector<rwc> r = t.poll(3, 5000);
    ASSERT_EQ(r.size(), 3u);
    for (uint64_t i = 0; i < 3; i++)
        EXPECT_EQ(r[i].wr_id, i); /* FIFO */
    std::vector<char> b = t.dump(0, 48);
    ASSERT_EQ(b.size(), 48u);
    EXPECT_EQ(b[0], 0x40);
    EXPECT_EQ(b[16], 0x41);
    EXPECT_EQ(b[32], 0x42);
    EXPECT_EQ(t.stop(), 0); /* exited with 0 (LSan-clean under ASan) */
}

TEST_F(emu_mp, remote_bytes_land_in_ascending_order)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric, 4 << 20));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid));
    const uint32_t len = 1 << 20;
    memset(lbuf.data(), 0x5c, len);
    ASSERT_TRUE(t.send_cmd(CMD_WATCH, len, 0x5c, 4096) &&
                t.ack()); /* watching */
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), len, t.ti.rkey,
                       t.ti.addr + 4096, t.ti.dctn, t.ti.dc_key),
              0);
    uint32_t missing = 1234;
    ASSERT_TRUE(read_full(t.resp_r, &missing, 4, 15000));
    EXPECT_EQ(missing,
              0u); /* the last byte appeared only after every earlier byte */
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    EXPECT_EQ(t.stop(), 0); /* exited with 0 (LSan-clean under ASan) */
}

TEST_F(emu_mp, rnr_retry_exceeded_remote)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid, 64, 10, 3, 1));
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 8, 0, 0, t.ti.dctn,
                       t.ti.dc_key, 1, 0),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(emu_mp, target_killed_mid_stream)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid, 64, 12, 3, 7));
    uint64_t t0 = now_ms();
    int ok = 0, killed = 0;
    ibv_wc_status first_err = IBV_WC_SUCCESS;
    /* ends at the first error, a few WRs after the kill; the time limit only guards a hang */
    for (uint64_t i = 0; i < 100000 && now_ms() - t0 < 15000; i++) {
        ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 65536,
                           t.ti.rkey, t.ti.addr, t.ti.dctn, t.ti.dc_key, i),
                  0);
        ibv_wc_status st;
        ASSERT_TRUE(status_of(&st));
        if (st != IBV_WC_SUCCESS) {
            first_err = st;
            break;
        }
        if (++ok == 20) {
            kill(t.pid, SIGKILL);
            killed = 1;
        }
    }
    EXPECT_TRUE(killed);
    EXPECT_EQ(first_err, IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, t.ti.rkey,
                       t.ti.addr, t.ti.dctn, t.ti.dc_key, 7),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_WR_FLUSH_ERR);
    int s = wait_child(t.pid, 5000);
    t.pid = -1;
    EXPECT_TRUE(WIFSIGNALED(s));
}

TEST_F(emu_mp, stale_rkey_after_dereg)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid));
    ibv_wc_status st;
    lbuf[0] = 5;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, t.ti.rkey,
                       t.ti.addr, t.ti.dctn, t.ti.dc_key),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    ASSERT_TRUE(t.send_cmd(CMD_DEREG) && t.ack());
    lbuf[0] = 6;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 8, t.ti.rkey,
                       t.ti.addr, t.ti.dctn, t.ti.dc_key),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_REM_ACCESS_ERR);
    std::vector<char> b = t.dump(0, 1);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0], 5); /* memory untouched by the rejected write */
    EXPECT_EQ(t.stop(), 0); /* exited with 0 (LSan-clean under ASan) */
}

/* A dead target's PID handed to a new process that maps the same address: the model must never
 * write into it. ns_last_pid steers the kernel to reuse the exact PID. */
TEST_F(emu_mp, pid_reuse_never_written)
{
    const size_t len = 1 << 16;
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric, len, true));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid, 64, 10, 2, 7));
    pid_t old = t.pid;
    kill(old, SIGKILL);
    wait_child(old, 5000);
    t.pid   = -1;
    pid_t r = -1;
    int cmdp[2], resp[2];
    ASSERT_EQ(pipe(cmdp), 0);
    ASSERT_EQ(pipe(resp), 0);
    for (int attempt = 0; attempt < 20 && r != old; attempt++) {
        if (r > 0) {
            kill(r, SIGKILL);
            wait_child(r, 5000);
            int32_t junk;
            read_full(resp[0], &junk, 4, 100);
        }
        int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
        ASSERT_GE(fd, 0);
        std::string s = std::to_string(old - 1);
        ASSERT_EQ(write(fd, s.c_str(), s.size()), (ssize_t)s.size());
        ::close(fd);
        r          = spawn("unused-" + g_fabric,
                           { "idle", std::to_string(cmdp[0]), std::to_string(resp[1]),
                             std::to_string(len) });
        int32_t rp = 0;
        ASSERT_TRUE(read_full(resp[0], &rp, 4, 10000));
        ASSERT_EQ(rp, r);
    }
    ASSERT_EQ(r, old) << "could not reuse the PID";
    memset(lbuf.data(), 0x11, 4096);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 4096, t.ti.rkey,
                       t.ti.addr, t.ti.dctn, t.ti.dc_key),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_RETRY_EXC_ERR);
    cmd x = { CMD_DUMP, 4096, 0, 0, 0 };
    ASSERT_TRUE(write_full(cmdp[1], &x, sizeof(x)));
    std::vector<char> b(4096);
    ASSERT_TRUE(read_full(resp[0], b.data(), b.size(), 5000));
    EXPECT_EQ(std::count(b.begin(), b.end(), 0x77), 4096);
    cmd e = { CMD_EXIT, 0, 0, 0, 0 };
    write_full(cmdp[1], &e, sizeof(e));
    wait_child(r, 5000);
    for (int fd : { cmdp[0], cmdp[1], resp[0], resp[1] })
        ::close(fd);
}

/* --------------------------------------------------------------- fabric lifecycle ---- */

static off_t shm_size(const std::string &f)
{
    struct stat st;
    return stat(("/dev/shm/" + f).c_str(), &st) == 0 ? st.st_size : -1;
}

static int run_attach(const std::string &f,
                      const std::vector<std::string> &args,
                      const std::vector<std::string> &env = {})
{
    pid_t p = spawn(f, args, env);
    int st  = wait_child(p, 20000);
    return WIFEXITED(st) ? WEXITSTATUS(st) :
                           1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

TEST(emu_fabric, reinit_after_all_members_die)
{
    std::string f = fresh_fabric();
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    /* member A (heap 16 MiB) builds objects and is killed */
    pid_t a = fork();
    if (a == 0) {
        dup2(p[1], 1);
        setenv("DCXEMU_HEAP_MB", "16", 1);
        setenv("DCXEMU_FABRIC", f.c_str(), 1);
        execl("/proc/self/exe", "/proc/self/exe", "--emu-child", "attach", "0",
              "hang", (char *)nullptr);
        _exit(127);
    }
    char ready;
    ASSERT_TRUE(read_full(p[0], &ready, 1, 10000));
    off_t small = shm_size(f);
    ASSERT_GT(small, 16 << 20);
    /* while A lives, a new member joins the existing fabric (no re-initialisation) */
    EXPECT_EQ(run_attach(f, { "attach", "0" }, { "DCXEMU_HEAP_MB=32" }), 0);
    EXPECT_EQ(shm_size(f), small);
    kill(a, SIGKILL);
    wait_child(a, 5000);
    /* all members dead: the next one re-initialises with its own settings (and keeps the
     * file when it leaves, so its size can be seen) */
    EXPECT_EQ(run_attach(f, { "attach", "0" },
                         { "DCXEMU_HEAP_MB=32", "DCXEMU_KEEP_FABRIC=1" }),
              0);
    EXPECT_EQ(shm_size(f), small + (16 << 20));
    ::close(p[0]);
    ::close(p[1]);
}

TEST(emu_fabric, mismatch_refused)
{
    std::string f = fresh_fabric();
    int fd = open(("/dev/shm/" + f).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> junk(1 << 20, 0x3c); /* foreign magic */
    ASSERT_TRUE(write_full(fd, junk.data(), junk.size()));
    EXPECT_EQ(run_attach(f, { "attach", std::to_string(EPROTO) }), 0);
    fchmod(fd, 0644); /* readable by others: refused too */
    EXPECT_EQ(run_attach(f, { "attach", std::to_string(EACCES) }), 0);
    ::close(fd);
}

static int run_ready_child(const std::string &f,
                           const std::vector<std::string> &args,
                           const std::vector<std::string> &env = {})
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t c = fork();
    if (c == 0) {
        dup2(p[1], 1);
        setenv("DCXEMU_FABRIC", f.c_str(), 1);
        for (auto &e : env)
            putenv(strdup(e.c_str()));
        std::vector<char *> av = { (char *)"/proc/self/exe",
                                   (char *)"--emu-child" };
        for (auto &a : args)
            av.push_back((char *)a.c_str());
        av.push_back(nullptr);
        execv("/proc/self/exe", av.data());
        _exit(127);
    }
    char r  = 0;
    bool ok = read_full(p[0], &r, 1, 10000);
    int st  = wait_child(c, 10000);
    ::close(p[0]);
    ::close(p[1]);
    return ok && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : -1;
}

TEST_F(emu_mp, dead_lock_holder_never_wedges)
{
    /* a process dies holding the fabric lock; every member goes on */
    ASSERT_EQ(run_ready_child(g_fabric, { "lockholder", g_fabric }), 0);
    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = create_dct(d, srq, 3);
    ASSERT_NE(dct, nullptr);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    ibv_mr *rmr = dcxemu_ibv_reg_mr(d.pd, lbuf.data() + 65536, 4096,
                                    IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE);
    ASSERT_TRUE(make_dci(d, c, d.lid));
    lbuf[0] = 1;
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 1, rmr->rkey,
                       (uintptr_t)lbuf.data() + 65536, dct->qp_num, 3),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st, 5000));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    EXPECT_EQ(lbuf[65536], 1);
    dcxemu_ibv_dereg_mr(rmr);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
}

/* WRs executed on device 0 by every member of the fabric. */
static uint64_t fabric_ops()
{
    dcxemu_counters c;
    uint64_t n = 0;
    EXPECT_EQ(dcxemu_counters_read(0, DCXEMU_SCOPE_FABRIC, &c), 0);
    for (int i = 0; i < DCXEMU_CNT_OP_MAX; i++)
        n += c.wr[i];
    return n;
}

/* Processes killed at random points of every kind of call never wedge or corrupt the others. */
TEST_F(emu_mp, random_kills_never_wedge)
{
    ibv_cq *rcq  = dcxemu_ibv_create_cq(d.ctx, 4096, nullptr, nullptr, 0);
    ibv_srq *srq = create_srq(d, 1023, 1);
    ibv_qp *dct  = create_dct(d, srq, 99, rcq);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    std::vector<char> tbuf(1 << 20);
    ibv_mr *tmr = dcxemu_ibv_reg_mr(d.pd, tbuf.data(), tbuf.size(),
                                    IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE |
                                            IBV_ACCESS_REMOTE_READ |
                                            IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(tmr, nullptr);
    for (int i = 0; i < 1000; i++) {
        ASSERT_EQ(post_recv(srq, tmr, tbuf.data() + 65536 + 128 * i, 128,
                            (uint64_t)i),
                  0);
    }
    uint64_t *word = (uint64_t *)tbuf.data();
    unsigned seed  = (unsigned)getpid();
    for (int round = 0; round < 8; round++) {
        std::vector<pid_t> pids;
        for (int k = 0; k < 3; k++) {
            pids.push_back(
                    spawn(g_fabric, { "chaos", std::to_string(d.lid),
                                      std::to_string(dct->qp_num), "99",
                                      std::to_string(tmr->rkey),
                                      std::to_string((uintptr_t)word) }));
        }
        /* killed after a random number of their operations ran, wherever they are then */
        uint64_t ops0 = fabric_ops(),
                 ops  = rand_r(&seed) % 41; /* 0: while starting */
        EXPECT_TRUE(wait_until(
                [&] {
                    ibv_wc wc[16];
                    int n = ibv_poll_cq(rcq, 16, wc);
                    for (int j = 0; j < n; j++) {
                        post_recv(srq, tmr,
                                  tbuf.data() + 65536 +
                                          128 * (wc[j].wr_id % 1000),
                                  128, wc[j].wr_id);
                    }
                    return fabric_ops() - ops0 >= ops;
                },
                30000))
                << "round " << round << ": the members made no progress";
        for (pid_t p : pids)
            kill(p, SIGKILL);
        for (pid_t p : pids) {
            int st = wait_child(p, 10000);
            EXPECT_TRUE(WIFSIGNALED(st))
                    << "round " << round << " status " << st;
        }
    }
    /* everyone else still works: own traffic, a new member, a large allocation */
    uint64_t before = *word;
    ASSERT_TRUE(make_dci(d, c, d.lid));
    ASSERT_EQ(post_one(c, OP_FADD, lmr->lkey, lbuf.data(), 8, tmr->rkey,
                       (uintptr_t)word, dct->qp_num, 99, 1, IBV_SEND_SIGNALED,
                       5),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st, 5000));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    EXPECT_EQ(*word, before + 5);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    pid_t f = spawn(g_fabric,
                    { "fadd", std::to_string(p[1]), std::to_string(d.lid),
                      std::to_string(dct->qp_num), "99",
                      std::to_string(tmr->rkey),
                      std::to_string((uintptr_t)word), "50" });
    std::vector<uint64_t> v(50);
    EXPECT_TRUE(read_full(p[0], v.data(), 400, 20000));
    int fst = wait_child(f, 20000);
    EXPECT_TRUE(WIFEXITED(fst) && WEXITSTATUS(fst) == 0) << fst;
    ::close(p[0]);
    ::close(p[1]);
    ibv_cq *big = dcxemu_ibv_create_cq(d.ctx, 1 << 20, nullptr, nullptr,
                                       0); /* 72 MiB ring */
    EXPECT_NE(big, nullptr);
    if (big)
        dcxemu_ibv_destroy_cq(big);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    dcxemu_ibv_dereg_mr(tmr);
    dcxemu_ibv_destroy_cq(rcq);
}

TEST(emu_fabric, dead_member_objects_reclaimed)
{
    /* heap of 16 MiB, a CQ ring of 9.4 MiB per member;
     * each member dies holding one, and the next can only allocate if the reaper freed it */
    std::string f = fresh_fabric();
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(run_ready_child(f, { "attach", "0", "bigcq" },
                                  { "DCXEMU_HEAP_MB=16" }),
                  0)
                << "member " << i;
    }
}

TEST(emu_fabric, shm_mode_0600_and_names)
{
    dev d;
    ASSERT_TRUE(d.open());
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm/" + g_fabric).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(st.st_uid, getuid());
    EXPECT_EQ(std::string(d.ctx->device->dev_path), "/dev/shm/" + g_fabric);
    d.close();
}

TEST(emu_fabric, max_wqe_size_setting)
{
    /* inline 500 needs a 768-byte WQE: refused at the default 512, accepted at 1024 */
    std::string f = fresh_fabric();
    EXPECT_ERRNO_EQ(EINVAL, run_attach(f, { "wqe", "500" }));
    EXPECT_EQ(run_attach(f, { "wqe", "500" }, { "DCXEMU_MAX_WQE_SIZE=1024" }),
              0);
}

TEST(emu_fabric, no_atomics_device)
{
    /* the same checks fail on the default device (atomic_cap HCA) */
    std::string f = fresh_fabric();
    EXPECT_EQ(run_attach(f, { "noatomics" }, { "DCXEMU_ATOMIC_CAP=none" }), 0);
    EXPECT_EQ(run_attach(f, { "noatomics" }), 3);
}

/* No busy polling while idle: with a QP and a DCT but nothing posted, the engine waits on its
 * doorbell with the housekeeping tick (100 ms) as timeout, not a short one. */
TEST(emu_fabric, engine_idle_sleeps)
{
    dev d;
    dci c;
    ASSERT_TRUE(d.open());
    ibv_srq *srq = create_srq(d);
    ibv_qp *dct  = srq ? create_dct(d, srq, 5) : nullptr;
    ASSERT_NE(dct, nullptr);
    ASSERT_EQ(dct_to_rtr(dct), 0);
    ASSERT_TRUE(make_dci(d, c, d.lid));
    dcxemu_engine_state st;
    EXPECT_TRUE(wait_until(
            [&] { /* a wait shortened by a preempted loop is followed by a full one */
                  return dcxemu_engine_state_read(&st) == 0 && st.quiescent &&
                         st.interval_ns >= 50000000;
            }));
    EXPECT_EQ(st.timers, 0u);
    EXPECT_LE(st.interval_ns, 100000000u);
    destroy_dci(c);
    dcxemu_ibv_destroy_qp(dct);
    dcxemu_ibv_destroy_srq(srq);
    d.close();
}

TEST(emu_fabric, dead_member_slots_reclaimed)
{
    /* 70 members attach and die without leaving (SIGKILL); the fabric admits 64 */
    std::string f = fresh_fabric();
    for (int i = 0; i < 70; i++) {
        ASSERT_EQ(run_attach(f, { "attach", "0", "die" },
                             { "DCXEMU_MAX_MEMBERS=64" }),
                  1000 + SIGKILL)
                << "member " << i;
    }
}

static dcxemu_counters cnt(int scope)
{
    dcxemu_counters c;
    EXPECT_EQ(dcxemu_counters_read(0, (dcxemu_counter_scope)scope, &c), 0);
    return c;
}

/* Another process's DCT made unreachable: our DCI sees retry_cnt counted transport retries, then
 * RETRY_EXC_ERR, and the target's memory is untouched; switching it off restores delivery. */
TEST_F(emu_mp, fault_dct_unreachable_remote)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid, 64, 4, 2));
    dcxemu_counters p0 = cnt(DCXEMU_SCOPE_PROCESS),
                    f0 = cnt(DCXEMU_SCOPE_FABRIC);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE, t.ti.dctn, 1),
              0);
    memset(lbuf.data(), 'Z', 256);
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 256, t.ti.rkey,
                       t.ti.addr, t.ti.dctn, t.ti.dc_key),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_RETRY_EXC_ERR);
    std::vector<char> got = t.dump(0, 256);
    ASSERT_EQ(got.size(), 256u);
    EXPECT_EQ(std::count(got.begin(), got.end(), 0), 256);
    EXPECT_EQ(cnt(DCXEMU_SCOPE_PROCESS).transport_retries -
                      p0.transport_retries,
              2u);
    EXPECT_EQ(cnt(DCXEMU_SCOPE_FABRIC).transport_retries - f0.transport_retries,
              2u);
    EXPECT_EQ(cnt(DCXEMU_SCOPE_PROCESS).error_cqes - p0.error_cqes, 1u);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DCT_UNREACHABLE, t.ti.dctn, 0),
              0);
    destroy_dci(c);
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid, 64, 4, 2));
    ASSERT_EQ(post_one(c, OP_WRITE, lmr->lkey, lbuf.data(), 256, t.ti.rkey,
                       t.ti.addr, t.ti.dctn, t.ti.dc_key),
              0);
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    got = t.dump(0, 256);
    ASSERT_EQ(got.size(), 256u);
    EXPECT_EQ(std::count(got.begin(), got.end(), 'Z'), 256);
    EXPECT_EQ(t.stop(), 0);
}

/* DROP_NEXT N < retry_cnt on another process's DCT: success after exactly N counted transport
 * retries.  The receive CQE is charged to the target process and device, not to us. */
TEST_F(emu_mp, fault_drop_next_remote)
{
    remote_target t;
    ASSERT_TRUE(t.start(g_fabric));
    ASSERT_TRUE(make_dci(d, c, (uint16_t)t.ti.lid, 64, 4, 3));
    ASSERT_TRUE(t.post_recv(1, 1024, 4096));
    dcxemu_counters p0 = cnt(DCXEMU_SCOPE_PROCESS),
                    f0 = cnt(DCXEMU_SCOPE_FABRIC);
    ASSERT_EQ(dcxemu_fault_inject(DCXEMU_FAULT_DROP_NEXT, t.ti.dctn, 2), 0);
    memset(lbuf.data(), 'Q', 100);
    ASSERT_EQ(post_one(c, OP_SEND, lmr->lkey, lbuf.data(), 100, 0, 0, t.ti.dctn,
                       t.ti.dc_key),
              0);
    ibv_wc_status st;
    ASSERT_TRUE(status_of(&st));
    EXPECT_EQ(st, IBV_WC_SUCCESS);
    std::vector<rwc> r = t.poll(1, 5000);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].byte_len, 100u);
    dcxemu_counters p = cnt(DCXEMU_SCOPE_PROCESS), f = cnt(DCXEMU_SCOPE_FABRIC);
    EXPECT_EQ(p.transport_retries - p0.transport_retries, 2u);
    EXPECT_EQ(f.transport_retries - f0.transport_retries, 2u);
    EXPECT_EQ(p.wr[DCXEMU_CNT_OP_SEND] - p0.wr[DCXEMU_CNT_OP_SEND], 1u);
    EXPECT_EQ(p.recv_cqes - p0.recv_cqes, 0u);
    EXPECT_EQ(f.recv_cqes - f0.recv_cqes, 1u);
    EXPECT_EQ(f.bytes - f0.bytes, 100u);
    EXPECT_EQ(t.stop(), 0);
}

} // namespace
