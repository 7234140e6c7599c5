/* cli_topo.c - "disco topo": the placement plan, for people or as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "disco/placement.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: disco topo [--workers N] [--policy P] [--cpus LIST]\n"
            "                  [--synthetic DESC | --xml FILE] [--json]\n"
            "Prints where N workers (default: one per PU) would run.\n"
            "  --policy P       none, spread (default), compact, gpu, list\n"
            "  --cpus LIST      the list policy's CPUs, one entry per worker: \"0,2,4-5\"\n"
            "                   (default $DISCO_CPUS)\n"
            "  --synthetic DESC plan for a synthetic topology, e.g. \"pack:2 numa:2 core:4 pu:2\"\n"
            "  --xml FILE       plan for a topology saved by lstopo as XML\n"
            "  --json           JSON instead of a table\n");
}

int disco_cli_topo(int argc, char **argv)
{
    disco_place_config_t cfg = {0};
    int workers = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (v != NULL && strcmp(a, "--workers") == 0) {
            workers = atoi(v), i++;
        } else if (v != NULL && strcmp(a, "--policy") == 0) {
            if (disco_place_policy_parse(v, &cfg.policy) != DISCO_OK) {
                fprintf(stderr, "disco topo: %s\n", disco_last_error());
                return 2;
            }
            i++;
        } else if (v != NULL && strcmp(a, "--cpus") == 0) {
            cfg.cpus = v, i++;
            if (cfg.policy == DISCO_PLACE_DEFAULT)
                cfg.policy = DISCO_PLACE_LIST;
        } else if (v != NULL && strcmp(a, "--synthetic") == 0) {
            cfg.synthetic = v, i++;
        } else if (v != NULL && strcmp(a, "--xml") == 0) {
            cfg.xml = v, i++;
        } else {
            fprintf(stderr, "disco topo: unknown or incomplete option \"%s\"\n", a);
            usage(stderr);
            return 2;
        }
    }
    disco_plan_t *plan;
    if (workers <= 0) { /* one per PU: ask for the topology first */
        if (disco_plan_make(&cfg, 1, &plan) == DISCO_OK) {
            workers = plan->num_pus;
            disco_plan_free(plan);
        } else {
            workers = 1;
        }
    }
    if (disco_plan_make(&cfg, workers, &plan) != DISCO_OK) {
        fprintf(stderr, "disco topo: %s\n", disco_last_error());
        return 1;
    }
    int rc = disco_plan_print(plan, stdout, json) == DISCO_OK ? 0 : 1;
    disco_plan_free(plan);
    return rc;
}
