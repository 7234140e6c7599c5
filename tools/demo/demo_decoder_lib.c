/* demo_decoder_lib.c - the decoder's functions in the library disco-demo
 * loads into every worker (build/lib/libdisco_demo.so, with demo_lib.c).
 *
 * Every function takes the model's shape as a shape value (cfg, see
 * demo_decoder.h) and works on tensors on the CPU (the session's heap) or on
 * a sim or CUDA device: there are no GPU compute kernels (the allreduces are
 * disco's device kernels), so a function copies
 * the parts of its device tensors that it reads to host memory
 * (disco_device_copy, then a stream sync), computes on the CPU and copies
 * what it writes back, synced before it returns. On the CPU it reads and
 * writes the tensors in place.
 *
 * One decode step, per worker, for token tok at position pos:
 *   dec_embed(w, cfg, tok, h)                    h = E[tok]
 *   per layer l:
 *     a = dec_attn(w, cfg, l, pos, h, kv, m)     h += m (the last MLP sum;
 *                                                null at l = 0); a partial
 *     a = disco.allreduce(a, "sum")
 *     m = dec_mlp(w, cfg, l, h, a)               h += a; m partial
 *     m = disco.allreduce(m, "sum")
 *   logits = dec_head(w, cfg, h, m)              h += m; worker 0 only
 * h (the residual stream, [d]) and kv (this worker's KV cache) are made once
 * by dec_state and kept in registers across steps. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disco/comm.h"
#include "disco/device.h"
#include "disco/func.h"
#include "disco/tensor.h"
#include "tools/demo/demo_decoder.h"

static const DLDataType F32 = {kDLFloat, 32, 1};

/* ---- tensors on the CPU or a device, seen as host floats ---- */

/* Whether t is a float32 vector-like tensor with at least n elements. */
static bool holds(const DLTensor *t, int64_t n)
{
    return t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1 &&
           disco_tensor_is_compact(t) && disco_tensor_numel(t) >= n;
}

static float *data_of(const DLTensor *t)
{
    return (float *)(void *)((char *)t->data + t->byte_offset);
}

/* Floats [off, off + count) of t in host memory: t's own on the CPU, else a
 * synced copy in scratch memory. */
static disco_status_t view(disco_ctx_t *ctx, const DLTensor *t, int64_t off, int64_t count,
                           float **out)
{
    if (!holds(t, off + count))
        return disco_ctx_fail(ctx, "decoder: a tensor is not float32 of %lld elements",
                              (long long)(off + count));
    if (t->device.device_type == kDLCPU) {
        *out = data_of(t) + off;
        return DISCO_OK;
    }
    size_t nb = (size_t)count * sizeof(float);
    float *h = disco_ctx_alloc(ctx, nb);
    if (h == NULL)
        return disco_ctx_fail(ctx, "decoder: out of memory for a host copy of %zu bytes", nb);
    /* NULL stream: the source device's default stream, whose sync completes
     * the copy (the sim device's too) */
    if (disco_device_copy(h, (DLDevice){kDLCPU, 0}, data_of(t) + off, t->device, nb, NULL) !=
            DISCO_OK ||
        disco_device_stream_sync(t->device, NULL) != DISCO_OK)
        return disco_ctx_fail(ctx, "decoder: copy from device %d:%d: %s",
                              (int)t->device.device_type, t->device.device_id, disco_last_error());
    *out = h;
    return DISCO_OK;
}

/* Writes count host floats src to t at off (nothing to do when src is
 * already there), synced before it returns. */
static disco_status_t put(disco_ctx_t *ctx, DLTensor *t, int64_t off, const float *src,
                          int64_t count)
{
    float *dst = data_of(t) + off;
    size_t nb = (size_t)count * sizeof(float);
    if (!holds(t, off + count))
        return disco_ctx_fail(ctx, "decoder: a tensor is not float32 of %lld elements",
                              (long long)(off + count));
    if (t->device.device_type == kDLCPU) {
        if (dst != src)
            memmove(dst, src, nb);
        return DISCO_OK;
    }
    if (disco_device_copy(dst, t->device, src, (DLDevice){kDLCPU, 0}, nb, NULL) != DISCO_OK ||
        disco_device_stream_sync(t->device, NULL) != DISCO_OK)
        return disco_ctx_fail(ctx, "decoder: copy to device %d:%d: %s", (int)t->device.device_type,
                              t->device.device_id, disco_last_error());
    return DISCO_OK;
}

/* A new float32 tensor of shape on device type dev, and host memory to
 * build it in (its own data on the CPU, scratch otherwise: put() it). */
static disco_status_t fresh(disco_ctx_t *ctx, const int64_t *shape, int ndim, DLDeviceType dev,
                            DLTensor **t_out, float **host_out)
{
    DLTensor *t;
    if (disco_ctx_empty_device(ctx, shape, ndim, F32, dev, &t) != DISCO_OK)
        return disco_ctx_fail(ctx, "decoder: %s", disco_last_error());
    float *h = dev == kDLCPU ? data_of(t) : disco_ctx_alloc(ctx, disco_tensor_nbytes(t));
    if (h == NULL)
        return disco_ctx_fail(ctx, "decoder: out of memory");
    *t_out = t;
    *host_out = h;
    return DISCO_OK;
}

/* The shape value cfg as a model, checked for this session's workers. */
static disco_status_t shape_of(disco_ctx_t *ctx, const disco_value_t *cfg, demo_dec_shape_t *s)
{
    if (cfg->len != DEMO_DEC_CFG_LEN)
        return disco_ctx_fail(ctx, "decoder: cfg has %u dims, not %d", cfg->len, DEMO_DEC_CFG_LEN);
    const int64_t *v = cfg->v.shape;
    *s = (demo_dec_shape_t){v[0], v[1], v[2], v[3], v[4], v[5]};
    if (!demo_dec_shape_ok(s, disco_ctx_world_size(ctx)))
        return disco_ctx_fail(ctx, "decoder: no such model for %d workers",
                              disco_ctx_world_size(ctx));
    return DISCO_OK;
}

/* ---- the CPU kernels ---- */

/* out[cols] = x[rows] W[rows, cols] (row-major). restrict: out overlaps
 * neither input, which lets the compiler vectorize the inner loop. */
static void matvec(const float *restrict x, const float *restrict w, float *restrict out,
                   int64_t rows, int64_t cols)
{
    for (int64_t j = 0; j < cols; j++)
        out[j] = 0;
    for (int64_t i = 0; i < rows; i++) {
        float xi = x[i];
        const float *row = w + i * cols;
        for (int64_t j = 0; j < cols; j++)
            out[j] += xi * row[j];
    }
}

static void rmsnorm(const float *x, const float *gain, float *out, int64_t d)
{
    float ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)d + DEMO_DEC_EPS);
    for (int64_t i = 0; i < d; i++)
        out[i] = x[i] * inv * gain[i];
}

/* Rotates each pair (2p, 2p + 1) of each of nh heads of v by its angle. */
static void rope(float *v, int64_t nh, int64_t hd, int64_t pos)
{
    for (int64_t p = 0; p < hd / 2; p++) {
        double a = demo_dec_rope_angle(pos, p, hd);
        float c = (float)cos(a), s = (float)sin(a);
        for (int64_t h = 0; h < nh; h++) {
            float *x = v + h * hd + 2 * p, x0 = x[0], x1 = x[1];
            x[0] = x0 * c - x1 * s;
            x[1] = x0 * s + x1 * c;
        }
    }
}

/* o[nh * hd] = causal attention of q over K, V [t <= pos][ld] for nh heads
 * (head h at column h * hd); p holds pos + 1 floats. */
static void attend(const float *q, const float *k, const float *v, float *o, float *p, int64_t nh,
                   int64_t hd, int64_t ld, int64_t pos)
{
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t h = 0; h < nh; h++) {
        float most = -INFINITY, sum = 0;
        for (int64_t t = 0; t <= pos; t++) {
            float dot = 0;
            for (int64_t i = 0; i < hd; i++)
                dot += q[h * hd + i] * k[t * ld + h * hd + i];
            p[t] = dot * scale;
            most = fmaxf(most, p[t]);
        }
        for (int64_t t = 0; t <= pos; t++)
            sum += p[t] = expf(p[t] - most);
        for (int64_t i = 0; i < hd; i++)
            o[h * hd + i] = 0;
        for (int64_t t = 0; t <= pos; t++)
            for (int64_t i = 0; i < hd; i++)
                o[h * hd + i] += p[t] / sum * v[t * ld + h * hd + i];
    }
}

/* ---- the functions ---- */

/* The unsharded model in the file at path (native float32, the layout of
 * demo_dec_layout(s, 0, 1)), mapped read-only into *full_out (*len_out
 * bytes: munmap it). */
static disco_status_t map_file(disco_ctx_t *ctx, const char *path, const demo_dec_shape_t *s,
                               const float **full_out, size_t *len_out)
{
    size_t want = (size_t)demo_dec_layout(s, 0, 1).total * sizeof(float);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size != want) {
        if (fd >= 0)
            close(fd);
        return disco_ctx_fail(ctx, "dec_weights: %s: %s", path,
                              fd < 0 ? strerror(errno) : "not the model's size");
    }
    void *p = mmap(NULL, want, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return disco_ctx_fail(ctx, "dec_weights: mmap %s: %s", path, strerror(errno));
    *full_out = p;
    *len_out = want;
    return DISCO_OK;
}

/* demo.dec_weights(cfg, seed, device_type, path): this worker's weight
 * shard, a float32 vector in the layout of demo_dec_layout, on device_type:
 * from the seed's generator, or read from the file at path unless it is "". */
static disco_status_t dec_weights(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[0], &s);
    if (st != DISCO_OK)
        return st;
    int r = disco_ctx_worker_id(ctx);
    demo_dec_layout_t L = demo_dec_layout(&s, r, disco_ctx_world_size(ctx));
    demo_dec_src_t src = {.seed = (uint64_t)a[1].v.i, .full = NULL};
    size_t len = 0;
    if (a[3].v.str[0] != '\0' && (st = map_file(ctx, a[3].v.str, &s, &src.full, &len)) != DISCO_OK)
        return st;
    DLTensor *t;
    float *h;
    if ((st = fresh(ctx, &L.total, 1, (DLDeviceType)a[2].v.i, &t, &h)) == DISCO_OK) {
        demo_dec_fill(h, &s, &L, &src, r);
        *ret = disco_value_tensor(t);
        st = put(ctx, t, 0, h, L.total);
    }
    if (src.full != NULL)
        munmap((void *)src.full, len);
    return st;
}
DISCO_FUNC("demo.dec_weights", "Siis", dec_weights)

/* demo.dec_state(cfg, what, device_type): zeros on device_type: the
 * residual stream [d] (what 0) or this worker's KV cache (what 1:
 * [layers, 2 (K, V), max_seq, its heads * head_dim]). */
static disco_status_t dec_state(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[0], &s);
    if (st != DISCO_OK)
        return st;
    demo_dec_layout_t L = demo_dec_layout(&s, disco_ctx_worker_id(ctx), disco_ctx_world_size(ctx));
    int64_t res[1] = {s.d_model}, kv[4] = {s.layers, 2, s.max_seq, L.dl};
    DLTensor *t;
    float *h;
    if ((st = fresh(ctx, a[1].v.i == 0 ? res : kv, a[1].v.i == 0 ? 1 : 4, (DLDeviceType)a[2].v.i,
                    &t, &h)) != DISCO_OK)
        return st;
    int64_t n = disco_tensor_numel(t);
    memset(h, 0, (size_t)n * sizeof *h);
    *ret = disco_value_tensor(t);
    return put(ctx, t, 0, h, n);
}
DISCO_FUNC("demo.dec_state", "Sii", dec_state)

/* demo.dec_embed(w, cfg, token, h): h = E[token]. */
static disco_status_t dec_embed(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                                disco_value_t *ret)
{
    (void)nargs, (void)ret;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[1], &s);
    int64_t tok = a[2].v.i, d = s.d_model;
    float *row;
    if (st != DISCO_OK)
        return st;
    if (tok < 0 || tok >= s.vocab)
        return disco_ctx_fail(ctx, "dec_embed: token %lld outside 0..%lld", (long long)tok,
                              (long long)s.vocab - 1);
    if ((st = view(ctx, a[0].v.tensor, tok * d, d, &row)) != DISCO_OK)
        return st;
    return put(ctx, a[3].v.tensor, 0, row, d);
}
DISCO_FUNC("demo.dec_embed", "TSiT", dec_embed)

/* h += add (when add is a tensor; null adds nothing); *h_out: h on the host
 * (write it back with put). */
static disco_status_t residual(disco_ctx_t *ctx, DLTensor *h, const disco_value_t *add, int64_t d,
                               float **h_out)
{
    float *hs, *as;
    disco_status_t st = view(ctx, h, 0, d, &hs);
    if (st != DISCO_OK || add->type != DISCO_T_TENSOR) {
        *h_out = hs;
        return st;
    }
    if ((st = view(ctx, add->v.tensor, 0, d, &as)) != DISCO_OK)
        return st;
    for (int64_t i = 0; i < d; i++)
        hs[i] += as[i];
    *h_out = hs;
    return put(ctx, h, 0, hs, d);
}

/* This worker's heads' attention of rmsnorm(hs) (hs: the residual stream
 * on the host) at pos for layer l, their K and V rows at pos written into
 * kv, through their rows of Wo: its partial of the attention update, into
 * ps (host, d floats). */
static disco_status_t attn_partial(disco_ctx_t *ctx, const demo_dec_shape_t *s,
                                   const demo_dec_layout_t *L, const DLTensor *w, DLTensor *kv,
                                   int64_t l, int64_t pos, const float *hs, float *ps)
{
    int64_t d = s->d_model, hd = d / s->heads, dl = L->dl;
    int64_t kb = (l * 2) * s->max_seq * dl, vb = (l * 2 + 1) * s->max_seq * dl;
    float *lw, *ks, *vs, *x = disco_ctx_alloc(ctx, (size_t)(d + 4 * dl + pos + 1) * sizeof *x);
    if (x == NULL)
        return disco_ctx_fail(ctx, "dec_attn: out of memory");
    float *q = x + d, *k = q + dl, *v = k + dl, *o = v + dl, *p = o + dl;
    disco_status_t st = view(ctx, w, L->layer0 + l * L->layer_size, L->layer_size, &lw);
    if (st != DISCO_OK)
        return st;
    rmsnorm(hs, lw + L->off[DEC_ATTN_NORM], x, d);
    matvec(x, lw + L->off[DEC_WQ], q, d, dl);
    matvec(x, lw + L->off[DEC_WK], k, d, dl);
    matvec(x, lw + L->off[DEC_WV], v, d, dl);
    rope(q, dl / hd, hd, pos);
    rope(k, dl / hd, hd, pos);
    if ((st = put(ctx, kv, kb + pos * dl, k, dl)) != DISCO_OK ||
        (st = put(ctx, kv, vb + pos * dl, v, dl)) != DISCO_OK ||
        (st = view(ctx, kv, kb, (pos + 1) * dl, &ks)) != DISCO_OK ||
        (st = view(ctx, kv, vb, (pos + 1) * dl, &vs)) != DISCO_OK)
        return st;
    attend(q, ks, vs, o, p, dl / hd, hd, dl, pos);
    matvec(o, lw + L->off[DEC_WO], ps, dl, d);
    return DISCO_OK;
}

/* gelu(rmsnorm(hs) W1) W2 over this worker's columns of layer l: its
 * partial of the MLP update, into ps (host, d floats). */
static disco_status_t mlp_partial(disco_ctx_t *ctx, const demo_dec_shape_t *s,
                                  const demo_dec_layout_t *L, const DLTensor *w, int64_t l,
                                  const float *hs, float *ps)
{
    int64_t d = s->d_model;
    float *lw, *x = disco_ctx_alloc(ctx, (size_t)(d + L->fl) * sizeof *x);
    if (x == NULL)
        return disco_ctx_fail(ctx, "dec_mlp: out of memory");
    float *f = x + d;
    disco_status_t st = view(ctx, w, L->layer0 + l * L->layer_size, L->layer_size, &lw);
    if (st != DISCO_OK)
        return st;
    rmsnorm(hs, lw + L->off[DEC_MLP_NORM], x, d);
    matvec(x, lw + L->off[DEC_W1], f, d, L->fl);
    for (int64_t j = 0; j < L->fl; j++)
        f[j] = demo_mlp_gelu(f[j]);
    matvec(f, lw + L->off[DEC_W2], ps, L->fl, d);
    return DISCO_OK;
}

/* demo.dec_attn(w, cfg, layer, pos, h, kv, m): h += m (m: the previous
 * layer's MLP sum, or null); then this worker's partial of the attention
 * update (attn_partial), [d]. */
static disco_status_t dec_attn(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                               disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[1], &s);
    if (st != DISCO_OK)
        return st;
    int64_t l = a[2].v.i, pos = a[3].v.i, d = s.d_model;
    DLTensor *h = a[4].v.tensor, *out;
    demo_dec_layout_t L = demo_dec_layout(&s, disco_ctx_worker_id(ctx), disco_ctx_world_size(ctx));
    if (l < 0 || l >= s.layers || pos < 0 || pos >= s.max_seq)
        return disco_ctx_fail(ctx, "dec_attn: layer %lld or position %lld out of range",
                              (long long)l, (long long)pos);
    float *hs, *ps;
    if ((st = residual(ctx, h, &a[6], d, &hs)) != DISCO_OK ||
        (st = fresh(ctx, &d, 1, h->device.device_type, &out, &ps)) != DISCO_OK ||
        (st = attn_partial(ctx, &s, &L, a[0].v.tensor, a[5].v.tensor, l, pos, hs, ps)) != DISCO_OK)
        return st;
    *ret = disco_value_tensor(out);
    return put(ctx, out, 0, ps, d);
}
DISCO_FUNC("demo.dec_attn", "TSiiTT?", dec_attn)

/* demo.dec_mlp(w, cfg, layer, h, a): h += a (the attention sum); then this
 * worker's partial of the MLP update (mlp_partial), [d]. */
static disco_status_t dec_mlp(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                              disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[1], &s);
    if (st != DISCO_OK)
        return st;
    int64_t l = a[2].v.i, d = s.d_model;
    DLTensor *h = a[3].v.tensor, *out;
    demo_dec_layout_t L = demo_dec_layout(&s, disco_ctx_worker_id(ctx), disco_ctx_world_size(ctx));
    if (l < 0 || l >= s.layers)
        return disco_ctx_fail(ctx, "dec_mlp: layer %lld out of range", (long long)l);
    float *hs, *ps;
    if ((st = residual(ctx, h, &a[4], d, &hs)) != DISCO_OK ||
        (st = fresh(ctx, &d, 1, h->device.device_type, &out, &ps)) != DISCO_OK ||
        (st = mlp_partial(ctx, &s, &L, a[0].v.tensor, l, hs, ps)) != DISCO_OK)
        return st;
    *ret = disco_value_tensor(out);
    return put(ctx, out, 0, ps, d);
}
DISCO_FUNC("demo.dec_mlp", "TSiTT", dec_mlp)

/* The logits rmsnorm(hs) Wh (hs: the residual stream on the host) into a
 * new [vocab] tensor on dev, *out_t (worker 0 only: it holds Wh). */
static disco_status_t head_logits(disco_ctx_t *ctx, const demo_dec_shape_t *s, const DLTensor *w,
                                  const float *hs, DLDeviceType dev, DLTensor **out_t)
{
    int64_t d = s->d_model, V = s->vocab;
    demo_dec_layout_t L = demo_dec_layout(s, 0, disco_ctx_world_size(ctx));
    float *tail, *ls, *x = disco_ctx_alloc(ctx, (size_t)d * sizeof *x);
    DLTensor *out;
    if (x == NULL)
        return disco_ctx_fail(ctx, "dec_head: out of memory");
    disco_status_t st;
    if ((st = view(ctx, w, L.final_norm, L.total - L.final_norm, &tail)) != DISCO_OK ||
        (st = fresh(ctx, &V, 1, dev, &out, &ls)) != DISCO_OK)
        return st;
    rmsnorm(hs, tail, x, d);
    matvec(x, tail + (L.head - L.final_norm), ls, d, V);
    *out_t = out;
    return put(ctx, out, 0, ls, V);
}

/* demo.dec_head(w, cfg, h, m): h += m (the last MLP sum); on worker 0 the
 * logits rmsnorm(h) Wh, [vocab]; null on the others (they hold no Wh). */
static disco_status_t dec_head(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                               disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[1], &s);
    if (st != DISCO_OK)
        return st;
    DLTensor *h = a[2].v.tensor, *out;
    float *hs;
    if ((st = residual(ctx, h, &a[3], s.d_model, &hs)) != DISCO_OK || disco_ctx_worker_id(ctx) != 0)
        return st;
    if ((st = head_logits(ctx, &s, a[0].v.tensor, hs, h->device.device_type, &out)) == DISCO_OK)
        *ret = disco_value_tensor(out);
    return st;
}
DISCO_FUNC("demo.dec_head", "TSTT", dec_head)

/* part (d floats on its device; ps its host view, the same memory on the
 * CPU) += nothing: the members' partials summed in place by an in-worker
 * allreduce, then added into the residual stream hs (host). */
static disco_status_t reduce_add(disco_ctx_t *ctx, DLTensor *part, const float *ps, float *hs,
                                 int64_t d)
{
    const float *sum = ps;
    float *got;
    disco_status_t st = put(ctx, part, 0, ps, d);
    if (st == DISCO_OK)
        st = disco_ctx_allreduce(ctx, part, part, DISCO_REDUCE_SUM, false);
    if (st == DISCO_OK && part->device.device_type != kDLCPU &&
        (st = view(ctx, part, 0, d, &got)) == DISCO_OK)
        sum = got;
    if (st != DISCO_OK)
        return st; /* after a collective's failure the members no longer agree: return it */
    for (int64_t i = 0; i < d; i++)
        hs[i] += sum[i];
    return DISCO_OK;
}

/* demo.dec_step(w, cfg, token, pos, h, kv): one whole decode step in one
 * command (issue 34): h = E[token]; per layer, h += the allreduce (sum, in
 * the worker: disco_ctx_allreduce) of the attention partials, then of the
 * MLP partials (Megatron, as the controller-driven form of the commands
 * above); then on worker 0 the logits, [vocab]; null on the others. Every
 * worker runs it (call_sync_all), the same 2 * layers collectives in the
 * same order. h keeps the step's residual stream, kv this worker's KV
 * cache, as the controller-driven form leaves them. */
static disco_status_t dec_step(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                               disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[1], &s);
    if (st != DISCO_OK)
        return st;
    const DLTensor *w = a[0].v.tensor;
    int64_t tok = a[2].v.i, pos = a[3].v.i, d = s.d_model;
    DLTensor *h = a[4].v.tensor, *kv = a[5].v.tensor, *part, *out;
    DLDeviceType dev = h->device.device_type;
    demo_dec_layout_t L = demo_dec_layout(&s, disco_ctx_worker_id(ctx), disco_ctx_world_size(ctx));
    if (tok < 0 || tok >= s.vocab || pos < 0 || pos >= s.max_seq)
        return disco_ctx_fail(ctx, "dec_step: token %lld or position %lld out of range",
                              (long long)tok, (long long)pos);
    float *row, *hs = disco_ctx_alloc(ctx, (size_t)d * sizeof *hs), *ps;
    if (hs == NULL)
        return disco_ctx_fail(ctx, "dec_step: out of memory");
    if ((st = view(ctx, w, tok * d, d, &row)) != DISCO_OK ||
        (st = fresh(ctx, &d, 1, dev, &part, &ps)) != DISCO_OK)
        return st;
    memcpy(hs, row, (size_t)d * sizeof *hs);
    for (int64_t l = 0; l < s.layers; l++) {
        if ((st = attn_partial(ctx, &s, &L, w, kv, l, pos, hs, ps)) != DISCO_OK ||
            (st = reduce_add(ctx, part, ps, hs, d)) != DISCO_OK ||
            (st = mlp_partial(ctx, &s, &L, w, l, hs, ps)) != DISCO_OK ||
            (st = reduce_add(ctx, part, ps, hs, d)) != DISCO_OK)
            return st;
    }
    if ((st = put(ctx, h, 0, hs, d)) != DISCO_OK || disco_ctx_worker_id(ctx) != 0)
        return st;
    if ((st = head_logits(ctx, &s, w, hs, dev, &out)) == DISCO_OK)
        *ret = disco_value_tensor(out);
    return st;
}
DISCO_FUNC("demo.dec_step", "TSiiTT", dec_step)
