/* heap.c - shared-memory heap: boundary-tag blocks, segregated free lists,
 * one robust process-shared mutex (see heap.h for the design and the step
 * labels S1/S2, M1/M2, U1/U2, F1). */
#include "disco/shm/heap.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "disco/shm/wait.h"
#include "shm/heap_internal.h"

#define HDR       ((uint64_t)DISCO_HEAP_BLOCK_HDR)
#define MIN_BLOCK (2 * HDR)
#define NBINS     256u
#define SCAN      16u /* blocks of the request's own class looked at for a fit */

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
    uint64_t bitmap[NBINS / 64]; /* bit b: bins[b] is not empty */
    uint64_t bins[NBINS];        /* heads of the free lists */
};

#define ARENA_OFF ((sizeof(struct disco_heap_shared) + HDR - 1) / HDR * HDR)

void (*disco__heap_fault_hook)(int step);

static inline void fault(int step)
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

static inline uint64_t round64(uint64_t n)
{
    return (n + HDR - 1) & ~(HDR - 1);
}

/* Size class: four per power of two (sizes >= MIN_BLOCK, so fl >= 7). */
static inline unsigned bin_of(uint64_t size)
{
    unsigned fl = 63u - (unsigned)__builtin_clzll(size);
    return fl * 4u + (unsigned)((size >> (fl - 2u)) & 3u);
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

static bool header_ok(const disco_heap_t *h, uint64_t off);

/* Links (free-list heads and neighbours, sizes) live in memory every
 * process of the session writes, so one that is not a sound free block's
 * header is never followed: the heap is marked broken instead (every later
 * call fails with DISCO_E_BROKEN) and the operation stops, so that a
 * corrupt or malicious process can break the heap but never make another
 * read or write outside it. */
static bool free_link_ok(const disco_heap_t *h, uint64_t off)
{
    bool ok = off >= h->arena_off && off < h->arena_end && (off - h->arena_off) % HDR == 0 &&
              header_ok(h, off) && blk(h, off)->tag == TAG_FREE;
    if (!ok)
        h->sh->broken = 1;
    return ok;
}

static void list_push(const disco_heap_t *h, uint64_t off)
{
    struct disco_heap_shared *sh = h->sh;
    struct block *b = blk(h, off);
    unsigned bin = bin_of(b->size);
    if (sh->bins[bin] != 0 && !free_link_ok(h, sh->bins[bin]))
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

/* Unlinks a free block; call before its size changes. */
static void list_remove(const disco_heap_t *h, uint64_t off)
{
    struct disco_heap_shared *sh = h->sh;
    struct block *b = blk(h, off);
    unsigned bin = bin_of(b->size);
    if ((b->prev_free != 0 && !free_link_ok(h, b->prev_free)) ||
        (b->next_free != 0 && !free_link_ok(h, b->next_free)))
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
        if (!free_link_ok(h, off))
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
        fault(DISCO__HEAP_STEP_LEAD_HDR);
        commit(&b->size, lead); /* S2 */
        fault(DISCO__HEAP_STEP_LEAD_SPLIT);
        set_prev_size_after(h, x, blk(h, x)->size);
        list_push(h, off);
        off = x;
        b = blk(h, x);
    }
    if (b->size - need >= MIN_BLOCK) {
        uint64_t t = off + need;
        write_free_header(h, t, b->size - need, need); /* S1 */
        fault(DISCO__HEAP_STEP_TAIL_HDR);
        commit(&b->size, need); /* S2 */
        fault(DISCO__HEAP_STEP_TAIL_SPLIT);
        set_prev_size_after(h, t, blk(h, t)->size);
        list_push(h, t);
    }
    b->owner = owner; /* U1 */
    b->requested = requested;
    fault(DISCO__HEAP_STEP_OWNER);
    commit(&b->tag, TAG_USED); /* U2 */
    fault(DISCO__HEAP_STEP_USED);
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
    fault(DISCO__HEAP_STEP_FREE_TAG);
    sh->used_bytes -= b->size;
    sh->live_blocks--;
    uint64_t n = x + b->size; /* b's header was checked: n is in the arena or its end */
    if (n < h->arena_end && blk(h, n)->tag == TAG_FREE) {
        if (!free_link_ok(h, n))
            return x;
        struct block *nb = blk(h, n);
        list_remove(h, n);
        commit(&b->size, b->size + nb->size); /* M1 */
        fault(DISCO__HEAP_STEP_NEXT_GROW);
        commit(&nb->tag, TAG_WIPED); /* M2 */
        fault(DISCO__HEAP_STEP_NEXT_WIPE);
    }
    if (b->prev_size != 0 && (b->prev_size > x - h->arena_off || b->prev_size % HDR != 0)) {
        h->sh->broken = 1;
        return x;
    }
    if (b->prev_size != 0 && blk(h, x - b->prev_size)->tag == TAG_FREE) {
        uint64_t p = x - b->prev_size;
        if (!free_link_ok(h, p))
            return x;
        struct block *pb = blk(h, p);
        list_remove(h, p);
        commit(&pb->size, pb->size + b->size); /* M1 */
        fault(DISCO__HEAP_STEP_PREV_GROW);
        commit(&b->tag, TAG_WIPED); /* M2 */
        fault(DISCO__HEAP_STEP_PREV_WIPE);
        x = p;
        b = pb;
    }
    set_prev_size_after(h, x, b->size);
    list_push(h, x);
    fault(DISCO__HEAP_STEP_FREE_DONE);
    return x;
}

/* Whether the header at off is sound as a link of the chain. */
static bool header_ok(const disco_heap_t *h, uint64_t off)
{
    const struct block *b = blk(h, off);
    return (b->tag == TAG_FREE || b->tag == TAG_USED) && b->self == off && b->size >= MIN_BLOCK &&
           b->size % HDR == 0 && b->size <= h->arena_end - off;
}

/* Step 1-3 of recovery (heap.h): after a holder died mid-change. */
static disco_status_t recover(const disco_heap_t *h)
{
    struct disco_heap_shared *sh = h->sh;
    uint64_t prev = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end;) {
        if (!header_ok(h, off)) {
            sh->broken = 1;
            return disco_set_error(DISCO_E_BROKEN,
                                   "heap recovery: bad block header at offset %#" PRIx64, off);
        }
        struct block *b = blk(h, off);
        struct block *pb = prev != 0 ? blk(h, prev) : NULL;
        if (pb != NULL && pb->tag == TAG_FREE && b->tag == TAG_FREE) {
            commit(&pb->size, pb->size + b->size); /* M1 */
            commit(&b->tag, TAG_WIPED);            /* M2 */
            off = prev + pb->size;
            continue;
        }
        b->prev_size = pb != NULL ? pb->size : 0;
        prev = off;
        off += b->size;
    }
    memset(sh->bitmap, 0, sizeof sh->bitmap);
    memset(sh->bins, 0, sizeof sh->bins);
    sh->used_bytes = sh->free_bytes = sh->live_blocks = sh->free_blocks = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end; off += blk(h, off)->size) {
        if (blk(h, off)->tag == TAG_FREE) {
            list_push(h, off);
        } else {
            sh->used_bytes += blk(h, off)->size;
            sh->live_blocks++;
        }
    }
    sh->recoveries++;
    return DISCO_OK;
}

/* Critical sections here last about a microsecond, while a futex sleep and
 * wake costs tens of microseconds on these machines (and two workers of a
 * collective allocate at the same moment): spin on trylock, pausing, then
 * yielding so a preempted holder on our core can finish. Returns the
 * trylock's result: 0, EOWNERDEAD, ENOTRECOVERABLE, or EBUSY (still taken). */
static int lock_spinning(pthread_mutex_t *m)
{
    for (int i = 0; i < 256; i++) {
        int r = pthread_mutex_trylock(m);
        if (r != EBUSY)
            return r;
        if (i < 64)
            disco_cpu_relax();
        else
            sched_yield();
    }
    return EBUSY;
}

/* The holder's thread id, for messages: glibc keeps it in the mutex (a robust
 * mutex's futex word holds it too). Read without the lock: a stale value
 * only names the previous holder. */
static int holder_tid(const pthread_mutex_t *m)
{
    return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
}

/* Blocks for the lock a park slice at a time (pthread_mutex_timedlock: its
 * deadline is on the wall clock, so each slice is turned into one there; a
 * clock step only changes that slice's length, and sanitizers know this call,
 * where they do not know pthread_mutex_clocklock), looking at the handle's
 * wait between slices: a stopped holder is not dead, so the kernel
 * never hands its lock on and only a deadline or a liveness check ends the
 * wait. Returns DISCO_OK with the lock's result in *r_out (0, EOWNERDEAD,
 * ENOTRECOVERABLE, another error), or the wait's status. */
static disco_status_t lock_blocking(const disco_heap_t *h, const char *who, int *r_out)
{
    pthread_mutex_t *m = &h->sh->lock;
    if (h->wait == NULL) {
        *r_out = pthread_mutex_lock(m);
        return DISCO_OK;
    }
    disco_wait_t w = *h->wait;
    int64_t start = disco_now_ns();
    if (w.deadline_ns == 0 && w.timeout_ns > 0)
        w.deadline_ns = start + w.timeout_ns;
    int64_t slice =
        (int64_t)(w.park_slice_ms ? w.park_slice_ms : DISCO_WAIT_DEFAULT_SLICE_MS) * 1000000LL;
    for (;;) {
        int64_t now = disco_now_ns();
        disco_status_t st = disco_wait_check(&w, now);
        if (st == DISCO_E_TIMEOUT)
            return disco_set_error(DISCO_E_TIMEOUT,
                                   "%s: the heap lock was held for %lld ms by thread %d "
                                   "(stopped?)",
                                   who, (long long)((now - start) / 1000000), holder_tid(m));
        if (st != DISCO_OK)
            return st;
        int64_t until = now + slice;
        if (w.deadline_ns != 0 && w.deadline_ns < until)
            until = w.deadline_ns;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t at = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (until - now);
        ts = (struct timespec){.tv_sec = at / 1000000000LL, .tv_nsec = at % 1000000000LL};
        int r = pthread_mutex_timedlock(m, &ts);
        if (r != ETIMEDOUT) {
            *r_out = r;
            return DISCO_OK;
        }
    }
}

static disco_status_t heap_lock(const disco_heap_t *h, const char *who)
{
    struct disco_heap_shared *sh = h->sh;
    int r = lock_spinning(&sh->lock);
    if (r == EBUSY) {
        disco_status_t st = lock_blocking(h, who, &r);
        if (st != DISCO_OK)
            return st;
    }
    if (r == EOWNERDEAD) {
        /* Step 4 whatever recover() says: a broken heap is marked so in
         * sh->broken, and the mutex must stay usable to tell everyone. */
        disco_status_t st = recover(h);
        r = pthread_mutex_consistent(&sh->lock);
        if (st != DISCO_OK || r != 0) {
            pthread_mutex_unlock(&sh->lock);
            return st != DISCO_OK ? st
                                  : disco_set_error(DISCO_E_SYS, "%s: pthread_mutex_consistent: %s",
                                                    who, strerror(r));
        }
    } else if (r != 0) {
        return disco_set_error(r == ENOTRECOVERABLE ? DISCO_E_BROKEN : DISCO_E_SYS,
                               "%s: pthread_mutex_lock: %s", who, strerror(r));
    }
    if (sh->broken) {
        pthread_mutex_unlock(&sh->lock);
        return disco_set_error(DISCO_E_BROKEN, "%s: heap metadata is corrupt", who);
    }
    return DISCO_OK;
}

static inline void heap_unlock(const disco_heap_t *h)
{
    pthread_mutex_unlock(&h->sh->lock);
}

/* Largest free block's size (under the lock); 0 if none. */
static uint64_t largest_free_block(const disco_heap_t *h)
{
    uint64_t best = 0;
    for (unsigned b = NBINS; b-- > 0;) {
        if ((h->sh->bitmap[b / 64u] & (1ULL << (b % 64u))) == 0)
            continue;
        for (uint64_t off = h->sh->bins[b]; off != 0 && free_link_ok(h, off);
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

static void fill_handle(struct disco_heap_shared *sh, void *mem, disco_heap_t *h)
{
    h->sh = sh;
    h->base = mem;
    h->arena_off = sh->arena_off;
    h->arena_end = sh->arena_end;
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
    disco_heap_t h;
    fill_handle(sh, mem, &h);
    write_free_header(&h, h.arena_off, h.arena_end - h.arena_off, 0);
    list_push(&h, h.arena_off);
    sh->magic = DISCO_HEAP_MAGIC; /* last: the heap is whole (not yet shared) */
    *heap_out = h;
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
    if (sh->mem_size != mem_size || sh->page_mod != page_mod || sh->arena_off != ARENA_OFF ||
        sh->arena_end > mem_size || (sh->arena_end - ARENA_OFF) % HDR != 0)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "disco_heap_attach: heap of %" PRIu64 " bytes at page offset %u, "
                               "mapped as %zu bytes at page offset %u",
                               sh->mem_size, sh->page_mod, mem_size, page_mod);
    fill_handle(sh, mem, heap_out);
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
    disco_status_t st = heap_lock(h, "disco_heap_alloc");
    if (st != DISCO_OK)
        return st;
    uint64_t off = 0, lead = 0;
    if (need <= arena && find_fit(h, need, al, &off, &lead)) {
        uint64_t data = carve(h, off, lead, need, owner, size);
        bool broken = h->sh->broken;
        heap_unlock(h);
        if (broken)
            return disco_set_error(DISCO_E_BROKEN, "disco_heap_alloc: heap metadata is corrupt");
        *off_out = data;
        return DISCO_OK;
    }
    if (h->sh->broken) {
        heap_unlock(h);
        return disco_set_error(DISCO_E_BROKEN, "disco_heap_alloc: heap metadata is corrupt");
    }
    uint64_t largest = largest_free_block(h);
    uint64_t free_bytes = h->sh->free_bytes;
    heap_unlock(h);
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
    disco_status_t st = heap_lock(h, "disco_heap_free");
    if (st != DISCO_OK)
        return st;
    const char *why = not_live(h, off);
    if (why != NULL) {
        heap_unlock(h);
        return disco_set_error(DISCO_E_INVAL, "disco_heap_free(offset %#" PRIx64 "): %s", off, why);
    }
    release(h, off - HDR);
    bool broken = h->sh->broken;
    heap_unlock(h);
    if (broken)
        return disco_set_error(DISCO_E_BROKEN, "disco_heap_free: heap metadata is corrupt");
    return DISCO_OK;
}

disco_status_t disco_heap_reclaim_owner(disco_heap_t *h, uint32_t owner, size_t *freed_out)
{
    if (h == NULL || h->sh == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_reclaim_owner: the heap is NULL");
    disco_status_t st = heap_lock(h, "disco_heap_reclaim_owner");
    if (st != DISCO_OK)
        return st;
    uint64_t freed = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end && !h->sh->broken;) {
        if (!header_ok(h, off)) {
            h->sh->broken = 1;
            break;
        }
        struct block *b = blk(h, off);
        if (b->tag == TAG_USED && b->owner == owner) {
            freed += b->size;
            off = release(h, off); /* may merge backwards: go on from the merged block */
        }
        off += blk(h, off)->size;
    }
    bool broken = h->sh->broken;
    heap_unlock(h);
    if (broken)
        return disco_set_error(DISCO_E_BROKEN,
                               "disco_heap_reclaim_owner(%u): heap metadata is corrupt", owner);
    if (freed_out != NULL)
        *freed_out = (size_t)freed;
    return DISCO_OK;
}

disco_status_t disco_heap_stats(const disco_heap_t *h, disco_heap_stats_t *stats_out)
{
    if (h == NULL || h->sh == NULL || stats_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_heap_stats: %s is NULL",
                               stats_out == NULL ? "stats_out" : "the heap");
    disco_status_t st = heap_lock(h, "disco_heap_stats");
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
    heap_unlock(h);
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

disco_status_t disco__heap_lock_for_test(disco_heap_t *h)
{
    return heap_lock(h, "disco__heap_lock_for_test");
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
    disco_status_t st = heap_lock(h, "disco__heap_check");
    if (st != DISCO_OK)
        return st;
    const struct disco_heap_shared *sh = h->sh;
    uint64_t prev = 0, nfree = 0, free_bytes = 0, nused = 0, used_bytes = 0;
    for (uint64_t off = h->arena_off; off < h->arena_end; off += blk(h, off)->size) {
        const struct block *b = blk(h, off);
        CHECK(header_ok(h, off), "block %#" PRIx64 ": bad header", off);
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
    heap_unlock(h);
    return st;
}
