/* lifecycle.c - starting, watching, stopping and reaping worker processes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/segment_fork.h"
#include "workers/core/inherit.h"
#include "scheduler/session/session_impl.h"

extern char **environ;

static int pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Where the disco-worker program is: the config, $DISCO_WORKER, or beside
 * the running program. */
static void worker_path(const struct disco_session *s, char *out, size_t cap)
{
    const char *p = s->cfg.worker_path ? s->cfg.worker_path : getenv("DISCO_WORKER");
    if (p != NULL) {
        snprintf(out, cap, "%s", p);
        return;
    }
    char self[3800];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        slash[1] = '\0';
    snprintf(out, cap, "%sdisco-worker", slash != NULL ? self : "");
}

/* The fds a spawned worker gets, at fixed numbers: the segment, and the
 * command and reply pipes (pipe transport). */
enum { SPAWN_SEG_FD = 3, SPAWN_CMD_FD = 4, SPAWN_REPLY_FD = 5, SPAWN_NFDS = 6 };

static disco_status_t spawn_one(struct disco_session *s, int i, int cmd_r, int reply_w)
{
    char path[4096], a_id[16], a_cmd[16], a_rep[16], a_fd[16];
    worker_path(s, path, sizeof path);
    if (access(path, X_OK) != 0)
        return disco_set_error(DISCO_E_INVAL,
                               "worker program %s: %s (set worker_path or "
                               "$DISCO_WORKER)",
                               path, strerror(errno));
    /* Only the worker's own fds cross exec, nothing else of the
     * controller's (the application's fds that lack close-on-exec, other
     * sessions'): the child moves its fds onto 3 (and 4, 5 with pipes) and
     * closes every fd above them before exec. The sources are duplicated
     * first, close-on-exec and above 5, so that moving one onto 3..5 never
     * overwrites another that is still to be moved. */
    int src[3] = {s->seg.fd, cmd_r, reply_w}, dup[3] = {-1, -1, -1};
    int nfd = cmd_r >= 0 ? 3 : 1;
    disco_status_t st = DISCO_OK;
    for (int k = 0; k < nfd && st == DISCO_OK; k++)
        if ((dup[k] = fcntl(src[k], F_DUPFD_CLOEXEC, SPAWN_NFDS)) < 0)
            st = disco_set_error(DISCO_E_SYS, "dup fd %d for worker %d: %s", src[k], i,
                                 strerror(errno));
    snprintf(a_fd, sizeof a_fd, "%d", SPAWN_SEG_FD);
    snprintf(a_id, sizeof a_id, "%d", i);
    snprintf(a_cmd, sizeof a_cmd, "%d", cmd_r >= 0 ? SPAWN_CMD_FD : -1);
    snprintf(a_rep, sizeof a_rep, "%d", cmd_r >= 0 ? SPAWN_REPLY_FD : -1);
    char *argv[] = {path,  "--disco-fd",
                    a_fd,  "--disco-worker",
                    a_id,  "--disco-cmd-fd",
                    a_cmd, "--disco-reply-fd",
                    a_rep, NULL,
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* dup2 onto another number leaves close-on-exec clear on the copy. */
    for (int k = 0; k < nfd && st == DISCO_OK; k++)
        posix_spawn_file_actions_adddup2(&fa, dup[k], SPAWN_SEG_FD + k);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&fa, SPAWN_SEG_FD + nfd);
#else
    /* No closefrom action before glibc 2.34: the worker closes the rest
     * itself before anything else (disco_worker_main). */
    argv[9] = "--disco-close-others";
#endif
    int err = st == DISCO_OK ? posix_spawn(&s->pid[i], path, &fa, NULL, argv, environ) : 0;
    posix_spawn_file_actions_destroy(&fa);
    for (int k = 0; k < nfd; k++)
        if (dup[k] >= 0)
            close(dup[k]);
    if (st == DISCO_OK && err != 0)
        st = disco_set_error(DISCO_E_SYS, "spawn %s: %s", path, strerror(err));
    return st;
}

static disco_status_t fork_one(struct disco_session *s, int i, int cmd_r, int reply_w)
{
    pid_t pid = fork();
    if (pid < 0)
        return disco_set_error(DISCO_E_SYS, "fork worker %d: %s", i, strerror(errno));
    if (pid == 0) {
        /* Child: keep only what this worker needs. Every other segment of
         * the controller (earlier sessions', RPC transports') is unmapped,
         * so closing those frees their memory even while this worker lives;
         * every fd but 0-2 and its own pipe ends is closed: the controller's
         * ends of every pipe (so end of file reaches whoever should see it),
         * the application's files and sockets, other sessions' fds. This
         * session's mapping stays (at the same address) and its memfd fd is
         * not needed. Unmapping rather than MADV_DONTFORK at creation: the
         * application's own forks keep the sessions they may read from. */
        disco__segment_unmap_others(&s->seg);
        int keep[2] = {cmd_r, reply_w};
        disco__close_fds_except(keep, 2);
        _exit(disco__worker_process(disco_segment_data(&s->seg), disco_segment_data_size(&s->seg),
                                    i, cmd_r, reply_w));
    }
    s->pid[i] = pid;
    return DISCO_OK;
}

disco_status_t disco__procs_start(struct disco_session *s)
{
    disco_status_t st = DISCO_OK;
    for (int i = 1; i < s->world; i++) {
        int cmd[2] = {-1, -1}, rep[2] = {-1, -1};
        if (s->chan.kind == DISCO_TRANSPORT_PIPE) {
            if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0) {
                st = disco_set_error(DISCO_E_SYS, "pipe: %s", strerror(errno));
                break;
            }
            fcntl(cmd[1], F_SETFL, O_NONBLOCK);
            s->cmd_fd[i] = cmd[1];
            s->reply_fd[i] = rep[0];
        }
        st = s->cfg.launch == DISCO_LAUNCH_SPAWN ? spawn_one(s, i, cmd[0], rep[1])
                                                 : fork_one(s, i, cmd[0], rep[1]);
        if (cmd[0] >= 0) {
            close(cmd[0]);
            close(rep[1]);
        }
        if (st != DISCO_OK)
            break;
        s->pidfd[i] = pidfd_open(s->pid[i]);
        /* Without pidfds (kernels before 5.3, valgrind) the workers, our
         * children, are watched with waitpid(WNOHANG) instead. */
        if (s->pidfd[i] < 0 && errno != ENOSYS) {
            st =
                disco_set_error(DISCO_E_SYS, "pidfd_open(%d): %s", (int)s->pid[i], strerror(errno));
            break;
        }
        if (s->chan.kind == DISCO_TRANSPORT_RING)
            disco_ring_set_reader_pid(&s->chan.cmd, (uint32_t)(i - 1), s->pid[i]);
    }
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        disco__procs_stop(s, 0);
        disco_set_error(st, "%s", why);
    }
    return st;
}

static void describe_exit(const struct disco_session *s, int i, char *out, size_t cap)
{
    int ws = s->wstatus[i];
    if (WIFSIGNALED(ws))
        snprintf(out, cap, "worker %d (pid %d) was killed by signal %d (%s)", i, (int)s->pid[i],
                 WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else if (WIFEXITED(ws))
        snprintf(out, cap, "worker %d (pid %d) exited with code %d", i, (int)s->pid[i],
                 WEXITSTATUS(ws));
    else
        snprintf(out, cap, "worker %d (pid %d) ended (status unknown)", i, (int)s->pid[i]);
}

/* Reaps worker i if it has ended; true if it has. */
static bool reap(struct disco_session *s, int i, int flags)
{
    if (s->reaped[i] || s->pid[i] <= 0)
        return true;
    int ws = 0;
    pid_t r;
    do
        r = waitpid(s->pid[i], &ws, flags);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return false;
    s->wstatus[i] = r > 0 ? ws : -1; /* ECHILD: reaped by someone else */
    s->reaped[i] = true;
    return true;
}

disco_status_t disco__procs_check(struct disco_session *s)
{
    struct pollfd pf[DISCO_MAX_WORKERS];
    int n = 0, polled = 0;
    bool no_pidfd = false;
    for (int i = 1; i < s->world; i++) {
        pf[n++] = (struct pollfd){.fd = s->reaped[i] ? -1 : s->pidfd[i], .events = POLLIN};
        no_pidfd = no_pidfd || (!s->reaped[i] && s->pidfd[i] < 0);
    }
    if (n != 0)
        polled = poll(pf, (nfds_t)n, 0);
    if (polled <= 0 && !no_pidfd)
        return DISCO_OK;
    for (int i = 1; i < s->world; i++) {
        bool ended = s->pidfd[i] >= 0 ? (pf[i - 1].revents & POLLIN) != 0 : !s->reaped[i];
        if (!ended || !reap(s, i, WNOHANG))
            continue;
        char what[1024];
        describe_exit(s, i, what, sizeof what);
        struct disco__errbox *b = &s->errbox[i];
        /* Acquire: pairs with the worker's release; its last words, if any. */
        if (atomic_load_explicit(&b->full, memory_order_acquire)) {
            size_t n = strlen(what);
            snprintf(what + n, sizeof what - n, " after %s: %s", b->func, b->msg);
        }
        if (s->chan.kind == DISCO_TRANSPORT_RING)
            disco_ring_mark_dead(&s->chan.cmd, (uint32_t)(i - 1));
        return disco__session_break(s, DISCO_E_WORKER_DIED, "%s", what);
    }
    return DISCO_OK;
}

disco_status_t disco__procs_abandon(void *p, disco_status_t st, const int *late, int nlate,
                                    const char *what)
{
    struct disco_session *s = p;
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    char who[256] = "";
    size_t used = 0;
    for (int i = 0; i < nlate; i++) {
        if (late[i] < 1 || late[i] >= s->world)
            continue;
        disco__procs_kill(s, late[i]);
        int n = snprintf(who + used, sizeof who - used, "%s%d", used ? ", " : "", late[i]);
        used += n > 0 && (size_t)n < sizeof who - used ? (size_t)n : 0;
    }
    if (st == DISCO_E_TIMEOUT && used != 0)
        return disco__session_break(s, DISCO_E_TIMEOUT,
                                    "%s: worker %s did not reach the collective within %u ms; "
                                    "killed, so that it cannot touch worker 0's buffers",
                                    what, who, s->cfg.call_timeout_ms);
    return disco__session_break(s, st, "%s given up by worker 0: %s", what, why);
}

#define KILL_REAP_MS  5000  /* how long a kill waits for its worker to end */
#define CLOSE_REAP_MS 60000 /* and how long close waits more */

void disco__procs_kill(struct disco_session *s, int i)
{
    if (s->reaped[i] || s->pid[i] <= 0)
        return;
    kill(s->pid[i], SIGKILL);
    /* A killed process runs no more user code, but it ends only when it is
     * scheduled again: one in a frozen cgroup (v1 freezer) waits for the
     * thaw. So the wait for it is bounded, like every other wait; one that
     * has not ended by then is reaped later (procs_check, procs_stop). */
    if (s->pidfd[i] >= 0) {
        struct pollfd pf = {.fd = s->pidfd[i], .events = POLLIN};
        int n;
        while ((n = poll(&pf, 1, KILL_REAP_MS)) < 0 && errno == EINTR)
            ;
        /* Ended: reap it, waiting if a tracer (LeakSanitizer's, under ASan)
         * still holds the zombie for a moment. Not ended: leave it. */
        reap(s, i, n > 0 ? 0 : WNOHANG);
    } else {
        reap(s, i, 0); /* no pidfd (old kernels, valgrind): as before */
    }
    if (s->chan.kind == DISCO_TRANSPORT_RING)
        disco_ring_mark_dead(&s->chan.cmd, (uint32_t)(i - 1));
}

void disco__procs_stop(struct disco_session *s, int grace_ms)
{
    int64_t deadline = disco_now_ns() + (int64_t)grace_ms * 1000000;
    for (int i = 1; i < s->world; i++) {
        if (s->pid[i] <= 0)
            continue;
        while (!reap(s, i, WNOHANG)) {
            int64_t left = (deadline - disco_now_ns()) / 1000000;
            if (left <= 0) {
                disco__procs_kill(s, i);
                /* Close leaves nothing behind: a killed worker slow to end
                 * (a sanitizer's exit-time scan holds it for seconds) is
                 * waited for longer, though not forever (a frozen one ends
                 * only at its thaw). */
                struct pollfd pf = {.fd = s->pidfd[i], .events = POLLIN};
                if (!s->reaped[i] && s->pidfd[i] >= 0 && poll(&pf, 1, CLOSE_REAP_MS) > 0)
                    reap(s, i, 0);
                break;
            }
            /* Without a pidfd, poll nothing for a millisecond and look again. */
            struct pollfd pf = {.fd = s->pidfd[i], .events = POLLIN};
            poll(&pf, s->pidfd[i] >= 0 ? 1 : 0, s->pidfd[i] >= 0 ? (int)left : 1);
        }
    }
    for (int i = 1; i < s->world; i++) {
        if (s->pidfd[i] >= 0)
            close(s->pidfd[i]);
        s->pidfd[i] = -1;
    }
}
