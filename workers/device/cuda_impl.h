/* cuda_impl.h - what the CUDA files share (internal): cuda.c (the device
 * API), cuda_ar.c (the allreduce kernels' launches) and cuda_err.c (these
 * helpers). Arrows: cuda.c -> cuda_ar.c -> cuda_err.c, cuda.c -> cuda_err.c. */
#ifndef DISCO_WORKERS_DEVICE_CUDA_IMPL_H
#define DISCO_WORKERS_DEVICE_CUDA_IMPL_H

#include "disco/device.h"
#include "disco/status.h"

#ifdef DISCO_HAVE_CUDA
#include <cuda_runtime_api.h>

/** Records a failed CUDA call and returns its status. "No GPU" errors map
 *  to DISCO_E_NO_DEVICE with a detail starting "no CUDA device: ";
 *  allocation failures to DISCO_E_NOMEM; the rest to DISCO_E_SYS. Clears
 *  a non-sticky error. */
disco_status_t disco__cuda_fail(cudaError_t e, const char *call, int device_id);

/** DISCO_OK, or DISCO_E_NO_DEVICE in a process forked after its parent
 *  had called CUDA (fn names the caller). The first caller's process is
 *  remembered. Thread-safe. */
disco_status_t disco__cuda_fork_guard(const char *fn);

#define CU(call, dev)                                                                              \
    do {                                                                                           \
        cudaError_t cu_e_ = (call);                                                                \
        if (cu_e_ != cudaSuccess)                                                                  \
            return disco__cuda_fail(cu_e_, #call, (dev));                                          \
    } while (0)

#define GUARD()                                                                                    \
    do {                                                                                           \
        disco_status_t guard_st_ = disco__cuda_fork_guard(__func__);                               \
        if (guard_st_ != DISCO_OK)                                                                 \
            return guard_st_;                                                                      \
    } while (0)
#else
#define NO_CUDA_MSG "no CUDA device: this build has no CUDA support (built without CUDA)"

/** DISCO_E_NO_DEVICE: "fn: no CUDA device: this build has no CUDA
 *  support". */
disco_status_t disco__cuda_none(const char *fn);
#endif

/** A watched sync gave up on stream: stops an allreduce kernel that may
 *  spin on it and gives the stream up to a second to drain (cuda_ar.c).
 *  Leaves the caller's error detail alone. A no-op without CUDA or before
 *  any launch. */
void disco__cuda_ar_abort(disco_stream_t stream);

/** A sync of this thread polls on: copies the piece words of the
 *  allreduce kernel it launched last into that kernel's progress record
 *  (ar_cuda.h, ar_progress.h), for the watchdog and `disco top`. Cheap (16
 *  loads and stores); a no-op without CUDA or with no kernel in flight. */
void disco__cuda_ar_mirror(void);

#endif
