/* ring_internal.h - the ring's hooks for disco's own parts (the worker
 * channel's traced write, tests); not installed. */
#ifndef DISCO_SHM_RING_INTERNAL_H
#define DISCO_SHM_RING_INTERNAL_H

#include "disco/shm/ring.h"

/** disco_ring_write that also reads the trace clock (internal: shm/ticks.h)
 *  into *published_at right after the message's first slot is published,
 *  while the publishing stores drain (the read then adds little to the
 *  write). *published_at is untouched when the write fails before that. */
disco_status_t disco__ring_write_stamped(disco_ring_t *r, const void *msg, uint32_t len,
                                         const disco_wait_t *w, uint64_t *published_at);

/** Tests only (internal): a second writer taking over a ring whose writer
 *  is stopped moves head up to the furthest reader cursor, since the
 *  stopped writer may have published its last message's slots without yet
 *  storing head. Never for a ring whose writer may still run. */
void disco__ring_writer_takeover(disco_ring_t *r);

#endif
