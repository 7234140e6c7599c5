/* value.c - packed values: copy, compare, and the frame codec (see value.h). */
#include "disco/value.h"

#include <stdlib.h>
#include <string.h>

#include "workers/data/tensor_impl.h"

static const char *const type_names[DISCO_T_COUNT] = {
    "null",  "bool",   "int",  "float", "str",    "bytes",  "shape",
    "dtype", "device", "dref", "func",  "opaque", "tensor",
};

const char *disco_type_name(uint32_t type)
{
    return type < DISCO_T_COUNT ? type_names[type] : "unknown";
}

/* Payload bytes of a variable-size value, or 0 for fixed-size types. */
static size_t var_bytes(const disco_value_t *v)
{
    switch (v->type) {
    case DISCO_T_STR:
        return (size_t)v->len + 1;
    case DISCO_T_BYTES:
        return v->len;
    case DISCO_T_SHAPE:
        return (size_t)v->len * sizeof(int64_t);
    default:
        return 0;
    }
}

static const void *var_ptr(const disco_value_t *v)
{
    switch (v->type) {
    case DISCO_T_STR:
        return v->v.str;
    case DISCO_T_BYTES:
        return v->v.bytes;
    case DISCO_T_SHAPE:
        return v->v.shape;
    default:
        return NULL;
    }
}

disco_status_t disco_value_copy(const disco_value_t *src, disco_value_t *dst_out)
{
    if (src->type >= DISCO_T_COUNT)
        return disco_set_error(DISCO_E_BAD_TYPE, "cannot copy a value of type code %u", src->type);
    disco_value_t d = *src;
    if (src->type == DISCO_T_TENSOR) { /* a new reference to the same heap bytes */
        if (src->v.tensor == NULL || !disco__tensor_is_ours(src->v.tensor))
            return disco_set_error(DISCO_E_BAD_TYPE,
                                   "a tensor result must come from disco_ctx_empty or a "
                                   "disco builtin (shared heap)");
        disco_status_t st = disco__tensor_ref(src->v.tensor, &d.v.tensor);
        if (st == DISCO_OK)
            *dst_out = d;
        return st;
    }
    size_t n = var_bytes(src);
    if (n != 0) {
        void *p = malloc(n);
        if (p == NULL)
            return disco_set_error(DISCO_E_NOMEM, "copying a %s of %zu bytes",
                                   disco_type_name(src->type), n);
        memcpy(p, var_ptr(src), n);
        if (src->type == DISCO_T_STR) /* len rules, as in disco_frame_encode */
            ((char *)p)[src->len] = '\0';
        d.v.bytes = p; /* all three pointers share the union slot */
    } else if (src->type == DISCO_T_BYTES || src->type == DISCO_T_SHAPE) {
        d.v.bytes = NULL;
    }
    *dst_out = d;
    return DISCO_OK;
}

void disco_value_clear(disco_value_t *v)
{
    if (v->type == DISCO_T_TENSOR)
        disco__tensor_release(v->v.tensor);
    else if (var_bytes(v) != 0)
        free((void *)v->v.bytes);
    *v = disco_value_null();
}

bool disco_value_equal(const disco_value_t *a, const disco_value_t *b)
{
    if (a->type != b->type || a->len != b->len)
        return false;
    switch (a->type) {
    case DISCO_T_NULL:
        return true;
    case DISCO_T_BOOL:
        return a->v.b == b->v.b;
    case DISCO_T_INT:
        return a->v.i == b->v.i;
    case DISCO_T_FLOAT:
        return memcmp(&a->v.f, &b->v.f, sizeof a->v.f) == 0; /* bitwise: NaN == NaN */
    case DISCO_T_DTYPE:
        return a->v.dtype.code == b->v.dtype.code && a->v.dtype.bits == b->v.dtype.bits &&
               a->v.dtype.lanes == b->v.dtype.lanes;
    case DISCO_T_DEVICE:
        return a->v.device.device_type == b->v.device.device_type &&
               a->v.device.device_id == b->v.device.device_id;
    case DISCO_T_DREF:
        return a->v.reg == b->v.reg;
    case DISCO_T_FUNC:
    case DISCO_T_OPAQUE:
        return a->v.handle == b->v.handle;
    case DISCO_T_STR:
    case DISCO_T_BYTES:
    case DISCO_T_SHAPE: {
        size_t n = var_bytes(a);
        return n == 0 || memcmp(var_ptr(a), var_ptr(b), n) == 0;
    }
    case DISCO_T_TENSOR: {
        const DLTensor *x = a->v.tensor, *y = b->v.tensor;
        if (!disco_tensor_same_layout(x, y) || x->device.device_type != y->device.device_type ||
            x->device.device_id != y->device.device_id)
            return false;
        if (x->device.device_type != kDLCPU) /* not host-readable: the same memory or not */
            return (const char *)x->data + x->byte_offset == (const char *)y->data + y->byte_offset;
        size_t n = disco_tensor_nbytes(x);
        return n == 0 || memcmp((const char *)x->data + x->byte_offset,
                                (const char *)y->data + y->byte_offset, n) == 0;
    }
    default:
        return false;
    }
}

/* ---- codec ---- */

#define PAD8(n) (((n) + 7u) & ~(size_t)7u)

size_t disco_value_encoded_size(const disco_value_t *v)
{
    if (v->type >= DISCO_T_COUNT || v->type == DISCO_T_TENSOR)
        return 0; /* tensors move by register, never inside a frame */
    size_t n = var_bytes(v);
    if (v->type != DISCO_T_STR && v->type != DISCO_T_BYTES && v->type != DISCO_T_SHAPE)
        n = 8;
    return 8 + PAD8(n);
}

/* Payload length written in the len field for fixed-size types. */
static uint32_t fixed_len(uint32_t type)
{
    switch (type) {
    case DISCO_T_NULL:
        return 0;
    case DISCO_T_DTYPE:
        return 4;
    default:
        return 8;
    }
}

static void put_fixed(unsigned char *p, const disco_value_t *v)
{
    uint64_t w = 0;
    switch (v->type) {
    case DISCO_T_BOOL:
        w = v->v.b ? 1 : 0;
        break;
    case DISCO_T_INT:
        memcpy(&w, &v->v.i, 8);
        break;
    case DISCO_T_FLOAT:
        memcpy(&w, &v->v.f, 8);
        break;
    case DISCO_T_DTYPE:
        p[0] = v->v.dtype.code;
        p[1] = v->v.dtype.bits;
        memcpy(p + 2, &v->v.dtype.lanes, 2);
        memset(p + 4, 0, 4);
        return;
    case DISCO_T_DEVICE: {
        int32_t t = (int32_t)v->v.device.device_type, id = v->v.device.device_id;
        memcpy(p, &t, 4);
        memcpy(p + 4, &id, 4);
        return;
    }
    case DISCO_T_DREF:
        w = v->v.reg;
        break;
    default: /* FUNC, OPAQUE */
        w = v->v.handle;
        break;
    }
    memcpy(p, &w, 8);
}

disco_status_t disco_frame_encode(uint32_t code, uint64_t seq, const disco_value_t *args,
                                  uint32_t nargs, void *buf, size_t cap, size_t *len_out)
{
    size_t total = DISCO_FRAME_HDR;
    for (uint32_t i = 0; i < nargs; i++) {
        size_t n = disco_value_encoded_size(&args[i]);
        if (n == 0)
            return args[i].type == DISCO_T_TENSOR
                       ? disco_set_error(DISCO_E_BAD_TYPE,
                                         "argument %u is a tensor: tensors travel by register "
                                         "(DRef) or copy_to_worker0, not inside a command",
                                         i)
                       : disco_set_error(DISCO_E_BAD_TYPE, "argument %u has unknown type code %u",
                                         i, args[i].type);
        total += n;
    }
    if (total > cap)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "frame of %zu bytes, buffer of %zu", total,
                               cap);
    unsigned char *p = buf;
    disco_frame_hdr_t h = {.code = code, .nargs = nargs, .seq = seq};
    memcpy(p, &h, sizeof h);
    p += DISCO_FRAME_HDR;
    for (uint32_t i = 0; i < nargs; i++) {
        const disco_value_t *v = &args[i];
        uint32_t hdr[2] = {v->type, 0};
        size_t n = var_bytes(v);
        bool var = v->type == DISCO_T_STR || v->type == DISCO_T_BYTES || v->type == DISCO_T_SHAPE;
        hdr[1] = var ? v->len : fixed_len(v->type);
        memcpy(p, hdr, 8);
        p += 8;
        if (v->type == DISCO_T_NULL) {
            memset(p, 0, 8);
            p += 8;
        } else if (var) {
            if (n != 0)
                memcpy(p, var_ptr(v), n);
            /* len rules: a string whose len is short of its strlen (one of
             * 4 GiB or more, its length cut to 32 bits by disco_value_str) ends
             * at len, instead of losing its terminator. */
            if (v->type == DISCO_T_STR)
                p[v->len] = '\0';
            memset(p + n, 0, PAD8(n) - n);
            p += PAD8(n);
        } else {
            put_fixed(p, v);
            p += 8;
        }
    }
    *len_out = total;
    return DISCO_OK;
}

static disco_status_t decode_one(const unsigned char *p, size_t left, uint32_t idx,
                                 disco_value_t *v, size_t *used)
{
    if (left < 8)
        return disco_set_error(DISCO_E_TRUNCATED, "argument %u: %zu bytes left, need 8", idx, left);
    uint32_t hdr[2];
    memcpy(hdr, p, 8);
    uint32_t type = hdr[0], len = hdr[1];
    p += 8;
    left -= 8;
    if (type >= DISCO_T_COUNT || type == DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "argument %u: type code %u cannot be in a frame",
                               idx, type);
    v->type = type;
    v->len = 0;
    size_t n;
    switch (type) {
    case DISCO_T_STR:
        n = (size_t)len + 1;
        break;
    case DISCO_T_BYTES:
        n = len;
        break;
    case DISCO_T_SHAPE:
        n = (size_t)len * 8;
        break;
    default:
        if (len != fixed_len(type))
            return disco_set_error(DISCO_E_BAD_TYPE, "argument %u: %s with payload length %u", idx,
                                   disco_type_name(type), len);
        n = 8;
        break;
    }
    if (PAD8(n) > left)
        return disco_set_error(DISCO_E_TRUNCATED, "argument %u: %s of %zu bytes, %zu left", idx,
                               disco_type_name(type), n, left);
    switch (type) {
    case DISCO_T_NULL:
        break;
    case DISCO_T_STR:
        if (p[len] != '\0')
            return disco_set_error(DISCO_E_BAD_TYPE, "argument %u: string without its NUL", idx);
        v->len = len;
        v->v.str = (const char *)p;
        break;
    case DISCO_T_BYTES:
        v->len = len;
        v->v.bytes = len != 0 ? p : NULL;
        break;
    case DISCO_T_SHAPE:
        v->len = len;
        v->v.shape = len != 0 ? (const int64_t *)(const void *)p : NULL;
        break;
    case DISCO_T_BOOL:
        v->v.b = p[0] != 0;
        break;
    case DISCO_T_INT:
        memcpy(&v->v.i, p, 8);
        break;
    case DISCO_T_FLOAT:
        memcpy(&v->v.f, p, 8);
        break;
    case DISCO_T_DTYPE:
        v->v.dtype.code = p[0];
        v->v.dtype.bits = p[1];
        memcpy(&v->v.dtype.lanes, p + 2, 2);
        break;
    case DISCO_T_DEVICE: {
        int32_t t, id;
        memcpy(&t, p, 4);
        memcpy(&id, p + 4, 4);
        v->v.device.device_type = (DLDeviceType)t;
        v->v.device.device_id = id;
        break;
    }
    case DISCO_T_DREF:
        memcpy(&v->v.reg, p, 8);
        break;
    default: /* FUNC, OPAQUE */
        memcpy(&v->v.handle, p, 8);
        break;
    }
    *used = 8 + PAD8(n);
    return DISCO_OK;
}

disco_status_t disco_frame_decode(const void *buf, size_t len, disco_frame_hdr_t *hdr_out,
                                  disco_value_t *args_out, uint32_t max_args)
{
    if (len < DISCO_FRAME_HDR)
        return disco_set_error(DISCO_E_TRUNCATED, "frame of %zu bytes, header needs %u", len,
                               DISCO_FRAME_HDR);
    disco_frame_hdr_t h;
    memcpy(&h, buf, sizeof h);
    if (h.nargs > max_args)
        return disco_set_error(DISCO_E_ARG_COUNT, "frame has %u arguments, at most %u accepted",
                               h.nargs, max_args);
    const unsigned char *p = (const unsigned char *)buf + DISCO_FRAME_HDR;
    size_t left = len - DISCO_FRAME_HDR;
    for (uint32_t i = 0; i < h.nargs; i++) {
        size_t used = 0;
        disco_status_t st = decode_one(p, left, i, &args_out[i], &used);
        if (st != DISCO_OK)
            return st;
        p += used;
        left -= used;
    }
    if (left != 0)
        return disco_set_error(DISCO_E_PROTOCOL, "%zu bytes after the last of %u arguments", left,
                               h.nargs);
    *hdr_out = h;
    return DISCO_OK;
}
