/* test_soak.c - a bounded fault soak (tools/soak/soak.h; make soak runs it for
 * longer): worker and controller kills mid-call, each reported within the
 * bound, with no process, fd, memfd mapping, /dev/shm entry or heap block
 * left behind; one round in three on sim GPUs (device tensors in the
 * session, peers holding the victim's arena open, no arena block left by
 * a fault-free pass); half the worker rounds recover the session after the
 * kill (disco_session_recover), run the workload again with exact values
 * and leave the heap, fds and mappings as before the kill. The seed comes from the clock, so each
 * run covers other kill points; a failure names the seed that repeats it (build/bin/disco-soak
 * --seed X --rounds N). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tools/soak/soak.h"
#include "tools/soak/soak_round.h"
#include "tests/testutil.h"

#define ROUNDS   120
#define BOUND_MS 1000

START_TEST(test_soak_rounds)
{
    soak_opts_t o = {.rounds = ROUNDS,
                     .bound_ms = BOUND_MS,
                     .worker_path = DISCO_TEST_WORKER,
                     .recover_pct = 50};
    soak_report_t r;
    int failed = soak_run(&o, &r);
    ck_assert_msg(failed == 0, "%d of %d rounds failed (seed %llu); first: %s", failed, r.rounds,
                  (unsigned long long)r.seed, r.failure);
    ck_assert_int_eq(r.rounds, ROUNDS);
    ck_assert_int_eq(r.worker_rounds + r.controller_rounds, ROUNDS);
    ck_assert_msg(r.worker_rounds > 0 && r.controller_rounds > 0,
                  "seed %llu: %d worker rounds, %d controller rounds", (unsigned long long)r.seed,
                  r.worker_rounds, r.controller_rounds);
    ck_assert_msg(r.by_device[0] > 0 && r.by_device[1] > 0,
                  "seed %llu: %d cpu rounds, %d sim rounds", (unsigned long long)r.seed,
                  r.by_device[0], r.by_device[1]);
    ck_assert_msg(r.recover_rounds > 0 && r.recover_rounds < r.worker_rounds,
                  "seed %llu: %d recovery rounds of %d worker rounds", (unsigned long long)r.seed,
                  r.recover_rounds, r.worker_rounds);
    ck_assert(r.worst_worker_ms <= BOUND_MS && r.worst_controller_ms <= BOUND_MS);
}
END_TEST

/* Creates an empty file at path. */
static void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "create %s", path);
    close(fd);
}

/* The checks after a round count only disco's /dev/shm entries: another
 * program's file made there during the round (Open MPI's vader_segment.*,
 * as a killed mpirun leaves them on a shared machine) fails no round;
 * before, the whole directory was counted and it did. An entry named
 * disco's is counted (in a directory of its own here, so that no other
 * suite running at the same time sees it in /dev/shm). */
START_TEST(test_soak_foreign_shm)
{
    soak_opts_t o = {.bound_ms = BOUND_MS};
    soak_report_t r = {0};
    round_t rd = {.r = &r, .o = &o, .what = "foreign /dev/shm entry"};
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/vader_segment.soak-test.%d.0", (int)getpid());
    leaks_t before = soak_leaks_now();
    touch(path);
    soak_check_clean(&rd, &before, NULL, 0);
    unlink(path);
    ck_assert_msg(!rd.failed, "a round failed on another program's /dev/shm entry: %s", r.failure);

    char dir[] = "/tmp/disco-soak-shm-XXXXXX", name[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/vader_segment.1", dir);
    touch(path);
    ck_assert_int_eq(soak_shm_entries(dir, name, sizeof name), 0);
    snprintf(path, sizeof path, "%s/Disco-seg.7", dir);
    touch(path);
    int n = soak_shm_entries(dir, name, sizeof name);
    unlink(path);
    snprintf(path, sizeof path, "%s/vader_segment.1", dir);
    unlink(path);
    rmdir(dir);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(name, "Disco-seg.7");
    ck_assert_int_eq(soak_shm_entries("/nonexistent-disco-dir", name, sizeof name), -1);
}
END_TEST

Suite *suite_soak(void)
{
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_soak_rounds);
    tcase_add_test(tc, test_soak_foreign_shm);
    suite_add_tcase(s, tc);
    return s;
}
