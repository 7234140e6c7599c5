/* ar_sim.c - the device allreduce on the simulated GPU: ar.h's protocol as
 * a CPU loop, queued on the member's sim stream and run at its sync (a
 * kernel that starts when the GPU gets there). Flags are words of the
 * members' signal regions, shared memory between the processes; the
 * waits are futex waits on them (the words are shared, so not
 * FUTEX_PRIVATE) in slices, looking at the sync's watch (watch.h) after
 * each, so a member that never arrives ends the wait as every other wait
 * of disco ends. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "disco/dtype.h"
#include "workers/device/ar.h"
#include "workers/device/ar_progress.h"
#include "workers/device/sim.h"
#include "workers/device/watch.h"

static const char *const PHASE_NAME[DISCO_AR_PHASES] = {"start", "mid", "end"};

/* A queued job: the job and its pointers as this process reads them. */
struct sim_job {
    struct disco__ar_job j;
    size_t esz;
    uint32_t delay_us; /* before reading a peer's bytes: DISCO_SIM_PEER_COPY_US, plus
                          DISCO_SIM_AR_SLOW's when it names this member's rank */
    char *in[DISCO_AR_MAX_RANKS];
    char *out[DISCO_AR_MAX_RANKS];
    _Atomic uint32_t *signal[DISCO_AR_MAX_RANKS];
};

/* F1: arrives at (phase, piece) in every member's region. Release: this
 * member's reads and writes of the piece so far come before a member that
 * sees the epoch (F2) goes on. */
static void arrive(const struct sim_job *s, uint32_t phase, uint32_t piece)
{
    uint32_t at = disco__ar_flag(s->j.slot, phase, piece, s->j.rank);
    for (uint32_t r = 0; r < s->j.size; r++) {
        atomic_store_explicit(&s->signal[r][at], s->j.epoch, memory_order_release);
        syscall(SYS_futex, &s->signal[r][at], FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

/* F2: waits until every member arrived at (phase, piece). Acquire: pairs
 * with F1, so what each member did before arriving is visible after.
 * Progress (ar.h): a flag not there at the first look makes the piece's
 * word say "waits at phase for member r, whose flag holds v" (and again
 * when the flag changes to another stale value), and the wait's end
 * "passed"; a meeting that finds every flag there writes nothing
 * (test_ar_progress.c, test_quiet_when_no_wait). */
static disco_status_t await(const struct sim_job *s, uint32_t phase, uint32_t piece)
{
    bool told = false;
    uint32_t last = 0;
    for (uint32_t r = 0; r < s->j.size; r++) {
        _Atomic uint32_t *w = &s->signal[s->j.rank][disco__ar_flag(s->j.slot, phase, piece, r)];
        uint32_t shown = s->j.epoch; /* the flag value the piece word holds for r */
        for (unsigned spins = 0;; spins++) {
            uint32_t v = atomic_load_explicit(w, memory_order_acquire); /* F2 */
            if (v == s->j.epoch)
                break;
            if (v != shown) {
                disco__ar_progress_piece(s->j.progress, piece,
                                         DISCO_AR_PW(v, s->j.epoch, phase, DISCO_AR_PW_WAITING, r));
                shown = v, told = true, last = r;
            }
            if (spins < 64) {
                sched_yield();
                continue;
            }
            /* Slices of 2 ms under a watch, else 100 ms: the watch is looked
             * at after each. */
            bool watched = disco__device_watching() != NULL;
            struct timespec ts = {0, (watched ? 2 : 100) * 1000 * 1000};
            syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
            /* A device shared without MPS: the context may go to another
             * process's kernel here (sim_slice.c). */
            disco__device_watch_waiting();
            disco_status_t st = disco__sim_slice_yield();
            if (st == DISCO_OK)
                st = disco__device_watch_check();
            if (st != DISCO_OK)
                return disco_set_error(st,
                                       "allreduce kernel on sim: member %u waited for member %u "
                                       "at %s of piece %u: %s",
                                       s->j.rank, r, PHASE_NAME[phase], piece, disco_last_error());
        }
    }
    if (told)
        disco__ar_progress_piece(
            s->j.progress, piece,
            DISCO_AR_PW(s->j.epoch, s->j.epoch, phase, DISCO_AR_PW_PASSED, last));
    return DISCO_OK;
}

/* DISCO_SIM_AR_SLOW="rank:us": the member of that rank (in every
 * allreduce kernel) waits us microseconds more before each read of the
 * peers' bytes: a straggler inside the kernel, for tests of the phases
 * that wait for it. Unset or malformed: 0. */
static uint32_t slow_us(uint32_t rank)
{
    const char *e = getenv("DISCO_SIM_AR_SLOW");
    unsigned r, us;
    char extra;
    if (e == NULL || sscanf(e, "%u:%u%c", &r, &us, &extra) != 2 || r != rank || us >= 1000000)
        return 0;
    return us;
}

/* DISCO_SIM_AR_STALL="rank:phase:n" (phase: start, mid or end; n from 1):
 * in the n-th allreduce kernel this process runs, the member of that rank
 * stops before it arrives at that phase of piece 0, as a kernel stuck
 * there: the others wait for its flag. It goes on when the file named by
 * DISCO_SIM_AR_STALL_UNTIL exists, and gives up when its watch ends (the
 * call's deadline, the session broken). A test knob, for the progress the
 * others show (ar.h). Returns the phase to stall before, or -1. */
static int stall_phase(uint32_t rank)
{
    static _Atomic unsigned kernels; /* run by this process: relaxed, a count only */
    unsigned n = atomic_fetch_add_explicit(&kernels, 1, memory_order_relaxed) + 1;
    const char *e = getenv("DISCO_SIM_AR_STALL");
    unsigned r, nth;
    char ph[8], extra;
    if (e == NULL || sscanf(e, "%u:%7[a-z]:%u%c", &r, ph, &nth, &extra) != 3 || r != rank ||
        nth != n)
        return -1;
    for (int p = 0; p < (int)DISCO_AR_PHASES; p++)
        if (strcmp(ph, PHASE_NAME[p]) == 0)
            return p;
    return -1;
}

static disco_status_t stall(const struct sim_job *s, uint32_t phase)
{
    const char *until = getenv("DISCO_SIM_AR_STALL_UNTIL");
    for (;;) {
        if (until != NULL && access(until, F_OK) == 0)
            return DISCO_OK;
        disco_status_t st = disco__device_watch_check();
        if (st != DISCO_OK)
            return disco_set_error(st, "allreduce kernel on sim: member %u stalled before %s: %s",
                                   s->j.rank, PHASE_NAME[phase], disco_last_error());
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void peer_delay(const struct sim_job *s)
{
    struct timespec d = {(time_t)(s->delay_us / 1000000), (long)(s->delay_us % 1000000) * 1000};
    while (s->delay_us > 0 && s->j.size > 1 && nanosleep(&d, &d) != 0 && errno == EINTR)
        ;
}

/* Reduces piece of part (a slice, or everything) of every input into this
 * member's output. */
static disco_status_t reduce(const struct sim_job *s, uint32_t part, uint32_t piece)
{
    uint64_t lo, hi;
    disco__ar_range(&s->j, part, piece, &lo, &hi);
    const void *srcs[DISCO_AR_MAX_RANKS];
    for (uint32_t r = 0; r < s->j.size; r++)
        srcs[r] = s->in[r] + lo * s->esz;
    peer_delay(s);
    return disco_reduce((disco_reduce_op_t)s->j.op, s->j.dtype, s->out[s->j.rank] + lo * s->esz,
                        srcs, (int)s->j.size, (size_t)(hi - lo));
}

/* Two-shot's second half: every other member's final piece of its slice. */
static void gather(const struct sim_job *s, uint32_t piece)
{
    peer_delay(s);
    for (uint32_t r = 0; r < s->j.size; r++) {
        uint64_t lo, hi;
        disco__ar_range(&s->j, r, piece, &lo, &hi);
        if (r != s->j.rank)
            memcpy(s->out[s->j.rank] + lo * s->esz, s->out[r] + lo * s->esz,
                   (size_t)(hi - lo) * s->esz);
    }
}

/* Piece b; stall: the phase before which piece 0 stalls (stall_phase), or -1. */
static disco_status_t run_piece(const struct sim_job *s, uint32_t piece, int stall_at)
{
    disco_status_t st;
    if (stall_at == DISCO_AR_START && (st = stall(s, DISCO_AR_START)) != DISCO_OK)
        return st;
    arrive(s, DISCO_AR_START, piece);
    if ((st = await(s, DISCO_AR_START, piece)) != DISCO_OK) /* F3: F2 is enough */
        return st;
    if ((st = reduce(s, s->j.two_shot ? s->j.rank : 0, piece)) != DISCO_OK)
        return st;
    if (s->j.two_shot) {
        if (stall_at == DISCO_AR_MID && (st = stall(s, DISCO_AR_MID)) != DISCO_OK)
            return st;
        arrive(s, DISCO_AR_MID, piece);
        if ((st = await(s, DISCO_AR_MID, piece)) != DISCO_OK)
            return st;
        gather(s, piece);
    }
    if (stall_at == DISCO_AR_END && (st = stall(s, DISCO_AR_END)) != DISCO_OK)
        return st;
    arrive(s, DISCO_AR_END, piece);
    return await(s, DISCO_AR_END, piece);
}

static disco_status_t run_job(void *arg)
{
    struct sim_job *s = arg;
    disco_status_t st = DISCO_OK;
    int stall_at = stall_phase(s->j.rank);
    for (uint32_t b = 0; b < s->j.pieces && st == DISCO_OK; b++)
        st = run_piece(s, b, b == 0 ? stall_at : -1);
    /* The kernel ended, whatever its verdict: views no longer show it (P4). */
    disco__ar_progress_stop(s->j.progress);
    free(s);
    return st;
}

/* DISCO_SIM_AR_LAUNCH_FAIL="rank": the launch of that rank fails (as a
 * CUDA launch can after the go barrier): a test knob. */
static bool launch_refused(uint32_t rank)
{
    const char *e = getenv("DISCO_SIM_AR_LAUNCH_FAIL");
    unsigned r;
    char extra;
    return e != NULL && sscanf(e, "%u%c", &r, &extra) == 1 && r == rank;
}

disco_status_t disco__sim_ar_launch(int device_id, disco_stream_t stream,
                                    const struct disco__ar_job *job)
{
    if (launch_refused(job->rank))
        return disco_set_error(
            DISCO_E_SYS, "allreduce kernel on sim:%d: launch refused (DISCO_SIM_AR_LAUNCH_FAIL)",
            device_id);
    struct sim_job *s = calloc(1, sizeof *s);
    if (s == NULL)
        return disco_set_error(DISCO_E_NOMEM, "allreduce kernel on sim:%d: its job", device_id);
    s->j = *job;
    s->esz = disco_dtype_bytes(job->dtype);
    s->delay_us = disco__sim_peer_copy_us() + slow_us(job->rank);
    size_t nb = (size_t)job->count * s->esz;
    disco_status_t st = DISCO_OK;
    const char *fn = "allreduce kernel";
    for (uint32_t r = 0; r < job->size && st == DISCO_OK; r++) {
        bool across = false;
        char *sig = NULL;
        if ((st = disco__sim_shadow(job->in[r], nb, device_id, fn, &s->in[r], &across)) ==
                DISCO_OK &&
            (st = disco__sim_shadow(job->out[r], nb, device_id, fn, &s->out[r], &across)) ==
                DISCO_OK &&
            (st = disco__sim_shadow(job->signal[r], DISCO_AR_SIGNAL_BYTES, device_id, fn, &sig,
                                    &across)) == DISCO_OK)
            s->signal[r] = (_Atomic uint32_t *)(void *)sig;
    }
    if (st == DISCO_OK)
        st = disco__sim_enqueue_call(device_id, stream, run_job, s);
    if (st != DISCO_OK)
        free(s);
    return st;
}
