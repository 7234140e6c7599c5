/*
 * disco-demo - a controller and N worker processes talking over disco rings.
 *
 *   disco-demo [-n N] [--help]
 *
 * Until the session layer exists, this shows what the control plane does
 * today: one memfd segment holds a broadcast ring (controller -> every
 * worker, one cursor each) and one reply ring per worker; the workers are
 * forked and inherit it.
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
 * Part two (demo_session.c) runs a Disco session over the same rings: worker
 * 0 in this process, workers 1..N-1 forked; it loads a library into every
 * worker, calls it, catches an error, and times calls over rings and pipes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "demo.h"

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
            "usage: disco-demo [-n N] [--help]\n"
            "  -n N    workers (1..%d, default 4)\n"
            "A controller broadcasts commands to N forked workers over disco's\n"
            "shared-memory rings, checks every reply, and prints the latencies.\n",
            BU_MAX_CHILDREN);
}

double demo_median(double *v, int n)
{
    return bu_median(v, n);
}

int main(int argc, char **argv)
{
    long n = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            char *end;
            n = strtol(argv[++i], &end, 10);
            if (*end != '\0' || n < 1 || n > BU_MAX_CHILDREN) {
                usage(stderr);
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    bu_cpus_init();
    bu_watchdog(30); /* the demo takes ~1 s; past 30 s something hangs */
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
    printf("\n%s\n", ok ? "demo: every reply checked out" : "demo: WRONG replies (see above)");
    return ok ? 0 : 1;
}
