/* comm_net.c - disco_ctx_send and disco_ctx_recv (<disco/comm.h>) between
 * workers on two nodes (comm_net.h): the worker's side.
 *
 * Design. Only the two workers take part in a send, but the MPI link
 * between nodes lives in each node's leader (its worker 0, in the node's
 * MPI process); the other workers are forked processes without MPI, and
 * the leader itself is busy in its own worker function when a send
 * happens (it may itself be sending: its own thread cannot serve the
 * others). So every send or receive across nodes, a leader's included,
 * goes through a forwarding thread in each node's MPI process
 * (scheduler/node/node_fwd.c), started with the node link and stopped
 * before MPI_Finalize (and before an agent unmaps its node's heap). The
 * heap is mapped in that process, so bytes move as:
 *   sender's tensor -> (a device tensor: staged into the sender's heap)
 *   -> the sending forwarder's own memory (copied at the claim) -> MPI
 *   -> the receiving forwarder's own memory -> the receiver's heap tensor
 *   -> (a device tensor: copied onto the device by the receiver).
 *   N1 the worker posts its request in its fwd post (comm_fwd.h W1): a
 *      send its tensor's description (dtype, shape, device type; or its
 *      own failure, so the receiver fails with its words) and heap
 *      bytes; a receive the description of the tensor it takes and the
 *      heap bytes to fill;
 *   N2 the sending forwarder claims a send (F1), copies description and
 *      bytes into one message of its own and sends it (MPI_Isend, tag
 *      DATA) to the receiver's node; the sender's bytes are free again;
 *   N3 the receiving forwarder takes every message as it comes (matched
 *      probe, then a nonblocking receive into its own memory), keeps it
 *      until the receiver's request for that (sender, receiver, command,
 *      nth: the k-th send meets the k-th receive, comm_fwd.h's Order) is
 *      posted, then checks the description against it (the
 *      receiver's verdict: DISCO_E_MISMATCH in the same words for both
 *      ends), copies the bytes into the receiver's heap tensor and
 *      answers it (F2), then sends the verdict back (tag ACK);
 *   N4 the sending forwarder answers the sender with that verdict (F2):
 *      the send returns once the receiver has the bytes, or with its
 *      refusal, as between two workers of one node.
 * The forwarder never waits on anything: it polls its requests (MPI_Test)
 * and the posts in a loop, so two workers sending to each other across
 * the same two nodes, or any number of pairs, proceed together. Messages
 * name (sender, receiver, command, nth, ticket), so one that comes late
 * (for a receive or send that gave up) is never taken for a later one: a
 * late DATA is dropped (with a refusal back) once its receiver's requests
 * show it passed it (a later command, or a later receive from the same
 * sender), or after the call timeout; a late ACK is dropped. A send that
 * carries its sender's failure is one message like any other: the
 * receive it meets fails in the sender's words, however late it is
 * posted (test_p2p_failure_then_send_late_receiver).
 *
 * Deadlines. A worker process's waits have no deadline of their own (its
 * session wait: the session's abort word, its controller's liveness), so
 * the forwarder keeps the time: a request it took and could not answer
 * by the worker's command start + 4/5 of the call timeout (the worker
 * writes its command's start in its post; comm_fwd.h, Deadline) it
 * answers with DISCO_E_TIMEOUT naming the peer (global id) and its node
 * ("disco_ctx_send to worker 3 (on node 1): no answer within 8000 ms"),
 * before the controller's own wait for the worker's reply ends (which
 * would kill the worker instead of reporting it; what is guaranteed is in
 * comm_fwd.h; test_p2p_late_receive_times_out).
 * There is no mark of a command's end to read across nodes, as there is
 * on one node. A request that waits on a node the heartbeats found dead
 * fails at once with DISCO_E_WORKER_DIED naming it (the controller's node
 * watches every node; an agent's only the controller). A worker whose
 * own wait ends first (worker 0's has the call deadline; an abort)
 * withdraws (comm_fwd.h) and fails naming the peer the same way. After a
 * withdrawal the forwarder writes nothing into that worker's post or bytes
 * (it only ever writes while it holds CLAIMED), a send's bytes were copied
 * at the claim, and a send given up is cancelled at the receiving node
 * (its DATA dropped if not yet taken), so a timeout leaves no MPI request
 * on any worker's memory and the session stays usable. A receive that
 * took the bytes just before its sender gave up is kept: the sender's
 * failure then does not mean the bytes were not delivered (as with any
 * network timeout).
 *
 * Sizes. A send of any size crosses (the heap bounds it): bytes that fit
 * one piece (DISCO_FWD_PIECE_BYTES, 16 MiB by default) travel in its DATA
 * message, as above; more go as a head alone (N2), the receiving
 * forwarder matches it and checks it as any DATA (N3) and asks for the
 * bytes (GO), and the sending forwarder sends them in pieces, at most
 * FWD_WINDOW in flight, each read from the sender's heap and written into
 * the receiver's with CLAIMED held (comm_fwd.h, F3), so a withdrawal or
 * deadline on either side stops the transfer between two pieces, the
 * other side told (an ACK refusing it, or a CANCEL). DATA bytes held for
 * receives not yet posted are bounded by DISCO_FWD_HOLD_BYTES (256 MiB by
 * default); past it the receiving forwarder keeps the head alone and asks
 * for the bytes when the receive comes (node_fwd_in.c, hold). Tests:
 * tests/test_node_p2p.c (every pair of leaders and non-leaders, both
 * directions at once, a ring of groups, host and sim tensors, mismatch,
 * sends in many pieces, a failure between two pieces, the hold bound,
 * no peer, a late receive, a failure then a send to a late receiver, a
 * peer's node dying, 200 sends in a row, the trace),
 * test_ctx_more_across_nodes and
 * test_ctx_send_no_receiver (tests/test_node.c).
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "shm/text.h"
#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#include "workers/data/collective.h"
#include "workers/data/comm_net.h"
#include "workers/data/tensor_impl.h"

bool disco__p2p_alike(DLDataType sdt, int sndim, const int64_t *sshape, uint32_t sdev,
                      DLDataType rdt, int rndim, const int64_t *rshape, uint32_t rdev, int from,
                      int to, char *msg, size_t cap)
{
    bool same = sndim == rndim && sndim >= 0 && sndim <= DISCO_MAX_NDIM && sdt.code == rdt.code &&
                sdt.bits == rdt.bits && sdt.lanes == rdt.lanes && sdev == rdev;
    for (int d = 0; same && d < rndim; d++)
        same = sshape[d] == rshape[d];
    if (same)
        return true;
    char a[32], b[32];
    snprintf(msg, cap,
             "disco_ctx_recv: worker %d sends %s of %d dims (device type %u), worker %d receives "
             "%s of %d dims (device type %u)",
             from, disco_dtype_str(sdt, a, sizeof a), sndim, sdev, to,
             disco_dtype_str(rdt, b, sizeof b), rndim, rdev);
    return false;
}

int32_t disco__fwd_verdict(const struct disco__fwd_desc *sent, const struct disco__fwd_desc *mine,
                           int from, int to, char *msg, size_t cap)
{
    char words[DISCO__FWD_MSG];
    if (sent->status != DISCO_OK) { /* the sender's failure, word for word */
        disco__text_safe(words, sizeof words, sent->msg, sizeof sent->msg);
        snprintf(msg, cap, "disco_ctx_recv: worker %d: %s", from, words);
        return disco__status_is_error(sent->status) ? sent->status : DISCO_E_PROTOCOL;
    }
    if (mine->status != DISCO_OK) { /* the receiver's own */
        disco__text_safe(msg, cap, mine->msg, sizeof mine->msg);
        return disco__status_is_error(mine->status) ? mine->status : DISCO_E_PROTOCOL;
    }
    if (!disco__p2p_alike(sent->dtype, sent->ndim, sent->shape, sent->dev_type, mine->dtype,
                          mine->ndim, mine->shape, mine->dev_type, from, to, msg, cap))
        return DISCO_E_MISMATCH;
    if (sent->nbytes != mine->nbytes) {
        snprintf(msg, cap, "disco_ctx_recv: worker %d announced %llu bytes", from,
                 (unsigned long long)sent->nbytes);
        return DISCO_E_PROTOCOL;
    }
    msg[0] = '\0';
    return DISCO_OK;
}

static struct disco__fwd_post *post_of(disco_worker_t *w)
{
    uint32_t groups = w->ngroups > 0 ? w->ngroups : 1;
    return &disco__coll_p2p(w->coll, (uint32_t)w->world, groups, (uint32_t)w->id)->fwd;
}

/* A tensor's description (h: its heap bytes; x: the tensor the caller
 * gave, whose device type it names), or st's failure in its words. */
static void describe(struct disco__fwd_desc *d, disco_status_t st, const DLTensor *x,
                     const DLTensor *h)
{
    memset(d, 0, sizeof *d);
    d->status = st;
    if (st != DISCO_OK) {
        snprintf(d->msg, sizeof d->msg, "%s", disco_last_error());
        return;
    }
    d->ndim = h->ndim;
    d->dtype = h->dtype;
    d->dev_type = disco__tensor_is_device(x) ? (uint32_t)x->device.device_type : 0;
    d->nbytes = disco_tensor_nbytes(h);
    memcpy(d->shape, h->shape, (size_t)h->ndim * sizeof *h->shape);
}

struct step_arg {
    struct disco__fwd_post *p;
    uint64_t want; /* the state waited for: DONE of the request's ticket */
};

static bool at_step(void *v)
{
    struct step_arg *a = v;
    /* Acquire: pairs with the forwarder's release of DONE (F2: its answer,
     * and a receive's bytes, before it). */
    return atomic_load_explicit(&a->p->state, memory_order_acquire) == a->want;
}

void disco__fwd_peer_words(int peer, int world, char *out, size_t cap)
{
    snprintf(out, cap, "worker %d (%s node %d)", peer, peer % world == 0 ? "the leader of" : "on",
             peer / world);
}

/* The request's place among w's requests of kind with peer (a global id,
 * checked by the caller) in its command (comm_fwd.h, Order), counted now;
 * 0 when the count has no memory (the caller fails). */
static uint32_t next_nth(disco_worker_t *w, uint32_t kind, int peer)
{
    if (w->fwd_count == NULL &&
        (w->fwd_count = calloc((size_t)w->gworld, sizeof *w->fwd_count)) == NULL)
        return 0;
    struct disco__fwd_count *c = &w->fwd_count[peer];
    if (c->seq != w->seq)
        *c = (struct disco__fwd_count){.seq = w->seq};
    return kind == DISCO__FWD_SEND ? ++c->sends : ++c->recvs;
}

/* N1 and the wait for the answer (comm_fwd.h W1, W2), or the withdrawal.
 * Returns DISCO_OK with the answer in p (ans_status, ans_msg), or the
 * wait's failure in words naming the peer (the post withdrawn).
 * *ticket_out: the request's ticket. */
static disco_status_t exchange(disco_worker_t *w, uint32_t kind, int peer,
                               const struct disco__fwd_desc *d, const DLTensor *h,
                               uint64_t *ticket_out)
{
    struct disco__fwd_post *p = post_of(w);
    const char *what = kind == DISCO__FWD_SEND ? "disco_ctx_send to" : "disco_ctx_recv from";
    char who[64], why[DISCO_ERR_MSG_MAX] = "";
    disco__fwd_peer_words(peer, w->world, who, sizeof who);
    uint32_t nth = next_nth(w, kind, peer);
    if (nth == 0)
        return disco_set_error(DISCO_E_NOMEM, "%s %s: no memory for the count of requests", what,
                               who);
    /* Relaxed: only this worker moves its post to a new ticket, and the
     * forwarder is done with the previous one (DONE or WITHDRAWN). */
    uint64_t ticket = (atomic_load_explicit(&p->state, memory_order_relaxed) >> 3) + 1;
    p->kind = kind;
    p->peer = peer;
    p->seq = w->seq;
    p->nth = nth;
    p->start_ns = w->cmd_start_ns;
    p->desc = *d;
    p->block = h != NULL ? disco__tensor_block(h) : 0;
    p->off = h != NULL ? disco__tensor_byte_offset(h) : 0;
    /* Release: the request before the forwarder sees POSTED (F1). */
    atomic_store_explicit(&p->state, DISCO__FWD_STATE(ticket, DISCO__FWD_POSTED),
                          memory_order_release);
    *ticket_out = ticket;
    uint64_t done = DISCO__FWD_STATE(ticket, DISCO__FWD_DONE);
    struct step_arg a = {p, done};
    int64_t t0 = disco_now_ns();
    /* The session's break ends the wait with its code alone (the abort word
     * has no words): cleared first, so that no older words are taken for
     * its reason. */
    disco_clear_error();
    disco_status_t st = disco_wait_until(&p->q, at_step, &a, w->wait);
    if (st == DISCO_OK)
        return DISCO_OK;
    if (st == DISCO_E_TIMEOUT)
        snprintf(why, sizeof why, "%s %s: no answer within %lld ms", what, who,
                 (long long)((disco_now_ns() - t0) / 1000000));
    else if (disco_last_error()[0] == '\0')
        snprintf(why, sizeof why, "%s %s: the session broke (%s) while it waited", what, who,
                 disco_err_name(st));
    else
        snprintf(why, sizeof why, "%s %s: %s", what, who, disco_last_error());
    for (;;) {
        /* Acquire: as at_step (an answer that won the race is read). */
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        if (s == done)
            return DISCO_OK; /* answered after all */
        if (s == DISCO__FWD_STATE(ticket, DISCO__FWD_CLAIMED)) {
            /* The forwarder holds it for a copy in memory only (never
             * across a wait), and may be writing this worker's bytes: the
             * worker must not return meanwhile, whatever its own wait
             * says (an abort word, a deadline), so it yields until the
             * copy ends. Bounded: a forwarder that died mid-copy took
             * this worker with it (it is its parent, or its process). */
            sched_yield();
            continue;
        }
        /* acq_rel: the withdrawal against the forwarder's claim (F1, F2);
         * if it wins, the forwarder never writes this ticket's post. */
        if (atomic_compare_exchange_strong_explicit(&p->state, &s,
                                                    DISCO__FWD_STATE(ticket, DISCO__FWD_WITHDRAWN),
                                                    memory_order_acq_rel, memory_order_acquire))
            return disco_set_error(st, "%s", why);
    }
}

/* The answer in p as this end's status (its words read from the post). */
static disco_status_t answer(struct disco__fwd_post *p)
{
    if (p->ans_status == DISCO_OK)
        return DISCO_OK;
    char msg[DISCO__FWD_MSG];
    disco__text_safe(msg, sizeof msg, p->ans_msg, sizeof p->ans_msg);
    return disco_set_error(disco__status_is_error(p->ans_status) ? (disco_status_t)p->ans_status
                                                                 : DISCO_E_PROTOCOL,
                           "%s", msg);
}

disco_status_t disco__coll_net_send(disco_ctx_t *ctx, disco_status_t pre, const DLTensor *x, int to,
                                    uint64_t *ticket_out)
{
    disco_worker_t *w = ctx->worker;
    const DLTensor *h = x;
    disco_status_t st = pre;
    if (st == DISCO_OK && disco__tensor_is_device(x)) { /* through the heap, as allreduce's */
        DLTensor *hx;
        if ((st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &hx)) == DISCO_OK &&
            (st = disco__tensor_copy_out(x, hx)) == DISCO_OK)
            h = hx;
    }
    struct disco__fwd_desc d;
    describe(&d, st, x, h);
    char mine[DISCO_ERR_MSG_MAX];
    snprintf(mine, sizeof mine, "%s", disco_last_error());
    disco_status_t xst =
        exchange(w, DISCO__FWD_SEND, to, &d, st == DISCO_OK ? h : NULL, ticket_out);
    if (st != DISCO_OK) /* the receiver was told; this end fails with its own words */
        return disco_set_error(st, "%s", mine);
    return xst != DISCO_OK ? xst : answer(post_of(w));
}

disco_status_t disco__coll_net_recv(disco_ctx_t *ctx, disco_status_t pre, DLTensor *x, int from,
                                    uint64_t *ticket_out)
{
    disco_worker_t *w = ctx->worker;
    DLTensor *h = x;
    disco_status_t st = pre;
    if (st == DISCO_OK && disco__tensor_is_device(x)) /* through the heap, then copied up */
        st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &h);
    struct disco__fwd_desc d;
    describe(&d, st, x, h);
    char mine[DISCO_ERR_MSG_MAX];
    snprintf(mine, sizeof mine, "%s", disco_last_error());
    uint64_t mine_ticket;
    disco_status_t xst =
        exchange(w, DISCO__FWD_RECV, from, &d, st == DISCO_OK ? h : NULL, &mine_ticket);
    if (st != DISCO_OK) /* the sender was refused with these words */
        return disco_set_error(st, "%s", mine);
    if (xst != DISCO_OK)
        return xst;
    struct disco__fwd_post *p = post_of(w);
    if ((st = answer(p)) != DISCO_OK)
        return st;
    *ticket_out = p->ans_ticket;
    return h != x ? disco__tensor_copy_in(x, h) : DISCO_OK;
}
