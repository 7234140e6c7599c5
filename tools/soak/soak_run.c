/* soak_run.c - the fault soak's rounds (soak.h): the workloads, a worker
 * round, a controller round, and the run that draws and counts them. The
 * checks around a round are in soak_check.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "disco/session.h"
#include "disco/shm/wait.h"
#include "disco/tensor.h"
#include "tools/soak/soak_round.h"

#define MAX_DELAY_US  3000  /* kills land 0..3 ms after the workload starts */
#define HARD_LIMIT_MS 20000 /* a round that waits this long has hung: fail it */
#define X_FLOATS      65536 /* the workloads' tensor: 256 KiB of float32 */

const char *const soak_workload_name[SOAK_WORKLOADS] = {"allreduce", "alloc", "bcast"};

/* ---- random draws ---- */

static uint64_t next_rand(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static int pick(uint64_t *s, int n)
{
    return (int)(next_rand(s) % (uint64_t)n);
}

static double ms_since(int64_t t0, int64_t t1)
{
    return (double)(t1 - t0) / 1e6;
}

/* ---- the workloads ---- */

static disco_value_t dref_value(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.i = (int64_t)r};
}

disco_status_t soak_empty_on_all(work_t *w, int64_t floats, disco_dref_t *out)
{
    disco_value_t a[4] = {disco_value_shape(&floats, 1),
                          disco_value_dtype((DLDataType){kDLFloat, 32, 1}),
                          disco_value_device(w->dev), disco_value_bool(false)};
    return disco_session_call(w->s, w->f_empty, a, 4, out);
}

/* A sim round's copy: floats from the host into worker 0's tensor reg. */
disco_status_t soak_copy_in(work_t *w, int64_t floats, disco_dref_t reg)
{
    static const float zeros[X_FLOATS];
    DLTensor h = {.data = (void *)zeros,
                  .device = {kDLCPU, 0},
                  .ndim = 1,
                  .dtype = {kDLFloat, 32, 1},
                  .shape = &floats};
    return disco_session_copy_into_worker0(w->s, &h, reg);
}

disco_status_t soak_setup(work_t *w)
{
    disco_status_t st;
    if ((st = disco_session_get_func(w->s, "disco.allreduce", &w->f_allreduce)) != DISCO_OK ||
        (st = disco_session_get_func(w->s, "disco.empty", &w->f_empty)) != DISCO_OK ||
        (st = disco_session_get_func(w->s, "disco.broadcast_from_worker0", &w->f_bcast)) !=
            DISCO_OK ||
        (st = disco_session_get_func(w->s, "disco.allgather", &w->f_allgather)) != DISCO_OK)
        return st;
    disco_status_t st2 = soak_empty_on_all(w, X_FLOATS, &w->x);
    if (st2 == DISCO_OK && w->dev.device_type != kDLCPU)
        st2 = soak_copy_in(w, X_FLOATS, w->x);
    return st2;
}

/* One step of workload kind; every register it makes it frees. */
static disco_status_t step(work_t *w, int kind)
{
    disco_status_t st;
    disco_dref_t a, b;
    if (kind == 0) {
        disco_value_t args[2] = {dref_value(w->x), disco_value_str("sum")};
        if ((st = disco_session_call(w->s, w->f_allreduce, args, 2, &a)) != DISCO_OK)
            return st;
        return disco_session_free_reg(w->s, a);
    }
    if (kind == 1) {
        int64_t floats = 1 + pick(&w->rng, X_FLOATS);
        if ((st = soak_empty_on_all(w, floats, &a)) != DISCO_OK)
            return st;
        /* sim: a host-to-device copy into worker 0's new tensor too */
        if (w->dev.device_type != kDLCPU && (st = soak_copy_in(w, floats, a)) != DISCO_OK) {
            disco_session_free_reg(w->s, a);
            return st;
        }
        return disco_session_free_reg(w->s, a);
    }
    disco_value_t args[2] = {dref_value(w->x), disco_value_bool(false)};
    if ((st = disco_session_call(w->s, w->f_bcast, args, 2, &a)) != DISCO_OK)
        return st;
    args[0] = dref_value(a);
    if ((st = disco_session_call(w->s, w->f_allgather, args, 2, &b)) != DISCO_OK)
        return st;
    if ((st = disco_session_free_reg(w->s, a)) != DISCO_OK)
        return st;
    return disco_session_free_reg(w->s, b);
}

disco_status_t soak_sync_all(work_t *w)
{
    for (int i = 0; i < w->n; i++) {
        disco_status_t st = disco_session_sync(w->s, (i + 1) % w->n); /* worker 0 last */
        if (st != DISCO_OK)
            return st;
    }
    return DISCO_OK;
}

/* Draws a round's session (workers, launch, transport) and workload, counts
 * them in the report, and names them in setting. */
static disco_session_config_t draw_round(round_t *rd, uint64_t *rng, int *kind, DLDevice *dev,
                                         char *setting, size_t cap)
{
    static const int sizes[] = {2, 3, 4, 8};
    int n = sizes[pick(rng, 4)], launch = pick(rng, 2), transport = pick(rng, 2);
    *kind = pick(rng, SOAK_WORKLOADS);
    int sim = pick(rng, 3) == 0 && !rd->o->no_sim;
    *dev = (DLDevice){sim ? kDLExtDev : kDLCPU, 0};
    snprintf(setting, cap, "%d workers, %s, %s, %s, %s", n, launch ? "spawn" : "fork",
             transport ? "pipes" : "rings", soak_workload_name[*kind], sim ? "sim" : "cpu");
    rd->r->by_workers[n]++, rd->r->by_launch[launch]++, rd->r->by_transport[transport]++;
    rd->r->by_workload[*kind]++, rd->r->by_device[sim]++;
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.launch = launch ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    cfg.transport = transport ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING;
    cfg.worker_path = rd->o->worker_path;
    cfg.call_timeout_ms = HARD_LIMIT_MS;
    /* x, an allgather's n-fold output and a broadcast on each worker, and room */
    cfg.heap_bytes = (uint64_t)(n * n + 3 * n + 8) * X_FLOATS * sizeof(float);
    /* sim: each worker's arena holds x, a broadcast, an allgather's n-fold
     * output and an empty, and room */
    cfg.device_arena_bytes = (uint64_t)(2 * n + 8) * X_FLOATS * sizeof(float);
    return cfg;
}

/* ---- a worker round ---- */

typedef struct killer {
    pid_t pid;
    long delay_us;
    _Atomic int64_t t_kill;
} killer_t;

static void *killer_main(void *p)
{
    killer_t *k = p;
    soak_sleep_us(k->delay_us);
    int64_t t = disco_now_ns();
    kill(k->pid, SIGKILL);
    /* Release: the joiner reads t_kill after pthread_join, which orders it
     * already; the atomic keeps the intent explicit and costs nothing. */
    atomic_store_explicit(&k->t_kill, t, memory_order_release);
    return NULL;
}

/* A sim round's arenas: used bytes and blocks of each worker's (from
 * disco.arena_stats: [bytes, used, blocks, peers, type, id, events, ...]) into
 * out[2 * worker]. CPU rounds: nothing. */
static disco_status_t arena_use(work_t *w, int64_t out[16])
{
    if (w->dev.device_type == kDLCPU)
        return DISCO_OK;
    disco_dref_t r;
    disco_status_t st = disco_session_call_by_name(w->s, "disco.arena_stats", NULL, 0, &r);
    for (int i = 0; i < w->n && st == DISCO_OK; i++) {
        disco_value_t v;
        if ((st = disco_session_debug_get(w->s, r, i, &v)) != DISCO_OK)
            break;
        if (v.type != DISCO_T_SHAPE || v.len < 3)
            st = disco_set_error(DISCO_E_BAD_TYPE, "disco.arena_stats on worker %d: no shape", i);
        else
            out[2 * i] = v.v.shape[1], out[2 * i + 1] = v.v.shape[2];
        disco_value_clear(&v);
    }
    if (st == DISCO_OK)
        st = disco_session_free_reg(w->s, r);
    return st;
}

/* The heap (and a sim round's arenas) before and after a fault-free pass
 * and a failing call. */
void soak_check_steady(round_t *rd, work_t *w, int kind)
{
    disco_heap_stats_t h0, h1;
    int64_t a0[16] = {0}, a1[16] = {0};
    disco_status_t st;
    if ((st = soak_sync_all(w)) != DISCO_OK ||
        (st = disco_session_heap_stats(w->s, &h0)) != DISCO_OK ||
        (st = arena_use(w, a0)) != DISCO_OK) {
        soak_fail(rd, "setup: %s (%s)", disco_err_name(st), disco_last_error());
        return;
    }
    for (int i = 0; i < 2 && st == DISCO_OK; i++)
        st = step(w, kind);
    if (st == DISCO_OK)
        st = soak_sync_all(w);
    /* A call that fails on every worker: the session stays usable. */
    disco_value_t bad[2] = {dref_value(w->x), disco_value_str("no-such-op")};
    disco_dref_t r;
    if (st == DISCO_OK && (st = disco_session_call(w->s, w->f_allreduce, bad, 2, &r)) == DISCO_OK) {
        /* The failure comes back from the syncs (a sync reports the
         * failures known by then, of any worker), and only once. */
        int told = 0;
        for (int i = 0; i < w->n; i++) {
            disco_status_t sst = disco_session_sync(w->s, (i + 1) % w->n);
            if (sst == DISCO_E_INVAL && strstr(disco_last_error(), "op must be") != NULL)
                told++;
            else if (sst != DISCO_OK)
                soak_fail(rd, "sync after a failed call: %s (%s)", disco_err_name(sst),
                          disco_last_error());
        }
        if (told == 0)
            soak_fail(rd, "allreduce with op \"no-such-op\" succeeded");
        st = disco_session_free_reg(w->s, r);
        if (st == DISCO_OK)
            st = soak_sync_all(w);
    }
    if (st != DISCO_OK) {
        soak_fail(rd, "fault-free pass: %s (%s)", disco_err_name(st), disco_last_error());
        return;
    }
    if (disco_session_heap_stats(w->s, &h1) != DISCO_OK || h1.live_blocks != h0.live_blocks)
        soak_fail(rd, "heap: %zu live blocks before a fault-free pass and a failed call, %zu after",
                  h0.live_blocks, h1.live_blocks);
    if ((st = arena_use(w, a1)) != DISCO_OK)
        soak_fail(rd, "arena stats: %s (%s)", disco_err_name(st), disco_last_error());
    for (int i = 0; i < w->n && st == DISCO_OK; i++)
        if (a0[2 * i] != a1[2 * i] || a0[2 * i + 1] != a1[2 * i + 1])
            soak_fail(rd,
                      "worker %d's sim arena: %lld bytes in %lld blocks before a fault-free "
                      "pass and a failed call, %lld in %lld after",
                      i, (long long)a0[2 * i], (long long)a0[2 * i + 1], (long long)a1[2 * i],
                      (long long)a1[2 * i + 1]);
}

/* A worker round: kill a worker mid-call, check the report; a recovery
 * round (recover) then recovers the session and checks it before closing
 * (soak_recover.c), *rec_ms its recovery's time. */
static void worker_round(round_t *rd, uint64_t *rng, bool recover, double *det_ms, double *rec_ms)
{
    const soak_opts_t *o = rd->o;
    int kind;
    char setting[96];
    DLDevice dev;
    disco_session_config_t cfg = draw_round(rd, rng, &kind, &dev, setting, sizeof setting);
    int n = cfg.num_workers, victim = 1 + pick(rng, n - 1);
    killer_t k = {.delay_us = pick(rng, MAX_DELAY_US + 1)};
    snprintf(rd->what, sizeof rd->what, "kill worker %d%s, %s, after %ld us", victim,
             recover ? " and recover" : "", setting, k.delay_us);
    leaks_t before = soak_leaks_now();
    work_t w = {.n = n, .dev = dev, .rng = next_rand(rng) | 1};
    disco_status_t st = disco_session_open(&cfg, &w.s);
    if (st != DISCO_OK) {
        soak_fail(rd, "open: %s (%s)", disco_err_name(st), disco_last_error());
        return;
    }
    if ((st = soak_setup(&w)) != DISCO_OK)
        soak_fail(rd, "setup: %s (%s)", disco_err_name(st), disco_last_error());
    else
        soak_check_steady(rd, &w, kind);
    /* A recovery round does before the kill what it checks after the
     * recovery, so that both hold the same (a sim round's peer imports). */
    if (recover && !rd->failed && (st = soak_check_values(rd, &w)) != DISCO_OK)
        soak_fail(rd, "the workload: %s (%s)", disco_err_name(st), disco_last_error());
    if (rd->failed) {
        disco_session_close(w.s);
        return;
    }
    disco_heap_stats_t held;
    if ((st = disco_session_heap_stats(w.s, &held)) != DISCO_OK) {
        soak_fail(rd, "heap: %s (%s)", disco_err_name(st), disco_last_error());
        disco_session_close(w.s);
        return;
    }
    leaks_t in_session = soak_leaks_now();
    int pids[16] = {0}; /* the workers, and after a recovery the new ones */
    for (int i = 0; i < n; i++)
        pids[i] = disco_session_worker_pid(w.s, i);
    k.pid = pids[victim];
    pthread_t th;
    if (pthread_create(&th, NULL, killer_main, &k) != 0) {
        soak_fail(rd, "pthread_create failed");
        disco_session_close(w.s);
        return;
    }
    /* The workload, then syncs: the first error ends it. Should all of it
     * finish before the kill, the syncs after the join meet the death. */
    st = DISCO_OK;
    for (int i = 0; i < 64 && st == DISCO_OK; i++)
        st = step(&w, kind);
    if (st == DISCO_OK)
        st = soak_sync_all(&w);
    bool joined = st == DISCO_OK;
    if (joined) {
        pthread_join(th, NULL);
        st = soak_sync_all(&w);
    }
    int64_t t_err = disco_now_ns();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", disco_last_error());
    if (!joined) {
        pthread_join(th, NULL); /* the kill has happened once this returns */
        rd->r->mid_call++;
    }
    int64_t t_kill = atomic_load_explicit(&k.t_kill, memory_order_acquire);
    char want[64];
    snprintf(want, sizeof want, "worker %d (pid %d", victim, (int)k.pid);
    if (st != DISCO_E_WORKER_DIED || strstr(msg, want) == NULL || strstr(msg, "signal 9") == NULL)
        soak_fail(rd, "caller got %s (%s), expected DISCO_E_WORKER_DIED naming %s) and signal 9",
                  disco_err_name(st), msg, want);
    else if (t_err < t_kill)
        soak_fail(rd, "the error came before the kill");
    else if ((*det_ms = ms_since(t_kill, t_err)) > o->bound_ms)
        soak_fail(rd, "detected after %.2f ms, bound %u ms", *det_ms, o->bound_ms);
    disco_heap_stats_t h;
    if ((st = disco_session_heap_stats(w.s, &h)) != DISCO_OK)
        soak_fail(rd, "heap after the death: %s (%s)", disco_err_name(st), disco_last_error());
    rd->r->heap_recoveries += h.recoveries;
    if (disco_session_health(w.s) != DISCO_E_WORKER_DIED)
        soak_fail(rd, "session health %s after the death",
                  disco_err_name(disco_session_health(w.s)));
    int npids = n;
    if (recover && !rd->failed) {
        soak_recover(rd, &w, kind, held.live_blocks, &in_session, rec_ms);
        for (int i = 1; i < n; i++)
            pids[npids++] = disco_session_worker_pid(w.s, i);
    }
    disco_session_close(w.s);
    soak_check_clean(rd, &before, pids, npids);
}

/* ---- a controller round ---- */

/* The controller child: opens the session, reports its workers' pids, and
 * runs the workload until it is killed. Exits 3 on any error. */
static void controller_child(const disco_session_config_t *cfg, DLDevice dev, int kind,
                             uint64_t seed, int fd)
{
    work_t w = {.n = cfg->num_workers, .dev = dev, .rng = seed};
    if (disco_session_open(cfg, &w.s) != DISCO_OK)
        _exit(3);
    for (int i = 1; i < w.n; i++) {
        int pid = disco_session_worker_pid(w.s, i);
        if (write(fd, &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(3);
    }
    if (soak_setup(&w) != DISCO_OK)
        _exit(3);
    for (;;)
        if (step(&w, kind) != DISCO_OK || (pick(&w.rng, 8) == 0 && soak_sync_all(&w) != DISCO_OK))
            _exit(3);
}

static bool read_all(int fd, void *buf, size_t len, int timeout_ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, timeout_ms) != 1)
            return false;
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static void controller_round(round_t *rd, uint64_t *rng, double *det_ms)
{
    const soak_opts_t *o = rd->o;
    int kind;
    char setting[96];
    DLDevice dev;
    disco_session_config_t cfg = draw_round(rd, rng, &kind, &dev, setting, sizeof setting);
    int n = cfg.num_workers;
    long delay_us = pick(rng, MAX_DELAY_US + 1);
    snprintf(rd->what, sizeof rd->what, "kill the controller, %s, after %ld us", setting, delay_us);
    leaks_t before = soak_leaks_now();
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        soak_fail(rd, "pipe: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t ctl = fork();
    if (ctl == 0) {
        close(p[0]);
        controller_child(&cfg, dev, kind, next_rand(rng) | 1, p[1]);
    }
    close(p[1]);
    int pids[8], fds[8];
    if (ctl < 0 || !read_all(p[0], pids, (size_t)(n - 1) * sizeof(int), HARD_LIMIT_MS)) {
        soak_fail(rd, "the controller did not report its workers");
        if (ctl > 0)
            kill(ctl, SIGKILL), waitpid(ctl, NULL, 0);
        close(p[0]);
        return;
    }
    close(p[0]);
    for (int i = 0; i < n - 1; i++)
        fds[i] = soak_pidfd_open(pids[i]);
    soak_sleep_us(delay_us);
    int64_t t_kill = disco_now_ns();
    kill(ctl, SIGKILL);
    int ctl_status = 0;
    waitpid(ctl, &ctl_status, 0);
    if (!WIFSIGNALED(ctl_status) || WTERMSIG(ctl_status) != SIGKILL)
        soak_fail(rd, "the controller ended by itself before the kill (status %#x)", ctl_status);
    /* Every worker must end; the time is the last one's. As the subreaper
     * the soak inherited them, so it reaps them too. */
    int64_t t_last = t_kill;
    for (int i = 0; i < n - 1; i++) {
        if (!soak_wait_gone(pids[i], fds[i], t_kill + HARD_LIMIT_MS * 1000000LL)) {
            soak_fail(rd, "worker %d (pid %d) outlived its controller by %d ms", i + 1, pids[i],
                      HARD_LIMIT_MS);
            kill(pids[i], SIGKILL);
        }
        t_last = disco_now_ns();
        if (fds[i] >= 0)
            close(fds[i]);
    }
    for (int i = 0; i < n - 1; i++)
        waitpid(pids[i], NULL, 0);
    *det_ms = ms_since(t_kill, t_last);
    if (!rd->failed && *det_ms > o->bound_ms)
        soak_fail(rd, "workers gone %.2f ms after the kill, bound %u ms", *det_ms, o->bound_ms);
    soak_check_clean(rd, &before, NULL, 0);
}

/* ---- the run ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Detection times of one kind of round. */
typedef struct samples {
    double *v;
    int n, cap;
} samples_t;

/* Appends x; false when out of memory (x is then dropped). */
static bool push(samples_t *s, double x)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        double *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return false;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = x;
    return true;
}

int soak_run(const soak_opts_t *o, soak_report_t *r)
{
    *r = (soak_report_t){.seed = o->seed ? o->seed : (uint64_t)disco_now_ns() | 1};
    uint64_t rng = r->seed;
    /* Orphaned workers of a killed controller become ours. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* Sim rounds: two sim devices unless the caller chose (workers share
     * them, i mod 2); spawned workers inherit the variable. */
    if (!o->no_sim)
        setenv("DISCO_SIM_GPUS", "2", 0);
    samples_t wms = {0}, cms = {0}, rms = {0};
    int64_t t0 = disco_now_ns();
    for (bool room = true; room;) {
        double elapsed = ms_since(t0, disco_now_ns()) / 1e3;
        if ((o->rounds > 0 && r->rounds >= o->rounds) || (o->seconds > 0 && elapsed >= o->seconds))
            break;
        round_t rd = {.r = r, .o = o, .index = ++r->rounds};
        double det = 0, rec = 0;
        bool ctl = pick(&rng, 4) == 0 && o->recover_pct < 100;
        bool recover = !ctl && pick(&rng, 100) < o->recover_pct;
        if (ctl) {
            r->controller_rounds++;
            controller_round(&rd, &rng, &det);
            room = push(&cms, det);
            r->worst_controller_ms = det > r->worst_controller_ms ? det : r->worst_controller_ms;
        } else {
            r->worker_rounds++;
            worker_round(&rd, &rng, recover, &det, &rec);
            room = push(&wms, det);
            r->worst_worker_ms = det > r->worst_worker_ms ? det : r->worst_worker_ms;
            if (recover) {
                r->recover_rounds++;
                room = room && push(&rms, rec);
                r->worst_recover_ms = rec > r->worst_recover_ms ? rec : r->worst_recover_ms;
            }
        }
        r->failures += rd.failed;
        if (o->log != NULL && !rd.failed && recover)
            fprintf(o->log, "round %d (%s): caller told in %.3f ms, recovered in %.3f ms\n",
                    rd.index, rd.what, det, rec);
        else if (o->log != NULL && !rd.failed)
            fprintf(o->log, "round %d (%s): %s in %.3f ms\n", rd.index, rd.what,
                    ctl ? "workers gone" : "caller told", det);
    }
    r->seconds = ms_since(t0, disco_now_ns()) / 1e3;
    r->median_worker_ms = median(wms.v, wms.n);
    r->median_controller_ms = median(cms.v, cms.n);
    r->median_recover_ms = median(rms.v, rms.n);
    free(wms.v);
    free(cms.v);
    free(rms.v);
    return r->failures;
}
