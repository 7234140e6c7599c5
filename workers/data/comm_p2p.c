/* comm_p2p.c - disco_ctx_send and disco_ctx_recv (<disco/comm.h>): one
 * outgoing post per worker in the collective area, claimed by the
 * receiver, which copies and acknowledges (protocol S1-S2, R1-R2 in
 * collective.h). Only the two workers take part. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "disco/comm.h"
#include "disco/device.h"
#include "disco/dtype.h"
#include "shm/text.h"
#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#include "workers/data/arena.h"
#include "workers/data/collective.h"
#include "workers/data/comm_fwd.h"
#include "workers/data/comm_impl.h"
#include "workers/data/comm_net.h"
#include "workers/data/tensor_impl.h"

/* A send of 0 or 1 dims writes, and its receiver reads, the post's first
 * line only (its status included). */
_Static_assert(offsetof(struct disco__p2p, shape) + sizeof(int64_t) <= 64,
               "a 1-dim post's fields fit the post's first cache line");

static struct disco__p2p *post_of(disco_worker_t *w, int id)
{
    uint32_t groups = w->ngroups > 0 ? w->ngroups : 1;
    return disco__coll_p2p(w->coll, (uint32_t)w->world, groups, (uint32_t)id);
}

/* A peer given as a global worker id, not this worker: on this node
 * (*local_out its id there, *across_out false), or on another node
 * (*across_out true: comm_net.c, through the leaders' forwarders). */
static disco_status_t peer_arg(disco_ctx_t *ctx, int peer, const char *what, int *local_out,
                               bool *across_out)
{
    disco_worker_t *w = ctx->worker;
    int local = peer - w->gid_base;
    if (peer < 0 || peer >= w->gworld || peer == disco__worker_gid(w))
        return disco_set_error(DISCO_E_INVAL, "%s: worker %d of %d (this is worker %d)", what, peer,
                               w->gworld, disco__worker_gid(w));
    *local_out = local;
    *across_out = local < 0 || local >= w->world; /* set only here: a bad peer is no one's */
    return DISCO_OK;
}

struct ack_arg {
    struct disco__p2p *p;
    uint32_t ticket;
    disco_worker_t *w;
    int peer; /* watched for departure, or -1 */
    bool departed;
};

static bool acked(void *v)
{
    struct ack_arg *a = v;
    /* Acquire: pairs with the receiver's release of the ack (R2), after its
     * copy. */
    if ((uint32_t)(atomic_load_explicit(&a->p->ack, memory_order_acquire) >> 32) == a->ticket)
        return true;
    if (a->peer >= 0 && disco__coll_has_left(a->w, a->peer))
        a->departed = true;
    return a->departed;
}

/* What a send's or receive's trace record names (comm_impl.h): the peer
 * once known, the ticket once posted or claimed. */
struct stamp {
    int peer;
    uint64_t ticket;
};

/* A peer's words from its post (another process's: bounded, escaped). */
static void peer_words(char *out, size_t cap, const char *msg)
{
    disco__text_safe(out, cap, msg, DISCO__P2P_MSG);
}

/* A status read from a post: an error of the table, else DISCO_E_PROTOCOL. */
static disco_status_t posted_status(int32_t st)
{
    return disco__status_is_error(st) ? (disco_status_t)st : DISCO_E_PROTOCOL;
}

/* S1: the post's fields for x, or, when own failed, for the failure (its
 * words in msg: Failures, collective.h). */
static void post_fields(disco_worker_t *w, struct disco__p2p *p, int to, const DLTensor *x,
                        disco_status_t own, const char *mine)
{
    p->seq = w->seq;
    p->to = to;
    p->status = (int16_t)own; /* a status fits: -1 .. -31 (disco/status.h) */
    if (own != DISCO_OK) {
        p->ndim = 0;
        p->dev_type = 0;
        p->block = p->off = 0;
        snprintf(p->msg, sizeof p->msg, "%s", mine);
        return;
    }
    bool dev = x->device.device_type != kDLCPU;
    p->ndim = x->ndim;
    p->dtype = x->dtype;
    p->dev_type = dev ? (uint16_t)x->device.device_type : 0;
    p->block = disco__tensor_block(x);
    p->off = disco__tensor_byte_offset(x);
    memcpy(p->shape, x->shape, (size_t)x->ndim * sizeof *x->shape);
}

static disco_status_t send(disco_ctx_t *ctx, const DLTensor *t, int to_worker, struct stamp *sp)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_send");
    int to = -1;
    bool across = false;
    DLTensor *x = NULL;
    if (st == DISCO_OK)
        st = peer_arg(ctx, to_worker, "disco_ctx_send", &to, &across);
    sp->peer = across ? to_worker : to; /* across nodes: the global id */
    st = disco__comm_failing(ctx, st);  /* this call's, even with a bad peer */
    if (st == DISCO_OK)
        st = disco__comm_stage(ctx, t, true, "disco_ctx_send", &x);
    if (across) /* through the forwarders (its own failure sent too) */
        return disco__coll_net_send(ctx, st, st == DISCO_OK ? x : NULL, to_worker, &sp->ticket);
    if (to < 0) /* no worker, or no peer: nothing to pair with */
        return st;
    disco_worker_t *w = ctx->worker;
    bool dev = x != NULL && x->device.device_type != kDLCPU;
    if (st == DISCO_OK && dev) /* the receiver's stream waits for this record */
        st = disco__arena_record(w->arena);
    /* own: this send's own failure, posted in its place (Failures,
     * collective.h); it returns mine whatever its receiver does. */
    disco_status_t own = st;
    char mine[DISCO_ERR_MSG_MAX]; /* read only when own failed */
    mine[0] = '\0';
    if (own != DISCO_OK)
        snprintf(mine, sizeof mine, "%s", disco_last_error());
    struct disco__p2p *p = post_of(w, w->id);
    /* Relaxed: only this worker moves its post out of IDLE/CLAIMED into a
     * new ticket; the receiver's CLAIMED keeps the ticket bits. */
    uint64_t ticket = (atomic_load_explicit(&p->state, memory_order_relaxed) >> 2) + 1;
    sp->ticket = ticket;
    post_fields(w, p, to, x, own, mine); /* S1: the fields, then the state */
    /* Release: the fields above (a failure's status and words too) before
     * the receiver sees POSTED (R1: pairs with posted_to_me's acquire). */
    atomic_store_explicit(&p->state, ticket << 2 | DISCO__P2P_POSTED, memory_order_release);
    disco_waitq_wake(&p->q);
    struct ack_arg a = {p, (uint32_t)ticket, w, to, false};
    st = disco_wait_until(&p->q, acked, &a, w->wait);
    if (st == DISCO_OK && !a.departed)
        goto done;
    if (st == DISCO_OK)
        st = disco_set_error(DISCO_E_MISMATCH,
                             "disco_ctx_send: worker %d ended its command without receiving "
                             "from worker %d",
                             to_worker, disco__worker_gid(w));
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", own != DISCO_OK ? mine : disco_last_error());
    if (own != DISCO_OK)
        st = own;
    uint64_t want = ticket << 2 | DISCO__P2P_POSTED;
    /* acq_rel: a withdrawal the receiver's claim (R1) races against; if
     * the claim won, the copy is under way and its ack is waited for. */
    if (atomic_compare_exchange_strong_explicit(&p->state, &want,
                                                ticket << 2 | DISCO__P2P_WITHDRAWN,
                                                memory_order_acq_rel, memory_order_acquire))
        return disco_set_error(st, "%s", why); /* nobody will read the bytes */
    /* The claim won: the receiver is reading this post (its status and
     * words) and the bytes it names, and acks when done. That is waited
     * for past the deadline that ended the first wait (the copy bounds
     * it), or a later send of this command could rewrite them under the
     * reader; only the session's abort ends it sooner, and then the
     * session is broken for every member. */
    a.peer = -1;
    disco_wait_t past = *w->wait;
    past.deadline_ns = 0;
    past.timeout_ns = 0;
    if (disco_wait_until(&p->q, acked, &a, &past) != DISCO_OK)
        return disco_set_error(st, "%s", why);
done:
    if (own != DISCO_OK) /* the receiver was told; this end fails with its own words */
        return disco_set_error(own, "%s", mine);
    /* Relaxed: the acquire in acked() already ordered the ack's fields
     * and ack_msg (the receiver wrote them before its release, R2). */
    int32_t rst = (int32_t)(uint32_t)atomic_load_explicit(&p->ack, memory_order_relaxed);
    if (rst != DISCO_OK) {
        char words[DISCO__P2P_MSG];
        peer_words(words, sizeof words, p->ack_msg);
        return disco_set_error(posted_status(rst),
                               "disco_ctx_send: worker %d refused the tensor of worker %d: %s",
                               to_worker, disco__worker_gid(w), words);
    }
    return DISCO_OK;
}

struct post_arg {
    struct disco__p2p *p;
    disco_worker_t *w;
    int from;
    uint64_t state; /* the POSTED state seen */
    bool departed;
};

static bool posted_to_me(void *v)
{
    struct post_arg *a = v;
    /* Acquire: pairs with the sender's release of POSTED (S1). to and seq
     * are read after it but may be rewritten by a sender that withdrew and
     * posted again meanwhile: the claim's compare-and-swap on the state
     * (ticket included) then fails, so a post is only taken with the
     * fields of its own ticket (read again after the claim, in take). */
    uint64_t s = atomic_load_explicit(&a->p->state, memory_order_acquire);
    if ((s & 3) == DISCO__P2P_POSTED && a->p->to == a->w->id && a->p->seq == a->w->seq) {
        a->state = s;
        return true;
    }
    if (disco__coll_has_left(a->w, a->from))
        a->departed = true;
    return a->departed;
}

/* R2: the copy into x, after the claim. Returns DISCO_OK or why not. */
static disco_status_t take(disco_worker_t *w, struct disco__p2p *p, int from, DLTensor *x)
{
    char msg[DISCO_ERR_MSG_MAX];
    uint32_t dev = x->device.device_type == kDLCPU ? 0u : (uint32_t)x->device.device_type;
    if (!disco__p2p_alike(p->dtype, p->ndim, p->shape, p->dev_type, x->dtype, x->ndim, x->shape,
                          dev, from + w->gid_base, disco__worker_gid(w), msg, sizeof msg))
        return disco_set_error(DISCO_E_MISMATCH, "%s", msg);
    size_t n = disco_tensor_nbytes(x);
    if (p->dev_type == 0) {
        void *src = disco__tensor_span(w->heap, p->block, p->off, n);
        if (src == NULL)
            return disco_set_error(DISCO_E_PROTOCOL,
                                   "disco_ctx_recv: worker %d posted a tensor outside the heap",
                                   from + w->gid_base);
        memcpy(x->data, src, n);
        return DISCO_OK;
    }
    void *src;
    DLDevice sd;
    disco_status_t st = disco__arena_wait_for(w->arena, from);
    if (st == DISCO_OK)
        st = disco__arena_peer(w->arena, from, p->block, n, &src, &sd);
    if (st == DISCO_OK)
        st = disco_device_copy(x->data, x->device, src, sd, n, disco__arena_stream(w->arena));
    if (st == DISCO_OK) /* the sender may reuse its bytes once acknowledged */
        st = disco__arena_sync(w->arena);
    return st;
}

/* R2 for a claimed post: the copy into x when neither party failed (own:
 * this receive's own failure, its words in mine); then the ack, with the
 * receiver's words when it fails. Returns this receive's status. */
static disco_status_t answer(disco_worker_t *w, struct disco__p2p *p, int from, DLTensor *x,
                             uint64_t ticket, disco_status_t own, const char *mine)
{
    disco_status_t st = own;
    if (own != DISCO_OK) {
        snprintf(p->ack_msg, sizeof p->ack_msg, "%s", mine);
    } else if (p->status != DISCO_OK) { /* the sender's own failure, in its words */
        char words[DISCO__P2P_MSG];
        peer_words(words, sizeof words, p->msg);
        st = disco_set_error(posted_status(p->status),
                             "disco_ctx_recv: worker %d failed its send to worker %d: %s",
                             from + w->gid_base, disco__worker_gid(w), words);
        p->ack_msg[0] = '\0'; /* unread: the sender returns its own words */
    } else if ((st = take(w, p, from, x)) != DISCO_OK) {
        snprintf(p->ack_msg, sizeof p->ack_msg, "%s", disco_last_error());
    }
    /* Release: the copy and ack_msg before the sender sees its ack (S2:
     * pairs with the acquire in acked()). */
    atomic_store_explicit(&p->ack, (uint64_t)(uint32_t)ticket << 32 | (uint32_t)(int32_t)st,
                          memory_order_release);
    disco_waitq_wake(&p->q);
    return own != DISCO_OK ? disco_set_error(own, "%s", mine) : st;
}

static disco_status_t recv(disco_ctx_t *ctx, DLTensor *t, int from_worker, struct stamp *sp)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_recv");
    int from = -1;
    bool across = false;
    DLTensor *x = NULL;
    if (st == DISCO_OK)
        st = peer_arg(ctx, from_worker, "disco_ctx_recv", &from, &across);
    sp->peer = across ? from_worker : from; /* across nodes: the global id */
    st = disco__comm_failing(ctx, st);      /* this call's, even with a bad peer */
    if (st == DISCO_OK)
        st = disco__comm_stage(ctx, t, false, "disco_ctx_recv", &x);
    if (across) { /* through the forwarders */
        st = disco__coll_net_recv(ctx, st, st == DISCO_OK ? x : NULL, from_worker, &sp->ticket);
        if (st == DISCO_OK)
            st = disco__comm_unstage(x, t);
        return st;
    }
    if (from < 0) /* no worker, or no peer: nothing to pair with */
        return st;
    /* own: this receive's own failure; it still claims its post, in its
     * place (Failures, collective.h), and returns mine. */
    disco_status_t own = st;
    char mine[DISCO_ERR_MSG_MAX]; /* read only when own failed */
    mine[0] = '\0';
    if (own != DISCO_OK)
        snprintf(mine, sizeof mine, "%s", disco_last_error());
    disco_worker_t *w = ctx->worker;
    struct disco__p2p *p = post_of(w, from);
    for (;;) {
        struct post_arg a = {p, w, from, 0, false};
        if ((st = disco_wait_until(&p->q, posted_to_me, &a, w->wait)) != DISCO_OK)
            /* nothing claimed: no byte written */
            return own != DISCO_OK ? disco_set_error(own, "%s", mine) : st;
        if (a.state == 0)
            return own != DISCO_OK
                       ? disco_set_error(own, "%s", mine)
                       : disco_set_error(DISCO_E_MISMATCH,
                                         "disco_ctx_recv: worker %d ended its command without "
                                         "sending to worker %d",
                                         from_worker, disco__worker_gid(w));
        uint64_t want = a.state;
        /* acq_rel: the claim (R1) against the sender's withdrawal. */
        if (atomic_compare_exchange_strong_explicit(&p->state, &want,
                                                    (a.state & ~3ull) | DISCO__P2P_CLAIMED,
                                                    memory_order_acq_rel, memory_order_acquire))
            break;
    }
    /* Claimed: the post's fields stay as they are until the ack. */
    uint64_t ticket = p->state >> 2;
    sp->ticket = ticket;
    st = answer(w, p, from, x, ticket, own, mine);
    if (st == DISCO_OK)
        st = disco__comm_unstage(x, t);
    return st;
}

/* The public calls: the bodies above, each stamped as a nested trace
 * record once the worker is known to be a session's. */

disco_status_t disco_ctx_send(disco_ctx_t *ctx, const DLTensor *t, int to_worker)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_send");
    if (st != DISCO_OK)
        return st;
    struct stamp sp = {-1, 0};
    uint64_t t0 = disco__comm_clock(ctx);
    st = send(ctx, t, to_worker, &sp);
    disco__comm_stamp_p2p(ctx, DISCO__TK_SEND, sp.peer, sp.ticket, t0);
    return st;
}

disco_status_t disco_ctx_recv(disco_ctx_t *ctx, DLTensor *t, int from_worker)
{
    disco_status_t st = disco__comm_worker(ctx, "disco_ctx_recv");
    if (st != DISCO_OK)
        return st;
    struct stamp sp = {-1, 0};
    uint64_t t0 = disco__comm_clock(ctx);
    st = recv(ctx, t, from_worker, &sp);
    disco__comm_stamp_p2p(ctx, DISCO__TK_RECV, sp.peer, sp.ticket, t0);
    return st;
}

/* The global id of the worker of this one's rank in the group step groups
 * away (on another node when this is its node's last or first group), or
 * -1. */
static int group_peer(disco_ctx_t *ctx, int step, const char *what, disco_status_t *st)
{
    if ((*st = disco__comm_worker(ctx, what)) != DISCO_OK)
        return -1;
    disco_worker_t *w = ctx->worker;
    int size = disco__worker_group_size(w), peer = disco__worker_gid(w) + step * size;
    if (peer < 0 || peer >= w->gworld) {
        *st = disco_set_error(DISCO_E_INVAL, "%s: worker %d is in the %s group", what,
                              disco__worker_gid(w), step > 0 ? "last" : "first");
        return -1;
    }
    return peer;
}

disco_status_t disco_ctx_send_to_next_group(disco_ctx_t *ctx, const DLTensor *t)
{
    disco_status_t st;
    int to = group_peer(ctx, 1, "disco_ctx_send_to_next_group", &st);
    return to < 0 ? disco__comm_failing(ctx, st) : disco_ctx_send(ctx, t, to); /* taken */
}

disco_status_t disco_ctx_recv_from_prev_group(disco_ctx_t *ctx, DLTensor *t)
{
    disco_status_t st;
    int from = group_peer(ctx, -1, "disco_ctx_recv_from_prev_group", &st);
    return from < 0 ? disco__comm_failing(ctx, st) : disco_ctx_recv(ctx, t, from); /* taken */
}
