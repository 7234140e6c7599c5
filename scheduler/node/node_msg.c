/* node_msg.c - the messages of the node link (node.h): the controller's
 * batches of command frames down to the agents, the agents' replies,
 * errors, breaks and goodbyes up to the controller.
 *
 * A batch is [u64 length, frame padded to 8 bytes]...; the agent checks
 * every length against the message before it reads a frame (node_agent.c
 * then decodes each as any worker does). A message up is [u32 kind, i32
 * code, u32 length, u32 seq, payload]; the controller checks the length
 * and the kind, takes a reply only from the node and to the command it
 * waits on (seq), and treats the text as the agent's words (bounded,
 * escaped) as it does a worker's error box. Every message's size is
 * checked against what its kind can carry before a byte is allocated for
 * it; a node that breaks these rules is broken, named.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shm/text.h"
#include "scheduler/node/node_impl.h"

#define IDLE_NS     100000000LL /* an agent with no command for 100 ms is at rest, */
#define IDLE_NAP_NS 10000000L   /* and polls every 10 ms */

/* ---- down: batches of frames ---- */

disco_status_t disco__node_flush_locked(struct disco__node *n)
{
    if (n->blen == 0)
        return DISCO_OK;
    MPI_Request r[NODE_MAX]; /* join refuses more nodes */
    disco_status_t st = DISCO_OK;
    int sent = 0;
    for (int k = 1; k < n->nodes && st == DISCO_OK; k++) {
        int rc = MPI_Isend(n->batch, (int)n->blen, MPI_BYTE, k, NODE_TAG_CMD, n->cmd, &r[k]);
        if (rc != MPI_SUCCESS)
            st = disco__node_mpi_fail(rc, "sending commands to the nodes");
        else
            sent = k;
    }
    /* The batch's bytes are the sends' until each completes. */
    int64_t deadline = disco__node_now() + n->timeout_ns;
    for (int k = 1; k <= sent; k++) {
        char what[64];
        snprintf(what, sizeof what, "sending commands to node %d", k);
        disco_status_t s2 = disco__node_await(n, &r[k], k, deadline, what, NULL);
        if (st == DISCO_OK)
            st = s2;
    }
    n->blen = 0;
    n->bframes = 0;
    return st;
}

disco_status_t disco__node_flush(struct disco__node *n)
{
    pthread_mutex_lock(&n->lock);
    disco_status_t st = disco__node_flush_locked(n);
    pthread_mutex_unlock(&n->lock);
    return st;
}

disco_status_t disco__node_post(struct disco__node *n, const void *frame, size_t len)
{
    size_t need = 8 + ((len + 7) & ~(size_t)7);
    if (need > n->bcap)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "a %zu-byte command for the nodes", len);
    pthread_mutex_lock(&n->lock);
    disco_status_t st = DISCO_OK;
    if (n->blen + need > n->bcap)
        st = disco__node_flush_locked(n);
    if (st == DISCO_OK) {
        if (n->blen == 0)
            n->bfirst_ns = disco__node_now();
        uint64_t l = len;
        memcpy(n->batch + n->blen, &l, 8);
        memcpy(n->batch + n->blen + 8, frame, len);
        memset(n->batch + n->blen + 8 + len, 0, need - 8 - len);
        n->blen += need;
        if (++n->bframes >= NODE_BATCH_FRAMES || n->blen >= NODE_BATCH_BYTES)
            st = disco__node_flush_locked(n);
    }
    pthread_mutex_unlock(&n->lock);
    return st;
}

/* Receives the message a probe found (status; its tag) into n->in, grown
 * to fit; *bytes its size. A message larger than max (what its kind can
 * carry) is refused before anything is allocated for it. */
static disco_status_t recv_probed(struct disco__node *n, const MPI_Status *status, int tag,
                                  const char *what, size_t max, size_t *bytes)
{
    int count = 0, rc;
    MPI_Get_count(status, MPI_BYTE, &count);
    if (count < 0 || count == MPI_UNDEFINED)
        return disco_set_error(DISCO_E_PROTOCOL, "node %d: %s of unknown size", status->MPI_SOURCE,
                               what);
    if ((size_t)count > max)
        return disco_set_error(DISCO_E_PROTOCOL, "node %d: %s of %d bytes; it carries at most %zu",
                               status->MPI_SOURCE, what, count, max);
    if ((size_t)count > n->incap) {
        char *p = aligned_alloc(8, ((size_t)count + 7) & ~(size_t)7);
        if (p == NULL)
            return disco_set_error(DISCO_E_NOMEM, "%s of %d bytes", what, count);
        free(n->in);
        n->in = p;
        n->incap = (size_t)count;
    }
    if ((rc = MPI_Recv(n->in, count, MPI_BYTE, status->MPI_SOURCE, tag, n->cmd,
                       MPI_STATUS_IGNORE)) != MPI_SUCCESS)
        return disco__node_mpi_fail(rc, what);
    *bytes = (size_t)count;
    return DISCO_OK;
}

disco_status_t disco__node_next(struct disco__node *n, const void **frames, size_t *bytes)
{
    MPI_Status status;
    int flag = 0, rc;
    int64_t start = disco__node_now();
    long nap = 20000;
    /* Poll for the next batch: flat out for a while after the last one
     * (a session at work sends them back to back), then with naps that
     * grow to 1 ms (disco__node_backoff), then, at rest, every 10 ms, so
     * that an idle node costs next to nothing. */
    for (;;) {
        if ((rc = MPI_Iprobe(0, NODE_TAG_CMD, n->cmd, &flag, &status)) != MPI_SUCCESS)
            return disco__node_mpi_fail(rc, "waiting for commands");
        if (flag)
            break;
        if (atomic_load_explicit(&n->peer[0].dead, memory_order_relaxed))
            return disco__node_dead(n, 0, "waiting for commands");
        int64_t waited = disco__node_now() - start;
        if (waited < IDLE_NS) {
            disco__node_backoff(waited, &nap);
            continue;
        }
        /* Idle: 100 naps a second (a node at rest costs ~0.5% of a core
         * instead of ~4% at 1 ms naps); the first command after a rest
         * waits up to 10 ms. */
        struct timespec ts = {0, IDLE_NAP_NS};
        nanosleep(&ts, NULL);
    }
    disco_status_t st =
        recv_probed(n, &status, NODE_TAG_CMD, "a batch of commands", n->bcap, bytes);
    if (st != DISCO_OK)
        return st;
    *frames = n->in;
    return DISCO_OK;
}

/* ---- up: replies, errors, breaks, goodbyes ---- */

disco_status_t disco__node_send_up(struct disco__node *n, uint32_t kind, int32_t code, uint64_t seq,
                                   const void *payload, size_t len)
{
    if (len > DISCO_REPLY_MAX)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "a %zu-byte message up", len);
    /* An agent keeps no reply: its n->reply is the message's buffer. */
    char *buf = n->reply;
    uint32_t head[4] = {kind, (uint32_t)code, (uint32_t)len, (uint32_t)seq};
    memcpy(buf, head, sizeof head);
    if (len > 0)
        memcpy(buf + NODE_UP_HEAD, payload, len);
    MPI_Request r;
    int rc = MPI_Isend(buf, (int)(NODE_UP_HEAD + len), MPI_BYTE, 0, NODE_TAG_UP, n->cmd, &r);
    if (rc != MPI_SUCCESS)
        return disco__node_mpi_fail(rc, "sending to the controller");
    return disco__node_await(n, &r, 0, disco__node_now() + n->timeout_ns,
                             "sending to the controller", NULL);
}

/* Keeps an agent's words about its errors. */
static void keep_errors(struct disco__node *n, int k, int32_t code, const char *text, size_t len)
{
    char safe[512];
    disco__text_safe(safe, sizeof safe, text, len); /* len bytes, no terminator */
    if (!disco__status_is_error(code))
        code = DISCO_E_PROTOCOL;
    if (n->err_code == DISCO_OK)
        n->err_code = code;
    if (n->err_used < sizeof n->err) {
        int w = snprintf(n->err + n->err_used, sizeof n->err - n->err_used, "%s%s (node %d)",
                         n->err_used ? "; " : "", safe, k);
        n->err_used += w > 0 ? (size_t)w : 0;
        if (n->err_used > sizeof n->err)
            n->err_used = sizeof n->err;
    }
}

/* Node k broke the protocol (its words, as the controller sees them, in
 * the error just set): the node is broken with them, so that every later
 * check names it too, even one whose caller drops this status. Returns
 * DISCO_E_PROTOCOL. */
static disco_status_t refuse(struct disco__node *n, int k)
{
    struct disco__node_peer *p = &n->peer[k];
    if (p->broken == DISCO_OK) {
        snprintf(p->why, sizeof p->why, "%s", disco_last_error());
        p->broken = DISCO_E_PROTOCOL;
    }
    return DISCO_E_PROTOCOL;
}

/* Reads one message up, if there is one; returns DISCO_E_AGAIN if not. */
static disco_status_t take_one(struct disco__node *n)
{
    MPI_Status status;
    int flag = 0, rc;
    if ((rc = MPI_Iprobe(MPI_ANY_SOURCE, NODE_TAG_UP, n->cmd, &flag, &status)) != MPI_SUCCESS)
        return disco__node_mpi_fail(rc, "reading the nodes' messages");
    if (!flag)
        return DISCO_E_AGAIN;
    int k = status.MPI_SOURCE;
    if (k <= 0 || k >= n->nodes)
        return disco_set_error(DISCO_E_PROTOCOL, "a message up from rank %d", k);
    size_t need;
    /* The largest message up: a reply frame (DISCO_REPLY_MAX), or as many
     * bytes of text, after the head. */
    disco_status_t st =
        recv_probed(n, &status, NODE_TAG_UP, "a message up", NODE_UP_HEAD + DISCO_REPLY_MAX, &need);
    if (st != DISCO_OK)
        return refuse(n, k);
    uint32_t head[4];
    if (need < NODE_UP_HEAD) {
        disco_set_error(DISCO_E_PROTOCOL, "node %d: a %zu-byte message", k, need);
        return refuse(n, k);
    }
    memcpy(head, n->in, sizeof head);
    const char *payload = n->in + NODE_UP_HEAD;
    size_t len = head[2];
    if (len != need - NODE_UP_HEAD) {
        disco_set_error(DISCO_E_PROTOCOL, "node %d: a message says %zu bytes, has %zu", k, len,
                        need - NODE_UP_HEAD);
        return refuse(n, k);
    }
    struct disco__node_peer *p = &n->peer[k];
    switch (head[0]) {
    case DISCO_NODE_UP_REPLY:
        /* Only the reply waited for: from the node asked, to the command
         * asked, once. Replies share one buffer; any other would stand in
         * for it. */
        if (k != n->asked || head[3] != n->asked_seq || p->replied) {
            if (n->asked < 0)
                disco_set_error(DISCO_E_PROTOCOL,
                                "node %d: a reply nobody asked for (to command #%u; no reply is "
                                "awaited)",
                                k, head[3]);
            else
                disco_set_error(DISCO_E_PROTOCOL,
                                "node %d: a reply nobody asked for (to command #%u; awaited: node "
                                "%d's to command #%u)",
                                k, head[3], n->asked, n->asked_seq);
            return refuse(n, k);
        }
        memcpy(n->reply, payload, len);
        n->reply_len = (uint32_t)len;
        p->replied = true;
        return DISCO_OK;
    case DISCO_NODE_UP_ERRORS:
        keep_errors(n, k, (int32_t)head[1], payload, len);
        return DISCO_OK;
    case DISCO_NODE_UP_BROKEN:
        if (p->broken == DISCO_OK) {
            disco__text_safe(p->why, sizeof p->why, payload, len); /* no terminator sent */
            p->broken =
                disco__status_is_error((int32_t)head[1]) ? (int32_t)head[1] : DISCO_E_PROTOCOL;
        }
        return DISCO_OK;
    case DISCO_NODE_UP_BYE:
        p->bye = true;
        return DISCO_OK;
    default:
        disco_set_error(DISCO_E_PROTOCOL, "node %d: message kind %u", k, head[0]);
        return refuse(n, k);
    }
}

disco_status_t disco__node_check(struct disco__node *n)
{
    disco_status_t st;
    while ((st = take_one(n)) == DISCO_OK)
        ;
    if (st != DISCO_E_AGAIN)
        return st;
    for (int k = 1; k < n->nodes; k++) {
        struct disco__node_peer *p = &n->peer[k];
        if (p->broken != DISCO_OK)
            return disco_set_error((disco_status_t)p->broken, "node %d (workers %d-%d): %s", k,
                                   k * n->wpn, (k + 1) * n->wpn - 1, p->why);
        if (!p->bye && atomic_load_explicit(&p->dead, memory_order_relaxed))
            return disco__node_dead(n, k, NULL);
    }
    return DISCO_OK;
}

disco_status_t disco__node_wait_reply(struct disco__node *n, int node, uint64_t seq, void *buf,
                                      size_t cap, uint32_t *len, int64_t timeout_ns)
{
    if (node <= 0 || node >= n->nodes)
        return disco_set_error(DISCO_E_INVAL, "no node %d of %d", node, n->nodes);
    /* Asked before the batch goes: the reply cannot come before. */
    n->asked = node;
    n->asked_seq = (uint32_t)seq;
    disco_status_t st = disco__node_flush(n);
    int64_t start = disco__node_now();
    long nap = 10000;
    while (st == DISCO_OK && !n->peer[node].replied) {
        if ((st = disco__node_check(n)) != DISCO_OK)
            break;
        if (n->peer[node].replied)
            break;
        int64_t now = disco__node_now();
        if (now - start > timeout_ns) {
            st = disco_set_error(DISCO_E_TIMEOUT, "node %d did not answer within %lld ms", node,
                                 (long long)(timeout_ns / 1000000));
            break;
        }
        disco__node_backoff(now - start, &nap);
    }
    n->asked = -1;
    if (st != DISCO_OK)
        return st;
    n->peer[node].replied = false;
    if (n->reply_len > cap)
        return disco_set_error(DISCO_E_PROTOCOL, "node %d: a %u-byte reply", node, n->reply_len);
    memcpy(buf, n->reply, n->reply_len);
    *len = n->reply_len;
    return DISCO_OK;
}

disco_status_t disco__node_errors(struct disco__node *n, char *detail, size_t cap, size_t *used)
{
    disco__node_check(n); /* a failure of a node is the session's check's to report */
    disco_status_t code = (disco_status_t)n->err_code;
    if (code != DISCO_OK && *used < cap) {
        int w = snprintf(detail + *used, cap - *used, "%s%.*s", *used ? "; " : "", (int)n->err_used,
                         n->err);
        *used += w > 0 ? (size_t)w : 0;
        if (*used > cap)
            *used = cap;
    }
    n->err_code = DISCO_OK;
    n->err_used = 0;
    return code;
}
