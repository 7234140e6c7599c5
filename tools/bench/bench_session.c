/* bench_session.c - disco-bench's session figures: a no-op call on every
 * worker plus a sync, over rings and over pipes (the same session code), and
 * the cost of opening a session. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "disco/session.h"

#define BATCH 256 /* results freed between timed batches */

typedef struct call_ctx {
    disco_session_t *s;
    disco_dref_t noop;
    int target; /* the worker synced: 1 (the first process worker) */
} call_ctx_t;

/* One round: call disco.noop on every worker, sync worker 1. The result
 * registers are freed between timed batches, so the register file stays
 * small and the frees are not counted. */
static int64_t call_rounds(void *p, uint64_t iters)
{
    call_ctx_t *c = p;
    disco_dref_t res[BATCH];
    int64_t total = 0;
    while (iters > 0) {
        uint64_t n = iters < BATCH ? iters : BATCH;
        int64_t t0 = disco_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            bu_check(disco_session_call(c->s, c->noop, NULL, 0, &res[i]), "call disco.noop");
            bu_check(disco_session_sync(c->s, c->target), "sync");
        }
        total += disco_now_ns() - t0;
        for (uint64_t i = 0; i < n; i++)
            bu_check(disco_session_free_reg(c->s, res[i]), "free");
        iters -= n;
    }
    return total;
}

/* pinned: with 2 workers, the controller (worker 0) on the first CPU and
 * worker 1 on the second, as the floor and ring figures are measured (and as
 * a placement policy would put them); otherwise every process floats
 * (placement none: the default would bind them). */
static double call_sync_traced(int n, disco_session_transport_t transport, bool pinned, bool trace)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.transport = transport;
    cfg.trace_off = !trace;
    cfg.call_timeout_ms = 10000;
    if (!pinned)
        cfg.place.policy = DISCO_PLACE_NONE;
    call_ctx_t c = {.target = 1};
    bu_unpin(); /* workers inherit the controller's mask */
    bu_check(disco_session_open(&cfg, &c.s), "open session");
    if (pinned && bu_ncpus >= 2) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(bu_cpu_ids[1], &set);
        if (sched_setaffinity(disco_session_worker_pid(c.s, 1), sizeof set, &set) != 0)
            bu_die("pin worker 1: %s", strerror(errno));
        bu_pin(0);
    }
    bu_check(disco_session_get_func(c.s, "disco.noop", &c.noop), "get disco.noop");
    double ns = measure(call_rounds, &c);
    disco_session_close(c.s);
    bu_unpin();
    return ns;
}

static double call_sync(int n, disco_session_transport_t transport, bool pinned)
{
    return call_sync_traced(n, transport, pinned, true);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The tail with the defaults, as a user gets them: 2 workers, placement,
 * spin and tracing left alone (the bench pins nothing), a no-op call on
 * every worker + sync worker 1, each round timed on its own; the 99th
 * percentile of 2000 rounds per repetition (30000 by default), after a
 * warm-up, in ns. The default placement is judged by it: a floating
 * controller is often put on worker 1's CPU by the kernel, and the p99 then
 * reads 9-10 us against a median of 0.3 us. */
static double call_sync_p99(void)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.call_timeout_ms = 10000;
    call_ctx_t c = {.target = 1};
    bu_unpin();
    bu_check(disco_session_open(&cfg, &c.s), "open session");
    bu_check(disco_session_get_func(c.s, "disco.noop", &c.noop), "get disco.noop");
    call_rounds(&c, 2000); /* warm-up */
    size_t n = (size_t)bench_reps() * 2000, done = 0;
    int64_t *lat = malloc(n * sizeof *lat);
    if (lat == NULL)
        bu_die("out of memory");
    disco_dref_t res[BATCH];
    while (done < n) {
        size_t k = n - done < BATCH ? n - done : BATCH;
        for (size_t i = 0; i < k; i++) {
            int64_t t0 = disco_now_ns();
            bu_check(disco_session_call(c.s, c.noop, NULL, 0, &res[i]), "call disco.noop");
            bu_check(disco_session_sync(c.s, c.target), "sync");
            lat[done + i] = disco_now_ns() - t0;
        }
        for (size_t i = 0; i < k; i++)
            bu_check(disco_session_free_reg(c.s, res[i]), "free");
        done += k;
    }
    disco_session_close(c.s);
    qsort(lat, n, sizeof *lat, cmp_i64);
    double p99 = (double)lat[(n - 1) * 99 / 100];
    free(lat);
    return p99;
}

/* Tracing's cost: call_sync_ns with command stamps on and off, alternated
 * five times so drift in the machine hits both alike; medians of each. */
static void trace_overhead(void)
{
    double on[5], off[5];
    for (int i = 0; i < 5; i++) {
        off[i] = call_sync_traced(2, DISCO_TRANSPORT_RING, true, false);
        on[i] = call_sync_traced(2, DISCO_TRANSPORT_RING, true, true);
    }
    double a = bu_median(on, 5), b = bu_median(off, 5);
    record("call_sync_traced_ns", a, "ns");
    record("call_sync_untraced_ns", b, "ns");
    record("trace_overhead_pct", 100.0 * (a - b) / b, "%");
}

static double open_close_ms(int n)
{
    double v[64] = {0};
    int reps = bench_reps();
    bu_unpin();
    for (int r = 0; r < reps; r++) {
        disco_session_config_t cfg = disco_session_config_default(n);
        disco_session_t *s;
        int64_t t0 = disco_now_ns();
        bu_check(disco_session_open(&cfg, &s), "open session");
        disco_session_close(s);
        v[r] = (double)(disco_now_ns() - t0) / 1e6;
    }
    return bu_median(v, reps);
}

void bench_session(void)
{
    record("call_sync_ns", call_sync(2, DISCO_TRANSPORT_RING, true), "ns");
    record("call_sync_p99_ns", call_sync_p99(), "ns");
    record("call_sync_pipe_ns", call_sync(2, DISCO_TRANSPORT_PIPE, true), "ns");
    record("call_sync_float_ns", call_sync(2, DISCO_TRANSPORT_RING, false), "ns");
    record("call_sync_ns_n4", call_sync(4, DISCO_TRANSPORT_RING, false), "ns");
    record("call_sync_pipe_ns_n4", call_sync(4, DISCO_TRANSPORT_PIPE, false), "ns");
    record("call_sync_ns_n8", call_sync(8, DISCO_TRANSPORT_RING, false), "ns");
    record("call_sync_pipe_ns_n8", call_sync(8, DISCO_TRANSPORT_PIPE, false), "ns");
    record("session_open_ms_n8", open_close_ms(8), "ms");
    trace_overhead();
}
