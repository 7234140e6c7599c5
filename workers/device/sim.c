/* sim.c - the simulated GPU's devices, memory, copies and IPC backend (see
 * sim.h). Every allocation is a memfd mapped twice: PROT_NONE at the address
 * handed out (the "device" address: a host dereference faults, pointer
 * arithmetic inside it works) and read-write at a private address only the
 * copies use. Streams and events are in sim_stream.c. */
#include "workers/device/sim.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HANDLE_MAGIC "DISCOSIM"

/* A sim memory handle, inside disco_ipc_handle_t's 64 bytes. */
struct sim_handle {
    char magic[8];
    int32_t pid;       /* exporter */
    int32_t fd;        /* its memfd in the exporter */
    uint64_t ino;      /* that memfd's inode (the fd number may be reused) */
    uint64_t bytes;    /* mapped length */
    int32_t device_id; /* exporter's device */
    uint32_t pad;
};
_Static_assert(sizeof(struct sim_handle) <= DISCO_IPC_HANDLE_BYTES, "sim handle size");

struct region {
    uintptr_t base; /* PROT_NONE mapping: the device address */
    char *shadow;   /* read-write mapping of the same memfd */
    size_t bytes;   /* asked for */
    size_t maplen;  /* mapped (page multiple) */
    int fd;
    int device_id;
    bool imported;
    int open_dev;         /* imports: the device it is mapped for (current at the open) */
    int32_t exporter_pid; /* imports: whose */
    uint64_t ino;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_pid;
static struct region *g_reg;
static size_t g_nreg, g_capreg;
static size_t g_used[DISCO_SIM_MAX_DEVICES]; /* bytes allocated here, per device */

/* Fork: the child forgets the parent's regions at once (their mappings are
 * not inherited, MADV_DONTFORK) and closes the inherited memfds before
 * anything in the child can reuse those fd numbers. The lock is taken
 * across the fork so the table is consistent in the child. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
}

static void fork_child(void)
{
    for (size_t i = 0; i < g_nreg; i++)
        close(g_reg[i].fd);
    g_nreg = 0;
    memset(g_used, 0, sizeof g_used);
    g_pid = getpid();
    pthread_mutex_unlock(&g_lock);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void register_fork(void)
{
    (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Locks the state (registering the fork handlers at first use). A process
 * that is not the table's (a child made by a raw clone) starts empty; the
 * fds are not closed then (their numbers may be reused). */
static void lock_state(void)
{
    pthread_once(&g_once, register_fork);
    pthread_mutex_lock(&g_lock);
    pid_t me = getpid();
    if (g_pid != me) {
        g_nreg = 0;
        memset(g_used, 0, sizeof g_used);
        g_pid = me;
    }
}

/* The region containing p (locked), or NULL. */
static struct region *find(uintptr_t p)
{
    for (size_t i = 0; i < g_nreg; i++)
        if (p - g_reg[i].base < g_reg[i].bytes)
            return &g_reg[i];
    return NULL;
}

static disco_status_t push_region(const struct region *r)
{
    if (g_nreg == g_capreg) {
        size_t cap = g_capreg ? 2 * g_capreg : 16;
        struct region *n = realloc(g_reg, cap * sizeof *n);
        if (n == NULL)
            return disco_set_error(DISCO_E_NOMEM, "sim:%d: realloc of the region table",
                                   r->device_id);
        g_reg = n, g_capreg = cap;
    }
    g_reg[g_nreg++] = *r;
    return DISCO_OK;
}

/* Maps fd twice (PROT_NONE and read-write), neither inherited by fork. */
static disco_status_t map_twice(int fd, size_t maplen, int device_id, uintptr_t *base_out,
                                char **shadow_out)
{
    void *b = mmap(NULL, maplen, PROT_NONE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED)
        return disco_set_error(DISCO_E_NOMEM, "sim:%d: mmap of %zu bytes: %s", device_id, maplen,
                               strerror(errno));
    void *s = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        int e = errno;
        munmap(b, maplen);
        return disco_set_error(DISCO_E_NOMEM, "sim:%d: mmap of %zu bytes: %s", device_id, maplen,
                               strerror(e));
    }
    (void)madvise(b, maplen, MADV_DONTFORK);
    (void)madvise(s, maplen, MADV_DONTFORK);
    *base_out = (uintptr_t)b;
    *shadow_out = s;
    return DISCO_OK;
}

static size_t page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

/* ---- the device API ------------------------------------------------------- */

static disco_status_t api_count(int *count_out)
{
    int n = disco__sim_count();
    if (n == 0)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "disco_device_count: no sim device: set DISCO_SIM_GPUS");
    *count_out = n;
    return DISCO_OK;
}

static disco_status_t api_set_device(int device_id)
{
    disco_status_t st = disco__sim_check_device(device_id, "disco_device_set");
    if (st == DISCO_OK)
        disco__sim_make_current(device_id);
    return st;
}

static disco_status_t api_alloc(int device_id, size_t nbytes, void **ptr_out)
{
    disco_status_t st = disco__sim_check_device(device_id, "disco_device_alloc");
    if (st != DISCO_OK)
        return st;
    disco__sim_make_current(device_id); /* as cuda_alloc's cudaSetDevice */
    size_t maplen = page_round(nbytes), limit = disco__sim_mem_limit();
    if (maplen < nbytes)
        return disco_set_error(DISCO_E_NOMEM, "sim:%d: out of memory: %zu bytes", device_id,
                               nbytes);
    lock_state();
    if (maplen > limit || g_used[device_id] > limit - maplen) {
        st = disco_set_error(DISCO_E_NOMEM,
                             "sim:%d: out of memory: %zu bytes asked, %zu of %zu MiB in use by "
                             "this process (limit DISCO_SIM_MEM_MB)",
                             device_id, nbytes, g_used[device_id] >> 20, limit >> 20);
        goto out;
    }
    char name[32];
    snprintf(name, sizeof name, "disco-sim:%d", device_id);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        st = disco_set_error(DISCO_E_NOMEM, "sim:%d: memfd_create: %s", device_id, strerror(errno));
        goto out;
    }
    struct stat sb;
    if (ftruncate(fd, (off_t)maplen) != 0 || fstat(fd, &sb) != 0) {
        st = disco_set_error(DISCO_E_NOMEM, "sim:%d: ftruncate of %zu bytes: %s", device_id, maplen,
                             strerror(errno));
        close(fd);
        goto out;
    }
    /* Sealed at its size before it is mapped or exported: an importer
     * refuses an unsealed memfd (disco__sim_take_fd; test_sealed_memfds). */
    st = disco__sim_seal(fd, "an allocation", device_id);
    if (st != DISCO_OK) {
        close(fd);
        goto out;
    }
    struct region r = {.bytes = nbytes,
                       .maplen = maplen,
                       .fd = fd,
                       .device_id = device_id,
                       .ino = (uint64_t)sb.st_ino};
    st = map_twice(fd, maplen, device_id, &r.base, &r.shadow);
    if (st == DISCO_OK) {
        st = push_region(&r);
        if (st != DISCO_OK) {
            munmap((void *)r.base, maplen);
            munmap(r.shadow, maplen);
        }
    }
    if (st != DISCO_OK) {
        close(fd);
        goto out;
    }
    g_used[device_id] += maplen;
    *ptr_out = (void *)r.base;
out:
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* Unmaps and closes region i and drops it from the table (locked). */
static void drop_region(size_t i)
{
    struct region *r = &g_reg[i];
    munmap((void *)r->base, r->maplen);
    munmap(r->shadow, r->maplen);
    close(r->fd);
    if (!r->imported)
        g_used[r->device_id] -= r->maplen;
    *r = g_reg[--g_nreg];
}

static disco_status_t api_free(int device_id, void *ptr)
{
    /* cudaFree synchronizes the device: queued copies into ptr run first. */
    disco__sim_make_current(device_id); /* as cuda_free's cudaSetDevice */
    disco_status_t st = disco__sim_flush_all();
    lock_state();
    struct region *r = find((uintptr_t)ptr);
    if (r == NULL || r->imported || r->base != (uintptr_t)ptr)
        st = disco_set_error(DISCO_E_INVAL,
                             "disco_device_free: sim:%d: %p is not an allocation "
                             "of this process",
                             device_id, ptr);
    else if (r->device_id != device_id)
        st = disco_set_error(DISCO_E_INVAL, "disco_device_free: sim:%d: %p was allocated on sim:%d",
                             device_id, ptr, r->device_id);
    else
        drop_region((size_t)(r - g_reg));
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* The private address for n bytes at p (sim memory of this process);
 * *across set if they are another process's (an import); *reg_out (when
 * not NULL) the region. Locked. */
static disco_status_t resolve(const void *p, size_t n, int device_id, const char *fn, char **out,
                              bool *across, struct region **reg_out)
{
    struct region *r = find((uintptr_t)p);
    if (r == NULL)
        return disco_set_error(DISCO_E_INVAL, "%s: sim:%d: %p is not sim memory of this process",
                               fn, device_id, p);
    size_t off = (uintptr_t)p - r->base;
    if (n > r->bytes - off)
        return disco_set_error(DISCO_E_INVAL,
                               "%s: sim:%d: %zu bytes at offset %zu overrun the "
                               "allocation of %zu bytes at %p",
                               fn, r->device_id, n, off, r->bytes, (void *)r->base);
    *out = r->shadow + off;
    *across = *across || r->imported;
    if (reg_out != NULL)
        *reg_out = r;
    return DISCO_OK;
}

static disco_status_t api_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                               size_t nbytes, disco_stream_t stream)
{
    bool dsim = dst_dev.device_type == kDLExtDev, ssim = src_dev.device_type == kDLExtDev;
    int dev = dsim ? dst_dev.device_id : src_dev.device_id;
    if ((!dsim && dst_dev.device_type != kDLCPU) || (!ssim && src_dev.device_type != kDLCPU))
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "disco_device_copy: sim copies to or from sim and cpu only "
                               "(device types %d -> %d)",
                               (int)src_dev.device_type, (int)dst_dev.device_type);
    disco_status_t st = disco__sim_check_device(dev, "disco_device_copy");
    if (st == DISCO_OK && dsim && ssim)
        st = disco__sim_check_device(src_dev.device_id, "disco_device_copy");
    if (st != DISCO_OK)
        return st;
    /* As cuda_copy: the copy's device becomes current (and stays). A copy
     * reaches an import whichever device it was opened for (unified
     * addressing: the driver knows the mapping's context), so no check. */
    disco__sim_make_current(dev);
    char *d = dst, *s = (char *)src;
    bool across = false;
    lock_state();
    if (dsim)
        st = resolve(dst, nbytes, dst_dev.device_id, "disco_device_copy", &d, &across, NULL);
    if (st == DISCO_OK && ssim)
        st = resolve(src, nbytes, src_dev.device_id, "disco_device_copy", &s, &across, NULL);
    pthread_mutex_unlock(&g_lock);
    if (st != DISCO_OK)
        return st;
    return disco__sim_enqueue_copy(dev, stream, d, s, nbytes, across);
}

disco_status_t disco__sim_shadow(const void *p, size_t n, int device_id, const char *fn, char **out,
                                 bool *across)
{
    struct region *r = NULL;
    lock_state();
    disco_status_t st = resolve(p, n, device_id, fn, out, across, &r);
    int open_dev = r != NULL && r->imported ? r->open_dev : device_id;
    int32_t pid = r != NULL ? r->exporter_pid : 0;
    pthread_mutex_unlock(&g_lock);
    /* A kernel reads through the page tables of its own device, where only
     * imports opened for that device are mapped (test_gpu_session_coll.c,
     * test_import_on_own_device). */
    if (st == DISCO_OK && open_dev != device_id)
        return disco__sim_fault(device_id,
                                "%s: sim:%d: illegal address %p: it lies in an import of pid %d's "
                                "memory opened for sim:%d, not mapped on sim:%d (an IPC handle "
                                "opens on the current device)",
                                fn, device_id, p, (int)pid, open_dev, device_id);
    return st;
}

/* The stream calls make the stream's device current, as cudaSetDevice in
 * cuda.c's. */
static disco_status_t api_stream_create(int device_id, disco_stream_t *stream_out)
{
    disco_status_t st = disco__sim_stream_create(device_id, stream_out);
    if (st == DISCO_OK)
        disco__sim_make_current(device_id);
    return st;
}

static disco_status_t api_stream_free(int device_id, disco_stream_t stream)
{
    if (stream != NULL && device_id >= 0 && device_id < disco__sim_count())
        disco__sim_make_current(device_id);
    return disco__sim_stream_free(device_id, stream);
}

static disco_status_t api_stream_sync(int device_id, disco_stream_t stream)
{
    if (device_id >= 0 && device_id < disco__sim_count())
        disco__sim_make_current(device_id);
    return disco__sim_stream_sync(device_id, stream);
}

const disco_device_api_t disco__sim_api = {
    .type = kDLExtDev,
    .name = "sim",
    .count = api_count,
    .set_device = api_set_device,
    .alloc = api_alloc,
    .free = api_free,
    .copy = api_copy,
    .stream_create = api_stream_create,
    .stream_free = api_stream_free,
    .stream_sync = api_stream_sync,
    .physical_id = disco__sim_physical_id, /* sim_slice.c */
    .mps = disco__sim_mps,
};

/* ---- IPC backend ------------------------------------------------------------- */

bool disco__sim_owns(const void *ptr)
{
    lock_state();
    bool own = find((uintptr_t)ptr) != NULL;
    pthread_mutex_unlock(&g_lock);
    return own;
}

bool disco__sim_is_handle(const disco_ipc_handle_t *handle)
{
    return memcmp(handle->bytes, HANDLE_MAGIC, 8) == 0;
}

disco_status_t disco__sim_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out)
{
    (void)ctx;
    disco_status_t st = DISCO_OK;
    lock_state();
    struct region *r = find((uintptr_t)base);
    if (r == NULL || r->imported || r->base != (uintptr_t)base) {
        st = disco_set_error(DISCO_E_INVAL,
                             "sim: export of %p: not the base of a sim allocation of this process",
                             base);
    } else {
        struct sim_handle h = {.pid = (int32_t)getpid(),
                               .fd = r->fd,
                               .ino = r->ino,
                               .bytes = r->maplen,
                               .device_id = r->device_id};
        memcpy(h.magic, HANDLE_MAGIC, 8);
        memset(handle_out, 0, sizeof *handle_out);
        memcpy(handle_out->bytes, &h, sizeof h);
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

disco_status_t disco__sim_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out)
{
    (void)ctx;
    struct sim_handle h;
    memcpy(&h, handle->bytes, sizeof h);
    if (!disco__sim_is_handle(handle) || h.pid <= 0 || h.bytes == 0)
        return disco_set_error(DISCO_E_INVAL, "sim: import: not a sim memory handle");
    if (h.pid == (int32_t)getpid())
        return disco_set_error(DISCO_E_SYS,
                               "sim:%d: import: a process may not open its own "
                               "handle (as with cudaIpcOpenMemHandle)",
                               (int)h.device_id);
    lock_state();
    for (size_t i = 0; i < g_nreg; i++) {
        if (g_reg[i].imported && g_reg[i].exporter_pid == h.pid && g_reg[i].ino == h.ino) {
            pthread_mutex_unlock(&g_lock);
            return disco_set_error(DISCO_E_SYS,
                                   "sim:%d: import: the handle of pid %d is already open in this "
                                   "process (a handle opens once per process)",
                                   (int)h.device_id, (int)h.pid);
        }
    }
    pthread_mutex_unlock(&g_lock);
    int fd = -1;
    disco_status_t st = disco__sim_take_fd(h.pid, h.fd, h.ino, "memory", h.device_id, &fd);
    if (st != DISCO_OK)
        return st;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < h.bytes) {
        close(fd);
        return disco_set_error(DISCO_E_INVAL,
                               "sim:%d: import: the memfd of pid %d is smaller "
                               "than the handle says",
                               (int)h.device_id, (int)h.pid);
    }
    /* Mapped for the current device, as cudaIpcOpenMemHandle maps into
     * the current device's context. */
    struct region r = {.bytes = h.bytes,
                       .maplen = h.bytes,
                       .fd = fd,
                       .device_id = h.device_id,
                       .imported = true,
                       .open_dev = disco__sim_current(),
                       .exporter_pid = h.pid,
                       .ino = h.ino};
    st = map_twice(fd, h.bytes, h.device_id, &r.base, &r.shadow);
    if (st != DISCO_OK) {
        close(fd);
        return st;
    }
    lock_state();
    st = push_region(&r);
    pthread_mutex_unlock(&g_lock);
    if (st != DISCO_OK) {
        munmap((void *)r.base, r.maplen);
        munmap(r.shadow, r.maplen);
        close(fd);
        return st;
    }
    *base_out = (void *)r.base;
    return DISCO_OK;
}

disco_status_t disco__sim_close_handle(void *ctx, void *base)
{
    (void)ctx;
    /* As cudaIpcCloseMemHandle: queued work on the mapping finishes first. */
    disco_status_t st = disco__sim_flush_all();
    lock_state();
    struct region *r = find((uintptr_t)base);
    if (r == NULL || !r->imported || r->base != (uintptr_t)base)
        st = disco_set_error(DISCO_E_INVAL, "sim: close of %p: not an open import's base", base);
    else
        drop_region((size_t)(r - g_reg));
    pthread_mutex_unlock(&g_lock);
    return st;
}
