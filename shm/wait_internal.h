/* wait_internal.h - the wait's hook for disco's own parts (tracing and the
 * status region that the watchdog and `disco top` read); not installed. */
#ifndef DISCO_SHM_WAIT_INTERNAL_H
#define DISCO_SHM_WAIT_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "disco/shm/wait.h"

/* What a wait reports as it waits. Every field may be NULL (not wanted).
 * The wait writes them only once it finds it must wait, so a wait whose
 * condition holds at once costs nothing more.
 *   found_at  tracing: the trace clock's ticks (shm/ticks.h) read just
 *             before the check that found the condition true. The read
 *             rides the wait loop, so the moment of arrival is stamped
 *             without a clock read after it. Left untouched when the
 *             condition held at the first check.
 *   since     the wait's start (disco_now_ns()) while it waits, 0 again
 *             when it returns: read by the watchdog and by other processes
 *             (relaxed: a monitor's picture, see workers/core/wstat.h).
 *   state     set to parked_state around each park, back to awake_state
 *             after it (relaxed, as since).
 *   park_ns   nanoseconds parked, added after each park (relaxed: one
 *             writer, the waiting thread; readers only watch). */
struct disco__wait_hook {
    uint64_t *found_at;
    _Atomic int64_t *since;
    _Atomic uint32_t *state;
    uint32_t parked_state, awake_state;
    _Atomic uint64_t *park_ns;
};

/** Makes w report into hook (NULL: none); hook must outlive w's waits. */
static inline void disco__wait_set_hook(disco_wait_t *w, struct disco__wait_hook *hook)
{
    w->internal = hook;
}

static inline struct disco__wait_hook *disco__wait_hook(const disco_wait_t *w)
{
    return (struct disco__wait_hook *)w->internal;
}

static inline uint64_t *disco__wait_found_at(const disco_wait_t *w)
{
    struct disco__wait_hook *h = disco__wait_hook(w);
    return h != NULL ? h->found_at : NULL;
}

#endif
