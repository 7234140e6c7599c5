/* test_top.c - `disco top PID` and `disco dump PID` against a running
 * disco-demo (--hold keeps its decoder stepping): every field of a JSON
 * frame present and sane, the watchdog's report naming every worker, the
 * Prometheus output well formed, live mode ending with the session or on
 * SIGINT, unknown times (tracing off) as null, --session, and clear
 * refusals (exit 1) for a process without a session and for no process. Nothing is left running
 * afterwards. */
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "disco/clock.h"
#include "disco/session.h"
#include "tests/testutil.h"

#define WORKERS     4
#define DEADLINE_MS 40000.0

typedef struct demo {
    char dir[64];
    pid_t pid;
} demo_t;

/* Polls for a short while: the gap between two looks at a condition. */
static void nap(void)
{
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
}

/* Forks and execs argv with stdout (and stderr) into out_path; the child
 * dies with the test (tu_fork). */
static pid_t spawn(char *const argv[], const char *out_path)
{
    pid_t pid = tu_fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Whether the file at path holds text. */
static bool file_has(const char *path, const char *text)
{
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* Starts a small decoder of WORKERS workers that holds its session (steps
 * on) for a minute, and waits until it says it holds. */
static void demo_start(demo_t *d)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/disco-top-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->dir));
    char bin[512], trace[128], out[128];
    snprintf(bin, sizeof bin, "%s/disco-demo", DISCO_TEST_BIN);
    snprintf(trace, sizeof trace, "%s/t.json", d->dir);
    snprintf(out, sizeof out, "%s/demo.out", d->dir);
    char *argv[] = {bin, "--decoder-only", "--device", "cpu", "--workers", "4", "--vocab", "64",
                    "--d-model", "32", "--layers", "2", "--heads", "4", "--d-ff", "64", "--tokens",
                    "4", "--hold", "60",
                    /* the form with a command per layer held: its functions'
                     * rates are what test_top_json reads */
                    "--controller-driven", "--trace", trace, NULL};
    d->pid = spawn(argv, out);
    int64_t t0 = disco_now_ns();
    while (!file_has(out, "holding:")) {
        int st;
        ck_assert_msg(waitpid(d->pid, &st, WNOHANG) == 0, "disco-demo ended before holding");
        ck_assert_msg(tu_ms_since(t0) < DEADLINE_MS, "disco-demo did not start holding");
        nap();
    }
}

/* Ends the demo with SIGTERM: it must exit 0 (its decoder matched). */
static void demo_stop(demo_t *d)
{
    ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
    tu_wait_ok(d->pid, "disco-demo --hold");
    char cmd[160], out[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d->dir);
    tu_run(cmd, out, sizeof out);
}

/* Waits until process pid is gone (no such process). */
static void wait_gone(int pid)
{
    int64_t t0 = disco_now_ns();
    while (kill(pid, 0) == 0 || errno != ESRCH) {
        ck_assert_msg(tu_ms_since(t0) < DEADLINE_MS, "process %d still runs", pid);
        nap();
    }
}

/* Runs `disco ARGS` (stderr with stdout) and returns its exit code. */
static int disco(const char *args, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/disco %s 2>&1", DISCO_TEST_BIN, args);
    return tu_run(cmd, out, cap);
}

static json_t *key(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    ck_assert_msg(v != NULL, "the frame lacks \"%s\"", k);
    return v;
}

/* A number in lo..hi (integers count as numbers). */
static double in_range(json_t *o, const char *k, double lo, double hi)
{
    json_t *v = key(o, k);
    ck_assert_msg(json_is_number(v), "\"%s\" is not a number", k);
    double x = json_number_value(v);
    ck_assert_msg(x >= lo && x <= hi, "\"%s\" = %g, not in %g..%g", k, x, lo, hi);
    return x;
}

/* `disco top --once --json [--session K] PID` of a running session, parsed. */
static json_t *frame_of_session(int pid, int session)
{
    static char out[1 << 16];
    char args[96];
    snprintf(args, sizeof args, "top --once --json --interval 100 --session %d %d", session, pid);
    ck_assert_msg(disco(args, out, sizeof out) == 0, "disco %s failed: %s", args, out);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", e.text, out);
    return j;
}

static json_t *frame_of(int pid)
{
    return frame_of_session(pid, 0);
}

static void check_worker(json_t *w, int i, int demo_pid, int ncpus)
{
    ck_assert_int_eq(in_range(w, "worker", i, i), i);
    int pid = (int)in_range(w, "pid", 1, 1 << 30);
    ck_assert_msg(kill(pid, 0) == 0, "worker %d's pid %d is not a live process", i, pid);
    if (i == 0)
        ck_assert_int_eq(pid, demo_pid); /* worker 0 is the controller's thread */
    in_range(w, "cpu_pct", 0, 100.0 * ncpus + 10);
    const char *state = json_string_value(key(w, "state"));
    ck_assert_msg(state != NULL && (strcmp(state, "busy") == 0 || strcmp(state, "idle") == 0 ||
                                    strcmp(state, "parked") == 0),
                  "worker %d: state %s", i, state);
    in_range(w, "seq", 1, 1e15);
    ck_assert_msg(json_is_string(key(w, "function")), "worker %d: no function", i);
    json_t *in_cmd = key(w, "in_cmd_s"); /* known while busy (tracing on), else null */
    ck_assert(json_is_null(in_cmd) || json_number_value(in_cmd) >= 0);
    in_range(w, "done", 1, 1e15);
    in_range(w, "done_per_s", 1e-9, 1e9); /* the demo steps on: commands finish */
    in_range(w, "queued", 0, 1e9);
    double sum = in_range(w, "busy_pct", 0, 100) + in_range(w, "spin_pct", 0, 100) +
                 in_range(w, "park_pct", 0, 100);
    ck_assert_msg(fabs(sum - 100) < 0.01, "worker %d: shares add up to %g", i, sum);
}

/* A frame of `disco top --once --json` on a running demo holds every field
 * the issue names, each sane: the world and pids of the demo's session
 * (live processes), commands done and done per second above 0 on every
 * worker, shares within 0..100 adding up to 100, the demo's functions with
 * calls, rates and mean times, health ok and the controller's wait; and
 * after the demo ends, none of its processes is left. */
START_TEST(test_top_json)
{
    demo_t d = {.pid = 0};
    demo_start(&d);
    json_t *j = frame_of(d.pid);
    ck_assert_int_eq(in_range(j, "pid", d.pid, d.pid), d.pid);
    ck_assert_int_eq(in_range(j, "session", 0, 0), 0);
    ck_assert_int_eq(in_range(j, "world", WORKERS, WORKERS), WORKERS);
    ck_assert_str_eq(json_string_value(key(j, "health")), "ok");
    ck_assert(json_is_null(key(j, "why")));
    in_range(j, "issued", 1, 1e15);
    in_range(j, "issued_per_s", 1e-9, 1e9);
    ck_assert(json_is_true(key(j, "tracing")));
    json_t *wait = key(j, "wait");
    const char *what = json_string_value(key(wait, "what"));
    ck_assert_msg(what != NULL && strstr(" none room reply collective ", what) != NULL,
                  "wait.what %s", what);
    key(wait, "worker"), key(wait, "seq"), key(wait, "seconds");
    if (strcmp(what, "none") != 0) {
        in_range(wait, "seq", 1, 1e15);
        in_range(wait, "seconds", 0, 60);
    }
    json_t *workers = key(j, "workers");
    ck_assert_int_eq(json_array_size(workers), WORKERS);
    int pids[WORKERS];
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < WORKERS; i++) {
        json_t *w = json_array_get(workers, (size_t)i);
        check_worker(w, i, d.pid, (int)ncpus);
        pids[i] = (int)json_integer_value(key(w, "pid"));
        for (int k = 0; k < i; k++)
            ck_assert_msg(pids[k] != pids[i], "workers %d and %d share pid %d", k, i, pids[i]);
    }
    static const char *const names[] = {"demo.dec_embed", "demo.dec_attn", "demo.dec_mlp",
                                        "demo.dec_head", "disco.allreduce"};
    json_t *funcs = key(j, "functions");
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        json_t *f = NULL;
        for (size_t i = 0; i < json_array_size(funcs) && f == NULL; i++)
            if (strcmp(json_string_value(key(json_array_get(funcs, i), "name")), names[n]) == 0)
                f = json_array_get(funcs, i);
        ck_assert_msg(f != NULL, "no function %s in the frame", names[n]);
        in_range(f, "calls", 1, 1e15);
        in_range(f, "calls_per_s", 1e-9, 1e9);
        in_range(f, "mean_us", 1e-3, 1e7);
    }
    json_decref(j);
    demo_stop(&d);
    for (int i = 0; i < WORKERS; i++)
        wait_gone(pids[i]);
}
END_TEST

/* `disco dump PID` prints the watchdog's report of the running session:
 * its header with the demo's pid and world, and a line for every worker
 * with that worker's pid. */
START_TEST(test_dump)
{
    demo_t d = {.pid = 0};
    demo_start(&d);
    json_t *j = frame_of(d.pid);
    static char out[1 << 16];
    char args[64], want[128];
    snprintf(args, sizeof args, "dump %d", d.pid);
    ck_assert_msg(disco(args, out, sizeof out) == 0, "disco %s: %s", args, out);
    snprintf(want, sizeof want, "disco watchdog: session of pid %d, %d workers", d.pid, WORKERS);
    ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in: %s", want, out);
    for (int i = 0; i < WORKERS; i++) {
        json_t *w = json_array_get(key(j, "workers"), (size_t)i);
        snprintf(want, sizeof want, "worker %d (pid %d): ", i,
                 (int)json_integer_value(key(w, "pid")));
        ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in: %s", want, out);
    }
    json_decref(j);
    demo_stop(&d);
}
END_TEST

/* A process that holds no session, and a pid with no process, are refused
 * with exit status 1 and a message that says which; a missing PID is a
 * usage error (2). */
START_TEST(test_refusals)
{
    char out[4096], args[64];
    snprintf(args, sizeof args, "top --once %d", (int)getpid());
    ck_assert_int_eq(disco(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "holds no disco session") != NULL, "%s", out);
    snprintf(args, sizeof args, "dump %d", (int)getpid());
    ck_assert_int_eq(disco(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "holds no disco session") != NULL, "%s", out);

    pid_t gone = tu_fork(); /* a pid that was a process and is none now */
    if (gone == 0)
        _exit(0);
    tu_wait_ok(gone, "child");
    snprintf(args, sizeof args, "top --once --json %d", (int)gone);
    ck_assert_int_eq(disco(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "no process") != NULL, "%s", out);
    snprintf(args, sizeof args, "dump %d", (int)gone);
    ck_assert_int_eq(disco(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "no process") != NULL, "%s", out);

    ck_assert_int_eq(disco("top --once", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "usage:") != NULL, "%s", out);
}
END_TEST

/* `disco top --once --prometheus` is the Prometheus text format: every
 * line a "# HELP name text", a "# TYPE name counter|gauge", or a sample
 * `name{label="value",...} number` of a family declared before it; with a
 * commands counter for each worker and a calls counter for the demo's
 * attention function. */
START_TEST(test_prometheus)
{
    demo_t d = {.pid = 0};
    demo_start(&d);
    static char out[1 << 17];
    char args[64];
    snprintf(args, sizeof args, "top --once --prometheus %d", d.pid);
    ck_assert_msg(disco(args, out, sizeof out) == 0, "disco %s: %s", args, out);
    demo_stop(&d);
    regex_t help, type, smp;
    ck_assert_int_eq(regcomp(&help, "^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$", REG_EXTENDED), 0);
    ck_assert_int_eq(
        regcomp(&type, "^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$", REG_EXTENDED), 0);
    ck_assert_int_eq(regcomp(&smp,
                             "^([a-zA-Z_:][a-zA-Z0-9_:]*)\\{[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|"
                             "\\\\.)*\"(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\")*\\} "
                             "-?[0-9][0-9.e+-]*$",
                             REG_EXTENDED),
                     0);
    char typed[128] = "";
    int commands = 0, attn = 0, lines = 0;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save), lines++) {
        regmatch_t m[2];
        if (regexec(&help, line, 0, NULL, 0) == 0)
            continue;
        if (regexec(&type, line, 2, m, 0) == 0) {
            snprintf(typed, sizeof typed, "%.*s", (int)(m[1].rm_eo - m[1].rm_so),
                     line + m[1].rm_so);
            continue;
        }
        ck_assert_msg(regexec(&smp, line, 2, m, 0) == 0, "not Prometheus text: \"%s\"", line);
        ck_assert_msg((size_t)(m[1].rm_eo - m[1].rm_so) == strlen(typed) &&
                          strncmp(line, typed, strlen(typed)) == 0,
                      "sample of an undeclared family (last # TYPE: %s): %s", typed, line);
        commands += strncmp(line, "disco_worker_commands_total{", 28) == 0;
        attn += strncmp(line, "disco_function_calls_total{", 27) == 0 &&
                strstr(line, "function=\"demo.dec_attn\"} ") != NULL;
    }
    regfree(&help), regfree(&type), regfree(&smp);
    ck_assert_int_gt(lines, 50);
    ck_assert_int_eq(commands, WORKERS);
    ck_assert_int_eq(attn, 1);
}
END_TEST

/* Live mode ends by itself when the session ends: `disco top --json`
 * (no --count) prints frames while the demo holds, and once the demo is
 * stopped, exits 0 saying the session ended, its last frame showing the
 * session shut down. SIGINT ends it too (exit 0). */
START_TEST(test_live_ends)
{
    demo_t d = {.pid = 0};
    demo_start(&d);
    char bin[512], pid[32], out[128], out2[128];
    snprintf(bin, sizeof bin, "%s/disco", DISCO_TEST_BIN);
    snprintf(pid, sizeof pid, "%d", d.pid);
    snprintf(out, sizeof out, "%s/top.out", d.dir);
    snprintf(out2, sizeof out2, "%s/top2.out", d.dir);
    pid_t top = spawn((char *[]){bin, "top", "--json", "--interval", "50", pid, NULL}, out);
    pid_t top2 = spawn((char *[]){bin, "top", "--interval", "50", pid, NULL}, out2);
    int64_t t0 = disco_now_ns();
    while (!file_has(out, "\"health\":\"ok\"") || !file_has(out2, "health ok")) {
        ck_assert_msg(tu_ms_since(t0) < DEADLINE_MS, "no frame from disco top");
        nap();
    }
    ck_assert_int_eq(kill(top2, SIGINT), 0);
    tu_wait_ok(top2, "disco top, SIGINT");
    ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
    tu_wait_ok(d.pid, "disco-demo --hold");
    tu_wait_ok(top, "disco top, the session ended");
    ck_assert_msg(file_has(out, "the session of process"), "disco top did not say it ended");
    ck_assert_msg(file_has(out, "\"health\":\"DISCO_E_SHUTDOWN\""), "no frame shows the end");
    char cmd[160], junk[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d.dir);
    tu_run(cmd, junk, sizeof junk);
}
END_TEST

/* With tracing off the times are unknown and say so: a session opened
 * with trace_off shows tracing false, and null (never 0 or -1) for every
 * share, time in a command and mean time, while counts still move (calls,
 * commands done); --session picks one of a process's sessions (here this
 * test's own two: 2 workers traced, 3 untraced), and one past the last is
 * refused with exit 1. */
START_TEST(test_untraced_and_session)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    disco_session_t *traced, *untraced;
    CK_OK(disco_session_open(&cfg, &traced));
    cfg = disco_session_config_default(3);
    cfg.trace_off = true;
    CK_OK(disco_session_open(&cfg, &untraced));
    disco_dref_t r;
    for (int i = 0; i < 10; i++) {
        CK_OK(disco_session_call_by_name(untraced, "disco.noop", NULL, 0, &r));
        CK_OK(disco_session_free_reg(untraced, r));
    }
    CK_OK(disco_session_sync(untraced, 2));
    json_t *f[2] = {frame_of_session(getpid(), 0), frame_of_session(getpid(), 1)};
    int k = json_integer_value(key(f[0], "world")) == 3 ? 0 : 1; /* the untraced one */
    ck_assert_int_eq(json_integer_value(key(f[1 - k], "world")), 2);
    ck_assert(json_is_true(key(f[1 - k], "tracing")));
    json_t *u = f[k];
    ck_assert_int_eq(in_range(u, "world", 3, 3), 3);
    ck_assert(json_is_false(key(u, "tracing")));
    ck_assert_str_eq(json_string_value(key(u, "health")), "ok");
    for (int i = 0; i < 3; i++) {
        json_t *w = json_array_get(key(u, "workers"), (size_t)i);
        in_range(w, "done", 10, 1e9); /* counts move without tracing */
        in_range(w, "done_per_s", 0, 1e9);
        static const char *const unknown[] = {"busy_pct", "spin_pct", "park_pct", "in_cmd_s"};
        for (size_t n = 0; n < sizeof unknown / sizeof unknown[0]; n++)
            ck_assert_msg(json_is_null(key(w, unknown[n])), "worker %d: %s is not null", i,
                          unknown[n]);
    }
    ck_assert_int_eq(json_integer_value(key(json_array_get(key(u, "workers"), 0), "pid")),
                     getpid());
    json_t *noop = NULL, *funcs = key(u, "functions");
    for (size_t i = 0; i < json_array_size(funcs); i++)
        if (strcmp(json_string_value(key(json_array_get(funcs, i), "name")), "disco.noop") == 0)
            noop = json_array_get(funcs, i);
    ck_assert_msg(noop != NULL, "no disco.noop in the untraced frame");
    ck_assert_int_eq(in_range(noop, "calls", 30, 30), 30); /* 10 calls x 3 workers */
    ck_assert(json_is_null(key(noop, "mean_us")));
    ck_assert(json_is_null(key(noop, "total_s")));
    json_decref(f[0]), json_decref(f[1]);

    char out[4096], args[64];
    snprintf(args, sizeof args, "top --once --session 2 %d", (int)getpid());
    ck_assert_int_eq(disco(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "holds 2 sessions; no session 2") != NULL, "%s", out);
    disco_session_close(untraced);
    disco_session_close(traced);
}
END_TEST

Suite *suite_top(void)
{
    Suite *s = suite_create("top");
    TCase *tc = tcase_create("top");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_top_json);
    tcase_add_test(tc, test_dump);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_prometheus);
    tcase_add_test(tc, test_live_ends);
    tcase_add_test(tc, test_untraced_and_session);
    suite_add_tcase(s, tc);
    return s;
}
