/* comm.c - the collectives of <disco/comm.h>, called from inside a worker
 * function: the tensors the caller passes are checked (and staged through
 * the shared heap when they are host memory of the caller's own), then the
 * one body the builtins run too does the work (coll_call.h). Broadcast
 * from any root into every member's buffer and the barrier are calls of
 * the same machinery (meeting, span checks, device copies). Send and
 * receive are in comm_p2p.c. */
#include "disco/comm.h"

#include <stdio.h>
#include <string.h>

#include "disco/device.h"
#include "disco/tensor.h"
#include "shm/text.h"
#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#include "workers/data/coll_call.h"
#include "workers/data/collective.h"
#include "workers/data/collective_net.h"
#include "workers/data/comm_impl.h"
#include "workers/data/tensor_impl.h"

disco_status_t disco__comm_worker(disco_ctx_t *ctx, const char *what)
{
    if (ctx == NULL || ctx->worker == NULL || ctx->worker->coll == NULL)
        return disco_set_error(DISCO_E_INVAL,
                               "%s: callable only inside a worker function of a session", what);
    return DISCO_OK;
}

/* What disco__comm_fail_next left for this thread's worker function: its
 * worker and command (a failure meant for another is dropped), the status
 * and the words. Thread-local: comm.h's calls run on the worker function's
 * thread, so no other thread reads or writes it. */
static __thread struct {
    const disco_worker_t *w;
    uint64_t seq;
    disco_status_t st;
    char msg[DISCO_ERR_MSG_MAX];
} fail_next;

void disco__comm_fail_next(disco_ctx_t *ctx, disco_status_t st, const char *msg)
{
    if (disco__comm_worker(ctx, "disco__comm_fail_next") != DISCO_OK)
        return;
    fail_next.w = ctx->worker;
    fail_next.seq = ctx->worker->seq;
    fail_next.st = disco__status_is_error(st) ? st : DISCO_E_INVAL;
    snprintf(fail_next.msg, sizeof fail_next.msg, "%s", msg != NULL ? msg : "failed");
}

disco_status_t disco__comm_failing(disco_ctx_t *ctx, disco_status_t st)
{
    if (fail_next.w == NULL)
        return st;
    bool mine = ctx != NULL && fail_next.w == ctx->worker && fail_next.seq == ctx->worker->seq;
    fail_next.w = NULL;
    if (st != DISCO_OK || !mine)
        return st;
    return disco_set_error(fail_next.st, "%s", fail_next.msg);
}

/* Whether t is a tensor a collective can post as it is: ours, in the heap
 * or a device arena. */
static bool postable(const DLTensor *t)
{
    return disco__tensor_is_ours(t) &&
           (t->device.device_type == kDLCPU || disco__tensor_is_device(t));
}

/* Whether t's bytes can be copied as one run: compact, with data unless
 * it has no elements. */
static bool stageable(const DLTensor *t)
{
    return disco_tensor_is_compact(t) && (t->data != NULL || disco_tensor_numel(t) == 0);
}

/* A device type's name ("sim", "cuda"), or its number. */
static const char *type_name(DLDeviceType type, char *buf, size_t len)
{
    const disco_device_api_t *api;
    if (disco_device_api_get(type, &api) == DISCO_OK)
        return api->name;
    snprintf(buf, len, "device type %d", (int)type);
    return buf;
}

/* A device tensor the session did not allocate (a torch CUDA tensor, sim
 * memory from disco_device_alloc): on this worker's own device, staged
 * through a new arena tensor. The caller's work on t must be done or on
 * the device's default stream: that stream is synced first (DLPack's
 * convention for a consumer that passes no stream; Python's disco.comm
 * also has the producer order its work before it exports). The copy in
 * runs on the arena's stream and is synced before this returns, so the
 * collective's device work, queued on that stream after it, reads the
 * staged bytes (coll_call.h, Device ordering). */
static disco_status_t stage_device(disco_ctx_t *ctx, const DLTensor *t, bool copy_in,
                                   const char *what, DLTensor **out)
{
    char buf[32];
    const char *type = type_name(t->device.device_type, buf, sizeof buf);
    int id = (int)t->device.device_id;
    if (!stageable(t))
        return disco_set_error(DISCO_E_INVAL,
                               "%s: a tensor on %s:%d that disco did not allocate must be compact "
                               "to be staged",
                               what, type, id);
    DLTensor *d;
    disco_status_t st =
        disco_ctx_empty_device(ctx, t->shape, t->ndim, t->dtype, t->device.device_type, &d);
    if (st != DISCO_OK)
        return disco_set_error(st, "%s: staging a tensor on %s:%d: %s", what, type, id,
                               disco_last_error());
    if (d->device.device_id != id)
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: a tensor on %s:%d, and worker %d's device is %s:%d (disco "
                               "stages only the worker's own device: copy it there first)",
                               what, type, id, disco__worker_gid(ctx->worker), type,
                               (int)d->device.device_id);
    if ((st = disco_device_stream_sync(t->device, NULL)) == DISCO_OK && copy_in &&
        disco_tensor_nbytes(t) != 0)
        st = disco__tensor_copy_in(d, t);
    if (st != DISCO_OK)
        return disco_set_error(st, "%s: staging a tensor on %s:%d: %s", what, type, id,
                               disco_last_error());
    *out = d;
    return DISCO_OK;
}

disco_status_t disco__comm_stage(disco_ctx_t *ctx, const DLTensor *t, bool copy_in,
                                 const char *what, DLTensor **out)
{
    if (t == NULL)
        return disco_set_error(DISCO_E_INVAL, "%s: a tensor is NULL", what);
    disco_status_t st = disco_dtype_check(t->dtype);
    if (st != DISCO_OK)
        return st;
    if (postable(t)) {
        *out = (DLTensor *)t;
        return DISCO_OK;
    }
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
        return stage_device(ctx, t, copy_in, what, out);
    if (!stageable(t))
        return disco_set_error(DISCO_E_INVAL, "%s: a host tensor to stage must be compact", what);
    DLTensor *h;
    if ((st = disco_ctx_empty(ctx, t->shape, t->ndim, t->dtype, &h)) != DISCO_OK)
        return st;
    if (copy_in && disco_tensor_nbytes(t) != 0)
        memcpy(h->data, (const char *)t->data + t->byte_offset, disco_tensor_nbytes(t));
    *out = h;
    return DISCO_OK;
}

disco_status_t disco__comm_unstage(const DLTensor *h, DLTensor *t)
{
    if (h == t || disco_tensor_nbytes(t) == 0)
        return DISCO_OK;
    if (disco__tensor_is_device(h)) /* on h's arena stream, after the collective's work */
        return disco__tensor_copy_out(h, t);
    memcpy((char *)t->data + t->byte_offset, h->data, disco_tensor_nbytes(t));
    return DISCO_OK;
}

static bool same_layout(const DLTensor *a, const DLTensor *b)
{
    bool same = a->ndim == b->ndim && a->dtype.code == b->dtype.code &&
                a->dtype.bits == b->dtype.bits && a->dtype.lanes == b->dtype.lanes;
    for (int d = 0; same && d < a->ndim; d++)
        same = a->shape[d] == b->shape[d];
    return same;
}

/* The clock at a collective's start when the worker traces (0 when not),
 * and the index the collective takes among the command's (coll_call.h). */
static uint64_t stamp_begin(disco_ctx_t *ctx, uint32_t *index_out)
{
    *index_out = ctx->worker->cmd_coll;
    return disco__comm_clock(ctx);
}

/* Writes the collective's nested trace record (trace_ring.h, Nested
 * records): kind, its index, its group as disco__coll_begin derives it,
 * from t0 to now. Nothing when the worker does not trace. */
static void stamp_end(disco_ctx_t *ctx, uint32_t kind, uint32_t index, bool in_group, uint64_t t0)
{
    disco_worker_t *w = ctx->worker;
    if (w->trace == NULL)
        return;
    int size = in_group ? disco__worker_group_size(w) : w->world;
    uint32_t group = in_group && w->ngroups > 1 ? (uint32_t)(w->id / size) : DISCO__TRACE_NOGROUP;
    disco__trace_put_info(w->trace, w->seq,
                          disco__trace_nested_info(kind, index, group, (uint32_t)size), t0,
                          disco__ticks());
}

uint64_t disco__comm_clock(disco_ctx_t *ctx)
{
    return ctx->worker->trace != NULL ? disco__ticks() : 0;
}

void disco__comm_stamp_p2p(disco_ctx_t *ctx, uint32_t kind, int peer, uint64_t ticket, uint64_t t0)
{
    disco_worker_t *w = ctx->worker;
    if (w->trace == NULL || peer < 0)
        return;
    disco__trace_put_info(
        w->trace, w->seq,
        disco__trace_nested_info(kind, disco__trace_p2p_index(ticket), (uint32_t)peer, 2), t0,
        disco__ticks());
}

/* Whether t's device type is a device's (not host memory). */
static bool on_device(const DLTensor *t)
{
    return t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost;
}

static disco_status_t allreduce(disco_ctx_t *ctx, const DLTensor *in, DLTensor *out,
                                disco_reduce_op_t op, bool in_group)
{
    /* The caller checked the worker (disco__comm_worker). */
    disco_status_t st = disco__comm_failing(ctx, DISCO_OK);
    DLTensor *x = NULL, *y = NULL, *tmp = NULL;
    if (st == DISCO_OK && (unsigned)op > (unsigned)DISCO_REDUCE_AVG)
        st = disco_set_error(DISCO_E_INVAL, "disco_ctx_allreduce: op %d is none", (int)op);
    else if (st == DISCO_OK &&
             (in == NULL || out == NULL || !same_layout(in, out) ||
              on_device(in) != on_device(out) ||
              (on_device(in) && in->device.device_type != out->device.device_type)))
        st = disco_set_error(DISCO_E_MISMATCH,
                             "disco_ctx_allreduce: in and out must have one dtype, shape and "
                             "device");
    if (st == DISCO_OK)
        st = disco__comm_stage(ctx, in, true, "disco_ctx_allreduce", &x);
    if (st == DISCO_OK)
        st = in == out ? (y = x, DISCO_OK)
                       : disco__comm_stage(ctx, out, false, "disco_ctx_allreduce", &y);
    /* In place on a device, or across nodes, the kernels and the chain
     * read inputs while outputs are written: a fresh output, copied in
     * after. Device tensors across nodes go through the heap (as the
     * builtin's are staged). */
    bool across = disco__worker_crosses(ctx->worker, in_group);
    if (st == DISCO_OK && across && on_device(x)) {
        DLTensor *hx;
        if ((st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &hx)) == DISCO_OK &&
            (st = disco__tensor_copy_out(x, hx)) == DISCO_OK)
            st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &tmp);
        x = hx;
    } else if (st == DISCO_OK && x->data == y->data && (on_device(x) || across)) {
        st = disco_ctx_empty_device(ctx, x->shape, x->ndim, x->dtype, x->device.device_type, &tmp);
    }
    if (st != DISCO_OK)
        x = y = NULL;
    st = disco__coll_allreduce_into(ctx, in_group, st, x, tmp != NULL ? tmp : y, op);
    if (st == DISCO_OK && tmp != NULL)
        st = disco__tensor_copy_out(tmp, y);
    if (st == DISCO_OK)
        st = disco__comm_unstage(y, out);
    return st;
}

static disco_status_t allgather(disco_ctx_t *ctx, const DLTensor *in, DLTensor *out, bool in_group)
{
    /* The caller checked the worker (disco__comm_worker). */
    disco_status_t st = disco__comm_failing(ctx, DISCO_OK);
    DLTensor *x = NULL, *y = NULL;
    if (st == DISCO_OK && (in == NULL || out == NULL || on_device(in) != on_device(out)))
        st = disco_set_error(DISCO_E_MISMATCH,
                             "disco_ctx_allgather: in and out must be on one device");
    if (st == DISCO_OK)
        st = disco__comm_stage(ctx, in, true, "disco_ctx_allgather", &x);
    if (st == DISCO_OK)
        st = disco__comm_stage(ctx, out, false, "disco_ctx_allgather", &y);
    /* Device tensors across nodes go through the heap, as allreduce's:
     * the whole world's bytes land in a heap output, then on the device. */
    DLTensor *dev_y = NULL;
    if (st == DISCO_OK && disco__worker_crosses(ctx->worker, in_group) && on_device(x)) {
        DLTensor *hx;
        if ((st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &hx)) == DISCO_OK &&
            (st = disco__tensor_copy_out(x, hx)) == DISCO_OK &&
            (st = disco_ctx_empty(ctx, y->shape, y->ndim, y->dtype, &dev_y)) == DISCO_OK) {
            DLTensor *t = y;
            x = hx, y = dev_y, dev_y = t;
        }
    }
    if (st != DISCO_OK)
        x = y = NULL;
    st = disco__coll_allgather_into(ctx, in_group, st, x, y);
    if (st == DISCO_OK && dev_y != NULL)
        st = disco__tensor_copy_out(y, dev_y), y = dev_y;
    if (st == DISCO_OK)
        st = disco__comm_unstage(y, out);
    return st;
}

/* Broadcast from member root into every member's buf: each posts its buf
 * and root (checked alike at the meeting: Identity, collective.h); the
 * others copy root's bytes into theirs (heap: memcpy; device: on their
 * streams), then every member passes the end barrier, so that root's bytes
 * stay as they are until every copy is done. Across nodes (root: a global
 * worker id; heap tensors only, broadcast() stages device ones) each node
 * meets, then its leader takes the nodes' verdict and root's bytes over
 * the link (disco__coll_net_broadcast). */
static disco_status_t broadcast_into(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                     DLTensor *buf, int root)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_BCAST_ROOT, &c);
    c.me->arg = root;
    disco_status_t st = pre;
    int members = c.across ? c.w->gworld : c.size;
    if (st == DISCO_OK && (root < 0 || root >= members))
        st = disco_set_error(DISCO_E_INVAL, "disco_ctx_broadcast: root %d of %d members", root,
                             members);
    if (st == DISCO_OK)
        disco__coll_post_tensor(&c, buf, false);
    else
        disco__coll_fail(&c, st, disco_last_error());
    if ((st = disco__coll_meet(&c)) == DISCO_OK)
        st = disco__coll_same_inputs(&c, false);
    /* Across nodes a node's verdict goes to the others (unless its
     * barrier broke: the session's failure); they all take the same. */
    if (c.across && c.gave_up == DISCO_OK)
        return disco__coll_net_broadcast(&c, st, root, st == DISCO_OK ? buf : NULL);
    if (st != DISCO_OK)
        return st; /* same verdict, same barriers on every member */
    if (c.rank != root && c.post[root].dev_type != 0) {
        st = disco__coll_dev_copy_into(&c, root, buf);
    } else if (c.rank != root) {
        char *src;
        if ((st = disco__coll_span_check(&c, root, false, 0, c.post[root].nbytes, &src)) ==
            DISCO_OK)
            memcpy(buf->data, src, (size_t)c.post[root].nbytes);
    }
    return disco__coll_end(&c, st);
}

static disco_status_t broadcast(disco_ctx_t *ctx, DLTensor *buf, int root, bool in_group)
{
    /* The caller checked the worker (disco__comm_worker). */
    DLTensor *b = NULL, *dev = NULL;
    disco_status_t st = disco__comm_failing(ctx, DISCO_OK);
    if (st == DISCO_OK)
        st = disco__comm_stage(ctx, buf, true, "disco_ctx_broadcast", &b);
    /* A device tensor across nodes goes through the heap (root's bytes
     * copied in), as allreduce's. */
    if (st == DISCO_OK && disco__worker_crosses(ctx->worker, in_group) && on_device(b)) {
        DLTensor *h;
        if ((st = disco_ctx_empty(ctx, b->shape, b->ndim, b->dtype, &h)) == DISCO_OK &&
            (disco__worker_gid(ctx->worker) != root ||
             (st = disco__tensor_copy_out(b, h)) == DISCO_OK))
            dev = b, b = h;
    }
    st = broadcast_into(ctx, in_group, st, st == DISCO_OK ? b : NULL, root);
    if (st == DISCO_OK && dev != NULL)
        st = disco__tensor_copy_out(b, dev), b = dev;
    if (st == DISCO_OK)
        st = disco__comm_unstage(b, buf);
    return st;
}

static disco_status_t barrier(disco_ctx_t *ctx, bool in_group)
{
    /* The caller checked the worker (disco__comm_worker). */
    disco_status_t st = disco__comm_failing(ctx, DISCO_OK);
    if (disco__worker_crosses(ctx->worker, in_group)) { /* the leaders meet over the link */
        int64_t one = 1;
        DLTensor *t = NULL;
        DLDataType i32 = {kDLInt, 32, 1};
        if (st == DISCO_OK)
            st = disco_ctx_empty(ctx, &one, 1, i32, &t);
        if (st == DISCO_OK)
            memset(t->data, 0, 4);
        return disco__coll_allreduce_into(ctx, in_group, st, st == DISCO_OK ? t : NULL,
                                          st == DISCO_OK ? t : NULL, DISCO_REDUCE_SUM);
    }
    /* One meeting: every member's slot read after it, and the next
     * collective uses the other slot set (collective.h). */
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_BARRIER, &c);
    if (st != DISCO_OK) /* every member fails at the meeting, with these words */
        disco__coll_fail(&c, st, disco_last_error());
    return disco__coll_meet(&c);
}

/* The public calls: the bodies above, each stamped as a nested trace
 * record once the worker is known to be a session's (the bodies rely on
 * that check: they do not repeat it). */

disco_status_t disco_ctx_allreduce(disco_ctx_t *ctx, const DLTensor *in, DLTensor *out,
                                   disco_reduce_op_t op, bool in_group)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_allreduce");
    if (st != DISCO_OK)
        return st;
    uint32_t index;
    uint64_t t0 = stamp_begin(ctx, &index);
    st = allreduce(ctx, in, out, op, in_group);
    stamp_end(ctx, DISCO__TK_ALLREDUCE, index, in_group, t0);
    return st;
}

disco_status_t disco_ctx_allgather(disco_ctx_t *ctx, const DLTensor *in, DLTensor *out,
                                   bool in_group)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_allgather");
    if (st != DISCO_OK)
        return st;
    uint32_t index;
    uint64_t t0 = stamp_begin(ctx, &index);
    st = allgather(ctx, in, out, in_group);
    stamp_end(ctx, DISCO__TK_ALLGATHER, index, in_group, t0);
    return st;
}

disco_status_t disco_ctx_broadcast(disco_ctx_t *ctx, DLTensor *buf, int root, bool in_group)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_broadcast");
    if (st != DISCO_OK)
        return st;
    uint32_t index;
    uint64_t t0 = stamp_begin(ctx, &index);
    st = broadcast(ctx, buf, root, in_group);
    stamp_end(ctx, DISCO__TK_BROADCAST, index, in_group, t0);
    return st;
}

disco_status_t disco_ctx_barrier(disco_ctx_t *ctx, bool in_group)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_barrier");
    if (st != DISCO_OK)
        return st;
    uint32_t index;
    uint64_t t0 = stamp_begin(ctx, &index);
    st = barrier(ctx, in_group);
    stamp_end(ctx, DISCO__TK_BARRIER, index, in_group, t0);
    return st;
}
