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

/** Places the whole pages of [addr, addr + len), memory of the shared heap
 *  this thread is about to use, on the NUMA nodes its memory policy binds it
 *  to (disco__bind_self): the range's policy becomes that binding, and those
 *  of its pages that no other process maps move there. Does nothing for a
 *  thread not bound to nodes. A page another process maps stays where it
 *  is. Returns DISCO_OK or DISCO_E_SYS. */
disco_status_t disco__place_pages(void *addr, size_t len);

#endif
