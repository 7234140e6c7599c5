/*
 * disco/transport.h - byte streams between two processes for the RPC layer.
 *
 * A transport is a reliable, ordered, full-duplex byte stream. Four kinds sit
 * behind the same calls:
 *   "shm"   two lock-free rings in a memfd segment (the default for local
 *           IPC): a small round trip costs well under a microsecond when
 *           both sides are awake on different cores;
 *   "unix"  a Unix domain stream socket;
 *   "tcp"   a TCP connection (TCP_NODELAY);
 *   "pipe"  a pair of file descriptors, e.g. a child's stdin and stdout.
 * Message boundaries are not kept: a send of 100 bytes may be received as
 * 16 + 84. Framing is the caller's business.
 *
 * Addresses are strings:
 *   "unix:/path/to.sock"  the socket file is created mode 0600 (only this
 *                         user may connect) and removed by
 *                         disco_listener_close; accept also checks the
 *                         peer's uid (SO_PEERCRED): this user only, unless
 *                         disco_listener_open_with allows others;
 *   "tcp:HOST:PORT"       HOST an IPv4 address, "[IPv6]" or a name. To
 *                         listen, an empty HOST or "localhost" binds
 *                         127.0.0.1; an address that is not loopback
 *                         ("0.0.0.0", "[::]", a LAN address) is refused
 *                         unless disco_listener_open_with allows it; PORT 0 picks
 *                         a free port (disco_listener_address tells
 *                         which). To connect, empty or "localhost" means
 *                         127.0.0.1;
 *   "shm:/path/to.sock"   rendezvous over a Unix socket at that path (0600
 *                         too); the data then moves over rings.
 *
 * Error rule (as everywhere in disco): every call returns a disco_status_t,
 * output arguments are written only on success, and disco_last_error() holds
 * the context (the address, the call, errno's text). The common codes:
 *   DISCO_E_INVAL    a malformed address (named in the context), NULL args;
 *   DISCO_E_CLOSED   the peer is gone: it closed, died, or refused;
 *   DISCO_E_TIMEOUT  the absolute deadline (disco_now_ns() clock; 0 = none)
 *                    passed;
 *   DISCO_E_SYS      a system call failed (errno's text in the context).
 *
 * Transfer rule: a send or recv that fails after moving part of its bytes
 * leaves the stream in the middle of whatever the caller was framing; the
 * transport is then broken and every later send and recv returns
 * DISCO_E_BROKEN (close it). One that fails having moved nothing (a recv
 * timeout with nothing arriving, a send timeout into a full ring or socket)
 * leaves the transport usable: call again.
 *
 * SIGPIPE never kills the process: sockets are written with MSG_NOSIGNAL;
 * pipes with SIGPIPE blocked in the calling thread and a pending one
 * consumed. A reader that went away gives DISCO_E_CLOSED instead.
 *
 * Shared-memory protocol (shm kind), steps numbered as in transport_shm.c:
 *   S1 the listener accepts a Unix socket connection;
 *   S2 it checks the peer's uid (a refused peer gets a hello carrying the
 *      refusal and no fd); it creates a memfd segment holding a header
 *      (magic, layout, closed flags) and two single-reader rings:
 *      client->server, server->client; and seals the memfd (no shrink, no
 *      grow, no seal changes), so the client cannot truncate it under the
 *      server (which would be a SIGBUS on the server's next access);
 *   S3 it sends a hello (magic, version) with the segment's fd attached
 *      (SCM_RIGHTS); accept returns;
 *   C1 the client connects, receives the hello and the fd, checks both, and
 *      before mapping checks that the memfd is sealed the same way and as
 *      large as its header says; attaches the segment; connect returns.
 * The socket then carries no data; it stays open as a liveness channel: a
 * wait on a ring also polls it, so a peer that dies (its end of the socket
 * closes with it) ends the wait with DISCO_E_CLOSED within a park slice
 * (10 ms), never a hang. A clean close also sets the peer-visible closed
 * flag and wakes the rings, so the peer learns at once. Data written before
 * a close or a death is still delivered first (on every kind; for tcp, as
 * long as the closing side had read everything sent to it, else its kernel
 * answers with a reset).
 * Waits spin briefly (pause, then yield) and park after ~0.2 ms, so an idle
 * connection costs no CPU and a busy one answers without a syscall.
 *
 * Thread safety: different transports and listeners are independent. On one
 * transport, one thread may send while another receives (full duplex); two
 * concurrent sends, or two concurrent recvs, are not allowed; close only
 * when neither is running. A listener is used by one thread at a time.
 */
#ifndef DISCO_TRANSPORT_H
#define DISCO_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "disco/clock.h"
#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct disco_transport disco_transport_t; /* one end of a stream */
typedef struct disco_listener disco_listener_t;   /* a listening address */

/* ---- listening and connecting ---------------------------------------- */

/** Starts listening on address ("unix:", "tcp:" or "shm:"). A stale Unix
 *  socket file at the path (nobody listening behind it) is replaced; a live
 *  one is not. Thread-safe.
 *  @param address   see the top of this header
 *  @param listener_out the new listener, on success
 *  @return DISCO_OK; DISCO_E_INVAL (malformed address, path too long);
 *          DISCO_E_NOMEM; DISCO_E_SYS (socket/bind/listen failed, e.g. the
 *          address is in use: errno's text in the context). */
disco_status_t disco_listener_open(const char *address, disco_listener_t **listener_out);

#define DISCO_LISTEN_MAX_UIDS 16 /* allow_uids holds at most this many */

/* Options of a listener (disco_listener_open uses all zeros). */
typedef struct disco_listener_config {
    int allow_remote; /* nonzero: a tcp address that is not loopback may be bound */
    /* unix, shm: peer uids accepted besides this process's effective uid
     * (at most DISCO_LISTEN_MAX_UIDS). With any, the socket file is made
     * 0666 so that they can connect; the uid check (and the RPC token) then
     * keep everybody else out. */
    const uint32_t *allow_uids;
    /* entries of allow_uids */
    int n_allow_uids;
    /* unix: called with the connection of a peer whose uid is refused,
     * before disco_listener_accept closes it, so that the layer above can tell the
     * peer why in its own protocol (the RPC server answers DISCO_E_AUTH). It
     * must not keep t. NULL: the connection is just closed. (shm listeners
     * tell a refused peer in their own hello; tcp has no uid check.) */
    void (*on_refused)(disco_transport_t *t, disco_status_t status, const char *why, void *arg);
    /* on_refused's arg */
    void *on_refused_arg;
} disco_listener_config_t;

/** disco_listener_open with options (cfg NULL: the defaults). Thread-safe.
 *  @return as disco_listener_open; DISCO_E_INVAL also for a non-loopback tcp
 *          address without allow_remote (the reason named) and for more
 *          than DISCO_LISTEN_MAX_UIDS uids. */
disco_status_t disco_listener_open_with(const char *address, const disco_listener_config_t *cfg,
                                        disco_listener_t **listener_out);

/** The address the listener really has, with the chosen port for "tcp:...:0"
 *  ("tcp:127.0.0.1:40123"); valid until disco_listener_close. Thread-safe. */
const char *disco_listener_address(const disco_listener_t *l);

/** The listening socket, to poll(2) for POLLIN (a client is waiting) beside
 *  other fds; accept with disco_listener_accept. Owned by the listener. Thread-safe. */
int disco_listener_fd(const disco_listener_t *l);

/** Accepts the next client, waiting until deadline_ns (absolute; 0 = no
 *  limit). For "shm:" listeners this also runs steps S2-S3 (a segment of a
 *  few MiB per connection). The listener stays usable after any error.
 *  Not thread-safe per listener.
 *  @return DISCO_OK; DISCO_E_TIMEOUT (no client by the deadline);
 *          DISCO_E_AUTH (unix, shm: the peer's uid is not allowed; it was
 *          hung up on, an shm peer told so; uid and pid in the context);
 *          DISCO_E_CLOSED (shm: the client left during the handshake);
 *          DISCO_E_NOSPACE (shm: no memory for the segment); DISCO_E_NOMEM;
 *          DISCO_E_INVAL (NULL listener or conn_out); DISCO_E_SYS. */
disco_status_t disco_listener_accept(disco_listener_t *l, int64_t deadline_ns,
                                     disco_transport_t **conn_out);

/** Closes the listener and removes its Unix socket file (only in the process
 *  that created it, and only if the path still names that socket: a forked
 *  child's close leaves it). Accepted transports live on. NULL is a no-op.
 *  Not thread-safe per listener. */
void disco_listener_close(disco_listener_t *l);

/** Connects to address, waiting until deadline_ns (absolute; 0 = no limit)
 *  for the connection and, for "shm:", for the server's handshake (C1).
 *  Thread-safe.
 *  @return DISCO_OK; DISCO_E_INVAL (malformed address, port 0);
 *          DISCO_E_CLOSED (refused: nobody listens there, or the server
 *          closed during the handshake; the address and errno's text in the
 *          context); DISCO_E_TIMEOUT; DISCO_E_BAD_MAGIC (shm: the server's
 *          hello or segment is not ours or of another version, or the
 *          segment is not sealed or shorter than it says);
 *          DISCO_E_AUTH (shm: the server refused this user);
 *          DISCO_E_NOMEM; DISCO_E_SYS (e.g. a name that does not resolve). */
disco_status_t disco_transport_connect(const char *address, int64_t deadline_ns,
                                       disco_transport_t **conn_out);

/** Makes a "pipe" transport that reads in_fd and writes out_fd (they may be
 *  the same fd, e.g. one end of a socketpair). The transport takes both fds
 *  (close closes them; pass dup()s to keep yours) and makes them
 *  non-blocking for its lifetime, restoring their flags at close (the flags
 *  belong to the open file, shared with whoever else holds it). On any
 *  error the fds stay the caller's, flags unchanged. Thread-safe.
 *  @return DISCO_OK; DISCO_E_INVAL (a negative or closed fd, conn_out NULL);
 *          DISCO_E_NOMEM; DISCO_E_SYS (fcntl failed). */
disco_status_t disco_transport_from_fds(int in_fd, int out_fd, disco_transport_t **conn_out);

/* ---- the stream ------------------------------------------------------- */

/** Sends all len bytes of buf, waiting while the ring or socket is full until
 *  deadline_ns (absolute; 0 = no limit). Returns once the bytes are handed
 *  to the ring or the kernel, not when the peer has read them. len 0 does
 *  nothing. Thread safety: see the top (one sender at a time).
 *  @return DISCO_OK; DISCO_E_CLOSED (the peer closed or died; for shm it is
 *          noticed when the ring is full or the peer's clean close is seen);
 *          DISCO_E_TIMEOUT (see the transfer rule: broken if some bytes went);
 *          DISCO_E_BROKEN (an earlier call failed mid-transfer);
 *          DISCO_E_INVAL (buf NULL with len > 0); DISCO_E_SYS. */
disco_status_t disco_transport_send(disco_transport_t *t, const void *buf, size_t len,
                                    int64_t deadline_ns);

/** Receives exactly len bytes into buf, waiting until deadline_ns (absolute;
 *  0 = no limit). len 0 returns DISCO_OK at once. Thread safety: see the top
 *  (one receiver at a time).
 *  @return DISCO_OK; DISCO_E_CLOSED (the peer closed or died before the
 *          first byte of this call); DISCO_E_TRUNCATED (it closed or died
 *          after some of them: the transport is broken); DISCO_E_TIMEOUT
 *          (the deadline passed; if some bytes had arrived the stream is now
 *          mid-message and the transport broken, else call again);
 *          DISCO_E_BROKEN (an earlier call failed mid-transfer);
 *          DISCO_E_INVAL (buf NULL with len > 0); DISCO_E_SYS. */
disco_status_t disco_transport_recv(disco_transport_t *t, void *buf, size_t len,
                                    int64_t deadline_ns);

/** Closes the transport and frees it; the peer's next recv (after the data
 *  already sent) gives DISCO_E_CLOSED. NULL is a no-op. Not thread-safe
 *  against calls on the same transport. */
void disco_transport_close(disco_transport_t *t);

/** The file descriptors t holds (its socket or pipe ends, its segment's
 *  memfd), at most 4, in fds_out; returns how many. For a forked server
 *  child that closes everything that is not its own. Thread-safe. */
int disco_transport_fds(const disco_transport_t *t, int fds_out[4]);

/** Describes the peer for logs: "tcp 127.0.0.1:40123", "unix uid 1000 pid
 *  4242", "shm uid 1000 pid 4242" or "pipe", in buf (cap bytes, always
 *  terminated). Returns buf. Thread-safe. */
const char *disco_transport_peer(const disco_transport_t *t, char *buf, size_t cap);

/** Lets go of a transport in a process that does not own the connection (a
 *  forked child that inherited it): closes its fds, unmaps its memory and
 *  frees it, telling the peer nothing (the owner still serves it). NULL is
 *  a no-op. Not thread-safe against calls on the same transport. */
void disco_transport_abandon(disco_transport_t *t);

/** "shm", "unix", "tcp" or "pipe" ("none" for NULL). Thread-safe. */
const char *disco_transport_kind(const disco_transport_t *t);

#ifdef __cplusplus
}
#endif
#endif
