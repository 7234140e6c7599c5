/* channel.c - rings or pipes under the same four calls (see channel.h). */
#include "workers/core/channel.h"

#include "shm/ring_internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "shm/ticks.h"

/* ---- pipes ---- */

/* Writes all of buf to fd (non-blocking on the controller side), waiting per
 * w when the pipe is full. SIGPIPE is blocked in this thread for the write
 * and a pending one consumed, so a dead reader gives DISCO_E_CLOSED instead
 * of killing the process. */
static disco_status_t pipe_write_all(int fd, const void *buf, size_t len, const disco_wait_t *w)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    const char *p = buf;
    disco_status_t st = DISCO_OK;
    while (len != 0) {
        ssize_t n = write(fd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if ((st = disco_wait_fd(fd, POLLOUT, w)) != DISCO_OK)
                break;
            continue;
        }
        st = errno == EPIPE ? disco_set_error(DISCO_E_CLOSED, "pipe fd %d: reader is gone", fd)
                            : disco_set_error(DISCO_E_SYS, "write(fd %d): %s", fd, strerror(errno));
        break;
    }
    if (st == DISCO_E_CLOSED) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return st;
}

static disco_status_t pipe_read_all(int fd, void *buf, size_t len, const disco_wait_t *w)
{
    char *p = buf;
    while (len != 0) {
        disco_status_t st = disco_wait_fd(fd, POLLIN, w);
        if (st != DISCO_OK)
            return st;
        ssize_t n = read(fd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return disco_set_error(DISCO_E_CLOSED, "pipe fd %d: end of file", fd);
        } else if (errno != EINTR && errno != EAGAIN) {
            return disco_set_error(DISCO_E_SYS, "read(fd %d): %s", fd, strerror(errno));
        }
    }
    return DISCO_OK;
}

static disco_status_t pipe_send(int fd, const void *msg, uint32_t len, const disco_wait_t *w)
{
    /* One write for small frames keeps them atomic (below PIPE_BUF). */
    char small[512];
    if (len <= sizeof small - 4u) { /* not len + 4: it wraps for len near UINT32_MAX */
        memcpy(small, &len, 4);
        memcpy(small + 4, msg, len);
        return pipe_write_all(fd, small, len + 4u, w);
    }
    disco_status_t st = pipe_write_all(fd, &len, 4, w);
    return st != DISCO_OK ? st : pipe_write_all(fd, msg, len, w);
}

static disco_status_t pipe_recv(int fd, void *buf, uint32_t cap, uint32_t *len_out,
                                const disco_wait_t *w)
{
    uint32_t len;
    disco_status_t st = pipe_read_all(fd, &len, 4, w);
    if (st != DISCO_OK)
        return st;
    if (len > cap) /* the stream cannot skip it: the channel is now unusable */
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "pipe frame of %u bytes, buffer of %u", len,
                               cap);
    if ((st = pipe_read_all(fd, buf, len, w)) != DISCO_OK)
        return st == DISCO_E_CLOSED ? disco_set_error(DISCO_E_TRUNCATED,
                                                      "pipe fd %d: end of file inside a frame", fd)
                                    : st;
    *len_out = len;
    return DISCO_OK;
}

/* ---- the four calls ---- */

void disco__chan_prepare_recv(disco_chan_t *c)
{
    if (c->kind == DISCO_TRANSPORT_RING)
        disco_ring_prefetch_read(&c->cmd, (uint32_t)(c->self - 1));
}

void disco__chan_prepare_bcast(disco_chan_t *c)
{
    if (c->kind == DISCO_TRANSPORT_RING && c->world > 1)
        disco_ring_prefetch_write(&c->cmd);
}

disco_status_t disco__chan_bcast(disco_chan_t *c, const void *msg, uint32_t len,
                                 const disco_wait_t *w, uint64_t *sent_at)
{
    if (len > c->max_msg)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "command of %u bytes, maximum is %u", len,
                               c->max_msg);
    if (c->kind == DISCO_TRANSPORT_RING && c->world > 1)
        return disco__ring_write_stamped(&c->cmd, msg, len, w, sent_at);
    if (sent_at != NULL)
        *sent_at = disco__ticks();
    if (c->kind == DISCO_TRANSPORT_RING)
        return DISCO_OK;
    c->stuck = 0;
    for (int i = 1; i < c->world; i++) {
        if (c->cmd_fd[i] < 0)
            continue;
        disco_status_t st = pipe_send(c->cmd_fd[i], msg, len, w);
        if (st == DISCO_E_CLOSED) { /* a dead worker; its death is reported elsewhere */
            close(c->cmd_fd[i]);
            c->cmd_fd[i] = -1;
        } else if (st != DISCO_OK) {
            c->stuck = i; /* its pipe stayed full: the one that does not read */
            return st;
        }
    }
    return DISCO_OK;
}

disco_status_t disco__chan_recv_reply(disco_chan_t *c, int worker, void *buf, uint32_t cap,
                                      uint32_t *len_out, const disco_wait_t *w)
{
    if (c->kind == DISCO_TRANSPORT_RING)
        return disco_spsc_read(&c->reply[worker], buf, cap, len_out, w);
    if (c->reply_fd[worker] < 0)
        return disco_set_error(DISCO_E_CLOSED, "worker %d: reply pipe closed", worker);
    return pipe_recv(c->reply_fd[worker], buf, cap, len_out, w);
}

disco_status_t disco__chan_recv_cmd(disco_chan_t *c, void *buf, uint32_t cap, uint32_t *len_out,
                                    const disco_wait_t *w)
{
    if (c->kind == DISCO_TRANSPORT_RING)
        return disco_ring_read(&c->cmd, (uint32_t)(c->self - 1), buf, cap, len_out, w);
    return pipe_recv(c->cmd_fd[0], buf, cap, len_out, w);
}

disco_status_t disco__chan_send_reply(disco_chan_t *c, const void *msg, uint32_t len,
                                      const disco_wait_t *w)
{
    if (c->kind == DISCO_TRANSPORT_RING)
        return disco_spsc_write(&c->reply[0], msg, len, w);
    return pipe_send(c->reply_fd[0], msg, len, w);
}
