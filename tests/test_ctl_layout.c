/* test_ctl_layout.c - the control segment's layout (workers/core/ctl_layout.h):
 * its regions, the controller and the workers agreeing on it, and a worker
 * refusing a header that lies about it. */
#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/session/session_impl.h"
#include "workers/data/collective.h"
#include "workers/core/ctl_layout.h"
#include "workers/core/wstat.h"
#include "workers/core/trace_ring.h"
#include "disco/shm/heap.h"
#include "disco/shm/segment.h"
#include "disco/session.h"
#include "tests/testutil.h"

extern char **environ;

/* Calls fn on every geometry of a grid: 1, 2, 3, 8, 64 and 255 workers,
 * every group count that divides them, both transports, tracing on and
 * off, the smallest, default and largest max_msg, and heaps of the
 * smallest size, 16 MiB and 2^46 bytes (the largest a session accepts). */
static void each_geom(void (*fn)(const struct disco__ctl_geom *))
{
    static const uint32_t worlds[] = {1, 2, 3, 8, 64, 255};
    static const uint32_t msgs[] = {DISCO_CTL_MIN_MSG, 64u * 1024u, DISCO_CTL_MAX_MSG};
    const uint64_t heaps[] = {disco_heap_footprint(0), disco_heap_footprint(16u << 20),
                              disco_heap_footprint((size_t)1 << 46)};
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++)
        for (uint32_t ng = 1; ng <= worlds[w]; ng++)
            for (int k = 0; k < 2 * 2 * 3 * 3 && worlds[w] % ng == 0; k++) {
                struct disco__ctl_geom g = {.world = worlds[w],
                                            .num_groups = ng,
                                            .transport = (uint32_t)(k & 1),
                                            .trace = (k >> 1 & 1) != 0,
                                            .max_msg = msgs[k / 4 % 3],
                                            .heap_size = heaps[k / 12]};
                fn(&g);
            }
}

static void check_regions(const struct disco__ctl_geom *g)
{
    struct disco__ctl_layout l;
    CK_OK(disco__ctl_layout(g, &l));
    const struct disco__ctl_region *r = l.r;
    uint32_t w = g->world, others = w - 1;
    bool rings = g->transport == DISCO_TRANSPORT_RING && w > 1;
    ck_assert(l.rings == rings);
    /* Sizes: each region holds what it must. */
    ck_assert_uint_eq(r[DISCO_CTL_HEADER].off, 0);
    ck_assert_uint_eq(r[DISCO_CTL_HEADER].size, sizeof(struct disco__ctl));
    ck_assert_uint_eq(r[DISCO_CTL_ERRBOX].size, w * sizeof(struct disco__errbox));
    ck_assert_uint_eq(r[DISCO_CTL_CMD].size, rings ? disco_ring_footprint(&l.cmd_ring) : 0);
    if (rings) {
        ck_assert_uint_eq(l.cmd_ring.nreaders, others);
        ck_assert_uint_eq(l.cmd_ring.max_msg, g->max_msg);
        ck_assert_uint_ge(l.reply_stride, disco_ring_footprint(&l.reply_ring));
        ck_assert_uint_eq(l.reply_stride % DISCO_CACHE_LINE, 0);
        /* The last reply ring ends inside the region. */
        ck_assert_uint_le(disco__ctl_reply_at(&l, others) + l.reply_stride,
                          r[DISCO_CTL_REPLY].off + r[DISCO_CTL_REPLY].size);
    }
    ck_assert_uint_eq(r[DISCO_CTL_REPLY].size, rings ? others * l.reply_stride : 0);
    ck_assert_uint_eq(r[DISCO_CTL_BIND].size, w * sizeof(struct disco__bind));
    ck_assert_uint_eq(r[DISCO_CTL_STATUS].size,
                      sizeof(struct disco__stat_hdr) + w * sizeof(struct disco__wstat));
    ck_assert_uint_eq(r[DISCO_CTL_TRACE].size,
                      g->trace ? others * sizeof(struct disco__trace_ring) : 0);
    if (!g->trace)
        ck_assert_uint_eq(r[DISCO_CTL_TRACE].off, 0); /* trace_off 0: tracing off */
    ck_assert_uint_eq(r[DISCO_CTL_COLL].size, disco__coll_footprint(w, g->num_groups));
    ck_assert_uint_eq(r[DISCO_CTL_HEAP].size, g->heap_size);
    /* Alignment: what each region's structures and users need. */
    static const uint64_t align[DISCO_CTL_NREGIONS] = {
        [DISCO_CTL_HEADER] = _Alignof(struct disco__ctl),
        [DISCO_CTL_ERRBOX] = _Alignof(struct disco__errbox),
        [DISCO_CTL_CMD] = DISCO_CACHE_LINE, /* disco_ring_init's requirement */
        [DISCO_CTL_REPLY] = DISCO_CACHE_LINE,
        [DISCO_CTL_BIND] = _Alignof(struct disco__bind),
        [DISCO_CTL_STATUS] = _Alignof(struct disco__stat_hdr),
        [DISCO_CTL_TRACE] = _Alignof(struct disco__trace_ring),
        [DISCO_CTL_COLL] = _Alignof(struct disco__coll_area),
        [DISCO_CTL_HEAP] = 4096, /* a page, and DISCO_HEAP_BLOCK_HDR */
    };
    /* Order and overlap: the regions that are there follow each other in
     * the enum's order, none overlapping the next, all inside the total. */
    uint64_t end = 0;
    for (int i = 0; i < DISCO_CTL_NREGIONS; i++) {
        ck_assert_msg(r[i].off % align[i] == 0, "%s at %llu: not aligned to %llu",
                      disco__ctl_region_name(i), (unsigned long long)r[i].off,
                      (unsigned long long)align[i]);
        if (r[i].size == 0)
            continue;
        ck_assert_msg(r[i].off >= end, "%s at %llu overlaps the region before (ends at %llu)",
                      disco__ctl_region_name(i), (unsigned long long)r[i].off,
                      (unsigned long long)end);
        end = r[i].off + r[i].size;
        ck_assert_uint_le(end, l.total);
    }
    ck_assert_uint_eq(end, l.total); /* the heap ends the segment */

    /* What a worker reads back from the header the controller writes is
     * the same layout. (disco__ctl_read reads only the header: size is
     * what the segment would have, which for a 2^46-byte heap no test can
     * map.) */
    struct disco__ctl hdr;
    memset(&hdr, 0, sizeof hdr);
    disco__ctl_write(&hdr, &l);
    struct disco__ctl_layout back;
    CK_OK(disco__ctl_read(&hdr, (size_t)l.total, &back));
    ck_assert(memcmp(&back.geom, &l.geom, offsetof(struct disco__ctl_geom, trace)) == 0);
    ck_assert(back.geom.trace == l.geom.trace && back.geom.heap_size == l.geom.heap_size);
    ck_assert(memcmp(back.r, l.r, sizeof l.r) == 0);
    ck_assert(back.total == l.total && back.reply_stride == l.reply_stride);
}

/* Every region is where its size and alignment allow, none overlaps
 * another, all fit in the total, and the header the controller writes
 * reads back as the same layout, for every geometry of the grid (1 to 255
 * workers, the largest max_msg and heap included). */
START_TEST(test_regions)
{
    each_geom(check_regions);
}
END_TEST

/* A geometry out of range or too large to lay out is refused with its
 * field named, and the output is left alone. */
START_TEST(test_bad_geometry)
{
    const struct disco__ctl_geom ok = {.world = 4,
                                       .num_groups = 2,
                                       .transport = DISCO_TRANSPORT_RING,
                                       .max_msg = 65536,
                                       .trace = true,
                                       .heap_size = disco_heap_footprint(1u << 20)};
    struct {
        struct disco__ctl_geom g;
        disco_status_t want;
        const char *says;
    } bad[] = {
        {ok, DISCO_E_INVAL, "world 0"},         {ok, DISCO_E_INVAL, "world 256"},
        {ok, DISCO_E_INVAL, "0 groups"},        {ok, DISCO_E_INVAL, "3 groups"},
        {ok, DISCO_E_INVAL, "8 groups"},        {ok, DISCO_E_INVAL, "transport 2"},
        {ok, DISCO_E_INVAL, "max_msg 255"},     {ok, DISCO_E_INVAL, "max_msg 1073741825"},
        {ok, DISCO_E_INVAL, "heap of 0 bytes"}, {ok, DISCO_E_OVERFLOW, "overflow"},
        {ok, DISCO_E_OVERFLOW, "overflow"},
    };
    struct disco__ctl_layout l, untouched;
    CK_OK(disco__ctl_layout(&ok, &l));
    uint64_t heap_off = l.r[DISCO_CTL_HEAP].off;
    bad[0].g.world = 0;
    bad[1].g.world = 256;
    bad[2].g.num_groups = 0;
    bad[3].g.num_groups = 3;
    bad[4].g.num_groups = 8;
    bad[5].g.transport = 2;
    bad[6].g.max_msg = 255;
    bad[7].g.max_msg = DISCO_CTL_MAX_MSG + 1;
    bad[8].g.heap_size = 0;
    bad[9].g.heap_size = UINT64_MAX - 4095;           /* the heap's end wraps */
    bad[10].g.heap_size = UINT64_MAX - heap_off - 10; /* its end rounds up past 2^64 */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&l, 0xab, sizeof l);
        memcpy(&untouched, &l, sizeof l);
        CK_STATUS(disco__ctl_layout(&bad[i].g, &l), bad[i].want);
        CK_HAS(bad[i].says);
        ck_assert_msg(memcmp(&l, &untouched, sizeof l) == 0, "case %zu wrote its output", i);
    }
}
END_TEST

/* disco__ctl_read refuses a segment too small for the header, or for the
 * layout its header describes, before reading past either. */
START_TEST(test_read_short_segment)
{
    const struct disco__ctl_geom g = {.world = 3,
                                      .num_groups = 1,
                                      .transport = DISCO_TRANSPORT_PIPE,
                                      .max_msg = 65536,
                                      .trace = true,
                                      .heap_size = disco_heap_footprint(1u << 20)};
    struct disco__ctl_layout l, back;
    CK_OK(disco__ctl_layout(&g, &l));
    struct disco__ctl hdr;
    memset(&hdr, 0, sizeof hdr);
    disco__ctl_write(&hdr, &l);
    CK_STATUS(disco__ctl_read(&hdr, sizeof hdr - 1, &back), DISCO_E_BAD_MAGIC);
    CK_HAS("smaller than its header");
    CK_STATUS(disco__ctl_read(NULL, 0, &back), DISCO_E_BAD_MAGIC);
    CK_STATUS(disco__ctl_read(&hdr, (size_t)l.total - 1, &back), DISCO_E_OVERFLOW);
    CK_HAS("needs");
    CK_OK(disco__ctl_read(&hdr, (size_t)l.total, &back));
}
END_TEST

/* Sessions of 1, 2, 3 and 8 workers, with both transports, both launch
 * modes, tracing on and off, several group counts and large max_msg and
 * heap sizes. */
static const struct {
    int workers, groups;
    disco_session_transport_t transport;
    disco_launch_t launch;
    bool trace_off;
    uint32_t max_msg;
    uint64_t heap;
} sessions[] = {
    {1, 1, DISCO_TRANSPORT_RING, DISCO_LAUNCH_FORK, false, 0, 0},
    {2, 2, DISCO_TRANSPORT_PIPE, DISCO_LAUNCH_SPAWN, true, 0, 0},
    {3, 3, DISCO_TRANSPORT_RING, DISCO_LAUNCH_SPAWN, false, 1u << 24, 0},
    {3, 1, DISCO_TRANSPORT_PIPE, DISCO_LAUNCH_FORK, false, 1u << 24, 64u << 20},
    {8, 4, DISCO_TRANSPORT_RING, DISCO_LAUNCH_FORK, false, 0, 64u << 20},
    {8, 2, DISCO_TRANSPORT_RING, DISCO_LAUNCH_SPAWN, true, 1u << 20, 0},
};

/* The controller and its workers use the same layout: every worker of a
 * session accepts the header (a call and a sync on each reach it and come
 * back through its reply ring), the controller's own structures lie where
 * the function puts them, and the worker's reading of the header (the same
 * disco__ctl_read each worker runs at start) is the layout computed from
 * the session's configuration. */
START_TEST(test_session_agrees)
{
    disco_session_config_t cfg = disco_session_config_default(sessions[_i].workers);
    cfg.num_groups = sessions[_i].groups;
    cfg.transport = sessions[_i].transport;
    cfg.launch = sessions[_i].launch;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.trace_off = sessions[_i].trace_off;
    cfg.max_msg = sessions[_i].max_msg;
    cfg.heap_bytes = sessions[_i].heap;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &r));
    for (int w = 0; w < cfg.num_workers; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, r));

    struct disco__ctl_geom g = {.world = (uint32_t)s->world,
                                .num_groups = (uint32_t)s->cfg.num_groups,
                                .transport = (uint32_t)s->cfg.transport,
                                .max_msg = s->cfg.max_msg,
                                .trace = !s->cfg.trace_off,
                                .heap_size = disco_heap_footprint(s->cfg.heap_bytes)};
    struct disco__ctl_layout want, got;
    CK_OK(disco__ctl_layout(&g, &want));
    char *base = disco_segment_data(&s->seg);
    CK_OK(disco__ctl_read(base, disco_segment_data_size(&s->seg), &got));
    ck_assert(memcmp(got.r, want.r, sizeof want.r) == 0);
    ck_assert(got.total == want.total && got.reply_stride == want.reply_stride);
    ck_assert(got.rings == want.rings && got.geom.world == g.world &&
              got.geom.num_groups == g.num_groups && got.geom.max_msg == g.max_msg &&
              got.geom.trace == g.trace && got.geom.heap_size == g.heap_size);
    ck_assert_uint_le(want.total, disco_segment_data_size(&s->seg));
    ck_assert_ptr_eq(s->errbox, base + want.r[DISCO_CTL_ERRBOX].off);
    ck_assert_ptr_eq(s->w0.coll, base + want.r[DISCO_CTL_COLL].off);
    if (want.rings) {
        ck_assert_ptr_eq(s->chan.cmd.sh, base + want.r[DISCO_CTL_CMD].off);
        for (int i = 1; i < s->world; i++)
            ck_assert_ptr_eq(s->reply_rings[i].sh, base + disco__ctl_reply_at(&want, (uint32_t)i));
    }
    disco_session_close(s);
}
END_TEST

/* Starts disco-worker as worker 1 of the segment seg, as spawn mode does
 * (no pipes); returns its exit code and its standard error in err. */
static int run_worker(const disco_segment_t *seg, char *err, size_t cap)
{
    enum { SEG_FD = 10 };
    int p[2];
    ck_assert(pipe2(p, O_CLOEXEC) == 0);
    int fd = fcntl(seg->fd, F_DUPFD_CLOEXEC, SEG_FD + 1);
    ck_assert(fd > SEG_FD);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, SEG_FD); /* dup2 clears close-on-exec */
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    char a_fd[16];
    snprintf(a_fd, sizeof a_fd, "%d", (int)SEG_FD);
    char *argv[] = {DISCO_TEST_WORKER, "--disco-fd", a_fd, "--disco-worker", "1", NULL};
    pid_t pid;
    int e = posix_spawn(&pid, DISCO_TEST_WORKER, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    close(p[1]);
    ck_assert_msg(e == 0, "posix_spawn %s: %s", DISCO_TEST_WORKER, strerror(e));
    size_t n = 0;
    ssize_t k;
    while ((k = read(p[0], err + n, cap - 1 - n)) > 0 || (k < 0 && errno == EINTR))
        n += k > 0 ? (size_t)k : 0;
    err[n] = '\0';
    close(p[0]);
    int ws;
    ck_assert(waitpid(pid, &ws, 0) == pid);
    ck_assert_msg(WIFEXITED(ws), "worker ended by signal %d: %s", WTERMSIG(ws), err);
    return WEXITSTATUS(ws);
}

/* The header lies, one field at a time (case 0: it does not); what the
 * worker must say. */
static const char *lie(struct disco__ctl *c, const struct disco__ctl_layout *l, int i)
{
    switch (i) {
    case 1:
        c->coll_off += 64;
        return "coll_off is";
    case 2:
        c->heap_off = UINT64_C(1) << 60;
        return "heap_off is";
    case 3:
        c->reply_size = 64;
        return "reply_size is";
    case 4:
        c->cmd_size += 4096;
        return "cmd_size is";
    case 5:
        c->bind_off = 0;
        return "bind_off is";
    case 6:
        c->errbox_off += 64;
        return "errbox_off is";
    case 7:
        c->trace_off = 0;
        return "coll_off is"; /* without trace rings, coll moves down */
    case 8:
        c->world = 255;
        return "for 255 workers";
    case 9:
        c->world = 0;
        return "world 0";
    case 10:
        c->num_groups = 2;
        return "groups do not divide";
    case 11:
        c->transport = 7;
        return "transport 7";
    case 12:
        c->max_msg = UINT32_MAX;
        return "max_msg 4294967295";
    case 13:
        c->heap_size = UINT64_MAX - 4095;
        return "overflow";
    case 14:
        c->magic ^= 1;
        return "not a disco control segment";
    case 15:
        c->layout = DISCO_CTL_LAYOUT + 1;
        return "not a disco control segment";
    case 16: {
        /* A consistent lie: every offset right for a heap 64 times as
         * large, which the segment does not hold. */
        struct disco__ctl_geom g = l->geom;
        struct disco__ctl_layout big;
        g.heap_size *= 64;
        CK_OK(disco__ctl_layout(&g, &big));
        disco__ctl_write(c, &big);
        return "needs";
    }
    case 17:
        c->gworld = 5; /* a session across nodes of 3 workers cannot have 5 */
        return "does not fit 3 workers a node";
    case 18:
        c->gid_base = 6, c->gworld = 6; /* node 2 of a session of 2 nodes */
        return "does not fit 3 workers a node";
    default:
        return NULL;
    }
}
#define NLIES 19

/* A spawned worker whose segment's header lies about the layout (an
 * offset, a size, the geometry, the magic, or a heap the segment does not
 * hold) refuses it at start, with exit code 2 and a message naming the
 * field, before it uses any offset; with the true header it gets past the
 * check (and stops at the controller check: exit code 1, nothing said). */
START_TEST(test_worker_refuses_lying_header)
{
    const struct disco__ctl_geom g = {.world = 3,
                                      .num_groups = 3,
                                      .transport = DISCO_TRANSPORT_RING,
                                      .max_msg = 65536,
                                      .trace = true,
                                      .heap_size = disco_heap_footprint(1u << 20)};
    struct disco__ctl_layout l;
    CK_OK(disco__ctl_layout(&g, &l));
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-ctl", (size_t)l.total, &seg));
    struct disco__ctl *c = disco_segment_data(&seg);
    disco__ctl_write(c, &l);
    c->controller_pid = 1; /* not the worker's parent */
    const char *says = lie(c, &l, _i);
    char err[2048];
    int rc = run_worker(&seg, err, sizeof err);
    disco_segment_close(&seg);
    if (says == NULL) {
        ck_assert_msg(rc == 1 && err[0] == '\0', "true header: exit %d, said: %s", rc, err);
        return;
    }
    ck_assert_msg(rc == 2, "lie %d: exit %d (want 2), said: %s", _i, rc, err);
    ck_assert_msg(strncmp(err, "disco worker 1: ", 16) == 0 && strstr(err, says) != NULL,
                  "lie %d: said \"%s\", not \"%s\"", _i, err, says);
}
END_TEST

Suite *suite_ctl_layout(void)
{
    Suite *s = suite_create("ctl_layout");
    TCase *tc = tcase_create("ctl_layout");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_regions);
    tcase_add_test(tc, test_bad_geometry);
    tcase_add_test(tc, test_read_short_segment);
    tcase_add_loop_test(tc, test_session_agrees, 0, (int)(sizeof sessions / sizeof sessions[0]));
    tcase_add_loop_test(tc, test_worker_refuses_lying_header, 0, NLIES);
    suite_add_tcase(s, tc);
    return s;
}
