/* session_break.c - how a session breaks: the first cause kept (and
 * published to the workers and to observers), deaths found by the process
 * table or the node link, kills of workers that stopped answering, and
 * worker 0 giving up a collective (session_impl.h). */
#include <stdarg.h>
#include <stdio.h>

#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"

disco_status_t disco__session_break(struct disco_session *s, disco_status_t status, const char *fmt,
                                    ...)
{
    if (s->state == DISCO_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof s->why, fmt, ap);
        va_end(ap);
        s->state = status;
        if (s->stat != NULL)
            disco__stat_set_why(s->stat, s->why);
        /* Release: why (and the status region's copy, read by observers
         * with acquire) is written before the word. */
        atomic_store_explicit(&s->ctl->broken, status, memory_order_release);
        if (s->chan.kind == DISCO_TRANSPORT_RING && s->world > 1)
            disco_ring_wake_all(&s->chan.cmd);
    }
    return disco_set_error(status, "%s", s->why);
}

/* ---- deaths: the process table reports them, the session decides ---- */

/* The other nodes: a dead or broken node breaks the session, naming it. */
disco_status_t disco__session_check_nodes(struct disco_session *s)
{
    if (s->node == NULL || s->state != DISCO_OK)
        return DISCO_OK;
    disco_status_t st = disco__node_check(s->node);
    if (st == DISCO_OK)
        return DISCO_OK;
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    return disco__session_break(
        s, st == DISCO_E_SYS || st == DISCO_E_PROTOCOL ? st : DISCO_E_WORKER_DIED, "%s", why);
}

disco_status_t disco__session_check(struct disco_session *s)
{
    struct disco__procs_exit dead;
    if (disco__procs_check(&s->procs, &dead) == DISCO_OK)
        return disco__session_check_nodes(s);
    char what[1024];
    snprintf(what, sizeof what, "%s", dead.what);
    struct disco__errbox *b = &s->errbox[dead.worker];
    /* Acquire: pairs with the worker's release; its last words, if any. */
    if (atomic_load_explicit(&b->full, memory_order_acquire)) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " after %s: %s", b->func, b->msg);
    }
    if (s->chan.kind == DISCO_TRANSPORT_RING)
        disco_ring_mark_dead(&s->chan.cmd, (uint32_t)(dead.worker - 1));
    return disco__session_break(s, DISCO_E_WORKER_DIED, "%s", what);
}

void disco__session_kill(struct disco_session *s, int i)
{
    disco__procs_kill(&s->procs, i);
    if (s->chan.kind == DISCO_TRANSPORT_RING)
        disco_ring_mark_dead(&s->chan.cmd, (uint32_t)(i - 1));
}

disco_status_t disco__session_abandon(void *p, disco_status_t st, const int *late, int nlate,
                                      const char *what)
{
    struct disco_session *s = p;
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    char who[256] = "";
    size_t used = 0;
    for (int i = 0; i < nlate; i++) {
        if (late[i] < 1 || late[i] >= s->world)
            continue;
        disco__session_kill(s, late[i]);
        int n = snprintf(who + used, sizeof who - used, "%s%d", used ? ", " : "",
                         late[i] + s->gid_base);
        used += n > 0 && (size_t)n < sizeof who - used ? (size_t)n : 0;
    }
    if (st == DISCO_E_TIMEOUT && used != 0)
        return disco__session_break(s, DISCO_E_TIMEOUT,
                                    "%s: worker %s did not reach the collective within %u ms; "
                                    "killed, so that it cannot touch worker 0's buffers (worker "
                                    "0's wait: %s)",
                                    what, who, s->cfg.call_timeout_ms, why);
    return disco__session_break(s, st, "%s given up by worker 0: %s", what, why);
}
