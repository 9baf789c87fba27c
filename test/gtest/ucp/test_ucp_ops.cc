/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * UCP over UCX_TLS=dcx between processes on the software DC device: tag
 * eager and rendezvous (get_zcopy and put_zcopy schemes), stream, active
 * messages, RMA, 64-bit device atomics under contention, wakeup mode and a
 * peer that dies. Data is verified on both sides; every wait is bounded.
 */
#include "ucp_test.h"

#include <algorithm>
#include <poll.h>
#include <set>
#include <string.h>
#include <unistd.h>

using namespace dcx_test;

namespace {

const uint64_t all_features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM |
                              UCP_FEATURE_AM | UCP_FEATURE_RMA |
                              UCP_FEATURE_AMO64;
const size_t region_size = 4 << 20;
const unsigned am_id     = 5;

/* Commands from the parent to a ucp_peer child (first word of a message). */
enum peer_cmd : uint64_t {
    CMD_QUIT,
    CMD_TAG_ECHO,
    CMD_STREAM_ECHO,
    CMD_AM_COUNT,
    CMD_CHECK_REGION,
    CMD_FILL_REGION,
    CMD_READ_U64,
    CMD_TAG_SEND
};

const std::vector<size_t> tag_sizes = {
    1, 8, 200, 4000, 8100, 20000, 65536, 300001, 1 << 20, 4 << 20
};

/* Waits with ucp_worker_arm + ucp_worker_wait (wakeup mode) or by busy
 * progress. Wakeup waits are bounded by the parent, which kills a child
 * that does not answer in time. */
bool peer_wait_for(ucp_entity &e, bool wakeup,
                   const std::function<bool()> &cond, double timeout = 60.0)
{
    if (!wakeup) {
        return e.wait_for(cond, timeout);
    }
    double deadline = now_sec() + timeout;
    while (!cond()) {
        if (now_sec() > deadline) {
            return false;
        }
        if (e.progress() != 0) {
            continue;
        }
        ucs_status_t status = ucp_worker_arm(e.worker());
        if (status == UCS_ERR_BUSY) {
            continue;
        }
        if ((status != UCS_OK) || (ucp_worker_wait(e.worker()) != UCS_OK)) {
            return false;
        }
    }
    return true;
}

/* Completion of a non-blocking operation (0 pending = done). */
struct req_set {
    std::vector<ucs_status_ptr_t> reqs;

    void add(ucs_status_ptr_t r)
    {
        reqs.push_back(r);
    }
    bool done() const
    {
        for (auto r : reqs) {
            if (UCS_PTR_IS_PTR(r) && (r != NULL) &&
                (ucp_request_check_status(r) == UCS_INPROGRESS)) {
                return false;
            }
        }
        return true;
    }
    /* Frees the requests; returns the first error. */
    ucs_status_t finish()
    {
        ucs_status_t result = UCS_OK;
        for (auto r : reqs) {
            ucs_status_t s = UCS_OK;
            if (UCS_PTR_IS_ERR(r)) {
                s = UCS_PTR_STATUS(r);
            } else if (r != NULL) {
                s = ucp_request_check_status(r);
                if (s != UCS_INPROGRESS) {
                    ucp_request_free(r);
                }
            }
            if ((s != UCS_OK) && (result == UCS_OK)) {
                result = s;
            }
        }
        reqs.clear();
        return result;
    }
};

/* Active messages received by a peer: header = {seq, length}. */
struct am_state {
    ucp_worker_h worker;
    uint64_t count = 0, bad = 0, bytes = 0;
    int pending = 0;
    std::vector<std::vector<char> *> rndv_bufs;
};

struct am_rndv_ctx {
    am_state *st;
    std::vector<char> *buf;
    uint64_t seq;
};

void am_rndv_done(void *request, ucs_status_t status, size_t length,
                  void *user_data)
{
    am_rndv_ctx *ctx = (am_rndv_ctx *)user_data;
    if ((status != UCS_OK) || (length != ctx->buf->size()) ||
        (check_data(ctx->buf->data(), length, ctx->seq) >= 0)) {
        ++ctx->st->bad;
    }
    --ctx->st->pending;
    ++ctx->st->count;
    delete ctx;
    if (request != NULL) {
        ucp_request_free(request);
    }
}

ucs_status_t am_recv(void *arg, const void *header, size_t header_length,
                     void *data, size_t length,
                     const ucp_am_recv_param_t *param)
{
    am_state *st = (am_state *)arg;
    uint64_t hdr[2];

    if (header_length != sizeof(hdr)) {
        ++st->bad;
        ++st->count;
        return UCS_OK;
    }
    memcpy(hdr, header, sizeof(hdr));
    st->bytes += length;
    if (hdr[1] != length) {
        ++st->bad;
    }

    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        auto *buf = new std::vector<char>(length);
        st->rndv_bufs.push_back(buf);
        am_rndv_ctx *ctx       = new am_rndv_ctx{ st, buf, hdr[0] };
        ucp_request_param_t rp = {};
        rp.op_attr_mask        = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
        rp.cb.recv_am = am_rndv_done;
        rp.user_data  = ctx;
        ++st->pending;
        ucs_status_ptr_t r = ucp_am_recv_data_nbx(st->worker, data, buf->data(),
                                                  length, &rp);
        if (UCS_PTR_IS_ERR(r)) {
            ++st->bad;
            --st->pending;
            ++st->count;
            delete ctx;
        } else if (r == NULL) {
            am_rndv_done(NULL, UCS_OK, length, ctx);
        } /* else: the callback runs and frees the request */
        return UCS_OK;
    }

    if (check_data(data, length, hdr[0]) >= 0) {
        ++st->bad;
    }
    ++st->count;
    return UCS_OK;
}

void tag_recv_cb(void *request, ucs_status_t status,
                 const ucp_tag_recv_info_t *info, void *user_data)
{
}

ucs_status_ptr_t
tag_send(ucp_ep_h ep, const void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t p = {};
    return ucp_tag_send_nbx(ep, buf, len, tag, &p);
}

ucs_status_ptr_t tag_recv(ucp_worker_h w, void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t p = {};
    p.op_attr_mask        = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.recv             = tag_recv_cb;
    return ucp_tag_recv_nbx(w, buf, len, tag, (ucp_tag_t)-1, &p);
}

} // namespace

/*
 * A peer: a UCP worker with a 4 MiB mapped region. Sends its worker address,
 * the region's rkey and address; connects to the parent's address; then
 * serves commands until CMD_QUIT. args: "wakeup" to wait in wakeup mode.
 */
DCX_CHILD_ROLE(ucp_peer)
{
    bool wakeup = (!args.empty() && (args[0] == "wakeup"));
    ucp_entity e(all_features, wakeup);
    if (!e.ok()) {
        return 2;
    }
    ucp_region region(e.context(), region_size);
    am_state am;
    am.worker = e.worker();

    ucp_am_handler_param_t hp = {};
    hp.field_mask             = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id  = am_id;
    hp.cb  = am_recv;
    hp.arg = &am;
    if (ucp_worker_set_am_recv_handler(e.worker(), &hp) != UCS_OK) {
        return 3;
    }

    send_msg(out_fd, e.address());
    send_msg(out_fd, region.packed_rkey());
    send_msg(out_fd, u64_msg((uintptr_t)region.ptr()));

    ucp_ep_h ep;
    if (e.connect(recv_msg(in_fd), &ep) != UCS_OK) {
        return 4;
    }

    for (;;) {
        /* Keep progressing while waiting for a command. */
        struct pollfd pfd = { in_fd, POLLIN, 0 };
        double deadline   = now_sec() + 120;
        while (poll(&pfd, 1, 0) == 0) {
            e.progress();
            if (now_sec() > deadline) {
                return 5;
            }
        }
        std::vector<uint64_t> cmd = msg_u64s(recv_msg(in_fd, 10));
        if (cmd.empty() || (cmd[0] == CMD_QUIT)) {
            break;
        }

        uint64_t bad = 0;
        switch (cmd[0]) {
        case CMD_TAG_ECHO: {
            /* Receive the messages (tags 100+i), verify, echo them back
             * (tags 2000+i, data seq 1000+i). */
            size_t n = cmd.size() - 1;
            std::vector<std::vector<char>> bufs(n);
            req_set rs;
            for (size_t i = 0; i < n; ++i) {
                bufs[i].assign(cmd[1 + i], 0);
                rs.add(tag_recv(e.worker(), bufs[i].data(), bufs[i].size(),
                                100 + i));
            }
            if (!peer_wait_for(e, wakeup, [&] { return rs.done(); }) ||
                (rs.finish() != UCS_OK)) {
                bad = ~0ull;
                break;
            }
            for (size_t i = 0; i < n; ++i) {
                if (check_data(bufs[i].data(), bufs[i].size(), i) >= 0) {
                    ++bad;
                }
                fill_data(bufs[i].data(), bufs[i].size(), 1000 + i);
                rs.add(tag_send(ep, bufs[i].data(), bufs[i].size(), 2000 + i));
            }
            if (!peer_wait_for(e, wakeup, [&] { return rs.done(); }) ||
                (rs.finish() != UCS_OK)) {
                bad = ~0ull;
            }
            break;
        }
        case CMD_STREAM_ECHO: {
            std::vector<char> buf(cmd[1]);
            size_t got            = 0;
            ucp_request_param_t p = {};
            p.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags               = UCP_STREAM_RECV_FLAG_WAITALL;
            ucs_status_ptr_t r = ucp_stream_recv_nbx(ep, buf.data(), buf.size(),
                                                     &got, &p);
            req_set rs;
            rs.add(r);
            if (!peer_wait_for(e, wakeup, [&] { return rs.done(); })) {
                bad = ~0ull;
                break;
            }
            if (UCS_PTR_IS_PTR(r) && (r != NULL)) {
                ucp_stream_recv_request_test(r, &got);
            }
            if ((rs.finish() != UCS_OK) || (got != buf.size()) ||
                (check_data(buf.data(), buf.size(), cmd[2]) >= 0)) {
                bad = 1;
            }
            fill_data(buf.data(), buf.size(), cmd[2] + 1);
            ucp_request_param_t sp = {};
            rs.add(ucp_stream_send_nbx(ep, buf.data(), buf.size(), &sp));
            if (!peer_wait_for(e, wakeup, [&] { return rs.done(); }) ||
                (rs.finish() != UCS_OK)) {
                bad = ~0ull;
            }
            break;
        }
        case CMD_AM_COUNT:
            if (!peer_wait_for(e, wakeup, [&] {
                    return (am.count >= cmd[1]) && (am.pending == 0);
                })) {
                fprintf(stderr,
                        "ucp_peer: %lu of %lu active messages (%d data "
                        "receives pending, %lu bad)\n",
                        am.count, cmd[1], am.pending, am.bad);
                bad = ~0ull;
                break;
            }
            bad      = am.bad + ((am.count != cmd[1]) ? 1000000 : 0);
            am.count = am.bad = 0;
            for (auto b : am.rndv_bufs) {
                delete b;
            }
            am.rndv_bufs.clear();
            break;
        case CMD_CHECK_REGION: {
            long off = check_data(region.ptr() + cmd[3], cmd[2], cmd[1]);
            bad      = (off < 0) ? 0 : off + 1;
            break;
        }
        case CMD_FILL_REGION:
            fill_data(region.ptr() + cmd[3], cmd[2], cmd[1]);
            break;
        case CMD_TAG_SEND: {
            /* Send one message {length, seq} on tag 3000. */
            std::vector<char> buf(cmd[1]);
            fill_data(buf.data(), buf.size(), cmd[2]);
            req_set rs;
            rs.add(tag_send(ep, buf.data(), buf.size(), 3000));
            if (!peer_wait_for(e, wakeup, [&] { return rs.done(); }) ||
                (rs.finish() != UCS_OK)) {
                bad = ~0ull;
            }
            break;
        }
        case CMD_READ_U64:
            memcpy(&bad, region.ptr() + cmd[1], sizeof(bad));
            break;
        default:
            return 6;
        }
        send_msg(out_fd, u64_msg(bad));
    }

    e.disconnect(ep, true);
    return 0;
}

/* One 64-bit atomic through UCP: 'value' as the operand (the compare value
 * for CSWAP), 'result' the fetched value (for CSWAP, the swap value going
 * in), waited for. */
ucs_status_t atomic64(ucp_entity &e, ucp_ep_h ep, ucp_atomic_op_t op,
                      uint64_t value, uint64_t *result, uint64_t raddr,
                      ucp_rkey_h rkey)
{
    ucp_request_param_t p = {};

    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                     UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.datatype     = ucp_dt_make_contig(8);
    p.reply_buffer = result;
    return e.wait(ucp_atomic_op_nbx(ep, op, &value, 1, raddr, rkey, &p));
}

/* The contention both the amo clients and the test run: 'count' fetch-adds
 * of 1 at raddr (their fetched values appended to 'fetched'), then 'count'
 * compare-swap increments at raddr + 8. */
ucs_status_t contend(ucp_entity &e, ucp_ep_h ep, uint64_t raddr,
                     ucp_rkey_h rkey, uint64_t count,
                     std::vector<uint64_t> &fetched)
{
    ucs_status_t status;

    for (uint64_t i = 0; i < count; ++i) {
        uint64_t result = ~0ull;
        status = atomic64(e, ep, UCP_ATOMIC_OP_ADD, 1, &result, raddr, rkey);
        if (status != UCS_OK) {
            return status;
        }
        fetched.push_back(result);
    }
    for (uint64_t i = 0; i < count; ++i) {
        uint64_t cur = 0;
        for (int tries = 0;; ++tries) {
            uint64_t result = cur + 1;
            status          = atomic64(e, ep, UCP_ATOMIC_OP_CSWAP, cur, &result,
                                       raddr + 8, rkey);
            if (status != UCS_OK) {
                return status;
            }
            if (result == cur) {
                break;
            }
            cur = result;
            if (tries > 1000000) {
                return UCS_ERR_TIMED_OUT;
            }
        }
    }
    return UCS_OK;
}

/* An atomics client: connects to a target (address, rkey, remote address
 * on the pipe), waits for "go", then does count fetch-adds of 1 on word 0
 * and count compare-swap increments on word 1; reports the fetched values. */
DCX_CHILD_ROLE(amo_client)
{
    ucp_entity e(all_features);
    if (!e.ok()) {
        return 2;
    }
    ucp_ep_h ep;
    if (e.connect(recv_msg(in_fd), &ep) != UCS_OK) {
        return 3;
    }
    std::vector<char> packed = recv_msg(in_fd);
    uint64_t raddr           = msg_u64(recv_msg(in_fd));
    ucp_rkey_h rkey;
    if (ucp_ep_rkey_unpack(ep, packed.data(), &rkey) != UCS_OK) {
        return 4;
    }
    send_msg(out_fd, u64_msg(ucp_entity::ep_info(ep).find("amo#") !=
                             std::string::npos));
    uint64_t count = msg_u64(recv_msg(in_fd));
    std::vector<uint64_t> fetched;
    if (contend(e, ep, raddr, rkey, count, fetched) != UCS_OK) {
        return 5;
    }
    send_msg(out_fd, u64s_msg(fetched));
    recv_msg(in_fd, 30);
    ucp_rkey_destroy(rkey);
    e.disconnect(ep, true);
    return 0;
}

/* What a ucp_peer child says when it starts: its worker address, the packed
 * rkey and the address of its region. */
struct peer_hello {
    std::vector<char> address;
    std::vector<char> packed_rkey;
    uint64_t raddr = 0;
};

/* Connects to a ucp_peer child and sends it this worker's address (it then
 * connects back): the endpoint's status; what the peer said in *hello. */
ucs_status_t
connect_peer(ucp_entity &e, child &peer, ucp_ep_h *ep_p,
             peer_hello *hello                = nullptr,
             ucp_err_handling_mode_t err_mode = UCP_ERR_HANDLING_MODE_NONE)
{
    peer_hello h;

    h.address           = recv_msg(peer.from_fd());
    h.packed_rkey       = recv_msg(peer.from_fd());
    h.raddr             = msg_u64(recv_msg(peer.from_fd()));
    ucs_status_t status = e.connect(h.address, ep_p, err_mode);
    if (status == UCS_OK) {
        send_msg(peer.to_fd(), e.address());
    }
    if (hello != nullptr) {
        *hello = h;
    }
    return status;
}

/* Fixture: this process and a ucp_peer child, connected both ways. */
class ucp_pair : public testing::Test {
protected:
    /* peer_env: set for the peer child only (this process keeps its own). */
    void start(bool wakeup = false, const env_vars &peer_env = env_vars())
    {
        m_wakeup = wakeup;
        m_peer.reset(new child("ucp_peer",
                               wakeup ? std::vector<std::string>{ "wakeup" } :
                                        std::vector<std::string>{},
                               peer_env));
        m_e.reset(new ucp_entity(all_features, wakeup));
        ASSERT_TRUE(m_e->ok());
        peer_hello hello;
        ASSERT_EQ(UCS_OK, connect_peer(*m_e, *m_peer, &m_ep, &hello));
        m_peer_addr   = hello.address;
        m_packed_rkey = hello.packed_rkey;
        m_raddr       = hello.raddr;
        ASSERT_EQ(UCS_OK,
                  ucp_ep_rkey_unpack(m_ep, m_packed_rkey.data(), &m_rkey));
    }

    void TearDown() override
    {
        if (m_peer) {
            send_msg(m_peer->to_fd(), u64s_msg({ CMD_QUIT }));
        }
        if (m_rkey != nullptr) {
            ucp_rkey_destroy(m_rkey);
        }
        if (m_ep != nullptr) {
            m_e->disconnect(m_ep, true);
        }
        if (m_peer) {
            EXPECT_EQ(0, m_peer->wait(30));
        }
        m_e.reset();
    }

    /* A command to the peer; returns its answer (progressing meanwhile,
     * since the peer may need this side to progress). */
    uint64_t command(const std::vector<uint64_t> &cmd, double timeout = 60)
    {
        send_msg(m_peer->to_fd(), u64s_msg(cmd));
        struct pollfd pfd = { m_peer->from_fd(), POLLIN, 0 };
        double deadline   = now_sec() + timeout;
        while (poll(&pfd, 1, 0) == 0) {
            m_e->progress();
            if (now_sec() > deadline) {
                ADD_FAILURE() << "peer did not answer command " << cmd[0];
                return ~0ull;
            }
        }
        return msg_u64(recv_msg(m_peer->from_fd()));
    }

    /* Wait for requests: busy progress, or in wakeup mode through the
     * worker's event fd (poll with a timeout). */
    bool wait_reqs(req_set &rs, double timeout = 60)
    {
        if (!m_wakeup) {
            return m_e->wait_for([&] { return rs.done(); }, timeout);
        }
        int efd;
        EXPECT_EQ(UCS_OK, ucp_worker_get_efd(m_e->worker(), &efd));
        double deadline = now_sec() + timeout;
        while (!rs.done()) {
            if (now_sec() > deadline) {
                return false;
            }
            if (m_e->progress() != 0) {
                continue;
            }
            ucs_status_t status = ucp_worker_arm(m_e->worker());
            if (status == UCS_ERR_BUSY) {
                continue;
            }
            EXPECT_EQ(UCS_OK, status);
            struct pollfd pfd = { efd, POLLIN, 0 };
            int ms            = (int)((deadline - now_sec()) * 1000);
            if (poll(&pfd, 1, ms > 0 ? ms : 0) > 0) {
                ++m_wakeups;
            }
        }
        return true;
    }

    void tag_echo(const std::vector<size_t> &sizes)
    {
        std::vector<uint64_t> cmd = { CMD_TAG_ECHO };
        std::vector<std::vector<char>> out(sizes.size()), in(sizes.size());
        req_set rs;

        cmd.insert(cmd.end(), sizes.begin(), sizes.end());
        send_msg(m_peer->to_fd(), u64s_msg(cmd));
        for (size_t i = 0; i < sizes.size(); ++i) {
            out[i].resize(sizes[i]);
            in[i].assign(sizes[i], 0);
            fill_data(out[i].data(), sizes[i], i);
            rs.add(tag_send(m_ep, out[i].data(), sizes[i], 100 + i));
            rs.add(tag_recv(m_e->worker(), in[i].data(), sizes[i], 2000 + i));
        }
        ASSERT_TRUE(wait_reqs(rs)) << "tag echo timed out";
        ASSERT_EQ(UCS_OK, rs.finish());
        for (size_t i = 0; i < sizes.size(); ++i) {
            EXPECT_EQ(-1, check_data(in[i].data(), sizes[i], 1000 + i))
                    << "echo of " << sizes[i] << " B";
        }
        struct pollfd pfd = { m_peer->from_fd(), POLLIN, 0 };
        ASSERT_TRUE(m_e->wait_for([&] { return poll(&pfd, 1, 0) > 0; }, 30));
        EXPECT_EQ(0u, msg_u64(recv_msg(m_peer->from_fd())))
                << "messages the peer found wrong";
    }

    std::unique_ptr<child> m_peer;
    std::vector<char> m_peer_addr, m_packed_rkey;
    std::unique_ptr<ucp_entity> m_e;
    ucp_ep_h m_ep     = nullptr;
    ucp_rkey_h m_rkey = nullptr;
    uint64_t m_raddr  = 0;
    bool m_wakeup     = false;
    int m_wakeups     = 0; /* event fd signals seen */
};

TEST_F(ucp_pair, transport_is_dcx)
{
    ASSERT_NO_FATAL_FAILURE(start());
    std::string info = ucp_entity::ep_info(m_ep);
    EXPECT_NE(std::string::npos, info.find(std::string("dcx/") + emu_dev_name))
            << info;
    /* No lane of another transport (UCX_TLS=dcx). */
    EXPECT_EQ(std::string::npos, info.find("self/")) << info;
    EXPECT_EQ(std::string::npos, info.find("tcp/")) << info;
}

TEST_F(ucp_pair, tag_eager_and_rndv_get_zcopy)
{
    scoped_env env(env_vars{ { "UCX_RNDV_SCHEME", "get_zcopy" },
                             { "UCX_RNDV_THRESH", "8k" } });
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_NO_FATAL_FAILURE(tag_echo(tag_sizes));
    /* again, with registrations cached */
    ASSERT_NO_FATAL_FAILURE(tag_echo(tag_sizes));
}

TEST_F(ucp_pair, tag_eager_and_rndv_put_zcopy)
{
    scoped_env env(env_vars{ { "UCX_RNDV_SCHEME", "put_zcopy" },
                             { "UCX_RNDV_THRESH", "8k" } });
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_NO_FATAL_FAILURE(tag_echo(tag_sizes));
}

TEST_F(ucp_pair, tag_many_small_unexpected)
{
    ASSERT_NO_FATAL_FAILURE(start());
    std::vector<size_t> sizes(300);
    for (size_t i = 0; i < sizes.size(); ++i) {
        sizes[i] = 1 + (i * 37) % 3000;
    }
    ASSERT_NO_FATAL_FAILURE(tag_echo(sizes));
}

TEST_F(ucp_pair, stream)
{
    ASSERT_NO_FATAL_FAILURE(start());
    const size_t total = (1 << 20) + 123;
    std::vector<char> out(total), in(total, 0);
    fill_data(out.data(), total, 77);
    send_msg(m_peer->to_fd(), u64s_msg({ CMD_STREAM_ECHO, total, 77 }));

    req_set rs;
    size_t chunks[] = { 1, 100, 5000, 70000, 300000 };
    size_t off      = 0;
    for (size_t c = 0; off < total; ++c) {
        size_t len            = std::min(chunks[c % 5], total - off);
        ucp_request_param_t p = {};
        rs.add(ucp_stream_send_nbx(m_ep, out.data() + off, len, &p));
        off += len;
    }
    size_t got            = 0;
    ucp_request_param_t p = {};
    p.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags               = UCP_STREAM_RECV_FLAG_WAITALL;
    ucs_status_ptr_t r = ucp_stream_recv_nbx(m_ep, in.data(), total, &got, &p);
    rs.add(r);
    ASSERT_TRUE(wait_reqs(rs)) << "stream timed out";
    if (UCS_PTR_IS_PTR(r) && (r != NULL)) {
        ucp_stream_recv_request_test(r, &got);
    }
    ASSERT_EQ(UCS_OK, rs.finish());
    EXPECT_EQ(total, got);
    EXPECT_EQ(-1, check_data(in.data(), total, 78));
    struct pollfd pfd = { m_peer->from_fd(), POLLIN, 0 };
    ASSERT_TRUE(m_e->wait_for([&] { return poll(&pfd, 1, 0) > 0; }, 30));
    EXPECT_EQ(0u, msg_u64(recv_msg(m_peer->from_fd())));
}

static void am_send_all(ucp_ep_h ep, req_set &rs,
                        std::vector<std::vector<char>> &bufs,
                        std::vector<std::vector<uint64_t>> &hdrs,
                        const std::vector<size_t> &sizes)
{
    bufs.resize(sizes.size());
    hdrs.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
        bufs[i].resize(sizes[i]);
        fill_data(bufs[i].data(), sizes[i], 500 + i);
        hdrs[i]               = { 500 + i, sizes[i] };
        ucp_request_param_t p = {};
        rs.add(ucp_am_send_nbx(ep, am_id, hdrs[i].data(), 16, bufs[i].data(),
                               sizes[i], &p));
    }
}

TEST_F(ucp_pair, am_eager_and_rndv)
{
    scoped_env env(env_vars{ { "UCX_RNDV_THRESH", "16k" } });
    ASSERT_NO_FATAL_FAILURE(start());
    std::vector<size_t> sizes = { 0,     1,     64,      3000,    8000,
                                  16000, 40000, 1 << 20, 3 << 20, 17 };
    std::vector<std::vector<char>> bufs;
    std::vector<std::vector<uint64_t>> hdrs;
    req_set rs;
    am_send_all(m_ep, rs, bufs, hdrs, sizes);
    ASSERT_TRUE(wait_reqs(rs)) << "am sends timed out";
    ASSERT_EQ(UCS_OK, rs.finish());
    EXPECT_EQ(0u, command({ CMD_AM_COUNT, sizes.size() }));
}

TEST_F(ucp_pair, rma_put_get)
{
    ASSERT_NO_FATAL_FAILURE(start());
    const size_t len = region_size;
    std::vector<char> buf(len);
    req_set rs;
    ucp_request_param_t p = {};

    /* Large put of the whole region, then small ones on top. */
    fill_data(buf.data(), len, 31);
    rs.add(ucp_put_nbx(m_ep, buf.data(), len, m_raddr, m_rkey, &p));
    ASSERT_TRUE(wait_reqs(rs));
    ASSERT_EQ(UCS_OK, rs.finish());
    ASSERT_EQ(UCS_OK, m_e->wait(ucp_ep_flush_nbx(m_ep, &p)));
    EXPECT_EQ(0u, command({ CMD_CHECK_REGION, 31, len, 0 }));

    std::vector<std::vector<char>> small(20);
    for (size_t i = 0; i < small.size(); ++i) {
        small[i].resize(1 + i * 97);
        fill_data(small[i].data(), small[i].size(), 40 + i);
        rs.add(ucp_put_nbx(m_ep, small[i].data(), small[i].size(),
                           m_raddr + i * 4096, m_rkey, &p));
    }
    ASSERT_EQ(UCS_OK, m_e->wait(ucp_ep_flush_nbx(m_ep, &p)));
    ASSERT_TRUE(wait_reqs(rs));
    ASSERT_EQ(UCS_OK, rs.finish());
    for (size_t i = 0; i < small.size(); ++i) {
        EXPECT_EQ(0u, command({ CMD_CHECK_REGION, 40 + i, small[i].size(),
                                i * 4096 }));
    }

    /* The peer fills its region; read it with gets of several sizes. */
    EXPECT_EQ(0u, command({ CMD_FILL_REGION, 90, len, 0 }));
    std::vector<char> in(len, 0);
    rs.add(ucp_get_nbx(m_ep, in.data(), len, m_raddr, m_rkey, &p));
    ASSERT_TRUE(wait_reqs(rs));
    ASSERT_EQ(UCS_OK, rs.finish());
    EXPECT_EQ(-1, check_data(in.data(), len, 90));

    EXPECT_EQ(0u, command({ CMD_FILL_REGION, 91, 100000, 12345 }));
    std::vector<char> part(100000, 0);
    for (size_t off = 0; off < part.size(); off += 10000) {
        rs.add(ucp_get_nbx(m_ep, part.data() + off, 10000,
                           m_raddr + 12345 + off, m_rkey, &p));
    }
    ASSERT_EQ(UCS_OK, m_e->wait(ucp_ep_flush_nbx(m_ep, &p)));
    ASSERT_TRUE(wait_reqs(rs));
    ASSERT_EQ(UCS_OK, rs.finish());
    EXPECT_EQ(-1, check_data(part.data(), part.size(), 91));
}

/* 64-bit atomics in device mode (UCX_ATOMIC_MODE=device), from this
 * process and two other processes at once on the peer's words: every
 * fetched value is unique and the totals are exact. */
TEST_F(ucp_pair, atomics_device_mode_under_contention)
{
    scoped_env env(env_vars{ { "UCX_ATOMIC_MODE", "device" } });
    ASSERT_NO_FATAL_FAILURE(start());
    const uint64_t count = 1000;
    const int nclients   = 2;

    std::string info = ucp_entity::ep_info(m_ep);
    EXPECT_NE(std::string::npos, info.find(" amo#"))
            << "no device atomic lane: " << info;
    EXPECT_NE(std::string::npos, info.find(std::string("dcx/") + emu_dev_name))
            << info;

    std::vector<std::unique_ptr<child>> clients;
    for (int i = 0; i < nclients; ++i) {
        clients.emplace_back(new child("amo_client"));
        send_msg(clients[i]->to_fd(), m_peer_addr);
        send_msg(clients[i]->to_fd(), m_packed_rkey);
        send_msg(clients[i]->to_fd(), u64_msg(m_raddr));
        EXPECT_EQ(1u, msg_u64(recv_msg(clients[i]->from_fd())))
                << "client's endpoint has no atomic lane";
    }
    for (auto &c : clients) {
        send_msg(c->to_fd(), u64_msg(count));
    }

    /* This process contends too: fetch-add, then compare-swap increments. */
    std::vector<uint64_t> mine;
    ASSERT_EQ(UCS_OK, contend(*m_e, m_ep, m_raddr, m_rkey, count, mine));
    std::multiset<uint64_t> fetched(mine.begin(), mine.end());

    for (auto &c : clients) {
        struct pollfd pfd = { c->from_fd(), POLLIN, 0 };
        ASSERT_TRUE(m_e->wait_for([&] { return poll(&pfd, 1, 0) > 0; }, 120));
        for (uint64_t v : msg_u64s(recv_msg(c->from_fd()))) {
            fetched.insert(v);
        }
        send_msg(c->to_fd(), u64_msg(0));
        EXPECT_EQ(0, c->wait(30));
    }

    const uint64_t total = count * (nclients + 1);
    EXPECT_EQ(total, fetched.size());
    EXPECT_EQ(total, std::set<uint64_t>(fetched.begin(), fetched.end()).size())
            << "a fetched value was returned twice (lost atomicity)";
    EXPECT_EQ(0u, *fetched.begin());
    EXPECT_EQ(total - 1, *fetched.rbegin());
    EXPECT_EQ(total, command({ CMD_READ_U64, 0 }));
    EXPECT_EQ(total, command({ CMD_READ_U64, 8 }));

    /* Swap, and the other 64-bit operations UCP offers, checked by value. */
    const uint64_t mask = 0xff00ff00ff00ff00ull;
    uint64_t result     = 0;
    ASSERT_EQ(UCS_OK,
              atomic64(*m_e, m_ep, UCP_ATOMIC_OP_SWAP, 0x1234567890abcdefull,
                       &result, m_raddr, m_rkey));
    EXPECT_EQ(total, result);
    ASSERT_EQ(UCS_OK, atomic64(*m_e, m_ep, UCP_ATOMIC_OP_AND, mask, &result,
                               m_raddr, m_rkey));
    EXPECT_EQ(0x1234567890abcdefull, result);
    ASSERT_EQ(UCS_OK, atomic64(*m_e, m_ep, UCP_ATOMIC_OP_XOR, 0x11, &result,
                               m_raddr, m_rkey));
    EXPECT_EQ(0x1234567890abcdefull & mask, result);
    ucp_request_param_t np = {};
    np.op_attr_mask        = UCP_OP_ATTR_FIELD_DATATYPE;
    np.datatype            = ucp_dt_make_contig(8);
    uint64_t orbits        = 0x3;
    ASSERT_EQ(UCS_OK,
              m_e->wait(ucp_atomic_op_nbx(m_ep, UCP_ATOMIC_OP_OR, &orbits, 1,
                                          m_raddr, m_rkey, &np)));
    ASSERT_EQ(UCS_OK, m_e->wait(ucp_ep_flush_nbx(m_ep, &np)));
    EXPECT_EQ(((0x1234567890abcdefull & mask) ^ 0x11) | 0x3,
              command({ CMD_READ_U64, 0 }));
}

/* A peer and a client on devices without atomics (DCXEMU_ATOMIC_CAP=none,
 * read once per process, hence children): their dcx interfaces open but
 * offer no device atomics, so UCP emulates atomics over active messages;
 * every fetched value is unique and the totals are exact. (UCP picks an
 * atomic lane from the target's capabilities only, so both sides are.) */
TEST_F(ucp_pair, atomics_emulated_on_device_without_atomics)
{
    ASSERT_NO_FATAL_FAILURE(
            start(false, env_vars{ { "DCXEMU_ATOMIC_CAP", "none" } }));
    const uint64_t count = 200;
    std::unique_ptr<child> client;
    {
        scoped_env env(env_vars{ { "DCXEMU_ATOMIC_CAP", "none" } });
        client.reset(new child("amo_client"));
    }
    send_msg(client->to_fd(), m_peer_addr);
    send_msg(client->to_fd(), m_packed_rkey);
    send_msg(client->to_fd(), u64_msg(m_raddr));
    std::vector<char> lane = recv_msg(client->from_fd());
    ASSERT_FALSE(lane.empty())
            << "the client has no endpoint: exit " << client->wait(5);
    EXPECT_EQ(0u, msg_u64(lane)) << "a device atomic lane without atomics";
    send_msg(client->to_fd(), u64_msg(count));

    struct pollfd pfd = { client->from_fd(), POLLIN, 0 };
    ASSERT_TRUE(m_e->wait_for([&] { return poll(&pfd, 1, 0) > 0; }, 120));
    std::vector<uint64_t> fetched = msg_u64s(recv_msg(client->from_fd()));
    send_msg(client->to_fd(), u64_msg(0));
    EXPECT_EQ(0, client->wait(30));

    ASSERT_EQ(count, fetched.size());
    std::sort(fetched.begin(), fetched.end());
    for (uint64_t i = 0; i < count; ++i) {
        EXPECT_EQ(i, fetched[i]);
    }
    EXPECT_EQ(count, command({ CMD_READ_U64, 0 }));
    EXPECT_EQ(count, command({ CMD_READ_U64, 8 }));
}

/* Wakeup mode: both sides sleep instead of polling (the peer in
 * ucp_worker_wait, this process in poll() on the worker's event fd). */
TEST_F(ucp_pair, wakeup_mode)
{
    scoped_env env(env_vars{ { "UCX_RNDV_THRESH", "8k" } });
    ASSERT_NO_FATAL_FAILURE(start(true));
    ASSERT_NO_FATAL_FAILURE(tag_echo({ 1, 100, 5000, 100000, 1 << 20 }));

    /* Deterministic sleep: arm the idle worker with a receive posted, only
     * then ask the peer to send; the event fd must signal. */
    int efd;
    ASSERT_EQ(UCS_OK, ucp_worker_get_efd(m_e->worker(), &efd));
    for (size_t len : { 64, 200000 }) {
        std::vector<char> in(len, 0);
        req_set rs;
        rs.add(tag_recv(m_e->worker(), in.data(), len, 3000));
        ucs_status_t status;
        double deadline = now_sec() + 10;
        do {
            while (m_e->progress() != 0) {
            }
            status = ucp_worker_arm(m_e->worker());
        } while ((status == UCS_ERR_BUSY) && (now_sec() < deadline));
        ASSERT_EQ(UCS_OK, status);
        send_msg(m_peer->to_fd(), u64s_msg({ CMD_TAG_SEND, len, 600 + len }));
        struct pollfd pfd = { efd, POLLIN, 0 };
        ASSERT_EQ(1, poll(&pfd, 1, 10000))
                << "no wakeup on the event fd for a " << len << " B message";
        ASSERT_TRUE(wait_reqs(rs)) << "receive after the wakeup timed out";
        ASSERT_EQ(UCS_OK, rs.finish());
        EXPECT_EQ(-1, check_data(in.data(), len, 600 + len));
        struct pollfd cfd = { m_peer->from_fd(), POLLIN, 0 };
        ASSERT_TRUE(m_e->wait_for([&] { return poll(&cfd, 1, 0) > 0; }, 30));
        EXPECT_EQ(0u, msg_u64(recv_msg(m_peer->from_fd())));
    }

    std::vector<std::vector<char>> bufs;
    std::vector<std::vector<uint64_t>> hdrs;
    req_set rs;
    am_send_all(m_ep, rs, bufs, hdrs, { 10, 20000, 300000 });
    ASSERT_TRUE(wait_reqs(rs));
    ASSERT_EQ(UCS_OK, rs.finish());
    EXPECT_EQ(0u, command({ CMD_AM_COUNT, 3 }));
}

/* A peer that is killed. */
class ucp_peer_failure : public testing::Test {
protected:
    scoped_env m_env{ { { "UCX_DCX_TIMEOUT", "10ms" },
                        { "UCX_DCX_RETRY_COUNT", "2" },
                        { "DCXEMU_TIME_SCALE", "0.01" } } };
};

/* With UCP_ERR_HANDLING_MODE_PEER, a killed peer must be reported to the
 * endpoint's error handler, and operations on it must fail, not hang. */
TEST_F(ucp_peer_failure, killed_peer_reported)
{
    child victim("ucp_peer");
    ucp_entity e(all_features);
    ASSERT_TRUE(e.ok());
    ucp_ep_h ep = nullptr;
    ASSERT_EQ(UCS_OK, connect_peer(e, victim, &ep, nullptr,
                                   UCP_ERR_HANDLING_MODE_PEER));

    victim.kill();
    std::vector<char> buf(100000, 1);
    req_set rs;
    for (int i = 0; i < 10; ++i) {
        rs.add(tag_send(ep, buf.data(), buf.size(), 7));
    }
    EXPECT_TRUE(e.wait_for([&] { return e.failures() > 0; }, 30))
            << "the error handler was not called";
    EXPECT_TRUE(e.wait_for([&] { return rs.done(); }, 30))
            << "sends to the dead peer did not complete";
    EXPECT_NE(UCS_OK, rs.finish());
    e.disconnect(ep, true);
}

/* Keepalive: a peer that dies while nothing is sent to it is found by
 * UCP's keepalive over dcx and reported to the error handler. */
TEST_F(ucp_peer_failure, idle_peer_found_by_keepalive)
{
    scoped_env ka(env_vars{ { "UCX_KEEPALIVE_INTERVAL", "50ms" } });
    child victim("ucp_peer");
    ucp_entity e(all_features);
    ASSERT_TRUE(e.ok());
    ucp_ep_h ep = nullptr;
    ASSERT_EQ(UCS_OK, connect_peer(e, victim, &ep, nullptr,
                                   UCP_ERR_HANDLING_MODE_PEER));

    /* One exchange so the endpoint is fully wired up, then silence. */
    std::vector<char> buf(64, 1);
    req_set rs;
    rs.add(tag_send(ep, buf.data(), buf.size(), 7));
    ASSERT_TRUE(e.wait_for([&] { return rs.done(); }, 30));
    ASSERT_EQ(UCS_OK, rs.finish());

    victim.kill();
    EXPECT_TRUE(e.wait_for([&] { return e.failures() > 0; }, 30))
            << "keepalive did not report the dead idle peer";
    e.disconnect(ep, true);
}

/* Without error handling (what works today): operations on a killed
 * peer's endpoint complete with an error instead of hanging, the process
 * survives, and it keeps talking to a second peer, data verified. */
TEST_F(ucp_peer_failure, survivor_unaffected)
{
    std::unique_ptr<child> victim(new child("ucp_peer"));
    child survivor("ucp_peer");
    ucp_entity e(all_features);
    ASSERT_TRUE(e.ok());

    ucp_ep_h vep, sep;
    peer_hello vhello;
    ASSERT_EQ(UCS_OK, connect_peer(e, *victim, &vep, &vhello));
    uint64_t vaddr = vhello.raddr;
    ucp_rkey_h rkey;
    ASSERT_EQ(UCS_OK,
              ucp_ep_rkey_unpack(vep, vhello.packed_rkey.data(), &rkey));
    ASSERT_EQ(UCS_OK, connect_peer(e, survivor, &sep));

    auto echo = [&](child &c, ucp_ep_h ep, size_t len) {
        std::vector<char> out(len), in(len, 0);
        fill_data(out.data(), len, 0);
        send_msg(c.to_fd(), u64s_msg({ CMD_TAG_ECHO, len }));
        req_set rs;
        rs.add(tag_send(ep, out.data(), len, 100));
        rs.add(tag_recv(e.worker(), in.data(), len, 2000));
        EXPECT_TRUE(e.wait_for([&] { return rs.done(); }, 30));
        EXPECT_EQ(UCS_OK, rs.finish());
        EXPECT_EQ(-1, check_data(in.data(), len, 1000));
        struct pollfd pfd = { c.from_fd(), POLLIN, 0 };
        EXPECT_TRUE(e.wait_for([&] { return poll(&pfd, 1, 0) > 0; }, 30));
        EXPECT_EQ(0u, msg_u64(recv_msg(c.from_fd())));
    };

    echo(*victim, vep, 50000);
    echo(survivor, sep, 50000);
    victim->kill();
    victim.reset();

    /* A zero-copy put to the dead peer: completes with an error (the
     * transport retries time out: UCX_DCX_TIMEOUT=10ms, 2 retries). */
    std::vector<char> buf(100000, 1);
    req_set dead;
    ucp_request_param_t p = {};
    dead.add(ucp_put_nbx(vep, buf.data(), buf.size(), vaddr, rkey, &p));
    dead.add(ucp_ep_flush_nbx(vep, &p));
    ASSERT_TRUE(e.wait_for([&] { return dead.done(); }, 30))
            << "operations on the dead peer's endpoint hang";
    ucs_status_t status = dead.finish();
    EXPECT_NE(UCS_OK, status) << "a put to a dead peer succeeded";
    printf("put to the killed peer: %s\n", ucs_status_string(status));

    for (size_t len : { 8, 5000, 300000 }) {
        echo(survivor, sep, len);
    }
    ucp_rkey_destroy(rkey);
    e.disconnect(vep, true);
    send_msg(survivor.to_fd(), u64s_msg({ CMD_QUIT }));
    e.disconnect(sep, true);
    EXPECT_EQ(0, survivor.wait(30));
}

/* Many puts in flight (more than the send queue holds, so some wait in
 * dcx's pending queue), then a worker flush: it must complete and every
 * byte must have arrived. */
TEST_F(ucp_pair, rma_worker_flush_with_pending_ops)
{
    ASSERT_NO_FATAL_FAILURE(start());
    const size_t chunk = 16384, nops = region_size / chunk;
    std::vector<char> buf(region_size);
    req_set rs;
    ucp_request_param_t p = {};

    fill_data(buf.data(), buf.size(), 55);
    for (int round = 0; round < 4; ++round) {
        for (size_t i = 0; i < nops; ++i) {
            rs.add(ucp_put_nbx(m_ep, buf.data() + i * chunk, chunk,
                               m_raddr + i * chunk, m_rkey, &p));
        }
    }
    ucs_status_t status = m_e->wait(ucp_worker_flush_nbx(m_e->worker(), &p));
    ASSERT_EQ(UCS_OK, status) << ucs_status_string(status);
    EXPECT_TRUE(rs.done()) << "worker flush completed before the puts";
    ASSERT_TRUE(m_e->wait_for([&] { return rs.done(); }, 30));
    ASSERT_EQ(UCS_OK, rs.finish());
    EXPECT_EQ(0u, command({ CMD_CHECK_REGION, 55, region_size, 0 }));
}
