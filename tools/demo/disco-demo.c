/*
 * disco-demo - a controller and N worker processes talking over disco rings.
 *
 *   disco-demo [-n N] [--help]
 *
 * The control-plane part shows what a session runs on, by hand: one memfd
 * segment holds a broadcast ring (controller -> every worker, one cursor
 * each) and one reply ring per worker; the workers are forked and inherit
 * it.
 *
 *   1. The controller broadcasts "sum 1..k" for a few k. Worker w sums its
 *      own contiguous share of 1..k and replies (worker id, partial sum).
 *      The controller checks every partial and their total.
 *   2. Broadcast + acknowledgement latency with N workers (median).
 *   3. Shutdown: every worker acknowledges and exits; all are reaped.
 *   4. Round trip of a 64-byte message with one worker (median), in a
 *      second cluster of one worker pinned opposite the controller.
 * Exit status 0 only if every reply checked out.
 *
 * The session part (demo_session.c) runs a Disco session over the same rings: worker
 * 0 in this process, workers 1..N-1 forked; it loads a library into every
 * worker, calls it, catches an error, and times calls over rings and pipes.
 * The decoder (demo_decoder.c), the main job, runs first; the MLP block
 * (demo_mlp.c), the earlier main job, runs instead with --mlp-only. This
 * file is the main and the control-plane part; it calls the other parts
 * (demo.h), which never call back into it.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench/bench_util.h"
#include "tools/demo/demo.h"

enum { OP_SUM = 1, OP_ACK = 2, OP_PING = 3, OP_SHUTDOWN = 4 };

/* A command: one 64-byte broadcast message. */
typedef struct cmd {
    uint32_t op;
    uint32_t pad;
    uint64_t seq;
    uint64_t k; /* OP_SUM: sum 1..k */
    unsigned char filler[40];
} cmd_t;
_Static_assert(sizeof(cmd_t) == BU_MSG_SIZE, "a command is one 64-byte message");

/* A reply from one worker. OP_PING echoes the whole command instead. */
typedef struct reply {
    uint32_t op;
    uint32_t worker;
    uint64_t seq;
    uint64_t result;
} reply_t;

typedef struct cluster {
    bu_rings_t rings;
    uint32_t n;
    uint32_t me; /* set before each fork: the worker's id */
    pid_t controller;
    disco_wait_t w; /* the controller's wait settings (deadline refreshed) */
    uint64_t pause_ns;
    uint64_t seq;
} cluster_t;

/* ---- worker side ---- */

/* The contiguous share of 1..k that worker w of n sums: [lo, hi], empty
 * when lo > hi. */
static void share(uint64_t k, uint32_t w, uint32_t n, uint64_t *lo, uint64_t *hi)
{
    *lo = k * w / n + 1;
    *hi = k * (w + 1) / n;
}

/* sum lo..hi by the closed form (the controller's check). */
static uint64_t range_sum(uint64_t lo, uint64_t hi)
{
    return lo > hi ? 0 : (lo + hi) * (hi - lo + 1) / 2;
}

/* Wait check for workers: the controller is still our parent. A worker
 * waits as long as its controller lives (PR_SET_PDEATHSIG kills it when
 * the controller dies; this catches the rest). */
static disco_status_t controller_alive(void *ctx)
{
    const cluster_t *c = ctx;
    if (getppid() != c->controller)
        return disco_set_error(DISCO_E_PEER_DEAD, "controller %d is gone", (int)c->controller);
    return DISCO_OK;
}

static int worker_main(void *p)
{
    cluster_t *c = p;
    uint32_t me = c->me;
    disco_ring_t *out = &c->rings.reply[me];
    disco_wait_t w = {.pause_ns = c->pause_ns, .check = controller_alive, .check_ctx = c};
    if (c->n == 1)
        bu_pin(1); /* the round-trip cluster: opposite the controller */
    for (;;) {
        cmd_t cmd;
        uint32_t len;
        bu_child_check(disco_ring_read(&c->rings.bcast, me, &cmd, sizeof cmd, &len, &w),
                       "worker: disco_ring_read");
        reply_t r = {.op = cmd.op, .worker = me, .seq = cmd.seq};
        if (cmd.op == OP_PING) { /* echo the whole 64 bytes */
            bu_child_check(disco_spsc_write(out, &cmd, sizeof cmd, &w), "worker: write");
            continue;
        }
        if (cmd.op == OP_SUM) {
            uint64_t lo, hi, sum = 0;
            share(cmd.k, me, c->n, &lo, &hi);
            for (uint64_t j = lo; j <= hi; j++)
                sum += j;
            r.result = sum;
        }
        bu_child_check(disco_spsc_write(out, &r, sizeof r, &w), "worker: write");
        if (cmd.op == OP_SHUTDOWN)
            return 0;
    }
}

/* ---- controller side ---- */

static void cluster_start(cluster_t *c, uint32_t n)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->controller = getpid();
    /* Processes outnumber cores: yield almost at once (see disco-bench). */
    c->pause_ns = (int)n + 1 > bu_ncpus ? 1 : 0;
    c->w.pause_ns = c->pause_ns;
    bu_rings_create(&c->rings, n, 128); /* 128-byte reply slots: a ping echo fits one */
    for (c->me = 0; c->me < n; c->me++)
        bu_spawn(worker_main, c);
    if (n == 1)
        bu_pin(0);
}

static void broadcast(cluster_t *c, uint32_t op, uint64_t k)
{
    cmd_t cmd = {.op = op, .seq = ++c->seq, .k = k};
    bu_check(disco_ring_write(&c->rings.bcast, &cmd, sizeof cmd, &c->w), "disco_ring_write");
}

/* Reads worker w's reply to the last broadcast; false if it is not one. */
static bool read_reply(cluster_t *c, uint32_t w, uint32_t op, reply_t *r)
{
    uint32_t len;
    bu_check(disco_spsc_read(&c->rings.reply[w], r, sizeof *r, &len, &c->w), "disco_spsc_read");
    return len == sizeof *r && r->op == op && r->worker == w && r->seq == c->seq;
}

/* Step 1: one broadcast, N partial sums, each checked. */
static bool demo_sum(cluster_t *c, uint64_t k)
{
    bool ok = true;
    uint64_t total = 0;
    c->w.deadline_ns = disco_now_ns() + BU_DEADLINE_NS;
    broadcast(c, OP_SUM, k);
    printf("broadcast #%llu: sum 1..%llu\n", (unsigned long long)c->seq, (unsigned long long)k);
    for (uint32_t w = 0; w < c->n; w++) {
        reply_t r = {0};
        uint64_t lo, hi;
        share(k, w, c->n, &lo, &hi);
        bool good = read_reply(c, w, OP_SUM, &r) && r.result == range_sum(lo, hi);
        printf("  worker %u: sum %llu..%llu = %llu  %s\n", r.worker, (unsigned long long)lo,
               (unsigned long long)hi, (unsigned long long)r.result, good ? "ok" : "WRONG");
        ok = ok && good;
        total += r.result;
    }
    bool good = total == k * (k + 1) / 2;
    printf("  total %llu  %s\n", (unsigned long long)total, good ? "ok" : "WRONG");
    return ok && good;
}

/* Median over reps of the mean time per round; round() returns false on a
 * wrong reply. */
static double median_rounds(cluster_t *c, bool (*round)(cluster_t *), int reps, int iters, bool *ok)
{
    double v[32] = {0};
    for (int r = -1; r < reps; r++) { /* rep -1 warms up */
        c->w.deadline_ns = disco_now_ns() + BU_DEADLINE_NS;
        int64_t t0 = disco_now_ns();
        for (int i = 0; i < iters; i++)
            *ok = round(c) && *ok;
        if (r >= 0)
            v[r] = (double)(disco_now_ns() - t0) / iters;
    }
    return bu_median(v, reps);
}

static bool ack_round(cluster_t *c)
{
    bool ok = true;
    broadcast(c, OP_ACK, 0);
    for (uint32_t w = 0; w < c->n; w++) {
        reply_t r;
        ok = read_reply(c, w, OP_ACK, &r) && ok;
    }
    return ok;
}

static bool ping_round(cluster_t *c)
{
    cmd_t back;
    uint32_t len;
    broadcast(c, OP_PING, 0);
    bu_check(disco_spsc_read(&c->rings.reply[0], &back, sizeof back, &len, &c->w),
             "disco_spsc_read");
    return len == sizeof back && back.op == OP_PING && back.seq == c->seq;
}

/* Step 3: every worker acknowledges the shutdown, then is reaped. */
static bool cluster_stop(cluster_t *c)
{
    bool ok = true;
    c->w.deadline_ns = disco_now_ns() + BU_DEADLINE_NS;
    broadcast(c, OP_SHUTDOWN, 0);
    for (uint32_t w = 0; w < c->n; w++) {
        reply_t r;
        ok = read_reply(c, w, OP_SHUTDOWN, &r) && ok;
    }
    bu_reap_all();
    bu_unpin();
    bu_rings_close(&c->rings);
    return ok;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: disco-demo [--workers N] [--device cpu|sim|cuda] [--seed X] [--trace PATH]\n"
            "                  [--json PATH] [--vocab V] [--d-model D] [--layers L] [--heads H]\n"
            "                  [--d-ff F] [--prompt IDS] [--tokens T] [--weights FILE]\n"
            "                  [--save-weights FILE] [--decoder-only] [--controller-driven]\n"
            "                  [--workers-per-node W]\n"
            "                  [--mlp-only [--batch B] [--steps S]] [--hold SECONDS] [--help]\n"
            "The main job: a decoder-only transformer (RMSNorm, attention with rotary\n"
            "positions and a KV cache, an MLP, per layer) sharded Megatron style over N\n"
            "worker processes (heads and MLP columns split, an allreduce after the\n"
            "attention and one after the MLP of each layer) generates T tokens greedily\n"
            "from a prompt, a token one command: every worker runs a step function that\n"
            "runs every layer and reduces inside (disco_ctx_allreduce); then the same\n"
            "tokens again with the controller driving every call and allreduce, for\n"
            "comparison. Every step's logits and every token of both are checked against\n"
            "the model run in this process. Prints per-token latency (compute and\n"
            "coordination), tokens/s, the placement plan and the trace summary, and\n"
            "writes a Perfetto trace. Then the control plane (rings) and a session's\n"
            "error path, unless --decoder-only.\n"
            "  --workers N  workers (1..%d; default: one per CPU, at least 2)\n"
            "  --device D   where tensors live: cpu, sim (simulated GPUs, a test device:\n"
            "               DISCO_SIM_GPUS defaults to N) or cuda (GPUs); default cuda\n"
            "               when a GPU is present, else cpu. On a device each worker\n"
            "               computes on host copies (no GPU compute kernels; the allreduces are "
            "device kernels)\n"
            "  --seed X     weights (default 1)\n"
            "  --weights FILE  read the weights from FILE instead: native float32, the\n"
            "               unsharded model in the order of demo_decoder.h (E, per layer\n"
            "               gains and matrices, final gain, Wh), of the shape given\n"
            "  --save-weights FILE  first write the seed's weights to FILE in that format\n"
            "  --trace PATH write the trace there (default disco-demo-trace.json)\n"
            "  --json PATH  write the figures there (token_us, compute_us,\n"
            "               coordination_us, coordination_pct, tokens_per_s,\n"
            "               commands_per_token, ctx_allreduce_us, one_command_speedup,\n"
            "               one_command_speedup_bound (what removing all coordination could give),\n"
            "               max_rel_err, ok, tokens, ...)\n"
            "  --vocab V    vocabulary (default 512)\n"
            "  --d-model D  model width (default 256; MLP: width of x, default 256)\n"
            "  --layers L   layers (default 4, at most 64)\n"
            "  --heads H    attention heads, at least N; D/H even (default 8)\n"
            "  --d-ff F     MLP hidden width, at least N (default 1024)\n"
            "  --prompt IDS comma-separated token ids (default 1,2,3,4,5,6,7,8; at most %d)\n"
            "  --tokens T   tokens to generate (default 32, at most 256)\n"
            "  --controller-driven  the controller-driven form's figures first and at\n"
            "               the top of --json (and for --hold); the one-command form\n"
            "               then runs for comparison\n"
            "  --workers-per-node W  across nodes: run as `mpirun -np NODES disco-demo\n"
            "               --workers-per-node W`; one process a node, NODES * W workers, the\n"
            "               decoder only, on the CPU; rank 0 prints (the others are their\n"
            "               nodes' agents) and the tokens are those of one process\n"
            "  --mlp-only   run the earlier main job instead: one MLP block, y = gelu(x W1)\n"
            "               W2, W1 split by columns, W2 by rows; --batch B rows of x\n"
            "               (default 8), --steps S timed steps (default 20)\n"
            "  --hold SECONDS  after the decoder's figures, run its steps again and again\n"
            "               for SECONDS, or until SIGTERM or SIGINT, so that `disco top PID`\n"
            "               and `disco dump PID` have a busy session to watch\n"
            "  -n N         same as --workers\n",
            BU_MAX_CHILDREN, DEMO_DEC_MAX_PROMPT);
}

/* A positive integer option, or exit 2. */
static long opt_long(const char *name, const char *v, long lo, long hi)
{
    char *end;
    long x = v != NULL ? strtol(v, &end, 10) : 0;
    if (v == NULL || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "disco-demo: %s wants a number in %ld..%ld\n", name, lo, hi);
        exit(2);
    }
    return x;
}

/* --prompt: comma-separated token ids into d, or exit 2. */
static void opt_prompt(const char *v, demo_dec_opts_t *d)
{
    const char *p = v;
    d->nprompt = 0;
    while (p != NULL && *p != '\0' && d->nprompt < DEMO_DEC_MAX_PROMPT) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || (*end != ',' && *end != '\0'))
            break;
        d->prompt[d->nprompt++] = x;
        p = *end == ',' ? end + 1 : end;
    }
    if (v == NULL || p == NULL || *p != '\0' || d->nprompt == 0) {
        fprintf(stderr, "disco-demo: --prompt wants 1..%d comma-separated token ids >= 0\n",
                DEMO_DEC_MAX_PROMPT);
        exit(2);
    }
}

/* Refuses (exit 2) a decoder the workers cannot shard or run. */
static void check_decoder(const demo_dec_opts_t *d)
{
    const char *why = NULL;
    if (d->heads < d->workers || d->d_ff < d->workers)
        why = "--heads and --d-ff must be at least the number of workers";
    else if (d->d_model % d->heads != 0 || (d->d_model / d->heads) % 2 != 0)
        why = "--d-model must be --heads times an even head size";
    for (int i = 0; i < d->nprompt && why == NULL; i++)
        if (d->prompt[i] >= d->vocab)
            why = "a --prompt token id is not below --vocab";
    if (why != NULL) {
        fprintf(stderr,
                "disco-demo: %s (vocab %lld, d_model %lld, heads %lld, d_ff %lld, %d "
                "workers)\n",
                why, (long long)d->vocab, (long long)d->d_model, (long long)d->heads,
                (long long)d->d_ff, d->workers);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    bu_cpus_init();
    long n = bu_ncpus < 2 ? 2 : bu_ncpus > 8 ? 8 : bu_ncpus;
    demo_mlp_opts_t o = {.batch = 8, .d_model = 256, .d_ff = 1024, .steps = 20, .seed = 1};
    demo_dec_opts_t d = {.vocab = 512,
                         .d_model = 256,
                         .layers = 4,
                         .heads = 8,
                         .d_ff = 1024,
                         .prompt = {1, 2, 3, 4, 5, 6, 7, 8},
                         .nprompt = 8,
                         .tokens = 32,
                         .seed = 1,
                         .trace_path = "disco-demo-trace.json"};
    bool mlp_only = false, decoder_only = false, device_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--workers") == 0) {
            n = opt_long(a, v, 1, BU_MAX_CHILDREN), i++;
        } else if (strcmp(a, "--batch") == 0) {
            o.batch = opt_long(a, v, 1, 4096), i++;
        } else if (strcmp(a, "--d-model") == 0) {
            o.d_model = d.d_model = opt_long(a, v, 1, 16384), i++;
        } else if (strcmp(a, "--d-ff") == 0) {
            o.d_ff = d.d_ff = opt_long(a, v, 1, 65536), i++;
        } else if (strcmp(a, "--steps") == 0) {
            o.steps = (int)opt_long(a, v, 1, 1000), i++;
        } else if (strcmp(a, "--vocab") == 0) {
            d.vocab = opt_long(a, v, 1, 1 << 20), i++;
        } else if (strcmp(a, "--layers") == 0) {
            d.layers = opt_long(a, v, 1, 64), i++;
        } else if (strcmp(a, "--heads") == 0) {
            d.heads = opt_long(a, v, 1, 4096), i++;
        } else if (strcmp(a, "--tokens") == 0) {
            d.tokens = (int)opt_long(a, v, 1, 256), i++;
        } else if (strcmp(a, "--prompt") == 0) {
            opt_prompt(v, &d), i++;
        } else if (strcmp(a, "--seed") == 0) {
            o.seed = d.seed = (uint64_t)opt_long(a, v, 0, LONG_MAX), i++;
        } else if (strcmp(a, "--device") == 0 && v != NULL) {
            if (strcmp(v, "cpu") != 0 && strcmp(v, "sim") != 0 && strcmp(v, "cuda") != 0) {
                fprintf(stderr, "disco-demo: --device wants cpu, sim or cuda, not %s\n", v);
                return 2;
            }
            d.device = v[0] == 's' ? kDLExtDev : v[1] == 'u' ? kDLCUDA : kDLCPU, i++;
            device_set = true;
        } else if (strcmp(a, "--weights") == 0 && v != NULL) {
            d.weights_path = v, i++;
        } else if (strcmp(a, "--save-weights") == 0 && v != NULL) {
            d.save_path = v, i++;
        } else if (strcmp(a, "--trace") == 0 && v != NULL) {
            d.trace_path = v, i++;
        } else if (strcmp(a, "--json") == 0 && v != NULL) {
            d.json_path = v, i++;
        } else if (strcmp(a, "--hold") == 0) {
            d.hold_s = (double)opt_long(a, v, 1, 86400), i++;
        } else if (strcmp(a, "--mlp-only") == 0) {
            mlp_only = true;
        } else if (strcmp(a, "--decoder-only") == 0) {
            decoder_only = true;
        } else if (strcmp(a, "--controller-driven") == 0) {
            d.controller_driven = true;
        } else if (strcmp(a, "--workers-per-node") == 0) {
            d.workers_per_node = (int)opt_long(a, v, 1, BU_MAX_CHILDREN), i++;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (d.workers_per_node > 0) { /* across nodes: the decoder on the CPU */
        const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
        if (size == NULL || atoi(size) < 1 || mlp_only || (device_set && d.device != kDLCPU)) {
            fprintf(stderr, "disco-demo: --workers-per-node runs the decoder on the CPU under "
                            "mpirun: mpirun -np NODES disco-demo --workers-per-node W\n");
            return 2;
        }
        n = (long)atoi(size) * d.workers_per_node;
        decoder_only = true, device_set = true, d.device = kDLCPU;
        if (rank != NULL && atoi(rank) != 0 && freopen("/dev/null", "w", stdout) == NULL)
            return 1; /* an agent: rank 0 speaks for the session */
    }
    o.workers = d.workers = (int)n;
    if (mlp_only && o.d_ff < n) {
        fprintf(stderr, "disco-demo: --d-ff %lld is smaller than %ld workers\n", (long long)o.d_ff,
                n);
        return 2;
    }
    if (!mlp_only)
        check_decoder(&d);
    if (!device_set) /* cuda when a GPU is present, else cpu */
        d.device = demo_cuda_present() ? kDLCUDA : kDLCPU;
    o.device = d.device, o.trace_path = d.trace_path, o.json_path = d.json_path;
    if (!demo_device_ready(d.device, (int)n))
        return 1;
    char lib[4096];
    demo_library_path(lib, sizeof lib);
    if (mlp_only) {
        bool mlp = demo_mlp(&o, lib);
        printf("\n%s\n", mlp ? "demo: the sharded MLP matched the reference"
                             : "demo: the sharded MLP did NOT match (see above)");
        return mlp ? 0 : 1;
    }
    bool dec = demo_decoder(&d, lib);
    printf("\n%s\n", dec ? "demo: the sharded decoder matched the reference"
                         : "demo: the sharded decoder did NOT match (see above)");
    if (decoder_only)
        return dec ? 0 : 1;
    printf("\n== the control plane: rings between a controller and %ld workers\n", n);
    bu_watchdog(60); /* the demo takes ~1 s; past 30 s something hangs */
    cluster_t c;
    bool ok = true;
    printf("disco-demo: controller %d, %ld workers, %d cpus\n", (int)getpid(), n, bu_ncpus);
    cluster_start(&c, (uint32_t)n);

    static const uint64_t ks[] = {10, 1000, 123456, 10000000};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        ok = demo_sum(&c, ks[i]) && ok;

    double bcast = median_rounds(&c, ack_round, 11, 500, &ok);
    ok = cluster_stop(&c) && ok;
    printf("shutdown: all %ld workers acknowledged and exited\n", n);

    cluster_start(&c, 1);
    double rtt = median_rounds(&c, ping_round, 11, 20000, &ok);
    ok = cluster_stop(&c) && ok;

    printf("round trip, 64-byte message, 1 worker:      %8.0f ns (median of 11 x 20000)\n", rtt);
    printf("broadcast + %2ld acks, 64-byte command:       %8.0f ns (median of 11 x 500)\n", n,
           bcast);
    ok = demo_session((int)n) && ok;
    ok = dec && ok;
    printf("\n%s\n", ok ? "demo: every reply checked out" : "demo: WRONG replies (see above)");
    return ok ? 0 : 1;
}
