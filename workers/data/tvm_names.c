/* tvm_names.c - TVM Disco's builtin names (runtime.disco.*) over disco's
 * builtins, so that a TVM script's sess.get_global_func("runtime.disco.
 * worker_rank") finds one (issue 35, part 1).
 *
 * Each takes TVM's arguments and gives TVM's result, by calling disco's
 * builtin of the same meaning (looked up by name, so that it follows any
 * change of that builtin) with the same call context:
 *   worker_id()                       a shape [worker id] (TVM's ShapeTuple)
 *   worker_rank()                     the worker id, an int
 *   device()                          the worker's default device: cpu(0)
 *                                     (disco's tensors are in the heap unless
 *                                     a device is named)
 *   empty(shape, dtype, device|None, worker0_only, in_group)
 *                                     disco.empty; None: the default device
 *   allreduce(send, kind, in_group, recv)
 *                                     kind: TVM's ReduceKind as a shape [k]
 *                                     (or an int): 0 sum, 1 prod, 2 min,
 *                                     3 max, 4 avg; into recv
 *   allgather(send, in_group, recv)   into recv
 *   broadcast_from_worker0(send|None, in_group, recv)
 *                                     worker 0's send into every recv
 *   scatter_from_worker0(send|None, in_group, recv)
 *                                     by element count as TVM: recv holds
 *                                     numel(send) / members elements
 *   gather_to_worker0(send, in_group, recv|None)
 *                                     into recv on worker 0 (each group's
 *                                     first worker with in_group)
 * The collectives return null, as TVM's; the destination is written by
 * disco.copy_into from disco's result (one copy more than TVM's NCCL path
 * makes; docs/coming-from-tvm.md). runtime.disco._import_python_module is
 * the Python package's (session.py). test_registry's test_tvm_names and
 * tests/python/test_tvm_aliases.py hold these forms. */
#include <stdio.h>
#include <string.h>

#include "disco/dtype.h"
#include "workers/core/ctx.h"
#include "workers/core/registry.h"
#include "workers/core/worker.h"
#include "workers/data/tvm_names.h"
#include "workers/data/tensor_impl.h"

/* Runs disco's builtin name in ctx (its tensors owned by ctx, released at
 * the end of the call unless returned). */
static disco_status_t run(disco_ctx_t *ctx, const char *name, const disco_value_t *a, int n,
                          disco_value_t *ret)
{
    uint64_t h;
    /* The registry itself, not disco__func_find (lookup.c registers this
     * file's builtins: no arrow back to it); builtins are registered
     * before any of them runs. */
    disco_status_t st = disco__registry_find(name, &h);
    if (st != DISCO_OK)
        return st;
    const struct disco__func *f = disco__func_at(h);
    /* Acquire: pairs with the release in register_entry (registry.c), as
     * in disco__func_run. */
    const struct disco__binding *b =
        f != NULL ? atomic_load_explicit(&f->bound, memory_order_acquire) : NULL;
    if (b == NULL)
        return disco_set_error(DISCO_E_NO_FUNC, "%s is not registered", name);
    void *user = ctx->user;
    ctx->user = b->user;
    st = b->fn(ctx, a, n, ret);
    ctx->user = user;
    return st;
}

/* disco.copy_into(dst, res): nothing where res is null. */
static disco_status_t into(disco_ctx_t *ctx, const disco_value_t *dst, disco_value_t res)
{
    disco_value_t a[2] = {*dst, res};
    disco_value_t none = disco_value_null();
    return run(ctx, "disco.copy_into", a, 2, &none);
}

static bool truth(const disco_value_t *v)
{
    return v->type == DISCO_T_BOOL ? v->v.b : v->type == DISCO_T_INT && v->v.i != 0;
}

static disco_status_t worker_id(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)a;
    (void)n;
    int64_t *id = disco_ctx_alloc(ctx, sizeof *id);
    if (id == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    *id = disco_ctx_worker_id(ctx);
    *ret = disco_value_shape(id, 1);
    return DISCO_OK;
}

static disco_status_t worker_rank(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    return run(ctx, "disco.worker_id", a, n, ret);
}

static disco_status_t device(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)a;
    (void)n;
    *ret = disco_value_device((DLDevice){kDLCPU, 0});
    return DISCO_OK;
}

static disco_status_t empty(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    disco_value_t b[5];
    for (int i = 0; i < 5; i++)
        b[i] = i < n ? a[i] : disco_value_bool(false);
    if (b[2].type == DISCO_T_NULL)
        b[2] = disco_value_device((DLDevice){kDLCPU, 0});
    else if (b[2].type != DISCO_T_DEVICE)
        return disco_set_error(DISCO_E_BAD_TYPE, "runtime.disco.empty: device is %s",
                               disco_type_name(b[2].type));
    b[3] = disco_value_bool(truth(&b[3]));
    b[4] = disco_value_bool(truth(&b[4]));
    return run(ctx, "disco.empty", b, 5, ret);
}

static disco_status_t allreduce(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    static const char *const ops[] = {"sum", "prod", "min", "max", "avg"};
    int64_t k = a[1].type == DISCO_T_INT                      ? a[1].v.i
                : a[1].type == DISCO_T_SHAPE && a[1].len == 1 ? a[1].v.shape[0]
                                                              : -1;
    /* A bad kind still goes to disco.allreduce (as "?"), so that every
     * member meets and fails alike instead of some waiting at the barrier. */
    disco_value_t b[3] = {a[0], disco_value_str(k >= 0 && k < 5 ? ops[k] : "?"),
                          disco_value_bool(truth(&a[2]))};
    disco_value_t res = disco_value_null();
    disco_status_t st = run(ctx, "disco.allreduce", b, 3, &res);
    if (st == DISCO_OK)
        st = into(ctx, &a[3], res);
    *ret = disco_value_null();
    return st;
}

/* A collective (name) of TVM's (send, in_group, recv) form. */
static disco_status_t coll_into(disco_ctx_t *ctx, const char *name, const disco_value_t *a)
{
    disco_value_t b[2] = {a[0], disco_value_bool(truth(&a[1]))};
    disco_value_t res = disco_value_null();
    disco_status_t st = run(ctx, name, b, 2, &res);
    return st == DISCO_OK ? into(ctx, &a[2], res) : st;
}

static disco_status_t allgather(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    return coll_into(ctx, "disco.allgather", a);
}

static disco_status_t broadcast(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    return coll_into(ctx, "disco.broadcast_from_worker0", a);
}

static disco_status_t gather(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    return coll_into(ctx, "disco.gather_to_worker0", a);
}

/* TVM scatters by element count: the source, a heap tensor, is viewed as
 * (members, numel / members) before disco's scatter (which splits
 * dimension 0), so that a (3, 4, 3) source fills two (3, 3, 2) ones. A
 * source whose count does not divide, a device tensor or a scatter across
 * nodes goes as it is: disco's scatter then judges it (every member alike). */
static disco_status_t scatter(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    bool in_group = truth(&a[1]);
    struct disco_worker *w = ctx->worker;
    disco_value_t b[3] = {a[0], a[1], a[2]};
    if (w != NULL && !disco__worker_crosses(w, in_group) && a[0].type == DISCO_T_TENSOR &&
        disco__tensor_is_ours(a[0].v.tensor) && !disco__tensor_is_device(a[0].v.tensor) &&
        a[0].v.tensor->device.device_type == kDLCPU) {
        const DLTensor *x = a[0].v.tensor;
        int64_t members = in_group ? disco__worker_group_size(w) : w->world;
        int64_t numel = disco_tensor_numel(x);
        if (members > 0 && numel % members == 0) {
            int64_t shape[2] = {members, numel / members};
            DLTensor *view;
            disco_status_t st = disco__tensor_from_block(w->heap, disco__tensor_block(x),
                                                         disco__tensor_byte_offset(x), shape, 2,
                                                         x->dtype, false, &view);
            if (st == DISCO_OK && (st = disco__ctx_own(ctx, view)) == DISCO_OK)
                b[0] = disco_value_tensor(view);
            else /* fail as a member of the collective, not alone */
                b[0] = disco_value_null();
        }
    }
    return coll_into(ctx, "disco.scatter_from_worker0", b);
}

void disco__tvm_names_register(void)
{
    disco_register_func("runtime.disco.worker_id", "", worker_id);
    disco_register_func("runtime.disco.worker_rank", "", worker_rank);
    disco_register_func("runtime.disco.device", "", device);
    disco__register_session_func("runtime.disco.empty", "St?*", empty);
    disco__register_session_func("runtime.disco.allreduce", "T??T", allreduce);
    disco__register_session_func("runtime.disco.allgather", "T?T", allgather);
    disco__register_session_func("runtime.disco.broadcast_from_worker0", "??T", broadcast);
    disco__register_session_func("runtime.disco.scatter_from_worker0", "??T", scatter);
    disco__register_session_func("runtime.disco.gather_to_worker0", "T??", gather);
}
