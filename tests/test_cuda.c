/* test_cuda.c - the device API: the CPU device and "no device" errors on
 * every machine; on a GPU, device counts and the worker mapping, alloc /
 * free / copy round trips, CUDA IPC export and import across forked
 * processes (two sharing one GPU, cached imports, frees refused while
 * imported) and a cross-process read ordered by an IPC event.
 *
 * GPU tests skip (print "no CUDA device: ..." and pass) when this build has
 * no CUDA or the machine has no GPU or driver; with DISCO_REQUIRE_GPU=1 in
 * the environment (machines that have a GPU) they fail instead, so that a
 * broken driver or a build without CUDA cannot pass unseen. The probe runs
 * in a forked child: a process that has initialized CUDA cannot fork
 * workers that use it, so each test forks its importers before touching
 * CUDA itself. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "disco/device.h"
#include "tests/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
/* CUDA maps device memory where ASan's shadow gap would be protected. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "protect_shadow_gap=0";
}
#endif

static const DLDevice cpu = {kDLCPU, 0};

/* ---- probing and skipping --------------------------------------------------- */

/* How many GPUs there are, asked in a forked child (disco_device_probe),
 * leaving this process without CUDA. Returns the count (>= 1), or 0 with
 * the reason in why. */
static int gpu_count(char *why, size_t len)
{
    int n = 0;
    disco_status_t st = disco_device_probe(kDLCUDA, &n);
    ck_assert_msg(st != DISCO_E_SYS || strstr(disco_last_error(), "probe") == NULL,
                  "the probe itself failed: %s", disco_last_error());
    if (st == DISCO_OK)
        return n;
    snprintf(why, len, "%s", disco_last_error());
    return 0;
}

/* Whether DISCO_REQUIRE_GPU asks for GPU tests to fail rather than skip
 * (set and neither empty nor "0"). */
static int gpu_required(void)
{
    const char *v = getenv("DISCO_REQUIRE_GPU");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Returns from the test, passing, when there is no GPU to test; fails it
 * instead under DISCO_REQUIRE_GPU=1. */
#define NEED_GPU(name, n_out)                                                                      \
    do {                                                                                           \
        char why_[256];                                                                            \
        (n_out) = gpu_count(why_, sizeof why_);                                                    \
        if ((n_out) == 0) {                                                                        \
            ck_assert_msg(!gpu_required(), "%s: DISCO_REQUIRE_GPU is set but there is no GPU: %s", \
                          (name), why_);                                                           \
            printf("%s: skipped: %s\n", (name), why_);                                             \
            fflush(stdout);                                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* ---- pipes ------------------------------------------------------------------ */

struct chan {
    int p2c[2], c2p[2];
};
static void chan_open(struct chan *c)
{
    ck_assert(pipe(c->p2c) == 0 && pipe(c->c2p) == 0);
}
static void put(int fd, const void *buf, size_t n)
{
    ck_assert_msg(write(fd, buf, n) == (ssize_t)n, "write: %s", strerror(errno));
}
static void get(int fd, void *buf, size_t n)
{
    ck_assert_msg(read(fd, buf, n) == (ssize_t)n, "read: peer gone");
}
static void ch_put(int fd, const void *buf, size_t n)
{
    if (write(fd, buf, n) != (ssize_t)n)
        tu_child_fail("write: %s", strerror(errno));
}
static void ch_get(int fd, void *buf, size_t n)
{
    if (read(fd, buf, n) != (ssize_t)n)
        tu_child_fail("read: parent gone");
}

/* A lifetime table in shared memory, inherited by children forked later. */
static void ipc_table(uint32_t slots)
{
    size_t fp = disco_device_ipc_footprint(slots);
    void *mem = mmap(NULL, fp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(mem != MAP_FAILED);
    CK_OK(disco_device_ipc_init(mem, fp, slots));
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed + (i >> 12));
}
static size_t first_diff(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31 + seed + (i >> 12)))
            return i;
    return n;
}

/* ---- everywhere: the CPU device and "no device" --------------------------- */

/* The CPU device: one device, aligned allocations, copies, no-op streams;
 * the worker mapping rule; unsupported device types are refused. */
START_TEST(test_cpu_device)
{
    int n = 0;
    CK_OK(disco_device_count(kDLCPU, &n));
    ck_assert_int_eq(n, 1);
    const disco_device_api_t *api;
    CK_OK(disco_device_api_get(kDLCPU, &api));
    ck_assert_str_eq(api->name, "cpu");
    unsigned char *a, *b;
    CK_OK(disco_device_alloc(cpu, 4096, (void **)&a));
    CK_OK(disco_device_alloc(cpu, 4096, (void **)&b));
    ck_assert_msg((uintptr_t)a % 64 == 0, "CPU allocation %p not 64-byte aligned", (void *)a);
    fill(a, 4096, 3);
    disco_stream_t s;
    CK_OK(disco_device_stream_create(cpu, &s));
    CK_OK(disco_device_copy(b, cpu, a, cpu, 4096, s));
    CK_OK(disco_device_stream_sync(cpu, s));
    ck_assert_uint_eq(first_diff(b, 4096, 3), 4096);
    CK_OK(disco_device_copy(NULL, cpu, NULL, cpu, 0, NULL));
    CK_STATUS(disco_device_copy(NULL, cpu, a, cpu, 1, NULL), DISCO_E_INVAL);
    CK_OK(disco_device_stream_free(cpu, s));
    CK_STATUS(disco_device_alloc(cpu, 0, (void **)&a), DISCO_E_INVAL);
    CK_OK(disco_device_set(cpu));
    CK_STATUS(disco_device_set((DLDevice){kDLCPU, 1}), DISCO_E_NO_DEVICE);
    CK_OK(disco_device_free(cpu, a));
    CK_OK(disco_device_free(cpu, b));
    CK_OK(disco_device_free(cpu, NULL));

    ck_assert_int_eq(disco_device_for_worker(0, 4), 0);
    ck_assert_int_eq(disco_device_for_worker(5, 4), 1);
    ck_assert_int_eq(disco_device_for_worker(7, 1), 0);
    ck_assert_int_eq(disco_device_for_worker(3, 0), -1);
    ck_assert_int_eq(disco_device_for_worker(-1, 2), -1);
    DLDevice d;
    CK_OK(disco_device_of_worker(kDLCPU, 6, &d));
    ck_assert_msg(d.device_type == kDLCPU && d.device_id == 0, "worker 6 on cpu:%d", d.device_id);
    CK_STATUS(disco_device_of_worker(kDLCPU, -1, &d), DISCO_E_INVAL);

    CK_STATUS(disco_device_api_get(kDLVulkan, &api), DISCO_E_NO_DEVICE);
    CK_STATUS(disco_device_alloc((DLDevice){kDLOpenCL, 0}, 64, (void **)&a), DISCO_E_NO_DEVICE);
    CK_STATUS(disco_device_copy(b, (DLDevice){kDLMetal, 0}, b, cpu, 8, NULL), DISCO_E_NO_DEVICE);
}
END_TEST

/* Without a GPU (or CUDA in the build) every CUDA call says "no CUDA
 * device" and the CPU path carries on; with one, a device id past the count
 * is "no device". */
START_TEST(test_no_device_errors)
{
    char why[256];
    int n = gpu_count(why, sizeof why);
    printf("test_no_device_errors: CUDA in this build: %s; GPUs: %d%s%s\n",
           disco_device_has_cuda() ? "yes" : "no", n, n ? "" : ": ", n ? "" : why);
    fflush(stdout);
    DLDevice gpu = {kDLCUDA, n}; /* one past the last */
    void *p = NULL;
    CK_STATUS(disco_device_alloc(gpu, 64, &p), DISCO_E_NO_DEVICE);
    CK_HAS("no CUDA device: ");
    CK_STATUS(disco_device_set(gpu), DISCO_E_NO_DEVICE);
    if (n == 0) {
        ck_assert_msg(strncmp(why, "no CUDA device: ", 16) == 0, "probe detail: %s", why);
        if (!disco_device_has_cuda())
            ck_assert_msg(strstr(why, "no CUDA support") != NULL, "probe detail: %s", why);
        int cnt = -1;
        CK_STATUS(disco_device_count(kDLCUDA, &cnt), DISCO_E_NO_DEVICE);
        ck_assert_int_eq(cnt, -1);
        CK_HAS("no CUDA device: ");
        DLDevice d;
        CK_STATUS(disco_device_of_worker(kDLCUDA, 3, &d), DISCO_E_NO_DEVICE);
        char host[64];
        CK_STATUS(disco_device_copy(host, cpu, host, (DLDevice){kDLCUDA, 0}, 64, NULL),
                  DISCO_E_NO_DEVICE);
        disco_stream_t s;
        CK_STATUS(disco_device_stream_create((DLDevice){kDLCUDA, 0}, &s), DISCO_E_NO_DEVICE);
        CK_STATUS(disco_device_stream_sync((DLDevice){kDLCUDA, 0}, NULL), DISCO_E_NO_DEVICE);
        disco_event_t *ev;
        CK_STATUS(disco_device_event_create((DLDevice){kDLCUDA, 0}, &ev), DISCO_E_NO_DEVICE);
        disco_device_event_free(NULL);
    }
    /* The CPU path is unaffected. */
    void *a;
    CK_OK(disco_device_alloc(cpu, 128, &a));
    CK_OK(disco_device_free(cpu, a));
}
END_TEST

/* disco_device_probe counts in a child: the sim count of the environment
 * (the child reads it: this process has not used sim), the CPU's 1, and a
 * child's error comes back with its status and message. */
START_TEST(test_probe)
{
    setenv("DISCO_SIM_GPUS", "3", 1);
    int n = -1;
    CK_OK(disco_device_probe(kDLExtDev, &n));
    ck_assert_int_eq(n, 3);
    CK_OK(disco_device_probe(kDLCPU, &n));
    ck_assert_int_eq(n, 1);
    setenv("DISCO_SIM_GPUS", "0", 1);
    n = -1;
    CK_STATUS(disco_device_probe(kDLExtDev, &n), DISCO_E_NO_DEVICE);
    CK_HAS("sim");
    ck_assert_int_eq(n, -1);
}
END_TEST

/* A process forked after its parent called CUDA gets a clear refusal
 * naming the fork on every CUDA call, not CUDA's bare initialization
 * error; the parent itself goes on. Runs with or without a GPU (a failed
 * call counts as a call); skips in a build without CUDA. */
START_TEST(test_cuda_after_fork_refused)
{
    if (!disco_device_has_cuda()) {
        printf("test_cuda_after_fork_refused: skipped: this build has no CUDA support\n");
        return;
    }
    int n = -1;
    (void)disco_device_count(kDLCUDA, &n); /* this process has called CUDA now */
    pid_t pid = tu_fork();
    if (pid == 0) {
        int m = -1;
        void *p;
        CH_STATUS(disco_device_count(kDLCUDA, &m), DISCO_E_NO_DEVICE);
        CH_TRUE(strstr(disco_last_error(), "forked from pid") != NULL);
        CH_TRUE(strstr(disco_last_error(), "DISCO_LAUNCH_SPAWN") != NULL);
        CH_STATUS(disco_device_alloc((DLDevice){kDLCUDA, 0}, 64, &p), DISCO_E_NO_DEVICE);
        CH_TRUE(strstr(disco_last_error(), "forked from pid") != NULL);
        _exit(0);
    }
    tu_wait_ok(pid, "child");
    int again = -1;
    disco_status_t st = disco_device_count(kDLCUDA, &again);
    ck_assert_msg(strstr(disco_last_error(), "forked") == NULL || st == DISCO_OK,
                  "the parent was refused: %s", disco_last_error());
}
END_TEST

/* ---- on a GPU --------------------------------------------------------------- */

/* Device count, and worker i on GPU i mod count, each settable. */
START_TEST(test_device_count)
{
    int n;
    NEED_GPU("test_device_count", n);
    int m = 0;
    CK_OK(disco_device_count(kDLCUDA, &m));
    ck_assert_int_eq(m, n);
    for (int w = 0; w < 2 * n + 1; w++) {
        DLDevice d;
        CK_OK(disco_device_of_worker(kDLCUDA, w, &d));
        ck_assert_msg(d.device_type == kDLCUDA && d.device_id == w % n, "worker %d on cuda:%d", w,
                      d.device_id);
        CK_OK(disco_device_set(d));
    }
}
END_TEST

/* Host -> device -> device (another GPU when there is one) -> host, on a
 * stream and on the default stream; frees of bad pointers are refused. */
START_TEST(test_alloc_copy_round_trip)
{
    int n;
    NEED_GPU("test_alloc_copy_round_trip", n);
    const size_t len = 4u << 20;
    DLDevice g0 = {kDLCUDA, 0}, g1 = {kDLCUDA, disco_device_for_worker(1, n)};
    unsigned char *host = malloc(len), *back = malloc(len);
    ck_assert(host && back);
    fill(host, len, 11);
    memset(back, 0, len);
    unsigned char *d0, *d1;
    CK_OK(disco_device_alloc(g0, len, (void **)&d0));
    CK_OK(disco_device_alloc(g1, len, (void **)&d1));
    disco_stream_t s;
    CK_OK(disco_device_stream_create(g0, &s));
    CK_OK(disco_device_copy(d0, g0, host, cpu, len, s));
    CK_OK(disco_device_copy(d1, g1, d0, g0, len, s));
    CK_OK(disco_device_copy(back, cpu, d1, g1, len, s));
    CK_OK(disco_device_stream_sync(g0, s));
    ck_assert_uint_eq(first_diff(back, len, 11), len);
    /* Part of a buffer, at an offset, on the default stream. */
    memset(back, 0, len);
    CK_OK(disco_device_copy(back, cpu, d0 + 4096, g0, 8192, NULL));
    CK_OK(disco_device_stream_sync(g0, NULL));
    ck_assert_msg(memcmp(back, host + 4096, 8192) == 0, "offset copy differs");
    CK_OK(disco_device_stream_free(g0, s));
    CK_STATUS(disco_device_free(g0, d0 + 1), DISCO_E_INVAL);
    CK_OK(disco_device_free(g0, d0));
    CK_STATUS(disco_device_free(g0, d0), DISCO_E_INVAL);
    CK_OK(disco_device_free(g1, d1));
    free(host);
    free(back);
}
END_TEST

/* Bytes at the end of the shared buffer where importer workers write a
 * mark each (64 bytes at 64 * worker from there); the rest is the
 * exporter's pattern. */
#define MARKS(ngpu) ((size_t)64 * (size_t)(2 + (ngpu)))

/* An importer child: imports ref twice and the base ref (one open, cached),
 * reads the exporter's bytes, writes its mark, and holds everything until
 * told to release. */
static void importer(int worker, int ngpu, const struct chan *c)
{
    disco_ipc_ref_t ref[2];
    ch_get(c->p2c[0], ref, sizeof ref); /* [0]: base + 4096, [1]: base */
    DLDevice dev = {kDLCUDA, disco_device_for_worker(worker, ngpu)};
    CH_OK(disco_device_set(dev));
    unsigned char *p, *q, *base;
    CH_OK(disco_device_ipc_import(&ref[0], (void **)&p));
    CH_OK(disco_device_ipc_import(&ref[0], (void **)&q));
    CH_OK(disco_device_ipc_import(&ref[1], (void **)&base));
    CH_TRUE(q == p && base + 4096 == p);
    size_t len = (size_t)ref[1].alloc_bytes;
    unsigned char *host = malloc(len);
    CH_TRUE(host != NULL);
    size_t plen = len - MARKS(ngpu);
    CH_OK(disco_device_copy(host, cpu, base, dev, plen, NULL));
    CH_OK(disco_device_stream_sync(dev, NULL));
    size_t at = first_diff(host, plen, 5);
    if (at != plen)
        tu_child_fail("worker %d: byte %zu differs from the exporter's", worker, at);
    unsigned char mark[64];
    memset(mark, 0xC0 + worker, sizeof mark);
    CH_OK(disco_device_copy(base + plen + 64 * worker, dev, mark, cpu, sizeof mark, NULL));
    CH_OK(disco_device_stream_sync(dev, NULL));
    ch_put(c->c2p[1], "h", 1); /* holding */
    char go;
    ch_get(c->p2c[0], &go, 1);
    CH_OK(disco_device_ipc_release(&ref[0]));
    CH_OK(disco_device_ipc_release(&ref[1]));
    CH_OK(disco_device_ipc_release(&ref[0]));
    CH_STATUS(disco_device_ipc_release(&ref[0]), DISCO_E_INVAL);
    free(host);
    ch_put(c->c2p[1], "r", 1); /* released */
    _exit(0);
}

/* CUDA IPC across processes: two workers sharing one GPU each open the
 * exporter's allocation once (cached on re-import, base + offset), see its
 * bytes and write their own; the exporter cannot free while they hold it,
 * and its own ref resolves to its own pointer. */
START_TEST(test_ipc_across_fork)
{
    int n;
    NEED_GPU("test_ipc_across_fork", n);
    ipc_table(16);
    /* Workers 1 and 1 + n share GPU 1 mod n. Forked before any CUDA here. */
    struct chan c[2];
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        chan_open(&c[k]);
        pid[k] = tu_fork();
        if (pid[k] == 0)
            importer(1 + k * n, n, &c[k]);
    }
    const size_t len = 1u << 20;
    DLDevice g0 = {kDLCUDA, 0};
    unsigned char *d, *host = malloc(len);
    ck_assert(host != NULL);
    fill(host, len, 5);
    CK_OK(disco_device_alloc(g0, len, (void **)&d));
    CK_OK(disco_device_copy(d, g0, host, cpu, len, NULL));
    CK_OK(disco_device_stream_sync(g0, NULL));
    disco_ipc_ref_t ref[2], again;
    CK_OK(disco_device_ipc_export(d + 4096, &ref[0]));
    CK_OK(disco_device_ipc_export(d, &ref[1]));
    CK_OK(disco_device_ipc_export(d + 4096, &again));
    ck_assert_msg(memcmp(&again, &ref[0], sizeof again) == 0, "second export differs");
    ck_assert_msg(ref[0].offset == 4096 && ref[1].offset == 0 &&
                      memcmp(&ref[0].handle, &ref[1].handle, sizeof ref[0].handle) == 0,
                  "refs: offsets %llu %llu", (unsigned long long)ref[0].offset,
                  (unsigned long long)ref[1].offset);
    void *own;
    CK_OK(disco_device_ipc_import(&ref[0], &own));
    ck_assert_msg(own == d + 4096, "own import gave %p, want %p", own, (void *)(d + 4096));
    CK_OK(disco_device_ipc_release(&ref[0]));
    for (int k = 0; k < 2; k++)
        put(c[k].p2c[1], ref, sizeof ref);
    char got;
    for (int k = 0; k < 2; k++) {
        get(c[k].c2p[0], &got, 1);
        ck_assert_int_eq(got, 'h');
    }
    CK_STATUS(disco_device_free(g0, d), DISCO_E_AGAIN);
    CK_HAS("still imported by 2 process");
    CK_OK(disco_device_copy(host, cpu, d + len - MARKS(n), g0, MARKS(n), NULL));
    CK_OK(disco_device_stream_sync(g0, NULL));
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 64; i++)
            ck_assert_msg(host[64 * (1 + k * n) + i] == 0xC0 + 1 + k * n,
                          "importer %d's bytes not seen by the exporter", k);
    for (int k = 0; k < 2; k++) {
        put(c[k].p2c[1], "g", 1);
        get(c[k].c2p[0], &got, 1);
        ck_assert_int_eq(got, 'r');
        tu_wait_ok(pid[k], "importer");
    }
    CK_OK(disco_device_free(g0, d));
    CK_STATUS(disco_device_ipc_export(d, &again), DISCO_E_INVAL);
    free(host);
}
END_TEST

/* Cross-process ordering by an IPC event: the exporter queues a large
 * device copy into a shared buffer, records an event and tells the other
 * process at once, without waiting; that process's stream waits for the
 * event, then reads the buffer: it sees every byte of the copy. */
START_TEST(test_ipc_event_orders_read)
{
    int n;
    NEED_GPU("test_ipc_event_orders_read", n);
    ipc_table(16);
    const size_t len = 64u << 20;
    struct chan c;
    chan_open(&c);
    pid_t pid = tu_fork();
    if (pid == 0) {
        struct {
            disco_ipc_ref_t buf;
            disco_ipc_handle_t ev;
        } msg;
        ch_get(c.p2c[0], &msg, sizeof msg);
        DLDevice dev = {kDLCUDA, disco_device_for_worker(1, n)};
        CH_OK(disco_device_set(dev));
        unsigned char *p, *host = malloc(len);
        CH_TRUE(host != NULL);
        disco_event_t *ev;
        disco_stream_t s;
        CH_OK(disco_device_ipc_import(&msg.buf, (void **)&p));
        CH_OK(disco_device_event_import(dev, &msg.ev, &ev));
        CH_OK(disco_device_stream_create(dev, &s));
        ch_put(c.c2p[1], "i", 1); /* imported */
        char go;
        ch_get(c.p2c[0], &go, 1); /* recorded (maybe not finished) */
        CH_OK(disco_device_stream_wait_event(s, ev));
        CH_OK(disco_device_copy(host, cpu, p, dev, len, s));
        CH_OK(disco_device_stream_sync(dev, s));
        size_t at = first_diff(host, len, 9);
        if (at != len)
            tu_child_fail("byte %zu read before the exporter's copy finished", at);
        CH_OK(disco_device_event_sync(ev));
        CH_OK(disco_device_event_query(ev));
        disco_device_event_free(ev);
        CH_OK(disco_device_stream_free(dev, s));
        CH_OK(disco_device_ipc_release(&msg.buf));
        free(host);
        ch_put(c.c2p[1], "d", 1);
        _exit(0);
    }
    DLDevice g0 = {kDLCUDA, 0};
    unsigned char *src, *dst, *host = malloc(len);
    ck_assert(host != NULL);
    CK_OK(disco_device_alloc(g0, len, (void **)&src));
    CK_OK(disco_device_alloc(g0, len, (void **)&dst));
    fill(host, len, 9);
    CK_OK(disco_device_copy(src, g0, host, cpu, len, NULL));
    memset(host, 0, len);
    CK_OK(disco_device_copy(dst, g0, host, cpu, len, NULL));
    CK_OK(disco_device_stream_sync(g0, NULL));
    disco_event_t *ev;
    disco_stream_t s;
    CK_OK(disco_device_event_create(g0, &ev));
    CK_OK(disco_device_stream_create(g0, &s));
    struct {
        disco_ipc_ref_t buf;
        disco_ipc_handle_t ev;
    } msg;
    CK_OK(disco_device_ipc_export(dst, &msg.buf));
    CK_OK(disco_device_event_export(ev, &msg.ev));
    put(c.p2c[1], &msg, sizeof msg);
    char got;
    get(c.c2p[0], &got, 1);
    ck_assert_int_eq(got, 'i');
    for (int rep = 0; rep < 4; rep++) /* keep the GPU busy a while */
        CK_OK(disco_device_copy(dst, g0, src, g0, len, s));
    CK_OK(disco_device_event_record(ev, s));
    put(c.p2c[1], "r", 1);
    get(c.c2p[0], &got, 1);
    ck_assert_int_eq(got, 'd');
    tu_wait_ok(pid, "event reader");
    CK_OK(disco_device_event_sync(ev));
    disco_device_event_free(ev);
    CK_OK(disco_device_stream_free(g0, s));
    CK_OK(disco_device_free(g0, dst));
    CK_OK(disco_device_free(g0, src));
    free(host);
}
END_TEST

Suite *suite_cuda(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("everywhere");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_cpu_device);
    tcase_add_test(tc, test_no_device_errors);
    tcase_add_test(tc, test_cuda_after_fork_refused);
    tcase_add_test(tc, test_probe);
    suite_add_tcase(s, tc);

    tc = tcase_create("gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_device_count);
    tcase_add_test(tc, test_alloc_copy_round_trip);
    tcase_add_test(tc, test_ipc_across_fork);
    tcase_add_test(tc, test_ipc_event_orders_read);
    suite_add_tcase(s, tc);
    return s;
}
