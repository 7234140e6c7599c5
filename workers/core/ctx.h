/*
 * ctx.h - a function call's context (internal): what disco_ctx_t holds, and
 * running a registered function with one (disco/func.h is the user's side).
 *
 * A call's context lives on the caller's stack for the one call; the
 * scratch blocks and tensors it owns are released when the call returns,
 * after its result was copied into the caller's register.
 */
#ifndef DISCO_WORKERS_CTX_H
#define DISCO_WORKERS_CTX_H

#include <stddef.h>

#include "disco/func.h"
#include "disco/tensor.h"
#include "workers/core/protocol.h"
#include "workers/core/registry.h"

struct disco_worker;

struct disco_ctx {
    int worker_id;
    int world;
    int failed;
    struct disco_worker *worker; /* NULL outside a session */
    void *user;                  /* the registration's user pointer (disco_register_func_ex) */
    char msg[DISCO_ERR_MSG_MAX];
    void **scratch; /* scratch blocks and tensors owned by the call */
    size_t nscratch;
    DLTensor **tensors;
    size_t ntensors;
};

/** Makes the call own t: it is released when the call ends (a result that
 *  returns it holds its own reference by then). On failure t is released.
 *  Returns DISCO_OK or DISCO_E_NOMEM. */
disco_status_t disco__ctx_own(disco_ctx_t *ctx, DLTensor *t);

/** Runs function f with args on worker w (NULL: outside any session, as
 *  worker 0 of 1) and copies its result into *ret_out (which must be null).
 *  Thread-safe for different w. Returns the function's status with its
 *  message in disco_last_error(); DISCO_E_NO_FUNC while f is still being
 *  registered; DISCO_E_INVAL for a function that needs a session worker
 *  called with w NULL. */
disco_status_t disco__func_run(const struct disco__func *f, struct disco_worker *w,
                               const disco_value_t *args, int n, disco_value_t *ret_out);

#endif
