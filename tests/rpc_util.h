/* rpc_util.h - RPC test helpers shared by test_rpc.c and test_auth.c
 * (header-only, static): disco-rpc-server processes and a raw handshake. */
#ifndef DISCO_TEST_RPC_UTIL_H
#define DISCO_TEST_RPC_UTIL_H

#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workers/rpc/rpc_auth.h"
#include "workers/rpc/rpc_proto.h"
#include "disco/rpc.h"
#include "disco/transport.h"
#include "tests/testutil.h"

extern char **environ;

#define SERVER DISCO_TEST_BIN "/disco-rpc-server"

typedef struct server {
    pid_t pid;
    int out; /* its stdout */
    int in;  /* its stdin (stdio mode) */
    char address[256];
    char token[256]; /* its token file (listen mode) */
} server_t;

/* Starts disco-rpc-server with the test library loaded, --listen listen (or
 * --stdio when NULL) and the extra args (NULL-terminated); --listen mode
 * returns the address and the token file it prints, and points
 * $DISCO_TOKEN_FILE of this test process at the token. */
static void start_server_args(server_t *sv, const char *listen, const char *const *extra,
                              char **env)
{
    int out[2], in[2];
    ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
    const char *argv[32];
    int n = 0;
    argv[n++] = SERVER;
    argv[n++] = "--load";
    argv[n++] = DISCO_TEST_LIB;
    if (listen != NULL) {
        argv[n++] = "--listen";
        argv[n++] = listen;
    } else {
        argv[n++] = "--stdio";
    }
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    ck_assert_int_eq(posix_spawn(&sv->pid, SERVER, &fa, NULL, (char **)argv, env ? env : environ),
                     0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(in[0]);
    sv->out = out[0];
    sv->in = in[1];
    sv->address[0] = sv->token[0] = '\0';
    if (listen == NULL)
        return;
    /* "listening ADDRESS", then "token PATH". */
    char line[600] = {0};
    size_t got = 0;
    const char *nl;
    while (got < sizeof line - 1 && ((nl = memchr(line, '\n', got)) == NULL ||
                                     memchr(nl + 1, '\n', got - (size_t)(nl + 1 - line)) == NULL)) {
        struct pollfd pf = {.fd = sv->out, .events = POLLIN};
        ck_assert_msg(poll(&pf, 1, 10000) == 1, "server printed no address");
        ssize_t k = read(sv->out, line + got, sizeof line - 1 - got);
        ck_assert_msg(k > 0, "server exited before listening");
        got += (size_t)k;
    }
    line[got] = '\0';
    ck_assert_int_eq(sscanf(line, "listening %255s token %255s", sv->address, sv->token), 2);
    setenv(DISCO_RPC_TOKEN_ENV, sv->token, 1);
}

/* The listeners the server tests use, by index k (0 unix, 1 tcp, 2 shm). */
static inline const char *tu_kind(int k)
{
    static const char *const kinds[] = {"unix", "tcp", "shm"};
    return kinds[k];
}

/* A server on tu_kind(k) with extra args; suite and tag keep socket paths
 * apart. */
static inline void start_on_kind(server_t *sv, const char *suite, int k, const char *tag,
                                 const char *const *extra)
{
    char addr[128];
    if (k == 1)
        snprintf(addr, sizeof addr, "tcp:127.0.0.1:0");
    else
        snprintf(addr, sizeof addr, "%s:/tmp/disco-test-%s-%s-%d.sock", tu_kind(k), suite, tag,
                 (int)getpid());
    start_server_args(sv, addr, extra, NULL);
}

/* start_server_args with the common options. */
__attribute__((unused)) static void start_server(server_t *sv, const char *listen,
                                                 const char *proxy, const char *timeout, char **env)
{
    const char *extra[8];
    int n = 0;
    if (proxy != NULL) {
        extra[n++] = "--proxy";
        extra[n++] = proxy;
    }
    if (timeout != NULL) {
        extra[n++] = "--session-timeout";
        extra[n++] = timeout;
    }
    extra[n] = NULL;
    start_server_args(sv, listen, extra, env);
}

static void stop_server(server_t *sv)
{
    kill(sv->pid, SIGTERM);
    int ws;
    ck_assert_int_eq(waitpid(sv->pid, &ws, 0), sv->pid);
    close(sv->out);
    close(sv->in);
}

/* The client's side of the handshake (A1-A4 in disco/rpc.h) in raw packets,
 * checking the server's proof. */
__attribute__((unused)) static void raw_handshake(disco_transport_t *t, disco__rpc_buf_t *b,
                                                  const uint8_t *tok, int64_t dl)
{
    disco_frame_hdr_t h;
    disco_value_t v[4];
    uint8_t cn[DISCO__RPC_NONCE_BYTES] = {1, 2, 3}, sn[DISCO__RPC_NONCE_BYTES],
            proof[DISCO__RPC_PROOF_BYTES];
    disco_value_t hello[3] = {disco_value_str(DISCO_RPC_MAGIC), disco_value_int(DISCO_RPC_VERSION),
                              disco_value_bytes(cn, sizeof cn)};
    CK_OK(disco__rpc_send(t, b, DISCO_RPC_INIT, 1, hello, 3, dl));
    CK_OK(disco__rpc_recv(t, b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_RETURN);
    ck_assert_int_eq(h.nargs, 3);
    ck_assert_int_eq(v[2].v.i, 1); /* a token is required */
    memcpy(sn, v[1].v.bytes, sizeof sn);
    disco__rpc_proof(tok, DISCO__RPC_CLIENT, cn, sn, proof);
    disco_value_t p = disco_value_bytes(proof, sizeof proof);
    CK_OK(disco__rpc_send(t, b, DISCO_RPC_AUTH, 2, &p, 1, dl));
    CK_OK(disco__rpc_recv(t, b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_RETURN);
    ck_assert(disco__rpc_proof_ok(tok, DISCO__RPC_SERVER, cn, sn, v[0].v.bytes, v[0].len));
}

#endif
