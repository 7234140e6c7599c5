/* sim_dev.c - the simulated GPU's configuration (device count, memory
 * limit), the per-thread current device, sticky device faults, the fork
 * rule, taking another process's file descriptor, and whether a process
 * runs (see sim.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "workers/device/sim.h"

#define SIM_DEFAULT_MB 4096

_Static_assert(DISCO_SIM_SEALS == (F_SEAL_SHRINK | F_SEAL_GROW), "the seals' numbers");

/* Configuration: -1 until read. S0: relaxed is enough, a count is a plain
 * value read once per process; racing first readers read the same
 * environment and store the same number (CAS keeps the first). */
static _Atomic int g_count = -1;
static _Atomic long g_limit_mb = -1;

disco_status_t disco_device_sim_set_count(int n)
{
    if (n < 0 || n > DISCO_SIM_MAX_DEVICES)
        return disco_set_error(DISCO_E_INVAL, "disco_device_sim_set_count: %d (0..%d)", n,
                               DISCO_SIM_MAX_DEVICES);
    atomic_store_explicit(&g_count, n, memory_order_relaxed); /* S0 */
    return DISCO_OK;
}

int disco__sim_count(void)
{
    int n = atomic_load_explicit(&g_count, memory_order_relaxed); /* S0 */
    if (n >= 0)
        return n;
    const char *s = getenv("DISCO_SIM_GPUS");
    char *end = NULL;
    long v = s != NULL ? strtol(s, &end, 10) : 0;
    if (s == NULL || end == s || *end != '\0' || v < 0)
        v = 0;
    if (v > DISCO_SIM_MAX_DEVICES)
        v = DISCO_SIM_MAX_DEVICES;
    int want = -1;
    atomic_compare_exchange_strong_explicit(&g_count, &want, (int)v, memory_order_relaxed,
                                            memory_order_relaxed); /* S0 */
    return atomic_load_explicit(&g_count, memory_order_relaxed);   /* S0 */
}

size_t disco__sim_mem_limit(void)
{
    long mb = atomic_load_explicit(&g_limit_mb, memory_order_relaxed); /* S0 */
    if (mb < 0) {
        const char *s = getenv("DISCO_SIM_MEM_MB");
        char *end = NULL;
        mb = s != NULL ? strtol(s, &end, 10) : 0;
        if (s == NULL || end == s || *end != '\0' || mb <= 0)
            mb = SIM_DEFAULT_MB;
        atomic_store_explicit(&g_limit_mb, mb, memory_order_relaxed); /* S0 */
    }
    return (size_t)mb << 20;
}

/* ---- the current device (cudaSetDevice) ------------------------------------ */

/* Per thread, as CUDA's; 0 until set, as CUDA's default device. A forked
 * child's thread keeps its parent thread's (as a thread-local does). */
static _Thread_local int t_current;

int disco__sim_current(void)
{
    return t_current;
}

void disco__sim_make_current(int device_id)
{
    t_current = device_id;
}

/* ---- sticky faults (cudaErrorIllegalAddress) ------------------------------- */

/* The fault of each device in this process (empty: none). A process other
 * than g_fault_pid (a forked child) has none. Under g_fault_lock. */
static pthread_mutex_t g_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_fault_pid;
static char g_fault[DISCO_SIM_MAX_DEVICES][256];

disco_status_t disco__sim_fault(int device_id, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (device_id >= 0 && device_id < DISCO_SIM_MAX_DEVICES) {
        pthread_mutex_lock(&g_fault_lock);
        if (g_fault_pid != getpid()) {
            memset(g_fault, 0, sizeof g_fault);
            g_fault_pid = getpid();
        }
        if (g_fault[device_id][0] == '\0')
            snprintf(g_fault[device_id], sizeof g_fault[device_id], "%s", msg);
        pthread_mutex_unlock(&g_fault_lock);
    }
    return disco_set_error(DISCO_E_SYS, "%s", msg);
}

/* The sticky fault of device_id in this process, as fn's error; DISCO_OK
 * when there is none. */
static disco_status_t sticky(int device_id, const char *fn)
{
    disco_status_t st = DISCO_OK;
    pthread_mutex_lock(&g_fault_lock);
    if (g_fault_pid == getpid() && g_fault[device_id][0] != '\0')
        st = disco_set_error(DISCO_E_SYS,
                             "%s: sim:%d is unusable in this process after an earlier "
                             "fault (sticky, as on a GPU): %s",
                             fn, device_id, g_fault[device_id]);
    pthread_mutex_unlock(&g_fault_lock);
    return st;
}

/* ---- the fork rule ---------------------------------------------------------- */

/* The process that first used the sim device (0: none yet); as CUDA's
 * fork guard (cuda_err.c). S1: relaxed, only which process came first
 * matters; a forked child sees its parent's pid. */
static _Atomic int g_used_pid;

static bool fork_strict(void)
{
    const char *e = getenv("DISCO_SIM_FORK_STRICT");
    return e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
}

/* DISCO_OK, or (under DISCO_SIM_FORK_STRICT) DISCO_E_NO_DEVICE in a process
 * forked after its parent had used the sim device. */
static disco_status_t fork_guard(const char *fn, int device_id)
{
    int me = (int)getpid(), first = 0;
    if (atomic_compare_exchange_strong_explicit(&g_used_pid, &first, me, memory_order_relaxed,
                                                memory_order_relaxed) || /* S1 */
        first == me ||
        !fork_strict())
        return DISCO_OK;
    return disco_set_error(DISCO_E_NO_DEVICE,
                           "no sim device: %s: sim:%d: this process was forked from pid %d after "
                           "that process had used the sim device, which does not survive fork "
                           "under DISCO_SIM_FORK_STRICT (as CUDA: launch workers with "
                           "DISCO_LAUNCH_SPAWN)",
                           fn, device_id, first);
}

bool disco__sim_fork_spoiled(void)
{
    /* S1: relaxed, as fork_guard. */
    return fork_strict() &&
           atomic_load_explicit(&g_used_pid, memory_order_relaxed) == (int)getpid();
}

disco_status_t disco__sim_check_device(int device_id, const char *fn)
{
    int n = disco__sim_count();
    if (n == 0)
        return disco_set_error(DISCO_E_NO_DEVICE, "%s: sim:%d: no sim device: set DISCO_SIM_GPUS",
                               fn, device_id);
    if (device_id < 0 || device_id >= n)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "%s: sim:%d: no such device (DISCO_SIM_GPUS=%d: sim:0..sim:%d)", fn,
                               device_id, n, n - 1);
    disco_status_t st = fork_guard(fn, device_id);
    return st != DISCO_OK ? st : sticky(device_id, fn);
}

bool disco__sim_no_pidfd_getfd;

disco_status_t disco__sim_take_fd(int32_t pid, int32_t fd, uint64_t ino, const char *what,
                                  int device_id, int *fd_out)
{
    int got = -1, e1 = 0, e2 = 0;
    int pfd = disco__sim_no_pidfd_getfd ? (errno = EPERM, -1)
                                        : (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pfd >= 0) {
        got = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
        e1 = errno;
        close(pfd);
    } else {
        e1 = errno;
    }
    if (got < 0) {
        /* Yama ptrace_scope=1 refuses pidfd_getfd between siblings but
         * not reopening through /proc (same uid). */
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
        got = open(path, O_RDWR | O_CLOEXEC);
        e2 = errno;
    }
    if (got < 0)
        return disco_set_error(DISCO_E_SYS,
                               "sim:%d: import of %s of pid %d: pidfd_getfd(fd %d): %s; open of "
                               "/proc/%d/fd/%d: %s",
                               device_id, what, (int)pid, (int)fd, strerror(e1), (int)pid, (int)fd,
                               strerror(e2));
    struct stat sb;
    if (fstat(got, &sb) != 0 || (uint64_t)sb.st_ino != ino) {
        close(got);
        return disco_set_error(DISCO_E_INVAL,
                               "sim:%d: import of %s of pid %d: fd %d is no longer the exported "
                               "memfd (stale handle)",
                               device_id, what, (int)pid, (int)fd);
    }
    /* Checked before the caller maps it: an unsealed file could be shrunk
     * by its owner (or anyone holding it) under the mapping, and a read of
     * it would then fault with SIGBUS (test_import_refuses_unsealed). */
    int seals = fcntl(got, F_GET_SEALS);
    if (seals < 0 || (seals & DISCO_SIM_SEALS) != DISCO_SIM_SEALS) {
        close(got);
        return disco_set_error(DISCO_E_INVAL,
                               "sim:%d: import of %s of pid %d: fd %d is not sealed against "
                               "shrinking and growing (seals %#x; the sim seals what it "
                               "exports, and a mapping of an unsealed file could fault with "
                               "SIGBUS)",
                               device_id, what, (int)pid, (int)fd,
                               seals < 0 ? 0u : (unsigned)seals);
    }
    *fd_out = got;
    return DISCO_OK;
}

disco_status_t disco__sim_seal(int fd, const char *what, int device_id)
{
    if (fcntl(fd, F_ADD_SEALS, DISCO_SIM_SEALS) != 0)
        return disco_set_error(DISCO_E_NOMEM, "sim:%d: sealing %s: %s", device_id, what,
                               strerror(errno));
    return DISCO_OK;
}

/* Whether pid runs: exists and is not a zombie (a dead process its parent
 * has not reaped yet, perhaps because the parent waits here for it). */
bool disco__sim_pid_alive(int32_t pid)
{
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return true; /* no /proc: as kill says */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* the state follows the command name */
    return rp == NULL || rp[1] != ' ' || (rp[2] != 'Z' && rp[2] != 'X');
}
