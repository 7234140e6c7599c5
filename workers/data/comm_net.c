/* comm_net.c - disco_ctx_send and disco_ctx_recv (<disco/comm.h>) between
 * workers on two nodes (comm_net.h).
 *
 * Design. Only the two workers take part in a send, but the MPI link
 * between nodes lives in each node's leader (its worker 0, in the node's
 * MPI process); the other workers are forked processes without MPI.
 *
 * Between two leaders the link is used directly, from the worker
 * function's own thread, as the collectives use it (workers/core/net.h;
 * MPI_THREAD_MULTIPLE is already required for the heartbeat thread), on
 * tags of their own (channel 0: description, then bytes; channel 1: the
 * acknowledgement), so neither a collective's messages nor a late
 * acknowledgement are ever taken for a description:
 *   N1 the sender stages a device tensor through the heap, sends the
 *      description (dtype, shape, device type, command, ids; or its own
 *      failure, so the receiver fails with its words, not its deadline),
 *      then the bytes;
 *   N2 the receiver checks the description against its tensor and takes
 *      the bytes into it (or into the heap, then onto its device), or,
 *      when they differ, takes and drops them (bounded by the heap's size,
 *      net.h) and fails with DISCO_E_MISMATCH;
 *   N3 the receiver acknowledges with its verdict and the command, after
 *      its copy; the sender returns only then (its tensor may be reused),
 *      with that verdict: a mismatch fails both ends alike.
 * Every step waits under the call deadline and the peers' liveness
 * (node_wait.c). A peer that never posts fails the other end with
 * DISCO_E_TIMEOUT naming the peer and its node, within the deadline (on
 * one node a peer that ended its command is seen at once; across nodes
 * there is no such mark to read). A bytes send that timed out leaves an
 * MPI request that may still read the tensor: the failure breaks the
 * session, as a collective's does. Test: test_ctx_more_across_nodes
 * (tests/test_node.c).
 *
 * Other workers are refused with DISCO_E_UNSUPPORTED at once, on both ends
 * (each end sees the other's id, so neither waits). Their bytes would
 * have to be forwarded by the leaders, which are busy in their own worker
 * function when the send happens, so the leader's own thread cannot serve
 * them (it may itself wait on a forwarded send: a deadlock). A forwarding
 * thread in each leader's process (started with the node link; MPI allows
 * it; the heap is mapped there) could serve them on the existing post
 * protocol (collective.h, S1-S2 and R1-R2): on the sending node it plays
 * the receiver (claims a post addressed to a remote worker, R1), on the
 * receiving node the sender, for a receive request the receiving worker
 * puts in its own post (idle while it receives). What that needs, and why
 * it is not built here:
 *   - the post protocol in collective.h and comm_p2p.c extended (a remote
 *     address, a receive-request state), which other work edits now;
 *   - a nonblocking table of requests in the thread: served one at a time,
 *     two workers sending to each other across the same two nodes would
 *     deadlock the two threads;
 *   - a send's bytes copied before the sender is released after a
 *     timeout (a send MPI may still read cannot be cancelled reliably),
 *     and a receive into a worker's tensor cancelled (MPI_Cancel, then
 *     waited) before that worker's withdrawal completes;
 *   - tags per pair of workers, the thread stopped before MPI_Finalize,
 *     and a node's death while the thread holds requests (the heartbeat
 *     thread watches only the controller from an agent).
 * See docs/worker-comm.md (Across nodes).
 */
#include <stdio.h>
#include <string.h>

#include "disco/dtype.h"
#include "shm/text.h"
#include "workers/core/ctx.h"
#include "workers/core/net.h"
#include "workers/core/worker.h"
#include "workers/data/comm_net.h"
#include "workers/data/tensor_impl.h"

/* What the sending leader sends first (then, on success, the bytes), and
 * what the receiving leader answers once it has copied them (or not). */
struct p2p_head {
    struct {
        int32_t status; /* DISCO_OK, or the sender's failure (then msg) */
        int32_t ndim;
        DLDataType dtype;
        uint32_t pad; /* the sender's device type (0: host memory) */
        uint64_t nbytes;
        int64_t shape[DISCO_MAX_NDIM];
        char msg[160];
    } h;
    uint64_t seq;     /* the command both run */
    int32_t from, to; /* global worker ids */
};
struct p2p_ack {
    int32_t status;
    uint32_t pad;
    uint64_t seq;
    char msg[160];
};

/* The link's failure in words that name the send or receive and its
 * peer. */
static disco_status_t p2p_fail(disco_status_t st, const char *what, int peer, int node)
{
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    return disco_set_error(st, "%s: worker %d (the leader of node %d): %s", what, peer, node, why);
}

disco_status_t disco__coll_net_send(disco_ctx_t *ctx, disco_status_t pre, const DLTensor *x, int to)
{
    disco_worker_t *w = ctx->worker;
    struct disco__net *net = w->net;
    int node = to / w->world;
    if (net == NULL)
        return disco_set_error(DISCO_E_PROTOCOL, "disco_ctx_send: node %d's leader has no link",
                               w->gid_base / w->world);
    struct p2p_head ph = {.h.status = pre, .seq = w->seq, .from = disco__worker_gid(w), .to = to};
    const DLTensor *h = x;
    if (pre == DISCO_OK && disco__tensor_is_device(x)) { /* through the heap, as allreduce's */
        DLTensor *hx;
        if ((ph.h.status = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &hx)) == DISCO_OK &&
            (ph.h.status = disco__tensor_copy_out(x, hx)) == DISCO_OK)
            h = hx;
    }
    if (ph.h.status == DISCO_OK) {
        ph.h.ndim = h->ndim;
        ph.h.dtype = h->dtype;
        ph.h.pad = disco__tensor_is_device(x) ? (uint32_t)x->device.device_type : 0;
        ph.h.nbytes = disco_tensor_nbytes(h);
        memcpy(ph.h.shape, h->shape, (size_t)h->ndim * sizeof *h->shape);
    } else { /* the receiver fails with these words, not at its deadline */
        snprintf(ph.h.msg, sizeof ph.h.msg, "%s", disco_last_error());
    }
    disco_status_t st = net->p2p_send(net, node, 0, &ph, sizeof ph);
    if (st == DISCO_OK && ph.h.status == DISCO_OK)
        st = net->p2p_send(net, node, 0, (const char *)h->data + h->byte_offset,
                           (size_t)ph.h.nbytes);
    if (st != DISCO_OK)
        return p2p_fail(st, "disco_ctx_send to", to, node);
    if (ph.h.status != DISCO_OK)
        return disco_set_error(ph.h.status, "%s", ph.h.msg);
    struct p2p_ack ack;
    if ((st = net->p2p_recv(net, node, 1, &ack, sizeof ack)) != DISCO_OK)
        return p2p_fail(st, "disco_ctx_send: no acknowledgement from", to, node);
    if (ack.seq != w->seq)
        return disco_set_error(DISCO_E_PROTOCOL,
                               "disco_ctx_send: worker %d acknowledged a send of command %llu in "
                               "command %llu",
                               to, (unsigned long long)ack.seq, (unsigned long long)w->seq);
    if (ack.status != DISCO_OK) {
        char msg[sizeof ack.msg];
        disco__text_safe(msg, sizeof msg, ack.msg, sizeof ack.msg);
        return disco_set_error(
            disco__status_is_error(ack.status) ? (disco_status_t)ack.status : DISCO_E_PROTOCOL,
            "disco_ctx_send: worker %d refused the tensor of worker %d: %s", to, ph.from, msg);
    }
    return DISCO_OK;
}

/* R2 across nodes: whether the head describes what x can take (its own
 * words when not, as comm_p2p.c's take()). */
static disco_status_t p2p_same(disco_worker_t *w, const struct p2p_head *ph, const DLTensor *x)
{
    uint32_t mine = disco__tensor_is_device(x) ? (uint32_t)x->device.device_type : 0;
    bool same = ph->h.ndim == x->ndim && ph->h.dtype.code == x->dtype.code &&
                ph->h.dtype.bits == x->dtype.bits && ph->h.dtype.lanes == x->dtype.lanes &&
                ph->h.pad == mine;
    for (int d = 0; same && d < x->ndim; d++)
        same = ph->h.shape[d] == x->shape[d];
    if (same && ph->h.nbytes != disco_tensor_nbytes(x))
        return disco_set_error(DISCO_E_PROTOCOL, "disco_ctx_recv: worker %d announced %llu bytes",
                               (int)ph->from, (unsigned long long)ph->h.nbytes);
    if (same)
        return DISCO_OK;
    char a[32], b[32];
    return disco_set_error(DISCO_E_MISMATCH,
                           "disco_ctx_recv: worker %d sends %s of %d dims (device type %u), "
                           "worker %d receives %s of %d dims (device type %u)",
                           (int)ph->from, disco_dtype_str(ph->h.dtype, a, sizeof a),
                           (int)ph->h.ndim, ph->h.pad, disco__worker_gid(w),
                           disco_dtype_str(x->dtype, b, sizeof b), x->ndim, mine);
}

disco_status_t disco__coll_net_recv(disco_ctx_t *ctx, disco_status_t pre, DLTensor *x, int from)
{
    disco_worker_t *w = ctx->worker;
    struct disco__net *net = w->net;
    int node = from / w->world;
    if (net == NULL)
        return disco_set_error(DISCO_E_PROTOCOL, "disco_ctx_recv: node %d's leader has no link",
                               w->gid_base / w->world);
    struct p2p_head ph;
    disco_status_t st = net->p2p_recv(net, node, 0, &ph, sizeof ph);
    if (st != DISCO_OK)
        return p2p_fail(st, "disco_ctx_recv from", from, node);
    ph.h.msg[sizeof ph.h.msg - 1] = '\0';
    if (ph.h.status != DISCO_OK) { /* the sender's failure, word for word */
        char msg[sizeof ph.h.msg];
        disco__text_safe(msg, sizeof msg, ph.h.msg, sizeof ph.h.msg);
        return disco_set_error(disco__status_is_error(ph.h.status) ? (disco_status_t)ph.h.status
                                                                   : DISCO_E_PROTOCOL,
                               "disco_ctx_recv: worker %d: %s", from, msg);
    }
    /* This receiver's own verdict: its argument, the peer's words, then
     * the description against its tensor. */
    st = pre;
    if (st == DISCO_OK && (ph.seq != w->seq || ph.from != from || ph.to != disco__worker_gid(w)))
        st = disco_set_error(DISCO_E_PROTOCOL,
                             "disco_ctx_recv: node %d's leader sent worker %d's send to worker "
                             "%d of command %llu, in command %llu of worker %d from worker %d",
                             node, (int)ph.from, (int)ph.to, (unsigned long long)ph.seq,
                             (unsigned long long)w->seq, disco__worker_gid(w), from);
    if (st == DISCO_OK)
        st = p2p_same(w, &ph, x);
    DLTensor *h = x;
    if (st == DISCO_OK && disco__tensor_is_device(x)) /* through the heap, then copied up */
        st = disco_ctx_empty(ctx, x->shape, x->ndim, x->dtype, &h);
    disco_status_t lst;
    if (st == DISCO_OK) {
        lst = net->p2p_recv(net, node, 0, (char *)h->data + h->byte_offset, (size_t)ph.h.nbytes);
        if (lst == DISCO_OK && h != x)
            st = disco__tensor_copy_in(x, h);
    } else { /* the bytes come anyway: taken and dropped, bounded by the link */
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        lst = net->p2p_recv(net, node, 0, NULL, (size_t)ph.h.nbytes);
        disco_set_error(st, "%s", why);
    }
    if (lst != DISCO_OK)
        return p2p_fail(lst, "disco_ctx_recv from", from, node);
    /* The answer the sender waits for: after the copy (S2's order). */
    struct p2p_ack ack = {.status = st, .seq = ph.seq};
    if (st != DISCO_OK)
        snprintf(ack.msg, sizeof ack.msg, "%s", disco_last_error());
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    if ((lst = net->p2p_send(net, node, 1, &ack, sizeof ack)) != DISCO_OK)
        return p2p_fail(lst, "disco_ctx_recv: acknowledging to", from, node);
    return st == DISCO_OK ? DISCO_OK : disco_set_error(st, "%s", why);
}
