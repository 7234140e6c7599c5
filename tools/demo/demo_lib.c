/* demo_lib.c - the library disco-demo loads into every worker
 * (build/lib/libdisco_demo.so). */
#include <stdbool.h>
#include <string.h>

#include "tools/demo/demo_mlp.h"
#include "disco/device.h"
#include "disco/func.h"
#include "disco/tensor.h"

/* demo.partial_sum(k): this worker's contiguous share of 1 + 2 + ... + k.
 * A negative k is refused with a message that names the input. */
static disco_status_t partial_sum(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    int64_t k = args[0].v.i;
    if (k < 0)
        return disco_ctx_fail(ctx, "k must be >= 0, got %lld", (long long)k);
    int64_t w = disco_ctx_worker_id(ctx), n = disco_ctx_world_size(ctx);
    int64_t lo = k * w / n + 1, hi = k * (w + 1) / n, sum = 0;
    for (int64_t i = lo; i <= hi; i++)
        sum += i;
    *ret = disco_value_int(sum);
    return DISCO_OK;
}
DISCO_FUNC("demo.partial_sum", "i", partial_sum)

/* Fills w with worker r of n's shard of W1 (layer 1: [dm, f], its columns
 * first, then zeros) or W2 (layer 2: [f, dm], its rows, then zero rows);
 * f >= its share. A zero column of W1 meets a zero row of W2, and
 * gelu(0) = 0, so the padding adds nothing to y. */
static void fill_weights(float *w, uint64_t seed, int64_t dm, int64_t dff, int64_t layer, int64_t f,
                         int r, int n)
{
    int64_t lo, hi;
    demo_mlp_share(dff, r, n, &lo, &hi);
    memset(w, 0, (size_t)(dm * f) * sizeof *w);
    for (int64_t i = 0; i < dm; i++)
        for (int64_t j = lo; j < hi; j++) {
            if (layer == 1)
                w[i * f + (j - lo)] = demo_mlp_w1(seed, dm, dff, i, j);
            else
                w[(j - lo) * dm + i] = demo_mlp_w2(seed, dm, dff, j, i);
        }
}

/* demo.mlp_weights(seed, d_model, d_ff, layer): this worker's shard of W1
 * (layer 1: [d_model, its columns]) or W2 (layer 2: [its rows, d_model]). */
static disco_status_t mlp_weights(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    uint64_t seed = (uint64_t)a[0].v.i;
    int64_t dm = a[1].v.i, dff = a[2].v.i, layer = a[3].v.i, lo, hi;
    if (dm < 1 || dff < disco_ctx_world_size(ctx) || (layer != 1 && layer != 2))
        return disco_ctx_fail(ctx, "mlp_weights: d_model %lld, d_ff %lld, layer %lld",
                              (long long)dm, (long long)dff, (long long)layer);
    demo_mlp_share(dff, disco_ctx_worker_id(ctx), disco_ctx_world_size(ctx), &lo, &hi);
    int64_t shape[2] = {layer == 1 ? dm : hi - lo, layer == 1 ? hi - lo : dm};
    DLTensor *t;
    if (disco_ctx_empty(ctx, shape, 2, (DLDataType){kDLFloat, 32, 1}, &t) != DISCO_OK)
        return disco_ctx_fail(ctx, "%s", disco_last_error());
    fill_weights(t->data, seed, dm, dff, layer, hi - lo, disco_ctx_worker_id(ctx),
                 disco_ctx_world_size(ctx));
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}
DISCO_FUNC("demo.mlp_weights", "iiii", mlp_weights)

/* y[b, dm] = gelu(x[b, dm] w1[dm, f]) w2[f, dm]; h holds f floats. */
static void partial(const float *xs, const float *w1s, const float *w2s, float *ys, float *h,
                    int64_t b, int64_t dm, int64_t f)
{
    for (int64_t r = 0; r < b; r++) {
        for (int64_t j = 0; j < f; j++)
            h[j] = 0;
        for (int64_t i = 0; i < dm; i++) /* h = x[r] w1, row by row of w1 */
            for (int64_t j = 0; j < f; j++)
                h[j] += xs[r * dm + i] * w1s[i * f + j];
        for (int64_t i = 0; i < dm; i++)
            ys[r * dm + i] = 0;
        for (int64_t j = 0; j < f; j++) { /* y[r] = gelu(h) w2 */
            float g = demo_mlp_gelu(h[j]);
            for (int64_t i = 0; i < dm; i++)
                ys[r * dm + i] += g * w2s[j * dm + i];
        }
    }
}

/* Whether x, w1, w2 (and y, when not NULL) chain: x [b, dm], w1 [dm, f],
 * w2 [f, dm], y [b, dm]. */
static bool shapes_chain(const DLTensor *x, const DLTensor *w1, const DLTensor *w2,
                         const DLTensor *y)
{
    return x->ndim == 2 && w1->ndim == 2 && w2->ndim == 2 && x->shape[1] == w1->shape[0] &&
           w1->shape[1] == w2->shape[0] && w2->shape[1] == x->shape[1] &&
           (y == NULL ||
            (y->ndim == 2 && y->shape[0] == x->shape[0] && y->shape[1] == x->shape[1]));
}

/* demo.mlp_partial(x, w1, w2): gelu(x w1) w2 for this worker's shards: its
 * partial of y, [batch, d_model] (float32). */
static disco_status_t mlp_partial(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    const DLTensor *x = a[0].v.tensor, *w1 = a[1].v.tensor, *w2 = a[2].v.tensor;
    if (!shapes_chain(x, w1, w2, NULL))
        return disco_ctx_fail(ctx, "mlp_partial: shapes do not chain");
    int64_t b = x->shape[0], dm = x->shape[1], f = w1->shape[1];
    DLTensor *y;
    float *h = disco_ctx_alloc(ctx, (size_t)f * sizeof *h);
    if (h == NULL || disco_ctx_empty(ctx, x->shape, 2, x->dtype, &y) != DISCO_OK)
        return disco_ctx_fail(ctx, "mlp_partial: out of memory");
    partial(x->data, w1->data, w2->data, y->data, h, b, dm, f);
    *ret = disco_value_tensor(y);
    return DISCO_OK;
}
DISCO_FUNC("demo.mlp_partial", "TTT", mlp_partial)

/* ---- device tensors (disco-demo --device sim|cuda) ----
 *
 * The MLP's controller makes its device tensors with
 * disco_session_empty_device and these functions fill them in place (a
 * function may also make one itself with disco_ctx_empty_device, as the
 * decoder's do).
 *
 * A worker computes on host copies of its device tensors: copy to the host,
 * compute on the CPU, copy back, sync the stream. That is honest on the sim
 * device, which runs no kernels; on a GPU it is correct and slow. GPU
 * kernels for this are issue 17's. */

/* Bytes of a compact float32 tensor; 0 when t is not float32. */
static size_t f32_bytes(const DLTensor *t)
{
    if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1)
        return 0;
    size_t n = sizeof(float);
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    return n;
}

/* t's bytes as host floats in *out: t's own data on the CPU; else a copy in
 * scratch memory, complete (the stream synced) when this returns. */
static disco_status_t to_host(disco_ctx_t *ctx, const DLTensor *t, float **out)
{
    size_t nb = f32_bytes(t);
    void *data = (char *)t->data + t->byte_offset;
    if (nb == 0)
        return disco_ctx_fail(ctx, "demo: tensors must be float32");
    if (t->device.device_type == kDLCPU) {
        *out = data;
        return DISCO_OK;
    }
    float *h = disco_ctx_alloc(ctx, nb);
    if (h == NULL)
        return disco_ctx_fail(ctx, "demo: out of memory for a host copy of %zu bytes", nb);
    /* NULL stream: the default stream of the source's device; the sync of
     * that stream is what completes the copy (the sim device too). */
    if (disco_device_copy(h, (DLDevice){kDLCPU, 0}, data, t->device, nb, NULL) != DISCO_OK ||
        disco_device_stream_sync(t->device, NULL) != DISCO_OK)
        return disco_ctx_fail(ctx, "demo: copy from device %d:%d: %s", (int)t->device.device_type,
                              t->device.device_id, disco_last_error());
    *out = h;
    return DISCO_OK;
}

/* Writes host floats h back into t (no-op when h is t's own CPU data),
 * synced before it returns. */
static disco_status_t from_host(disco_ctx_t *ctx, DLTensor *t, const float *h)
{
    size_t nb = f32_bytes(t);
    char *data = (char *)t->data + t->byte_offset;
    if ((const char *)h == data)
        return DISCO_OK;
    if (t->device.device_type == kDLCPU) {
        memcpy(data, h, nb);
        return DISCO_OK;
    }
    if (disco_device_copy(data, t->device, h, (DLDevice){kDLCPU, 0}, nb, NULL) != DISCO_OK ||
        disco_device_stream_sync(t->device, NULL) != DISCO_OK)
        return disco_ctx_fail(ctx, "demo: copy to device %d:%d: %s", (int)t->device.device_type,
                              t->device.device_id, disco_last_error());
    return DISCO_OK;
}

/* demo.mlp_weights_into(w, seed, d_model, d_ff, layer): fills w, [d_model, f]
 * (layer 1) or [f, d_model] (layer 2), on the CPU or a device, with this
 * worker's shard zero-padded to f (f at least its share: every worker's
 * tensor has one shape, that of the largest share). */
static disco_status_t mlp_weights_into(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                       disco_value_t *ret)
{
    (void)nargs, (void)ret;
    DLTensor *w = a[0].v.tensor;
    uint64_t seed = (uint64_t)a[1].v.i;
    int64_t dm = a[2].v.i, dff = a[3].v.i, layer = a[4].v.i, lo, hi;
    int r = disco_ctx_worker_id(ctx), n = disco_ctx_world_size(ctx);
    demo_mlp_share(dff, r, n, &lo, &hi);
    int64_t f = w->ndim == 2 ? w->shape[layer == 1 ? 1 : 0] : 0;
    if (dm < 1 || dff < n || (layer != 1 && layer != 2) || w->ndim != 2 ||
        w->shape[layer == 1 ? 0 : 1] != dm || f < hi - lo || f32_bytes(w) == 0)
        return disco_ctx_fail(ctx, "mlp_weights_into: d_model %lld, d_ff %lld, layer %lld",
                              (long long)dm, (long long)dff, (long long)layer);
    float *h = w->device.device_type == kDLCPU ? (float *)((char *)w->data + w->byte_offset)
                                               : disco_ctx_alloc(ctx, f32_bytes(w));
    if (h == NULL)
        return disco_ctx_fail(ctx, "mlp_weights_into: out of memory");
    fill_weights(h, seed, dm, dff, layer, f, r, n);
    return from_host(ctx, w, h);
}
DISCO_FUNC("demo.mlp_weights_into", "Tiiii", mlp_weights_into)

/* demo.mlp_partial_into(x, w1, w2, y): y = gelu(x w1) w2, this worker's
 * partial, written into y; each tensor on the CPU or a device. */
static disco_status_t mlp_partial_into(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                       disco_value_t *ret)
{
    (void)nargs, (void)ret;
    const DLTensor *x = a[0].v.tensor, *w1 = a[1].v.tensor, *w2 = a[2].v.tensor;
    DLTensor *y = a[3].v.tensor;
    if (!shapes_chain(x, w1, w2, y))
        return disco_ctx_fail(ctx, "mlp_partial_into: shapes do not chain");
    int64_t b = x->shape[0], dm = x->shape[1], f = w1->shape[1];
    float *xs, *w1s, *w2s, *ys, *h = disco_ctx_alloc(ctx, (size_t)f * sizeof *h);
    disco_status_t st;
    if (h == NULL)
        return disco_ctx_fail(ctx, "mlp_partial_into: out of memory");
    if ((st = to_host(ctx, x, &xs)) != DISCO_OK || (st = to_host(ctx, w1, &w1s)) != DISCO_OK ||
        (st = to_host(ctx, w2, &w2s)) != DISCO_OK)
        return st;
    if (y->device.device_type == kDLCPU)
        ys = (float *)((char *)y->data + y->byte_offset);
    else if ((ys = disco_ctx_alloc(ctx, f32_bytes(y))) == NULL)
        return disco_ctx_fail(ctx, "mlp_partial_into: out of memory");
    partial(xs, w1s, w2s, ys, h, b, dm, f);
    return from_host(ctx, y, ys);
}
DISCO_FUNC("demo.mlp_partial_into", "TTTT", mlp_partial_into)
