/*
 * mpi_allreduce - the baseline of disco-bench's allreduce figures: Open MPI's
 * MPI_Allreduce (MPI_FLOAT, MPI_SUM) of 1 MiB and 64 MiB. Not linked with
 * disco; built with mpicc and started by disco-bench (make bench) as
 *
 *   mpirun -np 2 --bind-to core --mca pml ob1 --mca btl self,vader mpi_allreduce [REPS]
 *
 * Out of place (separate send and receive buffers), as disco.allreduce writes
 * a new tensor. Each call is timed on every rank between a barrier and its
 * return; a call's time is the slowest rank's (the time until everyone has
 * the result, as disco's call + sync of the last worker). Rank 0 prints the
 * median over the repetitions, one line per size:
 *
 *   mpi_allreduce_us_1MiB=123.456
 *   mpi_allreduce_us_64MiB=12345.678
 *
 * REPS (default 15) repetitions for 64 MiB, ten times as many for 1 MiB,
 * after warm-up calls that fault the buffers in.
 *
 * With a second argument "sizes" (tools/bench/bench_comm.c, any number of
 * ranks), then ITERS_KIB and ITERS_MIB: 1 KiB and 1 MiB instead, measured
 * as bench_comm.c measures disco_ctx_allreduce, so that the two are the same
 * statistic: a round is a barrier, then ITERS calls back to back; its figure
 * is the slowest rank's mean per call; the median over REPS rounds (after
 * one warm-up round), printed as mpi_allreduce_us_1KiB= and
 * mpi_allreduce_us_1MiB=. Then P99_KIB and P99_MIB (default 2000, 200):
 * rounds of that many calls, each timed on its own; a round's figure is the
 * largest over ranks of each rank's 99th percentile; the median over REPS
 * rounds is printed as mpi_allreduce_p99_us_1KiB= / _1MiB=. (The median of single calls after a
 * barrier, as above, adds each call's share of the barrier's exit skew: at 1 KiB on 2 cores it read
 * ~1.1 us where the loop reads ~1.0 us.)
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench_stats.h"

#define MIB        (1u << 20)
#define MAX_REPS   1000
#define WARM_BIG   3
#define WARM_SMALL 50

static void die(int rank, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "error: mpi_allreduce rank %d: %s: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Median µs of an MPI_Allreduce of bytes, the slowest rank's, over reps
 * rounds after warm ones; valid on rank 0. A round is a barrier, then loop
 * calls back to back (1: one call), timed on every rank; its figure is the
 * time per call, or with each, every call timed on its own, this rank's
 * 99th percentile of them. */
static double allreduce_us(int rank, size_t bytes, int warm, int reps, int loop, bool each)
{
    size_t count = bytes / sizeof(float);
    float *in = malloc(bytes), *out = malloc(bytes);
    double *t = calloc((size_t)reps, sizeof *t), *tmax = calloc((size_t)reps, sizeof *tmax);
    double *per = each ? calloc((size_t)loop, sizeof *per) : NULL;
    if (in == NULL || out == NULL || t == NULL || tmax == NULL || (each && per == NULL)) {
        fprintf(stderr, "error: mpi_allreduce rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < count; i++)
        in[i] = (float)(i % 1024);
    memset(out, 0, bytes);
    for (int r = -warm; r < reps; r++) {
        int rc = MPI_Barrier(MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            die(rank, "MPI_Barrier", rc);
        double t0 = MPI_Wtime(), ti = t0, dt;
        for (int i = 0; i < loop && rc == MPI_SUCCESS; i++) {
            rc = MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (each) {
                double t1 = MPI_Wtime();
                per[i] = t1 - ti;
                ti = t1;
            }
        }
        if (each)
            bench_stats(per, loop, &dt);
        else
            dt = (MPI_Wtime() - t0) / loop;
        if (rc != MPI_SUCCESS)
            die(rank, "MPI_Allreduce", rc);
        if (r >= 0)
            t[r] = dt;
    }
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (size_t i = 0; i < count; i += 4099) /* a sample: every rank sent the same */
        if (out[i] != (float)size * in[i]) {
            fprintf(stderr, "error: mpi_allreduce rank %d: element %zu is %g, want %g\n", rank, i,
                    (double)out[i], (double)size * in[i]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    MPI_Reduce(t, tmax, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    qsort(tmax, (size_t)reps, sizeof *tmax, bench_cmp_double);
    double med = reps % 2 ? tmax[reps / 2] : (tmax[reps / 2 - 1] + tmax[reps / 2]) / 2;
    free(in);
    free(out);
    free(t);
    free(tmax);
    free(per);
    return med * 1e6;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps * 10 > MAX_REPS) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np N mpi_allreduce [REPS 1..%d]\n", MAX_REPS / 10);
        MPI_Finalize();
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "sizes") == 0) { /* bench_comm.c's baseline */
        int it_kib = argc > 3 ? atoi(argv[3]) : 2000, it_mib = argc > 4 ? atoi(argv[4]) : 50;
        int p99_kib = argc > 5 ? atoi(argv[5]) : 2000, p99_mib = argc > 6 ? atoi(argv[6]) : 200;
        if (it_kib < 1 || it_mib < 1 || p99_kib < 1 || p99_mib < 1) {
            if (rank == 0)
                fprintf(stderr, "error: mpi_allreduce: ITERS_KIB, ITERS_MIB, P99_KIB and "
                                "P99_MIB must be >= 1\n");
            MPI_Finalize();
            return 2;
        }
        double kib = allreduce_us(rank, 1024, 1, reps, it_kib, false);
        double mib = allreduce_us(rank, MIB, 1, reps, it_mib, false);
        double kib99 = allreduce_us(rank, 1024, 1, reps, p99_kib, true);
        double mib99 = allreduce_us(rank, MIB, 1, reps, p99_mib, true);
        if (rank == 0) {
            printf("mpi_ranks=%d\n", size);
            printf("mpi_allreduce_us_1KiB=%.3f\n", kib);
            printf("mpi_allreduce_us_1MiB=%.3f\n", mib);
            printf("mpi_allreduce_p99_us_1KiB=%.3f\n", kib99);
            printf("mpi_allreduce_p99_us_1MiB=%.3f\n", mib99);
            fflush(stdout);
        }
        MPI_Finalize();
        return 0;
    }
    double small = allreduce_us(rank, MIB, WARM_SMALL, reps * 10, 1, false);
    double big = allreduce_us(rank, 64 * (size_t)MIB, WARM_BIG, reps, 1, false);
    if (rank == 0) {
        printf("mpi_ranks=%d\n", size);
        printf("mpi_allreduce_us_1MiB=%.3f\n", small);
        printf("mpi_allreduce_us_64MiB=%.3f\n", big);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
