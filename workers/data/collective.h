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
 *      member stores DISCO__COLL_MARK(command seq, barrier number) in its
 *      mark (release), after its writes of the phase. The barrier number
 *      counts every barrier of the command, over all the collectives the
 *      command runs (a worker function may call several: comm.h), so a
 *      mark orders a member's progress within the command. A member whose
 *      mark is older may still be writing into the others' buffers (or
 *      has not even begun the collective).
 *   A3 calls the worker's abandon hook with those late members before the
 *      call returns and frees anything. Worker 0 (the controller) kills and
 *      reaps them and breaks the session; a worker process ends itself at
 *      once, freeing nothing, since it cannot stop the others.
 * So a collective any member gives up never lets another touch the
 * abandoned buffers, and the session is broken: no later collective runs
 * on desynchronised barriers.
 *
 * Identity. A collective is (command seq, its index among the command's
 * collectives, its kind). Each member posts all three in its slot; the
 * meeting fails alike on every member (DISCO_E_MISMATCH, naming who
 * called what) when they differ, so members that call different
 * collectives, or a different number of them, never exchange data.
 * Departure: when a worker ends a command it stores
 * DISCO__COLL_MARK(seq, DISCO__COLL_DONE) in its mark (release; the
 * barrier waits read it with acquire), so a member waiting at a barrier
 * of that command sees, within a park slice, that a member left without
 * arriving (it returned early, or skipped the collective), and gives the
 * call up (A1-A3) with DISCO_E_MISMATCH naming it instead of waiting for
 * the deadline. Test: comm_skip_named (tests/test_comm.c).
 *
 * Point-to-point (comm.h: disco_ctx_send / disco_ctx_recv; comm_p2p.c).
 * Each worker has one outgoing post, struct disco__p2p, after the marks:
 *   S1 the sender writes the post's fields (to, seq, tensor), then stores
 *      state = ticket << 2 | P2P_POSTED (release) with a fresh ticket;
 *   R1 the receiver waits for state POSTED with to == itself and seq ==
 *      its command's (acquire: pairs with S1), then claims it with a
 *      compare-and-swap POSTED -> CLAIMED (acq_rel);
 *   R2 it checks dtype and shape, copies the bytes into its own tensor
 *      (or not, on a mismatch), then stores ack = ticket << 32 | status
 *      (release; pairs with S2);
 *   S2 the sender waits for the ack of its ticket (acquire), and only then
 *      lets the caller touch the tensor again.
 * Giving up: a sender whose wait fails withdraws with a compare-and-swap
 * POSTED -> WITHDRAWN: if it wins, no receiver ever reads the bytes; if
 * the receiver claimed first, the sender waits for the ack (a copy is
 * bounded; a receiver that dies mid-copy ends that wait through the
 * worker's check). A receiver that gives up has claimed nothing: it wrote
 * no byte. Both sides watch the other's departure mark, so a send whose
 * receiver returned (or a receive whose sender did) fails naming it.
 * Test: comm_send_without_recv.
 * Failures: a send or receive that fails on its own argument (a tensor
 * refused, a failure carried from Python: comm_impl.h) with a valid peer
 * on this node still takes its place. The sender posts (S1) with status
 * set to its error and msg its words instead of a tensor; the receiver
 * claims it as any post (R1), copies nothing, acks, and fails at once
 * naming the sender with those words. A receiver that failed claims the
 * next post as any receive does, copies nothing, and acks (R2) with its
 * status and its words in ack_msg; the sender fails naming it with them.
 * Either way the failed party waits for its peer like a good call and
 * returns its own words, so the k-th send of a pair meets the k-th
 * receive. Tests: comm_bad_send_keeps_place, comm_bad_recv_keeps_place.
 *
 * Inline (small host allreduces; collective_ops.c). A member whose input
 * is at most DISCO__COLL_INLINE_MAX bytes of host memory (within one node)
 * copies it into its own slot (data, inline set) before the meeting.
 * Every member, inline or not, stores its slot's arrive word (tag of the
 * call, inline flag; release) once its post is complete, before it does
 * anything else at the meeting:
 *   F1 a member that posted inline does not arrive at the barrier: it
 *      waits (acquire) until every other member's arrive word carries the
 *      call's tag, watching departures as a barrier wait does;
 *   F2 if every one of them is inline, the meeting is over (the checks
 *      follow, on the slots, as after a barrier); each member folds every
 *      member's slot copy, in rank order, into its own output and returns:
 *      no data phase, no end barrier, no member writes another's memory;
 *   F3 if any is not, it arrives at the barrier as the others do, and the
 *      call goes on as a barrier meeting (the checks then name what
 *      differs: a shape, a failure). Whether any member is not inline is
 *      one fact about the slots, so every inline member takes the same
 *      branch; the others never wait for anything but the barrier.
 * Reuse is safe without an end barrier because a member writes its slot
 * of set p again only in the collective after next, which it begins after
 * its meeting of the next one, where no member arrives before it finished
 * reading this one. A member that gives up an inline meeting has nothing
 * to withdraw: the others only read its slot, which stays as it is while
 * the session breaks (A3: the late are the members not yet arrived).
 * Tests: comm_inline_reuse, comm_inline_mixed (tests/test_comm.c).
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
#include <stdbool.h>
#include <stdint.h>

#include "disco/tensor.h"
#include "disco/shm/wait.h"
#include "workers/data/comm_fwd.h"

struct disco__barrier {
    _Alignas(64) _Atomic uint64_t state; /* generation << 32 | members arrived */
    disco_waitq_t q;
};

/* A member's progress: DISCO__COLL_MARK(command seq, barrier number within
 * the command), stored before it arrives at that barrier; DONE when the
 * worker ended the command. 24 bits of barriers a command. */
struct disco__coll_mark {
    _Alignas(64) _Atomic uint64_t at;
};
#define DISCO__COLL_DONE         0xffffffu
#define DISCO__COLL_MARK(seq, b) ((uint64_t)(seq) << 24 | (uint64_t)(b))

/* Collective kinds, posted in the slot for the meeting's identity check. */
enum disco__coll_kind {
    DISCO__K_OTHER = 0,
    DISCO__K_ALLREDUCE,
    DISCO__K_ALLGATHER,
    DISCO__K_BROADCAST,
    DISCO__K_SCATTER,
    DISCO__K_GATHER,
    DISCO__K_SEND_RECV,
    DISCO__K_BARRIER,
    DISCO__K_BCAST_ROOT, /* comm.h's broadcast from any root, into each buffer */
    DISCO__K_COUNT
};

/* Bytes of a party's words in a post (a failed send's, a failed ack's). */
#define DISCO__P2P_MSG 256u

/* One worker's outgoing point-to-point post (protocol S1-S2, R1-R2 above). */
struct disco__p2p {
    _Alignas(64) _Atomic uint64_t state; /* ticket << 2 | P2P_* */
    _Atomic uint64_t ack;                /* ticket << 32 | (uint32_t)status */
    uint64_t seq;                        /* the sender's command */
    int32_t to;                          /* the receiver (a worker id on this node) */
    int32_t ndim;
    DLDataType dtype;
    uint16_t dev_type; /* 0: a heap tensor; else its device type */
    /* S1: the sender's own failure (DISCO_OK: the other fields describe
     * its tensor) and, when it failed, its words in msg (Failures, above).
     * On the post's first line with the fields every send writes, so that
     * a 0- or 1-dim send's receiver pulls one line of it, not two. */
    int16_t status;
    uint64_t block, off;
    int64_t shape[DISCO_MAX_NDIM];
    char msg[DISCO__P2P_MSG];
    /* R2: the receiver's words when the ack's status fails, written
     * before the ack's release (read after S2's acquire). */
    char ack_msg[DISCO__P2P_MSG];
    disco_waitq_t q; /* the sender parks here for its ack */
    /* Its send or receive across nodes, served by the forwarding thread
     * of its node's leader (comm_fwd.h). */
    struct disco__fwd_post fwd;
};
#define DISCO__P2P_IDLE      0u
#define DISCO__P2P_POSTED    1u
#define DISCO__P2P_CLAIMED   2u
#define DISCO__P2P_WITHDRAWN 3u

/* Input bytes a member may carry in its slot (Inline, above). */
#define DISCO__COLL_INLINE_MAX            4096u
/* A call's tag: unique in the session (command seq, index in it), never 0. */
#define DISCO__COLL_TAG(seq, index)       (((uint64_t)(seq) << 24 | (uint64_t)(index)) + 1)
#define DISCO__COLL_ARRIVE(tag, inl_flag) ((uint64_t)(tag) << 1 | ((inl_flag) ? 1u : 0u))

struct disco__coll_slot {
    /* DISCO__COLL_ARRIVE(the call's tag, inline), stored (release) after
     * the post: the member is at the meeting (Inline, above). */
    _Alignas(64) _Atomic uint64_t arrive; /* alone on its line: the peers poll it */
    _Alignas(64) uint64_t seq;            /* the command this post belongs to */
    uint32_t index;                       /* which of the command's collectives (0, 1, ...) */
    uint32_t kind;                        /* enum disco__coll_kind */
    int32_t arg;    /* the kind's argument every member must agree on (root) */
    int32_t status; /* this member's own verdict before the exchange */
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
    /* inline != 0: this member's input bytes (nbytes of its dtype and
     * shape, at most DISCO__COLL_INLINE_MAX) are in data, copied before it
     * arrived at the meeting (Inline, above). */
    uint32_t inl;
    uint32_t inl_bytes; /* the bytes in data (inline set) */
    char msg[160];      /* disco__coll_begin clears the fields before msg only */
    _Alignas(64) unsigned char data[DISCO__COLL_INLINE_MAX];
};

/* The area: one barrier for the whole world and one per group, then two
 * sets of one slot per worker (alternate collectives use alternate sets),
 * then one mark per worker, then one point-to-point post per worker; then,
 * 64-aligned, the device area (arena.h). */
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

/** Outgoing point-to-point post of worker w; geometry as disco__coll_mark. */
struct disco__p2p *disco__coll_p2p(struct disco__coll_area *a, uint32_t world, uint32_t num_groups,
                                   uint32_t w);

/** Records that worker w ended its command (w->seq): its mark becomes
 *  DISCO__COLL_MARK(seq, DISCO__COLL_DONE) (Identity, above). Called by the
 *  worker after every call command. */
struct disco_worker;
void disco__coll_done(struct disco_worker *w);

/** Whether worker id (on w's node) ended w's command, or went on past it:
 *  its mark at or past DISCO__COLL_MARK(w->seq, DISCO__COLL_DONE), read
 *  with acquire (pairs with disco__coll_done's release). The one test of
 *  departure for the barrier waits, the inline meeting and send/recv. */
bool disco__coll_has_left(const struct disco_worker *w, int id);

/** Slot of worker w in set parity (0 or 1); geometry as disco__coll_mark. */
struct disco__coll_slot *disco__coll_slot(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t parity, uint32_t w);

/** Registers the collective builtins (disco.empty, disco.allreduce, ...;
 *  collective_ops.c), as a library does: lookup.c calls it once. */
void disco__coll_register(void);

/** Registers the collectives into the caller's tensor (disco.allreduce_into,
 *  ...; collective_into.c), as a library does: lookup.c calls it once (not
 *  disco__coll_register: collective_into.c uses collective_ops.c, no arrow
 *  back). */
void disco__coll_into_register(void);

#endif
