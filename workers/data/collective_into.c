/* collective_into.c - the collectives into the caller's tensor (TVM's
 * in-place forms): disco.allreduce_into, allgather_into,
 * broadcast_from_worker0_into, scatter_from_worker0_into and
 * gather_to_worker0_into. Each writes the destination the caller passes,
 * directly: no new tensor, no second copy (the by-value builtins of
 * collective_ops.c make a new tensor, which a copy_into then copied).
 *
 * Checks, before any byte moves, with the error naming the builtin and the
 * argument: both are tensors of this session (its heap or a device arena:
 * DISCO_E_BAD_TYPE, DISCO_E_MISMATCH), compact (DISCO_E_INVAL); out has
 * x's dtype and device type (broadcast and scatter: any device type, each
 * member copying its part itself) and the element count the collective
 * writes (DISCO_E_MISMATCH); out does not overlap x (DISCO_E_INVAL), except
 * allreduce's out being x itself (in place) and broadcast's on worker 0.
 * A member whose checks fail before the meeting posts its failure, so that
 * every member fails alike with it; a check that needs worker 0's x (the
 * other members' out in broadcast and scatter) fails on that member only,
 * after the meeting, and the member still passes the call's barriers.
 * Across nodes, broadcast, scatter and gather run the by-value builtin and
 * copy its result into out (one copy more; allreduce and allgather write
 * out directly there too). */
#include <stdio.h>
#include <string.h>

#include "disco/comm.h"
#include "disco/device.h"
#include "disco/dtype.h"
#include "workers/core/registry.h"
#include "workers/core/worker.h"
#include "workers/data/coll_call.h"
#include "workers/data/collective.h"
#include "workers/data/tensor_impl.h"

static bool flag(const disco_value_t *args, int nargs, int i)
{
    return i < nargs && args[i].type == DISCO_T_BOOL && args[i].v.b;
}

/* A device type as a collective slot holds it: 0 for the heap. */
static uint32_t dev_of(const DLTensor *t)
{
    return t->device.device_type == kDLCPU ? 0 : (uint32_t)t->device.device_type;
}

/* Validates argument which (x or out) of what: a tensor of this session
 * (heap or device arena), compact, of a supported dtype. */
static disco_status_t arg_tensor(const disco_value_t *v, const char *what, const char *which,
                                 DLTensor **out)
{
    if (v->type != DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "%s: %s: expected a tensor, got %s", what, which,
                               disco_type_name(v->type));
    DLTensor *t = v->v.tensor;
    if (!disco__tensor_is_ours(t) ||
        (t->device.device_type != kDLCPU && !disco__tensor_is_device(t)))
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: %s is not in this session's shared heap or a device arena",
                               what, which);
    if (!disco_tensor_is_compact(t))
        return disco_set_error(DISCO_E_INVAL, "%s: %s is not compact (row-major)", what, which);
    disco_status_t st = disco_dtype_check(t->dtype);
    if (st != DISCO_OK)
        return disco_set_error(st, "%s: %s: %s", what, which, disco_last_error());
    *out = t;
    return DISCO_OK;
}

/* Checks that out is a dtype tensor of numel elements on device type dev
 * (or, with any_dev, on any: a member that copies its part itself). */
static disco_status_t check_out(const char *what, const DLTensor *out, DLDataType dtype,
                                uint32_t dev, bool any_dev, int64_t numel)
{
    if (out->dtype.code == dtype.code && out->dtype.bits == dtype.bits &&
        out->dtype.lanes == dtype.lanes && (any_dev || dev_of(out) == dev) &&
        disco_tensor_numel(out) == numel)
        return DISCO_OK;
    char a[32], b[32];
    return disco_set_error(DISCO_E_MISMATCH,
                           "%s: out is %s with %lld elements on device type %u; it must be %s with "
                           "%lld elements%s%u%s",
                           what, disco_dtype_str(out->dtype, a, sizeof a),
                           (long long)disco_tensor_numel(out), dev_of(out),
                           disco_dtype_str(dtype, b, sizeof b), (long long)numel,
                           any_dev ? " (x on device type " : " on device type ", dev,
                           any_dev ? ", any device type)" : "");
}

/* Whether the bytes of a and b (on one device type) intersect. */
static bool overlaps(const DLTensor *a, const DLTensor *b)
{
    if (dev_of(a) != dev_of(b))
        return false;
    const char *pa = (const char *)a->data + a->byte_offset;
    const char *pb = (const char *)b->data + b->byte_offset;
    size_t na = disco_tensor_nbytes(a), nb = disco_tensor_nbytes(b);
    return na != 0 && nb != 0 && pa < pb + nb && pb < pa + na;
}

static disco_status_t overlap_error(const char *what)
{
    return disco_set_error(DISCO_E_INVAL,
                           "%s: out overlaps x (other members read x while out is written)", what);
}

/* Copies len bytes at off of member rank's posted input into out (this
 * member's own, on any device type): memcpy in the heap, a synced copy from
 * the heap onto a device, a copy on this member's arena stream from a
 * device tensor (the call's end syncs it). Bytes already in place (worker
 * 0's broadcast into x) are not copied. */
static disco_status_t copy_part(struct disco__coll_call *c, int rank, uint64_t off, uint64_t len,
                                DLTensor *out)
{
    if (c->post[rank].dev_type != 0)
        return disco__coll_dev_copy_part(c, rank, off, len, out);
    char *src, *dst = (char *)out->data + out->byte_offset;
    disco_status_t st = disco__coll_span_check(c, rank, false, off, len, &src);
    if (st != DISCO_OK || src == dst || len == 0)
        return st;
    if (out->device.device_type == kDLCPU) {
        memcpy(dst, src, (size_t)len);
        return DISCO_OK;
    }
    /* heap bytes into a device tensor: on the device's default stream,
     * synced before the end barrier lets the poster reuse its x */
    DLDevice cpu = {kDLCPU, 0};
    if ((st = disco_device_copy(dst, out->device, src, cpu, (size_t)len, NULL)) == DISCO_OK)
        st = disco_device_stream_sync(out->device, NULL);
    return st;
}

/* Across nodes: runs the by-value builtin name over (x, in_group), then
 * copies its result (where this member gets one) into out. */
static disco_status_t by_value(disco_ctx_t *ctx, const char *name, const char *what,
                               const disco_value_t *a, int n, bool want_out)
{
    uint64_t h;
    /* The registry itself, not disco__func_find (lookup.c registers this
     * file's builtins: no arrow back to it); builtins are registered
     * before any of them runs. */
    disco_status_t st = disco__registry_find(name, &h);
    const struct disco__func *f = st == DISCO_OK ? disco__func_at(h) : NULL;
    if (f == NULL)
        return st != DISCO_OK ? st : disco_set_error(DISCO_E_NO_FUNC, "%s: no %s", what, name);
    /* Acquire: pairs with the registration's release of the binding. */
    const struct disco__binding *b = atomic_load_explicit(&f->bound, memory_order_acquire);
    disco_value_t args[2] = {a[0], disco_value_bool(flag(a, n, 2))}, res = disco_value_null();
    if ((st = b->fn(ctx, args, 2, &res)) != DISCO_OK || res.type != DISCO_T_TENSOR)
        return st;
    DLTensor *out;
    if (!want_out || (st = arg_tensor(&a[1], what, "out", &out)) != DISCO_OK)
        return st;
    const DLTensor *y = res.v.tensor;
    if ((st = check_out(what, out, y->dtype, dev_of(y), true, disco_tensor_numel(y))) != DISCO_OK)
        return st;
    return y->data == out->data ? DISCO_OK : disco__tensor_copy_out(y, out);
}

/* disco.allreduce_into(x, out, op, in_group): op over the members' x into
 * every member's out (x's dtype, shape and device; out may be x). */
static disco_status_t allreduce_into(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                     disco_value_t *ret)
{
    (void)ret;
    const char *what = "allreduce_into";
    DLTensor *x = NULL, *out = NULL;
    disco_reduce_op_t op = DISCO_REDUCE_SUM;
    disco_status_t st =
        n < 3 ? disco_set_error(DISCO_E_ARG_COUNT, "allreduce_into(x, out, op, in_group)")
              : arg_tensor(&a[0], what, "x", &x);
    if (st == DISCO_OK)
        st = arg_tensor(&a[1], what, "out", &out);
    if (st == DISCO_OK && (a[2].type != DISCO_T_STR || !disco_reduce_parse(a[2].v.str, &op)))
        st = disco_set_error(DISCO_E_INVAL, "%s: op must be sum, prod, min, max or avg", what);
    if (st == DISCO_OK && (!disco_tensor_same_layout(x, out) || dev_of(x) != dev_of(out))) {
        char dx[32], dout[32], sx[96], sout[96];
        st = disco_set_error(DISCO_E_MISMATCH,
                             "%s: out is %s of shape %s on device type %u, x %s of shape %s on "
                             "device type %u: out must have x's dtype, shape and device",
                             what, disco_dtype_str(out->dtype, dout, sizeof dout),
                             disco__shape_str(out->shape, out->ndim, sout, sizeof sout),
                             dev_of(out), disco_dtype_str(x->dtype, dx, sizeof dx),
                             disco__shape_str(x->shape, x->ndim, sx, sizeof sx), dev_of(x));
    }
    if (st == DISCO_OK && overlaps(x, out) && out->data != x->data)
        st = overlap_error(what); /* the same bytes (same layout): in place, allowed */
    if (st != DISCO_OK)           /* meet anyway: every member fails alike with this */
        return disco__coll_allreduce_into(ctx, flag(a, n, 3), st, NULL, NULL, op);
    /* The worker-side allreduce (comm.c): in place in the heap directly; in
     * place on a device or across nodes through a temporary. */
    return disco_ctx_allreduce(ctx, x, out, op, flag(a, n, 3));
}

/* disco.allgather_into(x, out, in_group): the members' x stacked along
 * dimension 0 into every member's out. */
static disco_status_t allgather_into(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                     disco_value_t *ret)
{
    (void)ret;
    const char *what = "allgather_into";
    DLTensor *x = NULL, *out = NULL;
    disco_status_t st = n < 2
                            ? disco_set_error(DISCO_E_ARG_COUNT, "allgather_into(x, out, in_group)")
                            : arg_tensor(&a[0], what, "x", &x);
    if (st == DISCO_OK)
        st = arg_tensor(&a[1], what, "out", &out);
    /* the members: across nodes every worker (collective_ops.c's mult) */
    disco_worker_t *w = ctx->worker;
    int64_t all = 0;
    int members = disco__worker_crosses(w, flag(a, n, 2)) ? w->gworld
                  : flag(a, n, 2)                         ? disco__worker_group_size(w)
                                                          : w->world;
    if (st == DISCO_OK && __builtin_mul_overflow(disco_tensor_numel(x), (int64_t)members, &all))
        st = disco_set_error(DISCO_E_OVERFLOW, "%s: x's elements times %d overflow", what, members);
    if (st == DISCO_OK)
        st = check_out(what, out, x->dtype, dev_of(x), false, all);
    if (st == DISCO_OK && overlaps(x, out))
        st = overlap_error(what);
    if (st != DISCO_OK)
        return disco__coll_allgather_into(ctx, flag(a, n, 2), st, NULL, NULL);
    return disco_ctx_allgather(ctx, x, out, flag(a, n, 2));
}

/* The second half of broadcast_into and scatter_into, after this member's
 * checks (st): worker 0 posts x (or every member posts its failure), the
 * members meet, and each copies its part of worker 0's x into its out: all
 * of it (broadcast), or the rank-th of size equal parts (split: scatter). */
static disco_status_t from_worker0(struct disco__coll_call *c, const char *what, const DLTensor *x,
                                   DLTensor *out, disco_status_t st, bool split)
{
    if (st == DISCO_OK && c->rank == 0)
        disco__coll_post_tensor(c, x, false);
    else if (st != DISCO_OK)
        disco__coll_fail(c, st, disco_last_error());
    if ((st = disco__coll_meet(c)) != DISCO_OK)
        return st; /* same verdict, same barriers on every member */
    const struct disco__coll_posted *l = &c->post[0];
    size_t esz = disco_dtype_bytes(l->dtype);
    uint64_t chunk = split ? l->nbytes / (uint64_t)c->size : l->nbytes;
    st = check_out(what, out, l->dtype, l->dev_type, true, esz ? (int64_t)(chunk / esz) : 0);
    if (st == DISCO_OK)
        st = copy_part(c, 0, split ? chunk * (uint64_t)c->rank : 0, chunk, out);
    return disco__coll_end(c, st); /* worker 0's x stays until every copy is done */
}

/* disco.broadcast_from_worker0_into(x, out, in_group): worker 0's x (each
 * group's first worker's) into every member's out (worker 0's out may be
 * x); x is read on worker 0 only. */
static disco_status_t broadcast_into(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                     disco_value_t *ret)
{
    (void)ret;
    const char *what = "broadcast_from_worker0_into";
    bool in_group = flag(a, n, 2);
    if (n >= 2 && disco__worker_crosses(ctx->worker, in_group))
        return by_value(ctx, "disco.broadcast_from_worker0", what, a, n, true);
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_BROADCAST, &c);
    DLTensor *x = NULL, *out = NULL;
    disco_status_t st = n < 2 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, out, in_group)", what)
                              : arg_tensor(&a[1], what, "out", &out);
    if (st == DISCO_OK && c.rank == 0 && (st = arg_tensor(&a[0], what, "x", &x)) == DISCO_OK)
        st = check_out(what, out, x->dtype, dev_of(x), true, disco_tensor_numel(x));
    if (st == DISCO_OK && c.rank == 0 && overlaps(x, out) && x->data != out->data)
        st = overlap_error(what);
    return from_worker0(&c, what, x, out, st, false);
}

/* disco.scatter_from_worker0_into(x, out, in_group): member r gets the r-th
 * of size equal parts of worker 0's x (by element count, as TVM: x of
 * (3, 4, 3) into two of (3, 3, 2)) in its out. */
static disco_status_t scatter_into(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                   disco_value_t *ret)
{
    (void)ret;
    const char *what = "scatter_from_worker0_into";
    bool in_group = flag(a, n, 2);
    if (n >= 2 && disco__worker_crosses(ctx->worker, in_group))
        return by_value(ctx, "disco.scatter_from_worker0", what, a, n, true);
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_SCATTER, &c);
    DLTensor *x = NULL, *out = NULL;
    disco_status_t st = n < 2 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, out, in_group)", what)
                              : arg_tensor(&a[1], what, "out", &out);
    if (st == DISCO_OK && c.rank == 0 && (st = arg_tensor(&a[0], what, "x", &x)) == DISCO_OK &&
        disco_tensor_numel(x) % c.size != 0)
        st = disco_set_error(DISCO_E_MISMATCH,
                             "%s: x has %lld elements, not a multiple of %d "
                             "members",
                             what, (long long)disco_tensor_numel(x), c.size);
    if (st == DISCO_OK && c.rank == 0 && overlaps(x, out))
        st = overlap_error(what);
    return from_worker0(&c, what, x, out, st, true);
}

/* disco.gather_to_worker0_into(x, out, in_group): the members' x stacked
 * along dimension 0 into worker 0's out (each group's first worker's);
 * out is read on worker 0 only (null elsewhere is fine). */
static disco_status_t gather_into(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)ret;
    const char *what = "gather_to_worker0_into";
    bool in_group = flag(a, n, 2);
    if (n >= 2 && disco__worker_crosses(ctx->worker, in_group))
        return by_value(ctx, "disco.gather_to_worker0", what, a, n, true);
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_GATHER, &c);
    DLTensor *x = NULL, *out = NULL;
    int64_t all;
    disco_status_t st = n < 2 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, out, in_group)", what)
                              : arg_tensor(&a[0], what, "x", &x);
    if (st == DISCO_OK && c.rank == 0 && (st = arg_tensor(&a[1], what, "out", &out)) == DISCO_OK)
        st = __builtin_mul_overflow(disco_tensor_numel(x), (int64_t)c.size, &all)
                 ? disco_set_error(DISCO_E_OVERFLOW, "%s: x's elements times %d overflow", what,
                                   c.size)
                 : check_out(what, out, x->dtype, dev_of(x), false, all);
    if (st == DISCO_OK && c.rank == 0 && overlaps(x, out))
        st = overlap_error(what);
    if (st == DISCO_OK) {
        disco__coll_post_tensor(&c, x, false);
        if (out != NULL)
            disco__coll_post_tensor(&c, out, true);
    } else {
        disco__coll_fail(&c, st, disco_last_error());
    }
    if ((st = disco__coll_meet(&c)) != DISCO_OK ||
        (st = disco__coll_same_inputs(&c, false)) != DISCO_OK)
        return st; /* same verdict, same barriers on every member */
    size_t nb = disco_tensor_nbytes(x);
    if (c.post[0].dev_type != 0) /* into worker 0's arena, device to device */
        return disco__coll_dev_gather(&c, x, nb);
    char *dst;
    if ((st = disco__coll_span_check(&c, 0, true, nb * (size_t)c.rank, nb, &dst)) != DISCO_OK)
        return st; /* a verdict on the leader's slot: the same on every member */
    memcpy(dst, (const char *)x->data + x->byte_offset, nb);
    return disco__coll_barrier(&c);
}

void disco__coll_into_register(void)
{
    disco__register_session_func("disco.allreduce_into", NULL, allreduce_into);
    disco__register_session_func("disco.allgather_into", NULL, allgather_into);
    disco__register_session_func("disco.broadcast_from_worker0_into", NULL, broadcast_into);
    disco__register_session_func("disco.scatter_from_worker0_into", NULL, scatter_into);
    disco__register_session_func("disco.gather_to_worker0_into", NULL, gather_into);
}
