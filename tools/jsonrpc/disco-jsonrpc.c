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
 *
 * This file holds the main and the request loop; the methods are in
 * jsonrpc_methods.c, values in jsonrpc_value.c, JSON helpers in
 * jsonrpc_json.c, the framing in jsonrpc_wire.c (shared parts: jsonrpc.h).
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

#include "disco/rpc.h"
#include "tools/jsonrpc/jsonrpc.h"

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
    json_t *err = json_pack("{s:i,s:o}", "code", e->code, "message", jr_text(e->msg));
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
            return jr_fail(e, INVALID_REQUEST,
                           "Invalid Request: \"%s\" holds a number out of range (integers must fit "
                           "in 64 bits, reals in a double)",
                           key);
    }
    if (jr_only_keys(req, "request",
                     (const char *const[]){"jsonrpc", "method", "params", "id", NULL},
                     INVALID_REQUEST, e) != 0)
        return -1;
    if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0") != 0)
        return jr_fail(e, INVALID_REQUEST, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    if (!json_is_string(method))
        return jr_fail(e, INVALID_REQUEST, "Invalid Request: \"method\" must be a string");
    if (id != NULL && !valid_id(id))
        return jr_fail(e, INVALID_REQUEST, "Invalid Request: \"id\" must be a string or a number");
    if (params != NULL && !json_is_object(params) && !json_is_array(params))
        return jr_fail(e, INVALID_REQUEST, "Invalid Request: \"params\" must be an object");
    const char *name = json_string_value(method);
    const struct method *m = NULL;
    for (size_t i = 0; i < jr_nmethods; i++)
        if (strcmp(jr_methods[i].name, name) == 0 && strlen(name) == json_string_length(method))
            m = &jr_methods[i];
    if (m == NULL)
        return jr_fail(e, METHOD_NOT_FOUND, "Method not found: \"%s\"", name);
    if (json_is_array(params)) {
        if (json_array_size(params) != 0)
            return jr_fail(e, INVALID_PARAMS, "Invalid params: params go by name (an object)");
        params = NULL;
    }
    if (params != NULL && jr_only_keys(params, "params", m->params, INVALID_PARAMS, e) != 0)
        return -1;
    json_object_foreach(params, key, val)
    {
        if (jw_has_overflow(&sv->wire, val))
            return jr_fail(e, INVALID_PARAMS,
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
        jr_fail(&e, INVALID_REQUEST, "Invalid Request: a request must be a JSON object");
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
            jr_fail(&e, INVALID_REQUEST, "Invalid Request: more than %d numbers out of range",
                    JW_MAX_OVERFLOW);
        else
            jr_fail(&e, PARSE_ERROR, "Parse error: %s (column %d)", je.text, je.column);
        send_msg(sv, error_response(NULL, &e));
        return;
    }
    if (!json_is_array(req)) {
        json_t *res = handle_request(sv, req);
        if (res != NULL)
            send_msg(sv, res);
    } else if (json_array_size(req) == 0) {
        jr_fail(&e, INVALID_REQUEST, "Invalid Request: an empty batch");
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
        jr_fail(&e, PARSE_ERROR, "Parse error: %s; closing", why);
        fprintf(stderr, "disco-jsonrpc: %s\n", e.msg);
        send_msg(&sv, error_response(NULL, &e));
        sv.broken = 1;
    }
    jw_free(&sv.wire);
    disco_rpc_close(sv.s);
    fclose(sv.out);
    return sv.broken ? 1 : 0;
}
