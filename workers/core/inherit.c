/* inherit.c - closing what a worker process does not need (see inherit.h). */
#include "workers/core/inherit.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Closes [lo, hi] (hi may be UINT_MAX). Returns true if done. */
static bool close_span(unsigned lo, unsigned hi)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, lo, hi, 0) == 0)
        return true;
#else
    (void)lo;
    (void)hi;
#endif
    return false;
}

static bool kept(unsigned fd, const int *keep, int n)
{
    if (fd <= 2)
        return true;
    for (int i = 0; i < n; i++)
        if (keep[i] >= 0 && (unsigned)keep[i] == fd)
            return true;
    return false;
}

/* The kernel's record layout for getdents64 (glibc declares no wrapper
 * before 2.30 and opendir would allocate). */
struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Without close_range: the fds that exist, from /proc/self/fd. */
int disco__close_fds_listed(const int *keep, int n)
{
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    /* Closing while reading is safe for this directory: each entry read
     * names an fd that is then closed; a closed fd cannot reappear. Read it
     * again until a pass closes nothing, so entries skipped by the
     * directory's offsets moving are caught. */
    bool closed = true;
    while (closed) {
        closed = false;
        lseek(dir, 0, SEEK_SET);
        char buf[4096];
        long got;
        while ((got = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
            for (long off = 0; off < got;) {
                const struct linux_dirent64 *d = (const struct linux_dirent64 *)(buf + off);
                off += d->d_reclen;
                unsigned fd = 0;
                const char *c = d->d_name;
                if (*c < '0' || *c > '9')
                    continue;
                for (; *c >= '0' && *c <= '9'; c++)
                    fd = fd * 10 + (unsigned)(*c - '0');
                if ((int)fd != dir && !kept(fd, keep, n) && close((int)fd) == 0)
                    closed = true;
            }
        }
    }
    close(dir);
    return 0;
}

int disco__close_fds_except(int *keep, int n)
{
    /* Insertion sort (no allocation, a handful of entries). */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && keep[j] < keep[j - 1]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    unsigned lo = 3;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        if (keep[i] < (int)lo)
            continue; /* negative, 0-2, or a duplicate */
        if ((unsigned)keep[i] > lo)
            ok = close_span(lo, (unsigned)keep[i] - 1);
        lo = (unsigned)keep[i] + 1;
    }
    if (ok && close_span(lo, UINT_MAX))
        return 0;
    if (disco__close_fds_listed(keep, n) == 0)
        return 0;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return -1;
    for (unsigned fd = 3; fd < rl.rlim_cur && fd < (1u << 20); fd++)
        if (!kept(fd, keep, n))
            close((int)fd);
    return 0;
}
