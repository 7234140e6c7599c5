/* demo_dec_kernels.h - the decoder's model work where its tensors live
 * (demo_dec_kernels.c): the host functions (CPU kernels), and the same
 * operations on pointers of a device, for the one-command step
 * (demo_decoder_lib.c's demo.dec_step), so that its activations, weights
 * and KV cache stay on the device through a step:
 *   - CPU (the shared heap): the host functions on the tensors in place;
 *   - CUDA: kernels of the demo's own (demo_dec_cuda.cu), launched on the
 *     device's default stream through the CUDA driver, loaded at run time;
 *   - sim: the host functions, each on host copies of its operands (the
 *     sim's host implementation of the kernel: copied in, computed, copied
 *     back, synced), since sim memory faults on a host access.
 * Pointers are element pointers in the device's address space (ptr + k is
 * element k, on sim and CUDA as on the host).
 *
 * Thread safety: a demo_dk_t belongs to the worker function's thread; the
 * CUDA module is loaded once a process (under a lock). Every function
 * returns DISCO_OK, or the failure with disco_ctx_fail's message (the
 * device's error, "no CUDA driver" or "built without the CUDA kernels"). */
#ifndef DISCO_TOOLS_DEMO_DEC_KERNELS_H
#define DISCO_TOOLS_DEMO_DEC_KERNELS_H

#include <stdint.h>

#include "disco/func.h"
#include "disco/tensor.h"

/* ---- the host functions ---- */

/** out[cols] = x[rows] W[rows, cols] (row-major); out overlaps neither. */
void demo_dec_matvec(const float *restrict x, const float *restrict w, float *restrict out,
                     int64_t rows, int64_t cols);

/** out = x / sqrt(mean(x^2) + eps) * gain, over d. */
void demo_dec_rmsnorm(const float *x, const float *gain, float *out, int64_t d);

/** Rotates each pair (2p, 2p + 1) of each of nh heads of v by its angle at pos. */
void demo_dec_rope(float *v, int64_t nh, int64_t hd, int64_t pos);

/** o[nh * hd] = causal attention of q over K, V [t <= pos][ld] for nh heads
 *  (head h at column h * hd); p: scratch of pos + 1 floats. */
void demo_dec_attend(const float *q, const float *k, const float *v, float *o, float *p, int64_t nh,
                     int64_t hd, int64_t ld, int64_t pos);

/* ---- on a device ---- */

struct demo_dk_cuda;

typedef struct demo_dk {
    disco_ctx_t *ctx;
    DLDevice dev;                  /* where the pointers live */
    const struct demo_dk_cuda *cu; /* CUDA: the loaded kernels; else NULL */
} demo_dk_t;

/** Work on dev (of the call ctx): CUDA loads the kernels (once a process). */
disco_status_t demo_dk_init(disco_ctx_t *ctx, DLDevice dev, demo_dk_t *k);

/** dst[n] = src[n], both on k's device. */
disco_status_t demo_dk_copy(const demo_dk_t *k, float *dst, const float *src, int64_t n);

/** As demo_dec_rmsnorm, demo_dec_matvec, demo_dec_rope, demo_dec_attend
 *  (its scratch is the kernel's own). */
disco_status_t demo_dk_rmsnorm(const demo_dk_t *k, const float *x, const float *gain, float *out,
                               int64_t d);
disco_status_t demo_dk_matvec(const demo_dk_t *k, const float *x, const float *w, float *out,
                              int64_t rows, int64_t cols);
disco_status_t demo_dk_rope(const demo_dk_t *k, float *v, int64_t nh, int64_t hd, int64_t pos);
disco_status_t demo_dk_attend(const demo_dk_t *k, const float *q, const float *kc, const float *vc,
                              float *o, int64_t nh, int64_t hd, int64_t ld, int64_t pos);

/** v = gelu(v) over n (demo_mlp_gelu). */
disco_status_t demo_dk_gelu(const demo_dk_t *k, float *v, int64_t n);

/** h += a over n. */
disco_status_t demo_dk_add(const demo_dk_t *k, float *h, const float *a, int64_t n);

/** Waits for the work queued so far (before a collective reads it, and
 *  before the step returns). CPU: nothing. */
disco_status_t demo_dk_sync(const demo_dk_t *k);

#endif
