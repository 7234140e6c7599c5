/* view.c - snapshots of a session's status region (see view.h). The region
 * may be another process's: its numbers are read once each, with the
 * orders wstat.h gives, and checked before use. */
#include "scheduler/observe/view.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "disco/clock.h"
#include "shm/ticks.h"
#include "workers/core/worker.h"

_Static_assert(DISCO_VIEW_PIECES == DISCO_AR_MAX_PIECES, "a view holds every piece");

void disco__view_func_name(const struct disco__stat_hdr *h, uint64_t key, char *buf, size_t size)
{
    const struct disco__stat_name *e = &h->names[key % DISCO_STAT_NAMES];
    char name[DISCO_STAT_NAME];
    for (int tries = 0; tries < 4; tries++) {
        /* S4: acquire loads throughout; see wstat.h. */
        uint32_t v = atomic_load_explicit(&e->ver, memory_order_acquire);
        uint64_t k = atomic_load_explicit(&e->key, memory_order_acquire);
        for (size_t i = 0; i < DISCO_STAT_NAME; i++)
            name[i] = atomic_load_explicit(&e->name[i], memory_order_acquire);
        if ((v & 1u) != 0 || atomic_load_explicit(&e->ver, memory_order_acquire) != v)
            continue; /* being written: try again */
        if (k != key)
            break;
        name[DISCO_STAT_NAME - 1] = '\0';
        /* Another process's bytes: printable ones only. */
        for (size_t i = 0; name[i] != '\0'; i++)
            if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] >= 0x7f)
                name[i] = '?';
        snprintf(buf, size, "%s", name);
        return;
    }
    snprintf(buf, size, "function %016llx", (unsigned long long)key);
}

/* The name of what ran: a call's function, else the command's own. */
static void cmd_label(const struct disco__stat_hdr *h, uint64_t code, uint64_t key, char *buf,
                      size_t size)
{
    if (disco__cmd_is_call((uint32_t)code) && key != 0)
        disco__view_func_name(h, key, buf, size);
    else
        snprintf(buf, size, "%s", disco__cmd_name((uint32_t)code));
}

/* Ticks as seconds; -1 for unknown (no stamps). */
static double secs(uint64_t ticks, double ns_per_tick, bool known)
{
    return known ? (double)ticks * ns_per_tick / 1e9 : -1.0;
}

/* Adds worker w's function table into v->funcs. */
static void add_funcs(const struct disco__stat_hdr *h, const struct disco__wstat *w,
                      double ns_per_tick, bool tracing, disco_session_view_t *v)
{
    for (unsigned i = 0; i < DISCO_STAT_FUNCS; i++) {
        const struct disco__wstat_func *f = &w->func[i];
        /* Relaxed: a monitor's words (wstat.h). */
        uint64_t key = atomic_load_explicit(&f->key, memory_order_relaxed);
        uint64_t calls = atomic_load_explicit(&f->calls, memory_order_relaxed);
        uint64_t ticks = atomic_load_explicit(&f->ticks, memory_order_relaxed);
        if (key == 0 || calls == 0)
            continue;
        char name[DISCO_VIEW_NAME];
        disco__view_func_name(h, key, name, sizeof name);
        int k = 0;
        while (k < v->nfuncs && strcmp(v->funcs[k].name, name) != 0)
            k++;
        if (k == v->nfuncs) {
            if (v->nfuncs == DISCO_VIEW_FUNCS)
                continue;
            v->nfuncs++;
            v->funcs[k] = (disco_func_view_t){.total_s = tracing ? 0.0 : -1.0};
            snprintf(v->funcs[k].name, sizeof v->funcs[k].name, "%s", name);
        }
        v->funcs[k].calls += calls;
        v->funcs[k].workers++;
        if (tracing)
            v->funcs[k].total_s += secs(ticks, ns_per_tick, true);
    }
}

/* The collective whose epoch a flag holds, from the kernel's own (coll,
 * epoch): epochs are coll % UINT32_MAX + 1 (workers/device/ar.h), so a
 * flag seen steps back (epoch - seen) mod UINT32_MAX collectives. False
 * when that points before the first one (a value no member wrote). */
static bool flag_coll(uint64_t coll, uint32_t epoch, uint32_t seen, uint64_t *out)
{
    uint64_t back = seen <= epoch ? (uint64_t)(epoch - seen) : (uint64_t)epoch + UINT32_MAX - seen;
    if (seen == 0 || back >= coll)
        return false;
    *out = coll - back;
    return true;
}

/* Worker i's device kernel (workers/device/ar_progress.h) into o->kernel,
 * if it is in one: a kernel launched in the command the worker is busy in.
 * Every field is another process's word: a header out of range shows no
 * kernel, a piece word out of range or of another launch a quiet piece. */
static void take_kernel(const struct disco__view_src *src, const struct disco__wstat *w,
                        disco_worker_view_t *o)
{
    struct disco__ar_progress_copy k;
    if (o->state != DISCO_WORKER_BUSY || !disco__ar_progress_read(&w->kernel, &k) || !k.live ||
        k.cmd != o->seq || k.what != DISCO_ARP_ALLREDUCE || k.size < 1 ||
        k.size > DISCO_AR_MAX_RANKS || k.rank >= k.size || k.pieces < 1 ||
        k.pieces > DISCO_AR_MAX_PIECES || k.pieces > DISCO_VIEW_PIECES || k.epoch == 0 ||
        k.base >= (uint32_t)src->world || k.size > (uint32_t)src->world - k.base || k.coll == 0)
        return;
    disco_kernel_view_t *v = &o->kernel;
    *v = (disco_kernel_view_t){.active = true,
                               .coll = k.coll,
                               .two_shot = k.two_shot != 0,
                               .rank = (int)k.rank,
                               .size = (int)k.size,
                               .pieces = (int)k.pieces};
    snprintf(v->what, sizeof v->what, "allreduce");
    for (uint32_t b = 0; b < k.pieces; b++) {
        uint64_t pw = k.piece[b];
        uint32_t state = DISCO_AR_PW_STATE(pw), phase = DISCO_AR_PW_PHASE(pw);
        uint32_t member = DISCO_AR_PW_MEMBER(pw);
        if (pw == 0 || DISCO_AR_PW_TAG(pw) != (k.epoch & 0xffffu) ||
            (state != DISCO_AR_PW_WAITING && state != DISCO_AR_PW_PASSED) ||
            phase >= DISCO_AR_PHASES || (phase == DISCO_AR_MID && !k.two_shot) || member >= k.size)
            continue; /* quiet */
        disco_piece_view_t *p = &v->piece[b];
        p->state = state == DISCO_AR_PW_WAITING ? DISCO_PIECE_WAITING : DISCO_PIECE_PASSED;
        p->phase = (int)phase;
        p->member = src->gid_base + (int)(k.base + member);
        p->flag_set = state == DISCO_AR_PW_WAITING &&
                      flag_coll(k.coll, k.epoch, DISCO_AR_PW_SEEN(pw), &p->flag_coll);
    }
}

/* Worker i's part of the snapshot; now_ticks: the clock at the snapshot. */
static void take_worker(const struct disco__view_src *src, int i, double ns_per_tick,
                        uint64_t now_ticks, uint64_t issued, disco_session_view_t *v)
{
    const struct disco__wstat *w =
        disco__stat_worker((struct disco__stat_hdr *)(uintptr_t)src->stat, i);
    disco_worker_view_t *o = &v->workers[i];
    uint64_t seq, info, key, t_start;
    int tries = 0;
    do { /* S2: a (seq, info, key, t_start) of one command; see wstat.h */
        seq = atomic_load_explicit(&w->seq, memory_order_acquire);
        info = atomic_load_explicit(&w->info, memory_order_relaxed);
        key = atomic_load_explicit(&w->fkey, memory_order_relaxed);
        t_start = atomic_load_explicit(&w->t_start, memory_order_relaxed);
    } while (atomic_load_explicit(&w->seq, memory_order_acquire) != seq && ++tries < 8);
    /* Relaxed, the rest: counters and states of a monitor (wstat.h). */
    /* S5: acquire, pairs with the release of a command's end. */
    uint32_t state = atomic_load_explicit(&w->state, memory_order_acquire);
    *o = (disco_worker_view_t){.worker = src->gid_base + i,
                               .pid = i == 0 ? src->ctl->controller_pid
                                             : atomic_load_explicit(&w->pid, memory_order_relaxed),
                               .state = state <= DISCO_WS_EXITED ? (disco_worker_state_t)state
                                                                 : DISCO_WORKER_STARTING,
                               .seq = seq,
                               .cmd = (uint32_t)info,
                               .in_cmd_s = -1.0,
                               .done = atomic_load_explicit(&w->done, memory_order_relaxed),
                               .queued = issued > seq ? issued - seq : 0,
                               .cpu_s = -1.0};
    if (seq != 0)
        cmd_label(src->stat, info, key, o->name, sizeof o->name);
    bool timed = src->tracing;
    if (timed && o->state == DISCO_WORKER_BUSY && t_start != 0 && now_ticks > t_start)
        o->in_cmd_s = secs(now_ticks - t_start, ns_per_tick, true);
    o->busy_s =
        secs(atomic_load_explicit(&w->busy_ticks, memory_order_relaxed), ns_per_tick, timed);
    double idle =
        secs(atomic_load_explicit(&w->idle_ticks, memory_order_relaxed), ns_per_tick, timed);
    double park = (double)atomic_load_explicit(&w->park_ns, memory_order_relaxed) / 1e9;
    o->park_s = park;
    o->spin_s = timed ? (idle > park ? idle - park : 0.0) : -1.0;
    if (i == 0)                         /* worker 0 is the controller's thread: it never parks */
        o->park_s = timed ? 0.0 : -1.0; /* between commands it is the caller's */
    add_funcs(src->stat, w, ns_per_tick, timed, v);
    take_kernel(src, w, o);
}

disco_status_t disco__view_take(const struct disco__view_src *src, disco_session_view_t *out)
{
    const struct disco__stat_hdr *h = src->stat;
    /* Another process's word, read once for the whole snapshot and bounded
     * before it narrows: one that leaves no room for world ids in an int
     * (a lie: 2**32 - 2 would show workers -2, -1, 0) is shown as 0
     * (test_observer_bounds_gid_base). */
    uint32_t gb = src->ctl->gid_base;
    struct disco__view_src s = *src;
    s.gid_base = gb <= (uint32_t)(INT_MAX - (src->world - 1)) ? (int)gb : 0;
    disco_session_view_t v = {.pid = src->ctl->controller_pid,
                              .world = src->world,
                              .gid_base = s.gid_base,
                              .tracing = src->tracing,
                              .wait_s = -1.0,
                              .watchdog_ms = h->watchdog_ms};
    v.workers = calloc((size_t)src->world, sizeof *v.workers);
    if (v.workers == NULL)
        return disco_set_error(DISCO_E_NOMEM, "a view of %d workers", src->world);
    /* The clock pair of the session's (checked: the observer's clock must
     * be the same kind, else times are unknown). */
    bool same_clock = (h->tick_tsc != 0) == disco__tick_tsc;
    v.tracing = v.tracing && same_clock;
    s.tracing = v.tracing;
    double scale = v.tracing ? disco__ns_per_tick(h->tick0, h->ns0) : 1.0;
    int64_t now = disco_now_ns();
    uint64_t now_ticks = disco__ticks();
    v.at_s = (double)now / 1e9;
    /* Acquire: pairs with the release that broke the session (session.c),
     * which wrote why first. */
    int32_t broken = atomic_load_explicit(&src->ctl->broken, memory_order_acquire);
    v.health = broken;
    if (broken != 0) {
        size_t i = 0;
        for (; i + 1 < sizeof v.why && i < DISCO_STAT_WHY; i++) {
            char c = atomic_load_explicit(&h->why[i], memory_order_relaxed);
            if (c == '\0')
                break;
            v.why[i] = (unsigned char)c < 0x20 || (unsigned char)c >= 0x7f ? '?' : c;
        }
        v.why[i] = '\0';
    }
    /* Relaxed: a monitor's words (wstat.h). */
    v.issued = atomic_load_explicit(&h->issued, memory_order_relaxed);
    v.watchdog_reports = atomic_load_explicit(&h->reports, memory_order_relaxed);
    int64_t since = atomic_load_explicit(&h->wait_since, memory_order_relaxed);
    int64_t w0_since = atomic_load_explicit(&h->w0_since, memory_order_relaxed);
    if (since != 0) {
        uint32_t what = atomic_load_explicit(&h->wait_what, memory_order_relaxed);
        v.wait = what == DISCO_CW_ROOM ? DISCO_VIEW_WAIT_ROOM : DISCO_VIEW_WAIT_REPLY;
        v.wait_seq = atomic_load_explicit(&h->wait_seq, memory_order_relaxed);
        int32_t ww = atomic_load_explicit(&h->wait_worker, memory_order_relaxed);
        v.wait_worker = ww >= 0 && ww < src->world ? ww + s.gid_base : -1; /* -1: a lie */
    } else if (w0_since != 0) {
        v.wait = DISCO_VIEW_WAIT_COLLECTIVE;
        since = w0_since;
    }
    if (since != 0)
        v.wait_s = now > since ? (double)(now - since) / 1e9 : 0.0;
    for (int i = 0; i < src->world; i++)
        take_worker(&s, i, scale, now_ticks, v.issued, &v);
    if (v.wait == DISCO_VIEW_WAIT_COLLECTIVE)
        v.wait_seq = v.workers[0].seq;
    *out = v;
    return DISCO_OK;
}

void disco_view_free(disco_session_view_t *v)
{
    if (v == NULL)
        return;
    free(v->workers);
    v->workers = NULL;
}

const char *disco_worker_state_name(disco_worker_state_t st)
{
    switch (st) {
    case DISCO_WORKER_STARTING:
        return "starting";
    case DISCO_WORKER_BUSY:
        return "busy";
    case DISCO_WORKER_IDLE:
        return "idle";
    case DISCO_WORKER_PARKED:
        return "parked";
    case DISCO_WORKER_EXITED:
        return "exited";
    }
    return "?";
}
