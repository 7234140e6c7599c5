/* bench_session.c - disco-bench's session figures: a no-op call on every
 * worker plus a sync, over rings and over pipes (the same session code), the
 * cost of opening a session, and the cost of being watched by `disco top`. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "disco/session.h"

#define BATCH 256 /* results freed between timed batches */

typedef struct call_ctx {
    disco_session_t *s;
    disco_dref_t noop;
    int target; /* the worker synced: 1 (the first process worker) */
} call_ctx_t;

/* One round: call disco.noop on every worker, sync worker 1. The result
 * registers are freed between timed batches, so the register file stays
 * small and the frees are not counted. */
static int64_t call_rounds(void *p, uint64_t iters)
{
    call_ctx_t *c = p;
    disco_dref_t res[BATCH];
    int64_t total = 0;
    while (iters > 0) {
        uint64_t n = iters < BATCH ? iters : BATCH;
        int64_t t0 = disco_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            bu_check(disco_session_call(c->s, c->noop, NULL, 0, &res[i]), "call disco.noop");
            bu_check(disco_session_sync(c->s, c->target), "sync");
        }
        total += disco_now_ns() - t0;
        for (uint64_t i = 0; i < n; i++)
            bu_check(disco_session_free_reg(c->s, res[i]), "free");
        iters -= n;
    }
    return total;
}

/* Opens a session of n workers for call_rounds. pinned: with 2 workers,
 * the controller (worker 0) on the first CPU and worker 1 on the second, as the floor and ring
 * figures are measured (and as a placement policy would put them); otherwise every process floats
 * (placement none: the default would bind them). */
static void open_session(call_ctx_t *c, int n, disco_session_transport_t transport, bool pinned,
                         bool trace)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.transport = transport;
    cfg.trace_off = !trace;
    cfg.call_timeout_ms = 10000;
    if (!pinned)
        cfg.place.policy = DISCO_PLACE_NONE;
    *c = (call_ctx_t){.target = 1};
    bu_unpin(); /* workers inherit the controller's mask */
    bu_check(disco_session_open(&cfg, &c->s), "open session");
    if (pinned && bu_ncpus >= 2) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(bu_cpu_ids[1], &set);
        if (sched_setaffinity(disco_session_worker_pid(c->s, 1), sizeof set, &set) != 0)
            bu_die("pin worker 1: %s", strerror(errno));
        bu_pin(0);
    }
    bu_check(disco_session_get_func(c->s, "disco.noop", &c->noop), "get disco.noop");
}

static double call_sync_traced(int n, disco_session_transport_t transport, bool pinned, bool trace)
{
    call_ctx_t c;
    open_session(&c, n, transport, pinned, trace);
    double ns = measure(call_rounds, &c);
    disco_session_close(c.s);
    bu_unpin();
    return ns;
}

static double call_sync(int n, disco_session_transport_t transport, bool pinned)
{
    return call_sync_traced(n, transport, pinned, true);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The p99 of single rounds of c: 2000 per repetition after a warm-up, ns. */
static double p99_rounds(call_ctx_t *c)
{
    call_rounds(c, 2000); /* warm-up */
    size_t n = (size_t)bench_reps() * 2000, done = 0;
    int64_t *lat = malloc(n * sizeof *lat);
    if (lat == NULL)
        bu_die("out of memory");
    disco_dref_t res[BATCH];
    while (done < n) {
        size_t k = n - done < BATCH ? n - done : BATCH;
        for (size_t i = 0; i < k; i++) {
            int64_t t0 = disco_now_ns();
            bu_check(disco_session_call(c->s, c->noop, NULL, 0, &res[i]), "call disco.noop");
            bu_check(disco_session_sync(c->s, c->target), "sync");
            lat[done + i] = disco_now_ns() - t0;
        }
        for (size_t i = 0; i < k; i++)
            bu_check(disco_session_free_reg(c->s, res[i]), "free");
        done += k;
    }
    qsort(lat, n, sizeof *lat, cmp_i64);
    double p99 = (double)lat[(n - 1) * 99 / 100];
    free(lat);
    return p99;
}

/* The tail with the defaults, as a user gets them: 2 workers, placement,
 * spin and tracing left alone (the bench pins nothing), a no-op call on
 * every worker + sync worker 1, each round timed on its own; the 99th
 * percentile of 2000 rounds per repetition (30000 by default), after a
 * warm-up, in ns. The default placement is judged by it: a floating
 * controller is often put on worker 1's CPU by the kernel, and the p99 then
 * reads 9-10 us against a median of 0.3 us. */
static double call_sync_p99(void)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.call_timeout_ms = 10000;
    call_ctx_t c = {.target = 1};
    bu_unpin();
    bu_check(disco_session_open(&cfg, &c.s), "open session");
    bu_check(disco_session_get_func(c.s, "disco.noop", &c.noop), "get disco.noop");
    double p99 = p99_rounds(&c);
    disco_session_close(c.s);
    return p99;
}

/* Tracing's cost: call_sync_ns with command stamps on and off, alternated
 * five times so drift in the machine hits both alike; medians of each. */
static void trace_overhead(void)
{
    double on[5], off[5];
    for (int i = 0; i < 5; i++) {
        off[i] = call_sync_traced(2, DISCO_TRANSPORT_RING, true, false);
        on[i] = call_sync_traced(2, DISCO_TRANSPORT_RING, true, true);
    }
    double a = bu_median(on, 5), b = bu_median(off, 5);
    record("call_sync_traced_ns", a, "ns");
    record("call_sync_untraced_ns", b, "ns");
    record("trace_overhead_pct", 100.0 * (a - b) / b, "%");
}

static double open_close_ms(int n)
{
    double v[64] = {0};
    int reps = bench_reps();
    bu_unpin();
    for (int r = 0; r < reps; r++) {
        disco_session_config_t cfg = disco_session_config_default(n);
        disco_session_t *s;
        int64_t t0 = disco_now_ns();
        bu_check(disco_session_open(&cfg, &s), "open session");
        disco_session_close(s);
        v[r] = (double)(disco_now_ns() - t0) / 1e6;
    }
    return bu_median(v, reps);
}

/* ---- the cost of being watched ---- */

static char top_path[4096]; /* the disco program, beside this one */

/* In a child: becomes `disco top --json --interval MS PARENT > /dev/null`,
 * floating over every CPU as a process started from another terminal. */
static int exec_top(void *interval_ms)
{
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getppid());
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
        return 126;
    bu_unpin();
    execl(top_path, "disco", "top", "--json", "--interval", (const char *)interval_ms, pid,
          (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", top_path, strerror(errno));
    return 127;
}

/* Whether process pid has a disco session's segment mapped. */
static bool maps_session(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, "disco-session") != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* Starts `disco top` on this process and waits until it has attached (the
 * segment is in its maps) and read twice (two intervals). */
static pid_t top_start(const char *interval_ms)
{
    pid_t pid = bu_spawn(exec_top, (void *)(uintptr_t)interval_ms);
    int64_t t0 = disco_now_ns();
    while (!maps_session(pid)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            bu_forget(pid);
            bu_die("disco top (%s) ended before it attached", top_path);
        }
        if (disco_now_ns() - t0 > BU_DEADLINE_NS)
            bu_die("disco top did not attach within 10 s");
        sched_yield();
    }
    struct timespec ts = {0, 2 * atol(interval_ms) * 1000000L};
    nanosleep(&ts, NULL); /* not a synchronization: let it settle into its loop */
    return pid;
}

/* In a child: the control, a process that only wakes every 100 ms (as
 * `disco top --interval 100` does) and reads nothing, floating too. */
static int waker(void *unused)
{
    (void)unused;
    bu_unpin();
    struct timespec ts = {0, 100 * 1000000L};
    while (nanosleep(&ts, NULL) == 0 || errno == EINTR)
        ts = (struct timespec){0, 100 * 1000000L};
    return 1; /* ended by SIGTERM (top_stop) */
}

static pid_t waker_start(void)
{
    pid_t pid = bu_spawn(waker, NULL);
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL); /* as top_start settles */
    return pid;
}

static void top_stop(pid_t pid)
{
    int st;
    kill(pid, SIGTERM);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    bu_forget(pid);
}

/* call_sync_ns of one pinned session of 2 (as call_sync_ns), measured
 * without a watcher, with `disco top --interval 100` attached, with
 * `--interval 10`, and with the control (a process that wakes every 100 ms
 * and reads nothing: what any periodic process costs a session that fills
 * the machine's cores), alternated five times in the same session,
 * medians; then the p99 of single rounds (as call_sync_p99_ns, here
 * pinned) without and with the 100 ms watcher. */
static void top_overhead(void)
{
    char self[sizeof top_path - 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    const char *env = getenv("DISCO_BENCH_TOP");
    snprintf(top_path, sizeof top_path, "%s/disco", self);
    if (env != NULL)
        snprintf(top_path, sizeof top_path, "%s", env);
    if (access(top_path, X_OK) != 0) {
        printf("  skipped: no disco program at %s (DISCO_BENCH_TOP)\n", top_path);
        return;
    }
    call_ctx_t c;
    open_session(&c, 2, DISCO_TRANSPORT_RING, true, true);
    double off[5], on[5], on10[5], wake[5];
    for (int i = 0; i < 5; i++) {
        off[i] = measure(call_rounds, &c);
        pid_t top = top_start("100");
        on[i] = measure(call_rounds, &c);
        top_stop(top);
        top = top_start("10");
        on10[i] = measure(call_rounds, &c);
        top_stop(top);
        top = waker_start();
        wake[i] = measure(call_rounds, &c);
        top_stop(top);
    }
    double p99_off = p99_rounds(&c);
    pid_t top = top_start("100");
    double p99_on = p99_rounds(&c);
    top_stop(top);
    disco_session_close(c.s);
    bu_unpin();
    double a = bu_median(on, 5), b = bu_median(off, 5), a10 = bu_median(on10, 5),
           w = bu_median(wake, 5);
    record("call_sync_notop_ns", b, "ns");
    record("call_sync_top_ns", a, "ns");
    record("call_sync_top10_ns", a10, "ns");
    record("call_sync_notop_p99_ns", p99_off, "ns");
    record("call_sync_top_p99_ns", p99_on, "ns");
    record("top_overhead_ratio", a / b, "x");
    record("top10_overhead_ratio", a10 / b, "x");
    record("call_sync_waker_ns", w, "ns");
    record("waker_overhead_ratio", w / b, "x");
}

void bench_session_top(void)
{
    top_overhead();
}

void bench_session(void)
{
    record("call_sync_ns", call_sync(2, DISCO_TRANSPORT_RING, true), "ns");
    record("call_sync_p99_ns", call_sync_p99(), "ns");
    record("call_sync_pipe_ns", call_sync(2, DISCO_TRANSPORT_PIPE, true), "ns");
    record("call_sync_float_ns", call_sync(2, DISCO_TRANSPORT_RING, false), "ns");
    record("call_sync_ns_n4", call_sync(4, DISCO_TRANSPORT_RING, false), "ns");
    record("call_sync_pipe_ns_n4", call_sync(4, DISCO_TRANSPORT_PIPE, false), "ns");
    record("call_sync_ns_n8", call_sync(8, DISCO_TRANSPORT_RING, false), "ns");
    record("call_sync_pipe_ns_n8", call_sync(8, DISCO_TRANSPORT_PIPE, false), "ns");
    record("session_open_ms_n8", open_close_ms(8), "ms");
    trace_overhead();
}
