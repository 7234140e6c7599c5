/* sim_stream.c - the simulated GPU's streams (see sim.h).
 *
 * A stream is a queue of operations of this process. Nothing runs when it
 * is queued: a stream runs, in order, when it is synced (stream_sync), or
 * up to an event record when a wait needs that record (a wait of this
 * process runs it itself; another process's wait pokes the event's
 * watcher thread here, see sim_event.c), so a reader that forgot the sync
 * sees the old bytes, as on a GPU that has not got there yet. The NULL stream is each device's
 * default stream in this process; it is asynchronous like the others (disco's CUDA copy queues with
 * cudaMemcpyAsync on the default stream too) and has no implicit ordering with them (disco's CUDA
 * streams are non-blocking).
 *
 * One thread runs operations at a time in a process (g_exec), the
 * simulated engine; queues are guarded by g_lock, which is never held while
 * an operation runs, so other threads queue work while a sync waits. A
 * stream is freed under both, so whoever holds g_exec may run any stream it
 * found. The record and wait operations of events (sim_event.c) run here:
 * E3 (a record's release) and E4 (a waiter's acquire). A kernel (a call
 * operation) runs in its device's time slices when other processes share
 * the device without MPS (sim_slice.c). */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "disco/clock.h"
#include "workers/device/sim.h"
#include "workers/device/sim_event.h"
#include "workers/device/watch.h"

#define MAX_DEFAULT 64

struct stream {
    uint64_t id; /* unique in the process; events name the stream of a record by it */
    int device_id;
    struct disco__sim_op *ops;
    size_t head, n, cap; /* ops[head..n) are queued */
    uint64_t queued;     /* operations ever queued (the last one's sequence number) */
    uint64_t done;       /* operations run */
    /* The first failure of operations a watcher ran (no caller to tell):
     * the stream's next sync reports it. */
    disco_status_t held;
    /* A wait failed (its recorder died, or the host gave up): as on a
     * GPU, the stream is stuck behind it; it is ops[head] again, and a
     * run of the stream re-runs it (disco__sim_wait_stuck) before
     * anything queued after it. */
    bool stuck;
    char held_msg[256];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_exec = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_pid;
static struct stream **g_streams;
static size_t g_nstreams, g_capstreams;
static struct stream *g_default[MAX_DEFAULT];
static uint64_t g_next_id;

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* fork: g_lock is taken around it, so the child's copy of the queues is
 * whole (the child then forgets them, lock_queues). g_exec may be held
 * across a long wait by an event's watcher thread, which does not exist in
 * the child: the child gets a fresh engine lock instead of waiting for it. */
static void before_fork(void)
{
    pthread_mutex_lock(&g_lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
}

static void after_fork_child(void)
{
    pthread_mutex_unlock(&g_lock);
    g_exec = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

static void register_atfork(void)
{
    (void)pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static void forget_all(void)
{
    for (size_t i = 0; i < g_nstreams; i++) {
        free(g_streams[i]->ops);
        free(g_streams[i]);
    }
    g_nstreams = 0;
    memset(g_default, 0, sizeof g_default);
}

/* Locks the queues; a forked child first forgets the parent's streams. */
static void lock_queues(void)
{
    pthread_once(&g_atfork_once, register_atfork);
    pthread_mutex_lock(&g_lock);
    pid_t me = getpid();
    if (g_pid != me) {
        forget_all();
        g_pid = me;
    }
}

void disco__sim_streams_reset(void)
{
    lock_queues();
    forget_all();
    pthread_mutex_unlock(&g_lock);
}

static struct stream *new_stream(int device_id)
{
    if (g_nstreams == g_capstreams) {
        size_t cap = g_capstreams ? 2 * g_capstreams : 8;
        struct stream **n = realloc(g_streams, cap * sizeof *n);
        if (n == NULL)
            return NULL;
        g_streams = n, g_capstreams = cap;
    }
    struct stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->id = ++g_next_id;
    s->device_id = device_id;
    g_streams[g_nstreams++] = s;
    return s;
}

/* The stream a handle names (locked): NULL is device_id's default stream,
 * made at first use. Sets *s, or returns the error. */
static disco_status_t get_stream(int device_id, disco_stream_t h, const char *fn, struct stream **s)
{
    if (h == NULL) {
        disco_status_t st = disco__sim_check_device(device_id, fn);
        if (st != DISCO_OK)
            return st;
        if (device_id >= MAX_DEFAULT)
            return disco_set_error(DISCO_E_NO_DEVICE, "%s: sim:%d: no default stream", fn,
                                   device_id);
        if (g_default[device_id] == NULL && (g_default[device_id] = new_stream(device_id)) == NULL)
            return disco_set_error(DISCO_E_NOMEM, "%s: sim:%d: default stream", fn, device_id);
        *s = g_default[device_id];
        return DISCO_OK;
    }
    for (size_t i = 0; i < g_nstreams; i++) {
        if (g_streams[i] == h) {
            *s = g_streams[i];
            return DISCO_OK;
        }
    }
    return disco_set_error(DISCO_E_INVAL, "%s: sim:%d: %p is not a sim stream of this process", fn,
                           device_id, h);
}

/* Appends op to s (locked); its sequence number in *seq_out if wanted. */
static disco_status_t push_op(struct stream *s, const struct disco__sim_op *op, uint64_t *seq_out)
{
    if (s->n == s->cap) {
        if (s->head > 0) {
            memmove(s->ops, s->ops + s->head, (s->n - s->head) * sizeof *s->ops);
            s->n -= s->head;
            s->head = 0;
        }
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            struct disco__sim_op *n = realloc(s->ops, cap * sizeof *n);
            if (n == NULL)
                return disco_set_error(DISCO_E_NOMEM, "sim:%d: stream queue", s->device_id);
            s->ops = n, s->cap = cap;
        }
    }
    s->ops[s->n++] = *op;
    s->queued++;
    if (seq_out != NULL)
        *seq_out = s->queued;
    return DISCO_OK;
}

/* Puts op back at the head of s (locked): a wait that failed stays
 * queued. false when there is no memory for it (it is dropped then). */
static bool unshift_op(struct stream *s, const struct disco__sim_op *op)
{
    if (s->head == 0) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            struct disco__sim_op *n = realloc(s->ops, cap * sizeof *n);
            if (n == NULL)
                return false;
            s->ops = n, s->cap = cap;
        }
        memmove(s->ops + 1, s->ops, s->n * sizeof *s->ops);
        s->n++;
        s->head++;
    }
    s->ops[--s->head] = *op;
    return true;
}

disco_status_t disco__sim_enqueue(int device_id, disco_stream_t stream,
                                  const struct disco__sim_op *op, const char *fn,
                                  uint64_t *stream_id_out, uint64_t *seq_out)
{
    struct stream *s;
    lock_queues();
    disco_status_t st = get_stream(device_id, stream, fn, &s);
    if (st == DISCO_OK)
        st = push_op(s, op, seq_out);
    if (st == DISCO_OK && stream_id_out != NULL)
        *stream_id_out = s->id;
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* DISCO_SIM_PEER_COPY_US: microseconds each copy to or from another
 * process's memory waits before it runs (a slow link between devices; a
 * test knob that widens the window a missing cross-process wait leaves
 * open). 0, unset or not below a second: none. */
static uint32_t peer_copy_us(void)
{
    const char *e = getenv("DISCO_SIM_PEER_COPY_US");
    char *end;
    unsigned long v = e != NULL ? strtoul(e, &end, 10) : 0;
    return e != NULL && *end == '\0' && v < 1000000 ? (uint32_t)v : 0;
}

disco_status_t disco__sim_enqueue_copy(int device_id, disco_stream_t stream, void *dst,
                                       const void *src, size_t n, bool across)
{
    struct disco__sim_op op = {.kind = DISCO_SIM_OP_COPY,
                               .dst = dst,
                               .src = src,
                               .n = n,
                               .delay_us = across ? peer_copy_us() : 0};
    return disco__sim_enqueue(device_id, stream, &op, "disco_device_copy", NULL, NULL);
}

static disco_status_t run_until(uint64_t stream_id, uint64_t seq, bool hold);

/* An event's watcher runs a wait for at most this long at a time: it holds
 * the engine lock meanwhile, and a record the wait needs may never come (a
 * stream stuck behind a failed wait runs no later record), which would
 * keep the host's own watched syncs from even starting. The wait stays
 * queued; the next poke or sync goes on with it. */
#define WATCHER_WAIT_NS (100 * 1000 * 1000)

disco_status_t disco__sim_enqueue_call(int device_id, disco_stream_t stream,
                                       disco_status_t (*fn)(void *arg), void *arg)
{
    struct disco__sim_op op = {.kind = DISCO_SIM_OP_CALL, .fn = fn, .arg = arg};
    return disco__sim_enqueue(device_id, stream, &op, "disco_device kernel launch", NULL, NULL);
}

uint32_t disco__sim_peer_copy_us(void)
{
    return peer_copy_us();
}

/* ---- event operations ---------------------------------------------------- */

/* Blocks until m->completed reaches want (engine lock held). */
disco_status_t disco__sim_wait_for(struct disco__sim_event_shm *m, uint32_t want)
{
    for (;;) {
        /* E4: acquire, pairs with E3: what the recording stream wrote before
         * the record is visible after. */
        uint32_t c = atomic_load_explicit(&m->completed, memory_order_acquire);
        if (disco__sim_reached(c, want))
            return DISCO_OK;
        int32_t pid = atomic_load_explicit(&m->rec_pid, memory_order_relaxed); /* E2 */
        if (pid == (int32_t)getpid()) {
            uint64_t sid = atomic_load_explicit(&m->rec_stream, memory_order_relaxed); /* E2 */
            uint64_t seq = atomic_load_explicit(&m->rec_seq, memory_order_relaxed);    /* E2 */
            disco_status_t st = run_until(sid, seq, false);
            if (st != DISCO_OK)
                return st;
            c = atomic_load_explicit(&m->completed, memory_order_acquire); /* E4 */
            if (!disco__sim_reached(c, want))
                return disco_set_error(DISCO_E_SYS,
                                       "sim: event record %u of this process never "
                                       "ran (its stream is gone)",
                                       want);
            continue;
        }
        /* E5: ask the recorder's watcher to run its stream up to the
         * record (relaxed: the count only has to change for its futex
         * wait to end; it reads the record's place under its own engine
         * lock). Every round, so a poke made before the watcher slept is
         * never the last. */
        atomic_fetch_add_explicit(&m->pokes, 1, memory_order_relaxed);
        syscall(SYS_futex, &m->pokes, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        /* A recorder that is gone runs nothing more: said before a sleep,
         * not after one (a session's recovery meets one such record per
         * dead peer; test_sim_ipc.c, test_event_recorder_dead_at_once). */
        if (pid > 0 && !disco__sim_pid_alive(pid) &&
            !disco__sim_reached(atomic_load_explicit(&m->completed, memory_order_acquire),
                                want)) /* E4 */
            return disco_set_error(DISCO_E_SYS,
                                   "sim: event recorder pid %d died before its "
                                   "record %u ran",
                                   (int)pid, want);
        /* Sleeps in slices: 100 ms, or 2 ms under a watch (watch.h), which
         * is looked at after each. */
        bool watched = disco__device_watching() != NULL;
        struct timespec ts = {0, (watched ? 2 : 100) * 1000 * 1000};
        /* Not FUTEX_PRIVATE: the word is shared between processes. */
        syscall(SYS_futex, &m->completed, FUTEX_WAIT, c, &ts, NULL, 0);
        disco_status_t wst = disco__device_watch_check();
        if (wst != DISCO_OK)
            return wst; /* the watch's own message says why */
    }
}

disco_status_t disco__sim_wait_stuck(struct disco__sim_event_shm *m, uint32_t want, bool host)
{
    for (;;) {
        /* E4: acquire, as in disco__sim_wait_for. */
        bool done =
            disco__sim_reached(atomic_load_explicit(&m->completed, memory_order_acquire), want);
        int32_t pid = atomic_load_explicit(&m->rec_pid, memory_order_relaxed); /* E2 */
        if (done || pid == (int32_t)getpid() || disco__sim_pid_alive(pid))
            return disco__sim_wait_for(m, want);
        /* The recorder is gone: the record never runs, the stream never
         * moves again. A watched sync is told at once (its watch would
         * only end it later), and so is an event's watcher (it only runs
         * streams up to a record); an unwatched host call blocks for ever,
         * as cudaStreamSynchronize and cudaFree do behind such a wait
         * (test_gpu_session_coll.c, test_close_after_death_mid_collective). */
        if (!host || disco__device_watching() != NULL)
            return disco_set_error(DISCO_E_SYS,
                                   "sim: the stream is stuck behind a wait for record %u of pid "
                                   "%d, which died before running it (on a GPU it never moves "
                                   "again)",
                                   want, (int)pid);
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
}

void disco__sim_run_last_record(struct disco__sim_event_shm *m)
{
    /* E2: relaxed, as in disco__sim_wait_for (this process's own record
     * fields, written under the engine lock we hold). */
    if (atomic_load_explicit(&m->rec_pid, memory_order_relaxed) != (int32_t)getpid())
        return;
    uint64_t sid = atomic_load_explicit(&m->rec_stream, memory_order_relaxed);
    uint64_t seq = atomic_load_explicit(&m->rec_seq, memory_order_relaxed);
    /* A failure of an operation stays with the stream's next sync as well
     * as any; a waiter sees the record complete or its recorder gone. */
    (void)run_until(sid, seq, true);
}

static disco_status_t event_run(const struct disco__sim_op *op)
{
    struct disco__sim_event_shm *m = op->ev;
    if (op->kind == DISCO_SIM_OP_WAIT)
        return disco__sim_wait_for(m, op->value);
    /* E3: release (CAS to the max: records of several streams may run out
     * of order); pairs with E4 in every waiter of any process. */
    uint32_t c = atomic_load_explicit(&m->completed, memory_order_relaxed);
    while (!disco__sim_reached(c, op->value) &&
           !atomic_compare_exchange_weak_explicit(&m->completed, &c, op->value,
                                                  memory_order_release, memory_order_relaxed))
        ;
    syscall(SYS_futex, &m->completed, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    return DISCO_OK;
}

/* A wait run by an event's watcher: as event_run, for WATCHER_WAIT_NS at
 * most; DISCO_E_AGAIN when that ended it, not the wait. */
static disco_status_t watcher_wait(const struct disco__sim_op *op)
{
    disco_wait_t w = {.deadline_ns = disco_now_ns() + WATCHER_WAIT_NS};
    const disco_wait_t *old = disco__device_watch(&w);
    disco_status_t st = event_run(op);
    disco_status_t fired = disco__device_watch_fired();
    disco__device_watch(old);
    return st != DISCO_OK && fired != DISCO_OK ? DISCO_E_AGAIN : st;
}

/* Runs s's operations up to sequence number upto (g_exec held). Returns
 * the first failure; later operations still run, but none behind a failed
 * wait (the stream is stuck there: struct stream). With hold, the failure
 * is also kept for the stream's next sync (the caller is a watcher). */
static disco_status_t run_stream(struct stream *s, uint64_t upto, bool hold)
{
    disco_status_t first = DISCO_OK;
    for (;;) {
        pthread_mutex_lock(&g_lock);
        if (s->done >= upto || s->head == s->n) {
            pthread_mutex_unlock(&g_lock);
            return first;
        }
        struct disco__sim_op op = s->ops[s->head++];
        bool stuck = s->stuck; /* then op is the wait it is stuck behind */
        pthread_mutex_unlock(&g_lock);
        disco_status_t st = DISCO_OK;
        if (op.kind == DISCO_SIM_OP_COPY && op.delay_us > 0) {
            struct timespec d = {0, (long)op.delay_us * 1000};
            while (nanosleep(&d, &d) != 0 && errno == EINTR)
                ;
        }
        if (op.kind == DISCO_SIM_OP_COPY) {
            memmove(op.dst, op.src, op.n);
        } else if (op.kind == DISCO_SIM_OP_CALL) {
            /* A kernel, in its device's time slices; a failed take shows
             * at the kernel's first wait (it must still free its arg). */
            (void)disco__sim_slice_enter(s->device_id);
            st = op.fn(op.arg);
            disco__sim_slice_leave();
        } else if (stuck) {
            st = disco__sim_wait_stuck(op.ev, op.value, !hold);
        } else if (hold && op.kind == DISCO_SIM_OP_WAIT) {
            st = watcher_wait(&op);
        } else {
            st = event_run(&op);
        }
        pthread_mutex_lock(&g_lock);
        if (st == DISCO_E_AGAIN && hold && op.kind == DISCO_SIM_OP_WAIT && unshift_op(s, &op)) {
            pthread_mutex_unlock(&g_lock); /* not yet: left queued, not failed */
            return first;
        }
        if (st != DISCO_OK && first == DISCO_OK)
            first = st;
        if (st != DISCO_OK && hold && s->held == DISCO_OK) {
            s->held = st;
            snprintf(s->held_msg, sizeof s->held_msg, "%s", disco_last_error());
        }
        /* A failed wait is not done: the stream stays behind it. */
        s->stuck = st != DISCO_OK && op.kind == DISCO_SIM_OP_WAIT && unshift_op(s, &op);
        if (s->stuck) {
            pthread_mutex_unlock(&g_lock);
            return first;
        }
        s->done++;
        pthread_mutex_unlock(&g_lock);
    }
}

static disco_status_t run_until(uint64_t stream_id, uint64_t seq, bool hold)
{
    struct stream *s = NULL;
    lock_queues();
    for (size_t i = 0; i < g_nstreams && s == NULL; i++)
        if (g_streams[i]->id == stream_id)
            s = g_streams[i];
    pthread_mutex_unlock(&g_lock);
    if (s == NULL)
        return disco_set_error(DISCO_E_INVAL, "sim: the stream of an event's record was freed "
                                              "before it ran");
    return run_stream(s, seq, hold);
}

void disco__sim_exec_lock(void)
{
    pthread_mutex_lock(&g_exec);
}

void disco__sim_exec_unlock(void)
{
    pthread_mutex_unlock(&g_exec);
}

disco_status_t disco__sim_flush_all(void)
{
    disco_status_t first = DISCO_OK;
    pthread_mutex_lock(&g_exec);
    for (size_t i = 0;; i++) {
        lock_queues();
        struct stream *s = i < g_nstreams ? g_streams[i] : NULL;
        pthread_mutex_unlock(&g_lock);
        if (s == NULL)
            break;
        disco_status_t st = run_stream(s, UINT64_MAX, false);
        if (st != DISCO_OK && first == DISCO_OK)
            first = st;
    }
    pthread_mutex_unlock(&g_exec);
    return first;
}

disco_status_t disco__sim_stream_create(int device_id, disco_stream_t *stream_out)
{
    disco_status_t st = disco__sim_check_device(device_id, "disco_device_stream_create");
    if (st != DISCO_OK)
        return st;
    lock_queues();
    struct stream *s = new_stream(device_id);
    pthread_mutex_unlock(&g_lock);
    if (s == NULL)
        return disco_set_error(DISCO_E_NOMEM, "disco_device_stream_create: sim:%d", device_id);
    *stream_out = s;
    return DISCO_OK;
}

disco_status_t disco__sim_stream_sync(int device_id, disco_stream_t stream)
{
    struct stream *s;
    pthread_mutex_lock(&g_exec);
    lock_queues();
    disco_status_t st = get_stream(device_id, stream, "disco_device_stream_sync", &s);
    pthread_mutex_unlock(&g_lock);
    if (st == DISCO_OK)
        st = run_stream(s, UINT64_MAX, false);
    if (st == DISCO_OK) { /* what a watcher ran for this stream failed */
        pthread_mutex_lock(&g_lock);
        if (s->held != DISCO_OK)
            st = disco_set_error(s->held, "%s", s->held_msg);
        s->held = DISCO_OK;
        pthread_mutex_unlock(&g_lock);
    }
    pthread_mutex_unlock(&g_exec);
    return st;
}

disco_status_t disco__sim_stream_free(int device_id, disco_stream_t stream)
{
    if (stream == NULL)
        return DISCO_OK;
    /* As cudaStreamDestroy, queued work still completes. */
    disco_status_t st = disco__sim_stream_sync(device_id, stream);
    if (st == DISCO_E_INVAL)
        return st;
    /* Under the engine lock too: a flush or a wait of another thread that
     * holds it may be about to run this stream. */
    pthread_mutex_lock(&g_exec);
    lock_queues();
    for (size_t i = 0; i < g_nstreams; i++) {
        if (g_streams[i] == stream) {
            free(g_streams[i]->ops);
            free(g_streams[i]);
            g_streams[i] = g_streams[--g_nstreams];
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_exec);
    return st;
}
