/*
 * node_fwd_impl.h - the forwarding thread's state and wire format, shared
 * by its two files (internal): node_fwd.c (the workers' posts, the sends,
 * the thread) and node_fwd_in.c (the messages from the other nodes:
 * matching a DATA to its receive, ACKs, CANCELs). The design is at the top
 * of node_fwd.c. Thread safety: everything here is the forwarding
 * thread's alone (then, after it joined, disco__node_fwd_stop's).
 */
#ifndef DISCO_SCHEDULER_NODE_FWD_IMPL_H
#define DISCO_SCHEDULER_NODE_FWD_IMPL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "scheduler/node/node_impl.h"
#include "workers/data/comm_fwd.h"

#define TAG_DATA   1
#define TAG_ACK    2
#define TAG_CANCEL 3 /* a wire_ack: the sender gave up; drop its DATA if still held */
#define TAG_GO     4 /* a wire_ack: the receiver matched a DATA whose bytes come later: send them */
#define TAG_PIECE  5 /* a wire_piece, then bytes: one piece of a send's bytes, after a GO */

/* The largest piece DISCO_FWD_PIECE_BYTES may set (a message, head
 * included, must fit one MPI count, an int), and the default. */
#define FWD_PIECE_MAX     ((uint64_t)1 << 30)
#define FWD_PIECE_DEFAULT ((uint64_t)16 << 20)
/* The default of DISCO_FWD_HOLD_BYTES. */
#define FWD_HOLD_DEFAULT  ((uint64_t)256 << 20)

/* Pieces of one send in flight at once (MPI_Isend not yet complete). */
#define FWD_WINDOW 4

/* wire_head.flags: the head comes alone, its bytes (desc.nbytes) come
 * later in TAG_PIECE messages once the receiver sends TAG_GO (a send of
 * more than one piece; or, set by the receiving forwarder on its own
 * copy, a DATA whose bytes it dropped to keep under its hold bound). */
#define WIRE_BYTES_LATER 1u

/* A DATA message: this head, then desc.nbytes bytes (status DISCO_OK and
 * not WIRE_BYTES_LATER; then desc.nbytes is at most a piece). */
struct wire_head {
    uint64_t seq, ticket; /* the sender's command and request */
    int32_t from, to;     /* global worker ids */
    uint32_t nth, flags;  /* the k-th send of from to to in seq (comm_fwd.h, Order); WIRE_* */
    struct disco__fwd_desc desc;
};

_Static_assert(sizeof(struct wire_head) + FWD_PIECE_MAX < (uint64_t)INT_MAX,
               "a DATA of one piece fits one MPI count");

/* A PIECE message: this head, then the bytes [off, off + the rest of the
 * message) of the send (from, to, seq, ticket). A send's pieces come in
 * order (MPI keeps one sender's order), each at most its sender's piece
 * size, and the receiver takes each only at the offset it expects. */
struct wire_piece {
    uint64_t seq, ticket;
    int32_t from, to;
    uint64_t off;
};

/* An ACK (or a CANCEL, a GO): the receiver's verdict on (from, to, seq, ticket). */
struct wire_ack {
    uint64_t seq, ticket;
    int32_t from, to;
    int32_t status;
    uint32_t pad;
    char msg[DISCO__FWD_MSG];
};

/* One piece of a send being sent (a buffer of its own, reused). */
struct piece_out {
    MPI_Request req;
    bool busy;
    char *buf; /* a wire_piece, then up to a piece of bytes */
};

/* A message this thread sends: a send's DATA until it is sent and
 * answered (wid >= 0), or an ACK until it is sent (wid -1). */
struct out_msg {
    struct out_msg *next;
    int wid; /* the sending worker (on this node), or -1 */
    uint64_t ticket, seq;
    int32_t from, to;
    MPI_Request req;
    bool sent, answered;
    int64_t since;    /* taken at (F1) */
    int64_t deadline; /* answered DISCO_E_TIMEOUT after it (comm_fwd.h, Deadline) */
    void *buf;
    /* Its bytes in pieces, after the receiver's GO (wid >= 0 and bytes):
     * from the worker's heap (claimed, read with CLAIMED held for each
     * piece: a send of more than one piece) or from buf's own copy. */
    bool go;             /* the receiver asked for them */
    bool claim;          /* src is the worker's (read only under CLAIMED) */
    const char *src;     /* the bytes, or NULL: none */
    uint64_t total, off; /* their count; how many are handed to MPI */
    struct piece_out piece[FWD_WINDOW];
};

/* A message received or being received. */
struct in_msg {
    struct in_msg *next;
    MPI_Request req;
    bool arrived, bad; /* bad: refused (too large), received truncated */
    bool cancelled;    /* a DATA whose sender gave up (TAG_CANCEL): dropped */
    bool held;         /* a DATA whose bytes count in disco__fwd.held */
    int src, tag;
    size_t len;
    int64_t since;
    void *buf;
};

/* A worker's receive request as taken at F1; after it was answered (live
 * false), the last one's seq, from and nth still say what the worker has
 * passed (a DATA before it is stale). */
struct recv_req {
    bool live;
    int64_t since;    /* taken at (F1) */
    int64_t deadline; /* as out_msg's */
    uint64_t ticket, seq;
    int32_t from;
    uint32_t nth;
    uint64_t block, off;
    struct disco__fwd_desc desc;
    /* Matched to a DATA whose bytes come in pieces (GO sent to node src):
     * got of desc.nbytes written into dst so far, each under CLAIMED. */
    bool streaming;
    int src;
    uint64_t their_ticket, got;
    char *dst;
};

struct disco__fwd {
    struct disco__node *n;
    disco_heap_t *heap;
    struct disco__coll_area *coll;
    int world, groups, gid_base;
    int64_t limit_ns; /* a request is answered by its command's start + this (comm_fwd.h) */
    struct out_msg *outs;
    struct out_msg *fresh; /* sent since progress_outs last looked: joined to outs there */
    struct in_msg *ins;
    struct recv_req *rr; /* [world] */
    uint64_t forged;     /* messages dropped: their sender is not on the node that sent them */
    uint64_t piece;      /* DISCO_FWD_PIECE_BYTES: the most bytes one message carries */
    uint64_t hold_max;   /* DISCO_FWD_HOLD_BYTES: the most DATA bytes held for late receives */
    uint64_t held;       /* DATA bytes held now for receives not yet posted */
    /* Statistics for the tests (tests/node_p2p.c reads them from worker 0's
     * thread while this one runs): relaxed, single writer (this thread),
     * each a counter read alone; no other memory is published by them. */
    _Atomic uint64_t held_peak; /* the most that held ever was */
    _Atomic uint64_t pieces_in; /* PIECE messages written into a receiver's bytes */
    pthread_t thread;
    _Atomic int stop; /* relaxed: the thread only polls it; join orders the rest */
};

/* node_fwd.c's, for node_fwd_in.c. */

/** Worker wid's post (node_fwd_out.c). */
struct disco__fwd_post *disco__fwd_post_of(struct disco__fwd *f, int wid);

/** Sends o->buf (len bytes) to node on tag with MPI_Isend and puts o on
 *  the fresh list (node_fwd_out.c); a send MPI refuses is marked sent. */
void disco__fwd_push_out(struct disco__fwd *f, struct out_msg *o, int node, int tag, size_t len);

/** F2: answers worker wid's request ticket (held TAKEN) with status and
 *  msg (and, when dst, copies len bytes from src there first); the
 *  receive's answer names the sender's ticket. Returns false when the
 *  worker withdrew (nothing written). */
bool disco__fwd_answer(struct disco__fwd *f, int wid, uint64_t ticket, int32_t status,
                       const char *msg, uint64_t their_ticket, void *dst, const void *src,
                       size_t len);

/** Queues an ACK (or, tag TAG_CANCEL, a cancel; TAG_GO, a go) about the DATA h to node. */
void disco__fwd_send_ack(struct disco__fwd *f, int node, const struct wire_head *h, int32_t status,
                         const char *msg, int tag);

/** The messages sent since progress_outs last looked, into f->outs (never
 *  while it walks the list). */
void disco__fwd_join_fresh(struct disco__fwd *f);

/** Copies len bytes from src to dst (a receive's heap bytes: into worker
 *  wid's tensor; a send's: out of them) with CLAIMED of its request
 *  ticket held (comm_fwd.h, F3). Returns false, touching nothing, when
 *  the worker withdrew (or the request was answered). */
bool disco__fwd_claimed_copy(struct disco__fwd *f, int wid, uint64_t ticket, void *dst,
                             const void *src, size_t len);

/** Worker wid's receive stops taking pieces (if it was): its sender's
 *  node is told (an ACK of status: "worker W <why> after N of M bytes"),
 *  unless it is dead. */
void disco__fwd_end_stream(struct disco__fwd *f, int wid, int32_t status, const char *why);

/* node_fwd_in.c's. */

/** Takes every message that came (matched probe, then a nonblocking
 *  receive into memory of its own). Returns whether any came. */
bool disco__fwd_take_messages(struct disco__fwd *f);

/** Polls the receives; hands ACKs, CANCELs and DATA on (N3, N4); frees
 *  what is done. Returns whether anything moved. */
bool disco__fwd_progress_ins(struct disco__fwd *f, int64_t now);

#endif
