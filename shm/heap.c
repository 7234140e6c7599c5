/* heap.c - shared-memory heap: boundary-tag blocks, segregated free lists,
 * the public calls (see heap.h for the design and the step labels S1/S2,
 * M1/M2, U1/U2, F1). The lock and recovery are in heap_lock.c, the test
 * hooks in heap_check.c, the layout in heap_block.h. */
#include "disco/shm/heap.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "disco/shm/wait.h"
#include "shm/heap_block.h"

#define SCAN 16u /* blocks of the request's own class looked at for a fit */

void (*disco__heap_fault_hook)(int step);

static inline uint64_t round64(uint64_t n)
{
    return (n + HDR - 1) & ~(HDR - 1);
}

/* First non-empty bin at or above from; NBINS if none. */
static unsigned next_bin(const struct disco_heap_shared *sh, unsigned from)
{
    for (unsigned w = from / 64u; w < NBINS / 64u; w++) {
        uint64_t bits = sh->bitmap[w];
        if (w == from / 64u)
            bits &= ~0ULL << (from % 64u);
        if (bits != 0)
            return w * 64u + (unsigned)__builtin_ctzll(bits);
    }
    return NBINS;
}

/* Unlinks a free block; call before its size changes. */
static void list_remove(const disco_heap_t *h, uint64_t off)
{
    struct disco_heap_shared *sh = h->sh;
    struct block *b = blk(h, off);
    unsigned bin = bin_of(b->size);
    if ((b->prev_free != 0 && !disco__heap_link_ok(h, b->prev_free)) ||
        (b->next_free != 0 && !disco__heap_link_ok(h, b->next_free)))
        return;
    if (b->prev_free != 0)
        blk(h, b->prev_free)->next_free = b->next_free;
    else
        sh->bins[bin] = b->next_free;
    if (b->next_free != 0)
        blk(h, b->next_free)->prev_free = b->prev_free;
    if (sh->bins[bin] == 0)
        sh->bitmap[bin / 64u] &= ~(1ULL << (bin % 64u));
    sh->free_bytes -= b->size;
    sh->free_blocks--;
}

static inline void set_prev_size_after(const disco_heap_t *h, uint64_t off, uint64_t size)
{
    if (off + size < h->arena_end)
        blk(h, off + size)->prev_size = size;
}

/* Bytes to skip at the start of the free block at off so that its data is
 * align-aligned: 0, or a gap big enough to be a free block of its own. */
static inline uint64_t lead_for(const disco_heap_t *h, uint64_t off, uint64_t align)
{
    uint64_t at = h->sh->page_mod + off + HDR; /* the address, modulo 4096 */
    uint64_t lead = ((at + align - 1) & ~(align - 1)) - at;
    return lead != 0 && lead < MIN_BLOCK ? lead + align : lead;
}

/* Looks at up to limit blocks of bin; the smallest that fits wins. */
static bool fit_in_bin(const disco_heap_t *h, unsigned bin, uint64_t need, uint64_t align,
                       uint64_t limit, uint64_t *off_p, uint64_t *lead_p)
{
    uint64_t best = 0, best_lead = 0, best_size = UINT64_MAX;
    for (uint64_t off = h->sh->bins[bin], n = 0; off != 0 && n < limit; n++) {
        if (!disco__heap_link_ok(h, off))
            return false;
        const struct block *b = blk(h, off);
        uint64_t lead = lead_for(h, off, align);
        if (lead + need <= b->size && b->size < best_size) {
            best = off, best_lead = lead, best_size = b->size;
            if (b->size == need + lead)
                break;
        }
        off = b->next_free;
    }
    if (best == 0)
        return false;
    *off_p = best;
    *lead_p = best_lead;
    return true;
}

/* The request's own class, a few blocks deep; then the first fit among the
 * larger classes (for align <= 64, the first block of the next non-empty
 * class); only if that fails, every free block. */
static bool find_fit(const disco_heap_t *h, uint64_t need, uint64_t align, uint64_t *off_p,
                     uint64_t *lead_p)
{
    unsigned b0 = bin_of(need);
    if (fit_in_bin(h, b0, need, align, SCAN, off_p, lead_p))
        return true;
    for (unsigned b = next_bin(h->sh, b0 + 1); b < NBINS && !h->sh->broken;
         b = next_bin(h->sh, b + 1))
        if (fit_in_bin(h, b, need, align, SCAN, off_p, lead_p))
            return true;
    for (unsigned b = next_bin(h->sh, b0); b < NBINS && !h->sh->broken; b = next_bin(h->sh, b + 1))
        if (fit_in_bin(h, b, need, align, UINT64_MAX, off_p, lead_p))
            return true;
    return false;
}

/* Writes a free header at off, outside the chain until its S2 (S1). */
static void write_free_header(const disco_heap_t *h, uint64_t off, uint64_t size, uint64_t prev)
{
    struct block *b = blk(h, off);
    b->tag = TAG_FREE;
    b->owner = 0;
    b->self = off;
    b->size = size;
    b->prev_size = prev;
    b->next_free = b->prev_free = 0;
    b->requested = b->reserved = 0;
}

/* Turns the free block at off into a used block of need bytes, its lead gap
 * and tail remainder into free blocks. Returns the data offset. */
static uint64_t carve(const disco_heap_t *h, uint64_t off, uint64_t lead, uint64_t need,
                      uint32_t owner, uint64_t requested)
{
    struct block *b = blk(h, off);
    list_remove(h, off);
    if (lead != 0) {
        uint64_t x = off + lead;
        write_free_header(h, x, b->size - lead, lead); /* S1 */
        disco__heap_fault(DISCO__HEAP_STEP_LEAD_HDR);
        commit(&b->size, lead); /* S2 */
        disco__heap_fault(DISCO__HEAP_STEP_LEAD_SPLIT);
        set_prev_size_after(h, x, blk(h, x)->size);
        disco__heap_list_push(h, off);
        off = x;
        b = blk(h, x);
    }
    if (b->size - need >= MIN_BLOCK) {
        uint64_t t = off + need;
        write_free_header(h, t, b->size - need, need); /* S1 */
        disco__heap_fault(DISCO__HEAP_STEP_TAIL_HDR);
        commit(&b->size, need); /* S2 */
        disco__heap_fault(DISCO__HEAP_STEP_TAIL_SPLIT);
        set_prev_size_after(h, t, blk(h, t)->size);
        disco__heap_list_push(h, t);
    }
    b->owner = owner; /* U1 */
    b->requested = requested;
    disco__heap_fault(DISCO__HEAP_STEP_OWNER);
    commit(&b->tag, TAG_USED); /* U2 */
    disco__heap_fault(DISCO__HEAP_STEP_USED);
    h->sh->used_bytes += b->size;
    h->sh->live_blocks++;
    return off + HDR;
}

/* Frees the used block at header offset x, merging with free neighbours.
 * Returns the header offset of the resulting free block. */
static uint64_t release(const disco_heap_t *h, uint64_t x)
{
    struct disco_heap_shared *sh = h->sh;
    struct block *b = blk(h, x);
    commit(&b->tag, TAG_FREE); /* F1 */
    disco__heap_fault(DISCO__HEAP_STEP_FREE_TAG);
    sh->used_bytes -= b->size;
    sh->live_blocks--;
    uint64_t n = x + b->size; /* b's header was checked: n is in the arena or its end */
    if (n < h->arena_end && blk(h, n)->tag == TAG_FREE) {
        if (!disco__heap_link_ok(h, n))
            return x;
        struct block *nb = blk(h, n);
        list_remove(h, n);
        commit(&b->size, b->size + nb->size); /* M1 */
        disco__heap_fault(DISCO__HEAP_STEP_NEXT_GROW);
        commit(&nb->tag, TAG_WIPED); /* M2 */
        disco__heap_fault(DISCO__HEAP_STEP_NEXT_WIPE);
    }
    if (b->prev_size != 0 && (b->prev_size > x - h->arena_off || b->prev_size % HDR != 0)) {
        h->sh->broken = 1;
        return x;
    }
    if (b->prev_size != 0 && blk(h, x - b->prev_size)->tag == TAG_FREE) {
        uint64_t p = x - b->prev_size;
        if (!disco__heap_link_ok(h, p))
            return x;
        struct block *pb = blk(h, p);
        list_remove(h, p);
        commit(&pb->size, pb->size + b->size); /* M1 */
        disco__heap_fault(DISCO__HEAP_STEP_PREV_GROW);
        commit(&b->tag, TAG_WIPED); /* M2 */
        disco__heap_fault(DISCO__HEAP_STEP_PREV_WIPE);
        x = p;
        b = pb;
    }
    set_prev_size_after(h, x, b->size);
    disco__heap_list_push(h, x);
    disco__heap_fault(DISCO__HEAP_STEP_FREE_DONE);
    return x;
}

/* Largest free block's size (under the lock); 0 if none. */
static uint64_t largest_free_block(const disco_heap_t *h)
{
    uint64_t best = 0;
    for (unsigned b = NBINS; b-- > 0;) {
        if ((h->sh->bitmap[b / 64u] & (1ULL << (b % 64u))) == 0)
            continue;
        for (uint64_t off = h->sh->bins[b]; off != 0 && disco__heap_link_ok(h, off);
             off = blk(h, off)->next_free)
            if (blk(h, off)->size > best)
                best = blk(h, off)->size;
        break;
    }
    return best;
}

size_t disco_heap_footprint(size_t capacity)
{
    if (capacity > SIZE_MAX / 4)
        return 0;
    uint64_t data = round64(capacity == 0 ? 1 : capacity);
    return (size_t)(ARENA_OFF + HDR + data);
}

/* The handle, with the arena's bounds the caller checked (never read from
 * the shared header again: any process of the session can write it). */
static void fill_handle(struct disco_heap_shared *sh, void *mem, uint64_t mem_size,
                        uint64_t arena_off, uint64_t arena_end, disco_heap_t *h)
{
    h->sh = sh;
    h->base = mem;
    h->mem_size = mem_size;
    h->arena_off = arena_off;
    h->arena_end = arena_end;
    h->wait = NULL;
}

void disco_heap_set_wait(disco_heap_t *h, const disco_wait_t *w)
{
    h->wait = w;
}

disco_status_t disco_heap_init(void *mem, size_t mem_size, disco_heap_t *heap_out)
{
    if (mem == NULL || heap_out == NULL || (uintptr_t)mem % HDR != 0)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_init: memory %p must be 64-byte aligned",
                               mem);
    if (mem_size < disco_heap_footprint(0))
        return disco_set_error(DISCO_E_INVAL, "disco_heap_init: %zu bytes, need at least %zu",
                               mem_size, disco_heap_footprint(0));
    struct disco_heap_shared *sh = mem;
    memset(sh, 0, sizeof *sh);
    pthread_mutexattr_t attr;
    int r = pthread_mutexattr_init(&attr);
    if (r == 0)
        r = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (r == 0)
        r = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    if (r == 0)
        r = pthread_mutex_init(&sh->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (r != 0)
        return disco_set_error(DISCO_E_SYS, "disco_heap_init: robust shared mutex: %s",
                               strerror(r));
    sh->layout = DISCO_HEAP_LAYOUT;
    sh->page_mod = (uint32_t)((uintptr_t)mem % DISCO_HEAP_MAX_ALIGN);
    sh->mem_size = mem_size;
    sh->arena_off = ARENA_OFF;
    sh->arena_end = ARENA_OFF + (mem_size - ARENA_OFF) / HDR * HDR;
    sh->mutex_size = (uint32_t)sizeof(pthread_mutex_t);
    sh->backed_end = mem_size; /* disco_heap_init_lazy lowers it */
    disco_heap_t h;
    fill_handle(sh, mem, mem_size, ARENA_OFF, ARENA_OFF + (mem_size - ARENA_OFF) / HDR * HDR, &h);
    write_free_header(&h, h.arena_off, h.arena_end - h.arena_off, 0);
    disco__heap_list_push(&h, h.arena_off);
    sh->magic = DISCO_HEAP_MAGIC; /* last: the heap is whole (not yet shared) */
    *heap_out = h;
    return DISCO_OK;
}

disco_status_t disco_heap_init_lazy(void *mem, size_t mem_size, disco_heap_t *heap_out)
{
    if (mem == NULL || heap_out == NULL || (uintptr_t)mem % HDR != 0 ||
        mem_size < disco_heap_footprint(0))
        return disco_heap_init(mem, mem_size, heap_out); /* its messages */
    /* The header and the first block's header first: that also tells
     * whether this kernel can populate at all, before anything is written. */
    disco_heap_t probe = {.base = mem};
    uint64_t end = 0;
    int e = disco__heap_populate(&probe, 0, ARENA_OFF + HDR, &end);
    if (e == EINVAL)
        return disco_set_error(DISCO_E_UNSUPPORTED,
                               "disco_heap_init_lazy: this kernel cannot populate shared memory "
                               "(MADV_POPULATE_WRITE needs Linux 5.14)");
    if (e != 0)
        return disco_set_error(DISCO_E_NOSPACE, "disco_heap_init_lazy: backing its header: %s",
                               strerror(e));
    disco_status_t st = disco_heap_init(mem, mem_size, heap_out);
    if (st != DISCO_OK)
        return st;
    heap_out->sh->backed_end = end < mem_size ? end : mem_size;
    return DISCO_OK;
}

disco_status_t disco_heap_attach(void *mem, size_t mem_size, disco_heap_t *heap_out)
{
    if (mem == NULL || heap_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_attach: NULL argument");
    struct disco_heap_shared *sh = mem;
    if (mem_size < ARENA_OFF || sh->magic != DISCO_HEAP_MAGIC || sh->layout != DISCO_HEAP_LAYOUT ||
        sh->mutex_size != sizeof(pthread_mutex_t))
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "disco_heap_attach: not a heap of layout %u (%zu bytes at %p)",
                               DISCO_HEAP_LAYOUT, mem_size, mem);
    uint32_t page_mod = (uint32_t)((uintptr_t)mem % DISCO_HEAP_MAX_ALIGN);
    /* Each bound read once (volatile: one load each), checked, and the
     * handle made of the copies (test_heap_attach_reads_once). */
    const volatile struct disco_heap_shared *v = sh;
    uint64_t size = v->mem_size, arena_off = v->arena_off, arena_end = v->arena_end;
    uint32_t mod = v->page_mod;
    if (size != mem_size || mod != page_mod || arena_off != ARENA_OFF || arena_end > mem_size ||
        arena_end < ARENA_OFF || (arena_end - ARENA_OFF) % HDR != 0)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "disco_heap_attach: heap of %" PRIu64 " bytes at page offset %u, "
                               "mapped as %zu bytes at page offset %u",
                               size, mod, mem_size, page_mod);
    fill_handle(sh, mem, size, arena_off, arena_end, heap_out);
    return DISCO_OK;
}

disco_status_t disco_heap_alloc(disco_heap_t *h, size_t size, size_t align, uint32_t owner,
                                uint64_t *off_out)
{
    if (h == NULL || off_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_alloc: NULL argument");
    if ((align & (align - 1)) != 0 || align > DISCO_HEAP_MAX_ALIGN)
        return disco_set_error(DISCO_E_INVAL,
                               "disco_heap_alloc: align %zu is not a power of two <= %u", align,
                               DISCO_HEAP_MAX_ALIGN);
    uint64_t al = align < HDR ? HDR : align;
    uint64_t arena = h->arena_end - h->arena_off;
    /* need stays exact for any size that could fit; larger ones fail below */
    uint64_t need = size < arena ? HDR + round64(size == 0 ? 1 : size) : UINT64_MAX;
    disco_status_t st = disco__heap_lock(h, "disco_heap_alloc");
    if (st != DISCO_OK)
        return st;
    uint64_t off = 0, lead = 0;
    if (need <= arena && find_fit(h, need, al, &off, &lead)) {
        /* Backed before any header is written: the block, and the header
         * that carve may write after it. */
        uint64_t end = off + lead + need + HDR;
        st = disco__heap_back(h, end < h->arena_end ? end : h->arena_end, "disco_heap_alloc");
        if (st != DISCO_OK) {
            disco__heap_unlock(h);
            return st;
        }
        uint64_t data = carve(h, off, lead, need, owner, size);
        bool broken = h->sh->broken;
        disco__heap_unlock(h);
        if (broken)
            return disco_set_error(DISCO_E_BROKEN, "disco_heap_alloc: heap metadata is corrupt");
        *off_out = data;
        return DISCO_OK;
    }
    if (h->sh->broken) {
        disco__heap_unlock(h);
        return disco_set_error(DISCO_E_BROKEN, "disco_heap_alloc: heap metadata is corrupt");
    }
    uint64_t largest = largest_free_block(h);
    uint64_t free_bytes = h->sh->free_bytes;
    disco__heap_unlock(h);
    return disco_set_error(DISCO_E_HEAP_EXHAUSTED,
                           "disco_heap_alloc(%zu bytes, align %" PRIu64 ", owner %" PRIu32
                           "): largest free block holds %" PRIu64 " bytes; %" PRIu64 " of %" PRIu64
                           " bytes free",
                           size, al, owner, largest > HDR ? largest - HDR : 0, free_bytes, arena);
}

/* Why off is not the data offset of a live block; NULL if it is one. */
static const char *not_live(const disco_heap_t *h, uint64_t off)
{
    if (off < h->arena_off + HDR || off >= h->arena_end || off % HDR != 0)
        return "not a block offset of this heap";
    uint64_t x = off - HDR;
    const struct block *b = blk(h, x);
    if (b->self != x || (b->tag != TAG_USED && b->tag != TAG_FREE))
        return "not the start of a block";
    if (b->tag == TAG_FREE)
        return "block is free already (double free?)";
    if (!header_ok(h, x))
        return "block header is damaged";
    uint64_t n = x + b->size;
    if (n < h->arena_end && (blk(h, n)->self != n || blk(h, n)->prev_size != b->size))
        return "block does not link to the next one";
    if (x == h->arena_off ? b->prev_size != 0
                          : (b->prev_size < MIN_BLOCK || b->prev_size > x - h->arena_off ||
                             blk(h, x - b->prev_size)->self != x - b->prev_size ||
                             blk(h, x - b->prev_size)->size != b->prev_size))
        return "block does not link to the previous one";
    return NULL;
}

disco_status_t disco_heap_free(disco_heap_t *h, uint64_t off)
{
    if (h == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_free: NULL heap");
    disco_status_t st = disco__heap_lock(h, "disco_heap_free");
    if (st != DISCO_OK)
        return st;
    const char *why = not_live(h, off);
    if (why != NULL) {
        disco__heap_unlock(h);
        return disco_set_error(DISCO_E_INVAL, "disco_heap_free(offset %#" PRIx64 "): %s", off, why);
    }
    release(h, off - HDR);
    bool broken = h->sh->broken;
    disco__heap_unlock(h);
    if (broken)
        return disco_set_error(DISCO_E_BROKEN, "disco_heap_free: heap metadata is corrupt");
    return DISCO_OK;
}

/* Frees every used block keep() does not keep (under the lock, one walk);
 * what names the caller in messages. */
static disco_status_t sweep(disco_heap_t *h, disco_heap_keep_fn keep, void *ctx, const char *what,
                            size_t *freed_out)
{
    if (h == NULL || h->sh == NULL || keep == NULL)
        return disco_set_error(DISCO_E_INVAL, "%s: the heap or the predicate is NULL", what);
    disco_status_t st = disco__heap_lock(h, what);
    if (st != DISCO_OK)
        return st;
    uint64_t freed = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end && !h->sh->broken;) {
        if (!header_ok(h, off)) {
            h->sh->broken = 1;
            break;
        }
        struct block *b = blk(h, off);
        if (b->tag == TAG_USED && !keep(ctx, off + HDR, b->owner)) {
            freed += b->size;
            off = release(h, off); /* may merge backwards: go on from the merged block */
        }
        off += blk(h, off)->size;
    }
    bool broken = h->sh->broken;
    disco__heap_unlock(h);
    if (broken)
        return disco_set_error(DISCO_E_BROKEN, "%s: heap metadata is corrupt", what);
    if (freed_out != NULL)
        *freed_out = (size_t)freed;
    return DISCO_OK;
}

disco_status_t disco_heap_sweep(disco_heap_t *h, disco_heap_keep_fn keep, void *ctx,
                                size_t *freed_out)
{
    return sweep(h, keep, ctx, "disco_heap_sweep", freed_out);
}

/* reclaim_owner's predicate: keeps the blocks of every other owner. */
static bool not_owner(void *ctx, uint64_t off, uint32_t owner)
{
    (void)off;
    return owner != *(const uint32_t *)ctx;
}

disco_status_t disco_heap_reclaim_owner(disco_heap_t *h, uint32_t owner, size_t *freed_out)
{
    char what[48];
    snprintf(what, sizeof what, "disco_heap_reclaim_owner(%u)", owner);
    return sweep(h, not_owner, &owner, what, freed_out);
}

disco_status_t disco_heap_stats(const disco_heap_t *h, disco_heap_stats_t *stats_out)
{
    if (h == NULL || h->sh == NULL || stats_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_stats: %s is NULL",
                               stats_out == NULL ? "stats_out" : "the heap");
    disco_status_t st = disco__heap_lock(h, "disco_heap_stats");
    if (st != DISCO_OK)
        return st;
    const struct disco_heap_shared *sh = h->sh;
    uint64_t largest = largest_free_block(h);
    disco_heap_stats_t s;
    memset(&s, 0, sizeof s);
    s.capacity = (size_t)(h->arena_end - h->arena_off);
    s.used_bytes = (size_t)sh->used_bytes;
    s.free_bytes = (size_t)sh->free_bytes;
    s.largest_free = (size_t)(largest > HDR ? largest - HDR : 0);
    s.live_blocks = (size_t)sh->live_blocks;
    s.free_blocks = (size_t)sh->free_blocks;
    s.recoveries = sh->recoveries;
    s.backed_bytes = (size_t)(sh->backed_end < h->mem_size ? sh->backed_end : h->mem_size);
    disco__heap_unlock(h);
    *stats_out = s;
    return DISCO_OK;
}

uint64_t disco_heap_offset(const disco_heap_t *h, const void *p)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)h->base + h->arena_off;
    uintptr_t hi = (uintptr_t)h->base + h->arena_end;
    return a >= lo && a < hi ? (uint64_t)(a - (uintptr_t)h->base) : DISCO_HEAP_NULL;
}

bool disco_heap_contains(const disco_heap_t *h, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)h->base + h->arena_off;
    uintptr_t hi = (uintptr_t)h->base + h->arena_end;
    return a >= lo && a < hi && len <= hi - a;
}
