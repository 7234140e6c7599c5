/* node_none.c - the node link of a build without Open MPI (node.h):
 * disco__node_join refuses DISCO_NODES_MPI, so nothing else is reached;
 * the rest answer as much, should anything call them. */
#include "scheduler/node/node.h"

static disco_status_t none(void)
{
    return disco_set_error(
        DISCO_E_UNSUPPORTED,
        "disco was built without Open MPI (no mpicc, or NO_MPI=1): sessions across "
        "nodes need it; install libopenmpi-dev and rebuild");
}

disco_status_t disco__node_join(const disco_session_config_t *cfg, struct disco__node_place *out)
{
    (void)cfg, (void)out;
    return none();
}

disco_status_t disco__node_start(const disco_session_config_t *cfg,
                                 const struct disco__node_place *p, uint32_t timeout_ms,
                                 disco_worker_t *w0, struct disco__node **out)
{
    (void)cfg, (void)p, (void)timeout_ms, (void)w0, (void)out;
    return none();
}

disco_status_t disco__node_post(struct disco__node *n, const void *frame, size_t len)
{
    (void)n, (void)frame, (void)len;
    return none();
}

disco_status_t disco__node_flush(struct disco__node *n)
{
    (void)n;
    return none();
}

disco_status_t disco__node_wait_reply(struct disco__node *n, int node, uint64_t seq, void *buf,
                                      size_t cap, uint32_t *len, int64_t timeout_ns)
{
    (void)n, (void)node, (void)seq, (void)buf, (void)cap, (void)len, (void)timeout_ns;
    return none();
}

disco_status_t disco__node_check(struct disco__node *n)
{
    (void)n;
    return none();
}

disco_status_t disco__node_errors(struct disco__node *n, char *detail, size_t cap, size_t *used)
{
    (void)n, (void)detail, (void)cap, (void)used;
    return DISCO_OK;
}

disco_status_t disco__node_next(struct disco__node *n, const void **frames, size_t *bytes)
{
    (void)n, (void)frames, (void)bytes;
    return none();
}

disco_status_t disco__node_send_up(struct disco__node *n, uint32_t kind, int32_t code, uint64_t seq,
                                   const void *payload, size_t len)
{
    (void)n, (void)kind, (void)code, (void)seq, (void)payload, (void)len;
    return none();
}

void disco__node_stop(struct disco__node *n, bool healthy)
{
    (void)n, (void)healthy;
}

int disco__node_self(const struct disco__node *n)
{
    (void)n;
    return 0;
}

bool disco__node_fwd_stop(struct disco__node *n)
{
    (void)n;
    return true;
}
