/* fuzz_auth.c - libFuzzer target for the server side of the authenticated
 * handshake (workers/rpc/rpc_endpoint.c, steps A1-A4 in disco/rpc.h): the input
 * is the byte stream a client would send to a server that requires a token;
 * the server reads it to the end and answers into /dev/null. Nothing may
 * crash, leak or hang, and no input may be accepted as authenticated: the
 * fuzzer never sees the server's fresh nonce, so no proof it writes can be
 * right, and the session is made only after authentication. That session
 * factory aborts, so an input the server wrongly accepted is a finding. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "disco/rpc.h"
#include "disco/transport.h"

static disco_status_t accepted(void *ctx, disco_rpc_t **out)
{
    (void)ctx;
    (void)out;
    abort(); /* an unauthenticated client got through */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int devnull = -1;
    static const uint8_t token[DISCO_RPC_TOKEN_BYTES] = {0x42, 0x13, 0x37};
    if (devnull < 0)
        devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int in = memfd_create("fuzz-auth", MFD_CLOEXEC);
    if (in < 0 || devnull < 0)
        abort();
    if (size != 0 && write(in, data, size) != (ssize_t)size)
        abort();
    lseek(in, 0, SEEK_SET);
    disco_transport_t *t;
    if (disco_transport_from_fds(in, dup(devnull), &t) != DISCO_OK)
        abort();
    disco_rpc_serve_config_t cfg = {.token = token, .open = accepted};
    disco_status_t st = disco_rpc_serve_with(NULL, t, &cfg);
    if (st == DISCO_OK) /* a clean end is only for a client that authenticated */
        abort();
    disco_transport_close(t);
    return 0;
}
