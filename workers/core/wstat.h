/*
 * wstat.h - what every worker is doing, in the control segment (internal):
 * the status region that the watchdog, disco_session_dump and `disco top`
 * read (scheduler/observe/).
 *
 * The region is a header (struct disco__stat_hdr: the controller's side)
 * followed by one struct disco__wstat per worker of the node, worker 0
 * included. Every word has exactly one writer:
 *   - a worker's struct: that worker (worker 0's: the controller's thread,
 *     which runs worker 0 inline);
 *   - the header: the controller's thread.
 * Readers are the controller itself (the watchdog) and other processes
 * (`disco top`), which map the segment read-only. Nobody waits on these
 * words and no decision of the session rests on them: a reader sees a
 * recent picture, field by field. So every store and load is relaxed,
 * except where a reader must see a group of fields belong together:
 *   S1 a worker stores info and t_start, then seq with release; a reader
 *      that loads seq with acquire (S2), reads info and t_start and loads
 *      seq again: if seq is unchanged the three belong to one command (a
 *      newer command may have started in between: then the reader retries
 *      or reports the newer seq without its stamp).
 *   S5 a worker stores done (and its busy time), then state idle with
 *      release; a reader that loads state with acquire and sees it idle
 *      after seq sees that command counted.
 *   S3 a name entry is a seqlock: the controller makes ver odd (an
 *      acq_rel exchange), writes reg and name with release stores, makes
 *      ver even (release); a reader (S4) loads ver, reg and every name
 *      byte with acquire, loads ver again and keeps the copy only if both
 *      are the same even number. Per-field release/acquire rather than
 *      fences, as in trace_ring.h (ThreadSanitizer builds refuse fences);
 *      the bytes are atomics, so a torn copy is a value to drop, never a
 *      data race.
 *
 * Cost on the command path (the watch must cost the session nothing that it
 * does not already pay): no syscall, no lock, no clock read. A worker
 * stores a handful of words into cache lines only it writes; the times come
 * from the trace stamps the worker already takes (tracing on, the default),
 * and parked time from the wait loop's own clock reads around the futex
 * (shm/wait_internal.h), which sit next to a syscall anyway. With tracing
 * off every time field stays 0 ("unknown"); counts and states still move.
 */
#ifndef DISCO_WORKERS_WSTAT_H
#define DISCO_WORKERS_WSTAT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "workers/device/ar_progress.h"

#define DISCO_STAT_MAGIC 0x5441545343534944ULL /* "DISCSTAT" */
#define DISCO_STAT_FUNCS 32u                   /* per-worker function table */
#define DISCO_STAT_NAMES 256u                  /* function key -> name entries */
#define DISCO_STAT_NAME  48u
#define DISCO_STAT_WHY   256u

/* A worker's state (struct disco__wstat.state). */
enum disco__wstate {
    DISCO_WS_STARTING = 0, /* not yet in its loop */
    DISCO_WS_BUSY = 1,     /* executing command seq */
    DISCO_WS_IDLE = 2,     /* between commands, spinning or polling */
    DISCO_WS_PARKED = 3,   /* between commands, asleep on the futex */
    DISCO_WS_EXITED = 4,   /* left its loop */
};

/* What the controller is waiting for (struct disco__stat_hdr.wait_what). */
enum disco__cwait {
    DISCO_CW_NONE = 0,
    DISCO_CW_ROOM = 1,  /* room in the command channel, to broadcast wait_seq */
    DISCO_CW_REPLY = 2, /* wait_worker's reply to wait_seq (sync, debug get/set) */
};

/* One function's figures on one worker: calls and ticks inside them
 * (ticks: with tracing on). key: the function's (registry.h); 0: unused.
 * A function takes the first free entry from its key's home (linear
 * probing); past DISCO_STAT_FUNCS functions a newcomer takes its home
 * entry and the figures there restart. */
struct disco__wstat_func {
    _Atomic uint64_t key;
    _Atomic uint64_t calls;
    _Atomic uint64_t ticks;
    uint64_t reserved;
};

struct disco__wstat {
    _Alignas(64) _Atomic uint64_t seq; /* the command started last (S1) */
    _Atomic uint64_t info;             /* its command code */
    _Atomic uint64_t fkey;             /* a call's function key (registry.h), else 0 */
    _Atomic uint64_t t_start;          /* ticks it started; 0: unknown (tracing off) */
    _Atomic uint64_t done;             /* commands finished */
    _Atomic uint64_t busy_ticks;       /* ticks inside commands */
    _Atomic uint64_t idle_ticks;       /* ticks between commands (spinning and parked) */
    _Atomic uint64_t park_ns;          /* nanoseconds parked between commands */
    _Atomic uint32_t state;            /* enum disco__wstate */
    _Atomic int32_t pid;
    _Alignas(64) struct disco__wstat_func func[DISCO_STAT_FUNCS];
    /* Its device collective kernel's progress: its own protocol, P1-P4 in
     * workers/device/ar_progress.h. */
    _Alignas(64) struct disco__ar_progress kernel;
};

struct disco__stat_name {
    _Atomic uint32_t ver; /* seqlock (S3) */
    uint32_t reserved;
    _Atomic uint64_t key; /* the function's key (registry.h) */
    _Atomic char name[DISCO_STAT_NAME];
};

struct disco__stat_hdr {
    _Alignas(64) uint64_t magic;
    uint32_t world;
    uint32_t tick_tsc; /* ticks are TSC cycles (1) or nanoseconds (0) */
    uint64_t tick0;    /* a clock pair taken at open: ticks and */
    int64_t ns0;       /* CLOCK_MONOTONIC nanoseconds at the same moment */
    uint32_t watchdog_ms;
    uint32_t reserved;
    /* The controller. */
    _Alignas(64) _Atomic uint64_t issued; /* the last command broadcast */
    _Atomic uint64_t wait_seq;            /* what it waits for: enum disco__cwait */
    _Atomic uint32_t wait_what;
    _Atomic int32_t wait_worker;
    _Atomic int64_t wait_since; /* CLOCK_MONOTONIC ns its current wait began; 0: not waiting */
    _Atomic int64_t w0_since;   /* the same for worker 0's waits inside commands */
    _Atomic uint64_t reports;   /* watchdog reports written */
    _Atomic char why[DISCO_STAT_WHY]; /* what broke the session, set before ctl->broken */
    _Alignas(64) struct disco__stat_name names[DISCO_STAT_NAMES];
};

/* A worker's local mirror of its counters, so that updating one is a store,
 * not a load of a shared line and a store. Lives with the worker. */
struct disco__wstat_writer {
    struct disco__wstat *w; /* NULL: no status */
    uint64_t done, busy, idle;
    uint64_t fkey[DISCO_STAT_FUNCS], fcalls[DISCO_STAT_FUNCS], fticks[DISCO_STAT_FUNCS];
};

/** The status region's size for world workers. */
static inline uint64_t disco__stat_size(uint32_t world)
{
    return sizeof(struct disco__stat_hdr) + (uint64_t)world * sizeof(struct disco__wstat);
}

/** Worker i's struct in a region whose header is h. */
static inline struct disco__wstat *disco__stat_worker(struct disco__stat_hdr *h, int i)
{
    return (struct disco__wstat *)(h + 1) + i;
}

static inline void disco__wstat_state(struct disco__wstat_writer *s, enum disco__wstate st)
{
    if (s->w != NULL)
        atomic_store_explicit(&s->w->state, (uint32_t)st, memory_order_relaxed);
}

/** A command began: seq, code, the called function's key (0: not a
 *  call), start stamp (ticks; 0 unknown), and the idle time before it
 *  (ticks; 0 unknown). */
static inline void disco__wstat_begin(struct disco__wstat_writer *s, uint64_t seq, uint32_t code,
                                      uint64_t key, uint64_t t_start, uint64_t idle)
{
    struct disco__wstat *w = s->w;
    if (w == NULL)
        return;
    atomic_store_explicit(&w->info, code, memory_order_relaxed);
    atomic_store_explicit(&w->fkey, key, memory_order_relaxed);
    atomic_store_explicit(&w->t_start, t_start, memory_order_relaxed);
    /* S1: release, pairs with the reader's S2 (see the top). */
    atomic_store_explicit(&w->seq, seq, memory_order_release);
    atomic_store_explicit(&w->state, DISCO_WS_BUSY, memory_order_relaxed);
    if (idle != 0) {
        s->idle += idle;
        atomic_store_explicit(&w->idle_ticks, s->idle, memory_order_relaxed);
    }
}

/** The command begun last is done after dur ticks (0: unknown); key is
 *  the function it called (0: not a call). */
static inline void disco__wstat_end(struct disco__wstat_writer *s, uint64_t key, uint64_t dur)
{
    struct disco__wstat *w = s->w;
    if (w == NULL)
        return;
    if (dur != 0) {
        s->busy += dur;
        atomic_store_explicit(&w->busy_ticks, s->busy, memory_order_relaxed);
    }
    atomic_store_explicit(&w->done, ++s->done, memory_order_relaxed);
    /* S5: release, pairs with the reader's acquire of state: a reader that
     * sees the worker idle after seq sees it counted done. */
    atomic_store_explicit(&w->state, DISCO_WS_IDLE, memory_order_release);
    if (key == 0)
        return;
    /* Open addressing in the local mirror: the function's entry, else the
     * first free one; a full table gives the home entry to the newcomer
     * (its figures restart). */
    unsigned home = (unsigned)(key % DISCO_STAT_FUNCS), i = home;
    while (s->fkey[i] != key && s->fkey[i] != 0) {
        i = (i + 1) % DISCO_STAT_FUNCS;
        if (i == home)
            break;
    }
    struct disco__wstat_func *f = &w->func[i];
    if (s->fkey[i] != key) {
        s->fkey[i] = key;
        s->fcalls[i] = s->fticks[i] = 0;
        atomic_store_explicit(&f->key, key, memory_order_relaxed);
    }
    atomic_store_explicit(&f->calls, ++s->fcalls[i], memory_order_relaxed);
    if (dur != 0) {
        s->fticks[i] += dur;
        atomic_store_explicit(&f->ticks, s->fticks[i], memory_order_relaxed);
    }
}

/** Copies why into the header (the controller, before it stores the
 *  broken word with release, which publishes it). */
static inline void disco__stat_set_why(struct disco__stat_hdr *h, const char *why)
{
    size_t n = strlen(why);
    for (size_t i = 0; i < DISCO_STAT_WHY; i++) /* relaxed: the broken word's release orders them */
        atomic_store_explicit(&h->why[i], i < n && i + 1 < DISCO_STAT_WHY ? why[i] : '\0',
                              memory_order_relaxed);
}

/** Records the name of the function whose key is key (the controller, at
 *  get function; S3). */
static inline void disco__stat_name_set(struct disco__stat_hdr *h, uint64_t key, const char *name)
{
    struct disco__stat_name *e = &h->names[key % DISCO_STAT_NAMES];
    if (atomic_load_explicit(&e->key, memory_order_relaxed) == key)
        return; /* recorded already (only this thread writes it) */
    uint32_t v = atomic_load_explicit(&e->ver, memory_order_relaxed); /* only we write it */
    /* Odd: being written. Acquire (of the RMW) keeps the stores below after
     * it; release keeps the previous write's stores before it. */
    atomic_exchange_explicit(&e->ver, v + 1, memory_order_acq_rel);
    /* S3: each store releases, so a reader whose acquire load (S4) reads one
     * of them also sees ver odd or newer when it loads ver again. */
    atomic_store_explicit(&e->key, key, memory_order_release);
    size_t n = strlen(name);
    for (size_t i = 0; i < DISCO_STAT_NAME; i++)
        atomic_store_explicit(&e->name[i], i < n && i + 1 < DISCO_STAT_NAME ? name[i] : '\0',
                              memory_order_release);
    /* Release: pairs with the reader's first acquire load of ver. */
    atomic_store_explicit(&e->ver, v + 2, memory_order_release);
}

#endif
