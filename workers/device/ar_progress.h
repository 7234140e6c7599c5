/*
 * ar_progress.h - where a worker's device collective kernel stands: its
 * record in the session's status region (internal; C only; the words'
 * meaning is in ar.h, "Progress"; the region is workers/core/wstat.h's,
 * one record per worker in its struct disco__wstat).
 *
 * Writers: one, the worker's own thread. It writes the header when it
 * launches a kernel (disco__ar_launch) and marks it ended; the piece words
 * are written by the sim's kernel, which runs in that thread at its sync
 * (ar_sim.c), or, on CUDA, copied by that thread from the pinned words the
 * kernel writes, at each poll of its sync (cuda_ar.c, ar_cuda.h). Readers:
 * the controller's thread (the watchdog, disco_session_view) and other
 * processes, which map the region read-only (`disco top`): to them every
 * word is hostile input, checked before use (scheduler/observe/view.c).
 * Nobody waits on these words and nothing the session decides rests on
 * them, so they cost the kernel nothing it would notice:
 *   P1 the header is a seqlock, as wstat.h's S3: the writer makes ver odd
 *      (an acq_rel exchange: later stores stay after it, earlier ones
 *      before it), stores every header field and clears every piece word
 *      with release stores, then makes ver even (release);
 *   P2 a reader loads ver, every header field and live with acquire, then
 *      ver again (acquire): if both are the same even number, the header
 *      is one launch's. Per-field release/acquire rather than fences, as
 *      in wstat.h (ThreadSanitizer builds refuse fences). Its later loads
 *      of the piece words are ordered after P1's clears (the first acquire
 *      of ver read P1's last release), so a piece word it reads is that
 *      launch's or newer.
 *   P3 a piece word is one relaxed 64-bit store (ar.h gives its bits):
 *      a monitor's picture, ordered with nothing. A reader takes it only if
 *      its tag is the header's epoch (a word newer than the header it read
 *      belongs to the next launch) and its fields are in range.
 *   P4 the end of a kernel is a relaxed store of live = 0: it publishes
 *      nothing; a reader that misses it shows the kernel a moment longer.
 */
#ifndef DISCO_WORKERS_DEVICE_AR_PROGRESS_H
#define DISCO_WORKERS_DEVICE_AR_PROGRESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "workers/device/ar.h"

/* What the kernel does (the header's what). */
#define DISCO_ARP_ALLREDUCE 1u

struct disco__ar_progress {
    _Atomic uint32_t ver;   /* P1 */
    _Atomic uint32_t live;  /* 1: launched, not known to have ended (P4) */
    _Atomic uint64_t cmd;   /* the worker's command it runs in */
    _Atomic uint64_t coll;  /* the collective's number */
    _Atomic uint32_t epoch; /* what its flags wait for */
    _Atomic uint32_t shape; /* what | two_shot << 4 | pieces << 8 | rank << 16 | size << 24 */
    _Atomic uint32_t base;  /* the group's first worker (node-local id) */
    uint32_t reserved;
    _Atomic uint64_t piece[DISCO_AR_MAX_PIECES]; /* P3 */
};

/* A reader's copy of a record (P2), not yet checked. */
struct disco__ar_progress_copy {
    bool live;
    uint64_t cmd, coll;
    uint32_t epoch, what, two_shot, pieces, rank, size, base;
    uint64_t piece[DISCO_AR_MAX_PIECES];
};

/** The worker's thread: job j was launched (P1). */
static inline void disco__ar_progress_begin(struct disco__ar_progress *p,
                                            const struct disco__ar_job *j)
{
    /* Relaxed: only this thread writes ver (so it is even here). */
    uint32_t v = atomic_load_explicit(&p->ver, memory_order_relaxed) & ~1u;
    atomic_exchange_explicit(&p->ver, v + 1, memory_order_acq_rel); /* odd: being written */
    /* P1: release each, so that a reader whose acquire (P2) reads one of
     * them also sees ver odd or newer when it loads ver again. */
    atomic_store_explicit(&p->cmd, j->cmd, memory_order_release);
    atomic_store_explicit(&p->coll, j->coll, memory_order_release);
    atomic_store_explicit(&p->epoch, j->epoch, memory_order_release);
    atomic_store_explicit(&p->shape,
                          DISCO_ARP_ALLREDUCE | (j->two_shot & 1u) << 4 | (j->pieces & 0xffu) << 8 |
                              (j->rank & 0xffu) << 16 | (j->size & 0xffu) << 24,
                          memory_order_release);
    atomic_store_explicit(&p->base, j->base, memory_order_release);
    for (unsigned i = 0; i < DISCO_AR_MAX_PIECES; i++)
        atomic_store_explicit(&p->piece[i], 0, memory_order_release);
    atomic_store_explicit(&p->live, 1, memory_order_release);
    /* Release: pairs with the reader's first acquire of ver. */
    atomic_store_explicit(&p->ver, v + 2, memory_order_release);
}

/** Where piece stands (P3): w is an ar.h piece word. */
static inline void disco__ar_progress_piece(struct disco__ar_progress *p, uint32_t piece,
                                            uint64_t w)
{
    if (p != NULL && piece < DISCO_AR_MAX_PIECES)
        atomic_store_explicit(&p->piece[piece], w, memory_order_relaxed); /* P3 */
}

/** The kernel ended, or never ran (P4). */
static inline void disco__ar_progress_stop(struct disco__ar_progress *p)
{
    if (p != NULL)
        atomic_store_explicit(&p->live, 0, memory_order_relaxed); /* P4 */
}

/** A reader's copy of p (P2, then P3's words); false when the header was
 *  being rewritten at every try. Checks nothing: see view.c. */
static inline bool disco__ar_progress_read(const struct disco__ar_progress *p,
                                           struct disco__ar_progress_copy *out)
{
    for (int tries = 0; tries < 8; tries++) {
        /* P2: acquire throughout. */
        uint32_t v = atomic_load_explicit(&p->ver, memory_order_acquire);
        out->cmd = atomic_load_explicit(&p->cmd, memory_order_acquire);
        out->coll = atomic_load_explicit(&p->coll, memory_order_acquire);
        out->epoch = atomic_load_explicit(&p->epoch, memory_order_acquire);
        uint32_t shape = atomic_load_explicit(&p->shape, memory_order_acquire);
        out->base = atomic_load_explicit(&p->base, memory_order_acquire);
        out->live = atomic_load_explicit(&p->live, memory_order_acquire) == 1;
        if ((v & 1u) != 0 || atomic_load_explicit(&p->ver, memory_order_acquire) != v)
            continue;
        out->what = shape & 0xfu;
        out->two_shot = shape >> 4 & 1u;
        out->pieces = shape >> 8 & 0xffu;
        out->rank = shape >> 16 & 0xffu;
        out->size = shape >> 24 & 0xffu;
        for (unsigned i = 0; i < DISCO_AR_MAX_PIECES; i++) /* P3: relaxed, hints */
            out->piece[i] = atomic_load_explicit(&p->piece[i], memory_order_relaxed);
        return true;
    }
    return false;
}

#endif
