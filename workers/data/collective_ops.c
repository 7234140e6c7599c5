/* collective_ops.c - empty, allreduce (its body: collective_allreduce.c),
 * allgather, broadcast, scatter, gather
 * and send/recv over the shared heap (see collective.h), each one collective
 * call (coll_call.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "disco/dtype.h"
#include "workers/core/registry.h"
#include "workers/core/worker.h"
#include "workers/data/coll_call.h"
#include "workers/data/collective.h"
#include "workers/data/collective_net.h"
#include "workers/data/tensor_impl.h"

/* Validates a tensor argument: ours, CPU (or, with device, in a worker's
 * device arena), compact, supported dtype. */
static disco_status_t tensor_arg_on(const disco_value_t *v, const char *what, bool device,
                                    DLTensor **out)
{
    if (v->type != DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "%s: expected a tensor, got %s", what,
                               disco_type_name(v->type));
    DLTensor *t = v->v.tensor;
    bool ours = disco__tensor_is_ours(t);
    if (ours && t->device.device_type != kDLCPU && !device)
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: the tensor is on device type %d: this collective takes CPU "
                               "tensors (the shared heap) only so far",
                               what, (int)t->device.device_type);
    if (!ours || (t->device.device_type != kDLCPU && !disco__tensor_is_device(t)))
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: the tensor is not in this session's shared heap", what);
    disco_status_t st = disco_dtype_check(t->dtype);
    if (st != DISCO_OK)
        return st;
    *out = t;
    return DISCO_OK;
}

static bool flag(const disco_value_t *args, int nargs, int i)
{
    return i < nargs && args[i].type == DISCO_T_BOOL && args[i].v.b;
}

/* ---- builtins ---- */

/* disco.empty(shape, dtype, device, worker0_only[, in_group]): a new tensor
 * (contents unspecified); with worker0_only, null on the other workers, or,
 * with in_group too (TVM's meaning), on every worker but each group's first.
 * A CPU device makes it in the shared heap; a sim or CUDA device in each
 * worker's device arena, on the worker's own device (worker i -> device i
 * mod count: the device's id is not used). */
static disco_status_t empty(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    uint32_t groups = ctx->worker != NULL && ctx->worker->ngroups > 1 ? ctx->worker->ngroups : 1;
    int group_size = ctx->world / (int)groups;
    /* worker0_only: the session's worker 0 (a global id, across nodes too);
     * with in_group, each group's first (groups never span nodes). */
    bool in_group = flag(a, n, 4) && group_size > 0 && !disco__worker_crosses(ctx->worker, true);
    int leader = in_group ? ctx->worker_id / group_size * group_size : 0;
    int me = in_group ? ctx->worker_id : disco_ctx_worker_id(ctx);
    if (flag(a, n, 3) && me != leader)
        return DISCO_OK;
    DLDevice dev = a[2].v.device;
    DLTensor *t;
    disco_status_t st =
        disco_ctx_empty_device(ctx, a[0].v.shape, (int)a[0].len, a[1].v.dtype, dev.device_type, &t);
    if (st == DISCO_OK)
        *ret = disco_value_tensor(t);
    return st;
}

/* disco.allreduce(x, op, in_group): every member gets op over the members' x.
 * Heap tensors: member r reduces slice r of all inputs and writes it into
 * every member's output (a reduce-scatter and an allgather in one pass).
 * Device tensors: kernels on every member (collective_dev.c); across nodes,
 * staged through the host (staged). */
static disco_status_t allreduce_body(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                     disco_value_t *ret)
{
    DLTensor *x = NULL, *out = NULL;
    disco_reduce_op_t op = DISCO_REDUCE_SUM;
    disco_status_t st = n < 2 ? disco_set_error(DISCO_E_ARG_COUNT, "allreduce(x, op, in_group)")
                              : tensor_arg_on(&a[0], "allreduce", true, &x);
    if (st == DISCO_OK && (a[1].type != DISCO_T_STR || !disco_reduce_parse(a[1].v.str, &op)))
        st = disco_set_error(DISCO_E_INVAL, "allreduce: op must be sum, prod, min, max or avg");
    if (st == DISCO_OK) /* in the heap, or on this worker's device, as x */
        st = disco_ctx_empty_device(ctx, x->shape, x->ndim, x->dtype, x->device.device_type, &out);
    st = disco__coll_allreduce_into(ctx, flag(a, n, 2), st, x, out, op);
    if (st == DISCO_OK)
        *ret = disco_value_tensor(out);
    return st;
}

/* A collective of device tensors across nodes (allreduce, allgather,
 * gather): no GPU-aware path between nodes here, so each member copies its
 * input to a heap tensor, the host collective (body) runs across the
 * nodes, and its result (if this member gets one) is copied to a new
 * tensor on the member's device. A member whose staging fails passes null,
 * so that every member still meets and fails alike (its own error is the
 * one it returns). */
static disco_status_t staged(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret,
                             disco_func_t body)
{
    const DLTensor *x = a[0].v.tensor;
    DLTensor *h = NULL, *dev = NULL;
    disco_status_t st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &h);
    if (st == DISCO_OK)
        st = disco__tensor_copy_out(x, h);
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", st == DISCO_OK ? "" : disco_last_error());
    disco_value_t args[4];
    for (int i = 0; i < 4; i++)
        args[i] = i < n ? a[i] : disco_value_null();
    args[0] = st == DISCO_OK ? disco_value_tensor(h) : disco_value_null();
    disco_value_t r = disco_value_null();
    disco_status_t bst = body(ctx, args, n < 4 ? n : 4, &r);
    if (st != DISCO_OK)
        return disco_set_error(st, "staging worker %d's device tensor: %s",
                               disco_ctx_worker_id(ctx), why);
    if (bst != DISCO_OK || r.type != DISCO_T_TENSOR)
        return bst; /* an error, or no result on this member (gather) */
    const DLTensor *y = r.v.tensor;
    st = disco_ctx_empty_device(ctx, y->shape, y->ndim, y->dtype, x->device.device_type, &dev);
    if (st == DISCO_OK)
        st = disco__tensor_copy_out(y, dev);
    if (st == DISCO_OK)
        *ret = disco_value_tensor(dev);
    return st;
}

/* Whether a[0] is a device tensor of a collective (in_group: argument
 * in_group_at) that crosses nodes: then it is staged. */
static bool stage_it(const disco_ctx_t *ctx, const disco_value_t *a, int n, int in_group_at)
{
    return n >= 1 && a[0].type == DISCO_T_TENSOR && disco__tensor_is_ours(a[0].v.tensor) &&
           disco__tensor_is_device(a[0].v.tensor) && ctx->worker != NULL &&
           disco__worker_crosses(ctx->worker, flag(a, n, in_group_at));
}

static disco_status_t allreduce(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    return n >= 2 && stage_it(ctx, a, n, 2) ? staged(ctx, a, n, ret, allreduce_body)
                                            : allreduce_body(ctx, a, n, ret);
}

/* The tensor a leader shares: validated, with refs added for the others. */
static DLTensor *lead_share(struct disco__coll_call *c, const disco_value_t *a, int n,
                            const char *what, bool device)
{
    DLTensor *x = NULL;
    disco_status_t st = n < 1 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, in_group)", what)
                              : tensor_arg_on(&a[0], what, device, &x);
    if (st != DISCO_OK) {
        disco__coll_fail(c, st, disco_last_error());
        return NULL;
    }
    disco__coll_post_tensor(c, x, false);
    return x;
}

/* Adopts (or references) member rank's posted input as a tensor owned by
 * the call: byte_off into it, dimension 0 replaced by dim0 if >= 0. The
 * block and the bytes are checked to lie in the heap. */
static disco_status_t take(disco_ctx_t *ctx, struct disco__coll_call *c, int rank,
                           uint64_t byte_off, int64_t dim0, bool adopt, disco_value_t *ret)
{
    const struct disco__coll_posted *l = &c->post[rank];
    int64_t shape[DISCO_MAX_NDIM];
    memcpy(shape, l->shape, sizeof shape);
    if (l->ndim > 0 && dim0 >= 0)
        shape[0] = dim0;
    uint64_t at;
    if (__builtin_add_overflow(l->in_off, byte_off, &at))
        return disco_set_error(DISCO_E_PROTOCOL, "%s: worker %d posted offset %llu", c->what,
                               c->base + rank, (unsigned long long)l->in_off);
    DLTensor *t;
    disco_status_t st =
        disco__tensor_from_block(c->w->heap, l->in_block, at, shape, l->ndim, l->dtype, adopt, &t);
    if (st == DISCO_OK && (st = disco__ctx_own(ctx, t)) == DISCO_OK)
        *ret = disco_value_tensor(t);
    return st;
}

/* disco.broadcast_from_worker0(x, in_group): every member gets worker 0's x
 * (the group leader's) by reference: O(1) in the size. The result shares the
 * bytes: treat it as read-only, or copy before writing in place. */
static disco_status_t broadcast(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, flag(a, n, 1), DISCO__K_BROADCAST, &c);
    /* The session's worker 0 shares its x; across nodes each other node's
     * leader shares the copy it receives (collective_net.c). */
    bool source = c.rank == 0 && (!c.across || c.w->gid_base == 0);
    DLTensor *x = source ? lead_share(&c, a, n, "broadcast_from_worker0", true) : NULL;
    if (c.across && c.rank == 0)
        x = disco__coll_net_share_lead(ctx, &c, x, false);
    if (x != NULL && x->device.device_type == kDLCPU)
        disco__tensor_add_refs(x, (uint32_t)c.size - 1);
    disco_status_t st = disco__coll_meet(&c);
    if (st == DISCO_OK && c.post[0].dev_type != 0) /* a copy each, device to device */
        st = disco__coll_dev_copy_of(ctx, &c, 0, x, ret);
    else if (st == DISCO_OK)
        st = take(ctx, &c, 0, 0, -1, c.rank != 0, ret);
    return disco__coll_end(&c, st); /* one more barrier before slots are reused */
}

/* disco.scatter_from_worker0(x, in_group): member r gets rows
 * [r*d0/size, (r+1)*d0/size) of worker 0's x, by reference. */
static disco_status_t scatter(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, flag(a, n, 1), DISCO__K_SCATTER, &c);
    /* The session's worker 0 shares x; across nodes each other node's
     * leader shares its node's block of rows, received (collective_net.c).
     * parts: how many members x's rows are for. */
    int parts = c.across ? c.w->gworld : c.size;
    bool source = c.rank == 0 && (!c.across || c.w->gid_base == 0);
    DLTensor *x = source ? lead_share(&c, a, n, "scatter_from_worker0", true) : NULL;
    /* By element count, as TVM: rows when dimension 0 divides, else flat
     * pieces of numel / parts (a (3,4,3) x into two of 18; across nodes,
     * rows only). test_threaded.c's test_scatter_by_count and
     * test_tvm_parity.py's test_scatter_with_implicit_reshape hold it. */
    if (x != NULL && (x->ndim == 0 || (x->shape[0] % parts != 0 &&
                                       (c.across || disco_tensor_numel(x) % parts != 0)))) {
        disco_set_error(DISCO_E_MISMATCH, "scatter: dimension 0 (%lld) is not a multiple of %d%s",
                        x->ndim ? (long long)x->shape[0] : 0LL, parts,
                        c.across || x->ndim == 0 ? "" : ", nor is the element count");
        disco__coll_fail(&c, DISCO_E_MISMATCH, disco_last_error());
    }
    if (c.across && c.rank == 0)
        x = disco__coll_net_share_lead(ctx, &c, x, true);
    if (x != NULL && c.local == DISCO_OK && x->device.device_type == kDLCPU)
        disco__tensor_add_refs(x, (uint32_t)c.size - 1);
    disco_status_t st = disco__coll_meet(&c);
    if (st != DISCO_OK)
        return st;
    /* Node 0's posted x holds every member's rows; another node's block
     * its own members' only. */
    int div = c.across && c.w->gid_base == 0 ? parts : c.size;
    struct disco__coll_posted *l = &c.post[0];   /* this call's copy */
    if (l->ndim > 0 && l->shape[0] % div != 0) { /* flat pieces (checked by worker 0) */
        int64_t numel = 1;
        for (int32_t d = 0; d < l->ndim; d++)
            numel *= l->shape[d]; /* no overflow: nbytes of it was checked */
        l->ndim = 1;
        l->shape[0] = numel;
    }
    int64_t rows = l->ndim > 0 ? l->shape[0] / div : 0;
    uint64_t chunk = l->nbytes / (uint64_t)div;
    if (l->dev_type != 0) /* a copy of its rows on each member's device */
        st = disco__coll_dev_scatter(ctx, &c, rows, chunk, ret);
    else
        st = take(ctx, &c, 0, chunk * (uint64_t)c.rank, rows, c.rank != 0, ret);
    return disco__coll_end(&c, st); /* one more barrier before slots are reused */
}

static DLTensor *gather_post(disco_ctx_t *ctx, struct disco__coll_call *c, disco_status_t pre,
                             DLTensor *x, DLTensor *given, const char *what, bool want_out,
                             int mult, DLTensor **x_out);

/* Checks that out has x's dtype and device type and shape's element count
 * (x's ndim; any shape of that count, as TVM's destinations). */
static disco_status_t same_geometry(DLTensor *out, const int64_t *shape, const DLTensor *x,
                                    const char *what, DLTensor **out_p)
{
    int64_t want = 1;
    bool same = out->dtype.code == x->dtype.code && out->dtype.bits == x->dtype.bits &&
                out->dtype.lanes == x->dtype.lanes &&
                out->device.device_type == x->device.device_type;
    for (int d = 0; same && d < x->ndim; d++)
        same = !__builtin_mul_overflow(want, shape[d], &want);
    if (!same || disco_tensor_numel(out) != want)
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: the output must have the input's dtype and device and its "
                               "elements times the members (%lld), as its shape with dimension 0 "
                               "times the members (%lld rows)",
                               what, (long long)want, x->ndim > 0 ? (long long)shape[0] : 0LL);
    *out_p = out;
    return DISCO_OK;
}

/* Validates x and, when want_out, allocates an output with dimension 0
 * multiplied by mult (the group size; across nodes the world, or a node's
 * workers for a leader's block); posts both. Across nodes, device tensors
 * are refused (every member alike). */
static DLTensor *gather_prep(disco_ctx_t *ctx, struct disco__coll_call *c, const disco_value_t *a,
                             int n, const char *what, bool want_out, int mult, DLTensor **x_out)
{
    DLTensor *x = NULL;
    disco_status_t st = n < 1 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, in_group)", what)
                              : tensor_arg_on(&a[0], what, true, &x);
    return gather_post(ctx, c, st, x, NULL, what, want_out, mult, x_out);
}

/* As gather_prep for x validated already (pre: its verdict) and, with
 * given (comm.h's caller's output), that output checked instead of a new
 * one: x's dtype and device, dimension 0 times mult. */
static DLTensor *gather_post(disco_ctx_t *ctx, struct disco__coll_call *c, disco_status_t pre,
                             DLTensor *x, DLTensor *given, const char *what, bool want_out,
                             int mult, DLTensor **x_out)
{
    DLTensor *out = NULL;
    disco_status_t st = pre;
    if (st == DISCO_OK && x->ndim == 0)
        st = disco_set_error(DISCO_E_MISMATCH, "%s: a scalar has no dimension 0", what);
    if (st == DISCO_OK && want_out) {
        int64_t shape[DISCO_MAX_NDIM];
        memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
        /* Checked: a tensor with a 0 dimension may have any dimension 0. */
        if (__builtin_mul_overflow(shape[0], (int64_t)mult, &shape[0]))
            st = disco_set_error(DISCO_E_OVERFLOW, "%s: dimension 0 (%lld) times %d overflows",
                                 what, (long long)x->shape[0], mult);
        else if (given != NULL) /* the caller's: its geometry checked */
            st = same_geometry(given, shape, x, what, &out);
        else /* in the heap, or on this worker's device, as x */
            st = disco_ctx_empty_device(ctx, shape, x->ndim, x->dtype, x->device.device_type, &out);
    }
    if (st != DISCO_OK) {
        disco__coll_fail(c, st, disco_last_error());
        return NULL;
    }
    if (c->across)
        disco__coll_net_refuse_op(c, DISCO_REDUCE_SUM, x->device.device_type != kDLCPU);
    disco__coll_post_tensor(c, x, false);
    if (out != NULL)
        disco__coll_post_tensor(c, out, true);
    *x_out = x;
    return out;
}

/* disco.gather_to_worker0(x, in_group): worker 0 (the group leader) gets the
 * members' x stacked along dimension 0; the others get null. */
static disco_status_t gather_body(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, flag(a, n, 1), DISCO__K_GATHER, &c);
    /* Across nodes every node's leader makes an output: node 0's the
     * result (every worker's rows), the others' their node's block. */
    int mult = c.across && c.w->gid_base == 0 ? c.w->gworld : c.size;
    DLTensor *x = NULL;
    DLTensor *out = gather_prep(ctx, &c, a, n, "gather_to_worker0", c.rank == 0, mult, &x);
    disco_status_t st = disco__coll_meet(&c);
    if (st == DISCO_OK)
        st = disco__coll_same_inputs(&c, false);
    if (st != DISCO_OK)
        return st;
    size_t nb = disco_tensor_nbytes(x);
    if (c.across) {
        char *lead;
        if ((st = disco__coll_span_check(&c, 0, true, 0, nb * (size_t)mult, &lead)) == DISCO_OK)
            st = disco__coll_net_gather(&c, x->data, nb, lead);
        if (st == DISCO_OK && out != NULL && c.w->gid_base == 0)
            *ret = disco_value_tensor(out);
        return st;
    }
    if (c.post[0].dev_type != 0) { /* into worker 0's arena, device to device */
        st = disco__coll_dev_gather(&c, x, nb);
        if (st == DISCO_OK && out != NULL)
            *ret = disco_value_tensor(out);
        return st;
    }
    char *dst;
    if ((st = disco__coll_span_check(&c, 0, true, 0, nb * (size_t)c.size, &dst)) != DISCO_OK)
        return st; /* a verdict on the leader's slot: the same on every member */
    memcpy(dst + nb * (size_t)c.rank, x->data, nb);
    if ((st = disco__coll_barrier(&c)) != DISCO_OK)
        return st;
    if (out != NULL)
        *ret = disco_value_tensor(out);
    return DISCO_OK;
}

static disco_status_t allgather_run(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                    DLTensor *xin, DLTensor *given, DLTensor **out_p);

/* disco.allgather(x, in_group): every member gets the members' x stacked
 * along dimension 0. */
static disco_status_t allgather_body(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                     disco_value_t *ret)
{
    DLTensor *x = NULL, *out = NULL;
    disco_status_t st = n < 1 ? disco_set_error(DISCO_E_ARG_COUNT, "allgather(x, in_group)")
                              : tensor_arg_on(&a[0], "allgather", true, &x);
    st = allgather_run(ctx, flag(a, n, 1), st, x, NULL, &out);
    if (st == DISCO_OK)
        *ret = disco_value_tensor(out);
    return st;
}

disco_status_t disco__coll_allgather_into(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                          const DLTensor *x, DLTensor *out)
{
    DLTensor *res;
    return allgather_run(ctx, in_group, pre, (DLTensor *)x, out, &res);
}

/* The one allgather: into given (NULL: a new output, *out_p). */
static disco_status_t allgather_run(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                    DLTensor *xin, DLTensor *given, DLTensor **out_p)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_ALLGATHER, &c);
    int mult = c.across ? c.w->gworld : c.size;
    DLTensor *x = NULL;
    DLTensor *out = gather_post(ctx, &c, pre, xin, given, "allgather", true, mult, &x);
    disco_status_t st = disco__coll_meet(&c);
    if (st == DISCO_OK)
        st = disco__coll_same_inputs(&c, false);
    if (st != DISCO_OK)
        return st;
    size_t nb = disco_tensor_nbytes(x);
    if (c.across) { /* the leaders exchange their nodes' blocks (collective_net.c) */
        char *outs[DISCO_MAX_WORKERS];
        for (int r = 0; r < c.size; r++)
            if ((st = disco__coll_span_check(&c, r, true, 0, nb * (size_t)mult, &outs[r])) !=
                DISCO_OK)
                return st; /* a verdict on the slots: the same on every member */
        if ((st = disco__coll_net_allgather(&c, x->data, nb, outs)) == DISCO_OK)
            *out_p = out;
        return st;
    }
    if (c.post[0].dev_type != 0) { /* from every member's arena, device to device */
        st = disco__coll_dev_allgather(&c, out, nb);
        if (st == DISCO_OK)
            *out_p = out;
        return st;
    }
    char *ins[DISCO_MAX_WORKERS];
    for (int r = 0; r < c.size; r++)
        if ((st = disco__coll_span_check(&c, r, false, 0, nb, &ins[r])) != DISCO_OK)
            return st; /* a verdict on the slots: the same on every member */
    for (int r = 0; r < c.size; r++)
        memcpy((char *)out->data + nb * (size_t)r, ins[r], nb);
    /* Nobody may free an input while another member still reads it. */
    if ((st = disco__coll_barrier(&c)) != DISCO_OK)
        return st;
    *out_p = out;
    return DISCO_OK;
}

/* Device tensors across nodes are staged through the host (staged). */
static disco_status_t gather(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    return stage_it(ctx, a, n, 1) ? staged(ctx, a, n, ret, gather_body)
                                  : gather_body(ctx, a, n, ret);
}

static disco_status_t allgather(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    return stage_it(ctx, a, n, 1) ? staged(ctx, a, n, ret, allgather_body)
                                  : allgather_body(ctx, a, n, ret);
}

/* disco.send_recv(x, src, dst): worker dst gets worker src's x by reference
 * (a device tensor: a copy on dst's device); every other worker gets null.
 * All workers take part. */
static disco_status_t send_recv(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, false, DISCO__K_SEND_RECV, &c);
    /* src and dst are global ids; across nodes, node ks sends and node kd
     * receives (collective_net.c); on one node, ks = kd = 0. */
    int parts = c.across ? c.w->gworld : c.size, me = c.w->gid_base / c.w->world;
    /* Range-checked as int64, before narrowing: 2**32 is no worker, not
     * worker 0 (test_send_recv_ids_wide). */
    int64_t src64 = n >= 3 && a[1].type == DISCO_T_INT ? a[1].v.i : -1;
    int64_t dst64 = n >= 3 && a[2].type == DISCO_T_INT ? a[2].v.i : -1;
    bool ok = src64 >= 0 && src64 < parts && dst64 >= 0 && dst64 < parts;
    int src = ok ? (int)src64 : -1, dst = ok ? (int)dst64 : -1;
    int ks = ok ? src / c.size : -1, kd = ok ? dst / c.size : -1;
    int ls = ok ? src % c.size : -1, ld = ok ? dst % c.size : -1;
    bool apart = ok && ks != kd; /* only across nodes */
    DLTensor *x = NULL;          /* the sender's, or the receiving leader's copy */
    if (!ok) {
        disco_set_error(DISCO_E_INVAL,
                        "send_recv(x, src, dst): src %" PRId64 ", dst %" PRId64
                        " of %d workers (ids 0..%d)",
                        src64, dst64, parts, parts - 1);
        disco__coll_fail(&c, DISCO_E_INVAL, disco_last_error());
    } else if (me == ks && c.rank == ls) {
        x = lead_share(&c, a, n, "send_recv", true);
        if (x != NULL && x->device.device_type == kDLCPU && !apart)
            disco__tensor_add_refs(x, 1);
    } else if (apart && me == kd && c.rank == 0) {
        x = disco__coll_net_recv_lead(ctx, &c, ks);
        if (x != NULL && ld != 0)
            disco__tensor_add_refs(x, 1);
    }
    disco_status_t st = disco__coll_meet(&c);
    if (apart && me == ks) { /* the leader sends; the sender's x lives until it has */
        disco_status_t sent = c.rank == 0 ? disco__coll_net_send_lead(&c, kd, st, ls) : DISCO_OK;
        uint32_t choice;
        if (st == DISCO_OK)
            st = disco__coll_go(&c, sent, 0, &choice);
    } else if (st == DISCO_OK && apart && me == kd && c.rank == ld) {
        st =
            ld == 0 ? (*ret = disco_value_tensor(x), DISCO_OK) : take(ctx, &c, 0, 0, -1, true, ret);
    } else if (st == DISCO_OK && !apart && me == ks && c.rank == ld && c.post[ls].dev_type != 0) {
        st = disco__coll_dev_copy_of(ctx, &c, ls, x, ret);
    } else if (st == DISCO_OK && !apart && me == ks && c.rank == ld) {
        st = take(ctx, &c, ls, 0, -1, true, ret);
    }
    return disco__coll_end(&c, st); /* one more barrier before slots are reused */
}

/* disco.copy_into(dst, src): copies src's bytes into dst on every worker
 * where src is a tensor (nothing where it is null, as a worker0_only
 * register or gather_to_worker0's result on the others). Same dtype and
 * element count (the shapes may differ: scatter's rows into a tensor of
 * one dimension fewer); heap or device tensors, either way. The result is
 * null. TVM's collectives write into a destination; disco's return a new
 * tensor, and the Python front copies it in with this. */
static disco_status_t copy_into(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    (void)ret;
    if (a[1].type == DISCO_T_NULL)
        return DISCO_OK;
    DLTensor *dst, *src;
    disco_status_t st = tensor_arg_on(&a[0], "copy_into: dst", true, &dst);
    if (st == DISCO_OK)
        st = tensor_arg_on(&a[1], "copy_into: src", true, &src);
    if (st != DISCO_OK)
        return st;
    if (dst->dtype.code != src->dtype.code || dst->dtype.bits != src->dtype.bits ||
        dst->dtype.lanes != src->dtype.lanes ||
        disco_tensor_numel(dst) != disco_tensor_numel(src)) {
        char a1[32], a2[32];
        return disco_set_error(
            DISCO_E_MISMATCH, "copy_into: dst is %s with %lld elements, src %s with %lld",
            disco_dtype_str(dst->dtype, a1, sizeof a1), (long long)disco_tensor_numel(dst),
            disco_dtype_str(src->dtype, a2, sizeof a2), (long long)disco_tensor_numel(src));
    }
    if (dst->data == src->data)
        return DISCO_OK;
    return disco__tensor_copy_out(src, dst);
}

void disco__coll_register(void)
{
    /* Each needs a session worker (its heap and collective area): refused
     * outside a session instead of dereferencing NULL. */
    disco__register_session_func("disco.empty", "Stdb*", empty);
    disco__register_session_func("disco.allreduce", NULL, allreduce);
    disco__register_session_func("disco.allgather", NULL, allgather);
    disco__register_session_func("disco.broadcast_from_worker0", NULL, broadcast);
    disco__register_session_func("disco.scatter_from_worker0", NULL, scatter);
    disco__register_session_func("disco.gather_to_worker0", NULL, gather);
    disco__register_session_func("disco.send_recv", NULL, send_recv);
    disco__register_session_func("disco.copy_into", "??", copy_into);
}
