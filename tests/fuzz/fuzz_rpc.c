/* fuzz_rpc.c - libFuzzer target for the RPC endpoint's packet parser
 * (workers/rpc/rpc_endpoint.c, workers/rpc/rpc_proto.c): the input is the byte
 * stream a client would send; a server with an in-process session reads it
 * to the end and answers into /dev/null. It must never crash, leak or
 * hang, whatever the lengths, codes and frames say. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "disco/rpc.h"
#include "disco/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int devnull = -1;
    if (devnull < 0)
        devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int in = memfd_create("fuzz-rpc", MFD_CLOEXEC);
    if (in < 0 || devnull < 0)
        abort();
    if (size != 0 && write(in, data, size) != (ssize_t)size)
        abort();
    lseek(in, 0, SEEK_SET);
    disco_rpc_t *s;
    disco_transport_t *t;
    if (disco_rpc_local(&s) != DISCO_OK ||
        disco_transport_from_fds(in, dup(devnull), &t) != DISCO_OK)
        abort();
    disco_rpc_serve(s, t);
    disco_transport_close(t);
    disco_rpc_close(s);
    return 0;
}
