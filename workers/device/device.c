/* device.c - the device API: dispatch by device type, the CPU device, and
 * the process's IPC context (ipc.c over a backend that sends each call to
 * the device type of the memory: sim memory to sim.c, the rest to cuda.c). */
#include "disco/device.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workers/device/fork_rule.h"
#include "workers/device/ipc.h"
#include "workers/device/ipc_table.h"
#include "workers/device/sim.h"

/* ---- CPU ------------------------------------------------------------------ */

static disco_status_t cpu_count(int *count_out)
{
    *count_out = 1;
    return DISCO_OK;
}

static disco_status_t cpu_set_device(int device_id)
{
    if (device_id != 0)
        return disco_set_error(DISCO_E_NO_DEVICE, "cpu: no device %d (only 0)", device_id);
    return DISCO_OK;
}

static disco_status_t cpu_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    (void)device_id;
    void *p = NULL;
    int err = posix_memalign(&p, 64, nbytes);
    if (err != 0)
        return disco_set_error(DISCO_E_NOMEM, "cpu: posix_memalign(64, %zu) failed", nbytes);
    *ptr_out = p;
    return DISCO_OK;
}

static disco_status_t cpu_free(int device_id, void *ptr)
{
    (void)device_id;
    free(ptr);
    return DISCO_OK;
}

static disco_status_t cpu_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                               size_t nbytes, disco_stream_t stream)
{
    (void)dst_dev, (void)src_dev, (void)stream;
    memmove(dst, src, nbytes);
    return DISCO_OK;
}

static disco_status_t cpu_stream_create(int device_id, disco_stream_t *stream_out)
{
    (void)device_id;
    *stream_out = NULL;
    return DISCO_OK;
}

static disco_status_t cpu_stream_nop(int device_id, disco_stream_t stream)
{
    (void)device_id, (void)stream;
    return DISCO_OK;
}

static disco_status_t cpu_physical_id(int device_id, disco_device_uid_t *id_out)
{
    if (device_id != 0)
        return disco_set_error(DISCO_E_NO_DEVICE, "cpu: no device %d (only 0)", device_id);
    memset(id_out, 0, sizeof *id_out);
    memcpy(id_out->bytes, "cpu", 3);
    return DISCO_OK;
}

static disco_status_t cpu_mps(int device_id, bool *on_out)
{
    (void)device_id;
    *on_out = true; /* no kernels: nothing waits for a context */
    return DISCO_OK;
}

static const disco_device_api_t cpu_api = {
    .type = kDLCPU,
    .name = "cpu",
    .count = cpu_count,
    .set_device = cpu_set_device,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .stream_create = cpu_stream_create,
    .stream_free = cpu_stream_nop,
    .stream_sync = cpu_stream_nop,
    .physical_id = cpu_physical_id,
    .mps = cpu_mps,
};

/* ---- the IPC backend, per device type --------------------------------------- */

/* Sim memory and sim handles are known to sim.c (its region table, its
 * handle magic); everything else is CUDA's. */
static disco_status_t any_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
{
    if (disco__sim_owns(base))
        return disco__sim_get_handle(ctx, base, handle_out);
    return disco__cuda_ipc_backend.get_handle(disco__cuda_ipc_backend.ctx, base, handle_out);
}

static disco_status_t any_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out)
{
    if (disco__sim_is_handle(handle))
        return disco__sim_open_handle(ctx, handle, base_out);
    return disco__cuda_ipc_backend.open_handle(disco__cuda_ipc_backend.ctx, handle, base_out);
}

static disco_status_t any_close_handle(void *ctx, void *base)
{
    if (disco__sim_owns(base))
        return disco__sim_close_handle(ctx, base);
    return disco__cuda_ipc_backend.close_handle(disco__cuda_ipc_backend.ctx, base);
}

static const disco_ipc_backend_t any_backend = {
    .ctx = NULL,
    .get_handle = any_get_handle,
    .open_handle = any_open_handle,
    .close_handle = any_close_handle,
};

/* ---- the process's IPC context ------------------------------------------------ */

/* One context per process. A child forked from a process that had one
 * discards the inherited copy (its handles are the parent's) and makes its
 * own; the table mapping is inherited and stays attached. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static disco_ipc_t *g_ipc;
static pid_t g_pid;
static disco_ipc_table_t *g_table;

static disco_status_t ipc_ctx(disco_ipc_t **ipc_out)
{
    disco_status_t st = DISCO_OK;
    pthread_mutex_lock(&g_lock);
    pid_t me = getpid();
    if (g_ipc != NULL && g_pid != me) {
        disco__ipc_discard(g_ipc);
        g_ipc = NULL;
    }
    if (g_ipc == NULL) {
        st = disco__ipc_create(&any_backend, g_table, &g_ipc);
        g_pid = me;
    }
    if (st == DISCO_OK)
        *ipc_out = g_ipc;
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* Makes t (a new handle, taken) the process's table. A handle on the same
 * table with the same count is kept instead (the context may be using it);
 * a replaced handle is released once the context no longer refers to it. */
static disco_status_t set_table(disco_ipc_table_t *t, void *mem, uint32_t nslots)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    if (st != DISCO_OK) {
        disco__ipc_table_release(t);
        return st;
    }
    pthread_mutex_lock(&g_lock);
    if (disco__ipc_table_is(g_table, mem, nslots)) {
        disco__ipc_table_release(t);
        st = disco__ipc_set_table(ipc, g_table);
    } else if ((st = disco__ipc_set_table(ipc, t)) == DISCO_OK) {
        disco__ipc_table_release(g_table);
        g_table = t;
    } else {
        disco__ipc_table_release(t);
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* ---- CUDA, with the IPC bookkeeping ---------------------------------------- */

/* Allocates with api and records the allocation in the IPC context. */
static disco_status_t ipc_alloc(const disco_device_api_t *api, int device_id, size_t nbytes,
                                void **ptr_out)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    void *p = NULL;
    if (st == DISCO_OK)
        st = api->alloc(device_id, nbytes, &p);
    if (st != DISCO_OK)
        return st;
    st = disco__ipc_add(ipc, p, nbytes, device_id);
    if (st != DISCO_OK) {
        api->free(device_id, p);
        return st;
    }
    *ptr_out = p;
    return DISCO_OK;
}

/* Forgets the allocation (refused while imported elsewhere), then frees. */
static disco_status_t ipc_free(const disco_device_api_t *api, int device_id, void *ptr)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    int dev = -1;
    if (st == DISCO_OK)
        st = disco__ipc_find(ipc, ptr, NULL, NULL, &dev);
    if (st == DISCO_OK && dev != device_id)
        st = disco_set_error(DISCO_E_INVAL, "disco_device_free: %s:%d: %p was allocated on %s:%d",
                             api->name, device_id, ptr, api->name, dev);
    if (st == DISCO_OK)
        st = disco__ipc_remove(ipc, ptr); /* refuses while imported elsewhere */
    if (st != DISCO_OK)
        return st;
    return api->free(device_id, ptr);
}

static disco_status_t cuda_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    return ipc_alloc(&disco__cuda_api, device_id, nbytes, ptr_out);
}

static disco_status_t cuda_free(int device_id, void *ptr)
{
    return ipc_free(&disco__cuda_api, device_id, ptr);
}

static disco_status_t sim_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    return ipc_alloc(&disco__sim_api, device_id, nbytes, ptr_out);
}

static disco_status_t sim_free(int device_id, void *ptr)
{
    return ipc_free(&disco__sim_api, device_id, ptr);
}

/* The CUDA and sim tables as callers see them: the device's own table with
 * alloc and free wrapped by the IPC bookkeeping; the rest pass straight
 * through. Built once (pthread_once, in disco_device_api_get: reach them
 * only through it), since a static initializer cannot copy another
 * translation unit's table. */
static disco_device_api_t cuda_ipc_api, sim_ipc_api;
static pthread_once_t ipc_api_once = PTHREAD_ONCE_INIT;

static void make_ipc_apis(void)
{
    cuda_ipc_api = disco__cuda_api;
    cuda_ipc_api.alloc = cuda_alloc;
    cuda_ipc_api.free = cuda_free;
    sim_ipc_api = disco__sim_api;
    sim_ipc_api.alloc = sim_alloc;
    sim_ipc_api.free = sim_free;
}

/* ---- dispatch -------------------------------------------------------------- */

disco_status_t disco_device_api_get(DLDeviceType type, const disco_device_api_t **api_out)
{
    switch (type) {
    case kDLCPU:
        *api_out = &cpu_api;
        return DISCO_OK;
    case kDLCUDA:
        pthread_once(&ipc_api_once, make_ipc_apis);
        *api_out = &cuda_ipc_api;
        return DISCO_OK;
    case kDLExtDev:
        pthread_once(&ipc_api_once, make_ipc_apis);
        *api_out = &sim_ipc_api;
        return DISCO_OK;
    default:
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "device type %d is not supported (cpu, cuda, sim = ext_dev)",
                               (int)type);
    }
}

disco_status_t disco_device_count(DLDeviceType type, int *count_out)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(type, &api);
    return st != DISCO_OK ? st : api->count(count_out);
}

disco_status_t disco_device_of_worker(DLDeviceType type, int worker_id, DLDevice *dev_out)
{
    if (worker_id < 0)
        return disco_set_error(DISCO_E_INVAL, "disco_device_of_worker: worker %d", worker_id);
    int n = 0;
    disco_status_t st = disco_device_count(type, &n);
    if (st != DISCO_OK)
        return st;
    *dev_out = (DLDevice){type, disco_device_for_worker(worker_id, n)};
    return DISCO_OK;
}

disco_status_t disco_device_set(DLDevice dev)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    return st != DISCO_OK ? st : api->set_device(dev.device_id);
}

disco_status_t disco_device_alloc(DLDevice dev, size_t nbytes, void **ptr_out)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    if (st != DISCO_OK)
        return st;
    if (nbytes == 0 || ptr_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_device_alloc: %zu bytes on %s:%d", nbytes,
                               api->name, dev.device_id);
    return api->alloc(dev.device_id, nbytes, ptr_out);
}

disco_status_t disco_device_free(DLDevice dev, void *ptr)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    if (st != DISCO_OK || ptr == NULL)
        return st;
    return api->free(dev.device_id, ptr);
}

disco_status_t disco_device_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                                 size_t nbytes, disco_stream_t stream)
{
    DLDeviceType dt = dst_dev.device_type, sty = src_dev.device_type;
    bool dst_ok = dt == kDLCPU || dt == kDLCUDA || dt == kDLExtDev;
    bool src_ok = sty == kDLCPU || sty == kDLCUDA || sty == kDLExtDev;
    bool mixed = (dt == kDLCUDA && sty == kDLExtDev) || (dt == kDLExtDev && sty == kDLCUDA);
    if (!dst_ok || !src_ok || mixed)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "disco_device_copy: device types %d -> %d: cpu, cuda and sim, not "
                               "cuda with sim",
                               (int)sty, (int)dt);
    if (nbytes == 0)
        return DISCO_OK;
    if (dst == NULL || src == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_device_copy: %zu bytes from %p to %p", nbytes,
                               src, dst);
    DLDeviceType type = dt == kDLCUDA || sty == kDLCUDA       ? kDLCUDA
                        : dt == kDLExtDev || sty == kDLExtDev ? kDLExtDev
                                                              : kDLCPU;
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(type, &api); /* builds the tables once */
    return st != DISCO_OK ? st : api->copy(dst, dst_dev, src, src_dev, nbytes, stream);
}

disco_status_t disco_device_stream_create(DLDevice dev, disco_stream_t *stream_out)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    return st != DISCO_OK ? st : api->stream_create(dev.device_id, stream_out);
}

disco_status_t disco_device_stream_free(DLDevice dev, disco_stream_t stream)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    return st != DISCO_OK ? st : api->stream_free(dev.device_id, stream);
}

disco_status_t disco_device_stream_sync(DLDevice dev, disco_stream_t stream)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    return st != DISCO_OK ? st : api->stream_sync(dev.device_id, stream);
}

/* ---- CUDA IPC -------------------------------------------------------------- */

size_t disco_device_ipc_footprint(uint32_t max_exports)
{
    return disco__ipc_table_footprint(max_exports);
}

disco_status_t disco_device_ipc_init(void *mem, size_t bytes, uint32_t max_exports)
{
    disco_ipc_table_t *t;
    disco_status_t st = disco__ipc_table_init(mem, bytes, max_exports, &t);
    return st != DISCO_OK ? st : set_table(t, mem, max_exports);
}

disco_status_t disco_device_ipc_attach(void *mem, size_t bytes)
{
    disco_ipc_table_t *t;
    disco_status_t st = disco__ipc_table_attach(mem, bytes, &t);
    return st != DISCO_OK ? st : set_table(t, mem, disco__ipc_table_nslots(t));
}

disco_status_t disco_device_ipc_detach(void *mem)
{
    pthread_mutex_lock(&g_lock);
    bool ours = disco__ipc_table_is(g_table, mem, 0);
    pthread_mutex_unlock(&g_lock);
    if (!ours)
        return DISCO_OK;
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    if (st != DISCO_OK)
        return st;
    pthread_mutex_lock(&g_lock);
    if (disco__ipc_table_is(g_table, mem, 0) &&
        (st = disco__ipc_set_table(ipc, NULL)) == DISCO_OK) {
        disco__ipc_table_release(g_table);
        g_table = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

disco_status_t disco_device_ipc_export(const void *ptr, disco_ipc_ref_t *ref_out)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    return st != DISCO_OK ? st : disco__ipc_export(ipc, ptr, ref_out);
}

disco_status_t disco_device_ipc_import(const disco_ipc_ref_t *ref, void **ptr_out)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    return st != DISCO_OK ? st : disco__ipc_import(ipc, ref, ptr_out);
}

disco_status_t disco__device_ipc_forget(void *base)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    return st != DISCO_OK ? st : disco__ipc_forget(ipc, base);
}

disco_status_t disco__device_ipc_forget_import(const disco_ipc_ref_t *ref)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    return st != DISCO_OK ? st : disco__ipc_forget_import(ipc, ref);
}

disco_status_t disco_device_ipc_release(const disco_ipc_ref_t *ref)
{
    disco_ipc_t *ipc;
    disco_status_t st = ipc_ctx(&ipc);
    return st != DISCO_OK ? st : disco__ipc_release(ipc, ref);
}

const char *disco__device_fork_spoiled(void)
{
    return disco__cuda_called_here() ? "cuda" : disco__sim_fork_spoiled() ? "sim" : NULL;
}
