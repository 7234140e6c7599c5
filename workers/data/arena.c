/* arena.c - each worker's device arena: publication, the sub-allocator and
 * the cache of peers' arenas (see arena.h). */
#include "workers/data/arena.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/clock.h"
#include "workers/core/protocol.h"
#include "workers/data/pieces.h"
#include "workers/device/ar.h"
#include "workers/device/ipc.h"
#include "workers/device/share.h"
#include "workers/device/watch.h"

#define TABLE_SLOTS_PER_WORKER 2u /* one arena each, and room to reclaim a dead one's */

struct disco__arena {
    pthread_mutex_t lock;
    int worker;
    DLDevice dev;
    const char *dev_name;
    char *base;
    uint64_t bytes; /* for tensors, after the signal region (cfg.device_arena_bytes) */
    uint64_t total; /* allocated and exported: the signal region and bytes */
    disco_stream_t stream;
    disco_event_t *event; /* exported once, published beside the arena */
    struct disco__dev_area *area;
    uint32_t world;
    struct disco__pieces free; /* the free pieces of [DISCO_AR_SIGNAL_BYTES, total) */
    uint64_t used;
    uint32_t blocks;
    void *peer[DISCO_MAX_WORKERS]; /* imported bases, NULL: not yet */
    disco_ipc_ref_t peer_ref[DISCO_MAX_WORKERS];
    uint64_t peer_bytes[DISCO_MAX_WORKERS];
    DLDevice peer_dev[DISCO_MAX_WORKERS];
    disco_event_t *peer_ev[DISCO_MAX_WORKERS]; /* imported events, NULL: not yet */
    uint64_t ar_runs[3];            /* allreduces: one-shot kernels, two-shot ones, staged */
    struct disco__arena *left_next; /* g_left's list */
};

/* The devices' sharing state (share.h), after the pubs. */
static uint64_t share_at(uint32_t world)
{
    uint64_t at = sizeof(struct disco__dev_area) + (uint64_t)world * sizeof(struct disco__dev_pub);
    return (at + 63) / 64 * 64;
}

static uint64_t table_at(uint32_t world)
{
    return share_at(world) + (disco__device_share_bytes() + 63) / 64 * 64;
}

size_t disco__dev_area_footprint(uint32_t world)
{
    return (size_t)table_at(world) + disco_device_ipc_footprint(world * TABLE_SLOTS_PER_WORKER);
}

disco_status_t disco__dev_area_init(struct disco__dev_area *a, uint32_t world, uint64_t arena_bytes)
{
    if (world < 1 || world > DISCO_MAX_WORKERS || arena_bytes == 0 ||
        arena_bytes > DISCO_ARENA_MAX_BYTES)
        return disco_set_error(DISCO_E_INVAL, "device area: %u workers, arenas of %llu bytes",
                               world, (unsigned long long)arena_bytes);
    a->magic = DISCO_DEV_AREA_MAGIC;
    a->world = world;
    a->arena_bytes = arena_bytes;
    a->table_off = table_at(world);
    a->table_bytes = disco_device_ipc_footprint(world * TABLE_SLOTS_PER_WORKER);
    /* Formatted, not attached: a process attaches at its first device
     * tensor (disco__arena_ensure), so that a session without device
     * tensors never touches the process's one IPC table. */
    return disco__ipc_table_init((char *)a + a->table_off, (size_t)a->table_bytes,
                                 world * TABLE_SLOTS_PER_WORKER, NULL);
}

static const char *type_name(DLDeviceType type)
{
    const disco_device_api_t *api;
    if (disco_device_api_get(type, &api) == DISCO_OK)
        return api->name;
    return type == kDLExtDev ? "sim" : "unknown";
}

/* The area's fields this process relies on, read once and checked: the
 * area is shared memory. */
static disco_status_t area_check(const struct disco__dev_area *area, int worker,
                                 uint32_t *world_out, uint64_t *bytes_out)
{
    uint32_t world = area != NULL ? area->world : 0;
    uint64_t bytes = area != NULL ? area->arena_bytes : 0;
    if (area == NULL || area->magic != DISCO_DEV_AREA_MAGIC || world < 1 ||
        world > DISCO_MAX_WORKERS || worker < 0 || (uint32_t)worker >= world || bytes == 0 ||
        bytes > DISCO_ARENA_MAX_BYTES || area->table_off != table_at(world))
        return disco_set_error(DISCO_E_INVAL, "worker %d: the session's device area is corrupt",
                               worker);
    *world_out = world;
    *bytes_out = bytes;
    return DISCO_OK;
}

disco_status_t disco__arena_ensure(struct disco__arena **slot, struct disco__dev_area *area,
                                   int worker, DLDeviceType type)
{
    struct disco__arena *a = *slot;
    if (a != NULL) {
        if (a->dev.device_type == type)
            return DISCO_OK;
        return disco_set_error(DISCO_E_MISMATCH,
                               "worker %d: its device arena is on %s:%d; a %s tensor cannot be "
                               "made in the same session",
                               worker, a->dev_name, a->dev.device_id, type_name(type));
    }
    if (type != kDLCUDA && type != kDLExtDev)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "worker %d: device type %d has no arena (cuda or sim only)", worker,
                               (int)type);
    uint32_t world = 0;
    uint64_t bytes = 0;
    disco_status_t st = area_check(area, worker, &world, &bytes);
    if (st != DISCO_OK)
        return st;
    DLDevice dev;
    if ((st = disco_device_of_worker(type, worker, &dev)) != DISCO_OK) {
        return disco_set_error(st, "worker %d: no %s device: %s", worker, type_name(type),
                               disco_last_error());
    }
    const char *name = type_name(type);
    /* Our own offset and size (area_check compared the offset), never the
     * shared header's size: a process may have rewritten it. */
    if ((st = disco_device_ipc_attach(
             (char *)area + table_at(world),
             disco_device_ipc_footprint(world * TABLE_SLOTS_PER_WORKER))) != DISCO_OK) {
        return disco_set_error(st,
                               "worker %d: %s:%d: cannot use this session's IPC table (is another "
                               "session of this process holding device tensors?): %s",
                               worker, name, dev.device_id, disco_last_error());
    }
    a = calloc(1, sizeof *a);
    if (a == NULL || !disco__pieces_init(&a->free, DISCO_AR_SIGNAL_BYTES, bytes)) {
        free(a);
        return disco_set_error(DISCO_E_NOMEM, "worker %d: device arena context", worker);
    }
    pthread_mutex_init(&a->lock, NULL);
    a->worker = worker;
    a->dev = dev;
    a->dev_name = name;
    a->bytes = bytes;
    a->total = bytes + DISCO_AR_SIGNAL_BYTES; /* bytes <= DISCO_ARENA_MAX_BYTES: no overflow */
    a->area = area;
    a->world = world;
    void *base = NULL;
    disco_ipc_ref_t ref;
    if ((st = disco_device_alloc(dev, (size_t)a->total, &base)) != DISCO_OK) {
        st = disco_set_error(st,
                             "worker %d: a device arena of %llu bytes on %s:%d "
                             "(cfg.device_arena_bytes): %s",
                             worker, (unsigned long long)bytes, name, dev.device_id,
                             disco_last_error());
        goto fail;
    }
    a->base = base;
    disco_ipc_handle_t evh;
    if ((st = disco_device_stream_create(dev, &a->stream)) != DISCO_OK ||
        (st = disco_device_event_create(dev, &a->event)) != DISCO_OK ||
        (st = disco_device_event_export(a->event, &evh)) != DISCO_OK ||
        (st = disco_device_ipc_export(base, &ref)) != DISCO_OK) {
        st = disco_set_error(st, "worker %d: exporting its arena on %s:%d: %s", worker, name,
                             dev.device_id, disco_last_error());
        goto fail;
    }
    /* The signal region starts zeroed (no flag holds an epoch: ar.h). */
    static const char zeros[DISCO_AR_SIGNAL_BYTES];
    DLDevice cpu = {kDLCPU, 0};
    if ((st = disco_device_copy(base, dev, zeros, cpu, sizeof zeros, a->stream)) != DISCO_OK ||
        (st = disco_device_stream_sync(dev, a->stream)) != DISCO_OK) {
        st = disco_set_error(st, "worker %d: clearing its arena's signal region on %s:%d: %s",
                             worker, name, dev.device_id, disco_last_error());
        goto fail;
    }
    struct disco__dev_pub *p = &area->pub[worker];
    p->device_type = (int32_t)dev.device_type;
    p->device_id = dev.device_id;
    /* What routes the allreduce (docs/gpu-sharing.md): an identity that
     * cannot be read counts as shared with every other worker's device. */
    bool mps = false;
    p->share = (disco_device_physical_id(dev, &p->phys) == DISCO_OK ? DISCO_SHARE_PHYS_KNOWN : 0) |
               (disco_device_mps(dev, &mps) == DISCO_OK && mps ? DISCO_SHARE_MPS : 0);
    disco__device_share_bind(dev.device_type, (char *)area + share_at(world));
    p->bytes = a->total;
    p->ref = ref;
    p->event = evh;
    /* P1. Release: the fields above are written before a peer that sees
     * READY (P2, acquire) reads them. */
    atomic_store_explicit(&p->state, DISCO_ARENA_READY, memory_order_release);
    *slot = a;
    return DISCO_OK;
fail:
    disco_device_event_free(a->event);
    if (a->stream != NULL)
        (void)disco_device_stream_free(dev, a->stream);
    if (base != NULL)
        (void)disco_device_free(dev, base);
    pthread_mutex_destroy(&a->lock);
    disco__pieces_destroy(&a->free);
    free(a);
    return st;
}

/* How long a destroy waits for the arena's stream to drain before it
 * gives the arena up to process exit: as long as an abort gives an
 * allreduce kernel (cuda_ar.c). */
#define DRAIN_NS 1000000000LL

/* The process that gave an arena up (0: none): a stream of it may never
 * drain, and a free synchronizes the whole device (cudaFree; the sim's
 * runs every stream), so from then on this process frees no arena.
 * G1: relaxed, a plain flag of this process (a forked child sees its
 * parent's pid and frees as usual: it has no such stream). */
static _Atomic int g_gave_up_pid;

/* The arenas given up, kept (with their events) until process exit, as
 * their device memory is. Under g_left_lock. */
static pthread_mutex_t g_left_lock = PTHREAD_MUTEX_INITIALIZER;
static struct disco__arena *g_left;
static unsigned g_nleft;

/* Whether a's stream is known idle: synced under a watch that ends at
 * DRAIN_NS (CUDA: cudaStreamQuery polled, watch.h), in a process that
 * never gave an arena up. Else why says why not. */
static bool drained(struct disco__arena *a, char *why, size_t cap)
{
    int gave_up = atomic_load_explicit(&g_gave_up_pid, memory_order_relaxed); /* G1 */
    if (gave_up == (int)getpid()) {
        snprintf(why, cap, "an earlier arena's stream of this process never drained");
        return false;
    }
    disco_wait_t w = {.deadline_ns = disco_now_ns() + DRAIN_NS};
    const disco_wait_t *old = disco__device_watch(&w);
    disco_status_t st = disco_device_stream_sync(a->dev, a->stream);
    disco__device_watch(old);
    if (st != DISCO_OK)
        snprintf(why, cap, "its stream did not drain: %s", disco_last_error());
    return st == DISCO_OK;
}

/* Gives a's device objects up to process exit: frees nothing that could
 * wait for the stream (cudaFree and cudaIpcCloseMemHandle synchronize,
 * the sim's frees run every stream), only forgets the IPC bookkeeping so
 * that the process no longer uses the session's table; says so on stderr
 * (unless DISCO_QUIET). */
static void give_up(struct disco__arena *a, const char *why)
{
    atomic_store_explicit(&g_gave_up_pid, (int)getpid(), memory_order_relaxed); /* G1 */
    for (uint32_t i = 0; i < a->world; i++)
        if (a->peer[i] != NULL)
            (void)disco__device_ipc_forget_import(&a->peer_ref[i]);
    (void)disco__device_ipc_forget(a->base);
    if (getenv("DISCO_QUIET") == NULL)
        fprintf(stderr,
                "disco: worker %d: its device arena on %s:%d (%llu bytes), its stream, events "
                "and peers' imports are left to process exit: %s\n",
                a->worker, a->dev_name, a->dev.device_id, (unsigned long long)a->total, why);
}

void disco__arena_destroy(struct disco__arena *a)
{
    if (a == NULL)
        return;
    /* Relaxed: only this worker writes its own state word; peers that
     * still read READY may still import: the IPC table refuses the free
     * below while a live one holds it. */
    atomic_store_explicit(&a->area->pub[a->worker].state, DISCO_ARENA_NONE, memory_order_relaxed);
    /* Freed only once the stream is known idle: cudaFree (and the sim's
     * free) waits for it, and a stream left waiting for a dead peer's
     * record, or a kernel still spinning, never ends: close and recovery
     * would hang (test_gpu_session_coll.c,
     * test_close_after_death_mid_collective). */
    char why[DISCO_ERR_MSG_MAX];
    bool left = !drained(a, why, sizeof why);
    if (left) {
        give_up(a, why);
    } else {
        /* Freeing an event its stream still waits for is allowed (CUDA
         * releases it once the wait completes; sim runs queued work
         * first). */
        for (uint32_t i = 0; i < a->world; i++) {
            disco_device_event_free(a->peer_ev[i]);
            if (a->peer[i] != NULL)
                (void)disco_device_ipc_release(&a->peer_ref[i]);
        }
        (void)disco_device_stream_free(a->dev, a->stream);
        disco_device_event_free(a->event);
        /* DISCO_E_AGAIN: a live peer still holds the arena (a worker
         * process ending before its peers); its memory goes with this
         * process. */
        (void)disco_device_free(a->dev, a->base);
    }
    /* The table lives in the session's shared memory, unmapped after
     * this: nothing of this process may point into it any more (refused
     * only while the arena above is still exported). */
    (void)disco_device_ipc_detach((char *)a->area + table_at(a->world));
    disco__device_share_bind(a->dev.device_type, NULL); /* the same: unmapped next */
    if (left) {
        pthread_mutex_lock(&g_left_lock);
        a->left_next = g_left;
        g_left = a;
        g_nleft++;
        pthread_mutex_unlock(&g_left_lock);
        return;
    }
    pthread_mutex_destroy(&a->lock);
    disco__pieces_destroy(&a->free);
    free(a);
}

unsigned disco__arena_left_count(void)
{
    pthread_mutex_lock(&g_left_lock);
    unsigned n = g_nleft;
    pthread_mutex_unlock(&g_left_lock);
    return n;
}

/* ---- the sub-allocator ---- */

disco_status_t disco__arena_alloc(struct disco__arena *a, uint64_t nbytes,
                                  struct disco__arena_blk **blk_out)
{
    uint64_t want = nbytes == 0 ? DISCO_ARENA_ALIGN : nbytes;
    if (want > a->bytes)
        return disco_set_error(DISCO_E_NOMEM,
                               "worker %d: a tensor of %llu bytes is larger than its device arena "
                               "on %s:%d (%llu bytes, cfg.device_arena_bytes)",
                               a->worker, (unsigned long long)nbytes, a->dev_name, a->dev.device_id,
                               (unsigned long long)a->bytes);
    want = (want + DISCO_ARENA_ALIGN - 1) / DISCO_ARENA_ALIGN * DISCO_ARENA_ALIGN;
    struct disco__arena_blk *b = malloc(sizeof *b);
    if (b == NULL)
        return disco_set_error(DISCO_E_NOMEM, "worker %d: arena block", a->worker);
    pthread_mutex_lock(&a->lock);
    uint64_t off = 0, largest = 0;
    if (disco__pieces_take(&a->free, want, &off, &largest)) {
        *b = (struct disco__arena_blk){
            .arena = a, .off = off, .bytes = nbytes, .reserved = want, .refs = 1};
        a->used += want;
        a->blocks++;
        pthread_mutex_unlock(&a->lock);
        *blk_out = b;
        return DISCO_OK;
    }
    uint64_t used = a->used;
    pthread_mutex_unlock(&a->lock);
    free(b);
    return disco_set_error(DISCO_E_NOMEM,
                           "worker %d: device arena on %s:%d is full: %llu bytes asked, %llu of "
                           "%llu free (largest piece %llu; cfg.device_arena_bytes)",
                           a->worker, a->dev_name, a->dev.device_id, (unsigned long long)nbytes,
                           (unsigned long long)(a->bytes - used), (unsigned long long)a->bytes,
                           (unsigned long long)largest);
}

void disco__arena_blk_ref(struct disco__arena_blk *blk)
{
    pthread_mutex_lock(&blk->arena->lock);
    blk->refs++;
    pthread_mutex_unlock(&blk->arena->lock);
}

void disco__arena_blk_release(struct disco__arena_blk *blk)
{
    if (blk == NULL)
        return;
    struct disco__arena *a = blk->arena;
    pthread_mutex_lock(&a->lock);
    bool last = --blk->refs == 0;
    if (last) {
        /* Merged with its neighbours. False: no memory for the list, the
         * piece is lost until the arena goes (pieces.c); used drops by it
         * all the same, as it always has, so the stats do not show it. */
        (void)disco__pieces_give(&a->free, blk->off, blk->reserved);
        a->used -= blk->reserved;
        a->blocks--;
    }
    pthread_mutex_unlock(&a->lock);
    if (last)
        free(blk);
}

void *disco__arena_blk_ptr(const struct disco__arena_blk *blk)
{
    return blk->arena->base + blk->off;
}

DLDevice disco__arena_device(const struct disco__arena *a)
{
    return a->dev;
}

disco_stream_t disco__arena_stream(const struct disco__arena *a)
{
    return a->stream;
}

/* ---- peers ---- */

disco_status_t disco__arena_peer(struct disco__arena *a, int peer, uint64_t off, uint64_t len,
                                 void **ptr_out, DLDevice *dev_out)
{
    if (peer < 0 || (uint32_t)peer >= a->world)
        return disco_set_error(DISCO_E_INVAL, "worker %d: no worker %d among %u", a->worker, peer,
                               a->world);
    uint64_t end;
    pthread_mutex_lock(&a->lock);
    disco_status_t st = DISCO_OK;
    if (peer == a->worker) {
        a->peer_bytes[peer] = a->total;
    } else if (a->peer[peer] == NULL) {
        struct disco__dev_pub *p = &a->area->pub[peer];
        /* P2. Acquire: pairs with the owner's release (P1); the fields are
         * complete when READY is seen. */
        if (atomic_load_explicit(&p->state, memory_order_acquire) != DISCO_ARENA_READY) {
            pthread_mutex_unlock(&a->lock);
            return disco_set_error(DISCO_E_INVAL, "worker %d: worker %d has no device arena yet",
                                   a->worker, peer);
        }
        disco_ipc_ref_t ref = p->ref; /* one copy: the shared fields may change under us */
        uint64_t bytes = p->bytes;
        void *base;
        if (p->device_type != (int32_t)a->dev.device_type) {
            st = disco_set_error(DISCO_E_MISMATCH,
                                 "worker %d: its arena is on %s, worker %d's on device type %d",
                                 a->worker, a->dev_name, peer, (int)p->device_type);
        } else if (ref.offset != 0 || ref.alloc_bytes != bytes || bytes == 0) {
            st = disco_set_error(DISCO_E_INVAL, "worker %d: worker %d's arena ref is corrupt",
                                 a->worker, peer);
        } else if ((st = disco_device_set(a->dev)) != DISCO_OK ||
                   (st = disco_device_ipc_import(&ref, &base)) != DISCO_OK) {
            /* The handle opens on the current device (cudaIpcOpenMemHandle),
             * which a copy or user code may have left on another one: the
             * import must be mapped where this worker's kernels read it
             * (test_gpu_session_coll.c, test_import_on_own_device). */
            st = disco_set_error(st, "worker %d: opening worker %d's arena (%s:%d): %s", a->worker,
                                 peer, type_name((DLDeviceType)p->device_type), (int)ref.device_id,
                                 disco_last_error());
        } else {
            a->peer[peer] = base;
            a->peer_ref[peer] = ref;
            a->peer_bytes[peer] = bytes;
            a->peer_dev[peer] = (DLDevice){a->dev.device_type, ref.device_id};
        }
    }
    if (st == DISCO_OK && (__builtin_add_overflow(off, len, &end) || end > a->peer_bytes[peer]))
        st = disco_set_error(DISCO_E_INVAL,
                             "worker %d: bytes [%llu, +%llu) lie outside worker %d's arena",
                             a->worker, (unsigned long long)off, (unsigned long long)len, peer);
    char *base = peer == a->worker ? a->base : a->peer[peer];
    DLDevice dev = peer == a->worker ? a->dev : a->peer_dev[peer];
    pthread_mutex_unlock(&a->lock);
    if (st == DISCO_OK) {
        *ptr_out = base + off;
        *dev_out = dev;
    }
    return st;
}

/* ---- ordering between workers: the arena's event ---- */

/* The worker's error for a failed device call st about what. */
static disco_status_t failed(struct disco__arena *a, disco_status_t st, const char *what, int peer)
{
    if (peer < 0)
        return disco_set_error(st, "worker %d: %s on %s:%d: %s", a->worker, what, a->dev_name,
                               a->dev.device_id, disco_last_error());
    return disco_set_error(st, "worker %d: %s worker %d's event on %s:%d: %s", a->worker, what,
                           peer, a->dev_name, a->dev.device_id, disco_last_error());
}

disco_status_t disco__arena_record(struct disco__arena *a)
{
    disco_status_t st = disco_device_event_record(a->event, a->stream);
    return st == DISCO_OK ? DISCO_OK : failed(a, st, "recording its arena's event", -1);
}

disco_status_t disco__arena_wait_for(struct disco__arena *a, int peer)
{
    if (peer < 0 || (uint32_t)peer >= a->world)
        return disco_set_error(DISCO_E_INVAL, "worker %d: no worker %d among %u", a->worker, peer,
                               a->world);
    if (peer == a->worker)
        return DISCO_OK; /* one stream: our own work is in order already */
    pthread_mutex_lock(&a->lock);
    disco_status_t st = DISCO_OK;
    if (a->peer_ev[peer] == NULL) {
        struct disco__dev_pub *p = &a->area->pub[peer];
        /* P2. Acquire, as in disco__arena_peer. */
        if (atomic_load_explicit(&p->state, memory_order_acquire) != DISCO_ARENA_READY) {
            pthread_mutex_unlock(&a->lock);
            return disco_set_error(DISCO_E_INVAL, "worker %d: worker %d has no device arena yet",
                                   a->worker, peer);
        }
        disco_ipc_handle_t h = p->event; /* one copy, as the ref */
        if (p->device_type != (int32_t)a->dev.device_type)
            st = disco_set_error(DISCO_E_MISMATCH,
                                 "worker %d: its arena is on %s, worker %d's on device type %d",
                                 a->worker, a->dev_name, peer, (int)p->device_type);
        else if ((st = disco_device_event_import(a->dev, &h, &a->peer_ev[peer])) != DISCO_OK)
            st = failed(a, st, "opening", peer);
    }
    if (st == DISCO_OK &&
        (st = disco_device_stream_wait_event(a->stream, a->peer_ev[peer])) != DISCO_OK)
        st = failed(a, st, "waiting for", peer);
    pthread_mutex_unlock(&a->lock);
    return st;
}

bool disco__arena_peer_share(const struct disco__arena *a, int peer, int32_t *type_out,
                             disco_device_uid_t *phys_out, uint32_t *share_out)
{
    if (!disco__arena_peer_ready(a, peer)) /* P2 */
        return false;
    const struct disco__dev_pub *p = &a->area->pub[peer];
    *type_out = p->device_type;
    *phys_out = p->phys;
    *share_out = p->share;
    return true;
}

bool disco__arena_peer_ready(const struct disco__arena *a, int peer)
{
    /* P2. Acquire, as in disco__arena_peer. */
    return peer >= 0 && (uint32_t)peer < a->world &&
           atomic_load_explicit(&a->area->pub[peer].state, memory_order_acquire) ==
               DISCO_ARENA_READY;
}

disco_status_t disco__arena_sync(struct disco__arena *a)
{
    disco_status_t st = disco_device_stream_sync(a->dev, a->stream);
    return st == DISCO_OK ? DISCO_OK : failed(a, st, "syncing its arena's stream", -1);
}

void disco__arena_stats(struct disco__arena *a, disco__arena_stats_t *stats_out)
{
    memset(stats_out, 0, sizeof *stats_out);
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    stats_out->bytes = a->bytes;
    stats_out->used = a->used;
    stats_out->blocks = a->blocks;
    stats_out->device = a->dev;
    stats_out->ar_one_shot = a->ar_runs[0];
    stats_out->ar_two_shot = a->ar_runs[1];
    stats_out->ar_staged = a->ar_runs[2];
    for (uint32_t i = 0; i < a->world; i++) {
        stats_out->peers += a->peer[i] != NULL;
        stats_out->events += a->peer_ev[i] != NULL;
    }
    pthread_mutex_unlock(&a->lock);
}

disco_status_t disco__arena_signal(struct disco__arena *a, int peer, uint32_t **sig_out)
{
    void *p;
    DLDevice dev;
    disco_status_t st = disco__arena_peer(a, peer, 0, DISCO_AR_SIGNAL_BYTES, &p, &dev);
    if (st == DISCO_OK)
        *sig_out = p;
    return st;
}

void disco__arena_count_ar(struct disco__arena *a, bool two_shot)
{
    pthread_mutex_lock(&a->lock);
    a->ar_runs[two_shot ? 1 : 0]++;
    pthread_mutex_unlock(&a->lock);
}

void disco__arena_count_staged(struct disco__arena *a)
{
    pthread_mutex_lock(&a->lock);
    a->ar_runs[2]++;
    pthread_mutex_unlock(&a->lock);
}
