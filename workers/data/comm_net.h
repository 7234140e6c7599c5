/*
 * comm_net.h - comm.h's send and receive between workers on two nodes
 * (internal; how: comm_net.c, through the forwarding thread of each
 * node's leader process). comm_p2p.c calls these when the peer is on
 * another node, whichever workers the two are.
 *
 * Thread safety: the worker function's own thread, as comm.h.
 */
#ifndef DISCO_WORKERS_COMM_NET_H
#define DISCO_WORKERS_COMM_NET_H

#include <stdint.h>

#include "disco/func.h"
#include "disco/tensor.h"

/** Sends x (ours: heap or device; pre: DISCO_OK, or this sender's failure
 *  on its arguments, sent so the receiver fails with it) to worker to (a
 *  global id on another node) and waits for the receiver's verdict.
 *  *ticket_out: the request's ticket (the trace pairs it with the
 *  receive). Returns DISCO_OK; pre (with its words); DISCO_E_MISMATCH (the
 *  receiver's tensor differs) or the receiver's own failure, in its words;
 *  DISCO_E_TIMEOUT (no answer within the call deadline, or the receiver
 *  gave up between two pieces) naming the peer and its node; the
 *  session's abort or the worker's check. Any size (in pieces beyond
 *  DISCO_FWD_PIECE_BYTES; comm_net.c, Sizes). */
disco_status_t disco__coll_net_send(disco_ctx_t *ctx, disco_status_t pre, const DLTensor *x, int to,
                                    uint64_t *ticket_out);

/** Receives into x (ours: heap or device) what worker from (a global id
 *  on another node) sends (pre: this receiver's failure on its arguments;
 *  the sender then fails with it). *ticket_out: the sender's ticket, on
 *  success. Returns DISCO_OK; pre; the sender's failure, word for word;
 *  DISCO_E_MISMATCH (another dtype, shape or device type); DISCO_E_PROTOCOL
 *  (bytes its shape does not hold); DISCO_E_TIMEOUT naming the peer and
 *  its node; the session's abort or the worker's check. */
disco_status_t disco__coll_net_recv(disco_ctx_t *ctx, disco_status_t pre, DLTensor *x, int from,
                                    uint64_t *ticket_out);

#endif
