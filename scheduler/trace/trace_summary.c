/* trace_summary.c - what a trace says about scheduling (see disco/trace.h):
 * per worker busy % and queue delay, per function count and time, and the
 * straggler of each step between two syncs. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "disco/trace.h"

#define CMD_SYNC 4u

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n) (nearest rank). */
static double quantile(const double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)ceil(q * (double)n);
    return v[k == 0 ? 0 : k - 1];
}

static disco_status_t per_worker(const disco_trace_t *t, disco_trace_summary_t *s)
{
    double *delays = malloc((t->nslices ? t->nslices : 1) * sizeof *delays);
    if (delays == NULL)
        return disco_set_error(DISCO_E_NOMEM, "summary");
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < t->nslices; i++) {
        lo = fmin(lo, t->slices[i].start_us);
        hi = fmax(hi, t->slices[i].end_us);
    }
    s->span_us = t->nslices ? hi - lo : 0;
    for (int w = 0; w < t->world; w++) {
        disco_trace_worker_stats_t *ws = &s->worker[w];
        size_t n = 0;
        for (size_t i = 0; i < t->nslices; i++) {
            const disco_trace_slice_t *sl = &t->slices[i];
            if (sl->worker != w)
                continue;
            ws->busy_us += sl->end_us - sl->start_us;
            delays[n++] = sl->start_us - sl->enqueue_us;
        }
        ws->commands = n;
        ws->busy_pct = s->span_us > 0 ? 100.0 * ws->busy_us / s->span_us : 0;
        qsort(delays, n, sizeof *delays, cmp_double);
        ws->queue_p50_us = quantile(delays, n, 0.50);
        ws->queue_p99_us = quantile(delays, n, 0.99);
    }
    free(delays);
    return DISCO_OK;
}

static int cmp_func(const void *a, const void *b)
{
    const disco_trace_func_stats_t *x = a, *y = b;
    return (x->total_us < y->total_us) - (x->total_us > y->total_us);
}

static disco_status_t per_func(const disco_trace_t *t, disco_trace_summary_t *s)
{
    s->func = calloc(t->nslices ? t->nslices : 1, sizeof *s->func);
    if (s->func == NULL)
        return disco_set_error(DISCO_E_NOMEM, "summary");
    for (size_t i = 0; i < t->nslices; i++) {
        const disco_trace_slice_t *sl = &t->slices[i];
        size_t f = 0;
        while (f < s->nfuncs && strcmp(s->func[f].name, sl->name) != 0)
            f++;
        if (f == s->nfuncs)
            memcpy(s->func[s->nfuncs++].name, sl->name, sizeof sl->name);
        double d = sl->end_us - sl->start_us;
        s->func[f].total_us += d;
        s->func[f].max_us = fmax(s->func[f].max_us, d);
        s->func[f].mean_us += 1; /* slices, for now */
        if (sl->worker == 0 || t->world == 0)
            s->func[f].count++;
    }
    for (size_t f = 0; f < s->nfuncs; f++) {
        double slices = s->func[f].mean_us;
        s->func[f].mean_us = slices > 0 ? s->func[f].total_us / slices : 0;
        if (s->func[f].count == 0) /* worker 0's records were lost: count another's */
            s->func[f].count = (size_t)(slices / t->world);
    }
    qsort(s->func, s->nfuncs, sizeof *s->func, cmp_func);
    return DISCO_OK;
}

/* A step is the commands after one sync up to the next; the worker that
 * finished its part last held that sync back. */
static void per_step(const disco_trace_t *t, disco_trace_summary_t *s, double *finish)
{
    uint64_t prev = 0;
    s->worst_step_worker = -1;
    for (size_t c = 0; c < t->ncmds; c++) {
        if (t->cmds[c].cmd != CMD_SYNC)
            continue;
        uint64_t sync = t->cmds[c].seq;
        for (int w = 0; w < t->world; w++)
            finish[w] = -INFINITY;
        for (size_t i = 0; i < t->nslices; i++) {
            const disco_trace_slice_t *sl = &t->slices[i];
            if (sl->seq > prev && sl->seq < sync)
                finish[sl->worker] = fmax(finish[sl->worker], sl->end_us);
        }
        prev = sync;
        int last = -1;
        double first = INFINITY;
        for (int w = 0; w < t->world; w++) {
            if (finish[w] == -INFINITY)
                continue;
            first = fmin(first, finish[w]);
            if (last < 0 || finish[w] > finish[last])
                last = w;
        }
        if (last < 0)
            continue; /* nothing ran in this step */
        s->steps++;
        s->worker[last].straggler_steps++;
        if (finish[last] - first > s->worst_step_lag_us || s->worst_step_worker < 0) {
            s->worst_step_lag_us = finish[last] - first;
            s->worst_step_worker = last;
            s->worst_step_sync_seq = sync;
        }
    }
}

disco_status_t disco_trace_summarize(const disco_trace_t *t, disco_trace_summary_t **out)
{
    disco_trace_summary_t *s = calloc(1, sizeof *s);
    double *finish = calloc((size_t)(t->world > 0 ? t->world : 1), sizeof *finish);
    if (s != NULL)
        s->worker = calloc((size_t)(t->world > 0 ? t->world : 1), sizeof *s->worker);
    disco_status_t st =
        s && s->worker && finish ? DISCO_OK : disco_set_error(DISCO_E_NOMEM, "summary");
    if (st == DISCO_OK) {
        s->world = t->world;
        s->commands = t->ncmds;
        st = per_worker(t, s);
    }
    if (st == DISCO_OK)
        st = per_func(t, s);
    if (st == DISCO_OK)
        per_step(t, s, finish);
    free(finish);
    if (st != DISCO_OK) {
        disco_trace_summary_free(s);
        return st;
    }
    *out = s;
    return DISCO_OK;
}

void disco_trace_summary_free(disco_trace_summary_t *s)
{
    if (s == NULL)
        return;
    free(s->worker);
    free(s->func);
    free(s);
}

static disco_status_t print_json(const disco_trace_summary_t *s, FILE *out)
{
    json_t *workers = json_array(), *funcs = json_array();
    for (int w = 0; w < s->world; w++) {
        const disco_trace_worker_stats_t *ws = &s->worker[w];
        json_array_append_new(workers,
                              json_pack("{s:i, s:I, s:f, s:f, s:f, s:f, s:I}", "worker", w,
                                        "commands", (json_int_t)ws->commands, "busy_us",
                                        ws->busy_us, "busy_pct", ws->busy_pct, "queue_p50_us",
                                        ws->queue_p50_us, "queue_p99_us", ws->queue_p99_us,
                                        "straggler_steps", (json_int_t)ws->straggler_steps));
    }
    for (size_t f = 0; f < s->nfuncs; f++)
        json_array_append_new(funcs, json_pack("{s:s, s:I, s:f, s:f, s:f}", "name", s->func[f].name,
                                               "count", (json_int_t)s->func[f].count, "total_us",
                                               s->func[f].total_us, "mean_us", s->func[f].mean_us,
                                               "max_us", s->func[f].max_us));
    json_t *doc = json_pack("{s:i, s:f, s:I, s:I, s:o, s:o, s:{s:I, s:i, s:f}}", "workers",
                            s->world, "span_us", s->span_us, "commands", (json_int_t)s->commands,
                            "steps", (json_int_t)s->steps, "per_worker", workers, "per_function",
                            funcs, "worst_step", "sync_seq", (json_int_t)s->worst_step_sync_seq,
                            "straggler", s->worst_step_worker, "lag_us", s->worst_step_lag_us);
    int rc = doc ? json_dumpf(doc, out, JSON_INDENT(2)) : -1;
    json_decref(doc);
    if (rc != 0 || fputc('\n', out) == EOF)
        return disco_set_error(DISCO_E_SYS, "writing the summary failed");
    return DISCO_OK;
}

disco_status_t disco_trace_summary_print(const disco_trace_summary_t *s, FILE *out, bool json)
{
    if (json)
        return print_json(s, out);
    fprintf(out,
            "trace: %d workers, %zu commands, %zu steps, %.1f us from first start to last end\n",
            s->world, s->commands, s->steps, s->span_us);
    fprintf(out, "  %-7s %9s %9s %8s %12s %12s %10s\n", "worker", "commands", "busy us", "busy %",
            "queue p50 us", "queue p99 us", "straggler");
    for (int w = 0; w < s->world; w++) {
        const disco_trace_worker_stats_t *ws = &s->worker[w];
        fprintf(out, "  %-7d %9zu %9.1f %8.1f %12.2f %12.2f %10zu\n", w, ws->commands, ws->busy_us,
                ws->busy_pct, ws->queue_p50_us, ws->queue_p99_us, ws->straggler_steps);
    }
    int wide = 24; /* the function column fits the longest name */
    for (size_t f = 0; f < s->nfuncs; f++) {
        size_t n = strlen(s->func[f].name);
        if (n > (size_t)wide)
            wide = n < 200 ? (int)n : 200;
    }
    fprintf(out, "  %-*s %8s %12s %10s %10s\n", wide, "function", "count", "total us", "mean us",
            "max us");
    for (size_t f = 0; f < s->nfuncs; f++)
        fprintf(out, "  %-*s %8zu %12.1f %10.2f %10.2f\n", wide, s->func[f].name, s->func[f].count,
                s->func[f].total_us, s->func[f].mean_us, s->func[f].max_us);
    if (s->worst_step_worker >= 0)
        fprintf(out,
                "  slowest step: the one ending at sync #%llu, held back by worker %d, %.1f us "
                "behind the first to finish\n",
                (unsigned long long)s->worst_step_sync_seq, s->worst_step_worker,
                s->worst_step_lag_us);
    return ferror(out) ? disco_set_error(DISCO_E_SYS, "writing the summary failed") : DISCO_OK;
}
