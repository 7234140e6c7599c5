/* test_transport.c - the four transports' streams (shm, unix, tcp, pipe)
 * between forked processes: content both ways at every size, deadlines, a
 * peer that closes or dies. Loop tests run once per kind (_i indexes
 * kinds[]). Addresses and listeners: test_transport_listen.c; the ops
 * tables: test_transport_ops.c. */
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
    suite_add_tcase(s, tc);

    tc = tcase_create("peer");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_peer_close, 0, NKINDS);
    tcase_add_loop_test(tc, test_peer_killed_mid_message, 0, NKINDS);
    tcase_add_loop_test(tc, test_peer_killed_mid_stream, 0, NKINDS);
    tcase_add_loop_test(tc, test_send_to_dead_peer, 0, NKINDS);
    suite_add_tcase(s, tc);
    return s;
}
