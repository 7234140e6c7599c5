/* segment_fork.h - what a forked worker keeps of its parent's segments
 * (internal; see the table in segment.c). */
#ifndef DISCO_SHM_SEGMENT_FORK_H
#define DISCO_SHM_SEGMENT_FORK_H

#include "disco/shm/segment.h"

/** In a child just forked: unmaps every segment of the parent (made by
 *  disco_segment_create or disco_segment_attach and not closed) except keep
 *  (NULL: all of them). Only munmap, so it is async-signal-safe and may run
 *  after fork in a child of a multithreaded parent; a segment that another
 *  thread of the parent was registering or closing at the fork may be left
 *  mapped. Never call it in a process that still uses those segments. */
void disco__segment_unmap_others(const disco_segment_t *keep);

#endif
