/* test_ar_progress.c - where a device collective kernel hangs, named: the
 * progress each piece of the allreduce kernel publishes while it waits
 * (workers/device/ar_progress.h), as the watchdog's report, a view from
 * another process's point of view (the observer `disco top` reads), `disco
 * top --json` and disco_kernel_view_format show it. On the sim device, with
 * a member stalled inside the kernel (DISCO_SIM_AR_STALL); the reader's
 * checks of a hostile record; the line's grouping of pieces. */
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "disco/dtype.h"
#include "disco/observe.h"
#include "scheduler/observe/view.h"
#include "tests/gpu_session_util.h"
#include "workers/device/ar.h"
#include "workers/device/ar_progress.h"

#define WORLD 3

/* ---- a member stalled inside the kernel ---- */

/* What the observer thread saw while the kernel hung. */
struct watch {
    char release[128]; /* the file that lets the stalled member go on */
    int phase;         /* where the others wait */
    bool two_shot;
    bool seen;         /* every condition below held in one view */
    uint64_t coll;     /* the collective's number, as the view says */
    char report[8192]; /* disco_view_report of that view */
    char top[16384];   /* `disco top --once --json PID` meanwhile */
    char why[256];     /* what was missing at the last look */
};

/* Whether view v shows worker w's piece 0 waiting at the phase for worker 1. */
static bool waits_for_1(const disco_session_view_t *v, int w, const struct watch *x)
{
    const disco_kernel_view_t *k = &v->workers[w].kernel;
    return k->active && k->pieces == 1 && k->piece[0].state == DISCO_PIECE_WAITING &&
           k->piece[0].phase == x->phase && k->piece[0].member == 1;
}

/* Reads this process's session through an observer (as `disco top` reads
 * another's) until workers 0 and 2 both wait in the kernel for worker 1
 * and the watchdog has reported; keeps that view's report and a frame of
 * `disco top`; then lets the stalled member go on (always, so that the
 * call ends). */
static void *observe(void *arg)
{
    struct watch *x = arg;
    disco_observer_t *o = NULL;
    int64_t until = disco_now_ns() + 60 * 1000000000LL;
    while (disco_now_ns() < until && !x->seen) {
        if (o == NULL && disco_observer_open(getpid(), 0, NULL, &o) != DISCO_OK) {
            snprintf(x->why, sizeof x->why, "observer: %s", disco_last_error());
            o = NULL;
        }
        disco_session_view_t v;
        if (o != NULL && disco_observer_read(o, &v) == DISCO_OK) {
            if (!waits_for_1(&v, 0, x) || !waits_for_1(&v, 2, x))
                snprintf(x->why, sizeof x->why, "workers 0 and 2 do not both wait for worker 1");
            else if (v.watchdog_reports < 1)
                snprintf(x->why, sizeof x->why, "no watchdog report yet");
            else {
                x->seen = true;
                x->coll = v.workers[0].kernel.coll;
                FILE *f = fmemopen(x->report, sizeof x->report - 1, "w");
                if (f != NULL) {
                    disco_view_report(&v, f);
                    fclose(f);
                }
            }
            disco_view_free(&v);
        }
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL); /* the gap between looks, not a synchronization */
    }
    disco_observer_close(o);
    if (x->seen) { /* the CLI's view of the same hang */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s/disco top --once --json %d 2>&1", DISCO_TEST_BIN,
                 (int)getpid());
        FILE *p = popen(cmd, "r");
        if (p != NULL) {
            size_t n = fread(x->top, 1, sizeof x->top - 1, p);
            x->top[n] = '\0';
            pclose(p);
        }
    }
    int fd = open(x->release, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* Calls one allreduce (sum) of x over the world and returns its result. */
static disco_dref_t allreduce(disco_session_t *s, disco_dref_t x)
{
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(false)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", args, 3, &r));
    return r;
}

/* Checks `disco top --json`'s worker w: its kernel's mode, number and piece 0. */
static void check_top_worker(json_t *workers, int w, const struct watch *x)
{
    json_t *k = json_object_get(json_array_get(workers, (size_t)w), "kernel");
    ck_assert_msg(json_is_object(k), "top: worker %d has no kernel", w);
    ck_assert_str_eq(json_string_value(json_object_get(k, "what")), "allreduce");
    ck_assert_str_eq(json_string_value(json_object_get(k, "mode")),
                     x->two_shot ? "two-shot" : "one-shot");
    ck_assert_int_eq(json_integer_value(json_object_get(k, "coll")), (json_int_t)x->coll);
    json_t *p = json_array_get(json_object_get(k, "pieces"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(p, "state")), "waiting");
    ck_assert_str_eq(json_string_value(json_object_get(p, "phase")),
                     disco_kernel_phase_name(x->phase));
    ck_assert_int_eq(json_integer_value(json_object_get(p, "member")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(p, "flag_coll")),
                     (json_int_t)(x->coll - 2));
}

/* Worker 1 stops inside its third allreduce kernel before it arrives at
 * MID (two-shot) or END (one-shot), until the test lets it go: workers 0
 * and 2 wait there for its flag. The watchdog's report (worker 0 waiting
 * in the collective), a view taken by an observer and `disco top --json`
 * each name the waiting worker, the collective's number, "device kernel",
 * the mode, the piece, the phase, the member whose flag is lacking and
 * what the flag holds (the mark of the collective two before, the last on
 * the same slot); and worker 1 as the one awaited that waits for no one.
 * Once it goes on, the call completes with the right sums and no view
 * shows a kernel any more. */
START_TEST(test_stalled_member_named)
{
    NEED_DEVICE(kDLExtDev);
    struct watch *x = calloc(1, sizeof *x);
    ck_assert_ptr_nonnull(x);
    x->two_shot = _i == 1;
    x->phase = x->two_shot ? 1 : 2;
    char dir[] = "/tmp/disco-arp-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(x->release, sizeof x->release, "%s/go", dir);
    setenv("DISCO_SIM_GPUS", "3", 1); /* a device each: the kernels meet */
    setenv("DISCO_AR_TWO_SHOT_BYTES", x->two_shot ? "0" : "1099511627776", 1);
    setenv("DISCO_SIM_AR_STALL", x->two_shot ? "1:mid:3" : "1:end:3", 1);
    setenv("DISCO_SIM_AR_STALL_UNTIL", x->release, 1);
    disco_session_config_t c = disco_session_config_default(WORLD);
    c.call_timeout_ms = 90000;
    c.watchdog_ms = 300;
    disco_session_t *s;
    CK_OK(disco_session_open(&c, &s));
    int err = tu_capture_stderr();
    enum { N = 64 };
    disco_dref_t in = patterned(s, kDLExtDev, N);
    for (int k = 0; k < 2; k++) {
        disco_dref_t r = allreduce(s, in);
        CK_OK(disco_session_sync_all(s));
        CK_OK(disco_session_free_reg(s, r));
    }
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, observe, x), 0);
    disco_dref_t r = allreduce(s, in); /* worker 1 stalls in it until the thread lets it go */
    CK_OK(disco_session_sync_all(s));
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(x->seen, "the hang was not seen: %s", x->why);
    /* The sums are right, and no kernel is shown once it ended. */
    static float p[N], want[N];
    for (int w = 0; w < WORLD; w++) {
        pattern(p, N, w);
        for (int i = 0; i < N; i++)
            want[i] += p[i];
    }
    for (int w = 0; w < WORLD; w++)
        expect_bytes(s, r, w, want, sizeof want, "the stalled allreduce");
    disco_session_view_t v;
    CK_OK(disco_session_view(s, &v));
    for (int w = 0; w < WORLD; w++)
        ck_assert_msg(!v.workers[w].kernel.active, "worker %d still shows a kernel", w);
    disco_view_free(&v);
    /* The observer's view, as the report prints it. */
    const char *mode = x->two_shot ? "two-shot" : "one-shot";
    const char *phase = disco_kernel_phase_name(x->phase);
    char want0[256], want2[256], stuck[128];
    snprintf(want0, sizeof want0,
             "worker 0 in allreduce #%llu (device kernel, %s): piece 0 waits at %s for worker 1 "
             "(flag holds #%llu)",
             (unsigned long long)x->coll, mode, phase, (unsigned long long)(x->coll - 2));
    snprintf(want2, sizeof want2,
             "worker 2 in allreduce #%llu (device kernel, %s): piece 0 waits at %s for worker 1 "
             "(flag holds #%llu)",
             (unsigned long long)x->coll, mode, phase, (unsigned long long)(x->coll - 2));
    snprintf(stuck, sizeof stuck, "worker 1 is awaited in the device kernel and waits for no one");
    ck_assert_msg(strstr(x->report, want0) != NULL, "no \"%s\" in:\n%s", want0, x->report);
    ck_assert_msg(strstr(x->report, want2) != NULL, "no \"%s\" in:\n%s", want2, x->report);
    ck_assert_msg(strstr(x->report, stuck) != NULL, "no \"%s\" in:\n%s", stuck, x->report);
    char want1[128];
    snprintf(want1, sizeof want1,
             "worker 1 in allreduce #%llu (device kernel, %s):", (unsigned long long)x->coll, mode);
    ck_assert_msg(strstr(x->report, want1) != NULL, "no \"%s\" in:\n%s", want1, x->report);
    /* The watchdog's own report, written while worker 0 waited. */
    char *text = tu_read_all(err);
    const char *rep = strstr(text, "disco watchdog:");
    ck_assert_msg(rep != NULL, "no watchdog report:\n%s", text);
    ck_assert_msg(strstr(rep, want0) != NULL, "the watchdog did not say \"%s\":\n%s", want0, text);
    ck_assert_msg(strstr(rep, "worker 0 has waited") != NULL, "no wait named:\n%s", text);
    free(text);
    /* disco top --json, from another process. */
    json_error_t je;
    json_t *frame = json_loads(x->top, 0, &je);
    ck_assert_msg(frame != NULL, "top's JSON: %s:\n%s", je.text, x->top);
    json_t *workers = json_object_get(frame, "workers");
    check_top_worker(workers, 0, x);
    check_top_worker(workers, 2, x);
    json_decref(frame);
    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_free_reg(s, in));
    disco_session_close(s);
    unlink(x->release);
    rmdir(dir);
    free(x);
}
END_TEST

/* ---- the record's life, one kernel ---- */

/* A launch writes the header and clears what an earlier kernel left in the
 * piece words; a kernel whose meetings find every flag there (a group of
 * one: its own arrival is all it waits for) writes no piece word; its end
 * marks the record ended. */
START_TEST(test_quiet_when_no_wait)
{
    NEED_DEVICE(kDLExtDev);
    DLDevice sim = {kDLExtDev, 0}, cpu = {kDLCPU, 0};
    void *in, *out, *sig;
    CK_OK(disco_device_alloc(sim, 64, &in));
    CK_OK(disco_device_alloc(sim, 64, &out));
    CK_OK(disco_device_alloc(sim, DISCO_AR_SIGNAL_BYTES, &sig));
    static char zeros[DISCO_AR_SIGNAL_BYTES];
    CK_OK(disco_device_copy(sig, sim, zeros, cpu, sizeof zeros, NULL));
    CK_OK(disco_device_copy(in, sim, zeros, cpu, 64, NULL));
    CK_OK(disco_device_stream_sync(sim, NULL));
    struct disco__ar_progress *p = aligned_alloc(64, 256);
    ck_assert_ptr_nonnull(p);
    memset(p, 0, 256);
    for (unsigned b = 0; b < DISCO_AR_MAX_PIECES; b++) /* an earlier kernel's words */
        disco__ar_progress_piece(p, b, DISCO_AR_PW(1, 2, DISCO_AR_END, DISCO_AR_PW_WAITING, 0));
    struct disco__ar_job j = {.rank = 0,
                              .size = 1,
                              .epoch = 5,
                              .op = DISCO_REDUCE_SUM,
                              .pieces = 1,
                              .dtype = {kDLFloat, 32, 1},
                              .count = 16,
                              .coll = 4,
                              .cmd = 9,
                              .progress = p};
    j.in[0] = in, j.out[0] = out, j.signal[0] = sig;
    CK_OK(disco__ar_launch(sim, NULL, &j));
    struct disco__ar_progress_copy k;
    ck_assert(disco__ar_progress_read(p, &k));
    ck_assert(k.live);
    ck_assert_uint_eq(k.cmd, 9);
    ck_assert_uint_eq(k.coll, 4);
    ck_assert_uint_eq(k.epoch, 5);
    ck_assert_uint_eq(k.what, 1);
    ck_assert_uint_eq(k.size, 1);
    ck_assert_uint_eq(k.pieces, 1);
    for (unsigned b = 0; b < DISCO_AR_MAX_PIECES; b++)
        ck_assert_uint_eq(k.piece[b], 0);
    CK_OK(disco_device_stream_sync(sim, NULL)); /* the sim's kernel runs here */
    ck_assert(disco__ar_progress_read(p, &k));
    ck_assert(!k.live);
    for (unsigned b = 0; b < DISCO_AR_MAX_PIECES; b++)
        ck_assert_uint_eq(k.piece[b], 0);
    /* A launch refused by the device marks the record ended at once. */
    setenv("DISCO_SIM_AR_LAUNCH_FAIL", "0", 1);
    CK_STATUS(disco__ar_launch(sim, NULL, &j), DISCO_E_SYS);
    ck_assert(disco__ar_progress_read(p, &k));
    ck_assert(!k.live);
    unsetenv("DISCO_SIM_AR_LAUNCH_FAIL");
    free(p);
    CK_OK(disco_device_free(sim, sig));
    CK_OK(disco_device_free(sim, out));
    CK_OK(disco_device_free(sim, in));
}
END_TEST

/* ---- the line ---- */

/* Pieces that stand alike are named together, in order, and each group
 * says where it waits (or that it passed), for whom and what the flag
 * holds; a kernel with no recorded wait says so; a worker in none gets no
 * line; a short buffer is cut, terminated, and the length says so. */
START_TEST(test_format_groups_pieces)
{
    disco_worker_view_t w = {.worker = 2};
    char buf[512];
    ck_assert_uint_eq(disco_kernel_view_format(&w, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    disco_kernel_view_t *k = &w.kernel;
    *k = (disco_kernel_view_t){
        .active = true, .coll = 812, .two_shot = true, .size = 3, .pieces = 8};
    snprintf(k->what, sizeof k->what, "allreduce");
    disco_kernel_view_format(&w, buf, sizeof buf);
    ck_assert_str_eq(buf, "worker 2 in allreduce #812 (device kernel, two-shot, 8 pieces): "
                          "no piece has waited long yet");
    for (int b = 0; b < 8; b++)
        k->piece[b] = (disco_piece_view_t){.state = DISCO_PIECE_WAITING,
                                           .phase = 0,
                                           .member = 1,
                                           .flag_set = true,
                                           .flag_coll = 810};
    k->piece[5] = (disco_piece_view_t){
        .state = DISCO_PIECE_WAITING, .phase = 1, .member = 1, .flag_set = true, .flag_coll = 811};
    k->piece[7] = (disco_piece_view_t){.state = DISCO_PIECE_PASSED, .phase = 2, .member = 0};
    k->piece[3] = (disco_piece_view_t){.state = DISCO_PIECE_WAITING, .phase = 0, .member = 0};
    size_t n = disco_kernel_view_format(&w, buf, sizeof buf);
    const char *want =
        "worker 2 in allreduce #812 (device kernel, two-shot, 8 pieces): pieces 0-2, 4, 6 wait "
        "at START for worker 1 (flag holds #810); piece 3 waits at START for worker 0 (flag never "
        "set); piece 5 waits at MID for worker 1 (flag holds #811); piece 7 passed END (waited "
        "for worker 0)";
    ck_assert_str_eq(buf, want);
    ck_assert_uint_eq(n, strlen(want));
    char small[20];
    ck_assert_uint_eq(disco_kernel_view_format(&w, small, sizeof small), strlen(want));
    ck_assert_str_eq(small, "worker 2 in allredu");
    k->pieces = 1, k->two_shot = false;
    disco_kernel_view_format(&w, buf, sizeof buf);
    ck_assert_str_eq(buf, "worker 2 in allreduce #812 (device kernel, one-shot): piece 0 waits "
                          "at START for worker 1 (flag holds #810)");
}
END_TEST

/* ---- a hostile record ---- */

/* A status region of WORLD workers in plain memory, as another process's
 * segment would be read. */
struct fake {
    struct disco__ctl ctl;
    struct {
        struct disco__stat_hdr h;
        struct disco__wstat w[WORLD];
    } st;
};

/* Worker i busy in command 7 with a well-formed kernel record: allreduce
 * #40 (epoch 41), two-shot, rank i of WORLD, 2 pieces, piece 0 waiting at
 * MID for rank 1 whose flag holds epoch 39 (#38). */
static void good(struct fake *f, int i)
{
    struct disco__wstat *w = &f->st.w[i];
    atomic_store(&w->seq, 7);
    atomic_store(&w->state, DISCO_WS_BUSY);
    struct disco__ar_job j = {.rank = (uint32_t)i,
                              .size = WORLD,
                              .epoch = 41,
                              .two_shot = 1,
                              .pieces = 2,
                              .base = 0,
                              .coll = 40,
                              .cmd = 7};
    disco__ar_progress_begin(&w->kernel, &j);
    disco__ar_progress_piece(&w->kernel, 0, DISCO_AR_PW(39, 41, DISCO_AR_MID, 1, 1));
}

static disco_session_view_t take(struct fake *f)
{
    struct disco__view_src src = {.ctl = &f->ctl, .stat = &f->st.h, .world = WORLD};
    disco_session_view_t v;
    CK_OK(disco__view_take(&src, &v));
    return v;
}

/* Every field of the record is another process's word: a header out of
 * range (size, rank, pieces, group beyond the world, what, epoch 0), of
 * another command, of a worker not busy, or torn (ver odd) shows no kernel;
 * a piece word out of range (tag, phase, MID in one-shot, state, member)
 * shows a quiet piece; a well-formed one shows as written. */
START_TEST(test_hostile_record)
{
    struct fake *f = aligned_alloc(64, (sizeof *f + 63) / 64 * 64);
    ck_assert_ptr_nonnull(f);
    memset(f, 0, sizeof *f);
    f->ctl.gid_base = 10; /* global ids: 10 + node-local */
    for (int i = 0; i < WORLD; i++)
        good(f, i);
    disco_session_view_t v = take(f);
    const disco_kernel_view_t *k = &v.workers[2].kernel;
    ck_assert(k->active);
    ck_assert_uint_eq(k->coll, 40);
    ck_assert(k->two_shot);
    ck_assert_int_eq(k->rank, 2);
    ck_assert_int_eq(k->pieces, 2);
    ck_assert_int_eq(k->piece[0].state, DISCO_PIECE_WAITING);
    ck_assert_int_eq(k->piece[0].phase, DISCO_AR_MID);
    ck_assert_int_eq(k->piece[0].member, 11);
    ck_assert(k->piece[0].flag_set);
    ck_assert_uint_eq(k->piece[0].flag_coll, 38);
    ck_assert_int_eq(k->piece[1].state, DISCO_PIECE_QUIET);
    disco_view_free(&v);
    /* Headers: each breaks one rule. */
    struct disco__ar_progress *p = &f->st.w[1].kernel;
    uint32_t shape = atomic_load(&p->shape);
    const uint32_t bad_shapes[] = {
        shape & ~0xff000000u,               /* size 0 */
        (shape & ~0xff000000u) | 17u << 24, /* size past DISCO_AR_MAX_RANKS */
        (shape & ~0x00ff0000u) | 3u << 16,  /* rank = size */
        shape & ~0x0000ff00u,               /* 0 pieces */
        (shape & ~0x0000ff00u) | 200u << 8, /* 200 pieces */
        (shape & ~0xfu) | 9u,               /* not an allreduce */
    };
    for (size_t b = 0; b < sizeof bad_shapes / sizeof bad_shapes[0]; b++) {
        atomic_store(&p->shape, bad_shapes[b]);
        v = take(f);
        ck_assert_msg(!v.workers[1].kernel.active, "shape %#x shown", bad_shapes[b]);
        ck_assert(v.workers[0].kernel.active);
        disco_view_free(&v);
    }
    atomic_store(&p->shape, shape);
    atomic_store(&p->base, 1); /* ranks 1..3 of a world of 3 */
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&p->base, UINT32_MAX);
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&p->base, 0);
    atomic_store(&p->epoch, 0);
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&p->epoch, 41);
    atomic_store(&p->cmd, 6); /* an earlier command's kernel */
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&p->cmd, 7);
    atomic_store(&f->st.w[1].state, DISCO_WS_IDLE);
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&f->st.w[1].state, DISCO_WS_BUSY);
    atomic_store(&p->ver, atomic_load(&p->ver) | 1u); /* being written, at every look */
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&p->ver, (atomic_load(&p->ver) | 1u) + 1u);
    atomic_store(&p->live, 0); /* ended */
    v = take(f);
    ck_assert(!v.workers[1].kernel.active);
    disco_view_free(&v);
    atomic_store(&p->live, 1);
    v = take(f);
    ck_assert(v.workers[1].kernel.active);
    disco_view_free(&v);
    /* Piece words: each breaks one rule. */
    const uint64_t bad_words[] = {
        DISCO_AR_PW(39, 42, DISCO_AR_MID, 1, 1),  /* another launch's tag */
        DISCO_AR_PW(39, 41, 7, 1, 1),             /* no such phase */
        DISCO_AR_PW(39, 41, DISCO_AR_MID, 9, 1),  /* no such state */
        DISCO_AR_PW(39, 41, DISCO_AR_MID, 1, 3),  /* member = size */
        DISCO_AR_PW(39, 41, DISCO_AR_MID, 1, 200) /* member far out */
    };
    for (size_t b = 0; b < sizeof bad_words / sizeof bad_words[0]; b++) {
        disco__ar_progress_piece(p, 0, bad_words[b]);
        v = take(f);
        ck_assert(v.workers[1].kernel.active);
        ck_assert_msg(v.workers[1].kernel.piece[0].state == DISCO_PIECE_QUIET, "word %#llx shown",
                      (unsigned long long)bad_words[b]);
        char line[512];
        ck_assert_uint_gt(disco_kernel_view_format(&v.workers[1], line, sizeof line), 0);
        disco_view_free(&v);
    }
    atomic_store(&p->shape, shape & ~0x10u); /* one-shot: MID is not a phase of it */
    disco__ar_progress_piece(p, 0, DISCO_AR_PW(39, 41, DISCO_AR_MID, 1, 1));
    v = take(f);
    ck_assert(v.workers[1].kernel.active);
    ck_assert_int_eq(v.workers[1].kernel.piece[0].state, DISCO_PIECE_QUIET);
    disco_view_free(&v);
    /* A flag value ahead of the epoch steps back past the wrap: from
     * collective 40 (epoch 41), epoch UINT32_MAX is 41 collectives back,
     * before the first: not set. */
    disco__ar_progress_piece(p, 0, DISCO_AR_PW(UINT32_MAX, 41, DISCO_AR_START, 1, 0));
    v = take(f);
    ck_assert_int_eq(v.workers[1].kernel.piece[0].state, DISCO_PIECE_WAITING);
    ck_assert(!v.workers[1].kernel.piece[0].flag_set);
    disco_view_free(&v);
    free(f);
}
END_TEST

Suite *suite_ar_progress(void)
{
    Suite *s = suite_create("ar_progress");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_stalled_member_named, 0, 2);
    tcase_add_test(tc, test_quiet_when_no_wait);
    tcase_add_test(tc, test_format_groups_pieces);
    tcase_add_test(tc, test_hostile_record);
    suite_add_tcase(s, tc);
    return s;
}
