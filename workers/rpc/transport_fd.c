/* transport_fd.c - the fd kinds' tables: unix and tcp sockets, pipes (see
 * transport_ops.h).
 *
 * Every fd is used non-blocking: a transfer first tries the system call and
 * waits (poll, in park slices, up to the deadline) only when it would block,
 * so a stream with data waiting costs one call. Sockets get MSG_DONTWAIT per
 * call (their flags stay as they are); pipes are switched to O_NONBLOCK for
 * the transport's lifetime. */
#include "workers/rpc/transport_ops.h"

#include "disco/shm/wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* An fd transport: in_fd == out_fd for sockets. in_flags/out_flags: pipes'
 * file status flags to restore at close (-1: nothing to restore). */
struct fd_transport {
    struct disco_transport base;
    int in_fd, out_fd;
    int in_flags, out_flags;
};

static struct fd_transport *fd_of(struct disco_transport *t)
{
    return (struct fd_transport *)t;
}

static const struct fd_transport *cfd_of(const struct disco_transport *t)
{
    return (const struct fd_transport *)t;
}

/* Allocates a transport of kind ops with every fd -1. NULL when out of
 * memory (error recorded). */
static struct fd_transport *fd_alloc(const struct disco__transport_ops *ops)
{
    struct fd_transport *f = calloc(1, sizeof *f);
    if (f == NULL) {
        disco_set_error(DISCO_E_NOMEM, "%s transport: out of memory", ops->name);
        return NULL;
    }
    f->base.ops = ops;
    f->in_fd = f->out_fd = -1;
    f->in_flags = f->out_flags = -1;
    return f;
}

/* Waits for fd to be ready for ev until the deadline. */
static disco_status_t wait_ready(const struct fd_transport *t, int fd, short ev,
                                 int64_t deadline_ns, const char *what, size_t len, size_t done)
{
    disco_wait_t w = {.deadline_ns = deadline_ns};
    disco_status_t st = disco_wait_fd(fd, ev, &w);
    if (st == DISCO_E_TIMEOUT)
        return disco_set_error(DISCO_E_TIMEOUT,
                               "%s transport: %s of %zu bytes: deadline passed after %zu",
                               t->base.ops->name, what, len, done);
    return st;
}

/* Blocks SIGPIPE in this thread for a pipe write; returns whether it was
 * blocked already (then a SIGPIPE our write raises is the caller's to see). */
static bool block_sigpipe(sigset_t *old)
{
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, old);
    return sigismember(old, SIGPIPE) == 1;
}

/* Undoes block_sigpipe. After EPIPE, the SIGPIPE the write raised is pending
 * (blocked, thread-directed): consume it, so that unblocking does not deliver
 * it and kill the process. */
static void restore_sigpipe(const sigset_t *old, bool was_blocked, bool raised)
{
    if (raised && !was_blocked) {
        sigset_t pipe_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* send of every fd kind; pipe: write(2) with SIGPIPE blocked, else send(2). */
static disco_status_t fd_send(struct fd_transport *t, bool pipe, const void *buf, size_t len,
                              int64_t deadline_ns, size_t *done_p)
{
    const char *p = buf;
    size_t done = 0;
    disco_status_t st = DISCO_OK;
    bool epipe = false, was_blocked = false;
    sigset_t old;
    if (pipe)
        was_blocked = block_sigpipe(&old);
    while (done < len) {
        ssize_t n = pipe ? write(t->out_fd, p + done, len - done)
                         : send(t->out_fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
            st = wait_ready(t, t->out_fd, POLLOUT, deadline_ns, "send", len, done);
            if (st != DISCO_OK)
                break;
            continue;
        }
        if (errno == EPIPE || errno == ECONNRESET) {
            epipe = errno == EPIPE;
            st = disco_set_error(DISCO_E_CLOSED, "%s transport: send: the peer is gone (%s)",
                                 t->base.ops->name, strerror(errno));
        } else {
            st = disco_set_error(DISCO_E_SYS, "%s transport: %s(fd %d): %s", t->base.ops->name,
                                 pipe ? "write" : "send", t->out_fd, strerror(errno));
        }
        break;
    }
    if (pipe)
        restore_sigpipe(&old, was_blocked, epipe);
    *done_p = done;
    return st;
}

/* recv of every fd kind; pipe: read(2), else recv(2). */
static disco_status_t fd_recv(struct fd_transport *t, bool pipe, void *buf, size_t len,
                              int64_t deadline_ns, size_t *done_p)
{
    char *p = buf;
    size_t done = 0;
    disco_status_t st = DISCO_OK;
    while (done < len) {
        ssize_t n = pipe ? read(t->in_fd, p + done, len - done)
                         : recv(t->in_fd, p + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0 || errno == ECONNRESET) {
            st = disco_set_error(DISCO_E_CLOSED,
                                 "%s transport: recv: the peer closed after %zu of %zu bytes",
                                 t->base.ops->name, done, len);
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            st = wait_ready(t, t->in_fd, POLLIN, deadline_ns, "recv", len, done);
            if (st != DISCO_OK)
                break;
            continue;
        }
        st = disco_set_error(DISCO_E_SYS, "%s transport: %s(fd %d): %s", t->base.ops->name,
                             pipe ? "read" : "recv", t->in_fd, strerror(errno));
        break;
    }
    *done_p = done;
    return st;
}

static disco_status_t sock_send(struct disco_transport *t, const void *buf, size_t len,
                                int64_t deadline_ns, size_t *done_p)
{
    return fd_send(fd_of(t), false, buf, len, deadline_ns, done_p);
}

static disco_status_t sock_recv(struct disco_transport *t, void *buf, size_t len,
                                int64_t deadline_ns, size_t *done_p)
{
    return fd_recv(fd_of(t), false, buf, len, deadline_ns, done_p);
}

static disco_status_t pipe_send(struct disco_transport *t, const void *buf, size_t len,
                                int64_t deadline_ns, size_t *done_p)
{
    return fd_send(fd_of(t), true, buf, len, deadline_ns, done_p);
}

static disco_status_t pipe_recv(struct disco_transport *t, void *buf, size_t len,
                                int64_t deadline_ns, size_t *done_p)
{
    return fd_recv(fd_of(t), true, buf, len, deadline_ns, done_p);
}

static int fd_fds(const struct disco_transport *t, int fds_out[4])
{
    const struct fd_transport *f = cfd_of(t);
    int n = 0;
    if (f->in_fd >= 0)
        fds_out[n++] = f->in_fd;
    if (f->out_fd >= 0 && f->out_fd != f->in_fd)
        fds_out[n++] = f->out_fd;
    return n;
}

static void fd_close(struct disco_transport *t)
{
    struct fd_transport *f = fd_of(t);
    if (f->in_flags >= 0)
        fcntl(f->in_fd, F_SETFL, f->in_flags);
    if (f->out_flags >= 0 && f->out_fd != f->in_fd)
        fcntl(f->out_fd, F_SETFL, f->out_flags);
    if (f->in_fd >= 0)
        close(f->in_fd);
    if (f->out_fd >= 0 && f->out_fd != f->in_fd)
        close(f->out_fd);
    free(f);
}

/* Closes only: no flag restore (the open files are shared with the owner). */
static void fd_abandon(struct disco_transport *t)
{
    int fds[4];
    int n = fd_fds(t, fds);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(t);
}

static void pipe_peer(const struct disco_transport *t, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", t->ops->name);
}

/* "unix uid U pid P" from SO_PEERCRED, or "unix" when that fails. */
static void unix_peer(const struct disco_transport *t, char *buf, size_t cap)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(cfd_of(t)->in_fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
        snprintf(buf, cap, "%s uid %u pid %d", t->ops->name, (unsigned)cr.uid, (int)cr.pid);
    else
        snprintf(buf, cap, "%s", t->ops->name);
}

/* "tcp HOST:PORT" from getpeername ("tcp ?:0" when that fails). */
static void tcp_peer(const struct disco_transport *t, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss); /* AF_UNSPEC if getpeername fails */
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getpeername(cfd_of(t)->in_fd, (struct sockaddr *)&ss, &sl) == 0 &&
        ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        port = ntohs(s6->sin6_port);
    } else if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        port = ntohs(s4->sin_port);
    }
    snprintf(buf, cap, "tcp %s:%u", host, port);
}

/* Makes a socket transport of kind ops around a connected socket it takes
 * (closed on failure). */
static disco_status_t socket_transport(const struct disco__transport_ops *ops, int fd,
                                       struct disco_transport **out)
{
    struct fd_transport *t = fd_alloc(ops);
    if (t == NULL) {
        close(fd);
        return DISCO_E_NOMEM;
    }
    t->in_fd = t->out_fd = fd;
    *out = &t->base;
    return DISCO_OK;
}

/* A unix socket needs no handshake: both sides just wrap it. */
static disco_status_t unix_accept(int sock, int64_t deadline_ns, struct disco_transport **out)
{
    (void)deadline_ns;
    return socket_transport(&disco__transport_unix, sock, out);
}

static disco_status_t unix_connect(int sock, const char *address, int64_t deadline_ns,
                                   struct disco_transport **out)
{
    (void)address;
    (void)deadline_ns;
    return socket_transport(&disco__transport_unix, sock, out);
}

/* Small RPC frames must leave at once, not wait for Nagle: TCP_NODELAY on
 * both sides. */
static disco_status_t tcp_accept(int sock, int64_t deadline_ns, struct disco_transport **out)
{
    (void)deadline_ns;
    int one = 1;
    if (setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        int e = errno;
        close(sock);
        return disco_set_error(DISCO_E_SYS, "setsockopt(TCP_NODELAY): %s", strerror(e));
    }
    return socket_transport(&disco__transport_tcp, sock, out);
}

static disco_status_t tcp_connect(int sock, const char *address, int64_t deadline_ns,
                                  struct disco_transport **out)
{
    (void)address;
    return tcp_accept(sock, deadline_ns, out);
}

/* Switches fd to O_NONBLOCK; sets *flags_p to the flags to restore. */
static disco_status_t make_nonblocking(int fd, int *flags_p)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0)
        return disco_set_error(errno == EBADF ? DISCO_E_INVAL : DISCO_E_SYS,
                               "pipe transport: fd %d: %s", fd, strerror(errno));
    if ((flags & O_NONBLOCK) == 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
        return disco_set_error(DISCO_E_SYS, "pipe transport: fcntl(fd %d, O_NONBLOCK): %s", fd,
                               strerror(errno));
    *flags_p = flags;
    return DISCO_OK;
}

disco_status_t disco_transport_from_fds(int in_fd, int out_fd, disco_transport_t **out)
{
    if (out == NULL || in_fd < 0 || out_fd < 0)
        return disco_set_error(DISCO_E_INVAL, "pipe transport: fds %d and %d", in_fd, out_fd);
    int in_flags = -1, out_flags = -1;
    disco_status_t st = make_nonblocking(in_fd, &in_flags);
    if (st != DISCO_OK)
        return st;
    if (out_fd != in_fd && (st = make_nonblocking(out_fd, &out_flags)) != DISCO_OK) {
        fcntl(in_fd, F_SETFL, in_flags);
        return st;
    }
    struct fd_transport *t = fd_alloc(&disco__transport_pipe);
    if (t == NULL) {
        fcntl(in_fd, F_SETFL, in_flags);
        if (out_flags >= 0)
            fcntl(out_fd, F_SETFL, out_flags);
        return DISCO_E_NOMEM;
    }
    t->in_fd = in_fd;
    t->out_fd = out_fd;
    t->in_flags = in_flags;
    t->out_flags = out_flags;
    *out = &t->base;
    return DISCO_OK;
}

const struct disco__transport_ops disco__transport_unix = {
    .name = "unix",
    .carrier = DISCO__CARRIER_UNIX,
    .send = sock_send,
    .recv = sock_recv,
    .fds = fd_fds,
    .peer = unix_peer,
    .close = fd_close,
    .abandon = fd_abandon,
    .accept = unix_accept,
    .connect = unix_connect,
    .refuse = NULL, /* no handshake: the listener's on_refused may speak */
};

const struct disco__transport_ops disco__transport_tcp = {
    .name = "tcp",
    .carrier = DISCO__CARRIER_TCP,
    .send = sock_send,
    .recv = sock_recv,
    .fds = fd_fds,
    .peer = tcp_peer,
    .close = fd_close,
    .abandon = fd_abandon,
    .accept = tcp_accept,
    .connect = tcp_connect,
    .refuse = NULL, /* never refused: tcp has no peer uid to check */
};

/* Made only by disco_transport_from_fds: no address, no handshake. */
const struct disco__transport_ops disco__transport_pipe = {
    .name = "pipe",
    .carrier = DISCO__CARRIER_NONE,
    .send = pipe_send,
    .recv = pipe_recv,
    .fds = fd_fds,
    .peer = pipe_peer,
    .close = fd_close,
    .abandon = fd_abandon,
    .accept = NULL,
    .connect = NULL,
    .refuse = NULL,
};
