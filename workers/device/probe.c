/* probe.c - counting devices without touching them in this process (see
 * disco_device_probe in disco/device.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/device.h"

/* What the child sends back. */
struct answer {
    int32_t status;
    int32_t count;
    char msg[256];
};

/* Reads exactly n bytes (a short read: the child died first). */
static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

disco_status_t disco_device_probe(DLDeviceType type, int *count_out)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return disco_set_error(DISCO_E_SYS, "disco_device_probe: pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return disco_set_error(DISCO_E_SYS, "disco_device_probe: fork: %s", strerror(e));
    }
    if (pid == 0) { /* the child: one count, one answer, and out without atexit work */
        struct answer a = {0};
        int n = 0;
        a.status = disco_device_count(type, &n);
        a.count = a.status == DISCO_OK ? n : 0;
        if (a.status != DISCO_OK)
            snprintf(a.msg, sizeof a.msg, "%s", disco_last_error());
        ssize_t w = write(fds[1], &a, sizeof a);
        _exit(w == (ssize_t)sizeof a ? 0 : 1);
    }
    close(fds[1]);
    struct answer a;
    bool got = read_all(fds[0], &a, sizeof a);
    close(fds[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (!got)
        return disco_set_error(DISCO_E_SYS, "disco_device_probe: the probe (pid %d) gave no answer",
                               (int)pid);
    a.msg[sizeof a.msg - 1] = '\0';
    if (a.status != DISCO_OK)
        return disco_set_error((disco_status_t)a.status, "%s", a.msg);
    *count_out = a.count;
    return DISCO_OK;
}
