/*
 * transport_ops.h - the seam between the generic transport and its kinds
 * (internal).
 *
 * transport.c      addresses, listeners, connect/accept over sockets, and
 *                  the public calls, which check their arguments, apply the
 *                  transfer rule and dispatch through the kind's table;
 * transport_fd.c   the fd kinds' tables: "unix", "tcp", "pipe";
 * transport_shm.c  the shm kind's table: segment, handshake, rings.
 * Arrows point one way: transport.c -> this header <- the kinds. A kind
 * calls nothing in transport.c; it sees only this header and the layers
 * below (ring, segment, wait, status).
 *
 * A kind's identity is its table: there is no kind enum. transport.c knows
 * the tables by name (the externs at the bottom) and finds an address's
 * kind by its scheme ("shm:", "unix:", "tcp:"), which is the table's name.
 */
#ifndef DISCO_WORKERS_RPC_TRANSPORT_OPS_H
#define DISCO_WORKERS_RPC_TRANSPORT_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/transport.h"

struct disco__transport_ops;

/* The part of every transport that transport.c reads. A kind embeds it as
 * the first member of its own struct (struct fd_transport in
 * transport_fd.c, struct shm_transport in transport_shm.c), sets ops when it
 * allocates one, and casts back in its ops. */
struct disco_transport {
    const struct disco__transport_ops *ops; /* the kind; never NULL */
    bool broken; /* a call failed mid-transfer: everything fails now (transport.c) */
};

/* The socket a kind's connections start on, which transport.c opens, binds,
 * accepts and connects before it hands the socket to the kind. */
enum disco__carrier {
    DISCO__CARRIER_NONE, /* no address: made from fds the caller has (pipe) */
    DISCO__CARRIER_UNIX, /* a Unix stream socket at the address's path; accept
                            checks the peer's uid (SO_PEERCRED) */
    DISCO__CARRIER_TCP,  /* a TCP socket at the address's HOST:PORT */
};

/*
 * One kind's operations, one const table per kind (as UCX's uct_iface_ops).
 *
 * Rules for every op:
 * - t is always a transport of this kind (made by this table's accept or
 *   connect, or by the kind's own constructor), never NULL, never broken:
 *   transport.c checks the arguments (NULL, a NULL buffer with len > 0) and
 *   the broken flag first, and calls send and recv only with len > 0.
 * - An op that fails reports its own error with disco_set_error (the context
 *   names the kind: "unix transport: ..."); transport.c only passes the
 *   status up, rewording nothing but the TRUNCATED case below.
 * - Thread safety is the transport's (disco/transport.h): on one transport,
 *   send may run in one thread while recv runs in another; never two sends
 *   or two recvs at once; close and abandon only when neither runs. fds and
 *   peer read only what the constructor fixed and may run at any time. The
 *   establishing ops (accept, connect, refuse) act on a socket no other
 *   thread has.
 */
struct disco__transport_ops {
    /* The kind's name: what disco_transport_kind returns, the address scheme
     * without its colon ("shm" for "shm:PATH"), the prefix of its errors. */
    const char *name;
    /* The socket accept and connect start from (DISCO__CARRIER_NONE: the
     * kind has no address, and accept and connect are NULL). */
    enum disco__carrier carrier;

    /* Sends len bytes (len > 0) from buf by the absolute deadline_ns
     * (disco_now_ns() clock; 0: none). Sets *done_p to the bytes that went,
     * whatever the status: transport.c marks the transport broken when a
     * failure comes after some bytes went. Returns DISCO_OK (all went),
     * DISCO_E_CLOSED (the peer is gone: closed, died; nothing more will be
     * read), DISCO_E_TIMEOUT (the deadline passed), DISCO_E_SYS (a system
     * call failed). Never raises SIGPIPE. */
    disco_status_t (*send)(struct disco_transport *t, const void *buf, size_t len,
                           int64_t deadline_ns, size_t *done_p);
    /* Receives exactly len bytes (len > 0) into buf; *done_p and the deadline
     * as for send. Returns DISCO_OK, DISCO_E_CLOSED at the end of the stream
     * (the peer closed or died) whether or not bytes came first
     * (transport.c makes it DISCO_E_TRUNCATED when *done_p > 0),
     * DISCO_E_TIMEOUT, DISCO_E_SYS. Bytes the peer sent before it closed or
     * died are delivered before DISCO_E_CLOSED. A timeout that took nothing
     * leaves the stream where it was. */
    disco_status_t (*recv)(struct disco_transport *t, void *buf, size_t len, int64_t deadline_ns,
                           size_t *done_p);
    /* Writes the descriptors t holds open into fds_out, each once, and
     * returns how many (0 to 4): what a forked child must close
     * (disco_transport_fds). Cannot fail. */
    int (*fds)(const struct disco_transport *t, int fds_out[4]);
    /* Writes who is at the other end into buf (cap > 0), NUL-terminated and
     * cut to cap: the kind's name, then what it can learn ("tcp
     * 127.0.0.1:4242", "unix uid 1000 pid 77"); only the name when it learns
     * nothing. Cannot fail. */
    void (*peer)(const struct disco_transport *t, char *buf, size_t cap);
    /* Ends the stream and frees t and everything it holds: tells the peer
     * (its recv gets the end of the stream after the bytes already sent)
     * and restores what the constructor changed on descriptors it was
     * given. Cannot fail. */
    void (*close)(struct disco_transport *t);
    /* Frees t in a process that does not own the connection (a forked
     * child): closes descriptors and unmaps, but tells the peer nothing and
     * restores nothing, since the owner still serves the shared open files.
     * Cannot fail. */
    void (*abandon)(struct disco_transport *t);

    /* Server side: makes a transport of this kind on an accepted socket of
     * its carrier, whose peer transport.c has already allowed; runs the
     * kind's handshake by deadline_ns. Takes sock (closed on failure).
     * Returns DISCO_OK and *out, DISCO_E_CLOSED (the client left),
     * DISCO_E_TIMEOUT, DISCO_E_NOMEM, DISCO_E_SYS. NULL for carrier NONE. */
    disco_status_t (*accept)(int sock, int64_t deadline_ns, struct disco_transport **out);
    /* Client side: the same on a connected socket; address names the server
     * in errors. Also DISCO_E_AUTH (the server refused this client) and
     * DISCO_E_BAD_MAGIC or DISCO_E_PROTOCOL (the server does not speak this
     * kind). NULL for carrier NONE. */
    disco_status_t (*connect)(int sock, const char *address, int64_t deadline_ns,
                              struct disco_transport **out);
    /* Tells a peer that the listener refused (status st, e.g. DISCO_E_AUTH)
     * in the kind's own handshake, so that its connect fails with a reason;
     * does not close sock. NULL when the kind has no handshake: the
     * listener's on_refused callback may then speak on a transport made by
     * accept. */
    void (*refuse)(int sock, disco_status_t st);
};

/* The tables, one per kind. */
extern const struct disco__transport_ops disco__transport_shm;  /* transport_shm.c */
extern const struct disco__transport_ops disco__transport_unix; /* transport_fd.c */
extern const struct disco__transport_ops disco__transport_tcp;  /* transport_fd.c */
extern const struct disco__transport_ops disco__transport_pipe; /* transport_fd.c */

#endif
