/* node_wait.c - waiting on MPI requests under a deadline, and the node
 * link's failures as statuses (node_impl.h).
 *
 * MPI is used only nonblocking: every request is waited for by polling
 * (MPI_Test) with a deadline and the peers' liveness (node_link.c),
 * because a blocking MPI call on a dead peer never returns, and Open MPI's
 * default answer to a dead peer (abort the job) would take the controller
 * with it: the communicators' error handler is MPI_ERRORS_RETURN.
 */
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "scheduler/node/node_impl.h"

#define PAUSE_NS 20000LL   /* poll with only a pause between polls this long, */
#define YIELD_NS 2000000LL /* then yielding the CPU between polls this long, */
#define NAP_MAX  1000000L  /* then sleeping, the naps doubling up to this (ns) */

int64_t disco__node_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

disco_status_t disco__node_mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    return disco_set_error(DISCO_E_SYS, "%s: %s", what, msg);
}

disco_status_t disco__node_dead(const struct disco__node *n, int k, const char *what)
{
    const struct disco__node_hello *h = &n->peer[k].hello;
    const char *sep = what != NULL ? ": " : "";
    what = what != NULL ? what : "";
    if (k == 0)
        return disco_set_error(DISCO_E_PEER_DEAD,
                               "%s%sthe controller (node 0, host %s, pid %d) sent no heartbeat "
                               "for %lld ms",
                               what, sep, h->host, (int)h->pid, (long long)(n->lease_ns / 1000000));
    return disco_set_error(DISCO_E_WORKER_DIED,
                           "%s%snode %d (workers %d-%d, host %s, pid %d) sent no heartbeat for "
                           "%lld ms: its process died or its network failed",
                           what, sep, k, k * n->wpn, (k + 1) * n->wpn - 1, h->host, (int)h->pid,
                           (long long)(n->lease_ns / 1000000));
}

/* The first peer found dead among those a wait watches, or -1. */
static int dead_peer(const struct disco__node *n, int peer)
{
    for (int k = 0; k < n->nodes; k++)
        if (k != n->node && (peer < 0 || peer == k) &&
            atomic_load_explicit(&n->peer[k].dead, memory_order_relaxed))
            return k;
    return -1;
}

void disco__node_backoff(int64_t waited_ns, long *nap_ns)
{
    if (waited_ns < PAUSE_NS) {
        for (int i = 0; i < 16; i++)
            __builtin_ia32_pause(); /* no syscall: the answer may be a microsecond away */
    } else if (waited_ns < YIELD_NS) {
        sched_yield(); /* workers may outnumber cores: never starve the peer */
    } else {
        struct timespec ts = {0, *nap_ns};
        nanosleep(&ts, NULL);
        *nap_ns = *nap_ns * 2 > NAP_MAX ? NAP_MAX : *nap_ns * 2;
    }
}

disco_status_t disco__node_await(struct disco__node *n, MPI_Request *r, int peer,
                                 int64_t deadline_ns, const char *what, MPI_Status *status)
{
    int64_t start = disco__node_now();
    long nap = 10000;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(r, &done, status != NULL ? status : MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return disco__node_mpi_fail(rc, what);
        if (done)
            return DISCO_OK;
        int k = dead_peer(n, peer);
        if (k >= 0)
            return disco__node_dead(n, k, what);
        int64_t now = disco__node_now();
        if (deadline_ns != 0 && now >= deadline_ns)
            return disco_set_error(DISCO_E_TIMEOUT, "%s: no answer within %lld ms", what,
                                   (long long)((now - start) / 1000000));
        disco__node_backoff(now - start, &nap);
    }
}
