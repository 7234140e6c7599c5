/* wait.c - spin (pause, then yield), then park on a shared futex. */
#include "disco/shm/wait.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm/ticks.h"
#include "shm/wait_internal.h"

/* Shared (not FUTEX_PRIVATE) operations: the word lives in a MAP_SHARED
 * mapping used by several processes. */
static long futex_wait(_Atomic uint32_t *word, uint32_t expect, int64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = timeout_ns / 1000000000LL,
                          .tv_nsec = timeout_ns % 1000000000LL};
    return syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expect, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void disco__waitq_wake_slow(disco_waitq_t *q)
{
    /* K3: release so a waiter that reads the new word also sees K0 (it
     * re-checks its condition after waking anyway). */
    atomic_fetch_add_explicit(&q->word, 1, memory_order_release);
    futex_wake(&q->word);
}

void disco_waitq_wake_all(disco_waitq_t *q)
{
#ifndef DISCO__TSAN /* K3 below is a release RMW, enough on its own there */
    atomic_thread_fence(memory_order_seq_cst); /* as K1 */
#endif
    disco__waitq_wake_slow(q);
}

/* Abort word, deadline and callback, in that order. */
static disco_status_t check_exits(const disco_wait_t *w, int64_t now)
{
    if (w->abort_word != NULL) {
        /* Acquire: whoever set the word published its reason first. */
        int32_t a = atomic_load_explicit(w->abort_word, memory_order_acquire);
        if (a != 0)
            return (disco_status_t)a;
    }
    if (w->deadline_ns != 0 && now >= w->deadline_ns)
        return disco_set_error(DISCO_E_TIMEOUT, "wait passed its deadline");
    if (w->check != NULL)
        return w->check(w->check_ctx);
    return DISCO_OK;
}

disco_status_t disco_wait_check(const disco_wait_t *w, int64_t now)
{
    return w != NULL ? check_exits(w, now) : DISCO_OK;
}

/* Parks once for at most a slice; returns after a wake, a timeout or a
 * signal. The caller re-checks everything. */
static void park(disco_waitq_t *q, disco_cond_fn cond, void *arg, const disco_wait_t *w,
                 int64_t now)
{
    int64_t slice =
        (int64_t)(w->park_slice_ms ? w->park_slice_ms : DISCO_WAIT_DEFAULT_SLICE_MS) * 1000000LL;
    if (w->deadline_ns != 0 && w->deadline_ns - now < slice)
        slice = w->deadline_ns - now;
    if (slice <= 0)
        return;
    if (q == NULL) {
        struct timespec ts = {.tv_sec = slice / 1000000000LL, .tv_nsec = slice % 1000000000LL};
        nanosleep(&ts, NULL);
        return;
    }
    /* P1: announce; the fence pairs with the waker's K1. */
    atomic_fetch_add_explicit(&q->waiters, 1, memory_order_seq_cst);
#ifndef DISCO__TSAN /* there the waker's K2 is an RMW (wait.h) */
    atomic_thread_fence(memory_order_seq_cst);
#endif
    /* P2: seq_cst load; if it sees a K3 it synchronizes with it. */
    uint32_t epoch = atomic_load_explicit(&q->word, memory_order_seq_cst);
    if (!cond(arg))                         /* P3 */
        futex_wait(&q->word, epoch, slice); /* P4; EAGAIN/EINTR/ETIMEDOUT all mean re-check */
    /* Relaxed: the count is only a hint for wakers; it drops after we stopped
     * waiting, so it never under-counts a parked waiter. */
    atomic_fetch_sub_explicit(&q->waiters, 1, memory_order_relaxed);
}

/* A check of the condition after the wait began: stamps the wait's
 * found_at (shm/wait_internal.h) when it holds. The clock is read before the
 * check, so the read overlaps the wait for the data instead of following its
 * arrival (the overlap rule: workers/core/trace_ring.h). */
static inline bool found(disco_cond_fn cond, void *arg, const disco_wait_t *w)
{
    uint64_t *found_at = disco__wait_found_at(w);
    if (found_at == NULL)
        return cond(arg);
    uint64_t t = disco__ticks();
    if (!cond(arg))
        return false;
    *found_at = t;
    return true;
}

/* Parks once (park()), reporting it to the wait's hook: the state word
 * around it and the time parked after it (a clock read next to a
 * syscall, off every fast path). */
static void park_reported(disco_waitq_t *q, disco_cond_fn cond, void *arg, const disco_wait_t *w,
                          int64_t now)
{
    struct disco__wait_hook *h = disco__wait_hook(w);
    if (h == NULL || (h->state == NULL && h->park_ns == NULL)) {
        park(q, cond, arg, w, now);
        return;
    }
    /* Relaxed, all three: a monitor's words (wait_internal.h). */
    if (h->state != NULL)
        atomic_store_explicit(h->state, h->parked_state, memory_order_relaxed);
    park(q, cond, arg, w, now);
    if (h->park_ns != NULL)
        atomic_store_explicit(h->park_ns,
                              atomic_load_explicit(h->park_ns, memory_order_relaxed) +
                                  (uint64_t)(disco_now_ns() - now),
                              memory_order_relaxed);
    if (h->state != NULL)
        atomic_store_explicit(h->state, h->awake_state, memory_order_relaxed);
}

static disco_status_t wait_slow(disco_waitq_t *q, disco_cond_fn cond, void *arg,
                                const disco_wait_t *w, int64_t start);

disco_status_t disco_wait_until(disco_waitq_t *q, disco_cond_fn cond, void *arg,
                                const disco_wait_t *w)
{
    static const disco_wait_t defaults;
    if (w == NULL)
        w = &defaults;
    if (cond(arg))
        return DISCO_OK;
    if (w->no_wait)
        return DISCO_E_AGAIN;
    int64_t start = disco_now_ns();
    struct disco__wait_hook *h = disco__wait_hook(w);
    if (h == NULL || h->since == NULL)
        return wait_slow(q, cond, arg, w, start);
    /* Relaxed, both: a monitor's word (wait_internal.h). */
    atomic_store_explicit(h->since, start, memory_order_relaxed);
    disco_status_t st = wait_slow(q, cond, arg, w, start);
    atomic_store_explicit(h->since, 0, memory_order_relaxed);
    return st;
}

/* The wait proper, once the condition was found false at start. */
static disco_status_t wait_slow(disco_waitq_t *q, disco_cond_fn cond, void *arg,
                                const disco_wait_t *w, int64_t start)
{

    uint64_t pause_ns = w->pause_ns ? w->pause_ns : DISCO_WAIT_DEFAULT_PAUSE_NS;
    uint64_t spin_ns = w->spin_ns ? w->spin_ns : DISCO_WAIT_DEFAULT_SPIN_NS;
    if (pause_ns > spin_ns)
        pause_ns = spin_ns;
    int64_t last_check = start;
    disco_status_t st;
    disco_wait_t timed;
    if (w->deadline_ns == 0 && w->timeout_ns > 0) {
        timed = *w;
        timed.deadline_ns = start + w->timeout_ns;
        w = &timed;
    }

    /* Spin. Pause alone while the peer is probably running on another core
     * and about to answer (a round trip there is ~150 ns): the clock is read
     * every 32 pauses (a vDSO call, ~20 ns). Past pause_ns it is more likely
     * that the peer needs our core, so yield at every check from then on. */
    bool yielding = false;
    for (uint32_t i = 1;; i++) {
        if (found(cond, arg, w))
            return DISCO_OK;
        if (!yielding && (i & 31) != 0) {
            disco_cpu_relax();
            continue;
        }
        int64_t now = disco_now_ns();
        uint64_t spun = (uint64_t)(now - start);
        if (spun >= spin_ns)
            break;
        if (now - last_check >= 1000000 || (w->deadline_ns != 0 && now >= w->deadline_ns)) {
            last_check = now;
            if ((st = check_exits(w, now)) != DISCO_OK)
                return st;
        }
        if (spun >= pause_ns) {
            yielding = true;
            sched_yield();
        } else {
            disco_cpu_relax();
        }
    }

    /* Park, a slice at a time, looking at the exits after each. */
    for (;;) {
        if (found(cond, arg, w))
            return DISCO_OK;
        int64_t now = disco_now_ns();
        if ((st = check_exits(w, now)) != DISCO_OK) {
            /* Data that came just as the deadline passed still counts. An
             * abort or a callback's status never yields to the condition:
             * the callback may have acted on what it found (reaped a child,
             * marked a reader dead, which makes the condition true) and the
             * news would be lost for good (tests/test_wait.c
             * test_check_status_not_swallowed). */
            if (st == DISCO_E_TIMEOUT && w->deadline_ns != 0 && now >= w->deadline_ns && cond(arg))
                return DISCO_OK;
            return st;
        }
        park_reported(q, cond, arg, w, now);
    }
}

disco_status_t disco_wait_fd(int fd, short events, const disco_wait_t *w)
{
    static const disco_wait_t defaults;
    if (w == NULL)
        w = &defaults;
    int64_t slice = (int64_t)(w->park_slice_ms ? w->park_slice_ms : DISCO_WAIT_DEFAULT_SLICE_MS);
    disco_wait_t timed;
    if (w->deadline_ns == 0 && w->timeout_ns > 0) {
        timed = *w;
        timed.deadline_ns = disco_now_ns() + w->timeout_ns;
        w = &timed;
    }
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int64_t ms = w->no_wait ? 0 : slice;
        int64_t now = disco_now_ns();
        if (w->deadline_ns != 0 && (w->deadline_ns - now) / 1000000 < ms)
            ms = w->deadline_ns > now ? (w->deadline_ns - now + 999999) / 1000000 : 0;
        int n = poll(&p, 1, (int)ms);
        if (n > 0)
            return DISCO_OK;
        if (n < 0 && errno != EINTR)
            return disco_set_error(DISCO_E_SYS, "poll(fd %d): %s", fd, strerror(errno));
        if (w->no_wait)
            return DISCO_E_AGAIN;
        disco_status_t st = check_exits(w, disco_now_ns());
        if (st != DISCO_OK)
            return st;
    }
}
