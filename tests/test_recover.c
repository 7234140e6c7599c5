/* test_recover.c - disco_session_recover (suite recover): a session broken by
 * a killed or hung worker is brought back without closing it; every worker
 * replaced, every old register lost (and said so), the libraries loaded
 * again, the heap keeping only what the controller still holds, and
 * nothing left behind at close. 8 workers on this machine's cores where a
 * test is about scale; fork and spawn, rings and pipes, the sim GPU. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disco/device.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "disco/trace.h"
#include "tests/liveness_util.h"

#define LOST "lost in a recovery"

/* Kills worker w (SIGKILL) and sees the session report it. */
static void kill_and_see(disco_session_t *s, int w)
{
    int pid = disco_session_worker_pid(s, w);
    ck_assert_int_gt(pid, 0);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    CK_STATUS(disco_session_sync(s, w), DISCO_E_WORKER_DIED);
    CK_HAS("signal 9");
    ck_assert_int_eq(disco_session_health(s), DISCO_E_WORKER_DIED);
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
}

/* test.add(worker id, 10) on every worker: each answers its id + 10 (the
 * library's function works on every worker). */
static void check_add(disco_session_t *s)
{
    int n = disco_session_num_workers(s);
    disco_dref_t id, r;
    CK_OK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &id));
    disco_value_t a[2] = {dref(id), disco_value_int(10)};
    CK_OK(disco_session_call_by_name(s, "test.add", a, 2, &r));
    for (int w = 0; w < n; w++) {
        CK_OK(disco_session_sync(s, w));
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_int_eq(v.type, DISCO_T_INT);
        ck_assert_int_eq(v.v.i, w + 10);
    }
    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_free_reg(s, id));
}

/* Broadcast of [1..64] from worker 0, allreduce (sum) on every worker,
 * copied back: n * (i + 1) exactly. */
static void check_allreduce(disco_session_t *s)
{
    int n = disco_session_num_workers(s);
    disco_dref_t x, b, y;
    CK_OK(copy_floats(s, 64, 1.0f, &x));
    disco_value_t ab[2] = {dref(x), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.broadcast_from_worker0", ab, 2, &b));
    disco_value_t ar[3] = {dref(b), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", ar, 3, &y));
    float out[64] = {0};
    int64_t len = 64;
    DLTensor h = {.data = out, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = &len};
    CK_OK(disco_session_copy_from_worker0(s, y, &h));
    for (int i = 0; i < 64; i++)
        ck_assert_msg(out[i] == (float)(n * (i + 1)), "allreduce[%d] = %g, want %d", i,
                      (double)out[i], n * (i + 1));
    for (int w = 1; w < n; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_free_reg(s, b));
    CK_OK(disco_session_free_reg(s, x));
}

/* The heap's live blocks now. */
static size_t live_blocks(disco_session_t *s)
{
    disco_heap_stats_t hs;
    CK_OK(disco_session_heap_stats(s, &hs));
    return hs.live_blocks;
}

/* 8 workers, one killed with SIGKILL: the session reports the death, then
 * recover brings it back: every worker 1..7 is a new process (the
 * survivors too), the library's functions answer on every worker and an
 * allreduce over all 8 gives the exact sums. */
START_TEST(test_kill_recover_run)
{
    disco_session_t *s = tu_open_as(8, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    int old[8];
    for (int w = 0; w < 8; w++)
        old[w] = disco_session_worker_pid(s, w);
    check_allreduce(s);
    kill_and_see(s, 3);
    CK_OK(disco_session_recover(s));
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    ck_assert_int_eq(disco_session_worker_pid(s, 0), old[0]);
    for (int w = 1; w < 8; w++) {
        int pid = disco_session_worker_pid(s, w);
        ck_assert_msg(pid > 0 && pid != old[w], "worker %d: pid %d, was %d", w, pid, old[w]);
        ck_assert_int_eq(kill(old[w], 0), -1); /* the old one is gone (reaped) */
    }
    check_add(s);
    check_allreduce(s);
    disco_session_close(s);
}
END_TEST

/* Every register made before the recovery is lost: a call with it as the
 * function or an argument, debug get and set, a copy and a view all fail
 * with DISCO_E_BAD_REG saying "lost in a recovery"; freeing it succeeds
 * quietly (once: a second free is an ordinary bad register), and no new
 * register reuses a lost id that was not freed. */
START_TEST(test_old_drefs_lost)
{
    disco_session_t *s = tu_open_as(3, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    disco_dref_t f, r, x;
    CK_OK(disco_session_get_func(s, "test.add", &f));
    disco_value_t a[2] = {disco_value_int(1), disco_value_int(2)};
    CK_OK(disco_session_call(s, f, a, 2, &r));
    CK_OK(copy_floats(s, 16, 0.0f, &x));
    kill_and_see(s, 1);
    CK_OK(disco_session_recover(s));
    disco_value_t v;
    CK_STATUS(disco_session_debug_get(s, r, 1, &v), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    char want[64];
    snprintf(want, sizeof want, "register %llu was", (unsigned long long)r);
    CK_HAS(want);
    disco_dref_t out;
    CK_STATUS(disco_session_call(s, f, a, 2, &out), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    disco_value_t ar = dref(r);
    CK_STATUS(disco_session_call_by_name(s, "test.echo", &ar, 1, &out), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    disco_value_t one = disco_value_int(1);
    CK_STATUS(disco_session_debug_set(s, r, 0, &one), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    float buf[16];
    int64_t len = 16;
    DLTensor h = {.data = buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = &len};
    CK_STATUS(disco_session_copy_from_worker0(s, x, &h), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    DLManagedTensor *view;
    CK_STATUS(disco_session_tensor_view(s, x, 0, &view), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    /* The session is healthy all along: those were the caller's errors. */
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    /* New registers never take a lost id that is still held. */
    disco_dref_t fresh[8];
    for (int i = 0; i < 8; i++) {
        CK_OK(disco_session_alloc_reg(s, &fresh[i]));
        ck_assert(fresh[i] != f && fresh[i] != r && fresh[i] != x);
    }
    CK_OK(disco_session_free_reg(s, r)); /* quietly */
    CK_STATUS(disco_session_free_reg(s, r), DISCO_E_BAD_REG);
    CK_HAS("not a live register");
    CK_OK(disco_session_free_reg(s, f));
    CK_OK(disco_session_free_reg(s, x));
    for (int i = 0; i < 8; i++)
        CK_OK(disco_session_free_reg(s, fresh[i]));
    check_add(s);
    disco_session_close(s);
}
END_TEST

/* Spawned workers over pipes: the new workers are spawned again (fresh
 * programs that have only what they load) with new pipes, and the test
 * library's functions work on them: recover loaded it again. */
START_TEST(test_spawn_pipes)
{
    disco_session_t *s = tu_open_as(4, DISCO_LAUNCH_SPAWN, DISCO_TRANSPORT_PIPE, 20000);
    check_add(s);
    kill_and_see(s, 2);
    CK_OK(disco_session_recover(s));
    check_add(s);
    check_allreduce(s);
    disco_session_close(s);
}
END_TEST

/* A worker hung in a function is killed at the sync's deadline
 * (DISCO_E_TIMEOUT); recover brings the session back. */
START_TEST(test_after_timeout)
{
    disco_session_t *s = tu_open_as(3, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 300);
    disco_value_t w2 = disco_value_int(2);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.hang", &w2, 1, &r));
    CK_STATUS(disco_session_sync(s, 2), DISCO_E_TIMEOUT);
    CK_HAS("killed");
    CK_OK(disco_session_recover(s));
    check_add(s);
    check_allreduce(s);
    disco_session_close(s);
}
END_TEST

/* A survivor stuck in a function (test.hang on worker 2) when worker 1 is
 * killed: recover kills it too rather than wait for it, and the session
 * works with every worker new. */
START_TEST(test_stuck_survivor)
{
    disco_session_t *s = tu_open_as(3, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    disco_value_t w2 = disco_value_int(2);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.hang", &w2, 1, &r));
    CK_OK(disco_session_sync(s, 1)); /* worker 2 is hung, worker 1 is not */
    int stuck = disco_session_worker_pid(s, 2);
    kill_and_see(s, 1);
    int64_t t0 = disco_now_ns();
    CK_OK(disco_session_recover(s));
    ck_assert_msg(tu_ms_since(t0) < 5000, "recover took %.0f ms", tu_ms_since(t0));
    ck_assert_int_eq(kill(stuck, 0), -1);
    check_add(s);
    disco_session_close(s);
}
END_TEST

/* Kill, recover, kill another, recover again (and a third recovery of a
 * healthy session): each time the session works and the heap holds
 * nothing (no tensor is held by the controller). */
START_TEST(test_twice_in_a_row)
{
    disco_session_t *s = tu_open_as(4, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    for (int round = 0; round < 3; round++) {
        disco_dref_t x;
        CK_OK(copy_floats(s, 1024, 0.0f, &x)); /* left in a register: lost below */
        if (round < 2)
            kill_and_see(s, 1 + round);
        CK_OK(disco_session_recover(s));
        ck_assert_uint_eq(live_blocks(s), 0);
        check_add(s);
        check_allreduce(s);
    }
    disco_session_close(s);
}
END_TEST

/* The heap after a recovery holds no block of the old run: tensors on
 * every worker (empties, a broadcast shared by reference, an allgather)
 * and blocks a killed worker held, all freed; after more work and frees
 * the heap is back to empty, its free space whole. */
START_TEST(test_heap_no_leak)
{
    disco_session_t *s = tu_open_as(4, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    disco_heap_stats_t h0, h1;
    CK_OK(disco_session_heap_stats(s, &h0));
    ck_assert_uint_eq(h0.live_blocks, 0);
    disco_dref_t x, b, g, e;
    CK_OK(copy_floats(s, 4096, 1.0f, &x));
    disco_value_t ab[2] = {dref(x), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.broadcast_from_worker0", ab, 2, &b));
    disco_value_t ag[2] = {dref(b), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allgather", ag, 2, &g));
    int64_t shape = 1000;
    CK_OK(disco_session_empty(s, &shape, 1, F32, false, &e));
    for (int w = 1; w < 4; w++)
        CK_OK(disco_session_sync(s, w));
    ck_assert_uint_gt(live_blocks(s), 4);
    kill_and_see(s, 2);
    CK_OK(disco_session_recover(s));
    CK_OK(disco_session_heap_stats(s, &h1));
    ck_assert_msg(h1.live_blocks == 0 && h1.used_bytes == h0.used_bytes &&
                      h1.largest_free == h0.largest_free,
                  "after recovery: %zu live blocks, %zu bytes used (%zu before), largest free "
                  "%zu (%zu)",
                  h1.live_blocks, h1.used_bytes, h0.used_bytes, h1.largest_free, h0.largest_free);
    check_allreduce(s);
    for (int w = 1; w < 4; w++) /* the frees have run everywhere */
        CK_OK(disco_session_sync(s, w));
    ck_assert_uint_eq(live_blocks(s), 0);
    disco_session_close(s);
}
END_TEST

/* A view of a dead worker's tensor (its block marked with that worker as
 * owner) keeps its bytes through the recovery: the heap keeps the block the
 * controller still holds, new tensors never land on it, and releasing the
 * view frees it. (Reclaiming the dead workers' blocks by owner would have
 * freed it under the view.) */
START_TEST(test_view_survives)
{
    disco_session_t *s = tu_open_as(3, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    int64_t shape = 4096;
    disco_value_t fa[3] = {disco_value_shape(&shape, 1), disco_value_dtype(F32),
                           disco_value_int(5)};
    disco_dref_t t;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &t));
    DLManagedTensor *view;
    CK_OK(disco_session_tensor_view(s, t, 1, &view));
    ck_assert(!disco_tensor_view_is_copy(view));
    static float before[4096];
    memcpy(before, view->dl_tensor.data, sizeof before);
    kill_and_see(s, 1);
    CK_OK(disco_session_recover(s));
    ck_assert_uint_eq(live_blocks(s), 1); /* the view's */
    disco_dref_t more[6];
    for (int i = 0; i < 6; i++) { /* fill the heap around it with other bytes */
        disco_value_t fb[3] = {disco_value_shape(&shape, 1), disco_value_dtype(F32),
                               disco_value_int(9 + i)};
        CK_OK(disco_session_call_by_name(s, "test.fill", fb, 3, &more[i]));
    }
    for (int w = 1; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    ck_assert_msg(memcmp(before, view->dl_tensor.data, sizeof before) == 0,
                  "the view's bytes changed after the recovery");
    for (int i = 0; i < 6; i++)
        CK_OK(disco_session_free_reg(s, more[i]));
    for (int w = 1; w < 3; w++)
        CK_OK(disco_session_sync(s, w));
    ck_assert_uint_eq(live_blocks(s), 1);
    view->deleter(view);
    ck_assert_uint_eq(live_blocks(s), 0);
    CK_OK(disco_session_free_reg(s, t));
    disco_session_close(s);
}
END_TEST

/* Two recoveries, then close: no process (old or new worker), fd or
 * /dev/shm entry is left, as after any close. */
START_TEST(test_nothing_left)
{
    int fds = tu_open_fds(), shm = tu_dev_shm_disco_entries();
    disco_session_t *s = tu_open_as(4, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_PIPE, 20000);
    int pids[3][4];
    for (int round = 0; round < 3; round++) {
        for (int w = 1; w < 4; w++)
            pids[round][w] = disco_session_worker_pid(s, w);
        if (round == 2)
            break;
        kill_and_see(s, 3 - round);
        CK_OK(disco_session_recover(s));
        ck_assert_int_eq(tu_open_fds(), fds + 2 * 3 + 3 + 1); /* pipes, pidfds, segment */
    }
    disco_session_close(s);
    ck_assert_int_eq(tu_open_fds(), fds);
    ck_assert_int_eq(tu_dev_shm_disco_entries(), shm);
    for (int round = 0; round < 3; round++)
        for (int w = 1; w < 4; w++)
            ck_assert_msg(kill(pids[round][w], 0) == -1 && errno == ESRCH,
                          "round %d worker %d (pid %d) lives on", round, w, pids[round][w]);
}
END_TEST

/* Recover on a healthy session resets it (every worker new, every register
 * lost); on a shut-down session it does nothing and says
 * DISCO_E_SHUTDOWN. */
START_TEST(test_healthy_and_shutdown)
{
    disco_session_t *s = tu_open_as(2, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    disco_dref_t r;
    CK_OK(disco_session_alloc_reg(s, &r));
    int pid = disco_session_worker_pid(s, 1);
    CK_OK(disco_session_recover(s));
    ck_assert_int_ne(disco_session_worker_pid(s, 1), pid);
    disco_value_t v;
    CK_STATUS(disco_session_debug_get(s, r, 0, &v), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    check_add(s);
    CK_OK(disco_session_shutdown(s));
    CK_STATUS(disco_session_recover(s), DISCO_E_SHUTDOWN);
    disco_session_close(s);
}
END_TEST

/* The trace goes on across a recovery: the snapshot after it has, on each
 * worker's track, the old worker's record of test.add and the new one's,
 * and it still exports as JSON. */
START_TEST(test_trace_goes_on)
{
    disco_session_t *s = tu_open_as(3, DISCO_LAUNCH_FORK, DISCO_TRANSPORT_RING, 20000);
    check_add(s);
    kill_and_see(s, 2);
    CK_OK(disco_session_recover(s));
    check_add(s);
    disco_trace_t *t;
    CK_OK(disco_session_trace(s, &t));
    int adds[3] = {0};
    for (size_t i = 0; i < t->nslices; i++)
        if (strcmp(t->slices[i].name, "test.add") == 0 && t->slices[i].worker < 3)
            adds[t->slices[i].worker]++;
    ck_assert_msg(adds[0] == 2 && adds[1] == 2 && adds[2] == 2, "test.add slices: %d %d %d",
                  adds[0], adds[1], adds[2]);
    FILE *f = fopen("/dev/null", "w");
    CK_OK(disco_trace_write_json(t, f));
    fclose(f);
    disco_trace_free(t);
    disco_session_close(s);
}
END_TEST

/* A recovery that cannot start the workers (the spawned worker program is
 * gone) fails, leaves the session broken with a cause that says the
 * recovery failed and may be tried again; with the program back, the next
 * recover succeeds. */
START_TEST(test_failed_then_retried)
{
    char dir[] = "/tmp/disco-recover-XXXXXX", prog[64], cmd[256], out[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(prog, sizeof prog, "%s/disco-worker", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", DISCO_TEST_WORKER, prog);
    ck_assert_int_eq(tu_run(cmd, out, sizeof out), 0);
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.launch = DISCO_LAUNCH_SPAWN;
    cfg.worker_path = prog;
    cfg.call_timeout_ms = 20000;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    kill_and_see(s, 1);
    ck_assert_int_eq(unlink(prog), 0);
    CK_STATUS(disco_session_recover(s), DISCO_E_INVAL);
    CK_HAS("recovery failed");
    CK_HAS("may be tried again");
    ck_assert_int_ne(disco_session_health(s), DISCO_OK);
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_BROKEN);
    CK_HAS("recovery failed");
    ck_assert_int_eq(tu_run(cmd, out, sizeof out), 0);
    CK_OK(disco_session_recover(s));
    check_add(s);
    disco_session_close(s);
    unlink(prog);
    rmdir(dir);
}
END_TEST

/* A library loaded with its path in a register (disco.echo's result) is
 * loaded again too: spawned workers, which have only what they load, run
 * its functions after the recovery. */
START_TEST(test_library_by_register)
{
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.launch = DISCO_LAUNCH_SPAWN;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.call_timeout_ms = 20000;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    disco_value_t path = disco_value_str(DISCO_TEST_LIB);
    disco_dref_t p, r;
    CK_OK(disco_session_call_by_name(s, "disco.echo", &path, 1, &p));
    disco_value_t arg = dref(p);
    CK_OK(disco_session_call_by_name(s, "disco.load_library", &arg, 1, &r));
    check_add(s);
    kill_and_see(s, 2);
    CK_OK(disco_session_recover(s));
    check_add(s);
    disco_session_close(s);
}
END_TEST

/* The worker program's path is the session's own copy: a caller's buffer
 * reused after open does not change what a recovery spawns. (Open kept
 * the caller's pointer: the recovery then spawned whatever the buffer held
 * by then.) */
START_TEST(test_worker_path_copied)
{
    char path[512];
    snprintf(path, sizeof path, "%s", DISCO_TEST_WORKER);
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.launch = DISCO_LAUNCH_SPAWN;
    cfg.worker_path = path;
    cfg.call_timeout_ms = 20000;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    snprintf(path, sizeof path, "/nonexistent/disco-worker");
    kill_and_see(s, 1);
    CK_OK(disco_session_recover(s));
    check_add(s);
    disco_session_close(s);
}
END_TEST

/* disco.arena_stats of worker w: [bytes, used, blocks, peers, type, id,
 * events, one-shot allreduces, two-shot ones]. */
static void arena_of(disco_session_t *s, int w, int64_t out[10])
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.arena_stats", NULL, 0, &r));
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_int_eq(v.type, DISCO_T_SHAPE);
    ck_assert_int_eq(v.len, 10);
    memcpy(out, v.v.shape, 10 * sizeof *out);
    disco_value_clear(&v);
    CK_OK(disco_session_free_reg(s, r));
}

/* test.fill_device on sim (element i of worker w: 1000 w + i), a device
 * allreduce, copied back: exact sums; returns the two registers. */
static void sim_allreduce(disco_session_t *s, int n, disco_dref_t *x, disco_dref_t *y)
{
    int64_t len = 256;
    disco_value_t fa[2] = {disco_value_shape(&len, 1), disco_value_int(kDLExtDev)};
    CK_OK(disco_session_call_by_name(s, "test.fill_device", fa, 2, x));
    disco_value_t ar[3] = {dref(*x), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", ar, 3, y));
    float out[256] = {0};
    DLTensor h = {.data = out, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = &len};
    CK_OK(disco_session_copy_from_worker0(s, *y, &h));
    for (int i = 0; i < 256; i++)
        ck_assert_msg(out[i] == (float)(1000 * n * (n - 1) / 2 + n * i), "sum[%d] = %g", i,
                      (double)out[i]);
    for (int w = 1; w < n; w++)
        CK_OK(disco_session_sync(s, w));
}

/* A session on sim GPUs (DISCO_SIM_GPUS=2; 3 workers, forked, then
 * spawned): a device allreduce, a worker killed while the others hold its
 * arena open, recover: every worker's arena is made again (it holds only
 * what the new run made, its kernel count starts over) and a device
 * allreduce gives the exact sums again. */
START_TEST(test_sim_gpu)
{
    setenv("DISCO_SIM_GPUS", "2", 1);
    const disco_device_api_t *api;
    if (disco_device_api_get(kDLExtDev, &api) != DISCO_OK) {
        printf("%s: skipped: this build has no sim device (%s)\n", __func__, disco_last_error());
        return;
    }
    int n = 3;
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.launch = _i ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.call_timeout_ms = 20000;
    cfg.device_arena_bytes = 4u << 20;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    disco_dref_t x, y;
    sim_allreduce(s, n, &x, &y);
    int64_t before[3][10];
    for (int w = 0; w < n; w++)
        arena_of(s, w, before[w]);
    kill_and_see(s, 1);
    CK_OK(disco_session_recover(s));
    disco_dref_t x2, y2;
    sim_allreduce(s, n, &x2, &y2);
    for (int w = 0; w < n; w++) {
        int64_t after[10];
        arena_of(s, w, after);
        /* 7, 8: kernels (one-shot, two-shot); 9: staged (3 workers on 2 sim
         * devices without MPS take that path): one allreduce either way. */
        int64_t ar_before = before[w][7] + before[w][8] + before[w][9];
        int64_t ar_after = after[7] + after[8] + after[9];
        ck_assert_int_eq(ar_before, 1);
        ck_assert_msg(after[1] == before[w][1] && after[2] == before[w][2] && ar_after == ar_before,
                      "worker %d's arena: %lld bytes in %lld blocks, %lld allreduces; before "
                      "the kill %lld in %lld, %lld",
                      w, (long long)after[1], (long long)after[2], (long long)ar_after,
                      (long long)before[w][1], (long long)before[w][2], (long long)ar_before);
    }
    disco_value_t v;
    CK_STATUS(disco_session_debug_get(s, y, 2, &v), DISCO_E_BAD_REG);
    CK_HAS(LOST);
    disco_session_close(s);
}
END_TEST

/* Recovery of a session whose workers are forked, after this process used
 * a device that does not survive fork (issue 32, section 4). The sim under
 * DISCO_SIM_FORK_STRICT follows CUDA's rule: a child forked after its
 * parent used the device cannot use it. Loop 0: the workers were forked
 * before worker 0 made its device tensors; new forked workers could not use
 * the device, so the recovery is refused with a clear error and nothing
 * done (it used to report success with workers that failed at their first
 * device call). Loop 1: spawned workers recover, and compute, as before.
 * Loop 2: a forked session opened after this process used the device (its
 * workers never could) recovers as before. */
START_TEST(test_fork_after_device_refused)
{
    setenv("DISCO_SIM_GPUS", "2", 1);
    setenv("DISCO_SIM_FORK_STRICT", "1", 1); /* inherited by spawned workers */
    const disco_device_api_t *api;
    if (disco_device_api_get(kDLExtDev, &api) != DISCO_OK) {
        printf("%s: skipped: this build has no sim device (%s)\n", __func__, disco_last_error());
        return;
    }
    const DLDevice sim0 = {kDLExtDev, 0};
    if (_i == 2) { /* this process uses the device before it forks */
        void *p;
        CK_OK(disco_device_alloc(sim0, 64, &p));
        CK_OK(disco_device_free(sim0, p));
    }
    int n = 3;
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.launch = _i == 1 ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.call_timeout_ms = 20000;
    cfg.device_arena_bytes = 4u << 20;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    disco_dref_t x, y;
    if (_i != 2)
        sim_allreduce(s, n, &x, &y); /* worker 0, in this process, uses sim */
    kill_and_see(s, 1);
    if (_i == 0) {
        CK_STATUS(disco_session_recover(s), DISCO_E_UNSUPPORTED);
        CK_HAS("DISCO_LAUNCH_FORK");
        CK_HAS("has used sim");
        CK_HAS("DISCO_LAUNCH_SPAWN");
        CK_HAS("Nothing was done");
        ck_assert_int_eq(disco_session_health(s), DISCO_E_WORKER_DIED); /* as before */
    } else {
        CK_OK(disco_session_recover(s));
        check_add(s);
        if (_i == 1)
            sim_allreduce(s, n, &x, &y);
    }
    disco_session_close(s);
}
END_TEST

Suite *suite_recover(void)
{
    Suite *s = suite_create("recover");
    TCase *tc = tcase_create("recover");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_kill_recover_run);
    tcase_add_test(tc, test_old_drefs_lost);
    tcase_add_test(tc, test_spawn_pipes);
    tcase_add_test(tc, test_after_timeout);
    tcase_add_test(tc, test_stuck_survivor);
    tcase_add_test(tc, test_twice_in_a_row);
    tcase_add_test(tc, test_heap_no_leak);
    tcase_add_test(tc, test_view_survives);
    tcase_add_test(tc, test_nothing_left);
    tcase_add_test(tc, test_healthy_and_shutdown);
    tcase_add_test(tc, test_trace_goes_on);
    tcase_add_test(tc, test_failed_then_retried);
    tcase_add_test(tc, test_worker_path_copied);
    tcase_add_test(tc, test_library_by_register);
    tcase_add_loop_test(tc, test_sim_gpu, 0, 2);
    tcase_add_loop_test(tc, test_fork_after_device_refused, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}
