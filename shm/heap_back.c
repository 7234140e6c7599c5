/* heap_back.c - backing a lazily backed heap (disco_heap_init_lazy, in
 * heap.c): its memory is backed a chunk at a time, under the lock, as blocks
 * reach past what is backed, so that a heap costs at creation only what it
 * holds. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "disco/shm/segment.h"
#include "shm/heap_block.h"
#include "shm/prefault.h"

/* Backing grows by at least this much at a time: a populate of 2 MiB costs
 * a few hundred microseconds, so the memory check before it (reading
 * /proc/meminfo, tens of microseconds) stays a small part. */
#define BACK_CHUNK ((uint64_t)2 << 20)

int (*disco__heap_populate_hook)(size_t len);

/* MADV_POPULATE_WRITE allocates the pages in the shared file, as fallocate
 * would, through this process's mapping, so that any process of the session
 * can do it without the file's descriptor. */
int disco__heap_populate(const disco_heap_t *h, uint64_t from, uint64_t to, uint64_t *end_out)
{
    if (disco__heap_populate_hook != NULL) {
        int e = disco__heap_populate_hook((size_t)(to - from));
        if (e != 0)
            return e;
    }
    char *end;
    int e = disco__populate((char *)h->base + from, (size_t)(to - from), &end);
    if (e == 0)
        *end_out = (uint64_t)(end - (char *)h->base);
    return e;
}

disco_status_t disco__heap_back(const disco_heap_t *h, uint64_t end, const char *who)
{
    struct disco_heap_shared *sh = h->sh;
    uint64_t have = sh->backed_end; /* any value another process wrote: only compared */
    if (end <= have)
        return DISCO_OK;
    uint64_t want = end + BACK_CHUNK - 1;
    want = want - want % BACK_CHUNK;
    /* The handle's size, never the shared header's: a size another process
     * raised would back (populate) past the heap and its mapping
     * (test_back_bounded_by_own_size). */
    if (want > h->mem_size || want < end)
        want = h->mem_size;
    disco_status_t st = disco_memory_check(want - have, "backing the heap");
    if (st != DISCO_OK)
        return disco_set_error(DISCO_E_NOSPACE, "%s: %s", who, disco_last_error());
    uint64_t got = 0;
    int e = disco__heap_populate(h, have, want, &got);
    if (e != 0)
        return disco_set_error(DISCO_E_NOSPACE,
                               "%s: cannot back %" PRIu64 " more bytes of the heap (%" PRIu64
                               " of %" PRIu64 " backed): %s",
                               who, want - have, have, h->mem_size, strerror(e));
    sh->backed_end = got < h->mem_size ? got : h->mem_size;
    return DISCO_OK;
}
