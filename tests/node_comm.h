/* node_comm.h - node_prog's scenarios of in-worker communication
 * (tests/node_comm.c), run under mpirun by tests/test_node.c:
 *   ctx-more      broadcast from the last worker and from worker 1,
 *                 allgather, the leaders' ring of sends (300 and 300000
 *                 int32), send_to_next_group along the groups' first
 *                 workers, a ring of sends (300000 int32) among the
 *                 workers of rank 1 of each node; then a broadcast whose
 *                 root differs between nodes: DISCO_E_MISMATCH on every
 *                 worker, in the same words across nodes; and a send of
 *                 300 elements from leader 0 to leader 1, which receives
 *                 301: DISCO_E_MISMATCH on both ends
 *   ctx-more-sim  the first part with sim device tensors (DISCO_SIM_GPUS)
 *   ctx-nopeer    leader 0 sends to leader 1, which never receives: the
 *                 send fails within the call timeout, naming its peer
 */
#ifndef DISCO_TESTS_NODE_COMM_H
#define DISCO_TESTS_NODE_COMM_H

#include "disco/disco.h"

/** Registers the scenarios' worker functions (before the open). */
void node_comm_register(void);

/** Runs scenario sc on s (wpn workers a node); returns 0 when it went as
 *  it expects, 1 when not, -1 when sc is none of these. */
int node_comm_scenario(disco_session_t *s, const char *sc, int wpn);

#endif
