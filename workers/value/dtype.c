/* dtype.c - element types, bulk fp16/bf16 conversions and the reduction
 * kernels of the CPU collectives (see dtype.h). */

/* -O2 in GCC 12 vectorizes only loops that need no peeling or runtime
 * checks; these loops are the point of this file, so let the vectorizer use
 * its full cost model here. no-trapping-math lets it evaluate both arms of
 * the NaN-propagating min/max (results are unchanged; only floating-point
 * exception flags, which disco never reads, may differ). Must precede every
 * include, so that the inline helpers of dtype.h get the same options and
 * inline into the kernels. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

#include "disco/dtype.h"

#include <stdio.h>
#include <string.h>

#include "workers/value/half.h"

/* On x86-64 with GCC and glibc (ifunc), each kernel is compiled twice, for
 * the baseline (SSE2) and for AVX2, and the loader picks one per machine:
 * the same C code, auto-vectorized twice over (AVX2 about doubles fp16/bf16
 * conversion throughput, measured). Both compute bit-identical results: no FMA, no
 * reassociation. -DDISCO_NO_CLONES turns this off. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__) &&   \
    !defined(DISCO_NO_CLONES)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* ---- names --------------------------------------------------------------- */

/* Supported types, index of the kernel table. */
enum { T_F16, T_BF16, T_F32, T_F64, T_I8, T_I16, T_I32, T_I64, T_U8, T_BOOL, T_COUNT };

static int type_index(DLDataType t)
{
    if (t.lanes != 1)
        return -1;
    switch (t.code) {
    case kDLFloat:
        return t.bits == 16 ? T_F16 : t.bits == 32 ? T_F32 : t.bits == 64 ? T_F64 : -1;
    case kDLBfloat:
        return t.bits == 16 ? T_BF16 : -1;
    case kDLInt:
        return t.bits == 8    ? T_I8
               : t.bits == 16 ? T_I16
               : t.bits == 32 ? T_I32
               : t.bits == 64 ? T_I64
                              : -1;
    case kDLUInt:
        return t.bits == 8 ? T_U8 : t.bits == 1 ? T_BOOL : -1;
    case DISCO_DL_BOOL:
        return t.bits == 8 ? T_BOOL : -1;
    default:
        return -1;
    }
}

static const size_t type_bytes[T_COUNT] = {2, 2, 4, 8, 1, 2, 4, 8, 1, 1};

size_t disco_dtype_bytes(DLDataType t)
{
    int i = type_index(t);
    return i < 0 ? 0 : type_bytes[i];
}

/* Code names, indexed by DLDataTypeCode (DISCO_DL_BOOL = 6). */
static const char *const code_names[] = {"int",    "uint",    "float", "handle",
                                         "bfloat", "complex", "bool"};
#define NCODES (sizeof code_names / sizeof code_names[0])

const char *disco_dtype_str(DLDataType t, char *buf, size_t cap)
{
    if (buf == NULL || cap == 0)
        return "";
    char lanes[16] = "";
    if (t.lanes != 1)
        snprintf(lanes, sizeof lanes, "x%u", (unsigned)t.lanes);
    if (t.code >= NCODES)
        snprintf(buf, cap, "dtype(code=%u,bits=%u,lanes=%u)", (unsigned)t.code, (unsigned)t.bits,
                 (unsigned)t.lanes);
    else if ((t.code == DISCO_DL_BOOL && t.bits == 8) || (t.code == kDLUInt && t.bits == 1))
        snprintf(buf, cap, "bool%s", lanes);
    else
        snprintf(buf, cap, "%s%u%s", code_names[t.code], (unsigned)t.bits, lanes);
    return buf;
}

/* Parses a decimal number in [1, max] at *s, advancing *s. */
static bool parse_num(const char **s, unsigned max, unsigned *out)
{
    const char *p = *s;
    unsigned v = 0;
    if (*p < '1' || *p > '9') /* no sign, no leading zero */
        return false;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (unsigned)(*p++ - '0');
        if (v > max)
            return false;
    }
    *s = p;
    *out = v;
    return true;
}

bool disco_dtype_parse(const char *s, DLDataType *out)
{
    if (s == NULL)
        return false;
    for (unsigned code = 0; code < NCODES; code++) { /* no name prefixes another */
        size_t n = strlen(code_names[code]);
        if (strncmp(s, code_names[code], n) != 0)
            continue;
        const char *p = s + n;
        unsigned bits = 8, lanes = 1;
        bool bits_optional = code == DISCO_DL_BOOL;
        if (!(bits_optional && (*p < '0' || *p > '9')) && !parse_num(&p, 255, &bits))
            return false;
        if (*p == 'x') {
            p++;
            if (!parse_num(&p, 65535, &lanes))
                return false;
        }
        if (*p != '\0')
            return false;
        *out = (DLDataType){(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
        return true;
    }
    return false;
}

disco_status_t disco_dtype_check(DLDataType t)
{
    if (type_index(t) >= 0)
        return DISCO_OK;
    char name[DISCO_DTYPE_STR_MAX];
    return disco_set_error(DISCO_E_BAD_TYPE,
                           "unsupported dtype %s (code %u, bits %u, lanes %u); supported: float16 "
                           "bfloat16 float32 float64 int8 int16 int32 int64 uint8 bool, lanes 1",
                           disco_dtype_str(t, name, sizeof name), (unsigned)t.code,
                           (unsigned)t.bits, (unsigned)t.lanes);
}

static const char *const op_names[DISCO_REDUCE_COUNT] = {"sum", "prod", "min", "max", "avg"};

const char *disco_reduce_name(disco_reduce_op_t op)
{
    return (unsigned)op < DISCO_REDUCE_COUNT ? op_names[op] : "unknown";
}

bool disco_reduce_parse(const char *s, disco_reduce_op_t *op_out)
{
    for (int i = 0; s != NULL && i < DISCO_REDUCE_COUNT; i++)
        if (strcmp(s, op_names[i]) == 0) {
            *op_out = (disco_reduce_op_t)i;
            return true;
        }
    return false;
}

/* ---- bulk conversions ---------------------------------------------------- */

float disco_fp16_to_fp32(uint16_t h)
{
    return disco__fp16_to_fp32(h);
}

uint16_t disco_fp32_to_fp16(float f)
{
    return disco__fp32_to_fp16(f);
}

float disco_bf16_to_fp32(uint16_t b)
{
    return disco__bf16_to_fp32(b);
}

uint16_t disco_fp32_to_bf16(float f)
{
    return disco__fp32_to_bf16(f);
}

CLONES void disco_fp16_to_fp32_n(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = disco__fp16_to_fp32(src[i]);
}

CLONES void disco_fp32_to_fp16_n(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = disco__fp32_to_fp16(src[i]);
}

CLONES void disco_bf16_to_fp32_n(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = disco__bf16_to_fp32(src[i]);
}

CLONES void disco_fp32_to_bf16_n(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = disco__fp32_to_bf16(src[i]);
}

/* ---- reduction kernels ----------------------------------------------------
 * Each kernel walks the elements in blocks of BLK: it folds the sources into
 * a local accumulator block (held in L1, type A), up to four sources per
 * pass, then converts and stores the block. Every loop is element-wise over
 * arrays the compiler can prove distinct from the accumulator, so it
 * vectorizes with no runtime alias checks; fp16/bf16 are widened and narrowed
 * a block at a time. Because a block of every source is read before that
 * block of dst is written, dst may be any one of the sources.
 */

#define BLK 2048

typedef void (*kernel_fn)(void *dst, const void *const *srcs, int n, size_t count);

/* One pass over the block: acc[i] = INIT folded with sources k .. k+j-1. */
#define PASS(j, INIT, L, F)                                                                        \
    do {                                                                                           \
        const elem_t *p0 = (const elem_t *)srcs[k] + b, *p1 = p0, *p2 = p0, *p3 = p0;              \
        if (j > 1)                                                                                 \
            p1 = (const elem_t *)srcs[k + 1] + b;                                                  \
        if (j > 2)                                                                                 \
            p2 = (const elem_t *)srcs[k + 2] + b;                                                  \
        if (j > 3)                                                                                 \
            p3 = (const elem_t *)srcs[k + 3] + b;                                                  \
        for (size_t i = 0; i < m; i++) {                                                           \
            acc_t x = INIT;                                                                        \
            x = j > 1 ? F(x, L(p1[i])) : x;                                                        \
            x = j > 2 ? F(x, L(p2[i])) : x;                                                        \
            x = j > 3 ? F(x, L(p3[i])) : x;                                                        \
            acc[i] = x;                                                                            \
        }                                                                                          \
    } while (0)

/* The first pass starts from source 0, later passes from acc (INIT of the
 * second kind folds p0 in as well). j is a constant in each case, so the
 * dead folds vanish. */
#define PASSES(INIT, L, F)                                                                         \
    switch (n - k < 4 ? n - k : 4) {                                                               \
    case 1:                                                                                        \
        PASS(1, INIT, L, F);                                                                       \
        break;                                                                                     \
    case 2:                                                                                        \
        PASS(2, INIT, L, F);                                                                       \
        break;                                                                                     \
    case 3:                                                                                        \
        PASS(3, INIT, L, F);                                                                       \
        break;                                                                                     \
    default:                                                                                       \
        PASS(4, INIT, L, F);                                                                       \
    }

/* name: kernel; T element; A accumulator; LD(T) -> A; OP(A, A) -> A;
 * FIN(A, n) -> T final conversion. OP goes through an inline function so
 * that both operands (loads included) are evaluated unconditionally, which
 * the vectorizer needs for the selects of min and max. */
#define KERNEL(name, T, A, LD, OP, FIN)                                                            \
    static inline A name##_op(A a, A b)                                                            \
    {                                                                                              \
        return OP(a, b);                                                                           \
    }                                                                                              \
    static inline A name##_ld(T x)                                                                 \
    {                                                                                              \
        return LD(x);                                                                              \
    }                                                                                              \
    CLONES static void name(void *dst, const void *const *srcs, int n, size_t count)               \
    {                                                                                              \
        typedef T elem_t;                                                                          \
        typedef A acc_t;                                                                           \
        T *d = dst;                                                                                \
        A acc[BLK];                                                                                \
        for (size_t b = 0; b < count; b += BLK) {                                                  \
            size_t m = count - b < BLK ? count - b : BLK;                                          \
            int k = 0;                                                                             \
            PASSES(name##_ld(p0[i]), name##_ld, name##_op);                                        \
            for (k = 4; k < n; k += 4) {                                                           \
                PASSES(name##_op(acc[i], name##_ld(p0[i])), name##_ld, name##_op);                 \
            }                                                                                      \
            for (size_t i = 0; i < m; i++)                                                         \
                d[b + i] = FIN(acc[i], n);                                                         \
        }                                                                                          \
    }

#define ID(x)        (x)
#define FIN_ID(a, n) (a)
#define ADD(a, b)    ((a) + (b))
#define MUL(a, b)    ((a) * (b))
#define UMUL(a, b)   (1u * (a) * (b)) /* unsigned: no promotion to int, wraps */
#define MIN(a, b)    ((b) < (a) ? (b) : (a))
#define MAX(a, b)    ((a) < (b) ? (b) : (a))
/* NaN-propagating: an earlier NaN stays (comparisons with it are false); a
 * later NaN is taken explicitly. */
#define FMIN(a, b)   ((b) != (b) ? (b) : MIN(a, b))
#define FMAX(a, b)   ((b) != (b) ? (b) : MAX(a, b))
#define DIV(a, n)    ((a) / (n))

/* float32 and float64: accumulate in the element type. */
#define FLOAT_KERNELS(tag, T)                                                                      \
    KERNEL(tag##_sum, T, T, ID, ADD, FIN_ID)                                                       \
    KERNEL(tag##_prod, T, T, ID, MUL, FIN_ID)                                                      \
    KERNEL(tag##_min, T, T, ID, FMIN, FIN_ID)                                                      \
    KERNEL(tag##_max, T, T, ID, FMAX, FIN_ID)                                                      \
    KERNEL(tag##_avg, T, T, ID, ADD, DIV)

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)

/* float16 and bfloat16: accumulate in float32, round once. */
#define F16_FIN(a, n)  disco__fp32_to_fp16(a)
#define F16_AVG(a, n)  disco__fp32_to_fp16((a) / (float)(n))
#define BF16_FIN(a, n) disco__fp32_to_bf16(a)
#define BF16_AVG(a, n) disco__fp32_to_bf16((a) / (float)(n))
#define HALF_KERNELS(tag, LD, FIN, AVG)                                                            \
    KERNEL(tag##_sum, uint16_t, float, LD, ADD, FIN)                                               \
    KERNEL(tag##_prod, uint16_t, float, LD, MUL, FIN)                                              \
    KERNEL(tag##_min, uint16_t, float, LD, FMIN, FIN)                                              \
    KERNEL(tag##_max, uint16_t, float, LD, FMAX, FIN)                                              \
    KERNEL(tag##_avg, uint16_t, float, LD, ADD, AVG)

HALF_KERNELS(f16, disco__fp16_to_fp32, F16_FIN, F16_AVG)
HALF_KERNELS(bf16, disco__bf16_to_fp32, BF16_FIN, BF16_AVG)

/* Integer sum and prod wrap: computed on the unsigned type of the same
 * width, which shares the two's complement bits of int8..int64 and uint8. */
KERNEL(u8_sum, uint8_t, uint8_t, ID, ADD, FIN_ID)
KERNEL(u16_sum, uint16_t, uint16_t, ID, ADD, FIN_ID)
KERNEL(u32_sum, uint32_t, uint32_t, ID, ADD, FIN_ID)
KERNEL(u64_sum, uint64_t, uint64_t, ID, ADD, FIN_ID)
KERNEL(u8_prod, uint8_t, uint8_t, ID, UMUL, FIN_ID)
KERNEL(u16_prod, uint16_t, uint16_t, ID, UMUL, FIN_ID)
KERNEL(u32_prod, uint32_t, uint32_t, ID, UMUL, FIN_ID)
KERNEL(u64_prod, uint64_t, uint64_t, ID, UMUL, FIN_ID)

/* Integer min, max in the element type; avg of types up to 32 bits: the
 * int64 sum is exact, C division truncates toward zero. */
#define TO_I64(x) ((int64_t)(x))
#define INT_KERNELS(tag, T)                                                                        \
    KERNEL(tag##_min, T, T, ID, MIN, FIN_ID)                                                       \
    KERNEL(tag##_max, T, T, ID, MAX, FIN_ID)                                                       \
    KERNEL(tag##_avg, T, int64_t, TO_I64, ADD, (T)DIV)

INT_KERNELS(i8, int8_t)
INT_KERNELS(i16, int16_t)
INT_KERNELS(i32, int32_t)
INT_KERNELS(u8, uint8_t)
KERNEL(i64_min, int64_t, int64_t, ID, MIN, FIN_ID)
KERNEL(i64_max, int64_t, int64_t, ID, MAX, FIN_ID)

/* int64 avg: the sum may not fit, so keep S = n * q + r with every x split
 * as x = n * (x / n) + x % n; |partial q| <= 2^63, |r| <= n(n-1) < 2^62.
 * Then normalize |r| < n and truncate q + r/n toward zero. Scalar: x86 has
 * no vector integer division, and int64 averages are rare. */
static void i64_avg(void *dst, const void *const *srcs, int n, size_t count)
{
    int64_t *d = dst;
    for (size_t i = 0; i < count; i++) {
        int64_t q = 0, r = 0;
        for (int k = 0; k < n; k++) {
            int64_t x = ((const int64_t *)srcs[k])[i];
            q += x / n;
            r += x % n;
        }
        q += r / n;
        r %= n;
        if (q > 0 && r < 0)
            q--;
        else if (q < 0 && r > 0)
            q++;
        d[i] = q;
    }
}

/* bool: any nonzero byte is true; writes 0 or 1. */
#define TRUTH(x)       ((uint8_t)((x) != 0))
#define OR(a, b)       ((uint8_t)((a) | (b)))
#define AND(a, b)      ((uint8_t)((a) & (b)))
#define TO_U32(x)      ((uint32_t)((x) != 0))
#define MAJORITY(a, n) ((uint8_t)((a) >= ((uint32_t)(n) + 1u) / 2u)) /* 2a >= n */
KERNEL(b_or, uint8_t, uint8_t, TRUTH, OR, FIN_ID)
KERNEL(b_and, uint8_t, uint8_t, TRUTH, AND, FIN_ID)
KERNEL(b_avg, uint8_t, uint32_t, TO_U32, ADD, MAJORITY)

static const kernel_fn kernels[T_COUNT][DISCO_REDUCE_COUNT] = {
    [T_F16] = {f16_sum, f16_prod, f16_min, f16_max, f16_avg},
    [T_BF16] = {bf16_sum, bf16_prod, bf16_min, bf16_max, bf16_avg},
    [T_F32] = {f32_sum, f32_prod, f32_min, f32_max, f32_avg},
    [T_F64] = {f64_sum, f64_prod, f64_min, f64_max, f64_avg},
    [T_I8] = {u8_sum, u8_prod, i8_min, i8_max, i8_avg},
    [T_I16] = {u16_sum, u16_prod, i16_min, i16_max, i16_avg},
    [T_I32] = {u32_sum, u32_prod, i32_min, i32_max, i32_avg},
    [T_I64] = {u64_sum, u64_prod, i64_min, i64_max, i64_avg},
    [T_U8] = {u8_sum, u8_prod, u8_min, u8_max, u8_avg},
    [T_BOOL] = {b_or, b_and, b_and, b_or, b_avg},
};

disco_status_t disco_reduce(disco_reduce_op_t op, DLDataType t, void *dst, const void *const *srcs,
                            int nsrc, size_t count)
{
    if ((unsigned)op >= DISCO_REDUCE_COUNT)
        return disco_set_error(DISCO_E_INVAL, "disco_reduce: unknown op %d", (int)op);
    int ti = type_index(t);
    if (ti < 0)
        return disco_dtype_check(t);
    if (nsrc < 1)
        return disco_set_error(DISCO_E_INVAL, "disco_reduce: nsrc %d < 1", nsrc);
    if (count == 0)
        return DISCO_OK;
    size_t align = type_bytes[ti];
    if (dst == NULL || srcs == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_reduce: NULL %s", dst ? "srcs" : "dst");
    if ((uintptr_t)dst % align != 0)
        return disco_set_error(DISCO_E_INVAL, "disco_reduce: dst %p not aligned to %zu", dst,
                               align);
    for (int k = 0; k < nsrc; k++)
        if (srcs[k] == NULL || (uintptr_t)srcs[k] % align != 0)
            return disco_set_error(DISCO_E_INVAL,
                                   "disco_reduce: srcs[%d] %p NULL or not aligned to %zu", k,
                                   srcs[k], align);
    kernels[ti][op](dst, srcs, nsrc, count);
    return DISCO_OK;
}
