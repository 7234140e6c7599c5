/* node_link.c - the node link's heartbeat thread (node.h).
 *
 * Open MPI cannot tell a process that a peer died (without its fault
 * tolerance extensions), and a node that dies may leave its peers waiting
 * on requests that never complete. So every process of a session sends an
 * empty message to its peers (controller to every agent, each agent to
 * the controller) every lease/6, on a communicator of their own, and
 * counts a peer that stays silent for a whole lease (DISCO_NODE_LEASE_MS,
 * default 3 s, at most half the call deadline) as dead: the waits of the
 * session's thread watch that verdict (disco__node_await), so a dead node
 * ends every wait on it within the call deadline. The beat is the
 * process's, not its progress: a node busy in a long function still beats;
 * the call deadline covers a stuck one.
 *
 * The thread also sends the controller's batch of command frames once it
 * has waited NODE_FLUSH_NS, so that calls issued just before the
 * controller turns to something else reach the nodes anyway (a batch of
 * at most NODE_EAGER_BYTES; a larger one goes at the session's next
 * flush: its send could wait for the agent, and this thread must beat).
 *
 * An agent whose controller is found dead is ended by its own thread
 * when the agent's main loop has not ended it within another lease (it
 * may be stuck in a wait of its node): its workers follow it through
 * their parent-death signal.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "scheduler/node/node_impl.h"

#define TICK_NS       5000000L  /* 5 ms: the flush's and the checks' resolution */
#define AGENT_TICK_NS 20000000L /* 20 ms on an agent: beats and the lease only */

static void beat(struct disco__node *n)
{
    for (int k = 0; k < n->nodes; k++) {
        if (k == n->node || (n->node != 0 && k != 0))
            continue;
        MPI_Request r;
        /* Empty and eager: completes at once; nobody waits for it. */
        if (MPI_Isend(NULL, 0, MPI_BYTE, k, NODE_TAG_BEAT, n->beat, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

static void listen(struct disco__node *n, int64_t now)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, NODE_TAG_BEAT, n->beat, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        MPI_Recv(NULL, 0, MPI_BYTE, st.MPI_SOURCE, NODE_TAG_BEAT, n->beat, MPI_STATUS_IGNORE);
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < n->nodes)
            atomic_store_explicit(&n->peer[st.MPI_SOURCE].seen_ns, now, memory_order_relaxed);
    }
}

static void *link_main(void *arg)
{
    struct disco__node *n = arg;
    int64_t last_beat = 0, controller_dead_at = 0;
    while (!atomic_load_explicit(&n->stop, memory_order_relaxed)) {
        int64_t now = disco__node_now();
        if (now - last_beat >= n->beat_ns) {
            beat(n);
            last_beat = now;
        }
        listen(n, now);
        for (int k = 0; k < n->nodes; k++) {
            if (k == n->node || (n->node != 0 && k != 0))
                continue;
            struct disco__node_peer *p = &n->peer[k];
            if (now - atomic_load_explicit(&p->seen_ns, memory_order_relaxed) > n->lease_ns)
                atomic_store_explicit(&p->dead, 1, memory_order_relaxed);
        }
        /* Only a batch small enough to go eagerly (it completes without
         * the agent's help), and only when the session's thread is not at
         * the batch itself: this thread must never stop beating. */
        if (n->node == 0 && pthread_mutex_trylock(&n->lock) == 0) {
            if (n->blen != 0 && n->blen <= NODE_EAGER_BYTES && now - n->bfirst_ns >= NODE_FLUSH_NS)
                disco__node_flush_locked(n); /* a failure shows at the session's next wait */
            pthread_mutex_unlock(&n->lock);
        } else if (atomic_load_explicit(&n->peer[0].dead, memory_order_relaxed)) {
            if (controller_dead_at == 0)
                controller_dead_at = now;
            else if (now - controller_dead_at > n->lease_ns) {
                fprintf(stderr,
                        "disco node %d: the controller is gone and this node did not "
                        "stop; ending it\n",
                        n->node);
                _exit(1);
            }
        }
        /* The controller ticks often enough to send a waiting batch on
         * time; an agent only beats and listens. */
        struct timespec ts = {0, n->node == 0 ? TICK_NS : AGENT_TICK_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

disco_status_t disco__node_link_start(struct disco__node *n)
{
    int rc = pthread_create(&n->link, NULL, link_main, n);
    if (rc != 0)
        return disco_set_error(DISCO_E_SYS, "node link: heartbeat thread: error %d", rc);
    n->link_started = true;
    return DISCO_OK;
}

void disco__node_link_stop(struct disco__node *n)
{
    if (!n->link_started)
        return;
    atomic_store_explicit(&n->stop, 1, memory_order_relaxed);
    pthread_join(n->link, NULL);
    n->link_started = false;
}
