/* tvm_names.h - TVM Disco's builtin names (runtime.disco.*) as forms of
 * disco's builtins (internal; tvm_names.c lists them). */
#ifndef DISCO_WORKERS_TVM_NAMES_H
#define DISCO_WORKERS_TVM_NAMES_H

/** Registers runtime.disco.worker_id, worker_rank, device, empty,
 *  allreduce, allgather, broadcast_from_worker0, scatter_from_worker0 and
 *  gather_to_worker0. A built-in library (lookup.c): run once, before the
 *  first lookup. */
void disco__tvm_names_register(void);

#endif
