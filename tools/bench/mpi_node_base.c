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
 * The round counts are node_bench's: 150 x REPS call rounds, 10 x REPS
 * 1 MiB allreduces, REPS of 64 MiB, each after untimed warm-up rounds.
 * (The allreduce timing is mpi_allreduce.c's; that program stays as it is,
 * the 2-rank baseline of the one-node figures.)
 */
#include <mpi.h>
#include <stdio.h>
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

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > 100) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np N mpi_node_base [REPS 1..100]\n");
        MPI_Finalize();
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rank == 0)
        printf("mpi_ranks=%d\n", size);
    bcast_gather(150 * reps);
    allreduce(MIB, WARM_SMALL, 10 * reps, "mpi_allreduce_flat_us_1MiB",
              "mpi_allreduce_flat_p99_us_1MiB");
    allreduce(64 * MIB, WARM_BIG, reps, "mpi_allreduce_flat_us_64MiB", NULL);
    MPI_Finalize();
    return 0;
}
