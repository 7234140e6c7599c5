/* test_ring_concurrent.c - the broadcast ring across time, threads and
 * processes: waiting (deadline, abort word, callback), then one writer with
 * forked readers (1 to 8, more than the cores), a reader killed
 * mid-stream, and the threaded form that runs under ThreadSanitizer. The
 * single-process behaviour is in test_ring.c. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/ticks.h"
#include "disco/shm/ring.h"
#include "disco/shm/segment.h"
#include "tests/ring_util.h"
#include "tests/testutil.h"

#define MS 1000000LL

static const disco_wait_t no_wait = {.no_wait = true};

/* ---- waiting: deadline, abort word, callback ---- */

/* A read on an empty ring with a deadline 20 ms ahead returns DISCO_E_TIMEOUT
 * after >= 20 ms and < 1 s; so does a write on a full ring, writing nothing. */
START_TEST(test_wait_deadline)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 100, 0);
    unsigned char buf[64] = {0};
    uint32_t got;
    int64_t t0 = disco_now_ns();
    disco_wait_t w = {.deadline_ns = t0 + 20 * MS};
    CK_STATUS(disco_ring_read(&t.r, 0, buf, sizeof buf, &got, &w), DISCO_E_TIMEOUT);
    double ms = tu_ms_since(t0);
    ck_assert_msg(ms >= 20 && ms < 1000, "disco_ring_read: timed out after %.1f ms", ms);

    for (uint32_t k = 0; k < 8; k++)
        put(&t.r, 10, k, &no_wait);
    t0 = disco_now_ns();
    w.deadline_ns = t0 + 20 * MS;
    CK_STATUS(disco_ring_write(&t.r, buf, 10, &w), DISCO_E_TIMEOUT);
    ms = tu_ms_since(t0);
    ck_assert_msg(ms >= 20 && ms < 1000, "disco_ring_write: timed out after %.1f ms", ms);
    for (uint32_t k = 0; k < 8; k++)
        get(&t.r, 0, 10, k, &no_wait);
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

struct abort_reader {
    disco_ring_t r;
    _Atomic int32_t *abort_word;
    _Atomic int started;
    disco_status_t st;
    double ms;
};

static void *abort_reader_thread(void *arg)
{
    struct abort_reader *a = arg;
    disco_wait_t w = {.abort_word = a->abort_word,
                      .park_slice_ms = 5000,
                      .deadline_ns = disco_now_ns() + 20000 * MS};
    unsigned char buf[64];
    uint32_t got;
    int64_t t0 = disco_now_ns();
    atomic_store(&a->started, 1);
    a->st = disco_ring_read(&a->r, 0, buf, sizeof buf, &got, &w);
    a->ms = tu_ms_since(t0);
    return NULL;
}

/* A set abort word ends a read with its status: set before, or set while the
 * reader waits (then disco_ring_wake_all ends even a 5 s park at once). */
START_TEST(test_wait_abort_word)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 100, 0);
    _Atomic int32_t abort_word = DISCO_E_SHUTDOWN;
    disco_wait_t w = {.abort_word = &abort_word, .deadline_ns = disco_now_ns() + 5000 * MS};
    unsigned char buf[64];
    uint32_t got;
    CK_STATUS(disco_ring_read(&t.r, 0, buf, sizeof buf, &got, &w), DISCO_E_SHUTDOWN);

    atomic_store(&abort_word, 0);
    struct abort_reader a = {.abort_word = &abort_word};
    CK_OK(disco_ring_attach(t.mem, t.size, &a.r));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abort_reader_thread, &a), 0);
    while (!atomic_load(&a.started))
        sched_yield();
    atomic_store_explicit(&abort_word, DISCO_E_WORKER_DIED, memory_order_release);
    disco_ring_wake_all(&t.r);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(a.st == DISCO_E_WORKER_DIED, "disco_ring_read: %s, want DISCO_E_WORKER_DIED",
                  disco_err_name(a.st));
    ck_assert_msg(a.ms < 2000, "abort took %.1f ms (park slice 5 s)", a.ms);
    tring_free(&t);
}
END_TEST

static disco_status_t fail_second_call(void *ctx)
{
    int *calls = ctx;
    return ++*calls >= 2 ? disco_set_error(DISCO_E_WORKER_DIED, "test callback") : DISCO_OK;
}

/* A check callback returning an error ends a ring wait with that error. */
START_TEST(test_wait_check_callback)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 100, 0);
    int calls = 0;
    disco_wait_t w = {.check = fail_second_call,
                      .check_ctx = &calls,
                      .park_slice_ms = 2,
                      .deadline_ns = disco_now_ns() + 5000 * MS};
    unsigned char buf[64];
    uint32_t got;
    CK_STATUS(disco_ring_read(&t.r, 0, buf, sizeof buf, &got, &w), DISCO_E_WORKER_DIED);
    ck_assert_int_eq(calls, 2);
    for (uint32_t k = 0; k < 8; k++)
        put(&t.r, 10, k, &no_wait);
    calls = 0;
    CK_STATUS(disco_ring_write(&t.r, buf, 10, &w), DISCO_E_WORKER_DIED);
    ck_assert_int_eq(calls, 2);
    tring_free(&t);
}
END_TEST

/* ---- the stream: one writer, many readers ---- */

/* Message i of a stream: a header (sequence number, length, checksum of the
 * body) and a body derived from i, 16 to 48 bytes (one 64-byte slot); with
 * `span`, every 16th is 49 to 688 bytes and spans 2 to 15 slots. */
struct stream_hdr {
    uint64_t seq;
    uint32_t len;
    uint32_t sum;
};

#define STREAM_MAX   (sizeof(struct stream_hdr) + 48 + 640)
#define STREAM_SLOTS 512u

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint32_t stream_len(uint64_t i, bool span)
{
    uint32_t m = (uint32_t)mix64(i);
    uint32_t body = span && i % 16 == 5 ? 33 + m % 640 : m % 33;
    return (uint32_t)sizeof(struct stream_hdr) + body;
}

static uint32_t fnv1a(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static uint32_t stream_make(uint64_t i, bool span, unsigned char *buf)
{
    uint32_t len = stream_len(i, span);
    uint64_t m = mix64(~i);
    unsigned char *body = buf + sizeof(struct stream_hdr);
    for (uint32_t j = 0; j < len - sizeof(struct stream_hdr); j++)
        body[j] = (unsigned char)((m >> ((j & 7) * 8)) + j);
    struct stream_hdr h = {
        .seq = i, .len = len, .sum = fnv1a(body, len - sizeof(struct stream_hdr))};
    memcpy(buf, &h, sizeof h);
    return len;
}

/* Reads `count` stream messages as reader and checks each: none lost,
 * duplicated or reordered (seq), length and checksum right; then that
 * nothing follows. Returns NULL, or what went wrong (in why). */
static const char *stream_read(disco_ring_t *r, uint32_t reader, uint64_t count, bool span,
                               const disco_wait_t *w, char *why, size_t whylen)
{
    unsigned char buf[STREAM_MAX];
    for (uint64_t i = 0; i < count; i++) {
        uint32_t got;
        disco_status_t st = disco_ring_read(r, reader, buf, sizeof buf, &got, w);
        if (st != DISCO_OK) {
            snprintf(why, whylen, "reader %u, msg %llu: disco_ring_read: %s (%s)", reader,
                     (unsigned long long)i, disco_err_name(st), disco_last_error());
            return why;
        }
        struct stream_hdr h;
        memcpy(&h, buf, sizeof h);
        const char *bad = NULL;
        if (got < sizeof h)
            bad = "short message";
        else if (h.seq != i)
            bad = h.seq < i ? "duplicate or reordered" : "lost";
        else if (h.len != got || got != stream_len(i, span))
            bad = "wrong length";
        else if (fnv1a(buf + sizeof h, got - sizeof h) != h.sum)
            bad = "checksum";
        if (bad != NULL) {
            snprintf(why, whylen, "reader %u, msg %llu: %s (seq %llu, %u bytes)", reader,
                     (unsigned long long)i, bad, (unsigned long long)h.seq, got);
            return why;
        }
    }
    uint32_t got;
    disco_status_t st = disco_ring_read(r, reader, buf, sizeof buf, &got, &no_wait);
    if (st != DISCO_E_AGAIN) {
        snprintf(why, whylen, "reader %u: after the last message: %s", reader, disco_err_name(st));
        return why;
    }
    return NULL;
}

/* Writes stream messages [from, count); stops at the first error and
 * returns it, with *next_out the message that failed. */
static disco_status_t stream_write(disco_ring_t *r, uint64_t from, uint64_t count, bool span,
                                   const disco_wait_t *w, uint64_t *next_out)
{
    unsigned char buf[STREAM_MAX];
    for (uint64_t i = from; i < count; i++) {
        uint32_t len = stream_make(i, span, buf);
        disco_status_t st = disco_ring_write(r, buf, len, w);
        if (st != DISCO_OK) {
            *next_out = i;
            return st;
        }
    }
    *next_out = count;
    return DISCO_OK;
}

/* A shared segment holding a stream ring at the start of its data. */
static disco_ring_t *stream_segment(disco_segment_t *seg, uint32_t nslots, uint32_t nreaders,
                                    uint32_t batch, disco_ring_t *r)
{
    disco_ring_config_t cfg = {.nslots = nslots,
                               .slot_size = 64,
                               .nreaders = nreaders,
                               .max_msg = STREAM_MAX,
                               .batch = batch,
                               .start_pos = (1ULL << 32) - 3000}; /* crosses 2^32 under load */
    size_t need = disco_ring_footprint(&cfg);
    CK_OK(disco_segment_create("disco-test-ring", need, seg));
    CK_OK(disco_ring_init(disco_segment_data(seg), need, &cfg, r));
    return r;
}

/* Writer's check callback: a reader that exited before the end is a failure
 * (peeked with WNOWAIT, so waitpid still reports its status later). */
struct children {
    const pid_t *pids;
    uint32_t n;
};

static disco_status_t any_child_gone(void *ctx)
{
    const struct children *c = ctx;
    for (uint32_t i = 0; i < c->n; i++) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)c->pids[i], &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid != 0)
            return disco_set_error(DISCO_E_PEER_DEAD, "reader %u (pid %d) ended early", i,
                                   (int)c->pids[i]);
    }
    return DISCO_OK;
}

#define STREAM_COUNT 1000000ull

/* One writer process and 1, 2, 4, 8 forked readers (up to 4x the cores)
 * pass a million variable-length messages, some spanning slots: each reader
 * sees every message once, in order, intact. Odd readers map the segment
 * afresh (another address), so the ring works through offsets alone. Loops
 * 4 and 5 have readers publish in batches of 64 (ring.h), as sessions'
 * workers do. */
START_TEST(test_stream_processes)
{
    static const uint32_t nreaders_by_loop[] = {1, 2, 4, 8, 2, 8};
    const uint32_t nreaders = nreaders_by_loop[_i];
    disco_segment_t seg;
    disco_ring_t r;
    stream_segment(&seg, STREAM_SLOTS, nreaders, _i >= 4 ? 64 : 0, &r);
    const int64_t deadline = disco_now_ns() + 150000 * MS;

    pid_t pids[8];
    for (uint32_t k = 0; k < nreaders; k++) {
        pids[k] = tu_fork();
        if (pids[k] != 0)
            continue;
        disco_segment_t mine = seg;
        if (k % 2 == 1) {
            disco_status_t st = disco_segment_attach(seg.fd, &mine);
            if (st != DISCO_OK)
                tu_child_fail("disco_segment_attach: %s", disco_err_name(st));
        }
        disco_ring_t rr;
        disco_status_t st =
            disco_ring_attach(disco_segment_data(&mine), disco_segment_data_size(&mine), &rr);
        if (st != DISCO_OK)
            tu_child_fail("disco_ring_attach: %s (%s)", disco_err_name(st), disco_last_error());
        disco_ring_set_reader_pid(&rr, k, getpid());
        disco_wait_t w = {.deadline_ns = deadline};
        char why[256];
        if (stream_read(&rr, k, STREAM_COUNT, true, &w, why, sizeof why) != NULL)
            tu_child_fail("%s", why);
        _exit(0);
    }
    struct children ch = {pids, nreaders};
    disco_wait_t w = {.deadline_ns = deadline, .check = any_child_gone, .check_ctx = &ch};
    int64_t t0 = disco_now_ns();
    uint64_t next;
    disco_status_t st = stream_write(&r, 0, STREAM_COUNT, true, &w, &next);
    double write_ms = tu_ms_since(t0);
    if (st != DISCO_OK) {
        char why[300];
        snprintf(why, sizeof why, "disco_ring_write(msg %llu): %s (%s)", (unsigned long long)next,
                 disco_err_name(st), disco_last_error());
        tu_kill_all(pids, nreaders); /* the rest would wait for their deadline */
        ck_abort_msg("%s", why);
    }
    for (uint32_t k = 0; k < nreaders; k++)
        tu_wait_ok(pids[k], "stream reader");
    for (uint32_t k = 0; k < nreaders; k++)
        ck_assert_int_eq(disco_ring_reader_pid(&r, k), pids[k]);
    fprintf(stderr,
            "ring: %llu messages to %u reader processes: written in %.0f ms, all read "
            "and checked in %.0f ms\n",
            STREAM_COUNT, nreaders, write_ms, tu_ms_since(t0));
    disco_segment_close(&seg);
    ck_assert_int_eq(tu_dev_shm_disco_entries(), 0);
}
END_TEST

/* The killed-reader test: the writer's check callback reaps children and
 * marks a dead reader. */
struct reaper {
    disco_ring_t *r;
    pid_t pids[2];
    int status[2]; /* wait status once reaped */
    int reaped[2];
};

static disco_status_t reap_readers(void *ctx)
{
    struct reaper *p = ctx;
    for (uint32_t i = 0; i < 2; i++) {
        if (p->reaped[i] || waitpid(p->pids[i], &p->status[i], WNOHANG) != p->pids[i])
            continue;
        p->reaped[i] = 1;
        disco_ring_mark_dead(p->r, i);
        return disco_set_error(DISCO_E_PEER_DEAD, "ring reader %u (pid %d) died", i,
                               (int)p->pids[i]);
    }
    return DISCO_OK;
}

#define KILL_COUNT 200000ull
#define KILL_AFTER 5000ull

/* Writer + 2 forked readers; reader 1 SIGKILLs itself after 5000 messages.
 * The writer's wait learns of it through its callback (waitpid + mark_dead),
 * gets DISCO_E_PEER_DEAD within 2 s of the death, goes on, and reader 0
 * receives all 200k messages in order. Messages fit one slot here: a peer
 * death inside a spanning write would leave it torn (documented as fatal). */
START_TEST(test_stream_killed_reader)
{
    disco_segment_t seg;
    disco_ring_t r;
    disco_ring_config_t cfg = {.nslots = 64, .slot_size = 64, .nreaders = 2, .max_msg = STREAM_MAX};
    size_t need = disco_ring_footprint(&cfg);
    CK_OK(disco_segment_create("disco-test-kill", need + 64, &seg));
    CK_OK(disco_ring_init((char *)disco_segment_data(&seg) + 64, need, &cfg, &r));
    _Atomic int64_t *death_ns = disco_segment_data(&seg); /* the doomed reader's time of death */
    const int64_t deadline = disco_now_ns() + 60000 * MS;

    struct reaper rp = {.r = &r};
    for (uint32_t k = 0; k < 2; k++) {
        rp.pids[k] = tu_fork();
        if (rp.pids[k] != 0)
            continue;
        disco_wait_t w = {.deadline_ns = deadline};
        char why[256];
        if (k == 0) {
            if (stream_read(&r, 0, KILL_COUNT, false, &w, why, sizeof why) != NULL)
                tu_child_fail("%s", why);
            _exit(0);
        }
        unsigned char buf[STREAM_MAX];
        for (uint64_t i = 0; i < KILL_AFTER; i++) {
            uint32_t got;
            if (disco_ring_read(&r, 1, buf, sizeof buf, &got, &w) != DISCO_OK)
                tu_child_fail("doomed reader: read %llu failed", (unsigned long long)i);
        }
        atomic_store(death_ns, disco_now_ns());
        raise(SIGKILL);
        _exit(4); /* not reached */
    }

    disco_wait_t w = {.deadline_ns = deadline, .check = reap_readers, .check_ctx = &rp};
    uint64_t next = 0;
    int peer_dead = 0;
    while (next < KILL_COUNT) {
        disco_status_t st = stream_write(&r, next, KILL_COUNT, false, &w, &next);
        if (st == DISCO_OK)
            break;
        if (st != DISCO_E_PEER_DEAD || peer_dead || !rp.reaped[1] || rp.reaped[0]) {
            char why[300];
            snprintf(why, sizeof why,
                     "disco_ring_write(msg %llu): %s (%s), want one DISCO_E_PEER_DEAD for reader 1",
                     (unsigned long long)next, disco_err_name(st), disco_last_error());
            tu_kill_all(rp.pids, 2);
            ck_abort_msg("%s", why);
        }
        peer_dead = 1;
        double ms = (double)(disco_now_ns() - atomic_load(death_ns)) / 1e6;
        ck_assert_msg(ms < 2000, "DISCO_E_PEER_DEAD came %.1f ms after the death", ms);
        fprintf(stderr, "ring: writer learned of the killed reader after %.2f ms\n", ms);
    }
    ck_assert_msg(peer_dead, "disco_ring_write never returned DISCO_E_PEER_DEAD");
    ck_assert_msg(WIFSIGNALED(rp.status[1]) && WTERMSIG(rp.status[1]) == SIGKILL,
                  "doomed reader: wait status %#x, want SIGKILL", rp.status[1]);
    ck_assert_msg(!disco_ring_reader_alive(&r, 1), "reader 1 still alive");
    tu_wait_ok(rp.pids[0], "surviving reader"); /* not reaped: its death would have failed above */
    disco_segment_close(&seg);
}
END_TEST

/* ---- the threaded form (the one ThreadSanitizer checks) ---- */

struct stream_thread {
    disco_ring_t r;
    uint32_t reader;
    uint64_t count;
    int64_t deadline;
    _Atomic int32_t *quit; /* set by whoever fails first; ends the others' waits */
    const char *err;
    char why[256];
};

static void *stream_reader_thread(void *arg)
{
    struct stream_thread *s = arg;
    disco_wait_t w = {.deadline_ns = s->deadline, .abort_word = s->quit};
    s->err = stream_read(&s->r, s->reader, s->count, true, &w, s->why, sizeof s->why);
    if (s->err != NULL) {
        atomic_store_explicit(s->quit, DISCO_E_PEER_DEAD, memory_order_release);
        disco_ring_wake_all(&s->r);
    }
    return NULL;
}

#define THREAD_COUNT   200000ull
#define THREAD_READERS 3u

/* One writer thread and three reader threads on one ring (own handles from
 * disco_ring_attach) pass 200k messages, some spanning: every reader sees
 * every message once, in order, intact. */
START_TEST(test_stream_threads)
{
    struct tring t;
    tring_init(&t, STREAM_SLOTS, 64, THREAD_READERS, STREAM_MAX, (1ULL << 32) - 3000);
    const int64_t deadline = disco_now_ns() + 150000 * MS;
    static struct stream_thread st[THREAD_READERS];
    static _Atomic int32_t quit;
    pthread_t th[THREAD_READERS];
    for (uint32_t k = 0; k < THREAD_READERS; k++) {
        st[k] = (struct stream_thread){
            .reader = k, .count = THREAD_COUNT, .deadline = deadline, .quit = &quit};
        CK_OK(disco_ring_attach(t.mem, t.size, &st[k].r));
        ck_assert_int_eq(pthread_create(&th[k], NULL, stream_reader_thread, &st[k]), 0);
    }
    disco_wait_t w = {.deadline_ns = deadline, .abort_word = &quit};
    int64_t t0 = disco_now_ns();
    uint64_t next;
    disco_status_t rc = stream_write(&t.r, 0, THREAD_COUNT, true, &w, &next);
    if (rc != DISCO_OK) {
        atomic_store_explicit(&quit, rc, memory_order_release);
        disco_ring_wake_all(&t.r);
    }
    for (uint32_t k = 0; k < THREAD_READERS; k++)
        ck_assert_int_eq(pthread_join(th[k], NULL), 0);
    _Static_assert(THREAD_READERS == 3, "the message below names three readers");
    ck_assert_msg(rc == DISCO_OK && !st[0].err && !st[1].err && !st[2].err,
                  "disco_ring_write(msg %llu): %s (%s); readers: [%s] [%s] [%s]",
                  (unsigned long long)next, disco_err_name(rc), disco_last_error(),
                  st[0].err ? st[0].why : "ok", st[1].err ? st[1].why : "ok",
                  st[2].err ? st[2].why : "ok");
    fprintf(stderr, "ring: %llu messages to %u reader threads in %.0f ms\n", THREAD_COUNT,
            THREAD_READERS, tu_ms_since(t0));
    tring_free(&t);
}
END_TEST

Suite *suite_ring_concurrent(void)
{
    Suite *s = suite_create("ring_concurrent");
    TCase *tc = tcase_create("waiting");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_wait_deadline);
    tcase_add_test(tc, test_wait_abort_word);
    tcase_add_test(tc, test_wait_check_callback);
    suite_add_tcase(s, tc);

    tc = tcase_create("stream");
    tcase_set_timeout(tc, 180);
    tcase_add_loop_test(tc, test_stream_processes, 0, 6);
    tcase_add_test(tc, test_stream_killed_reader);
    tcase_add_test(tc, test_stream_threads);
    suite_add_tcase(s, tc);
    return s;
}
