/* segment.c - memfd segments with a checked header, fully backed at creation. */
#include "disco/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct segment_header {
    uint64_t magic;
    uint32_t layout;
    uint32_t data_offset;
    uint64_t size; /* bytes mapped, header included */
};

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* Reads a "Key: N kB" line of /proc/meminfo; returns bytes or 0 if absent. */
static uint64_t meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
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
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f == NULL)
        return UINT64_MAX;
    int ok = fscanf(f, "%" SCNu64, &max) == 1;
    fclose(f);
    if (!ok)
        return UINT64_MAX; /* "max" */
    f = fopen("/sys/fs/cgroup/memory.current", "r");
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

disco_status_t disco_segment_create(const char *name, size_t data_size, disco_segment_t *seg_out)
{
    if (data_size == 0 || data_size > SIZE_MAX / 2)
        return disco_set_error(DISCO_E_INVAL, "segment size %zu is invalid", data_size);
    size_t total = page_round(DISCO_SEGMENT_DATA_OFFSET + data_size);
    disco_status_t st = disco_memory_check(total, "segment");
    if (st != DISCO_OK)
        return st;

    /* Sealable: a segment handed to a less trusted peer (the shm transport)
     * is sealed against shrinking, which would SIGBUS its users. */
    int fd = memfd_create(name != NULL ? name : "disco", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return disco_set_error(DISCO_E_SYS, "memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)total) != 0) {
        st = disco_set_error(DISCO_E_SYS, "ftruncate(%zu): %s", total, strerror(errno));
        goto fail_fd;
    }
    int err = posix_fallocate(fd, 0, (off_t)total);
    if (err != 0) {
        st = disco_set_error(DISCO_E_NOSPACE, "cannot back a segment of %zu bytes: %s", total,
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
    seg_out->fd = fd;
    seg_out->base = base;
    seg_out->size = total;
    return DISCO_OK;

fail_fd:
    close(fd);
    return st;
}

disco_status_t disco_segment_attach(int fd, disco_segment_t *seg_out)
{
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
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, dup_fd, 0);
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
    seg_out->fd = dup_fd;
    seg_out->base = base;
    seg_out->size = total;
    return DISCO_OK;
}

void disco_segment_close(disco_segment_t *seg)
{
    if (seg->base != NULL && seg->size != 0)
        munmap(seg->base, seg->size);
    if (seg->base != NULL && seg->fd >= 0)
        close(seg->fd);
    seg->base = NULL;
    seg->size = 0;
    seg->fd = -1;
}
