/* test_liveness.c - the session's edges where a peer stalls, gives up or
 * lies (issue 14): a stopped process holding the heap lock, a collective
 * abandoned at its deadline, heap offsets a worker posts, the first error
 * after a death, and the blame of a broadcast timeout on pipes. White-box
 * where a peer must misbehave on cue: the tests reach into the session. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../scheduler/session_impl.h"
#include "../shm/heap_internal.h"
#include "../workers/collective.h"
#include "../workers/tensor_impl.h"
#include "disco/session.h"
#include "disco/wait.h"
#include "session_util.h"

#define F32 ((DLDataType){kDLFloat, 32, 1})

static disco_session_t *open_cfg(int n, disco_session_transport_t tr, uint32_t timeout_ms)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.transport = tr;
    cfg.call_timeout_ms = timeout_ms;
    cfg.worker_path = DISCO_TEST_WORKER;
    return tu_open_with_testlib(&cfg);
}

/* Copies a host tensor of n floats (value base + i) to worker 0. */
static disco_status_t copy_floats(disco_session_t *s, int64_t n, float base, disco_dref_t *out)
{
    float *buf = malloc((size_t)n * sizeof *buf);
    for (int64_t i = 0; i < n; i++)
        buf[i] = base + (float)i;
    DLTensor host = {.data = buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = &n};
    disco_status_t st = disco_session_copy_to_worker0(s, &host, out);
    free(buf);
    return st;
}

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

static disco_value_t dref(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.reg = r};
}

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
    disco_value_t fa[3] = {disco_shape(&n, 1), disco_dtype(F32), disco_int(1)};
    disco_dref_t x, r, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    CK_OK(disco_session_sync(s, 1));
    disco_value_t spin[2] = {disco_int(1), disco_int(1500)};
    CK_OK(disco_session_call_by_name(s, "test.spin_on", spin, 2, &r));
    disco_value_t ar[2] = {dref(x), disco_str("sum")};
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

Suite *suite_liveness(void)
{
    Suite *s = suite_create("liveness");
    TCase *tc = tcase_create("liveness");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stopped_heap_holder);
    tcase_add_test(tc, test_abandoned_collective);
    suite_add_tcase(s, tc);
    return s;
}
