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

/** Records, before the meeting, that collective c cannot run across nodes
 *  (DISCO_E_UNSUPPORTED naming it): every member of every node records
 *  the same, so all fail alike at their meetings. */
void disco__coll_net_refuse(struct disco__coll_call *c);

/** For an allreduce (or, with device, any collective whose tensors are on
 *  a device): records the refusal as disco__coll_net_refuse when c runs
 *  across nodes and op (avg) or device tensors cannot. Returns whether it
 *  refused. */
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

#endif
