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

#include <stdbool.h>
#include <stdint.h>

#include "scheduler/node/node_impl.h"
#include "workers/data/comm_fwd.h"

#define TAG_DATA   1
#define TAG_ACK    2
#define TAG_CANCEL 3 /* a wire_ack: the sender gave up; drop its DATA if still held */

/* A DATA message: this head, then desc.nbytes bytes (status DISCO_OK). */
struct wire_head {
    uint64_t seq, ticket; /* the sender's command and request */
    int32_t from, to;     /* global worker ids */
    uint32_t nth, pad;    /* the k-th send of from to to in seq (comm_fwd.h, Order) */
    struct disco__fwd_desc desc;
};
_Static_assert(sizeof(struct wire_head) < 4096, "DISCO__FWD_MAX_BYTES leaves 4096 for the head");

/* An ACK (or a CANCEL): the receiver's verdict on (from, to, seq, ticket). */
struct wire_ack {
    uint64_t seq, ticket;
    int32_t from, to;
    int32_t status;
    uint32_t pad;
    char msg[DISCO__FWD_MSG];
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
};

/* A message received or being received. */
struct in_msg {
    struct in_msg *next;
    MPI_Request req;
    bool arrived, bad; /* bad: refused (too large), received truncated */
    bool cancelled;    /* a DATA whose sender gave up (TAG_CANCEL): dropped */
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

/** Queues an ACK (or, tag TAG_CANCEL, a cancel) about the DATA h to node. */
void disco__fwd_send_ack(struct disco__fwd *f, int node, const struct wire_head *h, int32_t status,
                         const char *msg, int tag);

/** The messages sent since progress_outs last looked, into f->outs (never
 *  while it walks the list). */
void disco__fwd_join_fresh(struct disco__fwd *f);

/* node_fwd_in.c's. */

/** Takes every message that came (matched probe, then a nonblocking
 *  receive into memory of its own). Returns whether any came. */
bool disco__fwd_take_messages(struct disco__fwd *f);

/** Polls the receives; hands ACKs, CANCELs and DATA on (N3, N4); frees
 *  what is done. Returns whether anything moved. */
bool disco__fwd_progress_ins(struct disco__fwd *f, int64_t now);

#endif
