/*
 * ar_cuda.h - between cuda_ar.c (host) and ar_cuda.cu (the allreduce kernels of
 * ar.h): the launcher and the kernel's error word (internal; C and CUDA C++).
 *
 * The error word. The process holds one pair of 32-bit words in mapped,
 * pinned host memory (cuda_ar.c): abort, which the host sets to stop a
 * spinning kernel, and err, where the first wait that gives up records why
 * (an atomicCAS from 0: the first one wins). The host zeroes both before
 * each launch (the previous call was synced) and reads err after the sync
 * that completed the kernel (disco__cuda_ar_check). So one allreduce kernel
 * at a time may be in flight in a process, as one collective at a time is.
 *
 * Progress (ar.h). Beside them lie the piece words: a wait that spins past
 * kPollEvery stores its piece's word there (a volatile 64-bit store to
 * mapped host memory: relaxed at system scope, ordered with nothing; the
 * host only copies it), and again when it ends. The host zeroes them with
 * the others at each launch, and the thread that syncs the kernel copies
 * them into the worker's record in the session's status region at each
 * poll (disco__cuda_ar_mirror), where observers read them. The kernel does
 * not write the shared segment itself: registering that mapping with CUDA
 * would pin it past the session's unmapping (a later session mapped at the
 * same address would find the old pages registered there).
 */
#ifndef DISCO_WORKERS_DEVICE_AR_CUDA_H
#define DISCO_WORKERS_DEVICE_AR_CUDA_H

#include <stdint.h>

#include "workers/device/ar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a wait gave up (the err word's kind; never 0, so a record is never 0). */
#define DISCO_AR_ERR_TIMEOUT 1u /* the job's budget_ns ran out */
#define DISCO_AR_ERR_ABORTED 2u /* the host set the abort word */

/* err = kind | phase << 8 | piece << 16 | member waited for << 24. Macros,
 * so that host and device code both use them. */
#define DISCO_AR_ERR_WORD(kind, phase, piece, member)                                              \
    ((uint32_t)(kind) | (uint32_t)(phase) << 8 | (uint32_t)(piece) << 16 | (uint32_t)(member) << 24)
#define DISCO_AR_ERR_KIND(w)   ((uint32_t)(w)&0xffu)
#define DISCO_AR_ERR_PHASE(w)  ((uint32_t)(w) >> 8 & 0xffu)
#define DISCO_AR_ERR_PIECE(w)  ((uint32_t)(w) >> 16 & 0xffu)
#define DISCO_AR_ERR_MEMBER(w) ((uint32_t)(w) >> 24 & 0xffu)

/* The process's words, in mapped, pinned host memory (above). */
struct disco__ar_words {
    uint32_t abort_w;                    /* host -> kernel: stop spinning (nonzero) */
    uint32_t err;                        /* kernel -> host: why a wait gave up (0: it did not) */
    uint64_t piece[DISCO_AR_MAX_PIECES]; /* kernel -> host: ar.h's piece words */
};

/** Launches job's kernel (job->pieces blocks) on stream (a cudaStream_t)
 *  of the current device; words_dev is the device address of the
 *  process's mapped words (above). The job must be checked
 *  (disco__ar_launch). Thread-safe as CUDA launches are.
 *  @return 0; cudaErrorInvalidValue for a dtype or op the kernels do not
 *  reduce or a piece count out of range; else the launch's cudaError_t
 *  (cudaGetLastError after the launch). */
int disco__cuda_ar_kernel(const struct disco__ar_job *job, void *stream,
                          struct disco__ar_words *words_dev);

#ifdef __cplusplus
}
#endif

#endif
