/* session_impl.h - the controller's view of a session (internal; shared by
 * session.c and lifecycle.c). */
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
#include "scheduler/trace/trace_impl.h"

struct disco_session {
    disco_session_config_t cfg;
    int world;
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

    /* workers 1..world-1 */
    pid_t *pid;
    int *pidfd;
    int *wstatus; /* raw wait status once reaped */
    bool *reaped;

    /* registers: ids 1.., freed ids reused last-in first-out */
    uint64_t next_reg;
    uint64_t *free_regs;
    size_t nfree;                        /* free_regs has reg_cap entries */
    const struct disco__func **reg_func; /* [reg_cap]: function held, or NULL */
    bool *reg_live;
    uint64_t reg_cap;

    uint64_t seq;
    int64_t token;
    disco_status_t state; /* DISCO_OK, or what broke / ended the session */
    bool told;            /* a call has returned state (the cause) to the caller */
    char why[DISCO_ERR_MSG_MAX];
    uint64_t issued; /* commands sent */

    void *buf; /* command frame, max_msg */
    void *reply;
    disco_wait_t wait;    /* deadline filled per call */
    disco_wait_t w0_wait; /* worker 0's waits inside collectives */
};

/** Starts workers 1..world-1 (fork or spawn). On failure kills and reaps any
 *  already started. */
disco_status_t disco__procs_start(struct disco_session *s);

/** Polls the workers without blocking; on a death, breaks the session and
 *  returns DISCO_E_WORKER_DIED naming the worker and its signal or code. */
disco_status_t disco__procs_check(struct disco_session *s);

/** Worker 0's abandon hook (worker.h; s is the session): kills and reaps
 *  the late members of a collective it gave up, then breaks the session
 *  (DISCO_E_TIMEOUT naming them for a deadline; else st, unless a cause,
 *  such as a death, came first). Returns the session's break status. */
disco_status_t disco__procs_abandon(void *s, disco_status_t st, const int *late, int nlate,
                                    const char *what);

/** Kills worker i (SIGKILL) and reaps it. */
void disco__procs_kill(struct disco_session *s, int i);

/** Waits up to grace_ms for every worker to exit, then kills the rest, and
 *  reaps them all; closes the pidfds. */
void disco__procs_stop(struct disco_session *s, int grace_ms);

/** Marks the session broken with status and a message; the first cause wins.
 *  Wakes every waiter so workers see it. Returns status. */
disco_status_t disco__session_break(struct disco_session *s, disco_status_t status, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));

#endif
