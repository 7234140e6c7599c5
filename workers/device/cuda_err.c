/* cuda_err.c - what cuda.c and cuda_ar.c share (cuda_impl.h): a failed
 * CUDA call as a disco status, the guard that refuses CUDA in a process
 * forked after its parent used it, and the no-CUDA build's answer. */
#include <stdatomic.h>
#include <unistd.h>

#include "workers/device/cuda_impl.h"
#include "workers/device/fork_rule.h"

#ifdef DISCO_HAVE_CUDA

/* Records a failed CUDA call and returns its status. "No GPU" errors map to
 * DISCO_E_NO_DEVICE with a detail starting "no CUDA device: ". */
disco_status_t disco__cuda_fail(cudaError_t e, const char *call, int device_id)
{
    (void)cudaGetLastError(); /* clears a non-sticky error */
    switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorInvalidDevice:
        return disco_set_error(DISCO_E_NO_DEVICE, "no CUDA device: %s (device %d): %s", call,
                               device_id, cudaGetErrorString(e));
    case cudaErrorMemoryAllocation:
        return disco_set_error(DISCO_E_NOMEM, "%s (device %d): %s", call, device_id,
                               cudaGetErrorString(e));
    default:
        return disco_set_error(DISCO_E_SYS, "%s (device %d): %s (%s)", call, device_id,
                               cudaGetErrorString(e), cudaGetErrorName(e));
    }
}

/* The process that first called CUDA (0: none yet). CUDA does not survive
 * fork: a child of a process that had called it cannot use it, and its
 * calls would fail with an initialization error that does not say why. */
static _Atomic int g_cuda_pid;

/* Refuses CUDA in a process forked after its parent had called CUDA. */
disco_status_t disco__cuda_fork_guard(const char *fn)
{
    int me = (int)getpid(), first = 0;
    /* Relaxed: only which process called first matters; nothing is
     * published through the word. A forked child sees its parent's pid. */
    if (atomic_compare_exchange_strong_explicit(&g_cuda_pid, &first, me, memory_order_relaxed,
                                                memory_order_relaxed) ||
        first == me)
        return DISCO_OK;
    return disco_set_error(DISCO_E_NO_DEVICE,
                           "no CUDA device: %s: this process was forked from pid %d after that "
                           "process had called CUDA, which does not survive fork (launch "
                           "workers with DISCO_LAUNCH_SPAWN, or open the session before any "
                           "CUDA call)",
                           fn, first);
}

bool disco__cuda_called_here(void)
{
    /* Relaxed, as the guard: only which process called first matters. */
    return atomic_load_explicit(&g_cuda_pid, memory_order_relaxed) == (int)getpid();
}

#else /* !DISCO_HAVE_CUDA */

bool disco__cuda_called_here(void)
{
    return false;
}

disco_status_t disco__cuda_none(const char *fn)
{
    return disco_set_error(DISCO_E_NO_DEVICE, "%s: " NO_CUDA_MSG, fn);
}

#endif /* DISCO_HAVE_CUDA */
