/* worker_main.c - the process side of a worker: attach, bind the channel,
 * watch the controller, run the loop. Used after fork and by disco-worker. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "disco/segment.h"
#include "disco/session.h"
#include "bind.h"
#include "inherit.h"
#include "worker.h"

struct parent_watch {
    pid_t controller;
};

/* The parent-death signal covers most cases; this covers the window before
 * it was set and controllers whose opening thread is still alive. */
static disco_status_t parent_alive(void *p)
{
    const struct parent_watch *pw = p;
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
    (void)ctx, (void)st, (void)late, (void)nlate, (void)what;
    _exit(1);
}

int disco__worker_process(void *data, size_t size, int id, int cmd_fd, int reply_fd)
{
    struct disco__ctl *ctl = data;
    if (size < sizeof *ctl || ctl->magic != DISCO_CTL_MAGIC || ctl->layout != DISCO_CTL_LAYOUT ||
        id < 1 || (uint32_t)id >= ctl->world) {
        fprintf(stderr, "disco worker %d: not a disco control segment (or bad id)\n", id);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct parent_watch pw = {.controller = ctl->controller_pid};
    if (parent_alive(&pw) != DISCO_OK)
        return 1;

    disco_chan_t chan = {
        .kind = (int)ctl->transport, .world = (int)ctl->world, .self = id, .max_msg = ctl->max_msg};
    disco_ring_t reply;
    int fds[2] = {cmd_fd, reply_fd};
    if (chan.kind == DISCO_CHAN_RING) {
        char *base = data;
        if (disco_ring_attach(base + ctl->cmd_off, ctl->cmd_size, &chan.cmd) != DISCO_OK ||
            disco_ring_attach(base + ctl->reply_off + (size_t)(id - 1) * ctl->reply_size,
                              ctl->reply_size, &reply) != DISCO_OK) {
            fprintf(stderr, "disco worker %d: %s\n", id, disco_last_error());
            return 2;
        }
        chan.reply = &reply;
        disco_ring_set_reader_pid(&chan.cmd, (uint32_t)(id - 1), getpid());
    } else {
        chan.cmd_fd = &fds[0];
        chan.reply_fd = &fds[1];
    }

    const struct disco__bind *bind = (const struct disco__bind *)((char *)data + ctl->bind_off);
    if (disco__bind_self(bind[id].cpus, bind[id].nodes) != DISCO_OK)
        fprintf(stderr, "disco worker %d: not bound: %s\n", id, disco_last_error());
    struct disco__errbox *boxes = (struct disco__errbox *)((char *)data + ctl->errbox_off);
    disco_heap_t heap;
    if (disco_heap_attach((char *)data + ctl->heap_off, ctl->heap_size, &heap) != DISCO_OK) {
        fprintf(stderr, "disco worker %d: %s\n", id, disco_last_error());
        return 2;
    }
    disco_worker_t w;
    disco_wait_t wait = {.spin_ns = ctl->spin_ns,
                         .pause_ns = ctl->pause_ns,
                         .park_slice_ms = 20,
                         .abort_word = &ctl->broken,
                         .check = parent_alive,
                         .check_ctx = &pw};
    /* A taken heap lock is waited for like everything else: until the
     * session breaks or the controller goes. */
    disco_heap_set_wait(&heap, &wait);
    disco__worker_init(&w, id, (int)ctl->world, &boxes[id], &heap,
                       (struct disco__coll_area *)((char *)data + ctl->coll_off), &wait);
    w.abandon = end_on_abandon;
    w.ngroups = ctl->num_groups; /* read once, at start, as the rest of the geometry */
    if (ctl->trace_off != 0)
        w.trace = (struct disco__trace_ring *)((char *)data + ctl->trace_off) + (id - 1);
    int rc = disco__worker_loop(&w, &chan, &wait);
    disco__worker_fini(&w);
    return rc;
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
