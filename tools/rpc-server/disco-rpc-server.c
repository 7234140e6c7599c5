/*
 * disco-rpc-server - serves RPC sessions on a transport.
 *
 *   disco-rpc-server --listen ADDRESS [--token-file PATH] [--proxy ADDRESS
 *                    [--proxy-token-file PATH]] [--session-timeout MS]
 *                    [--idle-timeout MS] [--max-clients N] [--allow-uid UID]...
 *                    [--allow-remote] [--allow-load DIR] [--load LIBRARY]...
 *                    [--once]
 *   disco-rpc-server --stdio [--token-file PATH] [--proxy ADDRESS] [--load LIBRARY]...
 *
 * Every connection authenticates (the handshake in disco/rpc.h) with the
 * server's token: --token-file PATH (read; created with a fresh token if it
 * does not exist), else a fresh token in a new 0600 file in this user's
 * runtime directory, removed at exit. stdout: "listening ADDRESS" (the real
 * address: port 0 picks one), then "token PATH". Unix and shm listeners
 * accept only this user (and --allow-uid UIDs). A tcp address that is not
 * loopback needs --allow-remote. disco.load_library over RPC is refused
 * unless --allow-load DIR, and then only for libraries inside DIR.
 *
 * Each accepted connection is served by a child process that holds only its
 * own connection, with a local session (this process's functions, plus the
 * --load'ed libraries) or, with --proxy, a client session to another server
 * (made once the client has authenticated): sessions chain. Past
 * --session-timeout the parent stops the child, tells the client with a
 * session-timeout error, reclaims everything, and goes on serving; a
 * connection without a request for --idle-timeout ms (default 10 minutes)
 * is closed by its child. With every slot taken a new client is told
 * DISCO_E_BUSY. Refused clients are logged on stderr. SIGINT/SIGTERM stop
 * the server cleanly.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/rpc.h"
#include "disco/shm/wait.h"

#define MAX_CHILDREN 256

struct child {
    pid_t pid;
    int pidfd; /* -1 where pidfd_open is missing: reaped by waitpid */
    disco_transport_t *t;
    int64_t deadline; /* 0: none */
};

static struct options {
    const char *listen, *proxy, *proxy_token_file, *token_file, *allow_load;
    uint32_t session_ms, idle_ms, handshake_ms;
    int max_clients;
    bool once, use_stdio, allow_remote;
    uint32_t uids[DISCO_LISTEN_MAX_UIDS];
    int nuids;
} opt = {.idle_ms = 600000, .max_clients = 64};

static uint8_t token[DISCO_RPC_TOKEN_BYTES];
static bool have_token;
static volatile sig_atomic_t stop;
static int chld_pipe[2] = {-1, -1}; /* SIGCHLD wakes the poll */

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void on_chld(int sig)
{
    (void)sig;
    int e = errno;
    if (chld_pipe[1] >= 0)
        (void)!write(chld_pipe[1], "c", 1);
    errno = e;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: disco-rpc-server --listen ADDRESS [--token-file PATH] [--proxy ADDRESS\n"
               "                        [--proxy-token-file PATH]] [--session-timeout MS]\n"
               "                        [--idle-timeout MS] [--handshake-timeout MS]\n"
               "                        [--max-clients N] [--allow-uid UID]... [--allow-remote]\n"
               "                        [--allow-load DIR] [--load LIBRARY]... [--once]\n"
               "       disco-rpc-server --stdio [--token-file PATH] [--proxy ADDRESS] [--load "
               "LIBRARY]...\n"
               "ADDRESS: unix:/path, tcp:HOST:PORT (port 0 picks one), shm:/path\n"
               "Serves RPC sessions: local ones, or with --proxy a client session to\n"
               "another server (sessions chain through proxies). Clients authenticate with\n"
               "the token in the file printed at start (\"token PATH\"; clients read it from\n"
               "$DISCO_TOKEN_FILE). --idle-timeout 0 keeps idle connections forever\n"
               "(default 600000). A non-loopback tcp address needs --allow-remote.\n"
               "disco.load_library over RPC loads only libraries inside --allow-load DIR.\n");
}

static bool parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* The session a connection is served with (after authentication). */
static disco_status_t make_session(void *ctx, disco_rpc_t **out)
{
    (void)ctx;
    if (opt.proxy != NULL) {
        disco_rpc_client_config_t c = {.token_file = opt.proxy_token_file};
        return disco_rpc_connect_with(opt.proxy, &c, out);
    }
    disco_rpc_local_config_t l = {.allow_load_dir = opt.allow_load};
    return disco_rpc_local_with(&l, out);
}

static void log_refusal(const char *what, disco_status_t st, const char *detail)
{
    fprintf(stderr, "disco-rpc-server: %s: %s: %s\n", what, disco_err_name(st), detail);
}

/* A unix peer refused by uid is told why (DISCO_E_AUTH) before it is
 * closed, as shm peers are in their hello. */
static void tell_refused(disco_transport_t *t, disco_status_t st, const char *why, void *arg)
{
    (void)arg;
    (void)why; /* the detail (uids, pids) stays in the server's log */
    disco_rpc_refuse(t, st,
                     "the server refused this client: its user is not allowed (see the "
                     "server's log)");
}

static int serve_one(disco_transport_t *t)
{
    disco_rpc_serve_config_t cfg = {.token = have_token ? token : NULL,
                                    .handshake_timeout_ms = opt.handshake_ms,
                                    .idle_timeout_ms = opt.use_stdio ? 0 : opt.idle_ms,
                                    .open = make_session};
    char peer[128], what[160];
    disco_transport_peer(t, peer, sizeof peer);
    disco_status_t st = disco_rpc_serve_with(NULL, t, &cfg);
    snprintf(what, sizeof what, "%s (%s)",
             st == DISCO_E_AUTH || st == DISCO_E_VERSION ? "refused a client" : "connection ended",
             peer);
    if (st != DISCO_OK)
        log_refusal(what, st, disco_last_error());
    disco_transport_close(t);
    return st == DISCO_OK ? 0 : 1;
}

static void end_child(struct child *c, bool expired, uint32_t timeout_ms)
{
    if (expired) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        disco_rpc_send_timeout(c->t, timeout_ms); /* the child can no longer write */
    } else {
        waitpid(c->pid, NULL, 0);
    }
    if (c->pidfd >= 0)
        close(c->pidfd);
    disco_transport_close(c->t);
    c->pid = 0;
}

/* In a new serving child: let go of everything the server holds that is
 * not this connection (the other connections, their pidfds, the listener),
 * so that, e.g., a client whose own child exited sees end of file although
 * other children live. */
static void drop_inherited(struct child *kids, disco_listener_t *l)
{
    for (int i = 0; i < opt.max_clients; i++) {
        if (kids[i].pid == 0)
            continue;
        disco_transport_abandon(kids[i].t);
        if (kids[i].pidfd >= 0)
            close(kids[i].pidfd);
        kids[i].pid = 0;
    }
    disco_listener_close(l); /* only the creator removes the socket file */
    close(chld_pipe[0]);
    close(chld_pipe[1]);
    chld_pipe[0] = chld_pipe[1] = -1;
    signal(SIGCHLD, SIG_DFL);
}

/* pidfd_open, unless the test hook says it is missing (or it is). */
static int open_pidfd(pid_t pid)
{
    if (getenv("DISCO_TEST_NO_PIDFD") != NULL)
        return -1;
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Reaps the children that ended: their pidfd is readable, or (without one)
 * waitpid says so. */
static void reap(struct child *kids, const struct pollfd *pf)
{
    for (int i = 0; i < opt.max_clients; i++) {
        if (kids[i].pid == 0)
            continue;
        if (kids[i].pidfd >= 0) {
            if (pf[i + 2].revents & POLLIN)
                end_child(&kids[i], false, 0);
        } else if (waitpid(kids[i].pid, NULL, WNOHANG) == kids[i].pid) {
            disco_transport_close(kids[i].t); /* reaped already */
            kids[i].pid = 0;
        }
    }
}

static int serve_listen(disco_listener_t *l)
{
    struct child *kids = calloc((size_t)opt.max_clients, sizeof *kids);
    struct pollfd *pf = calloc((size_t)opt.max_clients + 2, sizeof *pf);
    if (kids == NULL || pf == NULL || pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "disco-rpc-server: out of memory or fds\n");
        free(kids);
        free(pf);
        return 1;
    }
    struct sigaction sc = {.sa_handler = on_chld, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGCHLD, &sc, NULL);
    int served = 0;
    while (!stop) {
        int active = 0;
        int64_t now = disco_now_ns(), wait_ms = 1000;
        pf[0] =
            (struct pollfd){.fd = opt.once && served ? -1 : disco_listener_fd(l), .events = POLLIN};
        pf[1] = (struct pollfd){.fd = chld_pipe[0], .events = POLLIN};
        for (int i = 0; i < opt.max_clients; i++) {
            pf[i + 2] = (struct pollfd){.fd = kids[i].pid ? kids[i].pidfd : -1, .events = POLLIN};
            if (kids[i].pid == 0)
                continue;
            active++;
            if (kids[i].deadline) {
                int64_t left = (kids[i].deadline - now) / 1000000;
                wait_ms = left < wait_ms ? (left > 0 ? left : 0) : wait_ms;
            }
        }
        if (opt.once && served && active == 0)
            break;
        if (poll(pf, (nfds_t)opt.max_clients + 2, (int)wait_ms) < 0 && errno != EINTR)
            break;
        char drain[64];
        while (read(chld_pipe[0], drain, sizeof drain) > 0)
            ;
        reap(kids, pf);
        now = disco_now_ns();
        for (int i = 0; i < opt.max_clients; i++)
            if (kids[i].pid != 0 && kids[i].deadline && now >= kids[i].deadline)
                end_child(&kids[i], true, opt.session_ms);
        if (!(pf[0].revents & POLLIN))
            continue;
        disco_transport_t *t;
        disco_status_t st = disco_listener_accept(l, now + 1000000000LL, &t);
        if (st == DISCO_E_AUTH)
            log_refusal("refused a client", st, disco_last_error());
        if (st != DISCO_OK)
            continue;
        int slot = 0;
        while (slot < opt.max_clients && kids[slot].pid != 0)
            slot++;
        if (slot == opt.max_clients) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "server busy: all %d connection slots are taken (try again later)",
                     opt.max_clients);
            disco_rpc_refuse(t, DISCO_E_BUSY, msg);
            char peer[128], what[160];
            snprintf(what, sizeof what, "refused a client (%s)",
                     disco_transport_peer(t, peer, sizeof peer));
            log_refusal(what, DISCO_E_BUSY, msg);
            disco_transport_close(t);
            continue;
        }
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid == 0) {
            /* A serving child does not outlive its server. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            drop_inherited(kids, l);
            _exit(serve_one(t));
        }
        if (pid < 0) {
            disco_transport_close(t);
            continue;
        }
        served++;
        int64_t dl = opt.session_ms ? now + (int64_t)opt.session_ms * 1000000 : 0;
        kids[slot] = (struct child){pid, open_pidfd(pid), t, dl};
    }
    for (int i = 0; i < opt.max_clients; i++)
        if (kids[i].pid)
            end_child(&kids[i], true, opt.session_ms);
    free(kids);
    free(pf);
    return 0;
}

/* The server's token: --token-file (read, or made there if missing), else a
 * fresh one in the runtime directory. *made_p: a file to remove at exit. */
static disco_status_t load_token(char *path, size_t cap, bool *made_p)
{
    *made_p = false;
    if (opt.token_file != NULL) {
        struct stat sb;
        snprintf(path, cap, "%s", opt.token_file);
        if (lstat(opt.token_file, &sb) != 0 && errno == ENOENT)
            return disco_rpc_token_create(opt.token_file, token, path, cap);
        return disco_rpc_token_read(opt.token_file, token);
    }
    disco_status_t st = disco_rpc_token_create(NULL, token, path, cap);
    *made_p = st == DISCO_OK;
    return st;
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        uint32_t v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--listen") == 0 && more) {
            opt.listen = argv[++i];
        } else if (strcmp(a, "--proxy") == 0 && more) {
            opt.proxy = argv[++i];
        } else if (strcmp(a, "--proxy-token-file") == 0 && more) {
            opt.proxy_token_file = argv[++i];
        } else if (strcmp(a, "--token-file") == 0 && more) {
            opt.token_file = argv[++i];
        } else if (strcmp(a, "--allow-load") == 0 && more) {
            opt.allow_load = argv[++i];
        } else if (strcmp(a, "--session-timeout") == 0 && more && parse_u32(argv[i + 1], &v)) {
            opt.session_ms = v;
            i++;
        } else if (strcmp(a, "--idle-timeout") == 0 && more && parse_u32(argv[i + 1], &v)) {
            opt.idle_ms = v;
            i++;
        } else if (strcmp(a, "--handshake-timeout") == 0 && more && parse_u32(argv[i + 1], &v)) {
            opt.handshake_ms = v;
            i++;
        } else if (strcmp(a, "--max-clients") == 0 && more && parse_u32(argv[i + 1], &v) &&
                   v >= 1 && v <= MAX_CHILDREN) {
            opt.max_clients = (int)v;
            i++;
        } else if (strcmp(a, "--allow-uid") == 0 && more && parse_u32(argv[i + 1], &v) &&
                   opt.nuids < DISCO_LISTEN_MAX_UIDS) {
            opt.uids[opt.nuids++] = v;
            i++;
        } else if (strcmp(a, "--allow-remote") == 0) {
            opt.allow_remote = true;
        } else if (strcmp(a, "--load") == 0 && more) {
            if (dlopen(argv[++i], RTLD_NOW | RTLD_GLOBAL) == NULL) {
                fprintf(stderr, "disco-rpc-server: %s\n", dlerror());
                return 1;
            }
        } else if (strcmp(a, "--once") == 0) {
            opt.once = true;
        } else if (strcmp(a, "--stdio") == 0) {
            opt.use_stdio = true;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (opt.allow_load != NULL) { /* checked now, not at the first client */
        disco_rpc_t *s;
        disco_rpc_local_config_t l = {.allow_load_dir = opt.allow_load};
        disco_status_t st = disco_rpc_local_with(&l, &s);
        if (st != DISCO_OK) {
            fprintf(stderr, "disco-rpc-server: --allow-load: %s\n", disco_last_error());
            return 2;
        }
        disco_rpc_close(s);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc != 0)
        return rc;
    if (!opt.use_stdio && opt.listen == NULL) {
        usage(stderr);
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char path[PATH_MAX];
    bool made = false;
    if (!opt.use_stdio || opt.token_file != NULL) {
        disco_status_t st = load_token(path, sizeof path, &made);
        if (st != DISCO_OK) {
            fprintf(stderr, "disco-rpc-server: token: %s (%s)\n", disco_err_name(st),
                    disco_last_error());
            return 1;
        }
        have_token = true;
    }
    if (opt.use_stdio) {
        disco_transport_t *t;
        if (disco_transport_from_fds(0, 1, &t) != DISCO_OK)
            return 1;
        return serve_one(t);
    }
    disco_listener_t *l;
    disco_listener_config_t lc = {.allow_remote = opt.allow_remote,
                                  .allow_uids = opt.uids,
                                  .n_allow_uids = opt.nuids,
                                  .on_refused = tell_refused};
    disco_status_t st = disco_listener_open_with(opt.listen, &lc, &l);
    if (st != DISCO_OK) {
        fprintf(stderr, "disco-rpc-server: %s (%s)\n", disco_err_name(st), disco_last_error());
        if (made)
            unlink(path);
        return 1;
    }
    if (opt.allow_remote && strncmp(opt.listen, "tcp:", 4) == 0)
        fprintf(stderr,
                "disco-rpc-server: warning: --allow-remote: other machines may connect "
                "to %s; only the token keeps them out, and the traffic is not "
                "encrypted\n",
                disco_listener_address(l));
    printf("listening %s\ntoken %s\n", disco_listener_address(l), path);
    fflush(stdout);
    rc = serve_listen(l);
    disco_listener_close(l);
    if (made)
        unlink(path);
    return rc;
}
