/* test_comm.c - collectives and point-to-point from inside worker functions
 * (<disco/comm.h>; suite comm). The worker functions are in
 * tests/testlib_comm.c; each checks its own results and fails naming what
 * differed, so a passing call_sync_all is every member's check passing. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "disco/clock.h"
#include "disco/comm.h"
#include "disco/device.h"
#include "disco/session.h"
#include "tests/session_util.h"
#include "tests/gpu_session_util.h"

enum { WORLD = 4, GROUPS = 2 };

/* Calls name(args) on every worker as one SPMD step. */
static disco_status_t step(disco_session_t *s, const char *name, disco_value_t *args, int n)
{
    disco_dref_t f, r;
    disco_status_t st = disco_session_get_func(s, name, &f);
    if (st != DISCO_OK)
        return st;
    st = disco_session_call_sync_all(s, f, args, n, &r);
    if (st == DISCO_OK)
        (void)disco_session_free_reg(s, r);
    (void)disco_session_free_reg(s, f);
    return st;
}

/* Session i of the matrix: fork or spawn, heap or sim tensors. */
static disco_session_t *open_nth(int i, DLDeviceType *dev_out, uint32_t timeout_ms)
{
    DLDeviceType dev = i >= 4 ? kDLCUDA : i % 2 ? kDLExtDev : kDLCPU;
    if (dev == kDLExtDev)
        setenv("DISCO_SIM_GPUS", "2", 1);
    disco_session_config_t cfg = disco_session_config_default(WORLD);
    cfg.num_groups = GROUPS;
    /* CUDA: spawned (the probe ran in a child; a controller that touches
     * CUDA must not fork after it). */
    cfg.launch = i / 2 % 2 || dev == kDLCUDA ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.call_timeout_ms = timeout_ms;
    cfg.device_arena_bytes = 4u << 20;
    *dev_out = dev;
    return tu_open_with_testlib(&cfg);
}

/* Every operation (allreduce, allreduce in place, allgather, broadcast,
 * barrier, send/recv, send_to_next_group/recv_from_prev_group, and five
 * collectives in one command) x float32 and int32 x the world and 2 groups,
 * on heap tensors (loop 0, 2: fork, spawn), sim tensors (1, 3) and CUDA
 * tensors (4: skipped without a GPU), each one
 * call_sync_all whose functions check every element on every worker. */
START_TEST(test_comm_matrix)
{
    if (_i >= 4)
        NEED_DEVICE(kDLCUDA); /* a skip, saying why, without a GPU */
    DLDeviceType dev;
    disco_session_t *s = open_nth(_i, &dev, 120000);
    for (int op = 0; op < 8; op++)
        for (int dt = 0; dt < 2; dt++)
            for (int g = 0; g < 2; g++) {
                if (op == 6 && g == 0)
                    continue; /* next/previous group: groups only */
                disco_value_t a[6] = {disco_value_int(op),
                                      disco_value_int(dev),
                                      disco_value_int(dt),
                                      disco_value_bool(g == 1),
                                      disco_value_int(WORLD / GROUPS),
                                      disco_value_bool(false)};
                disco_status_t st = step(s, "comm.check", a, 6);
                ck_assert_msg(st == DISCO_OK, "op %d dtype %d groups %d device %d: %s (%s)", op, dt,
                              g, (int)dev, disco_strerror(st), disco_last_error());
            }
    disco_session_close(s);
}
END_TEST

/* The caller's own host memory (malloc'd tensors) is staged through the
 * heap: every operation gives the same results on it. */
START_TEST(test_comm_staged)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i, &dev, 120000);
    for (int op = 0; op < 8; op++) {
        disco_value_t a[6] = {
            disco_value_int(op),       disco_value_int(kDLCPU),         disco_value_int(0),
            disco_value_bool(op == 6), disco_value_int(WORLD / GROUPS), disco_value_bool(true)};
        disco_status_t st = step(s, "comm.check", a, 6);
        ck_assert_msg(st == DISCO_OK, "op %d: %s (%s)", op, disco_strerror(st), disco_last_error());
    }
    disco_session_close(s);
}
END_TEST

/* Device memory the session did not allocate (disco_device_alloc on each
 * worker's own sim device, filled by a copy left queued on the device's
 * default stream) is staged through the worker's arena: every operation
 * (allreduce, in place too, allgather, broadcast, barrier, send/recv,
 * send_to_next_group/recv_from_prev_group, five in one command) gives the
 * right values in the caller's memory, fork and spawn. */
START_TEST(test_comm_staged_device)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i + 1, &dev, 120000);
    ck_assert_int_eq(dev, kDLExtDev);
    for (int op = 0; op < 8; op++)
        for (int dt = 0; dt < 2; dt++) {
            disco_value_t a[6] = {disco_value_int(op),
                                  disco_value_int(dev),
                                  disco_value_int(dt),
                                  disco_value_bool(op == 6),
                                  disco_value_int(WORLD / GROUPS),
                                  disco_value_bool(true)};
            disco_status_t st = step(s, "comm.check", a, 6);
            ck_assert_msg(st == DISCO_OK, "op %d dtype %d: %s (%s)", op, dt, disco_strerror(st),
                          disco_last_error());
        }
    disco_session_close(s);
}
END_TEST

/* Runs comm.stage_error(kind, sim). */
static disco_status_t stage_error(disco_session_t *s, int kind)
{
    disco_value_t a[2] = {disco_value_int(kind), disco_value_int(kDLExtDev)};
    return step(s, "comm.stage_error", a, 2);
}

/* Device memory that cannot be staged is refused with a message that says
 * why: on another sim device than the worker's (DISCO_E_MISMATCH), not
 * compact (DISCO_E_INVAL), of another device type than the worker's arena
 * (DISCO_E_MISMATCH); the session stays usable after each (the members
 * fail alike at the meeting); a send of such memory fails on the sender. */
START_TEST(test_comm_stage_errors)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(1, &dev, 60000);
    CK_STATUS(stage_error(s, 0), DISCO_E_MISMATCH);
    CK_HAS("disco_ctx_allreduce: a tensor on sim:1, and worker 0's device is sim:0");
    CK_STATUS(stage_error(s, 1), DISCO_E_INVAL);
    CK_HAS("a tensor on sim:0 that disco did not allocate must be compact");
    CK_STATUS(stage_error(s, 2), DISCO_E_MISMATCH);
    CK_HAS("staging a tensor on cuda:0: worker 0: its device arena is on sim:0");
    disco_value_t a[6] = {disco_value_int(0),      disco_value_int(dev), disco_value_int(0),
                          disco_value_bool(false), disco_value_int(2),   disco_value_bool(true)};
    disco_status_t st = step(s, "comm.check", a, 6);
    ck_assert_msg(st == DISCO_OK, "after the refusals: %s (%s)", disco_strerror(st),
                  disco_last_error());
    CK_STATUS(stage_error(s, 3), DISCO_E_MISMATCH);
    CK_HAS("disco_ctx_send: a tensor on sim:1, and worker 0's device is sim:0");
    disco_session_close(s);
}
END_TEST

/* The session still runs an in-worker allreduce, correctly (comm.check),
 * then closes it. */
static void assert_usable_and_close(disco_session_t *s)
{
    disco_value_t a[6] = {disco_value_int(0), disco_value_int(kDLCPU),
                          disco_value_int(0), disco_value_bool(false),
                          disco_value_int(2), disco_value_bool(false)};
    ck_assert_int_eq(step(s, "comm.check", a, 6), DISCO_OK);
    disco_session_close(s);
}

/* Runs comm.fault(kind, victim) with the call timeout timeout_ms; returns
 * its status with the detail in disco_last_error() and the time it took. */
static disco_status_t fault(disco_session_t *s, int kind, int victim, int64_t *ns_out)
{
    disco_value_t a[2] = {disco_value_int(kind), disco_value_int(victim)};
    int64_t t0 = disco_now_ns();
    disco_status_t st = step(s, "comm.fault", a, 2);
    *ns_out = disco_now_ns() - t0;
    return st;
}

/* comm.fault(kind, victim) fails with want and a message holding text,
 * within max_s seconds of the call when max_s > 0. */
static void expect_fault(disco_session_t *s, int kind, int victim, disco_status_t want,
                         const char *text, int64_t max_s)
{
    int64_t ns;
    disco_status_t st = fault(s, kind, victim, &ns);
    ck_assert_msg(st == want, "%s: %s", disco_strerror(st), disco_last_error());
    CK_HAS(text);
    if (max_s > 0)
        ck_assert_msg(ns < max_s * 1000000000LL, "took %lld ms", (long long)(ns / 1000000));
}

/* A member that returns from the command without calling the allreduce
 * (fork and spawn): the others' waits end at once (not at the 60 s call
 * timeout) with DISCO_E_MISMATCH naming it, and the session is broken (the
 * members' collective counts disagree from then on). */
START_TEST(test_comm_skip_named)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i, &dev, 60000);
    expect_fault(s, 1, 2, DISCO_E_MISMATCH,
                 "worker 2 ended the command without calling it (it returned early", 20);
    disco_value_t a[2] = {disco_value_int(-1), disco_value_int(-1)};
    ck_assert_int_eq(step(s, "comm.fault", a, 2), DISCO_E_BROKEN);
    disco_session_close(s);
}
END_TEST

/* As test_comm_skip_named in a group without worker 0 (workers 2 and
 * 3): the member that waits is a worker process; the session's error
 * still names the one that left. */
START_TEST(test_comm_skip_group_named)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i, &dev, 60000);
    int64_t ns;
    disco_status_t st = fault(s, 6, 3, &ns);
    ck_assert_msg(st != DISCO_OK, "skipped collective passed");
    CK_HAS("worker 3 ended the command without calling it");
    ck_assert_msg(ns < 20000000000LL, "took %lld ms", (long long)(ns / 1000000));
    disco_session_close(s);
}
END_TEST

/* A member whose function fails before the allreduce: the others' error
 * names it and says why it left (its own message, from its error box). */
START_TEST(test_comm_failed_first_named)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(0, &dev, 60000);
    int64_t ns;
    disco_status_t st = fault(s, 7, 1, &ns);
    ck_assert_msg(st != DISCO_OK, "a collective without worker 1 passed");
    CK_HAS("worker 1 ended the command without calling it (it failed first: worker 1 fails on "
           "purpose)");
    disco_session_close(s);
}
END_TEST

/* A member killed while the others wait inside disco_ctx_allreduce: the
 * call fails within the deadline naming the dead worker; worker 0's output
 * is never written after (the session is broken). */
START_TEST(test_comm_kill_named)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i, &dev, 60000);
    int64_t ns;
    disco_status_t st = fault(s, 0, 3, &ns);
    ck_assert_msg(st == DISCO_E_WORKER_DIED || st == DISCO_E_BROKEN, "%s: %s", disco_strerror(st),
                  disco_last_error());
    CK_HAS("worker 3");
    ck_assert_msg(ns < 30000000000LL, "took %lld ms", (long long)(ns / 1000000));
    disco_session_close(s);
}
END_TEST

/* Mismatched shapes, and a member that calls another collective: every
 * member fails alike with DISCO_E_MISMATCH naming the workers, nobody's
 * output is written, and the session stays usable (the next in-worker
 * allreduce runs and is correct). */
START_TEST(test_comm_mismatch)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(0, &dev, 60000);
    expect_fault(s, 2, 1, DISCO_E_MISMATCH, "worker 1 has a float32 tensor of shape [65]", 0);
    expect_fault(s, 3, 2, DISCO_E_MISMATCH, "called allgather", 0);
    assert_usable_and_close(s);
}
END_TEST

/* Small allreduces meet inline (collective.h, Inline: no end barrier;
 * a member's slot is rewritten two collectives later) mixed with ones that
 * do not, in place, apart and overlapping, with members skewed: every
 * result exact, over the world and over groups, fork and spawn. */
START_TEST(test_comm_inline_reuse)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i, &dev, 60000);
    for (int g = 0; g < 2; g++) {
        disco_value_t a[3] = {disco_value_int(3000), disco_value_bool(g == 1),
                              disco_value_int(WORLD / GROUPS)};
        disco_status_t st = step(s, "comm.inline_stress", a, 3);
        ck_assert_msg(st == DISCO_OK, "%s: %s", disco_strerror(st), disco_last_error());
    }
    disco_session_close(s);
}
END_TEST

/* Meetings where some members go inline and others cannot (F3 in
 * collective.h): an input too big to go inline, another op, a member whose
 * call failed before the meeting. Each fails at once on every member with
 * the error that names it, nothing is written, and the session stays
 * usable. */
START_TEST(test_comm_inline_mixed)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(0, &dev, 60000);
    expect_fault(s, 8, 1, DISCO_E_MISMATCH, "worker 1 has a float32 tensor of shape [4096]", 20);
    expect_fault(s, 9, 3, DISCO_E_MISMATCH, "gave op 3", 0);
    expect_fault(s, 10, 2, DISCO_E_INVAL, "worker 2: disco_ctx_allreduce: op 9 is none", 20);
    assert_usable_and_close(s);
}
END_TEST

/* A send whose receiver returns without receiving fails on the sender
 * with DISCO_E_MISMATCH naming the receiver, at once. */
START_TEST(test_comm_send_without_recv)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(2 * _i, &dev, 60000);
    expect_fault(s, 4, 1, DISCO_E_MISMATCH, "worker 1 ended its command without receiving", 20);
    disco_session_close(s);
}
END_TEST

/* comm.bad_p2p(kind) on a session whose call deadline is timeout_ms:
 * every check is on the workers (tests/testlib_comm.c). */
static void bad_p2p(int kind)
{
    enum { TIMEOUT_MS = 20000 };
    DLDeviceType dev;
    disco_session_t *s = open_nth(0, &dev, TIMEOUT_MS);
    disco_value_t a[2] = {disco_value_int(kind), disco_value_int(TIMEOUT_MS)};
    int64_t t0 = disco_now_ns();
    disco_status_t st = step(s, "comm.bad_p2p", a, 2);
    ck_assert_msg(st == DISCO_OK, "%s: %s", disco_strerror(st), disco_last_error());
    ck_assert_msg(disco_now_ns() - t0 < TIMEOUT_MS / 4 * 1000000LL, "took %lld ms",
                  (long long)((disco_now_ns() - t0) / 1000000));
    assert_usable_and_close(s);
}

/* A send that fails on its own argument (a host tensor not compact) takes
 * its place (collective.h, Failures): its receiver fails at once, naming
 * the sender and quoting its words, writes nothing, and the pair's next
 * send meets the next receive with the right bytes. */
START_TEST(test_comm_bad_send_keeps_place)
{
    bad_p2p(0);
}
END_TEST

/* The mirror: a receive that fails on its own argument claims the send
 * and acks with failure; the sender fails at once naming the receiver
 * with its words, and the next send meets the next receive. */
START_TEST(test_comm_bad_recv_keeps_place)
{
    bad_p2p(1);
}
END_TEST

/* A member that calls one allreduce where the others call two: named
 * within the deadline (the second meeting finds it gone). */
START_TEST(test_comm_fewer_named)
{
    DLDeviceType dev;
    disco_session_t *s = open_nth(0, &dev, 60000);
    expect_fault(s, 5, 1, DISCO_E_MISMATCH, "worker 1 ended the command", 0);
    disco_session_close(s);
}
END_TEST

/* Outside a session's worker function (a ctx with no session worker) every
 * call is refused with DISCO_E_INVAL, never a crash. */
START_TEST(test_comm_outside)
{
    ck_assert_int_eq(disco_ctx_barrier(NULL, false), DISCO_E_INVAL);
    CK_HAS("only inside a worker function");
    ck_assert_int_eq(disco_ctx_send(NULL, NULL, 1), DISCO_E_INVAL);
}
END_TEST

Suite *suite_comm(void)
{
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("comm");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_comm_matrix, 0, 5);
    tcase_add_loop_test(tc, test_comm_staged, 0, 2);
    tcase_add_loop_test(tc, test_comm_staged_device, 0, 2);
    tcase_add_test(tc, test_comm_stage_errors);
    tcase_add_loop_test(tc, test_comm_skip_named, 0, 2);
    tcase_add_loop_test(tc, test_comm_skip_group_named, 0, 2);
    tcase_add_test(tc, test_comm_failed_first_named);
    tcase_add_loop_test(tc, test_comm_kill_named, 0, 2);
    tcase_add_test(tc, test_comm_mismatch);
    tcase_add_loop_test(tc, test_comm_inline_reuse, 0, 2);
    tcase_add_test(tc, test_comm_inline_mixed);
    tcase_add_loop_test(tc, test_comm_send_without_recv, 0, 2);
    tcase_add_test(tc, test_comm_bad_send_keeps_place);
    tcase_add_test(tc, test_comm_bad_recv_keeps_place);
    tcase_add_test(tc, test_comm_fewer_named);
    tcase_add_test(tc, test_comm_outside);
    suite_add_tcase(s, tc);
    return s;
}
