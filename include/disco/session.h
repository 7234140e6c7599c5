/*
 * disco/session.h - a Disco session: one controller, N workers, SPMD.
 *
 * The controller broadcasts commands; every worker executes every command in
 * the same order and keeps a register file. A call puts its result in a
 * register on every worker and returns at once with a DRef (the register id,
 * valid on every worker). Sync waits for a worker to finish everything sent
 * before it and reports errors.
 *
 * Workers. Worker 0 runs in the controller's process and thread: each command
 * is executed for worker 0 right after it is broadcast, so worker 0 sees the
 * same commands in the same order. Workers 1..N-1 are child processes, forked
 * (DISCO_LAUNCH_FORK, the default: the controller must be single-threaded at
 * open) or spawned by exec of the disco-worker program with the segment fd
 * inherited (DISCO_LAUNCH_SPAWN: for controllers that are multithreaded or
 * hold a CUDA context). Spawned workers have only the builtins and the
 * libraries loaded with "disco.load_library"; a program of your own can be
 * the spawned worker too (disco_worker_main, in disco/worker.h).
 *
 * Errors. Mistakes the controller can see (unknown function, wrong argument
 * type or count against the signature, a freed or bad register) fail the call
 * itself. Failures while running (a function that fails on any worker) are
 * kept by the worker and returned by the next sync or debug get as
 * DISCO_E_REMOTE, with disco_last_error() naming the worker, the function
 * and the message; the session stays usable. A worker that dies (signal,
 * exit) or a sync that passes the call deadline breaks the session: the
 * first call to return an error after it, whichever it is, returns the
 * cause, DISCO_E_WORKER_DIED or DISCO_E_TIMEOUT (the hung worker is
 * killed), and every later call returns DISCO_E_BROKEN naming the cause. A
 * collective that worker 0 gives up at its deadline breaks the session the
 * same way: the late members are killed before any buffer of the call is
 * freed. A wait for the shared heap's lock ends at the call deadline
 * (DISCO_E_TIMEOUT naming the holder) when its holder is stopped.
 * Close always works and leaves no process, fd or segment behind.
 *
 * Limits. Worker 0 is the controller's own thread: a function that hangs or
 * crashes on worker 0 hangs or crashes the controller (as in TVM's Disco);
 * deadlines and crash detection cover workers 1..N-1. If the controller dies,
 * its workers die too (parent-death signal plus a parent check). The
 * parent-death signal follows the thread that opened the session: open it
 * from a thread that outlives the session.
 *
 * Threads. With DISCO_LAUNCH_THREAD, workers 1..N-1 are threads of the
 * controller's process, for debugging and single-process use: the same
 * commands, registers, errors and collectives of host tensors (the shared
 * heap is plain memory of this process), and every function registered in
 * the process, even after open. What differs: device tensors are refused
 * (DISCO_E_UNSUPPORTED: the device layer's IPC state is per process); a
 * worker function that crashes the process (a signal) takes the controller
 * and every worker down; a worker that passes the call deadline breaks the
 * session as in other modes, but a thread cannot be killed: it is told to
 * stop and a user C function it runs is cancelled at its next cancellation
 * point (sleep, read, poll...); one that never reaches one (a busy loop, a
 * Python function) keeps running, and close then keeps the session's
 * shared memory mapped for the rest of the process. There is no
 * parent-death signal (the threads end with the process);
 * disco_session_worker_pid gives the process's pid and disco top each
 * worker's thread id; placement binds each thread. Not across nodes.
 *
 * Across nodes. With cfg.nodes = DISCO_NODES_MPI, a program started as
 * `mpirun -np K prog` opens one session whose K * workers_per_node
 * workers span the K processes (one a node, each with its node's workers
 * forked as above). Every process calls disco_session_open with the same
 * config. On rank 0 it returns the session: rank 0 is the controller and
 * its worker 0 the session's worker 0. On every other rank it does not
 * return: the process serves as its node's agent (it relays each command
 * into its node's ring and sends replies, errors and deaths back) and
 * exits when the controller closes the session (code 0) or is lost (1).
 * Worker ids are global, node-major (node k has k*W .. k*W+W-1), in
 * disco_ctx_worker_id and in every call that names a worker. Groups may
 * not span nodes, except the one group of everyone (the default).
 * Collectives: every collective of host tensors runs across nodes
 * (allreduce but its avg; through the shared heap inside each node, MPI
 * between the nodes; allreduce's result is bit for bit one node's for f32,
 * f64 and integers); allreduce, allgather and gather of device tensors are
 * staged through host memory between nodes (no GPU-aware path);
 * allreduce's avg, and broadcast, scatter and send_recv of device
 * tensors, fail with DISCO_E_UNSUPPORTED across nodes (in-group
 * collectives of groups inside a node stay there and work). A node that dies, or stops
 * answering its heartbeats (DISCO_NODE_LEASE_MS, default 3 s, at most half
 * the call deadline), breaks the session with DISCO_E_WORKER_DIED naming
 * the node and its workers. Run with `mpirun --mca orte_enable_recovery 1`
 * for that: without it, Open MPI ends the whole job when one process dies.
 * A build without Open MPI refuses DISCO_NODES_MPI (DISCO_E_UNSUPPORTED).
 *
 * Thread safety: a session is used by one thread at a time.
 */
#ifndef DISCO_SESSION_H
#define DISCO_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "disco/heap_stats.h"
#include "disco/placement.h"
#include "disco/status.h"
#include "disco/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How workers 1..N-1 are started (see "Workers" above). */
typedef enum disco_launch {
    DISCO_LAUNCH_FORK = 0,   /* fork the controller (default) */
    DISCO_LAUNCH_SPAWN = 1,  /* exec the disco-worker program (worker_path) */
    DISCO_LAUNCH_THREAD = 2, /* threads of the controller's process (see "Threads") */
} disco_launch_t;

/* How commands reach the workers. */
typedef enum disco_session_transport {
    DISCO_TRANSPORT_RING = 0, /* shared-memory rings (default) */
    DISCO_TRANSPORT_PIPE = 1, /* a pair of pipes per worker, as TVM's ProcessSession */
} disco_session_transport_t;

/* Where the workers run (see "Across nodes" above). */
typedef enum disco_nodes {
    DISCO_NODES_LOCAL = 0, /* this machine only (default) */
    DISCO_NODES_MPI = 1,   /* one process per node started by mpirun; rank 0 controls */
} disco_nodes_t;

/* Options of a session: start from disco_session_config_default(). */
typedef struct disco_session_config {
    int num_workers;       /* >= 1; worker 0 is the controller. Across nodes: 0, or
                              nodes * workers_per_node */
    disco_launch_t launch; /* default fork */
    /* how commands reach the workers (default rings) */
    disco_session_transport_t transport;
    uint32_t call_timeout_ms;    /* deadline of each wait (sync, debug get); 0 = 60 s */
    uint64_t spin_ns;            /* spin before parking; 0 = default (shorter when
                                    processes outnumber cores) */
    uint64_t pause_ns;           /* pause-only part of the spin; 0 = default */
    const char *worker_path;     /* spawn: the disco-worker program; NULL = $DISCO_WORKER,
                                    else "disco-worker" beside the running program
                                    (copied at open: it need not outlive the call) */
    uint32_t max_msg;            /* largest command frame; 0 = 64 KiB */
    uint64_t heap_bytes;         /* shared heap for tensors, reserved at open and
                                    backed as tensors use it; 0 = half the
                                    machine's memory (or of the cgroup's limit),
                                    no more than is available at open, at
                                    least 16 MiB (docs/tensors.md, "The heap") */
    int num_groups;              /* worker groups for in-group collectives; must divide
                                    num_workers; 0 = 1 */
    bool trace_off;              /* no command stamps (see trace.h); default on */
    disco_place_config_t place;  /* where workers run (see placement.h); default:
                                    $DISCO_PLACE, else spread (none when
                                    workers outnumber PUs). Workers 1..N-1 bind
                                    themselves at start; worker 0, the caller's
                                    thread, is bound by open to its entry too
                                    (unless place.leave_controller), so that the
                                    kernel cannot put it on a worker's CPU;
                                    close gives the thread back its CPUs and
                                    memory policy */
    uint64_t device_arena_bytes; /* each worker's device arena, from which
                                    its sim or CUDA tensors are made
                                    (allocated at its first device tensor);
                                    0 = 64 MiB, at most 2^40 */
    disco_nodes_t nodes;         /* DISCO_NODES_MPI: the session spans the MPI job's
                                    processes, one a node (see "Across nodes") */
    int workers_per_node;        /* across nodes: each node's workers (>= 1), its
                                    worker 0 being that node's process */
    uint32_t watchdog_ms;        /* a wait this long writes the watchdog's report
                                    (disco/observe.h) to stderr, once, and goes on;
                                    0 = $DISCO_WATCHDOG_MS, else the smaller of 5 s
                                    and half the call timeout;
                                    DISCO_WATCHDOG_OFF = never */
} disco_session_config_t;

#define DISCO_WATCHDOG_OFF UINT32_MAX /* watchdog_ms: no watchdog */

/* A session (opaque): disco_session_open makes one, disco_session_close ends it. */
typedef struct disco_session disco_session_t;

/* A DRef: a register id valid on every worker of one session. 0 is never a
 * valid register. */
typedef uint64_t disco_dref_t;

/** A config with the defaults for n workers. */
disco_session_config_t disco_session_config_default(int num_workers);

/** Opens a session: makes the shared segment, starts workers 1..N-1.
 *  Not thread-safe with respect to fork (see the launch modes). Returns
 *  DISCO_OK, DISCO_E_INVAL (bad config), DISCO_E_NOSPACE/DISCO_E_SYS (segment,
 *  fork, spawn), DISCO_E_NOMEM. On failure nothing is left running. */
disco_status_t disco_session_open(const disco_session_config_t *cfg, disco_session_t **sess_out);

/** Shuts the workers down (asks, then kills stragglers after a grace period),
 *  reaps them and frees everything. NULL is harmless; so is a session that is
 *  broken. If open bound the controller's thread (see place), that thread's
 *  CPU affinity is restored, and its memory policy too when close runs on
 *  it (a memory policy can only be set by its own thread). */
void disco_session_close(disco_session_t *sess);

/** Asks the workers to exit and reaps them, keeping the handle (later calls
 *  return DISCO_E_SHUTDOWN). Harmless twice. */
disco_status_t disco_session_shutdown(disco_session_t *sess);

/** Number of workers, worker 0 included. */
int disco_session_num_workers(const disco_session_t *sess);

/** Looks a function up by name on every worker; the DRef holds its handle.
 *  Returns DISCO_OK, DISCO_E_NO_FUNC (unknown on the controller's worker 0;
 *  a worker that lacks it reports at the next sync), DISCO_E_BROKEN,
 *  DISCO_E_SHUTDOWN. */
disco_status_t disco_session_get_func(disco_session_t *sess, const char *name,
                                      disco_dref_t *func_out);

/** Calls the function in register func on every worker with args (DRefs
 *  among them stand for the register's value on each worker) and returns the
 *  result register at once. Returns DISCO_OK, DISCO_E_BAD_REG (func or a
 *  DRef argument is not a live register), DISCO_E_BAD_TYPE,
 *  DISCO_E_ARG_COUNT (arguments disagree with the signature),
 *  DISCO_E_MSG_TOO_BIG (arguments larger than max_msg), DISCO_E_BROKEN,
 *  DISCO_E_SHUTDOWN, DISCO_E_TIMEOUT (the ring or a worker's pipe stayed
 *  full: that worker is killed; or a collective's member did not reach it
 *  in time: it is killed), DISCO_E_WORKER_DIED (found by a wait of worker
 *  0's in a collective, or first seen by this call). */
disco_status_t disco_session_call(disco_session_t *sess, disco_dref_t func,
                                  const disco_value_t *args, int nargs, disco_dref_t *result_out);

/** Waits until worker has executed every command sent before this one.
 *  Returns DISCO_OK; the code a worker reported since the last report
 *  (DISCO_E_REMOTE for a function that failed with disco_ctx_fail, or the
 *  function's own code, e.g. DISCO_E_LIBRARY, DISCO_E_HEAP_EXHAUSTED,
 *  DISCO_E_MISMATCH), with disco_last_error() naming every reporting worker,
 *  its function and message (the session stays usable); DISCO_E_WORKER_DIED;
 *  DISCO_E_TIMEOUT; DISCO_E_BROKEN; DISCO_E_SHUTDOWN; DISCO_E_INVAL (no such
 *  worker). */
disco_status_t disco_session_sync(disco_session_t *sess, int worker);

/** Waits until every worker has run every command sent before: one
 *  command that all of them answer, where a sync of each would send one
 *  per worker, each read by all of them (with workers outnumbering the
 *  cores, each such command makes every worker be scheduled; issue 21).
 *  Across nodes, a sync of each worker in turn. Returns as
 *  disco_session_sync, the first worker's failure first. */
disco_status_t disco_session_sync_all(disco_session_t *sess);

/** One SPMD step: disco_session_call on every worker, then
 *  disco_session_sync_all, sent as one command that every worker answers
 *  once it has run the call (and everything before it). On two workers it
 *  is one round trip, not the call's and the sync's; with workers
 *  outnumbering the cores, each worker is scheduled once for it, not twice.
 *  A free waiting to be sent rides with it, as with a call. Across nodes, a
 *  call then disco_session_sync_all. Returns as disco_session_call and, once
 *  the call went out, as disco_session_sync_all (a failure of this call or
 *  of any command before it, named as a sync names it). *result_out is set
 *  on success only: on a failure after the call went out its result
 *  register is freed. */
disco_status_t disco_session_call_sync_all(disco_session_t *sess, disco_dref_t func,
                                           const disco_value_t *args, int nargs,
                                           disco_dref_t *result_out);

/** Fetches the value of register reg on worker (synchronous). The value
 *  owns its memory: disco_value_clear() it. A tensor comes back as the
 *  bytes of its data (a device tensor's are copied to the host and synced
 *  first). Returns as sync, plus DISCO_E_BAD_REG,
 *  DISCO_E_OVERFLOW (a tensor of 4 GiB or more: a bytes value cannot say
 *  its length) and DISCO_E_MSG_TOO_BIG (a value larger than a reply). */
disco_status_t disco_session_debug_get(disco_session_t *sess, disco_dref_t reg, int worker,
                                       disco_value_t *value_out);

/** Sets register reg on worker to a copy of value (synchronous). reg may be
 *  a fresh register from disco_session_alloc_reg. A register that holds a
 *  device tensor (tensor.h) is filled instead when value is bytes: they
 *  must be the tensor's size (else DISCO_E_MISMATCH naming the worker);
 *  the copy is synced before the call returns. Returns as debug get. */
disco_status_t disco_session_debug_set(disco_session_t *sess, disco_dref_t reg, int worker,
                                       const disco_value_t *value);

/** Reserves a register (null on every worker) for debug_set. Returns
 *  DISCO_OK, DISCO_E_BROKEN, DISCO_E_SHUTDOWN. */
disco_status_t disco_session_alloc_reg(disco_session_t *sess, disco_dref_t *reg_out);

/** Frees register reg on every worker; its id is reused (last freed, first
 *  reused). The free is sent with the next command: inside it when that is
 *  a call (a call + free loop sends one command per call, not two), else
 *  just before it; every worker frees reg before anything after it runs.
 *  Until then the id is not live (a use is DISCO_E_BAD_REG) and not reused
 *  by a call's result; disco_session_alloc_reg sends it first, so that it
 *  still returns the id freed last. A register lost in a recovery (disco_session_recover) is freed
 *  quietly: DISCO_OK, nothing sent, its id reusable from now on, whatever
 *  the session's health. Returns DISCO_OK, DISCO_E_BAD_REG, DISCO_E_BROKEN,
 *  DISCO_E_SHUTDOWN. */
disco_status_t disco_session_free_reg(disco_session_t *sess, disco_dref_t reg);

/** Process id of worker (the controller's own pid for worker 0), or -1. */
int disco_session_worker_pid(const disco_session_t *sess, int worker);

/** The session's placement plan (owned by the session, valid until close).
 *  Thread-safe. */
const disco_plan_t *disco_session_plan(const disco_session_t *sess);

/** DISCO_OK while usable; otherwise the status that broke or ended it. */
disco_status_t disco_session_health(const disco_session_t *sess);

/** The shared tensor heap's statistics (live blocks, bytes used and free,
 *  recoveries from a process that died holding its lock). Works on a broken
 *  session too, until close: after a worker death it shows what the dead
 *  worker left and that the heap is still consistent. *stats_out is zeroed first.
 *  Returns DISCO_OK; DISCO_E_INVAL (the session has no heap); DISCO_E_BROKEN
 *  when the heap's metadata is corrupt; or another code of
 *  disco_heap_stats (its lock could not be had). */
disco_status_t disco_session_heap_stats(const disco_session_t *sess, disco_heap_stats_t *stats_out);

/** Brings a broken session back to health without closing it, e.g. after a
 *  worker died or was killed for a deadline. Every worker 1..N-1 is killed
 *  (SIGKILL, the survivors too), reaped and started again the way open
 *  started it (same launch mode, transport, worker program and placement);
 *  the control segment's rings, error boxes and collective and device
 *  areas are formatted again (tracing goes on); every register is lost:
 *  its value is gone on every worker (worker 0 included: its tensors are
 *  released), and using its DRef in any call fails with DISCO_E_BAD_REG and
 *  a message saying it "was lost in a recovery of the session" (functions
 *  from get_func too: get them again); freeing it succeeds quietly, and
 *  its id is not reused until it is freed. The shared heap keeps only the
 *  blocks this process still holds (tensor views), with their bytes; every
 *  other block is freed. Every library the session loaded with
 *  "disco.load_library" is loaded again on every worker, in the order it
 *  was first loaded, and every worker is synced before it returns. A
 *  healthy session is reset the same way (every worker replaced, every
 *  register lost). As open, it forks or spawns: with DISCO_LAUNCH_FORK the
 *  controller must be single-threaded when it calls this.
 *  Thread safety: as every call, one thread at a time; no other thread may
 *  release this session's tensor views meanwhile.
 *  Returns DISCO_OK (healthy again: disco_session_health is DISCO_OK);
 *  DISCO_E_SHUTDOWN (shut down or closed: nothing done);
 *  DISCO_E_UNSUPPORTED (a session across nodes, cfg.nodes =
 *  DISCO_NODES_MPI; or workers launched by DISCO_LAUNCH_FORK while this
 *  process has used CUDA since they were started, e.g. worker 0's device
 *  tensors: a worker forked now could not use CUDA, which does not survive
 *  fork; close the session and open one with DISCO_LAUNCH_SPAWN. Nothing
 *  done). Otherwise the recovery failed and the
 *  session is left broken, its cause naming the failed step and saying
 *  that a recovery may be tried again: DISCO_E_TIMEOUT (a worker did not
 *  end after SIGKILL, e.g. in a frozen cgroup), DISCO_E_SYS or
 *  DISCO_E_INVAL (fork, spawn or pipes, as open), DISCO_E_NOMEM, a heap
 *  error (DISCO_E_BROKEN for corrupt heap metadata), DISCO_E_LIBRARY (a
 *  library would not load again on a new worker), DISCO_E_WORKER_DIED (a
 *  new worker died before it answered). */
disco_status_t disco_session_recover(disco_session_t *sess);

/** How many device arenas (the memory of a worker's device tensors) this
 *  process has left to process exit, at a close or a recovery where the
 *  arena's stream did not drain within a second (it waits for a record of
 *  a worker that died, or a kernel still spins): a free would wait for it
 *  for ever (cudaFree synchronizes the device), so the arena's memory,
 *  stream, events and imports stay until the process exits, and from then
 *  on every arena of this process does (a line on stderr says so each
 *  time, unless DISCO_QUIET; docs/gpu-defects.md). Counts the arenas of
 *  worker 0, which lives in this process. Thread-safe. */
unsigned disco_session_arenas_left(void);

/** Convenience: get_func + call + free of the function register. */
disco_status_t disco_session_call_by_name(disco_session_t *sess, const char *name,
                                          const disco_value_t *args, int nargs,
                                          disco_dref_t *result_out);

#ifdef __cplusplus
}
#endif
#endif
