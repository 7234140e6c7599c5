/*
 * transport_impl.h - the transport object and its per-kind halves (internal).
 *
 * transport.c     addresses, listeners, connect/accept, the public dispatch;
 * transport_fd.c  the fd kinds: unix and tcp sockets, pipes;
 * transport_shm.c the shm kind: segment, handshake, rings.
 * Each per-kind function reports its own errors (disco_set_error); the
 * dispatch applies the transfer rule (broken after a partial failure).
 */
#ifndef DISCO_WORKERS_TRANSPORT_IMPL_H
#define DISCO_WORKERS_TRANSPORT_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/shm/ring.h"
#include "disco/shm/segment.h"
#include "disco/transport.h"

enum disco__tkind { DISCO__T_SHM, DISCO__T_UNIX, DISCO__T_TCP, DISCO__T_PIPE };

struct disco_transport {
    enum disco__tkind kind;
    bool broken; /* a call failed mid-transfer: everything fails now */
    /* fd kinds: in_fd == out_fd for sockets. in_flags/out_flags: pipes'
     * file status flags to restore at close (-1: nothing to restore). */
    int in_fd, out_fd;
    int in_flags, out_flags;
    /* shm kind */
    int sock;                           /* liveness channel (the rendezvous) */
    disco_segment_t seg;                /* the connection's segment */
    disco_ring_t tx, rx;                /* this side writes tx, reads rx */
    _Atomic int32_t *self_closed;       /* set by our close */
    const _Atomic int32_t *peer_closed; /* set by the peer's close */
    bool peer_dead;                     /* a wait found the peer gone */
    unsigned char *stage;               /* one ring message being consumed */
    uint32_t stage_len, stage_off;      /* its length, bytes already taken */
};

/* Allocates a transport of kind with every fd -1. NULL when out of memory
 * (error recorded). */
struct disco_transport *disco__transport_alloc(enum disco__tkind kind);

/* ---- fd kinds (transport_fd.c) ---- */

/* Sends len bytes; *done_p counts the bytes that went, whatever the status. */
disco_status_t disco__fd_send(struct disco_transport *t, const void *buf, size_t len,
                              int64_t deadline_ns, size_t *done_p);
/* Receives len bytes; *done_p as above. DISCO_E_CLOSED at end of file,
 * whether or not bytes came first (the dispatch makes it TRUNCATED). */
disco_status_t disco__fd_recv(struct disco_transport *t, void *buf, size_t len, int64_t deadline_ns,
                              size_t *done_p);
void disco__fd_close(struct disco_transport *t);
/* Makes a socket transport of kind (unix or tcp) around a connected socket
 * it takes (closed on failure); sets TCP_NODELAY for tcp. */
disco_status_t disco__fd_socket_transport(enum disco__tkind kind, int fd,
                                          struct disco_transport **out);

/* ---- shm kind (transport_shm.c) ---- */

/* Server half of the handshake (S2-S3) on an accepted Unix socket, which it
 * takes (closed on failure). */
disco_status_t disco__shm_serve(int sock, int64_t deadline_ns, struct disco_transport **out);
/* Tells a refused peer why (a hello carrying st, no fd); does not close sock. */
void disco__shm_refuse(int sock, disco_status_t st);
/* Client half (C1) on a connected Unix socket, which it takes (closed on
 * failure); address names the server in errors. */
disco_status_t disco__shm_join(int sock, const char *address, int64_t deadline_ns,
                               struct disco_transport **out);
disco_status_t disco__shm_send(struct disco_transport *t, const void *buf, size_t len,
                               int64_t deadline_ns, size_t *done_p);
disco_status_t disco__shm_recv(struct disco_transport *t, void *buf, size_t len,
                               int64_t deadline_ns, size_t *done_p);
void disco__shm_close(struct disco_transport *t);

#endif
