/* node_comm.c - node_prog's scenarios of in-worker communication
 * (<disco/comm.h>) beyond the ctx one: broadcast from a root on another
 * node, allgather, send and receive between the nodes' leaders and
 * between other workers, send_to_next_group, a root that differs
 * between nodes (node_comm.h). Each worker function checks every element
 * itself and fails naming the first wrong one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/disco.h"
#include "scheduler/session/session_impl.h"
#include "tests/node_comm.h"
#include "tests/node_check.h"
#include "workers/core/ctx.h"
#include "workers/core/worker.h"
#include "workers/data/tensor_impl.h"

enum { LEN = 300, BIG = 300000 /* 1.2 MB: past MPI's eager size */ };

/* A new tensor of n int32 on the host or (dev) on the sim device,
 * element i = base + i. */
static disco_status_t make(disco_ctx_t *ctx, bool dev, int64_t n, int64_t base, DLTensor **out)
{
    DLDataType i32 = {kDLInt, 32, 1};
    int32_t *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return disco_ctx_fail(ctx, "node_comm: no memory");
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)(base + i);
    disco_status_t st = dev ? disco_ctx_empty_device(ctx, &n, 1, i32, kDLExtDev, out)
                            : disco_ctx_empty(ctx, &n, 1, i32, out);
    if (st == DISCO_OK)
        st = dev ? disco__tensor_from_host(*out, v) : (memcpy((*out)->data, v, (size_t)n * 4), st);
    free(v);
    return st;
}

/* Checks that t's element i is want(i) = base + i, or, for an allgather
 * (per > 0), (i / per) * 1000 + i % per; fails naming the first that is
 * not. */
static disco_status_t check(disco_ctx_t *ctx, const char *what, const DLTensor *t, int64_t base,
                            int64_t per)
{
    int64_t n = disco_tensor_numel(t);
    int32_t *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return disco_ctx_fail(ctx, "node_comm: no memory");
    disco_status_t st = disco__tensor_is_device(t) ? disco__tensor_to_host(t, v)
                                                   : (memcpy(v, t->data, (size_t)n * 4), DISCO_OK);
    for (int64_t i = 0; st == DISCO_OK && i < n; i++) {
        int64_t want = per > 0 ? i / per * 1000 + i % per : base + i;
        if (v[i] != (int32_t)want)
            st =
                disco_ctx_fail(ctx, "worker %d: %s [%lld]: %d, want %lld", disco_ctx_worker_id(ctx),
                               what, (long long)i, v[i], (long long)want);
    }
    free(v);
    return st;
}

/* Broadcast from root of buffers that hold each member's own values. */
static disco_status_t bcast_from(disco_ctx_t *ctx, bool dev, int root)
{
    int g = disco_ctx_worker_id(ctx);
    DLTensor *b = NULL;
    disco_status_t st = make(ctx, dev, LEN, g * 1000, &b);
    if (st == DISCO_OK && (st = disco_ctx_broadcast(ctx, b, root, false)) == DISCO_OK)
        st = check(ctx, "broadcast", b, root * 1000, 0);
    return st;
}

/* The workers of rank r on their nodes (r 0: the leaders, ids k * wpn) in
 * a ring: worker k receives from worker k - 1 (but node 0's, which sends
 * first), then sends its own values to node k + 1's; node 0's receives
 * from the last last. n elements each, element i = sender * 1000 + i + 7. */
static disco_status_t rank_ring(disco_ctx_t *ctx, bool dev, int wpn, int r, int64_t n)
{
    int g = disco_ctx_worker_id(ctx), world = disco_ctx_world_size(ctx), nodes = world / wpn;
    int k = g / wpn, prev = (k + nodes - 1) % nodes * wpn + r, next = (k + 1) % nodes * wpn + r;
    DLTensor *out = NULL, *in = NULL;
    disco_status_t st = make(ctx, dev, n, g * 1000 + 7, &out);
    if (st == DISCO_OK)
        st = make(ctx, dev, n, -1, &in);
    if (st == DISCO_OK && k > 0 && (st = disco_ctx_recv(ctx, in, prev)) == DISCO_OK)
        st = check(ctx, "recv from the previous node", in, prev * 1000 + 7, 0);
    if (st == DISCO_OK)
        st = disco_ctx_send(ctx, out, next);
    if (st == DISCO_OK && k == 0 && (st = disco_ctx_recv(ctx, in, prev)) == DISCO_OK)
        st = check(ctx, "recv from the last node", in, prev * 1000 + 7, 0);
    return st;
}

/* nt.ctx_more(wpn, dev): on every worker, with host tensors or (dev) sim
 * device tensors: broadcast from the last worker and from worker 1,
 * allgather over the world; the leaders' ring of sends (small, then
 * large); the first of each group sends to the next group's first
 * (send_to_next_group, a chain); the workers of rank 1 on their nodes in
 * a ring of sends too (not leaders: forwarded). Returns 1. */
static disco_status_t ctx_more(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int wpn = (int)a[0].v.i;
    bool dev = a[1].v.b;
    int g = disco_ctx_worker_id(ctx), world = disco_ctx_world_size(ctx);
    int64_t all = (int64_t)LEN * world;
    DLTensor *x = NULL, *z = NULL, *t = NULL;
    disco_status_t st = bcast_from(ctx, dev, world - 1);
    if (st == DISCO_OK)
        st = bcast_from(ctx, dev, 1);
    if (st == DISCO_OK)
        st = make(ctx, dev, LEN, g * 1000, &x);
    if (st == DISCO_OK)
        st = make(ctx, dev, all, -1, &z);
    if (st == DISCO_OK && (st = disco_ctx_allgather(ctx, x, z, false)) == DISCO_OK)
        st = check(ctx, "allgather", z, 0, LEN);
    if (st == DISCO_OK && g % wpn == 0 && world / wpn > 1)
        st = rank_ring(ctx, dev, wpn, 0, LEN);
    if (st == DISCO_OK && g % wpn == 0 && world / wpn > 1)
        st = rank_ring(ctx, dev, wpn, 0, BIG);
    /* Groups are the nodes' (node_prog opens as many as nodes). */
    if (st == DISCO_OK && g % wpn == 0 && g > 0 && (st = make(ctx, dev, LEN, -1, &t)) == DISCO_OK &&
        (st = disco_ctx_recv_from_prev_group(ctx, t)) == DISCO_OK)
        st = check(ctx, "recv_from_prev_group", t, (g - wpn) * 1000 + 9, 0);
    if (st == DISCO_OK && g % wpn == 0 && g + wpn < world &&
        (st = make(ctx, dev, LEN, g * 1000 + 9, &t)) == DISCO_OK)
        st = disco_ctx_send_to_next_group(ctx, t);
    if (st == DISCO_OK && g % wpn == 1 && world / wpn > 1) /* forwarded by the leaders */
        st = rank_ring(ctx, dev, wpn, 1, BIG);
    if (st == DISCO_OK)
        *ret = disco_value_int(1);
    return st;
}

/* nt.ctx_badroot(wpn): every worker broadcasts from root = its node's
 * index (its id / wpn): members of one node agree, nodes do not. Returns
 * the verdict's name and words (it must fail). */
static disco_status_t ctx_badroot(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)n;
    static char verdict[512]; /* this process's: one worker runs here at a time */
    int g = disco_ctx_worker_id(ctx), wpn = (int)a[0].v.i;
    DLTensor *b = NULL;
    disco_status_t st = make(ctx, false, LEN, g * 1000, &b);
    if (st != DISCO_OK)
        return st;
    st = disco_ctx_broadcast(ctx, b, g / wpn, false);
    if (st == DISCO_OK)
        return disco_ctx_fail(ctx, "worker %d: a broadcast from roots that differ succeeded", g);
    snprintf(verdict, sizeof verdict, "%s: %s", disco_err_name(st), disco_last_error());
    /* Then leader 0 sends 300 elements to leader 1, which receives 301:
     * both ends fail with DISCO_E_MISMATCH (and neither waits). */
    int world = disco_ctx_world_size(ctx);
    if ((g == 0 || g == wpn) && wpn < world) {
        DLTensor *t;
        disco_status_t got = make(ctx, false, LEN + (g != 0), 0, &t);
        if (got == DISCO_OK)
            got = g == 0 ? disco_ctx_send(ctx, t, wpn) : disco_ctx_recv(ctx, t, 0);
        if (got != DISCO_E_MISMATCH)
            return disco_ctx_fail(ctx, "worker %d: a send of 300 to a receive of 301: %s: %s", g,
                                  disco_err_name(got), disco_last_error());
        fprintf(stderr, "p2p mismatch worker %d: %s\n", g, disco_last_error());
    }
    *ret = disco_value_str(verdict);
    return DISCO_OK;
}

/* nt.ctx_nopeer(wpn): leader 0 sends to leader 1, which never receives
 * (it returns at once). Leader 0's send must fail within the call
 * timeout, naming the peer and its node; the result is leader 0's error. */
static disco_status_t ctx_nopeer(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                 disco_value_t *ret)
{
    (void)n, (void)ret;
    int wpn = (int)a[0].v.i;
    if (disco_ctx_worker_id(ctx) != 0)
        return DISCO_OK;
    DLTensor *t = NULL;
    disco_status_t st = make(ctx, false, LEN, 0, &t);
    return st != DISCO_OK ? st : disco_ctx_send(ctx, t, wpn);
}

void node_comm_register(void)
{
    disco_register_func("nt.ctx_more", "ib", ctx_more);
    disco_register_func("nt.ctx_badroot", "i", ctx_badroot);
    disco_register_func("nt.ctx_nopeer", "i", ctx_nopeer);
}

/* nt.ctx_more on every worker (dev: sim tensors), one call_sync_all, each
 * worker's answer printed; without dev, then nt.ctx_badroot: every worker
 * must fail with DISCO_E_MISMATCH, the same words on all (printed once;
 * on one node the words differ, so only the verdict's name is). */
static int more(disco_session_t *s, int wpn, bool dev)
{
    disco_dref_t f, r;
    disco_value_t a[2] = {disco_value_int(wpn), disco_value_bool(dev)};
    CHECK(disco_session_get_func(s, "nt.ctx_more", &f));
    CHECK(disco_session_call_sync_all(s, f, a, 2, &r));
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        printf("ctx-more%s worker %d: %lld\n", dev ? "-sim" : "", w, (long long)v.v.i);
    }
    CHECK(disco_session_free_reg(s, r));
    if (dev)
        return 0;
    CHECK(disco_session_get_func(s, "nt.ctx_badroot", &f));
    CHECK(disco_session_call_sync_all(s, f, a, 1, &r));
    /* Across nodes each worker's words are "DISCO_E_MISMATCH: worker L: "
     * and the verdict, L the global id of its node's leader, who relays it
     * (messages name global ids: on node 1 "worker 0" would be node 0's
     * leader). On one node each worker's words name itself. */
    bool across = disco_session_num_workers(s) > s->world;
    char first[512] = "";
    int alike = 1;
    for (int w = 0; w < disco_session_num_workers(s); w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        char head[64];
        int hn = across ? snprintf(head, sizeof head,
                                   "DISCO_E_MISMATCH: worker %d: ", w / s->world * s->world)
                        : snprintf(head, sizeof head, "DISCO_E_MISMATCH");
        if (v.type != DISCO_T_STR || v.len < (size_t)hn ||
            strncmp(v.v.str, head, (size_t)hn) != 0) {
            printf("badroot worker %d: %.*s (not \"%s...\")\n", w, (int)v.len,
                   v.type == DISCO_T_STR ? v.v.str : "", head);
            return 1;
        }
        const char *verdict = v.v.str + hn;
        size_t vlen = v.len - (size_t)hn;
        if (w == 0)
            snprintf(first, sizeof first, "%.*s", (int)vlen, verdict);
        else
            alike &= strlen(first) == vlen && memcmp(first, verdict, vlen) == 0;
        disco_value_clear(&v);
    }
    CHECK(disco_session_free_reg(s, r));
    fprintf(stderr, "badroot: %s\n", first);
    printf("badroot: DISCO_E_MISMATCH on every worker%s\n", !across ? ""
                                                            : alike ? ", alike"
                                                                    : ", NOT ALIKE");
    return alike || !across ? 0 : 1;
}

/* nt.ctx_nopeer: the send fails, naming its peer, within the call
 * timeout (and not at once: it waited for the acknowledgement). */
static int nopeer(disco_session_t *s, int wpn)
{
    disco_dref_t f, r;
    disco_value_t a[1] = {disco_value_int(wpn)};
    CHECK(disco_session_get_func(s, "nt.ctx_nopeer", &f));
    int64_t t0 = disco_now_ns();
    disco_status_t st = disco_session_call_sync_all(s, f, a, 1, &r);
    long long ms = (long long)((disco_now_ns() - t0) / 1000000);
    printf("nopeer: %s: %s\n", disco_err_name(st), disco_last_error());
    printf("nopeer took %lld ms\n", ms);
    char want[96];
    snprintf(want, sizeof want, "worker %d (the leader of node 1)", wpn);
    return st != DISCO_OK && strstr(disco_last_error(), "no answer within") != NULL &&
                   strstr(disco_last_error(), want) != NULL && ms < 20000
               ? 0
               : 1;
}

int node_comm_scenario(disco_session_t *s, const char *sc, int wpn)
{
    if (strcmp(sc, "ctx-nopeer") == 0)
        return nopeer(s, wpn);
    if (strcmp(sc, "ctx-more") == 0)
        return more(s, wpn, false);
    if (strcmp(sc, "ctx-more-sim") == 0)
        return more(s, wpn, true);
    return -1;
}
