/*
 * channel.h - the control channel between a controller and its workers
 * (internal). Two transports behind one set of calls: the shared-memory
 * rings (default) and pipes (one pair per worker, as TVM's ProcessSession;
 * kept as the baseline). Messages are whole frames; pipes carry them with a
 * u32 length prefix.
 *
 * Thread safety: the controller's calls from one thread; each worker's calls
 * from its own thread.
 */
#ifndef DISCO_WORKERS_CHANNEL_H
#define DISCO_WORKERS_CHANNEL_H

#include <stdint.h>

#include "disco/shm/ring.h"
#include "disco/session.h" /* disco_chan_t.kind: DISCO_TRANSPORT_RING or _PIPE */
#include "disco/shm/wait.h"

typedef struct disco_chan {
    int kind;
    int world;
    int self; /* -1 on the controller, else the worker id (>= 1) */
    uint32_t max_msg;
    /* rings */
    disco_ring_t cmd;
    disco_ring_t *reply; /* controller: [world], index = worker id (0 unused);
                            worker: reply[0] is its own */
    /* pipes: controller: cmd_fd[w] write end, reply_fd[w] read end;
     * worker: cmd_fd[0] read end, reply_fd[0] write end. -1 when closed. */
    int *cmd_fd;
    int *reply_fd;
    /* pipes, controller: the worker whose command pipe made the last
     * broadcast fail (full past the deadline), or 0 */
    int stuck;
} disco_chan_t;

/** Controller: a hint that a broadcast follows (starts fetching the command
 *  slot it writes; see disco_ring_prefetch_write). Does nothing on pipes or
 *  with no worker besides worker 0. */
void disco__chan_prepare_bcast(disco_chan_t *c);

/** Worker: a hint that a command receive follows (starts fetching the slot
 *  it reads; see disco_ring_prefetch_read). Does nothing on pipes. */
void disco__chan_prepare_recv(disco_chan_t *c);

/** Controller: sends one command frame to every worker 1..world-1. A dead
 *  worker's pipe is skipped. When sent_at is not NULL it gets the trace
 *  clock (shm/ticks.h) as the frame is published (rings: see
 *  disco__ring_write_stamped; pipes and a lone worker 0: before the sends).
 *  Returns DISCO_OK, DISCO_E_MSG_TOO_BIG, or the wait's status (ring full /
 *  pipe full past the deadline; for a pipe, c->stuck names its worker: the
 *  ring's slowest reader names it for rings). */
disco_status_t disco__chan_bcast(disco_chan_t *c, const void *msg, uint32_t len,
                                 const disco_wait_t *w, uint64_t *sent_at);

/** Controller: receives worker's next reply. Returns DISCO_OK,
 *  DISCO_E_BUF_TOO_SMALL, DISCO_E_CLOSED (pipe end of file), the wait's
 *  status. */
disco_status_t disco__chan_recv_reply(disco_chan_t *c, int worker, void *buf, uint32_t cap,
                                      uint32_t *len_out, const disco_wait_t *w);

/** Worker: receives the next command. Returns as recv_reply. */
disco_status_t disco__chan_recv_cmd(disco_chan_t *c, void *buf, uint32_t cap, uint32_t *len_out,
                                    const disco_wait_t *w);

/** Worker: sends a reply. Returns DISCO_OK, DISCO_E_MSG_TOO_BIG,
 *  DISCO_E_CLOSED, the wait's status. */
disco_status_t disco__chan_send_reply(disco_chan_t *c, const void *msg, uint32_t len,
                                      const disco_wait_t *w);

#endif
