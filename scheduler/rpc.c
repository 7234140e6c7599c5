/* rpc.c - the RPC session API: dispatch through the ops table, device
 * tagging. */
#include <stdatomic.h>
#include <string.h>

#include "disco/rpc.h"
#include "rpc_impl.h"

static _Atomic int next_index;

int disco__rpc_next_index(void)
{
    /* Relaxed: only uniqueness matters, nothing is published with it. */
    return atomic_fetch_add_explicit(&next_index, 1, memory_order_relaxed);
}

void disco_rpc_close(disco_rpc_t *s)
{
    if (s != NULL)
        s->ops->close(s);
}

disco_status_t disco_rpc_get_func(disco_rpc_t *s, const char *name, disco_rpc_handle_t *out)
{
    return s->ops->get_func(s, name, out);
}

disco_status_t disco_rpc_call(disco_rpc_t *s, disco_rpc_handle_t f, const disco_value_t *args,
                              int nargs, disco_value_t *ret_out)
{
    return s->ops->call(s, f, args, nargs, ret_out);
}

disco_status_t disco_rpc_copy_to_remote(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                        uint64_t offset, uint64_t nbytes)
{
    return s->ops->copy_to_remote(s, src, dst, offset, nbytes);
}

disco_status_t disco_rpc_copy_from_remote(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t offset,
                                          void *dst, uint64_t nbytes)
{
    return s->ops->copy_from_remote(s, src, offset, dst, nbytes);
}

disco_status_t disco_rpc_free_handle(disco_rpc_t *s, disco_rpc_handle_t h)
{
    return s->ops->free_handle(s, h);
}

disco_status_t disco_rpc_dev_alloc(disco_rpc_t *s, DLDevice dev, uint64_t nbytes, uint64_t align,
                                   disco_rpc_handle_t *mem_out)
{
    return s->ops->dev_alloc(s, dev, nbytes, align, mem_out);
}

disco_status_t disco_rpc_dev_free(disco_rpc_t *s, DLDevice dev, disco_rpc_handle_t mem)
{
    return s->ops->dev_free(s, dev, mem);
}

disco_status_t disco_rpc_stream_sync(disco_rpc_t *s, DLDevice dev)
{
    return s->ops->stream_sync(s, dev);
}

disco_status_t disco_rpc_call_async(disco_rpc_t *s, disco_rpc_handle_t f, const disco_value_t *args,
                                    int nargs, disco_rpc_done_fn done, void *ctx)
{
    return s->ops->call_async(s, f, args, nargs, done, ctx);
}

/* A copy that failed to start (bad handle or range, connection gone) is an
 * error of the call; one that failed midway is reported to done as well. */
static disco_status_t copy_done(disco_status_t st, disco_rpc_done_fn done, void *ctx)
{
    if (st == DISCO_E_BAD_REG || st == DISCO_E_INVAL || st == DISCO_E_CLOSED)
        return st;
    done(ctx, st, NULL);
    return DISCO_OK;
}

disco_status_t disco_rpc_copy_to_remote_async(disco_rpc_t *s, const void *src,
                                              disco_rpc_handle_t dst, uint64_t offset,
                                              uint64_t nbytes, disco_rpc_done_fn done, void *ctx)
{
    return copy_done(s->ops->copy_to_remote(s, src, dst, offset, nbytes), done, ctx);
}

disco_status_t disco_rpc_copy_from_remote_async(disco_rpc_t *s, disco_rpc_handle_t src,
                                                uint64_t offset, void *dst, uint64_t nbytes,
                                                disco_rpc_done_fn done, void *ctx)
{
    return copy_done(s->ops->copy_from_remote(s, src, offset, dst, nbytes), done, ctx);
}

disco_status_t disco_rpc_wait(disco_rpc_t *s)
{
    return s->ops->wait(s);
}

bool disco_rpc_is_local(const disco_rpc_t *s)
{
    return strcmp(s->ops->kind, "local") == 0; /* a worker view runs in other processes */
}

DLDevice disco_rpc_device(const disco_rpc_t *s, DLDevice dev)
{
    if (!disco_rpc_is_local(s))
        dev.device_type = (DLDeviceType)(dev.device_type + DISCO_RPC_SESS_MASK * (s->index + 1));
    return dev;
}
