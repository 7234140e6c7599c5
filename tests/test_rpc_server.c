/* test_rpc_server.c - the RPC server's connections (issue 14, part 1):
 * sealed shm segments, serving children that hold only their own
 * connection, the busy answer, reaping without pidfd, idle and handshake
 * timeouts. Servers are the disco-rpc-server tool. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/rpc.h"
#include "disco/shm/segment.h"
#include "disco/transport.h"
#include "tests/rpc_util.h"
#include "tests/testutil.h"

/* A server on tu_kind(k) with extra args (rpc_util.h). */
static void start_on(server_t *sv, int k, const char *tag, const char *const *extra)
{
    start_on_kind(sv, "srv", k, tag, extra);
}

/* Sends a fake shm hello with fd attached on sock. */
static void fake_hello(int sock, int fd)
{
    struct {
        uint64_t magic;
        uint32_t version, refused;
    } hello = {0x4f4c484f43534944ULL, 1, 0};
    struct iovec iov = {.iov_base = &hello, .iov_len = sizeof hello};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ck_assert_int_eq(sendmsg(sock, &m, MSG_NOSIGNAL), (ssize_t)sizeof hello);
}

/* An shm server that hands over an unsealed memfd (which it could shrink
 * under the client: SIGBUS), or a sealed one shorter than a transport, is
 * refused before the client maps it. */
START_TEST(test_shm_unsealed_refused)
{
    char path[108];
    snprintf(path, sizeof path, "/tmp/disco-test-srv-seal-%d.sock", (int)getpid());
    unlink(path);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(ls, 4), 0);
    char addr[128];
    snprintf(addr, sizeof addr, "shm:%s", path);
    for (int round = 0; round < 2; round++) {
        disco_segment_t seg;
        CK_OK(disco_segment_create("fake", round == 0 ? 4u << 20 : 4096, &seg));
        if (round == 1)
            ck_assert_int_eq(fcntl(seg.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                             0);
        pid_t pid = fork();
        if (pid == 0) {
            int c = accept(ls, NULL, NULL);
            fake_hello(c, seg.fd);
            char x;
            (void)!read(c, &x, 1); /* until the client leaves */
            _exit(0);
        }
        disco_transport_t *t;
        CK_STATUS(disco_transport_connect(addr, disco_now_ns() + 10000000000LL, &t),
                  DISCO_E_BAD_MAGIC);
        CK_HAS(round == 0 ? "not sealed" : "too small");
        waitpid(pid, NULL, 0);
        disco_segment_close(&seg);
    }
    close(ls);
    unlink(path);
}
END_TEST

/* The segment a real shm server hands over is sealed: the client cannot
 * shrink it (which would SIGBUS the server) nor grow it. */
START_TEST(test_shm_segment_sealed)
{
    char addr[128];
    snprintf(addr, sizeof addr, "shm:/tmp/disco-test-srv-sealed-%d.sock", (int)getpid());
    disco_listener_t *l;
    CK_OK(disco_listener_open(addr, &l));
    pid_t pid = fork();
    if (pid == 0) {
        disco_transport_t *t;
        if (disco_listener_accept(l, disco_now_ns() + 10000000000LL, &t) != DISCO_OK)
            _exit(1);
        char c;
        disco_transport_recv(t, &c, 1, disco_now_ns() + 10000000000LL);
        _exit(0);
    }
    disco_transport_t *t;
    CK_OK(disco_transport_connect(addr, disco_now_ns() + 10000000000LL, &t));
    char peer[64]; /* what the server logs names the peer */
    ck_assert_ptr_nonnull(strstr(disco_transport_peer(t, peer, sizeof peer), "shm uid "));
    int fds[4];
    int n = disco_transport_fds(t, fds);
    ck_assert_int_eq(n, 2);
    int seg = fds[1];
    ck_assert_int_ne(fcntl(seg, F_GET_SEALS) & F_SEAL_SHRINK, 0);
    ck_assert_int_eq(ftruncate(seg, 4096), -1);
    ck_assert_int_eq(errno, EPERM);
    struct stat sb;
    ck_assert_int_eq(fstat(seg, &sb), 0);
    ck_assert_int_eq(ftruncate(seg, sb.st_size * 2), -1);
    char c = 'x';
    CK_OK(disco_transport_send(t, &c, 1, disco_now_ns() + 10000000000LL));
    disco_transport_close(t);
    waitpid(pid, NULL, 0);
    disco_listener_close(l);
}
END_TEST

/* Connection A's serving child exits while B's lives: A's client sees the
 * connection closed at once, not a hang until its deadline (B's child no
 * longer holds A's socket). */
START_TEST(test_child_holds_only_its_connection)
{
    server_t sv;
    start_on(&sv, _i, "c", NULL);
    disco_rpc_t *a, *b;
    CK_OK(disco_rpc_connect(sv.address, 8000, &a));
    CK_OK(disco_rpc_connect(sv.address, 8000, &b));
    disco_rpc_handle_t ex, echo;
    CK_OK(disco_rpc_get_func(a, "test.exit", &ex));
    CK_OK(disco_rpc_get_func(b, "disco.echo", &echo));
    disco_value_t args[2] = {disco_value_int(0), disco_value_int(0)}, r;
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_rpc_call(a, ex, args, 2, &r), DISCO_E_CLOSED);
    ck_assert_msg(tu_ms_since(t0) < 4000, "EOF after %.0f ms", tu_ms_since(t0));
    disco_value_t one = disco_value_int(1);
    CK_OK(disco_rpc_call(b, echo, &one, 1, &r)); /* B is untouched */
    ck_assert_int_eq(r.v.i, 1);
    disco_rpc_close(a);
    disco_rpc_close(b);
    stop_server(&sv);
}
END_TEST

/* With every slot taken a new client gets DISCO_E_BUSY, clearly; once a
 * slot frees, the next client is served. */
START_TEST(test_busy)
{
    const char *extra[] = {"--max-clients", "1", NULL};
    server_t sv;
    start_on(&sv, _i, "b", extra);
    disco_rpc_t *a, *b;
    CK_OK(disco_rpc_connect(sv.address, 10000, &a));
    for (int i = 0; i < 3; i++) {
        CK_STATUS(disco_rpc_connect(sv.address, 10000, &b), DISCO_E_BUSY);
        CK_HAS("connection slots");
    }
    disco_rpc_close(a);
    /* the slot frees when the parent reaps the child: retry until then */
    int64_t t0 = disco_now_ns();
    disco_status_t st;
    while ((st = disco_rpc_connect(sv.address, 10000, &b)) == DISCO_E_BUSY &&
           tu_ms_since(t0) < 10000)
        sched_yield();
    CK_OK(st);
    disco_rpc_close(b);
    stop_server(&sv);
}
END_TEST

/* Children are reaped without pidfd_open (the test hook hides it): with one
 * slot, client after client is served. */
START_TEST(test_reap_without_pidfd)
{
    const char *extra[] = {"--max-clients", "1", NULL};
    char *env[] = {"DISCO_TEST_NO_PIDFD=1", NULL};
    server_t sv;
    char addr[128];
    snprintf(addr, sizeof addr, "unix:/tmp/disco-test-srv-np-%d.sock", (int)getpid());
    start_server_args(&sv, addr, extra, env);
    for (int i = 0; i < 4; i++) {
        int64_t t0 = disco_now_ns();
        disco_rpc_t *s;
        disco_status_t st;
        while ((st = disco_rpc_connect(sv.address, 10000, &s)) == DISCO_E_BUSY &&
               tu_ms_since(t0) < 10000)
            sched_yield();
        CK_OK(st);
        disco_rpc_close(s);
    }
    stop_server(&sv);
}
END_TEST

/* An idle connection is closed after the idle timeout, with a
 * session-timeout error that says so; a client that never authenticates is
 * dropped after the handshake timeout. */
START_TEST(test_idle_and_handshake_timeouts)
{
    const char *extra[] = {"--idle-timeout", "300", "--handshake-timeout", "300", NULL};
    server_t sv;
    start_on(&sv, _i, "i", extra);
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    CK_OK(disco_rpc_token_read(sv.token, tok));
    int64_t dl = disco_now_ns() + 10000000000LL;
    disco_transport_t *t;
    disco__rpc_buf_t b;
    CK_OK(disco__rpc_buf_init(&b));
    disco_frame_hdr_t h;
    disco_value_t v[4];
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    raw_handshake(t, &b, tok, dl);
    int64_t t0 = disco_now_ns();
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    double ms = tu_ms_since(t0);
    ck_assert_msg(ms >= 250 && ms < 8000, "idle close after %.0f ms", ms);
    ck_assert_int_eq(h.code, DISCO_RPC_EXCEPTION);
    ck_assert_int_eq(v[0].v.i, DISCO_E_SESSION_TIMEOUT);
    ck_assert_ptr_nonnull(strstr(v[1].v.str, "idle"));
    CK_STATUS(disco__rpc_recv(t, &b, &h, v, 4, dl), DISCO_E_CLOSED);
    disco_transport_close(t);
    CK_OK(disco_transport_connect(sv.address, dl, &t)); /* says nothing */
    t0 = disco_now_ns();
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(v[0].v.i, DISCO_E_AUTH);
    ck_assert_msg(tu_ms_since(t0) < 8000, "handshake timeout after %.0f ms", tu_ms_since(t0));
    disco_transport_close(t);
    disco__rpc_buf_free(&b);
    stop_server(&sv);
}
END_TEST

Suite *suite_rpc_server(void)
{
    Suite *s = suite_create("rpc_server");
    TCase *tc = tcase_create("rpc_server");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_shm_unsealed_refused);
    tcase_add_test(tc, test_shm_segment_sealed);
    tcase_add_loop_test(tc, test_child_holds_only_its_connection, 0, 2);
    tcase_add_loop_test(tc, test_busy, 0, 3);
    tcase_add_test(tc, test_reap_without_pidfd);
    tcase_add_loop_test(tc, test_idle_and_handshake_timeouts, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}
