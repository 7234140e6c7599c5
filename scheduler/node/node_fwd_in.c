/* node_fwd_in.c - the forwarding thread's side of the messages from the
 * other nodes (node_fwd_impl.h; the design is at the top of node_fwd.c):
 * taking them off MPI, matching a DATA to its receive (N3), an ACK to its
 * send (N4), a CANCEL to the DATA it withdraws.
 *
 * Matching. A DATA names (from, to, seq, nth): it is the nth send of
 * worker from to worker to in command seq, and it meets the receive of
 * to that names the same (comm_fwd.h, Order), whatever came first and
 * however late the receive is posted. A DATA the receiver has passed (its
 * request names a later command, or a later receive from the same sender
 * in the same one) is refused back as not received; one nobody takes is
 * refused after the call timeout.
 *
 * Trust. A message's sender ids are checked against the node MPI says
 * sent it: a DATA's from and a CANCEL's from must be workers of that
 * node, an ACK's to (the receiver that judged) too; any other is dropped
 * unanswered, counted, and said once on stderr (the peer node is broken
 * or lying; its sender's deadline tells).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/node/node_fwd_impl.h"
#include "shm/text.h"
#include "workers/data/tensor_impl.h"

/* Whether global worker gid belongs to node src (its world's workers);
 * else counts a forged message (what) and says so the first time. */
/* The worker id on this node of a global id from the wire, or -1: in 64
 * bits, so that an id near INT_MIN cannot overflow the subtraction. */
static int local_id(const struct disco__fwd *f, int32_t gid)
{
    int64_t wid = (int64_t)gid - f->gid_base;
    return wid >= 0 && wid < f->world ? (int)wid : -1;
}

static bool from_node(struct disco__fwd *f, int gid, int src, const char *what)
{
    if (gid >= 0 && gid < f->n->nodes * f->world && gid / f->world == src)
        return true;
    if (f->forged++ == 0)
        fprintf(stderr,
                "disco node %d: dropped %s from node %d naming worker %d, not one of its "
                "workers (later ones are only counted)\n",
                f->n->node, what, src, gid);
    return false;
}

bool disco__fwd_take_messages(struct disco__fwd *f)
{
    bool moved = false;
    for (;;) {
        int flag = 0, count = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, f->n->fwd, &flag, &m, &st) != MPI_SUCCESS ||
            !flag)
            return moved;
        moved = true;
        MPI_Get_count(&st, MPI_BYTE, &count);
        struct in_msg *im = calloc(1, sizeof *im);
        /* The sizes each tag has: a head (DATA) or a piece's head (PIECE,
         * then at least one byte), then at most a heap's bytes; ACK,
         * CANCEL and GO one wire_ack. */
        size_t c = count < 0 ? 0 : (size_t)count, heap = f->n->heap_bytes;
        bool bad = count < 0;
        if (st.MPI_TAG == TAG_DATA)
            bad |= c < sizeof(struct wire_head) || c - sizeof(struct wire_head) > heap;
        else if (st.MPI_TAG == TAG_PIECE)
            bad |= c <= sizeof(struct wire_piece) || c - sizeof(struct wire_piece) > heap;
        else
            bad |= c != sizeof(struct wire_ack);
        size_t len = bad ? sizeof(struct wire_head) : (size_t)count;
        void *buf = im != NULL ? malloc(len) : NULL;
        if (buf == NULL) { /* consumed unread: the sender's deadline tells */
            char c;
            MPI_Mrecv(&c, 0, MPI_BYTE, &m, MPI_STATUS_IGNORE);
            free(im);
            continue;
        }
        *im = (struct in_msg){.bad = bad,
                              .src = st.MPI_SOURCE,
                              .tag = st.MPI_TAG,
                              .len = len,
                              .since = disco__node_now(),
                              .buf = buf};
        /* A bad one is received into nothing (0 bytes: MPI then reports it
         * truncated) and dropped unanswered. */
        if (MPI_Imrecv(buf, bad ? 0 : count, MPI_BYTE, &m, &im->req) != MPI_SUCCESS)
            im->arrived = im->bad = true;
        /* At the end: DATA of one pair are taken in the order they came
         * (MPI keeps one sender's order). */
        struct in_msg **end = &f->ins;
        while (*end != NULL)
            end = &(*end)->next;
        *end = im;
    }
}

/* N4: an ACK from node src for one of this node's sends answers its
 * sender. */
static void on_ack(struct disco__fwd *f, const struct wire_ack *a, int src)
{
    if (!from_node(f, a->to, src, "an ACK"))
        return;
    disco__fwd_join_fresh(f);
    for (struct out_msg *o = f->outs; o != NULL; o = o->next) {
        if (o->wid < 0 || o->answered || o->from != a->from || o->to != a->to || o->seq != a->seq ||
            o->ticket != a->ticket)
            continue;
        o->answered = true;
        char words[DISCO__FWD_MSG], msg[DISCO__FWD_MSG + 96];
        disco__text_safe(words, sizeof words, a->msg, sizeof a->msg);
        snprintf(msg, sizeof msg, "disco_ctx_send: worker %d refused the tensor of worker %d: %s",
                 (int)a->to, (int)a->from, words);
        disco__fwd_answer(f, o->wid, o->ticket, a->status, a->status == DISCO_OK ? "" : msg, 0,
                          NULL, NULL, 0);
        return;
    } /* none: answered already (its sender gave up, or it carried its failure); dropped */
}

/* A GO from node src for one of this node's sends: the receiver matched
 * its head and wants its bytes (send_pieces in node_fwd.c sends them). */
static void on_go(struct disco__fwd *f, const struct wire_ack *a, int src)
{
    if (!from_node(f, a->to, src, "a GO"))
        return;
    disco__fwd_join_fresh(f);
    for (struct out_msg *o = f->outs; o != NULL; o = o->next) {
        if (o->wid < 0 || o->answered || o->go || o->from != a->from || o->to != a->to ||
            o->seq != a->seq || o->ticket != a->ticket)
            continue;
        o->go = true;
        return;
    } /* none: its sender gave up (its CANCEL ends the receive) */
}

/* Whether the receive r (of worker to) has passed the DATA h: r names a
 * later command, or a later receive from h's sender in h's command. */
static bool passed(const struct recv_req *r, const struct wire_head *h)
{
    return r->seq > h->seq || (r->seq == h->seq && r->from == h->from && r->nth > h->nth);
}

/* A DATA that waits for its receive: its bytes count in f->held, or, past
 * the bound f->hold_max, are dropped and its head marked
 * WIRE_BYTES_LATER, so they are asked for (GO) once the receive comes
 * (test_p2p_hold_bound). Flow control rather than a failure: a receive
 * posted late is normal (its worker computes first), and failing the send
 * would make a program's correctness depend on timing and on the other
 * sends in flight; holding the sender back costs nothing new, as its
 * forwarder keeps its copy until the receiver answers anyway (at most one
 * piece per sending worker: a send returns only when answered), so the
 * memory stays bounded on both sides and the send waits as it would for
 * a late receiver, under the same deadline. */
static void hold(struct disco__fwd *f, struct in_msg *im)
{
    size_t bytes = im->len - sizeof(struct wire_head);
    if (im->held || bytes == 0)
        return;
    if (bytes > f->hold_max || f->held > f->hold_max - bytes) {
        ((struct wire_head *)im->buf)->flags |= WIRE_BYTES_LATER;
        im->len = sizeof(struct wire_head);
        void *head = realloc(im->buf, im->len); /* smaller: keeps the head */
        if (head != NULL)
            im->buf = head;
        return;
    }
    f->held += bytes;
    im->held = true;
    /* Relaxed: a statistic (node_fwd_impl.h). */
    if (f->held > atomic_load_explicit(&f->held_peak, memory_order_relaxed))
        atomic_store_explicit(&f->held_peak, f->held, memory_order_relaxed);
}

/* N3: a DATA its receive takes now (its bytes, or, when they come later,
 * a GO back for them), the receiver passed (stale) or nobody took in
 * time: true when it is done with. */
static bool on_data(struct disco__fwd *f, struct in_msg *im, int64_t now)
{
    const struct wire_head *h = im->buf;
    int wid = local_id(f, h->to);
    char msg[DISCO__FWD_MSG];
    if (im->cancelled || !from_node(f, h->from, im->src, "a DATA"))
        return true;
    if (wid < 0 || wid >= f->world) {
        disco__fwd_send_ack(f, im->src, h, DISCO_E_PROTOCOL,
                            "the forwarder got a send to no worker of its node", TAG_ACK);
        return true;
    }
    struct recv_req *r = &f->rr[wid];
    if (r->live && r->streaming && r->from == h->from && r->seq == h->seq && r->nth == h->nth) {
        /* Its head came already and its pieces are coming: a second DATA
         * of the same send is no honest sender's. Dropped and counted as
         * a forged id is (from_node), so that it cannot restart the
         * stream under the pieces. */
        if (f->forged++ == 0)
            fprintf(stderr,
                    "disco node %d: dropped a second DATA from node %d for worker %d's receive "
                    "(later ones are only counted)\n",
                    f->n->node, im->src, (int)h->to);
        return true;
    }
    if (r->live && r->from == h->from && r->seq == h->seq && r->nth == h->nth) {
        const char *bytes = (const char *)im->buf + sizeof *h;
        bool later = (h->flags & WIRE_BYTES_LATER) != 0;
        int32_t v = disco__fwd_verdict(&h->desc, &r->desc, h->from, h->to, msg, sizeof msg);
        if (v == DISCO_OK && h->desc.status == DISCO_OK && !later &&
            im->len - sizeof *h != h->desc.nbytes) {
            v = DISCO_E_PROTOCOL;
            snprintf(msg, sizeof msg, "disco_ctx_recv: worker %d sent %zu bytes, announced %llu",
                     (int)h->from, im->len - sizeof *h, (unsigned long long)h->desc.nbytes);
        }
        uint64_t total = v == DISCO_OK && h->desc.status == DISCO_OK ? h->desc.nbytes : 0;
        /* The span checks the receive's block, off and total against the
         * heap (a size_t once it is non-NULL). */
        char *dst = total != 0 && total <= SIZE_MAX
                        ? disco__tensor_span(f->heap, r->block, r->off, (size_t)total)
                        : NULL;
        if (total != 0 && dst == NULL) {
            v = DISCO_E_PROTOCOL, total = 0;
            snprintf(msg, sizeof msg, "disco_ctx_recv: worker %d's bytes lie outside the heap",
                     (int)h->to);
        }
        if (later && total != 0) { /* the pieces come to on_piece */
            r->streaming = true;
            r->src = im->src;
            r->their_ticket = h->ticket;
            r->got = 0;
            r->dst = dst;
            disco__fwd_send_ack(f, im->src, h, DISCO_OK, "", TAG_GO);
            return true;
        }
        size_t n = later ? 0 : (size_t)total;
        if (!disco__fwd_answer(f, wid, r->ticket, v, msg, h->ticket, dst, bytes, n)) {
            r->live = false; /* withdrawn meanwhile: kept for a new request */
            hold(f, im);
            return false;
        }
        r->live = false;
        disco__fwd_send_ack(f, im->src, h, v, msg, TAG_ACK);
        return true;
    }
    if (passed(r, h)) {
        snprintf(msg, sizeof msg,
                 "worker %d had passed it by then (its receive %u from worker %d in command %llu)",
                 (int)h->to, (unsigned)r->nth, (int)r->from, (unsigned long long)r->seq);
        disco__fwd_send_ack(f, im->src, h, DISCO_E_TIMEOUT, msg, TAG_ACK);
        return true;
    }
    if (now - im->since > f->n->timeout_ns) {
        snprintf(msg, sizeof msg, "worker %d did not receive it within %lld ms", (int)h->to,
                 (long long)(f->n->timeout_ns / 1000000));
        disco__fwd_send_ack(f, im->src, h, DISCO_E_TIMEOUT, msg, TAG_ACK);
        return true;
    }
    hold(f, im);
    return false;
}

/* A PIECE for a receive that took its head (r->streaming): written into
 * the receiver's bytes at the offset it expects, with CLAIMED held
 * (comm_fwd.h, F3); the last one answers the receive and ACKs the
 * sender. One for no such receive (it ended; its sender was told) is
 * dropped; one out of place fails both ends (DISCO_E_PROTOCOL). */
static void on_piece(struct disco__fwd *f, const struct in_msg *im)
{
    const struct wire_piece *p = im->buf;
    int wid = local_id(f, p->to);
    if (!from_node(f, p->from, im->src, "a PIECE") || wid < 0 || wid >= f->world)
        return;
    struct recv_req *r = &f->rr[wid];
    if (!r->live || !r->streaming || r->src != im->src || r->from != p->from || r->seq != p->seq ||
        r->their_ticket != p->ticket)
        return;
    uint64_t len = im->len - sizeof *p, total = r->desc.nbytes;
    if (p->off != r->got || len > total - r->got) {
        char msg[DISCO__FWD_MSG];
        snprintf(msg, sizeof msg,
                 "disco_ctx_recv: worker %d sent bytes %llu to %llu of %llu, expected bytes from "
                 "%llu",
                 (int)p->from, (unsigned long long)p->off, (unsigned long long)(p->off + len),
                 (unsigned long long)total, (unsigned long long)r->got);
        disco__fwd_answer(f, wid, r->ticket, DISCO_E_PROTOCOL, msg, p->ticket, NULL, NULL, 0);
        r->live = false;
        disco__fwd_end_stream(f, wid, DISCO_E_PROTOCOL, "refused a piece out of place");
        return;
    }
    if (!disco__fwd_claimed_copy(f, wid, r->ticket, r->dst + r->got, p + 1, (size_t)len)) {
        r->live = false; /* withdrawn (or answered at its deadline) */
        disco__fwd_end_stream(f, wid, DISCO_E_TIMEOUT, "gave up its receive");
        return;
    }
    r->got += len;
    /* Relaxed: a statistic (node_fwd_impl.h). */
    atomic_fetch_add_explicit(&f->pieces_in, 1, memory_order_relaxed);
    if (r->got < total)
        return;
    r->live = false;
    if (!disco__fwd_answer(f, wid, r->ticket, DISCO_OK, "", p->ticket, NULL, NULL, 0)) {
        disco__fwd_end_stream(f, wid, DISCO_E_TIMEOUT, "gave up its receive");
        return;
    }
    r->streaming = false;
    struct wire_head h = {.seq = p->seq, .ticket = p->ticket, .from = p->from, .to = p->to};
    disco__fwd_send_ack(f, im->src, &h, DISCO_OK, "", TAG_ACK);
}

/* A sender that gave up (the CANCEL c): its DATA, if still held (it came
 * before c: one sender's messages keep their order), is dropped without
 * an answer. False while a DATA from c's node before it is still coming
 * (c is looked at again). */
static bool on_cancel(struct disco__fwd *f, const struct in_msg *c)
{
    const struct wire_ack *a = c->buf;
    if (!from_node(f, a->from, c->src, "a CANCEL"))
        return true;
    for (struct in_msg *im = f->ins; im != NULL && im != c; im = im->next) {
        if ((im->tag != TAG_DATA && im->tag != TAG_PIECE) || im->src != c->src || im->bad)
            continue;
        if (!im->arrived)
            return false;
        if (im->tag != TAG_DATA)
            continue;
        const struct wire_head *h = im->buf;
        if (h->from == a->from && h->to == a->to && h->seq == a->seq && h->ticket == a->ticket)
            im->cancelled = true;
    }
    /* A receive taking its pieces fails: the rest never comes. */
    int wid = local_id(f, a->to);
    struct recv_req *r = wid >= 0 && wid < f->world ? &f->rr[wid] : NULL;
    if (r != NULL && r->live && r->streaming && r->src == c->src && r->from == a->from &&
        r->seq == a->seq && r->their_ticket == a->ticket) {
        char who[64], msg[DISCO__FWD_MSG];
        disco__fwd_peer_words(a->from, f->world, who, sizeof who);
        snprintf(msg, sizeof msg,
                 "disco_ctx_recv from %s: the sender gave up after %llu of %llu bytes", who,
                 (unsigned long long)r->got, (unsigned long long)r->desc.nbytes);
        disco__fwd_answer(f, wid, r->ticket,
                          disco__status_is_error(a->status) ? a->status : DISCO_E_TIMEOUT, msg,
                          a->ticket, NULL, NULL, 0);
        r->live = r->streaming = false;
    }
    return true;
}

bool disco__fwd_progress_ins(struct disco__fwd *f, int64_t now)
{
    bool moved = false;
    for (struct in_msg **pp = &f->ins; *pp != NULL;) {
        struct in_msg *im = *pp;
        if (!im->arrived) {
            int done = 0;
            if (MPI_Test(&im->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                done = 1, im->bad = true;
            if (!done) {
                pp = &im->next;
                continue;
            }
            im->arrived = moved = true;
        }
        bool finished = true;
        if (!im->bad && im->tag == TAG_ACK)
            on_ack(f, im->buf, im->src);
        else if (!im->bad && im->tag == TAG_CANCEL)
            finished = on_cancel(f, im);
        else if (!im->bad && im->tag == TAG_DATA)
            finished = on_data(f, im, now);
        else if (!im->bad && im->tag == TAG_GO)
            on_go(f, im->buf, im->src);
        else if (!im->bad && im->tag == TAG_PIECE)
            on_piece(f, im);
        if (!finished) {
            pp = &im->next;
            continue;
        }
        moved = true;
        if (im->held)
            f->held -= im->len - sizeof(struct wire_head);
        *pp = im->next;
        free(im->buf);
        free(im);
    }
    return moved;
}
