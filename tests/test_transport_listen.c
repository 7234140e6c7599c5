/* test_transport_listen.c - addresses and listeners of the transports:
 * malformed addresses, refused connects, accept deadlines, socket modes and
 * stale socket files, tcp loopback, an shm client facing a server that is
 * not one, fd hygiene. Loop tests run once per kind (_i indexes kinds[]).
 * Moved from test_transport.c, unchanged. */
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
#include "tests/transport_util.h"

/* ---- accept ---- */

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

Suite *suite_transport_listen(void)
{
    Suite *s = suite_create("transport_listen");
    TCase *tc = tcase_create("deadlines");
    tcase_set_timeout(tc, 20);
    tcase_add_loop_test(tc, test_accept_timeout, 0, K_PIPE);
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
