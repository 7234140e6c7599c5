/* transport_shm.c - the shm kind: per connection, a memfd segment with two
 * single-reader rings, handed over the Unix socket that then watches the
 * peer's liveness (protocol steps S1-S3, C1 in disco/transport.h).
 *
 * Segment layout (data area, offsets only; the mapping address differs
 * between the two processes):
 *   0      header: magic, layout, ring geometry, the two closed flags
 *   4096   ring client->server (the server reads it)
 *   4096+R ring server->client (the client reads it)
 * Every ring message is exactly one slot (max_msg = the slot's payload), so a
 * ring write or read is all or nothing: a deadline or a dead peer never
 * leaves half a message in a ring, and a recv that timed out having taken
 * nothing leaves the stream intact. A big send is cut into slot-sized
 * messages, which the reader copies out as each one is published, so the
 * two copies (into the ring, out of it) run in parallel on two cores. */
#include "workers/rpc/transport_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disco/shm/ring.h"
#include "disco/shm/segment.h"

/* Geometry: 64 slots of 16 KiB, 1 MiB per direction. The ring fits in the
 * L2 cache (2 MiB here) of the writer's core, where the reader's copy finds
 * it; 16 KiB per message makes the per-message cost (a release store, a
 * fence, a cursor update) small beside its copy, and 64 of them let the
 * writer run well ahead of the reader. A small message occupies one slot
 * but touches only the cache lines it uses. */
#define SHM_SLOT_SIZE (16u * 1024u)
#define SHM_NSLOTS    64u
#define SHM_CHUNK     (SHM_SLOT_SIZE - DISCO_RING_SLOT_HDR)
#define SHM_PAGE      4096u

#define SHM_MAGIC       0x5448534f43534944ULL /* "DISCOSHT": the segment header */
#define SHM_LAYOUT      1u
#define SHM_HELLO_MAGIC 0x4f4c484f43534944ULL /* "DISCOHLO": the hello on the socket */
#define SHM_VERSION     1u

enum { C2S = 0, S2C = 1 };       /* rings */
enum { CLIENT = 0, SERVER = 1 }; /* closed flags */

struct shm_header {
    uint64_t magic;
    uint32_t layout;
    uint32_t ring_bytes;  /* footprint of each ring */
    uint64_t ring_off[2]; /* from the data start, page-aligned: [C2S], [S2C] */
    /* DISCO_E_CLOSED once that side closed cleanly, else 0. The peer's flag
     * is the abort word of every wait on the rings. */
    _Alignas(64) _Atomic int32_t closed[2];
};

struct shm_hello {
    uint64_t magic;
    uint32_t version;
    uint32_t refused; /* 0, or -status: the server refuses this client (no fd) */
};

/* What the segment's memfd must carry before either side maps it: no
 * shrink (a truncated mapping faults with SIGBUS), no grow, no unsealing. */
#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* An shm transport. */
struct shm_transport {
    struct disco_transport base;
    int sock;                           /* liveness channel (the rendezvous) */
    disco_segment_t seg;                /* the connection's segment */
    disco_ring_t tx, rx;                /* this side writes tx, reads rx */
    _Atomic int32_t *self_closed;       /* set by our close */
    const _Atomic int32_t *peer_closed; /* set by the peer's close */
    bool peer_dead;                     /* a wait found the peer gone */
    unsigned char *stage;               /* one ring message being consumed */
    uint32_t stage_len, stage_off;      /* its length, bytes already taken */
};

static struct shm_transport *shm_of(struct disco_transport *t)
{
    return (struct shm_transport *)t;
}

/* Allocates an shm transport around sock, which it takes (closed on
 * failure). NULL when out of memory (error recorded). */
static struct shm_transport *shm_alloc(int sock)
{
    struct shm_transport *t = calloc(1, sizeof *t);
    if (t == NULL) {
        close(sock);
        disco_set_error(DISCO_E_NOMEM, "shm transport: out of memory");
        return NULL;
    }
    t->base.ops = &disco__transport_shm;
    t->sock = sock;
    t->seg.fd = -1;
    return t;
}

/* Closes t's end and frees it (the close op; also the cleanup of a failed
 * handshake). */
static void shm_close(struct disco_transport *base)
{
    struct shm_transport *t = shm_of(base);
    if (t->self_closed != NULL) {
        /* Release: pairs with the peer's acquire loads of this flag (its
         * wait's abort check, the check at the top of its send and recv):
         * every message we wrote is visible to it before the flag. */
        atomic_store_explicit(t->self_closed, DISCO_E_CLOSED, memory_order_release);
        /* A parked peer looks at the flag now rather than after its slice. */
        disco_ring_wake_all(&t->tx);
        disco_ring_wake_all(&t->rx);
    }
    if (t->sock >= 0)
        close(t->sock);
    disco_segment_close(&t->seg);
    free(t->stage);
    free(t);
}

static disco_status_t fail(struct shm_transport *t, disco_status_t st)
{
    shm_close(&t->base);
    return st;
}

/* ---- server: S2, S3 ---- */

static disco_status_t build_segment(struct shm_transport *t)
{
    disco_ring_config_t cfg = {
        .nslots = SHM_NSLOTS, .slot_size = SHM_SLOT_SIZE, .nreaders = 1, .max_msg = SHM_CHUNK};
    size_t ring_bytes = disco_ring_footprint(&cfg);
    size_t span = (ring_bytes + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
    disco_status_t st = disco_segment_create("disco-transport", SHM_PAGE + 2 * span, &t->seg);
    if (st != DISCO_OK)
        return st;
    if (fcntl(t->seg.fd, F_ADD_SEALS, SHM_SEALS) != 0 ||
        (fcntl(t->seg.fd, F_GET_SEALS) & SHM_SEALS) != SHM_SEALS)
        return disco_set_error(DISCO_E_SYS, "shm transport: sealing the segment: %s",
                               strerror(errno));
    unsigned char *data = disco_segment_data(&t->seg);
    struct shm_header *h = (struct shm_header *)data;
    h->magic = SHM_MAGIC;
    h->layout = SHM_LAYOUT;
    h->ring_bytes = (uint32_t)ring_bytes;
    h->ring_off[C2S] = SHM_PAGE;
    h->ring_off[S2C] = SHM_PAGE + span;
    /* Relaxed: the segment is not shared yet; the hello's sendmsg and the
     * client's recvmsg order these stores before the client's reads. */
    atomic_store_explicit(&h->closed[CLIENT], 0, memory_order_relaxed);
    atomic_store_explicit(&h->closed[SERVER], 0, memory_order_relaxed);
    if ((st = disco_ring_init(data + h->ring_off[C2S], ring_bytes, &cfg, &t->rx)) != DISCO_OK ||
        (st = disco_ring_init(data + h->ring_off[S2C], ring_bytes, &cfg, &t->tx)) != DISCO_OK)
        return st;
    disco_ring_set_reader_pid(&t->rx, 0, getpid());
    t->self_closed = &h->closed[SERVER];
    t->peer_closed = &h->closed[CLIENT];
    return DISCO_OK;
}

static void shm_refuse(int sock, disco_status_t st)
{
    struct shm_hello hello = {
        .magic = SHM_HELLO_MAGIC, .version = SHM_VERSION, .refused = (uint32_t) - (int32_t)st};
    ssize_t n;
    while ((n = send(sock, &hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0 &&
           errno == EINTR)
        ;
}

static disco_status_t send_hello(struct shm_transport *t, int64_t deadline_ns)
{
    struct shm_hello hello = {.magic = SHM_HELLO_MAGIC, .version = SHM_VERSION};
    struct iovec iov = {.iov_base = &hello, .iov_len = sizeof hello};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &t->seg.fd, sizeof(int));
    for (;;) {
        ssize_t n = sendmsg(t->sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n == (ssize_t)sizeof hello)
            return DISCO_OK;
        if (n >= 0)
            return disco_set_error(DISCO_E_SYS, "shm handshake: hello cut short (%zd bytes)", n);
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET)
            return disco_set_error(DISCO_E_CLOSED, "shm handshake: the client left (%s)",
                                   strerror(errno));
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return disco_set_error(DISCO_E_SYS, "shm handshake: sendmsg: %s", strerror(errno));
        disco_wait_t w = {.deadline_ns = deadline_ns};
        disco_status_t st = disco_wait_fd(t->sock, POLLOUT, &w);
        if (st != DISCO_OK)
            return st;
    }
}

static disco_status_t shm_accept(int sock, int64_t deadline_ns, struct disco_transport **out)
{
    struct shm_transport *t = shm_alloc(sock);
    if (t == NULL)
        return DISCO_E_NOMEM;
    disco_status_t st = build_segment(t);
    if (st == DISCO_OK && (t->stage = malloc(t->rx.max_msg)) == NULL)
        st = disco_set_error(DISCO_E_NOMEM, "shm transport: out of memory");
    if (st == DISCO_OK)
        st = send_hello(t, deadline_ns);
    if (st != DISCO_OK)
        return fail(t, st);
    *out = &t->base;
    return DISCO_OK;
}

/* ---- client: C1 ---- */

/* Keeps the first fd of every SCM_RIGHTS message in *fd_p, closes others. */
static void take_fds(struct msghdr *m, int *fd_p)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*fd_p < 0)
                *fd_p = fd;
            else
                close(fd);
        }
    }
}

static disco_status_t recv_hello(struct shm_transport *t, const char *address, int64_t deadline_ns,
                                 int *fd_p)
{
    struct shm_hello hello;
    size_t got = 0;
    while (got < sizeof hello) {
        struct iovec iov = {.iov_base = (char *)&hello + got, .iov_len = sizeof hello - got};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } ctl;
        struct msghdr m = {.msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = ctl.buf,
                           .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(t->sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n > 0) {
            take_fds(&m, fd_p);
            got += (size_t)n;
            continue;
        }
        if (n == 0)
            return disco_set_error(DISCO_E_CLOSED, "shm handshake with %s: the server closed",
                                   address);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return disco_set_error(DISCO_E_SYS, "shm handshake with %s: recvmsg: %s", address,
                                   strerror(errno));
        disco_wait_t w = {.deadline_ns = deadline_ns};
        disco_status_t st = disco_wait_fd(t->sock, POLLIN, &w);
        if (st == DISCO_E_TIMEOUT)
            return disco_set_error(DISCO_E_TIMEOUT,
                                   "shm handshake with %s: no hello by the deadline", address);
        if (st != DISCO_OK)
            return st;
    }
    if (hello.magic == SHM_HELLO_MAGIC && hello.version == SHM_VERSION && hello.refused != 0) {
        disco_status_t st = -(int32_t)hello.refused;
        return disco_set_error(st == DISCO_E_AUTH ? DISCO_E_AUTH : DISCO_E_CLOSED,
                               "shm handshake with %s: the server refused this client (%s, uid "
                               "%u)",
                               address, disco_err_name(st), (unsigned)geteuid());
    }
    if (hello.magic != SHM_HELLO_MAGIC || hello.version != SHM_VERSION)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "shm handshake with %s: hello %#llx version %u, want %#llx "
                               "version %u",
                               address, (unsigned long long)hello.magic, hello.version,
                               (unsigned long long)SHM_HELLO_MAGIC, SHM_VERSION);
    if (*fd_p < 0)
        return disco_set_error(DISCO_E_PROTOCOL, "shm handshake with %s: no segment fd", address);
    return DISCO_OK;
}

/* Attaches the server's segment and checks every offset before use. Before
 * mapping: the memfd must be sealed (SHM_SEALS), so that the server cannot
 * shrink it under us, and hold at least the header page and the rings. */
static disco_status_t attach(struct shm_transport *t, int fd, const char *address)
{
    int seals = fcntl(fd, F_GET_SEALS);
    struct stat sb;
    if (seals < 0 || (seals & SHM_SEALS) != SHM_SEALS)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "shm handshake with %s: the segment is not sealed against "
                               "shrinking and growing (seals %#x)",
                               address, seals < 0 ? 0 : (unsigned)seals);
    if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)(DISCO_SEGMENT_DATA_OFFSET + 3 * SHM_PAGE))
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "shm handshake with %s: a segment of %lld bytes is too small",
                               address, (long long)sb.st_size);
    disco_status_t st = disco_segment_attach(fd, &t->seg);
    if (st != DISCO_OK)
        return st;
    unsigned char *data = disco_segment_data(&t->seg);
    size_t size = disco_segment_data_size(&t->seg);
    struct shm_header *h = (struct shm_header *)data;
    /* The server writes this header and may rewrite it: each field is read
     * once (volatile: one load each), checked, and only the copies used. */
    const volatile struct shm_header *v = h;
    bool ok = size >= sizeof *h && v->magic == SHM_MAGIC && v->layout == SHM_LAYOUT;
    uint64_t off[2] = {0, 0};
    uint32_t ring_bytes = ok ? v->ring_bytes : 0;
    for (int i = 0; ok && i < 2; i++) {
        off[i] = v->ring_off[i];
        ok = off[i] % DISCO_CACHE_LINE == 0 && off[i] <= size && ring_bytes <= size - off[i];
    }
    if (!ok)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "shm handshake with %s: segment of %zu bytes is not a disco "
                               "transport of layout %u",
                               address, size, SHM_LAYOUT);
    if ((st = disco_ring_attach(data + off[C2S], ring_bytes, &t->tx)) != DISCO_OK ||
        (st = disco_ring_attach(data + off[S2C], ring_bytes, &t->rx)) != DISCO_OK)
        return st;
    /* One slot per message is what makes ring transfers all or nothing. */
    if (t->tx.max_msg == 0 || t->tx.max_msg > t->tx.payload || t->rx.max_msg == 0 ||
        t->rx.max_msg > t->rx.payload || t->tx.nreaders != 1 || t->rx.nreaders != 1)
        return disco_set_error(DISCO_E_BAD_MAGIC, "shm handshake with %s: bad ring geometry",
                               address);
    disco_ring_set_reader_pid(&t->rx, 0, getpid());
    t->self_closed = &h->closed[CLIENT];
    t->peer_closed = &h->closed[SERVER];
    return DISCO_OK;
}

static disco_status_t shm_connect(int sock, const char *address, int64_t deadline_ns,
                                  struct disco_transport **out)
{
    struct shm_transport *t = shm_alloc(sock);
    if (t == NULL)
        return DISCO_E_NOMEM;
    int fd = -1;
    disco_status_t st = recv_hello(t, address, deadline_ns, &fd);
    if (st == DISCO_OK)
        st = attach(t, fd, address);
    if (fd >= 0)
        close(fd); /* the segment holds its own dup */
    if (st == DISCO_OK && (t->stage = malloc(t->rx.max_msg)) == NULL)
        st = disco_set_error(DISCO_E_NOMEM, "shm transport: out of memory");
    if (st != DISCO_OK)
        return fail(t, st);
    *out = &t->base;
    return DISCO_OK;
}

/* ---- the stream ---- */

/* Check callback of every ring wait (at least once a park slice): the peer's
 * end of the socket closes when it closes or dies, which makes ours readable
 * (end of file) or hung up. Nothing else is ever sent on it. */
static disco_status_t peer_alive(void *ctx)
{
    struct shm_transport *t = ctx;
    struct pollfd p = {.fd = t->sock, .events = POLLIN};
    if (poll(&p, 1, 0) > 0 && p.revents != 0)
        return disco_set_error(DISCO_E_CLOSED, "shm transport: the peer is gone");
    return DISCO_OK;
}

/* Whether the peer is known to be gone: its clean close (acquire: pairs with
 * the release in its shm_close, so its last messages are visible), or
 * a death an earlier wait saw. Then a transfer waits for nothing: it takes
 * what the peer left and reports DISCO_E_CLOSED. */
static bool peer_gone(const struct shm_transport *t)
{
    return t->peer_dead || atomic_load_explicit(t->peer_closed, memory_order_acquire) != 0;
}

static disco_wait_t ring_wait(struct shm_transport *t, int64_t deadline_ns)
{
    disco_wait_t w = {.deadline_ns = deadline_ns,
                      .abort_word = t->peer_closed,
                      .check = peer_alive,
                      .check_ctx = t};
    return w;
}

static disco_status_t shm_send(struct disco_transport *base, const void *buf, size_t len,
                               int64_t deadline_ns, size_t *done_p)
{
    struct shm_transport *t = shm_of(base);
    const unsigned char *p = buf;
    size_t done = 0;
    disco_status_t st = DISCO_OK;
    /* Nobody will read: say so at once, whether or not the ring has room. */
    if (peer_gone(t))
        st = DISCO_E_CLOSED;
    disco_wait_t w = ring_wait(t, deadline_ns);
    while (st == DISCO_OK && done < len) {
        uint32_t n = len - done < t->tx.max_msg ? (uint32_t)(len - done) : t->tx.max_msg;
        if ((st = disco_spsc_write(&t->tx, p + done, n, &w)) == DISCO_OK)
            done += n;
    }
    *done_p = done;
    if (st == DISCO_E_CLOSED) {
        t->peer_dead = true;
        return disco_set_error(DISCO_E_CLOSED,
                               "shm transport: send: the peer is gone after %zu of %zu bytes", done,
                               len);
    }
    if (st == DISCO_E_TIMEOUT)
        return disco_set_error(DISCO_E_TIMEOUT,
                               "shm transport: send of %zu bytes: deadline passed after %zu", len,
                               done);
    return st;
}

/* Reads one ring message into buf (cap >= max_msg). A wait ended by the peer
 * leaving may have raced with its last messages: they are taken first. */
static disco_status_t read_msg(struct shm_transport *t, void *buf, uint32_t cap, uint32_t *len_p,
                               const disco_wait_t *w)
{
    disco_status_t st = disco_spsc_read(&t->rx, buf, cap, len_p, w);
    if (st == DISCO_E_CLOSED) {
        t->peer_dead = true;
        disco_wait_t now = {.no_wait = true};
        st = disco_spsc_read(&t->rx, buf, cap, len_p, &now);
    }
    if (st == DISCO_E_AGAIN) /* only asked when the peer is gone */
        st = DISCO_E_CLOSED;
    return st;
}

static disco_status_t shm_recv(struct disco_transport *base, void *buf, size_t len,
                               int64_t deadline_ns, size_t *done_p)
{
    struct shm_transport *t = shm_of(base);
    unsigned char *dst = buf;
    size_t done = 0;
    disco_status_t st = DISCO_OK;
    disco_wait_t w = ring_wait(t, deadline_ns);
    while (done < len) {
        if (t->stage_off < t->stage_len) { /* the rest of a message already taken */
            size_t n = t->stage_len - t->stage_off;
            n = n < len - done ? n : len - done;
            memcpy(dst + done, t->stage + t->stage_off, n);
            t->stage_off += (uint32_t)n;
            done += n;
            continue;
        }
        /* With the peer gone, take what it left but do not spin (~0.2 ms)
         * before saying it is gone. */
        if (peer_gone(t))
            w.no_wait = true;
        uint32_t got;
        if (len - done >= t->rx.max_msg) { /* a whole message fits: straight in */
            if ((st = read_msg(t, dst + done, t->rx.max_msg, &got, &w)) != DISCO_OK)
                break;
            done += got;
        } else { /* it may not: take it whole, hand out what is asked */
            if ((st = read_msg(t, t->stage, t->rx.max_msg, &got, &w)) != DISCO_OK)
                break;
            t->stage_len = got;
            t->stage_off = 0;
        }
    }
    *done_p = done;
    if (st == DISCO_E_CLOSED)
        return disco_set_error(DISCO_E_CLOSED,
                               "shm transport: recv: the peer is gone after %zu of %zu bytes", done,
                               len);
    if (st == DISCO_E_TIMEOUT)
        return disco_set_error(DISCO_E_TIMEOUT,
                               "shm transport: recv of %zu bytes: deadline passed after %zu", len,
                               done);
    return st;
}

/* The liveness socket and the segment's memfd. */
static int shm_fds(const struct disco_transport *base, int fds_out[4])
{
    const struct shm_transport *t = (const struct shm_transport *)base;
    int n = 0;
    if (t->sock >= 0)
        fds_out[n++] = t->sock;
    if (t->seg.fd >= 0 && t->seg.fd != t->sock)
        fds_out[n++] = t->seg.fd;
    return n;
}

/* "shm uid U pid P" from the rendezvous socket's SO_PEERCRED, or "shm". */
static void shm_peer(const struct disco_transport *base, char *buf, size_t cap)
{
    const struct shm_transport *t = (const struct shm_transport *)base;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(t->sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
        snprintf(buf, cap, "shm uid %u pid %d", (unsigned)cr.uid, (int)cr.pid);
    else
        snprintf(buf, cap, "shm");
}

/* Closes and unmaps only: no closed flag, no wake (the owner still serves
 * the connection). */
static void shm_abandon(struct disco_transport *base)
{
    struct shm_transport *t = shm_of(base);
    int fds[4];
    int n = shm_fds(base, fds);
    if (t->seg.base != NULL)
        munmap(t->seg.base, t->seg.size);
    free(t->stage);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(t);
}

const struct disco__transport_ops disco__transport_shm = {
    .name = "shm",
    .carrier = DISCO__CARRIER_UNIX,
    .send = shm_send,
    .recv = shm_recv,
    .fds = shm_fds,
    .peer = shm_peer,
    .close = shm_close,
    .abandon = shm_abandon,
    .accept = shm_accept,
    .connect = shm_connect,
    .refuse = shm_refuse,
};
