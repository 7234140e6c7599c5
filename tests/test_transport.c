/* test_transport.c - the four transports (shm, unix, tcp, pipe) between forked
 * processes: content both ways at every size, deadlines, a peer that closes
 * or dies, addresses, socket modes, fd hygiene. Loop tests run once per kind
 * (_i indexes kinds[]). */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "disco/transport.h"
#include "tests/testutil.h"

#define MS  1000000LL
#define BIG (16u << 20)

enum { K_SHM, K_UNIX, K_TCP, K_PIPE, NKINDS };
static const char *const kinds[NKINDS] = {"shm", "unix", "tcp", "pipe"};

/* ---- helpers ---- */

static int64_t in_ms(int64_t ms)
{
    return disco_now_ns() + ms * MS;
}

/* A fresh socket path for this test process. */
static void sock_path(char *buf, size_t cap)
{
    static unsigned n;
    snprintf(buf, cap, "/tmp/disco-test-%d-%u.sock", (int)getpid(), n++);
}

/* A listening address of kind (not pipe). */
static void listen_address(int kind, char *buf, size_t cap)
{
    if (kind == K_TCP) {
        snprintf(buf, cap, "tcp:127.0.0.1:0");
        return;
    }
    char path[96];
    sock_path(path, sizeof path);
    snprintf(buf, cap, "%s:%s", kinds[kind], path);
}

/* In a child: fail with the call, its status and the error detail. */
#define CHILD_OK(call)                                                                             \
    do {                                                                                           \
        int ch_st_ = (call);                                                                       \
        if (ch_st_ != DISCO_OK)                                                                    \
            tu_child_fail("%s: %s (%s)", #call, disco_err_name(ch_st_), disco_last_error());       \
    } while (0)

/* Connects this test process with a forked child over kind: the parent
 * listens and accepts, the child connects (pipe: two pipes). Both return
 * with their end in *t_out; the result is the child's pid in the parent and
 * 0 in the child. */
static pid_t pair_fork(int kind, disco_transport_t **t_out)
{
    if (kind == K_PIPE) {
        int down[2], up[2];
        ck_assert_msg(pipe(down) == 0 && pipe(up) == 0, "pipe: %s", strerror(errno));
        pid_t pid = tu_fork();
        int in = pid == 0 ? down[0] : up[0], out = pid == 0 ? up[1] : down[1];
        close(pid == 0 ? down[1] : up[1]);
        close(pid == 0 ? up[0] : down[0]);
        disco_status_t st = disco_transport_from_fds(in, out, t_out);
        if (pid == 0 && st != DISCO_OK)
            tu_child_fail("disco_transport_from_fds: %s", disco_err_name(st));
        CK_OK(st);
        return pid;
    }
    char addr[128];
    listen_address(kind, addr, sizeof addr);
    disco_listener_t *l;
    CK_OK(disco_listener_open(addr, &l));
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_status_t st = disco_transport_connect(disco_listener_address(l), in_ms(5000), t_out);
        disco_listener_close(l); /* a child's close leaves the socket file */
        if (st != DISCO_OK)
            tu_child_fail("disco_transport_connect(%s): %s (%s)", addr, disco_err_name(st),
                          disco_last_error());
        return 0;
    }
    disco_status_t st = disco_listener_accept(l, in_ms(5000), t_out);
    disco_listener_close(l);
    if (st != DISCO_OK)
        tu_kill_all(&pid, 1);
    CK_OK(st);
    ck_assert_str_eq(disco_transport_kind(*t_out), kinds[kind]);
    return pid;
}

/* Byte i of pattern `seed`. */
static unsigned char pat(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u >> 11) ^ (i >> 20) ^ seed);
}

static void fill(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pat(i, seed);
}

/* Index of the first byte that is not pattern `seed`, or -1. */
static long mismatch(const unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pat(i, seed))
            return (long)i;
    return -1;
}

static const size_t sizes[] = {0, 1, 100, 64 * 1024 + 1, BIG};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* ---- round trips ---- */

/* The child's half of test_round_trip: gets [u64 n][n bytes of pattern 1]
 * (two sends), checks it, answers [u64 n][n bytes of pattern 2] in one
 * send. */
static void echo_child(disco_transport_t *t)
{
    unsigned char *buf = malloc(8 + BIG);
    if (buf == NULL)
        tu_child_fail("malloc");
    for (size_t k = 0; k < NSIZES; k++) {
        uint64_t n;
        CHILD_OK(disco_transport_recv(t, &n, 8, in_ms(10000)));
        if (n != sizes[k])
            tu_child_fail("size %llu, want %zu", (unsigned long long)n, sizes[k]);
        CHILD_OK(disco_transport_recv(t, buf, n, in_ms(10000)));
        long bad = mismatch(buf, n, 1);
        if (bad >= 0)
            tu_child_fail("request of %zu bytes: byte %ld differs", sizes[k], bad);
        memcpy(buf, &n, 8);
        fill(buf + 8, n, 2);
        CHILD_OK(disco_transport_send(t, buf, 8 + n, in_ms(10000)));
    }
    disco_transport_close(t);
    free(buf);
    _exit(0);
}

/* Requests of 0, 1, 100, 64 KiB + 1 and 16 MiB go one way and their answers
 * the other, byte-exact; headers read apart from a body sent with them. */
START_TEST(test_round_trip)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    if (pid == 0)
        echo_child(t);
    unsigned char *out = malloc(BIG), *in = malloc(BIG);
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(in);
    fill(out, BIG, 1);
    for (size_t k = 0; k < NSIZES; k++) {
        uint64_t n = sizes[k], m = 0;
        CK_OK(disco_transport_send(t, &n, 8, in_ms(10000)));
        CK_OK(disco_transport_send(t, out, n, in_ms(10000)));
        CK_OK(disco_transport_recv(t, &m, 8, in_ms(10000)));
        ck_assert_msg(m == n, "%s: answer header %llu, want %llu", kinds[_i], (unsigned long long)m,
                      (unsigned long long)n);
        CK_OK(disco_transport_recv(t, in, n, in_ms(10000)));
        long bad = mismatch(in, n, 2);
        ck_assert_msg(bad < 0, "%s: answer of %llu bytes: byte %ld differs", kinds[_i],
                      (unsigned long long)n, bad);
    }
    disco_transport_close(t);
    tu_wait_ok(pid, "echo child");
    free(out);
    free(in);
}
END_TEST

struct sender {
    disco_transport_t *t;
    const unsigned char *buf;
    disco_status_t st;
};

static void *send_thread(void *arg)
{
    struct sender *s = arg;
    s->st = disco_transport_send(s->t, s->buf, BIG, in_ms(20000));
    return NULL;
}

/* Both sides send 16 MiB at once, each from a second thread while its main
 * thread receives: the stream is full duplex (no deadlock on full buffers). */
START_TEST(test_full_duplex)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    unsigned char *out = malloc(BIG), *in = malloc(BIG);
    if (out == NULL || in == NULL)
        ck_abort_msg("malloc");
    fill(out, BIG, pid == 0 ? 3 : 4);
    struct sender s = {t, out, DISCO_E_INVAL};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, send_thread, &s), 0);
    disco_status_t st = disco_transport_recv(t, in, BIG, in_ms(20000));
    pthread_join(th, NULL);
    long bad = st == DISCO_OK ? mismatch(in, BIG, pid == 0 ? 4 : 3) : -1;
    if (pid == 0) {
        if (st != DISCO_OK || s.st != DISCO_OK || bad >= 0)
            tu_child_fail("recv %s, send %s, byte %ld", disco_err_name(st), disco_err_name(s.st),
                          bad);
        disco_transport_close(t);
        _exit(0);
    }
    CK_OK(st);
    CK_OK(s.st);
    ck_assert_msg(bad < 0, "%s: byte %ld differs", kinds[_i], bad);
    disco_transport_close(t);
    tu_wait_ok(pid, "duplex child");
    free(out);
    free(in);
}
END_TEST

/* ---- deadlines ---- */

/* A recv with nothing coming ends with DISCO_E_TIMEOUT at its deadline (not
 * before, and within 1 s after), idle (under 50 ms of CPU for a 300 ms
 * wait), and the transport still works afterwards. */
START_TEST(test_recv_timeout)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    char c;
    if (pid == 0) { /* quiet until asked, then answer */
        CHILD_OK(disco_transport_recv(t, &c, 1, in_ms(10000)));
        CHILD_OK(disco_transport_send(t, &c, 1, in_ms(10000)));
        disco_transport_close(t);
        _exit(0);
    }
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    int64_t t0 = disco_now_ns(), deadline = t0 + 300 * MS;
    CK_STATUS(disco_transport_recv(t, &c, 1, deadline), DISCO_E_TIMEOUT);
    int64_t t1 = disco_now_ns();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
    ck_assert_msg(t1 >= deadline, "%s: recv returned %.1f ms early", kinds[_i],
                  (double)(deadline - t1) / 1e6);
    ck_assert_msg(t1 < deadline + 1000 * MS, "%s: recv returned %.1f ms late", kinds[_i],
                  (double)(t1 - deadline) / 1e6);
    ck_assert_msg(cpu_ms < 50, "%s: a 300 ms idle wait used %.1f ms of CPU", kinds[_i], cpu_ms);
    c = 'x';
    CK_OK(disco_transport_send(t, &c, 1, in_ms(5000)));
    c = 0;
    CK_OK(disco_transport_recv(t, &c, 1, in_ms(5000)));
    ck_assert_int_eq(c, 'x');
    disco_transport_close(t);
    tu_wait_ok(pid, "quiet child");
}
END_TEST

/* A recv that times out after part of its bytes breaks the transport: later
 * calls return DISCO_E_BROKEN. */
START_TEST(test_partial_timeout_breaks)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    char buf[20] = {0};
    if (pid == 0) {
        CHILD_OK(disco_transport_send(t, buf, 10, in_ms(5000)));
        CHILD_OK(disco_transport_recv(t, buf, 1, in_ms(10000))); /* killed first */
        _exit(0);
    }
    CK_STATUS(disco_transport_recv(t, buf, 20, in_ms(200)), DISCO_E_TIMEOUT);
    CK_STATUS(disco_transport_recv(t, buf, 1, in_ms(200)), DISCO_E_BROKEN);
    CK_STATUS(disco_transport_send(t, buf, 1, in_ms(200)), DISCO_E_BROKEN);
    tu_kill_all(&pid, 1);
    disco_transport_close(t);
}
END_TEST

/* accept with no client ends with DISCO_E_TIMEOUT at its deadline (shm, unix,
 * tcp: _i indexes kinds[]). */
START_TEST(test_accept_timeout)
{
    char addr[128];
    listen_address(_i, addr, sizeof addr);
    disco_listener_t *l;
    CK_OK(disco_listener_open(addr, &l));
    disco_transport_t *t = (disco_transport_t *)&l; /* must stay untouched */
    int64_t deadline = in_ms(150);
    CK_STATUS(disco_listener_accept(l, deadline, &t), DISCO_E_TIMEOUT);
    int64_t t1 = disco_now_ns();
    ck_assert_msg(t1 >= deadline && t1 < deadline + 1000 * MS, "%s: accept returned %.1f ms off",
                  kinds[_i], (double)(t1 - deadline) / 1e6);
    ck_assert_ptr_eq(t, (disco_transport_t *)&l);
    disco_listener_close(l);
}
END_TEST

/* ---- a peer that leaves ---- */

/* A peer that sends 100 bytes and closes: the 100 bytes arrive, then recv
 * gives DISCO_E_CLOSED (promptly), and sends end in DISCO_E_CLOSED without
 * SIGPIPE killing us. */
START_TEST(test_peer_close)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    unsigned char buf[100];
    if (pid == 0) {
        fill(buf, sizeof buf, 5);
        CHILD_OK(disco_transport_send(t, buf, sizeof buf, in_ms(5000)));
        disco_transport_close(t);
        _exit(0);
    }
    tu_wait_ok(pid, "closing child");
    CK_OK(disco_transport_recv(t, buf, sizeof buf, in_ms(5000)));
    ck_assert_msg(mismatch(buf, sizeof buf, 5) < 0, "%s: data sent before close", kinds[_i]);
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_transport_recv(t, buf, 1, in_ms(5000)), DISCO_E_CLOSED);
    CK_STATUS(disco_transport_recv(t, buf, 1, in_ms(5000)), DISCO_E_CLOSED);
    ck_assert_msg(tu_ms_since(t0) < 2000, "%s: CLOSED took %.0f ms", kinds[_i], tu_ms_since(t0));
    /* tcp accepts one send before the peer's reset comes back */
    disco_status_t st = DISCO_OK;
    for (int i = 0; i < 100 && st == DISCO_OK; i++)
        st = disco_transport_send(t, buf, sizeof buf, in_ms(5000));
    CK_STATUS(st, DISCO_E_CLOSED);
    disco_transport_close(t);
}
END_TEST

/* A peer SIGKILLed after the first 1000 bytes of a 2000-byte message: recv
 * gives DISCO_E_TRUNCATED (or CLOSED) in under 2 s, then DISCO_E_BROKEN. */
START_TEST(test_peer_killed_mid_message)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    unsigned char buf[2000];
    if (pid == 0) {
        fill(buf, sizeof buf, 6);
        CHILD_OK(disco_transport_send(t, buf, 1000, in_ms(5000)));
        raise(SIGKILL);
    }
    int64_t t0 = disco_now_ns();
    disco_status_t st = disco_transport_recv(t, buf, sizeof buf, in_ms(10000));
    double ms = tu_ms_since(t0);
    ck_assert_msg(st == DISCO_E_TRUNCATED || st == DISCO_E_CLOSED,
                  "%s: disco_transport_recv: %s, want TRUNCATED (%s)", kinds[_i],
                  disco_err_name(st), disco_last_error());
    ck_assert_msg(ms < 2000, "%s: recv took %.0f ms", kinds[_i], ms);
    ck_assert_msg(mismatch(buf, 1000, 6) < 0, "%s: the first 1000 bytes", kinds[_i]);
    CK_STATUS(disco_transport_recv(t, buf, 1, in_ms(1000)), DISCO_E_BROKEN);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "child status %#x", ws);
    disco_transport_close(t);
}
END_TEST

/* A peer killed while it streams 64 MiB (blocked on full buffers): we read
 * what was buffered, then DISCO_E_TRUNCATED or CLOSED, in under 2 s. */
START_TEST(test_peer_killed_mid_stream)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    size_t chunk = 1u << 20;
    unsigned char *buf = malloc(chunk);
    if (buf == NULL)
        ck_abort_msg("malloc");
    if (pid == 0) {
        fill(buf, chunk, 7);
        for (int i = 0; i < 64; i++)
            CHILD_OK(disco_transport_send(t, buf, chunk, in_ms(10000)));
        _exit(0); /* not reached: 64 MiB outgrows every buffer */
    }
    CK_OK(disco_transport_recv(t, buf, 1000, in_ms(5000)));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int64_t t0 = disco_now_ns();
    size_t total = 1000;
    disco_status_t st;
    while ((st = disco_transport_recv(t, buf, chunk, in_ms(10000))) == DISCO_OK)
        total += chunk;
    ck_assert_msg(st == DISCO_E_TRUNCATED || st == DISCO_E_CLOSED,
                  "%s: disco_transport_recv: %s (%s)", kinds[_i], disco_err_name(st),
                  disco_last_error());
    ck_assert_msg(total < (64u << 20), "%s: the whole stream arrived", kinds[_i]);
    ck_assert_msg(tu_ms_since(t0) < 2000, "%s: took %.0f ms", kinds[_i], tu_ms_since(t0));
    disco_transport_close(t);
    free(buf);
}
END_TEST

/* Sending 16 MiB to a peer that died without reading ends in DISCO_E_CLOSED
 * in under 2 s, and SIGPIPE does not kill us. */
START_TEST(test_send_to_dead_peer)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    if (pid == 0)
        raise(SIGKILL);
    waitpid(pid, NULL, 0);
    unsigned char *buf = calloc(1, BIG);
    ck_assert_ptr_nonnull(buf);
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_transport_send(t, buf, BIG, in_ms(10000)), DISCO_E_CLOSED);
    ck_assert_msg(tu_ms_since(t0) < 2000, "%s: took %.0f ms", kinds[_i], tu_ms_since(t0));
    disco_transport_close(t);
    free(buf);
}
END_TEST

/* ---- addresses and listeners ---- */

/* Malformed addresses give DISCO_E_INVAL naming the address, for listen and
 * connect, and leave the output untouched. */
START_TEST(test_bad_addresses)
{
    char long_path[200] = "unix:/tmp/";
    memset(long_path + 10, 'x', sizeof long_path - 11);
    const char *bad[] = {"",
                         "bogus",
                         "udp:127.0.0.1:5",
                         "unix:",
                         "shm:",
                         "tcp:",
                         "tcp:127.0.0.1",
                         "tcp:127.0.0.1:",
                         "tcp:127.0.0.1:65536",
                         "tcp:127.0.0.1:12ab",
                         "tcp:::1:80",
                         long_path};
    void *sentinel = &sentinel;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        disco_listener_t *l = sentinel;
        disco_transport_t *t = sentinel;
        CK_STATUS(disco_listener_open(bad[i], &l), DISCO_E_INVAL);
        ck_assert_msg(strstr(disco_last_error(), bad[i]) != NULL, "listen(%s): detail \"%s\"",
                      bad[i], disco_last_error());
        CK_STATUS(disco_transport_connect(bad[i], in_ms(1000), &t), DISCO_E_INVAL);
        ck_assert_msg(strstr(disco_last_error(), bad[i]) != NULL, "connect(%s): detail \"%s\"",
                      bad[i], disco_last_error());
        ck_assert(l == sentinel && t == sentinel);
    }
    disco_transport_t *t = sentinel;
    disco_listener_t *l = sentinel;
    CK_STATUS(disco_listener_open(NULL, &l), DISCO_E_INVAL);
    CK_STATUS(disco_transport_connect("tcp:127.0.0.1:0", 0, &t), DISCO_E_INVAL);
    CK_STATUS(disco_transport_from_fds(-1, 1, &t), DISCO_E_INVAL);
    ck_assert(t == sentinel && l == sentinel);
}
END_TEST

/* Connecting where nobody listens gives DISCO_E_CLOSED naming the address
 * and errno's text (unix: no file; tcp: a bound but unlistened port). */
START_TEST(test_connect_refused)
{
    char path[96], addr[128];
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    disco_transport_t *t;
    CK_STATUS(disco_transport_connect(addr, in_ms(1000), &t), DISCO_E_CLOSED);
    ck_assert_msg(strstr(disco_last_error(), addr) && strstr(disco_last_error(), strerror(ENOENT)),
                  "detail \"%s\"", disco_last_error());
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    ck_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
    snprintf(addr, sizeof addr, "tcp:127.0.0.1:%u", ntohs(sa.sin_port));
    CK_STATUS(disco_transport_connect(addr, in_ms(1000), &t), DISCO_E_CLOSED);
    ck_assert_msg(strstr(disco_last_error(), addr) &&
                      strstr(disco_last_error(), strerror(ECONNREFUSED)),
                  "detail \"%s\"", disco_last_error());
    close(fd);
}
END_TEST

/* The rendezvous socket file (unix and shm) is mode 0600 whatever the umask,
 * and gone after the listener closes. */
START_TEST(test_socket_mode)
{
    umask(0);
    for (int k = K_SHM; k <= K_UNIX; k++) {
        char addr[128];
        listen_address(k, addr, sizeof addr);
        disco_listener_t *l;
        CK_OK(disco_listener_open(addr, &l));
        ck_assert_str_eq(disco_listener_address(l), addr);
        const char *path = strchr(addr, ':') + 1;
        struct stat sb;
        ck_assert_msg(stat(path, &sb) == 0, "stat(%s): %s", path, strerror(errno));
        ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 07777) == 0600, "%s: mode %o", path,
                      (unsigned)sb.st_mode);
        disco_listener_close(l);
        ck_assert_msg(stat(path, &sb) != 0 && errno == ENOENT, "%s still there", path);
    }
}
END_TEST

/* A socket file left by a crash is replaced; a live listener's is not. */
START_TEST(test_stale_socket)
{
    char path[96], addr[128];
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ck_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    close(fd); /* the file stays, nobody behind it */
    disco_listener_t *l, *l2;
    CK_OK(disco_listener_open(addr, &l));
    CK_STATUS(disco_listener_open(addr, &l2), DISCO_E_SYS);
    disco_listener_close(l);
}
END_TEST

/* A tcp listener with no host, "localhost" or 127.0.0.1 and port 0 is bound
 * to 127.0.0.1 on a real port, says so, and takes a connection. */
START_TEST(test_tcp_loopback)
{
    const char *addrs[] = {"tcp::0", "tcp:localhost:0", "tcp:127.0.0.1:0"};
    for (size_t i = 0; i < 3; i++) {
        disco_listener_t *l;
        CK_OK(disco_listener_open(addrs[i], &l));
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        ck_assert(getsockname(disco_listener_fd(l), (struct sockaddr *)&sa, &sl) == 0);
        ck_assert_msg(sa.sin_family == AF_INET && ntohl(sa.sin_addr.s_addr) == INADDR_LOOPBACK &&
                          ntohs(sa.sin_port) != 0,
                      "%s: bound to family %d %#x:%u", addrs[i], sa.sin_family,
                      ntohl(sa.sin_addr.s_addr), ntohs(sa.sin_port));
        char want[64];
        snprintf(want, sizeof want, "tcp:127.0.0.1:%u", ntohs(sa.sin_port));
        ck_assert_str_eq(disco_listener_address(l), want);
        disco_transport_t *c, *s;
        CK_OK(disco_transport_connect(want, in_ms(2000), &c));
        CK_OK(disco_listener_accept(l, in_ms(2000), &s));
        char b = 'q';
        CK_OK(disco_transport_send(c, &b, 1, in_ms(2000)));
        b = 0;
        CK_OK(disco_transport_recv(s, &b, 1, in_ms(2000)));
        ck_assert_int_eq(b, 'q');
        disco_transport_close(c);
        disco_transport_close(s);
        disco_listener_close(l);
    }
}
END_TEST

/* An shm client whose server answers with something else than the hello
 * (here a plain unix server writing junk) fails with DISCO_E_BAD_MAGIC; one
 * whose server closes gives DISCO_E_CLOSED. */
START_TEST(test_shm_bad_server)
{
    char path[96], uaddr[128], saddr[128];
    sock_path(path, sizeof path);
    snprintf(uaddr, sizeof uaddr, "unix:%s", path);
    snprintf(saddr, sizeof saddr, "shm:%s", path);
    disco_listener_t *l;
    CK_OK(disco_listener_open(uaddr, &l));
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_transport_t *t;
        disco_status_t st = disco_transport_connect(saddr, in_ms(5000), &t);
        if (st != DISCO_E_BAD_MAGIC)
            tu_child_fail("connect 1: %s (%s)", disco_err_name(st), disco_last_error());
        st = disco_transport_connect(saddr, in_ms(5000), &t);
        if (st != DISCO_E_CLOSED)
            tu_child_fail("connect 2: %s (%s)", disco_err_name(st), disco_last_error());
        _exit(0);
    }
    disco_transport_t *s;
    CK_OK(disco_listener_accept(l, in_ms(5000), &s));
    char junk[16] = "not a hello....";
    CK_OK(disco_transport_send(s, junk, sizeof junk, in_ms(5000)));
    disco_transport_close(s);
    CK_OK(disco_listener_accept(l, in_ms(5000), &s)); /* and close without a word */
    disco_transport_close(s);
    tu_wait_ok(pid, "shm client");
    disco_listener_close(l);
}
END_TEST

/* A connection set up, used and closed, and the failing paths (refused,
 * accept timeout), leave no fd behind in either process. */
START_TEST(test_no_fd_leaks)
{
    int before = tu_open_fds();
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    char b = 1;
    if (pid == 0) {
        CHILD_OK(disco_transport_recv(t, &b, 1, in_ms(5000)));
        CHILD_OK(disco_transport_send(t, &b, 1, in_ms(5000)));
        disco_transport_close(t);
        _exit(0);
    }
    CK_OK(disco_transport_send(t, &b, 1, in_ms(5000)));
    CK_OK(disco_transport_recv(t, &b, 1, in_ms(5000)));
    disco_transport_close(t);
    tu_wait_ok(pid, "child");
    if (_i != K_PIPE) {
        char addr[128];
        listen_address(_i, addr, sizeof addr);
        disco_listener_t *l;
        CK_OK(disco_listener_open(addr, &l));
        CK_STATUS(disco_listener_accept(l, in_ms(20), &t), DISCO_E_TIMEOUT);
        disco_listener_close(l);
        if (_i != K_TCP) /* the file is gone now: refused */
            CK_STATUS(disco_transport_connect(addr, in_ms(1000), &t), DISCO_E_CLOSED);
    }
    ck_assert_int_eq(tu_open_fds(), before);
}
END_TEST

Suite *suite_transport(void)
{
    Suite *s = suite_create("transport");
    TCase *tc = tcase_create("stream");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_round_trip, 0, NKINDS);
    tcase_add_loop_test(tc, test_full_duplex, 0, NKINDS);
    suite_add_tcase(s, tc);

    tc = tcase_create("deadlines");
    tcase_set_timeout(tc, 20);
    tcase_add_loop_test(tc, test_recv_timeout, 0, NKINDS);
    tcase_add_loop_test(tc, test_partial_timeout_breaks, 0, NKINDS);
    tcase_add_loop_test(tc, test_accept_timeout, 0, K_PIPE);
    suite_add_tcase(s, tc);

    tc = tcase_create("peer");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_peer_close, 0, NKINDS);
    tcase_add_loop_test(tc, test_peer_killed_mid_message, 0, NKINDS);
    tcase_add_loop_test(tc, test_peer_killed_mid_stream, 0, NKINDS);
    tcase_add_loop_test(tc, test_send_to_dead_peer, 0, NKINDS);
    suite_add_tcase(s, tc);

    tc = tcase_create("addresses");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_bad_addresses);
    tcase_add_test(tc, test_connect_refused);
    tcase_add_test(tc, test_socket_mode);
    tcase_add_test(tc, test_stale_socket);
    tcase_add_test(tc, test_tcp_loopback);
    tcase_add_test(tc, test_shm_bad_server);
    tcase_add_loop_test(tc, test_no_fd_leaks, 0, NKINDS);
    suite_add_tcase(s, tc);
    return s;
}
