/* bench_step.c - disco-bench's SPMD step figures, each beside its Open MPI
 * baseline from the same run (issue 21, part 1):
 *
 *   call_sync_all_ns_nN, call_sync_all_p99_ns_nN (N = 2, 4, 8, 16): what
 *       one step of an SPMD program costs the controller: a no-op call on
 *       every worker, then disco_session_sync_all (one command every worker
 *       answers); single rounds, median and p99, default settings
 *       (placement, spin, tracing)
 *   call_sync_each_ns_nN, call_sync_each_p99_ns_nN (N = 2, 4, 8): the same
 *       step with a disco_session_sync of each worker 1..N-1 in turn (one
 *       command per worker, each read by all of them), as issue 21 first
 *       measured it; not at 16 (issue 32 asks for the other two there, and
 *       its 15 commands a step are the slowest figure when oversubscribed)
 *   call_sync_fused_ns_nN, call_sync_fused_p99_ns_nN: the same step as one
 *       command, disco_session_call_sync_all (the call that every worker
 *       answers once it ran it), with call_sync_fused_vs_mpi_nN
 *   mpi_bcast_gather_ns_nN, mpi_bcast_gather_p99_ns_nN: MPI_Bcast of 64
 *       bytes from rank 0 + MPI_Gather of 8 bytes to it, N ranks
 *       (mpi_node_base.c, `calls`), timed on rank 0; and their ratio
 *       call_sync_all_vs_mpi_nN (disco / Open MPI: below 1, disco is faster)
 *   stream_calls_per_s_nN (N = 2, 4): asynchronous no-op calls, each result
 *       freed at once (a serving loop's steady state), one sync at the end
 *   idle_cpu_pct_n8: the mean share of a core each of workers 1..7 of an
 *       idle session uses (they park), beside mpi_idle_cpu_pct_n8: Open
 *       MPI's ranks 1..7 waiting in MPI_Bcast (mpi_node_base.c, `idle`)
 *
 * N = 16 (issue 32) is meant for a machine of 16 CPUs or more (the GPU kit's
 * `step` step runs it on one); on fewer it is oversubscribed, and its
 * figures say more about the scheduler than about disco.
 *
 * mpirun maps and binds its ranks to hardware threads, one each, when there
 * are CPUs enough (by hwthread, not by core: with SMT, 16 ranks on 8 cores
 * of 2 threads would be refused by --bind-to core), else binds nothing and
 * oversubscribes (Open MPI then yields when idle); disco uses its default
 * placement (spread: with more workers than CPUs, several a CPU). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/session.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/bench_util.h"

#define TIMEOUT_S 120

static disco_session_t *open_default(int n)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.call_timeout_ms = 10000;
    disco_session_t *s;
    bu_unpin();
    bu_check(disco_session_open(&cfg, &s), "open session");
    return s;
}

/* How a step syncs: disco_session_sync_all after the call, a sync of each
 * of workers 1..n-1 after it, or the call and its sync as one command. */
enum step_kind { STEP_ALL, STEP_EACH, STEP_FUSED };

/* One step: a no-op call on every worker, then a sync of all of them as
 * kind says; the result is freed after the clock stops. Returns the step's
 * ns. */
static double step(disco_session_t *s, disco_dref_t noop, int n, enum step_kind kind)
{
    disco_dref_t r;
    int64_t t0 = disco_now_ns();
    if (kind == STEP_FUSED)
        bu_check(disco_session_call_sync_all(s, noop, NULL, 0, &r), "call_sync_all disco.noop");
    else
        bu_check(disco_session_call(s, noop, NULL, 0, &r), "call disco.noop");
    if (kind == STEP_EACH)
        for (int w = 1; w < n; w++)
            bu_check(disco_session_sync(s, w), "sync");
    else if (kind == STEP_ALL)
        bu_check(disco_session_sync_all(s), "sync all");
    double ns = (double)(disco_now_ns() - t0);
    bu_check(disco_session_free_reg(s, r), "free");
    return ns;
}

/* Median and p99 of single steps (step()) in a session of n workers. */
static void time_steps(int n, enum step_kind kind, double *med_out, double *p99_out)
{
    disco_session_t *s = open_default(n);
    disco_dref_t noop;
    bu_check(disco_session_get_func(s, "disco.noop", &noop), "get disco.noop");
    int rounds = bench_reps() * 1000;
    double *ns = bench_xmalloc((size_t)rounds * sizeof *ns);
    for (int i = 0; i < 1000; i++) /* warm-up */
        step(s, noop, n, kind);
    for (int i = 0; i < rounds; i++)
        ns[i] = step(s, noop, n, kind);
    *med_out = bench_stats(ns, rounds, p99_out);
    free(ns);
    disco_session_close(s);
}

/* Asynchronous calls with their results freed at once; calls per second. */
static double stream(int n)
{
    disco_session_t *s = open_default(n);
    disco_dref_t noop, r;
    bu_check(disco_session_get_func(s, "disco.noop", &noop), "get disco.noop");
    double rates[16];
    int reps = bench_reps() < 16 ? bench_reps() : 16;
    for (int k = 0; k < reps; k++) {
        const int calls = 200000;
        int64_t t0 = disco_now_ns();
        for (int i = 0; i < calls; i++) {
            bu_check(disco_session_call(s, noop, NULL, 0, &r), "call disco.noop");
            bu_check(disco_session_free_reg(s, r), "free");
        }
        for (int w = 1; w < n; w++)
            bu_check(disco_session_sync(s, w), "sync");
        rates[k] = calls / ((double)(disco_now_ns() - t0) / 1e9);
    }
    disco_session_close(s);
    return bu_median(rates, reps);
}

/* CPU seconds (user + system) of process pid, from /proc. */
static double cpu_of(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        bu_die("%s: %s", path, strerror(errno));
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (p == NULL ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        bu_die("%s: cannot read its CPU times", path);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* An idle session of n workers: the mean share of a core each of workers
 * 1..n-1 uses over bench_idle_reps() seconds. */
static double idle_pct(int n)
{
    disco_session_t *s = open_default(n);
    for (int w = 1; w < n; w++)
        bu_check(disco_session_sync(s, w), "sync");
    double before = 0, after = 0;
    for (int w = 1; w < n; w++)
        before += cpu_of(disco_session_worker_pid(s, w));
    int64_t t0 = disco_now_ns();
    sleep((unsigned)bench_idle_reps());
    double secs = (double)(disco_now_ns() - t0) / 1e9;
    for (int w = 1; w < n; w++)
        after += cpu_of(disco_session_worker_pid(s, w));
    disco_session_close(s);
    return 100.0 * (after - before) / secs / (n - 1);
}

/* What mpi_node_base printed, by key. */
struct mpi_figs {
    double bg_us, bg_p99_us, idle_pct;
};

static void take(void *ctx, const char *key, double v)
{
    struct mpi_figs *m = ctx;
    if (strcmp(key, "mpi_bcast_gather_us") == 0)
        m->bg_us = v;
    else if (strcmp(key, "mpi_bcast_gather_p99_us") == 0)
        m->bg_p99_us = v;
    else if (strcmp(key, "mpi_idle_cpu_pct") == 0)
        m->idle_pct = v;
}

/* Runs mpi_node_base over n ranks (part: "calls" or "idle"); false (and a
 * line saying why) when it cannot. */
static bool run_mpi(int n, const char *part, struct mpi_figs *out)
{
    const char *base = bench_node_base_path();
    if (base == NULL || strchr(base, '\'') != NULL || access(base, X_OK) != 0) {
        printf("  Open MPI baseline skipped: no mpi_node_base (make bench builds it)\n");
        return false;
    }
    const char *bind = n <= bu_ncpus ? "--map-by hwthread --bind-to hwthread" : "--bind-to none";
    char args[64];
    snprintf(args, sizeof args, "%d %s", bench_reps(), part);
    *out = (struct mpi_figs){0};
    int found, status = bu_mpirun_figures(TIMEOUT_S, n, bind, base, args, take, out, &found);
    if (status != 0 || found == 0) {
        printf("  Open MPI baseline failed: exit status %d, %d figure(s) read\n", status, found);
        return false;
    }
    return true;
}

void bench_step(void)
{
    static const int ns[] = {2, 4, 8, 16};
    char key[64];
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        int n = ns[i];
        bool with_each = n <= 8; /* the file's head says why not at 16 */
        double med, p99, each = 0, each_p99, fused, fused_p99;
        /* Each N gets the section's whole watchdog (disco-bench.c's 120 s):
         * at 16 workers on 2 CPUs one N takes most of it. */
        bu_watchdog(120);
        time_steps(n, STEP_ALL, &med, &p99);
        snprintf(key, sizeof key, "call_sync_all_ns_n%d", n);
        record(key, med, "ns");
        snprintf(key, sizeof key, "call_sync_all_p99_ns_n%d", n);
        record(key, p99, "ns");
        if (with_each) {
            time_steps(n, STEP_EACH, &each, &each_p99);
            snprintf(key, sizeof key, "call_sync_each_ns_n%d", n);
            record(key, each, "ns");
            snprintf(key, sizeof key, "call_sync_each_p99_ns_n%d", n);
            record(key, each_p99, "ns");
        }
        time_steps(n, STEP_FUSED, &fused, &fused_p99);
        snprintf(key, sizeof key, "call_sync_fused_ns_n%d", n);
        record(key, fused, "ns");
        snprintf(key, sizeof key, "call_sync_fused_p99_ns_n%d", n);
        record(key, fused_p99, "ns");
        struct mpi_figs m;
        if (!run_mpi(n, "calls", &m))
            continue;
        snprintf(key, sizeof key, "mpi_bcast_gather_ns_n%d", n);
        record(key, m.bg_us * 1000.0, "ns");
        snprintf(key, sizeof key, "mpi_bcast_gather_p99_ns_n%d", n);
        record(key, m.bg_p99_us * 1000.0, "ns");
        snprintf(key, sizeof key, "call_sync_all_vs_mpi_n%d", n);
        record(key, med / (m.bg_us * 1000.0), "x");
        if (with_each) {
            snprintf(key, sizeof key, "call_sync_each_vs_mpi_n%d", n);
            record(key, each / (m.bg_us * 1000.0), "x");
        }
        snprintf(key, sizeof key, "call_sync_fused_vs_mpi_n%d", n);
        record(key, fused / (m.bg_us * 1000.0), "x");
    }
    bu_watchdog(120);
    record("stream_calls_per_s_n2", stream(2), "calls/s");
    record("stream_calls_per_s_n4", stream(4), "calls/s");
    record("idle_cpu_pct_n8", idle_pct(8), "%");
    struct mpi_figs m;
    if (run_mpi(8, "idle", &m))
        record("mpi_idle_cpu_pct_n8", m.idle_pct, "%");
}
