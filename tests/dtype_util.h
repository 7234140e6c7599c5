/* dtype_util.h - helpers shared by the dtype suites (test_dtype.c,
 * test_dtype_reduce.c): status assertions, a deterministic generator and
 * the table of supported dtypes. Header-only, static. */
#ifndef DISCO_TESTS_DTYPE_UTIL_H
#define DISCO_TESTS_DTYPE_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/dtype.h"

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

static inline uint64_t rnd(void) /* xorshift64*, deterministic */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

/* Every supported dtype: its DLPack type, name and size. */
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

#endif
