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
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/device.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "tests/testutil.h"

#define SIM_GPUS "2"
#define NSIM     2

/* ---- which device a test runs on ---- */

static int gpu_required(void)
{
    const char *v = getenv("DISCO_REQUIRE_GPU");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Number of CUDA GPUs, probed in a forked child: a process that has
 * initialized CUDA cannot fork workers that use it. 0 with why filled. */
static int cuda_count(char *why, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, cap, "pipe failed");
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int n = 0;
        char msg[256] = "";
        if (disco_device_count(kDLCUDA, &n) != DISCO_OK) {
            n = 0;
            snprintf(msg, sizeof msg, "%s", disco_last_error());
        }
        ssize_t wr = write(fds[1], &n, sizeof n);
        wr += write(fds[1], msg, sizeof msg);
        _exit(wr > 0 ? 0 : 1);
    }
    close(fds[1]);
    int n = 0;
    char msg[256] = "no answer from the probe";
    if (read(fds[0], &n, sizeof n) != (ssize_t)sizeof n)
        n = 0;
    else if (read(fds[0], msg, sizeof msg) <= 0)
        msg[0] = '\0';
    close(fds[0]);
    waitpid(pid, NULL, 0);
    snprintf(why, cap, "%s", msg);
    return n;
}

/* The device type of loop index i (sim for the first half). */
static DLDeviceType type_of(int i, int nsim)
{
    return i < nsim ? kDLExtDev : kDLCUDA;
}

/* Returns from the test, passing, when type cannot be tested here (a CUDA
 * skip fails under DISCO_REQUIRE_GPU=1). Sets DISCO_SIM_GPUS for sim. */
#define NEED_DEVICE(type)                                                                          \
    do {                                                                                           \
        if ((type) == kDLExtDev) {                                                                 \
            setenv("DISCO_SIM_GPUS", SIM_GPUS, 1);                                                 \
            const disco_device_api_t *api_;                                                        \
            if (disco_device_api_get(kDLExtDev, &api_) != DISCO_OK) {                              \
                printf("%s: skipped: this build has no sim device (%s)\n", __func__,               \
                       disco_last_error());                                                        \
                return;                                                                            \
            }                                                                                      \
        } else {                                                                                   \
            char why_[256];                                                                        \
            if (cuda_count(why_, sizeof why_) == 0) {                                              \
                ck_assert_msg(!gpu_required(), "%s: DISCO_REQUIRE_GPU is set, no GPU: %s",         \
                              __func__, why_);                                                     \
                printf("%s: skipped: %s\n", __func__, why_);                                       \
                return;                                                                            \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* The session geometry of loop index i within one device type: 2, 3, 4
 * workers, forked then spawned. */
static disco_session_config_t cfg_of(int i)
{
    disco_session_config_t c = disco_session_config_default(2 + i % 3);
    if (i / 3 % 2 == 1) {
        c.launch = DISCO_LAUNCH_SPAWN;
        c.worker_path = DISCO_TEST_WORKER;
    }
    c.call_timeout_ms = 120000; /* generous: 4 workers on 2 shared cores */
    c.device_arena_bytes = 4u << 20;
    return c;
}

/* CUDA sessions spawn their workers: the probe ran in a child, but a
 * controller that touches CUDA later must not fork again after it. */
static disco_session_t *open_for(DLDeviceType type, int i)
{
    disco_session_config_t c = cfg_of(i);
    if (type == kDLCUDA) {
        c.launch = DISCO_LAUNCH_SPAWN;
        c.worker_path = DISCO_TEST_WORKER;
    }
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    return s;
}

static const DLDataType F32 = {kDLFloat, 32, 1};

/* disco.arena_stats on worker w: [bytes, used, blocks, peers, type, id]. */
static void arena_stats(disco_session_t *s, int w, int64_t out[6])
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.arena_stats", NULL, 0, &r));
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_int_eq(v.type, DISCO_T_SHAPE);
    ck_assert_uint_eq(v.len, 6);
    memcpy(out, v.v.shape, 6 * sizeof *out);
    disco_value_clear(&v);
    CK_OK(disco_session_free_reg(s, r));
}

/* A test pattern for worker w: n floats. */
static void pattern(float *p, size_t n, int w)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(w * 1000 + (int)i) + 0.5f;
}

/* Syncs workers 1..N-1, each until it answers DISCO_OK, and gathers the
 * failures reported on the way (a sync reports every worker's failure
 * posted by then, so which sync reports which is timing): each returns
 * want; their details go into all (cap bytes). Returns how many came. */
static int sync_collect(disco_session_t *s, disco_status_t want, char *all, size_t cap)
{
    int n = 0;
    size_t used = 0;
    all[0] = '\0';
    for (int w = 1; w < disco_session_num_workers(s); w++) {
        disco_status_t st;
        while ((st = disco_session_sync(s, w)) != DISCO_OK) {
            ck_assert_msg(st == want && n < 64, "sync %d: %s (%s)", w, disco_err_name(st),
                          disco_last_error());
            int k = snprintf(all + used, cap - used, "%s; ", disco_last_error());
            used += k > 0 && (size_t)k < cap - used ? (size_t)k : 0;
            n++;
        }
    }
    return n;
}

/* Asserts that the gathered details mention text. */
#define CK_ALL_HAS(all, text)                                                                      \
    ck_assert_msg(strstr((all), (text)) != NULL, "\"%s\" lacks \"%s\"", (all), (text))

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
        int64_t st[6];
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
 * (DISCO_E_MISMATCH naming the worker) and the session stays usable. */
START_TEST(test_debug_get_set)
{
    DLDeviceType type = type_of(_i, 6);
    NEED_DEVICE(type);
    disco_session_t *s = open_for(type, _i % 6);
    int world = disco_session_num_workers(s);
    enum { N = 256 };
    int64_t shape[1] = {N};
    disco_dref_t r;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &r));
    static float p[N];
    for (int w = 0; w < world; w++) {
        pattern(p, N, w);
        disco_value_t b = disco_value_bytes((const char *)p, sizeof p);
        CK_OK(disco_session_debug_set(s, r, w, &b));
    }
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
    int64_t st[6];
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

/* Open file descriptors and shared mappings of this process. */
static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static int count_memfd_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, "memfd:") != NULL;
    fclose(f);
    return n;
}

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

/* A device tensor is refused by send_recv (not supported yet) with a clear
 * error, not read as host memory. */
START_TEST(test_collective_refuses_device)
{
    NEED_DEVICE(kDLExtDev);
    disco_session_t *s = open_for(kDLExtDev, 0);
    int64_t shape[1] = {16};
    disco_dref_t r, out;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLExtDev, 0}, false, &r));
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = r}, disco_value_int(0), disco_value_int(1)};
    CK_OK(disco_session_call_by_name(s, "disco.send_recv", args, 3, &out));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_MISMATCH);
    CK_HAS("device");
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    disco_session_close(s);
}
END_TEST

/* Calls collective name(x, false) and returns its result register. */
static disco_dref_t coll(disco_session_t *s, const char *name, disco_dref_t x)
{
    disco_value_t args[2] = {{.type = DISCO_T_DREF, .v.reg = x}, disco_value_bool(false)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, name, args, 2, &r));
    return r;
}

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
    int64_t shape[1] = {N};
    disco_dref_t x;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &x));
    static float p[N], all[4 * N];
    for (int w = 0; w < world; w++) {
        pattern(p, N, w);
        memcpy(all + w * N, p, sizeof p);
        disco_value_t b = disco_value_bytes((const char *)p, sizeof p);
        CK_OK(disco_session_debug_set(s, x, w, &b));
    }
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
            int64_t st[6];
            arena_stats(s, w, st);
            ck_assert_int_eq(st[3], world - 1); /* every peer's arena, opened once */
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
    int64_t st[6];
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

/* A process has one IPC lifetime table: while one session holds device
 * tensors, another session's first device tensor fails on worker 0 with
 * DISCO_E_INVAL saying so (that session stays usable); once the first
 * session is closed, the second can make them. */
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
    tcase_add_loop_test(tc, test_debug_get_set, 0, 12);
    tcase_add_loop_test(tc, test_kill_register_frees, 0, 12);
    tcase_add_loop_test(tc, test_close_releases, 0, 6);
    tcase_add_loop_test(tc, test_no_device, 0, 6);
    tcase_add_test(tc, test_bad_device_type);
    tcase_add_loop_test(tc, test_arena_full, 0, 6);
    tcase_add_test(tc, test_arena_alloc_fails);
    tcase_add_test(tc, test_wrong_device);
    tcase_add_test(tc, test_collective_refuses_device);
    tcase_add_loop_test(tc, test_device_collectives, 0, 12);
    tcase_add_loop_test(tc, test_death_with_imports, 0, 6);
    tcase_add_test(tc, test_two_sessions);
    suite_add_tcase(s, tc);
    return s;
}
