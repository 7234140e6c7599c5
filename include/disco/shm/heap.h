/*
 * disco/shm/heap.h - a heap in shared memory for tensor data, used by many
 * processes at once.
 *
 * The heap lives in a caller-provided block of memory inside a segment
 * (disco/shm/segment.h) that every worker maps: inherited across fork, or
 * attached by fd in an exec'd worker, where the mapping lands at a different
 * address. Nothing in the heap holds a pointer: blocks are named by their
 * offset from the start of the heap's memory, and disco_heap_ptr() turns an
 * offset into this process's address. Offset 0 is never a block (the heap's
 * header is there), so 0 serves as "no block".
 *
 * Error rule (as everywhere in disco): functions return a disco_status_t,
 * output arguments are written only on success, and the failing call records
 * its context in disco_last_error().
 *
 * Layout (offsets from mem):
 *   0          header: magic, layout version, geometry, the lock, statistics,
 *              free-list heads (one per size class) and their bitmap
 *   arena_off  blocks, back to back up to mem_size (rounded down to 64):
 *              each is a 64-byte header then its data. A block's data is
 *              64-byte aligned (larger on request, up to 4096) and a block's
 *              size is a multiple of 64, at least 128.
 *
 * Block header: tag (free / used / wiped), owner, its own offset, size, the
 * size of the block before it, free-list links and the bytes requested.
 * The chain of sizes from arena_off is the truth; everything else (the free
 * lists, the previous-size fields, the statistics) is derived from it and can
 * be rebuilt by one walk.
 *
 * Locking and process death. One pthread mutex in the header, process-shared
 * and robust, guards all metadata; each call holds it for O(1) work (reclaim
 * and recovery walk the blocks), so a caller that finds it taken retries
 * with trylock a while (pause, then sched_yield) before sleeping in the
 * kernel. The sleep is a timed one, a park slice at a time, and between
 * slices the caller looks at the exits of the handle's wait (its deadline,
 * abort word and liveness callback: disco_heap_set_wait), because a holder
 * that is stopped (SIGSTOP, a debugger, a cgroup freezer) is not dead and
 * the kernel never hands its lock on. When its holder dies (SIGKILL, OOM kill, exit), the kernel
 * hands the mutex on with EOWNERDEAD and the next caller recovers before doing its own work (a
 * recoverer that dies too leaves the same job to the next):
 *   1. walks the size chain, checking each header (a bad one marks the heap
 *      broken: every later call fails with DISCO_E_BROKEN);
 *   2. merges neighbouring free blocks a crash left unmerged and rewrites
 *      the previous-size fields;
 *   3. rebuilds the free lists and the statistics;
 *   4. calls pthread_mutex_consistent() and goes on.
 * Recovery needs the size chain to be walkable at every instant, so every
 * change follows one order (labels as in heap.c):
 *   S1 a new header is written whole inside the block being split, out of
 *      the chain;  S2 one 8-byte store of the shrunk size puts it in.
 *   M1 a block that absorbs its neighbour grows by one 8-byte store;
 *      M2 only then is the absorbed header's tag wiped.
 *   U1 an allocated block's owner is written before U2 its tag turns
 *      "used"; F1 a freed block's tag turns "free" before any merge.
 * A crash between any two steps leaves either the old or the new chain, free
 * blocks at worst unmerged, and a block the dead process allocated marked
 * with its owner, where disco_heap_reclaim_owner() finds it. The blocks a dead
 * worker held are not freed by recovery: they may be shared with others. The
 * controller, which knows who died, reclaims them by owner.
 *
 * Fit: free blocks sit in 256 segregated lists (four per power of two, as in
 * TLSF) with a bitmap of the non-empty ones. An allocation looks at a few
 * blocks of its own class, then takes the first block of the next non-empty
 * larger class, which always fits: O(1) for any size, so a 64 MiB block costs
 * what a 64-byte one does, and tens of thousands of small blocks cost no
 * more each. Only when that fails (odd alignments, many unfit blocks of one
 * class) does it scan every free block before reporting exhaustion. Freeing
 * merges with both neighbours at once (boundary tags), so freeing every
 * block leaves one block again.
 *
 * Sizes: alloc(size) takes size rounded up to 64 plus a 64-byte header.
 * Size 0 is allowed and allocates a block of 64 usable bytes, with its own
 * offset, to be freed like any other.
 *
 * Thread safety: every function below is safe for any number of threads in
 * any number of processes, except disco_heap_init. A handle is process-local
 * and may be shared by the threads of its process.
 */
#ifndef DISCO_HEAP_H
#define DISCO_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/heap_stats.h"
#include "disco/status.h"
#include "disco/shm/wait.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_HEAP_MAGIC     0x5041454843534944ULL /* "DISCHEAP" */
#define DISCO_HEAP_LAYOUT    2u                    /* 2: backed_end, for lazily backed heaps */
#define DISCO_HEAP_ALIGN     64u                   /* data alignment of every block */
#define DISCO_HEAP_MAX_ALIGN 4096u                 /* largest alignment alloc honours */
#define DISCO_HEAP_BLOCK_HDR 64u                   /* bytes of header before each block's data */
#define DISCO_HEAP_NULL      0u                    /* never a block's offset */

/* Process-local handle; the caller owns its memory. */
typedef struct disco_heap {
    struct disco_heap_shared *sh; /* the header, at mem */
    unsigned char *base;          /* mem in this process: offsets count from here */
    uint64_t arena_off;           /* first block */
    uint64_t arena_end;           /* end of the last block */
    uint64_t mem_size;            /* bytes at base; these three this process's own copies,
                                     checked at init or attach, never re-read from sh */
    const disco_wait_t *wait;     /* how a taken lock is waited for; NULL: no limit */
} disco_heap_t;

/* --- Setting up ------------------------------------------------------- */

/** Bytes of memory a heap needs to hold one allocation of capacity bytes
 *  (align <= 64); each further block costs up to 64 + 64 bytes more. Returns
 *  0 if capacity is absurd (> SIZE_MAX / 4). Thread-safe. */
size_t disco_heap_footprint(size_t capacity);

/** Formats a heap in mem (mem_size bytes, 64-byte aligned, inside memory
 *  that every user maps MAP_SHARED) and fills a handle: one free block
 *  spanning the arena. Not thread-safe: call before the memory is shared, and
 *  never on a heap in use. Returns DISCO_OK; DISCO_E_INVAL (mem NULL or
 *  misaligned, mem_size smaller than disco_heap_footprint(64)); DISCO_E_SYS
 *  (the mutex cannot be set up). */
disco_status_t disco_heap_init(void *mem, size_t mem_size, disco_heap_t *heap_out);

/** disco_heap_init for memory whose pages are not all backed yet: the part
 *  of a segment that disco_segment_create_partial left a hole. Only the
 *  heap's header is backed now; an allocation that reaches past what is
 *  backed backs the next 2 MiB or more first, under the lock, through the
 *  caller's own mapping (MADV_POPULATE_WRITE), from whichever process
 *  allocates; memory that cannot be had then fails that allocation with
 *  DISCO_E_NOSPACE and changes nothing. Backing only grows: freed blocks
 *  keep theirs. The mapping must cover mem's pages whole (mem + mem_size
 *  rounded up to a page). Returns as disco_heap_init; DISCO_E_UNSUPPORTED
 *  (the kernel cannot populate: before Linux 5.14) with nothing written, so
 *  that the caller can back all of it and call disco_heap_init;
 *  DISCO_E_NOSPACE (the header's page cannot be backed). */
disco_status_t disco_heap_init_lazy(void *mem, size_t mem_size, disco_heap_t *heap_out);

/** Fills a handle for a heap that another process (or another mapping in
 *  this one) formatted at mem, mapped in this process at any address with
 *  the same offset within a page. Checks the magic, the layout version and
 *  the geometry. Returns DISCO_OK; DISCO_E_INVAL (mem NULL); DISCO_E_BAD_MAGIC
 *  (not a heap, another layout version or mutex size, a mem_size that
 *  disagrees, or mem at another offset within its page). */
disco_status_t disco_heap_attach(void *mem, size_t mem_size, disco_heap_t *heap_out);

/** Makes every later call on this handle wait for a taken lock as w says:
 *  its deadline (deadline_ns, or timeout_ns counted from when the call
 *  starts to sleep), abort word and check callback end the wait with their
 *  status (DISCO_E_TIMEOUT naming the holder's thread for the deadline).
 *  w must outlive its use; NULL (the default after init and attach): wait
 *  as long as the holder lives. Not thread-safe against calls on the same
 *  handle; other handles are unaffected. */
void disco_heap_set_wait(disco_heap_t *h, const disco_wait_t *w);

/* --- Allocating ------------------------------------------------------- */

/** Allocates a block of at least size bytes whose data is aligned to align
 *  (a power of two, at most DISCO_HEAP_MAX_ALIGN; 0 means 64; less than 64
 *  gives 64), marks it with owner (any value; disco uses the worker index)
 *  and sets *off_out to its data's offset. The data is not cleared. Returns
 *  DISCO_OK; DISCO_E_INVAL (h or off_out NULL, bad align);
 *  DISCO_E_HEAP_EXHAUSTED (no free block fits; the detail names the size,
 *  the alignment, the largest free block and the free total);
 *  DISCO_E_NOSPACE (a lazily backed heap could not back the block);
 *  DISCO_E_BROKEN (the heap's metadata is corrupt); DISCO_E_SYS (locking
 *  failed); DISCO_E_TIMEOUT or the wait's abort or callback status (the
 *  lock was held past the handle's wait, see disco_heap_set_wait). */
disco_status_t disco_heap_alloc(disco_heap_t *h, size_t size, size_t align, uint32_t owner,
                                uint64_t *off_out);

/** Frees the block whose data is at off (from any process, whoever owns it)
 *  and merges it with free neighbours. Returns DISCO_OK; DISCO_E_INVAL (off
 *  is not the offset of a live block: never allocated, inside a block,
 *  outside the heap, or freed already -- the heap is left as it was; a stale
 *  offset whose place was handed out again to a new block frees that block,
 *  as with malloc); DISCO_E_BROKEN; DISCO_E_SYS; the lock wait's status
 *  (disco_heap_set_wait). */
disco_status_t disco_heap_free(disco_heap_t *h, uint64_t off);

/** Frees every live block marked with owner (a worker that died) and sets
 *  *freed_out (NULL: not wanted) to the bytes freed, headers included (the
 *  drop in used_bytes; 0 if it had none). Walks every block under the lock.
 *  Thread-safe (any process). Returns DISCO_OK; DISCO_E_INVAL (h NULL);
 *  DISCO_E_BROKEN (the heap's metadata is corrupt, found before or during
 *  the walk: blocks met before the damage are freed, *freed_out is left
 *  untouched); DISCO_E_SYS; the lock wait's status (disco_heap_set_wait). */
disco_status_t disco_heap_reclaim_owner(disco_heap_t *h, uint32_t owner, size_t *freed_out);

/** A sweep's predicate: whether to keep the used block whose data is at
 *  off (marked with owner). Called under the heap's lock: it must not call
 *  the heap. */
typedef bool (*disco_heap_keep_fn)(void *ctx, uint64_t off, uint32_t owner);

/** Frees every live block that keep(ctx, off, owner) does not keep, in one
 *  walk under the lock, and sets *freed_out (NULL: not wanted) to the bytes
 *  freed, headers included. For a heap whose other users have all ended,
 *  whose blocks' true holders only the caller knows (a session's recovery);
 *  disco_heap_reclaim_owner is the sweep that keeps every other owner's.
 *  Thread-safe (any process). Returns DISCO_OK; DISCO_E_INVAL (h or keep
 *  NULL); DISCO_E_BROKEN (corrupt metadata, as reclaim_owner); DISCO_E_SYS;
 *  the lock wait's status (disco_heap_set_wait). */
disco_status_t disco_heap_sweep(disco_heap_t *h, disco_heap_keep_fn keep, void *ctx,
                                size_t *freed_out);

/** Fills *stats_out with a snapshot of the statistics, taken under the
 *  lock; *stats_out is left untouched on failure. Thread-safe (any process).
 *  Returns DISCO_OK; DISCO_E_INVAL (h, its header or stats_out NULL);
 *  DISCO_E_BROKEN (the heap's metadata is corrupt); DISCO_E_SYS (locking
 *  failed); DISCO_E_TIMEOUT or the wait's abort or
 *  callback status (the lock was held past the handle's wait, see
 *  disco_heap_set_wait). */
disco_status_t disco_heap_stats(const disco_heap_t *h, disco_heap_stats_t *stats_out);

/* --- Offsets and addresses (no lock, no checks: O(1)) ------------------ */

/** This process's address of the data at off; NULL for DISCO_HEAP_NULL. off
 *  must come from this heap. */
static inline void *disco_heap_ptr(const disco_heap_t *h, uint64_t off)
{
    return off == DISCO_HEAP_NULL ? NULL : (void *)(h->base + off);
}

/** The offset of address p, which lies in this process's mapping of the
 *  heap's blocks; DISCO_HEAP_NULL if it does not. */
uint64_t disco_heap_offset(const disco_heap_t *h, const void *p);

/** Whether the len bytes at p lie wholly inside the heap's blocks as this
 *  process maps them (a check for buffers that belong to another heap or
 *  session; it does not say that a block is live). len 0 asks about p. */
bool disco_heap_contains(const disco_heap_t *h, const void *p, size_t len);

#ifdef __cplusplus
}
#endif
#endif
