/* cuda.c - the CUDA calls: the device API for kDLCUDA, the CUDA IPC backend
 * of the bookkeeping in ipc.c, and IPC events.
 *
 * Built with the CUDA runtime API when DISCO_HAVE_CUDA is defined (the
 * Makefile does so when it finds the toolkit, and links the static runtime,
 * which loads the driver at run time). Without it, every function returns
 * DISCO_E_NO_DEVICE ("this build has no CUDA support"). It also launches
 * the allreduce kernels of ar.h (ar_cuda.cu, through ar_cuda.h) and reads
 * their verdict. Tested only on a
 * machine with a GPU (tests/test_cuda.c); everything else about IPC is in
 * ipc.c and ipc_table.c, tested everywhere. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "disco/device.h"
#include "workers/device/ar_cuda.h"
#include "workers/device/event.h"
#include "workers/device/ipc.h"
#include "workers/device/watch.h"

#ifdef DISCO_HAVE_CUDA

#include <cuda_runtime_api.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == DISCO_IPC_HANDLE_BYTES, "IPC memory handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == DISCO_IPC_HANDLE_BYTES, "IPC event handle size");

/* Records a failed CUDA call and returns its status. "No GPU" errors map to
 * DISCO_E_NO_DEVICE with a detail starting "no CUDA device: ". */
static disco_status_t fail(cudaError_t e, const char *call, int device_id)
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

#define CU(call, dev)                                                                              \
    do {                                                                                           \
        cudaError_t cu_e_ = (call);                                                                \
        if (cu_e_ != cudaSuccess)                                                                  \
            return fail(cu_e_, #call, (dev));                                                      \
    } while (0)

/* The process that first called CUDA (0: none yet). CUDA does not survive
 * fork: a child of a process that had called it cannot use it, and its
 * calls would fail with an initialization error that does not say why. */
static _Atomic int g_cuda_pid;

/* Refuses CUDA in a process forked after its parent had called CUDA. */
static disco_status_t fork_guard(const char *fn)
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

#define GUARD()                                                                                    \
    do {                                                                                           \
        disco_status_t guard_st_ = fork_guard(__func__);                                           \
        if (guard_st_ != DISCO_OK)                                                                 \
            return guard_st_;                                                                      \
    } while (0)

bool disco_device_has_cuda(void)
{
    return true;
}

static disco_status_t cuda_count(int *count_out)
{
    GUARD();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return disco_set_error(e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
                                       e == cudaErrorStubLibrary
                                   ? DISCO_E_NO_DEVICE
                                   : DISCO_E_SYS,
                               "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    }
    if (n < 1)
        return disco_set_error(DISCO_E_NO_DEVICE, "no CUDA device: cudaGetDeviceCount found none");
    *count_out = n;
    return DISCO_OK;
}

static disco_status_t cuda_set_device(int device_id)
{
    GUARD();
    CU(cudaSetDevice(device_id), device_id);
    return DISCO_OK;
}

static disco_status_t cuda_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    GUARD();
    void *p = NULL;
    CU(cudaSetDevice(device_id), device_id);
    CU(cudaMalloc(&p, nbytes), device_id);
    *ptr_out = p;
    return DISCO_OK;
}

static disco_status_t cuda_free(int device_id, void *ptr)
{
    GUARD();
    CU(cudaSetDevice(device_id), device_id);
    CU(cudaFree(ptr), device_id);
    return DISCO_OK;
}

static disco_status_t cuda_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                                size_t nbytes, disco_stream_t stream)
{
    GUARD();
    int dev = dst_dev.device_type == kDLCUDA ? dst_dev.device_id : src_dev.device_id;
    CU(cudaSetDevice(dev), dev);
    /* cudaMemcpyDefault: unified addressing tells host from device. */
    CU(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, (cudaStream_t)stream), dev);
    return DISCO_OK;
}

static disco_status_t cuda_stream_create(int device_id, disco_stream_t *stream_out)
{
    GUARD();
    cudaStream_t s;
    CU(cudaSetDevice(device_id), device_id);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), device_id);
    *stream_out = (disco_stream_t)s;
    return DISCO_OK;
}

static disco_status_t cuda_stream_free(int device_id, disco_stream_t stream)
{
    GUARD();
    if (stream == NULL)
        return DISCO_OK;
    CU(cudaSetDevice(device_id), device_id);
    CU(cudaStreamDestroy((cudaStream_t)stream), device_id);
    return DISCO_OK;
}

/* ---- allreduce kernels (ar.h, ar_cuda.h) --------------------------------
 * The process's abort and err words live in mapped, pinned host memory,
 * allocated at the first launch and kept for the life of the process.
 * g_ar_lock serializes the launches (the allocation, the zeroing, the launch
 * itself: ar_cuda.cu is compiled without thread-safe statics, so the
 * lazily initialized kernel handles of its launch stubs rely on this lock).
 * Fork: every function here passes GUARD() first, and a thread that holds
 * the lock has called CUDA, so a child forked meanwhile is refused before it
 * could touch the lock or the words. */

struct ar_words {
    uint32_t abort_w; /* host -> kernel: stop spinning (nonzero) */
    uint32_t err;     /* kernel -> host: why a wait gave up (0: it did not) */
};

static pthread_mutex_t g_ar_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set once, under g_ar_lock. W1: the release store publishes the zeroed
 * words; pairs with the acquire loads W2 (the sync's abort, the check). */
static struct ar_words *_Atomic g_ar_words;

static disco_status_t ar_launch_locked(int device_id, disco_stream_t stream,
                                       const struct disco__ar_job *job)
{
    /* Relaxed: only this lock's holders store the pointer. */
    struct ar_words *w = atomic_load_explicit(&g_ar_words, memory_order_relaxed);
    if (w == NULL) {
        void *p = NULL;
        /* Portable: mapped into every device's context, not only this one. */
        CU(cudaHostAlloc(&p, sizeof *w, cudaHostAllocMapped | cudaHostAllocPortable), device_id);
        w = p;
        w->abort_w = 0;
        w->err = 0;
        atomic_store_explicit(&g_ar_words, w, memory_order_release); /* W1 */
    }
    void *dev = NULL;
    CU(cudaHostGetDevicePointer(&dev, w, 0), device_id);
    /* Relaxed: the launch below orders these stores before the kernel's
     * reads (host writes to pinned memory made before a launch are visible
     * to the kernel, as for any zero-copy input), and the previous kernel
     * is done: its call was synced. */
    __atomic_store_n(&w->abort_w, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->err, 0, __ATOMIC_RELAXED);
    int e = disco__cuda_ar_kernel(
        job, stream, (volatile uint32_t *)((char *)dev + offsetof(struct ar_words, abort_w)),
        (uint32_t *)((char *)dev + offsetof(struct ar_words, err)));
    if (e != 0)
        return fail((cudaError_t)e, "disco__cuda_ar_kernel", device_id);
    return DISCO_OK;
}

disco_status_t disco__cuda_ar_launch(int device_id, disco_stream_t stream,
                                     const struct disco__ar_job *job)
{
    GUARD();
    CU(cudaSetDevice(device_id), device_id);
    pthread_mutex_lock(&g_ar_lock);
    disco_status_t st = ar_launch_locked(device_id, stream, job);
    pthread_mutex_unlock(&g_ar_lock);
    return st;
}

disco_status_t disco__cuda_ar_check(int device_id)
{
    static const char *const phases[DISCO_AR_PHASES] = {"START", "MID", "END"};
    GUARD();
    struct ar_words *w = atomic_load_explicit(&g_ar_words, memory_order_acquire); /* W2 */
    /* Relaxed: the sync that completed the kernel made its writes to host
     * memory visible before it returned; nothing else writes the word. */
    uint32_t e = w != NULL ? __atomic_load_n(&w->err, __ATOMIC_RELAXED) : 0;
    if (e == 0)
        return DISCO_OK;
    unsigned phase = DISCO_AR_ERR_PHASE(e), piece = DISCO_AR_ERR_PIECE(e);
    unsigned member = DISCO_AR_ERR_MEMBER(e);
    const char *name = phase < DISCO_AR_PHASES ? phases[phase] : "?";
    switch (DISCO_AR_ERR_KIND(e)) {
    case DISCO_AR_ERR_TIMEOUT:
        return disco_set_error(DISCO_E_TIMEOUT,
                               "allreduce kernel on cuda:%d: piece %u waited for member %u at %s "
                               "past its time budget",
                               device_id, piece, member, name);
    case DISCO_AR_ERR_ABORTED:
        return disco_set_error(DISCO_E_BROKEN,
                               "allreduce kernel on cuda:%d: piece %u waited for member %u at %s: "
                               "aborted by the host",
                               device_id, piece, member, name);
    default:
        return disco_set_error(DISCO_E_SYS, "allreduce kernel on cuda:%d: unknown error word %#x",
                               device_id, (unsigned)e);
    }
}

/* A watched sync gave up: stops an allreduce kernel that may spin on the
 * stream, and gives the stream up to a second to drain, so that the kernel
 * no longer touches buffers the caller may now release. Leaves the caller's
 * error detail alone. Nothing to do where no allreduce kernel was launched. */
static void ar_abort(disco_stream_t stream)
{
    struct ar_words *w = atomic_load_explicit(&g_ar_words, memory_order_acquire); /* W2 */
    if (w == NULL)
        return;
    /* Relaxed: the word publishes nothing; the kernel only needs to see it
     * eventually, and its volatile read goes to host memory each time. */
    __atomic_store_n(&w->abort_w, 1, __ATOMIC_RELAXED);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
        if (e != cudaErrorNotReady) {
            if (e != cudaSuccess)
                (void)cudaGetLastError(); /* clears a non-sticky error */
            return;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000000000LL + (now.tv_nsec - t0.tv_nsec) >= 1000000000LL)
            return;
        struct timespec ts = {0, 20 * 1000};
        nanosleep(&ts, NULL);
    }
}

static disco_status_t cuda_stream_sync(int device_id, disco_stream_t stream)
{
    GUARD();
    CU(cudaSetDevice(device_id), device_id);
    if (disco__device_watching() == NULL) {
        CU(cudaStreamSynchronize((cudaStream_t)stream), device_id);
        return DISCO_OK;
    }
    /* Watched (watch.h): poll, and look at the watch between polls. */
    for (unsigned spins = 0;; spins++) {
        cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
        if (e == cudaSuccess)
            return DISCO_OK;
        if (e != cudaErrorNotReady)
            return fail(e, "cudaStreamQuery", device_id);
        disco_status_t st = disco__device_watch_check();
        if (st != DISCO_OK) {
            ar_abort(stream);
            return disco_set_error(st, "cuda:%d: stream sync given up: %s", device_id,
                                   disco_last_error());
        }
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

/* ---- IPC backend --------------------------------------------------------- */

static disco_status_t ipc_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
{
    GUARD();
    (void)ctx;
    cudaIpcMemHandle_t h;
    CU(cudaIpcGetMemHandle(&h, base), -1);
    memcpy(handle_out->bytes, &h, sizeof h);
    return DISCO_OK;
}

static disco_status_t ipc_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out)
{
    GUARD();
    (void)ctx;
    cudaIpcMemHandle_t h;
    memcpy(&h, handle->bytes, sizeof h);
    void *p = NULL;
    int dev = -1;
    (void)cudaGetDevice(&dev);
    /* Opens on the current device; peer access is enabled when the
     * exporter's GPU is another one. */
    CU(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), dev);
    *base_out = p;
    return DISCO_OK;
}

static disco_status_t ipc_close_handle(void *ctx, void *base)
{
    GUARD();
    (void)ctx;
    CU(cudaIpcCloseMemHandle(base), -1);
    return DISCO_OK;
}

/* ---- events ------------------------------------------------------------- */

/* An event's impl is its cudaEvent_t. */
static disco_status_t event_create(int dev, void **impl_out)
{
    GUARD();
    cudaEvent_t e;
    CU(cudaSetDevice(dev), dev);
    CU(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming), dev);
    *impl_out = (void *)e;
    return DISCO_OK;
}

static disco_status_t event_import(int dev, const disco_ipc_handle_t *handle, void **impl_out)
{
    GUARD();
    cudaIpcEventHandle_t h;
    cudaEvent_t e;
    memcpy(&h, handle->bytes, sizeof h);
    CU(cudaSetDevice(dev), dev);
    CU(cudaIpcOpenEventHandle(&e, h), dev);
    *impl_out = (void *)e;
    return DISCO_OK;
}

static disco_status_t event_export(int dev, void *impl, disco_ipc_handle_t *handle_out)
{
    GUARD();
    cudaIpcEventHandle_t h;
    CU(cudaIpcGetEventHandle(&h, (cudaEvent_t)impl), dev);
    memcpy(handle_out->bytes, &h, sizeof h);
    return DISCO_OK;
}

static disco_status_t event_record(int dev, void *impl, disco_stream_t stream)
{
    GUARD();
    CU(cudaSetDevice(dev), dev);
    CU(cudaEventRecord((cudaEvent_t)impl, (cudaStream_t)stream), dev);
    return DISCO_OK;
}

static disco_status_t event_wait(int dev, disco_stream_t stream, void *impl)
{
    GUARD();
    CU(cudaSetDevice(dev), dev);
    CU(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)impl, 0), dev);
    return DISCO_OK;
}

static disco_status_t event_sync(int dev, void *impl)
{
    GUARD();
    CU(cudaEventSynchronize((cudaEvent_t)impl), dev);
    return DISCO_OK;
}

static disco_status_t event_query(int dev, void *impl)
{
    GUARD();
    cudaError_t e = cudaEventQuery((cudaEvent_t)impl);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return DISCO_E_AGAIN;
    }
    CU(e, dev);
    return DISCO_OK;
}

static void event_free(int dev, void *impl)
{
    (void)cudaSetDevice(dev);
    (void)cudaEventDestroy((cudaEvent_t)impl);
}

#else /* !DISCO_HAVE_CUDA */

#define NO_CUDA_MSG "no CUDA device: this build has no CUDA support (built without CUDA)"

static disco_status_t no_cuda(const char *fn)
{
    return disco_set_error(DISCO_E_NO_DEVICE, "%s: " NO_CUDA_MSG, fn);
}

bool disco_device_has_cuda(void)
{
    return false;
}

static disco_status_t cuda_count(int *count_out)
{
    (void)count_out;
    /* Exactly the documented message: callers print it as a skip reason. */
    return disco_set_error(DISCO_E_NO_DEVICE, NO_CUDA_MSG);
}

static disco_status_t cuda_set_device(int device_id)
{
    (void)device_id;
    return no_cuda("cudaSetDevice");
}

static disco_status_t cuda_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    (void)device_id, (void)nbytes, (void)ptr_out;
    return no_cuda("cudaMalloc");
}

static disco_status_t cuda_free(int device_id, void *ptr)
{
    (void)device_id, (void)ptr;
    return no_cuda("cudaFree");
}

static disco_status_t cuda_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                                size_t nbytes, disco_stream_t stream)
{
    (void)dst, (void)dst_dev, (void)src, (void)src_dev, (void)nbytes, (void)stream;
    return no_cuda("cudaMemcpyAsync");
}

static disco_status_t cuda_stream_create(int device_id, disco_stream_t *stream_out)
{
    (void)device_id, (void)stream_out;
    return no_cuda("cudaStreamCreate");
}

static disco_status_t cuda_stream_free(int device_id, disco_stream_t stream)
{
    (void)device_id, (void)stream;
    return no_cuda("cudaStreamDestroy");
}

static disco_status_t cuda_stream_sync(int device_id, disco_stream_t stream)
{
    (void)device_id, (void)stream;
    return no_cuda("cudaStreamSynchronize");
}

static disco_status_t ipc_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
{
    (void)ctx, (void)base, (void)handle_out;
    return no_cuda("cudaIpcGetMemHandle");
}

static disco_status_t ipc_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out)
{
    (void)ctx, (void)handle, (void)base_out;
    return no_cuda("cudaIpcOpenMemHandle");
}

static disco_status_t ipc_close_handle(void *ctx, void *base)
{
    (void)ctx, (void)base;
    return no_cuda("cudaIpcCloseMemHandle");
}

static disco_status_t event_create(int dev, void **impl_out)
{
    (void)dev, (void)impl_out;
    return no_cuda("disco_device_event_create");
}

static disco_status_t event_import(int dev, const disco_ipc_handle_t *handle, void **impl_out)
{
    (void)dev, (void)handle, (void)impl_out;
    return no_cuda("disco_device_event_import");
}

static disco_status_t event_export(int dev, void *impl, disco_ipc_handle_t *handle_out)
{
    (void)dev, (void)impl, (void)handle_out;
    return no_cuda("disco_device_event_export");
}

static disco_status_t event_record(int dev, void *impl, disco_stream_t stream)
{
    (void)dev, (void)impl, (void)stream;
    return no_cuda("disco_device_event_record");
}

static disco_status_t event_wait(int dev, disco_stream_t stream, void *impl)
{
    (void)dev, (void)stream, (void)impl;
    return no_cuda("disco_device_stream_wait_event");
}

static disco_status_t event_sync(int dev, void *impl)
{
    (void)dev, (void)impl;
    return no_cuda("disco_device_event_sync");
}

static disco_status_t event_query(int dev, void *impl)
{
    (void)dev, (void)impl;
    return no_cuda("disco_device_event_query");
}

static void event_free(int dev, void *impl)
{
    (void)dev, (void)impl;
}

disco_status_t disco__cuda_ar_launch(int device_id, disco_stream_t stream,
                                     const struct disco__ar_job *job)
{
    (void)device_id, (void)stream, (void)job;
    return no_cuda("disco__cuda_ar_launch");
}

disco_status_t disco__cuda_ar_check(int device_id)
{
    (void)device_id;
    return no_cuda("disco__cuda_ar_check");
}

#endif /* DISCO_HAVE_CUDA */

const disco_device_api_t disco__cuda_api = {
    .type = kDLCUDA,
    .name = "cuda",
    .count = cuda_count,
    .set_device = cuda_set_device,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .stream_create = cuda_stream_create,
    .stream_free = cuda_stream_free,
    .stream_sync = cuda_stream_sync,
};

const disco_ipc_backend_t disco__cuda_ipc_backend = {
    .ctx = NULL,
    .get_handle = ipc_get_handle,
    .open_handle = ipc_open_handle,
    .close_handle = ipc_close_handle,
};

const disco__event_ops_t disco__cuda_event_ops = {
    .create = event_create,
    .import = event_import,
    .export = event_export,
    .record = event_record,
    .wait = event_wait,
    .sync = event_sync,
    .query = event_query,
    .free = event_free,
};
