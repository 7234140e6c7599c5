/* test_ipc_lifetime.c - the CUDA IPC lifetime table with the fake backend
 * (tests/ipc_fake.h), on every machine: dead importers and exporters, bad
 * refs, a full table and its reclaim, destroy closing what is open, the
 * slot protocol on its own (workers/device/ipc_table.c), and a free racing
 * imports. Importers are forked processes, as workers are. */
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
#include "workers/device/ipc_table.h"

/* An importer that dies holding an import does not block the free. */
START_TEST(test_dead_importer)
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
        ch_put(c.c2p[1], 'h');
        ch_get(c.p2c[0]); /* killed here */
        _exit(1);
    }
    ck_assert_int_eq(get(c.c2p[0]), 'h');
    CK_STATUS(disco__ipc_remove(ipc, a), DISCO_E_AGAIN);
    tu_kill_all(&pid, 1);
    ck_assert_int_eq(disco__ipc_importers(ipc, a), 0);
    CK_OK(disco__ipc_remove(ipc, a));
    disco__ipc_destroy(ipc);
}
END_TEST

/* Bad refs are refused, with nothing opened or held: forged handles, slots,
 * generations, offsets, sizes; releases of what was never imported; refs
 * that disagree with an open import; a failing open leaves no trace. */
START_TEST(test_bad_refs)
{
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096), *b = fake_alloc(4096);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    CK_OK(disco__ipc_add(ipc, b, 4096, 0));
    disco_ipc_ref_t r, rb;
    CK_OK(disco__ipc_export(ipc, a, &r));
    CK_OK(disco__ipc_export(ipc, b, &rb));
    void *p;
    /* Own refs, forged: resolved locally or refused, never opened. */
    disco_ipc_ref_t bad = r;
    bad.handle.bytes[40] ^= 1;
    CK_STATUS(disco__ipc_import(ipc, &bad, &p), DISCO_E_INVAL);
    CK_HAS("no live export");
    struct chan c;
    chan_open(&c);
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_ipc_t *me = child_ctx();
        disco_ipc_ref_t x = r;
        x.handle.bytes[40] ^= 1; /* forged handle */
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        if (strstr(disco_last_error(), "bad handle") == NULL)
            tu_child_fail("detail: %s", disco_last_error());
        x = r, x.slot = NSLOTS; /* no such slot */
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        x = r, x.slot = rb.slot; /* another allocation's slot */
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        x = r, x.gen = 0;
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        x = r, x.gen = r.gen + 1;
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        x = r, x.offset = 4096; /* past the end */
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        x = r, x.alloc_bytes = 8192, x.offset = 5000; /* lies about the size */
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        x = r, x.exporter_pid = 0;
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        CH_STATUS(disco__ipc_import(me, NULL, &p), DISCO_E_INVAL);
        CH_STATUS(disco__ipc_release(me, &r), DISCO_E_INVAL);
        CH_TRUE(atomic_load(&sh->opens) == 0);
        /* An open import, then a ref with its handle but another slot. */
        CH_OK(disco__ipc_import(me, &r, &p));
        x = r, x.gen = r.gen + 1;
        CH_STATUS(disco__ipc_import(me, &x, &p), DISCO_E_INVAL);
        if (strstr(disco_last_error(), "disagrees with the open import") == NULL)
            tu_child_fail("detail: %s", disco_last_error());
        CH_OK(disco__ipc_release(me, &r));
        /* The backend fails to open (its fd is gone here): nothing held. */
        close(fakes[1].fd);
        CH_STATUS(disco__ipc_import(me, &rb, &p), DISCO_E_SYS);
        disco_ipc_stats_t s;
        disco__ipc_stats(me, &s);
        CH_TRUE(s.imports == 0 && s.import_refs == 0);
        ch_put(c.c2p[1], 'x'); /* the parent looks at the slots while we live */
        ch_get(c.p2c[0]);
        disco__ipc_destroy(me);
        _exit(0);
    }
    ck_assert_int_eq(get(c.c2p[0]), 'x');
    ck_assert_int_eq(disco__ipc_importers(ipc, a), 0);
    ck_assert_int_eq(disco__ipc_importers(ipc, b), 0);
    put(c.p2c[1], 'g');
    tu_wait_ok(pid, "importer of bad refs");
    CK_OK(disco__ipc_remove(ipc, a));
    CK_OK(disco__ipc_remove(ipc, b));
    disco__ipc_destroy(ipc);

    /* No table: exports and imports say so. */
    CK_OK(disco__ipc_create(&fake, NULL, &ipc));
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    CK_STATUS(disco__ipc_export(ipc, a, &r), DISCO_E_INVAL);
    CK_HAS("no IPC table");
    CK_STATUS(disco__ipc_import(ipc, &rb, &p), DISCO_E_INVAL);
    CK_HAS("no IPC table");
    CK_OK(disco__ipc_set_table(ipc, table));
    CK_OK(disco__ipc_export(ipc, a, &r));
    CK_STATUS(disco__ipc_set_table(ipc, NULL), DISCO_E_INVAL);
    disco__ipc_destroy(ipc);
    disco_ipc_backend_t half = fake;
    half.close_handle = NULL;
    CK_STATUS(disco__ipc_create(&half, table, &ipc), DISCO_E_INVAL);
}
END_TEST

/* The shared table: format checks, full tables, and slots of dead
 * exporters reclaimed unless a live process still holds them. */
START_TEST(test_table_full_and_reclaim)
{
    disco_ipc_table_t *t;
    size_t fp = disco__ipc_table_footprint(2);
    CK_STATUS(disco__ipc_table_init(table_mem, fp - 1, 2, &t), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_table_init((char *)table_mem + 8, fp, 2, &t), DISCO_E_INVAL);
    CK_STATUS(disco__ipc_table_init(table_mem, fp, 0, &t), DISCO_E_INVAL);
    static _Alignas(64) char junk[4096];
    CK_STATUS(disco__ipc_table_attach(junk, sizeof junk, &t), DISCO_E_BAD_MAGIC);
    CK_OK(disco__ipc_table_init(table_mem, fp, 2, &t));
    disco__ipc_table_release(t);
    CK_STATUS(disco__ipc_table_attach(table_mem, fp - 1, &t), DISCO_E_INVAL);
    CK_OK(disco__ipc_table_attach(table_mem, fp, &t));
    disco__ipc_table_release(table);
    table = t; /* two slots from here on */

    char *a = fake_alloc(4096), *b = fake_alloc(4096), *c2 = fake_alloc(4096),
         *d = fake_alloc(4096);
    struct chan ch;
    chan_open(&ch);
    disco_ipc_ref_t refs[2];
    pid_t pid = tu_fork();
    if (pid == 0) { /* exports a and b, then is killed without freeing */
        disco_ipc_t *me = child_ctx();
        CH_OK(disco__ipc_add(me, a, 4096, 0));
        CH_OK(disco__ipc_add(me, b, 4096, 0));
        CH_OK(disco__ipc_export(me, a, &refs[0]));
        CH_OK(disco__ipc_export(me, b, &refs[1]));
        if (write(ch.c2p[1], refs, sizeof refs) != (ssize_t)sizeof refs)
            tu_child_fail("write refs");
        ch_get(ch.p2c[0]);
        _exit(1);
    }
    ck_assert_msg(read(ch.c2p[0], refs, sizeof refs) == (ssize_t)sizeof refs, "read refs");
    disco_ipc_t *ipc = new_ctx();
    void *p;
    CK_OK(disco__ipc_import(ipc, &refs[0], &p)); /* we hold the child's a */
    CK_OK(disco__ipc_add(ipc, c2, 4096, 0));
    CK_OK(disco__ipc_add(ipc, d, 4096, 0));
    disco_ipc_ref_t rc, rd;
    CK_STATUS(disco__ipc_export(ipc, c2, &rc), DISCO_E_NOMEM); /* both live */
    CK_HAS("IPC table full");
    tu_kill_all(&pid, 1);
    CK_OK(disco__ipc_export(ipc, c2, &rc)); /* b's slot reclaimed */
    ck_assert_uint_eq(rc.slot, refs[1].slot);
    ck_assert_uint_gt(rc.gen, refs[1].gen);
    CK_STATUS(disco__ipc_export(ipc, d, &rd), DISCO_E_NOMEM); /* a is held by us */
    CK_OK(disco__ipc_release(ipc, &refs[0]));
    CK_OK(disco__ipc_export(ipc, d, &rd)); /* now a's slot is reclaimed */
    ck_assert_uint_eq(rd.slot, refs[0].slot);
    CK_OK(disco__ipc_remove(ipc, c2));
    CK_OK(disco__ipc_remove(ipc, d));
    disco__ipc_destroy(ipc);
}
END_TEST

/* Destroying an importer's context closes what it has open and leaves the
 * slots, so the exporter can free. */
START_TEST(test_destroy_closes)
{
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096), *b = fake_alloc(4096);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    CK_OK(disco__ipc_add(ipc, b, 4096, 0));
    disco_ipc_ref_t ra, rb;
    CK_OK(disco__ipc_export(ipc, a, &ra));
    CK_OK(disco__ipc_export(ipc, b + 1, &rb));
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_ipc_t *me = child_ctx();
        void *p;
        CH_OK(disco__ipc_import(me, &ra, &p));
        CH_OK(disco__ipc_import(me, &ra, &p));
        CH_OK(disco__ipc_import(me, &rb, &p));
        disco__ipc_destroy(me);
        CH_TRUE(atomic_load(&sh->opens) == 2 && atomic_load(&sh->closes) == 2);
        _exit(0);
    }
    tu_wait_ok(pid, "importer");
    CK_OK(disco__ipc_remove(ipc, a));
    CK_OK(disco__ipc_remove(ipc, b));
    disco__ipc_destroy(ipc);
}
END_TEST

/* A free racing imports from another process: an import that succeeded
 * always finds the allocation not yet freed (the exporter's free waits for
 * its release), and once freed every import fails. Many rounds. */
START_TEST(test_free_races_imports)
{
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096);
    struct chan c;
    chan_open(&c);
    pid_t pid = tu_fork();
    if (pid == 0) {
        close(c.p2c[1]); /* so that the parent's close ends the loop */
        disco_ipc_t *me = child_ctx();
        disco_ipc_ref_t r;
        while (read(c.p2c[0], &r, sizeof r) == (ssize_t)sizeof r) {
            for (;;) {
                void *p;
                disco_status_t st = disco__ipc_import(me, &r, &p);
                if (st == DISCO_OK) {
                    /* seq_cst: ordered after the import's claim. */
                    if (atomic_load(&sh->freed))
                        tu_child_fail("import succeeded after the free");
                    atomic_fetch_add(&sh->imports_ok, 1);
                    CH_OK(disco__ipc_release(me, &r));
                } else if (atomic_load(&sh->freed)) {
                    break;
                }
            }
            ch_put(c.c2p[1], 'd');
        }
        disco__ipc_destroy(me);
        _exit(0);
    }
    long refused = 0;
    for (int round = 0; round < 200; round++) {
        CK_OK(disco__ipc_add(ipc, a, 4096, 0));
        disco_ipc_ref_t r;
        CK_OK(disco__ipc_export(ipc, a + round, &r));
        atomic_store(&sh->freed, 0);
        long before = atomic_load(&sh->imports_ok);
        ck_assert(write(c.p2c[1], &r, sizeof r) == (ssize_t)sizeof r);
        while (atomic_load(&sh->imports_ok) == before) /* let the child get going */
            sched_yield();
        disco_status_t st;
        while ((st = disco__ipc_remove(ipc, a)) == DISCO_E_AGAIN) {
            refused++;
            sched_yield();
        }
        CK_STATUS(st, DISCO_OK);
        atomic_store(&sh->freed, 1);
        ck_assert_int_eq(get(c.c2p[0]), 'd');
    }
    close(c.p2c[1]);
    tu_wait_ok(pid, "racing importer");
    ck_assert_int_eq(atomic_load(&sh->opens), atomic_load(&sh->closes));
    ck_assert_int_eq(atomic_load(&sh->double_opens) + atomic_load(&sh->own_opens), 0);
    fprintf(stderr, "ipc race: %ld imports, %ld refused frees\n", atomic_load(&sh->imports_ok),
            refused);
    disco__ipc_destroy(ipc);
}
END_TEST

/* The slot protocol without a context (ipc_table.h): a claimed slot given
 * back is claimed again with the same generation; a published slot is
 * joined by a ref that matches it and refused to one that does not; a held
 * slot refuses to close and names its holder; after leaving, it closes, and
 * its old ref is stale. */
START_TEST(test_slot_protocol)
{
    int32_t me = (int32_t)getpid();
    ck_assert_uint_eq(disco__ipc_table_nslots(table), NSLOTS);
    uint32_t idx[NSLOTS], gen[NSLOTS];
    for (uint32_t i = 0; i < NSLOTS; i++) {
        idx[i] = disco__ipc_slot_claim(table, me, &gen[i]);
        ck_assert_uint_lt(idx[i], NSLOTS);
        ck_assert_uint_eq(gen[i], 1);
    }
    uint32_t g = 0;
    ck_assert_uint_eq(disco__ipc_slot_claim(table, me, &g), UINT32_MAX); /* full, all live */
    disco__ipc_slot_abandon(table, idx[3], gen[3]);
    ck_assert_uint_eq(disco__ipc_slot_claim(table, me, &g), idx[3]);
    ck_assert_uint_eq(g, gen[3]);

    disco_ipc_handle_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.bytes, "slot-test", 9);
    uint32_t s = idx[0];
    disco__ipc_slot_publish(table, s, gen[0], me, 2, 4096, &h);
    ck_assert_uint_eq(disco__ipc_slot_importers(table, s), 0);
    disco_ipc_ref_t ref = {.handle = h,
                           .exporter_pid = me,
                           .device_id = 2,
                           .slot = s,
                           .gen = gen[0],
                           .offset = 0,
                           .alloc_bytes = 4096};
    disco_ipc_ref_t wrong = ref;
    wrong.alloc_bytes = 8192;
    uint32_t cell = UINT32_MAX;
    CK_STATUS(disco__ipc_slot_join(table, &wrong, me, &cell), DISCO_E_INVAL);
    CK_HAS("disagrees");
    ck_assert_uint_eq(disco__ipc_slot_importers(table, s), 0);
    CK_OK(disco__ipc_slot_join(table, &ref, me, &cell));
    ck_assert_uint_lt(cell, DISCO_IPC_MAX_IMPORTERS);
    ck_assert_uint_eq(disco__ipc_slot_importers(table, s), 1);

    uint32_t live = 0;
    int32_t pids[2] = {0, 0};
    ck_assert_int_eq(disco__ipc_slot_close(table, s, gen[0], me, &live, pids, 2), DISCO_E_AGAIN);
    ck_assert_uint_eq(live, 1);
    ck_assert_int_eq(pids[0], me);
    ck_assert_int_eq(disco__ipc_slot_close(table, s, gen[0] + 1, me, &live, pids, 2),
                     DISCO_E_INVAL); /* not the slot's word */
    disco__ipc_slot_leave(table, s, cell);
    ck_assert_uint_eq(disco__ipc_slot_importers(table, s), 0);
    ck_assert_int_eq(disco__ipc_slot_close(table, s, gen[0], me, &live, pids, 2), DISCO_OK);
    CK_STATUS(disco__ipc_slot_join(table, &ref, me, &cell), DISCO_E_INVAL);
    CK_HAS("stale ref");
}
END_TEST

/* A peer raises the slot count in the table's shared header (any process
 * that maps the table can write it). This process keeps the count it read
 * when it attached: a full table stays full, and an export fails as "table
 * full" (before, the exporter claimed and published slot NSLOTS, past the
 * table: an out-of-bounds write); a ref naming a slot past the table is
 * refused; a fresh attach checks the raised count against the bytes
 * mapped. */
START_TEST(test_table_count_raised)
{
    int32_t me = (int32_t)getpid();
    uint32_t gen = 0;
    for (uint32_t i = 0; i < NSLOTS; i++)
        ck_assert_uint_lt(disco__ipc_slot_claim(table, me, &gen), NSLOTS);
    _Atomic uint32_t *count =
        (_Atomic uint32_t *)((char *)table_mem + 12); /* after magic, version */
    ck_assert_uint_eq(atomic_load(count), NSLOTS);
    atomic_store(count, NSLOTS + 16);
    ck_assert_uint_eq(disco__ipc_slot_claim(table, me, &gen), UINT32_MAX);
    ck_assert_uint_eq(disco__ipc_table_nslots(table), NSLOTS);
    disco_ipc_t *ipc = new_ctx();
    char *a = fake_alloc(4096);
    CK_OK(disco__ipc_add(ipc, a, 4096, 0));
    disco_ipc_ref_t r;
    CK_STATUS(disco__ipc_export(ipc, a, &r), DISCO_E_NOMEM);
    CK_HAS("table full");
    disco_ipc_ref_t past = {.exporter_pid = me, .slot = NSLOTS + 2, .gen = 1, .alloc_bytes = 4096};
    uint32_t cell;
    CK_STATUS(disco__ipc_slot_join(table, &past, me, &cell), DISCO_E_INVAL);
    disco_ipc_table_t *t2;
    CK_STATUS(disco__ipc_table_attach(table_mem, disco__ipc_table_footprint(NSLOTS), &t2),
              DISCO_E_INVAL);
    atomic_store(count, NSLOTS);
    CK_OK(disco__ipc_remove(ipc, a));
    disco__ipc_destroy(ipc);
}
END_TEST

Suite *suite_ipc_lifetime(void)
{
    Suite *s = suite_create("ipc_lifetime");
    TCase *tc = tcase_create("lifetime");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_dead_importer);
    tcase_add_test(tc, test_bad_refs);
    tcase_add_test(tc, test_table_full_and_reclaim);
    tcase_add_test(tc, test_destroy_closes);
    tcase_add_test(tc, test_slot_protocol);
    tcase_add_test(tc, test_table_count_raised);
    suite_add_tcase(s, tc);

    tc = tcase_create("race");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_free_races_imports);
    suite_add_tcase(s, tc);
    return s;
}
