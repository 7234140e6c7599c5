/*
 * bench_util.c - helpers shared by disco-bench and disco-demo (tools only);
 * see bench_util.h.
 */
#include "tools/bench/bench_util.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- children and fatal errors ---- */

static pid_t bu_children[BU_MAX_CHILDREN];
static int bu_nchildren;

/* Async-signal-safe: also called from the watchdog's signal handler. */
static void bu_kill_children(void)
{
    for (int i = 0; i < bu_nchildren; i++)
        if (bu_children[i] > 0)
            kill(bu_children[i], SIGKILL);
}

/* Prints the message, kills and reaps every child, exits 1. */
void bu_die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    bu_kill_children();
    for (int i = 0; i < bu_nchildren; i++)
        if (bu_children[i] > 0)
            waitpid(bu_children[i], NULL, 0);
    exit(1);
}

void bu_child_fail(disco_status_t st, const char *what)
{
    fprintf(stderr, "error: child %d: %s: %s (%s)\n", (int)getpid(), what, disco_err_name(st),
            disco_last_error());
    _exit(1);
}

static void bu_watchdog_fired(int sig)
{
    (void)sig;
    static const char msg[] = "error: watchdog: a section ran too long; killing children\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    bu_kill_children();
    _exit(2);
}

/* (Re)arms a whole-process watchdog: covers blocking pipe reads, which have
 * no deadline of their own. 0 disarms. Children do not inherit it. */
void bu_watchdog(unsigned seconds)
{
    signal(SIGALRM, bu_watchdog_fired);
    alarm(seconds);
}

/* Forks a child that runs fn(arg) and _exits with its return value. The
 * child dies with the parent. Returns the child's pid. */
pid_t bu_spawn(int (*fn)(void *), void *arg)
{
    if (bu_nchildren == BU_MAX_CHILDREN)
        bu_die("too many children");
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bu_die("fork: %s", strerror(errno));
    if (pid == 0) {
        bu_nchildren = 0; /* the parent's children are not ours to kill */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the parent died before prctl */
            _exit(1);
        _exit(fn(arg));
    }
    bu_children[bu_nchildren++] = pid;
    return pid;
}

/* Waits for every child; dies if one did not exit with status 0. */
void bu_reap_all(void)
{
    int bad = 0;
    char why[128] = "";
    for (int i = 0; i < bu_nchildren; i++) {
        int status;
        pid_t pid = bu_children[i];
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                bu_die("waitpid %d: %s", (int)pid, strerror(errno));
        bu_children[i] = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            continue;
        bad++;
        if (WIFSIGNALED(status))
            snprintf(why, sizeof why, "child %d killed by signal %d", (int)pid, WTERMSIG(status));
        else
            snprintf(why, sizeof why, "child %d exited with %d", (int)pid, WEXITSTATUS(status));
    }
    bu_nchildren = 0;
    if (bad)
        bu_die("%d child(ren) failed; last: %s", bad, why);
}

void bu_forget(pid_t pid)
{
    for (int i = 0; i < bu_nchildren; i++)
        if (bu_children[i] == pid) {
            bu_children[i] = bu_children[--bu_nchildren];
            return;
        }
}

/* ---- time, waits, statistics ---- */

/* Wait settings with a deadline BU_DEADLINE_NS from now; pause_ns 0 keeps
 * the library default (spin with pause ~20 us before yielding). */
disco_wait_t bu_wait(uint64_t pause_ns)
{
    disco_wait_t w = {0};
    w.pause_ns = pause_ns;
    w.deadline_ns = disco_now_ns() + BU_DEADLINE_NS;
    return w;
}

static int bu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts them in place). */
double bu_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bu_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- pinning ---- */

static cpu_set_t bu_all_cpus; /* the affinity we started with */
int bu_cpu_ids[CPU_SETSIZE];
int bu_ncpus;

/* Records the CPUs we may run on. Call once at start, before any pinning. */
void bu_cpus_init(void)
{
    if (sched_getaffinity(0, sizeof bu_all_cpus, &bu_all_cpus) != 0)
        bu_die("sched_getaffinity: %s", strerror(errno));
    bu_ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &bu_all_cpus))
            bu_cpu_ids[bu_ncpus++] = c;
}

/* Pins the calling process to the k-th allowed CPU (round-robin). */
void bu_pin(int k)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(bu_cpu_ids[k % bu_ncpus], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        bu_die("sched_setaffinity: %s", strerror(errno));
}

/* Lets the calling process float over every allowed CPU again. */
void bu_unpin(void)
{
    if (sched_setaffinity(0, sizeof bu_all_cpus, &bu_all_cpus) != 0)
        bu_die("sched_setaffinity: %s", strerror(errno));
}

/* ---- one broadcast ring + N reply rings in one memfd segment ---- */

/* Each ring starts on its own page, so no two rings share a cache line (nor
 * an adjacent-line prefetch pair). */
static size_t bu_page_up(size_t x)
{
    return (x + 4095) & ~(size_t)4095;
}

/* Formats the rings for n workers. A broadcast slot (128 bytes) holds a
 * BU_MSG_SIZE message plus the 16-byte slot header; reply slots are
 * reply_slot bytes (64: 48 bytes of payload, enough for an ack; 128 to
 * echo a BU_MSG_SIZE message in one slot). Handles stay valid across fork
 * (same mapping address). */
void bu_rings_create(bu_rings_t *r, uint32_t n, uint32_t reply_slot)
{
    if (n == 0 || n > BU_MAX_CHILDREN)
        bu_die("bad worker count %u (1..%d)", n, BU_MAX_CHILDREN);
    disco_ring_config_t bc = {.nslots = 64, .slot_size = 128, .nreaders = n, .max_msg = 4096};
    disco_ring_config_t rc = {
        .nslots = 64, .slot_size = reply_slot, .nreaders = 1, .max_msg = 4096};
    size_t bsz = bu_page_up(disco_ring_footprint(&bc));
    size_t rsz = bu_page_up(disco_ring_footprint(&rc));
    memset(r, 0, sizeof *r);
    r->n = n;
    bu_check(disco_segment_create("disco-bench", bsz + n * rsz, &r->seg), "disco_segment_create");
    char *p = disco_segment_data(&r->seg);
    bu_check(disco_ring_init(p, bsz, &bc, &r->bcast), "disco_ring_init(broadcast)");
    for (uint32_t i = 0; i < n; i++)
        bu_check(disco_ring_init(p + bsz + i * rsz, rsz, &rc, &r->reply[i]),
                 "disco_ring_init(reply)");
}

void bu_rings_close(bu_rings_t *r)
{
    disco_segment_close(&r->seg);
}

/* ---- machine description ---- */

void bu_machine_probe(bu_machine_t *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->cpu, sizeof m->cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    int family = -1, model = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        char *val = colon + 1 + (colon[1] == ' ');
        val[strcspn(val, "\n")] = '\0';
        if (strncmp(line, "model name", 10) == 0)
            snprintf(m->cpu, sizeof m->cpu, "%s", val);
        else if (strncmp(line, "cpu family", 10) == 0 && family < 0)
            family = atoi(val);
        else if (strncmp(line, "model\t", 6) == 0 && model < 0)
            model = atoi(val);
    }
    if (f != NULL)
        fclose(f);
    if (family >= 0 && model >= 0) {
        size_t len = strlen(m->cpu);
        snprintf(m->cpu + len, sizeof m->cpu - len, " (family %d, model %d)", family, model);
    }
    m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    m->mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) /
                 (1024.0 * 1024.0 * 1024.0);
    m->load1 = -1;
    if ((f = fopen("/proc/loadavg", "r")) != NULL) {
        if (fscanf(f, "%lf", &m->load1) != 1)
            m->load1 = -1;
        fclose(f);
    }
    /* Without the NVIDIA driver there is no GPU disco can use. */
    snprintf(m->gpu, sizeof m->gpu, "%s",
             access("/proc/driver/nvidia/gpus", F_OK) == 0 ? "nvidia (driver present)" : "none");
}

int bu_read_figures(const char *cmd, void (*take)(void *ctx, const char *key, double v), void *ctx,
                    int *found)
{
    printf("  %s\n", cmd);
    fflush(stdout);
    *found = 0;
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        char key[64];
        double v;
        if (sscanf(line, "%63[^=]=%lf", key, &v) == 2) {
            take(ctx, key, v);
            (*found)++;
        }
    }
    return pclose(f);
}

int bu_mpirun_figures(int timeout_s, int n, const char *bind, const char *prog, const char *args,
                      void (*take)(void *ctx, const char *key, double v), void *ctx, int *found)
{
    const char *root = geteuid() == 0 ? " --allow-run-as-root" : "";
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "timeout -k 5 %d mpirun%s -np %d --oversubscribe %s --mca pml ob1 "
             "--mca btl self,vader '%s' %s",
             timeout_s, root, n, bind, prog, args);
    return bu_read_figures(cmd, take, ctx, found);
}
