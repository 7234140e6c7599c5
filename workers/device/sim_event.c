/* sim_event.c - the simulated GPU's interprocess events.
 *
 * An event is a page of a memfd holding two counters: `recorded` (records
 * issued) and `completed` (the highest record a stream has run). A record
 * takes the next number and queues "completed = that number" on the stream;
 * a wait covers the records issued before it (as with CUDA) and blocks until
 * `completed` reaches the last of them. Another process imports the event by
 * taking the memfd (pidfd_getfd, or /proc/<pid>/fd/<n>) and mapping it.
 *
 * Progress. Nothing a stream queued runs before something needs it (a
 * missing sync is seen), but a record another process waits for does not
 * wait for its recorder to sync, as on a GPU: the waiter pokes the event
 * (E5, a counter in the page, also a futex word), and the recording
 * process's watcher thread for that event (started at its first record
 * there) runs the stream the last record is queued on, up to the record
 * and no further. A wait in the recording process runs that stream itself.
 * disco_device_event_query pokes nobody. A waiter whose recorder died gets
 * DISCO_E_SYS instead of waiting forever.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "workers/device/event.h"
#include "workers/device/sim.h"
#include "workers/device/sim_event.h"

#define EVENT_MAGIC "DISCOSEV"
#define EVENT_BYTES 4096

/* An event handle: the owner's pid, memfd and its inode. */
struct ev_handle {
    char magic[8];
    int32_t pid, fd;
    uint64_t ino;
    int32_t device_id;
};
_Static_assert(sizeof(struct ev_handle) <= DISCO_IPC_HANDLE_BYTES, "event handle size");

struct sim_event {
    struct disco__sim_event_shm *shm;
    int fd;
    uint64_t ino;
    pid_t pid; /* the process that made or imported it */
    /* The watcher (in pid only), started at the first record here. */
    bool watching;
    pthread_t watcher;
    uint32_t pokes_seen; /* E5 as the watcher starts */
    _Atomic bool closing;
};

/* The watcher: sleeps on the poke count; each poke runs this process's
 * stream of the last record, if the last record is ours (a poke for a
 * record of another process that imported the event is for its watcher). */
static void *watch(void *arg)
{
    struct sim_event *ev = arg;
    struct disco__sim_event_shm *m = ev->shm;
    uint32_t seen = ev->pokes_seen;
    for (;;) {
        /* Not FUTEX_PRIVATE: waiters of other processes poke it. Returns
         * at once if the count moved since `seen` (no poke is missed). */
        syscall(SYS_futex, &m->pokes, FUTEX_WAIT, seen, NULL, NULL, 0);
        /* Acquire: pairs with ev_free's release; nothing of ours is read
         * after it but the flag itself, so this is the conservative side. */
        if (atomic_load_explicit(&ev->closing, memory_order_acquire))
            return NULL;
        /* E5: relaxed; the count only tells that someone asked. */
        uint32_t now = atomic_load_explicit(&m->pokes, memory_order_relaxed);
        if (now == seen)
            continue; /* a spurious wake */
        seen = now;
        disco__sim_exec_lock();
        disco__sim_run_last_record(m);
        disco__sim_exec_unlock();
    }
}

/* Starts ev's watcher in this process if it has none (engine lock held). */
static disco_status_t start_watcher(int dev, struct sim_event *ev)
{
    if (ev->watching)
        return DISCO_OK;
    /* E5: relaxed; any later poke changes the count, which ends the
     * watcher's first futex wait at once. */
    ev->pokes_seen = atomic_load_explicit(&ev->shm->pokes, memory_order_relaxed);
    atomic_store_explicit(&ev->closing, false, memory_order_relaxed); /* not shared yet */
    int e = pthread_create(&ev->watcher, NULL, watch, ev);
    if (e != 0)
        return disco_set_error(DISCO_E_SYS,
                               "disco_device_event_record: sim:%d: cannot start the event's "
                               "watcher thread: %s",
                               dev, strerror(e));
    ev->watching = true;
    return DISCO_OK;
}

/* Stops ev's watcher, if it runs in this process. */
static void stop_watcher(struct sim_event *ev)
{
    if (!ev->watching || ev->pid != getpid())
        return; /* a forked child has the flag, not the thread */
    /* Release: pairs with the watcher's acquire. */
    atomic_store_explicit(&ev->closing, true, memory_order_release);
    atomic_fetch_add_explicit(&ev->shm->pokes, 1, memory_order_relaxed); /* E5 */
    syscall(SYS_futex, &ev->shm->pokes, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    pthread_join(ev->watcher, NULL);
    ev->watching = false;
}

static disco_status_t check(int dev, struct sim_event *ev, const char *fn)
{
    if (ev == NULL)
        return disco_set_error(DISCO_E_INVAL, "%s: sim:%d: NULL event", fn, dev);
    if (ev->pid != getpid())
        return disco_set_error(DISCO_E_INVAL,
                               "%s: sim:%d: event of pid %d used in pid %d (import it instead)", fn,
                               dev, (int)ev->pid, (int)getpid());
    return DISCO_OK;
}

static disco_status_t map_event(int dev, int fd, uint64_t ino, void **impl_out)
{
    struct sim_event *ev = malloc(sizeof *ev);
    void *p = mmap(NULL, EVENT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ev == NULL || p == MAP_FAILED) {
        int e = errno;
        free(ev);
        if (p != MAP_FAILED)
            munmap(p, EVENT_BYTES);
        return disco_set_error(DISCO_E_NOMEM, "sim:%d: event: %s", dev, strerror(e));
    }
    (void)madvise(p, EVENT_BYTES, MADV_DONTFORK);
    *ev = (struct sim_event){.shm = p, .fd = fd, .ino = ino, .pid = getpid()};
    *impl_out = ev;
    return DISCO_OK;
}

static disco_status_t ev_create(int dev, void **impl_out)
{
    disco_status_t st = disco__sim_check_device(dev, "disco_device_event_create");
    if (st != DISCO_OK)
        return st;
    disco__sim_make_current(dev); /* as cuda.c's cudaSetDevice */
    int fd = memfd_create("disco-sim-event", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    struct stat sb;
    if (fd < 0 || ftruncate(fd, EVENT_BYTES) != 0 || fstat(fd, &sb) != 0) {
        st = disco_set_error(DISCO_E_NOMEM, "disco_device_event_create: sim:%d: memfd: %s", dev,
                             strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    /* Sealed at its size before it is mapped or exported: an importer
     * refuses an unsealed memfd (disco__sim_take_fd; test_sealed_memfds). */
    st = disco__sim_seal(fd, "an event", dev);
    if (st != DISCO_OK) {
        close(fd);
        return st;
    }
    st = map_event(dev, fd, (uint64_t)sb.st_ino, impl_out);
    if (st != DISCO_OK) {
        close(fd);
        return st;
    }
    struct sim_event *ev = *impl_out;
    memcpy(ev->shm->magic, EVENT_MAGIC, 8); /* the rest is zero: never recorded, complete */
    return DISCO_OK;
}

static disco_status_t ev_import(int dev, const disco_ipc_handle_t *handle, void **impl_out)
{
    disco_status_t st = disco__sim_check_device(dev, "disco_device_event_import");
    if (st != DISCO_OK)
        return st;
    disco__sim_make_current(dev); /* as cuda.c's cudaSetDevice */
    struct ev_handle h;
    memcpy(&h, handle->bytes, sizeof h);
    if (memcmp(h.magic, EVENT_MAGIC, 8) != 0 || h.pid <= 0)
        return disco_set_error(DISCO_E_SYS,
                               "disco_device_event_import: sim:%d: not a sim event "
                               "handle",
                               dev);
    int fd = -1;
    st = disco__sim_take_fd(h.pid, h.fd, h.ino, "an event", dev, &fd);
    if (st == DISCO_OK)
        st = map_event(dev, fd, h.ino, impl_out);
    if (st != DISCO_OK) {
        if (fd >= 0)
            close(fd);
        return st == DISCO_E_INVAL ? disco_set_error(DISCO_E_SYS, "%s", disco_last_error()) : st;
    }
    struct sim_event *ev = *impl_out;
    if (memcmp(ev->shm->magic, EVENT_MAGIC, 8) != 0) {
        munmap(ev->shm, EVENT_BYTES);
        close(fd);
        free(ev);
        return disco_set_error(DISCO_E_SYS, "disco_device_event_import: sim:%d: not an event", dev);
    }
    return DISCO_OK;
}

static disco_status_t ev_export(int dev, void *impl, disco_ipc_handle_t *handle_out)
{
    struct sim_event *ev = impl;
    disco_status_t st = check(dev, ev, "disco_device_event_export");
    if (st != DISCO_OK)
        return st;
    struct ev_handle h = {.pid = (int32_t)getpid(), .fd = ev->fd, .ino = ev->ino, .device_id = dev};
    memcpy(h.magic, EVENT_MAGIC, 8);
    memset(handle_out, 0, sizeof *handle_out);
    memcpy(handle_out->bytes, &h, sizeof h);
    return DISCO_OK;
}

static disco_status_t ev_record(int dev, void *impl, disco_stream_t stream)
{
    struct sim_event *ev = impl;
    disco_status_t st = check(dev, ev, "disco_device_event_record");
    if (st != DISCO_OK)
        return st;
    disco__sim_make_current(dev); /* as cuda.c's cudaSetDevice */
    struct disco__sim_event_shm *m = ev->shm;
    /* Under the engine lock, so a waiter of this process that runs streams
     * sees the number and where it was queued together. */
    disco__sim_exec_lock();
    st = start_watcher(dev, ev);
    if (st != DISCO_OK) {
        disco__sim_exec_unlock();
        return st;
    }
    /* E1: relaxed; the number only has to be unique. Waiters read it to
     * know which record to wait for; the bytes are ordered by E3/E4. */
    uint32_t v = atomic_fetch_add_explicit(&m->recorded, 1, memory_order_relaxed) + 1;
    struct disco__sim_op op = {.kind = DISCO_SIM_OP_RECORD, .ev = m, .value = v};
    uint64_t sid = 0, seq = 0;
    st = disco__sim_enqueue(dev, stream, &op, "disco_device_event_record", &sid, &seq);
    if (st == DISCO_OK) {
        /* E2: relaxed; read by this process only, under the engine lock. */
        atomic_store_explicit(&m->rec_stream, sid, memory_order_relaxed);
        atomic_store_explicit(&m->rec_seq, seq, memory_order_relaxed);
        atomic_store_explicit(&m->rec_pid, (int32_t)getpid(), memory_order_relaxed);
    } else {
        atomic_fetch_sub_explicit(&m->recorded, 1, memory_order_relaxed); /* E1 undone */
    }
    disco__sim_exec_unlock();
    return st;
}

static disco_status_t ev_wait(int dev, disco_stream_t stream, void *impl)
{
    struct sim_event *ev = impl;
    disco_status_t st = check(dev, ev, "disco_device_stream_wait_event");
    if (st != DISCO_OK)
        return st;
    disco__sim_make_current(dev); /* as cuda.c's cudaSetDevice */
    /* E1 read: the records issued so far (relaxed: see E1). */
    uint32_t want = atomic_load_explicit(&ev->shm->recorded, memory_order_relaxed);
    struct disco__sim_op op = {.kind = DISCO_SIM_OP_WAIT, .ev = ev->shm, .value = want};
    return disco__sim_enqueue(dev, stream, &op, "disco_device_stream_wait_event", NULL, NULL);
}

static disco_status_t ev_sync(int dev, void *impl)
{
    struct sim_event *ev = impl;
    disco_status_t st = check(dev, ev, "disco_device_event_sync");
    if (st != DISCO_OK)
        return st;
    disco__sim_exec_lock();
    uint32_t want = atomic_load_explicit(&ev->shm->recorded, memory_order_relaxed); /* E1 */
    st = disco__sim_wait_for(ev->shm, want);
    disco__sim_exec_unlock();
    return st;
}

static disco_status_t ev_query(int dev, void *impl)
{
    struct sim_event *ev = impl;
    disco_status_t st = check(dev, ev, "disco_device_event_query");
    if (st != DISCO_OK)
        return st;
    uint32_t want = atomic_load_explicit(&ev->shm->recorded, memory_order_relaxed); /* E1 */
    uint32_t c = atomic_load_explicit(&ev->shm->completed, memory_order_acquire);   /* E4 */
    return disco__sim_reached(c, want) ? DISCO_OK : DISCO_E_AGAIN;
}

static void ev_free(int dev, void *impl)
{
    struct sim_event *ev = impl;
    if (ev == NULL)
        return;
    if (dev >= 0 && dev < disco__sim_count())
        disco__sim_make_current(dev); /* as cuda.c's cudaSetDevice */
    stop_watcher(ev);
    if (ev->pid == getpid()) {
        /* Queued records and waits of it run first (they point into it). */
        (void)disco__sim_flush_all();
        munmap(ev->shm, EVENT_BYTES);
        close(ev->fd);
    }
    free(ev);
}

const disco__event_ops_t disco__sim_event_ops = {
    .create = ev_create,
    .import = ev_import,
    .export = ev_export,
    .record = ev_record,
    .wait = ev_wait,
    .sync = ev_sync,
    .query = ev_query,
    .free = ev_free,
};
