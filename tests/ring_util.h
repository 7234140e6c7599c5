/* ring_util.h - helpers shared by the ring suites (test_ring.c,
 * test_ring_concurrent.c): a ring in private memory, and test messages
 * written, read and checked. Header-only, static. */
#ifndef DISCO_TESTS_RING_UTIL_H
#define DISCO_TESTS_RING_UTIL_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "disco/shm/ring.h"
#include "tests/testutil.h"

/* A ring in private, cache-line aligned memory (single-process tests). */
struct tring {
    void *mem;
    size_t size;
    disco_ring_t r;
};

static inline void tring_init(struct tring *t, uint32_t nslots, uint32_t slot_size,
                              uint32_t nreaders, uint32_t max_msg, uint64_t start_pos)
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

static inline void tring_free(struct tring *t)
{
    free(t->mem);
}

/* Message k of a test: len bytes that depend on k. */
static inline void make_msg(unsigned char *buf, uint32_t len, uint32_t k)
{
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(k * 37u + i * 11u + (i >> 8));
}

static inline int msg_ok(const unsigned char *buf, uint32_t len, uint32_t k)
{
    for (uint32_t i = 0; i < len; i++)
        if (buf[i] != (unsigned char)(k * 37u + i * 11u + (i >> 8)))
            return 0;
    return 1;
}

/* Writes message k (len bytes) and asserts DISCO_OK. */
static inline void put(disco_ring_t *r, uint32_t len, uint32_t k, const disco_wait_t *w)
{
    unsigned char buf[8192];
    ck_assert_uint_le(len, sizeof buf);
    make_msg(buf, len, k);
    disco_status_t st = disco_ring_write(r, buf, len, w);
    ck_assert_msg(st == DISCO_OK, "disco_ring_write(msg %u, %u bytes): %s (%s)", k, len,
                  disco_err_name(st), disco_last_error());
}

/* Reads the next message as reader and asserts it is message k of len bytes. */
static inline void get(disco_ring_t *r, uint32_t reader, uint32_t len, uint32_t k,
                       const disco_wait_t *w)
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
static inline void empty(disco_ring_t *r, uint32_t reader)
{
    unsigned char buf[16];
    uint32_t got;
    const disco_wait_t no_wait = {.no_wait = true};
    CK_STATUS(disco_ring_read(r, reader, buf, sizeof buf, &got, &no_wait), DISCO_E_AGAIN);
}

#endif
