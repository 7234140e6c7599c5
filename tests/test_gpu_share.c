/* test_gpu_share.c - workers that share one GPU (docs/gpu-sharing.md):
 * physical identities and MPS detection; the allreduce's route (kernels
 * that meet only where no two workers share a device without MPS, else
 * staged through host memory), on the sim device with fewer devices than
 * workers; and the sim's time slices, which catch kernels that need to be
 * co-resident when they are forced onto a shared device without MPS. */
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "disco/clock.h"
#include "tests/gpu_session_util.h"
#include "workers/device/share.h"
#include "workers/device/sim.h"
#include "workers/device/watch.h"

/* ---- identities and MPS (no session) ---- */

/* Sim devices have distinct identities, the same for the same index; CPU
 * names itself; an index out of range is refused. */
START_TEST(test_physical_ids)
{
    CK_OK(disco_device_sim_set_count(2));
    disco_device_uid_t a, b, a2, c;
    CK_OK(disco_device_physical_id((DLDevice){kDLExtDev, 0}, &a));
    CK_OK(disco_device_physical_id((DLDevice){kDLExtDev, 1}, &b));
    CK_OK(disco_device_physical_id((DLDevice){kDLExtDev, 0}, &a2));
    ck_assert(memcmp(&a, &b, sizeof a) != 0);
    ck_assert(memcmp(&a, &a2, sizeof a) == 0);
    CK_OK(disco_device_physical_id((DLDevice){kDLCPU, 0}, &c));
    ck_assert(memcmp(c.bytes, "cpu", 3) == 0);
    CK_STATUS(disco_device_physical_id((DLDevice){kDLExtDev, 2}, &c), DISCO_E_NO_DEVICE);
    CK_HAS("no such device");
    /* The CUDA half: a GPU's UUID, the same at every ask and neither the
     * sim's nor the CPU's; without a GPU it skips (saying "no CUDA device",
     * so the GPU kit counts this suite's GPU part as skipped), or fails
     * under DISCO_REQUIRE_GPU=1. */
    char why[256];
    if (cuda_count(why, sizeof why) > 0) {
        disco_device_uid_t g, g2;
        CK_OK(disco_device_physical_id((DLDevice){kDLCUDA, 0}, &g));
        CK_OK(disco_device_physical_id((DLDevice){kDLCUDA, 0}, &g2));
        ck_assert(memcmp(&g, &g2, sizeof g) == 0);
        ck_assert(memcmp(&g, &a, sizeof g) != 0 && memcmp(g.bytes, "cpu", 3) != 0);
        return;
    }
    ck_assert_msg(!gpu_required(), "%s: DISCO_REQUIRE_GPU is set, no GPU: no CUDA device: %s",
                  __func__, why);
    printf("%s: skipped: no CUDA device (its CUDA half): %s\n", __func__, why);
    if (!disco_device_has_cuda()) {
        CK_STATUS(disco_device_physical_id((DLDevice){kDLCUDA, 0}, &c), DISCO_E_NO_DEVICE);
        CK_HAS("no CUDA device");
    }
}
END_TEST

/* MPS: the sim machine's switch (DISCO_SIM_MPS), the user's word over any
 * detection (DISCO_GPU_MPS=1/0), CUDA's daemon pipe (a FIFO "control" in
 * CUDA_MPS_PIPE_DIRECTORY; a plain file there is not one). */
START_TEST(test_mps_detection)
{
    CK_OK(disco_device_sim_set_count(1));
    DLDevice sim = {kDLExtDev, 0};
    bool on = true;
    unsetenv("DISCO_SIM_MPS");
    unsetenv("DISCO_GPU_MPS");
    CK_OK(disco_device_mps(sim, &on));
    ck_assert(!on);
    setenv("DISCO_SIM_MPS", "1", 1);
    CK_OK(disco_device_mps(sim, &on));
    ck_assert(on);
    setenv("DISCO_GPU_MPS", "0", 1);
    CK_OK(disco_device_mps(sim, &on));
    ck_assert(!on);
    unsetenv("DISCO_SIM_MPS");
    setenv("DISCO_GPU_MPS", "1", 1);
    CK_OK(disco_device_mps(sim, &on));
    ck_assert(on);
    unsetenv("DISCO_GPU_MPS");

    char dir[] = "/tmp/disco-mps-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
    ck_assert(!disco__mps_pipe_found());
    snprintf(path, sizeof path, "%s/control", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert(!disco__mps_pipe_found()); /* a plain file: no daemon */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert(disco__mps_pipe_found());
    if (disco_device_has_cuda()) { /* the pipe alone: no CUDA call */
        CK_OK(disco_device_mps((DLDevice){kDLCUDA, 0}, &on));
        ck_assert(on);
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- sessions on sim devices ---- */

/* Opens a session of world workers (groups groups) on gpus sim devices. */
static disco_session_t *open_shared(int gpus, int world, int groups, bool spawn,
                                    uint32_t timeout_ms)
{
    char n[8];
    snprintf(n, sizeof n, "%d", gpus);
    setenv("DISCO_SIM_GPUS", n, 1); /* spawned workers read it */
    CK_OK(disco_device_sim_set_count(gpus));
    disco_session_config_t c = disco_session_config_default(world);
    c.num_groups = groups;
    c.call_timeout_ms = timeout_ms;
    c.device_arena_bytes = 8u << 20;
    c.max_msg = 2u << 20;
    if (spawn) {
        c.launch = DISCO_LAUNCH_SPAWN;
        c.worker_path = DISCO_TEST_WORKER;
    }
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    return s;
}

/* Element i of worker w's input. */
static float value_of(int w, size_t i)
{
    return (float)(w * 1000 + (int)(i % 977));
}

/* An allreduce (sum, in groups when groups > 1) of n float32 per worker;
 * every member's result checked; returns the call's status (the result
 * checked only on success) and its milliseconds in *ms. */
static disco_status_t allreduce_checked(disco_session_t *s, size_t n, int groups, int64_t *ms)
{
    int world = disco_session_num_workers(s), gsize = world / groups;
    int64_t shape[1] = {(int64_t)n};
    disco_dref_t x, r;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){kDLExtDev, 0}, false, &x));
    float *v = malloc(n * sizeof *v), *want = malloc(n * sizeof *want);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(want);
    for (int w = 0; w < world; w++) {
        for (size_t i = 0; i < n; i++)
            v[i] = value_of(w, i);
        disco_value_t b = disco_value_bytes((const char *)v, (uint32_t)(n * sizeof *v));
        CK_OK(disco_session_debug_set(s, x, w, &b));
        CK_OK(disco_session_sync(s, w));
    }
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(groups > 1)};
    int64_t t0 = disco_now_ns();
    disco_status_t st = disco_session_call_by_name(s, "disco.allreduce", args, 3, &r);
    for (int w = 0; w < world && st == DISCO_OK; w++)
        st = disco_session_sync(s, w);
    *ms = (disco_now_ns() - t0) / 1000000;
    for (int w = 0; w < world && st == DISCO_OK; w++) {
        int g0 = w / gsize * gsize;
        for (size_t i = 0; i < n; i++) {
            want[i] = 0;
            for (int m = g0; m < g0 + gsize; m++)
                want[i] += value_of(m, i);
        }
        expect_bytes(s, r, w, want, n * sizeof *want, "allreduce on shared sim devices");
    }
    if (st == DISCO_OK)
        CK_OK(disco_session_free_reg(s, r));
    free(v);
    free(want);
    return st;
}

/* How the calls of every worker went: kernels (one-shot + two-shot) and
 * staged, each n. */
static void expect_route(disco_session_t *s, int64_t kernels, int64_t staged, const char *why)
{
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        int64_t st[9];
        arena_stats(s, w, st);
        int64_t k = st[7] + st[8], g = arena_staged(s, w);
        ck_assert_msg(k == kernels && g == staged,
                      "%s: worker %d ran %lld allreduce kernels and staged %lld, want %lld and "
                      "%lld",
                      why, w, (long long)k, (long long)g, (long long)kernels, (long long)staged);
    }
}

/* The route cases: sim devices, workers, groups, spawn, the environment,
 * and whether the kernels run. */
struct route_case {
    int gpus, world, groups;
    bool spawn;
    const char *sim_mps, *gpu_mps, *path;
    bool kernels;
    const char *why;
};

static const struct route_case ROUTES[] = {
    {1, 2, 1, false, NULL, NULL, NULL, false, "2 workers on 1 device, no MPS"},
    {1, 3, 1, true, NULL, NULL, NULL, false, "3 spawned workers on 1 device, no MPS"},
    {2, 2, 1, false, NULL, NULL, NULL, true, "a device each"},
    {4, 4, 2, false, NULL, NULL, NULL, true, "a device each, groups"},
    {1, 2, 1, false, "1", NULL, NULL, true, "1 device under MPS"},
    {2, 3, 1, true, "1", NULL, NULL, true, "3 spawned on 2 devices under MPS"},
    {1, 2, 1, false, "1", "0", NULL, false, "MPS declared off by the user"},
    {2, 4, 2, false, NULL, NULL, NULL, false, "groups apart, other groups on their devices"},
    {2, 2, 1, false, NULL, NULL, "staged", false, "DISCO_AR_PATH=staged"},
    {1, 2, 1, false, NULL, "1", "auto", true, "MPS declared on by the user"},
};
#define NROUTES (int)(sizeof ROUTES / sizeof ROUTES[0])

static void set_or_unset(const char *name, const char *v)
{
    if (v != NULL)
        setenv(name, v, 1);
    else
        unsetenv(name);
}

/* Each case's allreduces (one-shot and two-shot sizes) are exact on every
 * member, and take the route the case's sharing says: kernels only where
 * no two workers share a device without MPS. */
START_TEST(test_route)
{
    NEED_DEVICE(kDLExtDev);
    const struct route_case *k = &ROUTES[_i];
    set_or_unset("DISCO_SIM_MPS", k->sim_mps);
    set_or_unset("DISCO_GPU_MPS", k->gpu_mps);
    set_or_unset("DISCO_AR_PATH", k->path);
    setenv("DISCO_SIM_SLICE_US", "500", 1); /* where kernels share a device: quick slices */
    disco_session_t *s = open_shared(k->gpus, k->world, k->groups, k->spawn, 60000);
    int64_t ms;
    CK_OK(allreduce_checked(s, 1000, k->groups, &ms));       /* one-shot */
    CK_OK(allreduce_checked(s, 240u << 10, k->groups, &ms)); /* two-shot: 960 KiB */
    expect_route(s, k->kernels ? 2 : 0, k->kernels ? 0 : 2, k->why);
    disco_session_close(s);
}
END_TEST

/* ---- time slices: kernels forced onto a shared device without MPS ---- */

/* The user declares MPS (DISCO_GPU_MPS=1) where the simulated machine runs
 * none: the kernels run, 2 workers on 1 device, in time slices of 20 ms.
 * The kernel that starts first waits for the other's, which cannot start
 * before the first hands the device over: the call takes a slice at least,
 * and the device counts its context switches; the sums are exact. Under
 * the machine's MPS (DISCO_SIM_MPS=1) no switch happens. */
START_TEST(test_slices_advance_per_switch)
{
    NEED_DEVICE(kDLExtDev);
    bool mps = _i == 1;
    setenv("DISCO_GPU_MPS", "1", 1);
    set_or_unset("DISCO_SIM_MPS", mps ? "1" : NULL);
    setenv("DISCO_SIM_SLICE_US", "20000", 1);
    disco_session_t *s = open_shared(1, 2, 1, false, 60000);
    int64_t ms;
    CK_OK(allreduce_checked(s, 1000, 1, &ms));
    expect_route(s, 1, 0, "MPS declared");
    uint32_t sw = disco__sim_slice_switches(0);
    if (mps) {
        ck_assert_msg(sw == 0, "%u context switches under MPS", sw);
    } else {
        ck_assert_msg(sw >= 1, "no context switch on a shared device without MPS");
        ck_assert_msg(ms >= 20, "the call took %lld ms, less than a slice", (long long)ms);
    }
    disco_session_close(s);
}
END_TEST

/* The same with slices of a second and a 3 s deadline, over a message of
 * 15 pieces (each meets at least once more): the call fails within the
 * deadline, not after the tens of seconds the slices would take, and the
 * error says the device is time-sliced between processes without MPS. */
START_TEST(test_slices_caught_at_deadline)
{
    NEED_DEVICE(kDLExtDev);
    setenv("DISCO_GPU_MPS", "1", 1);
    unsetenv("DISCO_SIM_MPS");
    setenv("DISCO_SIM_SLICE_US", "1000000", 1);
    setenv("DISCO_AR_TWO_SHOT_BYTES", "1099511627776", 1); /* one-shot: 15 pieces */
    disco_session_t *s = open_shared(1, 2, 1, _i == 1, 3000);
    int64_t ms;
    disco_status_t st = allreduce_checked(s, 240u << 10, 1, &ms);
    ck_assert_msg(st != DISCO_OK, "the call succeeded in %lld ms", (long long)ms);
    CK_HAS("without MPS");
    ck_assert_msg(ms < 8000, "the call failed after %lld ms, deadline 3000", (long long)ms);
    disco_session_close(s);
}
END_TEST

/* The hand-over at a slice's end, without a session (sim_slice.c, C4): a
 * kernel of another process (a child) holds the device and waits for ever,
 * yielding; this process's kernel asks for the device and gets it at the
 * child's slice end. At once its deadline passes: the child's kernel is on
 * its way back to the device (its hand-over loop), not yet asking again,
 * and still the kernel's wait must end saying the device is time-sliced
 * without MPS. Before C4 the child counted itself as a waiter only once it
 * asked again, so here the wait went on as if nobody else wanted the device
 * and the caller's next look at the deadline said only that it passed: the
 * flake of test_slices_caught_at_deadline (its deadline falls at a slice's
 * end: 3 slices of 1 s). */
START_TEST(test_slices_handover_counted)
{
    unsetenv("DISCO_SIM_MPS");
    setenv("DISCO_SIM_SLICE_US", "20000", 1);
    size_t bytes = disco__sim_slices_bytes();
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(mem, MAP_FAILED);
    int held[2];
    ck_assert_int_eq(pipe(held), 0);
    pid_t other = fork();
    ck_assert_int_ge(other, 0);
    if (other == 0) { /* the other process's kernel: holds sim:0, then waits for ever */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        disco__sim_slices_bind(mem);
        if (disco__sim_slice_enter(0) != DISCO_OK || write(held[1], "h", 1) != 1)
            _exit(1);
        for (;;) {
            (void)disco__sim_slice_yield();
            struct timespec ms = {0, 1000 * 1000};
            nanosleep(&ms, NULL);
        }
    }
    char c;
    ck_assert_int_eq(read(held[0], &c, 1), 1);
    disco__sim_slices_bind(mem);
    /* Waits (counted) until the other's slice ends and it hands sim:0 over. */
    disco_status_t entered = disco__sim_slice_enter(0);
    disco_wait_t w = {.deadline_ns = disco_now_ns()}; /* passed */
    const disco_wait_t *old = disco__device_watch(&w);
    disco_status_t st = entered == DISCO_OK ? disco__sim_slice_yield() : entered;
    char why[512];
    snprintf(why, sizeof why, "%s", disco_last_error());
    disco__device_watch(old);
    disco__sim_slice_leave();
    uint32_t switches = disco__sim_slice_switches(0); /* after leave: enter holds the binding */
    kill(other, SIGKILL);
    ck_assert_int_eq(waitpid(other, NULL, 0), other);
    disco__sim_slices_bind(NULL);
    munmap(mem, bytes);
    close(held[0]);
    close(held[1]);
    CK_OK(entered);
    ck_assert_msg(switches == 1, "%u context switches, want the one hand-over", switches);
    ck_assert_msg(st == DISCO_E_TIMEOUT,
                  "the kernel's wait went on past its deadline (%s) while the other process's "
                  "kernel waits for the device",
                  disco_err_name(st));
    ck_assert_msg(strstr(why, "without MPS") != NULL, "detail \"%s\" lacks \"without MPS\"", why);
}
END_TEST

Suite *suite_gpu_share(void)
{
    Suite *s = suite_create("gpu_share");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_physical_ids);
    tcase_add_test(tc, test_mps_detection);
    tcase_add_loop_test(tc, test_route, 0, NROUTES);
    tcase_add_loop_test(tc, test_slices_advance_per_switch, 0, 2);
    tcase_add_loop_test(tc, test_slices_caught_at_deadline, 0, 2);
    tcase_add_test(tc, test_slices_handover_counted);
    suite_add_tcase(s, tc);
    return s;
}
