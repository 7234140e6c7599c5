/*
 * comm_fwd.h - a worker's post for a send or receive across nodes, served
 * by the forwarding thread in its node leader's process (internal; the
 * design is at the top of comm_net.c, the worker's side there, the
 * thread's in scheduler/node/node_fwd.c).
 *
 * Each worker has one such post in shared memory, beside its local
 * point-to-point post (struct disco__p2p in collective.h). Its state word
 * is ticket << 3 | FWD_*; the ticket is new for every request, so a word
 * names both the request and its step:
 *   W1 the worker writes the request fields (kind, peer, seq, nth,
 *      start_ns, desc, heap block), then stores POSTED (release);
 *   F1 the forwarder sees POSTED (acquire), claims it with a
 *      compare-and-swap POSTED -> CLAIMED (acq_rel), copies the request
 *      (and a send's bytes when they fit one piece) into its own memory,
 *      then stores TAKEN (release): from then on it never reads the
 *      post's request fields again, nor the worker's bytes but at F3;
 *   F3 (a transfer in pieces, more than one piece of bytes) for each
 *      piece the forwarder claims again, TAKEN -> CLAIMED (acq_rel),
 *      copies the piece (a send: out of the worker's heap bytes; a
 *      receive: into them), then stores TAKEN (release), no wake; a
 *      failed claim (the worker withdrew, or F2 answered it) ends the
 *      transfer: nothing more is read or written;
 *   F2 to answer (a send: the receiver's verdict came back; a receive: the
 *      sender's bytes came and were checked) the forwarder claims again,
 *      TAKEN -> CLAIMED (acq_rel), writes the answer (and a receive's
 *      bytes into the worker's heap block), then stores DONE (release;
 *      pairs with W2) and wakes q;
 *   W2 the worker waits for DONE of its ticket (acquire), then reads the
 *      answer.
 * A send that carries its sender's own failure (desc.status) is answered
 * DISCO_OK at F1 itself, right after TAKEN: the forwarder sends it on as
 * any send, and the receiver fails in its words; nothing is given up, so
 * nothing is cancelled (test_p2p_failure_then_send_late_receiver).
 * Order: nth is the request's place among its worker's requests of its
 * kind with that peer in the command (1, 2, ...: the k-th send of A to B
 * in a command meets the k-th receive of B from A, whatever the timing,
 * as one node's tickets do), counted by the worker (struct
 * disco__fwd_count, comm_net.c) for every call that reaches a post.
 * Deadline: the forwarder answers a request it took (TAKEN) and could not
 * answer otherwise by start_ns + 4/5 of the call timeout (start_ns: when
 * the worker began its command, disco_now_ns(), one clock on a host; a
 * start_ns of 0 or later than the claim counts from the claim) with
 * DISCO_E_TIMEOUT naming the peer and its node (F2, as any answer): a
 * worker process's waits have no deadline of their own, and the wait of
 * the controller (or agent) for the worker's reply, which gives the
 * worker the call timeout from when it starts waiting, after the command
 * entered the worker's ring, must not end first: it would kill the worker
 * instead of reporting its failure (test_p2p_late_receive_times_out).
 * Giving up: a worker whose wait fails withdraws with a compare-and-swap
 * from POSTED or TAKEN to WITHDRAWN (acq_rel). CLAIMED cannot be
 * withdrawn: the forwarder holds it only for a copy in memory (never
 * across an MPI wait; at most one piece at F3), so the worker waits for it to end, then withdraws
 * or takes the answer. So the forwarder writes into a worker's post or
 * heap bytes only while it holds CLAIMED, which it can only take from a
 * state the worker has not left: no byte is written after a worker gave
 * up. The answer fields have one writer (the forwarder's thread), which
 * writes them only while it holds CLAIMED of the live ticket, so a worker
 * that read DONE of its ticket reads that ticket's answer.
 * Tests: tests/test_node_p2p.c.
 */
#ifndef DISCO_WORKERS_COMM_FWD_H
#define DISCO_WORKERS_COMM_FWD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/shm/wait.h"
#include "disco/tensor.h"

#define DISCO__FWD_IDLE                0u
#define DISCO__FWD_POSTED              1u
#define DISCO__FWD_CLAIMED             2u
#define DISCO__FWD_TAKEN               3u
#define DISCO__FWD_DONE                4u
#define DISCO__FWD_WITHDRAWN           5u
#define DISCO__FWD_STATE(ticket, step) ((uint64_t)(ticket) << 3 | (step))

#define DISCO__FWD_SEND 1u
#define DISCO__FWD_RECV 2u

#define DISCO__FWD_MSG 384

/* What a tensor is (a send's, or the tensor a receive takes), or the
 * failure of its worker before it could say. */
struct disco__fwd_desc {
    int32_t status; /* DISCO_OK, or this end's failure (then msg) */
    int32_t ndim;
    DLDataType dtype;
    uint32_t dev_type; /* 0: host memory; else the tensor's device type */
    uint64_t nbytes;
    int64_t shape[DISCO_MAX_NDIM];
    char msg[DISCO__FWD_MSG];
};

struct disco__fwd_post {
    _Alignas(64) _Atomic uint64_t state; /* DISCO__FWD_STATE(ticket, step) */
    /* The request: written by the worker before POSTED, read by the
     * forwarder while it holds its first CLAIMED (F1). */
    uint32_t kind; /* DISCO__FWD_SEND or DISCO__FWD_RECV */
    int32_t peer;  /* the other worker's global id */
    uint64_t seq;  /* the worker's command */
    uint32_t nth;  /* its place among the command's requests of kind with peer (Order) */
    uint32_t req_pad;
    int64_t start_ns;    /* when the worker began the command (Deadline) */
    uint64_t block, off; /* its heap bytes (a send's source, a receive's target) */
    struct disco__fwd_desc desc;
    /* The answer: written by the forwarder while it holds CLAIMED (F2),
     * read by the worker after DONE. */
    int32_t ans_status;
    uint32_t ans_pad;
    uint64_t ans_ticket; /* a receive: the sender's ticket (for the trace) */
    char ans_msg[DISCO__FWD_MSG];
    disco_waitq_t q; /* the worker parks here */
};

/* A worker's count of its requests with one peer (comm_net.c, Order):
 * valid for command seq only. In the worker's own memory. */
struct disco__fwd_count {
    uint64_t seq;
    uint32_t sends, recvs;
};

/** A peer in the words both ends use: "worker 3 (on node 1)", or
 *  "worker 2 (the leader of node 1)" (peer: a global id; world: workers
 *  a node), into out (cap bytes). Thread-safe. */
void disco__fwd_peer_words(int peer, int world, char *out, size_t cap);

/** Whether what worker from sends (dtype sdt, sndim dims of sshape, device
 *  type sdev: 0 for host memory) is what worker to receives into (rdt,
 *  rndim, rshape, rdev): the same dtype, dims, shape and device type. When
 *  not, the words of DISCO_E_MISMATCH into msg (cap bytes), one phrase for
 *  both ends and both paths (one node: comm_p2p.c; across nodes:
 *  disco__fwd_verdict): "disco_ctx_recv: worker 1 sends int32 of 1 dims
 *  (device type 0), worker 3 receives float32 of 1 dims (device type 0)".
 *  A sender's sndim outside 0..DISCO_MAX_NDIM is never alike (it came from
 *  shared memory or the wire). Thread-safe. */
bool disco__p2p_alike(DLDataType sdt, int sndim, const int64_t *sshape, uint32_t sdev,
                      DLDataType rdt, int rndim, const int64_t *rshape, uint32_t rdev, int from,
                      int to, char *msg, size_t cap);

/** The receiver's verdict on what a sender described (sent) against what
 *  its receive takes (mine; from, to: global ids): DISCO_OK, the sender's
 *  own failure (its words), DISCO_E_MISMATCH (another dtype, shape or
 *  device type) or DISCO_E_PROTOCOL (bytes the shape does not hold), the
 *  words in msg (cap bytes). Thread-safe (touches only its arguments). */
int32_t disco__fwd_verdict(const struct disco__fwd_desc *sent, const struct disco__fwd_desc *mine,
                           int from, int to, char *msg, size_t cap);

#endif
