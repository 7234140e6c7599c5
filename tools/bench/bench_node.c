/* bench_node.c - disco-bench's figures across nodes: a session of 2 nodes
 * x 2 workers (tools/bench/node_bench.c, one MPI process a node) beside
 * plain Open MPI over as many processes, 4 ranks (mpi_node_base.c), and
 * beside one node of 4 workers (node_bench --local), all in this run.
 * Both programs are run through popen and print key=value lines; this
 * file records the keys it knows (the table pairs them, bench_report.c).
 *
 * Transports. Each node's workers meet through their node's rings and
 * shared heap as on one machine; between the nodes disco's link is MPI
 * (commands, replies, the leaders' allreduce chain). The nodes here are
 * processes of one machine, so what carries the link is chosen with
 * Open MPI's byte transfer layer, the same for disco and for its
 * baseline: shared memory (btl vader) for the plain keys, TCP over the
 * loopback interface (btl tcp on lo) for the keys ending in _tcp. The
 * JSON says which under "notes". Real nodes, or network namespaces,
 * would put TCP on a wire or a veth pair instead: not measured here.
 *
 * Placement, the same for disco and its baseline: with a CPU for each of
 * the 4 processes ("pin"), each baseline rank is bound to a core of its
 * own (mpirun --bind-to core) and each disco worker to a CPU of its own
 * (node_bench says how: a list per node, as disco's default plan would
 * put both nodes of one machine on its first PUs); with fewer CPUs
 * ("float", e.g. a 2-core VM) nothing is bound and the kernel shares
 * them. mpirun never binds node_bench's ranks (disco binds its workers).
 * Every command runs under timeout(1), so a hang costs a minute, not the
 * section's watchdog.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/bench.h"

#define NODES     2
#define WPN       2 /* workers per node */
#define TIMEOUT_S 60

/* The figures the programs print; record() keeps the key pointer, so only
 * these static names are recorded. tcp: the name under TCP (NULL: the
 * figure is measured once, without MPI). */
static const struct node_key {
    const char *key, *tcp, *unit;
} keys[] = {
    {"node_call_sync_us", "node_call_sync_us_tcp", "us"},
    {"node_call_sync_p99_us", "node_call_sync_p99_us_tcp", "us"},
    {"node_stream_calls_per_s", "node_stream_calls_per_s_tcp", "calls/s"},
    {"node_allreduce_us_1MiB", "node_allreduce_us_1MiB_tcp", "us"},
    {"node_allreduce_p99_us_1MiB", "node_allreduce_p99_us_1MiB_tcp", "us"},
    {"node_allreduce_us_64MiB", "node_allreduce_us_64MiB_tcp", "us"},
    {"mpi_bcast_gather_us", "mpi_bcast_gather_us_tcp", "us"},
    {"mpi_bcast_gather_p99_us", "mpi_bcast_gather_p99_us_tcp", "us"},
    {"mpi_allreduce_flat_us_1MiB", "mpi_allreduce_flat_us_1MiB_tcp", "us"},
    {"mpi_allreduce_flat_p99_us_1MiB", "mpi_allreduce_flat_p99_us_1MiB_tcp", "us"},
    {"mpi_allreduce_flat_us_64MiB", "mpi_allreduce_flat_us_64MiB_tcp", "us"},
    {"node_call_sync_local_us", NULL, "us"},
    {"node_call_sync_local_p99_us", NULL, "us"},
    {"node_stream_local_calls_per_s", NULL, "calls/s"},
};

static const struct transport {
    bool tcp;
    const char *mca; /* Open MPI's options: ob1 so that the btl is what carries */
    const char *note;
} transports[] = {
    {false, "--mca pml ob1 --mca btl self,vader",
     "between the nodes: MPI over shared memory (Open MPI btl vader); inside each node: "
     "disco's rings and shared heap"},
    {true, "--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo",
     "between the nodes: MPI over TCP on the loopback interface (Open MPI btl tcp, lo); "
     "inside each node: disco's rings and shared heap"},
};

/* Records one figure a program printed under its name for the transport
 * (ctx: the transport); unknown keys are ignored. */
static void take(void *ctx, const char *key, double v)
{
    bool tcp = *(const bool *)ctx;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *name = tcp ? keys[i].tcp : keys[i].key;
        if (strcmp(key, keys[i].key) == 0 && name != NULL)
            record(name, v, keys[i].unit);
    }
}

/* Runs cmd, records the figures it prints under their names for the
 * transport (tcp or not); returns how many lines it read, or -1 when cmd
 * failed. */
static int run(const char *cmd, bool tcp)
{
    int found;
    int status = bu_read_figures(cmd, take, &tcp, &found);
    if (status != 0) {
        printf("  failed: exit status %d (%s), %d figure(s) read\n", status,
               status == -1                                      ? strerror(errno)
               : WIFEXITED(status) && WEXITSTATUS(status) == 124 ? "timed out"
                                                                 : "see its output above",
               found);
        return -1;
    }
    return found;
}

/* The program at path, or NULL and a line saying why not. */
static const char *usable(const char *path, const char *what)
{
    if (path == NULL) {
        printf("  skipped: no %s (make bench builds it when Open MPI is there)\n", what);
        return NULL;
    }
    if (strchr(path, '\'') != NULL || access(path, X_OK) != 0) {
        printf("  skipped: %s %s is not an executable program we can quote\n", what, path);
        return NULL;
    }
    return path;
}

void bench_node(void)
{
    const char *prog = usable(bench_node_path(), "node_bench (--node-bench PATH)");
    const char *base =
        prog ? usable(bench_node_base_path(), "mpi_node_base (--node-base PATH)") : NULL;
    if (prog == NULL || base == NULL)
        return;
    /* As root, Open MPI wants to be told that this is meant. */
    const char *root = geteuid() == 0 ? " --allow-run-as-root" : "";
    int reps = bench_reps();
    bool pin = bu_ncpus >= NODES * WPN;
    const char *place = pin ? "pin" : "float";
    const char *bind = pin ? "--bind-to core --map-by core" : "--bind-to none";
    char cmd[1024];
    printf("  %d nodes x %d workers; baselines: Open MPI over %d ranks, one node of %d workers\n",
           NODES, WPN, NODES * WPN, NODES * WPN);
    const char *place_note = pin ? "pin: every process on a CPU of its own (Open MPI ranks "
                                   "--bind-to core; disco workers a list of CPUs per node)"
                                 : "float: fewer CPUs than processes; nothing bound (Open MPI "
                                   "--bind-to none; disco placement none)";
    printf("  placement: %s\n", place_note);
    bench_note("node_place", place_note);
    snprintf(cmd, sizeof cmd, "DISCO_QUIET=1 timeout -k 5 %d '%s' --local %d %d %s", TIMEOUT_S,
             prog, NODES * WPN, reps, place);
    run(cmd, false);
    for (size_t t = 0; t < sizeof transports / sizeof transports[0]; t++) {
        const struct transport *tr = &transports[t];
        printf("  transport%s: %s\n", tr->tcp ? " (keys _tcp)" : "", tr->note);
        bench_note(tr->tcp ? "node_transport_tcp" : "node_transport", tr->note);
        snprintf(cmd, sizeof cmd, "timeout -k 5 %d mpirun%s -np %d --oversubscribe %s %s '%s' %d",
                 TIMEOUT_S, root, NODES * WPN, bind, tr->mca, base, reps);
        run(cmd, tr->tcp);
        snprintf(cmd, sizeof cmd,
                 "timeout -k 5 %d mpirun%s -np %d --oversubscribe --bind-to none %s "
                 "-x DISCO_QUIET=1 '%s' %d %d %s",
                 TIMEOUT_S, root, NODES, tr->mca, prog, WPN, reps, place);
        run(cmd, tr->tcp);
    }
}
