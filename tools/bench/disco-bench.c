/*
 * disco-bench - control-plane latency of disco against its floor and pipes,
 * and data-plane figures against memcpy and Open MPI.
 *
 *   disco-bench [--json PATH] [--quick] [--mpi PATH] [--only TEXT]
 *               [--node-bench PATH --node-base PATH] [--device cuda|sim] [--help]
 *
 * Figures (the JSON keys are a contract; ns, us, GB/s or percent, medians
 * over reps):
 *   floor_rtt_ns        cache-line ping-pong between two pinned processes
 *   ring_rtt_ns         64-byte round trip over two 1-reader disco rings
 *   pipe_rtt_ns         the same over a pair of pipes (TVM Disco's channel)
 *   bcast_ns_nN         one 64-byte broadcast to N readers + N acks (rings)
 *   pipe_bcast_ns_nN    the same over 2N pipes (baseline)
 *   idle_cpu_pct        CPU used by a reader parked on an empty ring
 *   call_sync_ns        session: no-op call on every worker + sync worker 1,
 *                       N = 2, rings (bench_session.c); _n4, _n8: N = 4, 8
 *   call_sync_p99_ns    the same round with the defaults (placement as a
 *                       user gets it, nothing pinned by the bench): the
 *                       99th percentile of single rounds
 *   call_sync_pipe_ns   the same session over pipes (baseline; _n4, _n8 too)
 *   session_open_ms_n8  open + close a session of 8 workers
 *   call_sync_top_ns    call_sync_ns's session with `disco top --interval 100`
 *                       attached to this process (bench_session.c);
 *                       call_sync_notop_ns the same session unwatched
 *                       (baseline, alternated 5 times, medians);
 *                       top_overhead_ratio = top / notop; _top10_ and
 *                       top10_: --interval 10; call_sync_top_p99_ns and
 *                       call_sync_notop_p99_ns: p99 of single rounds;
 *                       call_sync_waker_ns, waker_overhead_ratio: the
 *                       control, a process that wakes every 100 ms
 *   recover_ms_n8       disco_session_recover of 8 workers after a kill -9,
 *                       median of single recoveries; _p99 their p99
 *                       (bench_recover.c); recover_open_ms_n8: open +
 *                       close of 8 in the same run (baseline)
 *   trace_overhead_pct  call_sync_ns with command stamps on against off
 *                       (call_sync_traced_ns / call_sync_untraced_ns), 5
 *                       alternations, medians
 *   allreduce_us_1MiB   float32 sum allreduce + sync worker 1, N = 2, pinned
 *                       (bench_tensor.c); _64MiB: of 64 MiB
 *   mpi_allreduce_us_1MiB  Open MPI's MPI_Allreduce, 2 ranks (baseline; _64MiB
 *                       too; only with --mpi: tools/bench/mpi_allreduce.c)
 *   bcast_us_64MiB      broadcast_from_worker0 + sync worker 1 (by reference);
 *                       bcast_us_1MiB shows it is O(1) in the size
 *   allreduce_into_us_1MiB  disco.allreduce_into (float32 sum into a tensor
 *                       made once) + sync worker 1, median of single rounds;
 *                       _64MiB; allgather_into_us_1MiB (1 MiB each into 2
 *                       MiB), bcast_into_us_1MiB (broadcast_from_worker0_into);
 *                       each with a _p99_ (allreduce_into_p99_us_1MiB): the C
 *                       side of py_bench.py's py_allreduce_us_* and others
 *   copy_to_worker0_gbps  copy of 64 MiB into worker 0's heap (+ free)
 *   memcpy_gbps         single-core memcpy of 64 MiB (baseline)
 *   rpc_call_ns_shm     RPC: no-op disco_rpc_call round trip to a forked
 *                       server over shm (bench_rpc.c); _unix, _tcp, _pipe:
 *                       over the other transports (baselines)
 *   rpc_copy_gbps_shm   disco_rpc_copy_to_remote of 64 MiB over shm into a
 *                       remote CPU allocation (baseline memcpy_gbps)
 *   Across nodes (bench_node.c; only with --node-bench and --node-base): a
 *   session of 2 nodes x 2 workers under mpirun (tools/bench/node_bench.c),
 *   its link between the nodes MPI over shared memory (btl vader); the same
 *   keys ending in _tcp: over TCP on loopback (btl tcp, lo); the JSON's
 *   "notes" say which (node_transport, node_transport_tcp):
 *   node_call_sync_us   a no-op call + a sync of every worker 0..3 in
 *                       turn, single rounds, median; _p99_us: their p99
 *   mpi_bcast_gather_us  baseline: Open MPI over 4 ranks (mpi_node_base.c),
 *                       MPI_Bcast of 64 B from rank 0 + MPI_Gather of 8 B
 *                       to it, single rounds; mpi_bcast_gather_p99_us
 *   node_stream_calls_per_s  calls/s: 20000 asynchronous no-op calls (each
 *                       result freed) + a sync of the last worker, median
 *   node_stream_local_calls_per_s  baseline: the same on one node of 4
 *                       workers (no MPI); node_call_sync_local_us and
 *                       _p99_us: the call round there too
 *   node_allreduce_us_1MiB  float32 sum allreduce (a chain between the
 *                       nodes) + sync of the last worker, median;
 *                       node_allreduce_p99_us_1MiB; _64MiB: of 64 MiB
 *   mpi_allreduce_flat_us_1MiB  baseline: MPI_Allreduce over 4 ranks,
 *                       slowest rank, median; _p99_us_1MiB; _us_64MiB
 *   gpu_*, ipc_open_us_*, call_sync_spawn_ns  the GPU section
 *                       (bench_gpu.c, which lists them): allreduce of
 *                       device tensors, copies to and from worker 0, a
 *                       peer's arena read, IPC open, call + sync with device
 *                       arenas held; each beside a cudaMemcpy (or CPU)
 *                       baseline of the same run; skipped with one line
 *                       without a GPU; --device sim runs it on the simulated
 *                       device, printed as SIM, never recorded
 *   call_sync_all_ns_nN, call_sync_fused_ns_nN, mpi_bcast_gather_ns_nN and
 *                       their p99s, N = 2, 4, 8, 16: the SPMD step beside
 *                       Open MPI (bench_step.c, which lists the rest)
 *
 * Exit status: 0; 2 on a bad option; 3 when DISCO_REQUIRE_GPU is set (and
 * not "0") and the GPU section ran on CUDA (a whole run, or --only matching
 * "GPU") but recorded no figure: it skipped, no CUDA device (the GPU kit's
 * steps rely on this; test_tools.c's test_bench_gpu_required holds it).
 * Sections that fail end the program with 1 (bu_die) or 2 (the watchdog).
 *
 * Diagnostics (not in the contract): floor_2line_rtt_ns (one line per
 * direction, as a pair of rings must use) and ring_rtt_48b_ns (a message
 * that fits one line with its slot header).
 *
 * Layout: each figure is a bench_* function that calls record(); the rows
 * table in bench_report.c says how to print them (baseline, ratio, target).
 * To add a figure, write its function, add it to `sections` below, add its
 * rows. This file holds the options, measure() and the main; the
 * shared-memory figures are in bench_shm.c, the session, tensor, RPC and
 * across-nodes figures in bench_session.c, bench_tensor.c, bench_rpc.c and
 * bench_node.c.
 *
 * Method: a figure's round function runs `iters` rounds and returns the
 * elapsed ns. measure() warms up while calibrating iters so that one rep
 * takes ~rep_ns, then takes the median of the per-rep means.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"

/* ---- options ---- */

static struct {
    bool quick;
    int reps;                     /* repetitions per figure */
    int64_t rep_ns;               /* target duration of one repetition */
    int idle_reps;                /* idle seconds measured */
    const char *mpi;              /* the mpi_allreduce program, or NULL */
    const char *node, *node_base; /* node_bench and mpi_node_base, or NULL */
    const char *only;             /* run only the sections whose names contain this */
    bool sim;                     /* --device sim: the GPU section on the simulated device */
} opt = {false, 15, 30000000, 3, NULL, NULL, NULL, NULL, false};

/* ---- measuring ---- */

#define CALIBRATE_NS 2000000LL /* warm-up: at least 2 ms of rounds */
#define MIN_ITERS    50u
#define MAX_ITERS    (1u << 22)

/* Median over opt.reps of the mean ns per round. */
int bench_reps(void)
{
    return opt.reps;
}

const char *bench_mpi_path(void)
{
    return opt.mpi;
}

const char *bench_node_path(void)
{
    return opt.node;
}

const char *bench_node_base_path(void)
{
    return opt.node_base;
}

double measure(round_fn fn, void *ctx)
{
    uint64_t iters = 8;
    int64_t t;
    while ((t = fn(ctx, iters)) < CALIBRATE_NS && iters < MAX_ITERS)
        iters *= 2;
    double per = (double)t / (double)iters;
    double want = (double)opt.rep_ns / (per > 1 ? per : 1);
    iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (uint64_t)want;
    double v[64] = {0};
    for (int r = 0; r < opt.reps; r++)
        v[r] = (double)fn(ctx, iters) / (double)iters;
    return bu_median(v, opt.reps);
}

#define MAX_SINGLE_REPS 1000

double median_single(round_fn fn, void *ctx, int warm, int reps)
{
    double v[MAX_SINGLE_REPS] = {0};
    reps = reps < MAX_SINGLE_REPS ? reps : MAX_SINGLE_REPS;
    for (int i = 0; i < warm; i++)
        fn(ctx, 1);
    for (int r = 0; r < reps; r++)
        v[r] = (double)fn(ctx, 1);
    return bu_median(v, reps);
}

void *bench_xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        bu_die("out of memory (%zu bytes)", n);
    return p;
}

/* Whether DISCO_REQUIRE_GPU asks for a GPU (set, not empty, not "0"), as
 * the GPU test suites read it (tests/gpu_session_util.h). */
static bool gpu_required(void)
{
    const char *v = getenv("DISCO_REQUIRE_GPU");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

bool bench_gpu_sim(void)
{
    return opt.sim;
}

int bench_idle_reps(void)
{
    return opt.idle_reps;
}

/* ---- sections ---- */

static const struct section {
    const char *name;
    void (*run)(void);
} sections[] = {
    {"floor", bench_floor},
    {"ring round trip", bench_ring_rtt},
    {"pipe round trip", bench_pipe_rtt},
    {"broadcast + acks", bench_bcast},
    {"idle reader", bench_idle},
    {"session: call + sync", bench_session},
    {"session: call + sync watched by disco top", bench_session_top},
    {"session: recovery", bench_recover},
    {"data plane: tensors, N = 2", bench_tensor},
    {"RPC: call and copy to remote", bench_rpc},
    {"Open MPI baseline", bench_mpi},
    {"SPMD step: every worker, beside Open MPI", bench_step},
    {"in-worker collectives (comm.h), beside Open MPI", bench_comm},
    {"across nodes: 2 nodes x 2 workers", bench_node},
    {"GPU", bench_gpu}, /* last: it initializes CUDA here, after which nothing may fork */
};

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: disco-bench [--json PATH] [--quick] [--mpi PATH] [--only TEXT]\n"
               "                   [--node-bench PATH --node-base PATH] [--device cuda|sim]\n"
               "                   [--help]\n"
               "  --json PATH  also write the results as JSON to PATH\n"
               "  --quick      fewer, shorter repetitions (smoke test)\n"
               "  --mpi PATH   the mpi_allreduce program, run with mpirun as the\n"
               "               allreduce baseline (default $DISCO_BENCH_MPI; none: skipped)\n"
               "  --only TEXT  run only the sections whose names contain TEXT\n"
               "               (e.g. \"session\", \"node\"); the others' rows are left out\n"
               "  --node-bench PATH, --node-base PATH  the node_bench and mpi_node_base\n"
               "               programs, for the figures across nodes (defaults\n"
               "               $DISCO_BENCH_NODE, $DISCO_BENCH_NODE_BASE; none: skipped)\n"
               "  --device D   the GPU section's device: cuda (default; skipped with one\n"
               "               line without a GPU) or sim, the simulated device, at smoke\n"
               "               sizes, its figures printed as SIM and never recorded\n"
               "DISCO_REQUIRE_GPU=1 (set, not 0): exit 3 when the GPU section runs on CUDA\n"
               "               and skips (no CUDA device)\n"
               "Prints floor, ring and pipe round trips, broadcast + acks to 1..8\n"
               "readers, the idle CPU of a parked reader, session calls, and the data\n"
               "plane: allreduce, broadcast, copy to worker 0, the figures across nodes, and\n"
               "the GPU figures (medians).\n");
}

int main(int argc, char **argv)
{
    const char *json_path = NULL;
    const char *mpi_env = getenv("DISCO_BENCH_MPI");
    if (mpi_env != NULL && mpi_env[0] != '\0')
        opt.mpi = mpi_env;
    const char *node_env = getenv("DISCO_BENCH_NODE"), *base_env = getenv("DISCO_BENCH_NODE_BASE");
    if (node_env != NULL && node_env[0] != '\0')
        opt.node = node_env;
    if (base_env != NULL && base_env[0] != '\0')
        opt.node_base = base_env;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json_path = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            opt.quick = true;
            opt.reps = 5;
            opt.rep_ns = 5000000;
            opt.idle_reps = 1;
        } else if (strcmp(argv[i], "--mpi") == 0 && i + 1 < argc) {
            opt.mpi = argv[++i];
        } else if (strcmp(argv[i], "--node-bench") == 0 && i + 1 < argc) {
            opt.node = argv[++i];
        } else if (strcmp(argv[i], "--node-base") == 0 && i + 1 < argc) {
            opt.node_base = argv[++i];
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "cuda") == 0 || strcmp(argv[i + 1], "sim") == 0)) {
            opt.sim = strcmp(argv[++i], "sim") == 0;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            opt.only = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    bu_cpus_init();
    if (bu_ncpus < 2)
        fprintf(stderr, "warning: only one CPU allowed; \"different cores\" cannot hold\n");
    bu_machine_t m;
    bu_machine_probe(&m);
    printf("disco-bench: %d reps per figure%s\n", opt.reps, opt.quick ? " (quick)" : "");
    bool gpu_skipped = false; /* the GPU section ran on CUDA and recorded nothing */
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (opt.only != NULL && strstr(sections[i].name, opt.only) == NULL)
            continue;
        printf("%s\n", sections[i].name);
        bu_watchdog(120); /* a section that takes this long is stuck */
        bu_unpin();       /* every section starts floating over all CPUs */
        int before = bench_result_count();
        sections[i].run();
        if (sections[i].run == bench_gpu && !opt.sim && bench_result_count() == before)
            gpu_skipped = true;
    }
    bu_watchdog(0);
    bench_print_table(&m);
    if (json_path != NULL)
        bench_write_json(json_path, &m, opt.quick, opt.reps);
    if (gpu_skipped && gpu_required()) {
        printf("disco-bench: FAIL: DISCO_REQUIRE_GPU is set and the GPU section skipped "
               "(no CUDA device; see its line above)\n");
        return 3;
    }
    return 0;
}
