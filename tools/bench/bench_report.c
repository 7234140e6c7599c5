/*
 * bench_report.c - disco-bench's results: the figures recorded so far, the
 * table that prints them beside their baselines and targets, and the JSON
 * file.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"

/* ---- results ---- */

typedef struct result {
    char key[64]; /* a copy: callers may build keys in a buffer they reuse */
    double value;
    const char *unit;
} result_t;

static result_t results[256]; /* every section's figures (about 120), with room */
static int nresults;

/* value in 12 columns with 3 significant digits at least (sub-µs figures
 * read 0.737, not 0.7), one decimal from 100 up. */
static const char *fmt_value(char buf[32], double value)
{
    double a = value < 0 ? -value : value;
    snprintf(buf, 32, "%12.*f", a < 10 ? 3 : a < 100 ? 2 : 1, value);
    return buf;
}

void record(const char *key, double value, const char *unit)
{
    if (nresults == (int)(sizeof results / sizeof results[0]))
        bu_die("too many results");
    result_t *r = &results[nresults++];
    snprintf(r->key, sizeof r->key, "%s", key);
    r->value = value;
    r->unit = unit;
    char shown[32];
    printf("  %-30s %s %s\n", key, fmt_value(shown, value), unit);
    fflush(stdout);
}

int bench_result_count(void)
{
    return nresults;
}

typedef struct note {
    const char *key;
    char text[256];
} note_t;

static note_t notes[64]; /* the GPU section names each allreduce figure's path */
static int nnotes;

void bench_note(const char *key, const char *text)
{
    if (nnotes == (int)(sizeof notes / sizeof notes[0]))
        bu_die("too many notes");
    notes[nnotes].key = key;
    snprintf(notes[nnotes].text, sizeof notes[nnotes].text, "%s", text);
    nnotes++;
}

static const result_t *find_result(const char *key)
{
    for (int i = 0; i < nresults; i++)
        if (strcmp(results[i].key, key) == 0)
            return &results[i];
    return NULL;
}

/* ---- the table ---- */

enum target_kind { T_NONE, T_VALUE_LE, T_VALUE_LT, T_RATIO_GE };

typedef struct row {
    const char *key;
    const char *base;        /* baseline key or NULL */
    bool base_over_value;    /* ratio = base/value (a speed-up) instead of value/base */
    const char *ratio_label; /* what the ratio means */
    enum target_kind target_kind;
    double target;
} row_t;

/* The rows across nodes, once for each transport (sfx "" or "_tcp"):
 * disco beside plain Open MPI over the same processes (mpi/disco: above 1,
 * disco is faster), the stream beside one node's. */
#define NODE_ROWS(sfx)                                                                              \
    {"node_call_sync_us" sfx, "mpi_bcast_gather_us" sfx, true, "mpi/disco", T_NONE, 0},             \
        {"node_call_sync_p99_us" sfx, "mpi_bcast_gather_p99_us" sfx, true, "mpi/disco", T_NONE, 0}, \
        {"node_stream_calls_per_s" sfx,                                                             \
         "node_stream_local_calls_per_s",                                                           \
         false,                                                                                     \
         "nodes/local",                                                                             \
         T_NONE,                                                                                    \
         0},                                                                                        \
        {"node_allreduce_us_1MiB" sfx,                                                              \
         "mpi_allreduce_flat_us_1MiB" sfx,                                                          \
         true,                                                                                      \
         "mpi/disco",                                                                               \
         T_NONE,                                                                                    \
         0},                                                                                        \
        {"node_allreduce_p99_us_1MiB" sfx,                                                          \
         "mpi_allreduce_flat_p99_us_1MiB" sfx,                                                      \
         true,                                                                                      \
         "mpi/disco",                                                                               \
         T_NONE,                                                                                    \
         0},                                                                                        \
    {                                                                                               \
        "node_allreduce_us_64MiB" sfx, "mpi_allreduce_flat_us_64MiB" sfx, true, "mpi/disco",        \
            T_NONE, 0                                                                               \
    }

/* A GPU allreduce's row: beside the memcpy baseline of its size and
 * members (the baseline does not depend on the dtype). */
#define GPU_AR(size, dt, n)                                                                        \
    {                                                                                              \
        "gpu_allreduce_us_" size "_" dt "_n" n, "gpu_memcpy_allreduce_us_" size "_n" n, true,      \
            "memcpy/disco", T_NONE, 0                                                              \
    }

static const row_t rows[] = {
    {"floor_rtt_ns", NULL, false, NULL, T_NONE, 0},
    {"floor_2line_rtt_ns", "floor_rtt_ns", false, "2line/floor", T_NONE, 0},
    {"ring_rtt_ns", "floor_rtt_ns", false, "ring/floor", T_VALUE_LE, 250},
    {"ring_rtt_ns", "pipe_rtt_ns", true, "pipe/ring", T_RATIO_GE, 100},
    {"ring_rtt_ns", "floor_2line_rtt_ns", false, "ring/2line", T_NONE, 0},
    {"ring_rtt_48b_ns", "floor_2line_rtt_ns", false, "ring/2line", T_NONE, 0},
    {"pipe_rtt_ns", NULL, false, NULL, T_NONE, 0},
    {"bcast_ns_n1", "pipe_bcast_ns_n1", true, "pipe/ring", T_NONE, 0},
    {"bcast_ns_n2", "pipe_bcast_ns_n2", true, "pipe/ring", T_NONE, 0},
    {"bcast_ns_n4", "pipe_bcast_ns_n4", true, "pipe/ring", T_NONE, 0},
    {"bcast_ns_n8", "pipe_bcast_ns_n8", true, "pipe/ring", T_NONE, 0},
    {"idle_cpu_pct", NULL, false, NULL, T_VALUE_LT, 1},
    {"call_sync_ns", NULL, false, NULL, T_VALUE_LE, 400},
    {"call_sync_ns", "call_sync_pipe_ns", true, "pipe/ring", T_RATIO_GE, 100},
    {"call_sync_ns", "floor_2line_rtt_ns", false, "ring/2line", T_NONE, 0},
    {"call_sync_p99_ns", "call_sync_ns", false, "p99/pinned", T_NONE, 0},
    {"call_sync_float_ns", "call_sync_ns", false, "float/pinned", T_NONE, 0},
    {"call_sync_ns_n4", "call_sync_pipe_ns_n4", true, "pipe/ring", T_NONE, 0},
    {"call_sync_ns_n8", "call_sync_pipe_ns_n8", true, "pipe/ring", T_NONE, 0},
    {"trace_overhead_pct", NULL, false, NULL, T_VALUE_LE, 5},
    {"call_sync_traced_ns", "call_sync_untraced_ns", false, "on/off", T_NONE, 0},
    {"call_sync_top_ns", "call_sync_notop_ns", false, "top/none", T_NONE, 0},
    {"call_sync_top10_ns", "call_sync_notop_ns", false, "top10/none", T_NONE, 0},
    {"call_sync_top_p99_ns", "call_sync_notop_p99_ns", false, "top/none", T_NONE, 0},
    {"call_sync_waker_ns", "call_sync_notop_ns", false, "waker/none", T_NONE, 0},
    {"top_overhead_ratio", NULL, false, NULL, T_VALUE_LE, 1.05},
    {"top_overhead_ratio", "waker_overhead_ratio", false, "top/waker", T_NONE, 0},
    {"session_open_ms_n8", NULL, false, NULL, T_VALUE_LE, 10},
    {"recover_ms_n8", "recover_open_ms_n8", false, "recover/open", T_VALUE_LE, 20},
    {"recover_ms_n8_p99", "recover_open_ms_n8", false, "recover/open", T_NONE, 0},
    {"ctx_allreduce_us_1KiB_n2", "mpi_allreduce_us_1KiB_n2", true, "mpi/disco", T_RATIO_GE, 2},
    {"ctx_allreduce_us_1KiB_n2", "exchange_floor_us_1KiB_n2", false, "disco/floor", T_NONE, 0},
    {"ctx_allreduce_us_1MiB_n2", "mpi_allreduce_us_1MiB_n2", true, "mpi/disco", T_RATIO_GE, 4},
    {"ctx_allreduce_p99_us_1KiB_n2", "mpi_allreduce_p99_us_1KiB_n2", true, "mpi/disco", T_NONE, 0},
    {"ctx_allreduce_p99_us_1KiB_n2", "ctx_allreduce_us_1KiB_n2", false, "p99/mean", T_NONE, 0},
    {"ctx_allreduce_p99_us_1MiB_n2", "mpi_allreduce_p99_us_1MiB_n2", true, "mpi/disco", T_NONE, 0},
    {"ctx_sendrecv_us_1KiB_n2", NULL, false, NULL, T_NONE, 0},
    {"ctx_sendrecv_p99_us_1KiB_n2", "ctx_sendrecv_us_1KiB_n2", false, "p99/mean", T_NONE, 0},
    {"allreduce_us_1MiB", "mpi_allreduce_us_1MiB", true, "mpi/disco", T_RATIO_GE, 1.5},
    {"allreduce_us_64MiB", "mpi_allreduce_us_64MiB", true, "mpi/disco", T_RATIO_GE, 1.5},
    {"bcast_us_1MiB", NULL, false, NULL, T_NONE, 0},
    {"allreduce_into_us_1MiB", "allreduce_us_1MiB", false, "into/new", T_NONE, 0},
    {"allreduce_into_us_64MiB", "allreduce_us_64MiB", false, "into/new", T_NONE, 0},
    {"allreduce_into_p99_us_1MiB", NULL, false, NULL, T_NONE, 0},
    {"allreduce_into_p99_us_64MiB", NULL, false, NULL, T_NONE, 0},
    {"allgather_into_us_1MiB", NULL, false, NULL, T_NONE, 0},
    {"allgather_into_p99_us_1MiB", NULL, false, NULL, T_NONE, 0},
    {"bcast_into_us_1MiB", NULL, false, NULL, T_NONE, 0},
    {"bcast_into_p99_us_1MiB", NULL, false, NULL, T_NONE, 0},
    {"bcast_us_64MiB", "bcast_us_1MiB", false, "64MiB/1MiB", T_NONE, 0},
    {"copy_to_worker0_gbps", "memcpy_gbps", false, "copy/memcpy", T_RATIO_GE, 0.8},
    {"memcpy_gbps", NULL, false, NULL, T_NONE, 0},
    {"rpc_call_ns_shm", "rpc_call_ns_pipe", true, "pipe/shm", T_RATIO_GE, 100},
    {"rpc_call_ns_shm", "rpc_call_ns_tcp", true, "tcp/shm", T_RATIO_GE, 100},
    {"rpc_call_ns_shm", "rpc_call_ns_unix", true, "unix/shm", T_NONE, 0},
    {"rpc_call_ns_shm", "ring_rtt_ns", false, "rpc/ring", T_NONE, 0},
    {"rpc_call_ns_unix", "rpc_call_ns_pipe", false, "unix/pipe", T_NONE, 0},
    {"rpc_call_ns_tcp", "rpc_call_ns_pipe", false, "tcp/pipe", T_NONE, 0},
    {"rpc_call_ns_pipe", "pipe_rtt_ns", false, "rpc/raw pipe", T_NONE, 0},
    {"rpc_copy_gbps_shm", "memcpy_gbps", false, "copy/memcpy", T_RATIO_GE, 0.8},
    /* Across nodes (bench_node.c): over shared memory, then TCP on
     * loopback; the call round also beside one node's, and TCP beside
     * shared memory. */
    NODE_ROWS(""),
    {"node_call_sync_us", "node_call_sync_local_us", false, "nodes/local", T_NONE, 0},
    {"node_call_sync_p99_us", "node_call_sync_local_p99_us", false, "nodes/local", T_NONE, 0},
    NODE_ROWS("_tcp"),
    {"node_call_sync_us_tcp", "node_call_sync_us", false, "tcp/shm", T_NONE, 0},
    {"node_allreduce_us_64MiB_tcp", "node_allreduce_us_64MiB", false, "tcp/shm", T_NONE, 0},
    /* GPU (bench_gpu.c): allreduce against the copies a memcpy allreduce
     * makes on one device; the published small-message targets (H100:
     * 2 members about 3.7 us); copies at 90% of cudaMemcpy or more */
    GPU_AR("512B", "f16", "2"),
    GPU_AR("512B", "f32", "2"),
    GPU_AR("32KiB", "f16", "2"),
    GPU_AR("32KiB", "f32", "2"),
    GPU_AR("1MiB", "f16", "2"),
    GPU_AR("1MiB", "f32", "2"),
    GPU_AR("64MiB", "f16", "2"),
    GPU_AR("64MiB", "f32", "2"),
    GPU_AR("512B", "f16", "4"),
    GPU_AR("512B", "f32", "4"),
    GPU_AR("32KiB", "f16", "4"),
    GPU_AR("32KiB", "f32", "4"),
    GPU_AR("1MiB", "f16", "4"),
    GPU_AR("1MiB", "f32", "4"),
    GPU_AR("64MiB", "f16", "4"),
    GPU_AR("64MiB", "f32", "4"),
    {"gpu_allreduce_us_512B_f16_n2", NULL, false, NULL, T_VALUE_LE, 3.7},
    {"gpu_allreduce_us_512B_f32_n2", NULL, false, NULL, T_VALUE_LE, 3.7},
    {"gpu_copy_to_worker0_gbps", "gpu_memcpy_h2d_gbps", false, "copy/cudaMemcpy", T_RATIO_GE, 0.9},
    {"gpu_copy_from_worker0_gbps", "gpu_memcpy_d2h_gbps", false, "copy/cudaMemcpy", T_RATIO_GE,
     0.9},
    {"gpu_d2d_peer_gbps", "gpu_memcpy_d2d_gbps", false, "peer/cudaMemcpy", T_RATIO_GE, 0.9},
    {"ipc_open_us_first", NULL, false, NULL, T_NONE, 0},
    {"ipc_open_us_cached", "ipc_open_us_first", false, "cached/first", T_NONE, 0},
    {"gpu_call_sync_ns", "call_sync_spawn_ns", false, "gpu/cpu", T_NONE, 0},
};

/* Column widths: the names printed (22, or the longest of them) and units. */
static int wkey = 22, wbase = 22, wunit = 4;

static void print_row(const row_t *r)
{
    const result_t *v = find_result(r->key);
    const result_t *b = r->base ? find_result(r->base) : NULL;
    if (v == NULL)
        return;
    char base_val[32] = "-", ratio[48] = "-", target[48] = "";
    double q = 0;
    if (b != NULL) {
        q = r->base_over_value ? b->value / v->value : v->value / b->value;
        char shown[32];
        fmt_value(shown, b->value);
        snprintf(base_val, sizeof base_val, "%s", shown + strspn(shown, " "));
        snprintf(ratio, sizeof ratio, "%.2f %s", q, r->ratio_label);
    }
    switch (r->target_kind) {
    case T_NONE:
        break;
    case T_VALUE_LE:
        snprintf(target, sizeof target, "<= %g %s  %s", r->target, v->unit,
                 v->value <= r->target ? "PASS" : "MISS");
        break;
    case T_VALUE_LT:
        snprintf(target, sizeof target, "< %g %s  %s", r->target, v->unit,
                 v->value < r->target ? "PASS" : "MISS");
        break;
    case T_RATIO_GE:
        if (b == NULL) /* the baseline was not measured: no verdict */
            snprintf(target, sizeof target, ">= %gx  %s", r->target,
                     strncmp(r->base, "mpi_", 4) == 0 ? "MPI not available" : "no baseline");
        else
            snprintf(target, sizeof target, ">= %gx  %s", r->target,
                     q >= r->target ? "PASS" : "MISS");
        break;
    }
    char shown[32];
    printf("%-*s %s %-*s %-*s %12s %-18s %s\n", wkey, v->key, fmt_value(shown, v->value), wunit,
           v->unit, wbase, r->base ? r->base : "-", base_val, ratio, target);
}

void bench_print_table(const bu_machine_t *m)
{
    printf("\nmachine: %s, %d cores, %.1f GiB, GPU: %s, load %.2f at start\n", m->cpu, m->cores,
           m->mem_gib, m->gpu, m->load1);
    if (m->load1 > 0.5)
        printf("warning: the machine was busy at start; figures are skewed\n");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const result_t *v = find_result(rows[i].key);
        if (v == NULL)
            continue;
        wkey = (int)strlen(v->key) > wkey ? (int)strlen(v->key) : wkey;
        wunit = (int)strlen(v->unit) > wunit ? (int)strlen(v->unit) : wunit;
        if (rows[i].base != NULL && (int)strlen(rows[i].base) > wbase)
            wbase = (int)strlen(rows[i].base);
    }
    printf("%-*s %12s %-*s %-*s %12s %-18s %s\n", wkey, "name", "value", wunit, "unit", wbase,
           "baseline", "base value", "ratio", "target");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        print_row(&rows[i]);
}

/* ---- JSON ---- */

void bench_write_json(const char *path, const bu_machine_t *m, bool quick, int reps)
{
    json_t *root = json_object(), *mach = json_object(), *res = json_object();
    json_object_set_new(mach, "cpu", json_string(m->cpu));
    json_object_set_new(mach, "cores", json_integer(m->cores));
    json_object_set_new(mach, "mem_gib", json_real(m->mem_gib));
    json_object_set_new(mach, "gpu", json_string(m->gpu));
    json_object_set_new(mach, "loadavg_1m", json_real(m->load1));
    for (int i = 0; i < nresults; i++)
        json_object_set_new(res, results[i].key, json_real(results[i].value));
    json_object_set_new(root, "machine", mach);
    json_object_set_new(root, "results", res);
    if (nnotes > 0) {
        json_t *nt = json_object();
        for (int i = 0; i < nnotes; i++)
            json_object_set_new(nt, notes[i].key, json_string(notes[i].text));
        json_object_set_new(root, "notes", nt);
    }
    json_t *cfg = json_object();
    json_object_set_new(cfg, "quick", json_boolean(quick));
    json_object_set_new(cfg, "reps", json_integer(reps));
    json_object_set_new(root, "config", cfg);
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(8)) != 0)
        bu_die("cannot write %s", path);
    json_decref(root);
    printf("\nwrote %s\n", path);
}
