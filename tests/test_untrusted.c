/* test_untrusted.c - what another process wrote is read as untrusted
 * (issue 14, section 6: the strings): a worker's error mailbox and error
 * replies, an RPC peer's exceptions. Their text stays inside its field, is
 * bounded and printable; their codes must be disco's errors. White-box:
 * the tests write the shared structures as a hostile worker would. */
#include <check.h>
#include <signal.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/session/session_impl.h"
#include "shm/ring_internal.h"
#include "shm/text.h"
#include "workers/rpc/rpc_proto.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/transport.h"
#include "tests/session_util.h"

static disco_session_t *open_small(int n)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.heap_bytes = 1u << 20;
    cfg.call_timeout_ms = 20000;
    return tu_open_with_testlib(&cfg);
}

/* The session still answers a call on every worker. */
static void still_usable(disco_session_t *s)
{
    disco_value_t a[2] = {disco_value_int(40), disco_value_int(2)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.add", a, 2, &r));
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_int_eq(v.v.i, 42);
    }
    CK_OK(disco_session_free_reg(s, r));
}

/* Whether every byte of s is printable ASCII. */
static bool printable(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

/* disco__text_safe: bounded reads, a forced terminator, escapes, cuts at a
 * whole escape. */
START_TEST(test_text_safe)
{
    char out[16];
    const char raw[5] = {'a', 'b', 'c', 'd', 'e'}; /* no terminator */
    ck_assert_str_eq(disco__text_safe(out, sizeof out, raw, sizeof raw), "abcde");
    ck_assert_str_eq(disco__text_safe(out, sizeof out, "a\x1b[2J\n", 64), "a\\x1b[2J\\x0a");
    ck_assert_str_eq(disco__text_safe(out, sizeof out, "\xc3\xa9t\xc3\xa9", 64),
                     "\\xc3\\xa9t\\xc3");
    ck_assert_str_eq(disco__text_safe(out, 4, "abcdef", 64), "abc");
    ck_assert_str_eq(disco__text_safe(out, 6, "ab\x01z", 64), "ab"); /* no half escape */
    ck_assert_str_eq(disco__text_safe(out, 1, "abc", 64), "");
    ck_assert_str_eq(disco__text_safe(out, sizeof out, "ab\0cd", 64), "ab");
    ck_assert(disco__status_is_error(DISCO_E_INVAL));
    ck_assert(disco__status_is_error(DISCO_STATUS_MIN));
    ck_assert(!disco__status_is_error(DISCO_OK));
    ck_assert(!disco__status_is_error(7));
    ck_assert(!disco__status_is_error(DISCO_STATUS_MIN - 1));
    ck_assert(!disco__status_is_error(INT64_MIN));
}
END_TEST

/* White-box: worker 1's error mailbox is written as a corrupt or hostile
 * worker would (no terminator in func or msg, bytes past msg, a terminal
 * escape, then a code that is no error). The controller's report stays
 * inside each field, is printable, bounded, and its code is one of ours;
 * the session stays usable. */
START_TEST(test_worker_error_strings)
{
    disco_session_t *s = open_small(2);
    CK_OK(disco_session_sync(s, 1)); /* worker 1 is idle: the box is ours to write */
    struct disco__errbox *b = &s->errbox[1];
    /* func without its terminator: the report keeps to its 128 bytes */
    memset(b->func, 'A', sizeof b->func);
    strcpy(b->msg, "m");
    b->code = DISCO_E_REMOTE;
    b->seq = 1;
    atomic_store_explicit(&b->full, 1, memory_order_release);
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_REMOTE);
    const char *d = strstr(disco_last_error(), "worker 1: ");
    ck_assert_ptr_nonnull(d);
    size_t as = strspn(d + 10, "A");
    ck_assert_msg(as == sizeof b->func - 1 && d[10 + as] == ':', "func read past its field: %s",
                  disco_last_error());

    /* msg without its terminator, bytes after it, a terminal escape */
    strcpy(b->func, "f");
    memset(b->msg, 'B', sizeof b->msg);
    memcpy(b->msg, "\x1b[2J", 4);
    size_t tail = sizeof *b - offsetof(struct disco__errbox, msg) - sizeof b->msg;
    ck_assert_uint_gt(tail, 0);
    memset(b->msg + sizeof b->msg, 'C', tail); /* the padding after msg */
    atomic_store_explicit(&b->full, 1, memory_order_release);
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_REMOTE);
    d = disco_last_error();
    ck_assert_msg(printable(d), "detail is not printable: %s", d);
    ck_assert_msg(strstr(d, "\\x1b[2J") != NULL, "escape not shown: %s", d);
    ck_assert_msg(strchr(d, 'C') == NULL, "msg read past its field: %s", d);
    ck_assert_uint_lt(strlen(d), 512);

    /* a code that is no status of ours (would read as a positive "success") */
    memset(b->msg, 0, sizeof b->msg);
    strcpy(b->msg, "m");
    b->code = 7;
    atomic_store_explicit(&b->full, 1, memory_order_release);
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_PROTOCOL);
    CK_HAS("not an error status");
    CK_OK(disco_session_sync(s, 1));
    still_usable(s);
    disco_session_close(s);
}
END_TEST

/* Puts an error reply to the controller's next token into worker 1's reply
 * ring, as a hostile worker 1 would (worker 1 is idle, so the ring's one
 * writer is us for the moment), and asks worker 1 for a debug get. */
static disco_status_t forged_reply(disco_session_t *s, int64_t code, const char *msg)
{
    /* Worker 1 is the ring's one writer and would write its own answer to
     * the debug get at the same place: stopped, it cannot (it is killed
     * once its "answer" has been read). */
    pid_t w1 = (pid_t)disco_session_worker_pid(s, 1);
    ck_assert_int_gt(w1, 0);
    ck_assert_int_eq(kill(w1, SIGSTOP), 0);
    /* A spinning worker takes the signal only at its next interrupt: wait
     * until it has stopped (the stop is reported, the worker not reaped). */
    siginfo_t si;
    ck_assert_int_eq(waitid(P_PID, (id_t)w1, &si, WSTOPPED), 0);
    /* It may have stopped after publishing its last reply but before
     * storing the ring's head: this writer starts where the reader is. */
    disco__ring_writer_takeover(&s->reply_rings[1]);
    disco_value_t v[3] = {disco_value_int(s->token + 1), disco_value_int(code),
                          disco_value_str(msg)};
    static _Alignas(8) unsigned char frame[8192];
    size_t len;
    CK_OK(disco_frame_encode(DISCO_REPLY_ERROR, 1, v, 3, frame, sizeof frame, &len));
    CK_OK(disco_spsc_write(&s->reply_rings[1], frame, (uint32_t)len, NULL));
    disco_dref_t r;
    CK_OK(disco_session_alloc_reg(s, &r));
    disco_value_t got;
    disco_status_t st = disco_session_debug_get(s, r, 1, &got);
    char why[1024];
    snprintf(why, sizeof why, "%s", disco_last_error());
    kill(w1, SIGKILL);
    disco_set_error(st, "%s", why); /* the detail the caller checks */
    return st;
}

/* A worker's error reply is read like its mailbox: its text bounded and
 * escaped, its code one of ours (a code that is none breaks the session
 * as a protocol error instead of coming back as a "status" 7). */
START_TEST(test_worker_error_reply)
{
    static char long_msg[1200]; /* spans slots, but fewer than the ring holds */
    memset(long_msg, 'L', sizeof long_msg - 1);
    memcpy(long_msg, "\x1b[2J\x9b", 5);
    disco_session_t *s = open_small(2);
    CK_OK(disco_session_sync(s, 1));
    CK_STATUS(forged_reply(s, DISCO_E_INVAL, long_msg), DISCO_E_INVAL);
    ck_assert_msg(printable(disco_last_error()), "detail: %s", disco_last_error());
    CK_HAS("worker 1: \\x1b[2J\\x9bLLL");
    ck_assert_uint_lt(strlen(disco_last_error()), 512);
    disco_session_close(s);

    s = open_small(2);
    CK_OK(disco_session_sync(s, 1));
    CK_STATUS(forged_reply(s, 7, "m"), DISCO_E_PROTOCOL);
    CK_HAS("error reply with status 7");
    ck_assert_int_eq(disco_session_health(s), DISCO_E_PROTOCOL);
    disco_session_close(s);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1, "a worker was left");
}
END_TEST

/* A fake RPC server (a child over two pipes): it greets, then answers the
 * first request with an exception whose status is 0 and whose message
 * carries a terminal escape. */
static void fake_server(int rfd, int wfd)
{
    disco_transport_t *t;
    disco__rpc_buf_t b;
    disco_frame_hdr_t h;
    disco_value_t v[8];
    int64_t dl = disco_now_ns() + 10000000000LL;
    CH_OK(disco_transport_from_fds(rfd, wfd, &t));
    CH_OK(disco__rpc_buf_init(&b));
    CH_OK(disco__rpc_recv(t, &b, &h, v, 8, dl));
    static const uint8_t nonce[32];
    disco_value_t hello[3] = {disco_value_int(DISCO_RPC_VERSION),
                              disco_value_bytes(nonce, sizeof nonce),
                              disco_value_int(0)}; /* A2, mode 0: no authentication */
    CH_OK(disco__rpc_send(t, &b, DISCO_RPC_RETURN, h.seq, hello, 3, dl));
    CH_OK(disco__rpc_recv(t, &b, &h, v, 8, dl));
    disco_value_t e[2] = {disco_value_int(0), disco_value_str("evil\x1b]0;owned\x07")};
    CH_OK(disco__rpc_send(t, &b, DISCO_RPC_EXCEPTION, h.seq, e, 2, dl));
    disco__rpc_recv(t, &b, &h, v, 8, dl); /* the shutdown, or the end */
    _exit(0);
}

/* An RPC peer's exception is checked like a worker's error: status 0 is a
 * protocol error, not success, and its text is escaped. */
START_TEST(test_rpc_exception_checked)
{
    int c2s[2], s2c[2];
    ck_assert_int_eq(pipe2(c2s, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(s2c, O_CLOEXEC), 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        close(c2s[1]);
        close(s2c[0]);
        fake_server(c2s[0], s2c[1]);
    }
    close(c2s[0]);
    close(s2c[1]);
    disco_transport_t *t;
    CK_OK(disco_transport_from_fds(s2c[0], c2s[1], &t));
    disco_rpc_t *rs;
    CK_OK(disco_rpc_client(t, 10000, &rs));
    disco_rpc_handle_t f = 0;
    CK_STATUS(disco_rpc_get_func(rs, "disco.noop", &f), DISCO_E_PROTOCOL);
    ck_assert_msg(printable(disco_last_error()), "detail: %s", disco_last_error());
    CK_HAS("evil\\x1b]0;owned\\x07");
    CK_HAS("status 0");
    disco_rpc_close(rs);
    tu_wait_ok(pid, "fake server");
}
END_TEST

Suite *suite_untrusted(void)
{
    Suite *s = suite_create("untrusted");
    TCase *tc = tcase_create("untrusted");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_text_safe);
    tcase_add_test(tc, test_worker_error_strings);
    tcase_add_test(tc, test_worker_error_reply);
    tcase_add_test(tc, test_rpc_exception_checked);
    suite_add_tcase(s, tc);
    return s;
}
