/* collective_allreduce.c - the allreduce body that the builtins
 * (disco.allreduce, disco.allreduce_into) and disco_ctx_allreduce share
 * (coll_call.h): the inline meeting for small host tensors (collective.h,
 * Inline), device tensors (collective_dev.c), the chain across nodes
 * (collective_net.c), and the heap's reduce-scatter + allgather. */
#include <stdint.h>
#include <string.h>

#include "disco/dtype.h"
#include "workers/core/worker.h"
#include "workers/data/coll_call.h"
#include "workers/data/collective.h"
#include "workers/data/collective_net.h"

#define CHUNK_BYTES (256u * 1024u) /* reduce, then copy out, a cache-sized piece at a time */

/* The inline copy. The slot's lines were read by the other members two
 * collectives ago, so each store must take its line back from their
 * caches before the arrive word behind it can be seen. On x86 a string
 * move (fast strings, ERMS) takes whole lines without reading their old
 * bytes; on the 2-core KVM Xeon, an allreduce of 1 KiB at N = 2 took
 * ~0.88 us with it against ~0.97 us with glibc's vector memcpy (medians of
 * 20000-call rounds, the same build, under SCHED_FIFO; the VM's figures
 * move between runs by more than that, the order did not). */
static void copy_to_slot(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
    memcpy(dst, src, n);
#endif
}

/* Copies x's bytes into this member's slot when they may go inline
 * (collective.h, Inline): host memory, at most DISCO__COLL_INLINE_MAX
 * bytes, a call within one node. */
static void post_inline(struct disco__coll_call *c, const DLTensor *x)
{
    size_t nb = disco_tensor_nbytes(x);
    if (x->device.device_type != kDLCPU || c->across || nb > DISCO__COLL_INLINE_MAX)
        return;
    copy_to_slot(c->me->data, (const char *)x->data + x->byte_offset, nb);
    c->me->inl = 1;
    c->me->inl_bytes = (uint32_t)nb;
}

/* After a meeting with same inputs: whether every member posted inline
 * (then all did on every member: the verdict is on the slots). */
static bool all_inline(const struct disco__coll_call *c)
{
    for (int r = 0; r < c->size; r++)
        if (!c->post[r].inl)
            return false;
    return true;
}

/* Where the fold reads this member's own input: the input itself, whose
 * bytes its slot copy repeats (no other process writes it) and whose lines
 * no peer is pulling, unlike the slot's. On the 2-core KVM Xeon, a raw
 * exchange of 1 KiB between two processes took ~0.50 us folding its own
 * bytes from the input against ~0.68 us from its slot (200000 rounds a
 * run): reading a line that the peer is fetching at that moment waits for
 * the fetch. disco_ctx_allreduce's bench figure went from 0.72-0.91 us to
 * 0.66-0.68 us (alternated runs). The slot copy when the output overlaps
 * the input other than exactly, which disco_reduce does not allow: no
 * caller reaches that today (two tensors of the session never overlap;
 * comm.h stages every other tensor, and comm_inline_reuse checks such
 * overlapping views), so it is only a guard. */
static const void *own_source(struct disco__coll_call *c, const DLTensor *x, const char *dst,
                              size_t nb)
{
    const char *in = (const char *)x->data + x->byte_offset;
    if (in == dst || in + nb <= dst || dst + nb <= in)
        return in;
    return disco__coll_inline(c, c->rank);
}

disco_status_t disco__coll_allreduce_into(disco_ctx_t *ctx, bool in_group, disco_status_t pre,
                                          const DLTensor *xc, DLTensor *out, disco_reduce_op_t op)
{
    struct disco__coll_call c;
    disco__coll_begin(ctx, in_group, DISCO__K_ALLREDUCE, &c);
    DLTensor *x = (DLTensor *)xc; /* read only: the device path's signature is wider */
    disco_status_t st = pre;
    if (st == DISCO_OK) {
        disco__coll_post_tensor(&c, x, false);
        disco__coll_post_tensor(&c, out, true);
        /* Device tensors: by kernels that meet through flags (no events at
         * the barriers), in groups small enough. */
        c.by_flags = x->device.device_type != kDLCPU && disco__coll_dev_by_kernel(&c);
        disco__coll_net_refuse_op(&c, op, x->device.device_type != kDLCPU);
        post_inline(&c, x);
        c.me->arg = (int32_t)op; /* every member must fold with the same op */
    } else {
        disco__coll_fail(&c, st, disco_last_error());
    }
    if ((st = disco__coll_meet(&c)) != DISCO_OK ||
        (st = disco__coll_same_inputs(&c, false)) != DISCO_OK)
        return st;               /* same verdict, same barriers on every member */
    if (c.post[0].dev_type != 0) /* by kernels, or staged through host memory */
        return disco__coll_dev_allreduce(&c, op, x, out);

    size_t esz = disco_dtype_bytes(x->dtype), count = (size_t)disco_tensor_numel(x);
    if (all_inline(&c)) { /* every input is in its slot: fold them, no barrier after */
        const void *srcs[DISCO_MAX_WORKERS];
        char *dst = (char *)out->data + out->byte_offset;
        for (int r = 0; r < c.size; r++)
            srcs[r] = disco__coll_inline(&c, r);
        srcs[c.rank] = own_source(&c, x, dst, count * esz);
        return disco_reduce(op, x->dtype, dst, srcs, c.size, count);
    }
    char *ins[DISCO_MAX_WORKERS], *outs[DISCO_MAX_WORKERS];
    for (int r = 0; r < c.size; r++)
        if ((st = disco__coll_span_check(&c, r, false, 0, count * esz, &ins[r])) != DISCO_OK ||
            (st = disco__coll_span_check(&c, r, true, 0, count * esz, &outs[r])) != DISCO_OK)
            return st; /* a verdict on the slots: the same on every member */
    if (c.across)      /* a chain through the nodes (collective_net.c) */
        return disco__coll_net_allreduce(&c, op, x->dtype, ins, outs);
    size_t lo = count * (size_t)c.rank / (size_t)c.size;
    size_t hi = count * (size_t)(c.rank + 1) / (size_t)c.size;
    size_t step = CHUNK_BYTES / esz ? CHUNK_BYTES / esz : 1;
    const void *srcs[DISCO_MAX_WORKERS];
    for (size_t i = lo; i < hi; i += step) {
        size_t m = hi - i < step ? hi - i : step;
        for (int r = 0; r < c.size; r++)
            srcs[r] = ins[r] + i * esz;
        char *mine = (char *)out->data + i * esz;
        if ((st = disco_reduce(op, x->dtype, mine, srcs, c.size, m)) != DISCO_OK)
            break; /* cannot happen after the checks above; keep the barrier count */
        for (int r = 0; r < c.size; r++)
            if (r != c.rank)
                memcpy(outs[r] + i * esz, mine, m * esz);
    }
    disco_status_t bst = disco__coll_barrier(&c);
    return st != DISCO_OK ? st : bst; /* same verdict, same barriers on every member */
}
