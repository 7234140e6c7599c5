/* test_ring.c - the broadcast ring: single-process behaviour, then one writer
 * with forked readers (1 to 8, more than the cores), a reader killed mid-stream,
 * and the threaded form that runs under ThreadSanitizer. */
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

#include "shm/ring_internal.h"
#include "shm/ticks.h"
#include "disco/shm/ring.h"
#include "disco/shm/segment.h"
#include "tests/testutil.h"

#define MS 1000000LL

/* ---- helpers ---- */

/* A ring in private, cache-line aligned memory (single-process tests). */
struct tring {
    void *mem;
    size_t size;
    disco_ring_t r;
};

static void tring_init(struct tring *t, uint32_t nslots, uint32_t slot_size, uint32_t nreaders,
                       uint32_t max_msg, uint64_t start_pos)
{
    disco_ring_config_t cfg = {.nslots = nslots,
                               .slot_size = slot_size,
                               .nreaders = nreaders,
                               .max_msg = max_msg,
                               .start_pos = start_pos};
    t->size = disco_ring_footprint(&cfg);
    ck_assert_msg(t->size != 0, "disco_ring_footprint: 0 for %u x %u, %u readers", nslots,
                  slot_size, nreaders);
    t->mem = aligned_alloc(DISCO_CACHE_LINE, (t->size + 63) / 64 * 64);
    ck_assert_ptr_nonnull(t->mem);
    CK_OK(disco_ring_init(t->mem, t->size, &cfg, &t->r));
}

static void tring_free(struct tring *t)
{
    free(t->mem);
}

static const disco_wait_t no_wait = {.no_wait = true};

/* Message k of a test: len bytes that depend on k. */
static void make_msg(unsigned char *buf, uint32_t len, uint32_t k)
{
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(k * 37u + i * 11u + (i >> 8));
}

static int msg_ok(const unsigned char *buf, uint32_t len, uint32_t k)
{
    for (uint32_t i = 0; i < len; i++)
        if (buf[i] != (unsigned char)(k * 37u + i * 11u + (i >> 8)))
            return 0;
    return 1;
}

/* Writes message k (len bytes) and asserts DISCO_OK. */
static void put(disco_ring_t *r, uint32_t len, uint32_t k, const disco_wait_t *w)
{
    unsigned char buf[8192];
    ck_assert_uint_le(len, sizeof buf);
    make_msg(buf, len, k);
    disco_status_t st = disco_ring_write(r, buf, len, w);
    ck_assert_msg(st == DISCO_OK, "disco_ring_write(msg %u, %u bytes): %s (%s)", k, len,
                  disco_err_name(st), disco_last_error());
}

/* Reads the next message as reader and asserts it is message k of len bytes. */
static void get(disco_ring_t *r, uint32_t reader, uint32_t len, uint32_t k, const disco_wait_t *w)
{
    unsigned char buf[8192];
    uint32_t got = UINT32_MAX;
    disco_status_t st = disco_ring_read(r, reader, buf, sizeof buf, &got, w);
    ck_assert_msg(st == DISCO_OK, "disco_ring_read(reader %u, msg %u): %s (%s)", reader, k,
                  disco_err_name(st), disco_last_error());
    ck_assert_msg(got == len, "disco_ring_read(reader %u, msg %u): %u bytes, want %u", reader, k,
                  got, len);
    ck_assert_msg(msg_ok(buf, len, k), "disco_ring_read(reader %u, msg %u): wrong content", reader,
                  k);
}

/* Asserts that reader has nothing to read. */
static void empty(disco_ring_t *r, uint32_t reader)
{
    unsigned char buf[16];
    uint32_t got;
    CK_STATUS(disco_ring_read(r, reader, buf, sizeof buf, &got, &no_wait), DISCO_E_AGAIN);
}

/* ---- geometry, init, attach ---- */

/* Invalid geometry has footprint 0 and init refuses it with DISCO_E_INVAL;
 * valid geometry covers header, reader lines and slots. */
START_TEST(test_footprint_and_init)
{
    const disco_ring_config_t bad[] = {
        {.nslots = 0, .slot_size = 64, .nreaders = 1},
        {.nslots = 1, .slot_size = 64, .nreaders = 1},
        {.nslots = 12, .slot_size = 64, .nreaders = 1},
        {.nslots = 8, .slot_size = 0, .nreaders = 1},
        {.nslots = 8, .slot_size = 32, .nreaders = 1},
        {.nslots = 8, .slot_size = 100, .nreaders = 1},
        {.nslots = 8, .slot_size = 64, .nreaders = 0},
        {.nslots = 8, .slot_size = 64, .nreaders = DISCO_RING_MAX_READERS + 1},
        {.nslots = 1u << 31, .slot_size = 1024, .nreaders = 1}, /* 2 TiB */
    };
    static _Alignas(64) unsigned char mem[1 << 16];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(disco_ring_footprint(&bad[i]) == 0,
                      "disco_ring_footprint(%u x %u, %u readers): %zu, want 0", bad[i].nslots,
                      bad[i].slot_size, bad[i].nreaders, disco_ring_footprint(&bad[i]));
        disco_ring_t r;
        CK_STATUS(disco_ring_init(mem, sizeof mem, &bad[i], &r), DISCO_E_INVAL);
    }
    disco_ring_config_t good = {.nslots = 16, .slot_size = 128, .nreaders = 3, .max_msg = 100};
    size_t need = disco_ring_footprint(&good);
    ck_assert_msg(need >= 16 * 128 + 3 * DISCO_CACHE_LINE, "disco_ring_footprint: %zu", need);
    ck_assert_msg(need <= sizeof mem, "footprint %zu", need);
    disco_ring_t r;
    CK_STATUS(disco_ring_init(mem, need - 1, &good, &r), DISCO_E_INVAL);
    CK_STATUS(disco_ring_init(mem + 8, need, &good, &r), DISCO_E_INVAL);
    CK_STATUS(disco_ring_init(NULL, need, &good, &r), DISCO_E_INVAL);
    CK_OK(disco_ring_init(mem, need, &good, &r));
    ck_assert_uint_eq(r.nreaders, 3);
    ck_assert_uint_eq(r.max_msg, 100);
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_msg(disco_ring_reader_alive(&r, i), "reader %u not alive after init", i);
}
END_TEST

/* Attach refuses garbage, NULL, a too-small mapping and another layout
 * version with DISCO_E_BAD_MAGIC; a good attach gives a working second handle. */
START_TEST(test_attach)
{
    static _Alignas(64) unsigned char mem[1 << 14];
    disco_ring_t r, a;
    memset(mem, 0xA5, sizeof mem);
    CK_STATUS(disco_ring_attach(mem, sizeof mem, &a), DISCO_E_BAD_MAGIC);
    memset(mem, 0, sizeof mem);
    CK_STATUS(disco_ring_attach(mem, sizeof mem, &a), DISCO_E_BAD_MAGIC);
    CK_STATUS(disco_ring_attach(NULL, sizeof mem, &a), DISCO_E_BAD_MAGIC);

    disco_ring_config_t cfg = {.nslots = 8, .slot_size = 64, .nreaders = 2, .max_msg = 1000};
    size_t need = disco_ring_footprint(&cfg);
    CK_OK(disco_ring_init(mem, need, &cfg, &r));
    CK_STATUS(disco_ring_attach(mem, need - 1, &a), DISCO_E_BAD_MAGIC);
    CK_STATUS(disco_ring_attach(mem, 16, &a), DISCO_E_BAD_MAGIC);
    /* The header is the magic (8 bytes), then the layout version. */
    uint32_t *layout = (uint32_t *)(mem + 8);
    ck_assert_uint_eq(*layout, DISCO_RING_LAYOUT);
    *layout = DISCO_RING_LAYOUT + 1;
    CK_STATUS(disco_ring_attach(mem, need, &a), DISCO_E_BAD_MAGIC);
    *layout = DISCO_RING_LAYOUT;

    CK_OK(disco_ring_attach(mem, need, &a));
    put(&r, 10, 1, NULL);
    put(&r, 200, 2, NULL);
    get(&a, 0, 10, 1, NULL);
    get(&a, 0, 200, 2, NULL);
    get(&r, 1, 10, 1, NULL);
    get(&a, 1, 200, 2, NULL);
    empty(&r, 0);
    empty(&a, 1);
    put(&a, 5, 3, NULL); /* the attached handle can write too (one writer at a time) */
    get(&r, 0, 5, 3, NULL);
}
END_TEST

/* ---- single-process behaviour ---- */

/* An empty ring read with no_wait gives DISCO_E_AGAIN and leaves *len_out alone. */
START_TEST(test_empty_no_wait)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 256, 0);
    unsigned char buf[64];
    uint32_t got = 12345;
    CK_STATUS(disco_ring_read(&t.r, 0, buf, sizeof buf, &got, &no_wait), DISCO_E_AGAIN);
    ck_assert_uint_eq(got, 12345);
    tring_free(&t);
}
END_TEST

/* nslots single-slot messages fill the ring; a further no_wait write gives
 * DISCO_E_AGAIN until a read frees a slot; order is kept throughout. */
START_TEST(test_fill_to_full)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 256, 0);
    for (uint32_t k = 0; k < 8; k++)
        put(&t.r, 40, k, &no_wait);
    unsigned char buf[48] = {0};
    CK_STATUS(disco_ring_write(&t.r, buf, 40, &no_wait), DISCO_E_AGAIN);
    get(&t.r, 0, 40, 0, NULL);
    put(&t.r, 40, 8, &no_wait);
    CK_STATUS(disco_ring_write(&t.r, buf, 40, &no_wait), DISCO_E_AGAIN);
    for (uint32_t k = 1; k <= 8; k++)
        get(&t.r, 0, 40, k, &no_wait);
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

/* With two readers a full ring waits for the slower one; once it is marked
 * dead the writer goes on without it, and the dead reader, lapped, gets
 * DISCO_E_BROKEN. */
START_TEST(test_full_waits_for_slowest)
{
    struct tring t;
    tring_init(&t, 8, 64, 2, 256, 0);
    for (uint32_t k = 0; k < 8; k++)
        put(&t.r, 20, k, &no_wait);
    for (uint32_t k = 0; k < 8; k++)
        get(&t.r, 0, 20, k, &no_wait);
    unsigned char buf[32] = {0};
    CK_STATUS(disco_ring_write(&t.r, buf, 20, &no_wait), DISCO_E_AGAIN);
    ck_assert_uint_eq(disco_ring_slowest_reader(&t.r), 1);
    get(&t.r, 1, 20, 0, &no_wait);
    put(&t.r, 20, 8, &no_wait);
    CK_STATUS(disco_ring_write(&t.r, buf, 20, &no_wait), DISCO_E_AGAIN);

    disco_ring_mark_dead(&t.r, 1);
    ck_assert_msg(!disco_ring_reader_alive(&t.r, 1), "reader 1 alive after mark_dead");
    ck_assert_uint_eq(disco_ring_slowest_reader(&t.r), 0);
    for (uint32_t k = 9; k < 20; k++) {
        get(&t.r, 0, 20, k - 1, &no_wait);
        put(&t.r, 20, k, &no_wait);
    }
    get(&t.r, 0, 20, 19, &no_wait);
    empty(&t.r, 0);
    uint32_t got;
    CK_STATUS(disco_ring_read(&t.r, 1, buf, sizeof buf, &got, &no_wait), DISCO_E_BROKEN);
    disco_ring_mark_dead(&t.r, 0);
    ck_assert_uint_eq(disco_ring_slowest_reader(&t.r), UINT32_MAX);
    tring_free(&t);
}
END_TEST

/* Positions wrap past 2^32 and past 2^64: several laps of single-slot and
 * spanning messages, with two readers, keep order and content. */
START_TEST(test_wrap_around)
{
    const uint64_t starts[] = {(1ULL << 32) - 5, UINT64_MAX - 5};
    for (size_t s = 0; s < 2; s++) {
        struct tring t;
        tring_init(&t, 8, 64, 2, 1024, starts[s]);
        uint32_t k = 0;
        for (int lap = 0; lap < 6; lap++) {
            for (uint32_t i = 0; i < 8; i++)
                put(&t.r, 1 + (k + i) % 48, k + i, &no_wait); /* fills the ring */
            unsigned char buf[8] = {0};
            CK_STATUS(disco_ring_write(&t.r, buf, 1, &no_wait), DISCO_E_AGAIN);
            for (uint32_t i = 0; i < 8; i++)
                get(&t.r, 0, 1 + (k + i) % 48, k + i, &no_wait);
            for (uint32_t i = 0; i < 8; i++)
                get(&t.r, 1, 1 + (k + i) % 48, k + i, &no_wait);
            k += 8;
            /* spanning: 3 and 5 slots, straddling the wrap point on some lap */
            put(&t.r, 130, k, &no_wait);
            put(&t.r, 200, k + 1, &no_wait);
            get(&t.r, 0, 130, k, &no_wait);
            get(&t.r, 1, 130, k, &no_wait);
            get(&t.r, 0, 200, k + 1, &no_wait);
            get(&t.r, 1, 200, k + 1, &no_wait);
            k += 2;
        }
        empty(&t.r, 0);
        empty(&t.r, 1);
        tring_free(&t);
    }
}
END_TEST

/* Messages of 0, 1, payload-1, payload, payload+1 bytes, several slots and
 * exactly the whole ring round-trip, alone and back to back. */
START_TEST(test_spanning_sizes)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 4096, 0);
    const uint32_t p = t.r.payload;
    ck_assert_uint_eq(p, 64 - DISCO_RING_SLOT_HDR);
    const uint32_t sizes[] = {0, 1, p - 1, p, p + 1, 2 * p, 2 * p + 1, 5 * p - 3, 8 * p};
    const size_t n = sizeof sizes / sizeof sizes[0];
    for (size_t i = 0; i < n; i++) {
        put(&t.r, sizes[i], (uint32_t)i, &no_wait);
        get(&t.r, 0, sizes[i], (uint32_t)i, &no_wait);
    }
    /* Back to back in pairs (at most 4 slots each: the pair may fill the
     * ring exactly), then drained. */
    uint32_t k = 100;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t a = sizes[i] > 4 * p ? 4 * p : sizes[i];
        uint32_t b = sizes[i + 1] > 4 * p ? 4 * p : sizes[i + 1];
        put(&t.r, a, k, &no_wait);
        put(&t.r, b, k + 1, &no_wait);
        get(&t.r, 0, a, k, &no_wait);
        get(&t.r, 0, b, k + 1, &no_wait);
        k += 2;
    }
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

struct big_reader {
    disco_ring_t r;
    uint32_t count;
    const uint32_t *sizes;
    int ok;
    char why[128];
};

static void *big_reader_thread(void *arg)
{
    struct big_reader *b = arg;
    static unsigned char buf[1 << 16];
    disco_wait_t w = {.deadline_ns = disco_now_ns() + 20000 * MS};
    b->ok = 1;
    for (uint32_t k = 0; k < b->count; k++) {
        uint32_t got;
        disco_status_t st = disco_ring_read(&b->r, 0, buf, sizeof buf, &got, &w);
        if (st != DISCO_OK || got != b->sizes[k] || !msg_ok(buf, got, k)) {
            snprintf(b->why, sizeof b->why, "msg %u: %s, %u bytes (want %u)", k, disco_err_name(st),
                     got, b->sizes[k]);
            b->ok = 0;
            return NULL;
        }
    }
    return NULL;
}

/* Messages longer than the whole ring (up to ~170 laps of an 8-slot ring)
 * go through while a reader thread consumes concurrently. */
START_TEST(test_larger_than_ring)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 1 << 16, 0);
    const uint32_t sizes[] = {385, 1000, 3, 48 * 8 * 3 + 1, 65536, 0, 4097, 777};
    struct big_reader b = {.count = sizeof sizes / sizeof sizes[0], .sizes = sizes};
    CK_OK(disco_ring_attach(t.mem, t.size, &b.r));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, big_reader_thread, &b), 0);
    static unsigned char buf[1 << 16];
    disco_wait_t w = {.deadline_ns = disco_now_ns() + 20000 * MS};
    for (uint32_t k = 0; k < b.count; k++) {
        make_msg(buf, sizes[k], k);
        disco_status_t st = disco_ring_write(&t.r, buf, sizes[k], &w);
        ck_assert_msg(st == DISCO_OK, "disco_ring_write(%u bytes): %s (%s)", sizes[k],
                      disco_err_name(st), disco_last_error());
    }
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(b.ok, "reader thread: %s", b.why);
    tring_free(&t);
}
END_TEST

/* len > max_msg gives DISCO_E_MSG_TOO_BIG and changes nothing: the messages
 * around it read fine; len == max_msg is accepted. */
START_TEST(test_oversize_refused)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 100, 0);
    put(&t.r, 30, 1, &no_wait);
    unsigned char buf[200] = {0};
    CK_STATUS(disco_ring_write(&t.r, buf, 101, &no_wait), DISCO_E_MSG_TOO_BIG);
    CK_STATUS(disco_ring_write(&t.r, buf, UINT32_MAX, NULL), DISCO_E_MSG_TOO_BIG);
    put(&t.r, 100, 2, &no_wait);
    get(&t.r, 0, 30, 1, &no_wait);
    get(&t.r, 0, 100, 2, &no_wait);
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

/* A stamped write reads the trace clock as it publishes: the stamp lies
 * between reads taken before and after the write, a spanning message is
 * stamped once, and a refused or timed-out write leaves the stamp alone.
 * The read prefetch changes nothing a reader sees. */
START_TEST(test_write_stamped)
{
    struct tring t;
    tring_init(&t, 4, 64, 2, 1000, 0);
    unsigned char buf[1000];
    for (uint32_t len = 0; len <= 130; len += 65) { /* 1, 2 and 3 slots */
        make_msg(buf, len, len);
        uint64_t stamp = 0, before = disco__ticks();
        CK_OK(disco__ring_write_stamped(&t.r, buf, len, &no_wait, &stamp));
        uint64_t after = disco__ticks();
        ck_assert_msg(stamp >= before && stamp <= after,
                      "%u bytes: stamp %llu outside [%llu, %llu]", len, (unsigned long long)stamp,
                      (unsigned long long)before, (unsigned long long)after);
        disco_ring_prefetch_read(&t.r, 0);
        disco_ring_prefetch_read(&t.r, 7); /* no such reader: ignored */
        get(&t.r, 0, len, len, &no_wait);
        get(&t.r, 1, len, len, &no_wait);
    }
    uint64_t stamp = 42;
    CK_STATUS(disco__ring_write_stamped(&t.r, buf, 1001, &no_wait, &stamp), DISCO_E_MSG_TOO_BIG);
    ck_assert_uint_eq(stamp, 42);
    for (uint32_t k = 0; k < 4; k++) /* fill the ring */
        put(&t.r, 10, k, &no_wait);
    CK_STATUS(disco__ring_write_stamped(&t.r, buf, 10, &no_wait, &stamp), DISCO_E_AGAIN);
    ck_assert_uint_eq(stamp, 42);
    for (uint32_t k = 0; k < 4; k++) {
        get(&t.r, 0, 10, k, &no_wait);
        get(&t.r, 1, 10, k, &no_wait);
    }
    make_msg(buf, 10, 9);
    CK_OK(disco__ring_write_stamped(&t.r, buf, 10, &no_wait, NULL)); /* no stamp asked */
    get(&t.r, 0, 10, 9, &no_wait);
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

/* Regression: the slot count of a message was computed in 32 bits, so a
 * length near UINT32_MAX (allowed by max_msg) wrapped to 0 slots and the
 * write "succeeded" having written nothing. It must instead start writing and
 * then time out waiting for a reader. */
START_TEST(test_huge_len_slot_count)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, UINT32_MAX, 0);
    size_t n = (size_t)UINT32_MAX;
    void *src = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_msg(src != MAP_FAILED, "mmap 4 GiB: %s", strerror(errno));
    disco_wait_t w = {.deadline_ns = disco_now_ns() + 20 * MS};
    CK_STATUS(disco_ring_write(&t.r, src, UINT32_MAX - 5, &w), DISCO_E_TIMEOUT);
    munmap(src, n);
    tring_free(&t);
}
END_TEST

/* A buffer too small gives DISCO_E_BUF_TOO_SMALL with *len_out set to the
 * message length; the message stays and reads whole with a big enough buffer. */
START_TEST(test_buf_too_small)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 1000, 0);
    put(&t.r, 100, 7, &no_wait);
    put(&t.r, 0, 8, &no_wait);
    unsigned char buf[100];
    uint32_t got = 0;
    CK_STATUS(disco_ring_read(&t.r, 0, buf, 10, &got, &no_wait), DISCO_E_BUF_TOO_SMALL);
    ck_assert_uint_eq(got, 100);
    got = 0;
    CK_STATUS(disco_ring_read(&t.r, 0, buf, 99, &got, &no_wait), DISCO_E_BUF_TOO_SMALL);
    ck_assert_uint_eq(got, 100);
    get(&t.r, 0, 100, 7, &no_wait);
    got = 99;
    CK_OK(disco_ring_read(&t.r, 0, buf, 0, &got, &no_wait)); /* empty message, no room needed */
    ck_assert_uint_eq(got, 0);
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

/* A reader index out of range gives DISCO_E_INVAL. */
START_TEST(test_bad_reader)
{
    struct tring t;
    tring_init(&t, 8, 64, 2, 100, 0);
    put(&t.r, 10, 1, &no_wait);
    unsigned char buf[16];
    uint32_t got;
    CK_STATUS(disco_ring_read(&t.r, 2, buf, sizeof buf, &got, &no_wait), DISCO_E_INVAL);
    CK_STATUS(disco_ring_read(&t.r, UINT32_MAX, buf, sizeof buf, &got, NULL), DISCO_E_INVAL);
    ck_assert_int_eq(disco_ring_reader_pid(&t.r, 2), 0);
    ck_assert_msg(!disco_ring_reader_alive(&t.r, 2), "reader 2 of 2 alive");
    disco_ring_set_reader_pid(&t.r, 1, 4242);
    ck_assert_int_eq(disco_ring_reader_pid(&t.r, 1), 4242);
    disco_ring_set_reader_pid(&t.r, 7, 1); /* ignored */
    get(&t.r, 1, 10, 1, &no_wait);
    tring_free(&t);
}
END_TEST

/* The SPSC wrappers carry single-slot and spanning messages (up to the
 * whole ring) in order. */
START_TEST(test_spsc)
{
    struct tring t;
    tring_init(&t, 4, 128, 1, 500, 0);
    unsigned char buf[500];
    for (uint32_t k = 0; k < 50; k++) {
        uint32_t len = (k * 41) % (4 * t.r.payload + 1);
        make_msg(buf, len, k);
        CK_OK(disco_spsc_write(&t.r, buf, len, &no_wait));
        memset(buf, 0, sizeof buf);
        uint32_t got = UINT32_MAX;
        CK_OK(disco_spsc_read(&t.r, buf, sizeof buf, &got, &no_wait));
        ck_assert_uint_eq(got, len);
        ck_assert_msg(msg_ok(buf, len, k), "disco_spsc_read: msg %u content", k);
    }
    uint32_t got;
    CK_STATUS(disco_spsc_read(&t.r, buf, sizeof buf, &got, &no_wait), DISCO_E_AGAIN);
    tring_free(&t);
}
END_TEST

/* Regression: a no_wait write of a spanning message with room for only part
 * of it used to write that part and return DISCO_E_AGAIN, leaving a torn
 * message that broke every reader. Now DISCO_E_AGAIN means nothing written. */
START_TEST(test_no_wait_write_is_all_or_nothing)
{
    struct tring t;
    tring_init(&t, 8, 64, 1, 1000, 0);
    const uint32_t p = t.r.payload;
    for (uint32_t k = 0; k < 6; k++)
        put(&t.r, 10, k, &no_wait);
    unsigned char buf[1000];
    make_msg(buf, 3 * p, 99);
    CK_STATUS(disco_ring_write(&t.r, buf, 3 * p, &no_wait), DISCO_E_AGAIN); /* 2 slots free */
    for (uint32_t k = 0; k < 6; k++)
        get(&t.r, 0, 10, k, &no_wait);
    put(&t.r, 3 * p, 6, &no_wait);
    put(&t.r, 5, 7, &no_wait);
    get(&t.r, 0, 3 * p, 6, &no_wait);
    get(&t.r, 0, 5, 7, &no_wait);
    empty(&t.r, 0);
    /* A message longer than the ring starts only into an empty ring. */
    put(&t.r, 5, 8, &no_wait);
    CK_STATUS(disco_ring_write(&t.r, buf, 9 * p > 1000 ? 1000 : 9 * p, &no_wait), DISCO_E_AGAIN);
    get(&t.r, 0, 5, 8, &no_wait);
    empty(&t.r, 0);
    tring_free(&t);
}
END_TEST

/* Context for test_no_wait_read_whole: runs inside the writer's wait while a
 * spanning message is half published. */
struct midwrite {
    disco_ring_t *r;
    int calls;
    disco_status_t st0; /* reader 0's no_wait read mid-message */
    int fail;
};

static disco_status_t midwrite_check(void *ctx)
{
    struct midwrite *m = ctx;
    if (m->calls++ != 0)
        return DISCO_OK;
    unsigned char buf[1000];
    uint32_t got;
    m->st0 = disco_ring_read(m->r, 0, buf, sizeof buf, &got, &no_wait);
    /* Reader 1 catches up so that the writer can finish. */
    for (uint32_t k = 0; k < 6; k++)
        if (disco_ring_read(m->r, 1, buf, sizeof buf, &got, &no_wait) != DISCO_OK || got != 10 ||
            !msg_ok(buf, 10, k))
            m->fail = 1;
    return DISCO_OK;
}

/* Regression: a no_wait read of a spanning message that was only half
 * published used to consume its first slots and return DISCO_E_AGAIN,
 * tearing the message. Now it returns DISCO_E_AGAIN having consumed nothing,
 * and the message reads whole later. (Reader 1 lags, so the writer stalls
 * mid-message; its check callback runs reader 0 at exactly that point.) */
START_TEST(test_no_wait_read_whole)
{
    struct tring t;
    tring_init(&t, 8, 64, 2, 1000, 0);
    const uint32_t p = t.r.payload;
    for (uint32_t k = 0; k < 6; k++)
        put(&t.r, 10, k, &no_wait);
    for (uint32_t k = 0; k < 6; k++)
        get(&t.r, 0, 10, k, &no_wait);
    struct midwrite m = {.r = &t.r, .st0 = DISCO_OK};
    disco_wait_t w = {.spin_ns = 1,
                      .check = midwrite_check,
                      .check_ctx = &m,
                      .deadline_ns = disco_now_ns() + 5000 * MS};
    put(&t.r, 4 * p, 6, &w); /* 2 slots free: stalls after two */
    ck_assert_msg(m.calls >= 1, "the writer never waited");
    ck_assert_msg(!m.fail, "reader 1 misread the first six messages");
    ck_assert_msg(m.st0 == DISCO_E_AGAIN, "disco_ring_read mid-message: %s, want DISCO_E_AGAIN",
                  disco_err_name(m.st0));
    get(&t.r, 0, 4 * p, 6, &no_wait);
    get(&t.r, 1, 4 * p, 6, &no_wait);
    empty(&t.r, 0);
    empty(&t.r, 1);
    tring_free(&t);
}
END_TEST

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
                                    disco_ring_t *r)
{
    disco_ring_config_t cfg = {.nslots = nslots,
                               .slot_size = 64,
                               .nreaders = nreaders,
                               .max_msg = STREAM_MAX,
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
 * afresh (another address), so the ring works through offsets alone. */
START_TEST(test_stream_processes)
{
    static const uint32_t nreaders_by_loop[] = {1, 2, 4, 8};
    const uint32_t nreaders = nreaders_by_loop[_i];
    disco_segment_t seg;
    disco_ring_t r;
    stream_segment(&seg, STREAM_SLOTS, nreaders, &r);
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

Suite *suite_ring(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("setup");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_footprint_and_init);
    tcase_add_test(tc, test_attach);
    suite_add_tcase(s, tc);

    tc = tcase_create("single");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_empty_no_wait);
    tcase_add_test(tc, test_fill_to_full);
    tcase_add_test(tc, test_full_waits_for_slowest);
    tcase_add_test(tc, test_wrap_around);
    tcase_add_test(tc, test_spanning_sizes);
    tcase_add_test(tc, test_larger_than_ring);
    tcase_add_test(tc, test_oversize_refused);
    tcase_add_test(tc, test_write_stamped);
    tcase_add_test(tc, test_huge_len_slot_count);
    tcase_add_test(tc, test_buf_too_small);
    tcase_add_test(tc, test_bad_reader);
    tcase_add_test(tc, test_spsc);
    tcase_add_test(tc, test_no_wait_write_is_all_or_nothing);
    tcase_add_test(tc, test_no_wait_read_whole);
    suite_add_tcase(s, tc);

    tc = tcase_create("waiting");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_wait_deadline);
    tcase_add_test(tc, test_wait_abort_word);
    tcase_add_test(tc, test_wait_check_callback);
    suite_add_tcase(s, tc);

    tc = tcase_create("stream");
    tcase_set_timeout(tc, 180);
    tcase_add_loop_test(tc, test_stream_processes, 0, 4);
    tcase_add_test(tc, test_stream_killed_reader);
    tcase_add_test(tc, test_stream_threads);
    suite_add_tcase(s, tc);
    return s;
}
