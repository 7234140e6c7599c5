/*
 * heap_internal.h - test hooks of the shared heap. Not installed, not for
 * use outside tests: they exist to kill a process at a chosen point while it
 * holds the heap's lock.
 */
#ifndef DISCO_HEAP_INTERNAL_H
#define DISCO_HEAP_INTERNAL_H

#include "disco/shm/heap.h"

/* Points inside alloc and free where the fault hook is called with the lock
 * held, metadata half changed (labels as in heap.h). */
enum disco__heap_step {
    DISCO__HEAP_STEP_LEAD_HDR = 1, /* alloc: lead-gap header written (S1) */
    DISCO__HEAP_STEP_LEAD_SPLIT,   /* alloc: lead gap split off (S2) */
    DISCO__HEAP_STEP_TAIL_HDR,     /* alloc: tail header written (S1) */
    DISCO__HEAP_STEP_TAIL_SPLIT,   /* alloc: tail split off (S2) */
    DISCO__HEAP_STEP_OWNER,        /* alloc: owner written (U1) */
    DISCO__HEAP_STEP_USED,         /* alloc: tag used (U2), lists and stats not yet */
    DISCO__HEAP_STEP_FREE_TAG,     /* free: tag free (F1) */
    DISCO__HEAP_STEP_NEXT_GROW,    /* free: grown over the next block (M1) */
    DISCO__HEAP_STEP_NEXT_WIPE,    /* free: next header wiped (M2) */
    DISCO__HEAP_STEP_PREV_GROW,    /* free: previous block grown over it (M1) */
    DISCO__HEAP_STEP_PREV_WIPE,    /* free: its header wiped (M2) */
    DISCO__HEAP_STEP_FREE_DONE,    /* free: merged, lists and stats not yet */
    DISCO__HEAP_STEP_COUNT
};

/* Called at each step when non-NULL. Process-local; set it before starting
 * threads (plain variable, read without synchronization). */
extern void (*disco__heap_fault_hook)(int step);

/* Called, when non-NULL, before each populate of a lazily backed heap with
 * the bytes asked for (before rounding to pages); a non-zero return is taken as that errno
 * (a test's stand-in for memory that is not there). Process-local, as the
 * fault hook. */
extern int (*disco__heap_populate_hook)(size_t len);

/** Takes the heap's lock and returns holding it (so that a test can kill
 *  the holder). Returns DISCO_OK or the lock's error. */
disco_status_t disco__heap_lock_for_test(disco_heap_t *h);

/** Checks every invariant under the lock: the size chain, tags, self
 *  offsets, previous sizes, no two free neighbours, the free lists against
 *  the chain, the bitmap and the statistics. Returns DISCO_OK or
 *  DISCO_E_BROKEN with the first violation in the detail. */
disco_status_t disco__heap_check(disco_heap_t *h);

#endif
