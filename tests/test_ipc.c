/* test_ipc.c - the CUDA IPC bookkeeping (workers/device/ipc.c) with a fake
 * backend (tests/ipc_fake.h), on every machine: export once, offsets, the
 * import cache, own handles, reference counts and closing, frees refused
 * while imported. Importers are forked processes, as workers are. Dead
 * importers and exporters, bad refs, the table's slot protocol and a free
 * racing imports are in test_ipc_lifetime.c. */
#include <check.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/ipc_fake.h"
#include "tests/testutil.h"
#include "workers/device/ipc.h"

/* ---- tests ------------------------------------------------------------------ */

/* An allocation is exported once: exporting it again, or any pointer inside
 * it, asks the backend nothing and gives the same handle with the offset. */
START_TEST(test_export_once)
{
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096), *b = fake_alloc(8192);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    CK_OK(disco__ipc_add(ipc, b, 8192, 1));
    disco_ipc_ref_t r0, r1, r2, rb;
    CK_OK(disco__ipc_export(ipc, a, &r0));
    CK_OK(disco__ipc_export(ipc, a, &r1));
    CK_OK(disco__ipc_export(ipc, a + 4000, &r2));
    ck_assert_int_eq(atomic_load(&sh->gets), 1);
    ck_assert_msg(memcmp(&r0.handle, &r1.handle, sizeof r0.handle) == 0 &&
                      memcmp(&r0.handle, &r2.handle, sizeof r0.handle) == 0,
                  "repeated exports give different handles");
    ck_assert_msg(r0.offset == 0 && r2.offset == 4000 && r2.alloc_bytes == 4096 &&
                      r0.slot == r2.slot && r0.gen == r2.gen && r0.exporter_pid == getpid() &&
                      r0.device_id == 0,
                  "ref: offset %llu/%llu bytes %llu", (unsigned long long)r0.offset,
                  (unsigned long long)r2.offset, (unsigned long long)r2.alloc_bytes);
    CK_OK(disco__ipc_export(ipc, b + 8191, &rb));
    ck_assert_int_eq(atomic_load(&sh->gets), 2);
    ck_assert_msg(rb.slot != r0.slot && rb.offset == 8191 && rb.device_id == 1,
                  "second allocation: slot %u offset %llu", rb.slot, (unsigned long long)rb.offset);
    disco_ipc_stats_t s;
    disco__ipc_stats(ipc, &s);
    ck_assert_msg(s.allocs == 2 && s.exported == 2 && s.imports == 0, "stats %u %u %u", s.allocs,
                  s.exported, s.imports);
    CK_OK(disco__ipc_remove(ipc, a));
    CK_OK(disco__ipc_remove(ipc, b));
    disco__ipc_destroy(ipc);
}
END_TEST

/* The export table finds the allocation containing a pointer, rejects
 * overlaps, and frees only by base. */
START_TEST(test_find_and_offsets)
{
    disco_ipc_t *ipc = new_ctx();
    static char mem[8256];
    char *a = mem + 64, *b = a + 2000, *c = a + 5000;
    CK_OK(disco__ipc_add(ipc, b, 1000, 0)); /* out of order: the table sorts */
    CK_OK(disco__ipc_add(ipc, a, 1000, 0));
    CK_OK(disco__ipc_add(ipc, c, 3000, 2));
    void *base;
    size_t bytes;
    int dev;
    CK_OK(disco__ipc_find(ipc, a + 999, &base, &bytes, &dev));
    ck_assert_msg(base == a && bytes == 1000 && dev == 0, "find(a+999)");
    CK_OK(disco__ipc_find(ipc, b, &base, NULL, NULL));
    ck_assert(base == b);
    CK_OK(disco__ipc_find(ipc, c + 2999, &base, &bytes, &dev));
    ck_assert_msg(base == c && bytes == 3000 && dev == 2, "find(c+2999)");
    CK_STATUS(disco__ipc_find(ipc, a + 1000, &base, NULL, NULL), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_find(ipc, b + 1500, &base, NULL, NULL), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_find(ipc, c + 3000, &base, NULL, NULL), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_find(ipc, a - 1, &base, NULL, NULL), DISCO_E_INVAL);
    CK_HAS("inside no allocation");
    /* Overlaps, both sides; empty and NULL. */
    CK_STATUS(disco__ipc_add(ipc, a + 999, 10, 0), DISCO_E_INVAL);
    CK_HAS("overlaps");
    CK_STATUS(disco__ipc_add(ipc, b - 10, 11, 0), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_add(ipc, a + 1000, 0, 0), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_add(ipc, NULL, 10, 0), DISCO_E_INVAL);
    CK_OK(disco__ipc_add(ipc, a + 1000, 1000, 0)); /* exactly the gap */
    /* Removal by base only; exports of what is not recorded fail. */
    CK_STATUS(disco__ipc_remove(ipc, b + 1), DISCO_E_INVAL);
    CK_HAS("not its base");
    CK_STATUS(disco__ipc_remove(ipc, a + 4500), DISCO_E_INVAL);
    disco_ipc_ref_t r;
    CK_STATUS(disco__ipc_export(ipc, a + 4500, &r), DISCO_E_INVAL);
    CK_OK(disco__ipc_remove(ipc, b));
    CK_STATUS(disco__ipc_find(ipc, b + 5, &base, NULL, NULL), DISCO_E_INVAL);
    disco_ipc_stats_t s;
    disco__ipc_stats(ipc, &s);
    ck_assert_int_eq(s.allocs, 3);
    disco__ipc_destroy(ipc);
}
END_TEST

/* Another process opens an allocation once: repeated imports and imports at
 * other offsets hit the cache; the bytes are the exporter's; the handle is
 * closed with the last release, not before. */
START_TEST(test_import_cached_across_fork)
{
    disco_ipc_t *ipc = new_ctx();
    unsigned char *a = fake_alloc(4096);
    for (int i = 0; i < 4096; i++)
        a[i] = (unsigned char)(i * 7);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    disco_ipc_ref_t r0, r1;
    CK_OK(disco__ipc_export(ipc, a, &r0));
    CK_OK(disco__ipc_export(ipc, a + 128, &r1));
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_ipc_t *me = child_ctx();
        unsigned char *p0, *p0b, *p1;
        CH_OK(disco__ipc_import(me, &r0, (void **)&p0));
        CH_TRUE(atomic_load(&sh->opens) == 1 && p0 != a);
        for (int i = 0; i < 4096; i++)
            CH_TRUE(p0[i] == (unsigned char)(i * 7));
        CH_OK(disco__ipc_import(me, &r0, (void **)&p0b));
        CH_OK(disco__ipc_import(me, &r1, (void **)&p1));
        CH_TRUE(p0b == p0 && p1 == p0 + 128);
        CH_TRUE(atomic_load(&sh->opens) == 1 && atomic_load(&sh->double_opens) == 0);
        disco_ipc_stats_t s;
        disco__ipc_stats(me, &s);
        CH_TRUE(s.imports == 1 && s.import_refs == 3 && s.allocs == 0);
        p1[0] = 0xAB; /* the exporter sees it */
        CH_OK(disco__ipc_release(me, &r1));
        CH_OK(disco__ipc_release(me, &r0));
        CH_TRUE(atomic_load(&sh->closes) == 0);
        CH_OK(disco__ipc_release(me, &r0));
        CH_TRUE(atomic_load(&sh->closes) == 1);
        CH_STATUS(disco__ipc_release(me, &r0), DISCO_E_INVAL);
        /* Open again after the close: a fresh open. */
        CH_OK(disco__ipc_import(me, &r0, (void **)&p0));
        CH_TRUE(atomic_load(&sh->opens) == 2);
        CH_OK(disco__ipc_release(me, &r0));
        disco__ipc_destroy(me);
        _exit(0);
    }
    tu_wait_ok(pid, "importer");
    ck_assert_int_eq(a[128], 0xAB);
    ck_assert_int_eq(atomic_load(&sh->gets), 1);
    ck_assert_int_eq(atomic_load(&sh->closes), 2);
    ck_assert_int_eq(disco__ipc_importers(ipc, a), 0);
    CK_OK(disco__ipc_remove(ipc, a));
    disco__ipc_destroy(ipc);
}
END_TEST

/* The exporter importing its own ref gets its own pointer and opens
 * nothing; that import holds the allocation like any other. A forked child
 * cannot use its parent's context. */
START_TEST(test_own_handle_never_opened)
{
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    disco_ipc_ref_t r;
    CK_OK(disco__ipc_export(ipc, a + 64, &r));
    void *p, *q;
    CK_OK(disco__ipc_import(ipc, &r, &p));
    CK_OK(disco__ipc_import(ipc, &r, &q));
    ck_assert_msg(p == a + 64 && q == p, "own import gave %p, want %p", p, (void *)(a + 64));
    ck_assert_int_eq(atomic_load(&sh->opens), 0);
    ck_assert_int_eq(atomic_load(&sh->own_opens), 0);
    disco_ipc_stats_t s;
    disco__ipc_stats(ipc, &s);
    ck_assert_msg(s.self_refs == 2 && s.imports == 0, "self_refs %llu imports %u",
                  (unsigned long long)s.self_refs, s.imports);
    CK_STATUS(disco__ipc_remove(ipc, a), DISCO_E_AGAIN);
    CK_HAS("its own process");
    CK_OK(disco__ipc_release(ipc, &r));
    CK_OK(disco__ipc_release(ipc, &r));
    CK_STATUS(disco__ipc_release(ipc, &r), DISCO_E_INVAL);

    pid_t pid = tu_fork();
    if (pid == 0) {
        CH_STATUS(disco__ipc_import(ipc, &r, &p), DISCO_E_INVAL);
        if (strstr(disco_last_error(), "forked child") == NULL)
            tu_child_fail("detail: %s", disco_last_error());
        disco__ipc_destroy(ipc); /* only discards: the table is untouched */
        _exit(0);
    }
    tu_wait_ok(pid, "child with the parent's context");
    CK_OK(disco__ipc_import(ipc, &r, &p)); /* the slot is still live */
    CK_OK(disco__ipc_release(ipc, &r));
    CK_OK(disco__ipc_remove(ipc, a));
    ck_assert_int_eq(atomic_load(&sh->opens), 0);
    disco__ipc_destroy(ipc);
}
END_TEST

/* Reference counts across processes: the exporter's free is refused, naming
 * the importer, until the importer's last release; a ref to a freed
 * allocation is stale. */
START_TEST(test_refcount_and_refused_free)
{
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    disco_ipc_ref_t r;
    CK_OK(disco__ipc_export(ipc, a, &r));
    struct chan c;
    chan_open(&c);
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_ipc_t *me = child_ctx();
        void *p;
        CH_OK(disco__ipc_import(me, &r, &p));
        CH_OK(disco__ipc_import(me, &r, &p));
        ch_put(c.c2p[1], 'h'); /* holding two refs */
        ch_get(c.p2c[0]);
        CH_OK(disco__ipc_release(me, &r));
        CH_TRUE(atomic_load(&sh->closes) == 0);
        ch_put(c.c2p[1], '1');
        ch_get(c.p2c[0]);
        CH_OK(disco__ipc_release(me, &r));
        CH_TRUE(atomic_load(&sh->closes) == 1);
        ch_put(c.c2p[1], '0');
        ch_get(c.p2c[0]); /* the parent freed it */
        CH_STATUS(disco__ipc_import(me, &r, &p), DISCO_E_INVAL);
        if (strstr(disco_last_error(), "stale") == NULL)
            tu_child_fail("detail: %s", disco_last_error());
        CH_TRUE(atomic_load(&sh->opens) == 1);
        disco__ipc_destroy(me);
        _exit(0);
    }
    char pidtext[32];
    snprintf(pidtext, sizeof pidtext, "pid %d", (int)pid);
    ck_assert_int_eq(get(c.c2p[0]), 'h');
    ck_assert_int_eq(disco__ipc_importers(ipc, a), 1);
    CK_STATUS(disco__ipc_remove(ipc, a), DISCO_E_AGAIN);
    CK_HAS("still imported by 1 process");
    CK_HAS(pidtext);
    put(c.p2c[1], 'g');
    ck_assert_int_eq(get(c.c2p[0]), '1');
    CK_STATUS(disco__ipc_remove(ipc, a), DISCO_E_AGAIN);
    put(c.p2c[1], 'g');
    ck_assert_int_eq(get(c.c2p[0]), '0');
    ck_assert_int_eq(disco__ipc_importers(ipc, a), 0);
    CK_OK(disco__ipc_remove(ipc, a));
    put(c.p2c[1], 'f');
    tu_wait_ok(pid, "importer");
    disco__ipc_destroy(ipc);
}
END_TEST

Suite *suite_ipc(void)
{
    Suite *s = suite_create("ipc");
    TCase *tc = tcase_create("bookkeeping");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_export_once);
    tcase_add_test(tc, test_find_and_offsets);
    tcase_add_test(tc, test_import_cached_across_fork);
    tcase_add_test(tc, test_own_handle_never_opened);
    tcase_add_test(tc, test_refcount_and_refused_free);
    suite_add_tcase(s, tc);
    return s;
}
