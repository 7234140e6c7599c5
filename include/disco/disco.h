/*
 * disco/disco.h - the whole public API in one include.
 *
 *   #include <disco/disco.h>
 *   cc prog.c $(pkg-config --cflags --libs disco)
 *
 * Modules: status (errors), session (controller + N workers, SPMD), value
 * and func (the packed calling convention, registering functions), tensor
 * and device (DLPack tensors, the device API), placement (hwloc plans),
 * trace (profiling), rpc and transport (the RPC session API), worker (the
 * entry point of a spawned worker program), and the shared-memory layer
 * (segment, ring, wait, heap) underneath.
 */
#ifndef DISCO_DISCO_H
#define DISCO_DISCO_H

#include "disco/device.h"
#include "disco/dtype.h"
#include "disco/func.h"
#include "disco/heap.h"
#include "disco/placement.h"
#include "disco/ring.h"
#include "disco/rpc.h"
#include "disco/segment.h"
#include "disco/session.h"
#include "disco/status.h"
#include "disco/tensor.h"
#include "disco/trace.h"
#include "disco/transport.h"
#include "disco/value.h"
#include "disco/wait.h"
#include "disco/worker.h"

#define DISCO_VERSION_STRING "0.1.0"

#endif
