/* soak_report.c - the fault soak's report, for people and as JSON. */
#include <jansson.h>

#include "tools/soak/soak.h"

void soak_print(const soak_report_t *r, FILE *f)
{
    fprintf(f,
            "soak: %d rounds in %.1f s (seed %llu): %d worker kills, %d controller kills, "
            "%d failed\n",
            r->rounds, r->seconds, (unsigned long long)r->seed, r->worker_rounds,
            r->controller_rounds, r->failures);
    fprintf(f,
            "  worker killed -> caller's error:   median %.3f ms, worst %.3f ms "
            "(%d of the kills landed while the caller was in a call or sync)\n",
            r->median_worker_ms, r->worst_worker_ms, r->mid_call);
    fprintf(f, "  controller killed -> workers gone: median %.3f ms, worst %.3f ms\n",
            r->median_controller_ms, r->worst_controller_ms);
    fprintf(f, "  recovered after the kill: %d rounds; recover median %.3f ms, worst %.3f ms\n",
            r->recover_rounds, r->median_recover_ms, r->worst_recover_ms);
    fprintf(f,
            "  rounds by workers: 2:%d 3:%d 4:%d 8:%d; fork %d, spawn %d; rings %d, pipes %d; "
            "cpu %d, sim %d;",
            r->by_workers[2], r->by_workers[3], r->by_workers[4], r->by_workers[8], r->by_launch[0],
            r->by_launch[1], r->by_transport[0], r->by_transport[1], r->by_device[0],
            r->by_device[1]);
    for (int i = 0; i < SOAK_WORKLOADS; i++)
        fprintf(f, " %s %d%s", soak_workload_name[i], r->by_workload[i],
                i + 1 < SOAK_WORKLOADS ? "," : "\n");
    fprintf(f,
            "  heap locks recovered from a dead holder: %llu; orphans reaped: %d; device "
            "arenas left to process exit: %u\n",
            (unsigned long long)r->heap_recoveries, r->orphans, r->arenas_left);
    if (r->failure[0] != '\0')
        fprintf(f, "  first failure: %s\n", r->failure);
}

int soak_write_json(const soak_report_t *r, const char *path)
{
    json_t *by = json_object();
    for (int i = 0; i < SOAK_WORKLOADS; i++)
        json_object_set_new(by, soak_workload_name[i], json_integer(r->by_workload[i]));
    json_t *root = json_pack(
        "{s:I, s:i, s:i, s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, "
        "s:o, "
        "s:s}",
        "seed", (json_int_t)r->seed, "rounds", r->rounds, "worker_rounds", r->worker_rounds,
        "recover_rounds", r->recover_rounds, "median_recover_ms", r->median_recover_ms,
        "worst_recover_ms", r->worst_recover_ms, "controller_rounds", r->controller_rounds,
        "sim_rounds", r->by_device[1], "mid_call", r->mid_call, "orphans", r->orphans, "failures",
        r->failures, "seconds", r->seconds, "worst_worker_ms", r->worst_worker_ms,
        "median_worker_ms", r->median_worker_ms, "worst_controller_ms", r->worst_controller_ms,
        "median_controller_ms", r->median_controller_ms, "heap_recoveries",
        (json_int_t)r->heap_recoveries, "workloads", by, "first_failure", r->failure);
    int rc = root != NULL ? json_dump_file(root, path, JSON_INDENT(2)) : -1;
    if (rc != 0)
        fprintf(stderr, "disco-soak: cannot write %s\n", path);
    json_decref(root);
    return rc;
}
