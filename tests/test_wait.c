/* test_wait.c - spin-then-park waiting: exits (deadline, abort, callback) and wake-ups. */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "disco/shm/segment.h"
#include "disco/shm/wait.h"
#include "tests/testutil.h"
#include "shm/ticks.h"
#include "shm/wait_internal.h"

#define MS 1000000LL

/* A flag that a condition watches, beside the queue its setter wakes. */
struct flag {
    disco_waitq_t q;
    _Atomic uint32_t value;
};

static bool flag_set(void *arg)
{
    struct flag *f = arg;
    return atomic_load_explicit(&f->value, memory_order_acquire) != 0;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

struct counter {
    int calls;
    int fail_on;            /* return `status` on this call */
    disco_status_t status;  /* what to return then */
    struct flag *set_first; /* if not NULL: set this flag before failing */
};

static disco_status_t count_check(void *ctx)
{
    struct counter *c = ctx;
    c->calls++;
    if (c->calls < c->fail_on)
        return DISCO_OK;
    if (c->set_first != NULL)
        atomic_store_explicit(&c->set_first->value, 1, memory_order_release);
    return c->status;
}

/* A true condition returns DISCO_OK at once, even with no_wait, without
 * calling the check callback. */
START_TEST(test_cond_true)
{
    struct flag f = {0};
    atomic_store(&f.value, 1);
    struct counter c = {.fail_on = 1, .status = DISCO_E_PEER_DEAD};
    disco_wait_t w = {.check = count_check, .check_ctx = &c};
    CK_OK(disco_wait_until(&f.q, flag_set, &f, &w));
    w.no_wait = true;
    CK_OK(disco_wait_until(&f.q, flag_set, &f, &w));
    CK_OK(disco_wait_until(&f.q, flag_set, &f, NULL));
    ck_assert_int_eq(c.calls, 0);
}
END_TEST

/* no_wait on a false condition gives DISCO_E_AGAIN at once. */
START_TEST(test_no_wait)
{
    struct flag f = {0};
    disco_wait_t w = {.no_wait = true};
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_wait_until(&f.q, flag_set, &f, &w), DISCO_E_AGAIN);
    ck_assert_msg(tu_ms_since(t0) < 100, "no_wait took %.1f ms", tu_ms_since(t0));
}
END_TEST

/* A deadline 20 ms ahead ends the wait with DISCO_E_TIMEOUT after 20 ms and
 * well before 1 s, with a queue and without one. */
START_TEST(test_deadline)
{
    disco_waitq_t q = {0};
    disco_waitq_t *qs[2] = {&q, NULL};
    for (int i = 0; i < 2; i++) {
        int64_t t0 = disco_now_ns();
        disco_wait_t w = {.deadline_ns = t0 + 20 * MS};
        CK_STATUS(disco_wait_until(qs[i], never, NULL, &w), DISCO_E_TIMEOUT);
        double ms = tu_ms_since(t0);
        ck_assert_msg(ms >= 20.0 && ms < 1000.0,
                      "disco_wait_until (queue %d): timed out after %.1f ms", i == 0, ms);
    }
    /* A deadline already past ends it at once. */
    int64_t t0 = disco_now_ns();
    disco_wait_t w = {.deadline_ns = t0 - 1};
    CK_STATUS(disco_wait_until(&q, never, NULL, &w), DISCO_E_TIMEOUT);
    ck_assert_msg(tu_ms_since(t0) < 100, "past deadline took %.1f ms", tu_ms_since(t0));
}
END_TEST

/* A nonzero abort word ends the wait with its value. */
START_TEST(test_abort_word_preset)
{
    disco_waitq_t q = {0};
    _Atomic int32_t abort_word = DISCO_E_SHUTDOWN;
    disco_wait_t w = {.abort_word = &abort_word, .deadline_ns = disco_now_ns() + 5000 * MS};
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_wait_until(&q, never, NULL, &w), DISCO_E_SHUTDOWN);
    ck_assert_msg(tu_ms_since(t0) < 1000, "abort took %.1f ms", tu_ms_since(t0));
}
END_TEST

struct parked {
    disco_waitq_t *q;
    struct flag *f; /* NULL: wait on `never` */
    _Atomic int32_t *abort_word;
    disco_status_t st;
    double ms;
    uint64_t found_at; /* the wait's stamp (tracing) */
    uint64_t t_after;  /* ticks read once the wait returned */
    /* The status hook's words (workers/core/wstat.h reads them). */
    _Atomic int64_t since;
    _Atomic uint32_t state;
    _Atomic uint64_t park_ns;
};

static void *park_thread(void *arg)
{
    struct parked *p = arg;
    /* Park slices of 5 s: only a wake can end this wait sooner. */
    disco_wait_t w = {.park_slice_ms = 5000,
                      .abort_word = p->abort_word,
                      .deadline_ns = disco_now_ns() + 20000 * MS};
    struct disco__wait_hook hook = {.found_at = &p->found_at,
                                    .since = &p->since,
                                    .state = &p->state,
                                    .parked_state = 3,
                                    .awake_state = 2,
                                    .park_ns = &p->park_ns};
    disco__wait_set_hook(&w, &hook);
    int64_t t0 = disco_now_ns();
    p->st = p->f != NULL ? disco_wait_until(p->q, flag_set, p->f, &w)
                         : disco_wait_until(p->q, never, NULL, &w);
    p->t_after = disco__ticks();
    p->ms = tu_ms_since(t0);
    return NULL;
}

/* Waits (bounded) until someone is parked on q. */
static void wait_for_parker(disco_waitq_t *q)
{
    int64_t deadline = disco_now_ns() + 5000 * MS;
    while (atomic_load(&q->waiters) == 0) {
        ck_assert_msg(disco_now_ns() < deadline, "nobody parked on the queue within 5 s");
        sched_yield();
    }
}

/* An abort word set while a waiter is parked, followed by
 * disco_waitq_wake_all, ends the wait at once with the abort status. */
START_TEST(test_abort_word_wakes)
{
    disco_waitq_t q = {0};
    _Atomic int32_t abort_word = 0;
    struct parked p = {.q = &q, .abort_word = &abort_word};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, park_thread, &p), 0);
    wait_for_parker(&q);
    atomic_store_explicit(&abort_word, DISCO_E_BROKEN, memory_order_release);
    disco_waitq_wake_all(&q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(p.st == DISCO_E_BROKEN, "disco_wait_until: %s, want DISCO_E_BROKEN",
                  disco_err_name(p.st));
    ck_assert_msg(p.ms < 2000, "aborted wait took %.1f ms (park slice 5 s)", p.ms);
}
END_TEST

/* A check callback returning an error ends the wait with it; while the wait
 * goes on the callback is called again and again. */
START_TEST(test_check_callback_ends_wait)
{
    disco_waitq_t q = {0};
    struct counter c = {.fail_on = 3, .status = DISCO_E_PEER_DEAD};
    disco_wait_t w = {.check = count_check,
                      .check_ctx = &c,
                      .park_slice_ms = 5,
                      .deadline_ns = disco_now_ns() + 5000 * MS};
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_wait_until(&q, never, NULL, &w), DISCO_E_PEER_DEAD);
    ck_assert_int_eq(c.calls, 3);
    ck_assert_msg(tu_ms_since(t0) < 1000, "three 5 ms slices took %.1f ms", tu_ms_since(t0));
}
END_TEST

/* A callback that acts on what it found (marks a dead reader, so the
 * condition turns true) and reports it still ends the wait with its status:
 * a wait that re-checked the condition and returned DISCO_OK would lose the
 * news (a reaped child's death) for good. Parks first (tiny spin budget),
 * where that could happen. */
START_TEST(test_check_status_not_swallowed)
{
    struct flag f = {0};
    struct counter c = {.fail_on = 1, .status = DISCO_E_PEER_DEAD, .set_first = &f};
    disco_wait_t w = {.spin_ns = 1,
                      .check = count_check,
                      .check_ctx = &c,
                      .deadline_ns = disco_now_ns() + 5000 * MS};
    CK_STATUS(disco_wait_until(&f.q, flag_set, &f, &w), DISCO_E_PEER_DEAD);
    ck_assert_int_eq(c.calls, 1);

    /* The same with the default spin budget. */
    struct flag g = {0};
    struct counter d = {.fail_on = 1, .status = DISCO_E_PEER_DEAD, .set_first = &g};
    w = (disco_wait_t){.check = count_check, .check_ctx = &d};
    CK_STATUS(disco_wait_until(&g.q, flag_set, &g, &w), DISCO_E_PEER_DEAD);

    /* An abort word set together with the data also wins. */
    struct flag h = {0};
    atomic_store(&h.value, 0);
    _Atomic int32_t abort_word = DISCO_E_SHUTDOWN;
    w = (disco_wait_t){.spin_ns = 1, .abort_word = &abort_word};
    CK_STATUS(disco_wait_until(&h.q, flag_set, &h, &w), DISCO_E_SHUTDOWN);
}
END_TEST

/* Parks a thread on f, then sets f and wakes it; *t_set gets the ticks read
 * just before the set. Returns the parked thread's outcome. */
static struct parked set_parked_flag(struct flag *f, uint64_t *t_set)
{
    struct parked p = {.q = &f->q, .f = f};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, park_thread, &p), 0);
    wait_for_parker(&f->q);
    *t_set = disco__ticks();
    atomic_store_explicit(&f->value, 1, memory_order_release); /* K0 */
    disco_waitq_wake(&f->q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    return p;
}

/* A wake after the flag is set ends a parked wait at once (park slice 5 s). */
START_TEST(test_wake_parked_thread)
{
    struct flag f = {0};
    uint64_t t_set;
    struct parked p = set_parked_flag(&f, &t_set);
    ck_assert_msg(p.st == DISCO_OK, "disco_wait_until: %s", disco_err_name(p.st));
    ck_assert_msg(p.ms < 2000, "woken wait took %.1f ms (park slice 5 s)", p.ms);
}
END_TEST

/* found_at (tracing's stamp): a wait that waited stores the clock read just
 * before the check that saw the flag, which for a parked waiter comes after
 * the setter's wake (so after the setter's own read) and before the wait
 * returned; a condition true at the first check leaves it untouched. */
START_TEST(test_found_at)
{
    struct flag f = {0};
    uint64_t t_set;
    struct parked p = set_parked_flag(&f, &t_set);
    CK_OK(p.st);
    ck_assert_msg(p.found_at >= t_set && p.found_at <= p.t_after,
                  "stamp %llu outside [set %llu, return %llu]", (unsigned long long)p.found_at,
                  (unsigned long long)t_set, (unsigned long long)p.t_after);

    uint64_t untouched = 7;
    disco_wait_t w = {0};
    struct disco__wait_hook hook = {.found_at = &untouched};
    disco__wait_set_hook(&w, &hook);
    CK_OK(disco_wait_until(&f.q, flag_set, &f, &w));
    ck_assert_uint_eq(untouched, 7);
}
END_TEST

/* The status hook: while a waiter is parked, since holds the wait's start
 * and state the parked value; once it returns, since is 0, state is the
 * awake value and park_ns counts the time parked (the setter held it
 * parked for at least 20 ms, measured on its side). */
START_TEST(test_hook_reports_park)
{
    struct flag f = {0};
    struct parked p = {.q = &f.q, .f = &f};
    pthread_t t;
    int64_t t0 = disco_now_ns();
    ck_assert_int_eq(pthread_create(&t, NULL, park_thread, &p), 0);
    wait_for_parker(&f.q);
    int64_t since = atomic_load(&p.since);
    ck_assert_msg(since >= t0 && since <= disco_now_ns(), "since %lld outside the wait",
                  (long long)since);
    ck_assert_uint_eq(atomic_load(&p.state), 3);
    int64_t parked_at = disco_now_ns();
    while (disco_now_ns() - parked_at < 20 * MS) /* hold it parked (not a synchronization) */
        sched_yield();
    atomic_store_explicit(&f.value, 1, memory_order_release);
    disco_waitq_wake(&f.q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    CK_OK(p.st);
    ck_assert_int_eq(atomic_load(&p.since), 0);
    ck_assert_uint_eq(atomic_load(&p.state), 2);
    uint64_t parked = atomic_load(&p.park_ns);
    ck_assert_msg(parked >= 20 * MS && parked <= (uint64_t)(disco_now_ns() - t0),
                  "park_ns %llu: want >= 20 ms and <= the whole wait", (unsigned long long)parked);
}
END_TEST

/* The futex is process-shared: a parent's wake ends a forked child's park. */
START_TEST(test_wake_parked_process)
{
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-wait", sizeof(struct flag), &seg));
    struct flag *f = disco_segment_data(&seg);
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_wait_t w = {.park_slice_ms = 5000, .deadline_ns = disco_now_ns() + 20000 * MS};
        int64_t t0 = disco_now_ns();
        disco_status_t st = disco_wait_until(&f->q, flag_set, f, &w);
        if (st != DISCO_OK)
            tu_child_fail("disco_wait_until: %s (%s)", disco_err_name(st), disco_last_error());
        if (tu_ms_since(t0) >= 2000)
            tu_child_fail("woken after %.1f ms (park slice 5 s)", tu_ms_since(t0));
        _exit(0);
    }
    wait_for_parker(&f->q);
    atomic_store_explicit(&f->value, 1, memory_order_release);
    disco_waitq_wake(&f->q);
    tu_wait_ok(pid, "parked child");
    disco_segment_close(&seg);
}
END_TEST

/* Two sides hand a counter back and forth, parking at every step (spin
 * budget 1 ns, park slice 5 s): a lost wake-up would stall a step for 5 s. */
struct pingpong {
    struct flag ping, pong;
    uint32_t rounds;
};

static bool reached(_Atomic uint32_t *v, uint32_t want)
{
    return atomic_load_explicit(v, memory_order_acquire) >= want;
}

/* Arguments for the conditions: the shared block and the value awaited. */
struct want {
    struct pingpong *pp;
    uint32_t value;
};

static bool ping_at(void *arg)
{
    struct want *a = arg;
    return reached(&a->pp->ping.value, a->value);
}

static bool pong_at(void *arg)
{
    struct want *a = arg;
    return reached(&a->pp->pong.value, a->value);
}

/* One side of the ping-pong; returns the longest single wait in ms, or -1 on
 * a wait error. */
static double pingpong_side(struct pingpong *pp, int pinger)
{
    double worst = 0;
    disco_wait_t w = {.spin_ns = 1, .park_slice_ms = 5000};
    for (uint32_t i = 1; i <= pp->rounds; i++) {
        struct want a = {pp, i};
        if (pinger) {
            atomic_store_explicit(&pp->ping.value, i, memory_order_release);
            disco_waitq_wake(&pp->ping.q);
        }
        w.deadline_ns = disco_now_ns() + 20000 * MS;
        int64_t t0 = disco_now_ns();
        disco_status_t st = pinger ? disco_wait_until(&pp->pong.q, pong_at, &a, &w)
                                   : disco_wait_until(&pp->ping.q, ping_at, &a, &w);
        double ms = tu_ms_since(t0);
        if (st != DISCO_OK)
            return -1;
        if (ms > worst)
            worst = ms;
        if (!pinger) {
            atomic_store_explicit(&pp->pong.value, i, memory_order_release);
            disco_waitq_wake(&pp->pong.q);
        }
    }
    return worst;
}

struct ponger {
    struct pingpong *pp;
    double worst;
};

static void *ponger_thread(void *arg)
{
    struct ponger *p = arg;
    p->worst = pingpong_side(p->pp, 0);
    return NULL;
}

#define PINGPONG_ROUNDS 20000u

/* No lost wake-ups between threads: 20k parked round trips, none stalls. */
START_TEST(test_pingpong_threads)
{
    static struct pingpong pp;
    memset(&pp, 0, sizeof pp);
    pp.rounds = PINGPONG_ROUNDS;
    struct ponger arg = {.pp = &pp};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, ponger_thread, &arg), 0);
    int64_t t0 = disco_now_ns();
    double worst = pingpong_side(&pp, 1);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    double total = tu_ms_since(t0);
    ck_assert_msg(worst >= 0 && arg.worst >= 0, "disco_wait_until failed in a round");
    ck_assert_msg(worst < 1000 && arg.worst < 1000,
                  "a round trip stalled %.1f / %.1f ms: lost wake-up", worst, arg.worst);
    fprintf(stderr, "wait: %u parked thread round trips in %.0f ms\n", pp.rounds, total);
}
END_TEST

/* No lost wake-ups between processes through a shared segment. */
START_TEST(test_pingpong_processes)
{
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-pingpong", sizeof(struct pingpong), &seg));
    struct pingpong *pp = disco_segment_data(&seg);
    pp->rounds = PINGPONG_ROUNDS;
    pid_t pid = tu_fork();
    if (pid == 0) {
        double worst = pingpong_side(pp, 0);
        if (worst < 0 || worst >= 1000)
            tu_child_fail("ponger: worst wait %.1f ms", worst);
        _exit(0);
    }
    int64_t t0 = disco_now_ns();
    double worst = pingpong_side(pp, 1);
    tu_wait_ok(pid, "ponger");
    ck_assert_msg(worst >= 0 && worst < 1000, "pinger: worst wait %.1f ms", worst);
    fprintf(stderr, "wait: %u parked process round trips in %.0f ms\n", pp->rounds,
            tu_ms_since(t0));
    disco_segment_close(&seg);
}
END_TEST

/* A parked waiter costs ~no CPU: 300 ms of waiting burn < 30 ms of CPU. */
START_TEST(test_parked_costs_no_cpu)
{
    disco_waitq_t q = {0};
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    disco_wait_t w = {.deadline_ns = disco_now_ns() + 300 * MS};
    CK_STATUS(disco_wait_until(&q, never, NULL, &w), DISCO_E_TIMEOUT);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
    ck_assert_msg(cpu_ms < 30, "a 300 ms wait used %.1f ms of CPU", cpu_ms);
}
END_TEST

/* timeout_ns (relative, no deadline_ns) ends a wait with DISCO_E_TIMEOUT
 * after >= 20 ms and < 1 s; it is ignored when the condition holds at once. */
START_TEST(test_relative_timeout)
{
    disco_waitq_t q = {0};
    disco_wait_t w = {.timeout_ns = 20 * MS};
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_wait_until(&q, never, NULL, &w), DISCO_E_TIMEOUT);
    double ms = tu_ms_since(t0);
    ck_assert_msg(ms >= 20.0 && ms < 1000.0, "disco_wait_until: timed out after %.1f ms", ms);
    struct flag f = {0};
    atomic_store(&f.value, 1);
    CK_OK(disco_wait_until(&f.q, flag_set, &f, &w));
}
END_TEST

/* disco_wait_fd: no_wait on an idle pipe gives DISCO_E_AGAIN; a 20 ms
 * deadline (absolute or relative) gives DISCO_E_TIMEOUT in [20 ms, 1 s);
 * an abort word or callback ends it; data or a hang-up makes it ready. */
START_TEST(test_wait_fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    disco_wait_t w = {.no_wait = true};
    CK_STATUS(disco_wait_fd(p[0], POLLIN, &w), DISCO_E_AGAIN);

    for (int rel = 0; rel < 2; rel++) {
        int64_t t0 = disco_now_ns();
        memset(&w, 0, sizeof w);
        if (rel)
            w.timeout_ns = 20 * MS;
        else
            w.deadline_ns = t0 + 20 * MS;
        CK_STATUS(disco_wait_fd(p[0], POLLIN, &w), DISCO_E_TIMEOUT);
        double ms = tu_ms_since(t0);
        ck_assert_msg(ms >= 20.0 && ms < 1000.0, "disco_wait_fd (%s): timed out after %.1f ms",
                      rel ? "timeout_ns" : "deadline_ns", ms);
    }

    _Atomic int32_t abort_word = DISCO_E_SHUTDOWN;
    w = (disco_wait_t){.abort_word = &abort_word, .deadline_ns = disco_now_ns() + 5000 * MS};
    CK_STATUS(disco_wait_fd(p[0], POLLIN, &w), DISCO_E_SHUTDOWN);
    struct counter c = {.fail_on = 2, .status = DISCO_E_PEER_DEAD};
    w = (disco_wait_t){.check = count_check,
                       .check_ctx = &c,
                       .park_slice_ms = 2,
                       .deadline_ns = disco_now_ns() + 5000 * MS};
    CK_STATUS(disco_wait_fd(p[0], POLLIN, &w), DISCO_E_PEER_DEAD);
    ck_assert_int_eq(c.calls, 2);

    w = (disco_wait_t){.deadline_ns = disco_now_ns() + 5000 * MS};
    CK_OK(disco_wait_fd(p[1], POLLOUT, &w)); /* an empty pipe is writable */
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    CK_OK(disco_wait_fd(p[0], POLLIN, &w));
    char x;
    ck_assert_int_eq(read(p[0], &x, 1), 1);
    close(p[1]);
    CK_OK(disco_wait_fd(p[0], POLLIN, &w)); /* hang-up: ready, read() then says EOF */
    ck_assert_int_eq(read(p[0], &x, 1), 0);
    close(p[0]);
}
END_TEST

/* A child's write ends a parent's disco_wait_fd at once (park slice 5 s). */
START_TEST(test_wait_fd_wakes)
{
    int p[2], go[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        char x;
        close(p[0]);
        if (read(go[0], &x, 1) != 1 || write(p[1], "y", 1) != 1)
            tu_child_fail("pipe: %s", strerror(errno));
        _exit(0);
    }
    close(p[1]);
    disco_wait_t w = {.park_slice_ms = 5000, .deadline_ns = disco_now_ns() + 20000 * MS};
    int64_t t0 = disco_now_ns();
    ck_assert_int_eq(write(go[1], "g", 1), 1);
    CK_OK(disco_wait_fd(p[0], POLLIN, &w));
    ck_assert_msg(tu_ms_since(t0) < 2000, "disco_wait_fd woke after %.1f ms", tu_ms_since(t0));
    tu_wait_ok(pid, "writing child");
    close(p[0]);
    close(go[0]);
    close(go[1]);
}
END_TEST

Suite *suite_wait(void)
{
    Suite *s = suite_create("wait");
    TCase *tc = tcase_create("exits");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_cond_true);
    tcase_add_test(tc, test_no_wait);
    tcase_add_test(tc, test_deadline);
    tcase_add_test(tc, test_abort_word_preset);
    tcase_add_test(tc, test_abort_word_wakes);
    tcase_add_test(tc, test_check_callback_ends_wait);
    tcase_add_test(tc, test_check_status_not_swallowed);
    tcase_add_test(tc, test_relative_timeout);
    tcase_add_test(tc, test_wait_fd);
    suite_add_tcase(s, tc);

    tc = tcase_create("wake");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_wake_parked_thread);
    tcase_add_test(tc, test_found_at);
    tcase_add_test(tc, test_hook_reports_park);
    tcase_add_test(tc, test_wake_parked_process);
    tcase_add_test(tc, test_pingpong_threads);
    tcase_add_test(tc, test_pingpong_processes);
    tcase_add_test(tc, test_parked_costs_no_cpu);
    tcase_add_test(tc, test_wait_fd_wakes);
    suite_add_tcase(s, tc);
    return s;
}
