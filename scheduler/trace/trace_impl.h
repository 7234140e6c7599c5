/* trace_impl.h - the controller's side of tracing (internal; see
 * disco/trace.h and workers/core/trace_ring.h). The controller keeps one record
 * per command, indexed by sequence number modulo DISCO_TRACE_CAP, in
 * process memory; only the controller's thread touches it. */
#ifndef DISCO_SCHEDULER_TRACE_IMPL_H
#define DISCO_SCHEDULER_TRACE_IMPL_H

#include <stdint.h>

#include "workers/core/trace_ring.h"

struct disco__ctl_rec {
    uint64_t seq;
    uint32_t code;
    const char *name; /* a registered function's name (lives as long as the process) */
    uint64_t t_enq, t_issued, t_reply; /* ticks; t_reply 0: none */
};

struct disco__ctrace {
    struct disco__ctl_rec *rec;      /* [DISCO_TRACE_CAP] */
    struct disco__trace_ring *rings; /* [world - 1]: workers 1.., in the control segment */
    uint64_t t0;                     /* ticks at open */
    int64_t ns0;                     /* CLOCK_MONOTONIC at open */
};

struct disco_session;

/** Sets up tracing for a session whose segment has the rings formatted.
 *  Returns DISCO_OK, DISCO_E_NOMEM. */
int disco__trace_open(struct disco__ctrace *t, struct disco__trace_ring *rings);

/** Frees the controller's records. */
void disco__trace_close(struct disco__ctrace *t);

/** Writes the trace to $DISCO_TRACE, if set (at close). */
void disco__trace_write_env(struct disco_session *s);

static inline struct disco__ctl_rec *disco__trace_enqueue(struct disco__ctrace *t, uint64_t seq,
                                                          uint32_t code, uint64_t t_enq,
                                                          const char *name)
{
    struct disco__ctl_rec *r = &t->rec[seq % DISCO_TRACE_CAP];
    *r = (struct disco__ctl_rec){.seq = seq, .code = code, .name = name, .t_enq = t_enq};
    return r;
}

#endif
