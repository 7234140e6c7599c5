/* trace.c - the controller's trace records and snapshots of a session's
 * trace (see disco/trace.h, trace_impl.h and workers/core/trace_ring.h).
 * It knows the session only by what the session passes in. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "disco/trace.h"
#include "disco/shm/wait.h"
#include "shm/prefault.h"
#include "workers/core/worker.h"
#include "scheduler/trace/trace_data.h"
#include "scheduler/trace/trace_impl.h"

int disco__trace_open(struct disco__ctrace *t, struct disco__trace_ring *rings)
{
    /* Present now and not shared with the forked workers: written in a
     * first lap of commands after the fork, each page faulted (a copy),
     * a microsecond or two in one step of every 85 (issue 21, the p99 of
     * a step). */
    t->rec = disco__hot_alloc(DISCO_TRACE_CAP * sizeof *t->rec);
    t->marks = calloc(DISCO_TRACE_MARKS, sizeof *t->marks);
    t->nmarks = 0;
    /* Present now too: worker 0's collectives write it during steps. */
    t->w0_ring = disco__hot_alloc(sizeof *t->w0_ring);
    if (t->rec == NULL || t->marks == NULL || t->w0_ring == NULL) {
        disco__trace_close(t);
        return DISCO_E_NOMEM;
    }
    /* Relaxed: no other thread sees the ring before this one hands it to
     * worker 0 (its own thread). */
    atomic_store_explicit(&t->w0_ring->head, 0, memory_order_relaxed);
    atomic_store_explicit(&t->w0_ring->claimed, 0, memory_order_relaxed);
    t->w0_ring->cap = DISCO_TRACE_CAP;
    t->w0_ring->on = 1;
    t->rings = rings;
    t->t0 = disco__ticks();
    t->ns0 = disco_now_ns();
    return DISCO_OK;
}

void disco__trace_close(struct disco__ctrace *t)
{
    disco__hot_free(t->rec, DISCO_TRACE_CAP * sizeof *t->rec);
    free(t->marks);
    disco__hot_free(t->w0_ring, sizeof *t->w0_ring);
    t->rec = NULL;
    t->marks = NULL;
    t->w0_ring = NULL;
}

void disco__trace_mark(struct disco__ctrace *t, const char *text)
{
    if (t->rec == NULL || t->nmarks == DISCO_TRACE_MARKS)
        return;
    struct disco__ctl_mark *m = &t->marks[t->nmarks++];
    m->t = disco__ticks();
    snprintf(m->text, sizeof m->text, "%s", text);
}

/* Nanoseconds per tick since open (shm/ticks.h). */
static double ns_per_tick(const struct disco__ctrace *t)
{
    return disco__ns_per_tick(t->t0, t->ns0);
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

/* Where copy_ring puts a worker's records: its command slices (parked:
 * each one's time parked before it) and its nested collectives. */
struct ring_out {
    disco_trace_slice_t *sl;
    uint64_t *parked;
    size_t n;
    uint64_t *pos; /* [DISCO_TRACE_CAP] scratch: ring index << 1 | nested, in copy order */
    disco_trace_coll_t *colls;
    size_t ncolls;
};

/* A nested record (trace_ring.h) of worker w as a collective (or a send
 * or receive). */
static void nested(const struct disco__ctrace *t, double scale, int w, uint64_t seq, uint64_t info,
                   uint64_t a, uint64_t b, disco_trace_coll_t *c)
{
    uint32_t group = disco__trace_nested_group(info);
    bool p2p = disco__trace_kind_p2p(disco__trace_nested_kind(info)); /* group: the peer */
    *c = (disco_trace_coll_t){.seq = seq,
                              .worker = w,
                              .index = disco__trace_nested_index(info),
                              .group = group == DISCO__TRACE_NOGROUP || p2p ? -1 : (int)group,
                              .members = (int)disco__trace_nested_members(info),
                              .start_us = to_us(t, scale, a),
                              .end_us = to_us(t, scale, b),
                              .peer = p2p ? (int)group : -1};
    snprintf(c->name, sizeof c->name, "%s", disco__trace_kind_name(disco__trace_nested_kind(info)));
}

/* Copies ring r of worker w (protocol in trace_ring.h): command records
 * into o->sl, nested ones into o->colls. */
static void copy_ring(const struct disco__ctrace *t, const struct disco__trace_ring *r, int w,
                      double scale, struct ring_out *o, uint64_t *dropped)
{
    /* T2: acquire, pairs with T1: records below head are complete. */
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t first = head > DISCO_TRACE_CAP ? head - DISCO_TRACE_CAP : 0;
    size_t n = 0, nc = 0, cut = 0, ccut = 0;
    for (uint64_t i = first; i < head; i++) {
        const struct disco__trace_rec *x = &r->rec[i % DISCO_TRACE_CAP];
        /* T3: acquire, pairs with T0: a field of a reuse brings its claim. */
        uint64_t seq = atomic_load_explicit(&x->seq, memory_order_acquire);
        uint64_t info = atomic_load_explicit(&x->info, memory_order_acquire);
        uint64_t a = atomic_load_explicit(&x->t_start, memory_order_acquire);
        uint64_t b = atomic_load_explicit(&x->t_end, memory_order_acquire);
        bool is_nested = disco__trace_info_code(info) == DISCO__TRACE_NESTED;
        o->pos[n + nc] = i << 1 | (is_nested ? 1u : 0u);
        if (is_nested) {
            nested(t, scale, w, seq, info, a, b, &o->colls[nc++]);
            continue;
        }
        disco_trace_slice_t *sl = &o->sl[n];
        o->parked[n] = disco__trace_info_park_ns(info);
        sl->seq = seq;
        sl->worker = w;
        sl->cmd = disco__trace_info_code(info);
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
    /* The records below safe may be half rewritten: drop them from each
     * list (each list is in ring order, so they are its first ones). */
    for (size_t k = 0; k < n + nc && (o->pos[k] >> 1) < safe; k++) {
        if (o->pos[k] & 1)
            ccut++;
        else
            cut++;
    }
    memmove(o->sl, o->sl + cut, (n - cut) * sizeof *o->sl);
    memmove(o->parked, o->parked + cut, (n - cut) * sizeof *o->parked);
    memmove(o->colls, o->colls + ccut, (nc - ccut) * sizeof *o->colls);
    *dropped += first + cut;
    o->n = n - cut;
    o->ncolls = nc - ccut;
}

/* The waits between worker w's n slices (in ring order): from one end to
 * the next start, spinning first, then parked for the time the next
 * record says it parked (the last part of the gap). Returns how many. */
static size_t waits_between(const disco_trace_slice_t *sl, const uint64_t *parked, size_t n,
                            disco_trace_wait_t *out)
{
    size_t k = 0;
    for (size_t i = 1; i < n; i++) {
        double from = sl[i - 1].end_us, to = sl[i].start_us;
        if (to <= from)
            continue;
        double park = (double)parked[i] / 1000.0, mid = to - park;
        if (mid < from)
            mid = from;
        if (mid > from)
            out[k++] = (disco_trace_wait_t){
                .worker = sl[i].worker, .parked = false, .start_us = from, .end_us = mid};
        if (to > mid)
            out[k++] = (disco_trace_wait_t){
                .worker = sl[i].worker, .parked = true, .start_us = mid, .end_us = to};
    }
    return k;
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
    /* T2: acquire, pairs with T1: the records below head are complete. */
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t first = head > DISCO_TRACE_CAP ? head - DISCO_TRACE_CAP : 0;
    /* Nested records (trace_ring.h) name a command that may still run:
     * look past them to the last command record. Relaxed: the record
     * below head is not rewritten before DISCO_TRACE_CAP more (a stale
     * read only makes settle wait longer, up to its bound). */
    for (uint64_t i = head; i > first; i--) {
        const struct disco__trace_rec *x = &r->rec[(i - 1) % DISCO_TRACE_CAP];
        uint64_t info = atomic_load_explicit(&x->info, memory_order_relaxed);
        if (disco__trace_info_code(info) != DISCO__TRACE_NESTED)
            return atomic_load_explicit(&x->seq, memory_order_relaxed);
    }
    return 0;
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
    size_t cap = (size_t)world * DISCO_TRACE_CAP;
    disco_trace_t *tr = disco__trace_alloc(cap, DISCO_TRACE_CAP, 2 * cap, t->nmarks, cap);
    uint64_t *parked = malloc(DISCO_TRACE_CAP * sizeof *parked);
    uint64_t *pos = malloc(DISCO_TRACE_CAP * sizeof *pos);
    if (tr == NULL || parked == NULL || pos == NULL) {
        disco_trace_free(tr);
        free(parked);
        free(pos);
        return disco_set_error(DISCO_E_NOMEM, "trace of %d workers", world);
    }
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
    for (int w = 0; w < world; w++) { /* worker 0's ring: its nested records only */
        struct ring_out o = {.sl = tr->slices + tr->nslices,
                             .parked = parked,
                             .pos = pos,
                             .colls = tr->colls + tr->ncolls};
        uint64_t lost = 0;
        copy_ring(t, w == 0 ? t->w0_ring : &t->rings[w - 1], w, scale, &o,
                  w == 0 ? &lost : &tr->dropped);
        tr->nwaits += waits_between(o.sl, parked, o.n, tr->waits + tr->nwaits);
        tr->nslices += o.n;
        tr->ncolls += o.ncolls;
    }
    free(parked);
    free(pos);
    for (size_t i = 0; i < t->nmarks; i++) {
        tr->marks[i].at_us = to_us(t, scale, t->marks[i].t);
        memcpy(tr->marks[i].text, t->marks[i].text, sizeof tr->marks[i].text);
    }
    tr->nmarks = t->nmarks;
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
