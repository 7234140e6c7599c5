/* test_heap_lazy.c - a heap backed as it is used (disco_heap_init_lazy):
 * what the file really holds before and after allocations, a populate that
 * fails (nothing lost, the next allocation works), a kernel that cannot
 * populate (the session backs it all, as before), many processes growing
 * it at once, and a session whose workers grow it. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disco/session.h"
#include "disco/tensor.h"
#include "tests/heap_util.h"
#include "tests/session_util.h"
#include "tests/testutil.h"

/* Bytes the file behind fd holds (allocated blocks, not its size). */
static size_t file_bytes(int fd)
{
    struct stat sb;
    ck_assert_msg(fstat(fd, &sb) == 0, "fstat: %s", strerror(errno));
    return (size_t)sb.st_blocks * 512u;
}

/* A partial segment with a lazily backed heap of capacity at its data. */
static void make_lazy_heap(size_t capacity, disco_segment_t *seg, disco_heap_t *h)
{
    size_t fp = disco_heap_footprint(capacity);
    CK_OK(disco_segment_create_partial("disco-test-lazy", fp, 0, seg));
    CK_OK(disco_heap_init_lazy(disco_segment_data(seg), fp, h));
}

static int fail_with; /* what the populate hook below returns */
static int hook_calls;

static int populate_hook(size_t len)
{
    (void)len;
    hook_calls++;
    return fail_with;
}

/* Only the header is backed at first; allocations back what they reach, a
 * chunk at a time, in the file itself; freeing keeps it; the end of the
 * heap is reached exactly. */
START_TEST(test_backs_as_used)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_lazy_heap(64 * MiB, &seg, &h);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    disco_heap_stats_t s = stats_of(&h);
    ck_assert_msg(s.backed_bytes > 0 && s.backed_bytes <= page, "backed at first: %zu",
                  s.backed_bytes);
    size_t at_first = file_bytes(seg.fd);
    ck_assert_msg(at_first <= 2 * page, "the file holds %zu bytes before any block", at_first);

    uint64_t a = alloc_ok(&h, 3 * MiB, 0, 1);
    memset(disco_heap_ptr(&h, a), 0x5a, 3 * MiB);
    s = stats_of(&h);
    ck_assert_msg(s.backed_bytes >= a + 3 * MiB && s.backed_bytes <= a + 3 * MiB + 2 * MiB + page,
                  "after 3 MiB at %#lx: %zu backed", (unsigned long)a, s.backed_bytes);
    ck_assert_msg(file_bytes(seg.fd) >= s.backed_bytes, "file holds %zu of %zu backed",
                  file_bytes(seg.fd), s.backed_bytes);
    size_t after_a = s.backed_bytes;

    /* Small blocks below the mark cost nothing more. */
    uint64_t small[16];
    for (int i = 0; i < 16; i++)
        small[i] = alloc_ok(&h, 1000, 0, 1);
    ck_assert_uint_eq(stats_of(&h).backed_bytes, after_a);
    for (int i = 0; i < 16; i++)
        CK_OK(disco_heap_free(&h, small[i]));
    CK_OK(disco_heap_free(&h, a));
    ck_assert_uint_eq(stats_of(&h).backed_bytes, after_a); /* backing only grows */
    assert_empty(&h, "after the frees");

    /* The whole capacity: backed to the heap's end, the bytes usable. */
    s = stats_of(&h);
    uint64_t all = alloc_ok(&h, s.largest_free, 0, 2);
    memset(disco_heap_ptr(&h, all), 0xa5, s.largest_free);
    ck_assert_uint_eq(stats_of(&h).backed_bytes, heap_mem_size(64 * MiB));
    CK_OK(disco__heap_check(&h));
    CK_OK(disco_heap_free(&h, all));
    assert_empty(&h, "after the whole heap");
    disco_segment_close(&seg);
}
END_TEST

static size_t last_len; /* the last populate's length, for the test below */

static int record_len(size_t len)
{
    last_len = len;
    return 0;
}

/* The heap's size in its shared header is any process's to write: backing
 * is bounded by this process's own copy. With the header's size raised to
 * 1 TiB, taking the whole heap backs up to its end and no further (before,
 * the backing rounded up to the next 2 MiB past the heap, populated past
 * its mapping and failed the allocation with DISCO_E_NOSPACE). */
START_TEST(test_back_bounded_by_own_size)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_lazy_heap(3 * MiB, &seg, &h);
    uint64_t *shared_size = (uint64_t *)((char *)h.sh + 16); /* after magic, layout, page_mod */
    ck_assert_uint_eq(*shared_size, h.mem_size);
    *shared_size = (uint64_t)1 << 40;
    disco__heap_populate_hook = record_len;
    disco_heap_stats_t s = stats_of(&h);
    uint64_t all = alloc_ok(&h, s.largest_free, 0, 2);
    ck_assert_msg(last_len > 0 && last_len <= h.mem_size, "populated %zu bytes of a heap of %llu",
                  last_len, (unsigned long long)h.mem_size);
    ck_assert_uint_eq(stats_of(&h).backed_bytes, h.mem_size);
    CK_OK(disco_heap_free(&h, all));
    disco__heap_populate_hook = NULL;
    *shared_size = h.mem_size;
    disco_segment_close(&seg);
}
END_TEST

/* A populate that fails (memory not there): DISCO_E_NOSPACE saying so,
 * nothing changed; once memory is there the same allocation works. */
START_TEST(test_populate_fails_cleanly)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_lazy_heap(32 * MiB, &seg, &h);
    uint64_t keep = alloc_ok(&h, 1000, 0, 1);
    disco_heap_stats_t before = stats_of(&h);
    disco__heap_populate_hook = populate_hook;
    fail_with = ENOMEM;
    hook_calls = 0;
    uint64_t off = 0;
    CK_STATUS(disco_heap_alloc(&h, 8 * MiB, 0, 1, &off), DISCO_E_NOSPACE);
    ck_assert_int_eq(hook_calls, 1);
    ck_assert_msg(strstr(disco_last_error(), "cannot back") != NULL &&
                      strstr(disco_last_error(), strerror(ENOMEM)) != NULL,
                  "message: %s", disco_last_error());
    ck_assert_uint_eq(off, 0);
    CK_OK(disco__heap_check(&h));
    disco_heap_stats_t after = stats_of(&h);
    ck_assert_msg(
        after.used_bytes == before.used_bytes && after.live_blocks == before.live_blocks &&
            after.free_bytes == before.free_bytes && after.free_blocks == before.free_blocks &&
            after.backed_bytes == before.backed_bytes,
        "the failed allocation changed the heap");
    fail_with = 0;
    uint64_t got = alloc_ok(&h, 8 * MiB, 0, 1);
    memset(disco_heap_ptr(&h, got), 1, 8 * MiB);
    ck_assert_msg(stats_of(&h).backed_bytes >= got + 8 * MiB, "not backed after the retry");
    disco__heap_populate_hook = NULL;
    CK_OK(disco_heap_free(&h, got));
    CK_OK(disco_heap_free(&h, keep));
    assert_empty(&h, "after the retry");
    disco_segment_close(&seg);
}
END_TEST

/* Bytes of this process's session segment file (the one memfd named
 * disco-session among its fds), or -1 if there is none. */
static long session_file_bytes(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    long bytes = -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strncmp(target, "/memfd:disco-session", 20) == 0)
            bytes = (long)file_bytes(atoi(e->d_name));
    }
    closedir(d);
    return bytes;
}

/* A partial segment's refusals, and disco_segment_back backing a range in
 * the file. */
START_TEST(test_partial_segment)
{
    disco_segment_t seg;
    CK_STATUS(disco_segment_create_partial("x", 4096, 8192, &seg), DISCO_E_INVAL);
    CK_OK(disco_segment_create_partial("x", 4 * MiB, 0, &seg));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ck_assert_msg(file_bytes(seg.fd) <= page, "file holds %zu", file_bytes(seg.fd));
    CK_STATUS(disco_segment_back(&seg, 4 * MiB, 1), DISCO_E_INVAL);
    CK_STATUS(disco_segment_back(&seg, 1, SIZE_MAX), DISCO_E_INVAL);
    CK_STATUS(disco_segment_back(NULL, 0, 1), DISCO_E_INVAL);
    CK_OK(disco_segment_back(&seg, 1 * MiB, 2 * MiB));
    size_t got = file_bytes(seg.fd);
    ck_assert_msg(got >= 2 * MiB && got <= 2 * MiB + 2 * page, "file holds %zu", got);
    disco_segment_close(&seg);
    disco_segment_t zero = {.fd = -1};
    CK_STATUS(disco_segment_back(&zero, 0, 0), DISCO_E_INVAL);
}
END_TEST

/* A kernel that cannot populate (before 5.14): init_lazy says so and
 * writes nothing; a session then backs its whole heap at open, as before. */
START_TEST(test_no_populate_backs_all)
{
    disco_segment_t seg;
    disco_heap_t h;
    size_t fp = disco_heap_footprint(4 * MiB);
    CK_OK(disco_segment_create_partial("disco-test-lazy", fp, 0, &seg));
    disco__heap_populate_hook = populate_hook;
    fail_with = EINVAL;
    CK_STATUS(disco_heap_init_lazy(disco_segment_data(&seg), fp, &h), DISCO_E_UNSUPPORTED);
    ck_assert_msg(strstr(disco_last_error(), "Linux 5.14") != NULL, "message: %s",
                  disco_last_error());
    CK_STATUS(disco_heap_attach(disco_segment_data(&seg), fp, &h), DISCO_E_BAD_MAGIC);
    disco_segment_close(&seg);

    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.heap_bytes = 8 * MiB;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    disco_heap_stats_t hs;
    CK_OK(disco_session_heap_stats(s, &hs));
    ck_assert_msg(hs.backed_bytes >= hs.capacity, "backed %zu of %zu", hs.backed_bytes,
                  hs.capacity);
    ck_assert_msg(session_file_bytes() >= (long)(8 * MiB), "the file holds %ld bytes",
                  session_file_bytes());
    disco__heap_populate_hook = NULL;
    fail_with = 0;
    disco_session_close(s);
}
END_TEST

/* Four processes churn a lazily backed heap at once, pushing its mark up
 * together: every block keeps its bytes (churn checks each before freeing)
 * and the heap ends sound and empty. */
START_TEST(test_processes_grow_it_together)
{
    enum { NPROC = 4, ROUNDS = 40 };
    disco_segment_t seg;
    disco_heap_t h;
    make_lazy_heap(96 * MiB, &seg, &h);
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = tu_fork();
        if (pids[i] == 0) {
            uint64_t off[ROUNDS];
            for (int r = 0; r < ROUNDS; r++) {
                size_t size = (size_t)(r % 7 + 1) * 64 * KiB;
                CH_OK(disco_heap_alloc(&h, size, 0, (uint32_t)i + 1, &off[r]));
                memset(disco_heap_ptr(&h, off[r]), i + 1, size);
            }
            for (int r = 0; r < ROUNDS; r++) {
                size_t size = (size_t)(r % 7 + 1) * 64 * KiB;
                const unsigned char *p = disco_heap_ptr(&h, off[r]);
                for (size_t b = 0; b < size; b += 512)
                    CH_TRUE(p[b] == i + 1);
                CH_OK(disco_heap_free(&h, off[r]));
            }
            _exit(0);
        }
    }
    for (int i = 0; i < NPROC; i++)
        tu_wait_ok(pids[i], "growing child");
    assert_empty(&h, "after the children");
    /* Each child holds all its blocks at once, so the mark passed one
     * child's sum at least; how far the children overlapped in time, and
     * so how much more, depends on the scheduler. */
    size_t one = 0;
    for (int r = 0; r < ROUNDS; r++)
        one += (size_t)(r % 7 + 1) * 64 * KiB;
    disco_heap_stats_t s = stats_of(&h);
    ck_assert_msg(s.backed_bytes >= one, "backed only %zu of one child's %zu", s.backed_bytes, one);
    ck_assert_msg(file_bytes(seg.fd) >= s.backed_bytes, "file holds %zu of %zu backed",
                  file_bytes(seg.fd), s.backed_bytes);
    disco_segment_close(&seg);
}
END_TEST

/* A session of 8 workers (forked, then spawned) holds little at open; each
 * worker's tensor backs more of the heap from the worker's own mapping, and an allreduce over
 * them is exact. A populate that fails in the controller fails that copy
 * with DISCO_E_NOSPACE, and the session goes on. */
START_TEST(test_session_grows_it)
{
    enum { N = 8, COUNT = 1 << 19 };
    disco_session_config_t cfg = disco_session_config_default(N);
    cfg.heap_bytes = 64 * MiB;
    cfg.launch = _i == 0 ? DISCO_LAUNCH_FORK : DISCO_LAUNCH_SPAWN;
    cfg.worker_path = DISCO_TEST_WORKER;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    long at_open = session_file_bytes();
    ck_assert_msg(at_open > 0 && at_open < (long)(2 * MiB), "the file holds %ld bytes at open",
                  at_open);
    disco_heap_stats_t hs;
    CK_OK(disco_session_heap_stats(s, &hs));
    ck_assert_msg(hs.backed_bytes < 1 * MiB, "heap backed %zu at open", hs.backed_bytes);

    int64_t shape[1] = {COUNT};
    DLDataType f32 = {kDLFloat, 32, 1};
    disco_value_t fa[3] = {disco_value_shape(shape, 1), disco_value_dtype(f32), disco_value_int(3)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    disco_value_t a[3] = {tu_dref(x), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &y));
    CK_OK(disco_session_sync_all(s));
    CK_OK(disco_session_heap_stats(s, &hs));
    ck_assert_msg(hs.backed_bytes >= (size_t)2 * N * COUNT * sizeof(float), "heap backed %zu",
                  hs.backed_bytes);
    ck_assert_msg(session_file_bytes() >= (long)hs.backed_bytes, "file holds %ld of %zu",
                  session_file_bytes(), hs.backed_bytes);
    float *got = malloc(COUNT * sizeof *got);
    ck_assert_ptr_nonnull(got);
    DLTensor host = {.data = got, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32, .shape = shape};
    CK_OK(disco_session_copy_from_worker0(s, y, &host));
    for (int i = 0; i < COUNT; i += 997) {
        double want = 0; /* test.fill: ((i * 7 + w * 13 + seed) % 17 - 8) * 0.5 */
        for (int w = 0; w < N; w++)
            want += ((i * 7 + w * 13 + 3) % 17 - 8) * 0.5;
        ck_assert_msg(got[i] == (float)want, "element %d: %g, want %g", i, got[i], want);
    }

    /* The controller cannot back more: its copy fails cleanly. */
    size_t backed = hs.backed_bytes;
    disco__heap_populate_hook = populate_hook;
    fail_with = ENOMEM;
    int64_t big[1] = {(int64_t)(hs.capacity - backed) / 4 - 4096};
    DLTensor bigh = {.data = NULL, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32, .shape = big};
    float *bigbuf = calloc((size_t)big[0], sizeof(float));
    ck_assert_ptr_nonnull(bigbuf);
    bigh.data = bigbuf;
    disco_dref_t z;
    CK_STATUS(disco_session_copy_to_worker0(s, &bigh, &z), DISCO_E_NOSPACE);
    ck_assert_msg(strstr(disco_last_error(), "cannot back") != NULL, "message: %s",
                  disco_last_error());
    disco__heap_populate_hook = NULL;
    fail_with = 0;
    CK_OK(disco_session_copy_to_worker0(s, &bigh, &z));
    CK_OK(disco_session_free_reg(s, z));
    free(bigbuf);
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_free_reg(s, x));
    CK_OK(disco_session_sync_all(s));
    free(got);
    disco_session_close(s);
}
END_TEST

/* Issue 35 part 3: a session opened with the defaults (heap_bytes 0)
 * reserves a heap that takes a 64 MiB tensor on every worker (16 MiB did
 * not: HEAP_EXHAUSTED), with little backed at open; its bytes go there and
 * back; the capacity stays within half the machine's memory. */
START_TEST(test_default_heap_fits_64mib)
{
    enum { N = 2 };
    disco_session_config_t cfg = disco_session_config_default(N);
    disco_session_t *s = NULL;
    CK_OK(disco_session_open(&cfg, &s));
    disco_heap_stats_t hs;
    CK_OK(disco_session_heap_stats(s, &hs));
    uint64_t total = disco_memory_total();
    ck_assert_msg(hs.capacity >= 3 * 64 * MiB + MiB, "default heap of %zu bytes", hs.capacity);
    ck_assert_msg(total == 0 || hs.capacity <= total / 2, "default heap of %zu of %llu bytes",
                  hs.capacity, (unsigned long long)total);
    ck_assert_msg(hs.backed_bytes < 1 * MiB, "heap backed %zu at open", hs.backed_bytes);

    int64_t shape[2] = {4096, 4096}; /* sess.empty((4096, 4096), "float32") */
    DLDataType f32 = {kDLFloat, 32, 1};
    disco_dref_t e;
    CK_OK(disco_session_empty(s, shape, 2, f32, false, &e));
    CK_OK(disco_session_sync_all(s));
    float *buf = malloc(64 * MiB);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < 16 * MiB; i++)
        buf[i] = (float)(i % 1000);
    DLTensor host = {.data = buf, .device = {kDLCPU, 0}, .ndim = 2, .dtype = f32, .shape = shape};
    disco_dref_t x;
    CK_OK(disco_session_copy_to_worker0(s, &host, &x));
    memset(buf, 0, 64 * MiB);
    CK_OK(disco_session_copy_from_worker0(s, x, &host));
    for (size_t i = 0; i < 16 * MiB; i += 4093)
        ck_assert_msg(buf[i] == (float)(i % 1000), "element %zu: %g", i, buf[i]);
    CK_OK(disco_session_heap_stats(s, &hs));
    ck_assert_msg(hs.backed_bytes >= 3 * 64 * MiB && hs.backed_bytes < 3 * 64 * MiB + 16 * MiB,
                  "heap backed %zu with three 64 MiB tensors", hs.backed_bytes);
    free(buf);
    CK_OK(disco_session_free_reg(s, x));
    CK_OK(disco_session_free_reg(s, e));
    CK_OK(disco_session_sync_all(s));
    disco_session_close(s);
}
END_TEST

Suite *suite_heap_lazy(void)
{
    Suite *s = suite_create("heap_lazy");
    TCase *tc = tcase_create("lazy");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_backs_as_used);
    tcase_add_test(tc, test_back_bounded_by_own_size);
    tcase_add_test(tc, test_default_heap_fits_64mib);
    tcase_add_test(tc, test_populate_fails_cleanly);
    tcase_add_test(tc, test_partial_segment);
    tcase_add_test(tc, test_no_populate_backs_all);
    tcase_add_test(tc, test_processes_grow_it_together);
    tcase_add_loop_test(tc, test_session_grows_it, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
