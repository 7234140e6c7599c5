/* cli_top.h - "disco top": one frame, the figures of a session between two
 * views taken an interval apart (cli_top.c makes it, cli_top_print.c
 * prints it as a table, JSON or the Prometheus text format). Built on the
 * public disco/observe.h only.
 *
 * Unknown values are negative (-1): a time with tracing off, a CPU time
 * that /proc would not give, a rate with no earlier view. The table prints
 * them as "-", JSON as null, Prometheus leaves the sample out. */
#ifndef DISCO_TOOLS_CLI_TOP_H
#define DISCO_TOOLS_CLI_TOP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "disco/observe.h"

typedef struct top_worker {
    const disco_worker_view_t *v; /* the later view's worker */
    double cpu_pct;               /* CPU over the interval, % of one core */
    double done_per_s;
    double busy_pct, spin_pct, park_pct; /* shares of the interval, sum 100 */
} top_worker_t;

typedef struct top_func {
    const disco_func_view_t *v; /* the later view's function */
    double calls_per_s;
    double mean_us; /* over the interval's calls, else since open */
} top_func_t;

typedef struct top_frame {
    const disco_session_view_t *v; /* the later view */
    int session;                   /* its index in the process (--session) */
    double interval_s;             /* between the two views */
    double issued_per_s;
    top_worker_t *workers; /* [v->world] */
    int nfuncs;
    top_func_t funcs[DISCO_VIEW_FUNCS];
} top_frame_t;

/** The frame of cur against prev (taken interval_s earlier, same session);
 *  workers points into caller storage of cur->world entries. */
void top_frame_make(const disco_session_view_t *prev, const disco_session_view_t *cur, int session,
                    top_worker_t *workers, top_frame_t *f);

/** The health's name: "ok", or the status's name ("DISCO_E_SHUTDOWN"). */
const char *top_health(const disco_session_view_t *v);

/** Prints f as a table for people. Returns 0, or -1 when a write failed. */
int top_print_text(const top_frame_t *f, FILE *out);

/** Prints f as one JSON object on one line (jansson). Returns 0, or -1. */
int top_print_json(const top_frame_t *f, FILE *out);

/** Prints f in the Prometheus text exposition format. Returns 0, or -1. */
int top_print_prometheus(const top_frame_t *f, FILE *out);

#endif
