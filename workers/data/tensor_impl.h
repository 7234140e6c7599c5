/* tensor_impl.h - tensors as disco keeps them (internal).
 *
 * A tensor disco owns is a process-local struct around a DLTensor, holding a
 * reference to a block of the session's shared heap. The block starts with a
 * header whose reference count is shared by every process, so registers on
 * different workers can hold the same bytes (broadcast, scatter views). */
#ifndef DISCO_WORKERS_TENSOR_IMPL_H
#define DISCO_WORKERS_TENSOR_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "disco/shm/heap.h"
#include "disco/tensor.h"

#define DISCO_TENSOR_BLOCK_HDR 64u /* header before the data, keeps data 64-aligned */

/** A new tensor in heap (allocated for owner, refcount 1). */
disco_status_t disco__tensor_new(disco_heap_t *heap, uint32_t owner, const int64_t *shape, int ndim,
                                 DLDataType dtype, DLTensor **out);

struct disco__arena;

/** A new device tensor in arena (a worker's device arena, arena.h), refcount
 *  1, contents unspecified. Returns DISCO_OK, the shape errors of
 *  disco_shape_nbytes, DISCO_E_NOMEM (the arena is full: the detail names
 *  the worker and the device). */
disco_status_t disco__tensor_new_device(struct disco__arena *arena, const int64_t *shape, int ndim,
                                        DLDataType dtype, DLTensor **out);

/** Whether t (ours) is a device tensor (its bytes are in a device arena,
 *  not host memory). */
bool disco__tensor_is_device(const DLTensor *t);

/** Copies a device tensor's bytes to host memory dst (nbytes of t), on the
 *  arena's stream, synced before it returns. Returns DISCO_OK or what
 *  disco_device_copy / disco_device_stream_sync return. */
disco_status_t disco__tensor_to_host(const DLTensor *t, void *dst);

/** Fills a device tensor from host memory src (nbytes of t), synced before
 *  it returns. Returns as disco__tensor_to_host. */
disco_status_t disco__tensor_from_host(DLTensor *t, const void *src);

/** Copies t's bytes (ours: heap or device) into dst (same layout, compact,
 *  in host memory or on a device), or src's into t: memcpy between host
 *  memory, else disco_device_copy on t's arena's stream (a heap tensor: the
 *  device side's default stream), synced before it returns. Returns
 *  DISCO_OK or what disco_device_copy / disco_device_stream_sync return
 *  (DISCO_E_NO_DEVICE for a pair of device types no copy joins). */
disco_status_t disco__tensor_copy_out(const DLTensor *t, DLTensor *dst);
disco_status_t disco__tensor_copy_in(DLTensor *t, const DLTensor *src);

/** A tensor over existing heap bytes: block (a heap offset from
 *  disco__tensor_block), byte_offset into its data. adopt: take over a
 *  reference someone else added for us (see disco__tensor_add_refs);
 *  otherwise add one. */
disco_status_t disco__tensor_from_block(disco_heap_t *heap, uint64_t block, uint64_t byte_offset,
                                        const int64_t *shape, int ndim, DLDataType dtype,
                                        bool adopt, DLTensor **out);

/** The address of bytes [off, off + len) of the tensor block at heap offset
 *  block (from disco__tensor_block, or posted by another process), or NULL
 *  unless the block lies in the heap's blocks, holds a tensor, and the
 *  bytes lie within its data. For offsets that come from shared memory:
 *  whatever their values, the answer never points outside the heap. */
void *disco__tensor_span(const disco_heap_t *heap, uint64_t block, uint64_t off, uint64_t len);

/** Another reference to t's bytes (a new DLTensor). t must be ours. */
disco_status_t disco__tensor_ref(const DLTensor *t, DLTensor **out);

/** Adds n references to t's block, for n other processes to adopt. */
void disco__tensor_add_refs(const DLTensor *t, uint32_t n);

/** Drops one reference; frees the block with the last. NULL is harmless. */
void disco__tensor_release(DLTensor *t);

/** Whether t is a tensor disco made (and still holds). */
bool disco__tensor_is_ours(const DLTensor *t);

/** The bytes of t as a bytes value (borrowing t's data), for an answer
 *  that carries a tensor's contents (debug get). Returns DISCO_OK;
 *  DISCO_E_OVERFLOW (t's size overflows, or is 4 GiB or more, which a
 *  bytes value cannot say: its length is 32 bits). */
disco_status_t disco__tensor_bytes_value(const DLTensor *t, disco_value_t *out);

/** Rebuilds heap's tensor blocks after every other process that used it
 *  has ended (a session's recovery): a block that tensors of this process
 *  hold gets their number as its count (what dead processes held is
 *  dropped), and every other live block is freed (a dead process's own, or
 *  one only dead processes held). *freed_out (NULL: not wanted) is the
 *  bytes freed. Not thread-safe against this process's other users of
 *  heap's tensors (their releases during the walk would be miscounted).
 *  Returns DISCO_OK, DISCO_E_NOMEM, or what disco_heap_sweep returns. */
disco_status_t disco__tensor_heap_rebuild(disco_heap_t *heap, size_t *freed_out);

/** Heap offset of t's block and byte offset of t's data within it. */
/** "[d0, d1, ...]" of shape ("[]": no dimensions) into buf (cap bytes, cut
 *  to fit), for messages; returns buf. ndim must be 0..DISCO_MAX_NDIM. */
const char *disco__shape_str(const int64_t *shape, int ndim, char *buf, size_t cap);

uint64_t disco__tensor_block(const DLTensor *t);
uint64_t disco__tensor_byte_offset(const DLTensor *t);

#endif
