/* demo_decoder.c - disco-demo's main job: a tensor-parallel decoder-only
 * transformer (demo_decoder.h) over N workers that generates tokens
 * greedily from a prompt, every step's logits and every token checked
 * against the same model run in this process, with per-token latency split
 * into compute and coordination, the placement plan, the trace summary and
 * a Perfetto trace. The workers' functions are in demo_decoder_lib.c. */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/placement.h"
#include "disco/shm/wait.h"
#include "disco/tensor.h"
#include "disco/trace.h"
#include "tools/demo/demo.h"
#include "tools/demo/demo_dec_figures.h"
#include "tools/demo/demo_decoder.h"
#include "tools/demo/demo_decoder_ref.h"

#define CHECK(call) DEMO_CHECK(call, goto out)

/* float32 on the workers against double here: the per-step error is of
 * the order of float32's rounding (~1e-7) times the depth of the sums,
 * measured ~1e-6 at the default size; 1e-4 leaves two decades of room and
 * still catches any wrong shard, position or head (errors of order 1). */
#define TOLERANCE 1e-4
#define MAX_STEPS DEMO_DEC_MAX_STEPS

/* The session side: the registers a step uses. */
typedef struct dec_run {
    disco_session_t *s;
    disco_dref_t f_embed, f_attn, f_mlp, f_head, f_allreduce, f_step;
    disco_dref_t w, h, kv; /* weights, residual stream, KV cache: kept */
    int64_t cfg[DEMO_DEC_CFG_LEN];
    int64_t layers;
} dec_run_t;

static disco_value_t dref(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.reg = r};
}

/* One decode step of token tok at position pos in the controller-driven
 * form: a command per function call and per allreduce (2 + 4L, and a
 * sync); the logits into host (a [vocab] float32 CPU tensor). Every
 * register it makes is freed. */
static disco_status_t step_ctl(const dec_run_t *r, int64_t tok, int64_t pos, DLTensor *logits)
{
    disco_session_t *s = r->s;
    disco_dref_t regs[4 * 64 + 2] = {0}, m = 0;
    int nr = 0;
    disco_value_t cfg = disco_value_shape(r->cfg, DEMO_DEC_CFG_LEN), sum = disco_value_str("sum");
    disco_value_t e[4] = {dref(r->w), cfg, disco_value_int(tok), dref(r->h)};
    disco_status_t st = disco_session_call(s, r->f_embed, e, 4, &regs[nr++]);
    for (int64_t l = 0; l < r->layers && st == DISCO_OK; l++) {
        disco_value_t a[7] = {dref(r->w),
                              cfg,
                              disco_value_int(l),
                              disco_value_int(pos),
                              dref(r->h),
                              dref(r->kv),
                              m != 0 ? dref(m) : disco_value_null()};
        disco_dref_t part, att;
        if ((st = disco_session_call(s, r->f_attn, a, 7, &part)) != DISCO_OK)
            break;
        regs[nr++] = part;
        disco_value_t ar[2] = {dref(part), sum};
        if ((st = disco_session_call(s, r->f_allreduce, ar, 2, &att)) != DISCO_OK)
            break;
        regs[nr++] = att;
        disco_value_t b[5] = {dref(r->w), cfg, disco_value_int(l), dref(r->h), dref(att)};
        if ((st = disco_session_call(s, r->f_mlp, b, 5, &part)) != DISCO_OK)
            break;
        regs[nr++] = part;
        ar[0] = dref(part);
        if ((st = disco_session_call(s, r->f_allreduce, ar, 2, &m)) != DISCO_OK)
            break;
        regs[nr++] = m;
    }
    disco_dref_t lg = 0;
    disco_value_t hd[4] = {dref(r->w), cfg, dref(r->h), dref(m)};
    if (st == DISCO_OK && (st = disco_session_call(s, r->f_head, hd, 4, &lg)) == DISCO_OK)
        regs[nr++] = lg;
    /* worker 0 ran every command above, so the logits are complete; the
     * sync hears of a failure of worker 0's */
    if (st == DISCO_OK && (st = disco_session_copy_from_worker0(s, lg, logits)) == DISCO_OK)
        st = disco_session_sync(s, 0);
    for (int i = 0; i < nr; i++)
        if (regs[i] != 0)
            disco_session_free_reg(s, regs[i]);
    return st;
}

/* One decode step in the one-command form: call_sync_all of demo.dec_step,
 * every layer and its allreduces inside the workers; the logits into host.
 * The result's free rides with the next command (disco_session_free_reg),
 * so a token is one command. */
static disco_status_t step_one(const dec_run_t *r, int64_t tok, int64_t pos, DLTensor *logits)
{
    disco_value_t a[6] = {dref(r->w),           disco_value_shape(r->cfg, DEMO_DEC_CFG_LEN),
                          disco_value_int(tok), disco_value_int(pos),
                          dref(r->h),           dref(r->kv)};
    disco_dref_t lg;
    disco_status_t st = disco_session_call_sync_all(r->s, r->f_step, a, 6, &lg);
    if (st != DISCO_OK)
        return st;
    /* every worker answered: worker 0's logits are complete */
    st = disco_session_copy_from_worker0(r->s, lg, logits);
    disco_status_t fst = disco_session_free_reg(r->s, lg);
    return st != DISCO_OK ? st : fst;
}

static disco_status_t step(const dec_run_t *r, demo_form_t form, int64_t tok, int64_t pos,
                           DLTensor *logits)
{
    return form == DEMO_FORM_ONE_COMMAND ? step_one(r, tok, pos, logits)
                                         : step_ctl(r, tok, pos, logits);
}

/* Bytes of heap (CPU) or of each device arena (dev) the model needs, with
 * room for a step's temporaries and the allocator's slack. */
static uint64_t need_bytes(const demo_dec_shape_t *s, int n, bool dev)
{
    uint64_t sum = 0, most = 0;
    for (int r = 0; r < n; r++) {
        demo_dec_layout_t L = demo_dec_layout(s, r, n);
        uint64_t one = (uint64_t)(L.total + s->layers * 2 * s->max_seq * L.dl +
                                  (4 * s->layers + 4) * s->d_model + 2 * s->vocab) *
                           sizeof(float) +
                       (uint64_t)(8 * s->layers + 16) * 256;
        sum += one;
        most = one > most ? one : most;
    }
    return dev ? 2 * most + (1u << 20) : sum + sum / 4 + (4u << 20);
}

static int64_t argmax(const float *v, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[k])
            k = i;
    return k;
}

/* The weights file at path, checked against shape s, into *full_out
 * (malloc'd); false with a message when it cannot be read or has another
 * size. */
static bool read_weights(const char *path, const demo_dec_shape_t *s, float **full_out)
{
    size_t n = (size_t)demo_dec_layout(s, 0, 1).total;
    float *full = malloc(n * sizeof *full);
    FILE *f = fopen(path, "rb");
    bool ok = full != NULL && f != NULL && fread(full, sizeof *full, n, f) == n && fgetc(f) == EOF;
    if (!ok) {
        printf("  FAILED: --weights %s: %s (this model needs %zu float32, %zu bytes)\n", path,
               f == NULL ? "cannot open it" : "not the model's size", n, n * sizeof *full);
        free(full);
        full = NULL;
    }
    if (f != NULL)
        fclose(f);
    *full_out = full;
    return ok;
}

/* --save-weights: the seed's whole model into path, in the weights file's
 * format (demo_dec_src_t). */
static bool save_weights(const char *path, const demo_dec_shape_t *s, uint64_t seed)
{
    demo_dec_layout_t L = demo_dec_layout(s, 0, 1);
    demo_dec_src_t src = {.seed = seed, .full = NULL};
    float *full = malloc((size_t)L.total * sizeof *full);
    FILE *f = full != NULL ? fopen(path, "wb") : NULL;
    bool ok = f != NULL;
    if (ok) {
        demo_dec_fill(full, s, &L, &src, 0);
        ok = fwrite(full, sizeof *full, (size_t)L.total, f) == (size_t)L.total;
    }
    if (f != NULL && fclose(f) != 0)
        ok = false;
    free(full);
    printf("%s the weights of seed %llu to %s (%lld float32)\n", ok ? "wrote" : "FAILED to write",
           (unsigned long long)seed, path, (long long)L.total);
    return ok;
}

/* Sets up the session's registers: the library, functions, weights and
 * state on o->device. */
static disco_status_t setup(dec_run_t *r, const demo_dec_opts_t *o, const char *lib)
{
    disco_session_t *s = r->s;
    disco_dref_t x;
    disco_value_t path = disco_value_str(lib), cfg = disco_value_shape(r->cfg, DEMO_DEC_CFG_LEN);
    disco_value_t wa[4] = {cfg, disco_value_int((int64_t)o->seed), disco_value_int(o->device),
                           disco_value_str(o->weights_path != NULL ? o->weights_path : "")};
    disco_status_t st;
    if ((st = disco_session_call_by_name(s, "disco.load_library", &path, 1, &x)) != DISCO_OK ||
        (st = disco_session_free_reg(s, x)) != DISCO_OK ||
        (st = disco_session_get_func(s, "demo.dec_embed", &r->f_embed)) != DISCO_OK ||
        (st = disco_session_get_func(s, "demo.dec_attn", &r->f_attn)) != DISCO_OK ||
        (st = disco_session_get_func(s, "demo.dec_mlp", &r->f_mlp)) != DISCO_OK ||
        (st = disco_session_get_func(s, "demo.dec_head", &r->f_head)) != DISCO_OK ||
        (st = disco_session_get_func(s, "disco.allreduce", &r->f_allreduce)) != DISCO_OK ||
        (st = disco_session_get_func(s, "demo.dec_step", &r->f_step)) != DISCO_OK ||
        (st = disco_session_call_by_name(s, "demo.dec_weights", wa, 4, &r->w)) != DISCO_OK)
        return st;
    wa[1] = disco_value_int(0);
    if ((st = disco_session_call_by_name(s, "demo.dec_state", wa, 3, &r->h)) != DISCO_OK)
        return st;
    wa[1] = disco_value_int(1);
    if ((st = disco_session_call_by_name(s, "demo.dec_state", wa, 3, &r->kv)) != DISCO_OK)
        return st;
    for (int w = 0; w < o->workers; w++)
        if ((st = disco_session_sync(s, w)) != DISCO_OK)
            return st;
    return DISCO_OK;
}

static void teardown(dec_run_t *r)
{
    disco_dref_t regs[9] = {r->f_embed, r->f_attn, r->f_mlp, r->f_head, r->f_allreduce,
                            r->f_step,  r->w,      r->h,     r->kv};
    for (int i = 0; i < 9; i++)
        if (regs[i] != 0)
            disco_session_free_reg(r->s, regs[i]);
}

/* The form of the figures at the top level of demo.json and of --hold. */
static demo_form_t main_form(const demo_dec_opts_t *o)
{
    return o->controller_driven ? DEMO_FORM_CONTROLLER : DEMO_FORM_ONE_COMMAND;
}

static volatile sig_atomic_t hold_stop;

static void on_hold_stop(int sig)
{
    (void)sig;
    hold_stop = 1;
}

/* --hold: the same steps again and again (positions 0..steps-1 of the
 * prompt and the tokens made, rewriting the same KV cache entries) for
 * o->hold_s seconds or until SIGTERM or SIGINT, so that `disco top` and
 * `disco dump` have a busy session to watch. logits: scratch of vocab
 * floats. */
static disco_status_t hold(const dec_run_t *r, const demo_dec_opts_t *o, const int64_t *toks,
                           int steps, float *logits)
{
    struct sigaction sa = {.sa_handler = on_hold_stop}, old_term, old_int;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    int64_t len = o->vocab, end = disco_now_ns() + (int64_t)(o->hold_s * 1e9), rounds = 0;
    DLTensor host = {.data = logits,
                     .device = {kDLCPU, 0},
                     .ndim = 1,
                     .dtype = {kDLFloat, 32, 1},
                     .shape = &len};
    printf("holding: session of pid %d steps on for %.0f s (SIGTERM or SIGINT ends it; watch "
           "it with: disco top %d)\n",
           (int)getpid(), o->hold_s, (int)getpid());
    fflush(stdout);
    disco_status_t st = DISCO_OK;
    while (st == DISCO_OK && !hold_stop && disco_now_ns() < end) {
        for (int k = 0; k < steps && st == DISCO_OK; k++)
            st = step(r, main_form(o), k < o->nprompt ? o->prompt[k] : toks[k - o->nprompt], k,
                      &host);
        rounds++;
    }
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    printf("held: %lld rounds of %d steps%s\n", (long long)rounds, steps,
           hold_stop ? " (stopped by a signal)" : "");
    return st;
}

static void write_trace(const disco_trace_t *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL || disco_trace_write_json(t, f) != DISCO_OK)
        printf("  could not write the trace to %s\n", path);
    else
        printf("trace: %s (open it in ui.perfetto.dev; summarize with: disco trace %s)\n", path,
               path);
    if (f != NULL)
        fclose(f);
}

/* One form's run: the prompt's steps and the generated tokens', back to
 * back as a decoder's would run; every step's logits into logits (steps *
 * vocab), the generated ids into toks, their steps' latencies (us) into
 * lat. The KV cache entries of the positions are rewritten by each run. */
static disco_status_t generate(const dec_run_t *r, const demo_dec_opts_t *o, demo_form_t form,
                               float *logits, int64_t *toks, double *lat)
{
    int steps = o->nprompt + o->tokens - 1;
    int64_t len = o->vocab;
    DLTensor host = {.device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = &len};
    for (int k = 0; k < steps; k++) {
        int64_t tok = k < o->nprompt ? o->prompt[k] : toks[k - o->nprompt];
        float *lk = logits + k * o->vocab;
        host.data = lk;
        int64_t t0 = disco_now_ns();
        disco_status_t st = step(r, form, tok, k, &host);
        if (st != DISCO_OK)
            return st;
        int g = k - (o->nprompt - 1); /* the generated token's index; < 0: prompt */
        if (g >= 0) {
            lat[g] = (double)(disco_now_ns() - t0) / 1e3;
            toks[g] = argmax(lk, o->vocab);
        }
    }
    return DISCO_OK;
}

/* The run's steps again in this process (model); its largest relative
 * error of the logits into *err (max with what is there); whether every
 * generated token is the reference's. ref: scratch of vocab floats. */
static bool check_run(demo_dec_ref_t *model, const demo_dec_opts_t *o, const float *logits,
                      const int64_t *toks, float *ref, double *err)
{
    bool match = true;
    for (int k = 0; k < o->nprompt + o->tokens - 1; k++) {
        int64_t tok = k < o->nprompt ? o->prompt[k] : toks[k - o->nprompt], g = k - o->nprompt + 1;
        const float *lk = logits + k * o->vocab;
        demo_dec_ref_step(model, tok, k, ref);
        double dmax = 0, rmax = 0;
        for (int64_t i = 0; i < o->vocab; i++) {
            dmax = fmax(dmax, fabs((double)lk[i] - ref[i]));
            rmax = fmax(rmax, fabs((double)ref[i]));
        }
        *err = fmax(*err, rmax > 0 ? dmax / rmax : dmax);
        match = match && (g < 0 || toks[g] == argmax(ref, o->vocab));
    }
    return match;
}

/* The most tokens/s the one-command form could gain over the
 * controller-driven one by removing coordination alone (Amdahl): every
 * microsecond of the latter's coordination gone, its compute left, i.e.
 * 1 / (1 - its coordination's share of the generation time). */
/* The one-command form's tokens/s over the controller-driven form's (0
 * without the latter). */
static double speedup(const demo_dec_figures_t *one, const demo_dec_figures_t *ctl)
{
    return ctl->tokens_per_s > 0 ? one->tokens_per_s / ctl->tokens_per_s : 0;
}

static double speedup_bound(const demo_dec_figures_t *ctl)
{
    return ctl->coord_share < 100 ? 100.0 / (100.0 - ctl->coord_share) : 0;
}

/* demo.json: the main form's figures at the top level (the keys and units
 * of the controller-driven demo before issue 34), each form's tokens/s and
 * commands a token, and their ratio. f[0] main, f[1] the other. */
static void write_json(const demo_dec_opts_t *o, const demo_dec_figures_t *f, double err,
                       bool match, const int64_t *toks)
{
    json_t *gen = json_array(), *prompt = json_array();
    for (int i = 0; i < o->tokens; i++)
        json_array_append_new(gen, json_integer(toks[i]));
    for (int i = 0; i < o->nprompt; i++)
        json_array_append_new(prompt, json_integer(o->prompt[i]));
    const demo_dec_figures_t *one = o->controller_driven ? &f[1] : &f[0],
                             *ctl = o->controller_driven ? &f[0] : &f[1];
    json_t *j = json_pack(
        "{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
        "s:f, s:f, s:f, s:b, s:b}",
        "device", demo_device_name(o->device), "workers", o->workers, "vocab", (json_int_t)o->vocab,
        "d_model", (json_int_t)o->d_model, "layers", (json_int_t)o->layers, "heads",
        (json_int_t)o->heads, "d_ff", (json_int_t)o->d_ff, "prompt", prompt, "tokens", gen,
        "timed_tokens", f->timed, "token_us", f->token_us, "token_p99_us", f->token_p99_us,
        "compute_us", f->compute_us, "coordination_us", f->coord_us, "coordination_pct",
        f->coord_pct, "coordination_share_pct", f->coord_share, "coordination_per_layer_us",
        f->coord_us / (double)o->layers, "tokens_per_s", f->tokens_per_s, "max_rel_err", err,
        "tolerance", TOLERANCE, "tokens_match", match, "ok", match && err <= TOLERANCE);
    json_t *more = json_pack(
        "{s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "form",
        demo_form_name(main_form(o)), "commands_per_token", f->commands_per_token,
        "ctx_allreduce_us", one->ctx_allreduce_us, "one_command_tokens_per_s", one->tokens_per_s,
        "one_command_commands_per_token", one->commands_per_token, "one_command_coordination_pct",
        one->coord_pct, "controller_driven_tokens_per_s", ctl->tokens_per_s,
        "controller_driven_commands_per_token", ctl->commands_per_token,
        "controller_driven_coordination_pct", ctl->coord_pct, "one_command_speedup",
        speedup(one, ctl), "one_command_speedup_bound", speedup_bound(ctl));
    if (j != NULL && more != NULL)
        json_object_update(j, more);
    json_decref(more);
    if (j == NULL || json_dump_file(j, o->json_path, JSON_INDENT(2)) != 0)
        printf("  could not write the figures to %s\n", o->json_path);
    json_decref(j);
}

/* The comparison's lines: the other form's latency and tokens/s, and the
 * one-command form's against the controller-driven one's. */
static void print_compare(const demo_dec_opts_t *o, const demo_dec_figures_t *f)
{
    const demo_dec_figures_t *one = o->controller_driven ? &f[1] : &f[0],
                             *ctl = o->controller_driven ? &f[0] : &f[1];
    demo_form_t other = o->controller_driven ? DEMO_FORM_ONE_COMMAND : DEMO_FORM_CONTROLLER;
    printf("the %s form, in the same session for comparison (its logits and tokens checked "
           "too): %.1f us a token (median), %.1f tokens/s, %.0f commands a token, coordination "
           "%.1f us (%.1f%%)\n",
           demo_form_name(other), f[1].token_us, f[1].tokens_per_s, f[1].commands_per_token,
           f[1].coord_us, f[1].coord_pct);
    printf("one command a token against the controller-driven form: %.1f against %.1f tokens/s: "
           "%.2fx; %.0f against %.0f commands a token; coordination %.1f%% against %.1f%%\n",
           one->tokens_per_s, ctl->tokens_per_s, speedup(one, ctl), one->commands_per_token,
           ctl->commands_per_token, one->coord_pct, ctl->coord_pct);
    printf("  goals at 2 workers on CPU (issue 34): <= 2 commands a token: %s; coordination <= "
           "1.5%% of a token: %s; tokens/s >= 1.2x the controller-driven form: %s (removing "
           "all of its coordination, %.1f%% of its generation time, would give at most %.2fx)\n",
           one->commands_per_token <= 2 ? "met" : "NOT met",
           one->coord_pct <= 1.5 ? "met" : "NOT met", speedup(one, ctl) >= 1.2 ? "met" : "NOT met",
           ctl->coord_share, speedup_bound(ctl));
}

bool demo_decoder(const demo_dec_opts_t *o, const char *lib)
{
    int n = o->workers, steps = o->nprompt + o->tokens - 1, timed = o->tokens;
    demo_dec_shape_t shape = {o->vocab, o->d_model, o->layers,
                              o->heads, o->d_ff,    o->nprompt + o->tokens};
    dec_run_t r = {
        .cfg = {shape.vocab, shape.d_model, shape.layers, shape.heads, shape.d_ff, shape.max_seq},
        .layers = o->layers};
    demo_form_t forms[2] = {main_form(o), main_form(o) == DEMO_FORM_ONE_COMMAND
                                              ? DEMO_FORM_CONTROLLER
                                              : DEMO_FORM_ONE_COMMAND};
    bool ok = false, match = true;
    double *lat = calloc(2 * MAX_STEPS, sizeof *lat), err = 0;
    /* every step's logits of both runs, checked after the generation, so
     * that the reference's work (milliseconds a step) does not sit between
     * the timed steps, which run back to back as a decoder's would */
    float *logits = malloc((size_t)(2 * steps * o->vocab) * sizeof *logits),
          *ref = malloc((size_t)o->vocab * sizeof *ref);
    int64_t *toks = calloc(2 * ((size_t)o->tokens + 1), sizeof *toks);
    demo_dec_ref_t *model = NULL;
    demo_dec_src_t src = {.seed = o->seed, .full = NULL};
    float *full = NULL;
    disco_trace_t *t = NULL;
    disco_trace_summary_t *sum = NULL;
    if (lat == NULL || logits == NULL || ref == NULL || toks == NULL)
        goto out;
    printf("== tensor-parallel decoder: vocab %lld, d_model %lld, %lld layers, %lld heads, "
           "d_ff %lld; heads and MLP columns split over %d workers; %d prompt tokens, %d "
           "generated greedily\n",
           (long long)o->vocab, (long long)o->d_model, (long long)o->layers, (long long)o->heads,
           (long long)o->d_ff, n, o->nprompt, o->tokens);
    printf("   tensors: %s; LM head on worker 0 only (the residual stream is on every worker)\n",
           o->device == kDLExtDev
               ? "on sim devices (a test device, no GPU figures): the one-command step runs "
                 "each kernel as the sim's host implementation, the controller-driven functions "
                 "computed on host copies; the allreduces run as device kernels"
           : o->device == kDLCUDA
               ? "on CUDA GPUs: the one-command step computes with the demo's CUDA kernels "
                 "(tools/demo/demo_dec_cuda.cu), the controller-driven functions computed on "
                 "host copies; the allreduces run as device kernels"
               : "CPU (the shared heap)");
    printf("   a step: %s (the %s form runs after it, in the same session, for comparison)\n",
           forms[0] == DEMO_FORM_ONE_COMMAND
               ? "one command, call_sync_all of demo.dec_step, which runs every layer and "
                 "reduces inside the workers (disco_ctx_allreduce)"
               : "a command per function call and per allreduce (--controller-driven)",
           demo_form_name(forms[1]));
    if (o->save_path != NULL && !save_weights(o->save_path, &shape, o->seed))
        goto out;
    if (o->weights_path != NULL && !read_weights(o->weights_path, &shape, &full))
        goto out;
    src.full = full;
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.heap_bytes = need_bytes(&shape, n, false);
    if (o->device != kDLCPU)
        cfg.device_arena_bytes = need_bytes(&shape, n, true);
    if (o->device == kDLCUDA) /* no process forks after this one touched CUDA */
        cfg.launch = DISCO_LAUNCH_SPAWN;
    if (o->workers_per_node > 0) { /* every rank opens it; only rank 0 comes back */
        cfg.nodes = DISCO_NODES_MPI;
        cfg.workers_per_node = o->workers_per_node;
    }
    CHECK(disco_session_open(&cfg, &r.s));
    disco_plan_print(disco_session_plan(r.s), stdout, false);
    int64_t t0 = disco_now_ns();
    CHECK(setup(&r, o, lib));
    if (o->weights_path != NULL)
        printf("weights read from %s by every worker (its shard) in %.0f ms\n", o->weights_path,
               (double)(disco_now_ns() - t0) / 1e6);
    else
        printf("weights made on every worker in %.0f ms (seed %llu)\n",
               (double)(disco_now_ns() - t0) / 1e6, (unsigned long long)o->seed);
    CHECK(demo_dec_ref_new(&shape, &src, &model));

    size_t per = (size_t)(steps * o->vocab);
    for (int i = 0; i < 2; i++)
        CHECK(generate(&r, o, forms[i], logits + i * per, toks + i * (o->tokens + 1),
                       lat + i * MAX_STEPS));
    for (int i = 0; i < 2; i++) /* the same steps in this process */
        match =
            check_run(model, o, logits + i * per, toks + i * (o->tokens + 1), ref, &err) && match;
    for (int w = 0; w < n; w++)
        CHECK(disco_session_sync(r.s, w));
    printf("generated:");
    for (int i = 0; i < o->tokens; i++)
        printf(" %lld", (long long)toks[i]);
    printf("\n");
    CHECK(disco_session_trace(r.s, &t));
    demo_dec_figures_t f[2];
    for (int i = 0; i < 2; i++)
        demo_dec_figures(t, forms[i], lat + i * MAX_STEPS, timed, &f[i]);
    demo_dec_figures_print(o, forms[0], &f[0], timed);
    /* err and match are over both forms' runs */
    printf("logits against one process: max relative error %.2e (tolerance %.0e) %s; tokens "
           "%s\n",
           err, TOLERANCE, err <= TOLERANCE ? "OK" : "WRONG", match ? "match" : "DIFFER");
    print_compare(o, f);
    if (o->json_path != NULL)
        write_json(o, f, err, match, toks);
    CHECK(disco_trace_summarize(t, &sum));
    disco_trace_summary_print(sum, stdout, false);
    if (o->trace_path != NULL)
        write_trace(t, o->trace_path);
    if (o->hold_s > 0)
        CHECK(hold(&r, o, toks, steps, ref));
    ok = match && err <= TOLERANCE;
out:
    if (r.s != NULL)
        teardown(&r);
    demo_dec_ref_free(model);
    free(full);
    disco_trace_summary_free(sum);
    disco_trace_free(t);
    disco_session_close(r.s);
    free(lat);
    free(logits);
    free(ref);
    free(toks);
    return ok;
}
