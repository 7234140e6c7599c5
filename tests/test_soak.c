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
#include <stdio.h>

#include "tools/soak/soak.h"
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

Suite *suite_soak(void)
{
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_soak_rounds);
    suite_add_tcase(s, tc);
    return s;
}
