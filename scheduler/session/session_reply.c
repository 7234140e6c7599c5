/* session_reply.c - the controller's side of a reply: waiting for a
 * worker's answer to a command (here, on another node, or worker 0's,
 * already in s->reply), decoding it, and what a failed wait or link means
 * for the session; the wait every call uses. */
#include <stdio.h>
#include <unistd.h>

#include "shm/text.h"
#include "shm/wait_internal.h"
#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"

/* The wait for one call: the config's spin, the call timeout (counted from
 * when the wait starts waiting), worker checks. */
const disco_wait_t *disco__session_call_wait(struct disco_session *s)
{
    s->wait.deadline_ns = 0;
    s->wait.timeout_ns = (int64_t)s->cfg.call_timeout_ms * 1000000;
    return &s->wait;
}

/* A failure of the link to the other nodes: a node found dead or broken
 * is the cause (disco__session_check_nodes); else the failure itself breaks the session,
 * since the nodes may now disagree on what was sent. */
disco_status_t disco__session_node_failed(struct disco_session *s, disco_status_t st)
{
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    if (disco__session_check_nodes(s) != DISCO_OK)
        return disco_set_error(s->state, "%s", s->why);
    return disco__session_break(s, st, "%s", why);
}

/* A wait for worker's reply to what that failed with st: past the
 * deadline the worker is killed; a closed channel means it is dying, and
 * its death (as the kernel reports it) is the cause. */
disco_status_t disco__session_reply_failed(struct disco_session *s, int worker, disco_status_t st,
                                           const char *what)
{
    if (st == DISCO_E_TIMEOUT) {
        disco__session_kill(s, worker);
        return disco__session_break(s, DISCO_E_TIMEOUT,
                                    "worker %d did not answer %s within %u ms; it was killed",
                                    worker + s->gid_base, what, s->cfg.call_timeout_ms);
    }
    if (st == DISCO_E_CLOSED || st == DISCO_E_TRUNCATED) {
        /* A pipe closed: the worker is dying; wait for the kernel to say how. */
        for (int i = 0; i < 100 && s->state == DISCO_OK; i++) {
            if (disco__session_check(s) != DISCO_OK)
                break;
            usleep(10000);
        }
        if (s->state == DISCO_OK)
            disco__session_break(s, st, "worker %d closed its channel", worker + s->gid_base);
        return disco_set_error(s->state, "%s", s->why);
    }
    return st;
}

disco_status_t disco__session_wait_reply(struct disco_session *s, int worker, int64_t token,
                                         const char *what, size_t w0_len, disco_value_t *value_out)
{
    uint32_t len = (uint32_t)w0_len;
    uint64_t seen = 0;        /* with tracing: when the wait found the reply (0: it did not wait) */
    if (worker >= s->world) { /* on another node: its agent forwards the reply */
        disco_status_t st =
            disco__node_wait_reply(s->node, worker / s->world, s->seq, s->reply, DISCO_REPLY_MAX,
                                   &len, (int64_t)s->cfg.call_timeout_ms * 1000000);
        if (st != DISCO_OK)
            return disco__session_node_failed(s, st);
    } else if (worker != 0) {
        const disco_wait_t *w = disco__session_call_wait(s);
        s->wait_hook.found_at = disco__trace_slot(&s->trace, &seen);
        /* Relaxed: a monitor's words (wstat.h). */
        atomic_store_explicit(&s->stat->wait_what, DISCO_CW_REPLY, memory_order_relaxed);
        atomic_store_explicit(&s->stat->wait_worker, worker, memory_order_relaxed);
        disco_status_t st =
            disco__chan_recv_reply(&s->chan, worker, s->reply, DISCO_REPLY_MAX, &len, w);
        s->wait_hook.found_at = NULL;
        if (st != DISCO_OK)
            return disco__session_reply_failed(s, worker, st, what);
    }
    disco__trace_cmd_replied(&s->trace, s->seq, seen); /* it answers the last command issued */
    disco_frame_hdr_t h;
    disco_value_t v[3];
    disco_status_t st = disco_frame_decode(s->reply, len, &h, v, 3);
    if (st != DISCO_OK || h.nargs < 1 || v[0].type != DISCO_T_INT || v[0].v.i != token)
        return disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: bad reply to %s", worker,
                                    what);
    if (h.code == DISCO_REPLY_ERROR && h.nargs == 3 && v[1].type == DISCO_T_INT &&
        v[2].type == DISCO_T_STR) {
        /* The worker's words: bounded, escaped, and a code of ours. */
        char msg[DISCO_ERR_MSG_MAX];
        disco__text_safe(msg, sizeof msg, v[2].v.str, (size_t)v[2].len + 1);
        if (!disco__status_is_error(v[1].v.i))
            return disco__session_break(s, DISCO_E_PROTOCOL,
                                        "worker %d: error reply with status %lld: %s", worker,
                                        (long long)v[1].v.i, msg);
        return disco_set_error((disco_status_t)v[1].v.i, "worker %d: %s", worker, msg);
    }
    if (h.code != DISCO_REPLY_OK)
        return disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: reply code %u to %s", worker,
                                    h.code, what);
    if (value_out != NULL) {
        if (h.nargs != 2)
            return disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: no value in reply",
                                        worker);
        return disco_value_copy(&v[1], value_out);
    }
    return DISCO_OK;
}
