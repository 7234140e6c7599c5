/*
 * disco-jsonrpc - the RPC session API as JSON-RPC 2.0 on stdio, for tools in
 * any language (as the microTVM Project API server does).
 *
 *   disco-jsonrpc [--load LIBRARY]... [--allow-load DIR]
 *                 [--connect ADDRESS [--timeout MS] [--token-file PATH]]
 *
 * Protocol (the full list is in usage() below):
 *  1. JSON-RPC 2.0 on stdin/stdout, framed by lines (one request per line,
 *     one response per line, flushed) or, when the input starts with a
 *     "Content-Length:" header, by LSP-style headers, answered in kind
 *     (jsonrpc_wire.h). Notifications (no "id") run and get no response.
 *     A batch (an array) gets an array of responses, one per request that
 *     has an id or is invalid (nothing when there are none); an empty
 *     batch is one -32600 error. A number out of range (an integer outside
 *     int64, a real beyond a double) is -32600 in the envelope, -32602 in
 *     params: valid JSON, not a parse error.
 *  2. params are by name. Handles are 64-bit and travel as decimal strings.
 *  3. Values: JSON null, true/false, integers, reals and strings map to
 *     null, bool, int, float and str; everything else is a typed object
 *     {"type": ..., ...}. Binary payloads are base64 (standard, padded).
 *  4. A disco failure answers with "code" the (negative) disco status,
 *     "message" "DISCO_E_NAME: detail" and "data" {"status", "detail"}.
 *
 * Anything a loaded library prints on stdout goes to stderr: the protocol
 * owns a private copy of the stdout descriptor.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "disco/dtype.h"
#include "disco/rpc.h"
#include "tools/jsonrpc/jsonrpc_wire.h"

#define PARSE_ERROR      -32700
#define INVALID_REQUEST  -32600
#define METHOD_NOT_FOUND -32601
#define INVALID_PARAMS   -32602
#define INTERNAL_ERROR   -32603
#define MAX_SAFE_INT     ((int64_t)1 << 53) /* exact in a double */

struct err {
    int code;
    char msg[2048];
    json_t *data; /* owned; NULL: none */
};

struct server {
    disco_rpc_t *s;
    FILE *out;
    jw_stream_t wire; /* framing on stdin and out */
    int quit;         /* 1: shutdown requested */
    int broken;       /* stdout failed */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: disco-jsonrpc [--load LIBRARY]... [--allow-load DIR]\n"
            "                     [--connect ADDRESS [--timeout MS] [--token-file PATH]]\n"
            "JSON-RPC 2.0 on stdio: one request per line on stdin, one response per line on\n"
            "stdout; or, when the input starts with a Content-Length: header, LSP-style\n"
            "framing (Content-Length: N, blank line, N bytes) both ways. Serves a local\n"
            "session (this process's functions and the --load'ed libraries;\n"
            "disco.load_library only for libraries inside --allow-load DIR), or with\n"
            "--connect a client session to a disco-rpc-server (ADDRESS: unix:/path,\n"
            "tcp:HOST:PORT, shm:/path; --timeout: per call, 0 = none; the server's token\n"
            "from --token-file or $DISCO_TOKEN_FILE).\n"
            "Methods (params by name; handles are decimal strings):\n"
            "  version                               -> {protocol, magic, server, session}\n"
            "  get_function {name}                   -> {handle}\n"
            "  call {handle, args?: [value]}         -> {result: value}\n"
            "  alloc {device?, nbytes, align?}       -> {handle}\n"
            "  free {handle}                         -> null\n"
            "  dev_free {device?, handle}            -> null\n"
            "  stream_sync {device?}                 -> null\n"
            "  copy_to_remote {handle, offset?, data: base64}     -> null\n"
            "  copy_from_remote {handle, offset?, nbytes}         -> {data: base64}\n"
            "  shutdown                              -> null, then exit 0 (so does end of input)\n"
            "device: {device_type, device_id}, default CPU 0. Values: null, true/false, JSON\n"
            "integers (int), reals (float), strings (str), or typed objects:\n"
            "  {type:int, value: N or \"N\"}   {type:float, value: X or \"nan\"/\"inf\"/\"-inf\"}\n"
            "  {type:str, value: S or base64: B}   {type:bytes, base64: B}\n"
            "  {type:shape, dims: [N...]}   {type:dtype, name: \"float32\" or code, bits, lanes}\n"
            "  {type:device, device_type, device_id}   {type:dref, reg: \"N\"}\n"
            "  {type:func, handle: \"N\"}   {type:opaque, handle: \"N\"}   {type:null}\n"
            "Results use plain JSON where exact (ints with |v| < 2^53, finite floats, UTF-8\n"
            "strings), the typed form otherwise. Batch requests (arrays) get an array of\n"
            "responses (none for notifications; a shutdown takes effect after its batch).\n"
            "Errors: -32700 parse, -32600 invalid request, -32601 unknown method, -32602\n"
            "invalid params (also a number out of range: -32600 in the envelope, -32602 in\n"
            "params); a disco failure: code = disco status (e.g. -14), message\n"
            "\"DISCO_E_NAME: detail\", data {status, detail}.\n");
}

/* ---- errors ---- */

__attribute__((format(printf, 3, 4))) static int fail(struct err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return -1;
}

/* A JSON string of s; bytes that are not valid UTF-8 become '?'. */
static json_t *text(const char *s)
{
    json_t *j = json_string(s);
    if (j != NULL)
        return j;
    char *c = strdup(s);
    if (c == NULL)
        return NULL;
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

/* Reports the disco failure st with this thread's error detail. */
static int disco_fail(struct err *e, disco_status_t st)
{
    const char *detail = disco_last_error();
    if (detail[0] == '\0')
        detail = disco_strerror(st);
    fail(e, st, "%s: %s", disco_err_name(st), detail);
    e->data = json_pack("{s:s,s:o}", "status", disco_err_name(st), "detail", text(detail));
    return -1;
}

/* ---- base64 (RFC 4648, standard alphabet, padded) ---- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* A JSON string holding the base64 of n bytes at p, or NULL (no memory). */
static json_t *b64_encode(const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t len = (n + 2) / 3 * 4;
    char *s = malloc(len + 1);
    if (s == NULL)
        return NULL;
    char *o = s;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            w |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            w |= p[i + 2];
        *o++ = b64_alphabet[w >> 18];
        *o++ = b64_alphabet[(w >> 12) & 63];
        *o++ = i + 1 < n ? b64_alphabet[(w >> 6) & 63] : '=';
        *o++ = i + 2 < n ? b64_alphabet[w & 63] : '=';
    }
    json_t *j = json_stringn_nocheck(s, len);
    free(s);
    return j;
}

/* Decodes the JSON string j (named what) into a malloc'd buffer with one
 * spare NUL byte. Rejects wrong lengths, characters outside the alphabet,
 * misplaced padding and nonzero padding bits. */
static int b64_decode(const json_t *j, const char *what, unsigned char **out, size_t *len_out,
                      struct err *e)
{
    if (!json_is_string(j))
        return fail(e, INVALID_PARAMS, "Invalid params: \"%s\" must be a base64 string", what);
    const char *s = json_string_value(j);
    size_t n = json_string_length(j), pad = 0;
    if (n % 4 != 0)
        return fail(e, INVALID_PARAMS,
                    "Invalid params: \"%s\": base64 length %zu is not a multiple of 4", what, n);
    while (pad < 2 && pad < n && s[n - 1 - pad] == '=')
        pad++;
    size_t len = n / 4 * 3 - pad;
    unsigned char *buf = malloc(len + 1), *o = buf;
    if (buf == NULL)
        return fail(e, INTERNAL_ERROR, "Internal error: no memory for %zu bytes", len);
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (size_t k = 0; k < 4; k++) {
            v[k] = i + k < n - pad ? b64_value((unsigned char)s[i + k]) : 0;
            if (v[k] < 0) {
                free(buf);
                return fail(e, INVALID_PARAMS,
                            "Invalid params: \"%s\": invalid base64 character at offset %zu", what,
                            i + k);
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        size_t take = i + 4 < n ? 3 : 3 - pad;
        if (take < 3 && (w & (take == 1 ? 0xffffu : 0xffu)) != 0) {
            free(buf);
            return fail(e, INVALID_PARAMS, "Invalid params: \"%s\": nonzero base64 padding bits",
                        what);
        }
        for (size_t k = 0; k < take; k++)
            *o++ = (unsigned char)(w >> (16 - 8 * k));
    }
    *o = '\0';
    *out = buf;
    *len_out = len;
    return 0;
}

/* ---- numbers ---- */

/* A JSON integer, or a decimal string ("-12"), within [lo, hi]. */
static int json_i64(const json_t *j, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v;
    if (json_is_integer(j)) {
        v = json_integer_value(j);
    } else if (json_is_string(j)) {
        const char *s = json_string_value(j);
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) || *end != '\0' ||
            end != s + json_string_length(j) || errno != 0)
            return -1;
        v = x;
    } else {
        return -1;
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A JSON integer >= 0, or a decimal string of an unsigned 64-bit number. */
static int json_u64(const json_t *j, uint64_t *out)
{
    if (json_is_integer(j)) {
        if (json_integer_value(j) < 0)
            return -1;
        *out = (uint64_t)json_integer_value(j);
        return 0;
    }
    if (!json_is_string(j))
        return -1;
    const char *s = json_string_value(j);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (!(s[0] >= '0' && s[0] <= '9') || *end != '\0' || end != s + json_string_length(j) ||
        errno != 0)
        return -1;
    *out = x;
    return 0;
}

static json_t *u64_text(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
}

static json_t *i64_text(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return json_string(buf);
}

static int i64_safe(int64_t v)
{
    return v > -MAX_SAFE_INT && v < MAX_SAFE_INT;
}

/* ---- params ---- */

/* Members of obj (named where) must be among the NULL-terminated names;
 * code: INVALID_PARAMS or INVALID_REQUEST. */
static int only_keys(json_t *obj, const char *where, const char *const *names, int code,
                     struct err *e)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        size_t i = 0;
        while (names[i] != NULL && strcmp(names[i], key) != 0)
            i++;
        if (names[i] == NULL)
            return fail(e, code, "%s: %s: unknown member \"%s\"",
                        code == INVALID_PARAMS ? "Invalid params" : "Invalid Request", where, key);
    }
    return 0;
}

/* params[name], or NULL (and an error if required). */
static json_t *param(json_t *params, const char *name, int required, struct err *e)
{
    json_t *j = params != NULL ? json_object_get(params, name) : NULL;
    if (j == NULL && required)
        fail(e, INVALID_PARAMS, "Invalid params: missing param \"%s\"", name);
    return j;
}

static int u64_param(json_t *params, const char *name, int required, uint64_t dflt, uint64_t *out,
                     struct err *e)
{
    json_t *j = param(params, name, required, e);
    if (j == NULL) {
        *out = dflt;
        return required ? -1 : 0;
    }
    if (json_u64(j, out) != 0)
        return fail(e, INVALID_PARAMS,
                    "Invalid params: \"%s\" must be an unsigned 64-bit integer (a JSON integer or "
                    "a decimal string)",
                    name);
    return 0;
}

/* A device object {device_type, device_id} (a "type":"device" member is
 * allowed, so a device value works too). */
static int device_of(json_t *j, const char *where, DLDevice *out, struct err *e)
{
    int64_t type, id;
    if (!json_is_object(j))
        return fail(e, INVALID_PARAMS,
                    "Invalid params: %s must be {\"device_type\": N, \"device_id\": N}", where);
    if (only_keys(j, where, (const char *const[]){"type", "device_type", "device_id", NULL},
                  INVALID_PARAMS, e) != 0)
        return -1;
    json_t *t = json_object_get(j, "type");
    if ((t != NULL && !(json_is_string(t) && strcmp(json_string_value(t), "device") == 0)) ||
        json_i64(json_object_get(j, "device_type"), 0, INT32_MAX, &type) != 0 ||
        json_i64(json_object_get(j, "device_id"), 0, INT32_MAX, &id) != 0)
        return fail(e, INVALID_PARAMS,
                    "Invalid params: %s needs integers \"device_type\" and \"device_id\" (>= 0)",
                    where);
    *out = (DLDevice){(DLDeviceType)type, (int32_t)id};
    return 0;
}

static int device_param(json_t *params, DLDevice *out, struct err *e)
{
    json_t *j = param(params, "device", 0, e);
    if (j == NULL) {
        *out = (DLDevice){kDLCPU, 0};
        return 0;
    }
    return device_of(j, "\"device\"", out, e);
}

/* ---- values ---- */

/* Buffers that decoded arguments point into, freed after the call. */
struct arena {
    void **p;
    size_t n;
};

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

static void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
}

#define BAD_VALUE(...) fail(e, INVALID_PARAMS, "Invalid params: " __VA_ARGS__)

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
    only_keys(j, w, (const char *const[]){"type", __VA_ARGS__, NULL}, INVALID_PARAMS, e)
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
        if (json_i64(val, INT64_MIN, INT64_MAX, &i) != 0)
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
                return fail(e, INTERNAL_ERROR, "Internal error: no memory");
        } else if (b64 == NULL || val != NULL) {
            return BAD_VALUE("%s: %s needs %s\"base64\"", w, type,
                             is_str ? "one of \"value\" or " : "");
        } else if (b64_decode(b64, w, &buf, &len, e) != 0) {
            return -1;
        }
        if (arena_keep(a, buf) != 0)
            return fail(e, INTERNAL_ERROR, "Internal error: no memory");
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
            return fail(e, INTERNAL_ERROR, "Internal error: no memory");
        for (size_t k = 0; k < n; k++)
            if (json_i64(json_array_get(dims, k), INT64_MIN, INT64_MAX, &d[k]) != 0)
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
        } else if (json_i64(json_object_get(j, "code"), 0, UINT8_MAX, &code) == 0 &&
                   json_i64(json_object_get(j, "bits"), 0, UINT8_MAX, &bits) == 0 &&
                   json_i64(json_object_get(j, "lanes"), 0, UINT16_MAX, &lanes) == 0) {
            t = (DLDataType){(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
        } else {
            return BAD_VALUE("%s: dtype needs \"name\", or \"code\", \"bits\" and \"lanes\"", w);
        }
        *out = disco_value_dtype(t);
    } else if (strcmp(type, "device") == 0) {
        DLDevice d;
        if (device_of(j, w, &d, e) != 0)
            return -1;
        *out = disco_value_device(d);
    } else if (strcmp(type, "dref") == 0) {
        if (KEYS("reg"))
            return -1;
        if (json_u64(json_object_get(j, "reg"), &u) != 0)
            return BAD_VALUE("%s: dref needs \"reg\": a register id", w);
        *out = (disco_value_t){.type = DISCO_T_DREF, .v.reg = u};
    } else if (strcmp(type, "func") == 0 || strcmp(type, "opaque") == 0) {
        if (KEYS("handle"))
            return -1;
        if (json_u64(h, &u) != 0)
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
static int decode_value(json_t *j, const char *w, struct arena *a, disco_value_t *out,
                        struct err *e)
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
    return json_pack("{s:s,s:o}", "type", type, key, u64_text(v));
}

/* A value to JSON (see the top of the file). */
static int encode_value(const disco_value_t *v, json_t **out, struct err *e)
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
        if (i64_safe(v->v.i))
            j = json_integer(v->v.i);
        else
            j = json_pack("{s:s,s:o}", "type", "int", "value", i64_text(v->v.i));
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
            j = json_pack("{s:s,s:o}", "type", "str", "base64", b64_encode(v->v.str, v->len));
        break;
    case DISCO_T_BYTES:
        j = json_pack("{s:s,s:o}", "type", "bytes", "base64", b64_encode(v->v.bytes, v->len));
        break;
    case DISCO_T_SHAPE:
        j = json_pack("{s:s,s:[]}", "type", "shape", "dims");
        for (uint32_t k = 0; j != NULL && k < v->len; k++) {
            int64_t d = v->v.shape[k];
            if (json_array_append_new(json_object_get(j, "dims"),
                                      i64_safe(d) ? json_integer(d) : i64_text(d)) != 0) {
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
        return disco_fail(e, disco_set_error(DISCO_E_BAD_TYPE, "a %s result cannot be sent as JSON",
                                             disco_type_name(v->type)));
    }
    if (j == NULL)
        return fail(e, INTERNAL_ERROR, "Internal error: no memory for the result");
    *out = j;
    return 0;
}

/* ---- methods ---- */

typedef int (*method_fn)(struct server *sv, json_t *params, json_t **res, struct err *e);

static int m_version(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    (void)params;
    (void)e;
    *res = json_pack("{s:i,s:s,s:s,s:s}", "protocol", DISCO_RPC_VERSION, "magic", DISCO_RPC_MAGIC,
                     "server", "disco-jsonrpc", "session", sv->s->ops->kind);
    return 0;
}

static int m_get_function(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    json_t *name = param(params, "name", 1, e);
    disco_rpc_handle_t h;
    if (name == NULL)
        return -1;
    if (!json_is_string(name) || strlen(json_string_value(name)) != json_string_length(name))
        return fail(e, INVALID_PARAMS, "Invalid params: \"name\" must be a string");
    disco_status_t st = disco_rpc_get_func(sv->s, json_string_value(name), &h);
    if (st != DISCO_OK)
        return disco_fail(e, st);
    *res = json_pack("{s:o}", "handle", u64_text(h));
    return 0;
}

static int m_call(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h;
    json_t *args = param(params, "args", 0, e);
    if (u64_param(params, "handle", 1, 0, &h, e) != 0)
        return -1;
    if (args != NULL && (!json_is_array(args) || json_array_size(args) > INT32_MAX))
        return fail(e, INVALID_PARAMS, "Invalid params: \"args\" must be an array of values");
    size_t n = args != NULL ? json_array_size(args) : 0;
    disco_value_t *vals = calloc(n + 1, sizeof *vals), ret = disco_value_null();
    struct arena a = {0};
    int rc = vals == NULL ? fail(e, INTERNAL_ERROR, "Internal error: no memory") : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char where[32];
        snprintf(where, sizeof where, "args[%zu]", i);
        rc = decode_value(json_array_get(args, i), where, &a, &vals[i], e);
    }
    if (rc == 0) {
        disco_status_t st = disco_rpc_call(sv->s, h, vals, (int)n, &ret);
        rc = st != DISCO_OK ? disco_fail(e, st) : encode_value(&ret, res, e);
        if (rc == 0 && (*res = json_pack("{s:o}", "result", *res)) == NULL)
            rc = fail(e, INTERNAL_ERROR, "Internal error: no memory");
    }
    disco_value_clear(&ret);
    arena_free(&a);
    free(vals);
    return rc;
}

static int m_alloc(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    DLDevice dev;
    uint64_t nbytes, align;
    disco_rpc_handle_t h;
    if (device_param(params, &dev, e) != 0 || u64_param(params, "nbytes", 1, 0, &nbytes, e) != 0 ||
        u64_param(params, "align", 0, 0, &align, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_dev_alloc(sv->s, dev, nbytes, align, &h);
    if (st != DISCO_OK)
        return disco_fail(e, st);
    *res = json_pack("{s:o}", "handle", u64_text(h));
    return 0;
}

static int m_free(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h;
    if (u64_param(params, "handle", 1, 0, &h, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_free_handle(sv->s, h);
    *res = json_null();
    return st != DISCO_OK ? disco_fail(e, st) : 0;
}

static int m_dev_free(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    DLDevice dev;
    uint64_t h;
    if (device_param(params, &dev, e) != 0 || u64_param(params, "handle", 1, 0, &h, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_dev_free(sv->s, dev, h);
    *res = json_null();
    return st != DISCO_OK ? disco_fail(e, st) : 0;
}

static int m_stream_sync(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    DLDevice dev;
    if (device_param(params, &dev, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_stream_sync(sv->s, dev);
    *res = json_null();
    return st != DISCO_OK ? disco_fail(e, st) : 0;
}

static int m_copy_to(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h, off;
    unsigned char *buf;
    size_t n;
    json_t *data = param(params, "data", 1, e);
    if (u64_param(params, "handle", 1, 0, &h, e) != 0 ||
        u64_param(params, "offset", 0, 0, &off, e) != 0 || data == NULL ||
        b64_decode(data, "data", &buf, &n, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_copy_to_remote(sv->s, buf, h, off, n);
    free(buf);
    *res = json_null();
    return st != DISCO_OK ? disco_fail(e, st) : 0;
}

#define COPY_FROM_MAX (512u << 20) /* bytes: base64 makes 683 MiB, under the 1 GiB body */

static int m_copy_from(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h, off, n;
    if (u64_param(params, "handle", 1, 0, &h, e) != 0 ||
        u64_param(params, "offset", 0, 0, &off, e) != 0 ||
        u64_param(params, "nbytes", 1, 0, &n, e) != 0)
        return -1;
    /* The answer carries the bytes in base64 in one JSON text, read whole by
     * the client: more than the framing's 1 GiB cannot travel, and a buffer
     * that large is refused before it is allocated (copy in pieces). */
    if (n > COPY_FROM_MAX)
        return fail(e, INVALID_PARAMS,
                    "Invalid params: \"nbytes\" %" PRIu64 " is over %u (copy in pieces)", n,
                    COPY_FROM_MAX);
    void *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return disco_fail(e, disco_set_error(DISCO_E_NOMEM, "%" PRIu64 " bytes to copy", n));
    disco_status_t st = disco_rpc_copy_from_remote(sv->s, h, off, buf, n);
    int rc = st != DISCO_OK ? disco_fail(e, st) : 0;
    if (rc == 0 && (*res = json_pack("{s:o}", "data", b64_encode(buf, n))) == NULL)
        rc = fail(e, INTERNAL_ERROR, "Internal error: no memory for %" PRIu64 " bytes", n);
    free(buf);
    return rc;
}

static int m_shutdown(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    (void)params;
    (void)e;
    sv->quit = 1;
    *res = json_null();
    return 0;
}

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
static const struct method {
    const char *name;
    method_fn fn;
    const char *const *params;
} methods[] = {
    {"version", m_version, P(NULL)},
    {"get_function", m_get_function, P("name")},
    {"call", m_call, P("handle", "args")},
    {"alloc", m_alloc, P("device", "nbytes", "align")},
    {"free", m_free, P("handle")},
    {"dev_free", m_dev_free, P("device", "handle")},
    {"stream_sync", m_stream_sync, P("device")},
    {"copy_to_remote", m_copy_to, P("handle", "offset", "data")},
    {"copy_from_remote", m_copy_from, P("handle", "offset", "nbytes")},
    {"shutdown", m_shutdown, P(NULL)},
};
#undef P

/* ---- the loop ---- */

/* Sends msg (a response or a batch of them; consumed) in the input's
 * framing. */
static void send_msg(struct server *sv, json_t *msg)
{
    char *s = msg != NULL ? json_dumps(msg, JSON_COMPACT) : NULL;
    if (s == NULL)
        s = strdup("{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32603,\"message\":\"Internal "
                   "error: cannot encode the response\"},\"id\":null}");
    if (s == NULL || jw_write(&sv->wire, s, strlen(s)) != 0) {
        fprintf(stderr, "disco-jsonrpc: cannot write a response: %s\n", strerror(errno));
        sv->broken = 1;
    }
    free(s);
    json_decref(msg);
}

/* The error response for e (its data consumed), with id or null. */
static json_t *error_response(json_t *id, struct err *e)
{
    json_t *err = json_pack("{s:i,s:o}", "code", e->code, "message", text(e->msg));
    if (err != NULL && e->data != NULL)
        json_object_set(err, "data", e->data);
    json_decref(e->data);
    e->data = NULL;
    return json_pack("{s:s,s:o,s:O}", "jsonrpc", "2.0", "error", err, "id",
                     id != NULL ? id : json_null());
}

static int valid_id(const json_t *id)
{
    return json_is_string(id) || json_is_number(id) || json_is_null(id);
}

/* Checks the request object; on success sets the method and its params.
 * A number out of range (jw_load's marker) in the envelope is an invalid
 * request; in params, invalid params. */
static int check_request(struct server *sv, json_t *req, const struct method **m_out,
                         json_t **params_out, struct err *e)
{
    json_t *ver = json_object_get(req, "jsonrpc"), *method = json_object_get(req, "method");
    json_t *params = json_object_get(req, "params"), *id = json_object_get(req, "id");
    const char *key;
    json_t *val;
    json_object_foreach(req, key, val)
    {
        if (strcmp(key, "params") != 0 && jw_has_overflow(&sv->wire, val))
            return fail(e, INVALID_REQUEST,
                        "Invalid Request: \"%s\" holds a number out of range (integers must fit "
                        "in 64 bits, reals in a double)",
                        key);
    }
    if (only_keys(req, "request", (const char *const[]){"jsonrpc", "method", "params", "id", NULL},
                  INVALID_REQUEST, e) != 0)
        return -1;
    if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0") != 0)
        return fail(e, INVALID_REQUEST, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    if (!json_is_string(method))
        return fail(e, INVALID_REQUEST, "Invalid Request: \"method\" must be a string");
    if (id != NULL && !valid_id(id))
        return fail(e, INVALID_REQUEST, "Invalid Request: \"id\" must be a string or a number");
    if (params != NULL && !json_is_object(params) && !json_is_array(params))
        return fail(e, INVALID_REQUEST, "Invalid Request: \"params\" must be an object");
    const char *name = json_string_value(method);
    const struct method *m = NULL;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(methods[i].name, name) == 0 && strlen(name) == json_string_length(method))
            m = &methods[i];
    if (m == NULL)
        return fail(e, METHOD_NOT_FOUND, "Method not found: \"%s\"", name);
    if (json_is_array(params)) {
        if (json_array_size(params) != 0)
            return fail(e, INVALID_PARAMS, "Invalid params: params go by name (an object)");
        params = NULL;
    }
    if (params != NULL && only_keys(params, "params", m->params, INVALID_PARAMS, e) != 0)
        return -1;
    json_object_foreach(params, key, val)
    {
        if (jw_has_overflow(&sv->wire, val))
            return fail(e, INVALID_PARAMS,
                        "Invalid params: \"%s\" holds a number out of range (integers must fit "
                        "in 64 bits, reals in a double)",
                        key);
    }
    *m_out = m;
    *params_out = params;
    return 0;
}

/* Runs one request (an element of a batch, or a whole message) and returns
 * its response, or NULL when none is due (a notification). */
static json_t *handle_request(struct server *sv, json_t *req)
{
    struct err e = {0};
    if (!json_is_object(req)) {
        fail(&e, INVALID_REQUEST, "Invalid Request: a request must be a JSON object");
        return error_response(NULL, &e);
    }
    json_t *id = json_object_get(req, "id"), *params = NULL, *res = NULL;
    const struct method *m = NULL;
    int rc = check_request(sv, req, &m, &params, &e);
    if (rc != 0 && e.code == INVALID_REQUEST) /* answered even without an id */
        return error_response(valid_id(id) && !jw_has_overflow(&sv->wire, id) ? id : NULL, &e);
    if (rc != 0 || (rc = m->fn(sv, params, &res, &e)) != 0) {
        json_decref(res);
        if (id != NULL)
            return error_response(id, &e);
        json_decref(e.data);
        return NULL;
    }
    if (id == NULL) {
        json_decref(res);
        return NULL;
    }
    return json_pack("{s:s,s:o,s:O}", "jsonrpc", "2.0", "result", res != NULL ? res : json_null(),
                     "id", id);
}

/* One message: a request or a batch (an array of them). */
static void handle_message(struct server *sv, const char *msg, size_t len)
{
    struct err e = {0};
    json_error_t je;
    json_t *req = jw_load(&sv->wire, msg, len, &je);
    if (req == NULL) {
        if (json_error_code(&je) == json_error_numeric_overflow) /* jw_load gave up */
            fail(&e, INVALID_REQUEST, "Invalid Request: more than %d numbers out of range",
                 JW_MAX_OVERFLOW);
        else
            fail(&e, PARSE_ERROR, "Parse error: %s (column %d)", je.text, je.column);
        send_msg(sv, error_response(NULL, &e));
        return;
    }
    if (!json_is_array(req)) {
        json_t *res = handle_request(sv, req);
        if (res != NULL)
            send_msg(sv, res);
    } else if (json_array_size(req) == 0) {
        fail(&e, INVALID_REQUEST, "Invalid Request: an empty batch");
        send_msg(sv, error_response(NULL, &e));
    } else {
        json_t *all = json_array(), *r;
        size_t i;
        json_array_foreach(req, i, r)
        {
            json_t *res = handle_request(sv, r);
            if (res != NULL && json_array_append_new(all, res) != 0)
                json_decref(res);
        }
        if (json_array_size(all) > 0) /* a batch of notifications: nothing */
            send_msg(sv, all);
        else
            json_decref(all);
    }
    json_decref(req);
}

int main(int argc, char **argv)
{
    const char *connect_to = NULL, *allow_load = NULL, *token_file = NULL;
    uint32_t timeout_ms = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--load") == 0 && i + 1 < argc) {
            i++; /* loaded below, once stdout is set aside */
        } else if (strcmp(a, "--connect") == 0 && i + 1 < argc) {
            connect_to = argv[++i];
        } else if (strcmp(a, "--allow-load") == 0 && i + 1 < argc) {
            allow_load = argv[++i]; /* disco.load_library: only inside this directory */
        } else if (strcmp(a, "--token-file") == 0 && i + 1 < argc) {
            token_file = argv[++i]; /* --connect's token (default $DISCO_TOKEN_FILE) */
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || argv[i][0] < '0' || argv[i][0] > '9' || v > UINT32_MAX) {
                fprintf(stderr, "disco-jsonrpc: --timeout %s: not a number of ms\n", argv[i]);
                return 2;
            }
            timeout_ms = (uint32_t)v;
        } else {
            usage(stderr);
            return 2;
        }
    }
    /* The protocol gets its own descriptor; whatever else writes to stdout
     * (a loaded library, a forked worker) lands on stderr. */
    int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    struct server sv = {0};
    if (fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0 || (sv.out = fdopen(fd, "w")) == NULL) {
        fprintf(stderr, "disco-jsonrpc: stdout: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);        /* a closed stdout ends the loop with an error instead */
    for (int i = 1; i < argc; i++) { /* the options were checked above */
        if (strcmp(argv[i], "--load") == 0 && dlopen(argv[i + 1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
            fprintf(stderr, "disco-jsonrpc: %s\n", dlerror());
            fclose(sv.out);
            return 1;
        }
        i += strcmp(argv[i], "--load") == 0 || strcmp(argv[i], "--connect") == 0 ||
             strcmp(argv[i], "--timeout") == 0 || strcmp(argv[i], "--allow-load") == 0 ||
             strcmp(argv[i], "--token-file") == 0;
    }
    /* The same load rule as disco-rpc-server (disco_rpc_load_allowed). */
    disco_rpc_client_config_t cc = {.call_timeout_ms = timeout_ms, .token_file = token_file};
    disco_rpc_local_config_t lc = {.allow_load_dir = allow_load};
    disco_status_t st = connect_to != NULL ? disco_rpc_connect_with(connect_to, &cc, &sv.s)
                                           : disco_rpc_local_with(&lc, &sv.s);
    if (st != DISCO_OK) {
        fprintf(stderr, "disco-jsonrpc: %s%s: %s (%s)\n", connect_to ? "connect " : "",
                connect_to ? connect_to : "session", disco_err_name(st), disco_last_error());
        fclose(sv.out);
        return 1;
    }
    const char *msg;
    size_t len;
    char why[256];
    int r = 0;
    jw_init(&sv.wire, stdin, sv.out);
    while (!sv.quit && !sv.broken && (r = jw_read(&sv.wire, &msg, &len, why, sizeof why)) > 0)
        handle_message(&sv, msg, len);
    if (r < 0 && !sv.broken) { /* the framing is lost: say so once, and stop */
        struct err e = {0};
        fail(&e, PARSE_ERROR, "Parse error: %s; closing", why);
        fprintf(stderr, "disco-jsonrpc: %s\n", e.msg);
        send_msg(&sv, error_response(NULL, &e));
        sv.broken = 1;
    }
    jw_free(&sv.wire);
    disco_rpc_close(sv.s);
    fclose(sv.out);
    return sv.broken ? 1 : 0;
}
