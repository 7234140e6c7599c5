/* ctx.c - a function call's context and running a registered function (see
 * ctx.h). Builtins and libraries call into it; it calls no function of theirs. */
#include "workers/core/ctx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "workers/core/worker.h"
#include "workers/data/arena.h"
#include "workers/data/tensor_impl.h"

/* Users see global ids: across nodes, this node's first id plus the local
 * one (worker.h). */
int disco_ctx_worker_id(const disco_ctx_t *ctx)
{
    return ctx->worker != NULL ? ctx->worker->gid_base + ctx->worker_id : ctx->worker_id;
}

int disco_ctx_world_size(const disco_ctx_t *ctx)
{
    return ctx->worker != NULL ? ctx->worker->gworld : ctx->world;
}

/* The members disco__coll_begin gives an in-group call: this node's
 * workers over the groups (each node holds whole groups); with one group,
 * every worker of every node. */
int disco_ctx_group_size(const disco_ctx_t *ctx)
{
    const disco_worker_t *w = ctx->worker;
    if (w == NULL || w->ngroups <= 1)
        return disco_ctx_world_size(ctx);
    return disco__worker_group_size(w);
}

void *disco_ctx_user(const disco_ctx_t *ctx)
{
    return ctx->user;
}

void *disco_ctx_alloc(disco_ctx_t *ctx, size_t size)
{
    void **list = realloc(ctx->scratch, (ctx->nscratch + 1) * sizeof *list);
    if (list == NULL)
        return NULL;
    ctx->scratch = list;
    void *p = malloc(size ? size : 1);
    if (p != NULL)
        list[ctx->nscratch++] = p;
    return p;
}

disco_status_t disco_ctx_fail(disco_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    va_end(ap);
    ctx->failed = 1;
    return DISCO_E_REMOTE;
}

disco_status_t disco__ctx_own(disco_ctx_t *ctx, DLTensor *t)
{
    DLTensor **list = realloc(ctx->tensors, (ctx->ntensors + 1) * sizeof *list);
    if (list == NULL) {
        disco__tensor_release(t);
        return disco_set_error(DISCO_E_NOMEM, "tensor list of a call");
    }
    ctx->tensors = list;
    list[ctx->ntensors++] = t;
    return DISCO_OK;
}

disco_status_t disco_ctx_empty(disco_ctx_t *ctx, const int64_t *shape, int ndim, DLDataType dtype,
                               DLTensor **out)
{
    if (ctx->worker == NULL || ctx->worker->heap == NULL)
        return disco_set_error(DISCO_E_HEAP_EXHAUSTED,
                               "no shared heap here: tensors are made inside a session");
    DLTensor *t;
    disco_status_t st =
        disco__tensor_new(ctx->worker->heap, (uint32_t)ctx->worker_id, shape, ndim, dtype, &t);
    if (st == DISCO_OK && (st = disco__ctx_own(ctx, t)) == DISCO_OK)
        *out = t;
    return st;
}

/* A device tensor from the worker's arena (see disco_ctx_empty_device). */
static disco_status_t empty_in_arena(disco_ctx_t *ctx, const int64_t *shape, int ndim,
                                     DLDataType dtype, DLDeviceType type, DLTensor **out)
{
    struct disco_worker *w = ctx->worker;
    if (w == NULL || w->dev_area == NULL)
        return disco_set_error(DISCO_E_INVAL,
                               "no device arena here: device tensors are made inside a session");
    if (w->threaded) /* the device layer's IPC tables are per process (worker.h) */
        return disco_set_error(DISCO_E_UNSUPPORTED,
                               "worker %d: device tensors (device type %d) are not supported in a "
                               "threaded session (its workers share one process); use a "
                               "session of processes (launch fork or spawn)",
                               disco__worker_gid(w), (int)type);
    size_t nbytes;
    DLTensor *t;
    disco_status_t st = disco_shape_nbytes(shape, ndim, dtype, &nbytes);
    if (st == DISCO_OK)
        st = disco__arena_ensure(&w->arena, w->dev_area, w->id, type);
    if (st == DISCO_OK)
        st = disco__tensor_new_device(w->arena, shape, ndim, dtype, &t);
    if (st == DISCO_OK && (st = disco__ctx_own(ctx, t)) == DISCO_OK)
        *out = t;
    return st;
}

disco_status_t disco_ctx_empty_device(disco_ctx_t *ctx, const int64_t *shape, int ndim,
                                      DLDataType dtype, DLDeviceType device_type,
                                      DLTensor **tensor_out)
{
    if (device_type == kDLCPU)
        return disco_ctx_empty(ctx, shape, ndim, dtype, tensor_out);
    return empty_in_arena(ctx, shape, ndim, dtype, device_type, tensor_out);
}

static void ctx_release(disco_ctx_t *ctx)
{
    for (size_t i = 0; i < ctx->ntensors; i++)
        disco__tensor_release(ctx->tensors[i]);
    free(ctx->tensors);
    for (size_t i = 0; i < ctx->nscratch; i++)
        free(ctx->scratch[i]);
    free(ctx->scratch);
}

disco_status_t disco__func_run(const struct disco__func *f, struct disco_worker *w,
                               const disco_value_t *args, int n, disco_value_t *ret_out)
{
    disco_ctx_t ctx; /* not zeroed whole: msg is written only on failure */
    ctx.worker_id = w != NULL ? w->id : 0;
    ctx.world = w != NULL ? w->world : 1;
    ctx.failed = 0;
    ctx.worker = w;
    ctx.msg[0] = '\0';
    ctx.scratch = NULL;
    ctx.nscratch = 0;
    ctx.tensors = NULL;
    ctx.ntensors = 0;
    disco_value_t ret = disco_value_null();
    /* Acquire: pairs with the release in register_entry (registry.c); fn
     * and user come from one binding, never rewritten once published. */
    const struct disco__binding *b = atomic_load_explicit(&f->bound, memory_order_acquire);
    if (b == NULL) /* only between an entry's first publication and its binding's */
        return disco_set_error(DISCO_E_NO_FUNC, "function %s is being registered", f->name);
    ctx.user = b->user;
    /* Acquire: pairs with the release in register_entry (the flag is
     * stored before the binding, so it is at least as new as it). */
    if (w == NULL && atomic_load_explicit(&f->needs_worker, memory_order_acquire))
        return disco_set_error(DISCO_E_INVAL,
                               "%s needs a session worker: call it in a Disco session, not in "
                               "a local or JSON-RPC session",
                               f->name);
    disco_clear_error();
    disco_status_t st = b->fn(&ctx, args, n, &ret);
    if (st != DISCO_OK) {
        if (!ctx.failed) /* the message is in the error detail (copy: we rewrite it) */
            snprintf(ctx.msg, sizeof ctx.msg, "%s", disco_last_error());
        disco_set_error(st, "%s", ctx.msg[0] ? ctx.msg : disco_strerror(st));
    } else {
        st = disco_value_copy(&ret, ret_out);
    }
    ctx_release(&ctx);
    return st;
}
