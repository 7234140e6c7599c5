/* builtins.c - functions every worker has: library loading, identity, echo. */
#include "workers/core/builtins.h"

#include <dlfcn.h>

#include "disco/shm/heap.h"
#include "disco/placement.h"
#include "disco/tensor.h"
#include "workers/core/registry.h"
#include "workers/core/worker.h"
#include "workers/data/arena.h"
#include "workers/data/tensor_impl.h"

/* disco.load_library(path): dlopen the library in this worker; its
 * DISCO_FUNC constructors register its functions. Libraries stay loaded. */
static disco_status_t load_library(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                   disco_value_t *ret)
{
    (void)nargs;
    (void)ret;
    if (dlopen(args[0].v.str, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        disco_ctx_fail(ctx, "cannot load %s: %s", args[0].v.str, dlerror());
        return DISCO_E_LIBRARY;
    }
    return DISCO_OK;
}

static disco_status_t worker_id(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                disco_value_t *ret)
{
    (void)args;
    (void)nargs;
    *ret = disco_value_int(disco_ctx_worker_id(ctx));
    return DISCO_OK;
}

static disco_status_t world_size(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                 disco_value_t *ret)
{
    (void)args;
    (void)nargs;
    *ret = disco_value_int(disco_ctx_world_size(ctx));
    return DISCO_OK;
}

/* disco.echo(v, ...): returns its first argument (null without one). */
static disco_status_t echo(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                           disco_value_t *ret)
{
    (void)ctx;
    *ret = nargs > 0 ? args[0] : disco_value_null();
    return DISCO_OK;
}

/* disco.noop(...): does nothing; the benchmarks' call. */
static disco_status_t noop(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                           disco_value_t *ret)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    (void)ret;
    return DISCO_OK;
}

static disco_status_t tensor_span(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret);
static disco_status_t tensor_meta(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret);

/* disco.cpu_affinity(): the CPUs this worker may run on ("0-1,3"), as the
 * kernel sees them; shows that a placement plan took effect. */
static disco_status_t cpu_affinity(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                   disco_value_t *ret)
{
    (void)args;
    (void)nargs;
    char *buf = disco_ctx_alloc(ctx, 4096);
    if (buf == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    if (disco_place_current_cpus(buf, 4096) != DISCO_OK)
        return disco_ctx_fail(ctx, "%s", disco_last_error());
    *ret = disco_value_str(buf);
    return DISCO_OK;
}

/* disco.arena_stats(): this worker's device arena as a shape [bytes, used,
 * blocks, peers imported, device type, device id, peers' events imported,
 * one-shot and two-shot allreduce kernels run, allreduces staged through
 * host memory]; all 0 (device type -1)
 * before its first device tensor. For tests and debugging. */
static disco_status_t arena_stats(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret)
{
    (void)args;
    (void)nargs;
    disco__arena_stats_t st;
    disco__arena_stats(ctx->worker != NULL ? ctx->worker->arena : NULL, &st);
    int64_t *v = disco_ctx_alloc(ctx, 10 * sizeof *v);
    if (v == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    v[0] = (int64_t)st.bytes;
    v[1] = (int64_t)st.used;
    v[2] = st.blocks;
    v[3] = st.peers;
    v[4] = st.bytes ? (int64_t)st.device.device_type : -1;
    v[5] = st.device.device_id;
    v[6] = st.events;
    v[7] = (int64_t)st.ar_one_shot;
    v[8] = (int64_t)st.ar_two_shot;
    v[9] = (int64_t)st.ar_staged;
    *ret = disco_value_shape(v, 10);
    return DISCO_OK;
}

void disco__builtins_register(void)
{
    disco_register_func("disco.load_library", "s", load_library);
    disco_register_func("disco.worker_id", "", worker_id);
    disco_register_func("disco.world_size", "", world_size);
    disco_register_func("disco.echo", NULL, echo);
    disco_register_func("disco.noop", NULL, noop);
    disco__register_session_func("disco.tensor_span", "T", tensor_span);
    disco__register_session_func("disco.tensor_meta", "?", tensor_meta);
    disco_register_func("disco.cpu_affinity", "", cpu_affinity);
    disco__register_session_func("disco.arena_stats", "", arena_stats);
}

/* disco.tensor_span(x): where x's bytes are in the shared heap, as a shape
 * [heap offset, bytes] (for RPC views of a worker that copy directly). */
static disco_status_t tensor_span(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    const DLTensor *t = args[0].v.tensor;
    if (ctx->worker == NULL || ctx->worker->heap == NULL ||
        !disco_heap_contains(ctx->worker->heap, t->data, disco_tensor_nbytes(t)))
        return disco_ctx_fail(ctx, "the tensor is not in this session's shared heap");
    int64_t *span = disco_ctx_alloc(ctx, 2 * sizeof *span);
    if (span == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    span[0] = (int64_t)disco_heap_offset(ctx->worker->heap, t->data);
    span[1] = (int64_t)disco_tensor_nbytes(t);
    *ret = disco_value_shape(span, 2);
    return DISCO_OK;
}

/* disco.tensor_meta(x): what x is on this worker, as a shape: for a tensor
 * [1, device type, heap block, byte offset, dtype (code | bits << 8 |
 * lanes << 16), ndim, dims...] (block and offset 0 for a device tensor);
 * for anything else [0, its type code]. Never fails on a value, so that it
 * can be called on every worker for one worker's answer (the controller's
 * disco_session_tensor_view does). */
static disco_status_t tensor_meta(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    int64_t *m = disco_ctx_alloc(ctx, (6 + DISCO_MAX_NDIM) * sizeof *m);
    if (m == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    if (args[0].type != DISCO_T_TENSOR || args[0].v.tensor == NULL ||
        !disco__tensor_is_ours(args[0].v.tensor)) {
        m[0] = 0;
        m[1] = args[0].type;
        *ret = disco_value_shape(m, 2);
        return DISCO_OK;
    }
    const DLTensor *t = args[0].v.tensor;
    bool dev = disco__tensor_is_device(t);
    m[0] = 1;
    m[1] = t->device.device_type;
    m[2] = dev ? 0 : (int64_t)disco__tensor_block(t);
    m[3] = dev ? 0 : (int64_t)disco__tensor_byte_offset(t);
    m[4] = (int64_t)t->dtype.code | (int64_t)t->dtype.bits << 8 | (int64_t)t->dtype.lanes << 16;
    m[5] = t->ndim;
    for (int i = 0; i < t->ndim && i < DISCO_MAX_NDIM; i++)
        m[6 + i] = t->shape[i];
    *ret = disco_value_shape(m, (uint32_t)(6 + t->ndim));
    return DISCO_OK;
}
