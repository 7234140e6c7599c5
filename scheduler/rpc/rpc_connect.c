/* rpc_connect.c - opening a client RPC session: the connection, the token
 * and the client's half of the handshake (see disco/rpc.h). The calls are
 * in rpc_client.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "shm/text.h"
#include "workers/rpc/rpc_auth.h"
#include "workers/rpc/rpc_proto.h"
#include "disco/shm/wait.h"
#include "scheduler/rpc/rpc_client.h"

/* Sends one handshake packet and reads its answer. If the send fails
 * because the server already hung up, the reason it left before hanging up
 * (busy, refused) is read and reported instead. */
static disco_status_t hs_request(struct disco__rpc_client *c, uint32_t code, const disco_value_t *a,
                                 int n)
{
    uint64_t seq = ++c->seq;
    disco_status_t st =
        disco__rpc_send(c->t, &c->out, code, seq, a, (uint32_t)n, disco__rpc_client_deadline(c));
    if (st != DISCO_OK && st != DISCO_E_TIMEOUT) {
        char why[256];
        snprintf(why, sizeof why, "%s", disco_last_error());
        int64_t soon = disco_now_ns() + 200000000LL;
        if (disco__rpc_recv(c->t, &c->in, &c->h, c->args, DISCO_RPC_MAX_ARGS, soon) == DISCO_OK &&
            c->h.code == DISCO_RPC_EXCEPTION && c->h.nargs == 2 && c->args[0].type == DISCO_T_INT &&
            c->args[1].type == DISCO_T_STR) {
            char msg[512]; /* the peer's words: bounded and escaped */
            disco__text_safe(msg, sizeof msg, c->args[1].v.str, (size_t)c->args[1].len + 1);
            return disco__rpc_client_die(c, disco_set_error(disco__status_is_error(c->args[0].v.i)
                                                                ? (disco_status_t)c->args[0].v.i
                                                                : DISCO_E_PROTOCOL,
                                                            "remote: %s", msg));
        }
        return disco__rpc_client_die(c, disco_set_error(st, "%s", why));
    }
    return st != DISCO_OK ? disco__rpc_client_die(c, st) : disco__rpc_client_read_reply(c, seq);
}

/* The client's half of the handshake (A1-A4 in disco/rpc.h); token NULL:
 * none held. */
static disco_status_t handshake(struct disco__rpc_client *c, const uint8_t *token)
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
    struct disco__rpc_client *c;
    disco_status_t st = disco__rpc_client_new(t, cfg != NULL ? cfg->call_timeout_ms : 0, &c);
    if (st != DISCO_OK)
        return st;
    st = handshake(c, token);
    if (st != DISCO_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s%s",
                 st == DISCO_E_CLOSED ? "the server hung up during the handshake (it refuses "
                                        "users it does not allow; see its log): "
                                      : "",
                 disco_last_error());
        c->dead = st; /* no shutdown packet for a server that refused us */
        disco__rpc_client_close(c);
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
