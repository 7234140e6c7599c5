/* test_gpu_session_coll.c - collectives of device tensors, deaths and
 * sessions side by side (suite gpu_session_coll; the rest of the device
 * session tests, and how they pick sim or CUDA, are in test_gpu_session.c). */
#include <pthread.h>
#include <time.h>

#include "disco/clock.h"
#include "tests/gpu_session_util.h"
#include "tests/session_util.h"

/* broadcast_from_worker0, gather_to_worker0, allgather, scatter_from_worker0
 * and allreduce (sum) of device tensors: each member's result is on its own device with the right
 * bytes (device-to-device copies through the peers' arenas, each arena imported once per process:
 * the import counts do not grow with more calls). */
START_TEST(test_device_collectives)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    enum { N = 64 };
    disco_dref_t x = patterned(s, type, N);
    static float p[N], all[4 * N];
    for (int w = 0; w < world; w++)
        pattern(all + w * N, N, w);
    for (int round = 0; round < 2; round++) {
        disco_dref_t bc = coll(s, "disco.broadcast_from_worker0", x);
        disco_dref_t ga = coll(s, "disco.gather_to_worker0", x);
        disco_dref_t ag = coll(s, "disco.allgather", x);
        disco_dref_t sc = coll(s, "disco.scatter_from_worker0", ag);
        disco_value_t rargs[3] = {
            {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
        disco_dref_t ar;
        CK_OK(disco_session_call_by_name(s, "disco.allreduce", rargs, 3, &ar));
        pattern(p, N, 0);
        for (int w = 0; w < world; w++) {
            CK_OK(disco_session_sync(s, w));
            disco_value_t v;
            CK_OK(disco_session_debug_get(s, bc, w, &v));
            ck_assert_uint_eq(v.len, sizeof p);
            ck_assert_msg(memcmp(v.v.bytes, p, sizeof p) == 0, "broadcast on worker %d", w);
            disco_value_clear(&v);
            CK_OK(disco_session_debug_get(s, ag, w, &v));
            ck_assert_uint_eq(v.len, (size_t)world * sizeof p);
            ck_assert_msg(memcmp(v.v.bytes, all, v.len) == 0, "allgather on worker %d", w);
            disco_value_clear(&v);
            /* scatter of worker 0's allgather: member w gets member w's x */
            CK_OK(disco_session_debug_get(s, sc, w, &v));
            ck_assert_uint_eq(v.len, sizeof p);
            ck_assert_msg(memcmp(v.v.bytes, all + w * N, sizeof p) == 0, "scatter on %d", w);
            disco_value_clear(&v);
            CK_OK(disco_session_debug_get(s, ar, w, &v));
            ck_assert_uint_eq(v.len, sizeof p);
            for (int i = 0; i < N; i++) {
                float want = 0;
                for (int q = 0; q < world; q++)
                    want += all[q * N + i];
                ck_assert_msg(((const float *)v.v.bytes)[i] == want, "allreduce on %d [%d]", w, i);
            }
            disco_value_clear(&v);
            int64_t st[9];
            arena_stats(s, w, st);
            ck_assert_int_eq(st[3], world - 1); /* every peer's arena, opened once */
            ck_assert_int_eq(st[6], world - 1); /* and its event: the copies are ordered by them */
        }
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, ga, 0, &v));
        ck_assert_uint_eq(v.len, (size_t)world * sizeof p);
        ck_assert_int_eq(memcmp(v.v.bytes, all, v.len), 0);
        disco_value_clear(&v);
        CK_OK(disco_session_free_reg(s, bc));
        CK_OK(disco_session_free_reg(s, ga));
        CK_OK(disco_session_free_reg(s, ag));
        CK_OK(disco_session_free_reg(s, sc));
        CK_OK(disco_session_free_reg(s, ar));
    }
    CK_OK(disco_session_free_reg(s, x));
    disco_session_close(s);
}
END_TEST

/* In-group collectives of device tensors: 4 workers in 2 groups ({0, 1},
 * {2, 3}); each group's members meet, import and wait for each other only,
 * and every result holds its own group's bytes: broadcast from the group's
 * leader, allgather, allreduce (sum), gather to the leader, scatter of the
 * leader's allgather back to each member. */
START_TEST(test_device_collectives_in_group)
{
    DLDeviceType type = _i < 2 ? kDLExtDev : kDLCUDA;
    NEED_DEVICE(type);
    disco_session_config_t c = cfg_of(2); /* 4 workers */
    c.num_groups = 2;
    if (_i % 2 == 1 || type == kDLCUDA) {
        c.launch = DISCO_LAUNCH_SPAWN;
        c.worker_path = DISCO_TEST_WORKER;
    }
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    enum { N = 32 };
    disco_dref_t x = patterned(s, type, N);
    disco_dref_t bc = coll_in(s, "disco.broadcast_from_worker0", x, true);
    disco_dref_t ag = coll_in(s, "disco.allgather", x, true);
    disco_dref_t ga = coll_in(s, "disco.gather_to_worker0", x, true);
    disco_dref_t sc = coll_in(s, "disco.scatter_from_worker0", ag, true);
    disco_value_t rargs[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(true)};
    disco_dref_t ar;
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", rargs, 3, &ar));
    static float mine[N], both[2 * N], sum[N];
    for (int w = 0; w < 4; w++) {
        int lead = w / 2 * 2;
        CK_OK(disco_session_sync(s, w));
        pattern(both, N, lead);
        pattern(both + N, N, lead + 1);
        for (int i = 0; i < N; i++)
            sum[i] = both[i] + both[N + i];
        pattern(mine, N, w);
        expect_bytes(s, bc, w, both, sizeof mine, "group broadcast");
        expect_bytes(s, ag, w, both, sizeof both, "group allgather");
        expect_bytes(s, sc, w, mine, sizeof mine, "group scatter");
        expect_bytes(s, ar, w, sum, sizeof sum, "group allreduce");
        if (w == lead) {
            expect_bytes(s, ga, w, both, sizeof both, "group gather");
        } else {
            disco_value_t v;
            CK_OK(disco_session_debug_get(s, ga, w, &v));
            ck_assert_int_eq(v.type, DISCO_T_NULL);
        }
        int64_t st[9];
        arena_stats(s, w, st);
        ck_assert_int_eq(st[3], 1); /* its group's other member's arena only */
        ck_assert_int_eq(st[6], 1); /* and its event */
    }
    disco_session_close(s);
}
END_TEST

/* allreduce of device tensors with fewer elements than members: a member
 * with no slice of its own queues no copy and never syncs before the end;
 * the others' reads of its input are ordered by its event alone (on sim,
 * its record runs when they wait for it: no member syncs for another). */
START_TEST(test_device_allreduce_small)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    for (size_t n = 1; n <= 3; n++) {
        disco_dref_t x = patterned(s, type, n);
        disco_value_t args[3] = {
            {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("max"), disco_value_bool(false)};
        disco_dref_t ar;
        CK_OK(disco_session_call_by_name(s, "disco.allreduce", args, 3, &ar));
        float want[3];
        pattern(want, n, world - 1); /* the largest pattern is the last worker's */
        char what[32];
        snprintf(what, sizeof what, "%zu elements", n);
        for (int w = 0; w < world; w++) {
            CK_OK(disco_session_sync(s, w));
            expect_bytes(s, ar, w, want, n * sizeof(float), what);
        }
        CK_OK(disco_session_free_reg(s, ar));
        CK_OK(disco_session_free_reg(s, x));
    }
    disco_session_close(s);
}
END_TEST

/* Worker 0 overwrites a tensor it has just broadcast, at once: every other
 * member's copy still holds the broadcast bytes, since worker 0's later
 * work on its stream waits for the members' copies (their events), not
 * for a host guess. Many rounds, on every member. On sim, every copy between
 * processes first waits 20 ms (DISCO_SIM_PEER_COPY_US): without the waits,
 * worker 0's write would land long before the members' copies ran. */
START_TEST(test_device_reuse_after_broadcast)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    setenv("DISCO_SIM_PEER_COPY_US", "20000", 1); /* inherited by the workers */
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    enum { N = 4096, ROUNDS = 16 };
    static float p[N], q[N];
    int64_t shape[1] = {N};
    disco_dref_t bc[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        disco_dref_t x;
        CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &x));
        pattern(p, N, k);
        disco_value_t b = disco_value_bytes((const char *)p, sizeof p);
        CK_OK(disco_session_debug_set(s, x, 0, &b));
        bc[k] = coll(s, "disco.broadcast_from_worker0", x);
        pattern(q, N, 100 + k);
        b = disco_value_bytes((const char *)q, sizeof q);
        CK_OK(disco_session_debug_set(s, x, 0, &b)); /* the bytes the members read */
        CK_OK(disco_session_free_reg(s, x));
    }
    for (int k = 0; k < ROUNDS; k++) {
        pattern(p, N, k);
        char what[32];
        snprintf(what, sizeof what, "round %d", k);
        for (int w = 1; w < world; w++)
            expect_bytes(s, bc[k], w, p, sizeof p, what);
        CK_OK(disco_session_free_reg(s, bc[k]));
    }
    disco_session_close(s);
}
END_TEST

/* A worker killed in the middle of a device collective: every cross-process
 * copy takes 300 ms (DISCO_SIM_PEER_COPY_US), so the others are waiting for
 * its event records when it dies; the call (or the next sync) fails with
 * DISCO_E_WORKER_DIED naming it, well before any deadline, instead of the
 * others waiting forever for records that will never run. (If the kill
 * lands after the call, the next sync names it all the same.) */
START_TEST(test_death_mid_collective)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_SIM_PEER_COPY_US", "300000", 1); /* inherited by the workers */
    disco_session_t *s = open_for(kDLExtDev, _i);
    int world = disco_session_num_workers(s), victim = world - 1;
    disco_dref_t x = patterned(s, kDLExtDev, 16);
    disco_value_t arg = {.type = DISCO_T_DREF, .v.reg = x};
    expect_death_during(s, "disco.allgather", &arg, 1, victim);
    disco_session_close(s);
}
END_TEST

/* A worker that dies while the others hold its arena open (imported by an
 * allgather) breaks the session with DISCO_E_WORKER_DIED naming it, as on
 * the CPU path; close still releases every import and arena of the
 * controller (fds and memfd mappings as before). */
START_TEST(test_death_with_imports)
{
    NEED_DEVICE(kDLExtDev);
    void *warm;
    CK_OK(disco_device_alloc((DLDevice){kDLExtDev, 0}, 4096, &warm));
    CK_OK(disco_device_stream_sync((DLDevice){kDLExtDev, 0}, NULL));
    CK_OK(disco_device_free((DLDevice){kDLExtDev, 0}, warm));
    int fds = count_fds(), maps = count_memfd_maps();
    disco_session_t *s = open_for(kDLExtDev, _i);
    int world = disco_session_num_workers(s), victim = world - 1;
    int64_t shape[1] = {32};
    disco_dref_t x;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLExtDev, 0}, false, &x));
    disco_dref_t ag = coll(s, "disco.allgather", x);
    for (int w = 0; w < world; w++)
        CK_OK(disco_session_sync(s, w));
    int64_t st[9];
    arena_stats(s, 0, st);
    ck_assert_int_eq(st[3], world - 1);
    ck_assert_int_eq(kill(disco_session_worker_pid(s, victim), SIGKILL), 0);
    CK_STATUS(disco_session_sync(s, victim), DISCO_E_WORKER_DIED);
    char want[32];
    snprintf(want, sizeof want, "worker %d", victim);
    CK_HAS(want);
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
    disco_session_close(s);
    ck_assert_int_eq(count_fds(), fds);
    ck_assert_int_eq(count_memfd_maps(), maps);
    (void)ag;
}
END_TEST

/* send_recv of a device tensor: the receiver gets a copy of the sender's
 * bytes on its own device, every other worker null; a worker sending to
 * itself gets its own tensor; each peer's arena is still opened once. */
START_TEST(test_device_send_recv)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    enum { N = 32 };
    disco_dref_t x = patterned(s, type, N);
    static float p[N];
    int pairs[3][2] = {{world - 1, 0}, {0, world - 1}, {1, 1}};
    for (int k = 0; k < 3; k++) {
        int src = pairs[k][0], dst = pairs[k][1];
        disco_value_t args[3] = {
            {.type = DISCO_T_DREF, .v.reg = x}, disco_value_int(src), disco_value_int(dst)};
        disco_dref_t out;
        CK_OK(disco_session_call_by_name(s, "disco.send_recv", args, 3, &out));
        pattern(p, N, src);
        for (int w = 0; w < world; w++) {
            CK_OK(disco_session_sync(s, w));
            disco_value_t v;
            CK_OK(disco_session_debug_get(s, out, w, &v));
            if (w == dst) {
                ck_assert_uint_eq(v.len, sizeof p);
                ck_assert_msg(memcmp(v.v.bytes, p, sizeof p) == 0, "%d -> %d", src, dst);
            } else {
                ck_assert_int_eq(v.type, DISCO_T_NULL);
            }
            disco_value_clear(&v);
        }
        CK_OK(disco_session_free_reg(s, out));
    }
    int64_t st[9];
    arena_stats(s, 0, st);
    ck_assert_int_le(st[3], world - 1); /* peers' arenas opened at most once each */
    CK_OK(disco_session_free_reg(s, x));
    disco_session_close(s);
}
END_TEST

/* A process has one IPC lifetime table: while one session holds device
 * tensors, another session's first device tensor fails on worker 0 with
 * DISCO_E_INVAL saying so (that session stays usable); once the first
 * session is closed, the second can make them. Once both are closed the
 * process is detached from their (unmapped) tables: an export says "no IPC
 * table attached" instead of writing into unmapped memory. */
START_TEST(test_two_sessions)
{
    NEED_DEVICE(kDLExtDev);
    disco_session_t *a = open_for(kDLExtDev, 0), *b = open_for(kDLExtDev, 0);
    int64_t shape[1] = {8};
    DLDevice sim = {kDLExtDev, 0};
    disco_dref_t ra, rb;
    CK_OK(disco_session_empty_device(a, shape, 1, F32, sim, false, &ra));
    CK_STATUS(disco_session_empty_device(b, shape, 1, F32, sim, false, &rb), DISCO_E_INVAL);
    CK_HAS("worker 0");
    CK_HAS("another session");
    CK_OK(disco_session_sync(b, 1)); /* worker 1 of b is another process: it made one */
    ck_assert_int_eq(disco_session_health(b), DISCO_OK);
    disco_session_close(a);
    CK_OK(disco_session_empty_device(b, shape, 1, F32, sim, false, &rb));
    CK_OK(disco_session_sync(b, 1));
    disco_session_close(b);
    void *p;
    disco_ipc_ref_t ref;
    CK_OK(disco_device_alloc(sim, 4096, &p));
    CK_STATUS(disco_device_ipc_export(p, &ref), DISCO_E_INVAL);
    CK_HAS("no IPC table attached");
    CK_OK(disco_device_free(sim, p));
}
END_TEST

/* Imports open on the importer's own device (issue 32, section 4): every
 * worker's function leaves another sim device current (a copy there, as
 * cuda_copy leaves the copy's device current), then a kernel allreduce opens
 * the peers' arenas for the first time. Each import must be mapped for the
 * worker's own device, where its kernel reads it: an import opened for the
 * device left current is an illegal address there (sim.c, disco__sim_shadow),
 * a sticky fault that fails the call. The sums are exact, by kernels. */
START_TEST(test_import_on_own_device)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_SIM_GPUS", "3", 1); /* one device each: kernels, not staging */
    disco_session_config_t cfg = disco_session_config_default(3);
    if (_i == 1) {
        cfg.launch = DISCO_LAUNCH_SPAWN;
        cfg.worker_path = DISCO_TEST_WORKER;
    }
    cfg.call_timeout_ms = 60000;
    cfg.device_arena_bytes = 4u << 20;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    int64_t len = 256;
    disco_value_t fa[2] = {disco_value_shape(&len, 1), disco_value_int(kDLExtDev)};
    disco_dref_t x, o, y;
    CK_OK(disco_session_call_by_name(s, "test.fill_device", fa, 2, &x));
    disco_value_t ta = disco_value_int(kDLExtDev);
    CK_OK(disco_session_call_by_name(s, "test.other_device", &ta, 1, &o));
    for (int w = 0; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    disco_value_t ar[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", ar, 3, &y));
    static float want[256];
    for (int i = 0; i < 256; i++)
        want[i] = (float)(1000 * (0 + 1 + 2) + 3 * i);
    for (int w = 0; w < 3; w++) {
        CK_OK(disco_session_sync(s, w));
        expect_bytes(s, y, w, want, sizeof want, "allreduce after another device was current");
        int64_t st[9];
        arena_stats(s, w, st);
        ck_assert_msg(st[3] == 2 && st[7] + st[8] == 1,
                      "worker %d: %lld peers imported, %lld kernels (want 2 and 1)", w,
                      (long long)st[3], (long long)(st[7] + st[8]));
    }
    disco_session_close(s);
}
END_TEST

/* Close and recovery after a peer died in the middle of a device collective
 * return within their deadlines (issue 32, section 4): worker 0's stream is
 * left waiting for a record the dead worker never ran, and on a GPU such a
 * stream never drains, so cudaFree (which waits for it) would block for
 * ever; the sim's stream is stuck the same way (sim_stream.c). Worker 0's
 * arena is freed only once its stream is known idle, else left to process
 * exit (arena.c, disco__arena_destroy). Recovery then runs the same
 * collective again, and the session closes. */
START_TEST(test_close_after_death_mid_collective)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_SIM_PEER_COPY_US", "400000", 1); /* inherited by the workers */
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.call_timeout_ms = 60000;
    cfg.device_arena_bytes = 4u << 20;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    disco_dref_t x = patterned(s, kDLExtDev, 16);
    disco_value_t arg = {.type = DISCO_T_DREF, .v.reg = x};
    expect_death_during(s, "disco.allgather", &arg, 1, 2);
    int64_t t0 = disco_now_ns();
    if (_i == 1) {
        CK_OK(disco_session_recover(s));
        ck_assert_msg(disco_now_ns() - t0 < 10 * 1000000000LL, "recovery took %lld ms",
                      (long long)((disco_now_ns() - t0) / 1000000));
        unsetenv("DISCO_SIM_PEER_COPY_US"); /* for the workers started from here */
        x = patterned(s, kDLExtDev, 16);
        disco_dref_t ag = coll(s, "disco.allgather", x);
        static float p[16];
        for (int w = 0; w < 3; w++) {
            CK_OK(disco_session_sync(s, w));
            pattern(p, 16, 1);
            disco_value_t v;
            CK_OK(disco_session_debug_get(s, ag, w, &v));
            ck_assert_uint_eq(v.len, 3 * sizeof p);
            ck_assert_msg(memcmp((const char *)v.v.bytes + sizeof p, p, sizeof p) == 0,
                          "worker %d: worker 1's part after the recovery", w);
            disco_value_clear(&v);
        }
        t0 = disco_now_ns();
    }
    disco_session_close(s);
    ck_assert_msg(disco_now_ns() - t0 < 10 * 1000000000LL, "close took %lld ms",
                  (long long)((disco_now_ns() - t0) / 1000000));
}
END_TEST

Suite *suite_gpu_session_coll(void)
{
    Suite *s = suite_create("gpu_session_coll");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    /* Loop index: 0..5 sim (2, 3, 4 workers; fork, then spawn), 6..11 CUDA. */
    tcase_add_loop_test(tc, test_device_collectives, 0, 12);
    tcase_add_loop_test(tc, test_device_send_recv, 0, 12);
    tcase_add_loop_test(tc, test_device_allreduce_small, 0, 12);
    tcase_add_loop_test(tc, test_device_collectives_in_group, 0, 4); /* sim fork, spawn; CUDA */
    tcase_add_loop_test(tc, test_device_reuse_after_broadcast, 0, 12);
    tcase_add_loop_test(tc, test_death_with_imports, 0, 6);
    tcase_add_loop_test(tc, test_death_mid_collective, 0, 6);
    tcase_add_test(tc, test_two_sessions);
    suite_add_tcase(s, tc);
    /* The GPU defects of issue 32, section 4, on sim. */
    tc = tcase_create("defects");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_import_on_own_device, 0, 2);             /* fork, spawn */
    tcase_add_loop_test(tc, test_close_after_death_mid_collective, 0, 2); /* close, recover */
    suite_add_tcase(s, tc);
    return s;
}
