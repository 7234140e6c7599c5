/* demo_decoder.h - the decoder of disco-demo: the model's shape, the weight
 * generator and the layout of each worker's weight shard, shared by the
 * workers' library (demo_decoder_lib.c) and the controller's one-process
 * reference (demo_decoder.c), so every process derives the same weights from
 * one seed.
 *
 * The model: a decoder-only transformer. A token id picks a row of the
 * embedding E [vocab, d] as the residual stream h [d]. Each layer:
 *   h += Wo . attention(rope(rmsnorm(h) Wq), rope(rmsnorm(h) Wk), rmsnorm(h) Wv)
 *   h += W2 . gelu(rmsnorm(h) W1)
 * (causal attention over the KV cache of every earlier position; rotary
 * positions on q and k, base 10000, pairs (2i, 2i+1) of each head), then
 * logits = rmsnorm(h) Wh, Wh [d, vocab]. RMSNorm: x / sqrt(mean(x^2) + eps)
 * times a learned gain.
 *
 * Sharding over N workers (Megatron style): worker r holds the heads
 * [r*H/N, (r+1)*H/N) - their columns of Wq, Wk and Wv, the same rows of Wo
 * and its own KV cache for them - and the columns [r*F/N, (r+1)*F/N) of W1
 * with the same rows of W2. Each worker's attention and MLP give a partial
 * of the update; an allreduce (sum) after each makes the whole update, and
 * every worker adds it to its copy of h (the residual stream is replicated).
 * The LM head: worker 0 only (it alone holds Wh). h is the same on every
 * worker, and only worker 0's logits are read, so no collective is needed;
 * the others' copies of the head would compute the same logits for nothing. */
#ifndef DISCO_TOOLS_DEMO_DECODER_H
#define DISCO_TOOLS_DEMO_DECODER_H

#include <math.h>
#include <stdint.h>

#include "tools/demo/demo_mlp.h"

/* The model's shape; passed to the workers' functions as a shape value of
 * DEMO_DEC_CFG_LEN dims, in this order. */
typedef struct demo_dec_shape {
    int64_t vocab, d_model, layers, heads, d_ff, max_seq;
} demo_dec_shape_t;
#define DEMO_DEC_CFG_LEN   6
#define DEMO_DEC_EPS       1e-5f
#define DEMO_DEC_ROPE_BASE 10000.0

/* Tensor ids of the generator (demo_mlp_value's tensor argument). */
enum { DEC_EMB = 100, DEC_HEAD = 101, DEC_FINAL_NORM = 102 };
enum { DEC_ATTN_NORM, DEC_WQ, DEC_WK, DEC_WV, DEC_WO, DEC_MLP_NORM, DEC_W1, DEC_W2, DEC_KINDS };

/* Element (i, j) of the unsharded matrix kind of layer (a norm gain: j = 0,
 * i its element) with cols columns, scaled so activations stay of order 1:
 * a matrix by 1/sqrt(its rows), a gain 1 + 0.1 u. */
static inline float demo_dec_w(uint64_t seed, int kind, int64_t layer, int64_t i, int64_t j,
                               int64_t rows, int64_t cols)
{
    uint64_t tensor = (uint64_t)(16 + 16 * layer + kind), idx = (uint64_t)(i * cols + j);
    if (kind == DEC_ATTN_NORM || kind == DEC_MLP_NORM)
        return 1.0f + 0.1f * demo_mlp_value(seed, tensor, idx);
    return demo_mlp_value(seed, tensor, idx) / sqrtf((float)rows);
}

/* E[t][i], Wh[i][t] and the final gain g[i]. */
static inline float demo_dec_emb(uint64_t seed, int64_t d, int64_t t, int64_t i)
{
    return demo_mlp_value(seed, DEC_EMB, (uint64_t)(t * d + i));
}

static inline float demo_dec_head(uint64_t seed, int64_t d, int64_t vocab, int64_t i, int64_t t)
{
    return demo_mlp_value(seed, DEC_HEAD, (uint64_t)(i * vocab + t)) / sqrtf((float)d);
}

static inline float demo_dec_final_gain(uint64_t seed, int64_t i)
{
    return 1.0f + 0.1f * demo_mlp_value(seed, DEC_FINAL_NORM, (uint64_t)i);
}

/* The rotary angle of pair p (of head_dim / 2) at position pos. */
static inline double demo_dec_rope_angle(int64_t pos, int64_t p, int64_t head_dim)
{
    return (double)pos * pow(DEMO_DEC_ROPE_BASE, -2.0 * (double)p / (double)head_dim);
}

/* Worker r of n's share and the offsets (in floats) of its weight shard:
 * E, then per layer (at layer0 + l * layer_size) attn gain, Wq, Wk, Wv
 * [d, dl] each (its heads' columns), Wo [dl, d] (their rows), mlp gain,
 * W1 [d, fl] (its columns), W2 [fl, d] (their rows); then the final gain
 * and, on worker 0 only, Wh [d, vocab]. */
typedef struct demo_dec_layout {
    int64_t head_lo, head_hi, dl; /* its heads; dl = its heads * head_dim */
    int64_t ff_lo, ff_hi, fl;     /* its MLP columns; fl = ff_hi - ff_lo */
    int64_t layer0, layer_size, off[DEC_KINDS], final_norm, head, total;
} demo_dec_layout_t;

static inline demo_dec_layout_t demo_dec_layout(const demo_dec_shape_t *s, int r, int n)
{
    demo_dec_layout_t L;
    int64_t d = s->d_model, hd = s->d_model / s->heads;
    demo_mlp_share(s->heads, r, n, &L.head_lo, &L.head_hi);
    demo_mlp_share(s->d_ff, r, n, &L.ff_lo, &L.ff_hi);
    L.dl = (L.head_hi - L.head_lo) * hd;
    L.fl = L.ff_hi - L.ff_lo;
    int64_t sizes[DEC_KINDS] = {d, d * L.dl, d * L.dl, d * L.dl, L.dl * d, d, d * L.fl, L.fl * d};
    L.layer_size = 0;
    for (int k = 0; k < DEC_KINDS; k++) {
        L.off[k] = L.layer_size;
        L.layer_size += sizes[k];
    }
    L.layer0 = s->vocab * d;
    L.final_norm = L.layer0 + s->layers * L.layer_size;
    L.head = L.final_norm + d;
    L.total = L.head + (r == 0 ? d * s->vocab : 0);
    return L;
}

/* Where weights come from: the seed's generator (full NULL), or an
 * unsharded model in memory (a weights file: native float32 in the layout
 * of demo_dec_layout(s, 0, 1), worker 0 of 1 holding everything). */
typedef struct demo_dec_src {
    uint64_t seed;
    const float *full;
} demo_dec_src_t;

/* Element (i, j) of the unsharded tensor kind (of layer): a DEC_KINDS
 * matrix as demo_dec_w, or DEC_EMB (t, i), DEC_HEAD (i, t),
 * DEC_FINAL_NORM (i, 0). */
static inline float demo_dec_get(const demo_dec_src_t *src, const demo_dec_shape_t *s, int kind,
                                 int64_t layer, int64_t i, int64_t j)
{
    int64_t d = s->d_model, F = s->d_ff, V = s->vocab;
    int64_t rows = kind == DEC_W2 ? F : d, cols = kind == DEC_W1 ? F : d;
    if (kind == DEC_ATTN_NORM || kind == DEC_MLP_NORM || kind == DEC_FINAL_NORM)
        cols = 1;
    if (src->full == NULL) {
        if (kind == DEC_EMB)
            return demo_dec_emb(src->seed, d, i, j);
        if (kind == DEC_HEAD)
            return demo_dec_head(src->seed, d, V, i, j);
        if (kind == DEC_FINAL_NORM)
            return demo_dec_final_gain(src->seed, i);
        return demo_dec_w(src->seed, kind, layer, i, j, rows, cols);
    }
    demo_dec_layout_t L = demo_dec_layout(s, 0, 1);
    if (kind == DEC_EMB)
        return src->full[i * d + j];
    if (kind == DEC_HEAD)
        return src->full[L.head + i * V + j];
    if (kind == DEC_FINAL_NORM)
        return src->full[L.final_norm + i];
    return src->full[L.layer0 + layer * L.layer_size + L.off[kind] + i * cols + j];
}

/* Fills w (host, L->total floats) with worker r's shard of layout L. */
static inline void demo_dec_fill(float *w, const demo_dec_shape_t *s, const demo_dec_layout_t *L,
                                 const demo_dec_src_t *src, int r)
{
    int64_t d = s->d_model, hd = d / s->heads, V = s->vocab, q0 = L->head_lo * hd;
    for (int64_t t = 0; t < V; t++)
        for (int64_t i = 0; i < d; i++)
            w[t * d + i] = demo_dec_get(src, s, DEC_EMB, 0, t, i);
    for (int64_t l = 0; l < s->layers; l++) {
        float *b = w + L->layer0 + l * L->layer_size;
        const int64_t *o = L->off;
        for (int64_t i = 0; i < d; i++) {
            b[o[DEC_ATTN_NORM] + i] = demo_dec_get(src, s, DEC_ATTN_NORM, l, i, 0);
            b[o[DEC_MLP_NORM] + i] = demo_dec_get(src, s, DEC_MLP_NORM, l, i, 0);
            for (int64_t j = 0; j < L->dl; j++) {
                b[o[DEC_WQ] + i * L->dl + j] = demo_dec_get(src, s, DEC_WQ, l, i, q0 + j);
                b[o[DEC_WK] + i * L->dl + j] = demo_dec_get(src, s, DEC_WK, l, i, q0 + j);
                b[o[DEC_WV] + i * L->dl + j] = demo_dec_get(src, s, DEC_WV, l, i, q0 + j);
                b[o[DEC_WO] + j * d + i] = demo_dec_get(src, s, DEC_WO, l, q0 + j, i);
            }
            for (int64_t j = 0; j < L->fl; j++) {
                b[o[DEC_W1] + i * L->fl + j] = demo_dec_get(src, s, DEC_W1, l, i, L->ff_lo + j);
                b[o[DEC_W2] + j * d + i] = demo_dec_get(src, s, DEC_W2, l, L->ff_lo + j, i);
            }
        }
    }
    for (int64_t i = 0; i < d; i++)
        w[L->final_norm + i] = demo_dec_get(src, s, DEC_FINAL_NORM, 0, i, 0);
    if (r == 0)
        for (int64_t i = 0; i < d; i++)
            for (int64_t t = 0; t < V; t++)
                w[L->head + i * V + t] = demo_dec_get(src, s, DEC_HEAD, 0, i, t);
}

/* Whether s is a model the demo runs with n workers: every size positive,
 * d_model an even multiple of heads (rotary pairs), at least one head and
 * one MLP column per worker. */
static inline int demo_dec_shape_ok(const demo_dec_shape_t *s, int n)
{
    return s->vocab > 0 && s->d_model > 0 && s->layers > 0 && s->heads >= n && s->d_ff >= n &&
           s->max_seq > 0 && s->d_model % s->heads == 0 && (s->d_model / s->heads) % 2 == 0;
}

#endif
