/* jsonrpc_json.c - disco-jsonrpc's JSON helpers: error replies, base64,
 * 64-bit numbers as JSON integers or decimal strings, and named params. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/jsonrpc/jsonrpc.h"

/* ---- errors ---- */

int jr_fail(struct err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return -1;
}

/* A JSON string of s; bytes that are not valid UTF-8 become '?'. */
json_t *jr_text(const char *s)
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
int jr_disco_fail(struct err *e, disco_status_t st)
{
    const char *detail = disco_last_error();
    if (detail[0] == '\0')
        detail = disco_strerror(st);
    jr_fail(e, st, "%s: %s", disco_err_name(st), detail);
    e->data = json_pack("{s:s,s:o}", "status", disco_err_name(st), "detail", jr_text(detail));
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
json_t *jr_b64_encode(const void *data, size_t n)
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
int jr_b64_decode(const json_t *j, const char *what, unsigned char **out, size_t *len_out,
                  struct err *e)
{
    if (!json_is_string(j))
        return jr_fail(e, INVALID_PARAMS, "Invalid params: \"%s\" must be a base64 string", what);
    const char *s = json_string_value(j);
    size_t n = json_string_length(j), pad = 0;
    if (n % 4 != 0)
        return jr_fail(e, INVALID_PARAMS,
                       "Invalid params: \"%s\": base64 length %zu is not a multiple of 4", what, n);
    while (pad < 2 && pad < n && s[n - 1 - pad] == '=')
        pad++;
    size_t len = n / 4 * 3 - pad;
    unsigned char *buf = malloc(len + 1), *o = buf;
    if (buf == NULL)
        return jr_fail(e, INTERNAL_ERROR, "Internal error: no memory for %zu bytes", len);
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (size_t k = 0; k < 4; k++) {
            v[k] = i + k < n - pad ? b64_value((unsigned char)s[i + k]) : 0;
            if (v[k] < 0) {
                free(buf);
                return jr_fail(e, INVALID_PARAMS,
                               "Invalid params: \"%s\": invalid base64 character at offset %zu",
                               what, i + k);
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        size_t take = i + 4 < n ? 3 : 3 - pad;
        if (take < 3 && (w & (take == 1 ? 0xffffu : 0xffu)) != 0) {
            free(buf);
            return jr_fail(e, INVALID_PARAMS, "Invalid params: \"%s\": nonzero base64 padding bits",
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
int jr_json_i64(const json_t *j, int64_t lo, int64_t hi, int64_t *out)
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
int jr_json_u64(const json_t *j, uint64_t *out)
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

json_t *jr_u64_text(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
}

json_t *jr_i64_text(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return json_string(buf);
}

int jr_i64_safe(int64_t v)
{
    return v > -MAX_SAFE_INT && v < MAX_SAFE_INT;
}

/* ---- params ---- */

/* Members of obj (named where) must be among the NULL-terminated names;
 * code: INVALID_PARAMS or INVALID_REQUEST. */
int jr_only_keys(json_t *obj, const char *where, const char *const *names, int code, struct err *e)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        size_t i = 0;
        while (names[i] != NULL && strcmp(names[i], key) != 0)
            i++;
        if (names[i] == NULL)
            return jr_fail(e, code, "%s: %s: unknown member \"%s\"",
                           code == INVALID_PARAMS ? "Invalid params" : "Invalid Request", where,
                           key);
    }
    return 0;
}

/* params[name], or NULL (and an error if required). */
json_t *jr_param(json_t *params, const char *name, int required, struct err *e)
{
    json_t *j = params != NULL ? json_object_get(params, name) : NULL;
    if (j == NULL && required)
        jr_fail(e, INVALID_PARAMS, "Invalid params: missing param \"%s\"", name);
    return j;
}

int jr_u64_param(json_t *params, const char *name, int required, uint64_t dflt, uint64_t *out,
                 struct err *e)
{
    json_t *j = jr_param(params, name, required, e);
    if (j == NULL) {
        *out = dflt;
        return required ? -1 : 0;
    }
    if (jr_json_u64(j, out) != 0)
        return jr_fail(
            e, INVALID_PARAMS,
            "Invalid params: \"%s\" must be an unsigned 64-bit integer (a JSON integer or "
            "a decimal string)",
            name);
    return 0;
}

/* A device object {device_type, device_id} (a "type":"device" member is
 * allowed, so a device value works too). */
int jr_device_of(json_t *j, const char *where, DLDevice *out, struct err *e)
{
    int64_t type, id;
    if (!json_is_object(j))
        return jr_fail(e, INVALID_PARAMS,
                       "Invalid params: %s must be {\"device_type\": N, \"device_id\": N}", where);
    if (jr_only_keys(j, where, (const char *const[]){"type", "device_type", "device_id", NULL},
                     INVALID_PARAMS, e) != 0)
        return -1;
    json_t *t = json_object_get(j, "type");
    if ((t != NULL && !(json_is_string(t) && strcmp(json_string_value(t), "device") == 0)) ||
        jr_json_i64(json_object_get(j, "device_type"), 0, INT32_MAX, &type) != 0 ||
        jr_json_i64(json_object_get(j, "device_id"), 0, INT32_MAX, &id) != 0)
        return jr_fail(e, INVALID_PARAMS,
                       "Invalid params: %s needs integers \"device_type\" and \"device_id\" (>= 0)",
                       where);
    *out = (DLDevice){(DLDeviceType)type, (int32_t)id};
    return 0;
}

int jr_device_param(json_t *params, DLDevice *out, struct err *e)
{
    json_t *j = jr_param(params, "device", 0, e);
    if (j == NULL) {
        *out = (DLDevice){kDLCPU, 0};
        return 0;
    }
    return jr_device_of(j, "\"device\"", out, e);
}
