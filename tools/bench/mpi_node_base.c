/*
 * mpi_node_base - the baselines of disco-bench's figures across nodes
 * (node_bench.c): plain Open MPI over as many processes as the disco
 * session has workers (2 nodes x 2 workers: 4 ranks). Not linked with
 * disco; built with mpicc and started by disco-bench (bench_node.c) as
 *
 *   mpirun -np 4 --oversubscribe --bind-to none --mca pml ob1 \
 *       --mca btl self,vader mpi_node_base [REPS]
 *
 * Rank 0 prints, as key=value lines (µs):
 *   mpi_bcast_gather_us, mpi_bcast_gather_p99_us   MPI_Bcast of 64 bytes
 *       from rank 0, then MPI_Gather of 8 bytes from every rank to rank 0:
 *       every process got the command and rank 0 knows it, as disco's call
 *       + a sync of every worker. Timed on rank 0 (the controller's view),
 *       single rounds back to back, median and p99
 *   mpi_allreduce_flat_us_1MiB, mpi_allreduce_flat_p99_us_1MiB,
 *   mpi_allreduce_flat_us_64MiB   MPI_Allreduce (MPI_FLOAT, MPI_SUM), out
 *       of place, over all ranks flat; each call timed between a barrier
 *       and its return on every rank, the slowest rank's time (until
 *       everyone has the result), median (and p99 for 1 MiB)
 *
 * A second argument picks one part (bench_step.c, the SPMD step figures
 * beside their Open MPI baselines at 2, 4 and 8 ranks):
 *   calls  only mpi_bcast_gather_us and its p99
 *   idle   mpi_idle_cpu_pct: ranks 1..N-1 wait in MPI_Bcast while rank 0
 *          sleeps 1 s; the mean share of a core each used meanwhile (Open
 *          MPI's waiting ranks poll)
 *
 * The round counts are node_bench's: 150 x REPS call rounds, 10 x REPS
 * 1 MiB allreduces, REPS of 64 MiB, each after untimed warm-up rounds.
 * (The allreduce timing is mpi_allreduce.c's; that program stays as it is,
 * the 2-rank baseline of the one-node figures.)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep under -std=c11 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench_stats.h"

#define MIB        ((size_t)1 << 20)
#define WARM_CALLS 100
#define WARM_SMALL 20
#define WARM_BIG   3

static int rank, size;

static void die(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "out of memory";
    int len = 0;
    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "error: mpi_node_base rank %d: %s: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *xcalloc(size_t n, size_t each)
{
    void *p = calloc(n, each);
    if (p == NULL)
        die("calloc", MPI_SUCCESS);
    return p;
}

static void bcast_gather(int rounds)
{
    char cmd[64] = {0};
    double ack = 0, *acks = xcalloc((size_t)size, sizeof *acks);
    double *us = xcalloc((size_t)rounds, sizeof *us);
    for (int i = -WARM_CALLS; i < rounds; i++) {
        double t0 = MPI_Wtime();
        int rc = MPI_Bcast(cmd, (int)sizeof cmd, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            die("MPI_Bcast", rc);
        ack = (double)cmd[0];
        rc = MPI_Gather(&ack, 1, MPI_DOUBLE, acks, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            die("MPI_Gather", rc);
        if (i >= 0)
            us[i] = (MPI_Wtime() - t0) * 1e6;
    }
    double p99, med = bench_stats(us, rounds, &p99);
    if (rank == 0)
        printf("mpi_bcast_gather_us=%.3f\nmpi_bcast_gather_p99_us=%.3f\n", med, p99);
    free(us);
    free(acks);
}

static void allreduce(size_t bytes, int warm, int reps, const char *key, const char *p99_key)
{
    size_t count = bytes / sizeof(float);
    float *in = xcalloc(count, sizeof *in), *out = xcalloc(count, sizeof *out);
    double *t = xcalloc((size_t)reps, sizeof *t), *tmax = xcalloc((size_t)reps, sizeof *tmax);
    for (size_t i = 0; i < count; i++)
        in[i] = (float)rank + (float)(i % 1024);
    for (int r = -warm; r < reps; r++) {
        int rc = MPI_Barrier(MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            die("MPI_Barrier", rc);
        double t0 = MPI_Wtime();
        rc = MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = MPI_Wtime() - t0;
        if (rc != MPI_SUCCESS)
            die("MPI_Allreduce", rc);
        if (r >= 0)
            t[r] = dt * 1e6;
    }
    /* As node_bench checks disco's: n * (i % 1024) + (0 + 1 + ... + n-1). */
    for (size_t i = 0; i < count; i += 4099)
        if (out[i] != (float)size * (float)(i % 1024) + (float)(size * (size - 1) / 2))
            die("MPI_Allreduce gave a wrong sum", MPI_SUCCESS);
    int rc = MPI_Reduce(t, tmax, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        die("MPI_Reduce", rc);
    double p99, med = bench_stats(tmax, reps, &p99);
    if (rank == 0) {
        printf("%s=%.3f\n", key, med);
        if (p99_key != NULL)
            printf("%s=%.3f\n", p99_key, p99);
    }
    free(in);
    free(out);
    free(t);
    free(tmax);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Ranks 1.. wait in MPI_Bcast while rank 0 sleeps a second: the CPU each
 * waiting rank uses. */
static void idle(void)
{
    char cmd[64] = {0};
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        die("MPI_Barrier", rc);
    double cpu0 = cpu_now(), wall0 = MPI_Wtime();
    if (rank == 0) {
        struct timespec second = {.tv_sec = 1};
        nanosleep(&second, NULL);
    }
    if ((rc = MPI_Bcast(cmd, (int)sizeof cmd, MPI_BYTE, 0, MPI_COMM_WORLD)) != MPI_SUCCESS)
        die("MPI_Bcast", rc);
    double pct = 100.0 * (cpu_now() - cpu0) / (MPI_Wtime() - wall0), *all = NULL;
    if (rank == 0)
        all = xcalloc((size_t)size, sizeof *all);
    if ((rc = MPI_Gather(&pct, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD)) !=
        MPI_SUCCESS)
        die("MPI_Gather", rc);
    if (rank == 0) {
        double sum = 0;
        for (int i = 1; i < size; i++)
            sum += all[i];
        printf("mpi_idle_cpu_pct=%.3f\n", size > 1 ? sum / (size - 1) : 0.0);
        free(all);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > 100) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np N mpi_node_base [REPS 1..100] [calls|idle]\n");
        MPI_Finalize();
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rank == 0)
        printf("mpi_ranks=%d\n", size);
    const char *part = argc > 2 ? argv[2] : "all";
    if (strcmp(part, "idle") == 0) {
        idle();
        MPI_Finalize();
        return 0;
    }
    bcast_gather(150 * reps);
    if (strcmp(part, "calls") == 0) {
        MPI_Finalize();
        return 0;
    }
    allreduce(MIB, WARM_SMALL, 10 * reps, "mpi_allreduce_flat_us_1MiB",
              "mpi_allreduce_flat_p99_us_1MiB");
    allreduce(64 * MIB, WARM_BIG, reps, "mpi_allreduce_flat_us_64MiB", NULL);
    MPI_Finalize();
    return 0;
}
