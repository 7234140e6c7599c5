/*
 * disco/shm/wait.h - spin, then park: waiting on shared memory across processes.
 *
 * A waiter first spins on its condition: a short phase of pause instructions,
 * then sched_yield() between checks so that a peer sharing the core gets to
 * run (workers often outnumber cores). Past the spin budget it parks on a
 * futex word that lives in shared memory beside the data (disco_waitq_t). The
 * waker makes the futex syscall only when the waiter count says someone is
 * parked, so the hot path never enters the kernel.
 *
 * Every wait has an absolute deadline and watches an abort word and an
 * optional check callback; it ends with DISCO_E_TIMEOUT, the abort status, or
 * the callback's status instead of hanging. A parked waiter wakes at least
 * every park_slice_ms to look at them.
 *
 * Protocol (the numbers are the labels used in the code):
 *   waiter                                 waker
 *   P1 waiters += 1 (seq_cst) + fence      K0 publish the data (release)
 *   P2 epoch = word (seq_cst)              K1 fence (seq_cst)
 *   P3 re-check the condition              K2 if waiters != 0:
 *   P4 futex_wait(word, epoch, slice)          K3 word += 1; futex_wake(word)
 * P1/K1 are a store-buffer pair: either the waiter's P3 sees the data, or the
 * waker's K2 sees the waiter. P2 before P3 makes a wake between them visible
 * as a changed word, so P4 returns at once instead of sleeping through it.
 */
#ifndef DISCO_WAIT_H
#define DISCO_WAIT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "disco/clock.h"
#include "disco/status.h"

/* The atomics are C11's; C++ (which has no _Atomic before C++23) sees them
 * as std::atomic of the same type, which GCC and Clang lay out alike (same
 * size and alignment, lock-free: checked below), so the structs keep one
 * layout and the inline wake below keeps its memory orders. */
#ifdef __cplusplus
#include <atomic>
#define DISCO__ATOMIC(T)  std::atomic<T>
#define DISCO__ALIGNAS(n) alignas(n)
#define DISCO__STD        std::
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  alignof(std::atomic<uint32_t>) == alignof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "disco: std::atomic<uint32_t> must match C's _Atomic uint32_t");
static_assert(sizeof(std::atomic<int32_t>) == sizeof(int32_t) &&
                  alignof(std::atomic<int32_t>) == alignof(int32_t) &&
                  std::atomic<int32_t>::is_always_lock_free,
              "disco: std::atomic<int32_t> must match C's _Atomic int32_t");
#else
#include <stdatomic.h>
#define DISCO__ATOMIC(T)  _Atomic T
#define DISCO__ALIGNAS(n) _Alignas(n)
#define DISCO__STD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ThreadSanitizer does not model atomic_thread_fence (GCC refuses it under
 * -fsanitize=thread with -Werror=tsan). In such builds the waker's K1 fence +
 * K2 load become one seq_cst read-modify-write of the waiter count, and P1
 * needs no fence: an RMW reads the latest count, so either it comes after the
 * waiter's P1 and sees the waiter, or P1 reads from it, synchronizes with it
 * and P3 sees K0. The same guarantee at the cost of an RMW per wake, in
 * sanitizer builds only. */
#if defined(__SANITIZE_THREAD__)
#define DISCO__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DISCO__TSAN 1
#endif
#endif

/* A futex word and its waiter count; lives in shared memory on its own cache
 * line. Zero-initialised memory is a valid, empty queue. */
typedef struct disco_waitq {
    DISCO__ALIGNAS(64) DISCO__ATOMIC(uint32_t) word; /* bumped by each wake that finds waiters */
    DISCO__ATOMIC(uint32_t) waiters;                 /* processes parked or about to park */
} disco_waitq_t;

/* How to wait. Zero-initialised means: default spin, no deadline, no abort
 * word, no callback. */
typedef struct disco_wait {
    uint64_t pause_ns;      /* spin with pause only this long, then yield; 0 = default */
    uint64_t spin_ns;       /* total spin before parking; 0 = default */
    int64_t deadline_ns;    /* absolute, disco_now_ns() clock; 0 = none */
    int64_t timeout_ns;     /* with no deadline_ns: relative to the moment the wait
                               first finds it must wait (saves a clock read on
                               waits that never wait); 0 = none */
    uint32_t park_slice_ms; /* longest single park; 0 = default (10 ms) */
    bool no_wait;           /* fail with DISCO_E_AGAIN instead of waiting */
    /* Nonzero ends the wait with that value as the status (a negative
     * disco_status_t), e.g. a session's "broken" word. NULL: not watched. */
    const DISCO__ATOMIC(int32_t) * abort_word;
    /* Called at least every park slice (and every few ms while spinning);
     * a non-OK return ends the wait with it. NULL: none. */
    disco_status_t (*check)(void *ctx);
    /* check's argument */
    void *check_ctx;
    void *internal; /* disco's own use (shm/wait_internal.h); leave NULL */
} disco_wait_t;

/* The defaults of disco_wait_t's pause_ns, spin_ns and park_slice_ms. */
#define DISCO_WAIT_DEFAULT_PAUSE_NS                                                                \
    2000u /* 2 us of pause, then yield: a peer sharing our core must run */
#define DISCO_WAIT_DEFAULT_SPIN_NS  200000u /* 0.2 ms, then park */
#define DISCO_WAIT_DEFAULT_SLICE_MS 10u     /* the longest single park, ms */

/** One spin-loop hint (pause on x86). */
static inline void disco_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A condition: returns true when the wait is over. Must read the shared data
 * with acquire loads. */
typedef bool (*disco_cond_fn)(void *arg);

/** Waits until cond(arg) is true. q may be NULL (spin and poll only; then
 *  parking sleeps for the slice). Thread-safe for any number of waiters.
 *  Returns DISCO_OK, DISCO_E_AGAIN (w->no_wait and cond false),
 *  DISCO_E_TIMEOUT (deadline passed), the abort word's value, or the check
 *  callback's status. */
disco_status_t disco_wait_until(disco_waitq_t *q, disco_cond_fn cond, void *arg,
                                const disco_wait_t *w);

/** Waits until fd is ready for events (poll(2) flags), in park slices,
 *  watching the same exits as disco_wait_until (deadline, abort word,
 *  callback). Thread-safe. Returns DISCO_OK (ready, or POLLHUP/POLLERR: the
 *  caller's read or write then tells), DISCO_E_AGAIN (w->no_wait), the exit's
 *  status, or DISCO_E_SYS. */
disco_status_t disco_wait_fd(int fd, short events, const disco_wait_t *w);

/** Looks once at a wait's exits: the abort word, deadline_ns (timeout_ns is
 *  not looked at: a caller that blocks elsewhere, on a process-shared lock
 *  say, turns it into a deadline first) against now (disco_now_ns()), and
 *  the check callback. For waits on something other than a word in shared
 *  memory, so that they end the same way as every other wait. Thread-safe.
 *  Returns DISCO_OK, the abort word's value, DISCO_E_TIMEOUT, or the
 *  callback's status. */
disco_status_t disco_wait_check(const disco_wait_t *w, int64_t now);

/** Slow half of a wake: called by disco_waitq_wake when someone is parked. */
void disco__waitq_wake_slow(disco_waitq_t *q);

/** Wakes every parked waiter of q, after the caller has published its data
 *  with a release store (step K0). Costs a fence and a load when nobody is
 *  parked. Thread-safe. */
static inline void disco_waitq_wake(disco_waitq_t *q)
{
#ifdef DISCO__TSAN
    /* K1+K2 as one RMW (see DISCO__TSAN above). */
    uint32_t waiters =
        DISCO__STD atomic_fetch_add_explicit(&q->waiters, 0, DISCO__STD memory_order_seq_cst);
#else
    /* K1: pairs with the waiter's P1 fence (store-buffer pattern). */
    DISCO__STD atomic_thread_fence(DISCO__STD memory_order_seq_cst);
    /* K2: relaxed is enough after the K1 fence; a stale nonzero only costs a
     * spurious syscall. */
    uint32_t waiters =
        DISCO__STD atomic_load_explicit(&q->waiters, DISCO__STD memory_order_relaxed);
#endif
    if (waiters != 0)
        disco__waitq_wake_slow(q);
}

/** Wakes every parked waiter of q unconditionally (used when setting an abort
 *  word, where waiters must look at once). Thread-safe. */
void disco_waitq_wake_all(disco_waitq_t *q);

#ifdef __cplusplus
}
#endif
#endif
