/*
 * node_bench - disco-bench's figures across nodes (bench_node.c runs it):
 * one session of 2 nodes x W workers, one MPI process a node, against
 * plain MPI over the same processes (mpi_node_base.c) and against one
 * node of as many workers (--local). Its own main; linked with libdisco.a
 * as tests/node_prog is, and using only the public API.
 *
 *   mpirun -np 2 [--mca btl ...] node_bench W REPS pin|float   across nodes
 *   node_bench --local N REPS pin|float                        one node, N workers
 *
 * Rank 0 (the controller) prints key=value lines; the other ranks are the
 * nodes' agents and never return from the open (session.h). Across nodes:
 *
 *   node_call_sync_us, node_call_sync_p99_us   a no-op call, then a sync of
 *       every worker 0..N-1 in turn; single rounds, median and p99
 *   node_stream_calls_per_s   CALLS asynchronous no-op calls (each result
 *       freed at once) and a sync of the last worker; median over reps
 *   node_allreduce_us_1MiB, node_allreduce_p99_us_1MiB, node_allreduce_us_64MiB
 *       float32 sum allreduce of every worker's tensor + a sync of the last
 *       worker; single rounds, median (and p99 for 1 MiB)
 *
 * With --local the same call and stream rounds on one node of N workers:
 * node_call_sync_local_us, node_call_sync_local_p99_us,
 * node_stream_local_calls_per_s (the stream's baseline: what crossing a
 * node costs a stream that one node sustains on the same machine).
 *
 * Why each round is what it is: a call reaches every worker, but only a
 * sync says that a worker ran it, so "every worker did it" is a sync of
 * each (for the remote ones, a round trip to their node's agent each);
 * plain MPI's closest round is a broadcast from rank 0 and a gather back.
 * An allreduce's worker 0 is the controller's own thread, done when the
 * call returns; the last worker (the last node's) is the last to finish.
 * A round's result is freed after the clock stops; that frame travels with
 * the next round's, as every command frame does (batched, node_agent.c).
 *
 * Where the workers run (pin or float, chosen by disco-bench for this
 * and for the baseline alike): pin gives each worker a CPU of its own, as
 * mpirun --bind-to core gives each baseline rank a core. Each node's plan
 * is made as if the machine were its own (it ignores mpirun's binding and
 * the other nodes' plans), so two nodes on one machine would both take its
 * first PUs: node k on this machine (OMPI_COMM_WORLD_LOCAL_RANK) is given
 * the k-th block of W of the CPUs we may use, as a list (placement.h).
 * float binds nothing (too few CPUs for one each: the kernel shares them,
 * as with the baseline's --bind-to none).
 */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/disco.h"
#include "tools/bench/bench_stats.h"

#define MIB        ((size_t)1 << 20)
#define BIG        (64 * MIB)
#define CALLS      20000 /* one stream rep */
#define WARM_CALLS 100   /* untimed call rounds first */
#define WARM_SMALL 20    /* and 1 MiB allreduces */
#define WARM_BIG   3     /* and 64 MiB ones: fresh heap pages fault in slowly */
/* Per node: its 2 workers' inputs and outputs of 64 MiB, the 1 MiB ones
 * and slack. */
#define HEAP_BYTES (4 * BIG + 16 * MIB)

static disco_session_t *sess; /* closed by die(), so that the agents end too */

static void die(const char *what, disco_status_t st)
{
    fprintf(stderr, "node_bench: %s: %s (%s)\n", what, disco_err_name(st), disco_last_error());
    disco_session_close(sess);
    exit(1);
}

static void check(disco_status_t st, const char *what)
{
    if (st != DISCO_OK)
        die(what, st);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        die("out of memory", DISCO_E_NOMEM);
    return p;
}

static disco_value_t dref(disco_dref_t r)
{
    disco_value_t v = {.type = DISCO_T_DREF, .v.reg = r};
    return v;
}

/* nb.fill(n): a float32 tensor of n elements on every worker, element i =
 * gid + i % 1024 (exact in float32, and so is their sum). */
static disco_status_t fill(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int64_t len = a[0].v.i;
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor *t;
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, f32, &t);
    if (st != DISCO_OK)
        return st;
    float g = (float)disco_ctx_worker_id(ctx);
    for (int64_t i = 0; i < len; i++)
        ((float *)t->data)[i] = g + (float)(i % 1024);
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}

/* ---- call + sync of every worker ---- */

static void call_sync(int rounds, const char *key, const char *p99_key)
{
    int n = disco_session_num_workers(sess);
    disco_dref_t f, r;
    check(disco_session_get_func(sess, "disco.noop", &f), "get disco.noop");
    double *us = xmalloc((size_t)rounds * sizeof *us);
    for (int i = -WARM_CALLS; i < rounds; i++) {
        int64_t t0 = disco_now_ns();
        check(disco_session_call(sess, f, NULL, 0, &r), "call disco.noop");
        for (int w = 0; w < n; w++)
            check(disco_session_sync(sess, w), "sync");
        int64_t dt = disco_now_ns() - t0;
        check(disco_session_free_reg(sess, r), "free");
        if (i >= 0)
            us[i] = (double)dt / 1e3;
    }
    double p99, med = bench_stats(us, rounds, &p99);
    printf("%s=%.3f\n%s=%.3f\n", key, med, p99_key, p99);
    free(us);
    check(disco_session_free_reg(sess, f), "free");
}

/* ---- a stream of asynchronous calls ---- */

static void stream(int reps, const char *key)
{
    int last = disco_session_num_workers(sess) - 1;
    disco_dref_t f, r;
    check(disco_session_get_func(sess, "disco.noop", &f), "get disco.noop");
    double *rate = xmalloc((size_t)reps * sizeof *rate);
    for (int k = -1; k < reps; k++) { /* one rep untimed */
        int64_t t0 = disco_now_ns();
        for (int i = 0; i < CALLS; i++) {
            check(disco_session_call(sess, f, NULL, 0, &r), "call disco.noop");
            check(disco_session_free_reg(sess, r), "free");
        }
        check(disco_session_sync(sess, last), "sync");
        int64_t dt = disco_now_ns() - t0;
        if (k >= 0)
            rate[k] = (double)CALLS * 1e9 / (double)dt;
    }
    double p99, med = bench_stats(rate, reps, &p99);
    printf("%s=%.1f\n", key, med);
    free(rate);
    check(disco_session_free_reg(sess, f), "free");
}

/* ---- allreduce across the nodes ---- */

/* Checks once, untimed, that the allreduce of x (nb.fill) is right on
 * worker 0: element i = n * (i % 1024) + (0 + 1 + ... + n-1). */
static void check_allreduce(disco_dref_t f, const disco_value_t *args, int64_t len)
{
    int n = disco_session_num_workers(sess);
    float *h = xmalloc((size_t)len * sizeof *h);
    DLTensor t = {
        .data = h, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = &len};
    disco_dref_t y;
    check(disco_session_call(sess, f, args, 3, &y), "allreduce (check)");
    check(disco_session_sync(sess, n - 1), "sync (check)");
    check(disco_session_copy_from_worker0(sess, y, &t), "copy_from_worker0 (check)");
    for (int64_t i = 0; i < len; i++) {
        float want = (float)n * (float)(i % 1024) + (float)(n * (n - 1) / 2);
        if (h[i] != want) {
            fprintf(stderr, "node_bench: allreduce element %lld is %g, want %g\n", (long long)i,
                    (double)h[i], (double)want);
            die("allreduce (check)", DISCO_E_MISMATCH);
        }
    }
    check(disco_session_free_reg(sess, y), "free");
    free(h);
}

static void allreduce(size_t bytes, int warm, int rounds, const char *key, const char *p99_key)
{
    int last = disco_session_num_workers(sess) - 1;
    disco_value_t fa[1] = {disco_value_int((int64_t)(bytes / sizeof(float)))};
    disco_dref_t x, f, y;
    check(disco_session_call_by_name(sess, "nb.fill", fa, 1, &x), "nb.fill");
    check(disco_session_get_func(sess, "disco.allreduce", &f), "get disco.allreduce");
    disco_value_t args[3] = {dref(x), disco_value_str("sum"), disco_value_bool(false)};
    check_allreduce(f, args, fa[0].v.i);
    double *us = xmalloc((size_t)rounds * sizeof *us);
    for (int i = -warm; i < rounds; i++) {
        int64_t t0 = disco_now_ns();
        check(disco_session_call(sess, f, args, 3, &y), "allreduce");
        check(disco_session_sync(sess, last), "sync");
        int64_t dt = disco_now_ns() - t0;
        /* Nothing pending for the next round; the heap gives it the same
         * (warm) block back. */
        check(disco_session_free_reg(sess, y), "free");
        check(disco_session_sync(sess, last), "sync");
        if (i >= 0)
            us[i] = (double)dt / 1e3;
    }
    double p99, med = bench_stats(us, rounds, &p99);
    printf("%s=%.3f\n", key, med);
    if (p99_key != NULL)
        printf("%s=%.3f\n", p99_key, p99);
    free(us);
    check(disco_session_free_reg(sess, f), "free");
    check(disco_session_free_reg(sess, x), "free");
    check(disco_session_sync(sess, last), "sync");
}

/* ---- placement ---- */

/* Sets cfg's placement for pin or float (see the top); list (cap bytes)
 * holds the CPUs named. Too few CPUs for a block: left floating. */
static void place(disco_session_config_t *cfg, int w, bool pin, char *list, size_t cap)
{
    cfg->place.policy = DISCO_PLACE_NONE;
    if (!pin)
        return;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int first = (lr != NULL ? atoi(lr) : 0) * w, k = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    size_t used = 0;
    list[0] = '\0';
    for (int cpu = 0; cpu < CPU_SETSIZE && k < first + w; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        if (k++ >= first)
            used += (size_t)snprintf(list + used, cap - used, "%s%d", used ? "," : "", cpu);
        if (used >= cap)
            return; /* cannot say it: left floating */
    }
    if (k < first + w)
        return; /* fewer CPUs than workers: left floating */
    cfg->place.policy = DISCO_PLACE_LIST;
    cfg->place.cpus = list;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    bool local = argc == 5 && strcmp(argv[1], "--local") == 0;
    char **a = argv + (local ? 2 : 1);
    int w = argc >= 4 ? atoi(a[0]) : 0, reps = argc >= 4 ? atoi(a[1]) : 0;
    if (w < 1 || reps < 1 || reps > 100 || argc != (local ? 5 : 4) ||
        (strcmp(a[2], "pin") != 0 && strcmp(a[2], "float") != 0)) {
        fprintf(stderr, "usage: mpirun -np 2 node_bench WORKERS_PER_NODE REPS pin|float\n"
                        "       node_bench --local WORKERS REPS pin|float\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    disco_register_func("nb.fill", "i", fill);
    disco_session_config_t cfg = disco_session_config_default(local ? w : 0);
    cfg.call_timeout_ms = 30000;
    char cpus[256];
    place(&cfg, w, strcmp(a[2], "pin") == 0, cpus, sizeof cpus);
    if (!local) {
        cfg.nodes = DISCO_NODES_MPI;
        cfg.workers_per_node = w;
        cfg.heap_bytes = HEAP_BYTES;
        /* Groups may not span nodes, and the default (one group) would:
         * one group a node (the launcher says how many). */
        const char *np = getenv("OMPI_COMM_WORLD_SIZE");
        cfg.num_groups = np != NULL && atoi(np) > 0 ? atoi(np) : 1;
    }
    check(disco_session_open(&cfg, &sess), "open"); /* an agent stays in here */
    int stream_reps = reps / 3 < 3 ? 3 : reps / 3;
    printf("node_workers=%d\nnode_place=%s\n", disco_session_num_workers(sess),
           cfg.place.policy == DISCO_PLACE_LIST ? cpus : "none");
    if (local) {
        call_sync(150 * reps, "node_call_sync_local_us", "node_call_sync_local_p99_us");
        stream(stream_reps, "node_stream_local_calls_per_s");
    } else {
        call_sync(150 * reps, "node_call_sync_us", "node_call_sync_p99_us");
        stream(stream_reps, "node_stream_calls_per_s");
        allreduce(MIB, WARM_SMALL, 10 * reps, "node_allreduce_us_1MiB",
                  "node_allreduce_p99_us_1MiB");
        allreduce(BIG, WARM_BIG, reps, "node_allreduce_us_64MiB", NULL);
    }
    disco_session_close(sess);
    return 0;
}
