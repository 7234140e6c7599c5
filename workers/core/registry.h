/* registry.h - the process-wide table of named functions (internal). The
 * table knows no function of its own: libraries, the built-in ones included
 * (lookup.h), put theirs in through disco_register_func. */
#ifndef DISCO_WORKERS_REGISTRY_H
#define DISCO_WORKERS_REGISTRY_H

#include <stdatomic.h>
#include <stdint.h>

#include "disco/func.h"

#define DISCO_FUNC_NAME_MAX 128
#define DISCO_FUNC_SIG_MAX  32
#define DISCO_FUNC_MAX      4096

/* What a registration binds a name to. Immutable once published: a
 * re-registration publishes a new binding instead of rewriting this one, so
 * a caller reads fn and user as one pair (never a new fn with an old user).
 * Replaced bindings stay allocated (chained through prev) because a call
 * running on another thread may still hold them. */
struct disco__binding {
    disco_func_t fn;
    void *user;
    const struct disco__binding *prev;
};

struct disco__func {
    char name[DISCO_FUNC_NAME_MAX];
    uint64_t key;                 /* disco__func_key(name): the same in every process (wstat.h) */
    char sig[DISCO_FUNC_SIG_MAX]; /* "" with has_sig false: any arguments */
    _Atomic(const struct disco__binding *) bound;
    _Atomic(_Bool) has_sig;
    /* Needs a session worker (a collective, a heap tensor): refused where a
     * function runs outside a session (the local RPC session, the JSON-RPC
     * front), since it would dereference the missing worker. */
    _Atomic(_Bool) needs_worker;
};

/** A function's key: FNV-1a of its name, never 0. Every process computes
 *  the same key for a name, which a register id (reused after a free) or
 *  a table index (the order of registration) is not. */
static inline uint64_t disco__func_key(const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h != 0 ? h : 1;
}

/** disco_register_func for a builtin that needs a session worker (see
 *  needs_worker). Thread-safe. Returns as disco_register_func. */
disco_status_t disco__register_session_func(const char *name, const char *sig, disco_func_t fn);

/** Handle of the function registered as name, as the table holds it now
 *  (disco__func_find, lookup.h, registers the built-in libraries first).
 *  Thread-safe. Returns DISCO_OK or DISCO_E_NO_FUNC (with the name in the
 *  error detail). */
disco_status_t disco__registry_find(const char *name, uint64_t *handle_out);

/** Entry for a handle, or NULL if none. Thread-safe; entries never move. */
const struct disco__func *disco__func_at(uint64_t handle);

/** Where the signature wants a dtype ('t') and args holds a string, parses
 *  the string as one ("float32"; disco_dtype_parse) and puts the dtype in
 *  its place, as TVM converts a string argument that a function takes as a
 *  DLDataType. Other arguments are left alone. Thread-safe. Returns
 *  DISCO_OK or DISCO_E_BAD_TYPE (a string that names no dtype). */
disco_status_t disco__sig_coerce(const struct disco__func *f, disco_value_t *args, int nargs);

/** Checks args against a signature (see func.h). With dref_any, a DRef
 *  argument matches any letter (the controller cannot see register values).
 *  Thread-safe. Returns DISCO_OK, DISCO_E_ARG_COUNT or DISCO_E_BAD_TYPE with
 *  the details. */
disco_status_t disco__sig_check(const struct disco__func *f, const disco_value_t *args, int nargs,
                                _Bool dref_any);

#endif
