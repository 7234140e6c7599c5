/*
 * disco/dtype.h - element types and the element-wise kernels of the CPU
 * collectives: names, sizes, fp16/bf16 conversions and k-way reductions.
 *
 * Error rule: as everywhere in disco (status.h). Functions returning
 * disco_status_t record context with disco_set_error(); output arguments are
 * written only on success. Everything here is pure and thread-safe.
 *
 * Supported element types (lanes must be 1):
 *   float16   {kDLFloat, 16}     bfloat16 {kDLBfloat, 16}
 *   float32   {kDLFloat, 32}     float64  {kDLFloat, 64}
 *   int8..64  {kDLInt, 8/16/32/64}
 *   uint8     {kDLUInt, 8}
 *   bool      {DISCO_DL_BOOL, 8}, and TVM's bool {kDLUInt, 1} (stored as one
 *             byte per element too). Any nonzero byte reads as true; kernels
 *             write 0 or 1.
 * float16 and bfloat16 elements are handled as their uint16_t bit patterns.
 */
#ifndef DISCO_DTYPE_H
#define DISCO_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <dlpack/dlpack.h>

#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Element types ----------------------------------------------------
 * Names follow TVM's spelling: "<code><bits>" then "x<lanes>" when lanes is
 * not 1 ("float32", "int4x2"); codes int, uint, float, handle, bfloat,
 * complex, bool ("bool" for 8 bits, "bool<bits>" otherwise).
 */

/* kDLBool of DLPack >= 0.8 (Debian's 0.6 header lacks it). */
#define DISCO_DL_BOOL 6u

/* The DLDataType of each dtype disco reduces and converts (one lane). */
#define DISCO_DTYPE_FLOAT16  ((DLDataType){kDLFloat, 16, 1})     /* float16 */
#define DISCO_DTYPE_BFLOAT16 ((DLDataType){kDLBfloat, 16, 1})    /* bfloat16 */
#define DISCO_DTYPE_FLOAT32  ((DLDataType){kDLFloat, 32, 1})     /* float32 */
#define DISCO_DTYPE_FLOAT64  ((DLDataType){kDLFloat, 64, 1})     /* float64 */
#define DISCO_DTYPE_INT8     ((DLDataType){kDLInt, 8, 1})        /* int8 */
#define DISCO_DTYPE_INT16    ((DLDataType){kDLInt, 16, 1})       /* int16 */
#define DISCO_DTYPE_INT32    ((DLDataType){kDLInt, 32, 1})       /* int32 */
#define DISCO_DTYPE_INT64    ((DLDataType){kDLInt, 64, 1})       /* int64 */
#define DISCO_DTYPE_UINT8    ((DLDataType){kDLUInt, 8, 1})       /* uint8 */
#define DISCO_DTYPE_BOOL     ((DLDataType){DISCO_DL_BOOL, 8, 1}) /* bool, 8 bits */

/* Room disco_dtype_str needs for any DLDataType, NUL included. */
#define DISCO_DTYPE_STR_MAX 48

/** Bytes of one element of t, or 0 if t is not a supported type.
 *  Thread-safe. */
size_t disco_dtype_bytes(DLDataType t);

/** Whether t is supported. Thread-safe.
 *  @return DISCO_OK; DISCO_E_BAD_TYPE if not, with a detail naming the type
 *  ("unsupported dtype int4x2 (code 0, bits 4, lanes 2)"). */
disco_status_t disco_dtype_check(DLDataType t);

/** Writes the name of t ("float16", "int4x2", ...) into buf, truncated to
 *  cap bytes like snprintf; DISCO_DTYPE_STR_MAX always suffices. Names any
 *  DLDataType, supported or not; an unknown code gives "dtype(code=9,bits=8,
 *  lanes=1)". Thread-safe.
 *  @return buf, or "" when buf is NULL or cap is 0. */
const char *disco_dtype_str(DLDataType t, char *buf, size_t cap);

/** Parses a name as written by disco_dtype_str: int, uint, float, handle,
 *  bfloat or complex followed by bits; "bool" (8 bits) or "bool<bits>"; then
 *  an optional "x<lanes>". The result need not be supported: follow with
 *  disco_dtype_check. parse(str(t)) == t for every t of a known code except
 *  TVM's bool {kDLUInt, 1}, which prints as "bool" and so comes back as
 *  {DISCO_DL_BOOL, 8}. Thread-safe.
 *  @return true and *dtype_out set; false (dtype_out untouched) on anything else. */
bool disco_dtype_parse(const char *s, DLDataType *dtype_out);

/* ---- fp16 / bf16 <-> fp32 ---------------------------------------------
 * Widening is exact (NaN payloads and signaling bits kept). Narrowing rounds
 * to nearest, ties to even; values beyond the largest finite value round to
 * infinity as IEEE 754 prescribes (fp16: |x| >= 65520); fp16 subnormals are
 * produced exactly; NaN stays NaN with its sign and top payload bits and the
 * quiet bit set (so every quiet NaN round-trips bit-exactly). The bulk
 * forms (_n) vectorize; prefer them over a loop of scalar calls. Assumes the default rounding
 * mode (to nearest); flush-to-zero and denormals-are-zero modes do not
 * change the results.
 */

/** IEEE binary16 bits to float, exactly. Thread-safe. */
float disco_fp16_to_fp32(uint16_t h);
/** Float to IEEE binary16 bits, round to nearest even. Thread-safe. */
uint16_t disco_fp32_to_fp16(float f);
/** bfloat16 bits to float, exactly. Thread-safe. */
float disco_bf16_to_fp32(uint16_t b);
/** Float to bfloat16 bits, round to nearest even (subnormals included: the
 *  exponent range is float's). Thread-safe. */
uint16_t disco_fp32_to_bf16(float f);

/** Bulk forms of the four conversions above: n elements from src to dst
 *  (which must not overlap). Vectorized. Thread-safe. */
void disco_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n);
/** disco_fp32_to_fp16 of n elements. Thread-safe. */
void disco_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n);
/** disco_bf16_to_fp32 of n elements. Thread-safe. */
void disco_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n);
/** disco_fp32_to_bf16 of n elements. Thread-safe. */
void disco_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n);

/* ---- Reductions -------------------------------------------------------
 * disco_reduce computes dst[i] = srcs[0][i] op srcs[1][i] op ... for i in
 * [0, count), folding sources in order 0, 1, 2, ... Semantics per type:
 *
 *   float32, float64  accumulate in the element type, in source order (so
 *                     results are reproducible and independent of count).
 *   float16, bfloat16 widen to float32, accumulate across all sources in
 *                     float32, round once (to nearest even) at the end.
 *   avg (floating)    the sum above divided by nsrc in the accumulation
 *                     type, then rounded once to the element type.
 *   min, max (float)  NaN-propagating: NaN if any source is NaN. Between
 *                     equal values (-0.0 and +0.0) the earlier source wins.
 *   integers          sum and prod wrap modulo 2^bits like NCCL (two's
 *                     complement); min and max are exact; avg is the exact
 *                     mean truncated toward zero (computed without overflow,
 *                     int64 included), so it always fits.
 *   bool              sum and max: logical or; prod and min: logical and;
 *                     avg: majority, true iff 2 * (number true) >= nsrc
 *                     (ties count as true). Writes 0 or 1.
 */

typedef enum disco_reduce_op {
    DISCO_REDUCE_SUM = 0,
    DISCO_REDUCE_PROD = 1,
    DISCO_REDUCE_MIN = 2,
    DISCO_REDUCE_MAX = 3,
    DISCO_REDUCE_AVG = 4,
} disco_reduce_op_t;

#define DISCO_REDUCE_COUNT 5 /* number of reduction ops */

/** Name of op ("sum", "prod", "min", "max", "avg"; "unknown" otherwise).
 *  Thread-safe. */
const char *disco_reduce_name(disco_reduce_op_t op);

/** Parses a name given by disco_reduce_name. Thread-safe.
 *  @return true and *op_out set; false (op_out untouched) otherwise. */
bool disco_reduce_parse(const char *s, disco_reduce_op_t *op_out);

/** Reduces nsrc buffers element-wise into dst (see the semantics above).
 *  Thread-safe (distinct calls may share read-only sources).
 *  @param op     reduction
 *  @param t      element type, one of the supported types
 *  @param dst    count elements, aligned to the element size; may be the
 *                very same buffer as any srcs[k] (in-place), must not
 *                otherwise overlap a source
 *  @param srcs   nsrc pointers to count elements each, aligned likewise
 *  @param nsrc   number of sources, >= 1 (1 copies, or normalizes bools)
 *  @param count  number of elements; 0 touches nothing
 *  @return DISCO_OK; DISCO_E_BAD_TYPE (unsupported t); DISCO_E_INVAL
 *  (unknown op, nsrc < 1, or with count > 0 a NULL or misaligned pointer). */
disco_status_t disco_reduce(disco_reduce_op_t op, DLDataType t, void *dst, const void *const *srcs,
                            int nsrc, size_t count);

#ifdef __cplusplus
}
#endif
#endif
