/* demo_dec_figures.c - the decoder's figures from its latencies and the
 * session's trace (demo_dec_figures.h).
 *
 * Compute and coordination. A token's latency is split into compute, the
 * time the slowest worker spent in the model's own work, and coordination,
 * the rest (commands, the allreduces and their waits for the slowest,
 * frees, the logits' copy out, syncs):
 *   - controller-driven form: per step, the sum over its compute calls
 *     (embed, attention and MLP partials, head; a step starts at its
 *     embed) of the slowest worker's slice;
 *   - one-command form: the step is one slice a worker, cut by its
 *     in-worker collectives (nested slices, disco_trace_coll_t) into
 *     phases: before the first, between two, after the last. Per phase the
 *     slowest worker's time, summed: the same measure as the other form's
 *     (the phases are its compute calls), so the two coordinations compare. */
#include "tools/demo/demo_dec_figures.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEP_ONE "demo.dec_step"
#define STEP_CTL "demo.dec_embed"

const char *demo_form_name(demo_form_t form)
{
    return form == DEMO_FORM_ONE_COMMAND ? "one-command" : "controller-driven";
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n values (sorted copy; nearest rank); 0 for
 * none. */
static double quantile(const double *v, int n, double q)
{
    double *s = n > 0 ? malloc((size_t)n * sizeof *s) : NULL;
    if (s == NULL)
        return 0;
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp);
    int k = (int)ceil(q * n) - 1;
    double r = s[k < 0 ? 0 : k >= n ? n - 1 : k];
    free(s);
    return r;
}

static bool is_compute(const char *name)
{
    return strcmp(name, "demo.dec_embed") == 0 || strcmp(name, "demo.dec_attn") == 0 ||
           strcmp(name, "demo.dec_mlp") == 0 || strcmp(name, "demo.dec_head") == 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Compute of the controller-driven form's last n steps (see the top).
 * Returns how many of the n steps the trace holds whole (their figures at
 * the end of comp). */
static int compute_ctl(const disco_trace_t *t, int n, double *comp)
{
    size_t nc = 0;
    uint64_t *seq = malloc((t->nslices + 1) * sizeof *seq);
    int *stp = malloc((t->nslices + 1) * sizeof *stp);
    double *most = calloc(t->nslices + 1, sizeof *most);
    int steps = 0;
    if (seq == NULL || stp == NULL || most == NULL)
        goto done;
    for (size_t i = 0; i < t->nslices; i++) { /* worker 0's, in order */
        const disco_trace_slice_t *sl = &t->slices[i];
        if (sl->worker != 0 || !is_compute(sl->name))
            continue;
        if (strcmp(sl->name, STEP_CTL) == 0)
            steps++;
        if (steps > 0) /* a step cut by the ring's wrap-around is skipped */
            seq[nc] = sl->seq, stp[nc++] = steps - 1;
    }
    for (size_t i = 0; i < t->nslices; i++) { /* every worker's slowest */
        const disco_trace_slice_t *sl = &t->slices[i];
        uint64_t *at = bsearch(&sl->seq, seq, nc, sizeof *seq, cmp_u64);
        if (at != NULL && sl->end_us - sl->start_us > most[at - seq])
            most[at - seq] = sl->end_us - sl->start_us;
    }
    int have = steps < n ? steps : n;
    for (int k = 0; k < have; k++)
        comp[n - have + k] = 0;
    for (size_t i = 0; i < nc; i++)
        if (stp[i] >= steps - have)
            comp[n - have + stp[i] - (steps - have)] += most[i];
    steps = have;
done:
    free(seq);
    free(stp);
    free(most);
    return steps;
}

/* Compute of the one-command step seq (see the top): phases[w * (k + 1) +
 * p] is worker w's time in phase p of k + 1. Returns false when a worker's
 * slice or one of its collectives is missing (the ring wrapped). */
static bool compute_one_step(const disco_trace_t *t, uint64_t seq, double *out)
{
    int world = t->world, k = 0;
    for (size_t i = 0; i < t->ncolls; i++)
        if (t->colls[i].seq == seq && t->colls[i].worker == 0 && t->colls[i].peer < 0 &&
            (int)t->colls[i].index + 1 > k) /* collectives only: a send's index is its ticket */
            k = (int)t->colls[i].index + 1;
    double *b = malloc((size_t)world * (size_t)(k + 1) * 2 * sizeof *b); /* phase begin, end */
    if (b == NULL)
        return false;
    for (int i = 0; i < world * (k + 1) * 2; i++)
        b[i] = NAN;
    for (size_t i = 0; i < t->nslices; i++) { /* the step's own slice: phase 0's begin, k's end */
        const disco_trace_slice_t *sl = &t->slices[i];
        if (sl->seq == seq && sl->worker >= 0 && sl->worker < world) {
            b[(sl->worker * (k + 1)) * 2] = sl->start_us;
            b[(sl->worker * (k + 1) + k) * 2 + 1] = sl->end_us;
        }
    }
    for (size_t i = 0; i < t->ncolls; i++) { /* collective j ends phase j, begins phase j + 1 */
        const disco_trace_coll_t *c = &t->colls[i];
        if (c->seq != seq || c->peer >= 0 || c->worker < 0 || c->worker >= world ||
            (int)c->index >= k)
            continue;
        b[(c->worker * (k + 1) + (int)c->index) * 2 + 1] = c->start_us;
        b[(c->worker * (k + 1) + (int)c->index + 1) * 2] = c->end_us;
    }
    double sum = 0;
    bool whole = true;
    for (int p = 0; p <= k && whole; p++) {
        double most = 0;
        for (int w = 0; w < world && whole; w++) {
            double from = b[(w * (k + 1) + p) * 2], to = b[(w * (k + 1) + p) * 2 + 1];
            whole = !isnan(from) && !isnan(to);
            if (whole && to - from > most)
                most = to - from;
        }
        sum += most;
    }
    free(b);
    *out = sum;
    return whole;
}

/* Compute of the one-command form's last n steps, as compute_ctl. */
static int compute_one(const disco_trace_t *t, int n, double *comp)
{
    uint64_t *seq = malloc((t->nslices + 1) * sizeof *seq);
    int steps = 0, have = 0;
    if (seq == NULL)
        return 0;
    for (size_t i = 0; i < t->nslices; i++) /* worker 0's steps, in order */
        if (t->slices[i].worker == 0 && strcmp(t->slices[i].name, STEP_ONE) == 0)
            seq[steps++] = t->slices[i].seq;
    int from = steps > n ? steps - n : 0;
    for (int s = from; s < steps; s++) {
        double c;
        if (!compute_one_step(t, seq[s], &c)) { /* cut by the wrap-around: keep the later */
            have = 0;
            continue;
        }
        comp[have++] = c;
    }
    free(seq);
    memmove(comp + (n - have), comp, (size_t)have * sizeof *comp);
    return have;
}

/* Commands per token of form: the median count of commands from one
 * step's first command to the next one's, over the trace's last n steps
 * of the form (the last step has no next: n - 1 counts). -1: fewer than
 * two steps. */
static double commands_per_token(const disco_trace_t *t, demo_form_t form, int n)
{
    const char *start = form == DEMO_FORM_ONE_COMMAND ? STEP_ONE : STEP_CTL;
    double *gaps = malloc((t->ncmds + 1) * sizeof *gaps);
    int ngaps = 0;
    size_t prev = SIZE_MAX;
    if (gaps == NULL)
        return -1;
    for (size_t i = 0; i < t->ncmds; i++) {
        if (strcmp(t->cmds[i].name, start) != 0)
            continue;
        if (prev != SIZE_MAX)
            gaps[ngaps++] = (double)(t->cmds[i].seq - t->cmds[prev].seq);
        prev = i;
    }
    int from = ngaps > n - 1 ? ngaps - (n - 1) : 0;
    double r = ngaps - from > 0 ? quantile(gaps + from, ngaps - from, 0.5) : -1;
    free(gaps);
    return r;
}

static int cmp_coll(const void *a, const void *b)
{
    const disco_trace_coll_t *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return (x->group > y->group) - (x->group < y->group);
}

double demo_dec_ctx_allreduce_us(const disco_trace_t *t)
{
    disco_trace_coll_t *c = malloc((t->ncolls + 1) * sizeof *c);
    double *us = malloc((t->ncolls + 1) * sizeof *us);
    size_t m = 0;
    int nus = 0;
    if (c == NULL || us == NULL) {
        free(c);
        free(us);
        return -1;
    }
    for (size_t i = 0; i < t->ncolls; i++)
        if (strcmp(t->colls[i].name, "allreduce") == 0)
            c[m++] = t->colls[i];
    qsort(c, m, sizeof *c, cmp_coll);
    for (size_t i = 0; i < m;) { /* one allreduce: a run of equal keys */
        size_t j = i;
        double arrive = c[i].start_us, leave = c[i].end_us;
        for (; j < m && cmp_coll(&c[i], &c[j]) == 0; j++) {
            arrive = fmax(arrive, c[j].start_us);
            leave = fmax(leave, c[j].end_us);
        }
        if ((int)(j - i) == c[i].members) /* every member's record is there */
            us[nus++] = leave - arrive;
        i = j;
    }
    double r = nus > 0 ? quantile(us, nus, 0.5) : -1;
    free(c);
    free(us);
    return r;
}

void demo_dec_figures(const disco_trace_t *t, demo_form_t form, const double *lat, int n,
                      demo_dec_figures_t *f)
{
    double comp[DEMO_DEC_MAX_STEPS] = {0}, coord[DEMO_DEC_MAX_STEPS] = {0};
    double total = 0, ctotal = 0, ltotal = 0;
    int have = form == DEMO_FORM_ONE_COMMAND ? compute_one(t, n, comp) : compute_ctl(t, n, comp);
    const double *l = lat + (n - have), *c = comp + (n - have);
    for (int k = 0; k < n; k++)
        total += lat[k];
    for (int k = 0; k < have; k++) {
        coord[k] = l[k] - c[k];
        ctotal += coord[k];
        ltotal += l[k];
    }
    *f = (demo_dec_figures_t){0};
    f->token_us = quantile(lat, n, 0.5);
    f->token_p99_us = quantile(lat, n, 0.99);
    f->tokens_per_s = total > 0 ? 1e6 * n / total : 0;
    f->compute_us = have ? quantile(c, have, 0.5) : 0;
    f->coord_us = have ? quantile(coord, have, 0.5) : 0;
    f->coord_share = ltotal > 0 ? 100.0 * ctotal / ltotal : 0;
    f->coord_pct = f->token_us > 0 ? 100.0 * f->coord_us / f->token_us : 0;
    f->timed = have;
    f->commands_per_token = commands_per_token(t, form, n);
    f->ctx_allreduce_us = form == DEMO_FORM_ONE_COMMAND ? demo_dec_ctx_allreduce_us(t) : -1;
}

void demo_dec_figures_print(const demo_dec_opts_t *o, demo_form_t form, const demo_dec_figures_t *f,
                            int n)
{
    long long L = (long long)o->layers;
    printf("per token (%d generated; median, p99): %.1f us, %.1f us; %.1f tokens/s\n", n,
           f->token_us, f->token_p99_us, f->tokens_per_s);
    if (form == DEMO_FORM_ONE_COMMAND)
        printf("  a step is one command on every worker (call_sync_all of demo.dec_step; %.0f "
               "commands a token, from the trace), its %lld allreduces inside the workers "
               "(disco_ctx_allreduce: %.2f us each, median, from the last member's call to the "
               "end)\n",
               f->commands_per_token, 2 * L, f->ctx_allreduce_us);
    else
        printf("  a step is %.0f commands (from the trace): embed, per layer attention, "
               "allreduce, MLP, allreduce, then the head and a sync\n",
               f->commands_per_token);
    printf("  compute      %.1f us (median): per step, the slowest worker's time in each of its "
           "%lld compute %s, summed\n",
           f->compute_us, form == DEMO_FORM_ONE_COMMAND ? 2 * L + 1 : 2 * L + 2,
           form == DEMO_FORM_ONE_COMMAND ? "phases (the step cut by its in-worker allreduces)"
                                         : "calls (embed, attention and MLP partials, head)");
    printf("  coordination %.1f us (median; %.1f us a layer): the rest of the step: commands, "
           "the %lld allreduces (waits for the slowest included), register frees, the logits' "
           "copy out%s\n",
           f->coord_us, f->coord_us / (double)o->layers, 2 * L,
           form == DEMO_FORM_ONE_COMMAND ? "" : ", a sync");
    printf("  coordination is %.1f%% of a token's latency (medians; goal on CPU: under 10%%: "
           "%s), %.1f%% of the generation time (sums over the %d tokens the trace holds, the "
           "slow tail included)\n",
           f->coord_pct, f->coord_pct < 10 ? "met" : "NOT met", f->coord_share, f->timed);
}
