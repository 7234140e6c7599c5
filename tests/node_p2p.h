/* node_p2p.h - node_prog's scenarios of send and receive between any two
 * workers on two nodes (tests/node_p2p.c), run under mpirun by
 * tests/test_node_p2p.c (workers 0..wpn-1 on node 0, wpn.. on node 1;
 * DISCO_SIM_GPUS set: sim device tensors where the scenario has them):
 *   p2p-pairs     leader to non-leader, non-leader to leader, non-leader
 *                 to non-leader, both directions at once, leader to
 *                 leader; several dtypes and shapes, every byte checked
 *   p2p-ring      groups are the nodes: recv_from_prev_group then
 *                 send_to_next_group on every worker, the last node's
 *                 closing the ring with a send to node 0's
 *   p2p-repeat    200 rounds of two sends at once, both ways
 *   p2p-mismatch  dtype, shape (and with sim, device type) mismatches
 *                 between two non-leaders: DISCO_E_MISMATCH on both ends,
 *                 the sender's words holding the receiver's; then a send
 *                 that matches goes through
 *   p2p-nopeer    a send without a receive, then a receive without a
 *                 send: DISCO_E_TIMEOUT naming the peer and its node
 *                 within the call timeout; then 3 rounds of sends work
 *   p2p-trace     p2p-pairs on host tensors, then node 0's trace records
 *                 of sends and receives printed
 *   p2p-kill      node 1's process dies while worker 1 (node 0) waits to
 *                 receive from worker wpn + 1: its verdict on stderr
 */
#ifndef DISCO_TESTS_NODE_P2P_H
#define DISCO_TESTS_NODE_P2P_H

#include "disco/disco.h"

/** Registers the scenarios' worker functions (before the open). */
void node_p2p_register(void);

/** Runs scenario sc on s (wpn workers a node); returns 0 when it went as
 *  it expects, 1 when not, -1 when sc is none of these. */
int node_p2p_scenario(disco_session_t *s, const char *sc, int wpn);

#endif
