/* collective_meet.c - one collective call's meeting (coll_call.h;
 * collective.h, Inline F1-F3 and Trust): the arrive words, the barrier
 * meeting or the inline one, the checks of every member's post, and the
 * span checks of what the members posted. The barriers it uses and the
 * giving up are in collective.c. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "shm/text.h"
#include "disco/dtype.h"
#include "workers/data/arena.h"
#include "workers/data/coll_call.h"
#include "workers/data/coll_meet.h"
#include "workers/data/collective.h"
#include "workers/data/tensor_impl.h"
#include "workers/core/worker.h"

/* Copies member r's slot into c->post[r] and checks its numbers: the rank
 * count, every dimension, and the byte count (no overflow). */
static disco_status_t take_post(struct disco__coll_call *c, int r)
{
    const struct disco__coll_slot *m = disco__coll_member(c, r);
    struct disco__coll_posted *p = &c->post[r];
    p->in_block = m->in_block, p->in_off = m->in_off;
    p->out_block = m->out_block, p->out_off = m->out_off;
    p->ndim = m->ndim;
    p->dtype = m->dtype;
    p->dev_type = m->dev_type;
    memcpy(p->shape, m->shape, sizeof p->shape);
    bool ok = p->ndim >= 0 && p->ndim <= DISCO_MAX_NDIM;
    uint64_t n = disco_dtype_bytes(p->dtype);
    for (int d = 0; ok && d < p->ndim; d++)
        ok = p->shape[d] >= 0 && !__builtin_mul_overflow(n, (uint64_t)p->shape[d], &n);
    if (!ok)
        return disco_set_error(DISCO_E_PROTOCOL,
                               "%s: worker %d posted a malformed tensor (%d dims, or a size that "
                               "overflows)",
                               c->what, disco__coll_gid(c, r), (int)p->ndim);
    p->nbytes = n;
    p->inl = m->inl != 0;
    if (p->inl && n > DISCO__COLL_INLINE_MAX)
        return disco_set_error(
            DISCO_E_PROTOCOL, "%s: worker %d posted %llu bytes inline (at most %u)", c->what,
            disco__coll_gid(c, r), (unsigned long long)n, DISCO__COLL_INLINE_MAX);
    return DISCO_OK;
}

const void *disco__coll_inline(struct disco__coll_call *c, int rank)
{
    return disco__coll_member(c, rank)->data;
}

/* ---- the inline meeting (collective.h, Inline: F1-F3) ---- */

struct arrive_arg {
    struct disco__coll_call *c;
    bool all_inline;     /* every member arrived inline (valid once the wait ends) */
    int gone;            /* a member that ended the command without arriving, or -1 */
    size_t inline_bytes; /* this member's: the others' are the same, or the checks fail */
};

static bool all_arrived(void *p)
{
    struct arrive_arg *a = p;
    struct disco__coll_call *c = a->c;
    a->all_inline = true;
    for (int r = 0; r < c->size; r++) {
        uint64_t v;
        if (r == c->rank)
            continue;
        if (!disco__coll_has_arrived(c, r, &v)) {
            /* Its arrive word is read again after its mark (acquire), so
             * a member that arrived and then left is not taken for one
             * that never came. */
            if (disco__coll_has_left(c->w, c->base + r) && !disco__coll_has_arrived(c, r, &v)) {
                a->gone = c->base + r;
                return true;
            }
            return false;
        }
        if ((v & 1) == 0)
            a->all_inline = false;
    }
    /* Every word is there: fetch every post and inline copy at once (the
     * meeting's reads of them then hit), instead of a miss after a miss. */
    for (int r = 0; r < c->size; r++) {
        const char *m = (const char *)disco__coll_member(c, r);
        if (r == c->rank)
            continue;
        for (size_t off = 64; off < offsetof(struct disco__coll_slot, msg); off += 64)
            __builtin_prefetch(m + off);
        for (size_t off = 0; a->all_inline && off < a->inline_bytes; off += 64)
            __builtin_prefetch(m + offsetof(struct disco__coll_slot, data) + off);
    }
    return true;
}

/* F1: waits for every member's arrive word. Returns DISCO_OK with
 * *all_inline (F2 or F3), or the status the call is given up with. */
static disco_status_t inline_wait(struct disco__coll_call *c, bool *all_inline)
{
    struct arrive_arg a = {c, true, -1, c->me->inl_bytes};
    disco_status_t st = disco_wait_until(&c->bar->q, all_arrived, &a, c->w->wait);
    if (st == DISCO_OK && a.gone >= 0)
        st = disco__coll_gone_error(c, a.gone);
    if (st != DISCO_OK)
        return disco__coll_abandon_by(c, st, DISCO__LATE_ARRIVED);
    *all_inline = a.all_inline;
    return DISCO_OK;
}

/* Posts, meets the group, and returns the first member's failure (the same
 * verdict on every member: each reads the same slots after the meeting). */
disco_status_t disco__coll_meet(struct disco__coll_call *c)
{
    bool inl = c->me->inl != 0, all_inline = false;
    /* Release: the post (and inline bytes) before the word that says it
     * is complete; pairs with has_arrived's acquire. */
    atomic_store_explicit(&c->me->arrive, DISCO__COLL_ARRIVE(disco__coll_tag(c), inl),
                          memory_order_release);
    disco_status_t st = DISCO_OK;
    if (inl) {
        st = inline_wait(c, &all_inline);
        /* Then wake the members parked on the barrier's queue for arrive
         * words (K0-K3 of wait.h: the store above is K0). Not before the
         * wait: the wake's fence would hold this member until its post's
         * stores drained, while the wait overlaps them. A member parked
         * for this one's word is not kept waiting by it: whoever arrives
         * last finds every word stored, ends its wait at once and wakes
         * the queue, and a member whose wait failed wakes it too. A call
         * of one member has no one to wake (only members park on it). */
        if (c->size > 1)
            disco_waitq_wake(&c->bar->q);
    }
    if (st == DISCO_OK && !all_inline) /* F3, or a member that posted no inline bytes */
        st = disco__coll_barrier(c);
    if (st != DISCO_OK)
        return st;
    for (int r = 0; r < c->size; r++) {
        struct disco__coll_slot *m = disco__coll_member(c, r);
        if (m->seq != c->w->seq)
            return disco_set_error(DISCO_E_PROTOCOL, "worker %d is at another command",
                                   disco__coll_gid(c, r));
        uint32_t kind = m->kind, index = m->index;
        if (kind != c->me->kind || index != c->index)
            return disco_set_error(DISCO_E_MISMATCH,
                                   "worker %d called %s as its collective %u of the command, "
                                   "worker %d %s as its %u",
                                   disco__coll_gid(c, r), disco__coll_kind_name(kind), index,
                                   disco__worker_gid(c->w), disco__coll_kind_name(c->me->kind),
                                   c->index);
        int32_t arg = m->arg;
        if (arg != c->me->arg)
            return disco_set_error(DISCO_E_MISMATCH, "%s: worker %d gave %s %d, worker %d %d",
                                   c->what, disco__coll_gid(c, r),
                                   c->me->kind == DISCO__K_ALLREDUCE ? "op" : "root", (int)arg,
                                   disco__worker_gid(c->w), (int)c->me->arg);
        int32_t mst = m->status;
        if (mst != DISCO_OK)
            return disco__coll_posted_error(c, r, mst);
        if ((st = take_post(c, r)) != DISCO_OK)
            return st;
    }
    c->met = true;
    for (int r = 0; r < c->size; r++)
        c->dev = c->dev || c->post[r].dev_type != 0;
    return c->dev && !c->by_flags ? disco__coll_wait_members(c) : DISCO_OK;
}

/* The address of bytes [off, off + len) of the input (or output) member r
 * posted, or NULL unless they lie inside a tensor block of the heap. */
static char *span_of(struct disco__coll_call *c, int r, bool out, uint64_t off, uint64_t len)
{
    const struct disco__coll_posted *p = &c->post[r];
    uint64_t at;
    if (__builtin_add_overflow(out ? p->out_off : p->in_off, off, &at))
        return NULL;
    return disco__tensor_span(c->w->heap, out ? p->out_block : p->in_block, at, len);
}

/* Checks that the len bytes at off of member r's input (or output) lie in
 * the heap, and sets *p_out to them. A verdict every member reaches alike. */
disco_status_t disco__coll_span_check(struct disco__coll_call *c, int r, bool out, uint64_t off,
                                      uint64_t len, char **p_out)
{
    char *p = span_of(c, r, out, off, len);
    if (p == NULL)
        return disco_set_error(
            DISCO_E_PROTOCOL,
            "%s: worker %d posted an %s tensor outside the shared heap (block "
            "%#llx, offset %llu, %llu bytes)",
            c->what, disco__coll_gid(c, r), out ? "output" : "input",
            (unsigned long long)(out ? c->post[r].out_block : c->post[r].in_block),
            (unsigned long long)(out ? c->post[r].out_off : c->post[r].in_off),
            (unsigned long long)len);
    *p_out = p;
    return DISCO_OK;
}

disco_status_t disco__coll_dev_span(struct disco__coll_call *c, int r, bool out, uint64_t off,
                                    uint64_t len, char **p_out, DLDevice *dev_out)
{
    const struct disco__coll_posted *p = &c->post[r];
    uint64_t at;
    if (p->dev_type == 0 || c->w->arena == NULL ||
        __builtin_add_overflow(out ? p->out_block : p->in_block, off, &at))
        return disco_set_error(DISCO_E_PROTOCOL,
                               "%s: worker %d posted no device tensor, or worker %d has no arena",
                               c->what, disco__coll_gid(c, r), disco__worker_gid(c->w));
    void *ptr;
    disco_status_t st = c->owe_waits ? disco__coll_wait_members(c) : DISCO_OK;
    if (st == DISCO_OK)
        st = disco__arena_peer(c->w->arena, c->base + r, at, len, &ptr, dev_out);
    if (st == DISCO_OK)
        *p_out = ptr;
    return st;
}

/* Checks that every member's input has my dtype and shape (shape[0] too
 * unless any_dim0). */
disco_status_t disco__coll_same_inputs(struct disco__coll_call *c, bool any_dim0)
{
    for (int r = 0; r < c->size; r++) {
        const struct disco__coll_posted *m = &c->post[r];
        bool same = m->dev_type == c->me->dev_type && m->ndim == c->me->ndim &&
                    m->dtype.code == c->me->dtype.code && m->dtype.bits == c->me->dtype.bits &&
                    m->dtype.lanes == c->me->dtype.lanes;
        for (int d = any_dim0 ? 1 : 0; same && d < m->ndim; d++)
            same = m->shape[d] == c->me->shape[d];
        if (!same) {
            char a[32], b[32], sa[96], sb[96];
            return disco_set_error(
                DISCO_E_MISMATCH,
                "worker %d has a %s tensor of shape %s (device type %u), worker "
                "%d a %s of shape %s (device type %u)",
                disco__coll_gid(c, r), disco_dtype_str(m->dtype, a, sizeof a),
                disco__shape_str(m->shape, m->ndim, sa, sizeof sa), m->dev_type,
                disco__worker_gid(c->w), disco_dtype_str(c->me->dtype, b, sizeof b),
                disco__shape_str(c->me->shape, c->me->ndim, sb, sizeof sb), c->me->dev_type);
        }
    }
    return DISCO_OK;
}
