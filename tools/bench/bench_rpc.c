/* bench_rpc.c - disco-bench's RPC figures: a no-op remote call round trip
 * (disco.noop through disco_rpc_call, result cleared) over each transport,
 * and a 64 MiB copy into a remote CPU allocation over shm against memcpy.
 *
 * Each figure has its own server: a forked child serving a local session
 * (disco_rpc_local) with disco_rpc_serve, pinned to the second CPU; the
 * client is this process, pinned to the first (as bench_session.c pins a
 * pair). For "unix", "tcp" and "shm" the parent listens before the fork (so
 * the address, with its port, is known and nothing races) and the child
 * accepts; for "pipe", two pipes and disco_transport_from_fds on both sides.
 *
 * Deadlines: connect, accept and every call have RPC_TIMEOUT_MS; the server
 * dies with us (bu_spawn) and its serve loop ends when the client goes; a
 * server that has not left RPC_REAP_MS after the client closed is killed
 * and the section fails. A socket file lives in a temp dir of its own only
 * from listen until the client is connected: then the listener (which
 * removes its file) is closed and the dir removed; an atexit handler
 * removes what a failure in between left. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "disco/rpc.h"

#define RPC_TIMEOUT_MS 10000u /* connect, accept, each call */
#define RPC_REAP_MS    5000   /* the server's exit after the client closed */
#define COPY_BYTES     ((uint64_t)64 << 20)
#define COPY_WARM      3 /* untimed copies: fault in both sides' pages */

/* ---- the temp dir for a socket file ---- */

static char tmp_dir[64];
static char tmp_sock[96];

/* Removes the socket file (if still there) and the dir; also atexit. */
static void tmp_remove(void)
{
    if (tmp_sock[0] != '\0')
        unlink(tmp_sock);
    if (tmp_dir[0] != '\0')
        rmdir(tmp_dir);
    tmp_dir[0] = tmp_sock[0] = '\0';
}

/* Makes a fresh dir; tmp_sock names a socket file in it. */
static void tmp_make(void)
{
    static bool registered;
    if (!registered && atexit(tmp_remove) == 0)
        registered = true;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/disco-bench-rpc-XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        tmp_dir[0] = '\0';
        bu_die("mkdtemp /tmp/disco-bench-rpc-XXXXXX: %s", strerror(errno));
    }
    snprintf(tmp_sock, sizeof tmp_sock, "%s/rpc.sock", tmp_dir);
}

/* ---- server and client ---- */

typedef struct server_ctx {
    disco_listener_t *l; /* listening kinds; NULL for pipes */
    int in_fd, out_fd;   /* pipes: the server's ends */
    int close_fds[2];    /* pipes: the client's ends, closed in the child */
} server_ctx_t;

/* The token both sides of a listening pair share (made in open_pair). */
static uint8_t bench_token[DISCO_RPC_TOKEN_BYTES];

/* The child: accept (or wrap the pipes), serve a local session, leave. */
static int server_child(void *p)
{
    server_ctx_t *c = p;
    disco_transport_t *t;
    bu_pin(1);
    if (c->l != NULL) {
        bu_child_check(
            disco_listener_accept(c->l, disco_now_ns() + (int64_t)RPC_TIMEOUT_MS * 1000000, &t),
            "disco_listener_accept");
        disco_listener_close(c->l); /* the child's copy: leaves the file to the parent */
    } else {
        close(c->close_fds[0]);
        close(c->close_fds[1]);
        bu_child_check(disco_transport_from_fds(c->in_fd, c->out_fd, &t),
                       "disco_transport_from_fds");
    }
    disco_rpc_t *s;
    bu_child_check(disco_rpc_local(&s), "disco_rpc_local");
    /* Listeners authenticate (the pipe's peer is our parent). */
    disco_rpc_serve_config_t cfg = {.token = c->l != NULL ? bench_token : NULL};
    disco_status_t st = disco_rpc_serve_with(s, t, &cfg);
    disco_rpc_close(s);
    disco_transport_close(t);
    bu_child_check(st, "disco_rpc_serve");
    return 0;
}

/* Starts a server for kind ("shm", "unix", "tcp", "pipe") and returns a
 * client session to it; the client is pinned to the first CPU. */
static disco_rpc_t *open_pair(const char *kind, pid_t *pid_out)
{
    server_ctx_t c = {.in_fd = -1, .out_fd = -1, .close_fds = {-1, -1}};
    disco_rpc_t *s;
    bu_unpin();
    if (strcmp(kind, "pipe") == 0) {
        int c2s[2], s2c[2];
        if (pipe(c2s) != 0 || pipe(s2c) != 0)
            bu_die("pipe: %s", strerror(errno));
        c.in_fd = c2s[0];
        c.out_fd = s2c[1];
        c.close_fds[0] = c2s[1];
        c.close_fds[1] = s2c[0];
        *pid_out = bu_spawn(server_child, &c);
        close(c2s[0]);
        close(s2c[1]);
        disco_transport_t *t;
        bu_check(disco_transport_from_fds(s2c[0], c2s[1], &t), "disco_transport_from_fds");
        bu_check(disco_rpc_client(t, RPC_TIMEOUT_MS, &s), "disco_rpc_client(pipe)");
    } else {
        char addr[128];
        if (strcmp(kind, "tcp") == 0) {
            snprintf(addr, sizeof addr, "tcp:127.0.0.1:0");
        } else {
            tmp_make();
            snprintf(addr, sizeof addr, "%s:%s", kind, tmp_sock);
        }
        if (getrandom(bench_token, sizeof bench_token, 0) != (ssize_t)sizeof bench_token)
            bu_die("getrandom: %s", strerror(errno));
        bu_check(disco_listener_open(addr, &c.l), "disco_listener_open");
        *pid_out = bu_spawn(server_child, &c);
        disco_rpc_client_config_t cc = {.call_timeout_ms = RPC_TIMEOUT_MS, .token = bench_token};
        disco_status_t st = disco_rpc_connect_with(disco_listener_address(c.l), &cc, &s);
        disco_listener_close(c.l); /* removes the socket file; the child holds the socket */
        tmp_remove();
        bu_check(st, "disco_rpc_connect");
    }
    bu_pin(0);
    return s;
}

/* Closes the client (the server's loop ends on the shutdown) and reaps the
 * server within RPC_REAP_MS; dies if it does not leave or failed. */
static void close_pair(disco_rpc_t *s, pid_t pid)
{
    disco_rpc_close(s);
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        while (poll(&p, 1, RPC_REAP_MS) < 0 && errno == EINTR)
            ;
        close(pfd);
    }
    int status;
    pid_t got;
    while ((got = waitpid(pid, &status, pfd >= 0 ? WNOHANG : 0)) < 0 && errno == EINTR)
        ;
    if (got != pid)
        bu_die("RPC server %d still running %d ms after the client closed", (int)pid,
               RPC_REAP_MS); /* kills and reaps it */
    bu_forget(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bu_die("RPC server %d failed (status %#x)", (int)pid, status);
    bu_unpin();
}

/* ---- the figures ---- */

typedef struct call_ctx {
    disco_rpc_t *s;
    disco_rpc_handle_t noop;
} call_ctx_t;

static int64_t call_rounds(void *p, uint64_t iters)
{
    call_ctx_t *c = p;
    int64_t t0 = disco_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        disco_value_t ret;
        bu_check(disco_rpc_call(c->s, c->noop, NULL, 0, &ret), "disco_rpc_call(disco.noop)");
        disco_value_clear(&ret);
    }
    return disco_now_ns() - t0;
}

static double call_ns(const char *kind)
{
    pid_t pid;
    call_ctx_t c = {.s = open_pair(kind, &pid)};
    bu_check(disco_rpc_get_func(c.s, "disco.noop", &c.noop), "disco_rpc_get_func(disco.noop)");
    double ns = measure(call_rounds, &c);
    bu_check(disco_rpc_free_handle(c.s, c.noop), "disco_rpc_free_handle");
    close_pair(c.s, pid);
    return ns;
}

/* GB/s of copy_to_remote of COPY_BYTES over shm: the median of single
 * copies after warm ones, all into the same remote allocation. Checks the
 * first and last bytes arrived. */
static double copy_gbps(void)
{
    pid_t pid;
    disco_rpc_t *s = open_pair("shm", &pid);
    DLDevice cpu = {kDLCPU, 0};
    disco_rpc_handle_t mem;
    bu_check(disco_rpc_dev_alloc(s, cpu, COPY_BYTES, 64, &mem), "disco_rpc_dev_alloc");
    unsigned char *src = malloc(COPY_BYTES);
    if (src == NULL)
        bu_die("out of memory (%llu bytes)", (unsigned long long)COPY_BYTES);
    memset(src, 0x5a, COPY_BYTES);
    src[0] = 1;
    src[COPY_BYTES - 1] = 2;
    for (int i = 0; i < COPY_WARM; i++)
        bu_check(disco_rpc_copy_to_remote(s, src, mem, 0, COPY_BYTES), "copy_to_remote (warm)");
    unsigned char ends[2];
    bu_check(disco_rpc_copy_from_remote(s, mem, 0, &ends[0], 1), "copy_from_remote");
    bu_check(disco_rpc_copy_from_remote(s, mem, COPY_BYTES - 1, &ends[1], 1), "copy_from_remote");
    if (ends[0] != 1 || ends[1] != 2)
        bu_die("copy_to_remote: ends are %u, %u; want 1, 2", ends[0], ends[1]);
    int reps = bench_reps();
    double v[64] = {0};
    reps = reps < 64 ? reps : 64;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = disco_now_ns();
        bu_check(disco_rpc_copy_to_remote(s, src, mem, 0, COPY_BYTES), "copy_to_remote");
        v[r] = (double)(disco_now_ns() - t0);
    }
    bu_check(disco_rpc_dev_free(s, cpu, mem), "disco_rpc_dev_free");
    close_pair(s, pid);
    free(src);
    return (double)COPY_BYTES / bu_median(v, reps);
}

void bench_rpc(void)
{
    record("rpc_call_ns_shm", call_ns("shm"), "ns");
    record("rpc_call_ns_unix", call_ns("unix"), "ns");
    record("rpc_call_ns_tcp", call_ns("tcp"), "ns");
    record("rpc_call_ns_pipe", call_ns("pipe"), "ns");
    record("rpc_copy_gbps_shm", copy_gbps(), "GB/s");
}
