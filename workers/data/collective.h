/*
 * collective.h - collectives over the shared heap (internal).
 *
 * Every worker of a group runs the same collective command (SPMD). Each posts
 * where its tensors are (heap offsets) in its slot of the collective area,
 * meets the others at a barrier, checks that every member agrees (dtype,
 * shape, no member failed), then works directly on the others' bytes: no
 * copies through the control plane. Members that disagree all take the same
 * error path, so every member passes the same number of barriers.
 *
 * Barrier: one 64-bit word, generation << 32 | members arrived in it. A
 * member arrives with one compare-and-swap (acq_rel); the last one moves
 * the word to (generation + 1, 0) in that same swap, so that "everyone
 * arrived" and "the next generation began" are one event. The others wait
 * for the generation to move (acquire), spinning then parking, watching
 * the session's abort word and their liveness check, so a dead member ends
 * the wait with an error instead of a hang.
 *
 * Giving up (abandoning) a collective. A member whose barrier wait fails
 * (worker 0: the call's deadline or a death found by its check; workers
 * 1..N-1: the session broke or the controller went):
 *   A1 withdraws its arrival with a compare-and-swap that succeeds only if
 *      the generation has not moved: from then on no member can pass this
 *      barrier, so none that arrives late goes on to the data. If the
 *      generation moved first, the barrier was passed and the member goes
 *      on as if its wait had succeeded.
 *   A2 looks at the members' marks: before arriving at each barrier, a
 *      member stores (command seq << 8 | barrier number) in its mark
 *      (release), after its writes of the phase. A member whose mark is
 *      older may still be writing into the others' buffers (or has not
 *      even begun the collective).
 *   A3 calls the worker's abandon hook with those late members before the
 *      call returns and frees anything. Worker 0 (the controller) kills and
 *      reaps them and breaks the session; a worker process ends itself at
 *      once, freeing nothing, since it cannot stop the others.
 * So a collective any member gives up never lets another touch the
 * abandoned buffers, and the session is broken: no later collective runs
 * on desynchronised barriers.
 *
 * Trust: worker 0 is the controller, and the members' slots are written by
 * other processes. Every heap offset and length read from a slot is checked
 * against the heap's blocks before it is used, and every number (rank
 * count, dims, status) against its range, so a corrupt or malicious worker
 * can fail a collective or break the session but never make another member
 * read or write outside the shared heap.
 */
#ifndef DISCO_WORKERS_COLLECTIVE_H
#define DISCO_WORKERS_COLLECTIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "disco/tensor.h"
#include "disco/shm/wait.h"

struct disco__barrier {
    _Alignas(64) _Atomic uint64_t state; /* generation << 32 | members arrived */
    disco_waitq_t q;
};

/* A member's progress: (command seq << 8 | barrier number within the
 * command), stored before it arrives at that barrier. */
struct disco__coll_mark {
    _Alignas(64) _Atomic uint64_t at;
};

struct disco__coll_slot {
    _Alignas(64) uint64_t seq; /* the command this post belongs to */
    int32_t status;            /* this member's own verdict before the exchange */
    int32_t ndim;
    DLDataType dtype;
    uint32_t dev_type;           /* 0: heap tensors; else their device type (arena.h) */
    uint64_t in_block, in_off;   /* input tensor (heap offsets; device: arena offset, 0) */
    uint64_t out_block, out_off; /* output tensor, 0 if none */
    int64_t shape[DISCO_MAX_NDIM];
    /* The go barrier (disco__coll_go): this member's verdict after the
     * meeting and its choice for the call; msg explains a failed go. Never
     * read by the meeting, so a member's go cannot change what a slower
     * one reads there. */
    int32_t go;
    uint32_t choice;
    char msg[160];
};

/* The area: one barrier for the whole world and one per group, then two
 * sets of one slot per worker (alternate collectives use alternate sets),
 * then one mark per worker; then, 64-aligned, the device area (arena.h). */
struct disco__coll_area {
    uint32_t world; /* as formatted; for people reading a dump, never used */
    uint32_t num_groups;
    struct disco__barrier world_barrier;
    struct disco__barrier group_barrier[]; /* num_groups, then the slots */
};

/** Bytes the area needs. */
size_t disco__coll_footprint(uint32_t world, uint32_t num_groups);

struct disco__dev_area;

/** The device area (arena.h) that follows the area's marks; geometry as
 *  disco__coll_mark. The footprint above includes it. */
struct disco__dev_area *disco__coll_dev_area(struct disco__coll_area *a, uint32_t world,
                                             uint32_t num_groups);

/** Formats the area (zeroed memory). */
void disco__coll_init(struct disco__coll_area *a, uint32_t world, uint32_t num_groups);

/** Mark of worker w, in an area of world workers and num_groups groups (the
 *  caller's own copy of the geometry, never the area's header, which any
 *  process may overwrite). */
struct disco__coll_mark *disco__coll_mark(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t w);

/** Slot of worker w in set parity (0 or 1); geometry as disco__coll_mark. */
struct disco__coll_slot *disco__coll_slot(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t parity, uint32_t w);

/** Registers the collective builtins (disco.empty, disco.allreduce, ...;
 *  collective_ops.c), as a library does: lookup.c calls it once. */
void disco__coll_register(void);

#endif
