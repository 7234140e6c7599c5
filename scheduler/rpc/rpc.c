/* rpc.c - the RPC session API: dispatch through the ops table, device
 * tagging. */
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#include "disco/dtype.h"
#include "disco/rpc.h"
#include "disco/tensor.h"
#include "scheduler/rpc/rpc_impl.h"

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

/* Whether bytes [offset, offset + nbytes) can be named on the wire (an
 * int64 offset) without wrapping: a client sends each chunk's offset as
 * offset + done, which must never wrap to the start of the allocation. */
static disco_status_t range_ok(uint64_t offset, uint64_t nbytes)
{
    if (offset > INT64_MAX || nbytes > INT64_MAX - offset)
        return disco_set_error(DISCO_E_OVERFLOW, "bytes [%llu, +%llu): past 2^63",
                               (unsigned long long)offset, (unsigned long long)nbytes);
    return DISCO_OK;
}

disco_status_t disco_rpc_copy_to_remote(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                        uint64_t offset, uint64_t nbytes)
{
    disco_status_t st = range_ok(offset, nbytes);
    return st != DISCO_OK ? st : s->ops->copy_to_remote(s, src, dst, offset, nbytes);
}

disco_status_t disco_rpc_copy_from_remote(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t offset,
                                          void *dst, uint64_t nbytes)
{
    disco_status_t st = range_ok(offset, nbytes);
    return st != DISCO_OK ? st : s->ops->copy_from_remote(s, src, offset, dst, nbytes);
}

disco_status_t disco_rpc_free_handle(disco_rpc_t *s, disco_rpc_handle_t h)
{
    return s->ops->free_handle(s, h);
}

disco_status_t disco_rpc_dev_alloc(disco_rpc_t *s, DLDevice dev, uint64_t nbytes, uint64_t align,
                                   disco_rpc_handle_t *mem_out)
{
    /* Every backend the same answer: the wire carries sizes as int64. */
    if (nbytes > DISCO_TENSOR_MAX_BYTES)
        return disco_set_error(DISCO_E_OVERFLOW,
                               "device alloc of %" PRIu64 " bytes: over the 2^62-byte limit",
                               nbytes);
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

/* A session that copies inside the call: the copy's status goes to done,
 * except when the connection is gone and nothing could be sent. */
static disco_status_t copy_done(disco_status_t st, disco_rpc_done_fn done, void *ctx)
{
    if (st == DISCO_E_CLOSED)
        return st;
    done(ctx, st, NULL);
    return DISCO_OK;
}

disco_status_t disco_rpc_copy_to_remote_async(disco_rpc_t *s, const void *src,
                                              disco_rpc_handle_t dst, uint64_t offset,
                                              uint64_t nbytes, disco_rpc_done_fn done, void *ctx)
{
    disco_status_t st = range_ok(offset, nbytes);
    if (st != DISCO_OK)
        return st; /* done never runs: nothing was sent */
    if (s->ops->copy_to_remote_async != NULL)
        return s->ops->copy_to_remote_async(s, src, dst, offset, nbytes, done, ctx);
    return copy_done(s->ops->copy_to_remote(s, src, dst, offset, nbytes), done, ctx);
}

disco_status_t disco_rpc_copy_from_remote_async(disco_rpc_t *s, disco_rpc_handle_t src,
                                                uint64_t offset, void *dst, uint64_t nbytes,
                                                disco_rpc_done_fn done, void *ctx)
{
    disco_status_t st = range_ok(offset, nbytes);
    if (st != DISCO_OK)
        return st; /* done never runs: nothing was sent */
    if (s->ops->copy_from_remote_async != NULL)
        return s->ops->copy_from_remote_async(s, src, offset, dst, nbytes, done, ctx);
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

/* ---- tensors on remote memory ---- */

static bool is_remote_of(const disco_rpc_t *s, const DLTensor *t)
{
    return !disco_rpc_is_local(s) &&
           (int)t->device.device_type / DISCO_RPC_SESS_MASK == s->index + 1;
}

disco_status_t disco_rpc_tensor_alloc(disco_rpc_t *s, DLDevice dev, int64_t *shape, int ndim,
                                      DLDataType dtype, DLTensor *t_out)
{
    size_t nbytes; /* checked: an overflowing shape must not wrap to a few bytes */
    disco_status_t st = disco_shape_nbytes(shape, ndim, dtype, &nbytes);
    if (st != DISCO_OK)
        return st;
    DLTensor t = {.device = disco_rpc_device(s, dev), .ndim = ndim, .dtype = dtype, .shape = shape};
    disco_rpc_handle_t h;
    if ((st = s->ops->dev_alloc(s, dev, nbytes, 64, &h)) != DISCO_OK)
        return st;
    t.data = (void *)(uintptr_t)h;
    *t_out = t;
    return DISCO_OK;
}

disco_status_t disco_rpc_tensor_free(disco_rpc_t *s, DLTensor *t)
{
    DLDevice dev = t->device;
    dev.device_type = (DLDeviceType)(dev.device_type % DISCO_RPC_SESS_MASK);
    return s->ops->dev_free(s, dev, (disco_rpc_handle_t)(uintptr_t)t->data);
}

disco_status_t disco_rpc_tensor_copy(disco_rpc_t *s, const DLTensor *from, DLTensor *to)
{
    bool up = is_remote_of(s, to) && from->device.device_type == kDLCPU;
    bool down = is_remote_of(s, from) && to->device.device_type == kDLCPU;
    if (!up && !down)
        return disco_set_error(DISCO_E_INVAL,
                               "tensor copy: need one host tensor and one tensor "
                               "of this session (devices %d and %d)",
                               (int)from->device.device_type, (int)to->device.device_type);
    if (!disco_tensor_is_compact(from) || !disco_tensor_is_compact(to))
        return disco_set_error(DISCO_E_INVAL, "tensor copy: both tensors must be compact");
    if (!disco_tensor_same_layout(from, to)) {
        char a[32], b[32];
        return disco_set_error(DISCO_E_MISMATCH, "tensor copy: %s with %d dims to %s with %d dims",
                               disco_dtype_str(from->dtype, a, sizeof a), from->ndim,
                               disco_dtype_str(to->dtype, b, sizeof b), to->ndim);
    }
    size_t n;
    disco_status_t st = disco_shape_nbytes(from->shape, from->ndim, from->dtype, &n);
    if (st != DISCO_OK)
        return st;
    if (up)
        return s->ops->copy_to_remote(s, (const char *)from->data + from->byte_offset,
                                      (disco_rpc_handle_t)(uintptr_t)to->data, to->byte_offset, n);
    return s->ops->copy_from_remote(s, (disco_rpc_handle_t)(uintptr_t)from->data, from->byte_offset,
                                    (char *)to->data + to->byte_offset, n);
}
