/* test_ipc.c - the CUDA IPC bookkeeping (workers/device/ipc.c) with a fake backend,
 * on every machine: export once, offsets, the import cache, own handles,
 * reference counts and closing, frees refused while imported, dead
 * importers and exporters, bad refs, and a free racing imports. Importers
 * are forked processes, as workers are.
 *
 * The fake "device": each allocation is a memfd made before fork, so every
 * process of the test has its fd. A handle carries the exporter's pid and
 * the fd; opening maps the fd at a new address (a different pointer from the
 * exporter's, the same bytes), and fails like CUDA for the exporter's own
 * handle and for a handle already open in the process. Calls are counted in
 * shared memory. */
#include <check.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "workers/device/ipc.h"
#include "tests/testutil.h"

#define NSLOTS 8

/* ---- shared counters and the fake backend ---------------------------------- */

struct shared {
    _Atomic int gets, opens, closes, own_opens, double_opens;
    _Atomic int freed; /* test_free_races_imports */
    _Atomic long imports_ok;
};

static struct shared *sh;
static void *table_mem;
static disco_ipc_table_t *table;

struct fake_handle {
    char magic[8]; /* "FAKEIPC" */
    int32_t pid;
    int32_t fd;
    uint64_t bytes;
};

#define MAX_FAKES 16
static struct {
    int fd;
    void *base;
    size_t bytes;
} fakes[MAX_FAKES];
static int nfakes;

/* Per process: what this process has open (a copy after fork; the parent
 * opens nothing it keeps across a fork). */
static struct {
    int fd;
    void *base;
    size_t bytes;
} opened[MAX_FAKES];
static int nopened;

static void *fake_alloc(size_t bytes)
{
    int fd = memfd_create("fake-gpu", MFD_CLOEXEC);
    ck_assert_msg(fd >= 0 && ftruncate(fd, (off_t)bytes) == 0, "memfd_create: %s", strerror(errno));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_msg(p != MAP_FAILED, "mmap: %s", strerror(errno));
    ck_assert_int_lt(nfakes, MAX_FAKES);
    fakes[nfakes].fd = fd;
    fakes[nfakes].base = p;
    fakes[nfakes].bytes = bytes;
    nfakes++;
    return p;
}

static disco_status_t fake_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
{
    (void)ctx;
    for (int i = 0; i < nfakes; i++) {
        if (fakes[i].base == base) {
            struct fake_handle h = {"FAKEIPC", (int32_t)getpid(), fakes[i].fd, fakes[i].bytes};
            memset(handle_out, 0, sizeof *handle_out);
            memcpy(handle_out->bytes, &h, sizeof h);
            atomic_fetch_add(&sh->gets, 1);
            return DISCO_OK;
        }
    }
    return disco_set_error(DISCO_E_SYS, "fake get_handle: %p is no allocation's base", base);
}

static disco_status_t fake_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out)
{
    (void)ctx;
    struct fake_handle h;
    memcpy(&h, handle->bytes, sizeof h);
    if (memcmp(h.magic, "FAKEIPC", 8) != 0)
        return disco_set_error(DISCO_E_SYS, "fake open_handle: not a handle");
    if (h.pid == (int32_t)getpid()) {
        atomic_fetch_add(&sh->own_opens, 1);
        return disco_set_error(DISCO_E_SYS, "fake open_handle: opening its own handle");
    }
    for (int i = 0; i < nopened; i++) {
        if (opened[i].fd == h.fd) {
            atomic_fetch_add(&sh->double_opens, 1);
            return disco_set_error(DISCO_E_SYS, "fake open_handle: already open here");
        }
    }
    void *p = mmap(NULL, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, h.fd, 0);
    if (p == MAP_FAILED)
        return disco_set_error(DISCO_E_SYS, "fake open_handle: mmap fd %d: %s", h.fd,
                               strerror(errno));
    opened[nopened].fd = h.fd;
    opened[nopened].base = p;
    opened[nopened].bytes = h.bytes;
    nopened++;
    atomic_fetch_add(&sh->opens, 1);
    *base_out = p;
    return DISCO_OK;
}

static disco_status_t fake_close_handle(void *ctx, void *base)
{
    (void)ctx;
    for (int i = 0; i < nopened; i++) {
        if (opened[i].base == base) {
            munmap(base, opened[i].bytes);
            opened[i] = opened[--nopened];
            atomic_fetch_add(&sh->closes, 1);
            return DISCO_OK;
        }
    }
    return disco_set_error(DISCO_E_SYS, "fake close_handle: %p is not open", base);
}

static const disco_ipc_backend_t fake = {
    .ctx = NULL,
    .get_handle = fake_get_handle,
    .open_handle = fake_open_handle,
    .close_handle = fake_close_handle,
};

/* Fixture (runs in each test's own process): counters and a table of
 * NSLOTS slots in shared memory, inherited by the test's children. */
static void setup(void)
{
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(sh != MAP_FAILED);
    size_t fp = disco__ipc_table_footprint(NSLOTS);
    table_mem = mmap(NULL, fp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(table_mem != MAP_FAILED);
    CK_OK(disco__ipc_table_init(table_mem, fp, NSLOTS, &table));
}

static void teardown(void)
{
    for (int i = 0; i < nfakes; i++) {
        munmap(fakes[i].base, fakes[i].bytes);
        close(fakes[i].fd);
    }
    nfakes = 0;
    nopened = 0;
    munmap(table_mem, disco__ipc_table_footprint(NSLOTS));
    munmap(sh, sizeof *sh);
}

static disco_ipc_t *new_ctx(void)
{
    disco_ipc_t *ipc;
    CK_OK(disco__ipc_create(&fake, table, &ipc));
    return ipc;
}

/* A child's own context, on the inherited table mapping (attached anew, as
 * a spawned worker would). */
static disco_ipc_t *child_ctx(void)
{
    disco_ipc_table_t *t;
    disco_ipc_t *ipc;
    CH_OK(disco__ipc_table_attach(table_mem, disco__ipc_table_footprint(NSLOTS), &t));
    CH_OK(disco__ipc_create(&fake, t, &ipc));
    return ipc;
}

/* One byte over a pipe: the step protocol between parent and child. */
static void put(int fd, char c)
{
    ck_assert_msg(write(fd, &c, 1) == 1, "write: %s", strerror(errno));
}
static char get(int fd)
{
    char c = 0;
    ck_assert_msg(read(fd, &c, 1) == 1, "read: peer gone");
    return c;
}
static void ch_put(int fd, char c)
{
    if (write(fd, &c, 1) != 1)
        tu_child_fail("write: %s", strerror(errno));
}
static char ch_get(int fd)
{
    char c = 0;
    if (read(fd, &c, 1) != 1)
        tu_child_fail("read: parent gone");
    return c;
}

/* Two pipes: p2c (parent -> child) and c2p. */
struct chan {
    int p2c[2], c2p[2];
};
static void chan_open(struct chan *c)
{
    ck_assert(pipe(c->p2c) == 0 && pipe(c->c2p) == 0);
}

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
    CK_STATUS(disco__ipc_table_attach(table_mem, fp - 1, &t), DISCO_E_INVAL);
    CK_OK(disco__ipc_table_attach(table_mem, fp, &t));
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
    tcase_add_test(tc, test_dead_importer);
    tcase_add_test(tc, test_bad_refs);
    tcase_add_test(tc, test_table_full_and_reclaim);
    tcase_add_test(tc, test_destroy_closes);
    suite_add_tcase(s, tc);

    tc = tcase_create("race");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_free_races_imports);
    suite_add_tcase(s, tc);
    return s;
}
