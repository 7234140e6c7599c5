/* test_sim_ipc.c - the simulated GPU's IPC through the public
 * disco_device_ipc_* and disco_device_event_* calls, across forked
 * processes: a sibling imports what another exported and sees its bytes,
 * a handle opens once per process (one fd), the exporter gets its own
 * pointer back, a free is refused while held and allowed after the release
 * or the importer's death, stale refs fail; IPC events order a read after
 * another process's copy, in one process a wait runs the recording stream,
 * and a waiter whose recorder died gets an error. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disco/device.h"
#include "tests/testutil.h"
#include "workers/device/sim.h"

#define NSLOTS 16

static const DLDevice cpu = {kDLCPU, 0};
static const DLDevice sim0 = {kDLExtDev, 0}, sim1 = {kDLExtDev, 1};

/* What the processes of a test share. */
struct shared {
    disco_ipc_ref_t ref;
    disco_ipc_handle_t ev;
    int32_t holder;
};

static void *table_mem;
static struct shared *sh;

static void setup(void)
{
    CK_OK(disco_device_sim_set_count(2));
    size_t fp = disco_device_ipc_footprint(NSLOTS);
    table_mem = mmap(NULL, fp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(table_mem != MAP_FAILED && sh != MAP_FAILED);
    CK_OK(disco_device_ipc_init(table_mem, fp, NSLOTS));
}

/* One byte over a pipe: the steps between the processes. */
static void put(int fd, char c)
{
    if (write(fd, &c, 1) != 1)
        _exit(2);
}
static char get(int fd)
{
    char c = 0;
    if (read(fd, &c, 1) != 1)
        _exit(2);
    return c;
}

/* In the test process: the next step byte must be want, else the children
 * are ended and the test fails naming what. */
static void expect(int fd, char want, const pid_t *pids, unsigned npids, const char *what)
{
    char c = 0;
    if (read(fd, &c, 1) != 1 || c != want) {
        tu_kill_all(pids, npids);
        ck_abort_msg("%s", what);
    }
}

/* Fills n sim bytes at p with pattern(i) = i * 13 + seed, synced. */
static disco_status_t fill(char *p, DLDevice d, size_t n, int seed)
{
    unsigned char buf[4096];
    for (size_t i = 0; i < n && i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 13 + (size_t)seed);
    disco_status_t st = disco_device_copy(p, d, buf, cpu, n, NULL);
    return st != DISCO_OK ? st : disco_device_stream_sync(d, NULL);
}

static bool has(const unsigned char *b, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 13 + (size_t)seed))
            return false;
    return true;
}

/* Export in one child, import in a sibling: the bytes are seen there and
 * its writes back here; a second import is the same mapping (one more fd in
 * all, none after the last release); the exporter's free is refused while
 * the sibling holds it (its pid in the detail) and succeeds after. */
START_TEST(test_sibling_import)
{
    int a_in[2], a_out[2], b_in[2], b_out[2];
    ck_assert(pipe(a_in) == 0 && pipe(a_out) == 0 && pipe(b_in) == 0 && pipe(b_out) == 0);
    pid_t pa = tu_fork();
    if (pa == 0) { /* exporter */
        char *p;
        unsigned char back[8];
        CH_OK(disco_device_alloc(sim0, 8192, (void **)&p));
        CH_OK(fill(p, sim0, 4096, 1));
        CH_OK(disco_device_ipc_export(p + 100, &sh->ref));
        CH_TRUE(sh->ref.offset == 100 && sh->ref.alloc_bytes == 8192);
        put(a_out[1], 'e');
        CH_TRUE(get(a_in[0]) == 'f'); /* the sibling holds it */
        CH_STATUS(disco_device_free(sim0, p), DISCO_E_AGAIN);
        char pid[16];
        snprintf(pid, sizeof pid, "%d", (int)sh->holder);
        CH_TRUE(strstr(disco_last_error(), pid) != NULL);
        CH_OK(disco_device_copy(back, cpu, p + 5000, sim0, 8, NULL));
        CH_OK(disco_device_stream_sync(sim0, NULL));
        CH_TRUE(memcmp(back, "sibling", 8) == 0); /* its write */
        put(a_out[1], 'a');
        CH_TRUE(get(a_in[0]) == 'F'); /* released */
        CH_OK(disco_device_free(sim0, p));
        _exit(0);
    }
    pid_t pb = tu_fork();
    if (pb == 0) { /* importer, on the other device */
        int fds0 = tu_open_fds();
        char *q, *q2;
        unsigned char back[4096];
        CH_TRUE(get(b_in[0]) == 'i');
        CH_OK(disco_device_ipc_import(&sh->ref, (void **)&q));
        CH_OK(disco_device_copy(back, cpu, q - 100, sim1, 4096, NULL));
        CH_OK(disco_device_stream_sync(sim1, NULL));
        CH_TRUE(has(back, 4096, 1));
        CH_OK(disco_device_ipc_import(&sh->ref, (void **)&q2));
        CH_TRUE(q2 == q);
        CH_TRUE(tu_open_fds() == fds0 + 1); /* opened once */
        CH_OK(disco_device_copy(q + 4900, sim1, "sibling", cpu, 8, NULL));
        CH_OK(disco_device_stream_sync(sim1, NULL));
        sh->holder = (int32_t)getpid();
        put(b_out[1], 'h');
        CH_TRUE(get(b_in[0]) == 'r');
        CH_OK(disco_device_ipc_release(&sh->ref));
        CH_TRUE(tu_open_fds() == fds0 + 1);
        CH_OK(disco_device_ipc_release(&sh->ref));
        CH_TRUE(tu_open_fds() == fds0); /* closed */
        CH_STATUS(disco_device_ipc_release(&sh->ref), DISCO_E_INVAL);
        put(b_out[1], 'r');
        _exit(0);
    }
    pid_t both[2] = {pa, pb};
    expect(a_out[0], 'e', both, 2, "exporter failed");
    put(b_in[1], 'i');
    expect(b_out[0], 'h', both, 2, "importer failed");
    put(a_in[1], 'f');
    expect(a_out[0], 'a', both, 2, "exporter failed after the refused free");
    put(b_in[1], 'r');
    expect(b_out[0], 'r', both, 2, "importer failed to release");
    put(a_in[1], 'F');
    tu_wait_ok(pa, "exporter");
    tu_wait_ok(pb, "importer");
}
END_TEST

/* The exporter importing its own ref gets its own pointer (nothing opened,
 * no fd); while it holds that import its free is refused. */
START_TEST(test_own_import)
{
    char *p, *q;
    disco_ipc_ref_t r;
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&p));
    CK_OK(disco_device_ipc_export(p + 64, &r));
    int fds0 = tu_open_fds();
    CK_OK(disco_device_ipc_import(&r, (void **)&q));
    ck_assert_ptr_eq(q, p + 64);
    ck_assert_int_eq(tu_open_fds(), fds0);
    CK_STATUS(disco_device_free(sim0, p), DISCO_E_AGAIN);
    CK_OK(disco_device_ipc_release(&r));
    CK_STATUS(disco_device_ipc_release(&r), DISCO_E_INVAL);
    CK_OK(disco_device_free(sim0, p));
    /* The freed allocation's ref is stale. */
    CK_STATUS(disco_device_ipc_import(&r, (void **)&q), DISCO_E_INVAL);
    /* Host memory is not exportable. */
    char host[8];
    CK_STATUS(disco_device_ipc_export(host, &r), DISCO_E_INVAL);
}
END_TEST

/* Detaching: another table's memory is not ours (nothing happens); ours is
 * refused while an export uses it, and once detached, exports say so
 * instead of touching the table's memory (here made unreadable). */
START_TEST(test_detach)
{
    char other[64] __attribute__((aligned(64)));
    CK_OK(disco_device_ipc_detach(other));
    char *p;
    disco_ipc_ref_t r;
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&p));
    CK_OK(disco_device_ipc_export(p, &r));
    CK_STATUS(disco_device_ipc_detach(table_mem), DISCO_E_INVAL);
    CK_OK(disco_device_free(sim0, p));
    CK_OK(disco_device_ipc_detach(table_mem));
    ck_assert_int_eq(mprotect(table_mem, disco_device_ipc_footprint(NSLOTS), PROT_NONE), 0);
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&p));
    CK_STATUS(disco_device_ipc_export(p, &r), DISCO_E_INVAL);
    CK_HAS("no IPC table attached");
    CK_OK(disco_device_free(sim0, p));
    CK_OK(disco_device_ipc_detach(table_mem)); /* no longer ours: nothing happens */
}
END_TEST

/* An importer that dies holding an import does not block the free; a ref
 * to the freed allocation fails in a later importer. */
START_TEST(test_importer_death)
{
    char *p;
    CK_OK(disco_device_alloc(sim1, 4096, (void **)&p));
    CK_OK(disco_device_ipc_export(p, &sh->ref));
    int c2p[2];
    ck_assert(pipe(c2p) == 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        void *q;
        CH_OK(disco_device_ipc_import(&sh->ref, &q));
        put(c2p[1], 'h');
        pause(); /* killed here, holding it */
        _exit(1);
    }
    ck_assert_int_eq(get(c2p[0]), 'h');
    CK_STATUS(disco_device_free(sim1, p), DISCO_E_AGAIN);
    tu_kill_all(&pid, 1);
    CK_OK(disco_device_free(sim1, p));
    pid = tu_fork();
    if (pid == 0) {
        void *q;
        CH_STATUS(disco_device_ipc_import(&sh->ref, &q), DISCO_E_INVAL);
        _exit(0);
    }
    tu_wait_ok(pid, "late importer");
}
END_TEST

/* Where pidfd_getfd is refused (Yama ptrace_scope=1 between siblings), the
 * import opens /proc/<pid>/fd/<n> instead and works the same. */
START_TEST(test_proc_fallback)
{
    char *p;
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&p));
    CK_OK(fill(p, sim0, 4096, 7));
    CK_OK(disco_device_ipc_export(p, &sh->ref));
    pid_t pid = tu_fork();
    if (pid == 0) {
        unsigned char back[4096];
        void *q;
        disco__sim_no_pidfd_getfd = true;
        CH_OK(disco_device_ipc_import(&sh->ref, &q));
        CH_OK(disco_device_copy(back, cpu, q, sim0, 4096, NULL));
        CH_OK(disco_device_stream_sync(sim0, NULL));
        CH_TRUE(has(back, 4096, 7));
        CH_OK(disco_device_ipc_release(&sh->ref));
        _exit(0);
    }
    tu_wait_ok(pid, "importer through /proc");
    CK_OK(disco_device_free(sim0, p));
}
END_TEST

/* The head of a sim memory or event handle (struct sim_handle in sim.c,
 * struct ev_handle in sim_event.c begin alike): magic, exporter pid, its
 * fd, that fd's inode, then (memory only) the mapped length and device. */
struct raw_handle {
    char magic[8];
    int32_t pid, fd;
    uint64_t ino;
    uint64_t bytes;
    int32_t device_id;
    uint32_t pad;
};

/* The fd named by an exported handle (a fd of this process). */
static int handle_fd(const disco_ipc_handle_t *h)
{
    struct raw_handle r;
    memcpy(&r, h->bytes, sizeof r);
    ck_assert_int_eq(r.pid, (int32_t)getpid());
    return r.fd;
}

/* Every sim memfd is sealed from its creation on: the exporter itself (or
 * any process that takes the fd) cannot shrink or grow an allocation's or
 * an event's memfd under an importer's mapping (EPERM), so no importer can
 * be made to fault with SIGBUS. */
START_TEST(test_sealed_memfds)
{
    char *p;
    disco_ipc_handle_t mh, eh;
    disco_event_t *ev;
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&p));
    CK_OK(disco__sim_get_handle(NULL, p, &mh));
    CK_OK(disco_device_event_create(sim0, &ev));
    CK_OK(disco_device_event_export(ev, &eh));
    int fds[2] = {handle_fd(&mh), handle_fd(&eh)};
    for (int i = 0; i < 2; i++) {
        errno = 0;
        ck_assert_msg(ftruncate(fds[i], 0) != 0 && errno == EPERM,
                      "ftruncate(%s memfd, 0): %s, want EPERM", i ? "event" : "memory",
                      strerror(errno));
        errno = 0;
        ck_assert_msg(ftruncate(fds[i], 1 << 20) != 0 && errno == EPERM,
                      "ftruncate(%s memfd, 1 MiB): %s, want EPERM", i ? "event" : "memory",
                      strerror(errno));
    }
    disco_device_event_free(ev);
    CK_OK(disco_device_free(sim0, p));
}
END_TEST

/* An importer refuses a memfd without the seals before mapping it, for
 * memory and for events, naming what is wrong: a hand-made handle names an
 * unsealed memfd of another process (else a later shrink by that process
 * would fault the importer's reads with SIGBUS). */
START_TEST(test_import_refuses_unsealed)
{
    int fd = memfd_create("not-sealed", MFD_CLOEXEC);
    ck_assert(fd >= 0 && ftruncate(fd, 4096) == 0);
    struct stat sb;
    ck_assert(fstat(fd, &sb) == 0);
    /* An event's magic in place, so only the seals can refuse it. */
    ck_assert(pwrite(fd, "DISCOSEV", 8, 0) == 8);
    struct raw_handle m = {.magic = "DISCOSIM",
                           .pid = (int32_t)getpid(),
                           .fd = fd,
                           .ino = (uint64_t)sb.st_ino,
                           .bytes = 4096,
                           .device_id = 0};
    struct raw_handle e = {
        .magic = "DISCOSEV", .pid = (int32_t)getpid(), .fd = fd, .ino = (uint64_t)sb.st_ino};
    disco_ipc_handle_t mh = {0}, eh = {0};
    memcpy(mh.bytes, &m, sizeof m);
    memcpy(eh.bytes, &e, 24); /* magic, pid, fd, ino, then device 0 */
    pid_t pid = tu_fork();
    if (pid == 0) {
        void *q = NULL;
        disco_event_t *ev = NULL;
        CH_STATUS(disco__sim_open_handle(NULL, &mh, &q), DISCO_E_INVAL);
        CH_TRUE(strstr(disco_last_error(), "not sealed") != NULL);
        CH_STATUS(disco_device_event_import(sim0, &eh, &ev), DISCO_E_SYS);
        CH_TRUE(strstr(disco_last_error(), "not sealed") != NULL);
        _exit(0);
    }
    tu_wait_ok(pid, "importer of an unsealed memfd");
    close(fd);
}
END_TEST

/* An IPC event orders a read after another process's copy, and the record
 * completes without its recorder syncing, as on a GPU: the importer's
 * stream waits for the exporter's record; before anyone waits nothing has
 * run (query: not yet; the reader's buffer untouched); the reader's sync
 * returns while the exporter never syncs (its watcher ran the stream up
 * to the record), and sees the bytes copied before the record, not those
 * queued after it. */
START_TEST(test_event_orders_across_processes)
{
    enum { N = 1 << 20 };
    static unsigned char h[N], later[N];
    for (size_t i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 13 + 3);
    memset(later, 0xee, sizeof later);
    char *b;
    disco_event_t *ev;
    disco_stream_t s;
    CK_OK(disco_device_alloc(sim0, N, (void **)&b));
    CK_OK(disco_device_ipc_export(b, &sh->ref));
    CK_OK(disco_device_event_create(sim0, &ev));
    CK_OK(disco_device_event_export(ev, &sh->ev));
    CK_OK(disco_device_stream_create(sim0, &s));
    int p2c[2];
    ck_assert(pipe(p2c) == 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        static unsigned char back[N];
        void *q;
        disco_event_t *iev;
        disco_stream_t s2;
        CH_OK(disco_device_ipc_import(&sh->ref, &q));
        CH_OK(disco_device_event_import(sim1, &sh->ev, &iev));
        CH_OK(disco_device_stream_create(sim1, &s2));
        CH_TRUE(get(p2c[0]) == 'r'); /* recorded, not synced */
        CH_STATUS(disco_device_event_query(iev), DISCO_E_AGAIN);
        CH_OK(disco_device_stream_wait_event(s2, iev));
        CH_OK(disco_device_copy(back, cpu, q, sim1, N, s2));
        CH_TRUE(back[0] == 0 && back[N - 1] == 0); /* queued only */
        CH_OK(disco_device_stream_sync(sim1, s2)); /* the exporter does not sync */
        CH_TRUE(has(back, N, 3));                  /* not the copy queued after */
        CH_OK(disco_device_event_query(iev));
        CH_OK(disco_device_event_sync(iev));
        CH_OK(disco_device_stream_free(sim1, s2));
        disco_device_event_free(iev);
        CH_OK(disco_device_ipc_release(&sh->ref));
        _exit(0);
    }
    CK_OK(disco_device_copy(b, sim0, h, cpu, N, s));
    CK_OK(disco_device_event_record(ev, s));
    CK_OK(disco_device_copy(b, sim0, later, cpu, N, s));
    CK_STATUS(disco_device_event_query(ev), DISCO_E_AGAIN);
    put(p2c[1], 'r');
    tu_wait_ok(pid, "reader"); /* no sync here before the reader is done */
    CK_OK(disco_device_event_query(ev));
    CK_OK(disco_device_stream_sync(sim0, s));
    CK_OK(disco_device_stream_free(sim0, s));
    disco_device_event_free(ev);
    CK_OK(disco_device_free(sim0, b));
}
END_TEST

/* In one process a wait on another stream's record runs that stream up to
 * the record (and not the work queued after it); an event never recorded is
 * complete; events exist on sim and cuda only, on existing devices. */
START_TEST(test_event_in_process)
{
    enum { N = 4096 };
    unsigned char h[N], back[N], after[8] = {0};
    for (size_t i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 13 + 5);
    char *a;
    disco_event_t *ev;
    disco_stream_t s1, s2;
    CK_OK(disco_device_alloc(sim0, N, (void **)&a));
    CK_OK(disco_device_event_create(sim0, &ev));
    CK_OK(disco_device_event_query(ev)); /* never recorded */
    CK_OK(disco_device_event_sync(ev));
    CK_OK(disco_device_stream_create(sim0, &s1));
    CK_OK(disco_device_stream_create(sim0, &s2));
    CK_OK(disco_device_copy(a, sim0, h, cpu, N, s1));
    CK_OK(disco_device_event_record(ev, s1));
    CK_OK(disco_device_copy(after, cpu, a, sim0, 8, s1)); /* after the record */
    CK_OK(disco_device_stream_wait_event(s2, ev));
    CK_OK(disco_device_copy(back, cpu, a, sim0, N, s2));
    CK_STATUS(disco_device_event_query(ev), DISCO_E_AGAIN);
    CK_OK(disco_device_stream_sync(sim0, s2));
    ck_assert(has(back, N, 5));
    CK_OK(disco_device_event_query(ev));
    ck_assert_int_eq(after[0], 0); /* s1 ran up to the record only */
    CK_OK(disco_device_stream_sync(sim0, s1));
    ck_assert_int_eq(after[1], h[1]);
    /* event_sync also runs the recording stream. */
    CK_OK(disco_device_copy(a, sim0, "x", cpu, 1, s1));
    CK_OK(disco_device_event_record(ev, s1));
    CK_OK(disco_device_event_sync(ev));
    CK_OK(disco_device_stream_free(sim0, s1));
    CK_OK(disco_device_stream_free(sim0, s2));
    disco_device_event_free(ev);
    CK_OK(disco_device_free(sim0, a));
    CK_STATUS(disco_device_event_create(cpu, &ev), DISCO_E_NO_DEVICE);
    CK_STATUS(disco_device_event_create((DLDevice){kDLExtDev, 7}, &ev), DISCO_E_NO_DEVICE);
    CK_HAS("sim:7");
    disco_ipc_handle_t junk = {{0}};
    CK_STATUS(disco_device_event_import(sim0, &junk, &ev), DISCO_E_SYS);
}
END_TEST

/* Forks *pid_out, which records an event on sim0 and never runs it (it
 * waits for a signal); returns that event imported on sim1. */
static disco_event_t *import_unrun_record(pid_t *pid_out)
{
    int c2p[2];
    ck_assert(pipe(c2p) == 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_event_t *ev;
        CH_OK(disco_device_event_create(sim0, &ev));
        CH_OK(disco_device_event_export(ev, &sh->ev));
        CH_OK(disco_device_event_record(ev, NULL)); /* queued, never synced */
        put(c2p[1], 'r');
        pause();
        _exit(1);
    }
    expect(c2p[0], 'r', &pid, 1, "recorder failed");
    disco_event_t *ev;
    CK_OK(disco_device_event_import(sim1, &sh->ev, &ev));
    *pid_out = pid;
    return ev;
}

/* A process waiting for a record whose recorder died before running it gets
 * DISCO_E_SYS naming the pid, instead of waiting forever. */
START_TEST(test_event_recorder_died)
{
    pid_t pid;
    disco_event_t *ev = import_unrun_record(&pid);
    CK_STATUS(disco_device_event_query(ev), DISCO_E_AGAIN);
    tu_kill_all(&pid, 1);
    CK_STATUS(disco_device_event_sync(ev), DISCO_E_SYS);
    CK_HAS("died");
    disco_device_event_free(ev);
}
END_TEST

/* A wait for a record whose recorder is already dead ends at once, not
 * after a 100 ms sleep: ten syncs of such an event take well under the
 * 1 s that ten sleeps would (a session's recovery met one such record per
 * dead peer: 0.7 s for 8 workers in the soak before this). */
START_TEST(test_event_recorder_dead_at_once)
{
    pid_t pid;
    disco_event_t *ev = import_unrun_record(&pid);
    tu_kill_all(&pid, 1);
    int64_t t0 = disco_now_ns();
    for (int i = 0; i < 10; i++) {
        CK_STATUS(disco_device_event_sync(ev), DISCO_E_SYS);
        CK_HAS("died");
    }
    ck_assert_msg(tu_ms_since(t0) < 500, "10 syncs took %.0f ms", tu_ms_since(t0));
    disco_device_event_free(ev);
}
END_TEST

/* The pattern sessions use, with four processes on two sim devices (more
 * processes than cores): each exports one arena and one event, imports every
 * peer's once, writes its chunk, records, and after a barrier makes its
 * stream wait for each peer's record and copy that peer's chunk; one sync
 * each. Every process ends with every chunk. */
START_TEST(test_allgather_pattern)
{
    enum { P = 4, CH = 64 * 1024 };
    struct all {
        pthread_barrier_t bar;
        disco_ipc_ref_t ref[P];
        disco_ipc_handle_t ev[P];
    } *all = mmap(NULL, sizeof *all, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(all != MAP_FAILED);
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    ck_assert_int_eq(pthread_barrier_init(&all->bar, &ba, P), 0);
    pid_t pids[P];
    for (int i = 0; i < P; i++) {
        pids[i] = tu_fork();
        if (pids[i] != 0)
            continue;
        static unsigned char h[P * CH], mine[CH];
        DLDevice d = {kDLExtDev, i % 2};
        char *arena, *peer[P] = {0};
        disco_event_t *ev[P] = {0};
        disco_stream_t s;
        CH_OK(disco_device_alloc(d, P * CH, (void **)&arena));
        CH_OK(disco_device_ipc_export(arena, &all->ref[i]));
        CH_OK(disco_device_event_create(d, &ev[i]));
        CH_OK(disco_device_event_export(ev[i], &all->ev[i]));
        CH_OK(disco_device_stream_create(d, &s));
        pthread_barrier_wait(&all->bar); /* every arena and event exported */
        for (int j = 0; j < P; j++) {
            if (j == i)
                continue;
            CH_OK(disco_device_ipc_import(&all->ref[j], (void **)&peer[j]));
            CH_OK(disco_device_event_import(d, &all->ev[j], &ev[j]));
        }
        memset(mine, 0xc0 + i, CH); /* read at the sync: must stay as is until then */
        CH_OK(disco_device_copy(arena + (size_t)i * CH, d, mine, cpu, CH, s));
        CH_OK(disco_device_event_record(ev[i], s));
        pthread_barrier_wait(&all->bar); /* every record issued */
        for (int j = 0; j < P; j++) {
            if (j == i)
                continue;
            CH_OK(disco_device_stream_wait_event(s, ev[j]));
            CH_OK(disco_device_copy(arena + (size_t)j * CH, d, peer[j] + (size_t)j * CH, d, CH, s));
        }
        CH_OK(disco_device_copy(h, cpu, arena, d, sizeof h, s));
        CH_OK(disco_device_stream_sync(d, s));
        for (int j = 0; j < P; j++)
            CH_TRUE(h[(size_t)j * CH] == 0xc0 + j && h[(size_t)j * CH + CH - 1] == 0xc0 + j);
        for (int j = 0; j < P; j++) {
            if (j != i) {
                CH_OK(disco_device_ipc_release(&all->ref[j]));
                disco_device_event_free(ev[j]);
            }
        }
        pthread_barrier_wait(&all->bar); /* nobody holds another's arena */
        CH_OK(disco_device_stream_free(d, s));
        disco_device_event_free(ev[i]);
        CH_OK(disco_device_free(d, arena));
        _exit(0);
    }
    for (int i = 0; i < P; i++)
        tu_wait_ok(pids[i], "member");
    munmap(all, sizeof *all);
}
END_TEST

Suite *suite_sim_ipc(void)
{
    Suite *s = suite_create("sim_ipc");
    TCase *tc = tcase_create("memory");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_sibling_import);
    tcase_add_test(tc, test_own_import);
    tcase_add_test(tc, test_detach);
    tcase_add_test(tc, test_importer_death);
    tcase_add_test(tc, test_proc_fallback);
    tcase_add_test(tc, test_sealed_memfds);
    tcase_add_test(tc, test_import_refuses_unsealed);
    suite_add_tcase(s, tc);

    tc = tcase_create("events");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_event_orders_across_processes);
    tcase_add_test(tc, test_event_in_process);
    tcase_add_test(tc, test_event_recorder_died);
    tcase_add_test(tc, test_event_recorder_dead_at_once);
    tcase_add_test(tc, test_allgather_pattern);
    suite_add_tcase(s, tc);
    return s;
}
