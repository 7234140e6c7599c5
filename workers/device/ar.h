/*
 * ar.h - allreduce of device tensors by kernels that read the peers'
 * memory directly (internal; C and CUDA C++ both include it).
 *
 * The members of a collective each launch one "kernel" on their own
 * stream. It meets the others through signal flags in IPC memory (every
 * arena starts with a signal region, arena.h), reads their inputs (and, in
 * two-shot, their partial results) through the IPC mappings, and writes
 * only its own output. On CUDA the kernel is ar_cuda.cu; on the simulated
 * device the very same protocol runs as a CPU loop on the sim stream
 * (ar_sim.c), so every machine tests it.
 *
 * The protocol. A job is cut into nblocks pieces (disco__ar_plan; CUDA runs
 * one thread block per piece, the sim runs them one after another), and
 * each piece has its own flags, so pieces never wait for each other.
 *   one-shot (small messages): for piece b of the elements,
 *     START  tell every member "my stream reached this kernel", wait for
 *            every member's START (so everything queued before their
 *            kernels, their inputs' producers included, is done);
 *     reduce piece b of every member's input into my output (sources folded
 *            in rank order: every member computes the same bits);
 *     END    tell every member "I no longer read your bytes", wait for
 *            every member's END (so after my kernel, my stream may reuse
 *            or free my input: nobody reads it any more).
 *   two-shot (large messages): the elements are cut into size slices,
 *   member r owns slice r, and piece b is the b-th part of each slice;
 *     START  as above;
 *     reduce piece b of slice rank of every member's input into my output;
 *     MID    tell every member "my slice's piece b is final", wait for all;
 *     gather piece b of every other member's slice from its output into
 *            mine;
 *     END    as above (my output's slice is read by the others until then).
 * Each member reads about size * n bytes in one-shot and 2 * n in
 * two-shot; one-shot has one less meeting.
 *
 * Flags. The signal region of member m holds one 32-bit flag per (slot,
 * phase, piece, sender rank): sender s "arrives" at phase p of piece b by
 * storing the call's epoch into flag (slot, p, b, s) of every member's
 * region (its own included), and waits until its own region's flags (slot,
 * p, b, r) hold the epoch for every r. The epoch is the same on every
 * member (the collective's number, which every worker counts alike) and
 * never 0; waits compare for equality, so a flag left over from an earlier
 * call (even a failed one) is never taken for this call's. The slot is
 * the parity of the collective's number, so consecutive collectives
 * alternate (an allreduce and the next one share a slot when one other
 * collective came between: still safe, by the argument below): a member that finished call k can
 * write call k+1's START while a slow one still waits for k's END, without touching what the slow
 * one reads; it cannot reach k+2 (the same slot as k) before every member arrived at k+1's START,
 * which each does only after k's END. (With START and END in every call one slot would do as well:
 * a member writes a flag of call k+1 only after every member arrived at k's END, by when each has
 * read all its flags of k. The slots keep a fast member off a slow one's flags whatever the phases;
 * tests/test_gpu_ar.c shows that dropping the END or the MID wait is caught, not the slots.)
 *
 * Fences (the labels are used in ar_sim.c and ar_cuda.cu):
 *   F1 an arrival is a release store of the epoch (CUDA: system scope,
 *      after the block's barrier, so every thread's earlier reads and
 *      writes of this piece are ordered before it);
 *   F2 a wait is an acquire load of the flag (CUDA: system scope, then the
 *      block's barrier, so every thread reads after it);
 *   F3 the START wait needs no more than F2: a peer arrives from inside its
 *      kernel, after its stream completed its earlier work.
 * A member of a group of size 1 still runs the kernel (a copy).
 *
 * Failure. A wait ends with an error instead of spinning forever: on the
 * sim, at the sync's watch (deadline, abort word, liveness check:
 * watch.h); on CUDA, at the job's time budget or when the host sets the
 * process's abort word (the watched sync does when its watch fires), the
 * kernel then records the phase and the member it waited for in a word the
 * host reads after the sync (disco__ar_check). A member whose launch or
 * kernel fails gives the whole call up (collective_dev.c): the others may
 * be waiting for its flags, so the session is broken (worker 0) or the
 * worker process ends (another worker), which the others' watches see.
 */
#ifndef DISCO_WORKERS_DEVICE_AR_H
#define DISCO_WORKERS_DEVICE_AR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpack/dlpack.h"
#include "disco/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_AR_MAX_RANKS  16u /* larger groups take the host-staged path */
#define DISCO_AR_MAX_PIECES 16u
#define DISCO_AR_PHASES     3u /* START, MID, END */
#define DISCO_AR_SLOTS      2u

enum { DISCO_AR_START = 0, DISCO_AR_MID = 1, DISCO_AR_END = 2 };

/* The two helpers below run on the host and, under nvcc, in the kernels:
 * one formula for both sides. */
#ifdef __CUDACC__
#define DISCO_AR_HD __host__ __device__
#else
#define DISCO_AR_HD
#endif

/* Bytes at the start of every arena for the flags (a multiple of the
 * arena's alignment). */
#define DISCO_AR_SIGNAL_BYTES 8192u

/* The flag of (slot, phase, piece, sender rank), as an index of 32-bit
 * words in a member's signal region. */
DISCO_AR_HD static inline uint32_t disco__ar_flag(uint32_t slot, uint32_t phase, uint32_t piece,
                                                  uint32_t rank)
{
    return ((slot * DISCO_AR_PHASES + phase) * DISCO_AR_MAX_PIECES + piece) * DISCO_AR_MAX_RANKS +
           rank;
}

/* Progress. While it runs, a kernel says where each piece waits, so that
 * the watchdog, disco_session_dump and `disco top` (another process) can
 * name a hang: "worker 2 in allreduce #812 (device kernel, two-shot):
 * piece 5 waits at MID for worker 1 (flag holds #811)". The record is the
 * worker's struct disco__ar_progress in the session's status region
 * (ar_progress.h, which gives its protocol); the host writes its header at
 * the launch (disco__ar_launch) and a piece word per piece says where that
 * piece waits. A piece word is written only on a wait's slow path (a flag
 * not there at the first look on the sim, after kPollEvery spins on CUDA)
 * and once more when that wait ends, so a meeting that finds every flag
 * there writes nothing (tests/test_ar_progress.c, test_quiet_when_no_wait).
 * Its 64 bits, one aligned 64-bit store (atomic on the host; a GPU's store
 * to host memory is not split in practice, and a torn word would only be
 * a wrong hint: readers check every field):
 *   bits  0..31  the flag's value at the last look (an epoch, or 0: never set)
 *   bits 32..47  the low 16 bits of the kernel's epoch (a tag: a word of
 *                another call is not taken for this one's)
 *   bits 48..51  the phase (DISCO_AR_START, MID, END)
 *   bits 52..55  DISCO_AR_PW_WAITING (waits at the phase) or
 *                DISCO_AR_PW_PASSED (waited there, and passed)
 *   bits 56..63  the rank of the member whose flag it waits for (or waited
 *                for last)
 * Every field a reader takes from it is checked (ranges, tag). */
#define DISCO_AR_PW_WAITING 1u
#define DISCO_AR_PW_PASSED  2u
#define DISCO_AR_PW(seen, epoch, phase, state, member)                                             \
    ((uint64_t)(uint32_t)(seen) | (uint64_t)((uint32_t)(epoch)&0xffffu) << 32 |                    \
     (uint64_t)((uint32_t)(phase)&0xfu) << 48 | (uint64_t)((uint32_t)(state)&0xfu) << 52 |         \
     (uint64_t)((uint32_t)(member)&0xffu) << 56)
#define DISCO_AR_PW_SEEN(w)   ((uint32_t)(w))
#define DISCO_AR_PW_TAG(w)    ((uint32_t)((w) >> 32) & 0xffffu)
#define DISCO_AR_PW_PHASE(w)  ((uint32_t)((w) >> 48) & 0xfu)
#define DISCO_AR_PW_STATE(w)  ((uint32_t)((w) >> 52) & 0xfu)
#define DISCO_AR_PW_MEMBER(w) ((uint32_t)((w) >> 56) & 0xffu)

struct disco__ar_progress; /* ar_progress.h (C only: shared memory, atomics) */

/* What one member's kernel does (every pointer already mapped in this
 * process: device addresses, the member's own or imports). */
struct disco__ar_job {
    uint32_t rank, size; /* this member in its group; size <= DISCO_AR_MAX_RANKS */
    uint32_t slot;       /* 0 or 1, alternating between calls */
    uint32_t epoch;      /* never 0; the same on every member */
    uint32_t op;         /* disco_reduce_op_t */
    uint32_t two_shot;   /* 0: one-shot */
    uint32_t pieces;     /* 1 .. DISCO_AR_MAX_PIECES (disco__ar_plan) */
    uint32_t base;       /* progress: the group's first worker (node-local id) */
    DLDataType dtype;
    uint64_t count;     /* elements of each input */
    uint64_t budget_ns; /* CUDA: how long a wait may spin (0: until aborted) */
    /* Progress (above): the collective's number (epoch = coll % UINT32_MAX
     * + 1), the worker's command it runs in, and the worker's record in
     * this process's mapping of the status region; NULL: none (the kernel
     * then writes nothing). Host side only: the CUDA kernel gets its piece
     * words elsewhere (ar_cuda.h). */
    uint64_t coll, cmd;
    struct disco__ar_progress *progress;
    const void *in[DISCO_AR_MAX_RANKS];
    void *out[DISCO_AR_MAX_RANKS];        /* every member's output (two-shot reads them);
                                             no output overlaps any input */
    uint32_t *signal[DISCO_AR_MAX_RANKS]; /* every member's signal region */
};

/* Elements [lo, hi) of piece b of part (a slice in two-shot; part 0 and
 * parts 1 in one-shot): the count cut evenly, by rank then by piece. */
DISCO_AR_HD static inline void disco__ar_range(const struct disco__ar_job *j, uint32_t part,
                                               uint32_t piece, uint64_t *lo, uint64_t *hi)
{
    uint64_t parts = j->two_shot ? j->size : 1;
    uint64_t plo = j->count * part / parts, phi = j->count * (part + 1) / parts;
    *lo = plo + (phi - plo) * piece / j->pieces;
    *hi = plo + (phi - plo) * (piece + 1) / j->pieces;
}

/** The number of pieces for count elements of esz bytes: one per 64 KiB
 *  of what a member reduces, at least 1, at most DISCO_AR_MAX_PIECES. */
uint32_t disco__ar_plan(uint64_t count, size_t esz, uint32_t size, bool two_shot);

/** Whether a message of nbytes goes two-shot: at DISCO_AR_TWO_SHOT_BYTES
 *  bytes and above (read at each call; default
 *  DISCO_AR_TWO_SHOT_DEFAULT, not yet measured on a GPU: see the README).
 *  Members may disagree (their environments): the collective takes its
 *  first member's choice. Thread-safe. */
bool disco__ar_two_shot(uint64_t nbytes);

#define DISCO_AR_TWO_SHOT_DEFAULT (512u * 1024u)

#ifndef __CUDACC__
#include "disco/status.h"

/** Checks job (ranks, pieces, epoch, op, dtype; every pointer set) and
 *  queues its kernel on stream of dev: on the sim an operation of the
 *  stream (run at its sync, ar_sim.c), on CUDA a kernel launch. Returns
 *  DISCO_OK; DISCO_E_INVAL (a malformed job); DISCO_E_BAD_TYPE (a dtype the
 *  kernels do not reduce); DISCO_E_NO_DEVICE (another device type, or no
 *  CUDA in this build); the launch's error. */
disco_status_t disco__ar_launch(DLDevice dev, disco_stream_t stream,
                                const struct disco__ar_job *job);

/** After the stream's sync that completed the last launch: the kernel's
 *  own verdict. CUDA: DISCO_E_TIMEOUT (a wait ran out of its budget) or
 *  DISCO_E_BROKEN (the host aborted it), naming the phase and the member
 *  waited for. Sim: DISCO_OK (its failures are the sync's). */
disco_status_t disco__ar_check(DLDevice dev);

/* The device types' halves of the two calls above (job already checked). */
disco_status_t disco__sim_ar_launch(int device_id, disco_stream_t stream,
                                    const struct disco__ar_job *job); /* ar_sim.c */
disco_status_t disco__cuda_ar_launch(int device_id, disco_stream_t stream,
                                     const struct disco__ar_job *job); /* cuda_ar.c */
disco_status_t disco__cuda_ar_check(int device_id);                    /* cuda_ar.c */
#endif

#ifdef __cplusplus
}
#endif

#endif
