/* test_heap_shared.c - the shared heap under its sharers: many processes
 * and threads at once, and processes killed while they hold the heap's lock
 * (at every step of a change, and in a loop). */
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

/* --- many users at once ------------------------------------------------ */

#define CHURN_SLOTS 64

/* Random allocs and frees; each block is filled with a pattern of its own
 * and checked before it is freed, so overlapping blocks would show. Frees
 * everything at the end. Returns 0 or writes why into why. */
static int churn(disco_heap_t *h, uint32_t owner, int ops, char *why, size_t whylen)
{
    uint64_t off[CHURN_SLOTS] = {0}, size[CHURN_SLOTS] = {0};
    unsigned char pat[CHURN_SLOTS] = {0};
    uint64_t rng = 0x9E3779B97F4A7C15ull * (owner + 1);
    static const size_t aligns[] = {0, 1, 64, 128, 256, 4096};
    for (int op = 0; op < ops + CHURN_SLOTS; op++) {
        int k = op < ops ? (int)(rng_next(&rng) % CHURN_SLOTS) : op - ops;
        if (off[k] != 0) {
            const unsigned char *p = disco_heap_ptr(h, off[k]);
            for (uint64_t i = 0; i < size[k]; i++)
                if (p[i] != pat[k]) {
                    snprintf(why, whylen, "owner %u: block %#" PRIx64 " byte %" PRIu64 " is %u",
                             owner, off[k], i, p[i]);
                    return -1;
                }
            disco_status_t st = disco_heap_free(h, off[k]);
            if (st != DISCO_OK) {
                snprintf(why, whylen, "disco_heap_free: %s (%s)", disco_err_name(st),
                         disco_last_error());
                return -1;
            }
            off[k] = 0;
        } else if (op < ops) {
            uint64_t r = rng_next(&rng);
            size[k] = r % 16 == 0 ? r % (256 * KiB) : r % 4096;
            size_t align = aligns[(r >> 32) % 6];
            disco_status_t st = disco_heap_alloc(h, size[k], align, owner, &off[k]);
            if (st != DISCO_OK || (uintptr_t)disco_heap_ptr(h, off[k]) % (align ? align : 1)) {
                snprintf(why, whylen, "disco_heap_alloc(%" PRIu64 ", %zu): %s (%s)", size[k], align,
                         disco_err_name(st), disco_last_error());
                return -1;
            }
            pat[k] = (unsigned char)(owner * 64 + (unsigned)op);
            memset(disco_heap_ptr(h, off[k]), pat[k], size[k]);
        }
    }
    return 0;
}

/* Four processes (twice the cores) churn 20,000 ops each on one heap: no
 * block overlaps another, and all is free at the end. */
START_TEST(test_concurrent_processes)
{
    enum { NPROC = 4, OPS = 20000 };
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(96 * MiB, &seg, &h);
    int64_t t0 = disco_now_ns();
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = tu_fork();
        if (pids[i] == 0) {
            char why[256];
            if (churn(&h, (uint32_t)i + 1, OPS, why, sizeof why) != 0)
                tu_child_fail("%s", why);
            _exit(0);
        }
    }
    for (int i = 0; i < NPROC; i++)
        tu_wait_ok(pids[i], "churning child");
    fprintf(stderr, "heap: %d processes x %d alloc/free in %.0f ms\n", NPROC, OPS, tu_ms_since(t0));
    assert_empty(&h, "after the children");
    ck_assert_msg(stats_of(&h).recoveries == 0, "a lock recovery happened");
    disco_segment_close(&seg);
}
END_TEST

struct churn_arg {
    disco_heap_t *h;
    uint32_t owner;
    int rc;
    char why[256];
};

static void *churn_thread(void *p)
{
    struct churn_arg *a = p;
    a->rc = churn(a->h, a->owner, 10000, a->why, sizeof a->why);
    return NULL;
}

/* Four threads of one process churn one heap (the form ThreadSanitizer
 * can check). */
START_TEST(test_concurrent_threads)
{
    enum { NTHR = 4 };
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(96 * MiB, &seg, &h);
    pthread_t t[NTHR];
    struct churn_arg args[NTHR];
    int64_t t0 = disco_now_ns();
    for (int i = 0; i < NTHR; i++) {
        args[i] = (struct churn_arg){.h = &h, .owner = (uint32_t)i + 10};
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn_thread, &args[i]), 0);
    }
    for (int i = 0; i < NTHR; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(args[i].rc == 0, "thread %d: %s", i, args[i].why);
    }
    fprintf(stderr, "heap: %d threads x 10000 alloc/free in %.0f ms\n", NTHR, tu_ms_since(t0));
    assert_empty(&h, "after the threads");
    disco_segment_close(&seg);
}
END_TEST

/* --- processes that die ------------------------------------------------ */

/* Kills the caller at one chosen step (set before the fork). */
static int kill_step;

static void die_at_step(int step)
{
    if (step == kill_step)
        raise(SIGKILL);
}

static void wait_killed(pid_t pid, const char *what)
{
    int ws = 0;
    ck_assert_msg(waitpid(pid, &ws, 0) == pid, "waitpid(%s): %s", what, strerror(errno));
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "%s: not killed (status %#x)", what,
                  ws);
}

/* Forks a child that makes nallocs blocks of 1000 bytes as owner 9, takes
 * the heap lock and parks holding it; returns once it holds the lock. */
static pid_t fork_lock_holder(disco_heap_t *h, int nallocs)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        uint64_t off;
        for (int i = 0; i < nallocs; i++)
            if (disco_heap_alloc(h, 1000, 0, 9, &off) != DISCO_OK)
                tu_child_fail("alloc: %s", disco_last_error());
        if (disco__heap_lock_for_test(h) != DISCO_OK)
            tu_child_fail("lock: %s", disco_last_error());
        char c = 1;
        if (write(fds[1], &c, 1) != 1)
            tu_child_fail("write: %s", strerror(errno));
        for (;;)
            pause();
    }
    char c;
    ck_assert_msg(read(fds[0], &c, 1) == 1, "read: child did not take the lock");
    close(fds[0]);
    close(fds[1]);
    return pid;
}

/* A process SIGKILLed while it holds the lock: the next caller recovers
 * (no deadlock), and reclaim_owner returns the dead process's blocks. */
START_TEST(test_lock_holder_killed)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(1 * MiB, &seg, &h);
    pid_t pid = fork_lock_holder(&h, 3);
    kill(pid, SIGKILL);
    wait_killed(pid, "lock holder");
    uint64_t off = alloc_ok(&h, 500, 0, 1); /* would hang without recovery */
    disco_heap_stats_t s = stats_of(&h);
    ck_assert_msg(s.recoveries == 1 && s.live_blocks == 4, "recoveries %" PRIu64 ", live %zu",
                  s.recoveries, s.live_blocks);
    CK_OK(disco__heap_check(&h));
    size_t got = 0;
    CK_OK(disco_heap_reclaim_owner(&h, 9, &got));
    ck_assert_msg(got == 3 * (1024 + HDR), "disco_heap_reclaim_owner(9) = %zu", got);
    CK_OK(disco_heap_free(&h, off));
    assert_empty(&h, "after reclaim");
    disco_segment_close(&seg);
}
END_TEST

/* disco_heap_stats and disco_heap_reclaim_owner report their failures as a
 * status and leave the caller's output untouched: NULL heap, NULL header,
 * NULL output (DISCO_E_INVAL), and a lock held past the handle's wait by a
 * live process (DISCO_E_TIMEOUT, never zeros that would look like an empty
 * heap and nothing to reclaim). */
START_TEST(test_stats_errors)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(1 * MiB, &seg, &h);
    disco_heap_stats_t s;
    memset(&s, 0xab, sizeof s);
    disco_heap_stats_t marker = s;
    CK_STATUS(disco_heap_stats(NULL, &s), DISCO_E_INVAL);
    CK_HAS("NULL");
    CK_STATUS(disco_heap_stats(&h, NULL), DISCO_E_INVAL);
    CK_HAS("stats_out");
    disco_heap_t empty = {0};
    CK_STATUS(disco_heap_stats(&empty, &s), DISCO_E_INVAL);
    CK_STATUS(disco_heap_reclaim_owner(NULL, 1, NULL), DISCO_E_INVAL);
    ck_assert_msg(memcmp(&s, &marker, sizeof s) == 0, "disco_heap_stats wrote on failure");
    pid_t pid = fork_lock_holder(&h, 0);
    disco_wait_t w = {.timeout_ns = 50 * 1000 * 1000};
    disco_heap_set_wait(&h, &w);
    CK_STATUS(disco_heap_stats(&h, &s), DISCO_E_TIMEOUT);
    ck_assert_msg(memcmp(&s, &marker, sizeof s) == 0, "disco_heap_stats wrote on a timeout");
    size_t freed = 12345;
    CK_STATUS(disco_heap_reclaim_owner(&h, 1, &freed), DISCO_E_TIMEOUT);
    ck_assert_msg(freed == 12345, "disco_heap_reclaim_owner wrote on a timeout");
    kill(pid, SIGKILL);
    wait_killed(pid, "lock holder");
    disco_heap_set_wait(&h, NULL);
    CK_OK(disco_heap_stats(&h, &s)); /* recovers the dead holder's lock */
    ck_assert_msg(s.capacity != 0 && s.recoveries == 1, "capacity %zu recoveries %" PRIu64,
                  s.capacity, s.recoveries);
    disco_segment_close(&seg);
}
END_TEST

/* A process killed at each step of an alloc (lead gap, tail) and of a free
 * (merging both ways) leaves a heap that the next caller recovers whole:
 * every invariant holds and reclaiming both owners empties it. */
START_TEST(test_killed_at_every_step)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(1 * MiB, &seg, &h);
    for (int step = 1; step < DISCO__HEAP_STEP_COUNT; step++) {
        CK_OK(disco_heap_init(disco_segment_data(&seg), heap_mem_size(1 * MiB), &h));
        uint64_t a = alloc_ok(&h, 64, 0, 1), b = alloc_ok(&h, 64, 0, 1);
        uint64_t c = alloc_ok(&h, 64, 0, 1);
        CK_OK(disco_heap_free(&h, a));
        CK_OK(disco_heap_free(&h, c)); /* a and c+rest are free around b */
        kill_step = step;
        pid_t pid = tu_fork();
        if (pid == 0) {
            disco__heap_fault_hook = die_at_step;
            uint64_t off;
            if (disco_heap_alloc(&h, 1000, 4096, 2, &off) != DISCO_OK ||
                disco_heap_free(&h, b) != DISCO_OK)
                tu_child_fail("alloc/free: %s", disco_last_error());
            _exit(0); /* the step was never reached */
        }
        char what[64];
        snprintf(what, sizeof what, "child killed at step %d", step);
        wait_killed(pid, what);
        disco_status_t st = disco__heap_check(&h);
        ck_assert_msg(st == DISCO_OK, "step %d: disco__heap_check: %s (%s)", step,
                      disco_err_name(st), disco_last_error());
        ck_assert_msg(stats_of(&h).recoveries == 1, "step %d: recoveries %" PRIu64, step,
                      stats_of(&h).recoveries);
        uint64_t off = alloc_ok(&h, 100, 0, 3);
        CK_OK(disco_heap_free(&h, off));
        CK_OK(disco_heap_reclaim_owner(&h, 1, NULL));
        CK_OK(disco_heap_reclaim_owner(&h, 2, NULL));
        char when[64];
        snprintf(when, sizeof when, "step %d, after reclaim", step);
        assert_empty(&h, when);
    }
    disco_segment_close(&seg);
}
END_TEST

/* Processes SIGKILLed at arbitrary points of an alloc/free loop: after each,
 * the heap is sound and reclaiming the dead owner empties it. */
START_TEST(test_killed_in_loop)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(4 * MiB, &seg, &h);
    for (int round = 0; round < 20; round++) {
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        pid_t pid = tu_fork();
        if (pid == 0) {
            uint64_t offs[16] = {0}, rng = (uint64_t)round * 7919 + 1;
            for (unsigned long n = 0;; n++) {
                int k = (int)(rng_next(&rng) % 16);
                if (offs[k] != 0 && disco_heap_free(&h, offs[k]) != DISCO_OK)
                    tu_child_fail("free: %s", disco_last_error());
                if (disco_heap_alloc(&h, rng_next(&rng) % 20000, 128, 4, &offs[k]) != DISCO_OK)
                    tu_child_fail("alloc: %s", disco_last_error());
                if (n == 1000 && write(fds[1], "x", 1) != 1)
                    tu_child_fail("write: %s", strerror(errno));
            }
        }
        char c;
        ck_assert_msg(read(fds[0], &c, 1) == 1, "round %d: child never got going", round);
        kill(pid, SIGKILL);
        wait_killed(pid, "looping child");
        CK_OK(disco__heap_check(&h));
        CK_OK(disco_heap_reclaim_owner(&h, 4, NULL));
        assert_empty(&h, "after a killed looping child");
        close(fds[0]);
        close(fds[1]);
    }
    disco_segment_close(&seg);
}
END_TEST

Suite *suite_heap_shared(void)
{
    Suite *s = suite_create("heap_shared");
    TCase *tc = tcase_create("concurrency");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_concurrent_processes);
    tcase_add_test(tc, test_concurrent_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("death");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lock_holder_killed);
    tcase_add_test(tc, test_stats_errors);
    tcase_add_test(tc, test_killed_at_every_step);
    tcase_add_test(tc, test_killed_in_loop);
    suite_add_tcase(s, tc);
    return s;
}
