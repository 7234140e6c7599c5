/* builtins.h - the functions every worker has (internal): library loading,
 * identity, echo, noop, tensor_span, cpu_affinity. A built-in library like
 * the collectives (collective.h); lookup.h registers both. */
#ifndef DISCO_WORKERS_BUILTINS_H
#define DISCO_WORKERS_BUILTINS_H

/** Registers the "disco.*" builtins of builtins.c in the function table.
 *  Not idempotent by itself (a second call replaces the bindings with equal
 *  ones): disco__builtins_init calls it once. Thread-safe. */
void disco__builtins_register(void);

#endif
