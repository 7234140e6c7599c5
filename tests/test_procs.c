/* test_procs.c - the process table on its own (scheduler/session/procs.h):
 * it reports which entry died and how, kills and reaps, and stops the rest,
 * with no session around it. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/session/procs.h"

/* A child that waits to be killed, or exits with code (code >= 0). */
static pid_t child(int code)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (code >= 0)
            _exit(code);
        for (;;)
            pause();
    }
    return pid;
}

/* Blocks until pid has ended, leaving it for the table to reap. */
static void wait_ended(pid_t pid)
{
    siginfo_t si;
    int r;
    while ((r = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT)) < 0 && errno == EINTR)
        ;
    ck_assert_int_eq(r, 0);
}

/* A killed entry is reported by number and signal; the others stay live,
 * the report comes once, and kill and stop reap the rest. */
START_TEST(test_death_reported)
{
    struct disco__procs p;
    ck_assert_int_eq(disco__procs_init(&p, 3), DISCO_OK);
    pid_t a = child(-1), b = child(-1);
    ck_assert_int_eq(disco__procs_adopt(&p, 1, a), DISCO_OK);
    ck_assert_int_eq(disco__procs_adopt(&p, 2, b), DISCO_OK);
    struct disco__procs_exit d;
    ck_assert_int_eq(disco__procs_check(&p, &d), DISCO_OK);
    ck_assert_int_eq(kill(b, SIGKILL), 0);
    wait_ended(b);
    ck_assert_int_eq(disco__procs_check(&p, &d), DISCO_E_WORKER_DIED);
    ck_assert_int_eq(d.worker, 2);
    ck_assert_int_eq(d.pid, b);
    ck_assert(WIFSIGNALED(d.wstatus) && WTERMSIG(d.wstatus) == SIGKILL);
    ck_assert_msg(strstr(d.what, "worker 2 ") != NULL && strstr(d.what, "signal 9") != NULL,
                  "report: %s", d.what);
    ck_assert_int_eq(disco__procs_check(&p, &d), DISCO_OK); /* reported once */
    disco__procs_kill(&p, 1);
    ck_assert(p.reaped[1] && WIFSIGNALED(p.wstatus[1]) && WTERMSIG(p.wstatus[1]) == SIGKILL);
    disco__procs_stop(&p, 0);
    disco__procs_fini(&p);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left");
}
END_TEST

/* An entry that exits is reported with its code; stop kills and reaps a
 * live one once the grace is over. */
START_TEST(test_exit_code_and_stop)
{
    struct disco__procs p;
    ck_assert_int_eq(disco__procs_init(&p, 3), DISCO_OK);
    pid_t a = child(3), b = child(-1);
    ck_assert_int_eq(disco__procs_adopt(&p, 1, a), DISCO_OK);
    ck_assert_int_eq(disco__procs_adopt(&p, 2, b), DISCO_OK);
    wait_ended(a);
    struct disco__procs_exit d;
    ck_assert_int_eq(disco__procs_check(&p, &d), DISCO_E_WORKER_DIED);
    ck_assert_int_eq(d.worker, 1);
    ck_assert(WIFEXITED(d.wstatus) && WEXITSTATUS(d.wstatus) == 3);
    ck_assert_msg(strstr(d.what, "exited with code 3") != NULL, "report: %s", d.what);
    disco__procs_stop(&p, 10);
    ck_assert(p.reaped[2] && WIFSIGNALED(p.wstatus[2]));
    ck_assert_int_eq(p.pidfd[1], -1);
    ck_assert_int_eq(p.pidfd[2], -1);
    disco__procs_fini(&p);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left");
}
END_TEST

Suite *suite_procs(void)
{
    Suite *s = suite_create("procs");
    TCase *tc = tcase_create("procs");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_death_reported);
    tcase_add_test(tc, test_exit_code_and_stop);
    suite_add_tcase(s, tc);
    return s;
}
