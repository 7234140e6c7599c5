/*
 * disco/tensor.h - DLPack tensors in a session's shared heap.
 *
 * Every tensor that crosses the API is a DLPack DLTensor. CPU tensors of a
 * session live in its shared heap: one memfd segment mapped by the
 * controller and every worker, so a tensor made on one worker is read by
 * another with no copy. A register holds a reference to a heap block; the
 * block is freed when the last register referring to it is freed (blocks are
 * reference-counted across processes, so broadcast can hand every worker the
 * same bytes).
 *
 * Tensors never travel inside command frames: they move by register (DRef)
 * and by the copies to and from worker 0 below, as in TVM's Disco.
 *
 * Device tensors (kDLCUDA, and kDLExtDev: "sim", the simulated GPU that
 * DISCO_SIM_GPUS=N enables, a test and development device). A register
 * may hold a tensor on a worker's device: worker i uses device
 * i mod (number of devices) of the type asked for, whatever device id is
 * given. Each worker makes its device tensors in ONE device arena
 * (cfg.device_arena_bytes, default 64 MiB), allocated on its device at its
 * first device tensor and exported once for the other workers' processes;
 * a tensor is a piece of it, named across processes by (worker, arena
 * offset, shape, dtype). One session uses one device type. Closing the
 * session frees every arena and closes every imported handle. Errors name
 * the worker and the device: DISCO_E_NO_DEVICE (no such device type, or no
 * device of it, as sim without DISCO_SIM_GPUS), DISCO_E_NOMEM (the arena
 * cannot be allocated, or is full), DISCO_E_MISMATCH (the worker's arena is
 * on another device type); DISCO_E_INVAL when another session of this
 * process holds device tensors (the process has one IPC lifetime table:
 * one session with device tensors at a time). A failing device call fails
 * that call and the
 * session stays usable; a worker's death breaks it, as for CPU tensors.
 * Collectives: disco.broadcast_from_worker0, scatter_from_worker0,
 * gather_to_worker0, allgather and allreduce take device tensors
 * (device-to-device copies between the arenas, allreduce staged through
 * host memory; ordered between workers by each arena's IPC event: a member
 * records it before each barrier and its stream waits for the others'
 * records after; each member syncs its own stream once, at the end);
 * disco.send_recv too. Each result is a new tensor on the member's own
 * device (worker 0's broadcast result is its x).
 * Collectives into the caller's tensor (TVM's forms; heap or device
 * tensors): disco.allreduce_into(x, out, op, in_group),
 * allgather_into(x, out, in_group), broadcast_from_worker0_into(x, out,
 * in_group), scatter_from_worker0_into(x, out, in_group) (parts by
 * element count) and gather_to_worker0_into(x, out, in_group) write out
 * directly, with no new tensor (the result register holds null). out is
 * checked first: a tensor of this session (DISCO_E_BAD_TYPE,
 * DISCO_E_MISMATCH), compact (DISCO_E_INVAL), x's dtype and device type
 * (broadcast, scatter: any) and the element count written
 * (DISCO_E_MISMATCH), not overlapping x
 * (DISCO_E_INVAL; allreduce into x itself and worker 0's broadcast into
 * its x are allowed). docs/tensors.md says which member fails when.
 *
 * Ordering. Worker 0 runs each command in the controller's thread before the
 * call returns, so:
 *  - disco_session_copy_to_worker0 (and _copy_into_worker0) has copied the
 *    bytes into the heap or onto worker 0's device when it returns (a device
 *    copy is synced before the call returns); the source may be reused at
 *    once.
 *  - disco_session_copy_from_worker0 reads worker 0's register as it is after
 *    every command sent before it; no sync is needed first (TVM's Disco needs
 *    one; disco does not). A device copy is complete (synced) when it
 *    returns. A function that queues device work on a stream of its own must
 *    sync it before it returns for this to hold: disco syncs only the
 *    streams it copies on.
 *
 * Supported dtypes: float16, bfloat16, float32, float64, int8/16/32/64,
 * uint8, bool (lanes 1); shapes up to DISCO_MAX_NDIM dimensions, compact
 * row-major (strides NULL or matching).
 */
#ifndef DISCO_TENSOR_H
#define DISCO_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "disco/func.h"
#include "disco/session.h"
#include "disco/status.h"
#include "disco/value.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_MAX_NDIM 8 /* dimensions a session tensor has at most */

/* The largest tensor, in bytes, that disco makes or copies (2^62): far
 * beyond any heap, small enough that sizes, offsets and headers added to it
 * never overflow 64 bits. */
#define DISCO_TENSOR_MAX_BYTES (UINT64_C(1) << 62)

/** A value holding a tensor (borrowed). Inline, and exported under the
 *  same name for FFIs, as the constructors in value.h. Thread-safe. */
DISCO__CTOR disco_value_t disco_value_tensor(DLTensor *t)
{
    disco_value_t x = disco__value_make(DISCO_T_TENSOR, 0);
    x.v.tensor = t;
    return x;
}

/** Elements of t (product of the shape; 1 for a scalar; 0 when a dimension
 *  is 0). INT64_MAX when the product overflows or a dimension is negative:
 *  disco never makes such a tensor (see disco_shape_nbytes). Thread-safe. */
int64_t disco_tensor_numel(const DLTensor *t);

/** Bytes of t's data, or 0 for an unsupported dtype. SIZE_MAX when the
 *  size overflows (as numel), so that no allocation of it succeeds and no
 *  copy of a wrapped size happens. Thread-safe. */
size_t disco_tensor_nbytes(const DLTensor *t);

/** Bytes of a compact tensor of this shape and dtype, with every product
 *  checked for overflow. The largest size accepted is
 *  DISCO_TENSOR_MAX_BYTES. Thread-safe. Returns DISCO_OK and *nbytes_out;
 *  DISCO_E_BAD_TYPE (unsupported dtype); DISCO_E_INVAL (ndim outside
 *  0..DISCO_MAX_NDIM, shape NULL with ndim > 0, a negative dimension);
 *  DISCO_E_OVERFLOW (the element count or the byte count overflows or
 *  exceeds DISCO_TENSOR_MAX_BYTES; the detail names the shape). */
disco_status_t disco_shape_nbytes(const int64_t *shape, int ndim, DLDataType dtype,
                                  size_t *nbytes_out);

/** Whether a and b have the same dtype and shape. */
bool disco_tensor_same_layout(const DLTensor *a, const DLTensor *b);

/** Whether t is compact row-major (strides NULL or equal to the compact ones). */
bool disco_tensor_is_compact(const DLTensor *t);

/** In a function: a new tensor in the session's shared heap, owned by this
 *  call until it is returned as the result (then by the result register) or
 *  the call ends. Returns DISCO_OK, DISCO_E_BAD_TYPE (unsupported dtype),
 *  DISCO_E_INVAL (ndim out of range, negative dimension),
 *  DISCO_E_OVERFLOW (the size overflows: see disco_shape_nbytes),
 *  DISCO_E_HEAP_EXHAUSTED (no room, or no session heap here). Nothing is
 *  allocated on failure. */
disco_status_t disco_ctx_empty(disco_ctx_t *ctx, const int64_t *shape, int ndim, DLDataType dtype,
                               DLTensor **tensor_out);

/** In a function: a new tensor on this worker's device of type device_type:
 *  kDLCPU as disco_ctx_empty; kDLCUDA or kDLExtDev (sim) on the worker's
 *  device (worker i: device i mod count, disco_device_of_worker), from the
 *  worker's device arena (made, exported once and published at its first
 *  device tensor). Owned by the call as disco_ctx_empty's; the function may
 *  return it as its result. Its bytes are uninitialized: write them with
 *  disco_device_copy and sync the stream before the function returns.
 *  Returns DISCO_OK; disco_ctx_empty's errors (kDLCPU); DISCO_E_INVAL (no
 *  session worker here, bad shape); DISCO_E_OVERFLOW; DISCO_E_NO_DEVICE (no
 *  such device, e.g. sim without DISCO_SIM_GPUS); DISCO_E_MISMATCH (this
 *  session already holds tensors of another device type); DISCO_E_NOMEM
 *  (the arena is full or cannot be made): each naming the worker and the
 *  device. Nothing is allocated on failure. */
disco_status_t disco_ctx_empty_device(disco_ctx_t *ctx, const int64_t *shape, int ndim,
                                      DLDataType dtype, DLDeviceType device_type,
                                      DLTensor **tensor_out);

/** A new tensor register: on every worker, or on worker 0 only (the others
 *  hold null). Contents are unspecified. The shape and dtype are checked
 *  before any command goes out. Returns as disco_session_call, plus
 *  DISCO_E_BAD_TYPE (unsupported dtype), DISCO_E_INVAL (ndim out of range,
 *  negative dimension), DISCO_E_OVERFLOW (the size overflows: see
 *  disco_shape_nbytes), DISCO_E_HEAP_EXHAUSTED: before anything is sent
 *  when the tensors (one per worker, or one) could never fit in the heap;
 *  from the call itself when worker 0 found no room (the register is then
 *  freed, and another worker's failure of the same call is reported at the
 *  next sync); at the next sync when only another worker found none. */
disco_status_t disco_session_empty(disco_session_t *sess, const int64_t *shape, int ndim,
                                   DLDataType dtype, bool worker0_only, disco_dref_t *reg_out);

/** As disco_session_empty, on device: kDLCPU is disco_session_empty; kDLCUDA
 *  or kDLExtDev (sim) makes each worker's tensor on its own device of that
 *  type, from its device arena (see the top of this file; device.device_id
 *  is not used). Returns as disco_session_empty, plus, before anything is
 *  sent, DISCO_E_NO_DEVICE (another device type) and DISCO_E_NOMEM (larger
 *  than a whole arena); from the call itself, worker 0's failure:
 *  DISCO_E_NO_DEVICE (no device: the detail names the worker and the
 *  device), DISCO_E_NOMEM (its arena cannot be allocated or is full),
 *  DISCO_E_MISMATCH (its arena is on another device type); at the next
 *  sync another worker's. */
disco_status_t disco_session_empty_device(disco_session_t *sess, const int64_t *shape, int ndim,
                                          DLDataType dtype, DLDevice device, bool worker0_only,
                                          disco_dref_t *reg_out);

/** Copies a host tensor (compact, CPU memory) into a new register on worker
 *  0 (null on the others). A tensor on a cuda or sim device instead is
 *  copied device to device into a new tensor on worker 0's device of that
 *  type (its arena). Returns DISCO_OK, DISCO_E_INVAL (not compact, not
 *  CPU, cuda or sim, negative dimension), DISCO_E_BAD_TYPE,
 *  DISCO_E_OVERFLOW (the size overflows: see disco_shape_nbytes),
 *  DISCO_E_HEAP_EXHAUSTED (naming the size), the device errors at the top
 *  of this file, DISCO_E_BROKEN, DISCO_E_SHUTDOWN; nothing is allocated on
 *  failure. */
disco_status_t disco_session_copy_to_worker0(disco_session_t *sess, const DLTensor *host,
                                             disco_dref_t *reg_out);

/** Copies worker 0's tensor register into host (compact, of the same dtype
 *  and shape, in CPU memory or on a device: host <-> device and device to
 *  device copies, synced before the call returns). Returns DISCO_OK,
 *  DISCO_E_BAD_REG (not a live register), DISCO_E_BAD_TYPE (the register
 *  holds no tensor), DISCO_E_MISMATCH (dtype or shape differ, naming both;
 *  or two different device types), DISCO_E_INVAL, the device copy's error
 *  (DISCO_E_NO_DEVICE, DISCO_E_SYS). */
disco_status_t disco_session_copy_from_worker0(disco_session_t *sess, disco_dref_t reg,
                                               DLTensor *host);

/** Copies src (as host of disco_session_copy_from_worker0) into worker 0's
 *  existing tensor register reg (on the heap or a device), synced before the
 *  call returns. Returns as disco_session_copy_from_worker0. */
disco_status_t disco_session_copy_into_worker0(disco_session_t *sess, const DLTensor *src,
                                               disco_dref_t reg);

/** The tensor in register reg on worker, seen from the controller's process
 *  as a DLManagedTensor: what a DLPack producer (the Python front) hands to
 *  NumPy or PyTorch. A tensor in the shared heap is a view, no copy: its
 *  data points at the heap bytes in this process's mapping, so writes by
 *  any worker (an in-place function, a collective writing into it) show
 *  through, and writes into it reach the worker's tensor. The view holds a
 *  reference to the heap block: the bytes stay allocated after the
 *  register is freed or overwritten, until the view's deleter runs. A
 *  device (cuda, sim) tensor is not host-readable: the view holds a host
 *  copy of its bytes instead (device kDLCPU either way). Call the deleter
 *  (view->deleter(view)) from the session's thread before
 *  disco_session_close, which unmaps the heap; after disco_session_shutdown
 *  is fine. For worker 0 it answers at once; for another worker it waits
 *  as debug get does (worker has executed every command sent before).
 *  Returns DISCO_OK; DISCO_E_BAD_TYPE (the register holds no tensor on that
 *  worker: its type named); DISCO_E_NOMEM; debug get's codes
 *  (DISCO_E_BAD_REG, DISCO_E_INVAL for no such worker, a worker's pending
 *  error, DISCO_E_WORKER_DIED, ...). */
disco_status_t disco_session_tensor_view(disco_session_t *sess, disco_dref_t reg, int worker,
                                         DLManagedTensor **view_out);

/** Whether view (from disco_session_tensor_view) holds a host copy of a
 *  device tensor rather than the tensor's own bytes: writes into a copy do
 *  not reach the worker (disco_session_debug_set with bytes fills a device
 *  tensor). Thread-safe. */
bool disco_tensor_view_is_copy(const DLManagedTensor *view);

#ifdef __cplusplus
}
#endif
#endif
