/* view.h - a snapshot of a session's status region (internal; see
 * disco/observe.h and workers/core/wstat.h). Used by the session itself
 * (the watchdog, disco_session_view) and by observers in other processes,
 * which map the segment read-only: every number read from the region is
 * checked before it indexes or sizes anything. */
#ifndef DISCO_SCHEDULER_OBSERVE_VIEW_H
#define DISCO_SCHEDULER_OBSERVE_VIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "disco/observe.h"
#include "workers/core/protocol.h"
#include "workers/core/wstat.h"

/* Where a session's status lies: its header and status region (checked
 * by disco__ctl_read or made by the session itself). */
struct disco__view_src {
    const struct disco__ctl *ctl;
    const struct disco__stat_hdr *stat;
    int world;
    bool tracing;
    int gid_base; /* disco__view_take: ctl's, read once and bounded */
};

/** Takes a snapshot of src into *out: allocates out->workers. cpu_s is
 *  left -1 (an observer fills it from /proc). Returns DISCO_OK,
 *  DISCO_E_NOMEM. */
disco_status_t disco__view_take(const struct disco__view_src *src, disco_session_view_t *out);

/** Copies the name recorded for the function whose key is key into buf
 *  (size bytes) if the name table holds it (S4 in wstat.h); else
 *  "function <key in hex>". */
void disco__view_func_name(const struct disco__stat_hdr *h, uint64_t key, char *buf, size_t size);

#endif
