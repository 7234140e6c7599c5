/* test_gpu_ar.c - allreduce of device tensors by kernels that meet through
 * flags in the arenas (workers/device/ar.h): the job's checks, the plan
 * and ranges, then sessions on the sim device (CUDA when there is one)
 * with every op and dtype class, one-shot and two-shot, groups, pieces,
 * back-to-back calls on alternating slots, and a member that dies inside
 * the kernel. Results are compared with disco_reduce over the same inputs,
 * the semantics every member must reproduce bit for bit (NaN for NaN). */
#include <math.h>
#include <pthread.h>
#include <time.h>

#include "disco/clock.h"
#include "disco/dtype.h"
#include "tests/gpu_session_util.h"
#include "workers/device/ar.h"

/* ---- the job, the plan and the ranges (no session) ---- */

static struct disco__ar_job good_job(void)
{
    static uint32_t sig[DISCO_AR_SIGNAL_BYTES / 4];
    static float in[4], out[4];
    struct disco__ar_job j = {.rank = 0,
                              .size = 1,
                              .slot = 0,
                              .epoch = 1,
                              .op = DISCO_REDUCE_SUM,
                              .pieces = 1,
                              .dtype = {kDLFloat, 32, 1},
                              .count = 4};
    j.in[0] = in, j.out[0] = out, j.signal[0] = sig;
    return j;
}

/* A malformed job is refused before anything is queued, with what is
 * wrong; a device type without kernels is refused by name. */
START_TEST(test_job_checks)
{
    DLDevice sim = {kDLExtDev, 0};
    struct disco__ar_job j = good_job();
    j.size = 0;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    CK_HAS("malformed job");
    j = good_job(), j.size = DISCO_AR_MAX_RANKS + 1;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    j = good_job(), j.rank = 1;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    j = good_job(), j.epoch = 0;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    j = good_job(), j.slot = 2;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    j = good_job(), j.op = DISCO_REDUCE_COUNT;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    j = good_job(), j.pieces = DISCO_AR_MAX_PIECES + 1;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    j = good_job(), j.dtype = (DLDataType){kDLFloat, 8, 1};
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_BAD_TYPE);
    CK_HAS("cannot reduce");
    j = good_job(), j.signal[0] = NULL;
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    CK_HAS("member 0's pointers unset");
    j = good_job();
    CK_STATUS(disco__ar_launch((DLDevice){kDLCPU, 0}, NULL, &j), DISCO_E_NO_DEVICE);
    CK_HAS("cuda or sim only");
    /* Host memory is not sim memory: refused when the job is queued. */
    setenv("DISCO_SIM_GPUS", SIM_GPUS, 1);
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_INVAL);
    CK_HAS("not sim memory of this process");
}
END_TEST

/* Pieces: one per 64 KiB a member reduces, 1 to DISCO_AR_MAX_PIECES;
 * ranges: every element in exactly one (part, piece), in order. */
START_TEST(test_plan_and_ranges)
{
    ck_assert_uint_eq(disco__ar_plan(0, 4, 2, false), 1);
    ck_assert_uint_eq(disco__ar_plan(1000, 4, 2, false), 1);
    ck_assert_uint_eq(disco__ar_plan(64 * 1024, 4, 2, false), 4);
    ck_assert_uint_eq(disco__ar_plan(64 * 1024, 4, 2, true), 2);
    ck_assert_uint_eq(disco__ar_plan(64u << 20, 4, 2, false), DISCO_AR_MAX_PIECES);
    static const uint64_t counts[] = {0, 1, 2, 3, 7, 1000, 1001, 65537};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        for (uint32_t size = 1; size <= 5; size++) {
            for (uint32_t two = 0; two < 2; two++) {
                for (uint32_t pieces = 1; pieces <= 4; pieces++) {
                    struct disco__ar_job j = {
                        .size = size, .two_shot = two, .pieces = pieces, .count = counts[c]};
                    uint64_t next = 0;
                    for (uint32_t part = 0; part < (two ? size : 1); part++) {
                        for (uint32_t b = 0; b < pieces; b++) {
                            uint64_t lo, hi;
                            disco__ar_range(&j, part, b, &lo, &hi);
                            ck_assert_uint_eq(lo, next);
                            ck_assert_uint_le(lo, hi);
                            next = hi;
                        }
                    }
                    ck_assert_uint_eq(next, counts[c]);
                }
            }
        }
    }
}
END_TEST

/* ---- sessions ---- */

static const DLDataType DTYPES[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                    {kDLFloat, 64, 1}, {kDLInt, 8, 1},    {kDLInt, 32, 1},
                                    {kDLInt, 64, 1},   {kDLUInt, 8, 1},   {DISCO_DL_BOOL, 8, 1}};
#define NDTYPES (sizeof DTYPES / sizeof DTYPES[0])

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Worker w's element i of dtype t, written at p: small exact floats (a
 * NaN now and then, and -0.0: min/max must propagate and order them as
 * disco_reduce does), integers over their whole range (sums wrap),
 * bools as 0, 1 or 2 (any nonzero byte is true). */
static void element(DLDataType t, int w, size_t i, char *p)
{
    uint64_t r = mix((uint64_t)w * 1000003u + i * 7919u + t.code * 31u + t.bits);
    float f = (float)((int)(r % 29) - 14) * 0.25f;
    if (i % 97 == 5 && w == 1)
        f = NAN;
    if (i % 89 == 3)
        f = w % 2 ? -0.0f : 0.0f;
    switch (t.code) {
    case kDLFloat:
        if (t.bits == 16) {
            uint16_t h = disco_fp32_to_fp16(f);
            memcpy(p, &h, 2);
        } else if (t.bits == 32) {
            memcpy(p, &f, 4);
        } else {
            double d = f;
            memcpy(p, &d, 8);
        }
        return;
    case kDLBfloat: {
        uint16_t h = disco_fp32_to_bf16(f);
        memcpy(p, &h, 2);
        return;
    }
    case DISCO_DL_BOOL:
        *p = (char)(r % 3);
        return;
    default:
        memcpy(p, &r, (size_t)t.bits / 8);
    }
}

/* Whether a and b (one element of t) are the same: the same bits, or both
 * NaN (a GPU may not keep a NaN's payload). */
static bool same(DLDataType t, const char *a, const char *b)
{
    size_t n = disco_dtype_bytes(t);
    if (memcmp(a, b, n) == 0)
        return true;
    if (t.code == kDLFloat && t.bits == 32) {
        float x, y;
        memcpy(&x, a, 4), memcpy(&y, b, 4);
        return isnan(x) && isnan(y);
    }
    if (t.code == kDLFloat && t.bits == 64) {
        double x, y;
        memcpy(&x, a, 8), memcpy(&y, b, 8);
        return isnan(x) && isnan(y);
    }
    if ((t.code == kDLFloat || t.code == kDLBfloat) && t.bits == 16) {
        uint16_t x, y;
        memcpy(&x, a, 2), memcpy(&y, b, 2);
        float fx = t.code == kDLFloat ? disco_fp16_to_fp32(x) : disco_bf16_to_fp32(x);
        float fy = t.code == kDLFloat ? disco_fp16_to_fp32(y) : disco_bf16_to_fp32(y);
        return isnan(fx) && isnan(fy);
    }
    return false;
}

/* One allreduce (op, count elements of t; over groups when ngroups > 1)
 * on a session of world workers of type: inputs written per worker, the
 * result compared on every worker with disco_reduce over its group's
 * inputs. */
static void check_one(disco_session_t *s, DLDeviceType type, DLDataType t, disco_reduce_op_t op,
                      size_t count, int ngroups)
{
    int world = disco_session_num_workers(s), gsize = world / ngroups;
    size_t esz = disco_dtype_bytes(t), nb = count * esz;
    char *in = malloc((size_t)world * nb + 1), *want = malloc(nb + 1);
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(want);
    int64_t shape[1] = {(int64_t)count};
    disco_dref_t x;
    CK_OK(disco_session_empty_device(s, shape, 1, t, (DLDevice){type, 0}, false, &x));
    for (int w = 0; w < world; w++) {
        for (size_t i = 0; i < count; i++)
            element(t, w, i, in + (size_t)w * nb + i * esz);
        disco_value_t b = disco_value_bytes(in + (size_t)w * nb, (uint32_t)nb);
        CK_OK(disco_session_debug_set(s, x, w, &b));
    }
    disco_value_t args[3] = {{.type = DISCO_T_DREF, .v.reg = x},
                             disco_value_str(disco_reduce_name(op)),
                             disco_value_bool(ngroups > 1)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", args, 3, &r));
    char name[32];
    disco_dtype_str(t, name, sizeof name);
    for (int w = 0; w < world; w++) {
        const void *srcs[64];
        for (int k = 0; k < gsize; k++)
            srcs[k] = in + (size_t)(w / gsize * gsize + k) * nb;
        CK_OK(disco_reduce(op, t, want, srcs, gsize, count));
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_msg(v.len == nb, "%s %s: worker %d got %u bytes", name, disco_reduce_name(op), w,
                      v.len);
        for (size_t i = 0; i < count; i++)
            ck_assert_msg(same(t, (const char *)v.v.bytes + i * esz, want + i * esz),
                          "%s %s of %zu over %d: worker %d, element %zu differs", name,
                          disco_reduce_name(op), count, gsize, w, i);
        disco_value_clear(&v);
    }
    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_free_reg(s, x));
    free(in);
    free(want);
}

/* A session's geometry and which way its allreduces go. */
struct shape_case {
    int world, groups;
    bool two_shot, spawn;
};

static const struct shape_case CASES[] = {
    {2, 1, false, false}, {2, 1, true, false}, {3, 1, false, true}, {3, 1, true, false},
    {4, 2, false, false}, {4, 2, true, true},  {8, 2, true, false}, {8, 4, false, false},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

/* Each wait's deadline: generous, 8 workers share 2 cores. */
static uint32_t call_timeout_ms = 120000;

/* Whether the allreduces of the open case run as kernels: workers sharing
 * a GPU without MPS take the staged way instead (docs/gpu-sharing.md;
 * test_gpu_share.c). The sim cases run on a simulated machine with MPS
 * (DISCO_SIM_MPS=1), so their kernels meet however many share a device. */
static bool by_kernels = true;

/* Opens the session of case k on type, its allreduces forced one-shot or
 * two-shot (DISCO_AR_TWO_SHOT_BYTES, inherited by the workers). */
static disco_session_t *open_case(DLDeviceType type, const struct shape_case *k,
                                  uint64_t arena_bytes)
{
    setenv("DISCO_AR_TWO_SHOT_BYTES", k->two_shot ? "0" : "1099511627776", 1);
    setenv("DISCO_SIM_MPS", "1", 1);
    if (type == kDLCUDA) { /* one GPU per worker, or MPS (probed: CUDA stays untouched here) */
        char why[256];
        bool mps = false;
        by_kernels = cuda_count(why, sizeof why) >= k->world ||
                     (disco_device_mps((DLDevice){kDLCUDA, 0}, &mps) == DISCO_OK && mps);
    }
    disco_session_config_t c = disco_session_config_default(k->world);
    c.num_groups = k->groups;
    c.call_timeout_ms = call_timeout_ms;
    c.device_arena_bytes = arena_bytes;
    c.max_msg = 2u << 20; /* debug_set of a whole input */
    if (k->spawn || type == kDLCUDA) {
        c.launch = DISCO_LAUNCH_SPAWN;
        c.worker_path = DISCO_TEST_WORKER;
    }
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    return s;
}

/* Asserts that every worker ran n allreduce kernels, all of one kind (or,
 * where the case's workers share a GPU without MPS, staged them all). */
static void expect_kernels(disco_session_t *s, bool two_shot, int64_t n)
{
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        int64_t st[9];
        arena_stats(s, w, st);
        if (!by_kernels) {
            ck_assert_msg(st[7] == 0 && st[8] == 0 && arena_staged(s, w) == n,
                          "worker %d (sharing a GPU without MPS) ran %lld kernels and staged "
                          "%lld allreduces, want %lld staged",
                          w, (long long)(st[7] + st[8]), (long long)arena_staged(s, w),
                          (long long)n);
            continue;
        }
        ck_assert_msg(st[two_shot ? 8 : 7] == n && st[two_shot ? 7 : 8] == 0,
                      "worker %d ran %lld one-shot and %lld two-shot kernels, want %lld %s", w,
                      (long long)st[7], (long long)st[8], (long long)n,
                      two_shot ? "two-shot" : "one-shot");
    }
}

/* Every op over every dtype class, in the case's geometry and mode: 1000
 * elements (not a multiple of 3 or 8) and 3 (fewer than some groups'
 * members: a member's two-shot slice can be empty). */
START_TEST(test_ops_and_dtypes)
{
    DLDeviceType type = type_of(_i, NCASES);
    NEED_DEVICE(type);
    const struct shape_case *k = &CASES[_i % NCASES];
    disco_session_t *s = open_case(type, k, 1u << 20);
    int64_t calls = 0;
    for (size_t d = 0; d < NDTYPES; d++) {
        for (int op = 0; op < DISCO_REDUCE_COUNT; op++, calls++)
            check_one(s, type, DTYPES[d], (disco_reduce_op_t)op, 1000, k->groups);
        check_one(s, type, DTYPES[d], DISCO_REDUCE_SUM, 3, k->groups);
        calls++;
    }
    expect_kernels(s, k->two_shot, calls);
    disco_session_close(s);
}
END_TEST

/* Messages of several pieces (each with its own flags): 960 KiB of
 * float32 and of bfloat16 (a reply holds 1 MiB), one-shot and two-shot, 2
 * and 3 members. */
START_TEST(test_pieces)
{
    DLDeviceType type = type_of(_i, 4);
    NEED_DEVICE(type);
    const struct shape_case k = {2 + _i % 2, 1, _i / 2 % 2 == 1, false};
    disco_session_t *s = open_case(type, &k, 8u << 20);
    size_t n = (960u << 10) / 4;
    ck_assert_uint_gt(disco__ar_plan(n, 4, (uint32_t)k.world, k.two_shot), 1);
    check_one(s, type, (DLDataType){kDLFloat, 32, 1}, DISCO_REDUCE_SUM, n, 1);
    check_one(s, type, (DLDataType){kDLBfloat, 16, 1}, DISCO_REDUCE_MAX, 2 * n - 5, 1);
    ck_assert_uint_gt(disco__ar_plan(2 * n - 5, 2, (uint32_t)k.world, k.two_shot), 1);
    expect_kernels(s, k.two_shot, 2);
    disco_session_close(s);
}
END_TEST

/* 64 allreduces back to back, each reading the last one's output, with no
 * sync between them and cross-process reads slowed down
 * (DISCO_SIM_PEER_COPY_US): members drift apart, so consecutive calls on
 * alternating slots overlap, and a read of a peer's input that did not
 * wait for its producer (START), or a reuse that did not wait for the
 * readers (END), would show in the sums. int32 sums wrap: the result is
 * world^64 times the first sum, mod 2^32. */
START_TEST(test_back_to_back)
{
    DLDeviceType type = type_of(_i, 4);
    NEED_DEVICE(type);
    setenv("DISCO_SIM_PEER_COPY_US", "300", 1);
    const struct shape_case k = {_i % 2 ? 4 : 2, 1, _i / 2 % 2 == 1, false};
    disco_session_t *s = open_case(type, &k, 1u << 20);
    int world = k.world;
    enum { N = 257, ROUNDS = 64 };
    int64_t shape[1] = {N};
    const DLDataType i32 = {kDLInt, 32, 1};
    disco_dref_t x;
    CK_OK(disco_session_empty_device(s, shape, 1, i32, (DLDevice){type, 0}, false, &x));
    static int32_t v[N];
    static uint32_t want[N];
    for (size_t i = 0; i < N; i++)
        want[i] = 0;
    for (int w = 0; w < world; w++) {
        for (size_t i = 0; i < N; i++) {
            v[i] = (int32_t)(mix((uint64_t)w * 977 + i) & 0x7fffffff);
            want[i] += (uint32_t)v[i];
        }
        disco_value_t b = disco_value_bytes((const char *)v, sizeof v);
        CK_OK(disco_session_debug_set(s, x, w, &b));
    }
    for (int round = 1; round < ROUNDS; round++)
        for (size_t i = 0; i < N; i++)
            want[i] *= (uint32_t)world;
    disco_dref_t cur = x;
    for (int round = 0; round < ROUNDS; round++) {
        disco_value_t args[3] = {
            {.type = DISCO_T_DREF, .v.reg = cur}, disco_value_str("sum"), disco_value_bool(false)};
        disco_dref_t next;
        CK_OK(disco_session_call_by_name(s, "disco.allreduce", args, 3, &next));
        CK_OK(disco_session_free_reg(s, cur)); /* freed while later calls are queued */
        cur = next;
    }
    for (int w = 0; w < world; w++) {
        CK_OK(disco_session_sync(s, w));
        expect_bytes(s, cur, w, want, sizeof want, "64 chained allreduces");
    }
    expect_kernels(s, k.two_shot, ROUNDS);
    CK_OK(disco_session_free_reg(s, cur));
    disco_session_close(s);
}
END_TEST

/* A straggler inside the kernel (DISCO_SIM_AR_SLOW: rank 1 waits 200 ms
 * before each read of the peers' bytes), and worker 0 overwrites its input
 * as soon as its call returns: the result is still the sum of the inputs
 * as they were, on every member. Worker 0's kernel may not end before the
 * straggler read its input (END), and in two-shot nobody may gather the
 * straggler's slice before it is reduced (MID). */
START_TEST(test_straggler)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_SIM_AR_SLOW", "1:200000", 1);
    const struct shape_case k = {2 + _i % 2, 1, _i >= 2, false};
    disco_session_t *s = open_case(kDLExtDev, &k, 1u << 20);
    enum { N = 96 };
    disco_dref_t x = patterned(s, kDLExtDev, N);
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", args, 3, &r));
    static float junk[N], p[N], want[N];
    for (int i = 0; i < N; i++)
        junk[i] = -1e6f;
    disco_value_t b = disco_value_bytes((const char *)junk, sizeof junk);
    CK_OK(disco_session_debug_set(s, x, 0, &b));
    for (int w = 0; w < k.world; w++) {
        pattern(p, N, w);
        for (int i = 0; i < N; i++)
            want[i] += p[i];
    }
    for (int w = 0; w < k.world; w++) {
        CK_OK(disco_session_sync(s, w));
        expect_bytes(s, r, w, want, sizeof want, "allreduce with a straggler");
    }
    expect_kernels(s, k.two_shot, 1);
    disco_session_close(s);
}
END_TEST

/* A group larger than the kernels take (DISCO_AR_MAX_RANKS + 1 = 17
 * workers, outnumbering the cores 8 to 1) goes the host-staged way: the
 * same results, no kernel counted. */
START_TEST(test_large_group_staged)
{
    NEED_DEVICE(kDLExtDev);
    const struct shape_case k = {(int)DISCO_AR_MAX_RANKS + 1, 1, false, false};
    disco_session_t *s = open_case(kDLExtDev, &k, 1u << 20);
    check_one(s, kDLExtDev, (DLDataType){kDLFloat, 32, 1}, DISCO_REDUCE_SUM, 100, 1);
    check_one(s, kDLExtDev, (DLDataType){kDLBfloat, 16, 1}, DISCO_REDUCE_AVG, 37, 1);
    expect_kernels(s, false, 0);
    disco_session_close(s);
}
END_TEST

/* A member whose kernel launch fails after the go barrier
 * (DISCO_SIM_AR_LAUNCH_FAIL), while the others already wait for its flags
 * inside theirs: the call is given up at once instead of the others
 * waiting out the 20 s deadline. Worker 0's failure breaks the session
 * with its detail; another worker's ends that worker, which the session
 * reports as its death. */
START_TEST(test_launch_fails)
{
    NEED_DEVICE(kDLExtDev);
    int rank = _i % 2;
    setenv("DISCO_SIM_AR_LAUNCH_FAIL", rank ? "1" : "0", 1);
    call_timeout_ms = 20000;
    const struct shape_case k = {3, 1, false, _i >= 2};
    disco_session_t *s = open_case(kDLExtDev, &k, 1u << 20);
    disco_dref_t x = patterned(s, kDLExtDev, 64);
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
    int64_t t0 = disco_now_ns();
    disco_dref_t r;
    disco_status_t st = disco_session_call_by_name(s, "disco.allreduce", args, 3, &r);
    for (int w = 0; w < k.world && st == DISCO_OK; w++)
        st = disco_session_sync(s, w);
    if (rank == 0) {
        CK_STATUS(st, DISCO_E_SYS);
        CK_HAS("launch refused");
    } else {
        CK_STATUS(st, DISCO_E_WORKER_DIED);
        CK_HAS("worker 1");
    }
    ck_assert_msg(disco_now_ns() - t0 < 10 * 1000000000LL, "took %lld ms",
                  (long long)((disco_now_ns() - t0) / 1000000));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
    disco_session_close(s);
}
END_TEST

/* A member killed inside the kernel: every read of a peer's bytes waits
 * 300 ms first (DISCO_SIM_PEER_COPY_US), so the others are waiting for its
 * flags when it dies; the call (or the next sync) fails with
 * DISCO_E_WORKER_DIED naming it, well before any deadline. */
START_TEST(test_death_in_kernel)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_SIM_PEER_COPY_US", "300000", 1);
    const struct shape_case k = {2 + _i % 3, 1, _i >= 3, _i % 2 == 1};
    disco_session_t *s = open_case(kDLExtDev, &k, 1u << 20);
    int victim = k.world - 1;
    disco_dref_t x = patterned(s, kDLExtDev, 64);
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
    expect_death_during(s, "disco.allreduce", args, 3, victim);
    disco_session_close(s);
}
END_TEST

Suite *suite_gpu_ar(void)
{
    Suite *s = suite_create("gpu_ar");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_job_checks);
    tcase_add_test(tc, test_plan_and_ranges);
    /* Loop index: the sim cases first, then the same on CUDA. */
    tcase_add_loop_test(tc, test_ops_and_dtypes, 0, 2 * NCASES);
    tcase_add_loop_test(tc, test_pieces, 0, 8);
    tcase_add_loop_test(tc, test_back_to_back, 0, 8);
    tcase_add_loop_test(tc, test_straggler, 0, 4);
    tcase_add_test(tc, test_large_group_staged);
    tcase_add_loop_test(tc, test_launch_fails, 0, 4);
    tcase_add_loop_test(tc, test_death_in_kernel, 0, 6);
    suite_add_tcase(s, tc);
    return s;
}
