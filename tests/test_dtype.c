/* test_dtype.c - element types and fp16/bf16 conversions: names, sizes and
 * parsing, and exhaustive conversion checks against double-arithmetic
 * references. The reduction kernels are in test_dtype_reduce.c. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "tests/dtype_util.h"
#include "workers/value/half.h" /* disco__f32_bits */

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

    return s;
}
