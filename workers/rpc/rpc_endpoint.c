/* rpc_endpoint.c - serving an RPC session on a transport: the handshake
 * (version, authentication: steps A1-A4 in disco/rpc.h), then read a packet,
 * run it on the session, answer; bad packets get an error, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "disco/shm/wait.h"

#include "workers/rpc/rpc_auth.h"
#include "workers/rpc/rpc_proto.h"

#define HANDSHAKE_TIMEOUT_MS 10000u

/* The version this endpoint speaks: DISCO_RPC_VERSION, unless the test hook
 * DISCO_RPC_TEST_VERSION says otherwise (the version-mismatch test). */
static int64_t served_version(void)
{
    const char *v = getenv("DISCO_RPC_TEST_VERSION");
    return v != NULL ? atoll(v) : DISCO_RPC_VERSION;
}

enum stage { WANT_HELLO, WANT_AUTH, SERVING };

struct endpoint {
    disco_rpc_t *s;
    disco_transport_t *t;
    const disco_rpc_serve_config_t *cfg;
    disco__rpc_buf_t in, out;
    void *scratch; /* copy-from bounce buffer, DISCO_RPC_CHUNK bytes */
    enum stage stage;
    bool own_session; /* made by cfg->open: closed at the end */
    uint8_t cn[DISCO__RPC_NONCE_BYTES], sn[DISCO__RPC_NONCE_BYTES];
};

static disco_status_t reply(struct endpoint *e, uint64_t seq, const disco_value_t *v, uint32_t n)
{
    return disco__rpc_send(e->t, &e->out, DISCO_RPC_RETURN, seq, v, n, 0);
}

static disco_status_t fail(struct endpoint *e, uint64_t seq, disco_status_t st)
{
    return disco__rpc_send_error(e->t, &e->out, seq, st, disco_last_error(), 0);
}

/* Checks a request's argument types against a pattern: i int, s str,
 * y bytes, d device, h handle (FUNC or OPAQUE), ? anything, * rest. */
static disco_status_t shape_ok(const disco_frame_hdr_t *h, const disco_value_t *a, const char *pat)
{
    uint32_t i = 0;
    for (; pat[i] != '\0' && pat[i] != '*'; i++) {
        if (i >= h->nargs)
            return disco_set_error(DISCO_E_ARG_COUNT, "request %u: %u arguments, want %zu", h->code,
                                   h->nargs, strlen(pat));
        uint32_t t = a[i].type;
        bool ok = pat[i] == '?' || (pat[i] == 'i' && t == DISCO_T_INT) ||
                  (pat[i] == 's' && t == DISCO_T_STR) || (pat[i] == 'y' && t == DISCO_T_BYTES) ||
                  (pat[i] == 'd' && t == DISCO_T_DEVICE) ||
                  (pat[i] == 'h' && (t == DISCO_T_FUNC || t == DISCO_T_OPAQUE));
        if (!ok)
            return disco_set_error(DISCO_E_BAD_TYPE, "request %u argument %u: %s", h->code, i,
                                   disco_type_name(t));
    }
    if (pat[i] != '*' && h->nargs != i)
        return disco_set_error(DISCO_E_ARG_COUNT, "request %u: %u arguments, want %u", h->code,
                               h->nargs, i);
    return DISCO_OK;
}

/* Ends the handshake with an error: tells the client (code and message),
 * returns st so the connection ends. */
static disco_status_t refuse(struct endpoint *e, uint64_t seq, disco_status_t st)
{
    disco__rpc_send_error(e->t, &e->out, seq, st, disco_last_error(),
                          disco_now_ns() + 1000000000LL);
    return st;
}

/* A1 -> A2: the version check, the nonces, the mode. */
static disco_status_t on_hello(struct endpoint *e, const disco_frame_hdr_t *h,
                               const disco_value_t *a)
{
    int64_t mine = served_version();
    if (h->nargs < 2 || a[0].type != DISCO_T_STR || a[1].type != DISCO_T_INT) {
        disco_set_error(DISCO_E_AUTH, "handshake: a malformed hello");
        return refuse(e, h->seq, DISCO_E_AUTH);
    }
    if (strcmp(a[0].v.str, DISCO_RPC_MAGIC) != 0 || a[1].v.i != mine) {
        disco_set_error(DISCO_E_VERSION,
                        "protocol version mismatch: client speaks %.64s %lld, server speaks "
                        "%s %lld",
                        a[0].v.str, (long long)a[1].v.i, DISCO_RPC_MAGIC, (long long)mine);
        return refuse(e, h->seq, DISCO_E_VERSION);
    }
    if (h->nargs != 3 || a[2].type != DISCO_T_BYTES || a[2].len != DISCO__RPC_NONCE_BYTES) {
        disco_set_error(DISCO_E_AUTH, "handshake: the hello carries no %d-byte client nonce",
                        DISCO__RPC_NONCE_BYTES);
        return refuse(e, h->seq, DISCO_E_AUTH);
    }
    memcpy(e->cn, a[2].v.bytes, sizeof e->cn);
    disco_status_t st = disco__rpc_random(e->sn, sizeof e->sn);
    if (st != DISCO_OK)
        return refuse(e, h->seq, st);
    disco_value_t v[3] = {disco_value_int(mine), disco_value_bytes(e->sn, sizeof e->sn),
                          disco_value_int(e->cfg->token != NULL)};
    e->stage = e->cfg->token != NULL ? WANT_AUTH : SERVING;
    return disco__rpc_send(e->t, &e->out, DISCO_RPC_RETURN, h->seq, v, 3, 0);
}

/* A3 -> A4: the client's proof checked in constant time; ours in return. */
static disco_status_t on_auth(struct endpoint *e, const disco_frame_hdr_t *h,
                              const disco_value_t *a)
{
    if (h->nargs != 1 || a[0].type != DISCO_T_BYTES ||
        !disco__rpc_proof_ok(e->cfg->token, DISCO__RPC_CLIENT, e->cn, e->sn, a[0].v.bytes,
                             a[0].len)) {
        disco_set_error(DISCO_E_AUTH, "authentication failed: the client's proof does not match "
                                      "the server's token (wrong token file?)");
        return refuse(e, h->seq, DISCO_E_AUTH);
    }
    uint8_t proof[DISCO__RPC_PROOF_BYTES];
    disco__rpc_proof(e->cfg->token, DISCO__RPC_SERVER, e->cn, e->sn, proof);
    disco_value_t v = disco_value_bytes(proof, sizeof proof);
    e->stage = SERVING;
    disco_status_t st = disco__rpc_send(e->t, &e->out, DISCO_RPC_RETURN, h->seq, &v, 1, 0);
    sodium_memzero(proof, sizeof proof);
    return st;
}

/* One packet of the handshake. Anything but the expected step ends the
 * connection: nothing runs before the client is authenticated. */
static disco_status_t handshake(struct endpoint *e, const disco_frame_hdr_t *h, disco_value_t *a)
{
    disco_status_t st;
    if (e->stage == WANT_HELLO && h->code == DISCO_RPC_INIT)
        st = on_hello(e, h, a);
    else if (e->stage == WANT_AUTH && h->code == DISCO_RPC_AUTH)
        st = on_auth(e, h, a);
    else
        st = refuse(e, h->seq,
                    disco_set_error(
                        DISCO_E_AUTH, "request %u before the client %s: the connection is closed",
                        h->code, e->stage == WANT_HELLO ? "said hello" : "authenticated"));
    if (st == DISCO_OK && e->stage == SERVING && e->s == NULL) {
        if (e->cfg->open == NULL)
            return refuse(e, 0, disco_set_error(DISCO_E_INVAL, "no session to serve"));
        if ((st = e->cfg->open(e->cfg->open_ctx, &e->s)) != DISCO_OK)
            return refuse(e, 0, st);
        e->own_session = true;
    }
    return st;
}

static disco_status_t handle(struct endpoint *e, const disco_frame_hdr_t *h, disco_value_t *a)
{
    disco_rpc_t *s = e->s;
    const disco_rpc_ops_t *ops = s->ops;
    disco_status_t st;
    disco_rpc_handle_t hd;
    static const char *const pats[] = {
        [DISCO_RPC_SHUTDOWN] = "",     [DISCO_RPC_INIT] = "si*",      [DISCO_RPC_CALL] = "h*",
        [DISCO_RPC_COPY_FROM] = "hii", [DISCO_RPC_COPY_TO] = "hiy",   [DISCO_RPC_GET_FUNC] = "s",
        [DISCO_RPC_FREE_HANDLE] = "h", [DISCO_RPC_DEV_ALLOC] = "dii", [DISCO_RPC_DEV_FREE] = "dh",
        [DISCO_RPC_STREAM_SYNC] = "d",
    };
    if (h->code >= sizeof pats / sizeof pats[0] || pats[h->code] == NULL) {
        disco_set_error(DISCO_E_PROTOCOL, "unknown request code %u", h->code);
        return fail(e, h->seq, DISCO_E_PROTOCOL);
    }
    if ((st = shape_ok(h, a, pats[h->code])) != DISCO_OK)
        return fail(e, h->seq, st);
    switch (h->code) {
    case DISCO_RPC_INIT:
        disco_set_error(DISCO_E_PROTOCOL, "a second hello");
        return fail(e, h->seq, DISCO_E_PROTOCOL);
    case DISCO_RPC_GET_FUNC:
        if ((st = ops->get_func(s, a[0].v.str, &hd)) != DISCO_OK)
            return fail(e, h->seq, st);
        {
            disco_value_t v = {.type = DISCO_T_FUNC, .v.handle = hd};
            return reply(e, h->seq, &v, 1);
        }
    case DISCO_RPC_CALL: {
        disco_value_t ret = disco_value_null();
        if ((st = ops->call(s, a[0].v.handle, a + 1, (int)h->nargs - 1, &ret)) != DISCO_OK)
            return fail(e, h->seq, st);
        st = reply(e, h->seq, &ret, 1);
        if (st == DISCO_E_BAD_TYPE || st == DISCO_E_MSG_TOO_BIG) /* a result that cannot travel */
            st = fail(e, h->seq, st);
        disco_value_clear(&ret);
        return st;
    }
    case DISCO_RPC_COPY_TO:
        if (a[1].v.i < 0 || (st = ops->copy_to_remote(s, a[2].v.bytes, a[0].v.handle,
                                                      (uint64_t)a[1].v.i, a[2].len)) != DISCO_OK)
            return fail(e, h->seq,
                        a[1].v.i < 0 ? disco_set_error(DISCO_E_INVAL, "offset < 0") : st);
        return disco__rpc_send(e->t, &e->out, DISCO_RPC_COPY_ACK, h->seq, NULL, 0, 0);
    case DISCO_RPC_COPY_FROM: {
        int64_t off = a[1].v.i, n = a[2].v.i;
        if (off < 0 || n < 0 || n > (int64_t)DISCO_RPC_CHUNK) {
            disco_set_error(DISCO_E_INVAL, "copy from remote: offset %lld, %lld bytes (chunk %u)",
                            (long long)off, (long long)n, DISCO_RPC_CHUNK);
            return fail(e, h->seq, DISCO_E_INVAL);
        }
        if ((st = ops->copy_from_remote(s, a[0].v.handle, (uint64_t)off, e->scratch,
                                        (uint64_t)n)) != DISCO_OK)
            return fail(e, h->seq, st);
        disco_value_t v = disco_value_bytes(e->scratch, (uint32_t)n);
        return reply(e, h->seq, &v, 1);
    }
    case DISCO_RPC_FREE_HANDLE:
        if ((st = ops->free_handle(s, a[0].v.handle)) != DISCO_OK)
            return fail(e, h->seq, st);
        return reply(e, h->seq, NULL, 0);
    case DISCO_RPC_DEV_ALLOC:
        if (a[1].v.i < 0 || a[2].v.i < 0) {
            disco_set_error(DISCO_E_INVAL, "device alloc: negative size or alignment");
            return fail(e, h->seq, DISCO_E_INVAL);
        }
        if ((st = ops->dev_alloc(s, a[0].v.device, (uint64_t)a[1].v.i, (uint64_t)a[2].v.i, &hd)) !=
            DISCO_OK)
            return fail(e, h->seq, st);
        {
            disco_value_t v = disco_value_opaque(hd);
            return reply(e, h->seq, &v, 1);
        }
    case DISCO_RPC_DEV_FREE:
        if ((st = ops->dev_free(s, a[0].v.device, a[1].v.handle)) != DISCO_OK)
            return fail(e, h->seq, st);
        return reply(e, h->seq, NULL, 0);
    case DISCO_RPC_STREAM_SYNC:
        if ((st = ops->stream_sync(s, a[0].v.device)) != DISCO_OK)
            return fail(e, h->seq, st);
        return reply(e, h->seq, NULL, 0);
    default: /* SHUTDOWN */
        reply(e, h->seq, NULL, 0);
        return DISCO_E_SHUTDOWN;
    }
}

/* The head of a COPY_TO packet: frame header, memory handle, offset, and
 * the header of the bytes argument. */
#define COPY_HEAD (DISCO_FRAME_HDR + 16 + 16 + 8)

/* Receives one request. A copy to remote whose destination the session can
 * point at (ops->direct) is received straight into it and acknowledged
 * here (*served set): one copy out of the transport instead of two. Any
 * other packet is read whole into the buffer and decoded (as
 * disco__rpc_recv). */
static disco_status_t recv_request(struct endpoint *e, disco_frame_hdr_t *h, disco_value_t *args,
                                   bool *served, int64_t deadline_ns)
{
    *served = false;
    uint64_t len;
    disco_status_t st = disco_transport_recv(e->t, &len, 8, deadline_ns);
    if (st != DISCO_OK)
        return st;
    if (e->stage != SERVING && len > DISCO__RPC_AUTH_MAX_PACKET)
        return disco_set_error(DISCO_E_AUTH, "a packet of %llu bytes before authentication",
                               (unsigned long long)len);
    if (len > e->in.cap)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "packet of %llu bytes, at most %zu",
                               (unsigned long long)len, e->in.cap);
    unsigned char *f = (unsigned char *)(e->in.mem + 1);
    size_t head =
        len >= COPY_HEAD && e->stage == SERVING && e->s->ops->direct != NULL ? COPY_HEAD : 0;
    if (head != 0 && (st = disco_transport_recv(e->t, f, head, 0)) != DISCO_OK)
        return st == DISCO_E_TRUNCATED ? DISCO_E_CLOSED : st;
    if (head != 0) {
        uint32_t w[2], a0[2], a1[2], a2[2];
        uint64_t hd;
        int64_t off;
        memcpy(w, f, 8);
        memcpy(a0, f + 16, 8);
        memcpy(&hd, f + 24, 8);
        memcpy(a1, f + 32, 8);
        memcpy(&off, f + 40, 8);
        memcpy(a2, f + 48, 8);
        uint64_t padded = ((uint64_t)a2[1] + 7) / 8 * 8;
        void *dst = NULL;
        if (e->stage == SERVING && w[0] == DISCO_RPC_COPY_TO && w[1] == 3 &&
            (a0[0] == DISCO_T_OPAQUE || a0[0] == DISCO_T_FUNC) && a0[1] == 8 &&
            a1[0] == DISCO_T_INT && a1[1] == 8 && off >= 0 && a2[0] == DISCO_T_BYTES &&
            COPY_HEAD + padded == len)
            dst = e->s->ops->direct(e->s, hd, (uint64_t)off, a2[1]);
        if (dst != NULL) {
            uint64_t pad;
            if ((st = disco_transport_recv(e->t, dst, a2[1], 0)) == DISCO_OK && padded != a2[1])
                st = disco_transport_recv(e->t, &pad, padded - a2[1], 0);
            if (st != DISCO_OK)
                return st == DISCO_E_TRUNCATED ? DISCO_E_CLOSED : st;
            uint64_t seq;
            memcpy(&seq, f + 8, 8);
            *served = true;
            return disco__rpc_send(e->t, &e->out, DISCO_RPC_COPY_ACK, seq, NULL, 0, 0);
        }
    }
    if (len > head &&
        (st = disco_transport_recv(e->t, f + head, len - head, deadline_ns)) != DISCO_OK)
        return st == DISCO_E_TRUNCATED || st == DISCO_E_CLOSED
                   ? disco_set_error(DISCO_E_CLOSED, "connection closed inside a packet")
                   : st;
    return disco_frame_decode(f, len, h, args, DISCO_RPC_MAX_ARGS);
}

disco_status_t disco_rpc_serve(disco_rpc_t *sess, disco_transport_t *t)
{
    disco_rpc_serve_config_t none = {0};
    return disco_rpc_serve_with(sess, t, &none);
}

/* Why a receive ended the connection, told to the client when it can be;
 * returns the status the serve ends with. */
static disco_status_t recv_failed(struct endpoint *e, disco_status_t st, uint32_t hs_ms)
{
    if (st == DISCO_E_CLOSED && e->stage == SERVING)
        return DISCO_OK; /* the client went away between packets */
    if (st == DISCO_E_CLOSED && e->cfg->token == NULL)
        return disco_set_error(DISCO_E_CLOSED, "the client left before its hello");
    if (st == DISCO_E_CLOSED)
        return disco_set_error(DISCO_E_AUTH, "the client left before authenticating");
    if (st == DISCO_E_TIMEOUT && e->stage != SERVING)
        st = disco_set_error(DISCO_E_AUTH, "no authentication within %u ms", hs_ms);
    else if (st == DISCO_E_TIMEOUT)
        st = disco_set_error(DISCO_E_SESSION_TIMEOUT,
                             "connection idle for %u ms: the server closed it (its idle "
                             "timeout)",
                             e->cfg->idle_timeout_ms);
    /* The stream is out of step (or gone): say why if we can, end. */
    disco__rpc_send_error(e->t, &e->out, 0, st, disco_last_error(), disco_now_ns() + 1000000000LL);
    return st;
}

disco_status_t disco_rpc_serve_with(disco_rpc_t *sess, disco_transport_t *t,
                                    const disco_rpc_serve_config_t *cfg)
{
    disco_rpc_serve_config_t none = {0};
    struct endpoint e = {.s = sess, .t = t, .cfg = cfg != NULL ? cfg : &none};
    uint32_t hs_ms =
        e.cfg->handshake_timeout_ms ? e.cfg->handshake_timeout_ms : HANDSHAKE_TIMEOUT_MS;
    int64_t hs_deadline = disco_now_ns() + (int64_t)hs_ms * 1000000;
    disco_status_t st = disco__rpc_buf_init(&e.in);
    if (st == DISCO_OK && (st = disco__rpc_buf_init(&e.out)) == DISCO_OK &&
        (e.scratch = malloc(DISCO_RPC_CHUNK)) == NULL)
        st = disco_set_error(DISCO_E_NOMEM, "RPC copy buffer");
    while (st == DISCO_OK) {
        disco_frame_hdr_t h;
        disco_value_t args[DISCO_RPC_MAX_ARGS];
        bool served;
        int64_t dl = e.stage != SERVING ? hs_deadline
                     : e.cfg->idle_timeout_ms
                         ? disco_now_ns() + (int64_t)e.cfg->idle_timeout_ms * 1000000
                         : 0;
        st = recv_request(&e, &h, args, &served, dl);
        if (st == DISCO_OK && served)
            continue;
        if (st == DISCO_E_CLOSED || st == DISCO_E_TIMEOUT || st == DISCO_E_MSG_TOO_BIG ||
            st == DISCO_E_SYS || st == DISCO_E_AUTH || st == DISCO_E_TRUNCATED ||
            st == DISCO_E_BROKEN) {
            st = recv_failed(&e, st, hs_ms);
            break;
        }
        if (st != DISCO_OK && e.stage != SERVING) { /* no second chance before authentication */
            memcpy(&h, e.in.mem + 1, sizeof h);
            st = refuse(&e, h.seq, disco_set_error(DISCO_E_AUTH, "a malformed handshake packet"));
            break;
        }
        if (st != DISCO_OK) { /* a whole packet that does not decode: answer, go on */
            memcpy(&h, e.in.mem + 1, sizeof h);
            st = fail(&e, h.seq, st);
            continue;
        }
        if (e.stage != SERVING) {
            st = handshake(&e, &h, args);
            continue;
        }
        st = handle(&e, &h, args);
    }
    if (st == DISCO_E_SHUTDOWN)
        st = DISCO_OK;
    if (e.own_session)
        e.s->ops->close(e.s); /* through the ops table, as every call here */
    free(e.scratch);
    disco__rpc_buf_free(&e.in);
    disco__rpc_buf_free(&e.out);
    return st;
}

void disco_rpc_refuse(disco_transport_t *t, disco_status_t status, const char *msg)
{
    /* Small enough for the stack: an EXCEPTION frame of at most 512 bytes
     * of message, not a whole packet buffer. */
    uint64_t mem[96];
    disco__rpc_buf_t b = {.mem = mem, .cap = sizeof mem - 8};
    disco__rpc_send_error(t, &b, 0, status, msg, disco_now_ns() + 1000000000LL);
}

void disco_rpc_send_timeout(disco_transport_t *t, uint32_t timeout_ms)
{
    char msg[160];
    snprintf(msg, sizeof msg,
             "session has expired after %u ms: the server stopped it (increase the server's "
             "session timeout)",
             timeout_ms);
    disco_rpc_refuse(t, DISCO_E_SESSION_TIMEOUT, msg);
}
