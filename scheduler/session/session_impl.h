/* session_impl.h - the controller's view of a session (internal; shared by
 * the files of scheduler/session/). The session owns its process table
 * (procs.h) and register table (regs.h); neither knows the session. */
#ifndef DISCO_SCHEDULER_SESSION_IMPL_H
#define DISCO_SCHEDULER_SESSION_IMPL_H

#include <stdbool.h>
#include <sys/types.h>

#include "workers/data/bind.h"
#include "workers/core/channel.h"
#include "workers/core/protocol.h"
#include "workers/core/registry.h"
#include "workers/core/worker.h"
#include "disco/shm/segment.h"
#include "disco/session.h"
#include "scheduler/session/libs.h"
#include "scheduler/session/procs.h"
#include "scheduler/session/regs.h"
#include "scheduler/trace/trace_impl.h"
#include "shm/wait_internal.h"

struct disco__node;

struct disco_session {
    disco_session_config_t cfg;
    /* Whether the workers last started could not use a device this process
     * had used (workers/device/fork_rule.h), as they were started: a fork
     * that recovery repeats may not lose what these workers had. */
    bool fork_spoiled_at_start;
    int world; /* workers on this node: the rings, process table, error boxes */
    /* Across nodes (scheduler/node/): this node's first global worker id
     * and every node's workers (0 and world on one node); node is the
     * controller's link to the agents (NULL on one node, and on an agent,
     * whose link is its own). */
    int gid_base, gworld, ggroups;
    struct disco__node *node;
    disco_segment_t seg;
    struct disco__ctl *ctl;
    struct disco__errbox *errbox;
    disco_chan_t chan;
    disco_ring_t *reply_rings; /* [world], 0 unused */
    int *cmd_fd, *reply_fd;    /* pipes: controller ends, [world] */
    disco_worker_t w0;
    disco_heap_t heap;
    disco_plan_t *plan;
    struct disco__bind_saved ctl_saved; /* the controller thread's placement before open bound it */
    struct disco__ctrace trace;         /* rec NULL: tracing off */

    struct disco__procs procs; /* workers 1..world-1 */
    struct disco__regs regs;

    uint64_t seq;
    int64_t token;
    uint64_t free_next;   /* a freed register whose kill rides with the next call; 0: none */
    disco_status_t state; /* DISCO_OK, or what broke / ended the session */
    bool told;            /* a call has returned state (the cause) to the caller */
    char why[DISCO_ERR_MSG_MAX];
    uint64_t issued; /* commands sent */

    /* What the watchdog and observers read (workers/core/wstat.h,
     * session_watch.c): the status region, worker 0's status (written by
     * this thread as it runs worker 0), the hooks that report the
     * controller's waits, the threshold and the wait last reported. */
    struct disco__stat_hdr *stat;
    struct disco__wstat_writer w0_stat;
    struct disco__wait_hook wait_hook, w0_hook;
    int64_t watchdog_ns; /* 0: off */
    int64_t watchdog_seen;

    void *buf; /* command frame, max_msg */
    void *reply;
    disco_wait_t wait;    /* deadline filled per call */
    disco_wait_t w0_wait; /* worker 0's waits inside collectives */

    char *worker_path; /* cfg.worker_path's copy (cfg points to it): a recovery spawns again */
    const struct disco__func *load_fn; /* "disco.load_library": its calls are noted in libs */
    struct disco__libs libs;           /* what recoveries load again (libs.h) */
    uint64_t recoveries;               /* disco_session_recover calls that succeeded */
};

/** Polls the workers without blocking; on a death, breaks the session and
 *  returns DISCO_E_WORKER_DIED naming the worker, its signal or code, and its
 *  last words (its error box), if any. */
disco_status_t disco__session_check(struct disco_session *s);

/** The other nodes (a controller across nodes): a dead or broken node
 *  breaks the session, naming it. Returns DISCO_OK, or the break's status. */
disco_status_t disco__session_check_nodes(struct disco_session *s);

/** Kills worker i (SIGKILL), reaps it, and marks it dead to the command
 *  channel so that no broadcast waits for it. The session is not broken. */
void disco__session_kill(struct disco_session *s, int i);

/** Worker 0's abandon hook (worker.h; s is the session): kills and reaps
 *  the late members of a collective it gave up, then breaks the session
 *  (DISCO_E_TIMEOUT naming them for a deadline; else st, unless a cause,
 *  such as a death, came first). Returns the session's break status. */
disco_status_t disco__session_abandon(void *s, disco_status_t st, const int *late, int nlate,
                                      const char *what);

/** Returns DISCO_OK if the session takes calls, else DISCO_E_SHUTDOWN or
 *  DISCO_E_BROKEN naming the cause. */
disco_status_t disco__session_usable(struct disco_session *s);

/** Every public call returns through here: an error met while the session
 *  looks healthy is first set against the workers (a death is what the
 *  caller sees), and the first error after a break is its cause. Returns
 *  the status the caller gets. */
disco_status_t disco__session_tell(struct disco_session *s, disco_status_t st);

/** disco_session_get_func without disco__session_tell (for the tensor
 *  calls in session_tensor.c). Returns as disco_session_get_func. */
disco_status_t disco__session_get_func(struct disco_session *s, const char *name,
                                       disco_dref_t *func_out);

/** disco_session_call without disco__session_tell. Returns as
 *  disco_session_call. */
disco_status_t disco__session_call(struct disco_session *s, disco_dref_t func,
                                   const disco_value_t *args, int nargs, disco_dref_t *result_out);

/** disco_session_free_reg without disco__session_tell. Returns as
 *  disco_session_free_reg. */
disco_status_t disco__session_free_reg(struct disco_session *s, disco_dref_t reg);

/** disco_session_debug_get without disco__session_tell. Returns as
 *  disco_session_debug_get. */
disco_status_t disco__session_debug_get(struct disco_session *s, disco_dref_t reg, int worker,
                                        disco_value_t *value_out);

/* A command that never waits looks at the workers every HEALTH_EVERY
 * commands, so that a death is noticed without a syscall on every call. */
#define HEALTH_EVERY 64u

/** The wait of one call: the config's spin, the call timeout counted from
 *  when it starts waiting, the workers' checks. */
const disco_wait_t *disco__session_call_wait(struct disco_session *s);

/** A broadcast that failed with st: a full channel past the deadline is
 *  blamed on the worker that does not read, which is killed; the session
 *  breaks. Returns the status the caller gets. */
disco_status_t disco__session_bcast_failed(struct disco_session *s, disco_status_t st);

/** A failure of the link to the other nodes (st): a node found dead or
 *  broken is the cause, else st breaks the session (session_reply.c). */
disco_status_t disco__session_node_failed(struct disco_session *s, disco_status_t st);

/** Receives worker's reply to the command with token (worker 0's is the
 *  w0_len bytes already in s->reply); value_out (optional) gets a copy of
 *  the replied value. A worker's error reply is returned as its status;
 *  anything malformed breaks the session (session_reply.c). */
disco_status_t disco__session_wait_reply(struct disco_session *s, int worker, int64_t token,
                                         const char *what, size_t w0_len, disco_value_t *value_out);

/** A wait for worker's reply to what that failed with st: past the
 *  deadline the worker is killed; a closed channel means it is dying, and
 *  its death is the cause. Returns the status the caller gets. */
disco_status_t disco__session_reply_failed(struct disco_session *s, int worker, disco_status_t st,
                                           const char *what);

/** Whether the session takes a command now: usable, and (every
 *  HEALTH_EVERY commands) no worker found dead. Returns DISCO_OK or as
 *  disco__session_usable / disco__session_check. */
disco_status_t disco__session_ready(struct disco_session *s);

/** Delivers one encoded command (frame, len bytes; h and args its
 *  decoding): broadcasts it to this node's workers, posts it to the other
 *  nodes (a controller across nodes), runs it on worker 0 (its reply, if
 *  asked, in s->reply, *w0_len its length) and records it in the trace
 *  (name: the called function's, or NULL). Returns DISCO_OK, or the
 *  failure that broke the session (a full channel, the node link, a death
 *  worker 0 found). */
disco_status_t disco__session_deliver(struct disco_session *s, const disco_frame_hdr_t *h,
                                      const disco_value_t *args, const void *frame, size_t len,
                                      const char *name, size_t *w0_len);

/** The global worker id a decoded command frame asks a reply of (sync:
 *  its first argument; debug get/set: its second), or -1: another command,
 *  an argument that is not an int, or an id outside 0..INT_MAX (which no
 *  worker has: the workers compare the int64 itself). Pure; thread-safe. */
int disco__session_asks(const disco_frame_hdr_t *h, const disco_value_t *args);

/** An agent's relay of one command frame of the controller's (node_agent.c):
 *  decodes it, broadcasts it to this node's workers as it is and runs it on
 *  worker 0. *asks_out is the global id of the worker the command asks for
 *  a reply (sync, debug get/set), else -1; *w0_len worker 0's reply in
 *  s->reply, if it was asked. Returns DISCO_OK, DISCO_E_PROTOCOL (a frame
 *  that does not decode: the session breaks), or as a broadcast. */
disco_status_t disco__session_relay(struct disco_session *s, const void *frame, size_t len,
                                    int *asks_out, size_t *w0_len);

/** Waits for this node's worker local (1..world-1) to reply into s->reply
 *  (*len its length) under the call deadline. Returns as sync's wait. */
disco_status_t disco__session_recv_reply(struct disco_session *s, int local, uint32_t *len);

/** Reports (and clears) every worker's pending error on this node, and the
 *  other nodes' (controller): the first code, all named in the last error.
 *  Returns DISCO_OK when none. */
disco_status_t disco__session_collect_errors(struct disco_session *s);

/** Sets up the status region's header, worker 0's status and the hooks
 *  of the controller's waits (s->wait and s->w0_wait made). */
void disco__session_watch_init(struct disco_session *s);

/** The watchdog, called from the controller's wait checks: when the wait
 *  under way has passed the threshold and was not reported yet, writes
 *  the report to stderr and marks the trace. Returns DISCO_OK (it never
 *  ends a wait). */
disco_status_t disco__session_watchdog(struct disco_session *s);

/** Marks the session broken with status and a message; the first cause wins.
 *  Wakes every waiter so workers see it. Returns status. */
disco_status_t disco__session_break(struct disco_session *s, disco_status_t status, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));

/* ---- opening and recovering (open.c, recover.c) ---- */

/** Formats the control segment's shared state that workers use (the broken
 *  word, error boxes, bindings, the collective and device areas, the
 *  command and reply rings) and sets up s->chan over it; the header, the
 *  trace rings and the heap are made once, at open. Only while no worker
 *  process lives. One function for open and recovery. Returns DISCO_OK or
 *  what the layout, the device area or a ring's init returns. */
disco_status_t disco__session_format(struct disco_session *s);

/** Sets up worker 0 (the controller's thread) over the segment. */
void disco__session_init_w0(struct disco_session *s);

/** Starts workers 1..world-1 as the config says (launch mode, transport,
 *  worker program; the plan is in the segment) and tells the command ring
 *  their pids. Returns as disco__procs_start (nothing left running on
 *  failure). */
disco_status_t disco__session_start_workers(struct disco_session *s);

/** Closes the controller's ends of the workers' pipes (pipe transport) and
 *  marks them closed. */
void disco__session_close_pipes(struct disco_session *s);

#endif
