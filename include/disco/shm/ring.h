/*
 * disco/shm/ring.h - lock-free message rings in shared memory.
 *
 * One writer, N readers (N = 1 is the single-producer/single-consumer reply
 * ring; see the disco_spsc_* names below). Every reader sees every message,
 * in order, through its own cursor. Messages are byte strings of 0 to
 * max_msg bytes; a message longer than one slot's payload spans consecutive
 * slots, published and consumed slot by slot, so it may even be longer than
 * the ring.
 *
 * Layout (all in one caller-provided block of shared memory, offsets only):
 *   line 0   header: magic, layout version, geometry (read-only after init)
 *   line 1   writer line: head (next position to write)
 *   line 2   data queue: readers park here
 *   line 3   space queue: the writer parks here
 *   2N lines two per reader: the published line (cursor: where the writer
 *            may write up to, alive flag, pid) and the reader's own line
 *            (next: the position it reads next)
 *   slots    nslots x slot_size; each slot: seq, len, flags, payload
 *
 * Positions are free-running 64-bit counters, masked only to index a slot;
 * unsigned subtraction makes wrap-around harmless. A slot's seq is the
 * position last written into it: the reader at position p waits for
 * seq == p, and the writer may write position p only when every live reader's
 * cursor is above p - nslots.
 *
 * Protocol (labels used in ring.c):
 *   writer, per slot at position p          reader at position p
 *   W1 cursors (acquire) until p - min      R1 slot.seq == p (acquire)
 *      < nslots; dead readers skipped          pairs with W2
 *      pairs with R2                        R2 copy the payload, then
 *   W2 write payload, slot.seq = p             cursor = p + 1 (release)
 *      (release) pairs with R1              R3 wake the writer if parked
 *   W3 wake readers if parked
 * R2 -> W1 means the writer overwrites a slot only after every live reader
 * has finished copying it out; W2 -> R1 means a reader sees a whole payload.
 *
 * Publishing in batches (cfg.batch > 1): a reader keeps the position it
 * reads next on a line of its own and does R2 + R3 only every batch slots,
 * and always before it waits for a slot (so a writer waiting for room never
 * waits on a reader that waits for data). R3's fence, and the writer pulling
 * a cursor line the reader keeps writing, are most of what a message costs a
 * reader when messages stream (issue 21); the price is that room appears
 * batch slots at a time while the reader has data, which a writer that
 * waits for room does not notice. batch 1 is the exact protocol.
 *
 * Thread safety: one writer thread at a time; each reader index used by one
 * thread at a time; different reader indexes may run concurrently.
 */
#ifndef DISCO_RING_H
#define DISCO_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "disco/status.h"
#include "disco/shm/wait.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_RING_MAGIC       0x474e495243534944ULL /* "DISCRING" */
#define DISCO_RING_LAYOUT      2u                    /* layout version in the ring's header */
#define DISCO_CACHE_LINE       64u                   /* the cache line size disco pads to */
#define DISCO_RING_SLOT_HDR    16u                   /* seq, len, flags */
#define DISCO_RING_MAX_READERS 256u                  /* readers a ring holds at most */

/* Geometry, fixed at init. */
typedef struct disco_ring_config {
    uint32_t nslots;    /* power of two, >= 2 */
    uint32_t slot_size; /* multiple of DISCO_CACHE_LINE, >= DISCO_CACHE_LINE */
    uint32_t nreaders;  /* 1 .. DISCO_RING_MAX_READERS */
    uint32_t max_msg;   /* longest message accepted, bytes */
    uint32_t batch;     /* readers publish their cursor every batch slots
                           (and before waiting); 0 or 1: every slot; at most
                           nslots / 2 */
    uint64_t start_pos; /* first position (tests start near 2^32 or 2^64) */
} disco_ring_config_t;

/* Process-local handle onto a ring in shared memory; the caller owns it. */
typedef struct disco_ring {
    /* the ring's header in shared memory */
    struct disco_ring_shared *sh;
    /* its first slot */
    unsigned char *slots;
    /* nslots - 1 */
    uint64_t mask;
    /* bytes a slot, header included */
    uint32_t slot_size;
    uint32_t payload; /* bytes of payload per slot */
    /* readers, fixed at init */
    uint32_t nreaders;
    /* longest message, bytes */
    uint32_t max_msg;
    uint32_t batch;    /* >= 1 (disco_ring_config_t) */
    uint64_t min_seen; /* writer only: lowest live cursor at the last scan */
} disco_ring_t;

/** Bytes of shared memory a ring with this geometry needs, or 0 if the
 *  geometry is invalid. Thread-safe. */
size_t disco_ring_footprint(const disco_ring_config_t *cfg);

/** Formats a ring in mem (mem_size bytes, cache-line aligned) and fills a
 *  handle for it. Every reader starts alive at cfg->start_pos. Not
 *  thread-safe: call before sharing. Returns DISCO_OK, DISCO_E_INVAL (bad
 *  geometry, misaligned or too small memory). */
disco_status_t disco_ring_init(void *mem, size_t mem_size, const disco_ring_config_t *cfg,
                               disco_ring_t *ring_out);

/** Fills a handle for a ring another process formatted at mem (in this
 *  process's mapping). Thread-safe. Returns DISCO_OK, DISCO_E_BAD_MAGIC (not
 *  a ring, other layout version, or a geometry larger than mem_size). */
disco_status_t disco_ring_attach(void *mem, size_t mem_size, disco_ring_t *ring_out);

/** Writes one message of len bytes (0 .. max_msg). Blocks per w while the
 *  ring is full. Writer only. Returns DISCO_OK; DISCO_E_MSG_TOO_BIG (len >
 *  max_msg; nothing written); DISCO_E_AGAIN (w->no_wait and no room for the
 *  whole message -- for one longer than the ring: the ring is not empty;
 *  nothing written; once begun, the remaining slots wait per the rest of w);
 *  DISCO_E_TIMEOUT / abort / callback status from the wait. A wait error
 *  after the first slot of a spanning message leaves the message half
 *  written: the ring is then unusable (readers get the error from their own
 *  waits), so the caller treats it as fatal. */
disco_status_t disco_ring_write(disco_ring_t *r, const void *msg, uint32_t len,
                                const disco_wait_t *w);

/** Starts taking the cache line of the slot the next write begins in, so
 *  that the write's stores do not wait for it (call it before other work
 *  that leads up to the write). Writer only; changes nothing visible. */
void disco_ring_prefetch_write(const disco_ring_t *r);

/** Starts reading the cache line of the slot reader's next message begins
 *  in, so that the read's first check finds it on its way (call it before
 *  other work that leads up to the read). Changes nothing visible. */
void disco_ring_prefetch_read(const disco_ring_t *r, uint32_t reader);

/** Reads the next message for reader into buf (cap bytes) and sets *len_out.
 *  Blocks per w while there is none. Returns DISCO_OK; DISCO_E_BUF_TOO_SMALL
 *  (message longer than cap: *len_out is set to its length and it stays
 *  unread); DISCO_E_AGAIN (w->no_wait and no whole message there -- for one
 *  longer than the ring: not begun; nothing consumed; once begun, the
 *  remaining slots wait per the rest of w); DISCO_E_BROKEN
 *  (this reader was marked dead and lapped); DISCO_E_INVAL (bad reader
 *  index); or the wait's status. */
disco_status_t disco_ring_read(disco_ring_t *r, uint32_t reader, void *buf, uint32_t cap,
                               uint32_t *len_out, const disco_wait_t *w);

/** Records the pid of the process that reads as `reader` (for diagnostics
 *  and liveness checks). Thread-safe. */
void disco_ring_set_reader_pid(disco_ring_t *r, uint32_t reader, pid_t pid);

/** Pid recorded for reader, 0 if none. Thread-safe. */
pid_t disco_ring_reader_pid(const disco_ring_t *r, uint32_t reader);

/** Marks reader dead: the writer stops waiting for it. It cannot come back.
 *  Wakes a parked writer. Thread-safe. */
void disco_ring_mark_dead(disco_ring_t *r, uint32_t reader);

/** Whether reader is alive. Thread-safe. */
bool disco_ring_reader_alive(const disco_ring_t *r, uint32_t reader);

/** Index of the live reader furthest behind (the one a full ring waits on),
 *  or UINT32_MAX if none is alive. Thread-safe. */
uint32_t disco_ring_slowest_reader(const disco_ring_t *r);

/** Wakes every parked reader and writer (after setting an abort word they
 *  watch). Thread-safe. */
void disco_ring_wake_all(disco_ring_t *r);

/* Single producer, single consumer: the same ring with one reader. */
static inline disco_status_t disco_spsc_write(disco_ring_t *r, const void *msg, uint32_t len,
                                              const disco_wait_t *w)
{
    return disco_ring_write(r, msg, len, w);
}

/* disco_ring_read of reader 0. */
static inline disco_status_t disco_spsc_read(disco_ring_t *r, void *buf, uint32_t cap,
                                             uint32_t *len_out, const disco_wait_t *w)
{
    return disco_ring_read(r, 0, buf, cap, len_out, w);
}

#ifdef __cplusplus
}
#endif
#endif
