/* bind.h - a worker binds itself to the CPUs and NUMA nodes of its plan
 * entry (internal; the plan is made by scheduler/placement.c). */
#ifndef DISCO_WORKERS_BIND_H
#define DISCO_WORKERS_BIND_H

#include "disco/status.h"

/** Binds the calling thread to cpus (hwloc list form; "" = leave as is) and
 *  its memory policy to nodes ("" = leave as is). Called at worker start,
 *  while the worker has one thread, so it binds the whole worker. Returns
 *  DISCO_OK, DISCO_E_INVAL (a set that does not parse), DISCO_E_SYS. */
disco_status_t disco__bind_self(const char *cpus, const char *nodes);

#endif
