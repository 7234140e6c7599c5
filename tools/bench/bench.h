/*
 * bench.h - what disco-bench's sections share: recording a figure
 * (bench_report.c) and measuring one (disco-bench.c); the sections are in
 * bench_*.c.
 */
#ifndef DISCO_TOOLS_BENCH_H
#define DISCO_TOOLS_BENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "disco/clock.h"
#include "disco/shm/wait.h"

#include "tools/bench/bench_util.h"

/* Runs iters rounds and returns the ns they took (the timed part only). */
typedef int64_t (*round_fn)(void *ctx, uint64_t iters);

/** Median over the configured repetitions of the mean ns per round. */
double measure(round_fn fn, void *ctx);

/** Median over reps (at most 1000) single rounds, after warm untimed ones:
 *  for rounds of milliseconds, where measure()'s batches would take too
 *  long, and for the allreduce figures, so that they are the same statistic
 *  as Open MPI's (mpi_allreduce.c: the median of single calls). A median of
 *  single rounds also keeps a round that lost its CPU to another process
 *  from skewing the figure, as it would a batch's mean. */
double median_single(round_fn fn, void *ctx, int warm, int reps);

/** Shared anonymous memory, inherited by forked children (bench_shm.c);
 *  the program ends saying so when mmap fails. */
void *bench_shared_alloc(size_t size);

/** Spins until *p holds want or stop, and returns what it holds; 0 (never
 *  a valid value) after BU_DEADLINE_NS, the clock read only every 64K
 *  spins, so a dead peer costs that long, not a hang. pause: a pause
 *  between loads (as disco's waits), else a plain load loop. Inline, so
 *  that a constant pause leaves no branch in the loop. */
static inline uint64_t bench_spin_until(_Atomic uint64_t *p, uint64_t want, uint64_t stop,
                                        bool pause)
{
    int64_t start = 0;
    for (uint32_t i = 1;; i++) {
        /* Acquire: pairs with the peer's release store of the new value. */
        uint64_t v = atomic_load_explicit(p, memory_order_acquire);
        if (v == want || v == stop)
            return v;
        if (pause)
            disco_cpu_relax();
        if ((i & 0xffff) == 0) {
            int64_t now = disco_now_ns();
            if (start == 0)
                start = now;
            else if (now - start > BU_DEADLINE_NS)
                return 0;
        }
    }
}

/** malloc, or the program ends saying so. */
void *bench_xmalloc(size_t n);

/** Records a figure under its contract key and prints it. */
void record(const char *key, double value, const char *unit);

/** Repetitions per figure (fewer with --quick). */
int bench_reps(void);

/** Idle seconds measured by bench_idle (fewer with --quick). */
int bench_idle_reps(void);

/** The floor (bench_shm.c): floor_rtt_ns, cache-line ping-pong between two
 *  pinned processes, and floor_2line_rtt_ns (one line per direction). */
void bench_floor(void);

/** Ring round trips (bench_shm.c): ring_rtt_ns (64 bytes over two 1-reader
 *  rings) and ring_rtt_48b_ns. */
void bench_ring_rtt(void);

/** Pipe round trip (bench_shm.c): pipe_rtt_ns, the baseline. */
void bench_pipe_rtt(void);

/** Broadcast + acks (bench_shm.c): bcast_ns_nN over rings and
 *  pipe_bcast_ns_nN over pipes, N = 1, 2, 4, 8. */
void bench_bcast(void);

/** Idle cost (bench_shm.c): idle_cpu_pct, CPU used by a reader parked on
 *  an empty ring. */
void bench_idle(void);

/** The session figures: call_sync_ns (rings, N = 2), call_sync_p99_ns (its
 *  tail with the defaults), call_sync_pipe_ns, call_sync_ns_n4,
 *  call_sync_ns_n8, session_open_ms_n8. */
void bench_session(void);

/** What watching costs (bench_session.c): call_sync_ns's session measured
 *  without and with a `disco top` process attached to this one, same
 *  session, alternated: call_sync_notop_ns, call_sync_top_ns (--interval
 *  100), call_sync_top10_ns (--interval 10), top_overhead_ratio and
 *  top10_overhead_ratio (with / without), call_sync_notop_p99_ns and
 *  call_sync_top_p99_ns; the control: call_sync_waker_ns and
 *  waker_overhead_ratio, with a process that only wakes every 100 ms. Skipped, with one line,
 * without the disco program (beside this one, or $DISCO_BENCH_TOP). */
void bench_session_top(void);
/** The in-worker collective figures (bench_comm.c): ctx_allreduce_us_1KiB_nN,
 *  ctx_allreduce_us_1MiB_nN (N = 2, 4, 8) beside mpi_allreduce_us_* and
 *  ctl_allreduce_us_* of the same sizes and N, and ctx_sendrecv_us_1KiB_n2. */
void bench_comm(void);

/** exchange_floor_us_1KiB_n2 (bench_exchange.c): the inline meeting's
 *  exchange of 1 KiB between two pinned processes with nothing else, the
 *  least this machine allows for it; disco_ctx_allreduce's figure is
 *  compared with it. Returns the figure in µs (also recorded). */
double bench_exchange_floor(void);
/** The recovery figures (bench_recover.c): recover_ms_n8 (median),
 *  recover_ms_n8_p99 and their baseline recover_open_ms_n8 (open + close of
 *  a fresh session of 8, in the same run). */
void bench_recover(void);

/** The data-plane figures, N = 2 (bench_tensor.c): allreduce_us_1MiB,
 *  allreduce_us_64MiB, bcast_us_1MiB, bcast_us_64MiB, copy_to_worker0_gbps
 *  and its baseline memcpy_gbps. */
void bench_tensor(void);

/** The RPC figures (bench_rpc.c): a no-op disco_rpc_call round trip to a
 *  forked server over each transport, rpc_call_ns_shm, _unix, _tcp, _pipe;
 *  and rpc_copy_gbps_shm, disco_rpc_copy_to_remote of 64 MiB into a remote
 *  CPU allocation (baseline: memcpy_gbps from bench_tensor). */
void bench_rpc(void);

/** The SPMD step figures beside Open MPI's (bench_step.c): call on all +
 *  sync every worker at N = 2, 4, 8, 16 (call_sync_all_ns_nN and p99,
 *  call_sync_fused_ns_nN and p99) beside mpi_bcast_gather_ns_nN and p99,
 *  call_sync_each_ns_nN at N = 2, 4, 8, stream_calls_per_s_n2/_n4,
 *  idle_cpu_pct_n8 beside mpi_idle_cpu_pct_n8. */
void bench_step(void);

/** The Open MPI baseline (bench_tensor.c): runs bench_mpi_path() under
 *  mpirun with 2 ranks and records mpi_allreduce_us_1MiB and
 *  mpi_allreduce_us_64MiB; records nothing (and says why) without it. */
void bench_mpi(void);

/** The figures across nodes (bench_node.c): runs bench_node_path() (a
 *  session of 2 nodes x 2 workers under mpirun, and one node of 4
 *  workers) and bench_node_base_path() (Open MPI over 4 ranks), over
 *  shared memory and over TCP on loopback, and records node_*, mpi_*
 *  (bcast_gather, allreduce_flat) and their _tcp twins; records nothing
 *  (and says why) without the programs. */
void bench_node(void);

/** The node_bench program (--node-bench PATH, else $DISCO_BENCH_NODE), or
 *  NULL; the mpi_node_base program (--node-base PATH, else
 *  $DISCO_BENCH_NODE_BASE), or NULL. */
const char *bench_node_path(void);
const char *bench_node_base_path(void);

/** The GPU figures (bench_gpu.c): allreduce of device tensors, copies to and
 *  from worker 0, a peer's arena read, IPC open first and cached, and a
 *  no-op call + sync with device arenas held, each beside its baseline.
 *  Without a GPU: one "GPU: skipped" line and nothing recorded. With
 *  --device sim: the same code on the simulated device at smoke sizes,
 *  every figure printed as SIM and none recorded. */
void bench_gpu(void);

/** Whether --device sim was given (bench_gpu runs on the simulated device). */
bool bench_gpu_sim(void);

/** The mpi_allreduce program (--mpi PATH, else $DISCO_BENCH_MPI), or NULL. */
const char *bench_mpi_path(void);

/** Records a note (a word on how figures were taken, e.g. their
 *  transport) under key: printed nowhere, written to the JSON's "notes".
 *  key must outlive the program (a literal); text is copied. */
void bench_note(const char *key, const char *text);

/** The number of figures recorded so far (disco-bench.c: whether a
 *  section recorded any). */
int bench_result_count(void);

/** Prints the machine and every recorded figure beside its baseline and
 *  target (bench_report.c). */
void bench_print_table(const bu_machine_t *m);

/** Writes the machine, the recorded figures and the configuration (quick,
 *  reps) as JSON to path; dies if it cannot (bench_report.c). */
void bench_write_json(const char *path, const bu_machine_t *m, bool quick, int reps);

/** The IPC figures of the GPU section (bench_gpu_ipc.c): medians, in us, of
 *  importing a peer process's allocation on dev that opens its handle
 *  (us_out[0]) and while one is held (us_out[1]). Forks: call it before
 *  this process touches the device. */
void bench_gpu_ipc(DLDevice dev, double us_out[2]);

#endif
