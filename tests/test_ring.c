/* test_ring.c - the broadcast ring in one process: geometry, init and
 * attach, and single-process behaviour. Waiting, and one writer with forked
 * or threaded readers, are in test_ring_concurrent.c. */
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
#include "tests/ring_util.h"
#include "tests/testutil.h"

#define MS 1000000LL

static const disco_wait_t no_wait = {.no_wait = true};

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
        {.nslots = 1u << 31, .slot_size = 1024, .nreaders = 1},    /* 2 TiB */
        {.nslots = 8, .slot_size = 64, .nreaders = 1, .batch = 5}, /* more than half */
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

/* Batched publication (ring.h): while a reader has data its reads make
 * room batch slots at a time; once it finds none it publishes all it read,
 * so a writer waiting for room is not held up by a reader waiting for data
 * (without that, the last no_wait read would leave 2 slots unpublished and
 * the eighth write below would get DISCO_E_AGAIN). */
START_TEST(test_batch_publication)
{
    disco_ring_config_t cfg = {
        .nslots = 8, .slot_size = 64, .nreaders = 1, .max_msg = 256, .batch = 3};
    static _Alignas(64) unsigned char mem[1 << 12];
    ck_assert_uint_le(disco_ring_footprint(&cfg), sizeof mem);
    disco_ring_t r;
    CK_OK(disco_ring_init(mem, sizeof mem, &cfg, &r));
    unsigned char buf[32] = {0};
    for (uint32_t k = 0; k < 8; k++)
        put(&r, 20, k, &no_wait);
    get(&r, 0, 20, 0, &no_wait);
    CK_STATUS(disco_ring_write(&r, buf, 20, &no_wait), DISCO_E_AGAIN); /* 1 read, unpublished */
    for (uint32_t k = 1; k < 5; k++)
        get(&r, 0, 20, k, &no_wait); /* published at 3 */
    for (uint32_t k = 8; k < 11; k++)
        put(&r, 20, k, &no_wait);
    CK_STATUS(disco_ring_write(&r, buf, 20, &no_wait), DISCO_E_AGAIN);
    for (uint32_t k = 5; k < 11; k++)
        get(&r, 0, 20, k, &no_wait); /* published at 6 and 9; 11 not yet */
    uint32_t got;
    CK_STATUS(disco_ring_read(&r, 0, buf, sizeof buf, &got, &no_wait), DISCO_E_AGAIN);
    for (uint32_t k = 11; k < 19; k++)
        put(&r, 20, k, &no_wait);
    CK_STATUS(disco_ring_write(&r, buf, 20, &no_wait), DISCO_E_AGAIN);
    for (uint32_t k = 11; k < 19; k++)
        get(&r, 0, 20, k, &no_wait);
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

/* The slot count of a message is computed in 64 bits: a length near
 * UINT32_MAX (allowed by max_msg) must not wrap to 0 slots and "succeed"
 * having written nothing. The write starts and then times out waiting for a
 * reader. */
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

/* A no_wait write of a spanning message with room for only part of it
 * writes nothing and returns DISCO_E_AGAIN (writing the part would leave a
 * torn message that breaks every reader). */
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

/* A no_wait read of a spanning message that is only half published returns
 * DISCO_E_AGAIN having consumed nothing (consuming its first slots would
 * tear the message), and the message reads whole later. (Reader 1 lags, so the writer stalls
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
    tcase_add_test(tc, test_batch_publication);
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

    return s;
}
