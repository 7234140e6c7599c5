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
 * Barrier: a generation count. The last to arrive resets the count and bumps
 * the generation (release); the others wait for the bump (acquire), spinning
 * then parking, watching the session's abort word and their liveness check,
 * so a dead member ends the wait with an error instead of a hang.
 */
#ifndef DISCO_WORKERS_COLLECTIVE_H
#define DISCO_WORKERS_COLLECTIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "disco/tensor.h"
#include "disco/wait.h"

struct disco__barrier {
    _Alignas(64) _Atomic uint32_t arrived;
    _Atomic uint32_t generation;
    disco_waitq_t q;
};

struct disco__coll_slot {
    _Alignas(64) uint64_t seq; /* the command this post belongs to */
    int32_t status;            /* this member's own verdict before the exchange */
    int32_t ndim;
    DLDataType dtype;
    uint32_t reserved;
    uint64_t in_block, in_off;   /* input tensor (heap offsets), 0 if none */
    uint64_t out_block, out_off; /* output tensor, 0 if none */
    int64_t shape[DISCO_MAX_NDIM];
    char msg[160];
};

/* The area: one barrier for the whole world and one per group, then two
 * sets of one slot per worker (alternate collectives use alternate sets). */
struct disco__coll_area {
    uint32_t world;
    uint32_t num_groups;
    struct disco__barrier world_barrier;
    struct disco__barrier group_barrier[]; /* num_groups, then the slots */
};

/** Bytes the area needs. */
size_t disco__coll_footprint(uint32_t world, uint32_t num_groups);

/** Formats the area (zeroed memory). */
void disco__coll_init(struct disco__coll_area *a, uint32_t world, uint32_t num_groups);

/** Slot of worker w in set parity (0 or 1). */
struct disco__coll_slot *disco__coll_slot(struct disco__coll_area *a, uint32_t parity, uint32_t w);

/** Registers the collective builtins (disco.empty, disco.allreduce, ...). */
void disco__coll_register(void);

#endif
