/*
 * net.h - what a collective needs from the other nodes of a session that
 * spans several (internal). The scheduler's node layer (scheduler/node/)
 * fills it in with MPI among the nodes' leaders (each node's worker 0,
 * which runs in that node's MPI process); the collectives of
 * workers/data/collective_net.c call it from the leader only. Every call
 * ends at the call deadline, or when a node is found dead, with an error
 * naming the node: never a hang. Before it waits, the controller's link
 * sends the commands it batched, so a collective never waits for nodes
 * that have not been told of it.
 *
 * Thread safety: called by the node's worker 0 thread only.
 */
#ifndef DISCO_WORKERS_NET_H
#define DISCO_WORKERS_NET_H

#include <stddef.h>

#include "disco/status.h"

struct disco__net {
    int node, nodes; /* this node, and how many */
    /** Receives exactly bytes from node from (a peer's send of as many);
     *  buf NULL: takes them and drops them, in bounded memory, refusing
     *  (DISCO_E_PROTOCOL) more than a tensor of the session can hold. */
    disco_status_t (*recv)(struct disco__net *n, int from, void *buf, size_t bytes);
    /** Sends bytes to node to. */
    disco_status_t (*send)(struct disco__net *n, int to, const void *buf, size_t bytes);
    /** Every node's buf becomes node root's (bytes the same on all). */
    disco_status_t (*bcast)(struct disco__net *n, int root, void *buf, size_t bytes);
    /** buf holds nodes blocks of block bytes; node k's own block k goes
     *  into block k of every node's buf. */
    disco_status_t (*allgather)(struct disco__net *n, void *buf, size_t block);
    /** Node root's buf (nodes blocks) gets every node's block k at k; the
     *  others send their buf (one block). */
    disco_status_t (*gather)(struct disco__net *n, int root, void *buf, size_t block);
    /** Node root's buf (nodes blocks): block k goes to node k's buf (one
     *  block; root keeps its own in place). A non-root buf NULL: the block
     *  is taken and dropped (bounded as recv's). */
    disco_status_t (*scatter)(struct disco__net *n, int root, void *buf, size_t block);
    void *impl;
};

#endif
