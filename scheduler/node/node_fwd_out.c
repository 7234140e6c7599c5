/* node_fwd_out.c - what the forwarding thread's two halves share
 * (node_fwd_impl.h): a worker's post, answering it (F2 of comm_fwd.h),
 * and sending a message (into the fresh list that progress_outs joins).
 * node_fwd.c (the posts, the sends, the thread) and node_fwd_in.c (the
 * messages that come) both use these; neither is used here, so the arrows
 * between the three files point one way (tests/arrows.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/shm/wait.h"
#include "scheduler/node/node_fwd_impl.h"
#include "workers/data/collective.h"
#include "workers/data/comm_fwd.h"

struct disco__fwd_post *disco__fwd_post_of(struct disco__fwd *f, int wid)
{
    return &disco__coll_p2p(f->coll, (uint32_t)f->world, (uint32_t)f->groups, (uint32_t)wid)->fwd;
}

/* F2: answers worker wid's request ticket (held TAKEN) with status and
 * msg (and, when dst, copies len bytes from src there first). Returns
 * false when the worker withdrew (nothing written). */
bool disco__fwd_answer(struct disco__fwd *f, int wid, uint64_t ticket, int32_t status,
                       const char *msg, uint64_t their_ticket, void *dst, const void *src,
                       size_t len)
{
    struct disco__fwd_post *p = disco__fwd_post_of(f, wid);
    uint64_t want = DISCO__FWD_STATE(ticket, DISCO__FWD_TAKEN);
    /* acq_rel: the claim against the worker's withdrawal (comm_fwd.h). */
    if (!atomic_compare_exchange_strong_explicit(&p->state, &want,
                                                 DISCO__FWD_STATE(ticket, DISCO__FWD_CLAIMED),
                                                 memory_order_acq_rel, memory_order_acquire))
        return false;
    if (dst != NULL && len != 0)
        memcpy(dst, src, len);
    p->ans_status = status;
    p->ans_ticket = their_ticket;
    snprintf(p->ans_msg, sizeof p->ans_msg, "%s", msg != NULL ? msg : "");
    /* Release: pairs with the worker's acquire of DONE (W2): the answer
     * and the bytes before it. */
    atomic_store_explicit(&p->state, DISCO__FWD_STATE(ticket, DISCO__FWD_DONE),
                          memory_order_release);
    disco_waitq_wake(&p->q);
    return true;
}

bool disco__fwd_claimed_copy(struct disco__fwd *f, int wid, uint64_t ticket, void *dst,
                             const void *src, size_t len)
{
    struct disco__fwd_post *p = disco__fwd_post_of(f, wid);
    uint64_t taken = DISCO__FWD_STATE(ticket, DISCO__FWD_TAKEN);
    /* acq_rel: the claim against the worker's withdrawal (comm_fwd.h, F3):
     * if the worker withdrew first, its bytes are not touched. */
    if (!atomic_compare_exchange_strong_explicit(&p->state, &taken,
                                                 DISCO__FWD_STATE(ticket, DISCO__FWD_CLAIMED),
                                                 memory_order_acq_rel, memory_order_acquire))
        return false;
    memcpy(dst, src, len);
    /* Release: the copy before the worker may withdraw or read DONE (pairs
     * with the acquire load and compare-and-swap of its withdrawal in
     * comm_net.c's exchange). No wake: the worker waits for DONE only. */
    atomic_store_explicit(&p->state, taken, memory_order_release);
    return true;
}

void disco__fwd_push_out(struct disco__fwd *f, struct out_msg *o, int node, int tag, size_t len)
{
    if (MPI_Isend(o->buf, (int)len, MPI_BYTE, node, tag, f->n->fwd, &o->req) != MPI_SUCCESS)
        o->sent = true; /* nothing in flight: the receiver's deadline tells */
    o->next = f->fresh; /* not outs: progress_outs may be walking it */
    f->fresh = o;
}

void disco__fwd_send_ack(struct disco__fwd *f, int node, const struct wire_head *h, int32_t status,
                         const char *msg, int tag)
{
    struct out_msg *o = calloc(1, sizeof *o);
    struct wire_ack *a = calloc(1, sizeof *a);
    if (o == NULL || a == NULL) { /* the sender's deadline tells */
        free(o), free(a);
        return;
    }
    *a = (struct wire_ack){
        .seq = h->seq, .ticket = h->ticket, .from = h->from, .to = h->to, .status = status};
    snprintf(a->msg, sizeof a->msg, "%s", msg);
    o->wid = -1;
    o->answered = true;
    o->buf = a;
    disco__fwd_push_out(f, o, node, tag, sizeof *a);
}

void disco__fwd_end_stream(struct disco__fwd *f, int wid, int32_t status, const char *why)
{
    struct recv_req *r = &f->rr[wid];
    if (!r->streaming)
        return;
    r->streaming = false;
    /* Relaxed: the link thread's verdict, one word read alone (as
     * node_wait.c's waits read it): a dead node is sent nothing. */
    if (atomic_load_explicit(&f->n->peer[r->src].dead, memory_order_relaxed))
        return;
    char msg[DISCO__FWD_MSG];
    snprintf(msg, sizeof msg, "worker %d %s after %llu of %llu bytes", f->gid_base + wid, why,
             (unsigned long long)r->got, (unsigned long long)r->desc.nbytes);
    struct wire_head h = {
        .seq = r->seq, .ticket = r->their_ticket, .from = r->from, .to = f->gid_base + wid};
    disco__fwd_send_ack(f, r->src, &h, status, msg, TAG_ACK);
}

/* The messages sent since, into outs (never while progress_outs walks it). */
void disco__fwd_join_fresh(struct disco__fwd *f)
{
    while (f->fresh != NULL) {
        struct out_msg *o = f->fresh;
        f->fresh = o->next;
        o->next = f->outs;
        f->outs = o;
    }
}
