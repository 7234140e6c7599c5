/* cuda_ar.c - launching the allreduce kernels of ar.h (ar_cuda.cu, through
 * ar_cuda.h) and reading their verdict; stopping one when a watched sync
 * gives up (cuda.c calls disco__cuda_ar_abort). Stubs without CUDA. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "workers/device/ar.h"
#include "workers/device/ar_cuda.h"
#include "workers/device/ar_progress.h"
#include "workers/device/cuda_impl.h"

#ifdef DISCO_HAVE_CUDA

/* ---- allreduce kernels (ar.h, ar_cuda.h) --------------------------------
 * The process's abort and err words live in mapped, pinned host memory,
 * allocated at the first launch and kept for the life of the process.
 * g_ar_lock serializes the launches (the allocation, the zeroing, the launch
 * itself: ar_cuda.cu is compiled without thread-safe statics, so the kernel
 * handles that nvcc's generated launch code sets up at first use rely on
 * this lock).
 * Fork: every function here passes GUARD() first, and a thread that holds
 * the lock has called CUDA, so a child forked meanwhile is refused before it
 * could touch the lock or the words. */

typedef struct disco__ar_words ar_words_t; /* ar_cuda.h */

static pthread_mutex_t g_ar_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set once, under g_ar_lock. W1: the release store publishes the zeroed
 * words; pairs with the acquire loads W2 (the sync's abort, the check). */
static ar_words_t *_Atomic g_ar_words;
/* Progress (ar_cuda.h): the record of the kernel this thread launched last
 * (NULL: none), into which its syncs copy the piece words. The thread that
 * launches a kernel is the one that syncs it (a collective's). */
static _Thread_local struct disco__ar_progress *t_progress;

static disco_status_t ar_launch_locked(int device_id, disco_stream_t stream,
                                       const struct disco__ar_job *job)
{
    /* Relaxed: only this lock's holders store the pointer. */
    ar_words_t *w = atomic_load_explicit(&g_ar_words, memory_order_relaxed);
    if (w == NULL) {
        void *p = NULL;
        /* Portable: mapped into every device's context, not only this one. */
        CU(cudaHostAlloc(&p, sizeof *w, cudaHostAllocMapped | cudaHostAllocPortable), device_id);
        w = p;
        memset(w, 0, sizeof *w);
        atomic_store_explicit(&g_ar_words, w, memory_order_release); /* W1 */
    }
    void *dev = NULL;
    CU(cudaHostGetDevicePointer(&dev, w, 0), device_id);
    /* Relaxed: the launch below orders these stores before the kernel's
     * reads (host writes to pinned memory made before a launch are visible
     * to the kernel, as for any zero-copy input), and the previous kernel
     * is done: its call was synced. */
    __atomic_store_n(&w->abort_w, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->err, 0, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < DISCO_AR_MAX_PIECES; i++)
        __atomic_store_n(&w->piece[i], 0, __ATOMIC_RELAXED);
    int e = disco__cuda_ar_kernel(job, stream, (ar_words_t *)dev);
    if (e != 0)
        return disco__cuda_fail((cudaError_t)e, "disco__cuda_ar_kernel", device_id);
    t_progress = job->progress;
    return DISCO_OK;
}

disco_status_t disco__cuda_ar_launch(int device_id, disco_stream_t stream,
                                     const struct disco__ar_job *job)
{
    GUARD();
    CU(cudaSetDevice(device_id), device_id);
    pthread_mutex_lock(&g_ar_lock);
    disco_status_t st = ar_launch_locked(device_id, stream, job);
    pthread_mutex_unlock(&g_ar_lock);
    return st;
}

void disco__cuda_ar_mirror(void)
{
    struct disco__ar_progress *p = t_progress;
    ar_words_t *w = p != NULL ? atomic_load_explicit(&g_ar_words, memory_order_acquire) : NULL;
    if (w == NULL) /* W2 above: the acquire pairs with W1 */
        return;
    /* Relaxed: piece words order nothing (ar_cuda.h); the kernel's
     * volatile stores reach this host memory eventually, and a stale or
     * zero word only shows an older picture. */
    for (unsigned i = 0; i < DISCO_AR_MAX_PIECES; i++)
        disco__ar_progress_piece(p, i, __atomic_load_n(&w->piece[i], __ATOMIC_RELAXED));
}

disco_status_t disco__cuda_ar_check(int device_id)
{
    static const char *const phases[DISCO_AR_PHASES] = {"START", "MID", "END"};
    GUARD();
    /* The kernel is done (its sync returned): a last copy, then the end. */
    disco__cuda_ar_mirror();
    disco__ar_progress_stop(t_progress);
    t_progress = NULL;
    ar_words_t *w = atomic_load_explicit(&g_ar_words, memory_order_acquire); /* W2 */
    /* Relaxed: the sync that completed the kernel made its writes to host
     * memory visible before it returned; nothing else writes the word. */
    uint32_t e = w != NULL ? __atomic_load_n(&w->err, __ATOMIC_RELAXED) : 0;
    if (e == 0)
        return DISCO_OK;
    unsigned phase = DISCO_AR_ERR_PHASE(e), piece = DISCO_AR_ERR_PIECE(e);
    unsigned member = DISCO_AR_ERR_MEMBER(e);
    const char *name = phase < DISCO_AR_PHASES ? phases[phase] : "?";
    switch (DISCO_AR_ERR_KIND(e)) {
    case DISCO_AR_ERR_TIMEOUT:
        return disco_set_error(DISCO_E_TIMEOUT,
                               "allreduce kernel on cuda:%d: piece %u waited for member %u at %s "
                               "past its time budget",
                               device_id, piece, member, name);
    case DISCO_AR_ERR_ABORTED:
        return disco_set_error(DISCO_E_BROKEN,
                               "allreduce kernel on cuda:%d: piece %u waited for member %u at %s: "
                               "aborted by the host",
                               device_id, piece, member, name);
    default:
        return disco_set_error(DISCO_E_SYS, "allreduce kernel on cuda:%d: unknown error word %#x",
                               device_id, (unsigned)e);
    }
}

/* A watched sync gave up: stops an allreduce kernel that may spin on the
 * stream, and gives the stream up to a second to drain, so that the kernel
 * no longer touches buffers the caller may now release. Leaves the caller's
 * error detail alone. Nothing to do where no allreduce kernel was launched. */
void disco__cuda_ar_abort(disco_stream_t stream)
{
    ar_words_t *w = atomic_load_explicit(&g_ar_words, memory_order_acquire); /* W2 */
    if (w == NULL)
        return;
    /* Relaxed: the word publishes nothing; the kernel only needs to see it
     * eventually, and its volatile read goes to host memory each time. */
    __atomic_store_n(&w->abort_w, 1, __ATOMIC_RELAXED);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
        if (e != cudaErrorNotReady) {
            if (e != cudaSuccess)
                (void)cudaGetLastError(); /* clears a non-sticky error */
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000000000LL + (now.tv_nsec - t0.tv_nsec) >= 1000000000LL)
            break;
        struct timespec ts = {0, 20 * 1000};
        nanosleep(&ts, NULL);
    }
    /* The record keeps where the pieces waited until now; the kernel is no
     * longer shown as running (it ended, or will not be waited for). */
    disco__cuda_ar_mirror();
    disco__ar_progress_stop(t_progress);
    t_progress = NULL;
}

#else /* !DISCO_HAVE_CUDA */

disco_status_t disco__cuda_ar_launch(int device_id, disco_stream_t stream,
                                     const struct disco__ar_job *job)
{
    (void)device_id, (void)stream, (void)job;
    return disco__cuda_none("disco__cuda_ar_launch");
}

disco_status_t disco__cuda_ar_check(int device_id)
{
    (void)device_id;
    return disco__cuda_none("disco__cuda_ar_check");
}

void disco__cuda_ar_abort(disco_stream_t stream)
{
    (void)stream;
}

void disco__cuda_ar_mirror(void) {}

#endif /* DISCO_HAVE_CUDA */
