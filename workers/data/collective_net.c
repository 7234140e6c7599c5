/* collective_net.c - world collectives of a session that spans several
 * nodes: inside each node through the shared heap as on one node, between
 * nodes among the nodes' leaders (each node's worker 0) over the node link
 * (workers/core/net.h, MPI). Only the leader touches the link; the other
 * members learn its outcome from a go barrier (coll_call.h), so every
 * member of a node takes the same path and passes the same barriers.
 *
 * Allreduce is a chain, so that its result is the very result one node of
 * all the workers would compute: node k's leader receives the fold of
 * workers 0..k*W-1 from node k-1, its members fold their own inputs onto it
 * (in worker order, each a slice), it sends the fold on to node k+1, and
 * the last node broadcasts the whole fold back. disco_reduce folds left to
 * right in the element type for f32, f64 and the integers (sum, prod, min,
 * max), so those results are bit for bit the one-node results; f16 and
 * bf16 are rounded once per node instead of once (within an ulp of them);
 * avg is refused across nodes (its wide accumulator does not chain).
 * The chain costs K-1 hops and a broadcast: cheap for the few nodes a
 * session spans, and exact.
 *
 * send_recv between nodes: the sender's leader sends its member's posted
 * input (a description, then the bytes) to the receiver's leader, which
 * shares the copy in its node by reference.
 *
 * Scatter: as broadcast, but node k's leader receives only its node's
 * block of rows (MPI_Iscatter) and its members take their rows of it.
 *
 * Allgather and gather_to_worker0: each member writes its x into its
 * leader's output at its place; the leaders exchange (or send node 0's) the
 * nodes' blocks with MPI; for allgather each member then copies a slice of
 * the whole into the others' outputs. Broadcast: node 0's leader sends the
 * tensor's description, then its bytes; each other leader shares its copy
 * in its node by reference, as worker 0 does on one node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "shm/text.h"
#include "workers/core/net.h"
#include "workers/core/worker.h"
#include "workers/data/coll_call.h"
#include "workers/data/collective_net.h"
#include "workers/data/tensor_impl.h"

#define PIECE_BYTES (256u * 1024u) /* reduce or copy a cache-sized piece at a time */
#define BCAST_PIECE (16u << 20)    /* a broadcast's bytes go in pieces of at most this */

static int node_of(const struct disco__coll_call *c)
{
    return c->w->gid_base / c->w->world;
}

static int nodes_of(const struct disco__coll_call *c)
{
    return c->w->gworld / c->w->world;
}

/* The leader's link, or a failure naming its absence (a leader always has
 * one in a multi-node session: scheduler/node/ sets it at open). */
static disco_status_t link_of(const struct disco__coll_call *c, struct disco__net **out)
{
    *out = c->w->net;
    if (*out == NULL)
        return disco_set_error(DISCO_E_PROTOCOL, "%s: node %d's leader has no link to the others",
                               c->what, node_of(c));
    return DISCO_OK;
}

bool disco__coll_net_refuse_op(struct disco__coll_call *c, disco_reduce_op_t op, bool device)
{
    if (!c->across)
        return false;
    if (device)
        disco_set_error(DISCO_E_UNSUPPORTED,
                        "%s: device tensors across nodes are not supported yet (allreduce, "
                        "allgather and gather stage them through the host); copy them to host "
                        "tensors first",
                        c->what);
    else if (op == DISCO_REDUCE_AVG)
        disco_set_error(DISCO_E_UNSUPPORTED,
                        "%s: avg across nodes is not supported; reduce with sum and divide by "
                        "the world size",
                        c->what);
    else
        return false;
    disco__coll_fail(c, DISCO_E_UNSUPPORTED, disco_last_error());
    return true;
}

/* Reduces slice [lo, hi) of this member: acc (when fold_onto) first, then
 * every member's input, into acc. */
static disco_status_t fold_slice(struct disco__coll_call *c, disco_reduce_op_t op, DLDataType dt,
                                 char *acc, char *const *ins, bool fold_onto)
{
    size_t esz = disco_dtype_bytes(dt);
    size_t count = (size_t)c->post[0].nbytes / esz;
    size_t lo = count * (size_t)c->rank / (size_t)c->size;
    size_t hi = count * (size_t)(c->rank + 1) / (size_t)c->size;
    size_t step = PIECE_BYTES / esz ? PIECE_BYTES / esz : 1;
    const void *srcs[DISCO_MAX_WORKERS + 1];
    for (size_t i = lo; i < hi; i += step) {
        size_t m = hi - i < step ? hi - i : step;
        int n = 0;
        if (fold_onto)
            srcs[n++] = acc + i * esz;
        for (int r = 0; r < c->size; r++)
            srcs[n++] = ins[r] + i * esz;
        disco_status_t st = disco_reduce(op, dt, acc + i * esz, srcs, n, m);
        if (st != DISCO_OK)
            return st;
    }
    return DISCO_OK;
}

/* Copies this member's slice of the leader's bytes [0, bytes) into every
 * other member's output (outs[1..]), element-aligned (esz). */
static void spread_slice(const struct disco__coll_call *c, const char *lead, char *const *outs,
                         size_t bytes, size_t esz)
{
    size_t lo = bytes * (size_t)c->rank / (size_t)c->size;
    size_t hi = bytes * (size_t)(c->rank + 1) / (size_t)c->size;
    lo -= lo % esz;
    hi = c->rank + 1 == c->size ? bytes : hi - hi % esz;
    for (int r = 1; r < c->size; r++)
        memcpy(outs[r] + lo, lead + lo, hi - lo);
}

disco_status_t disco__coll_net_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                         DLDataType dt, char *const *ins, char *const *outs)
{
    int k = node_of(c), nodes = nodes_of(c);
    size_t bytes = (size_t)c->post[0].nbytes;
    char *acc = outs[0]; /* the leader's output holds the fold */
    struct disco__net *net = NULL;
    disco_status_t mine = DISCO_OK;
    uint32_t choice; /* unused: the go carries only the verdict here */
    /* 1. The fold so far arrives from the node before. */
    if (c->rank == 0 && k > 0 && (mine = link_of(c, &net)) == DISCO_OK)
        mine = net->recv(net, k - 1, acc, bytes);
    disco_status_t st = disco__coll_go(c, mine, 0, &choice);
    if (st != DISCO_OK)
        return st;
    /* 2. Every member folds its slice of every member's input onto it. */
    mine = fold_slice(c, op, dt, acc, ins, k > 0);
    if ((st = disco__coll_go(c, mine, 0, &choice)) != DISCO_OK)
        return st;
    /* 3. On to the next node; the last one's fold is everyone's. */
    if (c->rank == 0 && (mine = link_of(c, &net)) == DISCO_OK && k + 1 < nodes)
        mine = net->send(net, k + 1, acc, bytes);
    if (c->rank == 0 && mine == DISCO_OK)
        mine = net->bcast(net, nodes - 1, acc, bytes);
    if ((st = disco__coll_go(c, mine, 0, &choice)) != DISCO_OK)
        return st;
    /* 4. Each member copies its slice of the fold into the others' outputs. */
    spread_slice(c, acc, outs, bytes, disco_dtype_bytes(dt));
    return disco__coll_barrier(c);
}

/* The leaders' step of a gather (all: an allgather; else to node 0) of
 * blocks of block bytes in lead; every member takes its outcome from the
 * go barrier. */
static disco_status_t blocks_step(struct disco__coll_call *c, char *lead, size_t block, bool all)
{
    struct disco__net *net = NULL;
    disco_status_t mine = DISCO_OK;
    uint32_t choice;
    if (c->rank == 0 && (mine = link_of(c, &net)) == DISCO_OK)
        mine = all ? net->allgather(net, lead, block) : net->gather(net, 0, lead, block);
    return disco__coll_go(c, mine, 0, &choice);
}

disco_status_t disco__coll_net_allgather(struct disco__coll_call *c, const void *x, size_t nb,
                                         char *const *outs)
{
    size_t block = nb * (size_t)c->size, total = block * (size_t)nodes_of(c);
    char *lead = outs[0];
    /* 1. Each member's x into the leader's output, at its global place. */
    memcpy(lead + nb * (size_t)(c->w->gid_base + c->rank), x, nb);
    disco_status_t st = disco__coll_barrier(c);
    if (st != DISCO_OK)
        return st;
    /* 2. The leaders exchange their nodes' blocks. */
    if ((st = blocks_step(c, lead, block, true)) != DISCO_OK)
        return st;
    /* 3. Each member copies its slice of the whole into the others'. */
    spread_slice(c, lead, outs, total, 1);
    return disco__coll_barrier(c);
}

disco_status_t disco__coll_net_gather(struct disco__coll_call *c, const void *x, size_t nb,
                                      char *lead)
{
    /* 1. Each member's x into its leader's output: on node 0 the result
     * (global place = local place), elsewhere the node's block. */
    memcpy(lead + nb * (size_t)c->rank, x, nb);
    disco_status_t st = disco__coll_barrier(c);
    if (st != DISCO_OK)
        return st;
    /* 2. The leaders send their blocks to node 0's. */
    return blocks_step(c, lead, nb * (size_t)c->size, false);
}

/* What node 0's leader tells the others before the bytes of a broadcast. */
struct bcast_head {
    int32_t status; /* DISCO_OK, or node 0's failure (then msg) */
    int32_t ndim;
    DLDataType dtype;
    uint32_t pad;
    uint64_t nbytes; /* the bytes that follow: every node takes them all */
    int64_t shape[DISCO_MAX_NDIM];
    char msg[160];
};

/* Moves bytes of a broadcast from node root in pieces; dst NULL: received
 * into scratch and dropped (a node that could not make the tensor still
 * takes part, or the others would wait for it). */
static disco_status_t bcast_bytes(struct disco__net *net, int root, char *dst, size_t bytes)
{
    char *scratch = NULL;
    if (dst == NULL && bytes > 0 &&
        (scratch = malloc(bytes < BCAST_PIECE ? bytes : BCAST_PIECE)) == NULL)
        return disco_set_error(DISCO_E_NOMEM, "broadcast across nodes: a scratch piece");
    disco_status_t st = DISCO_OK;
    for (size_t at = 0; at < bytes && st == DISCO_OK; at += BCAST_PIECE) {
        size_t m = bytes - at < BCAST_PIECE ? bytes - at : BCAST_PIECE;
        st = net->bcast(net, root, dst != NULL ? dst + at : scratch, m);
    }
    free(scratch);
    return st;
}

/* Records the failure a head from another node carries, as its sender
 * recorded it (its words bounded; a code that is no error of ours is a
 * protocol error). */
static void fail_as_sender(struct disco__coll_call *c, struct bcast_head *h)
{
    h->msg[sizeof h->msg - 1] = '\0';
    disco__coll_fail(
        c, disco__status_is_error(h->status) ? (disco_status_t)h->status : DISCO_E_PROTOCOL,
        h->msg);
}

/* Makes the heap tensor a head from another node describes (rows divided
 * by div: a scatter's block), its words checked as any input's. */
static disco_status_t tensor_for_head(disco_ctx_t *ctx, const struct disco__coll_call *c,
                                      const struct bcast_head *h, int div, DLTensor **out)
{
    size_t bytes = 0;
    disco_status_t st;
    if (h->ndim < 0 || h->ndim > DISCO_MAX_NDIM)
        return disco_set_error(DISCO_E_PROTOCOL, "%s across nodes: %d dimensions", c->what,
                               (int)h->ndim);
    if ((st = disco_dtype_check(h->dtype)) != DISCO_OK ||
        (st = disco_shape_nbytes(h->shape, h->ndim, h->dtype, &bytes)) != DISCO_OK)
        return st;
    if (bytes != h->nbytes)
        return disco_set_error(DISCO_E_PROTOCOL, "%s across nodes: %llu bytes sent for %zu",
                               c->what, (unsigned long long)h->nbytes, bytes);
    if (div > 1 && (h->ndim == 0 || h->shape[0] % div != 0))
        return disco_set_error(DISCO_E_PROTOCOL, "%s across nodes: %lld rows for %d nodes", c->what,
                               h->ndim ? (long long)h->shape[0] : 0LL, div);
    int64_t shape[DISCO_MAX_NDIM];
    memcpy(shape, h->shape, sizeof shape);
    if (div > 1)
        shape[0] /= div;
    return disco_ctx_empty(ctx, shape, h->ndim, h->dtype, out);
}

/* Moves a scatter's blocks from node 0 (its x: nodes blocks) to every
 * other node's leader (dst, one block; NULL: taken and dropped by the
 * link, which bounds the size node 0 announced). */
static disco_status_t scatter_bytes(struct disco__net *net, bool root, char *buf, size_t block)
{
    (void)root;
    return net->scatter(net, 0, buf, block);
}

DLTensor *disco__coll_net_share_lead(disco_ctx_t *ctx, struct disco__coll_call *c, DLTensor *x,
                                     bool scatter)
{
    struct disco__net *net = NULL;
    struct bcast_head h = {.status = DISCO_OK};
    disco_status_t st = link_of(c, &net);
    if (st != DISCO_OK) {
        disco__coll_fail(c, st, disco_last_error());
        return x; /* the others time out on this node, which reports why */
    }
    bool root = node_of(c) == 0;
    int nodes = nodes_of(c);
    if (root) {
        if (x != NULL && x->device.device_type != kDLCPU)
            disco__coll_net_refuse_op(c, DISCO_REDUCE_SUM, true);
        if (c->local != DISCO_OK || x == NULL) {
            h.status = c->local != DISCO_OK ? c->local : DISCO_E_INVAL;
            snprintf(h.msg, sizeof h.msg, "%s", c->me->msg);
        } else {
            h.ndim = x->ndim;
            h.nbytes = disco_tensor_nbytes(x);
            h.dtype = x->dtype;
            memcpy(h.shape, x->shape, (size_t)x->ndim * sizeof *h.shape);
        }
    }
    if ((st = net->bcast(net, 0, &h, sizeof h)) != DISCO_OK) {
        disco__coll_fail(c, st, disco_last_error());
        return x;
    }
    if (h.status != DISCO_OK) {
        if (!root) /* node 0's verdict, word for word, on every node */
            fail_as_sender(c, &h);
        return x;
    }
    DLTensor *t = root ? x : NULL;
    if (!root && (st = tensor_for_head(ctx, c, &h, scatter ? nodes : 1, &t)) != DISCO_OK) {
        disco__coll_fail(c, st, disco_last_error());
        t = NULL;
    }
    st = scatter ? scatter_bytes(net, root, t != NULL ? t->data : NULL,
                                 (size_t)h.nbytes / (size_t)nodes)
                 : bcast_bytes(net, 0, t != NULL ? t->data : NULL, (size_t)h.nbytes);
    if (st != DISCO_OK)
        disco__coll_fail(c, st, disco_last_error());
    if (!root && t != NULL)
        disco__coll_post_tensor(c, t, false);
    return t;
}

DLTensor *disco__coll_net_recv_lead(disco_ctx_t *ctx, struct disco__coll_call *c, int from)
{
    struct disco__net *net = NULL;
    struct bcast_head h = {.status = DISCO_OK};
    DLTensor *t = NULL;
    disco_status_t st = link_of(c, &net);
    if (st == DISCO_OK)
        st = net->recv(net, from, &h, sizeof h);
    if (st == DISCO_OK && h.status != DISCO_OK) { /* the sender's verdict, word for word */
        fail_as_sender(c, &h);
        return NULL;
    }
    if (st == DISCO_OK && (st = tensor_for_head(ctx, c, &h, 1, &t)) != DISCO_OK) {
        /* The bytes come anyway: taken and dropped by the link (in bounded
         * memory; a size larger than any tensor of the session is refused
         * there), so the sender is not left waiting. */
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        net->recv(net, from, NULL, (size_t)h.nbytes);
        disco_set_error(st, "%s", why);
    } else if (st == DISCO_OK) {
        st = net->recv(net, from, t->data, (size_t)h.nbytes);
    }
    if (st != DISCO_OK) {
        disco__coll_fail(c, st, disco_last_error());
        return NULL;
    }
    disco__coll_post_tensor(c, t, false);
    return t;
}

disco_status_t disco__coll_net_send_lead(struct disco__coll_call *c, int to, disco_status_t verdict,
                                         int r)
{
    struct disco__net *net = NULL;
    struct bcast_head h = {.status = verdict};
    char *p = NULL;
    const struct disco__coll_posted *l = &c->post[r];
    if (verdict == DISCO_OK && l->dev_type != 0)
        verdict = disco_set_error(DISCO_E_UNSUPPORTED,
                                  "%s: device tensors across nodes are not supported yet", c->what);
    if (verdict == DISCO_OK)
        verdict = disco__coll_span_check(c, r, false, 0, l->nbytes, &p);
    if (verdict == DISCO_OK) {
        h.ndim = l->ndim;
        h.dtype = l->dtype;
        h.nbytes = l->nbytes;
        memcpy(h.shape, l->shape, sizeof h.shape);
    } else {
        h.status = verdict;
        snprintf(h.msg, sizeof h.msg, "%s", disco_last_error());
    }
    disco_status_t st = link_of(c, &net);
    if (st == DISCO_OK)
        st = net->send(net, to, &h, sizeof h);
    if (st == DISCO_OK && h.status == DISCO_OK)
        st = net->send(net, to, p, (size_t)h.nbytes);
    return h.status != DISCO_OK ? (disco_status_t)h.status : st;
}

/* ---- comm.h's broadcast from any root across nodes ---- */

/* What each node's leader tells the others of its node before the bytes
 * of an in-worker broadcast: its members' verdict so far, or their root,
 * dtype and shape (which its meeting found the same on every member). */
struct root_desc {
    int32_t status; /* DISCO_OK, or the node's failure (then msg) */
    int32_t root, ndim;
    DLDataType dtype;
    int64_t shape[DISCO_MAX_NDIM];
    char msg[160];
};

/* Whether two nodes' descriptions agree on root, dtype and shape. */
static bool same_desc(const struct root_desc *a, const struct root_desc *b)
{
    bool same = a->root == b->root && a->ndim == b->ndim && a->dtype.code == b->dtype.code &&
                a->dtype.bits == b->dtype.bits && a->dtype.lanes == b->dtype.lanes;
    for (int d = 0; same && d < a->ndim && d < DISCO_MAX_NDIM; d++)
        same = a->shape[d] == b->shape[d];
    return same;
}

/* The leaders' verdict, from every node's description (all): the first
 * failing node's failure, else DISCO_E_MISMATCH naming the first node
 * that differs from node 0, else DISCO_OK. Made of all only, so every
 * leader reaches the same, word for word. */
static disco_status_t root_verdict(const struct disco__coll_call *c, struct root_desc *all,
                                   int nodes)
{
    for (int j = 0; j < nodes; j++)
        if (all[j].status != DISCO_OK) {
            char msg[sizeof all[j].msg];
            disco__text_safe(msg, sizeof msg, all[j].msg, sizeof all[j].msg);
            return disco_set_error(disco__status_is_error(all[j].status)
                                       ? (disco_status_t)all[j].status
                                       : DISCO_E_PROTOCOL,
                                   "%s across nodes: node %d: %s", c->what, j, msg);
        }
    for (int j = 1; j < nodes; j++)
        if (!same_desc(&all[j], &all[0])) {
            char a[32], b[32];
            return disco_set_error(
                DISCO_E_MISMATCH,
                "%s across nodes: node %d's workers gave root %d and %s "
                "tensors of %d dims (dimension 0: %lld); node 0's root %d and "
                "%s of %d dims (dimension 0: %lld)",
                c->what, j, (int)all[j].root, disco_dtype_str(all[j].dtype, a, sizeof a),
                (int)all[j].ndim, all[j].ndim > 0 ? (long long)all[j].shape[0] : 0LL,
                (int)all[0].root, disco_dtype_str(all[0].dtype, b, sizeof b), (int)all[0].ndim,
                all[0].ndim > 0 ? (long long)all[0].shape[0] : 0LL);
        }
    if (all[0].root < 0 || all[0].root >= c->w->gworld) /* each node checked it: a protocol slip */
        return disco_set_error(DISCO_E_PROTOCOL, "%s across nodes: root %d", c->what,
                               (int)all[0].root);
    return DISCO_OK;
}

/* The leader's step: the descriptions exchanged, the verdict taken, and
 * on success root's bytes broadcast from its node's leader (src: root's
 * posted bytes there, its own buf elsewhere). Returns the leader's
 * outcome for the go barrier. */
static disco_status_t root_lead(struct disco__coll_call *c, disco_status_t st, int root,
                                DLTensor *buf)
{
    int k = node_of(c), nodes = nodes_of(c), size = c->w->world;
    size_t nbytes = buf != NULL ? disco_tensor_nbytes(buf) : 0;
    char *src = NULL;
    struct disco__net *net = NULL;
    disco_status_t lst = link_of(c, &net);
    if (lst != DISCO_OK)
        return lst;
    /* Root's bytes are checked before the exchange, so that a failure
     * there is every node's verdict, not a broadcast of nothing. */
    if (st == DISCO_OK && root / size == k)
        st = disco__coll_span_check(c, root % size, false, 0, nbytes, &src);
    else if (st == DISCO_OK)
        src = buf->data;
    struct root_desc *all = calloc((size_t)nodes, sizeof *all);
    if (all == NULL)
        return disco_set_error(DISCO_E_NOMEM, "%s across nodes: descriptions", c->what);
    struct root_desc *me = &all[k];
    me->status = st;
    if (st != DISCO_OK) {
        snprintf(me->msg, sizeof me->msg, "%s", disco_last_error());
    } else {
        me->root = root;
        me->ndim = buf->ndim;
        me->dtype = buf->dtype;
        memcpy(me->shape, buf->shape, (size_t)buf->ndim * sizeof *buf->shape);
    }
    lst = net->allgather(net, all, sizeof *all);
    if (lst == DISCO_OK)
        lst = root_verdict(c, all, nodes);
    free(all);
    if (lst == DISCO_OK) /* every node's leader is here, with the same root */
        lst = bcast_bytes(net, root / size, src, nbytes);
    return lst;
}

disco_status_t disco__coll_net_broadcast(struct disco__coll_call *c, disco_status_t st, int root,
                                         DLTensor *buf)
{
    uint32_t choice;
    disco_status_t mine = c->rank == 0 ? root_lead(c, st, root, buf) : DISCO_OK;
    disco_status_t verdict = disco__coll_go(c, mine, 0, &choice);
    if (verdict != DISCO_OK)
        return verdict; /* the same on every member of every node (or the link's failure) */
    /* Each member copies from its node's source: root itself on root's
     * node, else the leader's buf, which the link filled. */
    int size = c->w->world, src = root / size == node_of(c) ? root % size : 0;
    char *p;
    if (c->rank != src &&
        (st = disco__coll_span_check(c, src, false, 0, disco_tensor_nbytes(buf), &p)) == DISCO_OK)
        memcpy(buf->data, p, disco_tensor_nbytes(buf));
    return disco__coll_end(c, st);
}
