/* test_inherit.c - what worker processes inherit from the controller: only
 * their own session's segment and fds (issue 14, section 5). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workers/core/inherit.h"
#include "disco/session.h"
#include "tests/testutil.h"

static disco_session_config_t config(int n, int launch, uint64_t heap)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.launch = launch ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.heap_bytes = heap;
    return cfg;
}

/* Runs a command on every worker and syncs each: afterwards every worker
 * process is in its loop, past whatever it does at start. */
static void all_started(disco_session_t *s)
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &r));
    for (int w = 0; w < disco_session_num_workers(s); w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, r));
}

/* The inode of the one segment named disco-session this process maps. */
static unsigned long session_inode(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_msg(f != NULL, "/proc/self/maps: %s", strerror(errno));
    char line[1024];
    unsigned long ino = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (strstr(line, "/memfd:disco-session") != NULL)
            ck_assert_msg(sscanf(line, "%*s %*s %*s %*s %lu", &ino) == 1, "maps line: %s", line);
    fclose(f);
    ck_assert_msg(ino != 0, "no disco-session mapping in /proc/self/maps");
    return ino;
}

/* Whether process pid maps a file with inode ino, or holds an fd on it. */
static bool holds_inode(pid_t pid, unsigned long ino, char *what, size_t cap)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        unsigned long i = 0;
        if (sscanf(line, "%*s %*s %*s %*s %lu", &i) == 1 && i == ino) {
            snprintf(what, cap, "maps it: %s", line);
            found = true;
        }
    }
    fclose(f);
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    ck_assert_msg(d != NULL, "%s: %s", path, strerror(errno));
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char fd_path[400];
        struct stat sb;
        snprintf(fd_path, sizeof fd_path, "%s/%s", path, e->d_name);
        if (e->d_name[0] != '.' && stat(fd_path, &sb) == 0 && sb.st_ino == ino) {
            snprintf(what, cap, "holds it as fd %s", e->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

/* Closing session A frees A's segment even while session B, opened after
 * A, still runs: B's workers (forked while A was mapped and its memfd open
 * in the controller) neither map A's segment nor hold its fd, and the
 * controller does not either. Loop: fork, spawn. */
START_TEST(test_closed_session_released)
{
    disco_session_config_t ca = config(2, 0, 64u << 20), cb = config(3, _i, 0);
    disco_session_t *a, *b;
    CK_OK(disco_session_open(&ca, &a));
    all_started(a);
    unsigned long ino = session_inode();
    CK_OK(disco_session_open(&cb, &b));
    all_started(b);
    disco_session_close(a);
    char what[1100];
    for (int w = 0; w < 3; w++) {
        pid_t pid = disco_session_worker_pid(b, w);
        ck_assert_msg(!holds_inode(pid, ino, what, sizeof what),
                      "closed session A's segment (inode %lu) is alive in session B's %s %d: %s",
                      ino, w == 0 ? "controller" : "worker", (int)pid, what);
    }
    all_started(b); /* B is unharmed */
    disco_session_close(b);
}
END_TEST

/* An fd the application opened before the session (the write end of a
 * pipe, without close-on-exec, and a socket) is not open in any worker:
 * once the application closes its copy, the reader sees end of file at
 * once while the session still runs. Loop: fork, spawn; ring, pipe. */
START_TEST(test_app_fds_not_inherited)
{
    int p[2], sv[2];
    ck_assert_msg(pipe(p) == 0, "pipe: %s", strerror(errno));
    ck_assert_msg(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
    disco_session_config_t cfg = config(3, _i & 1, 0);
    cfg.transport = (_i & 2) ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    all_started(s);
    struct stat pipe_sb, sock_sb;
    ck_assert_int_eq(fstat(p[1], &pipe_sb), 0);
    ck_assert_int_eq(fstat(sv[1], &sock_sb), 0);
    char what[1100];
    for (int w = 1; w < 3; w++) {
        pid_t pid = disco_session_worker_pid(s, w);
        ck_assert_msg(!holds_inode(pid, pipe_sb.st_ino, what, sizeof what),
                      "worker %d (pid %d) inherited the application's pipe: %s", w, (int)pid, what);
        ck_assert_msg(!holds_inode(pid, sock_sb.st_ino, what, sizeof what),
                      "worker %d (pid %d) inherited the application's socket: %s", w, (int)pid,
                      what);
    }
    close(p[1]);
    close(sv[1]);
    /* 10 s only bounds a failure; a pass returns at once. */
    struct pollfd pf[2] = {{.fd = p[0], .events = POLLIN}, {.fd = sv[0], .events = POLLIN}};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(poll(&pf[k], 1, 10000) == 1,
                      "%s: no end of file after the application closed its end (a worker holds "
                      "it)",
                      k == 0 ? "pipe" : "socket");
        char c;
        ck_assert_int_eq(read(pf[k].fd, &c, 1), 0);
    }
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    all_started(s);
    disco_session_close(s);
    close(p[0]);
    close(sv[0]);
}
END_TEST

/* Whether fd is open in this process. */
static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/* disco__close_fds_except (loop 0, close_range) and its fallback, the walk
 * of /proc/self/fd (loop 1), close every fd but 0-2 and the keep-list, in a
 * child with 40 fds open: the list unsorted, with a duplicate, a negative
 * entry and stdio in it; the kept fds stay and still work. */
START_TEST(test_close_fds_except)
{
    pid_t pid = tu_fork();
    if (pid == 0) {
        int fds[40];
        for (int k = 0; k < 40; k += 2)
            CH_TRUE(pipe(&fds[k]) == 0);
        int keep[6] = {fds[30], fds[3], -1, fds[17], 1, fds[3]};
        int want[3] = {fds[30], fds[3], fds[17]};
        int rc = _i == 0 ? disco__close_fds_except(keep, 6) : disco__close_fds_listed(keep, 6);
        CH_TRUE(rc == 0);
        for (int k = 0; k < 40; k++) {
            bool kept = fds[k] == want[0] || fds[k] == want[1] || fds[k] == want[2];
            if (fd_open(fds[k]) != kept)
                tu_child_fail("fd %d (entry %d): %s", fds[k], k,
                              kept ? "closed though kept" : "still open");
        }
        CH_TRUE(fd_open(2)); /* stdio is never closed */
        /* nothing else is open: count /proc/self/fd */
        DIR *d = opendir("/proc/self/fd");
        CH_TRUE(d != NULL);
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.' && atoi(e->d_name) > 2 && atoi(e->d_name) != dirfd(d))
                n++;
        closedir(d);
        if (n != 3)
            tu_child_fail("%d fds above 2 are open, want the 3 kept", n);
        char c;
        CH_TRUE(read(fds[30], &c, 1) == 0); /* a read end whose write end is gone: end of file */
        _exit(0);
    }
    tu_wait_ok(pid, "closing child");
}
END_TEST

Suite *suite_inherit(void)
{
    Suite *s = suite_create("inherit");
    TCase *tc = tcase_create("inherit");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_close_fds_except, 0, 2);
    tcase_add_loop_test(tc, test_closed_session_released, 0, 2);
    tcase_add_loop_test(tc, test_app_fds_not_inherited, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}
