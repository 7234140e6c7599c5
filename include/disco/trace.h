/*
 * disco/trace.h - profiling of worker scheduling.
 *
 * Every command of a session is stamped four times: the controller enqueues
 * it (the stamp is read as the broadcast publishes the encoded command), each
 * worker starts and ends it, and (for commands that answer: sync, debug
 * get/set) the controller sees the reply. Workers 1..N-1 stamp into their own
 * rings in the session's shared memory (the last 8192 commands each); the
 * controller keeps its stamps in process memory, and worker 0 (the
 * controller's thread) has for each command the slice from the enqueue stamp
 * to the issued stamp: the end of the broadcast and its own run. A start or reply
 * that came while its reader was waiting is stamped by the waiting loop's
 * clock read just before the check that saw it, which keeps the reads off
 * the path from a command to its reply. One clock serves every
 * process (the TSC where the kernel uses it as its clock source, else
 * CLOCK_MONOTONIC). Tracing is on unless the session config turns it off;
 * DISCO_TRACE=path makes a session write its trace to path at close.
 *
 * A trace exports as Chrome Trace Event JSON, which Perfetto
 * (ui.perfetto.dev), chrome://tracing and Chrome DevTools' Performance
 * panel open: one track for the controller and one per worker, a slice per
 * command named after its function, a flow arrow from each enqueue to each
 * worker's start (slices and flows share one category, "disco", since
 * DevTools binds a flow only to a slice of its own category), the waits
 * between commands as "spin" and "parked" slices (category "wait"), and
 * each watchdog report as an instant event on the controller's track. The collectives a
 * worker function calls inside a command (disco/comm.h) are stamped too, as slices nested in
 * the command's slice (disco_trace_coll_t; category "comm" in the JSON, with a flow from the
 * member that arrived last to each other member); so are sends and receives
 * (disco_ctx_send, disco_ctx_recv: "ctx_send" and "ctx_recv" slices naming
 * their peer, with a flow from each send to the receive that took it). The summary gives,
 * per worker, busy % and queue delay (enqueue to start) p50/p99; per
 * function, count and time; and per step (the commands between two syncs),
 * the slowest worker: the straggler that holds the sync back.
 *
 * Errors: functions return a disco_status_t; disco_last_error() says more.
 * Traces and summaries are plain data owned by the caller.
 */
#ifndef DISCO_TRACE_H
#define DISCO_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "disco/session.h"
#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_TRACE_NAME_MAX 64 /* room for a function name, NUL included */

/* One command on one worker. Times in microseconds since the session opened. */
typedef struct disco_trace_slice {
    uint64_t seq; /* the command's sequence number */
    int worker;   /* global id */
    uint32_t cmd; /* command code: 3 call, 4 sync, ... (TVM Disco's action numbers) */
    char name[DISCO_TRACE_NAME_MAX];     /* function name for a call, else the command's */
    double enqueue_us, start_us, end_us; /* enqueued by the controller, started, ended */
} disco_trace_slice_t;

/* One command on the controller: enqueued, issued, and answered. */
typedef struct disco_trace_cmd {
    uint64_t seq;                    /* the command's sequence number */
    uint32_t cmd;                    /* command code, as in a slice */
    char name[DISCO_TRACE_NAME_MAX]; /* function name for a call, else the command's */
    double enqueue_us, issued_us;    /* issued: broadcast, and run on worker 0 */
    double reply_us;                 /* the reply seen; < 0: none asked */
} disco_trace_cmd_t;

/* A worker's wait between two commands: spinning (polling, yielding), or
 * parked on the futex. Workers 1..N-1 only (worker 0 is the caller's
 * thread between commands). */
typedef struct disco_trace_wait {
    int worker;              /* global id */
    bool parked;             /* parked on the futex; false: spinning */
    double start_us, end_us; /* the wait's span */
} disco_trace_wait_t;

/* One in-worker collective (<disco/comm.h>) on one worker: a slice nested
 * in the slice of the command whose function called it. The members of one
 * collective share seq, index and group. A send or a receive is one too,
 * on each of its two workers: name "send" or "recv", peer the other
 * worker, group -1, members 2, and index the post it sent or took (1 to
 * 65535, wrapping; 0: the call failed before one): a send and the receive
 * that took it share seq and index, each the other's peer. Times in
 * microseconds since the session opened. */
typedef struct disco_trace_coll {
    uint64_t seq;                    /* the command it ran in */
    int worker;                      /* global id */
    uint32_t index;                  /* which of the command's collectives: 0, 1, ... (mod 65536) */
    int group;                       /* the group's index; -1: every worker */
    int members;                     /* workers taking part */
    char name[DISCO_TRACE_NAME_MAX]; /* "allreduce", "allgather", "broadcast", "barrier",
                                        "send", "recv" */
    double start_us, end_us;         /* called, returned */
    int peer;                        /* send, recv: the other worker; -1: a collective */
} disco_trace_coll_t;

/* A moment the session marked: a watchdog report (its text). */
#define DISCO_TRACE_MARK_MAX 1024
/* A mark: the moment and its text. */
typedef struct disco_trace_mark {
    double at_us;                    /* when */
    char text[DISCO_TRACE_MARK_MAX]; /* the report */
} disco_trace_mark_t;

/* A trace: every worker's slices and waits, the controller's commands and
 * the marks, from disco_session_trace or disco_trace_load_json. */
typedef struct disco_trace {
    int world;                   /* workers */
    size_t nslices, ncmds;       /* entries of slices and cmds */
    disco_trace_slice_t *slices; /* by worker, then by time */
    disco_trace_cmd_t *cmds;     /* by seq */
    uint64_t dropped;            /* records lost to ring wrap-around */
    size_t nwaits, nmarks;       /* entries of waits and marks */
    disco_trace_wait_t *waits;   /* by worker, then by time */
    disco_trace_mark_t *marks;   /* by time */
    size_t ncolls;               /* entries of colls */
    disco_trace_coll_t *colls;   /* in-worker collectives: by worker, then by time */
} disco_trace_t;

/** A snapshot of the session's trace so far (the last 8192 commands). It
 *  gives the workers up to 10 ms to record every command issued so far; a
 *  worker still busy after that appears without its current command. Returns DISCO_OK,
 * DISCO_E_INVAL (tracing is off for this session), DISCO_E_NOMEM. */
disco_status_t disco_session_trace(disco_session_t *sess, disco_trace_t **trace_out);

/** Writes the trace as Chrome Trace Event JSON. Returns DISCO_OK,
 *  DISCO_E_SYS (write failed), DISCO_E_NOMEM. */
disco_status_t disco_trace_write_json(const disco_trace_t *trace, FILE *stream);

/** Reads a trace written by disco_trace_write_json (parsed with jansson).
 *  Returns DISCO_OK, DISCO_E_SYS (cannot open), DISCO_E_PROTOCOL (not
 *  JSON, or not a disco trace: the message says where), DISCO_E_NOMEM. */
disco_status_t disco_trace_load_json(const char *path, disco_trace_t **trace_out);

/** Frees a trace. NULL is harmless. */
void disco_trace_free(disco_trace_t *trace);

/* One worker in a summary. */
typedef struct disco_trace_worker_stats {
    size_t commands;                   /* commands it ran */
    double busy_us, busy_pct;          /* of the span from first start to last end */
    double queue_p50_us, queue_p99_us; /* enqueue to start, percentiles */
    size_t straggler_steps;            /* steps in which this worker finished last */
} disco_trace_worker_stats_t;

/* One function in a summary. */
typedef struct disco_trace_func_stats {
    char name[DISCO_TRACE_NAME_MAX];  /* its name */
    size_t count;                     /* commands (each runs on every worker) */
    double total_us, mean_us, max_us; /* over every worker's slice */
} disco_trace_func_stats_t;

/* A trace's summary (disco_trace_summarize). */
typedef struct disco_trace_summary {
    int world;                          /* workers */
    double span_us;                     /* first start to last end */
    size_t commands, steps;             /* commands, and steps: the commands between two syncs */
    disco_trace_worker_stats_t *worker; /* [world] */
    disco_trace_func_stats_t *func;     /* [nfuncs], most time first */
    size_t nfuncs;                      /* entries of func */
    /* the step whose straggler lagged the most behind the first finisher */
    uint64_t worst_step_sync_seq;
    int worst_step_worker;    /* its straggler */
    double worst_step_lag_us; /* how far behind the first finisher */
} disco_trace_summary_t;

/** Summarizes a trace. Returns DISCO_OK, DISCO_E_NOMEM. */
disco_status_t disco_trace_summarize(const disco_trace_t *trace, disco_trace_summary_t **sum_out);

/** Prints a summary as a table or as JSON. Returns DISCO_OK, DISCO_E_SYS. */
disco_status_t disco_trace_summary_print(const disco_trace_summary_t *sum, FILE *stream, bool json);

/** Frees a summary. NULL is harmless. */
void disco_trace_summary_free(disco_trace_summary_t *sum);

#ifdef __cplusplus
}
#endif
#endif
