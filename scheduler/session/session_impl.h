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
#include "scheduler/session/procs.h"
#include "scheduler/session/regs.h"
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

    struct disco__procs procs; /* workers 1..world-1 */
    struct disco__regs regs;

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

/** Polls the workers without blocking; on a death, breaks the session and
 *  returns DISCO_E_WORKER_DIED naming the worker, its signal or code, and its
 *  last words (its error box), if any. */
disco_status_t disco__session_check(struct disco_session *s);

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

/** Marks the session broken with status and a message; the first cause wins.
 *  Wakes every waiter so workers see it. Returns status. */
disco_status_t disco__session_break(struct disco_session *s, disco_status_t status, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));

#endif
