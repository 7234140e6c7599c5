/* node_mpi.c - joining and leaving the MPI job (node.h): where this
 * process stands, MPI's start with the node link's communicators and the
 * handshake that every node opened the same session, and the end. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scheduler/node/node_impl.h"

#define DEFAULT_LEASE_MS 3000

/* ---- joining ---- */

static int env_int(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return -1;
    char *end;
    long x = strtol(v, &end, 10);
    return *end == '\0' && x >= 0 && x < INT_MAX ? (int)x : -1;
}

disco_status_t disco__node_join(const disco_session_config_t *cfg, struct disco__node_place *out)
{
    int inited = 0, rank = -1, size = -1;
    MPI_Initialized(&inited);
    if (inited) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    } else {
        rank = env_int("OMPI_COMM_WORLD_RANK");
        size = env_int("OMPI_COMM_WORLD_SIZE");
        if (rank < 0 || size < 1) {
            rank = env_int("PMIX_RANK");
            size = env_int("OMPI_UNIVERSE_SIZE");
        }
    }
    if (rank < 0 || size < 1 || rank >= size)
        return disco_set_error(DISCO_E_INVAL,
                               "cfg.nodes is DISCO_NODES_MPI, but this process was not started by "
                               "an MPI launcher (no OMPI_COMM_WORLD_RANK/SIZE): run it as "
                               "mpirun -np NODES ...");
    if (size > NODE_MAX)
        return disco_set_error(DISCO_E_INVAL, "%d nodes: at most %d", size, NODE_MAX);
    if (cfg->workers_per_node < 1 || cfg->workers_per_node > DISCO_MAX_WORKERS)
        return disco_set_error(DISCO_E_INVAL, "cfg.workers_per_node %d: must be 1..%d",
                               cfg->workers_per_node, DISCO_MAX_WORKERS);
    long total = (long)size * cfg->workers_per_node;
    if (total > DISCO_MAX_GLOBAL_WORKERS)
        return disco_set_error(DISCO_E_INVAL, "%d nodes of %d workers: at most %d workers", size,
                               cfg->workers_per_node, DISCO_MAX_GLOBAL_WORKERS);
    if (cfg->num_workers != 0 && cfg->num_workers != total)
        return disco_set_error(DISCO_E_INVAL,
                               "cfg.num_workers %d, but %d nodes of %d workers make %ld (0: so "
                               "many)",
                               cfg->num_workers, size, cfg->workers_per_node, total);
    int groups = cfg->num_groups > 0 ? cfg->num_groups : 1;
    if (groups != 1 && (groups % size != 0 || cfg->workers_per_node % (groups / size) != 0))
        return disco_set_error(DISCO_E_INVAL,
                               "cfg.num_groups %d over %d nodes of %d workers: groups other than "
                               "the one of everyone may not span nodes (each node must hold a "
                               "whole number of whole groups)",
                               groups, size, cfg->workers_per_node);
    out->node = rank;
    out->nodes = size;
    return DISCO_OK;
}

/* ---- starting and stopping ---- */

static disco_status_t dup_comm(struct disco__node *n, MPI_Comm *out, int64_t deadline)
{
    MPI_Request r;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, out, &r);
    if (rc != MPI_SUCCESS)
        return disco__node_mpi_fail(rc, "node link: MPI_Comm_idup");
    disco_status_t st =
        disco__node_await(n, &r, -1, deadline, "node link: every node opening", NULL);
    if (st == DISCO_OK)
        MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return st;
}

/* Rank 0 checks that every node opened the same session; everyone learns
 * the verdict. */
static disco_status_t handshake(struct disco__node *n, const disco_session_config_t *cfg,
                                int64_t deadline)
{
    struct disco__node_hello me = {.wpn = cfg->workers_per_node,
                                   .num_groups = cfg->num_groups > 0 ? cfg->num_groups : 1,
                                   .transport = (int32_t)cfg->transport,
                                   .pid = (int32_t)getpid(),
                                   .max_msg = cfg->max_msg,
                                   .timeout_ms = cfg->call_timeout_ms,
                                   .heap_bytes = cfg->heap_bytes};
    gethostname(me.host, sizeof me.host - 1);
    struct disco__node_hello *all = calloc((size_t)n->nodes, sizeof *all);
    if (all == NULL)
        return disco_set_error(DISCO_E_NOMEM, "node link: hello");
    MPI_Request r;
    int rc =
        MPI_Igather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, n->cmd, &r);
    disco_status_t st = rc != MPI_SUCCESS
                            ? disco__node_mpi_fail(rc, "node link: hello")
                            : disco__node_await(n, &r, -1, deadline, "node link: hello", NULL);
    struct {
        int32_t status;
        char msg[256];
        struct disco__node_hello ctl;
    } verdict = {.status = DISCO_OK};
    if (st == DISCO_OK && n->node == 0) {
        for (int k = 0; k < n->nodes; k++) {
            all[k].host[NODE_HOST_MAX - 1] = '\0';
            n->peer[k].hello = all[k];
        }
        for (int k = 1; k < n->nodes && verdict.status == DISCO_OK; k++)
            if (all[k].wpn != me.wpn || all[k].num_groups != me.num_groups ||
                all[k].transport != me.transport || all[k].max_msg != me.max_msg ||
                all[k].timeout_ms != me.timeout_ms || all[k].heap_bytes != me.heap_bytes) {
                verdict.status = DISCO_E_MISMATCH;
                snprintf(verdict.msg, sizeof verdict.msg,
                         "node %d (host %s) opened %d workers, %d groups, transport %d, max_msg "
                         "%u, timeout %u ms, heap %llu; node 0: %d, %d, %d, %u, %u, %llu",
                         k, all[k].host, all[k].wpn, all[k].num_groups, all[k].transport,
                         all[k].max_msg, all[k].timeout_ms, (unsigned long long)all[k].heap_bytes,
                         me.wpn, me.num_groups, me.transport, me.max_msg, me.timeout_ms,
                         (unsigned long long)me.heap_bytes);
            }
        verdict.ctl = me;
    }
    free(all);
    if (st != DISCO_OK)
        return st;
    rc = MPI_Ibcast(&verdict, (int)sizeof verdict, MPI_BYTE, 0, n->cmd, &r);
    st = rc != MPI_SUCCESS ? disco__node_mpi_fail(rc, "node link: verdict")
                           : disco__node_await(n, &r, -1, deadline, "node link: verdict", NULL);
    if (st != DISCO_OK)
        return st;
    if (n->node != 0) {
        verdict.ctl.host[NODE_HOST_MAX - 1] = '\0';
        n->peer[0].hello = verdict.ctl;
    }
    if (verdict.status != DISCO_OK) {
        verdict.msg[sizeof verdict.msg - 1] = '\0';
        return disco_set_error(DISCO_E_MISMATCH, "the nodes disagree: %s", verdict.msg);
    }
    return DISCO_OK;
}

static void node_free(struct disco__node *n)
{
    pthread_mutex_destroy(&n->lock);
    free(n->batch);
    free(n->in);
    free(n->reply);
    free(n->peer);
    free(n);
}

disco_status_t disco__node_start(const disco_session_config_t *cfg,
                                 const struct disco__node_place *p, uint32_t timeout_ms,
                                 disco_worker_t *w0, struct disco__node **out)
{
    struct disco__node *n = calloc(1, sizeof *n);
    if (n == NULL)
        return disco_set_error(DISCO_E_NOMEM, "node link");
    pthread_mutex_init(&n->lock, NULL);
    n->node = p->node;
    n->nodes = p->nodes;
    n->wpn = cfg->workers_per_node;
    n->asked = -1;
    /* The heap's room: every node's is the same size (the handshake checks
     * cfg.heap_bytes), and no tensor a peer sends can be larger. */
    n->heap_bytes = w0->heap != NULL ? w0->heap->arena_end - w0->heap->arena_off : 0;
    n->timeout_ns = (int64_t)timeout_ms * 1000000;
    int lease_ms = env_int("DISCO_NODE_LEASE_MS");
    if (lease_ms <= 0)
        lease_ms = DEFAULT_LEASE_MS;
    if ((uint32_t)lease_ms > timeout_ms / 2 && timeout_ms >= 200)
        lease_ms = (int)(timeout_ms / 2); /* a dead node is found within the call deadline */
    n->lease_ns = (int64_t)lease_ms * 1000000;
    n->beat_ns = n->lease_ns / 6;
    n->peer = calloc((size_t)n->nodes, sizeof *n->peer);
    n->bcap = NODE_BATCH_BYTES + 16 + (((size_t)cfg->max_msg + 7) & ~(size_t)7);
    n->batch = aligned_alloc(8, n->bcap);
    n->reply = aligned_alloc(8, DISCO_REPLY_MAX + NODE_UP_HEAD);
    if (n->peer == NULL || n->batch == NULL || n->reply == NULL) {
        node_free(n);
        return disco_set_error(DISCO_E_NOMEM, "node link buffers");
    }
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            node_free(n);
            return disco__node_mpi_fail(rc, "MPI_Init_thread");
        }
        n->we_init = true;
    } else {
        MPI_Query_thread(&provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    disco_status_t st = DISCO_OK;
    if (provided < MPI_THREAD_MULTIPLE)
        st = disco_set_error(DISCO_E_UNSUPPORTED,
                             "this MPI gives thread level %d; the node link needs "
                             "MPI_THREAD_MULTIPLE (its heartbeats, and the forwarding of sends "
                             "between workers of two nodes, run on threads of their own)",
                             provided);
    int64_t now = disco__node_now();
    for (int k = 0; k < n->nodes; k++)
        atomic_store_explicit(&n->peer[k].seen_ns, now, memory_order_relaxed);
    /* Every node must come within the deadline: one that never opens its
     * session fails the others' open instead of hanging them. */
    int64_t deadline = now + n->timeout_ns;
    if (st == DISCO_OK && (st = dup_comm(n, &n->cmd, deadline)) == DISCO_OK &&
        (st = dup_comm(n, &n->beat, deadline)) == DISCO_OK &&
        (st = dup_comm(n, &n->data, deadline)) == DISCO_OK &&
        (st = dup_comm(n, &n->fwd, deadline)) == DISCO_OK)
        st = handshake(n, cfg, deadline);
    if (st == DISCO_OK)
        st = disco__node_link_start(n);
    if (st == DISCO_OK && (st = disco__node_fwd_start(n, w0)) != DISCO_OK)
        disco__node_link_stop(n);
    if (st != DISCO_OK) {
        /* MPI cannot be finalized with a peer gone or a request pending:
         * left to the process's exit, as after a death. */
        node_free(n);
        return st;
    }
    disco__node_net_init(n);
    w0->net = &n->net;
    *out = n;
    return DISCO_OK;
}

int disco__node_self(const struct disco__node *n)
{
    return n->node;
}

void disco__node_stop(struct disco__node *n, bool healthy)
{
    if (n == NULL)
        return;
    bool clean = healthy;
    if (n->node == 0 && disco__node_flush(n) != DISCO_OK) /* the shutdown frame, posted */
        clean = false;
    if (n->node == 0 && clean) {
        /* The agents close their nodes on the shutdown frame and say
         * goodbye. Node 0's forwarder serves on meanwhile: an agent may
         * still be running a command that sends to node 0's workers, and
         * it drains its own forwarder before its goodbye, which needs
         * node 0's to take its messages (test_p2p_shutdown_drains). */
        int64_t deadline = disco__node_now() + n->timeout_ns;
        for (int k = 1; k < n->nodes && clean; k++)
            while (!n->peer[k].bye && clean) {
                disco_status_t st = disco__node_check(n);
                if (st != DISCO_OK || disco__node_now() > deadline)
                    clean = false;
                else if (!n->peer[k].bye) {
                    struct timespec ts = {0, 100000};
                    nanosleep(&ts, NULL);
                }
            }
    }
    if (!disco__node_fwd_stop(n)) /* before the heap goes, and MPI (an agent's: stopped already) */
        clean = false;
    if (n->node != 0 && healthy &&
        disco__node_send_up(n, DISCO_NODE_UP_BYE, DISCO_OK, 0, NULL, 0) != DISCO_OK)
        clean = false;
    disco__node_link_stop(n);
    for (int k = 0; k < n->nodes; k++)
        if (k != n->node && atomic_load_explicit(&n->peer[k].dead, memory_order_relaxed))
            clean = false;
    if (clean) {
        MPI_Comm_free(&n->cmd);
        MPI_Comm_free(&n->beat);
        MPI_Comm_free(&n->data);
        MPI_Comm_free(&n->fwd);
        if (n->we_init)
            MPI_Finalize();
    }
    node_free(n);
}
