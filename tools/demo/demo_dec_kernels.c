/* demo_dec_kernels.c - the decoder's model work on the CPU, on sim and on
 * CUDA (demo_dec_kernels.h). Part of the demo library
 * (build/lib/libdisco_demo.so).
 *
 * CUDA: the kernels of demo_dec_cuda.cu come as PTX text (DEMO_DEC_PTX, a
 * header the Makefile makes with nvcc when the toolkit is there) and are
 * loaded with the CUDA driver API, dlopen'd (libcuda.so.1): the library
 * links no CUDA runtime, and launches on the legacy default stream (stream
 * 0) of the context disco's runtime made current (disco_device_set), the
 * stream disco's own copies use, so a kernel and a copy are ordered.
 * Never run on a GPU by its author: compiled only (no GPU was lent). */
#include "tools/demo/demo_dec_kernels.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "disco/device.h"
#include "tools/demo/demo_decoder.h"

/* ---- the host functions ---- */

void demo_dec_matvec(const float *restrict x, const float *restrict w, float *restrict out,
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

void demo_dec_rmsnorm(const float *x, const float *gain, float *out, int64_t d)
{
    float ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)d + DEMO_DEC_EPS);
    for (int64_t i = 0; i < d; i++)
        out[i] = x[i] * inv * gain[i];
}

void demo_dec_rope(float *v, int64_t nh, int64_t hd, int64_t pos)
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

void demo_dec_attend(const float *q, const float *k, const float *v, float *o, float *p, int64_t nh,
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

/* ---- CUDA, through the driver ---- */

enum { K_MATVEC, K_RMSNORM, K_ROPE, K_ATTEND, K_GELU, K_ADD, K_COUNT };
static const char *const kname[K_COUNT] = {"dk_matvec", "dk_rmsnorm", "dk_rope",
                                           "dk_attend", "dk_gelu",    "dk_add"};
#define DK_BLOCK 256 /* demo_dec_cuda.cu's one-block kernels' threads */

/* The driver calls used (cuda.h's signatures, its handles as pointers). */
typedef int (*cu_ctx_get_t)(void **ctx);
typedef int (*cu_load_t)(void **mod, const void *image);
typedef int (*cu_getfn_t)(void **fn, void *mod, const char *name);
typedef int (*cu_launch_t)(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                           void **extra);

struct demo_dk_cuda {
    void *ctx; /* the context the module was loaded into */
    void *fn[K_COUNT];
    cu_launch_t launch;
};

#if defined(DEMO_DEC_PTX) && !defined(__CPPCHECK__) /* cppcheck has no such header */
#include DEMO_DEC_PTX                               /* static const char demo_dec_ptx[] */

static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct demo_dk_cuda cu_loaded; /* under cu_lock until ctx is set */

/* The kernels in the current context (loaded at the first call of a
 * context; a process uses one device, so one module at a time). */
static disco_status_t cuda_load(disco_ctx_t *ctx, const struct demo_dk_cuda **out)
{
    static void *lib;
    static cu_ctx_get_t get_ctx;
    static cu_load_t load;
    static cu_getfn_t getfn;
    disco_status_t st = DISCO_OK;
    void *cur = NULL;
    pthread_mutex_lock(&cu_lock);
    if (lib == NULL && (lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) != NULL) {
        get_ctx = (cu_ctx_get_t)dlsym(lib, "cuCtxGetCurrent");
        load = (cu_load_t)dlsym(lib, "cuModuleLoadData");
        getfn = (cu_getfn_t)dlsym(lib, "cuModuleGetFunction");
        cu_loaded.launch = (cu_launch_t)dlsym(lib, "cuLaunchKernel");
    }
    if (lib == NULL || get_ctx == NULL || load == NULL || getfn == NULL || cu_loaded.launch == NULL)
        st = disco_ctx_fail(ctx, "dec_step: no CUDA driver (libcuda.so.1 and its calls)");
    else if (get_ctx(&cur) != 0 || cur == NULL)
        st = disco_ctx_fail(ctx, "dec_step: no current CUDA context");
    if (st == DISCO_OK && cur != cu_loaded.ctx) {
        void *mod = NULL;
        int rc = load(&mod, demo_dec_ptx);
        for (int i = 0; i < K_COUNT && rc == 0; i++)
            rc = getfn(&cu_loaded.fn[i], mod, kname[i]);
        if (rc != 0)
            st = disco_ctx_fail(ctx, "dec_step: loading the decoder's kernels: CUDA error %d", rc);
        else
            cu_loaded.ctx = cur;
    }
    pthread_mutex_unlock(&cu_lock);
    if (st == DISCO_OK)
        *out = &cu_loaded;
    return st;
}
#else
static disco_status_t cuda_load(disco_ctx_t *ctx, const struct demo_dk_cuda **out)
{
    (void)out;
    return disco_ctx_fail(ctx, "dec_step: the demo library was built without the CUDA kernels "
                               "(no CUDA toolkit at build time)");
}
#endif

/* Launches kernel i on stream 0 with grid x block threads. */
static disco_status_t launch(const demo_dk_t *k, int i, unsigned grid, unsigned block,
                             unsigned shared, void **params)
{
    int rc = k->cu->launch(k->cu->fn[i], grid, 1, 1, block, 1, 1, shared, NULL, params, NULL);
    return rc == 0 ? DISCO_OK
                   : disco_ctx_fail(k->ctx, "dec_step: launching %s: CUDA error %d", kname[i], rc);
}

static unsigned blocks(int64_t n)
{
    return (unsigned)((n + DK_BLOCK - 1) / DK_BLOCK);
}

/* ---- sim: the host functions on host copies ---- */

/* n floats at dev pointer p copied into new host scratch *h (queued:
 * complete after the next sync). */
static disco_status_t in(const demo_dk_t *k, const float *p, int64_t n, float **h)
{
    size_t nb = (size_t)(n > 0 ? n : 1) * sizeof(float);
    *h = disco_ctx_alloc(k->ctx, nb);
    if (*h == NULL)
        return disco_ctx_fail(k->ctx, "dec_step: out of memory for %zu bytes", nb);
    if (n > 0 && disco_device_copy(*h, (DLDevice){kDLCPU, 0}, p, k->dev, nb, NULL) != DISCO_OK)
        return disco_ctx_fail(k->ctx, "dec_step: copy from the device: %s", disco_last_error());
    return DISCO_OK;
}

static disco_status_t out(const demo_dk_t *k, float *p, const float *h, int64_t n)
{
    if (n > 0 && disco_device_copy(p, k->dev, h, (DLDevice){kDLCPU, 0}, (size_t)n * sizeof *h,
                                   NULL) != DISCO_OK)
        return disco_ctx_fail(k->ctx, "dec_step: copy to the device: %s", disco_last_error());
    return demo_dk_sync(k);
}

/* ---- the operations ---- */

disco_status_t demo_dk_init(disco_ctx_t *ctx, DLDevice dev, demo_dk_t *k)
{
    *k = (demo_dk_t){.ctx = ctx, .dev = dev};
    if (dev.device_type != kDLCUDA)
        return DISCO_OK;
    if (disco_device_set(dev) != DISCO_OK)
        return disco_ctx_fail(ctx, "dec_step: %s", disco_last_error());
    return cuda_load(ctx, &k->cu);
}

disco_status_t demo_dk_sync(const demo_dk_t *k)
{
    if (k->dev.device_type == kDLCPU || disco_device_stream_sync(k->dev, NULL) == DISCO_OK)
        return DISCO_OK;
    return disco_ctx_fail(k->ctx, "dec_step: sync: %s", disco_last_error());
}

disco_status_t demo_dk_copy(const demo_dk_t *k, float *dst, const float *src, int64_t n)
{
    if (k->dev.device_type == kDLCPU) {
        memmove(dst, src, (size_t)n * sizeof *dst);
        return DISCO_OK;
    }
    if (disco_device_copy(dst, k->dev, src, k->dev, (size_t)n * sizeof *dst, NULL) != DISCO_OK)
        return disco_ctx_fail(k->ctx, "dec_step: copy on the device: %s", disco_last_error());
    return DISCO_OK; /* ordered with the kernels and copies after it (stream 0) */
}

disco_status_t demo_dk_rmsnorm(const demo_dk_t *k, const float *x, const float *gain, float *o,
                               int64_t d)
{
    float *hx, *hg, *ho;
    disco_status_t st;
    if (k->dev.device_type == kDLCPU) {
        demo_dec_rmsnorm(x, gain, o, d);
        return DISCO_OK;
    }
    if (k->cu != NULL) {
        float eps = DEMO_DEC_EPS;
        void *a[] = {&x, &gain, &o, &d, &eps};
        return launch(k, K_RMSNORM, 1, DK_BLOCK, 0, a);
    }
    if ((st = in(k, x, d, &hx)) != DISCO_OK || (st = in(k, gain, d, &hg)) != DISCO_OK ||
        (st = in(k, o, d, &ho)) != DISCO_OK || (st = demo_dk_sync(k)) != DISCO_OK)
        return st;
    demo_dec_rmsnorm(hx, hg, ho, d);
    return out(k, o, ho, d);
}

disco_status_t demo_dk_matvec(const demo_dk_t *k, const float *x, const float *w, float *o,
                              int64_t rows, int64_t cols)
{
    float *hx, *hw, *ho;
    disco_status_t st;
    if (k->dev.device_type == kDLCPU) {
        demo_dec_matvec(x, w, o, rows, cols);
        return DISCO_OK;
    }
    if (k->cu != NULL) {
        void *a[] = {&x, &w, &o, &rows, &cols};
        return launch(k, K_MATVEC, blocks(cols), DK_BLOCK, 0, a);
    }
    if ((st = in(k, x, rows, &hx)) != DISCO_OK || (st = in(k, w, rows * cols, &hw)) != DISCO_OK ||
        (st = in(k, o, cols, &ho)) != DISCO_OK || (st = demo_dk_sync(k)) != DISCO_OK)
        return st;
    demo_dec_matvec(hx, hw, ho, rows, cols);
    return out(k, o, ho, cols);
}

disco_status_t demo_dk_rope(const demo_dk_t *k, float *v, int64_t nh, int64_t hd, int64_t pos)
{
    float *hv;
    disco_status_t st;
    if (k->dev.device_type == kDLCPU) {
        demo_dec_rope(v, nh, hd, pos);
        return DISCO_OK;
    }
    if (k->cu != NULL) {
        double base = DEMO_DEC_ROPE_BASE;
        void *a[] = {&v, &nh, &hd, &pos, &base};
        return launch(k, K_ROPE, blocks(nh * (hd / 2)), DK_BLOCK, 0, a);
    }
    if ((st = in(k, v, nh * hd, &hv)) != DISCO_OK || (st = demo_dk_sync(k)) != DISCO_OK)
        return st;
    demo_dec_rope(hv, nh, hd, pos);
    return out(k, v, hv, nh * hd);
}

disco_status_t demo_dk_attend(const demo_dk_t *k, const float *q, const float *kc, const float *vc,
                              float *o, int64_t nh, int64_t hd, int64_t ld, int64_t pos)
{
    float *hq, *hk, *hv, *ho, *p;
    disco_status_t st;
    if (k->dev.device_type != kDLCPU && k->cu != NULL) {
        float scale = 1.0f / sqrtf((float)hd);
        void *a[] = {&q, &kc, &vc, &o, &hd, &ld, &pos, &scale};
        return launch(k, K_ATTEND, (unsigned)nh, DK_BLOCK,
                      (unsigned)((pos + 1 + DK_BLOCK) * (int64_t)sizeof(float)), a);
    }
    if ((p = disco_ctx_alloc(k->ctx, (size_t)(pos + 1) * sizeof *p)) == NULL)
        return disco_ctx_fail(k->ctx, "dec_step: out of memory");
    if (k->dev.device_type == kDLCPU) {
        demo_dec_attend(q, kc, vc, o, p, nh, hd, ld, pos);
        return DISCO_OK;
    }
    if ((st = in(k, q, nh * hd, &hq)) != DISCO_OK ||
        (st = in(k, kc, (pos + 1) * ld, &hk)) != DISCO_OK ||
        (st = in(k, vc, (pos + 1) * ld, &hv)) != DISCO_OK ||
        (st = in(k, o, nh * hd, &ho)) != DISCO_OK || (st = demo_dk_sync(k)) != DISCO_OK)
        return st;
    demo_dec_attend(hq, hk, hv, ho, p, nh, hd, ld, pos);
    return out(k, o, ho, nh * hd);
}

disco_status_t demo_dk_gelu(const demo_dk_t *k, float *v, int64_t n)
{
    float *hv = v;
    disco_status_t st;
    if (k->dev.device_type != kDLCPU && k->cu != NULL) {
        void *a[] = {&v, &n};
        return launch(k, K_GELU, blocks(n), DK_BLOCK, 0, a);
    }
    if (k->dev.device_type != kDLCPU &&
        ((st = in(k, v, n, &hv)) != DISCO_OK || (st = demo_dk_sync(k)) != DISCO_OK))
        return st;
    for (int64_t i = 0; i < n; i++)
        hv[i] = demo_mlp_gelu(hv[i]);
    return k->dev.device_type == kDLCPU ? DISCO_OK : out(k, v, hv, n);
}

disco_status_t demo_dk_add(const demo_dk_t *k, float *h, const float *a, int64_t n)
{
    float *hh = h;
    const float *ha = a;
    float *got;
    disco_status_t st;
    if (k->dev.device_type != kDLCPU && k->cu != NULL) {
        void *p[] = {&h, &a, &n};
        return launch(k, K_ADD, blocks(n), DK_BLOCK, 0, p);
    }
    if (k->dev.device_type != kDLCPU) {
        if ((st = in(k, h, n, &hh)) != DISCO_OK || (st = in(k, a, n, &got)) != DISCO_OK ||
            (st = demo_dk_sync(k)) != DISCO_OK)
            return st;
        ha = got;
    }
    for (int64_t i = 0; i < n; i++)
        hh[i] += ha[i];
    return k->dev.device_type == kDLCPU ? DISCO_OK : out(k, h, hh, n);
}
