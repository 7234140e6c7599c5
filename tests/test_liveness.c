/* test_liveness.c - the session's edges where a peer stalls, gives up or
 * dies: a stopped process holding the heap lock, a collective abandoned at
 * its deadline, the first error after a death, the blame of a broadcast
 * timeout on pipes, a worker that cannot end. (A peer that lies in shared
 * memory: test_shm_lies.c.) White-box where a peer must misbehave on cue:
 * the tests reach into the session. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/session/session_impl.h"
#include "shm/heap_internal.h"
#include "workers/data/collective.h"
#include "workers/data/tensor_impl.h"
#include "disco/func.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/shm/wait.h"
#include "tests/session_util.h"
#include "tests/liveness_util.h"

/* ---- section 4: a stopped holder of the heap lock ---- */

/* A process that takes the session's heap lock and stops (SIGSTOP) no longer
 * blocks the controller: copy_to_worker0 with a 1 s call timeout ends with
 * DISCO_E_TIMEOUT naming the holder within a few seconds. Once the holder
 * dies, the robust lock is taken back (EOWNERDEAD) and the next copy works. */
START_TEST(test_stopped_heap_holder)
{
    disco_session_t *s = open_cfg(2, DISCO_TRANSPORT_RING, 1000);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t child = fork();
    if (child == 0) {
        disco_heap_t h = s->heap; /* the child's own handle: no session checks */
        h.wait = NULL;
        char c = disco__heap_lock_for_test(&h) == DISCO_OK ? 'y' : 'n';
        if (write(p[1], &c, 1) != 1)
            _exit(1);
        raise(SIGSTOP);
        _exit(0); /* never reached: the test kills it stopped */
    }
    char c = 0;
    ck_assert_int_eq(read(p[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    int ws;
    ck_assert_int_eq(waitpid(child, &ws, WUNTRACED), child);
    ck_assert(WIFSTOPPED(ws));
    disco_dref_t r;
    int64_t t0 = disco_now_ns();
    CK_STATUS(copy_floats(s, 256, 0, &r), DISCO_E_TIMEOUT);
    int64_t took = disco_now_ns() - t0;
    char want[64];
    snprintf(want, sizeof want, "thread %d", (int)child);
    CK_HAS("heap lock");
    CK_HAS(want);
    ck_assert_msg(took >= 900000000LL && took < 10000000000LL, "gave up after %lld ms",
                  (long long)(took / 1000000));
    kill(child, SIGKILL);
    ck_assert_int_eq(waitpid(child, &ws, 0), child);
    /* The owner died: the next caller recovers the heap and goes on. */
    CK_OK(copy_floats(s, 256, 0, &r));
    disco_heap_stats_t hs;
    CK_OK(disco_session_heap_stats(s, &hs));
    ck_assert_uint_ge(hs.recoveries, 1);
    CK_OK(disco_session_sync(s, 1));
    close(p[0]);
    close(p[1]);
    disco_session_close(s);
}
END_TEST

/* ---- section 3: a collective abandoned at its deadline ---- */

/* Worker 0 gives up an allreduce at its barrier (call timeout 500 ms) while
 * worker 1 is still busy in an earlier call; worker 0's output block is
 * freed and handed out again to an unrelated tensor. Worker 1 must never
 * write into it: the session breaks with DISCO_E_TIMEOUT naming worker 1,
 * which is killed, and the unrelated tensor keeps its bytes. (Before the
 * fix, worker 1 completed the barrier alone and wrote its half of the sum
 * into the reused block.) */
START_TEST(test_abandoned_collective)
{
    disco_session_t *s = open_cfg(2, DISCO_TRANSPORT_RING, 500);
    int pid1 = disco_session_worker_pid(s, 1);
    int64_t n = 1024;
    disco_value_t fa[3] = {disco_value_shape(&n, 1), disco_value_dtype(F32), disco_value_int(1)};
    disco_dref_t x, r, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    CK_OK(disco_session_sync(s, 1));
    disco_value_t spin[2] = {disco_value_int(1), disco_value_int(5000)};
    CK_OK(disco_session_call_by_name(s, "test.spin_on", spin, 2, &r));
    disco_value_t ar[2] = {dref(x), disco_value_str("sum")};
    disco_status_t st = disco_session_call_by_name(s, "disco.allreduce", ar, 2, &y);
    ck_assert_msg(st == DISCO_OK || st == DISCO_E_TIMEOUT, "allreduce: %s", disco_err_name(st));
    /* The unrelated tensor, straight from the heap (the session may be
     * broken by now, and then a copy to worker 0 is refused). */
    DLTensor *t;
    CK_OK(disco__tensor_new(&s->heap, 0, &n, 1, F32, &t));
    for (int64_t i = 0; i < n; i++)
        ((float *)t->data)[i] = 7.0f;
    /* Wait for worker 1 to be done with the allreduce, if it lives: a sync
     * with a longer timeout (white-box), so that the wait does not kill it. */
    s->cfg.call_timeout_ms = 30000;
    disco_status_t sst = disco_session_sync(s, 1);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += ((float *)t->data)[i] != 7.0f;
    disco__tensor_release(t);
    ck_assert_msg(bad == 0, "%d of %lld floats of an unrelated tensor were overwritten", bad,
                  (long long)n);
    CK_STATUS(st, DISCO_E_TIMEOUT);
    CK_STATUS(sst, DISCO_E_BROKEN);
    ck_assert_int_eq(disco_session_health(s), DISCO_E_TIMEOUT);
    ck_assert_msg(kill(pid1, 0) == -1 && errno == ESRCH, "late worker %d still exists", pid1);
    disco_session_close(s);
}
END_TEST

/* ---- section 7: the blame of a broadcast timeout on pipes ---- */

/* With the pipe transport, a worker that stops reading commands (hung in a
 * call) fills its pipe; the broadcast that finds it full past the call
 * timeout blames that worker and kills it, as the ring transport does
 * (never "worker 0", never no one). */
START_TEST(test_pipe_bcast_blame)
{
    disco_session_t *s = open_cfg(3, DISCO_TRANSPORT_PIPE, 500);
    int pid1 = disco_session_worker_pid(s, 1), pid2 = disco_session_worker_pid(s, 2);
    disco_value_t two = disco_value_int(2);
    disco_dref_t r, f;
    CK_OK(disco_session_call_by_name(s, "test.hang", &two, 1, &r));
    CK_OK(disco_session_get_func(s, "test.echo", &f));
    static char big[30000];
    disco_value_t v = disco_value_bytes(big, sizeof big);
    disco_status_t st = DISCO_OK;
    int calls = 0;
    int64_t t0 = disco_now_ns();
    while (st == DISCO_OK && calls < 1000) { /* a pipe holds 64 KiB: a few calls fill it */
        st = disco_session_call(s, f, &v, 1, &r);
        calls++;
    }
    CK_STATUS(st, DISCO_E_TIMEOUT);
    CK_HAS("worker 2 took no command");
    ck_assert_msg(disco_now_ns() - t0 < 10000000000LL, "took %d calls and too long", calls);
    ck_assert_msg(kill(pid2, 0) == -1 && errno == ESRCH, "stuck worker %d still exists", pid2);
    ck_assert_msg(kill(pid1, 0) == 0, "worker 1 (pid %d), which read its commands, was killed",
                  pid1);
    ck_assert_int_eq(disco_session_health(s), DISCO_E_TIMEOUT);
    disco_session_close(s);
}
END_TEST

/* ---- section 7: the first error after a death ---- */

static uint64_t rnd(uint64_t *x) /* xorshift64* */
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 2685821657736338717ULL;
}

/* One step of a caller racing a death: any of the session's calls. */
static disco_status_t race_step(disco_session_t *s, int kind, int n, disco_dref_t x, uint64_t *rng)
{
    disco_dref_t r;
    disco_value_t v;
    disco_status_t st;
    switch (kind) {
    case 0: {
        disco_value_t a[2] = {disco_value_int(1), disco_value_int(2)};
        return disco_session_call_by_name(s, "test.add", a, 2, &r);
    }
    case 1: {
        disco_value_t a[2] = {dref(x), disco_value_str("sum")};
        if ((st = disco_session_call_by_name(s, "disco.allreduce", a, 2, &r)) != DISCO_OK)
            return st;
        return disco_session_free_reg(s, r);
    }
    case 2:
        if ((st = copy_floats(s, 256, 0, &r)) != DISCO_OK)
            return st;
        return disco_session_free_reg(s, r);
    case 3:
        return disco_session_sync(s, (int)(rnd(rng) % (uint64_t)n));
    case 4: {
        int64_t len = 1 + (int64_t)(rnd(rng) % 4096);
        if ((st = disco_session_empty(s, &len, 1, F32, false, &r)) != DISCO_OK)
            return st;
        return disco_session_free_reg(s, r);
    }
    case 5:
        if ((st = disco_session_debug_get(s, x, (int)(rnd(rng) % (uint64_t)n), &v)) == DISCO_OK)
            disco_value_clear(&v);
        return st;
    default: {
        disco_value_t a[2] = {dref(x), disco_value_bool(false)};
        if ((st = disco_session_call_by_name(s, "disco.broadcast_from_worker0", a, 2, &r)) !=
            DISCO_OK)
            return st;
        return disco_session_free_reg(s, r);
    }
    }
}

/* Hundreds of rounds of: open, start a call, kill -9 a worker, go on
 * calling (any call: calls, collectives, copies, syncs, allocations, debug
 * gets, on rings and pipes, forked and spawned). The first error the caller
 * sees must be DISCO_E_WORKER_DIED naming the worker and signal 9, whatever
 * call meets the death first; later ones say the session is broken. */
START_TEST(test_first_error_names_death)
{
    uint64_t rng = (uint64_t)disco_now_ns() | 1, seed = rng;
    int64_t end = disco_now_ns() + 100000000000LL;
    int rounds = 0;
    for (; rounds < 300 && disco_now_ns() < end; rounds++) {
        int n = 2 + (int)(rnd(&rng) % 3), victim = 1 + (int)(rnd(&rng) % (uint64_t)(n - 1));
        disco_session_config_t cfg = disco_session_config_default(n);
        cfg.transport = rnd(&rng) & 1 ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING;
        cfg.launch = rnd(&rng) % 4 == 0 ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
        cfg.call_timeout_ms = 20000;
        cfg.worker_path = DISCO_TEST_WORKER;
        disco_session_t *s = tu_open_with_testlib(&cfg);
        int64_t len = 1024;
        disco_value_t fa[3] = {disco_value_shape(&len, 1), disco_value_dtype(F32),
                               disco_value_int(1)};
        disco_dref_t x;
        CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
        int pid = disco_session_worker_pid(s, victim);
        disco_status_t st = race_step(s, (int)(rnd(&rng) % 7), n, x, &rng);
        kill(pid, SIGKILL);
        for (int k = 0; st == DISCO_OK && k < 64; k++)
            st = race_step(s, (int)(rnd(&rng) % 7), n, x, &rng);
        for (int w = 0; st == DISCO_OK && w < n; w++)
            st = disco_session_sync(s, (victim + w) % n); /* the victim first */
        char want[48];
        snprintf(want, sizeof want, "worker %d (pid %d)", victim, pid);
        ck_assert_msg(st == DISCO_E_WORKER_DIED && strstr(disco_last_error(), want) != NULL &&
                          strstr(disco_last_error(), "signal 9") != NULL,
                      "round %d (seed %llu, %d workers, %s): first error %s (%s)", rounds,
                      (unsigned long long)seed, n,
                      cfg.transport == DISCO_TRANSPORT_PIPE ? "pipes" : "rings", disco_err_name(st),
                      disco_last_error());
        CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
        disco_session_close(s);
    }
    ck_assert_msg(rounds >= 30, "only %d rounds in the time", rounds);
}
END_TEST

/* An error met before the session noticed a death: worker 2's function
 * failed, then worker 1 was killed; the sync that collects worker 2's
 * report (its reply comes at once, so no wait looks at the workers) must
 * say first that worker 1 died, then that the session is broken. It used
 * to return worker 2's DISCO_E_REMOTE and leave the death to a later
 * call. */
START_TEST(test_death_before_other_errors)
{
    disco_session_t *s = open_cfg(3, DISCO_TRANSPORT_RING, 20000);
    disco_value_t a[2] = {disco_value_int(2), disco_value_str("bad input")};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fail_on", a, 2, &r));
    int64_t end = disco_now_ns() + 20000000000LL;
    while (!atomic_load(&s->errbox[2].full) && disco_now_ns() < end)
        sched_yield(); /* worker 2 has posted its failure */
    ck_assert(atomic_load(&s->errbox[2].full));
    int pid = disco_session_worker_pid(s, 1);
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    ck_assert_int_ge(fd, 0);
    kill(pid, SIGKILL);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 20000), 1); /* it has ended (not reaped yet) */
    close(fd);
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_WORKER_DIED);
    CK_HAS("worker 1 (pid");
    CK_HAS("signal 9");
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
    disco_session_close(s);
}
END_TEST

/* ---- siblings: a worker that cannot end ---- */

#define FREEZER "/sys/fs/cgroup/freezer"

/* The test's freezer cgroup, named after the test runner (the parent of the
 * forked test), so that the runner's teardown finds it. */
static void freezer_dir(pid_t runner, char *out, size_t cap)
{
    snprintf(out, cap, FREEZER "/disco-test-%d", (int)runner);
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* In the runner, after the test (even one that failed or timed out): thaw
 * whatever is left in the cgroup (its processes were killed) and remove it. */
static void freezer_teardown(void)
{
    char dir[128], path[160];
    freezer_dir(getpid(), dir, sizeof dir);
    snprintf(path, sizeof path, "%s/freezer.state", dir);
    if (access(path, F_OK) != 0)
        return;
    write_file(path, "THAWED");
    for (int i = 0; i < 100 && rmdir(dir) != 0 && errno == EBUSY; i++)
        usleep(10000); /* the thawed processes take a moment to end */
}

/* A worker frozen by a cgroup (v1 freezer: SIGKILL does not end it until
 * the thaw) hangs a sync: the timeout kills it, and the kill's wait for it
 * to end is bounded, so the call returns DISCO_E_TIMEOUT within seconds
 * instead of blocking in waitpid forever (as it did). Skipped where no
 * freezer cgroup can be made (not root, cgroup v2 only). */
START_TEST(test_frozen_worker)
{
    char dir[128], path[160], pidtxt[32];
    freezer_dir(getppid(), dir, sizeof dir);
    if (mkdir(dir, 0755) != 0) {
        fprintf(stderr, "test_frozen_worker: skipped (%s: %s)\n", dir, strerror(errno));
        return;
    }
    disco_session_t *s = open_cfg(2, DISCO_TRANSPORT_RING, 500);
    int pid = disco_session_worker_pid(s, 1);
    snprintf(pidtxt, sizeof pidtxt, "%d", pid);
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    ck_assert(write_file(path, pidtxt));
    snprintf(path, sizeof path, "%s/freezer.state", dir);
    ck_assert(write_file(path, "FROZEN"));
    char state[32] = "";
    for (int i = 0; i < 2000 && strncmp(state, "FROZEN", 6) != 0; i++) {
        FILE *f = fopen(path, "r"); /* freezing takes effect asynchronously */
        ck_assert(f != NULL && fgets(state, sizeof state, f) != NULL);
        fclose(f);
        sched_yield();
    }
    ck_assert_str_eq(state, "FROZEN\n");
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_TIMEOUT);
    int64_t took = disco_now_ns() - t0;
    ck_assert_msg(took < 20000000000LL, "the kill of a frozen worker took %lld ms",
                  (long long)(took / 1000000));
    ck_assert(write_file(path, "THAWED")); /* it ends now, and close reaps it */
    disco_session_close(s);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a worker was left");
}
END_TEST

Suite *suite_liveness(void)
{
    Suite *s = suite_create("liveness");
    TCase *tc = tcase_create("liveness");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test_stopped_heap_holder);
    tcase_add_test(tc, test_abandoned_collective);
    tcase_add_test(tc, test_pipe_bcast_blame);
    tcase_add_test(tc, test_first_error_names_death);
    tcase_add_test(tc, test_death_before_other_errors);
    suite_add_tcase(s, tc);
    TCase *fz = tcase_create("freezer");
    tcase_set_timeout(fz, 60);
    tcase_add_unchecked_fixture(fz, NULL, freezer_teardown);
    tcase_add_test(fz, test_frozen_worker);
    suite_add_tcase(s, fz);
    return s;
}
