/* test_pieces.c - the device arena's first-fit free list (workers/data/pieces.h). */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workers/data/pieces.h"

/* The list's invariants (pieces.h): sorted by off, every piece non-empty,
 * no two pieces adjacent or overlapping, n within cap. */
static void check_invariants(const struct disco__pieces *p, const char *when)
{
    ck_assert_msg(p->n <= p->cap, "%s: n %zu > cap %zu", when, p->n, p->cap);
    for (size_t i = 0; i < p->n; i++) {
        ck_assert_msg(p->at[i].len > 0, "%s: piece %zu is empty", when, i);
        if (i > 0)
            ck_assert_msg(p->at[i - 1].off + p->at[i - 1].len < p->at[i].off,
                          "%s: pieces %zu [%llu, +%llu) and %zu [%llu, +%llu) touch or overlap",
                          when, i - 1, (unsigned long long)p->at[i - 1].off,
                          (unsigned long long)p->at[i - 1].len, i, (unsigned long long)p->at[i].off,
                          (unsigned long long)p->at[i].len);
    }
}

/* Asserts that the list is exactly want[0..n). */
static void expect(const struct disco__pieces *p, const struct disco__piece *want, size_t n,
                   const char *when)
{
    check_invariants(p, when);
    ck_assert_msg(p->n == n, "%s: %zu pieces, want %zu", when, p->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(p->at[i].off == want[i].off && p->at[i].len == want[i].len,
                      "%s: piece %zu is [%llu, +%llu), want [%llu, +%llu)", when, i,
                      (unsigned long long)p->at[i].off, (unsigned long long)p->at[i].len,
                      (unsigned long long)want[i].off, (unsigned long long)want[i].len);
}

#define EXPECT(p, when, ...)                                                                       \
    do {                                                                                           \
        const struct disco__piece want_[] = {__VA_ARGS__};                                         \
        expect((p), want_, sizeof want_ / sizeof want_[0], (when));                                \
    } while (0)

/* Takes want bytes, asserting success at offset at. */
static void take_at(struct disco__pieces *p, uint64_t want, uint64_t at)
{
    uint64_t off = UINT64_MAX, largest = UINT64_MAX;
    ck_assert_msg(disco__pieces_take(p, want, &off, &largest),
                  "disco__pieces_take(%llu): failed, largest %llu", (unsigned long long)want,
                  (unsigned long long)largest);
    ck_assert_msg(off == at, "disco__pieces_take(%llu): offset %llu, want %llu",
                  (unsigned long long)want, (unsigned long long)off, (unsigned long long)at);
    ck_assert_msg(largest == UINT64_MAX, "disco__pieces_take: set largest_out on success");
}

static void give(struct disco__pieces *p, uint64_t off, uint64_t len)
{
    ck_assert_msg(disco__pieces_give(p, off, len), "disco__pieces_give(%llu, %llu): lost",
                  (unsigned long long)off, (unsigned long long)len);
}

/* Init makes one piece of the whole range (none for an empty range);
 * destroy leaves the list empty. */
START_TEST(test_init_destroy)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 256, 4096));
    EXPECT(&p, "init", {256, 4096});
    disco__pieces_destroy(&p);
    ck_assert_msg(p.at == NULL && p.n == 0 && p.cap == 0, "destroy: list not emptied");
    disco__pieces_destroy(&p); /* twice: harmless */

    ck_assert(disco__pieces_init(&p, 0, 0));
    ck_assert_uint_eq(p.n, 0);
    uint64_t off = 7, largest = 7;
    ck_assert(!disco__pieces_take(&p, 1, &off, &largest));
    ck_assert_msg(off == 7 && largest == 0, "empty list: off %llu largest %llu",
                  (unsigned long long)off, (unsigned long long)largest);
    disco__pieces_destroy(&p);
}
END_TEST

/* A take splits the first piece that holds it at its start; taking a
 * piece whole removes it. */
START_TEST(test_split)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 64, 1024));
    take_at(&p, 256, 64);
    EXPECT(&p, "after 256", {320, 768});
    take_at(&p, 1, 320);
    EXPECT(&p, "after 1", {321, 767});
    take_at(&p, 767, 321);
    ck_assert_msg(p.n == 0, "taking the last piece whole left %zu pieces", p.n);
    disco__pieces_destroy(&p);
}
END_TEST

/* First fit, not best fit: the lowest piece that holds the request wins,
 * even when a later one fits it more tightly; a larger request skips the
 * pieces too small for it. */
START_TEST(test_first_fit_order)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 0, 1000));
    take_at(&p, 200, 0);
    take_at(&p, 100, 200);
    take_at(&p, 50, 300);
    take_at(&p, 50, 350);
    give(&p, 0, 200);
    give(&p, 300, 50);
    EXPECT(&p, "crafted", {0, 200}, {300, 50}, {400, 600});
    take_at(&p, 50, 0); /* best fit would be 300 */
    EXPECT(&p, "after 50", {50, 150}, {300, 50}, {400, 600});
    take_at(&p, 250, 400); /* skips 150 and 50 */
    EXPECT(&p, "after 250", {50, 150}, {300, 50}, {650, 350});
    take_at(&p, 150, 50); /* exactly the first: removed */
    EXPECT(&p, "after 150", {300, 50}, {650, 350});
    take_at(&p, 40, 300);
    EXPECT(&p, "after 40", {340, 10}, {650, 350});
    disco__pieces_destroy(&p);
}
END_TEST

/* Giving back merges with the left neighbour, the right one, both, or
 * neither (a new piece), each case checked on the whole list. */
START_TEST(test_give_merges)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 0, 1000));
    for (uint64_t i = 0; i < 5; i++)
        take_at(&p, 100, i * 100);
    EXPECT(&p, "five taken", {500, 500});
    give(&p, 100, 100); /* none: 200 is taken, 500 is not its end */
    EXPECT(&p, "none", {100, 100}, {500, 500});
    give(&p, 200, 100); /* left: [100, 200) ends at 200; 300 is taken */
    EXPECT(&p, "left", {100, 200}, {500, 500});
    give(&p, 400, 100); /* right: [500, ...) starts at its end */
    EXPECT(&p, "right", {100, 200}, {400, 600});
    give(&p, 300, 100); /* both: [100, 300) and [400, 1000) */
    EXPECT(&p, "both", {100, 900});
    give(&p, 0, 100); /* right, at the front */
    EXPECT(&p, "front right", {0, 1000});
    disco__pieces_destroy(&p);
}
END_TEST

/* A piece that touches no neighbour goes in at its place: into an empty
 * list, at the front, at the end, in the middle. */
START_TEST(test_give_none_positions)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 0, 1000));
    for (uint64_t i = 0; i < 10; i++)
        take_at(&p, 100, i * 100);
    ck_assert_uint_eq(p.n, 0);
    give(&p, 500, 100);
    EXPECT(&p, "into empty", {500, 100});
    give(&p, 100, 100);
    EXPECT(&p, "front", {100, 100}, {500, 100});
    give(&p, 800, 100);
    EXPECT(&p, "end", {100, 100}, {500, 100}, {800, 100});
    give(&p, 300, 100);
    EXPECT(&p, "middle", {100, 100}, {300, 100}, {500, 100}, {800, 100});
    disco__pieces_destroy(&p);
}
END_TEST

/* Blocks given back in an order unrelated to their offsets merge back
 * into one piece; the list holds its invariants after every give. */
START_TEST(test_give_out_of_order)
{
    static const int order[] = {5, 1, 7, 3, 0, 6, 2, 4};
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 256, 8 * 256));
    for (uint64_t i = 0; i < 8; i++)
        take_at(&p, 256, 256 + i * 256);
    ck_assert_uint_eq(p.n, 0);
    for (size_t k = 0; k < 8; k++) {
        give(&p, 256 + (uint64_t)order[k] * 256, 256);
        check_invariants(&p, "out of order");
    }
    EXPECT(&p, "all back", {256, 8 * 256});
    disco__pieces_destroy(&p);
}
END_TEST

/* More pieces than the first capacity: the list grows and keeps them all. */
START_TEST(test_grows)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 0, 128 * 10));
    for (uint64_t i = 0; i < 128; i++)
        take_at(&p, 10, i * 10);
    for (uint64_t i = 0; i < 128; i += 2)
        give(&p, i * 10, 10);
    check_invariants(&p, "every other");
    ck_assert_uint_eq(p.n, 64);
    for (size_t i = 0; i < 64; i++)
        ck_assert(p.at[i].off == i * 20 && p.at[i].len == 10);
    for (uint64_t i = 1; i < 128; i += 2)
        give(&p, i * 10, 10);
    EXPECT(&p, "all back", {0, 1280});
    disco__pieces_destroy(&p);
}
END_TEST

/* A take no piece holds fails, leaves the list and *off_out alone and
 * reports the largest free piece (0 when the range is full). */
START_TEST(test_exhaustion_largest)
{
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, 0, 1000));
    for (uint64_t i = 0; i < 10; i++)
        take_at(&p, 100, i * 100);
    uint64_t off = 12345, largest = 12345;
    ck_assert(!disco__pieces_take(&p, 1, &off, &largest));
    ck_assert_msg(off == 12345, "failed take set *off_out to %llu", (unsigned long long)off);
    ck_assert_msg(largest == 0, "full: largest %llu, want 0", (unsigned long long)largest);

    give(&p, 100, 100);
    give(&p, 400, 100);
    give(&p, 500, 100); /* [400, 600): the largest, in the middle */
    give(&p, 900, 100);
    EXPECT(&p, "holes", {100, 100}, {400, 200}, {900, 100});
    largest = 0;
    ck_assert(!disco__pieces_take(&p, 201, &off, &largest));
    ck_assert_msg(largest == 200, "largest %llu, want 200", (unsigned long long)largest);
    ck_assert_msg(off == 12345, "failed take set *off_out to %llu", (unsigned long long)off);
    EXPECT(&p, "unchanged by the failed take", {100, 100}, {400, 200}, {900, 100});
    take_at(&p, 200, 400); /* exactly the largest still fits */
    disco__pieces_destroy(&p);
}
END_TEST

/* Reuse: after the whole range is taken in pieces of many sizes and all
 * are given back (shuffled), the list is one piece of the whole range
 * again, and the same takes can be made again at the same offsets. */
START_TEST(test_reuse_after_full_release)
{
    enum { MAXB = 512 };
    uint64_t off[MAXB], len[MAXB];
    struct disco__pieces p;
    const uint64_t base = 256, range = 100000;
    ck_assert(disco__pieces_init(&p, base, range));
    for (int round = 0; round < 3; round++) {
        size_t nb = 0;
        uint64_t at = base;
        for (uint64_t want = 1; nb < MAXB; want = want % 997 + 37) {
            uint64_t o = 0, largest = 0;
            if (!disco__pieces_take(&p, want, &o, &largest)) {
                ck_assert_msg(largest < want, "take %llu failed with largest %llu",
                              (unsigned long long)want, (unsigned long long)largest);
                break;
            }
            ck_assert_msg(o == at, "round %d: take %zu at %llu, want %llu", round, nb,
                          (unsigned long long)o, (unsigned long long)at);
            off[nb] = o;
            len[nb++] = want;
            at += want;
        }
        ck_assert_msg(nb > 16, "only %zu blocks taken", nb);
        /* Fisher-Yates with a fixed LCG: the same order every run. */
        uint32_t s = 12345u + (uint32_t)round;
        for (size_t i = nb - 1; i > 0; i--) {
            s = s * 1103515245u + 12345u;
            size_t j = (s >> 8) % (i + 1);
            uint64_t t = off[i];
            off[i] = off[j];
            off[j] = t;
            t = len[i];
            len[i] = len[j];
            len[j] = t;
        }
        for (size_t i = 0; i < nb; i++) {
            give(&p, off[i], len[i]);
            check_invariants(&p, "release");
        }
        EXPECT(&p, "all released", {base, range});
    }
    disco__pieces_destroy(&p);
}
END_TEST

/* ---- the randomized check against a bitmap ---- */

enum { UNITS = 4096, RAND_OPS = 5000, MAX_LIVE = 256 };
#define RAND_BASE 1000u /* the range starts here: offsets are not indices */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: fixed seed, the same sequence everywhere. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* The model's answer to a first-fit take: the start of the first maximal
 * free run of at least want units, or false with the longest run. */
static bool model_take(const bool *freemap, uint64_t want, uint64_t *at_out, uint64_t *largest_out)
{
    uint64_t largest = 0;
    for (uint64_t i = 0; i < UNITS;) {
        if (!freemap[i]) {
            i++;
            continue;
        }
        uint64_t j = i;
        while (j < UNITS && freemap[j])
            j++;
        if (j - i >= want) {
            *at_out = i;
            return true;
        }
        largest = j - i > largest ? j - i : largest;
        i = j;
    }
    *largest_out = largest;
    return false;
}

/* The list must be exactly the bitmap's maximal free runs, in order. */
static void model_compare(const struct disco__pieces *p, const bool *freemap, int op)
{
    char when[64];
    snprintf(when, sizeof when, "random op %d", op);
    check_invariants(p, when);
    size_t k = 0;
    for (uint64_t i = 0; i < UNITS;) {
        if (!freemap[i]) {
            i++;
            continue;
        }
        uint64_t j = i;
        while (j < UNITS && freemap[j])
            j++;
        ck_assert_msg(k < p->n, "%s: the model has a run [%llu, %llu) beyond the list's %zu", when,
                      (unsigned long long)i, (unsigned long long)j, p->n);
        ck_assert_msg(p->at[k].off == RAND_BASE + i && p->at[k].len == j - i,
                      "%s: piece %zu is [%llu, +%llu), the model's run [%llu, +%llu)", when, k,
                      (unsigned long long)p->at[k].off, (unsigned long long)p->at[k].len,
                      (unsigned long long)(RAND_BASE + i), (unsigned long long)(j - i));
        k++;
        i = j;
    }
    ck_assert_msg(k == p->n, "%s: the list has %zu pieces, the model %zu runs", when, p->n, k);
}

/* A few thousand seeded takes and gives of random sizes agree with a
 * bitmap model of first fit at every step: the same offsets, the same
 * failures with the same largest piece, and the list equal to the
 * bitmap's free runs (sorted, merged). */
START_TEST(test_random_against_bitmap)
{
    static bool freemap[UNITS];
    uint64_t live_off[MAX_LIVE], live_len[MAX_LIVE];
    size_t nlive = 0;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int takes = 0, fails = 0, gives = 0;
    for (size_t i = 0; i < UNITS; i++)
        freemap[i] = true;
    struct disco__pieces p;
    ck_assert(disco__pieces_init(&p, RAND_BASE, UNITS));
    for (int op = 0; op < RAND_OPS; op++) {
        uint64_t r = rng_next(&seed);
        bool do_take = nlive == 0 || (nlive < MAX_LIVE && r % 100 < 55);
        if (do_take) {
            /* Mostly small sizes, now and then a large one. */
            uint64_t want = (r >> 8) % 8 == 0 ? 1 + (r >> 16) % 1024 : 1 + (r >> 16) % 64;
            uint64_t at = 0, mlargest = 0, off = 0, largest = 0;
            bool mok = model_take(freemap, want, &at, &mlargest);
            bool ok = disco__pieces_take(&p, want, &off, &largest);
            ck_assert_msg(ok == mok, "op %d: take %llu: %d, the model %d", op,
                          (unsigned long long)want, ok, mok);
            if (ok) {
                ck_assert_msg(off == RAND_BASE + at, "op %d: take %llu at %llu, the model %llu", op,
                              (unsigned long long)want, (unsigned long long)off,
                              (unsigned long long)(RAND_BASE + at));
                memset(&freemap[at], 0, want * sizeof freemap[0]);
                live_off[nlive] = off;
                live_len[nlive++] = want;
                takes++;
            } else {
                ck_assert_msg(largest == mlargest, "op %d: largest %llu, the model %llu", op,
                              (unsigned long long)largest, (unsigned long long)mlargest);
                fails++;
            }
        } else {
            size_t k = (size_t)((r >> 8) % nlive);
            give(&p, live_off[k], live_len[k]);
            for (uint64_t u = 0; u < live_len[k]; u++)
                freemap[live_off[k] - RAND_BASE + u] = true;
            live_off[k] = live_off[nlive - 1];
            live_len[k] = live_len[--nlive];
            gives++;
        }
        model_compare(&p, freemap, op);
    }
    /* The walk must have exercised all three outcomes, and fragmented the
     * list past its first capacity. */
    ck_assert_msg(takes > 500 && fails > 50 && gives > 500, "takes %d fails %d gives %d", takes,
                  fails, gives);
    ck_assert_msg(p.cap > 16, "the list never grew (cap %zu)", p.cap);
    while (nlive > 0) {
        nlive--;
        give(&p, live_off[nlive], live_len[nlive]);
    }
    EXPECT(&p, "random: all back", {RAND_BASE, UNITS});
    disco__pieces_destroy(&p);
}
END_TEST

Suite *suite_pieces(void)
{
    Suite *s = suite_create("pieces");
    TCase *tc = tcase_create("list");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_init_destroy);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_first_fit_order);
    tcase_add_test(tc, test_give_merges);
    tcase_add_test(tc, test_give_none_positions);
    tcase_add_test(tc, test_give_out_of_order);
    tcase_add_test(tc, test_grows);
    tcase_add_test(tc, test_exhaustion_largest);
    tcase_add_test(tc, test_reuse_after_full_release);
    suite_add_tcase(s, tc);

    tc = tcase_create("random");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_random_against_bitmap);
    suite_add_tcase(s, tc);
    return s;
}
