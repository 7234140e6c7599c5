/* session_agent.c - what a node's agent asks of its node's session
 * (scheduler/node/node_agent.c): relaying the controller's command frames
 * as they are, and waiting for its workers' replies (session_impl.h). */
#include <limits.h>
#include <stdio.h>

#include "scheduler/session/session_impl.h"

int disco__session_asks(const disco_frame_hdr_t *h, const disco_value_t *args)
{
    int64_t id = -1;
    if (h->code == DISCO_CMD_SYNC && h->nargs >= 1 && args[0].type == DISCO_T_INT)
        id = args[0].v.i;
    else if ((h->code == DISCO_CMD_DEBUG_GET || h->code == DISCO_CMD_DEBUG_SET) && h->nargs >= 2 &&
             args[1].type == DISCO_T_INT)
        id = args[1].v.i;
    /* Bounded before narrowing: the workers compare the int64 itself, so an
     * id past INT_MAX is none of them, and must not become one here
     * (gid_base + 2**32 would be this node's worker 0; test_node.c,
     * test_relay_asks_wide). */
    return id >= 0 && id <= INT_MAX ? (int)id : -1;
}

disco_status_t disco__session_relay(struct disco_session *s, const void *frame, size_t len,
                                    int *asks_out, size_t *w0_len)
{
    *asks_out = -1;
    *w0_len = 0;
    disco_frame_hdr_t h;
    disco_value_t args[DISCO_MAX_ARGS];
    disco_status_t st;
    if (len > s->chan.max_msg ||
        (st = disco_frame_decode(frame, len, &h, args, DISCO_MAX_ARGS)) != DISCO_OK) {
        if (s->state != DISCO_OK)
            return disco__session_usable(s);
        return disco__session_break(s, DISCO_E_PROTOCOL,
                                    "a command frame from the controller does not decode: %s",
                                    disco_last_error());
    }
    if (h.code == DISCO_CMD_SHUTDOWN) /* the agent closes the node itself */
        return disco_set_error(DISCO_E_SHUTDOWN, "the controller ended the session");
    if ((st = disco__session_ready(s)) != DISCO_OK)
        return st;
    *asks_out = disco__session_asks(&h, args);
    s->seq = h.seq;
    disco__chan_prepare_bcast(&s->chan);
    return disco__session_deliver(s, &h, args, frame, len, NULL, w0_len);
}

disco_status_t disco__session_recv_reply(struct disco_session *s, int local, uint32_t *len)
{
    disco_status_t st = disco__chan_recv_reply(&s->chan, local, s->reply, DISCO_REPLY_MAX, len,
                                               disco__session_call_wait(s));
    return st == DISCO_OK
               ? DISCO_OK
               : disco__session_reply_failed(s, local, st, "a command of the controller's");
}
