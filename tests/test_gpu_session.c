/* test_gpu_session.c - device tensors in session registers (suite
 * gpu_session): per-worker device arenas, disco.empty on a device, copies
 * to and from worker 0, debug get/set, freeing, close, and the errors.
 *
 * Every behaviour runs on the simulated GPU (kDLExtDev, "sim",
 * DISCO_SIM_GPUS=2) with 2, 3 and 4 workers, forked and spawned (a spawned
 * worker inherits DISCO_SIM_GPUS through its environment). The same tests
 * run on CUDA when a GPU is there and skip otherwise; DISCO_REQUIRE_GPU=1
 * turns a CUDA skip into a failure (as tests/test_cuda.c). A build without
 * the sim device skips the sim tests with a message, never silently. */
#include "tests/gpu_session_util.h"

/* ---- tests ---- */

/* disco.empty on a device makes one tensor on every worker, each on its
 * own device (worker i -> device i mod count), from an arena of the
 * configured size. */
START_TEST(test_empty_every_worker)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s), ndev = NSIM;
    if (type == kDLCUDA)
        CK_OK(disco_device_count(kDLCUDA, &ndev)); /* spawned workers: the controller may */
    int64_t shape[2] = {4, 8};
    disco_dref_t r;
    CK_OK(disco_session_empty_device(s, shape, 2, F32, (DLDevice){type, 0}, false, &r));
    for (int w = 0; w < world; w++) {
        CK_OK(disco_session_sync(s, w));
        int64_t st[9];
        arena_stats(s, w, st);
        ck_assert_int_eq(st[0], 4 << 20);
        ck_assert_int_eq(st[2], 1);
        ck_assert_int_eq(st[4], (int)type);
        ck_assert_int_eq(st[5], w % ndev);
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_int_eq(v.type, DISCO_T_BYTES);
        ck_assert_uint_eq(v.len, 4 * 8 * sizeof(float));
        disco_value_clear(&v);
    }
    CK_OK(disco_session_free_reg(s, r));
    disco_session_close(s);
}
END_TEST

/* A library function makes a device tensor with disco_ctx_empty_device,
 * fills it from the host and returns it: each worker's register then holds
 * a tensor on its own device with that worker's values. */
START_TEST(test_function_returns_device_tensor)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    disco_dref_t lib;
    disco_value_t path = disco_value_str(DISCO_TEST_LIB);
    CK_OK(disco_session_call_by_name(s, "disco.load_library", &path, 1, &lib));
    int64_t shape[1] = {8};
    disco_value_t args[2] = {disco_value_shape(shape, 1), disco_value_int((int64_t)type)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fill_device", args, 2, &r));
    for (int w = 0; w < world; w++) {
        CK_OK(disco_session_sync(s, w));
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_uint_eq(v.len, 8 * sizeof(float));
        const float *f = v.v.bytes;
        for (int i = 0; i < 8; i++)
            ck_assert_msg(f[i] == (float)(1000 * w + i), "worker %d [%d]: %g", w, i, f[i]);
        disco_value_clear(&v);
        int64_t st[9];
        arena_stats(s, w, st);
        ck_assert_int_eq(st[4], (int)type); /* from the worker's own device arena */
    }
    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_free_reg(s, lib));
    disco_session_close(s);
}
END_TEST

/* copy_into_worker0 then copy_from_worker0 of a device register gives the
 * host bytes back; copy_to_worker0 of a tensor on a device makes a device
 * register (device to device), which copies out device to device too. */
START_TEST(test_copy_round_trip)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    enum { N = 1000 };
    static float in[N], out[N], out2[N];
    pattern(in, N, 7);
    int64_t shape[1] = {N};
    DLTensor hin = {.data = in, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = shape};
    DLTensor hout = hin;
    hout.data = out;
    disco_dref_t r;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, true, &r));
    CK_OK(disco_session_copy_into_worker0(s, &hin, r));
    CK_OK(disco_session_copy_from_worker0(s, r, &hout));
    ck_assert_int_eq(memcmp(in, out, sizeof in), 0);

    /* Device to device: a tensor on worker 0's device, made by the test. */
    DLDevice d0 = {type, 0};
    void *dbuf, *dbuf2;
    CK_OK(disco_device_alloc(d0, sizeof in, &dbuf));
    CK_OK(disco_device_alloc(d0, sizeof in, &dbuf2));
    CK_OK(disco_device_copy(dbuf, d0, in, (DLDevice){kDLCPU, 0}, sizeof in, NULL));
    CK_OK(disco_device_stream_sync(d0, NULL));
    DLTensor dsrc = {.data = dbuf, .device = d0, .ndim = 1, .dtype = F32, .shape = shape};
    DLTensor ddst = dsrc;
    ddst.data = dbuf2;
    disco_dref_t r2;
    CK_OK(disco_session_copy_to_worker0(s, &dsrc, &r2));
    CK_OK(disco_session_copy_from_worker0(s, r2, &ddst));
    CK_OK(disco_device_copy(out2, (DLDevice){kDLCPU, 0}, dbuf2, d0, sizeof in, NULL));
    CK_OK(disco_device_stream_sync(d0, NULL));
    ck_assert_int_eq(memcmp(in, out2, sizeof in), 0);
    /* The register copied in is a device tensor: debug_get reads it. */
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r2, 0, &v));
    ck_assert_uint_eq(v.len, sizeof in);
    ck_assert_int_eq(memcmp(v.v.bytes, in, sizeof in), 0);
    disco_value_clear(&v);

    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_free_reg(s, r2));
    CK_OK(disco_device_free(d0, dbuf));
    CK_OK(disco_device_free(d0, dbuf2));
    disco_session_close(s);
}
END_TEST

/* debug_set with bytes of the tensor's size fills a device tensor on any
 * worker and debug_get reads it back; a wrong size is refused
 * (DISCO_E_MISMATCH naming the worker) and the session stays usable. On sim
 * a copy runs only when its stream is synced, so this also catches a copy
 * that misses its sync (removing the sync in tensor.c's copy_with makes it
 * fail: the bytes read back are the old ones). */
START_TEST(test_debug_get_set)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    enum { N = 256 };
    disco_dref_t r = patterned(s, type, N);
    static float p[N];
    for (int w = 0; w < world; w++) {
        pattern(p, N, w);
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_uint_eq(v.len, sizeof p);
        ck_assert_msg(memcmp(v.v.bytes, p, sizeof p) == 0, "worker %d's bytes", w);
        disco_value_clear(&v);
    }
    disco_value_t small = disco_value_bytes("abc", 3);
    CK_STATUS(disco_session_debug_set(s, r, world - 1, &small), DISCO_E_MISMATCH);
    char want[32];
    snprintf(want, sizeof want, "worker %d", world - 1);
    CK_HAS(want);
    CK_OK(disco_session_sync(s, world - 1));
    CK_OK(disco_session_free_reg(s, r));
    disco_session_close(s);
}
END_TEST

/* Freeing a device register gives its bytes back to every worker's arena;
 * allocating and freeing far more than the arena holds never runs out. */
START_TEST(test_kill_register_frees)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    int64_t shape[1] = {256 * 1024}; /* 1 MiB of float32, a quarter of the arena */
    disco_dref_t r[3];
    for (int k = 0; k < 3; k++)
        CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &r[k]));
    int64_t st[9];
    for (int w = 0; w < world; w++) {
        arena_stats(s, w, st);
        ck_assert_int_eq(st[2], 3);
        ck_assert_int_eq(st[1], 3 << 20);
    }
    CK_OK(disco_session_free_reg(s, r[1]));
    for (int w = 0; w < world; w++) {
        arena_stats(s, w, st);
        ck_assert_int_eq(st[2], 2);
        ck_assert_int_eq(st[1], 2 << 20);
    }
    CK_OK(disco_session_free_reg(s, r[0]));
    CK_OK(disco_session_free_reg(s, r[2]));
    for (int k = 0; k < 40; k++) { /* 40 MiB through a 4 MiB arena */
        disco_dref_t t;
        CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &t));
        CK_OK(disco_session_free_reg(s, t));
    }
    for (int w = 0; w < world; w++) {
        CK_OK(disco_session_sync(s, w));
        arena_stats(s, w, st);
        ck_assert_int_eq(st[2], 0);
        ck_assert_int_eq(st[1], 0);
    }
    disco_session_close(s);
}
END_TEST

/* Closing a session frees worker 0's arena and everything device-side in
 * the controller: its fds and memfd mappings are as before the session. */
START_TEST(test_close_releases)
{
    DLDeviceType type = kDLExtDev;
    NEED_DEVICE(type);
    /* The device's own per-process state (a default stream, ...) is made
     * at its first use: make it before counting. */
    void *warm;
    CK_OK(disco_device_alloc((DLDevice){type, 0}, 4096, &warm));
    CK_OK(disco_device_stream_sync((DLDevice){type, 0}, NULL));
    CK_OK(disco_device_free((DLDevice){type, 0}, warm));
    int fds = count_fds(), maps = count_memfd_maps();
    for (int round = 0; round < 2; round++) {
        disco_session_t *s = open_for(type, _i);
        int world = disco_session_num_workers(s);
        int64_t shape[1] = {1024};
        disco_dref_t r;
        CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &r));
        for (int w = 0; w < world; w++)
            CK_OK(disco_session_sync(s, w));
        /* Left in a register on purpose: close frees it with the arena. */
        disco_session_close(s);
        ck_assert_int_eq(count_fds(), fds);
        ck_assert_int_eq(count_memfd_maps(), maps);
    }
}
END_TEST

/* No sim device (DISCO_SIM_GPUS unset): disco.empty fails with
 * DISCO_E_NO_DEVICE naming the worker and the device, on worker 0 from the
 * call and on the others at their sync; the session stays usable. */
START_TEST(test_no_device)
{
    unsetenv("DISCO_SIM_GPUS");
    disco_session_config_t c = cfg_of(_i);
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    int world = disco_session_num_workers(s);
    int64_t shape[1] = {16};
    disco_dref_t r;
    CK_STATUS(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLExtDev, 0}, false, &r),
              DISCO_E_NO_DEVICE);
    CK_HAS("worker 0");
    CK_HAS("sim");
    static char all[16384];
    ck_assert_int_gt(sync_collect(s, DISCO_E_NO_DEVICE, all, sizeof all), 0);
    for (int w = 1; w < world; w++) {
        char want[64];
        snprintf(want, sizeof want, "worker %d: no sim device", w);
        CK_ALL_HAS(all, want);
    }
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    CK_OK(disco_session_empty(s, shape, 1, F32, false, &r));
    for (int w = 0; w < world; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, r));
    disco_session_close(s);
}
END_TEST

/* A device type disco has no arena for is refused before anything is
 * sent; so is a tensor larger than a whole arena. */
START_TEST(test_bad_device_type)
{
    disco_session_config_t c = cfg_of(0);
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    int64_t shape[1] = {16}, big[1] = {(4 << 20) / 4 + 1};
    disco_dref_t r;
    CK_STATUS(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLVulkan, 0}, false, &r),
              DISCO_E_NO_DEVICE);
    CK_STATUS(disco_session_empty_device(s, big, 1, F32, (DLDevice){kDLExtDev, 0}, false, &r),
              DISCO_E_NOMEM);
    CK_HAS("device_arena_bytes");
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
}
END_TEST

/* A full arena: DISCO_E_NOMEM naming the worker and its device; freeing
 * makes room again; an arena the device cannot hold at all fails the
 * same way, and neither breaks the session. */
START_TEST(test_arena_full)
{
    NEED_DEVICE(kDLExtDev);
    disco_session_t *s = open_for(kDLExtDev, _i);
    int world = disco_session_num_workers(s);
    int64_t shape[1] = {512 * 1024}; /* 2 MiB: two fill the 4 MiB arena */
    disco_dref_t a, b, x;
    DLDevice sim = {kDLExtDev, 0};
    CK_OK(disco_session_empty_device(s, shape, 1, F32, sim, false, &a));
    CK_OK(disco_session_empty_device(s, shape, 1, F32, sim, false, &b));
    CK_STATUS(disco_session_empty_device(s, shape, 1, F32, sim, false, &x), DISCO_E_NOMEM);
    CK_HAS("worker 0");
    CK_HAS("sim:0");
    CK_HAS("full");
    static char all[16384];
    ck_assert_int_gt(sync_collect(s, DISCO_E_NOMEM, all, sizeof all), 0);
    for (int w = 1; w < world; w++) {
        char want[64];
        snprintf(want, sizeof want, "worker %d: device arena on sim:%d is full", w, w % NSIM);
        CK_ALL_HAS(all, want);
    }
    CK_OK(disco_session_free_reg(s, a));
    CK_OK(disco_session_empty_device(s, shape, 1, F32, sim, false, &x));
    for (int w = 0; w < world; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, b));
    CK_OK(disco_session_free_reg(s, x));
    disco_session_close(s);
}
END_TEST

/* An arena larger than the sim device's memory (DISCO_SIM_MEM_MB): the
 * first device tensor fails with DISCO_E_NOMEM naming the worker and the
 * device; the session goes on. */
START_TEST(test_arena_alloc_fails)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_SIM_MEM_MB", "2", 1);
    disco_session_t *s = open_for(kDLExtDev, 0);
    int64_t shape[1] = {16};
    disco_dref_t r;
    CK_STATUS(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLExtDev, 0}, false, &r),
              DISCO_E_NOMEM);
    CK_HAS("worker 0");
    CK_HAS("sim:0");
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_NOMEM);
    CK_HAS("worker 1");
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
}
END_TEST

/* One device type per session: a worker whose arena is on sim refuses a
 * cuda tensor (DISCO_E_MISMATCH naming its device), and copy_from_worker0
 * refuses a destination on another device type. */
START_TEST(test_wrong_device)
{
    NEED_DEVICE(kDLExtDev);
    disco_session_t *s = open_for(kDLExtDev, 0);
    int64_t shape[1] = {16};
    disco_dref_t r, r2;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLExtDev, 0}, false, &r));
    CK_STATUS(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLCUDA, 0}, false, &r2),
              DISCO_E_MISMATCH);
    CK_HAS("worker 0");
    CK_HAS("sim:0");
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_MISMATCH);
    CK_HAS("sim:1");
    float buf[16];
    DLTensor cuda_dst = {
        .data = buf, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = F32, .shape = shape};
    CK_STATUS(disco_session_copy_from_worker0(s, r, &cuda_dst), DISCO_E_MISMATCH);
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    CK_OK(disco_session_free_reg(s, r));
    disco_session_close(s);
}
END_TEST

/* Shutting a session down releases worker 0's device state (its device
 * registers, its arena and the process's IPC table): a second session of
 * the same process makes and uses device tensors while the first one, shut
 * down with a device tensor still in a register, is not closed yet. Calls
 * on the first then return DISCO_E_SHUTDOWN; closing both is clean. */
START_TEST(test_shutdown_releases_device)
{
    DLDeviceType type = kDLExtDev;
    NEED_DEVICE(type);
    int64_t shape[1] = {16};
    disco_session_t *first = open_for(type, _i);
    disco_dref_t r1, r2;
    CK_OK(disco_session_empty_device(first, shape, 1, F32, (DLDevice){type, 0}, false, &r1));
    CK_OK(disco_session_sync_all(first));
    CK_OK(disco_session_shutdown(first));
    disco_session_t *second = open_for(type, _i);
    CK_OK(disco_session_empty_device(second, shape, 1, F32, (DLDevice){type, 0}, false, &r2));
    float in[16], out[16];
    for (int k = 0; k < 16; k++)
        in[k] = (float)k + 0.5f;
    DLTensor hin = {.data = in, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = shape};
    DLTensor hout = {.data = out, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = shape};
    CK_OK(disco_session_copy_into_worker0(second, &hin, r2));
    CK_OK(disco_session_copy_from_worker0(second, r2, &hout));
    ck_assert_mem_eq(in, out, sizeof in);
    CK_OK(disco_session_sync_all(second));
    /* The shut down session: its register is gone with worker 0's device
     * state, and every call says the session is shut down. */
    CK_STATUS(disco_session_copy_from_worker0(first, r1, &hout), DISCO_E_SHUTDOWN);
    CK_STATUS(disco_session_empty_device(first, shape, 1, F32, (DLDevice){type, 0}, false, &r1),
              DISCO_E_SHUTDOWN);
    disco_session_close(first);
    CK_OK(disco_session_free_reg(second, r2));
    CK_OK(disco_session_sync_all(second));
    disco_session_close(second);
}
END_TEST

Suite *suite_gpu_session(void)
{
    Suite *s = suite_create("gpu_session");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    /* Loop index: 0..5 sim (2, 3, 4 workers; fork, then spawn), 6..11 the
     * same on CUDA. */
    tcase_add_loop_test(tc, test_empty_every_worker, 0, 12);
    tcase_add_loop_test(tc, test_copy_round_trip, 0, 12);
    tcase_add_loop_test(tc, test_function_returns_device_tensor, 0, 12);
    tcase_add_loop_test(tc, test_debug_get_set, 0, 12);
    tcase_add_loop_test(tc, test_kill_register_frees, 0, 12);
    tcase_add_loop_test(tc, test_close_releases, 0, 6);
    tcase_add_loop_test(tc, test_no_device, 0, 6);
    tcase_add_test(tc, test_bad_device_type);
    tcase_add_loop_test(tc, test_arena_full, 0, 6);
    tcase_add_test(tc, test_arena_alloc_fails);
    tcase_add_test(tc, test_wrong_device);
    tcase_add_loop_test(tc, test_shutdown_releases_device, 0, 6);
    suite_add_tcase(s, tc);
    return s;
}
