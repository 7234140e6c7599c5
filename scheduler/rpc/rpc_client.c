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

#include "shm/text.h"
#include "workers/rpc/rpc_proto.h"
#include "disco/shm/wait.h"
#include "scheduler/rpc/rpc_client.h"
#include "scheduler/rpc/rpc_impl.h"

#define WINDOW_PACKETS 64
#define WINDOW_BYTES   (32u * 1024)

static int64_t deadline(const struct disco__rpc_client *c)
{
    return c->timeout_ms ? disco_now_ns() + (int64_t)c->timeout_ms * 1000000 : 0;
}

/* A transport failure ends the session: later ops report it. */
static disco_status_t die(struct disco__rpc_client *c, disco_status_t st)
{
    if (c->dead == DISCO_OK) {
        c->dead = st;
        snprintf(c->why, sizeof c->why, "%s", disco_last_error());
    }
    return st;
}

static disco_status_t alive(struct disco__rpc_client *c)
{
    if (c->dead == DISCO_OK)
        return DISCO_OK;
    return disco_set_error(c->dead == DISCO_E_SESSION_TIMEOUT ? DISCO_E_SESSION_TIMEOUT
                                                              : DISCO_E_CLOSED,
                           "RPC connection is gone: %s", c->why);
}

static disco_status_t send_req(struct disco__rpc_client *c, uint32_t code, const disco_value_t *a,
                               int n, uint64_t *seq_out)
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
static disco_status_t read_reply(struct disco__rpc_client *c, uint64_t seq)
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
static disco_status_t complete_oldest(struct disco__rpc_client *c)
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
    while (c->qlen != 0)
        complete_oldest(c);
    return alive(c);
}

/* Makes room to send a request of req_bytes (see the top of the file). */
static disco_status_t make_room(struct disco__rpc_client *c, uint64_t req_bytes)
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

static void push(struct disco__rpc_client *c, struct pending p)
{
    c->q[(c->qhead + c->qlen++) % c->qcap] = p;
    c->qbig += p.kind != P_COPY_TO;
    c->qbytes += p.req_bytes;
}

/* One synchronous request and its answer (values in c->args). */
static disco_status_t request(struct disco__rpc_client *c, uint32_t code, const disco_value_t *a,
                              int n)
{
    c_wait(&c->base); /* earlier asynchronous ops answer first */
    uint64_t seq;
    disco_status_t st = send_req(c, code, a, n, &seq);
    return st != DISCO_OK ? st : read_reply(c, seq);
}

static disco_status_t c_get_func(disco_rpc_t *s, const char *name, disco_rpc_handle_t *out)
{
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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
static disco_status_t send_chunk(struct disco__rpc_client *c, const disco_value_t *a,
                                 const void *src, uint32_t k, uint64_t *seq_out)
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
    if (c->dead != DISCO_OK)
        return DISCO_OK; /* the server let go of everything with the connection */
    disco_value_t a = {.type = DISCO_T_OPAQUE, .v.handle = h};
    return request(c, DISCO_RPC_FREE_HANDLE, &a, 1);
}

static disco_status_t c_dev_alloc(disco_rpc_t *s, DLDevice dev, uint64_t n, uint64_t align,
                                  disco_rpc_handle_t *out)
{
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
    if (c->dead != DISCO_OK)
        return DISCO_OK;
    disco_value_t a[2] = {disco_value_device(dev), disco_value_opaque(h)};
    return request(c, DISCO_RPC_DEV_FREE, a, 2);
}

static disco_status_t c_sync(disco_rpc_t *s, DLDevice dev)
{
    disco_value_t a = disco_value_device(dev);
    return request((struct disco__rpc_client *)s, DISCO_RPC_STREAM_SYNC, &a, 1);
}

static void c_close(disco_rpc_t *s)
{
    struct disco__rpc_client *c = (struct disco__rpc_client *)s;
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

disco_status_t disco__rpc_client_new(disco_transport_t *t, uint32_t timeout_ms,
                                     struct disco__rpc_client **out)
{
    struct disco__rpc_client *c = calloc(1, sizeof *c);
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
    c->timeout_ms = timeout_ms;
    *out = c;
    return DISCO_OK;
}

int64_t disco__rpc_client_deadline(const struct disco__rpc_client *c)
{
    return deadline(c);
}

disco_status_t disco__rpc_client_die(struct disco__rpc_client *c, disco_status_t st)
{
    return die(c, st);
}

disco_status_t disco__rpc_client_read_reply(struct disco__rpc_client *c, uint64_t seq)
{
    return read_reply(c, seq);
}

void disco__rpc_client_close(struct disco__rpc_client *c)
{
    c_close(&c->base);
}
