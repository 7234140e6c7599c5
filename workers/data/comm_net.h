/*
 * comm_net.h - comm.h's send and receive between two nodes' leaders
 * (internal; how: comm_net.c). comm_p2p.c calls these when the peer is on
 * another node and both ends are their nodes' worker 0; other workers are
 * refused there.
 *
 * Thread safety: the leader's worker function's own thread, as comm.h.
 */
#ifndef DISCO_WORKERS_COMM_NET_H
#define DISCO_WORKERS_COMM_NET_H

#include "disco/func.h"
#include "disco/tensor.h"

/** Sends x (ours: heap or device; pre: DISCO_OK, or this sender's failure
 *  on its arguments, sent so the receiver fails with it) to worker to, the
 *  leader of another node, and waits for its acknowledgement. Returns
 *  DISCO_OK; pre (with its words); DISCO_E_MISMATCH (the receiver's tensor
 *  differs) or the receiver's own failure; the link's failure
 *  (DISCO_E_TIMEOUT, DISCO_E_WORKER_DIED, DISCO_E_SYS) naming the peer;
 *  DISCO_E_PROTOCOL (an acknowledgement of another command). */
disco_status_t disco__coll_net_send(disco_ctx_t *ctx, disco_status_t pre, const DLTensor *x,
                                    int to);

/** Receives into x (ours: heap or device) what worker from, the leader of
 *  another node, sends, then acknowledges (pre: this receiver's failure
 *  on its arguments; the bytes are then taken and dropped, and the
 *  sender fails with it). Returns DISCO_OK; pre; the sender's failure,
 *  word for word; DISCO_E_MISMATCH (another dtype, shape or device type);
 *  DISCO_E_PROTOCOL (a description of another command or pair of
 *  workers, or of bytes its shape does not hold); the link's failure. */
disco_status_t disco__coll_net_recv(disco_ctx_t *ctx, disco_status_t pre, DLTensor *x, int from);

#endif
