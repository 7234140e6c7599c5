/* soak_check.c - the fault soak's checks around a round: recording a
 * failure, and after the round, that no process, fd, memfd mapping or
 * /dev/shm entry of it remains (soak_round.h). */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "disco/shm/wait.h"
#include "tools/soak/soak_round.h"

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Mappings of memfd segments in this process. */
static int count_memfd_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, "/memfd:") != NULL;
    fclose(f);
    return n;
}

/* Whether a /dev/shm name is disco's: it says "disco" (any case), as the
 * suites' check does (tests/testutil.h, tu_dev_shm_disco_entries). */
static bool disco_named(const char *name)
{
    return strcasestr(name, "disco") != NULL;
}

int soak_shm_entries(const char *dir, char *name_out, size_t cap)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' || !disco_named(e->d_name))
            continue;
        if (n++ == 0 && name_out != NULL && cap > 0)
            snprintf(name_out, cap, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

leaks_t soak_leaks_now(void)
{
    leaks_t l = {count_dir("/proc/self/fd"), count_memfd_maps(), 0, disco_session_arenas_left(),
                 ""};
    l.shm = soak_shm_entries("/dev/shm", l.shm_name, sizeof l.shm_name);
    return l;
}

void soak_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int soak_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

void soak_fail(round_t *rd, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!rd->failed && rd->r->failure[0] == '\0')
        snprintf(rd->r->failure, sizeof rd->r->failure, "round %d (%s): %s", rd->index, rd->what,
                 msg);
    fprintf(rd->o->log != NULL ? rd->o->log : stderr, "round %d (%s): FAIL: %s\n", rd->index,
            rd->what, msg);
    rd->failed = true;
}

/* This process's children, live or not yet reaped (at most cap). */
static int list_children(pid_t *out, int cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "r");
    int n = 0, pid;
    if (f == NULL)
        return 0;
    while (n < cap && fscanf(f, "%d", &pid) == 1)
        out[n++] = pid;
    fclose(f);
    return n;
}

static void comm_of(pid_t pid, char *comm, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "r");
    snprintf(comm, cap, "?");
    if (f != NULL) {
        if (fgets(comm, (int)cap, f) != NULL)
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
}

/* Whether process pid (fd: its pidfd, or -1 where pidfd_open is missing,
 * as under valgrind) ended before deadline. Without a pidfd it polls
 * waitpid, which works because the soak is the orphans' subreaper. */
bool soak_wait_gone(pid_t pid, int fd, int64_t deadline)
{
    if (fd >= 0) {
        int64_t left = (deadline - disco_now_ns()) / 1000000;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        return poll(&pf, 1, left > 0 ? (int)left : 0) == 1;
    }
    for (;;) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
            return errno == ECHILD && kill(pid, 0) != 0; /* not ours: gone if it is gone */
        if (si.si_pid == pid)
            return true;
        if (disco_now_ns() >= deadline)
            return false;
        soak_sleep_us(100);
    }
}

/* After a round no process of it may live on. The session reaps its
 * workers, so a worker still our child is a failure. Any other child is an
 * orphan that came to the soak as subreaper (under ASan, LeakSanitizer's
 * tracer of a worker killed at exit): it must end within the bound, and is
 * then reaped and counted. */
static void check_processes(round_t *rd, const int *workers, int nworkers)
{
    pid_t kids[64];
    int64_t deadline = disco_now_ns() + (int64_t)rd->o->bound_ms * 1000000;
    for (int n; (n = list_children(kids, 64)) > 0;) {
        for (int i = 0; i < n; i++) {
            char comm[32];
            comm_of(kids[i], comm, sizeof comm);
            bool worker = false;
            for (int j = 0; j < nworkers; j++)
                worker |= workers[j] == kids[i];
            int fd = soak_pidfd_open(kids[i]);
            if (worker) {
                soak_fail(rd, "worker pid %d (%s) was not reaped by the session", (int)kids[i],
                          comm);
            } else if (!soak_wait_gone(kids[i], fd, deadline)) {
                soak_fail(rd, "process %d (%s) outlived the round by %u ms", (int)kids[i], comm,
                          rd->o->bound_ms);
                kill(kids[i], SIGKILL);
            } else {
                rd->r->orphans++;
            }
            if (fd >= 0)
                close(fd);
            waitpid(kids[i], NULL, 0);
        }
    }
}

/* After a round: nothing of it may remain. */
void soak_check_clean(round_t *rd, const leaks_t *before, const int *workers, int nworkers)
{
    check_processes(rd, workers, nworkers);
    leaks_t now = soak_leaks_now();
    /* An arena left to process exit keeps its fds and mappings (a free
     * would wait for ever for its stream): counted, not a leak. */
    if (now.arenas_left != before->arenas_left)
        rd->r->arenas_left += now.arenas_left - before->arenas_left;
    else if (now.fds != before->fds)
        soak_fail(rd, "%d fds open before, %d after", before->fds, now.fds);
    if (now.arenas_left == before->arenas_left && now.maps != before->maps)
        soak_fail(rd, "%d memfd mappings before, %d after", before->maps, now.maps);
    if (now.shm != before->shm)
        soak_fail(rd, "%d disco entries in /dev/shm before, %d after (one: %s)", before->shm,
                  now.shm, now.shm > 0 ? now.shm_name : before->shm_name);
}
