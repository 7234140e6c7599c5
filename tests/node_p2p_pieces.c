/* node_p2p_pieces.c - node_prog's scenarios of sends across nodes in
 * pieces and of the forwarder's hold bound (node_p2p.h), run by
 * tests/test_node_p2p.c with DISCO_FWD_PIECE_BYTES / DISCO_FWD_HOLD_BYTES
 * set small. Each worker checks every byte it receives. The forwarders'
 * statistics are read white-box from each leader (its node's MPI process
 * holds the forwarder). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/disco.h"
#include "tests/node_p2p.h"
#include "tests/node_check.h"
#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#ifdef DISCO_TEST_MPI
#include "scheduler/node/node_fwd_impl.h"
#include "workers/core/net.h"
#endif

#define U8                                                                                         \
    {                                                                                              \
        kDLUInt, 8, 1                                                                              \
    }
#define I16                                                                                        \
    {                                                                                              \
        kDLInt, 16, 1                                                                              \
    }
#define I32                                                                                        \
    {                                                                                              \
        kDLInt, 32, 1                                                                              \
    }
#define F32                                                                                        \
    {                                                                                              \
        kDLFloat, 32, 1                                                                            \
    }

/* One send (from -> to) of node-local ranks; worker a of node k is
 * k * wpn + a. */
struct pop {
    int fnode, frank, tnode, trank;
    DLDataType dt;
    int ndim;
    int64_t shape[3];
};

/* With pieces of 1000 bytes (test_p2p_pieces): one piece exactly, one
 * byte over and under a boundary (1001, 999, 2999, 3001), 3000 exactly,
 * a non-leader and a leader sending 100004 bytes at once the two ways
 * (101 pieces each, the last of 4 bytes), 3 dims, leader to leader, and 1
 * MiB (1049 pieces, the last of 576). In this order on every worker: the
 * first send not yet done has both its workers at it. */
static const struct pop pops[] = {
    {0, 1, 1, 1, U8, 1, {1000}},
    {0, 1, 1, 1, U8, 1, {1001}},
    {1, 1, 0, 1, U8, 1, {999}},
    {1, 1, 0, 1, U8, 1, {2999}},
    {0, 0, 1, 0, U8, 1, {3000}},
    {0, 0, 1, 0, U8, 1, {3001}},
    {0, 0, 1, 1, F32, 1, {25001}},
    {1, 0, 0, 1, F32, 1, {25001}},
    {0, 1, 1, 0, I16, 3, {7, 11, 13}},
    {1, 0, 0, 0, I32, 2, {2, 1250}},
    {0, 1, 1, 1, U8, 1, {(int64_t)1 << 20}},
};

/* The pieces of 1000 bytes each node's forwarder writes for pops (a send
 * of more than 1000 bytes goes in ceil(n / 1000) pieces). */
static void pieces_into(int64_t per_node[2])
{
    per_node[0] = per_node[1] = 0;
    for (size_t i = 0; i < sizeof pops / sizeof pops[0]; i++) {
        int64_t n = (int64_t)(pops[i].dt.bits / 8);
        for (int d = 0; d < pops[i].ndim; d++)
            n *= pops[i].shape[d];
        if (n > 1000)
            per_node[pops[i].tnode] += (n + 999) / 1000;
    }
}

/* nt.p2p_pieces(wpn, dev): every send of pops, in order, on host or (dev)
 * sim tensors; every byte checked. Returns 1. */
static disco_status_t p2p_pieces(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                 disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    bool dev = a[1].v.b;
    disco_status_t st = DISCO_OK;
    for (size_t i = 0; st == DISCO_OK && i < sizeof pops / sizeof pops[0]; i++) {
        const struct pop *o = &pops[i];
        int from = o->fnode * wpn + o->frank, to = o->tnode * wpn + o->trank;
        if (g != from && g != to)
            continue;
        DLTensor *t;
        st = node_p2p_make(ctx, dev, o->dt, o->shape, o->ndim, g == from ? g : -1, (int)i, &t);
        if (st == DISCO_OK && g == from)
            st = disco_ctx_send(ctx, t, to);
        else if (st == DISCO_OK && (st = disco_ctx_recv(ctx, t, from)) == DISCO_OK)
            st = node_p2p_check(ctx, "recv in pieces", t, from, (int)i);
    }
    if (st == DISCO_OK)
        *ret = disco_value_int(1);
    return st;
}

/* nt.p2p_fwdstat(which): on a node's leader, its forwarder's statistic
 * (which 0: pieces written into receivers; 1: the most DATA bytes it ever
 * held for receives not yet posted); -1 elsewhere. */
static disco_status_t p2p_fwdstat(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)n;
    *ret = disco_value_int(-1);
#ifdef DISCO_TEST_MPI
    disco_worker_t *w = ctx->worker;
    struct disco__node *node = w->net != NULL ? w->net->impl : NULL;
    if (w->id != 0 || node == NULL || node->fwd_state == NULL)
        return DISCO_OK;
    struct disco__fwd *f = node->fwd_state;
    /* Relaxed: statistics (node_fwd_impl.h); the commands they count ended
     * before this one began. */
    *ret = disco_value_int((int64_t)atomic_load_explicit(
        a[0].v.i == 0 ? &f->pieces_in : &f->held_peak, memory_order_relaxed));
#else
    (void)ctx, (void)a;
#endif
    return DISCO_OK;
}

/* nt.p2p_bigfail(wpn, bytes): worker 1 sends bytes (uint8) to worker wpn
 * + 1, which receives them: with pieces of 1 byte the transfer cannot end
 * before the deadline, which fails it in the middle. Each returns its
 * outcome, "NAME: words". */
static disco_status_t p2p_bigfail(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)n;
    static char words[1024]; /* this process's: one worker runs here at a time */
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    *ret = disco_value_str("");
    if (g != 1 && g != wpn + 1)
        return DISCO_OK;
    DLDataType u8 = U8;
    int64_t len = a[1].v.i;
    DLTensor *t;
    disco_status_t st = node_p2p_make(ctx, false, u8, &len, 1, g == 1 ? g : -1, 0, &t);
    if (st == DISCO_OK)
        st = g == 1 ? disco_ctx_send(ctx, t, wpn + 1) : disco_ctx_recv(ctx, t, 1);
    snprintf(words, sizeof words, "%s: %s", disco_err_name(st),
             st == DISCO_OK ? "" : disco_last_error());
    *ret = disco_value_str(words);
    return DISCO_OK;
}

/* nt.p2p_hold(wpn, ms): every worker of node 1 sends 600 bytes to worker
 * 0, which computes ms first (so all of them reach its node before its
 * receives), then receives them in order and checks every byte. Returns
 * 1. */
static disco_status_t p2p_hold(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    DLDataType u8 = U8;
    int64_t len = 600;
    DLTensor *t;
    disco_status_t st = DISCO_OK;
    if (g >= wpn && g < 2 * wpn) {
        if ((st = node_p2p_make(ctx, false, u8, &len, 1, g, 3, &t)) == DISCO_OK)
            st = disco_ctx_send(ctx, t, 0);
    } else if (g == 0) {
        int64_t end = disco_now_ns() + a[1].v.i * 1000000;
        volatile uint64_t x = 0;
        while (disco_now_ns() < end) /* computing, not waiting for anything */
            x = x * 31 + 7;
        for (int s = wpn; st == DISCO_OK && s < 2 * wpn; s++)
            if ((st = node_p2p_make(ctx, false, u8, &len, 1, -1, 0, &t)) == DISCO_OK &&
                (st = disco_ctx_recv(ctx, t, s)) == DISCO_OK)
                st = node_p2p_check(ctx, "recv past the hold bound", t, s, 3);
    }
    if (st == DISCO_OK)
        *ret = disco_value_int(1);
    return st;
}

/* Word j of the huge send's pattern (byte order aside, a piece at another
 * offset shows). */
static uint64_t huge_word(uint64_t j)
{
    return (j + 1) * 0x9E3779B97F4A7C15ull;
}

/* nt.p2p_huge(wpn, bytes): worker 1 sends bytes (uint8, more than INT_MAX)
 * to worker wpn + 1, filled in place with huge_word (the receiver's
 * tensor with 0xff first); the receiver checks every byte. Returns 1. */
static disco_status_t p2p_huge(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    *ret = disco_value_int(1);
    if (g != 1 && g != wpn + 1)
        return DISCO_OK;
    DLDataType u8 = U8;
    int64_t len = a[1].v.i;
    DLTensor *t;
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, u8, &t);
    if (st != DISCO_OK)
        return st;
    uint8_t *b = (uint8_t *)t->data + t->byte_offset;
    size_t words = (size_t)len / 8, tail = (size_t)len % 8;
    if (g == 1) {
        for (size_t j = 0; j < words; j++) {
            uint64_t v = huge_word(j);
            memcpy(b + j * 8, &v, 8);
        }
        memset(b + words * 8, 0x5a, tail);
        return disco_ctx_send(ctx, t, wpn + 1);
    }
    memset(b, 0xff, (size_t)len);
    if ((st = disco_ctx_recv(ctx, t, 1)) != DISCO_OK)
        return st;
    for (size_t j = 0; j < words; j++) {
        uint64_t v;
        memcpy(&v, b + j * 8, 8);
        if (v != huge_word(j))
            return disco_ctx_fail(ctx, "nt.p2p_huge: word %zu (byte %zu) is wrong", j, j * 8);
    }
    for (size_t i = words * 8; i < (size_t)len; i++)
        if (b[i] != 0x5a)
            return disco_ctx_fail(ctx, "nt.p2p_huge: byte %zu is wrong", i);
    return DISCO_OK;
}

/* nt.p2p_killmid(wpn, ms): worker wpn + 1 (node 1) sends 32 MiB to worker
 * 1 (node 0), in pieces of 1 byte (the test's setting: the transfer would
 * take far longer than ms); node 1's leader computes ms, then its process
 * (node 1's forwarder with it) dies. Worker 1 writes its verdict and the
 * time it took to stderr, and fails with it. */
static disco_status_t p2p_killmid(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)n, (void)ret;
    int wpn = (int)a[0].v.i, g = disco_ctx_worker_id(ctx);
    DLDataType u8 = U8;
    int64_t len = 32 << 20;
    DLTensor *t;
    if (g == wpn) {
        int64_t end = disco_now_ns() + a[1].v.i * 1000000;
        volatile uint64_t x = 0;
        while (disco_now_ns() < end) /* computing, not waiting for anything */
            x = x * 31 + 7;
        raise(SIGKILL);
    }
    if (g != 1 && g != wpn + 1)
        return DISCO_OK;
    disco_status_t st = node_p2p_make(ctx, false, u8, &len, 1, g == 1 ? -1 : g, 0, &t);
    if (st != DISCO_OK || g != 1)
        return st != DISCO_OK ? st : disco_ctx_send(ctx, t, 1);
    int64_t t0 = disco_now_ns();
    st = disco_ctx_recv(ctx, t, wpn + 1);
    fprintf(stderr, "p2p-killmid worker 1: %s: %s (took %lld ms)\n", disco_err_name(st),
            st == DISCO_OK ? "" : disco_last_error(), (long long)((disco_now_ns() - t0) / 1000000));
    return st;
}

void node_p2p_pieces_register(void)
{
    disco_register_func("nt.p2p_pieces", "ib", p2p_pieces);
    disco_register_func("nt.p2p_fwdstat", "i", p2p_fwdstat);
    disco_register_func("nt.p2p_bigfail", "ii", p2p_bigfail);
    disco_register_func("nt.p2p_hold", "ii", p2p_hold);
    disco_register_func("nt.p2p_huge", "ii", p2p_huge);
    disco_register_func("nt.p2p_killmid", "ii", p2p_killmid);
}

/* Calls name(a0, a1) (n of them) on every worker; prints each worker's
 * answer as "sc worker W: answer". Returns 0, or 1 when the call failed. */
static int call_print(disco_session_t *s, const char *name, const char *sc, disco_value_t a0,
                      disco_value_t a1, int n)
{
    disco_dref_t f, r;
    disco_value_t a[2] = {a0, a1};
    CHECK(disco_session_get_func(s, name, &f));
    CHECK(disco_session_call_sync_all(s, f, a, n, &r));
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

/* The forwarders' statistic which, printed as "sc worker W: N" (leaders). */
static int stats(disco_session_t *s, const char *sc, int which)
{
    return call_print(s, "nt.p2p_fwdstat", sc, disco_value_int(which), disco_value_int(0), 1);
}

int node_p2p_pieces_scenario(disco_session_t *s, const char *sc, int wpn)
{
    bool dev = getenv("DISCO_SIM_GPUS") != NULL;
    if (strcmp(sc, "p2p-pieces") == 0) {
        int64_t want[2];
        pieces_into(want);
        printf("p2p-pieces: want %lld and %lld pieces\n", (long long)want[0], (long long)want[1]);
        if (call_print(s, "nt.p2p_pieces", sc, disco_value_int(wpn), disco_value_bool(dev), 2))
            return 1;
        return stats(s, "pieces-in", 0);
    }
    if (strcmp(sc, "p2p-bigfail") == 0) {
        int64_t t0 = disco_now_ns();
        disco_dref_t f, r;
        disco_value_t a[2] = {disco_value_int(wpn), disco_value_int(32 << 20)};
        CHECK(disco_session_get_func(s, "nt.p2p_bigfail", &f));
        CHECK(disco_session_call_sync_all(s, f, a, 2, &r));
        printf("p2p-bigfail took %lld ms\n", (long long)((disco_now_ns() - t0) / 1000000));
        for (int w = 1; w <= wpn + 1; w += wpn) {
            disco_value_t v;
            CHECK(disco_session_debug_get(s, r, w, &v));
            printf("p2p-bigfail worker %d: %.*s\n", w, (int)v.len, v.v.str);
            disco_value_clear(&v);
        }
        CHECK(disco_session_free_reg(s, r));
        if (stats(s, "pieces-in", 0))
            return 1;
        /* Then sends in pieces between the same two workers work. */
        return call_print(s, "nt.p2p_repeat", "after", disco_value_int(wpn), disco_value_int(3), 2);
    }
    if (strcmp(sc, "p2p-huge") == 0) { /* INT_MAX + 8 bytes: 128 pieces of 16 MiB and 7 bytes */
        int64_t t0 = disco_now_ns();
        int rc = call_print(s, "nt.p2p_huge", sc, disco_value_int(wpn),
                            disco_value_int((int64_t)INT_MAX + 8), 2);
        printf("p2p-huge took %lld ms\n", (long long)((disco_now_ns() - t0) / 1000000));
        return rc != 0 ? rc : stats(s, "pieces-in", 0);
    }
    if (strcmp(sc, "p2p-killmid") == 0) { /* the call fails (a node died); printed */
        disco_dref_t f, r;
        disco_value_t a[2] = {disco_value_int(wpn), disco_value_int(1000)};
        CHECK(disco_session_get_func(s, "nt.p2p_killmid", &f));
        disco_status_t st = disco_session_call_sync_all(s, f, a, 2, &r);
        printf("p2p-killmid: %s: %s\n", disco_err_name(st), disco_last_error());
        return st != DISCO_OK ? 0 : 1;
    }
    if (strcmp(sc, "p2p-hold") == 0) {
        if (call_print(s, "nt.p2p_hold", sc, disco_value_int(wpn), disco_value_int(500), 2))
            return 1;
        return stats(s, "held-peak", 1);
    }
    return -1;
}
