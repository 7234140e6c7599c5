/* cli_top_frame.c - a frame of "disco top": the figures of a session
 * between two views of it (cli_top.h), and the frame as a table.
 *
 * The status region counts as commands end: a worker adds its time busy
 * when a command finishes, and its time between commands when the next one
 * starts (workers/core/wstat.h). Over a short interval that would show a
 * worker deep in a long command, or parked the whole time, as doing
 * nothing; so a frame counts the command in progress as busy (its in_cmd_s)
 * and gives the interval's unaccounted rest to the state the worker is in
 * at its end (idle: spinning, parked: parked). The shares then add up to
 * 100 over the time the two views account for. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli_top.h"

const char *top_health(const disco_session_view_t *v)
{
    return v->health == DISCO_OK ? "ok" : disco_err_name(v->health);
}

/* Busy seconds including the command in progress; -1 unknown. */
static double busy_now(const disco_worker_view_t *w)
{
    if (w->busy_s < 0)
        return -1.0;
    return w->busy_s + (w->state == DISCO_WORKER_BUSY && w->in_cmd_s > 0 ? w->in_cmd_s : 0.0);
}

/* b - a, not below 0 (a counter that restarted counts from 0). */
static double grew(double a, double b)
{
    return b >= a ? b - a : b;
}

static void worker_figures(const disco_worker_view_t *p, const disco_worker_view_t *c, double dt,
                           bool tracing, top_worker_t *w)
{
    *w = (top_worker_t){
        .v = c, .cpu_pct = -1, .done_per_s = -1, .busy_pct = -1, .spin_pct = -1, .park_pct = -1};
    if (dt <= 0 || p == NULL)
        return;
    if (p->cpu_s >= 0 && c->cpu_s >= 0 && p->pid == c->pid)
        w->cpu_pct = 100.0 * grew(p->cpu_s, c->cpu_s) / dt;
    w->done_per_s = (double)(c->done >= p->done ? c->done - p->done : c->done) / dt;
    double b0 = busy_now(p), b1 = busy_now(c);
    if (!tracing || b0 < 0 || b1 < 0 || p->spin_s < 0 || c->spin_s < 0 || p->park_s < 0 ||
        c->park_s < 0)
        return;
    double b = grew(b0, b1), s = grew(p->spin_s, c->spin_s), k = grew(p->park_s, c->park_s);
    double rest = dt - (b + s + k);
    if (rest > 0 && c->state == DISCO_WORKER_IDLE)
        s += rest;
    else if (rest > 0 && c->state == DISCO_WORKER_PARKED)
        k += rest;
    double all = b + s + k;
    if (all <= 0)
        return;
    w->busy_pct = 100.0 * b / all;
    w->spin_pct = 100.0 * s / all;
    w->park_pct = 100.0 * k / all;
}

static const disco_func_view_t *find_func(const disco_session_view_t *v, const char *name)
{
    for (int i = 0; v != NULL && i < v->nfuncs; i++)
        if (strcmp(v->funcs[i].name, name) == 0)
            return &v->funcs[i];
    return NULL;
}

static void func_figures(const disco_func_view_t *p, const disco_func_view_t *c, double dt,
                         top_func_t *f)
{
    *f = (top_func_t){.v = c, .calls_per_s = -1, .mean_us = -1};
    uint64_t p_calls = p != NULL ? p->calls : 0;
    uint64_t calls = c->calls >= p_calls ? c->calls - p_calls : c->calls;
    double p_total = p != NULL ? p->total_s : 0.0;
    if (dt > 0)
        f->calls_per_s = (double)calls / dt;
    if (c->total_s < 0)
        return; /* tracing off */
    if (calls > 0 && p_total >= 0 && c->calls >= p_calls)
        f->mean_us = 1e6 * grew(p_total, c->total_s) / (double)calls;
    else if (c->calls > 0)
        f->mean_us = 1e6 * c->total_s / (double)c->calls;
}

void top_frame_make(const disco_session_view_t *prev, const disco_session_view_t *cur, int session,
                    top_worker_t *workers, top_frame_t *f)
{
    double dt = prev != NULL ? cur->at_s - prev->at_s : 0.0;
    bool same = prev != NULL && prev->world == cur->world && prev->pid == cur->pid;
    *f = (top_frame_t){.v = cur,
                       .session = session,
                       .interval_s = same ? dt : 0.0,
                       .issued_per_s = -1,
                       .workers = workers,
                       .nfuncs = cur->nfuncs};
    if (!same)
        dt = 0;
    if (dt > 0)
        f->issued_per_s = (double)grew((double)prev->issued, (double)cur->issued) / dt;
    for (int i = 0; i < cur->world; i++)
        worker_figures(same ? &prev->workers[i] : NULL, &cur->workers[i], dt, cur->tracing,
                       &workers[i]);
    for (int i = 0; i < cur->nfuncs; i++)
        func_figures(same ? find_func(prev, cur->funcs[i].name) : NULL, &cur->funcs[i], dt,
                     &f->funcs[i]);
}

/* ---- the table ---- */

/* A figure in a column of width w with p decimals, or "-" when unknown. */
static void col(FILE *out, double x, int w, int p)
{
    if (x < 0 || !isfinite(x))
        fprintf(out, " %*s", w, "-");
    else
        fprintf(out, " %*.*f", w, p, x);
}

/* A duration in a column of width w: "850 us", "12.3 ms", "4.2 s", "-". */
static void col_dur(FILE *out, double s, int w)
{
    char buf[32];
    if (s < 0)
        snprintf(buf, sizeof buf, "-");
    else if (s < 1e-5)
        snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
    else if (s < 1e-3)
        snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
    else if (s < 1.0)
        snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
    else
        snprintf(buf, sizeof buf, "%.1f s", s);
    fprintf(out, " %*s", w, buf);
}

static void wait_line(const disco_session_view_t *v, FILE *out)
{
    char d[32];
    if (v->wait_s >= 0 && v->wait_s < 1.0)
        snprintf(d, sizeof d, "%.1f ms", v->wait_s * 1e3);
    else
        snprintf(d, sizeof d, "%.1f s", v->wait_s);
    switch (v->wait) {
    case DISCO_VIEW_WAIT_NONE:
        fprintf(out, "controller: not waiting\n");
        break;
    case DISCO_VIEW_WAIT_ROOM:
        fprintf(out, "controller: waiting %s for room to broadcast #%llu\n", d,
                (unsigned long long)v->wait_seq);
        break;
    case DISCO_VIEW_WAIT_REPLY:
        fprintf(out, "controller: waiting %s for worker %d's reply to #%llu\n", d, v->wait_worker,
                (unsigned long long)v->wait_seq);
        break;
    case DISCO_VIEW_WAIT_COLLECTIVE:
        fprintf(out, "controller: worker 0 waiting %s for its peers in #%llu\n", d,
                (unsigned long long)v->wait_seq);
        break;
    }
}

int top_print_text(const top_frame_t *f, FILE *out)
{
    const disco_session_view_t *v = f->v;
    fprintf(out, "disco top - pid %d, session %d: %d workers, health %s", v->pid, f->session,
            v->world, top_health(v));
    if (v->health != DISCO_OK && v->why[0] != '\0')
        fprintf(out, " (%s)", v->why);
    fprintf(out, "\n%llu commands issued", (unsigned long long)v->issued);
    if (f->issued_per_s >= 0)
        fprintf(out, " (%.0f/s over %.2f s)", f->issued_per_s, f->interval_s);
    fprintf(out, ", tracing %s, watchdog ", v->tracing ? "on" : "off (times unknown)");
    if (v->watchdog_ms > 0)
        fprintf(out, "%u ms (%llu reports)\n", v->watchdog_ms,
                (unsigned long long)v->watchdog_reports);
    else
        fprintf(out, "off\n");
    wait_line(v, out);
    fprintf(out, "\n%6s %8s %6s %-8s %8s %-20s %9s %9s %9s %6s %5s %5s %5s\n", "WORKER", "PID",
            "CPU%", "STATE", "SEQ", "FUNCTION", "IN CMD", "DONE", "DONE/S", "QUEUED", "BUSY%",
            "SPIN%", "PARK%");
    for (int i = 0; i < v->world; i++) {
        const top_worker_t *w = &f->workers[i];
        const disco_worker_view_t *x = w->v;
        fprintf(out, "%6d %8d", x->worker, x->pid);
        col(out, w->cpu_pct, 6, 1);
        fprintf(out, " %-8s %8llu %-20.20s", disco_worker_state_name(x->state),
                (unsigned long long)x->seq, x->name[0] != '\0' ? x->name : "-");
        col_dur(out, x->state == DISCO_WORKER_BUSY ? x->in_cmd_s : -1.0, 9);
        fprintf(out, " %9llu", (unsigned long long)x->done);
        col(out, w->done_per_s, 9, 0);
        fprintf(out, " %6llu", (unsigned long long)x->queued);
        col(out, w->busy_pct, 5, 1);
        col(out, w->spin_pct, 5, 1);
        col(out, w->park_pct, 5, 1);
        fputc('\n', out);
    }
    /* Device collective kernels, where their pieces wait (disco/observe.h). */
    bool head = false;
    for (int i = 0; i < v->world; i++) {
        char line[1024];
        if (disco_kernel_view_format(f->workers[i].v, line, sizeof line) == 0)
            continue;
        if (!head)
            fprintf(out, "\nDEVICE KERNELS\n");
        head = true;
        fprintf(out, "%s\n", line);
    }
    fprintf(out, "\n%-32s %10s %9s %10s %7s\n", "FUNCTION", "CALLS", "CALLS/S", "MEAN", "WORKERS");
    for (int i = 0; i < f->nfuncs; i++) {
        const top_func_t *fn = &f->funcs[i];
        fprintf(out, "%-32.32s %10llu", fn->v->name, (unsigned long long)fn->v->calls);
        col(out, fn->calls_per_s, 9, 0);
        col_dur(out, fn->mean_us >= 0 ? fn->mean_us / 1e6 : -1.0, 10);
        fprintf(out, " %7d\n", fn->v->workers);
    }
    return ferror(out) ? -1 : 0;
}
