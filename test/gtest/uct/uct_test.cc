/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 */
#include "uct_test.h"

#include <algorithm>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace dcx_test {

const char *emu_md_name  = "dcxemu0";
const char *emu_dev_name = "dcxemu0:1";

static double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

uct_component_h dcx_component()
{
    static uct_component_h dcx = []() -> uct_component_h {
        if (dlopen(DCX_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL) == nullptr) {
            ADD_FAILURE() << dlerror();
            return nullptr;
        }

        uct_component_h *components, found = nullptr;
        unsigned num;
        if (uct_query_components(&components, &num) != UCS_OK) {
            return nullptr;
        }
        for (unsigned i = 0; i < num; ++i) {
            uct_component_attr_t attr;
            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
            uct_component_query(components[i], &attr);
            if (std::string(attr.name) == "dcx") {
                found = components[i];
            }
        }
        uct_release_component_list(components);
        return found;
    }();
    return dcx;
}

entity::entity(const config_t &config, uct_error_handler_t err_handler,
               void *err_arg)
{
    uct_component_h dcx = dcx_component();
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_iface_params_t params = {};

    EXPECT_NE(nullptr, dcx);
    EXPECT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                               &m_async));
    EXPECT_EQ(UCS_OK, uct_worker_create(m_async, UCS_THREAD_MODE_SINGLE,
                                        &m_worker));
    EXPECT_EQ(UCS_OK, uct_md_config_read(dcx, NULL, NULL, &md_config));
    EXPECT_EQ(UCS_OK, uct_md_open(dcx, emu_md_name, md_config, &m_md));
    uct_config_release(md_config);
    if (m_md == nullptr) {
        return;
    }

    EXPECT_EQ(UCS_OK, uct_md_iface_config_read(m_md, "dcx", NULL, NULL,
                                               &iface_config));
    for (const auto &kv : config) {
        /* UCX 1.13 matches a name without the table's prefix, 1.16 and
         * later only with it (DCX_...). */
        ucs_status_t status = uct_config_modify(iface_config, kv.first.c_str(),
                                                kv.second.c_str());
        if (status == UCS_ERR_NO_ELEM) {
            status = uct_config_modify(iface_config,
                                       ("DCX_" + kv.first).c_str(),
                                       kv.second.c_str());
        }
        EXPECT_EQ(UCS_OK, status) << kv.first << "=" << kv.second;
    }

    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "dcx";
    params.mode.device.dev_name = emu_dev_name;
    params.rx_headroom          = 16;
    if (err_handler != nullptr) {
        params.field_mask       |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler       = err_handler;
        params.err_handler_arg   = err_arg;
        params.err_handler_flags = UCT_CB_FLAG_ASYNC;
    }

    EXPECT_EQ(UCS_OK, uct_iface_open(m_md, m_worker, &params, iface_config,
                                     &m_iface));
    uct_config_release(iface_config);
    if (m_iface == nullptr) {
        return;
    }

    EXPECT_EQ(UCS_OK, uct_iface_query(m_iface, &m_attr));
    m_dev_addr.resize(m_attr.device_addr_len);
    m_iface_addr.resize(m_attr.iface_addr_len);
    EXPECT_EQ(UCS_OK, uct_iface_get_device_address(
                              m_iface, (uct_device_addr_t*)m_dev_addr.data()));
    EXPECT_EQ(UCS_OK, uct_iface_get_address(
                              m_iface, (uct_iface_addr_t*)m_iface_addr.data()));
    uct_iface_progress_enable(m_iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

entity::~entity()
{
    if (m_iface != nullptr) {
        uct_iface_close(m_iface);
    }
    if (m_md != nullptr) {
        uct_md_close(m_md);
    }
    if (m_worker != nullptr) {
        uct_worker_destroy(m_worker);
    }
    if (m_async != nullptr) {
        ucs_async_context_destroy(m_async);
    }
}

void entity::close_iface()
{
    if (m_iface != nullptr) {
        uct_iface_close(m_iface);
        m_iface = nullptr;
    }
}

std::vector<char> entity::address() const
{
    std::vector<char> blob;
    blob.push_back((char)m_dev_addr.size());
    blob.insert(blob.end(), m_dev_addr.begin(), m_dev_addr.end());
    blob.insert(blob.end(), m_iface_addr.begin(), m_iface_addr.end());
    return blob;
}

ucs_status_t entity::connect(const std::vector<char> &address, uct_ep_h *ep_p)
{
    uct_ep_params_t params = {};
    size_t dev_len         = (unsigned char)address.at(0);

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                        UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = m_iface;
    params.dev_addr   = (const uct_device_addr_t*)&address[1];
    params.iface_addr = (const uct_iface_addr_t*)&address[1 + dev_len];
    return uct_ep_create(&params, ep_p);
}

uct_ep_h entity::connect(const entity &peer)
{
    uct_ep_h ep = nullptr;
    EXPECT_EQ(UCS_OK, connect(peer.address(), &ep));
    return ep;
}

unsigned entity::progress()
{
    return uct_worker_progress(m_worker);
}

buffer::buffer(const entity &e, size_t length, char fill, unsigned flags) :
    m_md(e.md()), m_length(length), m_memh(UCT_MEM_HANDLE_NULL)
{
    uct_md_attr_t attr;

    EXPECT_EQ(0, posix_memalign((void**)&m_ptr, 4096, std::max(length, (size_t)64)));
    memset(m_ptr, fill, length);
    EXPECT_EQ(UCS_OK, uct_md_mem_reg(m_md, m_ptr, std::max(length, (size_t)64),
                                     flags, &m_memh));
    EXPECT_EQ(UCS_OK, uct_md_query(m_md, &attr));
    m_packed.resize(attr.rkey_packed_size);
    EXPECT_EQ(UCS_OK, uct_md_mkey_pack(m_md, m_memh, m_packed.data()));
}

buffer::~buffer()
{
    if (m_memh != UCT_MEM_HANDLE_NULL) {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(m_md, m_memh));
    }
    free(m_ptr);
}

rkey::rkey(const std::vector<char> &packed)
{
    EXPECT_EQ(UCS_OK, uct_rkey_unpack(dcx_component(), packed.data(),
                                      &m_bundle));
}

rkey::~rkey()
{
    uct_rkey_release(dcx_component(), &m_bundle);
}

bool wait_for(const std::vector<entity*> &entities,
              const std::function<bool()> &cond, double timeout)
{
    double deadline = now() + timeout;

    while (!cond()) {
        if (now() > deadline) {
            return false;
        }
        for (entity *e : entities) {
            e->progress();
        }
    }
    return true;
}

static void test_comp_cb(uct_completion_t *self)
{
    test_comp *comp = ucs_container_of(self, test_comp, uct);
    comp->status    = self->status;
    comp->done      = 1;
}

test_comp::test_comp() : status(UCS_INPROGRESS), done(0)
{
    uct.func   = test_comp_cb;
    uct.count  = 1;
    uct.status = UCS_OK;
}

ucs_status_t retry(const std::vector<entity*> &entities,
                   const std::function<ucs_status_t()> &op)
{
    double deadline = now() + 20.0;
    ucs_status_t status;

    while ((status = op()) == UCS_ERR_NO_RESOURCE) {
        if (now() > deadline) {
            break;
        }
        for (entity *e : entities) {
            e->progress();
        }
    }
    return status;
}

std::map<std::string, child_role_t> &child_roles()
{
    static std::map<std::string, child_role_t> roles;
    return roles;
}

int run_child_role(int argc, char **argv)
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
    return it->second(atoi(argv[3]), atoi(argv[4]), args);
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

child::child(const std::string &role, const std::vector<std::string> &args)
{
    std::string exe = self_exe();

    EXPECT_EQ(0, pipe(m_to));
    EXPECT_EQ(0, pipe(m_from));
    m_pid = fork();
    if (m_pid == 0) {
        std::vector<std::string> argv_s = {
            exe, "--dcx-child", role, std::to_string(m_to[0]),
            std::to_string(m_from[1])
        };
        argv_s.insert(argv_s.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto &s : argv_s) {
            argv.push_back(&s[0]);
        }
        argv.push_back(nullptr);
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
    double deadline = now() + timeout;
    int status;

    while (m_pid > 0) {
        pid_t ret = waitpid(m_pid, &status, WNOHANG);
        if (ret == m_pid) {
            m_pid = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        if (now() > deadline) {
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
        *status_p = WIFEXITED(status) ? WEXITSTATUS(status) :
                    128 + WTERMSIG(status); /* as the shell reports it */
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
    char *p = (char*)buf;
    while (len > 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int timeout_ms    = (int)((deadline - now()) * 1000);
        if ((timeout_ms <= 0) || (poll(&pfd, 1, timeout_ms) <= 0)) {
            return false;
        }
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            return false;
        }
        p   += n;
        len -= n;
    }
    return true;
}

ucs_status_t record_failure(void *arg, uct_ep_h ep, ucs_status_t status)
{
    failure_record *rec = (failure_record*)arg;
    rec->eps.push_back(ep);
    rec->statuses.push_back(status);
    return UCS_OK;
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
    double deadline = now() + timeout;
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

} // namespace dcx_test
