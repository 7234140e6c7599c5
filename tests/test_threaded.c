/* test_threaded.c - sessions whose workers are threads of the controller's
 * process (DISCO_LAUNCH_THREAD, scheduler/session/threads.c): the same
 * calls, registers, errors and collectives as sessions of processes; a
 * hung worker ends in a timeout, not a hang; close leaves no thread, fd or
 * /dev/shm entry behind; device tensors are refused by name. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "disco/session.h"
#include "disco/tensor.h"
#include "tests/session_util.h"
#include "tests/testutil.h"

/* Threads of this process (entries of /proc/self/task). */
/* The session's worker threads in this process: the tasks named
 * "disco-w<id>" (threads.c names them), so that a runtime's own threads
 * (TSan's, a library's) are not counted. */
static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue; /* ended meanwhile */
        if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, "disco-w", 7) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static disco_session_t *open_threaded(int n, disco_session_transport_t transport,
                                      uint32_t timeout_ms)
{
    return tu_open_as(n, DISCO_LAUNCH_THREAD, transport, timeout_ms);
}

static disco_value_t debug_get(disco_session_t *s, disco_dref_t r, int w)
{
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    return v;
}

/* A call runs on every worker thread, each with its own id, and the
 * process has one thread per worker (1..N-1) while the session is open. */
START_TEST(test_calls)
{
    int before = threads_now();
    disco_session_t *s = open_threaded(3, DISCO_TRANSPORT_RING, 0);
    ck_assert_int_eq(threads_now(), before + 2);
    disco_value_t a[2] = {disco_value_int(2), disco_value_int(40)};
    disco_dref_t sum, id;
    CK_OK(disco_session_call_by_name(s, "test.add", a, 2, &sum));
    CK_OK(disco_session_call_by_name(s, "test.worker_id", NULL, 0, &id));
    for (int w = 0; w < 3; w++) {
        ck_assert_int_eq(debug_get(s, sum, w).v.i, 42);
        ck_assert_int_eq(debug_get(s, id, w).v.i, w);
        /* worker_pid: the process every worker runs in */
        ck_assert_int_eq(disco_session_worker_pid(s, w), (int)getpid());
    }
    CK_OK(disco_session_sync_all(s));
    disco_session_close(s);
}
END_TEST

/* The pipe transport works with threads too. */
START_TEST(test_calls_pipes)
{
    disco_session_t *s = open_threaded(2, DISCO_TRANSPORT_PIPE, 0);
    disco_value_t a = disco_value_str("x");
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.echo", &a, 1, &r));
    disco_value_t v = debug_get(s, r, 1);
    ck_assert_int_eq(v.type, DISCO_T_STR);
    ck_assert_str_eq(v.v.str, "x");
    disco_value_clear(&v);
    disco_session_close(s);
}
END_TEST

/* Registers: debug_set on one worker leaves the others' alone; a freed id
 * is reused last in, first out. */
START_TEST(test_registers)
{
    disco_session_t *s = open_threaded(3, DISCO_TRANSPORT_RING, 0);
    disco_dref_t r, r2;
    CK_OK(disco_session_alloc_reg(s, &r));
    disco_value_t seven = disco_value_int(7);
    CK_OK(disco_session_debug_set(s, r, 2, &seven));
    ck_assert_int_eq(debug_get(s, r, 2).v.i, 7);
    ck_assert_int_eq(debug_get(s, r, 1).type, DISCO_T_NULL);
    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_alloc_reg(s, &r2));
    ck_assert_uint_eq(r2, r);
    disco_session_close(s);
}
END_TEST

/* A function that fails on worker 2 is reported by the next sync, naming
 * the worker, the function and the message; the session goes on. */
START_TEST(test_error_names_worker)
{
    disco_session_t *s = open_threaded(3, DISCO_TRANSPORT_RING, 0);
    disco_value_t a[2] = {disco_value_int(2), disco_value_str("boom")};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fail_on", a, 2, &r));
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_REMOTE);
    CK_HAS("worker 2");
    CK_HAS("test.fail_on");
    CK_HAS("boom");
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    disco_value_t b[2] = {disco_value_int(1), disco_value_int(1)};
    CK_OK(disco_session_call_by_name(s, "test.add", b, 2, &r));
    ck_assert_int_eq(debug_get(s, r, 2).v.i, 2);
    disco_session_close(s);
}
END_TEST

/* allreduce (sum) of test.fill tensors on heap tensors, at 2, 3 and 4
 * workers: every worker gets the sum of every worker's pattern. */
START_TEST(test_allreduce)
{
    int n = 2 + _i;
    disco_session_t *s = open_threaded(n, DISCO_TRANSPORT_RING, 0);
    int64_t dims[1] = {1000};
    disco_value_t fa[3] = {disco_value_shape(dims, 1),
                           disco_value_dtype((DLDataType){kDLFloat, 32, 1}), disco_value_int(3)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    disco_value_t ra[2] = {tu_dref(x), disco_value_str("sum")};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", ra, 2, &y));
    CK_OK(disco_session_sync_all(s));
    for (int w = 0; w < n; w++) {
        disco_value_t v = debug_get(s, y, w);
        ck_assert_int_eq(v.type, DISCO_T_BYTES);
        ck_assert_uint_eq(v.len, 4000);
        const float *f = (const float *)v.v.bytes;
        for (int i = 0; i < 1000; i++) {
            double want = 0; /* the pattern of testlib.c, halved for floats */
            for (int k = 0; k < n; k++)
                want += (double)((i * 7 + k * 13 + 3) % 17 - 8) * 0.5;
            ck_assert_msg(f[i] == (float)want, "worker %d element %d: %g, want %g", w, i,
                          (double)f[i], want);
        }
        disco_value_clear(&v);
    }
    disco_session_close(s);
}
END_TEST

/* Scatter by element count, as TVM: worker 0's (3,4,3) tensor splits into
 * flat pieces of 36 / n elements when dimension 0 does not divide (here 2
 * workers), each piece the next run of elements. */
START_TEST(test_scatter_by_count)
{
    disco_session_t *s = open_threaded(2, DISCO_TRANSPORT_RING, 0);
    int64_t dims[3] = {3, 4, 3};
    disco_value_t fa[3] = {disco_value_shape(dims, 3),
                           disco_value_dtype((DLDataType){kDLInt, 32, 1}), disco_value_int(0)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    disco_value_t sa[1] = {tu_dref(x)};
    CK_OK(disco_session_call_by_name(s, "disco.scatter_from_worker0", sa, 1, &y));
    CK_OK(disco_session_sync_all(s));
    for (int w = 0; w < 2; w++) {
        disco_value_t v = debug_get(s, y, w);
        ck_assert_uint_eq(v.len, 18 * 4);
        const int32_t *p = (const int32_t *)v.v.bytes;
        for (int i = 0; i < 18; i++) {
            int e = 18 * w + i; /* worker 0's pattern (seed 0) */
            ck_assert_int_eq(p[i], (e * 7 + 0 * 13 + 0) % 17 - 8);
        }
        disco_value_clear(&v);
    }
    disco_session_close(s);
}
END_TEST

/* A worker function that hangs ends the sync at the deadline with
 * DISCO_E_TIMEOUT naming the worker, not in a hang; the thread is
 * cancelled, and close leaves no thread, fd or /dev/shm entry behind. */
START_TEST(test_hang_times_out)
{
    int threads = threads_now(), fds = tu_open_fds(), shm = tu_dev_shm_disco_entries();
    disco_session_t *s = open_threaded(3, DISCO_TRANSPORT_RING, 1000);
    disco_value_t a = disco_value_int(1);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.hang", &a, 1, &r));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_TIMEOUT);
    CK_HAS("worker 1");
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
    disco_session_close(s);
    ck_assert_int_eq(threads_now(), threads);
    ck_assert_int_eq(tu_open_fds(), fds);
    ck_assert_int_eq(tu_dev_shm_disco_entries(), shm);
}
END_TEST

/* After a hang, recover starts the worker threads again and the session
 * works. */
START_TEST(test_recover)
{
    int threads = threads_now();
    disco_session_t *s = open_threaded(2, DISCO_TRANSPORT_RING, 1000);
    disco_value_t a = disco_value_int(1);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.hang", &a, 1, &r));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_TIMEOUT);
    CK_OK(disco_session_recover(s));
    ck_assert_int_eq(threads_now(), threads + 1);
    disco_value_t b[2] = {disco_value_int(1), disco_value_int(2)};
    CK_OK(disco_session_call_by_name(s, "test.add", b, 2, &r));
    ck_assert_int_eq(debug_get(s, r, 1).v.i, 3);
    disco_session_close(s);
    ck_assert_int_eq(threads_now(), threads);
}
END_TEST

/* Open, work and close, with both transports: nothing is left behind. */
START_TEST(test_close_leaves_nothing)
{
    int threads = threads_now(), fds = tu_open_fds(), shm = tu_dev_shm_disco_entries();
    for (int t = 0; t < 2; t++) {
        disco_session_t *s = open_threaded(4, t ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING, 0);
        disco_value_t b[2] = {disco_value_int(1), disco_value_int(2)};
        disco_dref_t r;
        CK_OK(disco_session_call_by_name(s, "test.add", b, 2, &r));
        CK_OK(disco_session_sync_all(s));
        disco_session_close(s);
    }
    ck_assert_int_eq(threads_now(), threads);
    ck_assert_int_eq(tu_open_fds(), fds);
    ck_assert_int_eq(tu_dev_shm_disco_entries(), shm);
}
END_TEST

/* Device tensors are refused in a threaded session, saying why. */
START_TEST(test_device_refused)
{
    disco_session_t *s = open_threaded(2, DISCO_TRANSPORT_RING, 0);
    int64_t dims[1] = {4};
    disco_value_t a[2] = {disco_value_shape(dims, 1), disco_value_int(kDLExtDev)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fill_device", a, 2, &r));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_UNSUPPORTED);
    CK_HAS("threaded session");
    disco_session_close(s);
}
END_TEST

/* An unknown launch mode is still refused. */
START_TEST(test_bad_launch)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.launch = (disco_launch_t)7;
    disco_session_t *s;
    CK_STATUS(disco_session_open(&cfg, &s), DISCO_E_INVAL);
}
END_TEST

Suite *suite_threaded(void)
{
    Suite *s = suite_create("threaded");
    TCase *tc = tcase_create("threaded");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_calls);
    tcase_add_test(tc, test_calls_pipes);
    tcase_add_test(tc, test_registers);
    tcase_add_test(tc, test_error_names_worker);
    tcase_add_loop_test(tc, test_allreduce, 0, 3);
    tcase_add_test(tc, test_scatter_by_count);
    tcase_add_test(tc, test_hang_times_out);
    tcase_add_test(tc, test_recover);
    tcase_add_test(tc, test_close_leaves_nothing);
    tcase_add_test(tc, test_device_refused);
    tcase_add_test(tc, test_bad_launch);
    suite_add_tcase(s, tc);
    return s;
}
