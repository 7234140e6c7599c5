/* bind.h - a worker binds itself to the CPUs and NUMA nodes of its plan
 * entry (internal; the plan is made by scheduler/place/placement.c). */
#ifndef DISCO_WORKERS_BIND_H
#define DISCO_WORKERS_BIND_H

#include <stdbool.h>
#include <sys/types.h>

#include "disco/status.h"

/* A thread's placement before disco bound it: its CPU affinity and, when
 * saved, its memory policy. */
struct disco__bind_saved {
    pid_t tid;                /* 0: nothing saved */
    bool mem;                 /* the memory policy was saved */
    int mem_mode;             /* as get_mempolicy reports it (flags included) */
    unsigned long nodes[16];  /* its node mask: up to 1024 nodes */
    unsigned char cpus[1024]; /* cpu_set_t bytes: up to 8192 CPUs */
};

/** Binds the calling thread to cpus (hwloc list form; "" = leave as is) and
 *  its memory policy to nodes ("" = leave as is). Called at worker start,
 *  while the worker has one thread, so it binds the whole worker. Returns
 *  DISCO_OK, DISCO_E_INVAL (a set that does not parse), DISCO_E_SYS. */
disco_status_t disco__bind_self(const char *cpus, const char *nodes);

/** Saves the calling thread's CPU affinity, and its memory policy when
 *  mem, so that disco__bind_restore can give them back. Returns DISCO_OK,
 *  DISCO_E_SYS. */
disco_status_t disco__bind_save(bool mem, struct disco__bind_saved *saved_out);

/** Whether every CPU of cpus (hwloc list form) lies in the saved CPU
 *  affinity: a thread the user confined (taskset, a cpuset) is not moved
 *  out of its set by default. Thread-safe. "" or a list that does not
 *  parse: false. */
bool disco__bind_within(const struct disco__bind_saved *saved, const char *cpus);

/** Gives the saved thread back its CPU affinity (from any thread of the
 *  process, while that thread lives) and its memory policy (only when
 *  called on that thread: set_mempolicy acts on the caller). Nothing when
 *  nothing was saved; then marks it so. Errors are ignored: this runs on
 *  close paths that cannot fail. */
void disco__bind_restore(struct disco__bind_saved *saved);

/** Places the whole pages of [addr, addr + len), memory of the shared heap
 *  this thread is about to use, on the NUMA nodes its memory policy binds it
 *  to (disco__bind_self): the range's policy becomes that binding, and those
 *  of its pages that no other process maps move there. Does nothing for a
 *  thread not bound to nodes. A page another process maps stays where it
 *  is. Returns DISCO_OK or DISCO_E_SYS. */
disco_status_t disco__place_pages(void *addr, size_t len);

#endif
