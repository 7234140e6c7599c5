/*
 * collective_net.h - the collectives of a session that spans several nodes
 * (internal; how they work: collective_net.c). A world collective whose
 * c->across is set (coll_call.h) calls these; in-group collectives stay
 * inside a node, as groups never span nodes (open checks it).
 */
#ifndef DISCO_WORKERS_COLLECTIVE_NET_H
#define DISCO_WORKERS_COLLECTIVE_NET_H

#include <stdbool.h>

#include "disco/dtype.h"
#include "disco/func.h"
#include "workers/data/coll_call.h"

/** For an allreduce (or, with device, any collective whose tensors are on
 *  a device): records, before the meeting, DISCO_E_UNSUPPORTED naming the
 *  collective when c runs across nodes and op (avg) or device tensors
 *  cannot: every member of every node records the same, so all fail alike
 *  at their meetings. Returns whether it refused. */
bool disco__coll_net_refuse_op(struct disco__coll_call *c, disco_reduce_op_t op, bool device);

/** After the meeting of an allreduce across nodes, with every member's
 *  input (ins) and output (outs) span-checked: the chain (collective_net.c).
 *  Every member's output holds the fold of the whole world's inputs.
 *  Returns DISCO_OK or the call's failure, the same on every member. */
disco_status_t disco__coll_net_allreduce(struct disco__coll_call *c, disco_reduce_op_t op,
                                         DLDataType dt, char *const *ins, char *const *outs);

/** After the meeting of an allgather across nodes (x: this member's nb
 *  bytes; outs: every member's output of gworld * nb bytes, span-checked):
 *  every output holds every worker's x in global order. Returns DISCO_OK
 *  or the call's failure, the same on every member. */
disco_status_t disco__coll_net_allgather(struct disco__coll_call *c, const void *x, size_t nb,
                                         char *const *outs);

/** After the meeting of a gather_to_worker0 across nodes: lead is the
 *  leader's output (node 0: gworld * nb bytes, the result; elsewhere the
 *  node's block of size * nb, a scratch). Returns as allgather. */
disco_status_t disco__coll_net_gather(struct disco__coll_call *c, const void *x, size_t nb,
                                      char *lead);

/** broadcast_from_worker0 (scatter false) or scatter_from_worker0
 *  (scatter true) across nodes, on each node's leader before its node's
 *  meeting: node 0's leader (x: its validated input, or NULL after a
 *  failure it recorded) sends the tensor's description and its bytes (a
 *  scatter: each node its block of rows); each other node's leader
 *  receives them into a new heap tensor and posts it as its input.
 *  Returns the tensor the leader shares (node 0: x), or NULL with the
 *  failure recorded (node 0's own, word for word, on the others). */
DLTensor *disco__coll_net_share_lead(disco_ctx_t *ctx, struct disco__coll_call *c, DLTensor *x,
                                     bool scatter);

/** comm.h's broadcast from member root (a global worker id) across nodes,
 *  after its node's meeting, by every member of every node: st is the
 *  node's verdict (the meeting's, with the same inputs checked; the same
 *  on every member of the node; the meeting's barrier passed), buf the
 *  member's own heap tensor (NULL after a failure). The leaders exchange
 *  their nodes' verdicts, roots, dtypes and shapes (one allgather), so
 *  every member of every node takes the same verdict: the first failing
 *  node's, else DISCO_E_MISMATCH naming the first node that differs from
 *  node 0; then root's node's leader broadcasts root's bytes into the
 *  other leaders' bufs, and each member copies its node's source (root,
 *  or its leader) into its buf. Returns DISCO_OK, that verdict, or the
 *  link's failure naming the node. */
disco_status_t disco__coll_net_broadcast(struct disco__coll_call *c, disco_status_t st, int root,
                                         DLTensor *buf);

/** send_recv across nodes, on the receiving node's leader before its
 *  node's meeting: receives the description and bytes the sending node's
 *  leader sends (from: its node) into a new heap tensor and posts it as
 *  its input. Returns it, or NULL with the failure recorded (the sender's
 *  own, word for word). */
DLTensor *disco__coll_net_recv_lead(disco_ctx_t *ctx, struct disco__coll_call *c, int from);

/** send_recv across nodes, on the sending node's leader after its node's
 *  meeting (verdict: the meeting's status): sends member r's posted input
 *  (description, then bytes) to node to, or the failure. Returns DISCO_OK
 *  or the failure, to be carried by a go barrier. */
disco_status_t disco__coll_net_send_lead(struct disco__coll_call *c, int to, disco_status_t verdict,
                                         int r);

#endif
