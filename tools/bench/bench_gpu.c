/* bench_gpu.c - disco-bench's GPU figures, each beside a baseline measured
 * in the same run, all through disco's public API:
 *
 *   ipc_open_us_first    disco_device_ipc_import of a peer's allocation that
 *                        opens its handle (cudaIpcOpenMemHandle); released
 *                        after each, so each import opens again
 *   ipc_open_us_cached   the same import while the process holds one already
 *                        (the cached mapping; a reference counted)
 *   gpu_allreduce_us_<size>_<dtype>_n<N>  disco.allreduce (sum) of device
 *                        tensors + sync of every worker; size 512B, 32KiB,
 *                        1MiB, 64MiB; dtype f16, f32; N = 2, 4: the
 *                        allreduce kernels (workers/device/ar.h), one-shot
 *                        or two-shot as the default switch point says.
 *   gpu_allreduce_{oneshot,twoshot}_us_<size>_n<N>  the same (f16) forced
 *                        one way, size 8KiB to 32MiB by 4x; and
 *   gpu_allreduce_switch_bytes_n<N>  the smallest of those sizes from which
 *                        two-shot is faster at every larger one (0: never):
 *                        what DISCO_AR_TWO_SHOT_BYTES should be.
 *   <figure>_path        for each allreduce figure: the path its calls took
 *                        (worker 0's disco.arena_stats counts), a note in
 *                        bench.json's "notes" and a printed line:
 *                        kernel-one-shot, kernel-two-shot, or staged (through
 *                        host memory: the workers share a GPU without MPS,
 *                        docs/gpu-sharing.md); for the switch point, the
 *                        paths of the two scans.
 *   gpu_memcpy_allreduce_us_<size>_n<N>  baseline: the copies a gather to
 *                        one buffer and a broadcast back make on one device,
 *                        2 (N - 1) device-to-device copies of <size> queued
 *                        on one stream + its sync, in the controller (no
 *                        add: a bound from below on a memcpy allreduce)
 *   gpu_copy_to_worker0_gbps    copy_into_worker0 of 64 MiB from pageable
 *                        host memory onto worker 0's device (synced)
 *   gpu_copy_from_worker0_gbps  copy_from_worker0 of the same, back
 *   gpu_memcpy_h2d_gbps, gpu_memcpy_d2h_gbps  baselines: disco_device_copy
 *                        (cudaMemcpyAsync + sync) of the same bytes between
 *                        the same host buffer and a device buffer
 *   gpu_d2d_peer_gbps    broadcast_from_worker0 of 64 MiB with 2 workers:
 *                        worker 1 copies it out of worker 0's arena (a peer's
 *                        arena, imported) into its own; call + sync timed
 *   gpu_memcpy_d2d_gbps  baseline: device-to-device copy of 64 MiB on one
 *                        device, in the controller
 *   gpu_call_sync_ns     a no-op call on every worker + sync worker 1, 2
 *                        spawned workers each holding a device arena
 *   call_sync_spawn_ns   baseline: the same session with no device memory
 *
 * Processes. A process that has called CUDA must not fork workers that use
 * CUDA: the GPU count is probed in a forked child, the IPC figures are
 * taken by two forked children before this process touches CUDA, and every
 * session spawns its workers (DISCO_LAUNCH_SPAWN). Worker 0, the
 * controller, then holds a CUDA context of its own.
 *
 * Without a GPU the section prints one line, "GPU: skipped: no CUDA device
 * (<why>)", and records nothing. With --device sim it runs the same code on
 * the simulated device, at smoke sizes (N = 2; 512 B and 32 KiB; copies of
 * 64 KiB), and prints each figure marked SIM without recording it: no sim
 * figure is a GPU figure, none reaches the table or bench.json. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "disco/device.h"
#include "disco/session.h"
#include "disco/tensor.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static struct {
    bool sim;
    DLDeviceType type;
    DLDevice dev; /* the controller's (worker 0's) device */
    const size_t *sizes;
    int nsizes;
    const int *workers;
    int nworkers;
    size_t copy_bytes;
} g;

static const size_t gpu_sizes[] = {512, 32 * KIB, MIB, 64 * MIB};
static const char *const gpu_size_names[] = {"512B", "32KiB", "1MiB", "64MiB"};
static const int gpu_workers[] = {2, 4};
static const int sim_workers[] = {2};
static const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1};

/* ---- figures: recorded on a GPU, printed as SIM on the sim device ---- */

/* record() keeps the key's pointer: keys made here live in this pool. */
static const char *key(const char *fmt, ...)
{
    static char pool[128][48];
    static int used;
    if (used == (int)(sizeof pool / sizeof pool[0]))
        bu_die("bench_gpu: too many keys");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pool[used], sizeof pool[used], fmt, ap);
    va_end(ap);
    return pool[used++];
}

static void figure(const char *k, double value, const char *unit)
{
    if (!g.sim) {
        record(k, value, unit);
        return;
    }
    printf("  SIM %-32s %12.1f %-4s (sim device: not a GPU figure, not recorded)\n", k, value,
           unit);
    fflush(stdout);
}

static disco_value_t dref(disco_dref_t r)
{
    disco_value_t v = {.type = DISCO_T_DREF, .v.reg = r};
    return v;
}

/* ---- which path an allreduce took (docs/gpu-sharing.md) ---- */

/* The allreduces worker 0 ran so far: one-shot kernels, two-shot kernels,
 * staged through host memory (disco.arena_stats' numbers 7 to 9). */
static void ar_counts(disco_session_t *s, int64_t out[3])
{
    disco_dref_t r;
    disco_value_t v;
    bu_check(disco_session_call_by_name(s, "disco.arena_stats", NULL, 0, &r), "arena_stats");
    bu_check(disco_session_debug_get(s, r, 0, &v), "arena_stats");
    if (v.type != DISCO_T_SHAPE || v.len < 10)
        bu_die("disco.arena_stats: no allreduce counts");
    memcpy(out, v.v.shape + 7, 3 * sizeof *out);
    disco_value_clear(&v);
    bu_check(disco_session_free_reg(s, r), "free");
}

/* The path of the calls between two counts: one name, or "mixed". */
static const char *path_between(const int64_t before[3], const int64_t after[3])
{
    static const char *const names[3] = {"kernel-one-shot", "kernel-two-shot", "staged"};
    int which = -1;
    for (int i = 0; i < 3; i++) {
        if (after[i] == before[i])
            continue;
        if (which >= 0)
            return "mixed";
        which = i;
    }
    return which < 0 ? "none" : names[which];
}

/* Names the path figure k took: a note beside the figures (GPU), and a
 * line either way. */
static void path_of(const char *k, const char *path)
{
    const char *pk = key("%s_path", k);
    if (!g.sim)
        bench_note(pk, path);
    printf("  %s%-32s %s\n", g.sim ? "SIM " : "", pk, path);
    fflush(stdout);
}

/* ---- is there a device? ---- */

/* The number of devices of g.type, asked in a forked child (for CUDA: this
 * process must not initialize it yet); 0 with why filled. */
static int probe_count(char *why, size_t cap)
{
    int n = 0;
    if (disco_device_probe(g.type, &n) != DISCO_OK) {
        snprintf(why, cap, "%s", disco_last_error());
        return 0;
    }
    return n;
}

/* ---- sessions ---- */

static disco_session_t *open_spawned(int n, uint64_t arena_bytes)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.launch = DISCO_LAUNCH_SPAWN; /* the controller holds a CUDA context */
    cfg.call_timeout_ms = 60000;
    cfg.device_arena_bytes = arena_bytes;
    disco_session_t *s;
    bu_unpin();
    bu_check(disco_session_open(&cfg, &s), "open session (spawned)");
    return s;
}

/* A device tensor of bytes on every worker, each element 1 (dtype dt):
 * worker 0's copied from the host, the others' broadcast from it. */
static disco_dref_t ones(disco_session_t *s, size_t bytes, DLDataType dt)
{
    size_t esz = dt.bits / 8;
    int64_t n = (int64_t)(bytes / esz);
    unsigned char *h = bench_xmalloc(bytes);
    for (int64_t i = 0; i < n; i++) {
        if (dt.bits == 16)
            memcpy(h + i * 2, &(uint16_t){0x3C00}, 2); /* 1.0 in IEEE half */
        else
            memcpy(h + i * 4, &(float){1.0f}, 4);
    }
    DLTensor t = {.data = h, .device = {kDLCPU, 0}, .ndim = 1, .dtype = dt, .shape = &n};
    disco_dref_t x0, x;
    bu_check(disco_session_empty_device(s, &n, 1, dt, g.dev, true, &x0), "empty_device");
    bu_check(disco_session_copy_into_worker0(s, &t, x0), "copy_into_worker0 (input)");
    disco_value_t a[2] = {dref(x0), disco_value_bool(false)};
    bu_check(disco_session_call_by_name(s, "disco.broadcast_from_worker0", a, 2, &x),
             "broadcast_from_worker0 (input)");
    bu_check(disco_session_free_reg(s, x0), "free");
    for (int w = 1; w < disco_session_num_workers(s); w++)
        bu_check(disco_session_sync(s, w), "sync (input)");
    free(h);
    return x;
}

static void sync_all(disco_session_t *s)
{
    for (int w = 1; w < disco_session_num_workers(s); w++)
        bu_check(disco_session_sync(s, w), "sync");
}

typedef struct coll_ctx {
    disco_session_t *s;
    disco_dref_t func;
    disco_value_t args[3];
    int nargs;
    const char *what;
} coll_ctx_t;

/* One round: the collective + a sync of every worker, timed; freeing the
 * result (and a sync) untimed, so the arena hands the next round the same
 * piece. */
static int64_t coll_rounds(void *p, uint64_t iters)
{
    coll_ctx_t *c = p;
    int64_t total = 0;
    for (uint64_t i = 0; i < iters; i++) {
        disco_dref_t res;
        int64_t t0 = disco_now_ns();
        bu_check(disco_session_call(c->s, c->func, c->args, c->nargs, &res), c->what);
        sync_all(c->s);
        total += disco_now_ns() - t0;
        bu_check(disco_session_free_reg(c->s, res), "free");
        sync_all(c->s);
    }
    return total;
}

/* Checks once, untimed, that the allreduce of ones gives n everywhere on
 * worker 0. */
static void check_allreduce(coll_ctx_t *c, size_t bytes, DLDataType dt, int n)
{
    int64_t cnt = (int64_t)(bytes / (dt.bits / 8));
    unsigned char *h = bench_xmalloc(bytes);
    DLTensor t = {.data = h, .device = {kDLCPU, 0}, .ndim = 1, .dtype = dt, .shape = &cnt};
    disco_dref_t y;
    bu_check(disco_session_call(c->s, c->func, c->args, c->nargs, &y), "allreduce (check)");
    sync_all(c->s);
    bu_check(disco_session_copy_from_worker0(c->s, y, &t), "copy_from_worker0 (check)");
    uint16_t want16 = n == 2 ? 0x4000 : 0x4400; /* 2.0, 4.0 in IEEE half */
    for (int64_t i = 0; i < cnt; i++) {
        bool ok;
        if (dt.bits == 16) {
            uint16_t v;
            memcpy(&v, h + i * 2, 2);
            ok = v == want16;
        } else {
            float v;
            memcpy(&v, h + i * 4, 4);
            ok = v == (float)n;
        }
        if (!ok)
            bu_die("gpu allreduce of %zu bytes, %d workers: element %lld is wrong", bytes, n,
                   (long long)i);
    }
    bu_check(disco_session_free_reg(c->s, y), "free");
    sync_all(c->s);
    free(h);
}

/* ---- device copies in the controller (the baselines) ---- */

typedef struct mc_ctx {
    void *dst, *src;
    DLDevice dd, sd;
    size_t bytes;
    int copies; /* per round, all queued, then one sync */
} mc_ctx_t;

static int64_t memcpy_rounds(void *p, uint64_t iters)
{
    mc_ctx_t *c = p;
    DLDevice sync_dev = c->dd.device_type == kDLCPU ? c->sd : c->dd;
    int64_t t0 = disco_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        for (int k = 0; k < c->copies; k++)
            bu_check(disco_device_copy(c->dst, c->dd, c->src, c->sd, c->bytes, NULL),
                     "disco_device_copy");
        bu_check(disco_device_stream_sync(sync_dev, NULL), "stream_sync");
    }
    return disco_now_ns() - t0;
}

static int reps_for(size_t bytes)
{
    return bytes >= 64 * MIB ? bench_reps() : 10 * bench_reps();
}

static int warm_for(size_t bytes)
{
    return bytes >= 64 * MIB ? 3 : 20;
}

/* Median us of c's allreduce (sum) of bytes of ones (dtype dt) on n
 * workers, checked once first; the input is freed after. *path_out: the
 * path the calls took. */
static double time_allreduce(coll_ctx_t *c, size_t bytes, DLDataType dt, int n,
                             const char **path_out)
{
    disco_dref_t x = ones(c->s, bytes, dt);
    c->args[0] = dref(x);
    c->args[1] = disco_value_str("sum");
    c->args[2] = disco_value_bool(false);
    int64_t before[3], after[3];
    ar_counts(c->s, before);
    check_allreduce(c, bytes, dt, n);
    double ns = median_single(coll_rounds, c, warm_for(bytes), reps_for(bytes));
    ar_counts(c->s, after);
    *path_out = path_between(before, after);
    bu_check(disco_session_free_reg(c->s, x), "free");
    sync_all(c->s);
    return ns / 1e3;
}

static void bench_allreduce_n(int n)
{
    size_t max = g.sizes[g.nsizes - 1];
    disco_session_t *s = open_spawned(n, 2 * max + 4 * MIB);
    coll_ctx_t c = {.s = s, .nargs = 3, .what = "allreduce"};
    bu_check(disco_session_get_func(s, "disco.allreduce", &c.func), "get disco.allreduce");
    void *a, *b;
    bu_check(disco_device_alloc(g.dev, max, &a), "alloc (baseline)");
    bu_check(disco_device_alloc(g.dev, max, &b), "alloc (baseline)");
    for (int i = 0; i < g.nsizes; i++) {
        size_t bytes = g.sizes[i];
        for (int d = 0; d < 2; d++) {
            DLDataType dt = d == 0 ? f16 : f32;
            const char *path,
                *k = key("gpu_allreduce_us_%s_f%d_n%d", gpu_size_names[i], dt.bits, n);
            figure(k, time_allreduce(&c, bytes, dt, n, &path), "us");
            path_of(k, path);
        }
        mc_ctx_t m = {b, a, g.dev, g.dev, bytes, 2 * (n - 1)};
        double ns = median_single(memcpy_rounds, &m, warm_for(bytes), reps_for(bytes));
        figure(key("gpu_memcpy_allreduce_us_%s_n%d", gpu_size_names[i], n), ns / 1e3, "us");
    }
    bu_check(disco_device_free(g.dev, b), "free (baseline)");
    bu_check(disco_device_free(g.dev, a), "free (baseline)");
    bu_check(disco_session_free_reg(s, c.func), "free");
    disco_session_close(s);
}

/* ---- the switch point between one-shot and two-shot ---- */

static const size_t scan_sizes[] = {8 * KIB, 32 * KIB, 128 * KIB, 512 * KIB,
                                    2 * MIB, 8 * MIB,  32 * MIB};
static const char *const scan_names[] = {"8KiB", "32KiB", "128KiB", "512KiB",
                                         "2MiB", "8MiB",  "32MiB"};
#define NSCAN (int)(sizeof scan_sizes / sizeof scan_sizes[0])

/* Median us of an f16 sum allreduce of each scan size on n workers, every
 * call forced one way (DISCO_AR_TWO_SHOT_BYTES, read at each call by every
 * process: the session's workers inherit it). */
static void scan_mode(int n, bool two_shot, int nsizes, double *us, bool *staged)
{
    setenv("DISCO_AR_TWO_SHOT_BYTES", two_shot ? "0" : "1099511627776", 1);
    disco_session_t *s = open_spawned(n, 2 * scan_sizes[nsizes - 1] + 4 * MIB);
    coll_ctx_t c = {.s = s, .nargs = 3, .what = "allreduce"};
    bu_check(disco_session_get_func(s, "disco.allreduce", &c.func), "get disco.allreduce");
    for (int i = 0; i < nsizes; i++) {
        const char *path, *k = key("gpu_allreduce_%s_us_%s_n%d", two_shot ? "twoshot" : "oneshot",
                                   scan_names[i], n);
        us[i] = time_allreduce(&c, scan_sizes[i], f16, n, &path);
        figure(k, us[i], "us");
        path_of(k, path);
        *staged = *staged || strcmp(path, "staged") == 0;
    }
    bu_check(disco_session_free_reg(s, c.func), "free");
    disco_session_close(s);
    unsetenv("DISCO_AR_TWO_SHOT_BYTES");
}

/* Both ways over the scan sizes, and the switch point: the smallest size
 * from which two-shot is faster at every larger size (0: never). */
static void bench_switch_point(int n)
{
    int nsizes = g.sim ? 2 : NSCAN;
    double one[NSCAN], two[NSCAN];
    bool staged = false;
    scan_mode(n, false, nsizes, one, &staged);
    scan_mode(n, true, nsizes, two, &staged);
    double at = 0;
    for (int i = nsizes - 1; i >= 0 && two[i] < one[i]; i--)
        at = (double)scan_sizes[i];
    const char *k = key("gpu_allreduce_switch_bytes_n%d", n);
    figure(k, at, "B");
    /* Staged, the two scans time the same path: the point means nothing. */
    path_of(k, staged ? "staged (meaningless: no kernels ran)" : "kernels");
}

/* ---- copies to and from worker 0, and a peer's arena ---- */

typedef struct wcopy_ctx {
    disco_session_t *s;
    disco_dref_t reg;
    DLTensor host;
    bool to; /* to worker 0 (else from) */
} wcopy_ctx_t;

static int64_t wcopy_rounds(void *p, uint64_t iters)
{
    wcopy_ctx_t *c = p;
    int64_t t0 = disco_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        if (c->to)
            bu_check(disco_session_copy_into_worker0(c->s, &c->host, c->reg), "copy_into_worker0");
        else
            bu_check(disco_session_copy_from_worker0(c->s, c->reg, &c->host), "copy_from_worker0");
    }
    return disco_now_ns() - t0;
}

static void bench_copies(void)
{
    size_t bytes = g.copy_bytes;
    int reps = bench_reps();
    disco_session_t *s = open_spawned(2, 2 * bytes + 4 * MIB);
    int64_t n = (int64_t)(bytes / 4);
    void *h = bench_xmalloc(bytes), *d0, *d1;
    memset(h, 1, bytes);
    bu_check(disco_device_alloc(g.dev, bytes, &d0), "alloc (baseline)");
    bu_check(disco_device_alloc(g.dev, bytes, &d1), "alloc (baseline)");

    wcopy_ctx_t w = {.s = s, .to = true};
    w.host = (DLTensor){.data = h, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32, .shape = &n};
    bu_check(disco_session_empty_device(s, &n, 1, f32, g.dev, true, &w.reg), "empty_device");
    mc_ctx_t m = {d0, h, g.dev, {kDLCPU, 0}, bytes, 1};
    double to = median_single(wcopy_rounds, &w, 3, reps);
    double h2d = median_single(memcpy_rounds, &m, 3, reps);
    w.to = false;
    m = (mc_ctx_t){h, d0, {kDLCPU, 0}, g.dev, bytes, 1};
    double from = median_single(wcopy_rounds, &w, 3, reps);
    double d2h = median_single(memcpy_rounds, &m, 3, reps);
    figure("gpu_copy_to_worker0_gbps", (double)bytes / to, "GB/s");
    figure("gpu_memcpy_h2d_gbps", (double)bytes / h2d, "GB/s");
    figure("gpu_copy_from_worker0_gbps", (double)bytes / from, "GB/s");
    figure("gpu_memcpy_d2h_gbps", (double)bytes / d2h, "GB/s");
    bu_check(disco_session_free_reg(s, w.reg), "free");

    /* worker 1 reads worker 0's arena: broadcast_from_worker0, 2 workers */
    disco_dref_t x = ones(s, bytes, f32);
    coll_ctx_t c = {.s = s, .nargs = 2, .what = "broadcast_from_worker0"};
    bu_check(disco_session_get_func(s, "disco.broadcast_from_worker0", &c.func),
             "get disco.broadcast_from_worker0");
    c.args[0] = dref(x);
    c.args[1] = disco_value_bool(false);
    double peer = median_single(coll_rounds, &c, 3, reps);
    m = (mc_ctx_t){d1, d0, g.dev, g.dev, bytes, 1};
    double d2d = median_single(memcpy_rounds, &m, 3, reps);
    figure("gpu_d2d_peer_gbps", (double)bytes / peer, "GB/s");
    figure("gpu_memcpy_d2d_gbps", (double)bytes / d2d, "GB/s");
    bu_check(disco_session_free_reg(s, c.func), "free");
    bu_check(disco_session_free_reg(s, x), "free");
    sync_all(s);
    bu_check(disco_device_free(g.dev, d1), "free (baseline)");
    bu_check(disco_device_free(g.dev, d0), "free (baseline)");
    free(h);
    disco_session_close(s);
}

/* ---- the control plane with device arenas held ---- */

typedef struct call_ctx {
    disco_session_t *s;
    disco_dref_t noop;
} call_ctx_t;

static int64_t call_rounds(void *p, uint64_t iters)
{
    call_ctx_t *c = p;
    int64_t total = 0;
    while (iters > 0) {
        disco_dref_t res[256];
        uint64_t k = iters < 256 ? iters : 256;
        int64_t t0 = disco_now_ns();
        for (uint64_t i = 0; i < k; i++) {
            bu_check(disco_session_call(c->s, c->noop, NULL, 0, &res[i]), "call disco.noop");
            bu_check(disco_session_sync(c->s, 1), "sync");
        }
        total += disco_now_ns() - t0;
        for (uint64_t i = 0; i < k; i++)
            bu_check(disco_session_free_reg(c->s, res[i]), "free");
        iters -= k;
    }
    return total;
}

/* A no-op call + sync worker 1, 2 spawned workers; with device, each worker
 * first makes a device tensor (so holds its arena and device context). */
static double call_sync(bool device)
{
    call_ctx_t c = {.s = open_spawned(2, 4 * MIB)};
    disco_dref_t x = 0;
    if (device) {
        int64_t n = 1024;
        bu_check(disco_session_empty_device(c.s, &n, 1, f32, g.dev, false, &x), "empty_device");
        sync_all(c.s);
    }
    bu_check(disco_session_get_func(c.s, "disco.noop", &c.noop), "get disco.noop");
    double ns = measure(call_rounds, &c);
    if (device)
        bu_check(disco_session_free_reg(c.s, x), "free");
    disco_session_close(c.s);
    return ns;
}

/* ---- the section ---- */

void bench_gpu(void)
{
    g.sim = bench_gpu_sim();
    g.type = g.sim ? kDLExtDev : kDLCUDA;
    g.dev = (DLDevice){g.type, 0};
    if (g.sim) {
        setenv("DISCO_SIM_GPUS", "2", 0); /* spawned workers read it too */
        g.sizes = gpu_sizes;
        g.nsizes = 2; /* 512B, 32KiB */
        g.workers = sim_workers;
        g.nworkers = 1;
        g.copy_bytes = 64 * KIB;
    } else {
        g.sizes = gpu_sizes;
        g.nsizes = 4;
        g.workers = gpu_workers;
        g.nworkers = 2;
        g.copy_bytes = 64 * MIB;
    }
    char why[256];
    if (probe_count(why, sizeof why) < 1) {
        const char *w = why, *pre = g.sim ? "no sim device: " : "no CUDA device: ";
        if (strncmp(w, pre, strlen(pre)) == 0)
            w += strlen(pre); /* the line says it already */
        printf("  GPU: skipped: no %s device (%s)\n", g.sim ? "sim" : "CUDA", w);
        return;
    }
    if (g.sim)
        printf("  SIM: the simulated device (DISCO_SIM_GPUS=%s), smoke sizes; no figure below "
               "is a GPU figure\n",
               getenv("DISCO_SIM_GPUS"));
    double ipc_us[2]; /* forks: before this process touches the device */
    bench_gpu_ipc(g.dev, ipc_us);
    figure("ipc_open_us_first", ipc_us[0], "us");
    figure("ipc_open_us_cached", ipc_us[1], "us");
    figure("call_sync_spawn_ns", call_sync(false), "ns");
    figure("gpu_call_sync_ns", call_sync(true), "ns");
    bench_copies();
    for (int i = 0; i < g.nworkers; i++)
        bench_allreduce_n(g.workers[i]);
    for (int i = 0; i < g.nworkers; i++)
        bench_switch_point(g.workers[i]);
}
