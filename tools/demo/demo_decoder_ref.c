/* demo_decoder_ref.c - the one-process reference of the decoder (see
 * demo_decoder_ref.h). */
#include <math.h>
#include <stdlib.h>

#include "disco/status.h"
#include "tools/demo/demo_decoder_ref.h"

struct demo_dec_ref {
    demo_dec_shape_t s;
    /* unsharded, row-major [rows][cols]; per layer at l * (its size) */
    float *emb, *wq, *wk, *wv, *wo, *w1, *w2, *head;
    float *gain_attn, *gain_mlp, *gain_final;
    double *kcache, *vcache; /* [layers][max_seq][d] */
    double *h, *x, *q, *k, *v, *o, *f, *p;
};

/* A matrix of kind for every layer: [layers][rows][cols]. */
static float *gen(const demo_dec_src_t *src, int kind, const demo_dec_shape_t *s, int64_t rows,
                  int64_t cols)
{
    float *m = malloc((size_t)(s->layers * rows * cols) * sizeof *m);
    if (m != NULL)
        for (int64_t l = 0; l < s->layers; l++)
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++)
                    m[(l * rows + i) * cols + j] = demo_dec_get(src, s, kind, l, i, j);
    return m;
}

disco_status_t demo_dec_ref_new(const demo_dec_shape_t *s, const demo_dec_src_t *src,
                                demo_dec_ref_t **ref_out)
{
    if (!demo_dec_shape_ok(s, 1))
        return disco_set_error(DISCO_E_INVAL, "decoder reference: bad shape");
    demo_dec_ref_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return disco_set_error(DISCO_E_NOMEM, "decoder reference");
    int64_t d = s->d_model, V = s->vocab, F = s->d_ff, cache = s->layers * s->max_seq * d;
    m->s = *s;
    m->emb = malloc((size_t)(V * d) * sizeof *m->emb);
    m->head = malloc((size_t)(d * V) * sizeof *m->head);
    m->gain_final = malloc((size_t)d * sizeof *m->gain_final);
    m->gain_attn = gen(src, DEC_ATTN_NORM, s, d, 1);
    m->gain_mlp = gen(src, DEC_MLP_NORM, s, d, 1);
    m->wq = gen(src, DEC_WQ, s, d, d);
    m->wk = gen(src, DEC_WK, s, d, d);
    m->wv = gen(src, DEC_WV, s, d, d);
    m->wo = gen(src, DEC_WO, s, d, d);
    m->w1 = gen(src, DEC_W1, s, d, F);
    m->w2 = gen(src, DEC_W2, s, F, d);
    m->kcache = calloc((size_t)cache, sizeof *m->kcache);
    m->vcache = calloc((size_t)cache, sizeof *m->vcache);
    m->h = malloc((size_t)(6 * d + F + s->max_seq) * sizeof *m->h);
    if (m->emb == NULL || m->head == NULL || m->gain_final == NULL || m->gain_attn == NULL ||
        m->gain_mlp == NULL || m->wq == NULL || m->wk == NULL || m->wv == NULL || m->wo == NULL ||
        m->w1 == NULL || m->w2 == NULL || m->kcache == NULL || m->vcache == NULL || m->h == NULL) {
        demo_dec_ref_free(m);
        return disco_set_error(DISCO_E_NOMEM, "decoder reference");
    }
    m->x = m->h + d, m->q = m->x + d, m->k = m->q + d, m->v = m->k + d, m->o = m->v + d;
    m->f = m->o + d, m->p = m->f + F;
    for (int64_t t = 0; t < V; t++)
        for (int64_t i = 0; i < d; i++)
            m->emb[t * d + i] = demo_dec_get(src, s, DEC_EMB, 0, t, i);
    for (int64_t i = 0; i < d; i++) {
        m->gain_final[i] = demo_dec_get(src, s, DEC_FINAL_NORM, 0, i, 0);
        for (int64_t t = 0; t < V; t++)
            m->head[i * V + t] = demo_dec_get(src, s, DEC_HEAD, 0, i, t);
    }
    *ref_out = m;
    return DISCO_OK;
}

/* out[j] = sum_i x[i] w[i][j], w [rows][cols]. */
static void mv(const double *x, const float *w, double *out, int64_t rows, int64_t cols)
{
    for (int64_t j = 0; j < cols; j++)
        out[j] = 0;
    for (int64_t i = 0; i < rows; i++) /* row by row: w is read in order */
        for (int64_t j = 0; j < cols; j++)
            out[j] += x[i] * w[i * cols + j];
}

static void norm(const double *x, const float *g, double *out, int64_t d)
{
    double ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)d + DEMO_DEC_EPS);
    for (int64_t i = 0; i < d; i++)
        out[i] = x[i] * inv * g[i];
}

/* Rotary positions on the whole vector, head by head. */
static void rotate(double *v, int64_t d, int64_t hd, int64_t pos)
{
    for (int64_t base = 0; base < d; base += hd)
        for (int64_t p = 0; p < hd / 2; p++) {
            double a = demo_dec_rope_angle(pos, p, hd), x0 = v[base + 2 * p],
                   x1 = v[base + 2 * p + 1];
            v[base + 2 * p] = x0 * cos(a) - x1 * sin(a);
            v[base + 2 * p + 1] = x0 * sin(a) + x1 * cos(a);
        }
}

void demo_dec_ref_step(demo_dec_ref_t *m, int64_t tok, int64_t pos, float *logits)
{
    const demo_dec_shape_t *s = &m->s;
    int64_t d = s->d_model, F = s->d_ff, hd = d / s->heads, V = s->vocab;
    for (int64_t i = 0; i < d; i++)
        m->h[i] = m->emb[tok * d + i];
    for (int64_t l = 0; l < s->layers; l++) {
        double *kc = m->kcache + l * s->max_seq * d, *vc = m->vcache + l * s->max_seq * d;
        norm(m->h, m->gain_attn + l * d, m->x, d);
        mv(m->x, m->wq + l * d * d, m->q, d, d);
        mv(m->x, m->wk + l * d * d, kc + pos * d, d, d);
        mv(m->x, m->wv + l * d * d, vc + pos * d, d, d);
        rotate(m->q, d, hd, pos);
        rotate(kc + pos * d, d, hd, pos);
        for (int64_t h = 0; h < s->heads; h++) { /* softmax(q k / sqrt(hd)) v, causal */
            double most = -INFINITY, total = 0;
            for (int64_t t = 0; t <= pos; t++) {
                double dot = 0;
                for (int64_t i = h * hd; i < (h + 1) * hd; i++)
                    dot += m->q[i] * kc[t * d + i];
                m->p[t] = dot / sqrt((double)hd);
                most = fmax(most, m->p[t]);
            }
            for (int64_t t = 0; t <= pos; t++)
                total += m->p[t] = exp(m->p[t] - most);
            for (int64_t i = h * hd; i < (h + 1) * hd; i++) {
                double acc = 0;
                for (int64_t t = 0; t <= pos; t++)
                    acc += m->p[t] / total * vc[t * d + i];
                m->o[i] = acc;
            }
        }
        mv(m->o, m->wo + l * d * d, m->x, d, d);
        for (int64_t i = 0; i < d; i++)
            m->h[i] += m->x[i];
        norm(m->h, m->gain_mlp + l * d, m->x, d);
        mv(m->x, m->w1 + l * d * F, m->f, d, F);
        for (int64_t j = 0; j < F; j++) /* gelu, tanh form, in double */
            m->f[j] = 0.5 * m->f[j] *
                      (1.0 + tanh(0.7978845608028654 * (m->f[j] + 0.044715 * pow(m->f[j], 3))));
        mv(m->f, m->w2 + l * F * d, m->x, F, d);
        for (int64_t i = 0; i < d; i++)
            m->h[i] += m->x[i];
    }
    norm(m->h, m->gain_final, m->x, d);
    for (int64_t t = 0; t < V; t++) {
        double acc = 0;
        for (int64_t i = 0; i < d; i++)
            acc += m->x[i] * m->head[i * V + t];
        logits[t] = (float)acc;
    }
}

void demo_dec_ref_free(demo_dec_ref_t *m)
{
    if (m == NULL)
        return;
    float *fs[] = {m->emb, m->wq,   m->wk,        m->wv,       m->wo,        m->w1,
                   m->w2,  m->head, m->gain_attn, m->gain_mlp, m->gain_final};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        free(fs[i]);
    free(m->kcache);
    free(m->vcache);
    free(m->h);
    free(m);
}
