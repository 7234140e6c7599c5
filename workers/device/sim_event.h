/* sim_event.h - what the simulated GPU's streams (sim_stream.c) and events
 * (sim_event.c) share (internal). */
#ifndef DISCO_WORKERS_DEVICE_SIM_EVENT_H
#define DISCO_WORKERS_DEVICE_SIM_EVENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/device.h"
#include "disco/status.h"

enum { DISCO_SIM_OP_COPY, DISCO_SIM_OP_RECORD, DISCO_SIM_OP_WAIT, DISCO_SIM_OP_CALL };

/* An event's shared page (sim_event.c makes and maps it). E1-E5 are the
 * labels of the atomics' comments in sim_stream.c and sim_event.c. */
struct disco__sim_event_shm {
    char magic[8];
    _Atomic uint32_t recorded;            /* E1 */
    _Atomic uint32_t completed;           /* E3 / E4; the futex word of waiters */
    _Atomic int32_t rec_pid;              /* E2 */
    _Atomic uint32_t pokes;               /* E5; the futex word of the recorder's watcher */
    _Atomic uint64_t rec_stream, rec_seq; /* E2 */
};

/** Whether counter value have has reached want (wrapping). Pure. */
static inline bool disco__sim_reached(uint32_t have, uint32_t want)
{
    return (int32_t)(have - want) >= 0;
}

/* One queued operation: a copy (dst, src, n), a record / a wait of an
 * event's counter value, or a call of fn(arg) (the sim's kernels: fn owns
 * arg and frees it; a stream forgotten in a forked child leaks it). */
struct disco__sim_op {
    int kind;
    disco_status_t (*fn)(void *arg);
    void *arg;
    void *dst;
    const void *src;
    size_t n;
    struct disco__sim_event_shm *ev;
    uint32_t value;
    uint32_t delay_us; /* a copy: sleep this long first (DISCO_SIM_PEER_COPY_US) */
};

/** Queues op on stream (NULL: device_id's default stream); the stream's id
 *  and op's sequence number in it go to the outputs that are not NULL.
 *  fn names the caller in errors. Returns DISCO_OK, DISCO_E_INVAL (not a
 *  stream of this process), DISCO_E_NO_DEVICE, DISCO_E_NOMEM. */
disco_status_t disco__sim_enqueue(int device_id, disco_stream_t stream,
                                  const struct disco__sim_op *op, const char *fn,
                                  uint64_t *stream_id_out, uint64_t *seq_out);

/** The engine lock: held while operations run (one thread of the process
 *  runs them at a time). */
void disco__sim_exec_lock(void);
void disco__sim_exec_unlock(void);

/** Blocks until m's completed count reaches want (engine lock held): runs
 *  this process's stream of the record when it is ours, else pokes the
 *  recording process's watcher (E5) and waits for it. Returns DISCO_OK,
 *  DISCO_E_SYS (the recorder died first; the record's stream is gone). */
disco_status_t disco__sim_wait_for(struct disco__sim_event_shm *m, uint32_t want);

/** A wait that failed before, run again (engine lock held): as
 *  disco__sim_wait_for while the record may still come; when its recorder
 *  (another process) is gone, DISCO_E_SYS at once under a watch (watch.h)
 *  or when not host (an event's watcher thread runs it), and a host call
 *  without a watch blocks for ever (a GPU stream behind it never moves). */
disco_status_t disco__sim_wait_stuck(struct disco__sim_event_shm *m, uint32_t want, bool host);

/** The watcher's step (engine lock held): if this process made m's last
 *  record, runs the stream it is queued on up to it (and no further). */
void disco__sim_run_last_record(struct disco__sim_event_shm *m);

#endif
