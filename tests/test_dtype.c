/* test_dtype.c - element types, fp16/bf16 conversions and the reduction
 * kernels: exhaustive conversion checks against double-arithmetic references,
 * every (dtype, op) pair against plain reference loops, and the edge cases
 * of the documented semantics (wrap, truncation, NaN, bool, aliasing). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "workers/value/half.h"

#define OK(call)                                                                                   \
    do {                                                                                           \
        disco_status_t st_ = (call);                                                               \
        ck_assert_msg(st_ == DISCO_OK, "%s: %s (%s)", #call, disco_err_name(st_),                  \
                      disco_last_error());                                                         \
    } while (0)

#define FAILS(call, code)                                                                          \
    do {                                                                                           \
        disco_status_t st_ = (call);                                                               \
        ck_assert_msg(st_ == (code), "%s: got %s (%s), want %s", #call, disco_err_name(st_),       \
                      disco_last_error(), disco_err_name(code));                                   \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void) /* xorshift64*, deterministic */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- the two 16-bit formats, described for the double references -------- */

typedef struct fmt {
    const char *name;
    int mant, ebits; /* fraction bits, exponent bits */
    unsigned inf;    /* bits of +inf */
    float (*widen)(uint16_t);
    uint16_t (*narrow)(float);
    void (*widen_n)(float *, const uint16_t *, size_t);
    void (*narrow_n)(uint16_t *, const float *, size_t);
    double pos[0x7f81]; /* value of every positive bit pattern up to +inf */
} fmt_t;

static float w16(uint16_t h)
{
    return disco_fp16_to_fp32(h);
}
static uint16_t n16(float f)
{
    return disco_fp32_to_fp16(f);
}
static float wb16(uint16_t h)
{
    return disco_bf16_to_fp32(h);
}
static uint16_t nb16(float f)
{
    return disco_fp32_to_bf16(f);
}

static fmt_t fmts[2] = {
    {"float16", 10, 5, 0x7c00, w16, n16, disco_fp16_to_fp32_n, disco_fp32_to_fp16_n, {0}},
    {"bfloat16", 7, 8, 0x7f80, wb16, nb16, disco_bf16_to_fp32_n, disco_fp32_to_bf16_n, {0}},
};

/* Value of a bit pattern, from the format's definition. */
static double ref_decode(const fmt_t *f, unsigned bits)
{
    int bias = (1 << (f->ebits - 1)) - 1;
    unsigned e = (bits >> f->mant) & ((1u << f->ebits) - 1), m = bits & ((1u << f->mant) - 1);
    double v;
    if (e == (1u << f->ebits) - 1)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - bias - f->mant);
    else
        v = ldexp(m + (1u << f->mant), (int)e - bias - f->mant);
    return (bits & 0x8000u) ? -v : v;
}

static void fmt_init(fmt_t *f)
{
    for (unsigned i = 0; i <= f->inf; i++)
        f->pos[i] = ref_decode(f, i);
}

static double fmt_max(const fmt_t *f)
{
    return f->pos[f->inf - 1];
}

/* x rounded to the format, ties to even, in double arithmetic: scale so the
 * format's ulp at x is 1, nearbyint (default mode: ties to even), scale back;
 * beyond the largest finite value: infinity. */
static double ref_round(const fmt_t *f, double x)
{
    if (isnan(x) || isinf(x) || x == 0)
        return x;
    int bias = (1 << (f->ebits - 1)) - 1, e;
    double a = fabs(x);
    frexp(a, &e); /* a = g * 2^e, g in [0.5, 1) */
    int lead = e - 1 < 1 - bias ? 1 - bias : e - 1;
    double ulp = ldexp(1.0, lead - f->mant);
    double r = nearbyint(a / ulp) * ulp;
    if (r > fmt_max(f))
        r = INFINITY;
    return copysign(r, x);
}

/* Bits of a value of the format (finite or infinite, not NaN). */
static unsigned ref_encode(const fmt_t *f, double v)
{
    unsigned sign = signbit(v) ? 0x8000u : 0;
    double a = fabs(v);
    unsigned lo = 0, hi = f->inf;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (f->pos[mid] < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    ck_assert_msg(f->pos[lo] == a, "ref_encode(%s, %a): not a value of the format", f->name, v);
    return sign | lo;
}

static bool is_nan16(const fmt_t *f, unsigned bits)
{
    return (bits & 0x7fffu) > f->inf;
}

/* narrow(x) against the reference; NaN must stay NaN with its sign. */
static void check_narrow(const fmt_t *f, float x)
{
    unsigned got = f->narrow(x);
    if (isnan(x)) {
        ck_assert_msg(is_nan16(f, got) && (got >> 15) == (unsigned)(signbit(x) != 0),
                      "narrow %s(%a [%08x]) = %04x: want a NaN of the same sign", f->name, x,
                      (unsigned)disco__f32_bits(x), got);
        return;
    }
    unsigned want = ref_encode(f, ref_round(f, x));
    ck_assert_msg(got == want, "narrow %s(%a [%08x]) = %04x, want %04x", f->name, x,
                  (unsigned)disco__f32_bits(x), got, want);
}

/* Every one of the 65536 bit patterns widens to exactly its value (NaN to a
 * NaN of the same sign), narrows back to itself (NaN: to a NaN, quiet NaNs
 * bit-exactly), and the bulk converters agree with the scalar ones. */
START_TEST(test_all_patterns)
{
    fmt_t *f = &fmts[_i];
    fmt_init(f);
    static uint16_t in[65536], back[65536];
    static float wide[65536];
    unsigned quiet = 1u << (f->mant - 1);
    for (unsigned b = 0; b < 65536; b++) {
        in[b] = (uint16_t)b;
        float w = f->widen((uint16_t)b);
        double want = ref_decode(f, b);
        if (is_nan16(f, b)) {
            ck_assert_msg(isnan(w) && (signbit(w) != 0) == ((b >> 15) != 0),
                          "widen %s(%04x) = %a: want a NaN of the same sign", f->name, b, w);
            unsigned r = f->narrow(w);
            ck_assert_msg(is_nan16(f, r) && (r >> 15) == (b >> 15),
                          "narrow %s(widen(%04x)) = %04x: want a NaN", f->name, b, r);
            if (b & quiet)
                ck_assert_msg(r == b, "quiet NaN %s %04x came back as %04x", f->name, b, r);
        } else {
            ck_assert_msg(w == want && (signbit(w) != 0) == (signbit(want) != 0),
                          "widen %s(%04x) = %a, want %a", f->name, b, w, want);
            unsigned r = f->narrow(w);
            ck_assert_msg(r == b, "narrow %s(widen(%04x)) = %04x", f->name, b, r);
        }
    }
    f->widen_n(wide, in, 65536);
    f->narrow_n(back, wide, 65536);
    for (unsigned b = 0; b < 65536; b++) {
        float w = f->widen((uint16_t)b);
        ck_assert_msg(memcmp(&wide[b], &w, 4) == 0, "%s widen_n differs from widen at %04x",
                      f->name, b);
        ck_assert_msg(back[b] == f->narrow(w), "%s narrow_n differs from narrow at %04x", f->name,
                      b);
    }
}
END_TEST

/* Narrowing rounds to nearest even against the double reference: at, just
 * below and just above every midpoint between neighbouring values (subnormal,
 * normal, and the one past the largest finite value, which rounds to inf),
 * on 2^20 random float bit patterns, and on named cases. */
START_TEST(test_rounding)
{
    fmt_t *f = &fmts[_i];
    fmt_init(f);
    for (unsigned b = 0; b < f->inf; b++) {
        double lo = f->pos[b];
        double hi = b + 1 < f->inf ? f->pos[b + 1] : 2 * fmt_max(f) - f->pos[b - 1];
        float mid = (float)((lo + hi) / 2);
        ck_assert_msg((double)mid == (lo + hi) / 2, "midpoint of %s %04x not a float", f->name, b);
        float xs[4] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 4; k++) {
            check_narrow(f, xs[k]);
            check_narrow(f, -xs[k]);
        }
    }
    for (int k = 0; k < (1 << 20); k++)
        check_narrow(f, f32_of((uint32_t)rnd()));
    float special[] = {0.0f,    -0.0f,    INFINITY, -INFINITY, NAN,        -NAN,
                       FLT_MAX, -FLT_MAX, FLT_MIN,  0x1p-149f, -0x1p-149f, f32_of(0x7f800001u)};
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
        check_narrow(f, special[k]);
    if (_i == 0) { /* float16, by hand */
        ck_assert_uint_eq(disco_fp32_to_fp16(65504.0f), 0x7bff);
        ck_assert_uint_eq(disco_fp32_to_fp16(nextafterf(65520.0f, 0)), 0x7bff);
        ck_assert_uint_eq(disco_fp32_to_fp16(65520.0f), 0x7c00); /* tie, odd max: to inf */
        ck_assert_uint_eq(disco_fp32_to_fp16(-1e6f), 0xfc00);
        ck_assert_uint_eq(disco_fp32_to_fp16(0x1p-25f), 0x0000);        /* tie to even 0 */
        ck_assert_uint_eq(disco_fp32_to_fp16(0x1.000002p-25f), 0x0001); /* above the tie */
        ck_assert_uint_eq(disco_fp32_to_fp16(0x3p-25f), 0x0002);        /* tie to even 2 */
        ck_assert_uint_eq(disco_fp32_to_fp16(0x7ffp-25f), 0x0400);      /* to smallest normal */
        ck_assert_uint_eq(disco_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
        ck_assert_uint_eq(disco_fp32_to_fp16(1.0f + 0x3p-11f), 0x3c02);
        ck_assert_uint_eq(disco_fp32_to_fp16(-0x1p-149f), 0x8000);
    } else { /* bfloat16, by hand */
        ck_assert_uint_eq(disco_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
        ck_assert_uint_eq(disco_fp32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
        ck_assert_uint_eq(disco_fp32_to_bf16(FLT_MAX), 0x7f80);
        ck_assert_uint_eq(disco_fp32_to_bf16(0x1p-134f), 0x0000); /* subnormal tie to even */
        ck_assert_uint_eq(disco_fp32_to_bf16(0x3p-134f), 0x0002);
        ck_assert_uint_eq(disco_fp32_to_bf16(f32_of(0xff800001u)), 0xffc0); /* sNaN: quiet */
    }
}
END_TEST

/* ---- names ------------------------------------------------------------- */

static const struct {
    DLDataType t;
    const char *name;
    size_t bytes;
} supported[] = {
    {{kDLFloat, 16, 1}, "float16", 2}, {{kDLBfloat, 16, 1}, "bfloat16", 2},
    {{kDLFloat, 32, 1}, "float32", 4}, {{kDLFloat, 64, 1}, "float64", 8},
    {{kDLInt, 8, 1}, "int8", 1},       {{kDLInt, 16, 1}, "int16", 2},
    {{kDLInt, 32, 1}, "int32", 4},     {{kDLInt, 64, 1}, "int64", 8},
    {{kDLUInt, 8, 1}, "uint8", 1},     {{DISCO_DL_BOOL, 8, 1}, "bool", 1},
};
#define NSUP ((int)(sizeof supported / sizeof supported[0]))

/* Each supported dtype has its size and name and passes the check; TVM's
 * bool {kDLUInt, 1} is one byte; unsupported ones give 0 bytes and
 * DISCO_E_BAD_TYPE with a message naming them. */
START_TEST(test_bytes_and_check)
{
    char buf[DISCO_DTYPE_STR_MAX];
    for (int i = 0; i < NSUP; i++) {
        ck_assert_uint_eq(disco_dtype_bytes(supported[i].t), supported[i].bytes);
        OK(disco_dtype_check(supported[i].t));
        ck_assert_str_eq(disco_dtype_str(supported[i].t, buf, sizeof buf), supported[i].name);
    }
    ck_assert_uint_eq(disco_dtype_bytes((DLDataType){kDLUInt, 1, 1}), 1);
    static const struct {
        DLDataType t;
        const char *msg;
    } bad[] = {
        {{kDLFloat, 8, 1}, "float8"},
        {{kDLInt, 4, 2}, "int4x2"},
        {{kDLFloat, 32, 4}, "float32x4"},
        {{kDLBfloat, 32, 1}, "bfloat32"},
        {{kDLUInt, 16, 1}, "uint16"},
        {{kDLComplex, 64, 1}, "complex64"},
        {{9, 8, 1}, "code=9"},
        {{DISCO_DL_BOOL, 16, 1}, "bool16"},
        {{kDLFloat, 16, 0}, "float16x0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_uint_eq(disco_dtype_bytes(bad[i].t), 0);
        disco_clear_error();
        FAILS(disco_dtype_check(bad[i].t), DISCO_E_BAD_TYPE);
        ck_assert_msg(strstr(disco_last_error(), bad[i].msg) != NULL,
                      "disco_dtype_check(%s): message \"%s\" does not name it", bad[i].msg,
                      disco_last_error());
    }
}
END_TEST

/* parse(str(t)) == t over codes, bit widths and lanes (TVM's bool excepted,
 * as documented); malformed names are refused and leave the output alone;
 * str truncates like snprintf. */
START_TEST(test_str_parse)
{
    char buf[DISCO_DTYPE_STR_MAX];
    static const unsigned bits[] = {1, 4, 8, 16, 32, 64, 128, 255};
    static const unsigned lanes[] = {1, 2, 4, 65535};
    for (unsigned code = 0; code <= DISCO_DL_BOOL; code++)
        for (size_t b = 0; b < 8; b++)
            for (size_t l = 0; l < 4; l++) {
                DLDataType t = {(uint8_t)code, (uint8_t)bits[b], (uint16_t)lanes[l]}, u;
                const char *s = disco_dtype_str(t, buf, sizeof buf);
                ck_assert_msg(disco_dtype_parse(s, &u), "disco_dtype_parse(\"%s\") failed", s);
                if (code == kDLUInt && bits[b] == 1) /* prints as "bool" */
                    t = (DLDataType){DISCO_DL_BOOL, 8, t.lanes};
                ck_assert_msg(u.code == t.code && u.bits == t.bits && u.lanes == t.lanes,
                              "disco_dtype_parse(\"%s\") = %u/%u/%u", s, u.code, u.bits, u.lanes);
            }
    static const char *const bad[] = {"",          "float", "float0", "float256", "float32x",
                                      "float32x0", "int8 ", "Int8",   "float032", "float32x65536",
                                      "boolx",     "half",  "int-8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DLDataType u = {77, 77, 77};
        ck_assert_msg(!disco_dtype_parse(bad[i], &u), "disco_dtype_parse(\"%s\") accepted", bad[i]);
        ck_assert_msg(u.code == 77 && u.bits == 77 && u.lanes == 77,
                      "disco_dtype_parse(\"%s\") wrote its output", bad[i]);
    }
    ck_assert(!disco_dtype_parse(NULL, NULL));
    ck_assert_str_eq(disco_dtype_str(DISCO_DTYPE_BFLOAT16, buf, 4), "bfl");
    ck_assert_str_eq(disco_dtype_str(DISCO_DTYPE_BFLOAT16, NULL, 4), "");
}
END_TEST

/* Reduction op names round-trip; unknown ones say so / are refused. */
START_TEST(test_reduce_names)
{
    for (int op = 0; op < DISCO_REDUCE_COUNT; op++) {
        disco_reduce_op_t got = (disco_reduce_op_t)-1;
        const char *name = disco_reduce_name((disco_reduce_op_t)op);
        ck_assert_msg(disco_reduce_parse(name, &got) && got == (disco_reduce_op_t)op,
                      "disco_reduce_parse(\"%s\")", name);
    }
    ck_assert_str_eq(disco_reduce_name(DISCO_REDUCE_AVG), "avg");
    ck_assert_str_eq(disco_reduce_name((disco_reduce_op_t)DISCO_REDUCE_COUNT), "unknown");
    disco_reduce_op_t got = DISCO_REDUCE_MAX;
    ck_assert(!disco_reduce_parse("mean", &got) && got == DISCO_REDUCE_MAX);
    ck_assert(!disco_reduce_parse(NULL, &got));
}
END_TEST

/* ---- reductions ---------------------------------------------------------- */

/* Element access by dtype index (order of `supported`). */
static int64_t load_int(int ti, const void *p, size_t i)
{
    switch (ti) {
    case 4:
        return ((const int8_t *)p)[i];
    case 5:
        return ((const int16_t *)p)[i];
    case 6:
        return ((const int32_t *)p)[i];
    case 7:
        return ((const int64_t *)p)[i];
    default:
        return ((const uint8_t *)p)[i];
    }
}

static int64_t wrap_int(int ti, uint64_t v)
{
    switch (ti) {
    case 4:
        return (int8_t)(uint8_t)v;
    case 5:
        return (int16_t)(uint16_t)v;
    case 6:
        return (int32_t)(uint32_t)v;
    case 7:
        return (int64_t)v;
    default:
        return (uint8_t)v;
    }
}

static double load_float(int ti, const void *p, size_t i)
{
    switch (ti) {
    case 0:
        return disco_fp16_to_fp32(((const uint16_t *)p)[i]);
    case 1:
        return disco_bf16_to_fp32(((const uint16_t *)p)[i]);
    case 2:
        return ((const float *)p)[i];
    default:
        return ((const double *)p)[i];
    }
}

static void store_float(int ti, void *p, size_t i, double x)
{
    switch (ti) {
    case 0:
        ((uint16_t *)p)[i] = disco_fp32_to_fp16((float)x);
        break;
    case 1:
        ((uint16_t *)p)[i] = disco_fp32_to_bf16((float)x);
        break;
    case 2:
        ((float *)p)[i] = (float)x;
        break;
    default:
        ((double *)p)[i] = x;
    }
}

/* Random sources: floats k/64 (|x| <= 8) for float16, k/16 (|x| < 16) for
 * bfloat16, so that every input is exact and fp32 partial sums are exact;
 * uniform in [-4, 4) for float32/64; all bit patterns for integers; bool
 * bytes half zero, half random nonzero. */
static void fill(int ti, void *p, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rnd();
        double u = (double)(r >> 11) * 0x1p-53 * 8 - 4;
        switch (ti) {
        case 0:
            store_float(ti, p, i, (double)((int)(r % 1025) - 512) / 64);
            break;
        case 1:
            store_float(ti, p, i, (double)((int)(r % 511) - 255) / 16);
            break;
        case 2:
        case 3:
            store_float(ti, p, i, u);
            break;
        case 9:
            ((uint8_t *)p)[i] = (r & 1) ? (uint8_t)((r >> 8) % 255 + 1) : 0;
            break;
        default:
            memcpy((char *)p + i * supported[ti].bytes, &r, supported[ti].bytes);
        }
    }
}

#define MAXSRC  9
#define NCOUNTS 5
/* Odd sizes, one spanning several blocks of any kernel block size <= 5000. */
static const size_t counts[NCOUNTS] = {0, 1, 7, 1000, 10007};

/* Checks element i of dst against the documented semantics. */
static void check_elem(int ti, disco_reduce_op_t op, const void *const *srcs, int n,
                       const void *dst, size_t i, size_t count)
{
    const char *on = disco_reduce_name(op), *tn = supported[ti].name;
    if (ti == 2 || ti == 3) { /* float32/64: same-type fold in source order, exact */
        double got = load_float(ti, dst, i), want;
        if (ti == 2) {
            float a = ((const float *)srcs[0])[i];
            for (int k = 1; k < n; k++) {
                float x = ((const float *)srcs[k])[i];
                a = op == DISCO_REDUCE_PROD  ? a * x
                    : op == DISCO_REDUCE_MIN ? (x < a ? x : a)
                    : op == DISCO_REDUCE_MAX ? (x > a ? x : a)
                                             : a + x;
            }
            want = op == DISCO_REDUCE_AVG ? a / (float)n : a;
        } else {
            double a = ((const double *)srcs[0])[i];
            for (int k = 1; k < n; k++) {
                double x = ((const double *)srcs[k])[i];
                a = op == DISCO_REDUCE_PROD  ? a * x
                    : op == DISCO_REDUCE_MIN ? (x < a ? x : a)
                    : op == DISCO_REDUCE_MAX ? (x > a ? x : a)
                                             : a + x;
            }
            want = op == DISCO_REDUCE_AVG ? a / n : a;
        }
        ck_assert_msg(got == want, "disco_reduce(%s, %s, nsrc=%d, count=%zu)[%zu] = %a, want %a",
                      on, tn, n, count, i, got, want);
    } else if (ti <= 1) { /* float16/bfloat16: exact result in double, tolerance */
        double a = load_float(ti, srcs[0], i);
        for (int k = 1; k < n; k++) {
            double x = load_float(ti, srcs[k], i);
            a = op == DISCO_REDUCE_PROD  ? a * x
                : op == DISCO_REDUCE_MIN ? fmin(a, x)
                : op == DISCO_REDUCE_MAX ? fmax(a, x)
                                         : a + x;
        }
        double want = op == DISCO_REDUCE_AVG ? a / n : a;
        double got = load_float(ti, dst, i);
        /* Tolerance: the result is rounded once from fp32 to the 16-bit type,
         * at most half an ulp: 2^-11 |x| for fp16, 2^-8 for bf16 (2^-25
         * absolute in fp16's subnormal range). The fp32 accumulation itself
         * is exact for these inputs' sums; products of up to 9 sources and
         * the avg division add at most 8 fp32 roundings (8 * 2^-24 = 2^-21
         * relative): we allow 2^-20. min and max involve no rounding: exact.
         * Products past fp16's range must be infinite (IEEE: from 65520). */
        double rel = (ti == 0 ? 0x1p-11 : 0x1p-8) + 0x1p-20, abs_ = ti == 0 ? 0x1p-25 : 0;
        double tol = op == DISCO_REDUCE_MIN || op == DISCO_REDUCE_MAX ? 0 : rel * fabs(want) + abs_;
        bool overflow =
            ti == 0 && isinf(got) && (got > 0) == (want > 0) && fabs(want) >= 65520 * (1 - 0x1p-20);
        ck_assert_msg(overflow || fabs(got - want) <= tol,
                      "disco_reduce(%s, %s, nsrc=%d, count=%zu)[%zu] = %a, want %a +- %a", on, tn,
                      n, count, i, got, want, tol);
    } else if (ti == 9) { /* bool */
        int ntrue = 0;
        for (int k = 0; k < n; k++)
            ntrue += ((const uint8_t *)srcs[k])[i] != 0;
        int want = op == DISCO_REDUCE_SUM || op == DISCO_REDUCE_MAX ? ntrue > 0
                   : op == DISCO_REDUCE_AVG                         ? 2 * ntrue >= n
                                                                    : ntrue == n;
        int got = ((const uint8_t *)dst)[i];
        ck_assert_msg(got == want, "disco_reduce(%s, bool, nsrc=%d, count=%zu)[%zu] = %d, want %d",
                      on, n, count, i, got, want);
    } else { /* integers */
        uint64_t s = 0, p = 1;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        __int128 exact = 0; /* GCC extension, test only: exact reference for avg */
        for (int k = 0; k < n; k++) {
            int64_t x = load_int(ti, srcs[k], i);
            s += (uint64_t)x;
            p *= (uint64_t)x;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
            exact += x;
        }
        int64_t want = op == DISCO_REDUCE_SUM    ? wrap_int(ti, s)
                       : op == DISCO_REDUCE_PROD ? wrap_int(ti, p)
                       : op == DISCO_REDUCE_MIN  ? lo
                       : op == DISCO_REDUCE_MAX  ? hi
                                                 : (int64_t)(exact / n); /* truncates */
        int64_t got = load_int(ti, dst, i);
        ck_assert_msg(got == want,
                      "disco_reduce(%s, %s, nsrc=%d, count=%zu)[%zu] = %lld, want %lld", on, tn, n,
                      count, i, (long long)got, (long long)want);
    }
}

/* Every op of one dtype (one loop iteration per dtype), nsrc 1..9 (one to
 * three passes of up to four sources), counts 0,
 * 1, 7, 1000 and one spanning several blocks, against the reference loops;
 * the byte after the last element is never written. */
START_TEST(test_reduce_matrix)
{
    int ti = _i;
    size_t sz = supported[ti].bytes, maxc = counts[NCOUNTS - 1];
    void *src[MAXSRC];
    for (int k = 0; k < MAXSRC; k++) {
        src[k] = malloc(maxc * sz);
        ck_assert_ptr_nonnull(src[k]);
        fill(ti, src[k], maxc);
    }
    unsigned char *dst = malloc(maxc * sz + 1);
    ck_assert_ptr_nonnull(dst);
    for (int op = 0; op < DISCO_REDUCE_COUNT; op++)
        for (int n = 1; n <= MAXSRC; n++)
            for (int c = 0; c < NCOUNTS; c++) {
                size_t count = counts[c];
                memset(dst, 0xa5, maxc * sz + 1);
                OK(disco_reduce((disco_reduce_op_t)op, supported[ti].t, dst,
                                (const void *const *)src, n, count));
                ck_assert_msg(dst[count * sz] == 0xa5, "disco_reduce(%s, %s) wrote past count",
                              disco_reduce_name((disco_reduce_op_t)op), supported[ti].name);
                for (size_t i = 0; i < count; i++)
                    check_elem(ti, (disco_reduce_op_t)op, (const void *const *)src, n, dst, i,
                               count);
            }
    free(dst);
    for (int k = 0; k < MAXSRC; k++)
        free(src[k]);
}
END_TEST

/* dst may be the very buffer of srcs[0] (or of any source): the result is
 * the same as into a separate buffer, for every dtype and op. */
START_TEST(test_alias)
{
    int ti = _i;
    size_t sz = supported[ti].bytes, count = counts[NCOUNTS - 1];
    void *src[3], *want = malloc(count * sz), *buf = malloc(count * sz);
    ck_assert(want != NULL && buf != NULL);
    for (int k = 0; k < 3; k++) {
        src[k] = malloc(count * sz);
        ck_assert_ptr_nonnull(src[k]);
        fill(ti, src[k], count);
    }
    for (int op = 0; op < DISCO_REDUCE_COUNT; op++) {
        OK(disco_reduce((disco_reduce_op_t)op, supported[ti].t, want, (const void *const *)src, 3,
                        count));
        for (int k = 0; k < 3; k++) {
            const void *s[3] = {src[0], src[1], src[2]};
            memcpy(buf, src[k], count * sz);
            s[k] = buf;
            OK(disco_reduce((disco_reduce_op_t)op, supported[ti].t, buf, s, 3, count));
            ck_assert_msg(memcmp(buf, want, count * sz) == 0,
                          "disco_reduce(%s, %s) in place over srcs[%d] differs",
                          disco_reduce_name((disco_reduce_op_t)op), supported[ti].name, k);
        }
    }
    for (int k = 0; k < 3; k++)
        free(src[k]);
    free(want);
    free(buf);
}
END_TEST

#define REDUCE(op, t, d, n, ...)                                                                   \
    OK(disco_reduce(op, t, d, (const void *const[]){__VA_ARGS__}, n, 1))

/* fp16/bf16 accumulate in fp32 across all sources and round once: 2048 +
 * 1 + 1 + 1 gives 2052 in fp16 (rounding after each add would stick at
 * 2048); 256 + 1 + 1 + 1 gives 260 in bf16 (not 256). */
START_TEST(test_single_rounding)
{
    uint16_t a = disco_fp32_to_fp16(2048), one = disco_fp32_to_fp16(1), d;
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT16, &d, 4, &a, &one, &one, &one);
    ck_assert_msg(disco_fp16_to_fp32(d) == 2052, "disco_reduce(sum, float16) = %g, want 2052",
                  disco_fp16_to_fp32(d));
    uint16_t b = disco_fp32_to_bf16(256), bone = disco_fp32_to_bf16(1);
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_BFLOAT16, &d, 4, &b, &bone, &bone, &bone);
    ck_assert_msg(disco_bf16_to_fp32(d) == 260, "disco_reduce(sum, bfloat16) = %g, want 260",
                  disco_bf16_to_fp32(d));
    /* avg divides the fp32 sum: 2051 / 4 = 512.75, a tie between 512.5 and
     * 513 in fp16 (ulp 0.5 there); the even one is 513. */
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_FLOAT16, &d, 4, &a, &one, &one, &one);
    ck_assert_msg(disco_fp16_to_fp32(d) == 513, "disco_reduce(avg, float16) = %g, want 513",
                  disco_fp16_to_fp32(d));
    /* Overflow of the fp32 result rounds to inf. */
    uint16_t big = disco_fp32_to_fp16(60000);
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT16, &d, 2, &big, &big);
    ck_assert_msg(d == 0x7c00, "disco_reduce(sum, float16, 60000 + 60000) = %04x, want inf", d);
}
END_TEST

/* Integer sum and prod wrap in the element type; avg is the exact mean
 * truncated toward zero, even where the sum overflows int64. */
START_TEST(test_int_semantics)
{
    int8_t i8a = 127, i8b = 1, i8c = -128, i8m = -1, i8d;
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_INT8, &i8d, 2, &i8a, &i8b);
    ck_assert_int_eq(i8d, -128);
    REDUCE(DISCO_REDUCE_PROD, DISCO_DTYPE_INT8, &i8d, 2, &i8c, &i8m);
    ck_assert_int_eq(i8d, -128);
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT8, &i8d, 3, &i8a, &i8a, &i8a);
    ck_assert_int_eq(i8d, 127); /* no wrap in avg */
    int8_t m3 = -3, z = 0;
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT8, &i8d, 2, &m3, &z);
    ck_assert_int_eq(i8d, -1); /* -1.5 toward zero */
    uint8_t u255 = 255, u1 = 1, u8d;
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_UINT8, &u8d, 2, &u255, &u1);
    ck_assert_uint_eq(u8d, 0);
    REDUCE(DISCO_REDUCE_MAX, DISCO_DTYPE_UINT8, &u8d, 2, &u1, &u255);
    ck_assert_uint_eq(u8d, 255); /* unsigned compare */
    int16_t s300 = 300, s16d;
    REDUCE(DISCO_REDUCE_PROD, DISCO_DTYPE_INT16, &s16d, 2, &s300, &s300);
    ck_assert_int_eq(s16d, (int16_t)(90000 - 65536)); /* 24464 */
    int32_t imax = INT32_MAX, i1 = 1, i32d;
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_INT32, &i32d, 2, &imax, &i1);
    ck_assert_int_eq(i32d, INT32_MIN);
    int64_t lmax = INT64_MAX, lmin = INT64_MIN, l1 = 1, lm1 = -1, l3 = 3, d;
    REDUCE(DISCO_REDUCE_SUM, DISCO_DTYPE_INT64, &d, 2, &lmax, &l1);
    ck_assert(d == INT64_MIN);
    REDUCE(DISCO_REDUCE_PROD, DISCO_DTYPE_INT64, &d, 3, &lmin, &lm1, &l3);
    ck_assert(d == INT64_MIN);
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT64, &d, 3, &lmax, &lmax, &lmax);
    ck_assert(d == INT64_MAX);
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT64, &d, 4, &lmin, &lmin, &lmin, &lmin);
    ck_assert(d == INT64_MIN);
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT64, &d, 2, &lmax, &lmin);
    ck_assert(d == 0); /* -0.5 toward zero */
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT64, &d, 3, &lmax, &lmax, &lm1);
    ck_assert(d == (int64_t)(((__int128)INT64_MAX * 2 - 1) / 3));
    REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT64, &d, 3, &lmin, &lmin, &l1);
    ck_assert(d == (int64_t)(((__int128)INT64_MIN * 2 + 1) / 3));
    /* Random int64 triples and quadruples near the extremes, against __int128. */
    for (int t = 0; t < 100000; t++) {
        int n = 2 + t % 3;
        int64_t x[4] = {0};
        __int128 s = 0;
        for (int k = 0; k < n; k++) {
            x[k] = (int64_t)rnd() >> (rnd() % 4);
            s += x[k];
        }
        REDUCE(DISCO_REDUCE_AVG, DISCO_DTYPE_INT64, &d, n, &x[0], &x[1], &x[2], &x[3]);
        ck_assert_msg(d == (int64_t)(s / n), "disco_reduce(avg, int64, nsrc=%d) = %lld", n,
                      (long long)d);
    }
}
END_TEST

/* Floating min and max propagate NaN from any source position; sums of
 * infinities follow IEEE (inf - inf = NaN); for every floating dtype. */
START_TEST(test_float_nan)
{
    for (int ti = 0; ti < 4; ti++) {
        DLDataType t = supported[ti].t;
        double v[3], out; /* room for any floating element */
        for (int pos = 0; pos < 3; pos++)
            for (int op = DISCO_REDUCE_MIN; op <= DISCO_REDUCE_MAX; op++) {
                for (int k = 0; k < 3; k++)
                    store_float(ti, &v[k], 0, k == pos ? NAN : k - 1.0);
                REDUCE((disco_reduce_op_t)op, t, &out, 3, &v[0], &v[1], &v[2]);
                ck_assert_msg(isnan(load_float(ti, &out, 0)),
                              "disco_reduce(%s, %s) with NaN at source %d: %g, want NaN",
                              disco_reduce_name((disco_reduce_op_t)op), supported[ti].name, pos,
                              load_float(ti, &out, 0));
            }
        store_float(ti, &v[0], 0, INFINITY);
        store_float(ti, &v[1], 0, -INFINITY);
        REDUCE(DISCO_REDUCE_SUM, t, &out, 2, &v[0], &v[1]);
        ck_assert_msg(isnan(load_float(ti, &out, 0)), "disco_reduce(sum, %s, inf, -inf)",
                      supported[ti].name);
        REDUCE(DISCO_REDUCE_MAX, t, &out, 2, &v[0], &v[1]);
        ck_assert_msg(load_float(ti, &out, 0) == INFINITY, "disco_reduce(max, %s, inf, -inf)",
                      supported[ti].name);
    }
}
END_TEST

/* bool: sum/max = or, prod/min = and, avg = majority with ties true; any
 * nonzero byte is true and results are 0 or 1; TVM's bool {kDLUInt, 1}
 * behaves the same. */
START_TEST(test_bool)
{
    uint8_t t = 7, f = 0, t2 = 255, d;
    DLDataType types[2] = {DISCO_DTYPE_BOOL, {kDLUInt, 1, 1}};
    for (int i = 0; i < 2; i++) {
        REDUCE(DISCO_REDUCE_SUM, types[i], &d, 2, &f, &t);
        ck_assert_uint_eq(d, 1);
        REDUCE(DISCO_REDUCE_MAX, types[i], &d, 2, &f, &f);
        ck_assert_uint_eq(d, 0);
        REDUCE(DISCO_REDUCE_PROD, types[i], &d, 2, &t, &t2);
        ck_assert_uint_eq(d, 1);
        REDUCE(DISCO_REDUCE_MIN, types[i], &d, 3, &t, &f, &t2);
        ck_assert_uint_eq(d, 0);
        REDUCE(DISCO_REDUCE_AVG, types[i], &d, 2, &t, &f);
        ck_assert_uint_eq(d, 1); /* 1 of 2: tie, true */
        REDUCE(DISCO_REDUCE_AVG, types[i], &d, 3, &t, &f, &f);
        ck_assert_uint_eq(d, 0); /* 1 of 3 */
        REDUCE(DISCO_REDUCE_AVG, types[i], &d, 1, &t2);
        ck_assert_uint_eq(d, 1); /* normalized */
    }
}
END_TEST

/* Bad input is refused with the documented code and a message, and dst is
 * left alone: unsupported dtype (named in the message), unknown op, nsrc < 1,
 * NULL or misaligned pointers; count 0 needs no buffers. */
START_TEST(test_errors)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, d[4] = {9, 9, 9, 9};
    const void *s[2] = {a, b};
    disco_clear_error();
    FAILS(disco_reduce(DISCO_REDUCE_SUM, (DLDataType){kDLFloat, 8, 1}, d, s, 2, 4),
          DISCO_E_BAD_TYPE);
    ck_assert_msg(strstr(disco_last_error(), "float8") != NULL, "message \"%s\"",
                  disco_last_error());
    FAILS(disco_reduce(DISCO_REDUCE_SUM, (DLDataType){kDLInt, 4, 2}, d, s, 2, 4), DISCO_E_BAD_TYPE);
    ck_assert_msg(strstr(disco_last_error(), "int4x2") != NULL &&
                      strstr(disco_last_error(), "lanes 2") != NULL,
                  "message \"%s\"", disco_last_error());
    FAILS(disco_reduce((disco_reduce_op_t)5, DISCO_DTYPE_FLOAT32, d, s, 2, 4), DISCO_E_INVAL);
    FAILS(disco_reduce((disco_reduce_op_t)-1, DISCO_DTYPE_FLOAT32, d, s, 2, 4), DISCO_E_INVAL);
    FAILS(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, d, s, 0, 4), DISCO_E_INVAL);
    FAILS(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, NULL, s, 2, 4), DISCO_E_INVAL);
    FAILS(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, d, NULL, 2, 4), DISCO_E_INVAL);
    const void *sn[2] = {a, NULL};
    FAILS(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, d, sn, 2, 4), DISCO_E_INVAL);
    const void *sm[2] = {a, (const char *)b + 1};
    FAILS(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, d, sm, 2, 3), DISCO_E_INVAL);
    ck_assert_msg(strstr(disco_last_error(), "srcs[1]") != NULL, "message \"%s\"",
                  disco_last_error());
    FAILS(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, (char *)d + 2, s, 2, 3),
          DISCO_E_INVAL);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(d[i] == 9, "a failed disco_reduce wrote dst[%d]", i);
    OK(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, NULL, NULL, 2, 0));
    OK(disco_reduce(DISCO_REDUCE_SUM, DISCO_DTYPE_FLOAT32, d, s, 2, 4));
    ck_assert(d[0] == 2 && d[3] == 5);
}
END_TEST

Suite *suite_dtype(void)
{
    Suite *s = suite_create("dtype");
    TCase *names = tcase_create("names");
    tcase_set_timeout(names, 10);
    tcase_add_test(names, test_bytes_and_check);
    tcase_add_test(names, test_str_parse);
    tcase_add_test(names, test_reduce_names);
    suite_add_tcase(s, names);

    TCase *conv = tcase_create("convert"); /* loop index: 0 float16, 1 bfloat16 */
    tcase_set_timeout(conv, 60);
    tcase_add_loop_test(conv, test_all_patterns, 0, 2);
    tcase_add_loop_test(conv, test_rounding, 0, 2);
    suite_add_tcase(s, conv);

    TCase *red = tcase_create("reduce"); /* loop index: a dtype of `supported` */
    tcase_set_timeout(red, 60);
    tcase_add_loop_test(red, test_reduce_matrix, 0, NSUP);
    tcase_add_loop_test(red, test_alias, 0, NSUP);
    tcase_add_test(red, test_single_rounding);
    tcase_add_test(red, test_int_semantics);
    tcase_add_test(red, test_float_nan);
    tcase_add_test(red, test_bool);
    tcase_add_test(red, test_errors);
    suite_add_tcase(s, red);
    return s;
}
