/* worker_main.c - the process side of a worker: attach, bind the channel,
 * watch the controller, run the loop. Used after fork and by disco-worker. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "disco/shm/segment.h"
#include "disco/session.h"
#include "disco/worker.h"
#include "shm/prefault.h"
#include "workers/data/bind.h"
#include "workers/data/collective.h"
#include "workers/core/ctl_layout.h"
#include "workers/core/inherit.h"
#include "workers/core/worker.h"

struct parent_watch {
    pid_t controller;
    const _Atomic int *stop; /* a worker thread: set when it must end; else NULL */
};

/* The parent-death signal covers most cases; this covers the window before
 * it was set and controllers whose opening thread is still alive. */
static disco_status_t parent_alive(void *p)
{
    const struct parent_watch *pw = p;
    /* A worker thread's controller is its own process: it is told to end
     * through stop instead. Acquire: pairs with the release in
     * disco__threads_kill (threads.c). */
    if (pw->stop != NULL)
        return atomic_load_explicit(pw->stop, memory_order_acquire)
                   ? disco_set_error(DISCO_E_SHUTDOWN, "worker thread told to stop")
                   : DISCO_OK;
    if (getppid() != pw->controller)
        return disco_set_error(DISCO_E_PEER_DEAD, "controller %d is gone", (int)pw->controller);
    return DISCO_OK;
}

/* A worker gives up a collective only when the session broke or the
 * controller went (its waits have no deadline). Other members may still be
 * writing into its buffers, and it cannot stop them: it ends at once,
 * freeing nothing, as it would at its next command anyway. */
static disco_status_t end_on_abandon(void *ctx, disco_status_t st, const int *late, int nlate,
                                     const char *what)
{
    (void)late, (void)nlate;
    /* Its last words (the errbox), which the controller appends to the
     * death it reports: why this member gave up, e.g. which member left
     * the command without calling the collective (test_comm_skip_group_named). */
    disco__worker_post_error(ctx, st, what, disco_last_error());
    _exit(1);
}

/* A worker thread cannot end its process: it gives up with st. The late
 * members are threads of this process whose buffers (heap blocks) stay
 * mapped until close, which joins every worker thread before it unmaps the
 * segment (threads.c); the broken session allocates nothing meanwhile. */
static disco_status_t return_on_abandon(void *ctx, disco_status_t st, const int *late, int nlate,
                                        const char *what)
{
    (void)ctx, (void)late, (void)nlate, (void)what;
    return st;
}

/* What the worker's parts point at one another through: on the stack of
 * a process's worker, on the heap for a thread's (worker.h, keep). */
struct wstate {
    disco_worker_t w;
    disco_heap_t heap;
    disco_wait_t wait;
    struct parent_watch pw;
};

static int run_worker(void *data, size_t size, int id, int cmd_fd, int reply_fd,
                      struct disco__thread_keep *keep)
{
    const _Atomic int *stop = keep != NULL ? keep->stop : NULL;
    /* The layout comes from this worker's own computation, checked against
     * the header (ctl_layout.h): a header that lies about it is refused
     * here, before any offset from it is used. */
    struct disco__ctl_layout lay;
    if (disco__ctl_read(data, size, &lay) != DISCO_OK) {
        fprintf(stderr, "disco worker %d: %s\n", id, disco_last_error());
        return 2;
    }
    if (id < 1 || (uint32_t)id >= lay.geom.world) {
        fprintf(stderr, "disco worker %d: no such worker in a session of %u\n", id, lay.geom.world);
        return 2;
    }
    struct disco__ctl *ctl = data;
    char *base = data;
    /* The node's place in a session across nodes, read once: a header
     * whose numbers do not fit a world of whole nodes is refused. */
    uint32_t gid_base = ctl->gid_base, gworld = ctl->gworld;
    if (gworld < lay.geom.world || gworld > DISCO_MAX_GLOBAL_WORKERS ||
        gworld % lay.geom.world != 0 || gid_base % lay.geom.world != 0 || gid_base >= gworld) {
        fprintf(stderr,
                "disco worker %d: the header's node (first worker %u of %u) does not fit "
                "%u workers a node\n",
                id, gid_base, gworld, lay.geom.world);
        return 2;
    }
    /* A thread dies with its process: no parent-death signal (it would
     * follow the thread, not the process). */
    if (stop == NULL)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct wstate local, *ws = &local;
    if (keep != NULL && (ws = calloc(1, sizeof *ws)) == NULL) {
        fprintf(stderr, "disco worker %d: out of memory\n", id);
        return 2;
    }
    int rc = 2;
    ws->pw = (struct parent_watch){.controller = ctl->controller_pid, .stop = stop};
    if (parent_alive(&ws->pw) != DISCO_OK) {
        rc = 1;
        goto out;
    }

    disco_chan_t chan = {.kind = (int)lay.geom.transport,
                         .world = (int)lay.geom.world,
                         .self = id,
                         .max_msg = lay.geom.max_msg};
    disco_ring_t reply;
    int fds[2] = {cmd_fd, reply_fd};
    if (chan.kind == DISCO_TRANSPORT_RING) {
        if (disco_ring_attach(base + lay.r[DISCO_CTL_CMD].off, (size_t)lay.r[DISCO_CTL_CMD].size,
                              &chan.cmd) != DISCO_OK ||
            disco_ring_attach(base + disco__ctl_reply_at(&lay, (uint32_t)id),
                              (size_t)lay.reply_stride, &reply) != DISCO_OK) {
            fprintf(stderr, "disco worker %d: %s\n", id, disco_last_error());
            goto out;
        }
        chan.reply = &reply;
        disco_ring_set_reader_pid(&chan.cmd, (uint32_t)(id - 1),
                                  stop != NULL ? (pid_t)gettid() : getpid());
    } else {
        chan.cmd_fd = &fds[0];
        chan.reply_fd = &fds[1];
    }

    const struct disco__bind *bind = (const struct disco__bind *)(base + lay.r[DISCO_CTL_BIND].off);
    if (disco__bind_self(bind[id].cpus, bind[id].nodes) != DISCO_OK)
        fprintf(stderr, "disco worker %d: not bound: %s\n", id, disco_last_error());
    struct disco__errbox *boxes = (struct disco__errbox *)(base + lay.r[DISCO_CTL_ERRBOX].off);
    if (disco_heap_attach(base + lay.r[DISCO_CTL_HEAP].off, (size_t)lay.geom.heap_size,
                          &ws->heap) != DISCO_OK) {
        fprintf(stderr, "disco worker %d: %s\n", id, disco_last_error());
        goto out;
    }
    disco_worker_t *w = &ws->w;
    ws->wait = (disco_wait_t){.spin_ns = ctl->spin_ns,
                              .pause_ns = ctl->pause_ns,
                              .park_slice_ms = 20,
                              .abort_word = &ctl->broken,
                              .check = parent_alive,
                              .check_ctx = &ws->pw};
    /* A taken heap lock is waited for like everything else: until the
     * session breaks or the controller goes. */
    disco_heap_set_wait(&ws->heap, &ws->wait);
    disco__worker_init(w, id, (int)lay.geom.world, &boxes[id], &ws->heap,
                       (struct disco__coll_area *)(base + lay.r[DISCO_CTL_COLL].off), &ws->wait);
    w->abandon = stop != NULL ? return_on_abandon : end_on_abandon;
    w->abandon_ctx = w;
    w->threaded = stop != NULL;
    w->gid_base = (int)gid_base;
    w->gworld = (int)gworld;
    w->one_group = ctl->ggroups == 1;
    w->ngroups = lay.geom.num_groups; /* read once, at start, as the rest of the geometry */
    w->dev_area = disco__coll_dev_area(w->coll, lay.geom.world, w->ngroups);
    if (lay.geom.trace) {
        w->trace = (struct disco__trace_ring *)(base + lay.r[DISCO_CTL_TRACE].off) + (id - 1);
        /* The ring is a hole in the segment (open.c, make_segment): its
         * pages are had now, before the first command, not by the first
         * lap of records, where a fault was a microsecond or two in one
         * step of every 128 (issue 21, the p99 of a step). Only this
         * worker writes the records. A failure leaves them to fault in
         * at first use, as before. */
        (void)disco__prefault(w->trace->rec, sizeof w->trace->rec);
    }
    w->stat =
        disco__stat_worker((struct disco__stat_hdr *)(base + lay.r[DISCO_CTL_STATUS].off), id);
    /* Relaxed: a monitor's word (wstat.h). A thread's own id: disco top
     * reads /proc/<tid> as it reads a process's. */
    atomic_store_explicit(&w->stat->pid, stop != NULL ? (int32_t)gettid() : (int32_t)getpid(),
                          memory_order_relaxed);
    w->keep = keep;
    if (keep != NULL)
        keep->state = ws;
    rc = disco__worker_loop(w, &chan, &ws->wait);
    disco__worker_fini(w);
out:
    if (keep != NULL) {
        keep->state = NULL;
        free(ws);
    }
    return rc;
}

void disco__worker_thread_cleanup(struct disco__thread_keep *keep)
{
    struct wstate *ws = keep->state;
    if (ws != NULL) { /* cancelled in a user function: its registers go too */
        disco__worker_fini(&ws->w);
        free(ws);
        keep->state = NULL;
    }
    free(keep->loop_mem[0]);
    free(keep->loop_mem[1]);
    keep->loop_mem[0] = keep->loop_mem[1] = NULL;
}

int disco__worker_process(void *data, size_t size, int id, int cmd_fd, int reply_fd)
{
    return run_worker(data, size, id, cmd_fd, reply_fd, NULL);
}

int disco__worker_thread(void *data, size_t size, int id, int cmd_fd, int reply_fd,
                         struct disco__thread_keep *keep)
{
    return run_worker(data, size, id, cmd_fd, reply_fd, keep);
}

static int arg_int(int argc, char **argv, const char *name, int dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return atoi(argv[i + 1]);
    return dflt;
}

static void worker_usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s --disco-fd FD --disco-worker ID [--disco-cmd-fd FD "
            "--disco-reply-fd FD]\n"
            "Started by a disco controller (launch mode spawn); not run by hand.\n",
            argv0);
}

int disco_worker_main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        worker_usage(stdout, argv[0]);
        return 0;
    }
    int fd = arg_int(argc, argv, "--disco-fd", -1);
    int id = arg_int(argc, argv, "--disco-worker", -1);
    if (fd < 0 || id < 1) {
        worker_usage(stderr, argv[0]);
        return 2;
    }
    int cmd_fd = arg_int(argc, argv, "--disco-cmd-fd", -1);
    int reply_fd = arg_int(argc, argv, "--disco-reply-fd", -1);
    /* Asked by a controller whose C library could not close them before
     * exec (see lifecycle.c): drop every fd but ours. */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--disco-close-others") == 0) {
            int keep[3] = {fd, cmd_fd, reply_fd};
            disco__close_fds_except(keep, 3);
        }
    disco_segment_t seg;
    if (disco_segment_attach(fd, &seg) != DISCO_OK) {
        fprintf(stderr, "disco worker %d: %s\n", id, disco_last_error());
        return 2;
    }
    close(fd);
    int rc = disco__worker_process(disco_segment_data(&seg), disco_segment_data_size(&seg), id,
                                   cmd_fd, reply_fd);
    disco_segment_close(&seg);
    return rc;
}
