/* jsonrpc.h - the parts of disco-jsonrpc, shared between its files:
 * jsonrpc_json.c (errors, base64, numbers, params), jsonrpc_value.c (values
 * to and from JSON), jsonrpc_methods.c (the jr_methods and their table), and
 * disco-jsonrpc.c (the main and the request loop). Internal to the tool. */
#ifndef DISCO_TOOLS_JSONRPC_H
#define DISCO_TOOLS_JSONRPC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

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

/* Buffers that decoded arguments point into, freed after the call. */
struct arena {
    void **p;
    size_t n;
};

/* A method: its name, its function (0, or -1 with e set) and the names of
 * the params it accepts (NULL-terminated). */
typedef int (*method_fn)(struct server *sv, json_t *params, json_t **res, struct err *e);
struct method {
    const char *name;
    method_fn fn;
    const char *const *params;
};

/* The methods (jsonrpc_methods.c), jr_nmethods of them. */
extern const struct method jr_methods[];
extern const size_t jr_nmethods;

/* Sets e to code and the formatted message; returns -1. */
__attribute__((format(printf, 3, 4))) int jr_fail(struct err *e, int code, const char *fmt, ...);

/* A JSON string of s; bytes that are not valid UTF-8 become '?'. */
json_t *jr_text(const char *s);

/* Reports the disco failure st with this thread's error detail. */
int jr_disco_fail(struct err *e, disco_status_t st);

/* A JSON string holding the base64 of n bytes at p, or NULL (no memory). */
json_t *jr_b64_encode(const void *data, size_t n);

/* Decodes the JSON string j (named what) into a malloc'd buffer with one
 * spare NUL byte. Rejects wrong lengths, characters outside the alphabet,
 * misplaced padding and nonzero padding bits. */
int jr_b64_decode(const json_t *j, const char *what, unsigned char **out, size_t *len_out,
                  struct err *e);

/* A JSON integer, or a decimal string ("-12"), within [lo, hi]. */
int jr_json_i64(const json_t *j, int64_t lo, int64_t hi, int64_t *out);

/* A JSON integer >= 0, or a decimal string of an unsigned 64-bit number. */
int jr_json_u64(const json_t *j, uint64_t *out);

/* v as a JSON decimal string. */
json_t *jr_u64_text(uint64_t v);

/* v as a JSON decimal string. */
json_t *jr_i64_text(int64_t v);

/* Whether v is exact as a double (|v| < 2^53), so plain JSON holds it. */
int jr_i64_safe(int64_t v);

/* Members of obj (named where) must be among the NULL-terminated names;
 * code: INVALID_PARAMS or INVALID_REQUEST. */
int jr_only_keys(json_t *obj, const char *where, const char *const *names, int code, struct err *e);

/* params[name], or NULL (and an error if required). */
json_t *jr_param(json_t *params, const char *name, int required, struct err *e);

/* The unsigned 64-bit param name into *out (dflt when absent and not
 * required); 0, or -1 with e set. */
int jr_u64_param(json_t *params, const char *name, int required, uint64_t dflt, uint64_t *out,
                 struct err *e);

/* A device object {device_type, device_id} (a "type":"device" member is
 * allowed, so a device value works too). */
int jr_device_of(json_t *j, const char *where, DLDevice *out, struct err *e);

/* The optional "device" param into *out (CPU 0 when absent); 0, or -1. */
int jr_device_param(json_t *params, DLDevice *out, struct err *e);

/* Frees the arena's buffers and its list. */
void jr_arena_free(struct arena *a);

/* JSON to a value; str/bytes/shape point into j or into a's buffers. */
int jr_decode_value(json_t *j, const char *w, struct arena *a, disco_value_t *out, struct err *e);

/* A value to JSON (see the top of disco-jsonrpc.c); 0, or -1 with e set. */
int jr_encode_value(const disco_value_t *v, json_t **out, struct err *e);

#endif
