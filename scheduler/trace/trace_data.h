/* trace_data.h - allocating a disco_trace_t (internal; shared by the
 * snapshot in trace.c and the JSON reader in trace_json.c). */
#ifndef DISCO_SCHEDULER_TRACE_DATA_H
#define DISCO_SCHEDULER_TRACE_DATA_H

#include <stddef.h>

#include "disco/trace.h"

/** A zeroed trace with room for nslices slices, ncmds commands, nwaits
 *  waits, nmarks marks and ncolls in-worker collectives (each at least 1),
 *  or NULL when memory is short (the caller sets the error). */
disco_trace_t *disco__trace_alloc(size_t nslices, size_t ncmds, size_t nwaits, size_t nmarks,
                                  size_t ncolls);

#endif
