/*
 * heap_block.h - the shared heap's layout and the helpers that the heap's
 * files share (heap.c: blocks and free lists; heap_lock.c: the lock and
 * recovery; heap_check.c: the invariant check). Private to shm/heap*.c.
 */
#ifndef DISCO_HEAP_BLOCK_H
#define DISCO_HEAP_BLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "disco/shm/heap.h"
#include "shm/heap_internal.h"

#define HDR       ((uint64_t)DISCO_HEAP_BLOCK_HDR)
#define MIN_BLOCK (2 * HDR)
#define NBINS     256u

#define TAG_FREE  0x45455246u /* "FREE" */
#define TAG_USED  0x44455355u /* "USED" */
#define TAG_WIPED 0u          /* a header absorbed by a merge */

/* Every field is read and written under the heap's lock only. */
struct block {
    uint32_t tag;
    uint32_t owner;
    uint64_t self;      /* offset of this header: tells a header from data */
    uint64_t size;      /* whole block, header included: the chain */
    uint64_t prev_size; /* size of the block before, 0 for the first (derived) */
    uint64_t next_free; /* free-list links, 0 ends (derived) */
    uint64_t prev_free;
    uint64_t requested; /* bytes asked for (used blocks; for debugging) */
    uint64_t reserved;
};
_Static_assert(sizeof(struct block) == DISCO_HEAP_BLOCK_HDR, "block header");

struct disco_heap_shared {
    /* immutable after init */
    uint64_t magic;
    uint32_t layout;
    uint32_t page_mod; /* mem's address modulo 4096, the same in every mapping */
    uint64_t mem_size;
    uint64_t arena_off;
    uint64_t arena_end;
    uint32_t mutex_size;
    _Alignas(64) pthread_mutex_t lock;
    /* guarded by lock; all but broken derived from the chain */
    _Alignas(64) uint32_t broken;
    uint64_t used_bytes;
    uint64_t free_bytes;
    uint64_t live_blocks;
    uint64_t free_blocks;
    uint64_t recoveries;
    uint64_t backed_end;         /* memory up to here is backed (heap_back.c); mem_size: all */
    uint64_t bitmap[NBINS / 64]; /* bit b: bins[b] is not empty */
    uint64_t bins[NBINS];        /* heads of the free lists */
};

#define ARENA_OFF ((sizeof(struct disco_heap_shared) + HDR - 1) / HDR * HDR)

static inline void disco__heap_fault(int step)
{
    if (__builtin_expect(disco__heap_fault_hook != NULL, 0))
        disco__heap_fault_hook(step);
}

/* Commit stores (S2, M1, M2, U2, F1). A process killed mid-change stops at an
 * instruction boundary, and whoever recovers after it sees every store it
 * executed, in the order executed: the kernel marks the mutex owner-dead
 * (an atomic RMW) only after the task stopped, and the recoverer's lock RMW
 * pairs with that. So only the compiler's order needs pinning, exactly as
 * for a signal handler: the signal fences keep earlier header writes before
 * the commit and later ones after it. The store itself is one untorn atomic
 * store; relaxed, because other processes read these fields only under the
 * mutex, whose unlock/lock pair orders them. */
#define commit(p, v)                                                                               \
    do {                                                                                           \
        atomic_signal_fence(memory_order_seq_cst);                                                 \
        __atomic_store_n((p), (v), __ATOMIC_RELAXED);                                              \
        atomic_signal_fence(memory_order_seq_cst);                                                 \
    } while (0)

static inline struct block *blk(const disco_heap_t *h, uint64_t off)
{
    return (struct block *)(h->base + off);
}

/* Size class: four per power of two (sizes >= MIN_BLOCK, so fl >= 7). */
static inline unsigned bin_of(uint64_t size)
{
    unsigned fl = 63u - (unsigned)__builtin_clzll(size);
    return fl * 4u + (unsigned)((size >> (fl - 2u)) & 3u);
}

/* Whether the header at off is sound as a link of the chain. */
static inline bool header_ok(const disco_heap_t *h, uint64_t off)
{
    const struct block *b = blk(h, off);
    return (b->tag == TAG_FREE || b->tag == TAG_USED) && b->self == off && b->size >= MIN_BLOCK &&
           b->size % HDR == 0 && b->size <= h->arena_end - off;
}

/* Links (free-list heads and neighbours, sizes) live in memory every
 * process of the session writes, so one that is not a sound free block's
 * header is never followed: the heap is marked broken instead (every later
 * call fails with DISCO_E_BROKEN) and the operation stops, so that a
 * corrupt or malicious process can break the heap but never make another
 * read or write outside it. */
static inline bool disco__heap_link_ok(const disco_heap_t *h, uint64_t off)
{
    bool ok = off >= h->arena_off && off < h->arena_end && (off - h->arena_off) % HDR == 0 &&
              header_ok(h, off) && blk(h, off)->tag == TAG_FREE;
    if (!ok)
        h->sh->broken = 1;
    return ok;
}

/* Pushes a free block on its bin's list (heap.c: release, carve, init;
 * heap_lock.c: rebuilding the lists after a dead holder). */
static inline void disco__heap_list_push(const disco_heap_t *h, uint64_t off)
{
    struct disco_heap_shared *sh = h->sh;
    struct block *b = blk(h, off);
    unsigned bin = bin_of(b->size);
    if (sh->bins[bin] != 0 && !disco__heap_link_ok(h, sh->bins[bin]))
        return;
    b->prev_free = 0;
    b->next_free = sh->bins[bin];
    if (b->next_free != 0)
        blk(h, b->next_free)->prev_free = off;
    sh->bins[bin] = off;
    sh->bitmap[bin / 64u] |= 1ULL << (bin % 64u);
    sh->free_bytes += b->size;
    sh->free_blocks++;
}

/** Takes the heap's lock (spinning, then parking under the handle's wait),
 *  recovering the metadata first when the previous holder died (heap_lock.c).
 *  who names the caller in messages. Returns DISCO_OK holding the lock, or
 *  DISCO_E_TIMEOUT / the wait's status / DISCO_E_BROKEN / DISCO_E_SYS not
 *  holding it. */
disco_status_t disco__heap_lock(const disco_heap_t *h, const char *who);

/** Backs the pages of h's memory that hold offsets from..to (exclusive),
 *  through this process's mapping (heap_back.c), and sets *end_out to the
 *  offset where the backed pages end. Returns 0 or an errno (EINVAL: the
 *  kernel cannot populate). Needs only h->base. */
int disco__heap_populate(const disco_heap_t *h, uint64_t from, uint64_t to, uint64_t *end_out);

/** Backs h's memory up to offset end (heap_back.c), if it is lazily backed
 *  and not yet so far; under the lock. who names the caller in messages.
 *  Returns DISCO_OK, or DISCO_E_NOSPACE with nothing changed. */
disco_status_t disco__heap_back(const disco_heap_t *h, uint64_t end, const char *who);

/** Releases the lock taken by disco__heap_lock. */
static inline void disco__heap_unlock(const disco_heap_t *h)
{
    pthread_mutex_unlock(&h->sh->lock);
}

#endif
