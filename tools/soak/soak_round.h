/* soak_round.h - what the soak's rounds (soak_run.c) share with the checks
 * around them (soak_check.c). Internal to the soak. */
#ifndef DISCO_TOOLS_SOAK_ROUND_H
#define DISCO_TOOLS_SOAK_ROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "disco/session.h"
#include "tools/soak/soak.h"

/* A round's session and workload (soak_run.c). */
typedef struct work {
    disco_session_t *s;
    int n;
    DLDevice dev; /* where the tensors are: CPU, or sim (a sim-GPU round) */
    disco_dref_t f_allreduce, f_empty, f_bcast, f_allgather;
    disco_dref_t x; /* X_FLOATS of float32 on every worker */
    uint64_t rng;
} work_t;

/* What a round leaves open: fds, memfd mappings, disco's /dev/shm entries
 * (soak_shm_entries); and the device arenas this process left to its exit
 * so far (disco_session_arenas_left: their fds and mappings stay by
 * design). */
typedef struct leaks {
    int fds, maps, shm;
    unsigned arenas_left;
    char shm_name[64]; /* one of the shm entries, for the message */
} leaks_t;

/* One round's bookkeeping. */
typedef struct round {
    soak_report_t *r;
    const soak_opts_t *o;
    int index;
    bool failed;
    char what[160]; /* the round's configuration, for messages */
} round_t;

/** Records a failure of the round: the report's first failure if none yet,
 *  one line to the log (or stderr); marks the round failed. */
void soak_fail(round_t *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Counts what this process has open now (-1 for a count it cannot read). */
leaks_t soak_leaks_now(void);

/** Counts the entries of dir (/dev/shm) that are disco's: their names say
 *  "disco" (any case). Disco makes none (its segments, heaps and arenas are
 *  memfds; test_segment.c, test_nothing_in_dev_shm), so one is a leak of
 *  disco gone wrong; the others belong to other programs of the machine
 *  (Open MPI's vader_segment.* files, left by a killed mpirun, and the
 *  like), which come and go during a round and are not counted
 *  (test_soak.c, test_soak_foreign_shm). Copies one counted name into
 *  name_out (cap bytes; may be NULL). Returns the count, or -1 when dir
 *  cannot be read. */
int soak_shm_entries(const char *dir, char *name_out, size_t cap);

/** Sleeps us microseconds (through EINTR). */
void soak_sleep_us(long us);

/** A pidfd for pid, or -1. */
int soak_pidfd_open(pid_t pid);

/** Whether pid (a pidfd in fd, or -1) ended before deadline (disco_now_ns
 *  time). */
bool soak_wait_gone(pid_t pid, int fd, int64_t deadline);

/** After a round: no process of it may live on, and what was open before
 *  (*before) must be all that is open now; fails the round otherwise. */
void soak_check_clean(round_t *rd, const leaks_t *before, const int *workers, int nworkers);

/** The workload's functions and its tensor x (soak_run.c). Returns the
 *  first failing call's status. */
disco_status_t soak_setup(work_t *w);

/** Syncs every worker, worker 0 last. Returns the first failure. */
disco_status_t soak_sync_all(work_t *w);

/** A tensor of floats float32 on every worker, on the round's device. */
disco_status_t soak_empty_on_all(work_t *w, int64_t floats, disco_dref_t *out);

/** The heap (and a sim round's arenas) must be the same before and after
 *  a fault-free pass of workload kind and a failing call; fails the round
 *  otherwise. */
void soak_check_steady(round_t *rd, work_t *w, int kind);

/** [1..64] into worker 0's tensor, broadcast from it, allreduce (sum) on
 *  every worker, copied back: n * (i + 1) exactly, else the round fails
 *  (soak_recover.c). Returns the first failing call's status. */
disco_status_t soak_check_values(round_t *rd, work_t *w);

/** A recovery round's second half (soak_recover.c), after the kill was
 *  reported: recovers the session (its time in *ms_out), checks that the
 *  old registers are lost and that the heap holds nothing, sets the
 *  workload up again, runs it (a fault-free pass and a failed call, as
 *  before the kill) and checks an allreduce's values; the heap's live
 *  blocks must then be held_blocks again and this process's fds and
 *  mappings *held (both taken after the first setup, its fault-free pass
 *  and a soak_check_values). Fails the round on
 *  any difference. */
void soak_recover(round_t *rd, work_t *w, int kind, size_t held_blocks, const leaks_t *held,
                  double *ms_out);

#endif
