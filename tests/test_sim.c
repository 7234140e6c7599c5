/* test_sim.c - the simulated GPU (kDLExtDev, "sim") in one process: the
 * device count and its errors, alloc / free / copy round trips (host <-> sim,
 * sim <-> sim, pointer arithmetic), a host dereference of sim memory
 * faulting, streams that run only at their sync (a missing sync is seen),
 * out of memory, bad pointers, and a forked child starting empty. IPC
 * across processes is in test_sim_ipc.c. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/device.h"
#include "tests/testutil.h"

static const DLDevice cpu = {kDLCPU, 0};
static const DLDevice sim0 = {kDLExtDev, 0}, sim1 = {kDLExtDev, 1};

static void setup(void)
{
    CK_OK(disco_device_sim_set_count(2));
}

/* The table is named "sim" and has the configured count; workers map onto
 * devices modulo the count. */
START_TEST(test_count_and_table)
{
    const disco_device_api_t *api;
    CK_OK(disco_device_api_get(kDLExtDev, &api));
    ck_assert_str_eq(api->name, "sim");
    ck_assert_int_eq(api->type, kDLExtDev);
    int n = 0;
    CK_OK(disco_device_count(kDLExtDev, &n));
    ck_assert_int_eq(n, 2);
    DLDevice d;
    CK_OK(disco_device_of_worker(kDLExtDev, 3, &d));
    ck_assert(d.device_type == kDLExtDev && d.device_id == 1);
    CK_OK(disco_device_set(sim1));
}
END_TEST

/* DISCO_SIM_GPUS is read at first use; unset or 0 means no sim device, with
 * the documented message. */
START_TEST(test_env_count)
{
    pid_t pid = tu_fork();
    if (pid == 0) { /* a fresh process: the count is not read yet */
        int n = 0;
        CH_OK(setenv("DISCO_SIM_GPUS", "3", 1));
        CH_OK(disco_device_count(kDLExtDev, &n));
        CH_TRUE(n == 3);
        _exit(0);
    }
    tu_wait_ok(pid, "DISCO_SIM_GPUS=3");
    pid = tu_fork();
    if (pid == 0) {
        int n = 0;
        void *p;
        unsetenv("DISCO_SIM_GPUS");
        CH_STATUS(disco_device_count(kDLExtDev, &n), DISCO_E_NO_DEVICE);
        CH_TRUE(strstr(disco_last_error(), "no sim device: set DISCO_SIM_GPUS") != NULL);
        CH_STATUS(disco_device_alloc(sim0, 64, &p), DISCO_E_NO_DEVICE);
        _exit(0);
    }
    tu_wait_ok(pid, "DISCO_SIM_GPUS unset");
    CK_OK(disco_device_sim_set_count(0));
    int n = 0;
    CK_STATUS(disco_device_count(kDLExtDev, &n), DISCO_E_NO_DEVICE);
    CK_HAS("no sim device");
    CK_STATUS(disco_device_sim_set_count(-1), DISCO_E_INVAL);
}
END_TEST

/* A device id out of range is DISCO_E_NO_DEVICE, naming the device. */
START_TEST(test_bad_device)
{
    void *p;
    CK_STATUS(disco_device_alloc((DLDevice){kDLExtDev, 2}, 64, &p), DISCO_E_NO_DEVICE);
    CK_HAS("sim:2");
    CK_STATUS(disco_device_alloc((DLDevice){kDLExtDev, -1}, 64, &p), DISCO_E_NO_DEVICE);
    CK_HAS("sim:-1");
    disco_stream_t s;
    CK_STATUS(disco_device_stream_create((DLDevice){kDLExtDev, 5}, &s), DISCO_E_NO_DEVICE);
    CK_STATUS(disco_device_set((DLDevice){kDLExtDev, 2}), DISCO_E_NO_DEVICE);
}
END_TEST

/* Bytes survive host -> sim:0 -> sim:1 -> host, through offsets inside
 * allocations (ptr + k is byte k), on the default streams. */
START_TEST(test_round_trip)
{
    enum { N = 1 << 20 };
    unsigned char *h = malloc(N), *back = calloc(1, N);
    for (size_t i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 7 + 1);
    char *a, *b;
    CK_OK(disco_device_alloc(sim0, N, (void **)&a));
    CK_OK(disco_device_alloc(sim1, N + 100, (void **)&b));
    ck_assert((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0);
    CK_OK(disco_device_copy(a, sim0, h, cpu, N, NULL));
    CK_OK(disco_device_stream_sync(sim0, NULL));
    CK_OK(disco_device_copy(b + 100, sim1, a, sim0, N, NULL)); /* on sim1's default stream */
    CK_OK(disco_device_stream_sync(sim1, NULL));
    CK_OK(disco_device_copy(back, cpu, b + 100, sim1, N, NULL)); /* on sim1's default stream */
    CK_OK(disco_device_stream_sync(sim1, NULL));
    ck_assert(memcmp(h, back, N) == 0);
    /* Inside one allocation, at an offset. */
    CK_OK(disco_device_copy(a + 10, sim0, a + 5000, sim0, 3000, NULL));
    CK_OK(disco_device_copy(back, cpu, a + 10, sim0, 3000, NULL));
    CK_OK(disco_device_stream_sync(sim0, NULL));
    ck_assert(memcmp(back, h + 5000, 3000) == 0);
    CK_OK(disco_device_free(sim0, a));
    CK_OK(disco_device_free(sim1, b));
    free(h);
    free(back);
}
END_TEST

/* Host code cannot touch sim memory: reading or writing a sim pointer
 * faults (SIGSEGV), as a GPU pointer would. */
START_TEST(test_host_deref_faults)
{
    char *a;
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&a));
    for (int write_it = 0; write_it < 2; write_it++) {
        pid_t pid = fork(); /* plain fork: the child must die of the signal */
        ck_assert(pid >= 0);
        if (pid == 0) {
            signal(SIGSEGV, SIG_DFL);
            if (write_it)
                *(volatile char *)(a + 100) = 1;
            else
                (void)*(volatile char *)(a + 100);
            _exit(0);
        }
        int ws = 0;
        ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
        ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSEGV, "child: status %d", ws);
    }
    CK_OK(disco_device_free(sim0, a));
}
END_TEST

/* Streams are asynchronous: a queued copy has not happened before its
 * stream's sync, so a read on another stream that skips the sync sees the
 * old bytes (a missing sync is caught); after the sync it sees the new. */
START_TEST(test_stream_not_before_sync)
{
    enum { N = 4096 };
    unsigned char h[N], back[N];
    memset(h, 0xab, N);
    char *a;
    CK_OK(disco_device_alloc(sim0, N, (void **)&a));
    disco_stream_t s1, s2;
    CK_OK(disco_device_stream_create(sim0, &s1));
    CK_OK(disco_device_stream_create(sim0, &s2));
    /* Fresh memory is zero. */
    CK_OK(disco_device_copy(back, cpu, a, sim0, N, s2));
    CK_OK(disco_device_stream_sync(sim0, s2));
    ck_assert_int_eq(back[0], 0);
    /* Queued, not run: the host buffer of a device -> host copy is untouched. */
    CK_OK(disco_device_copy(a, sim0, h, cpu, N, s1));
    memset(back, 0x11, N);
    CK_OK(disco_device_copy(back, cpu, a, sim0, N, s1));
    ck_assert_int_eq(back[0], 0x11);
    ck_assert_int_eq(back[N - 1], 0x11);
    /* The missing sync: another stream reads before s1 ran. */
    unsigned char other[N];
    CK_OK(disco_device_copy(other, cpu, a, sim0, N, s2));
    CK_OK(disco_device_stream_sync(sim0, s2));
    ck_assert_int_eq(other[0], 0);
    /* After the sync, in order: the write, then the read. */
    CK_OK(disco_device_stream_sync(sim0, s1));
    ck_assert_int_eq(back[0], 0xab);
    ck_assert_int_eq(back[N - 1], 0xab);
    CK_OK(disco_device_stream_free(sim0, s1));
    CK_OK(disco_device_stream_free(sim0, s2));
    CK_OK(disco_device_stream_free(sim0, NULL));
    CK_OK(disco_device_free(sim0, a));
}
END_TEST

/* Allocations past DISCO_SIM_MEM_MB give DISCO_E_NOMEM naming the device;
 * freeing makes room again. */
START_TEST(test_out_of_memory)
{
    CK_OK(setenv("DISCO_SIM_MEM_MB", "8", 1)); /* read at the first allocation */
    void *a, *b, *c;
    CK_OK(disco_device_alloc(sim0, 6 << 20, &a));
    CK_STATUS(disco_device_alloc(sim0, 4 << 20, &b), DISCO_E_NOMEM);
    CK_HAS("sim:0: out of memory");
    CK_STATUS(disco_device_alloc(sim1, (size_t)9 << 20, &b), DISCO_E_NOMEM);
    CK_OK(disco_device_alloc(sim1, 4 << 20, &c)); /* per device */
    CK_OK(disco_device_free(sim0, a));
    CK_OK(disco_device_alloc(sim0, 4 << 20, &b));
    CK_OK(disco_device_free(sim0, b));
    CK_OK(disco_device_free(sim1, c));
}
END_TEST

/* Bad pointers and pairs are refused before anything is queued: host
 * memory called sim, overruns, interior or foreign frees, a free on the
 * wrong device, sim with cuda, a foreign stream. */
START_TEST(test_bad_pointers)
{
    char host[64], *a;
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&a));
    CK_STATUS(disco_device_copy(a, sim0, host, sim0, 64, NULL), DISCO_E_INVAL);
    CK_HAS("not sim memory");
    CK_STATUS(disco_device_copy(host, cpu, a + 4090, sim0, 64, NULL), DISCO_E_INVAL);
    CK_HAS("overrun");
    CK_STATUS(disco_device_copy(a, sim0, host, (DLDevice){kDLCUDA, 0}, 64, NULL),
              DISCO_E_NO_DEVICE);
    CK_STATUS(disco_device_copy(a, sim0, host, cpu, 64, (disco_stream_t)host), DISCO_E_INVAL);
    CK_HAS("not a sim stream");
    CK_STATUS(disco_device_free(sim0, a + 64), DISCO_E_INVAL);
    CK_STATUS(disco_device_free(sim0, host), DISCO_E_INVAL);
    CK_STATUS(disco_device_free(sim1, a), DISCO_E_INVAL);
    CK_HAS("allocated on sim:0");
    CK_OK(disco_device_free(sim0, a));
    CK_STATUS(disco_device_free(sim0, a), DISCO_E_INVAL); /* twice */
    CK_OK(disco_device_free(sim0, NULL));
}
END_TEST

/* A forked child has none of its parent's sim memory (as a CUDA child has no
 * context): the parent's memfd is closed in it, the parent's pointer is not
 * sim memory there, and the child allocates its own. */
START_TEST(test_child_starts_empty)
{
    char *a;
    int fds0 = tu_open_fds();
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&a));
    ck_assert_int_eq(tu_open_fds(), fds0 + 1);
    pid_t pid = tu_fork();
    if (pid == 0) {
        char buf[16], *b;
        CH_TRUE(tu_open_fds() == fds0); /* the inherited memfd is closed at fork */
        CH_STATUS(disco_device_copy(buf, cpu, a, sim0, 16, NULL), DISCO_E_INVAL);
        CH_OK(disco_device_alloc(sim0, 4096, (void **)&b));
        CH_OK(disco_device_copy(b, sim0, "child", cpu, 6, NULL));
        CH_OK(disco_device_copy(buf, cpu, b, sim0, 6, NULL));
        CH_OK(disco_device_stream_sync(sim0, NULL));
        CH_TRUE(strcmp(buf, "child") == 0);
        CH_OK(disco_device_free(sim0, b));
        _exit(0);
    }
    tu_wait_ok(pid, "child");
    CK_OK(disco_device_free(sim0, a));
}
END_TEST

/* A free runs queued work first (cudaFree synchronizes): a copy queued out
 * of an allocation is complete once it is freed. */
START_TEST(test_free_flushes)
{
    char *a, out[8] = "";
    CK_OK(disco_device_alloc(sim0, 4096, (void **)&a));
    CK_OK(disco_device_copy(a, sim0, "flush", cpu, 6, NULL));
    CK_OK(disco_device_copy(out, cpu, a, sim0, 6, NULL));
    ck_assert_int_eq(out[0], 0);
    CK_OK(disco_device_free(sim0, a));
    ck_assert_str_eq(out, "flush");
}
END_TEST

/* Nothing leaks: allocations, streams and events give back every fd and
 * mapping they took (fd count before == after). */
START_TEST(test_no_fd_leak)
{
    int fds0 = tu_open_fds();
    void *p[4];
    disco_stream_t s;
    disco_event_t *ev;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 4; i++)
            CK_OK(disco_device_alloc(i % 2 ? sim1 : sim0, 10000, &p[i]));
        CK_OK(disco_device_stream_create(sim0, &s));
        CK_OK(disco_device_event_create(sim0, &ev));
        CK_OK(disco_device_copy(p[2], sim0, p[0], sim0, 10000, s));
        CK_OK(disco_device_event_record(ev, s));
        CK_OK(disco_device_event_sync(ev));
        disco_device_event_free(ev);
        CK_OK(disco_device_stream_free(sim0, s));
        for (int i = 0; i < 4; i++)
            CK_OK(disco_device_free(i % 2 ? sim1 : sim0, p[i]));
    }
    ck_assert_int_eq(tu_open_fds(), fds0);
}
END_TEST

struct worker_arg {
    int id;
    int ok;
};

/* One thread's round trips on its own stream and allocations. */
static void *thread_main(void *argp)
{
    struct worker_arg *arg = argp;
    DLDevice d = arg->id % 2 ? sim1 : sim0;
    unsigned char h[2048], back[2048];
    disco_stream_t s;
    arg->ok = disco_device_stream_create(d, &s) == DISCO_OK;
    for (int round = 0; round < 200 && arg->ok; round++) {
        void *p;
        memset(h, (unsigned char)(arg->id * 31 + round), sizeof h);
        memset(back, 0, sizeof back);
        arg->ok = disco_device_alloc(d, sizeof h, &p) == DISCO_OK &&
                  disco_device_copy(p, d, h, cpu, sizeof h, s) == DISCO_OK &&
                  disco_device_copy(back, cpu, p, d, sizeof h, s) == DISCO_OK &&
                  disco_device_stream_sync(d, s) == DISCO_OK && memcmp(h, back, sizeof h) == 0 &&
                  disco_device_free(d, p) == DISCO_OK;
    }
    if (disco_device_stream_free(d, s) != DISCO_OK)
        arg->ok = 0;
    return NULL;
}

/* Threads of one process allocate, copy, sync and free at once, each on its
 * own stream; every round trip is right. */
START_TEST(test_threads)
{
    enum { T = 4 };
    pthread_t th[T];
    struct worker_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (struct worker_arg){.id = i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(args[i].ok, "thread %d failed: %s", i, disco_last_error());
    }
}
END_TEST

Suite *suite_sim(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("device");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_count_and_table);
    tcase_add_test(tc, test_bad_device);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_host_deref_faults);
    tcase_add_test(tc, test_stream_not_before_sync);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_test(tc, test_bad_pointers);
    tcase_add_test(tc, test_child_starts_empty);
    tcase_add_test(tc, test_free_flushes);
    tcase_add_test(tc, test_no_fd_leak);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("env"); /* no fixture: the count must be unread */
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_env_count);
    suite_add_tcase(s, tc);
    return s;
}
