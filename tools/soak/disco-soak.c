/*
 * disco-soak - the fault soak: kill -9 a random worker, or the controller,
 * in the middle of a call, round after round, and check that the caller
 * gets its error within a bound and that nothing is left behind (see
 * tools/soak/soak.h for what each round checks).
 *
 *   disco-soak [--seconds S] [--rounds N] [--seed X] [--bound-ms MS]
 *              [--no-sim] [--recover | --recover-pct P] [--json PATH] [--quiet] [--help]
 *
 * Stops at whichever limit comes first (default: 60 s, no round limit).
 * Exits 0 when every round passed, 1 when one failed, 2 on bad usage.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/soak/soak.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: disco-soak [--seconds S] [--rounds N] [--seed X] [--bound-ms MS]\n"
               "                  [--no-sim] [--recover | --recover-pct P] [--json PATH]\n"
               "                  [--quiet] [--help]\n"
               "Kills a random worker (or the controller) mid-call, round after round, and\n"
               "checks the caller's error comes within --bound-ms (default 1000) and that no\n"
               "process, fd, memfd mapping, disco /dev/shm entry (a name with \"disco\";\n"
               "other programs' are not counted) or heap block is left. Default:\n"
               "60 s. --seed repeats a run (the seed used is printed). --quiet: no line per\n"
               "round (failures still go to stderr). One round in three runs its session's\n"
               "tensors on sim GPUs (DISCO_SIM_GPUS, 2 when unset); --no-sim: none.\n"
               "Half the worker rounds then recover the session (disco_session_recover),\n"
               "run the workload again and check its values and leaks; --recover-pct P:\n"
               "P%% of them; --recover: every round kills a worker and recovers.\n"
               "Exit 0: all passed.\n");
}

static bool number(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return end != s && *end == '\0' && *out >= 0;
}

int main(int argc, char **argv)
{
    soak_opts_t o = {.seconds = -1, .bound_ms = 1000, .recover_pct = 50, .log = stdout};
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v = 0;
        bool has = i + 1 < argc && number(argv[i + 1], &v);
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--seconds") == 0 && has) {
            o.seconds = v, i++;
        } else if (strcmp(a, "--rounds") == 0 && has) {
            o.rounds = (int)v, i++;
        } else if (strcmp(a, "--seed") == 0 && i + 1 < argc) {
            o.seed = strtoull(argv[++i], NULL, 0);
        } else if (strcmp(a, "--bound-ms") == 0 && has && v >= 1) {
            o.bound_ms = (uint32_t)v, i++;
        } else if (strcmp(a, "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else if (strcmp(a, "--recover") == 0) {
            o.recover_pct = 100;
        } else if (strcmp(a, "--recover-pct") == 0 && has && v <= 100) {
            o.recover_pct = (int)v, i++;
        } else if (strcmp(a, "--no-sim") == 0) {
            o.no_sim = true;
        } else if (strcmp(a, "--quiet") == 0) {
            o.log = NULL;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (o.seconds < 0) /* not given: no time limit with a round limit, else 60 s */
        o.seconds = o.rounds > 0 ? 0 : 60;
    /* Rounds put up to 8 workers on this machine's cores on purpose: the
     * library's once-per-process oversubscription warning is noise here. */
    setenv("DISCO_QUIET", "1", 0);
    soak_report_t r;
    int failed = soak_run(&o, &r);
    soak_print(&r, stdout);
    if (json != NULL && soak_write_json(&r, json) != 0)
        return 1;
    return failed ? 1 : 0;
}
