/* bench_gpu_ipc.c - the IPC figures of disco-bench's GPU section
 * (bench_gpu.c records them): two forked processes, one exporting a device
 * allocation, the other importing it, first (each import opens the handle)
 * and cached (while it holds one). Forked before the bench process touches
 * the device (bench_gpu.c, "Processes"). */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "disco/device.h"
#include "tools/bench/bench.h"

#define MAX_REPS 1000
#define IPC_SIZE ((size_t)1 << 20) /* the allocation the figures import */

typedef struct ipc_ctx {
    DLDevice dev; /* the exporter's and importer's device */
    void *table;  /* shared lifetime table, mapped before the fork */
    size_t table_bytes;
    int ref_fd[2];  /* exporter -> importer: the ref */
    int done_fd[2]; /* importer -> exporter: done, free it */
    int res_fd[2];  /* importer -> parent: the two medians, us */
} ipc_ctx_t;

static int ipc_exporter(void *p)
{
    ipc_ctx_t *c = p;
    void *ptr;
    disco_ipc_ref_t ref;
    char done;
    close(c->done_fd[1]); /* EOF, not a hang, if the importer dies */
    close(c->res_fd[1]);
    bu_child_check(disco_device_ipc_init(c->table, c->table_bytes, 4), "ipc_init");
    bu_child_check(disco_device_alloc(c->dev, IPC_SIZE, &ptr), "alloc (ipc)");
    bu_child_check(disco_device_ipc_export(ptr, &ref), "ipc_export");
    if (write(c->ref_fd[1], &ref, sizeof ref) != (ssize_t)sizeof ref)
        return 1;
    if (read(c->done_fd[0], &done, 1) != 1)
        return 1;
    bu_child_check(disco_device_free(c->dev, ptr), "free (ipc)");
    return 0;
}

static int ipc_importer(void *p)
{
    ipc_ctx_t *c = p;
    disco_ipc_ref_t ref;
    static double first[MAX_REPS], cached[MAX_REPS];
    void *ptr, *held;
    if (read(c->ref_fd[0], &ref, sizeof ref) != (ssize_t)sizeof ref)
        return 1;
    bu_child_check(disco_device_ipc_attach(c->table, c->table_bytes), "ipc_attach");
    bu_child_check(disco_device_set(c->dev), "set device");
    int reps = 4 * bench_reps();
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        int64_t t0 = disco_now_ns();
        bu_child_check(disco_device_ipc_import(&ref, &ptr), "ipc_import (first)");
        int64_t t1 = disco_now_ns();
        bu_child_check(disco_device_ipc_release(&ref), "ipc_release (first)");
        if (r >= 0)
            first[r] = (double)(t1 - t0) / 1e3;
    }
    bu_child_check(disco_device_ipc_import(&ref, &held), "ipc_import (held)");
    for (int r = 0; r < reps; r++) {
        int64_t t0 = disco_now_ns();
        bu_child_check(disco_device_ipc_import(&ref, &ptr), "ipc_import (cached)");
        int64_t t1 = disco_now_ns();
        bu_child_check(disco_device_ipc_release(&ref), "ipc_release (cached)");
        cached[r] = (double)(t1 - t0) / 1e3;
    }
    bu_child_check(disco_device_ipc_release(&ref), "ipc_release (held)");
    double out[2] = {bu_median(first, reps), bu_median(cached, reps)};
    if (write(c->res_fd[1], out, sizeof out) != (ssize_t)sizeof out)
        return 1;
    return write(c->done_fd[1], "d", 1) == 1 ? 0 : 1;
}

void bench_gpu_ipc(DLDevice dev, double us_out[2])
{
    ipc_ctx_t c = {.dev = dev, .table_bytes = disco_device_ipc_footprint(4)};
    c.table_bytes = (c.table_bytes + 4095) & ~(size_t)4095;
    c.table = mmap(NULL, c.table_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c.table == MAP_FAILED || pipe(c.ref_fd) != 0 || pipe(c.done_fd) != 0 || pipe(c.res_fd) != 0)
        bu_die("bench_ipc: mmap or pipe failed");
    fflush(stdout);
    bu_spawn(ipc_exporter, &c);
    bu_spawn(ipc_importer, &c);
    /* only the children write: a child's death is then an EOF here */
    close(c.ref_fd[1]);
    close(c.done_fd[1]);
    close(c.res_fd[1]);
    ssize_t got = read(c.res_fd[0], us_out, 2 * sizeof *us_out);
    bu_reap_all();
    if (got != (ssize_t)(2 * sizeof *us_out))
        bu_die("bench_ipc: the importer sent no figures");
    close(c.ref_fd[0]);
    close(c.done_fd[0]);
    close(c.res_fd[0]);
    munmap(c.table, c.table_bytes);
}
