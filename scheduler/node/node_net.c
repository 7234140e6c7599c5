/* node_net.c - the leaders' link for collectives across nodes
 * (workers/core/net.h): point-to-point and broadcast over the data
 * communicator, in pieces MPI's int counts can say, each waited for under
 * the call deadline (node_wait.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/node/node_impl.h"

/* Bytes go in pieces of at most this: also the most a receive that drops
 * what it takes (buf NULL) holds at once. */
#define PIECE_MAX (16u << 20)

static struct disco__node *of(struct disco__net *net)
{
    return net->impl;
}

/* A collective waits at most the call deadline from its start. The
 * controller first sends the frames it batched: the others may not know
 * of this collective yet. */
static int64_t coll_deadline(struct disco__node *n)
{
    if (n->node == 0)
        disco__node_flush(n);
    return disco__node_now() + n->timeout_ns;
}

/* A receive into nothing (buf NULL: a node that could not make the tensor
 * still takes the bytes, or the sender would wait) takes them through one
 * scratch piece. bytes came from the peer's word: no tensor of the session
 * is larger than its heap (the same size on every node), so a larger
 * count is refused, naming the node, before anything is allocated. Sets
 * *scratch (free it) when buf is NULL. */
static disco_status_t drain_scratch(struct disco__node *n, int peer, void *buf, size_t bytes,
                                    size_t piece, const char *what, void **scratch)
{
    *scratch = NULL;
    if (buf != NULL || bytes == 0)
        return DISCO_OK;
    if (bytes > n->heap_bytes)
        return disco_set_error(DISCO_E_PROTOCOL,
                               "%s: node %d announced %zu bytes; no tensor of this session holds "
                               "more than its heap's %llu",
                               what, peer, bytes, (unsigned long long)n->heap_bytes);
    if ((*scratch = malloc(bytes < piece ? bytes : piece)) == NULL)
        return disco_set_error(DISCO_E_NOMEM, "%s: a scratch piece", what);
    return DISCO_OK;
}

static disco_status_t net_p2p(struct disco__net *net, int peer, void *buf, size_t bytes, bool send,
                              int tag)
{
    struct disco__node *n = of(net);
    int64_t deadline = coll_deadline(n);
    void *scratch = NULL;
    disco_status_t st =
        send ? DISCO_OK
             : drain_scratch(n, peer, buf, bytes, PIECE_MAX, "collective: receive", &scratch);
    for (size_t at = 0; at < bytes && st == DISCO_OK; at += PIECE_MAX) {
        size_t m = bytes - at < PIECE_MAX ? bytes - at : PIECE_MAX;
        char *p = buf != NULL ? (char *)buf + at : scratch;
        MPI_Request r;
        int rc = send ? MPI_Isend(p, (int)m, MPI_BYTE, peer, tag, n->data, &r)
                      : MPI_Irecv(p, (int)m, MPI_BYTE, peer, tag, n->data, &r);
        if (rc != MPI_SUCCESS) {
            st = disco__node_mpi_fail(rc, send ? "collective: send" : "collective: receive");
            break;
        }
        char what[96];
        snprintf(what, sizeof what, "collective: %s node %d",
                 send ? "sending to" : "receiving from", peer);
        st = disco__node_await(n, &r, -1, deadline, what, NULL);
    }
    free(scratch);
    return st;
}

static disco_status_t net_recv(struct disco__net *net, int from, void *buf, size_t bytes)
{
    return net_p2p(net, from, buf, bytes, false, NODE_TAG_DATA);
}

static disco_status_t net_send(struct disco__net *net, int to, const void *buf, size_t bytes)
{
    return net_p2p(net, to, (void *)buf, bytes, true, NODE_TAG_DATA);
}

static disco_status_t net_bcast(struct disco__net *net, int root, void *buf, size_t bytes)
{
    struct disco__node *n = of(net);
    int64_t deadline = coll_deadline(n);
    for (size_t at = 0; at < bytes; at += PIECE_MAX) {
        size_t m = bytes - at < PIECE_MAX ? bytes - at : PIECE_MAX;
        MPI_Request r;
        int rc = MPI_Ibcast((char *)buf + at, (int)m, MPI_BYTE, root, n->data, &r);
        if (rc != MPI_SUCCESS)
            return disco__node_mpi_fail(rc, "collective: broadcast");
        char what[64];
        snprintf(what, sizeof what, "collective: broadcast from node %d", root);
        disco_status_t st = disco__node_await(n, &r, -1, deadline, what, NULL);
        if (st != DISCO_OK)
            return st;
    }
    return DISCO_OK;
}

/* Blocks of a gather go in one MPI call: its counts are ints. */
static disco_status_t block_fits(size_t block, const char *what)
{
    if (block > INT_MAX)
        return disco_set_error(DISCO_E_UNSUPPORTED,
                               "%s across nodes: a node's block of %zu bytes; at most %d", what,
                               block, INT_MAX);
    return DISCO_OK;
}

/* A collective's request, started (rc: its start's return), waited for
 * under the deadline. */
static disco_status_t finish(struct disco__node *n, int rc, MPI_Request *r, int64_t deadline,
                             const char *what)
{
    if (rc != MPI_SUCCESS)
        return disco__node_mpi_fail(rc, what);
    return disco__node_await(n, r, -1, deadline, what, NULL);
}

static disco_status_t net_allgather(struct disco__net *net, void *buf, size_t block)
{
    struct disco__node *n = of(net);
    int64_t deadline = coll_deadline(n);
    disco_status_t st = block_fits(block, "allgather");
    MPI_Request r;
    return st != DISCO_OK ? st
                          : finish(n,
                                   MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                                                  (int)block, MPI_BYTE, n->data, &r),
                                   &r, deadline, "collective: allgather");
}

static disco_status_t net_gather(struct disco__net *net, int root, void *buf, size_t block)
{
    struct disco__node *n = of(net);
    int64_t deadline = coll_deadline(n);
    disco_status_t st = block_fits(block, "gather");
    if (st != DISCO_OK)
        return st;
    MPI_Request r;
    int rc = n->node == root
                 ? MPI_Igather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)block, MPI_BYTE, root,
                               n->data, &r)
                 : MPI_Igather(buf, (int)block, MPI_BYTE, NULL, 0, MPI_BYTE, root, n->data, &r);
    return finish(n, rc, &r, deadline, "collective: gather");
}

static disco_status_t net_scatter(struct disco__net *net, int root, void *buf, size_t block)
{
    struct disco__node *n = of(net);
    int64_t deadline = coll_deadline(n);
    disco_status_t st = block_fits(block, "scatter");
    if (st != DISCO_OK)
        return st;
    void *scratch = NULL; /* a block dropped (buf NULL) must still be taken */
    if (n->node != root && (st = drain_scratch(n, root, buf, block, block, "scatter across nodes",
                                               &scratch)) != DISCO_OK)
        return st;
    MPI_Request r;
    int rc = n->node == root ? MPI_Iscatter(buf, (int)block, MPI_BYTE, MPI_IN_PLACE, 0,
                                            MPI_DATATYPE_NULL, root, n->data, &r)
                             : MPI_Iscatter(NULL, 0, MPI_BYTE, buf != NULL ? buf : scratch,
                                            (int)block, MPI_BYTE, root, n->data, &r);
    st = finish(n, rc, &r, deadline, "collective: scatter");
    free(scratch);
    return st;
}

void disco__node_net_init(struct disco__node *n)
{
    n->net = (struct disco__net){.node = n->node,
                                 .nodes = n->nodes,
                                 .recv = net_recv,
                                 .send = net_send,
                                 .bcast = net_bcast,
                                 .allgather = net_allgather,
                                 .gather = net_gather,
                                 .scatter = net_scatter,
                                 .impl = n};
}
