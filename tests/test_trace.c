/* test_trace.c - profiling of worker scheduling: a known sequence of
 * commands gives the right slices, in order, on the right tracks, with
 * stamps that never go backwards; the JSON parses, carries flows, and reads
 * back to the same summary; the summary counts the calls made and names
 * the straggler; tracing can be off; DISCO_TRACE writes at close; the
 * rings wrap around. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "disco/trace.h"
#include "tests/session_util.h"

#define WORLD 3

static const char *const expected[] = {
    "get global function", "get global function", "disco.noop", "disco.noop",
    "disco.noop",          "disco.noop",          "disco.noop", "disco.worker_id",
    "disco.worker_id",     "sync worker",         "sync worker"};
#define NCMD (sizeof expected / sizeof expected[0])

/* Runs the known sequence: 2 get_func, 5 noop calls, 2 worker_id calls, 2 syncs. */
static disco_session_t *run_sequence(bool trace_off)
{
    disco_session_config_t cfg = disco_session_config_default(WORLD);
    cfg.trace_off = trace_off;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    disco_dref_t noop, wid, r;
    CK_OK(disco_session_get_func(s, "disco.noop", &noop));
    CK_OK(disco_session_get_func(s, "disco.worker_id", &wid));
    for (int i = 0; i < 5; i++)
        CK_OK(disco_session_call(s, noop, NULL, 0, &r));
    for (int i = 0; i < 2; i++)
        CK_OK(disco_session_call(s, wid, NULL, 0, &r));
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_sync(s, WORLD - 1));
    return s;
}

/* Every worker has one slice per command, in issue order, named after the
 * function, with enqueue <= start <= end and no overlap on a track; the
 * controller has every command, replies only for the syncs. */
START_TEST(test_known_sequence)
{
    disco_session_t *s = run_sequence(false);
    disco_trace_t *t;
    CK_OK(disco_session_trace(s, &t));
    ck_assert_int_eq(t->world, WORLD);
    ck_assert_uint_eq(t->ncmds, NCMD);
    ck_assert_uint_eq(t->nslices, NCMD * WORLD);
    ck_assert_uint_eq(t->dropped, 0);
    for (size_t i = 0; i < t->ncmds; i++) {
        const disco_trace_cmd_t *c = &t->cmds[i];
        ck_assert_str_eq(c->name, expected[i]);
        ck_assert(c->issued_us >= c->enqueue_us);
        if (i > 0)
            ck_assert(c->enqueue_us >= t->cmds[i - 1].enqueue_us && c->seq > t->cmds[i - 1].seq);
        ck_assert_msg((c->reply_us >= c->enqueue_us) == (i >= NCMD - 2),
                      "command %zu reply %.3f enqueue %.3f", i, c->reply_us, c->enqueue_us);
    }
    for (size_t i = 0; i < t->nslices; i++) {
        const disco_trace_slice_t *sl = &t->slices[i];
        size_t k = i % NCMD;
        ck_assert_int_eq(sl->worker, (int)(i / NCMD));
        ck_assert_str_eq(sl->name, expected[k]);
        ck_assert_uint_eq(sl->seq, t->cmds[k].seq);
        ck_assert_msg(sl->enqueue_us <= sl->start_us && sl->start_us <= sl->end_us,
                      "worker %d slice %zu: enqueue %.3f start %.3f end %.3f", sl->worker, k,
                      sl->enqueue_us, sl->start_us, sl->end_us);
        if (k > 0)
            ck_assert_msg(sl->start_us >= t->slices[i - 1].end_us,
                          "worker %d: slice %zu "
                          "starts before the previous one ends",
                          sl->worker, k);
    }
    /* a sync's reply comes after the answering worker ended... its work */
    ck_assert(t->cmds[NCMD - 1].reply_us >= t->slices[(WORLD - 1) * NCMD + NCMD - 2].end_us);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* The JSON parses; it has a track per worker plus the controller, a slice
 * per command on each worker track and a flow arrow (start and finish) for
 * each. */
START_TEST(test_json_valid)
{
    disco_session_t *s = run_sequence(false);
    disco_trace_t *t;
    CK_OK(disco_session_trace(s, &t));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CK_OK(disco_trace_write_json(t, f));
    fclose(f);
    json_error_t err;
    json_t *doc = json_loadb(buf, len, 0, &err);
    ck_assert_msg(doc != NULL, "trace JSON does not parse: %s", err.text);
    json_t *ev = json_object_get(doc, "traceEvents");
    size_t slices[WORLD + 1] = {0}, names = 0, flow_s = 0, flow_f = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        ck_assert(ph != NULL && tid >= 0 && tid <= WORLD);
        /* DevTools binds a flow only to a slice of its own category: every
         * command slice and every flow is "disco"; waits are "wait". */
        if (strcmp(ph, "X") == 0 || strcmp(ph, "s") == 0 || strcmp(ph, "f") == 0)
            ck_assert_msg(cat != NULL && (strcmp(cat, "disco") == 0 ||
                                          (strcmp(ph, "X") == 0 && strcmp(cat, "wait") == 0)),
                          "event %zu (ph %s) has category %s", i, ph, cat ? cat : "(none)");
        if (strcmp(ph, "X") == 0 && strcmp(cat, "wait") == 0)
            ck_assert_msg(tid >= 2, "a wait on the controller's or worker 0's track");
        else if (strcmp(ph, "X") == 0)
            slices[tid]++;
        else if (strcmp(ph, "M") == 0)
            names++;
        else if (strcmp(ph, "s") == 0)
            flow_s++;
        else if (strcmp(ph, "f") == 0)
            flow_f++;
    }
    ck_assert_uint_eq(names, WORLD + 2); /* process + controller + workers */
    for (int w = 0; w <= WORLD; w++)
        ck_assert_uint_eq(slices[w], NCMD);
    ck_assert_uint_eq(flow_s, NCMD * WORLD);
    ck_assert_uint_eq(flow_f, NCMD * WORLD);
    json_decref(doc);
    free(buf);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* The summary counts the calls made; read back from JSON it is the same. */
START_TEST(test_summary_round_trip)
{
    disco_session_t *s = run_sequence(false);
    disco_trace_t *t, *back;
    CK_OK(disco_session_trace(s, &t));
    char path[] = "/tmp/disco-test-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    CK_OK(disco_trace_write_json(t, f));
    fclose(f);
    CK_OK(disco_trace_load_json(path, &back));
    unlink(path);
    disco_trace_summary_t *a, *b;
    CK_OK(disco_trace_summarize(t, &a));
    CK_OK(disco_trace_summarize(back, &b));
    ck_assert_uint_eq(a->commands, NCMD);
    ck_assert_uint_eq(a->steps, 1); /* nothing ran between the two syncs */
    for (int w = 0; w < WORLD; w++)
        ck_assert_uint_eq(a->worker[w].commands, NCMD);
    size_t noop = 0, wid = 0;
    for (size_t i = 0; i < a->nfuncs; i++) {
        if (strcmp(a->func[i].name, "disco.noop") == 0)
            noop = a->func[i].count;
        if (strcmp(a->func[i].name, "disco.worker_id") == 0)
            wid = a->func[i].count;
    }
    ck_assert_uint_eq(noop, 5);
    ck_assert_uint_eq(wid, 2);
    ck_assert_uint_eq(b->commands, a->commands);
    ck_assert_uint_eq(b->steps, a->steps);
    ck_assert_uint_eq(b->nfuncs, a->nfuncs);
    for (int w = 0; w < WORLD; w++) {
        ck_assert_uint_eq(b->worker[w].commands, a->worker[w].commands);
        ck_assert_double_eq_tol(b->worker[w].queue_p50_us, a->worker[w].queue_p50_us, 0.01);
    }
    for (size_t i = 0; i < a->nfuncs; i++) {
        ck_assert_str_eq(b->func[i].name, a->func[i].name);
        ck_assert_uint_eq(b->func[i].count, a->func[i].count);
    }
    disco_trace_summary_free(a);
    disco_trace_summary_free(b);
    disco_trace_free(t);
    disco_trace_free(back);
    disco_session_close(s);
}
END_TEST

/* A worker that takes 100 ms longer in a step is that step's straggler,
 * at least 15 ms behind the first to finish (100 ms leaves room for the
 * first finisher to be descheduled ~10 ms, as under ASan with 3 workers
 * and the controller on 2 cores). */
START_TEST(test_straggler)
{
    disco_session_config_t cfg = disco_session_config_default(WORLD);
    disco_session_t *s = tu_open_with_testlib(&cfg);
    disco_value_t a[2] = {disco_value_int(2), disco_value_int(100)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.spin_on", a, 2, &r));
    for (int w = 0; w < WORLD; w++)
        CK_OK(disco_session_sync(s, w));
    disco_trace_t *t;
    disco_trace_summary_t *sum;
    CK_OK(disco_session_trace(s, &t));
    CK_OK(disco_trace_summarize(t, &sum));
    ck_assert_int_eq(sum->worst_step_worker, 2);
    ck_assert_msg(sum->worst_step_lag_us >= 15000, "lag %.1f us", sum->worst_step_lag_us);
    ck_assert_uint_ge(sum->worker[2].straggler_steps, 1);
    disco_trace_summary_free(sum);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* Tracing off: no snapshot, and the session works as before. */
START_TEST(test_trace_off)
{
    disco_session_t *s = run_sequence(true);
    disco_trace_t *t = NULL;
    CK_STATUS(disco_session_trace(s, &t), DISCO_E_INVAL);
    CK_HAS("off");
    ck_assert_ptr_null(t);
    disco_session_close(s);
}
END_TEST

/* DISCO_TRACE=path: the session writes its trace there at close. */
START_TEST(test_env_writes_at_close)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/disco-test-trace-env-%d.json", (int)getpid());
    setenv("DISCO_TRACE", path, 1);
    disco_session_close(run_sequence(false));
    unsetenv("DISCO_TRACE");
    disco_trace_t *t;
    CK_OK(disco_trace_load_json(path, &t));
    unlink(path);
    ck_assert_uint_eq(t->ncmds, NCMD);
    ck_assert_uint_eq(t->nslices, NCMD * WORLD);
    disco_trace_free(t);
}
END_TEST

/* A default session of 2 workers (traced) and disco.noop in *noop. */
static disco_session_t *open_noop(disco_dref_t *noop)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    CK_OK(disco_session_get_func(s, "disco.noop", noop));
    return s;
}

/* Past the ring's capacity the oldest records go; what is kept is the
 * latest, in order, and the loss is counted. */
START_TEST(test_wrap_around)
{
    disco_dref_t noop, r;
    disco_session_t *s = open_noop(&noop);
    for (int i = 0; i < 9000; i++) {
        CK_OK(disco_session_call(s, noop, NULL, 0, &r));
        CK_OK(disco_session_free_reg(s, r));
    }
    CK_OK(disco_session_sync(s, 1));
    disco_trace_t *t;
    CK_OK(disco_session_trace(s, &t));
    ck_assert_uint_eq(t->nslices, 2 * 8192);
    ck_assert_uint_gt(t->dropped, 0);
    for (size_t i = 1; i < t->nslices; i++)
        if (t->slices[i].worker == t->slices[i - 1].worker)
            ck_assert(t->slices[i].seq == t->slices[i - 1].seq + 1 &&
                      t->slices[i].start_us >= t->slices[i - 1].end_us);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* Minor page faults of process pid so far (/proc/PID/stat, field 10). */
static unsigned long long minflt_of(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    ck_assert_ptr_nonnull(f);
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long n = 0;
    ck_assert(p != NULL && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %llu", &n) == 1);
    return n;
}

/* Tracing costs the steps no page faults: the controller's records and
 * each worker's ring are had before the first command, and the records are
 * not shared with the forked workers (written after the fork, each page was
 * copied at its first store: a fault every 85 steps on the controller, and
 * every 128 on a worker, through the first lap; issue 21, the p99 of a
 * step). */
START_TEST(test_no_faults_in_steps)
{
    disco_dref_t noop, r;
    disco_session_t *s = open_noop(&noop);
    for (int i = 0; i < 600; i++) { /* a lap of the command ring, and more */
        CK_OK(disco_session_call_sync_all(s, noop, NULL, 0, &r));
        CK_OK(disco_session_free_reg(s, r));
    }
    /* 9200 steps: past the 8192 records of a lap. */
    int w1 = disco_session_worker_pid(s, 1);
    unsigned long long c0 = minflt_of(getpid()), w0 = minflt_of(w1);
    for (int i = 0; i < 9200; i++) {
        CK_OK(disco_session_call_sync_all(s, noop, NULL, 0, &r));
        CK_OK(disco_session_free_reg(s, r));
    }
    unsigned long long dc = minflt_of(getpid()) - c0, dw = minflt_of(w1) - w0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* A sanitizer's runtime faults in pages of its own as code runs (the
     * ASan CI run counted 586 on the controller here): the count says
     * nothing about disco's memory under it. */
    (void)dc, (void)dw;
#else
    ck_assert_msg(dc < 32 && dw < 32, "page faults in %d steps: controller %llu, worker 1 %llu",
                  9200, dc, dw);
#endif
    disco_session_close(s);
}
END_TEST

/* Files that are not disco traces are refused with the reason. */
START_TEST(test_load_errors)
{
    disco_trace_t *t;
    CK_STATUS(disco_trace_load_json("/nonexistent/trace.json", &t), DISCO_E_SYS);
    char path[] = "/tmp/disco-test-trace-bad-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "{\"traceEvents\": [", 17), 17);
    close(fd);
    CK_STATUS(disco_trace_load_json(path, &t), DISCO_E_PROTOCOL);
    FILE *f = fopen(path, "w");
    fputs("{\"traceEvents\": [], \"other\": 1}", f);
    fclose(f);
    CK_STATUS(disco_trace_load_json(path, &t), DISCO_E_PROTOCOL);
    CK_HAS("not a disco trace");
    f = fopen(path, "w");
    fputs("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"x\", \"tid\": 1, \"ts\": 1}], "
          "\"otherData\": {\"workers\": 1}}",
          f);
    fclose(f);
    CK_STATUS(disco_trace_load_json(path, &t), DISCO_E_PROTOCOL);
    CK_HAS("event 0");
    unlink(path);
}
END_TEST

Suite *suite_trace(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_known_sequence);
    tcase_add_test(tc, test_json_valid);
    tcase_add_test(tc, test_summary_round_trip);
    tcase_add_test(tc, test_straggler);
    tcase_add_test(tc, test_trace_off);
    tcase_add_test(tc, test_env_writes_at_close);
    tcase_add_test(tc, test_wrap_around);
    tcase_add_test(tc, test_no_faults_in_steps);
    tcase_add_test(tc, test_load_errors);
    suite_add_tcase(s, tc);
    return s;
}
