/* node_p2p.c - node_prog's scenarios of send and receive between any two
 * workers on two nodes (node_p2p.h), run by tests/test_node_p2p.c. Each
 * worker function checks every byte it receives itself and fails naming
 * the first wrong one. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/disco.h"
#include "disco/trace.h"
#include "scheduler/session/session_impl.h"
#include "tests/node_p2p.h"
#include "tests/node_check.h"
#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#include "workers/data/tensor_impl.h"
#ifdef DISCO_TEST_MPI /* white-box: a message forged on the forwarders' communicator */
#include "scheduler/node/node_fwd_impl.h"
#include "workers/core/net.h"
#endif

/* Byte i of what worker s sends in round k (a piece written at another
 * offset shows: the pattern repeats only every 65536 bytes). */
static uint8_t pat(int s, int k, size_t i)
{
    return (uint8_t)(s * 37 + k * 11 + i * 7 + (i >> 8));
}

/* A new tensor of dtype and shape on the host or (dev) the sim device,
 * holding worker s's bytes of round k (s < 0: zeros). */
disco_status_t node_p2p_make(disco_ctx_t *ctx, bool dev, DLDataType dt, const int64_t *shape,
                             int ndim, int s, int k, DLTensor **out)
{
    disco_status_t st = dev ? disco_ctx_empty_device(ctx, shape, ndim, dt, kDLExtDev, out)
                            : disco_ctx_empty(ctx, shape, ndim, dt, out);
    if (st != DISCO_OK)
        return st;
    size_t n = disco_tensor_nbytes(*out);
    uint8_t *v = malloc(n + 1);
    if (v == NULL)
        return disco_ctx_fail(ctx, "node_p2p: no memory");
    for (size_t i = 0; i < n; i++)
        v[i] = s < 0 ? 0 : pat(s, k, i);
    st = dev ? disco__tensor_from_host(*out, v) : (memcpy((*out)->data, v, n), DISCO_OK);
    free(v);
    return st;
}

/* Checks that t holds worker s's bytes of round k, every one. */
disco_status_t node_p2p_check(disco_ctx_t *ctx, const char *what, const DLTensor *t, int s, int k)
{
    size_t n = disco_tensor_nbytes(t);
    uint8_t *v = malloc(n + 1);
    if (v == NULL)
        return disco_ctx_fail(ctx, "node_p2p: no memory");
    disco_status_t st = disco__tensor_is_device(t) ? disco__tensor_to_host(t, v)
                                                   : (memcpy(v, t->data, n), DISCO_OK);
    for (size_t i = 0; st == DISCO_OK && i < n; i++)
        if (v[i] != pat(s, k, i))
            st = disco_ctx_fail(ctx,
                                "worker %d: %s from worker %d, round %d: byte %zu is %u, want %u",
                                disco_ctx_worker_id(ctx), what, s, k, i, v[i], pat(s, k, i));
    free(v);
    return st;
}

/* One send (from -> to) of its node-local ranks on two nodes; worker a
 * of node an is an * wpn + a. */
struct op {
    int fnode, frank, tnode, trank;
    DLDataType dt;
    int ndim;
    int64_t shape[3];
};

#define I32                                                                                        \
    {                                                                                              \
        kDLInt, 32, 1                                                                              \
    }
#define F64                                                                                        \
    {                                                                                              \
        kDLFloat, 64, 1                                                                            \
    }
#define U8                                                                                         \
    {                                                                                              \
        kDLUInt, 8, 1                                                                              \
    }
#define F32                                                                                        \
    {                                                                                              \
        kDLFloat, 32, 1                                                                            \
    }
#define I16                                                                                        \
    {                                                                                              \
        kDLInt, 16, 1                                                                              \
    }

/* In this order on every worker (each does its own part of each): leader
 * to non-leader, non-leader to leader, non-leader to non-leader, both
 * directions at once between the two nodes (leader and non-leader each
 * way, then the reverse; 300000 float32 go past MPI's eager size), then
 * leader to leader. Any order every worker follows is free of deadlock:
 * the first send not yet done has both its workers at it. */
static const struct op ops[] = {
    {0, 0, 1, 1, I32, 1, {300}},     {0, 1, 1, 0, F64, 2, {17, 5}},
    {0, 1, 1, 1, U8, 1, {1000}},     {0, 0, 1, 1, F32, 1, {300000}},
    {1, 0, 0, 1, F32, 1, {300000}},  {1, 1, 0, 0, I16, 3, {3, 4, 5}},
    {0, 1, 1, 0, I16, 3, {3, 4, 5}}, {0, 0, 1, 0, I32, 2, {2, 150}},
    {1, 0, 0, 0, U8, 1, {7}},
};

/* Runs op o's part of this worker (g), if any, round k. */
static disco_status_t run_op(disco_ctx_t *ctx, const struct op *o, int wpn, bool dev, int k)
{
    int g = disco_ctx_worker_id(ctx);
    int from = o->fnode * wpn + o->frank, to = o->tnode * wpn + o->trank;
    if (g != from && g != to)
        return DISCO_OK;
    DLTensor *t;
    disco_status_t st =
        node_p2p_make(ctx, dev, o->dt, o->shape, o->ndim, g == from ? g : -1, k, &t);
    if (st != DISCO_OK)
        return st;
    if (g == from)
        return disco_ctx_send(ctx, t, to);
    if ((st = disco_ctx_recv(ctx, t, from)) != DISCO_OK)
        return st;
    return node_p2p_check(ctx, "recv", t, from, k);
}

/* nt.p2p_pairs(wpn, dev): every op above, in order. Returns 1. */
static disco_status_t p2p_pairs(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    disco_status_t st = DISCO_OK;
    for (size_t i = 0; st == DISCO_OK && i < sizeof ops / sizeof ops[0]; i++)
        st = run_op(ctx, &ops[i], (int)a[0].v.i, a[1].v.b, (int)i);
    if (st == DISCO_OK)
        *ret = disco_value_int(1);
    return st;
}

/* nt.p2p_ring(wpn, dev): groups are the nodes; every worker of node k > 0
 * receives from the previous group (recv_from_prev_group), every worker
 * of a node but the last sends to the next (send_to_next_group), then the
 * last node's close the ring with a send to node 0's. Returns 1. */
static disco_status_t p2p_ring(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i;
    bool dev = a[1].v.b;
    int g = disco_ctx_worker_id(ctx), world = disco_ctx_world_size(ctx), nodes = world / wpn;
    int k = g / wpn;
    DLDataType f32 = F32;
    int64_t shape[2] = {3, 1000 + g % wpn};
    DLTensor *in, *out;
    disco_status_t st = node_p2p_make(ctx, dev, f32, shape, 2, -1, 0, &in);
    if (st == DISCO_OK)
        st = node_p2p_make(ctx, dev, f32, shape, 2, g, 1, &out);
    if (st == DISCO_OK && k > 0 && (st = disco_ctx_recv_from_prev_group(ctx, in)) == DISCO_OK)
        st = node_p2p_check(ctx, "recv_from_prev_group", in, g - wpn, 1);
    if (st == DISCO_OK && k < nodes - 1)
        st = disco_ctx_send_to_next_group(ctx, out);
    if (st == DISCO_OK && k == nodes - 1)
        st = disco_ctx_send(ctx, out, g % wpn);
    if (st == DISCO_OK && k == 0 &&
        (st = disco_ctx_recv(ctx, in, g + (nodes - 1) * wpn)) == DISCO_OK)
        st = node_p2p_check(ctx, "recv from the last node", in, g + (nodes - 1) * wpn, 1);
    if (st == DISCO_OK)
        *ret = disco_value_int(1);
    return st;
}

/* nt.p2p_repeat(wpn, count): count rounds, each a send from worker 1 to
 * worker wpn + 1 (non-leaders) and from worker wpn to worker 0 (leaders)
 * at once, the other way: every byte of every round checked. Returns the
 * rounds done. */
static disco_status_t p2p_repeat(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                 disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i, count = (int)a[1].v.i;
    struct op pair[2] = {{0, 1, 1, 1, I32, 1, {257}}, {1, 0, 0, 0, F64, 2, {3, 11}}};
    disco_status_t st = DISCO_OK;
    int k = 0;
    for (; st == DISCO_OK && k < count; k++)
        for (int i = 0; st == DISCO_OK && i < 2; i++)
            st = run_op(ctx, &pair[i], wpn, false, k);
    if (st == DISCO_OK)
        *ret = disco_value_int(k);
    return st;
}

/* nt.p2p_mismatch(wpn, dev): worker 1 sends to worker wpn + 1 (not
 * leaders) int32[300] which it receives as float32[300], then as
 * int32[301], then (dev) as a sim tensor; then worker 1 sends NULL (each
 * end writes its verdict to stderr); then a send that matches, which must
 * go through. Returns the words of each failure, one a line, as
 * "NAME: words" (every one must be DISCO_E_MISMATCH). */
static disco_status_t p2p_mismatch(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                   disco_value_t *ret)
{
    (void)n;
    static char words[2048]; /* this process's: one worker runs here at a time */
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    bool dev = a[1].v.b;
    words[0] = '\0';
    if (g != 1 && g != wpn + 1) {
        *ret = disco_value_str("");
        return DISCO_OK;
    }
    DLDataType i32 = I32, f32 = F32;
    struct {
        DLDataType dt;
        int64_t len;
        bool dev;
    } recv_as[3] = {{f32, 300, false}, {i32, 301, false}, {i32, 300, true}};
    int64_t len = 300;
    DLTensor *t;
    disco_status_t st;
    for (int i = 0; i < (dev ? 3 : 2); i++) {
        st = g == 1
                 ? node_p2p_make(ctx, false, i32, &len, 1, g, i, &t)
                 : node_p2p_make(ctx, recv_as[i].dev, recv_as[i].dt, &recv_as[i].len, 1, -1, 0, &t);
        if (st == DISCO_OK)
            st = g == 1 ? disco_ctx_send(ctx, t, wpn + 1) : disco_ctx_recv(ctx, t, 1);
        size_t used = strlen(words);
        snprintf(words + used, sizeof words - used, "%s: %s\n", disco_err_name(st),
                 st == DISCO_OK ? "" : disco_last_error());
    }
    /* The sender's own failure (no tensor): both ends fail with it, the
     * receiver in the sender's words, neither at the deadline. */
    if ((st = node_p2p_make(ctx, false, i32, &len, 1, -1, 0, &t)) != DISCO_OK)
        return st;
    st = g == 1 ? disco_ctx_send(ctx, NULL, wpn + 1) : disco_ctx_recv(ctx, t, 1);
    fprintf(stderr, "p2p-fail worker %d: %s: %s\n", g, disco_err_name(st),
            st == DISCO_OK ? "" : disco_last_error());
    if ((st = node_p2p_make(ctx, false, i32, &len, 1, g == 1 ? 1 : -1, 9, &t)) != DISCO_OK)
        return st;
    st = g == 1 ? disco_ctx_send(ctx, t, wpn + 1) : disco_ctx_recv(ctx, t, 1);
    if (st == DISCO_OK && g != 1)
        st = node_p2p_check(ctx, "recv after the mismatches", t, 1, 9);
    if (st != DISCO_OK)
        return st;
    *ret = disco_value_str(words);
    return DISCO_OK;
}

/* Computes (spins on the clock) for ms milliseconds: a worker busy before
 * its next call, not a wait for anything. */
static void compute(int64_t ms)
{
    int64_t end = disco_now_ns() + ms * 1000000;
    volatile uint64_t x = 0;
    while (disco_now_ns() < end)
        x = x * 31 + 7;
}

/* nt.p2p_failfirst(wpn, ms): worker 1 sends NULL to worker wpn + 1 (its
 * own failure), then a tensor of its round 9; worker wpn + 1 computes for
 * ms first, then receives twice. Each returns its two outcomes, one a
 * line, "NAME: words" (the receiver checks the second's bytes). */
static disco_status_t p2p_failfirst(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                    disco_value_t *ret)
{
    (void)n;
    static char words[2048]; /* this process's: one worker runs here at a time */
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    words[0] = '\0';
    if (g != 1 && g != wpn + 1) {
        *ret = disco_value_str("");
        return DISCO_OK;
    }
    DLDataType i32 = I32;
    int64_t len = 300;
    DLTensor *t;
    if (g == wpn + 1)
        compute(a[1].v.i);
    for (int i = 0; i < 2; i++) {
        disco_status_t st = node_p2p_make(ctx, false, i32, &len, 1, g == 1 ? 1 : -1, 9, &t);
        if (st == DISCO_OK && g == 1)
            st = disco_ctx_send(ctx, i == 0 ? NULL : t, wpn + 1);
        else if (st == DISCO_OK && (st = disco_ctx_recv(ctx, t, 1)) == DISCO_OK)
            st = node_p2p_check(ctx, "the send after a failed one", t, 1, 9);
        size_t used = strlen(words);
        snprintf(words + used, sizeof words - used, "%s: %s\n", disco_err_name(st),
                 st == DISCO_OK ? "" : disco_last_error());
    }
    *ret = disco_value_str(words);
    return DISCO_OK;
}

/* nt.p2p_late(wpn, ms): worker 1 computes for ms, then receives from worker
 * wpn + 1, which never sends (it returns at once). */
static disco_status_t p2p_late(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n, (void)ret;
    int wpn = (int)a[0].v.i;
    if (disco_ctx_worker_id(ctx) != 1)
        return DISCO_OK;
    DLDataType i32 = I32;
    int64_t len = 300;
    DLTensor *t;
    disco_status_t st = node_p2p_make(ctx, false, i32, &len, 1, -1, 0, &t);
    compute(a[1].v.i);
    return st != DISCO_OK ? st : disco_ctx_recv(ctx, t, wpn + 1);
}

/* nt.p2p_forge(wpn, ms), on three nodes: node 2's leader forges a DATA
 * for worker 1 (node 0) naming worker wpn + 1 (node 1) as its sender, for
 * worker 1's first receive from it in this command, and sends it to node
 * 0's forwarder (white-box: on the forwarders' communicator); worker wpn
 * + 1 computes for ms, then sends its real tensor (round 5); worker 1
 * receives from it and checks every byte. Returns 1. */
static disco_status_t p2p_forge(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    DLDataType i32 = I32;
    int64_t len = 300;
    DLTensor *t;
    disco_status_t st = DISCO_OK;
    if (g == 2 * wpn) {
#ifdef DISCO_TEST_MPI
        disco_worker_t *w = ctx->worker;
        struct disco__node *node = w->net != NULL ? w->net->impl : NULL;
        if (node == NULL)
            return disco_ctx_fail(ctx, "nt.p2p_forge: worker %d has no node link", g);
        struct {
            struct wire_head h;
            int32_t v[300];
        } m;
        memset(&m, 0, sizeof m);
        m.h = (struct wire_head){.seq = w->seq, .ticket = 1, .from = wpn + 1, .to = 1, .nth = 1};
        m.h.desc.ndim = 1;
        m.h.desc.dtype = i32;
        m.h.desc.nbytes = sizeof m.v;
        m.h.desc.shape[0] = len;
        memset(m.v, 0x5a, sizeof m.v);
        if (MPI_Send(&m, (int)sizeof m, MPI_BYTE, 0, TAG_DATA, node->fwd) != MPI_SUCCESS)
            return disco_ctx_fail(ctx, "nt.p2p_forge: MPI_Send failed");
#else
        return disco_ctx_fail(ctx, "nt.p2p_forge: this build has no MPI");
#endif
    } else if (g == wpn + 1) {
        compute(a[1].v.i);
        if ((st = node_p2p_make(ctx, false, i32, &len, 1, g, 5, &t)) == DISCO_OK)
            st = disco_ctx_send(ctx, t, 1);
    } else if (g == 1) {
        if ((st = node_p2p_make(ctx, false, i32, &len, 1, -1, 0, &t)) == DISCO_OK &&
            (st = disco_ctx_recv(ctx, t, wpn + 1)) == DISCO_OK)
            st = node_p2p_check(ctx, "recv beside a forged send", t, wpn + 1, 5);
    }
    if (st == DISCO_OK)
        *ret = disco_value_int(1);
    return st;
}

/* nt.p2p_nosink(wpn): worker wpn (node 1's leader: its agent relays
 * nothing else meanwhile) sends 1 MiB (past MPI's eager size) to worker 1
 * (node 0), which returns at once without receiving; the send fails at
 * its deadline. */
static disco_status_t p2p_nosink(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                 disco_value_t *ret)
{
    (void)n, (void)ret;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    if (g != wpn)
        return DISCO_OK;
    DLDataType u8 = U8;
    int64_t len = 1 << 20;
    DLTensor *t;
    disco_status_t st = node_p2p_make(ctx, false, u8, &len, 1, g, 0, &t);
    return st != DISCO_OK ? st : disco_ctx_send(ctx, t, 1);
}

/* nt.p2p_nopeer(wpn, which): which 0: worker 1 sends to worker wpn + 1,
 * which returns at once; which 1: worker wpn + 1 receives from worker 1,
 * which returns at once. The one left alone fails (its deadline). */
static disco_status_t p2p_nopeer(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                 disco_value_t *ret)
{
    (void)n, (void)ret;
    int wpn = (int)a[0].v.i, which = (int)a[1].v.i, g = disco_ctx_worker_id(ctx);
    DLDataType i32 = I32;
    int64_t len = 300;
    DLTensor *t;
    if ((which == 0 && g != 1) || (which == 1 && g != wpn + 1))
        return DISCO_OK;
    disco_status_t st = node_p2p_make(ctx, false, i32, &len, 1, g, 0, &t);
    if (st != DISCO_OK)
        return st;
    return which == 0 ? disco_ctx_send(ctx, t, wpn + 1) : disco_ctx_recv(ctx, t, 1);
}

/* nt.p2p_killpeer(wpn): node 1's leader (its agent's process) dies while
 * worker 1 (node 0) waits to receive from worker wpn + 1 (node 1, which
 * dies with it). Worker 1 writes its verdict and the time it took to
 * stderr, and fails with it. */
static disco_status_t p2p_killpeer(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                   disco_value_t *ret)
{
    (void)n, (void)ret;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    if (g == wpn)
        raise(SIGKILL);
    if (g != 1)
        return DISCO_OK;
    DLDataType i32 = I32;
    int64_t len = 300;
    DLTensor *t;
    disco_status_t st = node_p2p_make(ctx, false, i32, &len, 1, -1, 0, &t);
    int64_t t0 = disco_now_ns();
    if (st == DISCO_OK)
        st = disco_ctx_recv(ctx, t, wpn + 1);
    fprintf(stderr, "p2p-kill worker 1: %s: %s (took %lld ms)\n", disco_err_name(st),
            st == DISCO_OK ? "" : disco_last_error(), (long long)((disco_now_ns() - t0) / 1000000));
    return st;
}

void node_p2p_register(void)
{
    disco_register_func("nt.p2p_killpeer", "i", p2p_killpeer);
    disco_register_func("nt.p2p_pairs", "ib", p2p_pairs);
    disco_register_func("nt.p2p_ring", "ib", p2p_ring);
    disco_register_func("nt.p2p_repeat", "ii", p2p_repeat);
    disco_register_func("nt.p2p_mismatch", "ib", p2p_mismatch);
    disco_register_func("nt.p2p_nopeer", "ii", p2p_nopeer);
    disco_register_func("nt.p2p_failfirst", "ii", p2p_failfirst);
    disco_register_func("nt.p2p_late", "ii", p2p_late);
    disco_register_func("nt.p2p_forge", "ii", p2p_forge);
    disco_register_func("nt.p2p_nosink", "i", p2p_nosink);
    node_p2p_pieces_register();
}

/* Calls f(a0, a1) on every worker; prints each worker's answer. */
static int call_all(disco_session_t *s, const char *name, const char *sc, disco_value_t a0,
                    disco_value_t a1)
{
    disco_dref_t f, r;
    disco_value_t a[2] = {a0, a1};
    CHECK(disco_session_get_func(s, name, &f));
    CHECK(disco_session_call_sync_all(s, f, a, 2, &r));
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        if (v.type == DISCO_T_STR)
            printf("%s worker %d: %.*s\n", sc, w, (int)v.len, v.v.str);
        else
            printf("%s worker %d: %lld\n", sc, w, (long long)v.v.i);
        disco_value_clear(&v);
    }
    CHECK(disco_session_free_reg(s, r));
    return 0;
}

/* The two ends of every mismatch failed alike: the sender's words hold
 * the receiver's. Prints them; returns 0 when so. */
static int mismatch(disco_session_t *s, int wpn, bool dev)
{
    disco_dref_t f, r;
    disco_value_t a[2] = {disco_value_int(wpn), disco_value_bool(dev)};
    CHECK(disco_session_get_func(s, "nt.p2p_mismatch", &f));
    CHECK(disco_session_call_sync_all(s, f, a, 2, &r));
    disco_value_t snd, rcv;
    CHECK(disco_session_debug_get(s, r, 1, &snd));
    CHECK(disco_session_debug_get(s, r, wpn + 1, &rcv));
    printf("sender:\n%.*s", (int)snd.len, snd.v.str);
    printf("receiver:\n%.*s", (int)rcv.len, rcv.v.str);
    static char sbuf[2048], rbuf[2048];
    snprintf(sbuf, sizeof sbuf, "%.*s", (int)snd.len, snd.v.str);
    snprintf(rbuf, sizeof rbuf, "%.*s", (int)rcv.len, rcv.v.str);
    int bad = 0, lines = 0;
    char *sp = sbuf, *rp = rbuf;
    for (char *se, *re; (se = strchr(sp, '\n')) != NULL && (re = strchr(rp, '\n')) != NULL;
         sp = se + 1, rp = re + 1, lines++) {
        *se = *re = '\0';
        const char *words = strstr(rp, ": ");
        if (strncmp(sp, "DISCO_E_MISMATCH: ", 18) != 0 ||
            strncmp(rp, "DISCO_E_MISMATCH: ", 18) != 0 || words == NULL ||
            strstr(sp, words + 2) == NULL)
            bad = 1;
    }
    disco_value_clear(&snd);
    disco_value_clear(&rcv);
    CHECK(disco_session_free_reg(s, r));
    printf("p2p-mismatch: %d alike, %s\n", lines, bad ? "NOT ALIKE" : "alike");
    return bad || lines != (dev ? 3 : 2);
}

/* A send whose receiver never receives, then a receive whose sender never
 * sends: each call fails within the call timeout, naming the peer and
 * its node; then the session still works (a round of sends). */
static int nopeer(disco_session_t *s, int wpn)
{
    disco_dref_t f, r;
    CHECK(disco_session_get_func(s, "nt.p2p_nopeer", &f));
    int rc = 0;
    for (int which = 0; which < 2; which++) {
        disco_value_t a[2] = {disco_value_int(wpn), disco_value_int(which)};
        int64_t t0 = disco_now_ns();
        disco_status_t st = disco_session_call_sync_all(s, f, a, 2, &r);
        long long ms = (long long)((disco_now_ns() - t0) / 1000000);
        printf("p2p-nopeer %d: %s: %s\n", which, disco_err_name(st), disco_last_error());
        printf("p2p-nopeer %d took %lld ms\n", which, ms);
        char want[96];
        snprintf(want, sizeof want,
                 which == 0 ? "disco_ctx_send to worker %d (on node 1)"
                            : "disco_ctx_recv from worker %d (on node 0)",
                 which == 0 ? wpn + 1 : 1);
        if (st == DISCO_OK || strstr(disco_last_error(), want) == NULL ||
            strstr(disco_last_error(), "no answer within") == NULL || ms > 20000)
            rc = 1;
        if (st == DISCO_OK)
            disco_session_free_reg(s, r);
    }
    if (rc == 0)
        rc = call_all(s, "nt.p2p_repeat", "after", disco_value_int(wpn), disco_value_int(3));
    return rc;
}

/* nt.p2p_failfirst with the receiver computing 300 ms first: prints
 * both ends' outcomes as "p2p-failfirst worker W: NAME: words" lines. */
static int failfirst(disco_session_t *s, int wpn)
{
    disco_dref_t f, r;
    disco_value_t a[2] = {disco_value_int(wpn), disco_value_int(300)};
    CHECK(disco_session_get_func(s, "nt.p2p_failfirst", &f));
    CHECK(disco_session_call_sync_all(s, f, a, 2, &r));
    for (int w = 1; w <= wpn + 1; w += wpn) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        for (const char *p = v.v.str, *e; p < v.v.str + v.len && (e = strchr(p, '\n')) != NULL;
             p = e + 1)
            printf("p2p-failfirst worker %d: %.*s\n", w, (int)(e - p), p);
        disco_value_clear(&v);
    }
    CHECK(disco_session_free_reg(s, r));
    return 0;
}

/* nt.p2p_late with worker 1 computing 2/5 of the call timeout before its
 * receive: the call fails (printed with the time it took); then 3 rounds
 * of sends on the same session. */
static int late(disco_session_t *s, int wpn)
{
    disco_dref_t f, r;
    int64_t ms = (int64_t)s->cfg.call_timeout_ms * 2 / 5;
    disco_value_t a[2] = {disco_value_int(wpn), disco_value_int(ms)};
    CHECK(disco_session_get_func(s, "nt.p2p_late", &f));
    int64_t t0 = disco_now_ns();
    disco_status_t st = disco_session_call_sync_all(s, f, a, 2, &r);
    printf("p2p-late: %s: %s (took %lld ms of %u)\n", disco_err_name(st),
           st == DISCO_OK ? "" : disco_last_error(), (long long)((disco_now_ns() - t0) / 1000000),
           s->cfg.call_timeout_ms);
    if (st == DISCO_OK)
        return 1;
    return call_all(s, "nt.p2p_repeat", "after", disco_value_int(wpn), disco_value_int(3));
}

/* nt.p2p_pairs on host tensors, then node 0's trace: every send or
 * receive record of its workers printed as "trace: worker W KIND peer P
 * index I" (the test checks the peers' global ids). */
static int traced(disco_session_t *s, int wpn)
{
    if (call_all(s, "nt.p2p_pairs", "p2p-trace", disco_value_int(wpn), disco_value_bool(false)))
        return 1;
    disco_trace_t *t;
    CHECK(disco_session_trace(s, &t));
    for (size_t i = 0; i < t->ncolls; i++)
        printf("trace: worker %d %s peer %d index %u\n", t->colls[i].worker, t->colls[i].name,
               t->colls[i].peer, (unsigned)t->colls[i].index);
    disco_trace_free(t);
    return 0;
}

/* nt.p2p_killpeer: the call fails (a node died); printed. */
static int killpeer(disco_session_t *s, int wpn)
{
    disco_dref_t f, r;
    disco_value_t a[1] = {disco_value_int(wpn)};
    CHECK(disco_session_get_func(s, "nt.p2p_killpeer", &f));
    disco_status_t st = disco_session_call_sync_all(s, f, a, 1, &r);
    printf("p2p-kill: %s: %s\n", disco_err_name(st), disco_last_error());
    return st != DISCO_OK ? 0 : 1;
}

int node_p2p_scenario(disco_session_t *s, const char *sc, int wpn)
{
    if (strcmp(sc, "p2p-kill") == 0)
        return killpeer(s, wpn);
    if (strcmp(sc, "p2p-trace") == 0)
        return traced(s, wpn);
    if (strcmp(sc, "p2p-failfirst") == 0)
        return failfirst(s, wpn);
    if (strcmp(sc, "p2p-late") == 0)
        return late(s, wpn);
    if (strcmp(sc, "p2p-shutdown") == 0) { /* nt.p2p_nosink, not waited for: the close follows */
        disco_dref_t f, r;
        disco_value_t a[1] = {disco_value_int(wpn)};
        CHECK(disco_session_get_func(s, "nt.p2p_nosink", &f));
        CHECK(disco_session_call(s, f, a, 1, &r));
        return 0;
    }
    if (strcmp(sc, "p2p-forged") == 0)
        return call_all(s, "nt.p2p_forge", sc, disco_value_int(wpn), disco_value_int(300));
    bool dev = getenv("DISCO_SIM_GPUS") != NULL;
    if (strcmp(sc, "p2p-pairs") == 0)
        return call_all(s, "nt.p2p_pairs", sc, disco_value_int(wpn), disco_value_bool(dev));
    if (strcmp(sc, "p2p-ring") == 0)
        return call_all(s, "nt.p2p_ring", sc, disco_value_int(wpn), disco_value_bool(dev));
    if (strcmp(sc, "p2p-repeat") == 0)
        return call_all(s, "nt.p2p_repeat", sc, disco_value_int(wpn), disco_value_int(200));
    if (strcmp(sc, "p2p-mismatch") == 0)
        return mismatch(s, wpn, dev);
    if (strcmp(sc, "p2p-nopeer") == 0)
        return nopeer(s, wpn);
    return node_p2p_pieces_scenario(s, sc, wpn);
}
