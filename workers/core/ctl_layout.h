/*
 * ctl_layout.h - where each region of a session's control segment lies
 * (internal): the one computation of the layout, used by the controller,
 * which creates and formats the segment, and by every worker, which checks
 * the header it finds against it (protocol.h has the table of regions).
 *
 * Thread-safe: disco__ctl_layout and disco__ctl_read are pure functions
 * of their arguments (disco__ctl_read reads the header of a segment whose
 * header no one writes after the workers start, except its broken word,
 * which it does not read).
 */
#ifndef DISCO_WORKERS_CTL_LAYOUT_H
#define DISCO_WORKERS_CTL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/shm/ring.h"
#include "disco/status.h"
#include "workers/core/protocol.h"

/* The regions, in the order they lie in the segment. */
enum disco__ctl_region_id {
    DISCO_CTL_HEADER, /* struct disco__ctl */
    DISCO_CTL_ERRBOX, /* struct disco__errbox[world] */
    DISCO_CTL_CMD,    /* the command ring (rings only) */
    DISCO_CTL_REPLY,  /* world - 1 reply rings, reply_stride bytes apart (rings only) */
    DISCO_CTL_BIND,   /* struct disco__bind[world] */
    DISCO_CTL_STATUS, /* struct disco__stat_hdr, then struct disco__wstat[world] */
    DISCO_CTL_TRACE,  /* struct disco__trace_ring[world - 1] (tracing only) */
    DISCO_CTL_COLL,   /* struct disco__coll_area and what follows it */
    DISCO_CTL_HEAP,   /* the shared heap */
    DISCO_CTL_NREGIONS,
};

/* What the layout follows from: the session's geometry. */
struct disco__ctl_geom {
    uint32_t world;      /* workers, worker 0 included: 1..DISCO_MAX_WORKERS */
    uint32_t num_groups; /* 1..world, dividing world */
    uint32_t transport;  /* DISCO_TRANSPORT_RING or DISCO_TRANSPORT_PIPE */
    uint32_t max_msg;    /* largest command frame: DISCO_CTL_MIN_MSG..DISCO_CTL_MAX_MSG */
    bool trace;          /* the trace rings are there */
    uint64_t heap_size;  /* bytes of the heap region (disco_heap_footprint of its capacity) */
};

/* One region: size bytes from off (from the segment's data start). A
 * region that is absent has size 0 (and, for the trace rings, off 0). */
struct disco__ctl_region {
    uint64_t off;
    uint64_t size;
};

struct disco__ctl_layout {
    struct disco__ctl_geom geom;
    bool rings;                     /* ring transport with workers besides worker 0 */
    disco_ring_config_t cmd_ring;   /* the command ring's geometry (rings) */
    disco_ring_config_t reply_ring; /* each reply ring's geometry (rings) */
    uint64_t reply_stride;          /* bytes from one reply ring to the next (rings) */
    struct disco__ctl_region r[DISCO_CTL_NREGIONS];
    uint64_t total; /* bytes the segment needs */
};

/** Name of region id ("errbox", "heap", ...), for messages. */
const char *disco__ctl_region_name(int id);

/** Computes the layout of geometry g into *layout_out. Every size and
 *  offset is computed with overflow checks. Thread-safe.
 *  Returns DISCO_OK; DISCO_E_INVAL for a geometry field out of its range
 *  (named in disco_last_error); DISCO_E_OVERFLOW if a size or the total
 *  does not fit in 64 bits or in size_t. */
disco_status_t disco__ctl_layout(const struct disco__ctl_geom *g,
                                 struct disco__ctl_layout *layout_out);

/** Writes the header's magic, layout version, geometry and every offset
 *  and size of l into ctl (the controller, before any worker starts; the
 *  controller's pid, the wait settings and the broken word are the
 *  caller's). Not thread-safe with readers of ctl. */
void disco__ctl_write(struct disco__ctl *ctl, const struct disco__ctl_layout *l);

/** Reads the header at data (a control segment of size bytes), recomputes
 *  the layout from the geometry it records and checks that every offset
 *  and size it records is the computed one and that the layout fits in
 *  size bytes; *layout_out is the computed layout (a worker uses only it,
 *  never the header's offsets). Thread-safe (see the top of this file).
 *  Returns DISCO_OK; DISCO_E_BAD_MAGIC if the segment is too small for a
 *  header, is not a control segment, has another layout version, or
 *  records an offset or size other than the computed one; DISCO_E_INVAL or
 *  DISCO_E_OVERFLOW as disco__ctl_layout for the recorded geometry;
 *  DISCO_E_OVERFLOW if the layout needs more than size bytes. */
disco_status_t disco__ctl_read(const void *data, size_t size, struct disco__ctl_layout *layout_out);

/** Offset of reply ring i (1..world-1) in layout l. */
static inline uint64_t disco__ctl_reply_at(const struct disco__ctl_layout *l, uint32_t i)
{
    return l->r[DISCO_CTL_REPLY].off + (uint64_t)(i - 1) * l->reply_stride;
}

#endif
