/* test_session.c - the Disco session: actions, values, registers, errors,
 * worker deaths, deadlines, both launch modes and both transports. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/observe.h"
#include "disco/session.h"
#include "disco/shm/wait.h"
#include "tests/session_util.h"

static int fds_before;

/* Every test starts with no children and is checked for leaks at the end. */
static void setup(void)
{
    fds_before = tu_open_fds();
}

/* After close: no child left, no fd left, no memfd mapping left. */
static void assert_clean(void)
{
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a worker was left");
    ck_assert_int_eq(tu_open_fds(), fds_before);
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (fgets(line, sizeof line, f) != NULL)
        ck_assert_msg(strstr(line, "disco-session") == NULL, "segment still mapped: %s", line);
    fclose(f);
}

static disco_session_t *open_n(int n)
{
    return tu_open_as(n, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 0);
}

static int64_t get_int(disco_session_t *s, disco_dref_t r, int w)
{
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_int_eq(v.type, DISCO_T_INT);
    return v.v.i;
}

static void check_ids(disco_session_t *s)
{
    int n = disco_session_num_workers(s);
    disco_dref_t id, ws, sum;
    CK_OK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &id));
    CK_OK(disco_session_call_by_name(s, "disco.world_size", NULL, 0, &ws));
    disco_value_t args[2] = {disco_value_int(40), disco_value_int(2)};
    CK_OK(disco_session_call_by_name(s, "test.add", args, 2, &sum));
    for (int w = 0; w < n; w++) {
        ck_assert_int_eq(get_int(s, id, w), w);
        ck_assert_int_eq(get_int(s, ws, w), n);
        ck_assert_int_eq(get_int(s, sum, w), 42);
    }
}

/* Every worker runs the calls, knows its id and the world size; N = 1..8
 * (8 workers on 2 cores). */
START_TEST(test_ids_and_calls)
{
    static const int sizes[] = {1, 2, 3, 4, 8};
    int n = sizes[_i];
    disco_session_t *s = open_n(n);
    ck_assert_int_eq(disco_session_num_workers(s), n);
    check_ids(s);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* The same over pipes, and with spawned (exec'd) workers. */
START_TEST(test_transports_and_launch)
{
    disco_launch_t launch = (_i & 1) ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    disco_session_transport_t tr = (_i & 2) ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING;
    disco_session_t *s = tu_open_as(3, launch, tr, 0);
    check_ids(s);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* Each value type survives debug set/get and an echo call on every worker,
 * bit for bit. */
START_TEST(test_value_round_trip)
{
    disco_session_t *s = open_n(3);
    static char big[60000]; /* spans hundreds of ring slots, under max_msg */
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    const int64_t dims[4] = {2, 0, -1, INT64_MAX};
    const char bin[5] = {0, 1, 0, 2, 0};
    disco_value_t vals[] = {
        disco_value_null(),
        disco_value_bool(true),
        disco_value_int(INT64_MIN),
        disco_value_int(INT64_MAX),
        disco_value_float(-0.0),
        disco_value_float(NAN),
        disco_value_float(1e-300),
        disco_value_str(""),
        disco_value_str("hello, disco"),
        disco_value_bytes(bin, sizeof bin),
        disco_value_bytes(NULL, 0),
        disco_value_bytes(big, sizeof big),
        disco_value_shape(dims, 4),
        disco_value_shape(NULL, 0),
        disco_value_dtype((DLDataType){kDLBfloat, 16, 1}),
        disco_value_device((DLDevice){kDLCUDA, 3}),
        disco_value_opaque(0xdeadbeefcafef00dULL),
    };
    disco_dref_t echo;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
        disco_dref_t reg, out, out2;
        CK_OK(disco_session_alloc_reg(s, &reg));
        for (int w = 0; w < 3; w++)
            CK_OK(disco_session_debug_set(s, reg, w, &vals[k]));
        CK_OK(disco_session_call(s, echo, &vals[k], 1, &out));
        disco_value_t ref = {.type = DISCO_T_DREF, .v.reg = reg};
        CK_OK(
            disco_session_call(s, echo, &ref, 1, &out2)); /* a DRef argument: the register value */
        for (int w = 0; w < 3; w++) {
            disco_dref_t regs[3] = {reg, out, out2};
            for (int j = 0; j < 3; j++) {
                disco_value_t got;
                CK_OK(disco_session_debug_get(s, regs[j], w, &got));
                ck_assert_msg(disco_value_equal(&got, &vals[k]),
                              "value %zu (%s), worker %d, reg %d", k, disco_type_name(vals[k].type),
                              w, j);
                disco_value_clear(&got);
            }
        }
        CK_OK(disco_session_free_reg(s, out2));
        CK_OK(disco_session_free_reg(s, out));
        CK_OK(disco_session_free_reg(s, reg));
    }
    /* A string built in scratch memory on the worker. */
    disco_value_t parts[2] = {disco_value_str("dis"), disco_value_str("co")};
    disco_dref_t cat;
    CK_OK(disco_session_call_by_name(s, "test.concat", parts, 2, &cat));
    disco_value_t got;
    CK_OK(disco_session_debug_get(s, cat, 2, &got));
    ck_assert_str_eq(got.v.str, "disco");
    disco_value_clear(&got);
    /* A function register holds a function handle. */
    CK_OK(disco_session_debug_get(s, echo, 1, &got));
    ck_assert_int_eq(got.type, DISCO_T_FUNC);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* Freed register ids come back last-freed first; a freed id is refused. */
START_TEST(test_register_reuse)
{
    disco_session_t *s = open_n(2);
    disco_dref_t a, b, c, d;
    CK_OK(disco_session_alloc_reg(s, &a));
    CK_OK(disco_session_alloc_reg(s, &b));
    ck_assert_uint_ne(a, 0);
    ck_assert_uint_ne(a, b);
    CK_OK(disco_session_free_reg(s, a));
    CK_OK(disco_session_free_reg(s, b));
    CK_OK(disco_session_alloc_reg(s, &c));
    CK_OK(disco_session_alloc_reg(s, &d));
    ck_assert_uint_eq(c, b);
    ck_assert_uint_eq(d, a);
    disco_dref_t echo, r;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    CK_OK(disco_session_free_reg(s, d));
    CK_STATUS(disco_session_free_reg(s, d), DISCO_E_BAD_REG);
    disco_value_t v;
    CK_STATUS(disco_session_debug_get(s, d, 1, &v), DISCO_E_BAD_REG);
    CK_STATUS(disco_session_debug_get(s, 9999, 0, &v), DISCO_E_BAD_REG);
    CK_STATUS(disco_session_free_reg(s, 0), DISCO_E_BAD_REG);
    disco_value_t arg = {.type = DISCO_T_DREF, .v.reg = d};
    CK_STATUS(disco_session_call(s, echo, &arg, 1, &r), DISCO_E_BAD_REG);
    CK_STATUS(disco_session_call(s, c, NULL, 0, &r), DISCO_E_BAD_REG); /* not a function */
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* Many live registers at once (more than any initial table), all freed,
 * then reused last-freed first; the free list holds more than 64 live
 * registers without overflowing. */
START_TEST(test_many_registers)
{
    disco_session_t *s = open_n(2);
    enum { N = 1000 };
    static disco_dref_t regs[N];
    disco_dref_t echo;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    for (int i = 0; i < N; i++) {
        disco_value_t v = disco_value_int(i);
        CK_OK(disco_session_call(s, echo, &v, 1, &regs[i]));
    }
    CK_OK(disco_session_sync(s, 1));
    ck_assert_int_eq(get_int(s, regs[N - 1], 1), N - 1);
    for (int i = 0; i < N; i++)
        CK_OK(disco_session_free_reg(s, regs[i]));
    for (int i = N - 1; i >= 0; i--) {
        disco_dref_t r;
        CK_OK(disco_session_alloc_reg(s, &r));
        ck_assert_uint_eq(r, regs[i]);
    }
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* Mistakes the controller can see fail the call itself, with the name, and
 * the session goes on. */
START_TEST(test_call_errors)
{
    disco_session_t *s = open_n(2);
    disco_dref_t f, r;
    CK_STATUS(disco_session_get_func(s, "test.no_such_function", &f), DISCO_E_NO_FUNC);
    CK_HAS("test.no_such_function");
    CK_OK(disco_session_get_func(s, "test.add", &f));
    disco_value_t one = disco_value_int(1), two[2] = {disco_value_int(1), disco_value_str("x")};
    CK_STATUS(disco_session_call(s, f, &one, 1, &r), DISCO_E_ARG_COUNT);
    CK_HAS("test.add takes 2 arguments");
    CK_STATUS(disco_session_call(s, f, two, 2, &r), DISCO_E_BAD_TYPE);
    CK_HAS("expected int, got str");
    disco_value_t bad = {.type = 77};
    disco_dref_t echo;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    CK_STATUS(disco_session_call(s, echo, &bad, 1, &r), DISCO_E_BAD_TYPE);
    static char huge[70000];
    disco_value_t big = disco_value_bytes(huge, sizeof huge);
    CK_STATUS(disco_session_call(s, echo, &big, 1, &r), DISCO_E_MSG_TOO_BIG);
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_INVAL);
    CK_STATUS(disco_session_sync(s, -1), DISCO_E_INVAL);
    disco_value_t args[2] = {disco_value_int(2), disco_value_int(3)};
    CK_OK(disco_session_call(s, f, args, 2, &r));
    CK_OK(disco_session_sync(s, 1));
    ck_assert_int_eq(get_int(s, r, 1), 5);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* A function that fails on a worker: the next sync names the worker, the
 * function and the message; the session stays usable. */
START_TEST(test_remote_failure)
{
    disco_session_t *s = open_n(3);
    disco_value_t args[2] = {disco_value_int(2), disco_value_str("bad input")};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fail_on", args, 2, &r));
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_REMOTE);
    CK_HAS("worker 2: test.fail_on: bad input (worker 2)");
    CK_OK(disco_session_sync(s, 2)); /* reported once */
    args[0] = disco_value_int(-1);
    CK_OK(disco_session_call_by_name(s, "test.fail_on", args, 2, &r));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_REMOTE);
    CK_HAS("worker 0: test.fail_on: bad input (worker 0)");
    CK_HAS("worker 1: test.fail_on: bad input (worker 1)");
    /* Worker 2 may not have run it yet at that sync: its report comes with
     * the sync that waits for it, or was already in the first. */
    disco_status_t st = disco_session_sync(s, 2);
    ck_assert_msg(st == DISCO_OK || st == DISCO_E_REMOTE, "sync 2: %s", disco_err_name(st));
    CK_OK(disco_session_sync(s, 2));
    check_ids(s);
    /* A library that cannot be loaded. */
    disco_value_t path = disco_value_str("/nonexistent/libnothing.so");
    CK_OK(disco_session_call_by_name(s, "disco.load_library", &path, 1, &r));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_LIBRARY);
    CK_HAS("libnothing.so");
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* A worker that dies (SIGSEGV, exit, SIGKILL from outside) is named with
 * its signal or exit code; every later call fails; close is clean. */
START_TEST(test_worker_death)
{
    int how = _i % 3, mode = _i / 3;
    disco_session_t *s = tu_open_as(3, (mode & 1) ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK,
                                    (mode & 2) ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING, 0);
    disco_dref_t r;
    int64_t t0 = disco_now_ns();
    if (how == 0) {
        disco_value_t w = disco_value_int(1);
        CK_OK(disco_session_call_by_name(s, "test.segv", &w, 1, &r));
    } else if (how == 1) {
        disco_value_t a[2] = {disco_value_int(1), disco_value_int(7)};
        CK_OK(disco_session_call_by_name(s, "test.exit", a, 2, &r));
    } else {
        disco_value_t w = disco_value_int(1);
        CK_OK(disco_session_call_by_name(s, "test.hang", &w, 1, &r));
        kill(disco_session_worker_pid(s, 1), SIGKILL);
    }
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_WORKER_DIED);
    CK_HAS("worker 1 (pid");
    CK_HAS(how == 0 ? "signal 11" : how == 1 ? "exited with code 7" : "signal 9");
    ck_assert_msg(disco_now_ns() - t0 < 5000000000LL, "death took too long to detect");
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_BROKEN);
    CK_HAS("worker 1");
    disco_dref_t f;
    CK_STATUS(disco_session_get_func(s, "test.add", &f), DISCO_E_BROKEN);
    ck_assert_int_eq(disco_session_health(s), DISCO_E_WORKER_DIED);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* A hung worker: the sync times out with its own error, the worker is
 * killed, the session reports itself broken. */
START_TEST(test_deadline)
{
    disco_session_t *s = tu_open_as(3, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 300);
    int pid = disco_session_worker_pid(s, 2);
    disco_value_t w = disco_value_int(2);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.hang", &w, 1, &r));
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_TIMEOUT);
    int64_t took = disco_now_ns() - t0;
    CK_HAS("worker 2 did not answer sync within 300 ms");
    ck_assert_msg(took >= 300000000LL && took < 3000000000LL, "timeout after %lld ns",
                  (long long)took);
    ck_assert_msg(kill(pid, 0) == -1 && errno == ESRCH, "hung worker %d still exists", pid);
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_BROKEN);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* A tensor of 1000 floats on every worker (empty: disco.empty). */
static disco_dref_t empty_tensor(disco_session_t *s, disco_dref_t empty)
{
    int64_t n = 1000;
    disco_value_t a[4] = {disco_value_shape(&n, 1),
                          disco_value_dtype((DLDataType){kDLFloat, 32, 1}),
                          disco_value_device((DLDevice){kDLCPU, 0}), disco_value_bool(false)};
    disco_dref_t r;
    CK_OK(disco_session_call(s, empty, a, 4, &r));
    return r;
}

/* The heap's statistics count a tensor per worker while it lives, none
 * after its register is freed on every worker; a broken session still
 * answers. */
START_TEST(test_heap_stats)
{
    disco_session_t *s = open_n(3);
    disco_heap_stats_t h0, h1, h2;
    CK_OK(disco_session_heap_stats(s, &h0));
    ck_assert_uint_eq(h0.capacity, h0.used_bytes + h0.free_bytes);
    disco_dref_t empty;
    CK_OK(disco_session_get_func(s, "disco.empty", &empty));
    disco_dref_t r = empty_tensor(s, empty);
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_uint_eq(h1.live_blocks, h0.live_blocks + 3);
    ck_assert_uint_ge(h1.used_bytes, h0.used_bytes + 3 * 4000);
    CK_OK(disco_session_free_reg(s, r));
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_heap_stats(s, &h2));
    ck_assert_uint_eq(h2.live_blocks, h0.live_blocks);
    ck_assert_uint_eq(h2.used_bytes, h0.used_bytes);
    kill(disco_session_worker_pid(s, 1), SIGKILL);
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_WORKER_DIED);
    CK_OK(disco_session_heap_stats(s, &h2));
    ck_assert_uint_eq(h2.live_blocks, h0.live_blocks);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* Commands the session has broadcast so far. */
static uint64_t issued(disco_session_t *s)
{
    disco_session_view_t v;
    CK_OK(disco_session_view(s, &v));
    uint64_t n = v.issued;
    disco_view_free(&v);
    return n;
}

/* A free rides with the next call: call + free + call is two commands, not
 * three (issue 21). Before any other command it goes alone. A call's head
 * has the free's place either way, so a call that fits carries it, and a
 * call refused as too big leaves it waiting. Either way the register is
 * freed on every worker before what follows runs, its id reused at once
 * included, and nothing leaks. */
START_TEST(test_free_rides_with_call)
{
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.max_msg = 512;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    disco_heap_stats_t h0, h1;
    CK_OK(disco_session_heap_stats(s, &h0));
    disco_dref_t echo, empty, r;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    CK_OK(disco_session_get_func(s, "disco.empty", &empty));

    disco_dref_t t = empty_tensor(s, empty);
    uint64_t before = issued(s);
    CK_OK(disco_session_free_reg(s, t));
    disco_value_t seven = disco_value_int(7);
    CK_OK(disco_session_call(s, echo, &seven, 1, &r));
    ck_assert_uint_eq(issued(s) - before, 1);
    ck_assert_uint_ne(r, t); /* not reused before the workers were told */
    disco_value_t v;
    CK_STATUS(disco_session_debug_get(s, t, 1, &v), DISCO_E_BAD_REG);
    disco_dref_t again;
    CK_OK(disco_session_alloc_reg(s, &again));
    ck_assert_uint_eq(again, t); /* but at once after */
    CK_OK(disco_session_free_reg(s, again));
    for (int w = 0; w < 3; w++)
        ck_assert_int_eq(get_int(s, r, w), 7);
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_uint_eq(h1.live_blocks, h0.live_blocks);

    /* Before a sync it goes alone, and the sync sees it done. */
    t = empty_tensor(s, empty);
    before = issued(s);
    CK_OK(disco_session_free_reg(s, t));
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    ck_assert_uint_eq(issued(s) - before, 4);
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_uint_eq(h1.live_blocks, h0.live_blocks);

    /* Two frees in a row: the first goes alone when the second comes. */
    disco_dref_t t1 = empty_tensor(s, empty), t2 = empty_tensor(s, empty);
    before = issued(s);
    CK_OK(disco_session_free_reg(s, t1));
    CK_OK(disco_session_free_reg(s, t2));
    CK_OK(disco_session_call(s, echo, &seven, 1, &r));
    ck_assert_uint_eq(issued(s) - before, 2);
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_sync(s, 2));
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_uint_eq(h1.live_blocks, h0.live_blocks);

    /* The longest string echo can take in a 512-byte frame: with a free
     * waiting, the call carries it all the same. */
    static char str[600];
    size_t len = 0;
    for (size_t n = 1; n < sizeof str - 1; n++) {
        memset(str, 'x', n);
        str[n] = '\0';
        disco_value_t v = disco_value_str(str);
        disco_dref_t x;
        disco_status_t st = disco_session_call(s, echo, &v, 1, &x);
        if (st == DISCO_E_MSG_TOO_BIG)
            break;
        CK_OK(st);
        CK_OK(disco_session_free_reg(s, x));
        len = n;
    }
    ck_assert_uint_gt(len, 100);
    memset(str, 'y', len);
    str[len] = '\0';
    t = empty_tensor(s, empty);
    before = issued(s);
    CK_OK(disco_session_free_reg(s, t));
    v = disco_value_str(str);
    disco_dref_t x;
    CK_OK(disco_session_call(s, echo, &v, 1, &x));
    ck_assert_uint_eq(issued(s) - before, 1);
    disco_value_t got;
    CK_OK(disco_session_debug_get(s, x, 2, &got));
    ck_assert_int_eq(got.type, DISCO_T_STR);
    ck_assert_str_eq(got.v.str, str);
    disco_value_clear(&got);
    CK_OK(disco_session_free_reg(s, x));
    CK_OK(disco_session_free_reg(s, r));
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_uint_eq(h1.live_blocks, h0.live_blocks);

    /* A call or call_sync_all one byte too big is refused, and the free
     * waiting stays waiting: it goes with what follows, and nothing
     * leaks. */
    t = empty_tensor(s, empty);
    CK_OK(disco_session_free_reg(s, t));
    str[len] = 'y';
    str[len + 1] = '\0';
    v = disco_value_str(str);
    before = issued(s);
    CK_STATUS(disco_session_call(s, echo, &v, 1, &x), DISCO_E_MSG_TOO_BIG);
    CK_STATUS(disco_session_call_sync_all(s, echo, &v, 1, &x), DISCO_E_MSG_TOO_BIG);
    ck_assert_uint_eq(issued(s), before);
    CK_OK(disco_session_alloc_reg(s, &again)); /* the free waiting goes first */
    ck_assert_uint_eq(issued(s) - before, 1);
    ck_assert_uint_eq(again, t);
    CK_OK(disco_session_free_reg(s, again));
    CK_OK(disco_session_sync_all(s));
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_uint_eq(h1.live_blocks, h0.live_blocks);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* A sync of every worker is one command that all of them answer, over
 * either transport and launch mode: calls before it are done on every
 * worker, failures reported there are returned (every reporting worker
 * named), a death is DISCO_E_WORKER_DIED, not a hang. */
START_TEST(test_sync_all)
{
    disco_session_t *s = tu_open_as(4, (_i & 1) ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK,
                                    (_i & 2) ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING, 0);
    disco_dref_t echo, r, f;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    disco_value_t v = disco_value_int(11);
    CK_OK(disco_session_call(s, echo, &v, 1, &r));
    uint64_t before = issued(s);
    CK_OK(disco_session_sync_all(s));
    ck_assert_uint_eq(issued(s) - before, 1);
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(get_int(s, r, w), 11);

    disco_value_t args[2] = {disco_value_int(-1), disco_value_str("all bad")};
    CK_OK(disco_session_get_func(s, "test.fail_on", &f));
    CK_OK(disco_session_call(s, f, args, 2, &r));
    CK_STATUS(disco_session_sync_all(s), DISCO_E_REMOTE);
    for (int w = 0; w < 4; w++) {
        char want[64];
        snprintf(want, sizeof want, "worker %d: test.fail_on: all bad (worker %d)", w, w);
        CK_HAS(want);
    }
    CK_OK(disco_session_sync_all(s)); /* reported once */

    disco_value_t a[2] = {disco_value_int(3), disco_value_int(5)};
    CK_OK(disco_session_call_by_name(s, "test.exit", a, 2, &r));
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_session_sync_all(s), DISCO_E_WORKER_DIED);
    CK_HAS("worker 3 (pid");
    CK_HAS("exited with code 5");
    ck_assert_msg(disco_now_ns() - t0 < 5000000000LL, "death took too long to detect");
    CK_STATUS(disco_session_sync_all(s), DISCO_E_BROKEN);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* disco_session_call_sync_all, over either transport and launch mode: one
 * command; it returns only once every worker ran the call (a straggler
 * sleeping 150 ms is waited for); the results are there; a free waiting to
 * be sent rides with it; a failing call is returned naming every worker,
 * with its result register freed (its heap blocks too); a death is
 * DISCO_E_WORKER_DIED, not a hang. */
START_TEST(test_call_sync_all)
{
    disco_session_t *s = tu_open_as(4, (_i & 1) ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK,
                                    (_i & 2) ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING, 0);
    disco_dref_t echo, sleep_on, fail, r, old;
    CK_OK(disco_session_get_func(s, "test.echo", &echo));
    CK_OK(disco_session_get_func(s, "test.sleep_on", &sleep_on));
    CK_OK(disco_session_get_func(s, "test.fail_on", &fail));
    CK_OK(disco_session_sync_all(s));
    disco_value_t v = disco_value_int(11);
    uint64_t before = issued(s);
    CK_OK(disco_session_call_sync_all(s, echo, &v, 1, &r));
    ck_assert_uint_eq(issued(s) - before, 1);
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(get_int(s, r, w), 11);

    /* Worker 3 sleeps 150 ms in the call: the step waits for it. */
    disco_value_t sl[2] = {disco_value_int(3), disco_value_int(150)};
    int64_t t0 = disco_now_ns();
    CK_OK(disco_session_call_sync_all(s, sleep_on, sl, 2, &old));
    ck_assert_msg(disco_now_ns() - t0 >= 150000000LL, "returned after %lld ns",
                  (long long)(disco_now_ns() - t0));

    /* A free rides with it: still one command, and the id comes back. */
    CK_OK(disco_session_free_reg(s, old));
    before = issued(s);
    disco_dref_t r2;
    CK_OK(disco_session_call_sync_all(s, echo, &v, 1, &r2));
    ck_assert_uint_eq(issued(s) - before, 1);
    disco_dref_t again;
    CK_OK(disco_session_alloc_reg(s, &again));
    ck_assert_uint_eq(again, old);
    CK_OK(disco_session_free_reg(s, again));
    CK_OK(disco_session_free_reg(s, r2));

    /* A failing call: every worker named, its result register freed (the
     * id the call took, last freed, is the next one handed out). */
    disco_dref_t probe, none = 0;
    CK_OK(disco_session_alloc_reg(s, &probe));
    CK_OK(disco_session_free_reg(s, probe));
    CK_OK(disco_session_sync_all(s)); /* the free goes: probe's id is next */
    disco_value_t args[2] = {disco_value_int(-1), disco_value_str("all bad")};
    CK_STATUS(disco_session_call_sync_all(s, fail, args, 2, &none), DISCO_E_REMOTE);
    ck_assert_uint_eq(none, 0);
    for (int w = 0; w < 4; w++) {
        char want[64];
        snprintf(want, sizeof want, "worker %d: test.fail_on: all bad (worker %d)", w, w);
        CK_HAS(want);
    }
    CK_OK(disco_session_sync_all(s)); /* reported once */
    CK_OK(disco_session_alloc_reg(s, &again));
    ck_assert_uint_eq(again, probe);
    CK_OK(disco_session_free_reg(s, again));
    check_ids(s);

    disco_value_t a[2] = {disco_value_int(3), disco_value_int(5)};
    disco_dref_t ex;
    CK_OK(disco_session_get_func(s, "test.exit", &ex));
    t0 = disco_now_ns();
    CK_STATUS(disco_session_call_sync_all(s, ex, a, 2, &r2), DISCO_E_WORKER_DIED);
    CK_HAS("worker 3 (pid");
    CK_HAS("exited with code 5");
    ck_assert_msg(disco_now_ns() - t0 < 5000000000LL, "death took too long to detect");
    CK_STATUS(disco_session_call_sync_all(s, echo, &v, 1, &r2), DISCO_E_BROKEN);
    disco_session_close(s);
    assert_clean();
}
END_TEST

/* Shutdown is harmless twice; calls afterwards say so. */
START_TEST(test_shutdown_twice)
{
    disco_session_t *s = open_n(2);
    CK_OK(disco_session_shutdown(s));
    CK_OK(disco_session_shutdown(s));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_SHUTDOWN);
    disco_dref_t f;
    CK_STATUS(disco_session_get_func(s, "test.add", &f), DISCO_E_SHUTDOWN);
    disco_session_close(s);
    disco_session_close(NULL);
    assert_clean();
}
END_TEST

/* Bad configs are refused with a reason; a missing worker program too. */
START_TEST(test_bad_config)
{
    disco_session_config_t cfg = disco_session_config_default(0);
    disco_session_t *s;
    CK_STATUS(disco_session_open(&cfg, &s), DISCO_E_INVAL);
    cfg.num_workers = 1000;
    CK_STATUS(disco_session_open(&cfg, &s), DISCO_E_INVAL);
    cfg = disco_session_config_default(2);
    cfg.launch = DISCO_LAUNCH_SPAWN;
    cfg.worker_path = "/nonexistent/disco-worker";
    CK_STATUS(disco_session_open(&cfg, &s), DISCO_E_INVAL);
    CK_HAS("/nonexistent/disco-worker");
    assert_clean();
}
END_TEST

static int pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* A controller killed with SIGKILL takes its workers with it. */
START_TEST(test_controller_death)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t ctl = fork();
    if (ctl == 0) {
        close(p[0]);
        disco_session_t *s = open_n(4);
        for (int w = 1; w < 4; w++) {
            int pid = disco_session_worker_pid(s, w);
            if (write(p[1], &pid, sizeof pid) != sizeof pid)
                _exit(1);
        }
        for (;;)
            pause();
    }
    close(p[1]);
    int pids[3];
    size_t got = 0;
    while (got < sizeof pids) { /* the child writes one pid at a time */
        ssize_t n = read(p[0], (char *)pids + got, sizeof pids - got);
        ck_assert_msg(n > 0, "controller child died before reporting its workers");
        got += (size_t)n;
    }
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = pidfd_open(pids[i]);
    kill(ctl, SIGKILL);
    waitpid(ctl, NULL, 0);
    for (int i = 0; i < 3; i++) {
        if (fds[i] < 0) /* already gone */
            continue;
        struct pollfd pf = {.fd = fds[i], .events = POLLIN};
        ck_assert_msg(poll(&pf, 1, 5000) == 1, "worker %d outlived its controller", pids[i]);
        close(fds[i]);
    }
    close(p[0]);
}
END_TEST

Suite *suite_session(void)
{
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_ids_and_calls, 0, 5);
    tcase_add_loop_test(tc, test_transports_and_launch, 0, 4);
    tcase_add_test(tc, test_value_round_trip);
    tcase_add_test(tc, test_register_reuse);
    tcase_add_test(tc, test_many_registers);
    tcase_add_test(tc, test_call_errors);
    tcase_add_test(tc, test_remote_failure);
    tcase_add_loop_test(tc, test_worker_death, 0, 12);
    tcase_add_test(tc, test_deadline);
    tcase_add_test(tc, test_heap_stats);
    tcase_add_test(tc, test_free_rides_with_call);
    tcase_add_loop_test(tc, test_sync_all, 0, 4);
    tcase_add_loop_test(tc, test_call_sync_all, 0, 4);
    tcase_add_test(tc, test_shutdown_twice);
    tcase_add_test(tc, test_bad_config);
    tcase_add_test(tc, test_controller_death);
    suite_add_tcase(s, tc);
    return s;
}
