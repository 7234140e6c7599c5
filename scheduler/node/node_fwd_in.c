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
        bool bad = count < 0 ||
                   (st.MPI_TAG == TAG_DATA && (size_t)count < sizeof(struct wire_head)) ||
                   (st.MPI_TAG != TAG_DATA && (size_t)count != sizeof(struct wire_ack)) ||
                   (size_t)count > sizeof(struct wire_head) + f->n->heap_bytes;
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

/* Whether the receive r (of worker to) has passed the DATA h: r names a
 * later command, or a later receive from h's sender in h's command. */
static bool passed(const struct recv_req *r, const struct wire_head *h)
{
    return r->seq > h->seq || (r->seq == h->seq && r->from == h->from && r->nth > h->nth);
}

/* N3: a DATA its receive takes now, the receiver passed (stale) or nobody
 * took in time: true when it is done with (answered back). */
static bool on_data(struct disco__fwd *f, struct in_msg *im, int64_t now)
{
    const struct wire_head *h = im->buf;
    int wid = h->to - f->gid_base;
    char msg[DISCO__FWD_MSG];
    if (im->cancelled || !from_node(f, h->from, im->src, "a DATA"))
        return true;
    if (wid < 0 || wid >= f->world) {
        disco__fwd_send_ack(f, im->src, h, DISCO_E_PROTOCOL,
                            "the forwarder got a send to no worker of its node", TAG_ACK);
        return true;
    }
    struct recv_req *r = &f->rr[wid];
    if (r->live && r->from == h->from && r->seq == h->seq && r->nth == h->nth) {
        const char *bytes = (const char *)im->buf + sizeof *h;
        int32_t v = disco__fwd_verdict(&h->desc, &r->desc, h->from, h->to, msg, sizeof msg);
        if (v == DISCO_OK && h->desc.status == DISCO_OK &&
            im->len != sizeof *h + (size_t)h->desc.nbytes) {
            v = DISCO_E_PROTOCOL;
            snprintf(msg, sizeof msg, "disco_ctx_recv: worker %d sent %zu bytes, announced %llu",
                     (int)h->from, im->len - sizeof *h, (unsigned long long)h->desc.nbytes);
        }
        size_t n = v == DISCO_OK ? (size_t)h->desc.nbytes : 0;
        void *dst = n != 0 ? disco__tensor_span(f->heap, r->block, r->off, n) : NULL;
        if (n != 0 && dst == NULL) {
            v = DISCO_E_PROTOCOL, n = 0;
            snprintf(msg, sizeof msg, "disco_ctx_recv: worker %d's bytes lie outside the heap",
                     (int)h->to);
        }
        if (!disco__fwd_answer(f, wid, r->ticket, v, msg, h->ticket, dst, bytes, n)) {
            r->live = false; /* withdrawn meanwhile: kept for a new request */
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
    return false;
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
        if (im->tag != TAG_DATA || im->src != c->src || im->bad)
            continue;
        if (!im->arrived)
            return false;
        const struct wire_head *h = im->buf;
        if (h->from == a->from && h->to == a->to && h->seq == a->seq && h->ticket == a->ticket)
            im->cancelled = true;
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
        if (!finished) {
            pp = &im->next;
            continue;
        }
        moved = true;
        *pp = im->next;
        free(im->buf);
        free(im);
    }
    return moved;
}
