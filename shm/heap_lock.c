/* heap_lock.c - the shared heap's lock: a robust process-shared mutex taken
 * by spinning, then parking under the handle's wait; and recovery (steps 1-4
 * of heap.h) when the previous holder died mid-change. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "disco/shm/wait.h"
#include "shm/heap_block.h"

/* Step 1-3 of recovery (heap.h): after a holder died mid-change. */
static disco_status_t recover(const disco_heap_t *h)
{
    struct disco_heap_shared *sh = h->sh;
    uint64_t prev = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end;) {
        if (!header_ok(h, off)) {
            sh->broken = 1;
            return disco_set_error(DISCO_E_BROKEN,
                                   "heap recovery: bad block header at offset %#" PRIx64, off);
        }
        struct block *b = blk(h, off);
        struct block *pb = prev != 0 ? blk(h, prev) : NULL;
        if (pb != NULL && pb->tag == TAG_FREE && b->tag == TAG_FREE) {
            commit(&pb->size, pb->size + b->size); /* M1 */
            commit(&b->tag, TAG_WIPED);            /* M2 */
            off = prev + pb->size;
            continue;
        }
        b->prev_size = pb != NULL ? pb->size : 0;
        prev = off;
        off += b->size;
    }
    memset(sh->bitmap, 0, sizeof sh->bitmap);
    memset(sh->bins, 0, sizeof sh->bins);
    sh->used_bytes = sh->free_bytes = sh->live_blocks = sh->free_blocks = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end; off += blk(h, off)->size) {
        if (blk(h, off)->tag == TAG_FREE) {
            disco__heap_list_push(h, off);
        } else {
            sh->used_bytes += blk(h, off)->size;
            sh->live_blocks++;
        }
    }
    sh->recoveries++;
    return DISCO_OK;
}

/* Critical sections here last about a microsecond, while a futex sleep and
 * wake costs tens of microseconds on these machines (and two workers of a
 * collective allocate at the same moment): spin on trylock, pausing, then
 * yielding so a preempted holder on our core can finish. Returns the
 * trylock's result: 0, EOWNERDEAD, ENOTRECOVERABLE, or EBUSY (still taken). */
static int lock_spinning(pthread_mutex_t *m)
{
    for (int i = 0; i < 256; i++) {
        int r = pthread_mutex_trylock(m);
        if (r != EBUSY)
            return r;
        if (i < 64)
            disco_cpu_relax();
        else
            sched_yield();
    }
    return EBUSY;
}

/* The holder's thread id, for messages: glibc keeps it in the mutex (a robust
 * mutex's futex word holds it too). Read without the lock: a stale value
 * only names the previous holder. */
static int holder_tid(const pthread_mutex_t *m)
{
    return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
}

/* Blocks for the lock a park slice at a time (pthread_mutex_timedlock: its
 * deadline is on the wall clock, so each slice is turned into one there; a
 * clock step only changes that slice's length, and sanitizers know this call,
 * where they do not know pthread_mutex_clocklock), looking at the handle's
 * wait between slices: a stopped holder is not dead, so the kernel
 * never hands its lock on and only a deadline or a liveness check ends the
 * wait. Returns DISCO_OK with the lock's result in *r_out (0, EOWNERDEAD,
 * ENOTRECOVERABLE, another error), or the wait's status. */
static disco_status_t lock_blocking(const disco_heap_t *h, const char *who, int *r_out)
{
    pthread_mutex_t *m = &h->sh->lock;
    if (h->wait == NULL) {
        *r_out = pthread_mutex_lock(m);
        return DISCO_OK;
    }
    disco_wait_t w = *h->wait;
    int64_t start = disco_now_ns();
    if (w.deadline_ns == 0 && w.timeout_ns > 0)
        w.deadline_ns = start + w.timeout_ns;
    int64_t slice =
        (int64_t)(w.park_slice_ms ? w.park_slice_ms : DISCO_WAIT_DEFAULT_SLICE_MS) * 1000000LL;
    for (;;) {
        int64_t now = disco_now_ns();
        disco_status_t st = disco_wait_check(&w, now);
        if (st == DISCO_E_TIMEOUT)
            return disco_set_error(DISCO_E_TIMEOUT,
                                   "%s: the heap lock was held for %lld ms by thread %d "
                                   "(stopped?)",
                                   who, (long long)((now - start) / 1000000), holder_tid(m));
        if (st != DISCO_OK)
            return st;
        int64_t until = now + slice;
        if (w.deadline_ns != 0 && w.deadline_ns < until)
            until = w.deadline_ns;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t at = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (until - now);
        ts = (struct timespec){.tv_sec = at / 1000000000LL, .tv_nsec = at % 1000000000LL};
        int r = pthread_mutex_timedlock(m, &ts);
        if (r != ETIMEDOUT) {
            *r_out = r;
            return DISCO_OK;
        }
    }
}

disco_status_t disco__heap_lock(const disco_heap_t *h, const char *who)
{
    struct disco_heap_shared *sh = h->sh;
    int r = lock_spinning(&sh->lock);
    if (r == EBUSY) {
        disco_status_t st = lock_blocking(h, who, &r);
        if (st != DISCO_OK)
            return st;
    }
    if (r == EOWNERDEAD) {
        /* Step 4 whatever recover() says: a broken heap is marked so in
         * sh->broken, and the mutex must stay usable to tell everyone. */
        disco_status_t st = recover(h);
        r = pthread_mutex_consistent(&sh->lock);
        if (st != DISCO_OK || r != 0) {
            pthread_mutex_unlock(&sh->lock);
            return st != DISCO_OK ? st
                                  : disco_set_error(DISCO_E_SYS, "%s: pthread_mutex_consistent: %s",
                                                    who, strerror(r));
        }
    } else if (r != 0) {
        return disco_set_error(r == ENOTRECOVERABLE ? DISCO_E_BROKEN : DISCO_E_SYS,
                               "%s: pthread_mutex_lock: %s", who, strerror(r));
    }
    if (sh->broken) {
        pthread_mutex_unlock(&sh->lock);
        return disco_set_error(DISCO_E_BROKEN, "%s: heap metadata is corrupt", who);
    }
    return DISCO_OK;
}
