/* transport.c - addresses, listeners, connect and accept over sockets, and
 * the public calls, dispatched through each kind's table (see
 * disco/transport.h, transport_ops.h). Nothing here knows a kind's fields. */
#include "workers/rpc/transport_ops.h"

#include "disco/shm/wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define PATH_CAP sizeof(((struct sockaddr_un *)0)->sun_path)

struct disco_listener {
    const struct disco__transport_ops *ops; /* the kind: shm, unix or tcp */
    int nuids;                              /* peer uids allowed besides ours */
    void (*on_refused)(disco_transport_t *t, disco_status_t st, const char *why, void *arg);
    void *on_refused_arg;
    uid_t uids[DISCO_LISTEN_MAX_UIDS];
    int fd;      /* listening socket, non-blocking, close-on-exec */
    pid_t owner; /* the process that bound the path */
    dev_t dev;   /* the socket file's identity, to unlink only ours */
    ino_t ino;
    char path[PATH_CAP]; /* unix and shm; "" for tcp */
    char address[PATH_CAP + 8];
};

/* A parsed address. */
struct addr {
    const struct disco__transport_ops *ops;
    char path[PATH_CAP]; /* unix, shm */
    char host[256];      /* tcp, brackets removed */
    char port[6];        /* tcp */
};

/* The kinds an address can name, found by scheme ("shm:" is shm's). */
static const struct disco__transport_ops *const addressed[] = {
    &disco__transport_unix, &disco__transport_tcp, &disco__transport_shm};

const char *disco_transport_kind(const disco_transport_t *t)
{
    return t != NULL ? t->ops->name : "none";
}

/* ---- addresses ---- */

static disco_status_t bad_address(const char *address, const char *why)
{
    return disco_set_error(DISCO_E_INVAL, "address \"%s\": %s", address, why);
}

/* Parses address; listening decides what port 0 means (any port vs invalid). */
static disco_status_t parse_address(const char *address, bool listening, struct addr *a)
{
    if (address == NULL)
        return disco_set_error(DISCO_E_INVAL, "address is NULL");
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < sizeof addressed / sizeof addressed[0] && a->ops == NULL; i++) {
        size_t n = strlen(addressed[i]->name);
        if (strncmp(address, addressed[i]->name, n) == 0 && address[n] == ':')
            a->ops = addressed[i];
    }
    if (a->ops == NULL)
        return bad_address(address, "unknown kind (want unix:PATH, tcp:HOST:PORT or shm:PATH)");
    const char *rest = strchr(address, ':') + 1;
    if (a->ops->carrier == DISCO__CARRIER_UNIX) {
        if (rest[0] == '\0')
            return bad_address(address, "no socket path");
        if (strlen(rest) >= PATH_CAP)
            return bad_address(address, "socket path longer than 107 bytes");
        memcpy(a->path, rest, strlen(rest) + 1);
        return DISCO_OK;
    }
    const char *colon = strrchr(rest, ':');
    if (colon == NULL)
        return bad_address(address, "no port (want tcp:HOST:PORT)");
    size_t hlen = (size_t)(colon - rest);
    if (hlen >= 2 && rest[0] == '[' && rest[hlen - 1] == ']') {
        rest++;
        hlen -= 2;
    } else if (memchr(rest, ':', hlen) != NULL || memchr(rest, '[', hlen) != NULL) {
        return bad_address(address, "an IPv6 host goes in brackets: tcp:[::1]:PORT");
    }
    if (hlen >= sizeof a->host)
        return bad_address(address, "host name too long");
    memcpy(a->host, rest, hlen);
    if (hlen == 0 || strcmp(a->host, "localhost") == 0)
        strcpy(a->host, "127.0.0.1");
    const char *port = colon + 1;
    size_t plen = strlen(port);
    if (plen == 0 || plen > 5 || strspn(port, "0123456789") != plen || atol(port) > 65535)
        return bad_address(address, "port must be a number from 0 to 65535");
    if (!listening && atol(port) == 0)
        return bad_address(address, "cannot connect to port 0");
    memcpy(a->port, port, plen + 1);
    return DISCO_OK;
}

/* getaddrinfo for a parsed tcp address. */
static disco_status_t resolve(const struct addr *a, const char *address, bool passive,
                              struct addrinfo **res_out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    int rc = getaddrinfo(a->host, a->port, &hints, res_out);
    if (rc == 0)
        return DISCO_OK;
    return disco_set_error(rc == EAI_NONAME ? DISCO_E_INVAL : DISCO_E_SYS,
                           "address \"%s\": host \"%s\": %s", address, a->host,
                           rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
}

/* ---- listening ---- */

/* Whether path is a socket file nobody listens behind (left by a crash). */
static bool stale_socket(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISSOCK(sb.st_mode))
        return false;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    bool stale = connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno == ECONNREFUSED;
    close(fd);
    return stale;
}

/* Binds l->fd to l->path, mode 0600, and listens. The mode is set between
 * bind and listen: until listen, connect is refused whatever the mode, so
 * there is no moment when another user could connect. */
static disco_status_t listen_unix(disco_listener_t *l, const char *address)
{
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0)
        return disco_set_error(DISCO_E_SYS, "listen on %s: socket: %s", address, strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, l->path, strlen(l->path) + 1);
    int rc = bind(l->fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0 && errno == EADDRINUSE && stale_socket(l->path) && unlink(l->path) == 0)
        rc = bind(l->fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0)
        return disco_set_error(DISCO_E_SYS, "listen on %s: bind: %s", address, strerror(errno));
    struct stat sb;
    mode_t mode = l->nuids != 0 ? 0666 : 0600; /* others allowed: the uid check guards */
    if (chmod(l->path, mode) != 0 || stat(l->path, &sb) != 0) {
        disco_status_t st = disco_set_error(DISCO_E_SYS, "listen on %s: chmod %o: %s", address,
                                            (unsigned)mode, strerror(errno));
        unlink(l->path);
        return st;
    }
    l->dev = sb.st_dev;
    l->ino = sb.st_ino;
    l->owner = getpid();
    if (listen(l->fd, SOMAXCONN) != 0) {
        disco_status_t st =
            disco_set_error(DISCO_E_SYS, "listen on %s: %s", address, strerror(errno));
        unlink(l->path);
        return st;
    }
    snprintf(l->address, sizeof l->address, "%s:%s", l->ops->name, l->path);
    return DISCO_OK;
}

/* "tcp:127.0.0.1:PORT" or "tcp:[::1]:PORT" for a bound socket. */
static disco_status_t tcp_name(int fd, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN];
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return disco_set_error(DISCO_E_SYS, "getsockname: %s", strerror(errno));
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        snprintf(buf, cap, "tcp:[%s]:%u", host, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        snprintf(buf, cap, "tcp:%s:%u", host, ntohs(s4->sin_port));
    }
    return DISCO_OK;
}

/* Whether a resolved address is loopback (127/8, ::1, ::ffff:127/8). */
static bool loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24 == 127;
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

static disco_status_t listen_tcp(disco_listener_t *l, const struct addr *a, const char *address,
                                 bool allow_remote)
{
    struct addrinfo *res;
    disco_status_t st = resolve(a, address, true, &res);
    if (st != DISCO_OK)
        return st;
    for (const struct addrinfo *ai = res; ai != NULL && !allow_remote; ai = ai->ai_next) {
        if (!loopback(ai->ai_addr)) {
            freeaddrinfo(res);
            return disco_set_error(DISCO_E_INVAL,
                                   "listen on %s: not a loopback address: other machines could "
                                   "connect; allow it explicitly (--allow-remote)",
                                   address);
        }
    }
    int err = 0;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            l->fd = fd;
            break;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    if (l->fd < 0)
        return disco_set_error(DISCO_E_SYS, "listen on %s: %s", address, strerror(err));
    return tcp_name(l->fd, l->address, sizeof l->address);
}

disco_status_t disco_listener_open(const char *address, disco_listener_t **out)
{
    return disco_listener_open_with(address, NULL, out);
}

disco_status_t disco_listener_open_with(const char *address, const disco_listener_config_t *cfg,
                                        disco_listener_t **out)
{
    static const disco_listener_config_t defaults = {0};
    struct addr a;
    disco_status_t st = parse_address(address, true, &a);
    if (st != DISCO_OK)
        return st;
    if (cfg == NULL)
        cfg = &defaults;
    if (out == NULL)
        return disco_set_error(DISCO_E_INVAL, "listen on %s: out is NULL", address);
    if (cfg->n_allow_uids < 0 || cfg->n_allow_uids > DISCO_LISTEN_MAX_UIDS ||
        (cfg->n_allow_uids > 0 && cfg->allow_uids == NULL))
        return disco_set_error(DISCO_E_INVAL, "listen on %s: %d allowed uids (at most %d)", address,
                               cfg->n_allow_uids, DISCO_LISTEN_MAX_UIDS);
    disco_listener_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return disco_set_error(DISCO_E_NOMEM, "listen on %s: out of memory", address);
    l->ops = a.ops;
    l->fd = -1;
    for (int i = 0; i < cfg->n_allow_uids; i++)
        l->uids[l->nuids++] = (uid_t)cfg->allow_uids[i];
    l->on_refused = cfg->on_refused;
    l->on_refused_arg = cfg->on_refused_arg;
    memcpy(l->path, a.path, sizeof l->path);
    st = a.ops->carrier == DISCO__CARRIER_TCP ? listen_tcp(l, &a, address, cfg->allow_remote != 0)
                                              : listen_unix(l, address);
    if (st != DISCO_OK) {
        if (l->fd >= 0)
            close(l->fd);
        free(l);
        return st;
    }
    *out = l;
    return DISCO_OK;
}

const char *disco_listener_address(const disco_listener_t *l)
{
    return l->address;
}

int disco_listener_fd(const disco_listener_t *l)
{
    return l->fd;
}

/* SO_PEERCRED: the peer must be this user or one the listener allows. */
static disco_status_t peer_allowed(const disco_listener_t *l, int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return disco_set_error(DISCO_E_SYS, "accept on %s: SO_PEERCRED: %s", l->address,
                               strerror(errno));
    if (cr.uid == geteuid())
        return DISCO_OK;
    for (int i = 0; i < l->nuids; i++)
        if (l->uids[i] == cr.uid)
            return DISCO_OK;
    return disco_set_error(DISCO_E_AUTH,
                           "accept on %s: peer uid %u (pid %d) is not allowed (this server runs "
                           "as uid %u; allow others explicitly)",
                           l->address, (unsigned)cr.uid, (int)cr.pid, (unsigned)geteuid());
}

disco_status_t disco_listener_accept(disco_listener_t *l, int64_t deadline_ns,
                                     disco_transport_t **out)
{
    if (l == NULL || out == NULL)
        return disco_set_error(DISCO_E_INVAL, "accept: NULL listener or out");
    int fd;
    for (;;) {
        fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0)
            break;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return disco_set_error(DISCO_E_SYS, "accept on %s: %s", l->address, strerror(errno));
        disco_wait_t w = {.deadline_ns = deadline_ns};
        disco_status_t st = disco_wait_fd(l->fd, POLLIN, &w);
        if (st == DISCO_E_TIMEOUT)
            return disco_set_error(DISCO_E_TIMEOUT, "accept on %s: no client by the deadline",
                                   l->address);
        if (st != DISCO_OK)
            return st;
    }
    if (l->ops->carrier == DISCO__CARRIER_UNIX) {
        disco_status_t st = peer_allowed(l, fd);
        if (st != DISCO_OK) {
            if (l->ops->refuse != NULL) { /* the kind's handshake says why */
                l->ops->refuse(fd, st);
            } else if (l->on_refused != NULL) {
                char why[256];
                snprintf(why, sizeof why, "%s", disco_last_error());
                disco_transport_t *t; /* owns fd from here, failed or not */
                if (l->ops->accept(fd, deadline_ns, &t) == DISCO_OK) {
                    l->on_refused(t, st, why, l->on_refused_arg);
                    disco_transport_close(t);
                }
                return disco_set_error(st, "%s", why);
            }
            close(fd);
            return st;
        }
    }
    return l->ops->accept(fd, deadline_ns, out);
}

void disco_listener_close(disco_listener_t *l)
{
    if (l == NULL)
        return;
    struct stat sb;
    if (l->path[0] != '\0' && l->owner == getpid() && stat(l->path, &sb) == 0 &&
        sb.st_dev == l->dev && sb.st_ino == l->ino)
        unlink(l->path);
    close(l->fd);
    free(l);
}

/* ---- connecting ---- */

static disco_status_t refused(int err, const char *address)
{
    bool gone = err == ECONNREFUSED || err == ENOENT || err == ECONNRESET;
    return disco_set_error(gone ? DISCO_E_CLOSED : DISCO_E_SYS, "connect to %s: %s", address,
                           strerror(err));
}

/* A blocking AF_UNIX connect waits only while the listener's backlog is
 * full, for at most SO_SNDTIMEO: that carries the deadline. */
static disco_status_t connect_unix(const struct addr *a, const char *address, int64_t deadline_ns,
                                   int *fd_out)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return disco_set_error(DISCO_E_SYS, "connect to %s: socket: %s", address, strerror(errno));
    if (deadline_ns != 0) {
        int64_t left = deadline_ns - disco_now_ns();
        if (left <= 0) {
            close(fd);
            return disco_set_error(DISCO_E_TIMEOUT, "connect to %s: deadline passed", address);
        }
        struct timeval tv = {.tv_sec = left / 1000000000LL,
                             .tv_usec = (left % 1000000000LL + 999) / 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, a->path, strlen(a->path) + 1);
    int rc;
    while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        int e = errno;
        close(fd);
        if (e == EAGAIN || e == EINPROGRESS)
            return disco_set_error(DISCO_E_TIMEOUT, "connect to %s: backlog full until deadline",
                                   address);
        return refused(e, address);
    }
    struct timeval zero = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    *fd_out = fd;
    return DISCO_OK;
}

/* Non-blocking connect to one resolved address; *err_p gets errno on failure. */
static disco_status_t connect_one(const struct addrinfo *ai, const char *address,
                                  int64_t deadline_ns, int *fd_out, int *err_p)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        *err_p = errno;
        return DISCO_E_SYS;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            *err_p = errno;
            close(fd);
            return DISCO_E_SYS;
        }
        disco_wait_t w = {.deadline_ns = deadline_ns};
        disco_status_t st = disco_wait_fd(fd, POLLOUT, &w);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (st == DISCO_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (st != DISCO_OK || soerr != 0) {
            close(fd);
            *err_p = soerr;
            if (st == DISCO_E_TIMEOUT)
                return disco_set_error(DISCO_E_TIMEOUT, "connect to %s: deadline passed", address);
            return st != DISCO_OK ? st : DISCO_E_SYS;
        }
    }
    *fd_out = fd;
    return DISCO_OK;
}

static disco_status_t connect_tcp(const struct addr *a, const char *address, int64_t deadline_ns,
                                  int *fd_out)
{
    struct addrinfo *res;
    disco_status_t st = resolve(a, address, false, &res);
    if (st != DISCO_OK)
        return st;
    int err = ECONNREFUSED;
    st = DISCO_E_SYS;
    for (const struct addrinfo *ai = res; ai != NULL && st == DISCO_E_SYS; ai = ai->ai_next)
        st = connect_one(ai, address, deadline_ns, fd_out, &err);
    freeaddrinfo(res);
    return st == DISCO_E_SYS ? refused(err, address) : st;
}

disco_status_t disco_transport_connect(const char *address, int64_t deadline_ns,
                                       disco_transport_t **out)
{
    struct addr a;
    disco_status_t st = parse_address(address, false, &a);
    if (st != DISCO_OK)
        return st;
    if (out == NULL)
        return disco_set_error(DISCO_E_INVAL, "connect to %s: out is NULL", address);
    int fd = -1;
    st = a.ops->carrier == DISCO__CARRIER_TCP ? connect_tcp(&a, address, deadline_ns, &fd)
                                              : connect_unix(&a, address, deadline_ns, &fd);
    if (st != DISCO_OK)
        return st;
    return a.ops->connect(fd, address, deadline_ns, out);
}

/* ---- the stream ---- */

static disco_status_t check_call(const disco_transport_t *t, const void *buf, size_t len,
                                 const char *what)
{
    if (t == NULL || (buf == NULL && len != 0))
        return disco_set_error(DISCO_E_INVAL, "%s: NULL transport or buffer", what);
    if (t->broken)
        return disco_set_error(DISCO_E_BROKEN,
                               "%s transport: %s: an earlier call failed mid-transfer",
                               t->ops->name, what);
    return DISCO_OK;
}

disco_status_t disco_transport_send(disco_transport_t *t, const void *buf, size_t len,
                                    int64_t deadline_ns)
{
    disco_status_t st = check_call(t, buf, len, "send");
    if (st != DISCO_OK || len == 0)
        return st;
    size_t done = 0;
    st = t->ops->send(t, buf, len, deadline_ns, &done);
    if (st != DISCO_OK && done != 0)
        t->broken = true;
    return st;
}

disco_status_t disco_transport_recv(disco_transport_t *t, void *buf, size_t len,
                                    int64_t deadline_ns)
{
    disco_status_t st = check_call(t, buf, len, "recv");
    if (st != DISCO_OK || len == 0)
        return st;
    size_t done = 0;
    st = t->ops->recv(t, buf, len, deadline_ns, &done);
    if (st != DISCO_OK && done != 0) {
        t->broken = true;
        if (st == DISCO_E_CLOSED)
            st = disco_set_error(DISCO_E_TRUNCATED,
                                 "%s transport: the peer closed after %zu of %zu bytes",
                                 t->ops->name, done, len);
    }
    return st;
}

int disco_transport_fds(const disco_transport_t *t, int fds_out[4])
{
    return t != NULL ? t->ops->fds(t, fds_out) : 0;
}

const char *disco_transport_peer(const disco_transport_t *t, char *buf, size_t cap)
{
    if (cap == 0)
        return buf;
    if (t == NULL)
        snprintf(buf, cap, "%s", disco_transport_kind(t));
    else
        t->ops->peer(t, buf, cap);
    return buf;
}

void disco_transport_abandon(disco_transport_t *t)
{
    if (t != NULL)
        t->ops->abandon(t);
}

void disco_transport_close(disco_transport_t *t)
{
    if (t != NULL)
        t->ops->close(t);
}
