/*
 * bench_util.h - helpers shared by disco-bench and disco-demo (tools only;
 * defined in bench_util.c, linked into both). What is here: fatal errors
 * that take the forked children down too, a watchdog, forking and reaping
 * children, CPU pinning, medians, a segment holding one broadcast ring and
 * N reply rings, and the machine description.
 *
 * Rule for children: every child is started with bu_spawn, dies with its
 * parent (PR_SET_PDEATHSIG) and leaves with _exit, so the parent's stdio
 * buffers are never flushed twice.
 *
 * None of it is thread-safe: the tools call it from one thread per process.
 */
#ifndef DISCO_TOOLS_BENCH_UTIL_H
#define DISCO_TOOLS_BENCH_UTIL_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "disco/shm/ring.h"
#include "disco/shm/segment.h"
#include "disco/status.h"
#include "disco/shm/wait.h"

#define BU_DEADLINE_NS  (10LL * 1000000000LL) /* no single wait may take longer */
#define BU_MAX_CHILDREN 64
#define BU_MSG_SIZE     64u /* the control message the figures are about */

/* ---- children and fatal errors ---- */

/* Prints the message, kills and reaps every child, exits 1. */
__attribute__((format(printf, 1, 2), noreturn)) void bu_die(const char *fmt, ...);

/* In a child: reports a disco error and leaves with _exit(1). */
__attribute__((noreturn)) void bu_child_fail(disco_status_t st, const char *what);

/* Dies on a disco error, naming the call, the code and its context. Inline:
 * it sits in timed loops, where only the comparison may cost. */
static inline void bu_check(disco_status_t st, const char *what)
{
    if (st != DISCO_OK)
        bu_die("%s: %s (%s)", what, disco_err_name(st), disco_last_error());
}

/* In a child: report a disco error and leave. */
static inline void bu_child_check(disco_status_t st, const char *what)
{
    if (st != DISCO_OK)
        bu_child_fail(st, what);
}

/* (Re)arms a whole-process watchdog: covers blocking pipe reads, which have
 * no deadline of their own. 0 disarms. Children do not inherit it. */
void bu_watchdog(unsigned seconds);

/* Forks a child that runs fn(arg) and _exits with its return value. The
 * child dies with the parent. Returns the child's pid. */
pid_t bu_spawn(int (*fn)(void *), void *arg);

/* Waits for every child; dies if one did not exit with status 0. */
void bu_reap_all(void);

/* Forgets a child that the caller reaped itself (no longer killed or
 * waited for by bu_die and bu_reap_all). */
void bu_forget(pid_t pid);

/* ---- time, waits, statistics ---- */

/* Wait settings with a deadline BU_DEADLINE_NS from now; pause_ns 0 keeps
 * the library default (spin with pause ~20 us before yielding). */
disco_wait_t bu_wait(uint64_t pause_ns);

/* Median of n values (sorts them in place). */
double bu_median(double *v, int n);

/** Runs cmd (a shell command line, printed first) and calls take for each
 *  "key=value" line of its output. Returns pclose's status (-1: popen or
 *  pclose failed, errno set); *found counts the lines taken. */
int bu_read_figures(const char *cmd, void (*take)(void *ctx, const char *key, double v), void *ctx,
                    int *found);

/** Runs prog (an Open MPI program; no ' in its path) over n ranks with
 *  the shared-memory transport (pml ob1, btl self,vader), oversubscribing,
 *  bound as bind says, killed after timeout_s seconds, its arguments args;
 *  reads its "key=value" lines as bu_read_figures does. Returns as
 *  bu_read_figures. */
int bu_mpirun_figures(int timeout_s, int n, const char *bind, const char *prog, const char *args,
                      void (*take)(void *ctx, const char *key, double v), void *ctx, int *found);

/* ---- pinning ---- */

extern int bu_cpu_ids[CPU_SETSIZE]; /* the CPUs we may run on (bu_cpus_init) */
extern int bu_ncpus;                /* how many */

/* Records the CPUs we may run on. Call once at start, before any pinning. */
void bu_cpus_init(void);

/* Pins the calling process to the k-th allowed CPU (round-robin). */
void bu_pin(int k);

/* Lets the calling process float over every allowed CPU again. */
void bu_unpin(void);

/* ---- one broadcast ring + N reply rings in one memfd segment ---- */

typedef struct bu_rings {
    disco_segment_t seg;
    disco_ring_t bcast;                  /* controller -> all; reader i = worker i */
    disco_ring_t reply[BU_MAX_CHILDREN]; /* worker i -> controller */
    uint32_t n;
} bu_rings_t;

/* Formats the rings for n workers, each ring on its own page. A broadcast
 * slot (128 bytes) holds a BU_MSG_SIZE message plus the 16-byte slot header;
 * reply slots are reply_slot bytes (64: 48 bytes of payload, enough for an
 * ack; 128 to echo a BU_MSG_SIZE message in one slot). Handles stay valid
 * across fork (same mapping address). Dies on failure. */
void bu_rings_create(bu_rings_t *r, uint32_t n, uint32_t reply_slot);

/* Unmaps the rings' segment. */
void bu_rings_close(bu_rings_t *r);

/* ---- machine description ---- */

typedef struct bu_machine {
    char cpu[160];
    int cores;
    double mem_gib;
    char gpu[64];
    double load1; /* 1-minute load average at start: other work skews every figure */
} bu_machine_t;

/* Fills m from /proc and sysconf (unknown fields: "unknown", -1 or "none"). */
void bu_machine_probe(bu_machine_t *m);

#endif
