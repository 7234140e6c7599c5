/* gpu_session_util.h - shared by the gpu_session suites (test_gpu_session.c,
 * test_gpu_session_coll.c): which device a test runs on, session geometry,
 * and small probes (arena stats, fds, memfd mappings). Header-only, static. */
#ifndef DISCO_TESTS_GPU_SESSION_UTIL_H
#define DISCO_TESTS_GPU_SESSION_UTIL_H

#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/clock.h"
#include "disco/device.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "tests/testutil.h"

#define SIM_GPUS "2"
#define NSIM     2

/* ---- which device a test runs on ---- */

static inline int gpu_required(void)
{
    const char *v = getenv("DISCO_REQUIRE_GPU");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Number of CUDA GPUs, probed in a forked child: a process that has
 * initialized CUDA cannot fork workers that use it. 0 with why filled. */
static inline int cuda_count(char *why, size_t cap)
{
    int n = 0;
    if (disco_device_probe(kDLCUDA, &n) != DISCO_OK) {
        snprintf(why, cap, "%s", disco_last_error());
        return 0;
    }
    snprintf(why, cap, "%d CUDA devices", n);
    return n;
}

/* The device type of loop index i (sim for the first half). */
static inline DLDeviceType type_of(int i, int nsim)
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
static inline disco_session_config_t cfg_of(int i)
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
static inline disco_session_t *open_for(DLDeviceType type, int i)
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

/* disco.arena_stats on worker w: [bytes, used, blocks, peers, type, id,
 * events, one-shot allreduce kernels, two-shot ones] (its first 9; the
 * 10th, allreduces staged through host memory: arena_staged). */
static inline void arena_stats(disco_session_t *s, int w, int64_t out[9])
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.arena_stats", NULL, 0, &r));
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_int_eq(v.type, DISCO_T_SHAPE);
    ck_assert_uint_eq(v.len, 10);
    memcpy(out, v.v.shape, 9 * sizeof *out);
    disco_value_clear(&v);
    CK_OK(disco_session_free_reg(s, r));
}

/* disco.arena_stats' 10th number on worker w: its allreduces staged through
 * host memory (docs/gpu-sharing.md). */
static inline int64_t arena_staged(disco_session_t *s, int w)
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.arena_stats", NULL, 0, &r));
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_int_eq(v.type, DISCO_T_SHAPE);
    ck_assert_uint_eq(v.len, 10);
    int64_t n = v.v.shape[9];
    disco_value_clear(&v);
    CK_OK(disco_session_free_reg(s, r));
    return n;
}

/* Asserts that register r of worker w holds exactly the len bytes at want
 * (debug_get); what names the case in the failure. */
static inline void expect_bytes(disco_session_t *s, disco_dref_t r, int w, const void *want,
                                size_t len, const char *what)
{
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_msg(v.len == len, "%s, worker %d: %u bytes, want %zu", what, w, v.len, len);
    ck_assert_msg(memcmp(v.v.bytes, want, len) == 0, "%s, worker %d: other bytes", what, w);
    disco_value_clear(&v);
}

/* A test pattern for worker w: n floats. */
static inline void pattern(float *p, size_t n, int w)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(w * 1000 + (int)i) + 0.5f;
}

/* A new register of n float32 on every worker's device of type type,
 * worker w's tensor holding pattern(w) (written with debug_set). */
static inline disco_dref_t patterned(disco_session_t *s, DLDeviceType type, size_t n)
{
    int64_t shape[1] = {(int64_t)n};
    disco_dref_t x;
    CK_OK(disco_session_empty_device(s, shape, 1, F32, (DLDevice){type, 0}, false, &x));
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        pattern(p, n, w);
        disco_value_t b = disco_value_bytes((const char *)p, (uint32_t)(n * sizeof *p));
        CK_OK(disco_session_debug_set(s, x, w, &b));
    }
    free(p);
    return x;
}

/* Syncs workers 1..N-1, each until it answers DISCO_OK, and gathers the
 * failures reported on the way (a sync reports every worker's failure
 * posted by then, so which sync reports which is timing): each returns
 * want; their details go into all (cap bytes). Returns how many came. */
static inline int sync_collect(disco_session_t *s, disco_status_t want, char *all, size_t cap)
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

/* Open file descriptors and shared mappings of this process. */
static inline int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static inline int count_memfd_maps(void)
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

/* Calls collective name(x, in_group) and returns its result register. */
static inline disco_dref_t coll_in(disco_session_t *s, const char *name, disco_dref_t x,
                                   bool in_group)
{
    disco_value_t args[2] = {{.type = DISCO_T_DREF, .v.reg = x}, disco_value_bool(in_group)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, name, args, 2, &r));
    return r;
}

/* Calls collective name(x, false) over the whole world. */
static inline disco_dref_t coll(disco_session_t *s, const char *name, disco_dref_t x)
{
    return coll_in(s, name, x, false);
}

/* ---- a worker killed in the middle of a call ---- */

struct killer {
    pid_t pid;
    int ms;
};

static inline void *kill_later(void *arg)
{
    const struct killer *k = arg;
    struct timespec d = {0, (long)k->ms * 1000000};
    nanosleep(&d, NULL);
    kill(k->pid, SIGKILL);
    return NULL;
}

/* Kills worker victim 100 ms after calling name(args) over the session,
 * which is slowed down enough for the kill to land inside it: the call, a
 * sync of a worker, or at the latest the next sync of the victim fails
 * with DISCO_E_WORKER_DIED naming the victim, within 30 s (no hang). */
static inline void expect_death_during(disco_session_t *s, const char *name,
                                       const disco_value_t *args, int nargs, int victim)
{
    int world = disco_session_num_workers(s);
    struct killer k = {disco_session_worker_pid(s, victim), 100};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, kill_later, &k), 0);
    int64_t t0 = disco_now_ns();
    disco_dref_t r;
    disco_status_t st = disco_session_call_by_name(s, name, args, nargs, &r);
    for (int w = 0; w < world && st == DISCO_OK; w++)
        st = disco_session_sync(s, w);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    while (st == DISCO_OK) /* the kill came after every sync: the next one finds it */
        st = disco_session_sync(s, victim);
    CK_STATUS(st, DISCO_E_WORKER_DIED);
    char want[32];
    snprintf(want, sizeof want, "worker %d", victim);
    CK_HAS(want);
    ck_assert_msg(disco_now_ns() - t0 < 30 * 1000000000LL, "took %lld ms",
                  (long long)((disco_now_ns() - t0) / 1000000));
}

#endif
