/*
 * disco/heap_stats.h - what a shared heap holds (disco_session_heap_stats;
 * the heap itself is <disco/shm/heap.h>).
 */
#ifndef DISCO_HEAP_STATS_H
#define DISCO_HEAP_STATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A shared heap's figures (disco_session_heap_stats, disco_heap_stats). */
typedef struct disco_heap_stats {
    size_t capacity;     /* bytes of blocks, headers included (used + free) */
    size_t used_bytes;   /* bytes in live blocks, headers included */
    size_t free_bytes;   /* bytes in free blocks, headers included */
    size_t largest_free; /* the largest size an alloc (align <= 64) gets now */
    size_t live_blocks;  /* blocks allocated and not freed */
    size_t free_blocks;  /* free blocks (1 on an empty heap) */
    uint64_t recoveries; /* times a dead lock holder's state was recovered */
    size_t backed_bytes; /* bytes of the heap's memory backed so far, its
                          * header included: all of it, unless set up lazily */
} disco_heap_stats_t;

#ifdef __cplusplus
}
#endif

#endif
