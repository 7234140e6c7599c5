/* sim_slice.c - the simulated GPU shared by several processes (sim.h; the
 * guide is docs/gpu-sharing.md): its physical identity, its MPS switch,
 * and the time slices its kernels run in.
 *
 * A GPU without MPS runs one process's context at a time: a kernel that
 * waits for another process's kernel on the same GPU advances only when
 * the GPU switches contexts, every few milliseconds. The sim models that
 * for its kernels (the stream operations of disco__sim_enqueue_call, i.e.
 * the allreduce kernels of ar_sim.c): each sim device has a context word
 * in shared memory the session gives (disco__sim_slices_bind: the device
 * area, workers/data/arena.h). A kernel takes its device's word before it
 * runs (disco__sim_slice_enter) and gives it back when it ends; while it
 * waits inside (ar_sim.c's await), disco__sim_slice_yield hands the word to
 * a waiting process once its slice (DISCO_SIM_SLICE_US, default 2 ms) is
 * over, then waits for its next turn. So two kernels on one sim device
 * that wait for each other meet once per slice, as on a GPU: slowly, and
 * past a short deadline not at all, with an error that says why
 * (tests/test_gpu_share.c: test_slices_advance_per_switch,
 * test_slices_caught_at_deadline). With DISCO_SIM_MPS=1 the simulated
 * machine runs MPS: no slices.
 *
 * The context word protocol (labels used below):
 *   C1 a taker CASes owner from 0 to its pid (acquire: what the previous
 *      holder did in its slice is visible to it, as after a context switch);
 *   C2 the holder gives the word back: owner = 0 (release, pairs with C1),
 *      then turn + 1 (release) and a futex wake of turn's waiters;
 *   C3 a waiter counts itself in waiters (relaxed: only a hint to the holder
 *      that someone waits; a stale count costs a slice at most), reads turn
 *      (acquire, pairs with C2's increment), re-reads owner and sleeps on
 *      turn only if it is unchanged, so a release between the two reads is
 *      never missed. A holder that died is replaced (its pid is checked at
 *      each sleep), as the sim's event waits do.
 *   C4 a holder that hands the word over at its slice's end still wants the
 *      device: it counts itself in waiters before its C2 and stays counted
 *      until it takes the word again (take, counted). So the process that
 *      takes the word from it sees it waiting: that taker's C1 reads the
 *      owner = 0 of its C2 (release), which comes after the count. Counting
 *      only once it asks again left a gap (its sleep in the hand-over loop,
 *      and its way back to take) in which the new holder saw no waiter: a
 *      deadline that fell there was reported as a plain timeout, not as
 *      the time slices that caused it (test_slices_handover_counted).
 * Words are per process state only through the binding: a forked child
 * starts unbound (it binds when it makes its own arena). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "disco/clock.h"
#include "workers/device/sim.h"
#include "workers/device/watch.h"

/* One sim device's context word, in the session's shared memory. */
struct disco__sim_slice {
    _Alignas(64) _Atomic int32_t owner; /* C1/C2: the pid whose kernel runs; 0: none */
    _Atomic uint32_t turn;              /* C2/C3: changes at each release; the futex word */
    _Atomic uint32_t waiters;           /* C3: processes waiting for the word */
    _Atomic uint32_t switches;          /* slices handed to a waiter (relaxed: a count) */
};

_Static_assert(sizeof(struct disco__sim_slice) == 64, "one cache line per sim device");

/* The bound table and the process that bound it, under g_bind; a kernel
 * holds g_bind from enter to leave, so no table is unbound (and unmapped)
 * under a kernel that holds one of its words. */
static pthread_mutex_t g_bind = PTHREAD_MUTEX_INITIALIZER;
static struct disco__sim_slice *g_slices;
static pid_t g_bound_pid;

/* The kernel this thread runs (one thread of a process runs operations at
 * a time: sim_stream.c's engine lock; and g_bind is held meanwhile). */
static _Thread_local struct {
    struct disco__sim_slice *s; /* the word held; NULL: none (no slices) */
    int device_id;
    int64_t since; /* when this slice began */
    disco_status_t failed;
    char msg[512];
} t_cur;

size_t disco__sim_slices_bytes(void)
{
    return DISCO_SIM_MAX_DEVICES * sizeof(struct disco__sim_slice);
}

void disco__sim_slices_bind(void *mem)
{
    pthread_mutex_lock(&g_bind);
    g_bound_pid = mem != NULL ? getpid() : 0;
    g_slices = mem;
    pthread_mutex_unlock(&g_bind);
}

/* The table bound by this process (a forked child's inherited binding is
 * not its own), g_bind held. */
static struct disco__sim_slice *bound(void)
{
    return g_bound_pid == getpid() ? g_slices : NULL;
}

static bool env_on(const char *name)
{
    const char *e = getenv(name);
    return e != NULL && strcmp(e, "1") == 0;
}

/* DISCO_SIM_SLICE_US: a slice's length, 100 us to 1 s; default 2 ms. */
static int64_t slice_ns(void)
{
    const char *e = getenv("DISCO_SIM_SLICE_US");
    char *end;
    unsigned long v = e != NULL ? strtoul(e, &end, 10) : 0;
    if (e == NULL || *end != '\0' || v < 100 || v > 1000000)
        v = 2000;
    return (int64_t)v * 1000;
}

uint32_t disco__sim_slice_switches(int device_id)
{
    pthread_mutex_lock(&g_bind);
    struct disco__sim_slice *tab = bound();
    uint32_t n = tab != NULL && device_id >= 0 && device_id < DISCO_SIM_MAX_DEVICES
                     ? atomic_load_explicit(&tab[device_id].switches, memory_order_relaxed)
                     : 0;
    pthread_mutex_unlock(&g_bind);
    return n;
}

static void sleep_on(_Atomic uint32_t *word, uint32_t seen, long ns)
{
    struct timespec ts = {0, ns};
    /* Not FUTEX_PRIVATE: the word is shared between processes. */
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* C2 */
static void give_back(struct disco__sim_slice *s)
{
    atomic_store_explicit(&s->owner, 0, memory_order_release);
    atomic_fetch_add_explicit(&s->turn, 1, memory_order_release);
    syscall(SYS_futex, &s->turn, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Takes s (C1, C3), sleeping in 2 ms steps under a watch (looked at after
 * each: the deadline, abort word and liveness check end the wait), else in
 * 20 ms ones; counted: this process is in waiters already (C4), and leaves
 * them here as a waiter that counted itself does. Returns DISCO_OK or the
 * watch's status, naming the device. */
static disco_status_t take(struct disco__sim_slice *s, int device_id, bool counted)
{
    int32_t me = (int32_t)getpid();
    int64_t t0 = disco_now_ns();
    disco_status_t st = DISCO_OK;
    for (;;) {
        int32_t o = atomic_load_explicit(&s->owner, memory_order_acquire); /* C1 */
        if (o == 0 || o == me) { /* me: a word this process left (a killed thread's) */
            if (atomic_compare_exchange_weak_explicit(&s->owner, &o, me, memory_order_acquire,
                                                      memory_order_relaxed)) /* C1 */
                break;
            continue;
        }
        if (!counted) {
            atomic_fetch_add_explicit(&s->waiters, 1, memory_order_relaxed); /* C3 */
            counted = true;
        }
        uint32_t t = atomic_load_explicit(&s->turn, memory_order_acquire); /* C3 */
        if (atomic_load_explicit(&s->owner, memory_order_acquire) != o)    /* C3 */
            continue;
        if (!disco__sim_pid_alive(o)) { /* a dead holder's word: freed for all */
            /* C2 for the dead (acq_rel: as its release would have been;
             * only one freer wins the CAS). */
            if (atomic_compare_exchange_strong_explicit(&s->owner, &o, 0, memory_order_acq_rel,
                                                        memory_order_relaxed)) {
                atomic_fetch_add_explicit(&s->turn, 1, memory_order_release); /* C2 */
                syscall(SYS_futex, &s->turn, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
            }
            continue;
        }
        bool watched = disco__device_watching() != NULL;
        sleep_on(&s->turn, t, (watched ? 2 : 20) * 1000 * 1000);
        if ((st = disco__device_watch_check()) != DISCO_OK) {
            st = disco_set_error(
                st,
                "sim:%d is time-sliced (shared by processes without MPS: one process's kernels "
                "at a time): waited %lld ms for a slice, pid %d holding it, %u switches so far: "
                "%s",
                device_id, (long long)((disco_now_ns() - t0) / 1000000), (int)o,
                atomic_load_explicit(&s->switches, memory_order_relaxed), disco_last_error());
            break;
        }
    }
    if (counted)
        atomic_fetch_sub_explicit(&s->waiters, 1, memory_order_relaxed); /* C3 */
    return st;
}

disco_status_t disco__sim_slice_enter(int device_id)
{
    t_cur.s = NULL;
    t_cur.failed = DISCO_OK;
    pthread_mutex_lock(&g_bind); /* until disco__sim_slice_leave */
    struct disco__sim_slice *tab = bound();
    if (tab == NULL || device_id < 0 || device_id >= DISCO_SIM_MAX_DEVICES ||
        env_on("DISCO_SIM_MPS"))
        return DISCO_OK; /* no shared words, or MPS: kernels run at once */
    disco_status_t st = take(&tab[device_id], device_id, false);
    if (st != DISCO_OK) { /* the kernel fails at its first wait (it must still free its job) */
        t_cur.failed = st;
        snprintf(t_cur.msg, sizeof t_cur.msg, "%s", disco_last_error());
        return st;
    }
    t_cur.s = &tab[device_id];
    t_cur.device_id = device_id;
    t_cur.since = disco_now_ns();
    return DISCO_OK;
}

void disco__sim_slice_leave(void)
{
    if (t_cur.s != NULL)
        give_back(t_cur.s);
    t_cur.s = NULL;
    t_cur.failed = DISCO_OK;
    pthread_mutex_unlock(&g_bind);
}

disco_status_t disco__sim_slice_yield(void)
{
    if (t_cur.failed != DISCO_OK)
        return disco_set_error(t_cur.failed, "%s", t_cur.msg);
    struct disco__sim_slice *s = t_cur.s;
    if (s == NULL)
        return DISCO_OK;
    bool wanted = atomic_load_explicit(&s->waiters, memory_order_relaxed) > 0; /* C3: a hint */
    disco_status_t st = wanted ? disco__device_watch_check() : DISCO_OK;
    if (st != DISCO_OK) /* the wait ends here: say what held it up */
        return disco_set_error(
            st,
            "sim:%d is time-sliced (shared by processes without MPS: one process's kernels at "
            "a time): this kernel holds it while another process's waits, %u switches so far: "
            "%s",
            t_cur.device_id, atomic_load_explicit(&s->switches, memory_order_relaxed),
            disco_last_error());
    int64_t now = disco_now_ns(), len = slice_ns();
    if (now - t_cur.since < len)
        return DISCO_OK;
    if (!wanted) {
        t_cur.since = now; /* nobody else wants the device: the slice goes on */
        return DISCO_OK;
    }
    atomic_fetch_add_explicit(&s->switches, 1, memory_order_relaxed);
    /* C4: counted before the word goes (relaxed: the release of C2 in
     * give_back publishes it to the next taker). */
    atomic_fetch_add_explicit(&s->waiters, 1, memory_order_relaxed);
    give_back(s);
    t_cur.s = NULL;
    /* Let a waiter take it (up to a slice) before competing again. */
    int32_t me = (int32_t)getpid();
    for (int64_t end = now + len; disco_now_ns() < end;) {
        int32_t o = atomic_load_explicit(&s->owner, memory_order_relaxed); /* a hint */
        if (o != 0 && o != me)
            break;
        struct timespec d = {0, 100 * 1000};
        nanosleep(&d, NULL);
    }
    if ((st = take(s, t_cur.device_id, true)) != DISCO_OK) /* C4: leaves waiters */
        return st;
    t_cur.s = s;
    t_cur.since = disco_now_ns();
    return DISCO_OK;
}

disco_status_t disco__sim_physical_id(int device_id, disco_device_uid_t *id_out)
{
    disco_status_t st = disco__sim_check_device(device_id, "disco_device_physical_id");
    if (st != DISCO_OK)
        return st;
    memset(id_out, 0, sizeof *id_out);
    memcpy(id_out->bytes, "sim", 3);
    uint32_t d = (uint32_t)device_id;
    memcpy(id_out->bytes + 4, &d, sizeof d);
    return DISCO_OK;
}

disco_status_t disco__sim_mps(int device_id, bool *on_out)
{
    disco_status_t st = disco__sim_check_device(device_id, "disco_device_mps");
    if (st != DISCO_OK)
        return st;
    *on_out = env_on("DISCO_SIM_MPS");
    return DISCO_OK;
}
