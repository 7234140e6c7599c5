/*
 * disco/device.h - device memory, copies and streams per device type, and
 * sharing CUDA memory between processes.
 *
 * Error rule (as everywhere in disco): functions return a disco_status_t,
 * output arguments are written only on success, and the failing call records
 * its context in disco_last_error().
 *
 * Device types. kDLCPU is plain host memory (malloc; copies are memcpy;
 * streams are no-ops). kDLCUDA is built whenever the CUDA toolkit is present
 * at build time (disco_device_has_cuda()); the driver is loaded at run time.
 * A build without CUDA, or a machine without a GPU or driver, answers every
 * CUDA call with DISCO_E_NO_DEVICE and a detail that starts with
 * "no CUDA device: " ("...this build has no CUDA support", or
 * "...cudaGetDeviceCount: no CUDA-capable device is detected"); the CPU path
 * is unaffected. kDLExtDev is the simulated GPU, "sim" (below). Other device
 * types give DISCO_E_NO_DEVICE.
 *
 * The simulated GPU (kDLExtDev, "sim"). A test and development device, not
 * a GPU: it follows CUDA's rules where a program's logic depends on them, so
 * code that runs on sim has its syncs and IPC lifetimes right. No
 * performance figure means anything on it. DISCO_SIM_GPUS=N (read once, at
 * first use) or disco_device_sim_set_count(N) gives N devices sim:0..N-1;
 * with none, every sim call gives DISCO_E_NO_DEVICE ("no sim device: set
 * DISCO_SIM_GPUS"), and a device id out of range DISCO_E_NO_DEVICE
 * ("sim:<id>: no such device"). Each allocation is a memfd mapped PROT_NONE
 * at the address handed out: host code that dereferences it faults (as with
 * a GPU pointer); ptr + k names byte k; only copies reach the bytes. A
 * process may allocate DISCO_SIM_MEM_MB MiB (default 4096, page-rounded
 * allocations) per sim device; past that DISCO_E_NOMEM ("sim:<id>: out of
 * memory"). Streams are queues: nothing queued (copies, event records and
 * waits) runs until disco_device_stream_sync of its stream, or until an
 * event wait (of any process) needs a record queued on it, which runs the
 * stream up to that record; so a read that misses its sync sees the old
 * bytes; the host side of a queued copy must
 * stay valid until then (as with cudaMemcpyAsync). DISCO_SIM_PEER_COPY_US=n
 * (a test knob, under a second) makes each copy to or from another
 * process's memory wait n microseconds when it runs, as over a slow link,
 * which widens the window a missing cross-process wait would leave open. The NULL stream is each
 * device's default stream in the process, asynchronous like the others
 * (disco's CUDA copy also queues on the default stream); it is not ordered
 * with created streams. disco_device_free, disco_device_ipc_release of the last import
 * and disco_device_event_free first run every queued stream of the process
 * (cudaFree synchronizes too). IPC follows the CUDA rules below; importing
 * takes the exporter's memfd with pidfd_getfd, or through
 * /proc/PID/fd/N where that is refused (same user). State is per
 * process: a forked child starts with no sim memory, streams or events.
 *
 * Workers and GPUs. Worker i uses GPU i mod (number of GPUs), so several
 * workers may share one GPU (disco_device_for_worker). Processes that use
 * CUDA must be forked before the parent initializes CUDA (any CUDA call
 * here does): a child forked afterwards cannot use CUDA, and each of its
 * CUDA calls fails with DISCO_E_NO_DEVICE saying so ("forked from pid N
 * after that process had called CUDA"); spawned workers
 * (DISCO_LAUNCH_SPAWN) serve a controller that already holds a context.
 *
 * CUDA calls change the calling thread's current device to the one they
 * name (as cudaSetDevice), as TVM's device API does.
 */
#ifndef DISCO_DEVICE_H
#define DISCO_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "disco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * The device API, one table per device type
 * ------------------------------------------------------------------------- */

/* A stream of work on a device (CUDA: a cudaStream_t). NULL is the device's
 * default stream; CPU ignores streams (its copies finish before they return). */
typedef void *disco_stream_t;

/* A physical device's identity, the same in every process of the machine
 * (CUDA: the GPU's UUID; sim: "sim" and the device index; CPU: "cpu"). Two
 * processes' devices with equal ids are one device, whatever index each
 * process gives it. */
#define DISCO_DEVICE_UID_BYTES 16
/* A physical device's identity (see above). */
typedef struct disco_device_uid {
    /* the id's bytes (zero-padded) */
    uint8_t bytes[DISCO_DEVICE_UID_BYTES];
} disco_device_uid_t;

/* What a device type provides. Every pointer is set. Thread-safe: each
 * function may be called from any thread. The functions return what the
 * disco_device_* wrappers below document. */
typedef struct disco_device_api {
    DLDeviceType type; /* the DLPack device type it serves */
    const char *name;  /* "cpu", "cuda", "sim" */
    /* as disco_device_count */
    disco_status_t (*count)(int *count_out);
    /* makes device_id current for this thread (CUDA); cpu and sim check it */
    disco_status_t (*set_device)(int device_id);
    /* as disco_device_alloc */
    disco_status_t (*alloc)(int device_id, size_t nbytes, void **ptr_out);
    /* as disco_device_free */
    disco_status_t (*free)(int device_id, void *ptr);
    /* One side (or both) is of this type; the other is kDLCPU or this type. */
    disco_status_t (*copy)(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                           size_t nbytes, disco_stream_t stream);
    /* as disco_device_stream_create */
    disco_status_t (*stream_create)(int device_id, disco_stream_t *stream_out);
    /* as disco_device_stream_free */
    disco_status_t (*stream_free)(int device_id, disco_stream_t stream);
    /* as disco_device_stream_sync */
    disco_status_t (*stream_sync)(int device_id, disco_stream_t stream);
    /* The physical device behind device_id, and whether it runs kernels
     * of different processes at the same time (MPS) as detected, before
     * DISCO_GPU_MPS (which disco_device_mps applies): docs/gpu-sharing.md. */
    disco_status_t (*physical_id)(int device_id, disco_device_uid_t *id_out);
    /* whether MPS runs this device's kernels of several processes at once */
    disco_status_t (*mps)(int device_id, bool *on_out);
} disco_device_api_t;

/** The device API of a device type. Thread-safe. Returns DISCO_OK or
 *  DISCO_E_NO_DEVICE (a type disco does not support). A CUDA table exists in
 *  every build; without CUDA its functions return DISCO_E_NO_DEVICE. */
disco_status_t disco_device_api_get(DLDeviceType type, const disco_device_api_t **api_out);

/** Sets the number of sim devices (0..64), instead of DISCO_SIM_GPUS. Call
 *  it before any sim call and before forking workers (a forked child
 *  inherits the count; a spawned, exec'd process reads DISCO_SIM_GPUS).
 *  Thread-safe. Returns DISCO_OK or DISCO_E_INVAL (n out of range). */
disco_status_t disco_device_sim_set_count(int n);

/** Whether this build has CUDA support (the toolkit was found at build
 *  time). Says nothing about a GPU being there. Thread-safe. */
bool disco_device_has_cuda(void);

/** Number of devices of a type: 1 for kDLCPU, the number of GPUs for kDLCUDA,
 *  the configured count for kDLExtDev (sim; none: DISCO_E_NO_DEVICE).
 *  Thread-safe. Returns DISCO_OK (count >= 1), DISCO_E_NO_DEVICE (no CUDA
 *  build, no driver, no GPU, or a process forked after CUDA was initialized
 *  in its parent; the detail says which), DISCO_E_SYS (CUDA failed
 *  otherwise). */
disco_status_t disco_device_count(DLDeviceType type, int *count_out);

/** As disco_device_count, asked in a forked child, so that this process
 *  does not initialize CUDA (a process that has called CUDA cannot fork
 *  workers that use it): for a controller that must know whether there is
 *  a GPU before it opens a session. The child's status and message come
 *  back as this call's. Returns what disco_device_count returns, or
 *  DISCO_E_SYS (pipe or fork failed; the child gave no answer). */
disco_status_t disco_device_probe(DLDeviceType type, int *count_out);

/** The device index worker worker_id uses among num_devices devices:
 *  worker_id mod num_devices. Thread-safe, pure. Returns -1 if worker_id < 0
 *  or num_devices < 1. */
static inline int disco_device_for_worker(int worker_id, int num_devices)
{
    if (worker_id < 0 || num_devices < 1)
        return -1;
    return worker_id % num_devices;
}

/** The device of type a worker uses: {type, worker_id mod count}; for kDLCPU
 *  always {kDLCPU, 0}. Thread-safe. Returns DISCO_OK, DISCO_E_INVAL
 *  (worker_id < 0), or what disco_device_count returns. */
disco_status_t disco_device_of_worker(DLDeviceType type, int worker_id, DLDevice *dev_out);

/** Makes dev the calling thread's current device (cudaSetDevice). CPU: no-op.
 *  Returns DISCO_OK, DISCO_E_NO_DEVICE (no such device), DISCO_E_SYS. */
disco_status_t disco_device_set(DLDevice dev);

/** nbytes (> 0) of memory on dev: malloc'd (64-byte aligned) for CPU,
 *  cudaMalloc'd for CUDA (and known to this process's IPC table, see below).
 *  Thread-safe. Returns DISCO_OK, DISCO_E_INVAL (nbytes 0), DISCO_E_NOMEM,
 *  DISCO_E_NO_DEVICE, DISCO_E_SYS. */
disco_status_t disco_device_alloc(DLDevice dev, size_t nbytes, void **ptr_out);

/** Frees what disco_device_alloc gave on dev. NULL is harmless. CUDA memory
 *  that another process still imports is not freed: DISCO_E_AGAIN, with the
 *  importers' pids in the detail (free it after they release). Thread-safe.
 *  Returns DISCO_OK, DISCO_E_AGAIN, DISCO_E_INVAL (not an allocation of this
 *  process), DISCO_E_NO_DEVICE, DISCO_E_SYS. */
disco_status_t disco_device_free(DLDevice dev, void *ptr);

/** Copies nbytes from src on src_dev to dst on dst_dev: host<->device and
 *  device<->device (across GPUs too; sim with sim or cpu, cuda with cuda or
 *  cpu). With a CUDA or sim side the copy is queued on stream (any device's
 *  of that type; NULL: the default stream of dst's device, of src's when dst
 *  is CPU) and is complete after disco_device_stream_sync of that stream
 *  (sim: and not before); CPU to CPU finishes before it returns. Sim
 *  pointers must lie, with all nbytes, in sim memory of this process (an
 *  allocation or an import; else DISCO_E_INVAL).
 *  Thread-safe. Returns DISCO_OK, DISCO_E_INVAL (NULL pointer with
 *  nbytes > 0), DISCO_E_NO_DEVICE (unsupported pair, no CUDA), DISCO_E_SYS. */
disco_status_t disco_device_copy(void *dst, DLDevice dst_dev, const void *src, DLDevice src_dev,
                                 size_t nbytes, disco_stream_t stream);

/** A new stream on dev (CUDA: non-blocking with respect to the default
 *  stream; CPU: NULL). Returns DISCO_OK, DISCO_E_NO_DEVICE, DISCO_E_SYS. */
disco_status_t disco_device_stream_create(DLDevice dev, disco_stream_t *stream_out);

/** Destroys a stream from disco_device_stream_create. NULL is harmless.
 *  Returns DISCO_OK, DISCO_E_NO_DEVICE, DISCO_E_SYS. */
disco_status_t disco_device_stream_free(DLDevice dev, disco_stream_t stream);

/** Waits until everything queued on stream (NULL: the default stream) is done.
 *  Returns DISCO_OK, DISCO_E_NO_DEVICE, DISCO_E_SYS (a failed kernel or copy
 *  reports here). */
disco_status_t disco_device_stream_sync(DLDevice dev, disco_stream_t stream);

/* ---------------------------------------------------------------------------
 * Several processes on one device (docs/gpu-sharing.md)
 *
 * Each process holds its own context on a GPU. Without MPS (NVIDIA's
 * Multi-Process Service) a GPU runs one context at a time, in time slices:
 * kernels of two processes that wait for each other advance only at
 * context switches (milliseconds). disco's collectives launch such kernels
 * only when every member has a GPU of its own or MPS is on.
 * ------------------------------------------------------------------------- */

/** The physical identity of dev (CUDA: cudaDeviceProp.uuid, which
 *  initializes CUDA in this process; sim: "sim" and the index, the same
 *  device in every process of a session; CPU: "cpu"). Thread-safe. Returns
 *  DISCO_OK, DISCO_E_NO_DEVICE (no such device), DISCO_E_SYS. */
disco_status_t disco_device_physical_id(DLDevice dev, disco_device_uid_t *id_out);

/** Whether kernels of different processes on dev run at the same time:
 *  DISCO_GPU_MPS=1 or 0 when set (the user's word, read at each call);
 *  else detected: CUDA, an MPS control daemon's pipe
 *  ($CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps, holding a FIFO
 *  named "control"); sim, DISCO_SIM_MPS=1 (the simulated machine runs
 *  MPS); CPU, always. Thread-safe. Returns DISCO_OK, DISCO_E_NO_DEVICE (no
 *  such device type). */
disco_status_t disco_device_mps(DLDevice dev, bool *on_out);

/* ---------------------------------------------------------------------------
 * Sharing CUDA (and sim) memory between processes (CUDA IPC)
 *
 * Sim memory follows the same protocol and rules with the same calls: its
 * handle names the exporter's pid and memfd; the import maps that memfd.
 *
 * Protocol:
 *   1. Before forking (or before spawning, in memory every worker maps), one
 *      process formats a lifetime table in shared memory:
 *      disco_device_ipc_init(mem, disco_device_ipc_footprint(n), n).
 *      Every process that shares memory calls disco_device_ipc_attach(mem,..)
 *      (a forked child inherits the attachment).
 *   2. The owner allocates with disco_device_alloc and exports a pointer:
 *      disco_device_ipc_export(ptr, &ref). The allocation is exported once
 *      (one cudaIpcGetMemHandle per allocation, whatever pointer inside it is
 *      exported and however often); ref is its base handle + the offset.
 *   3. ref travels to other processes as plain bytes (pipe, ring, heap).
 *   4. An importer calls disco_device_ipc_import(&ref, &ptr): the first
 *      import of an allocation in a process opens its handle
 *      (cudaIpcOpenMemHandle, on the importer's current device: call
 *      disco_device_set first, since any copy leaves its own device
 *      current, and a kernel on another device faults on it), later ones
 *      reuse the cached mapping and count a reference. The exporter
 *      importing its own ref gets its own pointer back; nothing is opened.
 *   5. Each import is undone by disco_device_ipc_release(&ref); the last one
 *      in a process closes the handle.
 *   6. The owner's disco_device_free refuses (DISCO_E_AGAIN) while any live
 *      process holds an import; processes that died are not counted.
 * Ordering of the bytes between processes is the caller's, with IPC events.
 * ------------------------------------------------------------------------- */

#define DISCO_IPC_HANDLE_BYTES 64

/* A CUDA IPC handle (memory or event): opaque bytes. */
typedef struct disco_ipc_handle {
    unsigned char bytes[DISCO_IPC_HANDLE_BYTES]; /* the backend's handle, zero-padded */
} disco_ipc_handle_t;

/* A pointer into an exported allocation, as it travels between processes:
 * the allocation's base handle plus an offset. Plain bytes, no pointers. */
typedef struct disco_ipc_ref {
    disco_ipc_handle_t handle; /* of the allocation's base */
    int32_t exporter_pid;      /* the process that allocated it */
    int32_t device_id;         /* the exporter's device */
    uint32_t slot;             /* entry in the shared lifetime table */
    uint32_t gen;              /* that entry's generation (stale refs fail) */
    uint64_t offset;           /* of the pointer from the allocation's base */
    uint64_t alloc_bytes;      /* size of the whole allocation */
} disco_ipc_ref_t;

/** Bytes of shared memory a lifetime table for max_exports allocations
 *  (exported at once, by all processes together) needs. */
size_t disco_device_ipc_footprint(uint32_t max_exports);

/** Formats the lifetime table in mem (bytes from disco_device_ipc_footprint,
 *  shared memory, 64-byte aligned) and attaches this process to it. Call
 *  once, before other processes attach. Not thread-safe with other calls
 *  of this section. Returns DISCO_OK, DISCO_E_INVAL (too small, misaligned). */
disco_status_t disco_device_ipc_init(void *mem, size_t bytes, uint32_t max_exports);

/** Attaches this process to a table another process formatted (mem is this
 *  process's mapping of it). Returns DISCO_OK, DISCO_E_INVAL,
 *  DISCO_E_BAD_MAGIC (not a table of this layout version). */
disco_status_t disco_device_ipc_attach(void *mem, size_t bytes);

/** Detaches this process from the table at mem if it is the one attached
 *  (else does nothing), so that mem may be unmapped: later export and
 *  import calls fail with DISCO_E_INVAL ("no IPC table attached") instead
 *  of touching it. Refused while exports or imports of this process use
 *  it. Thread-safe. Returns DISCO_OK, DISCO_E_INVAL (in use). */
disco_status_t disco_device_ipc_detach(void *mem);

/** Exports ptr (inside memory from disco_device_alloc on a CUDA or sim device).
 *  Thread-safe. Returns DISCO_OK, DISCO_E_INVAL (not inside an allocation of
 *  this process; no table attached), DISCO_E_NOMEM (table full),
 *  DISCO_E_NO_DEVICE, DISCO_E_SYS (cudaIpcGetMemHandle failed). */
disco_status_t disco_device_ipc_export(const void *ptr, disco_ipc_ref_t *ref_out);

/** Maps the pointer ref names into this process (see the protocol).
 *  Thread-safe. Returns DISCO_OK; DISCO_E_INVAL (a bad, forged or stale
 *  ref: the allocation was freed, or is being freed, or the ref's handle,
 *  offset or size disagree with the table); DISCO_E_NO_DEVICE; DISCO_E_SYS
 *  (cudaIpcOpenMemHandle failed). */
disco_status_t disco_device_ipc_import(const disco_ipc_ref_t *ref, void **ptr_out);

/** Undoes one import of ref's allocation. Thread-safe. Returns DISCO_OK,
 *  DISCO_E_INVAL (not imported by this process), DISCO_E_SYS (closing the
 *  handle failed; the import is dropped all the same). */
disco_status_t disco_device_ipc_release(const disco_ipc_ref_t *ref);

/* ---------------------------------------------------------------------------
 * IPC events (CUDA and sim): ordering work across processes
 *
 * Sim events are counters in a memfd. A record another process waits for
 * completes without its recorder syncing, as on a GPU: the waiter pokes the
 * event, and a thread of the recording process (started at its first record
 * of the event) runs the stream up to the record, no further. A waiter
 * whose recorder died gets DISCO_E_SYS. disco_device_event_query never runs
 * a stream (poll with it and nothing moves: use a sync or a wait). On sim, a NULL stream in
 * record or stream_wait_event is the default stream of the event's device.
 *
 * Events are made with cudaEventInterprocess | cudaEventDisableTiming. The
 * owner records on its stream and tells the other process (by any host
 * channel) that it did; the other process then makes its stream wait for
 * the event (or waits on the host). A wait covers the last record made
 * before the wait was issued. Importing an event twice gives two handles;
 * free each.
 * ------------------------------------------------------------------------- */

typedef struct disco_event disco_event_t;

/** A new interprocess event on dev (kDLCUDA or kDLExtDev). Returns DISCO_OK,
 *  DISCO_E_NO_DEVICE, DISCO_E_NOMEM, DISCO_E_SYS. */
disco_status_t disco_device_event_create(DLDevice dev, disco_event_t **event_out);

/** The handle another process imports ev with. Returns DISCO_OK,
 *  DISCO_E_INVAL (NULL), DISCO_E_SYS. */
disco_status_t disco_device_event_export(disco_event_t *ev, disco_ipc_handle_t *handle_out);

/** Opens an event another process exported, for use on dev. Returns
 *  DISCO_OK, DISCO_E_NO_DEVICE, DISCO_E_NOMEM, DISCO_E_SYS (bad handle). */
disco_status_t disco_device_event_import(DLDevice dev, const disco_ipc_handle_t *handle,
                                         disco_event_t **event_out);

/** Records ev on stream (NULL: default stream). Returns DISCO_OK,
 *  DISCO_E_INVAL, DISCO_E_SYS. */
disco_status_t disco_device_event_record(disco_event_t *ev, disco_stream_t stream);

/** Makes later work on stream wait for ev's last record. Returns DISCO_OK,
 *  DISCO_E_INVAL, DISCO_E_SYS. */
disco_status_t disco_device_stream_wait_event(disco_stream_t stream, disco_event_t *ev);

/** Waits on the host until ev's last record is done. Returns DISCO_OK,
 *  DISCO_E_INVAL, DISCO_E_SYS. */
disco_status_t disco_device_event_sync(disco_event_t *ev);

/** DISCO_OK if ev's last record is done, DISCO_E_AGAIN if not yet;
 *  DISCO_E_INVAL, DISCO_E_SYS. */
disco_status_t disco_device_event_query(disco_event_t *ev);

/** Destroys ev (made or imported here). NULL is harmless. */
void disco_device_event_free(disco_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif
