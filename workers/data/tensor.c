/* tensor.c - reference-counted tensors in the shared heap (see tensor_impl.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"
#include "workers/data/arena.h"
#include "workers/data/bind.h"
#include "workers/data/tensor_impl.h"

#define BLOCK_MAGIC 0x4b4c42524e4554ULL /* "TENRBLK" */

struct block_hdr {
    uint64_t magic;
    _Atomic uint64_t refs; /* references held by registers in any process */
    uint64_t nbytes;
    uint64_t reserved[5];
};
_Static_assert(sizeof(struct block_hdr) == DISCO_TENSOR_BLOCK_HDR, "block header");

struct dtensor {
    DLTensor dl; /* first: a DLTensor* of ours is a struct dtensor* */
    int64_t shape[DISCO_MAX_NDIM];
    disco_heap_t *heap;              /* NULL for a device tensor */
    struct disco__arena_blk *dblock; /* a device tensor's arena block, else NULL */
    uint64_t block;                  /* heap offset of the block header */
    uint64_t byte_offset;            /* of dl.data within the block's data */
};

/* The tensors this process holds, so that a DLTensor* handed to us can be
 * told apart from a user's own (a function returning a stack DLTensor). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dtensor **live;
static size_t nlive, live_cap;
/* Removals from live so far (L1, below): the generation of the threads'
 * cached answers. */
static _Atomic uint64_t live_gen;

static bool live_add(struct dtensor *t)
{
    pthread_mutex_lock(&live_lock);
    if (nlive == live_cap) {
        size_t cap = live_cap ? live_cap * 2 : 64;
        struct dtensor **p = realloc(live, cap * sizeof *p);
        if (p == NULL) {
            pthread_mutex_unlock(&live_lock);
            return false;
        }
        live = p;
        live_cap = cap;
    }
    live[nlive++] = t;
    pthread_mutex_unlock(&live_lock);
    return true;
}

static bool live_remove(const struct dtensor *t)
{
    bool found = false;
    pthread_mutex_lock(&live_lock);
    for (size_t i = nlive; i-- > 0;) { /* recent first: frees are mostly LIFO */
        if (live[i] == t) {
            live[i] = live[--nlive];
            found = true;
            /* L1. Release (under the lock, before t's memory can be
             * reused): every thread's cached answers (L2) are stale from
             * now on; pairs with is_ours_cached's acquire load. */
            atomic_fetch_add_explicit(&live_gen, 1, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* The answers "t is ours" this thread found last, each valid while
 * live_gen is the generation it was found at (L2). Nothing leaves the live
 * list without moving live_gen (L1), so an entry of the current
 * generation is a tensor still on the list: the address of a freed
 * tensor, reused by a caller's own DLTensor, is never taken for ours.
 * Per thread, so the hot path (a worker function calling collectives on
 * the same tensors) takes no lock. Test: is_ours_after_free
 * (tests/test_bounds.c). */
#define OURS_CACHE 4
static _Thread_local struct {
    const DLTensor *t[OURS_CACHE];
    uint64_t gen;
    unsigned next;
} ours_cache;

static bool is_ours_cached(const DLTensor *t)
{
    /* L2. Acquire: pairs with L1's release; a removal that happened
     * before this call (the caller's own free, or another thread's that
     * the caller synchronised with) is seen, and drops the cache. */
    uint64_t gen = atomic_load_explicit(&live_gen, memory_order_acquire);
    if (gen != ours_cache.gen) {
        memset(ours_cache.t, 0, sizeof ours_cache.t);
        ours_cache.gen = gen;
        return false;
    }
    for (int i = 0; i < OURS_CACHE; i++)
        if (ours_cache.t[i] == t)
            return true;
    return false;
}

bool disco__tensor_is_ours(const DLTensor *t)
{
    if (t != NULL && is_ours_cached(t))
        return true;
    bool found = false;
    pthread_mutex_lock(&live_lock);
    for (size_t i = nlive; i-- > 0 && !found;)
        found = &live[i]->dl == t;
    /* Relaxed: under the lock, which orders it after every L1 of a
     * removal the scan above already reflects. */
    uint64_t gen = atomic_load_explicit(&live_gen, memory_order_relaxed);
    pthread_mutex_unlock(&live_lock);
    if (found && t != NULL && gen == ours_cache.gen) {
        ours_cache.t[ours_cache.next] = t;
        ours_cache.next = (ours_cache.next + 1) % OURS_CACHE;
    }
    return found;
}

/* Elements of shape, checked: false when a dimension is negative or the
 * product overflows int64 (a zero dimension gives 0, whatever the others). */
static bool numel_checked(const int64_t *shape, int ndim, int64_t *out)
{
    bool zero = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return false;
        zero = zero || shape[i] == 0;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim && !zero; i++)
        if (__builtin_mul_overflow(n, shape[i], &n))
            return false;
    *out = zero ? 0 : n;
    return true;
}

int64_t disco_tensor_numel(const DLTensor *t)
{
    int64_t n;
    if (t->ndim < 0 || (t->ndim > 0 && t->shape == NULL) || !numel_checked(t->shape, t->ndim, &n))
        return INT64_MAX;
    return n;
}

size_t disco_tensor_nbytes(const DLTensor *t)
{
    size_t esz = disco_dtype_bytes(t->dtype), n;
    if (esz == 0)
        return 0;
    int64_t numel = disco_tensor_numel(t);
    if (numel == INT64_MAX || __builtin_mul_overflow((uint64_t)numel, esz, &n))
        return SIZE_MAX;
    return n;
}

const char *disco__shape_str(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "[", (long long)shape[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    if (used < cap)
        snprintf(buf + used, cap - used, "%s", ndim ? "]" : "[]");
    return buf;
}

disco_status_t disco_shape_nbytes(const int64_t *shape, int ndim, DLDataType dtype,
                                  size_t *nbytes_out)
{
    disco_status_t st = disco_dtype_check(dtype);
    if (st != DISCO_OK)
        return st;
    if (ndim < 0 || ndim > DISCO_MAX_NDIM)
        return disco_set_error(DISCO_E_INVAL, "ndim %d: must be 0..%d", ndim, DISCO_MAX_NDIM);
    if (ndim > 0 && shape == NULL)
        return disco_set_error(DISCO_E_INVAL, "a shape of %d dimensions is NULL", ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return disco_set_error(DISCO_E_INVAL, "dimension %d is negative (%lld)", i,
                                   (long long)shape[i]);
    int64_t numel;
    uint64_t nbytes;
    size_t esz = disco_dtype_bytes(dtype);
    if (!numel_checked(shape, ndim, &numel) ||
        __builtin_mul_overflow((uint64_t)numel, (uint64_t)esz, &nbytes) ||
        nbytes > DISCO_TENSOR_MAX_BYTES) {
        char sh[160], dt[DISCO_DTYPE_STR_MAX];
        return disco_set_error(DISCO_E_OVERFLOW,
                               "a %s tensor of shape %s: its size overflows or exceeds the "
                               "largest tensor (2^62 bytes)",
                               disco_dtype_str(dtype, dt, sizeof dt),
                               disco__shape_str(shape, ndim, sh, sizeof sh));
    }
    *nbytes_out = (size_t)nbytes;
    return DISCO_OK;
}

bool disco_tensor_same_layout(const DLTensor *a, const DLTensor *b)
{
    if (a->ndim != b->ndim || a->dtype.code != b->dtype.code || a->dtype.bits != b->dtype.bits ||
        a->dtype.lanes != b->dtype.lanes)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

bool disco_tensor_is_compact(const DLTensor *t)
{
    if (t->strides == NULL)
        return true;
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != want)
            return false;
        /* A product past int64 is no stride any tensor can have: whatever
         * the strides say, the shape is refused by the size checks. */
        if (__builtin_mul_overflow(want, t->shape[i], &want))
            return false;
    }
    return true;
}

static struct block_hdr *block_at(disco_heap_t *heap, uint64_t block)
{
    return disco_heap_ptr(heap, block);
}

static disco_status_t check_shape(const int64_t *shape, int ndim, DLDataType dtype,
                                  size_t *nbytes_out)
{
    return disco_shape_nbytes(shape, ndim, dtype, nbytes_out);
}

static disco_status_t wrap(disco_heap_t *heap, uint64_t block, uint64_t byte_offset,
                           const int64_t *shape, int ndim, DLDataType dtype, DLTensor **out)
{
    struct dtensor *t = calloc(1, sizeof *t);
    if (t == NULL || !live_add(t)) {
        free(t);
        return disco_set_error(DISCO_E_NOMEM, "tensor handle");
    }
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->heap = heap;
    t->block = block;
    t->byte_offset = byte_offset;
    t->dl.data = (char *)block_at(heap, block) + DISCO_TENSOR_BLOCK_HDR + byte_offset;
    t->dl.device = (DLDevice){kDLCPU, 0};
    t->dl.ndim = ndim;
    t->dl.dtype = dtype;
    t->dl.shape = t->shape;
    t->dl.strides = NULL;
    t->dl.byte_offset = 0;
    *out = &t->dl;
    return DISCO_OK;
}

/* A device tensor over blk (taking a new reference to it). */
static disco_status_t wrap_device(struct disco__arena_blk *blk, const int64_t *shape, int ndim,
                                  DLDataType dtype, DLTensor **out)
{
    struct dtensor *t = calloc(1, sizeof *t);
    if (t == NULL || !live_add(t)) {
        free(t);
        return disco_set_error(DISCO_E_NOMEM, "tensor handle");
    }
    disco__arena_blk_ref(blk);
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->dblock = blk;
    t->block = blk->off;
    t->dl.data = disco__arena_blk_ptr(blk);
    t->dl.device = disco__arena_device(blk->arena);
    t->dl.ndim = ndim;
    t->dl.dtype = dtype;
    t->dl.shape = t->shape;
    *out = &t->dl;
    return DISCO_OK;
}

disco_status_t disco__tensor_new_device(struct disco__arena *arena, const int64_t *shape, int ndim,
                                        DLDataType dtype, DLTensor **out)
{
    size_t nbytes;
    disco_status_t st = check_shape(shape, ndim, dtype, &nbytes);
    struct disco__arena_blk *blk;
    if (st != DISCO_OK || (st = disco__arena_alloc(arena, nbytes, &blk)) != DISCO_OK)
        return st;
    st = wrap_device(blk, shape, ndim, dtype, out);
    disco__arena_blk_release(blk); /* the tensor holds its own reference, or none is left */
    return st;
}

bool disco__tensor_is_device(const DLTensor *t)
{
    return ((const struct dtensor *)t)->dblock != NULL;
}

/* Copies the bytes of t (ours) to or from other, on other_dev: memcpy
 * between host memory; else on t's arena's stream (or the default stream
 * of the device side, for a heap tensor), synced before it returns. */
static disco_status_t copy_with(const DLTensor *t, void *other, DLDevice other_dev, bool out)
{
    const struct dtensor *d = (const struct dtensor *)t;
    size_t n = disco_tensor_nbytes(t);
    char *p = (char *)t->data + t->byte_offset;
    DLDevice dev = t->device;
    if (dev.device_type == kDLCPU && other_dev.device_type == kDLCPU) {
        if (n != 0)
            memcpy(out ? other : p, out ? p : other, n);
        return DISCO_OK;
    }
    disco_stream_t s = d->dblock != NULL ? disco__arena_stream(d->dblock->arena) : NULL;
    DLDevice sync_dev = d->dblock != NULL ? dev : other_dev;
    disco_status_t st = out ? disco_device_copy(other, other_dev, p, dev, n, s)
                            : disco_device_copy(p, dev, other, other_dev, n, s);
    if (st == DISCO_OK)
        st = disco_device_stream_sync(sync_dev, s);
    return st;
}

disco_status_t disco__tensor_to_host(const DLTensor *t, void *dst)
{
    return copy_with(t, dst, (DLDevice){kDLCPU, 0}, true);
}

disco_status_t disco__tensor_from_host(DLTensor *t, const void *src)
{
    return copy_with(t, (void *)src, (DLDevice){kDLCPU, 0}, false);
}

disco_status_t disco__tensor_copy_out(const DLTensor *t, DLTensor *dst)
{
    return copy_with(t, (char *)dst->data + dst->byte_offset, dst->device, true);
}

disco_status_t disco__tensor_copy_in(DLTensor *t, const DLTensor *src)
{
    return copy_with(t, (char *)src->data + src->byte_offset, src->device, false);
}

disco_status_t disco__tensor_new(disco_heap_t *heap, uint32_t owner, const int64_t *shape, int ndim,
                                 DLDataType dtype, DLTensor **out)
{
    size_t nbytes;
    disco_status_t st = check_shape(shape, ndim, dtype, &nbytes);
    if (st != DISCO_OK)
        return st;
    if (heap == NULL)
        return disco_set_error(DISCO_E_HEAP_EXHAUSTED, "this session has no shared heap");
    /* No overflow: nbytes <= DISCO_TENSOR_MAX_BYTES; the heap refuses what
     * it cannot hold, naming the size. */
    uint64_t block;
    st = disco_heap_alloc(heap, DISCO_TENSOR_BLOCK_HDR + nbytes, 64, owner, &block);
    if (st != DISCO_OK)
        return st;
    struct block_hdr *h = block_at(heap, block);
    h->magic = BLOCK_MAGIC;
    h->nbytes = nbytes;
    /* Relaxed: the block is not shared yet; sharing it (a barrier or a
     * command) publishes it. */
    atomic_store_explicit(&h->refs, 1, memory_order_relaxed);
    if ((st = wrap(heap, block, 0, shape, ndim, dtype, out)) != DISCO_OK) {
        disco_heap_free(heap, block);
        return st;
    }
    /* The process that makes a tensor is the one that fills it: its pages
     * go to that process's NUMA nodes. A hint: a failure leaves them where
     * they are, and the tensor is as good. */
    (void)disco__place_pages((*out)->data, nbytes);
    return DISCO_OK;
}

void *disco__tensor_span(const disco_heap_t *heap, uint64_t block, uint64_t off, uint64_t len)
{
    uint64_t end;
    if (heap == NULL || block < heap->arena_off + DISCO_HEAP_BLOCK_HDR ||
        block % DISCO_HEAP_ALIGN != 0 ||
        __builtin_add_overflow(block, (uint64_t)DISCO_TENSOR_BLOCK_HDR, &end) ||
        __builtin_add_overflow(end, off, &end) || __builtin_add_overflow(end, len, &end) ||
        end > heap->arena_end)
        return NULL;
    /* The header lies before end, so inside the heap: its fields may be
     * anything (another process wrote them), and only decide yes or no. */
    const struct block_hdr *h = (const struct block_hdr *)(heap->base + block);
    uint64_t nbytes = h->nbytes;
    if (h->magic != BLOCK_MAGIC || off > nbytes || len > nbytes - off)
        return NULL;
    return (char *)(heap->base + block) + DISCO_TENSOR_BLOCK_HDR + off;
}

disco_status_t disco__tensor_from_block(disco_heap_t *heap, uint64_t block, uint64_t byte_offset,
                                        const int64_t *shape, int ndim, DLDataType dtype,
                                        bool adopt, DLTensor **out)
{
    size_t nbytes;
    disco_status_t st = check_shape(shape, ndim, dtype, &nbytes);
    if (st != DISCO_OK)
        return st;
    if (disco__tensor_span(heap, block, byte_offset, nbytes) == NULL)
        return disco_set_error(DISCO_E_INVAL,
                               "heap block %llu: outside the heap, not a tensor, or too small",
                               (unsigned long long)block);
    struct block_hdr *h = block_at(heap, block);
    if (!adopt) /* relaxed: taking a reference needs no ordering, only the count */
        atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    if ((st = wrap(heap, block, byte_offset, shape, ndim, dtype, out)) != DISCO_OK &&
        atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
        disco_heap_free(heap, block);
    return st;
}

disco_status_t disco__tensor_ref(const DLTensor *t, DLTensor **out)
{
    const struct dtensor *d = (const struct dtensor *)t;
    if (d->dblock != NULL)
        return wrap_device(d->dblock, d->shape, t->ndim, t->dtype, out);
    return disco__tensor_from_block(d->heap, d->block, d->byte_offset, d->shape, t->ndim, t->dtype,
                                    false, out);
}

void disco__tensor_add_refs(const DLTensor *t, uint32_t n)
{
    const struct dtensor *d = (const struct dtensor *)t;
    /* Relaxed: the adopters learn of the block through a barrier (release /
     * acquire) after this. */
    atomic_fetch_add_explicit(&block_at(d->heap, d->block)->refs, n, memory_order_relaxed);
}

void disco__tensor_release(DLTensor *t)
{
    if (t == NULL)
        return;
    struct dtensor *d = (struct dtensor *)t;
    if (!live_remove(d))
        return; /* not ours: nothing to drop */
    if (d->dblock != NULL) {
        disco__arena_blk_release(d->dblock);
        free(d);
        return;
    }
    struct block_hdr *h = block_at(d->heap, d->block);
    /* acq_rel: our uses of the bytes happen before whoever frees the block
     * (release), and the freeing process sees every other's uses (acquire). */
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) {
        h->magic = 0;
        disco_heap_free(d->heap, d->block);
    }
    free(d);
}

uint64_t disco__tensor_block(const DLTensor *t)
{
    return ((const struct dtensor *)t)->block;
}

uint64_t disco__tensor_byte_offset(const DLTensor *t)
{
    return ((const struct dtensor *)t)->byte_offset;
}

disco_status_t disco__tensor_bytes_value(const DLTensor *t, disco_value_t *out)
{
    size_t n = disco_tensor_nbytes(t);
    if (n == SIZE_MAX)
        return disco_set_error(DISCO_E_OVERFLOW, "the tensor's size overflows");
    if (n > UINT32_MAX)
        return disco_set_error(DISCO_E_OVERFLOW,
                               "a tensor of %zu bytes cannot travel as a bytes value (at most "
                               "%u bytes); copy it with copy_from_worker0 or in slices",
                               n, UINT32_MAX);
    *out = disco_value_bytes((const char *)t->data + t->byte_offset, (uint32_t)n);
    return DISCO_OK;
}

/* ---- rebuilding a heap's counts (a session's recovery) ---- */

/* One block this process holds, and how many of its tensors hold it. */
struct held {
    uint64_t block;
    uint64_t refs;
};

static int cmp_held(const void *a, const void *b)
{
    uint64_t x = ((const struct held *)a)->block, y = ((const struct held *)b)->block;
    return (x > y) - (x < y);
}

struct rebuild {
    disco_heap_t *heap;
    struct held *held; /* sorted by block, one entry per block */
    size_t n;
};

/* The sweep's predicate (under the heap's lock): a block this process
 * holds keeps exactly its holders' count; any other is garbage. */
static bool keep_held(void *ctx, uint64_t off, uint32_t owner)
{
    (void)owner;
    struct rebuild *rb = ctx;
    struct held key = {.block = off};
    struct held *h = rb->n ? bsearch(&key, rb->held, rb->n, sizeof key, cmp_held) : NULL;
    struct block_hdr *b = block_at(rb->heap, off);
    if (h == NULL) {
        b->magic = 0; /* as the last release does: no longer a tensor block */
        return false;
    }
    /* Relaxed: no other process is left to use the count, and the caller
     * holds this process's only users of the session (tensor_impl.h);
     * the heap's lock, released after the walk, publishes it. */
    atomic_store_explicit(&b->refs, h->refs, memory_order_relaxed);
    return true;
}

disco_status_t disco__tensor_heap_rebuild(disco_heap_t *heap, size_t *freed_out)
{
    struct rebuild rb = {.heap = heap};
    pthread_mutex_lock(&live_lock);
    if (nlive != 0 && (rb.held = malloc(nlive * sizeof *rb.held)) == NULL) {
        pthread_mutex_unlock(&live_lock);
        return disco_set_error(DISCO_E_NOMEM, "rebuilding the heap's counts: %zu tensors", nlive);
    }
    for (size_t i = 0; i < nlive; i++)
        if (live[i]->dblock == NULL && live[i]->heap != NULL && live[i]->heap->sh == heap->sh)
            rb.held[rb.n++] = (struct held){.block = live[i]->block, .refs = 1};
    if (rb.n != 0)
        qsort(rb.held, rb.n, sizeof *rb.held, cmp_held);
    size_t k = 0; /* merge duplicates: one entry per block, its holders counted */
    for (size_t i = 0; i < rb.n; i++) {
        if (k != 0 && rb.held[k - 1].block == rb.held[i].block)
            rb.held[k - 1].refs++;
        else
            rb.held[k++] = rb.held[i];
    }
    rb.n = k;
    /* live_lock stays held: no tensor of this process comes or goes during
     * the walk (lock order: live_lock, then the heap's). */
    disco_status_t st = disco_heap_sweep(heap, keep_held, &rb, freed_out);
    pthread_mutex_unlock(&live_lock);
    free(rb.held);
    return st;
}
