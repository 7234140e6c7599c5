/*
 * node_agent.c - a node's agent: the process that stands for one node of a
 * session across nodes (node.h).
 *
 * The design, end to end:
 *
 *   mpirun -np K prog           one process a node; each calls
 *                               disco_session_open(cfg.nodes = MPI)
 *   rank 0 = node 0             the controller: its session is the user's
 *   rank k = node k (k >= 1)    the node's agent: it never returns to prog
 *
 * Every process is a controller of its own node's session as on one
 * machine: it forks the node's workers 1..W-1 (before MPI starts, so no
 * worker inherits MPI's state), holds its node's rings and shared heap, and
 * runs its node's worker 0 in its own thread. Worker ids are global and
 * node-major: node k's local worker i is worker k*W + i everywhere a user
 * sees one (disco_ctx_worker_id, sync, debug get/set, error messages).
 *
 * Commands. The controller encodes each command once, as on one node, and
 * broadcasts the very frame into its node's ring; the same frame is posted
 * to the link (node_msg.c), which batches frames (up to 64 of them or
 * 64 KiB, or 2 ms) and sends each batch to every agent with MPI. The agent
 * (this loop) takes a batch, and for each frame does what the controller
 * does for its own node: broadcasts it unchanged into its ring and runs it
 * on its worker 0 (disco__session_relay). Register ids come from the
 * controller and mean the same on every worker of every node. So a stream
 * of asynchronous calls costs one MPI message per batch, not per call; a
 * command that waits (sync, debug get/set) sends the batch at once.
 *
 * Replies. A sync or debug command names one global worker; only the node
 * that holds it answers: the agent forwards its worker's reply frame to
 * the controller as the worker wrote it, with the command's sequence
 * number, and the controller decodes it exactly as a local reply (token,
 * status, value). The controller waits for one reply at a time and takes
 * only that one: a reply from another node, or to another command, is
 * refused and breaks the session naming the node that sent it.
 *
 * Errors and deaths. After each batch (and before each reply) the agent
 * collects its workers' error boxes and sends their words up; the
 * controller's next sync or debug command reports them with its own. A
 * death or deadline on the node breaks the agent's node session; the agent
 * sends the cause up (naming the global worker), and the controller breaks
 * the whole session with it. A node that dies outright is found by the
 * heartbeats (node_link.c) within the lease; a dead controller is found by
 * the agents the same way, and each ends its node (its workers follow by
 * their parent-death signal).
 *
 * Collectives meet inside each node through the shared heap, and between
 * nodes among the nodes' worker 0s (the MPI processes), over a
 * communicator of their own (workers/data/collective_net.c).
 *
 * Shutdown. Closing the controller's session posts the shutdown frame to
 * the agents and waits for each one's goodbye (sent after its node's
 * workers are reaped), its forwarder serving on until then; then every
 * process finalizes MPI and the agents exit 0. An agent whose forwarder
 * could not finish its messages in flight still says goodbye, but does
 * not finalize MPI and exits DISCO_NODE_EXIT_UNDRAINED, saying so on
 * stderr. After a failure nobody can finalize (MPI waits for the dead), so
 * the processes exit without it and mpirun reaps them.
 */
#include <stdio.h>
#include <string.h>

#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"

/* Sends the node's pending errors up, if any. */
static disco_status_t send_errors(struct disco_session *s, struct disco__node *n)
{
    disco_status_t code = disco__session_collect_errors(s);
    if (code == DISCO_OK)
        return DISCO_OK;
    const char *text = disco_last_error();
    return disco__node_send_up(n, DISCO_NODE_UP_ERRORS, code, 0, text, strlen(text));
}

/* Relays one frame; forwards the reply it asks of a worker of this node. */
static disco_status_t relay(struct disco_session *s, struct disco__node *n, const void *frame,
                            size_t len)
{
    int asks;
    size_t w0_len;
    disco_status_t st = disco__session_relay(s, frame, len, &asks, &w0_len);
    if (st != DISCO_OK || asks < s->gid_base || asks >= s->gid_base + s->world)
        return st;
    int local = asks - s->gid_base;
    uint32_t rlen = (uint32_t)w0_len;
    if (local != 0 && (st = disco__session_recv_reply(s, local, &rlen)) != DISCO_OK)
        return st;
    /* The errors first: the controller reads them before the reply. */
    if ((st = send_errors(s, n)) != DISCO_OK)
        return st;
    /* The command's sequence number with it: the controller takes a reply
     * only to the command it waits on. */
    return disco__node_send_up(n, DISCO_NODE_UP_REPLY, DISCO_OK, s->seq, s->reply, rlen);
}

static int serve(struct disco_session *s, struct disco__node *n);

int disco__node_serve(struct disco_session *s, struct disco__node *n)
{
    int code = serve(s, n);
    /* Before the caller closes the node's session (its heap unmapped):
     * the forwarder reads and writes the workers' posts and bytes. */
    if (!disco__node_fwd_stop(n) && code == 0) {
        fprintf(stderr,
                "disco node %d: sends between workers of two nodes were still in flight when "
                "this node stopped; MPI is not finalized\n",
                disco__node_self(n));
        code = DISCO_NODE_EXIT_UNDRAINED;
    }
    return code;
}

static int serve(struct disco_session *s, struct disco__node *n)
{
    bool told = false; /* the controller knows this node broke */
    for (;;) {
        const void *batch;
        size_t bytes;
        disco_status_t st = disco__node_next(n, &batch, &bytes);
        if (st != DISCO_OK) {
            fprintf(stderr, "disco node %d: %s; ending this node\n", disco__node_self(n),
                    disco_last_error());
            return 1;
        }
        const char *p = batch, *end = p + bytes;
        while (p < end) {
            uint64_t len;
            if ((size_t)(end - p) < 8 || (memcpy(&len, p, 8), len > (uint64_t)(end - p - 8))) {
                disco__session_break(s, DISCO_E_PROTOCOL,
                                     "node %d: a batch of commands is cut short",
                                     disco__node_self(n));
                break;
            }
            const char *frame = p + 8;
            p += 8 + ((len + 7) & ~(uint64_t)7);
            st = relay(s, n, frame, (size_t)len);
            if (st == DISCO_E_SHUTDOWN)
                return s->state == DISCO_OK ? 0 : 1;
            if (st != DISCO_OK && s->state == DISCO_OK)
                disco__session_check(s); /* a death behind the failure is the cause */
        }
        if (s->state == DISCO_OK)
            st = send_errors(s, n);
        if (s->state != DISCO_OK && s->state != DISCO_E_SHUTDOWN && !told) {
            told = true;
            st = disco__node_send_up(n, DISCO_NODE_UP_BROKEN, s->state, 0, s->why, strlen(s->why));
        }
        if (st != DISCO_OK && s->state == DISCO_OK) {
            fprintf(stderr, "disco node %d: cannot reach the controller: %s\n", disco__node_self(n),
                    disco_last_error());
            return 1;
        }
    }
}
