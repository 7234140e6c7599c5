/* node_prog.c - the program the multi-node tests (test_node.c) run under
 * mpirun, one process a node; with --local it runs the same scenario in
 * one process on one node, so the two outputs can be compared.
 *
 *   node_prog SCENARIO WORKERS_PER_NODE [--local NODES]
 *
 * Rank 0 prints what it sees ("key value" lines) and exits 0 when the
 * scenario went as it expects, 1 otherwise; the agents' opens never return
 * (session.h). Scenarios:
 *   ids       every worker's global id and the world size; sync of each
 *   coll      allreduce (sum, max of i32, f32, f64), broadcast, allgather,
 *             scatter, send_recv and gather across nodes: checksums of
 *             every worker's result
 *   coll-sim  allreduce (sum, f32), allgather and gather of sim device
 *             tensors (DISCO_SIM_GPUS): staged through the host between
 *             nodes; checksums
 *   debug     debug set/get of a register on every worker
 *   error     a function that fails on the last worker only
 *   stream    20000 asynchronous calls, then a sync of every worker
 *   refuse    allreduce avg across nodes: DISCO_E_UNSUPPORTED
 *   ctx       in-worker collectives (comm.h) across the nodes, two steps
 *   ctx-more, ctx-more-sim  more of them: tests/node_comm.h
 *   kill-worker  a forked worker of the last node is killed
 *   kill-node    the last node's process is killed
 *   kill-ctl     the controller kills itself after the open
 *   spoof        the last node's agent sends up a forged reply, unasked:
 *                refused, naming the node
 *   drain        node 0's leader takes and drops 1 TiB announced by node 1:
 *                refused at once (no tensor of the session is that large)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/disco.h"
#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"
#include "tests/node_comm.h"
#include "tests/node_p2p.h"
#include "workers/core/ctx.h"
#include "workers/core/net.h"
#include "workers/core/protocol.h"

static int64_t counter; /* each worker process's own */

/* nt.fill(n, dtype): a tensor of n elements, element i = gid*1000 + i (as
 * the dtype holds it; f32/f64 exactly). */
static disco_status_t fill(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int64_t len = a[0].v.i;
    DLTensor *t;
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, a[1].v.dtype, &t);
    if (st != DISCO_OK)
        return st;
    int64_t g = disco_ctx_worker_id(ctx);
    for (int64_t i = 0; i < len; i++) {
        double v = (double)(g * 1000 + i % 997);
        switch (t->dtype.code * 100 + t->dtype.bits) {
        case kDLInt * 100 + 32:
            ((int32_t *)t->data)[i] = (int32_t)v;
            break;
        case kDLFloat * 100 + 32:
            ((float *)t->data)[i] = (float)v * 0.25f;
            break;
        default:
            ((double *)t->data)[i] = v * 0.125;
            break;
        }
    }
    *ret = disco_value_tensor(t);
    return DISCO_OK;
}

static disco_status_t fail_last(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)a, (void)n, (void)ret;
    if (disco_ctx_worker_id(ctx) == disco_ctx_world_size(ctx) - 1)
        return disco_ctx_fail(ctx, "worker %d fails on purpose", disco_ctx_worker_id(ctx));
    return DISCO_OK;
}

static disco_status_t count(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx, (void)a, (void)n;
    *ret = disco_value_int(++counter);
    return DISCO_OK;
}

/* nt.die(gid): the worker with that global id kills its own process. */
static disco_status_t die(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n, (void)ret;
    if (disco_ctx_worker_id(ctx) == a[0].v.i)
        raise(SIGKILL);
    return DISCO_OK;
}

/* nt.ctx(): in-worker collectives (<disco/comm.h>) across the nodes, each
 * checked here: allreduce (sum, int32, in place) over the world and over
 * the group (a node), allgather over the world, a barrier. Returns 0 or
 * fails naming the first wrong element. */
static disco_status_t ctx_coll(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)a, (void)n;
    enum { LEN = 300 };
    int64_t len = LEN, g = disco_ctx_worker_id(ctx), world = disco_ctx_world_size(ctx);
    int64_t all = LEN * world;
    DLDataType i32 = {kDLInt, 32, 1};
    DLTensor *x, *y, *z;
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, i32, &x);
    if (st == DISCO_OK)
        st = disco_ctx_empty(ctx, &len, 1, i32, &y);
    if (st == DISCO_OK)
        st = disco_ctx_empty(ctx, &all, 1, i32, &z);
    if (st != DISCO_OK)
        return st;
    for (int64_t i = 0; i < LEN; i++)
        ((int32_t *)x->data)[i] = (int32_t)(g * 1000 + i), ((int32_t *)y->data)[i] = 1;
    if ((st = disco_ctx_allgather(ctx, x, z, false)) != DISCO_OK ||
        (st = disco_ctx_allreduce(ctx, x, x, DISCO_REDUCE_SUM, false)) != DISCO_OK ||
        (st = disco_ctx_barrier(ctx, false)) != DISCO_OK ||
        (st = disco_ctx_allreduce(ctx, y, y, DISCO_REDUCE_SUM, true)) != DISCO_OK)
        return st;
    for (int64_t i = 0; i < LEN; i++) {
        int64_t want = 0;
        for (int64_t w = 0; w < world; w++)
            want += w * 1000 + i;
        if (((int32_t *)x->data)[i] != want)
            return disco_ctx_fail(ctx, "ctx allreduce [%lld]: %d, want %lld", (long long)i,
                                  ((int32_t *)x->data)[i], (long long)want);
    }
    for (int64_t i = 0; i < all; i++)
        if (((int32_t *)z->data)[i] != (int32_t)(i / LEN * 1000 + i % LEN))
            return disco_ctx_fail(ctx, "ctx allgather [%lld]: %d", (long long)i,
                                  ((int32_t *)z->data)[i]);
    *ret = disco_value_int(((int32_t *)y->data)[0]); /* the group's size */
    return DISCO_OK;
}

/* nt.spoof(gid, token): the worker with that global id, a node's worker 0
 * (in its agent's process), sends the controller a reply it was not asked
 * for: the reply a debug get with that token would get, holding 4242,
 * marked as the answer to the command running now. Then it fails, so that
 * its agent's error report follows the forged reply up (white-box: it
 * reaches the agent's link through the worker). */
static disco_status_t spoof(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n, (void)ret;
    if (disco_ctx_worker_id(ctx) != a[0].v.i)
        return DISCO_OK;
    disco_worker_t *w = ctx->worker;
    if (w == NULL || w->net == NULL)
        return disco_ctx_fail(ctx, "nt.spoof: worker %d has no node link", (int)a[0].v.i);
    disco_value_t v[2] = {disco_value_int(a[1].v.i), disco_value_int(4242)};
    char frame[256];
    size_t len;
    disco_status_t st = disco_frame_encode(DISCO_REPLY_OK, w->seq, v, 2, frame, sizeof frame, &len);
    if (st == DISCO_OK)
        st = disco__node_send_up(w->net->impl, DISCO_NODE_UP_REPLY, DISCO_OK, w->seq, frame, len);
    return st != DISCO_OK ? st : disco_ctx_fail(ctx, "spoofed");
}

/* nt.drain(gid, bytes): on that worker, a node's leader, the link's
 * receive of bytes from the next node into nothing, as a collective does
 * with bytes it cannot keep (bytes being what the peer announced). */
static disco_status_t drain(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n, (void)ret;
    if (disco_ctx_worker_id(ctx) != a[0].v.i)
        return DISCO_OK;
    struct disco__net *net = ctx->worker != NULL ? ctx->worker->net : NULL;
    if (net == NULL)
        return disco_ctx_fail(ctx, "nt.drain: worker %d has no node link", (int)a[0].v.i);
    disco_status_t st = net->recv(net, net->node + 1, NULL, (size_t)a[1].v.i);
    return st == DISCO_OK ? DISCO_OK : disco_ctx_fail(ctx, "%s", disco_last_error());
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        disco_status_t st_ = (x);                                                                  \
        if (st_ != DISCO_OK) {                                                                     \
            printf("fail %s: %s: %s\n", #x, disco_err_name(st_), disco_last_error());              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static uint64_t checksum(const disco_value_t *v)
{
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)v->v.bytes;
    for (uint32_t i = 0; i < v->len; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Prints the checksum of register r on every worker. */
static int print_all(disco_session_t *s, const char *what, disco_dref_t r)
{
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        printf("%s worker %d: %016llx\n", what, w, (unsigned long long)checksum(&v));
        disco_value_clear(&v);
    }
    return 0;
}

static int ids(disco_session_t *s)
{
    disco_dref_t id, size;
    CHECK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &id));
    CHECK(disco_session_call_by_name(s, "disco.world_size", NULL, 0, &size));
    printf("num_workers %d\n", disco_session_num_workers(s));
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t a, b;
        CHECK(disco_session_sync(s, w));
        CHECK(disco_session_debug_get(s, id, w, &a));
        CHECK(disco_session_debug_get(s, size, w, &b));
        printf("worker %d: id %lld of %lld\n", w, (long long)a.v.i, (long long)b.v.i);
        if (a.v.i != w || b.v.i != disco_session_num_workers(s))
            return 1;
    }
    return 0;
}

static int coll(disco_session_t *s)
{
    const char *dts[] = {"int32", "float32", "float64"};
    const char *ops[] = {"sum", "max"};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 2; o++) {
            disco_value_t fa[2] = {disco_value_int(100003), disco_value_str(dts[d])};
            disco_dref_t x, y;
            CHECK(disco_session_call_by_name(s, "nt.fill", fa, 2, &x));
            disco_value_t ra[2] = {{.type = DISCO_T_DREF, .v.reg = x}, disco_value_str(ops[o])};
            CHECK(disco_session_call_by_name(s, "disco.allreduce", ra, 2, &y));
            char what[64];
            snprintf(what, sizeof what, "allreduce %s %s", dts[d], ops[o]);
            if (print_all(s, what, y))
                return 1;
            CHECK(disco_session_free_reg(s, x));
            CHECK(disco_session_free_reg(s, y));
        }
    disco_value_t fa[2] = {disco_value_int(5000), disco_value_str("float32")};
    disco_dref_t x, y, g, a;
    CHECK(disco_session_call_by_name(s, "nt.fill", fa, 2, &x));
    disco_value_t ba[1] = {{.type = DISCO_T_DREF, .v.reg = x}};
    CHECK(disco_session_call_by_name(s, "disco.broadcast_from_worker0", ba, 1, &y));
    if (print_all(s, "broadcast float32", y))
        return 1;
    CHECK(disco_session_call_by_name(s, "disco.allgather", ba, 1, &a));
    if (print_all(s, "allgather float32", a))
        return 1;
    disco_value_t sa[2] = {disco_value_int(1000 * disco_session_num_workers(s)),
                           disco_value_str("float64")};
    disco_dref_t big, part;
    CHECK(disco_session_call_by_name(s, "nt.fill", sa, 2, &big));
    disco_value_t pa[1] = {{.type = DISCO_T_DREF, .v.reg = big}};
    CHECK(disco_session_call_by_name(s, "disco.scatter_from_worker0", pa, 1, &part));
    if (print_all(s, "scatter float64", part))
        return 1;
    int last = disco_session_num_workers(s) - 1;
    int pairs[3][2] = {{0, last}, {last, 1}, {last, last}};
    for (int i = 0; i < 3; i++) {
        disco_value_t sr[3] = {{.type = DISCO_T_DREF, .v.reg = big},
                               disco_value_int(pairs[i][0]),
                               disco_value_int(pairs[i][1])};
        disco_dref_t got;
        CHECK(disco_session_call_by_name(s, "disco.send_recv", sr, 3, &got));
        char what[64];
        snprintf(what, sizeof what, "send_recv %d -> %d", pairs[i][0], pairs[i][1]);
        if (print_all(s, what, got))
            return 1;
        CHECK(disco_session_free_reg(s, got));
    }
    CHECK(disco_session_call_by_name(s, "disco.gather_to_worker0", ba, 1, &g));
    disco_value_t v;
    CHECK(disco_session_debug_get(s, g, 0, &v));
    printf("gather float32 worker 0: %u bytes, %016llx\n", v.len, (unsigned long long)checksum(&v));
    disco_value_clear(&v);
    CHECK(disco_session_debug_get(s, g, disco_session_num_workers(s) - 1, &v));
    printf("gather float32 last worker: %s\n", disco_type_name(v.type));
    disco_value_clear(&v);
    return 0;
}

static int coll_sim(disco_session_t *s)
{
    int64_t n = 30001; /* allgather of 6 x 120 KB still fits a reply (1 MiB) */
    disco_value_t fa[2] = {disco_value_int(n), disco_value_str("float32")};
    disco_dref_t x, d, y, nul;
    CHECK(disco_session_call_by_name(s, "nt.fill", fa, 2, &x));
    disco_value_t ea[4] = {disco_value_shape(&n, 1), disco_value_str("float32"),
                           disco_value_device((DLDevice){kDLExtDev, 0}), disco_value_bool(false)};
    CHECK(disco_session_call_by_name(s, "disco.empty", ea, 4, &d));
    disco_value_t ca[2] = {{.type = DISCO_T_DREF, .v.reg = d}, {.type = DISCO_T_DREF, .v.reg = x}};
    CHECK(disco_session_call_by_name(s, "disco.copy_into", ca, 2, &nul));
    disco_value_t ra[2] = {{.type = DISCO_T_DREF, .v.reg = d}, disco_value_str("sum")};
    CHECK(disco_session_call_by_name(s, "disco.allreduce", ra, 2, &y));
    if (print_all(s, "sim allreduce float32 sum", y))
        return 1;
    disco_dref_t ag, g;
    disco_value_t da[1] = {{.type = DISCO_T_DREF, .v.reg = d}};
    CHECK(disco_session_call_by_name(s, "disco.allgather", da, 1, &ag));
    if (print_all(s, "sim allgather float32", ag))
        return 1;
    CHECK(disco_session_call_by_name(s, "disco.gather_to_worker0", da, 1, &g));
    return print_all(s, "sim gather float32", g);
}

static int debug(disco_session_t *s)
{
    disco_dref_t r;
    CHECK(disco_session_alloc_reg(s, &r));
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t iv = disco_value_int(w * 7 + 1);
        CHECK(disco_session_debug_set(s, r, w, &iv));
    }
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        printf("worker %d: %lld\n", w, (long long)v.v.i);
        if (v.v.i != w * 7 + 1)
            return 1;
    }
    disco_value_t v;
    disco_status_t st = disco_session_debug_get(s, 999, 0, &v);
    printf("bad register: %s\n", disco_err_name(st));
    st = disco_session_sync(s, disco_session_num_workers(s));
    printf("no such worker: %s: %s\n", disco_err_name(st), disco_last_error());
    return st == DISCO_E_INVAL ? 0 : 1;
}

static int error(disco_session_t *s)
{
    disco_dref_t r;
    CHECK(disco_session_call_by_name(s, "nt.fail_last", NULL, 0, &r));
    int last = disco_session_num_workers(s) - 1;
    disco_status_t st = disco_session_sync(s, last);
    printf("sync: %s: %s\n", disco_err_name(st), disco_last_error());
    if (st != DISCO_E_REMOTE)
        return 1;
    CHECK(disco_session_sync(s, last));
    CHECK(disco_session_sync(s, 0));
    printf("usable: %s\n", disco_err_name(disco_session_health(s)));
    return 0;
}

static int stream(disco_session_t *s)
{
    disco_dref_t f, r = 0;
    CHECK(disco_session_get_func(s, "nt.count", &f));
    for (int i = 0; i < 20000; i++) {
        if (r != 0)
            CHECK(disco_session_free_reg(s, r));
        CHECK(disco_session_call(s, f, NULL, 0, &r));
    }
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        printf("worker %d: %lld calls\n", w, (long long)v.v.i);
        if (v.v.i != 20000)
            return 1;
    }
    return 0;
}

static int refuse(disco_session_t *s)
{
    disco_value_t fa[2] = {disco_value_int(8), disco_value_str("int32")};
    disco_dref_t x, y;
    CHECK(disco_session_call_by_name(s, "nt.fill", fa, 2, &x));
    disco_value_t av[2] = {{.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("avg")};
    CHECK(disco_session_call_by_name(s, "disco.allreduce", av, 2, &y));
    disco_status_t st = disco_session_sync(s, disco_session_num_workers(s) - 1);
    printf("allreduce avg: %s: %s\n", disco_err_name(st), disco_last_error());
    /* In-group collectives stay in a node: one group a node here. */
    disco_value_t ia[3] = {
        {.type = DISCO_T_DREF, .v.reg = x}, disco_value_str("sum"), disco_value_bool(true)};
    CHECK(disco_session_call_by_name(s, "disco.allreduce", ia, 3, &y));
    CHECK(disco_session_sync(s, disco_session_num_workers(s) - 1));
    if (print_all(s, "in-group allreduce", y))
        return 1;
    return st == DISCO_E_UNSUPPORTED ? 0 : 1;
}

/* Two steps of nt.ctx, each one call_sync_all; prints each worker's group
 * size as its allreduce over the group counted it. */
static int ctx(disco_session_t *s)
{
    disco_dref_t f, r;
    CHECK(disco_session_get_func(s, "nt.ctx", &f));
    for (int k = 0; k < 2; k++) {
        CHECK(disco_session_call_sync_all(s, f, NULL, 0, &r));
        for (int w = 0; w < disco_session_num_workers(s); w++) {
            disco_value_t v;
            CHECK(disco_session_debug_get(s, r, w, &v));
            if (k == 1)
                printf("ctx worker %d: group of %lld\n", w, (long long)v.v.i);
        }
        CHECK(disco_session_free_reg(s, r));
    }
    return 0;
}

static int kill_one(disco_session_t *s, int gid)
{
    disco_value_t a[1] = {disco_value_int(gid)};
    disco_dref_t r;
    CHECK(disco_session_call_by_name(s, "nt.die", a, 1, &r));
    int64_t t0 = disco_now_ns();
    disco_status_t st = disco_session_sync(s, disco_session_num_workers(s) - 1);
    printf("sync: %s: %s\n", disco_err_name(st), disco_last_error());
    printf("sync took %lld ms\n", (long long)((disco_now_ns() - t0) / 1000000));
    disco_status_t st2 = disco_session_sync(s, 0);
    printf("then: %s\n", disco_err_name(st2));
    return st == DISCO_E_WORKER_DIED && st2 == DISCO_E_BROKEN ? 0 : 1;
}

/* The last node's agent forges the reply to the next debug get (its
 * token, a value of its own) and sends it up unasked, then its error
 * report. The controller syncs another node until an error comes: the
 * forged reply, which came first, is refused then, naming its node.
 * (Before, it was taken silently and stood in for the answer to the debug
 * get that follows.) */
static int spoofed(disco_session_t *s)
{
    int last = disco_session_num_workers(s) - 1;
    disco_dref_t id, r;
    CHECK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &id));
    CHECK(disco_session_sync(s, last));
    int64_t token = s->token + 1; /* the next debug get's (white-box) */
    disco_value_t a[2] = {disco_value_int(last), disco_value_int(token)};
    CHECK(disco_session_call_by_name(s, "nt.spoof", a, 2, &r));
    CHECK(disco_session_free_reg(s, r));
    int64_t deadline = disco_now_ns() + 10000000000LL;
    disco_status_t st;
    while ((st = disco_session_sync(s, 0)) == DISCO_OK && disco_now_ns() < deadline)
        ; /* node 0 holds no forger: each sync reads what came up */
    printf("sync: %s: %s\n", disco_err_name(st), disco_last_error());
    char node[32];
    snprintf(node, sizeof node, "node %d:", last / s->world);
    bool refused = strstr(disco_last_error(), "a reply nobody asked for") != NULL &&
                   strstr(disco_last_error(), node) != NULL;
    if (st == DISCO_E_REMOTE) { /* the forged reply was taken: it answers */
        disco_value_t v = disco_value_null();
        st = disco_session_debug_get(s, id, last, &v);
        printf("get: %s: %s\n", disco_err_name(st), disco_last_error());
        if (st == DISCO_OK)
            printf("value %lld\n", (long long)v.v.i);
    }
    return refused ? 0 : 1;
}

/* A receive into nothing of a size no tensor of the session can have (1
 * TiB; a peer's word) is refused at once, naming the node, before any
 * memory is taken or any byte waited for. */
static int drain_bound(disco_session_t *s)
{
    disco_value_t a[2] = {disco_value_int(0), disco_value_int(INT64_C(1) << 40)};
    disco_dref_t r;
    int64_t t0 = disco_now_ns();
    CHECK(disco_session_call_by_name(s, "nt.drain", a, 2, &r));
    disco_status_t st = disco_session_sync(s, 0);
    long long ms = (long long)((disco_now_ns() - t0) / 1000000);
    printf("drain: %s: %s\n", disco_err_name(st), disco_last_error());
    printf("drain took %lld ms\n", ms);
    return st == DISCO_E_REMOTE && strstr(disco_last_error(), "node 1 announced") != NULL &&
                   ms < 5000
               ? 0
               : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SCENARIO WORKERS_PER_NODE [--local NODES]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *sc = argv[1];
    int wpn = atoi(argv[2]);
    disco_register_func("nt.fill", "it", fill);
    disco_register_func("nt.fail_last", "", fail_last);
    disco_register_func("nt.count", "", count);
    disco_register_func("nt.die", "i", die);
    disco_register_func("nt.ctx", "", ctx_coll);
    disco_register_func("nt.spoof", "ii", spoof);
    disco_register_func("nt.drain", "ii", drain);
    node_comm_register();
    node_p2p_register();
    disco_session_config_t cfg = disco_session_config_default(0);
    cfg.call_timeout_ms = 10000;
    if (getenv("NODE_PROG_CALL_MS") != NULL) /* a shorter one, for tests that reach it */
        cfg.call_timeout_ms = (uint32_t)atoi(getenv("NODE_PROG_CALL_MS"));
    if (argc >= 5 && strcmp(argv[3], "--local") == 0) {
        cfg.num_workers = wpn * atoi(argv[4]);
        cfg.num_groups = atoi(argv[4]);
    } else {
        cfg.nodes = DISCO_NODES_MPI;
        cfg.workers_per_node = wpn;
        cfg.num_groups =
            atoi(getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : "1");
    }
    disco_session_t *s;
    disco_status_t st = disco_session_open(&cfg, &s);
    if (st != DISCO_OK) {
        printf("open: %s: %s\n", disco_err_name(st), disco_last_error());
        return strcmp(sc, "open-fails") == 0 ? 0 : 1;
    }
    int rc = node_comm_scenario(s, sc, wpn);
    if (rc < 0)
        rc = node_p2p_scenario(s, sc, wpn);
    if (rc >= 0)
        ; /* one of tests/node_comm.c's */
    else if (strcmp(sc, "ids") == 0)
        rc = ids(s);
    else if (strcmp(sc, "coll") == 0)
        rc = coll(s);
    else if (strcmp(sc, "ctx") == 0)
        rc = ctx(s);
    else if (strcmp(sc, "coll-sim") == 0)
        rc = coll_sim(s);
    else if (strcmp(sc, "debug") == 0)
        rc = debug(s);
    else if (strcmp(sc, "error") == 0)
        rc = error(s);
    else if (strcmp(sc, "stream") == 0)
        rc = stream(s);
    else if (strcmp(sc, "refuse") == 0)
        rc = refuse(s);
    else if (strcmp(sc, "spoof") == 0)
        rc = spoofed(s);
    else if (strcmp(sc, "drain") == 0)
        rc = drain_bound(s);
    else if (strcmp(sc, "kill-worker") == 0)
        rc = kill_one(s, disco_session_num_workers(s) - 1);
    else if (strcmp(sc, "kill-node") == 0)
        rc = kill_one(s, disco_session_num_workers(s) - wpn);
    else if (strcmp(sc, "kill-ctl") == 0) {
        disco_dref_t r;
        disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &r);
        disco_session_sync(s, disco_session_num_workers(s) - 1);
        /* The monotonic clock is the machine's: the test measures from
         * here to the job's end. */
        printf("controller: dying at %lld ns\n", (long long)disco_now_ns());
        raise(SIGKILL);
        rc = 1;
    } else {
        fprintf(stderr, "unknown scenario %s\n", sc);
        rc = 2;
    }
    disco_session_close(s);
    printf("%s: %s\n", sc, rc == 0 ? "ok" : "FAILED");
    return rc;
}
