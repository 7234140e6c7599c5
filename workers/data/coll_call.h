/*
 * coll_call.h - one collective call, as each member runs it (internal; the
 * protocol is in collective.h). collective.c (barriers, giving up) and
 * collective_meet.c (the meeting, the checks) implement it; the
 * collectives of collective_ops.c are each a sequence of these steps:
 *   disco__coll_begin, then disco__coll_post_tensor for what it shares (or
 *   disco__coll_fail), disco__coll_meet (the first barrier: every member's
 *   post copied and checked), the checks (disco__coll_same_inputs,
 *   disco__coll_span_check) and the data work, then disco__coll_barrier
 *   for each further phase. A failed barrier wait gives the call up (A1-A3
 *   in collective.h) before these calls return.
 *
 * A command may run several calls (a worker function calling comm.h's
 * collectives): each begins with the next index of the command
 * (disco_worker_t's cmd_coll), and its barriers continue the command's
 * count (cmd_phase), which the marks carry (collective.h, Identity, A2).
 *
 * Thread safety: a call's struct belongs to the one worker thread running
 * it.
 */
#ifndef DISCO_WORKERS_COLL_CALL_H
#define DISCO_WORKERS_COLL_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "disco/dtype.h"
#include "disco/func.h"
#include "disco/tensor.h"
#include "workers/core/worker.h"
#include "workers/data/collective.h"

/* What a member posted, copied out of its slot once after the meeting and
 * checked there (collective.h, Trust): nothing is read from the slot again,
 * so a member that rewrites it later cannot slip past the checks. */
struct disco__coll_posted {
    uint64_t in_block, in_off, out_block, out_off;
    int32_t ndim;
    DLDataType dtype;
    int64_t shape[DISCO_MAX_NDIM];
    uint64_t nbytes;   /* of ndim, shape and dtype: checked not to overflow */
    uint32_t dev_type; /* 0: heap tensors; else device tensors of this type */
    bool inl;          /* the input's bytes are in the member's slot (collective.h, Inline) */
};

struct disco__coll_call {
    disco_worker_t *w;
    struct disco__coll_area *a;
    struct disco__barrier *bar;
    int rank, size, base;   /* within the group; base = first worker of the group */
    int ngroups;            /* groups in the world (this process's copy) */
    uint32_t parity;        /* which of the two slot sets this collective uses */
    uint32_t index;         /* which of the command's collectives (collective.h, Identity) */
    const char *what;       /* the collective's name, for messages */
    bool met;               /* the meeting succeeded */
    bool across;            /* a world collective of a session on several nodes:
                               the leaders meet over the node link (collective_net.c) */
    bool dev;               /* a call on device tensors (known to all after the meeting) */
    bool owe_waits;         /* device call: this member had no arena at its last barrier */
    bool by_flags;          /* device call ordered by a kernel's flags: no events at barriers */
    disco_status_t gave_up; /* the call was given up (A3) with it: no barrier after */
    struct disco__coll_slot *set; /* slot of worker 0 in the call's set (parity): the
                                     set's slots follow it, one a worker */
    struct disco__coll_slot *me;
    disco_status_t local;                              /* this member's verdict so far */
    struct disco__coll_posted post[DISCO_MAX_WORKERS]; /* by rank, after a successful meeting */
};

/** Starts a collective call of kind (its name, for messages, is the
 *  kind's: "allreduce", ...) on ctx's worker, over its group (in_group) or
 *  the whole world: fills c and clears this member's slot of the slot set
 *  the call uses. */
void disco__coll_begin(disco_ctx_t *ctx, bool in_group, enum disco__coll_kind kind,
                       struct disco__coll_call *c);

/** Records this member's failure (the first one only) in its slot, for
 *  every member to see at the meeting. */
void disco__coll_fail(struct disco__coll_call *c, disco_status_t st, const char *msg);

/** Posts t (heap block and offset; for an input also dtype and shape) as
 *  this member's output (out) or input. */
void disco__coll_post_tensor(struct disco__coll_call *c, const DLTensor *t, bool out);

/** Marks this member's arrival at its next barrier, then arrives and waits.
 *  In a call on device tensors the barrier also orders the device work
 *  (Device ordering, below). Returns DISCO_OK, or the status the call
 *  fails with after giving it up (the worker's abandon hook decides it;
 *  else the wait's status), or this member's own device failure (after the
 *  barrier: the others are not held up). */
disco_status_t disco__coll_barrier(struct disco__coll_call *c);

/** A barrier after the meeting that carries a verdict: this member posts
 *  mine (DISCO_OK, or its own failure with the last error as the message)
 *  and choice, passes the barrier, and every member takes the same
 *  verdict: the first failing member's status and message, else DISCO_OK
 *  with *choice_out the first member's choice. So members launch device
 *  work that meets inside the device (a kernel's flags) only when every
 *  one of them will. Returns that verdict, or as disco__coll_barrier. */
disco_status_t disco__coll_go(struct disco__coll_call *c, disco_status_t mine, uint32_t choice,
                              uint32_t *choice_out);

/** Waits on the host for this member's arena stream, under the worker's
 *  wait (deadline, abort word, liveness check: workers/device/watch.h), so
 *  a peer that dies while the stream waits for its record ends the wait
 *  instead of hanging it. A sync that fails gives the call up (A3): which
 *  members still touch this member's bytes is not known, so all the others
 *  go to the abandon hook. Returns DISCO_OK or the status the hook
 *  decides (else the sync's). */
disco_status_t disco__coll_dev_sync(struct disco__coll_call *c);

/** Gives the call up (A3) with st after a point where the others may wait
 *  for this member inside the device (a kernel's flags, after the go
 *  barrier): every other member goes to the abandon hook, which breaks the
 *  session (worker 0) or ends this worker process, so that no member waits
 *  on for a kernel that will never arrive. Returns the hook's status. */
disco_status_t disco__coll_give_up(struct disco__coll_call *c, disco_status_t st);

/** The last barrier of a call whose status so far is st: passed if the
 *  meeting succeeded or st is DISCO_OK (a failed meeting needs none: every
 *  member failed alike after the same barriers); in a device call this
 *  member then waits on the host for its own stream, so a collective's
 *  device work is complete when its command ends, as every command's is.
 *  Returns st if it is an error, else the barrier's or the sync's. */
disco_status_t disco__coll_end(struct disco__coll_call *c, disco_status_t st);

/** Meets the group (a barrier), then copies and checks every member's post:
 *  same command, no member failed, numbers in range. Returns DISCO_OK (and
 *  sets c->met), the first failing member's status (every member reaches
 *  the same verdict), DISCO_E_PROTOCOL, or as disco__coll_barrier. */
disco_status_t disco__coll_meet(struct disco__coll_call *c);

/** Checks that the len bytes at off of member r's input (or output) lie in
 *  a tensor block of the heap and sets *p_out to them. Returns DISCO_OK or
 *  DISCO_E_PROTOCOL (a verdict every member reaches alike). */
disco_status_t disco__coll_span_check(struct disco__coll_call *c, int r, bool out, uint64_t off,
                                      uint64_t len, char **p_out);

/** As disco__coll_span_check for device tensors: bytes [off, off + len) of
 *  member r's posted input (or output) in its device arena, in this
 *  process (the member's arena imported at its first use, arena.h), and
 *  the device they are on. Returns DISCO_OK, DISCO_E_PROTOCOL (the member
 *  posted no device tensor), DISCO_E_INVAL (outside the arena; no arena
 *  here), or the import's error. */
disco_status_t disco__coll_dev_span(struct disco__coll_call *c, int r, bool out, uint64_t off,
                                    uint64_t len, char **p_out, DLDevice *dev_out);

/** Member r's id in messages: its global id (the workers of every node
 *  numbered together; on one node its worker id). Messages name global
 *  ids: on node 1, "worker 0" would be node 0's leader (test:
 *  node:test_ctx_more_across_nodes, its badroot words). */
static inline int disco__coll_gid(const struct disco__coll_call *c, int r)
{
    return c->w->gid_base + c->base + r;
}

/** Member rank's inline input (collective.h, Inline): its slot's copy of
 *  post[rank].nbytes bytes, checked at the meeting to fit. Only after a
 *  meeting where post[rank].inl is set. */
const void *disco__coll_inline(struct disco__coll_call *c, int rank);

/** Checks that every member's input has this member's dtype and shape
 *  (shape[0] too unless any_dim0). Returns DISCO_OK or DISCO_E_MISMATCH. */
disco_status_t disco__coll_same_inputs(struct disco__coll_call *c, bool any_dim0);

/* ---- the bodies shared by the builtins and comm.h (collective_ops.c) ----
 *
 * Each runs one whole collective call on ctx's worker over its group
 * (in_group) or the world. pre is this member's verdict on its arguments
 * before the call: an error is posted for every member to see at the
 * meeting (the tensors may then be NULL), so every member fails alike
 * after the same barriers. Tensors are ours: heap or device arena. */

/** allreduce of x into out (same dtype, shape and device; out may be x).
 *  Returns DISCO_OK or the call's failure. */
disco_status_t disco__coll_allreduce_into(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                          const DLTensor *x, DLTensor *out, disco_reduce_op_t op);

/** allgather of x into out (x's shape with dimension 0 times the members;
 *  checked). Returns as disco__coll_allreduce_into. */
disco_status_t disco__coll_allgather_into(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                          const DLTensor *x, DLTensor *out);

/** After a meeting with same inputs: copies member rank's posted input
 *  (device bytes) into dst (this member's own, host or device), queued on
 *  this member's arena stream (the call's end syncs it). Returns DISCO_OK
 *  or this member's failure. */
disco_status_t disco__coll_dev_copy_into(struct disco__coll_call *c, int rank, DLTensor *dst);

/** As disco__coll_dev_copy_into for the len bytes at off of member rank's
 *  input (checked to lie in its arena); nothing is copied when they are
 *  dst's own bytes already (worker 0's broadcast into its x). */
disco_status_t disco__coll_dev_copy_part(struct disco__coll_call *c, int rank, uint64_t off,
                                         uint64_t len, DLTensor *dst);

/* ---- device tensors (collective_dev.c) ----
 *
 * Device ordering. Members queue their copies on their own arena streams
 * and the host never waits for a device between members: at each barrier
 * of a device call a member with an arena records its arena's IPC event
 * before it arrives (everything it queued so far, its inputs' producers
 * included), and after passing, its stream waits for the record of every
 * other member that has an arena (arena.h), before it queues anything that
 * touches their bytes (a member that makes its arena only after the
 * barrier waits when it first touches a peer's bytes). So a read of a
 * peer's bytes runs after the peer's writes before the barrier, and a
 * member's later work on its own bytes (reuse, free) after the peers'
 * reads of them. The host waits for its own stream once, at the call's
 * end (disco__coll_end), and where it reads device bytes itself
 * (allreduce's host staging). */

/** After a meeting where member rank posted a device tensor x (x: NULL on
 *  the others): on rank itself the result is x (a new reference), on the
 *  calling member a copy on its own device (broadcast: every member calls
 *  it with rank 0; send_recv: only the receiver). Returns DISCO_OK, or this
 *  member's own failure (allocation, import, copy); the caller passes the
 *  end barrier either way, so the poster frees nothing while it is read. */
disco_status_t disco__coll_dev_copy_of(disco_ctx_t *ctx, struct disco__coll_call *c, int rank,
                                       const DLTensor *x, disco_value_t *ret);

/** After a meeting with same inputs: copies this member's x (nb bytes)
 *  into worker 0's posted output at rank * nb, then passes the barrier.
 *  Returns DISCO_OK or this member's failure (after the barrier). */
disco_status_t disco__coll_dev_gather(struct disco__coll_call *c, const DLTensor *x, size_t nb);

/** After a meeting with same inputs: copies every member's input (nb
 *  bytes each) into out at rank * nb, then passes the barrier. Returns as
 *  disco__coll_dev_gather. */
disco_status_t disco__coll_dev_allgather(struct disco__coll_call *c, DLTensor *out, size_t nb);

/** After a meeting where worker 0 posted a device tensor of size rows
 *  (dimension 0 per member) and chunk bytes per member: a copy of this
 *  member's rows on its own device. Returns as disco__coll_dev_copy_of. */
disco_status_t disco__coll_dev_scatter(disco_ctx_t *ctx, struct disco__coll_call *c, int64_t rows,
                                       uint64_t chunk, disco_value_t *ret);

/** Whether an allreduce of device tensors over c's members may run as a
 *  kernel on every member (workers/device/ar.h): groups of at most
 *  DISCO_AR_MAX_RANKS members. The caller sets c->by_flags to it before
 *  the meeting when its input is a device tensor (every member decides
 *  alike: the group's size is the same on all). Whether the kernels do
 *  run is decided after the meeting (disco__coll_dev_allreduce). */
bool disco__coll_dev_by_kernel(const struct disco__coll_call *c);

/** After a meeting with same inputs. With c->by_flags: every member maps
 *  everyone's input, output and signal region, passes the go barrier
 *  (disco__coll_go: all launch, or none; and the first member's route),
 *  launches its kernel and waits for its stream; no barrier after (the
 *  kernels' END flags order later uses). The route is staged instead when
 *  two workers of the session share a physical device without MPS, or
 *  DISCO_AR_PATH says so (docs/gpu-sharing.md; tests/test_gpu_share.c).
 *  Staged (or without c->by_flags): this member reduces its slice of
 *  every member's x (through host memory, a chunk at a time), writes the
 *  result into every member's posted output, then passes the barrier.
 *  Returns DISCO_OK or the call's failure (the same on all when it is the
 *  go's). */
disco_status_t disco__coll_dev_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                         const DLTensor *x, DLTensor *out);

#endif
