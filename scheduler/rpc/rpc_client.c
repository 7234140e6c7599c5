/* rpc_client.c - the client RPC session: every op is one or more request
 * packets to an endpoint and their answers (see disco/rpc.h). Answers come
 * back in request order, so unanswered packets are a FIFO; an op's callback
 * runs when the answer to its last packet is read.
 *
 * Pipelining without deadlock: the server answers request i before it
 * reads request i + 1. If it is blocked writing a large answer while we
 * are blocked writing a request, both wait forever. So while any packet
 * with a possibly large answer (a call, a copy from remote) is unanswered,
 * the request bytes in flight stay under WINDOW_BYTES, which every
 * transport buffers (a pipe holds 64 KiB); and at most WINDOW_PACKETS
 * small answers (copy acknowledgements) are ever owed. Beyond either, the
 * oldest answer is read first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "shm/text.h"
#include "workers/rpc/rpc_auth.h"
#include "workers/rpc/rpc_proto.h"
#include "disco/shm/wait.h"
#include "scheduler/rpc/rpc_impl.h"

#define WINDOW_PACKETS 64
#define WINDOW_BYTES   (32u * 1024)

enum pending_kind { P_CALL, P_COPY_TO, P_COPY_FROM };

struct pending {
    uint64_t seq;
    uint8_t kind; /* enum pending_kind */
    bool last;    /* the op's last packet: its callback runs here */
    uint32_t req_bytes;
    disco_rpc_done_fn done;
    void *ctx;
    void *dst; /* copy from: where the answer's bytes go */
    uint64_t len;
};

struct client {
    disco_rpc_t base;
    disco_transport_t *t;
    disco__rpc_buf_t out, in;
    uint32_t timeout_ms;
    uint64_t seq;
    disco_status_t dead; /* DISCO_OK while the connection is good */
    char why[256];
    struct pending *q;
    size_t qhead, qlen, qcap;
    size_t qbig;          /* unanswered packets whose answer may be large */
    uint64_t qbytes;      /* request bytes of the unanswered packets */
    disco_status_t op_st; /* first error among the packets of the op being completed */
    disco_frame_hdr_t h;  /* the last reply */
    disco_value_t args[DISCO_RPC_MAX_ARGS]; /* its values (point into in) */
};

static int64_t deadline(const struct client *c)
{
    return c->timeout_ms ? disco_now_ns() + (int64_t)c->timeout_ms * 1000000 : 0;
}

/* A transport failure ends the session: later ops report it. */
static disco_status_t die(struct client *c, disco_status_t st)
{
    if (c->dead == DISCO_OK) {
        c->dead = st;
        snprintf(c->why, sizeof c->why, "%s", disco_last_error());
    }
    return st;
}

static disco_status_t alive(struct client *c)
{
    if (c->dead == DISCO_OK)
        return DISCO_OK;
    return disco_set_error(c->dead == DISCO_E_SESSION_TIMEOUT ? DISCO_E_SESSION_TIMEOUT
                                                              : DISCO_E_CLOSED,
                           "RPC connection is gone: %s", c->why);
}

static disco_status_t send_req(struct client *c, uint32_t code, const disco_value_t *a, int n,
                               uint64_t *seq_out)
{
    disco_status_t st = alive(c);
    if (st != DISCO_OK)
        return st;
    uint64_t seq = ++c->seq;
    st = disco__rpc_send(c->t, &c->out, code, seq, a, (uint32_t)n, deadline(c));
    if (st == DISCO_E_BAD_TYPE || st == DISCO_E_MSG_TOO_BIG)
        return st; /* nothing was sent */
    if (st != DISCO_OK)
        return die(c, st);
    *seq_out = seq;
    return DISCO_OK;
}

/* Reads the reply to seq. A remote exception returns its code, with the
 * remote message; the session stays usable, except after a session
 * timeout, which ends it. */
static disco_status_t read_reply(struct client *c, uint64_t seq)
{
    disco_status_t st =
        disco__rpc_recv(c->t, &c->in, &c->h, c->args, DISCO_RPC_MAX_ARGS, deadline(c));
    if (st == DISCO_E_TIMEOUT)
        return die(c, disco_set_error(DISCO_E_TIMEOUT, "no answer within %u ms", c->timeout_ms));
    if (st != DISCO_OK)
        return die(c, st == DISCO_E_MSG_TOO_BIG || st == DISCO_E_BAD_TYPE ? DISCO_E_PROTOCOL : st);
    if (c->h.code == DISCO_RPC_EXCEPTION && c->h.nargs == 2 && c->args[0].type == DISCO_T_INT &&
        c->args[1].type == DISCO_T_STR) {
        /* The peer's words: bounded, escaped, and a code of ours (an
         * "exception" with status 0 would read as success). */
        char msg[512];
        disco__text_safe(msg, sizeof msg, c->args[1].v.str, (size_t)c->args[1].len + 1);
        disco_status_t code = disco__status_is_error(c->args[0].v.i)
                                  ? (disco_status_t)c->args[0].v.i
                                  : DISCO_E_PROTOCOL;
        st = code == DISCO_E_PROTOCOL && c->args[0].v.i != DISCO_E_PROTOCOL
                 ? disco_set_error(code, "remote: exception with status %lld: %s",
                                   (long long)c->args[0].v.i, msg)
                 : disco_set_error(code, "remote: %s", msg);
        /* Sequence 0: the server ended the connection (refused, idle,
         * expired, out of step); the session ends with its reason. */
        if (code == DISCO_E_SESSION_TIMEOUT || c->h.seq == 0)
            return die(c, st);
        if (c->h.seq != seq && c->h.seq != 0)
            return die(c, disco_set_error(DISCO_E_PROTOCOL, "answer %llu to request %llu",
                                          (unsigned long long)c->h.seq, (unsigned long long)seq));
        return st;
    }
    if (c->h.seq != seq || (c->h.code != DISCO_RPC_RETURN && c->h.code != DISCO_RPC_COPY_ACK))
        return die(c, disco_set_error(DISCO_E_PROTOCOL, "unexpected answer %u to request %llu",
                                      c->h.code, (unsigned long long)seq));
    return DISCO_OK;
}

/* Reads the answer to the oldest unanswered packet and, after an op's
 * last packet, runs its callback with the op's first error. */
static disco_status_t complete_oldest(struct client *c)
{
    struct pending p = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qlen--;
    c->qbig -= p.kind != P_COPY_TO;
    c->qbytes -= p.req_bytes;
    disco_status_t st = c->dead != DISCO_OK ? alive(c) : read_reply(c, p.seq);
    if (st == DISCO_OK && p.kind == P_COPY_FROM) {
        if (c->h.nargs != 1 || c->args[0].type != DISCO_T_BYTES || c->args[0].len != p.len)
            st = die(c, disco_set_error(DISCO_E_PROTOCOL, "copy from remote: short answer"));
        else if (p.len != 0)
            memcpy(p.dst, c->args[0].v.bytes, p.len);
    }
    if (c->op_st == DISCO_OK)
        c->op_st = st;
    if (p.last) {
        disco_value_t none = disco_value_null();
        disco_status_t op = c->op_st;
        c->op_st = DISCO_OK;
        if (p.done != NULL)
            p.done(p.ctx, op,
                   op == DISCO_OK && p.kind == P_CALL && c->h.nargs >= 1 ? &c->args[0] : &none);
    }
    return st;
}

/* Completes every unanswered packet, in order. Errors of ops went to their
 * callbacks; only a connection that failed is an error of the wait. */
static disco_status_t c_wait(disco_rpc_t *s)
{
    struct client *c = (struct client *)s;
    while (c->qlen != 0)
        complete_oldest(c);
    return alive(c);
}

/* Makes room to send a request of req_bytes (see the top of the file). */
static disco_status_t make_room(struct client *c, uint64_t req_bytes)
{
    while (c->qlen != 0 &&
           (c->qlen >= WINDOW_PACKETS || (c->qbig != 0 && c->qbytes + req_bytes > WINDOW_BYTES)))
        complete_oldest(c); /* its error goes to its callback */
    if (c->qlen == c->qcap) {
        size_t cap = c->qcap ? c->qcap * 2 : WINDOW_PACKETS;
        struct pending *q = malloc(cap * sizeof *q);
        if (q == NULL)
            return disco_set_error(DISCO_E_NOMEM, "RPC request queue");
        for (size_t i = 0; i < c->qlen; i++)
            q[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = q;
        c->qhead = 0;
        c->qcap = cap;
    }
    return DISCO_OK;
}

static void push(struct client *c, struct pending p)
{
    c->q[(c->qhead + c->qlen++) % c->qcap] = p;
    c->qbig += p.kind != P_COPY_TO;
    c->qbytes += p.req_bytes;
}

/* One synchronous request and its answer (values in c->args). */
static disco_status_t request(struct client *c, uint32_t code, const disco_value_t *a, int n)
{
    c_wait(&c->base); /* earlier asynchronous ops answer first */
    uint64_t seq;
    disco_status_t st = send_req(c, code, a, n, &seq);
    return st != DISCO_OK ? st : read_reply(c, seq);
}

static disco_status_t c_get_func(disco_rpc_t *s, const char *name, disco_rpc_handle_t *out)
{
    struct client *c = (struct client *)s;
    disco_value_t a = disco_value_str(name);
    disco_status_t st = request(c, DISCO_RPC_GET_FUNC, &a, 1);
    if (st == DISCO_OK && (c->h.nargs != 1 || c->args[0].type != DISCO_T_FUNC))
        st = die(c, disco_set_error(DISCO_E_PROTOCOL, "get function: no handle in the answer"));
    if (st == DISCO_OK)
        *out = c->args[0].v.handle;
    return st;
}

static disco_status_t c_call(disco_rpc_t *s, disco_rpc_handle_t f, const disco_value_t *args,
                             int nargs, disco_value_t *ret)
{
    struct client *c = (struct client *)s;
    if (nargs < 0 || nargs >= DISCO_RPC_MAX_ARGS)
        return disco_set_error(DISCO_E_ARG_COUNT, "%d arguments, at most %d", nargs,
                               DISCO_RPC_MAX_ARGS - 1);
    disco_value_t a[DISCO_RPC_MAX_ARGS];
    a[0] = (disco_value_t){.type = DISCO_T_FUNC, .v.handle = f};
    if (nargs > 0)
        memcpy(a + 1, args, (size_t)nargs * sizeof *args);
    disco_status_t st = request(c, DISCO_RPC_CALL, a, nargs + 1);
    if (st != DISCO_OK)
        return st;
    if (c->h.nargs != 1)
        return die(c, disco_set_error(DISCO_E_PROTOCOL, "call: %u values returned", c->h.nargs));
    return disco_value_copy(&c->args[0], ret);
}

static disco_status_t c_call_async(disco_rpc_t *s, disco_rpc_handle_t f, const disco_value_t *args,
                                   int nargs, disco_rpc_done_fn done, void *ctx)
{
    struct client *c = (struct client *)s;
    if (nargs < 0 || nargs >= DISCO_RPC_MAX_ARGS)
        return disco_set_error(DISCO_E_ARG_COUNT, "%d arguments", nargs);
    disco_value_t a[DISCO_RPC_MAX_ARGS];
    a[0] = (disco_value_t){.type = DISCO_T_FUNC, .v.handle = f};
    if (nargs > 0)
        memcpy(a + 1, args, (size_t)nargs * sizeof *args);
    size_t bytes = DISCO_FRAME_HDR + 8; /* with the packet's length word */
    for (int i = 0; i <= nargs; i++)
        bytes += disco_value_encoded_size(&a[i]);
    disco_status_t st = make_room(c, bytes);
    uint64_t seq;
    if (st == DISCO_OK)
        st = send_req(c, DISCO_RPC_CALL, a, nargs + 1, &seq);
    if (st != DISCO_OK)
        return st;
    push(c, (struct pending){.seq = seq,
                             .kind = P_CALL,
                             .last = true,
                             .req_bytes = (uint32_t)bytes,
                             .done = done,
                             .ctx = ctx});
    return DISCO_OK;
}

/* One COPY_TO packet [mem, offset, bytes], the bytes sent from src itself. */
static disco_status_t send_chunk(struct client *c, const disco_value_t *a, const void *src,
                                 uint32_t k, uint64_t *seq_out)
{
    disco_status_t st = alive(c);
    if (st != DISCO_OK)
        return st;
    uint64_t seq = ++c->seq;
    st = disco__rpc_send_payload(c->t, &c->out, DISCO_RPC_COPY_TO, seq, a, 2, src, k, deadline(c));
    if (st == DISCO_E_BAD_TYPE || st == DISCO_E_MSG_TOO_BIG)
        return st; /* nothing was sent */
    if (st != DISCO_OK)
        return die(c, st);
    *seq_out = seq;
    return DISCO_OK;
}

/* Queues the packets of a copy to remote: the bytes in chunks, each sent
 * from src itself. An empty copy still sends one packet, so the handle
 * and range are checked. If a packet cannot be sent, the ones already
 * queued complete with the error and done is not called. */
static disco_status_t c_copy_to_async(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                      uint64_t off, uint64_t n, disco_rpc_done_fn done, void *ctx)
{
    struct client *c = (struct client *)s;
    uint64_t sent = 0;
    do {
        uint64_t k = n - sent < DISCO_RPC_CHUNK ? n - sent : DISCO_RPC_CHUNK;
        disco_value_t a[2] = {disco_value_opaque(dst), disco_value_int((int64_t)(off + sent))};
        uint64_t seq;
        disco_status_t st = make_room(c, k + 64);
        if (st == DISCO_OK)
            st = send_chunk(c, a, (const char *)src + sent, (uint32_t)k, &seq);
        if (st != DISCO_OK) {
            if (sent != 0) /* the queued chunks end this op without a callback */
                c->q[(c->qhead + c->qlen - 1) % c->qcap].last = true;
            return st;
        }
        sent += k;
        push(c, (struct pending){.seq = seq,
                                 .kind = P_COPY_TO,
                                 .last = sent == n,
                                 .req_bytes = (uint32_t)(k + 64),
                                 .done = done,
                                 .ctx = ctx});
    } while (sent < n);
    return DISCO_OK;
}

/* Queues the requests of a copy from remote, one per chunk; each answer's
 * bytes land in dst when it is read. */
static disco_status_t c_copy_from_async(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t off,
                                        void *dst, uint64_t n, disco_rpc_done_fn done, void *ctx)
{
    struct client *c = (struct client *)s;
    uint64_t got = 0;
    do {
        uint64_t k = n - got < DISCO_RPC_CHUNK ? n - got : DISCO_RPC_CHUNK;
        disco_value_t a[3] = {disco_value_opaque(src), disco_value_int((int64_t)(off + got)),
                              disco_value_int((int64_t)k)};
        uint64_t seq;
        disco_status_t st = make_room(c, 128);
        if (st == DISCO_OK)
            st = send_req(c, DISCO_RPC_COPY_FROM, a, 3, &seq);
        if (st != DISCO_OK) {
            if (got != 0)
                c->q[(c->qhead + c->qlen - 1) % c->qcap].last = true;
            return st;
        }
        push(c, (struct pending){.seq = seq,
                                 .kind = P_COPY_FROM,
                                 .last = got + k == n,
                                 .req_bytes = 128,
                                 .done = done,
                                 .ctx = ctx,
                                 .dst = (char *)dst + got,
                                 .len = k});
        got += k;
    } while (got < n);
    return DISCO_OK;
}

static void sync_done(void *ctx, disco_status_t st, const disco_value_t *ret)
{
    (void)ret;
    *(disco_status_t *)ctx = st;
}

static disco_status_t c_copy_to(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                uint64_t off, uint64_t n)
{
    c_wait(s); /* earlier asynchronous ops answer first */
    disco_status_t res = DISCO_OK;
    disco_status_t st = c_copy_to_async(s, src, dst, off, n, sync_done, &res);
    c_wait(s);
    return st != DISCO_OK ? st : res;
}

static disco_status_t c_copy_from(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t off, void *dst,
                                  uint64_t n)
{
    c_wait(s);
    disco_status_t res = DISCO_OK;
    disco_status_t st = c_copy_from_async(s, src, off, dst, n, sync_done, &res);
    c_wait(s);
    return st != DISCO_OK ? st : res;
}

static disco_status_t c_free_handle(disco_rpc_t *s, disco_rpc_handle_t h)
{
    struct client *c = (struct client *)s;
    if (c->dead != DISCO_OK)
        return DISCO_OK; /* the server let go of everything with the connection */
    disco_value_t a = {.type = DISCO_T_OPAQUE, .v.handle = h};
    return request(c, DISCO_RPC_FREE_HANDLE, &a, 1);
}

static disco_status_t c_dev_alloc(disco_rpc_t *s, DLDevice dev, uint64_t n, uint64_t align,
                                  disco_rpc_handle_t *out)
{
    struct client *c = (struct client *)s;
    disco_value_t a[3] = {disco_value_device(dev), disco_value_int((int64_t)n),
                          disco_value_int((int64_t)align)};
    disco_status_t st = request(c, DISCO_RPC_DEV_ALLOC, a, 3);
    if (st == DISCO_OK && (c->h.nargs != 1 || c->args[0].type != DISCO_T_OPAQUE))
        st = die(c, disco_set_error(DISCO_E_PROTOCOL, "device alloc: no handle in the answer"));
    if (st == DISCO_OK)
        *out = c->args[0].v.handle;
    return st;
}

static disco_status_t c_dev_free(disco_rpc_t *s, DLDevice dev, disco_rpc_handle_t h)
{
    struct client *c = (struct client *)s;
    if (c->dead != DISCO_OK)
        return DISCO_OK;
    disco_value_t a[2] = {disco_value_device(dev), disco_value_opaque(h)};
    return request(c, DISCO_RPC_DEV_FREE, a, 2);
}

static disco_status_t c_sync(disco_rpc_t *s, DLDevice dev)
{
    disco_value_t a = disco_value_device(dev);
    return request((struct client *)s, DISCO_RPC_STREAM_SYNC, &a, 1);
}

static void c_close(disco_rpc_t *s)
{
    struct client *c = (struct client *)s;
    c_wait(s);
    if (c->dead == DISCO_OK) {
        uint64_t seq;
        if (send_req(c, DISCO_RPC_SHUTDOWN, NULL, 0, &seq) == DISCO_OK)
            read_reply(c, seq);
    }
    disco_transport_close(c->t);
    disco__rpc_buf_free(&c->in);
    disco__rpc_buf_free(&c->out);
    free(c->q);
    free(c);
}

static const disco_rpc_ops_t client_ops = {
    .kind = "client",
    .get_func = c_get_func,
    .call = c_call,
    .copy_to_remote = c_copy_to,
    .copy_from_remote = c_copy_from,
    .free_handle = c_free_handle,
    .dev_alloc = c_dev_alloc,
    .dev_free = c_dev_free,
    .stream_sync = c_sync,
    .call_async = c_call_async,
    .copy_to_remote_async = c_copy_to_async,
    .copy_from_remote_async = c_copy_from_async,
    .wait = c_wait,
    .close = c_close,
};

/* Sends one handshake packet and reads its answer. If the send fails
 * because the server already hung up, the reason it left before hanging up
 * (busy, refused) is read and reported instead. */
static disco_status_t hs_request(struct client *c, uint32_t code, const disco_value_t *a, int n)
{
    uint64_t seq = ++c->seq;
    disco_status_t st = disco__rpc_send(c->t, &c->out, code, seq, a, (uint32_t)n, deadline(c));
    if (st != DISCO_OK && st != DISCO_E_TIMEOUT) {
        char why[256];
        snprintf(why, sizeof why, "%s", disco_last_error());
        int64_t soon = disco_now_ns() + 200000000LL;
        if (disco__rpc_recv(c->t, &c->in, &c->h, c->args, DISCO_RPC_MAX_ARGS, soon) == DISCO_OK &&
            c->h.code == DISCO_RPC_EXCEPTION && c->h.nargs == 2 && c->args[0].type == DISCO_T_INT &&
            c->args[1].type == DISCO_T_STR) {
            char msg[512]; /* the peer's words: bounded and escaped */
            disco__text_safe(msg, sizeof msg, c->args[1].v.str, (size_t)c->args[1].len + 1);
            return die(c, disco_set_error(disco__status_is_error(c->args[0].v.i)
                                              ? (disco_status_t)c->args[0].v.i
                                              : DISCO_E_PROTOCOL,
                                          "remote: %s", msg));
        }
        return die(c, disco_set_error(st, "%s", why));
    }
    return st != DISCO_OK ? die(c, st) : read_reply(c, seq);
}

/* The client's half of the handshake (A1-A4 in disco/rpc.h); token NULL:
 * none held. */
static disco_status_t handshake(struct client *c, const uint8_t *token)
{
    uint8_t cn[DISCO__RPC_NONCE_BYTES], sn[DISCO__RPC_NONCE_BYTES];
    disco_status_t st = disco__rpc_random(cn, sizeof cn);
    if (st != DISCO_OK)
        return st;
    disco_value_t hello[3] = {disco_value_str(DISCO_RPC_MAGIC), disco_value_int(DISCO_RPC_VERSION),
                              disco_value_bytes(cn, sizeof cn)};
    if ((st = hs_request(c, DISCO_RPC_INIT, hello, 3)) != DISCO_OK)
        return st;
    if (c->h.nargs != 3 || c->args[0].type != DISCO_T_INT || c->args[1].type != DISCO_T_BYTES ||
        c->args[1].len != sizeof sn || c->args[2].type != DISCO_T_INT)
        return disco_set_error(DISCO_E_PROTOCOL, "the server's hello is malformed");
    if (c->args[0].v.i != DISCO_RPC_VERSION)
        return disco_set_error(DISCO_E_VERSION,
                               "server answered the handshake with version %lld, client speaks "
                               "%d",
                               (long long)c->args[0].v.i, DISCO_RPC_VERSION);
    memcpy(sn, c->args[1].v.bytes, sizeof sn);
    int64_t mode = c->args[2].v.i;
    if (mode == 0 && token == NULL)
        return DISCO_OK;
    if (mode == 0)
        return disco_set_error(DISCO_E_AUTH, "the server does not authenticate itself: a client "
                                             "holding a token refuses it");
    if (mode != 1)
        return disco_set_error(DISCO_E_PROTOCOL, "unknown authentication mode %lld",
                               (long long)mode);
    if (token == NULL)
        return disco_set_error(DISCO_E_AUTH,
                               "the server requires a token: set %s to its token file (the "
                               "server prints the path when it starts) or pass one",
                               DISCO_RPC_TOKEN_ENV);
    uint8_t proof[DISCO__RPC_PROOF_BYTES];
    disco__rpc_proof(token, DISCO__RPC_CLIENT, cn, sn, proof);
    disco_value_t a = disco_value_bytes(proof, sizeof proof);
    st = hs_request(c, DISCO_RPC_AUTH, &a, 1);
    sodium_memzero(proof, sizeof proof);
    if (st != DISCO_OK)
        return st;
    if (c->h.nargs != 1 || c->args[0].type != DISCO_T_BYTES ||
        !disco__rpc_proof_ok(token, DISCO__RPC_SERVER, cn, sn, c->args[0].v.bytes, c->args[0].len))
        return disco_set_error(DISCO_E_AUTH, "the server's proof does not match: it does not "
                                             "hold this token (a wrong server or token file?)");
    return DISCO_OK;
}

/* The token cfg names: bytes, a file, or (if env) the file $DISCO_TOKEN_FILE
 * names. *have_p false: none named. */
static disco_status_t find_token(const disco_rpc_client_config_t *cfg, bool env,
                                 uint8_t tok[DISCO_RPC_TOKEN_BYTES], bool *have_p)
{
    *have_p = false;
    if (cfg != NULL && cfg->token != NULL) {
        memcpy(tok, cfg->token, DISCO_RPC_TOKEN_BYTES);
        *have_p = true;
        return DISCO_OK;
    }
    const char *file = cfg != NULL ? cfg->token_file : NULL;
    if (file == NULL && env)
        file = getenv(DISCO_RPC_TOKEN_ENV);
    if (file == NULL || file[0] == '\0')
        return DISCO_OK;
    disco_status_t st = disco_rpc_token_read(file, tok);
    *have_p = st == DISCO_OK;
    return st;
}

static disco_status_t client_start(disco_transport_t *t, const disco_rpc_client_config_t *cfg,
                                   const uint8_t *token, disco_rpc_t **out)
{
    struct client *c = calloc(1, sizeof *c);
    if (c == NULL || disco__rpc_buf_init(&c->in) != DISCO_OK ||
        disco__rpc_buf_init(&c->out) != DISCO_OK) {
        if (c != NULL) {
            disco__rpc_buf_free(&c->in);
            free(c);
        }
        disco_transport_close(t);
        return disco_set_error(DISCO_E_NOMEM, "RPC client");
    }
    c->base.ops = &client_ops;
    c->base.index = disco__rpc_next_index();
    c->t = t;
    c->timeout_ms = cfg != NULL ? cfg->call_timeout_ms : 0;
    disco_status_t st = handshake(c, token);
    if (st != DISCO_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s%s",
                 st == DISCO_E_CLOSED ? "the server hung up during the handshake (it refuses "
                                        "users it does not allow; see its log): "
                                      : "",
                 disco_last_error());
        c->dead = st; /* no shutdown packet for a server that refused us */
        c_close(&c->base);
        return disco_set_error(st, "%s", why);
    }
    *out = &c->base;
    return DISCO_OK;
}

disco_status_t disco_rpc_client_with(disco_transport_t *t, const disco_rpc_client_config_t *cfg,
                                     disco_rpc_t **out)
{
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    bool have;
    disco_status_t st = find_token(cfg, false, tok, &have);
    if (st != DISCO_OK) {
        disco_transport_close(t);
        return st;
    }
    st = client_start(t, cfg, have ? tok : NULL, out);
    sodium_memzero(tok, sizeof tok);
    return st;
}

disco_status_t disco_rpc_client(disco_transport_t *t, uint32_t timeout_ms, disco_rpc_t **out)
{
    disco_rpc_client_config_t cfg = {.call_timeout_ms = timeout_ms};
    return disco_rpc_client_with(t, &cfg, out);
}

disco_status_t disco_rpc_connect_with(const char *address, const disco_rpc_client_config_t *cfg,
                                      disco_rpc_t **out)
{
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    bool have;
    disco_status_t st = find_token(cfg, true, tok, &have);
    if (st != DISCO_OK)
        return st;
    if (!have)
        return disco_set_error(DISCO_E_AUTH,
                               "connect to %s: no token: set %s to the server's token file (it "
                               "prints the path when it starts)",
                               address != NULL ? address : "(null)", DISCO_RPC_TOKEN_ENV);
    uint32_t ms = cfg != NULL ? cfg->call_timeout_ms : 0;
    int64_t dl = ms ? disco_now_ns() + (int64_t)ms * 1000000 : 0;
    disco_transport_t *t;
    if ((st = disco_transport_connect(address, dl, &t)) == DISCO_OK)
        st = client_start(t, cfg, tok, out);
    sodium_memzero(tok, sizeof tok);
    return st;
}

disco_status_t disco_rpc_connect(const char *address, uint32_t timeout_ms, disco_rpc_t **out)
{
    disco_rpc_client_config_t cfg = {.call_timeout_ms = timeout_ms};
    return disco_rpc_connect_with(address, &cfg, out);
}
