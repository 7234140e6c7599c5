/*
 * disco/placement.h - where workers run: a placement plan made with hwloc.
 *
 * A plan gives each worker of a session a set of CPUs to bind to (one PU,
 * "singlified", so the worker does not migrate, except for an explicit
 * range) and the NUMA nodes its memory is bound to. Policies:
 *   spread   each worker as much private cache as possible (hwloc_distrib
 *            over the machine), then one PU of its share;
 *   compact  workers on consecutive PUs (logical order: a core's PUs first);
 *   gpu      worker i on the CPUs local to GPU i mod (number of GPUs), the
 *            workers sharing a GPU spread over those CPUs. A GPU whose local
 *            CPUs are not reported (hwloc then gives the whole machine) is
 *            named in the plan's notes. No GPU in the topology: spread, noted;
 *   list     an explicit list ("0,2,4-5", or $DISCO_CPUS): worker i gets
 *            entry i mod (number of entries); an entry is a CPU or a range;
 *   none     no binding.
 * Memory is bound by nodeset only where the machine has more than one NUMA
 * node. Workers bind themselves at start (see session.h). The shared heap
 * is backed by the controller at open (so a missing page fails there, not
 * with SIGBUS later), so its pages sit where the controller's policy put
 * them; workers' private memory follows their binding.
 *
 * Errors: every function returns a disco_status_t; disco_last_error() says
 * more. Plans are plain data: thread-safe to read, owned by the caller.
 */
#ifndef DISCO_PLACEMENT_H
#define DISCO_PLACEMENT_H

#include <stdbool.h>
#include <stdio.h>

#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where workers run; the table in docs/sessions.md says what each does. */
typedef enum disco_place_policy {
    DISCO_PLACE_DEFAULT = 0, /* $DISCO_PLACE if set, else spread, or none when
                                workers outnumber PUs (pinned, they were measured
                                5-10x slower at call + sync on 2 cores) */
    DISCO_PLACE_NONE,
    DISCO_PLACE_SPREAD,
    DISCO_PLACE_COMPACT,
    DISCO_PLACE_GPU,
    DISCO_PLACE_LIST,
} disco_place_policy_t;

/* Placement options of a session (disco_session_config_t.place) or a plan. */
typedef struct disco_place_config {
    /* the policy (DISCO_PLACE_DEFAULT: see there) */
    disco_place_policy_t policy;
    const char *cpus;      /* list policy: "0,2,4-5"; NULL = $DISCO_CPUS */
    const char *synthetic; /* plan for a synthetic topology (hwloc syntax,
                              e.g. "pack:2 numa:2 core:4 pu:2") instead of this
                              machine; for tests and the topo tool */
    const char *xml;       /* or for a topology saved as hwloc XML */
    bool leave_controller; /* leave the controller's thread (worker 0) alone.
                              Default (false): whenever the plan binds worker
                              0, the thread that opens the session is bound
                              to worker 0's entry while the session is open
                              and its CPUs and memory policy are given back
                              at close (see session.h) */
} disco_place_config_t;

#define DISCO_PLACE_SET_MAX 256 /* room for a CPU or node list, NUL included */

/* Where one worker runs. */
typedef struct disco_place_entry {
    char cpus[DISCO_PLACE_SET_MAX];  /* OS indexes, hwloc list form ("3", "0-1");
                                        "" = not bound */
    char nodes[DISCO_PLACE_SET_MAX]; /* NUMA nodes of those CPUs; "" = not bound */
    int core;                        /* logical index of the core of its first PU, or -1 */
    int package;                     /* OS index of its package, or -1 */
    int gpu;                         /* GPU index (gpu policy), or -1 */
} disco_place_entry_t;

/* A placement plan: one entry a worker (disco_plan_make, disco_session_plan). */
typedef struct disco_plan {
    disco_place_policy_t policy; /* the one applied (never DEFAULT) */
    /* entries in worker */
    int num_workers;
    int num_pus, num_cores, num_numa, num_packages, num_gpus; /* of the topology */
    bool oversubscribed;                                      /* more workers than PUs */
    char notes[512];                                          /* "" or sentences */
    disco_place_entry_t *worker;                              /* [num_workers] */
} disco_plan_t;

/** Makes the plan for num_workers under cfg (NULL: the defaults). Loads the
 *  machine's topology once per process (cached); a synthetic or XML
 *  topology is loaded for this call. Thread-safe. Returns DISCO_OK,
 *  DISCO_E_INVAL (unknown policy, bad worker count, a bad list entry: the
 *  message names the entry; a bad synthetic description or XML file),
 *  DISCO_E_SYS (hwloc failed), DISCO_E_NOMEM. */
disco_status_t disco_plan_make(const disco_place_config_t *cfg, int num_workers,
                               disco_plan_t **plan_out);

/** Frees a plan. NULL is harmless. */
void disco_plan_free(disco_plan_t *plan);

/** Prints the plan, as a table or as JSON. Returns DISCO_OK, DISCO_E_SYS
 *  (write failed). */
disco_status_t disco_plan_print(const disco_plan_t *plan, FILE *stream, bool json);

/** "none", "spread", "compact", "gpu", "list" ("default" for DEFAULT). */
const char *disco_place_policy_name(disco_place_policy_t p);

/** Parses a policy name. Returns DISCO_OK, DISCO_E_INVAL (naming it). */
disco_status_t disco_place_policy_parse(const char *name, disco_place_policy_t *p_out);

/** The CPUs the calling thread may run on, in hwloc list form ("0-1,3"),
 *  from sched_getaffinity. Returns DISCO_OK, DISCO_E_SYS,
 *  DISCO_E_BUF_TOO_SMALL. */
disco_status_t disco_place_current_cpus(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
