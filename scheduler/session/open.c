/* open.c - opening, shutting down and closing a session. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "workers/data/arena.h"
#include "workers/data/bind.h"
#include "workers/data/collective.h"
#include "workers/core/ctl_layout.h"
#include "workers/device/fork_rule.h"
#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"

#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_MAX_MSG    (64u * 1024u)
#define MIN_DEFAULT_HEAP   (UINT64_C(16) << 20) /* the default's floor (the old default) */
#define HEAP_ROUND         (UINT64_C(2) << 20)  /* the default is a multiple of this */
#define MAX_HEAP           (UINT64_C(1) << 46)  /* 64 TiB: beyond any machine's memory */
#define MAX_SPIN_NS        UINT64_C(1000000000) /* 1 s of spinning before parking */

static disco_status_t controller_check(void *p)
{
    disco_status_t st = disco__session_check(p);
    return st != DISCO_OK ? st : disco__session_watchdog(p);
}

static disco_status_t check_config(const disco_session_config_t *c)
{
    if (c->num_workers < 1 || c->num_workers > DISCO_MAX_WORKERS)
        return disco_set_error(DISCO_E_INVAL, "num_workers %d: must be 1..%d", c->num_workers,
                               DISCO_MAX_WORKERS);
    if (c->launch != DISCO_LAUNCH_FORK && c->launch != DISCO_LAUNCH_SPAWN &&
        c->launch != DISCO_LAUNCH_THREAD)
        return disco_set_error(DISCO_E_INVAL, "launch mode %d is unknown", (int)c->launch);
    if (c->transport != DISCO_TRANSPORT_RING && c->transport != DISCO_TRANSPORT_PIPE)
        return disco_set_error(DISCO_E_INVAL, "transport %d is unknown", (int)c->transport);
    /* Sizes: each field's range, so that no rounding or sum made from it
     * can wrap (a max_msg of 0xFFFFFFFF would round up to 0 and the first
     * call overrun the frame buffer; test_bounds). */
    if (c->max_msg != 0 && (c->max_msg < DISCO_CTL_MIN_MSG || c->max_msg > DISCO_CTL_MAX_MSG))
        return disco_set_error(DISCO_E_INVAL, "cfg.max_msg %u: must be %u..%u (0: %u)", c->max_msg,
                               DISCO_CTL_MIN_MSG, DISCO_CTL_MAX_MSG, DEFAULT_MAX_MSG);
    if (c->heap_bytes > MAX_HEAP)
        return disco_set_error(DISCO_E_INVAL, "cfg.heap_bytes %llu: at most %llu (2^46)",
                               (unsigned long long)c->heap_bytes, (unsigned long long)MAX_HEAP);
    if (c->device_arena_bytes > DISCO_ARENA_MAX_BYTES)
        return disco_set_error(DISCO_E_INVAL, "cfg.device_arena_bytes %llu: at most %llu (2^40)",
                               (unsigned long long)c->device_arena_bytes,
                               (unsigned long long)DISCO_ARENA_MAX_BYTES);
    if (c->spin_ns > MAX_SPIN_NS || c->pause_ns > MAX_SPIN_NS)
        return disco_set_error(DISCO_E_INVAL,
                               "cfg.spin_ns %llu, cfg.pause_ns %llu: each at most %llu (1 s)",
                               (unsigned long long)c->spin_ns, (unsigned long long)c->pause_ns,
                               (unsigned long long)MAX_SPIN_NS);
    if (c->num_groups < 0 || (c->num_groups > 0 && c->num_workers % c->num_groups != 0))
        return disco_set_error(DISCO_E_INVAL, "num_groups %d does not divide %d workers",
                               c->num_groups, c->num_workers);
    return DISCO_OK;
}

/* Spin settings: when processes outnumber the CPUs they may use, a waiter
 * most likely holds the core its peer needs, so it yields almost at once
 * and parks sooner; that is worth a warning, once per process. "Almost at
 * once" is 200 ns of pause: a no-op call + sync_all on 2 cores, alternated
 * in one session of runs, took 6.0-6.5 us at N = 4 and 12.7-14.7 us at
 * N = 8 with it, against 7.4-10.5 us and 16.1-17.0 us with 1 us of pause
 * (100 ns: no better than 200). */
static void pick_spin(disco_session_config_t *c, const disco_plan_t *plan)
{
    static _Atomic int warned; /* any order: it only limits a message */
    bool crowded = plan->oversubscribed;
    if (crowded && getenv("DISCO_QUIET") == NULL &&
        atomic_exchange_explicit(&warned, 1, memory_order_relaxed) == 0)
        fprintf(stderr,
                "disco: warning: %d workers on %d CPUs; waits spin less before parking "
                "(DISCO_QUIET=1 hides this)\n",
                c->num_workers, plan->num_pus);
    if (c->pause_ns == 0)
        c->pause_ns = crowded ? 200 : DISCO_WAIT_DEFAULT_PAUSE_NS;
    if (c->spin_ns == 0)
        c->spin_ns = crowded ? 50000 : DISCO_WAIT_DEFAULT_SPIN_NS;
}

/* The heap of a session opened with cfg.heap_bytes 0: half the machine's
 * memory (disco_memory_total: MemTotal, or the cgroup's limit), no more
 * than can be backed now less a margin (so that open's check of the whole
 * segment against MemAvailable passes) and a quarter of RLIMIT_AS when one
 * is set; a multiple of 2 MiB, at least 16 MiB. It is reserved, not backed:
 * the memfd's size and this process's address space, which cost nothing
 * until a block reaches them (heap_back.c backs them then, after checking
 * the memory again). Many sessions at once each reserve it; what they back
 * together is what their tensors hold. test_heap_lazy's
 * test_default_heap_fits_64mib holds that a default session takes a 64 MiB
 * tensor with little backed at open. */
static uint64_t default_heap(void)
{
    uint64_t h = disco_memory_total() / 2;
    uint64_t room = disco_memory_room();
    uint64_t margin = room / 8 > (UINT64_C(64) << 20) ? room / 8 : UINT64_C(64) << 20;
    if (room != 0 && h > room - (room < margin ? room : margin))
        h = room - (room < margin ? room : margin);
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && h > as.rlim_cur / 4)
        h = as.rlim_cur / 4;
    h -= h % HEAP_ROUND;
    if (h > MAX_HEAP)
        h = MAX_HEAP;
    return h < MIN_DEFAULT_HEAP ? MIN_DEFAULT_HEAP : h;
}

/* The geometry of s's control segment. */
static struct disco__ctl_geom geom_of(const struct disco_session *s)
{
    return (struct disco__ctl_geom){.world = (uint32_t)s->world,
                                    .num_groups = (uint32_t)s->cfg.num_groups,
                                    .transport = (uint32_t)s->cfg.transport,
                                    .max_msg = s->cfg.max_msg,
                                    .trace = !s->cfg.trace_off,
                                    .heap_size = disco_heap_footprint(s->cfg.heap_bytes)};
}

/* Lays out (ctl_layout.h) and creates the control segment; writes its
 * header, the trace rings' settings and the heap, which live as long as
 * the segment; the rest is disco__session_format's. */
static disco_status_t make_segment(struct disco_session *s)
{
    struct disco__ctl_geom geom = geom_of(s);
    struct disco__ctl_layout lay;
    disco_status_t st = disco__ctl_layout(&geom, &lay);
    if (st != DISCO_OK)
        return st;
    /* What a session's processes share is backed now, except two parts
     * (the whole size is still checked against the memory available):
     * - the heap, backed as its blocks reach it (disco_heap_init_lazy), so
     *   that an allocation still fails cleanly when memory is short;
     * - the trace rings (256 KiB a worker), backed by their writer as it
     *   starts (worker_main.c, disco__prefault), in parallel and off this
     *   thread, or else by its first stores, as a worker's own stack and
     *   malloc'd memory are: a page that cannot be had is the same
     *   out-of-memory as theirs.
     * At 8 workers, backing the default 16 MiB heap and the rings took
     * about 3 ms of a 7 ms open and 2 ms of a 4 ms close on the 2-core
     * machine of the benchmarks. */
    uint64_t heap_off = lay.r[DISCO_CTL_HEAP].off;
    uint64_t coll_off = lay.r[DISCO_CTL_COLL].off;
    uint64_t first = geom.trace ? lay.r[DISCO_CTL_TRACE].off : heap_off;
    if ((st = disco_segment_create_partial("disco-session", (size_t)lay.total, (size_t)first,
                                           &s->seg)) != DISCO_OK)
        return st;
    if (geom.trace && (st = disco_segment_back(&s->seg, (size_t)coll_off,
                                               (size_t)(heap_off - coll_off))) != DISCO_OK)
        return st;
    char *base = disco_segment_data(&s->seg);
    struct disco__ctl *ctl = (struct disco__ctl *)base;
    disco__ctl_write(ctl, &lay);
    ctl->controller_pid = (int32_t)getpid();
    ctl->gid_base = (uint32_t)s->gid_base;
    ctl->gworld = (uint32_t)s->gworld;
    ctl->ggroups = (uint32_t)s->ggroups;
    ctl->spin_ns = s->cfg.spin_ns;
    ctl->pause_ns = s->cfg.pause_ns;
    if (geom.trace) {
        struct disco__trace_ring *rings =
            (struct disco__trace_ring *)(base + lay.r[DISCO_CTL_TRACE].off);
        for (int i = 0; i < s->world - 1; i++) {
            rings[i].cap = DISCO_TRACE_CAP;
            rings[i].on = 1;
        }
        if (disco__trace_open(&s->trace, rings) != DISCO_OK)
            return disco_set_error(DISCO_E_NOMEM, "trace records");
    }
    s->ctl = ctl;
    s->errbox = (struct disco__errbox *)(base + lay.r[DISCO_CTL_ERRBOX].off);
    st = disco_heap_init_lazy(base + heap_off, (size_t)geom.heap_size, &s->heap);
    if (st == DISCO_E_UNSUPPORTED) { /* an old kernel: back it all now, as before */
        st = disco_segment_back(&s->seg, (size_t)heap_off, (size_t)geom.heap_size);
        if (st == DISCO_OK)
            st = disco_heap_init(base + heap_off, (size_t)geom.heap_size, &s->heap);
    }
    if (st != DISCO_OK)
        return st;
    return disco__session_format(s);
}

disco_status_t disco__session_format(struct disco_session *s)
{
    int world = s->world;
    struct disco__ctl_geom geom = geom_of(s);
    struct disco__ctl_layout lay;
    disco_status_t st = disco__ctl_layout(&geom, &lay);
    if (st != DISCO_OK)
        return st;
    bool rings = lay.rings;
    char *base = disco_segment_data(&s->seg);
    /* No process but this one maps the segment now (at open none has
     * started; at a recovery every worker has been reaped), so plain
     * stores do; starting the workers (fork, spawn) publishes them all.
     * Relaxed: as the rest. */
    atomic_store_explicit(&s->ctl->broken, 0, memory_order_relaxed);
    memset(base + lay.r[DISCO_CTL_ERRBOX].off, 0, (size_t)lay.r[DISCO_CTL_ERRBOX].size);
    struct disco__bind *bind = (struct disco__bind *)(base + lay.r[DISCO_CTL_BIND].off);
    for (int i = 0; i < world; i++) {
        snprintf(bind[i].cpus, sizeof bind[i].cpus, "%s", s->plan->worker[i].cpus);
        snprintf(bind[i].nodes, sizeof bind[i].nodes, "%s", s->plan->worker[i].nodes);
    }
    /* Workers 1..N-1's status (workers/core/wstat.h) starts over with the
     * processes; worker 0's and the header's (names, reports) go on. */
    struct disco__stat_hdr *stat = (struct disco__stat_hdr *)(base + lay.r[DISCO_CTL_STATUS].off);
    for (int i = 1; i < world; i++)
        memset(disco__stat_worker(stat, i), 0, sizeof(struct disco__wstat));
    disco__stat_set_why(stat, "");
    /* The collective area, the device area after it included: barriers,
     * slots, marks and every worker's arena publication start at zero. */
    memset(base + lay.r[DISCO_CTL_COLL].off, 0, (size_t)lay.r[DISCO_CTL_COLL].size);
    struct disco__coll_area *coll = (struct disco__coll_area *)(base + lay.r[DISCO_CTL_COLL].off);
    disco__coll_init(coll, (uint32_t)world, (uint32_t)s->cfg.num_groups);
    st = disco__dev_area_init(
        disco__coll_dev_area(coll, (uint32_t)world, (uint32_t)s->cfg.num_groups), (uint32_t)world,
        s->cfg.device_arena_bytes);
    if (st != DISCO_OK)
        return st;
    s->chan = (disco_chan_t){.kind = rings || s->cfg.transport == DISCO_TRANSPORT_RING
                                         ? DISCO_TRANSPORT_RING
                                         : DISCO_TRANSPORT_PIPE,
                             .world = world,
                             .self = -1,
                             .max_msg = s->cfg.max_msg,
                             .reply = s->reply_rings,
                             .cmd_fd = s->cmd_fd,
                             .reply_fd = s->reply_fd};
    if (!rings)
        return DISCO_OK;
    st = disco_ring_init(base + lay.r[DISCO_CTL_CMD].off, (size_t)lay.r[DISCO_CTL_CMD].size,
                         &lay.cmd_ring, &s->chan.cmd);
    if (st != DISCO_OK)
        return st;
    for (int i = 1; i < world; i++) {
        st = disco_ring_init(base + disco__ctl_reply_at(&lay, (uint32_t)i),
                             (size_t)lay.reply_stride, &lay.reply_ring, &s->reply_rings[i]);
        if (st != DISCO_OK)
            return st;
    }
    return DISCO_OK;
}

void disco__session_init_w0(struct disco_session *s)
{
    disco__worker_init(
        &s->w0, 0, s->world, &s->errbox[0], &s->heap,
        (struct disco__coll_area *)((char *)disco_segment_data(&s->seg) + s->ctl->coll_off),
        &s->w0_wait);
    s->w0.ngroups = (uint32_t)s->cfg.num_groups;
    s->w0.dev_area = disco__coll_dev_area(s->w0.coll, (uint32_t)s->world, s->w0.ngroups);
    s->w0.abandon = disco__session_abandon;
    s->w0.gid_base = s->gid_base;
    s->w0.gworld = s->gworld;
    s->w0.one_group = s->ggroups == 1;
    s->w0.abandon_ctx = s;
    /* Its status, for its kernels' progress only (workers/device/
     * ar_progress.h): the session writes the rest of it (session.c). */
    s->w0.stat = disco__stat_worker(s->stat, 0);
    s->w0.threaded = s->cfg.launch == DISCO_LAUNCH_THREAD;
    /* Worker 0 has no trace ring for its commands: it runs inline in
     * issue(), whose record of each command (enqueue, issued) is its
     * slice. Its in-worker collectives' nested records go to a ring in
     * the controller's memory (trace_ring.h, Nested records; NULL with
     * tracing off). */
    s->w0.trace = s->trace.w0_ring;
}

void disco__session_close_pipes(struct disco_session *s)
{
    for (int i = 1; i < s->world; i++) {
        if (s->cmd_fd != NULL && s->cmd_fd[i] >= 0)
            close(s->cmd_fd[i]);
        if (s->reply_fd != NULL && s->reply_fd[i] >= 0)
            close(s->reply_fd[i]);
        if (s->cmd_fd != NULL && s->reply_fd != NULL)
            s->cmd_fd[i] = s->reply_fd[i] = -1;
    }
}

disco_status_t disco__session_start_workers(struct disco_session *s)
{
    struct disco__procs_launch how = {.launch = s->cfg.launch,
                                      .worker_path = s->cfg.worker_path,
                                      .seg = &s->seg,
                                      .pipes = s->chan.kind == DISCO_TRANSPORT_PIPE,
                                      .cmd_fd = s->cmd_fd,
                                      .reply_fd = s->reply_fd};
    s->fork_spoiled_at_start = disco__device_fork_spoiled() != NULL;
    disco_status_t st = disco__procs_start(&s->procs, &how);
    if (st != DISCO_OK)
        return st;
    for (int i = 1; i < s->world; i++)
        if (s->chan.kind == DISCO_TRANSPORT_RING)
            disco_ring_set_reader_pid(&s->chan.cmd, (uint32_t)(i - 1), s->procs.pid[i]);
    return DISCO_OK;
}

static void free_session(struct disco_session *s)
{
    disco__bind_restore(&s->ctl_saved);
    disco__worker_fini(&s->w0);
    disco__trace_close(&s->trace);
    disco_plan_free(s->plan);
    disco__session_close_pipes(s);
    /* A worker thread that never ended (threads.c) may still touch the
     * segment: it is kept, mapped, for the rest of the process. */
    if (disco__procs_all_ended(&s->procs))
        disco_segment_close(&s->seg);
    free(s->reply_rings);
    free(s->cmd_fd);
    free(s->reply_fd);
    disco__procs_fini(&s->procs);
    disco__regs_fini(&s->regs);
    disco__libs_fini(&s->libs);
    free(s->worker_path);
    free(s->buf);
    free(s->reply);
    free(s);
}

/* One node's session: workers gid_base.. of gworld in all. */
static disco_status_t open_local(const disco_session_config_t *cfg, int gid_base, int gworld,
                                 int ggroups, disco_session_t **sess_out)
{
    disco_status_t st = check_config(cfg);
    if (st != DISCO_OK)
        return st;
    struct disco_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return disco_set_error(DISCO_E_NOMEM, "session");
    s->cfg = *cfg;
    if (s->cfg.call_timeout_ms == 0)
        s->cfg.call_timeout_ms = DEFAULT_TIMEOUT_MS;
    if (s->cfg.max_msg == 0)
        s->cfg.max_msg = DEFAULT_MAX_MSG;
    if (s->cfg.heap_bytes == 0)
        s->cfg.heap_bytes = default_heap();
    if (s->cfg.num_groups == 0)
        s->cfg.num_groups = 1;
    if (s->cfg.device_arena_bytes == 0)
        s->cfg.device_arena_bytes = DISCO_ARENA_DEFAULT_BYTES;
    s->world = cfg->num_workers;
    s->gid_base = gid_base;
    s->gworld = gworld;
    s->ggroups = ggroups;
    if ((st = disco_plan_make(&cfg->place, s->world, &s->plan)) != DISCO_OK) {
        free(s);
        return st;
    }
    pick_spin(&s->cfg, s->plan);
    s->regs.next = 1;
    uint64_t lib;
    if (disco__func_find("disco.load_library", &lib) == DISCO_OK) /* noted for recoveries */
        s->load_fn = disco__func_at(lib);
    s->seg.fd = -1;
    size_t n = (size_t)s->world;
    s->reply_rings = calloc(n, sizeof *s->reply_rings);
    s->cmd_fd = malloc(n * sizeof *s->cmd_fd);
    s->reply_fd = malloc(n * sizeof *s->reply_fd);
    /* The caller's string need not outlive open; a recovery spawns again. */
    if (cfg->worker_path != NULL)
        s->cfg.worker_path = s->worker_path = strdup(cfg->worker_path);
    s->buf = aligned_alloc(8, ((size_t)s->cfg.max_msg + 7u) & ~(size_t)7u);
    s->reply = aligned_alloc(8, DISCO_REPLY_MAX);
    if (!s->reply_rings || !s->cmd_fd || !s->reply_fd || !s->buf || !s->reply ||
        (cfg->worker_path != NULL && s->worker_path == NULL) ||
        disco__procs_init(&s->procs, s->world) != DISCO_OK) {
        free_session(s);
        return disco_set_error(DISCO_E_NOMEM, "session of %d workers", s->world);
    }
    s->procs.id_base = gid_base;
    for (size_t i = 0; i < n; i++)
        s->cmd_fd[i] = s->reply_fd[i] = -1;
    if ((st = make_segment(s)) != DISCO_OK) {
        free_session(s);
        return st;
    }
    s->wait = (disco_wait_t){.spin_ns = s->cfg.spin_ns,
                             .pause_ns = s->cfg.pause_ns,
                             .park_slice_ms = 5,
                             .check = controller_check,
                             .check_ctx = s};
    /* Worker 0 waits for the others in collectives like any wait of the
     * controller: it notices deaths; its deadline is the call timeout. */
    s->w0_wait = s->wait;
    s->w0_wait.timeout_ns = (int64_t)s->cfg.call_timeout_ms * 1000000;
    s->stat = (struct disco__stat_hdr *)((char *)disco_segment_data(&s->seg) + s->ctl->status_off);
    disco__session_watch_init(s);
    /* The heap's lock is waited for the same way: a stopped holder ends the
     * call with DISCO_E_TIMEOUT, a dead worker with its death. */
    disco_heap_set_wait(&s->heap, &s->w0_wait);
    disco__session_init_w0(s);
    if ((st = disco__session_start_workers(s)) != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        free_session(s);
        return disco_set_error(st, "%s", why);
    }
    /* The controller's thread is worker 0: whenever the plan binds it,
     * bind it, or the kernel is free to put it on worker 1's CPU, where
     * each waits for the other to be descheduled (2 workers on 2 cores:
     * a no-op call + sync has a median of 0.3 us either way, but a p99 of
     * 9-10 us floating against 0.6-1.0 us bound). Its placement is saved
     * first and given back at close: a library must not leave its caller's
     * thread pinned. Nor is it moved out of a set it was confined to
     * (taskset, a cpuset): then it is left where it is. It is bound after
     * the workers are forked, which would inherit its one CPU until they
     * bind themselves: 8 workers on 2 CPUs opened and closed in 3.7-4.3
     * ms that way, 2.3-3.1 ms unbound (issue 21). */
    const disco_place_entry_t *e0 = &s->plan->worker[0];
    bool bind0 = !s->cfg.place.leave_controller && (e0->cpus[0] != '\0' || e0->nodes[0] != '\0');
    if (bind0 && disco__bind_save(e0->nodes[0] != '\0', &s->ctl_saved) == DISCO_OK &&
        e0->cpus[0] != '\0' && !disco__bind_within(&s->ctl_saved, e0->cpus)) {
        disco__bind_restore(&s->ctl_saved); /* confined elsewhere: left alone */
        bind0 = false;
    }
    if (bind0 && (s->ctl_saved.tid == 0 || disco__bind_self(e0->cpus, e0->nodes) != DISCO_OK)) {
        /* As for a worker that cannot bind: said, not fatal. */
        if (getenv("DISCO_QUIET") == NULL)
            fprintf(stderr, "disco: warning: the controller's thread (worker 0) is not bound: %s\n",
                    disco_last_error());
        disco__bind_restore(&s->ctl_saved);
    }
    *sess_out = s;
    return DISCO_OK;
}

/* Across nodes: a session whose config spans the MPI job's processes.
 * The node's own workers are forked before MPI starts (disco__node_join
 * reads the place from the launcher's environment); then the link joins
 * the others. On rank 0 the session is returned; an agent serves its node
 * until the controller ends the session, then exits (session.h). */
static disco_status_t open_nodes(const disco_session_config_t *cfg, disco_session_t **sess_out)
{
    struct disco__node_place p;
    disco_status_t st = disco__node_join(cfg, &p);
    if (st != DISCO_OK)
        return st;
    disco_session_config_t local = *cfg;
    local.nodes = DISCO_NODES_LOCAL;
    local.num_workers = cfg->workers_per_node;
    int groups = cfg->num_groups > 0 ? cfg->num_groups : 1;
    local.num_groups = groups == 1 ? 1 : groups / p.nodes; /* 1: everyone, across nodes */
    disco_session_t *s;
    if ((st = open_local(&local, p.node * local.num_workers, p.nodes * local.num_workers, groups,
                         &s)) != DISCO_OK)
        return st;
    struct disco__node *n;
    if ((st = disco__node_start(cfg, &p, s->cfg.call_timeout_ms, &s->w0, &n)) != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        disco_session_close(s);
        return disco_set_error(st, "node %d: %s", p.node, why);
    }
    if (p.node == 0) {
        s->node = n;
        *sess_out = s;
        return DISCO_OK;
    }
    int code = disco__node_serve(s, n);
    disco_session_close(s);
    disco__node_stop(n, code == 0 || code == DISCO_NODE_EXIT_UNDRAINED); /* its goodbye */
    fflush(NULL);
    if (code == 0)
        exit(0);
    _exit(code); /* MPI could not finalize: none of its exit hooks either */
}

disco_status_t disco_session_open(const disco_session_config_t *cfg, disco_session_t **sess_out)
{
    if (cfg->nodes == DISCO_NODES_MPI && cfg->launch == DISCO_LAUNCH_THREAD)
        return disco_set_error(DISCO_E_UNSUPPORTED,
                               "launch mode thread: a session on one node only (cfg.nodes)");
    if (cfg->nodes == DISCO_NODES_MPI)
        return open_nodes(cfg, sess_out);
    if (cfg->nodes != DISCO_NODES_LOCAL)
        return disco_set_error(DISCO_E_INVAL, "cfg.nodes %d is unknown", (int)cfg->nodes);
    return open_local(cfg, 0, cfg->num_workers, cfg->num_groups > 0 ? cfg->num_groups : 1,
                      sess_out);
}

disco_status_t disco_session_shutdown(disco_session_t *s)
{
    if (s->state == DISCO_E_SHUTDOWN)
        return DISCO_OK;
    int grace = 0;
    size_t len = 0;
    disco_frame_hdr_t h = {.code = DISCO_CMD_SHUTDOWN, .seq = ++s->seq};
    bool framed =
        disco_frame_encode(h.code, h.seq, NULL, 0, s->buf, s->chan.max_msg, &len) == DISCO_OK;
    bool said = s->state == DISCO_OK && framed;
    if (s->node != NULL) {
        /* The other nodes first: they close theirs, then say goodbye. A
         * broken session tells the live ones too, so that they end now
         * rather than at their lease, but waits for nobody. */
        bool posted = framed && disco__node_post(s->node, s->buf, len) == DISCO_OK;
        disco__node_stop(s->node, said && posted);
        s->node = NULL;
    }
    if (said) {
        /* Ask politely; the ring may be full of work, so allow a grace. */
        s->wait.deadline_ns = 0;
        s->wait.timeout_ns = 2000000000LL;
        if (disco__chan_bcast(&s->chan, s->buf, (uint32_t)len, &s->wait, NULL) == DISCO_OK) {
            grace = 2000;
            /* Relaxed: a monitor's word (wstat.h); the shutdown is issued. */
            atomic_store_explicit(&s->stat->issued, h.seq, memory_order_relaxed);
        }
    }
    disco__procs_stop(&s->procs, grace);
    /* Worker 0 runs no command any more (every call meets DISCO_E_SHUTDOWN
     * from now on): its device tensors and arena go now, not at close, so
     * that this process's IPC table is free for another session while this
     * one is still referenced (test_gpu_session.c,
     * test_shutdown_releases_device). Its heap registers stay: views of
     * them keep the heap mapped until close. */
    disco__worker_drop_device(&s->w0);
    s->state = DISCO_E_SHUTDOWN;
    atomic_store_explicit(&s->ctl->broken, DISCO_E_SHUTDOWN, memory_order_release);
    return DISCO_OK;
}

void disco_session_close(disco_session_t *s)
{
    if (s == NULL)
        return;
    disco_session_shutdown(s);
    disco__trace_write_env(&s->trace, s->world, s->seq, s->state == DISCO_OK);
    free_session(s);
}

disco_status_t disco_session_trace(disco_session_t *s, disco_trace_t **out)
{
    return disco__trace_snapshot(&s->trace, s->world, s->seq, s->state == DISCO_OK, out);
}
