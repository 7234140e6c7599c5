/* test_heap.c - the shared heap: round trips, alignment, other mappings,
 * exhaustion, bad frees, reclaim by owner. Many processes and threads at
 * once, and processes killed while they hold the heap's lock, are in
 * test_heap_shared.c. */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shm/heap_internal.h"
#include "disco/shm/heap.h"
#include "disco/shm/segment.h"
#include "tests/heap_util.h"
#include "tests/testutil.h"

/* One alloc then free, and a size-0 block: offsets, addresses and stats. */
START_TEST(test_round_trip)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(1 * MiB, &seg, &h);
    assert_empty(&h, "fresh heap");
    disco_heap_stats_t s0 = stats_of(&h);

    uint64_t off = alloc_ok(&h, 1000, 0, 1);
    unsigned char *p = disco_heap_ptr(&h, off);
    ck_assert_msg(off != DISCO_HEAP_NULL && (uintptr_t)p % 64 == 0, "alloc: off %#" PRIx64, off);
    ck_assert_msg(disco_heap_offset(&h, p) == off, "disco_heap_offset(ptr(off)) != off");
    ck_assert_msg(disco_heap_contains(&h, p, 1000), "disco_heap_contains(block) false");
    memset(p, 0x5A, 1000);
    disco_heap_stats_t s1 = stats_of(&h);
    ck_assert_msg(s1.live_blocks == 1 && s1.used_bytes == 1024 + HDR &&
                      s1.used_bytes + s1.free_bytes == s0.capacity,
                  "disco_heap_stats after alloc: live %zu used %zu", s1.live_blocks, s1.used_bytes);

    uint64_t z1 = alloc_ok(&h, 0, 0, 1), z2 = alloc_ok(&h, 0, 0, 1);
    ck_assert_msg(z1 != z2 && z1 != off && z2 != off, "size-0 offsets are not distinct");
    CK_OK(disco_heap_free(&h, z1));
    CK_OK(disco_heap_free(&h, off));
    CK_OK(disco_heap_free(&h, z2));
    assert_empty(&h, "after freeing all");
    ck_assert_msg(disco_heap_ptr(&h, DISCO_HEAP_NULL) == NULL, "disco_heap_ptr(NULL offset)");
    disco_segment_close(&seg);
}
END_TEST

/* Every alignment from 1 to 4096 is honoured at the address; bad ones are
 * refused and leave the heap as it was. */
START_TEST(test_alignment)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(4 * MiB, &seg, &h);
    uint64_t offs[128];
    int n = 0;
    for (size_t align = 0; align <= DISCO_HEAP_MAX_ALIGN; align = align == 0 ? 1 : align * 2) {
        for (size_t size = 1; size < 20000; size = size * 7 + 3) {
            offs[n] = alloc_ok(&h, size, align, 3);
            unsigned char *p = disco_heap_ptr(&h, offs[n]);
            size_t want = align < 64 ? 64 : align;
            ck_assert_msg((uintptr_t)p % want == 0, "alloc(%zu, align %zu): address %p", size,
                          align, (void *)p);
            memset(p, (int)n, size);
            n++;
        }
    }
    CK_OK(disco__heap_check(&h));
    disco_heap_stats_t before = stats_of(&h);
    uint64_t off = 0;
    CK_STATUS(disco_heap_alloc(&h, 64, 3, 0, &off), DISCO_E_INVAL);
    CK_STATUS(disco_heap_alloc(&h, 64, 8192, 0, &off), DISCO_E_INVAL);
    ck_assert_msg(off == 0, "disco_heap_alloc set off_out on failure");
    disco_heap_stats_t after = stats_of(&h);
    ck_assert_msg(memcmp(&before, &after, sizeof before) == 0, "refused alloc changed the stats");
    for (int i = 0; i < n; i += 2) /* every other one, then the rest */
        CK_OK(disco_heap_free(&h, offs[i]));
    for (int i = 1; i < n; i += 2)
        CK_OK(disco_heap_free(&h, offs[i]));
    assert_empty(&h, "after freeing all");
    disco_segment_close(&seg);
}
END_TEST

/* A forked child writes a block through the inherited mapping and through
 * its own fd mapping at another address; the parent reads both writes. */
START_TEST(test_cross_process_write)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(1 * MiB, &seg, &h);
    const size_t n = 64 * KiB;
    uint64_t off = alloc_ok(&h, n, 0, 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_segment_t mine;
        disco_heap_t hm;
        if (disco_segment_attach(seg.fd, &mine) != DISCO_OK ||
            disco_heap_attach(disco_segment_data(&mine), heap_mem_size(1 * MiB), &hm) != DISCO_OK)
            tu_child_fail("attach: %s", disco_last_error());
        if (disco_heap_ptr(&hm, off) == disco_heap_ptr(&h, off))
            tu_child_fail("fd mapping at the same address");
        unsigned char *a = disco_heap_ptr(&h, off), *b = disco_heap_ptr(&hm, off);
        for (size_t i = 0; i < n / 2; i++)
            a[i] = (unsigned char)(i * 3u + 1);
        for (size_t i = n / 2; i < n; i++)
            b[i] = (unsigned char)(i * 3u + 1);
        _exit(0);
    }
    tu_wait_ok(pid, "writer child");
    const unsigned char *p = disco_heap_ptr(&h, off);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(p[i] == (unsigned char)(i * 3u + 1), "byte %zu is %u", i, p[i]);
    CK_OK(disco_heap_free(&h, off));
    assert_empty(&h, "after free");
    disco_segment_close(&seg);
}
END_TEST

/* A second mapping by fd (as an exec'd worker has) at another address sees
 * the same blocks by offset and shares the lock: blocks allocated through
 * either handle are freed through the other. A child does the same and
 * sends its offset over a pipe. */
START_TEST(test_attach_other_mapping)
{
    disco_segment_t seg, seg2;
    disco_heap_t h, h2;
    make_heap(1 * MiB, &seg, &h);
    CK_OK(disco_segment_attach(seg.fd, &seg2));
    CK_OK(disco_heap_attach(disco_segment_data(&seg2), heap_mem_size(1 * MiB), &h2));
    ck_assert_msg(h2.base != h.base, "disco_segment_attach mapped at the same address");

    uint64_t a = alloc_ok(&h, 4000, 0, 1), b = alloc_ok(&h2, 4000, 4096, 2);
    strcpy(disco_heap_ptr(&h, a), "written through the first mapping");
    strcpy(disco_heap_ptr(&h2, b), "written through the second");
    ck_assert_str_eq(disco_heap_ptr(&h2, a), "written through the first mapping");
    ck_assert_str_eq(disco_heap_ptr(&h, b), "written through the second");
    ck_assert_msg((uintptr_t)disco_heap_ptr(&h, b) % 4096 == 0, "align 4096 lost in mapping 1");
    CK_OK(disco_heap_free(&h2, a));
    CK_OK(disco_heap_free(&h, b));
    assert_empty(&h2, "via second mapping");

    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_segment_t mine;
        disco_heap_t hm;
        uint64_t off;
        if (disco_segment_attach(seg.fd, &mine) != DISCO_OK ||
            disco_heap_attach(disco_segment_data(&mine), heap_mem_size(1 * MiB), &hm) != DISCO_OK ||
            disco_heap_alloc(&hm, 100, 0, 7, &off) != DISCO_OK)
            tu_child_fail("attach/alloc: %s", disco_last_error());
        strcpy(disco_heap_ptr(&hm, off), "from the child");
        if (write(fds[1], &off, sizeof off) != (ssize_t)sizeof off)
            tu_child_fail("write: %s", strerror(errno));
        _exit(0);
    }
    uint64_t off = 0;
    ck_assert_msg(read(fds[0], &off, sizeof off) == (ssize_t)sizeof off, "read offset");
    tu_wait_ok(pid, "attaching child");
    ck_assert_str_eq(disco_heap_ptr(&h, off), "from the child");
    CK_OK(disco_heap_free(&h, off));
    assert_empty(&h, "after the child's block");
    close(fds[0]);
    close(fds[1]);
    disco_segment_close(&seg2);
    disco_segment_close(&seg);
}
END_TEST

/* init and attach refuse bad memory: NULL, misaligned, too small, not a
 * heap, another size. */
START_TEST(test_init_attach_refusals)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(64 * KiB, &seg, &h);
    size_t fp = heap_mem_size(64 * KiB);
    unsigned char *mem = disco_segment_data(&seg);
    disco_heap_t out = {0};
    CK_STATUS(disco_heap_init(NULL, fp, &out), DISCO_E_INVAL);
    CK_STATUS(disco_heap_init(mem + 8, fp - 8, &out), DISCO_E_INVAL);
    CK_STATUS(disco_heap_init(mem, disco_heap_footprint(0) - 1, &out), DISCO_E_INVAL);
    CK_STATUS(disco_heap_attach(mem, fp + 64, &out), DISCO_E_BAD_MAGIC);
    static _Alignas(64) unsigned char zeros[8192];
    CK_STATUS(disco_heap_attach(zeros, sizeof zeros, &out), DISCO_E_BAD_MAGIC);
    ck_assert_msg(out.sh == NULL, "a refused call wrote the handle");
    CK_OK(disco_heap_attach(mem, fp, &out));
    memset(mem, 0xA5, 8); /* the magic */
    CK_STATUS(disco_heap_attach(mem, fp, &out), DISCO_E_BAD_MAGIC);
    disco_segment_close(&seg);
}
END_TEST

/* Running out gives DISCO_E_HEAP_EXHAUSTED with the sizes in the detail;
 * four freed quarters merge back into one block that holds everything. */
START_TEST(test_exhaustion_and_coalescing)
{
    const size_t cap = 1 * MiB - HDR; /* arena of exactly 1 MiB */
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(cap, &seg, &h);
    ck_assert_msg(stats_of(&h).capacity == 1 * MiB, "capacity %zu", stats_of(&h).capacity);
    uint64_t q[4];
    for (int i = 0; i < 4; i++)
        q[i] = alloc_ok(&h, 256 * KiB - HDR, 0, 1);
    uint64_t off = 0;
    CK_STATUS(disco_heap_alloc(&h, 1, 0, 1, &off), DISCO_E_HEAP_EXHAUSTED);
    ck_assert_msg(strstr(disco_last_error(), "1 bytes") != NULL &&
                      strstr(disco_last_error(), "largest free block holds 0 bytes") != NULL,
                  "detail: %s", disco_last_error());
    CK_OK(disco_heap_free(&h, q[1]));
    CK_OK(disco_heap_free(&h, q[3]));
    CK_STATUS(disco_heap_alloc(&h, 256 * KiB, 0, 1, &off), DISCO_E_HEAP_EXHAUSTED);
    ck_assert_msg(strstr(disco_last_error(), "262144 bytes") != NULL &&
                      strstr(disco_last_error(), "largest free block holds 262080") != NULL,
                  "detail: %s", disco_last_error());
    CK_OK(disco_heap_free(&h, q[0]));
    CK_OK(disco_heap_free(&h, q[2])); /* merges both ways */
    assert_empty(&h, "four quarters freed");
    uint64_t all = alloc_ok(&h, cap, 0, 1);
    memset(disco_heap_ptr(&h, all), 1, cap);
    CK_STATUS(disco_heap_alloc(&h, 0, 0, 1, &off), DISCO_E_HEAP_EXHAUSTED);
    CK_OK(disco_heap_free(&h, all));
    CK_STATUS(disco_heap_alloc(&h, cap + 1, 0, 1, &off), DISCO_E_HEAP_EXHAUSTED);
    CK_STATUS(disco_heap_alloc(&h, SIZE_MAX, 0, 1, &off), DISCO_E_HEAP_EXHAUSTED);
    CK_STATUS(disco_heap_alloc(&h, SIZE_MAX - 63, 4096, 1, &off), DISCO_E_HEAP_EXHAUSTED);
    ck_assert_msg(off == 0, "disco_heap_alloc set off_out on failure");
    assert_empty(&h, "after refusals");
    disco_segment_close(&seg);
}
END_TEST

/* Double frees, interior, misaligned and foreign offsets give
 * DISCO_E_INVAL and change nothing. */
START_TEST(test_bad_free)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(1 * MiB, &seg, &h);
    uint64_t a = alloc_ok(&h, 100, 0, 1), b = alloc_ok(&h, 100, 0, 1);
    uint64_t c = alloc_ok(&h, 5000, 0, 1);
    CK_OK(disco_heap_free(&h, b));
    disco_heap_stats_t before = stats_of(&h);
    const uint64_t bad[] = {b, 0, a + 64, a + 8, c + HDR, c - HDR, 1ull << 40, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CK_STATUS(disco_heap_free(&h, bad[i]), DISCO_E_INVAL);
        ck_assert_msg(strstr(disco_last_error(), "disco_heap_free") != NULL, "detail: %s",
                      disco_last_error());
        disco_heap_stats_t after = stats_of(&h);
        ck_assert_msg(memcmp(&before, &after, sizeof before) == 0,
                      "disco_heap_free(bad[%zu]) changed the stats", i);
        CK_OK(disco__heap_check(&h));
    }
    CK_OK(disco_heap_free(&h, a)); /* merges with b: b's header is gone */
    CK_STATUS(disco_heap_free(&h, b), DISCO_E_INVAL);
    CK_STATUS(disco_heap_free(&h, a), DISCO_E_INVAL);
    CK_OK(disco_heap_free(&h, c));
    CK_STATUS(disco_heap_free(&h, c), DISCO_E_INVAL);
    assert_empty(&h, "after bad frees");
    disco_segment_close(&seg);
}
END_TEST

/* reclaim_owner frees exactly the blocks of one owner, returns their bytes,
 * and leaves the others' blocks and data alone. */
START_TEST(test_reclaim_owner)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(4 * MiB, &seg, &h);
    uint64_t offs[90];
    size_t sizes[90];
    for (int i = 0; i < 90; i++) {
        sizes[i] = 100 + (size_t)i * 300;
        offs[i] = alloc_ok(&h, sizes[i], (size_t)64 << (i % 4), (uint32_t)(i % 3));
        memset(disco_heap_ptr(&h, offs[i]), i, sizes[i]);
    }
    size_t used = stats_of(&h).used_bytes;
    size_t got = 0;
    CK_OK(disco_heap_reclaim_owner(&h, 1, &got));
    disco_heap_stats_t s = stats_of(&h);
    ck_assert_msg(got > 0 && got == used - s.used_bytes && s.live_blocks == 60,
                  "disco_heap_reclaim_owner(1) = %zu, used %zu -> %zu, live %zu", got, used,
                  s.used_bytes, s.live_blocks);
    CK_OK(disco__heap_check(&h));
    CK_OK(disco_heap_reclaim_owner(&h, 1, &got));
    ck_assert_msg(got == 0, "second reclaim of owner 1 freed bytes");
    CK_OK(disco_heap_reclaim_owner(&h, 77, &got));
    ck_assert_msg(got == 0, "reclaim of an unknown owner");
    for (int i = 0; i < 90; i++) {
        if (i % 3 == 1) {
            CK_STATUS(disco_heap_free(&h, offs[i]), DISCO_E_INVAL);
            continue;
        }
        const unsigned char *p = disco_heap_ptr(&h, offs[i]);
        for (size_t k = 0; k < sizes[i]; k++)
            ck_assert_msg(p[k] == (unsigned char)i, "block %d byte %zu changed", i, k);
        CK_OK(disco_heap_free(&h, offs[i]));
    }
    assert_empty(&h, "after reclaim and frees");
    disco_segment_close(&seg);
}
END_TEST

/* A 64 MiB block comes at once even with 20,000 small blocks around, and
 * 50,000 small allocs and frees in random order take linear time. */
START_TEST(test_big_and_many)
{
    enum { NSMALL = 50000 };
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(160 * MiB, &seg, &h);
    static uint64_t offs[NSMALL];
    uint64_t rng = 88172645463325252ull;
    int64_t t0 = disco_now_ns();
    for (int i = 0; i < NSMALL; i++)
        offs[i] = alloc_ok(&h, 1 + rng_next(&rng) % 512, 0, 1);
    double alloc_ms = tu_ms_since(t0);
    for (int i = 0; i < NSMALL; i += 2) /* holes everywhere */
        CK_OK(disco_heap_free(&h, offs[i]));
    t0 = disco_now_ns();
    uint64_t big = alloc_ok(&h, 64 * MiB, 4096, 2);
    double big_ms = tu_ms_since(t0);
    memset(disco_heap_ptr(&h, big), 7, 4096);
    int left = 0;
    for (int i = 1; i < NSMALL; i += 2)
        offs[left++] = offs[i];
    for (int i = left - 1; i > 0; i--) { /* shuffle the rest */
        int j = (int)(rng_next(&rng) % (uint64_t)(i + 1));
        uint64_t t = offs[i];
        offs[i] = offs[j];
        offs[j] = t;
    }
    CK_OK(disco__heap_check(&h));
    t0 = disco_now_ns();
    CK_OK(disco_heap_free(&h, big));
    for (int i = 0; i < left; i++)
        CK_OK(disco_heap_free(&h, offs[i]));
    double free_ms = tu_ms_since(t0);
    assert_empty(&h, "after the big block and the small ones");
    fprintf(stderr,
            "heap: %d small allocs %.1f ms, 64 MiB among 25k holes %.3f ms, %d frees %.1f ms\n",
            NSMALL, alloc_ms, big_ms, NSMALL / 2 + 1, free_ms);
    ck_assert_msg(big_ms < 50, "64 MiB alloc took %.2f ms", big_ms);
    ck_assert_msg(alloc_ms < 2000 && free_ms < 2000, "small allocs %.0f ms, frees %.0f ms",
                  alloc_ms, free_ms);
    disco_segment_close(&seg);
}
END_TEST

Suite *suite_heap(void)
{
    Suite *s = suite_create("heap");
    TCase *tc = tcase_create("basics");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_alignment);
    tcase_add_test(tc, test_cross_process_write);
    tcase_add_test(tc, test_attach_other_mapping);
    tcase_add_test(tc, test_init_attach_refusals);
    tcase_add_test(tc, test_exhaustion_and_coalescing);
    tcase_add_test(tc, test_bad_free);
    tcase_add_test(tc, test_reclaim_owner);
    tcase_add_test(tc, test_big_and_many);
    suite_add_tcase(s, tc);

    return s;
}
