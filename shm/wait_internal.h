/* wait_internal.h - the wait's hook for disco's own parts (tracing); not
 * installed. */
#ifndef DISCO_SHM_WAIT_INTERNAL_H
#define DISCO_SHM_WAIT_INTERNAL_H

#include <stdint.h>

#include "disco/shm/wait.h"

/* Tracing: a non-NULL found_at makes a wait that had to wait store the
 * trace clock's ticks (shm/ticks.h) read just before the check that
 * found the condition true. The read rides the wait loop, so the moment
 * of arrival is stamped without a clock read after it. Left untouched
 * when the condition held at the first check. NULL: no stamp. */
static inline void disco__wait_set_found_at(disco_wait_t *w, uint64_t *found_at)
{
    w->internal = found_at;
}

static inline uint64_t *disco__wait_found_at(const disco_wait_t *w)
{
    return (uint64_t *)w->internal;
}

#endif
