/* procs.h - the process table: a session's worker processes 1..n-1 (internal).
 *
 * The table starts, watches, kills and reaps processes and reports how one
 * ended; it knows nothing of sessions. Its owner (session.c) decides what a
 * death breaks. Only the owner's thread uses a table. */
#ifndef DISCO_SCHEDULER_PROCS_H
#define DISCO_SCHEDULER_PROCS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "disco/shm/segment.h"
#include "disco/session.h"

/* Entries 1..n-1; entry 0 (the controller's own thread) is never used. */
struct disco__procs {
    int n;
    int id_base;  /* added to an index where a message names a worker (its global id) */
    pid_t *pid;   /* 0: never started */
    int *pidfd;   /* -1: none (not started, closed, or no pidfd_open) */
    int *wstatus; /* raw wait status once reaped (-1: reaped by someone else) */
    bool *reaped;
    /* Launch mode DISCO_LAUNCH_THREAD: the workers are threads of this
     * process (threads.c); pid[i] is then this process's pid, pidfd[i] -1,
     * and wstatus[i] the thread's return code (-1: cancelled). */
    bool threads;
    struct disco__wthread **thr; /* [n]; NULL entries: not started */
};

/* How workers are started. */
struct disco__procs_launch {
    disco_launch_t launch;   /* fork or spawn */
    const char *worker_path; /* spawn: the program (NULL: $DISCO_WORKER or beside this one) */
    disco_segment_t *seg;    /* the control segment each worker attaches */
    bool pipes;              /* give each worker a command and a reply pipe */
    int *cmd_fd, *reply_fd;  /* pipes: [n], filled with the controller's ends */
};

/* How one process ended. */
struct disco__procs_exit {
    int worker;
    pid_t pid;
    int wstatus;
    char what[256]; /* "worker 2 (pid 123) was killed by signal 9 (Killed)" */
};

/** Allocates a table for entries 1..n-1, none started. Returns DISCO_OK,
 *  DISCO_E_NOMEM. */
disco_status_t disco__procs_init(struct disco__procs *p, int n);

/** Frees the table (stop it first). Safe on a zeroed or failed table. */
void disco__procs_fini(struct disco__procs *p);

/** Starts workers 1..n-1 as how says (fork or spawn). On failure kills and
 *  reaps any already started and returns the error (DISCO_E_SYS,
 *  DISCO_E_INVAL for a missing worker program). */
disco_status_t disco__procs_start(struct disco__procs *p, const struct disco__procs_launch *how);

/** Makes the table watch process pid as entry i (a child of this process;
 *  the entry's last process, if any, reaped): opens its pidfd. Returns
 *  DISCO_OK, DISCO_E_SYS. */
disco_status_t disco__procs_adopt(struct disco__procs *p, int i, pid_t pid);

/** Polls the processes without blocking. Returns DISCO_OK while all live;
 *  on a death reaps it, fills *dead_out (which, how it ended, in words) and
 *  returns DISCO_E_WORKER_DIED (the detail string is not set). */
disco_status_t disco__procs_check(struct disco__procs *p, struct disco__procs_exit *dead_out);

/** Kills entry i (SIGKILL) and reaps it, waiting a bounded time. */
void disco__procs_kill(struct disco__procs *p, int i);

/** Kills every process not reaped yet (SIGKILL, all at once) and reaps
 *  them as disco__procs_stop(p, 0) does; closes the pidfds. A process that
 *  does not end in time (a frozen one) stays unreaped: reaped[] says which. */
void disco__procs_kill_all(struct disco__procs *p);

/** Waits up to grace_ms for every process to exit, then kills the rest, and
 *  reaps them all; closes the pidfds. */
void disco__procs_stop(struct disco__procs *p, int grace_ms);

/* Threads (threads.c): the same operations for a table of worker
 * threads; lifecycle.c's functions call them when p->threads. A worker
 * thread cannot be killed: it is told to stop (its waits end within a
 * park slice), and a user C function it runs is cancelled at its next
 * cancellation point; one that never reaches one is left running, like a
 * frozen process (reaped[] false), and its session's memory is kept
 * (disco__threads_all_ended). */
disco_status_t disco__threads_start(struct disco__procs *p, const struct disco__procs_launch *how);
disco_status_t disco__threads_check(struct disco__procs *p, struct disco__procs_exit *dead_out);
void disco__threads_kill(struct disco__procs *p, int i);
void disco__threads_stop(struct disco__procs *p, int grace_ms);
void disco__threads_fini(struct disco__procs *p);

/** Whether every worker thread that was started has ended and been joined
 *  (always true for processes). */
bool disco__procs_all_ended(const struct disco__procs *p);

#endif
