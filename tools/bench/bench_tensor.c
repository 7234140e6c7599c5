/* bench_tensor.c - disco-bench's data-plane figures, all with N = 2 workers:
 * allreduce (float32 sum) of 1 MiB and 64 MiB, broadcast from worker 0 of
 * 1 MiB and 64 MiB (by reference: O(1) in the size), copy to worker 0 of
 * 64 MiB against a plain memcpy; the collectives into the caller's tensor
 * (allreduce_into_us_1MiB and _64MiB, allgather_into_us_1MiB,
 * bcast_into_us_1MiB, each with its _p99_: the C side of py_bench.py's
 * py_allreduce_us_* and the others); and the baseline for allreduce, Open MPI's
 * MPI_Allreduce, run as a separate program (tools/bench/mpi_allreduce.c) through
 * mpirun.
 *
 * Placement: as bench_session.c does for N = 2, the controller (worker 0) is
 * pinned to the first CPU and worker 1 to the second; mpirun binds its two
 * ranks the same way (--bind-to core).
 *
 * Warm-up: fresh heap pages fault in slowly on a VM (~2 ms per MiB at first
 * touch, in every process that maps them), so every figure starts with
 * untimed rounds. A round frees what it made; the heap hands the same block
 * back for the same size, so timed rounds touch warm pages only. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/bench_util.h"
#include "disco/session.h"
#include "disco/tensor.h"

#define MIB        ((size_t)1 << 20)
#define BIG        (64 * MIB)
#define SMALL      MIB
#define WARM_BIG   4  /* untimed rounds before the 64 MiB figures */
#define WARM_SMALL 50 /* and before the 1 MiB allreduce */
/* Inputs of both workers (2 x 64 MiB), the outputs of one allreduce (2 x
 * 64 MiB), one copy to worker 0 (64 MiB), the half-size temporary that
 * fills the inputs (32 MiB), the 1 MiB tensors and slack. */
#define HEAP_BYTES (6 * BIG + 16 * MIB)

static const DLDataType f32 = {kDLFloat, 32, 1};

static disco_value_t dref(disco_dref_t r)
{
    disco_value_t v = {.type = DISCO_T_DREF, .v.reg = r};
    return v;
}

static DLTensor host_tensor(void *data, int64_t *numel)
{
    DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32, .shape = numel};
    return t;
}

/* ---- the session ---- */

typedef struct data_ctx {
    disco_session_t *s;
    disco_dref_t func; /* the collective timed */
    disco_value_t args[3];
    int nargs;
    const char *what;
    /* copy to worker 0, memcpy */
    DLTensor host;
    void *dst;
    size_t bytes;
} data_ctx_t;

static void open_pinned(disco_session_t **s_out)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.call_timeout_ms = 30000;
    cfg.heap_bytes = HEAP_BYTES;
    bu_unpin(); /* worker 1 inherits the controller's mask */
    bu_check(disco_session_open(&cfg, s_out), "open session");
    if (bu_ncpus >= 2) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(bu_cpu_ids[1], &set);
        if (sched_setaffinity(disco_session_worker_pid(*s_out, 1), sizeof set, &set) != 0)
            bu_die("pin worker 1: %s", strerror(errno));
        bu_pin(0);
    }
}

/* A float32 tensor of bytes on every worker, each worker its own block,
 * holding (i % 1024) at i in both halves: worker 0 gets the half from the
 * host, broadcast shares it, allgather stacks it twice into a new tensor on
 * each worker. */
static disco_dref_t make_input(disco_session_t *s, size_t bytes)
{
    int64_t half = (int64_t)(bytes / sizeof(float) / 2);
    float *h = bench_xmalloc(bytes / 2);
    for (int64_t i = 0; i < half; i++)
        h[i] = (float)(i % 1024);
    DLTensor t = host_tensor(h, &half);
    disco_dref_t r0, r1, x;
    bu_check(disco_session_copy_to_worker0(s, &t, &r0), "copy_to_worker0 (input)");
    disco_value_t a[2] = {dref(r0), disco_value_bool(false)};
    bu_check(disco_session_call_by_name(s, "disco.broadcast_from_worker0", a, 2, &r1),
             "broadcast_from_worker0 (input)");
    a[0] = dref(r1);
    bu_check(disco_session_call_by_name(s, "disco.allgather", a, 2, &x), "allgather (input)");
    bu_check(disco_session_free_reg(s, r1), "free");
    bu_check(disco_session_free_reg(s, r0), "free");
    bu_check(disco_session_sync(s, 1), "sync (input)");
    free(h);
    return x;
}

/* Checks once, untimed, that an allreduce of x (made by make_input) gives
 * twice x on worker 0. */
static void check_allreduce(data_ctx_t *c, size_t bytes)
{
    int64_t n = (int64_t)(bytes / sizeof(float));
    float *h = bench_xmalloc(bytes);
    DLTensor t = host_tensor(h, &n);
    disco_dref_t y;
    bu_check(disco_session_call(c->s, c->func, c->args, c->nargs, &y), "allreduce (check)");
    bu_check(disco_session_sync(c->s, 1), "sync (check)");
    bu_check(disco_session_copy_from_worker0(c->s, y, &t), "copy_from_worker0 (check)");
    for (int64_t i = 0; i < n; i++)
        if (h[i] != 2.0f * (float)(i % (n / 2) % 1024))
            bu_die("allreduce of %zu bytes: element %lld is %g, want %g", bytes, (long long)i,
                   (double)h[i], 2.0 * (double)(i % (n / 2) % 1024));
    bu_check(disco_session_free_reg(c->s, y), "free");
    bu_check(disco_session_sync(c->s, 1), "sync");
    free(h);
}

/* One round: the collective plus a sync of worker 1 (worker 0 ran its part
 * inline before the call returned, so worker 1 is the last to finish): that
 * is timed. Freeing the result and a second sync are not, so the next round
 * finds nothing pending and the heap gives it the same block back. */
static int64_t coll_rounds(void *p, uint64_t iters)
{
    data_ctx_t *c = p;
    int64_t total = 0;
    for (uint64_t i = 0; i < iters; i++) {
        disco_dref_t res;
        int64_t t0 = disco_now_ns();
        bu_check(disco_session_call(c->s, c->func, c->args, c->nargs, &res), c->what);
        bu_check(disco_session_sync(c->s, 1), "sync");
        total += disco_now_ns() - t0;
        bu_check(disco_session_free_reg(c->s, res), "free");
        bu_check(disco_session_sync(c->s, 1), "sync");
    }
    return total;
}

/* One round: copy the host tensor to worker 0 and free the register, both
 * timed (the free is a heap free on worker 0 and a kill-register command to
 * worker 1: microseconds against milliseconds of copying). */
static int64_t copy_rounds(void *p, uint64_t iters)
{
    data_ctx_t *c = p;
    int64_t t0 = disco_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        disco_dref_t r;
        bu_check(disco_session_copy_to_worker0(c->s, &c->host, &r), "copy_to_worker0");
        bu_check(disco_session_free_reg(c->s, r), "free");
    }
    return disco_now_ns() - t0;
}

/* One round: memcpy of the same bytes between two warm private buffers. */
static int64_t memcpy_rounds(void *p, uint64_t iters)
{
    data_ctx_t *c = p;
    int64_t t0 = disco_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        memcpy(c->dst, c->host.data, c->bytes);
        __asm__ volatile("" ::: "memory"); /* the copy is not dead */
    }
    return disco_now_ns() - t0;
}

static void bench_allreduce(data_ctx_t *c, disco_dref_t x, size_t bytes, const char *key)
{
    bu_check(disco_session_get_func(c->s, "disco.allreduce", &c->func), "get disco.allreduce");
    c->args[0] = dref(x);
    c->args[1] = disco_value_str("sum");
    c->args[2] = disco_value_bool(false); /* in_group */
    c->nargs = 3;
    c->what = "allreduce";
    check_allreduce(c, bytes);
    double ns = bytes >= BIG ? median_single(coll_rounds, c, WARM_BIG, bench_reps())
                             : median_single(coll_rounds, c, WARM_SMALL, 10 * bench_reps());
    record(key, ns / 1000, "us");
    bu_check(disco_session_free_reg(c->s, c->func), "free");
}

static void bench_broadcast(data_ctx_t *c, disco_dref_t x, const char *key)
{
    bu_check(disco_session_get_func(c->s, "disco.broadcast_from_worker0", &c->func),
             "get disco.broadcast_from_worker0");
    c->args[0] = dref(x);
    c->args[1] = disco_value_bool(false); /* in_group */
    c->nargs = 2;
    c->what = "broadcast_from_worker0";
    record(key, measure(coll_rounds, c) / 1000, "us");
    bu_check(disco_session_free_reg(c->s, c->func), "free");
}

/* copy_to_worker0 and memcpy of 64 MiB from the same warm host buffer, one
 * after the other on the same (pinned) CPU. */
static void bench_copy(data_ctx_t *c)
{
    int64_t n = (int64_t)(BIG / sizeof(float));
    float *src = bench_xmalloc(BIG);
    c->dst = bench_xmalloc(BIG);
    c->bytes = BIG;
    memset(src, 1, BIG);
    memset(c->dst, 0, BIG);
    c->host = host_tensor(src, &n);
    double copy_ns = median_single(copy_rounds, c, WARM_BIG, bench_reps());
    double memcpy_ns = median_single(memcpy_rounds, c, WARM_BIG, bench_reps());
    record("copy_to_worker0_gbps", (double)BIG / copy_ns, "GB/s");
    record("memcpy_gbps", (double)BIG / memcpy_ns, "GB/s");
    free(c->dst);
    free(src);
}

/* A collective into a destination made before (disco.*_into): the
 * median and the 99th percentile of single rounds (coll_rounds: the call
 * + a sync of worker 1), after warm untimed ones, recorded as key and
 * p99_key. */
static void bench_into(data_ctx_t *c, const char *name, const disco_value_t *a, int n, int warm,
                       int reps, const char *key, const char *p99_key)
{
    static double v[4096];
    reps = reps < 4096 ? reps : 4096;
    bu_check(disco_session_get_func(c->s, name, &c->func), name);
    memcpy(c->args, a, (size_t)n * sizeof *a);
    c->nargs = n;
    c->what = name;
    for (int i = 0; i < warm; i++)
        coll_rounds(c, 1);
    for (int r = 0; r < reps; r++)
        v[r] = (double)coll_rounds(c, 1);
    double p99, med = bench_stats(v, reps, &p99);
    record(key, med / 1000, "us");
    record(p99_key, p99 / 1000, "us");
    bu_check(disco_session_free_reg(c->s, c->func), "free");
}

/* A new float32 tensor of bytes on every worker (unset). */
static disco_dref_t empty_f32(disco_session_t *s, size_t bytes)
{
    int64_t n = (int64_t)(bytes / sizeof(float));
    disco_dref_t r;
    bu_check(disco_session_empty(s, &n, 1, f32, false, &r), "empty");
    return r;
}

/* The into figures: 1 MiB allreduce, allgather (into 2 MiB) and broadcast
 * into tensors made once, and the 64 MiB allreduce (its output freed
 * after, for the by-value figures' room). */
static void bench_into_all(data_ctx_t *c, disco_dref_t x_small, disco_dref_t x_big)
{
    disco_dref_t y = empty_f32(c->s, SMALL), g = empty_f32(c->s, 2 * SMALL);
    disco_dref_t yb = empty_f32(c->s, BIG);
    disco_value_t no = disco_value_bool(false), sum = disco_value_str("sum");
    disco_value_t ar[4] = {dref(x_small), dref(y), sum, no};
    bench_into(c, "disco.allreduce_into", ar, 4, WARM_SMALL, 10 * bench_reps(),
               "allreduce_into_us_1MiB", "allreduce_into_p99_us_1MiB");
    disco_value_t ag[3] = {dref(x_small), dref(g), no};
    bench_into(c, "disco.allgather_into", ag, 3, WARM_SMALL, 10 * bench_reps(),
               "allgather_into_us_1MiB", "allgather_into_p99_us_1MiB");
    disco_value_t bc[3] = {dref(x_small), dref(y), no};
    bench_into(c, "disco.broadcast_from_worker0_into", bc, 3, WARM_SMALL, 10 * bench_reps(),
               "bcast_into_us_1MiB", "bcast_into_p99_us_1MiB");
    disco_value_t arb[4] = {dref(x_big), dref(yb), sum, no};
    bench_into(c, "disco.allreduce_into", arb, 4, WARM_BIG, bench_reps(), "allreduce_into_us_64MiB",
               "allreduce_into_p99_us_64MiB");
    bu_check(disco_session_free_reg(c->s, yb), "free");
    bu_check(disco_session_free_reg(c->s, g), "free");
    bu_check(disco_session_free_reg(c->s, y), "free");
    bu_check(disco_session_sync(c->s, 1), "sync");
}

void bench_tensor(void)
{
    data_ctx_t c = {0};
    open_pinned(&c.s);
    disco_dref_t x_small = make_input(c.s, SMALL), x_big = make_input(c.s, BIG);
    bench_copy(&c);
    bench_broadcast(&c, x_small, "bcast_us_1MiB");
    bench_broadcast(&c, x_big, "bcast_us_64MiB");
    bench_allreduce(&c, x_small, SMALL, "allreduce_us_1MiB");
    bench_allreduce(&c, x_big, BIG, "allreduce_us_64MiB");
    bench_into_all(&c, x_small, x_big);
    disco_session_close(c.s);
    bu_unpin();
}

/* ---- the Open MPI baseline ---- */

/* The figures mpi_allreduce prints (key=value lines); record() keeps the
 * key pointer, so only these static names are recorded. */
static const char *const mpi_keys[] = {"mpi_allreduce_us_1MiB", "mpi_allreduce_us_64MiB"};

/* Records a figure of mpi_allreduce's under its static name. */
static void take_mpi(void *ctx, const char *key, double v)
{
    (void)ctx;
    for (size_t i = 0; i < sizeof mpi_keys / sizeof mpi_keys[0]; i++)
        if (strcmp(key, mpi_keys[i]) == 0)
            record(mpi_keys[i], v, "us");
}

void bench_mpi(void)
{
    const char *prog = bench_mpi_path();
    if (prog == NULL) {
        printf("  MPI not available (no --mpi PATH or DISCO_BENCH_MPI; make bench installs "
               "Open MPI when it can)\n");
        return;
    }
    if (strchr(prog, '\'') != NULL || access(prog, X_OK) != 0) {
        printf("  MPI not available: %s is not an executable program we can quote\n", prog);
        return;
    }
    /* Two ranks on the two first cores, shared memory only (vader, with its
     * default single-copy mechanism), no network. As root, Open MPI wants
     * to be told that this is meant. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mpirun%s -np 2 --bind-to core --mca pml ob1 --mca btl self,vader '%s' %d",
             geteuid() == 0 ? " --allow-run-as-root" : "", prog, bench_reps());
    int found;
    int status = bu_read_figures(cmd, take_mpi, NULL, &found);
    if (status != 0 || found == 0)
        printf("  MPI not available: mpirun exited with status %d, %d figure(s) read\n", status,
               found);
}
