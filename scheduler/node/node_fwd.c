/* node_fwd.c - the forwarding thread: comm.h's sends and receives between
 * workers on two nodes, served in each node's MPI process (node_impl.h;
 * the design, N1-N4, is at the top of workers/data/comm_net.c, the post
 * protocol F1-F2 in workers/data/comm_fwd.h).
 *
 * One thread a node, on a communicator of its own (n->fwd), three tags:
 * DATA (a send's description and bytes, one message), ACK (the
 * receiver's verdict) and CANCEL (a sender gave up). It never blocks:
 * every message is taken as it comes (MPI_Improbe, then MPI_Imrecv into
 * its own memory), every send is MPI_Isend from its own memory, every
 * request is polled with MPI_Test, and the workers' posts are polled in
 * the same loop, pausing as the node link's waits do (disco__node_backoff)
 * when nothing moved. So requests of any number of pairs, in both
 * directions between the same two nodes, proceed together. This file: the
 * posts, the sends, the thread; node_fwd_in.c: the messages that come;
 * node_fwd_out.c: what both use (answering a post, sending a message).
 *
 * Deadline: a request it took and could not answer by its worker's
 * command start + 4/5 of the call timeout is answered DISCO_E_TIMEOUT
 * (comm_fwd.h), one that waits on a node the heartbeats found dead
 * DISCO_E_WORKER_DIED at once (the controller watches every node; an
 * agent only the controller); a send given up (at its deadline, its
 * node's death, its worker's withdrawal) is cancelled at the receiving
 * node. A send that carries its sender's failure is answered when taken
 * and never cancelled: it lives on at the receiver until its receive
 * takes it (comm_fwd.h).
 *
 * Matching (node_fwd_in.c): the k-th send of A to B in a command meets
 * the k-th receive of B from A in it.
 *
 * Memory: a send's message lives until MPI sent it and its answer came
 * (or its sender withdrew); a DATA received lives until its receive takes
 * it, the receiver's requests show it passed it, or the call timeout
 * passes (then its sender is answered DISCO_E_TIMEOUT), or a CANCEL drops
 * it. A message larger than a heap can hold, or of a size its tag never
 * has, is received into nothing (zero bytes: MPI reports it truncated)
 * and dropped unanswered (its sender's deadline tells). A request MPI
 * never completes (a dead node) keeps its buffer until the thread stops;
 * its node then does not finalize MPI (disco__node_fwd_stop says so).
 *
 * Thread safety: the thread alone uses its lists and n->fwd; the workers
 * share only their posts (comm_fwd.h); start and stop are the session
 * thread's.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/shm/wait.h"
#include "scheduler/node/node_fwd_impl.h"
#include "shm/text.h"
#include "workers/core/worker.h"
#include "workers/data/collective.h"
#include "workers/data/comm_fwd.h"
#include "workers/data/tensor_impl.h"

#define DRAIN_NS 500000000LL /* at the stop: how long sends in flight may take */

/* The call and its peer in the words of comm_net.c's worker side:
 * "disco_ctx_send to worker 3 (on node 1)"; at the deadline, then
 * ": no answer within N ms" (waited_ns > 0). */
static void call_words(const struct disco__fwd *f, char *msg, size_t cap, const char *what,
                       int peer, int64_t waited_ns)
{
    char who[64];
    disco__fwd_peer_words(peer, f->world, who, sizeof who);
    int n = snprintf(msg, cap, "%s %s", what, who);
    if (waited_ns > 0 && n > 0 && (size_t)n < cap)
        snprintf(msg + n, cap - (size_t)n, ": no answer within %lld ms",
                 (long long)(waited_ns / 1000000));
}

/* Answers worker wid's request ticket, taken at since and waiting on node
 * k (what: the call and its peer in words), with k's death when the
 * heartbeats found it dead (only the controller watches the other nodes;
 * an agent watches the controller). Says so on this process's stderr too:
 * the session breaks for the same death and may end the worker before it
 * reports its verdict, while this process lives on. The break may also come
 * first and end the worker before this answer: the two race (test:
 * node_p2p:test_p2p_peer_node_dies). Returns whether it did. */
static bool answer_if_dead(struct disco__fwd *f, int wid, uint64_t ticket, int k, const char *what,
                           int64_t since)
{
    /* Relaxed: the link thread's verdict, one word read alone (as
     * node_wait.c's waits read it). */
    if (k < 0 || k >= f->n->nodes ||
        !atomic_load_explicit(&f->n->peer[k].dead, memory_order_relaxed))
        return false;
    disco_status_t st = disco__node_dead(f->n, k, what);
    fprintf(stderr, "disco node %d: worker %d's wait failed after %lld ms: %s: %s\n", f->n->node,
            f->gid_base + wid, (long long)((disco__node_now() - since) / 1000000),
            disco_err_name(st), disco_last_error());
    disco__fwd_answer(f, wid, ticket, st, disco_last_error(), 0, NULL, NULL, 0);
    return true;
}

/* ---- F1: the workers' new requests ---- */

/* The deadline of a request taken at now whose worker began its command
 * at start (its word, from shared memory: 0, or one later than now, counts
 * from now; comm_fwd.h, Deadline). */
static int64_t deadline_of(const struct disco__fwd *f, int64_t start, int64_t now)
{
    return (start > 0 && start <= now ? start : now) + f->limit_ns;
}

/* A send taken: its message built and sent to the receiver's node; the
 * post TAKEN, or answered at once: when the request is malformed, and
 * (DISCO_OK) when it carries its sender's own failure (comm_fwd.h:
 * nothing to wait for, nothing given up, so no CANCEL follows it). Bytes
 * that fit one piece are copied into the message now (the worker's bytes
 * are free again); more go alone as a head, and their pieces are read
 * from the worker's heap under CLAIMED once the receiver sends GO
 * (send_pieces). */
static void take_send(struct disco__fwd *f, int wid, uint64_t ticket, struct disco__fwd_post *p)
{
    int64_t now = disco__node_now();
    struct wire_head h = {.seq = p->seq,
                          .ticket = ticket,
                          .from = f->gid_base + wid,
                          .to = p->peer,
                          .nth = p->nth,
                          .desc = p->desc};
    int64_t deadline = deadline_of(f, p->start_ns, now);
    uint64_t total = h.desc.status == DISCO_OK ? h.desc.nbytes : 0;
    /* The span checks block, off and total against the heap (no overflow
     * past its end), so total fits a size_t once it is non-NULL. */
    const char *src = total != 0 && total <= SIZE_MAX
                          ? disco__tensor_span(f->heap, p->block, p->off, (size_t)total)
                          : NULL;
    bool later = total > f->piece;
    size_t n = later ? 0 : (size_t)total; /* the bytes in the message */
    struct out_msg *o = calloc(1, sizeof *o);
    char *buf = malloc(sizeof h + n);
    const char *why = NULL;
    int32_t bad = DISCO_E_PROTOCOL;
    if (h.to < 0 || h.to >= f->n->nodes * f->world || h.to / f->world == f->n->node)
        why = "disco_ctx_send: the forwarder got a peer on no other node";
    else if (total != 0 && src == NULL)
        why = "disco_ctx_send: the forwarder got bytes outside the heap";
    else if (o == NULL || buf == NULL)
        why = "disco_ctx_send: the forwarder has no memory for the message", bad = DISCO_E_NOMEM;
    if (why != NULL) {
        free(o), free(buf);
        /* Release: CLAIMED -> TAKEN so that answer() may claim it again;
         * pairs with the worker's acquire in its withdrawal (W2's loop). */
        atomic_store_explicit(&p->state, DISCO__FWD_STATE(ticket, DISCO__FWD_TAKEN),
                              memory_order_release);
        disco__fwd_answer(f, wid, ticket, bad, why, 0, NULL, NULL, 0);
        return;
    }
    h.flags = later ? WIRE_BYTES_LATER : 0;
    memcpy(buf, &h, sizeof h);
    if (n != 0)
        memcpy(buf + sizeof h, src, n);
    /* Release: F1 done, the request (and bytes of one piece) copied; it may
     * withdraw now (pairs with the acquire load and compare-and-swap of its
     * withdrawal in comm_net.c's exchange). No wake: the worker waits for
     * DONE only. */
    atomic_store_explicit(&p->state, DISCO__FWD_STATE(ticket, DISCO__FWD_TAKEN),
                          memory_order_release);
    *o = (struct out_msg){.wid = wid,
                          .ticket = ticket,
                          .seq = h.seq,
                          .from = h.from,
                          .to = h.to,
                          .since = now,
                          .deadline = deadline,
                          .buf = buf,
                          .claim = later,
                          .src = later    ? src
                                 : n != 0 ? buf + sizeof h
                                          : NULL,
                          .total = total};
    if (h.desc.status != DISCO_OK) { /* told: answered now (the receiver's ACK is dropped) */
        disco__fwd_answer(f, wid, ticket, DISCO_OK, "", 0, NULL, NULL, 0);
        o->answered = true;
    }
    disco__fwd_push_out(f, o, h.to / f->world, TAG_DATA, sizeof h + n);
}

/* Whether MPI still holds any of o's buffers. */
static bool out_busy(const struct out_msg *o)
{
    bool busy = !o->sent;
    for (int i = 0; i < FWD_WINDOW && !busy; i++)
        busy = o->piece[i].busy;
    return busy;
}

/* o's pieces: the ones MPI finished are free again; while the receiver
 * asked (GO) and nobody answered o, the next pieces go out, at most
 * FWD_WINDOW at once, each read from the worker's heap with CLAIMED held
 * (comm_fwd.h, F3) or from o's own copy. A failed claim sends nothing: the
 * worker withdrew or o was answered, which progress_outs sees. Returns
 * whether anything moved. */
static bool send_pieces(struct disco__fwd *f, struct out_msg *o)
{
    bool moved = false;
    for (int i = 0; i < FWD_WINDOW; i++) {
        struct piece_out *q = &o->piece[i];
        if (q->busy) {
            int done = 0;
            if (MPI_Test(&q->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                done = 1; /* failed: the receiver's deadline tells */
            q->busy = done == 0;
            moved |= done != 0;
        }
        if (q->busy || !o->go || o->answered || o->off >= o->total)
            continue;
        uint64_t len = o->total - o->off < f->piece ? o->total - o->off : f->piece;
        struct wire_piece wp = {
            .seq = o->seq, .ticket = o->ticket, .from = o->from, .to = o->to, .off = o->off};
        if (q->buf == NULL &&
            (q->buf = malloc(sizeof wp + (size_t)(o->total < f->piece ? o->total : f->piece))) ==
                NULL)
            return moved; /* tried again next round; the deadline bounds it */
        memcpy(q->buf, &wp, sizeof wp);
        if (o->claim) {
            if (!disco__fwd_claimed_copy(f, o->wid, o->ticket, q->buf + sizeof wp, o->src + o->off,
                                         (size_t)len))
                return moved;
        } else {
            memcpy(q->buf + sizeof wp, o->src + o->off, (size_t)len);
        }
        o->off += len;
        moved = true;
        /* len <= f->piece <= FWD_PIECE_MAX: the count fits an int.
         * Synchronous mode: it completes only once the receiving forwarder
         * matched it (took it into its memory), so FWD_WINDOW bounds what
         * sits in either process, small pieces (sent eagerly by MPI)
         * included. */
        if (MPI_Issend(q->buf, (int)(sizeof wp + len), MPI_BYTE, o->to / f->world, TAG_PIECE,
                       f->n->fwd, &q->req) == MPI_SUCCESS)
            q->busy = true; /* else nothing in flight: the receiver's deadline tells */
    }
    return moved;
}

static void free_out(struct out_msg *o)
{
    for (int i = 0; i < FWD_WINDOW; i++)
        free(o->piece[i].buf);
    free(o->buf);
    free(o);
}

/* Returns whether any post moved. */
static bool scan_posts(struct disco__fwd *f, int64_t now)
{
    bool moved = false;
    for (int wid = 0; wid < f->world; wid++) {
        struct disco__fwd_post *p = disco__fwd_post_of(f, wid);
        struct recv_req *r = &f->rr[wid];
        /* Acquire: pairs with the worker's release of POSTED (W1). */
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        if (r->live && s != DISCO__FWD_STATE(r->ticket, DISCO__FWD_TAKEN))
            r->live = false; /* withdrawn: its DATA waits for a new request, or expires */
        char msg[DISCO__FWD_MSG];
        if (r->live)
            call_words(f, msg, sizeof msg, "disco_ctx_recv from", r->from, 0);
        if (r->live && answer_if_dead(f, wid, r->ticket, r->from / f->world, msg, r->since))
            r->live = false, moved = true;
        if (r->live && now > r->deadline) {
            call_words(f, msg, sizeof msg, "disco_ctx_recv from", r->from, now - r->since);
            disco__fwd_answer(f, wid, r->ticket, DISCO_E_TIMEOUT, msg, 0, NULL, NULL, 0);
            r->live = false;
            moved = true;
        }
        if (!r->live && r->streaming) /* its sender stops sending pieces */
            disco__fwd_end_stream(f, wid, DISCO_E_TIMEOUT, "gave up its receive");
        if ((s & 7) != DISCO__FWD_POSTED)
            continue;
        uint64_t ticket = s >> 3;
        /* acq_rel: F1's claim against the worker's withdrawal. */
        if (!atomic_compare_exchange_strong_explicit(&p->state, &s,
                                                     DISCO__FWD_STATE(ticket, DISCO__FWD_CLAIMED),
                                                     memory_order_acq_rel, memory_order_acquire))
            continue;
        moved = true;
        if (p->kind == DISCO__FWD_SEND) {
            take_send(f, wid, ticket, p);
            continue;
        }
        int64_t took = disco__node_now();
        *r = (struct recv_req){.live = true,
                               .since = took,
                               .deadline = deadline_of(f, p->start_ns, took),
                               .ticket = ticket,
                               .seq = p->seq,
                               .from = p->peer,
                               .nth = p->nth,
                               .block = p->block,
                               .off = p->off,
                               .desc = p->desc};
        /* Release: F1 done; the worker may withdraw now (pairs with the
         * acquire of its withdrawal compare-and-swap, comm_net.c). No wake: the
         * worker waits for DONE only. */
        atomic_store_explicit(&p->state, DISCO__FWD_STATE(ticket, DISCO__FWD_TAKEN),
                              memory_order_release);
    }
    return moved;
}

/* Polls the sends; frees each once sent and answered (or withdrawn). */
static bool progress_outs(struct disco__fwd *f, int64_t now)
{
    bool moved = false;
    disco__fwd_join_fresh(f);
    for (struct out_msg **pp = &f->outs; *pp != NULL;) {
        struct out_msg *o = *pp;
        bool cancel = false;
        char msg[DISCO__FWD_MSG];
        if (!o->answered && o->wid >= 0) {
            call_words(f, msg, sizeof msg, "disco_ctx_send to", o->to, 0);
            if (answer_if_dead(f, o->wid, o->ticket, o->to / f->world, msg, o->since))
                o->answered = cancel = true;
        }
        if (!o->answered && o->wid >= 0 && now > o->deadline) {
            call_words(f, msg, sizeof msg, "disco_ctx_send to", o->to, now - o->since);
            disco__fwd_answer(f, o->wid, o->ticket, DISCO_E_TIMEOUT, msg, 0, NULL, NULL, 0);
            o->answered = cancel = true;
        }
        /* Acquire: pairs with the worker's withdrawal (or its next post's
         * release): nobody waits for this answer any more. Not for a send
         * that carried its failure: answered at F1, never cancelled. */
        if (!o->answered && o->wid >= 0 &&
            atomic_load_explicit(&disco__fwd_post_of(f, o->wid)->state, memory_order_acquire) !=
                DISCO__FWD_STATE(o->ticket, DISCO__FWD_TAKEN))
            o->answered = cancel = true;
        if (cancel) {
            /* Its DATA is dropped if the receiving forwarder still holds
             * it: a receive posted later does not take a failed send. */
            struct wire_head h = {.seq = o->seq, .ticket = o->ticket, .from = o->from, .to = o->to};
            disco__fwd_send_ack(f, o->to / f->world, &h, DISCO_E_TIMEOUT, "", TAG_CANCEL);
            moved = true;
        }
        if (!o->sent) {
            int done = 0;
            if (MPI_Test(&o->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                done = 1; /* failed: the receiver's deadline tells */
            o->sent = done != 0;
            moved |= o->sent;
        }
        if (o->wid >= 0 && o->total != 0)
            moved |= send_pieces(f, o);
        if (out_busy(o) || !o->answered) {
            pp = &o->next;
            continue;
        }
        moved = true;
        *pp = o->next;
        free_out(o);
    }
    return moved;
}

static void *fwd_main(void *arg)
{
    struct disco__fwd *f = arg;
    int64_t idle_since = disco__node_now();
    long nap = 10000;
    while (!atomic_load_explicit(&f->stop, memory_order_relaxed)) {
        int64_t now = disco__node_now();
        bool moved = disco__fwd_take_messages(f);
        moved |= scan_posts(f, now);
        moved |= disco__fwd_progress_ins(f, now);
        moved |= progress_outs(f, now);
        if (moved) {
            idle_since = now;
            nap = 10000;
        } else {
            disco__node_backoff(now - idle_since, &nap);
        }
    }
    return NULL;
}

/* Environment variable name as a whole number of bytes from lo to hi, or
 * def when unset or empty; DISCO_E_INVAL naming it when it is otherwise. */
static disco_status_t env_bytes(const char *name, uint64_t def, uint64_t lo, uint64_t hi,
                                uint64_t *out)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        *out = def;
        return DISCO_OK;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || x < lo || x > hi)
        return disco_set_error(DISCO_E_INVAL,
                               "node link: %s=%s: want a whole number of bytes from %llu to %llu",
                               name, v, (unsigned long long)lo, (unsigned long long)hi);
    *out = x;
    return DISCO_OK;
}

disco_status_t disco__node_fwd_start(struct disco__node *n, disco_worker_t *w0)
{
    uint64_t piece, hold;
    disco_status_t st;
    if ((st = env_bytes("DISCO_FWD_PIECE_BYTES", FWD_PIECE_DEFAULT, 1, FWD_PIECE_MAX, &piece)) !=
            DISCO_OK ||
        (st = env_bytes("DISCO_FWD_HOLD_BYTES", FWD_HOLD_DEFAULT, 0, (uint64_t)1 << 46, &hold)) !=
            DISCO_OK)
        return st;
    if (w0->coll == NULL || w0->heap == NULL) /* every process session has both */
        return disco_set_error(
            DISCO_E_PROTOCOL, "node link: the forwarder needs the node's heap and collective area");
    struct disco__fwd *f = calloc(1, sizeof *f);
    if (f == NULL)
        return disco_set_error(DISCO_E_NOMEM, "node link: the forwarder");
    *f = (struct disco__fwd){.n = n,
                             .heap = w0->heap,
                             .coll = w0->coll,
                             .world = w0->world,
                             .groups = w0->ngroups > 0 ? (int)w0->ngroups : 1,
                             .gid_base = w0->gid_base,
                             .piece = piece,
                             .hold_max = hold,
                             .limit_ns = n->timeout_ns / 5 * 4};
    if ((f->rr = calloc((size_t)f->world, sizeof *f->rr)) == NULL) {
        free(f);
        return disco_set_error(DISCO_E_NOMEM, "node link: the forwarder");
    }
    int rc = pthread_create(&f->thread, NULL, fwd_main, f);
    if (rc != 0) {
        free(f->rr), free(f);
        return disco_set_error(DISCO_E_SYS, "node link: the forwarding thread: error %d", rc);
    }
    n->fwd_state = f;
    return DISCO_OK;
}

bool disco__node_fwd_stop(struct disco__node *n)
{
    struct disco__fwd *f = n->fwd_state;
    if (f == NULL)
        return !n->fwd_dirty;
    atomic_store_explicit(&f->stop, 1, memory_order_relaxed);
    pthread_join(f->thread, NULL);
    n->fwd_state = NULL;
    /* The messages in flight, a while longer (the peers' forwarders may
     * still take them); the posts are not served any more. */
    int64_t end = disco__node_now() + DRAIN_NS;
    long nap = 10000;
    bool pending = true;
    while (pending && disco__node_now() < end) {
        int64_t now = disco__node_now();
        disco__fwd_take_messages(f);
        disco__fwd_progress_ins(f, now);
        progress_outs(f, now);
        pending = f->fresh != NULL; /* the cancels it queued: sent at the next round */
        for (struct out_msg *o = f->outs; o != NULL && !pending; o = o->next)
            pending = out_busy(o);
        for (struct in_msg *im = f->ins; im != NULL && !pending; im = im->next)
            pending = !im->arrived;
        if (pending)
            disco__node_backoff(DRAIN_NS, &nap);
    }
    bool clean = !pending;
    n->fwd_dirty = pending;
    disco__fwd_join_fresh(f);
    /* What MPI may still touch stays allocated (the process ends soon). */
    for (struct out_msg *o = f->outs, *next; o != NULL; o = next) {
        next = o->next;
        if (!out_busy(o))
            free_out(o);
    }
    for (struct in_msg *im = f->ins, *next; im != NULL; im = next) {
        next = im->next;
        if (im->arrived)
            free(im->buf), free(im);
    }
    free(f->rr);
    if (clean)
        free(f);
    return clean;
}
