/*
 * disco/value.h - packed values and the frame codec.
 *
 * A value is a type code plus a union, as in TVM's packed calling convention.
 * Values handed to disco are borrowed: disco copies what it keeps (a tensor
 * is kept by reference to its shared-heap block). Values that
 * disco hands back to the caller (disco_session_debug_get, ...) own their
 * memory; release them with disco_value_clear().
 *
 * Frames. Every command and reply, over any transport, is one frame:
 *   header  u32 code | u32 nargs | u64 seq                       (16 bytes)
 *   nargs x u32 type | u32 len | payload, zero-padded to 8 bytes
 * Payloads: bool/int/float/dref/func/opaque 8 bytes (len 8); dtype 4 bytes
 * (code, bits, lanes as u8 u8 u16); device 8 (i32 type, i32 id); str len
 * bytes plus a NUL (len counts the bytes without the NUL); bytes len bytes;
 * shape len x i64 (len is ndim). Integers are little-endian (host order on
 * the machines disco runs on). Decoding is zero-copy: decoded str, bytes and
 * shape point into the frame buffer, which must outlive them and be 8-byte
 * aligned.
 */
#ifndef DISCO_VALUE_H
#define DISCO_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <dlpack/dlpack.h>

#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type code of a value. */
typedef enum disco_type {
    DISCO_T_NULL = 0,
    DISCO_T_BOOL = 1,
    DISCO_T_INT = 2,     /* int64 */
    DISCO_T_FLOAT = 3,   /* float64 */
    DISCO_T_STR = 4,     /* NUL-terminated, len = strlen */
    DISCO_T_BYTES = 5,   /* len bytes */
    DISCO_T_SHAPE = 6,   /* len int64 dims */
    DISCO_T_DTYPE = 7,   /* DLDataType */
    DISCO_T_DEVICE = 8,  /* DLDevice */
    DISCO_T_DREF = 9,    /* register id, valid on every worker */
    DISCO_T_FUNC = 10,   /* function handle (worker-local) */
    DISCO_T_OPAQUE = 11, /* opaque handle: 64 bits passed through untouched */
    DISCO_T_TENSOR = 12  /* DLTensor (see tensor.h); never inside a frame */
} disco_type_t;

#define DISCO_T_COUNT 13 /* number of type codes */

/* A value: a type code, a length and an 8-byte payload. */
typedef struct disco_value {
    uint32_t type; /* disco_type_t */
    uint32_t len;  /* STR: strlen; BYTES: bytes; SHAPE: ndim; else 0 */
    union {
        bool b;
        int64_t i;
        double f;
        const char *str;
        const void *bytes;
        const int64_t *shape;
        DLDataType dtype;
        DLDevice device;
        uint64_t reg;    /* DREF */
        uint64_t handle; /* FUNC, OPAQUE */
        DLTensor *tensor;
    } v; /* the payload, by type */
} disco_value_t;

/* Constructors (borrowing: no copies are made). One name per kind:
 * disco_value_<kind>(). C and C++ callers get the static inline
 * definitions below; the library also exports every one of them under the
 * same name as an out-of-line function, for callers that cannot expand a
 * static inline (ctypes, cffi's ABI mode, other FFIs, dlsym). The two forms
 * never meet in one translation unit: workers/value/value_ctor.c defines
 * DISCO_VALUE_OUT_OF_LINE before its first include, which turns the
 * definitions below into the exported ones. Both return identical values,
 * all 8 payload bytes included (test_bind compares them). They fill the
 * value member by member, not with designated initializers, so that this
 * header compiles as C++ too. Thread-safe; they cannot fail. */
#ifdef DISCO_VALUE_OUT_OF_LINE
#define DISCO__CTOR
#else
#define DISCO__CTOR static inline
#endif

/* Internal: a value of the given type and len with all 8 payload bytes zero. */
static inline disco_value_t disco__value_make(uint32_t type, uint32_t len)
{
    disco_value_t x;
    x.type = type;
    x.len = len;
    x.v.handle = 0;
    return x;
}
/* A null value. */
DISCO__CTOR disco_value_t disco_value_null(void)
{
    return disco__value_make(DISCO_T_NULL, 0);
}
/* A bool. */
DISCO__CTOR disco_value_t disco_value_bool(bool b)
{
    disco_value_t x = disco__value_make(DISCO_T_BOOL, 0);
    x.v.b = b;
    return x;
}
/* An int64. */
DISCO__CTOR disco_value_t disco_value_int(int64_t i)
{
    disco_value_t x = disco__value_make(DISCO_T_INT, 0);
    x.v.i = i;
    return x;
}
/* A float64. */
DISCO__CTOR disco_value_t disco_value_float(double f)
{
    disco_value_t x = disco__value_make(DISCO_T_FLOAT, 0);
    x.v.f = f;
    return x;
}
/* len = strlen(s), cut to 32 bits (the frame codec refuses such a string) */
DISCO__CTOR disco_value_t disco_value_str(const char *s)
{
    disco_value_t x = disco__value_make(DISCO_T_STR, (uint32_t)strlen(s));
    x.v.str = s;
    return x;
}
/* len bytes at p (borrowed). */
DISCO__CTOR disco_value_t disco_value_bytes(const void *p, uint32_t len)
{
    disco_value_t x = disco__value_make(DISCO_T_BYTES, len);
    x.v.bytes = p;
    return x;
}
/* A shape of ndim dims (borrowed). */
DISCO__CTOR disco_value_t disco_value_shape(const int64_t *dims, uint32_t ndim)
{
    disco_value_t x = disco__value_make(DISCO_T_SHAPE, ndim);
    x.v.shape = dims;
    return x;
}
/* A dtype. */
DISCO__CTOR disco_value_t disco_value_dtype(DLDataType t)
{
    disco_value_t x = disco__value_make(DISCO_T_DTYPE, 0);
    x.v.dtype = t;
    return x;
}
/* A device. */
DISCO__CTOR disco_value_t disco_value_device(DLDevice d)
{
    disco_value_t x = disco__value_make(DISCO_T_DEVICE, 0);
    x.v.device = d;
    return x;
}
/* An opaque handle, passed through untouched. */
DISCO__CTOR disco_value_t disco_value_opaque(uint64_t h)
{
    disco_value_t x = disco__value_make(DISCO_T_OPAQUE, 0);
    x.v.handle = h;
    return x;
}

/** Name of a type code ("int", "str", ...; "unknown" otherwise). Thread-safe. */
const char *disco_type_name(uint32_t type);

/** Deep copy: str/bytes/shape payloads are malloc'd. Thread-safe. Returns
 *  DISCO_OK, DISCO_E_NOMEM, DISCO_E_BAD_TYPE. */
disco_status_t disco_value_copy(const disco_value_t *src, disco_value_t *dst_out);

/** Frees what disco_value_copy (or an API returning owned values) allocated
 *  and resets v to null. Harmless on null and plain values. */
void disco_value_clear(disco_value_t *v);

/** Whether two values are equal: same type, same bytes. Tensors: same
 *  layout and device, and the same bytes on the host (kDLCPU); a device
 *  tensor's bytes are not host-readable, so two device tensors are equal
 *  only when they are the same memory (copy them out to compare bytes).
 *  Thread-safe. */
bool disco_value_equal(const disco_value_t *a, const disco_value_t *b);

/* ---- frames ---- */

#define DISCO_FRAME_HDR 16u

/* A frame's header (see "Frames" above). */
typedef struct disco_frame_hdr {
    uint32_t code;  /* command or reply code */
    uint32_t nargs; /* values that follow */
    uint64_t seq;   /* sequence number */
} disco_frame_hdr_t;

/** Bytes the encoding of v takes (type, len, padded payload), or 0 for an
 *  unknown type. Thread-safe. */
size_t disco_value_encoded_size(const disco_value_t *v);

/** Encodes a frame into buf (cap bytes, 8-byte aligned) and sets *len_out.
 *  Thread-safe. Returns DISCO_OK, DISCO_E_BAD_TYPE (unknown type code),
 *  DISCO_E_MSG_TOO_BIG (does not fit in cap; nothing promised about buf). */
disco_status_t disco_frame_encode(uint32_t code, uint64_t seq, const disco_value_t *args,
                                  uint32_t nargs, void *buf, size_t cap, size_t *len_out);

/** Decodes a frame of len bytes in buf (8-byte aligned). Fills hdr_out and up
 *  to max_args values in args_out (pointing into buf). Checks every length
 *  against the end of the frame. Thread-safe. Returns DISCO_OK,
 *  DISCO_E_TRUNCATED (frame shorter than its contents), DISCO_E_BAD_TYPE
 *  (unknown type code or a payload length wrong for its type, or a string
 *  without its NUL), DISCO_E_ARG_COUNT (more than max_args arguments),
 *  DISCO_E_PROTOCOL (bytes left after the last argument). */
disco_status_t disco_frame_decode(const void *buf, size_t len, disco_frame_hdr_t *hdr_out,
                                  disco_value_t *args_out, uint32_t max_args);

#ifdef __cplusplus
}
#endif
#endif
