/* testutil.h - helpers shared by the Check suites (header-only, static). */
#ifndef DISCO_TESTUTIL_H
#define DISCO_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/status.h"
#include "disco/shm/wait.h"

/* Asserts that `call` returns `want`; the message names the call, the code
 * it got, the code it wanted and the thread's error detail. */
#define CK_STATUS(call, want)                                                                      \
    do {                                                                                           \
        int ck_st_ = (call);                                                                       \
        int ck_want_ = (want);                                                                     \
        ck_assert_msg(ck_st_ == ck_want_, "%s: %s, want %s (%s)", #call, disco_err_name(ck_st_),   \
                      disco_err_name(ck_want_), disco_last_error());                               \
    } while (0)

#define CK_OK(call) CK_STATUS(call, DISCO_OK)

/* Asserts that the thread's error detail mentions `text`. */
#define CK_HAS(text)                                                                               \
    ck_assert_msg(strstr(disco_last_error(), (text)) != NULL, "detail \"%s\" lacks \"%s\"",        \
                  disco_last_error(), (text))

/* Milliseconds since `start_ns` on the disco clock. */
/* Runs a shell command line; returns its exit code (128 + the signal
 * that ended it), its stdout in out (cap bytes, terminated). */
static inline int tu_run(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen %s", cmd);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Sends this process's stderr to a fresh memfd; returns it (read it with
 * tu_read_all). */
static inline int tu_capture_stderr(void)
{
    int fd = memfd_create("stderr", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    ck_assert_int_eq(dup2(fd, 2), 2);
    return fd;
}

/* Everything written to fd so far, as a string (free it). */
static inline char *tu_read_all(int fd)
{
    fflush(stderr);
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = calloc(1, (size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(pread(fd, buf, (size_t)n, 0), n);
    return buf;
}

static inline double tu_ms_since(int64_t start_ns)
{
    return (double)(disco_now_ns() - start_ns) / 1e6;
}

/* Number of entries in /dev/shm whose name contains "disco" (any case). */
static inline int tu_dev_shm_disco_entries(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcasestr(e->d_name, "disco") != NULL)
            n++;
    closedir(d);
    return n;
}

/* Number of open file descriptors of this process. */
static inline int tu_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

/* In a forked child: report a failure on stderr and exit with status 1.
 * Children never use ck_assert (that belongs to the test process). */
__attribute__((format(printf, 1, 2), noreturn)) static inline void tu_child_fail(const char *fmt,
                                                                                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "child %d: ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    _exit(1);
}

/* In a child: fail (exit 1) unless call returns want. */
#define CH_STATUS(call, want)                                                                      \
    do {                                                                                           \
        int ch_st_ = (call);                                                                       \
        if (ch_st_ != (want))                                                                      \
            tu_child_fail("%s: %s, want %s (%s)", #call, disco_err_name(ch_st_),                   \
                          disco_err_name(want), disco_last_error());                               \
    } while (0)
#define CH_OK(call) CH_STATUS(call, DISCO_OK)
#define CH_TRUE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond))                                                                               \
            tu_child_fail("%s:%d: %s is false", __FILE__, __LINE__, #cond);                        \
    } while (0)

/* Forks a child that dies with the test process (PR_SET_PDEATHSIG), so a
 * test killed by its timeout leaves nothing running. Returns the pid in the
 * parent, 0 in the child. */
static inline pid_t tu_fork(void)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the parent died before prctl */
            _exit(3);
    }
    return pid;
}

/* Waits for pid (bounded by the test's timeout) and asserts that it exited
 * with status 0; `what` names the child in the message. */
static inline void tu_wait_ok(pid_t pid, const char *what)
{
    int ws = 0;
    pid_t got;
    do
        got = waitpid(pid, &ws, 0);
    while (got < 0 && errno == EINTR);
    ck_assert_msg(got == pid, "waitpid(%s): %s", what, strerror(errno));
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s: %s %d", what,
                  WIFEXITED(ws) ? "exited with status" : "killed by signal",
                  WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
}

/* Ends a failed test's children: SIGKILL (harmless on one already exited)
 * and reap, so none waits out its deadline. */
static inline void tu_kill_all(const pid_t *pids, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    for (unsigned i = 0; i < n; i++)
        waitpid(pids[i], NULL, 0);
}

#endif
