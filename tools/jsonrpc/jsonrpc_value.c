/* jsonrpc_value.c - disco-jsonrpc's values: JSON to disco_value_t (plain
 * JSON or a typed object) and back (see the top of disco-jsonrpc.c). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "tools/jsonrpc/jsonrpc.h"

/* ---- values ---- */

static int arena_keep(struct arena *a, void *p)
{
    void **q = realloc(a->p, (a->n + 1) * sizeof *q);
    if (q == NULL) {
        free(p);
        return -1;
    }
    a->p = q;
    a->p[a->n++] = p;
    return 0;
}

void jr_arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
}

#define BAD_VALUE(...) jr_fail(e, INVALID_PARAMS, "Invalid params: " __VA_ARGS__)

static int typed_value(json_t *j, const char *w, struct arena *a, disco_value_t *out, struct err *e)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *val = json_object_get(j, "value");
    json_t *b64 = json_object_get(j, "base64");
    json_t *h = json_object_get(j, "handle");
    int64_t i;
    uint64_t u;
    if (type == NULL)
        return BAD_VALUE("%s: an object value needs a string member \"type\"", w);
#define KEYS(...)                                                                                  \
    jr_only_keys(j, w, (const char *const[]){"type", __VA_ARGS__, NULL}, INVALID_PARAMS, e)
    if (strcmp(type, "null") == 0) {
        if (KEYS(NULL))
            return -1;
        *out = disco_value_null();
    } else if (strcmp(type, "bool") == 0) {
        if (KEYS("value"))
            return -1;
        if (!json_is_boolean(val))
            return BAD_VALUE("%s: bool needs \"value\": true or false", w);
        *out = disco_value_bool(json_is_true(val));
    } else if (strcmp(type, "int") == 0) {
        if (KEYS("value"))
            return -1;
        if (jr_json_i64(val, INT64_MIN, INT64_MAX, &i) != 0)
            return BAD_VALUE("%s: int needs \"value\": a 64-bit integer or decimal string", w);
        *out = disco_value_int(i);
    } else if (strcmp(type, "float") == 0) {
        const char *s = json_string_value(val);
        if (KEYS("value"))
            return -1;
        if (json_is_number(val))
            *out = disco_value_float(json_number_value(val));
        else if (s != NULL &&
                 (strcmp(s, "nan") == 0 || strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0))
            *out = disco_value_float(s[0] == 'n' ? NAN : s[0] == '-' ? -INFINITY : INFINITY);
        else
            return BAD_VALUE("%s: float needs \"value\": a number, \"nan\", \"inf\" or \"-inf\"",
                             w);
    } else if (strcmp(type, "str") == 0 || strcmp(type, "bytes") == 0) {
        int is_str = type[0] == 's';
        unsigned char *buf;
        size_t len;
        if (is_str ? KEYS("value", "base64") : KEYS("base64"))
            return -1;
        if (is_str && val != NULL && b64 == NULL) {
            if (!json_is_string(val))
                return BAD_VALUE("%s: str needs \"value\": a string", w);
            buf = (unsigned char *)strdup(json_string_value(val));
            len = json_string_length(val);
            if (buf == NULL)
                return jr_fail(e, INTERNAL_ERROR, "Internal error: no memory");
        } else if (b64 == NULL || val != NULL) {
            return BAD_VALUE("%s: %s needs %s\"base64\"", w, type,
                             is_str ? "one of \"value\" or " : "");
        } else if (jr_b64_decode(b64, w, &buf, &len, e) != 0) {
            return -1;
        }
        if (arena_keep(a, buf) != 0)
            return jr_fail(e, INTERNAL_ERROR, "Internal error: no memory");
        if (len > UINT32_MAX)
            return BAD_VALUE("%s: %zu bytes, more than a value holds (2^32 - 1)", w, len);
        if (is_str && strlen((char *)buf) != len)
            return BAD_VALUE("%s: a str cannot hold a NUL byte (use bytes)", w);
        *out = is_str ? disco_value_str((char *)buf) : disco_value_bytes(buf, (uint32_t)len);
    } else if (strcmp(type, "shape") == 0) {
        json_t *dims = json_object_get(j, "dims");
        if (KEYS("dims"))
            return -1;
        if (!json_is_array(dims) || json_array_size(dims) > UINT32_MAX)
            return BAD_VALUE("%s: shape needs \"dims\": an array of integers", w);
        size_t n = json_array_size(dims);
        int64_t *d = malloc((n + 1) * sizeof *d);
        if (d == NULL || arena_keep(a, d) != 0)
            return jr_fail(e, INTERNAL_ERROR, "Internal error: no memory");
        for (size_t k = 0; k < n; k++)
            if (jr_json_i64(json_array_get(dims, k), INT64_MIN, INT64_MAX, &d[k]) != 0)
                return BAD_VALUE("%s: shape dims[%zu] is not a 64-bit integer", w, k);
        *out = disco_value_shape(d, (uint32_t)n);
    } else if (strcmp(type, "dtype") == 0) {
        json_t *name = json_object_get(j, "name");
        int64_t code, bits, lanes;
        DLDataType t;
        if (KEYS("name", "code", "bits", "lanes"))
            return -1;
        if (name != NULL) {
            if (!json_is_string(name) || !disco_dtype_parse(json_string_value(name), &t))
                return BAD_VALUE("%s: unknown dtype name (e.g. \"float32\", \"int8\")", w);
        } else if (jr_json_i64(json_object_get(j, "code"), 0, UINT8_MAX, &code) == 0 &&
                   jr_json_i64(json_object_get(j, "bits"), 0, UINT8_MAX, &bits) == 0 &&
                   jr_json_i64(json_object_get(j, "lanes"), 0, UINT16_MAX, &lanes) == 0) {
            t = (DLDataType){(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
        } else {
            return BAD_VALUE("%s: dtype needs \"name\", or \"code\", \"bits\" and \"lanes\"", w);
        }
        *out = disco_value_dtype(t);
    } else if (strcmp(type, "device") == 0) {
        DLDevice d;
        if (jr_device_of(j, w, &d, e) != 0)
            return -1;
        *out = disco_value_device(d);
    } else if (strcmp(type, "dref") == 0) {
        if (KEYS("reg"))
            return -1;
        if (jr_json_u64(json_object_get(j, "reg"), &u) != 0)
            return BAD_VALUE("%s: dref needs \"reg\": a register id", w);
        *out = (disco_value_t){.type = DISCO_T_DREF, .v.reg = u};
    } else if (strcmp(type, "func") == 0 || strcmp(type, "opaque") == 0) {
        if (KEYS("handle"))
            return -1;
        if (jr_json_u64(h, &u) != 0)
            return BAD_VALUE("%s: %s needs \"handle\": a decimal string", w, type);
        *out =
            (disco_value_t){.type = type[0] == 'f' ? DISCO_T_FUNC : DISCO_T_OPAQUE, .v.handle = u};
    } else {
        return BAD_VALUE("%s: unknown value type \"%s\"", w, type);
    }
#undef KEYS
    return 0;
}

/* JSON to a value; str/bytes/shape point into j or into a's buffers. */
int jr_decode_value(json_t *j, const char *w, struct arena *a, disco_value_t *out, struct err *e)
{
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = disco_value_null();
        return 0;
    case JSON_TRUE:
    case JSON_FALSE:
        *out = disco_value_bool(json_is_true(j));
        return 0;
    case JSON_INTEGER:
        *out = disco_value_int(json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = disco_value_float(json_real_value(j));
        return 0;
    case JSON_STRING:
        if (strlen(json_string_value(j)) != json_string_length(j))
            return BAD_VALUE("%s: a str cannot hold a NUL character (use bytes)", w);
        *out = disco_value_str(json_string_value(j));
        return 0;
    case JSON_OBJECT:
        return typed_value(j, w, a, out, e);
    default:
        return BAD_VALUE("%s: an array is not a value (a shape is {\"type\": \"shape\", "
                         "\"dims\": [...]})",
                         w);
    }
}

static json_t *typed_u64(const char *type, const char *key, uint64_t v)
{
    return json_pack("{s:s,s:o}", "type", type, key, jr_u64_text(v));
}

/* A value to JSON (see the top of disco-jsonrpc.c). */
int jr_encode_value(const disco_value_t *v, json_t **out, struct err *e)
{
    json_t *j = NULL;
    char buf[DISCO_DTYPE_STR_MAX];
    switch (v->type) {
    case DISCO_T_NULL:
        j = json_null();
        break;
    case DISCO_T_BOOL:
        j = json_boolean(v->v.b);
        break;
    case DISCO_T_INT:
        if (jr_i64_safe(v->v.i))
            j = json_integer(v->v.i);
        else
            j = json_pack("{s:s,s:o}", "type", "int", "value", jr_i64_text(v->v.i));
        break;
    case DISCO_T_FLOAT:
        if (isfinite(v->v.f))
            j = json_real(v->v.f);
        else
            j = json_pack("{s:s,s:s}", "type", "float", "value",
                          isnan(v->v.f) ? "nan"
                          : v->v.f < 0  ? "-inf"
                                        : "inf");
        break;
    case DISCO_T_STR:
        j = json_stringn(v->v.str, v->len);
        if (j == NULL) /* not UTF-8 */
            j = json_pack("{s:s,s:o}", "type", "str", "base64", jr_b64_encode(v->v.str, v->len));
        break;
    case DISCO_T_BYTES:
        j = json_pack("{s:s,s:o}", "type", "bytes", "base64", jr_b64_encode(v->v.bytes, v->len));
        break;
    case DISCO_T_SHAPE:
        j = json_pack("{s:s,s:[]}", "type", "shape", "dims");
        for (uint32_t k = 0; j != NULL && k < v->len; k++) {
            int64_t d = v->v.shape[k];
            if (json_array_append_new(json_object_get(j, "dims"),
                                      jr_i64_safe(d) ? json_integer(d) : jr_i64_text(d)) != 0) {
                json_decref(j);
                j = NULL;
            }
        }
        break;
    case DISCO_T_DTYPE:
        j = json_pack("{s:s,s:s,s:i,s:i,s:i}", "type", "dtype", "name",
                      disco_dtype_str(v->v.dtype, buf, sizeof buf), "code", v->v.dtype.code, "bits",
                      v->v.dtype.bits, "lanes", v->v.dtype.lanes);
        break;
    case DISCO_T_DEVICE:
        j = json_pack("{s:s,s:i,s:i}", "type", "device", "device_type",
                      (int)v->v.device.device_type, "device_id", (int)v->v.device.device_id);
        break;
    case DISCO_T_DREF:
        j = typed_u64("dref", "reg", v->v.reg);
        break;
    case DISCO_T_FUNC:
    case DISCO_T_OPAQUE:
        j = typed_u64(v->type == DISCO_T_FUNC ? "func" : "opaque", "handle", v->v.handle);
        break;
    default:
        return jr_disco_fail(e,
                             disco_set_error(DISCO_E_BAD_TYPE, "a %s result cannot be sent as JSON",
                                             disco_type_name(v->type)));
    }
    if (j == NULL)
        return jr_fail(e, INTERNAL_ERROR, "Internal error: no memory for the result");
    *out = j;
    return 0;
}
