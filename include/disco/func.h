/*
 * disco/func.h - writing functions that workers call.
 *
 * A function receives its arguments as packed values and writes one result.
 * It runs on every worker of a session (SPMD); disco_ctx_worker_id() tells
 * which. To fail, return disco_ctx_fail(ctx, ...): the message travels back
 * to the controller, which reports it at the next sync, naming the worker
 * and the function.
 *
 * Registration is by name into a process-wide table. A library registers its
 * functions from a constructor (DISCO_FUNC below) so that loading it with the
 * "disco.load_library" builtin, or linking it, is enough.
 *
 * Signatures: a string with one letter per argument, checked before the call
 * (by the controller where it can, by each worker otherwise):
 *   n null  b bool  i int  f float  s str  y bytes  S shape  t dtype
 *   d device  h func  o opaque  T tensor  ? any one value  * any number of further values
 * NULL means "any arguments". Arguments that are DRefs are replaced by the
 * register's value on each worker before the check. A string passed where
 * the signature wants a dtype ('t') is parsed as one by the session's
 * controller ("float32", as disco_dtype_parse reads it; a string that names
 * no dtype fails the call with DISCO_E_BAD_TYPE), as TVM converts strings
 * to DLDataType.
 */
#ifndef DISCO_FUNC_H
#define DISCO_FUNC_H

#include "disco/status.h"
#include "disco/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The call's context, handed to a worker function: who runs it, how it
 * reports a failure (disco_ctx_fail); opaque. */
typedef struct disco_ctx disco_ctx_t;

/* The function type. args are borrowed for the duration of the call. Set
 * *ret (it starts as null); str/bytes/shape in *ret must stay valid until the
 * function returns: point into args, static data or disco_ctx_alloc(). */
typedef disco_status_t (*disco_func_t)(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                       disco_value_t *ret_out);

/** This worker's id, 0 .. world size - 1. */
int disco_ctx_worker_id(const disco_ctx_t *ctx);

/** Number of workers in the session. */
int disco_ctx_world_size(const disco_ctx_t *ctx);

/** Number of workers in this worker's group: the members of its in-group
 *  collectives (<disco/comm.h>, in_group true), the session's workers on a
 *  node over its groups (cfg.num_groups); the world size when the session
 *  has one group, or outside a session's worker. Groups are consecutive
 *  ids: this worker's group starts at id / size * size. Thread-safe. */
int disco_ctx_group_size(const disco_ctx_t *ctx);

/** The user pointer given to disco_register_func_ex for the function being
 *  called (NULL for disco_register_func and DISCO_FUNC). Workers forked after
 *  the registration see the same pointer value (the same address in their
 *  copy of the parent's memory). Thread-safe. */
void *disco_ctx_user(const disco_ctx_t *ctx);

/** Scratch memory for building a result; freed after the result is copied
 *  into its register. NULL when out of memory. */
void *disco_ctx_alloc(disco_ctx_t *ctx, size_t size);

/** Records a failure message for this call and returns DISCO_E_REMOTE, for
 *  `return disco_ctx_fail(ctx, "bad input %d", x);`. */
disco_status_t disco_ctx_fail(disco_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Registers fn under name (copied) with a signature (copied; NULL: any)
 *  and a NULL user pointer. Registering a name again replaces the function.
 *  Thread-safe. Returns DISCO_OK, DISCO_E_INVAL (empty name, fn NULL or bad
 *  signature letter), DISCO_E_NOMEM (table full, or no memory). */
disco_status_t disco_register_func(const char *name, const char *sig, disco_func_t fn);

/** As disco_register_func, and binds user to the name: the function reads
 *  it with disco_ctx_user(ctx) in every call made through this name, so one
 *  C function can serve several names with different state (what a binding
 *  from another language needs: one trampoline, one user pointer per
 *  registered callable). disco neither reads nor frees user. A name
 *  registered again gets the new fn and user together; a call racing with
 *  that sees one pair or the other, never a mix. Thread-safe. Returns
 *  DISCO_OK, DISCO_E_INVAL (empty name, fn NULL or bad signature letter),
 *  DISCO_E_NOMEM (table full, or no memory for the binding). */
disco_status_t disco_register_func_ex(const char *name, const char *sig, disco_func_t fn,
                                      void *user);

/** Registers fn when the library that contains this line is loaded. */
#define DISCO_FUNC(name, sig, fn)                                                                  \
    __attribute__((constructor)) static void disco__register_##fn(void)                            \
    {                                                                                              \
        disco_register_func(name, sig, fn);                                                        \
    }

#ifdef __cplusplus
}
#endif
#endif
