/* collective_dev.c - broadcast, send_recv, scatter, gather, allgather and
 * allreduce of device tensors (see coll_call.h): device-to-device copies
 * between the members' arenas, each peer's arena imported once per
 * process (arena.h).
 *
 * Ordering is by the arenas' IPC events at the call's barriers ("Device
 * ordering" in coll_call.h): copies are queued on this member's arena
 * stream, never synced one by one; the call's last barrier
 * (disco__coll_end) syncs the stream once. Only allreduce's host staging
 * waits on the host, where the host itself reads or reuses the bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/clock.h"

#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#include "workers/data/arena.h"
#include "workers/data/coll_call.h"
#include "workers/data/tensor_impl.h"
#include "workers/device/ar.h"

/* n bytes from src on sd to dst on dd, queued on this worker's arena
 * stream; with host (a side is host memory the caller reads or reuses
 * next), synced. */
static disco_status_t dcopy(struct disco__coll_call *c, void *dst, DLDevice dd, const void *src,
                            DLDevice sd, size_t n, bool host)
{
    struct disco__arena *a = c->w->arena;
    disco_status_t st = disco_device_copy(dst, dd, src, sd, n, disco__arena_stream(a));
    if (st == DISCO_OK && host && (st = disco__coll_dev_sync(c)) != DISCO_OK)
        return st; /* the call is given up; the detail says why */
    if (st != DISCO_OK) {
        st = disco_set_error(st, "%s: worker %d: copying %zu bytes from %d:%d to %d:%d: %s",
                             c->what, disco__worker_gid(c->w), n, (int)sd.device_type, sd.device_id,
                             (int)dd.device_type, dd.device_id, disco_last_error());
    }
    return st;
}

disco_status_t disco__coll_dev_copy_of(disco_ctx_t *ctx, struct disco__coll_call *c, int rank,
                                       const DLTensor *x, disco_value_t *ret)
{
    DLTensor *t;
    disco_status_t st;
    if (c->rank == rank) { /* the poster keeps its own bytes */
        if ((st = disco__tensor_ref(x, &t)) == DISCO_OK &&
            (st = disco__ctx_own(ctx, t)) == DISCO_OK)
            *ret = disco_value_tensor(t);
        return st;
    }
    const struct disco__coll_posted *l = &c->post[rank];
    char *src;
    DLDevice sd;
    if ((st = disco_ctx_empty_device(ctx, l->shape, l->ndim, l->dtype, (DLDeviceType)l->dev_type,
                                     &t)) != DISCO_OK ||
        (st = disco__coll_dev_span(c, rank, false, 0, l->nbytes, &src, &sd)) != DISCO_OK ||
        (st = dcopy(c, t->data, t->device, src, sd, (size_t)l->nbytes, false)) != DISCO_OK)
        return st;
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}

disco_status_t disco__coll_dev_copy_into(struct disco__coll_call *c, int rank, DLTensor *dst)
{
    return disco__coll_dev_copy_part(c, rank, 0, c->post[rank].nbytes, dst);
}

disco_status_t disco__coll_dev_copy_part(struct disco__coll_call *c, int rank, uint64_t off,
                                         uint64_t len, DLTensor *dst)
{
    char *src;
    DLDevice sd;
    disco_status_t st = disco__coll_dev_span(c, rank, false, off, len, &src, &sd);
    if (st == DISCO_OK && (src != dst->data || sd.device_type != dst->device.device_type))
        st = dcopy(c, dst->data, dst->device, src, sd, (size_t)len, false);
    return st;
}

disco_status_t disco__coll_dev_gather(struct disco__coll_call *c, const DLTensor *x, size_t nb)
{
    char *dst;
    DLDevice dd;
    uint64_t at;
    disco_status_t st = __builtin_mul_overflow((uint64_t)nb, (uint64_t)c->rank, &at)
                            ? disco_set_error(DISCO_E_OVERFLOW, "%s: offset overflows", c->what)
                            : disco__coll_dev_span(c, 0, true, at, nb, &dst, &dd);
    if (st == DISCO_OK)
        st = dcopy(c, dst, dd, x->data, x->device, nb, false);
    /* Every member passes the barrier, whatever its own copy did: a failed
     * import is this member's, not a verdict the others share. */
    return disco__coll_end(c, st);
}

disco_status_t disco__coll_dev_allgather(struct disco__coll_call *c, DLTensor *out, size_t nb)
{
    disco_status_t st = DISCO_OK;
    for (int r = 0; r < c->size && st == DISCO_OK; r++) {
        char *src;
        DLDevice sd;
        if ((st = disco__coll_dev_span(c, r, false, 0, nb, &src, &sd)) == DISCO_OK)
            st = dcopy(c, (char *)out->data + nb * (size_t)r, out->device, src, sd, nb, false);
    }
    /* Nobody may free an input while another member still reads it. */
    return disco__coll_end(c, st);
}

disco_status_t disco__coll_dev_scatter(disco_ctx_t *ctx, struct disco__coll_call *c, int64_t rows,
                                       uint64_t chunk, disco_value_t *ret)
{
    const struct disco__coll_posted *l = &c->post[0];
    int64_t shape[DISCO_MAX_NDIM];
    memcpy(shape, l->shape, sizeof shape);
    if (l->ndim > 0)
        shape[0] = rows;
    DLTensor *t;
    char *src;
    DLDevice sd;
    disco_status_t st;
    if ((st = disco_ctx_empty_device(ctx, shape, l->ndim, l->dtype, (DLDeviceType)l->dev_type,
                                     &t)) != DISCO_OK ||
        (st = disco__coll_dev_span(c, 0, false, chunk * (uint64_t)c->rank, chunk, &src, &sd)) !=
            DISCO_OK ||
        (st = dcopy(c, t->data, t->device, src, sd, (size_t)chunk, false)) != DISCO_OK)
        return st;
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}

#define STAGE_BYTES (256u * 1024u) /* host staging per member, a chunk at a time */

/* Reduces elements [lo, hi) of every member's x into every member's out,
 * staging through host buffers (stage: size + 1 buffers of STAGE_BYTES). */
static disco_status_t reduce_slice(struct disco__coll_call *c, disco_reduce_op_t op,
                                   const DLTensor *x, size_t lo, size_t hi, char *stage)
{
    size_t esz = disco_dtype_bytes(x->dtype), step = STAGE_BYTES / esz ? STAGE_BYTES / esz : 1;
    size_t nb = (size_t)disco_tensor_numel(x) * esz;
    char *ins[DISCO_MAX_WORKERS], *outs[DISCO_MAX_WORKERS];
    DLDevice idev[DISCO_MAX_WORKERS], odev[DISCO_MAX_WORKERS];
    DLDevice cpu = {kDLCPU, 0};
    disco_status_t st = DISCO_OK;
    for (int r = 0; r < c->size && st == DISCO_OK; r++)
        if ((st = disco__coll_dev_span(c, r, false, 0, nb, &ins[r], &idev[r])) == DISCO_OK)
            st = disco__coll_dev_span(c, r, true, 0, nb, &outs[r], &odev[r]);
    const void *srcs[DISCO_MAX_WORKERS];
    char *mine = stage + (size_t)c->size * STAGE_BYTES;
    for (size_t i = lo; i < hi && st == DISCO_OK; i += step) {
        size_t m = hi - i < step ? hi - i : step;
        for (int r = 0; r < c->size && st == DISCO_OK; r++) {
            srcs[r] = stage + (size_t)r * STAGE_BYTES;
            /* Synced before the host reduces; the last of the chunk's copies
             * syncs them all (one stream). */
            st = dcopy(c, stage + (size_t)r * STAGE_BYTES, cpu, ins[r] + i * esz, idev[r], m * esz,
                       r == c->size - 1);
        }
        if (st == DISCO_OK)
            st = disco_reduce(op, x->dtype, mine, srcs, c->size, m);
        /* Synced before `mine` is reused for the next chunk. */
        for (int r = 0; r < c->size && st == DISCO_OK; r++)
            st = dcopy(c, outs[r] + i * esz, odev[r], mine, cpu, m * esz, r == c->size - 1);
    }
    return st;
}

/* The job of this member's kernel: every member's input, output and
 * signal region mapped here. */
static disco_status_t make_job(struct disco__coll_call *c, disco_reduce_op_t op, const DLTensor *x,
                               struct disco__ar_job *j)
{
    uint64_t count = (uint64_t)disco_tensor_numel(x);
    size_t esz = disco_dtype_bytes(x->dtype);
    *j = (struct disco__ar_job){.rank = (uint32_t)c->rank,
                                .size = (uint32_t)c->size,
                                .slot = c->parity,
                                /* never 0, and consecutive calls differ (ar.h) */
                                .epoch = (uint32_t)(c->w->ncoll % UINT32_MAX) + 1,
                                .op = (uint32_t)op,
                                .dtype = x->dtype,
                                .count = count,
                                /* progress for the watchdog and `disco top` (ar.h) */
                                .base = (uint32_t)c->base,
                                .coll = c->w->ncoll,
                                .cmd = c->w->seq,
                                .progress = c->w->stat != NULL ? &c->w->stat->kernel : NULL};
    disco_status_t st = DISCO_OK;
    for (int r = 0; r < c->size && st == DISCO_OK; r++) {
        char *in, *o;
        DLDevice d;
        if ((st = disco__coll_dev_span(c, r, false, 0, count * esz, &in, &d)) == DISCO_OK &&
            (st = disco__coll_dev_span(c, r, true, 0, count * esz, &o, &d)) == DISCO_OK &&
            (st = disco__arena_signal(c->w->arena, c->base + r, &j->signal[r])) == DISCO_OK)
            j->in[r] = in, j->out[r] = o;
    }
    return st;
}

/* The nanoseconds a kernel's wait may spin: what is left of the call's
 * deadline or timeout, and a second more, so that the host's watched sync
 * (whose deadline starts at the sync) normally decides and names the late
 * member; 0: no limit (the watched sync can still abort it). */
static uint64_t budget_ns(const struct disco__coll_call *c)
{
    const disco_wait_t *w = c->w->wait;
    int64_t left = w->deadline_ns > 0 ? w->deadline_ns - disco_now_ns() : w->timeout_ns;
    if (w->deadline_ns <= 0 && w->timeout_ns <= 0)
        return 0;
    return (uint64_t)(left > 0 ? left : 0) + 1000000000u;
}

/* A failure after the go barrier: the others may already wait for this
 * member's flags inside their kernels, so the call is given up (every
 * other member to the abandon hook) instead of returning as if alone. A
 * worker process ends itself there: its detail goes to stderr first. */
static disco_status_t after_go(struct disco__coll_call *c, disco_status_t st)
{
    st = disco_set_error(st, "%s: worker %d: %s", c->what, disco__worker_gid(c->w),
                         disco_last_error());
    if (c->w->id != 0)
        fprintf(stderr, "disco worker %d: %s\n", disco__worker_gid(c->w), disco_last_error());
    return disco__coll_give_up(c, st);
}

/* ---- the route: kernels that meet, or staging (docs/gpu-sharing.md) ----
 *
 * The kernels of ar.h wait for each other across processes. Two workers on
 * one physical GPU hold two contexts, which a GPU without MPS runs one at a
 * time: their kernels would meet only at context switches (milliseconds
 * each, or past the deadline). So the kernels run only when no two workers
 * of the session that hold arenas share a physical device (by the identity
 * each published with its arena, arena.h), or every such pair runs under
 * MPS; else the call is staged through host memory (event-ordered copies,
 * reduce_slice). Workers outside the group count too: the other groups run
 * the same collective at the same time on the shared device. The first
 * member decides, and every member takes its choice at the go barrier.
 * tests/test_gpu_share.c (test_route) holds each case. */

#define CHOICE_TWO_SHOT 1u
#define CHOICE_STAGED   2u

/* DISCO_AR_PATH: "kernel" or "staged" forces the way of every allreduce
 * the kernels may take (groups of at most DISCO_AR_MAX_RANKS); unset or
 * "auto": decided as above. Read at each call, on the first member. */
static int forced_path(void)
{
    const char *e = getenv("DISCO_AR_PATH");
    if (e != NULL && strcmp(e, "kernel") == 0)
        return 1;
    if (e != NULL && strcmp(e, "staged") == 0)
        return 0;
    return -1;
}

/* Whether the kernels may meet: every member published its arena, and no
 * two workers' arenas lie on one physical device unless both run MPS. */
static bool kernels_may_meet(const struct disco__coll_call *c)
{
    int32_t type[DISCO_MAX_WORKERS];
    disco_device_uid_t phys[DISCO_MAX_WORKERS];
    uint32_t share[DISCO_MAX_WORKERS];
    bool has[DISCO_MAX_WORKERS] = {false};
    int world = c->w->world < DISCO_MAX_WORKERS ? c->w->world : DISCO_MAX_WORKERS;
    for (int r = 0; r < world; r++)
        has[r] = disco__arena_peer_share(c->w->arena, r, &type[r], &phys[r], &share[r]);
    for (int r = c->base; r < c->base + c->size; r++)
        if (r >= world || !has[r])
            return false;
    for (int r = 0; r < world; r++) {
        for (int q = r + 1; q < world && has[r]; q++) {
            if (!has[q] || type[q] != type[r])
                continue;
            bool known = share[r] & share[q] & DISCO_SHARE_PHYS_KNOWN;
            if (known && memcmp(&phys[r], &phys[q], sizeof phys[r]) != 0)
                continue; /* two devices */
            if (!(share[r] & share[q] & DISCO_SHARE_MPS))
                return false; /* one device (or not known), time-sliced */
        }
    }
    return true;
}

/* This member's choice for the go barrier (only the first member's is
 * taken: the others' is not computed). */
static uint32_t choice_of(const struct disco__coll_call *c, uint64_t nbytes)
{
    if (c->rank != 0)
        return 0;
    int forced = forced_path();
    bool kernels = forced >= 0 ? forced == 1 : kernels_may_meet(c);
    return (kernels ? 0 : CHOICE_STAGED) | (disco__ar_two_shot(nbytes) ? CHOICE_TWO_SHOT : 0);
}

static disco_status_t staged_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                       const DLTensor *x);

/* Allreduce by a kernel on every member (ar.h): after the meeting, each
 * maps everyone's bytes, the go barrier tells whether all could (and
 * which way the call goes: the first member's choice, staged or one-shot
 * or two-shot), then each launches its kernel and waits on the host for
 * its own stream. No barrier after: the kernels' END flags order every
 * later use of the bytes. Staged after the go: the meeting and the go
 * recorded no events (by_flags), so one more barrier, with them, orders
 * the inputs' producers before the others' reads (Device ordering). */
static disco_status_t kernel_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                       const DLTensor *x)
{
    struct disco__ar_job j;
    disco_status_t st = make_job(c, op, x, &j);
    size_t esz = disco_dtype_bytes(x->dtype);
    uint32_t choice = 0;
    if ((st = disco__coll_go(c, st, choice_of(c, j.count * esz), &choice)) != DISCO_OK)
        return st;
    if (choice & CHOICE_STAGED) {
        c->by_flags = false; /* every member alike: the first member's choice */
        if ((st = disco__coll_barrier(c)) != DISCO_OK)
            return st;
        return staged_allreduce(c, op, x);
    }
    struct disco__arena *a = c->w->arena;
    j.two_shot = (choice & CHOICE_TWO_SHOT) != 0;
    j.pieces = disco__ar_plan(j.count, esz, j.size, j.two_shot);
    j.budget_ns = budget_ns(c);
    if ((st = disco__ar_launch(disco__arena_device(a), disco__arena_stream(a), &j)) != DISCO_OK)
        return after_go(c, st);
    if ((st = disco__coll_dev_sync(c)) != DISCO_OK)
        return st; /* the call is given up; the detail says why */
    if ((st = disco__ar_check(disco__arena_device(a))) != DISCO_OK)
        return after_go(c, st);
    disco__arena_count_ar(a, j.two_shot);
    return DISCO_OK;
}

bool disco__coll_dev_by_kernel(const struct disco__coll_call *c)
{
    return c->size <= (int)DISCO_AR_MAX_RANKS;
}

/* This member reduces its slice of every member's x, staged through host
 * memory, into every member's output, then passes the end barrier. */
static disco_status_t staged_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                       const DLTensor *x)
{
    size_t count = (size_t)disco_tensor_numel(x);
    size_t lo = count * (size_t)c->rank / (size_t)c->size;
    size_t hi = count * (size_t)(c->rank + 1) / (size_t)c->size;
    char *stage = malloc(((size_t)c->size + 1) * STAGE_BYTES);
    disco_status_t st = stage != NULL
                            ? reduce_slice(c, op, x, lo, hi, stage)
                            : disco_set_error(DISCO_E_NOMEM, "%s: worker %d: host staging buffers",
                                              c->what, disco__worker_gid(c->w));
    free(stage);
    if (st == DISCO_OK)
        disco__arena_count_staged(c->w->arena);
    /* Every member passes the barrier, whatever its own part did. */
    return disco__coll_end(c, st);
}

disco_status_t disco__coll_dev_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                         const DLTensor *x, DLTensor *out)
{
    (void)out; /* posted at the meeting: every member writes it through the imports */
    return c->by_flags ? kernel_allreduce(c, op, x) : staged_allreduce(c, op, x);
}
