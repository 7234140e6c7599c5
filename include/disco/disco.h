/*
 * disco/disco.h - the whole public API in one include.
 *
 *   \#include <disco/disco.h>
 *   cc prog.c $(pkg-config --cflags --libs disco)
 *
 * Modules: status (errors), session (controller + N workers, SPMD), value
 * and func (the packed calling convention, registering functions), tensor
 * and device (DLPack tensors, the device API), placement (hwloc plans),
 * trace (profiling), rpc and transport (the RPC session API), worker (the
 * entry point of a spawned worker program), clock (the time base).
 *
 * The shared-memory building blocks underneath (segment, ring, wait, heap)
 * are low-level and not part of this umbrella: include <disco/shm/ring.h>
 * and the others one by one when you build on them directly.
 *
 * Names, one scheme throughout:
 *  - disco_<object>_<verb>: a function is named by the object it acts on,
 *    then the action: disco_session_free_reg(s, reg) frees a register of s
 *    (the session itself ends with disco_session_close);
 *    disco_listener_open / _accept / _close, disco_transport_connect /
 *    _send / _recv / _close; disco_trace_write_json.
 *  - disco_value_KIND(...) builds a value of that kind (disco_value_int,
 *    disco_value_dtype, disco_value_tensor, ...): inline in C and C++,
 *    exported under the same name for FFIs (value.h).
 *  - Output arguments come last, are named WHAT_out (sess_out, reg_out,
 *    stats_out, conn_out), and are written only when the call returns
 *    DISCO_OK. Caller-provided text buffers are (char *buf, size_t cap);
 *    FILE streams to print to are `stream`.
 *  - Every function that can fail returns disco_status_t (status.h);
 *    functions that cannot fail return their value (a count, a name).
 *  - disco__<name> is internal: not part of the API, even where a header
 *    shows it (an inline helper's helper).
 */
#ifndef DISCO_DISCO_H
#define DISCO_DISCO_H

#include "disco/clock.h"
#include "disco/comm.h"
#include "disco/device.h"
#include "disco/dtype.h"
#include "disco/func.h"
#include "disco/observe.h"
#include "disco/heap_stats.h"
#include "disco/placement.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/status.h"
#include "disco/tensor.h"
#include "disco/trace.h"
#include "disco/transport.h"
#include "disco/value.h"
#include "disco/worker.h"

#define DISCO_VERSION_STRING "0.4.0" /* libdisco.so.3 */

#endif
