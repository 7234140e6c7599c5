/* test_tensor.c - tensors in the shared heap: copies to and from worker 0,
 * every collective against a reference computed here, for every dtype and
 * op, several sizes, N = 2, 3, 4, with and without groups; mismatches and
 * heap exhaustion. */
#include <check.h>
#include <signal.h>
#include <sys/wait.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "tests/session_util.h"

static const DLDataType dtypes[] = {
    {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},    {kDLFloat, 32, 1}, {kDLFloat, 64, 1},
    {kDLInt, 8, 1},    {kDLInt, 16, 1},       {kDLInt, 32, 1},   {kDLInt, 64, 1},
    {kDLUInt, 8, 1},   {DISCO_DL_BOOL, 8, 1},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static disco_session_t *open_tensor_session(int n, int groups, uint64_t heap)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.heap_bytes = heap;
    cfg.num_groups = groups;
    cfg.call_timeout_ms = 20000;
    return tu_open_with_testlib(&cfg);
}

/* The pattern of tests/testlib.c's test.fill, as stored in the dtype, read
 * back as a double. */
static double pattern(int64_t seed, int64_t w, int64_t i)
{
    return (double)((i * 7 + w * 13 + seed) % 17 - 8);
}

static double stored(DLDataType t, double v)
{
    switch (t.code) {
    case kDLFloat:
    case kDLBfloat:
        return v * 0.5;
    case kDLUInt:
        return v + 8;
    case DISCO_DL_BOOL:
        return ((int)v + 8) % 2;
    default:
        return v;
    }
}

/* Element i of a host buffer of dtype t, as a double. */
static double load(DLDataType t, const void *p, int64_t i)
{
    switch (t.code) {
    case kDLFloat:
        return t.bits == 16   ? disco_fp16_to_fp32(((const uint16_t *)p)[i])
               : t.bits == 32 ? ((const float *)p)[i]
                              : ((const double *)p)[i];
    case kDLBfloat:
        return disco_bf16_to_fp32(((const uint16_t *)p)[i]);
    case kDLUInt:
    case DISCO_DL_BOOL:
        return ((const uint8_t *)p)[i];
    default:
        return t.bits == 8    ? ((const int8_t *)p)[i]
               : t.bits == 16 ? ((const int16_t *)p)[i]
               : t.bits == 32 ? ((const int32_t *)p)[i]
                              : (double)((const int64_t *)p)[i];
    }
}

/* Wraps an exact integer result to the element type, as the kernels do. */
static double wrap(DLDataType t, int64_t v)
{
    switch (t.bits) {
    case 8:
        return t.code == kDLUInt ? (double)(uint8_t)v : (double)(int8_t)v;
    case 16:
        return (double)(int16_t)v;
    case 32:
        return (double)(int32_t)v;
    default:
        return (double)v;
    }
}

/* The reference reduction of element i over ranks [base, base + n). */
static double reference(DLDataType t, disco_reduce_op_t op, int64_t seed, int base, int n,
                        int64_t i)
{
    double acc = 0;
    int64_t iacc = op == DISCO_REDUCE_PROD ? 1 : 0;
    for (int r = 0; r < n; r++) {
        double v = stored(t, pattern(seed, base + r, i));
        if (t.code == DISCO_DL_BOOL) {
            int b = v != 0;
            if (r == 0)
                iacc = b;
            else if (op == DISCO_REDUCE_SUM || op == DISCO_REDUCE_MAX)
                iacc = iacc || b;
            else if (op == DISCO_REDUCE_PROD || op == DISCO_REDUCE_MIN)
                iacc = iacc && b;
            if (op == DISCO_REDUCE_AVG)
                acc += b;
            continue;
        }
        if (t.code == kDLFloat || t.code == kDLBfloat) {
            if (r == 0)
                acc = v;
            else if (op == DISCO_REDUCE_SUM || op == DISCO_REDUCE_AVG)
                acc += v;
            else if (op == DISCO_REDUCE_PROD)
                acc *= v;
            else if (op == DISCO_REDUCE_MIN)
                acc = v < acc ? v : acc;
            else
                acc = v > acc ? v : acc;
            continue;
        }
        int64_t x = (int64_t)v;
        if (r == 0 && op != DISCO_REDUCE_SUM && op != DISCO_REDUCE_AVG && op != DISCO_REDUCE_PROD)
            iacc = x;
        else if (op == DISCO_REDUCE_SUM || op == DISCO_REDUCE_AVG)
            iacc += x;
        else if (op == DISCO_REDUCE_PROD)
            iacc *= x;
        else if (op == DISCO_REDUCE_MIN)
            iacc = x < iacc ? x : iacc;
        else
            iacc = x > iacc ? x : iacc;
    }
    if (t.code == DISCO_DL_BOOL)
        return op == DISCO_REDUCE_AVG ? (2 * acc >= n) : (double)iacc;
    if (t.code == kDLFloat || t.code == kDLBfloat)
        return op == DISCO_REDUCE_AVG ? acc / n : acc;
    return op == DISCO_REDUCE_AVG ? wrap(t, iacc / n) : wrap(t, iacc);
}

/* fp16/bf16 results are one float32 accumulation rounded once to 11 or 8
 * significant bits: allow half an ulp of the result's magnitude, 2^-11 and
 * 2^-8 relative (and the same absolute below 1). float32 avg divides once:
 * 2^-24 relative. Everything else is exact. */
static bool close_enough(DLDataType t, double got, double want)
{
    double tol = t.code == kDLBfloat                  ? 1.0 / 256
                 : t.code == kDLFloat && t.bits == 16 ? 1.0 / 2048
                 : t.code == kDLFloat && t.bits == 32 ? 1e-7
                                                      : 0;
    double scale = fabs(want) > 1 ? fabs(want) : 1;
    return fabs(got - want) <= tol * scale;
}

/* Fetches worker 0's tensor in reg into a malloc'd host buffer. */
static void *fetch(disco_session_t *s, disco_dref_t reg, DLDataType t, int64_t *shape, int ndim)
{
    DLTensor probe = {.ndim = ndim, .dtype = t, .shape = shape};
    size_t nb = disco_tensor_nbytes(&probe);
    void *buf = malloc(nb ? nb : 1);
    DLTensor h = {.data = buf, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = t, .shape = shape};
    CK_OK(disco_session_copy_from_worker0(s, reg, &h));
    return buf;
}

static disco_dref_t fill(disco_session_t *s, int64_t count, DLDataType t, int64_t seed)
{
    int64_t shape[1] = {count};
    disco_value_t a[3] = {disco_value_shape(shape, 1), disco_value_dtype(t), disco_value_int(seed)};
    disco_dref_t x;
    CK_OK(disco_session_call_by_name(s, "test.fill", a, 3, &x));
    return x;
}

/* Allreduce of count elements, checked on worker 0 against the reference
 * and on every other worker by checksum against its group leader. */
static void check_allreduce(disco_session_t *s, int n, int groups, DLDataType t,
                            disco_reduce_op_t op, int64_t count)
{
    int64_t seed = count % 5 + op;
    disco_dref_t x = fill(s, count, t, seed), y;
    disco_value_t a[3] = {tu_dref(x), disco_value_str(disco_reduce_name(op)),
                          disco_value_bool(groups > 1)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &y));
    for (int w = n - 1; w >= 0; w--)
        CK_OK(disco_session_sync(s, w));
    int64_t shape[1] = {count};
    void *got = fetch(s, y, t, shape, 1);
    int gsize = n / groups;
    char name[32];
    for (int64_t i = 0; i < count; i++) {
        double want = reference(t, op, seed, 0, gsize, i), have = load(t, got, i);
        if (!close_enough(t, have, want))
            ck_abort_msg("allreduce %s %s n=%d groups=%d count=%lld: element %lld is %g, want %g",
                         disco_dtype_str(t, name, sizeof name), disco_reduce_name(op), n, groups,
                         (long long)count, (long long)i, have, want);
    }
    free(got);
    /* Other groups' leaders: their bytes, when they fit in a reply. */
    size_t esz = disco_dtype_bytes(t);
    for (int g = 1; g < groups && (size_t)count * esz <= (512u << 10); g++) {
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, y, g * gsize, &v));
        ck_assert_uint_eq(v.len, (size_t)count * esz);
        for (int64_t i = 0; i < count; i++) {
            double want = reference(t, op, seed, g * gsize, gsize, i), have = load(t, v.v.bytes, i);
            ck_assert_msg(close_enough(t, have, want), "group %d element %lld: %g, want %g", g,
                          (long long)i, have, want);
        }
        disco_value_clear(&v);
    }
    for (int w = 1; w < n; w++)
        if (w % gsize != 0)
            ck_assert_msg(tu_checksum_on(s, y, w) == tu_checksum_on(s, y, w / gsize * gsize),
                          "worker %d differs from its group leader", w);
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_free_reg(s, x));
}

/* Every dtype and op, sizes 0, 1 and odd, N = 2, 3, 4 (loop index). */
START_TEST(test_allreduce_all_dtypes_ops)
{
    int n = 2 + _i;
    disco_session_t *s = open_tensor_session(n, 1, 16u << 20);
    static const int64_t counts[] = {0, 1, 1001};
    for (int d = 0; d < NDTYPES; d++)
        for (int op = 0; op < DISCO_REDUCE_COUNT; op++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                check_allreduce(s, n, 1, dtypes[d], (disco_reduce_op_t)op, counts[c]);
    disco_session_close(s);
}
END_TEST

/* 1 MiB per dtype (sum and avg), N = 2, 3, 4. */
START_TEST(test_allreduce_1mib)
{
    int n = 2 + _i;
    disco_session_t *s = open_tensor_session(n, 1, 64u << 20);
    for (int d = 0; d < NDTYPES; d++) {
        int64_t count = (1 << 20) / (int64_t)disco_dtype_bytes(dtypes[d]);
        check_allreduce(s, n, 1, dtypes[d], DISCO_REDUCE_SUM, count);
        check_allreduce(s, n, 1, dtypes[d], DISCO_REDUCE_AVG, count + 3); /* not a multiple of N */
    }
    disco_session_close(s);
}
END_TEST

/* 64 MiB of float32 (sum) and bfloat16 (max, an odd count), N = 2, 3, 4.
 * (Every dtype and op at 64 MiB would take minutes on 2 cores; the kernels
 * are dtype-generic and the smaller sizes cover every pair.) */
START_TEST(test_allreduce_64mib)
{
    int n = 2 + _i;
    disco_session_t *s = open_tensor_session(n, 1, (uint64_t)(2 * n + 1) * (64u << 20));
    check_allreduce(s, n, 1, dtypes[2], DISCO_REDUCE_SUM, (64 << 20) / 4);
    check_allreduce(s, n, 1, dtypes[1], DISCO_REDUCE_MAX, (64 << 20) / 2 - 1); /* odd */
    disco_session_close(s);
}
END_TEST

/* In groups: 4 workers in 2 groups reduce within each group only. */
START_TEST(test_allreduce_groups)
{
    disco_session_t *s = open_tensor_session(4, 2, 16u << 20);
    for (int d = 0; d < NDTYPES; d++)
        for (int op = 0; op < DISCO_REDUCE_COUNT; op++)
            check_allreduce(s, 4, 2, dtypes[d], (disco_reduce_op_t)op, 1001);
    disco_session_close(s);
}
END_TEST

/* Host bytes go to worker 0 and come back exactly, for every dtype; shape,
 * dtype and register mismatches are refused with both sides named. */
START_TEST(test_copy_round_trip)
{
    disco_session_t *s = open_tensor_session(2, 1, 16u << 20);
    for (int d = 0; d < NDTYPES; d++) {
        int64_t shape[3] = {3, 5, 7};
        size_t nb = 105 * disco_dtype_bytes(dtypes[d]);
        unsigned char *in = malloc(nb), *out = calloc(1, nb);
        for (size_t i = 0; i < nb; i++)
            in[i] = (unsigned char)(i * 31 + (size_t)d);
        if (dtypes[d].code == DISCO_DL_BOOL)
            for (size_t i = 0; i < nb; i++)
                in[i] &= 1;
        DLTensor h = {
            .data = in, .device = {kDLCPU, 0}, .ndim = 3, .dtype = dtypes[d], .shape = shape};
        disco_dref_t r;
        CK_OK(disco_session_copy_to_worker0(s, &h, &r));
        memset(in + 1, 0xee, 4); /* the host buffer is free to reuse at once */
        h.data = out;
        CK_OK(disco_session_copy_from_worker0(s, r, &h));
        in[1] = out[1], in[2] = out[2], in[3] = out[3], in[4] = out[4];
        ck_assert_msg(memcmp(in, out, nb) == 0, "dtype %d bytes differ", d);
        int64_t other[3] = {3, 5, 8};
        h.shape = other;
        CK_STATUS(disco_session_copy_from_worker0(s, r, &h), DISCO_E_MISMATCH);
        CK_HAS("3 dims");
        h.shape = shape;
        h.dtype = dtypes[(d + 1) % NDTYPES];
        if (disco_dtype_bytes(h.dtype) != 0)
            CK_STATUS(disco_session_copy_from_worker0(s, r, &h), DISCO_E_MISMATCH);
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, 1, &v)); /* the other workers hold null */
        ck_assert_int_eq(v.type, DISCO_T_NULL);
        CK_OK(disco_session_free_reg(s, r));
        h.dtype = dtypes[d];
        CK_STATUS(disco_session_copy_from_worker0(s, r, &h), DISCO_E_BAD_REG);
        free(in);
        free(out);
    }
    /* Strided or non-CPU host tensors, unsupported dtypes. */
    float buf[4];
    int64_t shape[1] = {4}, strides[1] = {2};
    DLTensor h = {.data = buf,
                  .device = {kDLCPU, 0},
                  .ndim = 1,
                  .dtype = {kDLFloat, 32, 1},
                  .shape = shape,
                  .strides = strides};
    disco_dref_t r;
    CK_STATUS(disco_session_copy_to_worker0(s, &h, &r), DISCO_E_INVAL);
    h.strides = NULL;
    /* A device type no session tensor can be on (cuda and sim tensors are
     * copied device to device: suite gpu_session). */
    h.device.device_type = kDLVulkan;
    CK_STATUS(disco_session_copy_to_worker0(s, &h, &r), DISCO_E_INVAL);
    h.device.device_type = kDLCPU;
    h.dtype = (DLDataType){kDLFloat, 8, 1};
    CK_STATUS(disco_session_copy_to_worker0(s, &h, &r), DISCO_E_BAD_TYPE);
    /* A register that holds no tensor. */
    disco_dref_t i;
    disco_value_t one = disco_value_int(1);
    CK_OK(disco_session_call_by_name(s, "test.echo", &one, 1, &i));
    h.dtype = (DLDataType){kDLFloat, 32, 1};
    CK_STATUS(disco_session_copy_from_worker0(s, i, &h), DISCO_E_BAD_TYPE);
    disco_session_close(s);
}
END_TEST

/* Broadcast hands every worker worker 0's bytes (by reference), scatter a
 * row block each, gather and allgather stack them, send_recv moves one. */
START_TEST(test_data_movement)
{
    int n = 2 + _i;
    disco_session_t *s = open_tensor_session(n, 1, 16u << 20);
    DLDataType f32 = {kDLFloat, 32, 1};
    int64_t count = 12 * n;
    disco_dref_t x = fill(s, count, f32, 1), y;
    disco_value_t a[2] = {tu_dref(x), disco_value_bool(false)};
    /* broadcast */
    CK_OK(disco_session_call_by_name(s, "disco.broadcast_from_worker0", a, 2, &y));
    int64_t c0 = tu_checksum_on(s, x, 0);
    for (int w = 0; w < n; w++)
        ck_assert_msg(tu_checksum_on(s, y, w) == c0, "broadcast: worker %d", w);
    CK_OK(disco_session_free_reg(s, x)); /* the broadcast copies keep the bytes alive */
    for (int w = 0; w < n; w++)
        ck_assert_msg(tu_checksum_on(s, y, w) == c0, "broadcast after free: worker %d", w);
    /* scatter: worker w gets rows [12w, 12w+12) of worker 0's y */
    disco_dref_t z;
    a[0] = tu_dref(y);
    CK_OK(disco_session_call_by_name(s, "disco.scatter_from_worker0", a, 2, &z));
    for (int w = 0; w < n; w++) {
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, z, w, &v));
        ck_assert_uint_eq(v.len, 12 * 4);
        for (int i = 0; i < 12; i++)
            ck_assert_msg(((const float *)v.v.bytes)[i] == stored(f32, pattern(1, 0, 12 * w + i)),
                          "scatter: worker %d element %d", w, i);
        disco_value_clear(&v);
    }
    /* gather the scattered pieces back: worker 0 gets y again */
    disco_dref_t g;
    a[0] = tu_dref(z);
    CK_OK(disco_session_call_by_name(s, "disco.gather_to_worker0", a, 2, &g));
    ck_assert(tu_checksum_on(s, g, 0) == c0);
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, g, n - 1, &v));
    ck_assert_int_eq(v.type, DISCO_T_NULL);
    /* allgather of per-worker fills: every worker sees every worker's part */
    disco_dref_t p = fill(s, 3, f32, 2), ag;
    a[0] = tu_dref(p);
    CK_OK(disco_session_call_by_name(s, "disco.allgather", a, 2, &ag));
    for (int w = 0; w < n; w++) {
        CK_OK(disco_session_debug_get(s, ag, w, &v));
        ck_assert_uint_eq(v.len, (uint32_t)(3 * n * 4));
        for (int r = 0; r < n; r++)
            for (int i = 0; i < 3; i++)
                ck_assert(((const float *)v.v.bytes)[3 * r + i] == stored(f32, pattern(2, r, i)));
        disco_value_clear(&v);
    }
    /* send_recv: the last worker gets worker 1's part; the rest null */
    disco_value_t sr[3] = {tu_dref(p), disco_value_int(1), disco_value_int(n - 1)};
    disco_dref_t got;
    CK_OK(disco_session_call_by_name(s, "disco.send_recv", sr, 3, &got));
    CK_OK(disco_session_debug_get(s, got, n - 1, &v));
    for (int i = 0; i < 3; i++)
        ck_assert(((const float *)v.v.bytes)[i] == stored(f32, pattern(2, 1, i)));
    disco_value_clear(&v);
    CK_OK(disco_session_debug_get(s, got, 0, &v));
    ck_assert_int_eq(v.type, n - 1 == 0 ? DISCO_T_BYTES : DISCO_T_NULL);
    CK_OK(disco_session_sync(s, n - 1));
    disco_session_close(s);
}
END_TEST

/* send_recv's src and dst are checked as the int64s they arrive as: 2**32
 * (worker 0 once narrowed to int) and -2**32 + 1 are refused naming the
 * value and the world size, not acted on as workers 0 and 1. */
START_TEST(test_send_recv_ids_wide)
{
    disco_session_t *s = open_tensor_session(3, 1, 16u << 20);
    disco_dref_t p = fill(s, 3, (DLDataType){kDLFloat, 32, 1}, 2), got;
    const int64_t ids[][2] = {{INT64_C(1) << 32, 2}, {1, -(INT64_C(1) << 32) + 1}};
    const char *const says[] = {"src 4294967296, dst 2 of 3 workers",
                                "src 1, dst -4294967295 of 3 workers"};
    for (int k = 0; k < 2; k++) {
        disco_value_t sr[3] = {tu_dref(p), disco_value_int(ids[k][0]), disco_value_int(ids[k][1])};
        CK_OK(disco_session_call_by_name(s, "disco.send_recv", sr, 3, &got));
        CK_STATUS(disco_session_sync(s, 0), DISCO_E_INVAL);
        CK_HAS(says[k]);
        for (int w = 1; w < 3; w++)
            (void)disco_session_sync(s, w);
    }
    disco_session_close(s);
}
END_TEST

/* A tensor copied to worker 0 only, then broadcast: every worker gets it
 * (the other workers' register is null, which must not stop them from
 * joining the collective). */
START_TEST(test_copy_then_broadcast)
{
    disco_session_t *s = open_tensor_session(3, 1, 16u << 20);
    float host[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[1] = {6};
    DLTensor h = {
        .data = host, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
    disco_dref_t pad[40], x, y;
    for (int i = 0; i < 40; i++) /* push the id past what the workers have seen */
        CK_OK(disco_session_alloc_reg(s, &pad[i]));
    CK_OK(disco_session_copy_to_worker0(s, &h, &x));
    disco_value_t a[2] = {tu_dref(x), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.broadcast_from_worker0", a, 2, &y));
    for (int w = 0; w < 3; w++) {
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, y, w, &v));
        ck_assert_uint_eq(v.len, sizeof host);
        ck_assert(memcmp(v.v.bytes, host, sizeof host) == 0);
        disco_value_clear(&v);
    }
    disco_session_close(s);
}
END_TEST

/* Workers that disagree fail together, with the reason, and the session
 * goes on: dtype and shape mismatches, a non-tensor, a bad op, scatter of an
 * indivisible tensor, a foreign tensor result. */
START_TEST(test_mismatches)
{
    disco_session_t *s = open_tensor_session(3, 1, 16u << 20);
    DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
    int64_t shape[1] = {10};
    struct {
        DLDataType odd;
        int extra;
        const char *says;
    } cases[] = {{i32, 0, "int32"}, {f32, 1, "worker 2 has"}};
    for (int k = 0; k < 2; k++) {
        disco_value_t fa[5] = {disco_value_shape(shape, 1), disco_value_dtype(f32),
                               disco_value_int(2), disco_value_dtype(cases[k].odd),
                               disco_value_int(cases[k].extra)};
        disco_dref_t x, y;
        CK_OK(disco_session_call_by_name(s, "test.fill_odd", fa, 5, &x));
        static const char *const ops[] = {"disco.allreduce", "disco.allgather",
                                          "disco.gather_to_worker0"};
        for (int o = 0; o < 3; o++) {
            disco_value_t a[3] = {tu_dref(x),
                                  o == 0 ? disco_value_str("sum") : disco_value_bool(false),
                                  disco_value_bool(false)};
            CK_OK(disco_session_call_by_name(s, ops[o], a, o == 0 ? 3 : 2, &y));
            CK_STATUS(disco_session_sync(s, 0), DISCO_E_MISMATCH);
            CK_HAS(cases[k].says);
            for (int w = 1; w < 3; w++) { /* every member failed the same way */
                disco_status_t st = disco_session_sync(s, w);
                ck_assert_msg(st == DISCO_OK || st == DISCO_E_MISMATCH, "%s", disco_err_name(st));
            }
            CK_OK(disco_session_free_reg(s, y));
        }
        CK_OK(disco_session_free_reg(s, x));
    }
    disco_dref_t x = fill(s, 10, f32, 0), bad;
    /* non-tensor argument */
    disco_value_t nt[3] = {disco_value_int(3), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", nt, 3, &bad));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BAD_TYPE);
    CK_HAS("expected a tensor");
    for (int w = 1; w < 3; w++)
        (void)disco_session_sync(s, w);
    /* bad op */
    disco_value_t a[3] = {tu_dref(x), disco_value_str("median"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &bad));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_INVAL);
    CK_HAS("op must be");
    for (int w = 1; w < 3; w++)
        (void)disco_session_sync(s, w);
    /* scatter of 10 rows over 3 workers */
    disco_value_t sc[2] = {tu_dref(x), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.scatter_from_worker0", sc, 2, &bad));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_MISMATCH);
    CK_HAS("not a multiple of 3");
    for (int w = 1; w < 3; w++)
        (void)disco_session_sync(s, w);
    /* a foreign DLTensor returned by a function */
    CK_OK(disco_session_call_by_name(s, "test.tensor_return_foreign", NULL, 0, &bad));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BAD_TYPE);
    CK_HAS("disco_ctx_empty");
    for (int w = 1; w < 3; w++)
        (void)disco_session_sync(s, w);
    /* a tensor cannot travel inside a command */
    float host[2] = {1, 2};
    int64_t two[1] = {2};
    DLTensor h = {.data = host, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32, .shape = two};
    disco_value_t tv = disco_value_tensor(&h);
    CK_STATUS(disco_session_call_by_name(s, "test.echo", &tv, 1, &bad), DISCO_E_BAD_TYPE);
    CK_HAS("tensors travel by register");
    /* still usable: a good allreduce */
    a[1] = disco_value_str("max");
    disco_dref_t y;
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &y));
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    disco_session_close(s);
}
END_TEST

/* A heap too small for a tensor: its own error with the sizes, from the
 * call itself (disco_session_empty refuses it before sending anything);
 * freeing makes room again. */
START_TEST(test_heap_exhaustion)
{
    disco_session_t *s = open_tensor_session(2, 1, 1u << 20);
    int64_t big[1] = {1 << 20}; /* 4 MiB of float32 */
    disco_dref_t r;
    float *host = calloc(1u << 20, sizeof(float));
    DLTensor h = {
        .data = host, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = big};
    CK_STATUS(disco_session_copy_to_worker0(s, &h, &r), DISCO_E_HEAP_EXHAUSTED);
    CK_STATUS(disco_session_empty(s, big, 1, h.dtype, false, &r), DISCO_E_HEAP_EXHAUSTED);
    CK_HAS("4194304 bytes");
    CK_OK(disco_session_sync(s, 1)); /* nothing was sent, nothing is pending */
    int64_t small[1] = {1000};
    disco_dref_t ok1;
    CK_OK(disco_session_empty(s, small, 1, h.dtype, false, &ok1));
    CK_OK(disco_session_sync(s, 1));
    free(host);
    disco_session_close(s);
}
END_TEST

/* A worker killed before a collective: worker 0, waiting for it at the
 * barrier, notices and the call fails naming it, instead of hanging. */
START_TEST(test_collective_dead_member)
{
    disco_session_t *s = open_tensor_session(3, 1, 16u << 20);
    disco_dref_t x = fill(s, 100, (DLDataType){kDLFloat, 32, 1}, 0), y;
    CK_OK(disco_session_sync(s, 2));
    kill(disco_session_worker_pid(s, 2), SIGKILL);
    disco_value_t a[3] = {tu_dref(x), disco_value_str("sum"), disco_value_bool(false)};
    CK_STATUS(disco_session_call_by_name(s, "disco.allreduce", a, 3, &y), DISCO_E_WORKER_DIED);
    CK_HAS("worker 2");
    CK_HAS("signal 9");
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_BROKEN);
    disco_session_close(s);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1, "a worker was left");
}
END_TEST

Suite *suite_tensor(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_allreduce_all_dtypes_ops, 0, 3);
    tcase_add_loop_test(tc, test_allreduce_1mib, 0, 3);
    tcase_add_loop_test(tc, test_allreduce_64mib, 0, 3);
    tcase_add_test(tc, test_allreduce_groups);
    tcase_add_test(tc, test_copy_round_trip);
    tcase_add_test(tc, test_copy_then_broadcast);
    tcase_add_loop_test(tc, test_data_movement, 0, 3);
    tcase_add_test(tc, test_mismatches);
    tcase_add_test(tc, test_send_recv_ids_wide);
    tcase_add_test(tc, test_heap_exhaustion);
    tcase_add_test(tc, test_collective_dead_member);
    suite_add_tcase(s, tc);
    return s;
}
