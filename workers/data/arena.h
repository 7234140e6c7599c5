/*
 * arena.h - each worker's device arena (internal).
 *
 * A session's device tensors (sim or CUDA) are not allocated one by one:
 * each worker allocates ONE arena on its device (worker i -> device
 * i mod count, disco_device_for_worker): a zeroed signal region of
 * DISCO_AR_SIGNAL_BYTES for the allreduce kernels' flags
 * (workers/device/ar.h), then cfg.device_arena_bytes for tensors; exports it ONCE
 * (disco_device_ipc_export) and publishes the ref in the session's device
 * area, shared memory every worker maps. Tensors are carved out of the
 * arena by a host-side sub-allocator (a first-fit free list over offsets,
 * kept in the owner's private memory: nothing about it is shared), so a
 * device tensor is named across processes by (worker, arena offset, shape,
 * dtype), never by an IPC handle of its own. A peer opens another worker's
 * arena at its first use (disco_device_ipc_import) and keeps it open until
 * the arena context is destroyed.
 *
 * The device area (shared memory, after the collective area):
 *   header: magic, world, arena bytes, the IPC lifetime table's offset and
 *           size (the table disco_device_ipc_attach maps, formatted by the
 *           controller at open);
 *   pub[world]: per worker, its state word and, once ready, its device,
 *           the device's physical identity and MPS state as the worker saw
 *           them (docs/gpu-sharing.md: the allreduce routes by them) and the
 *           ref of its arena;
 *   share:  the devices' sharing state (workers/device/share.h: the sim's
 *           context words, one per sim device), bound by each process at
 *           its arena.
 * Publication protocol (labels used in arena.c):
 *   P1 the owner writes dev, bytes and ref into pub[i], then stores
 *      state = READY (release);
 *   P2 a peer loads state (acquire): READY means the fields are complete.
 *      The fields are never rewritten while the session lives (an arena is
 *      made once per worker and freed only at the worker's end).
 * A peer checks every field it reads against its range before use (a
 * corrupt worker can fail an import, not make a peer touch memory outside
 * what the IPC layer maps: the IPC table checks the ref itself).
 *
 * Thread safety: an arena context belongs to one worker (one thread at a
 * time, as the worker's register file); its functions take its lock all
 * the same, since tensors may be released from a function's own threads.
 */
#ifndef DISCO_WORKERS_ARENA_H
#define DISCO_WORKERS_ARENA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/device.h"
#include "disco/status.h"

#define DISCO_ARENA_ALIGN         256u          /* every tensor's offset: as cudaMalloc */
#define DISCO_ARENA_DEFAULT_BYTES (64ull << 20) /* cfg.device_arena_bytes 0 */
#define DISCO_ARENA_MAX_BYTES     (UINT64_C(1) << 40)
#define DISCO_DEV_AREA_MAGIC      0x3241455241564544ull /* "DEVAREA2": pub's share fields */

enum { DISCO_ARENA_NONE = 0, DISCO_ARENA_READY = 1 };

/* pub.share's bits */
enum { DISCO_SHARE_PHYS_KNOWN = 1u, DISCO_SHARE_MPS = 2u };

/* One worker's published arena (shared memory). */
struct disco__dev_pub {
    _Alignas(64) _Atomic uint32_t state; /* DISCO_ARENA_*: P1/P2 */
    int32_t device_type;
    int32_t device_id;
    uint32_t share; /* DISCO_SHARE_*: phys is known; kernels of processes sharing it run at once */
    disco_device_uid_t phys;
    uint64_t bytes;
    disco_ipc_ref_t ref;
    disco_ipc_handle_t event; /* the arena's IPC event (ordering, below) */
};

struct disco__dev_area {
    _Alignas(64) uint64_t magic;
    uint32_t world;
    uint32_t reserved;
    uint64_t arena_bytes; /* each worker's arena (the session config's) */
    uint64_t table_off;   /* the IPC lifetime table, from this header */
    uint64_t table_bytes;
    struct disco__dev_pub pub[];
};

/** Bytes of a device area for world workers, its IPC table included. */
size_t disco__dev_area_footprint(uint32_t world);

/** Formats a device area at mem (64-aligned, zeroed, the footprint for
 *  world) with the IPC table in it; arena_bytes is each worker's arena.
 *  The controller calls it before any worker starts. Returns DISCO_OK,
 *  DISCO_E_INVAL. */
disco_status_t disco__dev_area_init(struct disco__dev_area *a, uint32_t world,
                                    uint64_t arena_bytes);

/* A worker's device context: its arena and its cache of peers' arenas.
 * Private to the worker's process. */
struct disco__arena;

/* A block of an arena holding one tensor's bytes; reference-counted in
 * this process (registers of this worker only: tensors cross processes by
 * offset). */
struct disco__arena_blk {
    struct disco__arena *arena;
    uint64_t off;
    uint64_t bytes;    /* as asked */
    uint64_t reserved; /* rounded to DISCO_ARENA_ALIGN */
    uint32_t refs;
};

/** Makes *slot (when NULL) worker's device context on device type type:
 *  attaches this process to the area's IPC table, allocates the arena on
 *  the worker's device, exports it and publishes it (P1). An existing
 *  context on another device type is refused. Returns DISCO_OK;
 *  DISCO_E_NO_DEVICE (no such device type or no device: the detail names
 *  the worker and the device); DISCO_E_MISMATCH (the worker's arena is on
 *  another device type); DISCO_E_NOMEM (the device could not hold the
 *  arena); DISCO_E_INVAL (bad area; the process's IPC table is another
 *  session's, still in use); what disco_device_ipc_export returns. Nothing
 *  is left allocated on failure. */
disco_status_t disco__arena_ensure(struct disco__arena **slot, struct disco__dev_area *area,
                                   int worker, DLDeviceType type);

/** Destroys a context: releases every peer import, frees the arena (a
 *  refusal because live peers still hold it is left to process exit, as
 *  is the rest of the device's memory) and the context. NULL is harmless.
 *  Returns within about a second whatever the device does: the arena's
 *  stream is synced under a 1 s deadline first, and if it does not drain
 *  (a wait for a dead peer's record, a kernel still spinning), or an
 *  earlier arena of this process did not, nothing is freed (a free would
 *  wait for that stream): the arena, its stream, events and imports are
 *  left to process exit, the IPC bookkeeping is forgotten, and a line on
 *  stderr says so (unless DISCO_QUIET). Blocks still held point to freed
 *  memory: call after every register is cleared. */
void disco__arena_destroy(struct disco__arena *a);

/** How many arenas this process has left to process exit
 *  (disco__arena_destroy); disco_session_arenas_left. Thread-safe. */
unsigned disco__arena_left_count(void);

/** A block of nbytes (> 0) from a's arena, refs 1. Returns DISCO_OK,
 *  DISCO_E_NOMEM (arena full: the detail names the worker, the device, the
 *  size asked, what is free and the largest free piece). */
disco_status_t disco__arena_alloc(struct disco__arena *a, uint64_t nbytes,
                                  struct disco__arena_blk **blk_out);

/** Another reference to blk. */
void disco__arena_blk_ref(struct disco__arena_blk *blk);

/** Drops one reference; the last gives the bytes back. NULL is harmless. */
void disco__arena_blk_release(struct disco__arena_blk *blk);

/** The device address of blk's bytes (in this, the owner's, process). */
void *disco__arena_blk_ptr(const struct disco__arena_blk *blk);

/** The device a's arena is on. */
DLDevice disco__arena_device(const struct disco__arena *a);

/** The stream a's copies run on: every device operation of the worker on
 *  its arena goes on it, in order. */
disco_stream_t disco__arena_stream(const struct disco__arena *a);

/* Ordering between workers. Each arena has one IPC event (CUDA:
 * cudaEventInterprocess | cudaEventDisableTiming), made and exported with
 * the arena, its handle published beside the arena's ref (P1/P2), opened
 * by a peer at its first wait and cached. A worker records it on its
 * stream (disco__arena_record) and only then tells the others through the
 * host (a barrier); a peer that heard makes its own stream wait for that
 * record (disco__arena_wait_for) before queuing work that touches the
 * recorder's bytes. A wait covers the records made before it was issued,
 * so "record, barrier, wait" orders the device work across processes
 * without any host waiting for a device. */

/** Records a's event on a's stream (everything queued so far). Returns
 *  DISCO_OK or the device's error, naming the worker and device. */
disco_status_t disco__arena_record(struct disco__arena *a);

/** Makes a's stream wait for worker peer's last record (a no-op for a's
 *  own worker): peer's event is opened at the first call and cached.
 *  Returns DISCO_OK; DISCO_E_INVAL (peer out of range or no arena yet);
 *  DISCO_E_MISMATCH (another device type); the import's or the wait's
 *  error, naming both workers and the device. */
disco_status_t disco__arena_wait_for(struct disco__arena *a, int peer);

/** Whether worker peer has published its arena (P2). */
bool disco__arena_peer_ready(const struct disco__arena *a, int peer);

/** Waits on the host for everything queued on a's stream. Returns
 *  DISCO_OK or the device's error, naming the worker and device. */
disco_status_t disco__arena_sync(struct disco__arena *a);

/** The address, in this process, of bytes [off, off + len) of worker
 *  peer's arena: peer's own pointer for this worker, else the peer's
 *  arena is imported at its first use and cached; *dev_out is the device
 *  the bytes are on. Returns DISCO_OK;
 *  DISCO_E_INVAL (peer out of range, its arena not published yet, or the
 *  span outside it); what disco_device_ipc_import returns. */
disco_status_t disco__arena_peer(struct disco__arena *a, int peer, uint64_t off, uint64_t len,
                                 void **ptr_out, DLDevice *dev_out);

typedef struct disco__arena_stats {
    uint64_t bytes;  /* the arena's size */
    uint64_t used;   /* bytes reserved by live blocks */
    uint32_t blocks; /* live blocks */
    uint32_t peers;  /* peers' arenas imported here */
    uint32_t events; /* peers' IPC events imported here */
    DLDevice device;
    uint64_t ar_one_shot, ar_two_shot; /* allreduce kernels this worker ran */
    uint64_t ar_staged;                /* allreduces staged through host memory instead */
} disco__arena_stats_t;

/** The address, in this process, of worker peer's signal region (the
 *  first DISCO_AR_SIGNAL_BYTES of its arena, workers/device/ar.h; tensors
 *  are carved from what follows). Returns as disco__arena_peer. */
disco_status_t disco__arena_signal(struct disco__arena *a, int peer, uint32_t **sig_out);

/** Counts an allreduce kernel a's worker ran (stats). */
void disco__arena_count_ar(struct disco__arena *a, bool two_shot);

/** Counts an allreduce a's worker staged through host memory (stats). */
void disco__arena_count_staged(struct disco__arena *a);

/** What worker peer published about its device (P2): its type, physical
 *  identity and DISCO_SHARE_* bits. Returns false (outputs untouched) while
 *  it has no arena, or peer is out of range. */
bool disco__arena_peer_share(const struct disco__arena *a, int peer, int32_t *type_out,
                             disco_device_uid_t *phys_out, uint32_t *share_out);

/** a's counts (for tests and debugging). */
void disco__arena_stats(struct disco__arena *a, disco__arena_stats_t *stats_out);

#endif
