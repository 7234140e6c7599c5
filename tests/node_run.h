/* node_run.h - running tests/node_prog.c under mpirun, for the suites
 * that do (tests/test_node.c, tests/test_node_p2p.c): the command line,
 * whether this machine can, the run itself, what it printed and that no
 * process is left behind. */
#ifndef DISCO_TESTS_NODE_RUN_H
#define DISCO_TESTS_NODE_RUN_H

#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"

#define PROG DISCO_TEST_BIN "/node_prog"

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define run tu_run

/* mpirun's options: the machine's cores are fewer than the processes; a
 * dead process must not end the job (the session reports it instead). */
static inline const char *mpirun(void)
{
    /* The ASan build's leak check runs in every rank, Open MPI's own leaks
     * suppressed (tests/lsan_mpi.supp); harmless elsewhere. */
    setenv("LSAN_OPTIONS",
           "suppressions=" DISCO_TEST_SRC
           "/tests/lsan_mpi.supp:fast_unwind_on_malloc=0:print_suppressions=0",
           0);
    return geteuid() == 0
               ? "mpirun --allow-run-as-root --oversubscribe --mca orte_enable_recovery 1 "
                 "-x LSAN_OPTIONS"
               : "mpirun --oversubscribe --mca orte_enable_recovery 1 -x LSAN_OPTIONS";
}

/* Whether this machine can run the tests; if not, says why (the test is
 * then a skip, not a failure). */
static inline bool can_run(void)
{
    char out[4096];
    if (run("command -v mpirun >/dev/null 2>&1", out, sizeof out) != 0) {
        printf("node: skipped: mpirun not found (tools/deps.sh installs openmpi-bin)\n");
        return false;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "DISCO_QUIET=1 %s -np 1 %s ids 1 2>&1", mpirun(), PROG);
    run(cmd, out, sizeof out);
    if (strstr(out, "DISCO_E_UNSUPPORTED") != NULL) {
        printf("node: skipped: this build has no MPI: %s", out);
        return false;
    }
    return true;
}

/* Runs node_prog's scenario on np nodes of wpn workers under mpirun (stderr
 * too when with_err), with env ("NAME=value ...", "" for none) set and
 * exported to every rank as mpirun's exports (" -x NAME ...", "" for
 * none) say; returns rank 0's exit code; *secs the time taken. */
static inline int on_nodes_env(int np, const char *scenario, int wpn, bool with_err,
                               const char *env, const char *exports, char *out, size_t cap,
                               double *secs)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "DISCO_QUIET=1 DISCO_NODE_LEASE_MS=1500 %s timeout -s KILL 90 %s -x DISCO_QUIET "
             "-x DISCO_NODE_LEASE_MS%s -np %d %s %s %d %s",
             env, mpirun(), exports, np, PROG, scenario, wpn, with_err ? "2>&1" : "2>/dev/null");
    double t0 = now_s();
    int rc = run(cmd, out, cap);
    if (secs != NULL)
        *secs = now_s() - t0;
    return rc;
}

/* on_nodes_env with nothing more in the environment. */
static inline int on_nodes(int np, const char *scenario, int wpn, bool with_err, char *out,
                           size_t cap, double *secs)
{
    return on_nodes_env(np, scenario, wpn, with_err, "", "", out, cap, secs);
}

/* Processes of node_prog still alive (none may be left after a test). */
static inline int leftovers(void)
{
    DIR *d = opendir("/proc");
    ck_assert(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, "node_prog", 9) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* The "sync took N ms" node_prog printed for a failing sync. */
static inline long long took_ms(const char *out)
{
    const char *p = strstr(out, "sync took ");
    long long ms = -1;
    ck_assert_msg(p != NULL && sscanf(p, "sync took %lld ms", &ms) == 1, "%s", out);
    return ms;
}

/* Waits a little for processes that are ending (reaped by mpirun's
 * daemon), then asserts that none is left. */
static inline void assert_nothing_left(void)
{
    for (int i = 0; i < 50 && leftovers() > 0; i++)
        usleep(100000);
    ck_assert_msg(leftovers() == 0, "%d node_prog processes left behind", leftovers());
}

/* Rank 0's verdict on its scenario (mpirun's exit code does not carry
 * it: with recovery on it is 0 whatever the ranks'). */
static inline void assert_ok(const char *out, const char *scenario)
{
    char want[64];
    snprintf(want, sizeof want, "%s: ok\n", scenario);
    ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);
}

#endif
