/*
 * trace_ring.h - per-worker trace rings in the control segment (internal).
 *
 * Each worker stamps every command it executes (start, end) into its own
 * ring: one writer (the worker), read by the controller when it exports a
 * trace. Stamps are trace-clock ticks (shm/ticks.h), converted to
 * nanoseconds by the controller. The ring keeps the last DISCO_TRACE_CAP
 * records; older ones are overwritten.
 *
 * Protocol (a seqlock per lap):
 *   1. The worker claims record h = head: it stores claimed = h + 1, then
 *      writes record h % cap field by field with release stores (T0), then
 *      publishes head = h + 1 (release, T1).
 *   2. The reader loads head (acquire, T2: pairs with T1, so the records
 *      below it are complete), copies records [head - cap, head) with
 *      acquire loads (T3), then loads claimed. Records the writer may have
 *      started to reuse (index < claimed - cap) are dropped: if the copy
 *      read any field of a reuse, T0/T3 make that reuse's claim (stored
 *      before it) visible to the load of claimed.
 * (Per-field release/acquire rather than fences: ThreadSanitizer does not
 * model fences, and on x86 both are plain moves.)
 * Record fields are relaxed atomics, so a record overwritten during the
 * copy is a stale value to drop, never a data race.
 *
 * When stamps are taken (the overlap rule). Tracing must not lengthen the
 * path from a command's arrival to its reply, and a clock read costs about
 * as much as a cache miss. So every stamp is read where the core is already
 * stalled on memory, and the two overlap:
 *   - start, a command already waiting (a busy stream): the previous
 *     command's end stamp, no clock read at all;
 *   - start, a command we waited for: the wait loop's own clock read, taken
 *     before each check of the ring (shm/wait.c, found_at), so the read
 *     overlaps the wait for the slot's line rather than following it;
 *   - end: read after the reply went out and after the fetch of the next
 *     command's slot was started (disco__chan_prepare_recv), so the read
 *     overlaps that fetch;
 *   - the controller's enqueue stamp: read by the broadcast as it publishes
 *     the frame (disco__ring_write_stamped), overlapping the publishing
 *     stores' wait for their line.
 * A finished record is not written to the ring at once: it is held
 * (struct disco__trace_writer) and written off the path of the next reply,
 * right after a reply of the command's own, or when the worker goes idle.
 * tests/test_trace.c: test_known_sequence (one record per command, in issue
 * order), test_wrap_around (the ring keeps the newest).
 */
#ifndef DISCO_WORKERS_TRACE_RING_H
#define DISCO_WORKERS_TRACE_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shm/ticks.h"
#include "workers/core/protocol.h"

#define DISCO_TRACE_CAP 8192u /* records per worker: 256 KiB */

struct disco__trace_rec {
    _Atomic uint64_t seq;  /* command sequence number */
    _Atomic uint64_t info; /* disco__trace_info: code, function register, time parked */
    _Atomic uint64_t t_start;
    _Atomic uint64_t t_end;
};

/* A record's info word, so that a record stays 32 bytes (two a cache
 * line): the command code (8 bits), the called register (24 bits: a
 * register id is below 2^24, worker.c), and the microseconds parked in the
 * wait before the command (32 bits, saturated at about 71 minutes). */
static inline uint64_t disco__trace_info(uint32_t code, uint64_t func, uint64_t park_ns)
{
    uint64_t us = park_ns / 1000u;
    return (uint64_t)(code & 0xffu) << 56 | (func & 0xffffffu) << 32 |
           (us > 0xffffffffu ? 0xffffffffu : us);
}

static inline uint32_t disco__trace_info_code(uint64_t info)
{
    return (uint32_t)(info >> 56);
}

static inline uint64_t disco__trace_info_park_ns(uint64_t info)
{
    return (info & 0xffffffffu) * 1000u;
}

struct disco__trace_ring {
    _Alignas(64) _Atomic uint64_t head; /* records ever written */
    _Atomic uint64_t claimed;           /* records ever started */
    uint32_t cap;
    uint32_t on; /* 0: tracing is off for this session */
    _Alignas(64) struct disco__trace_rec rec[DISCO_TRACE_CAP];
};

/** The function register a command calls (0 for other commands: its head,
 *  workers/core/protocol.h). */
static inline uint64_t disco__trace_func(const disco_frame_hdr_t *h, const disco_value_t *args)
{
    struct disco__call_head hd;
    return disco__call_head_read(h->code, args, h->nargs, &hd) ? hd.func : 0u;
}

/** Appends one record with info word info (the ring's only writer). */
static inline void disco__trace_put_info(struct disco__trace_ring *r, uint64_t seq, uint64_t info,
                                         uint64_t t_start, uint64_t t_end)
{
    /* Relaxed: only this worker writes head. */
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* Relaxed: ordered before the field stores by their release (T0). */
    atomic_store_explicit(&r->claimed, h + 1, memory_order_relaxed);
    struct disco__trace_rec *x = &r->rec[h % DISCO_TRACE_CAP];
    /* T0: release, each pairs with T3 in the reader. */
    atomic_store_explicit(&x->seq, seq, memory_order_release);
    atomic_store_explicit(&x->info, info, memory_order_release);
    atomic_store_explicit(&x->t_start, t_start, memory_order_release);
    atomic_store_explicit(&x->t_end, t_end, memory_order_release);
    /* T1: release, pairs with T2 in the reader. */
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

/** Appends one command record (the ring's only writer). */
static inline void disco__trace_put(struct disco__trace_ring *r, uint64_t seq, uint32_t code,
                                    uint64_t func, uint64_t t_start, uint64_t t_end,
                                    uint64_t park_ns)
{
    disco__trace_put_info(r, seq, disco__trace_info(code, func, park_ns), t_start, t_end);
}

/*
 * Nested records: the in-worker collectives (<disco/comm.h>) of a command.
 * Each collective a worker function calls is stamped as a record of its
 * own, nested in the command's slice: code DISCO__TRACE_NESTED (no command
 * has it: protocol.h's codes are below DISCO_CMD_COUNT), seq the command's,
 * the function bits its kind (8 bits) and its index among the command's
 * collectives (16 bits: collective.h, Identity), the low 32 bits the group
 * (16 bits: its index, or 0xffff for the whole world) and the members (16
 * bits). Members of one collective share (seq, index, group): trace.c
 * pairs them into flows. A send or a receive (disco_ctx_send,
 * disco_ctx_recv; kinds SEND and RECV) is a record of the same shape on
 * each of its two workers: the group bits hold the peer (the other
 * worker's id in the session), the members 2, and the index the sender's
 * post ticket that the receive claimed (collective.h, S1/R1), as
 * (ticket - 1) % 65535 + 1, or 0 when the call failed before a post was
 * made or claimed: a send and its receive share (seq, index) with each
 * other's worker as peer, so the exporter pairs them into a flow
 * (tests/test_trace_p2p.c).
 *   - Writer: the worker's own thread, as the collective returns, straight
 *     into the ring with T0/T1 (disco__trace_put_info): the thread running
 *     the function is the thread of the worker loop, the ring's one
 *     writer, so the protocol above is unchanged. A nested record lands
 *     before its command's record (held until the command ends) and after
 *     earlier commands' records, or before the previous command's held one:
 *     readers take nested records apart by their code (trace.c copy_ring)
 *     and look past them for the last command recorded (trace.c
 *     last_recorded).
 *   - Worker 0 (the controller's thread) has no ring for commands; its
 *     nested records go to a ring of its own in the controller's memory
 *     (struct disco__ctrace.w0_ring), written and read by that one thread.
 *   - Clock reads: two a collective, beside the collective's own cache
 *     misses on the meeting's lines (a microsecond or more): the overlap
 *     rule is for the path of a command to its reply, which a worker
 *     function's collectives are part of only as its compute is.
 * tests/test_trace.c: test_nested_collectives.
 */
#define DISCO__TRACE_NESTED  0xffu
#define DISCO__TRACE_NOGROUP 0xffffu /* a world collective */

/* Kinds of nested records (their names: disco__trace_kind_name). */
enum {
    DISCO__TK_ALLREDUCE = 1,
    DISCO__TK_ALLGATHER,
    DISCO__TK_BROADCAST,
    DISCO__TK_BARRIER,
    DISCO__TK_SEND, /* point-to-point: the group bits are the peer */
    DISCO__TK_RECV
};

static inline const char *disco__trace_kind_name(uint32_t kind)
{
    static const char *const names[] = {"?",       "allreduce", "allgather", "broadcast",
                                        "barrier", "send",      "recv"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

static inline uint64_t disco__trace_nested_info(uint32_t kind, uint32_t index, uint32_t group,
                                                uint32_t members)
{
    return (uint64_t)DISCO__TRACE_NESTED << 56 | (uint64_t)(kind & 0xffu) << 48 |
           (uint64_t)(index & 0xffffu) << 32 | (uint64_t)(group & 0xffffu) << 16 |
           (members & 0xffffu);
}

/* Whether kind is a send's or a receive's (its group bits are the peer). */
static inline bool disco__trace_kind_p2p(uint32_t kind)
{
    return kind == DISCO__TK_SEND || kind == DISCO__TK_RECV;
}

/* A post ticket (>= 1) as a point-to-point record's index: 1..65535. */
static inline uint32_t disco__trace_p2p_index(uint64_t ticket)
{
    return ticket == 0 ? 0u : (uint32_t)((ticket - 1) % 65535u) + 1u;
}

static inline uint32_t disco__trace_nested_kind(uint64_t info)
{
    return (uint32_t)(info >> 48) & 0xffu;
}

static inline uint32_t disco__trace_nested_index(uint64_t info)
{
    return (uint32_t)(info >> 32) & 0xffffu;
}

static inline uint32_t disco__trace_nested_group(uint64_t info)
{
    return (uint32_t)(info >> 16) & 0xffffu;
}

static inline uint32_t disco__trace_nested_members(uint64_t info)
{
    return (uint32_t)info & 0xffffu;
}

/** A worker's side of tracing: its ring and the record of the command it
 *  last finished, held until it is off the reply path (see the overlap rule
 *  above). Local to the worker's loop; ring NULL: tracing off. */
struct disco__trace_writer {
    struct disco__trace_ring *ring;
    uint64_t last_end; /* end stamp of the previous command; 0 before the first */
    uint64_t t_start;  /* start stamp of the command in flight */
    uint64_t park_ns;  /* nanoseconds parked in the wait before it */
    bool held;         /* rec is finished and not in the ring yet */
    struct {
        uint64_t seq, func, t_start, t_end, park_ns;
        uint32_t code;
    } rec;
};

/** Writes the held record, if any, into the ring. Call it when the worker
 *  is about to wait (idle time) and when the loop ends. */
static inline void disco__trace_flush(struct disco__trace_writer *t)
{
    if (t->held)
        disco__trace_put(t->ring, t->rec.seq, t->rec.code, t->rec.func, t->rec.t_start,
                         t->rec.t_end, t->rec.park_ns);
    t->held = false;
}

/** Stamp start: the command just received started at `at` (the previous end
 *  for a command already waiting, else the wait's found stamp) after
 *  park_ns parked in the wait for it (the wait loop's count, wstat.h). */
static inline void disco__trace_start(struct disco__trace_writer *t, uint64_t at, uint64_t park_ns)
{
    t->t_start = at;
    t->park_ns = park_ns;
}

/** Stamp end: the command (seq, code, calling register func) is done and its
 *  reply, if any, has gone out; the caller has started the fetch of the next
 *  command's slot. Reads the clock, writes the previously held record, holds
 *  this one, and writes it too when the command replied (the next reply is
 *  then not ours to delay). */
static inline void disco__trace_end(struct disco__trace_writer *t, uint64_t seq, uint32_t code,
                                    uint64_t func, bool replied)
{
    t->last_end = disco__ticks();
    disco__trace_flush(t);
    t->rec.seq = seq;
    t->rec.code = code;
    t->rec.func = func;
    t->rec.t_start = t->t_start;
    t->rec.t_end = t->last_end;
    t->rec.park_ns = t->park_ns;
    t->held = true;
    if (replied)
        disco__trace_flush(t);
}

#endif
