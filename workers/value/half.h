/* half.h - the scalar fp16/bf16 conversions, inline for the vectorized
 * loops of dtype.c (bulk conversions, half-precision reductions); the
 * public, out-of-line forms are disco_fp16_to_fp32 & co. in disco/dtype.h,
 * whose comment states the rounding rules. Branch-free, so loops over them
 * vectorize. */
#ifndef DISCO_WORKERS_VALUE_HALF_H
#define DISCO_WORKERS_VALUE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t disco__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float disco__bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* c ? a : b without a branch, so that compilers vectorize it even when the
 * operands include floating-point operations that may not be speculated. */
static inline uint32_t disco__sel(int c, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)(c != 0);
    return (a & m) | (b & ~m);
}

/** IEEE binary16 bits to float, exactly. Thread-safe. */
static inline float disco__fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u;  /* rebias exponent 15 -> 127 */
    uint32_t special = (em << 13) | 0x7f800000u; /* inf, NaN with its payload */
    float subf = (float)(int32_t)em * 0x1p-24f;  /* zero, subnormal: m * 2^-24 */
    uint32_t sub = disco__f32_bits(subf);
    uint32_t r = disco__sel(em >= 0x7c00u, special, disco__sel(em < 0x0400u, sub, normal));
    return disco__bits_f32(r | sign);
}

/** Float to IEEE binary16 bits, round to nearest even. Thread-safe. */
static inline uint16_t disco__fp32_to_fp16(float f)
{
    uint32_t x = disco__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    /* [2^-14, 65536): rebias, drop 13 bits rounding to even; a carry moves
     * into the exponent, and past 0x7bff into 0x7c00 (infinity). */
    uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* Below 2^-14: in x + 0.5f the FPU rounds (to even) exactly at 2^-24,
     * the fp16 subnormal step, leaving the fp16 bits in the low mantissa
     * (0x400 when it rounds up to the smallest normal). */
    uint32_t sub = disco__f32_bits(disco__bits_f32(a) + 0.5f) - 0x3f000000u;
    uint32_t special = disco__sel(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ffu), 0x7c00u);
    uint32_t r = disco__sel(a >= 0x47800000u, special, disco__sel(a < 0x38800000u, sub, normal));
    return (uint16_t)(r | sign);
}

/** bfloat16 bits to float, exactly. Thread-safe. */
static inline float disco__bf16_to_fp32(uint16_t b)
{
    return disco__bits_f32((uint32_t)b << 16);
}

/** Float to bfloat16 bits, round to nearest even (subnormals included: the
 *  exponent range is float's). Thread-safe. */
static inline uint16_t disco__fp32_to_bf16(float f)
{
    uint32_t x = disco__f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)disco__sel((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

#endif
