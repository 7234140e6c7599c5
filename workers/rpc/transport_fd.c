/* transport_fd.c - the fd kinds: unix and tcp sockets, pipes (see transport_impl.h).
 *
 * Every fd is used non-blocking: a transfer first tries the system call and
 * waits (poll, in park slices, up to the deadline) only when it would block,
 * so a stream with data waiting costs one call. Sockets get MSG_DONTWAIT per
 * call (their flags stay as they are); pipes are switched to O_NONBLOCK for
 * the transport's lifetime. */
#include "workers/rpc/transport_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Waits for fd to be ready for ev until the deadline. */
static disco_status_t wait_ready(const struct disco_transport *t, int fd, short ev,
                                 int64_t deadline_ns, const char *what, size_t len, size_t done)
{
    disco_wait_t w = {.deadline_ns = deadline_ns};
    disco_status_t st = disco_wait_fd(fd, ev, &w);
    if (st == DISCO_E_TIMEOUT)
        return disco_set_error(DISCO_E_TIMEOUT,
                               "%s transport: %s of %zu bytes: deadline passed after %zu",
                               disco_transport_kind(t), what, len, done);
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

disco_status_t disco__fd_send(struct disco_transport *t, const void *buf, size_t len,
                              int64_t deadline_ns, size_t *done_p)
{
    const bool pipe = t->kind == DISCO__T_PIPE;
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
                                 disco_transport_kind(t), strerror(errno));
        } else {
            st =
                disco_set_error(DISCO_E_SYS, "%s transport: %s(fd %d): %s", disco_transport_kind(t),
                                pipe ? "write" : "send", t->out_fd, strerror(errno));
        }
        break;
    }
    if (pipe)
        restore_sigpipe(&old, was_blocked, epipe);
    *done_p = done;
    return st;
}

disco_status_t disco__fd_recv(struct disco_transport *t, void *buf, size_t len, int64_t deadline_ns,
                              size_t *done_p)
{
    const bool pipe = t->kind == DISCO__T_PIPE;
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
                                 disco_transport_kind(t), done, len);
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
        st = disco_set_error(DISCO_E_SYS, "%s transport: %s(fd %d): %s", disco_transport_kind(t),
                             pipe ? "read" : "recv", t->in_fd, strerror(errno));
        break;
    }
    *done_p = done;
    return st;
}

void disco__fd_close(struct disco_transport *t)
{
    if (t->in_flags >= 0)
        fcntl(t->in_fd, F_SETFL, t->in_flags);
    if (t->out_flags >= 0 && t->out_fd != t->in_fd)
        fcntl(t->out_fd, F_SETFL, t->out_flags);
    if (t->in_fd >= 0)
        close(t->in_fd);
    if (t->out_fd >= 0 && t->out_fd != t->in_fd)
        close(t->out_fd);
}

disco_status_t disco__fd_socket_transport(enum disco__tkind kind, int fd,
                                          struct disco_transport **out)
{
    if (kind == DISCO__T_TCP) {
        /* Small RPC frames must leave at once, not wait for Nagle. */
        int one = 1;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
            int e = errno;
            close(fd);
            return disco_set_error(DISCO_E_SYS, "setsockopt(TCP_NODELAY): %s", strerror(e));
        }
    }
    struct disco_transport *t = disco__transport_alloc(kind);
    if (t == NULL) {
        close(fd);
        return DISCO_E_NOMEM;
    }
    t->in_fd = t->out_fd = fd;
    *out = t;
    return DISCO_OK;
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
    struct disco_transport *t = disco__transport_alloc(DISCO__T_PIPE);
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
    *out = t;
    return DISCO_OK;
}
