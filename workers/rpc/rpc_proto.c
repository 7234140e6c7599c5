/* rpc_proto.c - packet framing over a transport (see rpc_proto.h). */
#include "workers/rpc/rpc_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

disco_status_t disco__rpc_buf_init(disco__rpc_buf_t *b)
{
    b->cap = DISCO_RPC_MAX_PACKET;
    b->mem = aligned_alloc(8, b->cap + 8);
    if (b->mem == NULL)
        return disco_set_error(DISCO_E_NOMEM, "RPC buffer of %zu bytes", b->cap);
    return DISCO_OK;
}

void disco__rpc_buf_free(disco__rpc_buf_t *b)
{
    free(b->mem);
    b->mem = NULL;
}

disco_status_t disco__rpc_send(disco_transport_t *t, disco__rpc_buf_t *b, uint32_t code,
                               uint64_t seq, const disco_value_t *args, uint32_t nargs,
                               int64_t deadline_ns)
{
    size_t len;
    disco_status_t st = disco_frame_encode(code, seq, args, nargs, b->mem + 1, b->cap, &len);
    if (st != DISCO_OK)
        return st;
    b->mem[0] = len;
    return disco_transport_send(t, b->mem, len + 8, deadline_ns);
}

disco_status_t disco__rpc_send_payload(disco_transport_t *t, disco__rpc_buf_t *b, uint32_t code,
                                       uint64_t seq, const disco_value_t *args, uint32_t nargs,
                                       const void *data, uint32_t len, int64_t deadline_ns)
{
    size_t enc;
    disco_status_t st = disco_frame_encode(code, seq, args, nargs, b->mem + 1, b->cap - 8, &enc);
    if (st != DISCO_OK)
        return st;
    unsigned char *frame = (unsigned char *)(b->mem + 1);
    uint32_t count = nargs + 1, arg[2] = {DISCO_T_BYTES, len};
    memcpy(frame + 4, &count, 4); /* the frame header's argument count */
    memcpy(frame + enc, arg, 8);
    size_t pad = ((size_t)len + 7) / 8 * 8 - len;
    b->mem[0] = enc + 8 + len + pad;
    if (b->mem[0] > b->cap)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "packet of %llu bytes, at most %zu",
                               (unsigned long long)b->mem[0], b->cap);
    static const uint64_t zeros = 0;
    if ((st = disco_transport_send(t, b->mem, 8 + enc + 8, deadline_ns)) == DISCO_OK &&
        (st = disco_transport_send(t, data, len, deadline_ns)) == DISCO_OK && pad != 0)
        st = disco_transport_send(t, &zeros, pad, deadline_ns);
    return st;
}

disco_status_t disco__rpc_recv(disco_transport_t *t, disco__rpc_buf_t *b, disco_frame_hdr_t *hdr,
                               disco_value_t *args, uint32_t max_args, int64_t deadline_ns)
{
    uint64_t len;
    disco_status_t st = disco_transport_recv(t, &len, 8, deadline_ns);
    if (st != DISCO_OK)
        return st;
    if (len > b->cap)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "packet of %llu bytes, at most %zu",
                               (unsigned long long)len, b->cap);
    if ((st = disco_transport_recv(t, b->mem + 1, len, deadline_ns)) != DISCO_OK)
        return st == DISCO_E_TRUNCATED || st == DISCO_E_CLOSED
                   ? disco_set_error(DISCO_E_CLOSED, "connection closed inside a packet")
                   : st;
    return disco_frame_decode(b->mem + 1, len, hdr, args, max_args);
}

disco_status_t disco__rpc_send_error(disco_transport_t *t, disco__rpc_buf_t *b, uint64_t seq,
                                     disco_status_t code, const char *msg, int64_t deadline_ns)
{
    char copy[512];
    snprintf(copy, sizeof copy, "%s", msg); /* msg may be the error detail itself */
    disco_value_t e[2] = {disco_value_int(code), disco_value_str(copy)};
    return disco__rpc_send(t, b, DISCO_RPC_EXCEPTION, seq, e, 2, deadline_ns);
}
