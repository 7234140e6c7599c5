/*
 * node.h - a session across nodes: the link between the controller's
 * process (MPI rank 0) and each other node's agent process (internal; the
 * design is at the top of node_agent.c, the MPI side in node_mpi.c).
 *
 * open.c asks disco__node_join where this process stands before it makes
 * the node's own session (its workers forked before MPI starts), then
 * disco__node_start to join the others. The controller's session.c posts
 * every command frame it broadcasts (batched), flushes before it waits,
 * waits for remote replies, and folds the nodes' errors and deaths into
 * its own (disco__node_check). An agent's open runs disco__node_serve
 * (node_agent.c) until the controller ends the session; it never returns
 * to the program.
 *
 * Built without MPI (node_none.c), join refuses with DISCO_E_UNSUPPORTED
 * and nothing else is reached.
 *
 * Thread safety: one thread (the session's) calls these; the link's own
 * thread (heartbeats) shares only atomics and the batch's lock with it.
 */
#ifndef DISCO_SCHEDULER_NODE_H
#define DISCO_SCHEDULER_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/session.h"
#include "workers/core/worker.h"

struct disco__node;

/* Where this process stands in the job. */
struct disco__node_place {
    int node, nodes; /* this process's node (its MPI rank) and their count */
};

/* What an agent sends up to the controller (first word of a message). */
enum disco__node_up {
    DISCO_NODE_UP_REPLY = 1,  /* [u32 kind, i32 0, u32 len, u32 seq, reply frame]: a worker's
                                 answer to the command of sequence number seq */
    DISCO_NODE_UP_ERRORS = 2, /* [u32 kind, i32 code, text]: its workers' failures */
    DISCO_NODE_UP_BROKEN = 3, /* [u32 kind, i32 code, text]: its node session broke */
    DISCO_NODE_UP_BYE = 4,    /* [u32 kind]: it closed its node, after the shutdown */
};

/** Reads this process's place from MPI (initialized already) or from the
 *  launcher's environment (OMPI_COMM_WORLD_RANK/SIZE, PMIX_RANK), so that
 *  the node's workers can be forked before MPI starts. Returns DISCO_OK,
 *  DISCO_E_INVAL (not started by an MPI launcher; cfg inconsistent with
 *  the job), DISCO_E_UNSUPPORTED (built without MPI). */
disco_status_t disco__node_join(const disco_session_config_t *cfg, struct disco__node_place *out);

/** Starts MPI (unless the program did: then it also finalizes it), checks
 *  that every node opened the same geometry, starts the heartbeat thread
 *  and gives the node's worker 0 (w0, running in this process) its link
 *  for collectives. timeout_ms is the session's call deadline. Returns
 *  DISCO_OK with *out, or the failure naming the node at fault. */
disco_status_t disco__node_start(const disco_session_config_t *cfg,
                                 const struct disco__node_place *p, uint32_t timeout_ms,
                                 disco_worker_t *w0, struct disco__node **out);

/** Controller: queues a command frame for every other node; sends the
 *  batch when it is full. Returns DISCO_OK or a send failure. */
disco_status_t disco__node_post(struct disco__node *n, const void *frame, size_t len);

/** Controller: sends the queued frames now. */
disco_status_t disco__node_flush(struct disco__node *n);

/** Controller: waits (until timeout_ns from now) for node's reply to the
 *  command of sequence number seq (the last one, which asked one of its
 *  workers); copies the reply frame into buf (cap bytes) and sets *len.
 *  Errors and breaks that node sends on the way are kept for
 *  disco__node_errors / disco__node_check. A reply from another node, or
 *  to another command, is refused: that node is then broken (its check
 *  names it). Returns DISCO_OK, DISCO_E_TIMEOUT, DISCO_E_WORKER_DIED (the
 *  node died or broke: the message names it), DISCO_E_PROTOCOL. */
disco_status_t disco__node_wait_reply(struct disco__node *n, int node, uint64_t seq, void *buf,
                                      size_t cap, uint32_t *len, int64_t timeout_ns);

/** Controller: reads what the agents sent without waiting. Returns
 *  DISCO_OK, or the failure of a node (dead: DISCO_E_WORKER_DIED naming
 *  the node and its workers; broken: the agent's own cause). */
disco_status_t disco__node_check(struct disco__node *n);

/** Controller: the first error code the agents reported since the last
 *  call (DISCO_OK: none), their details appended to detail (cap bytes,
 *  *used updated). */
disco_status_t disco__node_errors(struct disco__node *n, char *detail, size_t cap, size_t *used);

/** Agent: waits for the next batch of command frames (no deadline: an
 *  idle session is idle; a dead controller ends the wait). Returns
 *  DISCO_OK with *frames (valid until the next call) and *bytes,
 *  DISCO_E_PEER_DEAD (the controller is gone), DISCO_E_PROTOCOL. */
disco_status_t disco__node_next(struct disco__node *n, const void **frames, size_t *bytes);

/** Agent: sends one message up (enum disco__node_up) with its code, the
 *  sequence number of the command it answers (a reply; else 0) and
 *  payload (a reply frame or a text). Returns DISCO_OK or the failure. */
disco_status_t disco__node_send_up(struct disco__node *n, uint32_t kind, int32_t code, uint64_t seq,
                                   const void *payload, size_t len);

/** Ends the link. Controller (healthy: the session ended normally):
 *  tells the agents to close (the shutdown frame) and waits for their
 *  goodbyes, its forwarding thread serving on meanwhile (an agent drains
 *  its own sends to node 0 before its goodbye). Then stops the forwarding
 *  thread (disco__node_fwd_stop), an agent says goodbye (healthy), the
 *  heartbeat thread stops, and MPI is finalized if this process started it,
 *  every node is known to be alive and no forwarded message is left in
 *  flight; else it is left to the process's exit. Frees n. */
void disco__node_stop(struct disco__node *n, bool healthy);

/** Stops the forwarding thread of comm.h's sends across nodes
 *  (node_fwd.c; nothing if none or already stopped), then lets its
 *  messages in flight finish for a while. Returns whether none is left in
 *  flight (else MPI must not be finalized). Called before the node's heap
 *  is unmapped and before MPI_Finalize: by disco__node_serve as it ends
 *  and by disco__node_stop. */
bool disco__node_fwd_stop(struct disco__node *n);

/** The node this link is (0: the controller). */
int disco__node_self(const struct disco__node *n);

/* An agent's exit code after a normal end whose forwarder (node_fwd.c)
 * could not finish its messages in flight: it said goodbye, but MPI is
 * not finalized. */
#define DISCO_NODE_EXIT_UNDRAINED 3

/** Agent: runs the node until the controller ends the session or dies
 *  (node_agent.c). Returns the process's exit code: 0 after a normal end,
 *  DISCO_NODE_EXIT_UNDRAINED (said on stderr), 1 otherwise. */
struct disco_session;
int disco__node_serve(struct disco_session *s, struct disco__node *n);

#endif
