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

Suite *suite_liveness(void)
{
    Suite *s = suite_create("liveness");
    TCase *tc = tcase_create("liveness");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stopped_heap_holder);
    suite_add_tcase(s, tc);
    return s;
}
