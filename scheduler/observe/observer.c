/* observer.c - watching another process's session (disco/observe.h).
 *
 * A session's control segment is a memfd named "disco-session". Its
 * process holds the fd, and /proc/PID/fd/N reopens it for anyone the
 * kernel lets look at that process (same user, or ptrace rights): the same
 * check `cat /proc/PID/environ` passes. The segment is mapped read-only,
 * its header checked as a worker checks it (disco__ctl_read recomputes the
 * layout from the geometry and refuses any other offset), and the status
 * region read as view.c reads it. Nothing is written into the session, and
 * the session has no way to see it is watched.
 *
 * The segment is another process's, so nothing in it is trusted:
 *  - it must be sealed against shrinking (disco_segment_attach_readonly
 *    refuses it otherwise), so that no truncation can fault the observer's
 *    mapping with SIGBUS (test_observer_survives_shrink);
 *  - the pids it names are shown, with their /proc figures, only when they
 *    are the session's: the controller is the observed process or holds
 *    the segment's memfd; a worker is the controller's child or holds the
 *    memfd. Any other pid is shown as 0, its figures unknown
 *    (test_observer_checks_pids). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disco/observe.h"
#include "disco/shm/segment.h"
#include "scheduler/observe/view.h"
#include "workers/core/ctl_layout.h"

#define SEG_NAME "/memfd:disco-session"

struct disco_observer {
    int pid;
    disco_segment_t seg;
    struct disco__view_src src;
    long ticks_per_s; /* sysconf(_SC_CLK_TCK), for /proc CPU times */
    dev_t seg_dev;    /* the segment's memfd, to know its holders */
    ino_t seg_ino;
};

/* Whether /proc/pid/fd/name is a session's control segment (by its name;
 * the header is checked after mapping). */
static bool is_session_fd(int pid, const char *name)
{
    char path[320], target[256];
    snprintf(path, sizeof path, "/proc/%d/fd/%s", pid, name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    return strncmp(target, SEG_NAME, strlen(SEG_NAME)) == 0;
}

static int by_number(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The fd numbers of pid's session segments, in fd order, into fds[cap];
 * *n_out how many there are (may exceed cap). */
static disco_status_t list_sessions(int pid, int *fds, int cap, int *n_out)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return disco_set_error(errno == ENOENT ? DISCO_E_INVAL : DISCO_E_SYS, "process %d: %s: %s",
                               pid, path, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !is_session_fd(pid, e->d_name))
            continue;
        if (n < cap)
            fds[n] = atoi(e->d_name);
        n++;
    }
    closedir(d);
    qsort(fds, (size_t)(n < cap ? n : cap), sizeof *fds, by_number);
    *n_out = n;
    return DISCO_OK;
}

disco_status_t disco_observer_open(int pid, int index, int *count_out, disco_observer_t **obs_out)
{
    enum { MAX_SESSIONS = 64 };
    int fds[MAX_SESSIONS], n = 0;
    if (pid <= 0 || index < 0)
        return disco_set_error(DISCO_E_INVAL, "observer: pid %d, session %d", pid, index);
    disco_status_t st = list_sessions(pid, fds, MAX_SESSIONS, &n);
    if (st != DISCO_OK)
        return st;
    if (count_out != NULL)
        *count_out = n;
    if (n == 0)
        return disco_set_error(DISCO_E_INVAL, "process %d holds no disco session", pid);
    if (index >= n || index >= MAX_SESSIONS)
        return disco_set_error(DISCO_E_INVAL, "process %d holds %d session%s; no session %d", pid,
                               n, n == 1 ? "" : "s", index);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fds[index]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return disco_set_error(DISCO_E_SYS, "process %d: open %s: %s (same user only)", pid, path,
                               strerror(errno));
    disco_observer_t *o = calloc(1, sizeof *o);
    if (o == NULL) {
        close(fd);
        return disco_set_error(DISCO_E_NOMEM, "observer");
    }
    o->pid = pid;
    o->ticks_per_s = sysconf(_SC_CLK_TCK);
    st = disco_segment_attach_readonly(fd, &o->seg);
    close(fd);
    struct stat sb;
    if (st == DISCO_OK && fstat(o->seg.fd, &sb) != 0)
        st = disco_set_error(DISCO_E_SYS, "fstat: %s", strerror(errno));
    else if (st == DISCO_OK) {
        o->seg_dev = sb.st_dev;
        o->seg_ino = sb.st_ino;
    }
    struct disco__ctl_layout lay;
    if (st == DISCO_OK)
        st = disco__ctl_read(disco_segment_data(&o->seg), disco_segment_data_size(&o->seg), &lay);
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        disco_observer_close(o);
        return disco_set_error(st, "process %d, session %d: %s", pid, index, why);
    }
    const char *base = disco_segment_data(&o->seg);
    o->src = (struct disco__view_src){
        .ctl = (const struct disco__ctl *)base,
        .stat = (const struct disco__stat_hdr *)(base + lay.r[DISCO_CTL_STATUS].off),
        .world = (int)lay.geom.world,
        .tracing = lay.geom.trace};
    if (o->src.stat->magic != DISCO_STAT_MAGIC || o->src.stat->world != lay.geom.world) {
        disco_observer_close(o);
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "process %d, session %d: the status region is not formatted", pid,
                               index);
    }
    *obs_out = o;
    return DISCO_OK;
}

/* Process pid's CPU seconds (user + system) from /proc/pid/stat into
 * *cpu_s (-1 when it cannot be read: ended, or not ours to read) and its
 * parent into *ppid (0 when unknown); false when the process is gone or a
 * zombie (it has ended, reaped or not). */
static bool proc_stat(int pid, long ticks_per_s, double *cpu_s, int *ppid)
{
    char path[64], buf[1024];
    *cpu_s = -1.0;
    *ppid = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return errno != ENOENT && errno != ESRCH;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: the
     * fields after it start after its last ')'. */
    char *p = strrchr(buf, ')');
    char state;
    int parent;
    unsigned long long utime, stime;
    if (p == NULL || sscanf(p + 1, " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state,
                            &parent, &utime, &stime) != 4)
        return true;
    *ppid = parent;
    if (ticks_per_s > 0)
        *cpu_s = (double)(utime + stime) / (double)ticks_per_s;
    return state != 'Z' && state != 'X';
}

/* Whether process pid holds the observed segment's memfd open. */
static bool holds_segment(const disco_observer_t *o, int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char fdpath[320];
        struct stat sb;
        if (e->d_name[0] == '.')
            continue;
        snprintf(fdpath, sizeof fdpath, "/proc/%d/fd/%s", pid, e->d_name);
        found = stat(fdpath, &sb) == 0 && sb.st_dev == o->seg_dev && sb.st_ino == o->seg_ino;
    }
    closedir(d);
    return found;
}

disco_status_t disco_observer_read(disco_observer_t *o, disco_session_view_t *view_out)
{
    if (o == NULL || view_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_observer_read: NULL argument");
    disco_session_view_t v;
    disco_status_t st = disco__view_take(&o->src, &v);
    if (st != DISCO_OK)
        return st;
    /* The controller named by the segment: the observed process itself, or
     * one that holds the segment (else it is nobody's to show). */
    if (v.pid != o->pid && (v.pid <= 0 || !holds_segment(o, v.pid)))
        v.pid = 0;
    for (int i = 0; i < v.world; i++) {
        disco_worker_view_t *w = &v.workers[i];
        if (w->pid <= 0)
            continue;
        int ppid;
        bool alive = proc_stat(w->pid, o->ticks_per_s, &w->cpu_s, &ppid);
        /* Worker 0 is the controller's thread; the others its children
         * (forked or spawned), or at least holders of the segment. */
        bool ours = i == 0 ? w->pid == v.pid && v.pid != 0
                           : (v.pid != 0 && ppid == v.pid) || holds_segment(o, w->pid);
        if (!ours)
            w->cpu_s = -1.0;
        /* A process that ended (a kill, a crash) wrote no word about it:
         * the kernel says it is gone (its number is shown, no figures of a
         * live process are). */
        if (!alive)
            w->state = DISCO_WORKER_EXITED;
        else if (!ours)
            w->pid = 0;
    }
    *view_out = v;
    return DISCO_OK;
}

void disco_observer_close(disco_observer_t *o)
{
    if (o == NULL)
        return;
    disco_segment_close(&o->seg);
    free(o);
}
