/* ctl_layout.c - the control segment's layout, computed once for the
 * controller and the workers (see ctl_layout.h and protocol.h). */
#include "workers/core/ctl_layout.h"

#include <string.h>

#include "disco/shm/heap.h"
#include "disco/session.h"
#include "workers/data/collective.h"
#include "workers/core/trace_ring.h"
#include "workers/core/wstat.h"

#define LINE 64u /* every region starts on a cache line; the heap on a page */

static const char *const region_name[DISCO_CTL_NREGIONS] = {
    [DISCO_CTL_HEADER] = "header",     [DISCO_CTL_ERRBOX] = "error boxes",
    [DISCO_CTL_CMD] = "command ring",  [DISCO_CTL_REPLY] = "reply rings",
    [DISCO_CTL_BIND] = "bindings",     [DISCO_CTL_STATUS] = "status",
    [DISCO_CTL_TRACE] = "trace rings", [DISCO_CTL_COLL] = "collective area",
    [DISCO_CTL_HEAP] = "heap",
};

const char *disco__ctl_region_name(int id)
{
    return id >= 0 && id < DISCO_CTL_NREGIONS ? region_name[id] : "?";
}

/* *v rounded up to a multiple of a (a power of two); false if that wraps. */
static bool align_up(uint64_t *v, uint64_t a)
{
    uint64_t t;
    if (__builtin_add_overflow(*v, a - 1, &t))
        return false;
    *v = t & ~(a - 1);
    return true;
}

/* Puts a region of size bytes at *at rounded up to align, and moves *at to
 * the next cache line after it; false if an offset wraps. */
static bool place(uint64_t *at, uint64_t align, uint64_t size, struct disco__ctl_region *r)
{
    uint64_t off = *at, end;
    if (!align_up(&off, align) || __builtin_add_overflow(off, size, &end) || !align_up(&end, LINE))
        return false;
    r->off = off;
    r->size = size;
    *at = end;
    return true;
}

/* n elements of each bytes; false if that wraps. */
static bool times(uint64_t n, uint64_t each, uint64_t *out)
{
    return !__builtin_mul_overflow(n, each, out);
}

static disco_status_t check_geom(const struct disco__ctl_geom *g)
{
    if (g->world < 1 || g->world > DISCO_MAX_WORKERS)
        return disco_set_error(DISCO_E_INVAL, "control segment layout: world %u: must be 1..%d",
                               g->world, DISCO_MAX_WORKERS);
    if (g->num_groups < 1 || g->num_groups > g->world || g->world % g->num_groups != 0)
        return disco_set_error(DISCO_E_INVAL,
                               "control segment layout: %u groups do not divide %u workers",
                               g->num_groups, g->world);
    if (g->transport != DISCO_TRANSPORT_RING && g->transport != DISCO_TRANSPORT_PIPE)
        return disco_set_error(DISCO_E_INVAL, "control segment layout: transport %u is unknown",
                               g->transport);
    if (g->max_msg < DISCO_CTL_MIN_MSG || g->max_msg > DISCO_CTL_MAX_MSG)
        return disco_set_error(DISCO_E_INVAL, "control segment layout: max_msg %u: must be %u..%u",
                               g->max_msg, DISCO_CTL_MIN_MSG, DISCO_CTL_MAX_MSG);
    if (g->heap_size < disco_heap_footprint(0))
        return disco_set_error(DISCO_E_INVAL,
                               "control segment layout: heap of %llu bytes: at least %zu",
                               (unsigned long long)g->heap_size, disco_heap_footprint(0));
    return DISCO_OK;
}

disco_status_t disco__ctl_layout(const struct disco__ctl_geom *g,
                                 struct disco__ctl_layout *layout_out)
{
    disco_status_t st = check_geom(g);
    if (st != DISCO_OK)
        return st;
    struct disco__ctl_layout l;
    memset(&l, 0, sizeof l);
    l.geom = *g;
    uint32_t world = g->world, others = world - 1;
    l.rings = g->transport == DISCO_TRANSPORT_RING && world > 1;
    l.cmd_ring = (disco_ring_config_t){.nslots = DISCO_CMD_SLOTS,
                                       .slot_size = DISCO_SLOT_SIZE,
                                       .nreaders = others > 0 ? others : 1,
                                       .max_msg = g->max_msg,
                                       .batch = DISCO_CMD_BATCH};
    l.reply_ring = (disco_ring_config_t){.nslots = DISCO_REPLY_SLOTS,
                                         .slot_size = DISCO_SLOT_SIZE,
                                         .nreaders = 1,
                                         .max_msg = DISCO_REPLY_MAX};
    uint64_t cmd_size = 0, errbox_size, reply_size = 0, bind_size, trace_size = 0;
    if (l.rings) {
        cmd_size = disco_ring_footprint(&l.cmd_ring);
        l.reply_stride = disco_ring_footprint(&l.reply_ring);
        if (cmd_size == 0 || l.reply_stride == 0)
            return disco_set_error(DISCO_E_INVAL, "control segment layout: ring geometry");
    }
    uint64_t at = 0;
    bool ok = align_up(&l.reply_stride, LINE) && times(others, l.reply_stride, &reply_size) &&
              times(world, sizeof(struct disco__errbox), &errbox_size) &&
              times(world, sizeof(struct disco__bind), &bind_size) &&
              (!g->trace || times(others, sizeof(struct disco__trace_ring), &trace_size)) &&
              place(&at, LINE, sizeof(struct disco__ctl), &l.r[DISCO_CTL_HEADER]) &&
              place(&at, LINE, errbox_size, &l.r[DISCO_CTL_ERRBOX]) &&
              place(&at, LINE, cmd_size, &l.r[DISCO_CTL_CMD]) &&
              place(&at, LINE, reply_size, &l.r[DISCO_CTL_REPLY]) &&
              place(&at, LINE, bind_size, &l.r[DISCO_CTL_BIND]) &&
              place(&at, LINE, disco__stat_size(world), &l.r[DISCO_CTL_STATUS]) &&
              (!g->trace || place(&at, LINE, trace_size, &l.r[DISCO_CTL_TRACE])) &&
              place(&at, LINE, disco__coll_footprint(world, g->num_groups), &l.r[DISCO_CTL_COLL]) &&
              place(&at, DISCO_CTL_HEAP_ALIGN, g->heap_size, &l.r[DISCO_CTL_HEAP]) &&
              !__builtin_add_overflow(l.r[DISCO_CTL_HEAP].off, g->heap_size, &l.total) &&
              l.total <= SIZE_MAX;
    if (!ok)
        return disco_set_error(DISCO_E_OVERFLOW,
                               "control segment layout: %u workers and a heap of %llu bytes "
                               "overflow its size",
                               world, (unsigned long long)g->heap_size);
    *layout_out = l;
    return DISCO_OK;
}

void disco__ctl_write(struct disco__ctl *ctl, const struct disco__ctl_layout *l)
{
    ctl->magic = DISCO_CTL_MAGIC;
    ctl->layout = DISCO_CTL_LAYOUT;
    ctl->world = l->geom.world;
    ctl->transport = l->geom.transport;
    ctl->max_msg = l->geom.max_msg;
    ctl->num_groups = l->geom.num_groups;
    ctl->gid_base = 0; /* one node; a session across nodes sets its place after */
    ctl->gworld = l->geom.world;
    ctl->ggroups = l->geom.num_groups;
    ctl->heap_size = l->geom.heap_size;
    ctl->errbox_off = l->r[DISCO_CTL_ERRBOX].off;
    ctl->cmd_off = l->r[DISCO_CTL_CMD].off;
    ctl->cmd_size = l->r[DISCO_CTL_CMD].size;
    ctl->reply_off = l->r[DISCO_CTL_REPLY].off;
    ctl->reply_size = l->reply_stride;
    ctl->bind_off = l->r[DISCO_CTL_BIND].off;
    ctl->status_off = l->r[DISCO_CTL_STATUS].off;
    ctl->trace_off = l->r[DISCO_CTL_TRACE].off;
    ctl->coll_off = l->r[DISCO_CTL_COLL].off;
    ctl->heap_off = l->r[DISCO_CTL_HEAP].off;
}

/* The header's fields that follow from the geometry, for disco__ctl_read. */
#define FIELD(f)                                                                                   \
    {                                                                                              \
#f, offsetof(struct disco__ctl, f)                                                         \
    }
static const struct {
    const char *name;
    size_t at;
} derived[] = {FIELD(errbox_off), FIELD(cmd_off),  FIELD(cmd_size),   FIELD(reply_off),
               FIELD(reply_size), FIELD(bind_off), FIELD(status_off), FIELD(trace_off),
               FIELD(coll_off),   FIELD(heap_off)};
#undef FIELD

disco_status_t disco__ctl_read(const void *data, size_t size, struct disco__ctl_layout *layout_out)
{
    const struct disco__ctl *h = data;
    if (data == NULL || size < sizeof *h)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "control segment of %zu bytes: smaller than its header (%zu)", size,
                               sizeof *h);
    if (h->magic != DISCO_CTL_MAGIC || h->layout != DISCO_CTL_LAYOUT)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "not a disco control segment of layout %u (magic %#llx, layout %u)",
                               DISCO_CTL_LAYOUT, (unsigned long long)h->magic, h->layout);
    /* Each field is read once: the layout is computed from these copies. */
    struct disco__ctl_geom g = {.world = h->world,
                                .num_groups = h->num_groups,
                                .transport = h->transport,
                                .max_msg = h->max_msg,
                                .trace = h->trace_off != 0,
                                .heap_size = h->heap_size};
    struct disco__ctl_layout l;
    disco_status_t st = disco__ctl_layout(&g, &l);
    if (st != DISCO_OK)
        return st;
    struct disco__ctl want;
    memset(&want, 0, sizeof want);
    disco__ctl_write(&want, &l);
    for (size_t i = 0; i < sizeof derived / sizeof derived[0]; i++) {
        uint64_t got, exp;
        memcpy(&got, (const char *)data + derived[i].at, sizeof got);
        memcpy(&exp, (const char *)&want + derived[i].at, sizeof exp);
        if (got != exp)
            return disco_set_error(DISCO_E_BAD_MAGIC,
                                   "control segment header: %s is %llu, but layout %u gives "
                                   "%llu for %u workers",
                                   derived[i].name, (unsigned long long)got, DISCO_CTL_LAYOUT,
                                   (unsigned long long)exp, g.world);
    }
    if (l.total > size)
        return disco_set_error(DISCO_E_OVERFLOW,
                               "control segment of %zu bytes: its layout needs %llu", size,
                               (unsigned long long)l.total);
    *layout_out = l;
    return DISCO_OK;
}
