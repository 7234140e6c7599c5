/* make_seeds.c - writes the fuzzers' seed corpora: valid frames of every
 * value type, a client's byte stream for a whole RPC conversation
 * (handshake, get function, calls, memory, copies, frees, shutdown), and
 * the client's side of authenticated handshakes (a hello; a hello and a
 * proof, which cannot be right: the server's nonce is fresh).
 * Usage: make_seeds FRAME_DIR RPC_DIR [AUTH_DIR] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workers/rpc/rpc_proto.h"
#include "disco/value.h"

static void put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s FRAME_DIR RPC_DIR [AUTH_DIR]\n", argv[0]);
        return 2;
    }
    const int64_t dims[3] = {2, 3, -1};
    const char bin[5] = {1, 0, 2, 0, 3};
    disco_value_t vals[] = {disco_value_null(),
                            disco_value_bool(true),
                            disco_value_int(-42),
                            disco_value_float(2.5),
                            disco_value_str("hello"),
                            disco_value_bytes(bin, 5),
                            disco_value_shape(dims, 3),
                            disco_value_dtype((DLDataType){kDLBfloat, 16, 1}),
                            disco_value_device((DLDevice){kDLCUDA, 1}),
                            disco_value_opaque(7)};
    size_t nv = sizeof vals / sizeof vals[0];
    static uint64_t buf[4096];
    size_t len;
    for (size_t i = 0; i < nv; i++) {
        char name[32];
        snprintf(name, sizeof name, "value-%zu", i);
        if (disco_frame_encode(3, i, &vals[i], 1, buf, sizeof buf, &len) != DISCO_OK)
            return 1;
        put(argv[1], name, buf, len);
    }
    if (disco_frame_encode(4, 99, vals, (uint32_t)nv, buf, sizeof buf, &len) != DISCO_OK)
        return 1;
    put(argv[1], "all-values", buf, len);

    /* An RPC conversation, as a client would write it. */
    char path[4096];
    snprintf(path, sizeof path, "%s/conversation", argv[2]);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int none = open("/dev/null", O_RDONLY);
    disco_transport_t *t;
    disco__rpc_buf_t b;
    if (fd < 0 || none < 0 || disco_transport_from_fds(none, fd, &t) != DISCO_OK ||
        disco__rpc_buf_init(&b) != DISCO_OK)
        return 1;
    static const uint8_t nonce[32] = {1, 2, 3, 4};
    disco_value_t hello[3] = {disco_value_str(DISCO_RPC_MAGIC), disco_value_int(DISCO_RPC_VERSION),
                              disco_value_bytes(nonce, sizeof nonce)};
    disco_value_t name = disco_value_str("disco.echo");
    disco_value_t call[3] = {(disco_value_t){.type = DISCO_T_FUNC, .v.handle = 1},
                             disco_value_int(5), disco_value_str("x")};
    disco_value_t alloc[3] = {disco_value_device((DLDevice){kDLCPU, 0}), disco_value_int(64),
                              disco_value_int(8)};
    disco_value_t copy_to[3] = {disco_value_opaque(2), disco_value_int(0),
                                disco_value_bytes(bin, 5)};
    disco_value_t copy_from[3] = {disco_value_opaque(2), disco_value_int(1), disco_value_int(4)};
    disco_value_t free_h = disco_value_opaque(2);
    struct {
        uint32_t code;
        const disco_value_t *a;
        uint32_t n;
    } conv[] = {{DISCO_RPC_INIT, hello, 3},        {DISCO_RPC_GET_FUNC, &name, 1},
                {DISCO_RPC_CALL, call, 3},         {DISCO_RPC_DEV_ALLOC, alloc, 3},
                {DISCO_RPC_COPY_TO, copy_to, 3},   {DISCO_RPC_COPY_FROM, copy_from, 3},
                {DISCO_RPC_STREAM_SYNC, alloc, 1}, {DISCO_RPC_FREE_HANDLE, &free_h, 1},
                {DISCO_RPC_SHUTDOWN, NULL, 0}};
    int rc = 0;
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++)
        rc |= disco__rpc_send(t, &b, conv[i].code, i + 1, conv[i].a, conv[i].n, 0);
    disco_transport_close(t);
    /* Handshakes, as a client would write them to an authenticating server. */
    for (int k = 0; argc == 4 && k < 3; k++) {
        static const char *const names[] = {"hello", "hello-proof", "hello-proof-call"};
        snprintf(path, sizeof path, "%s/%s", argv[3], names[k]);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        none = open("/dev/null", O_RDONLY); /* the last transport closed the previous one */
        if (fd < 0 || none < 0 || disco_transport_from_fds(none, fd, &t) != DISCO_OK)
            return 1;
        uint8_t proof[32] = {5};
        disco_value_t p = disco_value_bytes(proof, sizeof proof);
        rc |= disco__rpc_send(t, &b, DISCO_RPC_INIT, 1, hello, 3, 0);
        if (k >= 1)
            rc |= disco__rpc_send(t, &b, DISCO_RPC_AUTH, 2, &p, 1, 0);
        if (k >= 2)
            rc |= disco__rpc_send(t, &b, DISCO_RPC_GET_FUNC, 3, &name, 1, 0);
        disco_transport_close(t);
    }
    disco__rpc_buf_free(&b);
    return rc != 0;
}
