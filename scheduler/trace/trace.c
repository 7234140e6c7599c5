/* trace.c - the controller's trace records and snapshots of a session's
 * trace (see disco/trace.h, trace_impl.h and workers/core/trace_ring.h).
 * It knows the session only by what the session passes in. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "disco/trace.h"
#include "disco/shm/wait.h"
#include "workers/core/worker.h"
#include "scheduler/trace/trace_data.h"
#include "scheduler/trace/trace_impl.h"

int disco__trace_open(struct disco__ctrace *t, struct disco__trace_ring *rings)
{
    t->rec = calloc(DISCO_TRACE_CAP, sizeof *t->rec);
    if (t->rec == NULL)
        return DISCO_E_NOMEM;
    t->rings = rings;
    t->t0 = disco__ticks();
    t->ns0 = disco_now_ns();
    return DISCO_OK;
}

void disco__trace_close(struct disco__ctrace *t)
{
    free(t->rec);
    t->rec = NULL;
}

/* Nanoseconds per tick: measured against CLOCK_MONOTONIC since open (at
 * least 2 ms of it, spun here if the session is younger). */
static double ns_per_tick(const struct disco__ctrace *t)
{
    if (!disco__tick_tsc)
        return 1.0;
    int64_t ns;
    uint64_t ticks;
    do {
        ns = disco_now_ns();
        ticks = disco__ticks();
    } while (ns - t->ns0 < 2000000);
    return (double)(ns - t->ns0) / (double)(ticks - t->t0);
}

static double to_us(const struct disco__ctrace *t, double scale, uint64_t ticks)
{
    return (double)(int64_t)(ticks - t->t0) * scale / 1000.0;
}

/* A record's name: the called function's, or the command's own. */
static void set_name(char *dst, const struct disco__ctl_rec *c, uint32_t code)
{
    const char *src = c != NULL && c->name != NULL ? c->name : disco__cmd_name(code);
    snprintf(dst, DISCO_TRACE_NAME_MAX, "%s", src != NULL ? src : "?");
}

/* Copies worker w's ring (protocol in trace_ring.h) into slices. */
static size_t copy_ring(const struct disco__ctrace *t, int w, double scale,
                        disco_trace_slice_t *out, uint64_t *dropped)
{
    struct disco__trace_ring *r = &t->rings[w - 1];
    /* T2: acquire, pairs with T1: records below head are complete. */
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t first = head > DISCO_TRACE_CAP ? head - DISCO_TRACE_CAP : 0;
    size_t n = 0;
    for (uint64_t i = first; i < head; i++) {
        struct disco__trace_rec *x = &r->rec[i % DISCO_TRACE_CAP];
        disco_trace_slice_t *sl = &out[n];
        /* T3: acquire, pairs with T0: a field of a reuse brings its claim. */
        sl->seq = atomic_load_explicit(&x->seq, memory_order_acquire);
        uint64_t info = atomic_load_explicit(&x->info, memory_order_acquire);
        uint64_t a = atomic_load_explicit(&x->t_start, memory_order_acquire);
        uint64_t b = atomic_load_explicit(&x->t_end, memory_order_acquire);
        sl->worker = w;
        sl->cmd = (uint32_t)(info >> 32);
        sl->start_us = to_us(t, scale, a);
        sl->end_us = to_us(t, scale, b);
        const struct disco__ctl_rec *c = &t->rec[sl->seq % DISCO_TRACE_CAP];
        bool known = c->seq == sl->seq;
        sl->enqueue_us = known ? to_us(t, scale, c->t_enq) : sl->start_us;
        /* A command the worker found waiting starts at the previous one's
         * end (worker.c), which may precede its enqueue when it arrived in
         * between; and a waiting worker's stamp, read just before the check
         * that saw the command, may precede the enqueue stamp read just
         * after publishing it (shm/ring.c). Either way the enqueue is the
         * tighter bound on its start. */
        if (sl->start_us < sl->enqueue_us)
            sl->start_us = sl->enqueue_us;
        set_name(sl->name, known ? c : NULL, sl->cmd);
        n++;
    }
    /* Relaxed: after T3, a reuse the copy saw has its claim visible here. */
    uint64_t claimed = atomic_load_explicit(&r->claimed, memory_order_relaxed);
    uint64_t safe = claimed > DISCO_TRACE_CAP ? claimed - DISCO_TRACE_CAP : 0;
    size_t skip = safe > first ? (size_t)(safe - first) : 0;
    if (skip > n)
        skip = n;
    memmove(out, out + skip, (n - skip) * sizeof *out);
    *dropped += first + skip;
    return n - skip;
}

/* Worker 0 runs each command inline in the controller's thread, from the
 * enqueue stamp to the issued stamp: the command's record is its slice. */
static void w0_slice(const disco_trace_cmd_t *c, disco_trace_slice_t *sl)
{
    *sl = (disco_trace_slice_t){.seq = c->seq,
                                .worker = 0,
                                .cmd = c->cmd,
                                .enqueue_us = c->enqueue_us,
                                .start_us = c->enqueue_us,
                                .end_us = c->issued_us};
    memcpy(sl->name, c->name, sizeof sl->name);
}

/* The sequence number of the last command worker w recorded (0: none). */
static uint64_t last_recorded(const struct disco__trace_ring *r)
{
    /* T2: acquire, pairs with T1: the record below head is complete. */
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    /* Relaxed: not rewritten before DISCO_TRACE_CAP more records. */
    return head == 0 ? 0
                     : atomic_load_explicit(&r->rec[(head - 1) % DISCO_TRACE_CAP].seq,
                                            memory_order_relaxed);
}

/* Gives workers up to 10 ms to record every command issued so far (a worker
 * stamps a command's end after replying, and the others may still be
 * catching up with the ring). */
static void settle(const struct disco__ctrace *t, int world, uint64_t last_seq)
{
    int64_t end = disco_now_ns() + 10000000;
    for (int w = 1; w < world; w++)
        while (last_recorded(&t->rings[w - 1]) < last_seq && disco_now_ns() < end)
            sched_yield();
}

disco_status_t disco__trace_snapshot(const struct disco__ctrace *t, int world, uint64_t last_seq,
                                     bool healthy, disco_trace_t **out)
{
    if (t->rec == NULL)
        return disco_set_error(DISCO_E_INVAL, "tracing is off for this session (trace_off)");
    if (healthy)
        settle(t, world, last_seq);
    double scale = ns_per_tick(t);
    disco_trace_t *tr = disco__trace_alloc((size_t)world * DISCO_TRACE_CAP, DISCO_TRACE_CAP);
    if (tr == NULL)
        return disco_set_error(DISCO_E_NOMEM, "trace of %d workers", world);
    tr->world = world;
    uint64_t last = last_seq, first = last >= DISCO_TRACE_CAP ? last - DISCO_TRACE_CAP + 1 : 1;
    for (uint64_t q = first; q <= last; q++) {
        const struct disco__ctl_rec *c = &t->rec[q % DISCO_TRACE_CAP];
        if (c->seq != q)
            continue; /* a shutdown, not stamped */
        disco_trace_cmd_t *d = &tr->cmds[tr->ncmds++];
        d->seq = q;
        d->cmd = c->code;
        set_name(d->name, c, c->code);
        d->enqueue_us = to_us(t, scale, c->t_enq);
        d->issued_us = c->t_issued ? to_us(t, scale, c->t_issued) : d->enqueue_us;
        d->reply_us = c->t_reply ? to_us(t, scale, c->t_reply) : -1.0;
        if (c->t_issued != 0) /* worker 0's slices come first */
            w0_slice(d, &tr->slices[tr->nslices++]);
    }
    for (int w = 1; w < world; w++)
        tr->nslices += copy_ring(t, w, scale, tr->slices + tr->nslices, &tr->dropped);
    *out = tr;
    return DISCO_OK;
}

void disco__trace_write_env(const struct disco__ctrace *t, int world, uint64_t last_seq,
                            bool healthy)
{
    const char *path = getenv("DISCO_TRACE");
    if (path == NULL || path[0] == '\0' || t->rec == NULL)
        return;
    disco_trace_t *tr;
    if (disco__trace_snapshot(t, world, last_seq, healthy, &tr) != DISCO_OK)
        return;
    FILE *f = fopen(path, "we"); /* close-on-exec: a fork elsewhere must not hold it */
    if (f == NULL || disco_trace_write_json(tr, f) != DISCO_OK)
        fprintf(stderr, "disco: cannot write the trace to %s\n", path);
    if (f != NULL)
        fclose(f);
    disco_trace_free(tr);
}
