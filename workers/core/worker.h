/*
 * worker.h - executing commands on a worker (internal).
 *
 * A worker owns a register file (register 0 unused; ids come from the
 * controller) and an error mailbox in the control segment. Workers 1..N-1 run
 * disco__worker_loop in their own process; worker 0 is driven by the
 * controller calling disco__worker_exec directly after each broadcast.
 */
#ifndef DISCO_WORKERS_WORKER_H
#define DISCO_WORKERS_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "workers/core/channel.h"
#include "workers/core/ctx.h"
#include "workers/core/lookup.h"
#include "disco/shm/heap.h"
#include "disco/func.h"
#include "disco/value.h"
#include "workers/core/protocol.h"
#include "workers/core/registry.h"
#include "workers/core/trace_ring.h"
#include "workers/core/wstat.h"

struct disco__net;
struct disco__fwd_count;

typedef struct disco_worker {
    int id;    /* within its node's session: the rings, slots and barriers */
    int world; /* workers on its node */
    /* Across nodes (scheduler/node/): this node's first global worker id
     * and the whole session's workers; 0 and world on one node. Users see
     * global ids (disco_ctx_worker_id); the shared-heap machinery local
     * ones. net is the link to the other nodes' leaders: set on a node's
     * worker 0 (the MPI process) only; NULL elsewhere. */
    int gid_base, gworld;
    bool one_group; /* across nodes, the session's groups are one: everyone */
    struct disco__net *net;
    disco_value_t *regs; /* owned values, index = register id */
    uint64_t nregs;
    struct disco__errbox *errbox;
    uint64_t seq;                    /* sequence number of the command being executed */
    disco_heap_t *heap;              /* the session's shared heap, or NULL */
    struct disco__coll_area *coll;   /* the collective area */
    uint32_t ngroups;                /* its groups (0: 1), this process's copy */
    const disco_wait_t *wait;        /* how collectives wait for other workers */
    uint64_t ncoll;                  /* collectives executed (slot parity) */
    struct disco__trace_ring *trace; /* its trace ring, or NULL: tracing off */
    struct disco__wstat *stat;       /* its status (wstat.h), or NULL */
    /* Called when this worker gives up a collective at a barrier (its wait
     * failed with st; collective.h, A3) before the call frees anything:
     * late[] are the members that may still touch this worker's buffers.
     * It must make sure they never do (kill them, or end this process) and
     * returns the status the collective fails with. NULL: st is returned. */
    disco_status_t (*abandon)(void *ctx, disco_status_t st, const int *late, int nlate,
                              const char *what);
    void *abandon_ctx;
    struct disco__dev_area *dev_area; /* the session's device area (arena.h), or NULL */
    struct disco__arena *arena;       /* this worker's device arena, made at first use */
    /* In the command being executed: collectives begun, and barriers
     * arrived at over all of them (collective.h, Identity and A2). */
    uint32_t cmd_coll, cmd_phase;
    /* Across nodes only (comm_net.c): when the command being executed
     * began (disco_now_ns()), and the count of its sends to and receives
     * from each global worker (gworld entries, made at the first send or
     * receive across nodes, freed by disco__worker_fini). */
    int64_t cmd_start_ns;
    struct disco__fwd_count *fwd_count;
    /* A worker of a threaded session (DISCO_LAUNCH_THREAD): it shares its
     * process with the controller and the other workers. Device tensors
     * are refused there (the device layer's IPC tables are per process);
     * user C functions may be cancelled at a deadline (exec_call). */
    bool threaded;
    struct disco__thread_keep *keep; /* a worker thread's: what its exit frees (below) */
} disco_worker_t;

/* What a worker thread leaves for its exit to free if it is cancelled
 * (threads.c): its state (worker, heap handle, wait: heap memory, so that
 * they outlive the unwound frames) and its loop's buffers. Written and
 * read by that thread only. */
struct disco__thread_keep {
    const _Atomic int *stop; /* set when it must end */
    void *state;             /* NULL once freed at a normal end */
    void *loop_mem[2];       /* disco__worker_loop's buffers while it runs */
};

/** Frees what a cancelled worker thread left (keep->state's registers and
 *  buffers). Called at that thread's exit, on it. */
void disco__worker_thread_cleanup(struct disco__thread_keep *keep);

/** Sets up worker id of world with its mailbox, the session's heap (may be
 *  NULL), collective area and the wait for collectives. Returns DISCO_OK. */
disco_status_t disco__worker_init(disco_worker_t *w, int id, int world, struct disco__errbox *box,
                                  disco_heap_t *heap, struct disco__coll_area *coll,
                                  const disco_wait_t *wait);

/** This worker's global id (gid_base + id). */
static inline int disco__worker_gid(const disco_worker_t *w)
{
    return w->gid_base + w->id;
}

/** Whether the session spans more than this worker's node. */
static inline bool disco__worker_multinode(const disco_worker_t *w)
{
    return w->gworld > w->world;
}

/** The workers of w's group on its node (an in_group collective's
 *  members there): its node's workers over the session's groups, or all of
 *  them when there is one group (ngroups 0 or 1). */
static inline int disco__worker_group_size(const disco_worker_t *w)
{
    return w->ngroups > 1 ? w->world / (int)w->ngroups : w->world;
}

/** Whether a collective of w over the world (in_group false) or its group
 *  meets other nodes: across nodes, a world collective does, and so does
 *  a group one when the session's groups are the one group of everyone. */
static inline bool disco__worker_crosses(const disco_worker_t *w, bool in_group)
{
    return disco__worker_multinode(w) && (!in_group || w->one_group);
}

/** Frees every register, then the worker's device arena (arena.h). */
void disco__worker_fini(disco_worker_t *w);

/** Clears every register holding a device tensor, then destroys the
 *  worker's device arena (arena.h), which releases this process's IPC table
 *  and device binding. Its other registers stay. Worker 0's at shutdown
 *  (scheduler/session/open.c); not thread-safe: the worker's own thread, or
 *  the controller once it runs no command of the worker any more. */
void disco__worker_drop_device(disco_worker_t *w);

/** Executes one decoded command. When the command asks this worker for a
 *  reply, encodes it into reply (reply_cap bytes, 8-aligned) and sets
 *  *reply_len, else sets it to 0. Failures of the command itself go to the
 *  mailbox (or into an error reply for replying commands). Returns DISCO_OK,
 *  or DISCO_E_SHUTDOWN for the shutdown command. */
disco_status_t disco__worker_exec(disco_worker_t *w, const disco_frame_hdr_t *h,
                                  const disco_value_t *args, void *reply, size_t reply_cap,
                                  size_t *reply_len);

/** Stores a copy of v (a tensor: a new reference) in register reg.
 *  Returns DISCO_OK, DISCO_E_BAD_REG, DISCO_E_NOMEM. */
disco_status_t disco__worker_set_reg(disco_worker_t *w, uint64_t reg, const disco_value_t *v);

/** The value in register reg, or NULL if it was never set. */
const disco_value_t *disco__worker_get_reg(const disco_worker_t *w, uint64_t reg);

/** Records an error in w's mailbox (keeps the first; counts the rest). */
void disco__worker_post_error(disco_worker_t *w, int code, const char *func, const char *msg);

/* Exit code of a worker that received a command it could not decode. */
#define DISCO_WORKER_EXIT_PROTOCOL 3

/** A worker process's main loop: receive, execute, reply, until shutdown
 *  (returns 0), a channel error such as a dead controller (returns 1), or an
 *  undecodable command (returns DISCO_WORKER_EXIT_PROTOCOL, after posting
 *  the reason to its mailbox). */
int disco__worker_loop(disco_worker_t *w, disco_chan_t *c, const disco_wait_t *wait);

/** Runs worker id in a process that maps the control segment at data (size
 *  bytes) and, for pipes, holds cmd_fd and reply_fd. Sets the parent-death
 *  signal. Returns the process exit code: 0 after shutdown, 1 when the
 *  controller went away or broke the session, 2 on a setup error. */
int disco__worker_process(void *data, size_t size, int id, int cmd_fd, int reply_fd);

/** Runs worker id as a thread of the controller's process (launch mode
 *  DISCO_LAUNCH_THREAD): as disco__worker_process, but with no parent-death
 *  signal or parent check (the controller is this process); its waits end
 *  when *keep->stop is set (disco__threads_kill) or the session breaks, and a
 *  collective it gives up returns instead of ending the process. Its
 *  status's pid word holds its thread id. Called with cancellation
 *  disabled. Returns as disco__worker_process. */
int disco__worker_thread(void *data, size_t size, int id, int cmd_fd, int reply_fd,
                         struct disco__thread_keep *keep);

/** Name of a command code, for messages. */
const char *disco__cmd_name(uint32_t code);

#endif
