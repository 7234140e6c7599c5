/*
 * disco/comm.h - collectives and point-to-point from inside a worker
 * function: the workers talk to each other without the controller.
 *
 * A worker function (disco_func_t, registered by name) receives a
 * disco_ctx_t *ctx. Inside it, every member of a collective calls the same
 * function here with the same arguments where they must agree (op, root,
 * in_group, the tensors' dtype and shape); the call returns when this
 * member's part is done. So a model step is one command: call_sync_all of a
 * function that runs every layer and reduces inside.
 *
 * The machinery is the controller's collectives' (disco.allreduce, ...):
 * the shared heap, the device kernels (sim and CUDA), the IPC events, the
 * MPI link between nodes. A command may run any number of collectives;
 * they are told apart by their order in the command, so every member must
 * call the same collectives in the same order.
 *
 * Tensors. A tensor is the worker's own: one of its call's arguments, one
 * from disco_ctx_empty / disco_ctx_empty_device, or a view disco made of
 * one. Any other compact host tensor (the worker's malloc'd memory, a NumPy
 * array) is staged through the shared heap: copied in, and the result
 * copied out. Device memory that disco did not allocate (a torch CUDA
 * tensor, memory from disco_device_alloc) is staged the same way through
 * the worker's device arena, by device copies, when it is compact and on
 * the worker's own device (the device type of its arena, the id
 * disco_device_of_worker gives): the caller's work on it must be done or
 * queued on the device's default stream, which disco syncs before it
 * reads; the result is copied back and synced before the call returns.
 * A device tensor on another device id, of another device type than the
 * worker's arena, or not compact, is refused (DISCO_E_MISMATCH,
 * DISCO_E_INVAL) on that member. docs/worker-comm.md, "Device tensors
 * disco did not allocate".
 *
 * Failure. Every error is the collective's on every member that takes part
 * in its meeting: mismatched dtype, shape, root or collective gives
 * DISCO_E_MISMATCH on all of them, naming the workers. A member that never
 * arrives (it died, hangs, returned from the command without calling, or
 * called another collective) fails the call within the session's call
 * timeout; a member that returned is named at once. Such a failure breaks
 * the session (as the controller's collectives do), and no member's bytes
 * are written after a member gave up. After any error the function should
 * return it: the members no longer agree on what comes next.
 *
 * Thread safety: call only from the worker function's own thread, with
 * the ctx it received. Outside a session's worker function (ctx without a
 * session worker) every function returns DISCO_E_INVAL.
 */
#ifndef DISCO_COMM_H
#define DISCO_COMM_H

#include <stdbool.h>

#include <dlpack/dlpack.h>

#include "disco/dtype.h"
#include "disco/func.h"
#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Every member gets op over the members' in, in out (same dtype, shape and
 *  device as in; out may be in). in_group: over this worker's group
 *  (disco_session_config_t's groups), else over every worker.
 *  Returns DISCO_OK; DISCO_E_INVAL (not in a worker function, bad op);
 *  DISCO_E_MISMATCH (in and out differ, members disagree, a member left);
 *  DISCO_E_BAD_TYPE (dtype); DISCO_E_HEAP_EXHAUSTED (staging); the
 *  session's failure (DISCO_E_TIMEOUT, DISCO_E_WORKER_DIED, DISCO_E_BROKEN). */
disco_status_t disco_ctx_allreduce(disco_ctx_t *ctx, const DLTensor *in, DLTensor *out,
                                   disco_reduce_op_t op, bool in_group);

/** Every member gets the members' in stacked along dimension 0, in out
 *  (in's dtype and device, and in's elements times the members: in's
 *  shape with dimension 0 times the members, or any shape of that many
 *  elements, as TVM's allgather takes). Returns as
 *  disco_ctx_allreduce. */
disco_status_t disco_ctx_allgather(disco_ctx_t *ctx, const DLTensor *in, DLTensor *out,
                                   bool in_group);

/** Every member's buf gets the bytes of member root's buf (root: a rank in
 *  the group with in_group, else a worker id). Every member passes the
 *  same root and a buf of the same dtype and shape. Returns as
 *  disco_ctx_allreduce. */
disco_status_t disco_ctx_broadcast(disco_ctx_t *ctx, DLTensor *buf, int root, bool in_group);

/** Returns when every member has called it. Returns as disco_ctx_allreduce. */
disco_status_t disco_ctx_barrier(disco_ctx_t *ctx, bool in_group);

/** Sends t's bytes to worker to_worker, which receives them with
 *  disco_ctx_recv(ctx, t', this worker) into a tensor of the same dtype and
 *  shape. Returns once the receiver has copied them (t may then be reused).
 *  Only the two workers take part (across nodes, any two workers: the
 *  bytes go through a forwarding thread in each node's MPI process;
 *  docs/worker-comm.md, Across nodes). Returns DISCO_OK; DISCO_E_INVAL (bad
 *  worker, itself, not in a worker function); DISCO_E_MISMATCH (the
 *  receiver's tensor differs, on both ends, or the receiver ended its
 *  command without receiving, seen on one node only); DISCO_E_TIMEOUT
 *  (across nodes, a peer that never receives: at 4/5 of the call timeout
 *  from the command's start, naming it and its node); DISCO_E_UNSUPPORTED
 *  (across nodes, more than INT_MAX - 4096 bytes); the session's
 *  failure. A send or receive that fails on its own argument (t refused:
 *  NULL, not compact, another device) with a valid peer still takes its
 *  place, on one node as across nodes: it waits for its peer's call as a
 *  good one would and returns its own error; the peer fails at once with
 *  the failing end's status, naming it and quoting its words, and writes
 *  nothing; the pair's next send meets the next receive. */
disco_status_t disco_ctx_send(disco_ctx_t *ctx, const DLTensor *t, int to_worker);

/** Receives into t what worker from_worker sends with disco_ctx_send.
 *  Returns as disco_ctx_send (DISCO_E_MISMATCH also when the sender ended
 *  its command without sending). */
disco_status_t disco_ctx_recv(disco_ctx_t *ctx, DLTensor *t, int from_worker);

/** disco_ctx_send to the worker of the same rank in the next group (this
 *  worker's id plus the group size). DISCO_E_INVAL in the last group. */
disco_status_t disco_ctx_send_to_next_group(disco_ctx_t *ctx, const DLTensor *t);

/** disco_ctx_recv from the worker of the same rank in the previous group.
 *  DISCO_E_INVAL in the first group. */
disco_status_t disco_ctx_recv_from_prev_group(disco_ctx_t *ctx, DLTensor *t);

#ifdef __cplusplus
}
#endif

#endif
