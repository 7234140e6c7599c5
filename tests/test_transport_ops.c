/* test_transport_ops.c - the seam between the generic transport
 * (transport.c) and its kinds (workers/rpc/transport_ops.h): every kind's
 * table is complete and consistent; a kind's ops, called directly, fail
 * with the documented status once the peer has closed; and the generic
 * calls apply the argument checks and the transfer rule around any table,
 * shown with a scripted fake kind. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/transport.h"
#include "tests/transport_util.h"
#include "workers/rpc/transport_ops.h"

static const struct disco__transport_ops *const tables[NKINDS] = {
    [K_SHM] = &disco__transport_shm,
    [K_UNIX] = &disco__transport_unix,
    [K_TCP] = &disco__transport_tcp,
    [K_PIPE] = &disco__transport_pipe,
};

/* ---- the tables ---- */

/* Every kind's table has its name (the address scheme, distinct from the
 * others), every stream op, and the establishing ops exactly when it has a
 * carrier; refuse only on a Unix-socket carrier (where accept checks uids). */
START_TEST(test_tables_complete)
{
    for (int k = 0; k < NKINDS; k++) {
        const struct disco__transport_ops *o = tables[k];
        ck_assert_msg(o->name != NULL && strcmp(o->name, kinds[k]) == 0, "table %d: name %s", k,
                      o->name ? o->name : "(null)");
        ck_assert_msg(o->send && o->recv && o->fds && o->peer && o->close && o->abandon,
                      "%s: a stream op is missing", o->name);
        bool addressed = o->carrier != DISCO__CARRIER_NONE;
        ck_assert_msg((o->accept != NULL) == addressed && (o->connect != NULL) == addressed,
                      "%s: accept/connect present must match having a carrier", o->name);
        ck_assert_msg(o->refuse == NULL || o->carrier == DISCO__CARRIER_UNIX,
                      "%s: refuse without a uid-checked carrier", o->name);
        for (int j = 0; j < k; j++)
            ck_assert_msg(tables[j] != o && strcmp(tables[j]->name, o->name) != 0,
                          "%s: two tables share a name", o->name);
    }
    ck_assert_int_eq(disco__transport_tcp.carrier, DISCO__CARRIER_TCP);
    ck_assert_int_eq(disco__transport_unix.carrier, DISCO__CARRIER_UNIX);
    ck_assert_int_eq(disco__transport_shm.carrier, DISCO__CARRIER_UNIX);
    ck_assert_int_eq(disco__transport_pipe.carrier, DISCO__CARRIER_NONE);
}
END_TEST

/* A transport made for each kind points at that kind's table, and the
 * public fds and peer calls answer what the kind's ops answer. Then, with
 * the peer closed (it closed and exited), the kind's recv op called
 * directly returns DISCO_E_CLOSED having taken nothing, its error naming
 * the kind; so does its send op (tcp: once the peer's reset is back, which
 * a bounded number of sends reaches); and the public recv reports the same
 * without breaking the transport (nothing moved). */
START_TEST(test_ops_after_peer_closed)
{
    disco_transport_t *t;
    pid_t pid = pair_fork(_i, &t);
    if (pid == 0) {
        disco_transport_close(t);
        _exit(0);
    }
    ck_assert_ptr_eq(t->ops, tables[_i]);
    int a[4], b[4];
    int n = disco_transport_fds(t, a);
    ck_assert_int_eq(n, t->ops->fds(t, b));
    ck_assert_msg(n >= 1 && memcmp(a, b, (size_t)n * sizeof a[0]) == 0, "%s: fds", kinds[_i]);
    char p1[128], p2[128];
    disco_transport_peer(t, p1, sizeof p1);
    t->ops->peer(t, p2, sizeof p2);
    ck_assert_str_eq(p1, p2);
    ck_assert_msg(strncmp(p1, kinds[_i], strlen(kinds[_i])) == 0, "%s: peer \"%s\"", kinds[_i], p1);
    tu_wait_ok(pid, "child");

    char buf[64] = {0};
    size_t done = 99;
    CK_STATUS(t->ops->recv(t, buf, sizeof buf, in_ms(2000), &done), DISCO_E_CLOSED);
    ck_assert_msg(done == 0, "%s: recv took %zu bytes", kinds[_i], done);
    ck_assert_msg(strncmp(disco_last_error(), kinds[_i], strlen(kinds[_i])) == 0,
                  "%s: detail \"%s\"", kinds[_i], disco_last_error());
    CK_STATUS(disco_transport_recv(t, buf, sizeof buf, in_ms(2000)), DISCO_E_CLOSED);
    ck_assert_msg(!t->broken, "%s: broken after a recv that moved nothing", kinds[_i]);

    disco_status_t st = DISCO_OK;
    for (int i = 0; i < 1000 && st == DISCO_OK; i++) {
        done = 99;
        st = t->ops->send(t, buf, 1, in_ms(2000), &done);
        ck_assert_msg(_i == K_TCP || st != DISCO_OK, "%s: send to a closed peer went", kinds[_i]);
        ck_assert_msg(done == (st == DISCO_OK ? 1u : 0u), "%s: send done %zu", kinds[_i], done);
    }
    CK_STATUS(st, DISCO_E_CLOSED);
    disco_transport_close(t);
}
END_TEST

/* ---- the generic part around a fake kind ---- */

/* A scripted kind: each op returns the status and byte count it is told and
 * counts its calls. */
struct fake {
    struct disco_transport base;
    disco_status_t st; /* what send and recv return */
    size_t done;       /* and what they say went */
    int sends, recvs;
};

static int fake_closes, fake_abandons;

static disco_status_t fake_xfer(struct disco_transport *t, size_t len, size_t *done_p, int *calls)
{
    struct fake *f = (struct fake *)t;
    (*calls)++;
    *done_p = f->done < len ? f->done : len;
    if (f->st != DISCO_OK)
        return disco_set_error(f->st, "fake transport: scripted %s", disco_err_name(f->st));
    return DISCO_OK;
}

static disco_status_t fake_send(struct disco_transport *t, const void *buf, size_t len,
                                int64_t deadline_ns, size_t *done_p)
{
    (void)buf;
    (void)deadline_ns;
    return fake_xfer(t, len, done_p, &((struct fake *)t)->sends);
}

static disco_status_t fake_recv(struct disco_transport *t, void *buf, size_t len,
                                int64_t deadline_ns, size_t *done_p)
{
    (void)buf;
    (void)deadline_ns;
    return fake_xfer(t, len, done_p, &((struct fake *)t)->recvs);
}

static int fake_fds(const struct disco_transport *t, int fds_out[4])
{
    (void)t;
    fds_out[0] = 7;
    fds_out[1] = 9;
    return 2;
}

static void fake_peer(const struct disco_transport *t, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s over there", t->ops->name);
}

static void fake_close(struct disco_transport *t)
{
    fake_closes++;
    free(t);
}

static void fake_abandon(struct disco_transport *t)
{
    fake_abandons++;
    free(t);
}

static const struct disco__transport_ops fake_ops = {
    .name = "fake",
    .carrier = DISCO__CARRIER_NONE,
    .send = fake_send,
    .recv = fake_recv,
    .fds = fake_fds,
    .peer = fake_peer,
    .close = fake_close,
    .abandon = fake_abandon,
};

static struct fake *fake_new(void)
{
    struct fake *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    f->base.ops = &fake_ops;
    return f;
}

/* The public calls go through the table: kind, fds and peer answer what the
 * fake's ops say; empty transfers and NULL buffers never reach an op; close
 * and abandon call their op once. */
START_TEST(test_dispatch)
{
    struct fake *f = fake_new();
    disco_transport_t *t = &f->base;
    ck_assert_str_eq(disco_transport_kind(t), "fake");
    int fds[4];
    ck_assert_int_eq(disco_transport_fds(t, fds), 2);
    ck_assert(fds[0] == 7 && fds[1] == 9);
    char peer[32];
    ck_assert_str_eq(disco_transport_peer(t, peer, sizeof peer), "fake over there");
    char b[8];
    CK_OK(disco_transport_send(t, b, 0, 0));
    CK_OK(disco_transport_recv(t, b, 0, 0));
    CK_STATUS(disco_transport_send(t, NULL, 1, 0), DISCO_E_INVAL);
    CK_STATUS(disco_transport_recv(t, NULL, 1, 0), DISCO_E_INVAL);
    ck_assert_int_eq(f->sends + f->recvs, 0);
    f->done = sizeof b;
    CK_OK(disco_transport_send(t, b, sizeof b, 0));
    CK_OK(disco_transport_recv(t, b, sizeof b, 0));
    ck_assert(f->sends == 1 && f->recvs == 1);
    fake_closes = fake_abandons = 0;
    disco_transport_close(t);
    ck_assert(fake_closes == 1 && fake_abandons == 0);
    disco_transport_abandon(&fake_new()->base);
    ck_assert(fake_closes == 1 && fake_abandons == 1);
    disco_transport_close(NULL); /* no op to call, no crash */
    disco_transport_abandon(NULL);
}
END_TEST

/* The transfer rule is the dispatch's, whatever the kind: a failure that
 * moved nothing leaves the transport usable and its status as the op said;
 * one after some bytes breaks it, and every later send and recv returns
 * DISCO_E_BROKEN naming the kind without reaching an op; a recv that met
 * the end of the stream part way becomes DISCO_E_TRUNCATED. */
START_TEST(test_transfer_rule)
{
    struct fake *f = fake_new();
    disco_transport_t *t = &f->base;
    char b[8];
    f->st = DISCO_E_TIMEOUT;
    CK_STATUS(disco_transport_send(t, b, sizeof b, 0), DISCO_E_TIMEOUT);
    CK_STATUS(disco_transport_recv(t, b, sizeof b, 0), DISCO_E_TIMEOUT);
    f->st = DISCO_E_CLOSED;
    CK_STATUS(disco_transport_recv(t, b, sizeof b, 0), DISCO_E_CLOSED);
    ck_assert(!t->broken && f->sends == 1 && f->recvs == 2);
    f->done = 5;
    CK_STATUS(disco_transport_recv(t, b, sizeof b, 0), DISCO_E_TRUNCATED);
    ck_assert_msg(strstr(disco_last_error(), "fake transport") &&
                      strstr(disco_last_error(), "5 of 8"),
                  "detail \"%s\"", disco_last_error());
    ck_assert(t->broken);
    CK_STATUS(disco_transport_send(t, b, sizeof b, 0), DISCO_E_BROKEN);
    CK_STATUS(disco_transport_recv(t, b, sizeof b, 0), DISCO_E_BROKEN);
    ck_assert_msg(strstr(disco_last_error(), "fake transport") != NULL, "detail \"%s\"",
                  disco_last_error());
    ck_assert(f->sends == 1 && f->recvs == 3);
    disco_transport_close(t);

    f = fake_new();
    t = &f->base;
    f->st = DISCO_E_TIMEOUT;
    f->done = 3;
    CK_STATUS(disco_transport_send(t, b, sizeof b, 0), DISCO_E_TIMEOUT);
    ck_assert(t->broken);
    CK_STATUS(disco_transport_recv(t, b, sizeof b, 0), DISCO_E_BROKEN);
    ck_assert(f->sends == 1 && f->recvs == 0);
    disco_transport_close(t);
}
END_TEST

Suite *suite_transport_ops(void)
{
    Suite *s = suite_create("transport_ops");
    TCase *tc = tcase_create("tables");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_tables_complete);
    tcase_add_loop_test(tc, test_ops_after_peer_closed, 0, NKINDS);
    suite_add_tcase(s, tc);

    tc = tcase_create("dispatch");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_dispatch);
    tcase_add_test(tc, test_transfer_rule);
    suite_add_tcase(s, tc);
    return s;
}
