/* testlib.c - the functions the session tests drive, built as a shared
 * library (build/lib/libdisco_testlib.so) and loaded into every worker with
 * the "disco.load_library" builtin. Its disco symbols resolve against the
 * program that loads it (linked -rdynamic). */
#include <time.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/device.h"
#include "disco/dtype.h"
#include "disco/func.h"
#include "disco/tensor.h"
#include "disco/shm/wait.h"

/* test.add(a, b) = a + b */
static disco_status_t add(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    *ret = disco_value_int(a[0].v.i + a[1].v.i);
    return DISCO_OK;
}
DISCO_FUNC("test.add", "ii", add)

/* test.echo(v) = v, for every value type */
static disco_status_t echo(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    *ret = a[0];
    return DISCO_OK;
}
DISCO_FUNC("test.echo", "?", echo)

/* test.concat(a, b): a new string built in scratch memory */
static disco_status_t concat(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    char *p = disco_ctx_alloc(ctx, a[0].len + a[1].len + 1);
    if (p == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    memcpy(p, a[0].v.str, a[0].len);
    memcpy(p + a[0].len, a[1].v.str, a[1].len + 1);
    *ret = disco_value_str(p);
    return DISCO_OK;
}
DISCO_FUNC("test.concat", "ss", concat)

/* test.worker_id() = this worker's id */
static disco_status_t worker_id(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)a;
    (void)n;
    *ret = disco_value_int(disco_ctx_worker_id(ctx));
    return DISCO_OK;
}
DISCO_FUNC("test.worker_id", "", worker_id)

/* test.fail_on(worker, message): fails with message on that worker (-1: all) */
static disco_status_t fail_on(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == -1 || a[0].v.i == disco_ctx_worker_id(ctx))
        return disco_ctx_fail(ctx, "%s (worker %d)", a[1].v.str, disco_ctx_worker_id(ctx));
    return DISCO_OK;
}
DISCO_FUNC("test.fail_on", "is", fail_on)

/* test.segv(worker): dereferences NULL on that worker */
static disco_status_t segv(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == disco_ctx_worker_id(ctx)) {
        signal(SIGSEGV, SIG_DFL); /* sanitizers would turn it into an exit */
        raise(SIGSEGV);
    }
    return DISCO_OK;
}
DISCO_FUNC("test.segv", "i", segv)

/* test.exit(worker, code): _exit(code) on that worker */
static disco_status_t do_exit(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == disco_ctx_worker_id(ctx))
        _exit((int)a[1].v.i);
    return DISCO_OK;
}
DISCO_FUNC("test.exit", "ii", do_exit)

/* test.hang(worker): blocks forever on that worker (until killed) */
static disco_status_t hang(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == disco_ctx_worker_id(ctx))
        for (;;)
            pause();
    return DISCO_OK;
}
DISCO_FUNC("test.hang", "i", hang)

/* The fill pattern: a small value per (seed, worker, element), exact in
 * every supported dtype; tests compute their references from it. */
static double pattern(int64_t seed, int64_t w, int64_t i)
{
    return (double)((i * 7 + w * 13 + seed) % 17 - 8);
}

static void store(DLTensor *t, int64_t i, double v)
{
    void *p = t->data;
    switch (t->dtype.code) {
    case kDLFloat:
        if (t->dtype.bits == 16)
            ((uint16_t *)p)[i] = disco_fp32_to_fp16((float)(v * 0.5));
        else if (t->dtype.bits == 32)
            ((float *)p)[i] = (float)(v * 0.5);
        else
            ((double *)p)[i] = v * 0.5;
        break;
    case kDLBfloat:
        ((uint16_t *)p)[i] = disco_fp32_to_bf16((float)(v * 0.5));
        break;
    case kDLUInt:
        ((uint8_t *)p)[i] = (uint8_t)(v + 8);
        break;
    case DISCO_DL_BOOL:
        ((uint8_t *)p)[i] = (uint8_t)(((int)v + 8) % 2);
        break;
    default: /* kDLInt */
        if (t->dtype.bits == 8)
            ((int8_t *)p)[i] = (int8_t)v;
        else if (t->dtype.bits == 16)
            ((int16_t *)p)[i] = (int16_t)v;
        else if (t->dtype.bits == 32)
            ((int32_t *)p)[i] = (int32_t)v;
        else
            ((int64_t *)p)[i] = (int64_t)v;
    }
}

/* test.fill(shape, dtype, seed): a new tensor holding the pattern. */
static disco_status_t fill(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    DLTensor *t;
    disco_status_t st = disco_ctx_empty(ctx, a[0].v.shape, (int)a[0].len, a[1].v.dtype, &t);
    if (st != DISCO_OK)
        return st;
    int64_t count = disco_tensor_numel(t), w = disco_ctx_worker_id(ctx);
    for (int64_t i = 0; i < count; i++)
        store(t, i, pattern(a[2].v.i, w, i));
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}
DISCO_FUNC("test.fill", "Sti", fill)

/* test.fill_device(shape, device_type): a new float32 tensor on this
 * worker's device of that type, element i = 1000 * worker id + i, written
 * from the host and synced (disco_ctx_empty_device). */
static disco_status_t fill_device(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)n;
    DLTensor *t;
    DLDataType f32 = {kDLFloat, 32, 1};
    disco_status_t st =
        disco_ctx_empty_device(ctx, a[0].v.shape, (int)a[0].len, f32, (DLDeviceType)a[1].v.i, &t);
    if (st != DISCO_OK)
        return st;
    size_t count = (size_t)disco_tensor_numel(t);
    float *host = malloc(count * sizeof *host + 1);
    if (host == NULL)
        return disco_ctx_fail(ctx, "test.fill_device: no memory");
    for (size_t i = 0; i < count; i++)
        host[i] = (float)(1000 * disco_ctx_worker_id(ctx)) + (float)i;
    DLDevice cpu = {kDLCPU, 0};
    st = disco_device_copy(t->data, t->device, host, cpu, count * sizeof *host, NULL);
    if (st == DISCO_OK)
        st = disco_device_stream_sync(t->device, NULL);
    free(host);
    if (st == DISCO_OK)
        *ret = disco_value_tensor(t);
    return st;
}
DISCO_FUNC("test.fill_device", "Si", fill_device)

/* test.checksum(x): FNV-1a of the tensor's bytes (null: 0). */
static disco_status_t checksum(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    uint64_t h = 1469598103934665603ULL;
    if (a[0].type == DISCO_T_TENSOR) {
        const unsigned char *p = a[0].v.tensor->data;
        size_t len = disco_tensor_nbytes(a[0].v.tensor);
        for (size_t i = 0; i < len; i++)
            h = (h ^ p[i]) * 1099511628211ULL;
    } else {
        h = 0;
    }
    *ret = disco_value_int((int64_t)h);
    return DISCO_OK;
}
DISCO_FUNC("test.checksum", "?", checksum)

/* test.tensor_return_foreign(): returns a DLTensor that is not disco's. */
static disco_status_t foreign(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)a;
    (void)n;
    static int64_t shape[1] = {4};
    static float data[4];
    static DLTensor t = {
        .data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
    *ret = disco_value_tensor(&t);
    return DISCO_OK;
}
DISCO_FUNC("test.tensor_return_foreign", "", foreign)

/* test.fill_odd(shape, dtype, odd_worker, odd_dtype, odd_extra): as
 * test.fill with seed 0, but worker odd_worker uses odd_dtype and adds
 * odd_extra to dimension 0: collectives must notice. */
static disco_status_t fill_odd(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int64_t shape[DISCO_MAX_NDIM];
    memcpy(shape, a[0].v.shape, a[0].len * sizeof *shape);
    DLDataType t = a[1].v.dtype;
    if (disco_ctx_worker_id(ctx) == a[2].v.i) {
        t = a[3].v.dtype;
        shape[0] += a[4].v.i;
    }
    disco_value_t args[3] = {disco_value_shape(shape, a[0].len), disco_value_dtype(t),
                             disco_value_int(0)};
    return fill(ctx, args, 3, ret);
}
DISCO_FUNC("test.fill_odd", "Stiti", fill_odd)

/* test.spin_ms(ms): keeps the CPU busy for ms milliseconds (a slow call). */
static disco_status_t spin_ms(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    int64_t end = disco_now_ns() + a[0].v.i * 1000000;
    while (disco_now_ns() < end)
        ;
    *ret = disco_value_int(a[0].v.i);
    return DISCO_OK;
}
DISCO_FUNC("test.spin_ms", "i", spin_ms)

/* test.spin_on(worker, ms): keeps only that worker busy for ms milliseconds
 * (a straggler). */
static disco_status_t spin_on(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    if (disco_ctx_worker_id(ctx) == a[0].v.i) {
        int64_t end = disco_now_ns() + a[1].v.i * 1000000;
        while (disco_now_ns() < end)
            ;
    }
    *ret = disco_value_null();
    return DISCO_OK;
}
DISCO_FUNC("test.spin_on", "ii", spin_on)

/* test.sleep_on(worker, ms): only that worker sleeps for ms milliseconds
 * (a straggler that leaves the CPU to the others). */
static disco_status_t sleep_on(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    if (disco_ctx_worker_id(ctx) == a[0].v.i) {
        struct timespec ts = {.tv_sec = a[1].v.i / 1000, .tv_nsec = (a[1].v.i % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    *ret = disco_value_null();
    return DISCO_OK;
}
DISCO_FUNC("test.sleep_on", "ii", sleep_on)

/* test.other_device(device_type): leaves another device than this worker's
 * current on its thread, as user code can (and as a copy does: cuda_copy
 * makes the copy's device current): copies 4 bytes to a scratch
 * allocation on device (worker's + 1) mod count, syncs and frees it. */
static disco_status_t other_device(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                   disco_value_t *ret)
{
    (void)n;
    DLDevice mine, other;
    int count = 0;
    disco_status_t st =
        disco_device_of_worker((DLDeviceType)a[0].v.i, disco_ctx_worker_id(ctx), &mine);
    if (st == DISCO_OK)
        st = disco_device_count(mine.device_type, &count);
    if (st != DISCO_OK)
        return st;
    other = (DLDevice){mine.device_type, (mine.device_id + 1) % count};
    void *p = NULL;
    static const char four[4] = {1, 2, 3, 4};
    DLDevice cpu = {kDLCPU, 0};
    if ((st = disco_device_alloc(other, sizeof four, &p)) == DISCO_OK) {
        if ((st = disco_device_copy(p, other, four, cpu, sizeof four, NULL)) == DISCO_OK)
            st = disco_device_stream_sync(other, NULL);
        disco_status_t fst = disco_device_free(other, p);
        st = st != DISCO_OK ? st : fst;
    }
    *ret = disco_value_null();
    return st;
}
DISCO_FUNC("test.other_device", "i", other_device)
