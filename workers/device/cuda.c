/* cuda.c - the CUDA calls: the device API for kDLCUDA, the CUDA IPC backend
 * of the bookkeeping in ipc.c, and IPC events.
 *
 * Built with the CUDA runtime API when DISCO_HAVE_CUDA is defined (the
 * Makefile does so when it finds the toolkit, and links the static runtime,
 * which loads the driver at run time). Without it, every function returns
 * DISCO_E_NO_DEVICE ("this build has no CUDA support"). The allreduce
 * kernels' launches are cuda_ar.c; the error mapping and the fork guard
 * shared by both, cuda_err.c. Tested only on a
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
#include "workers/device/cuda_impl.h"
#include "workers/device/event.h"
#include "workers/device/ipc.h"
#include "workers/device/share.h"
#include "workers/device/watch.h"

#ifdef DISCO_HAVE_CUDA

#include <cuda_runtime_api.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == DISCO_IPC_HANDLE_BYTES, "IPC memory handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == DISCO_IPC_HANDLE_BYTES, "IPC event handle size");

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
            return disco__cuda_fail(e, "cudaStreamQuery", device_id);
        disco_status_t st = disco__device_watch_check();
        if (st != DISCO_OK) {
            disco__cuda_ar_abort(stream);
            return disco_set_error(st, "cuda:%d: stream sync given up: %s", device_id,
                                   disco_last_error());
        }
        if (spins < 64) {
            sched_yield();
        } else {
            /* Waiting on: say so, and where a kernel waits (watch.h, ar_cuda.h). */
            disco__device_watch_waiting();
            disco__cuda_ar_mirror();
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
    return disco__cuda_none("cudaSetDevice");
}

static disco_status_t cuda_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    (void)device_id, (void)nbytes, (void)ptr_out;
    return disco__cuda_none("cudaMalloc");
}

static disco_status_t cuda_free(int device_id, void *ptr)
{
    (void)device_id, (void)ptr;
    return disco__cuda_none("cudaFree");
}

static disco_status_t cuda_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                                size_t nbytes, disco_stream_t stream)
{
    (void)dst, (void)dst_dev, (void)src, (void)src_dev, (void)nbytes, (void)stream;
    return disco__cuda_none("cudaMemcpyAsync");
}

static disco_status_t cuda_stream_create(int device_id, disco_stream_t *stream_out)
{
    (void)device_id, (void)stream_out;
    return disco__cuda_none("cudaStreamCreate");
}

static disco_status_t cuda_stream_free(int device_id, disco_stream_t stream)
{
    (void)device_id, (void)stream;
    return disco__cuda_none("cudaStreamDestroy");
}

static disco_status_t cuda_stream_sync(int device_id, disco_stream_t stream)
{
    (void)device_id, (void)stream;
    return disco__cuda_none("cudaStreamSynchronize");
}

static disco_status_t ipc_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
{
    (void)ctx, (void)base, (void)handle_out;
    return disco__cuda_none("cudaIpcGetMemHandle");
}

static disco_status_t ipc_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out)
{
    (void)ctx, (void)handle, (void)base_out;
    return disco__cuda_none("cudaIpcOpenMemHandle");
}

static disco_status_t ipc_close_handle(void *ctx, void *base)
{
    (void)ctx, (void)base;
    return disco__cuda_none("cudaIpcCloseMemHandle");
}

static disco_status_t event_create(int dev, void **impl_out)
{
    (void)dev, (void)impl_out;
    return disco__cuda_none("disco_device_event_create");
}

static disco_status_t event_import(int dev, const disco_ipc_handle_t *handle, void **impl_out)
{
    (void)dev, (void)handle, (void)impl_out;
    return disco__cuda_none("disco_device_event_import");
}

static disco_status_t event_export(int dev, void *impl, disco_ipc_handle_t *handle_out)
{
    (void)dev, (void)impl, (void)handle_out;
    return disco__cuda_none("disco_device_event_export");
}

static disco_status_t event_record(int dev, void *impl, disco_stream_t stream)
{
    (void)dev, (void)impl, (void)stream;
    return disco__cuda_none("disco_device_event_record");
}

static disco_status_t event_wait(int dev, disco_stream_t stream, void *impl)
{
    (void)dev, (void)stream, (void)impl;
    return disco__cuda_none("disco_device_stream_wait_event");
}

static disco_status_t event_sync(int dev, void *impl)
{
    (void)dev, (void)impl;
    return disco__cuda_none("disco_device_event_sync");
}

static disco_status_t event_query(int dev, void *impl)
{
    (void)dev, (void)impl;
    return disco__cuda_none("disco_device_event_query");
}

static void event_free(int dev, void *impl)
{
    (void)dev, (void)impl;
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
    .physical_id = disco__cuda_physical_id, /* cuda_share.c */
    .mps = disco__cuda_mps,
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
