/*
 * comm_impl.h - what comm.c and comm_p2p.c share (internal): the checks
 * and the staging of the tensors that <disco/comm.h>'s callers pass.
 *
 * Thread safety: the worker function's own thread, as comm.h.
 */
#ifndef DISCO_WORKERS_COMM_IMPL_H
#define DISCO_WORKERS_COMM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "disco/func.h"
#include "disco/tensor.h"

/** Whether ctx is a session worker's (with a collective area). Returns
 *  DISCO_OK or DISCO_E_INVAL naming what. */
disco_status_t disco__comm_worker(disco_ctx_t *ctx, const char *what);

/** t itself when a collective can post it (ours: heap or device arena);
 *  else a new tensor of its dtype and shape owned by the call (until the
 *  function returns), with t's bytes when copy_in: for compact host
 *  memory a heap tensor; for device memory disco did not allocate (t on
 *  this worker's own device: the arena's device type and id) an arena
 *  tensor, the device's default stream synced first and the copy synced
 *  on the arena's stream. Returns DISCO_OK; DISCO_E_INVAL (NULL, not
 *  compact); DISCO_E_MISMATCH (a device tensor on another device id, or of
 *  another device type than the worker's arena); DISCO_E_BAD_TYPE;
 *  disco_ctx_empty's and disco_ctx_empty_device's errors (DISCO_E_NO_DEVICE
 *  for a device type without an arena); the copy's errors. Tested by
 *  tests/test_comm.c test_comm_staged_device and test_comm_stage_errors. */
disco_status_t disco__comm_stage(disco_ctx_t *ctx, const DLTensor *t, bool copy_in,
                                 const char *what, DLTensor **out);

/** Copies a staged h's bytes back into t (nothing when h is t): memcpy
 *  from the heap; from an arena tensor on its arena's stream, after the
 *  collective's device work queued there, synced before it returns.
 *  Returns DISCO_OK or the copy's error. */
disco_status_t disco__comm_unstage(const DLTensor *h, DLTensor *t);

/** The clock for a send's or receive's trace record: now when the
 *  worker traces, else 0. ctx: a session worker's. */
uint64_t disco__comm_clock(disco_ctx_t *ctx);

/** Writes the nested trace record of a send or receive (kind
 *  DISCO__TK_SEND or DISCO__TK_RECV; trace_ring.h, Nested records) from t0
 *  to now: peer the other worker's id in the session (nothing when < 0:
 *  the call failed before it knew one), ticket the post sent or claimed
 *  (0: none). Nothing when the worker does not trace. */
void disco__comm_stamp_p2p(disco_ctx_t *ctx, uint32_t kind, int peer, uint64_t ticket, uint64_t t0);

/** Makes the next collective, send or receive that this thread's worker
 *  function calls in its current command fail on its own arguments with
 *  st (an error status; another value becomes DISCO_E_INVAL) and msg's
 *  words (cut to fit DISCO_ERR_MSG_MAX): that call ignores its tensors and
 *  takes its place as a call whose argument failed, so the collective's
 *  other members, or the send's or receive's peer, fail with an error that
 *  quotes msg. For a caller that refused an argument before comm.h saw it
 *  (python/disco/_comm.c). A later command, or another worker, is not
 *  affected; a second call before the next collective replaces the first.
 *  Thread safety: the worker function's own thread (thread-local state).
 *  ctx: a session worker's (else nothing happens). Test:
 *  tests/python/test_comm_peer_words.py. */
void disco__comm_fail_next(disco_ctx_t *ctx, disco_status_t st, const char *msg);

/** Takes the failure disco__comm_fail_next left for this call, if any
 *  (it is this call's whatever happens: never left for the next), given
 *  st, the call's status so far: returns st if it is an error (its words
 *  kept); else DISCO_OK (none left), or the failure's status with its
 *  words set as this thread's error. ctx: a session worker's. */
disco_status_t disco__comm_failing(disco_ctx_t *ctx, disco_status_t st);

#endif
