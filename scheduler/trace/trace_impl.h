/* trace_impl.h - the controller's side of tracing (internal; see
 * disco/trace.h and workers/core/trace_ring.h). The controller keeps one record
 * per command, indexed by sequence number modulo DISCO_TRACE_CAP, in
 * process memory; only the controller's thread touches it.
 *
 * A session stamps each command with two calls, both static inline and
 * free when tracing is off: disco__trace_cmd_issued once the command is
 * broadcast and worker 0 has run it, disco__trace_cmd_replied when a
 * worker's reply is in. The enqueue and reply times themselves are read
 * inside the broadcast and the wait (disco__trace_slot), where the clock
 * read overlaps a store's wait for its cache line: the overlap rule, argued
 * once in workers/core/trace_ring.h. */
#ifndef DISCO_SCHEDULER_TRACE_IMPL_H
#define DISCO_SCHEDULER_TRACE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "disco/trace.h"
#include "workers/core/trace_ring.h"

struct disco__ctl_rec {
    uint64_t seq;
    uint32_t code;
    const char *name; /* a called function's name (lives as long as the process); NULL: the
                         command's own name (disco__cmd_name) */
    uint64_t t_enq, t_issued, t_reply; /* ticks; t_reply 0: none */
};

#define DISCO_TRACE_MARKS 16 /* watchdog reports kept (the first ones) */

struct disco__ctl_mark {
    uint64_t t; /* ticks */
    char text[DISCO_TRACE_MARK_MAX];
};

struct disco__ctrace {
    struct disco__ctl_rec *rec;    /* [DISCO_TRACE_CAP]; NULL: tracing off */
    struct disco__ctl_mark *marks; /* [DISCO_TRACE_MARKS] */
    size_t nmarks;
    struct disco__trace_ring *rings;   /* [world - 1]: workers 1.., in the control segment */
    struct disco__trace_ring *w0_ring; /* worker 0's nested records (trace_ring.h), this
                                          process's memory: its one thread writes and reads */
    uint64_t t0;                       /* ticks at open */
    int64_t ns0;                       /* CLOCK_MONOTONIC at open */
};

/** Sets up tracing for a session whose segment has the rings formatted.
 *  Returns DISCO_OK, DISCO_E_NOMEM. */
int disco__trace_open(struct disco__ctrace *t, struct disco__trace_ring *rings);

/** Frees the controller's records. */
void disco__trace_close(struct disco__ctrace *t);

/** Snapshots the trace of a session of world workers whose last command
 *  was last_seq into *out (free with disco_trace_free). Gives the workers
 *  up to 10 ms to record the commands issued so far, unless the session is
 *  not healthy. Returns DISCO_OK, DISCO_E_INVAL (tracing off),
 *  DISCO_E_NOMEM. */
disco_status_t disco__trace_snapshot(const struct disco__ctrace *t, int world, uint64_t last_seq,
                                     bool healthy, disco_trace_t **out);

/** Marks the trace now with text (a watchdog report; cut to
 *  DISCO_TRACE_MARK_MAX). Keeps the first DISCO_TRACE_MARKS. No-op with
 *  tracing off. */
void disco__trace_mark(struct disco__ctrace *t, const char *text);

/** Writes the trace (as disco__trace_snapshot) to $DISCO_TRACE, if set and
 *  tracing is on; says on stderr if it cannot. */
void disco__trace_write_env(const struct disco__ctrace *t, int world, uint64_t last_seq,
                            bool healthy);

/** Where the broadcast or the reply wait stores its stamp: slot with
 *  tracing on, NULL (no clock read) with it off. */
static inline uint64_t *disco__trace_slot(const struct disco__ctrace *t, uint64_t *slot)
{
    return t->rec != NULL ? slot : NULL;
}

/** Stamps command seq as issued now: broadcast at t_enq (ticks) and run by
 *  worker 0, inline, since. name: the called function's, or NULL. Returns
 *  the stamp (ticks; 0 with tracing off). The
 *  record is written after the broadcast, since its stores (a fresh line
 *  every command or so) would otherwise sit before the broadcast's fence
 *  and delay the command. */
static inline uint64_t disco__trace_cmd_issued(struct disco__ctrace *t, uint64_t seq, uint32_t code,
                                               const char *name, uint64_t t_enq)
{
    if (t->rec == NULL)
        return 0;
    uint64_t now = disco__ticks();
    t->rec[seq % DISCO_TRACE_CAP] = (struct disco__ctl_rec){
        .seq = seq, .code = code, .name = name, .t_enq = t_enq, .t_issued = now};
    return now;
}

/** Stamps the reply to command seq: at found (ticks the wait found it), or
 *  now where found is 0 (worker 0's reply, there all along). */
static inline void disco__trace_cmd_replied(struct disco__ctrace *t, uint64_t seq, uint64_t found)
{
    if (t->rec != NULL)
        t->rec[seq % DISCO_TRACE_CAP].t_reply = found != 0 ? found : disco__ticks();
}

#endif
