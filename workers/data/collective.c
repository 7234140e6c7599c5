/* collective.c - empty, allreduce, allgather, broadcast, scatter, gather and
 * send/recv over the shared heap (see collective.h). */
#include "workers/data/collective.h"

#include <stdio.h>
#include <string.h>

#include "shm/text.h"
#include "disco/dtype.h"
#include "workers/core/registry.h"
#include "workers/data/tensor_impl.h"
#include "workers/core/worker.h"

#define CHUNK_BYTES (256u * 1024u) /* reduce, then copy out, a cache-sized piece at a time */

size_t disco__coll_footprint(uint32_t world, uint32_t num_groups)
{
    return sizeof(struct disco__coll_area) + num_groups * sizeof(struct disco__barrier) +
           2 * world * sizeof(struct disco__coll_slot) + world * sizeof(struct disco__coll_mark);
}

void disco__coll_init(struct disco__coll_area *a, uint32_t world, uint32_t num_groups)
{
    a->world = world;
    a->num_groups = num_groups;
}

struct disco__coll_slot *disco__coll_slot(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t parity, uint32_t w)
{
    struct disco__coll_slot *slots = (struct disco__coll_slot *)&a->group_barrier[num_groups];
    return &slots[(parity & 1) * world + w];
}

struct disco__coll_mark *disco__coll_mark(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t w)
{
    return (struct disco__coll_mark *)disco__coll_slot(a, world, num_groups, 0, 2 * world) + w;
}

/* ---- barrier ---- */

struct gen_arg {
    struct disco__barrier *b;
    uint32_t gen;
};

static bool gen_moved(void *p)
{
    struct gen_arg *a = p;
    /* Acquire: pairs with the last arriver's acq_rel swap, which read every
     * earlier arrival (each acq_rel), so every member's slot and data
     * writes before arriving are visible. */
    return (uint32_t)(atomic_load_explicit(&a->b->state, memory_order_acquire) >> 32) != a->gen;
}

/* Arrives and waits for the others (see collective.h). On a failed wait,
 * withdraws the arrival (A1) and returns the wait's status; returns
 * DISCO_OK if the barrier was passed, even as the wait gave up. */
static disco_status_t barrier_wait(struct disco__barrier *b, uint32_t n, const disco_wait_t *w)
{
    /* Relaxed: only a first guess for the swap, which reads the latest. */
    uint64_t cur = atomic_load_explicit(&b->state, memory_order_relaxed), next;
    do /* acq_rel: our writes are released to the last arriver, and the last
        * arriver acquires everyone's before it starts the next generation. */
        next = (uint32_t)cur == n - 1 ? ((cur >> 32) + 1) << 32 : cur + 1;
    while (!atomic_compare_exchange_weak_explicit(&b->state, &cur, next, memory_order_acq_rel,
                                                  memory_order_relaxed));
    uint32_t gen = (uint32_t)(cur >> 32);
    if ((uint32_t)cur == n - 1) {
        disco_waitq_wake(&b->q);
        return DISCO_OK;
    }
    struct gen_arg a = {b, gen};
    disco_status_t st = disco_wait_until(&b->q, gen_moved, &a, w);
    if (st == DISCO_OK)
        return DISCO_OK;
    /* A1. Acquire (load and failed swaps): if the generation moved, we
     * passed and need the others' writes, as gen_moved does. acq_rel on
     * success: a withdrawal is an arrival undone, ordered like one. */
    cur = atomic_load_explicit(&b->state, memory_order_acquire);
    while ((uint32_t)(cur >> 32) == gen)
        if (atomic_compare_exchange_weak_explicit(&b->state, &cur, cur - 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return st;
    return DISCO_OK;
}

/* ---- one collective call ---- */

/* What a member posted, copied out of its slot once after the meeting and
 * checked there (collective.h, Trust): nothing is read from the slot again,
 * so a member that rewrites it later cannot slip past the checks. */
struct posted {
    uint64_t in_block, in_off, out_block, out_off;
    int32_t ndim;
    DLDataType dtype;
    int64_t shape[DISCO_MAX_NDIM];
    uint64_t nbytes; /* of ndim, shape and dtype: checked not to overflow */
};

struct coll {
    disco_worker_t *w;
    struct disco__coll_area *a;
    struct disco__barrier *bar;
    int rank, size, base; /* within the group; base = first worker of the group */
    int ngroups;          /* groups in the world (this process's copy) */
    uint32_t parity;      /* which of the two slot sets this collective uses */
    uint32_t phase;       /* barriers this member has arrived at in this call */
    const char *what;     /* the collective's name, for messages */
    bool met;             /* the meeting succeeded */
    struct disco__coll_slot *me;
    disco_status_t local;                  /* this member's verdict so far */
    struct posted post[DISCO_MAX_WORKERS]; /* by rank, after a successful meeting */
};

static void coll_begin(disco_ctx_t *ctx, bool in_group, const char *what, struct coll *c)
{
    disco_worker_t *w = ctx->worker;
    c->w = w;
    c->what = what;
    c->phase = 0;
    c->a = w->coll;
    /* The geometry is this process's own copy: the area's header is shared
     * memory that any member could overwrite. */
    int groups = w->ngroups > 0 ? (int)w->ngroups : 1;
    c->ngroups = groups;
    c->size = in_group ? w->world / groups : w->world;
    c->base = in_group ? w->id / c->size * c->size : 0;
    c->rank = w->id - c->base;
    c->bar = in_group ? &c->a->group_barrier[w->id / c->size] : &c->a->world_barrier;
    /* Every worker runs the same sequence of collectives, so the count's
     * parity agrees across members. Alternating slot sets lets a member that
     * finished start the next collective while others still read its slot. */
    c->parity = (uint32_t)(w->ncoll++ & 1);
    c->me =
        disco__coll_slot(c->a, (uint32_t)w->world, (uint32_t)groups, c->parity, (uint32_t)w->id);
    memset(c->me, 0, sizeof *c->me);
    c->me->seq = w->seq;
    c->local = DISCO_OK;
    c->met = false;
}

static struct disco__coll_slot *member(struct coll *c, int rank)
{
    return disco__coll_slot(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups, c->parity,
                            (uint32_t)(c->base + rank));
}

/* Records this member's failure (the first one) for everyone to see. */
static void coll_fail(struct coll *c, disco_status_t st, const char *msg)
{
    if (c->local != DISCO_OK)
        return;
    c->local = st;
    c->me->status = st;
    snprintf(c->me->msg, sizeof c->me->msg, "%s", msg);
}

static void post_tensor(struct coll *c, const DLTensor *t, bool out)
{
    if (out) {
        c->me->out_block = disco__tensor_block(t);
        c->me->out_off = disco__tensor_byte_offset(t);
        return;
    }
    c->me->in_block = disco__tensor_block(t);
    c->me->in_off = disco__tensor_byte_offset(t);
    c->me->dtype = t->dtype;
    c->me->ndim = t->ndim;
    memcpy(c->me->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

/* A2 and A3 (collective.h): the members that had not marked this barrier,
 * handed to the worker's abandon hook before anything of the call is freed. */
static disco_status_t abandon(struct coll *c, disco_status_t st)
{
    int late[DISCO_MAX_WORKERS], nlate = 0;
    uint64_t want = c->w->seq << 8 | c->phase;
    for (int r = 0; r < c->size; r++) {
        int id = c->base + r;
        /* Acquire: pairs with the member's release of its mark. */
        if (id != c->w->id &&
            atomic_load_explicit(
                &disco__coll_mark(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups, (uint32_t)id)
                     ->at,
                memory_order_acquire) < want)
            late[nlate++] = id;
    }
    if (c->w->abandon == NULL)
        return st;
    return c->w->abandon(c->w->abandon_ctx, st, late, nlate, c->what);
}

/* Marks this member's arrival at its next barrier, then arrives and waits;
 * a failed wait gives the collective up (A1-A3). */
static disco_status_t coll_barrier(struct coll *c)
{
    c->phase++;
    /* Release: this phase's writes (our slot, our part of the others'
     * outputs) come before the mark that says we are done with them. */
    atomic_store_explicit(
        &disco__coll_mark(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups, (uint32_t)c->w->id)
             ->at,
        c->w->seq << 8 | c->phase, memory_order_release);
    disco_status_t st = barrier_wait(c->bar, (uint32_t)c->size, c->w->wait);
    return st == DISCO_OK ? DISCO_OK : abandon(c, st);
}

/* A status a member posted: one of ours (an error), else DISCO_E_PROTOCOL. */
static disco_status_t posted_status(int32_t st)
{
    return disco__status_is_error(st) ? (disco_status_t)st : DISCO_E_PROTOCOL;
}

/* Copies member r's slot into c->post[r] and checks its numbers: the rank
 * count, every dimension, and the byte count (no overflow). */
static disco_status_t take_post(struct coll *c, int r)
{
    const struct disco__coll_slot *m = member(c, r);
    struct posted *p = &c->post[r];
    p->in_block = m->in_block, p->in_off = m->in_off;
    p->out_block = m->out_block, p->out_off = m->out_off;
    p->ndim = m->ndim;
    p->dtype = m->dtype;
    memcpy(p->shape, m->shape, sizeof p->shape);
    bool ok = p->ndim >= 0 && p->ndim <= DISCO_MAX_NDIM;
    uint64_t n = disco_dtype_bytes(p->dtype);
    for (int d = 0; ok && d < p->ndim; d++)
        ok = p->shape[d] >= 0 && !__builtin_mul_overflow(n, (uint64_t)p->shape[d], &n);
    if (!ok)
        return disco_set_error(DISCO_E_PROTOCOL,
                               "%s: worker %d posted a malformed tensor (%d dims, or a size that "
                               "overflows)",
                               c->what, c->base + r, (int)p->ndim);
    p->nbytes = n;
    return DISCO_OK;
}

/* Posts, meets the group, and returns the first member's failure (the same
 * verdict on every member: each reads the same slots after the barrier). */
static disco_status_t coll_meet(struct coll *c)
{
    disco_status_t st = coll_barrier(c);
    if (st != DISCO_OK)
        return st;
    for (int r = 0; r < c->size; r++) {
        struct disco__coll_slot *m = member(c, r);
        if (m->seq != c->w->seq)
            return disco_set_error(DISCO_E_PROTOCOL, "worker %d is at another command",
                                   c->base + r);
        int32_t mst = m->status;
        if (mst != DISCO_OK) { /* another process's words: bounded, escaped */
            char msg[sizeof m->msg];
            disco__text_safe(msg, sizeof msg, m->msg, sizeof m->msg);
            return disco_set_error(posted_status(mst), "worker %d: %s", c->base + r, msg);
        }
        if ((st = take_post(c, r)) != DISCO_OK)
            return st;
    }
    c->met = true;
    return DISCO_OK;
}

/* The address of bytes [off, off + len) of the input (or output) member r
 * posted, or NULL unless they lie inside a tensor block of the heap. */
static char *span_of(struct coll *c, int r, bool out, uint64_t off, uint64_t len)
{
    const struct posted *p = &c->post[r];
    uint64_t at;
    if (__builtin_add_overflow(out ? p->out_off : p->in_off, off, &at))
        return NULL;
    return disco__tensor_span(c->w->heap, out ? p->out_block : p->in_block, at, len);
}

/* Checks that the len bytes at off of member r's input (or output) lie in
 * the heap, and sets *p_out to them. A verdict every member reaches alike. */
static disco_status_t span_check(struct coll *c, int r, bool out, uint64_t off, uint64_t len,
                                 char **p_out)
{
    char *p = span_of(c, r, out, off, len);
    if (p == NULL)
        return disco_set_error(
            DISCO_E_PROTOCOL,
            "%s: worker %d posted an %s tensor outside the shared heap (block "
            "%#llx, offset %llu, %llu bytes)",
            c->what, c->base + r, out ? "output" : "input",
            (unsigned long long)(out ? c->post[r].out_block : c->post[r].in_block),
            (unsigned long long)(out ? c->post[r].out_off : c->post[r].in_off),
            (unsigned long long)len);
    *p_out = p;
    return DISCO_OK;
}

/* Checks that every member's input has my dtype and shape (shape[0] too
 * unless any_dim0). */
static disco_status_t same_inputs(struct coll *c, bool any_dim0)
{
    for (int r = 0; r < c->size; r++) {
        const struct posted *m = &c->post[r];
        bool same = m->ndim == c->me->ndim && m->dtype.code == c->me->dtype.code &&
                    m->dtype.bits == c->me->dtype.bits && m->dtype.lanes == c->me->dtype.lanes;
        for (int d = any_dim0 ? 1 : 0; same && d < m->ndim; d++)
            same = m->shape[d] == c->me->shape[d];
        if (!same) {
            char a[32], b[32];
            return disco_set_error(
                DISCO_E_MISMATCH, "worker %d has a %s tensor of %d dims, worker %d a %s of %d",
                c->base + r, disco_dtype_str(m->dtype, a, sizeof a), (int)m->ndim, c->w->id,
                disco_dtype_str(c->me->dtype, b, sizeof b), c->me->ndim);
        }
    }
    return DISCO_OK;
}

/* Validates a tensor argument: ours, CPU, compact, supported dtype. */
static disco_status_t tensor_arg(const disco_value_t *v, const char *what, DLTensor **out)
{
    if (v->type != DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "%s: expected a tensor, got %s", what,
                               disco_type_name(v->type));
    DLTensor *t = v->v.tensor;
    if (!disco__tensor_is_ours(t) || t->device.device_type != kDLCPU)
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

/* disco.empty(shape, dtype, device, worker0_only): a new tensor (contents
 * unspecified); with worker0_only, null on the other workers. */
static disco_status_t empty(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    if (flag(a, n, 3) && ctx->worker_id != 0)
        return DISCO_OK;
    DLDevice dev = a[2].v.device;
    if (dev.device_type != kDLCPU)
        return disco_ctx_fail(ctx, "device type %d: only CPU tensors (kDLCPU) are supported",
                              (int)dev.device_type);
    DLTensor *t;
    disco_status_t st = disco_ctx_empty(ctx, a[0].v.shape, (int)a[0].len, a[1].v.dtype, &t);
    if (st == DISCO_OK)
        *ret = disco_value_tensor(t);
    return st;
}

/* disco.allreduce(x, op, in_group): every member gets op over the members' x.
 * Member r reduces slice r of all inputs and writes it into every member's
 * output (a reduce-scatter and an allgather in one pass). */
static disco_status_t allreduce(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct coll c;
    coll_begin(ctx, flag(a, n, 2), "allreduce", &c);
    DLTensor *x = NULL, *out = NULL;
    disco_reduce_op_t op = DISCO_REDUCE_SUM;
    disco_status_t st = n < 2 ? disco_set_error(DISCO_E_ARG_COUNT, "allreduce(x, op, in_group)")
                              : tensor_arg(&a[0], "allreduce", &x);
    if (st == DISCO_OK && (a[1].type != DISCO_T_STR || !disco_reduce_parse(a[1].v.str, &op)))
        st = disco_set_error(DISCO_E_INVAL, "allreduce: op must be sum, prod, min, max or avg");
    if (st == DISCO_OK)
        st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &out);
    if (st == DISCO_OK) {
        post_tensor(&c, x, false);
        post_tensor(&c, out, true);
    } else {
        coll_fail(&c, st, disco_last_error());
    }
    if ((st = coll_meet(&c)) != DISCO_OK || (st = same_inputs(&c, false)) != DISCO_OK)
        return st; /* same verdict, same barriers on every member */

    size_t esz = disco_dtype_bytes(x->dtype), count = (size_t)disco_tensor_numel(x);
    char *ins[DISCO_MAX_WORKERS], *outs[DISCO_MAX_WORKERS];
    for (int r = 0; r < c.size; r++)
        if ((st = span_check(&c, r, false, 0, count * esz, &ins[r])) != DISCO_OK ||
            (st = span_check(&c, r, true, 0, count * esz, &outs[r])) != DISCO_OK)
            return st; /* a verdict on the slots: the same on every member */
    size_t lo = count * (size_t)c.rank / (size_t)c.size;
    size_t hi = count * (size_t)(c.rank + 1) / (size_t)c.size;
    size_t step = CHUNK_BYTES / esz ? CHUNK_BYTES / esz : 1;
    const void *srcs[DISCO_MAX_WORKERS];
    for (size_t i = lo; i < hi; i += step) {
        size_t m = hi - i < step ? hi - i : step;
        for (int r = 0; r < c.size; r++)
            srcs[r] = ins[r] + i * esz;
        char *mine = (char *)out->data + i * esz;
        if ((st = disco_reduce(op, x->dtype, mine, srcs, c.size, m)) != DISCO_OK)
            break; /* cannot happen after the checks above; keep the barrier count */
        for (int r = 0; r < c.size; r++)
            if (r != c.rank)
                memcpy(outs[r] + i * esz, mine, m * esz);
    }
    disco_status_t bst = coll_barrier(&c);
    if (st == DISCO_OK)
        st = bst;
    if (st != DISCO_OK)
        return st; /* same verdict, same barriers on every member */
    *ret = disco_value_tensor(out);
    return DISCO_OK;
}

/* After a successful meeting, members read the leader's slot: one more
 * barrier before anyone reuses slots. A failed meeting needs none (every
 * member failed the same way after the same barriers); a failure after it
 * (out of handles) still passes the barrier, so no member is left waiting. */
static disco_status_t end_barrier(struct coll *c, disco_status_t st)
{
    if (st == DISCO_OK || c->met) {
        disco_status_t bst = coll_barrier(c);
        if (st == DISCO_OK)
            st = bst;
    }
    return st;
}

/* The tensor a leader shares: validated, with refs added for the others. */
static DLTensor *lead_share(struct coll *c, const disco_value_t *a, int n, const char *what)
{
    DLTensor *x = NULL;
    disco_status_t st = n < 1 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, in_group)", what)
                              : tensor_arg(&a[0], what, &x);
    if (st != DISCO_OK) {
        coll_fail(c, st, disco_last_error());
        return NULL;
    }
    post_tensor(c, x, false);
    return x;
}

/* Adopts (or references) member rank's posted input as a tensor owned by
 * the call: byte_off into it, dimension 0 replaced by dim0 if >= 0. The
 * block and the bytes are checked to lie in the heap. */
static disco_status_t take(disco_ctx_t *ctx, struct coll *c, int rank, uint64_t byte_off,
                           int64_t dim0, bool adopt, disco_value_t *ret)
{
    const struct posted *l = &c->post[rank];
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
    struct coll c;
    coll_begin(ctx, flag(a, n, 1), "broadcast_from_worker0", &c);
    DLTensor *x = c.rank == 0 ? lead_share(&c, a, n, "broadcast_from_worker0") : NULL;
    if (x != NULL)
        disco__tensor_add_refs(x, (uint32_t)c.size - 1);
    disco_status_t st = coll_meet(&c);
    if (st == DISCO_OK)
        st = take(ctx, &c, 0, 0, -1, c.rank != 0, ret);
    return end_barrier(&c, st);
}

/* disco.scatter_from_worker0(x, in_group): member r gets rows
 * [r*d0/size, (r+1)*d0/size) of worker 0's x, by reference. */
static disco_status_t scatter(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct coll c;
    coll_begin(ctx, flag(a, n, 1), "scatter_from_worker0", &c);
    DLTensor *x = c.rank == 0 ? lead_share(&c, a, n, "scatter_from_worker0") : NULL;
    if (x != NULL && (x->ndim == 0 || x->shape[0] % c.size != 0)) {
        disco_set_error(DISCO_E_MISMATCH, "scatter: dimension 0 (%lld) is not a multiple of %d",
                        x->ndim ? (long long)x->shape[0] : 0LL, c.size);
        coll_fail(&c, DISCO_E_MISMATCH, disco_last_error());
    } else if (x != NULL) {
        disco__tensor_add_refs(x, (uint32_t)c.size - 1);
    }
    disco_status_t st = coll_meet(&c);
    if (st != DISCO_OK)
        return st;
    const struct posted *l = &c.post[0];
    int64_t rows = l->ndim > 0 ? l->shape[0] / c.size : 0;
    uint64_t chunk = l->nbytes / (uint64_t)c.size;
    st = take(ctx, &c, 0, chunk * (uint64_t)c.rank, rows, c.rank != 0, ret);
    return end_barrier(&c, st);
}

/* Validates x and, when out_dim0_mult, allocates an output with dimension 0
 * multiplied by the group size; posts both. */
static DLTensor *gather_prep(disco_ctx_t *ctx, struct coll *c, const disco_value_t *a, int n,
                             const char *what, bool want_out, DLTensor **x_out)
{
    DLTensor *x = NULL, *out = NULL;
    disco_status_t st = n < 1 ? disco_set_error(DISCO_E_ARG_COUNT, "%s(x, in_group)", what)
                              : tensor_arg(&a[0], what, &x);
    if (st == DISCO_OK && x->ndim == 0)
        st = disco_set_error(DISCO_E_MISMATCH, "%s: a scalar has no dimension 0", what);
    if (st == DISCO_OK && want_out) {
        int64_t shape[DISCO_MAX_NDIM];
        memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
        /* Checked: a tensor with a 0 dimension may have any dimension 0. */
        if (__builtin_mul_overflow(shape[0], (int64_t)c->size, &shape[0]))
            st = disco_set_error(DISCO_E_OVERFLOW, "%s: dimension 0 (%lld) times %d overflows",
                                 what, (long long)x->shape[0], c->size);
        else
            st = disco_ctx_empty(ctx, shape, x->ndim, x->dtype, &out);
    }
    if (st != DISCO_OK) {
        coll_fail(c, st, disco_last_error());
        return NULL;
    }
    post_tensor(c, x, false);
    if (out != NULL)
        post_tensor(c, out, true);
    *x_out = x;
    return out;
}

/* disco.gather_to_worker0(x, in_group): worker 0 (the group leader) gets the
 * members' x stacked along dimension 0; the others get null. */
static disco_status_t gather(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct coll c;
    coll_begin(ctx, flag(a, n, 1), "gather_to_worker0", &c);
    DLTensor *x = NULL;
    DLTensor *out = gather_prep(ctx, &c, a, n, "gather_to_worker0", c.rank == 0, &x);
    disco_status_t st = coll_meet(&c);
    if (st == DISCO_OK)
        st = same_inputs(&c, false);
    if (st != DISCO_OK)
        return st;
    size_t nb = disco_tensor_nbytes(x);
    char *dst;
    if ((st = span_check(&c, 0, true, 0, nb * (size_t)c.size, &dst)) != DISCO_OK)
        return st; /* a verdict on the leader's slot: the same on every member */
    memcpy(dst + nb * (size_t)c.rank, x->data, nb);
    if ((st = coll_barrier(&c)) != DISCO_OK)
        return st;
    if (out != NULL)
        *ret = disco_value_tensor(out);
    return DISCO_OK;
}

/* disco.allgather(x, in_group): every member gets the members' x stacked
 * along dimension 0. */
static disco_status_t allgather(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct coll c;
    coll_begin(ctx, flag(a, n, 1), "allgather", &c);
    DLTensor *x = NULL;
    DLTensor *out = gather_prep(ctx, &c, a, n, "allgather", true, &x);
    disco_status_t st = coll_meet(&c);
    if (st == DISCO_OK)
        st = same_inputs(&c, false);
    if (st != DISCO_OK)
        return st;
    size_t nb = disco_tensor_nbytes(x);
    char *ins[DISCO_MAX_WORKERS];
    for (int r = 0; r < c.size; r++)
        if ((st = span_check(&c, r, false, 0, nb, &ins[r])) != DISCO_OK)
            return st; /* a verdict on the slots: the same on every member */
    for (int r = 0; r < c.size; r++)
        memcpy((char *)out->data + nb * (size_t)r, ins[r], nb);
    /* Nobody may free an input while another member still reads it. */
    if ((st = coll_barrier(&c)) != DISCO_OK)
        return st;
    *ret = disco_value_tensor(out);
    return DISCO_OK;
}

/* disco.send_recv(x, src, dst): worker dst gets worker src's x by reference;
 * every other worker gets null. All workers take part. */
static disco_status_t send_recv(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    struct coll c;
    coll_begin(ctx, false, "send_recv", &c);
    int src = n >= 3 && a[1].type == DISCO_T_INT ? (int)a[1].v.i : -1;
    int dst = n >= 3 && a[2].type == DISCO_T_INT ? (int)a[2].v.i : -1;
    if (src < 0 || src >= c.size || dst < 0 || dst >= c.size) {
        disco_set_error(DISCO_E_INVAL, "send_recv(x, src, dst): src %d, dst %d of %d workers", src,
                        dst, c.size);
        coll_fail(&c, DISCO_E_INVAL, disco_last_error());
    } else if (c.rank == src) {
        DLTensor *x = lead_share(&c, a, n, "send_recv");
        if (x != NULL)
            disco__tensor_add_refs(x, 1);
    }
    disco_status_t st = coll_meet(&c);
    if (st == DISCO_OK && c.rank == dst)
        st = take(ctx, &c, src, 0, -1, true, ret);
    return end_barrier(&c, st);
}

void disco__coll_register(void)
{
    /* Each needs a session worker (its heap and collective area): refused
     * outside a session instead of dereferencing NULL. */
    disco__register_session_func("disco.empty", "Stdb", empty);
    disco__register_session_func("disco.allreduce", NULL, allreduce);
    disco__register_session_func("disco.allgather", NULL, allgather);
    disco__register_session_func("disco.broadcast_from_worker0", NULL, broadcast);
    disco__register_session_func("disco.scatter_from_worker0", NULL, scatter);
    disco__register_session_func("disco.gather_to_worker0", NULL, gather);
    disco__register_session_func("disco.send_recv", NULL, send_recv);
}
