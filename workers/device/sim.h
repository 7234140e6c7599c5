/* sim.h - the simulated GPU (kDLExtDev, named "sim"), internal.
 *
 * sim_dev.c: the device count and memory limit, taking another process's fd.
 * sim.c: memory (one memfd per allocation, mapped
 * PROT_NONE at its "device" address so a host dereference faults, and a
 * second, private read-write mapping the copies use), copies, and the IPC
 * backend (handles name the exporter's pid and memfd; import takes the fd
 * with pidfd_getfd, or opens /proc/<pid>/fd/<n> when that is refused).
 * sim_stream.c: streams (queues run when synced), with the record and wait
 * operations of events. sim_event.c: interprocess events (a counter pair in
 * a memfd). sim_slice.c: a device shared by several processes (its
 * identity, DISCO_SIM_MPS, and the time slices its kernels run in without
 * MPS: docs/gpu-sharing.md). Arrows: sim_dev <- sim_stream <- sim_event;
 * sim.c uses sim_dev and sim_stream; sim_dev <- sim_slice <- sim_stream
 * (the kernels' slices).
 *
 * State is per process; a forked child drops what it inherited (its
 * mappings are not inherited: MADV_DONTFORK) and starts empty, as a CUDA
 * child must not use its parent's context.
 */
#ifndef DISCO_WORKERS_DEVICE_SIM_H
#define DISCO_WORKERS_DEVICE_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/device.h"
#include "disco/status.h"

/** The device table of kDLExtDev (without the IPC bookkeeping, which
 *  device.c adds as for CUDA). Thread-safe. */
extern const disco_device_api_t disco__sim_api;

#define DISCO_SIM_MAX_DEVICES 64

/** The number of sim devices: disco_device_sim_set_count's, else
 *  DISCO_SIM_GPUS (read once; unset or not a count: 0). Thread-safe. */
int disco__sim_count(void);

/** Bytes a process may allocate per sim device: DISCO_SIM_MEM_MB MiB (read
 *  once; default 4096). Thread-safe. */
size_t disco__sim_mem_limit(void);

/** DISCO_OK if device_id names a sim device this process may use; else
 *  DISCO_E_NO_DEVICE with "no sim device: set DISCO_SIM_GPUS" (none
 *  configured), "sim:<id>: no such device" or "forked from pid N" (the
 *  fork rule, disco__sim_fork_spoiled), or DISCO_E_SYS with the device's
 *  sticky fault (disco__sim_fault). fn names the caller in the detail.
 *  Thread-safe. */
disco_status_t disco__sim_check_device(int device_id, const char *fn);

/** The calling thread's current sim device (as cudaGetDevice: 0 until a
 *  call names another). Every sim call that names a device makes it
 *  current, as the CUDA calls do (cudaSetDevice): set_device, alloc, free,
 *  copy (the copy's device: dst's if sim, else src's), the stream calls
 *  and the event calls but export, sync and query. An import of memory
 *  (disco__sim_open_handle) is mapped for the current device only: a
 *  kernel on another device that touches it faults (disco__sim_shadow).
 *  Thread-safe (per thread). */
int disco__sim_current(void);
void disco__sim_make_current(int device_id);

/** Records a fault of device_id in this process (the detail fmt, ...) and
 *  returns DISCO_E_SYS with it: as a CUDA illegal address, sticky: every
 *  later disco__sim_check_device of that device in this process fails with
 *  it (a forked child starts without). Thread-safe. */
disco_status_t disco__sim_fault(int device_id, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Whether a child forked from this process now could not use the sim
 *  device: DISCO_SIM_FORK_STRICT is set (sim then follows CUDA's fork
 *  rule: a process forked after its parent used the device cannot use it,
 *  each check failing with DISCO_E_NO_DEVICE, "forked from pid N") and
 *  this process has used it. Thread-safe. */
bool disco__sim_fork_spoiled(void);

/** Whether ptr lies inside sim memory of this process (an allocation or an
 *  opened import). Thread-safe. */
bool disco__sim_owns(const void *ptr);

/** Whether handle is a sim memory handle (by its magic). Pure. */
bool disco__sim_is_handle(const disco_ipc_handle_t *handle);

/** The IPC backend calls (see ipc.h) for sim memory. ctx is unused.
 *  get_handle: DISCO_OK or DISCO_E_INVAL (not a sim allocation's base).
 *  open_handle: DISCO_OK; DISCO_E_INVAL (not a sim handle, the memfd is not
 *  the one exported); DISCO_E_SYS (own handle, already open here, the fd
 *  cannot be taken, mmap failed). close_handle: DISCO_OK, DISCO_E_INVAL
 *  (not an open import's base). Thread-safe. */
disco_status_t disco__sim_get_handle(void *ctx, void *base, disco_ipc_handle_t *handle_out);
disco_status_t disco__sim_open_handle(void *ctx, const disco_ipc_handle_t *handle, void **base_out);
disco_status_t disco__sim_close_handle(void *ctx, void *base);

/* Tests only: when set, disco__sim_take_fd skips pidfd_getfd (as if
 * refused) and takes the /proc path. Set before any import. */
extern bool disco__sim_no_pidfd_getfd;

/* The seals every sim memfd (allocation, event) carries from its sizing on
 * (F_SEAL_SHRINK | F_SEAL_GROW): no process that maps one can be made to
 * fault by another truncating it. */
#define DISCO_SIM_SEALS (0x0002 | 0x0004)

/** Seals fd (a memfd made with MFD_ALLOW_SEALING, already sized) with
 *  DISCO_SIM_SEALS. what and device_id name it in errors. Returns DISCO_OK
 *  or DISCO_E_NOMEM (fcntl failed; the detail gives errno). */
disco_status_t disco__sim_seal(int fd, const char *what, int device_id);

/** A file descriptor of this process for fd of process pid, checked to be
 *  the file with inode ino and sealed with DISCO_SIM_SEALS: pidfd_open +
 *  pidfd_getfd, or open of /proc/<pid>/fd/<fd> when that is refused. what
 *  and device_id name the object in errors. Returns DISCO_OK, DISCO_E_INVAL
 *  (another file is there now, or it is not sealed), DISCO_E_SYS (neither
 *  way worked; the detail gives both errnos). */
disco_status_t disco__sim_take_fd(int32_t pid, int32_t fd, uint64_t ino, const char *what,
                                  int device_id, int *fd_out);

/* ---- streams (sim_stream.c) ------------------------------------------- */

/** Queues memmove(dst, src, n) on stream (NULL: the default stream of
 *  device_id); dst and src are host addresses (sim memory through its
 *  private mapping); across: a side is another process's memory (the copy
 *  then waits DISCO_SIM_PEER_COPY_US first, when set). Runs at the stream's
 *  sync, not before. Returns
 *  DISCO_OK, DISCO_E_INVAL (not a stream of this process), DISCO_E_NOMEM. */
disco_status_t disco__sim_enqueue_copy(int device_id, disco_stream_t stream, void *dst,
                                       const void *src, size_t n, bool across);

/** Queues fn(arg) on stream (the sim's kernels, ar_sim.c): run at the
 *  stream's sync, in order with its copies; fn owns arg (it frees it, even
 *  when it fails). Returns as disco__sim_enqueue_copy (arg is then still
 *  the caller's). */
disco_status_t disco__sim_enqueue_call(int device_id, disco_stream_t stream,
                                       disco_status_t (*fn)(void *arg), void *arg);

/** DISCO_SIM_PEER_COPY_US, as the copies use it (0: none). Thread-safe. */
uint32_t disco__sim_peer_copy_us(void);

/** The read-write address, in this process, of n bytes of sim memory at
 *  p (an allocation of this process or an opened import) as a kernel on
 *  device_id reads it; *across set when they are another process's. fn
 *  names the caller in errors.
 *  Returns DISCO_OK; DISCO_E_INVAL (not sim memory here, or overrunning
 *  the allocation); DISCO_E_SYS: an import opened for another device than
 *  device_id (not mapped there: an illegal address, a sticky fault of
 *  device_id, disco__sim_fault). Thread-safe. */
disco_status_t disco__sim_shadow(const void *p, size_t n, int device_id, const char *fn, char **out,
                                 bool *across);

/** Runs every stream of this process to its end (before memory is unmapped:
 *  cudaFree and cudaIpcCloseMemHandle synchronize too). Returns DISCO_OK or
 *  the first failed operation's status. */
disco_status_t disco__sim_flush_all(void);

/** The stream calls of the sim device table: what disco_device_stream_*
 *  document. create: DISCO_OK, DISCO_E_NO_DEVICE, DISCO_E_NOMEM. free (runs
 *  the stream first) and sync: DISCO_OK, DISCO_E_NO_DEVICE, DISCO_E_INVAL
 *  (not a stream of this process), DISCO_E_SYS (a queued wait failed: its
 *  recorder died). Thread-safe. */
disco_status_t disco__sim_stream_create(int device_id, disco_stream_t *stream_out);
disco_status_t disco__sim_stream_free(int device_id, disco_stream_t stream);
disco_status_t disco__sim_stream_sync(int device_id, disco_stream_t stream);

/** Forgets the streams inherited from a parent (in a forked child). */
void disco__sim_streams_reset(void);

/** Whether process pid runs (exists, not a zombie: a dead process its
 *  parent has not reaped yet). sim_dev.c. Thread-safe. */
bool disco__sim_pid_alive(int32_t pid);

/* ---- several processes on one sim device (sim_slice.c) ----------------- */

/** The sim table's physical_id ("sim", then the index as 4 bytes) and mps
 *  (DISCO_SIM_MPS=1) ops: DISCO_OK or DISCO_E_NO_DEVICE. Thread-safe. */
disco_status_t disco__sim_physical_id(int device_id, disco_device_uid_t *id_out);
disco_status_t disco__sim_mps(int device_id, bool *on_out);

/** Bytes of the context words of every sim device (shared memory, 64-byte
 *  aligned, zeroed before any process uses them). Pure. */
size_t disco__sim_slices_bytes(void);

/** Binds this process to the context words at mem (the session's; NULL:
 *  unbinds): its kernels then run in time slices on a device other
 *  processes bound to the same words use, unless DISCO_SIM_MPS=1. Waits
 *  for a kernel of this process that runs (it holds the binding from
 *  disco__sim_slice_enter to disco__sim_slice_leave). Unbind before mem
 *  is unmapped. Thread-safe. */
void disco__sim_slices_bind(void *mem);

/** Context switches of sim device device_id so far (slices its kernels
 *  handed to a waiting process), in the words this process is bound to; 0
 *  when unbound. Thread-safe. */
uint32_t disco__sim_slice_switches(int device_id);

/** Around a kernel (sim_stream.c, engine lock held; every enter is
 *  followed by a leave on the same thread): takes device_id's context word
 *  (waiting for its turn, under the thread's watch) and gives it back. A
 *  failed take is kept: the kernel runs until its first wait, where
 *  disco__sim_slice_yield returns it. Returns DISCO_OK or the watch's
 *  status, with a detail saying the device is time-sliced. */
disco_status_t disco__sim_slice_enter(int device_id);
void disco__sim_slice_leave(void);

/** A kernel's wait loop calls this between looks at its flags: once its
 *  slice is over and another process waits for the device, hands the
 *  context over and waits for its next turn. Returns DISCO_OK, or the
 *  status of a wait for the turn that the watch ended (the detail says
 *  the device is time-sliced between processes without MPS). */
disco_status_t disco__sim_slice_yield(void);

#endif
