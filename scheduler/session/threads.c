/* threads.c - the process table's threads (procs.h): launch mode
 * DISCO_LAUNCH_THREAD runs workers 1..N-1 as threads of the controller's
 * process, for debugging and single-process use.
 *
 * What changes when workers share a process, and how each is handled:
 *  - liveness: a thread has no pid of its own; it is alive while it runs
 *    its loop. It says it ended through its done word (set at its exit by
 *    its key's destructor, also when it was cancelled); the table joins it
 *    then.
 *  - stopping: a thread cannot be SIGKILLed. disco__threads_kill sets its
 *    stop word, which its waits check (worker_main.c, parent_alive), and
 *    cancels it: cancellation is enabled only while it runs a user C
 *    function (worker.c, exec_call), so it ends at that function's next
 *    cancellation point; at its exit its registers and its loop's buffers
 *    are freed (worker_main.c, disco__worker_thread_cleanup), only what the
 *    cancelled call itself held (its scratch, its own tensors) being lost.
 *    One that never reaches a cancellation point is left running: its
 *    entry stays unreaped, as a frozen process's, and the session keeps
 *    the segment mapped at close (open.c, free_session), since the thread
 *    may still touch it.
 *  - a worker function that crashes (a signal such as SIGSEGV) takes the
 *    whole process down: there is no other process to outlive it.
 *  - the parent-death signal does not apply (threads die with their
 *    process); signals are blocked in worker threads, so that the
 *    application's handlers run on its own threads.
 *  - placement binds the thread (sched_setaffinity and set_mempolicy act
 *    on the calling thread); disco top shows each worker's thread id.
 *  - device tensors are refused (the device layer's IPC tables are per
 *    process; ctx.c, session_tensor.c).
 * test_threaded.c holds these. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "workers/core/worker.h"
#include "scheduler/session/procs.h"

#define KILL_JOIN_MS 5000 /* how long a kill waits for its thread to end */

struct disco__wthread {
    pthread_t tid;
    _Atomic int stop;               /* set by the table: end now */
    struct disco__thread_keep keep; /* what its exit frees if it is cancelled */
    _Atomic int done;               /* set by the thread as it ends (cleanup handler) */
    int rc;                         /* its loop's return code; -1: cancelled */
    pid_t os_tid;                   /* its kernel thread id, for messages */
    void *data;
    size_t size;
    int id, cmd_fd, reply_fd; /* fds: the thread's ends of its pipes, or -1 */
};

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>

/* A cancelled thread's frames were unwound without their epilogues, so
 * AddressSanitizer's redzones of them stay poisoned, and its own exit code
 * (which runs in that part of the stack) would report its writes there:
 * the stack below this frame is unpoisoned first. */
static void unpoison_stack_below_here(void)
{
    pthread_attr_t a;
    void *lo;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return;
    char *here = __builtin_frame_address(0);
    if (pthread_attr_getstack(&a, &lo, &size) == 0 && here > (char *)lo && here < (char *)lo + size)
        __asan_unpoison_memory_region(lo, (size_t)(here - (char *)lo));
    pthread_attr_destroy(&a);
}
#endif

static void thread_ended(void *arg)
{
    struct disco__wthread *t = arg;
#if defined(__SANITIZE_ADDRESS__)
    if (t->rc < 0)
        unpoison_stack_below_here();
#endif
    disco__worker_thread_cleanup(&t->keep); /* nothing left after a normal end */
    if (t->cmd_fd >= 0)
        close(t->cmd_fd);
    if (t->reply_fd >= 0)
        close(t->reply_fd);
    /* Release: pairs with the acquire in join (threads.c); rc and os_tid
     * are written before it. */
    atomic_store_explicit(&t->done, 1, memory_order_release);
}

/* thread_ended runs as the destructor of the thread's key, at its exit
 * however it ends (returned or cancelled): no pthread_cleanup_push, whose
 * setjmp return AddressSanitizer reads as a stack overflow. */
static pthread_key_t ended_key;
static pthread_once_t ended_once = PTHREAD_ONCE_INIT;
static int ended_key_rc;

static void make_ended_key(void)
{
    ended_key_rc = pthread_key_create(&ended_key, thread_ended);
}

static void *thread_main(void *arg)
{
    struct disco__wthread *t = arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
    t->os_tid = gettid();
    /* Its name, as top -H, gdb and /proc/<pid>/task/<tid>/comm show it
     * ("disco-w<id>"; at most 15 characters): tests/test_threaded.c counts
     * the session's threads by it. */
    char name[16];
    snprintf(name, sizeof name, "disco-w%d", t->id);
    (void)pthread_setname_np(pthread_self(), name);
    t->rc = -1; /* stays so if it is cancelled */
    pthread_setspecific(ended_key, t);
    t->keep.stop = &t->stop;
    t->rc = disco__worker_thread(t->data, t->size, t->id, t->cmd_fd, t->reply_fd, &t->keep);
    return NULL; /* thread_ended runs now */
}

/* Joins thread i if it has ended (waiting until abs at most, or not at all
 * when abs is NULL); true if it is joined. Frees its entry. */
static bool join(struct disco__procs *p, int i, const struct timespec *abs)
{
    struct disco__wthread *t = p->thr[i];
    if (t == NULL || p->reaped[i])
        return true;
    int rc;
    /* Acquire: pairs with the release in thread_ended. */
    if (abs == NULL && !atomic_load_explicit(&t->done, memory_order_acquire))
        return false;
    do
        rc = abs != NULL ? pthread_timedjoin_np(t->tid, NULL, abs) : pthread_join(t->tid, NULL);
    while (rc == EINTR);
    if (rc != 0)
        return false;
    p->wstatus[i] = t->rc;
    p->reaped[i] = true;
    return true;
}

static struct timespec abs_after(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Frees entry i once it is joined (its thread no longer uses it). */
static void forget(struct disco__procs *p, int i)
{
    if (p->thr[i] != NULL && p->reaped[i]) {
        free(p->thr[i]);
        p->thr[i] = NULL;
    }
}

static disco_status_t start_one(struct disco__procs *p, const struct disco__procs_launch *how,
                                int i)
{
    struct disco__wthread *t = calloc(1, sizeof *t);
    if (t == NULL)
        return disco_set_error(DISCO_E_NOMEM, "worker thread %d", i);
    *t = (struct disco__wthread){.data = disco_segment_data(how->seg),
                                 .size = disco_segment_data_size(how->seg),
                                 .id = i,
                                 .cmd_fd = -1,
                                 .reply_fd = -1};
    if (how->pipes) {
        int cmd[2], rep[2];
        if (pipe2(cmd, O_CLOEXEC) != 0) {
            free(t);
            return disco_set_error(DISCO_E_SYS, "pipe: %s", strerror(errno));
        }
        if (pipe2(rep, O_CLOEXEC) != 0) {
            close(cmd[0]), close(cmd[1]), free(t);
            return disco_set_error(DISCO_E_SYS, "pipe: %s", strerror(errno));
        }
        fcntl(cmd[1], F_SETFL, O_NONBLOCK);
        how->cmd_fd[i] = cmd[1];
        how->reply_fd[i] = rep[0];
        t->cmd_fd = cmd[0];
        t->reply_fd = rep[1];
    }
    /* Every signal blocked in the new thread (it inherits this mask). */
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int rc = pthread_create(&t->tid, NULL, thread_main, t);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rc != 0) {
        if (t->cmd_fd >= 0)
            close(t->cmd_fd), close(t->reply_fd);
        free(t);
        return disco_set_error(DISCO_E_SYS, "worker thread %d: pthread_create: %s", i,
                               strerror(rc));
    }
    p->thr[i] = t;
    p->pid[i] = getpid();
    p->pidfd[i] = -1;
    p->reaped[i] = false;
    p->wstatus[i] = 0;
    return DISCO_OK;
}

disco_status_t disco__threads_start(struct disco__procs *p, const struct disco__procs_launch *how)
{
    p->threads = true;
    pthread_once(&ended_once, make_ended_key);
    if (ended_key_rc != 0)
        return disco_set_error(DISCO_E_SYS, "pthread_key_create: %s", strerror(ended_key_rc));
    if (p->thr == NULL && (p->thr = calloc((size_t)p->n, sizeof *p->thr)) == NULL)
        return disco_set_error(DISCO_E_NOMEM, "thread table of %d", p->n);
    disco_status_t st = DISCO_OK;
    for (int i = 1; i < p->n && st == DISCO_OK; i++) {
        if (p->thr[i] != NULL) /* a thread that never ended (recover refuses it first) */
            st = disco_set_error(DISCO_E_TIMEOUT, "worker %d's last thread has not ended",
                                 i + p->id_base);
        else
            st = start_one(p, how, i);
    }
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        disco__threads_stop(p, 0);
        disco_set_error(st, "%s", why);
    }
    return st;
}

disco_status_t disco__threads_check(struct disco__procs *p, struct disco__procs_exit *dead_out)
{
    for (int i = 1; i < p->n; i++) {
        struct disco__wthread *t = p->thr != NULL ? p->thr[i] : NULL;
        if (t == NULL || p->reaped[i] || !join(p, i, NULL))
            continue;
        dead_out->worker = i;
        dead_out->pid = t->os_tid;
        dead_out->wstatus = t->rc;
        if (t->rc < 0)
            snprintf(dead_out->what, sizeof dead_out->what, "worker %d (thread %d) was cancelled",
                     i + p->id_base, (int)t->os_tid);
        else
            snprintf(dead_out->what, sizeof dead_out->what,
                     "worker %d (thread %d) ended with code %d", i + p->id_base, (int)t->os_tid,
                     t->rc);
        forget(p, i);
        return DISCO_E_WORKER_DIED;
    }
    return DISCO_OK;
}

void disco__threads_kill(struct disco__procs *p, int i)
{
    struct disco__wthread *t = p->thr != NULL ? p->thr[i] : NULL;
    if (t == NULL || p->reaped[i])
        return;
    /* Release: pairs with the acquire in parent_alive (worker_main.c). */
    atomic_store_explicit(&t->stop, 1, memory_order_release);
    pthread_cancel(t->tid); /* acted on only inside a user C function (worker.c) */
    struct timespec abs = abs_after(KILL_JOIN_MS);
    join(p, i, &abs);
    forget(p, i);
}

void disco__threads_stop(struct disco__procs *p, int grace_ms)
{
    if (p->thr == NULL)
        return;
    struct timespec abs = abs_after(grace_ms);
    for (int i = 1; i < p->n; i++) {
        if (p->thr[i] == NULL || p->reaped[i])
            continue;
        if (grace_ms <= 0 || !join(p, i, &abs))
            disco__threads_kill(p, i);
        forget(p, i);
    }
}

bool disco__procs_all_ended(const struct disco__procs *p)
{
    for (int i = 1; p->threads && p->thr != NULL && i < p->n; i++)
        if (p->thr[i] != NULL && !p->reaped[i])
            return false;
    return true;
}

void disco__threads_fini(struct disco__procs *p)
{
    if (p->thr == NULL)
        return;
    for (int i = 1; i < p->n; i++) {
        if (p->thr[i] == NULL)
            continue;
        if (p->reaped[i]) {
            free(p->thr[i]);
        } else {
            /* Still running (it never reached a cancellation point): it
             * keeps its entry, which is leaked with it. */
            pthread_detach(p->thr[i]->tid);
        }
    }
    free(p->thr);
    p->thr = NULL;
}
