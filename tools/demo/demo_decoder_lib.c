/* demo_decoder_lib.c - the decoder's functions in the library disco-demo
 * loads into every worker (build/lib/libdisco_demo.so, with demo_lib.c and
 * demo_dec_kernels.c).
 *
 * Every function takes the model's shape as a shape value (cfg, see
 * demo_decoder.h) and works on tensors on the CPU (the session's heap) or on
 * a sim or CUDA device.
 *
 * The one-command form (issue 34): a decode step is one call on every
 * worker, demo.dec_step(w, cfg, tok, pos, h, kv), which runs every layer
 * and reduces inside with disco_ctx_allreduce; its model work runs where
 * the tensors are (demo_dec_kernels.h: CUDA kernels, sim's host
 * implementations, the CPU in place), so on a device nothing leaves it
 * within a step.
 *
 * The controller-driven form (--controller-driven, and the comparison): a
 * command per function call and per allreduce. Its functions copy the parts
 * of device tensors they read to host memory (disco_device_copy, then a
 * stream sync), compute on the CPU and copy what they write back, synced
 * before they return; on the CPU they work in place:
 *   dec_embed(w, cfg, tok, h)                    h = E[tok]
 *   per layer l:
 *     a = dec_attn(w, cfg, l, pos, h, kv, m)     h += m (the last MLP sum;
 *                                                null at l = 0); a partial
 *     a = disco.allreduce(a, "sum")
 *     m = dec_mlp(w, cfg, l, h, a)               h += a; m partial
 *     m = disco.allreduce(m, "sum")
 *   logits = dec_head(w, cfg, h, m)              h += m; worker 0 only
 * h (the residual stream, [d]) and kv (this worker's KV cache) are made once
 * by dec_state and kept in registers across steps, for both forms. */
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
#include "tools/demo/demo_dec_kernels.h"
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
    demo_dec_rmsnorm(hs, lw + L->off[DEC_ATTN_NORM], x, d);
    demo_dec_matvec(x, lw + L->off[DEC_WQ], q, d, dl);
    demo_dec_matvec(x, lw + L->off[DEC_WK], k, d, dl);
    demo_dec_matvec(x, lw + L->off[DEC_WV], v, d, dl);
    demo_dec_rope(q, dl / hd, hd, pos);
    demo_dec_rope(k, dl / hd, hd, pos);
    if ((st = put(ctx, kv, kb + pos * dl, k, dl)) != DISCO_OK ||
        (st = put(ctx, kv, vb + pos * dl, v, dl)) != DISCO_OK ||
        (st = view(ctx, kv, kb, (pos + 1) * dl, &ks)) != DISCO_OK ||
        (st = view(ctx, kv, vb, (pos + 1) * dl, &vs)) != DISCO_OK)
        return st;
    demo_dec_attend(q, ks, vs, o, p, dl / hd, hd, dl, pos);
    demo_dec_matvec(o, lw + L->off[DEC_WO], ps, dl, d);
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
    demo_dec_rmsnorm(hs, lw + L->off[DEC_MLP_NORM], x, d);
    demo_dec_matvec(x, lw + L->off[DEC_W1], f, d, L->fl);
    for (int64_t j = 0; j < L->fl; j++)
        f[j] = demo_mlp_gelu(f[j]);
    demo_dec_matvec(f, lw + L->off[DEC_W2], ps, L->fl, d);
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
    demo_dec_rmsnorm(hs, tail, x, d);
    demo_dec_matvec(x, tail + (L.head - L.final_norm), ls, d, V);
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
    DLTensor *h = a[2].v.tensor, *out = NULL;
    float *hs;
    if ((st = residual(ctx, h, &a[3], s.d_model, &hs)) != DISCO_OK || disco_ctx_worker_id(ctx) != 0)
        return st;
    if ((st = head_logits(ctx, &s, a[0].v.tensor, hs, h->device.device_type, &out)) == DISCO_OK)
        *ret = disco_value_tensor(out);
    return st;
}
DISCO_FUNC("demo.dec_head", "TSTT", dec_head)

/* The one-command step's buffers on the step's device: the normed
 * stream x [d], q, k, v, o [dl], the MLP's f [fl], the partial part [d] (a
 * tensor: the allreduce's) and, on worker 0, the logits [vocab]. */
struct step_bufs {
    float *x, *q, *k, *v, *o, *f, *p;
    DLTensor *part, *logits;
};

static disco_status_t step_bufs(disco_ctx_t *ctx, const demo_dec_shape_t *s,
                                const demo_dec_layout_t *L, DLDeviceType dev, struct step_bufs *b)
{
    int64_t n = s->d_model + 4 * L->dl + L->fl, d = s->d_model, V = s->vocab;
    DLTensor *t;
    float *unused;
    disco_status_t st = fresh(ctx, &n, 1, dev, &t, &unused);
    if (st != DISCO_OK || (st = fresh(ctx, &d, 1, dev, &b->part, &unused)) != DISCO_OK)
        return st;
    b->x = data_of(t);
    b->q = b->x + d, b->k = b->q + L->dl, b->v = b->k + L->dl, b->o = b->v + L->dl;
    b->f = b->o + L->dl;
    b->p = data_of(b->part);
    b->logits = NULL;
    return disco_ctx_worker_id(ctx) == 0 ? fresh(ctx, &V, 1, dev, &b->logits, &unused) : DISCO_OK;
}

/* h += the sum over the members of their partials in b->part, reduced in
 * place inside the workers (the kernels that wrote it waited for first). */
static disco_status_t reduce_add(const demo_dk_t *k, struct step_bufs *b, float *h, int64_t d)
{
    disco_status_t st = demo_dk_sync(k);
    if (st == DISCO_OK)
        st = disco_ctx_allreduce(k->ctx, b->part, b->part, DISCO_REDUCE_SUM, false);
    if (st != DISCO_OK)
        return st; /* after a collective's failure the members no longer agree: return it */
    return demo_dk_add(k, h, b->p, d);
}

/* One layer of the step on the device: attention, its reduction, the MLP,
 * its reduction, into h; kv this worker's cache. */
static disco_status_t step_layer(const demo_dk_t *k, const demo_dec_shape_t *s,
                                 const demo_dec_layout_t *L, const float *w, float *kv, int64_t l,
                                 int64_t pos, float *h, struct step_bufs *b)
{
    int64_t d = s->d_model, hd = d / s->heads, dl = L->dl, nh = dl / hd;
    const float *lw = w + L->layer0 + l * L->layer_size;
    const int64_t *o = L->off;
    float *kc = kv + (l * 2) * s->max_seq * dl, *vc = kv + (l * 2 + 1) * s->max_seq * dl;
    disco_status_t st;
    if ((st = demo_dk_rmsnorm(k, h, lw + o[DEC_ATTN_NORM], b->x, d)) != DISCO_OK ||
        (st = demo_dk_matvec(k, b->x, lw + o[DEC_WQ], b->q, d, dl)) != DISCO_OK ||
        (st = demo_dk_matvec(k, b->x, lw + o[DEC_WK], b->k, d, dl)) != DISCO_OK ||
        (st = demo_dk_matvec(k, b->x, lw + o[DEC_WV], b->v, d, dl)) != DISCO_OK ||
        (st = demo_dk_rope(k, b->q, nh, hd, pos)) != DISCO_OK ||
        (st = demo_dk_rope(k, b->k, nh, hd, pos)) != DISCO_OK ||
        (st = demo_dk_copy(k, kc + pos * dl, b->k, dl)) != DISCO_OK ||
        (st = demo_dk_copy(k, vc + pos * dl, b->v, dl)) != DISCO_OK ||
        (st = demo_dk_attend(k, b->q, kc, vc, b->o, nh, hd, dl, pos)) != DISCO_OK ||
        (st = demo_dk_matvec(k, b->o, lw + o[DEC_WO], b->p, dl, d)) != DISCO_OK ||
        (st = reduce_add(k, b, h, d)) != DISCO_OK)
        return st;
    if ((st = demo_dk_rmsnorm(k, h, lw + o[DEC_MLP_NORM], b->x, d)) != DISCO_OK ||
        (st = demo_dk_matvec(k, b->x, lw + o[DEC_W1], b->f, d, L->fl)) != DISCO_OK ||
        (st = demo_dk_gelu(k, b->f, L->fl)) != DISCO_OK ||
        (st = demo_dk_matvec(k, b->f, lw + o[DEC_W2], b->p, L->fl, d)) != DISCO_OK)
        return st;
    return reduce_add(k, b, h, d);
}

/* demo.dec_step(w, cfg, token, pos, h, kv): one whole decode step in one
 * command (issue 34): h = E[token]; per layer, h += the allreduce (sum, in
 * the workers: disco_ctx_allreduce) of the attention partials, then of the
 * MLP partials (Megatron, as the controller-driven form of the functions
 * above); then on worker 0 the logits, [vocab]; null on the others. Every
 * worker runs it (call_sync_all), the same 2 * layers collectives in the
 * same order. The work stays where the tensors are (demo_dec_kernels.h):
 * on a device, activations, weights and the KV cache never leave it
 * within the step (CUDA: the demo's kernels; sim: the sim's host
 * implementation of each). h keeps the step's residual stream and kv this
 * worker's KV cache, as the controller-driven form leaves them. */
static disco_status_t dec_step(disco_ctx_t *ctx, const disco_value_t *a, int nargs,
                               disco_value_t *ret)
{
    (void)nargs;
    demo_dec_shape_t s;
    disco_status_t st = shape_of(ctx, &a[1], &s);
    if (st != DISCO_OK)
        return st;
    const DLTensor *wt = a[0].v.tensor;
    DLTensor *ht = a[4].v.tensor, *kvt = a[5].v.tensor;
    int64_t tok = a[2].v.i, pos = a[3].v.i, d = s.d_model;
    demo_dec_layout_t L = demo_dec_layout(&s, disco_ctx_worker_id(ctx), disco_ctx_world_size(ctx));
    if (tok < 0 || tok >= s.vocab || pos < 0 || pos >= s.max_seq)
        return disco_ctx_fail(ctx, "dec_step: token %lld or position %lld out of range",
                              (long long)tok, (long long)pos);
    if (!holds(wt, L.total) || !holds(ht, d) || !holds(kvt, s.layers * 2 * s.max_seq * L.dl) ||
        wt->device.device_type != ht->device.device_type ||
        kvt->device.device_type != ht->device.device_type)
        return disco_ctx_fail(ctx, "dec_step: the weights, h and kv must be float32 of the "
                                   "model's sizes on one device type");
    demo_dk_t k;
    struct step_bufs b;
    const float *w = data_of(wt);
    float *h = data_of(ht), *kv = data_of(kvt);
    if ((st = demo_dk_init(ctx, ht->device, &k)) != DISCO_OK ||
        (st = step_bufs(ctx, &s, &L, ht->device.device_type, &b)) != DISCO_OK ||
        (st = demo_dk_copy(&k, h, w + tok * d, d)) != DISCO_OK)
        return st;
    for (int64_t l = 0; l < s.layers && st == DISCO_OK; l++)
        st = step_layer(&k, &s, &L, w, kv, l, pos, h, &b);
    if (st == DISCO_OK && b.logits != NULL &&
        (st = demo_dk_rmsnorm(&k, h, w + L.final_norm, b.x, d)) == DISCO_OK &&
        (st = demo_dk_matvec(&k, b.x, w + L.head, data_of(b.logits), d, s.vocab)) == DISCO_OK)
        *ret = disco_value_tensor(b.logits);
    if (st == DISCO_OK)
        st = demo_dk_sync(&k); /* the logits and h complete when the command ends */
    return st;
}
DISCO_FUNC("demo.dec_step", "TSiiTT", dec_step)
