/* node_impl.h - the MPI side of the node link (internal; shared by
 * node_mpi.c, node_msg.c and node_link.c; see node.h). */
#ifndef DISCO_SCHEDULER_NODE_IMPL_H
#define DISCO_SCHEDULER_NODE_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "scheduler/node/node.h"
#include "workers/core/net.h"

#define NODE_TAG_CMD  1 /* controller -> agent: a batch of command frames */
#define NODE_TAG_UP   2 /* agent -> controller: enum disco__node_up */
#define NODE_TAG_BEAT 3 /* both ways, on the heartbeat communicator: empty */
#define NODE_TAG_DATA 4 /* leaders' point-to-point collective bytes */

#define NODE_BATCH_BYTES  (64u * 1024u) /* a batch is sent once it holds this much */
#define NODE_BATCH_FRAMES 64u           /* or this many frames */
#define NODE_UP_HEAD      16u           /* kind, code, length, seq (a reply's command) */
#define NODE_HOST_MAX     64
#define NODE_MAX          64 /* nodes in a session (disco__node_join refuses more) */

/* What each process says of itself at start (gathered at rank 0). */
struct disco__node_hello {
    int32_t wpn, num_groups, transport, pid;
    uint32_t max_msg, timeout_ms;
    uint64_t heap_bytes;
    char host[NODE_HOST_MAX];
};

/* A peer: for the controller each agent, for an agent the controller. */
struct disco__node_peer {
    /* Written by the link thread, read by the session's thread: the last
     * heartbeat (monotonic ns) and the verdict that the lease ran out.
     * Relaxed: each is a single word read on its own; nothing else is
     * published through them. */
    _Atomic int64_t seen_ns;
    _Atomic int dead;
    /* The session thread's own: */
    int32_t broken;                 /* the agent's node session broke: its status */
    char why[384];                  /* and its words */
    bool bye;                       /* it said goodbye after the shutdown */
    bool replied;                   /* a reply waits in n->reply */
    struct disco__node_hello hello; /* what it said at start */
};

struct disco__node {
    int node, nodes, wpn;
    bool we_init;  /* MPI_Init was ours, and so is MPI_Finalize */
    MPI_Comm cmd;  /* frames and messages up */
    MPI_Comm beat; /* heartbeats: only the link thread uses it */
    MPI_Comm data; /* leaders' collectives: only worker 0's thread */
    MPI_Comm fwd;  /* comm.h's sends across nodes: only the forwarding thread */
    int64_t timeout_ns, lease_ns, beat_ns;
    struct disco__node_peer *peer; /* [nodes]: the controller uses 1..; an agent 0 */

    /* Controller: the batch of frames not yet sent; the link thread sends
     * a batch that has waited NODE_FLUSH_NS, both under lock. */
    pthread_mutex_t lock;
    char *batch;
    size_t blen, bcap;
    uint32_t bframes;
    int64_t bfirst_ns;

    /* Messages received. */
    char *in;
    size_t incap;
    char *reply; /* a reply frame kept for its waiter */
    uint32_t reply_len;
    /* The one reply the controller waits for: node asked (-1: none) and
     * the sequence number of the command it answers. Any other reply is
     * refused, naming its node (test_node: spoof). */
    int asked;
    uint32_t asked_seq;
    uint64_t heap_bytes; /* the session's heap: no tensor a peer sends is larger */

    /* Errors the agents reported, not yet returned. */
    int32_t err_code;
    char err[1024];
    size_t err_used;

    pthread_t link;
    bool link_started;
    _Atomic int stop; /* relaxed: the thread only polls it */

    struct disco__net net;        /* worker 0's view, for collectives */
    struct disco__fwd *fwd_state; /* the forwarding thread (node_fwd.c), or NULL */
    bool fwd_dirty;               /* it stopped with messages in flight */
};

/** Monotonic time in ns. */
int64_t disco__node_now(void);

/** Waits for request r (until deadline_ns, 0: none), watching the peers
 *  the wait depends on (peer >= 0: that one; -1: every peer), and
 *  returns DISCO_OK, DISCO_E_TIMEOUT or DISCO_E_WORKER_DIED naming what
 *  and the node. status (may be NULL) gets the request's status. */
disco_status_t disco__node_await(struct disco__node *n, MPI_Request *r, int peer,
                                 int64_t deadline_ns, const char *what, MPI_Status *status);

/** One pause between two polls of a wait that has waited waited_ns: a
 *  few pause instructions for the first 20 us, then a yield of the CPU up
 *  to 2 ms, then a nap of *nap_ns, doubled each time up to 1 ms. */
void disco__node_backoff(int64_t waited_ns, long *nap_ns);

/** A failed MPI call as a status: DISCO_E_SYS with MPI's own words. */
disco_status_t disco__node_mpi_fail(int rc, const char *what);

/** The failure for node k found dead: DISCO_E_WORKER_DIED naming its
 *  workers and host. */
disco_status_t disco__node_dead(const struct disco__node *n, int k, const char *what);

/** Sends the batch (lock held). */
disco_status_t disco__node_flush_locked(struct disco__node *n);

/** Starts and stops the heartbeat thread (node_link.c). */
disco_status_t disco__node_link_start(struct disco__node *n);
void disco__node_link_stop(struct disco__node *n);

/** Starts the forwarding thread (node_fwd.c) on n->fwd, serving the
 *  posts of w0's node (its heap and collective area, mapped in this
 *  process until disco__node_fwd_stop). Returns DISCO_OK, DISCO_E_NOMEM,
 *  DISCO_E_SYS. */
disco_status_t disco__node_fwd_start(struct disco__node *n, disco_worker_t *w0);

/** Sets n->net (node_mpi.c). */
void disco__node_net_init(struct disco__node *n);

#define NODE_FLUSH_NS    2000000LL /* a batch waits at most 2 ms for more frames */
#define NODE_EAGER_BYTES 4096u     /* Open MPI sends this much eagerly (shared memory) */

#endif
