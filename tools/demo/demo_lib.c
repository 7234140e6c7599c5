/* demo_lib.c - the library disco-demo loads into every worker
 * (build/lib/libdisco_demo.so). */
#include "tools/demo/demo_mlp.h"
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
    float *w = t->data;
    for (int64_t i = 0; i < dm; i++)
        for (int64_t j = lo; j < hi; j++) {
            if (layer == 1)
                w[i * (hi - lo) + (j - lo)] = demo_mlp_w1(seed, dm, dff, i, j);
            else
                w[(j - lo) * dm + i] = demo_mlp_w2(seed, dm, dff, j, i);
        }
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}
DISCO_FUNC("demo.mlp_weights", "iiii", mlp_weights)

/* demo.mlp_partial(x, w1, w2): gelu(x w1) w2 for this worker's shards: its
 * partial of y, [batch, d_model] (float32). */
static disco_status_t mlp_partial(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    const DLTensor *x = a[0].v.tensor, *w1 = a[1].v.tensor, *w2 = a[2].v.tensor;
    if (x->ndim != 2 || w1->ndim != 2 || w2->ndim != 2 || x->shape[1] != w1->shape[0] ||
        w1->shape[1] != w2->shape[0] || w2->shape[1] != x->shape[1])
        return disco_ctx_fail(ctx, "mlp_partial: shapes do not chain");
    int64_t b = x->shape[0], dm = x->shape[1], f = w1->shape[1];
    DLTensor *y;
    float *h = disco_ctx_alloc(ctx, (size_t)f * sizeof *h);
    if (h == NULL || disco_ctx_empty(ctx, x->shape, 2, x->dtype, &y) != DISCO_OK)
        return disco_ctx_fail(ctx, "mlp_partial: out of memory");
    const float *xs = x->data, *w1s = w1->data, *w2s = w2->data;
    float *ys = y->data;
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
    *ret = disco_value_tensor(y);
    return DISCO_OK;
}
DISCO_FUNC("demo.mlp_partial", "TTT", mlp_partial)
