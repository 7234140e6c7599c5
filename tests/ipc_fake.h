/* ipc_fake.h - the fixture of the IPC suites (test_ipc.c,
 * test_ipc_lifetime.c): shared counters, a lifetime table of NSLOTS slots in
 * shared memory, and a fake device backend.
 *
 * The fake "device": each allocation is a memfd made before fork, so every
 * process of the test has its fd. A handle carries the exporter's pid and
 * the fd; opening maps the fd at a new address (a different pointer from the
 * exporter's, the same bytes), and fails like CUDA for the exporter's own
 * handle and for a handle already open in the process. Calls are counted in
 * shared memory. Header-only, static: each suite file has its own copy. */
#ifndef DISCO_TESTS_IPC_FAKE_H
#define DISCO_TESTS_IPC_FAKE_H

#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "workers/device/ipc.h"

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

static inline void *fake_alloc(size_t bytes)
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

static inline disco_status_t fake_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
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

static inline disco_status_t fake_open_handle(void *ctx, const disco_ipc_handle_t *handle,
                                              void **base_out)
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

static inline disco_status_t fake_close_handle(void *ctx, void *base)
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
static inline void setup(void)
{
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(sh != MAP_FAILED);
    size_t fp = disco__ipc_table_footprint(NSLOTS);
    table_mem = mmap(NULL, fp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(table_mem != MAP_FAILED);
    CK_OK(disco__ipc_table_init(table_mem, fp, NSLOTS, &table));
}

static inline void teardown(void)
{
    for (int i = 0; i < nfakes; i++) {
        munmap(fakes[i].base, fakes[i].bytes);
        close(fakes[i].fd);
    }
    nfakes = 0;
    nopened = 0;
    munmap(table_mem, disco__ipc_table_footprint(NSLOTS));
    disco__ipc_table_release(table);
    table = NULL;
    munmap(sh, sizeof *sh);
}

static inline disco_ipc_t *new_ctx(void)
{
    disco_ipc_t *ipc;
    CK_OK(disco__ipc_create(&fake, table, &ipc));
    return ipc;
}

/* A child's own context, on the inherited table mapping (attached anew, as
 * a spawned worker would). */
static inline disco_ipc_t *child_ctx(void)
{
    disco_ipc_table_t *t;
    disco_ipc_t *ipc;
    CH_OK(disco__ipc_table_attach(table_mem, disco__ipc_table_footprint(NSLOTS), &t));
    CH_OK(disco__ipc_create(&fake, t, &ipc));
    return ipc;
}

/* One byte over a pipe: the step protocol between parent and child. */
static inline void put(int fd, char c)
{
    ck_assert_msg(write(fd, &c, 1) == 1, "write: %s", strerror(errno));
}
static inline char get(int fd)
{
    char c = 0;
    ck_assert_msg(read(fd, &c, 1) == 1, "read: peer gone");
    return c;
}
static inline void ch_put(int fd, char c)
{
    if (write(fd, &c, 1) != 1)
        tu_child_fail("write: %s", strerror(errno));
}
static inline char ch_get(int fd)
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
static inline void chan_open(struct chan *c)
{
    ck_assert(pipe(c->p2c) == 0 && pipe(c->c2p) == 0);
}

#endif
