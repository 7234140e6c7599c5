/* rpc_proto.h - RPC packets (internal): a u64 length, then a disco frame.
 * Codes follow TVM's RPC numbering where they mean the same thing. */
#ifndef DISCO_WORKERS_RPC_PROTO_H
#define DISCO_WORKERS_RPC_PROTO_H

#include <stdint.h>

#include "disco/rpc.h"
#include "disco/transport.h"
#include "disco/value.h"

enum disco__rpc_code {
    DISCO_RPC_SHUTDOWN = 1,
    DISCO_RPC_INIT = 2,      /* [magic, version, client nonce] -> [version, server nonce, mode] */
    DISCO_RPC_CALL = 3,      /* [func, args...] */
    DISCO_RPC_RETURN = 4,    /* [value...] */
    DISCO_RPC_EXCEPTION = 5, /* [code, message] */
    DISCO_RPC_COPY_FROM = 6, /* [mem, offset, nbytes] -> RETURN [bytes] */
    DISCO_RPC_COPY_TO = 7,   /* [mem, offset, bytes] -> COPY_ACK */
    DISCO_RPC_COPY_ACK = 8,
    DISCO_RPC_GET_FUNC = 10,    /* [name] -> RETURN [func] */
    DISCO_RPC_FREE_HANDLE = 11, /* [handle] */
    DISCO_RPC_DEV_ALLOC = 12,   /* [device, nbytes, align] -> RETURN [mem] */
    DISCO_RPC_DEV_FREE = 13,    /* [device, mem] */
    DISCO_RPC_STREAM_SYNC = 14, /* [device] */
    DISCO_RPC_AUTH = 15,        /* [client proof] -> RETURN [server proof] */
};

#define DISCO_RPC_MAX_ARGS   64
#define DISCO_RPC_MAX_PACKET ((size_t)DISCO_RPC_CHUNK + 64 * 1024)

/* A buffer for one packet: 8 bytes of length, then the frame (8-aligned). */
typedef struct disco__rpc_buf {
    uint64_t *mem;
    size_t cap; /* frame bytes */
} disco__rpc_buf_t;

disco_status_t disco__rpc_buf_init(disco__rpc_buf_t *b);
void disco__rpc_buf_free(disco__rpc_buf_t *b);

/** Encodes and sends one packet. */
disco_status_t disco__rpc_send(disco_transport_t *t, disco__rpc_buf_t *b, uint32_t code,
                               uint64_t seq, const disco_value_t *args, uint32_t nargs,
                               int64_t deadline_ns);

/** Sends a packet whose last argument is `len` bytes sent straight from
 *  data, not copied into the packet buffer first (copies to remote). */
disco_status_t disco__rpc_send_payload(disco_transport_t *t, disco__rpc_buf_t *b, uint32_t code,
                                       uint64_t seq, const disco_value_t *args, uint32_t nargs,
                                       const void *data, uint32_t len, int64_t deadline_ns);

/** Receives and decodes one packet (args point into b). A length over the
 *  buffer gives DISCO_E_MSG_TOO_BIG with the packet unread (the stream
 *  cannot be resynced); the peer closing gives DISCO_E_CLOSED (between or
 *  inside packets); a frame that does not decode gives its error with the
 *  packet consumed (the stream is still in step). */
disco_status_t disco__rpc_recv(disco_transport_t *t, disco__rpc_buf_t *b, disco_frame_hdr_t *hdr,
                               disco_value_t *args, uint32_t max_args, int64_t deadline_ns);

/** Sends an EXCEPTION packet [code, message]. */
disco_status_t disco__rpc_send_error(disco_transport_t *t, disco__rpc_buf_t *b, uint64_t seq,
                                     disco_status_t code, const char *msg, int64_t deadline_ns);

#endif
