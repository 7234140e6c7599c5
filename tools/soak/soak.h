/* soak.h - the fault soak: rounds that kill -9 a worker, or the controller,
 * in the middle of a call, and check what follows. Used by disco-soak
 * (make soak) and by the soak suite of make test (a bounded run).
 *
 * A worker round opens a session (2, 3, 4 or 8 workers; fork or spawn; rings
 * or pipes), checks that a fault-free pass and a failing call leave the
 * shared heap as they found it, starts a workload (allreduces, heap
 * allocations, broadcast + allgather), and has a second thread kill a
 * random worker after a random delay. The caller's first error must be
 * DISCO_E_WORKER_DIED naming that worker and signal 9, within bound_ms of
 * the kill; the heap must still answer (its lock recovered if the victim
 * died holding it); after close no process, fd, memfd mapping or /dev/shm
 * entry may remain.
 *
 * A controller round forks a controller that runs the same workloads
 * forever, kills it after a random delay, and measures until every one of
 * its workers is gone (they must be, within bound_ms). The soak makes itself
 * a child subreaper, so the orphaned workers become its children and their
 * end is seen by waitpid as well as by their pidfds.
 *
 * A recovery round (recover_pct of the worker rounds; every round with
 * recover_pct 100, and then no controller round) goes on after the kill's
 * report: disco_session_recover brings the session back within the same
 * round, the old registers must be lost (DISCO_E_BAD_REG, "lost in a
 * recovery") and the heap empty, the workload is set up and run again (a
 * fault-free pass and a failed call leave the heap as they found it), an
 * allreduce gives exact values, and the heap's live blocks and this
 * process's fds and memfd mappings must be what they were before the
 * kill; then the round closes and is checked as any other.
 *
 * One round in three (unless no_sim) is a sim-GPU round: the session's
 * tensors are on sim devices (DISCO_SIM_GPUS, set to 2 when unset), so the
 * workloads run on device arenas (device allreduce, device empties with a
 * copy from the host into worker 0's, device broadcast + allgather), the
 * fault-free pass must leave every worker's arena as it found it, and the
 * kill lands while peers hold the victim's arena open. The leak checks are
 * the same: no process, fd, memfd mapping or /dev/shm entry may remain. */
#ifndef DISCO_TOOLS_SOAK_H
#define DISCO_TOOLS_SOAK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SOAK_WORKLOADS 3 /* allreduce, alloc, bcast */

/** The workloads' names, by index. */
extern const char *const soak_workload_name[SOAK_WORKLOADS];

typedef struct soak_opts {
    int rounds;              /* stop after this many rounds; 0: the time limit only */
    double seconds;          /* stop after this long; 0: the round limit only */
    uint64_t seed;           /* 0: from the clock (printed, so a run can be repeated) */
    uint32_t bound_ms;       /* every death must be reported within this */
    const char *worker_path; /* spawned workers' program; NULL: the session's default */
    bool no_sim;             /* no sim-GPU rounds (default: one round in three) */
    int recover_pct;         /* worker rounds that recover (0..100); 100: no controller rounds */
    FILE *log;               /* one line per round, or NULL (failures then go to stderr) */
} soak_opts_t;

typedef struct soak_report {
    uint64_t seed;
    int rounds, worker_rounds, controller_rounds, recover_rounds, failures;
    int mid_call; /* worker kills that landed while the caller was in a call or sync */
    double seconds;
    double worst_worker_ms, median_worker_ms;         /* kill to the caller's error */
    double worst_controller_ms, median_controller_ms; /* kill to its last worker gone */
    double worst_recover_ms, median_recover_ms;       /* disco_session_recover's time */
    uint64_t heap_recoveries;                         /* heap locks taken back from a dead holder */
    int orphans;          /* grandchildren that came to the soak and ended */
    unsigned arenas_left; /* device arenas left to process exit (disco_session_arenas_left) */
    int by_workers[9];    /* rounds by worker count */
    int by_launch[2], by_transport[2], by_workload[SOAK_WORKLOADS];
    int by_device[2];  /* rounds with CPU tensors, with sim-GPU tensors */
    char failure[600]; /* the first failure, "" if none */
} soak_report_t;

/** Runs rounds until either limit; fills r. Sets DISCO_SIM_GPUS=2 in the
 *  environment when it is unset and sim rounds are drawn (spawned workers
 *  inherit it). Not thread-safe (it forks and sets the environment).
 *  Returns the number of failed rounds (0: all passed). */
int soak_run(const soak_opts_t *o, soak_report_t *r);

/** Prints the report for people. */
void soak_print(const soak_report_t *r, FILE *f);

/** Writes the report as JSON to path; returns 0, or -1 with a message on
 *  stderr. */
int soak_write_json(const soak_report_t *r, const char *path);

#endif
