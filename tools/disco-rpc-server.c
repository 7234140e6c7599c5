/*
 * disco-rpc-server - serves RPC sessions on a transport.
 *
 *   disco-rpc-server --listen ADDRESS [--proxy ADDRESS] [--session-timeout MS]
 *                    [--load LIBRARY]... [--once]
 *   disco-rpc-server --stdio [--proxy ADDRESS] [--load LIBRARY]...
 *
 * Each accepted connection is served by a child process, with a local
 * session (this process's functions, plus the --load'ed libraries) or, with
 * --proxy, a client session to another server: sessions chain. Past
 * --session-timeout the parent stops the child, tells the client with a
 * session-timeout error, reclaims everything, and goes on serving. The first
 * line on stdout is "listening ADDRESS" with the real address (port 0 picks
 * one). SIGINT/SIGTERM stop the server cleanly.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/rpc.h"
#include "disco/wait.h"

#define MAX_CHILDREN 64

struct child {
    pid_t pid;
    int pidfd;
    disco_transport_t *t;
    int64_t deadline; /* 0: none */
};

static const char *proxy;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: disco-rpc-server --listen ADDRESS [--proxy ADDRESS] [--session-timeout MS]\n"
               "                        [--load LIBRARY]... [--once]\n"
               "       disco-rpc-server --stdio [--proxy ADDRESS] [--load LIBRARY]...\n"
               "ADDRESS: unix:/path, tcp:HOST:PORT (port 0 picks one), shm:/path\n"
               "Serves RPC sessions: local ones, or with --proxy a client session to\n"
               "another server (sessions chain through proxies).\n");
}

/* The session a connection is served with. */
static disco_status_t make_session(disco_rpc_t **out)
{
    return proxy != NULL ? disco_rpc_connect(proxy, 0, out) : disco_rpc_local(out);
}

static int serve_one(disco_transport_t *t)
{
    disco_rpc_t *s;
    disco_status_t st = make_session(&s);
    if (st != DISCO_OK) {
        fprintf(stderr, "disco-rpc-server: session: %s (%s)\n", disco_err_name(st),
                disco_last_error());
        return 1;
    }
    st = disco_rpc_serve(s, t);
    disco_rpc_close(s);
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
    close(c->pidfd);
    disco_transport_close(c->t);
    c->pid = 0;
}

static int serve_listen(const char *address, uint32_t timeout_ms, bool once)
{
    disco_listener_t *l;
    disco_status_t st = disco_listen(address, &l);
    if (st != DISCO_OK) {
        fprintf(stderr, "disco-rpc-server: %s (%s)\n", disco_err_name(st), disco_last_error());
        return 1;
    }
    printf("listening %s\n", disco_listener_address(l));
    fflush(stdout);
    struct child kids[MAX_CHILDREN] = {{0}};
    int served = 0;
    while (!stop) {
        struct pollfd pf[MAX_CHILDREN + 1];
        int n = 0, active = 0;
        int64_t now = disco_now_ns(), wait_ms = 1000;
        pf[n++] =
            (struct pollfd){.fd = once && served ? -1 : disco_listener_fd(l), .events = POLLIN};
        for (int i = 0; i < MAX_CHILDREN; i++) {
            pf[n++] = (struct pollfd){.fd = kids[i].pid ? kids[i].pidfd : -1, .events = POLLIN};
            if (kids[i].pid == 0)
                continue;
            active++;
            if (kids[i].deadline) {
                int64_t left = (kids[i].deadline - now) / 1000000;
                wait_ms = left < wait_ms ? (left > 0 ? left : 0) : wait_ms;
            }
        }
        if (once && served && active == 0)
            break;
        if (poll(pf, (nfds_t)n, (int)wait_ms) < 0 && errno != EINTR)
            break;
        now = disco_now_ns();
        for (int i = 0; i < MAX_CHILDREN; i++) {
            if (kids[i].pid == 0)
                continue;
            if (pf[i + 1].revents & POLLIN)
                end_child(&kids[i], false, 0);
            else if (kids[i].deadline && now >= kids[i].deadline)
                end_child(&kids[i], true, timeout_ms);
        }
        if (!(pf[0].revents & POLLIN))
            continue;
        disco_transport_t *t;
        if (disco_accept(l, now + 1000000000LL, &t) != DISCO_OK)
            continue;
        int slot = 0;
        while (slot < MAX_CHILDREN && kids[slot].pid != 0)
            slot++;
        pid_t parent = getpid();
        pid_t pid = slot < MAX_CHILDREN ? fork() : -1;
        if (pid == 0) {
            /* A serving child does not outlive its server. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            disco_listener_close(l); /* the child only serves */
            _exit(serve_one(t));
        }
        if (pid < 0) {
            disco_transport_close(t);
            continue;
        }
        served++;
        kids[slot] = (struct child){pid, (int)syscall(SYS_pidfd_open, pid, 0), t,
                                    timeout_ms ? now + (int64_t)timeout_ms * 1000000 : 0};
    }
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (kids[i].pid)
            end_child(&kids[i], true, timeout_ms);
    disco_listener_close(l);
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen_addr = NULL;
    uint32_t timeout_ms = 0;
    bool once = false, use_stdio = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--listen") == 0 && i + 1 < argc) {
            listen_addr = argv[++i];
        } else if (strcmp(a, "--proxy") == 0 && i + 1 < argc) {
            proxy = argv[++i];
        } else if (strcmp(a, "--session-timeout") == 0 && i + 1 < argc) {
            timeout_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(a, "--load") == 0 && i + 1 < argc) {
            if (dlopen(argv[++i], RTLD_NOW | RTLD_GLOBAL) == NULL) {
                fprintf(stderr, "disco-rpc-server: %s\n", dlerror());
                return 1;
            }
        } else if (strcmp(a, "--once") == 0) {
            once = true;
        } else if (strcmp(a, "--stdio") == 0) {
            use_stdio = true;
        } else {
            usage(stderr);
            return 2;
        }
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (use_stdio) {
        disco_transport_t *t;
        if (disco_transport_from_fds(0, 1, &t) != DISCO_OK)
            return 1;
        return serve_one(t);
    }
    if (listen_addr == NULL) {
        usage(stderr);
        return 2;
    }
    return serve_listen(listen_addr, timeout_ms, once);
}
