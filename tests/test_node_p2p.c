/* test_node_p2p.c - disco_ctx_send / disco_ctx_recv between any two workers
 * on two nodes (workers/data/comm_net.c, scheduler/node/node_fwd.c), for
 * real: each test runs one of tests/node_p2p.c's scenarios under mpirun
 * with 2 or 3 "nodes" on this machine, more workers than cores, and checks
 * what rank 0 printed (the workers check every byte they receive), the
 * time a failure took and that nothing is left running. Every test skips,
 * saying why, when this build has no MPI or mpirun is missing. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "tests/node_run.h"

/* Runs scenario on np nodes of wpn workers (sim: 2 sim GPUs a node;
 * call_ms: the call timeout, 0 for node_prog's 10 s; var: "NAME=value" set
 * on every node, or NULL), stderr too; returns rank 0's exit code; *secs
 * the time taken. */
static int p2p_run_var(int np, int wpn, bool sim, unsigned call_ms, const char *var,
                       const char *scenario, char *out, size_t cap, double *secs)
{
    char env[160] = "", exports[128] = "";
    if (sim)
        strcat(env, "DISCO_SIM_GPUS=2 "), strcat(exports, " -x DISCO_SIM_GPUS");
    if (call_ms != 0) {
        snprintf(env + strlen(env), sizeof env - strlen(env), "NODE_PROG_CALL_MS=%u ", call_ms);
        strcat(exports, " -x NODE_PROG_CALL_MS");
    }
    if (var != NULL) {
        snprintf(env + strlen(env), sizeof env - strlen(env), "%s", var);
        snprintf(exports + strlen(exports), sizeof exports - strlen(exports), " -x %.*s",
                 (int)strcspn(var, "="), var);
    }
    return on_nodes_env(np, scenario, wpn, true, env, exports, out, cap, secs);
}

static int p2p_run_ms(int np, int wpn, bool sim, unsigned call_ms, const char *scenario, char *out,
                      size_t cap, double *secs)
{
    return p2p_run_var(np, wpn, sim, call_ms, NULL, scenario, out, cap, secs);
}

static int p2p_run(int np, int wpn, bool sim, const char *scenario, char *out, size_t cap,
                   double *secs)
{
    return p2p_run_ms(np, wpn, sim, 0, scenario, out, cap, secs);
}

/* The number after "sc worker w: " in out (-2 when there is none). */
static long long answer_of(const char *out, const char *sc, int w)
{
    char want[96];
    snprintf(want, sizeof want, "%s worker %d: ", sc, w);
    const char *p = strstr(out, want);
    long long v = -2;
    if (p == NULL || sscanf(p + strlen(want), "%lld", &v) != 1)
        return -2;
    return v;
}

/* Every worker answered 1 (or want) to scenario sc. */
static void assert_all(const char *out, const char *sc, int workers, long want)
{
    for (int w = 0; w < workers; w++) {
        char line[96];
        snprintf(line, sizeof line, "%s worker %d: %ld\n", sc, w, want);
        ck_assert_msg(strstr(out, line) != NULL, "no \"%s\" in:\n%s", line, out);
    }
}

static const struct {
    int wpn;
    bool sim;
} pairs_shapes[] = {{2, false}, {3, false}, {2, true}};

/* Every pair shape across two nodes, each byte checked by the receiver:
 * leader to non-leader, non-leader to leader, non-leader to non-leader,
 * both directions at once (a leader and a non-leader each way, 300000
 * float32: past MPI's eager size, so two forwarders that served one
 * request at a time would deadlock), leader to leader; int32, float64,
 * uint8, float32, int16, 1 to 3 dims; host tensors with 2 and 3 workers a
 * node, sim device tensors with 2. */
START_TEST(test_p2p_every_pair)
{
    if (!can_run())
        return;
    static char out[16384];
    int wpn = pairs_shapes[_i].wpn;
    int rc = p2p_run(2, wpn, pairs_shapes[_i].sim, "p2p-pairs", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-pairs");
    assert_all(out, "p2p-pairs", 2 * wpn, 1);
    assert_nothing_left();
}
END_TEST

/* Three nodes, groups the nodes: every worker (leaders and not) receives
 * from the previous group (recv_from_prev_group) and sends to the next
 * (send_to_next_group), the last node's closing the ring to node 0's; host
 * and sim tensors. */
START_TEST(test_p2p_ring_of_groups)
{
    if (!can_run())
        return;
    static char out[16384];
    bool sim = _i == 1;
    int rc = p2p_run(3, 2, sim, "p2p-ring", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-ring");
    assert_all(out, "p2p-ring", 6, 1);
    assert_nothing_left();
}
END_TEST

/* 200 rounds, each two sends at once in opposite directions (non-leader
 * to non-leader one way, leader to leader the other), every byte of every
 * round checked: nothing is lost, reordered or taken for another round. */
START_TEST(test_p2p_repeated)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run(2, 2, false, "p2p-repeat", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-repeat");
    assert_all(out, "p2p-repeat", 4, 200);
    assert_nothing_left();
}
END_TEST

/* A dtype, a shape and a device type (host to sim) that differ between
 * two non-leaders on two nodes, in one message and in pieces: DISCO_E_MISMATCH on both ends, the
 * sender's words holding the receiver's (the scenario compares them), and
 * neither waits for the deadline; a sender failing on its own argument
 * (NULL) fails the receiver in its words; then a send that matches goes
 * through. */
START_TEST(test_p2p_mismatch_both_ends)
{
    if (!can_run())
        return;
    static char out[16384];
    double secs;
    /* _i 1: in pieces of 100 bytes (the sends are 1200), so the verdict
     * on a head whose bytes come later reads the same. */
    int rc = p2p_run_var(2, 2, true, 0, _i == 1 ? "DISCO_FWD_PIECE_BYTES=100" : NULL,
                         "p2p-mismatch", out, sizeof out, &secs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-mismatch");
    ck_assert_msg(strstr(out, "p2p-mismatch: 3 alike, alike") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "worker 3 receives float32 of 1 dims") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "(device type 12)") != NULL, "%s", out);
    /* A sender that fails on its own argument: both ends fail, the
     * receiver in its words. */
    ck_assert_msg(
        strstr(out, "p2p-fail worker 1: DISCO_E_INVAL: disco_ctx_send: a tensor is NULL") != NULL,
        "%s", out);
    ck_assert_msg(strstr(out, "p2p-fail worker 3: DISCO_E_INVAL: disco_ctx_recv: worker 1: "
                              "disco_ctx_send: a tensor is NULL") != NULL,
                  "%s", out);
    ck_assert_msg(secs < 8.0, "took %.1f s: a mismatch waited for the deadline\n%s", secs, out);
    assert_nothing_left();
}
END_TEST

/* A send whose receiver (on another node, not a leader) never receives,
 * then a receive whose sender never sends: each call fails with
 * DISCO_E_TIMEOUT within the call timeout (10 s; the forwarder answers at
 * 4/5 of it), naming the peer's global id and its node, the session
 * reporting it (no worker killed, no hang); then 3 rounds of sends on the
 * same session work. */
START_TEST(test_p2p_no_peer_times_out)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run(2, 2, false, "p2p-nopeer", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-nopeer");
    ck_assert_msg(strstr(out, "p2p-nopeer 0: DISCO_E_TIMEOUT: ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "disco_ctx_send to worker 3 (on node 1): no answer within") != NULL,
                  "%s", out);
    ck_assert_msg(strstr(out, "p2p-nopeer 1: DISCO_E_TIMEOUT: ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "disco_ctx_recv from worker 1 (on node 0): no answer within") != NULL,
                  "%s", out);
    for (int which = 0; which < 2; which++) {
        char want[64];
        long long ms = -1;
        snprintf(want, sizeof want, "p2p-nopeer %d took ", which);
        const char *p = strstr(out, want);
        ck_assert_msg(p != NULL && sscanf(p + strlen(want), "%lld", &ms) == 1, "%s", out);
        ck_assert_msg(ms >= 7000 && ms < 10000, "%s took %lld ms\n%s", want, ms, out);
    }
    ck_assert_msg(strstr(out, "killed") == NULL, "%s", out);
    assert_all(out, "after", 4, 3);
    assert_nothing_left();
}
END_TEST

/* A sender failing on its own argument (NULL), then sending a tensor, to
 * a receiver that computes 300 ms before its two receives (it posts them
 * after both sends reached its node; the outcome must not depend on it):
 * the first receive fails in the sender's words, the second gets the
 * tensor's bytes (checked), neither at the deadline. Without the fix the
 * failure was cancelled and dropped, the first receive took the second
 * send and the second timed out. */
START_TEST(test_p2p_failure_then_send_late_receiver)
{
    if (!can_run())
        return;
    static char out[16384];
    double secs;
    int rc = p2p_run(2, 2, false, "p2p-failfirst", out, sizeof out, &secs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-failfirst");
    const char *want[] = {
        "p2p-failfirst worker 1: DISCO_E_INVAL: disco_ctx_send: a tensor is NULL\n",
        "p2p-failfirst worker 1: DISCO_OK: \n",
        "p2p-failfirst worker 3: DISCO_E_INVAL: disco_ctx_recv: worker 1: disco_ctx_send: a "
        "tensor is NULL\np2p-failfirst worker 3: DISCO_OK: \n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out, want[i]) != NULL, "no \"%s\" in:\n%s", want[i], out);
    ck_assert_msg(secs < 8.0, "took %.1f s: a receive waited for the deadline\n%s", secs, out);
    assert_nothing_left();
}
END_TEST

/* A worker that computes 2/5 of the call timeout (5 s here) before a
 * receive whose sender never sends: the receive fails with
 * DISCO_E_TIMEOUT naming the peer by 4/5 of the timeout counted from the
 * command's start, so the session reports it before the controller's own
 * wait for the worker ends (it would kill the worker and break the
 * session); then 3 rounds of sends on the same session work. Without the
 * fix the forwarder counted from the receive and answered at 6/5. */
START_TEST(test_p2p_late_receive_times_out)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run_ms(2, 2, false, 5000, "p2p-late", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-late");
    const char *p = strstr(out, "p2p-late: DISCO_E_TIMEOUT: ");
    const char *why = "disco_ctx_recv from worker 3 (on node 1): no answer within ";
    ck_assert_msg(p != NULL && strstr(p, why) != NULL, "no \"%s\" in:\n%s", why, out);
    const char *took = strstr(p, "(took ");
    long long ms = -1;
    ck_assert_msg(took != NULL && sscanf(took, "(took %lld ms", &ms) == 1, "%s", out);
    ck_assert_msg(ms >= 3500 && ms < 5000, "the call took %lld ms\n%s", ms, out);
    ck_assert_msg(strstr(out, "killed") == NULL, "%s", out);
    assert_all(out, "after", 4, 3);
    assert_nothing_left();
}
END_TEST

/* A DATA whose sender id is not a worker of the node MPI says sent it
 * (node 2's leader forges one naming worker 3 of node 1, for worker 1's
 * receive from worker 3, before worker 3's real send): node 0's forwarder
 * drops it and says so once; worker 1 gets worker 3's bytes (checked).
 * Without the check the forged bytes were taken. */
START_TEST(test_p2p_forged_sender_dropped)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run(3, 2, false, "p2p-forged", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-forged");
    assert_all(out, "p2p-forged", 6, 1);
    ck_assert_msg(strstr(out, "disco node 0: dropped a DATA from node 2 naming worker 3, not one "
                              "of its workers") != NULL,
                  "%s", out);
    assert_nothing_left();
}
END_TEST

/* The session closes while an agent's worker is still in a command that
 * sends 1 MiB to a node-0 worker that never receives it (an asynchronous
 * call, then the close): node 0's forwarder serves until every agent said
 * goodbye, so the agent's send fails at its deadline (4/5 of the 5 s call
 * timeout), is cancelled, and the agent drains its forwarder, finalizes
 * MPI and exits cleanly: no "still in flight" on stderr. Without the fix
 * node 0 stopped its forwarder first and the agent could not drain. */
START_TEST(test_p2p_shutdown_drains)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run_ms(2, 2, false, 5000, "p2p-shutdown", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-shutdown");
    ck_assert_msg(strstr(out, "still in flight") == NULL, "%s", out);
    assert_nothing_left();
}
END_TEST

/* Sends and receives across nodes are in the trace as on one node: node
 * 0's workers' records name their peers on node 1 by global id (worker 0
 * sends to worker 3 and receives from 3 and 2, worker 1 sends to 2 and 3
 * and receives from 2: tests/node_p2p.c's ops) with a post index. */
START_TEST(test_p2p_in_trace)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run(2, 2, false, "p2p-trace", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-trace");
    const char *want[] = {
        "trace: worker 0 send peer 3 index ", "trace: worker 0 recv peer 3 index ",
        "trace: worker 0 recv peer 2 index ", "trace: worker 0 send peer 2 index ",
        "trace: worker 1 send peer 2 index ", "trace: worker 1 send peer 3 index ",
        "trace: worker 1 recv peer 2 index "};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *p = strstr(out, want[i]);
        unsigned index = 0;
        ck_assert_msg(p != NULL && sscanf(p + strlen(want[i]), "%u", &index) == 1 && index != 0,
                      "no \"%s\" with an index in:\n%s", want[i], out);
    }
    assert_nothing_left();
}
END_TEST

/* The verdicts of a run (tag) in which node 1 died while worker 1 of node
 * 0 waited to receive from worker 3: the session names the dead node and
 * the job ended well before twice the 10 s deadline. The session's break
 * and the forwarder's answer race: when the forwarder answered first, its
 * stderr line names the call and its peer and came within ms_max; worker
 * 1's line, when it came, says the same, or (its own wait ended at the
 * session's break: its abort word, a code without words) that the session
 * broke. Without the comm_net fix its words were empty there ("(on node
 * 1):  (took"). */
static void assert_node_death(const char *out, const char *tag, double secs, long long ms_max)
{
    char said[128];
    snprintf(said, sizeof said, "%s: DISCO_E_WORKER_DIED: node 1 (workers 2-3, host ", tag);
    ck_assert_msg(strstr(out, said) != NULL, "%s", out);
    ck_assert_msg(secs < 20.0, "the job took %.1f s to end (the call's deadline is 10 s)", secs);
    const char *words = "DISCO_E_WORKER_DIED: disco_ctx_recv from worker 3 (on node 1): node 1 "
                        "(workers 2-3, host ";
    const char *fwd = "disco node 0: worker 1's wait failed after ", *f = strstr(out, fwd);
    long long ms = -1;
    int used = 0;
    if (f != NULL) {
        ck_assert_msg(sscanf(f + strlen(fwd), "%lld ms: %n", &ms, &used) == 1 && used > 0 &&
                          strncmp(f + strlen(fwd) + used, words, strlen(words)) == 0,
                      "the forwarder's line reads otherwise:\n%s", out);
        ck_assert_msg(ms < ms_max, "the receive took %lld ms to fail\n%s", ms, out);
    }
    char who[96];
    snprintf(who, sizeof who, "%s worker 1: ", tag);
    const char *w = strstr(out, who);
    const char *broke = "DISCO_E_WORKER_DIED: disco_ctx_recv from worker 3 (on node 1): the "
                        "session broke (DISCO_E_WORKER_DIED) while it waited";
    ck_assert_msg(w == NULL || strncmp(w + strlen(who), words, strlen(words)) == 0 ||
                      strncmp(w + strlen(who), broke, strlen(broke)) == 0,
                  "worker 1 said otherwise:\n%s", out);
}

/* A node that dies while a worker of another node waits to receive from
 * one of its workers: the call fails with DISCO_E_WORKER_DIED naming the
 * dead node, within the heartbeat lease (1.5 s here), not at the deadline
 * (10 s); nothing is left running. The session's break for that death and
 * the forwarder's answer to the waiting receive race: when the forwarder
 * answers first, its stderr line and worker 1's say so, naming the call
 * and its peer, and must read as below (in 2 of 3 runs by hand it did);
 * when the break comes first, worker 1 is ended before either, or its
 * own wait ends at the break and it says the session broke. */
START_TEST(test_p2p_peer_node_dies)
{
    if (!can_run())
        return;
    static char out[16384];
    double secs;
    int rc = p2p_run(2, 2, false, "p2p-kill", out, sizeof out, &secs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-kill");
    assert_node_death(out, "p2p-kill", secs, 6000);
    assert_nothing_left();
}
END_TEST

/* Sends across nodes in pieces (DISCO_FWD_PIECE_BYTES=1000): one piece
 * exactly, a byte over and under a boundary (1001, 999, 2999, 3001), 3000
 * exactly, 100004 bytes both ways at once between a leader and a
 * non-leader (101 pieces, the last of 4 bytes), 3 dims, leader to leader,
 * 1 MiB (1049 pieces); host and sim tensors; every byte checked by the
 * receiver (the pattern shows a piece at another offset); each node's
 * forwarder wrote exactly the pieces the sizes make (114 into node 0,
 * 1162 into node 1). Without pieces a send was one message (and over
 * INT_MAX - 4096 bytes refused): no piece was written. */
START_TEST(test_p2p_pieces)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run_var(2, 2, _i == 1, 0, "DISCO_FWD_PIECE_BYTES=1000", "p2p-pieces", out,
                         sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-pieces");
    assert_all(out, "p2p-pieces", 4, 1);
    ck_assert_msg(answer_of(out, "pieces-in", 0) == 114, "node 0's pieces:\n%s", out);
    ck_assert_msg(answer_of(out, "pieces-in", 2) == 1162, "node 1's pieces:\n%s", out);
    assert_nothing_left();
}
END_TEST

/* A send of 32 MiB in pieces of 1 byte cannot end before the deadline
 * (4/5 of a 5 s call timeout): it fails in the middle (node 1's forwarder
 * wrote some pieces, not all) with DISCO_E_TIMEOUT on both ends, each
 * naming its peer, reported by the session (no worker killed); then 3
 * rounds of sends in pieces between the same two workers work (no stale
 * piece of the failed transfer is taken for them, every byte checked). */
START_TEST(test_p2p_piece_failure_midway)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc = p2p_run_var(2, 2, false, 5000, "DISCO_FWD_PIECE_BYTES=1", "p2p-bigfail", out,
                         sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-bigfail");
    const char *snd = strstr(out, "p2p-bigfail worker 1: DISCO_E_TIMEOUT: disco_ctx_send");
    const char *rcv = strstr(out, "p2p-bigfail worker 3: DISCO_E_TIMEOUT: disco_ctx_recv");
    ck_assert_msg(snd != NULL && rcv != NULL, "both ends fail with DISCO_E_TIMEOUT:\n%s", out);
    ck_assert_msg(strstr(snd, "worker 3") != NULL && strstr(rcv, "worker 1 (on node 0)") != NULL,
                  "each names its peer:\n%s", out);
    long long got = answer_of(out, "pieces-in", 2);
    ck_assert_msg(got > 0 && got < (32 << 20), "pieces written into node 1: %lld\n%s", got, out);
    ck_assert_msg(strstr(out, "killed") == NULL, "%s", out);
    assert_all(out, "after", 4, 3);
    assert_nothing_left();
}
END_TEST

/* A node that dies in the middle of a transfer in pieces (1 s into 32 MiB
 * sent in pieces of 1 byte, which would take far longer): the receive
 * fails with DISCO_E_WORKER_DIED naming the dead node within the
 * heartbeat lease (1.5 s here), not at the deadline (10 s), and not a
 * hang; nothing is left running. As in test_p2p_peer_node_dies, the
 * session's break and the forwarder's answer race: the worker's and the
 * forwarder's words are checked when they came. */
START_TEST(test_p2p_peer_node_dies_midway)
{
    if (!can_run())
        return;
    static char out[16384];
    double secs;
    int rc = p2p_run_var(2, 2, false, 0, "DISCO_FWD_PIECE_BYTES=1", "p2p-killmid", out, sizeof out,
                         &secs);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-killmid");
    assert_node_death(out, "p2p-killmid", secs, 7000);
    assert_nothing_left();
}
END_TEST

/* The hold bound (DISCO_FWD_HOLD_BYTES=1000): three workers of node 1
 * send 600 bytes each to worker 0, which receives them only after all
 * reached its node: its forwarder never holds more than 1000 bytes for
 * them (it held one, 600), the others wait at their senders and come
 * when asked; every byte checked. Without the bound it held 1800. */
START_TEST(test_p2p_hold_bound)
{
    if (!can_run())
        return;
    static char out[16384];
    int rc =
        p2p_run_var(2, 3, false, 0, "DISCO_FWD_HOLD_BYTES=1000", "p2p-hold", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-hold");
    assert_all(out, "p2p-hold", 6, 1);
    long long peak = answer_of(out, "held-peak", 0);
    ck_assert_msg(peak > 0 && peak <= 1000, "node 0 held %lld bytes at most\n%s", peak, out);
    assert_nothing_left();
}
END_TEST

/* Bytes available on this machine (MemAvailable), 0 when unknown. */
static unsigned long long mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb * 1024;
}

/* One send of INT_MAX + 8 bytes (past one MPI count) from a non-leader to
 * a non-leader across nodes, with the default pieces of 16 MiB: it
 * arrives whole (every 8-byte word and the 7-byte tail checked), in
 * exactly 129 pieces (128 of 16 MiB, one of 7 bytes). About 20 s and
 * 4.3 GiB of shared memory here; skipped, saying so, with less than 8
 * GiB available. Without pieces it failed with DISCO_E_UNSUPPORTED. */
START_TEST(test_p2p_over_int_max)
{
    if (!can_run())
        return;
    if (mem_available() < (8ull << 30)) {
        fprintf(stderr, "test_p2p_over_int_max skipped: less than 8 GiB of memory available\n");
        return;
    }
    static char out[16384];
    int rc = p2p_run_ms(2, 2, false, 60000, "p2p-huge", out, sizeof out, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    assert_ok(out, "p2p-huge");
    assert_all(out, "p2p-huge", 4, 1);
    ck_assert_msg(answer_of(out, "pieces-in", 2) == 129, "node 1's pieces:\n%s", out);
    assert_nothing_left();
}
END_TEST

/* DISCO_FWD_PIECE_BYTES that is no size (0, past 1 GiB, not a number)
 * fails the open on every node, naming the variable. */
START_TEST(test_p2p_piece_env_checked)
{
    if (!can_run())
        return;
    static char out[16384];
    const char *bad[] = {"DISCO_FWD_PIECE_BYTES=0", "DISCO_FWD_PIECE_BYTES=1073741825",
                         "DISCO_FWD_PIECE_BYTES=16M"};
    on_nodes_env(2, "open-fails", 2, true, bad[_i], " -x DISCO_FWD_PIECE_BYTES", out, sizeof out,
                 NULL);
    char want[160];
    snprintf(want, sizeof want, "open: DISCO_E_INVAL: node 0: node link: %s: want a whole number",
             bad[_i]);
    ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);
    assert_nothing_left();
}
END_TEST

Suite *suite_node_p2p(void)
{
    Suite *s = suite_create("node_p2p");
    TCase *tc = tcase_create("node_p2p");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_p2p_every_pair, 0, 3);
    tcase_add_loop_test(tc, test_p2p_ring_of_groups, 0, 2);
    tcase_add_test(tc, test_p2p_repeated);
    tcase_add_loop_test(tc, test_p2p_mismatch_both_ends, 0, 2);
    tcase_add_test(tc, test_p2p_no_peer_times_out);
    tcase_add_test(tc, test_p2p_failure_then_send_late_receiver);
    tcase_add_test(tc, test_p2p_late_receive_times_out);
    tcase_add_test(tc, test_p2p_forged_sender_dropped);
    tcase_add_test(tc, test_p2p_shutdown_drains);
    tcase_add_test(tc, test_p2p_in_trace);
    tcase_add_test(tc, test_p2p_peer_node_dies);
    tcase_add_loop_test(tc, test_p2p_pieces, 0, 2);
    tcase_add_test(tc, test_p2p_piece_failure_midway);
    tcase_add_test(tc, test_p2p_peer_node_dies_midway);
    tcase_add_test(tc, test_p2p_hold_bound);
    tcase_add_test(tc, test_p2p_over_int_max);
    tcase_add_loop_test(tc, test_p2p_piece_env_checked, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}
