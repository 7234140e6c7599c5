/* heap_util.h - helpers shared by the heap suites (test_heap.c,
 * test_heap_shared.c): a heap in a segment, its statistics and checks, an
 * allocation that must succeed, a generator. Header-only, static. */
#ifndef DISCO_TESTS_HEAP_UTIL_H
#define DISCO_TESTS_HEAP_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/shm/heap.h"
#include "disco/shm/segment.h"
#include "shm/heap_internal.h"
#include "tests/testutil.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define HDR ((size_t)DISCO_HEAP_BLOCK_HDR)

/* A segment holding one heap of footprint(capacity) bytes at its data. */
static inline void make_heap(size_t capacity, disco_segment_t *seg, disco_heap_t *h)
{
    size_t fp = disco_heap_footprint(capacity);
    CK_OK(disco_segment_create("disco-test-heap", fp, seg));
    CK_OK(disco_heap_init(disco_segment_data(seg), fp, h));
}

static inline size_t heap_mem_size(size_t capacity)
{
    return disco_heap_footprint(capacity);
}

static inline disco_heap_stats_t stats_of(disco_heap_t *h)
{
    disco_heap_stats_t s;
    CK_OK(disco_heap_stats(h, &s));
    return s;
}

/* Asserts the heap is sound and holds no live block: one free block. */
static inline void assert_empty(disco_heap_t *h, const char *when)
{
    CK_OK(disco__heap_check(h));
    disco_heap_stats_t s = stats_of(h);
    ck_assert_msg(s.used_bytes == 0 && s.live_blocks == 0 && s.free_blocks == 1 &&
                      s.free_bytes == s.capacity && s.largest_free == s.capacity - HDR,
                  "%s: disco_heap_stats: used %zu live %zu free blocks %zu free %zu of %zu", when,
                  s.used_bytes, s.live_blocks, s.free_blocks, s.free_bytes, s.capacity);
}

static inline uint64_t alloc_ok(disco_heap_t *h, size_t size, size_t align, uint32_t owner)
{
    uint64_t off = 0;
    CK_OK(disco_heap_alloc(h, size, align, owner, &off));
    return off;
}

static inline uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
