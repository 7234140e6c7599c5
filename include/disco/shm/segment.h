/*
 * disco/shm/segment.h - shared-memory segments.
 *
 * A segment is an anonymous memfd mapped MAP_SHARED. It is shared with forked
 * children by inheritance and with exec'd workers by passing the fd (created
 * close-on-exec; a spawner clears the flag in the child only). Nothing is ever
 * named in /dev/shm, so a crash cannot leave a segment behind: the memory goes
 * away with the last mapping and the last fd.
 *
 * The first page holds a header (magic + layout version + size); user data
 * starts at DISCO_SEGMENT_DATA_OFFSET, page-aligned. The memory is allocated
 * (fallocate) at creation: a size that cannot be backed fails there with
 * DISCO_E_NOSPACE, never with SIGBUS on a later touch. A segment created
 * partial backs only its first part; its creator backs the rest as it comes
 * into use and checks each step (the session's heap: disco_heap_init_lazy).
 *
 * A segment's memfd is sealed against shrinking and growing at creation
 * (DISCO_SEGMENT_SEALS), before any mapping: no process that maps it can
 * fault with SIGBUS because another truncated it. Attaching refuses a file
 * without these seals.
 *
 * The mapping address differs between processes that attach separately (it is
 * the same across fork). Structures inside a segment use offsets.
 */
#ifndef DISCO_SEGMENT_H
#define DISCO_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_SEGMENT_MAGIC       0x4745534f43534944ULL /* "DISCOSEG" */
#define DISCO_SEGMENT_LAYOUT      1u                    /* layout version in the segment's header */
#define DISCO_SEGMENT_DATA_OFFSET 4096u                 /* where the user's data begins */
/* The seals every segment carries (F_SEAL_SHRINK | F_SEAL_GROW, from
 * <fcntl.h>; spelled as numbers so that this header needs no _GNU_SOURCE). */
#define DISCO_SEGMENT_SEALS       (0x0002 | 0x0004)

/* Process-local handle; the caller owns its memory. */
typedef struct disco_segment {
    int fd;      /* memfd, close-on-exec */
    void *base;  /* start of the mapping (the header) */
    size_t size; /* bytes mapped, header included */
} disco_segment_t;

/** Creates a segment with at least data_size bytes of user data, all of it
 *  allocated now. name shows in /proc/PID/maps only ("memfd:name").
 *  Thread-safe. Returns DISCO_OK, DISCO_E_INVAL (size 0), DISCO_E_NOSPACE (the
 *  memory is not there: larger than what is available, or fallocate failed),
 *  DISCO_E_SYS (memfd_create/mmap failed). */
disco_status_t disco_segment_create(const char *name, size_t data_size, disco_segment_t *seg_out);

/** disco_segment_create, with only the header and the first backed bytes of
 *  data allocated now (rounded up to a page); the rest is a hole until its
 *  user backs it (fallocate, or MADV_POPULATE_WRITE through a mapping), and
 *  the whole size is still checked against the memory available. Thread-safe.
 *  Returns as disco_segment_create; DISCO_E_INVAL also for backed >
 *  data_size. */
disco_status_t disco_segment_create_partial(const char *name, size_t data_size, size_t backed,
                                            disco_segment_t *seg_out);

/** Backs (fallocate) len bytes of seg's data from data_off: what a partial
 *  segment's creator does for a part that it wants whole now. Thread-safe.
 *  Returns DISCO_OK, DISCO_E_INVAL (the range is not inside the segment, or
 *  seg has no fd), DISCO_E_NOSPACE. */
disco_status_t disco_segment_back(const disco_segment_t *seg, size_t data_off, size_t len);

/** Maps an existing segment from an fd (for instance one inherited across
 *  exec). The fd is duplicated; the caller keeps its own. Checks the seals
 *  (DISCO_SEGMENT_SEALS, before mapping), the magic, the layout version and
 *  the size. Thread-safe. Returns DISCO_OK, DISCO_E_SYS, DISCO_E_BAD_MAGIC
 *  (not a disco segment: unsealed, other layout version, or a size that
 *  disagrees with the file). */
disco_status_t disco_segment_attach(int fd, disco_segment_t *seg_out);

/** disco_segment_attach, mapped read-only (an observer's: a store through
 *  the mapping faults). Thread-safe. Returns as disco_segment_attach. */
disco_status_t disco_segment_attach_readonly(int fd, disco_segment_t *seg_out);

/** Whether total bytes can be backed now: no more than MemAvailable and
 *  than the cgroup's memory limit leaves. what names the memory in the
 *  message. Thread-safe. Returns DISCO_OK, DISCO_E_NOSPACE. */
disco_status_t disco_memory_check(uint64_t total, const char *what);

/** The machine's memory as a session may use it: MemTotal, or the cgroup's
 *  memory.max when that is lower; 0 when neither can be read. Thread-safe
 *  (reads /proc and /sys each call). */
uint64_t disco_memory_total(void);

/** The memory that can be backed now: MemAvailable, or what the cgroup's
 *  memory.max leaves when that is lower (disco_memory_check's figures); 0
 *  when neither can be read. Thread-safe (reads /proc and /sys each call). */
uint64_t disco_memory_room(void);

/** Unmaps and closes. Harmless on a zeroed or already closed handle.
 *  Not thread-safe against users of the same mapping. */
void disco_segment_close(disco_segment_t *seg);

/** First byte of user data (page-aligned). */
static inline void *disco_segment_data(const disco_segment_t *seg)
{
    return (char *)seg->base + DISCO_SEGMENT_DATA_OFFSET;
}

/** Bytes of user data. */
static inline size_t disco_segment_data_size(const disco_segment_t *seg)
{
    return seg->size - DISCO_SEGMENT_DATA_OFFSET;
}

#ifdef __cplusplus
}
#endif
#endif
