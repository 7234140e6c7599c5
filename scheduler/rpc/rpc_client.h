/* rpc_client.h - the client RPC session's state (internal; shared by
 * rpc_client.c, the calls, and rpc_connect.c, the connection and its
 * handshake, which builds on it). */
#ifndef DISCO_SCHEDULER_RPC_CLIENT_H
#define DISCO_SCHEDULER_RPC_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "workers/rpc/rpc_proto.h"
#include "disco/rpc.h"

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

struct disco__rpc_client {
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

/** A client on transport t (owned from here on: closed on failure), its
 *  ops table set, nothing sent. Returns DISCO_OK, DISCO_E_NOMEM. */
disco_status_t disco__rpc_client_new(disco_transport_t *t, uint32_t timeout_ms,
                                     struct disco__rpc_client **out);

/** The deadline of an exchange starting now (0: none). */
int64_t disco__rpc_client_deadline(const struct disco__rpc_client *c);

/** Ends the session with st (the first cause is kept); returns st. */
disco_status_t disco__rpc_client_die(struct disco__rpc_client *c, disco_status_t st);

/** Reads the reply to request seq into c->h and c->args; a remote exception
 *  returns its code. Returns DISCO_OK or the error. */
disco_status_t disco__rpc_client_read_reply(struct disco__rpc_client *c, uint64_t seq);

/** Closes the client: finishes pending ops, says goodbye unless the
 *  connection is dead, closes the transport, frees c. */
void disco__rpc_client_close(struct disco__rpc_client *c);

#endif
