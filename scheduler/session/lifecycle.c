/* lifecycle.c - the process table (procs.h): starting, watching, stopping
 * and reaping worker processes. It reports deaths; the session decides what
 * they break. */
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
#include "workers/core/worker.h"
#include "scheduler/session/procs.h"

extern char **environ;

static int pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Where the disco-worker program is: the config, $DISCO_WORKER, or beside
 * the running program. */
static void worker_path(const struct disco__procs_launch *how, char *out, size_t cap)
{
    const char *p = how->worker_path ? how->worker_path : getenv("DISCO_WORKER");
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

static disco_status_t spawn_one(const struct disco__procs_launch *how, int i, int cmd_r,
                                int reply_w, pid_t *pid_out)
{
    char path[4096], a_id[16], a_cmd[16], a_rep[16], a_fd[16];
    worker_path(how, path, sizeof path);
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
    int src[3] = {how->seg->fd, cmd_r, reply_w}, dup[3] = {-1, -1, -1};
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
    int err = st == DISCO_OK ? posix_spawn(pid_out, path, &fa, NULL, argv, environ) : 0;
    posix_spawn_file_actions_destroy(&fa);
    for (int k = 0; k < nfd; k++)
        if (dup[k] >= 0)
            close(dup[k]);
    if (st == DISCO_OK && err != 0)
        st = disco_set_error(DISCO_E_SYS, "spawn %s: %s", path, strerror(err));
    return st;
}

static disco_status_t fork_one(const struct disco__procs_launch *how, int i, int cmd_r, int reply_w,
                               pid_t *pid_out)
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
        disco__segment_unmap_others(how->seg);
        int keep[2] = {cmd_r, reply_w};
        disco__close_fds_except(keep, 2);
        _exit(disco__worker_process(disco_segment_data(how->seg), disco_segment_data_size(how->seg),
                                    i, cmd_r, reply_w));
    }
    *pid_out = pid;
    return DISCO_OK;
}

disco_status_t disco__procs_init(struct disco__procs *p, int n)
{
    size_t k = (size_t)n;
    *p = (struct disco__procs){.n = n,
                               .pid = calloc(k, sizeof *p->pid),
                               .pidfd = malloc(k * sizeof *p->pidfd),
                               .wstatus = calloc(k, sizeof *p->wstatus),
                               .reaped = calloc(k, sizeof *p->reaped)};
    if (p->pid == NULL || p->pidfd == NULL || p->wstatus == NULL || p->reaped == NULL) {
        disco__procs_fini(p);
        return disco_set_error(DISCO_E_NOMEM, "process table of %d", n);
    }
    for (size_t i = 0; i < k; i++)
        p->pidfd[i] = -1;
    return DISCO_OK;
}

void disco__procs_fini(struct disco__procs *p)
{
    disco__threads_fini(p);
    free(p->pid);
    free(p->pidfd);
    free(p->wstatus);
    free(p->reaped);
    *p = (struct disco__procs){0};
}

disco_status_t disco__procs_adopt(struct disco__procs *p, int i, pid_t pid)
{
    p->pid[i] = pid;
    p->reaped[i] = false; /* a new process in an entry whose last one was reaped (recovery) */
    p->wstatus[i] = 0;
    p->pidfd[i] = pidfd_open(pid);
    /* Without pidfds (kernels before 5.3, valgrind) the workers, our
     * children, are watched with waitpid(WNOHANG) instead. */
    if (p->pidfd[i] < 0 && errno != ENOSYS)
        return disco_set_error(DISCO_E_SYS, "pidfd_open(%d): %s", (int)pid, strerror(errno));
    return DISCO_OK;
}

disco_status_t disco__procs_start(struct disco__procs *p, const struct disco__procs_launch *how)
{
    if (how->launch == DISCO_LAUNCH_THREAD)
        return disco__threads_start(p, how);
    disco_status_t st = DISCO_OK;
    for (int i = 1; i < p->n; i++) {
        int cmd[2] = {-1, -1}, rep[2] = {-1, -1};
        if (how->pipes) {
            if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0) {
                st = disco_set_error(DISCO_E_SYS, "pipe: %s", strerror(errno));
                break;
            }
            fcntl(cmd[1], F_SETFL, O_NONBLOCK);
            how->cmd_fd[i] = cmd[1];
            how->reply_fd[i] = rep[0];
        }
        pid_t pid = 0;
        st = how->launch == DISCO_LAUNCH_SPAWN ? spawn_one(how, i, cmd[0], rep[1], &pid)
                                               : fork_one(how, i, cmd[0], rep[1], &pid);
        if (cmd[0] >= 0) {
            close(cmd[0]);
            close(rep[1]);
        }
        if (st != DISCO_OK || (st = disco__procs_adopt(p, i, pid)) != DISCO_OK)
            break;
    }
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        disco__procs_stop(p, 0);
        disco_set_error(st, "%s", why);
    }
    return st;
}

static void describe_exit(const struct disco__procs *p, int i, char *out, size_t cap)
{
    int ws = p->wstatus[i];
    if (WIFSIGNALED(ws))
        snprintf(out, cap, "worker %d (pid %d) was killed by signal %d (%s)", i + p->id_base,
                 (int)p->pid[i], WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else if (WIFEXITED(ws))
        snprintf(out, cap, "worker %d (pid %d) exited with code %d", i + p->id_base, (int)p->pid[i],
                 WEXITSTATUS(ws));
    else
        snprintf(out, cap, "worker %d (pid %d) ended (status unknown)", i + p->id_base,
                 (int)p->pid[i]);
}

/* Reaps worker i if it has ended; true if it has. */
static bool reap(struct disco__procs *p, int i, int flags)
{
    if (p->reaped[i] || p->pid[i] <= 0)
        return true;
    int ws = 0;
    pid_t r;
    do
        r = waitpid(p->pid[i], &ws, flags);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return false;
    p->wstatus[i] = r > 0 ? ws : -1; /* ECHILD: reaped by someone else */
    p->reaped[i] = true;
    return true;
}

disco_status_t disco__procs_check(struct disco__procs *p, struct disco__procs_exit *dead_out)
{
    if (p->threads)
        return disco__threads_check(p, dead_out);
    struct pollfd pf[DISCO_MAX_WORKERS];
    int n = 0, polled = 0;
    bool no_pidfd = false;
    for (int i = 1; i < p->n; i++) {
        pf[n++] = (struct pollfd){.fd = p->reaped[i] ? -1 : p->pidfd[i], .events = POLLIN};
        no_pidfd = no_pidfd || (!p->reaped[i] && p->pidfd[i] < 0);
    }
    if (n != 0)
        polled = poll(pf, (nfds_t)n, 0);
    if (polled <= 0 && !no_pidfd)
        return DISCO_OK;
    for (int i = 1; i < p->n; i++) {
        bool ended = p->pidfd[i] >= 0 ? (pf[i - 1].revents & POLLIN) != 0 : !p->reaped[i];
        if (!ended || !reap(p, i, WNOHANG))
            continue;
        dead_out->worker = i;
        dead_out->pid = p->pid[i];
        dead_out->wstatus = p->wstatus[i];
        describe_exit(p, i, dead_out->what, sizeof dead_out->what);
        return DISCO_E_WORKER_DIED;
    }
    return DISCO_OK;
}

#define KILL_REAP_MS  5000  /* how long a kill waits for its worker to end */
#define CLOSE_REAP_MS 60000 /* and how long close waits more */

void disco__procs_kill(struct disco__procs *p, int i)
{
    if (p->threads) {
        disco__threads_kill(p, i);
        return;
    }
    if (p->reaped[i] || p->pid[i] <= 0)
        return;
    kill(p->pid[i], SIGKILL);
    /* A killed process runs no more user code, but it ends only when it is
     * scheduled again: one in a frozen cgroup (v1 freezer) waits for the
     * thaw. So the wait for it is bounded, like every other wait; one that
     * has not ended by then is reaped later (procs_check, procs_stop). */
    if (p->pidfd[i] >= 0) {
        struct pollfd pf = {.fd = p->pidfd[i], .events = POLLIN};
        int n;
        while ((n = poll(&pf, 1, KILL_REAP_MS)) < 0 && errno == EINTR)
            ;
        /* Ended: reap it, waiting if a tracer (LeakSanitizer's, under ASan)
         * still holds the zombie for a moment. Not ended: leave it. */
        reap(p, i, n > 0 ? 0 : WNOHANG);
    } else {
        reap(p, i, 0); /* no pidfd (old kernels, valgrind) */
    }
}

void disco__procs_kill_all(struct disco__procs *p)
{
    if (p->threads) {
        for (int i = 1; i < p->n; i++)
            disco__threads_kill(p, i);
        return;
    }
    /* Every signal first, so that the processes end (their memory torn
     * down) side by side rather than one after another. */
    for (int i = 1; i < p->n; i++)
        if (!p->reaped[i] && p->pid[i] > 0)
            kill(p->pid[i], SIGKILL);
    disco__procs_stop(p, 0);
}

void disco__procs_stop(struct disco__procs *p, int grace_ms)
{
    if (p->threads) {
        disco__threads_stop(p, grace_ms);
        return;
    }
    int64_t deadline = disco_now_ns() + (int64_t)grace_ms * 1000000;
    for (int i = 1; i < p->n; i++) {
        if (p->pid[i] <= 0)
            continue;
        while (!reap(p, i, WNOHANG)) {
            int64_t left = (deadline - disco_now_ns()) / 1000000;
            if (left <= 0) {
                disco__procs_kill(p, i);
                /* Close leaves nothing behind: a killed worker slow to end
                 * (a sanitizer's exit-time scan holds it for seconds) is
                 * waited for longer, though not forever (a frozen one ends
                 * only at its thaw). */
                struct pollfd pf = {.fd = p->pidfd[i], .events = POLLIN};
                if (!p->reaped[i] && p->pidfd[i] >= 0 && poll(&pf, 1, CLOSE_REAP_MS) > 0)
                    reap(p, i, 0);
                break;
            }
            /* Without a pidfd, poll nothing for a millisecond and look again. */
            struct pollfd pf = {.fd = p->pidfd[i], .events = POLLIN};
            poll(&pf, p->pidfd[i] >= 0 ? 1 : 0, p->pidfd[i] >= 0 ? (int)left : 1);
        }
    }
    for (int i = 1; i < p->n; i++) {
        if (p->pidfd[i] >= 0)
            close(p->pidfd[i]);
        p->pidfd[i] = -1;
    }
}
