/* test_trace_p2p.c - sends and receives inside worker functions
 * (disco_ctx_send, disco_ctx_recv) in the trace (suite trace, added by
 * test_trace.c's suite_trace): a nested slice on each side naming its
 * peer, paired send to receive, in the JSON with a flow from each send to
 * the receive that took it, and read back with their peers. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/trace.h"
#include "tests/session_util.h"
#include "tests/trace_util.h"

#define WORLD 3
#define ITERS 2 /* comm.sendrecv_loop: each a send 0 -> 1 and a send 1 -> 0 */

/* The send or receive of t that pairs with c (same seq and index, each the
 * other's peer, the other kind), and how many do. */
static const disco_trace_coll_t *pair_of(const disco_trace_t *t, const disco_trace_coll_t *c,
                                         int *n_out)
{
    const disco_trace_coll_t *found = NULL;
    *n_out = 0;
    for (size_t j = 0; j < t->ncolls; j++) {
        const disco_trace_coll_t *o = &t->colls[j];
        if (o->seq == c->seq && o->index == c->index && o->worker == c->peer &&
            o->peer == c->worker && strcmp(o->name, c->name) != 0) {
            found = o;
            ++*n_out;
        }
    }
    return found;
}

/* The "X" event of the JSON named name on track tid at ts, or NULL. */
static json_t *slice_at(json_t *ev, const char *name, int tid, double ts)
{
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *nm = json_string_value(json_object_get(e, "name"));
        double s = json_number_value(json_object_get(e, "ts"));
        double d = json_number_value(json_object_get(e, "dur"));
        if (ph != NULL && strcmp(ph, "X") == 0 && nm != NULL && strcmp(nm, name) == 0 &&
            json_integer_value(json_object_get(e, "tid")) == tid && s <= ts && ts <= s + d)
            return e;
    }
    return NULL;
}

/* worker 0 and 1 send to each other ITERS times in one command (worker 2
 * idle): each call is a nested slice on its worker inside the command's
 * slice, "send" or "recv" with the other as peer and a post index, and
 * each send pairs with exactly one receive on its peer; the JSON has
 * "ctx_send" / "ctx_recv" slices with args.peer and one "sent" flow per
 * send, starting on the sender's send slice and finishing inside the
 * receiver's recv slice; read back, the peers are kept. */
START_TEST(test_p2p_slices_and_flows)
{
    disco_session_config_t cfg = disco_session_config_default(WORLD);
    cfg.worker_path = DISCO_TEST_WORKER;
    disco_session_t *s = tu_open_with_testlib(&cfg);
    disco_dref_t f, r;
    disco_value_t a[2] = {disco_value_int(1024), disco_value_int(ITERS)};
    CK_OK(disco_session_get_func(s, "comm.sendrecv_loop", &f));
    CK_OK(disco_session_call_sync_all(s, f, a, 2, &r));
    CK_OK(disco_session_free_reg(s, r));
    disco_trace_t *t, *back;
    CK_OK(disco_session_trace(s, &t));
    ck_assert_uint_eq(t->ncolls, 4 * ITERS);
    int sends[WORLD] = {0}, recvs[WORLD] = {0};
    for (size_t i = 0; i < t->ncolls; i++) {
        const disco_trace_coll_t *c = &t->colls[i];
        bool send = strcmp(c->name, "send") == 0;
        ck_assert_msg(send || strcmp(c->name, "recv") == 0, "a %s record", c->name);
        ck_assert_msg(c->worker < 2 && c->peer == 1 - c->worker, "worker %d: peer %d", c->worker,
                      c->peer);
        ck_assert_int_eq(c->members, 2);
        ck_assert_int_eq(c->group, -1);
        ck_assert_uint_ne(c->index, 0);
        (send ? sends : recvs)[c->worker]++;
        int n;
        const disco_trace_coll_t *o = pair_of(t, c, &n);
        ck_assert_msg(n == 1, "worker %d's %s %u pairs with %d records", c->worker, c->name,
                      c->index, n);
        const disco_trace_coll_t *snd = send ? c : o, *rcv = send ? o : c;
        ck_assert_msg(rcv->end_us >= snd->start_us, "a receive that ended before its send began");
        for (size_t j = 0; j < t->nslices; j++) /* inside the command's slice */
            if (t->slices[j].worker == c->worker && t->slices[j].seq == c->seq)
                ck_assert(t->slices[j].start_us <= c->start_us && c->end_us <= t->slices[j].end_us);
    }
    for (int w = 0; w < 2; w++) {
        ck_assert_int_eq(sends[w], ITERS);
        ck_assert_int_eq(recvs[w], ITERS);
    }
    char path[] = "/tmp/disco-test-p2p-XXXXXX";
    json_t *doc = tu_trace_json(t, path), *ev = json_object_get(doc, "traceEvents");
    size_t xs = 0, flows = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        if (strcmp(ph, "X") == 0 && name != NULL && strncmp(name, "ctx_", 4) == 0) {
            json_t *peer = json_object_get(json_object_get(e, "args"), "peer");
            int tid = (int)json_integer_value(json_object_get(e, "tid"));
            ck_assert_msg(json_is_integer(peer) && json_integer_value(peer) == 2 - tid,
                          "%s on track %d without its peer", name, tid);
            xs++;
        }
        if (strcmp(ph, "s") != 0 || strcmp(name, "sent") != 0)
            continue;
        /* the flow's start on a send slice; its finish, same id, in the peer's recv */
        json_int_t id = json_integer_value(json_object_get(e, "id"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        ck_assert_ptr_nonnull(
            slice_at(ev, "ctx_send", tid, json_number_value(json_object_get(e, "ts"))));
        int finishes = 0;
        for (size_t j = 0; j < json_array_size(ev); j++) {
            json_t *g = json_array_get(ev, j);
            const char *gph = json_string_value(json_object_get(g, "ph"));
            if (strcmp(gph, "f") != 0 || json_integer_value(json_object_get(g, "id")) != id)
                continue;
            finishes++;
            int gtid = (int)json_integer_value(json_object_get(g, "tid"));
            ck_assert_int_eq(gtid, 3 - tid); /* worker 1 - (tid - 1), as a track */
            ck_assert_str_eq(json_string_value(json_object_get(g, "name")), "sent");
            ck_assert_ptr_nonnull(
                slice_at(ev, "ctx_recv", gtid, json_number_value(json_object_get(g, "ts"))));
        }
        ck_assert_int_eq(finishes, 1);
        flows++;
    }
    ck_assert_uint_eq(xs, 4 * ITERS);
    ck_assert_uint_eq(flows, 2 * ITERS);
    json_decref(doc);
    CK_OK(disco_trace_load_json(path, &back));
    unlink(path);
    ck_assert_uint_eq(back->ncolls, t->ncolls);
    for (size_t i = 0; i < t->ncolls; i++) {
        ck_assert_int_eq(back->colls[i].peer, t->colls[i].peer);
        ck_assert_uint_eq(back->colls[i].index, t->colls[i].index);
        ck_assert_str_eq(back->colls[i].name, t->colls[i].name);
    }
    disco_trace_free(back);
    disco_trace_free(t);
    (void)disco_session_free_reg(s, f);
    disco_session_close(s);
}
END_TEST

/* Adds this file's tests to suite trace's case (test_trace.c). */
void trace_p2p_tests(TCase *tc);

void trace_p2p_tests(TCase *tc)
{
    tcase_add_test(tc, test_p2p_slices_and_flows);
}
