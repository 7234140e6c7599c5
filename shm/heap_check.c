/* heap_check.c - test hooks of the shared heap (heap_internal.h): taking the
 * lock to be killed holding it, and the full invariant check. */
#include <inttypes.h>

#include "shm/heap_block.h"

disco_status_t disco__heap_lock_for_test(disco_heap_t *h)
{
    return disco__heap_lock(h, "disco__heap_lock_for_test");
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            st = disco_set_error(DISCO_E_BROKEN, __VA_ARGS__);                                     \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

disco_status_t disco__heap_check(disco_heap_t *h)
{
    disco_status_t st = disco__heap_lock(h, "disco__heap_check");
    if (st != DISCO_OK)
        return st;
    const struct disco_heap_shared *sh = h->sh;
    uint64_t prev = 0, nfree = 0, free_bytes = 0, nused = 0, used_bytes = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end; off += blk(h, off)->size) {
        const struct block *b = blk(h, off);
        CHECK(header_ok(h, off), "block %#" PRIx64 ": bad header", off);
        CHECK(off + HDR <= sh->backed_end, "block %#" PRIx64 ": header past the backed %" PRIu64,
              off, sh->backed_end);
        CHECK(b->prev_size == (prev != 0 ? blk(h, prev)->size : 0),
              "block %#" PRIx64 ": prev_size %" PRIu64, off, b->prev_size);
        CHECK(b->tag == TAG_USED || prev == 0 || blk(h, prev)->tag == TAG_USED,
              "block %#" PRIx64 ": two free blocks side by side", off);
        if (b->tag == TAG_FREE)
            nfree++, free_bytes += b->size;
        else
            nused++, used_bytes += b->size;
        prev = off;
    }
    CHECK(nfree == sh->free_blocks && free_bytes == sh->free_bytes && nused == sh->live_blocks &&
              used_bytes == sh->used_bytes,
          "stats disagree with the chain: free %" PRIu64 "/%" PRIu64 " used %" PRIu64 "/%" PRIu64,
          sh->free_blocks, nfree, sh->live_blocks, nused);
    uint64_t listed = 0;
    for (unsigned bin = 0; bin < NBINS; bin++) {
        bool bit = (sh->bitmap[bin / 64u] >> (bin % 64u)) & 1u;
        CHECK(bit == (sh->bins[bin] != 0), "bin %u: bitmap bit %d", bin, (int)bit);
        uint64_t back = 0;
        for (uint64_t off = sh->bins[bin]; off != 0; off = blk(h, off)->next_free) {
            const struct block *b = blk(h, off);
            CHECK(++listed <= nfree, "free lists hold more than %" PRIu64 " blocks", nfree);
            CHECK(off >= h->arena_off && off < h->arena_end && header_ok(h, off) &&
                      b->tag == TAG_FREE && bin_of(b->size) == bin && b->prev_free == back,
                  "bin %u: bad entry %#" PRIx64, bin, off);
            back = off;
        }
    }
    CHECK(listed == nfree, "free lists hold %" PRIu64 " of %" PRIu64 " free blocks", listed, nfree);
out:
    disco__heap_unlock(h);
    return st;
}
