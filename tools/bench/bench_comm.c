/* bench_comm.c - disco-bench's in-worker collective figures (<disco/comm.h>,
 * issue 34 part 5), each beside its baselines from the same run:
 *
 *   ctx_allreduce_us_1KiB_nN, ctx_allreduce_us_1MiB_nN (N = 2, 4, 8): one
 *       disco_ctx_allreduce (float32 sum, out of place, heap tensors) called
 *       back to back inside a worker function, every worker of N; a round
 *       is one call_sync_all of a loop of them after a barrier, its figure
 *       the slowest worker's mean per allreduce; the median over rounds
 *   mpi_allreduce_us_1KiB_nN, mpi_allreduce_us_1MiB_nN: Open MPI's
 *       MPI_Allreduce of the same sizes over N ranks (tools/bench/
 *       mpi_allreduce.c's "sizes" mode): the fair pair, both SPMD, and the
 *       same statistic (the same loop of calls after a barrier, the slowest
 *       rank's mean per call, the median over rounds)
 *   ctx_allreduce_p99_us_1KiB_nN, ctx_allreduce_p99_us_1MiB_nN and
 *   mpi_allreduce_p99_us_1KiB_nN, mpi_allreduce_p99_us_1MiB_nN: the tail of
 *       the same loops (2000 calls of 1 KiB, 200 of 1 MiB), every call
 *       timed on its own on every member (the clock read is in the figure,
 *       on both sides alike): each member's 99th percentile of its per-call
 *       times, the largest over members, the median over rounds
 *   ctl_allreduce_us_1KiB_nN, ctl_allreduce_us_1MiB_nN: the controller-
 *       issued disco.allreduce of the same size, call + sync_all, median of
 *       single rounds
 *   exchange_floor_us_1KiB_n2: the inline meeting's exchange alone, between
 *       two pinned processes (bench_exchange.c): the least the machine
 *       allows for ctx_allreduce_us_1KiB_n2
 *   ctx_sendrecv_us_1KiB_n2: one disco_ctx_send of 1 KiB and its
 *       disco_ctx_recv between workers 0 and 1: half a ping-pong's round
 *       trip, the mean over a loop, median over rounds
 *   ctx_sendrecv_p99_us_1KiB_n2: the same loop, every round trip timed on
 *       its own on both ends: half the 99th percentile of its round trips,
 *       the larger of the two ends', the median over rounds
 *
 * Sessions use the defaults (fork, placement, spin); mpirun binds its ranks
 * to cores when there are cores enough, else oversubscribes (as
 * bench_step.c's baseline). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/clock.h"
#include "disco/comm.h"
#include "disco/session.h"
#include "disco/status.h"
#include "disco/tensor.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/bench_util.h"

#define TIMEOUT_S 120

/* bench.ctx_loop(bytes, iters, mode): after a barrier, iters allreduces
 * (mode 0 and 2) or ping-pongs between workers 0 and 1 (mode 1 and 3; the
 * others only meet the barrier); returns this worker's mean ns per
 * allreduce (per one-way transfer for mode 1), or for mode 2 and 3, with
 * every call (round trip) timed on its own, the 99th percentile of this
 * worker's per-call ns (half its round trips' for mode 3). */
static disco_status_t ctx_loop(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int64_t len = a[0].v.i / 4 > 0 ? a[0].v.i / 4 : 1, iters = a[1].v.i > 0 ? a[1].v.i : 1;
    int me = disco_ctx_worker_id(ctx), mode = (int)a[2].v.i;
    bool pingpong = mode & 1, timed = mode & 2;
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor *x, *y;
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, f32, &x);
    if (st == DISCO_OK)
        st = disco_ctx_empty(ctx, &len, 1, f32, &y);
    if (st != DISCO_OK)
        return st;
    memset(x->data, 0, (size_t)len * 4);
    double *each = NULL;
    if (timed && (each = malloc((size_t)iters * sizeof *each)) == NULL)
        return disco_set_error(DISCO_E_NOMEM, "bench.ctx_loop: %lld timings", (long long)iters);
    if ((st = disco_ctx_barrier(ctx, false)) != DISCO_OK) {
        free(each);
        return st;
    }
    int64_t t0 = disco_now_ns(), t = t0;
    for (int64_t i = 0; st == DISCO_OK && i < iters; i++) {
        if (!pingpong)
            st = disco_ctx_allreduce(ctx, x, y, DISCO_REDUCE_SUM, false);
        else if (me == 0 && (st = disco_ctx_send(ctx, x, 1)) == DISCO_OK)
            st = disco_ctx_recv(ctx, y, 1);
        else if (me == 1 && (st = disco_ctx_recv(ctx, y, 0)) == DISCO_OK)
            st = disco_ctx_send(ctx, x, 0);
        if (each != NULL) {
            int64_t t1 = disco_now_ns();
            each[i] = (double)(t1 - t);
            t = t1;
        }
    }
    int64_t per = (disco_now_ns() - t0) / iters;
    double p99 = 0;
    if (each != NULL)
        bench_stats(each, (int)iters, &p99);
    if (st == DISCO_OK)
        *ret = disco_value_int(timed ? (int64_t)(pingpong ? p99 / 2 : p99)
                                     : (pingpong ? per / 2 : per));
    free(each);
    return st;
}

static disco_session_t *open_n(int n)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.call_timeout_ms = 60000;
    cfg.heap_bytes = 64u << 20; /* 8 workers x 2 x 1 MiB, and the controller's tensors */
    disco_session_t *s;
    bu_unpin();
    bu_check(disco_session_open(&cfg, &s), "open session");
    return s;
}

/* Median over rounds of the slowest worker's ns per operation (mode 2 and
 * 3: the largest of the workers' per-call 99th percentiles). */
static double ctx_us(disco_session_t *s, int64_t bytes, int64_t iters, int mode, int rounds)
{
    disco_dref_t f, r;
    bu_check(disco_session_get_func(s, "bench.ctx_loop", &f), "get bench.ctx_loop");
    disco_value_t a[3] = {disco_value_int(bytes), disco_value_int(iters), disco_value_int(mode)};
    double *v = bench_xmalloc((size_t)(rounds + 1) * sizeof *v);
    int n = disco_session_num_workers(s);
    for (int k = -1; k < rounds; k++) { /* one warm-up round */
        bu_check(disco_session_call_sync_all(s, f, a, 3, &r), "call_sync_all bench.ctx_loop");
        double worst = 0;
        for (int w = 0; w < (mode & 1 ? 2 : n); w++) {
            disco_value_t got;
            bu_check(disco_session_debug_get(s, r, w, &got), "debug get");
            worst = (double)got.v.i > worst ? (double)got.v.i : worst;
        }
        bu_check(disco_session_free_reg(s, r), "free");
        if (k >= 0)
            v[k] = worst / 1000.0;
    }
    double med = bu_median(v, rounds);
    free(v);
    bu_check(disco_session_free_reg(s, f), "free");
    return med;
}

/* The controller-issued allreduce of bytes: call + sync_all, median µs. */
static double ctl_us(disco_session_t *s, int64_t bytes, int rounds)
{
    int64_t len = bytes / 4;
    DLDataType f32 = {kDLFloat, 32, 1};
    DLDevice cpu = {kDLCPU, 0};
    disco_value_t e[4] = {disco_value_shape(&len, 1), disco_value_dtype(f32),
                          disco_value_device(cpu), disco_value_bool(false)};
    disco_dref_t x, f, r;
    bu_check(disco_session_call_by_name(s, "disco.empty", e, 4, &x), "disco.empty");
    bu_check(disco_session_get_func(s, "disco.allreduce", &f), "get disco.allreduce");
    disco_value_t a[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
    double *v = bench_xmalloc((size_t)rounds * sizeof *v);
    for (int k = -rounds / 10 - 1; k < rounds; k++) {
        int64_t t0 = disco_now_ns();
        bu_check(disco_session_call(s, f, a, 3, &r), "call disco.allreduce");
        bu_check(disco_session_sync_all(s), "sync all");
        if (k >= 0)
            v[k] = (double)(disco_now_ns() - t0) / 1000.0;
        bu_check(disco_session_free_reg(s, r), "free");
    }
    double med = bu_median(v, rounds);
    free(v);
    bu_check(disco_session_free_reg(s, f), "free");
    bu_check(disco_session_free_reg(s, x), "free");
    return med;
}

struct mpi_figs {
    double kib, mib, kib_p99, mib_p99;
};

static void take(void *ctx, const char *key, double v)
{
    struct mpi_figs *m = ctx;
    if (strcmp(key, "mpi_allreduce_us_1KiB") == 0)
        m->kib = v;
    else if (strcmp(key, "mpi_allreduce_us_1MiB") == 0)
        m->mib = v;
    else if (strcmp(key, "mpi_allreduce_p99_us_1KiB") == 0)
        m->kib_p99 = v;
    else if (strcmp(key, "mpi_allreduce_p99_us_1MiB") == 0)
        m->mib_p99 = v;
}

/* Open MPI's allreduce of 1 KiB and 1 MiB over n ranks, in loops of
 * it_kib and it_mib calls (as ctx_us's), then per-call p99s in loops of
 * p99_kib and p99_mib; false (and a line saying why) when it cannot run. */
static bool run_mpi(int n, int64_t it_kib, int64_t it_mib, int64_t p99_kib, int64_t p99_mib,
                    struct mpi_figs *out)
{
    const char *prog = bench_mpi_path();
    if (prog == NULL || strchr(prog, '\'') != NULL || access(prog, X_OK) != 0) {
        printf("  Open MPI baseline skipped: no mpi_allreduce (--mpi PATH; make bench builds "
               "it)\n");
        return false;
    }
    const char *bind = n <= bu_ncpus ? "--bind-to core" : "--bind-to none";
    char args[128];
    snprintf(args, sizeof args, "%d sizes %lld %lld %lld %lld", bench_reps(), (long long)it_kib,
             (long long)it_mib, (long long)p99_kib, (long long)p99_mib);
    *out = (struct mpi_figs){0};
    int found, status = bu_mpirun_figures(TIMEOUT_S, n, bind, prog, args, take, out, &found);
    if (status != 0 || found < 4) {
        printf("  Open MPI baseline failed: exit status %d, %d figure(s) read\n", status, found);
        return false;
    }
    return true;
}

/* Calls a p99 round times one by one: --quick's tenth, but never fewer than
 * 100, so that the 99th percentile is not simply the largest. */
static int64_t p99_iters(int64_t iters, bool quick)
{
    return quick ? (iters / 10 > 100 ? iters / 10 : 100) : iters;
}

void bench_comm(void)
{
    static bool registered;
    if (!registered) /* before any session forks: its workers inherit it */
        bu_check(disco_register_func("bench.ctx_loop", "iii", ctx_loop), "register");
    registered = true;
    static const int ns[] = {2, 4, 8};
    static const struct {
        int64_t bytes;
        const char *name;
        int64_t iters, p99_iters; /* a loop; a loop of calls timed each */
    } sizes[] = {{1024, "1KiB", 2000, 2000}, {1 << 20, "1MiB", 50, 200}};
    int rounds = bench_reps(), quick = rounds <= 5; /* --quick: 5 */
    char key[64];
    bench_exchange_floor(); /* the baseline of ctx_allreduce_us_1KiB_n2 */
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        int n = ns[i];
        disco_session_t *s = open_n(n);
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            int64_t iters = quick ? sizes[z].iters / 10 : sizes[z].iters;
            snprintf(key, sizeof key, "ctx_allreduce_us_%s_n%d", sizes[z].name, n);
            record(key, ctx_us(s, sizes[z].bytes, iters, 0, rounds), "us");
            snprintf(key, sizeof key, "ctx_allreduce_p99_us_%s_n%d", sizes[z].name, n);
            record(key, ctx_us(s, sizes[z].bytes, p99_iters(sizes[z].p99_iters, quick), 2, rounds),
                   "us");
            snprintf(key, sizeof key, "ctl_allreduce_us_%s_n%d", sizes[z].name, n);
            record(key, ctl_us(s, sizes[z].bytes, rounds * (z == 0 ? 100 : 10)), "us");
        }
        if (n == 2) {
            record("ctx_sendrecv_us_1KiB_n2", ctx_us(s, 1024, quick ? 200 : 2000, 1, rounds), "us");
            record("ctx_sendrecv_p99_us_1KiB_n2",
                   ctx_us(s, 1024, p99_iters(2000, quick), 3, rounds), "us");
        }
        disco_session_close(s);
        struct mpi_figs m;
        if (run_mpi(n, quick ? sizes[0].iters / 10 : sizes[0].iters,
                    quick ? sizes[1].iters / 10 : sizes[1].iters,
                    p99_iters(sizes[0].p99_iters, quick), p99_iters(sizes[1].p99_iters, quick),
                    &m)) {
            snprintf(key, sizeof key, "mpi_allreduce_us_1KiB_n%d", n);
            record(key, m.kib, "us");
            snprintf(key, sizeof key, "mpi_allreduce_us_1MiB_n%d", n);
            record(key, m.mib, "us");
            snprintf(key, sizeof key, "mpi_allreduce_p99_us_1KiB_n%d", n);
            record(key, m.kib_p99, "us");
            snprintf(key, sizeof key, "mpi_allreduce_p99_us_1MiB_n%d", n);
            record(key, m.mib_p99, "us");
        }
    }
}
