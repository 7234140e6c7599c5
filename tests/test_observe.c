/* test_observe.c - the status region, views, the watchdog and observers
 * (disco/observe.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/observe.h"
#include "disco/shm/segment.h"
#include "disco/trace.h"
#include "scheduler/session/session_impl.h"
#include "tests/session_util.h"
#include "tests/testutil.h"

#define MS 1000000LL

static disco_session_config_t config(int n)
{
    disco_session_config_t c = disco_session_config_default(n);
    c.call_timeout_ms = 20000;
    return c;
}

static void call_int2(disco_session_t *s, const char *fn, int64_t a, int64_t b)
{
    disco_value_t v[2] = {disco_value_int(a), disco_value_int(b)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, fn, v, 2, &r));
    CK_OK(disco_session_free_reg(s, r));
}

/* A view of s once every worker has finished every command issued (they
 * run asynchronously: a sync waits for one worker only, and a worker
 * counts a command done after its reply went out): each at the last
 * command and not busy in it. Polls, bounded. */
static void settled_view(disco_session_t *s, disco_session_view_t *v)
{
    int64_t deadline = disco_now_ns() + 5000 * MS;
    for (;;) {
        CK_OK(disco_session_view(s, v));
        bool all = true;
        for (int w = 0; w < v->world; w++)
            all = all && v->workers[w].seq == v->issued && v->workers[w].state != DISCO_WORKER_BUSY;
        if (all)
            return;
        disco_view_free(v);
        ck_assert_msg(disco_now_ns() < deadline, "the workers did not finish within 5 s");
        usleep(1000);
    }
}

static const disco_func_view_t *find_func(const disco_session_view_t *v, const char *name)
{
    for (int i = 0; i < v->nfuncs; i++)
        if (strcmp(v->funcs[i].name, name) == 0)
            return &v->funcs[i];
    return NULL;
}

/* After a run of calls and a sync of every worker, a view shows each
 * worker at the last command issued, none queued, its pid, every command
 * done, the called function by name with one call per worker per call,
 * and known, consistent times (tracing on). */
START_TEST(test_view_after_calls)
{
    disco_session_config_t c = config(3);
    disco_session_t *s = tu_open_with_testlib(&c);
    for (int i = 0; i < 10; i++)
        call_int2(s, "test.spin_on", 1, 1);
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    disco_session_view_t v;
    settled_view(s, &v);
    ck_assert_int_eq(v.world, 3);
    ck_assert_int_eq(v.pid, getpid());
    ck_assert_int_eq(v.health, DISCO_OK);
    ck_assert(v.tracing);
    ck_assert_int_eq(v.wait, DISCO_VIEW_WAIT_NONE);
    ck_assert_uint_gt(v.issued, 30); /* load, 10 x (get, call, free x2), syncs */
    for (int w = 0; w < 3; w++) {
        const disco_worker_view_t *x = &v.workers[w];
        ck_assert_int_eq(x->worker, w);
        ck_assert_int_eq(x->pid, disco_session_worker_pid(s, w));
        ck_assert_uint_eq(x->seq, v.issued);
        ck_assert_uint_eq(x->queued, 0);
        ck_assert_uint_eq(x->done, v.issued); /* every worker runs every command */
        ck_assert_msg(x->state == DISCO_WORKER_IDLE || x->state == DISCO_WORKER_PARKED,
                      "worker %d is %s", w, disco_worker_state_name(x->state));
        ck_assert_str_eq(x->name, "sync worker");
        ck_assert(x->busy_s >= 0 && x->spin_s >= 0 && x->park_s >= 0);
    }
    /* Worker 1 spun 1 ms in each of the 10 calls. */
    ck_assert_msg(v.workers[1].busy_s >= 0.010, "worker 1 busy %.4f s", v.workers[1].busy_s);
    const disco_func_view_t *f = find_func(&v, "test.spin_on");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->calls, 30);
    ck_assert_int_eq(f->workers, 3);
    ck_assert(f->total_s >= 0.010);
    disco_view_free(&v);
    disco_session_close(s);
}
END_TEST

/* Two functions whose keys share a home entry of a worker's function table
 * (test.add and test.sleep_on: FNV-1a of the name, modulo 32) both keep
 * their counts (before probing, the second took the first's entry). */
START_TEST(test_functions_sharing_an_entry)
{
    disco_session_config_t c = config(2);
    disco_session_t *s = tu_open_with_testlib(&c);
    for (int i = 0; i < 3; i++)
        call_int2(s, "test.add", 1, 2);
    for (int i = 0; i < 2; i++)
        call_int2(s, "test.sleep_on", 9, 0); /* no worker 9: nobody sleeps */
    CK_OK(disco_session_sync(s, 1));
    disco_session_view_t v;
    settled_view(s, &v);
    const disco_func_view_t *add = find_func(&v, "test.add"), *sl = find_func(&v, "test.sleep_on");
    ck_assert_ptr_nonnull(add);
    ck_assert_ptr_nonnull(sl);
    ck_assert_uint_eq(add->calls, 6);
    ck_assert_uint_eq(sl->calls, 4);
    disco_view_free(&v);
    disco_session_close(s);
}
END_TEST

/* With tracing off the counts and states still move; every time is
 * unknown (-1), never a made-up 0. */
START_TEST(test_view_trace_off)
{
    disco_session_config_t c = config(2);
    c.trace_off = true;
    disco_session_t *s = tu_open_with_testlib(&c);
    call_int2(s, "test.spin_on", 1, 1);
    CK_OK(disco_session_sync(s, 1));
    disco_session_view_t v;
    settled_view(s, &v);
    ck_assert(!v.tracing);
    ck_assert_uint_eq(v.workers[1].done, v.issued);
    ck_assert(v.workers[1].busy_s < 0 && v.workers[1].spin_s < 0 && v.workers[1].in_cmd_s < 0);
    const disco_func_view_t *f = find_func(&v, "test.spin_on");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->calls, 2);
    ck_assert(f->total_s < 0);
    disco_view_free(&v);
    disco_session_close(s);
}
END_TEST

/* A worker hung in a function is named by the watchdog once the wait for
 * it passes the threshold, while it is still hung: which worker, the
 * function, its command number; the others wait at the sync. One report
 * for the wait, also in the trace; the call deadline still ends the wait. */
START_TEST(test_watchdog_names_hung_worker)
{
    disco_session_config_t c = config(4);
    c.call_timeout_ms = 3000;
    c.watchdog_ms = 300;
    disco_session_t *s = tu_open_with_testlib(&c);
    int err = tu_capture_stderr();
    disco_value_t a = disco_value_int(2);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.hang", &a, 1, &r));
    disco_session_view_t before;
    CK_OK(disco_session_view(s, &before));
    uint64_t hang_seq = before.issued; /* the call (the free of its function waits to ride) */
    disco_view_free(&before);
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_TIMEOUT);
    ck_assert_msg(disco_now_ns() - t0 < 5000 * MS, "the deadline did not end the wait");
    char *text = tu_read_all(err);
    char want[160];
    snprintf(want, sizeof want, "worker 2 is ");
    ck_assert_msg(strstr(text, want) != NULL, "no report naming worker 2:\n%s", text);
    snprintf(want, sizeof want, "into test.hang (command #%llu)", (unsigned long long)hang_seq);
    ck_assert_msg(strstr(text, want) != NULL, "no \"%s\" in:\n%s", want, text);
    ck_assert_msg(strstr(text, "waited") != NULL && strstr(text, "for worker 2's reply") != NULL,
                  "the controller's wait is not named:\n%s", text);
    ck_assert_msg(strstr(text, "workers 0, 1, 3 wait at sync worker #") != NULL,
                  "the waiting workers are not named:\n%s", text);
    const char *first = strstr(text, "disco watchdog:");
    ck_assert_ptr_nonnull(first);
    ck_assert_msg(strstr(first + 1, "disco watchdog:") == NULL, "more than one report:\n%s", text);
    free(text);
    /* In the trace: one mark, the same report, about 300 ms into the wait. */
    disco_trace_t *t;
    CK_OK(disco_session_trace(s, &t));
    ck_assert_uint_eq(t->nmarks, 1);
    ck_assert_ptr_nonnull(strstr(t->marks[0].text, "into test.hang"));
    double sync_enq = -1;
    for (size_t i = 0; i < t->ncmds; i++)
        if (t->cmds[i].seq == hang_seq + 2) /* the function's free, then the sync */
            sync_enq = t->cmds[i].enqueue_us;
    ck_assert(sync_enq > 0);
    double late_ms = (t->marks[0].at_us - sync_enq) / 1000.0;
    ck_assert_msg(late_ms >= 300 && late_ms < 300 + 700, "reported %.0f ms into the wait", late_ms);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* Inside a collective, the members that have not arrived are named, and
 * the ones that have are said to wait in it. */
START_TEST(test_watchdog_collective_not_arrived)
{
    disco_session_config_t c = config(4);
    c.watchdog_ms = 200;
    disco_session_t *s = tu_open_with_testlib(&c);
    int err = tu_capture_stderr();
    int64_t shape[1] = {256};
    disco_value_t a[3] = {disco_value_shape(shape, 1),
                          disco_value_dtype((DLDataType){kDLFloat, 32, 1}), disco_value_int(1)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", a, 3, &x));
    call_int2(s, "test.sleep_on", 3, 1000);
    disco_value_t b[3] = {tu_dref(x), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", b, 3, &y));
    for (int w = 0; w < 4; w++)
        CK_OK(disco_session_sync(s, w));
    char *text = tu_read_all(err);
    ck_assert_msg(strstr(text, "worker 0 has waited") != NULL &&
                      strstr(text, "in disco.allreduce") != NULL,
                  "worker 0's wait in the collective is not named:\n%s", text);
    ck_assert_msg(strstr(text, "worker 3 is ") != NULL &&
                      strstr(text, "into test.sleep_on") != NULL &&
                      strstr(text, "it has not arrived") != NULL,
                  "the late member is not named:\n%s", text);
    ck_assert_msg(strstr(text, "workers 0, 1, 2 wait at disco.allreduce #") != NULL,
                  "the members that arrived are not named:\n%s", text);
    free(text);
    disco_session_close(s);
}
END_TEST

/* A worker at rest parks; the view counts the time parked and the trace
 * shows it as "parked" slices on that worker's track, between commands. */
START_TEST(test_park_counted)
{
    disco_session_config_t c = config(2);
    disco_session_t *s = tu_open_with_testlib(&c);
    CK_OK(disco_session_sync(s, 1));
    disco_session_view_t v = {0};
    int64_t deadline = disco_now_ns() + 5000 * MS;
    for (;;) { /* poll the view until worker 1 is seen parked */
        CK_OK(disco_session_view(s, &v));
        bool parked = v.workers[1].state == DISCO_WORKER_PARKED;
        disco_view_free(&v);
        if (parked)
            break;
        ck_assert_msg(disco_now_ns() < deadline, "worker 1 never parked");
        usleep(1000);
    }
    int64_t t_parked = disco_now_ns();
    while (disco_now_ns() - t_parked < 20 * MS) /* let it rest (not a synchronization) */
        usleep(1000);
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_view(s, &v));
    ck_assert_msg(v.workers[1].park_s >= 0.015, "parked %.4f s", v.workers[1].park_s);
    disco_view_free(&v);
    disco_trace_t *t;
    CK_OK(disco_session_trace(s, &t));
    size_t parked = 0;
    for (size_t i = 0; i < t->nwaits; i++) {
        const disco_trace_wait_t *w = &t->waits[i];
        ck_assert_int_eq(w->worker, 1);
        ck_assert(w->end_us > w->start_us);
        if (w->parked && w->end_us - w->start_us >= 15000)
            parked++;
    }
    ck_assert_uint_ge(parked, 1);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* Another process's session, read through /proc/PID/fd: its geometry,
 * pids, function names and counts; no session, or no process, is a clear
 * DISCO_E_INVAL. */
START_TEST(test_observer_other_process)
{
    int go[2], ready[2];
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(ready), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        disco_session_config_t c = config(3);
        disco_session_t *s = tu_open_with_testlib(&c);
        call_int2(s, "test.spin_on", 2, 1);
        /* Every worker, not only worker 2: the parent reads the view once,
         * and a worker no sync waited for may still be commands behind (a
         * loaded machine showed worker seq 6 against 12 issued). */
        CK_OK(disco_session_sync_all(s));
        char b = 1, r;
        if (write(ready[1], &b, 1) != 1 || read(go[0], &r, 1) != 1)
            _exit(3);
        disco_session_close(s);
        _exit(0);
    }
    char b;
    ck_assert_int_eq(read(ready[0], &b, 1), 1);
    disco_observer_t *o;
    int count = -1;
    CK_OK(disco_observer_open(child, 0, &count, &o));
    ck_assert_int_eq(count, 1);
    disco_session_view_t v;
    CK_OK(disco_observer_read(o, &v));
    ck_assert_int_eq(v.pid, child);
    ck_assert_int_eq(v.world, 3);
    ck_assert_int_eq(v.health, DISCO_OK);
    for (int w = 0; w < 3; w++) {
        ck_assert_int_gt(v.workers[w].pid, 0);
        ck_assert_int_eq(kill(v.workers[w].pid, 0), 0);
        ck_assert_uint_eq(v.workers[w].seq, v.issued);
        ck_assert(v.workers[w].cpu_s >= 0);
    }
    ck_assert_int_eq(v.workers[0].pid, child);
    const disco_func_view_t *f = find_func(&v, "test.spin_on");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->calls, 3);
    disco_view_free(&v);
    disco_observer_close(o);
    CK_STATUS(disco_observer_open(child, 1, NULL, &o), DISCO_E_INVAL);
    ck_assert_ptr_nonnull(strstr(disco_last_error(), "no session 1"));
    ck_assert_int_eq(write(go[1], &b, 1), 1);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* This test's process holds no session; the child is gone. */
    CK_STATUS(disco_observer_open(getpid(), 0, NULL, &o), DISCO_E_INVAL);
    ck_assert_ptr_nonnull(strstr(disco_last_error(), "holds no disco session"));
    CK_STATUS(disco_observer_open(child, 0, NULL, &o), DISCO_E_INVAL);
}
END_TEST

/* After a worker's death and a recovery, the view shows the new processes,
 * a healthy session with no cause left from the break, and the workers
 * running the commands issued since. */
START_TEST(test_view_after_recover)
{
    disco_session_config_t c = config(3);
    disco_session_t *s = tu_open_with_testlib(&c);
    pid_t old = disco_session_worker_pid(s, 2);
    ck_assert_int_eq(kill(old, SIGKILL), 0);
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_WORKER_DIED);
    disco_session_view_t v;
    CK_OK(disco_session_view(s, &v));
    ck_assert_int_eq(v.health, DISCO_E_WORKER_DIED);
    ck_assert_ptr_nonnull(strstr(v.why, "killed by signal 9"));
    disco_view_free(&v);
    CK_OK(disco_session_recover(s));
    call_int2(s, "test.spin_on", 1, 1);
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    settled_view(s, &v);
    ck_assert_int_eq(v.health, DISCO_OK);
    ck_assert_str_eq(v.why, "");
    for (int w = 1; w < 3; w++) {
        ck_assert_int_eq(v.workers[w].pid, disco_session_worker_pid(s, w));
        ck_assert_int_ne(v.workers[w].pid, old);
        ck_assert_uint_eq(v.workers[w].seq, v.issued);
    }
    disco_view_free(&v);
    disco_session_close(s);
}
END_TEST

/* A segment that calls itself a session but whose header does not hold is
 * refused (DISCO_E_BAD_MAGIC), never read past its bounds. */
START_TEST(test_observer_refuses_bad_header)
{
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-session", 1 << 20, &seg));
    memset(disco_segment_data(&seg), 0x5a, 4096);
    disco_observer_t *o;
    CK_STATUS(disco_observer_open(getpid(), 0, NULL, &o), DISCO_E_BAD_MAGIC);
    disco_segment_close(&seg);
}
END_TEST

/* The observed session truncates its segment (a bug, or a hostile
 * process): the segment is sealed, so the truncation fails and an
 * observer's next read still works (before the seal, the read died of
 * SIGBUS). */
START_TEST(test_observer_survives_shrink)
{
    disco_session_config_t c = config(2);
    disco_session_t *s = tu_open_with_testlib(&c);
    disco_observer_t *o;
    CK_OK(disco_observer_open(getpid(), 0, NULL, &o));
    int rc = ftruncate(s->seg.fd, 4096), err = errno;
    disco_session_view_t v;
    CK_OK(disco_observer_read(o, &v)); /* unsealed, this read died of SIGBUS */
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(err, EPERM);
    ck_assert_int_eq(v.world, 2);
    disco_view_free(&v);
    disco_observer_close(o);
    disco_session_close(s);
}
END_TEST

/* A memfd named as a session, holding a real session's bytes but not
 * sealed, is refused before it is mapped: its owner could truncate it
 * under the observer. */
START_TEST(test_observer_refuses_unsealed)
{
    disco_session_config_t c = config(2);
    disco_session_t *s = tu_open_with_testlib(&c);
    int fd = memfd_create("disco-session", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    size_t n = s->seg.size < (64u << 20) ? s->seg.size : (64u << 20);
    ck_assert_int_eq(ftruncate(fd, (off_t)s->seg.size), 0);
    ck_assert_int_eq(pwrite(fd, s->seg.base, n, 0), (ssize_t)n);
    /* The fake comes after the real one in fd order: session 1. */
    int count = 0;
    disco_observer_t *o;
    CK_OK(disco_observer_open(getpid(), 0, &count, &o));
    disco_observer_close(o);
    ck_assert_int_eq(count, 2);
    CK_STATUS(disco_observer_open(getpid(), 1, NULL, &o), DISCO_E_BAD_MAGIC);
    ck_assert_msg(strstr(disco_last_error(), "not sealed") != NULL, "%s", disco_last_error());
    close(fd);
    disco_session_close(s);
}
END_TEST

/* A segment that names pids that are not its session's (here the test
 * runner's process, alive and readable, neither the controller nor a child
 * of it nor a holder of the segment) shows none of that process's figures:
 * the pid is shown as 0 (unknown), its CPU time unknown; the real workers
 * are still shown with theirs. */
START_TEST(test_observer_checks_pids)
{
    disco_session_config_t c = config(3);
    disco_session_t *s = tu_open_with_testlib(&c);
    CK_OK(disco_session_sync_all(s));
    int stranger = (int)getppid();
    ck_assert_int_gt(stranger, 1);
    atomic_store(&disco__stat_worker(s->stat, 1)->pid, stranger);
    disco_observer_t *o;
    CK_OK(disco_observer_open(getpid(), 0, NULL, &o));
    disco_session_view_t v;
    CK_OK(disco_observer_read(o, &v));
    ck_assert_int_eq(v.pid, getpid());
    ck_assert_int_eq(v.workers[1].pid, 0);
    ck_assert(v.workers[1].cpu_s < 0);
    ck_assert_int_eq(v.workers[2].pid, disco_session_worker_pid(s, 2));
    ck_assert(v.workers[2].cpu_s >= 0);
    disco_view_free(&v);
    /* The controller's pid a lie too: neither the session nor any worker
     * shows the stranger, and no worker shows a CPU time without a pid. */
    s->ctl->controller_pid = stranger;
    CK_OK(disco_observer_read(o, &v));
    ck_assert_int_ne(v.pid, stranger);
    for (int w = 0; w < v.world; w++) {
        ck_assert_int_ne(v.workers[w].pid, stranger);
        ck_assert_msg(v.workers[w].pid != 0 || v.workers[w].cpu_s < 0,
                      "worker %d: no pid but a CPU time", w);
    }
    disco_view_free(&v);
    s->ctl->controller_pid = getpid();
    atomic_store(&disco__stat_worker(s->stat, 1)->pid, disco_session_worker_pid(s, 1));
    disco_observer_close(o);
    disco_session_close(s);
}
END_TEST

/* A segment whose first global id leaves no room for its workers' ids in
 * an int (2**32 - 2 narrowed would show workers -2, -1, 0; INT_MAX would
 * overflow) is shown from 0: ids stay gid_base + i, never negative. */
START_TEST(test_observer_bounds_gid_base)
{
    disco_session_config_t c = config(3);
    disco_session_t *s = tu_open_with_testlib(&c);
    CK_OK(disco_session_sync_all(s));
    disco_observer_t *o;
    CK_OK(disco_observer_open(getpid(), 0, NULL, &o));
    const uint32_t lies[] = {UINT32_MAX - 1, (uint32_t)INT32_MAX, (uint32_t)INT32_MAX - 1};
    for (int k = 0; k < 3; k++) {
        s->ctl->gid_base = lies[k];
        disco_session_view_t v;
        CK_OK(disco_observer_read(o, &v));
        ck_assert_msg(v.gid_base == 0, "gid_base %u shown as %d", lies[k], v.gid_base);
        for (int w = 0; w < v.world; w++)
            ck_assert_int_eq(v.workers[w].worker, w);
        disco_view_free(&v);
    }
    s->ctl->gid_base = (uint32_t)INT32_MAX - 2; /* the last that fits: shown as is */
    disco_session_view_t v;
    CK_OK(disco_observer_read(o, &v));
    ck_assert_int_eq(v.gid_base, INT32_MAX - 2);
    ck_assert_int_eq(v.workers[2].worker, INT32_MAX);
    disco_view_free(&v);
    s->ctl->gid_base = 0;
    disco_observer_close(o);
    disco_session_close(s);
}
END_TEST

Suite *suite_observe(void)
{
    Suite *s = suite_create("observe");
    TCase *tc = tcase_create("observe");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_view_after_calls);
    tcase_add_test(tc, test_view_trace_off);
    tcase_add_test(tc, test_functions_sharing_an_entry);
    tcase_add_test(tc, test_watchdog_names_hung_worker);
    tcase_add_test(tc, test_watchdog_collective_not_arrived);
    tcase_add_test(tc, test_park_counted);
    tcase_add_test(tc, test_observer_other_process);
    tcase_add_test(tc, test_observer_refuses_bad_header);
    tcase_add_test(tc, test_observer_survives_shrink);
    tcase_add_test(tc, test_observer_refuses_unsealed);
    tcase_add_test(tc, test_observer_checks_pids);
    tcase_add_test(tc, test_observer_bounds_gid_base);
    tcase_add_test(tc, test_view_after_recover);
    suite_add_tcase(s, tc);
    return s;
}
