/*
 * comm_impl.h - what comm.c and comm_p2p.c share (internal): the checks
 * and the staging of the tensors that <disco/comm.h>'s callers pass.
 *
 * Thread safety: the worker function's own thread, as comm.h.
 */
#ifndef DISCO_WORKERS_COMM_IMPL_H
#define DISCO_WORKERS_COMM_IMPL_H

#include <stdbool.h>

#include "disco/func.h"
#include "disco/tensor.h"

/** Whether ctx is a session worker's (with a collective area). Returns
 *  DISCO_OK or DISCO_E_INVAL naming what. */
disco_status_t disco__comm_worker(disco_ctx_t *ctx, const char *what);

/** t itself when a collective can post it (ours: heap or device arena),
 *  else a new heap tensor of its dtype and shape owned by the call, with
 *  t's bytes when copy_in (t: compact host memory). Returns DISCO_OK;
 *  DISCO_E_INVAL (NULL, not compact); DISCO_E_MISMATCH (device memory not
 *  ours); DISCO_E_BAD_TYPE; disco_ctx_empty's errors. */
disco_status_t disco__comm_stage(disco_ctx_t *ctx, const DLTensor *t, bool copy_in,
                                 const char *what, DLTensor **out);

/** Copies a staged h's bytes back into t (nothing when h is t). */
void disco__comm_unstage(const DLTensor *h, DLTensor *t);

#endif
