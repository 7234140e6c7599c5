/* ipc.h - CUDA IPC bookkeeping, apart from the CUDA calls (internal).
 *
 * What CUDA IPC demands (REFERENCE.md, "CUDA IPC rules"): a handle names an
 * allocation's base; a handle is opened at most once per process, never by
 * its exporter; every opened handle is closed; the exporter must not free
 * while importers have it open. This module keeps those rules with no CUDA
 * in it: the three calls that touch a device go through a backend (in a
 * process, device.c's, which sends sim memory and handles to
 * workers/device/sim.c and the rest to CUDA in workers/device/cuda.c; in
 * the IPC suites, a memfd fake in tests/ipc_fake.h).
 *
 * Two parts:
 *  - A per-process context (disco_ipc_t): the export table (this process's
 *    allocations, sorted by base: the one containing a pointer, its handle
 *    once exported) and the import cache (handles opened here, keyed by the
 *    handle's bytes + the exporter's pid, with a reference count).
 *  - A lifetime table in shared memory (disco_ipc_table_t), one slot per
 *    exported allocation: its handle, size, device, and the pids of the
 *    processes that have it open. Nothing in it is a pointer.
 *
 * Slot protocol. A slot's word is gen (32 bits) | exporter pid (30) |
 * state (2): FREE -> FILLING (exporter claims it; CAS) -> LIVE (fields
 * written, then the word stored with release) -> CLOSING (exporter frees:
 * CAS) -> FREE with gen + 1. A ref carries (slot, gen), so a ref to a freed
 * allocation never matches again.
 *   Importer (first import in its process), labels as in ipc_table.c:
 *     I1 reads the word (acquire): must be (gen, LIVE);
 *     I2 claims a free importer cell with its pid (CAS, seq_cst);
 *     I3 reads the word again (seq_cst): still (gen, LIVE), else undoes I2;
 *     I4 checks the slot's fields against the ref, then opens the handle.
 *   Importer, last release: closes the handle, then R1 clears its cell
 *     (release).
 *   Exporter, free: F1 word LIVE -> CLOSING (CAS, seq_cst); F2 reads every
 *     cell (seq_cst). A cell held by a live pid: back to LIVE and refuse
 *     (DISCO_E_AGAIN). Cells of dead pids are cleared. Otherwise F3 stores
 *     (gen + 1, FREE) (release).
 * I2/I3 against F1/F2 is Dekker's pattern under seq_cst: either the importer
 * sees CLOSING and backs off, or the exporter sees the importer's cell and
 * refuses; never both miss. So an import that succeeded holds the memory
 * until its release. An importer that backs off because a free was being
 * attempted (and then refused) gets DISCO_E_INVAL; retrying is fine.
 * Slots of exporters that died are reclaimed when the table is full, once
 * no live process holds them.
 *
 * Thread safety: a context has a mutex; every function below may be called
 * from any thread of its process. A context belongs to the process that made
 * it: in a forked child, calls fail (DISCO_E_INVAL); discard it there
 * (disco__ipc_discard) and make a new one.
 */
#ifndef DISCO_WORKERS_IPC_H
#define DISCO_WORKERS_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/device.h"
#include "disco/status.h"

#define DISCO_IPC_MAX_IMPORTERS 64 /* processes holding one allocation at once */

/* ---- backend ---------------------------------------------------------- */

/* The device calls the bookkeeping needs. ctx is passed back to each. */
typedef struct disco_ipc_backend {
    void *ctx;
    /* The IPC handle of an allocation's base (cudaIpcGetMemHandle). */
    disco_status_t (*get_handle)(void *ctx, void *base, disco_ipc_handle_t *handle_out);
    /* Maps another process's allocation here (cudaIpcOpenMemHandle). */
    disco_status_t (*open_handle)(void *ctx, const disco_ipc_handle_t *handle, void **base_out);
    /* Unmaps what open_handle gave (cudaIpcCloseMemHandle). */
    disco_status_t (*close_handle)(void *ctx, void *base);
} disco_ipc_backend_t;

/* The CUDA backends (workers/device/cuda.c). Without CUDA in the build, every
 * function of both returns DISCO_E_NO_DEVICE. */
extern const disco_ipc_backend_t disco__cuda_ipc_backend;
extern const disco_device_api_t disco__cuda_api;

/* ---- the lifetime table (shared memory) ------------------------------ */

/* A process's handle on a table: the shared memory and the slot count this
 * process checked, read once (the shared header is every mapper's to write;
 * a count re-read from it would let a peer move every bound). */
typedef struct disco_ipc_table disco_ipc_table_t;

/** Bytes a table of nslots slots needs. */
size_t disco__ipc_table_footprint(uint32_t nslots);

/** Formats a table in mem (shared, 64-byte aligned, at least the footprint
 *  of nslots >= 1) and, with table_out not NULL, makes this process's
 *  handle on it (release it with disco__ipc_table_release). Returns
 *  DISCO_OK, DISCO_E_INVAL, DISCO_E_NOMEM. */
disco_status_t disco__ipc_table_init(void *mem, size_t bytes, uint32_t nslots,
                                     disco_ipc_table_t **table_out);

/** A handle on the formatted table in mem (bytes mapped), its header read
 *  once and checked against bytes. Returns DISCO_OK, DISCO_E_INVAL (NULL,
 *  misaligned, smaller than its slots need), DISCO_E_BAD_MAGIC,
 *  DISCO_E_NOMEM. */
disco_status_t disco__ipc_table_attach(void *mem, size_t bytes, disco_ipc_table_t **table_out);

/** Frees a handle (not the table). NULL is harmless. */
void disco__ipc_table_release(disco_ipc_table_t *t);

/** Whether t is a handle on the table at mem (of nslots slots; 0: any). */
bool disco__ipc_table_is(const disco_ipc_table_t *t, const void *mem, uint32_t nslots);

/* ---- the per-process context ------------------------------------------ */

typedef struct disco_ipc disco_ipc_t;

/** A context using backend (copied) and table (may be NULL: exports and
 *  imports then fail until disco__ipc_set_table). Returns DISCO_OK,
 *  DISCO_E_INVAL, DISCO_E_NOMEM. */
disco_status_t disco__ipc_create(const disco_ipc_backend_t *backend, disco_ipc_table_t *table,
                                 disco_ipc_t **ipc_out);

/** Sets the table. Returns DISCO_OK, or DISCO_E_INVAL when another table is
 *  set and something is exported or imported through it. */
disco_status_t disco__ipc_set_table(disco_ipc_t *ipc, disco_ipc_table_t *table);

/** Closes every import, frees the slots of exports nobody holds (a slot
 *  still imported stays until this process has exited and its importers
 *  released it), and frees ipc. NULL is harmless. */
void disco__ipc_destroy(disco_ipc_t *ipc);

/** Frees a context inherited across fork without touching the table or
 *  calling the backend (the handles belong to the parent). */
void disco__ipc_discard(disco_ipc_t *ipc);

/** Records an allocation of this process: [base, base + bytes), bytes > 0,
 *  on device_id. Returns DISCO_OK, DISCO_E_INVAL (NULL, 0 bytes, overlaps a
 *  recorded one), DISCO_E_NOMEM. */
disco_status_t disco__ipc_add(disco_ipc_t *ipc, void *base, size_t bytes, int device_id);

/** Forgets the allocation at base, before the caller frees it. Refused while
 *  a live process (this one included) holds an import of it. Returns
 *  DISCO_OK; DISCO_E_AGAIN (still imported; the detail names the pids);
 *  DISCO_E_INVAL (base is not the base of a recorded allocation). */
disco_status_t disco__ipc_remove(disco_ipc_t *ipc, void *base);

/** The recorded allocation containing ptr. Any output may be NULL. Returns
 *  DISCO_OK or DISCO_E_INVAL (none). */
disco_status_t disco__ipc_find(disco_ipc_t *ipc, const void *ptr, void **base_out,
                               size_t *bytes_out, int *device_out);

/** The ref for ptr (inside a recorded allocation): the allocation's handle
 *  (asked of the backend once per allocation) + ptr's offset. Returns
 *  DISCO_OK, DISCO_E_INVAL (no allocation, no table), DISCO_E_NOMEM (table
 *  full), the backend's error. */
disco_status_t disco__ipc_export(disco_ipc_t *ipc, const void *ptr, disco_ipc_ref_t *ref_out);

/** This process's pointer for ref: its own pointer if ref is its own export
 *  (nothing opened), the cached mapping + offset if the allocation is open
 *  here already, else the handle is opened (once). Counts a reference.
 *  Returns DISCO_OK, DISCO_E_INVAL (bad, stale or forged ref; table missing
 *  or full of importers), the backend's error (nothing is kept then). */
disco_status_t disco__ipc_import(disco_ipc_t *ipc, const disco_ipc_ref_t *ref, void **ptr_out);

/** Drops one reference taken by disco__ipc_import; the last closes the
 *  handle and leaves the slot. Returns DISCO_OK, DISCO_E_INVAL (no such
 *  import), the backend's close error (the import is dropped anyway). */
disco_status_t disco__ipc_release(disco_ipc_t *ipc, const disco_ipc_ref_t *ref);

/** Forgets, without the backend (no cudaIpcCloseMemHandle, no free: both
 *  may wait for device work that never ends), what this process holds of
 *  an allocation it gives up to process exit: forget drops the allocation
 *  at base (its slot is closed if no live importer holds it, else left to
 *  the table's owner), forget_import every reference to ref's import (its
 *  slot is left; the mapping stays). So the context no longer uses the
 *  table (disco__ipc_set_table may detach it). Returns DISCO_OK or
 *  DISCO_E_INVAL (no such allocation or import). */
disco_status_t disco__ipc_forget(disco_ipc_t *ipc, void *base);
disco_status_t disco__ipc_forget_import(disco_ipc_t *ipc, const disco_ipc_ref_t *ref);

/* The same on the process's context (device.c): arena.c gives its arena
 * up this way when its stream does not drain. */
disco_status_t disco__device_ipc_forget(void *base);
disco_status_t disco__device_ipc_forget_import(const disco_ipc_ref_t *ref);

/** Live processes other than this one holding the allocation at base
 *  (0 if it is not exported). */
uint32_t disco__ipc_importers(disco_ipc_t *ipc, const void *base);

typedef struct disco_ipc_stats {
    uint32_t allocs;      /* recorded allocations */
    uint32_t exported;    /* of which exported */
    uint32_t imports;     /* handles open here (import cache entries) */
    uint64_t import_refs; /* references over all of them */
    uint64_t self_refs;   /* imports of this process's own exports */
} disco_ipc_stats_t;

/** Counts of the context (for tests and debugging). */
void disco__ipc_stats(disco_ipc_t *ipc, disco_ipc_stats_t *stats_out);

#endif
