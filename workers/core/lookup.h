/*
 * lookup.h - finding a function by name, with the built-in libraries in
 * the table first (internal).
 *
 * The registry (registry.h) is a table that knows no library; the built-in
 * libraries (builtins.h, the collectives of collective.h) register into it
 * as any library does. This file is the one place that lists them, above
 * all three: the registry never calls up into a library.
 */
#ifndef DISCO_WORKERS_LOOKUP_H
#define DISCO_WORKERS_LOOKUP_H

#include <stdint.h>

#include "disco/status.h"

/** Registers the built-in libraries, once per process (later calls return
 *  at once). Thread-safe. A function registered afterwards under a builtin's
 *  name replaces it. */
void disco__builtins_init(void);

/** Handle of the function registered as name, after disco__builtins_init.
 *  Thread-safe. Returns DISCO_OK or DISCO_E_NO_FUNC (with the name in the
 *  error detail). */
disco_status_t disco__func_find(const char *name, uint64_t *handle_out);

#endif
