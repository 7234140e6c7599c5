/* cli_top_print.c - a frame of "disco top" for scripts: one JSON object a
 * frame (written with jansson), or the Prometheus text exposition format
 * (version 0.0.4: "# HELP", "# TYPE", then `name{labels} value` lines).
 * Unknown figures are JSON null and absent from the Prometheus samples. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli_top.h"

/* ---- JSON ---- */

/* x, or null when unknown (negative). */
static json_t *num(double x)
{
    return x >= 0 && isfinite(x) ? json_real(x) : json_null();
}

static const char *wait_name(disco_view_wait_t w)
{
    switch (w) {
    case DISCO_VIEW_WAIT_NONE:
        return "none";
    case DISCO_VIEW_WAIT_ROOM:
        return "room";
    case DISCO_VIEW_WAIT_REPLY:
        return "reply";
    case DISCO_VIEW_WAIT_COLLECTIVE:
        return "collective";
    }
    return "?";
}

/* A worker's device kernel: null when it is in none. */
static json_t *json_kernel(const disco_worker_view_t *x)
{
    const disco_kernel_view_t *k = &x->kernel;
    if (!k->active)
        return json_null();
    static const char *const states[] = {"quiet", "waiting", "passed"};
    json_t *pieces = json_array();
    for (int b = 0; b < k->pieces && b < DISCO_VIEW_PIECES; b++) {
        const disco_piece_view_t *p = &k->piece[b];
        bool quiet = p->state == DISCO_PIECE_QUIET;
        json_array_append_new(
            pieces, json_pack("{s:i, s:s, s:o, s:o, s:o}", "piece", b, "state",
                              (unsigned)p->state < 3 ? states[p->state] : "?", "phase",
                              quiet ? json_null() : json_string(disco_kernel_phase_name(p->phase)),
                              "member", quiet ? json_null() : json_integer(p->member), "flag_coll",
                              p->flag_set ? json_integer((json_int_t)p->flag_coll) : json_null()));
    }
    char line[1024];
    disco_kernel_view_format(x, line, sizeof line);
    return json_pack("{s:s, s:I, s:s, s:i, s:i, s:o, s:s}", "what", k->what, "coll",
                     (json_int_t)k->coll, "mode", k->two_shot ? "two-shot" : "one-shot", "rank",
                     k->rank, "size", k->size, "pieces", pieces, "text", line);
}

static json_t *json_worker(const top_worker_t *w)
{
    const disco_worker_view_t *x = w->v;
    return json_pack("{s:i, s:i, s:o, s:s, s:I, s:o, s:o, s:I, s:o, s:I, s:o, s:o, s:o, s:o, s:o}",
                     "worker", x->worker, "pid", x->pid, "cpu_pct", num(w->cpu_pct), "state",
                     disco_worker_state_name(x->state), "seq", (json_int_t)x->seq, "function",
                     x->name[0] != '\0' ? json_string(x->name) : json_null(), "in_cmd_s",
                     num(x->state == DISCO_WORKER_BUSY ? x->in_cmd_s : -1.0), "done",
                     (json_int_t)x->done, "done_per_s", num(w->done_per_s), "queued",
                     (json_int_t)x->queued, "busy_pct", num(w->busy_pct), "spin_pct",
                     num(w->spin_pct), "park_pct", num(w->park_pct), "cpu_s", num(x->cpu_s),
                     "kernel", json_kernel(x));
}

static json_t *json_frame(const top_frame_t *f)
{
    const disco_session_view_t *v = f->v;
    json_t *workers = json_array(), *funcs = json_array();
    for (int i = 0; i < v->world; i++)
        json_array_append_new(workers, json_worker(&f->workers[i]));
    for (int i = 0; i < f->nfuncs; i++) {
        const top_func_t *fn = &f->funcs[i];
        json_array_append_new(funcs,
                              json_pack("{s:s, s:I, s:o, s:o, s:o, s:i}", "name", fn->v->name,
                                        "calls", (json_int_t)fn->v->calls, "calls_per_s",
                                        num(fn->calls_per_s), "mean_us", num(fn->mean_us),
                                        "total_s", num(fn->v->total_s), "workers", fn->v->workers));
    }
    json_t *wait = json_pack(
        "{s:s, s:o, s:o, s:o}", "what", wait_name(v->wait), "worker",
        v->wait == DISCO_VIEW_WAIT_REPLY ? json_integer(v->wait_worker) : json_null(), "seq",
        v->wait != DISCO_VIEW_WAIT_NONE ? json_integer((json_int_t)v->wait_seq) : json_null(),
        "seconds", num(v->wait != DISCO_VIEW_WAIT_NONE ? v->wait_s : -1.0));
    return json_pack(
        "{s:i, s:i, s:i, s:s, s:o, s:I, s:o, s:b, s:f, s:f, s:I, s:i, s:o, s:o, "
        "s:o}",
        "pid", v->pid, "session", f->session, "world", v->world, "health", top_health(v), "why",
        v->health != DISCO_OK && v->why[0] != '\0' ? json_string(v->why) : json_null(), "issued",
        (json_int_t)v->issued, "issued_per_s", num(f->issued_per_s), "tracing", v->tracing, "at_s",
        v->at_s, "interval_s", f->interval_s, "watchdog_reports", (json_int_t)v->watchdog_reports,
        "watchdog_ms", (int)v->watchdog_ms, "wait", wait, "workers", workers, "functions", funcs);
}

int top_print_json(const top_frame_t *f, FILE *out)
{
    json_t *j = json_frame(f);
    if (j == NULL)
        return -1;
    int rc = json_dumpf(j, out, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (rc == 0 && fputc('\n', out) == EOF)
        rc = -1;
    return rc;
}

/* ---- Prometheus ---- */

/* A label value with \, " and newline escaped, as the format asks. */
static void label(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', out), fputc(*s, out);
        else if (*s == '\n')
            fputs("\\n", out);
        else
            fputc(*s, out);
    }
    fputc('"', out);
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample of name for the session (and worker, when worker >= 0), or
 * nothing when x is unknown. */
static void sample(FILE *out, const top_frame_t *f, const char *name, int worker, double x)
{
    if (x < 0 || !isfinite(x))
        return;
    fprintf(out, "%s{pid=\"%d\",session=\"%d\"", name, f->v->pid, f->session);
    if (worker >= 0)
        fprintf(out, ",worker=\"%d\"", worker);
    fprintf(out, "} %.10g\n", x);
}

/* A per-worker family: one sample a worker of get(w). */
static void per_worker(FILE *out, const top_frame_t *f, const char *name, const char *type,
                       const char *help, double (*get)(const top_worker_t *))
{
    family(out, name, type, help);
    for (int i = 0; i < f->v->world; i++)
        sample(out, f, name, f->workers[i].v->worker, get(&f->workers[i]));
}

static double w_cpu_s(const top_worker_t *w)
{
    return w->v->cpu_s;
}
static double w_cpu_pct(const top_worker_t *w)
{
    return w->cpu_pct;
}
static double w_done(const top_worker_t *w)
{
    return (double)w->v->done;
}
static double w_done_rate(const top_worker_t *w)
{
    return w->done_per_s;
}
static double w_queued(const top_worker_t *w)
{
    return (double)w->v->queued;
}
static double w_in_cmd(const top_worker_t *w)
{
    return w->v->state == DISCO_WORKER_BUSY ? w->v->in_cmd_s : -1.0;
}
static double w_busy_s(const top_worker_t *w)
{
    return w->v->busy_s;
}
static double w_spin_s(const top_worker_t *w)
{
    return w->v->spin_s;
}
static double w_park_s(const top_worker_t *w)
{
    return w->v->park_s;
}
static double w_busy_pct(const top_worker_t *w)
{
    return w->busy_pct;
}
static double w_spin_pct(const top_worker_t *w)
{
    return w->spin_pct;
}
static double w_park_pct(const top_worker_t *w)
{
    return w->park_pct;
}

static void worker_states(FILE *out, const top_frame_t *f)
{
    static const disco_worker_state_t states[] = {DISCO_WORKER_STARTING, DISCO_WORKER_BUSY,
                                                  DISCO_WORKER_IDLE, DISCO_WORKER_PARKED,
                                                  DISCO_WORKER_EXITED};
    family(out, "disco_worker_state", "gauge", "1 for the state the worker is in, else 0.");
    for (int i = 0; i < f->v->world; i++)
        for (size_t k = 0; k < sizeof states / sizeof states[0]; k++)
            fprintf(out,
                    "disco_worker_state{pid=\"%d\",session=\"%d\",worker=\"%d\",state=\"%s\"} %d\n",
                    f->v->pid, f->session, f->workers[i].v->worker,
                    disco_worker_state_name(states[k]), f->workers[i].v->state == states[k]);
}

/* A per-function family: one sample a function of get(fn), if known. */
static void per_func(FILE *out, const top_frame_t *f, const char *name, const char *type,
                     const char *help, int what)
{
    family(out, name, type, help);
    for (int i = 0; i < f->nfuncs; i++) {
        const top_func_t *fn = &f->funcs[i];
        double x = what == 0   ? (double)fn->v->calls
                   : what == 1 ? fn->v->total_s
                   : what == 2 ? fn->calls_per_s
                               : (fn->mean_us >= 0 ? fn->mean_us / 1e6 : -1.0);
        if (x < 0 || !isfinite(x))
            continue;
        fprintf(out, "%s{pid=\"%d\",session=\"%d\",function=", name, f->v->pid, f->session);
        label(out, fn->v->name);
        fprintf(out, "} %.10g\n", x);
    }
}

int top_print_prometheus(const top_frame_t *f, FILE *out)
{
    const disco_session_view_t *v = f->v;
    family(out, "disco_session_up", "gauge", "1 while the session is healthy, else 0.");
    sample(out, f, "disco_session_up", -1, v->health == DISCO_OK);
    family(out, "disco_session_workers", "gauge", "Workers of the session on this node.");
    sample(out, f, "disco_session_workers", -1, v->world);
    family(out, "disco_session_commands_issued_total", "counter", "Commands broadcast.");
    sample(out, f, "disco_session_commands_issued_total", -1, (double)v->issued);
    family(out, "disco_session_wait_seconds", "gauge",
           "How long the controller has waited, while it waits.");
    sample(out, f, "disco_session_wait_seconds", -1,
           v->wait != DISCO_VIEW_WAIT_NONE ? v->wait_s : -1);
    family(out, "disco_session_watchdog_reports_total", "counter", "Watchdog reports written.");
    sample(out, f, "disco_session_watchdog_reports_total", -1, (double)v->watchdog_reports);
    worker_states(out, f);
    per_worker(out, f, "disco_worker_cpu_seconds_total", "counter",
               "CPU time of the worker's process (user + system).", w_cpu_s);
    per_worker(out, f, "disco_worker_cpu_percent", "gauge",
               "CPU over the last interval, percent of one core.", w_cpu_pct);
    per_worker(out, f, "disco_worker_commands_total", "counter", "Commands finished.", w_done);
    per_worker(out, f, "disco_worker_commands_per_second", "gauge",
               "Commands finished per second over the last interval.", w_done_rate);
    per_worker(out, f, "disco_worker_queued_commands", "gauge",
               "Commands broadcast but not started.", w_queued);
    per_worker(out, f, "disco_worker_command_seconds", "gauge",
               "Time inside the current command, while busy.", w_in_cmd);
    per_worker(out, f, "disco_worker_busy_seconds_total", "counter", "Time inside commands.",
               w_busy_s);
    per_worker(out, f, "disco_worker_spin_seconds_total", "counter",
               "Time waiting for a command, spinning.", w_spin_s);
    per_worker(out, f, "disco_worker_park_seconds_total", "counter",
               "Time waiting for a command, asleep.", w_park_s);
    per_worker(out, f, "disco_worker_busy_percent", "gauge", "Share of the last interval busy.",
               w_busy_pct);
    per_worker(out, f, "disco_worker_spin_percent", "gauge", "Share of the last interval spinning.",
               w_spin_pct);
    per_worker(out, f, "disco_worker_park_percent", "gauge", "Share of the last interval parked.",
               w_park_pct);
    per_func(out, f, "disco_function_calls_total", "counter",
             "Calls finished, summed over the workers.", 0);
    per_func(out, f, "disco_function_seconds_total", "counter",
             "Time inside the function, summed over the workers.", 1);
    per_func(out, f, "disco_function_calls_per_second", "gauge",
             "Calls per second over the last interval.", 2);
    per_func(out, f, "disco_function_mean_seconds", "gauge",
             "Mean time of a call over the last interval.", 3);
    return ferror(out) ? -1 : 0;
}
