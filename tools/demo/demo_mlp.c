/* demo_mlp.c - disco-demo's main part: a tensor-parallel MLP block over N
 * workers, checked against the same block in one process, with per-step
 * latency split into compute and coordination, the placement plan, the
 * profiling summary and a Perfetto trace. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/demo/demo.h"
#include "tools/demo/demo_device.h"
#include "tools/demo/demo_mlp.h"
#include "disco/placement.h"
#include "disco/tensor.h"
#include "disco/trace.h"
#include "disco/shm/wait.h"

#define CHECK(call) DEMO_CHECK(call, goto out)

#define MAX_STEPS 1000
#define TOLERANCE 1e-4 /* float32, summed in another order: ~1e-6 expected */

static disco_value_t disco_dref(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.reg = r};
}

/* The whole block in this process: the reference. */
static void reference(const demo_mlp_opts_t *o, const float *x, float *y)
{
    int64_t dm = o->d_model, f = o->d_ff;
    float *h = malloc((size_t)f * sizeof *h);
    for (int64_t r = 0; r < o->batch; r++) {
        for (int64_t j = 0; j < f; j++) {
            double acc = 0;
            for (int64_t i = 0; i < dm; i++)
                acc += (double)x[r * dm + i] * demo_mlp_w1(o->seed, dm, f, i, j);
            h[j] = demo_mlp_gelu((float)acc);
        }
        for (int64_t i = 0; i < dm; i++) {
            double acc = 0;
            for (int64_t j = 0; j < f; j++)
                acc += (double)h[j] * demo_mlp_w2(o->seed, dm, f, j, i);
            y[r * dm + i] = (float)acc;
        }
    }
    free(h);
}

/* The longest worker slice of the command with sequence number seq. */
static double slowest_slice_us(const disco_trace_t *t, uint64_t seq)
{
    double most = 0;
    for (size_t i = 0; i < t->nslices; i++)
        if (t->slices[i].seq == seq && t->slices[i].end_us - t->slices[i].start_us > most)
            most = t->slices[i].end_us - t->slices[i].start_us;
    return most;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One step: x to worker 0, broadcast, partials, allreduce, y back. Returns
 * the sequence number of the partials' call through *seq_out. */
static disco_status_t step(disco_session_t *s, disco_dref_t f_part, disco_dref_t w1,
                           disco_dref_t w2, DLTensor *hx, DLTensor *hy)
{
    disco_dref_t xr, xb, part, y;
    disco_status_t st = disco_session_copy_to_worker0(s, hx, &xr);
    if (st != DISCO_OK)
        return st;
    disco_value_t a = disco_dref(xr);
    if ((st = disco_session_call_by_name(s, "disco.broadcast_from_worker0", &a, 1, &xb)) !=
        DISCO_OK)
        return st;
    disco_value_t p[3] = {disco_dref(xb), disco_dref(w1), disco_dref(w2)};
    if ((st = disco_session_call(s, f_part, p, 3, &part)) != DISCO_OK)
        return st;
    disco_value_t r[2] = {disco_dref(part), disco_value_str("sum")};
    if ((st = disco_session_call_by_name(s, "disco.allreduce", r, 2, &y)) != DISCO_OK)
        return st;
    /* worker 0 finished the allreduce, so y is complete; sync worker 0 to
     * hear of any worker's failure */
    if ((st = disco_session_copy_from_worker0(s, y, hy)) == DISCO_OK)
        st = disco_session_sync(s, 0);
    disco_session_free_reg(s, xr);
    disco_session_free_reg(s, xb);
    disco_session_free_reg(s, part);
    disco_session_free_reg(s, y);
    return st;
}

/* --json: the run's figures (microseconds; the error is relative). */
static void write_figures(const demo_mlp_opts_t *o, double step_us, double compute_us, double err)
{
    json_t *j = json_pack("{s:s, s:i, s:I, s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:b}",
                          "device", demo_device_name(o->device), "workers", o->workers, "batch",
                          (json_int_t)o->batch, "d_model", (json_int_t)o->d_model, "d_ff",
                          (json_int_t)o->d_ff, "steps", o->steps, "step_us", step_us, "compute_us",
                          compute_us, "coordination_us", step_us - compute_us, "coordination_pct",
                          step_us > 0 ? 100.0 * (step_us - compute_us) / step_us : 0.0,
                          "max_rel_err", err, "tolerance", TOLERANCE, "ok", err <= TOLERANCE);
    if (j == NULL || json_dump_file(j, o->json_path, JSON_INDENT(2)) != 0)
        printf("  could not write the figures to %s\n", o->json_path);
    json_decref(j);
}

bool demo_mlp(const demo_mlp_opts_t *o, const char *lib)
{
    bool ok = false;
    int n = o->workers, steps = o->steps < MAX_STEPS ? o->steps : MAX_STEPS;
    int64_t dm = o->d_model, shape[2] = {o->batch, o->d_model};
    size_t cells = (size_t)(o->batch * dm);
    float *x = malloc(cells * sizeof *x), *y = malloc(cells * sizeof *y),
          *ref = malloc(cells * sizeof *ref);
    double lat[MAX_STEPS], comp[MAX_STEPS], err = 0;
    disco_session_t *s = NULL;
    disco_trace_t *t = NULL;
    disco_trace_summary_t *sum = NULL;
    bool on_dev = o->device != kDLCPU;
    demo_dev_t dev = {0};
    const char *part_name = on_dev ? "demo.mlp_partial_into" : "demo.mlp_partial";
    printf("== tensor-parallel MLP: y = gelu(x W1) W2, x [%lld, %lld], W1 [%lld, %lld] split "
           "by columns, W2 by rows, over %d workers (%s), %d steps\n",
           (long long)o->batch, (long long)dm, (long long)dm, (long long)o->d_ff, n,
           o->device == kDLExtDev ? "tensors on sim devices: a test device, no GPU figures"
           : o->device == kDLCUDA ? "tensors on CUDA GPUs, computed on host copies"
                                  : "CPU",
           steps);
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.heap_bytes = 64u << 20;
    if (on_dev)
        cfg.device_arena_bytes = demo_dev_arena_bytes(o);
    /* CUDA: spawned workers (disco-worker beside this program), so that no
     * process forks after this one has touched CUDA. */
    if (o->device == kDLCUDA)
        cfg.launch = DISCO_LAUNCH_SPAWN;
    /* Worker 0 is this thread, pinned by default like the workers, so it
     * cannot land on worker 1's core (unpinned, on 2 cores, it can: the
     * partials then run one after the other and coordination reads ~50% of
     * a step in 1 run of 3). */
    CHECK(disco_session_open(&cfg, &s));
    disco_plan_print(disco_session_plan(s), stdout, false);
    disco_dref_t r, w1 = 0, w2 = 0, f_part = 0;
    disco_value_t path = disco_value_str(lib);
    CHECK(disco_session_call_by_name(s, "disco.load_library", &path, 1, &r));
    CHECK(disco_session_free_reg(s, r));
    if (on_dev) {
        CHECK(demo_dev_setup(s, o, &dev));
    } else {
        disco_value_t wa[4] = {disco_value_int((int64_t)o->seed), disco_value_int(dm),
                               disco_value_int(o->d_ff), disco_value_int(1)};
        CHECK(disco_session_call_by_name(s, "demo.mlp_weights", wa, 4, &w1));
        wa[3] = disco_value_int(2);
        CHECK(disco_session_call_by_name(s, "demo.mlp_weights", wa, 4, &w2));
        CHECK(disco_session_get_func(s, "demo.mlp_partial", &f_part));
    }
    for (int w = 0; w < n; w++)
        CHECK(disco_session_sync(s, w));

    DLTensor hx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = shape};
    DLTensor hy = hx;
    hy.data = y;
    for (int k = -1; k < steps; k++) { /* step -1 warms up */
        for (size_t i = 0; i < cells; i++)
            x[i] = demo_mlp_value(o->seed + (uint64_t)(k + 1), 3, i);
        int64_t t0 = disco_now_ns();
        if (on_dev)
            CHECK(demo_dev_step(s, &dev, &hx, &hy));
        else
            CHECK(step(s, f_part, w1, w2, &hx, &hy));
        if (k < 0)
            continue;
        lat[k] = (double)(disco_now_ns() - t0) / 1e3;
        reference(o, x, ref);
        double dmax = 0, rmax = 0;
        for (size_t i = 0; i < cells; i++) {
            dmax = fmax(dmax, fabs((double)y[i] - ref[i]));
            rmax = fmax(rmax, fabs((double)ref[i]));
        }
        err = fmax(err, rmax > 0 ? dmax / rmax : dmax);
    }
    CHECK(disco_session_trace(s, &t));
    /* the partials' calls, in order: the last `steps` slices of that name
     * on worker 0 */
    int found = 0;
    for (size_t i = t->nslices; i-- > 0 && found < steps;)
        if (t->slices[i].worker == 0 && strcmp(t->slices[i].name, part_name) == 0)
            comp[steps - 1 - found++] = slowest_slice_us(t, t->slices[i].seq);
    double lat_sorted[MAX_STEPS], comp_sorted[MAX_STEPS];
    memcpy(lat_sorted, lat, (size_t)steps * sizeof *lat);
    memcpy(comp_sorted, comp, (size_t)steps * sizeof *comp);
    qsort(lat_sorted, (size_t)steps, sizeof *lat, cmp);
    qsort(comp_sorted, (size_t)found, sizeof *comp, cmp);
    double med = lat_sorted[steps / 2], cmed = found ? comp_sorted[found / 2] : 0;
    printf("per step (median of %d): %.1f us = compute %.1f us (slowest worker's partial) + "
           "coordination %.1f us (%.0f%%: copy in, broadcast, allreduce, copy out, sync)\n",
           steps, med, cmed, med - cmed, med > 0 ? 100.0 * (med - cmed) / med : 0);
    printf("result against one process: max relative error %.2e (tolerance %.0e) %s\n", err,
           TOLERANCE, err <= TOLERANCE ? "OK" : "WRONG");
    if (o->json_path != NULL)
        write_figures(o, med, cmed, err);
    CHECK(disco_trace_summarize(t, &sum));
    disco_trace_summary_print(sum, stdout, false);
    if (o->trace_path != NULL) {
        FILE *f = fopen(o->trace_path, "w");
        if (f == NULL || disco_trace_write_json(t, f) != DISCO_OK)
            printf("  could not write the trace to %s\n", o->trace_path);
        else
            printf("trace: %s (open it in ui.perfetto.dev; summarize with: disco trace %s)\n",
                   o->trace_path, o->trace_path);
        if (f != NULL)
            fclose(f);
    }
    ok = err <= TOLERANCE;
out:
    if (on_dev && s != NULL)
        demo_dev_free(s, &dev);
    disco_trace_summary_free(sum);
    disco_trace_free(t);
    disco_session_close(s);
    free(x);
    free(y);
    free(ref);
    return ok;
}
