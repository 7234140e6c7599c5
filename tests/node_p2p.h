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
 * and tests/node_p2p_pieces.c's (with small DISCO_FWD_PIECE_BYTES or
 * DISCO_FWD_HOLD_BYTES):
 *   p2p-pieces    sends in many pieces, sizes a byte off a boundary, both
 *                 ways at once, every byte checked; then each leader's
 *                 count of pieces written ("pieces-in worker W: N")
 *   p2p-bigfail   32 MiB in pieces of 1 byte from worker 1 to wpn + 1:
 *                 fails in the middle at the deadline, both ends say so;
 *                 then pieces written, and 3 rounds of sends that work
 *   p2p-huge      INT_MAX + 8 bytes from worker 1 to wpn + 1 in pieces of
 *                 16 MiB, every word checked; then pieces written
 *   p2p-killmid   node 1's process dies 1 s into a send of 32 MiB in
 *                 pieces of 1 byte from worker wpn + 1 to worker 1
 *   p2p-hold      every worker of node 1 sends 600 bytes to worker 0,
 *                 which receives them late; then each leader's most bytes
 *                 held ("held-peak worker W: N")
 */
#ifndef DISCO_TESTS_NODE_P2P_H
#define DISCO_TESTS_NODE_P2P_H

#include "disco/disco.h"

/** Registers the scenarios' worker functions (before the open). */
void node_p2p_register(void);

/** Runs scenario sc on s (wpn workers a node); returns 0 when it went as
 *  it expects, 1 when not, -1 when sc is none of these. */
int node_p2p_scenario(disco_session_t *s, const char *sc, int wpn);

/** A new tensor of dtype and shape on the host or (dev) the sim device,
 *  holding worker s's bytes of round k (s < 0: zeros), into *out. */
disco_status_t node_p2p_make(disco_ctx_t *ctx, bool dev, DLDataType dt, const int64_t *shape,
                             int ndim, int s, int k, DLTensor **out);

/** Checks that t holds worker s's bytes of round k, every one (fails the
 *  worker naming the first wrong byte). */
disco_status_t node_p2p_check(disco_ctx_t *ctx, const char *what, const DLTensor *t, int s, int k);

/** tests/node_p2p_pieces.c's: as node_p2p_register and node_p2p_scenario. */
void node_p2p_pieces_register(void);
int node_p2p_pieces_scenario(disco_session_t *s, const char *sc, int wpn);

#endif
