/* soak_round.h - what the soak's rounds (soak_run.c) share with the checks
 * around them (soak_check.c). Internal to the soak. */
#ifndef DISCO_TOOLS_SOAK_ROUND_H
#define DISCO_TOOLS_SOAK_ROUND_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tools/soak/soak.h"

/* What a round leaves open: fds, memfd mappings, /dev/shm entries. */
typedef struct leaks {
    int fds, maps, shm;
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

#endif
