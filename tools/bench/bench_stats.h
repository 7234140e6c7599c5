/* bench_stats.h - a median and a 99th percentile of single-round times,
 * for the programs mpirun runs (node_bench.c, mpi_node_base.c: the latter
 * is built by mpicc alone, so this is a header, not a function of
 * bench_util.c). */
#ifndef DISCO_TOOLS_BENCH_STATS_H
#define DISCO_TOOLS_BENCH_STATS_H

#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v (n >= 1); returns its median and sets *p99 to its 99th
 * percentile (as bench_session.c). */
static inline double bench_stats(double *v, int n, double *p99)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    *p99 = v[(n - 1) * 99 / 100];
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
