/*
 * disco/observe.h - seeing a running session: what every worker is doing,
 * who waits for whom, from the session's own process or from another one.
 *
 * Every session keeps a status region in its control segment: per worker
 * the command it is in (sequence number, function, since when), commands
 * done, time busy, spinning and parked, per-function calls and time; and
 * what the controller waits for. The session writes it as it goes at no
 * cost a caller can measure (no syscall, no lock, no clock read of its
 * own: the times come from the trace stamps, so with cfg.trace_off every
 * time is unknown, -1, while states and counts still move).
 *
 * A view (disco_session_view_t) is a snapshot of that region. Take one of
 * your own session with disco_session_view, or of any session of a process
 * of the same user with an observer: disco_observer_open(pid) finds the
 * process's control segments through /proc/PID/fd and maps them read-only
 * (the observed session cannot tell it is watched). disco_view_report
 * writes the watchdog's report of a view; disco_session_dump is the two in
 * one call. `disco top PID` and `disco dump PID` are built on these.
 *
 * Across nodes (DISCO_NODES_MPI) a view holds the workers of the node it is
 * taken on (the controller's: workers 0..W-1), not the other nodes'.
 *
 * The watchdog: when a wait of the controller (a sync, a reply, room in the
 * command channel, worker 0 waiting in a collective) passes
 * cfg.watchdog_ms, the session writes one report to stderr and an instant
 * event to its trace, and goes on waiting (the call deadline still ends the
 * wait).
 *
 * Device collective kernels (the allreduce on device tensors) publish, per
 * piece, where they wait while they spin: the phase, the member whose flag
 * they lack and what that flag holds. A view carries it per worker
 * (disco_worker_view_t.kernel), the report prints it, and
 * disco_kernel_view_format gives the line. Thread safety: functions on a view or observer are safe
 * on distinct objects; disco_session_view and disco_session_dump as any call on the session (its
 * thread only). Errors follow status.h: a negative status, details in disco_last_error().
 */
#ifndef DISCO_OBSERVE_H
#define DISCO_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "disco/session.h"
#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_VIEW_NAME  48 /* room for a function name in a view, NUL included */
#define DISCO_VIEW_FUNCS 64 /* functions a view lists at most */

/* What a worker is doing. */
typedef enum disco_worker_state {
    DISCO_WORKER_STARTING = 0, /* not yet in its loop */
    DISCO_WORKER_BUSY = 1,     /* executing a command */
    DISCO_WORKER_IDLE = 2,     /* waiting for a command, spinning */
    DISCO_WORKER_PARKED = 3,   /* waiting for a command, asleep */
    DISCO_WORKER_EXITED = 4,   /* left its loop (shutdown, or the session broke) */
} disco_worker_state_t;

/* What the controller waits for. */
typedef enum disco_view_wait {
    DISCO_VIEW_WAIT_NONE = 0,
    DISCO_VIEW_WAIT_ROOM = 1,       /* room in the command channel for wait_seq */
    DISCO_VIEW_WAIT_REPLY = 2,      /* wait_worker's reply to wait_seq */
    DISCO_VIEW_WAIT_COLLECTIVE = 3, /* worker 0, inside command wait_seq, for its peers */
} disco_view_wait_t;

/* Where one piece of a device collective kernel stands (its progress,
 * published by the kernel while it waits: see docs/gpu-progress.md). */
typedef enum disco_piece_state {
    DISCO_PIECE_QUIET = 0,   /* none of its waits so far was long enough to be recorded */
    DISCO_PIECE_WAITING = 1, /* waits at phase for member's flag */
    DISCO_PIECE_PASSED = 2,  /* waited at phase for member, and went on */
} disco_piece_state_t;

/* The most pieces a kernel view holds (as the kernels' DISCO_AR_MAX_PIECES). */
#define DISCO_VIEW_PIECES 16

/* One piece of a device collective kernel, as a view shows it. */
typedef struct disco_piece_view {
    /* quiet, waiting or passed */
    disco_piece_state_t state;
    int phase;          /* 0 START, 1 MID, 2 END (disco_kernel_phase_name) */
    int member;         /* the worker (global id) whose flag it waits (or waited) for */
    bool flag_set;      /* WAITING: the flag holds an earlier collective's mark (else never set) */
    uint64_t flag_coll; /* that collective's number, when flag_set */
} disco_piece_view_t;

/* A worker's device collective kernel, while it is in one (the kernel
 * launched in the command the worker is busy in, not known to have ended). */
typedef struct disco_kernel_view {
    bool active;    /* in a kernel now: the fields below hold */
    char what[16];  /* "allreduce" */
    uint64_t coll;  /* the collective's number (every member counts alike) */
    bool two_shot;  /* else one-shot */
    int rank, size; /* the worker's rank in the collective's group, the group's size */
    int pieces;     /* pieces in flight (piece[0..pieces-1]) */
    /* each piece's progress */
    disco_piece_view_t piece[DISCO_VIEW_PIECES];
} disco_kernel_view_t;

/* One worker in a view. */
typedef struct disco_worker_view {
    int worker; /* global id */
    int pid;    /* its process (worker 0: the controller's); 0 unknown */
    /* what it is doing */
    disco_worker_state_t state;
    uint64_t seq;                  /* the command started last (0: none yet) */
    uint32_t cmd;                  /* its command code */
    char name[DISCO_VIEW_NAME];    /* its function, or the command's name */
    double in_cmd_s;               /* time inside seq so far, if busy; -1 unknown */
    uint64_t done;                 /* commands finished */
    uint64_t queued;               /* commands broadcast but not started */
    double busy_s, spin_s, park_s; /* since open: inside commands, spinning, parked; -1 unknown */
    double cpu_s;                  /* CPU time of its process (user + system); -1 unknown */
    disco_kernel_view_t kernel;    /* its device collective kernel, if it is in one */
} disco_worker_view_t;

/* One function in a view. */
typedef struct disco_func_view {
    /* its registered name */
    char name[DISCO_VIEW_NAME];
    uint64_t calls; /* calls finished, summed over the workers */
    double total_s; /* time inside them, summed over the workers; -1 unknown */
    int workers;    /* workers that ran it */
} disco_func_view_t;

/* A snapshot of a session's status region (disco_session_view,
 * disco_observer_read): what `disco top` and the watchdog show. */
typedef struct disco_session_view {
    int pid;                /* the controller's process */
    int world;              /* workers on this node */
    int gid_base;           /* the first one's global id */
    bool tracing;           /* times are known */
    int health;             /* DISCO_OK, or what broke or ended the session */
    char why[256];          /* the cause, when health is not DISCO_OK */
    uint64_t issued;        /* commands broadcast */
    disco_view_wait_t wait; /* what the controller waits for, now */
    int wait_worker;        /* REPLY: whose reply (global id) */
    uint64_t wait_seq;      /* the command it waits on */
    double wait_s;          /* how long it has waited; -1 when not waiting */
    /* reports the watchdog has written */
    uint64_t watchdog_reports;
    uint32_t watchdog_ms;         /* the session's threshold (0: off) */
    double at_s;                  /* CLOCK_MONOTONIC seconds of the snapshot */
    disco_worker_view_t *workers; /* [world] */
    /* entries of funcs in use */
    int nfuncs;
    /* the functions run so far */
    disco_func_view_t funcs[DISCO_VIEW_FUNCS];
} disco_session_view_t;

/** Takes a snapshot of session s into *view_out (free it with
 *  disco_view_free). The session's thread only. Returns DISCO_OK,
 *  DISCO_E_INVAL (s NULL), DISCO_E_NOMEM. */
disco_status_t disco_session_view(disco_session_t *s, disco_session_view_t *view_out);

/** Frees what a view holds (not the struct). Safe on a zeroed view. */
void disco_view_free(disco_session_view_t *v);

/** Writes the watchdog's report of v to out: each worker's last finished
 *  and current command and for how long, who waits for whom, and, inside a
 *  collective, the members that have not arrived. Returns DISCO_OK,
 *  DISCO_E_SYS (a write failed). */
disco_status_t disco_view_report(const disco_session_view_t *v, FILE *out);

/** disco_view_report of a snapshot of s, now. The session's thread only.
 *  Returns as disco_session_view and disco_view_report. */
disco_status_t disco_session_dump(disco_session_t *s, FILE *out);

/* A read-only view onto another process's session (opaque). */
typedef struct disco_observer disco_observer_t;

/** Opens the index-th (from 0) disco session of process pid for reading:
 *  maps its control segment read-only through /proc/PID/fd. Same user (or
 *  the right to ptrace it) only. *count_out (may be NULL) is the number of
 *  sessions the process holds. Returns DISCO_OK; DISCO_E_INVAL (no such
 *  process, or it holds no session, or not that many), DISCO_E_SYS
 *  (permission, mapping), DISCO_E_BAD_MAGIC (a segment whose header does
 *  not hold: another layout version, or corrupt), DISCO_E_NOMEM. */
disco_status_t disco_observer_open(int pid, int index, int *count_out, disco_observer_t **obs_out);

/** Takes a snapshot of the observed session into *view_out (free it with
 *  disco_view_free), with each worker's CPU time from /proc. Every number
 *  read from the segment is checked; the session may end meanwhile (then
 *  the snapshot shows it shut down or its workers exited). Returns
 *  DISCO_OK, DISCO_E_BAD_MAGIC (the header changed), DISCO_E_NOMEM. */
disco_status_t disco_observer_read(disco_observer_t *o, disco_session_view_t *view_out);

/** Unmaps and frees o. Safe on NULL. */
void disco_observer_close(disco_observer_t *o);

/** Writes where w's device collective kernel stands into buf (size bytes,
 *  always terminated when size > 0), one line without a newline, e.g.
 *  "worker 2 in allreduce #812 (device kernel, two-shot): piece 5 waits at
 *  MID for worker 1 (flag holds #811)"; pieces that stand alike are named
 *  together ("pieces 0-4, 6 wait at ..."), groups apart by "; ". Returns
 *  the line's length as snprintf does (it may exceed size - 1: then it is
 *  cut), or 0 and buf "" when w is in no kernel. Thread-safe. */
size_t disco_kernel_view_format(const disco_worker_view_t *w, char *buf, size_t size);

/** Name of a kernel phase: "START", "MID", "END"; "?" for another value. */
const char *disco_kernel_phase_name(int phase);

/** Name of a worker state ("busy", "idle", "parked", ...). */
const char *disco_worker_state_name(disco_worker_state_t st);

#ifdef __cplusplus
}
#endif
#endif
