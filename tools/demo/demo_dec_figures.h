/* demo_dec_figures.h - the decoder's figures (demo_dec_figures.c): per
 * token latency, its compute and coordination from the trace, commands per
 * token and the in-worker allreduces, for each of the two forms of a step
 * (demo_decoder.c): the one-command form (demo.dec_step, every layer and
 * its allreduces inside one call_sync_all) and the controller-driven form
 * (a command per function call and per allreduce). */
#ifndef DISCO_TOOLS_DEMO_DEC_FIGURES_H
#define DISCO_TOOLS_DEMO_DEC_FIGURES_H

#include <stdbool.h>

#include "disco/trace.h"
#include "tools/demo/demo.h"

#define DEMO_DEC_MAX_STEPS 512

/* The two forms of a decode step. */
typedef enum { DEMO_FORM_ONE_COMMAND, DEMO_FORM_CONTROLLER } demo_form_t;

/** The form's name: "one-command" or "controller-driven". */
const char *demo_form_name(demo_form_t form);

typedef struct demo_dec_figures {
    double token_us, token_p99_us, compute_us, coord_us, tokens_per_s;
    double coord_pct;          /* median coordination / median token latency */
    double coord_share;        /* sum of coordination / sum of latency: tails included */
    double commands_per_token; /* median, from the trace; < 0: unknown */
    double ctx_allreduce_us;   /* median in-worker allreduce (one-command form); < 0: none */
    int timed;                 /* steps the trace held whole */
} demo_dec_figures_t;

/** The figures of form's last n steps (n <= DEMO_DEC_MAX_STEPS), lat their
 *  latencies (us), from trace t. Pure. */
void demo_dec_figures(const disco_trace_t *t, demo_form_t form, const double *lat, int n,
                      demo_dec_figures_t *f);

/** Prints f of form (the main form's lines as docs/getting-started.md
 *  shows them). */
void demo_dec_figures_print(const demo_dec_opts_t *o, demo_form_t form, const demo_dec_figures_t *f,
                            int n);

/** The median of an in-worker allreduce in t: per allreduce (its members
 *  matched by command, index and group), from the last member's call to
 *  the last member's return; -1 when t has none. Pure. */
double demo_dec_ctx_allreduce_us(const disco_trace_t *t);

#endif
