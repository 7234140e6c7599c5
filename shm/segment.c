/* segment.c - memfd segments with a checked header, backed at creation (all
 * of it, or a first part that the caller backs the rest of as it is used). */
#include "disco/shm/segment.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/segment_fork.h"

_Static_assert(DISCO_SEGMENT_SEALS == (F_SEAL_SHRINK | F_SEAL_GROW), "the seals' numbers");

struct segment_header {
    uint64_t magic;
    uint32_t layout;
    uint32_t data_offset;
    uint64_t size; /* bytes mapped, header included */
};

/* ---- every mapping of this process, for forked workers ----
 *
 * A forked child inherits every mapping of its parent. A session's worker
 * needs only its own session's segment; all others (earlier sessions',
 * RPC transports') it drops at once (disco__segment_unmap_others), or a
 * closed session's memory would stay alive as long as any later session's
 * workers. A fixed table, not a list under a lock: the child reads it right
 * after fork, when a lock held by another thread of the parent would never
 * be released.
 *
 * Slot protocol: FREE -> BUSY (claimed by one thread, CAS) -> fields written
 * -> LIVE (release store, T1). A reader takes a slot only when its state
 * reads LIVE (acquire, pairs with T1) and then reads the fields. Removal:
 * LIVE -> BUSY (CAS, only by the thread that closes that mapping) -> FREE.
 * The fields are atomics (relaxed) so that a reader racing a removal reads
 * a stale value, never a torn one; a child never races anyone (it has one
 * thread), and a slot caught BUSY at fork is skipped: that mapping is left
 * in the child. A table that is full leaves later mappings untracked (kept
 * by children too); 1024 live segments in one process is far more than any
 * use here. */
#define TRACK_SLOTS 1024
enum { SLOT_FREE, SLOT_BUSY, SLOT_LIVE };
static struct tracked {
    _Atomic int state;
    _Atomic uintptr_t base;
    _Atomic size_t size;
} tracked[TRACK_SLOTS];

static void track(void *base, size_t size)
{
    for (int i = 0; i < TRACK_SLOTS; i++) {
        int free_slot = SLOT_FREE;
        /* Relaxed on success is enough: the claim publishes nothing; the
         * LIVE store below does (T1). */
        if (atomic_compare_exchange_strong_explicit(&tracked[i].state, &free_slot, SLOT_BUSY,
                                                    memory_order_relaxed, memory_order_relaxed)) {
            atomic_store_explicit(&tracked[i].base, (uintptr_t)base, memory_order_relaxed);
            atomic_store_explicit(&tracked[i].size, size, memory_order_relaxed);
            /* T1: release, pairs with the acquire loads of readers. */
            atomic_store_explicit(&tracked[i].state, SLOT_LIVE, memory_order_release);
            return;
        }
    }
}

static void untrack(void *base)
{
    for (int i = 0; i < TRACK_SLOTS; i++) {
        int live = SLOT_LIVE;
        /* Acquire on the state (pairs with T1) before the base is compared. */
        if (atomic_load_explicit(&tracked[i].state, memory_order_acquire) != SLOT_LIVE ||
            atomic_load_explicit(&tracked[i].base, memory_order_relaxed) != (uintptr_t)base)
            continue;
        /* Only the closing thread removes this base: the CAS cannot lose
         * to another remover of the same mapping. Relaxed: nothing is read
         * after it. */
        if (atomic_compare_exchange_strong_explicit(&tracked[i].state, &live, SLOT_BUSY,
                                                    memory_order_relaxed, memory_order_relaxed)) {
            atomic_store_explicit(&tracked[i].base, 0, memory_order_relaxed);
            /* Release: the cleared fields before the slot is reused. */
            atomic_store_explicit(&tracked[i].state, SLOT_FREE, memory_order_release);
            return;
        }
    }
}

void disco__segment_unmap_others(const disco_segment_t *keep)
{
    for (int i = 0; i < TRACK_SLOTS; i++) {
        /* Acquire: pairs with T1, the fields of a LIVE slot are complete. */
        if (atomic_load_explicit(&tracked[i].state, memory_order_acquire) != SLOT_LIVE)
            continue;
        void *base = (void *)atomic_load_explicit(&tracked[i].base, memory_order_relaxed);
        size_t size = atomic_load_explicit(&tracked[i].size, memory_order_relaxed);
        if (keep != NULL && base == keep->base)
            continue;
        munmap(base, size);
        atomic_store_explicit(&tracked[i].state, SLOT_FREE, memory_order_relaxed);
    }
}

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* Reads a "Key: N kB" line of /proc/meminfo; returns bytes or 0 if absent. */
static uint64_t meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (f == NULL)
        return 0;
    char line[256];
    uint64_t kb = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            sscanf(line + klen + 1, "%" SCNu64, &kb);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

/* Room left under this cgroup's memory.max (v2); UINT64_MAX when unlimited
 * or unknown. */
static uint64_t cgroup_room(void)
{
    uint64_t max = 0, cur = 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "re");
    if (f == NULL)
        return UINT64_MAX;
    int ok = fscanf(f, "%" SCNu64, &max) == 1;
    fclose(f);
    if (!ok)
        return UINT64_MAX; /* "max" */
    f = fopen("/sys/fs/cgroup/memory.current", "re");
    if (f == NULL)
        return UINT64_MAX;
    ok = fscanf(f, "%" SCNu64, &cur) == 1;
    fclose(f);
    if (!ok || cur >= max)
        return ok ? 0 : UINT64_MAX;
    return max - cur;
}

/* fallocate on a memfd allocates page by page and, asked for more than the
 * machine has, ends in the OOM killer rather than an error. Refuse sizes that
 * cannot fit before trying. */
disco_status_t disco_memory_check(uint64_t total, const char *what)
{
    uint64_t avail = meminfo_bytes("MemAvailable");
    if (avail != 0 && total > avail)
        return disco_set_error(
            DISCO_E_NOSPACE, "%s of %" PRIu64 " bytes exceeds available memory (%" PRIu64 " bytes)",
            what, total, avail);
    uint64_t room = cgroup_room();
    if (total > room)
        return disco_set_error(DISCO_E_NOSPACE,
                               "%s of %" PRIu64 " bytes exceeds the cgroup memory left (%" PRIu64
                               " bytes)",
                               what, total, room);
    return DISCO_OK;
}

uint64_t disco_memory_total(void)
{
    uint64_t total = meminfo_bytes("MemTotal");
    uint64_t max = 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "re");
    if (f != NULL) {
        if (fscanf(f, "%" SCNu64, &max) != 1) /* "max": no limit */
            max = 0;
        fclose(f);
    }
    return max != 0 && (total == 0 || max < total) ? max : total;
}

uint64_t disco_memory_room(void)
{
    uint64_t avail = meminfo_bytes("MemAvailable");
    uint64_t room = cgroup_room();
    if (avail == 0)
        return room == UINT64_MAX ? 0 : room;
    return room < avail ? room : avail;
}

disco_status_t disco_segment_create(const char *name, size_t data_size, disco_segment_t *seg_out)
{
    return disco_segment_create_partial(name, data_size, data_size, seg_out);
}

disco_status_t disco_segment_create_partial(const char *name, size_t data_size, size_t backed,
                                            disco_segment_t *seg_out)
{
    if (data_size == 0 || data_size > SIZE_MAX / 2)
        return disco_set_error(DISCO_E_INVAL, "segment size %zu is invalid", data_size);
    if (backed > data_size)
        return disco_set_error(DISCO_E_INVAL, "segment: %zu bytes to back of %zu", backed,
                               data_size);
    size_t total = page_round(DISCO_SEGMENT_DATA_OFFSET + data_size);
    size_t back = page_round(DISCO_SEGMENT_DATA_OFFSET + backed);
    disco_status_t st = disco_memory_check(total, "segment");
    if (st != DISCO_OK)
        return st;

    int fd = memfd_create(name != NULL ? name : "disco", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return disco_set_error(DISCO_E_SYS, "memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)total) != 0) {
        st = disco_set_error(DISCO_E_SYS, "ftruncate(%zu): %s", total, strerror(errno));
        goto fail_fd;
    }
    /* Sealed at its size before anyone maps it: a shrink would SIGBUS every
     * process that maps the segment (an observer, a worker), a growth would
     * make the header's size a lie. Backing the holes of a partial segment
     * (fallocate inside the size) is still allowed. attach() refuses a
     * segment without these seals (test_segment_sealed, test_observer_
     * survives_shrink). */
    if (fcntl(fd, F_ADD_SEALS, DISCO_SEGMENT_SEALS) != 0) {
        st = disco_set_error(DISCO_E_SYS, "sealing a segment: %s", strerror(errno));
        goto fail_fd;
    }
    int err = posix_fallocate(fd, 0, (off_t)back);
    if (err != 0) {
        st = disco_set_error(DISCO_E_NOSPACE, "cannot back %zu bytes of a segment: %s", back,
                             strerror(err));
        goto fail_fd;
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        st = disco_set_error(DISCO_E_SYS, "mmap(%zu): %s", total, strerror(errno));
        goto fail_fd;
    }
    struct segment_header *h = base;
    h->magic = DISCO_SEGMENT_MAGIC;
    h->layout = DISCO_SEGMENT_LAYOUT;
    h->data_offset = DISCO_SEGMENT_DATA_OFFSET;
    h->size = total;
    track(base, total);
    seg_out->fd = fd;
    seg_out->base = base;
    seg_out->size = total;
    return DISCO_OK;

fail_fd:
    close(fd);
    return st;
}

disco_status_t disco_segment_back(const disco_segment_t *seg, size_t data_off, size_t len)
{
    size_t data = seg != NULL && seg->size > DISCO_SEGMENT_DATA_OFFSET
                      ? seg->size - DISCO_SEGMENT_DATA_OFFSET
                      : 0;
    if (seg == NULL || seg->fd < 0 || data_off > data || len > data - data_off)
        return disco_set_error(DISCO_E_INVAL, "segment: cannot back %zu bytes at %zu of %zu", len,
                               data_off, data);
    size_t off = DISCO_SEGMENT_DATA_OFFSET + data_off;
    int err = posix_fallocate(seg->fd, (off_t)off, (off_t)len);
    if (err != 0)
        return disco_set_error(DISCO_E_NOSPACE, "cannot back %zu bytes of a segment: %s", len,
                               strerror(err));
    return DISCO_OK;
}

/* Maps the segment behind fd with protection prot (see the two callers).
 * The seals are checked before the size is read and the file mapped: with
 * them the size cannot change under the mapping (no SIGBUS however the
 * other side truncates), and a file without them is refused. */
static disco_status_t attach(int fd, int prot, disco_segment_t *seg_out)
{
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 && errno == EBADF)
        return disco_set_error(DISCO_E_SYS, "fd %d: %s", fd, strerror(errno));
    if (seals < 0 || (seals & DISCO_SEGMENT_SEALS) != DISCO_SEGMENT_SEALS)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "fd %d is not a disco segment: not sealed against shrinking and "
                               "growing (seals %#x; a segment's maker seals it, and a mapping of "
                               "an unsealed file could fault with SIGBUS)",
                               fd, seals < 0 ? 0u : (unsigned)seals);
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return disco_set_error(DISCO_E_SYS, "fstat(fd %d): %s", fd, strerror(errno));
    size_t total = (size_t)sb.st_size;
    if (total < DISCO_SEGMENT_DATA_OFFSET)
        return disco_set_error(DISCO_E_BAD_MAGIC, "fd %d: %zu bytes is too small for a segment", fd,
                               total);
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0)
        return disco_set_error(DISCO_E_SYS, "dup(fd %d): %s", fd, strerror(errno));
    void *base = mmap(NULL, total, prot, MAP_SHARED, dup_fd, 0);
    if (base == MAP_FAILED) {
        int e = errno;
        close(dup_fd);
        return disco_set_error(DISCO_E_SYS, "mmap(fd %d): %s", fd, strerror(e));
    }
    const struct segment_header *h = base;
    if (h->magic != DISCO_SEGMENT_MAGIC || h->layout != DISCO_SEGMENT_LAYOUT ||
        h->data_offset != DISCO_SEGMENT_DATA_OFFSET || h->size != total) {
        disco_status_t st = disco_set_error(
            DISCO_E_BAD_MAGIC,
            "fd %d: magic %#" PRIx64 " layout %u size %" PRIu64 " (want %#llx layout %u size %zu)",
            fd, h->magic, h->layout, h->size, (unsigned long long)DISCO_SEGMENT_MAGIC,
            DISCO_SEGMENT_LAYOUT, total);
        munmap(base, total);
        close(dup_fd);
        return st;
    }
    track(base, total);
    seg_out->fd = dup_fd;
    seg_out->base = base;
    seg_out->size = total;
    return DISCO_OK;
}

disco_status_t disco_segment_attach(int fd, disco_segment_t *seg_out)
{
    return attach(fd, PROT_READ | PROT_WRITE, seg_out);
}

disco_status_t disco_segment_attach_readonly(int fd, disco_segment_t *seg_out)
{
    return attach(fd, PROT_READ, seg_out);
}

void disco_segment_close(disco_segment_t *seg)
{
    if (seg->base != NULL && seg->size != 0) {
        untrack(seg->base);
        munmap(seg->base, seg->size);
    }
    if (seg->base != NULL && seg->fd >= 0)
        close(seg->fd);
    seg->base = NULL;
    seg->size = 0;
    seg->fd = -1;
}
