/* transport_util.h - helpers of the transport suites (test_transport.c,
 * test_transport_listen.c, test_transport_ops.c): kinds by index, addresses,
 * a connected pair across a fork, byte patterns. */
#ifndef DISCO_TESTS_TRANSPORT_UTIL_H
#define DISCO_TESTS_TRANSPORT_UTIL_H

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "disco/transport.h"
#include "tests/testutil.h"

#define MS  1000000LL
#define BIG (16u << 20)

enum { K_SHM, K_UNIX, K_TCP, K_PIPE, NKINDS };
static const char *const kinds[NKINDS] = {"shm", "unix", "tcp", "pipe"};

static inline int64_t in_ms(int64_t ms)
{
    return disco_now_ns() + ms * MS;
}

/* A fresh socket path for this test process. */
static inline void sock_path(char *buf, size_t cap)
{
    static unsigned n;
    snprintf(buf, cap, "/tmp/disco-test-%d-%u.sock", (int)getpid(), n++);
}

/* A listening address of kind (not pipe). */
static inline void listen_address(int kind, char *buf, size_t cap)
{
    if (kind == K_TCP) {
        snprintf(buf, cap, "tcp:127.0.0.1:0");
        return;
    }
    char path[96];
    sock_path(path, sizeof path);
    snprintf(buf, cap, "%s:%s", kinds[kind], path);
}

/* In a child: fail with the call, its status and the error detail. */
#define CHILD_OK(call)                                                                             \
    do {                                                                                           \
        int ch_st_ = (call);                                                                       \
        if (ch_st_ != DISCO_OK)                                                                    \
            tu_child_fail("%s: %s (%s)", #call, disco_err_name(ch_st_), disco_last_error());       \
    } while (0)

/* Connects this test process with a forked child over kind: the parent
 * listens and accepts, the child connects (pipe: two pipes). Both return
 * with their end in *t_out; the result is the child's pid in the parent and
 * 0 in the child. */
static inline pid_t pair_fork(int kind, disco_transport_t **t_out)
{
    if (kind == K_PIPE) {
        int down[2], up[2];
        ck_assert_msg(pipe(down) == 0 && pipe(up) == 0, "pipe: %s", strerror(errno));
        pid_t pid = tu_fork();
        int in = pid == 0 ? down[0] : up[0], out = pid == 0 ? up[1] : down[1];
        close(pid == 0 ? down[1] : up[1]);
        close(pid == 0 ? up[0] : down[0]);
        disco_status_t st = disco_transport_from_fds(in, out, t_out);
        if (pid == 0 && st != DISCO_OK)
            tu_child_fail("disco_transport_from_fds: %s", disco_err_name(st));
        CK_OK(st);
        return pid;
    }
    char addr[128];
    listen_address(kind, addr, sizeof addr);
    disco_listener_t *l;
    CK_OK(disco_listener_open(addr, &l));
    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_status_t st = disco_transport_connect(disco_listener_address(l), in_ms(5000), t_out);
        disco_listener_close(l); /* a child's close leaves the socket file */
        if (st != DISCO_OK)
            tu_child_fail("disco_transport_connect(%s): %s (%s)", addr, disco_err_name(st),
                          disco_last_error());
        return 0;
    }
    disco_status_t st = disco_listener_accept(l, in_ms(5000), t_out);
    disco_listener_close(l);
    if (st != DISCO_OK)
        tu_kill_all(&pid, 1);
    CK_OK(st);
    ck_assert_str_eq(disco_transport_kind(*t_out), kinds[kind]);
    return pid;
}

/* Byte i of pattern `seed`. */
static inline unsigned char pat(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u >> 11) ^ (i >> 20) ^ seed);
}

static inline void fill(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pat(i, seed);
}

/* Index of the first byte that is not pattern `seed`, or -1. */
static inline long mismatch(const unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pat(i, seed))
            return (long)i;
    return -1;
}

#endif
