/* session_errors.c - the workers' errors as a call returns them: every
 * error box of this node read and cleared, and (on the controller of a
 * session across nodes) what the other nodes' agents reported
 * (session_impl.h). */
#include <stdio.h>

#include "shm/text.h"
#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"

/* Reports (and clears) every worker's pending error: the first code, with
 * all of them in the detail. */
disco_status_t disco__session_collect_errors(struct disco_session *s)
{
    disco_status_t first = DISCO_OK;
    char detail[512];
    size_t used = 0;
    detail[0] = '\0';
    for (int i = 0; i < s->world; i++) {
        struct disco__errbox *b = &s->errbox[i];
        /* Acquire: pairs with the worker's release of full. */
        if (!atomic_load_explicit(&b->full, memory_order_acquire))
            continue;
        /* The box is the worker's to write: its text is copied within its
         * fields (a terminator forced, control bytes escaped) and its code
         * must be an error of ours. */
        char func[sizeof b->func], msg[sizeof b->msg];
        disco__text_safe(func, sizeof func, b->func, sizeof b->func);
        disco__text_safe(msg, sizeof msg, b->msg, sizeof b->msg);
        int32_t code = b->code;
        bool bad = !disco__status_is_error(code);
        if (first == DISCO_OK)
            first = bad ? DISCO_E_PROTOCOL : (disco_status_t)code;
        uint32_t more = atomic_exchange_explicit(&b->dropped, 0, memory_order_relaxed);
        if (used < sizeof detail) {
            int n = snprintf(detail + used, sizeof detail - used, "%sworker %d: %s: %s%s",
                             used ? "; " : "", i + s->gid_base, func,
                             bad ? "(its status is not an error status) " : "", msg);
            used += n > 0 ? (size_t)n : 0;
            if (more != 0 && used < sizeof detail) {
                n = snprintf(detail + used, sizeof detail - used, " (and %u more)", more);
                used += n > 0 ? (size_t)n : 0;
            }
        }
        /* Release: our reads of the box are done before the worker reuses it. */
        atomic_store_explicit(&b->full, 0, memory_order_release);
    }
    if (used > sizeof detail)
        used = sizeof detail;
    if (s->node != NULL) { /* what the other nodes' workers reported */
        disco_status_t remote = disco__node_errors(s->node, detail, sizeof detail, &used);
        if (first == DISCO_OK)
            first = remote;
    }
    if (first == DISCO_OK)
        return DISCO_OK;
    return disco_set_error(first, "%s", detail);
}
