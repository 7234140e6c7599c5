/* jsonrpc_methods.c - disco-jsonrpc's methods, one function each, and the
 * table the request loop looks them up in. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/jsonrpc/jsonrpc.h"

/* ---- methods ---- */

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
    json_t *name = jr_param(params, "name", 1, e);
    disco_rpc_handle_t h;
    if (name == NULL)
        return -1;
    if (!json_is_string(name) || strlen(json_string_value(name)) != json_string_length(name))
        return jr_fail(e, INVALID_PARAMS, "Invalid params: \"name\" must be a string");
    disco_status_t st = disco_rpc_get_func(sv->s, json_string_value(name), &h);
    if (st != DISCO_OK)
        return jr_disco_fail(e, st);
    *res = json_pack("{s:o}", "handle", jr_u64_text(h));
    return 0;
}

static int m_call(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h;
    json_t *args = jr_param(params, "args", 0, e);
    if (jr_u64_param(params, "handle", 1, 0, &h, e) != 0)
        return -1;
    if (args != NULL && (!json_is_array(args) || json_array_size(args) > INT32_MAX))
        return jr_fail(e, INVALID_PARAMS, "Invalid params: \"args\" must be an array of values");
    size_t n = args != NULL ? json_array_size(args) : 0;
    disco_value_t *vals = calloc(n + 1, sizeof *vals), ret = disco_value_null();
    struct arena a = {0};
    int rc = vals == NULL ? jr_fail(e, INTERNAL_ERROR, "Internal error: no memory") : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char where[32];
        snprintf(where, sizeof where, "args[%zu]", i);
        rc = jr_decode_value(json_array_get(args, i), where, &a, &vals[i], e);
    }
    if (rc == 0) {
        disco_status_t st = disco_rpc_call(sv->s, h, vals, (int)n, &ret);
        rc = st != DISCO_OK ? jr_disco_fail(e, st) : jr_encode_value(&ret, res, e);
        if (rc == 0 && (*res = json_pack("{s:o}", "result", *res)) == NULL)
            rc = jr_fail(e, INTERNAL_ERROR, "Internal error: no memory");
    }
    disco_value_clear(&ret);
    jr_arena_free(&a);
    free(vals);
    return rc;
}

static int m_alloc(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    DLDevice dev;
    uint64_t nbytes, align;
    disco_rpc_handle_t h;
    if (jr_device_param(params, &dev, e) != 0 ||
        jr_u64_param(params, "nbytes", 1, 0, &nbytes, e) != 0 ||
        jr_u64_param(params, "align", 0, 0, &align, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_dev_alloc(sv->s, dev, nbytes, align, &h);
    if (st != DISCO_OK)
        return jr_disco_fail(e, st);
    *res = json_pack("{s:o}", "handle", jr_u64_text(h));
    return 0;
}

static int m_free(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h;
    if (jr_u64_param(params, "handle", 1, 0, &h, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_free_handle(sv->s, h);
    *res = json_null();
    return st != DISCO_OK ? jr_disco_fail(e, st) : 0;
}

static int m_dev_free(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    DLDevice dev;
    uint64_t h;
    if (jr_device_param(params, &dev, e) != 0 || jr_u64_param(params, "handle", 1, 0, &h, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_dev_free(sv->s, dev, h);
    *res = json_null();
    return st != DISCO_OK ? jr_disco_fail(e, st) : 0;
}

static int m_stream_sync(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    DLDevice dev;
    if (jr_device_param(params, &dev, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_stream_sync(sv->s, dev);
    *res = json_null();
    return st != DISCO_OK ? jr_disco_fail(e, st) : 0;
}

static int m_copy_to(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h, off;
    unsigned char *buf;
    size_t n;
    json_t *data = jr_param(params, "data", 1, e);
    if (jr_u64_param(params, "handle", 1, 0, &h, e) != 0 ||
        jr_u64_param(params, "offset", 0, 0, &off, e) != 0 || data == NULL ||
        jr_b64_decode(data, "data", &buf, &n, e) != 0)
        return -1;
    disco_status_t st = disco_rpc_copy_to_remote(sv->s, buf, h, off, n);
    free(buf);
    *res = json_null();
    return st != DISCO_OK ? jr_disco_fail(e, st) : 0;
}

#define COPY_FROM_MAX (512u << 20) /* bytes: base64 makes 683 MiB, under the 1 GiB body */

static int m_copy_from(struct server *sv, json_t *params, json_t **res, struct err *e)
{
    uint64_t h, off, n;
    if (jr_u64_param(params, "handle", 1, 0, &h, e) != 0 ||
        jr_u64_param(params, "offset", 0, 0, &off, e) != 0 ||
        jr_u64_param(params, "nbytes", 1, 0, &n, e) != 0)
        return -1;
    /* The answer carries the bytes in base64 in one JSON text, read whole by
     * the client: more than the framing's 1 GiB cannot travel, and a buffer
     * that large is refused before it is allocated (copy in pieces). */
    if (n > COPY_FROM_MAX)
        return jr_fail(e, INVALID_PARAMS,
                       "Invalid params: \"nbytes\" %" PRIu64 " is over %u (copy in pieces)", n,
                       COPY_FROM_MAX);
    void *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return jr_disco_fail(e, disco_set_error(DISCO_E_NOMEM, "%" PRIu64 " bytes to copy", n));
    disco_status_t st = disco_rpc_copy_from_remote(sv->s, h, off, buf, n);
    int rc = st != DISCO_OK ? jr_disco_fail(e, st) : 0;
    if (rc == 0 && (*res = json_pack("{s:o}", "data", jr_b64_encode(buf, n))) == NULL)
        rc = jr_fail(e, INTERNAL_ERROR, "Internal error: no memory for %" PRIu64 " bytes", n);
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
const struct method jr_methods[] = {
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
const size_t jr_nmethods = sizeof jr_methods / sizeof jr_methods[0];
